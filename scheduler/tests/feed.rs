//! The change feed against a real Postgres: a transaction that commits after
//! a later one is still seen (an `updated_at > watermark` poll would skip it).

use common::testing::TestDb;
use serde_json::json;
use uuid::Uuid;

fn spec(name: &str) -> serde_json::Value {
    json!({
        "name": name,
        "schedule": { "kind": "interval", "every_ms": 60000 },
        "target": { "kind": "http", "url": "http://127.0.0.1:9/", "method": "POST", "timeout_ms": 1000, "headers": {} },
        "misfire": "skip", "misfire_cap": 1, "paused": false
    })
}

async fn insert(client: &impl tokio_postgres::GenericClient, id: Uuid, name: &str) {
    client.execute("INSERT INTO jobs (id, name, spec) VALUES ($1, $2, $3)", &[&id, &name, &spec(name)]).await.unwrap();
}

#[tokio::test]
async fn a_transaction_committing_after_a_later_one_is_not_skipped() {
    let db = TestDb::new().await.unwrap();
    let pool = common::db::pool(&db.url, 4).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(16);
    let mut since = scheduler::feed::initial_load(&pool, std::time::Duration::from_secs(60), &tx).await.unwrap();
    drop(tx);
    assert!(rx.recv().await.is_none(), "empty database, nothing loaded");

    // A starts first (older transaction id) but commits last.
    let mut slow = common::db::connect(&db.url).await.unwrap();
    let slow_tx = slow.transaction().await.unwrap();
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    insert(&slow_tx, a, "slow").await;
    let fast = common::db::connect(&db.url).await.unwrap();
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
