//! What to do with slots nobody fired while a job had no live owner. Pure:
//! the node calls `decide` when it loads or gains a job whose last ledger
//! slot is older than the misfire threshold.
//!
//! - `fire_once`: the latest missed slot fires (late); the others are
//!   recorded `skipped`, coalesced into it.
//! - `skip`: every missed slot is recorded `skipped`.
//! - `fire_all`: the latest `misfire_cap` missed slots fire, in order; older
//!   ones are recorded `missed`.
//!
//! At most `record_max` slots (the latest) get ledger rows per decision; the
//! older remainder is counted in `unrecorded` (logged and exported), so a
//! long outage of an every-second job cannot flood the ledger.

use chrono::{DateTime, Utc};

use common::job::MisfirePolicy;
use common::ledger::Status;
use common::schedule::CompiledSchedule;

/// Upper bound on slots enumerated for one decision (CPU and memory guard).
const ENUMERATION_MAX: usize = 100_000;

#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Slots to fire late, oldest first.
    pub fire: Vec<DateTime<Utc>>,
    /// Slots to record without firing: (slot, status, reason).
    pub record: Vec<(DateTime<Utc>, Status, String)>,
    /// Missed slots older than the recorded ones.
    pub unrecorded: u64,
}

/// Decides the missed slots in `(since, until]`.
pub fn decide(
    schedule: &CompiledSchedule,
    policy: MisfirePolicy,
    cap: u32,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    record_max: usize,
) -> Decision {
    let mut missed = Vec::new();
    let mut beyond = 0u64;
    let mut cursor = since;
    while let Some(slot) = schedule.next_after(cursor) {
        if slot > until {
            break;
        }
        if missed.len() == ENUMERATION_MAX {
            // Keep the latest ones: drop the oldest half in one go.
            missed.drain(..ENUMERATION_MAX / 2);
            beyond += (ENUMERATION_MAX / 2) as u64;
        }
        missed.push(slot);
        cursor = slot;
    }
    let record_max = record_max.max(1);
    if missed.len() > record_max {
        beyond += (missed.len() - record_max) as u64;
        missed.drain(..missed.len() - record_max);
    }
    let mut d = Decision { unrecorded: beyond, ..Default::default() };
    let Some(&latest) = missed.last() else { return d };
    match policy {
        MisfirePolicy::Skip => {
            d.record = missed.into_iter().map(|s| (s, Status::Skipped, "misfire policy skip".to_owned())).collect();
        }
        MisfirePolicy::FireOnce => {
            let reason =
                format!("misfire policy fire_once: coalesced into {}", common::execution::format_instant(latest));
            d.record = missed[..missed.len() - 1].iter().map(|s| (*s, Status::Skipped, reason.clone())).collect();
            d.fire = vec![latest];
        }
        MisfirePolicy::FireAll => {
            let keep = (cap as usize).min(missed.len());
            let (older, fire) = missed.split_at(missed.len() - keep);
            let reason = format!("misfire policy fire_all: beyond misfire_cap {cap}");
            d.record = older.iter().map(|s| (*s, Status::Missed, reason.clone())).collect();
            d.fire = fire.to_vec();
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use common::schedule::Recurrence;

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

    #[test]
    fn each_policy_accounts_for_every_missed_slot() {
        // Slots 10..=120 s: twelve missed.
        let s = every_10s();
        let once = decide(&s, MisfirePolicy::FireOnce, 100, t(0), t(125), 1000);
        assert_eq!(once.fire, vec![t(120)]);
        assert_eq!(once.record.len(), 11);
        assert!(once.record.iter().all(|(_, status, _)| *status == Status::Skipped));

        let skip = decide(&s, MisfirePolicy::Skip, 100, t(0), t(125), 1000);
        assert!(skip.fire.is_empty());
        assert_eq!(
            skip.record.iter().map(|r| r.0).collect::<Vec<_>>(),
            (1..=12).map(|k| t(10 * k)).collect::<Vec<_>>()
        );

        let all = decide(&s, MisfirePolicy::FireAll, 5, t(0), t(125), 1000);
        assert_eq!(all.fire, (8..=12).map(|k| t(10 * k)).collect::<Vec<_>>());
        assert_eq!(all.record.len(), 7);
        assert!(all.record.iter().all(|(_, status, _)| *status == Status::Missed));
    }

    #[test]
    fn bounds_are_exclusive_then_inclusive_and_recording_is_capped() {
        let s = every_10s();
        assert_eq!(decide(&s, MisfirePolicy::FireOnce, 1, t(10), t(20), 10).fire, vec![t(20)]);
        assert_eq!(decide(&s, MisfirePolicy::FireOnce, 1, t(10), t(19), 10), Decision::default());
        let d = decide(&s, MisfirePolicy::Skip, 1, t(0), t(1000), 10);
        assert_eq!(d.record.len(), 10);
        assert_eq!(d.unrecorded, 90);
        assert_eq!(d.record.last().unwrap().0, t(1000));
    }
}
