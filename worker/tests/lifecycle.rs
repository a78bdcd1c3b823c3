//! The worker's slot lifecycle on the real services, without a scheduler:
//! each test claims ledger rows and publishes their fire messages as a
//! scheduler would, runs the worker in-process (`worker::run`) and a
//! callback receiver on 127.0.0.1, and awaits the rows' outcomes. Each test
//! has its own database and cluster name (queues).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::any;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use domain::execution::format_instant;
use domain::message::FireMessage;
use domain::slot::Trigger;
use store::ledger::claim::{self, Slot};
use testing::{TestDb, unique_cluster, wait_for};
use worker::WorkerConfig;

const WAIT: Duration = Duration::from_secs(30);

/// What the receiver got: (execution id, attempt), in order.
#[derive(Clone, Default)]
struct Received {
    calls: Arc<Mutex<Vec<(String, u32)>>>,
    /// Answer this status instead of 200 to the first N requests.
    fail_first: Arc<Mutex<(usize, u16)>>,
}

async fn receive(State(r): State<Received>, headers: HeaderMap) -> StatusCode {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    r.calls
        .lock()
        .unwrap()
        .push((header("x-cronshard-execution-id"), header("x-cronshard-attempt").parse().unwrap_or(0)));
    let mut fail = r.fail_first.lock().unwrap();
    if fail.0 > 0 {
        fail.0 -= 1;
        return StatusCode::from_u16(fail.1).unwrap();
    }
    StatusCode::OK
}

/// A worker on its own database and queues, with a receiver on loopback.
struct Bench {
    _db: TestDb,
    pg: deadpool_postgres::Pool,
    cluster: String,
    received: Received,
    url: String,
    publisher: broker::publisher::Publisher,
    token: CancellationToken,
    worker: tokio::task::JoinHandle<()>,
}

impl Bench {
    async fn start(label: &str, configure: impl FnOnce(&mut WorkerConfig)) -> Bench {
        let db = TestDb::new().await.expect("test database");
        let pg = store::db::pool(&db.url, 4).unwrap();
        let cluster = unique_cluster(label);
        let received = Received::default();
        let app = Router::new().route("/{*path}", any(receive)).with_state(received.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/callback", listener.local_addr().unwrap());
        let token = CancellationToken::new();
        let stop = token.clone();
        tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(async move { stop.cancelled().await }).await.unwrap()
        });
        let mut config = WorkerConfig {
            worker_id: format!("{label}-worker"),
            cluster: cluster.clone(),
            amqp_url: testing::amqp_url(),
            queue_type: Default::default(),
            prefetch: 100,
            max_in_flight: 16,
            max_held_bytes: worker::defaults::MAX_HELD_MB << 20,
            destinations: Default::default(),
            retry_defaults: domain::job::RetryPolicy {
                max_retries: 3,
                base_delay_ms: 200,
                multiplier: 2.0,
                max_delay_ms: 1000,
                jitter: domain::job::Jitter::default(),
            },
            allow_cidrs: vec!["127.0.0.0/8".parse().unwrap()],
            misfire_threshold: Duration::from_secs(5),
            aws: None,
            clock: Default::default(),
            outcome_retry_for: worker::defaults::OUTCOME_RETRY_FOR,
            keyring: testing::test_keyring(),
            signing_keys_fresh_for: worker::deliver::signing::ACTIVE_KEYS_FRESH_FOR,
        };
        configure(&mut config);
        let (worker_pg, worker_token) = (pg.clone(), token.clone());
        let worker = tokio::spawn(async move { worker::run(config, worker_pg, worker_token).await.unwrap() });
        let topology = broker::amqp::Topology::new(&cluster);
        let publisher = broker::publisher::Publisher::new(testing::amqp_url(), label.into(), topology);
        Bench { _db: db, pg, cluster, received, url, publisher, token, worker }
    }

    /// A job of `spec` (its target is the receiver), as the API stores it.
    async fn job(&self, name: &str, spec: Value) -> (Uuid, i64) {
        let mut spec = spec;
        spec["name"] = json!(name);
        spec["target"] = json!({ "kind": "http", "url": self.url, "method": "POST", "timeout_ms": 2000 });
        let spec: Value = serde_json::to_value(serde_json::from_value::<domain::job::JobSpec>(spec).unwrap()).unwrap();
        let id = Uuid::now_v7();
        let job = store::jobs::NewJob {
            id,
            key: None,
            name,
            spec: &spec,
            paused: false,
            namespace: "default",
            peak_fires_per_second: 0.0,
        };
        let client = self.pg.get().await.unwrap();
        let audit = store::audit::Context {
            author: store::jobs::Author { name: "test", token_id: None },
            request_id: "test",
            reason: None,
        };
        let stored = store::jobs::create_unlimited(&client, &job, &audit).await.unwrap().expect("created");
        // In force for an hour already, so its slots due before now (late
        // ones) are its own.
        client
            .execute("UPDATE job_changes SET valid_from = valid_from - interval '1 hour' WHERE job_id = $1", &[&id])
            .await
            .unwrap();
        (stored.id, stored.version)
    }

    /// Claims the job's slot at `at` as a scheduler would and publishes its
    /// fire message.
    async fn fire(&mut self, (job_id, version): (Uuid, i64), at: DateTime<Utc>) -> FireMessage {
        let slot = Slot { job_id, scheduled_at: at, job_version: version, trigger: Trigger::Schedule, max_runs: None };
        let mut client = self.pg.get().await.unwrap();
        let mut claimed = claim::claim(&mut client, "test-node", &[slot]).await.unwrap();
        assert_eq!(claimed.len(), 1, "claimed");
        let (message, attempt) = claimed.remove(0);
        self.publisher.publish_attempts(&[(&message, attempt)]).await.unwrap();
        message
    }

    /// The slot's row once it is no longer `pending` or `running`:
    /// (status, attempts, reason, history).
    async fn settled_row(&self, m: &FireMessage) -> (String, i32, Option<String>, Value) {
        self.row_where(m, |status, _| !["pending", "running"].contains(&status)).await
    }

    async fn row_where(
        &self,
        m: &FireMessage,
        until: impl Fn(&str, &Value) -> bool,
    ) -> (String, i32, Option<String>, Value) {
        wait_for(&format!("row of {}", m.execution_id), WAIT, || async {
            let client = self.pg.get().await.ok()?;
            let row = client
                .query_one(
                    "SELECT status, attempts, reason, history FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2",
                    &[&m.job_id, &m.scheduled_at],
                )
                .await
                .ok()?;
            let row: (String, i32, Option<String>, Value) = (row.get(0), row.get(1), row.get(2), row.get(3));
            until(&row.0, &row.3).then_some(row)
        })
        .await
    }

    fn calls_of(&self, m: &FireMessage) -> Vec<u32> {
        attempts_received(&self.received, m)
    }

    /// Stops the worker and checks that it acked every message it took: a
    /// message it requeued, or held unacked, would be back in its queue.
    async fn stop(self) {
        self.token.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(10), self.worker).await;
        let topology = broker::amqp::Topology::new(&self.cluster);
        let connection = broker::amqp::connect(&testing::amqp_url(), "test").await.unwrap();
        let ready = topology.ready_messages(&connection).await.unwrap();
        let _ = topology.delete_at(&testing::amqp_url()).await;
        assert_eq!(ready, 0, "every message acked");
    }
}

/// The attempts the receiver got of `m`, once the bench is stopped.
fn attempts_received(received: &Received, m: &FireMessage) -> Vec<u32> {
    received.calls.lock().unwrap().iter().filter(|(id, _)| *id == m.execution_id).map(|(_, a)| *a).collect()
}

fn once(at: DateTime<Utc>) -> Value {
    json!({ "schedule": { "kind": "once", "at": format_instant(at) } })
}

fn history_events(history: &Value) -> Vec<String> {
    history.as_array().into_iter().flatten().filter_map(|e| e["event"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn an_on_time_slot_is_delivered_once_at_its_due_instant() {
    let mut bench = Bench::start("wlc-ontime", |_| {}).await;
    let bench_calls = bench.received.clone();
    // Due shortly: the worker arms the row ahead and delivers at the instant.
    let due = domain::execution::truncate_ms(Utc::now() + TimeDelta::milliseconds(1500));
    let job = bench.job("on-time", once(due)).await;
    let m = bench.fire(job, due).await;
    let (status, attempts, _, history) = bench.settled_row(&m).await;
    assert_eq!((status.as_str(), attempts), ("succeeded", 1), "{history}");
    assert_eq!(bench.calls_of(&m), vec![1], "delivered once");
    assert_eq!(history_events(&history).iter().filter(|e| *e == "attempt").count(), 1, "{history}");
    // Never before its due instant.
    let attempt = history.as_array().unwrap().iter().find(|e| e["event"] == "attempt").unwrap();
    let started: DateTime<Utc> = attempt["started_at"].as_str().unwrap().parse().unwrap();
    assert!(started >= due, "started {started} before due {due}");
    bench.stop().await;
    assert_eq!(attempts_received(&bench_calls, &m), vec![1], "still once after the message settled");
}

#[tokio::test]
async fn a_failed_delivery_is_retried_until_it_succeeds_with_every_attempt_recorded() {
    let mut bench = Bench::start("wlc-retry", |_| {}).await;
    *bench.received.fail_first.lock().unwrap() = (2, 503);
    let due = domain::execution::truncate_ms(Utc::now());
    let job = bench.job("retried", once(due)).await;
    let m = bench.fire(job, due).await;
    let (status, attempts, _, history) = bench.row_where(&m, |status, _| status == "succeeded").await;
    assert_eq!((status.as_str(), attempts), ("succeeded", 3), "{history}");
    assert_eq!(bench.calls_of(&m), vec![1, 2, 3]);
    let outcomes: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "attempt")
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["retrying", "retrying", "succeeded"], "{history}");
    bench.stop().await;
}

#[tokio::test]
async fn a_slot_reaching_the_worker_past_the_misfire_threshold_is_skipped_under_skip() {
    let mut bench = Bench::start("wlc-late", |_| {}).await;
    // Due a minute ago, past the worker's 5 s threshold.
    let due = domain::execution::truncate_ms(Utc::now() - TimeDelta::minutes(1));
    let mut spec = once(due);
    spec["misfire"] = json!("skip");
    let job = bench.job("late-skip", spec).await;
    let m = bench.fire(job, due).await;
    assert_eq!(m.misfire, Some(domain::job::MisfirePolicy::Skip));
    let (status, attempts, reason, _) = bench.settled_row(&m).await;
    assert_eq!((status.as_str(), attempts), ("skipped", 0));
    let reason = reason.unwrap_or_default();
    assert!(reason.starts_with("misfire policy skip: reached a worker"), "{reason}");
    assert!(bench.calls_of(&m).is_empty(), "never delivered");

    // The same lateness under fire_all is delivered.
    let mut spec = once(due);
    spec["misfire"] = json!("fire_all");
    let job = bench.job("late-fire-all", spec).await;
    let m = bench.fire(job, due).await;
    let (status, _, _, _) = bench.settled_row(&m).await;
    assert_eq!(status, "succeeded");
    assert_eq!(bench.calls_of(&m), vec![1]);
    bench.stop().await;
}

#[tokio::test]
async fn a_slot_waits_for_its_destinations_circuit_and_is_delivered_once_it_closes() {
    let mut bench = Bench::start("wlc-wait", |config| {
        config.destinations = worker::DestinationArgs {
            circuit_min_calls: 2,
            circuit_failure_percent: 50,
            circuit_open_ms: 1000,
            circuit_open_max_ms: 2000,
            circuit_probes: 1,
            ..Default::default()
        }
        .config();
    })
    .await;
    *bench.received.fail_first.lock().unwrap() = (2, 503);
    let due = domain::execution::truncate_ms(Utc::now());
    // Two slots that fail for good open the host's circuit.
    let mut failing = Vec::new();
    for name in ["breaks-1", "breaks-2"] {
        let mut spec = once(due);
        spec["retry"] = json!({ "max_retries": 0, "base_delay_ms": 100, "multiplier": 2.0, "max_delay_ms": 100 });
        let job = bench.job(name, spec).await;
        failing.push(bench.fire(job, due).await);
    }
    for m in &failing {
        assert_eq!(bench.settled_row(m).await.0, "failed");
    }
    // The next slot to that host waits for the circuit, then goes as its probe.
    let job = bench.job("waits", once(due)).await;
    let m = bench.fire(job, due).await;
    let (status, attempts, _, history) = bench.row_where(&m, |status, _| status == "succeeded").await;
    assert_eq!((status.as_str(), attempts), ("succeeded", 1), "{history}");
    assert!(history_events(&history).contains(&"waiting".to_owned()), "the wait is on the row: {history}");
    assert_eq!(bench.calls_of(&m), vec![1]);
    bench.stop().await;
}

#[tokio::test]
async fn overlap_forbid_skips_a_slot_while_the_jobs_previous_execution_is_retrying() {
    let mut bench = Bench::start("wlc-overlap", |_| {}).await;
    // The first slot fails and retries in 1 s; the second, due meanwhile, is skipped.
    *bench.received.fail_first.lock().unwrap() = (1, 503);
    let first = domain::execution::truncate_ms(Utc::now());
    let spec = json!({
        "schedule": { "kind": "interval", "every_ms": 1000, "start_at": format_instant(first) },
        "overlap": "forbid",
        "retry": { "max_retries": 2, "base_delay_ms": 2000, "multiplier": 1.0, "max_delay_ms": 2000 },
    });
    let job = bench.job("forbid", spec).await;
    let older = bench.fire(job, first).await;
    bench.row_where(&older, |status, _| status == "retrying").await;
    let newer = bench.fire(job, first + TimeDelta::seconds(1)).await;
    let (status, _, reason, history) = bench.settled_row(&newer).await;
    assert_eq!(status, "skipped", "{history}");
    assert_eq!(reason.as_deref(), Some("overlap"));
    assert!(bench.calls_of(&newer).is_empty());
    // The older one goes on with its retry.
    assert_eq!(bench.row_where(&older, |status, _| status == "succeeded").await.1, 2);
    bench.stop().await;
}
