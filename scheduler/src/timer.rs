//! The in-memory timer: a min-heap of (fire time, job) with generation-based
//! lazy deletion. Rescheduling or removing a job bumps its generation in O(1);
//! the stale heap entry is skipped when it surfaces. Pure: time is an argument.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use chrono::{DateTime, Utc};
use uuid::Uuid;

#[derive(Debug, Default)]
pub struct TimerHeap {
    heap: BinaryHeap<Reverse<(DateTime<Utc>, u64, Uuid)>>,
    /// The live generation of each scheduled job; absent = not scheduled.
    live: HashMap<Uuid, u64>,
    next_generation: u64,
}

impl TimerHeap {
    /// Schedules (or reschedules) `job` at `at`, replacing any earlier entry.
    pub fn schedule(&mut self, job: Uuid, at: DateTime<Utc>) {
        self.next_generation += 1;
        self.live.insert(job, self.next_generation);
        self.heap.push(Reverse((at, self.next_generation, job)));
        self.compact_if_bloated();
    }

    /// Unschedules `job`; its heap entry becomes stale.
    pub fn remove(&mut self, job: Uuid) -> bool {
        self.live.remove(&job).is_some()
    }

    pub fn contains(&self, job: Uuid) -> bool {
        self.live.contains_key(&job)
    }

    /// Number of live entries.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// The earliest live deadline.
    pub fn peek(&mut self) -> Option<DateTime<Utc>> {
        self.drop_stale_head();
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Pops the earliest live entry if it is due at or before `until`. The
    /// job is no longer scheduled afterwards; the caller re-arms it.
    pub fn pop_due(&mut self, until: DateTime<Utc>) -> Option<(Uuid, DateTime<Utc>)> {
        self.drop_stale_head();
        match self.heap.peek() {
            Some(Reverse((at, _, _))) if *at <= until => {
                let Reverse((at, _, job)) = self.heap.pop()?;
                self.live.remove(&job);
                Some((job, at))
            }
            _ => None,
        }
    }

    fn is_stale(&self, generation: u64, job: &Uuid) -> bool {
        self.live.get(job) != Some(&generation)
    }

    fn drop_stale_head(&mut self) {
        while let Some(Reverse((_, g, job))) = self.heap.peek() {
            if self.is_stale(*g, job) {
                self.heap.pop();
            } else {
                break;
            }
        }
    }

    /// Lazy deletion leaves garbage; rebuild once it dominates so memory
    /// stays proportional to live jobs under heavy update churn.
    fn compact_if_bloated(&mut self) {
        if self.heap.len() > 1024 && self.heap.len() > 3 * self.live.len() {
            let live = &self.live;
            self.heap.retain(|Reverse((_, g, job))| live.get(job) == Some(g));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use proptest::prelude::*;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::milliseconds(ms)
    }

    #[test]
    fn reschedule_and_remove_are_lazy_but_exact() {
        let mut h = TimerHeap::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        h.schedule(a, t(10));
        h.schedule(b, t(20));
        h.schedule(a, t(30)); // moves a after b
        assert_eq!(h.pop_due(t(25)), Some((b, t(20))));
        assert_eq!(h.pop_due(t(25)), None);
        h.remove(a);
        assert_eq!(h.pop_due(t(100)), None);
        assert!(h.is_empty());
    }

    proptest! {
        /// Whatever the sequence of schedules and removals, pops come out in
        /// time order and yield exactly the live entries.
        #[test]
        fn pops_in_order_and_only_live_entries(ops in proptest::collection::vec((0u128..50, 0i64..1000, any::<bool>()), 1..400)) {
            let mut h = TimerHeap::default();
            let mut model: HashMap<Uuid, DateTime<Utc>> = HashMap::new();
            for (job, at, remove) in ops {
                let job = Uuid::from_u128(job);
                if remove {
                    h.remove(job);
                    model.remove(&job);
                } else {
                    h.schedule(job, t(at));
                    model.insert(job, t(at));
                }
            }
            prop_assert_eq!(h.len(), model.len());
            let mut last = DateTime::<Utc>::MIN_UTC;
            while let Some((job, at)) = h.pop_due(DateTime::<Utc>::MAX_UTC) {
                prop_assert!(at >= last);
                prop_assert_eq!(model.remove(&job), Some(at));
                last = at;
            }
            prop_assert!(model.is_empty());
        }
    }
}
