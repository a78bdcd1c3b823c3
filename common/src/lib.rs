//! Everything the cronshard binaries share: the job model and its validation,
//! schedule math (pure, time passed in), the scheduler→worker wire format, and
//! builders for the Postgres, Redis and RabbitMQ clients.
//!
//! Nothing here spawns background work on its own; the binaries own their loops.

pub mod amqp;
pub mod backoff;
pub mod calendar;
pub mod clock;
pub mod config;
pub mod db;
pub mod execution;
pub mod job;
pub mod job_changes;
pub mod jobs;
pub mod labels;
pub mod ledger;
pub mod message;
pub mod metrics;
pub mod misfire;
pub mod netguard;
pub mod ownership;

pub mod publisher;
pub mod redact;
pub mod redis;
pub mod schedule;
pub mod secrets;
pub mod shutdown;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod text;
