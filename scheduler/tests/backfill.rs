//! Backfills end to end (API, two schedulers, a worker, RabbitMQ,
//! Postgres): a job's past slots run under their own execution ids with
//! trigger `backfill`, at the rate and concurrency asked, each exactly once
//! though a scheduler is killed (-9) mid-backfill; a dry run lists what a
//! backfill would run and writes nothing; `failed` runs the failed slots
//! again, `missing` never re-runs a slot with a row, `all` does; a cancel
//! stops further slots.

#[path = "support/lib.rs"]
mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use support::*;
use testing::wait_for;

/// A job of a slot a minute, made now and paused (a backfill runs a paused
/// job's past slots; its own schedule fires nothing meanwhile): every slot
/// before now is one it never had.
async fn minutely_job(stack: &Stack, sink: &Sink, path: &str) -> String {
    let job = stack
        .create_job(json!({
            "name": path,
            "schedule": { "kind": "cron", "expr": "* * * * *", "timezone": "UTC" },
            "target": http_target(&sink.url(path)),
            "retry": { "max_retries": 0 },
            "paused": true,
        }))
        .await;
    job["id"].as_str().unwrap().to_owned()
}

async fn backfill(stack: &Stack, job: &str, body: Value) -> (u16, Value) {
    api(stack, Method::POST, &format!("/v1/jobs/{job}/backfill"), Some(body)).await
}

async fn until_state(stack: &Stack, id: &str, state: &str, within: Duration) -> Value {
    wait_for(&format!("backfill {id} {state}"), within, || async {
        let (_, b) = api(stack, Method::GET, &format!("/v1/backfills/{id}"), None).await;
        (b["state"] == state).then_some(b)
    })
    .await
}

fn minutes_before(now: DateTime<Utc>, n: i64) -> DateTime<Utc> {
    now.duration_trunc(TimeDelta::minutes(1)).unwrap() - TimeDelta::minutes(n)
}

fn ids(job: &str, slots: &[DateTime<Utc>]) -> BTreeSet<String> {
    slots.iter().map(|at| domain::execution::execution_id(job.parse().unwrap(), *at)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backfill_runs_each_missing_slot_once_at_its_pace_though_a_scheduler_is_killed() {
    const SLOTS: i64 = 30;
    const RATE: f64 = 5.0;
    const CONCURRENCY: usize = 3;
    let sink = Sink::start().await;
    sink.set_delay(Duration::from_millis(300));
    let stack = Stack::start("backfill").await;
    let env = stack.proc_env();
    let mut nodes = vec![env.scheduler("node-0"), env.scheduler("node-1")];
    let _worker = env.worker("worker-0");
    let job = minutely_job(&stack, &sink, "past").await;
    let now = Utc::now();
    let (from, to) = (minutes_before(now, SLOTS), minutes_before(now, 1));
    let slots: Vec<DateTime<Utc>> = (0..SLOTS).map(|k| from + TimeDelta::minutes(k)).collect();
    let range = |extra: Value| {
        let mut body =
            json!({ "from": domain::execution::format_instant(from), "to": domain::execution::format_instant(to) });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };

    let (status, plan) = backfill(&stack, &job, range(json!({"dry_run": true}))).await;
    assert_eq!(status, 200, "{plan}");
    assert_eq!((plan["planned"].as_i64(), plan["would_run"].as_i64()), (Some(SLOTS), Some(SLOTS)), "{plan}");
    assert_eq!(plan["slots"][0], domain::execution::format_instant(from));
    let (status, future) =
        backfill(&stack, &job, json!({"from": "2026-01-01T00:00:00Z", "to": "2999-01-01T00:00:00Z"})).await;
    assert_eq!(status, 422, "{future}");

    let (status, made) =
        backfill(&stack, &job, range(json!({"rate_per_second": RATE, "max_concurrency": CONCURRENCY}))).await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    assert_eq!(made["progress"]["planned"], SLOTS);
    let (status, second) = backfill(&stack, &job, range(json!({}))).await;
    assert_eq!(status, 409, "one running backfill per job: {second}");

    // A scheduler killed mid-backfill: the other carries it on.
    wait_for("a third of it delivered", Duration::from_secs(60), || async {
        (sink.received_on("past").len() >= (SLOTS / 3) as usize).then_some(())
    })
    .await;
    kill9(&nodes[0]);
    let _ = nodes[0].wait().await;
    let done = until_state(&stack, &id, "done", Duration::from_secs(120)).await;
    assert_eq!(done["progress"]["succeeded"], SLOTS, "{done}");
    assert_eq!((done["progress"]["remaining"].as_i64(), done["progress"]["in_flight"].as_i64()), (Some(0), Some(0)));

    let received = sink.received_on("past");
    assert_exactly_once(&received, &ids(&job, &slots));
    assert!(sink.peak_in_progress() <= CONCURRENCY, "peak {} > {CONCURRENCY}", sink.peak_in_progress());
    let mut at: Vec<DateTime<Utc>> = received.iter().map(|r| r.received_at).collect();
    at.sort();
    let span = (at[at.len() - 1] - at[0]).num_milliseconds() as f64 / 1000.0;
    let least = (SLOTS as f64 - CONCURRENCY as f64) / RATE;
    assert!(span >= least * 0.9, "{SLOTS} slots at {RATE}/s took {span} s, less than {least} s");
    let (_, listed) = api(&stack, Method::GET, &format!("/v1/jobs/{job}/executions?limit=100"), None).await;
    let backfilled: Vec<&Value> =
        listed["items"].as_array().unwrap().iter().filter(|i| i["trigger"] == "backfill").collect();
    assert_eq!(backfilled.len(), SLOTS as usize, "{listed}");
    assert!(backfilled.iter().all(|i| i["status"] == "succeeded"), "{listed}");
    drop(nodes);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_reruns_what_failed_missing_never_reruns_all_does_and_a_cancel_stops_it() {
    const SLOTS: i64 = 10;
    let sink = Sink::start().await;
    let stack = Stack::start("backfill-modes").await;
    let env = stack.proc_env();
    let _node = env.scheduler("node-0");
    let _worker = env.worker("worker-0");
    let job = minutely_job(&stack, &sink, "modes").await;
    let now = Utc::now();
    let (from, to) = (minutes_before(now, SLOTS), minutes_before(now, 1));
    let slots: Vec<DateTime<Utc>> = (0..SLOTS).map(|k| from + TimeDelta::minutes(k)).collect();
    let at = domain::execution::format_instant;
    let range = |mode: &str, extra: Value| {
        let mut body = json!({ "from": at(from), "to": at(to), "slots": mode, "rate_per_second": 100 });
        body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        body
    };
    // The job's own schedule fires too, once a minute: only the planned
    // slots' deliveries are counted.
    let planned = ids(&job, &slots);
    let backfilled = || -> Vec<Received> {
        sink.received_on("modes").into_iter().filter(|r| planned.contains(&r.execution_id)).collect()
    };
    let finished = |id: String| {
        let stack = &stack;
        async move { until_state(stack, &id, "done", Duration::from_secs(60)).await }
    };

    // The first 4 deliveries fail (no retries): 4 slots end failed.
    sink.fail_first(4, 500);
    let (_, made) = backfill(&stack, &job, range("missing", json!({"max_concurrency": 1}))).await;
    let first = finished(made["id"].as_str().unwrap().to_owned()).await;
    assert_eq!(
        (first["progress"]["succeeded"].as_i64(), first["progress"]["failed"].as_i64()),
        (Some(6), Some(4)),
        "{first}"
    );

    // Nothing is missing now; 4 slots failed.
    let (_, plan) = backfill(&stack, &job, range("missing", json!({"dry_run": true}))).await;
    assert_eq!(plan["would_run"], 0, "{plan}");
    let (_, plan) = backfill(&stack, &job, range("failed", json!({"dry_run": true}))).await;
    assert_eq!(plan["would_run"], 4, "{plan}");
    let (_, again) = backfill(&stack, &job, range("missing", json!({}))).await;
    let again = finished(again["id"].as_str().unwrap().to_owned()).await;
    assert_eq!(again["progress"]["passed_over"], SLOTS, "{again}");
    assert_eq!(backfilled().len(), SLOTS as usize, "missing never re-runs a slot with a row");

    let (_, rerun) = backfill(&stack, &job, range("failed", json!({}))).await;
    let rerun = finished(rerun["id"].as_str().unwrap().to_owned()).await;
    assert_eq!(
        (rerun["progress"]["succeeded"].as_i64(), rerun["progress"]["passed_over"].as_i64()),
        (Some(4), Some(6))
    );
    let received = backfilled();
    assert_eq!(received.len(), SLOTS as usize + 4);
    let failed_before: BTreeSet<String> =
        sink.answers().iter().filter(|(_, s)| *s == 500).map(|(e, _)| e.clone()).collect();
    for id in &planned {
        let n = received.iter().filter(|r| &r.execution_id == id).count();
        assert_eq!(n, if failed_before.contains(id) { 2 } else { 1 }, "{id}");
    }
    for slot in &slots {
        let row = stack.ledger(&job, *slot).await.unwrap();
        assert_eq!(row["status"], "succeeded", "{row}");
    }

    // `all` runs every slot again, here at one slot per 5 s: cancelled
    // after the first, no further slot starts.
    let (_, slow) = backfill(&stack, &job, range("all", json!({"rate_per_second": 0.2}))).await;
    let slow_id = slow["id"].as_str().unwrap().to_owned();
    wait_for("the first slot run again", Duration::from_secs(30), || async {
        (backfilled().len() > SLOTS as usize + 4).then_some(())
    })
    .await;
    let (status, cancelled) = api(&stack, Method::POST, &format!("/v1/backfills/{slow_id}/cancel"), None).await;
    assert_eq!((status, cancelled["state"].as_str()), (200, Some("cancelled")), "{cancelled}");
    let handled = SLOTS - cancelled["progress"]["remaining"].as_i64().unwrap();
    // Nothing to await but time: a slot would start 5 s after the last.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let (_, after) = api(&stack, Method::GET, &format!("/v1/backfills/{slow_id}"), None).await;
    assert_eq!(SLOTS - after["progress"]["remaining"].as_i64().unwrap(), handled, "{after}");
    assert_eq!(backfilled().len() as i64, SLOTS + 4 + handled, "no slot after the cancel");
    let (_, listed) = api(&stack, Method::GET, &format!("/v1/backfills?job={job}"), None).await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 4, "{listed}");
    let (_, audit) = api(&stack, Method::GET, "/v1/audit?action=job.backfill", None).await;
    assert_eq!(audit["items"].as_array().unwrap().len(), 4, "{audit}");
    stack.stop().await;
}
