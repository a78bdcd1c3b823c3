//! The herd: N one-shot jobs due in the same instant, created through the
//! public API of a stack this command starts itself (release binaries:
//! the API, S schedulers, W workers) on a fresh database. Lateness is
//! measured at a real HTTP receiver in this process (received − due).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::http::HeaderMap;
use axum::routing::post;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

#[derive(clap::Args)]
pub struct HerdArgs {
    #[arg(long, default_value_t = 10_000)]
    jobs: usize,
    #[arg(long, default_value_t = 3)]
    schedulers: usize,
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Messages a worker may hold: pre-armed messages wait in it until due.
    #[arg(long, default_value_t = 20_000)]
    worker_prefetch: u32,
    /// Concurrent API clients creating the jobs.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_database_url: String,
    /// Directory of the release binaries.
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
}

/// What the receiver saw: (execution id, received at).
type Received = Arc<Mutex<Vec<(String, DateTime<Utc>)>>>;

fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub async fn run(args: HerdArgs) -> anyhow::Result<()> {
    let received: Received = Arc::default();
    let sink = received.clone();
    let app = Router::new().route(
        "/hook",
        post(move |headers: HeaderMap| {
            let sink = sink.clone();
            async move {
                let now = Utc::now();
                let id = headers
                    .get("x-cronshard-execution-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                sink.lock().expect("sink").push((id, now));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });

    let db = crate::benchdb::BenchDb::create(&args.admin_database_url).await?;
    let url = db.url.clone();
    let cluster = crate::benchdb::cluster_name("herd");
    let api_addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let spawn = |bin: &str, extra: Vec<(&str, String)>| -> anyhow::Result<tokio::process::Child> {
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let mut c = tokio::process::Command::new(args.bin_dir.join(bin));
        c.env("DATABASE_URL", &url)
            .env("CLUSTER_NAME", &cluster)
            .env("METRICS_ADDR", metrics.to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .kill_on_drop(true);
        for (k, v) in extra {
            c.env(k, v);
        }
        c.spawn().with_context(|| format!("starting {bin}"))
    };
    let mut procs = vec![spawn("cronshard-api", vec![("LISTEN_ADDR", api_addr.to_string())])?];
    for i in 0..args.schedulers {
        procs.push(spawn("cronshard-scheduler", vec![("NODE_ID", format!("herd-scheduler-{i}"))])?);
    }
    for i in 0..args.workers {
        procs.push(spawn(
            "cronshard-worker",
            vec![
                ("WORKER_ID", format!("herd-worker-{i}")),
                ("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8".into()),
                ("WORKER_PREFETCH", args.worker_prefetch.min(65_535).to_string()),
                ("WORKER_MAX_IN_FLIGHT", "512".into()),
            ],
        )?);
    }
    let base = format!("http://{api_addr}");
    let http = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).build()?;
    let ready = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/readyz")).send().await.map(|r| r.status() != 200).unwrap_or(true) {
        anyhow::ensure!(Instant::now() < ready, "the API did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Due after the creation phase (measured create rate ~600/s) plus margin.
    let due = common::execution::truncate_ms(Utc::now() + TimeDelta::seconds(15 + args.jobs as i64 / 300));
    let created = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..args.concurrency {
        let (http, base, hook, next, total) = (http.clone(), base.clone(), hook.clone(), next.clone(), args.jobs);
        clients.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return anyhow::Ok(());
                }
                let body = json!({
                    "name": format!("herd-{i}"),
                    "schedule": { "kind": "once", "at": common::execution::format_instant(due) },
                    "target": { "kind": "http", "url": hook, "timeout_ms": 10_000 },
                });
                let r = http.post(format!("{base}/v1/jobs")).json(&body).send().await?;
                anyhow::ensure!(r.status() == 201, "create answered {}", r.status());
            }
        }));
    }
    for c in clients {
        c.await??;
    }
    let create_secs = created.elapsed().as_secs_f64();
    anyhow::ensure!(Utc::now() < due, "creating took too long: the herd was due before it was all created");
    eprintln!("created {} jobs in {create_secs:.1} s; due at {}", args.jobs, common::execution::format_instant(due));

    let deadline = due + TimeDelta::seconds(120);
    while received.lock().expect("sink").len() < args.jobs && Utc::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Late duplicates would show up shortly after: give them a moment.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let got = received.lock().expect("sink").clone();
    drop(procs);
    db.drop_database().await?;

    let unique: std::collections::HashSet<&str> = got.iter().map(|(id, _)| id.as_str()).collect();
    let mut lateness: Vec<i64> = got.iter().map(|(_, at)| (*at - due).num_milliseconds()).collect();
    lateness.sort();
    anyhow::ensure!(!lateness.is_empty(), "nothing was delivered");
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "jobs": args.jobs, "schedulers": args.schedulers, "workers": args.workers,
            "worker_prefetch": args.worker_prefetch,
            "creates_per_second": (args.jobs as f64 / create_secs).round(),
            "delivered": got.len(), "missed": args.jobs - unique.len(), "duplicates": got.len() - unique.len(),
            "earliest_ms": lateness[0],
            "lateness_p50_ms": percentile(&lateness, 0.5),
            "lateness_p90_ms": percentile(&lateness, 0.9),
            "lateness_p99_ms": percentile(&lateness, 0.99),
            "lateness_max_ms": lateness.last(),
        }))?
    );
    Ok(())
}
