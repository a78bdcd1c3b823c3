//! Recovery: steady periodic load, then every scheduler down (SIGKILL) for
//! K seconds, then all of them back under the same node ids. Workers stay
//! up. Reports
//! - the slots due during the outage (from the jobs' schedules) and what the
//!   ledger says became of each, read through `GET /v1/executions`
//!   (status × trigger counts);
//! - how many of them were delivered, how late, and the catch-up rate
//!   (late deliveries per second from the restart to the last of them);
//! - unaccounted slots: neither delivered nor recorded as `skipped`/`missed`
//!   (nothing may be silently dropped: this should be 0);
//! - misses and duplicates of the normal slots before the outage and after
//!   the restart.
//!
//! A job whose oldest missed slot is less late than the schedulers' misfire
//! threshold (30 s by default) fires them all late; otherwise every missed
//! slot follows the job's misfire policy
//! (`--misfire`: fire_once by default; `mixed` gives a third each of
//! fire_once, skip and fire_all).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use crate::measure::tally;
use crate::report::{OutArgs, Percentiles, Report, fmt_f, fmt_int};
use crate::stack::StackArgs;
use crate::steady::{LoadArgs, load_rows, sleep_until, start_load};

#[derive(clap::Args)]
pub struct RecoveryArgs {
    #[command(flatten)]
    load: LoadArgs,
    /// Normal firing before the outage (measured for misses too).
    #[arg(long, default_value_t = 20)]
    before_secs: i64,
    /// How long every scheduler is down.
    #[arg(long, default_value_t = 60)]
    outage_secs: i64,
    /// Longest wait after the restart for the catch-up to finish.
    #[arg(long, default_value_t = 180)]
    after_secs: i64,
    /// The catch-up is over when no late delivery arrived for this long.
    #[arg(long, default_value_t = 8)]
    quiet_secs: i64,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    out: OutArgs,
}

/// Every ledger row with a scheduled time in `[from, to)`, through the API:
/// execution id → (status, trigger).
async fn ledger(
    stack: &crate::stack::Stack,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<HashMap<String, (String, String)>> {
    let mut rows = HashMap::new();
    let mut cursor: Option<String> = None;
    let (f, t) = (domain::execution::format_instant(from), domain::execution::format_instant(to));
    loop {
        let mut q = format!("/v1/executions?limit=500&from={f}&to={t}");
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={}", c.replace('+', "%2B").replace('|', "%7C").replace(':', "%3A")));
        }
        let page = stack.get_json(&q).await?;
        for item in page["items"].as_array().into_iter().flatten() {
            let s = |k: &str| item[k].as_str().unwrap_or_default().to_owned();
            rows.insert(s("execution_id"), (s("status"), s("trigger")));
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return Ok(rows),
        }
    }
}

pub async fn run(args: RecoveryArgs) -> anyhow::Result<()> {
    let title = format!(
        "Recovery: {} fires/s, all {} schedulers down for {} s",
        fmt_f(args.load.rate),
        args.stack.schedulers,
        args.outage_secs
    );
    let mut report = Report::new("recovery", format!("recovery-{}s", args.outage_secs), title, &args.out);
    let mut running = start_load("recovery", &args.load, &args.stack, None).await?;
    // Skip the first seconds: the very first slots are part of start-up.
    let measured_from = running.t0 + TimeDelta::seconds(3);
    let down_at_planned = running.t0 + TimeDelta::seconds(args.before_secs);

    sleep_until(down_at_planned).await;
    let sampler = crate::procstat::Sampler::start(running.stack.targets());
    // Windows at millisecond precision, like every slot and the API's filters.
    let down_at = domain::execution::truncate_ms(Utc::now());
    let names = running.stack.kill_all_schedulers().await?;
    eprintln!("all schedulers killed: {names:?}");
    sleep_until(down_at + TimeDelta::seconds(args.outage_secs)).await;
    let up_at = domain::execution::truncate_ms(Utc::now());
    running.stack.restart_schedulers(&names)?;
    eprintln!("schedulers restarted");

    // Wait for the catch-up: late deliveries (slots before the restart) until quiet.
    let give_up = up_at + TimeDelta::seconds(args.after_secs);
    let min_end = up_at + TimeDelta::seconds(args.quiet_secs.max(10));
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = Utc::now();
        let last_late = running
            .receiver
            .snapshot()
            .iter()
            .filter(|d| d.scheduled_at.is_some_and(|s| s >= down_at && s < up_at))
            .map(|d| d.received_at)
            .max();
        let quiet = last_late.is_none_or(|l| now - l > TimeDelta::seconds(args.quiet_secs));
        if (now > min_end && quiet) || now > give_up {
            break;
        }
    }
    let end = Utc::now();
    let usage = sampler.stop().await;
    // Normal slots after the restart are counted up to a few seconds before the end.
    let after_to = end - TimeDelta::seconds(5);
    let got = running.receiver.snapshot();
    let outage_ledger = ledger(&running.stack, down_at, up_at).await?;
    let crate::steady::Running { stack, jobs, create_secs, .. } = running;
    stack.shutdown().await?;

    // Normal slots: before the outage and after the restart.
    let before = tally(&jobs, measured_from, down_at, &got);
    let after = tally(&jobs, up_at, after_to.max(up_at), &got);
    // Outage slots: delivered (late), or accounted for by the ledger.
    let outage = tally(&jobs, down_at, up_at, &got);
    let delivered_ids: HashSet<&str> = got
        .iter()
        .filter(|d| d.scheduled_at.is_some_and(|s| s >= down_at && s < up_at))
        .map(|d| &*d.execution_id)
        .collect();
    let mut expected_ids = Vec::new();
    for job in &jobs {
        for slot in job.slots(down_at, up_at) {
            expected_ids.push(domain::execution::execution_id(job.id, slot));
        }
    }
    let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
    let (mut unaccounted, mut no_row, mut delivered_but_skipped) = (0usize, 0usize, 0usize);
    for id in &expected_ids {
        let row = outage_ledger.get(id);
        let key = row.map(|(s, t)| format!("{s} ({t})")).unwrap_or_else(|| "no ledger row".into());
        *by_status.entry(key).or_default() += 1;
        let skipped = row.is_some_and(|(s, _)| s == "skipped" || s == "missed");
        let delivered = delivered_ids.contains(id.as_str());
        if row.is_none() {
            no_row += 1;
        }
        if delivered && skipped {
            delivered_but_skipped += 1;
        }
        if !delivered && !skipped {
            unaccounted += 1;
        }
    }
    let late_received: Vec<DateTime<Utc>> = outage.first_received.clone();
    let first_late = late_received.iter().filter(|r| **r >= up_at).min().copied();
    let last_late = late_received.iter().filter(|r| **r >= up_at).max().copied();
    let caught_up = late_received.iter().filter(|r| **r >= up_at).count();

    load_rows(&mut report, jobs.len(), create_secs, &args.load, &args.stack);
    report.row("misfire policy of the jobs", &args.load.misfire);
    report.row(
        "outage",
        format!(
            "{} s, every scheduler killed (SIGKILL), workers up",
            fmt_f((up_at - down_at).num_milliseconds() as f64 / 1000.0)
        ),
    );
    report.row("slots due during the outage", fmt_int(outage.expected as i64));
    for (k, v) in &by_status {
        report.row(format!("  ledger: {k}"), fmt_int(*v as i64));
    }
    report.row(
        "  delivered / unaccounted (not delivered, not skipped or missed)",
        format!("{} / {}", fmt_int(outage.delivered as i64), fmt_int(unaccounted as i64)),
    );
    if delivered_but_skipped > 0 {
        report.row("  delivered although the ledger says skipped/missed", delivered_but_skipped);
    }
    report.row("  duplicates", fmt_int(outage.duplicates as i64));
    report.row("  lateness of the outage slots delivered", Percentiles::cell(outage.lateness()));
    if let (Some(first), Some(last)) = (first_late, last_late) {
        let span = (last - up_at).num_milliseconds() as f64 / 1000.0;
        report.row(
            "restart → first / last catch-up delivery",
            format!("{} / {} s", fmt_f((first - up_at).num_milliseconds() as f64 / 1000.0), fmt_f(span)),
        );
        if span > 0.0 {
            report.row(
                "catch-up rate (restart → last late delivery)",
                format!("{}/s", fmt_int((caught_up as f64 / span) as i64)),
            );
        }
    }
    before.rows(&mut report, "before the outage: ");
    after.rows(&mut report, "after the restart: ");
    crate::procstat::rows(&mut report, &usage);
    report.data("outage", json!({ "down_at": down_at, "up_at": up_at, "end": end }));
    report.data("outage_slots", &outage);
    report.data("ledger_outage_by_status", &by_status);
    report.data("unaccounted", unaccounted);
    report.data("no_ledger_row", no_row);
    report.data("delivered_but_skipped", delivered_but_skipped);
    report.data(
        "catch_up",
        json!({
            "delivered_after_restart": caught_up,
            "first_after_restart_ms": first_late.map(|f| (f - up_at).num_milliseconds()),
            "last_after_restart_ms": last_late.map(|l| (l - up_at).num_milliseconds()),
        }),
    );
    report.data("before", &before);
    report.data("after", &after);
    report.data("lateness_after_restart", after.lateness());
    report.finish(&args.out)?;
    Ok(())
}
