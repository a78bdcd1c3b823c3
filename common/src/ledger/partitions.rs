//! Day partitions of the `scheduled_jobs` ledger: `scheduled_jobs_yyyymmdd`,
//! one per UTC day of the scheduled time.
//!
//! `maintain` creates the partitions from yesterday to `ahead_days` ahead,
//! adopts rows that landed in the default partition (a slot on a day that had
//! no partition yet), and drops partitions older than the retention. It is
//! idempotent and serialised by an advisory lock, so every scheduler node can
//! run it on a timer and `migrate` runs it once.

use anyhow::Context;
use chrono::{DateTime, Days, NaiveDate, Utc};
use tokio_postgres::GenericClient;

const MAINTENANCE_LOCK: i64 = 0x6372_6f6e_0002;
const PREFIX: &str = "scheduled_jobs_";

#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Partitions to keep created ahead of today.
    pub ahead_days: u32,
    /// Days of history kept; older partitions are dropped.
    pub retention_days: u32,
}

impl Retention {
    /// Days of ledger history kept unless configured (`LEDGER_RETENTION_DAYS`).
    pub const DEFAULT_RETENTION_DAYS: u32 = 45;
    /// Day partitions created ahead unless configured.
    pub const DEFAULT_AHEAD_DAYS: u32 = 7;

    /// The oldest UTC day whose partition `maintain` keeps at `now`; slots of
    /// earlier days are gone from the ledger.
    pub fn oldest_kept_day(&self, now: DateTime<Utc>) -> NaiveDate {
        now.date_naive() - Days::new(self.retention_days.into())
    }
}

impl Default for Retention {
    fn default() -> Self {
        Self { ahead_days: Self::DEFAULT_AHEAD_DAYS, retention_days: Self::DEFAULT_RETENTION_DAYS }
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub created: Vec<String>,
    pub dropped: Vec<String>,
    /// Rows moved out of the default partition into their day partition.
    pub adopted_rows: u64,
}

pub fn partition_name(day: NaiveDate) -> String {
    format!("{PREFIX}{}", day.format("%Y%m%d"))
}

fn day_of_partition(name: &str) -> Option<NaiveDate> {
    let digits = name.strip_prefix(PREFIX)?;
    NaiveDate::parse_from_str(digits, "%Y%m%d").ok()
}

/// Brings the partitions in line with `now` and `retention`.
pub async fn maintain(
    client: &mut tokio_postgres::Client,
    now: DateTime<Utc>,
    retention: Retention,
) -> anyhow::Result<MaintenanceReport> {
    let tx = client.transaction().await?;
    // Waiting would only repeat the work another node is doing right now.
    let locked: bool = tx.query_one("SELECT pg_try_advisory_xact_lock($1)", &[&MAINTENANCE_LOCK]).await?.get(0);
    if !locked {
        return Ok(MaintenanceReport::default());
    }
    let today = now.date_naive();
    let oldest_kept = retention.oldest_kept_day(now);
    let existing: Vec<NaiveDate> = tx
        .query(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'scheduled_jobs'::regclass",
            &[],
        )
        .await?
        .iter()
        .filter_map(|r| day_of_partition(r.get::<_, &str>(0)))
        .collect();

    let mut wanted: Vec<NaiveDate> = (0..=retention.ahead_days + 1)
        .filter_map(|d| (today - Days::new(1)).checked_add_days(Days::new(d.into())))
        .collect();
    // Days that already have rows parked in the default partition.
    for row in
        tx.query("SELECT DISTINCT (scheduled_at AT TIME ZONE 'UTC')::date FROM scheduled_jobs_default", &[]).await?
    {
        wanted.push(row.get(0));
    }
    wanted.sort();
    wanted.dedup();

    let mut report = MaintenanceReport::default();
    for day in wanted.into_iter().filter(|d| *d >= oldest_kept && !existing.contains(d)) {
        report.adopted_rows += create_partition(&tx, day).await?;
        report.created.push(partition_name(day));
    }
    for day in existing.into_iter().filter(|d| *d < oldest_kept) {
        let name = partition_name(day);
        tx.batch_execute(&format!("DROP TABLE IF EXISTS {name}")).await?;
        report.dropped.push(name);
    }
    tx.commit().await?;
    if !report.created.is_empty() || !report.dropped.is_empty() {
        tracing::info!(created = ?report.created, dropped = ?report.dropped, adopted_rows = report.adopted_rows, "ledger partitions maintained");
    }
    Ok(report)
}

/// Creates one day partition. Rows of that day already in the default
/// partition are moved into it first: attaching would otherwise fail.
async fn create_partition(tx: &impl GenericClient, day: NaiveDate) -> anyhow::Result<u64> {
    let name = partition_name(day);
    let from = format!("{} 00:00:00+00", day.format("%Y-%m-%d"));
    let to = format!("{} 00:00:00+00", (day + Days::new(1)).format("%Y-%m-%d"));
    tx.batch_execute(&format!("CREATE TABLE {name} (LIKE scheduled_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"))
        .await
        .with_context(|| format!("creating {name}"))?;
    let moved = tx
        .execute(
            &format!(
                "WITH moved AS (DELETE FROM scheduled_jobs_default
                                WHERE scheduled_at >= '{from}' AND scheduled_at < '{to}' RETURNING *)
                 INSERT INTO {name} SELECT * FROM moved"
            ),
            &[],
        )
        .await?;
    tx.batch_execute(&format!(
        "ALTER TABLE scheduled_jobs ATTACH PARTITION {name} FOR VALUES FROM ('{from}') TO ('{to}')"
    ))
    .await
    .with_context(|| format!("attaching {name}"))?;
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let d = NaiveDate::from_ymd_opt(2026, 1, 5).unwrap();
        assert_eq!(partition_name(d), "scheduled_jobs_20260105");
        assert_eq!(day_of_partition("scheduled_jobs_20260105"), Some(d));
        assert_eq!(day_of_partition("scheduled_jobs_default"), None);
    }
}
