//! The worker: consumes the main queue, holds each message until its due
//! time, delivers it, and records the outcome in the ledger.
//!
//! Per message: parse → move the ledger row to `running` for this fire and
//! attempt (duplicates and cancelled slots stop here; a pre-armed message
//! does this on arrival, "arming" its row) → wait for `due_at` (never
//! earlier, by this clock) → for an armed row, verify it is still ours and
//! still wanted (a read) → deliver → on failure publish to the retry
//! queue of the next delay, or to the failed queue after the last retry →
//! record the outcome → ack. The two ledger writes of concurrent messages
//! are coalesced into multi-row statements (`batch`), so a burst of messages
//! due in the same instant costs a few round trips, not two per message. A
//! message is acked only after its outcome is recorded and any follow-up
//! message is confirmed, so a crash anywhere leads to a redelivery, never to
//! a loss.
//!
//! Modules, in the order a message meets them: `session` (broker
//! connection, consumers, reconnecting; `run`), `processing` (one message
//! from parse to ack, performing what `lifecycle` decides for each of its
//! slots; `holdings` caps what the held messages cost, `pace` how fast
//! slots back from waiting go on, `late_runs` a job's last late run),
//! `backpressure` (outcome writes wait out a burst),
//! `destination` (per host: a concurrency limit and a circuit breaker; a
//! slot waits here, without an attempt, while its host is down), `deliver`
//! (HTTP and SQS, and why a delivery failed), `retry` (the next attempt, or
//! the failed queue), with `heartbeat` (this worker's liveness and its
//! orphaned rows) and `batch` (statement batching) beside them.

pub mod alerts;
mod backpressure;
pub mod batch;
pub mod deliver;
pub mod destination;
mod heartbeat;
mod holdings;
mod late_runs;
mod lifecycle;
pub mod namespace_metrics;
mod pace;
mod processing;
mod retry;
mod session;

/// The binary's defaults for what a worker holds and runs at once, and the
/// destination gate's (reasons in docs/decisions.md).
pub mod defaults {
    pub use crate::destination::defaults::*;
    /// Unacked messages held at once.
    pub const PREFETCH: u16 = 2000;
    /// Threads of a worker process's runtime (`--threads`; 0 = one per
    /// core): one. On a 2-core machine shared with the rest of the stack,
    /// 100,000-slot herds drained at a median 71% of the raw HTTP ceiling
    /// with one thread per worker against 62% with one per core
    /// (docs/benchmarks.md).
    pub const THREADS: usize = 1;
    /// Callback deliveries in progress at once.
    pub const MAX_IN_FLIGHT: usize = 256;
    /// Estimated memory of the messages held at once, in MiB.
    pub const MAX_HELD_MB: usize = 64;
    /// How long a failed outcome write is tried again before its message is
    /// handed back, and so delivered again: long enough to ride out a
    /// database failover, short enough that a worker that cannot write at
    /// all lets another one try.
    pub const OUTCOME_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);
    /// How long a message parked in the failed queue is kept: the broker
    /// drops it after this (per-message TTL; the queue's order is the
    /// order of expiry, so none waits behind a longer-lived one). The
    /// ledger keeps every failed execution for `LEDGER_UNSUCCESSFUL_RETENTION_DAYS`
    /// and replays from there, so the queue is only an operator's window.
    pub const FAILED_QUEUE_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);
}

pub use self::deliver::{DeliveryError, Outcome};
pub use self::destination::{DestinationArgs, DestinationConfig};
pub use self::session::{run, run_with_health};

use domain::job::RetryPolicy;

/// A worker's settings; `run` takes them with the ledger's pool.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub worker_id: String,
    pub cluster: String,
    pub amqp_url: String,
    /// The type of the cluster's RabbitMQ queues.
    pub queue_type: broker::amqp::QueueType,
    /// Unacked messages the broker may hand this worker (includes pre-armed
    /// messages waiting for their due time).
    pub prefetch: u16,
    /// Deliveries in progress at once.
    pub max_in_flight: usize,
    /// Estimated bytes of the slots held on their way (`holdings`; armed
    /// slots have twice this): past it, the next message waits in the broker.
    pub max_held_bytes: usize,
    /// Per destination host: deliveries at once and the circuit breaker.
    pub destinations: DestinationConfig,
    pub retry_defaults: RetryPolicy,
    pub allow_cidrs: Vec<ipnet::IpNet>,
    /// A scheduled slot whose first attempt reaches this worker later than
    /// this after its due time is decided by its job's misfire policy
    /// (the scheduler's threshold: one setting for both).
    pub misfire_threshold: std::time::Duration,
    /// AWS configuration for SQS targets; `None` = the usual AWS environment
    /// (`AWS_REGION`, credentials chain, `AWS_ENDPOINT_URL_SQS`), loaded on
    /// the first SQS delivery.
    pub aws: Option<aws_config::SdkConfig>,
    /// Clock checks against the database (the limit only raises the alert
    /// for a worker).
    pub clock: runtime::clock::ClockConfig,
    /// How long a failed outcome write is tried again before the message is
    /// handed back (`defaults::OUTCOME_RETRY_FOR`; no flag: tests shorten it).
    pub outcome_retry_for: std::time::Duration,
    /// Opens the secret header values sealed at rest (`SECRETS_KEK`).
    pub keyring: store::secrets::Keyring,
    /// How long the worker signs with a namespace's keys before reading them
    /// again (`deliver::signing::ACTIVE_KEYS_FRESH_FOR`; no flag: tests
    /// shorten it).
    pub signing_keys_fresh_for: std::time::Duration,
}
