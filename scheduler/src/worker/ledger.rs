//! The worker's ledger writes. Every write names the fire id and the attempt,
//! so a duplicate or stale message can never overwrite a newer outcome.

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use uuid::Uuid;

use common::message::FireMessage;

pub enum Start {
    /// The row is ours to deliver.
    Go,
    /// Already running elsewhere, finished, or from another fire: drop it.
    Duplicate,
    /// The job was deleted, paused or changed since the slot was claimed.
    Cancelled(&'static str),
}

/// Moves the row to `running` for this fire and attempt. A redelivery of the
/// same attempt (the worker that had it died) may take a `running` row back,
/// and so may the next attempt while the failed one is still recording.
pub async fn start(
    pool: &Pool,
    m: &FireMessage,
    attempt: u32,
    worker_id: &str,
    redelivered: bool,
) -> anyhow::Result<Start> {
    let client = pool.get().await?;
    let attempt = attempt as i32;
    let stmt = client
        .prepare_cached(
            "UPDATE scheduled_jobs l SET status = 'running', attempts = $4, worker_id = $5,
                    started_at = now(), finished_at = NULL
             WHERE l.job_id = $1 AND l.scheduled_at = $2 AND l.fire_id = $3
               AND ((l.status IN ('pending', 'retrying') AND l.attempts = $4 - 1)
                    OR (l.status = 'running' AND l.attempts = $4 AND $6)
                    -- The worker of attempt n-1 publishes attempt n before it
                    -- records `retrying`; a short delay can bring attempt n in
                    -- between. An attempt n exists only once n-1 has failed.
                    OR (l.status = 'running' AND l.attempts = $4 - 1 AND $4 > 1))
               AND (l.trigger = 'manual' OR EXISTS (
                    SELECT 1 FROM jobs j WHERE j.id = l.job_id AND j.version = l.job_version
                      AND j.deleted_at IS NULL AND NOT j.paused))
             RETURNING 1",
        )
        .await?;
    let started =
        client.query_opt(&stmt, &[&m.job_id, &m.scheduled_at, &m.fire_id, &attempt, &worker_id, &redelivered]).await?;
    if started.is_some() {
        return Ok(Start::Go);
    }
    // Find out why, and record a cancellation on a row nobody will run now.
    let row = client
        .query_opt(
            "SELECT l.status, l.fire_id, j.id IS NULL OR j.deleted_at IS NOT NULL, coalesce(j.paused, false),
                    coalesce(j.version <> l.job_version, false)
             FROM scheduled_jobs l LEFT JOIN jobs j ON j.id = l.job_id
             WHERE l.job_id = $1 AND l.scheduled_at = $2",
            &[&m.job_id, &m.scheduled_at],
        )
        .await?;
    let Some(row) = row else { return Ok(Start::Duplicate) };
    let (status, fire_id): (&str, Uuid) = (row.get(0), row.get(1));
    if fire_id != m.fire_id || !matches!(status, "pending" | "retrying") {
        return Ok(Start::Duplicate);
    }
    let reason = if row.get::<_, bool>(2) {
        "deleted"
    } else if row.get::<_, bool>(3) {
        "paused"
    } else if row.get::<_, bool>(4) {
        "superseded"
    } else {
        return Ok(Start::Duplicate);
    };
    client
        .execute(
            "UPDATE scheduled_jobs SET status = 'skipped', reason = $4, finished_at = now()
             WHERE job_id = $1 AND scheduled_at = $2 AND fire_id = $3 AND status IN ('pending', 'retrying')",
            &[&m.job_id, &m.scheduled_at, &m.fire_id, &reason],
        )
        .await?;
    Ok(Start::Cancelled(reason))
}

pub struct Finish<'a> {
    pub status: &'static str,
    pub http_status: Option<u16>,
    pub sqs_message_id: Option<&'a str>,
    pub excerpt: &'a str,
    pub error: Option<&'a str>,
}

/// Records an attempt's outcome; only the attempt that is running may.
pub async fn finish(pool: &Pool, m: &FireMessage, attempt: u32, f: Finish<'_>) -> anyhow::Result<bool> {
    let client = pool.get().await?;
    let stmt = client
        .prepare_cached(
            "UPDATE scheduled_jobs SET status = $5, finished_at = now(), http_status = $6,
                    sqs_message_id = coalesce($7, sqs_message_id), response_excerpt = $8, error = $9
             WHERE job_id = $1 AND scheduled_at = $2 AND fire_id = $3 AND attempts = $4 AND status = 'running'",
        )
        .await?;
    let http_status = f.http_status.map(i32::from);
    let excerpt = (!f.excerpt.is_empty()).then_some(f.excerpt);
    let n = client
        .execute(
            &stmt,
            &[
                &m.job_id,
                &m.scheduled_at,
                &m.fire_id,
                &(attempt as i32),
                &f.status,
                &http_status,
                &f.sqs_message_id,
                &excerpt,
                &f.error,
            ],
        )
        .await?;
    Ok(n == 1)
}

pub fn lateness_seconds(started: DateTime<Utc>, scheduled_at: DateTime<Utc>) -> f64 {
    (started - scheduled_at).num_milliseconds() as f64 / 1000.0
}
