//! Job changes wake the schedulers' LISTEN connection: creates through the
//! API announce themselves once per request after their commit (no NOTIFY
//! inside the transaction, which serialized concurrent commits); other
//! writes notify from the `jobs` trigger. Against the real Postgres.

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

use support::*;

/// Postgres sends notifications in commit order: everything that arrives
/// before a marker notified after a write is what that write caused.
async fn notifications_until_marker(app: &TestApp, rx: &mut UnboundedReceiver<String>) -> Vec<String> {
    app.sql().await.batch_execute(&format!("NOTIFY {}, 'marker'", store::notify::CHANNEL)).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let payload = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the marker notification within 10 s")
            .expect("LISTEN connection open");
        if payload == "marker" {
            return seen;
        }
        seen.push(payload);
    }
}

/// Waits for the next notification (the announcement is sent after the
/// response, so it may follow it by a moment).
async fn next(rx: &mut UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("a notification within 10 s")
        .expect("LISTEN connection open")
}

#[tokio::test]
async fn a_create_and_a_batch_each_wake_the_schedulers_once_after_commit() {
    let app = TestApp::start("changes-create").await;
    let (_listening, mut rx) = app.job_change_notifications().await;

    app.create_id(&cron_job("single", "0 8 * * *", "UTC")).await;
    assert_eq!(next(&mut rx).await, "");
    assert_eq!(notifications_until_marker(&app, &mut rx).await, Vec::<String>::new(), "one notification per create");

    let jobs: Vec<_> = (0..300).map(|i| cron_job(&format!("batch-{i}"), "0 8 * * *", "UTC")).collect();
    let r = app.post_json("/v1/jobs/batch", &json!({ "jobs": jobs })).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["created"], 300);
    assert_eq!(next(&mut rx).await, "");
    assert_eq!(
        notifications_until_marker(&app, &mut rx).await,
        Vec::<String>::new(),
        "one notification for 300 jobs, not one per row"
    );
}

#[tokio::test]
async fn a_refused_create_wakes_nobody_and_other_writes_notify_from_the_trigger() {
    let app = TestApp::start("changes-other").await;
    let (_listening, mut rx) = app.job_change_notifications().await;

    let r = app.post_json("/v1/jobs", &cron_job("bad", "0 25 * * *", "UTC")).await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(notifications_until_marker(&app, &mut rx).await, Vec::<String>::new(), "nothing changed");

    // A pause goes through the trigger, inside its transaction.
    let id = app.create_id(&cron_job("paused-later", "0 8 * * *", "UTC")).await;
    assert_eq!(next(&mut rx).await, "");
    let r = app.post_empty(&format!("/v1/jobs/{id}/pause")).await;
    assert!(r.status < 300, "{}", r.text);
    assert_eq!(notifications_until_marker(&app, &mut rx).await, vec![String::new()], "the pause's notification");

    // So does a writer that is not the API: one notification per statement.
    app.sql()
        .await
        .batch_execute("INSERT INTO jobs (id, name, spec) SELECT gen_random_uuid(), name || g, spec FROM jobs, generate_series(1, 50) g")
        .await
        .unwrap();
    assert_eq!(notifications_until_marker(&app, &mut rx).await, vec![String::new()], "one for the statement");
}
