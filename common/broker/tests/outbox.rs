//! The outbox against real Postgres and RabbitMQ: rows committed `pending`
//! whose publish was never confirmed are published again, each exactly once
//! however many schedulers sweep at the same moment, without a row lock held
//! while the broker answers; a sweep that dies between its lease and its
//! publish leaves the rows to the next lease; every row published is stamped.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use broker::amqp::Topology;
use broker::outbox;
use broker::publisher::Publisher;
use chrono::{DateTime, TimeDelta, Timelike, Utc};
use deadpool_postgres::Pool;
use domain::slot::Trigger;
use lapin::options::BasicGetOptions;
use serde_json::json;
use store::ledger::claim::{Slot, claim};
use testing::{SeededRng, TestDb};
use uuid::Uuid;

const GRACE: Duration = Duration::from_secs(10);

async fn job(pool: &Pool) -> Uuid {
    let id = Uuid::now_v7();
    let spec = json!({
        "name": "outbox",
        "schedule": { "kind": "interval", "every_ms": 1000 },
        "target": { "kind": "http", "url": "http://127.0.0.1:9/", "method": "POST", "timeout_ms": 1000, "headers": {} },
        "misfire": "skip", "misfire_cap": 1, "paused": false
    });
    let client = pool.get().await.unwrap();
    client.execute("INSERT INTO jobs (id, name, spec) VALUES ($1, 'outbox', $2)", &[&id, &spec]).await.unwrap();
    id
}

/// Claims `n` slots of `job` from `from` (committed `pending`, unpublished,
/// as a claimer leaves them when it dies before its publish) and ages them
/// past the grace period.
async fn unconfirmed_rows(pool: &Pool, job: Uuid, from: DateTime<Utc>, n: i64) -> BTreeSet<Uuid> {
    let slots: Vec<Slot> = (0..n)
        .map(|k| Slot {
            job_id: job,
            scheduled_at: from + TimeDelta::seconds(k),
            job_version: 1,
            trigger: Trigger::Schedule,
            max_runs: None,
        })
        .collect();
    let mut client = pool.get().await.unwrap();
    let claimed = claim(&mut client, "test-node", &slots).await.unwrap();
    assert_eq!(claimed.len() as i64, n, "every slot claimed");
    age(pool).await;
    claimed.into_iter().map(|(m, _)| m.fire_id).collect()
}

/// Moves every unpublished row's `fired_at` back past the grace period: what
/// the passing of that time does to a lease.
async fn age(pool: &Pool) {
    pool.get()
        .await
        .unwrap()
        .execute("UPDATE scheduled_jobs SET fired_at = fired_at - interval '1 minute' WHERE published_at IS NULL", &[])
        .await
        .unwrap();
}

/// Fire ids of the slots in every message in the main queue, with how often
/// each arrived.
async fn drain(channel: &lapin::Channel, topology: &Topology) -> BTreeMap<Uuid, usize> {
    let mut seen = BTreeMap::new();
    while let Some(message) =
        channel.basic_get(topology.main_queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap()
    {
        for m in domain::message::parse_body(&message.delivery.data).unwrap() {
            *seen.entry(m.fire_id).or_default() += 1;
        }
    }
    seen
}

async fn unstamped(pool: &Pool) -> i64 {
    pool.get()
        .await
        .unwrap()
        .query_one("SELECT count(*) FROM scheduled_jobs WHERE published_at IS NULL", &[])
        .await
        .unwrap()
        .get(0)
}

/// Random rounds of rows left unconfirmed, swept by up to four schedulers at
/// once, some of whose sweeps die between the lease and the publish. The
/// model: every row reaches the queue exactly once, unless its first lease
/// was lost, and then once more no sooner than the lease ran out; and every
/// row published ends stamped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unconfirmed_rows_are_published_once_by_concurrent_sweeps_and_a_lost_lease_runs_out() {
    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 8).unwrap();
    let topology = Topology::new(&testing::unique_cluster("outbox"));
    let connection = broker::amqp::connect(&testing::amqp_url(), "outbox test").await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    topology.declare(&channel).await.unwrap();
    let seed: u64 = std::env::var("OUTBOX_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64);
    println!("OUTBOX_SEED={seed}");
    let mut rng = SeededRng::new(seed);
    let job = job(&pool).await;
    let mut from = Utc::now().with_nanosecond(0).unwrap() + TimeDelta::hours(1);
    for round in 0..4 {
        let n = rng.between(1, 120);
        let rows = unconfirmed_rows(&pool, job, from, n).await;
        from += TimeDelta::seconds(n + 1);

        // A sweep that dies after its lease: its rows are nobody's until the lease runs out.
        let lost = rng.one_in(2);
        if lost {
            let leased = store::ledger::sweep::lease_unconfirmed(&pool, GRACE).await.unwrap();
            assert_eq!(leased.len() as i64, n, "round {round}: the lease takes every unconfirmed row");
            let mut publisher = Publisher::new(testing::amqp_url(), "outbox test".into(), topology.clone());
            let none = outbox::republish_unconfirmed(&pool, &mut publisher, GRACE).await.unwrap();
            assert!(none.is_empty(), "round {round}: a leased row was published before its lease ran out");
            age(&pool).await;
        }

        let sweepers = rng.between(1, 4);
        let mut sweeps = Vec::new();
        for s in 0..sweepers {
            let (pool, topology) = (pool.clone(), topology.clone());
            sweeps.push(tokio::spawn(async move {
                let mut publisher = Publisher::new(testing::amqp_url(), format!("sweeper {s}"), topology);
                outbox::republish_unconfirmed(&pool, &mut publisher, GRACE).await.unwrap()
            }));
        }
        let mut published = BTreeMap::<Uuid, usize>::new();
        for sweep in sweeps {
            for m in sweep.await.unwrap() {
                *published.entry(m.fire_id).or_default() += 1;
            }
        }
        assert_eq!(published.keys().copied().collect::<BTreeSet<_>>(), rows, "round {round}: the sweeps' rows");
        assert!(published.values().all(|&k| k == 1), "round {round}: a row published by two sweeps: {published:?}");
        let queued = drain(&channel, &topology).await;
        assert_eq!(queued.keys().copied().collect::<BTreeSet<_>>(), rows, "round {round}: the queue's slots");
        assert!(queued.values().all(|&k| k == 1), "round {round}: a slot queued twice (lost lease: {lost})");
        assert_eq!(unstamped(&pool).await, 0, "round {round}: a published row left unstamped");
    }
}
