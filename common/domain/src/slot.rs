//! The states and triggers of a slot's ledger row, and the reasons recorded
//! for slots decided without a delivery: the only lists of them. The store
//! spells them in SQL through [`Status::as_str`] and [`Trigger::as_str`];
//! the API shows them; the scheduler's and the worker's decisions name them.

/// The states of a ledger row (`scheduled_jobs.status`): the only list of
/// them. The SQL spells each as [`Status::as_str`]; the table's CHECK
/// constraint holds the same set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", schema(as = ExecutionStatus))]
pub enum Status {
    /// Claimed (or replayed); waiting for a worker.
    Pending,
    /// A worker holds it (armed ahead of its due instant, or delivering).
    Running,
    /// An attempt failed and the next one waits out its backoff, or the
    /// next attempt waits for its destination's circuit to close (history
    /// `waiting`, the attempt not counted).
    Retrying,
    Succeeded,
    /// Every attempt failed; the message is parked.
    Failed,
    /// Decided without a delivery (`reason` says why: paused, superseded, deleted, misfire policy,
    /// overlap, replaced, calendar:NAME).
    Skipped,
    /// Too late to fire by the misfire policy.
    Missed,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Status::Pending,
        Status::Running,
        Status::Retrying,
        Status::Succeeded,
        Status::Failed,
        Status::Skipped,
        Status::Missed,
    ];

    /// What a replay takes: what failed, and what no process may hold (the
    /// API checks which rows no process holds).
    pub const REPLAYABLE: [Status; 4] = [Status::Failed, Status::Pending, Status::Retrying, Status::Running];

    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Retrying => "retrying",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::Missed => "missed",
        }
    }

    /// A row in a final state is never moved again (but by a replay).
    pub const fn is_final(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Skipped | Status::Missed)
    }

    /// `a, b or c` of the given statuses, for error messages.
    pub fn list(statuses: &[Status]) -> String {
        statuses.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("unknown ledger status {0:?}")]
pub struct UnknownStatus(pub String);

impl std::str::FromStr for Status {
    type Err = UnknownStatus;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Status::ALL.into_iter().find(|status| status.as_str() == s).ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// Read straight from the `status` column: `row.get::<_, Status>("status")`.
#[cfg(feature = "postgres")]
impl<'a> tokio_postgres::types::FromSql<'a> for Status {
    fn from_sql(
        ty: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let text = <&str as tokio_postgres::types::FromSql>::from_sql(ty, raw)?;
        Ok(text.parse()?)
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <&str as tokio_postgres::types::FromSql>::accepts(ty)
    }
}

/// The `reason` of rows decided without (or instead of more) delivery,
/// beside those the job's changes and misfire policy write.
pub mod reason {
    /// Prefix of what a misfire policy decided (`misfire policy skip`,
    /// `misfire policy fire_once: coalesced into …`, `misfire policy
    /// fire_all: beyond misfire_cap N`), written by the schedulers for an
    /// outage's slots and by the workers for slots that reached them late.
    pub const MISFIRE_PREFIX: &str = "misfire policy ";

    /// Overlap policy `forbid`: an older execution was still in flight.
    pub const OVERLAP: &str = "overlap";
    /// Overlap policy `replace`: a newer execution superseded this one.
    pub const REPLACED: &str = "replaced";
    /// Prefix of `calendar:NAME`: the slot falls on a time the named
    /// calendar excludes.
    pub const CALENDAR_PREFIX: &str = "calendar:";

    pub fn calendar(name: &str) -> String {
        format!("{CALENDAR_PREFIX}{name}")
    }

    /// Prefix of `calendar_unavailable:NAME`: the job names a calendar the
    /// scheduler could not load in time, so the slot was not fired (a slot
    /// is never fired past a calendar its job names).
    pub const CALENDAR_UNAVAILABLE_PREFIX: &str = "calendar_unavailable:";

    /// How long a slot waits for such a calendar before it is recorded so.
    pub const CALENDAR_WAIT_SECS: i64 = 30;

    pub fn calendar_unavailable(name: &str) -> String {
        format!("{CALENDAR_UNAVAILABLE_PREFIX}{name}")
    }
}

/// What made a ledger row (`scheduled_jobs.trigger`): the only list of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", schema(as = ExecutionTrigger))]
pub enum Trigger {
    /// A slot of the job's schedule, fired on time.
    Schedule,
    /// Fired once, now, by `POST /v1/jobs/{id}/trigger`.
    Manual,
    /// A slot fired or decided late by the misfire policy (catch-up).
    Misfire,
    /// A past slot run on request by a backfill.
    Backfill,
}

impl Trigger {
    pub const ALL: [Trigger; 4] = [Trigger::Schedule, Trigger::Manual, Trigger::Misfire, Trigger::Backfill];

    pub const fn as_str(self) -> &'static str {
        match self {
            Trigger::Schedule => "schedule",
            Trigger::Manual => "manual",
            Trigger::Misfire => "misfire",
            Trigger::Backfill => "backfill",
        }
    }
}

/// Read straight from the `trigger` column.
#[cfg(feature = "postgres")]
impl<'a> tokio_postgres::types::FromSql<'a> for Trigger {
    fn from_sql(
        ty: &tokio_postgres::types::Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let text = <&str as tokio_postgres::types::FromSql>::from_sql(ty, raw)?;
        Trigger::ALL
            .into_iter()
            .find(|t| t.as_str() == text)
            .ok_or_else(|| format!("unknown ledger trigger {text:?}").into())
    }

    fn accepts(ty: &tokio_postgres::types::Type) -> bool {
        <&str as tokio_postgres::types::FromSql>::accepts(ty)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_round_trip_and_match_the_tables_check_constraint() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>().unwrap(), status);
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
        assert!("done".parse::<Status>().is_err());
        let migration = include_str!("../../../migrations/V2__scheduled_jobs.sql");
        let check = migration.split("CHECK (status IN (").nth(1).and_then(|rest| rest.split("))").next()).unwrap();
        let in_sql: Vec<&str> = check.split(',').map(|s| s.trim().trim_matches('\'')).collect();
        assert_eq!(in_sql, Status::ALL.map(Status::as_str));
    }

    #[test]
    fn triggers_match_the_tables_check_constraint() {
        // The check as the last migration that changed it states it.
        let migration = include_str!("../../../migrations/V24__backfills.sql");
        let check = migration.split("CHECK (trigger IN (").nth(1).and_then(|rest| rest.split("))").next()).unwrap();
        let in_sql: Vec<&str> = check.split(',').map(|s| s.trim().trim_matches('\'')).collect();
        assert_eq!(in_sql, Trigger::ALL.map(Trigger::as_str));
        for trigger in Trigger::ALL {
            assert_eq!(serde_json::to_value(trigger).unwrap(), trigger.as_str());
        }
    }
}
