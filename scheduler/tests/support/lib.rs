//! Shared by the scheduler's integration tests: a real HTTP callback
//! receiver, and an in-process stack (API, scheduler nodes, workers) on the
//! real services, isolated by its own database and cluster name.
#![allow(dead_code)] // each test binary uses a different part

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use scheduler::node::{Node, NodeConfig};
use testing::{TestDb, unique_cluster};
use worker::WorkerConfig;

#[derive(Debug, Clone)]
pub struct Received {
    pub execution_id: String,
    pub scheduled_at: String,
    pub attempt: u32,
    pub received_at: DateTime<Utc>,
    pub path: String,
}

#[derive(Clone, Default)]
struct SinkState {
    received: Arc<Mutex<Vec<Received>>>,
    /// Answer this status instead of 200 to the first N requests.
    fail_first: Arc<Mutex<(usize, u16)>>,
    /// Hold each answer this long (a slow receiver).
    delay: Arc<Mutex<Duration>>,
    /// (execution id, status) of every answer, in the order they were sent.
    answers: Arc<Mutex<Vec<(String, u16)>>>,
    /// Requests being answered now, and the most there ever were at once.
    in_progress: Arc<std::sync::atomic::AtomicUsize>,
    peak_in_progress: Arc<std::sync::atomic::AtomicUsize>,
    /// Serve at most this many at once (each for `delay`), queueing the rest.
    serving: Arc<Mutex<Option<Arc<tokio::sync::Semaphore>>>>,
}

/// A real HTTP receiver on 127.0.0.1 that records every delivery.
pub struct Sink {
    pub addr: SocketAddr,
    state: SinkState,
    _shutdown: tokio::sync::oneshot::Sender<()>,
}

fn header(h: &HeaderMap, name: &str) -> String {
    h.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned()
}

async fn record(State(s): State<SinkState>, uri: axum::http::Uri, headers: HeaderMap) -> StatusCode {
    s.received.lock().unwrap().push(Received {
        execution_id: header(&headers, "x-cronshard-execution-id"),
        scheduled_at: header(&headers, "x-cronshard-scheduled-at"),
        attempt: header(&headers, "x-cronshard-attempt").parse().unwrap_or(0),
        received_at: Utc::now(),
        path: uri.path().to_owned(),
    });
    use std::sync::atomic::Ordering::SeqCst;
    let now_in_progress = s.in_progress.fetch_add(1, SeqCst) + 1;
    s.peak_in_progress.fetch_max(now_in_progress, SeqCst);
    let serving = s.serving.lock().unwrap().clone();
    let _turn = match serving {
        Some(semaphore) => Some(semaphore.acquire_owned().await.unwrap()),
        None => None,
    };
    let delay = *s.delay.lock().unwrap();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    s.in_progress.fetch_sub(1, SeqCst);
    let status = {
        let mut fail = s.fail_first.lock().unwrap();
        if fail.0 > 0 {
            fail.0 -= 1;
            StatusCode::from_u16(fail.1).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        } else {
            StatusCode::OK
        }
    };
    s.answers.lock().unwrap().push((header(&headers, "x-cronshard-execution-id"), status.as_u16()));
    status
}

impl Sink {
    pub async fn start() -> Sink {
        let state = SinkState::default();
        let app = Router::new().route("/{*path}", any(record)).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await
                .unwrap();
        });
        Sink { addr, state, _shutdown: tx }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.addr)
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    pub fn received_on(&self, path: &str) -> Vec<Received> {
        self.received().into_iter().filter(|r| r.path == format!("/{path}")).collect()
    }

    pub fn set_delay(&self, delay: Duration) {
        *self.state.delay.lock().unwrap() = delay;
    }

    /// Serve at most `n` requests at once, the rest queueing (a receiver
    /// with a fixed number of workers).
    pub fn serve_at_most(&self, n: usize) {
        *self.state.serving.lock().unwrap() = Some(Arc::new(tokio::sync::Semaphore::new(n)));
    }

    /// The most requests this receiver was answering (or queueing) at once.
    pub fn peak_in_progress(&self) -> usize {
        self.state.peak_in_progress.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn fail_first(&self, n: usize, status: u16) {
        *self.state.fail_first.lock().unwrap() = (n, status);
    }

    /// (execution id, status) of every answer sent so far.
    pub fn answers(&self) -> Vec<(String, u16)> {
        self.state.answers.lock().unwrap().clone()
    }
}

/// The in-process stack: the API on port 0, and nodes/workers started on demand.
pub struct Stack {
    pub db: TestDb,
    pub cluster: String,
    pub api: String,
    pub http: reqwest::Client,
    pub pg: deadpool_postgres::Pool,
    pub token: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Stack {
    /// What the stack's own processes (spawned binaries) need to join it,
    /// on the machine's Redis.
    pub fn proc_env(&self) -> ProcEnv {
        ProcEnv { database_url: self.db.url.clone(), cluster: self.cluster.clone(), redis_urls: testing::redis_url() }
    }

    pub async fn start(label: &str) -> Stack {
        if std::env::var("TEST_LOG").is_ok() {
            runtime::telemetry::init(runtime::config::LogFormat::Text);
        }
        let db = TestDb::new().await.expect("test database");
        let cluster = unique_cluster(label);
        let pg = store::db::pool(&db.url, 8).unwrap();
        let state = api::AppState {
            job_changes: store::notify::Announcer::start(pg.clone()),
            vault: store::secrets::Vault::new(testing::test_keyring()),
            pg: pg.clone(),
            redis: runtime::redis::pools(&[testing::redis_url()]).unwrap(),
            keys: runtime::redis::Keys::new(&cluster),
            cluster: cluster.clone(),
            tokens: Arc::new(vec![]),
            token_cache: Default::default(),
            publisher: api::AppState::publisher(&testing::amqp_url(), broker::amqp::Topology::new(&cluster)),
            retention: Default::default(),
            // As the workers (`worker_config`): callbacks go to loopback sinks,
            // and some tests run sub-second intervals.
            limits: Arc::new(domain::job::Limits {
                min_interval_ms: 1,
                allow_cidrs: vec!["127.0.0.0/8".parse().unwrap()],
            }),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let api = format!("http://{}", listener.local_addr().unwrap());
        let token = CancellationToken::new();
        let t = token.clone();
        let server = tokio::spawn(async move {
            api::serve(listener, state, async move { t.cancelled().await }).await.unwrap();
        });
        Stack { db, cluster, api, http: reqwest::Client::new(), pg, token, tasks: vec![server] }
    }

    pub fn node_config(&self, node_id: &str) -> NodeConfig {
        let mut cfg = NodeConfig::new(node_id.into(), self.cluster.clone(), self.db.url.clone(), testing::amqp_url());
        cfg.poll_interval = Duration::from_millis(500);
        cfg.heartbeat_interval = Duration::from_secs(1);
        cfg.membership_refresh = Duration::from_millis(300);
        cfg.outbox_grace = Duration::from_secs(2);
        cfg
    }

    pub fn start_node(&mut self, config: NodeConfig) {
        let node = Node {
            config,
            pg: store::db::pool(&self.db.url, 8).unwrap(),
            redis: runtime::redis::pools(&[testing::redis_url()]).unwrap(),
        };
        let token = self.token.clone();
        self.tasks.push(tokio::spawn(async move {
            node.run(token).await.unwrap();
        }));
    }

    pub fn worker_config(&self, worker_id: &str) -> WorkerConfig {
        WorkerConfig {
            worker_id: worker_id.into(),
            cluster: self.cluster.clone(),
            amqp_url: testing::amqp_url(),
            queue_type: Default::default(),
            prefetch: 500,
            max_in_flight: 64,
            max_held_bytes: worker::defaults::MAX_HELD_MB << 20,
            destinations: Default::default(),
            retry_defaults: domain::job::RetryPolicy {
                max_retries: 3,
                base_delay_ms: 1000,
                multiplier: 2.0,
                max_delay_ms: 60_000,
                jitter: domain::job::Jitter::default(),
            },
            allow_cidrs: vec!["127.0.0.0/8".parse().unwrap()],
            aws: None,
            misfire_threshold: Duration::from_millis(domain::job::MISFIRE_THRESHOLD_DEFAULT_MS),
            clock: Default::default(),
            outcome_retry_for: worker::defaults::OUTCOME_RETRY_FOR,
            keyring: testing::test_keyring(),
            signing_keys_fresh_for: worker::deliver::signing::ACTIVE_KEYS_FRESH_FOR,
        }
    }

    pub fn start_worker(&mut self, config: WorkerConfig) {
        let pg = self.pg.clone();
        let token = self.token.clone();
        self.tasks.push(tokio::spawn(async move {
            worker::run(config, pg, token).await.unwrap();
        }));
    }

    pub async fn create_job(&self, body: Value) -> Value {
        let response = self.http.post(format!("{}/v1/jobs", self.api)).json(&body).send().await.unwrap();
        let status = response.status();
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 201, "create failed: {body}");
        body
    }

    pub async fn delete_job(&self, id: &str) {
        let response = self.http.delete(format!("{}/v1/jobs/{id}", self.api)).send().await.unwrap();
        assert_eq!(response.status(), 204);
    }

    pub async fn post(&self, path: &str) -> Value {
        let response = self.http.post(format!("{}{path}", self.api)).send().await.unwrap();
        assert!(response.status().is_success(), "POST {path}: {}", response.status());
        response.json().await.unwrap()
    }

    pub async fn get(&self, path: &str) -> Value {
        let response = self.http.get(format!("{}{path}", self.api)).send().await.unwrap();
        assert!(response.status().is_success(), "GET {path}: {}", response.status());
        response.json().await.unwrap()
    }

    pub async fn put(&self, path: &str, body: &Value) -> Value {
        let response = self.http.put(format!("{}{path}", self.api)).json(body).send().await.unwrap();
        assert!(response.status().is_success(), "PUT {path}: {}", response.status());
        response.json().await.unwrap()
    }

    /// The ledger row of one slot as JSON (status, attempts, reason, ...).
    pub async fn ledger(&self, job_id: &str, scheduled_at: DateTime<Utc>) -> Option<Value> {
        let client = self.pg.get().await.unwrap();
        let id: uuid::Uuid = job_id.parse().unwrap();
        client
            .query_opt(
                "SELECT status, attempts, reason, execution_id, worker_id, scheduler_node, http_status, history
                 FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2",
                &[&id, &scheduled_at],
            )
            .await
            .unwrap()
            .map(|r| {
                json!({
                    "status": r.get::<_, String>(0), "attempts": r.get::<_, i32>(1), "reason": r.get::<_, Option<String>>(2),
                    "execution_id": r.get::<_, String>(3), "worker_id": r.get::<_, Option<String>>(4),
                    "scheduler_node": r.get::<_, Option<String>>(5), "http_status": r.get::<_, Option<i32>>(6),
                    "history": r.get::<_, Value>(7),
                })
            })
    }

    pub async fn stop(self) {
        self.token.cancel();
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
        }
        // The broker is shared by every run: leave nothing behind.
        let _ = broker::amqp::Topology::new(&self.cluster).delete_at(&testing::amqp_url()).await;
    }
}

/// A request to the stack's API: its status and JSON body (null when none).
pub async fn api(stack: &Stack, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = stack.http.request(method, format!("{}{path}", stack.api));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

pub fn http_target(url: &str) -> Value {
    json!({ "kind": "http", "url": url, "timeout_ms": 2000 })
}

/// The binaries sit next to each other in the target directory; the API's
/// belongs to another package, so `cargo build --workspace --bins` must have
/// run (deploy/test.sh does).
pub fn binary(name: &str) -> std::path::PathBuf {
    let scheduler = std::path::PathBuf::from(env!("CARGO_BIN_EXE_cronshard-scheduler"));
    let path = scheduler.with_file_name(name);
    assert!(path.exists(), "{} is missing: run `cargo build --workspace --bins` first", path.display());
    path
}

/// The value of the series `name` on a process's `/metrics`: a metric's
/// name alone, or with its labels as the exporter writes them.
pub async fn metric_value(http: &reqwest::Client, addr: &str, name: &str) -> Option<f64> {
    runtime::metrics::value_in(&metrics_text(http, addr).await?, name)
}

/// One scrape of a process's `/metrics`. Series compared with each other
/// (a histogram's count and its buckets) must come from the same scrape: a
/// live process moves between two.
pub async fn metrics_text(http: &reqwest::Client, addr: &str) -> Option<String> {
    http.get(format!("http://{addr}/metrics")).send().await.ok()?.text().await.ok()
}

/// The libfaketime library, which the tests that move a process's wall
/// clock preload.
pub fn libfaketime() -> String {
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"] {
        let path = format!("{dir}/faketime/libfaketime.so.1");
        if std::path::Path::new(&path).exists() {
            return path;
        }
    }
    panic!("libfaketime is missing: run `deploy/scripts/services.sh ensure faketime` (Debian package faketime)");
}

pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Environment shared by every process of one test's cluster.
#[derive(Clone)]
pub struct ProcEnv {
    pub database_url: String,
    pub cluster: String,
    pub redis_urls: String,
}

impl ProcEnv {
    pub fn command(&self, bin: &str) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(binary(bin));
        c.env("DATABASE_URL", &self.database_url)
            .env("CLUSTER_NAME", &self.cluster)
            .env("REDIS_URLS", &self.redis_urls)
            .env("AMQP_URL", testing::amqp_url())
            .env("SECRETS_KEK", testing::TEST_SECRETS_KEK)
            .env("RUST_LOG", std::env::var("TEST_CHILD_LOG").unwrap_or_else(|_| "warn".into()))
            .env("METRICS_ADDR", free_addr())
            .stdin(std::process::Stdio::null())
            // Logs go to stdout: shown only when TEST_CHILD_LOG asks for them.
            .stdout(if std::env::var_os("TEST_CHILD_LOG").is_some() {
                std::process::Stdio::inherit()
            } else {
                std::process::Stdio::null()
            })
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        c
    }

    /// A scheduler process with test-friendly intervals.
    pub fn scheduler(&self, node_id: &str) -> tokio::process::Child {
        self.scheduler_command(node_id).spawn().unwrap()
    }

    /// The command of [`Self::scheduler`], for a test to add environment.
    pub fn scheduler_command(&self, node_id: &str) -> tokio::process::Command {
        let mut c = self.command("cronshard-scheduler");
        c.env("NODE_ID", node_id).env("HEARTBEAT_INTERVAL_MS", "1000").env("POLL_INTERVAL_MS", "1000");
        c
    }

    pub fn worker(&self, worker_id: &str) -> tokio::process::Child {
        self.command("cronshard-worker")
            .env("WORKER_ID", worker_id)
            .env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8")
            .spawn()
            .unwrap()
    }
}

pub fn kill9(child: &tokio::process::Child) {
    let pid = child.id().expect("process is running");
    let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
}

// Each test binary uses a different part of this file.
#[allow(unused_imports)]
pub use testing::proxy::TcpProxy;

/// A private redis-server for tests that must flush or break Redis.
pub struct RedisServer {
    pub addr: SocketAddr,
    _child: tokio::process::Child,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        let addr: SocketAddr = free_addr().parse().unwrap();
        let child = tokio::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &addr.port().to_string(), "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server is installed (deploy/scripts/services.sh installs it)");
        testing::wait_for("the private redis-server", Duration::from_secs(10), || async {
            tokio::net::TcpStream::connect(addr).await.ok().map(|_| ())
        })
        .await;
        RedisServer { addr, _child: child }
    }

    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

/// `n` one-time jobs on `sink`'s `path`, all due at `at`, created through
/// the batch endpoint; their ids.
pub async fn herd_on(stack: &Stack, sink: &Sink, path: &str, n: usize, at: DateTime<Utc>) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let jobs: Vec<Value> = chunk
            .iter()
            .map(|i| {
                json!({
                    "name": format!("{path}-{i}"),
                    "schedule": { "kind": "once", "at": domain::execution::format_instant(at) },
                    "target": http_target(&sink.url(path)),
                })
            })
            .collect();
        let r = stack.http.post(format!("{}/v1/jobs/batch", stack.api)).json(&json!({ "jobs": jobs })).send().await;
        let body: Value = r.unwrap().json().await.unwrap();
        assert_eq!(body["created"], chunk.len(), "batch create: {body}");
        let items = body["items"].as_array().unwrap();
        ids.extend(items.iter().map(|item| item["job"]["id"].as_str().unwrap().to_owned()));
    }
    ids
}

/// Waits until every slot of `jobs` (ids) has a `succeeded` row; their execution ids.
pub async fn all_succeeded(stack: &Stack, jobs: impl Iterator<Item = &String>) -> std::collections::BTreeSet<String> {
    let client = stack.pg.get().await.unwrap();
    let ids: Vec<uuid::Uuid> = jobs.map(|id| id.parse().unwrap()).collect();
    testing::wait_for("every row succeeded", Duration::from_secs(30), || async {
        let rows = client
            .query("SELECT execution_id FROM scheduled_jobs WHERE job_id = ANY($1) AND status = 'succeeded'", &[&ids])
            .await
            .unwrap();
        (rows.len() == ids.len()).then(|| rows.iter().map(|r| r.get(0)).collect())
    })
    .await
}

/// The interval of [`create_ticking_jobs`].
pub const TICK_MS: i64 = 1000;

/// `n` jobs firing every [`TICK_MS`] from `start`, delivered to `sink` on `/tick`.
pub async fn create_ticking_jobs(stack: &Stack, sink: &Sink, n: usize, start: DateTime<Utc>) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let job = stack
            .create_job(json!({
                "name": format!("job-{i}"),
                "schedule": { "kind": "interval", "every_ms": TICK_MS, "start_at": domain::execution::format_instant(start) },
                "target": http_target(&sink.url("tick")),
            }))
            .await;
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// Waits until every slot of ticking `jobs` from `start` to `window_end`
/// arrived at `sink`, asserts that each arrived exactly once, and returns
/// those deliveries.
pub async fn assert_ticks_delivered_once(
    sink: &Sink,
    jobs: &[String],
    start: DateTime<Utc>,
    window_end: DateTime<Utc>,
) -> Vec<Received> {
    let expected = expected_executions(jobs, start, TICK_MS, window_end);
    // A slot whose lock a dead node held is taken over after the verify delay.
    testing::wait_for(&format!("all {} expected executions", expected.len()), Duration::from_secs(60), || async {
        let got: std::collections::BTreeSet<String> = sink.received().into_iter().map(|r| r.execution_id).collect();
        expected.is_subset(&got).then_some(())
    })
    .await;
    let in_window: Vec<_> = sink.received().into_iter().filter(|r| expected.contains(&r.execution_id)).collect();
    assert_exactly_once(&in_window, &expected);
    in_window
}

/// Every slot of `jobs` (interval `every_ms` from `start`) up to `until`,
/// as execution ids.
pub fn expected_executions(
    jobs: &[String],
    start: DateTime<Utc>,
    every_ms: i64,
    until: DateTime<Utc>,
) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for id in jobs {
        let mut t = start;
        while t <= until {
            out.insert(domain::execution::execution_id(id.parse().unwrap(), t));
            t += chrono::TimeDelta::milliseconds(every_ms);
        }
    }
    out
}

/// Checks that every expected execution arrived exactly once; panics with
/// the missing and duplicated ids otherwise.
pub fn assert_exactly_once(received: &[Received], expected: &std::collections::BTreeSet<String>) {
    let mut counts: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for r in received {
        *counts.entry(r.execution_id.as_str()).or_default() += 1;
    }
    let missing: Vec<&String> = expected.iter().filter(|e| !counts.contains_key(e.as_str())).collect();
    let duplicated: Vec<(&&str, &usize)> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        missing.is_empty() && duplicated.is_empty(),
        "{} of {} expected executions missing (first: {:?}); {} duplicated (first: {:?})",
        missing.len(),
        expected.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        duplicated.len(),
        duplicated.iter().take(5).collect::<Vec<_>>()
    );
}
