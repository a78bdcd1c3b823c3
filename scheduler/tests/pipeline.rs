//! The pipeline in one process on the real services: API → Postgres →
//! scheduler node → Redis lock → ledger claim → RabbitMQ → worker → HTTP
//! callback → ledger. Each test has its own database and cluster name.

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;

use domain::execution::{format_instant, truncate_ms};
use support::{Sink, Stack, http_target};
use testing::wait_for;

fn at(t: DateTime<Utc>) -> String {
    format_instant(truncate_ms(t))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interval_job_is_delivered_on_time_with_headers_and_recorded() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("pipeline").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    // The node's maintenance task creates the day partitions at start-up.
    let today = store::ledger::partitions::partition_name(Utc::now().date_naive());
    wait_for("the node to create today's ledger partition", Duration::from_secs(10), || async {
        let client = stack.pg.get().await.ok()?;
        client.query_opt("SELECT 1 FROM pg_class WHERE relname = $1", &[&today]).await.ok()?
    })
    .await;

    let start = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let job = stack
        .create_job(json!({
            "name": "every-500ms",
            "schedule": { "kind": "interval", "every_ms": 500, "start_at": at(start) },
            "target": http_target(&sink.url("tick")),
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["next_fire_at"], json!(at(start)));

    let got = wait_for("4 deliveries", Duration::from_secs(15), || async {
        let r = sink.received_on("tick");
        (r.len() >= 4).then_some(r)
    })
    .await;
    for (k, r) in got.iter().take(4).enumerate() {
        let slot = start + TimeDelta::milliseconds(500 * k as i64);
        assert_eq!(r.execution_id, format!("{id}@{}", at(slot)));
        assert_eq!(r.scheduled_at, at(slot));
        assert_eq!(r.attempt, 1);
        // Pre-armed: never early by our clock, and well inside a second late.
        let lateness = r.received_at - slot;
        assert!(lateness >= TimeDelta::zero(), "delivered {lateness} early");
        assert!(lateness < TimeDelta::seconds(1), "delivered {lateness} late");
    }
    let row = wait_for("the first slot to be recorded as succeeded", Duration::from_secs(5), || async {
        stack.ledger(&id, start).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["attempts"], 1);
    assert_eq!(row["http_status"], 200);
    assert_eq!(row["scheduler_node"], "node-a");
    assert_eq!(row["worker_id"], "worker-a");
    let client = stack.pg.get().await.unwrap();
    let partition: String = client
        .query_one(
            "SELECT tableoid::regclass::text FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2",
            &[&id.parse::<uuid::Uuid>().unwrap(), &start],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(partition, store::ledger::partitions::partition_name(start.date_naive()));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_or_pausing_a_job_cancels_its_prearmed_slot() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("cancel").await;
    let mut cfg = stack.node_config("node-a");
    cfg.lookahead = Duration::from_secs(10);
    stack.start_node(cfg);
    stack.start_worker(stack.worker_config("worker-a"));

    // Room for a loaded machine (tests run in parallel): the slots must be
    // armed well before they are due.
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(6));
    let once = |name: &str| json!({ "name": name, "schedule": { "kind": "once", "at": at(due) }, "target": http_target(&sink.url(name)) });
    let deleted = stack.create_job(once("deleted")).await["id"].as_str().unwrap().to_owned();
    let paused = stack.create_job(once("paused")).await["id"].as_str().unwrap().to_owned();
    let kept = stack.create_job(once("kept")).await["id"].as_str().unwrap().to_owned();

    // Within the lookahead the slots are claimed and published ahead of time,
    // and the worker arms each row (takes it as `running`) on arrival; the
    // cancellation below must still win, checked at the due instant.
    for id in [&deleted, &paused, &kept] {
        wait_for("the slot to be armed by the worker", Duration::from_secs(5), || async {
            stack.ledger(id, due).await.filter(|r| r["status"] == "running" && r["worker_id"] == "worker-a")
        })
        .await;
    }
    assert!(Utc::now() < due, "the test machine is too slow to observe pre-arming");
    stack.delete_job(&deleted).await;
    stack.post(&format!("/v1/jobs/{paused}/pause")).await;

    wait_for("the kept job to be delivered", Duration::from_secs(10), || async {
        (!sink.received_on("kept").is_empty()).then_some(())
    })
    .await;
    // At the due instant the worker finds the job deleted or paused and
    // records the skip instead of delivering.
    for (id, reason) in [(&deleted, "deleted"), (&paused, "paused")] {
        let row = wait_for("the cancelled slot to be recorded", Duration::from_secs(5), || async {
            stack.ledger(id, due).await.filter(|r| r["status"] != "running")
        })
        .await;
        assert_eq!(row["status"], "skipped", "{row}");
        assert_eq!(row["reason"], reason, "{row}");
        assert!(
            row["history"].as_array().unwrap().iter().any(|e| e["event"] == "skipped" && e["reason"] == reason),
            "{row}"
        );
    }
    assert!(sink.received_on("deleted").is_empty());
    assert!(sink.received_on("paused").is_empty());
    stack.stop().await;
}

/// The check at the due instant of rows a worker armed ahead. With a fresh
/// heartbeat nobody can have taken a row over, so only the slots of jobs
/// changed since the arming are looked up (and a deleted job's slot is
/// cancelled); with a stale one every row is looked up, and a row taken
/// over is not this worker's to deliver.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn armed_rows_are_checked_by_their_jobs_changes_while_the_heartbeat_is_fresh_and_row_by_row_otherwise() {
    use store::ledger::delivery::{self as ledger, Start, StartRequest, VerifyRequest};

    let sink = Sink::start().await;
    let mut stack = Stack::start("verify").await;
    let mut cfg = stack.node_config("node-a");
    cfg.lookahead = Duration::from_secs(30);
    stack.start_node(cfg);
    // No worker: the slots are claimed and published, and this test arms them.
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(20));
    let mut ids = Vec::new();
    for name in ["kept", "taken", "deleted"] {
        let job = stack
            .create_job(json!({ "name": name, "schedule": { "kind": "once", "at": at(due) }, "target": http_target(&sink.url(name)) }))
            .await;
        ids.push(job["id"].as_str().unwrap().parse::<uuid::Uuid>().unwrap());
    }
    let client = stack.pg.get().await.unwrap();
    let mut requests = Vec::new();
    for id in &ids {
        let fire_id: uuid::Uuid = wait_for("the slot to be claimed", Duration::from_secs(10), || async {
            client
                .query_opt("SELECT fire_id FROM scheduled_jobs WHERE job_id = $1 AND status = 'pending'", &[id])
                .await
                .unwrap()
                .map(|row| row.get(0))
        })
        .await;
        requests.push(StartRequest {
            job_id: *id,
            scheduled_at: due,
            fire_id,
            attempt: 1,
            redelivered: false,
            due_at: due,
        });
    }
    // Transactions of other tests share the server's xids: an older one
    // still open would make the jobs look changed after the arming.
    wait_for("transactions older than the jobs to end", Duration::from_secs(10), || async {
        client
            .query_one(
                "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint > max(change_xid) FROM jobs WHERE id = ANY($1)",
                &[&ids],
            )
            .await
            .unwrap()
            .get::<_, bool>(0)
            .then_some(())
    })
    .await;
    let armed = ledger::start_batch(&stack.pg, "worker-t", requests.clone()).await.unwrap();
    assert!(armed.iter().all(|(start, _)| *start == Start::Go), "{armed:?}");
    let verify = |fresh: bool| {
        let batch: Vec<VerifyRequest> = requests
            .iter()
            .zip(&armed)
            .map(|(row, (_, jobs_seen))| VerifyRequest { row: row.clone(), jobs_seen: *jobs_seen })
            .collect();
        let pool = stack.pg.clone();
        async move { ledger::verify_batch(&pool, "worker-t", fresh, batch).await.unwrap() }
    };
    assert_eq!(verify(true).await, [Start::Go, Start::Go, Start::Go], "nothing changed since the arming");

    // A takeover (possible only once this worker is presumed gone) and a
    // delete. The fresh heartbeat rules the takeover out, so only the
    // deleted job's row is looked up; without it, every row is.
    client.execute("UPDATE scheduled_jobs SET worker_id = 'worker-u' WHERE job_id = $1", &[&ids[1]]).await.unwrap();
    stack.delete_job(&ids[2].to_string()).await;
    assert_eq!(verify(true).await, [Start::Go, Start::Go, Start::Cancelled("deleted")]);
    let row = stack.ledger(&ids[2].to_string(), due).await.unwrap();
    assert_eq!((row["status"].as_str(), row["reason"].as_str()), (Some("skipped"), Some("deleted")), "{row}");
    assert_eq!(verify(false).await, [Start::Go, Start::Duplicate, Start::Duplicate]);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_callback_failing_three_times_is_retried_after_1_2_and_4_seconds_then_succeeds() {
    let sink = Sink::start().await;
    sink.fail_first(3, 503);
    let mut stack = Stack::start("retry").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let job = stack
        .create_job(json!({
            "name": "flaky",
            "schedule": { "kind": "once", "at": at(due) },
            "target": http_target(&sink.url("flaky")),
            // Without jitter, to see the backoff itself (jitter: docs/schedules.md).
            "retry": { "max_retries": 3, "base_delay_ms": 1000, "multiplier": 2.0, "jitter": "none" },
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    let got = wait_for("four attempts", Duration::from_secs(20), || async {
        let r = sink.received_on("flaky");
        (r.len() >= 4).then_some(r)
    })
    .await;
    assert_eq!(got.iter().map(|r| r.attempt).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(got.iter().all(|r| r.execution_id == got[0].execution_id));
    // Retry n waits base × 2^(n−1) after the failure: 1 s, 2 s, 4 s (± 0.5 s).
    for (k, expected_ms) in [(1, 1000), (2, 2000), (3, 4000)] {
        let gap = (got[k].received_at - got[k - 1].received_at).num_milliseconds();
        assert!(
            (expected_ms - 500..=expected_ms + 500).contains(&gap),
            "retry {k} came after {gap} ms, not {expected_ms}"
        );
    }
    let row = wait_for("success recorded", Duration::from_secs(5), || async {
        stack.ledger(&id, due).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["attempts"], 4);
    assert_eq!(row["execution_id"], got[0].execution_id.as_str());
    // Every attempt is in the row's history, not only the last one.
    let attempts: Vec<(i64, String, i64, String)> = row["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "attempt")
        .map(|e| {
            assert!(e["started_at"].as_str().unwrap() <= e["finished_at"].as_str().unwrap(), "{e}");
            let text = |k: &str| e[k].as_str().unwrap().to_owned();
            (e["attempt"].as_i64().unwrap(), text("outcome"), e["http_status"].as_i64().unwrap(), text("worker_id"))
        })
        .collect();
    let expected: Vec<(i64, String, i64, String)> =
        [(1, "retrying", 503), (2, "retrying", 503), (3, "retrying", 503), (4, "succeeded", 200)]
            .into_iter()
            .map(|(n, outcome, status)| (n, outcome.to_owned(), status, "worker-a".to_owned()))
            .collect();
    assert_eq!(attempts, expected, "{}", row["history"]);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_due_in_one_instant_is_delivered_once_each_through_batched_ledger_writes() {
    const JOBS: usize = 400;
    let sink = Sink::start().await;
    let mut stack = Stack::start("burst").await;
    let mut cfg = stack.node_config("node-a");
    cfg.lookahead = Duration::from_secs(5);
    stack.start_node(cfg);
    stack.start_worker(stack.worker_config("worker-a"));
    stack.start_worker(stack.worker_config("worker-b"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(6));
    let creates = (0..JOBS).map(|i| {
        stack.create_job(json!({
            "name": format!("burst-{i}"), "schedule": { "kind": "once", "at": at(due) },
            "target": http_target(&sink.url("burst")),
        }))
    });
    let ids: Vec<String> = futures::future::join_all(creates)
        .await
        .into_iter()
        .map(|job| job["id"].as_str().unwrap().to_owned())
        .collect();
    assert!(Utc::now() < due, "creating {JOBS} jobs took past their due time");
    let got = wait_for("every slot delivered", Duration::from_secs(30), || async {
        let r = sink.received_on("burst");
        (r.len() >= JOBS).then_some(r)
    })
    .await;
    let expected: std::collections::BTreeSet<String> = ids.iter().map(|id| format!("{id}@{}", at(due))).collect();
    support::assert_exactly_once(&got, &expected);
    assert!(got.iter().all(|r| r.received_at >= due), "a delivery came before its due instant");
    // Outcomes are recorded just after the deliveries, in a few statements.
    let client = stack.pg.get().await.unwrap();
    let summary = wait_for("every outcome recorded", Duration::from_secs(10), || async {
        let rows = client
            .query(
                "SELECT status, attempts, count(*) FROM scheduled_jobs WHERE scheduled_at = $1 GROUP BY 1, 2",
                &[&due],
            )
            .await
            .unwrap();
        let summary: Vec<(String, i32, i64)> = rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect();
        summary.iter().all(|(status, _, _)| status != "running" && status != "pending").then_some(summary)
    })
    .await;
    assert_eq!(summary, [("succeeded".to_owned(), 1, JOBS as i64)]);
    let workers: i64 = client
        .query_one("SELECT count(DISTINCT worker_id) FROM scheduled_jobs WHERE scheduled_at = $1", &[&due])
        .await
        .unwrap()
        .get(0);
    assert_eq!(workers, 2, "both workers should have taken part in the burst");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_execution_that_keeps_failing_ends_failed_and_a_replay_delivers_it_with_the_same_id() {
    let sink = Sink::start().await;
    sink.fail_first(usize::MAX, 500);
    let mut stack = Stack::start("replay").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let job = stack
        .create_job(json!({
            "name": "broken",
            "schedule": { "kind": "once", "at": at(due) },
            "target": http_target(&sink.url("broken")),
            "retry": { "max_retries": 2, "base_delay_ms": 200, "multiplier": 2.0 },
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    let row = wait_for("the execution to fail for good", Duration::from_secs(15), || async {
        stack.ledger(&id, due).await.filter(|r| r["status"] == "failed")
    })
    .await;
    assert_eq!(row["attempts"], 3, "1 attempt + 2 retries");
    assert_eq!(sink.received_on("broken").len(), 3);

    let failed: serde_json::Value = stack
        .http
        .get(format!("{}/v1/executions?status=failed", stack.api))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = failed["items"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{failed}");
    assert_eq!(listed[0]["job_id"], id.as_str());
    assert_eq!(listed[0]["error"], "HTTP 500 Internal Server Error");

    // The receiver heals; the operator replays the slot.
    sink.fail_first(0, 200);
    let replay = stack.post(&format!("/v1/executions/{id}/{}/replay", at(due))).await;
    assert_eq!(replay["status"], "pending");
    let row = wait_for("the replay to succeed", Duration::from_secs(10), || async {
        stack.ledger(&id, due).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["attempts"], 4, "the replay is recorded as the row's next attempt");
    let received = sink.received_on("broken");
    assert_eq!(received.len(), 4);
    assert!(received.iter().all(|r| r.execution_id == format!("{id}@{}", at(due))));
    assert_eq!(received[3].attempt, 4);

    // A second replay of a row that succeeded is refused.
    let again = stack.http.post(format!("{}/v1/executions/{id}/{}/replay", stack.api, at(due))).send().await.unwrap();
    assert_eq!(again.status(), 409);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_trigger_fires_now_under_its_own_execution_id() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("trigger").await;
    stack.start_worker(stack.worker_config("worker-a"));
    let id = nightly_job(&stack, &sink, "nightly").await.to_string();
    let triggered = stack.post(&format!("/v1/jobs/{id}/trigger")).await;
    let execution_id = triggered["execution_id"].as_str().unwrap().to_owned();
    assert!(execution_id.starts_with(&format!("{id}@")) && execution_id.ends_with("#manual"), "{execution_id}");
    assert_eq!(triggered["trigger"], "manual");
    let got = wait_for("the manual delivery", Duration::from_secs(10), || async {
        sink.received_on("nightly").into_iter().next()
    })
    .await;
    assert_eq!(got.execution_id, execution_id);
    assert_eq!(got.attempt, 1);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callbacks_to_loopback_are_refused_without_an_allow_list() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("ssrf").await;
    stack.start_node(stack.node_config("node-a"));
    let mut worker = stack.worker_config("worker-a");
    worker.allow_cidrs.clear();
    stack.start_worker(worker);
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(1));
    let job = stack
        .create_job(json!({ "name": "ssrf", "schedule": { "kind": "once", "at": at(due) }, "target": http_target(&sink.url("ssrf")) }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    // A host name that resolves to loopback is refused just the same.
    let by_name = stack
        .create_job(json!({
            "name": "ssrf-by-name",
            "schedule": { "kind": "once", "at": at(due) },
            "target": http_target(&format!("http://localhost:{}/ssrf", sink.addr.port())),
        }))
        .await;
    let by_name = by_name["id"].as_str().unwrap().to_owned();
    let row = wait_for("the refusal to be recorded", Duration::from_secs(10), || async {
        stack.ledger(&id, due).await.filter(|r| r["status"] == "failed")
    })
    .await;
    wait_for("the refusal by name to be recorded", Duration::from_secs(10), || async {
        stack.ledger(&by_name, due).await.filter(|r| r["status"] == "failed")
    })
    .await;
    let client = stack.pg.get().await.unwrap();
    let error: String = client
        .query_one("SELECT error FROM scheduled_jobs WHERE job_id = $1", &[&by_name.parse::<uuid::Uuid>().unwrap()])
        .await
        .unwrap()
        .get(0);
    assert!(error.contains("localhost resolves to") && error.contains("loopback"), "{error}");
    assert_eq!(row["attempts"], 1, "a refused address is not retried");
    let client = stack.pg.get().await.unwrap();
    let error: String = client
        .query_one("SELECT error FROM scheduled_jobs WHERE job_id = $1", &[&id.parse::<uuid::Uuid>().unwrap()])
        .await
        .unwrap()
        .get(0);
    assert!(error.contains("loopback") && error.contains("CALLBACK_ALLOW_CIDRS"), "{error}");
    assert!(sink.received().is_empty());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_stuck_running_with_its_message_lost_is_delivered_again_under_the_same_id() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("stuck").await;
    let id = nightly_job(&stack, &sink, "stuck").await;
    // A slot whose worker died mid-attempt and whose message the broker lost.
    let slot = truncate_ms(Utc::now() - TimeDelta::minutes(5));
    let client = stack.pg.get().await.unwrap();
    insert_running_row(&client, id, slot, "lost-worker", "3 minutes").await;
    // A slot held just as long by a worker that is alive (say, queued behind
    // its in-flight limit in a burst): recovering it would deliver it twice.
    // Its heartbeat is dated ahead so that it stays fresh for the whole test.
    let held = truncate_ms(Utc::now() - TimeDelta::minutes(6));
    insert_running_row(&client, id, held, "busy-worker", "3 minutes").await;
    client
        .execute(
            "INSERT INTO worker_heartbeats (worker_id, seen_at) VALUES ('busy-worker', now() + interval '1 hour')",
            &[],
        )
        .await
        .unwrap();
    let mut cfg = stack.node_config("node-a");
    cfg.running_grace = Duration::from_secs(1);
    stack.start_node(cfg);
    stack.start_worker(stack.worker_config("worker-a"));
    let row = wait_for("the stuck row to be delivered again", Duration::from_secs(15), || async {
        stack.ledger(&id.to_string(), slot).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["attempts"], 2, "the lost attempt counts");
    // The same sweep that recovered the lost row left the live worker's alone.
    let kept = stack.ledger(&id.to_string(), held).await.unwrap();
    assert_eq!((kept["status"].as_str(), kept["attempts"].as_i64()), (Some("running"), Some(1)), "{kept}");
    assert!(sink.received_on("stuck").iter().all(|r| r.execution_id != domain::execution::execution_id(id, held)));
    let got = sink.received_on("stuck");
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].execution_id, domain::execution::execution_id(id, slot));
    assert_eq!(got[0].attempt, 2);
    stack.stop().await;
}

/// A message comes back to the queue while the row of its attempt is still
/// `running` under a worker that is alive (its batch failed, or it lost its
/// broker session, and it may still be delivering): the copy is neither
/// delivered nor dropped, but requeued until that worker gives the row back
/// or is presumed gone; then it is delivered, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redelivery_waits_while_a_live_worker_holds_its_attempt_and_is_delivered_once_it_is_gone() {
    use futures::StreamExt;
    use lapin::options::BasicNackOptions;

    let sink = Sink::start().await;
    let mut stack = Stack::start("held").await;
    let id = nightly_job(&stack, &sink, "held").await;
    let triggered = stack.post(&format!("/v1/jobs/{id}/trigger")).await;
    let execution_id = triggered["execution_id"].as_str().unwrap().to_owned();

    // Take the message off the queue as another worker would, and hold its
    // row `running` under that worker with a fresh heartbeat.
    let connection = broker::amqp::connect(&testing::amqp_url(), "test other-worker").await.unwrap();
    let (channel, mut consumer) = main_queue_consumer(&connection, &stack.cluster, "other-worker").await;
    let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await.unwrap().unwrap().unwrap();
    let client = stack.pg.get().await.unwrap();
    hold_under_live_other_worker(&client, id).await;
    // Its copy goes back to the queue (redelivered) while it stays alive.
    delivery.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.unwrap();
    channel.close(200, "done".into()).await.unwrap();
    stack.start_worker(stack.worker_config("worker-a"));

    // Heartbeats keep the holder alive; the copy keeps coming back unused.
    keep_other_worker_alive_and_assert_nothing_on(&client, &sink, "held").await;
    let row = stack.ledger(&id.to_string(), triggered_slot(&triggered)).await.unwrap();
    assert_eq!((row["status"].as_str(), row["worker_id"].as_str()), (Some("running"), Some("other-worker")), "{row}");

    // The holder stops beating: three beats later it is presumed gone and
    // the copy takes the attempt over.
    let got = wait_for("the delivery once the holder is gone", Duration::from_secs(30), || async {
        sink.received_on("held").into_iter().next()
    })
    .await;
    assert_eq!((got.execution_id.as_str(), got.attempt), (execution_id.as_str(), 1));
    let row = wait_for("the outcome", Duration::from_secs(10), || async {
        stack.ledger(&id.to_string(), triggered_slot(&triggered)).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["worker_id"], "worker-a");
    assert_eq!(sink.received_on("held").len(), 1);
    stack.stop().await;
}

/// A bundle is requeued whole while one of its slots cannot be decided (its
/// row is held by a live worker): the other slot is delivered once, and the
/// copies of it that come back with the requeued bundle are dropped; the
/// held slot is delivered once its holder is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_requeued_bundle_delivers_each_of_its_slots_once() {
    use futures::StreamExt;
    use lapin::options::BasicNackOptions;

    let sink = Sink::start().await;
    let mut stack = Stack::start("bundle").await;
    let mut triggered = Vec::new();
    for name in ["held", "free"] {
        let id = nightly_job(&stack, &sink, name).await;
        triggered.push((id, stack.post(&format!("/v1/jobs/{id}/trigger")).await));
    }

    // Take both single messages off the queue and publish them again as one
    // bundle, as a scheduler does with slots due together.
    let connection = broker::amqp::connect(&testing::amqp_url(), "test bundler").await.unwrap();
    let messages = take_off_the_main_queue(&connection, &stack.cluster, 2).await;

    // The `held` slot's row is `running` under another worker that is alive.
    let (held_id, _) = &triggered[0];
    let client = stack.pg.get().await.unwrap();
    hold_under_live_other_worker(&client, *held_id).await;
    let topology = broker::amqp::Topology::new(&stack.cluster);
    let mut publisher = broker::publisher::Publisher::new(testing::amqp_url(), "test bundler".into(), topology);
    publisher.publish(&messages).await.unwrap();
    // The bundle comes back to the queue (redelivered), as the holder's copy
    // would after its batch failed: a fresh copy would be a duplicate publish.
    let (channel, mut consumer) = main_queue_consumer(&connection, &stack.cluster, "holder").await;
    let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(domain::message::parse_body(&delivery.data).unwrap().len(), 2, "one AMQP message carries both slots");
    delivery.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await.unwrap();
    channel.close(200, "done".into()).await.unwrap();
    stack.start_worker(stack.worker_config("worker-a"));

    // The free slot goes out; the bundle keeps coming back for the held one.
    wait_for("the free slot delivered", Duration::from_secs(10), || async {
        (!sink.received_on("free").is_empty()).then_some(())
    })
    .await;
    keep_other_worker_alive_and_assert_nothing_on(&client, &sink, "held").await;
    assert_eq!(sink.received_on("free").len(), 1, "the requeued bundle delivered its free slot again");

    // The holder stops beating: the held slot is delivered, once.
    wait_for("the held slot once its holder is gone", Duration::from_secs(30), || async {
        (!sink.received_on("held").is_empty()).then_some(())
    })
    .await;
    for (name, (id, execution)) in ["held", "free"].into_iter().zip(&triggered) {
        let row = wait_for("the outcome", Duration::from_secs(10), || async {
            stack.ledger(&id.to_string(), triggered_slot(execution)).await.filter(|r| r["status"] == "succeeded")
        })
        .await;
        assert_eq!(row["worker_id"], "worker-a", "{name}: {row}");
        assert_eq!(sink.received_on(name).len(), 1, "{name} delivered more than once");
    }
    stack.stop().await;
}

/// A delivered slot's outcome is written as soon as it is delivered, not
/// when its bundle's last slot is: only the message's ack waits for that.
/// (A worker that kept outcomes until the whole message was done would
/// leave a fast job's row `running` behind a slow receiver, and its next
/// slot's overlap check would find it still running.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bundles_delivered_slot_is_recorded_while_a_slow_one_is_still_being_delivered() {
    let (fast_sink, slow_sink) = (Sink::start().await, Sink::start().await);
    slow_sink.set_delay(Duration::from_secs(6));
    let mut stack = Stack::start("bundle-record").await;
    let mut triggered = Vec::new();
    for (name, sink) in [("fast", &fast_sink), ("slow", &slow_sink)] {
        let id = nightly_job(&stack, sink, name).await;
        triggered.push((id, stack.post(&format!("/v1/jobs/{id}/trigger")).await));
    }
    // Both single messages off the queue, published again as one bundle.
    let connection = broker::amqp::connect(&testing::amqp_url(), "test bundler").await.unwrap();
    let messages = take_off_the_main_queue(&connection, &stack.cluster, 2).await;
    let topology = broker::amqp::Topology::new(&stack.cluster);
    let mut publisher = broker::publisher::Publisher::new(testing::amqp_url(), "test bundler".into(), topology);
    publisher.publish(&messages).await.unwrap();
    stack.start_worker(stack.worker_config("worker-a"));

    let [(fast_id, fast), (slow_id, slow)] = &triggered[..] else { unreachable!() };
    wait_for("the slow slot's request", Duration::from_secs(20), || async {
        (!slow_sink.received_on("slow").is_empty()).then_some(())
    })
    .await;
    let fast_row = wait_for("the fast slot recorded", Duration::from_secs(4), || async {
        stack.ledger(&fast_id.to_string(), triggered_slot(fast)).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    let slow_row = stack.ledger(&slow_id.to_string(), triggered_slot(slow)).await.unwrap();
    assert_eq!(slow_row["status"], "running", "the slow receiver has not answered yet: {slow_row}");
    assert_eq!(fast_row["worker_id"], "worker-a", "{fast_row}");

    // The slow receiver outlasts the test workers' 2 s timeout: the first
    // attempt fails, and its retry, answered at once, succeeds.
    slow_sink.set_delay(Duration::ZERO);
    let slow_row = wait_for("the slow slot's retry recorded", Duration::from_secs(30), || async {
        stack.ledger(&slow_id.to_string(), triggered_slot(slow)).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(slow_row["attempts"], 2, "{slow_row}");
    assert_eq!(slow_sink.received_on("slow").len(), 2);
    assert_eq!(fast_sink.received_on("fast").len(), 1);
    stack.stop().await;
}

/// An outcome the ledger refuses to record is written again for the
/// worker's retry window, then the slot's row is given back and its message
/// requeued: the slot is delivered again under the same execution id and
/// recorded then. At least once when its outcome cannot be written: never
/// acked unrecorded, never left `running`. The ledger refuses through a
/// trigger on the test's own database that rejects every `succeeded` until
/// the row has been given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_outcome_the_ledger_refuses_is_written_again_then_its_slot_is_given_back_and_delivered_again() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("outcome-refused").await;
    let id = nightly_job(&stack, &sink, "refused").await;
    let client = stack.pg.get().await.unwrap();
    client
        .batch_execute(
            "CREATE FUNCTION test_refuse_outcome() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN RAISE EXCEPTION 'outcome refused by the test'; END $$;
             CREATE TRIGGER test_refuse_outcome BEFORE UPDATE ON scheduled_jobs
               FOR EACH ROW WHEN (NEW.status = 'succeeded') EXECUTE FUNCTION test_refuse_outcome();",
        )
        .await
        .unwrap();
    let execution = stack.post(&format!("/v1/jobs/{id}/trigger")).await;
    let slot = triggered_slot(&execution);
    let mut config = stack.worker_config("worker-a");
    config.outcome_retry_for = Duration::from_secs(3);
    stack.start_worker(config);

    let given_back =
        wait_for("the row given back once its outcome could not be written", Duration::from_secs(30), || async {
            let row = stack.ledger(&id.to_string(), slot).await?;
            row["history"].as_array()?.iter().any(|e| e["event"] == "released").then_some(row)
        })
        .await;
    assert!(!sink.received_on("refused").is_empty(), "given back before it was delivered: {given_back}");
    client.batch_execute("DROP TRIGGER test_refuse_outcome ON scheduled_jobs").await.unwrap();

    let row = wait_for("the slot delivered again and recorded", Duration::from_secs(30), || async {
        stack.ledger(&id.to_string(), slot).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["attempts"], 1, "a given-back attempt is the same attempt: {row}");
    let received = sink.received_on("refused");
    assert!(received.len() >= 2, "delivered once, so its outcome was recorded without the retry: {row}");
    assert!(
        received.iter().all(|r| r.execution_id == row["execution_id"].as_str().unwrap()),
        "every delivery under the slot's execution id"
    );
    stack.stop().await;
}

/// Takes `n` slots' messages off the cluster's main queue (acked), to be
/// published again as one bundle.
async fn take_off_the_main_queue(
    connection: &lapin::Connection,
    cluster: &str,
    n: usize,
) -> Vec<domain::message::FireMessage> {
    use futures::StreamExt;
    use lapin::options::BasicAckOptions;

    let (channel, mut consumer) = main_queue_consumer(connection, cluster, "bundler").await;
    let mut messages = Vec::new();
    while messages.len() < n {
        let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next()).await.unwrap().unwrap().unwrap();
        messages.extend(domain::message::parse_body(&delivery.data).unwrap());
        delivery.acker.ack(BasicAckOptions::default()).await.unwrap();
    }
    channel.close(200, "done".into()).await.unwrap();
    messages
}

/// A consumer on the cluster's main queue, on a channel of its own, as
/// another worker would have.
async fn main_queue_consumer(
    connection: &lapin::Connection,
    cluster: &str,
    tag: &str,
) -> (lapin::Channel, lapin::Consumer) {
    let channel = connection.create_channel().await.unwrap();
    let queue = broker::amqp::Topology::new(cluster).main_queue;
    let consumer =
        channel.basic_consume(queue.as_str().into(), tag.into(), Default::default(), Default::default()).await.unwrap();
    (channel, consumer)
}

/// Holds the job's pending row `running` under `other-worker`, with a
/// fresh heartbeat: a live worker delivering it.
async fn hold_under_live_other_worker(client: &tokio_postgres::Client, job_id: uuid::Uuid) {
    let held = client
        .execute(
            "UPDATE scheduled_jobs SET status = 'running', attempts = 1, worker_id = 'other-worker', started_at = now()
             WHERE job_id = $1 AND status = 'pending'",
            &[&job_id],
        )
        .await
        .unwrap();
    assert_eq!(held, 1);
    client
        .execute("INSERT INTO worker_heartbeats (worker_id, seen_at) VALUES ('other-worker', now())", &[])
        .await
        .unwrap();
}

/// Keeps `other-worker` beating for 5 s, asserting meanwhile that nothing
/// reaches the sink under `name`; the beats stop when it returns.
async fn keep_other_worker_alive_and_assert_nothing_on(client: &tokio_postgres::Client, sink: &Sink, name: &str) {
    let alive_until = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < alive_until {
        client
            .execute("UPDATE worker_heartbeats SET seen_at = now() WHERE worker_id = 'other-worker'", &[])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(sink.received_on(name).is_empty(), "delivered while a live worker held the attempt");
    }
}

/// A job that fires within a test only when triggered (its schedule's
/// next slot is at 03:00 UTC), calling back `sink` on `/{name}`.
async fn nightly_job(stack: &Stack, sink: &Sink, name: &str) -> uuid::Uuid {
    let job = stack
        .create_job(json!({
            "name": name,
            "schedule": { "kind": "cron", "expr": "0 3 * * *", "timezone": "UTC" },
            "target": http_target(&sink.url(name)),
        }))
        .await;
    job["id"].as_str().unwrap().parse().unwrap()
}

fn triggered_slot(execution: &serde_json::Value) -> DateTime<Utc> {
    execution["scheduled_at"].as_str().unwrap().parse().unwrap()
}

/// A worker restarted under the same id finds a row `running` under that
/// id with no task on it (its previous life held it; the message is gone):
/// it gives the row back, marked unpublished, and the outbox sweep delivers
/// it again under the same execution id.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_left_running_under_a_restarted_workers_id_is_given_back_and_delivered() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("orphan").await;
    let id = nightly_job(&stack, &sink, "orphan").await;
    let slot = truncate_ms(Utc::now() - TimeDelta::minutes(2));
    let client = stack.pg.get().await.unwrap();
    // The node first, and its day partitions: moving a row out of the
    // default partition would race with the worker's check at start.
    stack.start_node(stack.node_config("node-a"));
    let partition = format!("scheduled_jobs_{}", slot.format("%Y%m%d"));
    wait_for("today's ledger partition", Duration::from_secs(10), || async {
        let found = client.query_opt("SELECT 1 FROM pg_class WHERE relname = $1", &[&partition]).await.unwrap();
        found.map(|_| ())
    })
    .await;
    insert_running_row(&client, id, slot, "worker-a", "1 minute").await;
    stack.start_worker(stack.worker_config("worker-a"));
    let got = wait_for("the given-back row delivered", Duration::from_secs(20), || async {
        sink.received_on("orphan").into_iter().next()
    })
    .await;
    assert_eq!((got.execution_id, got.attempt), (domain::execution::execution_id(id, slot), 1));
    let row = wait_for("the outcome", Duration::from_secs(10), || async {
        stack.ledger(&id.to_string(), slot).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    let events: Vec<&str> = row["history"].as_array().unwrap().iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["released", "attempt"], "{row}");
    assert_eq!(sink.received_on("orphan").len(), 1);
    stack.stop().await;
}

/// A ledger row for attempt 1 of `slot`, `running` under `worker` since
/// `started_ago` (an SQL interval) and published: what a worker leaves
/// behind when it stops mid-attempt. The job's version is dated back a day,
/// so that it was in force at the (past) slot, as for a job that existed then.
async fn insert_running_row(
    client: &tokio_postgres::Client,
    id: uuid::Uuid,
    slot: DateTime<Utc>,
    worker: &str,
    started_ago: &str,
) {
    client
        .execute("UPDATE job_changes SET valid_from = valid_from - interval '1 day' WHERE job_id = $1", &[&id])
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, worker_id,
                                         started_at, published_at, fired_at, job_version)
             VALUES ($1, $2, $3, $4, 'running', 1, $5, now() - $6::text::interval, now(), now(), 1)",
            &[&id, &slot, &uuid::Uuid::now_v7(), &domain::execution::execution_id(id, slot), &worker, &started_ago],
        )
        .await
        .unwrap();
}

/// The lost-lock check must only read: the claim's `ON CONFLICT DO UPDATE`
/// locks each conflicting row, so claiming slots the lock winner already
/// claimed waited on (and deadlocked with) the workers writing those rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checking_lost_slots_reads_without_waiting_on_row_locks_and_finds_only_claimable_ones() {
    use store::ledger::claim::{Slot, SlotState, check_slots};
    let db = testing::TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 2).unwrap();
    let client = store::db::connect(&db.url).await.unwrap();
    let job = uuid::Uuid::now_v7();
    client.execute("INSERT INTO jobs (id, name, spec, version) VALUES ($1, 'lost', '{}', 2)", &[&job]).await.unwrap();
    let t0 = truncate_ms(Utc::now());
    let slot = |secs: i64| Slot {
        job_id: job,
        scheduled_at: t0 + TimeDelta::seconds(secs),
        job_version: 2,
        trigger: domain::slot::Trigger::Schedule,
        max_runs: None,
    };
    // 0: claimed by the winner and being delivered; 1: nobody claimed it;
    // 2: skipped when version 1 had armed it (version 2 may re-take it);
    // 3: skipped because it was deleted (final).
    for (secs, status, reason, version) in
        [(0, "running", None, 2i64), (2, "skipped", Some("superseded"), 1), (3, "skipped", Some("deleted"), 2)]
    {
        let at = t0 + TimeDelta::seconds(secs);
        client
            .execute(
                "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, reason, job_version)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &job,
                    &at,
                    &uuid::Uuid::now_v7(),
                    &domain::execution::execution_id(job, at),
                    &status,
                    &reason,
                    &version,
                ],
            )
            .await
            .unwrap();
    }
    // A worker's write in progress on slot 0's row.
    let mut holder = store::db::connect(&db.url).await.unwrap();
    let tx = holder.transaction().await.unwrap();
    tx.execute("SELECT 1 FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2 FOR UPDATE", &[&job, &t0])
        .await
        .unwrap();

    let slots: Vec<Slot> = (0..4).map(slot).collect();
    let reader = pool.get().await.unwrap();
    let states = tokio::time::timeout(Duration::from_secs(5), check_slots(&reader, &slots))
        .await
        .expect("the check waited on a row lock")
        .unwrap();
    let open: Vec<i64> = slots
        .iter()
        .zip(states)
        .filter(|(_, state)| *state == SlotState::Open)
        .map(|(s, _)| (s.scheduled_at - t0).num_seconds())
        .collect();
    assert_eq!(open, [1, 2]);
    tx.rollback().await.unwrap();
}

/// A burst larger than the minimum lookahead can carry is handed over early
/// by the node's adaptive lookahead: with a 0.5 s minimum and no pace
/// measured yet (2,000 slots/s assumed), 3,000 slots due together are
/// claimed about 2.4 s ahead, every row well before the minimum would have
/// taken it, and each is still delivered once and never before it is due.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_is_claimed_ahead_by_the_adaptive_lookahead_and_delivered_once_on_time() {
    const JOBS: usize = 3_000;
    let sink = Sink::start().await;
    let mut stack = Stack::start("adaptive").await;
    let mut cfg = stack.node_config("node-a");
    cfg.lookahead = Duration::from_millis(500);
    cfg.max_lookahead = Duration::from_secs(30);
    stack.start_node(cfg);
    let mut worker = stack.worker_config("worker-a");
    worker.prefetch = 5_000;
    stack.start_worker(worker);
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(12));
    let mut ids = Vec::new();
    for chunk in 0..JOBS / 1_000 {
        let jobs: Vec<_> = (0..1_000)
            .map(|i| {
                json!({
                    "name": format!("burst-{chunk}-{i}"), "schedule": { "kind": "once", "at": at(due) },
                    "target": http_target(&sink.url("adaptive")),
                })
            })
            .collect();
        let answer = stack
            .http
            .post(format!("{}/v1/jobs/batch", stack.api))
            .json(&json!({ "jobs": jobs, "atomic": true }))
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "batch create: {}", answer.status());
        let body: serde_json::Value = answer.json().await.unwrap();
        ids.extend(body["items"].as_array().unwrap().iter().map(|r| r["job"]["id"].as_str().unwrap().to_owned()));
    }
    assert_eq!(ids.len(), JOBS);
    assert!(Utc::now() < due - TimeDelta::seconds(4), "creating {JOBS} jobs took too long for the test");
    let got = wait_for("every slot delivered", Duration::from_secs(60), || async {
        let r = sink.received_on("adaptive");
        (r.len() >= JOBS).then_some(r)
    })
    .await;
    let expected: std::collections::BTreeSet<String> = ids.iter().map(|id| format!("{id}@{}", at(due))).collect();
    support::assert_exactly_once(&got, &expected);
    assert!(got.iter().all(|r| r.received_at >= due), "a delivery came before its due instant");
    let client = stack.pg.get().await.unwrap();
    let row = client
        .query_one("SELECT count(*), max(fired_at) FROM scheduled_jobs WHERE scheduled_at = $1", &[&due])
        .await
        .unwrap();
    let (claimed, last_claim): (i64, DateTime<Utc>) = (row.get(0), row.get(1));
    assert_eq!(claimed, JOBS as i64);
    assert!(
        last_claim < due - TimeDelta::milliseconds(1_200),
        "the last of the burst was claimed {} ms before its due instant; the 0.5 s minimum alone would give that",
        (due - last_claim).num_milliseconds()
    );
    stack.stop().await;
}

/// The `pg_stat_activity` rows of a worker's outcome write (`finish_batch`)
/// waiting on a row lock, in the test's database.
/// Matched anywhere in the statement: the outcome write is the body of a
/// `WITH` (it deletes an `after_completion: delete` job in the same one).
const OUTCOME_WRITE_WAITING_ON_A_LOCK: &str = "datname = current_database() AND wait_event_type = 'Lock'
    AND query LIKE '%UPDATE scheduled_jobs l SET status = b.status%'";

/// A worker that dies after delivering a slot and before its outcome is
/// written has not acked the slot's message: the broker hands it to the
/// next worker, which delivers the slot again under the same execution id
/// (at least once, as a lost outcome must be) and records it. An ack sent
/// before the outcome was written would leave the row `running` with no
/// message anywhere, until the stuck-row sweep republished it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_between_a_delivery_and_its_outcome_write_leaves_the_slot_to_the_next_worker() {
    let sink = Sink::start().await;
    let stack = Stack::start("record-kill").await;
    let env = stack.proc_env();
    let id = nightly_job(&stack, &sink, "record-kill").await;
    // Answered after a pause: time to lock the row once the worker started it.
    sink.set_delay(Duration::from_secs(2));
    let mut first = env.worker("worker-a");
    let triggered = stack.post(&format!("/v1/jobs/{id}/trigger")).await;
    let (execution_id, slot) = (triggered["execution_id"].as_str().unwrap().to_owned(), triggered_slot(&triggered));
    wait_for("the first delivery", Duration::from_secs(30), || async {
        sink.received_on("record-kill").into_iter().next()
    })
    .await;

    // The row is `running` under worker-a; a lock on it stalls its outcome write.
    let mut locker = stack.pg.get().await.unwrap();
    let lock = locker.transaction().await.unwrap();
    lock.execute("SELECT 1 FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2 FOR UPDATE", &[&id, &slot])
        .await
        .unwrap();
    let watcher = stack.pg.get().await.unwrap();
    wait_for("worker-a's outcome write waiting on the row", Duration::from_secs(30), || async {
        let waiting: i64 = watcher
            .query_one(&format!("SELECT count(*) FROM pg_stat_activity WHERE {OUTCOME_WRITE_WAITING_ON_A_LOCK}"), &[])
            .await
            .unwrap()
            .get(0);
        (waiting > 0).then_some(())
    })
    .await;
    first.kill().await.unwrap();
    // Its backend would otherwise go on waiting, and write the outcome once
    // the lock goes: as if worker-a had died just before sending it.
    watcher
        .execute(
            &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE {OUTCOME_WRITE_WAITING_ON_A_LOCK}"),
            &[],
        )
        .await
        .unwrap();
    lock.rollback().await.unwrap();
    let row = stack.ledger(&id.to_string(), slot).await.unwrap();
    assert_eq!((row["status"].as_str(), row["worker_id"].as_str()), (Some("running"), Some("worker-a")), "{row}");

    sink.set_delay(Duration::ZERO);
    let mut second = env.worker("worker-b");
    let row = wait_for("the slot recorded by worker-b", Duration::from_secs(60), || async {
        stack.ledger(&id.to_string(), slot).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["worker_id"], "worker-b", "{row}");
    // The broker's copy, handed back unacked (a copy republished by the
    // stuck-row sweep would arrive as a first delivery, 30 s or so later).
    let attempts: Vec<&serde_json::Value> =
        row["history"].as_array().unwrap().iter().filter(|e| e["event"] == "attempt").collect();
    assert_eq!(attempts.len(), 1, "{row}");
    assert_eq!(attempts[0]["redelivered"], true, "{row}");
    let received = sink.received_on("record-kill");
    assert_eq!(received.len(), 2, "delivered by worker-a, then again by worker-b: {received:?}");
    assert!(received.iter().all(|r| r.execution_id == execution_id), "{received:?}");
    second.kill().await.unwrap();
    stack.stop().await;
}

/// A worker runs without transparent huge pages: its allocator asks for
/// them, and faulting them in at a herd's due instant delayed deliveries
/// (docs/decisions.md). Read from the running process, as the kernel
/// reports it.
#[tokio::test]
async fn a_worker_runs_without_transparent_huge_pages() {
    let stack = Stack::start("no-thp").await;
    let env = stack.proc_env();
    let worker = env.worker("no-thp-worker");
    let pid = worker.id().expect("the worker is running");
    // Set as its `main` starts, an instant after the spawn. (Kernels before
    // 5.0 do not report it; every supported one does.)
    wait_for("the worker to report THP_enabled 0", Duration::from_secs(10), || async {
        // None while the file cannot be read: a worker that exited fails
        // with the wait's message, not a file error.
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let thp = status.lines().find_map(|l| l.strip_prefix("THP_enabled:")).map(str::trim);
        (thp == Some("0")).then_some(())
    })
    .await;
    drop(worker);
    stack.stop().await;
}
