//! Per-namespace quotas: how many live jobs, and how many fires per second
//! its live, unpaused jobs may add up to. Each job counts at the densest
//! stretch of its schedule, computed when it is created or changed, so a
//! quota bounds what the namespace can ask of the cluster, not what it
//! happens to be firing right now.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use common::job::{JobSpec, ScheduleKind};

use crate::error::{ApiError, ApiResult, field};
use crate::tenancy;

/// Fire times of a cron schedule looked at for its densest stretch.
const CRON_SAMPLE: usize = 200;

/// The most fires per second `spec`'s schedule makes: 1000/`every_ms` for
/// an interval, one over the shortest gap between the next fires of a cron
/// expression, 0 for a one-time job (one fire is no rate).
pub fn peak_fires_per_second(spec: &JobSpec, now: DateTime<Utc>) -> f64 {
    match &spec.schedule.kind {
        ScheduleKind::Once { .. } => 0.0,
        ScheduleKind::Interval { every_ms } => 1000.0 / (*every_ms).max(1) as f64,
        ScheduleKind::Cron { expr, timezone } => {
            let window_free = spec.schedule.start_at.is_none() && spec.schedule.end_at.is_none();
            let key = (expr.clone(), timezone.clone());
            if window_free && let Some(peak) = cron_peaks().recall(&key, now) {
                return peak;
            }
            let Ok(schedule) = spec.compile(now) else { return 0.0 };
            let fires = schedule.upcoming(now, CRON_SAMPLE);
            let shortest = fires.windows(2).map(|w| (w[1] - w[0]).num_milliseconds()).filter(|ms| *ms > 0).min();
            let peak = shortest.map_or(0.0, |ms| 1000.0 / ms as f64);
            if window_free {
                cron_peaks().keep(key, now, peak);
            }
            peak
        }
    }
}

/// A cron expression's peak is the same for every job that uses it
/// without a `start_at` or `end_at`, and walking its next 200 fires was
/// about a quarter of a create's CPU in the API: it is computed once per
/// expression and zone and reused for `CRON_PEAK_REUSED_FOR`, over which
/// the sampled stretch moves too little to matter (a DST change inside
/// the next 200 fires is seen at most that late).
const CRON_PEAK_REUSED_FOR: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// Expressions remembered; past it the memo starts afresh.
const CRON_PEAK_MEMO_MAX: usize = 1_000;

/// (expression, zone) → (when computed, peak).
type CronPeakMemo = std::collections::HashMap<(String, String), (DateTime<Utc>, f64)>;

#[derive(Default)]
struct CronPeaks(std::sync::Mutex<CronPeakMemo>);

fn cron_peaks() -> &'static CronPeaks {
    static PEAKS: std::sync::OnceLock<CronPeaks> = std::sync::OnceLock::new();
    PEAKS.get_or_init(CronPeaks::default)
}

impl CronPeaks {
    fn recall(&self, key: &(String, String), now: DateTime<Utc>) -> Option<f64> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (at, peak) = memo.get(key)?;
        ((now - *at).abs() < CRON_PEAK_REUSED_FOR).then_some(*peak)
    }

    fn keep(&self, key: (String, String), now: DateTime<Utc>, peak: f64) {
        let mut memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if memo.len() >= CRON_PEAK_MEMO_MAX {
            memo.clear();
        }
        memo.insert(key, (now, peak));
    }
}

/// What a create or a change adds to its namespace.
#[derive(Debug, Clone, Copy)]
pub struct Demand {
    /// New jobs (each counts against `max_jobs`).
    pub new_jobs: i64,
    /// The job's peak rate once the change is made (0 while paused).
    pub peak: f64,
    /// What the job counted before the change (0 for a new or paused job).
    pub peak_before: f64,
}

/// Checks `demand` against the namespace's quotas. A namespace with a quota
/// has its row locked for the caller's transaction, so two requests cannot
/// both take the last place; the check then counts the namespace's live
/// jobs, which costs a read of its jobs per create or change.
/// A job that alone exceeds the rate quota is a 422 on its schedule; a
/// namespace that would go over a quota is a 409.
pub async fn check(tx: &impl GenericClient, namespace: &str, demand: Demand) -> ApiResult<()> {
    let missing = || field("namespace", format!("no namespace {namespace:?} that this token may use"));
    // Most namespaces have no quota: then nothing is counted or locked, and
    // creates in one namespace do not wait for each other (counting a
    // namespace's jobs on every create made a herd of creates quadratic).
    let quotas = tenancy::quotas(tx, namespace).await?.ok_or_else(missing)?;
    if quotas == tenancy::Quotas::default() {
        return Ok(());
    }
    let ns = tenancy::namespace(tx, namespace, true).await?.ok_or_else(missing)?;
    if let Some(max) = ns.max_jobs
        && demand.new_jobs > 0
        && ns.jobs + demand.new_jobs > max
    {
        return Err(ApiError::Conflict(format!(
            "namespace {namespace:?} has {} jobs and its quota is max_jobs {max}: {} more do not fit; delete some or ask an admin to raise it",
            ns.jobs, demand.new_jobs
        )));
    }
    if let Some(max) = ns.max_fires_per_second {
        if demand.peak > max {
            return Err(field(
                "schedule",
                format!(
                    "fires up to {} times per second, more than namespace {namespace:?} allows for all its jobs \
                     together (max_fires_per_second {max})",
                    rate(demand.peak)
                ),
            ));
        }
        let total = ns.peak_fires_per_second - demand.peak_before + demand.peak;
        if total > max + 1e-9 {
            return Err(ApiError::Conflict(format!(
                "namespace {namespace:?} would fire up to {} times per second with this job, over its quota \
                 (max_fires_per_second {max}); its jobs already use {}",
                rate(total),
                rate(ns.peak_fires_per_second - demand.peak_before)
            )));
        }
    }
    Ok(())
}

fn rate(r: f64) -> String {
    format!("{:.3}", r).trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(schedule: serde_json::Value) -> JobSpec {
        JobSpec::from_json(&serde_json::json!({
            "name": "q", "schedule": schedule,
            "target": { "kind": "http", "url": "https://example.com/hook" }
        }))
        .unwrap()
    }

    #[test]
    fn the_peak_rate_is_the_densest_stretch_of_the_schedule() {
        let now = Utc::now();
        assert_eq!(peak_fires_per_second(&spec(serde_json::json!({ "kind": "interval", "every_ms": 2000 })), now), 0.5);
        let every_second = spec(serde_json::json!({ "kind": "cron", "expr": "* * * * * *", "timezone": "UTC" }));
        assert_eq!(peak_fires_per_second(&every_second, now), 1.0);
        // Bursts of three a second apart once an hour: the burst counts.
        let burst = spec(serde_json::json!({ "kind": "cron", "expr": "0-2 0 * * * *", "timezone": "UTC" }));
        assert_eq!(peak_fires_per_second(&burst, now), 1.0);
        let hourly = spec(serde_json::json!({ "kind": "cron", "expr": "0 0 * * * *", "timezone": "UTC" }));
        assert!((peak_fires_per_second(&hourly, now) - 1.0 / 3600.0).abs() < 1e-9);
        assert_eq!(rate(0.5), "0.5");
        assert_eq!(rate(2.0), "2");
    }

    #[test]
    fn a_remembered_cron_peak_is_used_only_for_jobs_without_a_window_and_only_for_a_while() {
        let now = Utc::now();
        let expr = "0-2 7 * * * *";
        let burst = spec(serde_json::json!({ "kind": "cron", "expr": expr, "timezone": "Asia/Tokyo" }));
        assert_eq!(peak_fires_per_second(&burst, now), 1.0);
        // The same expression ending before its second fire: one fire, no rate.
        let first = burst.compile(now).unwrap().next_after(now).unwrap();
        let ended = spec(serde_json::json!({
            "kind": "cron", "expr": expr, "timezone": "Asia/Tokyo",
            "end_at": (first + chrono::TimeDelta::milliseconds(500)).to_rfc3339()
        }));
        assert_eq!(peak_fires_per_second(&ended, now), 0.0);
        // A stale memo is not read: a wrong value planted for long ago is replaced.
        let key = (expr.to_owned(), "Asia/Tokyo".to_owned());
        let long_ago = now - CRON_PEAK_REUSED_FOR - chrono::TimeDelta::seconds(1);
        cron_peaks().keep(key.clone(), long_ago, 42.0);
        assert_eq!(peak_fires_per_second(&burst, now), 1.0);
        assert_eq!(cron_peaks().recall(&key, now), Some(1.0));
    }
}
