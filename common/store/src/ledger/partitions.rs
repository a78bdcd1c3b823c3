//! Day partitions of the `scheduled_jobs` ledger: `scheduled_jobs_yyyymmdd`,
//! one per UTC day of the scheduled time, and the ledger's retention.
//!
//! [`maintain`] creates the partitions from yesterday to `ahead_days` ahead,
//! adopts rows that landed in the default partition (a slot on a day that had
//! no partition yet), and applies the retention per outcome ([`Retention`]):
//!
//! - a day older than `succeeded_days` is *compacted* once: its rows that
//!   succeeded are removed, the others kept (see below); the partition is then
//!   marked (its table comment) and left alone;
//! - a day older than `unsuccessful_days` is dropped, except for its rows
//!   still `pending`, `running` or `retrying`: a process may still move those,
//!   so they move to the default partition and stay there until they are
//!   final (a warning says how many);
//! - rows of the default partition follow the same rules row by row (it holds
//!   few rows: slots of days that have no partition).
//!
//! Compaction never deletes row by row in the partition (which would leave
//! it as large as before, to be vacuumed). It copies the rows to keep into a
//! new table and swaps that table in, in steps, each one transaction, so
//! that a crash between two steps leaves the ledger complete (the old
//! partition attached until the swap) and the next run resumes where it
//! stopped:
//!
//! 1. **track**: a trigger on the partition records in `<partition>_changes`
//!    the key of every row written from then on;
//! 2. **copy**: `<partition>_compact` (like the parent, with its indexes,
//!    partial ones included) gets the rows that did not succeed, and a CHECK
//!    constraint of the day's range, so that attaching it needs no scan;
//! 3. **swap** (short, under `ACCESS EXCLUSIVE` on the ledger): detach the
//!    partition, copy again the rows written since step 1 (their keys are in
//!    `_changes`), attach the copy under the same range (its indexes attach
//!    to the parent's), give the copy and its indexes the old names (the old
//!    table becomes `<partition>_replaced`), mark it compacted;
//! 4. **drop** `<partition>_replaced`: outside the swap, since removing a
//!    large table's files at commit takes a while (a run that finds it left
//!    drops it).
//!
//! Every run holds one session advisory lock, so every scheduler node runs
//! maintenance on a timer (the others skip while one works) and `migrate`
//! runs it once. Statements that need a strong lock on the ledger give up
//! after [`DDL_LOCK_TIMEOUT`] rather than queue the ledger's traffic behind
//! them; the next run retries.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{DateTime, Days, NaiveDate, TimeZone, Utc};
use tokio_postgres::GenericClient;
use tokio_postgres::types::Oid;

use super::Status;

const MAINTENANCE_LOCK: i64 = 0x6372_6f6e_0002;
const PREFIX: &str = "scheduled_jobs_";
/// Suffix of the table a compaction copies the kept rows into (step 2).
const COPY_SUFFIX: &str = "_compact";
/// Suffix of the table of keys written during a compaction (step 1).
const CHANGES_SUFFIX: &str = "_changes";
/// Suffix of the replaced partition, dropped after the swap (step 4).
const REPLACED_SUFFIX: &str = "_replaced";
/// The table comment that marks a compacted day partition.
const COMPACTED_MARK: &str = "cronshard: compacted, rows that succeeded removed";
/// The trigger of step 1 and its function (created by maintenance itself,
/// so the ledger's retention has no SQL outside this file).
const TRACK_TRIGGER: &str = "cronshard_compaction_track";
const TRACK_FUNCTION: &str = "cronshard_compaction_track";

/// The longest a maintenance statement waits for a lock that would hold up
/// the ledger's traffic (detach, attach, drop, trigger). Past it the step
/// fails, leaves the ledger as it was, and is retried on the next run.
pub const DDL_LOCK_TIMEOUT: Duration = Duration::from_secs(1);

/// The rows removed at the shorter retention. Every other status is kept
/// longer, those not final (a process may still move them) until they are.
const SHORT_LIVED: Status = Status::Succeeded;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Partitions to keep created ahead of today.
    pub ahead_days: u32,
    /// Days a row that succeeded is kept (`LEDGER_RETENTION_DAYS`).
    pub succeeded_days: u32,
    /// Days every other row is kept: failed, skipped, missed
    /// (`LEDGER_UNSUCCESSFUL_RETENTION_DAYS`). At least `succeeded_days`.
    pub unsuccessful_days: u32,
}

/// A retention that would keep rows that succeeded longer than the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "rows that did not succeed would be kept {unsuccessful_days} days, fewer than the {succeeded_days} days of rows that succeeded"
)]
pub struct RetentionOutOfOrder {
    pub succeeded_days: u32,
    pub unsuccessful_days: u32,
}

impl Retention {
    /// Days rows that succeeded are kept unless configured.
    pub const DEFAULT_SUCCEEDED_DAYS: u32 = 45;
    /// Days every other row is kept unless configured.
    pub const DEFAULT_UNSUCCESSFUL_DAYS: u32 = 90;
    /// Day partitions created ahead unless configured.
    pub const DEFAULT_AHEAD_DAYS: u32 = 7;

    pub fn check(&self) -> Result<(), RetentionOutOfOrder> {
        if self.unsuccessful_days < self.succeeded_days {
            return Err(RetentionOutOfOrder {
                succeeded_days: self.succeeded_days,
                unsuccessful_days: self.unsuccessful_days,
            });
        }
        Ok(())
    }

    /// The oldest UTC day whose rows that succeeded `maintain` keeps at `now`.
    pub fn oldest_succeeded_day(&self, now: DateTime<Utc>) -> NaiveDate {
        days_before(now, self.succeeded_days)
    }

    /// The oldest UTC day whose partition `maintain` keeps at `now`; of
    /// earlier days only rows not final yet are left.
    pub fn oldest_kept_day(&self, now: DateTime<Utc>) -> NaiveDate {
        days_before(now, self.unsuccessful_days)
    }
}

fn days_before(now: DateTime<Utc>, days: u32) -> NaiveDate {
    now.date_naive().checked_sub_days(Days::new(days.into())).unwrap_or(NaiveDate::MIN)
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            ahead_days: Self::DEFAULT_AHEAD_DAYS,
            succeeded_days: Self::DEFAULT_SUCCEEDED_DAYS,
            unsuccessful_days: Self::DEFAULT_UNSUCCESSFUL_DAYS,
        }
    }
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct MaintenanceReport {
    pub created: Vec<String>,
    pub compacted: Vec<Compaction>,
    pub dropped: Vec<String>,
    /// Rows moved out of the default partition into their day partition.
    pub adopted_rows: u64,
    /// Rows of the default partition past their retention, deleted.
    pub expired_default_rows: u64,
    /// Decided runs (`decided_ranges`) whose last slot is past the
    /// retention of rows that did not succeed, deleted.
    pub expired_runs: u64,
    /// Rows of dropped partitions still `pending`, `running` or `retrying`,
    /// moved to the default partition.
    pub unfinished_rows_kept: u64,
    /// Partitions whose compaction or drop failed this run (with the error);
    /// the ledger is as it was before the failed step.
    pub failed: Vec<String>,
}

/// One day partition compacted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compaction {
    pub partition: String,
    /// Rows the partition holds after compaction.
    pub kept_rows: u64,
    /// Size of the partition with its indexes before and after.
    pub bytes_before: i64,
    pub bytes_after: i64,
    /// How long the swap held the ledger's `ACCESS EXCLUSIVE` lock (zero when
    /// the partition had no row that succeeded and was only marked).
    pub swap: Duration,
}

/// The steps of a compaction, in order (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CompactionStep {
    Track,
    Copy,
    Swap,
    Drop,
}

pub fn partition_name(day: NaiveDate) -> String {
    format!("{PREFIX}{}", day.format("%Y%m%d"))
}

fn day_of_partition(name: &str) -> Option<NaiveDate> {
    let digits = name.strip_prefix(PREFIX)?;
    NaiveDate::parse_from_str(digits, "%Y%m%d").ok()
}

/// The day of a compaction's work table (`..._compact`, `..._changes`).
fn day_of_work_table(name: &str) -> Option<NaiveDate> {
    let partition = [COPY_SUFFIX, CHANGES_SUFFIX, REPLACED_SUFFIX].iter().find_map(|s| name.strip_suffix(s))?;
    day_of_partition(partition)
}

fn day_start(day: NaiveDate) -> DateTime<Utc> {
    Utc.from_utc_datetime(&day.and_hms_opt(0, 0, 0).expect("midnight exists"))
}

/// `'a', 'b'`: statuses as SQL literals.
fn sql_list(statuses: impl Iterator<Item = Status>) -> String {
    statuses.map(|s| format!("'{}'", s.as_str())).collect::<Vec<_>>().join(", ")
}

/// The statuses a compaction keeps.
fn kept_statuses() -> String {
    sql_list(Status::ALL.into_iter().filter(|s| *s != SHORT_LIVED))
}

/// The statuses a dropped partition hands to the default partition.
fn unfinished_statuses() -> String {
    sql_list(Status::ALL.into_iter().filter(|s| !s.is_final()))
}

/// Double-quoted SQL identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Brings the partitions in line with `now` and `retention`. Returns an
/// empty report when another session is maintaining them right now.
pub async fn maintain(
    client: &mut tokio_postgres::Client,
    now: DateTime<Utc>,
    retention: Retention,
) -> anyhow::Result<MaintenanceReport> {
    retention.check()?;
    if !try_lock(client, MAINTENANCE_LOCK).await? {
        return Ok(MaintenanceReport::default());
    }
    let result = maintain_locked(client, now, retention).await;
    unlock(client, MAINTENANCE_LOCK, result).await
}

/// Compacts the partition of `day` now, whatever its age (the benchmark
/// measures it this way; `maintain` compacts by the retention). `None`
/// when the day has no partition, it is compacted already, or another
/// session holds the maintenance lock.
pub async fn compact(client: &mut tokio_postgres::Client, day: NaiveDate) -> anyhow::Result<Option<Compaction>> {
    compact_until(client, day, CompactionStep::Drop).await
}

/// [`compact`] stopped after `last`, as a crash between two steps would
/// stop it (tests).
pub async fn compact_interrupted(
    client: &mut tokio_postgres::Client,
    day: NaiveDate,
    last: CompactionStep,
) -> anyhow::Result<Option<Compaction>> {
    compact_until(client, day, last).await
}

async fn compact_until(
    client: &mut tokio_postgres::Client,
    day: NaiveDate,
    last: CompactionStep,
) -> anyhow::Result<Option<Compaction>> {
    if !try_lock(client, MAINTENANCE_LOCK).await? {
        return Ok(None);
    }
    let result = compact_locked(client, day, last).await;
    unlock(client, MAINTENANCE_LOCK, result).await
}

/// Takes the session advisory lock `key` if free. Waiting would only
/// repeat the work another node is doing right now.
async fn try_lock(client: &tokio_postgres::Client, key: i64) -> anyhow::Result<bool> {
    Ok(client.query_one("SELECT pg_try_advisory_lock($1)", &[&key]).await?.get(0))
}

/// Releases the session lock whatever `result` is (a failed connection
/// releases it anyway); the work's error comes first.
async fn unlock<T>(client: &tokio_postgres::Client, key: i64, result: anyhow::Result<T>) -> anyhow::Result<T> {
    let unlocked = client.execute("SELECT pg_advisory_unlock($1)", &[&key]).await;
    let value = result?;
    unlocked?;
    Ok(value)
}

/// The day partitions attached to the ledger, each with whether it is
/// compacted, oldest first.
async fn day_partitions(client: &impl GenericClient) -> anyhow::Result<Vec<(NaiveDate, bool)>> {
    let mut days: Vec<(NaiveDate, bool)> = client
        .query(
            "SELECT c.relname::text, coalesce(obj_description(c.oid, 'pg_class') = $1, false)
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'scheduled_jobs'::regclass",
            &[&COMPACTED_MARK],
        )
        .await?
        .iter()
        .filter_map(|r| Some((day_of_partition(r.get::<_, &str>(0))?, r.get(1))))
        .collect();
    days.sort();
    Ok(days)
}

/// Days with a compaction's work table left (a compaction under way, or
/// stopped by a crash or a lock timeout).
async fn days_with_work_tables(client: &impl GenericClient) -> anyhow::Result<Vec<NaiveDate>> {
    let mut days: Vec<NaiveDate> = client
        .query(
            "SELECT relname::text FROM pg_class
             WHERE relkind = 'r' AND relname LIKE 'scheduled\\_jobs\\_%'
               AND relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'scheduled_jobs'::regclass)",
            &[],
        )
        .await?
        .iter()
        .filter_map(|r| day_of_work_table(r.get::<_, &str>(0)))
        .collect();
    days.sort();
    days.dedup();
    Ok(days)
}

async fn maintain_locked(
    client: &mut tokio_postgres::Client,
    now: DateTime<Utc>,
    retention: Retention,
) -> anyhow::Result<MaintenanceReport> {
    let oldest_succeeded = retention.oldest_succeeded_day(now);
    let oldest_kept = retention.oldest_kept_day(now);
    let mut report = MaintenanceReport::default();

    match create_partitions(client, now, retention).await {
        Ok((created, adopted_rows)) => {
            report.created = created;
            report.adopted_rows = adopted_rows;
        }
        Err(e) => report.failed.push(format!("creating partitions: {e:#}")),
    }

    report.expired_default_rows = client
        .execute(
            &format!(
                "DELETE FROM scheduled_jobs_default
                 WHERE (status = '{short}' AND scheduled_at < $1)
                    OR (status IN ({long}) AND scheduled_at < $2)",
                short = SHORT_LIVED.as_str(),
                long = sql_list(Status::ALL.into_iter().filter(|s| s.is_final() && *s != SHORT_LIVED)),
            ),
            &[&day_start(oldest_succeeded), &day_start(oldest_kept)],
        )
        .await?;

    report.expired_runs =
        client.execute("DELETE FROM decided_ranges WHERE last_at < $1", &[&day_start(oldest_kept)]).await?;

    for (day, compacted) in day_partitions(&*client).await? {
        let name = partition_name(day);
        if day < oldest_kept {
            match drop_partition(client, day).await {
                Ok(kept) => {
                    report.unfinished_rows_kept += kept;
                    report.dropped.push(name);
                }
                Err(e) => report.failed.push(format!("{name}: {e:#}")),
            }
        } else if day < oldest_succeeded && !compacted {
            match compact_locked(client, day, CompactionStep::Drop).await {
                Ok(done) => report.compacted.extend(done),
                Err(e) => report.failed.push(format!("{name}: {e:#}")),
            }
        }
    }
    // Work tables of a compaction that will not finish: its day left the
    // compaction window (retention raised, or dropped meanwhile).
    let partitions = day_partitions(&*client).await?;
    for day in days_with_work_tables(&*client).await? {
        let in_window = partitions.iter().any(|(d, compacted)| *d == day && !compacted);
        if !(in_window && day >= oldest_kept && day < oldest_succeeded)
            && let Err(e) = abandon_compaction(client, day).await
        {
            report.failed.push(format!("{}: {e:#}", partition_name(day)));
        }
    }

    if report.unfinished_rows_kept > 0 {
        tracing::warn!(
            rows = report.unfinished_rows_kept,
            "ledger rows still pending, running or retrying past the retention were moved to the default partition; \
             they are deleted once final"
        );
    }
    if !report.failed.is_empty() {
        tracing::warn!(failed = ?report.failed, "ledger partition maintenance left partitions for the next run");
    }
    if !report.created.is_empty()
        || !report.dropped.is_empty()
        || !report.compacted.is_empty()
        || report.expired_default_rows > 0
        || report.expired_runs > 0
    {
        tracing::info!(
            created = ?report.created,
            compacted = ?report.compacted.iter().map(|c| &c.partition).collect::<Vec<_>>(),
            dropped = ?report.dropped,
            adopted_rows = report.adopted_rows,
            expired_default_rows = report.expired_default_rows,
            expired_runs = report.expired_runs,
            "ledger partitions maintained"
        );
    }
    Ok(report)
}

/// Creates the partitions from yesterday to `ahead_days` ahead, and those of
/// days with rows in the default partition (moving the rows in). Returns
/// the partitions created and the rows moved.
async fn create_partitions(
    client: &mut tokio_postgres::Client,
    now: DateTime<Utc>,
    retention: Retention,
) -> anyhow::Result<(Vec<String>, u64)> {
    let today = now.date_naive();
    let oldest_succeeded = retention.oldest_succeeded_day(now);
    let (mut created, mut adopted_rows) = (Vec::new(), 0);
    let tx = client.transaction().await?;
    // Attaching locks the default partition, which every statement of the
    // ledger's hot path locks too.
    set_lock_timeout(&tx).await?;
    let existing: Vec<NaiveDate> = day_partitions(&tx).await?.into_iter().map(|(d, _)| d).collect();
    let mut wanted: Vec<NaiveDate> = (0..=retention.ahead_days + 1)
        .filter_map(|d| (today - Days::new(1)).checked_add_days(Days::new(d.into())))
        .collect();
    // Days that already have rows parked in the default partition. Older
    // days get no partition of their own: their few rows stay in the
    // default partition, under the same retention.
    for row in
        tx.query("SELECT DISTINCT (scheduled_at AT TIME ZONE 'UTC')::date FROM scheduled_jobs_default", &[]).await?
    {
        wanted.push(row.get(0));
    }
    wanted.sort();
    wanted.dedup();
    for day in wanted.into_iter().filter(|d| *d >= oldest_succeeded && !existing.contains(d)) {
        adopted_rows += create_partition(&tx, day).await?;
        created.push(partition_name(day));
    }
    tx.commit().await?;

    Ok((created, adopted_rows))
}

/// Autovacuum of a day partition while its day is being written. Every slot
/// is written three times (claimed, started, finished), and no update can be
/// HOT (the status is indexed), so each leaves dead versions in the heap and
/// an entry in every index; the sweeps that look for `pending` and
/// `running` rows walk those entries. With the defaults (vacuum at 20% dead,
/// throttled), a 5,000 fires/s run went 10 minutes without one vacuum of
/// its day: Postgres's CPU doubled and the sweeps' statements, every 10 s on
/// every node, put a lateness spike on every tenth second. Vacuumed at 5%
/// dead and unthrottled, the work stays proportional to the writes; the
/// nodes apply the same trigger themselves ([`vacuum_churned`]) between
/// autovacuum's visits, and when the server runs without it.
///
/// Why 5% and not less: each vacuum walks every index of the partition
/// whole, so the index work per dead version removed is about 1 / the scale
/// factor whatever the partition's size. At 1% the vacuums of a 5,000
/// fires/s day took half of Postgres's time after 10 minutes and lateness
/// grew with the partition; at 5% they took about a third less in all and
/// the hot statements ran faster (measured, docs/benchmarks.md).
const VACUUM_SETTINGS: &str = "autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0";

/// Page fill of a day partition while its day is being written: claims
/// stop at 70% of a page, so a slot's updates (started, finished) can
/// find room on the page of its claim. An update that does not fit goes to
/// another page and must first WAL-log a lock of the old version; one that
/// fits touches one page, logs only the bytes that changed, and the page's
/// dead versions are pruned in place as it fills. Measured at 5,000
/// fires/s (docs/benchmarks.md): against a full fill, 26-35% less WAL and
/// about 15% less statement time per slot, for a heap about a quarter
/// larger; half a page saved a little more and cost three quarters more
/// heap. A compacted partition (no more updates) is packed full again.
const PAGE_SETTINGS: &str = "fillfactor = 70";

/// Session lock of [`vacuum_churned`]: apart from maintenance's, whose
/// compactions can hold theirs for minutes while the day being written
/// needs its vacuum every few seconds.
pub const VACUUM_LOCK: i64 = 0x6372_6f6e_0003;

/// Dead row versions a partition may hold before [`vacuum_churned`]
/// vacuums it: the trigger `VACUUM_SETTINGS` gives autovacuum, 50 plus 5%
/// of its rows (Postgres's base threshold and the partitions' scale factor).
const VACUUM_BASE_THRESHOLD: f64 = 50.0;
const VACUUM_SCALE_FACTOR: f64 = 0.05;

/// One partition vacuumed by [`vacuum_churned`].
#[derive(Debug, Clone, PartialEq)]
pub struct Vacuumed {
    pub partition: String,
    /// Dead row versions the statistics counted before the vacuum.
    pub dead_rows: i64,
    pub took: Duration,
}

/// What a node remembers of its own vacuums: each partition's count of
/// row writes (updates and deletes) when it last vacuumed it.
#[derive(Debug, Default)]
pub struct VacuumMemory(std::collections::HashMap<String, i64>);

/// Vacuums every ledger partition whose dead row versions passed the
/// trigger its autovacuum settings ask for, now, rather than when (or if)
/// autovacuum gets to it: autovacuum looks at a database once a
/// `autovacuum_naptime` (a minute by default), in which the day being
/// written at 10,000 fires/s gathers over a million dead versions, and a
/// server may run with autovacuum off altogether. Meant to be called every
/// few seconds from every node: one session at a time does the work (the
/// others return nothing), and `SKIP_LOCKED` passes over a partition that
/// autovacuum or a compaction is working on rather than wait for it.
///
/// A partition this node vacuumed is vacuumed again only once as many row
/// writes as the trigger have happened since: dead versions that a long
/// transaction still sees cannot be removed, and a large partition would
/// otherwise have all its indexes walked every few seconds for nothing
/// until that transaction ends.
pub async fn vacuum_churned(
    client: &tokio_postgres::Client,
    memory: &mut VacuumMemory,
) -> anyhow::Result<Vec<Vacuumed>> {
    if !try_lock(client, VACUUM_LOCK).await? {
        return Ok(Vec::new());
    }
    let result = vacuum_churned_locked(client, memory).await;
    unlock(client, VACUUM_LOCK, result).await
}

async fn vacuum_churned_locked(
    client: &tokio_postgres::Client,
    memory: &mut VacuumMemory,
) -> anyhow::Result<Vec<Vacuumed>> {
    let churned = client
        .query(
            "SELECT c.relname::text, s.n_dead_tup, s.n_tup_upd + s.n_tup_del,
                    -- reltuples is -1 until a partition's first vacuum or analyze.
                    $1::float8 + $2::float8 * greatest(c.reltuples, 0)::float8
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             JOIN pg_stat_user_tables s ON s.relid = c.oid
             WHERE i.inhparent = 'scheduled_jobs'::regclass
             ORDER BY s.n_dead_tup DESC",
            &[&VACUUM_BASE_THRESHOLD, &VACUUM_SCALE_FACTOR],
        )
        .await?;
    let mut vacuumed = Vec::new();
    for row in churned {
        let (partition, dead_rows, writes, trigger): (String, i64, i64, f64) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        // Counters below the remembered count were reset (a statistics
        // reset, a crash): count from zero.
        let writes_since_ours = match memory.0.get(&partition) {
            Some(&ours) if ours <= writes => writes - ours,
            _ => writes,
        };
        if dead_rows as f64 <= trigger || writes_since_ours as f64 <= trigger {
            continue;
        }
        let started = Instant::now();
        client.batch_execute(&format!("VACUUM (SKIP_LOCKED) {}", ident(&partition))).await?;
        memory.0.insert(partition.clone(), writes);
        vacuumed.push(Vacuumed { partition, dead_rows, took: started.elapsed() });
    }
    Ok(vacuumed)
}

/// Creates one day partition. Rows of that day already in the default
/// partition are moved into it first: attaching would otherwise fail.
async fn create_partition(tx: &impl GenericClient, day: NaiveDate) -> anyhow::Result<u64> {
    let name = partition_name(day);
    let from = format!("{} 00:00:00+00", day.format("%Y-%m-%d"));
    let to = format!("{} 00:00:00+00", (day + Days::new(1)).format("%Y-%m-%d"));
    tx.batch_execute(&format!(
        "CREATE TABLE {name} (LIKE scheduled_jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH ({VACUUM_SETTINGS}, {PAGE_SETTINGS})"
    ))
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

/// The ledger's columns, in order, as a select list: the copy and its
/// source may differ in physical layout (columns added over time).
async fn columns(client: &impl GenericClient) -> anyhow::Result<String> {
    let names: Vec<String> = client
        .query(
            "SELECT attname::text FROM pg_attribute
             WHERE attrelid = 'scheduled_jobs'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[],
        )
        .await?
        .iter()
        .map(|r| ident(r.get(0)))
        .collect();
    Ok(names.join(", "))
}

async fn set_lock_timeout(tx: &impl GenericClient) -> anyhow::Result<()> {
    tx.batch_execute(&format!("SET LOCAL lock_timeout = '{}ms'", DDL_LOCK_TIMEOUT.as_millis())).await?;
    Ok(())
}

/// Drops the partition of `day`, handing its rows not final yet to the
/// default partition. Returns how many it handed over.
async fn drop_partition(client: &mut tokio_postgres::Client, day: NaiveDate) -> anyhow::Result<u64> {
    let name = partition_name(day);
    let cols = columns(&*client).await?;
    let tx = client.transaction().await?;
    set_lock_timeout(&tx).await?;
    tx.batch_execute(&format!("ALTER TABLE scheduled_jobs DETACH PARTITION {name}"))
        .await
        .with_context(|| format!("detaching {name}"))?;
    // Through the parent: with the day detached, they route to the default partition.
    let kept = tx
        .execute(
            &format!(
                "INSERT INTO scheduled_jobs ({cols}) SELECT {cols} FROM {name} WHERE status IN ({})",
                unfinished_statuses()
            ),
            &[],
        )
        .await?;
    tx.batch_execute(&format!("DROP TABLE {name}; {}", drop_work_tables(&name))).await?;
    tx.commit().await?;
    Ok(kept)
}

fn drop_work_tables(name: &str) -> String {
    format!("DROP TABLE IF EXISTS {name}{COPY_SUFFIX}, {name}{CHANGES_SUFFIX}, {name}{REPLACED_SUFFIX};")
}

/// Removes a compaction's work tables and trigger; the partition stays as
/// it is (complete: the swap never happened).
async fn abandon_compaction(client: &mut tokio_postgres::Client, day: NaiveDate) -> anyhow::Result<()> {
    let name = partition_name(day);
    let tx = client.transaction().await?;
    set_lock_timeout(&tx).await?;
    let exists: bool = tx.query_one("SELECT to_regclass($1) IS NOT NULL", &[&name]).await?.get(0);
    if exists {
        tx.batch_execute(&format!("DROP TRIGGER IF EXISTS {TRACK_TRIGGER} ON {name}")).await?;
    }
    tx.batch_execute(&drop_work_tables(&name)).await?;
    tx.commit().await?;
    Ok(())
}

/// Runs the compaction of `day` from wherever a previous run left it,
/// through step `last`.
async fn compact_locked(
    client: &mut tokio_postgres::Client,
    day: NaiveDate,
    last: CompactionStep,
) -> anyhow::Result<Option<Compaction>> {
    let name = partition_name(day);
    let copy = format!("{name}{COPY_SUFFIX}");
    let changes = format!("{name}{CHANGES_SUFFIX}");
    let Some(state) = client
        .query_opt(
            "SELECT coalesce(obj_description(c.oid, 'pg_class') = $2, false),
                    pg_total_relation_size(c.oid),
                    to_regclass($3) IS NOT NULL, to_regclass($4) IS NOT NULL
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = 'scheduled_jobs'::regclass AND c.relname = $1",
            &[&name, &COMPACTED_MARK, &copy, &changes],
        )
        .await?
    else {
        return Ok(None);
    };
    let (compacted, bytes_before, has_copy, has_changes): (bool, i64, bool, bool) =
        (state.get(0), state.get(1), state.get(2), state.get(3));
    if compacted {
        return Ok(None);
    }

    if !has_changes {
        // Nothing to remove: marking is the whole compaction. A row that
        // succeeds later (a replay) stays until the longer retention, as in
        // a compacted partition.
        let any_succeeded: bool = client
            .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {name} WHERE status = $1)"), &[&SHORT_LIVED.as_str()])
            .await?
            .get(0);
        if !any_succeeded {
            client.batch_execute(&format!("COMMENT ON TABLE {name} IS '{COMPACTED_MARK}'")).await?;
            let kept: i64 = client.query_one(&format!("SELECT count(*) FROM {name}"), &[]).await?.get(0);
            return Ok(Some(Compaction {
                partition: name,
                kept_rows: kept as u64,
                bytes_before,
                bytes_after: bytes_before,
                swap: Duration::ZERO,
            }));
        }
        track_changes(client, &name, &copy, &changes).await?;
        if last == CompactionStep::Track {
            return Ok(None);
        }
    }
    if !has_copy || !has_changes {
        copy_kept_rows(client, day, &name, &copy).await?;
        if last == CompactionStep::Copy {
            return Ok(None);
        }
    }
    let (kept_rows, swap) = swap(client, day, &name, &copy, &changes).await?;
    if last == CompactionStep::Drop {
        // Outside the swap: removing a large table's files at its commit
        // takes a while the ledger need not wait for. Left undone, the next
        // run drops it.
        client.batch_execute(&format!("DROP TABLE IF EXISTS {name}{REPLACED_SUFFIX}")).await?;
    }
    // Statistics for the planner now, not when autovacuum gets to it (outside
    // the swap: it only reads).
    client.batch_execute(&format!("ANALYZE {name}")).await?;
    let bytes_after: i64 =
        client.query_one("SELECT pg_total_relation_size($1::text::regclass)", &[&name]).await?.get(0);
    tracing::info!(partition = %name, kept_rows, bytes_before, bytes_after, swap_ms = swap.as_millis() as u64, "ledger partition compacted");
    Ok(Some(Compaction { partition: name, kept_rows, bytes_before, bytes_after, swap }))
}

/// Step 1: from its commit on, every write to the partition leaves its key
/// in `changes`. A copy left from before (without its changes) cannot be
/// trusted and goes.
async fn track_changes(
    client: &mut tokio_postgres::Client,
    name: &str,
    copy: &str,
    changes: &str,
) -> anyhow::Result<()> {
    let tx = client.transaction().await?;
    set_lock_timeout(&tx).await?;
    tx.batch_execute(&format!(
        "DROP TABLE IF EXISTS {copy};
         CREATE OR REPLACE FUNCTION {TRACK_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF TG_OP = 'DELETE' THEN
                 EXECUTE format('INSERT INTO %I VALUES ($1, $2)', TG_ARGV[0]) USING OLD.job_id, OLD.scheduled_at;
             ELSE
                 EXECUTE format('INSERT INTO %I VALUES ($1, $2)', TG_ARGV[0]) USING NEW.job_id, NEW.scheduled_at;
             END IF;
             RETURN NULL;
         END $$;
         CREATE TABLE {changes} (job_id uuid NOT NULL, scheduled_at timestamptz NOT NULL);
         CREATE TRIGGER {TRACK_TRIGGER} AFTER INSERT OR UPDATE OR DELETE ON {name}
             FOR EACH ROW EXECUTE FUNCTION {TRACK_FUNCTION}('{changes}');"
    ))
    .await
    .with_context(|| format!("tracking changes to {name}"))?;
    tx.commit().await?;
    Ok(())
}

/// Step 2: the rows to keep, in a table shaped like a partition, with a
/// CHECK constraint that proves the day's range to `ATTACH`. Created and
/// filled in one transaction: when the table exists, it is complete.
async fn copy_kept_rows(
    client: &mut tokio_postgres::Client,
    day: NaiveDate,
    name: &str,
    copy: &str,
) -> anyhow::Result<()> {
    let cols = columns(&*client).await?;
    let (from, to) = (day_start(day), day_start(day + Days::new(1)));
    let tx = client.transaction().await?;
    tx.batch_execute(&format!("DROP TABLE IF EXISTS {copy}; CREATE TABLE {copy} (LIKE scheduled_jobs INCLUDING ALL)"))
        .await?;
    tx.execute(
        &format!("INSERT INTO {copy} ({cols}) SELECT {cols} FROM {name} WHERE status IN ({})", kept_statuses()),
        &[],
    )
    .await
    .with_context(|| format!("copying the rows {name} keeps"))?;
    tx.batch_execute(&format!(
        "ALTER TABLE {copy} ADD CONSTRAINT {copy}_range
             CHECK (scheduled_at IS NOT NULL AND scheduled_at >= '{from}' AND scheduled_at < '{to}')",
        from = from.to_rfc3339(),
        to = to.to_rfc3339()
    ))
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Step 3: the copy, brought up to date with the rows written since step 1,
/// replaces the partition under the same name. Returns the rows it holds
/// and how long the ledger was locked.
async fn swap(
    client: &mut tokio_postgres::Client,
    day: NaiveDate,
    name: &str,
    copy: &str,
    changes: &str,
) -> anyhow::Result<(u64, Duration)> {
    let cols = columns(&*client).await?;
    let (from, to) = (day_start(day).to_rfc3339(), day_start(day + Days::new(1)).to_rfc3339());
    // The partition's index names, by the parent index each is attached to.
    let index_names: Vec<(Oid, String)> = client
        .query(
            "SELECT i.inhparent, c.relname::text FROM pg_index x
             JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_inherits i ON i.inhrelid = x.indexrelid
             WHERE x.indrelid = $1::text::regclass",
            &[&name],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let tx = client.transaction().await?;
    set_lock_timeout(&tx).await?;
    let started = Instant::now();
    tx.batch_execute(&format!("ALTER TABLE scheduled_jobs DETACH PARTITION {name}"))
        .await
        .with_context(|| format!("detaching {name}"))?;
    // Nothing writes to it now: the rows written since step 1 are copied
    // again as they are.
    tx.batch_execute(&format!(
        "DELETE FROM {copy} c USING {changes} d WHERE c.job_id = d.job_id AND c.scheduled_at = d.scheduled_at;
         INSERT INTO {copy} ({cols}) SELECT {cols} FROM {name} o
         WHERE o.status IN ({kept})
           AND EXISTS (SELECT 1 FROM {changes} d WHERE d.job_id = o.job_id AND d.scheduled_at = o.scheduled_at);
         ALTER TABLE scheduled_jobs ATTACH PARTITION {copy} FOR VALUES FROM ('{from}') TO ('{to}');
         ALTER TABLE {copy} DROP CONSTRAINT {copy}_range;
         DROP TABLE {changes};
         ALTER TABLE {name} RENAME TO {name}{REPLACED_SUFFIX};
         ALTER TABLE {copy} RENAME TO {name};
         COMMENT ON TABLE {name} IS '{COMPACTED_MARK}';",
        kept = kept_statuses()
    ))
    .await
    .with_context(|| format!("swapping the compacted copy of {name} in"))?;
    let attached: Vec<(Oid, String)> = tx
        .query(
            "SELECT i.inhparent, c.relname::text FROM pg_index x
             JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_inherits i ON i.inhrelid = x.indexrelid
             WHERE x.indrelid = $1::text::regclass",
            &[&name],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (i, (_, old)) in index_names.iter().enumerate() {
        tx.batch_execute(&format!(
            "ALTER INDEX {} RENAME TO {}",
            ident(old),
            ident(&format!("{name}{REPLACED_SUFFIX}_{i}"))
        ))
        .await?;
    }
    for (parent, current) in attached {
        if let Some((_, old)) = index_names.iter().find(|(p, _)| *p == parent) {
            tx.batch_execute(&format!("ALTER INDEX {} RENAME TO {}", ident(&current), ident(old))).await?;
        }
    }
    let kept: i64 = tx.query_one(&format!("SELECT count(*) FROM {name}"), &[]).await?.get(0);
    tx.commit().await?;
    Ok((kept as u64, started.elapsed()))
}

/// The ledger's retention and partitions ahead: the schedulers apply them
/// (partition maintenance), `migrate` too, and the API explains with them.
#[derive(clap::Args, Clone, Debug)]
pub struct LedgerArgs {
    /// Days a ledger row that succeeded is kept; its day partition is then
    /// compacted (those rows removed).
    #[arg(
        long,
        env = "LEDGER_RETENTION_DAYS",
        default_value_t = Retention::DEFAULT_SUCCEEDED_DAYS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub ledger_retention_days: u32,
    /// Days every other ledger row is kept (failed, skipped, missed); its day
    /// partition is then dropped. At least --ledger-retention-days.
    #[arg(
        long,
        env = "LEDGER_UNSUCCESSFUL_RETENTION_DAYS",
        default_value_t = Retention::DEFAULT_UNSUCCESSFUL_DAYS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub ledger_unsuccessful_retention_days: u32,
    /// Day partitions kept created ahead of today.
    #[arg(long, env = "LEDGER_PARTITIONS_AHEAD_DAYS", default_value_t = Retention::DEFAULT_AHEAD_DAYS)]
    pub ledger_partitions_ahead_days: u32,
}

impl LedgerArgs {
    /// The retention, or an error naming the flags when the longer one is
    /// shorter.
    pub fn retention(&self) -> anyhow::Result<Retention> {
        let retention = Retention {
            ahead_days: self.ledger_partitions_ahead_days,
            succeeded_days: self.ledger_retention_days,
            unsuccessful_days: self.ledger_unsuccessful_retention_days,
        };
        retention.check().map_err(|e| {
            anyhow::anyhow!(
                "--ledger-unsuccessful-retention-days (LEDGER_UNSUCCESSFUL_RETENTION_DAYS) is {}, shorter than \
                 --ledger-retention-days (LEDGER_RETENTION_DAYS) {}: rows that did not succeed must be kept at least as \
                 long as those that did",
                e.unsuccessful_days,
                e.succeeded_days
            )
        })?;
        Ok(retention)
    }
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
        assert_eq!(day_of_partition("scheduled_jobs_20260105_compact"), None);
        assert_eq!(day_of_work_table("scheduled_jobs_20260105_compact"), Some(d));
        assert_eq!(day_of_work_table("scheduled_jobs_20260105_changes"), Some(d));
        assert_eq!(day_of_work_table("scheduled_jobs_20260105_replaced"), Some(d));
        assert_eq!(day_of_work_table("scheduled_jobs_20260105"), None);
    }

    #[test]
    fn only_rows_that_succeeded_go_early_and_only_final_rows_are_dropped() {
        assert_eq!(kept_statuses(), "'pending', 'running', 'retrying', 'failed', 'skipped', 'missed'");
        assert_eq!(unfinished_statuses(), "'pending', 'running', 'retrying'");
    }

    #[test]
    fn retention_days_and_their_order() {
        let now = Utc.with_ymd_and_hms(2026, 5, 1, 12, 0, 0).unwrap();
        let r = Retention::default();
        assert_eq!(r.oldest_succeeded_day(now), NaiveDate::from_ymd_opt(2026, 3, 17).unwrap());
        assert_eq!(r.oldest_kept_day(now), NaiveDate::from_ymd_opt(2026, 1, 31).unwrap());
        assert_eq!(r.check(), Ok(()));
        let equal = Retention { unsuccessful_days: 45, ..r };
        assert_eq!(equal.check(), Ok(()));
        let reversed = Retention { unsuccessful_days: 30, ..r };
        assert_eq!(reversed.check(), Err(RetentionOutOfOrder { succeeded_days: 45, unsuccessful_days: 30 }));
        // A huge retention keeps everything instead of overflowing.
        assert_eq!(Retention { unsuccessful_days: u32::MAX, ..r }.oldest_kept_day(now), NaiveDate::MIN);
    }

    #[derive(clap::Parser)]
    #[command(name = "config")]
    struct WithLedgerArgs {
        #[command(flatten)]
        ledger: super::LedgerArgs,
    }

    #[test]
    fn ledger_retention_defaults_and_order() {
        let defaults = <WithLedgerArgs as clap::Parser>::parse_from(["config"]).ledger.retention().unwrap();
        assert_eq!(defaults, super::Retention::default());
        let set = <WithLedgerArgs as clap::Parser>::parse_from([
            "config",
            "--ledger-retention-days=30",
            "--ledger-unsuccessful-retention-days=30",
        ]);
        let r = set.ledger.retention().unwrap();
        assert_eq!((r.succeeded_days, r.unsuccessful_days), (30, 30));

        let reversed =
            <WithLedgerArgs as clap::Parser>::parse_from(["config", "--ledger-unsuccessful-retention-days=40"]);
        let e = reversed.ledger.retention().unwrap_err().to_string();
        assert!(e.contains("--ledger-unsuccessful-retention-days (LEDGER_UNSUCCESSFUL_RETENTION_DAYS) is 40"), "{e}");
        assert!(e.contains("--ledger-retention-days (LEDGER_RETENTION_DAYS) 45"), "{e}");
        assert!(<WithLedgerArgs as clap::Parser>::try_parse_from(["config", "--ledger-retention-days=0"]).is_err());
    }
}
