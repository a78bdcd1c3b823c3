//! A whole cronshard stack started by a benchmark from release binaries, on
//! loopback only: a fresh database, a unique cluster name (its own Redis
//! keys and queues), the API, S schedulers and W workers, each process with
//! its own metrics port. Schedulers can be killed (-9), added, and all
//! stopped and started again; any process can be killed, stopped (SIGTERM)
//! or started under a name with more environment (the `chaos` scenario's
//! proxies and clocks); the pids of every live process are kept in a list
//! that [`crate::procstat`] samples.
//!
//! The API and the workers get `SECRETS_KEK` (the test key,
//! [`testing::TEST_SECRETS_KEK`]), so jobs may carry secret headers.
//!
//! The services are the machine's own unless `--stack-redis-urls`, `--stack-amqp-url`
//! and `--admin-database-url` name others (the `chaos` scenario passes its
//! private ones).
//!
//! Everything is killed when the stack is dropped; [`Stack::shutdown`] also
//! drops the database.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use domain::schedule::CompiledSchedule;

use crate::benchdb::{BenchDb, cluster_name};
use crate::procstat::Targets;

/// How to build the stack; flattened into every scenario's flags.
#[derive(clap::Args, Clone, Debug)]
pub struct StackArgs {
    /// Scheduler nodes.
    #[arg(long, default_value_t = 3)]
    pub schedulers: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
    /// `true`: pass the three settings below to the processes. By default
    /// the stack runs the binaries' own defaults (prefetch, in-flight,
    /// lookahead): a benchmark measures what a user installs.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub tuned: bool,
    /// Messages a worker may hold: pre-armed messages wait in it until due,
    /// so it must hold everything due within the lookahead (65,535 is the
    /// broker's maximum).
    #[arg(long, default_value_t = 65_535)]
    pub worker_prefetch: u32,
    /// Deliveries a worker runs at once. The product's default (256) suits
    /// slow callbacks; against one fast receiver, fewer keep-alive
    /// connections reused are faster than hundreds opened at the due instant
    /// (herd 10k p99: 512 → 1.0 s, 32 → 0.45 s on the 2-core machine).
    #[arg(long, default_value_t = 32)]
    pub worker_max_in_flight: u32,
    /// The schedulers' pre-arming lookahead (`LOOKAHEAD_MS`). Claiming,
    /// publishing and arming 100,000 slots takes longer than the product's
    /// 2 s default; what is not armed by the due instant competes with it.
    #[arg(long, default_value_t = 30_000)]
    pub scheduler_lookahead_ms: u64,
    /// Concurrent API clients creating the jobs.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Admin Postgres URL; a fresh database is created on its server for the run.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub admin_database_url: String,
    /// `REDIS_URLS` of the processes (default: the binaries' default, the local Redis).
    #[arg(long)]
    pub stack_redis_urls: Option<String>,
    /// `AMQP_URL` of the processes (default: `TEST_AMQP_URL` or the local broker).
    #[arg(long)]
    pub stack_amqp_url: Option<String>,
    /// Directory of the release binaries.
    #[arg(long, env = "CRONSHARD_BIN_DIR", default_value = "target/release")]
    pub bin_dir: PathBuf,
    /// Log filter of the stack's processes.
    #[arg(long, default_value = "warn")]
    pub stack_log: String,
    /// Write each process's output to `<dir>/<cluster>-<process>.log`
    /// (default: discarded).
    #[arg(long)]
    pub stack_log_dir: Option<PathBuf>,
    /// Keep the run's database at the end (its name is printed), to read
    /// the ledger of a run that went wrong.
    #[arg(long)]
    pub keep_db: bool,
    /// Migrate the run's database with `<bin_dir>/cronshard-api migrate`
    /// (the schema of the binaries the stack starts with, an older
    /// release's for an upgrade) instead of this build's migrations.
    #[arg(skip)]
    pub migrate_by_binaries: bool,
    /// More environment for every worker, `NAME=VALUE` (repeatable), e.g.
    /// `WORKER_MAX_PER_HOST=8`.
    #[arg(long = "worker-env", value_parser = parse_env_pair)]
    pub worker_env: Vec<(String, String)>,
    /// More environment for every process of the stack (API, schedulers
    /// and workers), `NAME=VALUE` (repeatable), for a setting the whole
    /// cluster must share, e.g. `AMQP_QUEUE_TYPE=quorum`.
    #[arg(long = "stack-env", value_parser = parse_env_pair)]
    pub stack_env: Vec<(String, String)>,
}

impl StackArgs {
    /// The flags' defaults, for a scenario that builds its stack's
    /// arguments from flags of its own.
    pub fn defaults() -> Self {
        use clap::{Args, FromArgMatches};
        let command = Self::augment_args(clap::Command::new("stack"));
        Self::from_arg_matches(&command.get_matches_from(["stack"])).expect("the defaults parse")
    }

    /// Connections the stack's workers may hold open to one host together:
    /// each worker's in-flight limit, capped by its per-host limit.
    pub fn worker_connections_per_host(&self) -> usize {
        let env = |name: &str| self.worker_env.iter().rev().find(|(k, _)| k == name).and_then(|(_, v)| v.parse().ok());
        let in_flight = env("WORKER_MAX_IN_FLIGHT").unwrap_or(if self.tuned {
            self.worker_max_in_flight as usize
        } else {
            worker::defaults::MAX_IN_FLIGHT
        });
        // Unset, a worker's limit per host is learnt, up to its in-flight limit.
        let per_host = env("WORKER_MAX_PER_HOST").unwrap_or(in_flight);
        self.workers * in_flight.min(per_host)
    }

    /// What the stack's processes ran with, for a report's settings row.
    pub fn settings(&self) -> String {
        let mut s = if self.tuned {
            format!(
                "tuned: WORKER_PREFETCH {}, WORKER_MAX_IN_FLIGHT {}, LOOKAHEAD_MS {}",
                self.worker_prefetch.min(65_535),
                self.worker_max_in_flight,
                self.scheduler_lookahead_ms
            )
        } else {
            "the binaries' defaults (no WORKER_PREFETCH, WORKER_MAX_IN_FLIGHT or LOOKAHEAD_MS set)".to_owned()
        };
        for (k, v) in &self.stack_env {
            s.push_str(&format!("; every process {k}={v}"));
        }
        for (k, v) in &self.worker_env {
            s.push_str(&format!("; worker {k}={v}"));
        }
        s
    }
}

pub fn parse_env_pair(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or_else(|| format!("{s:?} is not NAME=VALUE"))?;
    Ok((k.to_owned(), v.to_owned()))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    Api,
    Scheduler,
    Worker,
}

struct Proc {
    role: Role,
    name: String,
    child: tokio::process::Child,
    pid: u32,
    metrics_addr: std::net::SocketAddr,
}

pub struct Stack {
    args: StackArgs,
    db: Option<BenchDb>,
    pub cluster: String,
    /// `http://127.0.0.1:<port>` of the API.
    pub api: String,
    procs: Vec<Proc>,
    next_scheduler: usize,
    targets: Targets,
    http: reqwest::Client,
}

/// A job created through the API, with its schedule compiled by common's
/// schedule code (the same math the scheduler uses).
pub struct CreatedJob {
    pub id: Uuid,
    pub schedule: CompiledSchedule,
}

impl CreatedJob {
    /// Every slot in `[from, to)`.
    pub fn slots(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        // `next_after` is strictly after: start just before `from`.
        let mut cursor = from - chrono::TimeDelta::nanoseconds(1);
        while let Some(t) = self.schedule.next_after(cursor) {
            if t >= to {
                break;
            }
            out.push(t);
            cursor = t;
        }
        out
    }
}

fn free_loopback_port() -> anyhow::Result<std::net::SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

impl Stack {
    /// Creates the database and starts the API, the schedulers and the
    /// workers; returns once the API is ready and every scheduler is live.
    pub async fn start(label: &str, args: &StackArgs) -> anyhow::Result<Self> {
        for bin in ["cronshard-api", "cronshard-scheduler", "cronshard-worker"] {
            anyhow::ensure!(
                args.bin_dir.join(bin).exists(),
                "{} not found: build with `cargo build --release --workspace --bins` or pass --bin-dir",
                args.bin_dir.join(bin).display()
            );
        }
        let db = if args.migrate_by_binaries {
            BenchDb::create_migrated_by(&args.admin_database_url, &args.bin_dir.join("cronshard-api")).await?
        } else {
            BenchDb::create(&args.admin_database_url).await?
        };
        let api_addr = free_loopback_port()?;
        let mut stack = Self {
            args: args.clone(),
            db: Some(db),
            cluster: cluster_name(label),
            api: format!("http://{api_addr}"),
            procs: Vec::new(),
            next_scheduler: 0,
            targets: Targets::default(),
            http: reqwest::Client::builder().pool_max_idle_per_host(args.concurrency.max(4)).build()?,
        };
        stack.spawn(
            Role::Api,
            "api".into(),
            vec![
                ("LISTEN_ADDR", api_addr.to_string()),
                // As the workers: the receivers are on loopback, and a short
                // --period-ms makes sub-second intervals.
                ("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8".into()),
                ("MIN_INTERVAL_MS", "1".into()),
            ],
        )?;
        for _ in 0..args.schedulers {
            stack.add_scheduler()?;
        }
        for i in 0..args.workers {
            stack.start_worker(&format!("worker-{i}"), &[])?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while stack.http.get(format!("{}/readyz", stack.api)).send().await.map(|r| r.status() != 200).unwrap_or(true) {
            anyhow::ensure!(Instant::now() < deadline, "the API did not become ready within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stack.wait_live_nodes(args.schedulers, Duration::from_secs(30)).await?;
        Ok(stack)
    }

    fn spawn<K: AsRef<std::ffi::OsStr>>(
        &mut self,
        role: Role,
        name: String,
        extra: Vec<(K, String)>,
    ) -> anyhow::Result<()> {
        let bin = match role {
            Role::Api => "cronshard-api",
            Role::Scheduler => "cronshard-scheduler",
            Role::Worker => "cronshard-worker",
        };
        let db_url = self.db.as_ref().context("the stack is shut down")?.url.clone();
        let metrics_addr = free_loopback_port()?;
        let mut c = tokio::process::Command::new(self.args.bin_dir.join(bin));
        c.env("DATABASE_URL", db_url)
            .env("CLUSTER_NAME", &self.cluster)
            .env("METRICS_ADDR", metrics_addr.to_string())
            .env("RUST_LOG", &self.args.stack_log)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(urls) = &self.args.stack_redis_urls {
            c.env("REDIS_URLS", urls);
        }
        if let Some(url) = &self.args.stack_amqp_url {
            c.env("AMQP_URL", url);
        }
        match &self.args.stack_log_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)?;
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(dir.join(format!("{}-{name}.log", self.cluster)))?;
                c.stdout(file.try_clone()?).stderr(file);
            }
            None => {
                c.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        match role {
            Role::Scheduler => c.env("NODE_ID", format!("{}-{name}", self.cluster)),
            Role::Worker => c.env("WORKER_ID", format!("{}-{name}", self.cluster)),
            Role::Api => &mut c,
        };
        // Secret header values are sealed at rest: the API seals them and the workers open
        // them with the same key-encryption key (the schedulers never see a value). The
        // test key; `--stack-env SECRETS_KEK=...` (applied below) overrides it.
        if role != Role::Scheduler {
            c.env("SECRETS_KEK", testing::TEST_SECRETS_KEK);
        }
        if self.args.tuned && role == Role::Scheduler {
            c.env("LOOKAHEAD_MS", self.args.scheduler_lookahead_ms.to_string());
        }
        for (k, v) in &self.args.stack_env {
            c.env(k, v);
        }
        for (k, v) in extra {
            c.env(k, v);
        }
        let child = c.spawn().with_context(|| format!("starting {bin}"))?;
        let pid = child.id().context("pid of a child just started")?;
        self.procs.push(Proc { role, name, child, pid, metrics_addr });
        self.refresh_targets();
        Ok(())
    }

    /// The directory the processes started from now on run from (the other
    /// release's binaries, in a rolling upgrade).
    pub fn set_bin_dir(&mut self, dir: PathBuf) {
        self.args.bin_dir = dir;
    }

    /// Replaces the API process with one from the current bin dir on the
    /// same address: SIGTERM, then a new one, ready when `/readyz` says so.
    pub async fn restart_api(&mut self, grace: Duration) -> anyhow::Result<()> {
        self.terminate("api", grace).await?;
        let addr = self.api.trim_start_matches("http://").to_owned();
        self.spawn(
            Role::Api,
            "api".into(),
            vec![
                ("LISTEN_ADDR", addr),
                ("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8".into()),
                ("MIN_INTERVAL_MS", "1".into()),
            ],
        )?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.http.get(format!("{}/readyz", self.api)).send().await.map(|r| r.status() != 200).unwrap_or(true) {
            anyhow::ensure!(Instant::now() < deadline, "the new API did not become ready within 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The stack's processes plus this one (the load generator and its receiver).
    fn refresh_targets(&self) {
        let mut t: Vec<(String, u32)> = self.procs.iter().map(|p| (p.name.clone(), p.pid)).collect();
        t.push(("loadtest (this process)".into(), std::process::id()));
        *self.targets.lock().expect("targets") = t;
    }

    /// The live processes, kept current, for [`crate::procstat::Sampler`].
    pub fn targets(&self) -> Targets {
        self.targets.clone()
    }

    /// Each series (a counter or gauge, by its exact name) summed over the
    /// schedulers running now; a scheduler that does not answer counts as
    /// 0, and the sum is `None` when none answered.
    pub async fn scheduler_sums(&self, series: &[&str]) -> Vec<Option<f64>> {
        self.sums(Role::Scheduler, series).await
    }

    /// As [`Stack::scheduler_sums`], over the workers.
    pub async fn worker_sums(&self, series: &[&str]) -> Vec<Option<f64>> {
        self.sums(Role::Worker, series).await
    }

    async fn sums(&self, role: Role, series: &[&str]) -> Vec<Option<f64>> {
        let http = reqwest::Client::new();
        let mut sums = vec![None; series.len()];
        for p in self.procs.iter().filter(|p| p.role == role) {
            let url = format!("http://{}/metrics", p.metrics_addr);
            let Ok(text) = async { http.get(&url).send().await?.text().await }.await else { continue };
            for (sum, name) in sums.iter_mut().zip(series) {
                let value = runtime::metrics::value_in(&text, name).unwrap_or(0.0);
                *sum = Some(sum.unwrap_or(0.0) + value);
            }
        }
        sums
    }

    /// Names of the schedulers running now.
    pub fn schedulers(&self) -> Vec<String> {
        self.procs.iter().filter(|p| p.role == Role::Scheduler).map(|p| p.name.clone()).collect()
    }

    /// Starts one more scheduler (`scheduler-<n>`, a new node id).
    pub fn add_scheduler(&mut self) -> anyhow::Result<String> {
        let name = self.next_scheduler_name();
        self.spawn(Role::Scheduler, name.clone(), Vec::<(&str, String)>::new())?;
        Ok(name)
    }

    /// The name the next added scheduler gets (`scheduler-<n>`), reserved.
    pub fn next_scheduler_name(&mut self) -> String {
        let name = format!("scheduler-{}", self.next_scheduler);
        self.next_scheduler += 1;
        name
    }

    /// Starts a scheduler under `name` (its node id follows from it) with
    /// more environment, which wins over the stack's.
    pub fn start_scheduler(&mut self, name: &str, env: &[(String, String)]) -> anyhow::Result<()> {
        self.spawn(Role::Scheduler, name.to_owned(), env.to_vec())
    }

    /// Starts a worker under `name` (its worker id follows from it) with the
    /// stack's worker settings plus `env`, which wins.
    pub fn start_worker(&mut self, name: &str, env: &[(String, String)]) -> anyhow::Result<()> {
        let mut all = vec![("CALLBACK_ALLOW_CIDRS".to_owned(), "127.0.0.0/8".to_owned())];
        if self.args.tuned {
            all.push(("WORKER_PREFETCH".into(), self.args.worker_prefetch.min(65_535).to_string()));
            all.push(("WORKER_MAX_IN_FLIGHT".into(), self.args.worker_max_in_flight.to_string()));
        }
        all.extend(self.args.worker_env.iter().cloned());
        all.extend(env.iter().cloned());
        self.spawn(Role::Worker, name.to_owned(), all)
    }

    /// Names of the workers running now.
    pub fn workers(&self) -> Vec<String> {
        self.procs.iter().filter(|p| p.role == Role::Worker).map(|p| p.name.clone()).collect()
    }

    /// Kills (SIGKILL) the process named `name` and waits for it to exit.
    pub async fn kill(&mut self, name: &str) -> anyhow::Result<()> {
        let i = self.procs.iter().position(|p| p.name == name).with_context(|| format!("no running process {name}"))?;
        let mut p = self.procs.remove(i);
        p.child.start_kill()?;
        p.child.wait().await?;
        self.refresh_targets();
        Ok(())
    }

    /// Stops the process named `name` with SIGTERM (a graceful shutdown)
    /// and waits for it to exit; SIGKILL after `grace`.
    pub async fn terminate(&mut self, name: &str, grace: Duration) -> anyhow::Result<()> {
        let i = self.procs.iter().position(|p| p.name == name).with_context(|| format!("no running process {name}"))?;
        let mut p = self.procs.remove(i);
        // No signal API without `unsafe` here: kill(1) sends it.
        let _ = std::process::Command::new("kill").arg("-TERM").arg(p.pid.to_string()).status();
        if tokio::time::timeout(grace, p.child.wait()).await.is_err() {
            p.child.start_kill()?;
            p.child.wait().await?;
        }
        self.refresh_targets();
        Ok(())
    }

    /// The run's database: its name and URL (on the admin URL's server).
    pub fn database(&self) -> anyhow::Result<(&str, &str)> {
        let db = self.db.as_ref().context("the stack is shut down")?;
        Ok((&db.name, &db.url))
    }

    /// Kills (SIGKILL) the scheduler named `name` and waits for it to exit.
    pub async fn kill_scheduler(&mut self, name: &str) -> anyhow::Result<()> {
        let i = self
            .procs
            .iter()
            .position(|p| p.role == Role::Scheduler && p.name == name)
            .with_context(|| format!("no running scheduler {name}"))?;
        let mut p = self.procs.remove(i);
        p.child.start_kill()?;
        p.child.wait().await?;
        self.refresh_targets();
        Ok(())
    }

    /// Kills every scheduler (SIGKILL); returns their names for [`Self::restart_schedulers`].
    pub async fn kill_all_schedulers(&mut self) -> anyhow::Result<Vec<String>> {
        let names = self.schedulers();
        for n in &names {
            self.kill_scheduler(n).await?;
        }
        Ok(names)
    }

    /// Starts schedulers under the given names again (the same node ids).
    pub fn restart_schedulers(&mut self, names: &[String]) -> anyhow::Result<()> {
        for n in names {
            self.spawn(Role::Scheduler, n.clone(), Vec::<(&str, String)>::new())?;
        }
        Ok(())
    }

    /// Waits until `GET /v1/cluster` reports `n` live nodes.
    pub async fn wait_live_nodes(&self, n: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let live = async {
                let v: Value =
                    self.http.get(format!("{}/v1/cluster", self.api)).send().await.ok()?.json().await.ok()?;
                v["live_nodes"].as_u64()
            }
            .await;
            if live == Some(n as u64) {
                return Ok(());
            }
            anyhow::ensure!(Instant::now() < deadline, "the cluster did not reach {n} live nodes (last: {live:?})");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates jobs through `POST /v1/jobs` with the configured number of
    /// concurrent clients; returns them (in `bodies` order) and the seconds taken.
    /// Creates the jobs through `POST /v1/jobs/batch`, `batch` per request
    /// (at most 1,000), `concurrency` requests at once; returns them in
    /// order with the seconds it took.
    pub async fn create_jobs_batched(
        &self,
        bodies: Vec<Value>,
        batch: usize,
    ) -> anyhow::Result<(Vec<CreatedJob>, f64)> {
        let batch = batch.clamp(1, 1_000);
        let chunks: Vec<(usize, Vec<Value>)> =
            bodies.chunks(batch).enumerate().map(|(n, c)| (n * batch, c.to_vec())).collect();
        let chunks = Arc::new(chunks);
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..self.args.concurrency.max(1) {
            let (http, url, chunks, next) =
                (self.http.clone(), format!("{}/v1/jobs/batch", self.api), chunks.clone(), next.clone());
            clients.push(tokio::spawn(async move {
                let mut made = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let Some((first, chunk)) = chunks.get(n) else { return anyhow::Ok(made) };
                    let r = http.post(&url).json(&serde_json::json!({ "jobs": chunk, "atomic": true })).send().await?;
                    let status = r.status();
                    anyhow::ensure!(
                        status == 201,
                        "batch create answered {status}: {}",
                        r.text().await.unwrap_or_default()
                    );
                    let answer: Value = r.json().await?;
                    let items = answer["items"].as_array().context("items in the batch response")?;
                    for (k, (item, body)) in items.iter().zip(chunk).enumerate() {
                        let job = &item["job"];
                        let id: Uuid = job["id"].as_str().context("id in a batch item")?.parse()?;
                        let created_at: DateTime<Utc> =
                            job["created_at"].as_str().context("created_at in a batch item")?.parse()?;
                        let spec = domain::job::JobSpec::from_json_with(body, &domain::job::Limits::unrestricted())
                            .map_err(|e| anyhow::anyhow!("a job body the API accepted does not validate: {e:?}"))?;
                        made.push((first + k, CreatedJob { id, schedule: spec.compile(created_at)? }));
                    }
                }
            }));
        }
        let mut jobs = Vec::with_capacity(bodies.len());
        for c in clients {
            jobs.extend(c.await??);
        }
        let secs = started.elapsed().as_secs_f64();
        jobs.sort_by_key(|(i, _)| *i);
        Ok((jobs.into_iter().map(|(_, j)| j).collect(), secs))
    }

    pub async fn create_jobs(&self, bodies: Vec<Value>) -> anyhow::Result<(Vec<CreatedJob>, f64)> {
        let total = bodies.len();
        let bodies = Arc::new(bodies);
        let next = Arc::new(AtomicUsize::new(0));
        let started = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..self.args.concurrency.max(1) {
            let (http, url, bodies, next) =
                (self.http.clone(), format!("{}/v1/jobs", self.api), bodies.clone(), next.clone());
            clients.push(tokio::spawn(async move {
                let mut made = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= bodies.len() {
                        return anyhow::Ok(made);
                    }
                    let r = http.post(&url).json(&bodies[i]).send().await?;
                    let status = r.status();
                    anyhow::ensure!(status == 201, "create answered {status}: {}", r.text().await.unwrap_or_default());
                    let job: Value = r.json().await?;
                    let id: Uuid = job["id"].as_str().context("id in the create response")?.parse()?;
                    let created_at: DateTime<Utc> =
                        job["created_at"].as_str().context("created_at in the create response")?.parse()?;
                    let spec = domain::job::JobSpec::from_json_with(&bodies[i], &domain::job::Limits::unrestricted())
                        .map_err(|e| anyhow::anyhow!("a job body the API accepted does not validate: {e:?}"))?;
                    made.push((i, CreatedJob { id, schedule: spec.compile(created_at)? }));
                }
            }));
        }
        let mut jobs = Vec::with_capacity(total);
        for c in clients {
            jobs.extend(c.await??);
        }
        let secs = started.elapsed().as_secs_f64();
        jobs.sort_by_key(|(i, _)| *i);
        Ok((jobs.into_iter().map(|(_, j)| j).collect(), secs))
    }

    /// `POST` on the API without a body, as JSON; any 2xx.
    pub async fn post_json(&self, path: &str) -> anyhow::Result<Value> {
        let r = self.http.post(format!("{}{path}", self.api)).send().await?;
        anyhow::ensure!(r.status().is_success(), "POST {path} answered {}", r.status());
        Ok(r.json().await?)
    }

    /// `GET` on the API, as JSON.
    pub async fn get_json(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let r = self.http.get(format!("{}{path_and_query}", self.api)).send().await?;
        anyhow::ensure!(r.status() == 200, "GET {path_and_query} answered {}", r.status());
        Ok(r.json().await?)
    }

    /// Ledger rows by status, read from the database directly (a whole-table
    /// count is no API call): where the slots that were not delivered are.
    pub async fn ledger_by_status(&self) -> anyhow::Result<Vec<(String, i64)>> {
        let db = self.db.as_ref().context("the stack is shut down")?;
        let client = store::db::connect(&db.url).await?;
        let rows =
            client.query("SELECT status, count(*) FROM scheduled_jobs GROUP BY status ORDER BY status", &[]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// The Postgres server's write settings and checkpoint counters now.
    pub async fn postgres(&self) -> anyhow::Result<crate::benchdb::PgServer> {
        self.db.as_ref().context("the stack is shut down")?.server().await
    }

    /// The ledger's size now (pages, index pages, rows).
    pub async fn ledger_size(&self) -> anyhow::Result<crate::benchdb::LedgerSize> {
        self.db.as_ref().context("the stack is shut down")?.ledger_size().await
    }

    /// Which worker holds each slot's ledger row: `(job id, worker id)`.
    pub async fn ledger_workers(&self) -> anyhow::Result<Vec<(Uuid, String)>> {
        let db = self.db.as_ref().context("the stack is shut down")?;
        let client = store::db::connect(&db.url).await?;
        let rows = client.query("SELECT job_id, coalesce(worker_id, '') FROM scheduled_jobs", &[]).await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Ledger rows of the slots scheduled in `[from, to)`, by status.
    pub async fn ledger_window_by_status(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> anyhow::Result<Vec<(String, i64)>> {
        let db = self.db.as_ref().context("the stack is shut down")?;
        let client = store::db::connect(&db.url).await?;
        let rows = client
            .query(
                "SELECT status, count(*) FROM scheduled_jobs WHERE scheduled_at >= $1 AND scheduled_at < $2
                 GROUP BY status ORDER BY status",
                &[&from, &to],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Execution ids of the rows of slots in `[from, to)` decided without a
    /// delivery (`skipped` or `missed`: a misfire or overlap policy, a
    /// calendar, a cancellation).
    pub async fn ledger_window_decided(
        &self,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> anyhow::Result<std::collections::HashSet<String>> {
        let db = self.db.as_ref().context("the stack is shut down")?;
        let client = store::db::connect(&db.url).await?;
        let rows = client
            .query(
                "SELECT execution_id FROM scheduled_jobs WHERE scheduled_at >= $1 AND scheduled_at < $2
                   AND status IN ('skipped', 'missed')",
                &[&from, &to],
            )
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// Ledger rows whose history says they waited for their destination
    /// (`waiting` entries), by status.
    pub async fn waiting_by_status(&self) -> anyhow::Result<Vec<(String, i64)>> {
        let db = self.db.as_ref().context("the stack is shut down")?;
        let client = store::db::connect(&db.url).await?;
        let rows = client
            .query(
                "SELECT status, count(*) FROM scheduled_jobs
                 WHERE history @> '[{\"event\": \"waiting\"}]'::jsonb GROUP BY status ORDER BY status",
                &[],
            )
            .await?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Kills every process, deletes the cluster's queues and drops the
    /// database. Queues left behind keep their messages: a few runs' worth
    /// once stalled the broker (and every later run on it) for a minute.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        for p in &mut self.procs {
            let _ = p.child.start_kill();
            let _ = p.child.wait().await;
        }
        self.procs.clear();
        let amqp_url = self.args.stack_amqp_url.clone().unwrap_or_else(testing::amqp_url);
        broker::amqp::Topology::new(&self.cluster).delete_at(&amqp_url).await?;
        if let Some(db) = self.db.take() {
            if self.args.keep_db {
                eprintln!("kept the database {} (--keep-db)", db.url);
            } else {
                db.drop_database().await?;
            }
        }
        Ok(())
    }
}
