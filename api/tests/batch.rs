//! `POST /v1/jobs/batch`: many jobs in one request, each validated as a
//! single create, per-item answers or all-or-nothing, idempotent per request.
//! Against the real server in-process on the real Postgres (own database).

#[path = "support/lib.rs"]
mod support;

use chrono::{Duration as TimeDelta, Utc};
use reqwest::Method;
use serde_json::{Value, json};

use support::*;

fn job(i: usize) -> Value {
    cron_job(&format!("batch-{i}"), "0 8 * * *", "Europe/Berlin")
}

fn bad_expr(i: usize) -> Value {
    cron_job(&format!("bad-{i}"), "0 25 * * *", "UTC")
}

#[tokio::test]
async fn valid_jobs_are_created_and_invalid_ones_answered_in_request_order() {
    let app = TestApp::start("batch-mixed").await;
    let mut past = job(9);
    past["schedule"] = json!({ "kind": "once", "at": ts(Utc::now() - TimeDelta::hours(1)) });
    let mut with_calendar = job(8);
    with_calendar["calendars"] = json!(["missing"]);
    let body = json!({ "jobs": [job(0), bad_expr(1), job(2), past, with_calendar, job(5)] });
    let r = app.post_json("/v1/jobs/batch", &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!((v["created"].as_u64(), v["refused"].as_u64()), (Some(3), Some(3)), "{v}");
    let statuses: Vec<u64> = v["items"].as_array().unwrap().iter().map(|i| i["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [201, 422, 201, 422, 422, 201]);
    let items = v["items"].as_array().unwrap();
    assert_eq!(items[1]["errors"][0]["field"], "schedule.expr");
    assert_eq!(items[3]["errors"][0]["field"], "schedule.at");
    assert_eq!(items[4]["errors"][0]["field"], "calendars[0]");
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item["index"], i);
        if item["status"] == 201 {
            let id = item["job"]["id"].as_str().unwrap();
            assert_eq!(app.job(id).await["name"], format!("batch-{i}"));
        }
    }
    assert_eq!(app.job_rows().await, 3);
}

#[tokio::test]
async fn an_atomic_batch_creates_all_or_none_naming_each_bad_job() {
    let app = TestApp::start("batch-atomic").await;
    let r = app
        .post_json("/v1/jobs/batch", &json!({ "atomic": true, "jobs": [job(0), bad_expr(1), job(2), bad_expr(3)] }))
        .await;
    assert_invalid(&r, &["jobs[1].schedule.expr", "jobs[3].schedule.expr"]);
    assert_eq!(app.job_rows().await, 0, "nothing may be created");
    let r =
        app.post_json("/v1/jobs/batch", &json!({ "atomic": true, "jobs": (0..50).map(job).collect::<Vec<_>>() })).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json()["created"], 50);
    assert_eq!(app.job_rows().await, 50);
}

#[tokio::test]
async fn a_retried_batch_with_its_idempotency_key_creates_nothing_twice() {
    let app = TestApp::start("batch-idempotent").await;
    let body = json!({ "jobs": (0..20).map(job).collect::<Vec<_>>() });
    let send = || app.send(app.http.post(app.url("/v1/jobs/batch")).header("Idempotency-Key", "batch-1").json(&body));
    let first = send().await;
    assert_eq!(first.status, 200, "{}", first.text);
    let again = send().await;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json(), first.json());
    assert_eq!(app.job_rows().await, 20);
    // The same key with other jobs is refused.
    let other = app
        .send(
            app.http
                .post(app.url("/v1/jobs/batch"))
                .header("Idempotency-Key", "batch-1")
                .json(&json!({ "jobs": [job(99)] })),
        )
        .await;
    assert_invalid(&other, &["Idempotency-Key"]);
}

#[tokio::test]
async fn malformed_batches_name_what_is_wrong() {
    let app = TestApp::start("batch-malformed").await;
    assert_invalid(&app.post_json("/v1/jobs/batch", &json!({ "jobs": [] })).await, &["jobs"]);
    assert_invalid(
        &app.post_json("/v1/jobs/batch", &json!({ "jobs": (0..1001).map(job).collect::<Vec<_>>() })).await,
        &["jobs"],
    );
    assert_invalid(&app.post_json("/v1/jobs/batch", &json!({ "jobs": [job(0)], "atomic": "yes" })).await, &["atomic"]);
    assert_invalid(&app.post_json("/v1/jobs/batch", &json!({ "jobs": [job(0)], "extra": 1 })).await, &["extra"]);
    assert_eq!(app.job_rows().await, 0);
}

#[tokio::test]
async fn a_namespaces_quota_holds_for_the_whole_batch() {
    const ADMIN: &str = "bootstrap-admin-token-for-batch";
    let app =
        TestApp::start_with("batch-quota", Options { tokens: vec![ADMIN.to_owned()], ..Default::default() }).await;
    let call = |method: Method, path: &str, body: Value| {
        app.send(app.http.request(method, app.url(path)).bearer_auth(ADMIN).json(&body))
    };
    assert_eq!(call(Method::POST, "/v1/namespaces", json!({ "name": "small", "max_jobs": 3 })).await.status, 201);
    let in_small = |i| {
        let mut j = job(i);
        j["namespace"] = json!("small");
        j
    };
    // Four for a namespace with room for three, two for default.
    let r = call(
        Method::POST,
        "/v1/jobs/batch",
        json!({ "jobs": [in_small(0), job(1), in_small(2), in_small(3), in_small(4), job(5)] }),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let statuses: Vec<u64> =
        r.json()["items"].as_array().unwrap().iter().map(|i| i["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [409, 201, 409, 409, 409, 201]);
    // Atomic: the quota refuses everything.
    let r = call(
        Method::POST,
        "/v1/jobs/batch",
        json!({ "atomic": true, "jobs": [job(6), in_small(7), in_small(8), in_small(9), in_small(10)] }),
    )
    .await;
    assert_problem(&r, 409);
    assert_eq!(app.job_rows().await, 2);
    // Three fit.
    let r = call(
        Method::POST,
        "/v1/jobs/batch",
        json!({ "atomic": true, "jobs": [in_small(11), in_small(12), in_small(13)] }),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text);
}
