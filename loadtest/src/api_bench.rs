//! The REST API under client load on loopback: a release `cronshard-api` on
//! a fresh database; C concurrent clients create N jobs (creates/s), one by
//! one or through the batch endpoint, then read M of them at random (GET
//! latency percentiles).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

#[derive(clap::Args)]
pub struct ApiArgs {
    #[arg(long, default_value_t = 20_000)]
    creates: usize,
    #[arg(long, default_value_t = 50_000)]
    gets: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Jobs per `POST /v1/jobs/batch` request; 0 creates them one by one
    /// through `POST /v1/jobs`.
    #[arg(long, default_value_t = 0)]
    batch: usize,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_database_url: String,
    /// The API binary (use a release build).
    #[arg(long, default_value = "target/release/cronshard-api")]
    api: PathBuf,
}

pub fn percentile(sorted: &[Duration], p: f64) -> f64 {
    crate::report::percentile(sorted, p).as_secs_f64() * 1000.0
}

/// Runs `total` requests over `concurrency` clients; returns each latency.
pub async fn drive<F, Fut>(total: usize, concurrency: usize, request: F) -> anyhow::Result<Vec<Duration>>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let request = Arc::new(request);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..concurrency {
        let (request, next) = (request.clone(), next.clone());
        clients.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= total {
                    return anyhow::Ok(latencies);
                }
                let t = Instant::now();
                request(i).await?;
                latencies.push(t.elapsed());
            }
        }));
    }
    let mut all = Vec::with_capacity(total);
    for c in clients {
        all.extend(c.await??);
    }
    all.sort();
    Ok(all)
}

/// A release API on a free loopback port over database `url`, once ready:
/// the process (killed when dropped) and its base URL.
pub async fn start_api(binary: &std::path::Path, url: &str) -> anyhow::Result<(tokio::process::Child, String)> {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let api = tokio::process::Command::new(binary)
        .env("DATABASE_URL", url)
        .env("LISTEN_ADDR", addr.to_string())
        .env("CLUSTER_NAME", crate::benchdb::cluster_name("bench"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting the API")?;
    let base = format!("http://{addr}");
    let http = reqwest::Client::new();
    let ready = Instant::now() + Duration::from_secs(30);
    while http.get(format!("{base}/readyz")).send().await.map(|r| r.status() != 200).unwrap_or(true) {
        anyhow::ensure!(Instant::now() < ready, "the API did not become ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((api, base))
}

pub async fn run(args: ApiArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.api.exists(),
        "{} not found: build with `cargo build --release --workspace --bins`",
        args.api.display()
    );
    let db = crate::benchdb::BenchDb::create(&args.admin_database_url).await?;
    let (mut api, base) = start_api(&args.api, &db.url).await?;
    let http = reqwest::Client::builder().pool_max_idle_per_host(args.concurrency).build()?;

    let ids = Arc::new(std::sync::Mutex::new(Vec::with_capacity(args.creates)));
    let (h, b, sink) = (http.clone(), base.clone(), ids.clone());
    let started = Instant::now();
    let job = |i: usize| {
        json!({
            "name": format!("bench-{i}"),
            "schedule": { "kind": "cron", "expr": "*/5 * * * *", "timezone": "Europe/Berlin" },
            "target": { "kind": "http", "url": "https://example.invalid/hook", "timeout_ms": 5000 },
        })
    };
    let (batch, creates) = (args.batch, args.creates);
    let requests = if batch == 0 { creates } else { creates.div_ceil(batch) };
    let create_latencies = drive(requests, args.concurrency, move |i| {
        let (http, base, sink) = (h.clone(), b.clone(), sink.clone());
        async move {
            if batch == 0 {
                let r = http.post(format!("{base}/v1/jobs")).json(&job(i)).send().await?;
                anyhow::ensure!(r.status() == 201, "create answered {}", r.status());
                let created: serde_json::Value = r.json().await?;
                sink.lock().expect("ids").push(created["id"].as_str().unwrap_or_default().to_owned());
                return Ok(());
            }
            let jobs: Vec<_> = (i * batch..((i + 1) * batch).min(creates)).map(job).collect();
            let wanted = jobs.len();
            let r = http.post(format!("{base}/v1/jobs/batch")).json(&json!({ "jobs": jobs })).send().await?;
            anyhow::ensure!(r.status() == 200, "batch create answered {}", r.status());
            let answer: serde_json::Value = r.json().await?;
            let items = answer["items"].as_array().map(Vec::as_slice).unwrap_or_default();
            let ids: Vec<String> =
                items.iter().filter_map(|item| item["job"]["id"].as_str().map(str::to_owned)).collect();
            anyhow::ensure!(ids.len() == wanted, "batch created {} of {wanted}", ids.len());
            sink.lock().expect("ids").extend(ids);
            Ok(())
        }
    })
    .await?;
    let create_secs = started.elapsed().as_secs_f64();

    let ids: Arc<Vec<String>> = Arc::new(std::mem::take(&mut *ids.lock().expect("ids")));
    let (h, b, pool) = (http.clone(), base.clone(), ids.clone());
    let started = Instant::now();
    let get_latencies = drive(args.gets, args.concurrency, move |i| {
        let (http, base, pool) = (h.clone(), b.clone(), pool.clone());
        async move {
            // A cheap deterministic spread over the created jobs.
            let id = &pool[(i.wrapping_mul(2_654_435_761)) % pool.len()];
            let r = http.get(format!("{base}/v1/jobs/{id}")).send().await?;
            anyhow::ensure!(r.status() == 200, "get answered {}", r.status());
            r.bytes().await?;
            Ok(())
        }
    })
    .await?;
    let get_secs = started.elapsed().as_secs_f64();
    let _ = api.kill().await;
    db.drop_database().await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "concurrency": args.concurrency,
            "creates": args.creates,
            "batch": args.batch,
            "creates_per_second": (args.creates as f64 / create_secs).round(),
            "create_p50_ms": percentile(&create_latencies, 0.5),
            "create_p99_ms": percentile(&create_latencies, 0.99),
            "gets": args.gets,
            "gets_per_second": (args.gets as f64 / get_secs).round(),
            "get_p50_ms": percentile(&get_latencies, 0.5),
            "get_p99_ms": percentile(&get_latencies, 0.99),
            "get_max_ms": get_latencies.last().map(|d| d.as_secs_f64() * 1000.0),
        }))?
    );
    Ok(())
}
