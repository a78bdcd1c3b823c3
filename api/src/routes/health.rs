//! Probes: liveness says the process serves; readiness checks Postgres.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};

#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses(
        (status = 200, description = "The process serves", body = crate::openapi::ProbeStatus),
    ),
)]
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Postgres answers", body = crate::openapi::ProbeStatus),
        (status = 503, description = "Postgres does not answer", body = crate::openapi::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let client = state.pg.get().await.map_err(|e| ApiError::Unavailable(format!("Postgres is not reachable: {e}")))?;
    client
        .query_one("SELECT 1", &[])
        .await
        .map_err(|e| ApiError::Unavailable(format!("Postgres does not answer: {e}")))?;
    Ok(Json(json!({ "status": "ready" })))
}
