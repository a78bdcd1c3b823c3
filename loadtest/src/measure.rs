//! Deliveries against what was due: for a window of scheduled time, the
//! slots every job's schedule says were due (computed with common's schedule
//! code), which of them reached the receiver, misses, duplicates (by
//! execution id) and the lateness of each slot's first delivery.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::receiver::Delivery;
use crate::report::{LatenessSeries, Percentiles, Report, fmt_int};
use crate::stack::CreatedJob;

/// Slots of `[from, to)` and what became of them.
#[derive(Debug, Default, Serialize)]
pub struct Tally {
    /// Slots due in the window according to the jobs' schedules.
    pub expected: usize,
    /// Expected slots delivered at least once.
    pub delivered: usize,
    /// Expected slots never delivered.
    pub missed: usize,
    /// Deliveries beyond the first of an execution id (the receiver always
    /// answers 200, so there is no legitimate second delivery).
    pub duplicates: usize,
    /// Deliveries in the window with an execution id that was not due.
    pub unexpected: usize,
    /// Deliveries with `X-Cronshard-Attempt` > 1.
    pub retried: usize,
    /// A few missed execution ids, for a look at the ledger.
    pub missed_examples: Vec<String>,
    /// Every missed slot: (execution id, scheduled at).
    #[serde(skip)]
    pub missed_slots: Vec<(String, DateTime<Utc>)>,
    /// A few duplicated deliveries: (execution id, attempt, received at).
    pub duplicate_examples: Vec<(String, u32, DateTime<Utc>)>,
    /// (scheduled at, lateness ms) of each expected slot's first delivery.
    #[serde(skip)]
    pub first: Vec<(DateTime<Utc>, i64)>,
    /// (received at) of each expected slot's first delivery, in the same order.
    #[serde(skip)]
    pub first_received: Vec<DateTime<Utc>>,
}

impl Tally {
    pub fn lateness(&self) -> Option<Percentiles> {
        Percentiles::of(self.first.iter().map(|(_, l)| *l).collect())
    }

    /// Lateness of the first deliveries of slots scheduled in `[from, to)`.
    pub fn lateness_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<Percentiles> {
        Percentiles::of(self.first.iter().filter(|(at, _)| *at >= from && *at < to).map(|(_, l)| *l).collect())
    }

    /// The scheduled times of the missed slots not in `decided` (the
    /// execution ids the ledger recorded as decided without a delivery:
    /// skipped or missed by a policy): the slots lost.
    pub fn lost_at(&self, decided: &HashSet<String>) -> Vec<DateTime<Utc>> {
        self.missed_slots.iter().filter(|(id, _)| !decided.contains(id)).map(|(_, at)| *at).collect()
    }

    pub fn series(&self, zero: DateTime<Utc>) -> LatenessSeries {
        LatenessSeries::build(zero, self.first.iter().copied())
    }

    /// The table rows every scenario shows: counts and lateness.
    pub fn rows(&self, report: &mut Report, prefix: &str) {
        report.row(format!("{prefix}slots due (from the schedules)"), fmt_int(self.expected as i64));
        report.row(
            format!("{prefix}delivered / missed / duplicates"),
            format!(
                "{} / {} / {}",
                fmt_int(self.delivered as i64),
                fmt_int(self.missed as i64),
                fmt_int(self.duplicates as i64)
            ),
        );
        if self.unexpected > 0 || self.retried > 0 {
            report.row(
                format!("{prefix}unexpected ids / retried deliveries"),
                format!("{} / {}", self.unexpected, self.retried),
            );
        }
        report.row(format!("{prefix}lateness p50 / p90 / p99 / max"), Percentiles::cell(self.lateness()));
    }
}

/// Compares `deliveries` whose scheduled time is in `[from, to)` with the
/// slots `jobs` had due in that window.
pub fn tally(jobs: &[CreatedJob], from: DateTime<Utc>, to: DateTime<Utc>, deliveries: &[Delivery]) -> Tally {
    // Execution id → (scheduled at, delivered).
    let mut expected: HashMap<String, (DateTime<Utc>, bool)> = HashMap::new();
    for job in jobs {
        for slot in job.slots(from, to) {
            expected.insert(domain::execution::execution_id(job.id, slot), (slot, false));
        }
    }
    let mut t = Tally { expected: expected.len(), ..Default::default() };
    let mut seen: HashSet<&str> = HashSet::new();
    for d in deliveries {
        let Some(at) = d.scheduled_at else { continue };
        if at < from || at >= to {
            continue;
        }
        if d.attempt > 1 {
            t.retried += 1;
        }
        if !seen.insert(&d.execution_id) {
            t.duplicates += 1;
            if t.duplicate_examples.len() < 5 {
                t.duplicate_examples.push((d.execution_id.to_string(), d.attempt, d.received_at));
            }
            continue;
        }
        match expected.get_mut(&*d.execution_id) {
            Some((_, hit)) => {
                *hit = true;
                t.delivered += 1;
                t.first.push((at, d.lateness_ms().unwrap_or_default()));
                t.first_received.push(d.received_at);
            }
            None => t.unexpected += 1,
        }
    }
    t.missed = t.expected - t.delivered;
    let missed: Vec<(String, DateTime<Utc>)> =
        expected.into_iter().filter(|(_, (_, hit))| !hit).map(|(id, (at, _))| (id, at)).collect();
    t.missed_examples = missed.iter().map(|(id, _)| id.clone()).take(5).collect();
    t.missed_slots = missed;
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use domain::schedule::{CompiledSchedule, Recurrence};

    #[test]
    fn counts_misses_duplicates_and_unexpected() {
        let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let job = CreatedJob {
            id: uuid::Uuid::nil(),
            schedule: CompiledSchedule {
                recurrence: Recurrence::Interval { every_ms: 1000, anchor: t0 },
                start_at: None,
                end_at: None,
            },
        };
        let at = |s: i64| t0 + TimeDelta::seconds(s);
        let d = |s: i64, id: &str, attempt| Delivery {
            execution_id: id.into(),
            scheduled_at: Some(at(s)),
            attempt,
            received_at: at(s) + TimeDelta::milliseconds(40),
        };
        let id = |s| domain::execution::execution_id(job.id, at(s));
        // Window [0, 4): slots 0, 1, 2, 3; slot 2 missed, slot 1 twice, one stray id, slot 9 outside.
        assert_eq!(job.slots(at(0) + TimeDelta::microseconds(1), at(2)), vec![at(1)]);
        let got = vec![
            d(0, &id(0), 1),
            d(1, &id(1), 1),
            d(1, &id(1), 2),
            d(3, &id(3), 1),
            d(3, "other@x", 1),
            d(9, &id(9), 1),
        ];
        let t = tally(std::slice::from_ref(&job), at(0), at(4), &got);
        assert_eq!((t.expected, t.delivered, t.missed, t.duplicates, t.unexpected, t.retried), (4, 3, 1, 1, 1, 1));
        assert_eq!(t.missed_examples, vec![id(2)]);
        let missed_id = t.missed_slots[0].0.clone();
        assert_eq!(t.missed_slots.iter().map(|(_, at)| *at).collect::<Vec<_>>(), vec![at(2)]);
        assert_eq!(t.lost_at(&HashSet::new()), vec![at(2)]);
        assert!(t.lost_at(&HashSet::from([missed_id])).is_empty(), "a slot the ledger decided is not lost");
        assert_eq!(t.lateness().unwrap().max, 40);
    }
}
