//! Ledger day partitions on a real Postgres: created ahead, a slot on a day
//! with no partition still lands (default partition) and is adopted later;
//! the retention per outcome: a day past the shorter retention is compacted
//! (its rows that succeeded removed by swapping in a copy of the others), a
//! day past the longer one dropped but for rows not final yet; compaction
//! stopped between its steps, blocked by a lock, run by several nodes at once
//! or against a random history loses and duplicates nothing.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Days, NaiveDate, TimeZone, Utc};
use domain::slot::Status;
use store::ledger::partitions::{CompactionStep, Retention, compact_interrupted, maintain, partition_name};
use testing::TestDb;
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

/// Tables a compaction works in; none once it is done.
async fn work_tables(client: &tokio_postgres::Client) -> Vec<String> {
    client
        .query(
            "SELECT relname::text FROM pg_class WHERE relkind = 'r' AND (relname LIKE 'scheduled\\_jobs\\_%\\_compact'
                OR relname LIKE 'scheduled\\_jobs\\_%\\_changes' OR relname LIKE 'scheduled\\_jobs\\_%\\_replaced')
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn noon(day: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(12, 0, 0).unwrap())
}

fn at(day: NaiveDate, second: u32) -> DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).unwrap()) + chrono::TimeDelta::seconds(second.into())
}

async fn insert_slot(client: &tokio_postgres::Client, at: DateTime<Utc>) -> Uuid {
    insert(client, at, Status::Pending).await
}

async fn insert(client: &tokio_postgres::Client, at: DateTime<Utc>, status: Status) -> Uuid {
    let job = Uuid::new_v4();
    // Skipped rows as a change cancels them: in the partial index of rows to re-take.
    let reason = (status == Status::Skipped).then_some("superseded");
    client
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, reason)
             VALUES ($1, $2, $3, 'x', $4, $5)",
            &[&job, &at, &Uuid::new_v4(), &status.as_str(), &reason],
        )
        .await
        .unwrap();
    job
}

async fn set_status(client: &tokio_postgres::Client, key: Key, status: Status) {
    let n = client
        .execute(
            "UPDATE scheduled_jobs SET status = $3, attempts = attempts + 1 WHERE job_id = $1 AND scheduled_at = $2",
            &[&key.0, &key.1, &status.as_str()],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
}

async fn partition_of(client: &tokio_postgres::Client, job: Uuid) -> String {
    client
        .query_one("SELECT tableoid::regclass::text FROM scheduled_jobs WHERE job_id = $1", &[&job])
        .await
        .unwrap()
        .get(0)
}

type Key = (Uuid, DateTime<Utc>);

/// Every row of the ledger: its status and attempts.
async fn ledger(client: &tokio_postgres::Client) -> BTreeMap<Key, (Status, i32)> {
    client
        .query("SELECT job_id, scheduled_at, status, attempts FROM scheduled_jobs", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), (r.get(2), r.get(3))))
        .collect()
}

/// The partition's indexes as (parent index, name), sorted.
async fn indexes(client: &tokio_postgres::Client, partition: &str) -> Vec<(String, String)> {
    client
        .query(
            "SELECT i.inhparent::regclass::text, c.relname::text FROM pg_index x
             JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_inherits i ON i.inhrelid = x.indexrelid
             WHERE x.indrelid = $1::text::regclass AND x.indisvalid ORDER BY 1",
            &[&partition],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn plan(client: &tokio_postgres::Client, query: &str) -> String {
    client
        .query(&format!("EXPLAIN {query}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Creates the partitions around `day` (yesterday to a week ahead of it).
async fn partitions_around(client: &mut tokio_postgres::Client, day: NaiveDate) {
    let keep_all = Retention { ahead_days: 7, succeeded_days: 10_000, unsuccessful_days: 10_000 };
    maintain(client, noon(day), keep_all).await.unwrap();
}

/// What the retention leaves of `rows` at `now`, for a ledger whose
/// partitions past the shorter retention were not compacted before.
fn expected_after(rows: &BTreeMap<Key, (Status, i32)>, now: NaiveDate) -> BTreeMap<Key, (Status, i32)> {
    let r = Retention::default();
    rows.iter()
        .filter(|((_, at), (status, _))| {
            let day = at.date_naive();
            if day < r.oldest_kept_day(noon(now)) {
                !status.is_final()
            } else if day < r.oldest_succeeded_day(noon(now)) {
                *status != Status::Succeeded
            } else {
                true
            }
        })
        .map(|(k, v)| (*k, *v))
        .collect()
}

#[tokio::test]
async fn partitions_are_created_ahead_adopted_and_dropped() {
    let db = TestDb::new().await.unwrap();
    let mut client = store::db::connect(&db.url).await.unwrap();
    let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    let retention = Retention { ahead_days: 7, succeeded_days: 45, unsuccessful_days: 45 };

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

    // Vacuumed as they are written, unthrottled: a day's partition takes
    // three row versions per slot, and the sweeps walk the dead ones. Pages
    // left 30% free by claims, so a slot's updates stay on its page.
    let options: Option<Vec<String>> = client
        .query_one("SELECT reloptions FROM pg_class WHERE relname = $1", &[&partition_name(today)])
        .await
        .unwrap()
        .get(0);
    let options = options.unwrap_or_default();
    for wanted in ["autovacuum_vacuum_scale_factor=0.05", "autovacuum_vacuum_cost_delay=0", "fillfactor=70"] {
        assert!(options.iter().any(|o| o == wanted), "{wanted} missing from {options:?}");
    }

    // A slot 30 days out has no partition yet: the insert still succeeds.
    let far = today + Days::new(30);
    let job = insert_slot(&client, noon(far)).await;
    assert_eq!(partition_of(&client, job).await, "scheduled_jobs_default");
    let slot_today = insert(&client, noon(today), Status::Succeeded).await;
    assert_eq!(partition_of(&client, slot_today).await, partition_name(today));

    // Later, maintenance creates that day's partition and moves the row in.
    let report = maintain(&mut client, noon(far - Days::new(3)), retention).await.unwrap();
    assert!(report.created.contains(&partition_name(far)), "{report:?}");
    assert_eq!(report.adopted_rows, 1);
    assert_eq!(partition_of(&client, job).await, partition_name(far));

    // 46 days on, today's partition is past the retention (both retentions
    // alike: nothing to compact) and dropped.
    let later = today + Days::new(46);
    let report = maintain(&mut client, noon(later), retention).await.unwrap();
    assert!(report.dropped.contains(&partition_name(today)), "{report:?}");
    assert!(report.compacted.is_empty(), "{report:?}");
    assert!(!report.dropped.contains(&partition_name(later - Days::new(45))), "{report:?}");
    let gone: i64 =
        client.query_one("SELECT count(*) FROM scheduled_jobs WHERE job_id = $1", &[&slot_today]).await.unwrap().get(0);
    assert_eq!(gone, 0);
    assert!(!partitions(&client).await.contains(&partition_name(today)));
}

#[tokio::test]
async fn rows_that_did_not_succeed_are_kept_longer_and_unfinished_rows_are_never_deleted() {
    let db = TestDb::new().await.unwrap();
    let mut client = store::db::connect(&db.url).await.unwrap();
    let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    let day = |age: u64| today - Days::new(age);
    for age in [100, 60, 44, 0] {
        partitions_around(&mut client, day(age)).await;
    }
    // Each status three times on a day 100 days old, 60 days old, 44 days
    // old (within both retentions) and today.
    for age in [100, 60, 44, 0] {
        for (i, status) in Status::ALL.into_iter().enumerate() {
            for k in 0..3 {
                insert(&client, at(day(age), (i * 1000 + k * 7) as u32), status).await;
            }
        }
    }
    // Days with no partition: rows in the default partition, under the same rules.
    for age in [70, 120] {
        for status in [Status::Succeeded, Status::Failed, Status::Running] {
            let job = insert(&client, noon(day(age)), status).await;
            assert_eq!(partition_of(&client, job).await, "scheduled_jobs_default");
        }
    }
    // Decided runs (an outage's misfires): kept while their last slot is
    // within the unsuccessful retention, whatever their first.
    for (first, last) in [(100, 95), (100, 60), (44, 44)] {
        client
            .execute(
                "INSERT INTO decided_ranges (job_id, first_at, last_at, slots, job_version, status, reason)
                 VALUES ($1, $2, $3, 2, 1, 'skipped', 'misfire policy skip')",
                &[&Uuid::now_v7(), &noon(day(first)), &(noon(day(last)) + chrono::TimeDelta::seconds(1))],
            )
            .await
            .unwrap();
    }
    let before = ledger(&client).await;
    let d60 = partition_name(day(60));
    let indexes_before = indexes(&client, &d60).await;
    // One per index of the ledger (partial and expression ones included).
    let ledger_indexes: i64 = client
        .query_one("SELECT count(*) FROM pg_index WHERE indrelid = 'scheduled_jobs'::regclass", &[])
        .await
        .unwrap()
        .get(0);
    assert!(ledger_indexes >= 4);
    assert_eq!(indexes_before.len() as i64, ledger_indexes, "{indexes_before:?}");

    let report = maintain(&mut client, noon(today), Retention::default()).await.unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    // Every day partition 46 to 90 days old is compacted, every one older dropped.
    let compacted: Vec<&str> = report.compacted.iter().map(|c| c.partition.as_str()).collect();
    assert!(compacted.contains(&d60.as_str()), "{report:?}");
    assert!(!compacted.contains(&partition_name(day(44)).as_str()), "{report:?}");
    assert!(compacted.iter().all(|p| *p > partition_name(day(91)).as_str() && *p < partition_name(day(45)).as_str()));
    assert!(report.dropped.contains(&partition_name(day(100))), "{report:?}");
    let c60 = report.compacted.iter().find(|c| c.partition == d60).unwrap();
    assert_eq!(c60.kept_rows, 18, "six statuses kept, three rows each");
    // The running and retrying rows of the dropped day (and its pending ones).
    assert_eq!(report.unfinished_rows_kept, 9);
    // Default partition: the succeeded row 70 days old, the succeeded and failed ones 120 days old.
    assert_eq!(report.expired_default_rows, 3);
    assert_eq!(report.expired_runs, 1, "the run that ended 95 days ago");
    let runs_left: i64 = client.query_one("SELECT count(*) FROM decided_ranges", &[]).await.unwrap().get(0);
    assert_eq!(runs_left, 2);

    let after = ledger(&client).await;
    assert_eq!(after, expected_after(&before, today));
    // Spelled out for the 60-day-old day: every row that did not succeed, none that did.
    let of_day = |rows: &BTreeMap<Key, (Status, i32)>, age: u64| {
        rows.iter().filter(|((_, at), _)| at.date_naive() == day(age)).map(|(k, v)| (*k, *v)).collect::<Vec<_>>()
    };
    let kept60 = of_day(&after, 60);
    assert_eq!(kept60.len(), 18);
    assert!(kept60.iter().all(|(_, (s, _))| *s != Status::Succeeded));
    assert_eq!(
        kept60,
        of_day(&before, 60).into_iter().filter(|(_, (s, _))| *s != Status::Succeeded).collect::<Vec<_>>()
    );
    assert_eq!(of_day(&after, 44), of_day(&before, 44), "a day within both retentions is untouched");
    assert_eq!(of_day(&after, 0), of_day(&before, 0), "today is untouched");
    let kept100 = of_day(&after, 100);
    assert_eq!(kept100.len(), 9);
    assert!(kept100.iter().all(|(_, (s, _))| !s.is_final()));
    for ((job, _), _) in &kept100 {
        assert_eq!(partition_of(&client, *job).await, "scheduled_jobs_default");
    }
    assert!(!partitions(&client).await.contains(&partition_name(day(100))));

    // The compacted partition: same name, same indexes (attached to the
    // parent's, partial ones included, under their old names), in use.
    assert!(partitions(&client).await.contains(&d60));
    assert_eq!(indexes(&client, &d60).await, indexes_before);
    assert_eq!(work_tables(&client).await, Vec::<String>::new());
    client.batch_execute("SET enable_seqscan = off").await.unwrap();
    let (from, to) = (at(day(60), 0).to_rfc3339(), at(day(59), 0).to_rfc3339());
    let (failed_job, failed_at) = kept60.iter().find(|(_, (s, _))| *s == Status::Failed).unwrap().0;
    for (query, index) in [
        (
            format!(
                "SELECT * FROM scheduled_jobs WHERE job_id = '{failed_job}' AND scheduled_at = '{}'",
                failed_at.to_rfc3339()
            ),
            format!("{d60}_pkey"),
        ),
        (
            format!(
                "SELECT * FROM scheduled_jobs WHERE status = 'failed' AND scheduled_at < '{to}' AND scheduled_at >= '{from}'"
            ),
            format!("{d60}_status_scheduled_at_idx"),
        ),
        (
            format!(
                "SELECT * FROM scheduled_jobs WHERE status = 'skipped' AND reason IN ('superseded', 'paused')
                 AND scheduled_at >= '{from}' AND scheduled_at < '{to}'"
            ),
            format!("{d60}_scheduled_at_idx"),
        ),
        (
            format!(
                "SELECT * FROM scheduled_jobs WHERE status = 'pending' AND published_at IS NULL AND fired_at < now()
                 AND scheduled_at >= '{from}' AND scheduled_at < '{to}'"
            ),
            format!("{d60}_fired_at_idx"),
        ),
    ] {
        let plan = plan(&client, &query).await;
        assert!(plan.contains(&index), "{query}\n{plan}");
    }
    client.batch_execute("RESET enable_seqscan").await.unwrap();

    // Run again (and again): nothing left to do, nothing changes.
    for _ in 0..2 {
        let again = maintain(&mut client, noon(today), Retention::default()).await.unwrap();
        assert!(again.compacted.is_empty() && again.dropped.is_empty() && again.failed.is_empty(), "{again:?}");
        assert_eq!(again.expired_default_rows, 0);
        assert_eq!(ledger(&client).await, after);
    }

    // A row left unfinished in the default partition goes once it is final.
    let (job, at100) = kept100.iter().find(|(_, (s, _))| *s == Status::Running).unwrap().0;
    set_status(&client, (job, at100), Status::Succeeded).await;
    let report = maintain(&mut client, noon(today), Retention::default()).await.unwrap();
    assert_eq!(report.expired_default_rows, 1);
    assert!(!ledger(&client).await.contains_key(&(job, at100)));
}

/// A compaction stopped after each of its steps (a crash, a restart) while
/// rows of the day are written: at every point the ledger holds every row
/// once, as last written, and the finished compaction keeps the writes.
#[tokio::test]
async fn a_compaction_stopped_between_steps_loses_and_duplicates_nothing() {
    let db = TestDb::new().await.unwrap();
    let mut client = store::db::connect(&db.url).await.unwrap();
    let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    let day = today - Days::new(60);
    partitions_around(&mut client, day).await;
    let mut second = 0;
    let mut next = || {
        second += 10;
        at(day, second)
    };
    let mut keys: HashMap<Status, Vec<Key>> = HashMap::new();
    for status in Status::ALL {
        for _ in 0..5 {
            let at = next();
            keys.entry(status).or_default().push((insert(&client, at, status).await, at));
        }
    }
    let k = |status: Status, i: usize| keys[&status][i];

    compact_interrupted(&mut client, day, CompactionStep::Track).await.unwrap();
    // Written after the changes are tracked, before the copy.
    set_status(&client, k(Status::Failed, 0), Status::Pending).await; // a replay
    set_status(&client, k(Status::Pending, 0), Status::Succeeded).await;
    insert(&client, next(), Status::Skipped).await; // a resume records a paused period
    let mut model = ledger(&client).await;
    assert_eq!(model.len(), 36);
    drop(client); // the process dies

    let mut client = store::db::connect(&db.url).await.unwrap();
    assert_eq!(ledger(&client).await, model);
    let done = compact_interrupted(&mut client, day, CompactionStep::Copy).await.unwrap();
    assert!(done.is_none());
    assert_eq!(work_tables(&client).await.len(), 2);
    // Written after the copy, before the swap.
    set_status(&client, k(Status::Failed, 0), Status::Running).await;
    set_status(&client, k(Status::Running, 0), Status::Succeeded).await;
    set_status(&client, k(Status::Retrying, 0), Status::Failed).await;
    set_status(&client, k(Status::Failed, 1), Status::Pending).await;
    insert(&client, next(), Status::Missed).await;
    insert(&client, next(), Status::Succeeded).await;
    model = ledger(&client).await;
    assert_eq!(model.len(), 38);
    drop(client);

    // The next maintenance finishes it.
    let mut client = store::db::connect(&db.url).await.unwrap();
    assert_eq!(ledger(&client).await, model);
    let report = maintain(&mut client, noon(today), Retention::default()).await.unwrap();
    // Its empty neighbours are only marked.
    let swapped: Vec<&str> =
        report.compacted.iter().filter(|c| c.kept_rows > 0).map(|c| c.partition.as_str()).collect();
    assert_eq!(swapped, vec![partition_name(day)]);
    let after = ledger(&client).await;
    assert_eq!(after, expected_after(&model, today));
    assert_eq!(after[&k(Status::Failed, 0)].0, Status::Running);
    assert_eq!(after[&k(Status::Retrying, 0)].0, Status::Failed);
    assert!(!after.contains_key(&k(Status::Running, 0)) && !after.contains_key(&k(Status::Pending, 0)));
    assert_eq!(work_tables(&client).await, Vec::<String>::new());
    let triggers: i64 = client
        .query_one("SELECT count(*) FROM pg_trigger WHERE tgname = 'cronshard_compaction_track'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(triggers, 0);

    // Written after the compaction: the partition takes writes as before.
    set_status(&client, k(Status::Failed, 0), Status::Succeeded).await;
    let again = maintain(&mut client, noon(today), Retention::default()).await.unwrap();
    assert!(again.compacted.is_empty(), "compacted once only: {again:?}");
    assert_eq!(ledger(&client).await[&k(Status::Failed, 0)].0, Status::Succeeded);
}

/// Stopped after the swap, before the replaced table is dropped: the ledger
/// is compacted, and the next run drops the leftover.
#[tokio::test]
async fn a_replaced_partition_left_by_a_crash_is_dropped_by_the_next_run() {
    let db = TestDb::new().await.unwrap();
    let mut client = store::db::connect(&db.url).await.unwrap();
    let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    let day = today - Days::new(60);
    partitions_around(&mut client, day).await;
    partitions_around(&mut client, today).await;
    for (i, status) in Status::ALL.into_iter().enumerate() {
        insert(&client, at(day, i as u32), status).await;
    }
    let before = ledger(&client).await;
    let done = compact_interrupted(&mut client, day, CompactionStep::Swap).await.unwrap().unwrap();
    assert_eq!(done.kept_rows, 6);
    assert_eq!(ledger(&client).await, expected_after(&before, today));
    assert_eq!(work_tables(&client).await, vec![format!("{}_replaced", partition_name(day))]);
    drop(client);

    let mut client = store::db::connect(&db.url).await.unwrap();
    let report = maintain(&mut client, noon(today), Retention::default()).await.unwrap();
    assert!(!report.compacted.iter().any(|c| c.partition == partition_name(day)), "{report:?}");
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(work_tables(&client).await, Vec::<String>::new());
    assert_eq!(ledger(&client).await, expected_after(&before, today));
}

/// The swap waits for no long reader: it gives up after its lock timeout,
/// the ledger is as it was, and the next run completes it.
#[tokio::test]
async fn a_swap_that_cannot_get_its_lock_gives_up_and_the_next_run_completes_it() {
    let db = TestDb::new().await.unwrap();
    let mut client = store::db::connect(&db.url).await.unwrap();
    let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    let day = today - Days::new(60);
    partitions_around(&mut client, day).await;
    partitions_around(&mut client, today).await;
    for (i, status) in Status::ALL.into_iter().enumerate() {
        insert(&client, at(day, i as u32), status).await;
    }
    let before = ledger(&client).await;

    let mut reader = store::db::connect(&db.url).await.unwrap();
    let long_read = reader.transaction().await.unwrap();
    long_read.query("SELECT count(*) FROM scheduled_jobs", &[]).await.unwrap();
    let report = maintain(&mut client, noon(today), Retention::default()).await.unwrap();
    assert!(!report.compacted.iter().any(|c| c.partition == partition_name(day)), "{report:?}");
    assert!(
        report.failed.iter().any(|f| f.starts_with(&partition_name(day)) && f.contains("lock timeout")),
        "{report:?}"
    );
    assert_eq!(ledger(&client).await, before);
    long_read.commit().await.unwrap();

    let report = maintain(&mut client, noon(today), Retention::default()).await.unwrap();
    assert!(report.failed.is_empty(), "{report:?}");
    assert_eq!(report.compacted.iter().map(|c| c.partition.clone()).collect::<Vec<_>>(), vec![partition_name(day)]);
    assert_eq!(ledger(&client).await, expected_after(&before, today));
}

/// Every scheduler node runs maintenance: at once, the work is done once.
#[tokio::test]
async fn nodes_maintaining_at_once_compact_each_partition_once() {
    let db = TestDb::new().await.unwrap();
    let mut client = store::db::connect(&db.url).await.unwrap();
    let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    for age in [100, 60, 50] {
        partitions_around(&mut client, today - Days::new(age)).await;
        for (i, status) in Status::ALL.into_iter().enumerate() {
            insert(&client, at(today - Days::new(age), i as u32), status).await;
        }
    }
    let before = ledger(&client).await;
    let mut nodes = Vec::new();
    for _ in 0..3 {
        nodes.push(store::db::connect(&db.url).await.unwrap());
    }
    let reports = futures::future::join_all(
        nodes.iter_mut().map(|node| async { maintain(node, noon(today), Retention::default()).await.unwrap() }),
    )
    .await;
    let mut compacted: Vec<String> =
        reports.iter().flat_map(|r| r.compacted.iter().map(|c| c.partition.clone())).collect();
    let mut dropped: Vec<String> = reports.iter().flat_map(|r| r.dropped.clone()).collect();
    let compacted_len = compacted.len();
    compacted.sort();
    compacted.dedup();
    dropped.sort();
    let dropped_len = dropped.len();
    dropped.dedup();
    assert_eq!((compacted.len(), dropped.len()), (compacted_len, dropped_len), "{reports:?}");
    assert!(compacted.contains(&partition_name(today - Days::new(60))), "{reports:?}");
    assert!(dropped.contains(&partition_name(today - Days::new(100))), "{reports:?}");
    assert_eq!(ledger(&client).await, expected_after(&before, today));
    // The lock is released: a later run gets it and finds nothing to do.
    let later = maintain(&mut nodes[0], noon(today), Retention::default()).await.unwrap();
    assert!(later.compacted.is_empty() && later.failed.is_empty(), "{later:?}");
}

/// A small deterministic generator: the seed is printed, so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn status(&mut self) -> Status {
        Status::ALL[self.below(Status::ALL.len() as u64) as usize]
    }
}

/// The ledger's retention as a model: day partitions (compacted or not) and
/// the default partition, brought forward by whole days.
#[derive(Default)]
struct Model {
    rows: BTreeMap<Key, (Status, i32)>,
    /// Days with a partition, and whether it is compacted.
    partitions: BTreeMap<NaiveDate, bool>,
}

impl Model {
    fn maintain(&mut self, now: NaiveDate, r: Retention) {
        let (short, long) = (r.oldest_succeeded_day(noon(now)), r.oldest_kept_day(noon(now)));
        let mut wanted: Vec<NaiveDate> =
            (0..=r.ahead_days + 1).map(|d| now - Days::new(1) + Days::new(d.into())).collect();
        wanted.extend(self.rows.keys().map(|(_, at)| at.date_naive()).filter(|d| !self.partitions.contains_key(d)));
        for d in wanted.into_iter().filter(|d| *d >= short) {
            self.partitions.entry(d).or_insert(false);
        }
        let partitions = self.partitions.clone();
        self.rows.retain(|(_, at), (status, _)| {
            let d = at.date_naive();
            match partitions.get(&d) {
                // Default partition: row by row.
                None => !((*status == Status::Succeeded && d < short) || (status.is_final() && d < long)),
                Some(_) if d < long => !status.is_final(),
                Some(false) if d < short => *status != Status::Succeeded,
                Some(_) => true,
            }
        });
        self.partitions.retain(|d, _| *d >= long);
        for (d, compacted) in self.partitions.iter_mut() {
            if *d < short {
                *compacted = true;
            }
        }
    }
}

/// Random rows over four months, random writes between the steps of
/// compactions stopped at random, days going by: the ledger always equals
/// the model.
#[tokio::test]
async fn random_histories_match_the_model() {
    let seed = std::env::var("PARTITIONS_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    println!("PARTITIONS_SEED={seed}");
    let mut rng = Rng(seed);
    let db = TestDb::new().await.unwrap();
    let mut client = store::db::connect(&db.url).await.unwrap();
    let succeeded_days = 5 + rng.below(10) as u32;
    let retention =
        Retention { ahead_days: 3, succeeded_days, unsuccessful_days: succeeded_days + 3 + rng.below(10) as u32 };
    let mut today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    let mut model = Model::default();
    // Some days get partitions (as a ledger that ran then would), others not.
    for age in (0..40).step_by(4 + rng.below(4) as usize) {
        let day = today - Days::new(age);
        let keep_all = Retention { ahead_days: 0, succeeded_days: 10_000, unsuccessful_days: 10_000 };
        maintain(&mut client, noon(day), keep_all).await.unwrap();
        model.maintain(day, keep_all);
    }
    // Rows written anywhere, or mostly on `focus` (the day being compacted).
    let write = async |client: &tokio_postgres::Client,
                       model: &mut Model,
                       rng: &mut Rng,
                       today: NaiveDate,
                       focus: Option<NaiveDate>,
                       count: u64| {
        for _ in 0..count {
            let on_focus = focus.filter(|_| rng.below(4) != 0);
            let existing: Vec<Key> =
                model.rows.keys().filter(|(_, at)| on_focus.is_none_or(|d| at.date_naive() == d)).copied().collect();
            if existing.is_empty() || rng.below(3) == 0 {
                let day = on_focus.unwrap_or_else(|| today - Days::new(rng.below(40)));
                let at = at(day, rng.below(86_400) as u32);
                let status = rng.status();
                let job = insert(client, at, status).await;
                model.rows.insert((job, at), (status, 0));
            } else {
                let key = existing[rng.below(existing.len() as u64) as usize];
                let status = rng.status();
                set_status(client, key, status).await;
                let row = model.rows.get_mut(&key).unwrap();
                *row = (status, row.1 + 1);
            }
        }
    };
    write(&client, &mut model, &mut rng, today, None, 300).await;
    for round in 0..10 {
        today = today + Days::new(rng.below(6));
        // A compaction stopped after a random step, with writes in between.
        let eligible: Vec<NaiveDate> = model
            .partitions
            .iter()
            .filter(|(d, compacted)| {
                !**compacted
                    && **d < retention.oldest_succeeded_day(noon(today))
                    && **d >= retention.oldest_kept_day(noon(today))
            })
            .map(|(d, _)| *d)
            .collect();
        if !eligible.is_empty() {
            let day = eligible[rng.below(eligible.len() as u64) as usize];
            let step = [CompactionStep::Track, CompactionStep::Copy, CompactionStep::Swap][rng.below(3) as usize];
            if compact_interrupted(&mut client, day, step).await.unwrap().is_some() {
                // Swapped (or only marked: nothing had succeeded there).
                model.rows.retain(|(_, at), (status, _)| at.date_naive() != day || *status != Status::Succeeded);
                model.partitions.insert(day, true);
            }
            let count = 1 + rng.below(30);
            write(&client, &mut model, &mut rng, today, Some(day), count).await;
            assert_eq!(ledger(&client).await, model.rows, "round {round}: stopped after {step:?} (seed {seed})");
            if rng.below(2) == 0 {
                client = store::db::connect(&db.url).await.unwrap();
            }
        }
        let report = maintain(&mut client, noon(today), retention).await.unwrap();
        assert!(report.failed.is_empty(), "{report:?} (seed {seed})");
        model.maintain(today, retention);
        assert_eq!(ledger(&client).await, model.rows, "round {round} at {today} {retention:?} (seed {seed})");
        assert_eq!(work_tables(&client).await, Vec::<String>::new(), "seed {seed}");
        let count = 1 + rng.below(30);
        write(&client, &mut model, &mut rng, today, None, count).await;
    }
}

/// The statistics' dead row versions and vacuum count of a partition, once
/// they reach `until` (the statistics are written a moment after the work).
async fn dead_rows_and_vacuums(
    client: &tokio_postgres::Client,
    partition: &str,
    until: impl Fn(i64, i64) -> bool,
) -> (i64, i64) {
    let (dead, vacuums, _) = partition_statistics(client, partition, |dead, vacuums, _| until(dead, vacuums)).await;
    (dead, vacuums)
}

/// Waits until the statistics count `updates` row updates of a partition
/// in all: its dead row count alone cannot tell whether the last writes
/// reached the statistics yet (earlier dead versions may already pass any
/// threshold), and a pass that reads them before they arrive would count
/// them as writes since its vacuum.
async fn updates_counted(client: &tokio_postgres::Client, partition: &str, updates: i64) -> (i64, i64) {
    let (dead, vacuums, _) = partition_statistics(client, partition, |_, _, seen| seen >= updates).await;
    (dead, vacuums)
}

async fn partition_statistics(
    client: &tokio_postgres::Client,
    partition: &str,
    until: impl Fn(i64, i64, i64) -> bool,
) -> (i64, i64, i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let row = client
            .query_one(
                "SELECT n_dead_tup, vacuum_count, n_tup_upd FROM pg_stat_user_tables WHERE relname = $1",
                &[&partition],
            )
            .await
            .unwrap();
        let seen = (row.get(0), row.get(1), row.get(2));
        if until(seen.0, seen.1, seen.2) {
            return seen;
        }
        assert!(std::time::Instant::now() < deadline, "{partition}: statistics stayed at {seen:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_partition_past_its_autovacuum_trigger_is_vacuumed_by_one_node_at_a_time() {
    use store::ledger::partitions::{VACUUM_LOCK, VacuumMemory, vacuum_churned};
    let db = TestDb::new().await.unwrap();
    let mut client = store::db::connect(&db.url).await.unwrap();
    let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
    maintain(&mut client, noon(today), Retention { ahead_days: 1, succeeded_days: 45, unsuccessful_days: 45 })
        .await
        .unwrap();
    let name = partition_name(today);
    let mut memory = VacuumMemory::default();
    // Fresh partitions: nothing dead, nothing to do.
    assert_eq!(vacuum_churned(&client, &mut memory).await.unwrap(), vec![]);

    // 400 slots written three times as the pipeline writes them: 800 dead
    // versions, past the trigger (50 + 1% of 400 rows).
    let mut keys = Vec::new();
    for i in 0..400 {
        let at = at(today, i);
        keys.push((insert_slot(&client, at).await, at));
    }
    for status in [Status::Running, Status::Succeeded] {
        client
            .execute(
                "UPDATE scheduled_jobs SET status = $1, attempts = attempts + 1 WHERE scheduled_at >= $2 AND scheduled_at < $3",
                &[&status.as_str(), &at(today, 0), &at(today, 400)],
            )
            .await
            .unwrap();
    }
    let (dead, vacuums_before) = dead_rows_and_vacuums(&client, &name, |dead, _| dead >= 800).await;

    // Another node's pass holds the lock: this one leaves the work to it.
    let other = store::db::connect(&db.url).await.unwrap();
    other.execute("SELECT pg_advisory_lock($1)", &[&VACUUM_LOCK]).await.unwrap();
    assert_eq!(vacuum_churned(&client, &mut memory).await.unwrap(), vec![]);
    other.execute("SELECT pg_advisory_unlock($1)", &[&VACUUM_LOCK]).await.unwrap();

    let vacuumed = vacuum_churned(&client, &mut memory).await.unwrap();
    assert_eq!(vacuumed.iter().map(|v| v.partition.as_str()).collect::<Vec<_>>(), vec![name.as_str()]);
    assert_eq!(vacuumed[0].dead_rows, dead);
    let (dead_after, _) = dead_rows_and_vacuums(&client, &name, |_, vacuums| vacuums > vacuums_before).await;
    assert_eq!(dead_after, 0, "the vacuum removed every dead version");
    // Under the trigger again: left alone.
    assert_eq!(vacuum_churned(&client, &mut memory).await.unwrap(), vec![]);

    // A partition autovacuum (or a compaction) is working on is passed over
    // at once, not waited for.
    for key in &keys {
        set_status(&client, *key, Status::Failed).await;
    }
    updates_counted(&client, &name, 1200).await;
    let mut holder = store::db::connect(&db.url).await.unwrap();
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute(&format!("LOCK TABLE {name} IN SHARE UPDATE EXCLUSIVE MODE")).await.unwrap();
    let passed_over =
        tokio::time::timeout(std::time::Duration::from_secs(10), vacuum_churned(&client, &mut memory)).await;
    assert!(passed_over.is_ok(), "waited for the lock of a partition being vacuumed");
    tx.rollback().await.unwrap();

    // Dead versions a long transaction still sees cannot be removed: the
    // partition is vacuumed once, then left alone until as many writes
    // again, not vacuumed for nothing on every pass.
    let mut memory = VacuumMemory::default();
    let mut reader = store::db::connect(&db.url).await.unwrap();
    let snapshot = reader
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .start()
        .await
        .unwrap();
    snapshot.query("SELECT count(*) FROM scheduled_jobs", &[]).await.unwrap();
    for key in &keys {
        set_status(&client, *key, Status::Succeeded).await;
    }
    let (_, vacuums_before) = updates_counted(&client, &name, 1600).await;
    assert_eq!(vacuum_churned(&client, &mut memory).await.unwrap().len(), 1);
    let (still_dead, _) = dead_rows_and_vacuums(&client, &name, |_, vacuums| vacuums > vacuums_before).await;
    assert!(still_dead >= 400, "the open snapshot kept the dead versions: {still_dead}");
    for _ in 0..3 {
        assert_eq!(vacuum_churned(&client, &mut memory).await.unwrap(), vec![], "vacuumed again for nothing");
    }
    snapshot.rollback().await.unwrap();
    // As many writes again: vacuumed, and now they go.
    for key in &keys {
        set_status(&client, *key, Status::Failed).await;
    }
    updates_counted(&client, &name, 2000).await;
    assert_eq!(vacuum_churned(&client, &mut memory).await.unwrap().len(), 1);
}
