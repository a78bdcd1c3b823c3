//! Operating as a team, through the `cronshard` binary against the real API
//! (auth on): the audit log (`audit`, notes and `--reason`), a job's
//! history and its rollback, alert channels (whose address is a secret),
//! alert rules and the incidents they opened.

#[path = "../../api/tests/support/lib.rs"]
mod app;
#[path = "support/lib.rs"]
mod support;

use serde_json::{Value, json};

use support::{Cli, Stack, example};

/// A Slack incoming-webhook address: its path is the credential.
const HOOK_PATH: &str = "/services/T0CLI0TEST/B0CLI0TEST/xS3cr3tW3bh00kT0k3nCli";

fn hook_url() -> String {
    format!("https://hooks.slack.com{HOOK_PATH}")
}

/// A token made through the API with this name and role, of every namespace.
async fn token(stack: &Stack, name: &str, role: &str) -> String {
    let made = stack
        .app
        .send(
            stack
                .authed(stack.app.http.post(stack.app.url("/v1/tokens")))
                .json(&json!({"name": name, "role": role, "namespaces": ["*"]})),
        )
        .await;
    assert_eq!(made.status, 201, "{}", made.text);
    made.json()["token"].as_str().unwrap().to_owned()
}

fn interval_job(name: &str) -> Value {
    json!({"name": name, "labels": {"team": "ops"}, "schedule": {"kind": "interval", "every_ms": 60000},
           "target": {"kind": "http", "url": "https://x.example.com/run"}})
}

/// The data lines of a table (its header left out).
fn rows(run: &support::Run) -> Vec<&str> {
    run.lines().into_iter().skip(1).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notes_and_reasons_show_in_the_audit_log_with_the_tokens_name() {
    let stack = Stack::start("cli-audit").await;
    let alice = token(&stack, "oncall-alice", "admin").await;
    let as_alice = || Cli::new().env("CRONSHARD_URL", &stack.base()).env("CRONSHARD_TOKEN", &alice);
    let job = stack.create_json(&interval_job("audited")).await;
    let other = stack.create_json(&interval_job("elsewhere")).await;

    as_alice().args(["jobs", "pause", &job, "--note", "receiver maintenance"]).ok().await;
    let run = stack.cli().args(["audit", "--job", &job]).ok().await;
    let lines = rows(&run);
    assert_eq!(lines.len(), 2, "the create and the pause, nothing of the other job: {run:?}");
    let pause = lines[0];
    assert!(
        pause.contains("oncall-alice") && pause.contains("job.pause") && pause.contains("receiver maintenance"),
        "newest first, with who and why: {run:?}"
    );
    assert!(pause.contains(&format!("{job} v2")), "the version the pause made: {run:?}");
    assert!(lines[1].contains("job.create") && lines[1].contains("(created)"), "{run:?}");

    // --reason goes with a write as X-Audit-Reason (percent-encoded UTF-8);
    // a command's note, where it has one, is the reason.
    let reason = "back: ünïcode ✓, 100% done";
    as_alice().args(["--reason", reason, "jobs", "resume", &job]).ok().await;
    as_alice().args(["jobs", "trigger", &job, "--note", "rerun after the fix"]).ok().await;
    as_alice().args(["jobs", "edit", &job, "--set", "labels.tier=batch", "--reason", "tier moved"]).ok().await;
    as_alice().args(["jobs", "delete", &job, "--note", "replaced"]).ok().await;
    let run = stack.cli().args(["-o", "json", "audit", "--job", &job]).ok().await;
    let items = run.json()["items"].as_array().unwrap().clone();
    let seen: Vec<(&str, &str)> =
        items.iter().map(|e| (e["action"].as_str().unwrap(), e["reason"].as_str().unwrap_or("-"))).collect();
    assert_eq!(
        seen,
        [
            ("job.delete", "replaced"),
            ("job.patch", "tier moved"),
            ("job.trigger", "rerun after the fix"),
            ("job.resume", reason),
            ("job.pause", "receiver maintenance"),
            ("job.create", "-"),
        ]
    );
    assert!(items[..5].iter().all(|e| e["actor"]["name"] == "oncall-alice" && e["actor"]["token_id"].is_string()));
    assert_eq!(items[1]["changes"], json!([{"path": "labels.tier", "after": "batch"}]));
    let run = stack.cli().args(["audit", "--job", &job, "--action", "job.patch"]).ok().await;
    assert_eq!(rows(&run).len(), 1, "{run:?}");
    assert!(rows(&run)[0].contains("labels.tier") && rows(&run)[0].contains("tier moved"), "{run:?}");

    // Filters: by actor, by resource, paging with --all.
    let run = stack.cli().args(["-o", "json", "audit", "--actor", "oncall-alice", "--action", "job"]).ok().await;
    assert_eq!(run.json()["items"].as_array().unwrap().len(), 5, "{run:?}");
    let run = stack.cli().args(["audit", "--limit", "2"]).ok().await;
    assert_eq!(rows(&run).len(), 2, "{run:?}");
    assert!(run.stderr.contains("--all"), "a further page is mentioned: {run:?}");
    let run = stack.cli().args(["-o", "json", "audit", "--limit", "2", "--all"]).ok().await;
    let all = run.json()["items"].as_array().unwrap().clone();
    assert_eq!(all.len(), 8, "the token, two creates and five changes: {run:?}");
    assert!(all.iter().any(|e| e["resource_id"] == other.as_str()));
    assert_eq!(run.json()["next_cursor"], Value::Null);
    let run = stack.cli().args(["-o", "json", "audit", "--since", "2999-01-01T00:00:00Z"]).ok().await;
    assert_eq!(run.json()["items"], json!([]));

    // Bad input: the API names the parameter; a reason too long names the flag.
    let run = stack.cli().args(["audit", "--action", "job.explode"]).fails(2).await;
    assert!(run.stderr.contains("action: "), "{run:?}");
    let run = stack.cli().args(["--reason", &"x".repeat(501), "jobs", "pause", &other]).fails(2).await;
    assert!(run.stderr.contains("--reason"), "{run:?}");
    assert_eq!(stack.job(&other).await["paused"], false);
    // The audit log is an admin's.
    let writer = token(&stack, "ci-writer", "write").await;
    Cli::new().env("CRONSHARD_URL", &stack.base()).env("CRONSHARD_TOKEN", &writer).args(["audit"]).fails(6).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_each_version_and_rollback_makes_a_new_one_from_an_old_one() {
    let stack = Stack::start("cli-history").await;
    let id = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();
    stack
        .cli()
        .args(["jobs", "edit", &id, "--set", "schedule.expr=15 3 * * *", "--set", "labels.tier=batch"])
        .args(["--reason", "night window"])
        .ok()
        .await;

    let run = stack.cli().args(["jobs", "history", &id]).ok().await;
    assert_eq!(run.lines()[0], format!("job {id}"));
    assert!(run.lines()[2].starts_with("VERSION  VALID FROM (UTC)  "), "{run:?}");
    let versions: Vec<&str> = run.lines().into_iter().skip(3).collect();
    assert_eq!(versions.len(), 2, "{run:?}");
    assert!(versions[0].starts_with("1  ") && versions[0].contains("job.create"), "{run:?}");
    assert!(versions[0].contains("bootstrap token #1") && versions[0].ends_with("(created)"), "{run:?}");
    assert!(versions[1].starts_with("2  ") && versions[1].contains("  live  "), "{run:?}");
    assert!(versions[1].contains("job.patch") && versions[1].contains("night window"), "{run:?}");
    assert!(versions[1].ends_with("labels.tier, schedule.expr"), "{run:?}");

    // Roll back to version 1: version 3, with version 1's definition.
    let run =
        stack.cli().args(["jobs", "rollback", &id, "--to-version", "1", "--note", "too late at night"]).ok().await;
    assert_eq!(run.field("VERSION"), "3");
    assert_eq!(run.field("SCHEDULE"), "cron 0 8 * * * Europe/Berlin");
    assert_eq!(run.field("LABELS"), "team=payments,tier=web");
    let run = stack.cli().args(["-o", "json", "jobs", "history", &id]).ok().await;
    let history = run.json();
    assert_eq!(history["job_id"], json!(id));
    let versions = history["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 3, "{run:?}");
    assert_eq!(versions[2]["version"], 3);
    assert_eq!(versions[2]["definition"], versions[0]["definition"]);
    assert_ne!(versions[1]["definition"], versions[0]["definition"]);
    assert_eq!(
        (versions[2]["action"].as_str(), versions[2]["reason"].as_str()),
        (Some("job.rollback"), Some("too late at night"))
    );
    let run = stack.cli().args(["audit", "--job", &id, "--action", "job.rollback"]).ok().await;
    assert!(rows(&run)[0].contains(&format!("{id} v3")) && rows(&run)[0].contains("too late at night"), "{run:?}");

    // --if-version guards it; the current version and an unknown one are refused.
    let run = stack.cli().args(["jobs", "rollback", &id, "--to-version", "2", "--if-version", "2"]).fails(4).await;
    assert!(run.stderr.contains("412"), "{run:?}");
    let run = stack.cli().args(["jobs", "rollback", &id, "--to-version", "3"]).fails(2).await;
    assert!(run.stderr.contains("version: "), "{run:?}");
    stack.cli().args(["jobs", "rollback", &id, "--to-version", "9"]).fails(2).await;
    let run =
        stack.cli().args(["-o", "json", "jobs", "rollback", &id, "--to-version", "2", "--if-version", "3"]).ok().await;
    assert_eq!((run.json()["version"].clone(), run.json()["labels"]["tier"].clone()), (json!(4), json!("batch")));
    stack.cli().args(["jobs", "rollback", &id]).fails(2).await;
    stack.cli().args(["jobs", "history", &uuid::Uuid::new_v4().to_string()]).fails(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channels_address_is_read_from_stdin_or_the_environment_and_never_printed() {
    let stack = Stack::start("cli-channels").await;
    let url = hook_url();
    let never_shown = |run: &support::Run| {
        for out in [&run.stdout, &run.stderr] {
            assert!(!out.contains(&url) && !out.contains(HOOK_PATH) && !out.contains("xS3cr3t"), "{run:?}");
        }
    };

    let run = stack
        .cli()
        .args(["channels", "create", "--name", "ops-slack", "--kind", "slack", "--webhook-url", "-"])
        .args(["--max-per-minute", "12"])
        .stdin(format!("{url}\n"))
        .ok()
        .await;
    never_shown(&run);
    assert_eq!(run.field("URL"), "https://hooks.slack.com/…");
    assert_eq!((run.field("KIND"), run.field("MAX PER MINUTE")), ("slack".into(), "12".into()));
    let slack = run.field("ID");
    let run = stack
        .cli()
        .env("CRONSHARD_CHANNEL_URL", &url)
        .args(["-o", "json", "channels", "create", "--name", "pager", "--kind", "webhook"])
        .ok()
        .await;
    never_shown(&run);
    assert_eq!(run.json()["url"], "https://hooks.slack.com/…");
    assert_eq!(run.json()["max_per_minute"], 30);

    let run = stack.cli().args(["channels", "list"]).ok().await;
    never_shown(&run);
    assert_eq!(rows(&run).len(), 2, "{run:?}");
    assert!(run.lines()[0].starts_with("ID "), "{run:?}");
    assert!(rows(&run).iter().all(|l| l.contains("  https://hooks.slack.com/…  ")), "{run:?}");
    for format in ["json", "yaml"] {
        never_shown(&stack.cli().args(["-o", format, "channels", "list"]).ok().await);
    }
    let run = stack.cli().args(["--namespace", "nowhere", "-o", "json", "channels", "list"]).ok().await;
    assert_eq!(run.json(), json!({"items": []}), "only the namespace's channels");

    // Refusals do not echo it either: a name taken, an address with credentials.
    let run = stack
        .cli()
        .args(["channels", "create", "--name", "ops-slack", "--kind", "slack", "--webhook-url", "-"])
        .stdin(url.clone())
        .fails(4)
        .await;
    never_shown(&run);
    let with_credentials = format!("https://user:pw@hooks.slack.com{HOOK_PATH}");
    let run = stack
        .cli()
        .env("CRONSHARD_CHANNEL_URL", &with_credentials)
        .args(["channels", "create", "--name", "creds", "--kind", "slack"])
        .fails(2)
        .await;
    never_shown(&run);
    assert!(run.stderr.contains("url: "), "{run:?}");
    let run = stack
        .cli()
        .args(["channels", "create", "--name", "empty", "--kind", "slack", "--webhook-url", "-"])
        .stdin("\n".into())
        .fails(2)
        .await;
    assert!(run.stderr.contains("--webhook-url"), "{run:?}");
    let run =
        stack.cli().args(["channels", "create", "--name", "x", "--kind", "email", "--webhook-url", "-"]).fails(2).await;
    assert!(run.stderr.contains("--kind"), "{run:?}");
    // --help names the variable, never its value.
    let run = Cli::new().env("CRONSHARD_CHANNEL_URL", &url).args(["channels", "create", "--help"]).ok().await;
    never_shown(&run);
    assert!(run.stdout.contains("[env: CRONSHARD_CHANNEL_URL]"), "{run:?}");

    // The audit log records the channel by its shown address.
    let run = stack.cli().args(["audit", "--action", "alert_channel"]).ok().await;
    never_shown(&run);
    assert_eq!(rows(&run).len(), 2, "{run:?}");

    let run = stack.cli().args(["channels", "delete", &slack]).ok().await;
    assert_eq!(run.stdout, format!("channel {slack} deleted\n"));
    stack.cli().args(["channels", "delete", &slack]).fails(3).await;
    let run = stack.cli().args(["-o", "json", "channels", "list"]).ok().await;
    assert_eq!(run.json()["items"].as_array().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_rules_create_list_disable_enable_delete_and_their_incidents() {
    let stack = Stack::start("cli-alert-rules").await;
    let job = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();
    let channel = stack
        .cli()
        .args(["-o", "json", "channels", "create", "--name", "ops", "--kind", "webhook", "--webhook-url", "-"])
        .stdin(hook_url())
        .ok()
        .await
        .json()["id"]
        .as_str()
        .unwrap()
        .to_owned();

    let run = stack
        .cli()
        .args(["alerts", "rules", "create", "--name", "sales-failing", "--job", &job, "--condition", "failed"])
        .args(["--channel", &channel])
        .ok()
        .await;
    assert_eq!(run.field("WATCHES"), format!("jobs {job}"));
    assert_eq!((run.field("CONDITION"), run.field("ENABLED")), ("failed".into(), "true".into()));
    assert_eq!(run.field("CHANNELS"), channel);
    let rule = run.field("ID");
    let run = stack
        .cli()
        .args(["-o", "json", "alerts", "rules", "create", "--name", "payments-late", "--selector", "team=payments"])
        .args(["--condition", "late", "--threshold", "30000", "--channel", &channel, "--disabled"])
        .ok()
        .await;
    let late = run.json();
    assert_eq!((late["selector"].as_str(), late["threshold"].as_i64()), (Some("team=payments"), Some(30000)));
    assert_eq!((late["enabled"].clone(), late["jobs"].clone()), (json!(false), Value::Null));

    let run = stack.cli().args(["alerts", "rules", "list"]).ok().await;
    assert_eq!(rows(&run).len(), 2, "{run:?}");
    let line = rows(&run).into_iter().find(|l| l.contains("payments-late")).unwrap();
    assert!(line.contains("selector team=payments") && line.contains("late (> 30000 ms)"), "{run:?}");
    assert!(line.ends_with("  1         false"), "{run:?}");

    let run = stack.cli().args(["alerts", "rules", "disable", &rule]).ok().await;
    assert_eq!(run.field("ENABLED"), "false");
    let run = stack.cli().args(["-o", "json", "alerts", "rules", "list"]).ok().await;
    assert!(run.json()["items"].as_array().unwrap().iter().all(|r| r["enabled"] == false), "{run:?}");
    let run = stack.cli().args(["-o", "json", "alerts", "rules", "enable", &rule]).ok().await;
    assert_eq!(run.json()["enabled"], true);
    let run = stack.cli().args(["audit", "--action", "alert_rule.update"]).ok().await;
    assert!(rows(&run)[0].ends_with("enabled: false → true"), "{run:?}");

    // A channel a rule sends to cannot be deleted.
    stack.cli().args(["channels", "delete", &channel]).fails(4).await;

    // Incidents, as the cluster records them, with their notices.
    let sql = stack.app.sql().await;
    let incident = uuid::Uuid::new_v4();
    let (rule_id, job_id, channel_id) = [&rule, &job, &channel].map(|s| uuid::Uuid::parse_str(s).unwrap()).into();
    sql.execute(
        "INSERT INTO alert_incidents (id, rule_id, job_id, namespace, opened_at, opened_by, summary, slots)
         VALUES ($1, $2, $3, 'default', '2026-12-07T09:00:05Z', 'scheduler-0',
                 'Execution 2026-12-07T08:00:00.000Z failed: HTTP 503', '[]')",
        &[&incident, &rule_id, &job_id],
    )
    .await
    .unwrap();
    sql.execute(
        "INSERT INTO alert_notifications (id, incident_id, channel_id, kind, state, attempts, last_status, last_error)
         VALUES ($1, $2, $3, 'firing', 'pending', 2, 503, 'HTTP 503 Service Unavailable')",
        &[&uuid::Uuid::new_v4(), &incident, &channel_id],
    )
    .await
    .unwrap();
    let run = stack.cli().args(["alerts", "list", "--open"]).ok().await;
    assert_eq!(rows(&run).len(), 1, "{run:?}");
    let line = rows(&run)[0];
    assert!(line.starts_with("2026-12-07T09:00:05.000Z  -  "), "{run:?}");
    assert!(line.contains("sales-failing") && line.contains("daily-sales-report"), "{run:?}");
    assert!(line.ends_with("firing pending (2 attempts, HTTP 503: HTTP 503 Service Unavailable)"), "{run:?}");
    let run = stack.cli().args(["-o", "json", "alerts", "list", "--resolved"]).ok().await;
    assert_eq!(run.json()["items"], json!([]));
    let run =
        stack.cli().args(["-o", "json", "alerts", "list", "--job", &job, "--rule", &rule, "--limit", "5"]).ok().await;
    assert_eq!(run.json()["items"][0]["notifications"][0]["state"], "pending");
    stack.cli().args(["alerts", "list", "--open", "--resolved"]).fails(2).await;

    // Bad input: the flag named by clap, the field by the API.
    let create = ["alerts", "rules", "create", "--name", "bad", "--job", &job, "--channel", &channel];
    let run = stack.cli().args(create).args(["--condition", "exploded"]).fails(2).await;
    assert!(run.stderr.contains("--condition") && run.stderr.contains("consecutive_failures"), "{run:?}");
    let run = stack.cli().args(create).args(["--condition", "late"]).fails(2).await;
    assert!(run.stderr.contains("threshold: "), "{run:?}");
    let run = stack.cli().args(create).args(["--condition", "consecutive_failures", "--threshold", "1"]).fails(2).await;
    assert!(run.stderr.contains("threshold: "), "{run:?}");
    stack.cli().args(create).args(["--condition", "failed", "--selector", "team=payments"]).fails(2).await;
    stack
        .cli()
        .args(["alerts", "rules", "create", "--name", "bad", "--condition", "failed", "--channel", &channel])
        .fails(2)
        .await;
    let run = stack
        .cli()
        .args(["alerts", "rules", "create", "--name", "bad", "--job", &job, "--condition", "failed"])
        .fails(2)
        .await;
    assert!(run.stderr.contains("--channel"), "{run:?}");

    let run = stack.cli().args(["alerts", "rules", "delete", &rule]).ok().await;
    assert_eq!(run.stdout, format!("alert rule {rule} deleted\n"));
    stack.cli().args(["alerts", "rules", "delete", &rule]).fails(3).await;
    let run = stack.cli().args(["-o", "json", "alerts", "rules", "list"]).ok().await;
    assert_eq!(run.json()["items"].as_array().unwrap().len(), 1);
    let run = stack.cli().args(["-o", "json", "alerts", "list"]).ok().await;
    assert_eq!(run.json()["items"], json!([]), "deleted with its rule");
}
