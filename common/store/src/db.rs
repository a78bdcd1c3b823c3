//! Postgres: the pool every binary uses, and the migration runner.

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

mod embedded {
    refinery::embed_migrations!("../../migrations");
}

/// Builds a pool; connections are opened lazily on first use.
pub fn pool(database_url: &str, max_size: usize) -> anyhow::Result<Pool> {
    pool_with_settings(database_url, max_size, &[])
}

/// Session settings for the scheduler's and the worker's pools, whose hot
/// statements look rows up by key over the partitioned ledger, from arrays.
///
/// - Generic plans: a custom plan is re-planned against every day partition
///   on each execution (2–4 ms, far more than running it); the generic plan
///   prunes partitions at run time just as well.
/// - No sequential scans, hash or merge joins: a generic plan made while a
///   partition was new (never analyzed: a new database, or the day that just
///   began) hash-joined a sequential scan of every partition with the array.
///   That read whole partitions per statement until autovacuum analyzed
///   them, and it visited rows in heap order instead of the sorted order of
///   the array, so two multi-row writers deadlocked (see `lock_order`). With
///   these off every hot statement is a nested loop of key lookups in array
///   order, whatever the statistics. A statement with no usable index still
///   scans; it is only costed as a last resort.
/// - No JIT: a plan that keeps a disabled node is costed with Postgres's
///   10^10 penalty, far past `jit_above_cost`, so every statement that must
///   scan (a small table such as `calendars`, read every few seconds) was
///   compiled by LLVM on each run: 50–800 ms of a core for a 0.1 ms query,
///   about a tenth of Postgres's CPU at 3,000 fires/s. None of these
///   statements runs long enough for compiled code to pay off.
pub const HOT_PATH_SETTINGS: &[(&str, &str)] = &[
    ("plan_cache_mode", "force_generic_plan"),
    ("enable_seqscan", "off"),
    ("enable_hashjoin", "off"),
    ("enable_mergejoin", "off"),
    ("jit", "off"),
];

/// A pool whose connections start with `settings` (`-c name=value`), added
/// to any options the URL already carries.
pub fn pool_with_settings(database_url: &str, max_size: usize, settings: &[(&str, &str)]) -> anyhow::Result<Pool> {
    let mut config =
        tokio_postgres::Config::from_str(database_url).context("DATABASE_URL is not a valid Postgres URL")?;
    if !settings.is_empty() {
        let mut options = config.get_options().unwrap_or_default().to_owned();
        for (name, value) in settings {
            options.push_str(&format!(" -c {name}={value}"));
        }
        config.options(options.trim_start());
    }
    config.connect_timeout(Duration::from_secs(5));
    if config.get_application_name().is_none() {
        config.application_name("cronshard");
    }
    let manager = Manager::from_config(config, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
    Pool::builder(manager)
        .max_size(max_size)
        .wait_timeout(Some(Duration::from_secs(10)))
        .create_timeout(Some(Duration::from_secs(5)))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .build()
        .context("building the Postgres pool")
}

/// Runs `statement` again when Postgres chose it as a deadlock victim (it
/// was rolled back, so nothing of it was applied), up to 3 tries. Multi-row
/// ledger writes also take their rows in one order, `(job_id,
/// scheduled_at)` (see `lock_order`), which makes deadlocks rare; this makes
/// the rare one harmless instead of failing a whole batch.
pub async fn retry_deadlock<T, F, Fut>(mut statement: F) -> Result<T, tokio_postgres::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
{
    let mut tries = 1;
    loop {
        match statement().await {
            Err(e) if tries < 3 && e.code() == Some(&tokio_postgres::error::SqlState::T_R_DEADLOCK_DETECTED) => {
                tracing::debug!(tries, "deadlock victim; running the statement again");
                tries += 1;
            }
            result => return result,
        }
    }
}

/// Indices of `keys` in ledger lock order: every multi-row write sends its
/// rows sorted by `(job_id, scheduled_at)`, so two writers touching the same
/// rows take their locks in the same order and cannot deadlock each other.
pub fn lock_order<K: Ord>(keys: impl Iterator<Item = K>) -> Vec<usize> {
    let mut keyed: Vec<(K, usize)> = keys.enumerate().map(|(i, k)| (k, i)).collect();
    keyed.sort();
    keyed.into_iter().map(|(_, i)| i).collect()
}

/// `items` in ledger lock order (see [`lock_order`]), by each item's
/// `(job_id, scheduled_at)`.
pub fn in_lock_order<T, K: Ord>(items: &[T], key: impl Fn(&T) -> K) -> Vec<&T> {
    lock_order(items.iter().map(key)).into_iter().map(|i| &items[i]).collect()
}

/// Opens one unpooled connection (for LISTEN and for migrations).
pub async fn connect(database_url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(database_url, NoTls).await?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection closed");
        }
    });
    Ok(client)
}

/// Creates the database named in `database_url` when it does not exist yet,
/// through the `postgres` maintenance database of the same server.
pub async fn create_database_if_missing(database_url: &str) -> anyhow::Result<bool> {
    let config = tokio_postgres::Config::from_str(database_url)?;
    let name = config.get_dbname().context("DATABASE_URL names no database")?.to_owned();
    match connect(database_url).await {
        Ok(_) => return Ok(false),
        Err(e)
            if e.downcast_ref::<tokio_postgres::Error>().and_then(|e| e.code())
                == Some(&tokio_postgres::error::SqlState::INVALID_CATALOG_NAME) => {}
        Err(e) => return Err(e.context("connecting to Postgres")),
    }
    let mut admin = config.clone();
    admin.dbname("postgres");
    let (client, connection) = admin.connect(NoTls).await.context("connecting to the postgres maintenance database")?;
    tokio::spawn(connection);
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    match client.batch_execute(&format!("CREATE DATABASE {quoted}")).await {
        Ok(()) => Ok(true),
        // Another process created it between our check and our create.
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) => Ok(false),
        Err(e) => Err(e).context(format!("creating database {quoted}")),
    }
}

/// Applies `migrations/` (embedded at build time). Safe to run from several
/// processes at once: an advisory lock serialises them.
pub async fn migrate(database_url: &str) -> anyhow::Result<()> {
    create_database_if_missing(database_url).await?;
    let mut client = connect(database_url).await.context("connecting to Postgres to migrate")?;
    const MIGRATION_LOCK: i64 = 0x6372_6f6e_0001;
    client.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await?;
    // A database migrated by a newer release is accepted (its migrations
    // are not ours to undo): a rollback to this release's binaries keeps
    // the newer schema, which stays compatible across one release.
    let result = embedded::migrations::runner().set_abort_missing(false).run_async(&mut client).await;
    client.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await?;
    let report = result.context("applying migrations")?;
    for m in report.applied_migrations() {
        tracing::info!(migration = %m, "applied migration");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::lock_order;

    #[test]
    fn lock_order_sorts_by_key_and_keeps_every_index_once() {
        let keys = [(3, 'a'), (1, 'b'), (3, 'a'), (2, 'z'), (1, 'a')];
        let order = lock_order(keys.iter().copied());
        assert_eq!(order, [4, 1, 3, 0, 2]);
        let sorted: Vec<_> = order.iter().map(|&i| keys[i]).collect();
        assert!(sorted.windows(2).all(|w| w[0] <= w[1]));
    }
}
