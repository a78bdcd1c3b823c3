//! How far ahead a node hands its slots to the dispatcher.
//!
//! Claiming, publishing and a worker's arming must be done before a slot's
//! due instant, or the slot is late. At a steady pace a fixed lead (the
//! minimum lookahead, 2 s) is plenty; a burst of N slots due in the same
//! second needs about N / (what the node dispatches per second) more. The
//! node knows both: its timer counts the slots due in each coming second,
//! and the dispatcher measures how many slots per second of work it moves.
//! So the lead grows for a burst, and only for it, within a maximum.
//!
//! Bounds, and why:
//! - **Minimum** (`LOOKAHEAD_MS`, 2 s): the lead that suffices without a
//!   burst; also a floor under any estimate.
//! - **Maximum** (`MAX_LOOKAHEAD_MS`, 30 s): a slot claimed ahead is a row
//!   an edit, pause or delete must cancel, and an armed message a worker
//!   holds in memory until due; 30 s is the lead the benchmarks have run
//!   herds of 100,000 slots with.
//! - **Estimate × 1.25**: the dispatcher's pace covers lock, claim and
//!   publish; the workers arm the same messages as they arrive (a pipeline,
//!   so the slower stage sets the pace, not the sum), and lag it a little.
//!   A steady load at a quarter of the node's pace keeps a lead of about
//!   the minimum; one near the pace grows it towards the maximum, which is
//!   what a node falling behind needs.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

/// Slots per second assumed before the dispatcher has measured anything,
/// and the floor under a measurement: low, so an unknown pace errs on the
/// early side.
const ASSUMED_SLOTS_PER_SEC: f64 = 2_000.0;
const MIN_SLOTS_PER_SEC: f64 = 200.0;
/// Each measurement's weight decays by this much per later one, so the
/// pace follows the last few hundred batches.
const DECAY: f64 = 0.98;
/// The dispatcher's time covers lock, claim and publish; the workers arm
/// the same messages as they come, a little behind.
const SAFETY: f64 = 1.25;

#[derive(Debug, Clone, Copy)]
pub struct Lookahead {
    pub min: TimeDelta,
    pub max: TimeDelta,
}

impl Lookahead {
    pub fn new(min: Duration, max: Duration) -> anyhow::Result<Self> {
        let min = TimeDelta::from_std(min)?;
        Ok(Self { min, max: TimeDelta::from_std(max)?.max(min) })
    }

    /// The instant up to which slots are handed over now: at least `min`
    /// ahead, and further while the slots due by some coming second (with
    /// the `backlog` the dispatcher has not finished) could not be
    /// dispatched and armed `min` before that second at `slots_per_sec`.
    /// `due` lists the slots per second (second start, count) in order,
    /// up to `now + max`.
    pub fn horizon(
        &self,
        now: DateTime<Utc>,
        backlog: u64,
        slots_per_sec: f64,
        due: impl Iterator<Item = (DateTime<Utc>, u32)>,
    ) -> DateTime<Utc> {
        let mut horizon = now + self.min;
        let limit = now + self.max;
        let mut queued = backlog as f64;
        for (second, n) in due {
            if second > limit {
                break;
            }
            queued += f64::from(n);
            let work = TimeDelta::milliseconds((SAFETY * queued / slots_per_sec * 1000.0).ceil() as i64);
            // The second's slots that are due before they could be ready
            // if handed over later: through the second's end at most.
            let needed_by = now + self.min + work;
            if second < needed_by {
                horizon = horizon.max((second + TimeDelta::seconds(1)).min(needed_by).min(limit));
            }
        }
        horizon
    }
}

/// What the dispatcher measures for the lookahead: its pace while busy and
/// how many slots it has finished.
#[derive(Debug, Default)]
pub struct DispatchPace {
    /// Decayed sums of slots dispatched and seconds it took.
    sums: Mutex<(f64, f64)>,
    done: AtomicU64,
}

impl DispatchPace {
    /// One batch of `slots` locked, claimed and published in `took`.
    pub fn record(&self, slots: usize, took: Duration) {
        let mut sums = self.sums.lock().unwrap_or_else(|e| e.into_inner());
        sums.0 = sums.0 * DECAY + slots as f64;
        sums.1 = sums.1 * DECAY + took.as_secs_f64();
        drop(sums);
        self.done.fetch_add(slots as u64, Ordering::Relaxed);
    }

    /// Slots per second of dispatcher work.
    pub fn slots_per_sec(&self) -> f64 {
        let (slots, secs) = *self.sums.lock().unwrap_or_else(|e| e.into_inner());
        if slots < 1.0 || secs <= 0.0 { ASSUMED_SLOTS_PER_SEC } else { (slots / secs).max(MIN_SLOTS_PER_SEC) }
    }

    /// Slots finished since the start.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::milliseconds(ms)
    }

    fn lookahead() -> Lookahead {
        Lookahead::new(Duration::from_secs(2), Duration::from_secs(30)).unwrap()
    }

    #[test]
    fn a_steady_load_keeps_about_the_minimum() {
        let now = at(100_000);
        let due = || (100..130).map(|s| (at(s * 1000), 1_000));
        // 1,000 a second at 10,000/s: the work ahead adds a fraction of a second.
        let h = lookahead().horizon(now, 0, 10_000.0, due());
        assert!(h >= now + TimeDelta::seconds(2) && h <= now + TimeDelta::milliseconds(2_500), "{h}");
        // Near the node's pace it is falling behind: hand over up to the maximum.
        assert_eq!(lookahead().horizon(now, 0, 1_250.0, due()), at(130_000));
    }

    #[test]
    fn a_burst_is_handed_over_early_enough_for_its_size() {
        let now = at(100_000);
        // 80,000 due 10 s from now at 10,000/s: 1.25 × 8 s of work + 2 s, so it goes now.
        let burst = [(at(110_000), 80_000)];
        assert_eq!(lookahead().horizon(now, 0, 10_000.0, burst.into_iter()), at(111_000));
        // 20,000: 2.5 s of work + 2 s ahead; not yet at 10 s, at 4 s.
        let burst = [(at(110_000), 20_000)];
        assert_eq!(lookahead().horizon(now, 0, 10_000.0, burst.into_iter()), now + TimeDelta::seconds(2));
        let h = lookahead().horizon(at(106_000), 0, 10_000.0, burst.into_iter());
        assert!(h > at(110_000), "{h}");
        // What the dispatcher has not finished goes first.
        assert_eq!(lookahead().horizon(now, 60_000, 10_000.0, burst.into_iter()), at(111_000));
    }

    #[test]
    fn the_maximum_bounds_any_burst() {
        let now = at(100_000);
        let burst = [(at(125_000), 1_000_000), (at(140_000), 1_000_000)];
        assert_eq!(lookahead().horizon(now, 0, 1_000.0, burst.into_iter()), at(126_000));
        let fixed = Lookahead::new(Duration::from_secs(30), Duration::from_secs(5)).unwrap();
        assert_eq!(fixed.horizon(now, 0, 1.0, burst.into_iter()), now + TimeDelta::seconds(30), "max below min is min");
    }

    #[test]
    fn the_pace_is_measured_and_floored() {
        let pace = DispatchPace::default();
        assert_eq!(pace.slots_per_sec(), ASSUMED_SLOTS_PER_SEC);
        pace.record(1_000, Duration::from_millis(100));
        assert!((pace.slots_per_sec() - 10_000.0).abs() < 1.0);
        pace.record(10, Duration::from_secs(1));
        assert!(pace.slots_per_sec() < 10_000.0 && pace.slots_per_sec() > 800.0);
        assert_eq!(pace.done(), 1_010);
        let slow = DispatchPace::default();
        slow.record(1, Duration::from_secs(60));
        assert_eq!(slow.slots_per_sec(), MIN_SLOTS_PER_SEC);
    }
}
