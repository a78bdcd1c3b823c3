//! Reads a corpus with this build's code, the way its processes read what
//! another release wrote, and says what it could not read or read with
//! another meaning. The expected meaning of each item is its canonical
//! input, read by this build's own types; a field that reads differently is
//! named.
//!
//! Run by the current release over the previous release's corpus (the
//! compat test), and by the previous release over the current one's
//! (`deploy/compat.sh`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use broker::amqp::{self, QueueType, Topology};
use broker::properties;
use domain::message::FireMessage;

use crate::corpus::Corpus;
use crate::generate::{declare_all, delete_all, fire_messages, headers_of, start_request};
use crate::{Report, Services, amqp_wire, cases, db};

/// The named fields of two JSON objects that differ.
fn differing_fields(expected: &Value, got: &Value) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> =
        expected.as_object().into_iter().chain(got.as_object()).flat_map(|o| o.keys()).collect();
    keys.into_iter()
        .filter(|k| expected.get(k.as_str()) != got.get(k.as_str()))
        .map(|k| {
            format!(
                "{k}: expected {}, read {}",
                expected.get(k.as_str()).unwrap_or(&Value::Null),
                got.get(k.as_str()).unwrap_or(&Value::Null)
            )
        })
        .collect()
}

/// One AMQP message (`properties`, `body`) read as a worker reads it,
/// against what its `input` means: the fire messages, their order, the
/// attempt, the wait and completion-check marks, the content type, the
/// message id, persistence, and a parked message's when and why.
pub fn amqp_message(report: &mut Report, what: &str, input: &Value, amqp: &Value) {
    report.checked += 1;
    let expected = match fire_messages(input) {
        Ok(m) => m,
        Err(e) => return report.fail(format!("{what}: this release cannot read the message's input: {e}")),
    };
    let body = amqp["body"].as_str().unwrap_or_default();
    match domain::message::parse_body(body.as_bytes()) {
        Ok(read) if read == expected => {}
        Ok(read) if read.len() != expected.len() => {
            report.fail(format!("{what}: the body holds {} fire messages, expected {}", read.len(), expected.len()))
        }
        Ok(read) => {
            for (i, (e, r)) in expected.iter().zip(&read).enumerate() {
                let fields = differing_fields(&to_json(e), &to_json(r));
                if !fields.is_empty() {
                    report.fail(format!("{what}: message {i} reads differently: {}", fields.join("; ")));
                }
            }
        }
        Err(e) => report.fail(format!("{what}: the body does not parse: {e}")),
    }
    let props = match amqp_wire::properties_of(&amqp["properties"]) {
        Ok(p) => p,
        Err(e) => return report.fail(format!("{what}: the properties do not read: {e}")),
    };
    let headers = headers_of(&input["headers"]);
    let mut check = |ok: bool, text: String| {
        if !ok {
            report.fail(format!("{what}: {text}"));
        }
    };
    check(
        properties::attempt_of(&props) == headers.attempt,
        format!("attempt {} read as {}", headers.attempt, properties::attempt_of(&props)),
    );
    check(properties::is_wait(&props) == headers.wait, format!("wait mark {} read as its opposite", headers.wait));
    check(
        properties::is_completion_check(&props) == headers.completion_check,
        format!("completion-check mark {} read as its opposite", headers.completion_check),
    );
    let content_type = props.content_type().as_ref().map(|c| c.as_str().to_owned());
    let bundle = expected.len() > 1;
    check(
        (content_type.as_deref() == Some(properties::BUNDLE_CONTENT_TYPE)) == bundle,
        format!("content type {content_type:?} for {} fire messages", expected.len()),
    );
    let message_id = props.message_id().as_ref().map(|m| m.as_str().to_owned());
    check(
        message_id.as_deref() == expected.first().map(|m| m.execution_id.as_str()),
        format!("message id {message_id:?} is not the first execution id"),
    );
    check(*props.delivery_mode() == Some(2), format!("delivery mode {:?}, not persistent", props.delivery_mode()));
    let header = |name: &str| props.headers().as_ref().and_then(|h| h.inner().get(name)).map(amqp_wire::value_json);
    match &headers.failed {
        Some((at, reason)) => {
            let at = domain::execution::format_instant(*at);
            check(
                header(properties::FAILED_AT_HEADER) == Some(json!({ "S": at })),
                format!("{} is not {at}", properties::FAILED_AT_HEADER),
            );
            check(
                header(properties::FAILURE_REASON_HEADER) == Some(json!({ "S": reason })),
                format!("{} is not {reason:?}", properties::FAILURE_REASON_HEADER),
            );
        }
        None => check(header(properties::FAILED_AT_HEADER).is_none(), "a message not parked says it was".into()),
    }
    let expiration = props.expiration().as_ref().map(|e| e.as_str().to_owned());
    check(
        expiration == headers.expiration.map(|d| d.as_millis().to_string()),
        format!("expiration {expiration:?}, expected {:?}", headers.expiration),
    );
}

fn to_json(m: &FireMessage) -> Value {
    serde_json::to_value(m).unwrap_or(Value::Null)
}

/// Every message of the corpus.
pub fn messages(report: &mut Report, corpus: &Corpus) {
    for item in corpus.messages.as_array().into_iter().flatten() {
        let name = item["name"].as_str().unwrap_or("?");
        if let Some(why) = item.get("unsupported") {
            report.note(format!("message {name}: the corpus's release could not make it ({why})"));
            continue;
        }
        amqp_message(report, &format!("message {name}"), &item["input"], &item["amqp"]);
    }
}

/// The key layout must be this release's exactly (an old and a new
/// scheduler race for the same lock key of a slot, and read each other's
/// heartbeats); the heartbeat is read by this release's own reader from
/// Redis, with the meaning it was written with.
pub async fn redis(report: &mut Report, corpus: &Corpus, services: &Services) -> anyhow::Result<()> {
    let keys = &corpus.redis["keys"];
    let template = runtime::redis::Keys::new("{cluster}");
    let mut check = |ok: bool, text: String| {
        report.checked += 1;
        if !ok {
            report.fail(text);
        }
    };
    let node = template.node(keys["node"]["node_id"].as_str().unwrap_or_default());
    check(keys["node"]["key"] == node.as_str(), format!("heartbeat key {} is {node} here", keys["node"]["key"]));
    check(
        keys["registry"]["key"] == template.registry().as_str(),
        format!("registry key {} is {} here", keys["registry"]["key"], template.registry()),
    );
    let lock = &keys["lock"];
    match (
        lock["job_id"].as_str().and_then(|s| s.parse::<Uuid>().ok()),
        lock["scheduled_at"].as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()),
    ) {
        (Some(job), Some(at)) => {
            let here = template.lock(job, lock["version"].as_i64().unwrap_or(0), at.with_timezone(&Utc));
            check(lock["key"] == here.as_str(), format!("lock key {} is {here} here", lock["key"]));
        }
        _ => check(false, format!("the lock key's arguments do not read: {lock}")),
    }

    let beat = &corpus.redis["heartbeat"];
    let cluster = format!("compat-read-{}", &Uuid::new_v4().simple().to_string()[..12]);
    let keys_here = runtime::redis::Keys::new(&cluster);
    let node_id = beat["node_id"].as_str().unwrap_or_default();
    let key = beat["key"].as_str().unwrap_or_default().replace("{cluster}", &cluster);
    let registry = beat["registry"].as_str().unwrap_or_default().replace("{cluster}", &cluster);
    check(
        key == keys_here.node(node_id),
        format!("the heartbeat was written to {key}, read from {}", keys_here.node(node_id)),
    );
    check(registry == keys_here.registry(), format!("the registry was {registry}, read from {}", keys_here.registry()));
    let pools = runtime::redis::pools(std::slice::from_ref(&services.redis_url))?;
    let mut conn = pools[0].get().await?;
    let document = beat["document"].as_str().unwrap_or_default();
    let _: () = redis::pipe().set_ex(&key, document, 60).sadd(&registry, node_id).query_async(&mut *conn).await?;
    let live = runtime::redis::live_nodes(&pools[0], &keys_here).await;
    let _: () = redis::pipe().del(&key).del(&registry).query_async(&mut *conn).await?;
    let live = live?;
    let Some((_, doc)) = live.iter().find(|(id, _)| id == node_id) else {
        check(false, format!("the heartbeat of {node_id} is not read as a live node"));
        return Ok(());
    };
    let rf = domain::ownership::heartbeat_replication_factor(doc);
    check(
        beat["replication_factor"].as_u64() == Some(rf as u64),
        format!("replication factor {} read as {rf}", beat["replication_factor"]),
    );
    check(
        doc["owned_jobs"] == beat["owned_jobs"],
        format!("owned jobs {} read as {}", beat["owned_jobs"], doc["owned_jobs"]),
    );
    check(doc["node_id"] == beat["node_id"], format!("node id {} read as {}", beat["node_id"], doc["node_id"]));
    check(
        doc["heartbeat_at"].as_str().is_some_and(|s| DateTime::parse_from_rfc3339(s).is_ok()),
        format!("heartbeat_at {} is not an RFC 3339 instant", doc["heartbeat_at"]),
    );
    Ok(())
}

fn queue_type(name: &str) -> Option<QueueType> {
    match name {
        "classic" => Some(QueueType::Classic),
        "quorum" => Some(QueueType::Quorum),
        _ => None,
    }
}

/// Replays recorded declarations (`{cluster}` named `cluster`) on a channel.
async fn replay_calls(channel: &lapin::Channel, calls: &[Value], cluster: &str) -> anyhow::Result<()> {
    use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
    for call in calls {
        let call = crate::corpus::replace_text(call, "{cluster}", cluster);
        let text = |k: &str| call[k].as_str().unwrap_or_default().to_owned();
        let flag = |k: &str| call[k].as_bool().unwrap_or(false);
        let args = amqp_wire::table_of(&call["arguments"])?;
        match call["method"].as_str() {
            Some("exchange.declare") => {
                let kind = match text("type").as_str() {
                    "direct" => lapin::ExchangeKind::Direct,
                    "fanout" => lapin::ExchangeKind::Fanout,
                    "topic" => lapin::ExchangeKind::Topic,
                    "headers" => lapin::ExchangeKind::Headers,
                    other => lapin::ExchangeKind::Custom(other.to_owned()),
                };
                let options = ExchangeDeclareOptions {
                    passive: flag("passive"),
                    durable: flag("durable"),
                    auto_delete: flag("auto_delete"),
                    internal: flag("internal"),
                    nowait: false,
                };
                channel.exchange_declare(text("exchange").as_str().into(), kind, options, args).await?;
            }
            Some("queue.declare") => {
                let options = QueueDeclareOptions {
                    passive: flag("passive"),
                    durable: flag("durable"),
                    exclusive: flag("exclusive"),
                    auto_delete: flag("auto_delete"),
                    nowait: false,
                };
                channel.queue_declare(text("queue").as_str().into(), options, args).await?;
            }
            Some("queue.bind") => {
                channel
                    .queue_bind(
                        text("queue").as_str().into(),
                        text("exchange").as_str().into(),
                        text("routing_key").as_str().into(),
                        QueueBindOptions::default(),
                        args,
                    )
                    .await?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Each recorded topology declared on the broker, then this release's of
/// the same queue type declared over it, and the other way round: RabbitMQ
/// refuses a redeclare with other arguments (PRECONDITION_FAILED), which
/// is what a rolling upgrade would meet. The publishes are read as
/// messages, to the queue this release consumes.
pub async fn amqp(report: &mut Report, corpus: &Corpus, services: &Services) -> anyhow::Result<()> {
    for topology in corpus.amqp["topologies"].as_array().into_iter().flatten() {
        let name = topology["queue_type"].as_str().unwrap_or("?");
        report.checked += 1;
        let Some(queue_type) = queue_type(name) else {
            report.fail(format!("queue type {name}: not one this release declares"));
            continue;
        };
        let calls = topology["calls"].as_array().cloned().unwrap_or_default();
        for recorded_first in [true, false] {
            let cluster = format!("compat-read-{}", &Uuid::new_v4().simple().to_string()[..12]);
            let here = Topology::new(&cluster).with_queue_type(queue_type);
            let connection = amqp::connect(&services.amqp_url, "cronshard compat check").await?;
            let result = async {
                let channel = connection.create_channel().await?;
                if recorded_first {
                    replay_calls(&channel, &calls, &cluster).await?;
                    declare_all(&here, &channel).await
                } else {
                    declare_all(&here, &channel).await?;
                    replay_calls(&channel, &calls, &cluster).await
                }
            }
            .await;
            let _ = connection.close(200, "done".into()).await;
            delete_all(&here, &services.amqp_url).await?;
            if let Err(e) = result {
                let order = if recorded_first { "declared over the corpus's" } else { "declared under the corpus's" };
                report.fail(format!("{name} topology: this release's {order} is refused: {e}"));
            }
        }
    }
    let main_queue = Topology::new("{cluster}").main_queue;
    for (i, publish) in corpus.amqp["publishes"].as_array().into_iter().flatten().enumerate() {
        let call = &publish["call"];
        report.checked += 1;
        if call["routing_key"] != main_queue.as_str() || call["exchange"] != "" {
            report.fail(format!(
                "publish {i}: sent to exchange {} key {}; this release consumes {main_queue}",
                call["exchange"], call["routing_key"]
            ));
        }
        if call["mandatory"] != true {
            report.fail(format!("publish {i}: not mandatory (an unroutable message would be dropped unseen)"));
        }
        amqp_message(report, &format!("publish {i}"), &publish["input"], call);
    }
    Ok(())
}

/// Runs `read` on its own task: a read that panics (a value a row reader
/// does not know) is a failure, as it would crash the reading process.
async fn guarded<T: Send + 'static>(
    report: &mut Report,
    what: String,
    read: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
) -> Option<T> {
    report.checked += 1;
    match tokio::spawn(read).await {
        Ok(Ok(v)) => Some(v),
        Ok(Err(e)) => {
            report.fail(format!("{what}: {e:#}"));
            None
        }
        Err(e) => {
            let panic = e.try_into_panic().ok();
            let text = panic
                .as_ref()
                .and_then(|p| {
                    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                })
                .unwrap_or_else(|| "cancelled".into());
            report.fail(format!("{what}: the read panicked: {text}"));
            None
        }
    }
}

fn row_instant(row: &Value, column: &str) -> Option<DateTime<Utc>> {
    row[column].as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()).map(|t| t.with_timezone(&Utc))
}

fn row_id(row: &Value, column: &str) -> Option<Uuid> {
    row[column].as_str().and_then(|s| s.parse().ok())
}

/// Reads rows (as the corpus holds them, already restored at `url`) with
/// this release's store, as its API, schedulers and workers read them:
/// jobs and their definitions, every ledger row with its history, decided
/// runs, backfills, calendars, worker heartbeats; then the scheduler's
/// unconfirmed-publish sweep builds messages from the pending rows and
/// their jobs, and a worker starts them.
pub async fn db_rows(report: &mut Report, url: &str, rows: &Value) -> anyhow::Result<()> {
    let pool = store::db::pool(url, 2)?;
    let table = |name: &str| rows[name].as_array().cloned().unwrap_or_default();

    for row in table("jobs") {
        let Some(id) = row_id(&row, "id") else { continue };
        let pool = pool.clone();
        let read = guarded(report, format!("job {id}"), async move {
            let client = pool.get().await?;
            Ok(store::jobs::get(&client, id, None).await?)
        })
        .await;
        let Some(read) = read else { continue };
        let deleted = !row["deleted_at"].is_null();
        let Some(job) = read else {
            if !deleted {
                report.fail(format!("job {id}: not found"));
            }
            continue;
        };
        let mut check = |ok: bool, text: String| {
            if !ok {
                report.fail(format!("job {id}: {text}"));
            }
        };
        check(row["version"] == job.version, format!("version {} read as {}", row["version"], job.version));
        check(row["paused"] == job.paused, format!("paused {} read as {}", row["paused"], job.paused));
        check(
            row["namespace"] == job.namespace.as_str(),
            format!("namespace {} read as {}", row["namespace"], job.namespace),
        );
        check(
            row.get("key").unwrap_or(&Value::Null) == &json!(job.key),
            format!("key {} read as {:?}", row.get("key").unwrap_or(&Value::Null), job.key),
        );
        match serde_json::from_value::<domain::job::JobSpec>(job.spec.clone()) {
            Ok(spec) => {
                check(row["name"] == spec.name.as_str(), format!("name {} read as {}", row["name"], spec.name));
                check(spec.compile(job.created_at).is_ok(), "its schedule does not compile".into());
                // Only what was stored: a field this release adds, at its default, is no change.
                let again = serde_json::to_value(&spec).unwrap_or(Value::Null);
                let fields: Vec<String> = differing_fields(&job.spec, &again)
                    .into_iter()
                    .filter(|f| job.spec.get(f.split(':').next().unwrap_or_default()).is_some())
                    .collect();
                check(fields.is_empty(), format!("its definition reads differently: {}", fields.join("; ")));
            }
            Err(e) => check(false, format!("its definition does not parse: {e}")),
        }
    }

    for row in table("scheduled_jobs") {
        let (Some(job), Some(at)) = (row_id(&row, "job_id"), row_instant(&row, "scheduled_at")) else { continue };
        let pool = pool.clone();
        let what = format!("ledger row {job}@{}", domain::execution::format_instant(at));
        let read = guarded(report, what.clone(), async move {
            let client = pool.get().await?;
            Ok(store::ledger::read::get(&client, job, at).await?)
        })
        .await;
        let Some(read) = read else { continue };
        let Some(e) = read else {
            report.fail(format!("{what}: not found"));
            continue;
        };
        let x = &e.execution;
        let read_as = json!({
            "status": x.status.as_str(), "trigger": x.trigger.as_str(), "attempts": x.attempts,
            "execution_id": x.execution_id, "fire_id": x.fire_id, "reason": x.reason,
            "worker_id": x.worker_id, "http_status": x.http_status, "history": e.history.len(),
        });
        let stored = json!({
            "status": row["status"], "trigger": row["trigger"], "attempts": row["attempts"],
            "execution_id": row["execution_id"], "fire_id": row["fire_id"], "reason": row["reason"],
            "worker_id": row["worker_id"], "http_status": row["http_status"],
            "history": row["history"].as_array().map_or(0, Vec::len),
        });
        let fields = differing_fields(&stored, &read_as);
        if !fields.is_empty() {
            report.fail(format!("{what}: reads differently: {}", fields.join("; ")));
        }
    }

    for row in table("decided_ranges") {
        let (Some(job), Some(first)) = (row_id(&row, "job_id"), row_instant(&row, "first_at")) else { continue };
        let pool = pool.clone();
        let what = format!("decided run {job}@{}", domain::execution::format_instant(first));
        let read = guarded(report, what.clone(), async move {
            let client = pool.get().await?;
            let filter = store::ledger::read::Filter { job_id: Some(job), ..Default::default() };
            Ok(store::ledger::read::list(&client, &filter, None, 1000).await?.0)
        })
        .await;
        let Some(list) = read else { continue };
        let run = list.iter().find(|e| e.scheduled_at == first).and_then(|e| e.run.clone());
        match run {
            Some(run) if row["slots"] == run.slots && Some(run.last_at) == row_instant(&row, "last_at") => {}
            other => report.fail(format!("{what}: read as {other:?}")),
        }
    }

    for row in table("backfills") {
        let Some(id) = row_id(&row, "id") else { continue };
        let pool = pool.clone();
        let read = guarded(report, format!("backfill {id}"), async move {
            let client = pool.get().await?;
            Ok(store::backfills::get(&client, id, None).await?)
        })
        .await;
        let Some(read) = read else { continue };
        match read {
            Some(b) => {
                let read_as = json!({
                    "mode": b.mode.as_str(), "state": b.state.as_str(), "next_index": b.next_index,
                    "slots": b.slots.len(), "job_id": b.job_id, "overlap": b.overlap.map(|o| o.as_str()),
                });
                let stored = json!({
                    "mode": row["mode"], "state": row["state"], "next_index": row["next_index"],
                    "slots": row["slots"].as_array().map_or(0, Vec::len), "job_id": row["job_id"], "overlap": row["overlap"],
                });
                let fields = differing_fields(&stored, &read_as);
                if !fields.is_empty() {
                    report.fail(format!("backfill {id}: reads differently: {}", fields.join("; ")));
                }
            }
            None => report.fail(format!("backfill {id}: not found")),
        }
    }

    for row in table("calendars") {
        let (ns, name) = (row["namespace"].as_str().unwrap_or_default(), row["name"].as_str().unwrap_or_default());
        let (pool, ns_owned, name_owned) = (pool.clone(), ns.to_owned(), name.to_owned());
        let read = guarded(report, format!("calendar {ns}/{name}"), async move {
            let client = pool.get().await?;
            store::calendars::get(&client, &ns_owned, &name_owned).await
        })
        .await;
        if let Some(None) = read {
            report.fail(format!("calendar {ns}/{name}: not found"));
        }
    }

    let workers: Vec<String> =
        table("worker_heartbeats").iter().filter_map(|r| r["worker_id"].as_str().map(str::to_owned)).collect();
    if !workers.is_empty() {
        let pool2 = pool.clone();
        let seen = guarded(report, "worker heartbeats".into(), async move {
            let client = pool2.get().await?;
            Ok(store::heartbeats::seen(&client).await?)
        })
        .await;
        if let Some(seen) = seen {
            for w in &workers {
                if !seen.iter().any(|s| &s.worker_id == w) {
                    report.fail(format!("worker heartbeat {w}: not seen"));
                }
            }
        }
    }

    // The scheduler's sweep publishes the pending rows no publish confirmed,
    // from their rows and their jobs' definitions; a worker then starts them.
    let pending: Vec<Value> = table("scheduled_jobs")
        .into_iter()
        .filter(|r| r["status"] == "pending" && r["published_at"].is_null())
        .collect();
    if !pending.is_empty() {
        let pool2 = pool.clone();
        let leased = guarded(report, "the unconfirmed-publish sweep".into(), async move {
            store::ledger::sweep::lease_unconfirmed(&pool2, Duration::ZERO).await
        })
        .await
        .unwrap_or_default();
        for row in &pending {
            let fire_id = row_id(row, "fire_id");
            let Some((m, attempt)) = leased.iter().find(|(m, _)| Some(m.fire_id) == fire_id) else {
                report.fail(format!("pending row {} {}: no message made from it", row["job_id"], row["scheduled_at"]));
                continue;
            };
            let read_as = json!({
                "execution_id": m.execution_id, "trigger": m.trigger.as_str(), "job_id": m.job_id,
                "scheduled_at": m.scheduled_at.timestamp_millis(), "attempt": attempt,
            });
            let stored = json!({
                "execution_id": row["execution_id"], "trigger": row["trigger"], "job_id": row["job_id"],
                "scheduled_at": row_instant(row, "scheduled_at").map(|t| t.timestamp_millis()),
                "attempt": row["attempts"].as_u64().unwrap_or(0) + 1,
            });
            let fields = differing_fields(&stored, &read_as);
            if !fields.is_empty() {
                report.fail(format!("the message of pending row {}: {}", row["execution_id"], fields.join("; ")));
            }
        }
        let requests: Vec<store::ledger::delivery::StartRequest> =
            leased.iter().map(|(m, attempt)| start_request(m, *attempt)).collect();
        let names: Vec<String> = leased.iter().map(|(m, _)| m.execution_id.clone()).collect();
        let pool2 = pool.clone();
        let started = guarded(report, "a worker's start of the swept rows".into(), async move {
            store::ledger::delivery::start_batch(&pool2, cases::WORKER_ID, requests).await
        })
        .await
        .unwrap_or_default();
        for (name, (start, _)) in names.iter().zip(started) {
            if !matches!(start, store::ledger::delivery::Start::Go) {
                report.fail(format!("a worker's start of {name}: {start:?}, expected to go"));
            }
        }
    }
    Ok(())
}

/// The rows of a corpus on a fresh database with `migrations` applied,
/// read by this release (`db_rows`); a row the schema refuses is a failure.
pub async fn db(
    report: &mut Report,
    corpus: &Corpus,
    services: &Services,
    migrations: &[db::Migration],
) -> anyhow::Result<()> {
    let temp = db::TempDb::create(&services.database_url, "read").await?;
    db::apply(&temp.url, migrations).await?;
    for refused in db::restore(&temp.url, &corpus.db_rows).await? {
        report.fail(format!("a {} row is refused by the schema: {}: {}", refused.table, refused.error, refused.row));
    }
    db_rows(report, &temp.url, &corpus.db_rows).await
}
