//! Ledger day partitions on a real Postgres: created ahead, a slot on a day
//! with no partition still lands (default partition) and is adopted later,
//! partitions past the retention are dropped.

use chrono::{DateTime, Days, NaiveDate, TimeZone, Utc};
use common::ledger::partitions::{Retention, maintain, partition_name};
use common::testing::TestDb;
use uuid::Uuid;

async fn partitions(client: &tokio_postgres::Client) -> Vec<String> {
    let mut names: Vec<String> = client
        .query(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'scheduled_jobs'::regclass",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    names.sort();
    names
}

fn noon(day: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(12, 0, 0).unwrap())
}

async fn insert_slot(client: &tokio_postgres::Client, at: DateTime<Utc>) -> Uuid {
    let job = Uuid::new_v4();
    client
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status)
             VALUES ($1, $2, $3, 'x', 'pending')",
            &[&job, &at, &Uuid::new_v4()],
        )
        .await
        .unwrap();
    job
}

async fn partition_of(client: &tokio_postgres::Client, job: Uuid) -> String {
    client
        .query_one("SELECT tableoid::regclass::text FROM scheduled_jobs WHERE job_id = $1", &[&job])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn partitions_are_created_ahead_adopted_and_dropped() {
    let db = TestDb::new().await.unwrap();
    let mut client = common::db::connect(&db.url).await.unwrap();
    let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    let retention = Retention { ahead_days: 7, retention_days: 45 };

    let report = maintain(&mut client, noon(today), retention).await.unwrap();
    // Yesterday through today + 8: a slot just after midnight UTC never waits.
    let expected: Vec<String> = (0..=8).map(|d| partition_name(today - Days::new(1) + Days::new(d))).collect();
    assert_eq!(report.created, expected);
    let mut with_default = expected.clone();
    with_default.push("scheduled_jobs_default".into());
    with_default.sort();
    assert_eq!(partitions(&client).await, with_default);

    // Idempotent.
    assert_eq!(maintain(&mut client, noon(today), retention).await.unwrap().created, Vec::<String>::new());

    // A slot 30 days out has no partition yet: the insert still succeeds.
    let far = today + Days::new(30);
    let job = insert_slot(&client, noon(far)).await;
    assert_eq!(partition_of(&client, job).await, "scheduled_jobs_default");
    let slot_today = insert_slot(&client, noon(today)).await;
    assert_eq!(partition_of(&client, slot_today).await, partition_name(today));

    // Later, maintenance creates that day's partition and moves the row in.
    let report = maintain(&mut client, noon(far - Days::new(3)), retention).await.unwrap();
    assert!(report.created.contains(&partition_name(far)), "{report:?}");
    assert_eq!(report.adopted_rows, 1);
    assert_eq!(partition_of(&client, job).await, partition_name(far));

    // 46 days on, today's partition is past the retention and dropped.
    let later = today + Days::new(46);
    let report = maintain(&mut client, noon(later), retention).await.unwrap();
    assert!(report.dropped.contains(&partition_name(today)), "{report:?}");
    assert!(!report.dropped.contains(&partition_name(later - Days::new(45))), "{report:?}");
    let gone: i64 =
        client.query_one("SELECT count(*) FROM scheduled_jobs WHERE job_id = $1", &[&slot_today]).await.unwrap().get(0);
    assert_eq!(gone, 0);
    assert!(!partitions(&client).await.contains(&partition_name(today)));
}
