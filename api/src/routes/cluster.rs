//! `/v1/cluster`: the live scheduler nodes, read from their heartbeats.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use redis::AsyncCommands;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::{ApiError, ApiResult};

pub async fn status(State(state): State<AppState>) -> ApiResult<Json<Value>> {
    let mut nodes: BTreeMap<String, Value> = BTreeMap::new();
    let mut shards_up = 0;
    for shard in &state.redis {
        let result: anyhow::Result<Vec<(String, Option<String>)>> = async {
            let mut conn = shard.get().await?;
            let mut keys = Vec::new();
            let mut iter: redis::AsyncIter<String> = conn.scan_match(state.keys.node_pattern()).await?;
            while let Some(k) = iter.next_item().await {
                keys.push(k?);
            }
            drop(iter);
            let mut out = Vec::new();
            for k in keys {
                let v: Option<String> = conn.get(&k).await?;
                out.push((k, v));
            }
            Ok(out)
        }
        .await;
        if let Ok(entries) = result {
            shards_up += 1;
            for (key, value) in entries {
                let Some(id) = state.keys.node_id_of(&key) else { continue };
                let value = value.and_then(|v| serde_json::from_str::<Value>(&v).ok()).unwrap_or(json!({}));
                nodes.insert(id.to_owned(), value);
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
