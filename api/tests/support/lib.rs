//! The shared harness of the API integration tests: the real server in-process
//! on the real Postgres and Redis (`TestApp`), and helpers to build requests and
//! check responses. Each test gets its own database (`TestDb`), its own cluster
//! name (Redis key prefix) and its own server on an ephemeral port.
#![allow(dead_code)] // each test binary (jobs, executions, service, idempotency) uses only part of it

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use testing::{TestDb, redis_url, unique_cluster};

/// A response, fully read.
pub struct Resp {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }
}

pub struct TestApp {
    base: String,
    pub http: reqwest::Client,
    pub cluster: String,
    redis: Vec<runtime::redis::Pool>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    // Last: dropped (database dropped) after the server is told to stop.
    db: TestDb,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// What to put into the server's state instead of the working services.
#[derive(Default)]
pub struct Options {
    pub tokens: Vec<String>,
    pub pg_url: Option<String>,
    pub redis_url: Option<String>,
    /// The server's header-read timeout, instead of its default.
    pub header_read_timeout: Option<std::time::Duration>,
    /// What job definitions may be (`MIN_INTERVAL_MS`, `CALLBACK_ALLOW_CIDRS`);
    /// the API's defaults unless given.
    pub job_limits: domain::job::Limits,
    /// The API's key-encryption keys (`SECRETS_KEK`); the test key unless given.
    pub keyring: Option<store::secrets::Keyring>,
}

impl TestApp {
    pub async fn start(label: &str) -> Self {
        Self::start_with(label, Options::default()).await
    }

    pub async fn start_with(label: &str, opts: Options) -> Self {
        let db = TestDb::new().await.expect("creating the test database");
        let cluster = unique_cluster(label);
        let redis = runtime::redis::pools(&[redis_url()]).expect("Redis pool");
        let pg = store::db::pool(opts.pg_url.as_deref().unwrap_or(&db.url), 4).expect("Postgres pool");
        let state = api::AppState {
            job_changes: store::notify::Announcer::start(pg.clone()),
            vault: store::secrets::Vault::new(opts.keyring.unwrap_or_else(testing::test_keyring)),
            pg,
            redis: match &opts.redis_url {
                Some(url) => runtime::redis::pools(std::slice::from_ref(url)).expect("Redis pool"),
                None => redis.clone(),
            },
            keys: runtime::redis::Keys::new(&cluster),
            cluster: cluster.clone(),
            tokens: Arc::new(opts.tokens),
            token_cache: Default::default(),
            publisher: api::AppState::publisher(&testing::amqp_url(), broker::amqp::Topology::new(&cluster)),
            retention: Default::default(),
            limits: Arc::new(opts.job_limits),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let mut limits = api::server::Limits::default();
        if let Some(timeout) = opts.header_read_timeout {
            limits.header_read_timeout = timeout;
        }
        tokio::spawn(api::server::serve(listener, api::router(state), limits, async move {
            let _ = rx.await;
        }));
        TestApp { base, http: reqwest::Client::new(), cluster, redis, shutdown: Some(tx), db }
    }

    /// The test database's URL (for the binaries a test runs).
    pub fn db_url(&self) -> &str {
        &self.db.url
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The server's address, for a raw TCP client.
    pub fn addr(&self) -> &str {
        self.base.trim_start_matches("http://")
    }

    pub async fn send(&self, rb: reqwest::RequestBuilder) -> Resp {
        let r = rb.send().await.expect("request failed");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.expect("reading the response body");
        Resp { status, headers, text }
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Resp {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    pub async fn post_empty(&self, path: &str) -> Resp {
        self.send(self.http.post(self.url(path))).await
    }

    pub async fn put_json(&self, path: &str, body: &Value, if_match: Option<&str>) -> Resp {
        let mut rb = self.http.put(self.url(path)).json(body);
        if let Some(v) = if_match {
            rb = rb.header("if-match", v);
        }
        self.send(rb).await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.send(self.http.delete(self.url(path))).await
    }

    /// POST /v1/jobs, expecting 201; returns the job.
    pub async fn create_job(&self, body: &Value) -> Value {
        let r = self.post_json("/v1/jobs", body).await;
        assert_eq!(r.status, 201, "creating {body}: {}", r.text);
        r.json()
    }

    pub async fn create_id(&self, body: &Value) -> String {
        self.create_job(body).await["id"].as_str().expect("id").to_owned()
    }

    /// GET /v1/jobs/{id}, expecting 200.
    pub async fn job(&self, id: &str) -> Value {
        let r = self.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(r.status, 200, "GET job {id}: {}", r.text);
        r.json()
    }

    pub async fn sql(&self) -> tokio_postgres::Client {
        store::db::connect(&self.db.url).await.expect("connecting to the test database")
    }

    /// A connection LISTENing where the schedulers do (it listens while the
    /// client is kept), and each notification's payload in the order
    /// Postgres sends them.
    pub async fn job_change_notifications(
        &self,
    ) -> (tokio_postgres::Client, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (client, mut connection) =
            tokio_postgres::connect(&self.db.url, tokio_postgres::NoTls).await.expect("LISTEN connection");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                if let tokio_postgres::AsyncMessage::Notification(n) = message
                    && tx.send(n.payload().to_owned()).is_err()
                {
                    break;
                }
            }
        });
        client.batch_execute(&format!("LISTEN {}", store::notify::CHANNEL)).await.expect("LISTEN");
        (client, rx)
    }

    /// Rows in `jobs`, tombstones included.
    pub async fn job_rows(&self) -> i64 {
        self.sql().await.query_one("SELECT count(*) FROM jobs", &[]).await.unwrap().get(0)
    }

    pub async fn redis_cmd(&self, cmd: &redis::Cmd) {
        let mut conn = self.redis[0].get().await.expect("Redis connection");
        cmd.query_async::<()>(&mut conn).await.expect("Redis command");
    }
}

/// Percent-encodes a query parameter value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

pub fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub fn parse_ts(v: &Value) -> DateTime<Utc> {
    let s = v.as_str().unwrap_or_else(|| panic!("expected a timestamp, got {v}"));
    DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}")).to_utc()
}

/// Now, cut to whole milliseconds (the API's precision).
pub fn now_ms() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap()
}

/// Asserts an `application/problem+json` error with this status; returns it.
#[track_caller]
pub fn assert_problem(r: &Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "expected {status}, body: {:?}", r.text);
    assert_eq!(r.header("content-type"), Some("application/problem+json"), "body: {:?}", r.text);
    let v = r.json();
    assert_eq!(v["status"], json!(status), "{v}");
    assert!(v["title"].as_str().is_some_and(|t| !t.is_empty()), "problem without a title: {v}");
    assert!(v["detail"].as_str().is_some_and(|t| !t.is_empty()), "problem without a detail: {v}");
    v
}

/// Asserts a 422 problem whose `errors` name exactly `fields`, each with a message.
#[track_caller]
pub fn assert_invalid(r: &Resp, fields: &[&str]) {
    let v = assert_problem(r, 422);
    let errors = v["errors"].as_array().unwrap_or_else(|| panic!("no errors array: {v}"));
    let got: Vec<&str> = errors.iter().map(|e| e["field"].as_str().unwrap_or("<none>")).collect();
    assert_eq!(got, fields, "{v}");
    for e in errors {
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "error without a message: {e}");
    }
}

pub fn http_target() -> Value {
    json!({ "kind": "http", "url": "https://hooks.example.com/run", "method": "POST", "timeout_ms": 5000 })
}

pub fn cron_job(name: &str, expr: &str, timezone: &str) -> Value {
    json!({
        "name": name,
        "schedule": { "kind": "cron", "expr": expr, "timezone": timezone },
        "target": http_target(),
    })
}

/// A typical job: a daily cron report in a European time zone, delivered by HTTP.
pub fn example_job() -> Value {
    json!({
      "name": "daily-sales-report",
      "schedule": { "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin" },
      "target": {
        "kind": "http", "url": "https://reports.internal/run", "method": "POST",
        "headers": { "content-type": "application/json" }, "body": "{\"report\":25}",
        "timeout_ms": 10000
      },
      "retry": { "max_retries": 3, "base_delay_ms": 30000, "multiplier": 2.0 },
      "misfire": "fire_once",
      "paused": false
    })
}

pub fn ids_of(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {page}"))
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}
