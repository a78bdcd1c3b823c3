//! `PATCH /v1/jobs/{id}` (JSON Merge Patch, RFC 7396): nested objects merge,
//! `null` removes, secret header values stay as stored, the result is
//! validated as a create's body (422 naming the field), `If-Match` guards
//! it (412), and it changes the job as a replace does. Against the real
//! server in-process on the real Postgres and Redis (own database, cluster
//! name and server per test).

#[path = "support/lib.rs"]
mod support;

use chrono::Duration as TimeDelta;
use serde_json::{Value, json};
use support::*;
use uuid::Uuid;

async fn patch(app: &TestApp, id: &str, body: &Value, content_type: &str, if_match: Option<&str>) -> Resp {
    let mut rb =
        app.http.patch(app.url(&format!("/v1/jobs/{id}"))).header("content-type", content_type).body(body.to_string());
    if let Some(v) = if_match {
        rb = rb.header("if-match", v);
    }
    app.send(rb).await
}

const MERGE: &str = "application/merge-patch+json";

fn job_with_everything() -> Value {
    json!({
        "name": "report",
        "schedule": { "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin",
                      "end_at": "2099-01-01T00:00:00Z" },
        "target": {
            "kind": "http", "url": "https://reports.example.com/run", "timeout_ms": 5000,
            "headers": { "x-a": "1", "x-b": "2" },
            "secret_headers": { "Authorization": "Bearer s3cret-never-shown" },
        },
        "retry": { "max_retries": 3, "base_delay_ms": 1000, "multiplier": 2.0 },
        "labels": { "team": "payments", "tier": "web" },
    })
}

/// The stored definition, as the database holds it (secrets included).
async fn stored(app: &TestApp, id: &str) -> Value {
    let row = app
        .sql()
        .await
        .query_one("SELECT spec FROM jobs WHERE id = $1", &[&Uuid::parse_str(id).unwrap()])
        .await
        .unwrap();
    row.get(0)
}

#[tokio::test]
async fn a_merge_patch_merges_nested_objects_removes_nulls_and_keeps_secrets() {
    let app = TestApp::start("patch-merge").await;
    let id = app.create_id(&job_with_everything()).await;
    let body = json!({
        "labels": { "tier": null, "env": "prod" },
        "target": { "headers": { "x-a": null, "x-c": "3" }, "timeout_ms": 2000 },
        "schedule": { "end_at": null },
        "retry": null,
    });
    let r = patch(&app, &id, &body, MERGE, Some("\"1\"")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("etag"), Some("\"2\""));
    let job = r.json();
    assert_eq!(job["version"], json!(2));
    assert_eq!(job["labels"], json!({ "team": "payments", "env": "prod" }));
    assert_eq!(job["target"]["headers"], json!({ "x-b": "2", "x-c": "3" }));
    assert_eq!(job["target"]["timeout_ms"], json!(2000));
    // Untouched members of a merged object stay.
    assert_eq!(job["target"]["url"], "https://reports.example.com/run");
    assert_eq!(job["schedule"], json!({ "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin" }));
    assert!(job.get("retry").is_none(), "{job}");
    // The secret was never sent and is still stored; it is shown masked.
    assert_eq!(job["target"]["secret_headers"]["Authorization"], "***");
    assert!(!r.text.contains("s3cret"), "{}", r.text);
    let spec = stored(&app, &id).await;
    let sealed = spec["target"]["secret_headers"]["Authorization"].as_str().unwrap();
    assert!(sealed.starts_with(store::secrets::SEALED_PREFIX) && !sealed.contains("s3cret"), "stored sealed: {sealed}");
    assert!(spec.get("retry").is_none(), "{spec}");
    // GET answers what PATCH did.
    assert_eq!(app.job(&id).await, job);

    // Plain application/json is read as a merge patch too; a secret can be
    // replaced or removed by name.
    let r = patch(
        &app,
        &id,
        &json!({ "target": { "secret_headers": { "Authorization": null } } }),
        "application/json",
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["target"].get("secret_headers").is_none(), "{}", r.text);
    assert!(stored(&app, &id).await["target"].get("secret_headers").is_none());
}

#[tokio::test]
async fn an_invalid_result_is_a_422_naming_the_field_and_changes_nothing() {
    let app = TestApp::start("patch-invalid").await;
    let id = app.create_id(&job_with_everything()).await;
    let before = app.job(&id).await;
    let cases: [(Value, &[&str]); 7] = [
        (json!({ "schedule": { "expr": "61 * * * *" } }), &["schedule.expr"]),
        (json!({ "name": null }), &["name"]),
        (json!({ "labels": { "Bad Key": "x" } }), &["labels.Bad Key"]),
        (json!({ "retry": { "max_retries": 99 } }), &["retry.max_retries"]),
        (json!({ "schedul": { "kind": "once" } }), &["schedul"]),
        // Another kind keeps the old kind's members unless the patch removes them.
        (
            json!({ "schedule": { "kind": "once", "at": "2099-01-01T00:00:00Z" } }),
            &["schedule.expr", "schedule.timezone"],
        ),
        (
            json!({ "schedule": { "kind": "once", "at": "2001-01-01T00:00:00Z", "expr": null, "timezone": null } }),
            &["schedule.at"],
        ),
    ];
    for (body, fields) in cases {
        assert_invalid(&patch(&app, &id, &body, MERGE, None).await, fields);
    }
    // A patch that is not an object replaces the whole definition (RFC 7396).
    assert_invalid(&patch(&app, &id, &json!(["x"]), MERGE, None).await, &[""]);
    assert_eq!(app.job(&id).await, before);
}

#[tokio::test]
async fn if_match_guards_a_patch_and_other_media_types_are_415() {
    let app = TestApp::start("patch-ifmatch").await;
    let id = app.create_id(&job_with_everything()).await;
    let r = patch(&app, &id, &json!({ "name": "renamed" }), MERGE, Some("\"1\"")).await;
    assert_eq!((r.status, r.json()["name"].clone()), (200, json!("renamed")), "{}", r.text);
    // Version 1 is gone: a client that read it must read again.
    let stale = patch(&app, &id, &json!({ "name": "again" }), MERGE, Some("\"1\"")).await;
    assert_problem(&stale, 412);
    assert_eq!(app.job(&id).await["name"], "renamed");
    let r = patch(&app, &id, &json!({ "name": "again" }), MERGE, Some("*")).await;
    assert_eq!((r.status, r.header("etag")), (200, Some("\"3\"")), "{}", r.text);

    for content_type in ["application/json-patch+json", "text/plain", "application/merge-patch+json; charset=latin1"] {
        let r = patch(&app, &id, &json!({ "name": "x" }), content_type, None).await;
        assert_problem(&r, 415);
        assert_eq!(r.header("accept-patch"), Some(MERGE), "{content_type}");
    }
    assert_problem(&patch(&app, &Uuid::new_v4().to_string(), &json!({ "name": "x" }), MERGE, None).await, 404);
    assert_eq!(app.job(&id).await["version"], json!(3));
}

#[tokio::test]
async fn a_patch_changes_the_job_as_a_replace_does() {
    let app = TestApp::start("patch-supersede").await;
    let id = app.create_id(&job_with_everything()).await;
    // A claimed row of a slot after the change is cancelled as superseded,
    // as a replace cancels it.
    let at = now_ms() + TimeDelta::hours(1);
    app.sql()
        .await
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, job_version)
             VALUES ($1, $2, $3, $4, 'pending', 1)",
            &[&Uuid::parse_str(&id).unwrap(), &at, &Uuid::now_v7(), &format!("{id}@{}", ts(at))],
        )
        .await
        .unwrap();
    let r = patch(&app, &id, &json!({ "schedule": { "expr": "0 9 * * *" } }), MERGE, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let rows = app.get(&format!("/v1/jobs/{id}/executions")).await.json();
    assert_eq!(rows["items"][0]["status"], "skipped", "{rows}");
    assert_eq!(rows["items"][0]["reason"], "superseded", "{rows}");
    // Pausing is state, not definition: a patch that would pause is refused.
    let r = patch(&app, &id, &json!({ "paused": true }), MERGE, None).await;
    assert_invalid(&r, &["paused"]);
    assert_eq!(app.job(&id).await["paused"], json!(false));
    // A job cannot move namespace by patch either.
    assert_invalid(&patch(&app, &id, &json!({ "namespace": "elsewhere" }), MERGE, None).await, &["namespace"]);
}
