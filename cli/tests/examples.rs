//! Every example of every `--help` text works: each line `$ cronshard ...`
//! of the real binary's help is run by bash against the real API (auth on,
//! loopback callbacks allowed as on the local stack), in a directory holding
//! the files of `cli/examples/` and, as `jobs/`, those of the repository's
//! `examples/jobs/` (applied, with `$REPORTS_TOKEN` set), with `$JOB` a
//! fresh job (from job.yaml, edited once: at version 2), `$AT` one of its
//! slots with a failed execution, `$EXECUTION_ID` another of its slots
//! awaiting its receiver's report with `$TOKEN` that attempt's completion
//! token, `$BACKFILL` a running backfill of another job, `$CHANNEL` an
//! alert channel no rule sends to, `$RULE` an alert rule (of another
//! channel), `$SLACK_URL` and `$HOOK_URL` channel addresses, the calendar
//! `holidays` in place, `$PROD_TOKEN` a token, and a fresh config file whose
//! contexts are `local` (current) and `prod` (this API, with its token) and
//! `staging`, and must exit 0.

#[path = "../../api/tests/support/lib.rs"]
mod app;
#[path = "support/lib.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::json;

use support::{
    Cli, REPORTS_TOKEN, Stack, TOKEN, TempDir, binary, copy_files, example, examples_dir, jobs_examples_dir,
};

/// The slot `$AT` names: 08:00 Berlin (a fire time of job.yaml) in the
/// range the bulk replay example covers.
const AT: &str = "2026-11-20T07:00:00.000Z";

/// The subcommand paths of the command tree (`help` aside).
fn paths(command: &clap::Command, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(prefix.clone());
    for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut path = prefix.clone();
        path.push(sub.get_name().to_owned());
        paths(sub, path, out);
    }
}

/// The example lines of a help text: `$ cronshard ...`, the `$ ` cut off.
fn examples_in(help: &str) -> Vec<String> {
    help.lines().filter_map(|l| l.trim_start().strip_prefix("$ ")).map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_in_the_help_texts_works_against_the_local_stack() {
    let stack = Stack::start_loopback("cli-examples").await;
    let dir = TempDir::new("examples");
    copy_files(&examples_dir(), &dir.0);
    copy_files(&jobs_examples_dir(), &dir.0.join("jobs"));
    let config = dir.0.join("config.yaml");

    // The examples, from the binary's own --help of every (sub)command.
    let mut all_paths = Vec::new();
    paths(&cronshard_cli::args::command(), Vec::new(), &mut all_paths);
    let mut examples = BTreeSet::new();
    let mut commands_without = Vec::new();
    for path in &all_paths {
        let run = Cli::new().args(path).args(["--help"]).run().await;
        assert_eq!(run.code, 0, "{path:?} --help: {run:?}");
        let found = examples_in(&run.stdout);
        let is_leaf = {
            let mut c = cronshard_cli::args::command();
            for name in path {
                c = c.find_subcommand(name).unwrap().clone();
            }
            c.get_subcommands().all(|s| s.get_name() == "help")
        };
        if is_leaf && found.is_empty() {
            commands_without.push(path.join(" "));
        }
        for line in found {
            assert!(line.starts_with("cronshard ") || line.contains("cronshard "), "{path:?}: {line}");
            examples.insert(line);
        }
    }
    assert!(commands_without.is_empty(), "commands whose --help has no example: {commands_without:?}");
    assert!(examples.len() >= 40, "only {} examples found", examples.len());

    let bin_dir = binary().parent().unwrap().to_owned();
    let path_var = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap_or_default());
    let mut failures = Vec::new();
    for (i, line) in examples.iter().enumerate() {
        // Fresh fixtures: an example may delete or pause them.
        let job = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();
        let edit = stack.app.http.patch(stack.app.url(&format!("/v1/jobs/{job}")));
        let edited = stack.app.send(stack.authed(edit).json(&json!({"retry": {"max_retries": 4}}))).await;
        assert_eq!(edited.status, 200, "{}", edited.text);
        let channel = fixture(
            &stack,
            "/v1/alert-channels",
            json!({"name": format!("fixture-{i}"), "kind": "webhook", "url": HOOK_URL}),
        )
        .await;
        let rule_channel = fixture(
            &stack,
            "/v1/alert-channels",
            json!({"name": format!("fixture-{i}-rule"), "kind": "slack", "url": SLACK_URL}),
        )
        .await;
        let rule = fixture(
            &stack,
            "/v1/alert-rules",
            json!({"name": format!("fixture-{i}"), "jobs": [job], "condition": "failed", "channels": [rule_channel]}),
        )
        .await;
        // Of another job: `jobs backfill $JOB` examples make $JOB's own.
        let backfilled = stack.create(&example("job.json")).await["id"].as_str().unwrap().to_owned();
        let backfill = fixture(
            &stack,
            &format!("/v1/jobs/{backfilled}/backfill"),
            json!({"from": "2026-11-01T00:00:00Z", "to": "2026-11-02T00:00:00Z"}),
        )
        .await;
        stack.insert_row(&job, support_at(), "failed", Some("HTTP 503 Service Unavailable")).await;
        let awaiting_at = support_at() + chrono::TimeDelta::hours(1);
        let (execution_id, token) = stack.insert_awaiting_row(&job, awaiting_at).await;
        stack.cli().args(["calendars", "put", "holidays", "-f", &example("holidays.yaml")]).ok().await;
        let jobs = dir.0.join("jobs").to_string_lossy().into_owned();
        stack.cli().env("REPORTS_TOKEN", REPORTS_TOKEN).args(["apply", "-f", &jobs]).ok().await;
        std::fs::write(&config, contexts(&stack.base())).unwrap();

        let run = stack
            .cli()
            .env("PATH", &path_var)
            .env("HOME", &dir.0.display().to_string())
            .env("JOB", &job)
            .env("AT", AT)
            .env("EXECUTION_ID", &execution_id)
            .env("BACKFILL", &backfill)
            .env("TOKEN", &token)
            .env("CHANNEL", &channel)
            .env("RULE", &rule)
            .env("SLACK_URL", SLACK_URL)
            .env("HOOK_URL", HOOK_URL)
            .env("REPORTS_TOKEN", REPORTS_TOKEN)
            .env("PROD_TOKEN", TOKEN)
            .env("CRONSHARD_CONFIG", &config.to_string_lossy())
            .dir(&dir.0)
            .args(["-o", "pipefail", "-c", line])
            .run_program(Path::new("bash"))
            .await;
        if run.code != 0 || run.stderr.contains("error:") {
            failures.push(format!("$ {line}\n  exit {}\n  stdout: {}\n  stderr: {}", run.code, run.stdout, run.stderr));
        }
    }
    assert!(failures.is_empty(), "{} of {} examples failed:\n{}", failures.len(), examples.len(), failures.join("\n"));
}

/// The config file of each example: `local` (current) and `prod` at this
/// API with its token, `staging` elsewhere.
fn contexts(base: &str) -> String {
    format!(
        "current_context: local\ncontexts:\n  local:\n    url: {base}\n    token: {TOKEN}\n  prod:\n    url: {base}\n    \
         namespace: default\n    token: {TOKEN}\n  staging:\n    url: https://cronshard.staging.example.com\n"
    )
}

/// Channel addresses the examples give (the Slack one as Slack writes them).
const SLACK_URL: &str = "https://hooks.slack.com/services/T0EXAMPLE/B0EXAMPLE/xExampleWebhookToken";
const HOOK_URL: &str = "https://alerts.example.com/cronshard";

/// Something made through the API with the bootstrap token; its id.
async fn fixture(stack: &Stack, path: &str, body: serde_json::Value) -> String {
    let made = stack.app.send(stack.authed(stack.app.http.post(stack.app.url(path))).json(&body)).await;
    assert_eq!(made.status, 201, "POST {path}: {}", made.text);
    made.json()["id"].as_str().unwrap().to_owned()
}

fn support_at() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(AT).unwrap().to_utc()
}
