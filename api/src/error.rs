//! Every error leaves as `application/problem+json` (RFC 9457). Validation
//! errors list each field; 5xx bodies say nothing about internals (the cause
//! is logged instead).
//!
//! An error's texts often quote what the request held (a field path with a
//! key, a value in a message). Each site quotes a short prefix
//! (`domain::text::quoted`); here, every text of every problem is bounded
//! and escaped on its way out whatever its site did ([`DETAIL_MAX_CHARS`],
//! [`FIELD_MAX_CHARS`], [`MESSAGE_MAX_CHARS`]): an answer is never larger
//! than a few dozen KiB and never carries a raw control character.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use domain::job::FieldError;
use serde::Serialize;
use utoipa::ToSchema;

/// The media type of a JSON Merge Patch (RFC 7396): the one patch format
/// accepted, named by a 415's `Accept-Patch`.
pub const MERGE_PATCH: &str = "application/merge-patch+json";

/// An error (RFC 9457), sent as `application/problem+json`.
#[derive(Serialize, ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    #[schema(example = "about:blank")]
    pub kind: String,
    #[schema(example = "Invalid request")]
    pub title: String,
    #[schema(example = 422)]
    pub status: u16,
    pub detail: String,
    /// Present on validation errors (422): one entry per bad field.
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

#[derive(Debug)]
pub enum ApiError {
    Validation(Vec<FieldError>),
    BadRequest(String),
    NotFound(String),
    PreconditionFailed(String),
    Conflict(String),
    PayloadTooLarge(String),
    /// A `PATCH` body of a media type other than a merge patch's.
    UnsupportedMediaType(String),
    Unauthorized,
    /// 401 for a credential other than an API token (a completion token),
    /// saying what was wrong with it.
    UnauthorizedBecause(String),
    /// The token's role does not allow the operation.
    Forbidden(String),
    MethodNotAllowed,
    /// Over a rate quota (fires made on request): 429 with `Retry-After`.
    TooManyRequests {
        detail: String,
        retry_after_secs: u64,
    },
    Unavailable(String),
    Internal(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for ApiError {
    fn from(e: E) -> Self {
        let e = e.into();
        // No connection to be had (all busy past the pool's wait, or the
        // database unreachable) is the service's state, not a bug: 503,
        // which clients retry.
        if let Some(pool) = e.downcast_ref::<deadpool_postgres::PoolError>() {
            tracing::warn!(error = %pool, "no database connection for a request");
            return ApiError::Unavailable(
                "the database has no connection free for this request right now; try again shortly".to_owned(),
            );
        }
        // A NUL character in any text of the request: Postgres text cannot
        // hold one. Fields known to take free text say so by name; this
        // keeps any other from being a 500.
        if e.chain()
            .filter_map(|c| c.downcast_ref::<tokio_postgres::Error>())
            .any(|pg| pg.code() == Some(&tokio_postgres::error::SqlState::CHARACTER_NOT_IN_REPERTOIRE))
        {
            return ApiError::BadRequest(
                "the request holds a NUL character (U+0000) in a text value, which cannot be stored or searched for"
                    .to_owned(),
            );
        }
        ApiError::Internal(e)
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// Characters of a problem's `detail`.
pub const DETAIL_MAX_CHARS: usize = 2_000;
/// Characters of a field error's `field` (a path quoting user keys).
pub const FIELD_MAX_CHARS: usize = 400;
/// Characters of a field error's `message`.
pub const MESSAGE_MAX_CHARS: usize = 500;

/// `s` as a problem may carry it: at most `max` characters, hidden ones
/// escaped.
fn bounded(s: &str, max: usize) -> String {
    domain::text::excerpt(s, max)
}

pub fn field(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::Validation(vec![FieldError::new(field, message)])
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut retry_after = None;
        let (status, title, detail, errors) = match self {
            ApiError::Validation(errors) => {
                let errors: Vec<FieldError> = domain::job::cap_field_errors(errors)
                    .into_iter()
                    .map(|e| {
                        FieldError::new(bounded(&e.field, FIELD_MAX_CHARS), bounded(&e.message, MESSAGE_MAX_CHARS))
                    })
                    .collect();
                let detail =
                    errors.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; ");
                (StatusCode::UNPROCESSABLE_ENTITY, "Invalid request", detail, Some(errors))
            }
            ApiError::BadRequest(d) => (StatusCode::BAD_REQUEST, "Bad request", d, None),
            ApiError::NotFound(d) => (StatusCode::NOT_FOUND, "Not found", d, None),
            ApiError::PreconditionFailed(d) => (StatusCode::PRECONDITION_FAILED, "Precondition failed", d, None),
            ApiError::Conflict(d) => (StatusCode::CONFLICT, "Conflict", d, None),
            ApiError::PayloadTooLarge(d) => (StatusCode::PAYLOAD_TOO_LARGE, "Payload too large", d, None),
            ApiError::UnsupportedMediaType(d) => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "Unsupported media type", d, None)
            }
            ApiError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "a valid bearer token is required (Authorization: Bearer <token>)".to_owned(),
                None,
            ),
            ApiError::UnauthorizedBecause(d) => (StatusCode::UNAUTHORIZED, "Unauthorized", d, None),
            ApiError::Forbidden(d) => (StatusCode::FORBIDDEN, "Forbidden", d, None),
            ApiError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "Method not allowed",
                "this route does not accept that HTTP method".to_owned(),
                None,
            ),
            ApiError::TooManyRequests { detail, retry_after_secs } => {
                retry_after = Some(retry_after_secs);
                (StatusCode::TOO_MANY_REQUESTS, "Too many requests", detail, None)
            }
            ApiError::Unavailable(d) => (StatusCode::SERVICE_UNAVAILABLE, "Service unavailable", d, None),
            ApiError::Internal(e) => {
                tracing::error!(error = %format!("{e:#}"), "internal error");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal server error",
                    "the server failed to handle the request; see its logs".to_owned(),
                    None,
                )
            }
        };
        let problem = Problem {
            kind: "about:blank".to_owned(),
            title: title.to_owned(),
            status: status.as_u16(),
            detail: bounded(&detail, DETAIL_MAX_CHARS),
            errors: errors.unwrap_or_default(),
        };
        let body = serde_json::to_string(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let Some(secs) = retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            // RFC 5789 §2.2: say which patch formats are accepted.
            response.headers_mut().insert("accept-patch", HeaderValue::from_static(MERGE_PATCH));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body_of(e: ApiError) -> serde_json::Value {
        let response = e.into_response();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// Whatever a site put into an error, the answer is small and carries
    /// no raw control character.
    #[tokio::test]
    async fn every_problem_text_leaves_bounded_and_escaped() {
        let huge = format!("\u{1b}[2J{}", "x".repeat(200_000));
        let many = (0..500).map(|i| FieldError::new(format!("{huge}{i}"), huge.clone())).collect();
        let body = body_of(ApiError::Validation(many)).await;
        let text = body.to_string();
        assert!(text.len() < 60_000, "{} bytes", text.len());
        assert!(!text.contains('\u{1b}'), "a raw ESC");
        assert!(body["errors"][0]["field"].as_str().unwrap().starts_with("\\u{1b}[2J"), "{:.100}", text);
        for e in [ApiError::BadRequest(huge.clone()), ApiError::NotFound(huge.clone()), ApiError::Conflict(huge)] {
            let body = body_of(e).await;
            assert!(body["detail"].as_str().unwrap().chars().count() <= DETAIL_MAX_CHARS + 1 + 8);
            assert!(!body.to_string().contains('\u{1b}'));
        }
    }
}
