//! Scheduler node start-up at scale: seeds N jobs straight into Postgres
//! (bulk SQL: the API's create rate is a separate benchmark), starts a real
//! `cronshard-scheduler` process and measures
//! - time from process start to its first claimed fire (a job due at once),
//! - time until every job is loaded (`cronshard_owned_jobs` = N),
//! - resident memory (VmRSS) before any job and after the load, per owned job.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{TimeDelta, Utc};
use serde_json::json;
use uuid::Uuid;

#[derive(clap::Args)]
pub struct StartupArgs {
    /// Jobs to seed.
    #[arg(long, default_value_t = 1_000_000)]
    jobs: usize,
    /// Share of cron jobs (the rest are intervals).
    #[arg(long, default_value_t = 0.2)]
    cron_share: f64,
    /// Admin Postgres URL; a fresh database is created for the run.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_database_url: String,
    /// The scheduler binary (use a release build).
    #[arg(long, default_value = "target/release/cronshard-scheduler")]
    scheduler: PathBuf,
    /// Keep the database afterwards.
    #[arg(long)]
    keep: bool,
}

const CRON_EXPRS: [&str; 5] = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 9 * * 1-5", "15,45 * * * *"];
const ZONES: [&str; 4] = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"];

/// Inserts `n` jobs in multi-row batches: job 0 is the probe (re-anchored
/// just before the node starts), every other job is due at a random point
/// of the next hour (no fire storm).
async fn seed(client: &tokio_postgres::Client, n: usize, cron_share: f64) -> anyhow::Result<()> {
    let now = Utc::now();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for chunk_start in (0..n).step_by(10_000) {
        let chunk = chunk_start..(chunk_start + 10_000).min(n);
        let mut ids = Vec::with_capacity(chunk.len());
        let mut names = Vec::with_capacity(chunk.len());
        let mut specs = Vec::with_capacity(chunk.len());
        for i in chunk {
            let r = next();
            let schedule = if i > 0 && (r % 1000) as f64 / 1000.0 < cron_share {
                json!({ "kind": "cron", "expr": CRON_EXPRS[(r >> 10) as usize % CRON_EXPRS.len()], "timezone": ZONES[(r >> 20) as usize % ZONES.len()] })
            } else {
                let offset_ms = if i == 0 { 1000 } else { 60_000 + (r >> 8) % 3_540_000 };
                let anchor = now + TimeDelta::milliseconds(offset_ms as i64);
                json!({ "kind": "interval", "every_ms": 3_600_000, "start_at": domain::execution::format_instant(anchor) })
            };
            ids.push(Uuid::now_v7());
            names.push(format!("load-{i}"));
            specs.push(json!({
                "name": format!("load-{i}"), "schedule": schedule,
                "target": { "kind": "http", "url": "http://127.0.0.1:9/hook", "method": "POST", "timeout_ms": 1000, "headers": {} },
                "misfire": "skip", "misfire_cap": 1, "paused": false,
            }));
        }
        client
            .execute(
                "INSERT INTO jobs (id, name, spec) SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[])",
                &[&ids, &names, &specs],
            )
            .await?;
    }
    Ok(())
}

fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

async fn owned_jobs(metrics_url: &str) -> Option<u64> {
    let text = reqwest::get(metrics_url).await.ok()?.text().await.ok()?;
    runtime::metrics::value_in(&text, runtime::metrics::OWNED_JOBS).map(|v| v as u64)
}

pub async fn run(args: StartupArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.scheduler.exists(),
        "{} not found: build with `cargo build --release --workspace --bins`",
        args.scheduler.display()
    );
    let db = crate::benchdb::BenchDb::create(&args.admin_database_url).await?;
    let url = db.url.clone();
    let client = store::db::connect(&url).await?;
    let t = Instant::now();
    seed(&client, args.jobs, args.cron_share).await?;
    eprintln!("seeded {} jobs in {:.1} s", args.jobs, t.elapsed().as_secs_f64());
    client.batch_execute("VACUUM ANALYZE jobs").await?;
    // The probe job: due 2 s after the node starts (seeding takes a while).
    let probe_at = domain::execution::format_instant(Utc::now() + TimeDelta::seconds(2));
    client
        .execute(
            "UPDATE jobs SET spec = jsonb_set(spec, '{schedule,start_at}', to_jsonb($1::text)) WHERE name = 'load-0'",
            &[&probe_at],
        )
        .await?;

    let metrics_addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let cluster = crate::benchdb::cluster_name("bench");
    let started = Instant::now();
    let started_wall = Utc::now();
    let mut child = tokio::process::Command::new(&args.scheduler)
        .env("DATABASE_URL", &url)
        .env("CLUSTER_NAME", &cluster)
        .env("NODE_ID", "bench-node")
        .env("METRICS_ADDR", metrics_addr.to_string())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the scheduler")?;
    let pid = child.id().context("scheduler pid")?;
    let metrics_url = format!("http://{metrics_addr}/metrics");

    // Baseline: the process up, before the first page of jobs is applied.
    let mut baseline = None;
    let mut first_fire = None;
    let mut loaded_after = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    while Instant::now() < deadline {
        if baseline.is_none() && reqwest::get(&metrics_url).await.is_ok() {
            baseline = rss_bytes(pid);
        }
        if first_fire.is_none() {
            let row = client
                .query_opt(
                    "SELECT fired_at FROM scheduled_jobs WHERE fired_at IS NOT NULL ORDER BY fired_at LIMIT 1",
                    &[],
                )
                .await?;
            if let Some(r) = row {
                let at: chrono::DateTime<Utc> = r.get(0);
                first_fire = Some((at - started_wall).num_milliseconds() as f64 / 1000.0);
            }
        }
        if loaded_after.is_none() && owned_jobs(&metrics_url).await == Some(args.jobs as u64) {
            loaded_after = Some(started.elapsed().as_secs_f64());
        }
        if first_fire.is_some() && loaded_after.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let allocations settle after the load before reading the footprint.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let loaded_rss = rss_bytes(pid).context("reading VmRSS")?;
    let _ = child.kill().await;
    drop(client);
    if args.keep {
        eprintln!("kept database {}", db.name);
    } else {
        db.drop_database().await?;
    }
    let baseline = baseline.unwrap_or(0);
    let per_job = (loaded_rss.saturating_sub(baseline)) as f64 / args.jobs as f64;
    let report = json!({
        "jobs": args.jobs,
        "cron_share": args.cron_share,
        "first_fire_after_start_s": first_fire,
        "all_jobs_loaded_after_s": loaded_after,
        "rss_baseline_bytes": baseline,
        "rss_loaded_bytes": loaded_rss,
        "rss_per_owned_job_bytes": per_job.round(),
    });
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(())
}
