//! Alerts end to end (API, scheduler, worker, RabbitMQ, Postgres): a rule
//! on failing jobs raises one signed notice per incident and one resolved
//! notice once a slot succeeds; a dead man's switch fires for a job that
//! fails silently or is paused and stays quiet while it succeeds; killing
//! the scheduler that evaluates the rule mid-incident loses and duplicates
//! no notice. Notices are checked with the Standard Webhooks reference
//! library (not ours).

#[path = "support/lib.rs"]
mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::any;
use serde_json::{Value, json};

use support::{Stack, api};
use testing::{SignedRequest, wait_for};

/// A receiver on 127.0.0.1: `job` answers with the status set (200 at
/// first), anything else 200; every request is kept whole.
#[derive(Clone, Default)]
struct Receiver {
    status: Arc<AtomicU16>,
    /// `flaky` answers 503 to this many requests first.
    flaky_failures: Arc<std::sync::atomic::AtomicU32>,
    got: Arc<Mutex<Vec<(String, SignedRequest)>>>,
}

async fn answer(State(r): State<Receiver>, uri: Uri, headers: HeaderMap, body: Bytes) -> StatusCode {
    let path = uri.path().trim_start_matches('/').to_owned();
    let request = SignedRequest {
        headers: headers
            .iter()
            .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: body.to_vec(),
    };
    let status = if path.starts_with("job") {
        r.status.load(Ordering::SeqCst)
    } else if path == "flaky"
        && r.flaky_failures.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
    {
        503
    } else {
        200
    };
    r.got.lock().unwrap().push((path, request));
    StatusCode::from_u16(status).unwrap()
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let r = Receiver { status: Arc::new(AtomicU16::new(200)), ..Default::default() };
        let app = Router::new().fallback(any(answer)).with_state(r.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (r, base)
    }

    fn answer_jobs_with(&self, status: u16) {
        self.status.store(status, Ordering::SeqCst);
    }

    /// The notices received on `path`: (type, incident id, request).
    fn notices(&self, path: &str) -> Vec<(String, String, SignedRequest)> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| p == path)
            .map(|(_, r)| {
                let body: Value = serde_json::from_slice(&r.body).unwrap();
                (
                    body["type"].as_str().unwrap_or_default().to_owned(),
                    body["incident"]["id"].as_str().unwrap_or_default().to_owned(),
                    r.clone(),
                )
            })
            .collect()
    }
}

async fn created(stack: &Stack, path: &str, body: Value) -> Value {
    let (status, made) = api(stack, reqwest::Method::POST, path, Some(body)).await;
    assert_eq!(status, 201, "POST {path}: {made}");
    made
}

/// A job every `every_ms` delivering to `url`, failing at once on an error.
async fn ticking_job(stack: &Stack, name: &str, url: &str, every_ms: u64, labels: Value) -> String {
    let job = stack
        .create_job(json!({
            "name": name,
            "labels": labels,
            "schedule": { "kind": "interval", "every_ms": every_ms },
            "target": { "kind": "http", "url": url, "timeout_ms": 2000 },
            "retry": { "max_retries": 0 },
        }))
        .await;
    job["id"].as_str().unwrap().to_owned()
}

/// Slots of `job` with `status` in the ledger.
async fn slots_with(stack: &Stack, job: &str, status: &str) -> i64 {
    let client = stack.pg.get().await.unwrap();
    let id: uuid::Uuid = job.parse().unwrap();
    client
        .query_one("SELECT count(*) FROM scheduled_jobs WHERE job_id = $1 AND status = $2", &[&id, &status])
        .await
        .unwrap()
        .get(0)
}

/// Waits until the rule has judged `n` more slots of `status` of `job`
/// than there were when called (their outcome is final and the rule has
/// been evaluated past them).
async fn judged_past(stack: &Stack, rule: &str, job: &str, status: &str, n: i64) {
    let target = slots_with(stack, job, status).await + n;
    let (rule, job_id): (uuid::Uuid, uuid::Uuid) = (rule.parse().unwrap(), job.parse().unwrap());
    wait_for(&format!("{n} more {status} slots judged"), Duration::from_secs(60), || async {
        let client = stack.pg.get().await.unwrap();
        let judged: i64 = client
            .query_one(
                "SELECT count(*) FROM scheduled_jobs l JOIN alert_job_state s ON s.job_id = l.job_id
                 WHERE s.rule_id = $1 AND l.job_id = $2 AND l.status = $3 AND l.scheduled_at <= s.judged_through",
                &[&rule, &job_id, &status],
            )
            .await
            .unwrap()
            .get(0);
        (judged >= target).then_some(())
    })
    .await;
}

async fn signing_secret(stack: &Stack) -> String {
    let made = created(stack, "/v1/signing-keys", json!(null)).await;
    made["secret"].as_str().unwrap().to_owned()
}

fn node_with_fast_alerts(stack: &Stack, id: &str) -> scheduler::node::NodeConfig {
    let mut cfg = stack.node_config(id);
    cfg.alert_evaluation_interval = Duration::from_millis(300);
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failing_job_raises_one_signed_notice_per_incident_and_one_resolved_notice_after_a_success() {
    let mut stack = Stack::start("alerts-failed").await;
    let secret = signing_secret(&stack).await;
    stack.start_node(node_with_fast_alerts(&stack, "n1"));
    stack.start_worker(stack.worker_config("w1"));
    let (receiver, base) = Receiver::start().await;
    receiver.answer_jobs_with(503);
    let job = ticking_job(&stack, "nightly-report", &format!("{base}/job"), 400, json!({})).await;
    let channel = created(
        &stack,
        "/v1/alert-channels",
        json!({ "name": "oncall", "kind": "webhook", "url": format!("{base}/alerts") }),
    )
    .await;
    assert_eq!(channel["url"], json!(format!("{base}/…")), "the address is shown as scheme and host only");
    let slack = created(
        &stack,
        "/v1/alert-channels",
        json!({ "name": "chat", "kind": "slack", "url": format!("{base}/slack") }),
    )
    .await;
    let rule = created(
        &stack,
        "/v1/alert-rules",
        json!({ "name": "report-fails", "jobs": [job], "condition": "failed", "channels": [channel["id"], slack["id"]] }),
    )
    .await;
    let rule_id = rule["id"].as_str().unwrap().to_owned();

    wait_for("the firing notice", Duration::from_secs(60), || async {
        (!receiver.notices("alerts").is_empty()).then_some(())
    })
    .await;
    // The incident stays open through more failures: no second notice.
    judged_past(&stack, &rule_id, &job, "failed", 4).await;
    receiver.answer_jobs_with(200);
    wait_for("the resolved notice", Duration::from_secs(60), || async {
        receiver.notices("alerts").iter().any(|(t, _, _)| t == "alert.resolved").then_some(())
    })
    .await;
    // Another incident after the job fails again, then clears again.
    receiver.answer_jobs_with(500);
    wait_for("the second incident's notice", Duration::from_secs(60), || async {
        (receiver.notices("alerts").iter().filter(|(t, _, _)| t == "alert.firing").count() >= 2).then_some(())
    })
    .await;
    receiver.answer_jobs_with(200);
    wait_for("the second resolved notice", Duration::from_secs(60), || async {
        (receiver.notices("alerts").iter().filter(|(t, _, _)| t == "alert.resolved").count() >= 2).then_some(())
    })
    .await;
    judged_past(&stack, &rule_id, &job, "succeeded", 3).await;

    let notices = receiver.notices("alerts");
    let kinds: Vec<&str> = notices.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(kinds, ["alert.firing", "alert.resolved", "alert.firing", "alert.resolved"], "one of each per incident");
    assert_eq!(notices[0].1, notices[1].1, "the resolved notice is the first incident's");
    assert_ne!(notices[0].1, notices[2].1, "the second failure is a new incident");
    // Signed like deliveries, checked by the reference library.
    let requests: Vec<SignedRequest> = notices.iter().map(|(_, _, r)| r.clone()).collect();
    for (i, verdict) in testing::verify_webhooks(&secret, &requests, 0).into_iter().enumerate() {
        assert!(verdict.is_ok(), "notice {i} does not verify: {verdict:?}");
    }
    let first: Value = serde_json::from_slice(&notices[0].2.body).unwrap();
    assert_eq!(first["incident"]["job"]["id"], json!(job));
    assert_eq!(first["incident"]["rule"]["condition"], "failed");
    assert!(first["incident"]["summary"].as_str().unwrap().contains("HTTP 503"), "{first}");
    // The Slack-compatible channel got text, once per notice.
    let slack_texts: Vec<String> = receiver
        .notices("slack")
        .iter()
        .map(|(_, _, r)| serde_json::from_slice::<Value>(&r.body).unwrap()["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(slack_texts.len(), 4, "{slack_texts:?}");
    assert!(slack_texts[0].contains("report-fails") && slack_texts[0].contains("nightly-report"), "{slack_texts:?}");
    // Recorded: which rule, which job, which slots, delivered when.
    let (_, incidents) = api(&stack, reqwest::Method::GET, &format!("/v1/alerts?job={job}"), None).await;
    let items = incidents["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{incidents}");
    for incident in items {
        assert_eq!(incident["rule_id"], json!(rule_id));
        assert!(incident["resolved_at"].is_string());
        assert!(!incident["slots"].as_array().unwrap().is_empty());
        let states: Vec<&str> =
            incident["notifications"].as_array().unwrap().iter().map(|n| n["state"].as_str().unwrap()).collect();
        assert_eq!(states, ["delivered"; 4], "firing and resolved to both channels: {incident}");
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_mans_switch_fires_when_a_job_fails_silently_or_is_paused_and_not_while_it_succeeds() {
    let mut stack = Stack::start("alerts-silent").await;
    stack.start_node(node_with_fast_alerts(&stack, "n1"));
    stack.start_worker(stack.worker_config("w1"));
    let (receiver, base) = Receiver::start().await;
    let job = ticking_job(&stack, "heartbeat", &format!("{base}/job"), 300, json!({ "team": "ops" })).await;
    let channel = created(
        &stack,
        "/v1/alert-channels",
        json!({ "name": "pager", "kind": "webhook", "url": format!("{base}/alerts") }),
    )
    .await;
    let rule = created(
        &stack,
        "/v1/alert-rules",
        json!({ "name": "heartbeat-silent", "selector": "team=ops", "condition": "silent", "threshold": 2000,
                "channels": [channel["id"]] }),
    )
    .await;
    let rule_id = rule["id"].as_str().unwrap().to_owned();
    // Well past the window while it succeeds: quiet.
    judged_past(&stack, &rule_id, &job, "succeeded", 12).await;
    assert!(receiver.notices("alerts").is_empty(), "no notice while the job succeeds");
    // The receiver starts failing (no retry): silence.
    receiver.answer_jobs_with(500);
    wait_for("the silent notice", Duration::from_secs(60), || async {
        (!receiver.notices("alerts").is_empty()).then_some(())
    })
    .await;
    receiver.answer_jobs_with(200);
    wait_for("the resolved notice", Duration::from_secs(60), || async {
        (receiver.notices("alerts").len() >= 2).then_some(())
    })
    .await;
    // Paused: nothing fires, nothing succeeds, the switch trips again.
    let (status, _) =
        api(&stack, reqwest::Method::POST, &format!("/v1/jobs/{job}/pause"), Some(json!({"note": "maintenance"})))
            .await;
    assert_eq!(status, 200);
    wait_for("the paused job's notice", Duration::from_secs(60), || async {
        (receiver.notices("alerts").len() >= 3).then_some(())
    })
    .await;
    let kinds: Vec<String> = receiver.notices("alerts").into_iter().map(|(t, _, _)| t).collect();
    assert_eq!(kinds, ["alert.firing", "alert.resolved", "alert.firing"]);
    let third: Value = serde_json::from_slice(&receiver.notices("alerts")[2].2.body).unwrap();
    assert!(third["incident"]["summary"].as_str().unwrap().contains("no execution succeeded"), "{third}");
    stack.stop().await;
}

/// Counts per (type, incident) of the notices received.
fn tally(notices: &[(String, String, SignedRequest)]) -> HashMap<(String, String), usize> {
    let mut counts = HashMap::new();
    for (t, incident, _) in notices {
        *counts.entry((t.clone(), incident.clone())).or_insert(0) += 1;
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_the_scheduler_that_evaluates_alerts_mid_incident_loses_and_duplicates_no_notice() {
    const JOBS: usize = 6;
    let stack = Stack::start("alerts-kill").await;
    let env = stack.proc_env();
    let scheduler = |id: &str| {
        let mut c = env.scheduler_command(id);
        c.env("ALERT_EVALUATION_INTERVAL_MS", "200");
        c.spawn().unwrap()
    };
    let mut nodes: HashMap<String, tokio::process::Child> =
        ["a", "b"].iter().map(|id| (id.to_string(), scheduler(id))).collect();
    let _worker = env.worker("w1");
    let (receiver, base) = Receiver::start().await;
    receiver.answer_jobs_with(500);
    let mut jobs = Vec::new();
    for i in 0..JOBS {
        jobs.push(
            ticking_job(&stack, &format!("etl-{i}"), &format!("{base}/job{i}"), 300, json!({ "pipeline": "etl" }))
                .await,
        );
    }
    let channel = created(
        &stack,
        "/v1/alert-channels",
        json!({ "name": "oncall", "kind": "webhook", "url": format!("{base}/alerts") }),
    )
    .await;
    let rule = created(
        &stack,
        "/v1/alert-rules",
        json!({ "name": "etl-fails", "selector": "pipeline=etl", "condition": "consecutive_failures", "threshold": 2,
                "channels": [channel["id"]] }),
    )
    .await;
    // Kill the node that opened the first incident as soon as it has, and
    // start another in its place, while the other incidents are opening.
    let opener = wait_for("the first incident", Duration::from_secs(60), || async {
        let client = stack.pg.get().await.unwrap();
        client
            .query_opt("SELECT opened_by FROM alert_incidents ORDER BY opened_at LIMIT 1", &[])
            .await
            .unwrap()
            .map(|r| r.get::<_, String>(0))
    })
    .await;
    let mut killed = nodes.remove(&opener).expect("the opener is one of the nodes");
    support::kill9(&killed);
    let _ = killed.wait().await;
    nodes.insert("c".into(), scheduler("c"));
    wait_for("an incident per job", Duration::from_secs(90), || async {
        let firing = receiver.notices("alerts").iter().filter(|(t, _, _)| t == "alert.firing").count();
        (firing >= JOBS).then_some(())
    })
    .await;
    // Mid-incident: kill whichever node evaluates now, then clear the jobs.
    let evaluator = {
        let client = stack.pg.get().await.unwrap();
        client
            .query_one("SELECT opened_by FROM alert_incidents ORDER BY opened_at DESC LIMIT 1", &[])
            .await
            .unwrap()
            .get::<_, String>(0)
    };
    // (The node that opened the latest incident, if it still runs; else the
    // replacement, which evaluates from now on with the other.)
    let victim = if nodes.contains_key(&evaluator) { evaluator } else { "c".to_owned() };
    support::kill9(&nodes[&victim]);
    receiver.answer_jobs_with(200);
    wait_for("every incident resolved", Duration::from_secs(90), || async {
        let resolved = receiver.notices("alerts").iter().filter(|(t, _, _)| t == "alert.resolved").count();
        (resolved >= JOBS).then_some(())
    })
    .await;
    // Everything judged a while longer: nothing more arrives.
    for job in &jobs {
        judged_past(&stack, rule["id"].as_str().unwrap(), job, "succeeded", 2).await;
    }
    let notices = receiver.notices("alerts");
    let counts = tally(&notices);
    assert!(counts.values().all(|n| *n == 1), "a notice arrived twice: {counts:?}");
    let incidents: std::collections::BTreeSet<&String> = notices.iter().map(|(_, i, _)| i).collect();
    assert_eq!(incidents.len(), JOBS, "one incident per job");
    assert_eq!(notices.len(), 2 * JOBS, "one firing and one resolved notice each: {counts:?}");
    let ids: std::collections::BTreeSet<String> =
        notices.iter().map(|(_, _, r)| r.headers["webhook-id"].clone()).collect();
    assert_eq!(ids.len(), 2 * JOBS, "every notice has its own webhook-id");
    drop(nodes);
    stack.stop().await;
}

/// (state, attempts, seconds until its next attempt, delivered) of each
/// firing notice of `channel`.
async fn notices_of(stack: &Stack, channel: &str) -> Vec<(String, i32, f64, bool)> {
    let client = stack.pg.get().await.unwrap();
    let id: uuid::Uuid = channel.parse().unwrap();
    client
        .query(
            "SELECT state, attempts, extract(epoch FROM next_attempt_at - now())::float8, delivered_at IS NOT NULL
             FROM alert_notifications WHERE channel_id = $1 AND kind = 'firing' ORDER BY created_at",
            &[&id],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_notice_is_retried_with_backoff_and_a_channel_over_its_rate_makes_notices_wait() {
    let mut stack = Stack::start("alerts-retry").await;
    stack.start_node(node_with_fast_alerts(&stack, "n1"));
    stack.start_worker(stack.worker_config("w1"));
    let (receiver, base) = Receiver::start().await;
    receiver.flaky_failures.store(2, Ordering::SeqCst);
    receiver.answer_jobs_with(500);
    let a = ticking_job(&stack, "a", &format!("{base}/job-a"), 400, json!({})).await;
    let b = ticking_job(&stack, "b", &format!("{base}/job-b"), 400, json!({})).await;
    let flaky = created(
        &stack,
        "/v1/alert-channels",
        json!({ "name": "flaky", "kind": "webhook", "url": format!("{base}/flaky") }),
    )
    .await;
    let narrow = created(
        &stack,
        "/v1/alert-channels",
        json!({ "name": "narrow", "kind": "webhook", "url": format!("{base}/narrow"), "max_per_minute": 1 }),
    )
    .await;
    let (flaky, narrow) = (flaky["id"].as_str().unwrap().to_owned(), narrow["id"].as_str().unwrap().to_owned());
    created(
        &stack,
        "/v1/alert-rules",
        json!({ "name": "ab-fails", "jobs": [a, b], "condition": "failed", "channels": [flaky, narrow] }),
    )
    .await;
    // Both incidents' notices reach the flaky channel after its two refusals;
    // the narrow channel takes one and makes the other wait its turn.
    let (flaky_rows, narrow_rows) = wait_for("retries delivered and a deferral", Duration::from_secs(60), || async {
        let (f, n) = (notices_of(&stack, &flaky).await, notices_of(&stack, &narrow).await);
        let flaky_done = f.len() == 2 && f.iter().all(|r| r.3);
        let deferred = n.len() == 2 && n.iter().any(|r| r.0 == "pending" && r.1 == 0 && r.2 > 1.0);
        (flaky_done && deferred).then_some((f, n))
    })
    .await;
    let attempts: i32 = flaky_rows.iter().map(|r| r.1).sum();
    assert_eq!(attempts, 4, "two refusals, each retried once: {flaky_rows:?}");
    let flaky_got = receiver.notices("flaky");
    assert_eq!(flaky_got.len(), 4, "every attempt reached the receiver");
    let ids: std::collections::BTreeSet<String> =
        flaky_got.iter().map(|(_, _, r)| r.headers["webhook-id"].clone()).collect();
    assert_eq!(ids.len(), 2, "a retry keeps its notice's webhook-id");
    assert_eq!(narrow_rows.iter().filter(|r| r.3).count(), 1, "{narrow_rows:?}");
    assert_eq!(receiver.notices("narrow").len(), 1, "the channel's rate holds the second notice back");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_of_slots_a_misfire_policy_decided_together_opens_a_missed_incident() {
    let mut stack = Stack::start("alerts-missed").await;
    stack.start_node(node_with_fast_alerts(&stack, "n1"));
    let (receiver, base) = Receiver::start().await;
    let job = ticking_job(&stack, "hourly", &format!("{base}/job"), 3_600_000, json!({})).await;
    let channel = created(
        &stack,
        "/v1/alert-channels",
        json!({ "name": "ops", "kind": "webhook", "url": format!("{base}/alerts") }),
    )
    .await;
    let rule = created(
        &stack,
        "/v1/alert-rules",
        json!({ "name": "hourly-missed", "jobs": [job], "condition": "missed", "channels": [channel["id"]] }),
    )
    .await;
    let (rule_id, job_id): (uuid::Uuid, uuid::Uuid) =
        (rule["id"].as_str().unwrap().parse().unwrap(), job.parse().unwrap());
    wait_for("the rule to watch the job", Duration::from_secs(30), || async {
        let client = stack.pg.get().await.unwrap();
        client
            .query_opt("SELECT 1 FROM alert_job_state WHERE rule_id = $1 AND job_id = $2", &[&rule_id, &job_id])
            .await
            .unwrap()
            .map(|_| ())
    })
    .await;
    // What a scheduler writes for an outage's missed slots: one run, no rows.
    let client = stack.pg.get().await.unwrap();
    client
        .execute(
            "INSERT INTO decided_ranges (job_id, first_at, last_at, slots, job_version, status, reason)
             VALUES ($1, now() - interval '3 hours', now(), 3, 1, 'missed', 'misfire:skip')",
            &[&job_id],
        )
        .await
        .unwrap();
    // A worker sends the notice.
    stack.start_worker(stack.worker_config("w1"));
    wait_for("the missed notice", Duration::from_secs(60), || async {
        (!receiver.notices("alerts").is_empty()).then_some(())
    })
    .await;
    let notice: Value = serde_json::from_slice(&receiver.notices("alerts")[0].2.body).unwrap();
    let summary = notice["incident"]["summary"].as_str().unwrap();
    assert!(summary.contains("3 slots") && summary.contains("missed"), "{summary}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_that_failed_before_the_rules_first_evaluation_is_judged() {
    let mut stack = Stack::start("alerts-first").await;
    stack.start_worker(stack.worker_config("w1"));
    let (receiver, base) = Receiver::start().await;
    receiver.answer_jobs_with(500);
    let job = ticking_job(&stack, "rare", &format!("{base}/job"), 3_600_000, json!({})).await;
    let channel = created(
        &stack,
        "/v1/alert-channels",
        json!({ "name": "ops", "kind": "webhook", "url": format!("{base}/alerts") }),
    )
    .await;
    created(
        &stack,
        "/v1/alert-rules",
        json!({ "name": "rare-fails", "jobs": [job], "condition": "failed", "channels": [channel["id"]] }),
    )
    .await;
    // No scheduler runs yet: the rule has never been evaluated when the job fails.
    let (status, _) = api(&stack, reqwest::Method::POST, &format!("/v1/jobs/{job}/trigger"), None).await;
    assert_eq!(status, 202);
    wait_for("the manual fire to fail", Duration::from_secs(30), || async {
        (slots_with(&stack, &job, "failed").await == 1).then_some(())
    })
    .await;
    stack.start_node(node_with_fast_alerts(&stack, "n1"));
    wait_for("the notice of the failure before the first evaluation", Duration::from_secs(30), || async {
        (!receiver.notices("alerts").is_empty()).then_some(())
    })
    .await;
    stack.stop().await;
}
