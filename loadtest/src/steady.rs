//! Steady load, and failover under steady load.
//!
//! M periodic jobs (interval and cron, created through the API) produce R
//! fires/s: each job fires every `period`, and the jobs' phases are spread
//! evenly over the period. Firing starts at a common instant T0 (every job's
//! `start_at`); after a warm-up the measured window of D seconds begins.
//! Every slot due in the window (from the jobs' schedules) is looked for at
//! the receiver: misses, duplicates, lateness overall and per second, CPU
//! and memory of every process.
//!
//! `failover` is the same load with two changes inside the window: one
//! scheduler killed with SIGKILL, later a new one added; lateness is also
//! given for each phase (before the kill, between kill and add, after add).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use crate::measure::tally;
use crate::receiver::Receiver;
use crate::report::{OutArgs, Percentiles, Report, fmt_f, fmt_int};
use crate::stack::{CreatedJob, Stack, StackArgs};

/// The periodic load: how many fires per second, from how many jobs.
#[derive(clap::Args, Clone, Debug)]
pub struct LoadArgs {
    /// Fires per second the jobs produce together.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Each job fires once per period (jobs = rate × period).
    #[arg(long, default_value_t = 5000)]
    pub period_ms: u64,
    /// Share of cron jobs (`S/k * * * * *`); needs a period of whole seconds
    /// dividing 60, else every job is an interval job.
    #[arg(long, default_value_t = 0.5)]
    pub cron_share: f64,
    /// Misfire policy of the jobs: fire_once, skip, fire_all, or mixed (a third each).
    #[arg(long, default_value = "fire_once")]
    pub misfire: String,
}

impl LoadArgs {
    pub fn jobs(&self) -> usize {
        (self.rate * self.period_ms as f64 / 1000.0).round().max(1.0) as usize
    }

    /// Job bodies firing from `t0` on; their slots follow from the schedules.
    /// How many of the jobs are cron jobs.
    pub fn cron_jobs(&self) -> usize {
        let k = self.period_ms / 1000;
        let cron_ok = self.period_ms.is_multiple_of(1000) && k >= 1 && 60u64.is_multiple_of(k);
        if cron_ok { (self.jobs() as f64 * self.cron_share.clamp(0.0, 1.0)).round() as usize } else { 0 }
    }

    pub fn bodies(&self, hook: &str, t0: DateTime<Utc>) -> Vec<Value> {
        let n = self.jobs();
        let k = self.period_ms / 1000;
        let n_cron = self.cron_jobs();
        let n_interval = n - n_cron;
        let policies = ["fire_once", "skip", "fire_all"];
        (0..n)
            .map(|i| {
                let schedule = if i < n_cron {
                    // Cron fires on whole seconds; phase = the starting second.
                    json!({ "kind": "cron", "expr": format!("{}/{k} * * * * *", i as u64 % k), "timezone": "UTC",
                            "start_at": domain::execution::format_instant(t0) })
                } else {
                    let j = (i - n_cron) as u64;
                    let phase = j * self.period_ms / n_interval.max(1) as u64;
                    json!({ "kind": "interval", "every_ms": self.period_ms,
                            "start_at": domain::execution::format_instant(t0 + TimeDelta::milliseconds(phase as i64)) })
                };
                let misfire = if self.misfire == "mixed" { policies[i % 3] } else { self.misfire.as_str() };
                json!({
                    "name": format!("load-{i}"),
                    "schedule": schedule,
                    "target": { "kind": "http", "url": hook, "timeout_ms": 10_000 },
                    "misfire": misfire,
                })
            })
            .collect()
    }
}

#[derive(clap::Args)]
pub struct SteadyArgs {
    #[command(flatten)]
    pub load: LoadArgs,
    /// Length of the measured window.
    #[arg(long, default_value_t = 60)]
    pub duration_secs: i64,
    /// Firing before the measured window starts.
    #[arg(long, default_value_t = 10)]
    pub warmup_secs: i64,
    /// Wait after the window for late deliveries before counting.
    #[arg(long, default_value_t = 10)]
    pub grace_secs: u64,
    /// After the grace, wait up to this long for every slot of the window
    /// to have a final ledger status (an overload's backlog to drain), and
    /// report how long that took.
    #[arg(long, default_value_t = 0)]
    pub settle_secs: u64,
    /// A second phase: from `--drop-at-secs` into the window the load falls
    /// to this many fires/s (the other jobs end there), to see lateness
    /// recover once an overload ends.
    #[arg(long)]
    pub drop_to_rate: Option<f64>,
    /// Seconds into the measured window when the load drops.
    #[arg(long, default_value_t = 120)]
    pub drop_at_secs: i64,
    #[command(flatten)]
    pub stack: StackArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

#[derive(clap::Args)]
pub struct FailoverArgs {
    #[command(flatten)]
    steady: SteadyArgs,
    /// Seconds into the window when one scheduler is killed (SIGKILL).
    #[arg(long, default_value_t = 20)]
    kill_at_secs: i64,
    /// Seconds into the window when a new scheduler is added.
    #[arg(long, default_value_t = 40)]
    add_at_secs: i64,
}

/// A started load: the stack, the jobs, T0 and the receiver.
pub struct Running {
    pub stack: Stack,
    pub receiver: Receiver,
    pub jobs: Vec<CreatedJob>,
    pub t0: DateTime<Utc>,
    pub create_secs: f64,
}

/// Where the load falls to a lower rate: `rate` fires/s go on past `after`
/// (from T0); the other jobs end there.
#[derive(Clone, Copy, Debug)]
pub struct RateDrop {
    pub rate: f64,
    pub after: TimeDelta,
}

impl RateDrop {
    /// Gives the jobs beyond `rate`'s share an end just before the drop.
    /// The ending jobs are spread evenly over the list, so cron and
    /// interval jobs and their phases drop alike.
    fn apply(&self, load: &LoadArgs, bodies: &mut [Value], t0: DateTime<Utc>) {
        let n = bodies.len();
        let keep = ((self.rate / load.rate) * n as f64).round().clamp(0.0, n as f64) as usize;
        // `end_at` is inclusive: the last slot is strictly before the drop.
        let end_at = domain::execution::format_instant(t0 + self.after - TimeDelta::milliseconds(1));
        for (i, body) in bodies.iter_mut().enumerate() {
            let kept = (i + 1) * keep / n > i * keep / n;
            if !kept {
                body["schedule"]["end_at"] = json!(end_at);
            }
        }
    }
}

/// Starts the stack and creates the periodic jobs, firing from a T0 after creation.
pub async fn start_load(
    label: &str,
    load: &LoadArgs,
    stack_args: &StackArgs,
    drop: Option<RateDrop>,
) -> anyhow::Result<Running> {
    let receiver = Receiver::loopback().await?;
    let stack = Stack::start(label, stack_args).await?;
    let n = load.jobs();
    let t0 = domain::execution::truncate_ms(Utc::now() + TimeDelta::seconds(8 + n as i64 / 300));
    let mut bodies = load.bodies(&receiver.hook_url(), t0);
    if let Some(drop) = drop {
        drop.apply(load, &mut bodies, t0);
    }
    let (jobs, create_secs) = stack.create_jobs(bodies).await?;
    anyhow::ensure!(Utc::now() < t0, "creating {n} jobs took {create_secs:.1} s, past the start instant");
    eprintln!("{label}: created {n} jobs in {create_secs:.1} s; firing from {}", domain::execution::format_instant(t0));
    Ok(Running { stack, receiver, jobs, t0, create_secs })
}

/// Sleeps until the wall clock reaches `at`.
pub async fn sleep_until(at: DateTime<Utc>) {
    let ms = (at - Utc::now()).num_milliseconds();
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms as u64)).await;
    }
}

/// The rows describing the stack and the load.
pub fn load_rows(report: &mut Report, jobs: usize, create_secs: f64, load: &LoadArgs, stack: &StackArgs) {
    report.row("stack", format!("{} schedulers, {} workers", stack.schedulers, stack.workers));
    report.row("settings", stack.settings());
    report.row(
        "jobs (period, cron jobs)",
        format!("{} (every {} ms, {} cron)", fmt_int(jobs as i64), load.period_ms, fmt_int(load.cron_jobs() as i64)),
    );
    report.row("creates through the API", format!("{}/s", fmt_int((jobs as f64 / create_secs) as i64)));
}

pub async fn run_steady(args: SteadyArgs) -> anyhow::Result<()> {
    run(args, None).await
}

pub async fn run_failover(args: FailoverArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        0 < args.kill_at_secs && args.kill_at_secs < args.add_at_secs && args.add_at_secs < args.steady.duration_secs,
        "need 0 < --kill-at-secs < --add-at-secs < --duration-secs"
    );
    anyhow::ensure!(args.steady.stack.schedulers >= 2, "failover needs at least 2 schedulers");
    run(args.steady, Some((args.kill_at_secs, args.add_at_secs))).await
}

/// Rows whose status is not final (pending, running, retrying, or one this
/// build does not know).
fn not_final(ledger: &[(String, i64)]) -> i64 {
    let is_final = |s: &str| domain::slot::Status::ALL.iter().any(|st| st.as_str() == s && st.is_final());
    ledger.iter().filter(|(s, _)| !is_final(s)).map(|(_, n)| n).sum()
}

/// The per-second p99 a load that dropped must return under.
const RECOVERED_P99_MS: i64 = 250;

async fn run(args: SteadyArgs, failover: Option<(i64, i64)>) -> anyhow::Result<()> {
    let (scenario, title) = match failover {
        None => ("steady", format!("Steady: {} fires/s for {} s", fmt_f(args.load.rate), args.duration_secs)),
        Some(_) => (
            "failover",
            format!(
                "Failover: {} fires/s, kill one of {} schedulers, then add one",
                fmt_f(args.load.rate),
                args.stack.schedulers
            ),
        ),
    };
    let mut report = Report::new(scenario, format!("{scenario}-{}", args.load.rate), title.clone(), &args.out);
    let rate_drop = args
        .drop_to_rate
        .map(|rate| RateDrop { rate, after: TimeDelta::seconds(args.warmup_secs + args.drop_at_secs) });
    if let Some(drop) = &rate_drop {
        anyhow::ensure!(
            0 < args.drop_at_secs && args.drop_at_secs < args.duration_secs,
            "need 0 < --drop-at-secs < --duration-secs"
        );
        anyhow::ensure!(
            0.0 <= drop.rate && drop.rate < args.load.rate,
            "--drop-to-rate must be below --rate ({})",
            args.load.rate
        );
        anyhow::ensure!(failover.is_none(), "failover does not take a rate drop");
    }
    let mut running = start_load(scenario, &args.load, &args.stack, rate_drop).await?;
    let from = running.t0 + TimeDelta::seconds(args.warmup_secs);
    let to = from + TimeDelta::seconds(args.duration_secs);
    let drop_at = rate_drop.map(|d| running.t0 + d.after);

    sleep_until(from).await;
    let sampler = crate::procstat::Sampler::start(running.stack.targets());
    let postgres_at_start = running.stack.postgres().await?;
    let mut events: Vec<(DateTime<Utc>, String)> = Vec::new();
    if let (Some(at), Some(rate)) = (drop_at, args.drop_to_rate) {
        events.push((at, format!("drop to {} fires/s", fmt_f(rate))));
    }
    if let Some((kill_at, add_at)) = failover {
        sleep_until(from + TimeDelta::seconds(kill_at)).await;
        let victim = running.stack.schedulers().first().cloned().unwrap_or_default();
        let at = domain::execution::truncate_ms(Utc::now());
        running.stack.kill_scheduler(&victim).await?;
        eprintln!("killed {victim}");
        events.push((at, format!("kill -9 {victim}")));
        sleep_until(from + TimeDelta::seconds(add_at)).await;
        let at = domain::execution::truncate_ms(Utc::now());
        let added = running.stack.add_scheduler()?;
        eprintln!("added {added}");
        events.push((at, format!("add {added}")));
    }
    sleep_until(to).await;
    let usage = sampler.stop().await;
    let postgres_at_end = running.stack.postgres().await?;
    let ledger_at_end = running.stack.ledger_size().await?;
    tokio::time::sleep(Duration::from_secs(args.grace_secs)).await;
    let settling = std::time::Instant::now();
    let ledger = loop {
        let ledger = running.stack.ledger_window_by_status(from, to).await?;
        if not_final(&ledger) == 0 || settling.elapsed() >= Duration::from_secs(args.settle_secs) {
            break ledger;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let settled_after = (args.settle_secs > 0).then(|| settling.elapsed().as_secs_f64());
    let decided = running.stack.ledger_window_decided(from, to).await?;
    let got = running.receiver.snapshot();
    let cluster = running.stack.get_json("/v1/cluster").await.ok();
    // Whether the locks kept the two owners of each slot apart: a lost lock
    // race costs nothing, a claim conflict costs the ledger a statement.
    let races = [
        runtime::metrics::LOCK_WINS_TOTAL,
        runtime::metrics::LOCK_LOSSES_TOTAL,
        runtime::metrics::CLAIM_CONFLICTS_TOTAL,
    ];
    let race_sums = running.stack.scheduler_sums(&races).await;
    let Running { stack, jobs, create_secs, .. } = running;
    stack.shutdown().await?;

    let t = tally(&jobs, from, to, &got);
    load_rows(&mut report, jobs.len(), create_secs, &args.load, &args.stack);
    postgres_at_end.rows(&postgres_at_start, t.expected as u64, &ledger_at_end, &mut report);
    let window = args.duration_secs as f64;
    report.row(
        "fires/s: target / due / delivered",
        format!(
            "{} / {} / {}",
            fmt_f(args.load.rate),
            fmt_f(t.expected as f64 / window),
            fmt_f(t.delivered as f64 / window)
        ),
    );
    report.row("measured window", format!("{} s after {} s of warm-up", args.duration_secs, args.warmup_secs));
    t.rows(&mut report, "");
    let lost_at = t.lost_at(&decided);
    report.row(
        "  of the missed: decided by a policy (ledger skipped/missed) / lost",
        format!("{} / {}", fmt_int((t.missed - lost_at.len()) as i64), fmt_int(lost_at.len() as i64)),
    );
    report.data("lost", lost_at.len());
    let mut series = t.series(from);
    for (status, n) in &ledger {
        report.row(format!("  ledger (the window's slots): {status}"), fmt_int(*n));
    }
    let rows: i64 = ledger.iter().map(|(_, n)| n).sum();
    report.row("  ledger rows / slots due", format!("{} / {}", fmt_int(rows), fmt_int(t.expected as i64)));
    report.row("  not final at the end", fmt_int(not_final(&ledger)));
    if let Some(secs) = settled_after {
        report.row("  waited after the grace for final statuses", format!("{} s", fmt_f(secs)));
    }
    let cell = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| fmt_int(v as i64));
    report.row(
        "schedulers running at the end: lock wins / lock losses / claim conflicts",
        race_sums.iter().map(|v| cell(*v)).collect::<Vec<_>>().join(" / "),
    );
    report.data("lock_wins_losses_claim_conflicts", &race_sums);
    let worst = series.points.iter().map(|p| p.p99_ms).max();
    report.row("worst one-second p99", worst.map(|w| format!("{} ms", fmt_int(w))).unwrap_or_else(|| "-".into()));
    let mut phases = serde_json::Map::new();
    if let Some(drop_at) = drop_at {
        for (name, (a, b)) in [("before the drop", (from, drop_at)), ("after the drop", (drop_at, to))] {
            let p = t.lateness_between(a, b);
            report.row(format!("lateness {name}"), Percentiles::cell(p));
            phases.insert(name.to_string(), serde_json::to_value(p)?);
        }
        // The chaos scenario's definition: a slot lost counts as infinitely
        // late; one its job's policy decided without a delivery does not count.
        let slots = t.first.iter().map(|(at, late)| (*at, Some(*late))).chain(lost_at.iter().map(|at| (*at, None)));
        let back = crate::chaos::verdict::recovery_secs(slots, drop_at, to, RECOVERED_P99_MS);
        report.row(
            format!("p99 back under {RECOVERED_P99_MS} ms after the drop"),
            back.map_or_else(|| "not within the window".to_owned(), |s| format!("{s} s")),
        );
        report.data("recovered_after_drop_secs", back);
    }
    if failover.is_some() {
        let bounds = [from, events[0].0, events[1].0, to];
        for (i, name) in ["before the kill", "kill → add", "after the add"].iter().enumerate() {
            let p = t.lateness_between(bounds[i], bounds[i + 1]);
            report.row(format!("lateness {name}"), Percentiles::cell(p));
            phases.insert(name.to_string(), serde_json::to_value(p)?);
        }
    }
    for (at, label) in &events {
        series.mark((*at - from).num_milliseconds() as f64 / 1000.0, label.clone());
    }
    crate::procstat::rows(&mut report, &usage);
    report.plot(&args.out, &series, &format!("{title}: lateness per second"))?;
    report.data("rate", args.load.rate);
    report.data("period_ms", args.load.period_ms);
    report.data("jobs", jobs.len());
    report.data("window", json!({ "from": from, "to": to }));
    report.data("tally", &t);
    report.data("ledger_by_status", &ledger);
    report.data("settled_after_secs", settled_after);
    report.data("lateness", t.lateness());
    report.data("phases", phases);
    report.data("events", events.iter().map(|(at, l)| json!({ "at": at, "event": l })).collect::<Vec<_>>());
    report.data("series", &series);
    report.data("cluster_at_end", cluster);
    report.finish(&args.out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_running_retrying_and_unknown_statuses_are_not_final() {
        let ledger: Vec<(String, i64)> = [("failed", 1), ("pending", 2), ("retrying", 4), ("running", 8), ("new", 16)]
            .into_iter()
            .chain([("skipped", 32), ("succeeded", 64), ("missed", 128)])
            .map(|(s, n)| (s.to_owned(), n))
            .collect();
        assert_eq!(not_final(&ledger), 2 + 4 + 8 + 16);
    }

    #[test]
    fn a_rate_drop_ends_the_jobs_beyond_its_share_evenly_and_before_the_drop() {
        let load = LoadArgs { rate: 100.0, period_ms: 1000, cron_share: 0.5, misfire: "fire_once".into() };
        let t0 = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let mut bodies = load.bodies("http://127.0.0.1:1/", t0);
        let drop = RateDrop { rate: 20.0, after: TimeDelta::seconds(30) };
        drop.apply(&load, &mut bodies, t0);
        let ending: Vec<bool> = bodies.iter().map(|b| b["schedule"].get("end_at").is_some()).collect();
        assert_eq!(ending.iter().filter(|e| !**e).count(), 20, "20 of 100 jobs go on");
        // Spread: each half (cron, interval) keeps its share.
        assert_eq!(ending[..50].iter().filter(|e| !**e).count(), 10);
        let end_at = bodies.iter().find_map(|b| b["schedule"]["end_at"].as_str()).unwrap();
        assert_eq!(end_at, domain::execution::format_instant(t0 + TimeDelta::milliseconds(29_999)));
    }
}
