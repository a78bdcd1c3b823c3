//! `/v1/cluster`: the live scheduler nodes, read from their heartbeats;
//! `/v1/jobs/{id}/owners`: the nodes that own a job by the scheduler's own
//! rendezvous hashing; `/v1/workers`: the workers' heartbeats.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use crate::AppState;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::{JobIdPath, QueryParams};
use crate::model::{Cluster, ClusterNode, JobOwners, Worker, WorkerList};
use crate::params::not_found;

/// The live nodes' heartbeat documents, by node id (the union over the
/// reachable shards), and how many shards answered; a 503 when none did.
async fn heartbeats(state: &AppState) -> ApiResult<(BTreeMap<String, Value>, u64)> {
    let mut nodes: BTreeMap<String, Value> = BTreeMap::new();
    let mut shards_up = 0;
    for shard in &state.redis {
        let result = runtime::redis::live_nodes(shard, &state.keys).await;
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
    Ok((nodes, shards_up))
}

#[utoipa::path(
    get,
    path = "/v1/cluster",
    tag = "cluster",
    responses(
        (status = 200, description = "Live scheduler nodes and the jobs each owns", body = crate::model::Cluster),
        crate::model::Unauthorized,
        (status = 503, description = "No Redis shard is reachable", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn status(State(state): State<AppState>) -> ApiResult<Json<Cluster>> {
    let (nodes, shards_up) = heartbeats(&state).await?;
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

/// `GET /v1/jobs/{id}/owners`: the live nodes that own the job now.
#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/owners",
    tag = "cluster",
    params(("id" = String, Path, description = "The job: its id, its key, or namespace:key")),
    responses(
        (status = 200, description = "The scheduler nodes that own the job by rendezvous hashing over the live nodes", body = crate::model::JobOwners),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        (status = 503, description = "No Redis shard is reachable", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn owners(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    QueryParams(_none): QueryParams<NoQuery>,
) -> ApiResult<Json<JobOwners>> {
    let client = state.pg.get().await?;
    // A deleted job is owned by nobody: the nodes drop it.
    let live = store::jobs::namespace_of(&client, id, caller.scope.sql().as_deref()).await?;
    if live.is_none() {
        return Err(not_found(id));
    }
    let (nodes, _) = heartbeats(&state).await?;
    let members: Vec<(String, usize)> =
        nodes.iter().map(|(id, beat)| (id.clone(), domain::ownership::heartbeat_replication_factor(beat))).collect();
    let replication_factor =
        members.iter().map(|(_, rf)| *rf).max().unwrap_or(domain::ownership::DEFAULT_REPLICATION_FACTOR);
    Ok(Json(JobOwners {
        job_id: id,
        replication_factor: replication_factor as u64,
        owners: domain::ownership::owners_by_own_factor(id, &members),
        live_nodes: nodes.into_keys().collect(),
    }))
}

/// `GET /v1/workers`: the workers' heartbeats.
#[utoipa::path(
    get,
    path = "/v1/workers",
    tag = "cluster",
    responses(
        (status = 200, description = "Workers with a heartbeat row, most recently seen first (a worker deletes its row when it stops)", body = crate::model::WorkerList),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn workers(
    State(state): State<AppState>,
    QueryParams(_none): QueryParams<NoQuery>,
) -> ApiResult<Json<WorkerList>> {
    let client = state.pg.get().await?;
    let items = store::heartbeats::seen(&client)
        .await?
        .into_iter()
        .map(|w| Worker { worker_id: w.worker_id, seen_at: w.seen_at, age_ms: w.age_ms })
        .collect();
    Ok(Json(WorkerList { items }))
}

/// A route without query parameters: any is a 400 naming it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoQuery {}
