//! Namespaces, scoped tokens, roles and quotas, against the real server
//! in-process on the real Postgres and Redis (own database, cluster name and
//! server per test). The server runs with a bootstrap admin token, as in
//! production.

#[path = "support/lib.rs"]
mod support;

use chrono::{DateTime, Duration as TimeDelta, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use support::*;
use uuid::Uuid;

const BOOTSTRAP: &str = "bootstrap-admin-token-for-tests";

async fn app(label: &str) -> TestApp {
    TestApp::start_with(label, Options { tokens: vec![BOOTSTRAP.to_owned()], ..Default::default() }).await
}

async fn call(app: &TestApp, token: &str, method: Method, path: &str, body: Option<&Value>) -> Resp {
    let mut rb = app.http.request(method, app.url(path)).bearer_auth(token);
    if let Some(body) = body {
        rb = rb.json(body);
    }
    app.send(rb).await
}

async fn namespace(app: &TestApp, body: Value) {
    let r = call(app, BOOTSTRAP, Method::POST, "/v1/namespaces", Some(&body)).await;
    assert_eq!(r.status, 201, "{}", r.text);
}

/// Makes a token as `maker`; returns the token.
async fn token(app: &TestApp, maker: &str, role: &str, namespaces: &[&str]) -> String {
    let body = json!({ "name": format!("{role} of {namespaces:?}"), "role": role, "namespaces": namespaces });
    let r = call(app, maker, Method::POST, "/v1/tokens", Some(&body)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()["token"].as_str().unwrap().to_owned()
}

fn interval_job(name: &str, every_ms: u64) -> Value {
    json!({ "name": name, "schedule": { "kind": "interval", "every_ms": every_ms }, "target": http_target() })
}

async fn create(app: &TestApp, token: &str, body: &Value) -> String {
    let r = call(app, token, Method::POST, "/v1/jobs", Some(body)).await;
    assert_eq!(r.status, 201, "{}", r.text);
    r.json()["id"].as_str().unwrap().to_owned()
}

/// A failed ledger row of `job` at `at` (replayable).
async fn failed_row(app: &TestApp, job: &str, at: DateTime<Utc>) {
    let id = Uuid::parse_str(job).unwrap();
    app.sql()
        .await
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, job_version)
             VALUES ($1, $2, $3, $4, 'failed', 3, 1)",
            &[&id, &at, &Uuid::now_v7(), &format!("{job}@{}", ts(at))],
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn two_namespaces_see_and_touch_nothing_of_each_other_on_any_route() {
    let app = app("tenancy-isolation").await;
    namespace(&app, json!({ "name": "team-a" })).await;
    namespace(&app, json!({ "name": "team-b" })).await;
    let ta = token(&app, BOOTSTRAP, "write", &["team-a"]).await;
    let tb = token(&app, BOOTSTRAP, "write", &["team-b"]).await;
    let job_a = create(&app, &ta, &interval_job("a", 60_000)).await;
    let mut body_b = interval_job("b", 60_000);
    body_b["namespace"] = json!("team-b");
    let job_b = create(&app, &tb, &body_b).await;
    assert_eq!(call(&app, &tb, Method::GET, &format!("/v1/jobs/{job_b}"), None).await.json()["namespace"], "team-b");
    let at = now_ms() - TimeDelta::minutes(5);
    failed_row(&app, &job_a, at).await;
    failed_row(&app, &job_b, at).await;

    // Every route that names team-b's job answers team-a's token 404, as if
    // it did not exist, and changes nothing.
    let slot = enc(&ts(at));
    let routes: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/jobs/{job_b}"), None),
        (Method::PUT, format!("/v1/jobs/{job_b}"), Some(interval_job("taken", 1_000))),
        (Method::POST, format!("/v1/jobs/{job_b}/pause"), None),
        (Method::POST, format!("/v1/jobs/{job_b}/resume"), None),
        (Method::GET, format!("/v1/jobs/{job_b}/next"), None),
        (Method::POST, format!("/v1/jobs/{job_b}/trigger"), None),
        (Method::GET, format!("/v1/jobs/{job_b}/executions"), None),
        (Method::GET, format!("/v1/jobs/{job_b}/executions/{slot}"), None),
        (Method::POST, format!("/v1/executions/{job_b}/{slot}/replay"), None),
        (Method::DELETE, format!("/v1/jobs/{job_b}"), None),
        (Method::GET, "/v1/namespaces/team-b".to_owned(), None),
    ];
    for (method, path, body) in &routes {
        let r = call(&app, &ta, method.clone(), path, body.as_ref()).await;
        assert_eq!(r.status, 404, "{method} {path} with team-a's token: {}", r.text);
        assert!(!r.text.contains("team-b\""), "a 404 says nothing of the other namespace: {}", r.text);
    }
    // Lists hold only the caller's own.
    let jobs = call(&app, &ta, Method::GET, "/v1/jobs", None).await.json();
    assert_eq!(ids_of(&jobs), std::slice::from_ref(&job_a));
    let filtered = call(&app, &ta, Method::GET, "/v1/jobs?namespace=team-b", None).await.json();
    assert!(ids_of(&filtered).is_empty());
    let executions = call(&app, &ta, Method::GET, "/v1/executions", None).await.json();
    let jobs_seen: Vec<&str> =
        executions["items"].as_array().unwrap().iter().map(|e| e["job_id"].as_str().unwrap()).collect();
    assert_eq!(jobs_seen, [job_a.as_str()]);
    let by_job = call(&app, &ta, Method::GET, &format!("/v1/executions?job_id={job_b}"), None).await.json();
    assert!(by_job["items"].as_array().unwrap().is_empty());
    let namespaces = call(&app, &ta, Method::GET, "/v1/namespaces", None).await.json();
    let names: Vec<&str> =
        namespaces["items"].as_array().unwrap().iter().map(|n| n["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["team-a"]);
    // A bulk replay takes only the caller's rows.
    let replayed = call(&app, &ta, Method::POST, "/v1/executions/replay", Some(&json!({}))).await;
    assert_eq!(replayed.status, 202, "{}", replayed.text);
    assert_eq!(replayed.json()["replayed"], 1);
    let b_rows = call(&app, &tb, Method::GET, &format!("/v1/jobs/{job_b}/executions"), None).await.json();
    assert_eq!(b_rows["items"][0]["status"], "failed", "team-b's row was not replayed by team-a");
    // A job cannot be made in, or moved to, a namespace the token does not act in.
    let mut elsewhere = interval_job("sneaky", 60_000);
    elsewhere["namespace"] = json!("team-b");
    assert_invalid(&call(&app, &ta, Method::POST, "/v1/jobs", Some(&elsewhere)).await, &["namespace"]);
    let moved = call(&app, &ta, Method::PUT, &format!("/v1/jobs/{job_a}"), Some(&elsewhere)).await;
    assert_invalid(&moved, &["namespace"]);
    // Team-b's job is as it was; team-a's token still works on its own.
    let b = call(&app, &tb, Method::GET, &format!("/v1/jobs/{job_b}"), None).await;
    assert_eq!((b.status, b.json()["version"].clone(), b.json()["name"].clone()), (200, json!(1), json!("b")));
    assert_eq!(call(&app, &ta, Method::POST, &format!("/v1/jobs/{job_a}/pause"), None).await.status, 200);
    // The bootstrap admin sees both.
    let all = call(&app, BOOTSTRAP, Method::GET, "/v1/jobs", None).await.json();
    assert_eq!(ids_of(&all).len(), 2);
}

#[tokio::test]
async fn roles_bound_what_a_token_does_and_revoked_tokens_stop_at_once() {
    let app = app("tenancy-roles").await;
    namespace(&app, json!({ "name": "ops" })).await;
    namespace(&app, json!({ "name": "other" })).await;
    let admin = token(&app, BOOTSTRAP, "admin", &["ops"]).await;
    let reader = token(&app, &admin, "read", &["ops"]).await;
    let writer = token(&app, &admin, "write", &["ops"]).await;
    let job = create(&app, &writer, &interval_job("w", 60_000)).await;

    assert_eq!(call(&app, &reader, Method::GET, &format!("/v1/jobs/{job}"), None).await.status, 200);
    for (method, path, body) in [
        (Method::POST, "/v1/jobs".to_owned(), Some(interval_job("r", 60_000))),
        (Method::POST, format!("/v1/jobs/{job}/pause"), None),
        (Method::DELETE, format!("/v1/jobs/{job}"), None),
        (Method::POST, format!("/v1/jobs/{job}/trigger"), None),
        (Method::POST, "/v1/executions/replay".to_owned(), Some(json!({}))),
    ] {
        let r = call(&app, &reader, method.clone(), &path, body.as_ref()).await;
        assert_eq!(r.status, 403, "{method} {path} with a read token: {}", r.text);
        assert_problem(&r, 403);
    }
    let as_writer = call(
        &app,
        &writer,
        Method::POST,
        "/v1/tokens",
        Some(&json!({ "name": "x", "role": "read", "namespaces": ["ops"] })),
    )
    .await;
    assert_eq!(as_writer.status, 403, "only an admin makes tokens");
    // An admin of some namespaces: not of others, and not of namespaces themselves.
    let foreign = call(
        &app,
        &admin,
        Method::POST,
        "/v1/tokens",
        Some(&json!({ "name": "x", "role": "read", "namespaces": ["other"] })),
    )
    .await;
    assert_eq!(foreign.status, 403, "{}", foreign.text);
    let every = call(
        &app,
        &admin,
        Method::POST,
        "/v1/tokens",
        Some(&json!({ "name": "x", "role": "read", "namespaces": ["*"] })),
    )
    .await;
    assert_eq!(every.status, 403, "{}", every.text);
    let ns = call(&app, &admin, Method::POST, "/v1/namespaces", Some(&json!({ "name": "mine" }))).await;
    assert_eq!(ns.status, 403, "{}", ns.text);
    let quota = call(&app, &admin, Method::PUT, "/v1/namespaces/ops", Some(&json!({ "max_jobs": 1000 }))).await;
    assert_eq!(quota.status, 403, "a namespace admin cannot raise its own quota: {}", quota.text);
    let bad =
        call(&app, &admin, Method::POST, "/v1/tokens", Some(&json!({ "name": "", "role": "owner", "namespaces": [] })))
            .await;
    assert_eq!(bad.status, 422, "{}", bad.text);

    // Tokens are stored as hashes and never shown again.
    let listed = call(&app, &admin, Method::GET, "/v1/tokens", None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()["items"].as_array().unwrap().len(), 3, "the admin's own and the two it made");
    for secret in [&admin, &reader, &writer] {
        assert!(!listed.text.contains(secret.as_str()));
    }
    let stored: Vec<Vec<u8>> = app
        .sql()
        .await
        .query("SELECT token_hash FROM api_tokens", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(stored.len(), 3);
    assert!(
        stored.iter().all(|h| h.len() == 32 && !h.windows(8).any(|w| reader.as_bytes().windows(8).any(|t| t == w)))
    );

    // Revoked: refused on the next request.
    let reader_id = listed.json()["items"].as_array().unwrap().iter().find(|t| t["role"] == "read").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(call(&app, &admin, Method::DELETE, &format!("/v1/tokens/{reader_id}"), None).await.status, 204);
    assert_eq!(call(&app, &reader, Method::GET, &format!("/v1/jobs/{job}"), None).await.status, 401);
    assert_eq!(call(&app, "cst_made_up", Method::GET, "/v1/jobs", None).await.status, 401);
}

#[tokio::test]
async fn quotas_refuse_what_a_namespace_may_not_have_with_a_clear_error() {
    let app = app("tenancy-quotas").await;
    namespace(&app, json!({ "name": "small", "max_jobs": 3, "max_fires_per_second": 0.9 })).await;
    let t = token(&app, BOOTSTRAP, "write", &["small"]).await;

    // A job that alone fires faster than the namespace may: 422 on its schedule.
    let fast = call(&app, &t, Method::POST, "/v1/jobs", Some(&interval_job("fast", 1_000))).await;
    assert_invalid(&fast, &["schedule"]);
    assert!(fast.text.contains("max_fires_per_second"), "{}", fast.text);
    // Two at 0.4/s nearly fill the rate quota; a third running one would exceed it.
    let first = create(&app, &t, &interval_job("one", 2_500)).await;
    create(&app, &t, &interval_job("two", 2_500)).await;
    let over = call(&app, &t, Method::POST, "/v1/jobs", Some(&interval_job("three", 2_500))).await;
    assert_eq!(over.status, 409, "{}", over.text);
    assert!(over.text.contains("max_fires_per_second"), "{}", over.text);
    // A paused job does not fire, so it fits; resuming it would not.
    let mut paused = interval_job("three", 2_500);
    paused["paused"] = json!(true);
    let third = create(&app, &t, &paused).await;
    let resumed = call(&app, &t, Method::POST, &format!("/v1/jobs/{third}/resume"), None).await;
    assert_eq!(resumed.status, 409, "{}", resumed.text);
    // Slowing one down makes room, counted once (its old rate is replaced).
    let slower = call(&app, &t, Method::PUT, &format!("/v1/jobs/{first}"), Some(&interval_job("one", 4_000))).await;
    assert_eq!(slower.status, 200, "{}", slower.text);
    let resumed = call(&app, &t, Method::POST, &format!("/v1/jobs/{third}/resume"), None).await;
    assert_eq!(resumed.status, 409, "0.25 + 0.4 + 0.4 > 0.9: {}", resumed.text);
    let slower = call(&app, &t, Method::PUT, &format!("/v1/jobs/{first}"), Some(&interval_job("one", 60_000))).await;
    assert_eq!(slower.status, 200);
    assert_eq!(call(&app, &t, Method::POST, &format!("/v1/jobs/{third}/resume"), None).await.status, 200);
    // Three jobs: the count quota is full.
    let fourth = call(&app, &t, Method::POST, "/v1/jobs", Some(&interval_job("four", 3_600_000))).await;
    assert_eq!(fourth.status, 409, "{}", fourth.text);
    assert!(fourth.text.contains("max_jobs"), "{}", fourth.text);
    // A namespace that does not exist is named as such, and nothing is written.
    let mut elsewhere = interval_job("nowhere", 3_600_000);
    elsewhere["namespace"] = json!("nowhere");
    let missing = call(&app, BOOTSTRAP, Method::POST, "/v1/jobs", Some(&elsewhere)).await;
    assert_invalid(&missing, &["namespace"]);
    assert!(missing.text.contains("nowhere"), "{}", missing.text);
    let written: i64 =
        app.sql().await.query_one("SELECT count(*) FROM jobs WHERE namespace = 'nowhere'", &[]).await.unwrap().get(0);
    assert_eq!(written, 0);
    // The namespace reports its use.
    let ns = call(&app, &t, Method::GET, "/v1/namespaces/small", None).await.json();
    assert_eq!(ns["jobs"], 3);
    assert!((ns["peak_fires_per_second"].as_f64().unwrap() - (1.0 / 60.0 + 0.8)).abs() < 1e-6, "{ns}");
    // The admin raises the quota; the fourth fits.
    let raised = call(
        &app,
        BOOTSTRAP,
        Method::PUT,
        "/v1/namespaces/small",
        Some(&json!({ "max_jobs": 4, "max_fires_per_second": 0.9 })),
    )
    .await;
    assert_eq!(raised.status, 200, "{}", raised.text);
    create(&app, &t, &interval_job("four", 3_600_000)).await;
}

#[tokio::test]
async fn namespaces_are_named_like_kubernetes_labels_and_default_holds_old_jobs() {
    let app = app("tenancy-names").await;
    for bad in ["", "Team", "-a", "a-", "a_b", &"x".repeat(64)] {
        let r = call(&app, BOOTSTRAP, Method::POST, "/v1/namespaces", Some(&json!({ "name": bad }))).await;
        assert_invalid(&r, &["name"]);
    }
    namespace(&app, json!({ "name": "dup" })).await;
    let again = call(&app, BOOTSTRAP, Method::POST, "/v1/namespaces", Some(&json!({ "name": "dup" }))).await;
    assert_eq!(again.status, 409);
    // The bootstrap admin's jobs go to `default` unless they name one.
    let id = create(&app, BOOTSTRAP, &interval_job("d", 60_000)).await;
    assert_eq!(
        call(&app, BOOTSTRAP, Method::GET, &format!("/v1/jobs/{id}"), None).await.json()["namespace"],
        "default"
    );
    let gone = call(&app, BOOTSTRAP, Method::DELETE, "/v1/namespaces/default", None).await;
    assert_eq!(gone.status, 409);
    assert_eq!(call(&app, BOOTSTRAP, Method::DELETE, "/v1/namespaces/dup", None).await.status, 204);
}

/// `cronshard-api migrate` declares the namespaces of `NAMESPACES` (as the
/// Helm chart's migrate job passes them) and applies their quotas again on
/// every run.
#[tokio::test]
async fn migrate_declares_the_configured_namespaces_with_their_quotas() {
    let db = testing::TestDb::new().await.unwrap();
    for quota in [5, 7] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cronshard-api"))
            .arg("migrate")
            .env("DATABASE_URL", &db.url)
            .env("NAMESPACES", format!(r#"[{{"name": "team-x", "max_jobs": {quota}}}, {{"name": "team-y"}}]"#))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let client = store::db::connect(&db.url).await.unwrap();
        let rows = client.query("SELECT name, max_jobs FROM namespaces ORDER BY name", &[]).await.unwrap();
        let got: Vec<(String, Option<i64>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
        assert_eq!(got, [("default".into(), None), ("team-x".into(), Some(quota)), ("team-y".into(), None)]);
    }
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_cronshard-api"))
        .arg("migrate")
        .env("DATABASE_URL", &db.url)
        .env("NAMESPACES", r#"[{"name": "Team X"}]"#)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("NAMESPACES"), "the error names the setting");
}

/// A secret header is stored and delivered, never returned: not by a
/// create, a read, a list, a replace, a pause or a trigger; a job read and
/// written back keeps it.
#[tokio::test]
async fn a_secret_header_never_appears_in_any_response() {
    const SECRET: &str = "s3cr3t-value-that-must-not-leak";
    let app = app("tenancy-secret-headers").await;
    let mut body = interval_job("with-secret", 60_000);
    body["target"]["secret_headers"] = json!({ "X-Api-Key": SECRET });
    let created = call(&app, BOOTSTRAP, Method::POST, "/v1/jobs", Some(&body)).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let job = created.json();
    let id = job["id"].as_str().unwrap().to_owned();
    assert_eq!(job["target"]["secret_headers"], json!({ "X-Api-Key": "***" }));
    let mut texts = vec![created.text.clone()];
    for (method, path) in [
        (Method::GET, format!("/v1/jobs/{id}")),
        (Method::GET, "/v1/jobs".to_owned()),
        (Method::POST, format!("/v1/jobs/{id}/pause")),
        (Method::POST, format!("/v1/jobs/{id}/resume")),
        (Method::POST, format!("/v1/jobs/{id}/trigger")),
        (Method::GET, format!("/v1/jobs/{id}/executions")),
        (Method::GET, format!("/v1/jobs/{id}/next")),
    ] {
        let r = call(&app, BOOTSTRAP, method.clone(), &path, None).await;
        assert!(r.status < 300, "{method} {path}: {}", r.text);
        texts.push(r.text);
    }
    // Read, edited and written back: the secret is kept, still not shown.
    let mut edited = call(&app, BOOTSTRAP, Method::GET, &format!("/v1/jobs/{id}"), None).await.json();
    edited["name"] = json!("renamed");
    for server_field in ["id", "version", "created_at", "updated_at", "next_fire_at"] {
        edited.as_object_mut().unwrap().remove(server_field);
    }
    let replaced = call(&app, BOOTSTRAP, Method::PUT, &format!("/v1/jobs/{id}"), Some(&edited)).await;
    assert_eq!(replaced.status, 200, "{}", replaced.text);
    texts.push(replaced.text);
    for text in &texts {
        assert!(!text.contains(SECRET), "a response showed the secret: {text}");
    }
    let stored: Value =
        app.sql().await.query_one("SELECT spec FROM jobs WHERE id = $1::text::uuid", &[&id]).await.unwrap().get(0);
    let sealed = stored["target"]["secret_headers"]["X-Api-Key"].as_str().unwrap();
    assert!(sealed.starts_with(store::secrets::SEALED_PREFIX) && !sealed.contains(SECRET), "stored sealed: {sealed}");
    // The placeholder for a secret the job does not have is refused.
    edited["target"]["secret_headers"] = json!({ "X-Other": "***" });
    let r = call(&app, BOOTSTRAP, Method::PUT, &format!("/v1/jobs/{id}"), Some(&edited)).await;
    assert_invalid(&r, &["target.secret_headers.X-Other"]);
}

/// Every path and query parameter of every operation the OpenAPI document
/// lists, given a value with a NUL character (which no Postgres text can
/// hold), is refused with a 4xx, never a 500: the class of bug where a
/// request's text reaches a statement unchecked. An admin token of every
/// namespace, so that no scope check answers first.
#[tokio::test]
async fn a_nul_character_in_any_parameter_is_refused_not_a_server_error() {
    let app = app("nul-params").await;
    let spec = app.get("/openapi.json").await.json();
    let nul = "a\u{0}b";
    let mut probed = 0;
    let mut server_errors = Vec::new();
    for (path, item) in spec["paths"].as_object().unwrap() {
        for (verb, op) in item.as_object().unwrap() {
            let Ok(method) = verb.to_uppercase().parse::<Method>() else { continue };
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            // Each parameter in turn holds the NUL, alone among the query's
            // (another one's error could answer first); the path's others
            // hold a plausible value.
            for probe in &params {
                let mut url = path.clone();
                let mut query = Vec::new();
                for p in &params {
                    let name = p["name"].as_str().unwrap();
                    match (p["in"].as_str(), p == probe) {
                        (Some("path"), true) => url = url.replace(&format!("{{{name}}}"), &enc(nul)),
                        (Some("path"), false) => url = url.replace(&format!("{{{name}}}"), &enc(&plausible(name))),
                        (Some("query"), true) => query.push(format!("{name}={}", enc(nul))),
                        _ => {}
                    }
                }
                if !query.is_empty() {
                    url = format!("{url}?{}", query.join("&"));
                }
                let body = matches!(method, Method::POST | Method::PUT | Method::PATCH).then(|| json!({}));
                let r = call(&app, BOOTSTRAP, method.clone(), &url, body.as_ref()).await;
                probed += 1;
                if r.status >= 500 {
                    server_errors.push(format!("{verb} {url} ({}): {}", probe["name"], r.status));
                }
            }
        }
    }
    assert!(probed > 40, "the document lists fewer parameters than expected: {probed}");
    assert!(server_errors.is_empty(), "server errors: {server_errors:#?}");
    // Where the field is known, the error names it.
    let r = call(&app, BOOTSTRAP, Method::GET, &format!("/v1/jobs?namespace={}", enc(nul)), None).await;
    assert_invalid(&r, &["namespace"]);
    let r = call(&app, BOOTSTRAP, Method::GET, &format!("/v1/namespaces/{}", enc(nul)), None).await;
    assert_problem(&r, 404);
}

/// A value of the right shape for a parameter, so that the one under test
/// is what the server judges.
fn plausible(name: &str) -> String {
    match name {
        "id" | "job_id" => Uuid::new_v4().to_string(),
        "scheduled_at" | "at" | "from" | "to" => "2026-11-28T00:00:00.000Z".to_owned(),
        "namespace" | "name" => "default".to_owned(),
        _ => "x".to_owned(),
    }
}
