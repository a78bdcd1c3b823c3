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
use support::{Stack, api};
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

// ---------------------------------------------------------------------------
// Asynchronous completion: a 202 leaves the attempt running until the
// receiver reports with the attempt's completion token, or its deadline.
// ---------------------------------------------------------------------------

const TOKEN: &str = "x-cronshard-completion-token";

/// A receiver's report, as a receiver would send it: the execution id of
/// the delivery (`#` percent-encoded), its completion token.
async fn report(stack: &Stack, execution_id: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let url = format!("{}/v1/executions/{}/complete", stack.api, execution_id.replace('#', "%23"));
    let mut request = stack.http.post(url).json(&body);
    if let Some(token) = token {
        request = request.header(TOKEN, token);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A job whose receiver answers 202 and reports later.
fn async_job(name: &str, schedule: &Value, url: String, timeout_ms: u64) -> Value {
    json!({ "name": name, "schedule": schedule, "target": { "kind": "http", "url": url },
            "completion": { "mode": "async", "timeout_ms": timeout_ms } })
}

fn with(mut spec: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    spec
}

async fn job(stack: &Stack, spec: Value) -> String {
    stack.create_job(spec).await["id"].as_str().unwrap().to_owned()
}

/// The deliveries `path` got, waiting until there are `n`.
async fn deliveries(receiver: &Receiver, path: &str, n: usize) -> Vec<SignedRequest> {
    wait_for(&format!("{n} deliveries to {path}"), Duration::from_secs(30), || {
        let got = receiver.got(path);
        async move { (got.len() >= n).then(|| got.into_iter().map(|g| g.request).collect()) }
    })
    .await
}

fn events(row: &Value, event: &str) -> Vec<Value> {
    row["history"].as_array().unwrap().iter().filter(|e| e["event"] == event).cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_async_job_runs_until_its_receiver_reports_once_with_its_token_and_can_delete_itself() {
    let receiver = Receiver::start().await;
    for path in ["export", "one-shot"] {
        receiver.script(path, vec![(202, vec![], "queued".into())]);
    }
    receiver.script("sync-one-shot", vec![(200, vec![], "done".into())]);
    let mut stack = Stack::start("contract-async").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let once = json!({ "kind": "once", "at": at(due) });
    let export = job(&stack, async_job("export", &once, receiver.url("export"), 60_000)).await;
    let one_shot = job(
        &stack,
        with(async_job("one-shot", &once, receiver.url("one-shot"), 60_000), json!({ "after_completion": "delete" })),
    )
    .await;
    let sync_one_shot = job(
        &stack,
        json!({ "name": "sync-one-shot", "schedule": once, "after_completion": "delete",
                "target": { "kind": "http", "url": receiver.url("sync-one-shot") } }),
    )
    .await;

    // The 202 is recorded, and the attempt stays running, awaiting.
    let row = wait_for("the 202 recorded as awaiting its report", Duration::from_secs(30), || async {
        stack.ledger(&export, due).await.filter(|r| attempts(r).iter().any(|e| e["outcome"] == "accepted"))
    })
    .await;
    assert_eq!((row["status"].as_str(), row["http_status"].as_i64()), (Some("running"), Some(202)), "{row}");
    let accepted = &attempts(&row)[0];
    assert!(accepted["awaiting_until"].is_string(), "{accepted}");
    assert!(accepted["rule"].as_str().unwrap().contains("awaiting the receiver's report"), "{accepted}");
    let explained = stack.get(&format!("/v1/jobs/{export}/executions/{}", at(due))).await;
    assert!(
        explained["explanation"]["summary"].as_str().unwrap().contains("awaits the receiver's completion report"),
        "{explained}"
    );
    assert!(explained["execution"]["awaiting_until"].is_string(), "{explained}");
    let delivery = &deliveries(&receiver, "export", 1).await[0];
    let execution_id = delivery.headers["webhook-id"].clone();
    let token = delivery.headers[TOKEN].clone();
    let other_token = deliveries(&receiver, "one-shot", 1).await[0].headers[TOKEN].clone();

    // Only this attempt's token reports it.
    let succeeded = json!({ "status": "succeeded", "result": "42 rows, password=hunter2" });
    for wrong in [None, Some(other_token.as_str()), Some("cct1.k1.1.AAAA")] {
        let (status, problem) = report(&stack, &execution_id, wrong, succeeded.clone()).await;
        assert_eq!(status, 401, "{wrong:?}: {problem}");
        assert!(problem["detail"].as_str().unwrap().contains("completion token"), "{problem}");
    }
    let (status, problem) = report(&stack, &execution_id, Some(&token), json!({ "status": "done" })).await;
    assert_eq!(status, 400, "an unknown status names itself: {problem}");
    assert!(problem["detail"].as_str().unwrap().contains("done"), "{problem}");
    assert_eq!(stack.ledger(&export, due).await.unwrap()["status"], "running", "nothing recorded by a bad report");

    let (status, answer) = report(&stack, &execution_id, Some(&token), succeeded.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!((answer["status"].as_str(), answer["recorded_now"].as_bool()), (Some("succeeded"), Some(true)));
    assert_eq!(answer["attempt"], 1);
    // The same report again (a receiver retrying its call) is the same answer.
    let (status, again) = report(&stack, &execution_id, Some(&token), succeeded.clone()).await;
    assert_eq!((status, again["recorded_now"].as_bool()), (200, Some(false)), "{again}");
    // A different report after it changes nothing.
    let (status, late) = report(&stack, &execution_id, Some(&token), json!({ "status": "failed" })).await;
    assert_eq!(status, 409, "{late}");
    let row = stack.ledger(&export, due).await.unwrap();
    assert_eq!((row["status"].as_str(), row["attempts"].as_i64()), (Some("succeeded"), Some(1)), "{row}");
    let completed = events(&row, "completed");
    assert_eq!(completed.len(), 1, "{row}");
    let result = completed[0]["result"].as_str().unwrap();
    assert!(result.contains("42 rows") && !result.contains("hunter2"), "the result is kept masked: {result}");
    assert_eq!(receiver.got("export").len(), 1, "delivered once");

    // `after_completion: delete`: the job goes with its final outcome, its
    // ledger row stays; for an async job, only once reported.
    let delivery = &deliveries(&receiver, "one-shot", 1).await[0];
    assert_eq!(api(&stack, reqwest::Method::GET, &format!("/v1/jobs/{one_shot}"), None).await.0, 200);
    let (status, answer) = report(
        &stack,
        &delivery.headers["webhook-id"],
        Some(&delivery.headers[TOKEN]),
        json!({ "status": "succeeded" }),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    for id in [&one_shot, &sync_one_shot] {
        let row = final_row(&stack, id, due).await;
        assert_eq!(row["status"], "succeeded", "{row}");
        let (status, _) = api(&stack, reqwest::Method::GET, &format!("/v1/jobs/{id}"), None).await;
        assert_eq!(status, 404, "job {id} deleted after its final outcome");
    }
    let (status, _) = api(&stack, reqwest::Method::GET, &format!("/v1/jobs/{export}"), None).await;
    assert_eq!(status, 200, "a job without after_completion stays");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_async_attempt_not_reported_in_time_is_retried_and_a_reported_failure_is_final() {
    const TIMEOUT_MS: u64 = 3_000;
    let receiver = Receiver::start().await;
    receiver.script("slow", vec![(202, vec![], String::new())]);
    let mut stack = Stack::start("contract-async-timeout").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let once = json!({ "kind": "once", "at": at(due) });
    let retry = json!({ "retry": { "max_retries": 2, "base_delay_ms": 200, "jitter": "none" } });
    let id = job(&stack, with(async_job("slow", &once, receiver.url("slow"), TIMEOUT_MS), retry)).await;
    let got = deliveries(&receiver, "slow", 2).await;
    let (first, second) = (&got[0], &got[1]);
    assert_eq!(
        (first.headers["x-cronshard-attempt"].as_str(), second.headers["x-cronshard-attempt"].as_str()),
        ("1", "2")
    );
    assert_ne!(first.headers[TOKEN], second.headers[TOKEN], "a token per attempt");
    let execution_id = second.headers["webhook-id"].clone();
    // Report attempt 2 while it awaits (well inside its deadline) as failed.
    let failed = json!({ "status": "failed", "result": "disk full" });
    let (status, answer) = report(&stack, &execution_id, Some(&second.headers[TOKEN]), failed).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("failed")), "{answer}");
    // Attempt 1 timed out: its token reports nothing now.
    let (status, late) =
        report(&stack, &execution_id, Some(&first.headers[TOKEN]), json!({ "status": "succeeded" })).await;
    assert_eq!(status, 409, "{late}");
    assert!(late["detail"].as_str().unwrap().contains("no longer awaits"), "{late}");

    let row = final_row(&stack, &id, due).await;
    assert_eq!((row["status"].as_str(), row["attempts"].as_i64()), (Some("failed"), Some(2)), "{row}");
    let timed_out = events(&row, "completion_timed_out");
    assert_eq!(timed_out.len(), 1, "{row}");
    assert_eq!(timed_out[0]["attempt"], 1);
    let first_attempt: Vec<Value> = attempts(&row).into_iter().filter(|e| e["attempt"] == 1).collect();
    assert_eq!(first_attempt[0]["outcome"], "accepted", "{row}");
    let retried = first_attempt.iter().find(|e| e["outcome"] == "retrying").expect("attempt 1 failed by its timeout");
    assert!(retried["error"].as_str().unwrap().contains(&format!("within {TIMEOUT_MS} ms")), "{retried}");
    // The timeout came no sooner than the deadline.
    let gap = (receiver.got("slow")[1].at - receiver.got("slow")[0].at).num_milliseconds();
    assert!(gap >= TIMEOUT_MS as i64, "attempt 2 came {gap} ms after attempt 1's 202");
    // A reported failure is final: attempt 2's deadline passes and nothing
    // more is sent (a retry would come within the deadline and 200 ms).
    tokio::time::sleep(Duration::from_millis(TIMEOUT_MS + 1_500)).await;
    assert_eq!(receiver.got("slow").len(), 2, "a reported failure is not retried");
    let row = stack.ledger(&id, due).await.unwrap();
    assert_eq!(row["status"], "failed", "{row}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn overlap_forbid_skips_slots_while_an_async_execution_awaits_its_report() {
    let receiver = Receiver::start().await;
    receiver.script("tick", vec![(202, vec![], String::new())]);
    let mut stack = Stack::start("contract-async-overlap").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let start = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let every_second = json!({ "kind": "interval", "every_ms": 1000, "start_at": at(start) });
    let tick = async_job("tick", &every_second, receiver.url("tick"), 60_000);
    let id = job(&stack, with(tick, json!({ "overlap": "forbid" }))).await;
    let first = deliveries(&receiver, "tick", 1).await.remove(0);
    // Two later slots are skipped while the first awaits its report.
    for k in 1..=2 {
        let slot = start + TimeDelta::seconds(k);
        let row = wait_for("a later slot skipped for overlap", Duration::from_secs(30), || async {
            stack.ledger(&id, slot).await.filter(|r| r["status"] == "skipped")
        })
        .await;
        assert_eq!(row["reason"], "overlap", "{row}");
    }
    assert_eq!(receiver.got("tick").len(), 1, "nothing delivered while the first awaits");
    let (status, answer) =
        report(&stack, &first.headers["webhook-id"], Some(&first.headers[TOKEN]), json!({ "status": "succeeded" }))
            .await;
    assert_eq!(status, 200, "{answer}");
    // Reported: the next slot is delivered.
    let next = deliveries(&receiver, "tick", 2).await.remove(1);
    assert_ne!(next.headers["webhook-id"], first.headers["webhook-id"]);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replaying_an_execution_that_awaits_its_report_delivers_it_again_and_the_old_report_changes_nothing() {
    let receiver = Receiver::start().await;
    receiver.script("report", vec![(202, vec![], String::new()), (200, vec![], "done".into())]);
    let mut stack = Stack::start("contract-async-replay").await;
    stack.start_node(stack.node_config("node-a"));
    stack.start_worker(stack.worker_config("worker-a"));
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let once = json!({ "kind": "once", "at": at(due) });
    let id = job(&stack, async_job("report", &once, receiver.url("report"), 600_000)).await;
    let first = deliveries(&receiver, "report", 1).await.remove(0);
    wait_for("the 202 recorded", Duration::from_secs(30), || async {
        stack.ledger(&id, due).await.filter(|r| attempts(r).iter().any(|e| e["outcome"] == "accepted"))
    })
    .await;
    // The operator replays it while it awaits (the receiver lost the work):
    // delivered again at once, not after the 10-minute deadline.
    let (status, replayed) =
        api(&stack, reqwest::Method::POST, &format!("/v1/executions/{id}/{}/replay", at(due)), None).await;
    assert_eq!((status, replayed["status"].as_str()), (202, Some("pending")), "{replayed}");
    let row = final_row(&stack, &id, due).await;
    assert_eq!((row["status"].as_str(), row["attempts"].as_i64()), (Some("succeeded"), Some(2)), "{row}");
    // The first attempt's report comes late: it changes nothing.
    let (status, late) =
        report(&stack, &first.headers["webhook-id"], Some(&first.headers[TOKEN]), json!({ "status": "failed" })).await;
    assert_eq!(status, 409, "{late}");
    assert_eq!(stack.ledger(&id, due).await.unwrap()["status"], "succeeded");
    stack.stop().await;
}
