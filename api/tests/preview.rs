//! Fire-time previews: `POST /v1/schedules/preview` at Berlin's DST
//! transitions of 2026 (spring forward on 29 March, fall back on 25
//! October) with exact instants, jitter, validation, and `from` on
//! `GET /v1/jobs/{id}/next`. Against the real server in-process on the real
//! Postgres and Redis (own database, cluster name and server per test).

#[path = "support/lib.rs"]
mod support;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use support::*;
use uuid::Uuid;

fn berlin(expr: &str) -> Value {
    json!({ "kind": "cron", "expr": expr, "timezone": "Europe/Berlin" })
}

async fn preview(app: &TestApp, body: Value) -> Value {
    let r = app.post_json("/v1/schedules/preview", &body).await;
    assert_eq!(r.status, 200, "{body}: {}", r.text);
    r.json()
}

#[tokio::test]
async fn the_spring_forward_gap_fires_at_its_end_and_is_marked() {
    let app = TestApp::start("preview-gap").await;
    // 2026-03-29 02:00 CET becomes 03:00 CEST (01:00Z): 02:30 does not
    // exist that day and fires at the end of the gap.
    let body =
        preview(&app, json!({ "schedule": berlin("30 2 * * *"), "from": "2026-03-28T00:00:00Z", "count": 3 })).await;
    assert_eq!(
        body,
        json!({
            "from": "2026-03-28T00:00:00.000Z",
            "fire_times": [
                { "at": "2026-03-28T01:30:00.000Z", "local": "2026-03-28T02:30:00.000+01:00", "offset": "+01:00" },
                { "at": "2026-03-29T01:00:00.000Z", "local": "2026-03-29T03:00:00.000+02:00", "offset": "+02:00",
                  "dst": "gap", "dst_shift": true },
                { "at": "2026-03-30T00:30:00.000Z", "local": "2026-03-30T02:30:00.000+02:00", "offset": "+02:00" },
            ]
        })
    );
    // Every 20 minutes across the gap: 02:00, 02:20 and 02:40 fall in it
    // and, with 03:00 itself, become one fire at 03:00 CEST.
    let body =
        preview(&app, json!({ "schedule": berlin("*/20 * * * *"), "from": "2026-03-29T00:20:00Z", "count": 4 })).await;
    let got: Vec<(&str, &str, Option<&str>)> = body["fire_times"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["at"].as_str().unwrap(), f["local"].as_str().unwrap(), f["dst"].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("2026-03-29T00:20:00.000Z", "2026-03-29T01:20:00.000+01:00", None),
            ("2026-03-29T00:40:00.000Z", "2026-03-29T01:40:00.000+01:00", None),
            ("2026-03-29T01:00:00.000Z", "2026-03-29T03:00:00.000+02:00", Some("gap")),
            ("2026-03-29T01:20:00.000Z", "2026-03-29T03:20:00.000+02:00", None),
        ]
    );
    // 03:00 itself exists: the transition instant, not a moved fire.
    let body =
        preview(&app, json!({ "schedule": berlin("0 3 * * *"), "from": "2026-03-29T00:00:00Z", "count": 1 })).await;
    assert_eq!(
        body["fire_times"],
        json!([{ "at": "2026-03-29T01:00:00.000Z", "local": "2026-03-29T03:00:00.000+02:00", "offset": "+02:00", "dst_shift": true }])
    );
}

#[tokio::test]
async fn the_fall_back_overlap_fires_at_the_first_occurrence_only() {
    let app = TestApp::start("preview-overlap").await;
    // 2026-10-25 03:00 CEST becomes 02:00 CET (01:00Z): 02:00-03:00 happens
    // twice and 02:30 fires once, in summer time.
    let body =
        preview(&app, json!({ "schedule": berlin("30 2 * * *"), "from": "2026-10-24T00:00:00Z", "count": 3 })).await;
    assert_eq!(
        body["fire_times"],
        json!([
            { "at": "2026-10-24T00:30:00.000Z", "local": "2026-10-24T02:30:00.000+02:00", "offset": "+02:00" },
            { "at": "2026-10-25T00:30:00.000Z", "local": "2026-10-25T02:30:00.000+02:00", "offset": "+02:00", "dst": "overlap" },
            { "at": "2026-10-26T01:30:00.000Z", "local": "2026-10-26T02:30:00.000+01:00", "offset": "+01:00" },
        ])
    );
    // Every 30 minutes: the repeated hour (01:00Z-02:00Z, 02:00-02:59 CET)
    // has no fire; the next is 03:00 CET.
    let body =
        preview(&app, json!({ "schedule": berlin("*/30 * * * *"), "from": "2026-10-24T23:30:00Z", "count": 5 })).await;
    let got: Vec<(&str, &str, Option<&str>)> = body["fire_times"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["at"].as_str().unwrap(), f["local"].as_str().unwrap(), f["dst"].as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("2026-10-24T23:30:00.000Z", "2026-10-25T01:30:00.000+02:00", None),
            ("2026-10-25T00:00:00.000Z", "2026-10-25T02:00:00.000+02:00", Some("overlap")),
            ("2026-10-25T00:30:00.000Z", "2026-10-25T02:30:00.000+02:00", Some("overlap")),
            ("2026-10-25T02:00:00.000Z", "2026-10-25T03:00:00.000+01:00", None),
            ("2026-10-25T02:30:00.000Z", "2026-10-25T03:30:00.000+01:00", None),
        ]
    );
}

#[tokio::test]
async fn a_preview_shows_jitter_interval_anchors_and_max_runs() {
    let app = TestApp::start("preview-misc").await;
    let from: DateTime<Utc> = "2026-06-01T12:00:00Z".parse().unwrap();
    // An interval without start_at is anchored at `from`, as a job created then.
    let body =
        preview(&app, json!({ "schedule": { "kind": "interval", "every_ms": 90_000 }, "from": ts(from), "count": 3 }))
            .await;
    assert_eq!(
        body["fire_times"],
        json!([{ "at": "2026-06-01T12:00:00.000Z" }, { "at": "2026-06-01T12:01:30.000Z" }, { "at": "2026-06-01T12:03:00.000Z" }])
    );
    // With a job id, each slot shows its delivery instant.
    let job_id = Uuid::now_v7();
    let body = preview(
        &app,
        json!({ "schedule": berlin("0 * * * *"), "from": ts(from), "count": 5, "jitter_ms": 600_000, "job_id": job_id }),
    )
    .await;
    assert!(body.get("note").is_none(), "{body}");
    for f in body["fire_times"].as_array().unwrap() {
        let at = parse_ts(&f["at"]);
        let expected = at + domain::schedule::jitter_offset(job_id, at, 600_000);
        assert_eq!(parse_ts(&f["fires_at"]), expected, "{f}");
    }
    // Without one, the note says what is missing.
    let body = preview(&app, json!({ "schedule": berlin("0 * * * *"), "jitter_ms": 600_000, "count": 2 })).await;
    assert!(body["note"].as_str().unwrap().contains("job_id"), "{body}");
    assert!(body["fire_times"][0].get("fires_at").is_none(), "{body}");
    // Default from is now, and the count is capped by max_runs.
    let before = Utc::now();
    let body = preview(&app, json!({ "schedule": { "kind": "cron", "expr": "* * * * *", "max_runs": 2 } })).await;
    assert_eq!(body["fire_times"].as_array().unwrap().len(), 2, "{body}");
    assert!(parse_ts(&body["from"]) >= before - chrono::Duration::milliseconds(1), "{body}");
}

#[tokio::test]
async fn a_bad_preview_is_a_422_naming_each_field() {
    let app = TestApp::start("preview-bad").await;
    let cases: [(Value, &[&str]); 7] = [
        (json!({}), &["schedule"]),
        (json!({ "schedule": berlin("0 25 * * *") }), &["schedule.expr"]),
        (json!({ "schedule": { "kind": "interval", "every_ms": 10 } }), &["schedule.every_ms"]),
        (json!({ "schedule": berlin("0 * * * *"), "count": 1001, "from": "soon" }), &["from", "count"]),
        (json!({ "schedule": { "kind": "interval", "every_ms": 60_000 }, "jitter_ms": 60_000 }), &["jitter_ms"]),
        // A calendar that does not exist is named by its position.
        (json!({ "schedule": berlin("0 * * * *"), "calendars": ["holidays"] }), &["calendars[0]"]),
        (json!({ "schedule": berlin("0 * * * *"), "calendars": "holidays" }), &["calendars"]),
    ];
    for (body, fields) in cases {
        assert_invalid(&app.post_json("/v1/schedules/preview", &body).await, fields);
    }
}

#[tokio::test]
async fn next_takes_from_and_shows_the_jobs_jitter() {
    let app = TestApp::start("next-from").await;
    let mut job = cron_job("berlin-0230", "30 2 * * *", "Europe/Berlin");
    job["jitter_ms"] = json!(120_000);
    let id = app.create_id(&job).await;
    let r = app.get(&format!("/v1/jobs/{id}/next?count=2&from={}", enc("2026-10-25T00:30:00Z"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let body = r.json();
    let at: Vec<DateTime<Utc>> = body["fire_times"].as_array().unwrap().iter().map(|f| parse_ts(&f["at"])).collect();
    // `from` is inclusive: the overlap fire at exactly that instant is listed.
    let expected: Vec<DateTime<Utc>> =
        ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"].iter().map(|t| t.parse().unwrap()).collect();
    assert_eq!(at, expected, "{body}");
    assert_eq!(body["fire_times"][0]["dst"], "overlap");
    let uuid = Uuid::parse_str(&id).unwrap();
    for f in body["fire_times"].as_array().unwrap() {
        let at = parse_ts(&f["at"]);
        assert_eq!(parse_ts(&f["fires_at"]), at + domain::schedule::jitter_offset(uuid, at, 120_000), "{f}");
    }
    assert_invalid(&app.get(&format!("/v1/jobs/{id}/next?from=tomorrow")).await, &["from"]);
}
