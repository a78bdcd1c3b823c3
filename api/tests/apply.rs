//! Jobs as code: a job's key (unique among its namespace's live jobs,
//! usable wherever an id is) and `POST /v1/apply`, which makes a
//! namespace's keyed jobs equal to a set of documents: a second apply of
//! the same documents writes nothing (no version, no job change), a changed
//! document changes only its job, prune deletes exactly the keyed jobs its
//! selector matches that no document names, a paused job stays paused, a
//! refused apply writes nothing. Against the real server in-process on the
//! real Postgres.

#[path = "support/lib.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use reqwest::Method;
use serde_json::{Value, json};
use support::*;

const BOOTSTRAP: &str = "bootstrap-admin-token-for-apply-tests";

async fn app(label: &str) -> TestApp {
    TestApp::start_with(label, Options { tokens: vec![BOOTSTRAP.to_owned()], ..Default::default() }).await
}

async fn call(app: &TestApp, method: Method, path: &str, body: Option<&Value>) -> Resp {
    let mut rb = app.http.request(method, app.url(path)).bearer_auth(BOOTSTRAP);
    if let Some(body) = body {
        rb = rb.json(body);
    }
    app.send(rb).await
}

async fn apply(app: &TestApp, request: &Value) -> Resp {
    call(app, Method::POST, "/v1/apply", Some(request)).await
}

fn document(key: &str, team: &str, hour: u32) -> Value {
    json!({
        "key": key,
        "name": format!("report {key}"),
        "schedule": { "kind": "cron", "expr": format!("0 {hour} * * *"), "timezone": "Europe/Berlin" },
        "target": { "kind": "http", "url": format!("https://example.com/{key}") },
        "labels": { "team": team },
    })
}

/// Every job's version and the number of versions recorded for it, by key.
async fn versions(app: &TestApp) -> BTreeMap<String, (i64, i64)> {
    let sql = app.sql().await;
    sql.query(
        "SELECT j.key, j.version, (SELECT count(*) FROM job_changes c WHERE c.job_id = j.id)
         FROM jobs j WHERE j.key IS NOT NULL AND j.deleted_at IS NULL",
        &[],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), (r.get(1), r.get(2))))
    .collect()
}

async fn create(app: &TestApp, body: &Value) -> String {
    let r = call(app, Method::POST, "/v1/jobs", Some(body)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()["id"].as_str().unwrap().to_owned()
}

fn summary(r: &Resp) -> (u64, u64, u64, u64) {
    assert_eq!(r.status, 200, "{}", r.text);
    let s = &r.json()["summary"];
    let n = |k: &str| s[k].as_u64().unwrap();
    (n("created"), n("changed"), n("unchanged"), n("deleted"))
}

#[tokio::test]
async fn keys_are_unique_per_namespace_and_name_a_job_wherever_its_id_does() {
    let app = app("job-keys").await;
    for ns in ["team-a", "team-b"] {
        let r = call(&app, Method::POST, "/v1/namespaces", Some(&json!({"name": ns}))).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let mut body = document("nightly", "a", 2);
    body["namespace"] = json!("team-a");
    let created = call(&app, Method::POST, "/v1/jobs", Some(&body)).await;
    assert_eq!(created.status, 201, "{}", created.text);
    assert_eq!(created.json()["key"], "nightly");
    let id = created.json()["id"].as_str().unwrap().to_owned();

    // Unique per namespace: again in team-a is a 409 (single and batch), in
    // team-b it is another job.
    let again = call(&app, Method::POST, "/v1/jobs", Some(&body)).await;
    assert_problem(&again, 409);
    assert!(again.text.contains("nightly"), "{}", again.text);
    let batch = call(&app, Method::POST, "/v1/jobs/batch", Some(&json!({"jobs": [body.clone()]}))).await;
    assert_eq!(batch.json()["items"][0]["status"], 409, "{}", batch.text);
    let mut other = body.clone();
    other["namespace"] = json!("team-b");
    let in_b = call(&app, Method::POST, "/v1/jobs", Some(&other)).await;
    assert_eq!(in_b.status, 201, "{}", in_b.text);
    let id_b = in_b.json()["id"].as_str().unwrap().to_owned();

    // A key that could be taken for something else is refused.
    for bad in ["Nightly", "-x", "batch", "0190a5e1-7a5c-7cc0-8000-000000000000", &"x".repeat(64)] {
        let mut b = document(bad, "a", 2);
        b["namespace"] = json!("team-a");
        let r = call(&app, Method::POST, "/v1/jobs", Some(&b)).await;
        assert_invalid(&r, &["key"]);
    }

    // `namespace:key` names one job; a bare key names the one live job with
    // it in the token's namespaces, and asks which when there are two.
    let got = call(&app, Method::GET, "/v1/jobs/team-a:nightly", None).await;
    assert_eq!(got.json()["id"], id.as_str(), "{}", got.text);
    assert_eq!(call(&app, Method::GET, "/v1/jobs/team-b:nightly", None).await.json()["id"], id_b.as_str());
    let ambiguous = call(&app, Method::GET, "/v1/jobs/nightly", None).await;
    assert_problem(&ambiguous, 400);
    assert!(ambiguous.text.contains("team-a:nightly"), "{}", ambiguous.text);
    let token = call(
        &app,
        Method::POST,
        "/v1/tokens",
        Some(&json!({"name": "a-writer", "role": "write", "namespaces": ["team-a"]})),
    )
    .await;
    let a_writer = token.json()["token"].as_str().unwrap().to_owned();
    let as_a = app.send(app.http.get(app.url("/v1/jobs/nightly")).bearer_auth(&a_writer)).await;
    assert_eq!(as_a.json()["id"], id.as_str(), "{}", as_a.text);
    let not_theirs = app.send(app.http.get(app.url("/v1/jobs/team-b:nightly")).bearer_auth(&a_writer)).await;
    assert_problem(&not_theirs, 404);

    // Every job route takes it.
    let k = "team-a:nightly";
    let paused = call(&app, Method::POST, &format!("/v1/jobs/{k}/pause"), Some(&json!({"note": "by key"}))).await;
    assert_eq!(paused.json()["pause"]["note"], "by key", "{}", paused.text);
    assert_eq!(call(&app, Method::POST, &format!("/v1/jobs/{k}/resume"), None).await.status, 200);
    let audited = call(&app, Method::GET, &format!("/v1/audit?job={k}&action=job.pause"), None).await;
    assert_eq!(audited.json()["items"][0]["reason"], "by key", "{}", audited.text);
    assert_eq!(call(&app, Method::GET, &format!("/v1/alerts?job={k}"), None).await.status, 200);
    let channel = call(
        &app,
        Method::POST,
        "/v1/alert-channels",
        Some(&json!({"name": "oncall", "namespace": "team-a", "kind": "webhook", "url": "https://example.com/hook"})),
    )
    .await;
    assert_eq!(channel.status, 201, "{}", channel.text);
    let rule = json!({"name": "nightly-fails", "namespace": "team-a", "jobs": ["nightly"], "condition": "failed",
                      "channels": [channel.json()["id"]]});
    let made = call(&app, Method::POST, "/v1/alert-rules", Some(&rule)).await;
    assert_eq!(made.status, 201, "{}", made.text);
    assert_eq!(made.json()["jobs"], json!([id]), "a rule's job named by its key is stored by id");
    let mut unknown = rule.clone();
    unknown["name"] = json!("other");
    unknown["jobs"] = json!(["nothing-here"]);
    assert_invalid(&call(&app, Method::POST, "/v1/alert-rules", Some(&unknown)).await, &["jobs[0]"]);
    assert_eq!(call(&app, Method::GET, &format!("/v1/jobs/{k}/next?count=2"), None).await.status, 200);
    assert_eq!(call(&app, Method::GET, &format!("/v1/jobs/{k}/versions"), None).await.status, 200);
    assert_eq!(call(&app, Method::GET, &format!("/v1/jobs/{k}/executions"), None).await.status, 200);
    let explained = call(&app, Method::GET, &format!("/v1/jobs/{k}/executions/2030-01-01T01:00:00.000Z"), None).await;
    assert_eq!(explained.json()["job_id"], id.as_str(), "{}", explained.text);
    let filtered = call(&app, Method::GET, &format!("/v1/executions?job_id={k}"), None).await;
    assert_eq!(filtered.status, 200, "{}", filtered.text);
    let unknown_filter = call(&app, Method::GET, "/v1/executions?job_id=team-a:nothing", None).await;
    assert_invalid(&unknown_filter, &["job_id"]);
    let triggered = call(&app, Method::POST, &format!("/v1/jobs/{k}/trigger"), None).await;
    assert_eq!(triggered.status, 202, "{}", triggered.text);
    let listed = call(&app, Method::GET, &format!("/v1/jobs/{k}/executions"), None).await;
    assert_eq!(listed.json()["items"][0]["job_key"], "nightly", "{}", listed.text);
    assert_eq!(listed.json()["items"][0]["job_name"], "report nightly");

    // Set once: a PUT without a key keeps it, one with another key is
    // refused, a keyless job may be given one.
    let mut without = document("nightly", "a", 3);
    without.as_object_mut().unwrap().remove("key");
    let kept = call(&app, Method::PUT, &format!("/v1/jobs/{k}"), Some(&without)).await;
    assert_eq!(kept.json()["key"], "nightly", "{}", kept.text);
    let renamed = call(&app, Method::PUT, &format!("/v1/jobs/{k}"), Some(&document("daily", "a", 3))).await;
    assert_invalid(&renamed, &["key"]);
    let keyless = create(
        &app,
        &json!({"name": "old", "schedule": {"kind": "interval", "every_ms": 60000},
                                        "target": {"kind": "http", "url": "https://example.com/old"}}),
    )
    .await;
    let adopted = call(&app, Method::PATCH, &format!("/v1/jobs/{keyless}"), Some(&json!({"key": "adopted"}))).await;
    assert_eq!(adopted.json()["key"], "adopted", "{}", adopted.text);
    assert_eq!(call(&app, Method::GET, "/v1/jobs/default:adopted", None).await.json()["id"], keyless.as_str());

    // A deleted job frees its key and stays reachable by it while no live
    // job has it: its history by key, 404 for the job itself.
    assert_eq!(call(&app, Method::DELETE, &format!("/v1/jobs/{k}"), None).await.status, 204);
    assert_problem(&call(&app, Method::GET, &format!("/v1/jobs/{k}"), None).await, 404);
    let history = call(&app, Method::GET, &format!("/v1/jobs/{k}/versions"), None).await;
    assert_eq!(history.status, 200, "{}", history.text);
    let reborn = call(&app, Method::POST, "/v1/jobs", Some(&body)).await;
    assert_eq!(reborn.status, 201, "{}", reborn.text);
    let now_named = call(&app, Method::GET, &format!("/v1/jobs/{k}"), None).await;
    assert_eq!(now_named.json()["id"], reborn.json()["id"]);
    assert_problem(&call(&app, Method::GET, "/v1/jobs/team-a:never-made", None).await, 404);
}

/// The folder-sized case: 1,000 jobs applied, applied again (all
/// unchanged, no version), one changed, a team's removed jobs pruned.
#[tokio::test]
async fn an_apply_of_a_thousand_jobs_is_idempotent_changes_one_document_and_prunes_by_selector() {
    let app = app("apply-folder").await;
    let documents: Vec<Value> =
        (0..1000).map(|i| document(&format!("job-{i:04}"), if i % 2 == 0 { "a" } else { "b" }, 2)).collect();
    let request = json!({ "jobs": documents });

    let started = Instant::now();
    let first = apply(&app, &request).await;
    let first_took = started.elapsed();
    assert_eq!(summary(&first), (1000, 0, 0, 0));
    let before = versions(&app).await;
    assert_eq!(before.len(), 1000);
    assert!(before.values().all(|v| *v == (1, 1)), "every job is at its first version");

    let started = Instant::now();
    let second = apply(&app, &request).await;
    let second_took = started.elapsed();
    assert_eq!(summary(&second), (0, 0, 1000, 0));
    assert_eq!(versions(&app).await, before, "an unchanged apply writes no version");
    eprintln!("apply of 1,000 jobs: created in {first_took:?}, unchanged in {second_took:?}");

    // A hand-made job of team a, without a key: never pruned.
    let mut by_hand = document("unused", "a", 4);
    by_hand.as_object_mut().unwrap().remove("key");
    let by_hand = create(&app, &by_hand).await;

    // One file changed, two of team a and one of team b removed.
    let mut changed: Vec<Value> = request["jobs"].as_array().unwrap().clone();
    changed[7]["schedule"]["expr"] = json!("30 5 * * *");
    let removed = ["job-0010", "job-0012", "job-0011"];
    changed.retain(|d| !removed.contains(&d["key"].as_str().unwrap()));

    // A dry run answers what would be done and writes nothing.
    let dry = apply(&app, &json!({ "jobs": changed, "prune": {"selector": "team=a"}, "dry_run": true })).await;
    assert_eq!(summary(&dry), (0, 1, 996, 2));
    assert_eq!(versions(&app).await, before, "a dry run writes nothing");

    let third = apply(&app, &json!({ "jobs": changed, "prune": {"selector": "team=a"} })).await;
    assert_eq!(summary(&third), (0, 1, 996, 2));
    let items = third.json()["items"].as_array().unwrap().clone();
    let changed_item = items.iter().find(|i| i["result"] == "changed").unwrap();
    assert_eq!(changed_item["key"], "job-0007");
    assert_eq!(changed_item["version"], 2);
    assert_eq!(
        changed_item["changes"],
        json!([{"path": "schedule.expr", "before": "0 2 * * *", "after": "30 5 * * *"}]),
        "the diff names only what changed"
    );
    let mut deleted: Vec<&str> =
        items.iter().filter(|i| i["result"] == "deleted").map(|i| i["key"].as_str().unwrap()).collect();
    deleted.sort();
    assert_eq!(deleted, ["job-0010", "job-0012"], "only team a's removed jobs");

    let after = versions(&app).await;
    assert_eq!(after.len(), 998, "job-0011 (team b) stays: the selector did not match it");
    for (key, version) in &after {
        let expected = if key == "job-0007" { (2, 2) } else { (1, 1) };
        assert_eq!(*version, expected, "{key}");
    }
    let kept = call(&app, Method::GET, &format!("/v1/jobs/{by_hand}"), None).await;
    assert_eq!(kept.status, 200, "a job without a key is never pruned");
    // The prune is in the audit log with why.
    let audit = call(&app, Method::GET, "/v1/audit?action=job.delete", None).await;
    assert_eq!(audit.json()["items"].as_array().unwrap().len(), 2, "{}", audit.text);
    assert!(audit.text.contains("pruned by apply"), "{}", audit.text);
    let applied = call(&app, Method::GET, "/v1/audit?action=job.apply", None).await;
    assert_eq!(applied.json()["items"].as_array().unwrap().len(), 1, "{}", applied.text);
}

#[tokio::test]
async fn a_paused_job_stays_paused_and_keeps_what_a_document_leaves_out_across_apply_put_and_patch() {
    let app = app("apply-state").await;
    let mut doc = document("nightly", "a", 2);
    doc["labels"] = json!({"team": "a", "tier": "gold"});
    assert_eq!(summary(&apply(&app, &json!({"jobs": [doc]})).await), (1, 0, 0, 0));
    let paused = call(&app, Method::POST, "/v1/jobs/nightly/pause", Some(&json!({"note": "receiver down"}))).await;
    assert_eq!(paused.status, 200, "{}", paused.text);

    // A document that says `paused: false` and leaves labels out: the
    // definition changes, the state and labels stay.
    let mut edited = document("nightly", "a", 3);
    edited.as_object_mut().unwrap().remove("labels");
    edited["paused"] = json!(false);
    let r = apply(&app, &json!({"jobs": [edited.clone()]})).await;
    assert_eq!(summary(&r), (0, 1, 0, 0));
    let job = call(&app, Method::GET, "/v1/jobs/nightly", None).await.json();
    assert_eq!(job["paused"], true);
    assert_eq!(job["pause"]["note"], "receiver down");
    assert_eq!(job["labels"], json!({"team": "a", "tier": "gold"}));
    assert_eq!(job["schedule"]["expr"], "0 3 * * *");
    // Applying it again changes nothing, paused or not.
    assert_eq!(summary(&apply(&app, &json!({"jobs": [edited]})).await), (0, 0, 1, 0));

    let mut put = document("nightly", "a", 4);
    put.as_object_mut().unwrap().remove("key");
    let r = call(&app, Method::PUT, "/v1/jobs/nightly", Some(&put)).await;
    assert_eq!((r.json()["paused"].clone(), r.json()["pause"]["note"].clone()), (json!(true), json!("receiver down")));
    let r = call(&app, Method::PATCH, "/v1/jobs/nightly", Some(&json!({"name": "patched"}))).await;
    assert_eq!((r.json()["paused"].clone(), r.json()["pause"]["note"].clone()), (json!(true), json!("receiver down")));

    // A new job's document may create it paused.
    let mut born_paused = document("later", "a", 2);
    born_paused["paused"] = json!(true);
    assert_eq!(summary(&apply(&app, &json!({"jobs": [born_paused]})).await), (1, 0, 0, 0));
    assert_eq!(call(&app, Method::GET, "/v1/jobs/later", None).await.json()["paused"], true);
}

#[tokio::test]
async fn secrets_in_a_document_are_sealed_and_an_unchanged_secret_is_unchanged() {
    let app = app("apply-secrets").await;
    let mut doc = document("billing", "a", 2);
    doc["target"]["secret_headers"] = json!({"Authorization": "Bearer file-secret"});
    assert_eq!(summary(&apply(&app, &json!({"jobs": [doc.clone()]})).await), (1, 0, 0, 0));
    assert_eq!(summary(&apply(&app, &json!({"jobs": [doc.clone()]})).await), (0, 0, 1, 0));
    // The value as the API shows it keeps the stored one too.
    let mut shown = doc.clone();
    shown["target"]["secret_headers"]["Authorization"] = json!("***");
    assert_eq!(summary(&apply(&app, &json!({"jobs": [shown]})).await), (0, 0, 1, 0));
    doc["target"]["secret_headers"]["Authorization"] = json!("Bearer rotated");
    let rotated = apply(&app, &json!({"jobs": [doc]})).await;
    assert_eq!(summary(&rotated), (0, 1, 0, 0));
    assert!(!rotated.text.contains("rotated") && !rotated.text.contains("file-secret"), "{}", rotated.text);
    assert!(rotated.text.contains("*** (changed)"), "{}", rotated.text);
    let sql = app.sql().await;
    let stored: Vec<String> = sql
        .query("SELECT spec::text FROM jobs UNION ALL SELECT spec::text FROM job_changes", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(stored.iter().all(|s| !s.contains("rotated") && !s.contains("file-secret")), "{stored:?}");
}

#[tokio::test]
async fn a_refused_apply_names_each_bad_document_and_writes_nothing() {
    let app = app("apply-refused").await;
    let good = document("good", "a", 2);
    let mut keyless = document("x", "a", 2);
    keyless.as_object_mut().unwrap().remove("key");
    let mut bad_cron = document("bad-cron", "a", 2);
    bad_cron["schedule"]["expr"] = json!("61 * * * *");
    let r = apply(&app, &json!({"jobs": [good.clone(), keyless, bad_cron, good.clone()]})).await;
    assert_invalid(&r, &["jobs[1].key", "jobs[2].schedule.expr", "jobs[3].key"]);
    let r = apply(&app, &json!({"jobs": [good.clone()], "prune": {"selector": ""}})).await;
    assert_invalid(&r, &["prune.selector"]);
    let r = apply(&app, &json!({"jobs": [good.clone()], "calendars": [{"name": "Bad Name"}]})).await;
    assert_invalid(&r, &["calendars[0].name"]);
    let r = apply(&app, &json!({"jobs": [good.clone()], "extra": 1})).await;
    assert_invalid(&r, &["extra"]);
    // A document referring to a calendar that is not there: refused at the
    // database step, after the earlier documents were written in the
    // transaction, which rolls back.
    let mut needs_calendar = document("needs-calendar", "a", 2);
    needs_calendar["calendars"] = json!(["holidays"]);
    let r = apply(&app, &json!({"jobs": [good.clone(), needs_calendar.clone()]})).await;
    assert!(r.status == 422 || r.status == 409, "{} {}", r.status, r.text);
    assert!(r.text.contains("jobs[1]"), "{}", r.text);
    assert_eq!(app.job_rows().await, 0, "nothing was written");
    // With the calendar in the same apply, it is made first.
    let calendar = json!({"name": "holidays", "timezone": "Europe/Berlin", "dates": ["2026-12-25"]});
    let r = apply(&app, &json!({"jobs": [good, needs_calendar], "calendars": [calendar.clone()]})).await;
    assert_eq!(summary(&r), (3, 0, 0, 0), "the calendar and both jobs");
    assert_eq!(
        r.json()["items"][0],
        json!({"kind": "calendar", "namespace": "default", "name": "holidays",
                                            "id": null, "version": null, "result": "created"})
    );
    let again = apply(&app, &json!({"calendars": [calendar]})).await;
    assert_eq!(again.json()["items"][0]["result"], "unchanged", "{}", again.text);
}
