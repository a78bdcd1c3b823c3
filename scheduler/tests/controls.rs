//! Scheduling controls on the real pipeline (API → node → RabbitMQ →
//! workers → receiver → ledger): jitter, overlap policies and calendars.
//! Each test has its own database and cluster name, and two workers, so
//! decisions that must hold across workers are made by different ones.

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use serde_json::json;

use domain::execution::{format_instant, truncate_ms};
use support::{Sink, Stack, http_target};
use testing::wait_for;

fn at(t: DateTime<Utc>) -> String {
    format_instant(truncate_ms(t))
}

async fn stack_with_two_workers(label: &str, lookahead: Duration) -> Stack {
    let mut stack = Stack::start(label).await;
    let mut cfg = stack.node_config("node-a");
    cfg.lookahead = lookahead;
    stack.start_node(cfg);
    stack.start_worker(stack.worker_config("worker-a"));
    stack.start_worker(stack.worker_config("worker-b"));
    stack
}

/// Every ledger row of a job, oldest slot first: (slot, status, reason, attempts, history).
async fn rows_of(stack: &Stack, job_id: &str) -> Vec<(DateTime<Utc>, String, Option<String>, i32, serde_json::Value)> {
    let client = stack.pg.get().await.unwrap();
    let id: uuid::Uuid = job_id.parse().unwrap();
    client
        .query(
            "SELECT scheduled_at, status, reason, attempts, history FROM scheduled_jobs WHERE job_id = $1 ORDER BY scheduled_at",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect()
}

async fn final_rows(
    stack: &Stack,
    job_id: &str,
    n: usize,
) -> Vec<(DateTime<Utc>, String, Option<String>, i32, serde_json::Value)> {
    wait_for("every slot of the job to reach a final status", Duration::from_secs(40), || async {
        let rows = rows_of(stack, job_id).await;
        (rows.len() == n && rows.iter().all(|r| ["succeeded", "failed", "skipped", "missed"].contains(&r.1.as_str())))
            .then_some(rows)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn jitter_spreads_a_herd_while_slots_and_execution_ids_stay_put() {
    const JOBS: usize = 300;
    const JITTER_MS: u64 = 2_000;
    let sink = Sink::start().await;
    let stack = stack_with_two_workers("jitter", Duration::from_secs(5)).await;
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(6));
    let creates = (0..JOBS).map(|i| {
        stack.create_job(json!({
            "name": format!("herd-{i}"), "schedule": { "kind": "once", "at": at(due) },
            "jitter_ms": JITTER_MS, "target": http_target(&sink.url("herd")),
        }))
    });
    let jobs: Vec<serde_json::Value> = futures::future::join_all(creates).await;
    assert!(Utc::now() < due, "creating {JOBS} jobs took past their due time");
    assert_eq!(jobs[0]["jitter_ms"], JITTER_MS);
    let got = wait_for("every slot delivered", Duration::from_secs(30), || async {
        let r = sink.received_on("herd");
        (r.len() >= JOBS).then_some(r)
    })
    .await;
    let expected: std::collections::BTreeSet<String> =
        jobs.iter().map(|j| format!("{}@{}", j["id"].as_str().unwrap(), at(due))).collect();
    support::assert_exactly_once(&got, &expected);
    for r in &got {
        let id: uuid::Uuid = r.execution_id.split('@').next().unwrap().parse().unwrap();
        let deliver_at = due + domain::schedule::jitter_offset(id, due, JITTER_MS);
        assert_eq!(r.scheduled_at, at(due), "the scheduled time header keeps the slot");
        assert!(
            r.received_at >= deliver_at,
            "{} came {} before its jittered instant",
            r.execution_id,
            deliver_at - r.received_at
        );
        assert!(
            r.received_at - deliver_at < TimeDelta::seconds(1),
            "{} came {} late",
            r.execution_id,
            r.received_at - deliver_at
        );
    }
    // Spread over the window: no 200 ms tenth of it holds more than a
    // quarter of the herd (unjittered, all of it lands in the first one).
    let mut per_tenth = [0usize; 11];
    for r in &got {
        per_tenth[((r.received_at - due).num_milliseconds() / 200).clamp(0, 10) as usize] += 1;
    }
    assert!(per_tenth.iter().all(|n| *n < JOBS / 4), "deliveries per 200 ms: {per_tenth:?}");
    // Explain shows the jittered delivery instant.
    let id: uuid::Uuid = jobs[7]["id"].as_str().unwrap().parse().unwrap();
    let explained = stack.get(&format!("/v1/jobs/{id}/executions/{}", at(due))).await;
    let offset = domain::schedule::jitter_offset(id, due, JITTER_MS);
    assert_eq!(explained["explanation"]["delivery_at"], at(due + offset).as_str(), "{explained}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_forbid_skips_slots_due_while_the_previous_execution_runs() {
    const SLOTS: usize = 7;
    const CALLBACK: Duration = Duration::from_millis(2_500);
    let sink = Sink::start().await;
    sink.set_delay(CALLBACK);
    let stack = stack_with_two_workers("overlap-forbid", Duration::from_secs(2)).await;
    let start = truncate_ms(Utc::now() + TimeDelta::seconds(3));
    let job = stack
        .create_job(json!({
            "name": "slow", "overlap": "forbid",
            "schedule": { "kind": "interval", "every_ms": 1000, "start_at": at(start), "max_runs": SLOTS },
            "target": { "kind": "http", "url": sink.url("slow"), "method": "POST", "timeout_ms": 10_000 },
        }))
        .await;
    assert_eq!(job["overlap"], "forbid");
    let id = job["id"].as_str().unwrap().to_owned();
    let rows = final_rows(&stack, &id, SLOTS).await;
    let got = sink.received_on("slow");
    // Never two at once at the receiver.
    for pair in got.windows(2) {
        assert!(
            pair[1].received_at - pair[0].received_at >= TimeDelta::from_std(CALLBACK).unwrap(),
            "{} began while {} was still running",
            pair[1].execution_id,
            pair[0].execution_id
        );
    }
    let delivered: Vec<DateTime<Utc>> = rows.iter().filter(|r| r.1 == "succeeded").map(|r| r.0).collect();
    assert_eq!(got.len(), delivered.len(), "one delivery per succeeded slot");
    for (slot, status, reason, attempts, history) in &rows {
        match status.as_str() {
            "succeeded" => assert_eq!(*attempts, 1),
            "skipped" => {
                assert_eq!(reason.as_deref(), Some("overlap"), "slot {slot}");
                // An older slot was delivered and still running at this one's due instant.
                let blocker = delivered.iter().rev().find(|d| *d < slot).expect("an older delivered slot");
                assert!(*slot - *blocker < TimeDelta::from_std(CALLBACK).unwrap() + TimeDelta::milliseconds(500));
                assert!(
                    history.to_string().contains(&format!("{id}@{}", at(*blocker))),
                    "history names the running execution: {history}"
                );
            }
            other => panic!("slot {slot} ended {other}"),
        }
    }
    assert!(delivered.len() >= 2 && rows.len() - delivered.len() >= 3, "rows: {rows:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_replace_cancels_the_older_executions_remaining_retries() {
    let sink = Sink::start().await;
    // The first slot's first attempt fails; its retry would come 4 s later.
    sink.fail_first(1, 503);
    let stack = stack_with_two_workers("overlap-replace", Duration::from_secs(2)).await;
    let start = truncate_ms(Utc::now() + TimeDelta::seconds(3));
    let job = stack
        .create_job(json!({
            "name": "replaced", "overlap": "replace",
            "schedule": { "kind": "interval", "every_ms": 1000, "start_at": at(start), "max_runs": 6 },
            "retry": { "max_retries": 3, "base_delay_ms": 4000, "multiplier": 1.0, "max_delay_ms": 4000 },
            "target": http_target(&sink.url("r")),
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    // The last slot comes after the first one's retry would have.
    let rows = final_rows(&stack, &id, 6).await;
    let (first, status, reason, attempts, history) = &rows[0];
    assert_eq!((status.as_str(), reason.as_deref(), *attempts), ("skipped", Some("replaced"), 1), "{history}");
    let second = format!("{id}@{}", at(start + TimeDelta::seconds(1)));
    assert!(history.to_string().contains(&second), "history names the replacing execution: {history}");
    assert!(rows[1..].iter().all(|r| r.1 == "succeeded"), "rows: {rows:?}");
    let first_id = format!("{id}@{}", at(*first));
    let got = sink.received_on("r");
    let attempts_of_first: Vec<u32> = got.iter().filter(|r| r.execution_id == first_id).map(|r| r.attempt).collect();
    assert_eq!(attempts_of_first, [1], "the replaced execution was retried");
    // Its retry message reached a worker and was dropped, not delivered.
    wait_for("the retry's due instant to pass", Duration::from_secs(10), || async {
        (Utc::now() > *first + TimeDelta::seconds(5)).then_some(())
    })
    .await;
    assert_eq!(sink.received_on("r").iter().filter(|r| r.execution_id == first_id).count(), 1);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slots_a_calendar_excludes_are_recorded_skipped_and_the_rest_delivered() {
    const SLOTS: usize = 6;
    let sink = Sink::start().await;
    let stack = stack_with_two_workers("calendar", Duration::from_secs(2)).await;
    // Every even second of the wall clock is excluded.
    let response = stack
        .http
        .put(format!("{}/v1/calendars/even-seconds", stack.api))
        .json(&json!({ "timezone": "Europe/Berlin", "rules": ["*/2 * * * * *"] }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    // An even second first: skipped, delivered, skipped, ...; the job stops
    // after its third delivery, so six rows in all.
    let first = Utc::now().timestamp() + 4;
    let start = DateTime::from_timestamp(first + first % 2, 0).unwrap();
    let job = stack
        .create_job(json!({
            "name": "weekdays-only", "calendars": ["even-seconds"],
            "schedule": { "kind": "interval", "every_ms": 1000, "start_at": at(start), "max_runs": SLOTS / 2 },
            "target": http_target(&sink.url("cal")),
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    // Excluded slots are no runs: max_runs counts the delivered ones.
    let rows = final_rows(&stack, &id, SLOTS).await;
    for (slot, status, reason, _, _) in &rows {
        if slot.timestamp() % 2 == 0 {
            assert_eq!((status.as_str(), reason.as_deref()), ("skipped", Some("calendar:even-seconds")), "slot {slot}");
        } else {
            assert_eq!(status, "succeeded", "slot {slot}");
        }
    }
    let delivered: Vec<String> = sink.received_on("cal").iter().map(|r| r.scheduled_at.clone()).collect();
    let expected: Vec<String> = rows.iter().filter(|r| r.1 == "succeeded").map(|r| at(r.0)).collect();
    assert_eq!(delivered, expected);
    // Explain says which calendar.
    let excluded = rows.iter().find(|r| r.1 == "skipped").unwrap().0;
    let explained = stack.get(&format!("/v1/jobs/{id}/executions/{}", at(excluded))).await;
    assert!(explained.to_string().contains("calendar \\\"even-seconds\\\" excludes"), "{explained}");
    stack.stop().await;
}

/// A job that names a calendar made a moment before it: no slot fires past
/// the calendar, though the node polls calendars only every 5 s (the
/// shipped default). Each of the first slots is recorded skipped by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_calendar_made_just_before_its_job_holds_from_the_jobs_first_slot() {
    const SLOTS: usize = 6;
    let sink = Sink::start().await;
    let mut stack = Stack::start("calendar-fresh").await;
    let mut cfg = stack.node_config("node-a");
    cfg.poll_interval = Duration::from_secs(5);
    stack.start_node(cfg);
    stack.start_worker(stack.worker_config("worker-a"));
    // The node has loaded its (empty) set of calendars before this one
    // exists: it loads them before its first fire, and a first job fired.
    let probe = stack
        .create_job(json!({
            "name": "probe", "schedule": { "kind": "interval", "every_ms": 1000 },
            "target": http_target(&sink.url("probe")),
        }))
        .await;
    wait_for("the node's first fire", Duration::from_secs(20), || async {
        (!sink.received_on("probe").is_empty()).then_some(())
    })
    .await;
    stack.delete_job(probe["id"].as_str().unwrap()).await;
    let today = Utc::now().date_naive();
    let response = stack
        .http
        .put(format!("{}/v1/calendars/today", stack.api))
        .json(&json!({ "timezone": "UTC", "dates": [today.to_string(), today.succ_opt().unwrap().to_string()] }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let job = stack
        .create_job(json!({
            "name": "fresh-calendar", "calendars": ["today"],
            "schedule": { "kind": "cron", "expr": "* * * * * *", "timezone": "UTC" },
            "target": http_target(&sink.url("fresh")),
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    let rows = wait_for("six slots recorded", Duration::from_secs(30), || async {
        let rows = rows_of(&stack, &id).await;
        (rows.len() >= SLOTS).then_some(rows)
    })
    .await;
    for (slot, status, reason, _, _) in &rows {
        assert_eq!((status.as_str(), reason.as_deref()), ("skipped", Some("calendar:today")), "slot {slot}");
    }
    assert!(sink.received_on("fresh").is_empty(), "a slot was delivered past its calendar");
    stack.stop().await;
}

/// Deliveries of an execution at a sink, by attempt number.
fn attempts_at(sink: &Sink, path: &str, execution_id: &str) -> Vec<u32> {
    sink.received_on(path).iter().filter(|r| r.execution_id == execution_id).map(|r| r.attempt).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replay_gets_a_fresh_retry_budget_filters_by_error_and_trigger_and_keeps_the_original_claim() {
    let (down, unavailable) = (Sink::start().await, Sink::start().await);
    down.fail_first(usize::MAX, 500);
    unavailable.fail_first(usize::MAX, 503);
    let stack = stack_with_two_workers("replay-budget", Duration::from_secs(2)).await;
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(3));
    let retry = json!({ "max_retries": 1, "base_delay_ms": 200, "multiplier": 1.0, "max_delay_ms": 200 });
    let job = |name: &str, sink: &Sink| json!({ "name": name, "schedule": { "kind": "once", "at": at(due) }, "retry": retry, "target": http_target(&sink.url(name)) });
    let a = stack.create_job(job("a", &down)).await["id"].as_str().unwrap().to_owned();
    let b = stack.create_job(job("b", &unavailable)).await["id"].as_str().unwrap().to_owned();
    for id in [&a, &b] {
        let row = wait_for("the slot to fail for good", Duration::from_secs(20), || async {
            stack.ledger(id, due).await.filter(|r| r["status"] == "failed")
        })
        .await;
        assert_eq!(row["attempts"], 2, "1 attempt + 1 retry");
    }
    // A manual run of `a` fails too.
    let manual = stack.post(&format!("/v1/jobs/{a}/trigger")).await;
    let manual_id = manual["execution_id"].as_str().unwrap().to_owned();
    wait_for("the manual run to fail for good", Duration::from_secs(20), || async {
        (attempts_at(&down, "a", &manual_id).len() == 2).then_some(())
    })
    .await;

    // Replay what failed with 503, with three retries this time: `b` only.
    let response = stack
        .http
        .post(format!("{}/v1/executions/replay", stack.api))
        .json(&json!({ "error_contains": "503", "retry": { "max_retries": 3, "base_delay_ms": 100, "multiplier": 1.0, "max_delay_ms": 100 } }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let replayed: serde_json::Value = response.json().await.unwrap();
    assert_eq!(replayed["replayed"], 1, "{replayed}");
    assert_eq!(replayed["items"][0]["job_id"], b.as_str());
    let b_exec = format!("{b}@{}", at(due));
    let row = wait_for("the replay to fail for good again", Duration::from_secs(20), || async {
        stack.ledger(&b, due).await.filter(|r| r["status"] == "failed" && r["attempts"] == 6)
    })
    .await;
    // Attempts 3..6: the replay's first attempt and its own three retries.
    assert_eq!(attempts_at(&unavailable, "b", &b_exec), [1, 2, 3, 4, 5, 6]);
    let history = row["history"].as_array().unwrap();
    let replay = history.iter().find(|e| e["event"] == "replay").expect("a replay entry");
    assert_eq!(replay["retry_from"], 2);
    assert_eq!(replay["original"]["scheduler_node"], "node-a");
    assert_eq!(replay["original"]["status"], "failed");
    assert!(replay["original"]["fired_at"].as_str().is_some_and(|t| t < at(due).as_str()), "{replay}");
    // The scheduled `a` was not touched.
    assert_eq!(stack.ledger(&a, due).await.unwrap()["attempts"], 2);

    // Replay manual runs only: `a`'s triggered one, with the job's own policy.
    down.fail_first(0, 200);
    let response = stack
        .http
        .post(format!("{}/v1/executions/replay", stack.api))
        .json(&json!({ "trigger": "manual" }))
        .send()
        .await
        .unwrap();
    let replayed: serde_json::Value = response.json().await.unwrap();
    assert_eq!(replayed["replayed"], 1, "{replayed}");
    assert_eq!(replayed["items"][0]["execution_id"], manual_id.as_str());
    wait_for("the manual run's replay to succeed", Duration::from_secs(20), || async {
        (attempts_at(&down, "a", &manual_id) == [1, 2, 3]).then_some(())
    })
    .await;
    assert_eq!(attempts_at(&down, "a", &format!("{a}@{}", at(due))), [1, 2], "the scheduled slot was not replayed");

    // Bad filters name the field.
    for (body, field) in [
        (json!({ "trigger": "cron" }), "trigger"),
        (json!({ "error_contains": "" }), "error_contains"),
        (json!({ "retry": { "max_retries": -1 } }), "retry.max_retries"),
    ] {
        let r = stack.http.post(format!("{}/v1/executions/replay", stack.api)).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 422);
        let problem: serde_json::Value = r.json().await.unwrap();
        assert_eq!(problem["errors"][0]["field"], field, "{problem}");
    }
    stack.stop().await;
}

/// Broker data loss: the queues holding a `pending` slot's message and a
/// `retrying` slot's next attempt are deleted (as a broker that lost its
/// disk would have lost them). The stranded-row sweep publishes both again
/// under the same execution ids once they are past their bound, and each is
/// delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn messages_lost_with_the_brokers_queues_are_published_again_and_delivered_once() {
    use lapin::options::QueueDeleteOptions;
    let sink = Sink::start().await;
    sink.fail_first(1, 503);
    let mut stack = Stack::start("broker-loss").await;
    let mut node = stack.node_config("node-a");
    node.lookahead = Duration::from_secs(2);
    // The pending slot's repair (its due instant plus this) must come after
    // the retrying slot's first attempt, which takes the one 503.
    node.stranded_after = Duration::from_secs(6);
    stack.start_node(node);
    let topology = broker::amqp::Topology::new(&stack.cluster);
    let connection = broker::amqp::connect(&testing::amqp_url(), "test broker loss").await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let published = |job: String| {
        let pg = stack.pg.clone();
        async move {
            let id: uuid::Uuid = job.parse().unwrap();
            let client = pg.get().await.ok()?;
            let row = client
                .query_opt("SELECT 1 FROM scheduled_jobs WHERE job_id = $1 AND published_at IS NOT NULL", &[&id])
                .await
                .ok()?;
            row.map(|_| ())
        }
    };

    // A pending slot whose published message is lost with the main queue
    // (no worker runs yet, so the message waits there).
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(3));
    let pending = stack
        .create_job(json!({ "name": "pending", "schedule": { "kind": "once", "at": at(due) },
                            "target": http_target(&sink.url("pending")) }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for("the slot to be claimed and published", Duration::from_secs(15), || published(pending.clone())).await;
    let lost = channel.queue_delete(topology.main_queue.as_str().into(), QueueDeleteOptions::default()).await;
    assert_eq!(lost.unwrap(), 1, "the main queue held the slot's message");

    // A worker comes (and declares the queues again). A retrying slot: its
    // first attempt fails, and its retry, waiting 6 s in a delay queue, is lost too.
    stack.start_worker(stack.worker_config("worker-a"));
    let due2 = truncate_ms(Utc::now() + TimeDelta::seconds(3));
    let retrying = stack
        .create_job(json!({
            "name": "retrying", "schedule": { "kind": "once", "at": at(due2) },
            "retry": { "max_retries": 2, "base_delay_ms": 6000, "multiplier": 1.0, "max_delay_ms": 6000, "jitter": "none" },
            "target": http_target(&sink.url("retrying")),
        }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_for("the first attempt to fail", Duration::from_secs(15), || async {
        stack.ledger(&retrying, due2).await.filter(|r| r["status"] == "retrying")
    })
    .await;
    let lost = channel
        .queue_delete(
            topology
                .delay_queue(broker::amqp::Delayed::Retry, broker::amqp::retry_queue_delay_ms(6000))
                .as_str()
                .into(),
            QueueDeleteOptions::default(),
        )
        .await;
    assert_eq!(lost.unwrap(), 1, "the retry queue held the next attempt");

    for (id, slot, path, attempts) in [(&pending, due, "pending", vec![1]), (&retrying, due2, "retrying", vec![1, 2])] {
        let row = wait_for("the lost slot to be delivered", Duration::from_secs(60), || async {
            stack.ledger(id, slot).await.filter(|r| r["status"] == "succeeded")
        })
        .await;
        assert!(row["history"].to_string().contains("stranded"), "{row}");
        let got: Vec<u32> = sink.received_on(path).iter().map(|r| r.attempt).collect();
        assert_eq!(got, attempts, "{path}");
    }
    stack.stop().await;
}

/// Slots that reach a worker later than the misfire threshold follow their
/// job's misfire policy there, randomized and compared slot by slot with
/// the model. Jobs with random policies, periods and jitter fire while no
/// worker runs, so their messages wait in the broker (as behind an
/// overload); a worker starts after a random outage. Then every slot of
/// every job has a final row, and:
/// - delivered exactly once if and only if its row `succeeded`;
/// - `fire_all`: every slot delivered, however late;
/// - `skip`: a slot is delivered only if it started within the threshold
///   (plus the skip statement's own time); the skipped ones were later;
/// - `fire_once`: a late slot is skipped only when the job ran since it was
///   due (its reason names that run, another slot of the job that started
///   at or after this one's due instant), and delivered late otherwise: one
///   late delivery covers a run of late slots, and the job is never starved.
///
/// `MISFIRE_SEED` replays a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slots_reaching_a_worker_later_than_the_misfire_threshold_follow_their_jobs_misfire_policy() {
    const THRESHOLD: Duration = Duration::from_secs(2);
    // Between the worker judging a slot on time and the row's start: one
    // batched statement.
    let margin = TimeDelta::milliseconds(2500);
    let threshold = TimeDelta::from_std(THRESHOLD).unwrap();
    let seed: u64 = std::env::var("MISFIRE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64);
    eprintln!("MISFIRE_SEED={seed}");
    let mut rng = testing::SeededRng::new(seed);
    let sink = Sink::start().await;
    let mut stack = Stack::start("late").await;
    let mut node = stack.node_config("node-a");
    node.misfire_threshold = THRESHOLD;
    stack.start_node(node);

    struct Job {
        id: uuid::Uuid,
        policy: &'static str,
        jitter_ms: u64,
        slots: Vec<DateTime<Utc>>,
    }
    let start = Utc::now().with_nanosecond(0).unwrap() + TimeDelta::seconds(3);
    let end = start + TimeDelta::milliseconds(10_050);
    let mut jobs = Vec::new();
    for i in 0..9 + rng.below(9) {
        let policy = ["skip", "fire_once", "fire_all"][(i % 3) as usize];
        // Periods longer than the threshold too: then a job's newest due
        // slot can itself be late past it, which fire_once still delivers.
        // The first job of each policy fires often, so that some of its
        // slots are late past doubt.
        let every_ms = if i < 3 {
            [300i64, 500, 700][rng.below(3) as usize]
        } else {
            [300i64, 500, 700, 1000, 1500, 3000, 5000][rng.below(7) as usize]
        };
        let jitter_ms = [0u64, 0, 200][rng.below(3) as usize];
        let created = stack
            .create_job(json!({
                "name": format!("late-{i}"),
                "schedule": { "kind": "interval", "every_ms": every_ms, "start_at": at(start), "end_at": at(end) },
                "misfire": policy, "jitter_ms": jitter_ms, "target": http_target(&sink.url("late")),
            }))
            .await;
        let slots = (0..).map(|k| start + TimeDelta::milliseconds(k * every_ms)).take_while(|t| *t <= end).collect();
        jobs.push(Job { id: created["id"].as_str().unwrap().parse().unwrap(), policy, jitter_ms, slots });
    }
    assert!(Utc::now() < start, "creating the jobs took past their first slot");
    // The outage: longer than the threshold and its margin, so the first
    // slots are late past doubt when the worker comes.
    let worker_at = start + TimeDelta::milliseconds(rng.between(6_000, 8_000));
    tokio::time::sleep((worker_at - Utc::now()).to_std().unwrap()).await;
    let mut worker = stack.worker_config("worker-a");
    worker.misfire_threshold = THRESHOLD;
    stack.start_worker(worker);

    let expected: usize = jobs.iter().map(|j| j.slots.len()).sum();
    let ids: Vec<uuid::Uuid> = jobs.iter().map(|j| j.id).collect();
    type Row = (uuid::Uuid, DateTime<Utc>, String, Option<String>, Option<DateTime<Utc>>, Option<DateTime<Utc>>);
    let rows: Vec<Row> =
        wait_for("every slot of every job to reach a final status", Duration::from_secs(60), || async {
            let client = stack.pg.get().await.unwrap();
            let rows: Vec<Row> = client
                .query(
                    "SELECT job_id, scheduled_at, status, reason, started_at, finished_at FROM scheduled_jobs
                 WHERE job_id = ANY($1) ORDER BY job_id, scheduled_at",
                    &[&ids],
                )
                .await
                .unwrap()
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5)))
                .collect();
            (rows.len() == expected && rows.iter().all(|r| ["succeeded", "skipped"].contains(&r.2.as_str())))
                .then_some(rows)
        })
        .await;
    // No message was lost here, so no row waited for the stranded-row
    // sweep: one that did had its message dropped, or kept going round
    // between queues until the sweep published a fresh copy.
    let client = stack.pg.get().await.unwrap();
    let stranded: Vec<String> = client
        .query(
            "SELECT execution_id FROM scheduled_jobs WHERE job_id = ANY($1)
               AND jsonb_path_exists(history, '$[*] ? (@.event == \"stranded\")')",
            &[&ids],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(stranded.is_empty(), "rows moved on by the stranded-row sweep: {stranded:?}");
    let received = sink.received_on("late");
    let mut deliveries: std::collections::HashMap<String, usize> = Default::default();
    for r in &received {
        *deliveries.entry(r.execution_id.clone()).or_default() += 1;
    }
    let mut skipped_by = std::collections::HashMap::<&str, usize>::new();
    for job in &jobs {
        let job_rows: Vec<&Row> = rows.iter().filter(|r| r.0 == job.id).collect();
        assert_eq!(
            job_rows.iter().map(|r| r.1).collect::<Vec<_>>(),
            job.slots,
            "job {} ({}): the ledger's slots are the schedule's",
            job.id,
            job.policy
        );
        let due = |slot: DateTime<Utc>| slot + domain::schedule::jitter_offset(job.id, slot, job.jitter_ms);
        for (k, &&(_, slot, ref status, ref reason, started_at, finished_at)) in job_rows.iter().enumerate() {
            let what = format!("job {} ({}) slot {}: {status} {reason:?}", job.id, job.policy, at(slot));
            let delivered = deliveries.get(&domain::execution::execution_id(job.id, slot)).copied().unwrap_or(0);
            assert_eq!(delivered, usize::from(status == "succeeded"), "{what}: delivered {delivered} times");
            // The job's other slots that ran, with when they started.
            let runs = || {
                job_rows
                    .iter()
                    .enumerate()
                    .filter(|(i, r)| *i != k && r.2 == "succeeded")
                    .map(|(_, r)| (r.1, r.4.unwrap()))
            };
            match status.as_str() {
                "succeeded" => {
                    let started_at = started_at.unwrap();
                    let late = started_at - due(slot);
                    if late > threshold + margin {
                        assert_ne!(job.policy, "skip", "{what}: started {late} late");
                        // Delivered late: no other slot had run since this
                        // one was due when it was decided.
                        if job.policy == "fire_once"
                            && let Some((ran, ran_at)) =
                                runs().find(|(_, ran_at)| *ran_at >= due(slot) && *ran_at <= started_at - margin)
                        {
                            panic!(
                                "{what}: started {late} late though slot {} ran at {} since it was due",
                                at(ran),
                                at(ran_at)
                            );
                        }
                    }
                }
                _ => {
                    assert_ne!(job.policy, "fire_all", "{what}: fire_all delivers every slot");
                    let reason = reason.as_deref().unwrap();
                    assert!(reason.starts_with(&format!("misfire policy {}: ", job.policy)), "{what}");
                    assert!(finished_at.unwrap() - due(slot) > threshold, "{what}: skipped though on time");
                    if job.policy == "fire_once" {
                        let into = reason.split("coalesced into ").nth(1).and_then(|rest| rest.split(", ").next());
                        let into: DateTime<Utc> = into.and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("{what}"));
                        assert!(
                            runs().any(|(ran, ran_at)| ran == into && ran_at >= due(slot)),
                            "{what}: coalesced into a slot that did not run since this one was due"
                        );
                    }
                    *skipped_by.entry(job.policy).or_default() += 1;
                }
            }
        }
        // Late slots of a fire_once job decided together (a backlog) make
        // one delivery: of two delivered late, the one decided second saw
        // the first run start before its own due instant.
        if job.policy == "fire_once" {
            let late_runs: Vec<(DateTime<Utc>, DateTime<Utc>)> = job_rows
                .iter()
                .filter(|r| r.2 == "succeeded" && r.4.unwrap() - due(r.1) > threshold + margin)
                .map(|r| (due(r.1), r.4.unwrap()))
                .collect();
            for (i, a) in late_runs.iter().enumerate() {
                for b in &late_runs[i + 1..] {
                    assert!(
                        a.1 < b.0 + margin || b.1 < a.0 + margin,
                        "job {} (fire_once): slots due {} and {} both delivered late, each after the other was due",
                        job.id,
                        at(a.0),
                        at(b.0)
                    );
                }
            }
        }
    }
    // Every job's first slot was late past doubt: each policy that may skip did.
    assert!(skipped_by.get("skip").copied().unwrap_or(0) > 0, "nothing skipped under skip: {skipped_by:?}");
    assert!(skipped_by.get("fire_once").copied().unwrap_or(0) > 0, "nothing skipped under fire_once: {skipped_by:?}");
    stack.stop().await;
}
