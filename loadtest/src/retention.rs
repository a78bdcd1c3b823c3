//! `retention`: what removing a day's rows that succeeded costs, on two
//! identical day partitions of N rows (a share failed, the rest succeeded):
//!
//! - the compaction partition maintenance does (`store::ledger::partitions::compact`:
//!   copy the rows to keep, swap the copy in under a short lock),
//! - a plain `DELETE … WHERE status = 'succeeded'` on the other partition,
//!   then the `VACUUM` that has to follow it (autovacuum would run it), then
//!   the `VACUUM FULL` it takes to give the space back.
//!
//! For each: wall time, WAL written (LSN difference; for the `DELETE` also
//! the statement's own figure from `EXPLAIN (ANALYZE, WAL)`, which shows how
//! much of the difference was other activity), blocks read and hit, the
//! partition's size with its indexes after, and how long the ledger was
//! locked. Each operation starts after a `CHECKPOINT`, on partitions vacuumed
//! and frozen as a day partition 45 days old would be. Bounded: one database,
//! created and dropped, two partitions.

use std::time::{Duration, Instant};

use chrono::{Days, NaiveDate, TimeZone, Utc};
use serde::Serialize;

use store::ledger::partitions::{self, Retention};

use crate::report::{OutArgs, Report, fmt_f, fmt_int};

#[derive(clap::Args)]
pub struct RetentionArgs {
    /// Rows in each day partition.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Share of the rows that failed (the rest succeeded).
    #[arg(long, default_value_t = 0.01)]
    failed_share: f64,
    /// Admin Postgres URL; a fresh database is created for the run and dropped.
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    admin_database_url: String,
    #[command(flatten)]
    out: OutArgs,
}

/// Counters read before and after an operation.
struct Snapshot {
    at: Instant,
    /// Other client backends running a statement on the server: the WAL
    /// figure (an LSN difference) includes what they write.
    others_active: i64,
    wal: i64,
    blks_read: i64,
    blks_hit: i64,
}

#[derive(Serialize, Clone)]
struct Cost {
    seconds: f64,
    wal_bytes: i64,
    blks_read: i64,
    blks_hit: i64,
    /// Size of the partition with its indexes afterwards.
    bytes_after: i64,
    /// How long the ledger (or the partition) was locked against its traffic.
    locked_seconds: f64,
    /// Other client backends running a statement, before and after.
    others_active: (i64, i64),
}

async fn snapshot(client: &tokio_postgres::Client) -> anyhow::Result<Snapshot> {
    // The backend's statistics reach pg_stat_database when it goes idle:
    // force that after the last statement, then read a fresh snapshot.
    client.batch_execute("SELECT pg_stat_force_next_flush()").await?;
    client.batch_execute("SELECT pg_stat_clear_snapshot()").await?;
    let row = client
        .query_one(
            "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, blks_read, blks_hit,
                    (SELECT count(*) FROM pg_stat_activity
                     WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid())
             FROM pg_stat_database WHERE datname = current_database()",
            &[],
        )
        .await?;
    Ok(Snapshot {
        at: Instant::now(),
        wal: row.get(0),
        blks_read: row.get(1),
        blks_hit: row.get(2),
        others_active: row.get(3),
    })
}

async fn size(client: &tokio_postgres::Client, table: &str) -> anyhow::Result<i64> {
    Ok(client.query_one("SELECT pg_total_relation_size($1::text::regclass)", &[&table]).await?.get(0))
}

fn cost(before: &Snapshot, after: &Snapshot, bytes_after: i64, locked: Duration) -> Cost {
    Cost {
        seconds: (after.at - before.at).as_secs_f64(),
        wal_bytes: after.wal - before.wal,
        blks_read: after.blks_read - before.blks_read,
        blks_hit: after.blks_hit - before.blks_hit,
        bytes_after,
        locked_seconds: locked.as_secs_f64(),
        others_active: (before.others_active, after.others_active),
    }
}

/// Fills the day's partition with `rows` rows shaped like real ones (an
/// execution id, timestamps, a response excerpt, one history entry per
/// attempt), in time order, every `1 / failed_share`-th one failed.
async fn fill(client: &tokio_postgres::Client, day: NaiveDate, rows: u64, failed_share: f64) -> anyhow::Result<()> {
    let start = Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).expect("midnight"));
    let every = (1.0 / failed_share).round().max(1.0) as i64;
    let step_us = 86_400_000_000 / rows as i64;
    client
        .execute(
            "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, trigger, status, attempts,
                 scheduler_node, worker_id, fired_at, published_at, started_at, finished_at, http_status,
                 response_excerpt, error, job_version, history)
             SELECT job, at, gen_random_uuid(), job::text || '@' || cronshard_instant(at), 'schedule',
                    CASE WHEN failed THEN 'failed' ELSE 'succeeded' END, CASE WHEN failed THEN 4 ELSE 1 END,
                    'cronshard-scheduler-1', 'cronshard-worker-7f9c4-x2kq1',
                    at - interval '2 s', at - interval '1.9 s', at, at + interval '120 ms',
                    CASE WHEN failed THEN 503 ELSE 200 END,
                    CASE WHEN failed THEN '{\"error\":\"upstream unavailable\"}' ELSE '{\"ok\":true}' END,
                    CASE WHEN failed THEN 'HTTP 503 from callback' END, 1,
                    (SELECT jsonb_agg(jsonb_build_object('event', 'attempt', 'attempt', n,
                         'worker_id', 'cronshard-worker-7f9c4-x2kq1', 'started_at', cronshard_instant(at),
                         'finished_at', cronshard_instant(at + interval '120 ms'),
                         'outcome', CASE WHEN NOT failed THEN 'succeeded' WHEN n = 4 THEN 'failed' ELSE 'retrying' END,
                         'http_status', CASE WHEN failed THEN 503 ELSE 200 END, 'redelivered', false))
                     FROM generate_series(1, CASE WHEN failed THEN 4 ELSE 1 END) n)
             FROM (SELECT md5((i % 5000)::text)::uuid AS job, $1::timestamptz + i * $2::bigint * interval '1 microsecond' AS at,
                          i % $3::bigint = 0 AS failed
                   FROM generate_series(0::bigint, $4::bigint - 1) i) s",
            &[&start, &step_us, &every, &(rows as i64)],
        )
        .await?;
    Ok(())
}

pub async fn run(args: RetentionArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.rows >= 1000, "--rows must be at least 1000");
    anyhow::ensure!(args.failed_share > 0.0 && args.failed_share < 1.0, "--failed-share must be in (0, 1)");
    let db = crate::benchdb::BenchDb::create(&args.admin_database_url).await?;
    let result = measure(&db.url, &args).await;
    db.drop_database().await?;
    let (compaction, delete, delete_statement_wal, vacuum, vacuum_full, sizes) = result?;

    let mb = |b: i64| format!("{} MiB", fmt_f(b as f64 / 1_048_576.0));
    let mut report = Report::new(
        "retention",
        format!("retention-{}", args.rows),
        format!(
            "Retention: removing the rows that succeeded from a day partition of {} rows ({} % failed)",
            fmt_int(args.rows as i64),
            fmt_f(args.failed_share * 100.0)
        ),
        &args.out,
    );
    report.row("partition before (table + 4 indexes)", mb(sizes.0));
    report.row("rows kept", fmt_int(sizes.1));
    let line = |c: &Cost| {
        format!(
            "{} s, WAL {}, blocks read {} / hit {}, size after {}, locked {} s",
            fmt_f3(c.seconds),
            mb(c.wal_bytes),
            fmt_int(c.blks_read),
            fmt_int(c.blks_hit),
            mb(c.bytes_after),
            fmt_f3(c.locked_seconds)
        )
    };
    report.row("compaction (copy kept rows, swap)", line(&compaction));
    report.row("DELETE … WHERE status = 'succeeded'", line(&delete));
    report.row("  the DELETE statement's own WAL (EXPLAIN)", mb(delete_statement_wal));
    report.row("  then VACUUM", line(&vacuum));
    report.row("    dead rows VACUUM could not remove", fmt_int(sizes.2));
    report.row("  then VACUUM FULL (ACCESS EXCLUSIVE throughout)", line(&vacuum_full));
    report.data("compaction", &compaction);
    report.data("delete", &delete);
    report.data("delete_statement_wal_bytes", delete_statement_wal);
    report.data("vacuum", &vacuum);
    report.data("vacuum_full", &vacuum_full);
    report.data("partition_bytes_before", sizes.0);
    report.data("rows_kept", sizes.1);
    report.data("dead_rows_after_vacuum", sizes.2);
    report.finish(&args.out)?;
    Ok(())
}

fn fmt_f3(v: f64) -> String {
    format!("{v:.3}")
}

type Measured = (Cost, Cost, i64, Cost, Cost, (i64, i64, i64));

async fn measure(url: &str, args: &RetentionArgs) -> anyhow::Result<Measured> {
    let mut client = store::db::connect(url).await?;
    // Two days past the shorter retention; their partitions (and their
    // neighbours) are created as maintenance would, nothing is removed.
    let today = Utc::now().date_naive();
    let (compacted_day, deleted_day) = (today - Days::new(60), today - Days::new(61));
    let keep_all = Retention { ahead_days: 1, succeeded_days: 10_000, unsuccessful_days: 10_000 };
    partitions::maintain(&mut client, Utc.from_utc_datetime(&compacted_day.and_hms_opt(12, 0, 0).unwrap()), keep_all)
        .await?;
    let (compacted, deleted) = (partitions::partition_name(compacted_day), partitions::partition_name(deleted_day));
    for (day, name) in [(compacted_day, &compacted), (deleted_day, &deleted)] {
        client.batch_execute(&format!("ALTER TABLE {name} SET (autovacuum_enabled = false)")).await?;
        let t = Instant::now();
        fill(&client, day, args.rows, args.failed_share).await?;
        client.batch_execute(&format!("VACUUM (FREEZE, ANALYZE) {name}")).await?;
        eprintln!("filled {name} with {} rows in {:.1} s", args.rows, t.elapsed().as_secs_f64());
    }
    let size_before = size(&client, &compacted).await?;
    anyhow::ensure!(size_before == size(&client, &deleted).await?, "the two partitions differ in size");

    client.batch_execute("CHECKPOINT").await?;
    let before = snapshot(&client).await?;
    let done = partitions::compact(&mut client, compacted_day)
        .await?
        .ok_or_else(|| anyhow::anyhow!("{compacted} was not compacted"))?;
    let after = snapshot(&client).await?;
    let compaction = cost(&before, &after, size(&client, &compacted).await?, done.swap);

    client.batch_execute("CHECKPOINT").await?;
    let before = snapshot(&client).await?;
    let plan = client
        .query(
            &format!("EXPLAIN (ANALYZE, WAL, BUFFERS, TIMING OFF) DELETE FROM {deleted} WHERE status = 'succeeded'"),
            &[],
        )
        .await?;
    let after = snapshot(&client).await?;
    // Row-exclusive only: the DELETE blocks no reader and no other writer.
    let delete = cost(&before, &after, size(&client, &deleted).await?, Duration::ZERO);
    let plan: Vec<String> = plan.iter().map(|r| r.get(0)).collect();
    let statement_wal = plan
        .iter()
        .find_map(|l| l.split("WAL:").nth(1)?.split_whitespace().find_map(|w| w.strip_prefix("bytes=")?.parse().ok()))
        .unwrap_or(-1);

    client.batch_execute("CHECKPOINT").await?;
    let before = snapshot(&client).await?;
    client.batch_execute(&format!("VACUUM {deleted}")).await?;
    let after = snapshot(&client).await?;
    let dead: i64 =
        client.query_one("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = $1", &[&deleted]).await?.get(0);
    // Share-update-exclusive: it blocks no reader and no writer either.
    let vacuum = cost(&before, &after, size(&client, &deleted).await?, Duration::ZERO);

    client.batch_execute("CHECKPOINT").await?;
    let before = snapshot(&client).await?;
    client.batch_execute(&format!("VACUUM FULL {deleted}")).await?;
    let after = snapshot(&client).await?;
    let full = after.at - before.at;
    let vacuum_full = cost(&before, &after, size(&client, &deleted).await?, full);

    Ok((compaction, delete, statement_wal, vacuum, vacuum_full, (size_before, done.kept_rows as i64, dead)))
}
