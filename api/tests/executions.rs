//! The execution routes of the REST API: a job's executions (GET
//! /v1/jobs/{id}/executions, with pagination and filters), "did it fire, and if
//! not, why" (GET /v1/jobs/{id}/executions/{scheduled_at}) and replay. Against
//! the real server in-process, on the real Postgres and Redis. Each test gets
//! its own database (`TestDb`), its own cluster name (Redis key prefix) and its
//! own server on an ephemeral port.

#[path = "support/lib.rs"]
mod support;

use chrono::{DateTime, Duration as TimeDelta, Timelike, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use support::*;

// ---------------------------------------------------------------------------
// GET /v1/jobs/{id}/executions
// ---------------------------------------------------------------------------

#[tokio::test]
async fn executions_are_listed_newest_first_with_cursor_pagination() {
    let app = TestApp::start("execs").await;
    let id = app.create_id(&example_job()).await;
    let other = app.create_id(&example_job()).await;
    let path = format!("/v1/jobs/{id}/executions");

    let r = app.get(&path).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({ "items": [], "next_cursor": null }));

    let pg = app.sql().await;
    let base = DateTime::parse_from_rfc3339("2026-11-20T10:00:00.000Z").unwrap().to_utc();
    let statuses = ["succeeded", "failed", "succeeded", "missed", "pending"];
    let mut slots = Vec::new();
    for (k, status) in statuses.iter().enumerate() {
        let at = base + TimeDelta::minutes(k as i64 * 90);
        slots.push(at);
        let job = Uuid::parse_str(&id).unwrap();
        pg.execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status) VALUES ($1, $2, $3, $4, $5)",
            &[&job, &at, &Uuid::new_v4(), &format!("{id}@{}", ts(at)), status],
        )
        .await
        .unwrap();
    }
    // Another job's row, newer than all of them, never shows up.
    let other_at = base + TimeDelta::days(1);
    pg.execute(
        "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status) VALUES ($1, $2, $3, $4, 'succeeded')",
        &[&Uuid::parse_str(&other).unwrap(), &other_at, &Uuid::new_v4(), &format!("{other}@{}", ts(other_at))],
    )
    .await
    .unwrap();

    let newest_first: Vec<String> = slots.iter().rev().map(|t| ts(*t)).collect();
    let all = app.get(&path).await.json();
    let got: Vec<&str> = all["items"].as_array().unwrap().iter().map(|e| e["scheduled_at"].as_str().unwrap()).collect();
    assert_eq!(got, newest_first);
    assert_eq!(all["next_cursor"], Value::Null);
    let first = &all["items"][0];
    assert_eq!(first["job_id"], json!(id));
    assert_eq!(first["status"], "pending");
    assert_eq!(first["execution_id"], json!(format!("{id}@{}", ts(slots[4]))));
    assert_eq!(first["trigger"], "schedule");
    assert_eq!(first["attempts"], json!(0));
    assert_eq!(all["items"][3]["status"], "failed");

    // Pages of 2: 2, 2, 1, each row once, still newest first.
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}?limit=2&cursor={}", enc(c)),
            None => format!("{path}?limit=2"),
        };
        let r = app.get(&url).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let page = r.json();
        let items = page["items"].as_array().unwrap();
        sizes.push(items.len());
        seen.extend(items.iter().map(|e| e["scheduled_at"].as_str().unwrap().to_owned()));
        assert!(sizes.len() <= 3, "{sizes:?}");
        match &page["next_cursor"] {
            Value::Null => break,
            Value::String(c) => cursor = Some(c.clone()),
            other => panic!("next_cursor is {other}"),
        }
    }
    assert_eq!(sizes, [2, 2, 1]);
    assert_eq!(seen, newest_first);

    for (q, field) in [("limit=0", "limit"), ("limit=501", "limit"), ("cursor=yesterday", "cursor")] {
        let r = app.get(&format!("{path}?{q}")).await;
        assert_eq!(r.status, 422, "{q}: {}", r.text);
        assert_invalid(&r, &[field]);
    }
    assert_problem(&app.get("/v1/jobs/not-a-uuid/executions").await, 404);
}

/// Every other `/v1/jobs/{id}/…` answers 404 for a job that never existed.
#[tokio::test]
async fn executions_of_an_unknown_job_are_404() {
    let app = TestApp::start("execs404").await;
    assert_problem(&app.get(&format!("/v1/jobs/{}/executions", Uuid::new_v4())).await, 404);
}

// ---------------------------------------------------------------------------
// GET /v1/jobs/{id}/executions/{scheduled_at} ("did it fire, and if not, why")
// ---------------------------------------------------------------------------

/// Inserts a ledger row as the scheduler and the worker would leave it.
#[allow(clippy::too_many_arguments)]
async fn insert_row(
    pg: &tokio_postgres::Client,
    job: &str,
    at: DateTime<Utc>,
    status: &str,
    attempts: i32,
    reason: Option<&str>,
    error: Option<&str>,
    history: Value,
) {
    let id = Uuid::parse_str(job).unwrap();
    pg.execute(
        "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, scheduler_node,
                                     worker_id, fired_at, published_at, started_at, finished_at, http_status, reason,
                                     error, history)
         VALUES ($1, $2, $3, $4, $5, $6, 'node-a', 'worker-7', $2, $2, $2, $2::timestamptz + interval '1 s',
                 CASE WHEN $6 > 0 THEN 500 END, $7, $8, $9)",
        &[&id, &at, &Uuid::new_v4(), &format!("{job}@{}", ts(at)), &status, &attempts, &reason, &error, &history],
    )
    .await
    .unwrap();
}

impl TestApp {
    async fn explain(&self, job: &str, at: &str) -> Value {
        let r = self.get(&format!("/v1/jobs/{job}/executions/{}", enc(at))).await;
        assert_eq!(r.status, 200, "explain {at}: {}", r.text);
        r.json()
    }
}

#[tokio::test]
async fn explain_reads_the_ledger_row_its_history_and_a_verdict() {
    let app = TestApp::start("explainrow").await;
    let pg = app.sql().await;
    let anchor = now_ms() - TimeDelta::hours(2);
    let id = app
        .create_id(&json!({
            "name": "minutely",
            "schedule": { "kind": "interval", "every_ms": 60_000, "start_at": ts(anchor) },
            "target": http_target(),
        }))
        .await;
    let slot = |m: i64| anchor + TimeDelta::minutes(m);
    let attempts = json!([
        { "event": "attempt", "attempt": 1, "worker_id": "worker-3", "started_at": ts(slot(1)), "finished_at": ts(slot(1)),
          "outcome": "retrying", "http_status": 503, "error": "HTTP 503", "redelivered": false },
        { "event": "attempt", "attempt": 2, "worker_id": "worker-7", "started_at": ts(slot(1)), "finished_at": ts(slot(1)),
          "outcome": "succeeded", "http_status": 200 }
    ]);
    insert_row(&pg, &id, slot(1), "succeeded", 2, None, None, attempts.clone()).await;
    insert_row(&pg, &id, slot(2), "failed", 4, None, Some("HTTP 500"), json!([])).await;
    insert_row(&pg, &id, slot(3), "skipped", 0, Some("misfire policy skip"), None, json!([])).await;

    let ok = app.explain(&id, &ts(slot(1))).await;
    assert_eq!(ok["job_id"], json!(id));
    assert_eq!(ok["scheduled_at"], json!(ts(slot(1))));
    let execution = &ok["execution"];
    assert_eq!(execution["status"], "succeeded");
    assert_eq!(execution["execution_id"], json!(format!("{id}@{}", ts(slot(1)))));
    assert_eq!(execution["history"], attempts);
    let e = &ok["explanation"];
    assert_eq!(e["verdict"], "succeeded", "{e}");
    assert_eq!(e["fired"], json!(true));
    assert!(e["summary"].as_str().unwrap().contains("worker-7"), "{e}");
    let details: Vec<&str> = e["details"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    assert!(details[0].contains("node-a"), "{details:?}");
    assert!(
        details.iter().any(|d| d.contains("attempt 1 on worker worker-3") && d.contains("HTTP 503")),
        "{details:?}"
    );
    assert_eq!(e["previous_fire_at"], json!(ts(slot(0))));
    assert_eq!(e["next_fire_at"], json!(ts(slot(2))));

    let failed = app.explain(&id, &ts(slot(2))).await;
    assert_eq!(failed["explanation"]["verdict"], "failed");
    let summary = failed["explanation"]["summary"].as_str().unwrap();
    assert!(summary.contains("4 attempt") && summary.contains("HTTP 500") && summary.contains("/replay"), "{summary}");
    // A row written before the worker kept a history still names its last attempt.
    assert!(
        failed["explanation"]["details"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().contains("worker-7"))
    );

    let skipped = app.explain(&id, &ts(slot(3))).await;
    assert_eq!(skipped["explanation"]["verdict"], "skipped");
    assert_eq!(skipped["explanation"]["fired"], json!(false));
    assert!(skipped["explanation"]["summary"].as_str().unwrap().contains("misfire policy skip"), "{skipped}");

    // Another spelling of the same instant finds the same row.
    let offset = slot(1).with_timezone(&chrono::FixedOffset::east_opt(2 * 3600).unwrap()).to_rfc3339();
    assert_eq!(app.explain(&id, &offset).await["execution"]["status"], "succeeded");

    // Pausing skips a pre-armed slot and says so in its history.
    let future = slot(180);
    insert_row(&pg, &id, future, "pending", 0, None, None, json!([])).await;
    let pending = app.explain(&id, &ts(future)).await;
    assert_eq!(pending["explanation"]["verdict"], "pending");
    assert!(pending["explanation"]["summary"].as_str().unwrap().contains("Pre-armed"), "{pending}");
    assert_eq!(app.post_empty(&format!("/v1/jobs/{id}/pause")).await.status, 200);
    let paused = app.explain(&id, &ts(future)).await;
    assert_eq!(paused["explanation"]["verdict"], "skipped");
    let history = paused["execution"]["history"].as_array().unwrap();
    assert_eq!(history.len(), 1, "{paused}");
    assert_eq!(history[0]["event"], "skipped");
    assert_eq!(history[0]["reason"], "paused");
    assert!(parse_ts(&history[0]["at"]) <= Utc::now());

    // A deleted job's rows stay explainable.
    assert_eq!(app.delete(&format!("/v1/jobs/{id}")).await.status, 204);
    assert_eq!(app.explain(&id, &ts(slot(1))).await["explanation"]["verdict"], "succeeded");
}

#[tokio::test]
async fn explain_says_why_a_slot_without_a_row_did_not_fire() {
    let app = TestApp::start("explainnone").await;
    let pg = app.sql().await;
    let anchor = now_ms() - TimeDelta::days(60);
    let create = async |extra: Value| {
        let mut schedule = json!({ "kind": "interval", "every_ms": 3_600_000, "start_at": ts(anchor) });
        for (k, v) in extra.as_object().unwrap() {
            schedule[k] = v.clone();
        }
        let id = app.create_id(&json!({ "name": "hourly", "schedule": schedule, "target": http_target() })).await;
        // Created long ago: the ledger retention, not the creation, bounds what is known.
        pg.execute(
            "UPDATE jobs SET created_at = $2, updated_at = $2 WHERE id = $1",
            &[&Uuid::parse_str(&id).unwrap(), &(anchor - TimeDelta::days(1))],
        )
        .await
        .unwrap();
        id
    };
    let id = create(json!({})).await;
    let slot = |h: i64| anchor + TimeDelta::hours(h);
    let verdict = async |id: &str, at: DateTime<Utc>| {
        let v = app.explain(id, &ts(at)).await;
        assert_eq!(v["execution"], Value::Null, "{v}");
        assert_eq!(v["explanation"]["fired"], json!(false), "{v}");
        v["explanation"].clone()
    };

    let off = verdict(&id, slot(3) + TimeDelta::minutes(20)).await;
    assert_eq!(off["verdict"], "not_a_fire_time", "{off}");
    assert_eq!(off["previous_fire_at"], json!(ts(slot(3))));
    assert_eq!(off["next_fire_at"], json!(ts(slot(4))));
    assert!(off["summary"].as_str().unwrap().contains(&ts(slot(3))), "{off}");

    // An interval has no slots before its anchor (its start_at).
    assert_eq!(verdict(&id, slot(-1)).await["verdict"], "not_a_fire_time");
    let start =
        (now_ms() + TimeDelta::days(2)).with_minute(0).unwrap().with_second(0).unwrap().with_nanosecond(0).unwrap();
    let mut later = cron_job("later", "0 * * * *", "UTC");
    later["schedule"]["start_at"] = json!(ts(start));
    let later = app.create_id(&later).await;
    assert_eq!(verdict(&later, start - TimeDelta::hours(1)).await["verdict"], "before_start");
    assert_eq!(verdict(&later, start).await["verdict"], "not_due_yet");
    assert_eq!(verdict(&id, slot(24)).await["verdict"], "beyond_retention");
    // 58 days later: within the retention, due, and nobody recorded it.
    let unrecorded = verdict(&id, slot(58 * 24)).await;
    assert_eq!(unrecorded["verdict"], "not_recorded", "{unrecorded}");
    assert!(unrecorded["summary"].as_str().unwrap().contains("MISFIRE_LOOKBACK_SECS"), "{unrecorded}");

    let next = parse_ts(&app.job(&id).await["next_fire_at"]);
    let due = verdict(&id, next + TimeDelta::hours(1)).await;
    assert_eq!(due["verdict"], "not_due_yet", "{due}");
    assert!(due["summary"].as_str().unwrap().contains(&ts(next)), "{due}");

    // max_runs: two runs recorded, the third slot is not due any more.
    let limited = create(json!({ "max_runs": 2 })).await;
    for h in [58 * 24, 58 * 24 + 1] {
        insert_row(&pg, &limited, slot(h), "succeeded", 1, None, None, json!([])).await;
    }
    assert_eq!(verdict(&limited, slot(58 * 24 + 2)).await["verdict"], "max_runs_reached");
    assert_eq!(verdict(&limited, next + TimeDelta::hours(1)).await["verdict"], "max_runs_reached");

    // end_at: past it, the schedule is over.
    let ending = create(json!({ "end_at": ts(now_ms() + TimeDelta::days(1)) })).await;
    assert_eq!(verdict(&ending, next + TimeDelta::days(2)).await["verdict"], "after_end");

    // Paused before the slot: the API can tell.
    assert_eq!(app.post_empty(&format!("/v1/jobs/{id}/pause")).await.status, 200);
    assert_eq!(verdict(&id, next + TimeDelta::hours(1)).await["verdict"], "paused");
    // Deleted before the slot.
    assert_eq!(app.delete(&format!("/v1/jobs/{ending}")).await.status, 204);
    assert_eq!(verdict(&ending, next).await["verdict"], "deleted");

    // A job created after the slot: before_creation.
    let young = app.create_id(&cron_job("young", "0 * * * *", "UTC")).await;
    let hour_ago =
        (now_ms() - TimeDelta::hours(2)).with_minute(0).unwrap().with_second(0).unwrap().with_nanosecond(0).unwrap();
    assert_eq!(verdict(&young, hour_ago).await["verdict"], "before_creation");
}

#[tokio::test]
async fn explain_rejects_unknown_jobs_and_bad_instants() {
    let app = TestApp::start("explainbad").await;
    let id = app.create_id(&example_job()).await;
    assert_problem(&app.get(&format!("/v1/jobs/{}/executions/2026-01-01T00:00:00Z", Uuid::new_v4())).await, 404);
    assert_problem(&app.get("/v1/jobs/nope/executions/2026-01-01T00:00:00Z").await, 404);
    for bad in ["yesterday", "2026-13-01T00:00:00Z", "2026-01-01", "1767225600"] {
        let r = app.get(&format!("/v1/jobs/{id}/executions/{bad}")).await;
        assert_invalid(&r, &["scheduled_at"]);
    }
    // Sub-millisecond instants are never fire times, and are shown as given.
    let v = app.explain(&id, "2030-01-01T07:00:00.000500Z").await;
    assert_eq!(v["scheduled_at"], "2030-01-01T07:00:00.000500Z");
    assert_eq!(v["explanation"]["verdict"], "not_a_fire_time");
}

// ---------------------------------------------------------------------------
// Filters on GET /v1/jobs/{id}/executions; replay history
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_jobs_executions_filter_by_status_and_time() {
    let app = TestApp::start("execfilter").await;
    let pg = app.sql().await;
    let id = app.create_id(&example_job()).await;
    let base = DateTime::parse_from_rfc3339("2026-11-20T10:00:00.000Z").unwrap().to_utc();
    let statuses = ["succeeded", "failed", "succeeded", "failed", "skipped"];
    for (k, status) in statuses.iter().enumerate() {
        insert_row(&pg, &id, base + TimeDelta::hours(k as i64), status, 1, None, None, json!([])).await;
    }
    let times = async |q: &str| -> Vec<DateTime<Utc>> {
        let r = app.get(&format!("/v1/jobs/{id}/executions?{q}")).await;
        assert_eq!(r.status, 200, "{q}: {}", r.text);
        r.json()["items"].as_array().unwrap().iter().map(|e| parse_ts(&e["scheduled_at"])).collect()
    };
    let h = |k: i64| base + TimeDelta::hours(k);
    assert_eq!(times("status=failed").await, [h(3), h(1)]);
    assert_eq!(times(&format!("from={}&to={}", enc(&ts(h(1))), enc(&ts(h(3))))).await, [h(2), h(1)]);
    assert_eq!(times(&format!("status=succeeded&from={}", enc(&ts(h(1))))).await, [h(2)]);
    // Filters and the cursor combine.
    let page = app.get(&format!("/v1/jobs/{id}/executions?status=failed&limit=1")).await.json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1);
    let cursor = page["next_cursor"].as_str().unwrap();
    assert_eq!(times(&format!("status=failed&limit=1&cursor={}", enc(cursor))).await, [h(1)]);

    for (q, field) in [("status=done", "status"), ("from=yesterday", "from"), ("to=2026-13-01", "to")] {
        let r = app.get(&format!("/v1/jobs/{id}/executions?{q}")).await;
        assert_invalid(&r, &[field]);
    }
}

/// Replay repairs what no process holds: a due `pending` row, a `retrying`
/// row, a `running` row of a worker presumed gone; it refuses a row a live
/// worker runs, a pending row not due yet and a succeeded one, naming why.
#[tokio::test]
async fn replay_takes_stuck_rows_no_process_holds_and_refuses_held_ones() {
    let app = TestApp::start("replaystuck").await;
    let pg = app.sql().await;
    let id = app.create_id(&example_job()).await;
    let base = now_ms() - TimeDelta::hours(1);
    let at = |k: i64| base + TimeDelta::minutes(k);
    let rows = [
        (0, "pending"),
        (1, "retrying"),
        (2, "running"), // worker-7 has no heartbeat: presumed gone
        (3, "running"), // held by a live worker (below)
        (4, "succeeded"),
        (5, "failed"),
    ];
    for (k, status) in rows {
        insert_row(&pg, &id, at(k), status, 1, None, None, json!([])).await;
    }
    let future = now_ms() + TimeDelta::hours(1);
    insert_row(&pg, &id, future, "pending", 0, None, None, json!([])).await;
    pg.execute(
        "UPDATE scheduled_jobs SET worker_id = 'live-worker' WHERE job_id = $1 AND scheduled_at = $2",
        &[&Uuid::parse_str(&id).unwrap(), &at(3)],
    )
    .await
    .unwrap();
    pg.execute("INSERT INTO worker_heartbeats (worker_id) VALUES ('live-worker')", &[]).await.unwrap();

    for k in [0, 1, 2] {
        let r = app.post_empty(&format!("/v1/executions/{id}/{}/replay", enc(&ts(at(k))))).await;
        assert_eq!(r.status, 202, "slot {k}: {}", r.text);
        assert_eq!(r.json()["status"], "pending");
        assert_eq!(r.json()["reason"], "replay");
    }
    for (k, status) in [(3, "running"), (4, "succeeded")] {
        let r = app.post_empty(&format!("/v1/executions/{id}/{}/replay", enc(&ts(at(k))))).await;
        assert_problem(&r, 409);
        assert!(r.text.contains(&format!("the execution is {status}")), "{}", r.text);
    }
    assert_problem(&app.post_empty(&format!("/v1/executions/{id}/{}/replay", enc(&ts(future)))).await, 409);

    // Bulk replay by status: the failed row by default, nothing else.
    let r = app.post_json("/v1/executions/replay", &json!({ "job_id": id, "status": "running" })).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["replayed"], json!(0), "the live worker's row stays: {}", r.text);
    let r = app.post_json("/v1/executions/replay", &json!({ "job_id": id })).await;
    assert_eq!(r.json()["replayed"], json!(1));
    assert_eq!(r.json()["items"][0]["scheduled_at"], json!(ts(at(5))));
    let r = app.post_json("/v1/executions/replay", &json!({ "status": "succeeded" })).await;
    assert_invalid(&r, &["status"]);
}

#[tokio::test]
async fn replay_appends_to_the_rows_history() {
    let app = TestApp::start("replayhist").await;
    let pg = app.sql().await;
    let id = app.create_id(&example_job()).await;
    let base = now_ms() - TimeDelta::hours(3);
    let earlier = json!([{ "event": "attempt", "attempt": 1, "worker_id": "w", "outcome": "failed" }]);
    for k in 0..3 {
        insert_row(&pg, &id, base + TimeDelta::hours(k), "failed", 1, None, Some("HTTP 500"), earlier.clone()).await;
    }
    let history = async |at: DateTime<Utc>| -> Vec<Value> {
        let row = pg
            .query_one(
                "SELECT history FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2",
                &[&Uuid::parse_str(&id).unwrap(), &at],
            )
            .await
            .unwrap();
        serde_json::from_value(row.get(0)).unwrap()
    };

    let before = now_ms();
    let r = app.post_empty(&format!("/v1/executions/{id}/{}/replay", enc(&ts(base)))).await;
    assert_eq!(r.status, 202, "{}", r.text);
    let h = history(base).await;
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(h[0], earlier[0]);
    assert_eq!(h[1]["event"], "replay");
    assert!(parse_ts(&h[1]["at"]) >= before, "{h:?}");

    let r = app.post_json("/v1/executions/replay", &json!({ "job_id": id })).await;
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["replayed"], json!(2));
    for k in 1..3 {
        let h = history(base + TimeDelta::hours(k)).await;
        assert_eq!(h.iter().map(|e| e["event"].as_str().unwrap()).collect::<Vec<_>>(), ["attempt", "replay"]);
    }
    // The explain endpoint shows the replay.
    let v = app.explain(&id, &ts(base)).await;
    assert!(
        v["explanation"]["details"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().starts_with("replayed"))
    );
}
