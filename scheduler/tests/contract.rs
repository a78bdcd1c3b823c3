//! The delivery contract end to end (API, scheduler, worker, RabbitMQ,
//! Postgres): what a receiver's answer makes of an attempt (success
//! statuses, body condition, retried statuses, Retry-After, jitter), what
//! the ledger keeps of it, and signed deliveries checked by the Standard
//! Webhooks reference library (not ours) across a key rotation.

#[path = "support/lib.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::any;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use domain::execution::truncate_ms;
use support::Stack;
use testing::{SignedRequest, wait_for};

fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// An answer: status, headers, body.
type Answer = (u16, Vec<(&'static str, String)>, String);

#[derive(Clone, Debug)]
struct Got {
    path: String,
    at: DateTime<Utc>,
    request: SignedRequest,
}

#[derive(Clone, Default)]
struct Script {
    /// Per path: the answers in order; the last one repeats.
    answers: Arc<Mutex<HashMap<String, Vec<Answer>>>>,
    got: Arc<Mutex<Vec<Got>>>,
}

/// A receiver on 127.0.0.1 that answers each path as scripted and keeps
/// every request whole (headers and body bytes).
struct Receiver {
    addr: std::net::SocketAddr,
    script: Script,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn answer(State(script): State<Script>, uri: Uri, headers: HeaderMap, body: Bytes) -> axum::response::Response {
    let path = uri.path().trim_start_matches('/').to_owned();
    let request = SignedRequest {
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: body.to_vec(),
    };
    script.got.lock().unwrap().push(Got { path: path.clone(), at: Utc::now(), request });
    let (status, headers, body) = {
        let mut answers = script.answers.lock().unwrap();
        let list = answers.entry(path).or_default();
        match list.len() {
            0 => (200, vec![], String::new()),
            1 => list[0].clone(),
            _ => list.remove(0),
        }
    };
    let mut response = axum::response::Response::new(axum::body::Body::from(body));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in headers {
        response.headers_mut().insert(name, value.parse().unwrap());
    }
    response
}

impl Receiver {
    async fn start() -> Receiver {
        let script = Script::default();
        let app = Router::new().fallback(any(answer)).with_state(script.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Receiver { addr, script, _stop: stop }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}/{path}", self.addr)
    }

    fn script(&self, path: &str, answers: Vec<Answer>) {
        self.script.answers.lock().unwrap().insert(path.to_owned(), answers);
    }

    fn got(&self, path: &str) -> Vec<Got> {
        self.script.got.lock().unwrap().iter().filter(|g| g.path == path).cloned().collect()
    }
}

async fn once_job(stack: &Stack, name: &str, due: DateTime<Utc>, target: Value, retry: Value) -> String {
    stack
        .create_job(
            json!({ "name": name, "schedule": { "kind": "once", "at": at(due) }, "target": target, "retry": retry }),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn final_row(stack: &Stack, id: &str, due: DateTime<Utc>) -> Value {
    wait_for("the slot's final outcome", Duration::from_secs(30), || async {
        stack.ledger(id, due).await.filter(|r| r["status"] == "succeeded" || r["status"] == "failed")
    })
    .await
}

fn attempts(row: &Value) -> Vec<Value> {
    row["history"].as_array().unwrap().iter().filter(|e| e["event"] == "attempt").cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_404_fails_at_once_and_a_503_is_retried_after_a_jittered_backoff() {
    let receiver = Receiver::start().await;
    receiver.script("gone", vec![(404, vec![], "no such report".into())]);
    let mut stack = Stack::start("contract-status").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let retry = json!({ "max_retries": 3, "base_delay_ms": 1000, "multiplier": 2.0 });
    let gone =
        once_job(&stack, "gone", due, json!({ "kind": "http", "url": receiver.url("gone") }), retry.clone()).await;
    // Five jobs failing twice with 503, each its own execution: equal
    // jitter waits between half the backoff and all of it, drawn per
    // execution.
    let mut busy = Vec::new();
    for i in 0..5 {
        let path = format!("busy-{i}");
        receiver.script(
            &path,
            vec![(503, vec![], String::new()), (503, vec![], String::new()), (200, vec![], "ok".into())],
        );
        busy.push((
            path.clone(),
            once_job(&stack, &path, due, json!({ "kind": "http", "url": receiver.url(&path) }), retry.clone()).await,
        ));
    }

    let row = final_row(&stack, &gone, due).await;
    assert_eq!((row["status"].as_str(), row["attempts"].as_i64()), (Some("failed"), Some(1)), "{row}");
    let entry = &attempts(&row)[0];
    let rule = entry["rule"].as_str().unwrap();
    assert!(rule.contains("HTTP 404") && rule.contains("failed at once"), "{rule}");
    assert_eq!(receiver.got("gone").len(), 1, "a 404 is not retried");

    let mut first_waits = Vec::new();
    for (path, id) in &busy {
        let row = final_row(&stack, id, due).await;
        assert_eq!((row["status"].as_str(), row["attempts"].as_i64()), (Some("succeeded"), Some(3)), "{row}");
        let got = receiver.got(path);
        assert_eq!(got.len(), 3, "{path}");
        let entries = attempts(&row);
        for (k, backoff_ms) in [(1, 1000), (2, 2000)] {
            let recorded = entries[k - 1]["rule"].as_str().unwrap();
            assert!(
                recorded.contains("HTTP 503 is in retry_statuses") && recorded.contains("equal jitter"),
                "{recorded}"
            );
            // The wait the worker chose, in its own words, lies within equal
            // jitter's bounds, and is the one the receiver saw.
            let chosen: i64 = recorded
                .split("next attempt in ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no wait in {recorded}"));
            assert!((backoff_ms / 2..=backoff_ms).contains(&chosen), "{path} retry {k}: chose {chosen} ms");
            assert!(entries[k - 1]["next_attempt_at"].is_string(), "{}", entries[k - 1]);
            let seen = (got[k].at - got[k - 1].at).num_milliseconds();
            assert!(
                seen >= chosen - 50 && seen <= chosen + 700,
                "{path} retry {k}: chose {chosen} ms, came after {seen}"
            );
            if k == 1 {
                first_waits.push(chosen);
            }
        }
        // The execution id is the same on every attempt.
        let ids: Vec<&String> = got.iter().map(|g| &g.request.headers["webhook-id"]).collect();
        assert!(ids.iter().all(|i| *i == ids[0]), "{ids:?}");
    }
    first_waits.sort();
    assert!(first_waits.first() != first_waits.last(), "five executions all waited {first_waits:?}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_429_with_retry_after_is_tried_again_no_sooner_than_it_asked() {
    let receiver = Receiver::start().await;
    receiver.script(
        "slow-down",
        vec![(429, vec![("retry-after", "5".into())], String::new()), (200, vec![], String::new())],
    );
    let mut stack = Stack::start("contract-retry-after").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let retry = json!({ "max_retries": 2, "base_delay_ms": 1000, "multiplier": 2.0 });
    let id =
        once_job(&stack, "slow-down", due, json!({ "kind": "http", "url": receiver.url("slow-down") }), retry).await;
    let row = final_row(&stack, &id, due).await;
    assert_eq!((row["status"].as_str(), row["attempts"].as_i64()), (Some("succeeded"), Some(2)), "{row}");
    let got = receiver.got("slow-down");
    let gap = (got[1].at - got[0].at).num_milliseconds();
    assert!((5_000..6_500).contains(&gap), "the second attempt came {gap} ms after the 429");
    let first = &attempts(&row)[0];
    assert_eq!(first["http_status"], 429);
    assert_eq!(first["response_headers"]["retry-after"], "5", "{first}");
    let rule = first["rule"].as_str().unwrap();
    assert!(rule.contains("as Retry-After asked"), "{rule}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_200_whose_body_misses_the_success_condition_fails_and_the_answer_is_kept_masked() {
    let receiver = Receiver::start().await;
    let body = r#"{"ok":false,"access_token":"tok-0123456789","reason":"quota"}"#;
    receiver.script(
        "report",
        vec![(
            200,
            vec![
                ("content-type", "application/json".into()),
                ("x-request-id", "req-77".into()),
                ("set-cookie", "s=1".into()),
            ],
            body.into(),
        )],
    );
    let mut stack = Stack::start("contract-body").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let target =
        json!({ "kind": "http", "url": receiver.url("report"), "success": { "body_contains": "\"ok\":true" } });
    let retry = json!({ "max_retries": 1, "base_delay_ms": 200, "jitter": "none" });
    let id = once_job(&stack, "report", due, target, retry).await;
    let row = final_row(&stack, &id, due).await;
    assert_eq!(
        (row["status"].as_str(), row["attempts"].as_i64()),
        (Some("failed"), Some(2)),
        "a mismatch is retried: {row}"
    );
    assert_eq!(receiver.got("report").len(), 2);
    let explained = stack.get(&format!("/v1/jobs/{id}/executions/{}", at(due))).await;
    let execution = &explained["execution"];
    assert_eq!(execution["http_status"], 200, "{explained}");
    assert_eq!(
        execution["error"].as_str(),
        Some("HTTP 200 OK with a body that does not meet the success condition"),
        "{explained}"
    );
    let excerpt = execution["response_excerpt"].as_str().unwrap();
    assert!(excerpt.contains("\"reason\":\"quota\"") && !excerpt.contains("tok-0123456789"), "{excerpt}");
    assert_eq!(
        execution["response_headers"],
        json!({ "content-type": "application/json", "x-request-id": "req-77" }),
        "kept headers, no cookie"
    );
    let last = attempts(&row).pop().unwrap();
    assert!(last["rule"].as_str().unwrap().contains("does not contain"), "{last}");
    stack.stop().await;
}

async fn api(stack: &Stack, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = stack.http.request(method, format!("{}{path}", stack.api));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Every delivery of the job after `from`, newest last.
fn since(receiver: &Receiver, from: usize) -> Vec<SignedRequest> {
    receiver.got("signed").into_iter().skip(from).map(|g| g.request).collect()
}

/// Waits for a delivery after `from` that `check` accepts, and returns it.
async fn delivery_where(
    receiver: &Receiver,
    from: usize,
    what: &str,
    check: impl Fn(&SignedRequest) -> bool,
) -> SignedRequest {
    wait_for(what, Duration::from_secs(30), || {
        let found = since(receiver, from).into_iter().find(|r| check(r));
        async move { found }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deliveries_verify_with_the_standard_webhooks_library_across_a_rotation_and_replays_are_refused() {
    let verifies =
        |secret: &str, r: &SignedRequest| testing::verify_webhooks(secret, std::slice::from_ref(r), 0)[0].is_ok();
    let receiver = Receiver::start().await;
    let mut stack = Stack::start("contract-signed").await;
    let (status, first) = api(&stack, reqwest::Method::POST, "/v1/signing-keys", None).await;
    assert_eq!(status, 201, "{first}");
    let old_secret = first["secret"].as_str().unwrap().to_owned();
    assert!(old_secret.starts_with("whsec_"));
    let mut worker = stack.worker_config("worker-a");
    worker.signing_keys_fresh_for = Duration::from_millis(300);
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(worker);
    stack
        .create_job(json!({
            "name": "signed",
            "schedule": { "kind": "interval", "every_ms": 400 },
            "target": { "kind": "http", "url": receiver.url("signed"), "body": "{\"report\":\"daily\"}" },
        }))
        .await;

    // Signed by the only key; the body is signed byte for byte.
    let signed = delivery_where(&receiver, 0, "a delivery", |_| true).await;
    assert_eq!(signed.body, b"{\"report\":\"daily\"}");
    assert_eq!(signed.headers["webhook-id"], signed.headers["x-cronshard-execution-id"]);
    let results = testing::verify_webhooks(&old_secret, std::slice::from_ref(&signed), 0);
    assert_eq!(results, vec![Ok(())], "{signed:?}");
    // A replay: the same request verified six minutes later is too old,
    // and an altered body does not verify.
    let replay = testing::verify_webhooks(&old_secret, std::slice::from_ref(&signed), 360);
    assert!(matches!(&replay[0], Err(e) if e.contains("too old")), "{replay:?}");
    let altered = SignedRequest { body: b"{\"report\":\"weekly\"}".to_vec(), ..signed.clone() };
    assert!(testing::verify_webhooks(&old_secret, &[altered], 0)[0].is_err());

    // A rotation with a 4 s overlap: both keys sign, then only the new one.
    let (status, rotated) =
        api(&stack, reqwest::Method::POST, "/v1/signing-keys/rotate", Some(json!({ "overlap_seconds": 4 }))).await;
    assert_eq!(status, 201, "{rotated}");
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();
    let mark = receiver.got("signed").len();
    let both = delivery_where(&receiver, mark, "a delivery signed by both keys", |r| {
        r.headers.get("webhook-signature").is_some_and(|s| s.split(' ').count() == 2)
    })
    .await;
    assert!(verifies(&old_secret, &both) && verifies(&new_secret, &both), "{both:?}");
    let mark = receiver.got("signed").len();
    let after = delivery_where(&receiver, mark, "a delivery past the overlap", |r| {
        r.headers.get("webhook-signature").is_some_and(|s| s.split(' ').count() == 1) && !verifies(&old_secret, r)
    })
    .await;
    assert!(verifies(&new_secret, &after), "{after:?}");
    let (_, listed) = api(&stack, reqwest::Method::GET, "/v1/signing-keys", None).await;
    let states: Vec<&str> = listed["keys"].as_array().unwrap().iter().map(|k| k["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["active", "expired"], "{listed}");
    assert!(!listed.to_string().contains("whsec_"), "a listing never shows a secret: {listed}");

    // Revoked: the namespace has no key left, deliveries go out unsigned
    // (with their id and timestamp), and the verifier refuses them.
    let new_id = rotated["id"].as_str().unwrap();
    let (status, revoked) = api(&stack, reqwest::Method::DELETE, &format!("/v1/signing-keys/{new_id}"), None).await;
    assert_eq!((status, revoked["state"].as_str()), (200, Some("revoked")), "{revoked}");
    let mark = receiver.got("signed").len();
    let unsigned =
        delivery_where(&receiver, mark, "an unsigned delivery", |r| !r.headers.contains_key("webhook-signature")).await;
    assert!(unsigned.headers.contains_key("webhook-timestamp"));
    assert!(!verifies(&new_secret, &unsigned));

    // The secrets are stored sealed only.
    let client = stack.pg.get().await.unwrap();
    let stored: Vec<String> =
        client.query("SELECT sealed FROM signing_keys", &[]).await.unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(stored.len(), 2);
    for (sealed, secret) in stored.iter().zip([&old_secret, &new_secret]) {
        let bare = secret.trim_start_matches("whsec_");
        assert!(sealed.starts_with("cs1:") && !stored.iter().any(|s| s.contains(bare)), "{sealed}");
    }
    stack.stop().await;
}

#[test]
fn the_verifier_refuses_what_it_should() {
    // The harness itself: a request signed with another secret is refused.
    let request = SignedRequest {
        headers: BTreeMap::from([
            ("webhook-id".to_owned(), "msg_1".to_owned()),
            ("webhook-timestamp".to_owned(), Utc::now().timestamp().to_string()),
            ("webhook-signature".to_owned(), "v1,AAAA".to_owned()),
        ]),
        body: b"{}".to_vec(),
    };
    let verdict = testing::verify_webhooks("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &[request], 0);
    assert!(matches!(&verdict[0], Err(e) if e.contains("No matching signature")), "{verdict:?}");
}
