//! A fresh, migrated database per benchmark run, dropped at the end.

use chrono::Utc;
use uuid::Uuid;

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
        let url = common::testing::with_database(admin_url, &name);
        common::db::migrate(&url).await?;
        let mut client = common::db::connect(&url).await?;
        common::ledger::partitions::maintain(&mut client, Utc::now(), Default::default()).await?;
        Ok(Self { admin_url: admin_url.to_owned(), name, url })
    }

    pub async fn drop_database(self) -> anyhow::Result<()> {
        let admin = common::db::connect(&self.admin_url).await?;
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)", self.name)).await?;
        Ok(())
    }
}

/// A unique cluster name, so a run's queues and keys are its own.
pub fn cluster_name(prefix: &str) -> String {
    format!("{prefix}-{}", &Uuid::new_v4().simple().to_string()[..8])
}
