//! Clock discipline: every scheduler and worker measures its wall clock
//! against the database's and reads time through [`now`], corrected by
//! that offset.
//!
//! Why Postgres: the ledger's own instants (a retry's next attempt, a
//! stranded row's age, an edit's `changed_at`) are written by Postgres'
//! clock, and every process already talks to it; Redis would only be a
//! second reference to disagree with. Why a correction and not only an
//! alarm: a slot is keyed by its scheduled instant, and a worker holds a
//! pre-armed message until that instant by its own clock, so a worker 2 s
//! fast would deliver every slot 2 s early.
//!
//! The offset is measured NTP-style: a few `SELECT clock_timestamp()`
//! round trips, keeping the one with the shortest round trip; the server's
//! reading lies within half that round trip of the local midpoint, so the
//! true offset is within [`Measurement::uncertainty`] of the estimate.
//! [`now`] corrects by the far end of that interval (estimate plus
//! uncertainty), not by the estimate: the corrected clock then never runs
//! ahead of the database's, so a slot held until its instant is never
//! handed over early, and is late by at most the whole round trip
//! (loopback: well under a millisecond). Correcting by the estimate alone
//! let a node fire up to half a round trip early whenever the two legs of
//! the round trip differed (seen as 1–2 ms early deliveries on a saturated
//! machine). Between checks the error grows only by the local clock's
//! drift — or by a step of the local clock, which the next check (default
//! 5 s later) takes back.
//!
//! A process whose offset exceeds [`ClockConfig::max_offset`] is out of
//! bounds: a scheduler node then stops firing and leaves the cluster, so
//! that its jobs' other owners fire them, and rejoins once a check finds the
//! offset back within the limit. A worker keeps delivering by the corrected
//! clock (stopping it would strand what it holds); its metric raises the
//! same alert.
//!
//! The checks double as the process's view of Postgres: a scheduler's
//! `/readyz` reads whether the last one was answered ([`database_report`])
//! and its verdict, instead of asking the database again per probe.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::health::Report;

/// What [`now`] subtracts from the local clock, in microseconds: the
/// largest offset (local minus database) the last check allows; 0 until
/// measured.
static OFFSET_MICROS: AtomicI64 = AtomicI64::new(0);

/// The offset the last check measured (local minus database), for what a
/// readiness probe says of a clock out of bounds.
static MEASURED_MICROS: AtomicI64 = AtomicI64::new(0);

/// Whether the database answered the last clock check.
static DATABASE: LazyLock<Report> = LazyLock::new(Report::default);

/// The outcome of the last clock check against the database. Every process
/// checks every few seconds, so its readiness reads "Postgres answers"
/// here rather than asking again per probe.
pub fn database_report() -> Report {
    DATABASE.clone()
}

/// The offset the last check measured (local minus database; 0 until one did).
pub fn measured_offset() -> TimeDelta {
    TimeDelta::microseconds(MEASURED_MICROS.load(Ordering::Relaxed))
}

/// The corrected wall clock: never ahead of the database's clock (as of the
/// last check), behind it by at most that check's round trip. Every instant
/// the scheduler and worker compare with a slot's due instant comes from
/// here.
pub fn now() -> DateTime<Utc> {
    Utc::now() - offset()
}

/// The offset [`now`] currently corrects by (local minus database, at the
/// far end of the last measurement's interval).
pub fn offset() -> TimeDelta {
    TimeDelta::microseconds(OFFSET_MICROS.load(Ordering::Relaxed))
}

/// Round trips per check; the shortest one is kept.
const SAMPLES_PER_CHECK: usize = 5;

/// How a process checks its clock.
#[derive(Debug, Clone, Copy)]
pub struct ClockConfig {
    /// Time between two checks.
    pub check_every: Duration,
    /// Largest offset at which a scheduler node keeps firing.
    pub max_offset: Duration,
}

impl ClockConfig {
    pub const DEFAULT_CHECK_EVERY_MS: u64 = 5_000;
    pub const DEFAULT_MAX_OFFSET_MS: u64 = 1_000;
}

impl Default for ClockConfig {
    fn default() -> Self {
        Self {
            check_every: Duration::from_millis(Self::DEFAULT_CHECK_EVERY_MS),
            max_offset: Duration::from_millis(Self::DEFAULT_MAX_OFFSET_MS),
        }
    }
}

/// One round trip to the database's clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Local clock when the query was sent.
    pub sent: DateTime<Utc>,
    pub round_trip: Duration,
    /// The database's `clock_timestamp()`.
    pub server: DateTime<Utc>,
}

/// The result of a check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// Local clock minus the database's.
    pub offset: TimeDelta,
    /// Half the round trip of the sample used: the true offset is within
    /// `offset ± uncertainty`.
    pub uncertainty: Duration,
}

impl Measurement {
    /// From the sample with the shortest round trip (the least queueing,
    /// so the tightest bound); None without samples.
    pub fn from_samples(samples: &[Sample]) -> Option<Self> {
        let best = samples.iter().min_by_key(|s| s.round_trip)?;
        let half = best.round_trip / 2;
        let local_midpoint = best.sent + TimeDelta::from_std(half).ok()?;
        Some(Self { offset: local_midpoint - best.server, uncertainty: half })
    }

    /// The correction that never puts the local clock ahead of the
    /// database's: the largest offset this measurement allows.
    pub fn never_ahead(&self) -> TimeDelta {
        TimeDelta::from_std(self.uncertainty).ok().and_then(|u| self.offset.checked_add(&u)).unwrap_or(TimeDelta::MAX)
    }

    /// Whether a scheduler node may fire with this offset. The measured
    /// offset itself is compared (not widened by the uncertainty): on a
    /// slow link a sound clock must not be sent out of the cluster.
    pub fn in_bounds(&self, max_offset: Duration) -> bool {
        self.offset.abs().to_std().is_ok_and(|o| o <= max_offset)
    }
}

/// Where a process's clock stands, for the node that decides whether to fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockVerdict {
    /// Not measured yet, or within the limit: fire.
    InBounds,
    /// Beyond the limit: a scheduler node stops firing.
    TooFar,
}

/// Takes `SAMPLES_PER_CHECK` (5) round trips on one connection and keeps the shortest.
pub async fn measure(pg: &deadpool_postgres::Pool) -> anyhow::Result<Measurement> {
    let client = pg.get().await?;
    let statement = client.prepare_cached("SELECT clock_timestamp()").await?;
    let mut samples = Vec::with_capacity(SAMPLES_PER_CHECK);
    for _ in 0..SAMPLES_PER_CHECK {
        let sent = Utc::now();
        let started = Instant::now();
        let row = client.query_one(&statement, &[]).await?;
        samples.push(Sample { sent, round_trip: started.elapsed(), server: row.get(0) });
    }
    Measurement::from_samples(&samples).ok_or_else(|| anyhow::anyhow!("no clock sample"))
}

/// Applies a measurement: the correction [`now`] uses, the metrics, the
/// verdict and a log line when the verdict changes.
fn apply(m: Measurement, config: &ClockConfig, verdict: &watch::Sender<ClockVerdict>) {
    OFFSET_MICROS.store(m.never_ahead().num_microseconds().unwrap_or(i64::MAX), Ordering::Relaxed);
    MEASURED_MICROS.store(m.offset.num_microseconds().unwrap_or(i64::MAX), Ordering::Relaxed);
    let offset_secs = m.offset.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
    metrics::gauge!(crate::metrics::CLOCK_OFFSET_SECONDS).set(offset_secs);
    metrics::gauge!(crate::metrics::CLOCK_OFFSET_UNCERTAINTY_SECONDS).set(m.uncertainty.as_secs_f64());
    let next = if m.in_bounds(config.max_offset) { ClockVerdict::InBounds } else { ClockVerdict::TooFar };
    metrics::gauge!(crate::metrics::CLOCK_IN_BOUNDS).set(if next == ClockVerdict::InBounds { 1.0 } else { 0.0 });
    let limit_ms = config.max_offset.as_millis();
    verdict.send_if_modified(|current| {
        if *current == next {
            return false;
        }
        match next {
            ClockVerdict::TooFar => tracing::error!(
                offset_seconds = offset_secs,
                limit_ms,
                "clock offset from the database exceeds the limit; a scheduler stops firing until it is back"
            ),
            ClockVerdict::InBounds => {
                tracing::info!(offset_seconds = offset_secs, limit_ms, "clock offset back within the limit")
            }
        }
        *current = next;
        true
    });
}

/// Measures once, within `bound`, and applies it; a failure leaves the
/// previous correction in place. Called before a process starts firing or
/// delivering, so its first slot is already judged by the corrected clock.
pub async fn check_once(
    pg: &deadpool_postgres::Pool,
    config: &ClockConfig,
    verdict: &watch::Sender<ClockVerdict>,
    bound: Duration,
) {
    match tokio::time::timeout(bound, measure(pg)).await {
        Ok(Ok(m)) => {
            DATABASE.ok();
            apply(m, config, verdict)
        }
        Ok(Err(e)) => {
            DATABASE.fail(format!("{e:#}"));
            tracing::warn!(error = %format!("{e:#}"), "clock check failed; keeping the last correction")
        }
        Err(_) => {
            DATABASE.fail(format!("no answer within {} ms", bound.as_millis()));
            tracing::warn!("clock check timed out; keeping the last correction")
        }
    }
}

/// Checks the clock every `config.check_every` until `token` is cancelled.
/// An unreachable database keeps the last correction: local clocks drift by
/// parts per million, far less than the limit over any outage.
pub async fn discipline(
    pg: deadpool_postgres::Pool,
    config: ClockConfig,
    verdict: watch::Sender<ClockVerdict>,
    token: CancellationToken,
) {
    let mut tick = tokio::time::interval(config.check_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        check_once(&pg, &config, &verdict, config.check_every.max(Duration::from_secs(1))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn the_shortest_round_trip_sets_the_offset_and_its_bound() {
        let samples = [
            // Queued behind something: its reading is off by its wait.
            Sample {
                sent: t("2026-01-01T00:00:02Z"),
                round_trip: Duration::from_millis(40),
                server: t("2026-01-01T00:00:00.035Z"),
            },
            Sample {
                sent: t("2026-01-01T00:00:02.100Z"),
                round_trip: Duration::from_millis(2),
                server: t("2026-01-01T00:00:00.101Z"),
            },
        ];
        let m = Measurement::from_samples(&samples).unwrap();
        assert_eq!(m.offset, TimeDelta::milliseconds(2000), "local midpoint 02.101 minus server 00.101");
        assert_eq!(m.uncertainty, Duration::from_millis(1));
        assert_eq!(Measurement::from_samples(&[]), None);
    }

    proptest::proptest! {
        /// Whatever the true offset and however the round trips split
        /// between the two legs, the corrected clock is never ahead of the
        /// database's and behind it by at most the chosen round trip.
        #[test]
        fn the_corrected_clock_is_never_ahead_of_the_reference_and_late_by_at_most_a_round_trip(
            true_offset_us in -3_000_000i64..3_000_000,
            legs in proptest::collection::vec((0u64..20_000, 0u64..20_000, 0u64..2_000), 1..6),
            read_after_us in 0i64..10_000_000,
        ) {
            // The reference clock starts at `base`; the local one reads
            // `true_offset` more at every instant.
            let base = t("2026-01-01T00:00:00Z");
            let mut reference = base;
            let samples: Vec<Sample> = legs
                .iter()
                .map(|&(out_us, back_us, server_us)| {
                    let sent = reference + TimeDelta::microseconds(true_offset_us);
                    let server = reference + TimeDelta::microseconds((out_us + server_us / 2) as i64);
                    let round_trip = Duration::from_micros(out_us + server_us + back_us);
                    reference += TimeDelta::from_std(round_trip).unwrap() + TimeDelta::milliseconds(1);
                    Sample { sent, round_trip, server }
                })
                .collect();
            let m = Measurement::from_samples(&samples).unwrap();
            // Any later instant: what `now` would read against the truth.
            let truth = reference + TimeDelta::microseconds(read_after_us);
            let corrected = truth + TimeDelta::microseconds(true_offset_us) - m.never_ahead();
            proptest::prop_assert!(corrected <= truth, "ahead by {}", corrected - truth);
            let shortest = samples.iter().map(|s| s.round_trip).min().unwrap();
            proptest::prop_assert!(truth - corrected <= TimeDelta::from_std(shortest).unwrap());
        }
    }

    #[test]
    fn a_clock_beyond_the_limit_either_way_is_out_of_bounds() {
        let limit = Duration::from_millis(1000);
        let at = |ms| Measurement { offset: TimeDelta::milliseconds(ms), uncertainty: Duration::ZERO };
        assert!(at(0).in_bounds(limit));
        assert!(at(1000).in_bounds(limit));
        assert!(at(-1000).in_bounds(limit));
        assert!(!at(1001).in_bounds(limit));
        assert!(!at(-2000).in_bounds(limit));
    }

    #[test]
    fn the_verdict_follows_each_measurement_and_now_is_corrected() {
        let (tx, rx) = watch::channel(ClockVerdict::InBounds);
        let config = ClockConfig::default();
        let before = Utc::now();
        apply(Measurement { offset: TimeDelta::seconds(2), uncertainty: Duration::ZERO }, &config, &tx);
        assert_eq!(*rx.borrow(), ClockVerdict::TooFar);
        let corrected = now();
        // The local clock is 2 s ahead of the reference: corrected time is 2 s behind it.
        assert!(corrected < before - TimeDelta::milliseconds(1900), "{corrected} vs {before}");
        // The correction takes the far end of the interval: 3 ms of
        // uncertainty make the corrected clock read 3 ms less.
        apply(
            Measurement { offset: TimeDelta::milliseconds(-30), uncertainty: Duration::from_millis(3) },
            &config,
            &tx,
        );
        assert_eq!(*rx.borrow(), ClockVerdict::InBounds);
        assert_eq!(offset(), TimeDelta::milliseconds(-27));
        OFFSET_MICROS.store(0, Ordering::Relaxed);
    }
}
