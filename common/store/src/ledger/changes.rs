//! The API's writes: what a change to a job does to its rows, a manual
//! fire, and a replay. Each runs inside the caller's transaction, so the
//! change and its effect on the ledger commit together.

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::json;
use uuid::Uuid;

use super::read::Execution;
use super::{Status, WORKER_PRESUMED_GONE, history_entry};
use domain::execution::{execution_id, manual_execution_id, truncate_ms};
use domain::job::JobSpec;
use domain::message::{FireMessage, RowToPublish};

/// Why a change cancels a job's claimed rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancel {
    /// A replace: the new version takes the slots from its instant on.
    Superseded,
    Paused,
    /// Stops everything not yet delivered, retries and manual fires included.
    Deleted,
}

impl Cancel {
    pub const fn reason(self) -> &'static str {
        match self {
            Cancel::Superseded => "superseded",
            Cancel::Paused => "paused",
            Cancel::Deleted => "deleted",
        }
    }
}

/// Cancels the job's claimed rows that a change takes away; call inside the
/// change's transaction, after the `UPDATE` of `jobs`. A change applies to
/// the slots due at or after the instant its version came into force, so a
/// replace or a pause cancels the `pending` rows of those slots (the
/// version in force at the slot may claim it again) and leaves earlier
/// slots to the version they were claimed under. Rows a worker already
/// holds (armed ahead, `running`) are its to decide at the due instant: it
/// reads the same rule. Returns the rows cancelled.
pub async fn cancel_claimed(
    tx: &impl deadpool_postgres::GenericClient,
    job_id: Uuid,
    why: Cancel,
) -> Result<u64, tokio_postgres::Error> {
    let reason = why.reason();
    let entry = json!([history_entry("skipped", Utc::now(), json!({ "reason": reason }))]);
    tx.execute(
        concat!(
            "UPDATE scheduled_jobs l SET status = 'skipped', reason = $2, finished_at = now(),
                history = l.history || $3::jsonb
         WHERE l.job_id = $1
           AND CASE WHEN $2 = 'deleted' THEN l.status IN ('pending', 'retrying')
                    ELSE l.status = 'pending' AND l.trigger NOT IN ",
            crate::ledger_on_request!(),
            " AND l.reason IS DISTINCT FROM 'replay'
                         AND l.scheduled_at >= (SELECT updated_at FROM jobs WHERE id = $1) END"
        ),
        &[&job_id, &reason, &entry],
    )
    .await
}

/// Records the slots of a paused period as `skipped` (`paused`) under the
/// paused `version`, so the ledger and explain still say what became of
/// them; a slot that has a row keeps it. Returns the rows written.
pub async fn record_paused_slots(
    tx: &impl deadpool_postgres::GenericClient,
    job_id: Uuid,
    version: i64,
    slots: &[DateTime<Utc>],
) -> Result<u64, tokio_postgres::Error> {
    if slots.is_empty() {
        return Ok(0);
    }
    let fire_ids: Vec<Uuid> = slots.iter().map(|_| Uuid::now_v7()).collect();
    let exec_ids: Vec<String> = slots.iter().map(|t| execution_id(job_id, *t)).collect();
    let entry = json!([history_entry("skipped", Utc::now(), json!({ "reason": "paused" }))]);
    tx.execute(
        "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, reason, scheduler_node,
                                     finished_at, job_version, history)
         SELECT $1, t.at, t.fire_id, t.execution_id, 'skipped', 'paused', 'api', now(), $5, $6::jsonb
         FROM unnest($2::timestamptz[], $3::uuid[], $4::text[]) AS t(at, fire_id, execution_id)
         ON CONFLICT (job_id, scheduled_at) DO NOTHING",
        &[&job_id, &slots, &fire_ids, &exec_ids, &version, &entry],
    )
    .await
}

/// A manual fire of `version` of the job, now: a `pending` row with trigger
/// `manual` under its own execution id (`{job_id}@{now}#manual`). The
/// ledger key is (job, instant): it steps a millisecond past a slot that
/// happens to sit at the same instant. Returns the row and its message,
/// for the caller to publish once committed.
pub async fn insert_manual(
    tx: &impl deadpool_postgres::GenericClient,
    job_id: Uuid,
    version: i64,
) -> Result<(Execution, Vec<(FireMessage, u32)>), tokio_postgres::Error> {
    let mut at = truncate_ms(Utc::now());
    loop {
        let row = tx
            .query_opt(
                "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, trigger, status, scheduler_node, fired_at, job_version)
                 VALUES ($1, $2, $3, $4, 'manual', 'pending', 'api', now(), $5)
                 ON CONFLICT (job_id, scheduled_at) DO NOTHING RETURNING *",
                &[&job_id, &at, &Uuid::now_v7(), &manual_execution_id(job_id, at), &version],
            )
            .await?;
        match row {
            Some(r) => return Ok((Execution::from_row(&r), due_now(tx, std::slice::from_ref(&r)).await?)),
            None => at += TimeDelta::milliseconds(1),
        }
    }
}

/// The rows a backfill starts for `slots` of job `job_id` (at `version`),
/// by `mode`, and their messages: a `pending` row with trigger `backfill`
/// under the slot's own execution id for each slot without a row (in mode
/// `missing`, not a slot a decided run covers: that one was decided), and
/// in modes `failed` and `all` the slots' finished rows (failed; or any
/// final status) moved back to `pending` as a replay moves them, now with
/// trigger `backfill`. A slot whose row is in flight is passed over.
pub async fn start_backfilled(
    tx: &impl deadpool_postgres::GenericClient,
    backfill_id: Uuid,
    job_id: Uuid,
    version: i64,
    node: &str,
    slots: &[DateTime<Utc>],
    mode: domain::backfill::Mode,
) -> Result<(Vec<Execution>, Vec<(FireMessage, u32)>), tokio_postgres::Error> {
    use domain::backfill::Mode;
    let mut rows = Vec::new();
    if mode != Mode::Failed {
        let ids: Vec<String> = slots.iter().map(|at| execution_id(job_id, *at)).collect();
        rows = tx
            .query(
                "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, trigger, status, scheduler_node,
                                             fired_at, job_version, backfill_id)
                 SELECT $1, s.at, gen_random_uuid(), s.eid, 'backfill', 'pending', $3, now(), $2, $7
                 FROM unnest($4::timestamptz[], $5::text[]) AS s(at, eid)
                 WHERE $6 OR NOT EXISTS (SELECT 1 FROM decided_ranges d
                                         WHERE d.job_id = $1 AND s.at BETWEEN d.first_at AND d.last_at)
                 ON CONFLICT (job_id, scheduled_at) DO NOTHING RETURNING *",
                &[&job_id, &version, &node, &slots, &ids, &(mode == Mode::All), &backfill_id],
            )
            .await?;
    }
    let mut executions: Vec<Execution> = rows.iter().map(Execution::from_row).collect();
    let mut messages = due_now(tx, &rows).await?;
    if mode != Mode::Missing {
        let statuses = match mode {
            Mode::Failed => vec![Status::Failed],
            _ => vec![Status::Succeeded, Status::Failed, Status::Skipped, Status::Missed],
        };
        let selection = ReplaySelection {
            statuses,
            filter: super::read::Filter { namespaces: None, job_id: Some(job_id), status: None, from: None, to: None },
            error_contains: None,
            triggers: None,
            retry: None,
            max: slots.len() as i64,
            slots: Some(slots.to_vec()),
            backfill: Some(backfill_id),
        };
        let (replayed, replayed_messages) = replay(tx, &selection).await?;
        executions.extend(replayed);
        messages.extend(replayed_messages);
    }
    Ok((executions, messages))
}

/// How a backfill's runs stand: the rows it last started (of job
/// `job_id`, in `[from, to]`), counted by status.
pub async fn backfilled_statuses(
    client: &impl deadpool_postgres::GenericClient,
    backfill_id: Uuid,
    job_id: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<HashMap<Status, i64>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT status, count(*) FROM scheduled_jobs
             WHERE job_id = $1 AND scheduled_at BETWEEN $2 AND $3 AND backfill_id = $4 GROUP BY status",
            &[&job_id, &from, &to, &backfill_id],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// Which of `slots` of job `job_id` have a row (any status) or lie in a
/// decided run: what a dry run of mode `missing` leaves out.
pub async fn slots_with_rows(
    client: &impl deadpool_postgres::GenericClient,
    job_id: Uuid,
    slots: &[DateTime<Utc>],
) -> Result<HashMap<DateTime<Utc>, Option<Status>>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT s.at, l.status FROM unnest($2::timestamptz[]) AS s(at)
             LEFT JOIN scheduled_jobs l ON l.job_id = $1 AND l.scheduled_at = s.at
             WHERE l.job_id IS NOT NULL OR EXISTS (SELECT 1 FROM decided_ranges d
                                                   WHERE d.job_id = $1 AND s.at BETWEEN d.first_at AND d.last_at)",
            &[&job_id, &slots],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// Which rows a replay takes: rows of existing jobs in one of `statuses`
/// (each of [`Status::REPLAYABLE`]) that no process holds, matching the
/// filter, oldest first, at most `max`.
#[derive(Debug, Clone)]
pub struct ReplaySelection {
    pub statuses: Vec<Status>,
    pub filter: super::read::Filter,
    /// Only rows whose last error contains this text (case-insensitive).
    pub error_contains: Option<String>,
    /// Only rows made by one of these triggers (`None`: any).
    pub triggers: Option<Vec<super::Trigger>>,
    /// The fields of the retry policy the replayed executions get, as given
    /// (validated as a `RetryPolicy`'s): each overrides the job's own policy
    /// field by field, the rest stay the job's (`None`: the job's policy).
    /// A partial override must never reset what it does not name.
    pub retry: Option<serde_json::Value>,
    pub max: i64,
    /// Only the rows of these slots (`None`: any).
    pub slots: Option<Vec<DateTime<Utc>>>,
    /// A backfill's run: the rows say trigger `backfill` and name it.
    pub backfill: Option<Uuid>,
}

/// Moves the selected rows back to `pending` under a fresh fire id, keeping
/// the execution id and the attempt count; the caller publishes each as its
/// next attempt once committed (the messages returned). A row is taken only when no process holds
/// it: a `pending` row of a due slot, a `retrying` row, a `running` row
/// whose worker is presumed gone, or one awaiting its receiver's report
/// (async completion: no process holds it; the attempt's report then
/// finds a newer attempt and changes nothing). The fresh fire id makes any copy still on
/// its way a duplicate that workers drop, so a replay never delivers twice.
///
/// The replayed execution gets a retry budget of its own (`retry_from` =
/// the attempts so far, with the selection's policy or the job's), and
/// the history keeps what the replay overwrote: the original claim's node
/// and fire instant, and the status, attempts and error it had.
pub async fn replay(
    tx: &impl deadpool_postgres::GenericClient,
    selection: &ReplaySelection,
) -> Result<(Vec<Execution>, Vec<(FireMessage, u32)>), tokio_postgres::Error> {
    let statuses: Vec<&str> = selection.statuses.iter().map(|s| s.as_str()).collect();
    let triggers: Option<Vec<&str>> = selection.triggers.as_ref().map(|t| t.iter().map(|t| t.as_str()).collect());
    let error_like = selection.error_contains.as_ref().map(|e| format!("%{}%", like_escape(e)));
    let policy = selection.retry.as_ref();
    let f = &selection.filter;
    let rows = tx
        .query(
            &format!("WITH picked AS (
                 SELECT l.job_id, l.scheduled_at,
                        CASE WHEN $9::jsonb IS NOT NULL THEN coalesce(j.spec->'retry', '{{}}'::jsonb) || $9::jsonb END AS policy
                 FROM scheduled_jobs l JOIN jobs j ON j.id = l.job_id AND j.deleted_at IS NULL
                 WHERE l.status = ANY($1)
                   AND (l.status <> 'pending' OR l.scheduled_at <= now()) AND (l.status <> 'running' OR l.awaiting_until IS NOT NULL OR {WORKER_PRESUMED_GONE})
                   AND ($2::uuid IS NULL OR l.job_id = $2)
                   AND ($6::text[] IS NULL OR j.namespace = ANY($6))
                   AND ($3::timestamptz IS NULL OR l.scheduled_at >= $3) AND ($4::timestamptz IS NULL OR l.scheduled_at < $4)
                   AND ($7::text[] IS NULL OR l.trigger = ANY($7))
                   AND ($8::text IS NULL OR l.error ILIKE $8)
                   AND ($10::timestamptz[] IS NULL OR l.scheduled_at = ANY($10))
                 ORDER BY l.scheduled_at LIMIT $5 FOR UPDATE OF l SKIP LOCKED)
             UPDATE scheduled_jobs l SET status = 'pending', fire_id = gen_random_uuid(), published_at = NULL,
                    finished_at = NULL, next_attempt_at = NULL, awaiting_until = NULL, reason = $11, fired_at = now(),
                    trigger = CASE WHEN $12::uuid IS NOT NULL THEN 'backfill' ELSE l.trigger END,
                    backfill_id = coalesce($12, l.backfill_id),
                    scheduler_node = 'api', job_version = (SELECT version FROM jobs WHERE id = l.job_id),
                    retry_from = l.attempts, retry_policy = picked.policy,
                    history = l.history || jsonb_build_array(jsonb_build_object(
                        'event', $11::text, 'at', cronshard_instant(now()),
                        'retry_from', l.attempts, 'retry', picked.policy,
                        'original', jsonb_strip_nulls(jsonb_build_object(
                            'scheduler_node', l.scheduler_node, 'fired_at', cronshard_instant(l.fired_at),
                            'status', l.status, 'attempts', l.attempts, 'error', l.error))))
             FROM picked WHERE l.job_id = picked.job_id AND l.scheduled_at = picked.scheduled_at
             RETURNING l.*"),
            &[
                &statuses,
                &f.job_id,
                &f.from,
                &f.to,
                &selection.max,
                &f.namespaces,
                &triggers,
                &error_like,
                &policy,
                &selection.slots,
                &if selection.backfill.is_some() { "backfill" } else { "replay" },
                &selection.backfill,
            ],
        )
        .await?;
    Ok((rows.iter().map(Execution::from_row).collect(), due_now(tx, &rows).await?))
}

/// `text` matched literally inside a `LIKE` pattern.
fn like_escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")
}

/// The messages of rows the API moved to `pending`, each as the attempt
/// its row expects, due now (a manual fire or a replay is not held back).
/// A row whose job's spec does not parse is left out (only the API writes
/// specs, after validating them).
async fn due_now(
    client: &impl deadpool_postgres::GenericClient,
    rows: &[tokio_postgres::Row],
) -> Result<Vec<(FireMessage, u32)>, tokio_postgres::Error> {
    let job_ids: Vec<Uuid> = rows.iter().map(|r| r.get("job_id")).collect();
    let jobs: HashMap<Uuid, (serde_json::Value, String)> = client
        .query("SELECT id, spec, namespace FROM jobs WHERE id = ANY($1)", &[&job_ids])
        .await?
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect();
    let now = Utc::now();
    Ok(rows
        .iter()
        .filter_map(|row| {
            let (spec, namespace) = jobs.get(&row.get("job_id"))?;
            let spec = serde_json::from_value::<JobSpec>(spec.clone()).ok()?;
            let row_to_publish = RowToPublish { namespace: namespace.clone(), ..super::row_to_publish(row) };
            Some(FireMessage::next_for_row(row_to_publish, spec, now))
        })
        .collect())
}

/// The status of one slot's row, if it has one.
pub async fn status_of(
    client: &impl deadpool_postgres::GenericClient,
    job_id: Uuid,
    at: DateTime<Utc>,
) -> Result<Option<Status>, tokio_postgres::Error> {
    Ok(client
        .query_opt("SELECT status FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2", &[&job_id, &at])
        .await?
        .map(|r| r.get(0)))
}
