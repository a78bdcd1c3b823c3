//! Jobs as code: `cronshard apply` and `cronshard diff` with the
//! repository's `examples/jobs/` against the real API (auth on, loopback
//! callbacks allowed as the local stack allows them), and the refusals the
//! CLI makes before any request.

#[path = "../../api/tests/support/lib.rs"]
mod app;
#[path = "support/lib.rs"]
mod support;

use serde_json::{Value, json};

use support::{Cli, REPORTS_TOKEN, Stack, TempDir, copy_files, jobs_examples_dir};

/// The jobs of `examples/jobs/` by key, and its one calendar.
const KEYS: [&str; 6] =
    ["nightly-report", "ledger-sync", "warm-search-cache", "warm-pricing-cache", "queue-feed", "weekday-digest"];
const CALENDAR: &str = "examples-holidays";

fn apply(stack: &Stack) -> Cli {
    stack.cli().env("REPORTS_TOKEN", REPORTS_TOKEN)
}

/// The `RESULT` of each item line of a table (`KIND NAMESPACE KEY/NAME RESULT`), by key or name.
fn results(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .skip(1)
        .filter(|l| l.starts_with("job ") || l.starts_with("calendar "))
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            (cells[2].to_owned(), cells[3].to_owned())
        })
        .collect()
}

/// A job made by hand, labelled as the examples are.
fn without_key() -> Value {
    json!({"name": "made by hand", "labels": {"team": "examples"}, "schedule": {"kind": "interval", "every_ms": 60000},
           "target": {"kind": "http", "url": "https://x.example.com/"}})
}

/// The keys of the live jobs labelled `team=examples`.
async fn live_keys(stack: &Stack) -> Vec<String> {
    let page = stack.cli().args(["-o", "json", "jobs", "list", "-l", "team=examples", "--all"]).ok().await.json();
    let mut keys: Vec<String> =
        page["items"].as_array().unwrap().iter().filter_map(|j| j["key"].as_str().map(str::to_owned)).collect();
    keys.sort();
    keys
}

fn sorted(keys: &[&str]) -> Vec<String> {
    let mut keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_examples_folder_applies_then_is_unchanged_then_diffs_and_prunes_one_job() {
    let stack = Stack::start_loopback("cli-apply").await;
    let dir = TempDir::new("apply");
    let jobs = dir.0.join("jobs");
    copy_files(&jobs_examples_dir(), &jobs);
    let folder = jobs.to_string_lossy().into_owned();

    // First apply: every job and the calendar created, in one answer.
    let run = apply(&stack).args(["-o", "json", "apply", "-f", &folder]).ok().await;
    let answer = run.json();
    assert_eq!(answer["summary"], json!({"created": 7, "changed": 0, "unchanged": 0, "deleted": 0}), "{run:?}");
    let items = answer["items"].as_array().unwrap();
    assert_eq!((items[0]["kind"].as_str(), items[0]["name"].as_str()), (Some("calendar"), Some(CALENDAR)));
    for item in items {
        assert_eq!((item["result"].as_str(), item["namespace"].as_str()), (Some("created"), Some("default")), "{item}");
    }
    assert_eq!(live_keys(&stack).await, sorted(&KEYS));
    // Each job as its file says (spot checks of every kind of field the files use).
    let report = stack.job("nightly-report").await;
    assert_eq!(report["schedule"], json!({"kind": "cron", "expr": "0 2 * * *", "timezone": "Europe/Berlin"}));
    assert_eq!(report["target"]["url"], "http://127.0.0.1:8099/hook/nightly-report");
    assert_eq!(report["target"]["secret_headers"], json!({"authorization": "***"}), "never shown back: {report}");
    assert_eq!(report["labels"], json!({"team": "examples", "tier": "batch"}));
    assert_eq!(stack.job("ledger-sync").await["overlap"], "forbid");
    assert_eq!(stack.job("ledger-sync").await["misfire_cap"], 12);
    assert_eq!(stack.job("warm-search-cache").await["jitter_ms"], 60000);
    assert_eq!(stack.job("queue-feed").await["target"]["kind"], "sqs");
    assert_eq!(stack.job("weekday-digest").await["calendars"], json!([CALENDAR]));
    stack.cli().args(["calendars", "get", CALENDAR]).ok().await;

    // Again: nothing changes, every item says so.
    let run = apply(&stack).args(["apply", "-f", &folder]).ok().await;
    let shown = results(&run.stdout);
    assert_eq!(shown.len(), 7, "{run:?}");
    assert!(shown.iter().all(|(_, result)| result == "unchanged"), "{run:?}");
    assert_eq!(run.lines().last().unwrap(), &"0 created, 0 changed, 7 unchanged, 0 deleted");
    assert_eq!(stack.job("nightly-report").await["version"], 1, "an unchanged job gets no version");

    // diff: nothing to show, exit 0.
    let run = apply(&stack).args(["diff", "-f", &folder]).ok().await;
    assert_eq!(run.stdout, "no differences (7 unchanged)\n");

    // One file edited: diff names that job only, with the field, and exits 7.
    let file = jobs.join("nightly-report.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("expr: \"0 2 * * *\"", "expr: \"0 3 * * *\"")).unwrap();
    let run = apply(&stack).args(["diff", "-f", &folder]).run().await;
    assert_eq!(run.code, 7, "{run:?}");
    assert!(run.stderr.is_empty(), "differences are no error: {run:?}");
    assert_eq!(
        run.lines(),
        [
            "KIND  NAMESPACE  KEY/NAME        RESULT",
            "job   default    nightly-report  changed",
            "  schedule.expr: \"0 2 * * *\" -> \"0 3 * * *\"",
            "0 created, 1 changed, 6 unchanged, 0 deleted (dry run: nothing was changed)",
        ],
        "{run:?}"
    );
    assert_eq!(stack.job("nightly-report").await["schedule"]["expr"], "0 2 * * *", "a diff changes nothing");
    // -o json: the API's answer, same exit code.
    let run = apply(&stack).args(["-o", "json", "diff", "-f", &folder]).run().await;
    assert_eq!(run.code, 7, "{run:?}");
    assert_eq!(run.json()["dry_run"], true);
    // Another secret is a change too, shown masked.
    let run = stack.cli().env("REPORTS_TOKEN", "rotated").args(["diff", "-f", &folder]).run().await;
    assert_eq!(run.code, 7, "{run:?}");
    assert!(run.stdout.contains("target.secret_headers.authorization: \"***\" -> \"*** (changed)\""), "{run:?}");
    assert!(!run.stdout.contains("rotated") && !run.stdout.contains(REPORTS_TOKEN), "{run:?}");

    // Applied: changed, at version 2; the others untouched.
    let run = apply(&stack).args(["apply", "-f", &folder]).ok().await;
    assert!(results(&run.stdout).contains(&("nightly-report".into(), "changed".into())), "{run:?}");
    assert_eq!(run.lines().last().unwrap(), &"0 created, 1 changed, 6 unchanged, 0 deleted");
    let report = stack.job("nightly-report").await;
    assert_eq!((report["schedule"]["expr"].as_str(), report["version"].as_i64()), (Some("0 3 * * *"), Some(2)));

    // A file removed: --prune deletes exactly its job.
    std::fs::remove_file(jobs.join("ledger-sync.yaml")).unwrap();
    let run = apply(&stack).args(["diff", "-f", &folder, "--prune", "--selector", "team=examples"]).run().await;
    assert_eq!(run.code, 7, "{run:?}");
    assert_eq!(results(&run.stdout), [("ledger-sync".to_owned(), "deleted".to_owned())], "{run:?}");
    let run = apply(&stack).args(["apply", "-f", &folder, "--prune", "--selector", "team=examples"]).ok().await;
    let deleted: Vec<_> = results(&run.stdout).into_iter().filter(|(_, r)| r != "unchanged").collect();
    assert_eq!(deleted, [("ledger-sync".to_owned(), "deleted".to_owned())], "{run:?}");
    assert_eq!(run.lines().last().unwrap(), &"0 created, 0 changed, 6 unchanged, 1 deleted");
    let left: Vec<&str> = KEYS.iter().copied().filter(|k| *k != "ledger-sync").collect();
    assert_eq!(live_keys(&stack).await, sorted(&left));
    let run = apply(&stack).args(["diff", "-f", &folder, "--prune", "-l", "team=examples"]).ok().await;
    assert_eq!(run.stdout, "no differences (6 unchanged)\n");

    // A job without a key is never pruned, whatever its labels: no file can name it.
    stack.cli().args(["jobs", "create", "-f", "-"]).stdin(without_key().to_string()).ok().await;
    let run = apply(&stack).args(["diff", "-f", &folder, "--prune", "-l", "team=examples"]).ok().await;
    assert_eq!(run.stdout, "no differences (6 unchanged)\n");
    // A keyed one the selector matches is the folder's, however it was made.
    let mut keyed = without_key();
    keyed["key"] = json!("by-hand");
    stack.cli().args(["jobs", "create", "-f", "-"]).stdin(keyed.to_string()).ok().await;
    let run = apply(&stack).args(["diff", "-f", &folder, "--prune", "-l", "team=examples"]).run().await;
    assert_eq!((run.code, results(&run.stdout)), (7, vec![("by-hand".to_owned(), "deleted".to_owned())]), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_are_checked_before_anything_is_sent_and_the_apis_errors_name_the_file() {
    let stack = Stack::start_loopback("cli-apply-refusals").await;
    let dir = TempDir::new("apply-refusals");
    let jobs = dir.0.join("jobs");
    copy_files(&jobs_examples_dir(), &jobs);
    let folder = jobs.to_string_lossy().into_owned();
    // Nothing listens there: exit 5 would mean a request was tried.
    let nowhere = || Cli::new().env("CRONSHARD_URL", "http://127.0.0.1:1").env("REPORTS_TOKEN", REPORTS_TOKEN);

    // --prune without --selector (and the reverse): usage errors.
    let run = nowhere().args(["apply", "-f", &folder, "--prune"]).fails(2).await;
    assert!(run.stderr.contains("--selector"), "{run:?}");
    nowhere().args(["diff", "-f", &folder, "--selector", "team=examples"]).fails(2).await;
    nowhere().args(["apply"]).fails(2).await;

    // An unset secret variable: the file and the variable named, no value, nothing sent.
    let run = Cli::new().env("CRONSHARD_URL", "http://127.0.0.1:1").args(["apply", "-f", &folder]).fails(2).await;
    assert!(
        run.stderr.contains("nightly-report.yaml: target.secret_headers.authorization names ${REPORTS_TOKEN}")
            && run.stderr.contains("REPORTS_TOKEN is not set"),
        "{run:?}"
    );
    // A kind the CLI does not know, a document that is no object.
    std::fs::write(jobs.join("zz-bad.yaml"), "kind: CronJob\nkey: x\n").unwrap();
    let run = nowhere().args(["apply", "-f", &folder]).fails(2).await;
    assert!(run.stderr.contains("zz-bad.yaml: kind must be Job or Calendar, not CronJob"), "{run:?}");
    std::fs::write(jobs.join("zz-bad.yaml"), "key: a\n---\n42\n").unwrap();
    let run = nowhere().args(["apply", "-f", &folder]).fails(2).await;
    assert!(run.stderr.contains("zz-bad.yaml (document 2): must be an object"), "{run:?}");
    std::fs::remove_file(jobs.join("zz-bad.yaml")).unwrap();
    nowhere().args(["apply", "-f", &dir.0.join("missing").to_string_lossy()]).fails(2).await;

    // The API's 422: each field error with the file its item came from; nothing applied.
    std::fs::write(
        jobs.join("zz-broken.yaml"),
        "key: broken\nname: broken\nschedule: {kind: cron, expr: '61 * * * *'}\ntarget: {kind: http, url: 'https://x.example.com/'}\n",
    )
    .unwrap();
    let run = apply(&stack).args(["apply", "-f", &folder]).fails(2).await;
    let located = run.stderr.lines().find(|l| l.contains("schedule.expr")).unwrap_or_default();
    assert!(located.trim_start().starts_with(&format!("{folder}/zz-broken.yaml: jobs[")), "{run:?}");
    let page = stack.cli().args(["-o", "json", "jobs", "list"]).ok().await.json();
    assert_eq!(page["items"], json!([]), "all or nothing");

    // Documents from stdin, as a list; --namespace names the namespace of those naming none.
    stack.namespace("team-b").await;
    let list = json!([{"key": "from-stdin", "name": "s", "schedule": {"kind": "interval", "every_ms": 60000},
                       "target": {"kind": "http", "url": "https://x.example.com/"}}]);
    let run = stack
        .cli()
        .args(["-o", "yaml", "--namespace", "team-b", "apply", "-f", "-"])
        .stdin(list.to_string())
        .ok()
        .await;
    let answer: Value = yaml_serde::from_str(&run.stdout).unwrap();
    assert_eq!(answer["items"][0]["namespace"], "team-b", "{run:?}");
    assert_eq!(answer["items"][0]["result"], "created");
    let run = stack.cli().args(["-o", "json", "jobs", "get", "team-b:from-stdin"]).ok().await;
    assert_eq!(run.json()["namespace"], "team-b");
    // A dry run of a new job: shown as created, not made.
    let new = json!({"key": "dry", "name": "d", "schedule": {"kind": "interval", "every_ms": 60000},
                     "target": {"kind": "http", "url": "https://x.example.com/"}});
    let run = stack.cli().args(["apply", "--dry-run", "-f", "-"]).stdin(new.to_string()).ok().await;
    assert!(
        run.stdout.ends_with("1 created, 0 changed, 0 unchanged, 0 deleted (dry run: nothing was changed)\n"),
        "{run:?}"
    );
    stack.cli().args(["jobs", "get", "dry"]).fails(3).await;
}
