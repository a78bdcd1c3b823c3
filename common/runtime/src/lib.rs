//! What every cronshard process runs on: its configuration flags, logs,
//! metrics and health probes, the clock disciplined against Postgres,
//! backoff, graceful shutdown, and (feature `redis`) the Redis shard pools.
//! Nothing here spawns background work on its own; the binaries own their
//! loops.

pub mod backoff;
pub mod clock;
pub mod config;
pub mod health;
pub mod metrics;
#[cfg(feature = "redis")]
pub mod redis;
pub mod shutdown;
pub mod telemetry;
