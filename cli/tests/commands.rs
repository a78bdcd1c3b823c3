//! The `cronshard` binary against the real API (auth on): each command's
//! effect on the API, its table and JSON output, and every exit code.

#[path = "../../api/tests/support/lib.rs"]
mod app;
#[path = "support/lib.rs"]
mod support;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use support::{Cli, Stack, binary, example};

fn ids(page: &Value) -> Vec<String> {
    let mut ids: Vec<String> =
        page["items"].as_array().expect("items").iter().map(|j| j["id"].as_str().unwrap().to_owned()).collect();
    ids.sort();
    ids
}

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

/// Each row's cells start where the header's do (the table is aligned).
#[track_caller]
fn assert_aligned(table: &str, columns: &[&str]) {
    let mut lines = table.lines();
    let header = lines.next().expect("a header line");
    let starts: Vec<usize> =
        columns.iter().map(|c| header.find(c).unwrap_or_else(|| panic!("{c} in {header}"))).collect();
    for line in lines.filter(|l| !l.is_empty()) {
        for (c, &start) in columns.iter().zip(&starts).skip(1) {
            if line.chars().count() <= start {
                continue; // an empty last cell
            }
            let before = line.chars().nth(start - 1);
            let here = line.chars().nth(start);
            assert!(before == Some(' ') && here.is_some_and(|ch| ch != ' '), "{c} misaligned in {line:?}\n{table}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_from_yaml_json_and_stdin_then_get_and_list_by_selector() {
    let stack = Stack::start("cli-create").await;

    // YAML, shown as a field view.
    let run = stack.cli().args(["jobs", "create", "-f", &example("job.yaml")]).ok().await;
    assert_eq!(run.field("NAME"), "daily-sales-report");
    assert_eq!(run.field("SCHEDULE"), "cron 0 8 * * * Europe/Berlin");
    assert_eq!(run.field("LABELS"), "team=payments,tier=web");
    assert_eq!(run.field("VERSION"), "1");
    let yaml_id = run.field("ID");
    let stored = stack.job(&yaml_id).await;
    assert_eq!(stored["retry"]["max_retries"], 3);
    assert_eq!(stored["target"]["body"], "{\"report\": 25}");

    // JSON, with -o json: the API's body.
    let json_job = stack.create(&example("job.json")).await;
    assert_eq!(json_job["name"], "hourly-ledger-cleanup");
    assert_eq!(json_job["schedule"]["every_ms"], 3_600_000);
    let json_id = json_job["id"].as_str().unwrap().to_owned();

    // stdin, YAML this time.
    let yaml = "name: search-reindex\nschedule: {kind: cron, expr: '*/15 * * * *'}\n\
                target: {kind: http, url: 'https://search.example.com/reindex'}\nlabels: {team: search}\n";
    let run = stack.cli().args(["-o", "json", "jobs", "create", "-f", "-"]).stdin(yaml.to_owned()).ok().await;
    let search_id = run.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(run.json()["schedule"]["timezone"], "UTC");

    // get: table, JSON, YAML.
    let run = stack.cli().args(["jobs", "get", &json_id]).ok().await;
    assert_eq!(run.field("SCHEDULE"), "every 3600000 ms");
    let next = run.field("NEXT FIRE (UTC)");
    assert!(next.len() == 24 && next.ends_with('Z') && DateTime::parse_from_rfc3339(&next).is_ok(), "{run:?}");
    let run = stack.cli().args(["jobs", "get", &json_id, "-o", "json"]).ok().await;
    assert_eq!(run.json()["id"], json!(json_id));
    let run = stack.cli().args(["jobs", "get", &yaml_id, "-o", "yaml"]).ok().await;
    assert!(run.stdout.contains("name: daily-sales-report\n"), "{run:?}");
    assert!(run.stdout.contains(&format!("id: {yaml_id}\n")), "{run:?}");

    // list by selector: JSON parsed, table aligned.
    let mut payments = vec![yaml_id.clone(), json_id.clone()];
    payments.sort();
    let run = stack.cli().args(["jobs", "list", "--selector", "team=payments", "-o", "json"]).ok().await;
    assert_eq!(ids(&run.json()), payments);
    let run = stack.cli().args(["jobs", "list", "--selector", "team=payments,tier!=batch", "-o", "json"]).ok().await;
    assert_eq!(ids(&run.json()), std::slice::from_ref(&yaml_id));
    let run = stack.cli().args(["jobs", "list", "-l", "team=payments"]).ok().await;
    let lines = run.lines();
    assert_eq!(lines.len(), 3, "{run:?}");
    assert!(lines[0].starts_with("ID "), "{run:?}");
    assert!(run.stdout.contains(&yaml_id) && run.stdout.contains(&json_id) && !run.stdout.contains(&search_id));
    assert_aligned(&run.stdout, &["ID", "NAME", "NAMESPACE", "SCHEDULE", "PAUSED", "NEXT FIRE (UTC)", "LABELS"]);
    let run = stack.cli().args(["jobs", "list", "--kind", "interval", "-o", "json"]).ok().await;
    assert_eq!(ids(&run.json()), std::slice::from_ref(&json_id));
    let run = stack.cli().args(["jobs", "list", "--name-prefix", "search", "-o", "json"]).ok().await;
    assert_eq!(ids(&run.json()), std::slice::from_ref(&search_id));

    // Paging: one page and a cursor, or --all following the cursors.
    let run = stack.cli().args(["jobs", "list", "--limit", "1", "-o", "json"]).ok().await;
    assert_eq!(run.json()["items"].as_array().unwrap().len(), 1);
    assert!(run.json()["next_cursor"].is_string(), "{run:?}");
    let run = stack.cli().args(["jobs", "list", "--limit", "1"]).ok().await;
    assert!(run.stderr.contains("--all"), "a further page is mentioned: {run:?}");
    let run = stack.cli().args(["jobs", "list", "--limit", "1", "--all", "-o", "json"]).ok().await;
    let mut all = vec![yaml_id, json_id, search_id];
    all.sort();
    assert_eq!(ids(&run.json()), all);
    assert_eq!(run.json()["next_cursor"], Value::Null);

    // The namespace flag goes into the created job; a different one in the file is refused.
    let run = stack
        .cli()
        .args(["-o", "json", "--namespace", "default", "jobs", "create", "-f", &example("job.yaml")])
        .ok()
        .await;
    assert_eq!(run.json()["namespace"], "default");
    let job = json!({"name": "x", "namespace": "other", "schedule": {"kind": "interval", "every_ms": 60000},
                     "target": {"kind": "http", "url": "https://x.example.com/"}});
    let run =
        stack.cli().args(["--namespace", "default", "jobs", "create", "-f", "-"]).stdin(job.to_string()).fails(2).await;
    assert!(run.stderr.contains("namespace"), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edit_with_set_and_with_a_file_and_a_stale_version_is_exit_4() {
    let stack = Stack::start("cli-edit").await;
    let id = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();

    let run = stack
        .cli()
        .args(["-o", "json", "jobs", "edit", &id, "--set", "schedule.expr=15 3 * * *", "--set", "labels.tier=batch"])
        .ok()
        .await;
    let job = run.json();
    assert_eq!(job["version"], 2);
    assert_eq!(job["schedule"], json!({"kind": "cron", "expr": "15 3 * * *", "timezone": "Europe/Berlin"}));
    assert_eq!(job["labels"], json!({"team": "payments", "tier": "batch"}));

    let run = stack.cli().args(["jobs", "edit", &id, "-f", &example("patch.yaml")]).ok().await;
    assert_eq!(run.field("VERSION"), "3");
    assert_eq!(run.field("LABELS"), "team=payments");
    assert_eq!(run.field("RETRY"), "max 5 retries");
    let stored = stack.job(&id).await;
    assert_eq!(stored["retry"]["max_retries"], 5);
    assert_eq!(stored["retry"]["base_delay_ms"], 30000, "the rest of the retry policy is kept");

    // A change based on version 1 when the job is at 3: refused, nothing changed.
    let run = stack.cli().args(["jobs", "edit", &id, "--set", "name=stale", "--if-version", "1"]).fails(4).await;
    assert!(run.stderr.contains("412"), "{run:?}");
    assert_eq!(stack.job(&id).await["name"], "daily-sales-report");
    // --if-version of the current version, and --force, go through.
    stack.cli().args(["jobs", "edit", &id, "--set", "name=renamed", "--if-version", "3"]).ok().await;
    let run = stack.cli().args(["-o", "json", "jobs", "edit", &id, "--set", "labels.owner=ana", "--force"]).ok().await;
    assert_eq!((run.json()["labels"]["owner"].clone(), run.json()["version"].clone()), (json!("ana"), json!(5)));
    // Pausing is state, not definition: an edit that would pause is refused, naming the route.
    let run = stack.cli().args(["jobs", "edit", &id, "--set", "paused=true", "--force"]).fails(2).await;
    assert!(run.stderr.contains("/pause"), "{run:?}");

    // An invalid change: exit 2, the field named.
    let run = stack.cli().args(["jobs", "edit", &id, "--set", "schedule.timezone=Mars/Olympus"]).fails(2).await;
    assert!(run.stderr.lines().any(|l| l.trim_start().starts_with("schedule.timezone: ")), "{run:?}");
    // Neither --set nor -f: a usage error.
    stack.cli().args(["jobs", "edit", &id]).fails(2).await;
    stack.cli().args(["jobs", "edit", &id, "--set", "nonsense"]).fails(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_trigger_next_and_delete() {
    let stack = Stack::start("cli-lifecycle").await;
    let id = stack
        .create_json(&json!({"name": "berlin-0230", "schedule": {"kind": "cron", "expr": "30 2 * * *", "timezone": "Europe/Berlin"},
                             "target": {"kind": "http", "url": "https://x.example.com/run"}}))
        .await;

    let run = stack.cli().args(["jobs", "pause", &id]).ok().await;
    assert!(run.field("PAUSED").starts_with("true, by bootstrap token #1 at "), "{run:?}");
    assert_eq!(run.field("NEXT FIRE (UTC)"), "-");
    assert_eq!(stack.job(&id).await["paused"], true);
    let run = stack.cli().args(["-o", "json", "jobs", "resume", &id]).ok().await;
    assert_eq!(run.json()["paused"], false);

    let run = stack.cli().args(["jobs", "trigger", &id]).ok().await;
    assert_eq!((run.field("TRIGGER"), run.field("STATUS")), ("manual".into(), "pending".into()));
    assert!(run.field("EXECUTION ID").starts_with(&format!("{id}@")), "{run:?}");
    let run = stack.cli().args(["-o", "json", "executions", "list", "--job", &id]).ok().await;
    let items = run.json()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["trigger"], "manual");

    // next around the autumn change: the first 02:30 is marked as an overlap.
    let run = stack.cli().args(["jobs", "next", &id, "--count", "3", "--from", "2026-10-24T00:00:00Z"]).ok().await;
    let lines = run.lines();
    assert_eq!(lines.len(), 4, "{run:?}");
    assert_eq!(lines[0], "AT (UTC)                  LOCAL                          OFFSET  DST");
    assert_eq!(lines[2], "2026-10-25T00:30:00.000Z  2026-10-25T02:30:00.000+02:00  +02:00  overlap");
    assert_eq!(lines[3], "2026-10-26T01:30:00.000Z  2026-10-26T02:30:00.000+01:00  +01:00");
    let run = stack.cli().args(["-o", "json", "jobs", "next", &id, "--count", "2"]).ok().await;
    assert_eq!(run.json()["fire_times"].as_array().unwrap().len(), 2);
    stack.cli().args(["jobs", "next", &id, "--from", "yesterday"]).fails(2).await;

    let run = stack.cli().args(["jobs", "delete", &id]).ok().await;
    assert_eq!(run.stdout, format!("job {id} deleted\n"));
    stack.cli().args(["jobs", "get", &id]).fails(3).await;
    stack.cli().args(["jobs", "delete", &id]).fails(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_actions_change_the_jobs_a_selector_matches() {
    let stack = Stack::start("cli-bulk").await;
    let yaml_id = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();
    let json_id = stack.create(&example("job.json")).await["id"].as_str().unwrap().to_owned();
    let other = stack
        .create_json(
            &json!({"name": "other", "labels": {"team": "search"}, "schedule": {"kind": "interval", "every_ms": 60000},
                             "target": {"kind": "http", "url": "https://x.example.com/"}}),
        )
        .await;

    let run = stack.cli().args(["jobs", "bulk", "pause", "--selector", "team=payments"]).ok().await;
    assert_eq!(run.stdout, "pause: 2 matched, 2 changed (selector team=payments)\n");
    let run = stack.cli().args(["jobs", "list", "--paused", "true", "-o", "json"]).ok().await;
    let mut paused = vec![yaml_id.clone(), json_id.clone()];
    paused.sort();
    assert_eq!(ids(&run.json()), paused);
    let run = stack.cli().args(["-o", "json", "jobs", "bulk", "resume", "--selector", "tier=batch"]).ok().await;
    assert_eq!((run.json()["matched"].clone(), run.json()["changed"].clone()), (json!(1), json!(1)));
    let run = stack.cli().args(["-o", "json", "jobs", "bulk", "trigger", "-l", "team=payments"]).ok().await;
    assert_eq!(run.json()["changed"], 2);

    // delete asks for --yes and changes nothing without it.
    let run = stack.cli().args(["jobs", "bulk", "delete", "--selector", "team=payments"]).fails(2).await;
    assert!(run.stderr.contains("--yes"), "{run:?}");
    assert_eq!(
        stack.cli().args(["jobs", "list", "-o", "json"]).ok().await.json()["items"].as_array().unwrap().len(),
        3
    );
    stack.cli().args(["jobs", "bulk", "delete", "--selector", "team=payments", "--yes"]).ok().await;
    assert_eq!(ids(&stack.cli().args(["jobs", "list", "-o", "json"]).ok().await.json()), [other]);
    // An empty or malformed selector is the API's 422.
    let run = stack.cli().args(["jobs", "bulk", "pause", "--selector", "team in (a"]).fails(2).await;
    assert!(run.stderr.contains("selector: "), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_list_explain_and_replay() {
    let stack = Stack::start("cli-executions").await;
    let id = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();
    // Slots of its schedule (08:00 Berlin = 07:00Z in winter).
    let (t1, t2, t3) = ("2026-11-18T07:00:00.000Z", "2026-11-19T07:00:00.000Z", "2026-11-20T07:00:00.000Z");
    stack.insert_row(&id, at(t1), "failed", Some("HTTP 503 Service Unavailable")).await;
    stack.insert_row(&id, at(t2), "failed", Some("timed out after 10000 ms")).await;
    stack.insert_row(&id, at(t3), "succeeded", None).await;

    let run = stack.cli().args(["executions", "list", "--job", &id]).ok().await;
    let lines = run.lines();
    assert_eq!(lines.len(), 4, "{run:?}");
    assert!(lines[1].starts_with(t3) && lines[1].contains("succeeded"), "newest first: {run:?}");
    assert!(lines[3].starts_with(t1) && lines[3].contains("HTTP 503 Service Unavailable"), "{run:?}");
    assert_aligned(
        &run.stdout,
        &["SCHEDULED AT (UTC)", "JOB", "STATUS", "TRIGGER", "ATTEMPTS", "HTTP", "ERROR / REASON"],
    );
    let run = stack
        .cli()
        .args(["-o", "json", "executions", "list", "--status", "failed", "--from", t2, "--to", "2026-11-21T00:00:00Z"])
        .ok()
        .await;
    let items = run.json()["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["scheduled_at"], t2);
    let run = stack.cli().args(["executions", "list", "--status", "exploded"]).fails(2).await;
    assert!(run.stderr.contains("status: must be one of"), "{run:?}");

    // explain: verdict, summary, timeline.
    let run = stack.cli().args(["executions", "explain", &id, t1]).ok().await;
    assert_eq!(run.field("VERDICT"), "failed (fired)");
    assert_eq!(run.field("SLOT (UTC)"), t1);
    assert!(run.stdout.contains("\nTimeline:\n  - "), "{run:?}");
    let run = stack.cli().args(["-o", "json", "executions", "explain", &id, "2026-11-20T07:30:00Z"]).ok().await;
    assert_eq!(run.json()["explanation"]["verdict"], "not_a_fire_time");
    stack.cli().args(["executions", "explain", &id, "not-a-time"]).fails(2).await;

    // Replay one: back to pending with the retry budget asked for.
    let run = stack.cli().args(["executions", "replay", &id, t1, "--max-retries", "7"]).ok().await;
    assert_eq!(run.field("STATUS"), "pending");
    let pg = stack.app.sql().await;
    let row = pg
        .query_one(
            "SELECT status, retry_policy FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2",
            &[&uuid::Uuid::parse_str(&id).unwrap(), &at(t1)],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "pending");
    assert_eq!(row.get::<_, Option<Value>>(1).unwrap()["max_retries"], 7);
    // A succeeded execution is not replayed (409), an unknown one is not found.
    stack.cli().args(["executions", "replay", &id, t3]).fails(4).await;
    stack.cli().args(["executions", "replay", &id, "2026-11-17T07:00:00.000Z"]).fails(3).await;

    // Bulk: the failures whose error says "timed out".
    let run = stack
        .cli()
        .args([
            "-o",
            "json",
            "executions",
            "replay",
            "--status",
            "failed",
            "--error-contains",
            "TIMED OUT",
            "--trigger",
            "schedule",
        ])
        .args(["--from", "2026-11-01T00:00:00Z", "--to", "2026-12-01T00:00:00Z", "--max-retries", "2"])
        .ok()
        .await;
    assert_eq!(run.json()["replayed"], 1);
    assert_eq!(run.json()["items"][0]["scheduled_at"], t2);
    let run = stack.cli().args(["executions", "replay", "--job", &id]).ok().await;
    assert!(run.stdout.starts_with("replayed 0\n"), "nothing failed is left: {run:?}");
    // A slot and bulk filters together: a usage error.
    stack.cli().args(["executions", "replay", &id, t1, "--status", "failed"]).fails(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calendars_put_get_list_delete() {
    let stack = Stack::start("cli-calendars").await;
    let run = stack.cli().args(["calendars", "put", "holidays", "-f", &example("holidays.yaml")]).ok().await;
    assert_eq!(run.field("NAME"), "holidays");
    assert_eq!(run.field("DATES"), "2026-12-25, 2026-12-26");
    assert_eq!(run.field("RANGES"), "2026-12-31..2027-01-01");
    assert_eq!(run.field("VERSION"), "1");
    let run =
        stack.cli().args(["-o", "json", "calendars", "put", "holidays", "-f", &example("holidays.yaml")]).ok().await;
    assert_eq!(run.json()["version"], 2);
    let run = stack.cli().args(["-o", "json", "calendars", "get", "holidays"]).ok().await;
    assert_eq!(run.json()["rules"], json!(["* * * * SAT,SUN"]));
    let run = stack.cli().args(["calendars", "list"]).ok().await;
    assert_eq!(run.lines().len(), 2, "{run:?}");
    assert!(run.lines()[1].starts_with("default    holidays  2 "), "{run:?}");

    // In use by a job: the delete is a conflict.
    let job = stack
        .create_json(&json!({"name": "with-calendar", "calendars": ["holidays"], "schedule": {"kind": "interval", "every_ms": 60000},
                             "target": {"kind": "http", "url": "https://x.example.com/"}}))
        .await;
    stack.cli().args(["calendars", "delete", "holidays"]).fails(4).await;
    stack.cli().args(["jobs", "delete", &job]).ok().await;
    let run = stack.cli().args(["calendars", "delete", "holidays"]).ok().await;
    assert_eq!(run.stdout, "calendar holidays deleted\n");
    stack.cli().args(["calendars", "get", "holidays"]).fails(3).await;
    let run = stack
        .cli()
        .args(["calendars", "put", "bad", "-f", "-"])
        .stdin("timezone: Nowhere/Land\n".into())
        .fails(2)
        .await;
    assert!(run.stderr.contains("timezone: "), "{run:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_shows_the_redis_shards_and_live_nodes() {
    let stack = Stack::start("cli-cluster").await;
    let run = stack.cli().args(["cluster"]).ok().await;
    assert_eq!(run.field("CLUSTER"), stack.app.cluster);
    assert_eq!((run.field("REDIS SHARDS UP"), run.field("LIVE NODES")), ("1/1".into(), "0".into()));

    // A node's heartbeat, as a scheduler writes it.
    let keys = runtime::redis::Keys::new(&stack.app.cluster);
    let beat = json!({"node_id": "node-a", "heartbeat_at": "2026-11-25T10:00:00.123456Z", "owned_jobs": 7}).to_string();
    stack.app.redis_cmd(redis::cmd("SET").arg(keys.node("node-a")).arg(beat).arg("EX").arg(60)).await;
    stack.app.redis_cmd(redis::cmd("SADD").arg(keys.registry()).arg("node-a")).await;
    let run = stack.cli().args(["cluster"]).ok().await;
    assert_eq!(run.field("LIVE NODES"), "1");
    assert!(run.lines().contains(&"node-a  7           2026-11-25T10:00:00.123Z"), "{run:?}");
    let run = stack.cli().args(["cluster", "-o", "json"]).ok().await;
    assert_eq!(run.json()["nodes"][0]["owned_jobs"], 7);
    let keys_cleanup = redis::cmd("DEL").arg(keys.node("node-a")).arg(keys.registry()).clone();
    stack.app.redis_cmd(&keys_cleanup).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_shows_local_times_and_dst_marks_around_berlin_changes() {
    let stack = Stack::start("cli-preview").await;
    let run = stack
        .cli()
        .args([
            "preview",
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
            "--from",
            "2026-03-28T00:00:00Z",
            "--count",
            "3",
        ])
        .ok()
        .await;
    assert_eq!(
        run.lines(),
        [
            "from 2026-03-28T00:00:00.000Z",
            "",
            "AT (UTC)                  LOCAL                          OFFSET  DST",
            "2026-03-28T01:30:00.000Z  2026-03-28T02:30:00.000+01:00  +01:00",
            "2026-03-29T01:00:00.000Z  2026-03-29T03:00:00.000+02:00  +02:00  gap, offset changes",
            "2026-03-30T00:30:00.000Z  2026-03-30T02:30:00.000+02:00  +02:00",
        ]
    );
    // The file form, with -o json: the API's answer.
    let run = stack
        .cli()
        .args([
            "-o",
            "json",
            "preview",
            "-f",
            &example("schedule.yaml"),
            "--from",
            "2026-10-24T00:00:00Z",
            "--count",
            "3",
        ])
        .ok()
        .await;
    let fires = run.json()["fire_times"].clone();
    assert_eq!(
        fires[1],
        json!({"at": "2026-10-25T00:30:00.000Z", "local": "2026-10-25T02:30:00.000+02:00",
                                "offset": "+02:00", "dst": "overlap"})
    );
    // A whole preview request as the file; flags override its count.
    let request =
        json!({"schedule": {"kind": "interval", "every_ms": 3600000}, "from": "2026-01-01T00:00:00Z", "count": 5});
    let run =
        stack.cli().args(["-o", "json", "preview", "-f", "-", "--count", "2"]).stdin(request.to_string()).ok().await;
    assert_eq!(
        run.json()["fire_times"],
        json!([{"at": "2026-01-01T00:00:00.000Z"}, {"at": "2026-01-01T01:00:00.000Z"}])
    );
    let run = stack
        .cli()
        .args(["preview", "--every-ms", "60000", "--from", "2026-01-01T00:00:00Z", "--count", "2"])
        .ok()
        .await;
    assert_eq!(run.lines()[3], "2026-01-01T00:00:00.000Z  -      -");
    // Bad input: the API names the fields; no schedule at all is a usage error.
    let run =
        stack.cli().args(["preview", "--cron", "30 2 * * *", "--tz", "Berlin/Mitte", "--count", "0"]).fails(2).await;
    assert!(run.stderr.contains("schedule.timezone: ") && run.stderr.contains("count: "), "{run:?}");
    stack.cli().args(["preview", "--count", "3"]).fails(2).await;
    stack.cli().args(["preview", "--cron", "* * * * *", "--every-ms", "1000"]).fails(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exit_code() {
    let stack = Stack::start("cli-exit").await;
    let id = stack.create(&example("job.yaml")).await["id"].as_str().unwrap().to_owned();

    // 2: usage errors (clap), unreadable input, the API's 422.
    stack.cli().args(["jobs", "get"]).fails(2).await;
    stack.cli().args(["jobs", "explode"]).fails(2).await;
    stack.cli().args(["-o", "xml", "jobs", "list"]).fails(2).await;
    let run = stack.cli().args(["jobs", "create", "-f", "/nonexistent/job.yaml"]).fails(2).await;
    assert!(run.stderr.contains("/nonexistent/job.yaml"), "{run:?}");
    stack.cli().args(["jobs", "create", "-f", "-"]).stdin("name: [unclosed\n".into()).fails(2).await;
    let run = stack
        .cli()
        .args(["jobs", "create", "-f", "-"])
        .stdin(json!({"name": "", "schedule": {"kind": "cron", "expr": "61 * * * *"}, "target": {"kind": "http", "url": "https://x.example.com/"}}).to_string())
        .fails(2)
        .await;
    let fields: Vec<&str> = run.stderr.lines().skip(1).map(|l| l.trim_start().split(':').next().unwrap()).collect();
    assert!(
        fields.contains(&"name") && fields.contains(&"schedule.expr"),
        "each field error as `field: message`: {run:?}"
    );
    stack.cli().args(["--url", "localhost:8080", "jobs", "list"]).fails(2).await;

    // 3: not found.
    stack.cli().args(["jobs", "get", &uuid::Uuid::new_v4().to_string()]).fails(3).await;
    stack.cli().args(["jobs", "pause", "not-a-uuid"]).fails(3).await;

    // 4: a stale version (412) and a conflict (409).
    stack.cli().args(["jobs", "edit", &id, "--set", "name=x", "--if-version", "9"]).fails(4).await;
    stack.insert_row(&id, at("2026-11-20T07:00:00Z"), "succeeded", None).await;
    stack.cli().args(["executions", "replay", &id, "2026-11-20T07:00:00Z"]).fails(4).await;

    // 5: nothing listens there (the URL is named), or the API answers 503.
    let run = Cli::new().args(["--url", "http://127.0.0.1:1", "jobs", "list"]).fails(5).await;
    assert!(run.stderr.contains("http://127.0.0.1:1") && run.stderr.contains("refused"), "{run:?}");
    let no_redis = Stack::start_with(
        "cli-exit-503",
        app::Options { redis_url: Some("redis://127.0.0.1:1".into()), ..Default::default() },
    )
    .await;
    let run = no_redis.cli().args(["cluster"]).fails(5).await;
    assert!(run.stderr.contains("503"), "{run:?}");

    // 6: no token, a wrong token (401), a role too low (403).
    let run = Cli::new().args(["--url", &stack.base(), "jobs", "list"]).fails(6).await;
    assert!(run.stderr.contains("CRONSHARD_TOKEN"), "says where the token goes: {run:?}");
    Cli::new()
        .env("CRONSHARD_URL", &stack.base())
        .env("CRONSHARD_TOKEN", "wrong")
        .args(["jobs", "list"])
        .fails(6)
        .await;
    let reader = stack
        .app
        .send(
            stack
                .authed(stack.app.http.post(stack.app.url("/v1/tokens")))
                .json(&json!({"name": "ro", "role": "read", "namespaces": ["*"]})),
        )
        .await;
    assert_eq!(reader.status, 201, "{}", reader.text);
    let reader = reader.json()["token"].as_str().unwrap().to_owned();
    let as_reader = || Cli::new().env("CRONSHARD_URL", &stack.base()).env("CRONSHARD_TOKEN", &reader);
    as_reader().args(["jobs", "get", &id]).ok().await;
    as_reader().args(["jobs", "pause", &id]).fails(6).await;
    as_reader().args(["jobs", "create", "-f", &example("job.json")]).fails(6).await;
}

const SECRET: &str = "Sk-cli-8e41f0";

fn with_secrets(mut c: std::process::Command) -> std::process::Command {
    c.env("CRONSHARD_TOKEN", SECRET)
        .env("CRONSHARD_URL", format!("http://user:{SECRET}@127.0.0.1:1"))
        .env("CRONSHARD_NAMESPACE", "team-visible");
    c
}

#[test]
fn help_lists_the_variables_but_never_the_token_or_the_url() {
    let helps: [&[&str]; 7] = [
        &["--help"],
        &["-h"],
        &["jobs", "--help"],
        &["jobs", "create", "--help"],
        &["executions", "replay", "--help"],
        &["preview", "--help"],
        &["help", "calendars", "put"],
    ];
    for args in helps {
        let mut c = with_secrets(std::process::Command::new(binary()));
        c.args(args);
        let (status, out) = testing::output_within(&mut c, std::time::Duration::from_secs(20)).unwrap();
        testing::assert_help_hides_secret_values(
            status,
            &out,
            SECRET,
            &["CRONSHARD_TOKEN", "CRONSHARD_URL"],
            "[env: CRONSHARD_NAMESPACE=team-visible]",
        );
        assert!(out.contains("Examples:\n  $ cronshard "), "{args:?} shows no examples:\n{out}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_never_show_the_token_or_the_urls_password() {
    let stack = Stack::start("cli-secrets").await;
    let with_secrets = || {
        Cli::new()
            .env("CRONSHARD_TOKEN", SECRET)
            .env("CRONSHARD_URL", &format!("http://user:{SECRET}@127.0.0.1:1"))
            .env("CRONSHARD_NAMESPACE", "team-visible")
    };
    // Unreachable: the URL is named with its password masked.
    let run = with_secrets().args(["jobs", "list"]).fails(5).await;
    assert!(run.stderr.contains("http://user:***@127.0.0.1:1") && !run.stderr.contains(SECRET), "{run:?}");
    // Refused: the token is not echoed.
    let run = with_secrets().env("CRONSHARD_URL", &stack.base()).args(["jobs", "list"]).fails(6).await;
    assert!(!run.stderr.contains(SECRET) && !run.stdout.contains(SECRET), "{run:?}");
    let run = with_secrets()
        .env("CRONSHARD_URL", &stack.base())
        .args(["--token", SECRET, "-o", "json", "cluster"])
        .fails(6)
        .await;
    assert!(!run.stderr.contains(SECRET), "{run:?}");
}

/// `jobs next` and `preview` show which calendar excludes a slot, in the
/// table (`EXCLUDED BY`) and, as the API gives it, in JSON and YAML.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_and_preview_show_the_calendar_that_excludes_a_slot() {
    let stack = Stack::start("cli-next-excluded").await;
    stack
        .cli()
        .args(["calendars", "put", "xmas", "-f", "-"])
        .stdin(json!({"timezone": "UTC", "dates": ["2026-12-25"]}).to_string())
        .ok()
        .await;
    let id = stack
        .create_json(&json!({"name": "daily", "calendars": ["xmas"],
                             "schedule": {"kind": "cron", "expr": "0 9 * * *", "timezone": "UTC"},
                             "target": {"kind": "http", "url": "https://x.example.com/run"}}))
        .await;
    let from = ["--count", "3", "--from", "2026-12-24T00:00:00Z"];
    let run = stack.cli().args(["jobs", "next", &id]).args(from).ok().await;
    assert_eq!(
        run.lines(),
        [
            "AT (UTC)                  LOCAL                          OFFSET  DST  EXCLUDED BY",
            "2026-12-24T09:00:00.000Z  2026-12-24T09:00:00.000+00:00  +00:00",
            "2026-12-25T09:00:00.000Z  2026-12-25T09:00:00.000+00:00  +00:00       xmas",
            "2026-12-26T09:00:00.000Z  2026-12-26T09:00:00.000+00:00  +00:00",
        ],
        "{run:?}"
    );
    let run = stack.cli().args(["-o", "json", "jobs", "next", &id]).args(from).ok().await;
    let fires = run.json()["fire_times"].clone();
    assert_eq!((fires[0].get("excluded_by"), &fires[1]["excluded_by"]), (None, &json!("xmas")));
    let run = stack.cli().args(["-o", "yaml", "jobs", "next", &id]).args(from).ok().await;
    assert!(run.stdout.contains("excluded_by: xmas"), "{run:?}");

    // The preview shares the table.
    let request = json!({"schedule": {"kind": "cron", "expr": "0 9 * * *", "timezone": "UTC"},
                         "calendars": ["xmas"], "from": "2026-12-25T00:00:00Z", "count": 1});
    let run = stack.cli().args(["preview", "-f", "-"]).stdin(request.to_string()).ok().await;
    assert_eq!(run.lines()[2], "AT (UTC)                  LOCAL                          OFFSET  DST  EXCLUDED BY");
    assert!(run.lines()[3].ends_with("  xmas"), "{run:?}");
}

/// A value stored with control characters (before the API refused them,
/// or written around it) never reaches the terminal raw: `jobs get` and
/// `jobs list` show the characters escaped, so no line is forged and no
/// escape sequence is sent; `-o json` writes them as JSON escapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_values_with_control_characters_are_printed_escaped() {
    let stack = Stack::start("cli-escapes").await;
    let id = stack
        .create_json(&json!({"name": "plain", "schedule": {"kind": "interval", "every_ms": 60000},
                             "target": {"kind": "http", "url": "https://x.example.com/run"}}))
        .await;
    let evil_url = "https://x.example.com/a\r\nPAUSED:           false\u{1b}]0;owned\u{7}\u{1b}[2J";
    let evil_name = "name\u{202e}gnp.exe\u{9b}31m";
    let sql = stack.app.sql().await;
    sql.execute(
        "UPDATE jobs SET spec = jsonb_set(jsonb_set(spec, '{target,url}', to_jsonb($2::text)), '{name}', to_jsonb($3::text)),
                         name = $3 WHERE id = $1",
        &[&uuid::Uuid::parse_str(&id).unwrap(), &evil_url, &evil_name],
    )
    .await
    .unwrap();
    let raw = |s: &str| s.chars().any(|c| c != '\n' && (c.is_control() || ('\u{2028}'..='\u{202e}').contains(&c)));
    for args in [vec!["jobs", "get", &id], vec!["jobs", "list"]] {
        let run = stack.cli().args(&args).ok().await;
        assert!(!raw(&run.stdout), "{args:?} printed a raw control character: {:?}", run.stdout);
        let forged = run.lines().iter().filter(|l| l.starts_with("PAUSED:")).count();
        assert_eq!(forged, if args[1] == "get" { 1 } else { 0 }, "a forged line: {run:?}");
    }
    let run = stack.cli().args(["jobs", "get", &id]).ok().await;
    assert_eq!(
        run.field("TARGET"),
        "http POST https://x.example.com/a\\r\\nPAUSED:           false\\u{1b}]0;owned\\u{7}\\u{1b}[2J"
    );
    assert_eq!(run.field("NAME"), "name\\u{202e}gnp.exe\\u{9b}31m");
    for format in ["json", "yaml"] {
        let run = stack.cli().args(["-o", format, "jobs", "get", &id]).ok().await;
        assert!(!raw(&run.stdout), "-o {format} printed a raw control character: {:?}", run.stdout);
    }
    let run = stack.cli().args(["-o", "json", "jobs", "get", &id]).ok().await;
    assert_eq!((run.json()["target"]["url"].as_str(), run.json()["name"].as_str()), (Some(evil_url), Some(evil_name)));
}

/// An unreachable API is named with its query values masked, as every URL
/// the workspace prints (`domain::redact`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_url_is_shown_without_its_query_values() {
    let run = Cli::new()
        .env("CRONSHARD_URL", &format!("http://127.0.0.1:1/?api_key={SECRET}&mode=x"))
        .args(["jobs", "list"])
        .fails(5)
        .await;
    assert!(run.stderr.contains("cannot reach the API at http://127.0.0.1:1/?api_key=***&mode=***"), "{run:?}");
    assert!(!run.stderr.contains(SECRET), "{run:?}");
}

/// A job with a key is named by it, or by `namespace:key`, wherever a
/// command takes a job: in paths (the API resolves it) and in the filters
/// that take an id (the CLI looks the id up), a deleted job's key too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_named_by_its_key_or_namespace_and_key_everywhere() {
    let stack = Stack::start("cli-keys").await;
    let id = stack
        .create_json(&json!({"key": "sales-report", "name": "daily-sales-report",
                             "schedule": {"kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin"},
                             "target": {"kind": "http", "url": "https://reports.example.com/run"}}))
        .await;
    let keyless = stack.create(&example("job.json")).await["id"].as_str().unwrap().to_owned();
    for job in ["sales-report", "default:sales-report", id.as_str()] {
        let run = stack.cli().args(["jobs", "get", job]).ok().await;
        assert_eq!((run.field("ID"), run.field("KEY")), (id.clone(), "sales-report".to_owned()), "{job}");
    }
    let run = stack.cli().args(["jobs", "list"]).ok().await;
    assert_aligned(&run.stdout, &["ID", "KEY", "NAME", "NAMESPACE", "SCHEDULE"]);
    assert!(run.lines().iter().any(|l| l.starts_with(&format!("{id}  sales-report  daily-sales-report"))), "{run:?}");

    let run = stack.cli().args(["jobs", "edit", "sales-report", "--set", "retry.max_retries=4"]).ok().await;
    assert_eq!(run.field("VERSION"), "2");
    let run = stack.cli().args(["jobs", "pause", "default:sales-report", "--note", "by key"]).ok().await;
    assert!(run.field("PAUSED").ends_with(": by key"), "{run:?}");
    stack.cli().args(["jobs", "resume", "sales-report"]).ok().await;
    stack.cli().args(["jobs", "next", "sales-report", "--count", "1"]).ok().await;
    let run = stack.cli().args(["jobs", "history", "sales-report"]).ok().await;
    assert_eq!(run.lines()[0], format!("job {id}"));
    let run = stack.cli().args(["jobs", "trigger", "sales-report"]).ok().await;
    assert_eq!(run.field("JOB ID"), id);

    // Execution tables name the job by its key, else its name.
    let t1 = "2026-11-18T07:00:00.000Z";
    stack.insert_row(&id, at(t1), "failed", Some("HTTP 503 Service Unavailable")).await;
    stack.insert_row(&keyless, at("2026-11-18T06:00:00.000Z"), "succeeded", None).await;
    let run = stack.cli().args(["executions", "list", "--status", "failed", "--job", "sales-report"]).ok().await;
    assert!(run.lines()[1].starts_with(&format!("{t1}  sales-report  failed")), "{run:?}");
    let run = stack.cli().args(["executions", "list"]).ok().await;
    assert!(run.stdout.contains("  hourly-ledger-cleanup  succeeded"), "a job without a key by its name: {run:?}");
    assert!(!run.stdout.contains(&id), "no job id in the table: {run:?}");
    let run = stack.cli().args(["executions", "explain", "sales-report", t1]).ok().await;
    assert_eq!(run.field("VERDICT"), "failed (fired)");
    // Filters that take an id: the CLI looks the key up.
    let run = stack.cli().args(["-o", "json", "executions", "replay", "--job", "sales-report"]).ok().await;
    assert_eq!(run.json()["replayed"], 1, "{run:?}");
    let run = stack.cli().args(["-o", "json", "audit", "--job", "default:sales-report"]).ok().await;
    let audit = run.json();
    let actions: Vec<&str> = audit["items"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert!(actions.contains(&"job.create") && actions.contains(&"job.pause"), "{actions:?}");
    let run = stack.cli().args(["audit", "--job", "no-such-job"]).fails(2).await;
    assert!(run.stderr.contains("job: names no job"), "{run:?}");
    // An alert rule takes job ids: the CLI looks the key up.
    let post = stack.app.http.post(stack.app.url("/v1/alert-channels"));
    let channel = json!({"name": "ops", "kind": "webhook", "url": "https://alerts.example.com/cronshard"});
    let channel = stack.app.send(stack.authed(post).json(&channel)).await.json()["id"].as_str().unwrap().to_owned();
    let rule = ["alerts", "rules", "create", "--name", "r", "--job", "sales-report", "--condition", "failed"];
    let run = stack.cli().args(["-o", "json"]).args(rule).args(["--channel", &channel]).ok().await;
    assert_eq!(run.json()["jobs"], json!([id]), "{run:?}");
    stack.cli().args(["alerts", "list", "--job", "default:sales-report"]).ok().await;

    // A job made without a key is adopted into files by giving it one.
    let run = stack.cli().args(["jobs", "edit", &keyless, "--set", "key=ledger-cleanup"]).ok().await;
    assert_eq!(run.field("KEY"), "ledger-cleanup");
    assert_eq!(stack.cli().args(["jobs", "get", "ledger-cleanup"]).ok().await.field("ID"), keyless);
    // A bare key of several namespaces is refused, naming the way out.
    stack.namespace("team-b").await;
    let other = json!({"key": "ledger-cleanup", "namespace": "team-b", "name": "x",
                       "schedule": {"kind": "interval", "every_ms": 60000}, "target": {"kind": "http", "url": "https://x.example.com/"}});
    let other = stack.create_json(&other).await;
    let run = stack.cli().args(["jobs", "get", "ledger-cleanup"]).fails(2).await;
    assert!(run.stderr.contains("namespace:key"), "{run:?}");
    assert_eq!(stack.cli().args(["jobs", "get", "team-b:ledger-cleanup"]).ok().await.field("ID"), other);

    // Deleted: no longer live, but its key still names it for its history.
    stack.cli().args(["jobs", "delete", "sales-report"]).ok().await;
    stack.cli().args(["jobs", "get", "sales-report"]).fails(3).await;
    let run = stack.cli().args(["jobs", "history", "sales-report"]).ok().await;
    assert!(run.stdout.contains("job.delete"), "{run:?}");
    let run = stack.cli().args(["-o", "json", "audit", "--job", "sales-report"]).ok().await;
    assert_eq!(run.json()["items"][0]["action"], "job.delete");
    stack.cli().args(["jobs", "get", "nope"]).fails(3).await;
}

/// `jobs describe`: the definition whole, who paused it and why, the next
/// fire times and the last executions, newest first; -o json all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_the_definition_the_state_the_next_fires_and_the_last_executions() {
    let stack = Stack::start("cli-describe").await;
    let id = stack
        .create_json(&json!({"key": "nightly", "name": "nightly export", "overlap": "forbid", "jitter_ms": 5000,
                             "misfire": "skip", "retry": {"max_retries": 2},
                             "schedule": {"kind": "cron", "expr": "0 2 * * *", "timezone": "Europe/Berlin"},
                             "target": {"kind": "http", "url": "https://x.example.com/run", "method": "PUT"},
                             "labels": {"team": "data"}}))
        .await;
    for day in 1..=12 {
        let status = if day % 2 == 0 { "succeeded" } else { "failed" };
        let error = (status == "failed").then_some("HTTP 500 Internal Server Error");
        stack.insert_row(&id, at(&format!("2026-11-{day:02}T01:00:00Z")), status, error).await;
    }

    let run = stack.cli().args(["jobs", "describe", "nightly"]).ok().await;
    let value = |key: &str| {
        run.lines()
            .iter()
            .find_map(|l| l.trim_start().strip_prefix(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no {key} in {run:?}"))
            .trim()
            .to_owned()
    };
    assert_eq!((value("ID"), value("KEY"), value("NAME")), (id.clone(), "nightly".into(), "nightly export".into()));
    assert_eq!(value("TARGET"), "http PUT https://x.example.com/run");
    assert_eq!(value("OVERLAP"), "forbid");
    assert_eq!(value("JITTER"), "up to 5000 ms");
    assert_eq!(value("MISFIRE"), "skip (at most 100 replayed)");
    assert!(value("RETRY").starts_with("max 2 retries, 30000 ms first"), "{run:?}");
    assert_eq!(value("PAUSED"), "false");
    let section = |title: &str| -> Vec<String> {
        let lines = run.lines();
        let start = lines.iter().position(|l| *l == title).unwrap_or_else(|| panic!("no {title} in {run:?}"));
        lines[start + 1..].iter().take_while(|l| !l.is_empty()).map(|l| l.to_string()).collect()
    };
    let fires = section("Next fire times:");
    assert_eq!(fires.len(), 6, "a header and 5 fire times: {run:?}");
    assert!(fires[0].trim_start().starts_with("AT (UTC)") && fires[0].contains("DELIVERED AT (UTC)"), "{run:?}");
    let executions = section("Last executions (newest first):");
    assert_eq!(executions.len(), 11, "a header and 10 executions: {run:?}");
    assert_aligned(
        &executions.iter().map(|l| l.trim_start().to_owned()).collect::<Vec<_>>().join("\n"),
        &["SCHEDULED AT (UTC)", "STATUS", "TRIGGER", "ATTEMPTS", "HTTP", "ERROR / REASON"],
    );
    assert!(executions[1].trim_start().starts_with("2026-11-12T01:00:00.000Z  succeeded"), "{run:?}");
    assert!(executions[2].contains("failed") && executions[2].contains("HTTP 500 Internal Server Error"), "{run:?}");

    // Paused: by whom, when, why.
    stack.cli().args(["jobs", "pause", "nightly", "--note", "warehouse migration"]).ok().await;
    let run = stack.cli().args(["jobs", "describe", &id, "--executions", "3", "--next", "2"]).ok().await;
    let state: Vec<&str> =
        run.lines().into_iter().skip_while(|l| *l != "State:").skip(1).take_while(|l| !l.is_empty()).collect();
    let state: Vec<String> = state.iter().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
    assert_eq!(state[0], "PAUSED: true");
    assert_eq!(state[1], "PAUSED BY: bootstrap token #1");
    assert!(state[2].starts_with("PAUSED AT (UTC): 20") && state[2].ends_with('Z'), "{state:?}");
    assert_eq!(state[3], "NOTE: warehouse migration");

    let run = stack
        .cli()
        .args(["-o", "json", "jobs", "describe", "default:nightly", "--executions", "3", "--next", "2"])
        .ok()
        .await;
    let whole = run.json();
    assert_eq!(whole["job"]["id"], json!(id));
    assert_eq!(whole["executions"]["items"].as_array().unwrap().len(), 3);
    assert_eq!(whole["executions"]["items"][0]["job_key"], "nightly");
    assert!(whole["next"]["fire_times"].is_array(), "{whole}");
    stack.cli().args(["jobs", "describe", "nightly", "--executions", "0"]).fails(2).await;
    stack.cli().args(["jobs", "describe", "missing"]).fails(3).await;
}

/// `executions list --watch`: the newest page, then only the rows that
/// land or change, until --count, --for or Ctrl-C.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_prints_new_rows_and_status_changes_as_they_land() {
    let stack = Stack::start("cli-watch").await;
    let id = stack
        .create_json(
            &json!({"key": "watched", "name": "watched", "schedule": {"kind": "interval", "every_ms": 3600000},
                             "target": {"kind": "http", "url": "https://x.example.com/"}}),
        )
        .await;
    let (t1, t2) = ("2026-11-18T07:00:00.000Z", "2026-11-18T08:00:00.000Z");
    stack.insert_row(&id, at(t1), "retrying", Some("HTTP 503 Service Unavailable")).await;

    let watch = stack.cli().args(["executions", "list", "--job", "watched", "--watch", "--interval", "1s"]);
    let watch = watch.args(["--count", "3", "--for", "40s"]).run();
    let land = async {
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        stack.insert_row(&id, at(t2), "succeeded", None).await;
        stack
            .app
            .sql()
            .await
            .execute(
                "UPDATE scheduled_jobs SET status = 'failed', attempts = 4 WHERE job_id = $1 AND scheduled_at = $2",
                &[&uuid::Uuid::parse_str(&id).unwrap(), &at(t1)],
            )
            .await
            .unwrap();
    };
    let (run, ()) = tokio::join!(watch, land);
    assert_eq!(run.code, 0, "{run:?}");
    let lines = run.lines();
    assert_eq!(lines.len(), 4, "a header and 3 rows: {run:?}");
    assert!(lines[0].starts_with("SCHEDULED AT (UTC)        JOB                             STATUS"), "{run:?}");
    assert!(lines[1].starts_with(&format!("{t1}  watched")) && lines[1].contains("retrying"), "{run:?}");
    let later: Vec<&str> = lines[2..].to_vec();
    assert!(later.iter().any(|l| l.starts_with(t2) && l.contains("succeeded")), "the new row: {run:?}");
    assert!(later.iter().any(|l| l.starts_with(t1) && l.contains("failed")), "the change: {run:?}");

    // JSON Lines, bounded by --for; nothing new, nothing more.
    let started = std::time::Instant::now();
    let run =
        stack.cli().args(["-o", "json", "executions", "list", "--watch", "--interval", "1s", "--for", "2s"]).ok().await;
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{run:?}");
    let rows: Vec<Value> = run.lines().iter().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 2, "each execution once: {run:?}");
    assert_eq!((rows[0]["scheduled_at"].as_str(), rows[0]["job_key"].as_str()), (Some(t1), Some("watched")));
    // Usage: --for without --watch, an interval out of bounds.
    stack.cli().args(["executions", "list", "--for", "2s"]).fails(2).await;
    stack.cli().args(["executions", "list", "--watch", "--interval", "10ms"]).fails(2).await;
    stack.cli().args(["executions", "list", "--watch", "--all"]).fails(2).await;

    // Ctrl-C ends a watch quietly.
    let mut child = tokio::process::Command::new(binary())
        .args(["executions", "list", "--watch"])
        .env("CRONSHARD_URL", stack.base())
        .env("CRONSHARD_TOKEN", support::TOKEN)
        .env("CRONSHARD_CONFIG", "/nonexistent/config.yaml")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let status =
        tokio::time::timeout(std::time::Duration::from_secs(10), child.wait()).await.expect("stopped").unwrap();
    assert_eq!(status.code(), Some(0));
}
