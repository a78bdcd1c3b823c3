//! Every error leaves as `application/problem+json` (RFC 9457). Validation
//! errors list each field; 5xx bodies say nothing about internals (the cause
//! is logged instead).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use common::job::FieldError;

use crate::model::Problem;

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
    /// The token's role does not allow the operation.
    Forbidden(String),
    MethodNotAllowed,
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

pub fn field(field: &str, message: impl Into<String>) -> ApiError {
    ApiError::Validation(vec![FieldError::new(field, message)])
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, title, detail, errors) = match self {
            ApiError::Validation(errors) => {
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
            ApiError::Forbidden(d) => (StatusCode::FORBIDDEN, "Forbidden", d, None),
            ApiError::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                "Method not allowed",
                "this route does not accept that HTTP method".to_owned(),
                None,
            ),
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
            detail,
            errors: errors.unwrap_or_default(),
        };
        let body = serde_json::to_string(&problem).unwrap_or_default();
        let mut response = (status, body).into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
            // RFC 5789 §2.2: say which patch formats are accepted.
            response.headers_mut().insert("accept-patch", HeaderValue::from_static(crate::extract::MERGE_PATCH));
        }
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
