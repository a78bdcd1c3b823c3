//! The worker's ledger writes. Every write names the fire id and the attempt,
//! so a duplicate or stale message can never overwrite a newer outcome.
//!
//! Both transitions run as multi-row statements over `unnest` arrays (fed by
//! `batch::Batcher`): a burst of N due messages costs a handful of round
//! trips, not 2·N. Each row keeps exactly the conditions a single-row write
//! would have.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use deadpool_postgres::{ClientWrapper, Pool};
use tokio_postgres::Client;
use uuid::Uuid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The row is ours to deliver.
    Go,
    /// Already running elsewhere, finished, or from another fire: drop it.
    Duplicate,
    /// The job was deleted, paused or changed since the slot was claimed.
    Cancelled(&'static str),
}

/// One message asking to move its row to `running`.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub job_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub fire_id: Uuid,
    pub attempt: i32,
    pub redelivered: bool,
    /// When the message may be delivered. A row armed ahead of it records
    /// this as `started_at`, so the stuck-`running` sweep counts from the
    /// delivery, not from the arming.
    pub due_at: DateTime<Utc>,
}

type Slot = (Uuid, DateTime<Utc>);

/// Moves each request's row to `running` for its fire and attempt. A
/// redelivery of the same attempt (the worker that had it died) may take a
/// `running` row back, and so may the next attempt while the failed one is
/// still recording.
///
/// An `UPDATE … FROM` changes a row once however many inputs match it, so
/// the batch runs in rounds in which each slot appears once; a second message
/// for a slot is decided against the row the first one left.
pub async fn start_batch(pool: &Pool, worker_id: &str, requests: Vec<StartRequest>) -> anyhow::Result<Vec<Start>> {
    let client = pool.get().await?;
    let mut answers = vec![Start::Duplicate; requests.len()];
    let mut seen: HashSet<(Uuid, DateTime<Utc>, Uuid, i32)> = HashSet::new();
    let mut left: Vec<usize> = (0..requests.len()).collect();
    while !left.is_empty() {
        let mut in_round: HashSet<Slot> = HashSet::new();
        let (round, later): (Vec<usize>, Vec<usize>) =
            left.into_iter().partition(|&i| in_round.insert((requests[i].job_id, requests[i].scheduled_at)));
        // The same fire and attempt twice in one batch (an outbox republish
        // meeting the original): one delivery is enough.
        let round: Vec<usize> = round
            .into_iter()
            .filter(|&i| {
                let r = &requests[i];
                seen.insert((r.job_id, r.scheduled_at, r.fire_id, r.attempt))
            })
            .collect();
        let rows: Vec<&StartRequest> = round.iter().map(|&i| &requests[i]).collect();
        for (i, answer) in round.iter().zip(start_round(&client, worker_id, &rows).await?) {
            answers[*i] = answer;
        }
        left = later;
    }
    Ok(answers)
}

async fn start_round(client: &ClientWrapper, worker_id: &str, rows: &[&StartRequest]) -> anyhow::Result<Vec<Start>> {
    let sorted: Vec<&StartRequest> =
        common::db::lock_order(rows.iter().map(|r| (r.job_id, r.scheduled_at))).into_iter().map(|i| rows[i]).collect();
    let job_ids: Vec<Uuid> = sorted.iter().map(|r| r.job_id).collect();
    let scheduled: Vec<DateTime<Utc>> = sorted.iter().map(|r| r.scheduled_at).collect();
    let fire_ids: Vec<Uuid> = sorted.iter().map(|r| r.fire_id).collect();
    let attempts: Vec<i32> = sorted.iter().map(|r| r.attempt).collect();
    let redelivered: Vec<bool> = sorted.iter().map(|r| r.redelivered).collect();
    let due: Vec<DateTime<Utc>> = sorted.iter().map(|r| r.due_at).collect();
    let stmt = client
        .prepare_cached(
            "UPDATE scheduled_jobs l SET status = 'running', attempts = b.attempt, worker_id = $6,
                    started_at = greatest(now(), b.due_at), finished_at = NULL
             FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[], $4::int[], $5::bool[], $7::timestamptz[])
                  AS b(job_id, scheduled_at, fire_id, attempt, redelivered, due_at)
             WHERE l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at AND l.fire_id = b.fire_id
               AND ((l.status IN ('pending', 'retrying') AND l.attempts = b.attempt - 1)
                    OR (l.status = 'running' AND l.attempts = b.attempt AND b.redelivered)
                    -- The worker of attempt n-1 publishes attempt n before it
                    -- records `retrying`; a short delay can bring attempt n in
                    -- between. An attempt n exists only once n-1 has failed.
                    OR (l.status = 'running' AND l.attempts = b.attempt - 1 AND b.attempt > 1))
               AND (l.trigger = 'manual' OR EXISTS (
                    SELECT 1 FROM jobs j WHERE j.id = l.job_id AND j.version = l.job_version
                      AND j.deleted_at IS NULL AND NOT j.paused))
             RETURNING l.job_id, l.scheduled_at",
        )
        .await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
        [&job_ids, &scheduled, &fire_ids, &attempts, &redelivered, &worker_id, &due];
    let started: HashSet<Slot> = common::db::retry_deadlock(|| client.query(&stmt, &params))
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    let mut answers = Vec::with_capacity(rows.len());
    for r in rows {
        answers.push(if started.contains(&(r.job_id, r.scheduled_at)) {
            Start::Go
        } else {
            explain_refusal(client, r, None).await?
        });
    }
    Ok(answers)
}

/// Finds out why a row could not be started (`armed_by: None`) or, for a
/// row this worker armed ahead (`armed_by: Some(worker)`), why it may not be
/// delivered now; and records a cancellation on a row nobody will run. Rare
/// (duplicates, cancelled slots), so one query per row is fine.
async fn explain_refusal(client: &Client, r: &StartRequest, armed_by: Option<&str>) -> anyhow::Result<Start> {
    let row = client
        .query_opt(
            "SELECT l.status, l.fire_id, l.attempts, l.worker_id,
                    j.id IS NULL OR j.deleted_at IS NOT NULL, coalesce(j.paused, false),
                    coalesce(j.version <> l.job_version, false)
             FROM scheduled_jobs l LEFT JOIN jobs j ON j.id = l.job_id
             WHERE l.job_id = $1 AND l.scheduled_at = $2",
            &[&r.job_id, &r.scheduled_at],
        )
        .await?;
    let Some(row) = row else { return Ok(Start::Duplicate) };
    let (status, fire_id, attempts, worker): (&str, Uuid, i32, Option<&str>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let still_ours = fire_id == r.fire_id
        && match armed_by {
            None => matches!(status, "pending" | "retrying"),
            Some(me) => status == "running" && attempts == r.attempt && worker == Some(me),
        };
    if !still_ours {
        return Ok(Start::Duplicate);
    }
    let reason = if row.get::<_, bool>(4) {
        "deleted"
    } else if row.get::<_, bool>(5) {
        "paused"
    } else if row.get::<_, bool>(6) {
        "superseded"
    } else {
        return Ok(Start::Duplicate);
    };
    client
        .execute(
            "UPDATE scheduled_jobs SET status = 'skipped', reason = $4, finished_at = now(),
                    history = history || jsonb_build_array(jsonb_build_object(
                        'event', 'skipped', 'at', cronshard_instant(now()), 'reason', $4::text))
             WHERE job_id = $1 AND scheduled_at = $2 AND fire_id = $3
               AND (($5::text IS NULL AND status IN ('pending', 'retrying'))
                    OR (status = 'running' AND attempts = $6 AND worker_id = $5))",
            &[&r.job_id, &r.scheduled_at, &r.fire_id, &reason, &armed_by, &r.attempt],
        )
        .await?;
    Ok(Start::Cancelled(reason))
}

/// At the due instant, for rows this worker armed ahead: is each still ours
/// (nobody took it over) and still wanted (the job is live, unpaused and at
/// the version that claimed the slot)? A read, not a write: the row already
/// says `running` for this worker and attempt, so the burst at the due
/// instant costs index lookups, not row versions. A delete or pause that
/// committed before this read cancels the slot; one after it is ordered
/// after the fire, just as with a start at the due instant.
pub async fn verify_batch(pool: &Pool, worker_id: &str, requests: Vec<StartRequest>) -> anyhow::Result<Vec<Start>> {
    let client = pool.get().await?;
    let stmt = client
        .prepare_cached(
            "SELECT b.i FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[], $4::int[])
                             WITH ORDINALITY AS b(job_id, scheduled_at, fire_id, attempt, i)
             JOIN scheduled_jobs l ON l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at
             WHERE l.fire_id = b.fire_id AND l.attempts = b.attempt AND l.worker_id = $5
               -- Not an index condition on purpose: the slot's own key is
               -- the way in, never a scan of every running row.
               AND (l.status = 'running') IS TRUE
               AND (l.trigger = 'manual' OR EXISTS (
                    SELECT 1 FROM jobs j WHERE j.id = l.job_id AND j.version = l.job_version
                      AND j.deleted_at IS NULL AND NOT j.paused))",
        )
        .await?;
    let column = |f: fn(&StartRequest) -> Uuid| -> Vec<Uuid> { requests.iter().map(f).collect() };
    let ours: HashSet<i64> = client
        .query(
            &stmt,
            &[
                &column(|r| r.job_id),
                &requests.iter().map(|r| r.scheduled_at).collect::<Vec<_>>(),
                &column(|r| r.fire_id),
                &requests.iter().map(|r| r.attempt).collect::<Vec<_>>(),
                &worker_id,
            ],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut answers = Vec::with_capacity(requests.len());
    for (i, r) in requests.iter().enumerate() {
        answers.push(if ours.contains(&(i as i64 + 1)) {
            Start::Go
        } else {
            explain_refusal(&client, r, Some(worker_id)).await?
        });
    }
    Ok(answers)
}

/// One attempt's outcome.
#[derive(Debug, Clone)]
pub struct FinishRequest {
    pub job_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub fire_id: Uuid,
    pub attempt: i32,
    pub status: &'static str,
    pub http_status: Option<i32>,
    pub sqs_message_id: Option<String>,
    pub excerpt: Option<String>,
    pub error: Option<String>,
    pub redelivered: bool,
}

/// Records outcomes, each only on a row its attempt is still running, and
/// appends the attempt to the row's history (who ran it, when, what came of
/// it) in the same write. Answers whether each outcome was recorded.
impl FinishRequest {
    /// The outcome of `attempt` of `m`, with nothing but a status yet.
    pub fn new(
        m: &common::message::FireMessage,
        attempt: u32,
        redelivered: bool,
        status: &'static str,
        excerpt: String,
    ) -> Self {
        FinishRequest {
            job_id: m.job_id,
            scheduled_at: m.scheduled_at,
            fire_id: m.fire_id,
            attempt: attempt as i32,
            status,
            http_status: None,
            sqs_message_id: None,
            excerpt: (!excerpt.is_empty()).then_some(excerpt),
            error: None,
            redelivered,
        }
    }
}

pub async fn finish_batch(pool: &Pool, requests: Vec<FinishRequest>) -> anyhow::Result<Vec<bool>> {
    let client = pool.get().await?;
    let stmt = client
        .prepare_cached(
            "UPDATE scheduled_jobs l SET status = b.status, finished_at = now(), http_status = b.http_status,
                    sqs_message_id = coalesce(b.sqs_message_id, l.sqs_message_id),
                    response_excerpt = b.excerpt, error = b.error,
                    history = l.history || jsonb_build_array(jsonb_build_object(
                        'event', 'attempt', 'attempt', b.attempt, 'worker_id', l.worker_id,
                        'started_at', cronshard_instant(l.started_at), 'finished_at', cronshard_instant(now()),
                        'outcome', b.status, 'http_status', b.http_status, 'sqs_message_id', b.sqs_message_id,
                        'error', b.error, 'redelivered', b.redelivered))
             FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[], $4::int[], $5::text[], $6::int[],
                         $7::text[], $8::text[], $9::text[], $10::bool[])
                  AS b(job_id, scheduled_at, fire_id, attempt, status, http_status, sqs_message_id, excerpt,
                       error, redelivered)
             WHERE l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at AND l.fire_id = b.fire_id
               AND l.attempts = b.attempt AND l.status = 'running'
             RETURNING l.job_id, l.scheduled_at, l.attempts",
        )
        .await?;
    let sorted: Vec<&FinishRequest> = common::db::lock_order(requests.iter().map(|r| (r.job_id, r.scheduled_at)))
        .into_iter()
        .map(|i| &requests[i])
        .collect();
    let col =
        |f: fn(&FinishRequest) -> Option<String>| -> Vec<Option<String>> { sorted.iter().map(|r| f(r)).collect() };
    let (job_ids, times, fire_ids, attempts, statuses, http_statuses, sqs_ids, excerpts, errors, redelivered) = (
        sorted.iter().map(|r| r.job_id).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.scheduled_at).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.fire_id).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.status).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.http_status).collect::<Vec<_>>(),
        col(|r| r.sqs_message_id.clone()),
        col(|r| r.excerpt.clone()),
        col(|r| r.error.clone()),
        sorted.iter().map(|r| r.redelivered).collect::<Vec<_>>(),
    );
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 10] =
        [&job_ids, &times, &fire_ids, &attempts, &statuses, &http_statuses, &sqs_ids, &excerpts, &errors, &redelivered];
    let recorded: HashSet<(Uuid, DateTime<Utc>, i32)> = common::db::retry_deadlock(|| client.query(&stmt, &params))
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect();
    Ok(requests.iter().map(|r| recorded.contains(&(r.job_id, r.scheduled_at, r.attempt))).collect())
}

pub fn lateness_seconds(started: DateTime<Utc>, scheduled_at: DateTime<Utc>) -> f64 {
    (started - scheduled_at).num_milliseconds() as f64 / 1000.0
}
