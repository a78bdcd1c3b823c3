//! A job's definition and its operational state apart: who paused a job,
//! when and why is kept by a replace or patch of the definition (which
//! never resumes it), labels a PUT leaves out are kept, a pause note is
//! stored (never dropped), and "in the future" is checked only for a
//! schedule being set. Against the real server in-process on the real
//! Postgres and Redis (own database, cluster name and server per test).

#[path = "support/lib.rs"]
mod support;

use reqwest::Method;
use serde_json::{Value, json};
use support::*;

const BOOTSTRAP: &str = "bootstrap-admin-token-for-state-tests";

async fn call(app: &TestApp, token: &str, method: Method, path: &str, body: Option<&Value>) -> Resp {
    let mut rb = app.http.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        rb = rb.json(body);
    }
    app.send(rb).await
}

/// A merge patch of job `id` with the bootstrap token.
async fn merge_patch(app: &TestApp, id: &str, patch: &Value) -> Resp {
    let rb = app
        .http
        .patch(app.url(&format!("/v1/jobs/{id}")))
        .bearer_auth(BOOTSTRAP)
        .header("content-type", "application/merge-patch+json")
        .body(patch.to_string());
    app.send(rb).await
}

fn definition() -> Value {
    json!({
        "name": "nightly",
        "schedule": { "kind": "cron", "expr": "0 2 * * *", "timezone": "Europe/Berlin" },
        "target": { "kind": "http", "url": "https://example.com/run" },
        "labels": { "team": "payments" },
    })
}

#[tokio::test]
async fn a_pause_keeps_who_when_and_why_through_put_and_patch_and_a_put_keeps_labels() {
    let app =
        TestApp::start_with("job-state", Options { tokens: vec![BOOTSTRAP.to_owned()], ..Default::default() }).await;
    // A stored token, so that the pause names it.
    let made = call(
        &app,
        BOOTSTRAP,
        Method::POST,
        "/v1/tokens",
        Some(&json!({"name": "oncall-alice", "role": "write", "namespaces": ["default"]})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text);
    let alice = made.json()["token"].as_str().unwrap().to_owned();
    let alice_id = made.json()["id"].as_str().unwrap().to_owned();

    let created = call(&app, BOOTSTRAP, Method::POST, "/v1/jobs", Some(&definition())).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(created.json()["pause"], Value::Null);

    let paused = call(
        &app,
        &alice,
        Method::POST,
        &format!("/v1/jobs/{id}/pause"),
        Some(&json!({"note": "receiver maintenance"})),
    )
    .await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    let pause = paused.json()["pause"].clone();
    assert_eq!(pause["by"], "oncall-alice");
    assert_eq!(pause["by_token_id"], alice_id.as_str());
    assert_eq!(pause["note"], "receiver maintenance");
    assert!(pause["at"].is_string(), "{pause}");
    assert_eq!(paused.json()["paused"], true);

    // A deploy pipeline PUTs the definition it keeps, without paused or labels.
    let mut redeployed = definition();
    redeployed.as_object_mut().unwrap().remove("labels");
    redeployed["target"]["url"] = json!("https://example.com/run-v2");
    let put = call(&app, BOOTSTRAP, Method::PUT, &format!("/v1/jobs/{id}"), Some(&redeployed)).await;
    assert_eq!(put.status, 200, "{}", put.text);
    let job = put.json();
    assert_eq!(job["paused"], true, "a PUT resumed the job: {job}");
    assert_eq!(job["pause"], pause, "a PUT changed who paused it: {job}");
    assert_eq!(job["labels"], json!({"team": "payments"}), "a PUT dropped the labels: {job}");
    assert_eq!(job["target"]["url"], "https://example.com/run-v2");
    assert_eq!(job["next_fire_at"], Value::Null);

    // Labels given are replaced; an empty object clears them.
    let mut relabelled = redeployed.clone();
    relabelled["labels"] = json!({});
    let put = call(&app, BOOTSTRAP, Method::PUT, &format!("/v1/jobs/{id}"), Some(&relabelled)).await;
    assert_eq!(put.status, 200, "{}", put.text);
    assert_eq!(put.json()["labels"], Value::Null);
    assert_eq!(put.json()["paused"], true);

    // A patch of the definition keeps the state too.
    let patched = merge_patch(&app, &id, &json!({"labels": {"tier": "web"}})).await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    assert_eq!(patched.json()["paused"], true);
    assert_eq!(patched.json()["pause"], pause);

    // Pausing through the definition is refused with a pointer to the route,
    // by PUT and by PATCH alike; the same state given back is fine.
    let mut resume_by_put = redeployed.clone();
    resume_by_put["paused"] = json!(false);
    let refused = call(&app, BOOTSTRAP, Method::PUT, &format!("/v1/jobs/{id}"), Some(&resume_by_put)).await;
    let problem = assert_problem(&refused, 422);
    assert!(problem.to_string().contains("/resume"), "{problem}");
    let refused = merge_patch(&app, &id, &json!({"paused": false})).await;
    assert_problem(&refused, 422);
    resume_by_put["paused"] = json!(true);
    let same = call(&app, BOOTSTRAP, Method::PUT, &format!("/v1/jobs/{id}"), Some(&resume_by_put)).await;
    assert_eq!(same.status, 200, "{}", same.text);
    let job = call(&app, BOOTSTRAP, Method::GET, &format!("/v1/jobs/{id}"), None).await;
    assert_eq!(job.json()["paused"], true);

    // Resume clears the pause state; it takes a note (for the audit log)
    // and no other field (nothing is dropped silently).
    let refused =
        call(&app, BOOTSTRAP, Method::POST, &format!("/v1/jobs/{id}/resume"), Some(&json!({"reason": "x"}))).await;
    assert_problem(&refused, 422);
    let resumed = call(&app, BOOTSTRAP, Method::POST, &format!("/v1/jobs/{id}/resume"), None).await;
    assert_eq!(resumed.status, 200, "{}", resumed.text);
    assert_eq!(resumed.json()["paused"], false);
    assert_eq!(resumed.json()["pause"], Value::Null);

    // A bootstrap token is named by its position; an empty body pauses without a note.
    let paused = call(&app, BOOTSTRAP, Method::POST, &format!("/v1/jobs/{id}/pause"), None).await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    assert_eq!(paused.json()["pause"]["by"], "bootstrap token #1");
    assert_eq!(paused.json()["pause"]["note"], Value::Null);
}

#[tokio::test]
async fn a_pause_refuses_unknown_fields_and_bad_notes_and_stores_nothing() {
    let app = TestApp::start("job-state-refusals").await;
    let id = app.create_id(&definition()).await;
    for (body, field) in [
        (json!({"notes": "typo"}), "notes"),
        (json!({"note": "a\u{1b}[31mred"}), "note"),
        (json!({"note": "ok\u{202e}desrever"}), "note"),
        (json!({"note": "x".repeat(501)}), "note"),
        (json!({"note": 5}), "note"),
    ] {
        let r = app.post_json(&format!("/v1/jobs/{id}/pause"), &body).await;
        let problem = assert_problem(&r, 422);
        assert!(problem.to_string().contains(field), "{body} → {problem}");
        let job = app.job(&id).await;
        assert_eq!(job["paused"], false, "a refused pause paused the job");
        assert_eq!(job["version"], 1);
    }
}

#[tokio::test]
async fn a_one_time_job_whose_time_passed_can_be_edited_but_not_rescheduled_into_the_past() {
    let app = TestApp::start("job-state-past-once").await;
    let at = now_ms() + chrono::Duration::milliseconds(1_500);
    let mut body = json!({
        "name": "once",
        "schedule": { "kind": "once", "at": ts(at) },
        "target": { "kind": "http", "url": "https://example.com/once" },
    });
    let id = app.create_id(&body).await;
    // Its time passes (the wait is for the instant itself, not for an event).
    tokio::time::sleep((at - now_ms()).to_std().unwrap_or_default() + std::time::Duration::from_millis(50)).await;

    // An edit that keeps the schedule is taken.
    body["labels"] = json!({"x": "y"});
    let r = app.put_json(&format!("/v1/jobs/{id}"), &body, Some("\"1\"")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["labels"], json!({"x": "y"}));
    // A stale If-Match is a 412, whatever the body.
    let r = app.put_json(&format!("/v1/jobs/{id}"), &body, Some("\"1\"")).await;
    assert_problem(&r, 412);
    // Setting a schedule in the past is still refused.
    body["schedule"]["at"] = json!(ts(at - chrono::Duration::seconds(60)));
    let r = app.put_json(&format!("/v1/jobs/{id}"), &body, Some("\"2\"")).await;
    assert_invalid(&r, &["schedule.at"]);
}
