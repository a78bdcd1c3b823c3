//! The `worker_heartbeats` table: each worker's row, refreshed every
//! [`WORKER_HEARTBEAT_EVERY`](crate::ledger::WORKER_HEARTBEAT_EVERY) on a
//! session of its own. Whether a worker is presumed gone is the ledger's
//! predicate (`ledger.rs`), which reads this table.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;

/// Records a beat of `worker_id`, with the backend of the session it beats
/// on: the session ending (the process died) says the worker is gone sooner
/// than its beat's age.
pub async fn beat(client: &tokio_postgres::Client, worker_id: &str) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO worker_heartbeats (worker_id, seen_at, session_pid) VALUES ($1, now(), pg_backend_pid())
             ON CONFLICT (worker_id) DO UPDATE SET seen_at = now(), session_pid = pg_backend_pid()",
            &[&worker_id],
        )
        .await?;
    Ok(())
}

/// Removes `worker_id`'s row (a worker that stops on its own).
pub async fn forget(client: &impl GenericClient, worker_id: &str) -> Result<(), tokio_postgres::Error> {
    client.execute("DELETE FROM worker_heartbeats WHERE worker_id = $1", &[&worker_id]).await?;
    Ok(())
}

/// A worker as its heartbeat row shows it.
#[derive(Debug, Clone)]
pub struct SeenWorker {
    pub worker_id: String,
    pub seen_at: DateTime<Utc>,
    /// How long ago, by the database's clock.
    pub age_ms: i64,
}

/// Every worker that heartbeat, most recently seen first.
pub async fn seen(client: &impl GenericClient) -> Result<Vec<SeenWorker>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT worker_id, seen_at, (extract(epoch FROM now() - seen_at) * 1000)::bigint AS age_ms
             FROM worker_heartbeats ORDER BY seen_at DESC, worker_id",
            &[],
        )
        .await?
        .iter()
        .map(|r| SeenWorker { worker_id: r.get("worker_id"), seen_at: r.get("seen_at"), age_ms: r.get("age_ms") })
        .collect())
}
