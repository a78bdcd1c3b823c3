//! Changing a job near its slots, on the real services: a change applies to
//! the slots due at or after it, never loses one, and the ledger says what
//! became of each. Each test has its own database and cluster name.

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use domain::execution::{format_instant, truncate_ms};
use support::{ProcEnv, Sink, Stack, all_succeeded, herd_on, http_target, metrics_text};
use testing::wait_for;

fn at(t: DateTime<Utc>) -> String {
    format_instant(truncate_ms(t))
}

async fn sleep_until(t: DateTime<Utc>) {
    if let Ok(wait) = (t - Utc::now()).to_std() {
        tokio::time::sleep(wait).await;
    }
}

/// A scheduler process that counts a row stranded 1 s past due, and the
/// address of its metrics.
fn sweeping_scheduler(env: &ProcEnv) -> (tokio::process::Child, String) {
    let metrics = support::free_addr();
    let scheduler = env
        .command("cronshard-scheduler")
        .env("NODE_ID", "node-a")
        .env("METRICS_ADDR", &metrics)
        .env("STRANDED_AFTER_SECS", "1")
        .spawn()
        .unwrap();
    (scheduler, metrics)
}

async fn put_job(stack: &Stack, id: &str, body: &Value) {
    stack.put(&format!("/v1/jobs/{id}"), body).await;
}

/// The bug: a slot armed by a worker under version v, then the job changed
/// (a PUT, or a pause and a resume) a second before it. The worker cancels
/// the armed row at the due instant, and the version in force must take the
/// slot again; before, nobody did (one node: no lock loser to re-check), or
/// the re-take kept the old attempt count and the worker dropped its
/// message as a duplicate, so the row stayed `pending` for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_change_a_second_before_an_armed_slot_delivers_it_once_with_the_definition_then_in_force() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("change-near-slot").await;
    let mut cfg = stack.node_config("node-a");
    // One owner: no lock loser re-checks the slot; the re-take must not
    // depend on one. A long lookahead arms the slots well before the change.
    cfg.replication_factor = 1;
    cfg.lookahead = Duration::from_secs(10);
    stack.start_node(cfg);
    stack.start_worker(stack.worker_config("worker-a"));

    // A whole second: a slot of the every-second cron job too.
    let due = chrono::DurationRound::duration_trunc(Utc::now() + TimeDelta::seconds(7), TimeDelta::seconds(1)).unwrap();
    let once = |name: &str| json!({ "name": name, "schedule": { "kind": "once", "at": at(due) }, "target": http_target(&sink.url(name)) });
    let replaced = stack.create_job(once("replaced-old")).await["id"].as_str().unwrap().to_owned();
    let paused = stack.create_job(once("paused-resumed")).await["id"].as_str().unwrap().to_owned();
    let every_second = stack
        .create_job(json!({ "name": "cron", "schedule": { "kind": "cron", "expr": "* * * * * *" },
                            "target": http_target(&sink.url("cron-old")) }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for id in [&replaced, &paused, &every_second] {
        wait_for("the slot to be armed by the worker", Duration::from_secs(6), || async {
            stack.ledger(id, due).await.filter(|r| r["status"] == "running")
        })
        .await;
    }
    assert!(Utc::now() < due - TimeDelta::milliseconds(1600), "the test machine is too slow to arm ahead");

    sleep_until(due - TimeDelta::milliseconds(1500)).await;
    stack.post(&format!("/v1/jobs/{paused}/pause")).await;
    sleep_until(due - TimeDelta::seconds(1)).await;
    put_job(&stack, &replaced, &once("replaced-new")).await;
    let mut cron_v2 = json!({ "name": "cron", "schedule": { "kind": "cron", "expr": "* * * * * *" },
                              "target": http_target(&sink.url("cron-new")) });
    put_job(&stack, &every_second, &cron_v2).await;
    sleep_until(due - TimeDelta::milliseconds(500)).await;
    stack.post(&format!("/v1/jobs/{paused}/resume")).await;
    assert!(Utc::now() < due, "the changes must land before the slot: the machine is too slow");

    let slot = |id: &str| format!("{id}@{}", at(due));
    for (id, path) in [(&replaced, "replaced-new"), (&paused, "paused-resumed"), (&every_second, "cron-new")] {
        wait_for("the slot to be delivered with the definition in force", Duration::from_secs(15), || async {
            sink.received_on(path).iter().any(|r| r.execution_id == slot(id)).then_some(())
        })
        .await;
        let row = wait_for("the slot's row to succeed", Duration::from_secs(10), || async {
            stack.ledger(id, due).await.filter(|r| r["status"] == "succeeded")
        })
        .await;
        assert_eq!(row["attempts"], 1, "{row}");
        let events: Vec<&str> = row["history"].as_array().unwrap().iter().filter_map(|e| e["event"].as_str()).collect();
        assert!(events.contains(&"retaken"), "the cancelled claim was re-taken: {row}");
    }
    // Let every copy of every message settle, then count.
    sleep_until(due + TimeDelta::seconds(3)).await;
    let deliveries_of = |id: &str| sink.received().iter().filter(|r| r.execution_id == slot(id)).count();
    for id in [&replaced, &paused, &every_second] {
        assert_eq!(deliveries_of(id), 1, "slot {} delivered once", slot(id));
    }
    assert!(sink.received_on("replaced-old").is_empty(), "the replaced definition must not fire");
    assert!(
        sink.received_on("cron-old").iter().all(|r| r.scheduled_at < at(due)),
        "no slot from the change on went to the old target"
    );
    // The cron job goes on with the new definition, nothing left behind.
    let next = due + TimeDelta::seconds(2);
    wait_for("the next slots to be delivered", Duration::from_secs(10), || async {
        sink.received_on("cron-new").iter().any(|r| r.scheduled_at == at(next)).then_some(())
    })
    .await;
    // A change after a slot is due is ordered after it.
    cron_v2["target"] = http_target(&sink.url("cron-v3"));
    put_job(&stack, &every_second, &cron_v2).await;
    let client = stack.pg.get().await.unwrap();
    let not_final: i64 = client
        .query_one(
            "SELECT count(*) FROM scheduled_jobs WHERE scheduled_at <= $1 AND status IN ('pending', 'running', 'retrying')",
            &[&next],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(not_final, 0, "every row of a due slot is final");
    stack.stop().await;
}

/// Slots of a paused period are recorded `skipped` (reason `paused`) when
/// the job resumes, and explain still says so; a job whose `max_runs` are
/// used up shows no next fire, edits do not make it lose or repeat runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paused_slots_are_recorded_and_max_runs_survive_an_edit() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("paused-period").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));

    let start = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let interval = |path: &str, max_runs: Option<u64>| {
        let mut schedule = json!({ "kind": "interval", "every_ms": 1000, "start_at": at(start) });
        if let Some(n) = max_runs {
            schedule["max_runs"] = json!(n);
        }
        json!({ "name": path, "schedule": schedule, "target": http_target(&sink.url(path)) })
    };
    let job = stack.create_job(interval("pausing", None)).await["id"].as_str().unwrap().to_owned();
    let limited = stack.create_job(interval("limited-v1", Some(4))).await["id"].as_str().unwrap().to_owned();

    wait_for("a first delivery", Duration::from_secs(10), || async {
        (!sink.received_on("pausing").is_empty()).then_some(())
    })
    .await;
    stack.post(&format!("/v1/jobs/{job}/pause")).await;
    let paused_at = Utc::now();
    // The limited job is edited between its runs: its count must carry over.
    wait_for("two runs of the limited job", Duration::from_secs(10), || async {
        (sink.received_on("limited-v1").len() >= 2).then_some(())
    })
    .await;
    put_job(&stack, &limited, &interval("limited-v2", Some(4))).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stack.post(&format!("/v1/jobs/{job}/resume")).await;
    let resumed_at = Utc::now();

    let client = stack.pg.get().await.unwrap();
    let id: uuid::Uuid = job.parse().unwrap();
    let skipped: Vec<DateTime<Utc>> = client
        .query(
            "SELECT scheduled_at FROM scheduled_jobs WHERE job_id = $1 AND status = 'skipped' AND reason = 'paused'
             ORDER BY scheduled_at",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // Every slot of the paused period has its row, whether a node had
    // claimed it ahead (cancelled by the pause) or not (recorded by the
    // resume); the slots right at the two changes may go either way.
    let paused_slots: Vec<DateTime<Utc>> = (0..)
        .map(|k| start + TimeDelta::seconds(k))
        .skip_while(|t| *t <= paused_at)
        .take_while(|t| *t < resumed_at - TimeDelta::milliseconds(500))
        .collect();
    assert!(paused_slots.len() >= 2, "the test paused the job for too short a time");
    for t in &paused_slots {
        assert!(skipped.contains(t), "the paused slot {t} has no `skipped` (paused) row: {skipped:?}");
    }
    assert!(skipped.iter().all(|t| *t >= paused_at - TimeDelta::seconds(1) && *t <= resumed_at), "{skipped:?}");
    let delivered: Vec<String> = sink.received_on("pausing").iter().map(|r| r.scheduled_at.clone()).collect();
    for t in &skipped {
        assert!(!delivered.contains(&at(*t)), "a paused slot {t} was delivered");
    }
    let explained = stack.get(&format!("/v1/jobs/{job}/executions/{}", at(skipped[0]))).await;
    assert_eq!(explained["explanation"]["verdict"], "skipped", "{explained}");
    assert_eq!(explained["explanation"]["fired"], false, "{explained}");
    assert!(explained["explanation"]["summary"].as_str().unwrap().contains("paused"), "{explained}");

    // Four runs in all, across both definitions, then nothing more.
    wait_for("the limited job's fourth run", Duration::from_secs(15), || async {
        (sink.received_on("limited-v1").len() + sink.received_on("limited-v2").len() >= 4).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let runs = sink.received_on("limited-v1").len() + sink.received_on("limited-v2").len();
    assert_eq!(runs, 4, "max_runs 4 across an edit");
    let got = stack.get(&format!("/v1/jobs/{limited}")).await;
    assert_eq!(got["next_fire_at"], Value::Null, "a job with its runs used up has no next fire: {got}");
    stack.stop().await;
}

/// The invariant's sweeps: a row no process will move (here made by hand in
/// the shape the lost-slot bug left: `pending`, published, one attempt
/// counted) is found, published again as the attempt it expects, delivered
/// once; a slot a change cancelled whose re-take died with its owners is
/// re-taken by the version in force; both are counted in
/// `cronshard_ledger_stranded_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranded_row_is_found_moved_on_and_counted() {
    let sink = Sink::start().await;
    let stack = Stack::start("stranded").await;
    let env = stack.proc_env();
    let job = stack
        .create_job(
            json!({ "name": "stranded", "schedule": { "kind": "once", "at": at(Utc::now() + TimeDelta::days(1)) },
                            "target": http_target(&sink.url("stranded")) }),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let id: uuid::Uuid = job.parse().unwrap();
    let client = stack.pg.get().await.unwrap();
    let slot = truncate_ms(Utc::now() - TimeDelta::minutes(3));
    let version: i64 = client.query_one("SELECT version FROM jobs WHERE id = $1", &[&id]).await.unwrap().get(0);
    client
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, trigger, status, attempts,
                                         scheduler_node, fired_at, published_at, job_version)
             VALUES ($1, $2, $3, $4, 'manual', 'pending', 1, 'lost', $2, $2, $5)",
            &[&id, &slot, &uuid::Uuid::now_v7(), &domain::execution::execution_id(id, slot), &version],
        )
        .await
        .unwrap();

    // A slot a change cancelled (version 1 had claimed it, version 2 was in
    // force at it and fires there) whose re-take died with its owners.
    let every_second = stack
        .create_job(json!({ "name": "unretaken", "schedule": { "kind": "cron", "expr": "* * * * * *" },
                            "target": http_target(&sink.url("unretaken")) }))
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let cron = json!({ "name": "unretaken", "schedule": { "kind": "cron", "expr": "* * * * * *" },
                       "target": http_target(&sink.url("unretaken-v2")) });
    stack.put(&format!("/v1/jobs/{every_second}"), &cron).await;
    let cancelled_job: uuid::Uuid = every_second.parse().unwrap();
    let cancelled_slot =
        chrono::DurationRound::duration_trunc(Utc::now() - TimeDelta::minutes(3), TimeDelta::seconds(1)).unwrap();
    client
        .execute(
            "UPDATE job_changes SET valid_from = valid_from - interval '1 day' WHERE job_id = $1",
            &[&cancelled_job],
        )
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, reason, attempts,
                                         scheduler_node, fired_at, finished_at, job_version)
             VALUES ($1, $2, $3, $4, 'skipped', 'superseded', 1, 'dead', $2, now() - interval '10 seconds', 1)",
            &[
                &cancelled_job,
                &cancelled_slot,
                &uuid::Uuid::now_v7(),
                &domain::execution::execution_id(cancelled_job, cancelled_slot),
            ],
        )
        .await
        .unwrap();

    let (mut scheduler, metrics) = sweeping_scheduler(&env);
    let mut worker = env.worker("worker-a");

    let execution = domain::execution::execution_id(id, slot);
    wait_for("the stranded slot to be delivered", Duration::from_secs(30), || async {
        sink.received_on("stranded").iter().any(|r| r.execution_id == execution).then_some(())
    })
    .await;
    let row = wait_for("the stranded row to succeed", Duration::from_secs(10), || async {
        stack.ledger(&job, slot).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["attempts"], 2, "delivered as the attempt the row expected: {row}");
    assert!(row["history"].as_array().unwrap().iter().any(|e| e["event"] == "stranded"), "{row}");
    let (scraped, text) = wait_for("the metric to count it", Duration::from_secs(10), || async {
        let text = metrics_text(&stack.http, &metrics).await?;
        let line = text
            .lines()
            .find(|l| l.starts_with("cronshard_ledger_stranded_total") && l.contains("status=\"pending\""))?
            .to_owned();
        Some((line, text))
    })
    .await;
    assert!(scraped.trim_end().ends_with(" 1"), "{scraped}");
    // Described once, in the metric catalog.
    assert!(text.contains("# HELP cronshard_ledger_stranded_total Ledger rows no process"), "{text}");
    assert_eq!(sink.received_on("stranded").len(), 1, "delivered once");

    let retaken = domain::execution::execution_id(cancelled_job, cancelled_slot);
    wait_for("the cancelled slot to be re-taken and delivered", Duration::from_secs(30), || async {
        sink.received_on("unretaken-v2").iter().any(|r| r.execution_id == retaken).then_some(())
    })
    .await;
    let row = wait_for("the re-taken row to succeed", Duration::from_secs(10), || async {
        stack.ledger(&every_second, cancelled_slot).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["attempts"], 1, "{row}");
    assert!(row["history"].as_array().unwrap().iter().any(|e| e["event"] == "retaken"), "{row}");
    wait_for("the metric to count the re-take", Duration::from_secs(10), || async {
        let text = metrics_text(&stack.http, &metrics).await?;
        text.lines()
            .any(|l| {
                l.starts_with("cronshard_ledger_stranded_total")
                    && l.contains("status=\"skipped\"")
                    && l.trim_end().ends_with(" 1")
            })
            .then_some(())
    })
    .await;
    assert_eq!(sink.received().iter().filter(|r| r.execution_id == retaken).count(), 1, "re-taken once");
    let _ = scheduler.kill().await;
    let _ = worker.kill().await;
    stack.stop().await;
}

/// The slots of versions that were in force while the job had no live owner
/// (here: no node at all) are caught up under those versions once an owner
/// loads the job, even though the job is paused by then; before, only the
/// current version's slots were looked at, and a paused job not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slots_of_versions_replaced_while_no_owner_was_alive_are_caught_up() {
    let sink = Sink::start().await;
    let mut stack = Stack::start("past-versions").await;
    let t0 = chrono::DurationRound::duration_trunc(Utc::now() + TimeDelta::seconds(1), TimeDelta::seconds(1)).unwrap();
    let every_second = |path: &str| {
        json!({ "name": "past", "schedule": { "kind": "interval", "every_ms": 1000, "start_at": at(t0) },
                "target": http_target(&sink.url(path)) })
    };
    let id = stack.create_job(every_second("past-v1")).await["id"].as_str().unwrap().to_owned();
    sleep_until(t0 + TimeDelta::milliseconds(2500)).await;
    stack.put(&format!("/v1/jobs/{id}"), &every_second("past-v2")).await;
    sleep_until(t0 + TimeDelta::milliseconds(5500)).await;
    stack.post(&format!("/v1/jobs/{id}/pause")).await;
    let paused_at = Utc::now();

    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let job: uuid::Uuid = id.parse().unwrap();
    let expected: Vec<String> =
        (0..=5).map(|k| domain::execution::execution_id(job, t0 + TimeDelta::seconds(k))).collect();
    // Generous: the catch-up runs beside the other tests of the workspace
    // (20 s was once exceeded in CI); a lost slot still fails here.
    wait_for("the slots of both earlier versions", Duration::from_secs(60), || async {
        let got = sink.received();
        expected.iter().all(|e| got.iter().any(|r| &r.execution_id == e)).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for e in &expected {
        assert_eq!(sink.received().iter().filter(|r| &r.execution_id == e).count(), 1, "{e} delivered once");
    }
    assert!(
        sink.received().iter().all(|r| r.scheduled_at < at(paused_at)),
        "nothing of the paused period fired: {:?}",
        sink.received()
    );
    stack.stop().await;
}

/// A message late behind a backlog is late, not lost. With no worker yet,
/// a herd's messages wait in the main queue long past
/// `STRANDED_AFTER_SECS`; the sweep counts the backlog
/// (`cronshard_broker_ready_messages`) and moves none of their rows on,
/// pass after pass. A worker then drains the queue: every slot delivered
/// once, no row saying `stranded`, the counter still 0. Judged by age
/// alone, every row of the herd was published a second time (the bug: a
/// backlog doubled by the sweep and the stranded alert raised for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_behind_a_backlog_is_late_not_stranded() {
    // Bundles carry up to 25 slots: 3,000 make at least 120 messages,
    // past the 50 ready messages that still count as caught up.
    const JOBS: usize = 3_000;
    let sink = Sink::start().await;
    let stack = Stack::start("backlog").await;
    let env = stack.proc_env();
    let (mut scheduler, metrics) = sweeping_scheduler(&env);
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(6));
    let jobs = herd_on(&stack, &sink, "backlog", JOBS, due).await;
    assert!(Utc::now() < due, "creating the herd took too long for the test's timing");
    let ids: Vec<uuid::Uuid> = jobs.iter().map(|id| id.parse().unwrap()).collect();
    let client = stack.pg.get().await.unwrap();
    let stranded_rows = || async {
        let row = client
            .query_one(
                "SELECT count(*) FROM scheduled_jobs
                 WHERE job_id = ANY($1) AND history @> '[{\"event\": \"stranded\"}]'",
                &[&ids],
            )
            .await
            .unwrap();
        row.get::<_, i64>(0)
    };
    let scrape = || metrics_text(&stack.http, &metrics);
    let sweeps =
        |text: &str| runtime::metrics::value_in(text, "cronshard_dispatch_stage_seconds_count{stage=\"stranded\"}");

    // Every row published and waiting, and past the stranded age.
    wait_for("every row published", Duration::from_secs(30), || async {
        let n: i64 = client
            .query_one(
                "SELECT count(*) FROM scheduled_jobs
                 WHERE job_id = ANY($1) AND status = 'pending' AND published_at IS NOT NULL",
                &[&ids],
            )
            .await
            .unwrap()
            .get(0);
        (n as usize == JOBS && Utc::now() > due + TimeDelta::seconds(1)).then_some(())
    })
    .await;
    // Two whole passes of the sweep from here, each judging rows past age.
    let before = wait_for("a sweep pass counted", Duration::from_secs(30), || async { sweeps(&scrape().await?) }).await;
    let text = wait_for("two more sweep passes", Duration::from_secs(60), || async {
        let text = scrape().await?;
        (sweeps(&text)? >= before + 2.0).then_some(text)
    })
    .await;
    let ready = runtime::metrics::value_in(&text, "cronshard_broker_ready_messages").expect("the backlog gauge");
    assert!(ready > 50.0, "the sweep saw the backlog: {ready} ready messages");
    assert_eq!(stranded_rows().await, 0, "a row waiting behind the backlog was moved on as stranded");

    // A worker drains it: each slot once, none stranded.
    let mut worker = env.worker("worker-a");
    let expected = all_succeeded(&stack, jobs.iter()).await;
    assert_eq!(expected.len(), JOBS);
    support::assert_exactly_once(&sink.received(), &expected);
    assert_eq!(stranded_rows().await, 0);
    let text = scrape().await.unwrap();
    assert_eq!(runtime::metrics::value_in(&text, "cronshard_ledger_stranded_total").unwrap_or(0.0), 0.0, "{text}");
    let _ = worker.kill().await;
    let _ = scheduler.kill().await;
    stack.stop().await;
}
