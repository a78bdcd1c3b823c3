//! The job routes of the REST API: POST /v1/jobs, GET /v1/jobs/{id}, listing
//! (GET /v1/jobs), PUT, DELETE, pause, resume, GET /v1/jobs/{id}/next, and the
//! input limits. Against the real server in-process, on the real Postgres and
//! Redis. Each test gets its own database (`TestDb`), its own cluster name
//! (Redis key prefix) and its own server on an ephemeral port.

#[path = "support/lib.rs"]
mod support;

use chrono::{DateTime, Duration as TimeDelta, Timelike, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use support::*;

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

    // Pausing is state, not definition: a replace that would pause is
    // refused (422 naming `paused` and the route to use), nothing changes.
    let mut paused = v2.clone();
    paused["paused"] = json!(true);
    let r = app.put_json(&path, &paused, Some("\"4\"")).await;
    assert_invalid(&r, &["paused"]);
    assert_eq!(app.job(&id).await["paused"], json!(false));
    assert_eq!(app.job(&id).await["version"], json!(4));
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
            { "at": "2027-03-12T07:30:00.000Z", "local": "2027-03-12T02:30:00.000-05:00", "offset": "-05:00" },
            { "at": "2027-03-13T07:30:00.000Z", "local": "2027-03-13T02:30:00.000-05:00", "offset": "-05:00" },
            { "at": "2027-03-14T07:00:00.000Z", "local": "2027-03-14T03:00:00.000-04:00", "offset": "-04:00",
              "dst": "gap", "dst_shift": true },
            { "at": "2027-03-15T06:30:00.000Z", "local": "2027-03-15T02:30:00.000-04:00", "offset": "-04:00" },
            { "at": "2027-03-16T06:30:00.000Z", "local": "2027-03-16T02:30:00.000-04:00", "offset": "-04:00" },
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
    assert_eq!(body["fire_times"][1]["dst"], "overlap");
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

// ---------------------------------------------------------------------------
// Refusals at create time: internal addresses, reserved headers, the minimum
// interval, SQS attributes, the number of errors
// ---------------------------------------------------------------------------

/// The errors of a 422, as (field, message).
#[track_caller]
fn errors_of(r: &Resp) -> Vec<(String, String)> {
    let v = assert_problem(r, 422);
    v["errors"]
        .as_array()
        .unwrap_or_else(|| panic!("no errors array: {v}"))
        .iter()
        .map(|e| (e["field"].as_str().unwrap().to_owned(), e["message"].as_str().unwrap().to_owned()))
        .collect()
}

#[tokio::test]
async fn callback_and_queue_urls_naming_internal_addresses_are_422_naming_the_rule() {
    let app = TestApp::start("ssrf-create").await;
    let with_url = |url: &str| {
        let mut v = example_job();
        v["target"]["url"] = json!(url);
        v
    };
    let cases = [
        ("http://127.0.0.1:8080/hook", "127.0.0.1, a loopback address"),
        ("http://[::127.0.0.1]/hook", "which carries 127.0.0.1 (IPv4-compatible), a loopback address"),
        ("http://[::ffff:0:127.0.0.1]/hook", "which carries 127.0.0.1 (IPv4-translated), a loopback address"),
        ("http://[64:ff9b::169.254.169.254]/", "which carries 169.254.169.254 (NAT64), a cloud metadata address"),
        ("http://[2002:a9fe:a9fe::]/", "which carries 169.254.169.254 (6to4), a cloud metadata address"),
        ("http://[fec0::1]/", "fec0::1, a site-local address"),
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254, a cloud metadata address"),
        ("http://0x7f000001/", "127.0.0.1, a loopback address"),
    ];
    for (url, rule) in cases {
        let errors = errors_of(&app.post_json("/v1/jobs", &with_url(url)).await);
        assert_eq!(errors.len(), 1, "{url}: {errors:?}");
        let (field, message) = &errors[0];
        assert_eq!(field, "target.url", "{url}");
        assert!(message.contains(rule), "{url}: {message}");
        assert!(message.contains("refused unless the operator allows them with CALLBACK_ALLOW_CIDRS"), "{message}");
    }
    // A replacement is checked the same way.
    let id = app.create_id(&example_job()).await;
    let r = app.put_json(&format!("/v1/jobs/{id}"), &with_url("http://10.1.2.3/"), None).await;
    assert_invalid(&r, &["target.url"]);
    // An SQS queue URL too.
    let mut sqs = example_job();
    sqs["target"] = json!({ "kind": "sqs", "queue_url": "http://127.0.0.1:4566/000000000000/jobs" });
    let errors = errors_of(&app.post_json("/v1/jobs", &sqs).await);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "target.queue_url");
    assert!(errors[0].1.contains("127.0.0.1, a loopback address"), "{errors:?}");
    assert_eq!(app.job_rows().await, 1, "only the valid job is stored");
}

#[tokio::test]
async fn the_operators_allow_list_and_minimum_interval_apply_at_create() {
    let limits = domain::job::Limits {
        min_interval_ms: 5_000,
        allow_cidrs: domain::netguard::parse_allow_list("127.0.0.0/8").unwrap(),
    };
    let app = TestApp::start_with("limits-set", Options { job_limits: limits, ..Options::default() }).await;
    let mut loopback = example_job();
    loopback["target"]["url"] = json!("http://127.0.0.1:8080/hook");
    assert_eq!(app.post_json("/v1/jobs", &loopback).await.status, 201);
    loopback["target"]["url"] = json!("http://[::ffff:127.0.0.1]:8080/hook");
    assert_eq!(app.post_json("/v1/jobs", &loopback).await.status, 201);
    loopback["target"]["url"] = json!("http://192.168.0.10/hook");
    assert_invalid(&app.post_json("/v1/jobs", &loopback).await, &["target.url"]);

    let interval = |ms: u64| json!({ "name": "tick", "schedule": { "kind": "interval", "every_ms": ms }, "target": http_target() });
    let errors = errors_of(&app.post_json("/v1/jobs", &interval(4_999)).await);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "schedule.every_ms");
    assert!(errors[0].1.contains("5000"), "{errors:?}");
    assert_eq!(app.post_json("/v1/jobs", &interval(5_000)).await.status, 201);
    let cron = json!({ "name": "c", "schedule": { "kind": "cron", "expr": "*/2 * * * * *" }, "target": http_target() });
    let errors = errors_of(&app.post_json("/v1/jobs", &cron).await);
    assert_eq!(errors[0].0, "schedule.expr", "{errors:?}");
    assert!(errors[0].1.contains("every 2 s"), "{errors:?}");
}

#[tokio::test]
async fn intervals_below_the_default_minimum_are_422() {
    let app = TestApp::start("min-interval").await;
    let body = json!({ "name": "fast", "schedule": { "kind": "interval", "every_ms": 999 }, "target": http_target() });
    let errors = errors_of(&app.post_json("/v1/jobs", &body).await);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, "schedule.every_ms");
    assert!(errors[0].1.contains("1000"), "{errors:?}");
    let body = json!({ "name": "ok", "schedule": { "kind": "interval", "every_ms": 1000 }, "target": http_target() });
    assert_eq!(app.post_json("/v1/jobs", &body).await.status, 201);
}

#[tokio::test]
async fn reserved_and_malformed_headers_are_422_naming_the_header() {
    let app = TestApp::start("headers").await;
    let with_target = |edit: Value| {
        let mut v = example_job();
        for (k, val) in edit.as_object().unwrap() {
            v["target"][k] = val.clone();
        }
        v
    };
    let cases: Vec<(Value, &str)> = vec![
        (json!({ "headers": { "Host": "internal.example" } }), "target.headers.Host"),
        (json!({ "headers": { "X-Cronshard-Attempt": "7" } }), "target.headers.X-Cronshard-Attempt"),
        (json!({ "headers": { "transfer-encoding": "chunked" } }), "target.headers.transfer-encoding"),
        (json!({ "headers": { "Upgrade": "h2c" } }), "target.headers.Upgrade"),
        (json!({ "headers": { "x-a": "a\u{7f}b" } }), "target.headers.x-a"),
        (json!({ "headers": { "x-a": "a\u{b}b" } }), "target.headers.x-a"),
        (json!({ "headers": { "x-a": " padded" } }), "target.headers.x-a"),
        (
            json!({ "secret_headers": { "x-cronshard-execution-id": "1" } }),
            "target.secret_headers.x-cronshard-execution-id",
        ),
        (json!({ "secret_headers": { "Authorization": "Bearer a\r\nb" } }), "target.secret_headers.Authorization"),
        (
            json!({ "headers": { "X-Api-Key": "1" }, "secret_headers": { "x-api-key": "2" } }),
            "target.secret_headers.x-api-key",
        ),
    ];
    for (target, field) in &cases {
        let r = app.post_json("/v1/jobs", &with_target(target.clone())).await;
        assert_invalid(&r, &[field]);
        assert!(!r.text.contains("Bearer a"), "the 422 quotes a secret value: {}", r.text);
    }
    assert_eq!(app.job_rows().await, 0);
    let ok = with_target(json!({
        "secret_headers": { "Authorization": "Bearer s3cret" },
        "follow_redirects": true, "forward_headers_on_redirect": false,
    }));
    assert_eq!(app.post_json("/v1/jobs", &ok).await.status, 201);
}

#[tokio::test]
async fn sqs_message_attributes_are_422_as_sqs_would_refuse_them() {
    let app = TestApp::start("sqs-attrs").await;
    let with_attrs = |attrs: Value| {
        let mut v = example_job();
        v["target"] = json!({ "kind": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q",
                              "message_attributes": attrs });
        v
    };
    for (attrs, field) in [
        (json!({ "AWS.Trace": "1" }), "target.message_attributes.AWS.Trace"),
        (json!({ "a..b": "1" }), "target.message_attributes.a..b"),
        (json!({ "empty": "" }), "target.message_attributes.empty"),
        (json!({ "esc": "a\u{1b}b" }), "target.message_attributes.esc"),
        (json!({ "X-Cronshard-Attempt": "1" }), "target.message_attributes.X-Cronshard-Attempt"),
    ] {
        assert_invalid(&app.post_json("/v1/jobs", &with_attrs(attrs)).await, &[field]);
    }
    // SQS takes 10; cronshard adds 6 (X-Cronshard-* and webhook-*).
    let five = Value::Object((0..5).map(|i| (format!("a{i}"), json!("v"))).collect());
    assert_invalid(&app.post_json("/v1/jobs", &with_attrs(five)).await, &["target.message_attributes"]);
    let four = Value::Object((0..4).map(|i| (format!("a{i}"), json!("v"))).collect());
    assert_eq!(app.post_json("/v1/jobs", &with_attrs(four)).await.status, 201);
}

#[tokio::test]
async fn a_body_of_thousands_of_bad_fields_gets_a_bounded_422() {
    let app = TestApp::start("many-errors").await;
    let mut body = example_job();
    for i in 0..8_000 {
        body[format!("unknown-field-{i:05}")] = json!(1);
    }
    assert!(body.to_string().len() > 150 * 1024, "the body is large");
    let r = app.post_json("/v1/jobs", &body).await;
    let errors = errors_of(&r);
    assert_eq!(errors.len(), 50);
    assert!(errors[..49].iter().all(|(f, _)| f.starts_with("unknown-field-")), "{errors:?}");
    assert_eq!(errors[49].0, "");
    assert!(errors[49].1.starts_with("7951 more problems"), "{:?}", errors[49]);
    assert!(r.text.len() < 16 * 1024, "a {} byte answer", r.text.len());

    // Strings with NUL characters, refused before validation, are capped too.
    let nul = Value::Array((0..20_000).map(|_| json!("\u{0}")).collect());
    let r = app.post_json("/v1/jobs", &nul).await;
    assert_eq!(errors_of(&r).len(), 50);
    assert!(r.text.len() < 16 * 1024, "a {} byte answer", r.text.len());
}

/// A body of thousands of unknown keys (about 200 KB) once answered a
/// 4.5 MB 422 listing each; the list is capped, and says how many it left out.
#[tokio::test]
async fn a_body_of_many_unknown_keys_gets_a_short_422() {
    let app = TestApp::start("many-unknown-keys").await;
    let mut body = example_job();
    for i in 0..8_000 {
        body[format!("unknown_field_number_{i:05}")] = json!(1);
    }
    let r = app.post_json("/v1/jobs", &body).await;
    let problem = assert_problem(&r, 422);
    let errors = problem["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 50, "the list is capped");
    assert!(errors[49]["message"].as_str().unwrap().contains("more"), "{}", errors[49]);
    assert!(r.text.len() < 20_000, "the 422 is {} bytes", r.text.len());
    assert_eq!(app.job_rows().await, 0);
}
