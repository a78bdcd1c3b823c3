//! `/v1/cluster`: the live scheduler nodes, read from their heartbeats.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::model::{Cluster, ClusterNode};

#[utoipa::path(
    get,
    path = "/v1/cluster",
    tag = "cluster",
    responses(
        (status = 200, description = "Live scheduler nodes and the jobs each owns", body = crate::model::Cluster),
        crate::model::Unauthorized,
        (status = 503, description = "No Redis shard is reachable", body = crate::model::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn status(State(state): State<AppState>) -> ApiResult<Json<Cluster>> {
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
    let nodes: Vec<ClusterNode> = nodes
        .into_iter()
        .map(|(node_id, v)| ClusterNode {
            node_id,
            owned_jobs: v.get("owned_jobs").cloned().unwrap_or(Value::Null),
            heartbeat_at: v.get("heartbeat_at").cloned().unwrap_or(Value::Null),
        })
        .collect();
    Ok(Json(Cluster {
        cluster: state.cluster.clone(),
        live_nodes: nodes.len() as u64,
        nodes,
        redis_shards_up: shards_up,
        redis_shards: state.redis.len() as u64,
    }))
}
