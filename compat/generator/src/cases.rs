//! The canonical inputs every release's generator writes its corpus from,
//! as JSON (a release's code reads them with its own types): between them
//! they use every field of a fire message and every value of its enums, and
//! every header cronshard puts on an AMQP message. A value a release cannot
//! read is recorded as unsupported by it; another release that writes it is
//! then a break to report (see `check`).

use serde_json::{Value, json};

/// Fixed instants and ids: a corpus is the same each time it is generated.
pub const SLOT: &str = "2031-03-05T08:00:00.000Z";
pub const SLOT_2: &str = "2031-03-05T08:00:00.500Z";
pub const JOB_A: &str = "01900000-0000-7000-8000-00000000000a";
pub const JOB_B: &str = "01900000-0000-7000-8000-00000000000b";
pub const JOB_C: &str = "01900000-0000-7000-8000-00000000000c";
pub const JOB_D: &str = "01900000-0000-7000-8000-00000000000d";

fn fire(n: u32) -> String {
    format!("01900000-0000-7000-9000-{n:012x}")
}

/// An HTTP target using every field.
fn http_full() -> Value {
    json!({
        "kind": "http",
        "url": "https://hooks.example.com/run?x=1",
        "method": "PUT",
        "headers": {"Content-Type": "application/json", "X-Team": "payments"},
        "secret_headers": {"Authorization": "sealed:v1:compat:AAAA"},
        "body": "{\"report\":\"daily\"}",
        "timeout_ms": 15000,
        "follow_redirects": true,
        "forward_headers_on_redirect": true,
        "success": {"status": [200, "2xx"], "body_matches": "state.*done"},
        "retry_statuses": [429, "5xx"]
    })
}

fn http_minimal() -> Value {
    json!({"kind": "http", "url": "https://hooks.example.com/ping", "method": "POST", "headers": {}, "timeout_ms": 10000})
}

fn sqs_full() -> Value {
    json!({
        "kind": "sqs",
        "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/reports.fifo",
        "body": "{\"report\":\"weekly\"}",
        "message_group_id": "reports",
        "message_deduplication_id": "dedup-1",
        "message_attributes": {"team": "payments"}
    })
}

fn message(job: &str, fire_n: u32, at: &str, trigger: &str, target: Value) -> Value {
    json!({
        "v": 1,
        "fire_id": fire(fire_n),
        "job_id": job,
        "scheduled_at": at,
        "due_at": at,
        "execution_id": format!("{job}@{at}"),
        "trigger": trigger,
        "target": target,
        "retry": null
    })
}

/// One AMQP message of the corpus: the fire messages it carries (one, or a
/// bundle) and the headers cronshard sets, as `broker::properties::Headers`
/// holds them (`failed` as `[instant, reason]`, `expiration_ms`).
pub struct MessageCase {
    pub name: &'static str,
    pub messages: Vec<Value>,
    pub headers: Value,
}

pub fn messages() -> Vec<MessageCase> {
    let scheduled_minimal = {
        let mut m = message(JOB_A, 1, SLOT, "schedule", http_minimal());
        m["namespace"] = "default".into();
        m["misfire"] = "skip".into();
        m
    };
    let scheduled_full = {
        let mut m = message(JOB_A, 2, SLOT, "schedule", http_full());
        m["namespace"] = "team-a".into();
        m["due_at"] = "2031-03-05T08:00:01.250Z".into();
        m["retry"] = json!({"max_retries": 5, "base_delay_ms": 1000, "multiplier": 2.5, "max_delay_ms": 60000, "jitter": "full"});
        m["overlap"] = "forbid".into();
        m["misfire"] = "fire_once".into();
        m["starting_deadline_ms"] = 300000.into();
        m["completion"] = json!({"mode": "async", "timeout_ms": 7200000});
        m
    };
    let manual = {
        let mut m = message(JOB_B, 3, SLOT, "manual", sqs_full());
        m["namespace"] = "default".into();
        m["execution_id"] = format!("{JOB_B}@{SLOT}#manual").into();
        m["retry"] = json!({"max_retries": 0, "base_delay_ms": 30000, "multiplier": 2.0, "max_delay_ms": 3600000, "jitter": "none"});
        m["overlap"] = "replace".into();
        m["retry_from"] = 2.into();
        m["after_completion"] = "delete".into();
        m
    };
    let catch_up = {
        let mut m = message(JOB_C, 4, SLOT, "misfire", http_minimal());
        m["namespace"] = "default".into();
        m["due_at"] = "2031-03-05T08:05:00.000Z".into();
        m["retry"] = json!({"max_retries": 2, "base_delay_ms": 500, "multiplier": 1.0, "max_delay_ms": 500});
        m
    };
    let fire_all = {
        let mut m = message(JOB_C, 5, SLOT, "schedule", http_minimal());
        m["misfire"] = "fire_all".into();
        m["completion"] = json!({"mode": "sync", "timeout_ms": 3600000});
        m
    };
    let backfill = {
        let mut m = message(JOB_D, 6, SLOT, "backfill", http_full());
        m["namespace"] = "default".into();
        m["due_at"] = "2031-03-06T00:00:00.000Z".into();
        m["overlap"] = "allow".into();
        m
    };
    let bundle_second = {
        let mut m = message(JOB_B, 7, SLOT_2, "schedule", http_minimal());
        m["namespace"] = "default".into();
        m["misfire"] = "skip".into();
        m
    };
    let attempt = |n: u32| json!({"attempt": n});
    vec![
        MessageCase { name: "scheduled-minimal", messages: vec![scheduled_minimal.clone()], headers: attempt(1) },
        MessageCase { name: "scheduled-every-field", messages: vec![scheduled_full.clone()], headers: attempt(1) },
        MessageCase { name: "manual-sqs", messages: vec![manual], headers: attempt(1) },
        MessageCase { name: "misfire-catch-up", messages: vec![catch_up], headers: attempt(1) },
        MessageCase { name: "fire-all-sync", messages: vec![fire_all], headers: attempt(1) },
        MessageCase { name: "backfill", messages: vec![backfill], headers: attempt(1) },
        MessageCase { name: "bundle", messages: vec![scheduled_minimal.clone(), bundle_second], headers: attempt(1) },
        MessageCase { name: "retry-attempt", messages: vec![scheduled_full.clone()], headers: attempt(4) },
        MessageCase {
            name: "wait-for-destination",
            messages: vec![scheduled_minimal.clone()],
            headers: json!({"attempt": 2, "wait": true}),
        },
        MessageCase {
            name: "completion-check",
            messages: vec![scheduled_full],
            headers: json!({"attempt": 1, "completion_check": true}),
        },
        MessageCase {
            name: "parked-failed",
            messages: vec![scheduled_minimal],
            headers: json!({
                "attempt": 6,
                "failed": ["2031-03-05T08:10:00.000Z", "retries exhausted: HTTP 503"],
                "expiration_ms": 604800000
            }),
        },
    ]
}

/// The arguments the Redis key layout is recorded with.
pub const NODE_ID: &str = "scheduler-0";
pub const LOCK_VERSION: i64 = 7;
/// What a heartbeat announces: the node runs on an empty database.
pub const OWNED_JOBS: usize = 0;
pub const REPLICATION_FACTOR: usize = 2;

/// The delays of the delay queues recorded (a retry's and a wait's).
pub const DELAY_MS: u64 = 4000;

/// The jobs the database scenario creates, as the API stores them (a
/// validated definition, serialized): `(id, key, definition)`.
pub fn jobs() -> Vec<(&'static str, Option<&'static str>, Value)> {
    vec![
        (
            JOB_A,
            Some("compat-cron"),
            json!({
                "name": "compat cron",
                "schedule": {"kind": "cron", "exprs": ["0 8 * * MON-FRI", "30 9 * * SAT"], "timezone": "Europe/Berlin",
                             "dst": {"repeated": "both", "missing": "skip"}, "start_at": "2030-01-01T00:00:00Z"},
                "target": http_full(),
                "retry": {"max_retries": 3, "base_delay_ms": 1000, "multiplier": 2.0, "max_delay_ms": 60000},
                "misfire": "fire_all",
                "starting_deadline_ms": 120000,
                "misfire_cap": 10,
                "labels": {"team": "payments", "tier": "batch"},
                "overlap": "forbid",
                "jitter_ms": 0,
                "completion": {"mode": "async", "timeout_ms": 600000}
            }),
        ),
        (
            JOB_B,
            None,
            json!({
                "name": "compat interval",
                "schedule": {"kind": "interval", "every_ms": 60000, "start_at": "2031-01-01T00:00:00Z",
                             "end_at": "2032-01-01T00:00:00Z", "max_runs": 1000},
                "target": sqs_full(),
                "misfire": "skip",
                "overlap": "replace"
            }),
        ),
        (
            JOB_C,
            Some("compat-once"),
            json!({
                "name": "compat once",
                "schedule": {"kind": "once", "at": "2031-06-01T12:00:00Z"},
                "target": http_minimal(),
                "after_completion": "delete"
            }),
        ),
        (
            JOB_D,
            None,
            json!({
                "name": "compat paused",
                "schedule": {"kind": "cron", "expr": "*/5 * * * *", "timezone": "UTC"},
                "target": http_minimal(),
                "paused": true
            }),
        ),
    ]
}

/// Slots of job A the scenario claims and delivers (in the future, so that
/// the job's first version, made now, claims them): succeeded, retrying,
/// failed and replayed, running while it awaits its receiver's report,
/// failed.
pub const CLAIMED: [&str; 5] = [
    "2031-03-05T08:00:00Z",
    "2031-03-06T08:00:00Z",
    "2031-03-07T08:00:00Z",
    "2031-03-08T08:00:00Z",
    "2031-03-09T08:00:00Z",
];
/// Slots of job A decided without firing: one missed, one skipped, then a
/// skipped run.
pub const MISSED: &str = "2031-03-10T08:00:00Z";
pub const SKIPPED: &str = "2031-03-10T09:00:00Z";
pub const SKIPPED_RUN: [&str; 2] = ["2031-03-11T08:00:00Z", "2031-03-14T08:00:00Z"];
/// Slots of job B a backfill runs.
pub const BACKFILLED: [&str; 2] = ["2031-02-01T00:00:00Z", "2031-02-01T00:01:00Z"];
pub const BACKFILL_ID: &str = "01900000-0000-7000-a000-000000000001";
pub const WORKER_ID: &str = "worker-compat-0";
pub const SCHEDULER_ID: &str = "scheduler-compat-0";
pub const CALENDAR: &str = "compat-holidays";

pub fn calendar() -> Value {
    json!({
        "timezone": "Europe/Berlin",
        "dates": ["2031-12-25"],
        "ranges": [{"from": "2031-12-27", "to": "2031-12-31"}],
        "rules": ["* * * * SUN"],
        "description": "compat"
    })
}
