//! `max_runs` is enforced by the claim against a real Postgres, whatever the
//! claimers believe: nodes whose run counts are stale (they read the ledger
//! before another node's claim committed) claim different slots of one job
//! at once, and the ledger still holds exactly `max_runs` runs.

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use domain::slot::{Status, Trigger};
use serde_json::json;
use store::ledger::claim::{Decided, Slot, claim, record_decided};
use testing::{SeededRng, TestDb};
use uuid::Uuid;

/// A job firing every second from `anchor`, with `max_runs`.
async fn capped_job(client: &impl deadpool_postgres::GenericClient, anchor: DateTime<Utc>, max_runs: u64) -> Uuid {
    let id = Uuid::now_v7();
    let spec = json!({
        "name": "capped",
        "schedule": { "kind": "interval", "every_ms": 1000, "start_at": anchor, "max_runs": max_runs },
        "target": { "kind": "http", "url": "http://127.0.0.1:9/", "method": "POST", "timeout_ms": 1000, "headers": {} },
        "misfire": "skip", "misfire_cap": 1, "paused": false
    });
    client.execute("INSERT INTO jobs (id, name, spec) VALUES ($1, 'capped', $2)", &[&id, &spec]).await.unwrap();
    id
}

async fn runs(client: &impl deadpool_postgres::GenericClient, job: Uuid) -> Vec<DateTime<Utc>> {
    client
        .query(
            concat!(
                "SELECT scheduled_at FROM scheduled_jobs WHERE job_id = $1 AND ",
                store::ledger_counts_as_run!(""),
                " ORDER BY scheduled_at"
            ),
            &[&job],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn slot(job: Uuid, at: DateTime<Utc>, max_runs: u64) -> Slot {
    Slot { job_id: job, scheduled_at: at, job_version: 1, trigger: Trigger::Schedule, max_runs: Some(max_runs) }
}

/// Random rounds: a job with a random `max_runs`, six claimers on their own
/// connections, each claiming random batches of the job's slots at once
/// (overlapping, repeated, in any order), as owners with stale counts would.
/// The model: the ledger holds exactly `max_runs` runs, and each claimer's
/// answers add up to them (no slot claimed twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claimers_with_stale_counts_never_exceed_max_runs() {
    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 8).unwrap();
    let admin = pool.get().await.unwrap();
    let seed: u64 = std::env::var("RUN_CAP_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| Utc::now().timestamp_nanos_opt().unwrap_or_default() as u64);
    let mut rng = SeededRng::new(seed);
    let anchor = Utc::now().with_nanosecond(0).unwrap() + TimeDelta::seconds(5);
    for round in 0..8 {
        let max_runs = rng.between(1, 8) as u64;
        let job = capped_job(&admin, anchor, max_runs).await;
        // Runs of other kinds are not counted: a manual fire and a slot decided without firing.
        store::ledger::changes::insert_manual(&admin, job, 1).await.unwrap();
        let decided = Decided::one(slot(job, anchor, max_runs), Status::Skipped, "test: decided".into());
        assert_eq!(record_decided(&admin, "test", &[decided]).await.unwrap(), 1);
        let mut claimers = Vec::new();
        for c in 0..6 {
            let mut rng = rng.fork();
            let pool = pool.clone();
            claimers.push(tokio::spawn(async move {
                let mut client = pool.get().await.unwrap();
                let mut won = Vec::new();
                for _ in 0..6 {
                    let batch: Vec<Slot> = (0..rng.between(1, 4))
                        .map(|_| slot(job, anchor + TimeDelta::seconds(rng.between(1, 16)), max_runs))
                        .map(|s| (s.scheduled_at, s))
                        .collect::<std::collections::BTreeMap<_, _>>()
                        .into_values()
                        .collect();
                    let node = format!("claimer-{c}");
                    won.extend(
                        claim(&mut client, &node, &batch).await.unwrap().into_iter().map(|(m, _)| m.scheduled_at),
                    );
                }
                won
            }));
        }
        let mut won: Vec<DateTime<Utc>> = Vec::new();
        for c in claimers {
            won.extend(c.await.unwrap());
        }
        won.sort();
        let ledger = runs(&admin, job).await;
        let context = format!("seed {seed} (RUN_CAP_SEED), round {round}, max_runs {max_runs}");
        assert_eq!(ledger.len() as u64, max_runs, "{context}: runs in the ledger {ledger:?}");
        assert_eq!(won, ledger, "{context}: what the claimers were told they took");
    }
}

/// One batch holding a slot the ledger already counts and new ones: the
/// counted slot takes no second share of the cap, so the batch takes
/// exactly the runs left, earliest first; a run cancelled later frees its
/// share for one slot.
#[tokio::test]
async fn a_batch_takes_exactly_the_runs_left_earliest_first() {
    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 2).unwrap();
    let mut client = pool.get().await.unwrap();
    let anchor = Utc::now().with_nanosecond(0).unwrap() + TimeDelta::seconds(5);
    let at = |k: i64| anchor + TimeDelta::seconds(k);
    let job = capped_job(&client, anchor, 3).await;
    let taken = |claimed: Vec<(domain::message::FireMessage, u32)>| -> Vec<DateTime<Utc>> {
        claimed.into_iter().map(|(m, _)| m.scheduled_at).collect()
    };
    assert_eq!(taken(claim(&mut client, "a", &[slot(job, at(1), 3)]).await.unwrap()), [at(1)]);
    let batch: Vec<Slot> = [4, 1, 3, 2].into_iter().map(|k| slot(job, at(k), 3)).collect();
    assert_eq!(taken(claim(&mut client, "b", &batch).await.unwrap()), [at(2), at(3)]);
    assert_eq!(runs(&client, job).await, [at(1), at(2), at(3)]);
    // A cancelled run frees its share: the next claim takes one slot, not two.
    client
        .execute(
            "UPDATE scheduled_jobs SET status = 'skipped', reason = 'superseded' WHERE job_id = $1 AND scheduled_at = $2",
            &[&job, &at(3)],
        )
        .await
        .unwrap();
    assert_eq!(runs(&client, job).await, [at(1), at(2)]);
    let batch: Vec<Slot> = [4, 5].into_iter().map(|k| slot(job, at(k), 3)).collect();
    assert_eq!(taken(claim(&mut client, "c", &batch).await.unwrap()), [at(4)]);
    assert_eq!(runs(&client, job).await, [at(1), at(2), at(4)]);
}
