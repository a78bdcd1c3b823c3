//! Worker throughput: N fire messages waiting in the main queue (with their
//! ledger rows), then K real `cronshard-worker` processes deliver them to a
//! local HTTP receiver. Reports deliveries per second from worker start to
//! the last delivery, and checks the ledger says `succeeded` for all N.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use serde_json::json;
use uuid::Uuid;

use domain::job::JobSpec;
use domain::message::{FIRE_MESSAGE_VERSION, FireMessage};
use domain::slot::Trigger;

#[derive(clap::Args)]
pub struct DeliverArgs {
    /// Messages to deliver.
    #[arg(long, default_value_t = 20_000)]
    messages: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_database_url: String,
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    amqp_url: String,
    /// The worker binary (use a release build).
    #[arg(long, default_value = "target/release/cronshard-worker")]
    worker: PathBuf,
}

pub async fn run(args: DeliverArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.worker.exists(),
        "{} not found: build with `cargo build --release --workspace --bins`",
        args.worker.display()
    );
    let receiver = crate::receiver::Receiver::loopback().await?;

    let db = crate::benchdb::BenchDb::create(&args.admin_database_url).await?;
    let url = db.url.clone();
    let client = store::db::connect(&url).await?;
    let cluster = crate::benchdb::cluster_name("bench");

    // One job; N manual slots of it, each its own ledger row and message.
    let spec: JobSpec = JobSpec::from_json_with(
        &json!({
            "name": "deliver-bench",
            "schedule": { "kind": "interval", "every_ms": 86_400_000 },
            "target": { "kind": "http", "url": receiver.hook_url(), "timeout_ms": 10_000 },
        }),
        // The receiver is on loopback, where the workers are allowed to call.
        &domain::job::Limits::unrestricted(),
    )
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let job_id = Uuid::now_v7();
    client
        .execute(
            "INSERT INTO jobs (id, name, spec) VALUES ($1, $2, $3)",
            &[&job_id, &spec.name, &serde_json::to_value(&spec)?],
        )
        .await?;
    let base = domain::execution::truncate_ms(Utc::now());
    let mut messages = Vec::with_capacity(args.messages);
    for i in 0..args.messages {
        let at = base + chrono::TimeDelta::milliseconds(i as i64);
        messages.push(FireMessage {
            v: FIRE_MESSAGE_VERSION,
            fire_id: Uuid::now_v7(),
            job_id,
            namespace: "default".to_owned(),
            scheduled_at: at,
            due_at: at,
            execution_id: domain::execution::manual_execution_id(job_id, at),
            trigger: Trigger::Manual,
            target: spec.target.clone(),
            retry: None,
            overlap: Default::default(),
            retry_from: 0,
            misfire: None,
            starting_deadline_ms: None,
            completion: None,
            after_completion: Default::default(),
        });
    }
    for chunk in messages.chunks(5000) {
        let times: Vec<_> = chunk.iter().map(|m| m.scheduled_at).collect();
        let fire_ids: Vec<_> = chunk.iter().map(|m| m.fire_id).collect();
        let exec_ids: Vec<_> = chunk.iter().map(|m| m.execution_id.clone()).collect();
        client
            .execute(
                "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, trigger, status, job_version)
                 SELECT $1, t, f, e, 'manual', 'pending', 1 FROM unnest($2::timestamptz[], $3::uuid[], $4::text[]) AS u(t, f, e)",
                &[&job_id, &times, &fire_ids, &exec_ids],
            )
            .await?;
    }
    let mut publisher = broker::publisher::Publisher::new(
        args.amqp_url.clone(),
        "cronshard-loadtest".into(),
        broker::amqp::Topology::new(&cluster),
    );
    for chunk in messages.chunks(5000) {
        publisher.publish(chunk).await?;
    }
    eprintln!("{} messages waiting in {cluster}.cron_scheduler", args.messages);

    let started = Instant::now();
    let mut workers = Vec::new();
    for i in 0..args.workers {
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        workers.push(
            tokio::process::Command::new(&args.worker)
                .env("DATABASE_URL", &url)
                .env("AMQP_URL", &args.amqp_url)
                .env("CLUSTER_NAME", &cluster)
                .env("WORKER_ID", format!("bench-worker-{i}"))
                .env("METRICS_ADDR", metrics.to_string())
                .env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8")
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("starting a worker")?,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(600);
    while receiver.count() < args.messages {
        anyhow::ensure!(
            Instant::now() < deadline,
            "timed out with {} of {} delivered",
            receiver.count(),
            args.messages
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delivered_in = started.elapsed().as_secs_f64();
    // Deliveries are counted at the receiver; the ledger catches up just after.
    let succeeded = loop {
        let n: i64 =
            client.query_one("SELECT count(*) FROM scheduled_jobs WHERE status = 'succeeded'", &[]).await?.get(0);
        if n as usize >= args.messages || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    drop(workers);
    drop(client);
    db.drop_database().await?;
    let _ = publisher;
    println!(
        "{}",
        serde_json::to_string_pretty(&json!({
            "messages": args.messages,
            "workers": args.workers,
            "received": receiver.count(),
            "ledger_succeeded": succeeded,
            "seconds_from_worker_start_to_last_delivery": delivered_in,
            "deliveries_per_second": (args.messages as f64 / delivered_in).round(),
        }))?
    );
    Ok(())
}
