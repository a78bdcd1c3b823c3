//! Backfills: which past slots of a job to run, in what order, how fast.
//! The plan is pure (a schedule and a range give the slots); the ledger
//! decides, slot by slot, whether the mode runs it.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::schedule::CompiledSchedule;

/// Most slots one backfill plans: a bounded plan, a bounded row.
pub const SLOTS_MAX: usize = 10_000;
/// Defaults and bounds of the pace.
pub const RATE_DEFAULT: f64 = 10.0;
pub const RATE_MAX: f64 = 1_000.0;
pub const RATE_MIN: f64 = 0.01;
pub const CONCURRENCY_DEFAULT: u32 = 5;
pub const CONCURRENCY_MAX: u32 = 100;

/// Which of the planned slots a backfill runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Slots without a ledger row (never fired, nor decided).
    Missing,
    /// Slots whose execution failed: run again under their own execution id.
    Failed,
    /// Every slot not in flight: missing ones, and finished ones again
    /// (succeeded included).
    All,
}

impl Mode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Mode::Missing => "missing",
            Mode::Failed => "failed",
            Mode::All => "all",
        }
    }

    pub fn parse(s: &str) -> Option<Mode> {
        [Mode::Missing, Mode::Failed, Mode::All].into_iter().find(|m| m.as_str() == s)
    }
}

/// What became of a backfill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Slots are still being started, or started ones have not finished.
    Running,
    /// Stopped on request: no further slot starts; started ones finish.
    Cancelled,
    /// Every planned slot was handled and every started one finished.
    Done,
}

impl State {
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Cancelled => "cancelled",
            State::Done => "done",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        [State::Running, State::Cancelled, State::Done].into_iter().find(|m| m.as_str() == s)
    }
}

/// The slots of `schedule` in `[from, to]`, oldest first (reversed for
/// newest first); `Err(n)` when there are more than `max` (n = max + 1 seen).
pub fn plan(
    schedule: &CompiledSchedule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    newest_first: bool,
    max: usize,
) -> Result<Vec<DateTime<Utc>>, usize> {
    let mut slots = Vec::new();
    let mut cursor = from - TimeDelta::microseconds(1);
    while let Some(at) = schedule.next_after(cursor).filter(|at| *at <= to) {
        if slots.len() == max {
            return Err(max + 1);
        }
        slots.push(at);
        cursor = at;
    }
    if newest_first {
        slots.reverse();
    }
    Ok(slots)
}

/// How many slots may start now: what the concurrency leaves room for
/// (`in_flight` of `max_concurrency`), and what the rate has earned since
/// `next_at` (at least one once it is due, so a slow rate still moves).
pub fn may_start(
    now: DateTime<Utc>,
    next_at: DateTime<Utc>,
    rate_per_second: f64,
    in_flight: usize,
    max_concurrency: usize,
) -> usize {
    if now < next_at {
        return 0;
    }
    let room = max_concurrency.saturating_sub(in_flight);
    let earned = 1 + ((now - next_at).num_milliseconds() as f64 / 1000.0 * rate_per_second).floor() as usize;
    // A long idle stretch earns no burst beyond one concurrency's worth.
    room.min(earned).min(max_concurrency)
}

/// When the next slot may start after `started` slots started at `now`.
pub fn next_start(now: DateTime<Utc>, started: usize, rate_per_second: f64) -> DateTime<Utc> {
    let ms = (started.max(1) as f64 * 1000.0 / rate_per_second).ceil() as i64;
    now + TimeDelta::milliseconds(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Recurrence;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_plan_is_the_slots_in_range_in_either_order_and_bounded() {
        let schedule = CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: 600_000, anchor: at("2026-01-01T00:00:00Z") },
            start_at: None,
            end_at: None,
        };
        let from = at("2026-01-01T00:00:00Z");
        let to = at("2026-01-01T01:00:00Z");
        let oldest = plan(&schedule, from, to, false, 100).unwrap();
        assert_eq!(oldest.len(), 7, "both ends included: {oldest:?}");
        assert_eq!((oldest[0], oldest[6]), (from, to));
        let newest = plan(&schedule, from, to, true, 100).unwrap();
        assert_eq!(newest, oldest.iter().rev().copied().collect::<Vec<_>>());
        assert_eq!(plan(&schedule, from, to, false, 6), Err(7));
    }

    #[test]
    fn the_pace_holds_the_rate_and_the_concurrency() {
        let t = at("2026-01-01T00:00:00Z");
        assert_eq!(may_start(t - TimeDelta::seconds(1), t, 10.0, 0, 5), 0, "not yet due");
        assert_eq!(may_start(t, t, 10.0, 0, 5), 1, "one once due");
        assert_eq!(may_start(t + TimeDelta::milliseconds(250), t, 10.0, 0, 5), 3);
        assert_eq!(may_start(t + TimeDelta::hours(1), t, 10.0, 0, 5), 5, "no burst beyond the concurrency");
        assert_eq!(may_start(t + TimeDelta::hours(1), t, 10.0, 4, 5), 1, "room left by the ones in flight");
        assert_eq!(may_start(t + TimeDelta::hours(1), t, 10.0, 5, 5), 0);
        assert_eq!(next_start(t, 3, 10.0), t + TimeDelta::milliseconds(300));
        assert_eq!(next_start(t, 1, 0.5), t + TimeDelta::seconds(2));
    }
}
