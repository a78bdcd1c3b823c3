//! The scheduler → worker wire format (JSON body of a RabbitMQ message).
//!
//! The message carries a snapshot of the target so the worker needs no job
//! lookup; cancellation stays exact because the worker only delivers a ledger
//! row it can still move from `pending` to `running` for this `fire_id`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::job::{RetryPolicy, Target};

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
