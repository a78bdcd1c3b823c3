//! `/v1/cluster`: the live scheduler nodes, read from their heartbeats.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};

#[utoipa::path(
    get,
    path = "/v1/cluster",
    tag = "cluster",
    responses(
        (status = 200, description = "Live scheduler nodes and the jobs each owns", body = crate::openapi::Cluster),
        crate::openapi::Unauthorized,
        (status = 503, description = "No Redis shard is reachable", body = crate::openapi::Problem, content_type = "application/problem+json"),
        crate::openapi::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn status(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let mut nodes: BTreeMap<String, Value> = BTreeMap::new();
    let mut shards_up = 0;
    for shard in &state.redis {
        let result = common::redis::live_nodes(shard, &state.keys).await;
        if let Ok(entries) = result {
            shards_up += 1;
            for (id, value) in entries {
                nodes.insert(id, value);
            }
        }
    }
    if shards_up == 0 {
        return Err(ApiError::Unavailable("no Redis shard is reachable".into()));
    }
    let nodes: Vec<Value> = nodes
        .into_iter()
        .map(|(id, v)| json!({ "node_id": id, "owned_jobs": v.get("owned_jobs"), "heartbeat_at": v.get("heartbeat_at") }))
        .collect();
    Ok(Json(
        json!({ "cluster": state.cluster, "live_nodes": nodes.len(), "nodes": nodes, "redis_shards_up": shards_up, "redis_shards": state.redis.len() }),
    ))
}
