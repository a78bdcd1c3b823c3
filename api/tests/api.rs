//! The REST API (every `/v1` route of `api::router`) against the real server
//! in-process, on the real Postgres and Redis. Each test gets its own database
//! (`TestDb`), its own cluster name (Redis key prefix) and its own server on an
//! ephemeral port.

use std::sync::Arc;

use chrono::{DateTime, Duration as TimeDelta, SecondsFormat, Timelike, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use common::testing::{TestDb, redis_url, unique_cluster};

// ---------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------

/// A response, fully read.
struct Resp {
    status: u16,
    headers: reqwest::header::HeaderMap,
    text: String,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }
}

struct TestApp {
    base: String,
    http: reqwest::Client,
    cluster: String,
    redis: Vec<deadpool_redis::Pool>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    // Last: dropped (database dropped) after the server is told to stop.
    db: TestDb,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// What to put into the server's state instead of the working services.
#[derive(Default)]
struct Options {
    tokens: Vec<String>,
    pg_url: Option<String>,
    redis_url: Option<String>,
}

impl TestApp {
    async fn start(label: &str) -> Self {
        Self::start_with(label, Options::default()).await
    }

    async fn start_with(label: &str, opts: Options) -> Self {
        let db = TestDb::new().await.expect("creating the test database");
        let cluster = unique_cluster(label);
        let redis = common::redis::pools(&[redis_url()]).expect("Redis pool");
        let state = api::AppState {
            pg: common::db::pool(opts.pg_url.as_deref().unwrap_or(&db.url), 4).expect("Postgres pool"),
            redis: match &opts.redis_url {
                Some(url) => common::redis::pools(std::slice::from_ref(url)).expect("Redis pool"),
                None => redis.clone(),
            },
            keys: common::redis::Keys::new(&cluster),
            cluster: cluster.clone(),
            tokens: Arc::new(opts.tokens),
            publisher: api::AppState::publisher(&common::testing::amqp_url(), &cluster),
            retention: Default::default(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(api::serve(listener, state, async move {
            let _ = rx.await;
        }));
        TestApp { base, http: reqwest::Client::new(), cluster, redis, shutdown: Some(tx), db }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, rb: reqwest::RequestBuilder) -> Resp {
        let r = rb.send().await.expect("request failed");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.expect("reading the response body");
        Resp { status, headers, text }
    }

    async fn get(&self, path: &str) -> Resp {
        self.send(self.http.get(self.url(path))).await
    }

    async fn post_json(&self, path: &str, body: &Value) -> Resp {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    async fn post_empty(&self, path: &str) -> Resp {
        self.send(self.http.post(self.url(path))).await
    }

    async fn put_json(&self, path: &str, body: &Value, if_match: Option<&str>) -> Resp {
        let mut rb = self.http.put(self.url(path)).json(body);
        if let Some(v) = if_match {
            rb = rb.header("if-match", v);
        }
        self.send(rb).await
    }

    async fn delete(&self, path: &str) -> Resp {
        self.send(self.http.delete(self.url(path))).await
    }

    /// POST /v1/jobs, expecting 201; returns the job.
    async fn create_job(&self, body: &Value) -> Value {
        let r = self.post_json("/v1/jobs", body).await;
        assert_eq!(r.status, 201, "creating {body}: {}", r.text);
        r.json()
    }

    async fn create_id(&self, body: &Value) -> String {
        self.create_job(body).await["id"].as_str().expect("id").to_owned()
    }

    /// GET /v1/jobs/{id}, expecting 200.
    async fn job(&self, id: &str) -> Value {
        let r = self.get(&format!("/v1/jobs/{id}")).await;
        assert_eq!(r.status, 200, "GET job {id}: {}", r.text);
        r.json()
    }

    async fn sql(&self) -> tokio_postgres::Client {
        common::db::connect(&self.db.url).await.expect("connecting to the test database")
    }

    /// Rows in `jobs`, tombstones included.
    async fn job_rows(&self) -> i64 {
        self.sql().await.query_one("SELECT count(*) FROM jobs", &[]).await.unwrap().get(0)
    }

    async fn redis_cmd(&self, cmd: &redis::Cmd) {
        let mut conn = self.redis[0].get().await.expect("Redis connection");
        cmd.query_async::<()>(&mut conn).await.expect("Redis command");
    }
}

/// Percent-encodes a query parameter value.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn parse_ts(v: &Value) -> DateTime<Utc> {
    let s = v.as_str().unwrap_or_else(|| panic!("expected a timestamp, got {v}"));
    DateTime::parse_from_rfc3339(s).unwrap_or_else(|e| panic!("{s:?} is not RFC 3339: {e}")).to_utc()
}

/// Now, cut to whole milliseconds (the API's precision).
fn now_ms() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap()
}

/// Asserts an `application/problem+json` error with this status; returns it.
#[track_caller]
fn assert_problem(r: &Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "expected {status}, body: {:?}", r.text);
    assert_eq!(r.header("content-type"), Some("application/problem+json"), "body: {:?}", r.text);
    let v = r.json();
    assert_eq!(v["status"], json!(status), "{v}");
    assert!(v["title"].as_str().is_some_and(|t| !t.is_empty()), "problem without a title: {v}");
    assert!(v["detail"].as_str().is_some_and(|t| !t.is_empty()), "problem without a detail: {v}");
    v
}

/// Asserts a 422 problem whose `errors` name exactly `fields`, each with a message.
#[track_caller]
fn assert_invalid(r: &Resp, fields: &[&str]) {
    let v = assert_problem(r, 422);
    let errors = v["errors"].as_array().unwrap_or_else(|| panic!("no errors array: {v}"));
    let got: Vec<&str> = errors.iter().map(|e| e["field"].as_str().unwrap_or("<none>")).collect();
    assert_eq!(got, fields, "{v}");
    for e in errors {
        assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "error without a message: {e}");
    }
}

fn http_target() -> Value {
    json!({ "kind": "http", "url": "https://hooks.example.com/run", "method": "POST", "timeout_ms": 5000 })
}

fn cron_job(name: &str, expr: &str, timezone: &str) -> Value {
    json!({
        "name": name,
        "schedule": { "kind": "cron", "expr": expr, "timezone": timezone },
        "target": http_target(),
    })
}

/// A typical job: a daily cron report in a European time zone, delivered by HTTP.
fn example_job() -> Value {
    json!({
      "name": "daily-sales-report",
      "schedule": { "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin" },
      "target": {
        "kind": "http", "url": "https://reports.internal/run", "method": "POST",
        "headers": { "content-type": "application/json" }, "body": "{\"report\":25}",
        "timeout_ms": 10000
      },
      "retry": { "max_retries": 3, "base_delay_ms": 30000, "multiplier": 2.0 },
      "misfire": "fire_once",
      "paused": false
    })
}

fn ids_of(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {page}"))
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_owned())
        .collect()
}

// ---------------------------------------------------------------------------
// POST /v1/jobs, GET /v1/jobs/{id}
// ---------------------------------------------------------------------------

#[tokio::test]
async fn creating_the_documented_example_returns_201_with_location_etag_and_stores_it() {
    let app = TestApp::start("create").await;
    let before = Utc::now();
    let r = app.post_json("/v1/jobs", &example_job()).await;
    assert_eq!(r.status, 201, "{}", r.text);
    assert!(r.header("content-type").is_some_and(|c| c.starts_with("application/json")));
    assert_eq!(r.header("etag"), Some("\"1\""));
    let job = r.json();

    let id = job["id"].as_str().expect("id is a string");
    let uuid = Uuid::parse_str(id).expect("id is a UUID");
    assert!(!uuid.is_nil());
    assert_eq!(r.header("location"), Some(format!("/v1/jobs/{id}").as_str()));
    assert_eq!(job["version"], json!(1));
    assert_eq!(job["paused"], json!(false));

    // The definition comes back as given, with defaults filled in.
    assert_eq!(job["name"], "daily-sales-report");
    assert_eq!(job["schedule"], json!({ "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin" }));
    assert_eq!(job["target"]["kind"], "http");
    assert_eq!(job["target"]["url"], "https://reports.internal/run");
    assert_eq!(job["target"]["method"], "POST");
    assert_eq!(job["target"]["headers"], json!({ "content-type": "application/json" }));
    assert_eq!(job["target"]["body"], "{\"report\":25}");
    assert_eq!(job["target"]["timeout_ms"], json!(10000));
    assert_eq!(job["retry"]["max_retries"], json!(3));
    assert_eq!(job["retry"]["base_delay_ms"], json!(30000));
    assert_eq!(job["retry"]["multiplier"], json!(2.0));
    assert_eq!(job["misfire"], "fire_once");

    // 08:00 in Berlin is 07:00Z (CET) or 06:00Z (CEST), within the next day.
    let next = parse_ts(&job["next_fire_at"]);
    assert!(next > before, "next_fire_at {next} is not in the future");
    assert!(next <= before + TimeDelta::hours(25), "next_fire_at {next} is too far away");
    assert!([6, 7].contains(&next.hour()) && next.minute() == 0 && next.second() == 0, "{next}");

    // Stored: GET returns the same document and version.
    let got = app.get(&format!("/v1/jobs/{id}")).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.header("etag"), Some("\"1\""));
    assert_eq!(got.json(), job);
    assert_eq!(app.job_rows().await, 1);
}

#[tokio::test]
async fn every_schedule_kind_is_accepted_stored_and_gets_its_next_fire_time() {
    let app = TestApp::start("kinds").await;

    // once: fires exactly at `at` (cut to milliseconds).
    let at = now_ms() + TimeDelta::days(2) + TimeDelta::milliseconds(123);
    let once = app
        .create_job(&json!({ "name": "once", "schedule": { "kind": "once", "at": ts(at) }, "target": http_target() }))
        .await;
    assert_eq!(parse_ts(&once["schedule"]["at"]), at);
    assert_eq!(parse_ts(&once["next_fire_at"]), at);

    // interval without start_at: anchored at creation, first slot one period later.
    let before = now_ms();
    let every = app
        .create_job(&json!({ "name": "every-hour", "schedule": { "kind": "interval", "every_ms": 3_600_000 }, "target": http_target() }))
        .await;
    let after = Utc::now();
    let next = parse_ts(&every["next_fire_at"]);
    assert!(next > after, "interval next_fire_at {next} is not in the future");
    assert!(next >= before + TimeDelta::hours(1) && next <= after + TimeDelta::hours(1), "{next}");
    assert_eq!(next, parse_ts(&every["created_at"]) + TimeDelta::hours(1));

    // interval with a future start_at: the first slot is start_at.
    let start = now_ms() + TimeDelta::hours(3);
    let started = app
        .create_job(&json!({
            "name": "every-minute-later",
            "schedule": { "kind": "interval", "every_ms": 60_000, "start_at": ts(start) },
            "target": http_target(),
        }))
        .await;
    assert_eq!(parse_ts(&started["next_fire_at"]), start);

    // interval with a past start_at: the next slot of the grid anchored there.
    let past = now_ms() - TimeDelta::hours(5) - TimeDelta::milliseconds(250);
    let gridded = app
        .create_job(&json!({
            "name": "grid",
            "schedule": { "kind": "interval", "every_ms": 7_000, "start_at": ts(past) },
            "target": http_target(),
        }))
        .await;
    let next = parse_ts(&gridded["next_fire_at"]);
    assert!(next > Utc::now() - TimeDelta::seconds(1) && next <= Utc::now() + TimeDelta::seconds(7), "{next}");
    assert_eq!((next - past).num_milliseconds() % 7_000, 0, "{next} is off the grid of {past}");

    // cron, 5 fields, in a zone: minute 0 of a 09:00 New York weekday.
    let weekday = app.create_job(&cron_job("ny-9am", "0 9 * * 1-5", "America/New_York")).await;
    let next = parse_ts(&weekday["next_fire_at"]);
    assert!(next > Utc::now() && next <= Utc::now() + TimeDelta::days(4), "{next}");
    // 09:00 EST is 14:00Z, 09:00 EDT 13:00Z.
    assert!([13, 14].contains(&next.hour()) && next.minute() == 0 && next.second() == 0, "{next}");
    let preview = app.get(&format!("/v1/jobs/{}/next?count=1", weekday["id"].as_str().unwrap())).await.json();
    let local = preview["fire_times"][0]["local"].as_str().unwrap().to_owned();
    assert!(local.contains("T09:00:00.000-0"), "local time {local} is not 09:00 in New York");

    // cron, 6 fields (seconds first): every 15 s.
    let before = Utc::now();
    let secs = app.create_job(&cron_job("every-15s", "*/15 * * * * *", "UTC")).await;
    let next = parse_ts(&secs["next_fire_at"]);
    assert!(next > before && next <= Utc::now() + TimeDelta::seconds(15), "{next}");
    assert_eq!(next.second() % 15, 0, "{next}");
    assert_eq!(next.nanosecond(), 0, "{next}");

    // cron shortcut, timezone defaulting to UTC: next UTC midnight.
    let before = Utc::now();
    let daily = app
        .create_job(
            &json!({ "name": "daily", "schedule": { "kind": "cron", "expr": "@daily" }, "target": http_target() }),
        )
        .await;
    let after = Utc::now();
    assert_eq!(daily["schedule"]["timezone"], "UTC");
    let midnight_after =
        |t: DateTime<Utc>| (t.date_naive() + TimeDelta::days(1)).and_hms_opt(0, 0, 0).unwrap().and_utc();
    let next = parse_ts(&daily["next_fire_at"]);
    assert!(next == midnight_after(before) || next == midnight_after(after), "{next}");

    // Every one of them is stored as returned.
    for job in [&once, &every, &started, &gridded, &weekday, &secs, &daily] {
        let id = job["id"].as_str().unwrap();
        let mut stored = app.job(id).await;
        let mut created = (*job).clone();
        // The 15 s cron and the 7 s grid may have moved on between the calls.
        for v in [&mut stored, &mut created] {
            v.as_object_mut().unwrap().remove("next_fire_at");
        }
        assert_eq!(stored, created);
    }
    assert_eq!(app.job_rows().await, 7);
}

#[tokio::test]
async fn bad_job_definitions_are_422_naming_the_field_and_store_nothing() {
    let app = TestApp::start("invalid").await;
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut v = example_job();
        edit(&mut v);
        v
    };
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("invalid cron", with(&|v| v["schedule"]["expr"] = json!("61 * * * *")), vec!["schedule.expr"]),
        ("cron with 4 fields", with(&|v| v["schedule"]["expr"] = json!("* * * *")), vec!["schedule.expr"]),
        ("unknown time zone", with(&|v| v["schedule"]["timezone"] = json!("Mars/Olympus")), vec!["schedule.timezone"]),
        (
            "interval every_ms 0",
            with(&|v| v["schedule"] = json!({ "kind": "interval", "every_ms": 0 })),
            vec!["schedule.every_ms"],
        ),
        (
            "interval every_ms negative",
            with(&|v| v["schedule"] = json!({ "kind": "interval", "every_ms": -5 })),
            vec!["schedule.every_ms"],
        ),
        ("unparsable at", with(&|v| v["schedule"] = json!({ "kind": "once", "at": "tomorrow" })), vec!["schedule.at"]),
        ("ftp url", with(&|v| v["target"]["url"] = json!("ftp://example.com/x")), vec!["target.url"]),
        (
            "missing target",
            with(&|v| {
                v.as_object_mut().unwrap().remove("target");
            }),
            vec!["target"],
        ),
        ("unknown schedule kind", with(&|v| v["schedule"] = json!({ "kind": "weekly" })), vec!["schedule.kind"]),
        ("unknown top-level field", with(&|v| v["colour"] = json!("blue")), vec!["colour"]),
        (
            "header with CR/LF",
            with(&|v| v["target"]["headers"] = json!({ "x-a": "1\r\nHost: evil" })),
            vec!["target.headers.x-a"],
        ),
        ("name too long", with(&|v| v["name"] = json!("n".repeat(201))), vec!["name"]),
        (
            "end_at before start_at",
            with(&|v| {
                v["schedule"]["start_at"] = json!("2027-01-02T00:00:00Z");
                v["schedule"]["end_at"] = json!("2027-01-01T00:00:00Z");
            }),
            vec!["schedule.end_at"],
        ),
        ("misfire", with(&|v| v["misfire"] = json!("sometimes")), vec!["misfire"]),
        ("body not an object", json!(["a job"]), vec![""]),
    ];
    for (label, body, fields) in &cases {
        let r = app.post_json("/v1/jobs", body).await;
        assert_eq!(r.status, 422, "{label}: {}", r.text);
        assert_invalid(&r, fields);
    }
    // A name of exactly the limit is fine (the limit is not off by one).
    let ok = app.post_json("/v1/jobs", &with(&|v| v["name"] = json!("n".repeat(200)))).await;
    assert_eq!(ok.status, 201, "{}", ok.text);
    let id = ok.json()["id"].as_str().unwrap().to_owned();
    let rows: Vec<Uuid> =
        app.sql().await.query("SELECT id FROM jobs", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(rows, vec![Uuid::parse_str(&id).unwrap()], "only the valid job may be stored");
}

#[tokio::test]
async fn unreadable_bodies_are_400_or_413_problems_and_store_nothing() {
    let app = TestApp::start("bodies").await;

    let not_json = app
        .send(app.http.post(app.url("/v1/jobs")).header("content-type", "application/json").body("{\"name\": "))
        .await;
    assert_problem(&not_json, 400);

    let text_plain = app
        .send(app.http.post(app.url("/v1/jobs")).header("content-type", "text/plain").body(example_job().to_string()))
        .await;
    let p = assert_problem(&text_plain, 400);
    assert!(p["detail"].as_str().unwrap().contains("Content-Type"), "{p}");

    // Over 256 KiB: refused before validation (a smaller oversized target.body
    // would be a 422 on target.body instead).
    let mut big = example_job();
    big["target"]["body"] = json!("x".repeat(257 * 1024));
    let too_large = app.post_json("/v1/jobs", &big).await;
    assert_problem(&too_large, 413);

    let mut under = example_job();
    under["target"]["body"] = json!("x".repeat(100 * 1024));
    let r = app.post_json("/v1/jobs", &under).await;
    assert_invalid(&r, &["target.body"]);

    assert_eq!(app.job_rows().await, 0);
}

#[tokio::test]
async fn getting_an_unknown_job_is_404() {
    let app = TestApp::start("get404").await;
    let r = app.get(&format!("/v1/jobs/{}", Uuid::new_v4())).await;
    assert_problem(&r, 404);
    let r = app.get("/v1/jobs/not-a-uuid").await;
    assert_problem(&r, 404);
    // A real job is found, so the 404s above are about the id.
    let id = app.create_id(&example_job()).await;
    assert_eq!(app.get(&format!("/v1/jobs/{id}")).await.status, 200);
}

// ---------------------------------------------------------------------------
// GET /v1/jobs
// ---------------------------------------------------------------------------

#[tokio::test]
async fn listing_pages_through_every_job_once_in_creation_order() {
    let app = TestApp::start("pages").await;
    let mut created = Vec::new();
    for i in 0..7 {
        created.push(app.create_id(&cron_job(&format!("job-{i}"), "0 * * * *", "UTC")).await);
    }
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/jobs?limit=3&cursor={}", enc(c)),
            None => "/v1/jobs?limit=3".to_owned(),
        };
        let r = app.get(&path).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let page = r.json();
        let ids = ids_of(&page);
        pages.push(ids.len());
        seen.extend(ids);
        assert!(pages.len() <= 3, "more pages than 7 jobs / 3 need: {pages:?}");
        match &page["next_cursor"] {
            Value::Null => break,
            Value::String(c) => cursor = Some(c.clone()),
            other => panic!("next_cursor is {other}"),
        }
    }
    assert_eq!(pages, [3, 3, 1]);
    assert_eq!(seen, created);

    // Items are whole jobs.
    let page = app.get("/v1/jobs?limit=1").await.json();
    assert_eq!(page["items"][0], app.job(&created[0]).await);

    // limit=7 holds everything: no next page.
    let page = app.get("/v1/jobs?limit=7").await.json();
    assert_eq!(ids_of(&page), created);
    assert_eq!(page["next_cursor"], Value::Null);
    // The default page holds them all too.
    assert_eq!(ids_of(&app.get("/v1/jobs").await.json()), created);
}

#[tokio::test]
async fn listing_rejects_bad_parameters_with_422() {
    let app = TestApp::start("listbad").await;
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("limit=-1", "limit"),
        ("limit=abc", "limit"),
        ("cursor=bogus", "cursor"),
        ("kind=weekly", "kind"),
        ("paused=yes", "paused"),
    ] {
        let r = app.get(&format!("/v1/jobs?{query}")).await;
        assert_eq!(r.status, 422, "{query}: {}", r.text);
        assert_invalid(&r, &[field]);
    }
    // The bounds themselves are valid.
    assert_eq!(app.get("/v1/jobs?limit=1").await.status, 200);
    assert_eq!(app.get("/v1/jobs?limit=500").await.status, 200);
}

#[tokio::test]
async fn listing_filters_by_literal_name_prefix_kind_and_paused() {
    let app = TestApp::start("filters").await;
    let pct = app.create_id(&cron_job("50%-off", "0 * * * *", "UTC")).await;
    let pct_look = app.create_id(&cron_job("50x-off", "0 * * * *", "UTC")).await;
    let under = app
        .create_id(
            &json!({ "name": "a_b", "schedule": { "kind": "interval", "every_ms": 60000 }, "target": http_target() }),
        )
        .await;
    let under_look = app
        .create_id(&json!({
            "name": "axb",
            "schedule": { "kind": "once", "at": ts(now_ms() + TimeDelta::days(1)) },
            "target": http_target(),
        }))
        .await;
    let mut paused_job = cron_job("paused-one", "0 * * * *", "UTC");
    paused_job["paused"] = json!(true);
    let paused = app.create_id(&paused_job).await;

    let list = |q: String| {
        let app = &app;
        async move {
            let r = app.get(&format!("/v1/jobs?{q}")).await;
            assert_eq!(r.status, 200, "{q}: {}", r.text);
            ids_of(&r.json())
        }
    };
    assert_eq!(list(format!("name_prefix={}", enc("50"))).await, [pct.clone(), pct_look.clone()]);
    assert_eq!(list(format!("name_prefix={}", enc("50%"))).await, std::slice::from_ref(&pct), "% must be literal");
    assert_eq!(list(format!("name_prefix={}", enc("a_"))).await, std::slice::from_ref(&under), "_ must be literal");
    assert_eq!(list(format!("name_prefix={}", enc("a"))).await, [under.clone(), under_look.clone()]);
    assert_eq!(list(format!("name_prefix={}", enc("zzz"))).await, Vec::<String>::new());

    assert_eq!(list("kind=cron".into()).await, [pct.clone(), pct_look.clone(), paused.clone()]);
    assert_eq!(list("kind=interval".into()).await, std::slice::from_ref(&under));
    assert_eq!(list("kind=once".into()).await, std::slice::from_ref(&under_look));

    assert_eq!(list("paused=true".into()).await, std::slice::from_ref(&paused));
    assert_eq!(list("paused=false".into()).await, [pct.clone(), pct_look.clone(), under.clone(), under_look.clone()]);

    // Filters combine, and pagination respects them.
    assert_eq!(list("kind=cron&paused=false".into()).await, [pct.clone(), pct_look.clone()]);
    let page = app.get("/v1/jobs?kind=cron&limit=2").await.json();
    assert_eq!(ids_of(&page), [pct.clone(), pct_look.clone()]);
    let cursor = page["next_cursor"].as_str().expect("a second page").to_owned();
    assert_eq!(list(format!("kind=cron&limit=2&cursor={}", enc(&cursor))).await, std::slice::from_ref(&paused));
}

// ---------------------------------------------------------------------------
// PUT, DELETE, pause, resume
// ---------------------------------------------------------------------------

#[tokio::test]
async fn replacing_a_job_checks_if_match_and_bumps_the_version() {
    let app = TestApp::start("put").await;
    let id = app.create_id(&example_job()).await;
    let path = format!("/v1/jobs/{id}");

    let mut v2 = cron_job("renamed", "15 10 * * *", "UTC");
    v2["misfire"] = json!("skip");
    let r = app.put_json(&path, &v2, Some("\"1\"")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("etag"), Some("\"2\""));
    let job = r.json();
    assert_eq!(job["id"], json!(id));
    assert_eq!(job["version"], json!(2));
    assert_eq!(job["name"], "renamed");
    assert_eq!(job["misfire"], "skip");
    assert!(job.get("retry").is_none_or(Value::is_null), "the old retry policy survived a replace: {job}");
    let next = parse_ts(&job["next_fire_at"]);
    assert_eq!((next.hour(), next.minute()), (10, 15), "{next}");
    assert_eq!(app.job(&id).await, job);

    // The same (now stale) precondition again: 412, nothing changes.
    let mut v3 = v2.clone();
    v3["name"] = json!("lost-update");
    let stale = app.put_json(&path, &v3, Some("\"1\"")).await;
    assert_problem(&stale, 412);
    let stored = app.job(&id).await;
    assert_eq!(stored["version"], json!(2));
    assert_eq!(stored["name"], "renamed");

    // Without If-Match the replace is unconditional.
    let r = app.put_json(&path, &v3, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["version"], json!(3));
    assert_eq!(r.json()["name"], "lost-update");

    // The current version matches.
    let r = app.put_json(&path, &v2, Some("\"3\"")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["version"], json!(4));

    // An If-Match that is no version at all is a 400.
    let r = app.put_json(&path, &v2, Some("\"banana\"")).await;
    assert_problem(&r, 400);

    // Replacing with paused: true pauses it.
    let mut paused = v2.clone();
    paused["paused"] = json!(true);
    let r = app.put_json(&path, &paused, Some("\"4\"")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["paused"], json!(true));
    assert_eq!(r.json()["next_fire_at"], Value::Null);
    assert_eq!(app.job_rows().await, 1, "a replace must not add rows");
}

#[tokio::test]
async fn an_invalid_replacement_is_422_and_leaves_the_job_unchanged() {
    let app = TestApp::start("put422").await;
    let id = app.create_id(&example_job()).await;
    let before = app.job(&id).await;
    let mut bad = example_job();
    bad["schedule"]["expr"] = json!("0 25 * * *");
    bad["name"] = json!("should-not-stick");
    let r = app.put_json(&format!("/v1/jobs/{id}"), &bad, Some("\"1\"")).await;
    assert_invalid(&r, &["schedule.expr"]);
    assert_eq!(app.job(&id).await, before);

    let r = app
        .send(app.http.put(app.url(&format!("/v1/jobs/{id}"))).header("content-type", "application/json").body("nope"))
        .await;
    assert_problem(&r, 400);
    assert_eq!(app.job(&id).await, before);
}

#[tokio::test]
async fn replacing_an_unknown_job_is_404() {
    let app = TestApp::start("put404").await;
    let r = app.put_json(&format!("/v1/jobs/{}", Uuid::new_v4()), &example_job(), None).await;
    assert_problem(&r, 404);
    let r = app.put_json(&format!("/v1/jobs/{}", Uuid::new_v4()), &example_job(), Some("\"1\"")).await;
    assert_problem(&r, 404);
    let r = app.put_json("/v1/jobs/not-a-uuid", &example_job(), None).await;
    assert_problem(&r, 404);
    assert_eq!(app.job_rows().await, 0, "a PUT to an unknown id must not create a job");
}

/// RFC 9110 §13.1.1: `If-Match: *` is true whenever the resource exists.
#[tokio::test]
async fn if_match_star_matches_any_current_version() {
    let app = TestApp::start("putstar").await;
    let id = app.create_id(&example_job()).await;
    let r = app.put_json(&format!("/v1/jobs/{id}"), &cron_job("star", "0 1 * * *", "UTC"), Some("*")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["version"], json!(2));
    let r = app.put_json(&format!("/v1/jobs/{}", Uuid::new_v4()), &example_job(), Some("*")).await;
    assert_problem(&r, 404);
}

#[tokio::test]
async fn deleting_a_job_hides_it_everywhere() {
    let app = TestApp::start("delete").await;
    let keep = app.create_id(&cron_job("keep", "0 * * * *", "UTC")).await;
    let id = app.create_id(&cron_job("doomed", "0 * * * *", "UTC")).await;
    let path = format!("/v1/jobs/{id}");

    let r = app.delete(&path).await;
    assert_eq!(r.status, 204, "{}", r.text);
    assert!(r.text.is_empty(), "204 with a body: {:?}", r.text);
    assert_problem(&app.get(&path).await, 404);
    assert_problem(&app.delete(&path).await, 404);
    assert_eq!(ids_of(&app.get("/v1/jobs").await.json()), std::slice::from_ref(&keep));
    // Nor can it be changed any more.
    assert_problem(&app.put_json(&path, &example_job(), None).await, 404);
    assert_problem(&app.post_empty(&format!("{path}/pause")).await, 404);
    assert_problem(&app.post_empty(&format!("{path}/resume")).await, 404);
    assert_problem(&app.get(&format!("{path}/next")).await, 404);

    assert_problem(&app.delete(&format!("/v1/jobs/{}", Uuid::new_v4())).await, 404);
    assert_problem(&app.delete("/v1/jobs/not-a-uuid").await, 404);
    // The other job is untouched.
    assert_eq!(app.job(&keep).await["version"], json!(1));
}

#[tokio::test]
async fn pause_and_resume_flip_paused_bump_the_version_and_clear_next_fire_at() {
    let app = TestApp::start("pause").await;
    let created = app.create_job(&cron_job("p", "0 12 * * *", "UTC")).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let next = created["next_fire_at"].clone();
    assert!(next.is_string());

    let r = app.post_empty(&format!("/v1/jobs/{id}/pause")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("etag"), Some("\"2\""));
    let paused = r.json();
    assert_eq!(paused["paused"], json!(true));
    assert_eq!(paused["version"], json!(2));
    assert_eq!(paused["next_fire_at"], Value::Null);
    assert_eq!(app.job(&id).await, paused);
    assert_eq!(ids_of(&app.get("/v1/jobs?paused=true").await.json()), std::slice::from_ref(&id));

    let r = app.post_empty(&format!("/v1/jobs/{id}/resume")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("etag"), Some("\"3\""));
    let resumed = r.json();
    assert_eq!(resumed["paused"], json!(false));
    assert_eq!(resumed["version"], json!(3));
    assert_eq!(resumed["next_fire_at"], next);
    assert_eq!(app.job(&id).await, resumed);
    assert_eq!(ids_of(&app.get("/v1/jobs?paused=true").await.json()), Vec::<String>::new());

    // A replace after a pause/resume needs the bumped version.
    let r = app.put_json(&format!("/v1/jobs/{id}"), &cron_job("p", "0 12 * * *", "UTC"), Some("\"1\"")).await;
    assert_problem(&r, 412);

    for action in ["pause", "resume"] {
        assert_problem(&app.post_empty(&format!("/v1/jobs/{}/{action}", Uuid::new_v4())).await, 404);
        assert_problem(&app.post_empty(&format!("/v1/jobs/nope/{action}")).await, 404);
    }
}

#[tokio::test]
async fn mutations_cancel_the_jobs_pending_ledger_rows() {
    let app = TestApp::start("cancel").await;
    let pg = app.sql().await;
    let slot = now_ms() + TimeDelta::hours(1);
    let insert = async |id: &str, status: &str| {
        let id = Uuid::parse_str(id).unwrap();
        pg.execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status) VALUES ($1, $2, $3, $4, $5)",
            &[&id, &slot, &Uuid::new_v4(), &format!("{id}@{}", ts(slot)), &status],
        )
        .await
        .unwrap();
    };
    let status_of = async |id: &str| -> (String, Option<String>) {
        let row = pg
            .query_one(
                "SELECT status, reason FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2",
                &[&Uuid::parse_str(id).unwrap(), &slot],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };

    let replaced = app.create_id(&example_job()).await;
    let paused = app.create_id(&example_job()).await;
    let deleted = app.create_id(&example_job()).await;
    let untouched = app.create_id(&example_job()).await;
    let running = app.create_id(&example_job()).await;
    for id in [&replaced, &paused, &deleted, &untouched] {
        insert(id, "pending").await;
    }
    insert(&running, "running").await;

    assert_eq!(app.put_json(&format!("/v1/jobs/{replaced}"), &example_job(), None).await.status, 200);
    assert_eq!(app.post_empty(&format!("/v1/jobs/{paused}/pause")).await.status, 200);
    assert_eq!(app.delete(&format!("/v1/jobs/{deleted}")).await.status, 204);
    assert_eq!(app.post_empty(&format!("/v1/jobs/{running}/pause")).await.status, 200);

    assert_eq!(status_of(&replaced).await, ("skipped".into(), Some("superseded".into())));
    assert_eq!(status_of(&paused).await, ("skipped".into(), Some("paused".into())));
    assert_eq!(status_of(&deleted).await, ("skipped".into(), Some("deleted".into())));
    assert_eq!(status_of(&untouched).await, ("pending".into(), None));
    // A slot a worker already runs is not rewritten.
    assert_eq!(status_of(&running).await, ("running".into(), None));
}

// ---------------------------------------------------------------------------
// GET /v1/jobs/{id}/next
// ---------------------------------------------------------------------------

#[tokio::test]
async fn next_lists_strictly_increasing_fire_times() {
    let app = TestApp::start("next").await;
    let start = now_ms() + TimeDelta::hours(2);
    let id = app
        .create_id(&json!({
            "name": "interval",
            "schedule": { "kind": "interval", "every_ms": 90_000, "start_at": ts(start) },
            "target": http_target(),
        }))
        .await;
    let r = app.get(&format!("/v1/jobs/{id}/next?count=5")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["job_id"], json!(id));
    let times: Vec<DateTime<Utc>> = body["fire_times"].as_array().unwrap().iter().map(|t| parse_ts(&t["at"])).collect();
    let expected: Vec<DateTime<Utc>> = (0..5).map(|k| start + TimeDelta::milliseconds(90_000 * k)).collect();
    assert_eq!(times, expected);
    assert!(body["fire_times"][0].get("local").is_none(), "an interval has no zone: {body}");

    // A cron job: 5 strictly increasing times, each on the hour.
    let cron = app.create_id(&cron_job("hourly", "0 * * * *", "Europe/Berlin")).await;
    let body = app.get(&format!("/v1/jobs/{cron}/next?count=5")).await.json();
    let times: Vec<DateTime<Utc>> = body["fire_times"].as_array().unwrap().iter().map(|t| parse_ts(&t["at"])).collect();
    assert_eq!(times.len(), 5, "{body}");
    assert!(times[0] > Utc::now() - TimeDelta::seconds(1));
    for w in times.windows(2) {
        assert!(w[0] < w[1], "not strictly increasing: {times:?}");
        assert_eq!(w[1] - w[0], TimeDelta::hours(1), "{times:?}");
    }
    assert!(times.iter().all(|t| t.minute() == 0 && t.second() == 0), "{times:?}");

    // Without count: 10.
    let body = app.get(&format!("/v1/jobs/{cron}/next")).await.json();
    assert_eq!(body["fire_times"].as_array().unwrap().len(), 10);

    // A once job has exactly one fire time, without a zone.
    let once = app
        .create_id(&json!({ "name": "once", "schedule": { "kind": "once", "at": ts(start) }, "target": http_target() }))
        .await;
    let body = app.get(&format!("/v1/jobs/{once}/next?count=5")).await.json();
    assert_eq!(body["fire_times"], json!([{ "at": ts(start) }]));
}

#[tokio::test]
async fn next_shows_local_time_and_marks_the_spring_forward_gap() {
    let app = TestApp::start("dst").await;
    // New York springs forward on 2027-03-14: 02:00 EST becomes 03:00 EDT, so
    // 02:30 does not exist that day and fires at the end of the gap, 07:00Z.
    let mut job = cron_job("ny-0230", "30 2 * * *", "America/New_York");
    job["schedule"]["start_at"] = json!("2027-03-12T00:00:00Z");
    let id = app.create_id(&job).await;
    let r = app.get(&format!("/v1/jobs/{id}/next?count=5")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(
        body["fire_times"],
        json!([
            { "at": "2027-03-12T07:30:00.000Z", "local": "2027-03-12T02:30:00.000-05:00" },
            { "at": "2027-03-13T07:30:00.000Z", "local": "2027-03-13T02:30:00.000-05:00" },
            { "at": "2027-03-14T07:00:00.000Z", "local": "2027-03-14T03:00:00.000-04:00", "dst_shift": true },
            { "at": "2027-03-15T06:30:00.000Z", "local": "2027-03-15T02:30:00.000-04:00" },
            { "at": "2027-03-16T06:30:00.000Z", "local": "2027-03-16T02:30:00.000-04:00" },
        ]),
        "{body}"
    );

    // Falling back on 2027-11-07 repeats 01:00-02:00: 01:30 fires once, at
    // its first occurrence (EDT).
    let mut job = cron_job("ny-0130", "30 1 * * *", "America/New_York");
    job["schedule"]["start_at"] = json!("2027-11-06T00:00:00Z");
    let id = app.create_id(&job).await;
    let body = app.get(&format!("/v1/jobs/{id}/next?count=3")).await.json();
    let at: Vec<&str> = body["fire_times"].as_array().unwrap().iter().map(|t| t["at"].as_str().unwrap()).collect();
    assert_eq!(at, ["2027-11-06T05:30:00.000Z", "2027-11-07T05:30:00.000Z", "2027-11-08T06:30:00.000Z"], "{body}");
    assert_eq!(body["fire_times"][1]["local"], "2027-11-07T01:30:00.000-04:00");
    assert_eq!(body["fire_times"][2]["local"], "2027-11-08T01:30:00.000-05:00");
}

#[tokio::test]
async fn next_rejects_a_bad_count_and_an_unknown_job() {
    let app = TestApp::start("nextbad").await;
    let id = app.create_id(&example_job()).await;
    for count in ["0", "abc", "-1", "1001"] {
        let r = app.get(&format!("/v1/jobs/{id}/next?count={count}")).await;
        assert_eq!(r.status, 422, "count={count}: {}", r.text);
        assert_invalid(&r, &["count"]);
    }
    assert_eq!(app.get(&format!("/v1/jobs/{id}/next?count=1000")).await.status, 200);
    assert_problem(&app.get(&format!("/v1/jobs/{}/next?count=5", Uuid::new_v4())).await, 404);
    assert_problem(&app.get("/v1/jobs/xyz/next?count=5").await, 404);
}

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
// Probes, cluster, auth, routing
// ---------------------------------------------------------------------------

#[tokio::test]
async fn probes_answer_200_with_a_live_database() {
    let app = TestApp::start("probes").await;
    let r = app.get("/healthz").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["status"], "ok");
    let r = app.get("/readyz").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["status"], "ready");
}

#[tokio::test]
async fn readyz_is_503_when_postgres_is_unreachable_but_healthz_is_200() {
    // Port 1 on loopback refuses connections at once.
    let app = TestApp::start_with(
        "notready",
        Options { pg_url: Some("postgres://postgres@127.0.0.1:1/postgres".into()), ..Options::default() },
    )
    .await;
    assert_eq!(app.get("/healthz").await.status, 200);
    assert_problem(&app.get("/readyz").await, 503);
    // No database connection is the service's state: a 503 problem document
    // that clients retry, without internals.
    let r = app.get("/v1/jobs").await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.headers.get("retry-after").and_then(|v| v.to_str().ok()), Some("1"));
    let p = assert_problem(&r, r.status);
    assert!(!p["detail"].as_str().unwrap().contains("127.0.0.1:1"), "leaks internals: {p}");
}

#[tokio::test]
async fn cluster_lists_live_nodes_from_their_heartbeats() {
    let app = TestApp::start("cluster").await;
    let r = app.get("/v1/cluster").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["live_nodes"], json!(0), "{body}");
    assert_eq!(body["nodes"], json!([]), "{body}");
    assert_eq!(body["cluster"], json!(app.cluster));

    let key = format!("{}:node:n1", app.cluster);
    let other_cluster = unique_cluster("cluster-other");
    let other_key = format!("{other_cluster}:node:n9");
    // A heartbeat as a node writes it: the key with its TTL, and the id in
    // the cluster's registry.
    for (k, cluster, id) in [(&key, &app.cluster, "n1"), (&other_key, &other_cluster, "n9")] {
        app.redis_cmd(redis::cmd("SET").arg(k).arg(r#"{"node_id":"n1","owned_jobs":5}"#).arg("EX").arg(30)).await;
        app.redis_cmd(redis::cmd("SADD").arg(format!("{cluster}:nodes")).arg(id)).await;
    }
    let r = app.get("/v1/cluster").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    assert_eq!(body["live_nodes"], json!(1), "{body}");
    let nodes = body["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "another cluster's node leaked in: {body}");
    assert_eq!(nodes[0]["node_id"], "n1");
    assert_eq!(nodes[0]["owned_jobs"], json!(5));
    assert_eq!(body["redis_shards_up"], json!(1));

    // Its heartbeat gone, the node is gone.
    app.redis_cmd(redis::cmd("DEL").arg(&key).arg(&other_key)).await;
    assert_eq!(app.get("/v1/cluster").await.json()["live_nodes"], json!(0));
}

#[tokio::test]
async fn cluster_is_503_when_no_redis_shard_answers() {
    let app =
        TestApp::start_with("noredis", Options { redis_url: Some("redis://127.0.0.1:1".into()), ..Options::default() })
            .await;
    assert_problem(&app.get("/v1/cluster").await, 503);
}

#[tokio::test]
async fn bearer_tokens_guard_v1_but_not_the_probes() {
    let app = TestApp::start_with("auth", Options { tokens: vec!["s3cret".into()], ..Options::default() }).await;
    let get = |auth: Option<&'static str>, path: &'static str| {
        let mut rb = app.http.get(app.url(path));
        if let Some(a) = auth {
            rb = rb.header("authorization", a);
        }
        app.send(rb)
    };

    let r = get(None, "/v1/jobs").await;
    assert_problem(&r, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    for wrong in ["Bearer nope", "Bearer s3cre", "Bearer s3cret-longer", "Bearer ", "Basic czNjcmV0", "s3cret"] {
        let r = get(Some(wrong), "/v1/jobs").await;
        assert_problem(&r, 401);
        assert_eq!(r.header("www-authenticate"), Some("Bearer"), "{wrong}");
    }
    let r = get(Some("Bearer s3cret"), "/v1/jobs").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(get(Some("Bearer s3cret"), "/v1/cluster").await.status, 200);

    // Writes are guarded too, and a refused write stores nothing.
    let r = app.send(app.http.post(app.url("/v1/jobs")).json(&example_job())).await;
    assert_problem(&r, 401);
    let r = app
        .send(app.http.post(app.url("/v1/jobs")).header("authorization", "Bearer s3cret").json(&example_job()))
        .await;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json()["id"].as_str().unwrap().to_owned();
    assert_eq!(app.job_rows().await, 1);
    assert_problem(&app.send(app.http.delete(app.url(&format!("/v1/jobs/{id}")))).await, 401);
    assert_problem(&app.send(app.http.post(app.url(&format!("/v1/jobs/{id}/pause")))).await, 401);
    assert_eq!(get(None, "/v1/jobs").await.status, 401);

    assert_eq!(get(None, "/healthz").await.status, 200);
    assert_eq!(get(None, "/readyz").await.status, 200);
}

/// RFC 9110 §11.1: the authentication scheme name is case-insensitive.
#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let app = TestApp::start_with("authcase", Options { tokens: vec!["s3cret".into()], ..Options::default() }).await;
    for auth in ["bearer s3cret", "BEARER s3cret"] {
        let r = app.send(app.http.get(app.url("/v1/jobs")).header("authorization", auth)).await;
        assert_eq!(r.status, 200, "{auth}: {}", r.text);
    }
}

#[tokio::test]
async fn unknown_routes_are_404_problems() {
    let app = TestApp::start("routes").await;
    for path in ["/nope", "/v1/nope", "/v2/jobs", "/v1/jobs/x/y/z"] {
        assert_problem(&app.get(path).await, 404);
    }
}

/// Errors are problem+json (RFC 9457) — also a method a route does not have.
#[tokio::test]
async fn a_wrong_method_is_a_405_problem() {
    let app = TestApp::start("405").await;
    let id = app.create_id(&example_job()).await;
    let r = app.send(app.http.patch(app.url(&format!("/v1/jobs/{id}"))).json(&example_job())).await;
    assert_problem(&r, 405);
    assert!(r.header("allow").is_some(), "405 without Allow");
}

/// Errors are problem+json (RFC 9457) — also a query string that cannot be parsed.
#[tokio::test]
async fn a_malformed_query_string_is_a_problem() {
    let app = TestApp::start("query").await;
    let r = app.get("/v1/jobs?limit=1&limit=2").await;
    assert!(r.status == 400 || r.status == 422, "{} {}", r.status, r.text);
    assert_problem(&r, r.status);
}

/// The OpenAPI document is generated from the code, open (no token needed,
/// even with auth on), and covers every route of the router; Swagger UI
/// serves beside it.
#[tokio::test]
async fn the_openapi_document_and_swagger_ui_are_open_and_cover_every_route() {
    let app = TestApp::start_with("openapi", Options { tokens: vec!["s3cret".into()], ..Default::default() }).await;
    let r = app.get("/openapi.json").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.header("content-type").is_some_and(|ct| ct.starts_with("application/json")), "{:?}", r.headers);
    let doc = r.json();
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "{}", doc["openapi"]);
    let routes = [
        ("post", "/v1/jobs"),
        ("get", "/v1/jobs"),
        ("get", "/v1/jobs/{id}"),
        ("put", "/v1/jobs/{id}"),
        ("delete", "/v1/jobs/{id}"),
        ("post", "/v1/jobs/{id}/pause"),
        ("post", "/v1/jobs/{id}/resume"),
        ("get", "/v1/jobs/{id}/next"),
        ("post", "/v1/jobs/{id}/trigger"),
        ("get", "/v1/jobs/{id}/executions"),
        ("get", "/v1/jobs/{id}/executions/{scheduled_at}"),
        ("get", "/v1/executions"),
        ("post", "/v1/executions/replay"),
        ("post", "/v1/executions/{job_id}/{scheduled_at}/replay"),
        ("get", "/v1/cluster"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/metrics"),
        ("get", "/openapi.json"),
    ];
    for (method, path) in routes {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is missing from the document");
        let secured = op["security"].as_array().is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some()));
        assert_eq!(secured, path.starts_with("/v1/"), "{method} {path}: bearer security");
        // Every /v1 operation documents its problem+json errors.
        if path.starts_with("/v1/") {
            let problem = &op["responses"]["401"]["content"]["application/problem+json"];
            assert!(problem.is_object(), "{method} {path}: no problem+json 401");
        }
    }
    let documented: usize = doc["paths"].as_object().unwrap().values().map(|p| p.as_object().unwrap().len()).sum();
    assert_eq!(documented, routes.len(), "the document has operations the test does not list");
    assert_eq!(doc["components"]["securitySchemes"]["bearer"]["scheme"], "bearer");
    let problem = &doc["components"]["schemas"]["Problem"]["properties"];
    for f in ["status", "title", "detail", "errors"] {
        assert!(problem[f].is_object(), "Problem lacks {f}");
    }
    for union in ["ScheduleKind", "Target"] {
        let schema = &doc["components"]["schemas"][union];
        assert_eq!(schema["discriminator"]["propertyName"], "kind", "{union}: {schema}");
        assert!(schema["oneOf"].is_array(), "{union}: {schema}");
    }
    let job = &doc["components"]["schemas"]["JobSpec"]["properties"];
    for f in ["name", "schedule", "target", "retry", "misfire", "misfire_cap", "paused"] {
        assert!(job[f].is_object(), "JobSpec lacks {f}");
    }

    let ui = app.get("/docs/").await;
    assert_eq!(ui.status, 200, "{}", ui.text);
    assert!(ui.header("content-type").is_some_and(|ct| ct.starts_with("text/html")), "{:?}", ui.headers);
    assert!(ui.text.to_lowercase().contains("swagger"), "{}", ui.text);
    let ui = app.get("/docs").await; // redirected to /docs/
    assert_eq!(ui.status, 200, "{}", ui.text);
    // The API itself still wants the token.
    assert_problem(&app.get("/v1/jobs").await, 401);
}

/// Postgres cannot store a NUL character (jsonb or text), which made such
/// input a 500 (found while writing the OpenAPI schema); it is a 422 naming the field.
#[tokio::test]
async fn nul_characters_are_422_not_500() {
    let app = TestApp::start("nul").await;
    let mut job = example_job();
    job["target"]["body"] = json!("a\u{0}b");
    let r = app.post_json("/v1/jobs", &job).await;
    assert_problem(&r, 422);
    assert_eq!(r.json()["errors"][0]["field"], "target.body", "{}", r.text);
    assert_problem(&app.get("/v1/jobs?name_prefix=a%00").await, 422);
}

// ---------------------------------------------------------------------------
// Idempotency-Key on POST /v1/jobs
// ---------------------------------------------------------------------------

impl TestApp {
    async fn create_keyed(&self, key: &str, body: &Value, token: Option<&str>) -> Resp {
        let mut rb = self.http.post(self.url("/v1/jobs")).header("idempotency-key", key).json(body);
        if let Some(t) = token {
            rb = rb.bearer_auth(t);
        }
        self.send(rb).await
    }
}

#[tokio::test]
async fn an_idempotency_key_replays_the_first_create_and_refuses_another_body() {
    let app = TestApp::start("idem").await;
    let first = app.create_keyed("order-42", &example_job(), None).await;
    assert_eq!(first.status, 201, "{}", first.text);
    assert_eq!(first.header("idempotent-replayed"), None);
    let job = first.json();

    // The same definition, keys in another order and a default spelled out:
    // the same request, answered with the first response.
    let mut same = serde_json::Map::new();
    for (k, v) in example_job().as_object().unwrap().iter().rev() {
        same.insert(k.clone(), v.clone());
    }
    same.insert("misfire_cap".into(), json!(100));
    let again = app.create_keyed("order-42", &Value::Object(same), None).await;
    assert_eq!(again.status, 201, "{}", again.text);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json(), job);
    assert_eq!(again.header("location"), first.header("location"));
    assert_eq!(again.header("etag"), first.header("etag"));
    assert_eq!(app.job_rows().await, 1);

    // The same key with another body: 422 naming the header, nothing stored.
    let mut other = example_job();
    other["name"] = json!("another");
    let r = app.create_keyed("order-42", &other, None).await;
    assert_invalid(&r, &["Idempotency-Key"]);
    assert_eq!(app.job_rows().await, 1);

    // Another key, or none, creates.
    assert_eq!(app.create_keyed("order-43", &example_job(), None).await.status, 201);
    app.create_job(&example_job()).await;
    app.create_job(&example_job()).await;
    assert_eq!(app.job_rows().await, 4);

    // An expired key is forgotten: it may be used again, for anything.
    app.sql().await.execute("UPDATE idempotency_keys SET expires_at = now() - interval '1 s'", &[]).await.unwrap();
    let reused = app.create_keyed("order-42", &other, None).await;
    assert_eq!(reused.status, 201, "{}", reused.text);
    assert_eq!(reused.header("idempotent-replayed"), None);
    assert_ne!(reused.json()["id"], job["id"]);
    assert_eq!(app.job_rows().await, 5);
    // ... and the other expired key was purged on the way.
    let keys: Vec<String> = app
        .sql()
        .await
        .query("SELECT key FROM idempotency_keys", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(keys, ["order-42"]);
}

#[tokio::test]
async fn a_retry_after_a_one_time_jobs_instant_still_gets_the_first_response() {
    let app = TestApp::start("idemonce").await;
    let at = now_ms() + TimeDelta::milliseconds(1500);
    let body = json!({ "name": "once", "schedule": { "kind": "once", "at": ts(at) }, "target": http_target() });
    let first = app.create_keyed("k1", &body, None).await;
    assert_eq!(first.status, 201, "{}", first.text);
    // The awaited event is the instant itself.
    let wait = (at - Utc::now() + TimeDelta::milliseconds(10)).to_std().unwrap_or_default();
    tokio::time::sleep(wait).await;
    // Without the key the same body is now refused (its `at` has passed);
    // with it, the retry still gets the first response.
    assert_invalid(&app.post_json("/v1/jobs", &body).await, &["schedule.at"]);
    let again = app.create_keyed("k1", &body, None).await;
    assert_eq!(again.status, 201, "{}", again.text);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.json()["id"], first.json()["id"]);
    assert_eq!(app.job_rows().await, 1);
}

#[tokio::test]
async fn bad_idempotency_keys_are_422_naming_the_header() {
    let app = TestApp::start("idembad").await;
    let longest = "k".repeat(255);
    for bad in ["", "has space", &"k".repeat(256), "tab\there"] {
        let r = app.create_keyed(bad, &example_job(), None).await;
        assert_invalid(&r, &["Idempotency-Key"]);
    }
    let non_ascii = reqwest::header::HeaderValue::from_bytes(b"caf\xe9").unwrap();
    let r =
        app.send(app.http.post(app.url("/v1/jobs")).header("idempotency-key", non_ascii).json(&example_job())).await;
    assert_invalid(&r, &["Idempotency-Key"]);
    let twice = app
        .send(
            app.http
                .post(app.url("/v1/jobs"))
                .header("idempotency-key", "a")
                .header("idempotency-key", "b")
                .json(&example_job()),
        )
        .await;
    assert_invalid(&twice, &["Idempotency-Key"]);
    assert_eq!(app.job_rows().await, 0);
    // The limits are not off by one.
    assert_eq!(app.create_keyed(&longest, &example_job(), None).await.status, 201);
    assert_eq!(app.create_keyed("~!#$%&'*+-.^_`|", &example_job(), None).await.status, 201);
    assert_eq!(app.job_rows().await, 2);
}

#[tokio::test]
async fn concurrent_creates_with_one_key_make_one_job() {
    let app = TestApp::start("idemrace").await;
    let body = example_job();
    let requests = (0..8).map(|_| app.create_keyed("race", &body, None));
    let responses = futures::future::join_all(requests).await;
    let ids: std::collections::BTreeSet<String> = responses
        .iter()
        .map(|r| {
            assert_eq!(r.status, 201, "{}", r.text);
            r.json()["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(responses.iter().filter(|r| r.header("idempotent-replayed").is_none()).count(), 1);
    assert_eq!(app.job_rows().await, 1);
}

#[tokio::test]
async fn idempotency_keys_are_scoped_to_the_bearer_token() {
    let app =
        TestApp::start_with("idemscope", Options { tokens: vec!["alpha".into(), "beta".into()], ..Default::default() })
            .await;
    let a = app.create_keyed("shared", &example_job(), Some("alpha")).await;
    let b = app.create_keyed("shared", &example_job(), Some("beta")).await;
    assert_eq!((a.status, b.status), (201, 201), "{} {}", a.text, b.text);
    assert_ne!(a.json()["id"], b.json()["id"], "two tenants' keys collided");
    let a2 = app.create_keyed("shared", &example_job(), Some("alpha")).await;
    assert_eq!(a2.json()["id"], a.json()["id"]);
    assert_eq!(a2.header("idempotent-replayed"), Some("true"));
    // Another tenant's different body under the same key is no conflict.
    let mut other = example_job();
    other["name"] = json!("beta's");
    assert_eq!(app.create_keyed("other", &other, Some("beta")).await.status, 201);
    assert_eq!(app.create_keyed("other", &example_job(), Some("alpha")).await.status, 201);
    assert_eq!(app.job_rows().await, 4);
    // The token itself is not stored.
    let scopes: Vec<String> = app
        .sql()
        .await
        .query("SELECT DISTINCT scope FROM idempotency_keys", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(scopes.len(), 2);
    assert!(scopes.iter().all(|s| s.len() == 64 && !s.contains("alpha") && !s.contains("beta")), "{scopes:?}");
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

// ---------------------------------------------------------------------------
// Input limits
// ---------------------------------------------------------------------------

#[tokio::test]
async fn input_limits_are_422_naming_the_field_and_exact_limits_pass() {
    let app = TestApp::start("limits").await;
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut v = example_job();
        edit(&mut v);
        v
    };
    let many_headers = |n: usize| Value::Object((0..n).map(|i| (format!("x-h{i}"), json!("v"))).collect());
    let sqs = |group: &str| json!({ "kind": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q.fifo", "message_group_id": group });
    let cases: Vec<(&str, Value, &str)> = vec![
        ("51 headers", with(&|v| v["target"]["headers"] = many_headers(51)), "target.headers"),
        (
            "header value over 8 KiB",
            with(&|v| v["target"]["headers"] = json!({ "x-big": "v".repeat(8 * 1024 + 1) })),
            "target.headers.x-big",
        ),
        (
            "header name over 256 bytes",
            with(&|v| v["target"]["headers"] = json!({ "h".repeat(257): "v" })),
            "target.headers.hhhh",
        ),
        ("body over 64 KiB", with(&|v| v["target"]["body"] = json!("b".repeat(64 * 1024 + 1))), "target.body"),
        ("name over 200 characters", with(&|v| v["name"] = json!("é".repeat(201))), "name"),
        ("max_runs 0", with(&|v| v["schedule"]["max_runs"] = json!(0)), "schedule.max_runs"),
        ("max_runs over 10^9", with(&|v| v["schedule"]["max_runs"] = json!(1_000_000_001u64)), "schedule.max_runs"),
        ("FIFO group id over 128", with(&|v| v["target"] = sqs(&"g".repeat(129))), "target.message_group_id"),
        ("empty FIFO group id", with(&|v| v["target"] = sqs("")), "target.message_group_id"),
    ];
    for (label, body, field) in &cases {
        let r = app.post_json("/v1/jobs", body).await;
        assert_eq!(r.status, 422, "{label}: {}", r.text);
        let v = r.json();
        let fields: Vec<&str> = v["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
        assert!(fields.len() == 1 && fields[0].starts_with(field), "{label}: {v}");
    }
    assert_eq!(app.job_rows().await, 0);

    let at_limits = vec![
        with(&|v| v["target"]["headers"] = many_headers(50)),
        with(&|v| v["target"]["headers"] = json!({ "h".repeat(256): "v".repeat(8 * 1024) })),
        with(&|v| v["target"]["body"] = json!("b".repeat(64 * 1024))),
        with(&|v| v["name"] = json!("é".repeat(200))),
        with(&|v| v["schedule"]["max_runs"] = json!(1_000_000_000u64)),
        with(&|v| v["target"] = sqs(&"g".repeat(128))),
    ];
    for body in &at_limits {
        let r = app.post_json("/v1/jobs", body).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // Page size: 500 is the most.
    assert_eq!(app.get("/v1/jobs?limit=500").await.status, 200);
    assert_invalid(&app.get("/v1/jobs?limit=501").await, &["limit"]);
    assert_invalid(&app.get(&format!("/v1/jobs/{}/executions?limit=501", Uuid::new_v4())).await, &["limit"]);
    assert_invalid(&app.get("/v1/executions?limit=501").await, &["limit"]);
    assert_invalid(&app.post_json("/v1/executions/replay", &json!({ "limit": 1001 })).await, &["limit"]);
}
