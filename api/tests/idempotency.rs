//! The Idempotency-Key header on POST /v1/jobs: replays, conflicts, expiry,
//! bad keys, races and per-token scopes. Against the real server in-process, on
//! the real Postgres and Redis. Each test gets its own database (`TestDb`), its
//! own cluster name (Redis key prefix) and its own server on an ephemeral port.

#[path = "support/lib.rs"]
mod support;

use chrono::{Duration as TimeDelta, Utc};
use serde_json::{Value, json};

use support::*;

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
