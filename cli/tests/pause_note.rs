//! `cronshard jobs pause --note` stores why, and `jobs get` shows who paused
//! the job, when and why. Against the real API in-process.

#[path = "../../api/tests/support/lib.rs"]
mod app;
#[path = "support/lib.rs"]
mod support;

use serde_json::json;
use support::*;

#[tokio::test]
async fn a_pause_note_is_stored_and_shown_with_who_paused() {
    let stack = Stack::start("cli-pause-note").await;
    let job = stack
        .create_json(&json!({"name": "noted", "schedule": {"kind": "interval", "every_ms": 60000},
                             "target": {"kind": "http", "url": "https://x.example.com/"}}))
        .await;
    let run = stack.cli().args(["jobs", "pause", &job, "--note", "receiver maintenance"]).ok().await;
    let paused = run.field("PAUSED");
    assert!(paused.starts_with("true, by ") && paused.ends_with(": receiver maintenance"), "{paused}");
    assert_eq!(stack.job(&job).await["pause"]["note"], "receiver maintenance");
    let run = stack.cli().args(["jobs", "get", &job]).ok().await;
    assert_eq!(run.field("PAUSED"), paused);
    let run = stack.cli().args(["jobs", "resume", &job]).ok().await;
    assert_eq!(run.field("PAUSED"), "false");
}
