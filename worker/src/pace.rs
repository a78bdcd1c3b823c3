//! The pace of the waiting queue: slots that waited for their destination
//! go only as fast as this worker's live slots stay on time.
//!
//! While a host is down its slots wait in delay queues, timed to come back
//! when its circuit's cool-down ends; after a long outage that is tens of
//! thousands of slots back within a second of the host's return. Taken at
//! once, each with a start and an outcome write, they held the ledger for
//! about 20 s and made every other host's on-time slots late (receiver A's
//! p99 270-380 ms for 6 s after receiver B's 10-minute outage, against
//! 60-100 ms before). Those slots are minutes late already; a few seconds
//! more cost nothing, while the live slots' lateness is the product.
//!
//! So a slot back from the waiting queue that is to take the whole round
//! (start, delivery, outcome) is admitted at a rate (one every
//! `1 / rate`), and the rate follows the live slots: every `WINDOW` it is
//! halved when more than 1% of the first attempts that started delivering
//! in the window were later than `LIVE_LATE` or deliveries were queueing
//! for a permit (the burst signal of `backpressure`), and raised by a fifth
//! when neither held and the rate was what held the waiting slots back. The
//! rate stays within `[MIN_RATE, MAX_RATE]`: the floor keeps the waiting
//! queue moving however loaded the worker is.
//!
//! `Pace` is the rule, pure: every call is given `now`, so it is tested
//! with explicit time. `WaitingPace` is a worker session's pace, fed by the
//! deliveries of its live slots.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How often the rate is judged: a few hundred deliveries at 2,000 fires/s,
/// short enough to halve a flood's rate within a second of its start.
const WINDOW: Duration = Duration::from_millis(250);
/// A live slot that starts delivering later than this counts as late. Under
/// the 250 ms the product holds a herd and the return from a fault to, with
/// room for the few seconds the rate needs to come down.
const LIVE_LATE: Duration = Duration::from_millis(150);
/// Waiting slots admitted per second per worker, at the least, however
/// late the live slots are: two workers still clear 55,000 slots (a tenth
/// of 2,000 fires/s down for 10 minutes) in under five minutes. It was
/// 500 while the stranded-row sweep republished a waiting row 60 s past
/// its return whatever the queues held; the sweep now waits for the
/// queues to catch up, and at 500 the backlog that comes back when a
/// host's circuit closes (two workers: 1,000 rounds a second, each with a
/// start and an outcome write) still made the other hosts' live slots
/// late on a loaded machine, with the pace unable to go lower.
pub(crate) const MIN_RATE: f64 = 100.0;
/// And at the most: above what one worker can deliver, so an idle worker
/// does not pace at all.
pub(crate) const MAX_RATE: f64 = 20_000.0;
/// A window this long had no waiting slot asking for a turn for most of it:
/// the rate starts again from the floor. A host's backlog comes back when
/// its circuit closes, often minutes after the pace last moved; met at the
/// rate of then (1,100–1,800 a second per worker in one run), the first
/// seconds of it made receiver A's p99 680 ms while the rate came down.
const IDLE_RESTART: Duration = Duration::from_secs(1);
/// A window in which at least this share of the admissions the rate allowed
/// were taken was one where the rate held the waiting slots back.
const BOUND_SHARE: f64 = 0.5;

/// What the live slots showed in one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct LiveSignal {
    on_time: u64,
    late: u64,
    /// Deliveries were queueing for the worker's in-flight permits.
    queueing: bool,
}

impl LiveSignal {
    fn pressed(self) -> bool {
        self.queueing || self.late * 100 > self.on_time + self.late
    }
}

#[derive(Debug)]
struct Pace {
    rate: f64,
    /// The earliest instant the next admission may go.
    next: Instant,
    window_started: Instant,
    admitted: u32,
}

impl Pace {
    fn new(now: Instant) -> Self {
        // From the floor: a flood that arrives first thing is met slowly,
        // and the rate climbs within seconds while the live slots allow it.
        Pace { rate: MIN_RATE, next: now, window_started: now, admitted: 0 }
    }

    fn rate(&self) -> f64 {
        self.rate
    }

    /// Whether the current window is over (then `end_window` before the
    /// next `admit`).
    fn window_over(&self, now: Instant) -> bool {
        now.duration_since(self.window_started) >= WINDOW
    }

    /// Judges the window that ends at `now` by what the live slots showed.
    fn end_window(&mut self, now: Instant, live: LiveSignal) {
        let length = now.duration_since(self.window_started);
        let allowed = self.rate * length.as_secs_f64();
        if length >= IDLE_RESTART {
            // Nothing asked for a turn for a while: a rate learnt then says
            // nothing about what the worker can take now.
            self.rate = MIN_RATE;
        } else if live.pressed() {
            self.rate = (self.rate / 2.0).max(MIN_RATE);
        } else if f64::from(self.admitted) >= allowed * BOUND_SHARE {
            self.rate = (self.rate * 1.2).min(MAX_RATE);
        }
        self.window_started = now;
        self.admitted = 0;
    }

    /// Reserves the next admission: the instant the message may go on.
    fn admit(&mut self, now: Instant) -> Instant {
        let at = self.next.max(now);
        self.next = at + Duration::from_secs_f64(1.0 / self.rate);
        self.admitted += 1;
        at
    }
}

/// A worker session's pace, and what its live slots showed since the pace
/// was last judged.
pub(crate) struct WaitingPace {
    pace: Mutex<Pace>,
    live_on_time: AtomicU64,
    live_late: AtomicU64,
}

impl WaitingPace {
    pub(crate) fn new() -> Self {
        WaitingPace {
            pace: Mutex::new(Pace::new(Instant::now())),
            live_on_time: AtomicU64::new(0),
            live_late: AtomicU64::new(0),
        }
    }

    /// A live slot (a first attempt on its first arrival) starts delivering
    /// this late.
    pub(crate) fn observe_live(&self, lateness: Duration) {
        let counter = if lateness > LIVE_LATE { &self.live_late } else { &self.live_on_time };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Waits for a slot's turn among the slots back from waiting;
    /// `queueing` says whether deliveries queue for a permit now (asked
    /// only when a window ends).
    pub(crate) async fn turn(&self, queueing: impl FnOnce() -> bool) {
        let at = {
            let now = Instant::now();
            let mut pace = self.pace.lock().unwrap_or_else(|e| e.into_inner());
            if pace.window_over(now) {
                let live = LiveSignal {
                    on_time: self.live_on_time.swap(0, Ordering::Relaxed),
                    late: self.live_late.swap(0, Ordering::Relaxed),
                    queueing: queueing(),
                };
                pace.end_window(now, live);
                metrics::gauge!(runtime::metrics::WORKER_WAITING_PACE).set(pace.rate());
            }
            pace.admit(now)
        };
        tokio::time::sleep_until(at).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALM: LiveSignal = LiveSignal { on_time: 500, late: 0, queueing: false };
    const LATE: LiveSignal = LiveSignal { on_time: 490, late: 10, queueing: false };

    /// Admits as many as the window allows, then ends it with `live`.
    fn busy_window(pace: &mut Pace, start: Instant, live: LiveSignal) -> Instant {
        let end = start + WINDOW;
        let mut at = start;
        while at < end {
            at = pace.admit(at);
        }
        pace.end_window(end, live);
        end
    }

    /// A pace after ten calm busy windows, and the instant the last ended.
    fn climbed() -> (Pace, Instant) {
        let mut now = Instant::now();
        let mut pace = Pace::new(now);
        for _ in 0..10 {
            now = busy_window(&mut pace, now, CALM);
        }
        (pace, now)
    }

    #[test]
    fn admissions_are_spaced_by_the_rate_and_an_idle_pace_does_not_bank_them() {
        let t0 = Instant::now();
        let mut pace = Pace::new(t0);
        let gap = Duration::from_secs_f64(1.0 / MIN_RATE);
        assert_eq!(pace.admit(t0), t0);
        assert_eq!(pace.admit(t0), t0 + gap);
        assert_eq!(pace.admit(t0), t0 + 2 * gap);
        // After a quiet second the next one goes at once, and only one does.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(pace.admit(later), later);
        assert_eq!(pace.admit(later), later + gap);
    }

    #[test]
    fn the_rate_climbs_while_live_slots_are_on_time_and_halves_when_they_are_late() {
        let (mut pace, mut now) = climbed();
        let climbed = pace.rate();
        assert!(climbed > MIN_RATE * 5.0, "ten calm busy windows: {climbed}/s");
        now = busy_window(&mut pace, now, LATE);
        assert_eq!(pace.rate(), climbed / 2.0);
        now = busy_window(&mut pace, now, LiveSignal { queueing: true, ..CALM });
        assert_eq!(pace.rate(), climbed / 4.0, "queueing deliveries press like late ones");
        for _ in 0..30 {
            now = busy_window(&mut pace, now, LATE);
        }
        assert_eq!(pace.rate(), MIN_RATE, "never below the floor");
        for _ in 0..200 {
            now = busy_window(&mut pace, now, CALM);
        }
        assert_eq!(pace.rate(), MAX_RATE, "never above the ceiling");
    }

    #[test]
    fn a_pace_nobody_asked_for_a_while_starts_again_from_the_floor() {
        let (mut pace, mut now) = climbed();
        assert!(pace.rate() > MIN_RATE * 5.0);
        // Quiet for a minute, then a flood: it is met at the floor, and
        // the rate climbs again from there while the live slots allow it.
        now += Duration::from_secs(60);
        assert!(pace.window_over(now));
        pace.end_window(now, CALM);
        assert_eq!(pace.rate(), MIN_RATE);
        busy_window(&mut pace, now, CALM);
        assert!(pace.rate() > MIN_RATE);
    }

    #[test]
    fn one_late_slot_in_a_hundred_is_not_pressure_and_an_idle_rate_does_not_climb() {
        let mut now = Instant::now();
        let mut pace = Pace::new(now);
        now = busy_window(&mut pace, now, LiveSignal { on_time: 99, late: 1, queueing: false });
        let rate = pace.rate();
        assert!(rate > MIN_RATE, "1% late is within the target: {rate}");
        // Nothing admitted: the rate did not hold anything back, so it stays.
        now += WINDOW;
        pace.end_window(now, CALM);
        assert_eq!(pace.rate(), rate);
        // No live slots at all and nothing queueing: no pressure either.
        busy_window(&mut pace, now, LiveSignal::default());
        assert!(pace.rate() > rate);
    }
}
