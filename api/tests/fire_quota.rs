//! Fires made on request count against the namespace's
//! `max_fires_per_second`, as scheduled ones do: a burst of triggers from
//! several clients gets 429s (problem+json naming the quota, `Retry-After`)
//! once the budget is spent, and no more fires are made than the budget
//! allows; the same for bulk triggers and replays, one or in bulk.

#[path = "support/lib.rs"]
mod support;

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::{Value, json};
use support::*;
use uuid::Uuid;

const QUOTA: f64 = 5.0;

fn job(name: &str, namespace: &str) -> Value {
    json!({
        "name": name,
        "namespace": namespace,
        "schedule": { "kind": "interval", "every_ms": 3_600_000 },
        "target": http_target(),
        "labels": { "set": "quota" },
    })
}

async fn namespace(app: &TestApp, name: &str, max_fires_per_second: Option<f64>) {
    let r =
        app.post_json("/v1/namespaces", &json!({ "name": name, "max_fires_per_second": max_fires_per_second })).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

async fn manual_rows(app: &TestApp, namespace: &str) -> i64 {
    app.sql()
        .await
        .query_one(
            "SELECT count(*) FROM scheduled_jobs l JOIN jobs j ON j.id = l.job_id
              WHERE j.namespace = $1 AND l.trigger = 'manual'",
            &[&namespace],
        )
        .await
        .unwrap()
        .get(0)
}

/// A 429 as the brief asks: problem+json naming the quota, `Retry-After`.
fn assert_over_quota(r: &Resp) {
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("application/problem+json"));
    let retry_after: u64 = r.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
    let detail = r.json()["detail"].as_str().unwrap().to_owned();
    assert!(detail.contains("max_fires_per_second 5"), "{detail}");
}

/// Waits until the namespace's budget is whole again (one burst's worth).
async fn refill() {
    tokio::time::sleep(Duration::from_millis(1_100)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_triggers_from_several_clients_gets_no_more_than_the_quota() {
    let app = std::sync::Arc::new(TestApp::start("fire-quota-burst").await);
    namespace(&app, "metered", Some(QUOTA)).await;
    namespace(&app, "free", None).await;
    let id = app.create_id(&job("metered", "metered")).await;

    const CLIENTS: usize = 8;
    const EACH: usize = 25;
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (app, id) = (app.clone(), id.clone());
            tokio::spawn(async move {
                let mut out = Vec::new();
                for _ in 0..EACH {
                    out.push(app.post_empty(&format!("/v1/jobs/{id}/trigger")).await);
                }
                out
            })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let accepted = answers.iter().filter(|r| r.status == 202).count();
    for r in answers.iter().filter(|r| r.status != 202) {
        assert_over_quota(r);
    }
    // The budget: a burst of one second's worth, then the rate.
    let budget = (QUOTA + QUOTA * elapsed).floor() as usize + 1;
    assert!(accepted >= QUOTA as usize, "{accepted} accepted");
    assert!(accepted <= budget, "{accepted} accepted in {elapsed:.2} s, over the budget of {budget}");
    assert!(accepted < CLIENTS * EACH, "nothing was refused");
    // No refused request made a fire.
    assert_eq!(manual_rows(&app, "metered").await, accepted as i64);

    // A namespace without the quota is not metered.
    let free = app.create_id(&job("free", "free")).await;
    for _ in 0..20 {
        assert_eq!(app.post_empty(&format!("/v1/jobs/{free}/trigger")).await.status, 202);
    }
}

#[tokio::test]
async fn bulk_triggers_and_replays_spend_the_same_budget() {
    let app = TestApp::start("fire-quota-bulk").await;
    namespace(&app, "metered", Some(QUOTA)).await;
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(app.create_id(&job(&format!("j{i}"), "metered")).await);
    }
    let bulk = json!({ "action": "trigger", "selector": "set=quota" });
    // Four fires of a budget of five: made; four more at once: refused, none made.
    let r = app.post_json("/v1/jobs/bulk", &bulk).await;
    assert_eq!((r.status, &r.json()["changed"]), (200, &json!(4)), "{}", r.text);
    let r = app.post_json("/v1/jobs/bulk", &bulk).await;
    assert_over_quota(&r);
    assert_eq!(manual_rows(&app, "metered").await, 4);
    // More fires at once than the quota ever allows: a 409 that says so.
    app.create_id(&job("j4", "metered")).await;
    app.create_id(&job("j5", "metered")).await;
    refill().await;
    let r = app.post_json("/v1/jobs/bulk", &bulk).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert!(r.json()["detail"].as_str().unwrap().contains("6 fires"), "{}", r.text);
    assert_eq!(manual_rows(&app, "metered").await, 4);

    // Replays: failed rows of the metered jobs.
    let sql = app.sql().await;
    let at = domain::execution::truncate_ms(Utc::now() - chrono::TimeDelta::minutes(5));
    for (i, id) in ids.iter().enumerate() {
        let at = at + chrono::TimeDelta::seconds(i as i64);
        let job_id = Uuid::parse_str(id).unwrap();
        sql.execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, error, fired_at)
             VALUES ($1, $2, gen_random_uuid(), $3, 'failed', 1, 'HTTP 503', $2)",
            &[&job_id, &at, &format!("{id}@{}", domain::execution::format_instant(at))],
        )
        .await
        .unwrap();
    }
    refill().await;
    // One replay after another: the budget's five fit, then one is refused.
    let one = |i: usize| {
        format!(
            "/v1/executions/{}/{}/replay",
            ids[i],
            domain::execution::format_instant(at + chrono::TimeDelta::seconds(i as i64))
        )
    };
    let started = Instant::now();
    let mut replayed = 0;
    let refused = loop {
        sql.execute("UPDATE scheduled_jobs SET status = 'failed' WHERE trigger <> 'manual'", &[]).await.unwrap();
        let r = app.post_empty(&one(replayed % 4)).await;
        if r.status != 202 {
            break r;
        }
        replayed += 1;
        assert!(replayed < 50, "never refused");
    };
    assert_over_quota(&refused);
    let budget = (QUOTA + QUOTA * started.elapsed().as_secs_f64()).floor() as usize + 1;
    assert!((5..=budget).contains(&replayed), "{replayed} replays fit a budget of {budget}");
    // Refused: the row is still failed, not replayed.
    let job_id = Uuid::parse_str(&ids[replayed % 4]).unwrap();
    let status: String = sql
        .query_one("SELECT status FROM scheduled_jobs WHERE job_id = $1 AND trigger <> 'manual'", &[&job_id])
        .await
        .unwrap()
        .get(0);
    assert_eq!(status, "failed");
    // In bulk: all or none.
    let r = app.post_json("/v1/executions/replay", &json!({ "status": "failed", "limit": 4 })).await;
    assert_over_quota(&r);
    refill().await;
    let r = app.post_json("/v1/executions/replay", &json!({ "status": "failed", "limit": 4 })).await;
    assert_eq!((r.status, &r.json()["replayed"]), (202, &json!(4)), "{}", r.text);
}
