//! A replay's `retry` overrides the job's retry policy field by field: a
//! field it does not name stays the job's (a replay with only
//! `max_retries` used to reset the job's 1 s backoff to the 30 s default).
//! Against the real server in-process on the real Postgres and Redis.

#[path = "support/lib.rs"]
mod support;

use chrono::{DateTime, Duration as TimeDelta, Utc};
use serde_json::{Value, json};
use support::*;
use uuid::Uuid;

async fn failed_row(pg: &tokio_postgres::Client, job: &str, at: DateTime<Utc>) {
    pg.execute(
        "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, finished_at, error)
         VALUES ($1, $2, $3, $4, 'failed', 2, now(), 'HTTP 503')",
        &[&Uuid::parse_str(job).unwrap(), &at, &Uuid::new_v4(), &format!("{job}@{}", ts(at))],
    )
    .await
    .unwrap();
}

async fn policy_of(pg: &tokio_postgres::Client, job: &str, at: DateTime<Utc>) -> Value {
    pg.query_one(
        "SELECT retry_policy FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2",
        &[&Uuid::parse_str(job).unwrap(), &at],
    )
    .await
    .unwrap()
    .get::<_, Option<Value>>(0)
    .unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_replays_retry_fields_override_the_jobs_policy_one_by_one() {
    let app = TestApp::start("replay-policy").await;
    let pg = app.sql().await;
    let mut job = example_job();
    job["retry"] = json!({"max_retries": 1, "base_delay_ms": 1000, "multiplier": 3.0, "max_delay_ms": 60000});
    let id = app.create_id(&job).await;
    let base = now_ms() - TimeDelta::hours(2);
    for k in 0..3 {
        failed_row(&pg, &id, base + TimeDelta::minutes(k)).await;
    }

    // One execution, only max_retries given: the job's backoff stays.
    let r = app
        .post_json(&format!("/v1/executions/{id}/{}/replay", enc(&ts(base))), &json!({"retry": {"max_retries": 5}}))
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(
        policy_of(&pg, &id, base).await,
        json!({"max_retries": 5, "base_delay_ms": 1000, "multiplier": 3.0, "max_delay_ms": 60000})
    );

    // In bulk, only the delay given: the job's retry count stays.
    let r = app
        .post_json(
            "/v1/executions/replay",
            &json!({"job_id": id, "status": "failed", "retry": {"base_delay_ms": 2000}}),
        )
        .await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["replayed"], json!(2));
    for k in 1..3 {
        assert_eq!(
            policy_of(&pg, &id, base + TimeDelta::minutes(k)).await,
            json!({"max_retries": 1, "base_delay_ms": 2000, "multiplier": 3.0, "max_delay_ms": 60000})
        );
    }

    // A bad field is refused by name, and nothing is replayed.
    failed_row(&pg, &id, base + TimeDelta::minutes(10)).await;
    let r = app.post_json("/v1/executions/replay", &json!({"job_id": id, "retry": {"base_delay_ms": 0}})).await;
    assert_invalid(&r, &["retry.base_delay_ms"]);
    assert_eq!(policy_of(&pg, &id, base + TimeDelta::minutes(10)).await, Value::Null);
}
