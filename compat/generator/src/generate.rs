//! Writes a corpus with this build's code: the release it was built from
//! is the one recorded. Each part is made by the code the services run:
//! messages by `broker::properties::encode`, publishes by the scheduler's
//! `broker::publisher::Publisher`, declarations by `broker::amqp::Topology`,
//! the heartbeat by the scheduler's `Membership`, rows and statements by
//! `store`'s functions; what goes to RabbitMQ and Postgres is read off the
//! wire through a recording proxy.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use broker::amqp::{self, Delayed, QueueType, Topology};
use broker::properties::{self, Headers};
use domain::message::FireMessage;
use domain::slot::{Status, Trigger};

use crate::corpus::{Corpus, FORMAT, replace_text};
use crate::proxy::{Recorder, upstream_of, via};
use crate::{Services, amqp_wire, cases, db, pg_wire};

/// Every part of a corpus, made now against `services`; `schema` is the
/// database the scenario runs on (see [`db_scenario`]).
pub async fn corpus(services: &Services, commit: &str, schema: Option<&Path>) -> anyhow::Result<Corpus> {
    let (db_rows, db_statements) = db_scenario(services, schema).await.context("the database scenario")?;
    Ok(Corpus {
        release: json!({ "format": FORMAT, "commit": commit }),
        messages: messages()?,
        redis: redis(services).await.context("the Redis part")?,
        amqp: amqp(services).await.context("the RabbitMQ part")?,
        db_rows,
        db_statements,
    })
}

pub(crate) fn instant(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text).expect("a canonical instant").with_timezone(&Utc)
}

pub(crate) fn id(text: &str) -> Uuid {
    text.parse().expect("a canonical id")
}

/// The headers of a case, as `broker::properties::Headers`.
/// A worker's first start of a claimed message.
pub fn start_request(m: &FireMessage, attempt: u32) -> store::ledger::delivery::StartRequest {
    store::ledger::delivery::StartRequest {
        job_id: m.job_id,
        scheduled_at: m.scheduled_at,
        fire_id: m.fire_id,
        attempt: attempt as i32,
        redelivered: false,
        due_at: m.due_at,
    }
}

pub fn headers_of(input: &Value) -> Headers {
    let mut h = Headers::attempt(input["attempt"].as_u64().unwrap_or(1) as u32);
    h.wait = input["wait"].as_bool().unwrap_or(false);
    h.completion_check = input["completion_check"].as_bool().unwrap_or(false);
    if let Some([at, reason]) = input["failed"].as_array().map(Vec::as_slice) {
        h.failed = Some((instant(at.as_str().unwrap_or_default()), reason.as_str().unwrap_or_default().to_owned()));
    }
    h.expiration = input["expiration_ms"].as_u64().map(Duration::from_millis);
    h
}

/// The fire messages of a case, read by this release's types.
pub fn fire_messages(input: &Value) -> Result<Vec<FireMessage>, String> {
    input["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| serde_json::from_value::<FireMessage>(m.clone()).map_err(|e| e.to_string()))
        .collect()
}

/// Each case encoded as the worker and the publisher encode a message.
fn messages() -> anyhow::Result<Value> {
    let mut out = Vec::new();
    for case in cases::messages() {
        let input = json!({ "messages": case.messages, "headers": case.headers });
        let item = match fire_messages(&input) {
            Ok(messages) => {
                let refs: Vec<&FireMessage> = messages.iter().collect();
                let (body, props) = properties::encode(&refs, &headers_of(&case.headers))?;
                json!({
                    "name": case.name,
                    "input": input,
                    "amqp": { "properties": amqp_wire::properties_json(&props), "body": String::from_utf8(body)? },
                })
            }
            Err(e) => json!({ "name": case.name, "input": input, "unsupported": e }),
        };
        out.push(item);
    }
    Ok(Value::Array(out))
}

fn unique_cluster(what: &str) -> String {
    format!("compat-{what}-{}", &Uuid::new_v4().simple().to_string()[..12])
}

/// The key layout, and the heartbeat a scheduler writes (read back from Redis).
async fn redis(services: &Services) -> anyhow::Result<Value> {
    let template = runtime::redis::Keys::new("{cluster}");
    let keys = json!({
        "node": { "node_id": "{node_id}", "key": template.node("{node_id}") },
        "registry": { "key": template.registry() },
        "lock": {
            "job_id": cases::JOB_A, "version": cases::LOCK_VERSION, "scheduled_at": cases::SLOT,
            "key": template.lock(id(cases::JOB_A), cases::LOCK_VERSION, instant(cases::SLOT)),
        },
    });
    let cluster = unique_cluster("redis");
    let document = scheduler_heartbeat(services, &cluster).await?;
    let keys_of_cluster = runtime::redis::Keys::new(&cluster);
    let heartbeat = json!({
        "node_id": cases::NODE_ID,
        "owned_jobs": cases::OWNED_JOBS,
        "replication_factor": cases::REPLICATION_FACTOR,
        "key": keys_of_cluster.node(cases::NODE_ID),
        "document": document,
        "registry": keys_of_cluster.registry(),
    });
    Ok(json!({ "keys": keys, "heartbeat": replace_text(&heartbeat, &cluster, "{cluster}") }))
}

/// The heartbeat a scheduler node writes, as it is stored: a node of this
/// build runs (through `Node`, as the binary runs it, on a database of its
/// own) until its heartbeat is in Redis.
async fn scheduler_heartbeat(services: &Services, cluster: &str) -> anyhow::Result<String> {
    let temp = db::TempDb::create(&services.database_url, "node").await?;
    store::db::migrate(&temp.url).await?;
    let mut config = scheduler::node::NodeConfig::new(
        cases::NODE_ID.to_owned(),
        cluster.to_owned(),
        temp.url.clone(),
        services.amqp_url.clone(),
    );
    config.replication_factor = cases::REPLICATION_FACTOR;
    let redis_pools = runtime::redis::pools(std::slice::from_ref(&services.redis_url))?;
    let node = scheduler::node::Node { config, pg: store::db::pool(&temp.url, 4)?, redis: redis_pools };
    let token = tokio_util::sync::CancellationToken::new();
    let running = tokio::spawn(node.run(token.clone()));
    let key = runtime::redis::Keys::new(cluster).node(cases::NODE_ID);
    let pools = runtime::redis::pools(std::slice::from_ref(&services.redis_url))?;
    let mut document = None;
    for _ in 0..300 {
        let mut conn = pools[0].get().await?;
        let found: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut *conn).await?;
        if found.is_some() || running.is_finished() {
            document = found;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    token.cancel();
    let stopped = running.await;
    delete_all(&Topology::new(cluster), &services.amqp_url).await?;
    match (document, stopped) {
        (Some(d), _) => Ok(d),
        (None, Ok(Err(e))) => Err(e.context("the scheduler node stopped before its heartbeat")),
        (None, _) => anyhow::bail!("no heartbeat at {key} within 30 s"),
    }
}

pub(crate) fn queue_type_name(t: QueueType) -> &'static str {
    match t {
        QueueType::Classic => "classic",
        QueueType::Quorum => "quorum",
    }
}

/// Declares what a publisher or a worker declares: the topology, and a
/// retry and a wait delay queue.
pub(crate) async fn declare_all(topology: &Topology, channel: &lapin::Channel) -> anyhow::Result<()> {
    topology.declare(channel).await?;
    topology.declare_delay_queue(channel, Delayed::Retry, cases::DELAY_MS).await?;
    topology.declare_delay_queue(channel, Delayed::Wait, cases::DELAY_MS).await?;
    Ok(())
}

/// Deletes a cluster's queues, its delay queues included.
pub(crate) async fn delete_all(topology: &Topology, amqp_url: &str) -> anyhow::Result<()> {
    let connection = amqp::connect(amqp_url, "cronshard compat cleanup").await?;
    let channel = connection.create_channel().await?;
    for kind in [Delayed::Retry, Delayed::Wait] {
        let name = topology.delay_queue(kind, cases::DELAY_MS);
        channel.queue_delete(name.as_str().into(), Default::default()).await?;
    }
    topology.delete(&channel).await?;
    let _ = connection.close(200, "done".into()).await;
    Ok(())
}

/// The declarations of each queue type and the publisher's publishes, as
/// they went over the wire.
async fn amqp(services: &Services) -> anyhow::Result<Value> {
    let mut topologies = Vec::new();
    for queue_type in [QueueType::Classic, QueueType::Quorum] {
        let recorder = Recorder::start(upstream_of(&services.amqp_url)?).await?;
        let cluster = unique_cluster("amqp");
        let topology = Topology::new(&cluster).with_queue_type(queue_type);
        let connection = amqp::connect(&via(&services.amqp_url, recorder.addr), "cronshard compat").await?;
        let declared = declare_all(&topology, &connection.create_channel().await?).await;
        let _ = connection.close(200, "done".into()).await;
        delete_all(&topology, &services.amqp_url).await?;
        declared?;
        let calls: Vec<Value> = recorder.sent().iter().flat_map(|s| amqp_wire::calls(s)).collect();
        topologies.push(json!({
            "queue_type": queue_type_name(queue_type),
            "calls": replace_text(&Value::Array(calls), &cluster, "{cluster}"),
        }));
    }

    // The scheduler's publishes: one message, a bundle, and a later attempt.
    let recorder = Recorder::start(upstream_of(&services.amqp_url)?).await?;
    let cluster = unique_cluster("publish");
    let topology = Topology::new(&cluster);
    let mut publisher = broker::publisher::Publisher::new(
        via(&services.amqp_url, recorder.addr),
        "cronshard compat".into(),
        topology.clone(),
    );
    let by_name = |name: &str| cases::messages().into_iter().find(|c| c.name == name).expect("a case");
    let mut inputs = Vec::new();
    let mut published = Ok(());
    for (case, attempt) in [("scheduled-minimal", 1), ("bundle", 1), ("retry-attempt", 4)] {
        let input = json!({ "messages": by_name(case).messages, "headers": { "attempt": attempt } });
        match fire_messages(&input) {
            Ok(messages) => {
                let batch: Vec<(&FireMessage, u32)> = messages.iter().map(|m| (m, attempt)).collect();
                if published.is_ok() {
                    published = publisher.publish_attempts(&batch).await;
                }
                inputs.push(input);
            }
            Err(e) => inputs.push(json!({ "unsupported": e, "input": input })),
        }
    }
    drop(publisher);
    delete_all(&topology, &services.amqp_url).await?;
    published?;
    let publishes: Vec<Value> =
        recorder.sent().iter().flat_map(|s| amqp_wire::calls(s)).filter(|c| c["method"] == "basic.publish").collect();
    let publishes: Vec<Value> = inputs
        .into_iter()
        .filter(|i| i.get("unsupported").is_none())
        .zip(publishes)
        .map(|(input, call)| json!({ "input": input, "call": call }))
        .collect();
    Ok(json!({
        "topologies": topologies,
        "publishes": replace_text(&Value::Array(publishes), &cluster, "{cluster}"),
    }))
}

/// The database scenario: the jobs, calendar, ledger rows, backfill and
/// worker heartbeat the services write, through `store`'s functions, on a
/// fresh database migrated by this build (`schema` `None`) or by the
/// migrations of the directory `schema` (an older build's statements on a
/// newer schema). Returns every row it left and the statements it prepared.
pub async fn db_scenario(services: &Services, schema: Option<&Path>) -> anyhow::Result<(Value, Value)> {
    let temp = db::TempDb::create(&services.database_url, "gen").await?;
    match schema {
        None => store::db::migrate(&temp.url).await?,
        Some(dir) => db::apply(&temp.url, &db::migrations_in(dir)?).await?,
    }
    let recorder = Recorder::start(upstream_of(&temp.url)?).await?;
    let url = via(&temp.url, recorder.addr);
    scenario(&url).await?;
    let mut statements: Vec<String> = Vec::new();
    for sql in recorder.sent().iter().flat_map(|s| pg_wire::prepared(s)) {
        if !statements.contains(&sql) {
            statements.push(sql);
        }
    }
    Ok((db::dump(&temp.url).await?, json!(statements)))
}

async fn scenario(url: &str) -> anyhow::Result<()> {
    use store::ledger::{changes, claim, delivery};

    let pool = store::db::pool(url, 4)?;
    let heartbeat_client = store::db::connect(url).await?;
    store::heartbeats::beat(&heartbeat_client, cases::WORKER_ID).await?;

    // Jobs, as the API creates them (validated, then serialized).
    let author = store::jobs::Author { name: "compat", token_id: None };
    let audit = store::audit::Context { author, request_id: "compat-request", reason: Some("compat corpus") };
    let mut specs = Vec::new();
    for (job, key, definition) in cases::jobs() {
        let spec = domain::job::JobSpec::from_json_with(&definition, &domain::job::Limits::unrestricted())
            .map_err(|e| anyhow::anyhow!("job {job}: {e:?}"))?;
        specs.push((id(job), key, serde_json::to_value(&spec)?, spec));
    }
    let mut client = pool.get().await?;
    {
        let tx = client.transaction().await?;
        let new: Vec<store::jobs::NewJob> = specs
            .iter()
            .map(|(id, key, json, spec)| store::jobs::NewJob {
                id: *id,
                key: *key,
                name: &spec.name,
                spec: json,
                paused: spec.paused,
                namespace: "default",
                peak_fires_per_second: 0.5,
            })
            .collect();
        store::jobs::create(&tx, &new, &audit).await?;
        tx.commit().await?;
    }
    // Job B's second version.
    let (job_b, key_b, mut spec_b_json, spec_b) = specs[1].clone();
    spec_b_json["schedule"]["every_ms"] = 120_000.into();
    store::jobs::replace(&client, job_b, key_b, &spec_b.name, &spec_b_json, 0.5).await?;

    let calendar: domain::calendar::CalendarSpec = serde_json::from_value(cases::calendar())?;
    store::calendars::put(&client, "default", cases::CALENDAR, &calendar).await?;

    // Job A's slots: claimed, published, started and finished each way.
    let job_a = id(cases::JOB_A);
    let slot = |at: &str, trigger| claim::Slot {
        job_id: job_a,
        scheduled_at: instant(at),
        job_version: 1,
        trigger,
        max_runs: None,
    };
    let slots: Vec<claim::Slot> = cases::CLAIMED.iter().map(|at| slot(at, Trigger::Schedule)).collect();
    let claimed = claim::claim(&mut client, cases::SCHEDULER_ID, &slots).await?;
    anyhow::ensure!(claimed.len() == slots.len(), "claimed {} of {} slots", claimed.len(), slots.len());
    let messages: Vec<&FireMessage> = claimed.iter().map(|(m, _)| m).collect();
    store::ledger::stamp_published(&client, &messages).await?;
    let starts = claimed.iter().map(|(m, attempt)| start_request(m, *attempt)).collect();
    delivery::start_batch(&pool, cases::WORKER_ID, starts).await?;
    let outcomes = [Status::Succeeded, Status::Retrying, Status::Failed, Status::Running, Status::Failed];
    let finishes = claimed
        .iter()
        .zip(outcomes)
        .map(|((m, attempt), status)| {
            let mut f = delivery::FinishRequest::new(m, *attempt, false, status, "{\"ok\":true}".into());
            let ok = matches!(status, Status::Succeeded | Status::Running);
            f.http_status = Some(match status {
                Status::Succeeded => 200,
                Status::Running => 202,
                _ => 503,
            });
            f.response_headers = Some(json!({ "content-type": "application/json" }));
            f.rule = Some("status 2xx".into());
            if !ok {
                f.error = Some("HTTP 503 Service Unavailable".into());
            }
            match status {
                Status::Retrying => f.next_attempt_at = Some(m.scheduled_at + chrono::TimeDelta::seconds(2)),
                // An asynchronous completion's 202: running until the report.
                Status::Running => f.awaiting_until = Some(m.scheduled_at + chrono::TimeDelta::minutes(10)),
                _ => {}
            }
            f
        })
        .collect();
    delivery::finish_batch(&pool, finishes).await?;

    // Slots decided without firing: one missed, one skipped, and a run of skipped ones.
    let decided = [
        claim::Decided::one(slot(cases::MISSED, Trigger::Misfire), Status::Missed, "misfire policy skip".into()),
        claim::Decided::one(
            slot(cases::SKIPPED, Trigger::Schedule),
            Status::Skipped,
            format!("calendar:{}", cases::CALENDAR),
        ),
        claim::Decided {
            slot: slot(cases::SKIPPED_RUN[0], Trigger::Misfire),
            last_at: instant(cases::SKIPPED_RUN[1]),
            slots: 4,
            status: Status::Skipped,
            reason: format!("calendar:{}", cases::CALENDAR),
        },
    ];
    claim::record_decided(&client, cases::SCHEDULER_ID, &decided).await?;

    // A manual fire, a replay of a failed slot, and a backfill of job B.
    let tx = client.transaction().await?;
    changes::insert_manual(&tx, job_a, 1).await?;
    let replay = changes::ReplaySelection {
        statuses: vec![Status::Failed],
        filter: store::ledger::read::Filter { job_id: Some(job_a), ..Default::default() },
        error_contains: None,
        triggers: None,
        retry: Some(json!({ "max_retries": 1 })),
        max: 10,
        slots: Some(vec![instant(cases::CLAIMED[2])]),
        backfill: None,
    };
    changes::replay(&tx, &replay).await?;
    let backfill_slots: Vec<DateTime<Utc>> = cases::BACKFILLED.iter().map(|at| instant(at)).collect();
    let backfill = store::backfills::Backfill {
        id: id(cases::BACKFILL_ID),
        job_id: job_b,
        namespace: "default".into(),
        from: backfill_slots[0],
        to: backfill_slots[1],
        mode: domain::backfill::Mode::Missing,
        newest_first: false,
        rate_per_second: 2.0,
        max_concurrency: 1,
        overlap: Some(domain::job::Overlap::Forbid),
        slots: backfill_slots.clone(),
        next_index: 0,
        passed_over: 0,
        state: domain::backfill::State::Running,
        next_at: Utc::now(),
        created_at: Utc::now(),
        created_by: "compat".into(),
        finished_at: None,
    };
    store::backfills::create(&tx, &backfill).await?;
    changes::start_backfilled(
        &tx,
        backfill.id,
        job_b,
        2,
        cases::SCHEDULER_ID,
        &backfill_slots,
        domain::backfill::Mode::Missing,
    )
    .await?;
    store::backfills::advance(&tx, backfill.id, backfill_slots.len(), 0, Utc::now()).await?;
    tx.commit().await?;
    reads(&pool, &slots).await
}

/// What the schedulers, workers and API read while they run, so that their
/// statements are recorded too. Nothing is due: the sweeps move no row.
async fn reads(pool: &deadpool_postgres::Pool, slots: &[store::ledger::claim::Slot]) -> anyhow::Result<()> {
    use store::ledger::{claim, read, sweep};
    let client = pool.get().await?;
    let (job_a, job_b) = (id(cases::JOB_A), id(cases::JOB_B));
    store::jobs::get(&client, job_a, None).await?;
    store::jobs::feed::by_ids(&client, &[job_a, job_b]).await?;
    store::jobs::feed::live_page(&client, Uuid::nil(), 100).await?;
    store::jobs::feed::changed_since(&client, 0).await?;
    store::calendars::load_all(&client).await?;
    claim::check_slots(&client, slots).await?;
    read::get(&client, job_a, instant(cases::CLAIMED[0])).await?;
    read::list(&client, &read::Filter { job_id: Some(job_a), ..Default::default() }, None, 100).await?;
    store::backfills::get(&client, id(cases::BACKFILL_ID), None).await?;
    store::heartbeats::seen(&client).await?;
    let hour = Duration::from_secs(3600);
    sweep::lease_unconfirmed(pool, hour).await?;
    sweep::recover_running(pool, hour).await?;
    sweep::move_on_stranded(pool, instant("2000-01-01T00:00:00Z")).await?;
    sweep::unretaken(&client, hour, hour).await?;
    Ok(())
}

/// Writes the corpus of this build to `dir`.
pub async fn write(dir: &Path, services: &Services, commit: &str, schema: Option<&Path>) -> anyhow::Result<()> {
    corpus(services, commit, schema).await?.save(dir)
}
