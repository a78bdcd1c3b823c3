//! The audit log and a job's history: every change through the API is
//! recorded in its own transaction with the token's name (never the
//! token), the request id and the reason; admins read their namespaces'
//! entries only; nothing rewrites or deletes an entry; a rollback makes a
//! new version whose definition, secrets included, is the old one's.
//! Against the real server in-process on the real Postgres.

#[path = "support/lib.rs"]
mod support;

use reqwest::Method;
use serde_json::{Value, json};
use support::*;

const BOOTSTRAP: &str = "bootstrap-admin-token-for-audit-tests";

async fn call(app: &TestApp, token: &str, method: Method, path: &str, body: Option<&Value>) -> Resp {
    call_with(app, token, method, path, body, &[]).await
}

async fn call_with(
    app: &TestApp,
    token: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> Resp {
    let mut rb = app.http.request(method, app.url(path)).bearer_auth(token);
    for (name, value) in headers {
        rb = rb.header(*name, *value);
    }
    if let Some(body) = body {
        rb = rb.json(body);
    }
    app.send(rb).await
}

async fn token(app: &TestApp, name: &str, role: &str, namespaces: &[&str]) -> (String, String) {
    let made = call(
        app,
        BOOTSTRAP,
        Method::POST,
        "/v1/tokens",
        Some(&json!({"name": name, "role": role, "namespaces": namespaces})),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.text);
    (made.json()["token"].as_str().unwrap().to_owned(), made.json()["id"].as_str().unwrap().to_owned())
}

fn definition(namespace: &str, url: &str) -> Value {
    json!({
        "name": "nightly",
        "namespace": namespace,
        "schedule": { "kind": "cron", "expr": "0 2 * * *", "timezone": "Europe/Berlin" },
        "target": { "kind": "http", "url": url },
    })
}

async fn app() -> TestApp {
    TestApp::start_with("audit", Options { tokens: vec![BOOTSTRAP.to_owned()], ..Default::default() }).await
}

#[tokio::test]
async fn a_pause_with_a_note_is_audited_with_the_tokens_name_and_admins_read_only_their_namespaces() {
    let app = app().await;
    for ns in ["team-a", "team-b"] {
        let r = call(&app, BOOTSTRAP, Method::POST, "/v1/namespaces", Some(&json!({"name": ns}))).await;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let (alice, alice_id) = token(&app, "oncall-alice", "write", &["team-a"]).await;
    let (admin_a, _) = token(&app, "lead-a", "admin", &["team-a"]).await;
    let created =
        call(&app, &alice, Method::POST, "/v1/jobs", Some(&definition("team-a", "https://example.com/a"))).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let other =
        call(&app, BOOTSTRAP, Method::POST, "/v1/jobs", Some(&definition("team-b", "https://example.com/b"))).await;
    assert_eq!(other.status, 201);

    let paused = call_with(
        &app,
        &alice,
        Method::POST,
        &format!("/v1/jobs/{id}/pause"),
        Some(&json!({"note": "receiver maintenance until 14:00"})),
        &[("x-request-id", "req-pause-1")],
    )
    .await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    assert_eq!(paused.headers["x-request-id"], "req-pause-1", "the request id is echoed");
    // A reason on any write, percent-encoded UTF-8.
    let mut edited = definition("team-a", "https://example.com/a2");
    edited["paused"] = json!(true);
    let replaced = call_with(
        &app,
        &alice,
        Method::PUT,
        &format!("/v1/jobs/{id}"),
        Some(&edited),
        &[("x-audit-reason", "new%20endpoint%20%E2%9C%93")],
    )
    .await;
    assert_eq!(replaced.status, 200, "{}", replaced.text);
    // A reason with a control character is refused, and nothing changes.
    let refused = call_with(
        &app,
        &alice,
        Method::POST,
        &format!("/v1/jobs/{id}/resume"),
        None,
        &[("x-audit-reason", "line%0Abreak")],
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("X-Audit-Reason"), "{}", refused.text);

    // Only admins read the audit.
    let denied = call(&app, &alice, Method::GET, "/v1/audit", None).await;
    assert_eq!(denied.status, 403, "{}", denied.text);
    let page = call(&app, &admin_a, Method::GET, &format!("/v1/audit?job={id}"), None).await;
    assert_eq!(page.status, 200, "{}", page.text);
    let items = page.json()["items"].as_array().unwrap().clone();
    let actions: Vec<&str> = items.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(actions, ["job.replace", "job.pause", "job.create"], "newest first; the refused resume left nothing");
    let pause = &items[1];
    assert_eq!(pause["actor"]["name"], "oncall-alice");
    assert_eq!(pause["actor"]["token_id"], json!(alice_id));
    assert_eq!(pause["reason"], "receiver maintenance until 14:00");
    assert_eq!(pause["request_id"], "req-pause-1");
    assert_eq!(pause["namespace"], "team-a");
    let changed: Vec<&str> = pause["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert_eq!(changed, ["paused"]);
    let replace = &items[0];
    assert_eq!(replace["reason"], "new endpoint ✓");
    assert!(
        replace["changes"].as_array().unwrap().iter().any(|c| c["path"] == "target.url"
            && c["before"] == "https://example.com/a"
            && c["after"] == "https://example.com/a2"),
        "{replace}"
    );
    // The admin of team-a sees none of team-b's entries, nor the cluster's.
    let all = call(&app, &admin_a, Method::GET, "/v1/audit?limit=500", None).await;
    assert!(all.json()["items"].as_array().unwrap().iter().all(|e| e["namespace"] == "team-a"), "{}", all.text);
    // Filters: by actor name, by resource, by action.
    let by_alice = call(&app, BOOTSTRAP, Method::GET, "/v1/audit?actor=oncall-alice&action=job", None).await;
    assert_eq!(by_alice.json()["items"].as_array().unwrap().len(), 3, "{}", by_alice.text);
    let tokens = call(&app, BOOTSTRAP, Method::GET, "/v1/audit?action=token.create", None).await;
    let tokens_json = tokens.json();
    let names: Vec<&str> =
        tokens_json["items"].as_array().unwrap().iter().map(|e| e["details"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["lead-a", "oncall-alice"]);
    assert!(!tokens.text.contains(&alice), "a token's secret is never in the audit");
    let bad = call(&app, BOOTSTRAP, Method::GET, "/v1/audit?action=job.explode", None).await;
    assert_eq!(bad.status, 422, "{}", bad.text);

    // Append-only, whoever asks the database.
    let client = tokio_postgres::connect(app.db_url(), tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(client.1);
    let client = client.0;
    let update = client.execute("UPDATE audit_log SET reason = 'forged'", &[]).await.unwrap_err();
    assert!(format!("{update:?}").contains("append-only"), "{update:?}");
    let delete = client.execute("DELETE FROM audit_log", &[]).await.unwrap_err();
    assert!(format!("{delete:?}").contains("append-only"), "{delete:?}");
}

#[tokio::test]
async fn a_rollback_restores_the_old_definition_with_its_secrets_as_a_new_version() {
    let app = app().await;
    let mut v1 = definition("default", "https://example.com/v1");
    v1["target"]["secret_headers"] = json!({ "Authorization": "Bearer first-secret" });
    let created = call(&app, BOOTSTRAP, Method::POST, "/v1/jobs", Some(&v1)).await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.json()["id"].as_str().unwrap().to_owned();
    let mut v2 = definition("default", "https://example.com/v2");
    v2["target"]["secret_headers"] = json!({ "Authorization": "Bearer second-secret" });
    v2["labels"] = json!({ "team": "pay" });
    let replaced = call(&app, BOOTSTRAP, Method::PUT, &format!("/v1/jobs/{id}"), Some(&v2)).await;
    assert_eq!(replaced.status, 200, "{}", replaced.text);

    let history = call(&app, BOOTSTRAP, Method::GET, &format!("/v1/jobs/{id}/versions"), None).await;
    assert_eq!(history.status, 200, "{}", history.text);
    for secret in ["first-secret", "second-secret", "cs1:"] {
        assert!(!history.text.contains(secret), "a history shows no secret value ({secret}): {}", history.text);
    }
    let versions = history.json()["versions"].as_array().unwrap().clone();
    assert_eq!(versions.len(), 2);
    let paths: Vec<&str> =
        versions[1]["changes"].as_array().unwrap().iter().map(|c| c["path"].as_str().unwrap()).collect();
    assert!(paths.contains(&"target.url") && paths.contains(&"labels"), "{paths:?}");
    let secret_change = versions[1]["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "target.secret_headers.Authorization")
        .expect("a changed secret is named");
    assert_eq!(secret_change["after"], "*** (changed)");
    assert_eq!(versions[1]["author"]["name"], "bootstrap token #1");
    assert_eq!(versions[1]["action"], "job.replace");

    // If-Match guards it; an unknown version is named.
    let stale = call_with(
        &app,
        BOOTSTRAP,
        Method::POST,
        &format!("/v1/jobs/{id}/rollback"),
        Some(&json!({"version": 1})),
        &[("if-match", "\"1\"")],
    )
    .await;
    assert_eq!(stale.status, 412, "{}", stale.text);
    let unknown =
        call(&app, BOOTSTRAP, Method::POST, &format!("/v1/jobs/{id}/rollback"), Some(&json!({"version": 9}))).await;
    assert_eq!(unknown.status, 422, "{}", unknown.text);
    assert!(unknown.text.contains("no version 9"), "{}", unknown.text);

    let rolled = call(
        &app,
        BOOTSTRAP,
        Method::POST,
        &format!("/v1/jobs/{id}/rollback"),
        Some(&json!({"version": 1, "note": "v2 endpoint is broken"})),
    )
    .await;
    assert_eq!(rolled.status, 200, "{}", rolled.text);
    let job = rolled.json();
    assert_eq!(job["version"], 3, "a rollback is a new version");
    assert_eq!(job["target"]["url"], "https://example.com/v1");
    assert!(job.get("labels").is_none_or(|l| l.is_null() || l == &json!({})), "{job}");
    assert_eq!(job["target"]["secret_headers"]["Authorization"], "***");

    // The secret in force is version 1's: the same sealed value, opening to it.
    let pool = store::db::pool(app.db_url(), 2).unwrap();
    let client = pool.get().await.unwrap();
    let job_id: uuid::Uuid = id.parse().unwrap();
    let spec = |version: i64| {
        let client = &client;
        async move {
            let row = client
                .query_one("SELECT spec FROM job_changes WHERE job_id = $1 AND version = $2", &[&job_id, &version])
                .await
                .unwrap();
            row.get::<_, Value>(0)["target"]["secret_headers"]["Authorization"].as_str().unwrap().to_owned()
        }
    };
    let (s1, s2, s3) = (spec(1).await, spec(2).await, spec(3).await);
    assert_eq!(s3, s1, "version 1's sealed secret is back");
    assert_ne!(s3, s2);
    let mut headers = std::collections::BTreeMap::from([("Authorization".to_owned(), s3)]);
    store::secrets::Vault::new(testing::test_keyring()).open_headers(&pool, job_id, &mut headers).await.unwrap();
    assert_eq!(headers["Authorization"], "Bearer first-secret");

    let history = call(&app, BOOTSTRAP, Method::GET, &format!("/v1/jobs/{id}/versions"), None).await;
    let versions = history.json()["versions"].as_array().unwrap().clone();
    assert_eq!(versions.len(), 3);
    assert_eq!(versions[2]["action"], "job.rollback");
    assert_eq!(versions[2]["reason"], "v2 endpoint is broken");
    assert_eq!(versions[2]["definition"], versions[0]["definition"], "the definition is version 1's");
    let audit = call(&app, BOOTSTRAP, Method::GET, &format!("/v1/audit?job={id}&action=job.rollback"), None).await;
    assert_eq!(audit.json()["items"][0]["details"], json!({"from_version": 2, "to_version": 1}), "{}", audit.text);
}
