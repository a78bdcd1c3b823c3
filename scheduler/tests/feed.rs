//! The change feed against a real Postgres: a transaction that commits after
//! a later one is still seen (an `updated_at > watermark` poll would skip it).

use serde_json::json;
use testing::TestDb;
use uuid::Uuid;

fn spec(name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "schedule": { "kind": "interval", "every_ms": 60000 },
        "target": { "kind": "http", "url": "http://127.0.0.1:9/", "method": "POST", "timeout_ms": 1000, "headers": {} },
        "misfire": "skip", "misfire_cap": 1, "paused": false
    })
}

/// A job firing every 2 s from `anchor`, `fire_once` on misfires.
fn every_2s_from(name: &str, anchor: chrono::DateTime<chrono::Utc>) -> serde_json::Value {
    json!({
        "name": name,
        "schedule": { "kind": "interval", "every_ms": 2000, "start_at": anchor },
        "target": { "kind": "http", "url": "http://127.0.0.1:9/", "method": "POST", "timeout_ms": 1000, "headers": {} },
        "misfire": "fire_once", "misfire_cap": 1, "paused": false
    })
}

/// The history a node's load computes for the job, over a 1 h lookback.
async fn loaded_history(pool: &deadpool_postgres::Pool, id: Uuid) -> scheduler::feed::History {
    let rows = scheduler::feed::fetch(pool, &[id], std::time::Duration::from_secs(3600)).await.unwrap();
    rows[0].history.clone().expect("a loaded job has its history")
}

async fn insert(client: &impl tokio_postgres::GenericClient, id: Uuid, name: &str) {
    client.execute("INSERT INTO jobs (id, name, spec) VALUES ($1, $2, $3)", &[&id, &name, &spec(name)]).await.unwrap();
}

#[tokio::test]
async fn a_transaction_committing_after_a_later_one_is_not_skipped() {
    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 4).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let mut since = scheduler::feed::initial_load(&pool, std::time::Duration::from_secs(60), &tx).await.unwrap();
    drop(tx);
    assert!(rx.recv().await.is_none(), "empty database, nothing loaded");

    // A starts first (older transaction id) but commits last.
    let mut slow = store::db::connect(&db.url).await.unwrap();
    let slow_tx = slow.transaction().await.unwrap();
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    insert(&slow_tx, a, "slow").await;
    let fast = store::db::connect(&db.url).await.unwrap();
    insert(&fast, b, "fast").await;

    let (rows, xmin) = scheduler::feed::poll(&pool, since).await.unwrap();
    assert_eq!(rows.iter().map(|r| r.id).collect::<Vec<_>>(), [b]);
    since = xmin;
    slow_tx.commit().await.unwrap();

    let (rows, _) = scheduler::feed::poll(&pool, since).await.unwrap();
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    assert!(ids.contains(&a), "the late commit was skipped: {ids:?}");
    assert!(rows.iter().all(|r| r.spec.is_some()));

    // A delete (tombstone) reaches the feed as a row without a spec.
    fast.execute("UPDATE jobs SET deleted_at = now(), version = version + 1 WHERE id = $1", &[&b]).await.unwrap();
    let (rows, _) = scheduler::feed::poll(&pool, since).await.unwrap();
    let deleted = rows.iter().find(|r| r.id == b).expect("the delete is fed");
    assert!(deleted.spec.is_none());
}

/// A slot with no ledger row before the job's last one (an owner stopped
/// while it held the slot in memory, and the other owner claimed a later
/// slot) is reported to the node that loads the job, so it is decided again;
/// without it the node started after the last slot and the slot was lost.
#[tokio::test]
async fn a_load_reports_the_first_slot_without_a_row_before_the_last_one() {
    use chrono::{TimeDelta, Timelike, Utc};
    use store::ledger::claim::{Decided, Slot};

    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 4).unwrap();
    let client = pool.get().await.unwrap();
    let id = Uuid::now_v7();
    let now = Utc::now();
    // Slots ahead of now: a claim may be ahead of the due instant too.
    let anchor = now.with_nanosecond(0).unwrap() + TimeDelta::seconds(10);
    let spec = every_2s_from("gappy", anchor);
    client.execute("INSERT INTO jobs (id, name, spec) VALUES ($1, 'gappy', $2)", &[&id, &spec]).await.unwrap();
    let version: i64 = client.query_one("SELECT version FROM jobs WHERE id = $1", &[&id]).await.unwrap().get(0);
    let slot = |secs: i64| anchor + TimeDelta::seconds(secs);
    let record = |secs: &[i64]| -> Vec<Decided> {
        secs.iter()
            .map(|s| {
                Decided::one(
                    Slot {
                        job_id: id,
                        scheduled_at: slot(*s),
                        job_version: version,
                        trigger: domain::slot::Trigger::Schedule,
                        max_runs: None,
                    },
                    domain::slot::Status::Skipped,
                    "test".into(),
                )
            })
            .collect()
    };

    // Every slot up to 50 s has a row: nothing to report.
    let every: Vec<i64> = (0..=25).map(|k| k * 2).collect();
    record_decided_at(&client, &record(&every)).await;
    let h = loaded_history(&pool, id).await;
    assert_eq!((h.last_slot, h.first_gap), (Some(slot(50)), None));
    assert_eq!(h.decided_to(), Some(slot(50)));

    // A row at 54 s with none at 52 s: the load starts before 52 s.
    record_decided_at(&client, &record(&[54])).await;
    let h = loaded_history(&pool, id).await;
    assert_eq!((h.last_slot, h.first_gap), (Some(slot(54)), Some(slot(52))));
    assert!(h.decided_to().is_some_and(|d| d < slot(52) && d > slot(50)));

    // A decided run (an outage's misfires, one record) covers its slots:
    // with 52 s filled, a run of 56-60 s and a row at 64 s leave 62 s as
    // the first slot without a row; a run reaching 70 s is the last slot.
    let run = |first: i64, last: i64| {
        let mut d = record(&[first]).remove(0);
        d.last_at = slot(last);
        d.slots = ((last - first) / 2 + 1) as u64;
        d
    };
    record_decided_at(&client, &record(&[52])).await;
    let recorded = store::ledger::claim::record_decided(&client, "test", &[run(56, 60)]).await.unwrap();
    assert_eq!(recorded, 3, "a run records its slots");
    record_decided_at(&client, &record(&[64])).await;
    let h = loaded_history(&pool, id).await;
    assert_eq!((h.last_slot, h.first_gap), (Some(slot(64)), Some(slot(62))));
    let recorded = store::ledger::claim::record_decided(&client, "test", &[run(62, 70)]).await.unwrap();
    assert_eq!(recorded, 5);
    let h = loaded_history(&pool, id).await;
    assert_eq!((h.last_slot, h.first_gap), (Some(slot(70)), None));
    // The same run again (the job's other owner) records nothing.
    assert_eq!(store::ledger::claim::record_decided(&client, "test", &[run(62, 70)]).await.unwrap(), 0);
}

async fn record_decided_at(client: &deadpool_postgres::Object, rows: &[store::ledger::claim::Decided]) {
    assert_eq!(store::ledger::claim::record_decided(client, "test", rows).await.unwrap(), rows.len() as u64);
}

/// After an edit, a slot the old version claimed and has not finished is
/// the new version's to decide (the load starts its timer there), while
/// the last slot ignores it; a job never edited has no such slot, and a gap
/// older than the window before the last slot is not reported.
#[tokio::test]
async fn a_load_starts_an_edited_job_at_the_old_versions_unfinished_slot() {
    use chrono::{TimeDelta, Timelike, Utc};
    use store::ledger::claim::Slot;

    let db = TestDb::new().await.unwrap();
    let pool = store::db::pool(&db.url, 4).unwrap();
    let mut client = pool.get().await.unwrap();
    let id = Uuid::now_v7();
    let anchor = Utc::now().with_nanosecond(0).unwrap() + TimeDelta::seconds(10);
    let spec = every_2s_from("edited", anchor);
    client.execute("INSERT INTO jobs (id, name, spec) VALUES ($1, 'edited', $2)", &[&id, &spec]).await.unwrap();
    let slot = |secs: i64| anchor + TimeDelta::seconds(secs);
    let claim = |secs: i64, version: i64| Slot {
        job_id: id,
        scheduled_at: slot(secs),
        job_version: version,
        trigger: domain::slot::Trigger::Schedule,
        max_runs: None,
    };
    // Version 1 claims 0 s and 2 s (pending: not delivered yet) and, after
    // a hole at 4 s, every slot from 6 s to 300 s is decided.
    let claimed = store::ledger::claim::claim(&mut client, "test", &[claim(0, 1), claim(2, 1)]).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let later: Vec<_> = (3..=150)
        .map(|k| store::ledger::claim::Decided::one(claim(k * 2, 1), domain::slot::Status::Skipped, "test".into()))
        .collect();
    assert_eq!(store::ledger::claim::record_decided(&client, "test", &later).await.unwrap(), later.len() as u64);
    let h = loaded_history(&pool, id).await;
    assert_eq!(h.unsettled_from, None, "a job never edited has no slot of an older version");
    assert_eq!(h.last_slot, Some(slot(300)));
    assert_eq!(h.first_gap, None, "the hole at 4 s is older than the window before the last slot");

    // The edit: version 2 owns the unfinished slots of version 1.
    client.execute("UPDATE jobs SET spec = $2, version = version + 1 WHERE id = $1", &[&id, &spec]).await.unwrap();
    let h = loaded_history(&pool, id).await;
    assert_eq!(h.unsettled_from, Some(slot(0)), "the old version's pending slot is the new one's to decide");
    assert_eq!(h.last_slot, Some(slot(300)), "decided slots of any version are taken care of");
}
