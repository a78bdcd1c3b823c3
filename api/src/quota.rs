//! Per-namespace quotas: how many live jobs, and how many fires per second
//! its live, unpaused jobs may add up to. Each job counts at the densest
//! stretch of its schedule, computed when it is created or changed, so a
//! quota bounds what the namespace can ask of the cluster, not what it
//! happens to be firing right now.
//!
//! Fires made on a user's request (a trigger, a bulk trigger, a replay of
//! one execution or in bulk) have no schedule to count in advance: each is
//! metered when it is asked for, against the same `max_fires_per_second`
//! ([`spend_manual_fires`]): a namespace's requests may make at most that
//! many fires per second, with a burst of one second's worth. Past it the
//! request is a 429 naming the quota, with `Retry-After`, and makes no fire.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

use domain::job::{JobSpec, ScheduleKind};

use crate::AppState;
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
        ScheduleKind::Cron { timezone, dst, .. } => {
            let window_free = spec.schedule.start_at.is_none() && spec.schedule.end_at.is_none();
            let exprs = spec.schedule.kind.cron_exprs().into_iter().map(str::to_owned).collect();
            let key = (exprs, timezone.clone(), *dst);
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

/// A cron schedule's peak is the same for every job that uses it
/// without a `start_at` or `end_at`, and walking its next 200 fires was
/// about a quarter of a create's CPU in the API: it is computed once per
/// schedule (expressions, zone, DST rule) and reused for `CRON_PEAK_REUSED_FOR`, over which
/// the sampled stretch moves too little to matter (a DST change inside
/// the next 200 fires is seen at most that late).
const CRON_PEAK_REUSED_FOR: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// Schedules remembered; past it the memo starts afresh.
const CRON_PEAK_MEMO_MAX: usize = 1_000;

/// The schedule's identity (expressions, zone, DST rule).
type CronPeakKey = (Vec<String>, String, domain::schedule::DstRule);
/// Schedule → (when computed, peak).
type CronPeakMemo = std::collections::HashMap<CronPeakKey, (DateTime<Utc>, f64)>;

#[derive(Default)]
struct CronPeaks(std::sync::Mutex<CronPeakMemo>);

fn cron_peaks() -> &'static CronPeaks {
    static PEAKS: std::sync::OnceLock<CronPeaks> = std::sync::OnceLock::new();
    PEAKS.get_or_init(CronPeaks::default)
}

impl CronPeaks {
    fn recall(&self, key: &CronPeakKey, now: DateTime<Utc>) -> Option<f64> {
        let memo = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (at, peak) = memo.get(key)?;
        ((now - *at).abs() < CRON_PEAK_REUSED_FOR).then_some(*peak)
    }

    fn keep(&self, key: CronPeakKey, now: DateTime<Utc>, peak: f64) {
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

/// A namespace's budget of fires made on request: its `max_fires_per_second`
/// as a rate, with a burst of one second's worth (at least one fire).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Fires per second.
    pub rate: f64,
}

impl Budget {
    /// Fires one request may make at once.
    pub fn burst(self) -> u64 {
        self.rate.ceil().max(1.0) as u64
    }

    /// Milliseconds the budget takes to earn back one fire.
    fn interval_ms(self) -> f64 {
        1000.0 / self.rate
    }
}

/// GCRA, the token bucket as one instant per namespace: `tat` is when the
/// budget is full again. A spend of `cost` fires fits when the budget, after
/// it, would be full again no later than one burst from `now`. `None`: it
/// fits, the new instant to keep; `Some(wait)`: it does not, and fits after
/// `wait` ms at the earliest.
fn gcra(tat: f64, now: f64, budget: Budget, cost: u64) -> Result<f64, f64> {
    let interval = budget.interval_ms();
    let new_tat = tat.max(now) + interval * cost as f64;
    let fits_at = new_tat - interval * budget.burst() as f64;
    if fits_at <= now { Ok(new_tat) } else { Err(fits_at - now) }
}

/// The same in Redis, for every namespace of a request at once (all fit or
/// none is spent), on the server's clock so that every API replica meters
/// one budget. KEYS: the budgets; ARGV: interval, burst interval and cost
/// per key. Returns 0, or the milliseconds to wait.
const SPEND_SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = 0
local tats = {}
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[3 * i - 2])
  local burst = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local tat = tonumber(redis.call('GET', key) or now)
  if tat < now then tat = now end
  local new_tat = tat + interval * cost
  local fits_at = new_tat - burst
  if fits_at > now and fits_at - now > wait then wait = fits_at - now end
  tats[i] = new_tat
end
if wait > 0 then return math.ceil(wait) end
for i, key in ipairs(KEYS) do
  redis.call('SET', key, tostring(tats[i]), 'PX', math.ceil(tats[i] - now) + 1000)
end
return 0
"#;

/// How long a Redis shard has to answer a spend before the next one (or
/// this process's own budgets) is asked.
const SPEND_REDIS_TIMEOUT: Duration = Duration::from_millis(250);

/// This process's budgets, for when no Redis shard answers: each API
/// replica then meters on its own (at worst the quota times the replicas).
/// (cluster, namespace) → `tat` in ms since the epoch.
fn local_budgets() -> &'static Mutex<HashMap<(String, String), f64>> {
    static BUDGETS: std::sync::OnceLock<Mutex<HashMap<(String, String), f64>>> = std::sync::OnceLock::new();
    BUDGETS.get_or_init(Default::default)
}

/// The Redis key of a namespace's budget of fires made on request.
pub fn budget_key(cluster: &str, namespace: &str) -> String {
    format!("{cluster}:fires:{namespace}")
}

/// Spends `fires` (by namespace) of the namespaces' budgets of fires made on
/// request, all or none: `Ok` when every namespace with a
/// `max_fires_per_second` has room for its count now. A namespace without
/// that quota is not metered. Over a budget: 429 naming the quota, with
/// `Retry-After`. More fires at once than a namespace's burst (or a quota
/// of 0) could never fit: 409, saying so.
pub async fn spend_manual_fires(
    state: &AppState,
    client: &impl GenericClient,
    fires: &BTreeMap<String, u64>,
) -> ApiResult<()> {
    let names: Vec<&str> = fires.iter().filter(|(_, n)| **n > 0).map(|(ns, _)| ns.as_str()).collect();
    if names.is_empty() {
        return Ok(());
    }
    let rows = client
        .query(
            "SELECT name, max_fires_per_second FROM namespaces WHERE name = ANY($1) AND max_fires_per_second IS NOT NULL",
            &[&names],
        )
        .await?;
    let mut metered: Vec<(String, Budget, u64)> = Vec::new();
    for row in rows {
        let (name, max): (String, f64) = (row.get(0), row.get(1));
        let cost = fires[&name];
        let budget = Budget { rate: max };
        if max <= 0.0 {
            return Err(ApiError::Conflict(format!(
                "namespace {name:?} has the quota max_fires_per_second 0: it makes no fire on request \
                 (trigger, replay); ask an admin to raise it"
            )));
        }
        if cost > budget.burst() {
            return Err(ApiError::Conflict(format!(
                "this request would make {cost} fires in namespace {name:?} at once, more than its quota \
                 max_fires_per_second {} ever allows at once ({}); ask for fewer per request \
                 (a narrower selector, a smaller limit)",
                rate(max),
                budget.burst()
            )));
        }
        metered.push((name, budget, cost));
    }
    if metered.is_empty() {
        return Ok(());
    }
    let wait_ms = match spend_in_redis(state, &metered).await {
        Some(wait) => wait,
        None => spend_locally(&state.cluster, &metered),
    };
    if wait_ms == 0 {
        return Ok(());
    }
    let names = metered.iter().map(|(n, b, _)| format!("{n:?} (max_fires_per_second {})", rate(b.rate)));
    Err(ApiError::TooManyRequests {
        detail: format!(
            "over the fires-per-second quota of namespace {}: fires made on request (trigger, replay) count \
             against it as scheduled ones do; retry in {} ms",
            names.collect::<Vec<_>>().join(", "),
            wait_ms
        ),
        retry_after_secs: wait_ms.div_ceil(1000).max(1),
    })
}

/// The spend in the first Redis shard that answers in time: the wait in
/// ms (0: spent), or `None` when none did.
async fn spend_in_redis(state: &AppState, metered: &[(String, Budget, u64)]) -> Option<u64> {
    let script = redis::Script::new(SPEND_SCRIPT);
    for shard in &state.redis {
        let mut invocation = script.prepare_invoke();
        for (name, budget, cost) in metered {
            let interval = budget.interval_ms();
            invocation
                .key(budget_key(&state.cluster, name))
                .arg(interval)
                .arg(interval * budget.burst() as f64)
                .arg(*cost);
        }
        let spent = tokio::time::timeout(SPEND_REDIS_TIMEOUT, async {
            let mut conn = shard.get().await.ok()?;
            invocation.invoke_async::<u64>(&mut *conn).await.ok()
        })
        .await;
        if let Ok(Some(wait)) = spent {
            return Some(wait);
        }
    }
    tracing::warn!("no Redis shard answered a spend of fires made on request; metered by this API replica alone");
    None
}

/// The spend in this process's own budgets: the wait in ms (0: spent).
fn spend_locally(cluster: &str, metered: &[(String, Budget, u64)]) -> u64 {
    let now = Utc::now().timestamp_millis() as f64;
    let mut budgets = local_budgets().lock().unwrap_or_else(|e| e.into_inner());
    let mut spent = Vec::new();
    let mut wait: f64 = 0.0;
    for (name, budget, cost) in metered {
        let key = (cluster.to_owned(), name.clone());
        let tat = budgets.get(&key).copied().unwrap_or(now);
        match gcra(tat, now, *budget, *cost) {
            Ok(new_tat) => spent.push((key, new_tat)),
            Err(w) => wait = wait.max(w),
        }
    }
    if wait > 0.0 {
        return wait.ceil() as u64;
    }
    if budgets.len() > 10_000 {
        budgets.retain(|_, tat| *tat > now);
    }
    budgets.extend(spent);
    0
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

    /// The budget of fires made on request: a burst of one second's worth,
    /// then the rate; a spend that does not fit says when it would.
    #[test]
    fn manual_fires_are_metered_at_the_quota_with_a_one_second_burst() {
        let five = Budget { rate: 5.0 };
        assert_eq!(five.burst(), 5);
        assert_eq!(Budget { rate: 0.5 }.burst(), 1);
        assert_eq!(Budget { rate: 2.5 }.burst(), 3);
        let (mut tat, now) = (0.0, 1_000_000.0);
        for _ in 0..5 {
            tat = gcra(tat, now, five, 1).expect("the burst fits");
        }
        assert_eq!(gcra(tat, now, five, 1), Err(200.0), "the sixth waits a fifth of a second");
        assert_eq!(gcra(tat, now + 200.0, five, 1), Ok(now + 1_200.0));
        // Over any stretch, at most burst + rate × time fit.
        let (mut tat, mut accepted) = (0.0, 0);
        for ms in 0..5_100 {
            if let Ok(t) = gcra(tat, now + ms as f64, five, 1) {
                tat = t;
                accepted += 1;
            }
        }
        assert_eq!(accepted, 5 + 25, "5.1 s at 5/s after a burst of 5");
        // A spend of several fires at once: all or none.
        assert!(gcra(0.0, now, five, 5).is_ok());
        assert_eq!(gcra(0.0, now, five, 6), Err(200.0));
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
        // Several expressions count together: hourly at :00:00 and :00:30.
        let both =
            spec(serde_json::json!({ "kind": "cron", "exprs": ["0 0 * * * *", "30 0 * * * *"], "timezone": "UTC" }));
        assert!((peak_fires_per_second(&both, now) - 1.0 / 30.0).abs() < 1e-9);
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
        let key = (vec![expr.to_owned()], "Asia/Tokyo".to_owned(), Default::default());
        let long_ago = now - CRON_PEAK_REUSED_FOR - chrono::TimeDelta::seconds(1);
        cron_peaks().keep(key.clone(), long_ago, 42.0);
        assert_eq!(peak_fires_per_second(&burst, now), 1.0);
        assert_eq!(cron_peaks().recall(&key, now), Some(1.0));
    }
}
