//! Redis: one pool per shard (a fixed address, or a primary found through
//! Redis Sentinel) and the key layout of a cluster.
//!
//! Keys (all under `CLUSTER_NAME`):
//! - `{cluster}:node:{node_id}` — a scheduler's heartbeat, JSON, 30 s TTL.
//! - `{cluster}:nodes` — the set of node ids that ever heartbeated, so the
//!   live set is read in O(nodes) (`SMEMBERS` + `MGET`), never by scanning a
//!   keyspace that holds a lock key per recent slot.
//! - `{cluster}:lock:{job_id}:{version}:{scheduled_ms}` — the fire lock of one slot.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use deadpool_redis::redis::aio::{ConnectionLike, MultiplexedConnection};
use deadpool_redis::redis::{IntoConnectionInfo, RedisFuture, Value};
use deadpool_redis::{PoolConfig, Runtime, Timeouts};
use uuid::Uuid;

/// The URL scheme of a shard whose primary is found through Redis Sentinel:
/// `redis-sentinel://[user:password@]host:port[,host:port...]/<master name>[/<db>]`.
/// The credentials and database are the data nodes'; the Sentinels are
/// asked without credentials.
pub const SENTINEL_SCHEME: &str = "redis-sentinel://";

/// Splits `REDIS_URLS` into one URL per shard. Shards are separated by
/// commas, but a Sentinel URL lists its Sentinels with commas too: a piece
/// that does not start with a scheme continues the URL before it.
pub fn shard_urls(pieces: &[String]) -> Vec<String> {
    let mut shards: Vec<String> = Vec::new();
    for piece in pieces.iter().flat_map(|p| p.split(',')).map(str::trim).filter(|p| !p.is_empty()) {
        match shards.last_mut() {
            Some(last) if !piece.contains("://") => {
                last.push(',');
                last.push_str(piece);
            }
            _ => shards.push(piece.to_owned()),
        }
    }
    shards
}

/// A shard's connection pool: a fixed address, or the primary Sentinel names.
#[derive(Clone, Debug)]
pub enum Pool {
    Direct(deadpool_redis::Pool),
    Sentinel(deadpool_redis::sentinel::Pool),
}

/// A pooled connection of either kind: a multiplexed connection to the
/// shard's primary, returned to its pool when dropped.
pub enum Connection {
    Direct(deadpool_redis::Connection),
    Sentinel(deadpool_redis::sentinel::Connection),
}

impl Pool {
    /// A connection from the pool (checked before it is handed out: a ping,
    /// and for a Sentinel shard that the server is still the primary).
    pub async fn get(&self) -> anyhow::Result<Connection> {
        Ok(match self {
            Pool::Direct(p) => Connection::Direct(p.get().await?),
            // A task of its own: a new connection asks every Sentinel, then
            // connects to and checks the primary, and that poll nested under
            // a scheduler's dispatch loop overflowed a 2 MiB worker stack in
            // a debug build the moment a failover ended (a core dump showed
            // the redis reply parser ~80 frames deep).
            Pool::Sentinel(p) => {
                let pool = p.clone();
                let got = tokio::spawn(async move { pool.get().await }).await?;
                Connection::Sentinel(got?)
            }
        })
    }
}

impl Deref for Connection {
    type Target = MultiplexedConnection;
    fn deref(&self) -> &MultiplexedConnection {
        match self {
            Connection::Direct(c) => c,
            Connection::Sentinel(c) => c,
        }
    }
}

impl DerefMut for Connection {
    fn deref_mut(&mut self) -> &mut MultiplexedConnection {
        match self {
            Connection::Direct(c) => c,
            Connection::Sentinel(c) => c,
        }
    }
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a deadpool_redis::redis::Cmd) -> RedisFuture<'a, Value> {
        self.deref_mut().req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a deadpool_redis::redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.deref_mut().req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.deref().get_db()
    }
}

fn pool_config() -> PoolConfig {
    PoolConfig {
        max_size: 32,
        timeouts: Timeouts {
            wait: Some(Duration::from_secs(2)),
            create: Some(Duration::from_secs(2)),
            recycle: Some(Duration::from_secs(2)),
        },
        ..Default::default()
    }
}

/// One pool per configured shard, in the configured order.
pub fn pools(urls: &[String]) -> anyhow::Result<Vec<Pool>> {
    let shards = shard_urls(urls);
    if shards.is_empty() || shards.len() > 2 {
        anyhow::bail!("REDIS_URLS must name 1 or 2 shards, got {}", shards.len());
    }
    shards
        .iter()
        .map(|url| {
            let redacted_error = |e: anyhow::Error| anyhow::anyhow!(domain::redact::text(&format!("{e:#}")));
            let pool = if url.starts_with(SENTINEL_SCHEME) {
                sentinel_pool(url).map_err(redacted_error)
            } else {
                let mut cfg = deadpool_redis::Config::from_url(url);
                cfg.pool = Some(pool_config());
                cfg.create_pool(Some(Runtime::Tokio1)).map(Pool::Direct).map_err(|e| redacted_error(e.into()))
            };
            pool.with_context(|| format!("Redis URL {:?}", domain::redact::url(url)))
        })
        .collect()
}

/// A shard behind Sentinels: `redis-sentinel://[creds@]h:p,h:p/<master>[/<db>]`.
fn sentinel_pool(url: &str) -> anyhow::Result<Pool> {
    let rest = &url[SENTINEL_SCHEME.len()..];
    let (authority, path) =
        rest.split_once('/').context("no master name: expected redis-sentinel://host:port,.../<master name>")?;
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((c, h)) => (Some(c), h),
        None => (None, authority),
    };
    let mut path = path.split('/');
    let master = path.next().filter(|m| !m.is_empty()).context("no master name after the Sentinels' addresses")?;
    let db = path.next().filter(|d| !d.is_empty()).unwrap_or("0");
    anyhow::ensure!(path.next().is_none(), "expected /<master name>[/<db>] after the Sentinels' addresses");
    let sentinels: Vec<String> = hosts
        .split(',')
        .map(|h| {
            anyhow::ensure!(!h.is_empty() && h.contains(':'), "a Sentinel address must be host:port, got {h:?}");
            Ok(format!("redis://{h}"))
        })
        .collect::<anyhow::Result<_>>()?;
    // The data nodes' handshake (credentials, database) read the way any
    // redis:// URL is, on a placeholder address.
    let node_url = match credentials {
        Some(c) => format!("redis://{c}@127.0.0.1/{db}"),
        None => format!("redis://127.0.0.1/{db}"),
    };
    let node = node_url.into_connection_info().context("the credentials or database of the data nodes")?;
    let node = deadpool_redis::sentinel::SentinelNodeConnectionInfo {
        tls_mode: None,
        redis_connection_info: Some(node.redis_settings().clone().into()),
    };
    let mut cfg = deadpool_redis::sentinel::Config::from_urls(
        sentinels,
        master.to_owned(),
        deadpool_redis::sentinel::SentinelServerType::Master,
    );
    cfg.node_connection_info = Some(node);
    cfg.pool = Some(pool_config());
    let pool = cfg
        .builder()
        .context("the Sentinel configuration")?
        .runtime(Runtime::Tokio1)
        .post_recycle(deadpool_redis::sentinel::Hook::async_fn(|conn, _| {
            Box::pin(async move { still_primary(conn).await })
        }))
        .build()
        .context("building the Sentinel pool")?;
    Ok(Pool::Sentinel(pool))
}

/// A connection whose server was demoted (a failover while it stayed up)
/// answers pings but refuses writes: it is dropped, and the next one is
/// made to whatever the Sentinels now name the primary.
async fn still_primary(conn: &mut MultiplexedConnection) -> Result<(), deadpool_redis::sentinel::HookError> {
    let role: Value = deadpool_redis::redis::cmd("ROLE")
        .query_async(conn)
        .await
        .map_err(|e| deadpool_redis::sentinel::HookError::message(format!("ROLE: {e}")))?;
    match role {
        Value::Array(items) if matches!(items.first(), Some(Value::BulkString(b)) if b.as_slice() == b"master") => {
            Ok(())
        }
        _ => Err(deadpool_redis::sentinel::HookError::message("no longer the primary")),
    }
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
