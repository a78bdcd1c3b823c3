//! A fresh, migrated database per benchmark run, dropped at the end.

use anyhow::Context as _;
use chrono::Utc;
use uuid::Uuid;

/// What a run's figures depend on in the PostgreSQL server beside the
/// product: a small buffer cache and WAL budget turn the ledger's writes
/// into checkpoints seconds apart, each followed by full-page images.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PgServer {
    pub settings: String,
    pub checkpoints_requested: i64,
    pub checkpoints_timed: i64,
    /// The server's WAL position in bytes (server-wide, like the counters).
    pub wal_position: i64,
}

/// This database's ledger: its partitions' pages (live and dead row
/// versions), their indexes' pages, and its rows.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LedgerSize {
    pub heap_bytes: i64,
    pub index_bytes: i64,
    pub rows: i64,
}

impl PgServer {
    /// The report's rows: the settings, the checkpoints and the WAL since
    /// `start` (with the WAL per slot of the `slots` due in between), and the
    /// ledger's size at the end.
    pub fn rows(&self, start: &PgServer, slots: u64, ledger: &LedgerSize, report: &mut crate::report::Report) {
        let forced = self.checkpoints_requested - start.checkpoints_requested;
        let timed = self.checkpoints_timed - start.checkpoints_timed;
        let wal = self.wal_position - start.wal_position;
        let per = |bytes: i64, n: i64| if n > 0 { bytes / n } else { 0 };
        let mb = |bytes: i64| crate::report::fmt_int(bytes / 1_000_000);
        report.row("postgres", &self.settings);
        report.row("postgres checkpoints in the run: forced by WAL volume / timed", format!("{forced} / {timed}"));
        report.row("postgres WAL in the run, per slot", format!("{} MB, {} B", mb(wal), per(wal, slots as i64)));
        report.row(
            "ledger at the end: rows, heap, indexes (per row)",
            format!(
                "{}, {} MB, {} MB ({} B, {} B)",
                crate::report::fmt_int(ledger.rows),
                mb(ledger.heap_bytes),
                mb(ledger.index_bytes),
                per(ledger.heap_bytes, ledger.rows),
                per(ledger.index_bytes, ledger.rows)
            ),
        );
        report.data(
            "postgres",
            serde_json::json!({
                "settings": self.settings, "checkpoints_forced": forced, "checkpoints_timed": timed,
                "wal_bytes": wal, "wal_bytes_per_slot": per(wal, slots as i64),
                "ledger_rows": ledger.rows, "ledger_heap_bytes": ledger.heap_bytes,
                "ledger_index_bytes": ledger.index_bytes,
            }),
        );
    }
}

pub struct BenchDb {
    admin_url: String,
    pub name: String,
    pub url: String,
}

impl BenchDb {
    /// Creates and migrates `cronshard_bench_<random>`, with today's ledger
    /// partitions, on the server of `admin_url`.
    pub async fn create(admin_url: &str) -> anyhow::Result<Self> {
        let name = format!("cronshard_bench_{}", Uuid::new_v4().simple());
        let url = testing::with_database(admin_url, &name);
        store::db::migrate(&url).await?;
        let mut client = store::db::connect(&url).await?;
        store::ledger::partitions::maintain(&mut client, Utc::now(), Default::default()).await?;
        Ok(Self { admin_url: admin_url.to_owned(), name, url })
    }

    /// Creates `cronshard_bench_<random>` and migrates it with `api_binary
    /// migrate`: the schema of that build (an older release's), with the
    /// partitions its schedulers make.
    pub async fn create_migrated_by(admin_url: &str, api_binary: &std::path::Path) -> anyhow::Result<Self> {
        let name = format!("cronshard_bench_{}", Uuid::new_v4().simple());
        let url = testing::with_database(admin_url, &name);
        migrate_with(api_binary, &url).await?;
        Ok(Self { admin_url: admin_url.to_owned(), name, url })
    }

    /// The server's settings that set the ledger's write cost, and its
    /// checkpoint counters so far (server-wide).
    pub async fn server(&self) -> anyhow::Result<PgServer> {
        let client = store::db::connect(&self.url).await?;
        let settings = client
            .query_one(
                "SELECT format('shared_buffers %s, max_wal_size %s, checkpoint_timeout %s, wal_compression %s',
                        current_setting('shared_buffers'), current_setting('max_wal_size'),
                        current_setting('checkpoint_timeout'), current_setting('wal_compression'))",
                &[],
            )
            .await?
            .get(0);
        // PostgreSQL 17 moved the counters to their own view.
        let counters =
            match client.query_one("SELECT checkpoints_req, checkpoints_timed FROM pg_stat_bgwriter", &[]).await {
                Ok(row) => row,
                Err(_) => client.query_one("SELECT num_requested, num_timed FROM pg_stat_checkpointer", &[]).await?,
            };
        let wal_position =
            client.query_one("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint", &[]).await?.get(0);
        Ok(PgServer {
            settings,
            checkpoints_requested: counters.get(0),
            checkpoints_timed: counters.get(1),
            wal_position,
        })
    }

    /// The ledger's size now: read once, at a run's end (its row count scans
    /// the ledger).
    pub async fn ledger_size(&self) -> anyhow::Result<LedgerSize> {
        let client = store::db::connect(&self.url).await?;
        let row = client
            .query_one(
                "SELECT coalesce(sum(pg_relation_size(i.inhrelid)), 0)::bigint,
                        coalesce(sum(pg_indexes_size(i.inhrelid)), 0)::bigint,
                        (SELECT count(*) FROM scheduled_jobs)
                 FROM pg_inherits i WHERE i.inhparent = 'scheduled_jobs'::regclass",
                &[],
            )
            .await?;
        Ok(LedgerSize { heap_bytes: row.get(0), index_bytes: row.get(1), rows: row.get(2) })
    }

    pub async fn drop_database(self) -> anyhow::Result<()> {
        let admin = store::db::connect(&self.admin_url).await?;
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)).await?;
        Ok(())
    }
}

/// A unique cluster name, so a run's queues and keys are its own.
pub fn cluster_name(prefix: &str) -> String {
    format!("{prefix}-{}", &Uuid::new_v4().simple().to_string()[..8])
}

/// `api_binary migrate` on `database_url`: the schema of that build.
pub async fn migrate_with(api_binary: &std::path::Path, database_url: &str) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(api_binary)
        .arg("migrate")
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .with_context(|| format!("running {} migrate", api_binary.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} migrate failed: {}",
        api_binary.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
