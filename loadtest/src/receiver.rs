//! The one HTTP callback receiver of every scenario (and of the `sink`
//! subcommand). Each request to `/hook` or `/hook/...` is answered `200` and
//! recorded with its `X-Cronshard-*` headers, its path and the instant it
//! arrived; `GET /deliveries` returns the records as JSON. A receiver made
//! with [`Receiver::loopback_failing`] answers `500` instead to paths
//! containing `/fail/` (the `churn` scenario's failing jobs). One made with
//! [`Receiver::loopback_chaos`] answers `500` to the first attempt of a
//! fixed share of execution ids (chosen by a hash of the id, so a redelivered
//! first attempt gets the same answer) and can be taken down: it then
//! answers `503` to everything until it is back. The status each request
//! got is recorded beside it.
//!
//! Lateness is `received_at − scheduled_at`, both read on this machine's
//! clock: the receiver runs on the same host as the stack.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::{any, get};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// One request as it arrived.
#[derive(Clone, Debug, Serialize)]
pub struct Delivery {
    /// `X-Cronshard-Execution-Id`: `{job_id}@{scheduled_at}`.
    pub execution_id: Box<str>,
    /// `X-Cronshard-Scheduled-At`; `None` when missing or malformed.
    pub scheduled_at: Option<DateTime<Utc>>,
    /// `X-Cronshard-Attempt`; 0 when missing.
    pub attempt: u32,
    pub received_at: DateTime<Utc>,
}

impl Delivery {
    /// Received − scheduled, in milliseconds.
    pub fn lateness_ms(&self) -> Option<i64> {
        self.scheduled_at.map(|s| (self.received_at - s).num_milliseconds())
    }
}

/// What arrived, in arrival order. Paths and the status answered are kept
/// beside the deliveries (same index) so `Delivery` keeps the fields other
/// scenarios build it from.
#[derive(Default)]
struct Records {
    deliveries: Vec<Delivery>,
    paths: Vec<Box<str>>,
    statuses: Vec<u16>,
    /// Deliveries that carried a `webhook-signature` (signed deliveries).
    signed: usize,
}

#[derive(Clone)]
struct Shared {
    records: Arc<Mutex<Records>>,
    /// Print each delivery as a JSON line on stdout (the `sink` subcommand).
    log: bool,
    /// Answer `500` to paths containing `/fail/`.
    fail_paths: bool,
    /// Answer `500` to the first attempt of this many execution ids in 10,000.
    fail_first_per_10k: u64,
    /// Answer `503` to everything (the receiver is "down").
    down: Arc<AtomicBool>,
}

/// FNV-1a: a hash of the execution id that is the same in every run.
fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// A running receiver; clones share the same records.
#[derive(Clone)]
pub struct Receiver {
    shared: Shared,
    addr: SocketAddr,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> &'a str {
    headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default()
}

async fn hook(State(shared): State<Shared>, uri: Uri, headers: HeaderMap) -> StatusCode {
    let received_at = Utc::now();
    let raw_scheduled = header(&headers, "x-cronshard-scheduled-at");
    let d = Delivery {
        execution_id: header(&headers, "x-cronshard-execution-id").into(),
        scheduled_at: DateTime::parse_from_rfc3339(raw_scheduled).ok().map(|t| t.with_timezone(&Utc)),
        attempt: header(&headers, "x-cronshard-attempt").parse().unwrap_or(0),
        received_at,
    };
    if shared.log {
        let line = serde_json::json!({
            "execution_id": d.execution_id, "scheduled_at": raw_scheduled, "attempt": d.attempt,
            "received_at": d.received_at, "lateness_ms": d.lateness_ms().unwrap_or_default(), "path": uri.path(),
        });
        println!("{line}");
    }
    let status = if shared.down.load(Ordering::Relaxed) {
        StatusCode::SERVICE_UNAVAILABLE
    } else if (shared.fail_paths && uri.path().contains("/fail/"))
        || (d.attempt == 1 && stable_hash(&d.execution_id) % 10_000 < shared.fail_first_per_10k)
    {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::OK
    };
    let mut records = shared.records.lock().expect("receiver lock");
    records.deliveries.push(d);
    records.paths.push(uri.path().into());
    records.statuses.push(status.as_u16());
    records.signed += usize::from(headers.contains_key("webhook-signature"));
    drop(records);
    status
}

async fn deliveries(State(shared): State<Shared>) -> Json<Vec<Delivery>> {
    Json(shared.records.lock().expect("receiver lock").deliveries.clone())
}

impl Receiver {
    /// Binds `listen` (use `127.0.0.1:0` for a free loopback port) and serves
    /// until `shutdown` completes; the returned handle ends with the server.
    pub async fn start(
        listen: SocketAddr,
        log: bool,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<(Self, tokio::task::JoinHandle<std::io::Result<()>>)> {
        Self::start_with(listen, log, false, 0.0, shutdown).await
    }

    async fn start_with(
        listen: SocketAddr,
        log: bool,
        fail_paths: bool,
        fail_first_share: f64,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<(Self, tokio::task::JoinHandle<std::io::Result<()>>)> {
        let shared = Shared {
            records: Arc::default(),
            log,
            fail_paths,
            fail_first_per_10k: (fail_first_share.clamp(0.0, 1.0) * 10_000.0).round() as u64,
            down: Arc::default(),
        };
        let app = Router::new()
            .route("/hook", any(hook))
            .route("/hook/{*rest}", any(hook))
            .route("/deliveries", get(deliveries))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(shutdown).await });
        Ok((Self { shared, addr }, server))
    }

    /// A receiver on a free loopback port, serving until the process ends.
    pub async fn loopback() -> anyhow::Result<Self> {
        let (receiver, _server) = Self::start(([127, 0, 0, 1], 0).into(), false, std::future::pending()).await?;
        Ok(receiver)
    }

    /// Like [`Self::loopback`], but paths containing `/fail/` are answered
    /// `500`, so jobs aimed at them fail.
    pub async fn loopback_failing() -> anyhow::Result<Self> {
        let (receiver, _server) =
            Self::start_with(([127, 0, 0, 1], 0).into(), false, true, 0.0, std::future::pending()).await?;
        Ok(receiver)
    }

    /// A receiver on a free loopback port that answers `500` to the first
    /// attempt of `fail_first_share` of the execution ids (so the product's
    /// retries run) and can be taken down with [`Self::set_down`].
    pub async fn loopback_chaos(fail_first_share: f64) -> anyhow::Result<Self> {
        let (receiver, _server) =
            Self::start_with(([127, 0, 0, 1], 0).into(), false, false, fail_first_share, std::future::pending())
                .await?;
        Ok(receiver)
    }

    /// Down: every request is answered `503` until set back.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::Relaxed);
    }

    /// The callback URL to put in a job's target.
    pub fn hook_url(&self) -> String {
        format!("http://{}/hook", self.addr)
    }

    pub fn count(&self) -> usize {
        self.shared.records.lock().expect("receiver lock").deliveries.len()
    }

    /// Deliveries so far that carried a signature.
    pub fn signed(&self) -> usize {
        self.shared.records.lock().expect("receiver lock").signed
    }

    /// A copy of every delivery so far, in arrival order.
    pub fn snapshot(&self) -> Vec<Delivery> {
        self.shared.records.lock().expect("receiver lock").deliveries.clone()
    }

    /// Every delivery so far with the status it was answered, in arrival order.
    pub fn snapshot_with_status(&self) -> Vec<(Delivery, u16)> {
        let records = self.shared.records.lock().expect("receiver lock");
        records.deliveries.iter().cloned().zip(records.statuses.iter().copied()).collect()
    }

    /// Every delivery so far with its request path, in arrival order.
    pub fn snapshot_with_paths(&self) -> Vec<(Delivery, Box<str>)> {
        let records = self.shared.records.lock().expect("receiver lock");
        records.deliveries.iter().cloned().zip(records.paths.iter().cloned()).collect()
    }
}
