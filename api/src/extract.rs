//! Extractors whose rejections use our problem+json shape.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde_json::Value;
use uuid::Uuid;

use crate::error::ApiError;

/// A JSON body: any syntax error or oversize body becomes a clear 4xx.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let is_json = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_none_or(|ct| ct.starts_with("application/json") || ct.contains("+json"));
        if !is_json {
            return Err(ApiError::BadRequest("Content-Type must be application/json".into()));
        }
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(format!("the request body exceeds {} bytes", crate::BODY_LIMIT_BYTES))
            } else {
                ApiError::BadRequest(format!("could not read the request body: {e}"))
            }
        })?;
        serde_json::from_slice(&bytes)
            .map(JsonBody)
            .map_err(|e| ApiError::BadRequest(format!("the request body is not valid JSON: {e}")))
    }
}

/// A job id path segment.
pub struct JobIdPath(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for JobIdPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let axum::extract::Path(raw): axum::extract::Path<String> =
            axum::extract::Path::from_request_parts(parts, state)
                .await
                .map_err(|e| ApiError::BadRequest(format!("invalid path: {}", e.body_text())))?;
        raw.parse::<Uuid>()
            .map(JobIdPath)
            .map_err(|_| ApiError::NotFound(format!("no job with id {raw:?} (job ids are UUIDs)")))
    }
}

/// Query parameters: a malformed query string is a problem+json 400.
pub struct QueryParams<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryParams(q.0))
            .map_err(|e| ApiError::BadRequest(format!("invalid query string: {}", e.body_text())))
    }
}

/// Path parameters: a segment that does not decode (e.g. invalid UTF-8) is a
/// problem+json 400 rather than axum's plain-text rejection.
pub struct PathParams<T>(pub T);

impl<T: serde::de::DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|e| ApiError::BadRequest(format!("invalid path: {}", e.body_text())))
    }
}
