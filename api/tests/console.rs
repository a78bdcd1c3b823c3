//! The operator console's routes: a job's owners (rendezvous hashing over
//! the live heartbeats), the workers, delivery lateness per minute, failures
//! grouped by error and each job's outcomes. Against the real server
//! in-process on the real Postgres and Redis (own database, cluster name and
//! server per test); ledger rows with known values are written with SQL.

#[path = "support/lib.rs"]
mod support;

use chrono::{DateTime, Duration as TimeDelta, Timelike, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use uuid::Uuid;

use support::*;

const BOOTSTRAP: &str = "bootstrap-admin-token-for-console-tests";

async fn app(label: &str) -> TestApp {
    TestApp::start_with(label, Options { tokens: vec![BOOTSTRAP.to_owned()], ..Default::default() }).await
}

async fn call(app: &TestApp, token: &str, path: &str) -> Resp {
    app.send(app.http.request(Method::GET, app.url(path)).bearer_auth(token)).await
}

async fn call_json(app: &TestApp, token: &str, method: Method, path: &str, body: &Value) -> Resp {
    app.send(app.http.request(method, app.url(path)).bearer_auth(token).json(body)).await
}

/// A 200 of `path` as the bootstrap admin.
async fn ok(app: &TestApp, path: &str) -> Value {
    let r = call(app, BOOTSTRAP, path).await;
    assert_eq!(r.status, 200, "GET {path}: {}", r.text);
    r.json()
}

fn interval_job(name: &str, jitter_ms: u64) -> Value {
    let mut job =
        json!({ "name": name, "schedule": { "kind": "interval", "every_ms": 60_000 }, "target": http_target() });
    if jitter_ms > 0 {
        job["jitter_ms"] = json!(jitter_ms);
    }
    job
}

async fn create(app: &TestApp, token: &str, body: &Value) -> Uuid {
    let r = call_json(app, token, Method::POST, "/v1/jobs", body).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()["id"].as_str().unwrap().parse().unwrap()
}

/// Makes namespaces `team-a` and `team-b` and a read token for each.
async fn two_namespaces(app: &TestApp) -> (String, String) {
    let mut tokens = Vec::new();
    for ns in ["team-a", "team-b"] {
        let r = call_json(app, BOOTSTRAP, Method::POST, "/v1/namespaces", &json!({ "name": ns })).await;
        assert_eq!(r.status, 201, "{}", r.text);
        let body = json!({ "name": format!("writer of {ns}"), "role": "write", "namespaces": [ns] });
        let r = call_json(app, BOOTSTRAP, Method::POST, "/v1/tokens", &body).await;
        assert_eq!(r.status, 201, "{}", r.text);
        tokens.push(r.json()["token"].as_str().unwrap().to_owned());
    }
    (tokens.remove(0), tokens.remove(0))
}

/// A ledger row as a test states it.
struct Row {
    job: Uuid,
    at: DateTime<Utc>,
    status: &'static str,
    attempts: i32,
    /// The current attempt's start.
    started_at: Option<DateTime<Utc>>,
    error: Option<&'static str>,
    history: Value,
}

impl Row {
    fn new(job: Uuid, at: DateTime<Utc>, status: &'static str) -> Row {
        let attempted = ["running", "retrying", "succeeded", "failed"].contains(&status);
        Row {
            job,
            at,
            status,
            attempts: attempted as i32,
            started_at: attempted.then_some(at),
            error: None,
            history: json!([]),
        }
    }

    /// Started `ms` after its slot.
    fn late(mut self, ms: i64) -> Row {
        self.started_at = Some(self.at + TimeDelta::milliseconds(ms));
        self
    }

    fn error(mut self, e: &'static str) -> Row {
        self.error = Some(e);
        self
    }
}

async fn insert(app: &TestApp, rows: &[Row]) {
    let pg = app.sql().await;
    for r in rows {
        pg.execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, started_at,
                                         error, history, job_version)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 1)",
            &[
                &r.job,
                &r.at,
                &Uuid::now_v7(),
                &format!("{}@{}", r.job, ts(r.at)),
                &r.status,
                &r.attempts,
                &r.started_at,
                &r.error,
                &r.history,
            ],
        )
        .await
        .unwrap();
    }
}

/// The start of the minute `minutes_ago` minutes before now's minute.
fn minute(minutes_ago: i64) -> DateTime<Utc> {
    let now = Utc::now();
    now.with_second(0).unwrap().with_nanosecond(0).unwrap() - TimeDelta::minutes(minutes_ago)
}

// ---------------------------------------------------------------------------
// GET /v1/jobs/{id}/owners
// ---------------------------------------------------------------------------

#[tokio::test]
async fn owners_are_the_schedulers_rendezvous_choice_over_the_live_heartbeats() {
    let app = app("console-owners").await;
    let id = create(&app, BOOTSTRAP, &interval_job("owned", 0)).await;
    let path = format!("/v1/jobs/{id}/owners");

    // No node alive: no owners, the default factor.
    assert_eq!(ok(&app, &path).await, json!({ "job_id": id, "replication_factor": 2, "owners": [], "live_nodes": [] }));

    // Two nodes as `runtime::redis` keeps heartbeats: one that announces its
    // factor, one (an older release) that does not.
    for (node, beat) in [
        ("node-a", json!({ "node_id": "node-a", "replication_factor": 2 })),
        ("node-b", json!({ "node_id": "node-b" })),
    ] {
        let keys = runtime::redis::Keys::new(&app.cluster);
        app.redis_cmd(redis::cmd("SET").arg(keys.node(node)).arg(beat.to_string()).arg("EX").arg(30)).await;
        app.redis_cmd(redis::cmd("SADD").arg(keys.registry()).arg(node)).await;
    }
    let members = vec!["node-a".to_owned(), "node-b".to_owned()];
    let expected = domain::ownership::owners(id, &members, 2);
    let body = ok(&app, &path).await;
    assert_eq!(body["owners"], json!(expected), "{body}");
    assert_eq!(body["live_nodes"], json!(["node-a", "node-b"]));
    assert_eq!(body["replication_factor"], json!(2));

    // A third node with a factor of 1: each node decides by its own factor.
    let keys = runtime::redis::Keys::new(&app.cluster);
    let beat = json!({ "node_id": "node-c", "replication_factor": 1 });
    app.redis_cmd(redis::cmd("SET").arg(keys.node("node-c")).arg(beat.to_string()).arg("EX").arg(30)).await;
    app.redis_cmd(redis::cmd("SADD").arg(keys.registry()).arg("node-c")).await;
    let factors = vec![("node-a".to_owned(), 2), ("node-b".to_owned(), 2), ("node-c".to_owned(), 1)];
    let body = ok(&app, &path).await;
    assert_eq!(body["owners"], json!(domain::ownership::owners_by_own_factor(id, &factors)), "{body}");
    assert_eq!(body["live_nodes"], json!(["node-a", "node-b", "node-c"]));
    let all = ["node-a".to_owned(), "node-b".to_owned(), "node-c".to_owned()];
    let ranked = domain::ownership::owners(id, &all, 3);
    let expected: Vec<&str> =
        ranked.iter().enumerate().filter(|(i, n)| *i < if **n == "node-c" { 1 } else { 2 }).map(|(_, n)| *n).collect();
    assert_eq!(body["owners"], json!(expected), "{body}");

    // An expired heartbeat is no longer a node.
    app.redis_cmd(redis::cmd("DEL").arg(keys.node("node-c"))).await;
    assert_eq!(ok(&app, &path).await["live_nodes"], json!(["node-a", "node-b"]));

    assert_problem(&call(&app, BOOTSTRAP, &format!("/v1/jobs/{}/owners", Uuid::now_v7())).await, 404);
    assert_problem(&call(&app, BOOTSTRAP, "/v1/jobs/not-a-uuid/owners").await, 404);
    assert_problem(&call(&app, BOOTSTRAP, &format!("{path}?rf=3")).await, 400);
    let r = app.send(app.http.delete(app.url(&format!("/v1/jobs/{id}"))).bearer_auth(BOOTSTRAP)).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_problem(&call(&app, BOOTSTRAP, &path).await, 404);
}

#[tokio::test]
async fn owners_is_503_when_no_redis_shard_answers() {
    let app = TestApp::start_with(
        "console-owners-down",
        Options { redis_url: Some("redis://127.0.0.1:1".into()), ..Default::default() },
    )
    .await;
    let id = app.create_id(&interval_job("owned", 0)).await;
    assert_problem(&app.get(&format!("/v1/jobs/{id}/owners")).await, 503);
}

// ---------------------------------------------------------------------------
// GET /v1/workers
// ---------------------------------------------------------------------------

#[tokio::test]
async fn workers_are_listed_from_their_heartbeats_most_recent_first() {
    let app = app("console-workers").await;
    assert_eq!(ok(&app, "/v1/workers").await, json!({ "items": [] }));
    app.sql()
        .await
        .batch_execute(
            "INSERT INTO worker_heartbeats (worker_id, seen_at) VALUES
                 ('worker-old', now() - interval '20 s'), ('worker-new', now() - interval '2 s')",
        )
        .await
        .unwrap();
    let body = ok(&app, "/v1/workers").await;
    let items = body["items"].as_array().unwrap();
    let ids: Vec<&str> = items.iter().map(|w| w["worker_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["worker-new", "worker-old"]);
    let ages: Vec<i64> = items.iter().map(|w| w["age_ms"].as_i64().unwrap()).collect();
    assert!((2_000..12_000).contains(&ages[0]) && (20_000..30_000).contains(&ages[1]), "{body}");
    assert!(parse_ts(&items[0]["seen_at"]) > parse_ts(&items[1]["seen_at"]));
    assert_problem(&call(&app, BOOTSTRAP, "/v1/workers?limit=5").await, 400);
}

// ---------------------------------------------------------------------------
// GET /v1/executions/failures
// ---------------------------------------------------------------------------

#[tokio::test]
async fn failures_are_grouped_by_error_most_frequent_first() {
    let app = app("console-failures").await;
    let (a, b) =
        (create(&app, BOOTSTRAP, &interval_job("a", 0)).await, create(&app, BOOTSTRAP, &interval_job("b", 0)).await);
    let t = minute(30);
    let old = minute(120);
    insert(
        &app,
        &[
            Row::new(a, t, "failed").error("HTTP 503 from callback"),
            Row::new(b, t + TimeDelta::minutes(1), "failed").error("HTTP 503 from callback"),
            Row::new(a, t + TimeDelta::minutes(2), "failed").error("HTTP 503 from callback"),
            Row::new(b, t + TimeDelta::minutes(3), "failed").error("connect timeout"),
            Row::new(a, t + TimeDelta::minutes(4), "failed"),
            // Not failures, or outside the default hour.
            Row::new(b, t + TimeDelta::minutes(5), "succeeded"),
            Row::new(b, t + TimeDelta::minutes(6), "retrying").error("HTTP 503 from callback"),
            Row::new(b, old, "failed").error("connect timeout"),
        ],
    )
    .await;
    let body = ok(&app, "/v1/executions/failures").await;
    assert!(parse_ts(&body["to"]) - parse_ts(&body["from"]) == TimeDelta::hours(1), "{body}");
    assert_eq!((body["rows_read"].clone(), body["capped"].clone()), (json!(5), json!(false)), "{body}");
    let groups = body["groups"].as_array().unwrap();
    let summary: Vec<(Value, u64, u64)> = groups
        .iter()
        .map(|g| (g["error"].clone(), g["count"].as_u64().unwrap(), g["jobs"].as_u64().unwrap()))
        .collect();
    // Ties break on the error text; a failure without one sorts first.
    assert_eq!(
        summary,
        [(json!("HTTP 503 from callback"), 3, 2), (Value::Null, 1, 1), (json!("connect timeout"), 1, 1)],
        "{body}"
    );
    let top = &groups[0];
    assert_eq!(parse_ts(&top["first_at"]), t);
    assert_eq!(parse_ts(&top["last_at"]), t + TimeDelta::minutes(2));
    let latest = t + TimeDelta::minutes(2);
    assert_eq!(
        top["example"],
        json!({ "job_id": a, "job_key": null, "job_name": "a", "scheduled_at": ts(latest),
                "execution_id": format!("{a}@{}", ts(latest)) })
    );

    // An explicit window takes the older failure in; `limit` cuts the groups.
    let from = enc(&ts(old));
    let body = ok(&app, &format!("/v1/executions/failures?from={from}&limit=1")).await;
    assert_eq!(body["groups"].as_array().unwrap().len(), 1);
    assert_eq!((body["rows_read"].clone(), body["more_groups"].clone()), (json!(6), json!(2)), "{body}");
    let body = ok(&app, &format!("/v1/executions/failures?from={from}&to={}", enc(&ts(t)))).await;
    assert_eq!(body["groups"][0]["error"], "connect timeout");
    assert_eq!(body["rows_read"], json!(1));

    for (query, field) in [
        ("from=yesterday", "from"),
        ("to=2026-13-01T00:00:00Z", "to"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=ten", "limit"),
    ] {
        assert_invalid(&call(&app, BOOTSTRAP, &format!("/v1/executions/failures?{query}")).await, &[field]);
    }
    let (later, earlier) = (enc(&ts(t)), enc(&ts(old)));
    assert_invalid(
        &call(&app, BOOTSTRAP, &format!("/v1/executions/failures?from={later}&to={earlier}")).await,
        &["from"],
    );
    assert_problem(&call(&app, BOOTSTRAP, "/v1/executions/failures?status=failed").await, 400);
}

#[tokio::test]
async fn failures_past_the_row_cap_group_only_the_newest_and_say_so() {
    let app = app("console-failures-cap").await;
    let job = create(&app, BOOTSTRAP, &interval_job("flaky", 0)).await;
    let cap = api::routes::stats::FAILURES_MAX_ROWS;
    // cap + 10 failures, 10 ms apart, over the last ~9 minutes: the oldest 10
    // say "old", the rest "new".
    let start = minute(20);
    app.sql()
        .await
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, error)
             SELECT $1::uuid, at, gen_random_uuid(), $1::uuid::text || '@' || cronshard_instant(at), 'failed', 1,
                    CASE WHEN i < 10 THEN 'old' ELSE 'new' END
             FROM (SELECT i, $2::timestamptz + i * interval '10 ms' AS at FROM generate_series(0, $3::bigint + 9) i) s",
            &[&job, &start, &cap],
        )
        .await
        .unwrap();
    let body = ok(&app, "/v1/executions/failures").await;
    assert_eq!((body["capped"].clone(), body["rows_read"].clone()), (json!(true), json!(cap)), "{body:.300}");
    assert_eq!(body["groups"].as_array().unwrap().len(), 1, "{body:.300}");
    assert_eq!((body["groups"][0]["error"].clone(), body["groups"][0]["count"].clone()), (json!("new"), json!(cap)));
}

// ---------------------------------------------------------------------------
// GET /v1/stats/lateness
// ---------------------------------------------------------------------------

#[tokio::test]
async fn lateness_is_computed_per_minute_from_the_first_attempt_and_the_jittered_instant() {
    let app = app("console-lateness").await;
    let plain = create(&app, BOOTSTRAP, &interval_job("plain", 0)).await;
    let jittered = create(&app, BOOTSTRAP, &interval_job("jittered", 5_000)).await;
    let m1 = minute(10);
    let m2 = minute(5);
    let mut rows = Vec::new();
    // Minute 1: ten deliveries 10, 20, ..., 100 ms late (a different job
    // per slot is not needed: each slot is its own second).
    for k in 0..10 {
        rows.push(Row::new(plain, m1 + TimeDelta::seconds(k), "succeeded").late((k + 1) * 10));
    }
    // Minute 2: a jittered slot delivered 30 ms after its jittered instant,
    // and a slot whose third attempt started a minute late but whose first
    // (in its history) started 70 ms late.
    let j_at = m2 + TimeDelta::seconds(1);
    let offset = domain::schedule::jitter_offset(jittered, j_at, 5_000);
    rows.push(Row::new(jittered, j_at, "succeeded").late((offset + TimeDelta::milliseconds(30)).num_milliseconds()));
    let retried_at = m2 + TimeDelta::seconds(2);
    let mut retried = Row::new(plain, retried_at, "failed").late(60_000);
    retried.attempts = 3;
    retried.history = json!([
        { "event": "attempt", "attempt": 1, "started_at": ts(retried_at + TimeDelta::milliseconds(70)), "outcome": "retrying" },
        { "event": "attempt", "attempt": 2, "started_at": ts(retried_at + TimeDelta::seconds(30)), "outcome": "retrying" },
        { "event": "attempt", "attempt": 3, "started_at": ts(retried_at + TimeDelta::seconds(60)), "outcome": "failed" },
    ]);
    rows.push(retried);
    // Not deliveries: never attempted, skipped, pending, and one outside the window.
    rows.push(Row::new(plain, m2 + TimeDelta::seconds(3), "skipped"));
    rows.push(Row::new(plain, m2 + TimeDelta::seconds(4), "pending"));
    rows.push(Row::new(plain, minute(90), "succeeded").late(5));
    insert(&app, &rows).await;

    let body = ok(&app, "/v1/stats/lateness").await;
    assert_eq!(parse_ts(&body["to"]) - parse_ts(&body["from"]), TimeDelta::minutes(60), "{body}");
    assert_eq!((body["sampled"].clone(), body["sample_size"].clone()), (json!(false), json!(12)), "{body}");
    assert_eq!(body["sample_rate"], json!(1.0));
    assert_eq!(
        body["buckets"],
        json!([
            { "minute": ts(m1), "deliveries": 10, "sampled_deliveries": 10, "p50_ms": 50, "p99_ms": 100, "max_ms": 100 },
            { "minute": ts(m2), "deliveries": 2, "sampled_deliveries": 2, "p50_ms": 30, "p99_ms": 70, "max_ms": 70 },
        ])
    );
    // A shorter window leaves minute 1 out.
    let body = ok(&app, "/v1/stats/lateness?minutes=7").await;
    assert_eq!(body["buckets"].as_array().unwrap().len(), 1, "{body}");
    assert_eq!(body["buckets"][0]["minute"], json!(ts(m2)));

    for query in ["minutes=0", "minutes=1441", "minutes=an-hour"] {
        assert_invalid(&call(&app, BOOTSTRAP, &format!("/v1/stats/lateness?{query}")).await, &["minutes"]);
    }
    assert_problem(&call(&app, BOOTSTRAP, "/v1/stats/lateness?window=60").await, 400);
}

#[tokio::test]
async fn lateness_of_a_large_window_is_read_from_a_uniform_sample() {
    let app = app("console-lateness-sample").await;
    let job = create(&app, BOOTSTRAP, &interval_job("busy", 0)).await;
    // 150,000 deliveries over 25 minutes, each 25 ms late.
    let start = minute(30);
    let pg = app.sql().await;
    pg.execute(
        "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, started_at)
         SELECT $1::uuid, at, gen_random_uuid(), $1::uuid::text || '@' || cronshard_instant(at), 'succeeded', 1,
                at + interval '25 ms'
         FROM (SELECT $2::timestamptz + i * interval '10 ms' AS at FROM generate_series(0, 149999) i) s",
        &[&job, &start],
    )
    .await
    .unwrap();
    let body = ok(&app, "/v1/stats/lateness").await;
    assert_eq!(body["sampled"], json!(true), "{body:.400}");
    let rate = body["sample_rate"].as_f64().unwrap();
    let buckets = (rate * 65536.0).round() as i32;
    assert!(rate < 1.0 && (rate * 65536.0 - buckets as f64).abs() < 1e-6, "{rate}");
    // The sample is exactly the rows of the buckets below k.
    let expected: i64 = pg
        .query_one("SELECT count(*) FROM scheduled_jobs WHERE (hashtext(execution_id) & 65535) < $1", &[&buckets])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body["sample_size"], json!(expected), "{body:.400}");
    let all = body["buckets"].as_array().unwrap();
    assert_eq!(all.len(), 25, "{body:.400}");
    let sampled: u64 = all.iter().map(|b| b["sampled_deliveries"].as_u64().unwrap()).sum();
    let estimated: u64 = all.iter().map(|b| b["deliveries"].as_u64().unwrap()).sum();
    assert_eq!(sampled as i64, expected);
    assert!((135_000..165_000).contains(&estimated), "estimated {estimated} of 150,000");
    assert!(all.iter().all(|b| b["p50_ms"] == json!(25) && b["max_ms"] == json!(25)), "{body:.400}");
}

// ---------------------------------------------------------------------------
// GET /v1/jobs/outcomes
// ---------------------------------------------------------------------------

#[tokio::test]
async fn outcomes_count_each_status_and_the_late_deliveries_of_each_job() {
    let app = app("console-outcomes").await;
    let plain = create(&app, BOOTSTRAP, &interval_job("plain", 0)).await;
    let jittered = create(&app, BOOTSTRAP, &interval_job("jittered", 5_000)).await;
    let idle = create(&app, BOOTSTRAP, &interval_job("idle", 0)).await;
    let h = |hours: i64, k: i64| minute(0) - TimeDelta::hours(hours) + TimeDelta::seconds(k);
    let j_at = [h(2, 1), h(2, 2), h(2, 3)];
    let off = |at: DateTime<Utc>| domain::schedule::jitter_offset(jittered, at, 5_000).num_milliseconds();
    insert(
        &app,
        &[
            Row::new(plain, h(1, 1), "succeeded").late(1_500),
            Row::new(plain, h(1, 2), "succeeded").late(1_000),
            Row::new(plain, h(1, 3), "succeeded").late(20),
            Row::new(plain, h(1, 4), "failed"),
            Row::new(plain, h(1, 5), "retrying"),
            Row::new(plain, h(1, 6), "running"),
            Row::new(plain, h(1, 7), "pending"),
            Row::new(plain, h(1, 8), "skipped"),
            Row::new(plain, h(1, 9), "skipped"),
            Row::new(plain, h(1, 10), "missed"),
            Row::new(plain, h(30, 0), "succeeded").late(3_000),
            // Against its jittered instant: late, on time, and late by more than any jitter.
            Row::new(jittered, j_at[0], "succeeded").late(off(j_at[0]) + 1_200),
            Row::new(jittered, j_at[1], "succeeded").late(off(j_at[1]) + 900),
            Row::new(jittered, j_at[2], "succeeded").late(6_500),
        ],
    )
    .await;
    let ids = format!("{plain},{jittered},{idle},{}", Uuid::now_v7());
    let body = ok(&app, &format!("/v1/jobs/outcomes?ids={ids}")).await;
    assert_eq!(parse_ts(&body["to"]) - parse_ts(&body["from"]), TimeDelta::hours(24), "{body}");
    let zero = json!({ "succeeded": 0, "failed": 0, "retrying": 0, "running": 0, "pending": 0, "skipped": 0, "missed": 0, "late": 0 });
    let mut expected = serde_json::Map::new();
    expected.insert(
        plain.to_string(),
        json!({ "succeeded": 3, "failed": 1, "retrying": 1, "running": 1, "pending": 1, "skipped": 2, "missed": 1, "late": 1 }),
    );
    let mut j = zero.clone();
    j["succeeded"] = json!(3);
    j["late"] = json!(2);
    expected.insert(jittered.to_string(), j);
    expected.insert(idle.to_string(), zero);
    assert_eq!(body["items"], Value::Object(expected), "{body}");

    // A longer period takes the older row in.
    let body = ok(&app, &format!("/v1/jobs/outcomes?ids={plain}&hours=48")).await;
    assert_eq!(
        (body["items"][plain.to_string()]["succeeded"].clone(), body["items"][plain.to_string()]["late"].clone()),
        (json!(4), json!(2))
    );

    let many: Vec<String> = (0..501).map(|_| Uuid::now_v7().to_string()).collect();
    for (query, field) in [
        (String::new(), "ids"),
        ("ids=".to_owned(), "ids"),
        ("ids=job-1".to_owned(), "ids"),
        (format!("ids={}", many.join(",")), "ids"),
        (format!("ids={plain}&hours=0"), "hours"),
        (format!("ids={plain}&hours=721"), "hours"),
    ] {
        let path = format!("/v1/jobs/outcomes?{query}");
        assert_invalid(&call(&app, BOOTSTRAP, &path).await, &[field]);
    }
    assert_problem(&call(&app, BOOTSTRAP, &format!("/v1/jobs/outcomes?ids={plain}&days=1")).await, 400);
    // 500 ids are taken.
    let body = ok(&app, &format!("/v1/jobs/outcomes?ids={plain},{}", many[..499].join(","))).await;
    assert_eq!(body["items"].as_object().unwrap().len(), 1);
}

// ---------------------------------------------------------------------------
// Namespaces
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_namespace_sees_none_of_anothers_jobs_failures_outcomes_or_lateness() {
    let app = app("console-tenancy").await;
    let (ta, tb) = two_namespaces(&app).await;
    let job_a = create(&app, &ta, &interval_job("a", 0)).await;
    let mut body_b = interval_job("b", 0);
    body_b["namespace"] = json!("team-b");
    let job_b = create(&app, &tb, &body_b).await;
    let t = minute(10);
    insert(
        &app,
        &[
            Row::new(job_a, t, "failed").error("a's error").late(10),
            Row::new(job_b, t, "failed").error("b's error").late(20),
            Row::new(job_b, t + TimeDelta::seconds(1), "succeeded").late(30),
        ],
    )
    .await;

    let failures = call(&app, &ta, "/v1/executions/failures").await.json();
    assert_eq!(failures["groups"].as_array().unwrap().len(), 1, "{failures}");
    assert_eq!(failures["groups"][0]["error"], "a's error");
    let lateness = call(&app, &ta, "/v1/stats/lateness").await.json();
    assert_eq!(
        lateness["buckets"],
        json!([{ "minute": ts(t), "deliveries": 1, "sampled_deliveries": 1, "p50_ms": 10, "p99_ms": 10, "max_ms": 10 }])
    );
    let outcomes = call(&app, &ta, &format!("/v1/jobs/outcomes?ids={job_a},{job_b}")).await.json();
    let seen: Vec<&String> = outcomes["items"].as_object().unwrap().keys().collect();
    assert_eq!(seen, [&job_a.to_string()], "{outcomes}");
    assert_problem(&call(&app, &ta, &format!("/v1/jobs/{job_b}/owners")).await, 404);
    assert_eq!(call(&app, &ta, &format!("/v1/jobs/{job_a}/owners")).await.status, 200);

    // B sees its own; the bootstrap admin sees both.
    let failures = call(&app, &tb, "/v1/executions/failures").await.json();
    assert_eq!(failures["groups"][0]["error"], "b's error");
    assert_eq!(call(&app, &tb, "/v1/stats/lateness").await.json()["buckets"][0]["deliveries"], json!(2));
    assert_eq!(ok(&app, "/v1/executions/failures").await["groups"].as_array().unwrap().len(), 2);
    let all = ok(&app, &format!("/v1/jobs/outcomes?ids={job_a},{job_b}")).await;
    assert_eq!(all["items"].as_object().unwrap().len(), 2);
}

/// `/v1/jobs/outcomes` is its own route, not a job called "outcomes".
#[tokio::test]
async fn the_outcomes_route_is_not_taken_for_a_job_id() {
    let app = app("console-routes").await;
    assert_invalid(&call(&app, BOOTSTRAP, "/v1/jobs/outcomes").await, &["ids"]);
    let r = call_json(&app, BOOTSTRAP, Method::PUT, "/v1/jobs/outcomes", &json!({})).await;
    assert_problem(&r, 405);
    // Every console route needs a token.
    for path in ["/v1/jobs/outcomes?ids=x", "/v1/workers", "/v1/stats/lateness", "/v1/executions/failures"] {
        assert_problem(&app.get(path).await, 401);
    }
}
