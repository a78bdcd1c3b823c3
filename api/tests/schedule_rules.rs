//! A cron schedule's DST rule (`schedule.dst`), several expressions
//! (`schedule.exprs`) and the day forms `L`, `L-n`, `nW`, `LW`, `nL` and
//! `n#k`, through the real API: previews and `next` list the fire times
//! with their wall times and DST marks, jobs store what they were given, and
//! a bad rule or list is a 422 naming the field. Against the real server
//! in-process on the real Postgres and Redis.

#[path = "support/lib.rs"]
mod support;

use serde_json::{Value, json};
use support::*;

fn cron(expr: &str, timezone: &str, dst: Value) -> Value {
    json!({ "kind": "cron", "expr": expr, "timezone": timezone, "dst": dst })
}

async fn preview(app: &TestApp, schedule: Value, from: &str, count: u32) -> Value {
    let body = json!({ "schedule": schedule, "from": from, "count": count });
    let r = app.post_json("/v1/schedules/preview", &body).await;
    assert_eq!(r.status, 200, "{body}: {}", r.text);
    r.json()["fire_times"].clone()
}

/// (at, local, dst mark) of each fire time.
fn listed(fires: &Value) -> Vec<(String, String, Option<String>)> {
    fires
        .as_array()
        .unwrap_or_else(|| panic!("no fire times: {fires}"))
        .iter()
        .map(|f| {
            let text = |k: &str| f[k].as_str().map(str::to_owned);
            (text("at").unwrap(), text("local").unwrap_or_default(), text("dst"))
        })
        .collect()
}

fn row(at: &str, local: &str, dst: Option<&str>) -> (String, String, Option<String>) {
    (at.to_owned(), local.to_owned(), dst.map(str::to_owned))
}

#[tokio::test]
async fn each_dst_rule_previews_berlins_transitions_with_its_marks() {
    let app = TestApp::start("rules-preview").await;
    // 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00Z; 02:30 happens at
    // 00:30Z and at 01:30Z.
    let fall = |repeated: &str| cron("30 2 * * *", "Europe/Berlin", json!({ "repeated": repeated }));
    let first = preview(&app, fall("first"), "2026-10-25T00:00:00Z", 2).await;
    assert_eq!(
        listed(&first),
        [
            row("2026-10-25T00:30:00.000Z", "2026-10-25T02:30:00.000+02:00", Some("overlap")),
            row("2026-10-26T01:30:00.000Z", "2026-10-26T02:30:00.000+01:00", None),
        ]
    );
    let last = preview(&app, fall("last"), "2026-10-25T00:00:00Z", 2).await;
    assert_eq!(
        listed(&last),
        [
            row("2026-10-25T01:30:00.000Z", "2026-10-25T02:30:00.000+01:00", Some("overlap")),
            row("2026-10-26T01:30:00.000Z", "2026-10-26T02:30:00.000+01:00", None),
        ]
    );
    // `both`: the slot pair is two fire times, one per occurrence.
    let both = preview(&app, fall("both"), "2026-10-25T00:00:00Z", 3).await;
    assert_eq!(
        both,
        json!([
            { "at": "2026-10-25T00:30:00.000Z", "local": "2026-10-25T02:30:00.000+02:00", "offset": "+02:00", "dst": "overlap" },
            { "at": "2026-10-25T01:30:00.000Z", "local": "2026-10-25T02:30:00.000+01:00", "offset": "+01:00", "dst": "overlap" },
            { "at": "2026-10-26T01:30:00.000Z", "local": "2026-10-26T02:30:00.000+01:00", "offset": "+01:00" },
        ])
    );
    // Every half hour of the repeated hour, both passes, in order of the instants.
    let half_hours = cron("*/30 2 * * *", "Europe/Berlin", json!({ "repeated": "both" }));
    let both = preview(&app, half_hours, "2026-10-25T00:00:00Z", 4).await;
    assert_eq!(
        listed(&both),
        [
            row("2026-10-25T00:00:00.000Z", "2026-10-25T02:00:00.000+02:00", Some("overlap")),
            row("2026-10-25T00:30:00.000Z", "2026-10-25T02:30:00.000+02:00", Some("overlap")),
            row("2026-10-25T01:00:00.000Z", "2026-10-25T02:00:00.000+01:00", Some("overlap")),
            row("2026-10-25T01:30:00.000Z", "2026-10-25T02:30:00.000+01:00", Some("overlap")),
        ]
    );
    assert_eq!(both[2]["dst_shift"], true, "the clocks go back at that very instant: {both}");

    // 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00Z; 02:30 does not exist.
    let spring = |missing: &str| cron("30 2 * * *", "Europe/Berlin", json!({ "missing": missing }));
    let shift = preview(&app, spring("shift"), "2026-03-28T00:00:00Z", 3).await;
    assert_eq!(
        listed(&shift),
        [
            row("2026-03-28T01:30:00.000Z", "2026-03-28T02:30:00.000+01:00", None),
            row("2026-03-29T01:00:00.000Z", "2026-03-29T03:00:00.000+02:00", Some("gap")),
            row("2026-03-30T00:30:00.000Z", "2026-03-30T02:30:00.000+02:00", None),
        ]
    );
    let skip = preview(&app, spring("skip"), "2026-03-28T00:00:00Z", 2).await;
    assert_eq!(
        listed(&skip),
        [
            row("2026-03-28T01:30:00.000Z", "2026-03-28T02:30:00.000+01:00", None),
            row("2026-03-30T00:30:00.000Z", "2026-03-30T02:30:00.000+02:00", None),
        ]
    );
    // Under `skip`, 03:00 CEST still fires at the transition instant: it
    // exists; it is not marked as moved.
    let three = cron("0 2,3 * * *", "Europe/Berlin", json!({ "missing": "skip" }));
    let fires = preview(&app, three, "2026-03-29T00:00:00Z", 1).await;
    assert_eq!(
        fires,
        json!([{ "at": "2026-03-29T01:00:00.000Z", "local": "2026-03-29T03:00:00.000+02:00", "offset": "+02:00", "dst_shift": true }])
    );
}

#[tokio::test]
async fn a_jobs_rule_is_stored_shown_changed_and_followed_by_next() {
    let app = TestApp::start("rules-job").await;
    let mut job = cron_job("ny-0130", "30 1 * * *", "America/New_York");
    // Without a rule the schedule reads back as before rules existed.
    let plain = app.create_job(&job).await;
    assert_eq!(plain["schedule"], json!({ "kind": "cron", "expr": "30 1 * * *", "timezone": "America/New_York" }));

    job["schedule"]["dst"] = json!({ "repeated": "both" });
    let id = app.create_id(&job).await;
    assert_eq!(app.job(&id).await["schedule"]["dst"], json!({ "repeated": "both", "missing": "shift" }));
    // 2026-11-01: 02:00 EDT becomes 01:00 EST at 06:00Z; 01:30 happens twice.
    let next = |from: &'static str| {
        let app = &app;
        let id = id.clone();
        async move {
            let r = app.get(&format!("/v1/jobs/{id}/next?count=3&from={}", enc(from))).await;
            assert_eq!(r.status, 200, "{}", r.text);
            listed(&r.json()["fire_times"])
        }
    };
    assert_eq!(
        next("2026-11-01T00:00:00Z").await,
        [
            row("2026-11-01T05:30:00.000Z", "2026-11-01T01:30:00.000-04:00", Some("overlap")),
            row("2026-11-01T06:30:00.000Z", "2026-11-01T01:30:00.000-05:00", Some("overlap")),
            row("2026-11-02T06:30:00.000Z", "2026-11-02T01:30:00.000-05:00", None),
        ]
    );

    // A merge patch changes one member of the rule and keeps the other.
    let patch = |body: Value| {
        let rb = app
            .http
            .patch(app.url(&format!("/v1/jobs/{id}")))
            .header("content-type", "application/merge-patch+json")
            .body(body.to_string());
        app.send(rb)
    };
    let r = patch(json!({ "schedule": { "dst": { "repeated": "last" } } })).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["schedule"]["dst"], json!({ "repeated": "last", "missing": "shift" }));
    assert_eq!(next("2026-11-01T00:00:00Z").await[0].0, "2026-11-01T06:30:00.000Z");
    // The default rule, spelled out, is the rule a job without one has.
    let r = patch(json!({ "schedule": { "dst": { "repeated": "first" } } })).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json()["schedule"].get("dst").is_none(), "{}", r.text);
    assert_eq!(next("2026-11-01T00:00:00Z").await[0].0, "2026-11-01T05:30:00.000Z");

    // Spring forward, 2027-03-14: 02:30 does not exist; `skip` leaves the day out.
    let r = patch(json!({ "schedule": { "expr": "30 2 * * *", "dst": { "missing": "skip" } } })).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let days: Vec<String> = next("2027-03-13T00:00:00Z").await.into_iter().map(|(at, ..)| at).collect();
    assert_eq!(days, ["2027-03-13T07:30:00.000Z", "2027-03-15T06:30:00.000Z", "2027-03-16T06:30:00.000Z"]);

    // Explain states the rule with the schedule.
    let r = app.get(&format!("/v1/jobs/{id}/executions/2027-03-14T07:00:00.000Z")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let summary = r.json()["explanation"]["summary"].as_str().unwrap_or_default().to_owned();
    assert!(summary.contains("not a fire time"), "{summary}");
    assert!(summary.contains("a skipped wall time does not fire"), "{summary}");
}

#[tokio::test]
async fn several_expressions_and_month_relative_days_fire_their_slots_through_next_and_preview() {
    let app = TestApp::start("rules-exprs").await;
    // Weekdays at 09:00, weekends at 11:00, Berlin (CET in December).
    let schedule =
        json!({ "kind": "cron", "exprs": ["0 9 * * MON-FRI", "0 11 * * SAT,SUN"], "timezone": "Europe/Berlin" });
    let job = json!({ "name": "two-specs", "schedule": schedule, "target": http_target() });
    let created = app.create_job(&job).await;
    assert_eq!(created["schedule"], schedule, "stored as given");
    let id = created["id"].as_str().unwrap();
    let want = [
        "2026-12-11T08:00:00.000Z", // Friday 09:00
        "2026-12-12T10:00:00.000Z", // Saturday 11:00
        "2026-12-13T10:00:00.000Z", // Sunday 11:00
        "2026-12-14T08:00:00.000Z", // Monday 09:00
    ];
    let r = app.get(&format!("/v1/jobs/{id}/next?count=4&from={}", enc("2026-12-11T00:00:00Z"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let at = |fires: &Value| -> Vec<String> { listed(fires).into_iter().map(|(at, ..)| at).collect() };
    assert_eq!(at(&r.json()["fire_times"]), want);
    assert_eq!(at(&preview(&app, schedule.clone(), "2026-12-11T00:00:00Z", 4).await), want);

    // Coinciding expressions fire once: every 20 and every 30 minutes.
    let overlapping = json!({ "kind": "cron", "exprs": ["*/20 * * * *", "*/30 * * * *"] });
    let fires = preview(&app, overlapping, "2026-12-11T00:00:00Z", 5).await;
    assert_eq!(
        at(&fires),
        [
            "2026-12-11T00:00:00.000Z",
            "2026-12-11T00:20:00.000Z",
            "2026-12-11T00:30:00.000Z",
            "2026-12-11T00:40:00.000Z",
            "2026-12-11T01:00:00.000Z"
        ]
    );

    // A calendar still excludes what it names.
    let r = app
        .put_json("/v1/calendars/weekends", &json!({ "timezone": "Europe/Berlin", "rules": ["* * * * SAT,SUN"] }), None)
        .await;
    assert!(r.status == 200 || r.status == 201, "{}", r.text);
    let mut with_calendar = job.clone();
    with_calendar["calendars"] = json!(["weekends"]);
    let cal_id = app.create_id(&with_calendar).await;
    let r = app.get(&format!("/v1/jobs/{cal_id}/next?count=3&from={}", enc("2026-12-11T00:00:00Z"))).await;
    let fires = r.json()["fire_times"].clone();
    let excluded: Vec<Option<&str>> = fires.as_array().unwrap().iter().map(|f| f["excluded_by"].as_str()).collect();
    assert_eq!(excluded, [None, Some("weekends"), Some("weekends")], "{}", r.text);

    // The last day of the month at 18:00, and the second Tuesday at 09:00 (UTC).
    let last_day = app.create_id(&cron_job("month-end", "0 18 L * *", "UTC")).await;
    let r = app.get(&format!("/v1/jobs/{last_day}/next?count=3&from={}", enc("2027-01-01T00:00:00Z"))).await;
    assert_eq!(
        at(&r.json()["fire_times"]),
        ["2027-01-31T18:00:00.000Z", "2027-02-28T18:00:00.000Z", "2027-03-31T18:00:00.000Z"]
    );
    let second_tuesday = app.create_id(&cron_job("patch-tuesday", "0 9 * * 2#2", "UTC")).await;
    let r = app.get(&format!("/v1/jobs/{second_tuesday}/next?count=3&from={}", enc("2027-01-01T00:00:00Z"))).await;
    assert_eq!(
        at(&r.json()["fire_times"]),
        ["2027-01-12T09:00:00.000Z", "2027-02-09T09:00:00.000Z", "2027-03-09T09:00:00.000Z"]
    );
    // Previews of the other forms: the last Friday, the last weekday, the
    // weekday nearest the 15th, two days before the last.
    let utc = |expr: &str| json!({ "kind": "cron", "expr": expr });
    assert_eq!(
        at(&preview(&app, utc("0 9 * * 5L"), "2027-01-01T00:00:00Z", 2).await),
        ["2027-01-29T09:00:00.000Z", "2027-02-26T09:00:00.000Z"]
    );
    // 31 January and 28 February 2027 are Sundays.
    assert_eq!(
        at(&preview(&app, utc("0 9 LW * *"), "2027-01-01T00:00:00Z", 2).await),
        ["2027-01-29T09:00:00.000Z", "2027-02-26T09:00:00.000Z"]
    );
    // 15 May 2027 is a Saturday, 15 August a Sunday.
    assert_eq!(
        at(&preview(&app, utc("0 9 15W 5,8 *"), "2027-01-01T00:00:00Z", 2).await),
        ["2027-05-14T09:00:00.000Z", "2027-08-16T09:00:00.000Z"]
    );
    assert_eq!(
        at(&preview(&app, utc("0 9 L-2 * *"), "2027-01-01T00:00:00Z", 2).await),
        ["2027-01-29T09:00:00.000Z", "2027-02-26T09:00:00.000Z"]
    );
}

#[tokio::test]
async fn a_bad_rule_or_list_is_a_422_naming_the_field_and_why() {
    let app = TestApp::start("rules-invalid").await;
    let cases: &[(Value, &[&str], &str)] = &[
        (
            json!({ "kind": "interval", "every_ms": 60_000, "dst": { "repeated": "last" } }),
            &["schedule.dst"],
            "cron schedules only",
        ),
        (json!({ "kind": "once", "at": "2030-01-01T00:00:00Z", "dst": {} }), &["schedule.dst"], "cron schedules only"),
        (cron("0 2 * * *", "UTC", json!({ "repeated": "twice" })), &["schedule.dst.repeated"], "first, last, both"),
        (cron("0 2 * * *", "UTC", json!({ "missing": "never" })), &["schedule.dst.missing"], "skip, shift"),
        (json!({ "kind": "cron", "expr": "0 2 * * *", "exprs": ["0 3 * * *"] }), &["schedule.exprs"], "not both"),
        (json!({ "kind": "cron", "exprs": [] }), &["schedule.exprs"], "1 to 20"),
        (
            json!({ "kind": "cron", "exprs": ["0 2 * * *", "0 2 L-40 * *"] }),
            &["schedule.exprs[1]"],
            "L-n takes n from 1 to 30",
        ),
        (json!({ "kind": "cron", "expr": "0 9 * * 2#6" }), &["schedule.expr"], "n#k takes k from 1 to 5"),
        (json!({ "kind": "cron", "expr": "0 9 * * L" }), &["schedule.expr"], "L alone is not a day"),
    ];
    for (schedule, fields, says) in cases {
        let job = json!({ "name": "bad", "schedule": schedule, "target": http_target() });
        let r = app.post_json("/v1/jobs", &job).await;
        assert_invalid(&r, fields);
        assert!(r.text.contains(says), "{schedule}: {}", r.text);
        let r = app.post_json("/v1/schedules/preview", &json!({ "schedule": schedule })).await;
        assert_invalid(&r, fields);
    }
}
