//! How many deliveries one destination gets at once on this worker, learnt
//! from what more or fewer of them achieve instead of set by hand. Without
//! I/O or clocks: every call is given `now`, so the rule is tested with
//! explicit time.
//!
//! Calls are judged in rounds: a round ends once at least as many calls as
//! the limit have completed and at least `ROUND_MIN` has passed. Only a
//! round in which the limit bound (as many calls in progress as allowed,
//! so slots were queueing for the host) says anything: below the limit,
//! throughput is the demand's, not the destination's.
//!
//! The rule climbs throughput (calls completed per second), one step at a
//! time, comparing each round with the one before it:
//!
//! - **Up**: a step of an eighth (at least one) more at once. Kept when the
//!   next round's throughput rose by `GAIN_MIN` or more: the destination
//!   serves more calls at once (a slow but parallel receiver: 64 at once
//!   against 300 ms is 213 calls a second, 256 at once is 853). Then the
//!   next step up is tried at once.
//! - A step up that did not pay is **undone**: the calls only queued at
//!   the destination and each waited longer (its latency rose). A step
//!   **down** is tried `PAUSE_ROUNDS` later, kept if throughput held (within
//!   `GAIN_MIN`): the same work with fewer calls waiting; undone otherwise.
//!
//! Comparing neighbouring rounds, rather than each call's latency with a
//! learnt quiet latency, keeps the rule from mistaking latency it does not
//! cause (a busy machine or network, measured on a loopback herd where
//! every call slowed while the machine was saturated) for a queue it
//! causes. The limit stays within `[min, max]`; with `min == max` it never
//! moves (the fixed limit an operator asked for). Failures are the circuit
//! breaker's business.

use std::time::{Duration, Instant};

/// The shortest round: a burst of fast calls is judged over a stretch long
/// enough to average out, not call by call.
const ROUND_MIN: Duration = Duration::from_millis(100);
/// A step up must raise throughput by this share to be kept; a step down
/// may lower it by this share and still be kept.
const GAIN_MIN: f64 = 0.05;
/// Bound rounds between a step that was undone and the next try.
const PAUSE_ROUNDS: u32 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitConfig {
    /// Where a destination starts.
    pub initial: usize,
    pub min: usize,
    pub max: usize,
}

impl LimitConfig {
    /// One limit that never moves.
    pub fn fixed(limit: usize) -> Self {
        let limit = limit.max(1);
        LimitConfig { initial: limit, min: limit, max: limit }
    }

    /// A learnt limit starting at `initial`, between `min` and `max`.
    pub fn adaptive(initial: usize, min: usize, max: usize) -> Self {
        let max = max.max(1);
        let min = min.clamp(1, max);
        LimitConfig { initial: initial.clamp(min, max), min, max }
    }

    /// The same at most `cap` at once (the worker's in-flight limit).
    pub fn capped(self, cap: usize) -> Self {
        let cap = cap.max(1);
        let max = self.max.min(cap);
        LimitConfig { initial: self.initial.min(max), min: self.min.min(max), max }
    }

    pub fn is_fixed(&self) -> bool {
        self.min == self.max
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// At a limit that is kept; the next try after `pause` more bound rounds.
    Settled { pause: u32, next_up: bool },
    /// Trying the limit moved from `from`, where throughput was `before`.
    Trying { from: usize, before: f64 },
}

#[derive(Debug)]
pub struct AdaptiveLimit {
    config: LimitConfig,
    limit: usize,
    phase: Phase,
    round: Round,
}

#[derive(Debug)]
struct Round {
    started: Instant,
    calls: u32,
    bound: bool,
}

impl Round {
    fn new(now: Instant) -> Self {
        Round { started: now, calls: 0, bound: false }
    }
}

impl AdaptiveLimit {
    pub fn new(config: LimitConfig, now: Instant) -> Self {
        AdaptiveLimit {
            config,
            limit: config.initial,
            phase: Phase::Settled { pause: 0, next_up: true },
            round: Round::new(now),
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Records a completed call, with `in_progress` calls to the
    /// destination (this one included) when it ended. Returns the new limit
    /// when the call closed a round that changed it.
    pub fn record(&mut self, in_progress: usize, now: Instant) -> Option<usize> {
        if self.config.is_fixed() {
            return None;
        }
        let round = &mut self.round;
        round.calls += 1;
        round.bound |= in_progress >= self.limit;
        let elapsed = now.duration_since(round.started);
        if (round.calls as usize) < self.limit || elapsed < ROUND_MIN {
            return None;
        }
        let round = std::mem::replace(&mut self.round, Round::new(now));
        let before = self.limit;
        if !round.bound {
            // Demand, not the destination, set this round's pace: a try
            // cannot be judged; it stands, and the climb starts afresh.
            self.phase = Phase::Settled { pause: 0, next_up: true };
            return None;
        }
        let throughput = f64::from(round.calls) / elapsed.as_secs_f64();
        self.phase = match self.phase {
            Phase::Trying { from, before } => {
                let went_up = self.limit > from;
                let kept = if went_up {
                    throughput >= before * (1.0 + GAIN_MIN)
                } else {
                    throughput >= before * (1.0 - GAIN_MIN)
                };
                if kept {
                    // Go on the same way at once.
                    self.step(went_up, throughput)
                } else {
                    self.limit = from;
                    Phase::Settled { pause: PAUSE_ROUNDS, next_up: !went_up }
                }
            }
            Phase::Settled { pause: 0, next_up } => self.step(next_up, throughput),
            Phase::Settled { pause, next_up } => Phase::Settled { pause: pause - 1, next_up },
        };
        (self.limit != before).then_some(self.limit)
    }

    /// Moves the limit a step up or down from here, where throughput was
    /// `throughput`; at a bound, tries the other way after a pause.
    fn step(&mut self, up: bool, throughput: f64) -> Phase {
        let from = self.limit;
        let to = if up {
            (from + (from / 8).max(1)).min(self.config.max)
        } else {
            from.saturating_sub((from / 8).max(1)).max(self.config.min)
        };
        if to == from {
            return Phase::Settled { pause: PAUSE_ROUNDS, next_up: !up };
        }
        self.limit = to;
        Phase::Trying { from, before: throughput }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use testing::SeededRng;

    const MS: Duration = Duration::from_millis(1);

    /// A destination serving `parallel` calls at once in `service` each,
    /// queueing the rest, with always more slots waiting than the limit
    /// lets go: drives `limit` for `rounds` rounds of time, each round's
    /// throughput off by up to `noise_percent` (seeded), and returns the
    /// limit at the end of each round.
    fn against(
        limit: &mut AdaptiveLimit,
        parallel: usize,
        service: Duration,
        noise_percent: u64,
        start: Instant,
        rounds: u32,
    ) -> Vec<usize> {
        let mut rng = SeededRng::new(7);
        let mut now = start;
        let mut seen = Vec::new();
        for _ in 0..rounds {
            let in_progress = limit.limit();
            let served = in_progress.min(parallel) as f64 / service.as_secs_f64();
            let noise = 1.0 + (rng.below(2 * noise_percent + 1) as f64 - noise_percent as f64) / 100.0;
            let gap = Duration::from_secs_f64(1.0 / (served * noise));
            let end = now + ROUND_MIN;
            let mut calls = 0;
            while now < end || calls < in_progress {
                now += gap;
                calls += 1;
                if limit.record(in_progress, now).is_some() {
                    break;
                }
            }
            seen.push(limit.limit());
        }
        seen
    }

    #[test]
    fn a_fixed_limit_never_moves() {
        let now = Instant::now();
        let mut limit = AdaptiveLimit::new(LimitConfig::fixed(8), now);
        assert_eq!(against(&mut limit, 10_000, 300 * MS, 0, now, 50).last(), Some(&8));
    }

    #[test]
    fn a_slow_destination_that_serves_many_at_once_gets_many_at_once() {
        let now = Instant::now();
        let mut limit = AdaptiveLimit::new(LimitConfig::adaptive(64, 64, 256), now);
        let seen = against(&mut limit, 10_000, 300 * MS, 3, now, 60);
        assert_eq!(seen.last(), Some(&256), "{seen:?}");
    }

    #[test]
    fn a_destination_past_its_capacity_is_not_given_more() {
        let now = Instant::now();
        let mut limit = AdaptiveLimit::new(LimitConfig::adaptive(64, 8, 256), now);
        // 100 at once, 20 ms each: more than 100 at once only queue there.
        let seen = against(&mut limit, 100, 20 * MS, 3, now, 400);
        let settled = &seen[100..];
        assert!(settled.iter().all(|l| (80..=130).contains(l)), "stays near 100: {seen:?}");
        // Four at once: the limit comes down from 64 towards them.
        let mut limit = AdaptiveLimit::new(LimitConfig::adaptive(64, 8, 256), now);
        let seen = against(&mut limit, 4, 10 * MS, 0, now, 400);
        assert!(seen[300..].iter().all(|l| *l <= 16), "comes down to the floor: {seen:?}");
    }

    #[test]
    fn a_limit_stays_within_its_bounds() {
        let now = Instant::now();
        let mut limit = AdaptiveLimit::new(LimitConfig::adaptive(10, 3, 12), now);
        assert!(against(&mut limit, 10_000, MS, 3, now, 100).iter().all(|l| (3..=12).contains(l)));
        assert!(
            against(&mut limit, 1, 50 * MS, 3, now + Duration::from_secs(100), 300)
                .iter()
                .all(|l| (3..=12).contains(l))
        );
        assert_eq!(LimitConfig::adaptive(500, 0, 256), LimitConfig { initial: 256, min: 1, max: 256 });
    }

    #[test]
    fn rounds_below_the_limit_teach_nothing() {
        let now = Instant::now();
        let mut limit = AdaptiveLimit::new(LimitConfig::adaptive(64, 8, 256), now);
        let mut at = now;
        for _ in 0..10_000 {
            at += MS;
            assert_eq!(limit.record(10, at), None);
        }
        assert_eq!(limit.limit(), 64);
    }
}
