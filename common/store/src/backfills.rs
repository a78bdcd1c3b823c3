//! The `backfills` table (migration V24): its only home. A backfill is made
//! by the API, advanced by whichever scheduler takes it next (a row lock
//! with SKIP LOCKED: one node at a time), and cancelled by the API. The
//! ledger's side of a step (the rows it starts) is
//! `ledger::changes::start_backfilled`, run in the same transaction as the
//! step's advance.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use tokio_postgres::Row;
use uuid::Uuid;

use domain::backfill::{Mode, State};
use domain::job::Overlap;

/// A backfill as stored.
#[derive(Debug, Clone)]
pub struct Backfill {
    pub id: Uuid,
    pub job_id: Uuid,
    pub namespace: String,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub mode: Mode,
    pub newest_first: bool,
    pub rate_per_second: f64,
    pub max_concurrency: u32,
    /// The overlap policy its executions follow (`None`: the job's).
    pub overlap: Option<Overlap>,
    /// The plan, in the order it runs.
    pub slots: Vec<DateTime<Utc>>,
    /// How many of `slots` were handled (started or passed over).
    pub next_index: usize,
    /// Handled slots the mode did not run (not missing, not failed, in flight).
    pub passed_over: usize,
    pub state: State,
    pub next_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub finished_at: Option<DateTime<Utc>>,
}

const COLUMNS: &str = "id, job_id, namespace, from_at, to_at, mode, newest_first, rate_per_second, max_concurrency, \
     overlap, slots, next_index, passed_over, state, next_at, created_at, created_by, finished_at";

fn overlap_of(text: Option<&str>) -> Option<Overlap> {
    match text? {
        "allow" => Some(Overlap::Allow),
        "forbid" => Some(Overlap::Forbid),
        "replace" => Some(Overlap::Replace),
        _ => None,
    }
}

/// How an overlap policy is spelled in the table.
pub fn overlap_text(overlap: Overlap) -> &'static str {
    match overlap {
        Overlap::Allow => "allow",
        Overlap::Forbid => "forbid",
        Overlap::Replace => "replace",
    }
}

impl Backfill {
    fn from_row(r: &Row) -> Backfill {
        Backfill {
            id: r.get("id"),
            job_id: r.get("job_id"),
            namespace: r.get("namespace"),
            from: r.get("from_at"),
            to: r.get("to_at"),
            mode: Mode::parse(r.get("mode")).unwrap_or(Mode::Missing),
            newest_first: r.get("newest_first"),
            rate_per_second: r.get("rate_per_second"),
            max_concurrency: r.get::<_, i32>("max_concurrency").max(1) as u32,
            overlap: overlap_of(r.get("overlap")),
            slots: r.get("slots"),
            next_index: r.get::<_, i32>("next_index").max(0) as usize,
            passed_over: r.get::<_, i32>("passed_over").max(0) as usize,
            state: State::parse(r.get("state")).unwrap_or(State::Done),
            next_at: r.get("next_at"),
            created_at: r.get("created_at"),
            created_by: r.get("created_by"),
            finished_at: r.get("finished_at"),
        }
    }

    /// The slots not handled yet, in the order they run.
    pub fn remaining(&self) -> &[DateTime<Utc>] {
        &self.slots[self.next_index.min(self.slots.len())..]
    }
}

/// Stores a new running backfill; `None` when the job has one running
/// already (one at a time per job: two would race for the same slots).
pub async fn create(client: &impl GenericClient, b: &Backfill) -> Result<Option<Backfill>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "INSERT INTO backfills (id, job_id, namespace, from_at, to_at, mode, newest_first, rate_per_second,
                                        max_concurrency, overlap, slots, state, created_by)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 'running', $12)
                 ON CONFLICT (job_id) WHERE state = 'running' DO NOTHING
                 RETURNING {COLUMNS}"
            ),
            &[
                &b.id,
                &b.job_id,
                &b.namespace,
                &b.from,
                &b.to,
                &b.mode.as_str(),
                &b.newest_first,
                &b.rate_per_second,
                &(b.max_concurrency as i32),
                &b.overlap.map(overlap_text),
                &b.slots,
                &b.created_by,
            ],
        )
        .await?;
    Ok(row.as_ref().map(Backfill::from_row))
}

/// A backfill of the given namespaces (`None`: every one).
pub async fn get(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<Backfill>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM backfills WHERE id = $1 AND ($2::text[] IS NULL OR namespace = ANY($2))"),
            &[&id, &scope],
        )
        .await?;
    Ok(row.as_ref().map(Backfill::from_row))
}

/// The backfills of the given namespaces (and of job `job_id`, if given),
/// newest first, at most `limit`.
pub async fn list(
    client: &impl GenericClient,
    job_id: Option<Uuid>,
    scope: Option<&[String]>,
    limit: i64,
) -> Result<Vec<Backfill>, tokio_postgres::Error> {
    let rows = client
        .query(
            &format!(
                "SELECT {COLUMNS} FROM backfills
                 WHERE ($1::uuid IS NULL OR job_id = $1) AND ($2::text[] IS NULL OR namespace = ANY($2))
                 ORDER BY created_at DESC, id LIMIT $3"
            ),
            &[&job_id, &scope, &limit],
        )
        .await?;
    Ok(rows.iter().map(Backfill::from_row).collect())
}

/// Stops a running backfill of the given namespaces: no further slot
/// starts. `None` when there is no such backfill; a finished one is
/// returned as it is.
pub async fn cancel(
    client: &impl GenericClient,
    id: Uuid,
    scope: Option<&[String]>,
) -> Result<Option<Backfill>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "WITH cancelled AS (
                     UPDATE backfills SET state = 'cancelled', finished_at = now()
                     WHERE id = $1 AND state = 'running' AND ($2::text[] IS NULL OR namespace = ANY($2))
                     RETURNING {COLUMNS})
                 SELECT * FROM cancelled
                 UNION ALL
                 SELECT {COLUMNS} FROM backfills
                 WHERE id = $1 AND ($2::text[] IS NULL OR namespace = ANY($2)) AND NOT EXISTS (SELECT 1 FROM cancelled)"
            ),
            &[&id, &scope],
        )
        .await?;
    Ok(row.as_ref().map(Backfill::from_row))
}

/// Locks a running backfill due for its next step, if one is free (another
/// node's step holds its row until that step commits).
pub async fn take_due(client: &impl GenericClient) -> Result<Option<Backfill>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            &format!(
                "SELECT {COLUMNS} FROM backfills WHERE state = 'running' AND next_at <= now()
                 ORDER BY next_at LIMIT 1 FOR UPDATE SKIP LOCKED"
            ),
            &[],
        )
        .await?;
    Ok(row.as_ref().map(Backfill::from_row))
}

/// Records a step of a locked backfill: `handled` more slots, of which
/// `passed_over` were not run, and when it may step again.
pub async fn advance(
    client: &impl GenericClient,
    id: Uuid,
    handled: usize,
    passed_over: usize,
    next_at: DateTime<Utc>,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "UPDATE backfills SET next_index = next_index + $2, passed_over = passed_over + $3, next_at = $4 WHERE id = $1",
            &[&id, &(handled as i32), &(passed_over as i32), &next_at],
        )
        .await?;
    Ok(())
}

/// Ends a locked backfill: `Done` (all handled, all finished) or
/// `Cancelled` (its job is gone).
pub async fn finish(client: &impl GenericClient, id: Uuid, state: State) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "UPDATE backfills SET state = $2, finished_at = now() WHERE id = $1 AND state = 'running'",
            &[&id, &state.as_str()],
        )
        .await?;
    Ok(())
}
