//! What to do with slots nobody fired while a job had no live owner: the
//! node calls `decide` when it loads or gains a job whose oldest missed
//! slot is older than the misfire threshold, over every slot it missed.
//! The rule itself is `domain::misfire`'s, shared with the worker; this
//! names what the ledger records for the slots it does not fire.
//!
//! - `fire_once`: the latest missed slot fires (late); the others are
//!   recorded `skipped`, coalesced into it.
//! - `skip`: every missed slot is recorded `skipped`.
//! - `fire_all`: the latest `misfire_cap` missed slots fire, in order; older
//!   ones are recorded `missed`.
//!
//! The slots recorded without firing are always one run of consecutive
//! slots, written as one ledger record however long the outage was.

use chrono::{DateTime, Utc};

use domain::job::MisfirePolicy;
use domain::misfire::Verdict;
use domain::schedule::CompiledSchedule;
use domain::slot::{Status, reason};

#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Slots to fire late, oldest first.
    pub fire: Vec<DateTime<Utc>>,
    /// The slots to record without firing: every missed slot before the
    /// ones fired.
    pub record: Option<Run>,
}

/// Consecutive slots decided alike.
#[derive(Debug, PartialEq)]
pub struct Run {
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub slots: u64,
    pub status: Status,
    pub reason: String,
}

impl Run {
    /// The run as the ledger records it; `slot_at` makes the job's slot at an instant.
    pub fn decided(
        self,
        slot_at: impl FnOnce(DateTime<Utc>) -> store::ledger::claim::Slot,
    ) -> store::ledger::claim::Decided {
        store::ledger::claim::Decided {
            slot: slot_at(self.first),
            last_at: self.last,
            slots: self.slots,
            status: self.status,
            reason: self.reason,
        }
    }
}

/// Decides the missed slots in `(since, until]` (`domain::misfire::decide`)
/// and names how the ledger records the ones not fired.
pub fn decide(
    schedule: &CompiledSchedule,
    policy: MisfirePolicy,
    cap: u32,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Decision {
    let decided = domain::misfire::decide(schedule, policy, cap, since, until);
    let record = decided.unfired.map(|unfired| {
        let (status, reason) = match unfired.verdict {
            Verdict::Skip => (Status::Skipped, format!("{}skip", reason::MISFIRE_PREFIX)),
            Verdict::Coalesce => {
                // Coalesced only into a fired slot: `fire_once` keeps the latest.
                let into = decided.fire.last().copied().unwrap_or(unfired.last);
                (
                    Status::Skipped,
                    format!(
                        "{}fire_once: coalesced into {}",
                        reason::MISFIRE_PREFIX,
                        domain::execution::format_instant(into)
                    ),
                )
            }
            Verdict::Miss => (Status::Missed, format!("{}fire_all: beyond misfire_cap {cap}", reason::MISFIRE_PREFIX)),
            Verdict::Fire => unreachable!("the unfired slots of a series are never fired"),
        };
        Run { first: unfired.first, last: unfired.last, slots: unfired.slots, status, reason }
    });
    Decision { fire: decided.fire, record }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use domain::schedule::Recurrence;

    fn every_10s() -> CompiledSchedule {
        CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: 10_000, anchor: DateTime::UNIX_EPOCH },
            start_at: None,
            end_at: None,
        }
    }

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::seconds(s)
    }

    /// Every missed slot is either fired or inside the recorded run, once;
    /// the run is the consecutive slots before the fired ones.
    #[test]
    fn each_policy_accounts_for_every_missed_slot_once() {
        let s = every_10s();
        let mut rng = testing::SeededRng::new(0x6d69_7366);
        for _ in 0..500 {
            let since = t(rng.below(200) as i64);
            let until = since + TimeDelta::seconds(rng.below(400) as i64);
            let cap = 1 + rng.below(8) as u32;
            let missed: Vec<_> = s.fires_after(since).take_while(|at| *at <= until).collect();
            for policy in [MisfirePolicy::Skip, MisfirePolicy::FireOnce, MisfirePolicy::FireAll] {
                let d = decide(&s, policy, cap, since, until);
                let fired = match policy {
                    MisfirePolicy::Skip => 0,
                    MisfirePolicy::FireOnce => 1,
                    MisfirePolicy::FireAll => cap as usize,
                }
                .min(missed.len());
                assert_eq!(d.fire, missed[missed.len() - fired..], "{policy:?} {since} {until}");
                let recorded = &missed[..missed.len() - fired];
                match (&d.record, recorded) {
                    (None, []) => {}
                    (Some(run), [first, .., last]) | (Some(run), [first @ last]) => {
                        assert_eq!((run.first, run.last, run.slots), (*first, *last, recorded.len() as u64));
                        let status = if policy == MisfirePolicy::FireAll { Status::Missed } else { Status::Skipped };
                        assert_eq!(run.status, status);
                    }
                    (run, _) => panic!("{policy:?}: recorded {run:?}, expected {recorded:?}"),
                }
            }
        }
    }

    #[test]
    fn a_day_long_outage_of_an_every_second_job_is_one_run() {
        let s = CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: 1_000, anchor: DateTime::UNIX_EPOCH },
            start_at: None,
            end_at: None,
        };
        let d = decide(&s, MisfirePolicy::FireOnce, 1, t(0), t(86_400));
        assert_eq!(d.fire, vec![t(86_400)]);
        let run = d.record.expect("a run");
        assert_eq!((run.first, run.last, run.slots), (t(1), t(86_399), 86_399));
        assert_eq!(run.reason, "misfire policy fire_once: coalesced into 1970-01-02T00:00:00.000Z");
    }

    #[test]
    fn bounds_are_exclusive_then_inclusive() {
        let s = every_10s();
        assert_eq!(decide(&s, MisfirePolicy::FireOnce, 1, t(10), t(20)).fire, vec![t(20)]);
        assert_eq!(decide(&s, MisfirePolicy::FireOnce, 1, t(10), t(19)), Decision::default());
        assert_eq!(decide(&s, MisfirePolicy::Skip, 1, t(10), t(19)), Decision::default());
    }
}
