//! The dispatcher against the real services: what it writes of a job's
//! decided slots (misfires, calendar exclusions) and when, relative to the
//! claims of the job's later slots.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use domain::slot::{Status, Trigger};
use scheduler::dispatch::{DispatchConfig, Dispatcher, Work};
use store::ledger::claim::{Decided, Slot};
use testing::{SeededRng, TestDb};

struct Rig {
    _db: TestDb,
    pg: deadpool_postgres::Pool,
    redis: Vec<runtime::redis::Pool>,
    cluster: String,
}

impl Rig {
    async fn start() -> Rig {
        let db = TestDb::new().await.unwrap();
        let pg = store::db::pool_with_settings(&db.url, 8, store::db::HOT_PATH_SETTINGS).unwrap();
        let redis = runtime::redis::pools(&[testing::redis_url()]).unwrap();
        let cluster = testing::unique_cluster("dispatch");
        Rig { _db: db, pg, redis, cluster }
    }

    fn dispatcher(&self) -> Dispatcher {
        self.dispatcher_of("node-a")
    }

    fn dispatcher_of(&self, node_id: &str) -> Dispatcher {
        let keys = runtime::redis::Keys::new(&self.cluster);
        Dispatcher::new(
            DispatchConfig {
                node_id: node_id.into(),
                keys,
                verify_after: Duration::from_secs(1),
                outbox_grace: Duration::from_secs(10),
                running_grace: Duration::from_secs(30),
                stranded_after: Duration::from_secs(60),
            },
            self.pg.clone(),
            self.redis.clone(),
            broker::publisher::Publisher::new(
                testing::amqp_url(),
                "dispatch-test".into(),
                broker::amqp::Topology::new(&self.cluster),
            ),
        )
    }

    /// A job whose schedule fires every second, in force from now on.
    async fn job(&self) -> Uuid {
        let id = Uuid::now_v7();
        let spec = json!({
            "name": "j",
            "schedule": { "kind": "interval", "every_ms": 1000 },
            "target": { "kind": "http", "url": "http://127.0.0.1:9/", "method": "POST", "timeout_ms": 1000, "headers": {} },
            "misfire": "fire_once", "misfire_cap": 1, "paused": false
        });
        let client = self.pg.get().await.unwrap();
        client.execute("INSERT INTO jobs (id, name, spec) VALUES ($1, 'j', $2)", &[&id, &spec]).await.unwrap();
        id
    }

    /// One slot of a new job (`job`) per lead, due that many seconds after
    /// the next whole second.
    async fn slots_ahead(&self, leads_secs: &[i64]) -> Vec<Slot> {
        let base = Utc::now().with_nanosecond(0).unwrap() + TimeDelta::seconds(1);
        let mut slots = Vec::new();
        for &lead_secs in leads_secs {
            slots.push(Slot {
                job_id: self.job().await,
                scheduled_at: base + TimeDelta::seconds(lead_secs),
                job_version: 1,
                trigger: Trigger::Schedule,
                max_runs: None,
            });
        }
        slots
    }
}

/// The ledger prefix rule under crashes, randomized: each job has some
/// slots decided without firing (as a load's misfire decision hands them
/// over) followed by a slot to fire, handed to the dispatcher in the order
/// the core sends them, jobs interleaved at random; the dispatcher is then
/// killed (its task aborted, its transactions rolled back) at a random
/// moment. Whatever it had done by then, no job may have a slot claimed
/// while one of its earlier decided slots has no row: a node that died
/// there would leave that slot to nobody (loads start after a job's last
/// ledger slot). Then, run to the end, every decision and every fire has
/// its row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_jobs_decided_slots_are_in_the_ledger_before_any_later_slot_is_claimed_whenever_the_node_dies() {
    let rig = Rig::start().await;
    let seed: u64 = std::env::var("DISPATCH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64);
    let mut rng = SeededRng::new(seed);
    for round in 0..12 {
        // Slots ahead of the jobs' creation: the claim only takes slots of
        // the version in force, which came into force at creation.
        let jobs: Vec<Uuid> = {
            let mut jobs = Vec::new();
            for _ in 0..20 + rng.below(40) {
                jobs.push(rig.job().await);
            }
            jobs
        };
        let base = Utc::now().with_nanosecond(0).unwrap() + TimeDelta::seconds(2);
        let mut decided: HashMap<Uuid, BTreeSet<DateTime<Utc>>> = HashMap::new();
        let mut work = Vec::new();
        for &job in &jobs {
            let skipped = rng.below(400) as i64;
            let slot = |k: i64| Slot {
                job_id: job,
                scheduled_at: base + TimeDelta::seconds(k),
                job_version: 1,
                trigger: Trigger::Misfire,
                max_runs: None,
            };
            let rows: Vec<Decided> =
                (0..skipped).map(|k| Decided::one(slot(k), Status::Skipped, "test: misfire".into())).collect();
            decided.insert(job, rows.iter().map(|d| d.slot.scheduled_at).collect());
            if !rows.is_empty() {
                work.push((job, Work::Record(rows)));
            }
            work.push((job, Work::Fire(vec![slot(skipped)])));
        }
        // Jobs interleaved at random, each job's own items in order.
        let mut queues: Vec<std::collections::VecDeque<Work>> = Vec::new();
        let mut index: HashMap<Uuid, usize> = HashMap::new();
        for (job, item) in work {
            let i = *index.entry(job).or_insert_with(|| {
                queues.push(Default::default());
                queues.len() - 1
            });
            queues[i].push_back(item);
        }
        let (tx, rx) = mpsc::channel::<Work>(1024);
        while queues.iter().any(|q| !q.is_empty()) {
            let live: Vec<usize> = (0..queues.len()).filter(|&i| !queues[i].is_empty()).collect();
            let pick = live[rng.below(live.len() as u64) as usize];
            tx.send(queues[pick].pop_front().unwrap()).await.unwrap();
        }
        let token = CancellationToken::new();
        let kill_after = Duration::from_millis(rng.below(100));
        let task = tokio::spawn(rig.dispatcher().run(rx, token.clone()));
        tokio::time::sleep(kill_after).await;
        task.abort();
        let _ = task.await;
        drop(tx);
        check_prefix(&rig, &jobs, &decided, &format!("seed {seed}, round {round}, killed after {kill_after:?}")).await;
    }

    // Run to the end: every decision and every fire written.
    let jobs = vec![rig.job().await, rig.job().await];
    let base = Utc::now().with_nanosecond(0).unwrap() + TimeDelta::seconds(2);
    let (tx, rx) = mpsc::channel::<Work>(16);
    let token = CancellationToken::new();
    let task = tokio::spawn(rig.dispatcher().run(rx, token.clone()));
    for &job in &jobs {
        let slot = |k: i64| Slot {
            job_id: job,
            scheduled_at: base + TimeDelta::seconds(k),
            job_version: 1,
            trigger: Trigger::Misfire,
            max_runs: None,
        };
        let rows = (0..50).map(|k| Decided::one(slot(k), Status::Skipped, "test".into())).collect();
        tx.send(Work::Record(rows)).await.unwrap();
    }
    // Only the first job fires: the second's decisions are written while
    // the dispatcher has nothing to fire, or at its stop.
    let first = Slot {
        job_id: jobs[0],
        scheduled_at: base + TimeDelta::seconds(50),
        job_version: 1,
        trigger: Trigger::Misfire,
        max_runs: None,
    };
    tx.send(Work::Fire(vec![first])).await.unwrap();
    drop(tx);
    tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the dispatcher stops once its work is done")
        .unwrap();
    let client = rig.pg.get().await.unwrap();
    let rows = |job: Uuid, status: &'static str| {
        let client = &client;
        async move {
            let n: i64 = client
                .query_one("SELECT count(*) FROM scheduled_jobs WHERE job_id = $1 AND status = $2", &[&job, &status])
                .await
                .unwrap()
                .get(0);
            n
        }
    };
    assert_eq!((rows(jobs[0], "skipped").await, rows(jobs[0], "pending").await), (50, 1));
    assert_eq!((rows(jobs[1], "skipped").await, rows(jobs[1], "pending").await), (50, 0));
}

/// A slot's lock lives until a fixed hold past the slot's due instant,
/// whatever lead it was taken with, and keeps the job's other owner off the
/// slot; once that owner has lost the race, the lock is deleted. Held
/// longer (it was 120 s from the race), Redis grew with fire rate × 120 s;
/// held for less than the lead, or expired at once (a TTL in the wrong
/// unit), both owners would take every slot to the ledger's claim. A racer
/// after the delete (ownership moved, a restart) wins the lock but not the
/// slot: the ledger keeps the first claim, so deleting early can cost a
/// claim, never a second fire.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slots_lock_keeps_the_other_owner_off_until_it_lost_and_a_later_racer_cannot_take_the_slot() {
    let rig = Rig::start().await;
    let (mut first, mut second) = (rig.dispatcher_of("node-a"), rig.dispatcher_of("node-b"));
    let slots = rig.slots_ahead(&[2, 4, 8, 25]).await;
    let token = CancellationToken::new();
    first.fire(slots.clone(), &token).await;

    let keys = runtime::redis::Keys::new(&rig.cluster);
    let lock_keys: Vec<String> = slots.iter().map(|s| keys.lock(s.job_id, s.job_version, s.scheduled_at)).collect();
    let mut conn = rig.redis[0].get().await.unwrap();
    let hold = TimeDelta::from_std(scheduler::dispatch::lock::LOCK_HOLD_PAST_DUE).unwrap();
    for (slot, key) in slots.iter().zip(&lock_keys) {
        let read_at = Utc::now();
        let holder: Option<String> = redis::cmd("GET").arg(key).query_async(&mut *conn).await.unwrap();
        let left_ms: i64 = redis::cmd("PTTL").arg(key).query_async(&mut *conn).await.unwrap();
        assert_eq!(holder.as_deref(), Some("node-a"), "the slot due {} is the first racer's", slot.scheduled_at);
        let expected_ms = (slot.scheduled_at + hold - read_at).num_milliseconds();
        // Below by the time the two reads took (a loaded machine), never above.
        assert!(
            (expected_ms - 2_000..=expected_ms + 100).contains(&left_ms),
            "the lock of the slot due {} expires {left_ms} ms from now, expected {expected_ms} ms (its due instant + {hold})",
            slot.scheduled_at
        );
    }

    let client = rig.pg.get().await.unwrap();
    let ids: Vec<Uuid> = slots.iter().map(|s| s.job_id).collect();
    let fire_ids = || async {
        let rows = client
            .query("SELECT job_id, fire_id FROM scheduled_jobs WHERE job_id = ANY($1) ORDER BY job_id", &[&ids])
            .await
            .unwrap();
        rows.iter().map(|r| (r.get::<_, Uuid>(0), r.get::<_, Uuid>(1))).collect::<Vec<_>>()
    };
    let claimed = fire_ids().await;
    assert_eq!(claimed.len(), slots.len(), "one ledger row per slot, the first racer's");

    second.fire(slots.clone(), &token).await;
    assert_eq!(fire_ids().await, claimed, "the owner that lost the races claimed nothing");
    testing::wait_for("the lost races' locks deleted", Duration::from_secs(10), || async {
        let mut conn = rig.redis[0].get().await.ok()?;
        let left: i64 = redis::cmd("EXISTS").arg(&lock_keys).query_async(&mut *conn).await.ok()?;
        (left == 0).then_some(())
    })
    .await;

    let mut after_a_move = rig.dispatcher_of("node-c");
    after_a_move.fire(slots.clone(), &token).await;
    assert_eq!(fire_ids().await, claimed, "a racer after the locks were deleted took a slot already claimed");
}

/// A winner that dies between its lock and its claim (here: locks set as
/// `lock` sets them, for a node that never claims) leaves its slots to the
/// other owner, which checks a lost slot `verify_after` after the race: the
/// slots are claimed and published then, ahead of their due instants, once
/// each and by the loser. Checked only at the due instant, as before, they
/// stayed open until then (20 s and more here), and the checks of a whole
/// herd landed in the instant its deliveries started. Never checked, they
/// would be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_race_whose_winner_never_claims_is_taken_over_soon_after_the_race_ahead_of_the_slot() {
    let rig = Rig::start().await;
    let slots = rig.slots_ahead(&[20, 30, 45]).await;
    let keys = runtime::redis::Keys::new(&rig.cluster);
    let mut conn = rig.redis[0].get().await.unwrap();
    for s in &slots {
        let _: () = redis::cmd("SET")
            .arg(keys.lock(s.job_id, s.job_version, s.scheduled_at))
            .arg("node-gone")
            .arg("NX")
            .arg("PX")
            .arg(120_000)
            .query_async(&mut *conn)
            .await
            .unwrap();
    }

    let (batches, receiver) = mpsc::channel(4);
    let token = CancellationToken::new();
    let loser = tokio::spawn(rig.dispatcher_of("node-b").run(receiver, token.clone()));
    batches.send(Work::Fire(slots.clone())).await.unwrap();
    let ids: Vec<Uuid> = slots.iter().map(|s| s.job_id).collect();
    let client = rig.pg.get().await.unwrap();
    let rows = testing::wait_for("the lost slots claimed and published", Duration::from_secs(15), || async {
        let rows = client
            .query(
                "SELECT job_id, scheduler_node, published_at IS NOT NULL FROM scheduled_jobs WHERE job_id = ANY($1)",
                &[&ids],
            )
            .await
            .ok()?;
        (rows.len() == slots.len() && rows.iter().all(|r| r.get::<_, bool>(2))).then_some(rows)
    })
    .await;
    let taken_at = Utc::now();
    assert!(
        taken_at < slots[0].scheduled_at - TimeDelta::seconds(5),
        "the slots were taken over at {taken_at}, not ahead of the first one's due instant {}",
        slots[0].scheduled_at
    );
    for row in &rows {
        assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("node-b"), "claimed by the loser");
    }
    token.cancel();
    drop(batches);
    loser.await.unwrap();
    let count: i64 =
        client.query_one("SELECT count(*) FROM scheduled_jobs WHERE job_id = ANY($1)", &[&ids]).await.unwrap().get(0);
    assert_eq!(count, slots.len() as i64, "one row per slot");
}

async fn check_prefix(rig: &Rig, jobs: &[Uuid], decided: &HashMap<Uuid, BTreeSet<DateTime<Utc>>>, context: &str) {
    let client = rig.pg.get().await.unwrap();
    let rows = client
        .query("SELECT job_id, scheduled_at, status FROM scheduled_jobs WHERE job_id = ANY($1)", &[&jobs])
        .await
        .unwrap();
    let mut with_row: HashMap<Uuid, BTreeSet<DateTime<Utc>>> = HashMap::new();
    let mut claimed: HashMap<Uuid, DateTime<Utc>> = HashMap::new();
    for r in &rows {
        let (job, at, status): (Uuid, DateTime<Utc>, String) = (r.get(0), r.get(1), r.get(2));
        with_row.entry(job).or_default().insert(at);
        if status == "pending" {
            claimed.entry(job).and_modify(|c| *c = (*c).max(at)).or_insert(at);
        }
    }
    for (job, fired) in &claimed {
        let present = with_row.get(job).cloned().unwrap_or_default();
        let missing: Vec<_> = decided[job].iter().filter(|at| *at < fired && !present.contains(*at)).collect();
        assert!(
            missing.is_empty(),
            "{context}: job {job} has its slot {fired} claimed while {} of its earlier decided slots have no row (first {})",
            missing.len(),
            missing[0]
        );
    }
}
