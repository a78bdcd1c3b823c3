//! The herd: N one-shot jobs due in the same instant, created through the
//! public API of a [`Stack`] this command starts itself. Lateness is measured
//! at the run's own receiver (received − due); drain rate is deliveries per
//! second from the first to the last. With `--with-ceiling` the broker
//! ceiling and the raw HTTP ceiling (a plain client with the workers'
//! connections against the same receiver code) are measured first, in the
//! same run, and the drain rate is given as a share of each.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use crate::ceiling::CeilingArgs;
use crate::http_ceiling::HttpCeilingArgs;
use crate::measure::tally;
use crate::receiver::Receiver;
use crate::report::{OutArgs, Report, fmt_f, fmt_int};
use crate::stack::{Stack, StackArgs};

#[derive(clap::Args)]
pub struct HerdArgs {
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    /// Seconds between the start of creation and the due instant (default:
    /// 15 + jobs/2,000 through the batch endpoint, room for creating them at
    /// a tenth of its measured rate; 15 + jobs/300 one by one).
    #[arg(long)]
    lead_secs: Option<i64>,
    /// Give up waiting for deliveries this long after the due instant.
    #[arg(long, default_value_t = 180)]
    timeout_secs: i64,
    /// Give every job this `jitter_ms`: deliveries spread over the window
    /// while the slots stay the same; the report adds the receiver's peak
    /// rate and the lateness against each slot's jittered instant.
    #[arg(long, default_value_t = 0)]
    jitter_ms: u64,
    /// Jobs per `POST /v1/jobs/batch` request; 0 creates them one by one
    /// through `POST /v1/jobs` (as before the batch endpoint existed).
    #[arg(long, default_value_t = 1_000)]
    create_batch: usize,
    /// Signing keys made in the jobs' namespace before the herd (0 to 5):
    /// every delivery then carries one Standard Webhooks signature per key,
    /// which measures what signing costs a delivery.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=5))]
    signing_keys: u8,
    /// Measure the broker ceiling and the raw HTTP ceiling first and report
    /// the drain rate against each.
    #[arg(long)]
    with_ceiling: bool,
    #[command(flatten)]
    ceiling: CeilingArgs,
    #[command(flatten)]
    http_ceiling: HttpCeilingArgs,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    out: OutArgs,
}

pub async fn run(args: HerdArgs) -> anyhow::Result<()> {
    let mut report = Report::new(
        "herd",
        format!("herd-{}", args.jobs),
        if args.jitter_ms > 0 {
            format!(
                "Herd: {} one-shot jobs due in the same instant, jitter_ms {}",
                fmt_int(args.jobs as i64),
                fmt_int(args.jitter_ms as i64)
            )
        } else {
            format!("Herd: {} one-shot jobs due in the same instant", fmt_int(args.jobs as i64))
        },
        &args.out,
    );
    let ceiling = if args.with_ceiling { Some(crate::ceiling::measure(&args.ceiling).await?) } else { None };
    let http_connections =
        args.http_ceiling.http_ceiling_connections.unwrap_or_else(|| args.stack.worker_connections_per_host());
    let measure_http_ceiling = || {
        crate::http_ceiling::measure_median(
            args.http_ceiling.http_ceiling_requests,
            http_connections,
            args.http_ceiling.http_ceiling_runs,
        )
    };
    // Measured before the herd and again after it: the drain comes a minute
    // or two after the first runs, and a shared machine's speed moved by a
    // third between minutes (within one set, runs agreed within a tenth).
    let ceiling_before = if args.with_ceiling { Some(measure_http_ceiling().await?) } else { None };

    let receiver = Receiver::loopback().await?;
    let stack = Stack::start("herd", &args.stack).await?;
    for _ in 0..args.signing_keys {
        stack.post_json("/v1/signing-keys").await?;
    }
    let creates_per_second = if args.create_batch > 0 { 2_000 } else { 300 };
    let lead = args.lead_secs.unwrap_or(15 + args.jobs as i64 / creates_per_second);
    let due = domain::execution::truncate_ms(Utc::now() + TimeDelta::seconds(lead));
    let bodies = (0..args.jobs)
        .map(|i| {
            json!({
                "name": format!("herd-{i}"),
                "schedule": { "kind": "once", "at": domain::execution::format_instant(due) },
                "target": { "kind": "http", "url": receiver.hook_url(), "timeout_ms": 10_000 },
                "jitter_ms": args.jitter_ms,
            })
        })
        .collect();
    let (jobs, create_secs) = if args.create_batch > 0 {
        stack.create_jobs_batched(bodies, args.create_batch).await?
    } else {
        stack.create_jobs(bodies).await?
    };
    anyhow::ensure!(
        Utc::now() < due,
        "creating took {create_secs:.1} s: the herd was due before it was all created (raise --lead-secs)"
    );
    eprintln!("created {} jobs in {create_secs:.1} s; due at {}", args.jobs, domain::execution::format_instant(due));

    let sampler = crate::procstat::Sampler::start(stack.targets());
    let postgres_at_start = stack.postgres().await?;
    let deadline = due + TimeDelta::seconds(args.timeout_secs);
    while receiver.count() < args.jobs && Utc::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Late duplicates would show up shortly after: give them a moment.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let usage = sampler.stop().await;
    let got = receiver.snapshot();
    let signed = receiver.signed();
    let postgres_at_end = stack.postgres().await?;
    let ledger_at_end = stack.ledger_size().await?;
    let ledger = stack.ledger_by_status().await?;
    let by_worker = per_worker(&stack.ledger_workers().await?, &got, due);
    let verify = VerifyStage::read(&stack).await;
    stack.shutdown().await?;
    let (http_ceiling, ceiling_runs_before) = match ceiling_before {
        Some(before) => {
            let runs_before = before.runs_per_second.len();
            let after = measure_http_ceiling().await?;
            (Some(crate::http_ceiling::HttpCeiling::median_of(vec![before, after])), runs_before)
        }
        None => (None, 0),
    };

    let t = tally(&jobs, due, due + TimeDelta::milliseconds(1), &got);
    report.row("stack", format!("{} schedulers, {} workers", args.stack.schedulers, args.stack.workers));
    report.row("settings", args.stack.settings());
    report.row(
        "signing",
        format!(
            "{} signing keys; {} of {} deliveries signed",
            args.signing_keys,
            fmt_int(signed as i64),
            fmt_int(got.len() as i64)
        ),
    );
    postgres_at_end.rows(&postgres_at_start, args.jobs as u64, &ledger_at_end, &mut report);
    report.row(
        if args.create_batch > 0 { "creates through the API (batches)" } else { "creates through the API" },
        format!(
            "{}/s ({} s for {})",
            fmt_int((args.jobs as f64 / create_secs) as i64),
            fmt_f(create_secs),
            fmt_int(args.jobs as i64)
        ),
    );
    t.rows(&mut report, "");
    for (status, n) in &ledger {
        report.row(format!("  ledger: {status}"), fmt_int(*n));
    }
    let first = t.first_received.iter().min().copied();
    let last = t.first_received.iter().max().copied();
    let mut drain = None;
    if let (Some(first), Some(last)) = (first, last) {
        report.row("earliest delivery", format!("{} ms after due", fmt_int((first - due).num_milliseconds())));
        report.row("time from due to the last delivery", format!("{} ms", fmt_int((last - due).num_milliseconds())));
        let span = (last - first).num_milliseconds() as f64 / 1000.0;
        if span > 0.0 {
            let rate = (t.delivered as f64 - 1.0) / span;
            drain = Some(rate);
            report.row("drain rate (first → last delivery)", format!("{}/s", fmt_int(rate as i64)));
        }
    }
    // A tail that one worker alone makes shows here: its share of the
    // slots and when its last one arrived, against the other's.
    for w in &by_worker {
        report.row(
            format!("  {}: slots, first / last delivery after due", w.worker),
            format!("{}, {} / {} ms", fmt_int(w.slots as i64), fmt_int(w.first_ms), fmt_int(w.last_ms)),
        );
    }
    // How long the due instant's check kept the slots from their delivery.
    if let Some(v) = &verify {
        report.row(
            "  due-instant check (workers): slots, mean, within 10 / 50 ms, read row by row",
            format!(
                "{}, {} ms, {:.0}% / {:.0}%, {:.0}%",
                fmt_int(v.slots as i64),
                fmt_f(v.mean_ms),
                v.within_10ms_share * 100.0,
                v.within_50ms_share * 100.0,
                v.by_row_share * 100.0
            ),
        );
    }
    let peak = peak_rate(&got);
    let fifths = fifths_ms(&t.first_received);
    if !fifths.is_empty() {
        report.row(
            "ms for each fifth of the slots (ramp … tail)",
            fifths.iter().map(|ms| fmt_int(*ms)).collect::<Vec<_>>().join(" / "),
        );
    }
    report.row("receiver's peak rate (busiest 100 ms, per second)", format!("{}/s", fmt_int(peak as i64)));
    let jittered = (args.jitter_ms > 0).then(|| jittered_lateness(&got, args.jitter_ms));
    if let Some(l) = &jittered {
        report.row(
            "lateness vs each slot's jittered instant p50 / p99 / max",
            format!("{} / {} / {} ms", fmt_int(l.0), fmt_int(l.1), fmt_int(l.2)),
        );
    }
    if let Some(c) = &ceiling {
        report.row(
            "broker ceiling in the same run",
            format!("{}/s ({} B messages)", fmt_int(c.end_to_end_per_second as i64), c.message_bytes),
        );
        if let Some(rate) = drain {
            report.row("drain rate / ceiling", format!("{:.0}%", rate / c.end_to_end_per_second * 100.0));
        }
    }
    if let Some(h) = &http_ceiling {
        report.row("raw HTTP ceiling in the same run", {
            let runs = |rs: &[f64]| rs.iter().map(|r| fmt_int(*r as i64)).collect::<Vec<_>>().join(", ");
            let (before, after) = h.runs_per_second.split_at(ceiling_runs_before);
            format!(
                "{}/s ({} requests over {} keep-alive connections; median of {}/s before the herd and {}/s after)",
                fmt_int(h.per_second as i64),
                fmt_int(h.requests as i64),
                h.connections,
                runs(before),
                runs(after)
            )
        });
        if let Some(rate) = drain {
            report.row("drain rate / raw HTTP ceiling", format!("{:.0}%", rate / h.per_second * 100.0));
        }
        // The lateness a herd cannot beat on this machine: its p99 slot is
        // the 99th percentile of deliveries made at the raw ceiling from the
        // due instant on, with nothing else to do.
        let floor_ms = (args.jobs as f64 * 0.99 / h.per_second * 1000.0).round() as i64;
        report.row("p99 floor at the raw HTTP ceiling (0.99 × jobs / ceiling)", format!("{} ms", fmt_int(floor_ms)));
        report.data("p99_floor_at_http_ceiling_ms", floor_ms);
    }
    crate::procstat::rows(&mut report, &usage);
    report.data("jobs", args.jobs);
    report.data("schedulers", args.stack.schedulers);
    report.data("workers", args.stack.workers);
    report.data("worker_prefetch", args.stack.worker_prefetch);
    report.data("creates_per_second", (args.jobs as f64 / create_secs).round());
    report.data("create_batch", args.create_batch);
    report.data("tally", &t);
    report.data("ledger_by_status", &ledger);
    report.data("lateness", t.lateness());
    report.data("earliest_ms", first.map(|f| (f - due).num_milliseconds()));
    report.data("last_delivery_after_due_ms", last.map(|l| (l - due).num_milliseconds()));
    report.data("drain_per_second", drain.map(f64::round));
    report.data("ceiling", &ceiling);
    report.data("http_ceiling", &http_ceiling);
    report.data("jitter_ms", args.jitter_ms);
    report.data("receiver_peak_per_second", peak.round());
    report.data("fifths_ms", &fifths);
    report.data("per_worker", &by_worker);
    report.data("verify_stage", &verify);
    report.data("jittered_lateness_p50_p99_max_ms", jittered);
    report.finish(&args.out)?;
    Ok(())
}

/// The workers' due-instant check (`cronshard_worker_stage_seconds`,
/// stage `verify`) over their lives: in a herd, the herd's slots. Each
/// slot's time runs from asking to the answer, the wait for its batch
/// included.
#[derive(Debug, serde::Serialize)]
struct VerifyStage {
    slots: u64,
    mean_ms: f64,
    within_10ms_share: f64,
    within_50ms_share: f64,
    /// Checked against the slot's ledger row, not only through "its job
    /// has not changed since the arming" (`verify_batch`).
    by_row_share: f64,
}

impl VerifyStage {
    async fn read(stack: &Stack) -> Option<VerifyStage> {
        const SERIES: [&str; 5] = [
            r#"cronshard_worker_stage_seconds_count{stage="verify"}"#,
            r#"cronshard_worker_stage_seconds_sum{stage="verify"}"#,
            r#"cronshard_worker_stage_seconds_bucket{stage="verify",le="0.01"}"#,
            r#"cronshard_worker_stage_seconds_bucket{stage="verify",le="0.05"}"#,
            r#"cronshard_worker_verified_total{by="row"}"#,
        ];
        let sums = stack.worker_sums(&SERIES).await;
        let [Some(count), Some(sum), Some(within_10ms), Some(within_50ms), by_row] = sums[..] else { return None };
        (count > 0.0).then(|| VerifyStage {
            slots: count as u64,
            mean_ms: sum / count * 1000.0,
            within_10ms_share: within_10ms / count,
            within_50ms_share: within_50ms / count,
            by_row_share: by_row.unwrap_or(0.0) / count,
        })
    }
}

/// One worker's part of a herd.
#[derive(Debug, serde::Serialize)]
struct WorkerPart {
    worker: String,
    slots: usize,
    first_ms: i64,
    last_ms: i64,
}

/// Each worker's slots (by the ledger's `worker_id`) and its first and last
/// delivery at the receiver, in milliseconds after `due`.
fn per_worker(rows: &[(uuid::Uuid, String)], got: &[crate::receiver::Delivery], due: DateTime<Utc>) -> Vec<WorkerPart> {
    let mut received: std::collections::HashMap<&str, DateTime<Utc>> = std::collections::HashMap::new();
    for d in got {
        let job = d.execution_id.split('@').next().unwrap_or_default();
        let at = received.entry(job).or_insert(d.received_at);
        *at = (*at).min(d.received_at);
    }
    let mut parts: std::collections::BTreeMap<&str, WorkerPart> = std::collections::BTreeMap::new();
    for (job_id, worker) in rows {
        let Some(at) = received.get(job_id.to_string().as_str()) else { continue };
        let ms = (*at - due).num_milliseconds();
        let part = parts.entry(worker).or_insert_with(|| WorkerPart {
            worker: worker.clone(),
            slots: 0,
            first_ms: i64::MAX,
            last_ms: i64::MIN,
        });
        part.slots += 1;
        part.first_ms = part.first_ms.min(ms);
        part.last_ms = part.last_ms.max(ms);
    }
    parts.into_values().collect()
}

/// How long each fifth of the first deliveries took, in order: the first
/// from the earliest delivery, each next from where the one before ended.
/// Where the drain loses time (a slow ramp, a tail) shows against the
/// middle fifths, which a single rate averages away.
fn fifths_ms(received: &[DateTime<Utc>]) -> Vec<i64> {
    if received.len() < 5 {
        return Vec::new();
    }
    let mut times: Vec<i64> = received.iter().map(|t| t.timestamp_millis()).collect();
    times.sort_unstable();
    let at = |share: usize| times[(times.len() - 1) * share / 5];
    (1..=5).map(|k| at(k) - at(k - 1)).collect()
}

/// The most first deliveries in any 100 ms window, per second.
fn peak_rate(got: &[crate::receiver::Delivery]) -> f64 {
    let mut times: Vec<i64> = got.iter().map(|d| d.received_at.timestamp_millis()).collect();
    times.sort_unstable();
    let (mut best, mut start) = (0usize, 0usize);
    for end in 0..times.len() {
        while times[end] - times[start] >= 100 {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best as f64 * 10.0
}

/// Lateness p50, p99 and max (ms) of first deliveries against each slot's
/// jittered instant (`domain::schedule::jitter_offset`).
fn jittered_lateness(got: &[crate::receiver::Delivery], jitter_ms: u64) -> (i64, i64, i64) {
    let mut seen = std::collections::HashSet::new();
    let mut late: Vec<i64> = got
        .iter()
        .filter(|d| seen.insert(d.execution_id.clone()))
        .filter_map(|d| {
            let at = d.scheduled_at?;
            let job: uuid::Uuid = d.execution_id.split('@').next()?.parse().ok()?;
            Some((d.received_at - (at + domain::schedule::jitter_offset(job, at, jitter_ms))).num_milliseconds())
        })
        .collect();
    late.sort_unstable();
    let pick = |q: f64| late.get(((late.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
    (pick(0.5), pick(0.99), late.last().copied().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use chrono::{TimeDelta, Utc};

    #[test]
    fn fifths_split_the_drain_in_order_and_show_a_tail() {
        let start = Utc::now();
        // 100 slots a millisecond apart, then the last one 500 ms late.
        let mut times: Vec<_> = (0..100).map(|i| start + TimeDelta::milliseconds(i)).collect();
        times.push(start + TimeDelta::milliseconds(600));
        times.reverse();
        assert_eq!(super::fifths_ms(&times), vec![20, 20, 20, 20, 520]);
        assert!(super::fifths_ms(&times[..4]).is_empty());
    }
}
