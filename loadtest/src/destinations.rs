//! `destinations`: one healthy and one dead receiver on separate ports (two
//! destination hosts for the workers). Healthy periodic jobs fire alone for
//! a phase, then as many jobs aimed at the dead receiver fire beside them
//! for a phase of the same length. The healthy receiver's lateness in each
//! phase is the figure: with the per-host limit and the circuit breaker it
//! should not move when the dead host appears. Also reported: how many
//! calls the dead receiver got against the slots due to it, and where its
//! slots are in the ledger.
//!
//! The dead receiver either accepts connections and never answers (`hang`:
//! every call waits out the job's timeout, the worst case for the workers'
//! delivery slots) or is a closed port (`refused`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use crate::measure::tally;
use crate::receiver::Receiver;
use crate::report::{OutArgs, Percentiles, Report, fmt_f, fmt_int};
use crate::stack::{Stack, StackArgs};
use crate::steady::sleep_until;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DeadMode {
    /// Accepts connections, never answers.
    Hang,
    /// A closed port: every connection is refused.
    Refused,
}

#[derive(clap::Args)]
pub struct DestinationsArgs {
    /// Fires per second of the healthy receiver's jobs.
    #[arg(long, default_value_t = 200.0)]
    healthy_rate: f64,
    /// Fires per second of the dead receiver's jobs (second phase).
    #[arg(long, default_value_t = 200.0)]
    dead_rate: f64,
    /// Each job fires once per period; the jobs' phases are spread over it.
    #[arg(long, default_value_t = 1000)]
    period_ms: u64,
    /// Length of each phase (healthy alone, then beside the dead receiver).
    #[arg(long, default_value_t = 30)]
    phase_secs: i64,
    /// Firing before the first phase is measured.
    #[arg(long, default_value_t = 5)]
    warmup_secs: i64,
    #[arg(long, value_enum, default_value_t = DeadMode::Hang)]
    dead: DeadMode,
    /// `timeout_ms` of the dead receiver's jobs.
    #[arg(long, default_value_t = 2000)]
    dead_timeout_ms: u64,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    out: OutArgs,
}

/// The dead receiver: its URL and the connections it accepted.
struct Dead {
    url: String,
    connections: Arc<AtomicUsize>,
}

async fn dead_receiver(mode: DeadMode) -> anyhow::Result<Dead> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let connections = Arc::new(AtomicUsize::new(0));
    match mode {
        // Dropped: nothing listens on the port any more.
        DeadMode::Refused => drop(listener),
        DeadMode::Hang => {
            let count = connections.clone();
            tokio::spawn(async move {
                let mut held = Vec::new();
                while let Ok((socket, _)) = listener.accept().await {
                    count.fetch_add(1, Ordering::Relaxed);
                    // Kept open and never read: the caller waits for its timeout.
                    held.push(socket);
                }
            });
        }
    }
    Ok(Dead { url: format!("http://{addr}/hook"), connections })
}

/// Interval jobs at `rate` fires/s firing every `period_ms` from `t0`.
fn bodies(prefix: &str, rate: f64, period_ms: u64, url: &str, timeout_ms: u64, t0: DateTime<Utc>) -> Vec<Value> {
    let n = (rate * period_ms as f64 / 1000.0).round().max(1.0) as u64;
    (0..n)
        .map(|i| {
            let start = t0 + TimeDelta::milliseconds((i * period_ms / n) as i64);
            json!({
                "name": format!("{prefix}-{i}"),
                "schedule": { "kind": "interval", "every_ms": period_ms,
                              "start_at": domain::execution::format_instant(start) },
                "target": { "kind": "http", "url": url, "timeout_ms": timeout_ms },
            })
        })
        .collect()
}

fn p50_p99(p: Option<Percentiles>) -> String {
    match p {
        Some(p) => format!("{} / {} ms ({} slots)", fmt_int(p.p50), fmt_int(p.p99), fmt_int(p.count as i64)),
        None => "no deliveries".into(),
    }
}

pub async fn run(args: DestinationsArgs) -> anyhow::Result<()> {
    let mut report = Report::new(
        "destinations",
        format!("destinations-{}", if args.dead == DeadMode::Hang { "hang" } else { "refused" }),
        format!(
            "Destinations: a healthy receiver at {} fires/s, then a dead one ({}) at {} fires/s beside it",
            fmt_f(args.healthy_rate),
            if args.dead == DeadMode::Hang { "never answers" } else { "connection refused" },
            fmt_f(args.dead_rate)
        ),
        &args.out,
    );
    let healthy = Receiver::loopback().await?;
    let dead = dead_receiver(args.dead).await?;
    let stack = Stack::start("destinations", &args.stack).await?;

    let t0 = domain::execution::truncate_ms(Utc::now() + TimeDelta::seconds(8));
    let alone_from = t0 + TimeDelta::seconds(args.warmup_secs);
    let beside_from = alone_from + TimeDelta::seconds(args.phase_secs);
    let end = beside_from + TimeDelta::seconds(args.phase_secs);
    let (healthy_jobs, create_secs) = stack
        .create_jobs(bodies("healthy", args.healthy_rate, args.period_ms, &healthy.hook_url(), 10_000, t0))
        .await?;
    let (dead_jobs, more_secs) = stack
        .create_jobs(bodies("dead", args.dead_rate, args.period_ms, &dead.url, args.dead_timeout_ms, beside_from))
        .await?;
    anyhow::ensure!(Utc::now() < t0, "creating the jobs took {:.1} s, past the start instant", create_secs + more_secs);
    eprintln!(
        "created {} healthy and {} dead jobs; healthy alone from {}, the dead host from {}",
        healthy_jobs.len(),
        dead_jobs.len(),
        domain::execution::format_instant(alone_from),
        domain::execution::format_instant(beside_from)
    );

    let sampler = crate::procstat::Sampler::start(stack.targets());
    sleep_until(beside_from).await;
    let dead_calls_before = dead.connections.load(Ordering::Relaxed);
    sleep_until(end + TimeDelta::seconds(5)).await;
    let dead_calls = dead.connections.load(Ordering::Relaxed) - dead_calls_before;
    let usage = sampler.stop().await;
    let got = healthy.snapshot();
    let ledger = stack.ledger_by_status().await?;
    let waiting = stack.waiting_by_status().await?;
    stack.shutdown().await?;

    let t = tally(&healthy_jobs, alone_from, end, &got);
    let alone = t.lateness_between(alone_from, beside_from);
    let beside = t.lateness_between(beside_from, end);
    let dead_due: usize = dead_jobs.iter().map(|j| j.slots(beside_from, end).len()).sum();

    report.row(
        "stack",
        format!(
            "{} schedulers, {} workers (max in flight {}{})",
            args.stack.schedulers,
            args.stack.workers,
            args.stack.worker_max_in_flight,
            args.stack.worker_env.iter().map(|(k, v)| format!(", {k}={v}")).collect::<String>()
        ),
    );
    report.row(
        "jobs",
        format!(
            "{} healthy, {} dead (every {} ms; dead timeout {} ms)",
            fmt_int(healthy_jobs.len() as i64),
            fmt_int(dead_jobs.len() as i64),
            args.period_ms,
            args.dead_timeout_ms
        ),
    );
    t.rows(&mut report, "healthy: ");
    report.row(format!("healthy lateness p50 / p99, alone ({} s)", args.phase_secs), p50_p99(alone));
    report.row(format!("healthy lateness p50 / p99, beside the dead host ({} s)", args.phase_secs), p50_p99(beside));
    report.row(
        "dead host: slots due / calls it got",
        match args.dead {
            DeadMode::Hang => format!("{} / {}", fmt_int(dead_due as i64), fmt_int(dead_calls as i64)),
            DeadMode::Refused => format!("{} / (refused: not counted)", fmt_int(dead_due as i64)),
        },
    );
    let by_status = |rows: &[(String, i64)]| {
        rows.iter().map(|(s, n)| format!("{s} {}", fmt_int(*n))).collect::<Vec<_>>().join(", ")
    };
    report.row("ledger rows by status (both receivers)", by_status(&ledger));
    report.row("rows with a `waiting` entry, by status", by_status(&waiting));
    crate::procstat::rows(&mut report, &usage);
    report.data("healthy_rate", args.healthy_rate);
    report.data("dead_rate", args.dead_rate);
    report.data("phase_secs", args.phase_secs);
    report.data("tally", &t);
    report.data("lateness_alone", alone);
    report.data("lateness_beside_dead", beside);
    report.data("dead_slots_due", dead_due);
    report.data("dead_calls", (args.dead == DeadMode::Hang).then_some(dead_calls));
    report.data("ledger_by_status", &ledger);
    report.data("waiting_by_status", &waiting);
    report.finish(&args.out)?;
    Ok(())
}
