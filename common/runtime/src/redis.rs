//! Redis: one pool per shard and the key layout of a cluster.
//!
//! Keys (all under `CLUSTER_NAME`):
//! - `{cluster}:node:{node_id}` — a scheduler's heartbeat, JSON, 30 s TTL.
//! - `{cluster}:nodes` — the set of node ids that ever heartbeated, so the
//!   live set is read in O(nodes) (`SMEMBERS` + `MGET`), never by scanning a
//!   keyspace that holds a lock key per recent slot.
//! - `{cluster}:lock:{job_id}:{version}:{scheduled_ms}` — the fire lock of one slot.

use anyhow::Context;
use chrono::{DateTime, Utc};
use deadpool_redis::{Config, Pool, Runtime};
use uuid::Uuid;

/// One pool per configured shard, in the configured order.
pub fn pools(urls: &[String]) -> anyhow::Result<Vec<Pool>> {
    if urls.is_empty() || urls.len() > 2 {
        anyhow::bail!("REDIS_URLS must name 1 or 2 shards, got {}", urls.len());
    }
    urls.iter()
        .map(|url| {
            let mut cfg = Config::from_url(url.trim());
            cfg.pool = Some(deadpool_redis::PoolConfig {
                max_size: 32,
                timeouts: deadpool_redis::Timeouts {
                    wait: Some(std::time::Duration::from_secs(2)),
                    create: Some(std::time::Duration::from_secs(2)),
                    recycle: Some(std::time::Duration::from_secs(2)),
                },
                ..Default::default()
            });
            cfg.create_pool(Some(Runtime::Tokio1))
                .map_err(|e| anyhow::anyhow!(domain::redact::text(&format!("{:#}", anyhow::Error::new(e)))))
                .with_context(|| format!("Redis URL {:?}", domain::redact::url(url)))
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(cluster: &str) -> Self {
        Self { prefix: cluster.to_owned() }
    }

    pub fn node(&self, node_id: &str) -> String {
        format!("{}:node:{node_id}", self.prefix)
    }

    pub fn registry(&self) -> String {
        format!("{}:nodes", self.prefix)
    }

    /// The version is part of the key: after an update, the owners race
    /// afresh for a slot that the old version had locked.
    pub fn lock(&self, job_id: Uuid, job_version: i64, scheduled_at: DateTime<Utc>) -> String {
        format!("{}:lock:{job_id}:{job_version}:{}", self.prefix, scheduled_at.timestamp_millis())
    }
}

/// The live nodes of one shard and their heartbeat documents. Registry
/// entries whose heartbeat expired are pruned on the way.
pub async fn live_nodes(pool: &Pool, keys: &Keys) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let mut conn = pool.get().await?;
    let ids: Vec<String> = redis::AsyncCommands::smembers(&mut *conn, keys.registry()).await?;
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let heartbeat_keys: Vec<String> = ids.iter().map(|id| keys.node(id)).collect();
    let values: Vec<Option<String>> = redis::cmd("MGET").arg(&heartbeat_keys).query_async(&mut *conn).await?;
    let mut live = Vec::new();
    let mut expired = Vec::new();
    for (id, value) in ids.into_iter().zip(values) {
        match value {
            Some(v) => live.push((id, serde_json::from_str(&v).unwrap_or(serde_json::Value::Null))),
            None => expired.push(id),
        }
    }
    if !expired.is_empty() {
        let _: Result<(), _> = redis::AsyncCommands::srem(&mut *conn, keys.registry(), &expired).await;
    }
    live.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(live)
}
