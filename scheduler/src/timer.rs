//! The in-memory timer: a min-heap of (fire time, generation, job) with
//! generation-based lazy deletion. Each `push` returns a fresh generation the
//! caller stores with its job; rescheduling or removing a job is just
//! storing another generation (or none), O(1), and the stale heap entry is
//! skipped when it surfaces. The caller answers "is this generation still
//! live?", so the timer keeps no per-job map of its own (memory matters at
//! a million jobs). Pure: time is an argument.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// A generation handed out by `push`; 0 is never handed out.
pub type Generation = u64;

#[derive(Debug, Default)]
pub struct TimerHeap {
    /// (fire time in ms since the epoch, generation, job).
    heap: BinaryHeap<Reverse<(i64, Generation, Uuid)>>,
    last_generation: Generation,
    /// Live entries, as counted by the caller's pushes and removals, for
    /// deciding when garbage dominates.
    live: usize,
    /// Entries (stale ones included) per second of fire time: how many
    /// slots are coming, for the adaptive lookahead. One map entry per
    /// distinct second, so a few bytes per job at most.
    per_second: BTreeMap<i64, u32>,
}

fn second_of(ms: i64) -> i64 {
    ms.div_euclid(1000)
}

impl TimerHeap {
    /// Schedules `job` at `at`; the returned generation identifies this
    /// entry. A previous entry of the job goes stale once the caller stops
    /// reporting its generation as live (call `forgot` for it).
    pub fn push(&mut self, job: Uuid, at: DateTime<Utc>) -> Generation {
        self.last_generation += 1;
        self.live += 1;
        let ms = at.timestamp_millis();
        *self.per_second.entry(second_of(ms)).or_default() += 1;
        self.heap.push(Reverse((ms, self.last_generation, job)));
        self.last_generation
    }

    /// The caller dropped a live entry (rescheduled or removed its job).
    pub fn forgot(&mut self) {
        self.live = self.live.saturating_sub(1);
    }

    /// Live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The earliest live deadline.
    pub fn peek(&mut self, is_live: impl Fn(Uuid, Generation) -> bool) -> Option<DateTime<Utc>> {
        self.drop_stale_head(&is_live);
        self.heap.peek().and_then(|Reverse((ms, _, _))| DateTime::from_timestamp_millis(*ms))
    }

    /// Pops the earliest live entry if it is due at or before `until`. The
    /// entry is consumed: the caller re-arms the job with a new `push`.
    pub fn pop_due(
        &mut self,
        until: DateTime<Utc>,
        is_live: impl Fn(Uuid, Generation) -> bool,
    ) -> Option<(Uuid, DateTime<Utc>)> {
        self.drop_stale_head(&is_live);
        match self.heap.peek() {
            Some(Reverse((ms, _, _))) if *ms <= until.timestamp_millis() => {
                let Reverse((ms, _, job)) = self.heap.pop()?;
                self.uncount(ms);
                self.live = self.live.saturating_sub(1);
                Some((job, DateTime::from_timestamp_millis(ms)?))
            }
            _ => None,
        }
    }

    fn drop_stale_head(&mut self, is_live: &impl Fn(Uuid, Generation) -> bool) {
        while let Some(Reverse((_, g, job))) = self.heap.peek() {
            if is_live(*job, *g) {
                break;
            }
            if let Some(Reverse((ms, _, _))) = self.heap.pop() {
                self.uncount(ms);
            }
        }
    }

    fn uncount(&mut self, ms: i64) {
        if let std::collections::btree_map::Entry::Occupied(mut e) = self.per_second.entry(second_of(ms)) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    /// Entries per second of fire time from `from` up to `until` (both
    /// included), each as (the second's start, entries), in order. Stale
    /// entries count too: they only make a burst look larger.
    pub fn due_per_second(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Iterator<Item = (DateTime<Utc>, u32)> {
        self.per_second
            .range(second_of(from.timestamp_millis())..=second_of(until.timestamp_millis()))
            .filter_map(|(s, n)| Some((DateTime::from_timestamp(*s, 0)?, *n)))
    }

    /// Lazy deletion leaves garbage; drops it once it dominates, so memory
    /// stays proportional to live jobs under heavy update churn.
    pub fn compact_if_bloated(&mut self, is_live: impl Fn(Uuid, Generation) -> bool) {
        if self.heap.len() > 1024 && self.heap.len() > 3 * self.live {
            self.compact(is_live);
        }
    }

    fn compact(&mut self, is_live: impl Fn(Uuid, Generation) -> bool) {
        self.heap.retain(|Reverse((_, g, job))| is_live(*job, *g));
        self.live = self.heap.len();
        self.per_second.clear();
        for Reverse((ms, _, _)) in self.heap.iter() {
            *self.per_second.entry(second_of(*ms)).or_default() += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeDelta;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn t(ms: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::milliseconds(ms)
    }

    /// The caller's side: each job's live generation.
    #[derive(Default)]
    struct Jobs {
        timer: TimerHeap,
        live: HashMap<Uuid, (Generation, DateTime<Utc>)>,
    }

    impl Jobs {
        fn schedule(&mut self, job: Uuid, at: DateTime<Utc>) {
            if self.live.remove(&job).is_some() {
                self.timer.forgot();
            }
            let g = self.timer.push(job, at);
            self.live.insert(job, (g, at));
        }

        fn remove(&mut self, job: Uuid) {
            if self.live.remove(&job).is_some() {
                self.timer.forgot();
            }
        }

        fn pop(&mut self, until: DateTime<Utc>) -> Option<(Uuid, DateTime<Utc>)> {
            let live = &self.live;
            let popped = self.timer.pop_due(until, |job, g| live.get(&job).is_some_and(|(l, _)| *l == g));
            if let Some((job, _)) = popped {
                self.live.remove(&job);
            }
            popped
        }
    }

    #[test]
    fn reschedule_and_remove_are_lazy_but_exact() {
        let mut j = Jobs::default();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        j.schedule(a, t(10));
        j.schedule(b, t(20));
        j.schedule(a, t(30)); // moves a after b
        assert_eq!(j.pop(t(25)), Some((b, t(20))));
        assert_eq!(j.pop(t(25)), None);
        j.remove(a);
        assert_eq!(j.pop(t(100)), None);
        assert!(j.timer.is_empty());
    }

    proptest! {
        /// Whatever the sequence of schedules and removals, pops come out in
        /// time order and yield exactly the live entries.
        #[test]
        fn pops_in_order_and_only_live_entries(ops in proptest::collection::vec((0u128..50, 0i64..100_000, any::<bool>()), 1..400), compact in any::<bool>()) {
            let mut j = Jobs::default();
            let mut model: HashMap<Uuid, DateTime<Utc>> = HashMap::new();
            for (job, at, remove) in ops {
                let job = Uuid::from_u128(job);
                if remove {
                    j.remove(job);
                    model.remove(&job);
                } else {
                    j.schedule(job, t(at));
                    model.insert(job, t(at));
                }
            }
            prop_assert_eq!(j.timer.len(), model.len());
            // The per-second counts are the heap's entries (stale ones
            // included), whatever was pushed, popped or compacted.
            if compact {
                let live = &j.live;
                j.timer.compact(|job, g| live.get(&job).is_some_and(|(l, _)| *l == g));
            }
            let mut counted: BTreeMap<i64, u32> = BTreeMap::new();
            for Reverse((ms, _, _)) in j.timer.heap.iter() {
                *counted.entry(second_of(*ms)).or_default() += 1;
            }
            prop_assert_eq!(&counted, &j.timer.per_second);
            let window: u32 = j.timer.due_per_second(t(0), t(999_999)).map(|(_, n)| n).sum();
            prop_assert_eq!(window as usize, j.timer.heap.len());
            let mut last = DateTime::<Utc>::MIN_UTC;
            while let Some((job, at)) = j.pop(t(i64::from(u32::MAX))) {
                prop_assert!(at >= last);
                prop_assert_eq!(model.remove(&job), Some(at));
                last = at;
            }
            prop_assert!(model.is_empty());
            prop_assert!(j.timer.per_second.is_empty(), "every count went with its entry");
        }
    }
}
