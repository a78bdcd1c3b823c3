//! `cronshard jobs backfill` and `cronshard backfills ...` against the real
//! API in-process, without schedulers: a backfill made stays `running` with
//! nothing started. A dry run's counts and first slots, the made backfill
//! as a table and as JSON, the 409 of a second one, list, get, cancel,
//! `--wait` ended by a cancel and by its timeout, and the exit codes.

#[path = "../../api/tests/support/lib.rs"]
mod app;
#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use support::{Stack, example};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

/// November 2026 of job.yaml (08:00 Berlin, 07:00 UTC in winter): 30 slots.
const FROM: &str = "2026-11-01T00:00:00Z";
const TO: &str = "2026-11-30T23:59:59Z";
const FAILED_AT: &str = "2026-11-20T07:00:00.000Z";
const SUCCEEDED_AT: &str = "2026-11-21T07:00:00.000Z";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_create_conflict_list_get_cancel_and_exit_codes() {
    let stack = Stack::start("cli-backfill").await;
    let job = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();
    stack.insert_row(&job, at(FAILED_AT), "failed", Some("HTTP 503 Service Unavailable")).await;
    stack.insert_row(&job, at(SUCCEEDED_AT), "succeeded", None).await;
    let range = ["--from", FROM, "--to", TO];

    // A dry run: 30 slots, 28 without a row; the table lists the first 20.
    let run = stack.cli().args(["jobs", "backfill", &job]).args(range).args(["--dry-run"]).ok().await;
    let lines = run.lines();
    assert_eq!(lines[0], format!("dry run: 30 slots of job {job} in the range, 28 would run"), "{run:?}");
    assert_eq!(lines[1], "  2026-11-01T07:00:00.000Z", "{run:?}");
    assert_eq!(lines.len(), 22, "the count, 20 slots, the rest: {run:?}");
    assert_eq!(lines[21], "  (8 more; -o json lists the first 1,000)", "{run:?}");
    // Each mode, newest first; -o json is the API's plan.
    let plan = |slots: &'static str| {
        stack.cli().args(["-o", "json", "jobs", "backfill", &job]).args(range).args([
            "--dry-run",
            "--slots",
            slots,
            "--order",
            "newest-first",
        ])
    };
    let failed = plan("failed").ok().await.json();
    assert_eq!((failed["planned"].as_u64(), failed["would_run"].as_u64()), (Some(30), Some(1)), "{failed}");
    assert_eq!(failed["slots"], serde_json::json!([FAILED_AT]));
    let all = plan("all").ok().await.json();
    assert_eq!(all["would_run"], 30, "{all}");
    assert_eq!(all["slots"][0], "2026-11-30T07:00:00.000Z", "newest first: {all}");
    // A dry run writes nothing.
    let none = stack.cli().args(["-o", "json", "backfills", "list", "--job", &job]).ok().await.json();
    assert_eq!(none["items"], serde_json::json!([]), "{none}");

    // Made: a field view of the request and its progress.
    let run = stack
        .cli()
        .args(["jobs", "backfill", &job])
        .args(range)
        .args(["--slots", "failed", "--rate", "0.5", "--concurrency", "2", "--overlap", "forbid"])
        .ok()
        .await;
    let id = run.field("ID");
    assert_eq!(run.field("JOB"), job);
    assert_eq!(run.field("FROM (UTC)"), "2026-11-01T00:00:00.000Z");
    assert_eq!(run.field("SLOTS"), "failed");
    assert_eq!(run.field("ORDER"), "oldest_first");
    assert_eq!(run.field("RATE"), "0.5 per second");
    assert_eq!(run.field("CONCURRENCY"), "2");
    assert_eq!(run.field("OVERLAP"), "forbid");
    assert_eq!(run.field("STATE"), "running");
    assert_eq!(
        run.field("PROGRESS"),
        "0/30 slots handled: 0 in flight, 0 succeeded, 0 failed, 0 skipped, 0 passed over"
    );
    assert_eq!(run.field("FINISHED (UTC)"), "-");

    // One running backfill per job: a second is a conflict (exit 4).
    let refused = stack.cli().args(["jobs", "backfill", &job]).args(range).fails(4).await;
    assert!(refused.stderr.contains("running backfill"), "{refused:?}");

    // list (table and JSON) and get.
    let run = stack.cli().args(["backfills", "list", "--job", &job]).ok().await;
    let lines = run.lines();
    assert!(lines[0].starts_with("ID  ") && lines[0].contains("HANDLED"), "{run:?}");
    assert_eq!(lines.len(), 2, "{run:?}");
    assert!(lines[1].starts_with(&id) && lines[1].contains("running") && lines[1].contains("0/30"), "{run:?}");
    let listed = stack.cli().args(["-o", "json", "backfills", "list"]).ok().await.json();
    assert_eq!(listed["items"][0]["id"], id.as_str(), "{listed}");
    let got = stack.cli().args(["-o", "json", "backfills", "get", &id]).ok().await.json();
    assert_eq!((got["state"].as_str(), got["max_concurrency"].as_u64()), (Some("running"), Some(2)), "{got}");
    assert_eq!(got["progress"]["planned"], 30);

    // cancel: cancelled and finished; the job may have another backfill.
    let run = stack.cli().args(["backfills", "cancel", &id]).ok().await;
    assert_eq!(run.field("STATE"), "cancelled");
    assert_ne!(run.field("FINISHED (UTC)"), "-");
    let again = stack.cli().args(["-o", "json", "jobs", "backfill", &job]).args(range).ok().await.json();
    assert_eq!((again["state"].as_str(), again["slots"].as_str()), (Some("running"), Some("missing")), "{again}");
    let listed = stack.cli().args(["-o", "json", "backfills", "list", "--job", &job, "--limit", "5"]).ok().await.json();
    let ids: Vec<&str> = listed["items"].as_array().unwrap().iter().map(|b| b["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [again["id"].as_str().unwrap(), id.as_str()], "newest first: {listed}");

    // Exit codes: the API's 422 and 404, clap's usage errors.
    let run =
        stack.cli().args(["jobs", "backfill", &job, "--from", FROM, "--to", "2999-01-01T00:00:00Z"]).fails(2).await;
    assert!(run.stderr.contains("to: is in the future"), "{run:?}");
    let run =
        stack.cli().args(["jobs", "backfill", &job]).args(range).args(["--rate", "0", "--dry-run"]).fails(2).await;
    assert!(run.stderr.contains("rate_per_second"), "{run:?}");
    stack.cli().args(["jobs", "backfill", &job, "--from", TO, "--to", FROM, "--dry-run"]).fails(2).await;
    stack.cli().args(["jobs", "backfill", "no-such-job"]).args(range).fails(3).await;
    stack.cli().args(["backfills", "get", "01900000-0000-7000-8000-000000000000"]).fails(3).await;
    stack.cli().args(["backfills", "cancel", "01900000-0000-7000-8000-000000000000"]).fails(3).await;
    stack.cli().args(["jobs", "backfill", &job]).args(range).args(["--slots", "some"]).fails(2).await;
    stack.cli().args(["jobs", "backfill", &job]).args(range).args(["--dry-run", "--wait"]).fails(2).await;
    stack.cli().args(["jobs", "backfill", &job]).args(range).args(["--timeout", "5s"]).fails(2).await;
    stack.cli().args(["jobs", "backfill", &job, "--from", FROM]).fails(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_follows_a_backfill_until_it_is_cancelled_or_the_timeout() {
    let stack = Stack::start("cli-backfill-wait").await;
    let job = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();
    let range = ["--from", FROM, "--to", TO];

    // Cancelled meanwhile: exit 0, the last state on stdout, the progress on stderr.
    let wait =
        stack.cli().args(["-o", "json", "jobs", "backfill", &job]).args(range).args(["--wait", "--timeout", "60s"]);
    let cancel = async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let listed = stack.cli().args(["-o", "json", "backfills", "list", "--job", &job]).ok().await.json();
        let id = listed["items"][0]["id"].as_str().expect("the backfill made").to_owned();
        stack.cli().args(["backfills", "cancel", &id]).ok().await;
        id
    };
    let started = std::time::Instant::now();
    let (run, id) = tokio::join!(wait.run(), cancel);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "{run:?}");
    let last: Value = run.json();
    assert_eq!((last["id"].as_str(), last["state"].as_str()), (Some(id.as_str()), Some("cancelled")), "{run:?}");
    let progress: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(
        progress,
        [
            format!(
                "backfill {id} running: 0/30 slots handled: 0 in flight, 0 succeeded, 0 failed, 0 skipped, 0 passed over"
            ),
            format!(
                "backfill {id} cancelled: 0/30 slots handled: 0 in flight, 0 succeeded, 0 failed, 0 skipped, 0 passed over"
            ),
        ],
        "{run:?}"
    );

    // Still running at the timeout: exit 1, and the backfill goes on.
    let started = std::time::Instant::now();
    let run = stack.cli().args(["jobs", "backfill", &job]).args(range).args(["--wait", "--timeout", "3s"]).run().await;
    assert_eq!(run.code, 1, "{run:?}");
    assert!(started.elapsed() >= Duration::from_secs(3), "{run:?}");
    let last = run.stderr.lines().last().unwrap();
    assert!(last.starts_with("error: backfill ") && last.contains("is still running after 3s; it goes on"), "{run:?}");
    assert_eq!(run.stdout, "", "{run:?}");
    let listed = stack.cli().args(["-o", "json", "backfills", "list", "--job", &job]).ok().await.json();
    assert_eq!(listed["items"][0]["state"], "running", "{listed}");
}
