//! The scheduler → worker wire format (JSON body of a RabbitMQ message).
//!
//! The message carries a snapshot of the target so the worker needs no job
//! lookup; cancellation stays exact because the worker only delivers a ledger
//! row it can still move from `pending` to `running` for this `fire_id`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::job::{JobSpec, RetryPolicy, Target};

pub const FIRE_MESSAGE_VERSION: u8 = 1;

/// AMQP header holding the attempt number. The worker owns it; `x-death` is
/// only a cross-check because RabbitMQ 3.13+ ignores a republished one.
pub const ATTEMPT_HEADER: &str = "x-cronshard-attempt";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    Schedule,
    Manual,
    Misfire,
}

impl Trigger {
    /// Reads the ledger's `trigger` column; anything unknown is a schedule.
    pub fn parse(s: &str) -> Self {
        match s {
            "manual" => Trigger::Manual,
            "misfire" => Trigger::Misfire,
            _ => Trigger::Schedule,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Misfire => "misfire",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FireMessage {
    pub v: u8,
    pub fire_id: Uuid,
    pub job_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    /// When the worker may deliver: the scheduled time for a pre-armed slot,
    /// or earlier than now for a late or manual fire.
    pub due_at: DateTime<Utc>,
    pub execution_id: String,
    pub trigger: Trigger,
    pub target: Target,
    /// `None` = the worker's cluster defaults.
    pub retry: Option<RetryPolicy>,
}

impl FireMessage {
    /// The message for one ledger row of `spec`'s job.
    pub fn for_row(row: &tokio_postgres::Row, spec: JobSpec, due_at: DateTime<Utc>) -> Self {
        FireMessage {
            v: FIRE_MESSAGE_VERSION,
            fire_id: row.get("fire_id"),
            job_id: row.get("job_id"),
            scheduled_at: row.get("scheduled_at"),
            due_at,
            execution_id: row.get("execution_id"),
            trigger: Trigger::parse(row.get("trigger")),
            target: spec.target,
            retry: spec.retry,
        }
    }
}
