//! One destination's circuit breaker, without I/O or clocks: every call is
//! given `now`, so the state machine is tested with explicit time.
//!
//! - **Closed**: every delivery goes. Outcomes are counted over a sliding
//!   window (`window`, in ten buckets); once at least `min_calls` were
//!   counted and at least `failure_percent` of them said the destination is
//!   unhealthy, the circuit opens.
//! - **Open** for a cool-down: nothing goes; deliveries wait. The first
//!   cool-down of an outage is `open_for`.
//! - **Half-open** once the cool-down is over: up to `probes` deliveries go
//!   at once, and as many in all until the round is decided. A probe that
//!   succeeds closes the circuit (the cool-down is reset); once `probes` of
//!   them have failed it re-opens for twice the last cool-down, at most
//!   `open_max`. One failure is not enough: a host that is back but fails a
//!   share of its calls as usual (a job's own errors) was judged down for
//!   the longest cool-down by one unlucky probe.
//!
//! Only what says something about the destination counts (see
//! `DeliveryError::destination_health`): a call whose outcome says nothing
//! (`Call::NotCounted`) neither adds to the window nor decides a probe.
//! Outcomes of calls admitted before the last transition (a generation
//! ago) are ignored: they describe a state the circuit has left.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Buckets of the sliding window: the window is exact to a tenth of its length.
const BUCKETS: u32 = 10;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerConfig {
    /// How far back outcomes count.
    pub window: Duration,
    /// Fewest counted calls in the window before the circuit may open; 0
    /// turns the breaker off (it never opens).
    pub min_calls: u32,
    /// Share of unhealthy outcomes (percent, 1 to 100) that opens it.
    pub failure_percent: u8,
    /// The first cool-down of an outage.
    pub open_for: Duration,
    /// The longest cool-down (each failed probe doubles it up to this).
    pub open_max: Duration,
    /// Deliveries let through at once while half-open.
    pub probes: u32,
}

/// The defaults of the worker's flags (`destination::DestinationArgs`),
/// with the reasons in docs/decisions.md.
impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            window: Duration::from_secs(30),
            min_calls: 20,
            failure_percent: 50,
            open_for: Duration::from_secs(10),
            open_max: Duration::from_secs(300),
            probes: 1,
        }
    }
}

/// What a breaker is in, as operators see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    Closed,
    HalfOpen,
    Open,
}

impl CircuitState {
    /// The value of the state gauge: higher is worse.
    pub fn gauge(self) -> f64 {
        match self {
            CircuitState::Closed => 0.0,
            CircuitState::HalfOpen => 1.0,
            CircuitState::Open => 2.0,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::HalfOpen => "half_open",
            CircuitState::Open => "open",
        }
    }
}

/// What one delivery said about its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// It answered (whatever the answer meant for the job).
    Healthy,
    /// It could not be reached, did not answer in time, or said it is
    /// overloaded or broken (5xx, 429).
    Unhealthy,
    /// Nothing about the destination (refused before connecting, a target
    /// that cannot be sent, this worker's own configuration).
    NotCounted,
}

/// Whether a delivery may go now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// It may; its outcome is reported with this ticket.
    Go(Ticket),
    /// Open: nothing goes before this instant.
    WaitUntil(Instant),
    /// Half-open with every probe out: wait for one to decide.
    WaitForProbes,
}

/// A delivery the breaker let through; its outcome must be recorded or the
/// ticket cancelled (a probe's place is held until then).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    generation: u64,
    probe: bool,
}

impl Ticket {
    pub fn is_probe(self) -> bool {
        self.probe
    }
}

/// A change of state caused by a recorded outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// From closed (`reopened: false`) or from half-open after a failed
    /// probe, for a cool-down ending at `until`.
    Opened { until: Instant, reopened: bool },
    /// A probe succeeded.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Inner {
    Closed,
    Open {
        until: Instant,
    },
    /// `failed`: probes of this round that failed so far.
    HalfOpen {
        probes_out: u32,
        failed: u32,
    },
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    start: Instant,
    calls: u32,
    failures: u32,
}

#[derive(Debug, Clone)]
pub struct Breaker {
    config: BreakerConfig,
    inner: Inner,
    buckets: VecDeque<Bucket>,
    /// The cool-down of the current (or next) opening.
    open_for: Duration,
    /// Bumped by every transition: outcomes of older tickets are ignored.
    generation: u64,
}

impl Breaker {
    pub fn new(config: BreakerConfig) -> Self {
        Breaker { config, inner: Inner::Closed, buckets: VecDeque::new(), open_for: config.open_for, generation: 0 }
    }

    /// The state at `now` (an open circuit whose cool-down is over is
    /// half-open: the next delivery is a probe).
    pub fn state(&self, now: Instant) -> CircuitState {
        match self.inner {
            Inner::Closed => CircuitState::Closed,
            Inner::Open { until } if now < until => CircuitState::Open,
            Inner::Open { .. } | Inner::HalfOpen { .. } => CircuitState::HalfOpen,
        }
    }

    /// When an open circuit's cool-down ends, if it is open at `now`.
    pub fn open_until(&self, now: Instant) -> Option<Instant> {
        match self.inner {
            Inner::Open { until } if now < until => Some(until),
            _ => None,
        }
    }

    /// Whether a delivery may go at `now`; a `Go` while half-open takes a
    /// probe's place.
    pub fn admit(&mut self, now: Instant) -> Admission {
        if let Inner::Open { until } = self.inner {
            if now < until {
                return Admission::WaitUntil(until);
            }
            self.inner = Inner::HalfOpen { probes_out: 0, failed: 0 };
        }
        match &mut self.inner {
            Inner::Closed => Admission::Go(Ticket { generation: self.generation, probe: false }),
            Inner::HalfOpen { probes_out, failed } if *probes_out + *failed < self.config.probes.max(1) => {
                *probes_out += 1;
                Admission::Go(Ticket { generation: self.generation, probe: true })
            }
            Inner::HalfOpen { .. } => Admission::WaitForProbes,
            Inner::Open { .. } => unreachable!("left above"),
        }
    }

    /// Records what an admitted delivery said about the destination.
    pub fn record(&mut self, ticket: Ticket, call: Call, now: Instant) -> Option<Transition> {
        if ticket.generation != self.generation {
            return None;
        }
        match (&mut self.inner, ticket.probe) {
            (Inner::Closed, false) => {
                let failed = match call {
                    Call::NotCounted => return None,
                    Call::Healthy => false,
                    Call::Unhealthy => true,
                };
                self.count(failed, now);
                self.should_open(now).then(|| self.open(now, false))
            }
            (Inner::HalfOpen { probes_out, failed }, true) => {
                *probes_out = probes_out.saturating_sub(1);
                match call {
                    Call::NotCounted => None,
                    Call::Healthy => Some(self.close()),
                    Call::Unhealthy => {
                        *failed += 1;
                        (*failed >= self.config.probes.max(1)).then(|| self.open(now, true))
                    }
                }
            }
            // A ticket of this generation is a probe exactly when the
            // circuit is half-open.
            _ => None,
        }
    }

    /// An admitted delivery that will not be made: frees a probe's place.
    pub fn cancel(&mut self, ticket: Ticket) {
        if let (true, Inner::HalfOpen { probes_out, .. }) =
            (ticket.generation == self.generation && ticket.probe, &mut self.inner)
        {
            *probes_out = probes_out.saturating_sub(1);
        }
    }

    /// Calls and unhealthy ones counted in the window ending at `now`.
    pub fn window_counts(&mut self, now: Instant) -> (u32, u32) {
        self.prune(now);
        self.buckets.iter().fold((0, 0), |(c, f), b| (c + b.calls, f + b.failures))
    }

    fn bucket_width(&self) -> Duration {
        (self.config.window / BUCKETS).max(Duration::from_millis(1))
    }

    fn prune(&mut self, now: Instant) {
        let width = self.bucket_width();
        while let Some(oldest) = self.buckets.front() {
            // A bucket counts while any of it lies within the window.
            if oldest.start + width + self.config.window <= now {
                self.buckets.pop_front();
            } else {
                break;
            }
        }
    }

    fn count(&mut self, failed: bool, now: Instant) {
        self.prune(now);
        let width = self.bucket_width();
        match self.buckets.back_mut() {
            Some(b) if now < b.start + width => {
                b.calls += 1;
                b.failures += u32::from(failed);
            }
            _ => self.buckets.push_back(Bucket { start: now, calls: 1, failures: u32::from(failed) }),
        }
    }

    fn should_open(&mut self, now: Instant) -> bool {
        if self.config.min_calls == 0 {
            return false;
        }
        let (calls, failures) = self.window_counts(now);
        calls >= self.config.min_calls
            && u64::from(failures) * 100 >= u64::from(self.config.failure_percent) * u64::from(calls)
    }

    fn open(&mut self, now: Instant, reopened: bool) -> Transition {
        self.open_for = if reopened { (self.open_for * 2).min(self.config.open_max) } else { self.config.open_for };
        let until = now + self.open_for;
        self.inner = Inner::Open { until };
        self.buckets.clear();
        self.generation += 1;
        Transition::Opened { until, reopened }
    }

    fn close(&mut self) -> Transition {
        self.inner = Inner::Closed;
        self.open_for = self.config.open_for;
        self.buckets.clear();
        self.generation += 1;
        Transition::Closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn config() -> BreakerConfig {
        BreakerConfig {
            window: Duration::from_secs(30),
            min_calls: 20,
            failure_percent: 50,
            open_for: Duration::from_secs(10),
            open_max: Duration::from_secs(60),
            probes: 2,
        }
    }

    fn go(b: &mut Breaker, now: Instant) -> Ticket {
        match b.admit(now) {
            Admission::Go(t) => t,
            other => panic!("expected Go, got {other:?}"),
        }
    }

    /// `n` calls at `now`, the first `failed` of them unhealthy; the last transition.
    fn calls(b: &mut Breaker, now: Instant, n: u32, failed: u32) -> Option<Transition> {
        let mut last = None;
        for i in 0..n {
            let t = go(b, now);
            let call = if i < failed { Call::Unhealthy } else { Call::Healthy };
            if let Some(tr) = b.record(t, call, now) {
                last = Some(tr);
            }
        }
        last
    }

    #[test]
    fn opens_at_the_failure_share_once_enough_calls_were_counted() {
        let t0 = Instant::now();
        let mut b = Breaker::new(config());
        // 19 failures: below the minimum number of calls.
        assert_eq!(calls(&mut b, t0, 19, 19), None);
        assert_eq!(b.state(t0), CircuitState::Closed);
        // The 20th call, a success: 19 of 20 failed, 95 %.
        let opened = calls(&mut b, t0, 1, 0);
        assert_eq!(opened, Some(Transition::Opened { until: t0 + 10 * S, reopened: false }));
        assert_eq!(b.state(t0), CircuitState::Open);
        assert_eq!(b.admit(t0 + 9 * S), Admission::WaitUntil(t0 + 10 * S));
    }

    #[test]
    fn stays_closed_below_the_failure_share() {
        let t0 = Instant::now();
        let mut b = Breaker::new(config());
        // 9 of 20 failed: 45 %.
        assert_eq!(calls(&mut b, t0, 20, 9), None);
        // One more failure: 10 of 21 is still below half.
        assert_eq!(calls(&mut b, t0, 1, 1), None);
        // And one more: 11 of 22 is half.
        assert!(matches!(calls(&mut b, t0, 1, 1), Some(Transition::Opened { .. })));
    }

    #[test]
    fn outcomes_older_than_the_window_no_longer_count() {
        let t0 = Instant::now();
        let mut b = Breaker::new(config());
        assert_eq!(calls(&mut b, t0, 15, 15), None);
        assert_eq!(b.window_counts(t0 + 29 * S), (15, 15));
        // A window and a bucket later, the 15 failures have left it.
        let later = t0 + 34 * S;
        assert_eq!(b.window_counts(later), (0, 0));
        assert_eq!(calls(&mut b, later, 15, 15), None, "15 calls are below the minimum");
        assert!(matches!(calls(&mut b, later, 5, 5), Some(Transition::Opened { .. })));
    }

    #[test]
    fn only_calls_that_say_something_about_the_destination_count() {
        let t0 = Instant::now();
        let mut b = Breaker::new(config());
        for _ in 0..100 {
            let t = go(&mut b, t0);
            assert_eq!(b.record(t, Call::NotCounted, t0), None);
        }
        assert_eq!(b.window_counts(t0), (0, 0));
        assert_eq!(b.state(t0), CircuitState::Closed);
    }

    #[test]
    fn half_open_lets_probes_through_and_a_success_closes_it() {
        let t0 = Instant::now();
        let mut b = Breaker::new(config());
        calls(&mut b, t0, 20, 20);
        let t1 = t0 + 10 * S;
        assert_eq!(b.state(t1), CircuitState::HalfOpen);
        let p1 = go(&mut b, t1);
        let p2 = go(&mut b, t1);
        assert!(p1.is_probe() && p2.is_probe());
        assert_eq!(b.admit(t1), Admission::WaitForProbes, "two probes at most");
        // A probe that says nothing frees its place without deciding.
        assert_eq!(b.record(p1, Call::NotCounted, t1), None);
        let p3 = go(&mut b, t1);
        assert_eq!(b.record(p3, Call::Healthy, t1 + S), Some(Transition::Closed));
        assert_eq!(b.state(t1 + S), CircuitState::Closed);
        // The other probe's late outcome belongs to the half-open state.
        assert_eq!(b.record(p2, Call::Unhealthy, t1 + S), None);
        assert_eq!(b.window_counts(t1 + S), (0, 0));
        // Closed again with a fresh window: 19 failures do not open it.
        assert_eq!(calls(&mut b, t1 + S, 19, 19), None);
    }

    #[test]
    fn a_failed_probe_reopens_with_a_growing_capped_cool_down_and_a_close_resets_it() {
        let t0 = Instant::now();
        let mut b = Breaker::new(config());
        calls(&mut b, t0, 20, 20);
        let mut now = t0 + 10 * S;
        for expected in [20, 40, 60, 60] {
            // The round's two probes fail: the first alone decides nothing.
            let (p1, p2) = (go(&mut b, now), go(&mut b, now));
            assert_eq!(b.record(p1, Call::Unhealthy, now), None);
            let tr = b.record(p2, Call::Unhealthy, now);
            assert_eq!(tr, Some(Transition::Opened { until: now + expected * S, reopened: true }));
            assert_eq!(b.admit(now + (expected - 1) * S), Admission::WaitUntil(now + expected * S));
            now += expected * S;
        }
        let probe = go(&mut b, now);
        assert_eq!(b.record(probe, Call::Healthy, now), Some(Transition::Closed));
        // The next outage starts from the first cool-down again.
        let opened = calls(&mut b, now, 20, 20);
        assert_eq!(opened, Some(Transition::Opened { until: now + 10 * S, reopened: false }));
    }

    #[test]
    fn one_failed_probe_of_a_round_does_not_reopen_a_host_that_answers_the_next() {
        let t0 = Instant::now();
        let mut b = Breaker::new(config());
        calls(&mut b, t0, 20, 20);
        let t1 = t0 + 10 * S;
        // A host that is back but fails some calls, as any host does.
        let p1 = go(&mut b, t1);
        assert_eq!(b.record(p1, Call::Unhealthy, t1), None);
        assert_eq!(b.state(t1), CircuitState::HalfOpen);
        // The failed probe's place is not given again: the round has one left.
        let p2 = go(&mut b, t1);
        assert_eq!(b.admit(t1), Admission::WaitForProbes);
        assert_eq!(b.record(p2, Call::Healthy, t1 + S), Some(Transition::Closed));
        assert_eq!(b.state(t1 + S), CircuitState::Closed);
        // The next round starts afresh: the closed circuit's window decides again.
        assert_eq!(calls(&mut b, t1 + S, 19, 19), None);
    }

    #[test]
    fn outcomes_of_calls_admitted_before_it_opened_are_ignored() {
        let t0 = Instant::now();
        let mut b = Breaker::new(config());
        let early: Vec<Ticket> = (0..5).map(|_| go(&mut b, t0)).collect();
        calls(&mut b, t0, 20, 20);
        for t in early {
            assert_eq!(b.record(t, Call::Healthy, t0), None);
        }
        assert_eq!(b.state(t0), CircuitState::Open);
        // Half-open: a cancelled probe frees its place.
        let t1 = t0 + 10 * S;
        let p1 = go(&mut b, t1);
        let _p2 = go(&mut b, t1);
        assert_eq!(b.admit(t1), Admission::WaitForProbes);
        b.cancel(p1);
        assert!(matches!(b.admit(t1), Admission::Go(t) if t.is_probe()));
    }

    #[test]
    fn min_calls_zero_turns_it_off() {
        let t0 = Instant::now();
        let mut b = Breaker::new(BreakerConfig { min_calls: 0, ..config() });
        assert_eq!(calls(&mut b, t0, 1000, 1000), None);
        assert_eq!(b.state(t0), CircuitState::Closed);
    }

    #[test]
    fn the_gauge_orders_states_by_severity() {
        assert!(CircuitState::Closed.gauge() < CircuitState::HalfOpen.gauge());
        assert!(CircuitState::HalfOpen.gauge() < CircuitState::Open.gauge());
    }
}
