//! `console`: the calls an operator console makes, timed against a large
//! database. A fresh database gets N jobs (5 namespaces, labels, a tenth
//! jittered) and M ledger rows over D days (1% failed with a handful of
//! error texts, 2% skipped, 0.1% missed, the rest succeeded; a tenth of the
//! rows belong to 100 busy jobs), filled with
//! `generate_series`; then optionally a hot hour (`--hot-hour-rows`, e.g.
//! 2,000 fires/s for the last hour). A release `cronshard-api` serves it;
//! each call is made `--repeat` times one after another (median and p99 of
//! the client-side latency), once per phase (before and after the hot hour).
//! Then each call is made once more with `auto_explain` on (`log_analyze`,
//! nested statements) and the plans are read back from the server log, so
//! the result names the indexes each call's statements used. Bounded: one
//! database, created and dropped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::report::{OutArgs, Report, fmt_f, fmt_int};

#[derive(clap::Args)]
pub struct ConsoleArgs {
    #[arg(long, default_value_t = 1_000_000)]
    jobs: u64,
    /// Ledger rows spread evenly over `--days` days up to now.
    #[arg(long, default_value_t = 10_000_000)]
    rows: u64,
    #[arg(long, default_value_t = 7)]
    days: u32,
    /// Rows added in the last hour before the second phase (7,200,000 =
    /// 2,000 fires/s); 0 = one phase only.
    #[arg(long, default_value_t = 7_200_000)]
    hot_hour_rows: u64,
    /// Calls of each endpoint per phase.
    #[arg(long, default_value_t = 30)]
    repeat: usize,
    /// Admin Postgres URL; a fresh database is created for the run and dropped.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_database_url: String,
    /// The Postgres server's log file (read through `pg_read_file` for the
    /// plans); the plans are left out when it cannot be read.
    #[arg(long, default_value = "/var/log/postgresql/postgresql-15-main.log")]
    server_log: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis_url: String,
    /// The API binary (use a release build).
    #[arg(long, default_value = "target/release/cronshard-api")]
    api: PathBuf,
    #[command(flatten)]
    out: OutArgs,
}

const TOKEN: &str = "console-bench-admin";

/// Job number `k` as the fill spells its id: time-ordered like a UUIDv7.
const JOB_ID_SQL: &str = "(lpad(to_hex(1700000000000 + k), 12, '0') || substr(md5(k::text), 1, 20))::uuid";

async fn fill_jobs(client: &tokio_postgres::Client, jobs: u64) -> anyhow::Result<()> {
    client
        .batch_execute(&format!(
            "INSERT INTO namespaces (name) SELECT 'team-' || n FROM generate_series(0, 4) n ON CONFLICT DO NOTHING;
             ALTER TABLE jobs DISABLE TRIGGER USER;
             INSERT INTO jobs (id, name, spec, namespace, created_at, updated_at, peak_fires_per_second)
             SELECT id, name,
                    jsonb_build_object('name', name,
                      'schedule', CASE WHEN k % 3 = 0 THEN jsonb_build_object('kind', 'interval', 'every_ms', 600000)
                                       ELSE jsonb_build_object('kind', 'cron', 'expr', '*/' || (5 + k % 3 * 5) || ' * * * *',
                                                               'timezone', 'Europe/Berlin') END,
                      'target', jsonb_build_object('kind', 'http', 'url', 'https://hooks.example.com/' || ns || '/run',
                                                   'method', 'POST', 'timeout_ms', 5000),
                      'labels', jsonb_build_object('team', ns, 'tier', CASE WHEN k / 5 % 10 = 0 THEN 'critical' ELSE 'batch' END,
                                                   'shard', (k % 100)::text))
                    || CASE WHEN k % 10 = 0 THEN jsonb_build_object('jitter_ms', 5000) ELSE '{{}}' END,
                    ns, created, created, 0.003
             FROM (SELECT k, 'team-' || (k % 5) AS ns, {JOB_ID_SQL} AS id,
                          CASE WHEN k % 7 = 0 THEN 'report-' ELSE 'sync-' END || k AS name,
                          now() - interval '30 days' + k * interval '1 ms' AS created
                   FROM generate_series(0, {jobs} - 1) k) s;
             ALTER TABLE jobs ENABLE TRIGGER USER;
             INSERT INTO job_changes (job_id, version, valid_from, state, spec)
             SELECT id, version, updated_at, 'live', spec FROM jobs;"
        ))
        .await?;
    Ok(())
}

/// `rows` ledger rows with slots evenly spread over `[from, to)`, row
/// numbers from `first` (which pick the job, status and lateness).
async fn fill_ledger(
    client: &tokio_postgres::Client,
    jobs: u64,
    first: u64,
    rows: u64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<()> {
    let step_us = ((to - from).num_microseconds().unwrap_or(i64::MAX) / rows.max(1) as i64).max(1);
    client
        .execute(
            &format!(
                "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, trigger, status, attempts,
                     scheduler_node, worker_id, fired_at, published_at, started_at, finished_at, http_status,
                     response_excerpt, error, reason, job_version, history)
                 SELECT job, at, gen_random_uuid(), job::text || '@' || cronshard_instant(at), 'schedule', status,
                        CASE status WHEN 'failed' THEN 3 WHEN 'succeeded' THEN 1 WHEN 'running' THEN 1 ELSE 0 END,
                        'cronshard-scheduler-' || (i % 3),
                        CASE WHEN status IN ('succeeded', 'failed', 'running') THEN 'cronshard-worker-' || (i % 8) END,
                        at - interval '2 s', at - interval '1.9 s',
                        CASE WHEN status IN ('succeeded', 'failed', 'running') THEN at + late * interval '1 ms' END,
                        CASE WHEN status IN ('succeeded', 'failed') THEN at + (late + 120) * interval '1 ms' END,
                        CASE status WHEN 'succeeded' THEN 200 WHEN 'failed' THEN 503 END,
                        CASE status WHEN 'succeeded' THEN '{{\"ok\":true}}' WHEN 'failed' THEN '{{\"error\":\"unavailable\"}}' END,
                        CASE WHEN status = 'failed' THEN (ARRAY['HTTP 503 from callback', 'HTTP 500 from callback',
                             'HTTP 404 from callback', 'connect timeout after 5000 ms', 'connection refused',
                             'HTTP 429 from callback', 'TLS handshake failed', 'HTTP 502 from callback'])[1 + (h >> 8) % 8]
                             || CASE WHEN (h >> 11) % 4 = 0 THEN ' (tenant ' || (h >> 13) % 40 || ')' ELSE '' END END,
                        CASE status WHEN 'skipped' THEN (ARRAY['overlap', 'paused', 'superseded', 'calendar:holidays'])[1 + (h >> 8) % 4]
                                    WHEN 'missed' THEN 'misfire' END,
                        1,
                        CASE status
                          WHEN 'succeeded' THEN jsonb_build_array(jsonb_build_object('event', 'attempt', 'attempt', 1,
                               'worker_id', 'cronshard-worker-' || (i % 8), 'started_at', cronshard_instant(at + late * interval '1 ms'),
                               'finished_at', cronshard_instant(at + (late + 120) * interval '1 ms'), 'outcome', 'succeeded',
                               'http_status', 200, 'redelivered', false))
                          WHEN 'failed' THEN (SELECT jsonb_agg(jsonb_build_object('event', 'attempt', 'attempt', n,
                               'worker_id', 'cronshard-worker-' || (i % 8),
                               'started_at', cronshard_instant(at + (late + (n - 1) * 30000) * interval '1 ms'),
                               'finished_at', cronshard_instant(at + (late + (n - 1) * 30000 + 120) * interval '1 ms'),
                               'outcome', CASE WHEN n = 3 THEN 'failed' ELSE 'retrying' END, 'http_status', 503,
                               'redelivered', false)) FROM generate_series(1, 3) n)
                          ELSE '[]'::jsonb END
                 FROM (SELECT i, at, h, job,
                              CASE WHEN at > now() - interval '10 s' THEN 'pending'
                                   WHEN at > now() - interval '20 s' THEN 'running'
                                   WHEN h % 1000 < 10 THEN 'failed'
                                   WHEN h % 1000 < 30 THEN 'skipped'
                                   WHEN h % 1000 < 31 THEN 'missed'
                                   ELSE 'succeeded' END AS status,
                              5 + (h >> 4) % 200 + CASE WHEN (h >> 12) % 100 = 0 THEN 1500 + (h >> 20) % 3000 ELSE 0 END AS late
                       FROM (SELECT i, at, h, {JOB_ID_SQL} AS job
                             FROM (SELECT i, $1::timestamptz + (i - $2) * $3::bigint * interval '1 microsecond' AS at,
                                          (i * 2654435761) % 4294967296 AS h,
                                          CASE WHEN i % 10 = 0 THEN i / 10 % 100 ELSE i * 40503 % {jobs} END AS k
                                   FROM generate_series($2::bigint, $2::bigint + $4::bigint - 1) i) a) b) c
                 ON CONFLICT DO NOTHING"
            ),
            &[&from, &(first as i64), &step_us, &(rows as i64)],
        )
        .await?;
    Ok(())
}

/// One RESP command to Redis (the fake scheduler heartbeats).
async fn redis(url: &str, args: &[&str]) -> anyhow::Result<()> {
    let addr = url.trim_start_matches("redis://").trim_end_matches('/');
    let mut conn = tokio::net::TcpStream::connect(addr).await.context("connecting to Redis")?;
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    conn.write_all(cmd.as_bytes()).await?;
    let mut reply = [0u8; 256];
    let n = conn.read(&mut reply).await?;
    anyhow::ensure!(n > 0 && reply[0] != b'-', "Redis answered {:?}", String::from_utf8_lossy(&reply[..n]));
    Ok(())
}

/// A call the console makes.
struct Call {
    label: String,
    path: String,
}

#[derive(Serialize, Clone)]
struct Timing {
    label: String,
    path: String,
    median_ms: f64,
    p99_ms: f64,
    /// Indexes (and sequential scans) in the plans of the call's statements.
    plan_nodes: Vec<String>,
}

async fn time_call(http: &reqwest::Client, base: &str, call: &Call, repeat: usize) -> anyhow::Result<(f64, f64)> {
    let mut latencies = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let t = Instant::now();
        let r = http.get(format!("{base}{}", call.path)).bearer_auth(TOKEN).send().await?;
        let status = r.status();
        let body = r.text().await?;
        anyhow::ensure!(status == 200, "{} answered {status}: {body:.300}", call.path);
        latencies.push(t.elapsed());
    }
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Ok((ms(crate::report::percentile(&latencies, 0.5)), ms(crate::report::percentile(&latencies, 0.99))))
}

/// The scan nodes of the plans auto_explain logged: `Index Scan using x`, `Seq Scan on y`, ...
fn scan_nodes(log: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for line in log.lines().filter(|l| !l.contains("never executed")) {
        let line = line.trim_start_matches(|c: char| c.is_whitespace() || c == '-' || c == '>');
        let node = if let Some(name) = line.strip_prefix("Bitmap Index Scan on ") {
            name.split_whitespace().next().map(|n| format!("Bitmap Index Scan: {n}"))
        } else if let Some(i) = line.find(" using ") {
            let kind = &line[..i];
            let name = line[i + 7..].split_whitespace().next().unwrap_or_default();
            (kind.ends_with("Scan") || kind.ends_with("Scan Backward")).then(|| format!("{kind}: {name}"))
        } else if line.starts_with("Seq Scan on ") || line.starts_with("Parallel Seq Scan on ") {
            line.split(" (").next().map(str::to_owned)
        } else {
            None
        };
        // Day partitions as one: `scheduled_jobs_20261125_pkey` → `scheduled_jobs_*_pkey`.
        if let Some(node) = node.map(|n| partition_agnostic(&n))
            && !found.contains(&node)
        {
            found.push(node);
        }
    }
    found
}

fn partition_agnostic(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("scheduled_jobs_") {
        out.push_str(&rest[..i + 15]);
        rest = &rest[i + 15..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits == 8 {
            out.push('*');
            rest = &rest[8..];
        }
    }
    out.push_str(rest);
    out
}

struct Api {
    child: tokio::process::Child,
    base: String,
}

async fn start_api(args: &ConsoleArgs, url: &str, cluster: &str) -> anyhow::Result<Api> {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let child = tokio::process::Command::new(&args.api)
        .env("DATABASE_URL", url)
        .env("LISTEN_ADDR", addr.to_string())
        .env("CLUSTER_NAME", cluster)
        .env("REDIS_URLS", &args.redis_url)
        .env("API_TOKENS", TOKEN)
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
    Ok(Api { child, base })
}

/// The calls of a phase, built from what the database holds.
async fn calls(client: &tokio_postgres::Client, http: &reqwest::Client, base: &str) -> anyhow::Result<Vec<Call>> {
    let page: serde_json::Value =
        http.get(format!("{base}/v1/jobs?limit=50")).bearer_auth(TOKEN).send().await?.json().await?;
    let ids: Vec<String> =
        page["items"].as_array().into_iter().flatten().filter_map(|j| j["id"].as_str().map(str::to_owned)).collect();
    anyhow::ensure!(ids.len() == 50, "the first page has {} jobs", ids.len());
    // A busy job (one of the 100 that fire every few seconds) and its latest slot.
    let hot: (uuid::Uuid, DateTime<Utc>) = {
        let row = client
            .query_one(
                &format!(
                    "SELECT {JOB_ID_SQL}, (SELECT max(scheduled_at) FROM scheduled_jobs
                                           WHERE job_id = {JOB_ID_SQL} AND scheduled_at > now() - interval '1 day')
                     FROM (SELECT 7::bigint AS k) s"
                ),
                &[],
            )
            .await?;
        (row.get(0), row.get::<_, Option<DateTime<Utc>>>(1).context("the busy job has no slot in the last day")?)
    };
    let at = domain::execution::format_instant(hot.1);
    let c = |label: &str, path: String| Call { label: label.to_owned(), path };
    Ok(vec![
        c("jobs: first page", "/v1/jobs?limit=50".into()),
        c(
            "jobs: selector team=team-1,tier=critical",
            "/v1/jobs?limit=50&selector=team%3Dteam-1%2Ctier%3Dcritical".into(),
        ),
        c("jobs: name prefix report-12", "/v1/jobs?limit=50&name_prefix=report-12".into()),
        c(
            "jobs: selector tier=critical + name prefix report-12",
            "/v1/jobs?limit=50&selector=tier%3Dcritical&name_prefix=report-12".into(),
        ),
        c("job: get", format!("/v1/jobs/{}", hot.0)),
        c("job: executions page (busy job)", format!("/v1/jobs/{}/executions?limit=50", hot.0)),
        c("job: explain a slot", format!("/v1/jobs/{}/executions/{at}", hot.0)),
        c("job: next 10 fire times", format!("/v1/jobs/{}/next", hot.0)),
        c("job: owners", format!("/v1/jobs/{}/owners", hot.0)),
        c("outcomes of 50 jobs, 24 h", format!("/v1/jobs/outcomes?ids={}&hours=24", ids.join(","))),
        c("failures: last hour", "/v1/executions/failures".into()),
        c(
            "failures: last day",
            format!(
                "/v1/executions/failures?from={}",
                domain::execution::format_instant(Utc::now() - TimeDelta::days(1)).replace(':', "%3A")
            ),
        ),
        c("lateness: 60 minutes", "/v1/stats/lateness?minutes=60".into()),
        c("lateness: 24 hours", "/v1/stats/lateness?minutes=1440".into()),
        c("cluster", "/v1/cluster".into()),
        c("workers", "/v1/workers".into()),
    ])
}

/// Times every call, then makes each once more with auto_explain on and
/// reads the plans from the server log.
async fn phase(
    args: &ConsoleArgs,
    db: &crate::benchdb::BenchDb,
    cluster: &str,
    plans_out: &mut String,
    phase: &str,
) -> anyhow::Result<(Vec<Timing>, serde_json::Value)> {
    let client = store::db::connect(&db.url).await?;
    client.batch_execute("VACUUM ANALYZE").await?;
    let mut api = start_api(args, &db.url, cluster).await?;
    let http = reqwest::Client::new();
    let calls = calls(&client, &http, &api.base).await?;
    let mut timings = Vec::new();
    for call in &calls {
        // One untimed call first: the pool's connections and the caches warm.
        time_call(&http, &api.base, call, 1).await?;
        let (median_ms, p99_ms) = time_call(&http, &api.base, call, args.repeat).await?;
        timings.push(Timing {
            label: call.label.clone(),
            path: call.path.clone(),
            median_ms,
            p99_ms,
            plan_nodes: vec![],
        });
    }
    let lateness: serde_json::Value =
        http.get(format!("{}/v1/stats/lateness?minutes=60", api.base)).bearer_auth(TOKEN).send().await?.json().await?;
    let sampling = serde_json::json!({
        "sampled": lateness["sampled"], "sample_size": lateness["sample_size"], "sample_rate": lateness["sample_rate"],
    });
    api.child.kill().await.ok();

    // The plans: auto_explain in the API's new sessions, logged by the server.
    let readable = client
        .query_one("SELECT (pg_stat_file($1, true)).size", &[&args.server_log])
        .await
        .ok()
        .and_then(|r| r.get::<_, Option<i64>>(0));
    if readable.is_none() {
        plans_out.push_str(&format!("(phase {phase}: the server log {} cannot be read; no plans)\n", args.server_log));
        return Ok((timings, sampling));
    }
    client
        .batch_execute(&format!(
            "ALTER DATABASE \"{name}\" SET session_preload_libraries = 'auto_explain';
             ALTER DATABASE \"{name}\" SET auto_explain.log_min_duration = 0;
             ALTER DATABASE \"{name}\" SET auto_explain.log_analyze = on;
             ALTER DATABASE \"{name}\" SET auto_explain.log_nested_statements = on;
             ALTER DATABASE \"{name}\" SET auto_explain.log_timing = off;",
            name = db.name
        ))
        .await?;
    let mut api = start_api(args, &db.url, cluster).await?;
    for (call, timing) in calls.iter().zip(timings.iter_mut()) {
        time_call(&http, &api.base, call, 1).await?;
        let before = log_size(&client, &args.server_log).await?;
        time_call(&http, &api.base, call, 1).await?;
        // The server writes the plan as the statement ends, before the response.
        let after = log_size(&client, &args.server_log).await?;
        let log: String = client
            .query_one("SELECT pg_read_file($1, $2, $3)", &[&args.server_log, &before, &(after - before)])
            .await?
            .get(0);
        let log = records_of(&log, &db.name);
        timing.plan_nodes = scan_nodes(&log);
        plans_out.push_str(&format!("==== {phase}: {} ({})\n{log}\n\n", call.label, call.path));
    }
    api.child.kill().await.ok();
    client.batch_execute(&format!("ALTER DATABASE \"{}\" RESET ALL", db.name)).await?;
    Ok((timings, sampling))
}

/// The log records of database `db` (the server logs every database's):
/// a record starts with a line that starts with its timestamp.
fn records_of(log: &str, db: &str) -> String {
    let mut out = String::new();
    let mut keep = false;
    for line in log.lines() {
        if line.starts_with(|c: char| c.is_ascii_digit()) {
            keep = line.contains(&format!("@{db} ")) && line.contains("duration:");
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

async fn log_size(client: &tokio_postgres::Client, path: &str) -> anyhow::Result<i64> {
    Ok(client.query_one("SELECT (pg_stat_file($1)).size", &[&path]).await?.get(0))
}

pub async fn run(args: ConsoleArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.api.exists(),
        "{} not found: build with `cargo build --release -p cronshard-api`",
        args.api.display()
    );
    anyhow::ensure!(args.jobs >= 1000 && args.rows >= 1000 && args.days >= 1, "at least 1000 jobs and rows, 1 day");
    let db = crate::benchdb::BenchDb::create(&args.admin_database_url).await?;
    let result = measure(&args, &db).await;
    db.drop_database().await?;
    let (phases, fill) = result?;

    let mut report = Report::new(
        "console",
        format!("console-{}-jobs-{}-rows", args.jobs, args.rows),
        format!(
            "Console calls on {} jobs and {} ledger rows over {} days{}",
            fmt_int(args.jobs as i64),
            fmt_int(args.rows as i64),
            args.days,
            if args.hot_hour_rows > 0 {
                format!(", then {} more in the last hour", fmt_int(args.hot_hour_rows as i64))
            } else {
                String::new()
            }
        ),
        &args.out,
    );
    for (name, seconds) in &fill {
        report.row(format!("fill: {name}"), format!("{} s", fmt_f(*seconds)));
    }
    for (name, timings, sampling) in &phases {
        report.row(format!("[{name}] lateness sampling (60 min)"), sampling.to_string());
        for t in timings {
            report.row(
                format!("[{name}] {}", t.label),
                format!("median {} ms, p99 {} ms; {}", fmt_f(t.median_ms), fmt_f(t.p99_ms), t.plan_nodes.join(", ")),
            );
        }
    }
    report.data(
        "phases",
        phases
            .iter()
            .map(|(n, t, s)| serde_json::json!({ "phase": n, "calls": t, "lateness_sampling": s }))
            .collect::<Vec<_>>(),
    );
    report.finish(&args.out)?;
    Ok(())
}

type Phase = (String, Vec<Timing>, serde_json::Value);

async fn measure(args: &ConsoleArgs, db: &crate::benchdb::BenchDb) -> anyhow::Result<(Vec<Phase>, Vec<(String, f64)>)> {
    let mut client = store::db::connect(&db.url).await?;
    let now = Utc::now();
    // Partitions for the days back, as maintenance made them then (it
    // creates the day before through a week ahead).
    for back in (1..=args.days as i64).step_by(7) {
        store::ledger::partitions::maintain(&mut client, now - TimeDelta::days(back + 6), Default::default()).await?;
    }
    let mut fill = Vec::new();
    let t = Instant::now();
    fill_jobs(&client, args.jobs).await?;
    fill.push((format!("{} jobs", fmt_int(args.jobs as i64)), t.elapsed().as_secs_f64()));
    let t = Instant::now();
    let start = now - TimeDelta::days(args.days as i64);
    let per_day = args.rows / args.days as u64;
    for d in 0..args.days as u64 {
        let rows = if d + 1 == args.days as u64 { args.rows - per_day * d } else { per_day };
        let from = start + TimeDelta::days(d as i64);
        let to = if d + 1 == args.days as u64 { now } else { from + TimeDelta::days(1) };
        fill_ledger(&client, args.jobs, per_day * d, rows, from, to).await?;
    }
    fill.push((format!("{} ledger rows", fmt_int(args.rows as i64)), t.elapsed().as_secs_f64()));
    client
        .batch_execute(
            "INSERT INTO worker_heartbeats (worker_id, seen_at)
             SELECT 'cronshard-worker-' || n, now() - n * interval '1 s' FROM generate_series(0, 7) n",
        )
        .await?;
    let cluster = crate::benchdb::cluster_name("console");
    for node in ["cronshard-scheduler-0", "cronshard-scheduler-1", "cronshard-scheduler-2"] {
        let beat = serde_json::json!({ "node_id": node, "heartbeat_at": Utc::now(), "owned_jobs": 666_667,
                                        "replication_factor": 2 });
        redis(&args.redis_url, &["SET", &format!("{cluster}:node:{node}"), &beat.to_string(), "EX", "3600"]).await?;
        redis(&args.redis_url, &["SADD", &format!("{cluster}:nodes"), node]).await?;
    }
    let mut plans = String::new();
    let mut phases = Vec::new();
    let (timings, sampling) = phase(args, db, &cluster, &mut plans, "spread").await?;
    phases.push(("spread".to_owned(), timings, sampling));
    if args.hot_hour_rows > 0 {
        let t = Instant::now();
        let now = Utc::now();
        fill_ledger(&client, args.jobs, args.rows, args.hot_hour_rows, now - TimeDelta::hours(1), now).await?;
        fill.push((format!("{} rows in the last hour", fmt_int(args.hot_hour_rows as i64)), t.elapsed().as_secs_f64()));
        let (timings, sampling) = phase(args, db, &cluster, &mut plans, "hot hour").await?;
        phases.push(("hot hour".to_owned(), timings, sampling));
    }
    for node in ["cronshard-scheduler-0", "cronshard-scheduler-1", "cronshard-scheduler-2"] {
        redis(&args.redis_url, &["DEL", &format!("{cluster}:node:{node}")]).await.ok();
    }
    redis(&args.redis_url, &["DEL", &format!("{cluster}:nodes")]).await.ok();
    std::fs::create_dir_all(&args.out.out)?;
    let plans_file = args.out.out.join(format!("console-plans-{}.txt", args.rows));
    std::fs::write(&plans_file, plans)?;
    println!("plans: {}", plans_file.display());
    Ok((phases, fill))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_nodes_are_named_once_across_partitions() {
        let log = "\t  ->  Bitmap Index Scan on scheduled_jobs_20261125_expr_scheduled_at_idx  (cost=0.00..65.60 rows=1630)
               ->  Index Scan Backward using scheduled_jobs_20261124_status_scheduled_at_idx on scheduled_jobs_20261124 l_1
               ->  Index Scan Backward using scheduled_jobs_20261125_status_scheduled_at_idx on scheduled_jobs_20261125 l_2
               ->  Seq Scan on jobs (actual rows=3 loops=1)
               ->  Index Only Scan using jobs_pkey on jobs j";
        assert_eq!(
            scan_nodes(log),
            [
                "Bitmap Index Scan: scheduled_jobs_*_expr_scheduled_at_idx",
                "Index Scan Backward: scheduled_jobs_*_status_scheduled_at_idx",
                "Seq Scan on jobs",
                "Index Only Scan: jobs_pkey"
            ]
        );
    }
}
