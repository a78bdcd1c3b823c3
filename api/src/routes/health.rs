//! Probes: liveness says the process serves; readiness checks Postgres.

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};

pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

pub async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let client = state.pg.get().await.map_err(|e| ApiError::Unavailable(format!("Postgres is not reachable: {e}")))?;
    client
        .query_one("SELECT 1", &[])
        .await
        .map_err(|e| ApiError::Unavailable(format!("Postgres does not answer: {e}")))?;
    Ok(Json(json!({ "status": "ready" })))
}
