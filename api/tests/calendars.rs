//! `/v1/calendars` and jobs that reference calendars, against the real
//! server on the real Postgres (own database per test).

#[path = "support/lib.rs"]
mod support;

use serde_json::{Value, json};

use support::*;

fn holidays() -> Value {
    json!({
        "timezone": "Europe/Berlin",
        "dates": ["2026-12-25", "2026-12-26"],
        "ranges": [{"from": "2026-12-30", "to": "2027-01-01"}],
        "rules": ["* * * * SAT,SUN"],
        "description": "Office closed",
    })
}

fn job_with_calendars(calendars: Value) -> Value {
    let mut job = cron_job("report", "0 8 * * *", "Europe/Berlin");
    job["calendars"] = calendars;
    job
}

#[tokio::test]
async fn a_calendar_is_created_replaced_read_listed_and_deleted() {
    let app = TestApp::start("calendars-crud").await;
    let r = app.put_json("/v1/calendars/holidays", &holidays(), None).await;
    assert_eq!(r.status, 201, "{}", r.text);
    let c = r.json();
    assert_eq!(
        (c["namespace"].as_str(), c["name"].as_str(), c["version"].as_i64()),
        (Some("default"), Some("holidays"), Some(1))
    );
    assert_eq!(c["dates"], json!(["2026-12-25", "2026-12-26"]));
    assert_eq!(c["rules"], json!(["* * * * SAT,SUN"]));

    let mut changed = holidays();
    changed["dates"] = json!(["2026-12-24"]);
    let r = app.put_json("/v1/calendars/holidays", &changed, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["version"], 2);
    assert_eq!(app.get("/v1/calendars/holidays").await.json()["dates"], json!(["2026-12-24"]));

    assert_eq!(
        app.put_json("/v1/calendars/weekends", &json!({"timezone": "UTC", "rules": ["* * * * SAT,SUN"]}), None)
            .await
            .status,
        201
    );
    let page = app.get("/v1/calendars?limit=1").await.json();
    assert_eq!(page["items"][0]["name"], "holidays");
    let cursor = page["next_cursor"].as_str().expect("a second page");
    let page = app.get(&format!("/v1/calendars?limit=1&cursor={}", enc(cursor))).await.json();
    assert_eq!(page["items"][0]["name"], "weekends");
    assert!(page.get("next_cursor").is_none(), "{page}");

    assert_eq!(app.delete("/v1/calendars/weekends").await.status, 204);
    assert_problem(&app.get("/v1/calendars/weekends").await, 404);
    assert_problem(&app.delete("/v1/calendars/weekends").await, 404);
}

#[tokio::test]
async fn bad_calendars_are_refused_naming_each_field_and_nothing_is_stored() {
    let app = TestApp::start("calendars-invalid").await;
    let bad = json!({
        "timezone": "Europe/Nowhere", "dates": ["2026-02-30"],
        "ranges": [{"from": "2026-05-02", "to": "2026-05-01"}], "rules": ["61 * * * *"], "color": "red",
    });
    let r = app.put_json("/v1/calendars/bad", &bad, None).await;
    let v = assert_problem(&r, 422);
    let fields: Vec<&str> = v["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    for f in ["color", "timezone", "dates[0]", "ranges[0].to", "rules[0]"] {
        assert!(fields.contains(&f), "{f} missing from {fields:?}");
    }
    assert_invalid(&app.put_json("/v1/calendars/Bad_Name", &holidays(), None).await, &["name"]);
    assert_problem(&app.get("/v1/calendars/bad").await, 404);
    assert_problem(&app.get("/v1/calendars?colour=red").await, 400);
}

#[tokio::test]
async fn jobs_reference_calendars_that_exist_and_a_referenced_calendar_cannot_be_deleted() {
    let app = TestApp::start("calendars-references").await;
    // Unknown calendars are named by position.
    let r = app.post_json("/v1/jobs", &job_with_calendars(json!(["holidays", "nope"]))).await;
    assert_invalid(&r, &["calendars[0]", "calendars[1]"]);
    assert_eq!(app.job_rows().await, 0, "a refused job must not be stored");
    assert_invalid(&app.post_json("/v1/jobs", &job_with_calendars(json!(["x", "x"]))).await, &["calendars[1]"]);
    assert_invalid(&app.post_json("/v1/jobs", &job_with_calendars(json!("holidays"))).await, &["calendars"]);

    assert_eq!(app.put_json("/v1/calendars/holidays", &holidays(), None).await.status, 201);
    let job = app.create_job(&job_with_calendars(json!(["holidays"]))).await;
    assert_eq!(job["calendars"], json!(["holidays"]));
    let id = job["id"].as_str().unwrap();

    let v = assert_problem(&app.delete("/v1/calendars/holidays").await, 409);
    assert!(v["detail"].as_str().unwrap().contains(id), "{v}");
    // Once no live job references it, it goes.
    let mut without = job_with_calendars(json!([]));
    without.as_object_mut().unwrap().remove("calendars");
    assert_eq!(app.put_json(&format!("/v1/jobs/{id}"), &without, None).await.status, 200);
    assert_eq!(app.delete("/v1/calendars/holidays").await.status, 204);
    // And a change that names it again is refused.
    assert_invalid(
        &app.put_json(&format!("/v1/jobs/{id}"), &job_with_calendars(json!(["holidays"])), None).await,
        &["calendars[0]"],
    );
}

#[tokio::test]
async fn preview_and_next_mark_the_slots_a_calendar_excludes() {
    let app = TestApp::start("calendars-preview").await;
    assert_eq!(app.put_json("/v1/calendars/holidays", &holidays(), None).await.status, 201);
    let schedule = json!({ "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin" });
    let r = app
        .post_json(
            "/v1/schedules/preview",
            &json!({ "schedule": schedule, "from": "2026-12-24T00:00:00Z", "count": 9, "calendars": ["holidays"] }),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let marks: Vec<(String, Option<String>)> = r.json()["fire_times"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["local"].as_str().unwrap()[..10].to_owned(), f["excluded_by"].as_str().map(str::to_owned)))
        .collect();
    // 25th, 26th (dates; the 26th is also a Saturday), 27th (Sunday), 30th-1st (range).
    let excluded =
        |d: &str| ["2026-12-25", "2026-12-26", "2026-12-27", "2026-12-30", "2026-12-31", "2027-01-01"].contains(&d);
    for (day, by) in &marks {
        assert_eq!(by.as_deref(), excluded(day).then_some("holidays"), "{day}");
    }
    assert_eq!(marks.len(), 9);
    // An unknown calendar names its position.
    let r = app.post_json("/v1/schedules/preview", &json!({ "schedule": schedule, "calendars": ["nope"] })).await;
    assert_invalid(&r, &["calendars[0]"]);

    // A job's next fire times carry the same marks.
    let job = app.create_job(&job_with_calendars(json!(["holidays"]))).await;
    let next = app
        .get(&format!("/v1/jobs/{}/next?count=3&from=2026-12-25T00:00:00Z", job["id"].as_str().unwrap()))
        .await
        .json();
    let by: Vec<Option<&str>> =
        next["fire_times"].as_array().unwrap().iter().map(|f| f["excluded_by"].as_str()).collect();
    assert_eq!(by, [Some("holidays"), Some("holidays"), Some("holidays")], "{next}");
}
