//! Probes: liveness says the process serves; readiness checks Postgres.

use axum::Json;
use axum::extract::State;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::model::ProbeStatus;

#[utoipa::path(
    get,
    path = "/healthz",
    tag = "operations",
    responses(
        (status = 200, description = "The process serves", body = crate::model::ProbeStatus),
    ),
)]
pub async fn healthz() -> Json<ProbeStatus> {
    Json(ProbeStatus { status: "ok".into() })
}

#[utoipa::path(
    get,
    path = "/readyz",
    tag = "operations",
    responses(
        (status = 200, description = "Postgres answers", body = crate::model::ProbeStatus),
        (status = 503, description = "Postgres does not answer", body = crate::error::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<ProbeStatus>> {
    let client = state.pg.get().await.map_err(|e| ApiError::Unavailable(format!("Postgres is not reachable: {e}")))?;
    client
        .query_one("SELECT 1", &[])
        .await
        .map_err(|e| ApiError::Unavailable(format!("Postgres does not answer: {e}")))?;
    Ok(Json(ProbeStatus { status: "ready".into() }))
}
