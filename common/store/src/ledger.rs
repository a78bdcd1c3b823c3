//! The ledger: one row per slot of a job (`scheduled_jobs`, partitioned by
//! day), whatever became of it. This module is the only code that reads or
//! writes the table: every transition of a row is one named function here,
//! and the states and triggers are spelled in SQL only through [`Status`] and
//! [`Trigger`] or the predicates below.
//!
//! A row's life, and the function that moves it:
//!
//! | transition | from → to | function |
//! |---|---|---|
//! | claim a due slot (scheduler) | none, or `skipped` by a change → `pending` | [`claim::claim`] |
//! | record a slot decided without firing | none → `skipped`/`missed` | [`claim::record_decided`] |
//! | stamp a confirmed publish | `pending` (unstamped) → `pending` (stamped) | [`stamp_published`] (after `broker::outbox` published) |
//! | lease what was never confirmed, to publish again | `pending` (unstamped; `fired_at` renewed) | [`sweep::lease_unconfirmed`] |
//! | recover a row whose worker died | `running` → `pending` | [`sweep::recover_running`] |
//! | move on a stranded row | `pending`/`retrying` (nobody moving it) | [`sweep::move_on_stranded`] |
//! | find cancelled slots nobody re-took | `skipped` | [`sweep::unretaken`], [`sweep::decided_for_version`] |
//! | start an attempt (worker) | `pending`/`retrying` → `running` | [`delivery::start_batch`] |
//! | verify an armed row at its due instant | `running` (armed) → stays, or `skipped` | [`delivery::verify_batch`] |
//! | record an attempt's outcome | `running` → `succeeded`/`failed`/`retrying` | [`delivery::finish_batch`] |
//! | give back an attempt not delivered | `running` → `pending` | [`delivery::release`], [`delivery::release_orphans`] |
//! | note that a held slot waits for its destination | `running` (stays) | [`delivery::note_waiting_batch`] |
//! | hand a slot back to wait for its destination | `running` → `retrying` (attempt not counted) | [`delivery::wait_for_destination_batch`] |
//! | send a waiting slot back again, its circuit still open | `retrying` (stays; next return moved) | [`delivery::wait_again_batch`] |
//! | park a slot that waited past its horizon | `running` → `failed` (not attempted) | [`delivery::give_up_waiting_batch`] |
//! | cancel what a change took away (API) | `pending`/`retrying` → `skipped` | [`changes::cancel_claimed`] |
//! | record a paused period's slots | none → `skipped` (`paused`) | [`changes::record_paused_slots`] |
//! | fire once now, outside the schedule | none → `pending` (`manual`) | [`changes::insert_manual`] |
//! | replay | `failed` or unheld → `pending` (`replay`) | [`changes::replay`] |
//!
//! Reads (executions, explain, the scheduler's view of what a job has
//! fired) are in [`read`]; aggregates for an operator's console (failures
//! by error, outcomes per job, lateness) in [`stats`]; the day partitions in
//! [`partitions`].

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use domain::job::JobSpec;
use domain::message::{FireMessage, RowToPublish};
use domain::slot::{Status, Trigger};

/// How often a worker refreshes its row in `worker_heartbeats`.
pub const WORKER_HEARTBEAT_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// Three heartbeats: a worker not seen for this long is presumed gone.
macro_rules! worker_gone_after {
    () => {
        "interval '15 seconds'"
    };
}
/// SQL interval literal: how long after its last heartbeat a worker is
/// presumed gone.
const WORKER_GONE_AFTER_SQL: &str = worker_gone_after!();
/// The same, for the worker's own reckoning (a test keeps the two equal).
pub const WORKER_GONE_AFTER: std::time::Duration = std::time::Duration::from_secs(15);

/// SQL predicate (on a heartbeat row aliased `w`): the connection the
/// worker heartbeats on is still open. A killed worker's socket is closed by
/// its kernel and Postgres ends the session at once; a worker that is only
/// cut off keeps its session until Postgres notices, and is then judged by
/// its heartbeat's age like one that predates the column (NULL).
macro_rules! worker_session_open {
    () => {
        "(w.session_pid IS NULL OR EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.session_pid))"
    };
}
const WORKER_SESSION_OPEN: &str = worker_session_open!();

/// SQL predicate (on a ledger row aliased `l`): its worker has not been
/// seen for three heartbeats, or its heartbeat session has ended (the
/// process died), so whatever it held `running` is lost.
const WORKER_PRESUMED_GONE: &str = concat!(
    "NOT EXISTS (SELECT 1 FROM worker_heartbeats w
    WHERE w.worker_id = l.worker_id AND w.seen_at > now() - ",
    worker_gone_after!(),
    " AND ",
    worker_session_open!(),
    ")"
);

/// SQL predicate: version `$version` of job `$id` is the one in force at
/// `$at` (the newest whose `valid_from` is at or before it, `job_changes`),
/// that version is live (not paused), and the job is not deleted: what a
/// slot is checked against when it is claimed. A node that has not heard of
/// a change made before the slot cannot claim it with a stale definition; a
/// version never claims a slot due before it was made (that slot belongs to
/// the version then in force, or to a paused period); and a change made
/// after the slot does not stop the version in force at it from claiming
/// (or re-taking) it. The conditions past each key are wrapped in `IS
/// TRUE` so that the primary key is the only index the planner can use:
/// from thin statistics (a new database, a table that grew since it was
/// analyzed) it chose the partial index of live jobs, a scan of every live
/// job per slot.
macro_rules! claimable_by {
    ($id:literal, $version:literal, $at:literal) => {
        concat!(
            "(EXISTS (SELECT 1 FROM jobs j WHERE j.id = ",
            $id,
            " AND (j.deleted_at IS NULL) IS TRUE)
              AND (SELECT (c.version = ",
            $version,
            " AND c.state = 'live') IS TRUE FROM job_changes c WHERE c.job_id = ",
            $id,
            " AND (c.valid_from <= ",
            $at,
            ") IS TRUE ORDER BY c.version DESC LIMIT 1))"
        )
    };
}

/// The triggers of rows made on request rather than by the schedule (a
/// manual fire, a backfill's run), as an SQL list: the one home for which
/// rows a change of the job leaves alone (only a delete stops them), that
/// do not count towards `max_runs`, and that the schedulers' catch-up does
/// not read as their own slots. Exported for `ledger_counts_as_run`.
#[doc(hidden)]
#[macro_export]
macro_rules! ledger_on_request {
    () => {
        "('manual', 'backfill')"
    };
}

/// SQL predicate on a ledger row `l`: its slot is still wanted, so a worker
/// may deliver it. A change to a job applies to the slots due at or after
/// the instant it was made (`job_changes.valid_from`), so a scheduled slot
/// is wanted while the version in force at its due instant is the one that
/// claimed it and was live (not paused). Deleting a job stops everything it
/// has not delivered yet, retries and manual fires included. A manual fire,
/// a backfill's run or an operator's replay is not the schedule's: only the delete
/// stops it. The conditions past each key are wrapped in `IS TRUE` for the
/// reason given at `claimable_by`.
macro_rules! slot_wanted {
    () => {
        concat!(
            "(((l.trigger IN ",
            crate::ledger_on_request!(),
            " OR l.reason = 'replay')
               AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = l.job_id AND (j.deleted_at IS NULL) IS TRUE))
              OR ",
            claimable_by!("l.job_id", "l.job_version", "l.scheduled_at"),
            ")"
        )
    };
}

/// SQL expression on a ledger row `l`: why its slot is no longer wanted
/// (`deleted`, `paused` or `superseded`), NULL while it is. The one place
/// that names the reason a worker records when it cancels a slot.
const UNWANTED_REASON: &str = concat!(
    "(SELECT CASE
        WHEN j.id IS NULL OR j.deleted_at IS NOT NULL THEN 'deleted'
        WHEN l.trigger IN ",
    crate::ledger_on_request!(),
    " OR l.reason = 'replay' THEN NULL
        WHEN c.state = 'live' AND c.version = l.job_version THEN NULL
        WHEN c.state = 'paused' THEN 'paused'
        WHEN c.state = 'deleted' THEN 'deleted'
        ELSE 'superseded' END
    FROM (SELECT 1) AS one
    LEFT JOIN jobs j ON j.id = l.job_id
    LEFT JOIN LATERAL (SELECT c.version, c.state FROM job_changes c
                       WHERE c.job_id = l.job_id AND c.valid_from <= l.scheduled_at
                       ORDER BY c.version DESC LIMIT 1) c ON true)"
);

/// SQL predicate on a ledger row `l`: skipped because a change made before
/// its due instant took it from the version that had claimed it (the API
/// cancels such pending rows at once, a worker an armed one at the due
/// instant), so the version in force at `$version` may claim the slot
/// again. The claim itself only ever takes a slot due at or after its
/// version came into force, which keeps a slot of a paused period paused.
macro_rules! retakeable_by {
    ($version:literal) => {
        concat!("(l.status = 'skipped' AND l.reason IN ('superseded', 'paused') AND l.job_version < ", $version, ")")
    };
}

/// SQL predicate on a ledger row `l`: not final, and claimed under an older
/// version than `$version`: whoever claims the slot for `$version` waits
/// for it to be delivered or cancelled, then re-takes it if it was cancelled.
macro_rules! held_by_older_version {
    ($version:literal) => {
        concat!("(l.status IN ('pending', 'running', 'retrying') AND l.job_version < ", $version, ")")
    };
}

/// The ledger rows that count towards a job's `max_runs` (SQL predicate,
/// columns prefixed with `$alias`, e.g. `"l."` or `""`): fired slots of its
/// schedule, not manual triggers, skips or misses — but for the slots the
/// overlap policy skipped at delivery: the scheduler fired those (it cannot
/// know ahead what a worker will find), so they count, the same for the
/// node that fired them and for one that reloads the job. Exported only for
/// [`ledger_runs_used_by_jobs_row`](crate::ledger_runs_used_by_jobs_row).
#[doc(hidden)]
#[macro_export]
macro_rules! ledger_counts_as_run {
    ($alias:literal) => {
        concat!(
            $alias,
            "trigger NOT IN ",
            $crate::ledger_on_request!(),
            " AND (",
            $alias,
            "status NOT IN ('skipped', 'missed') OR ",
            $alias,
            "reason IN ('overlap', 'replaced'))"
        )
    };
}
macro_rules! counts_as_run {
    () => {
        $crate::ledger_counts_as_run!("")
    };
}

pub mod changes;
pub mod claim;
pub mod delivery;
pub mod partitions;
pub mod read;
pub use read::{Execution, ExecutionWithHistory};
pub mod stats;
pub mod sweep;

/// Stamps `published_at` on the rows of confirmed messages, in one
/// statement. A row re-claimed under another fire id since is left alone,
/// and so is one a worker has already started: only `pending` rows are the
/// outbox sweep's, and skipping the others saves a row version per slot
/// whenever the worker is first (a pre-armed message often is).
pub async fn stamp_published(
    client: &impl deadpool_postgres::GenericClient,
    messages: &[&FireMessage],
) -> Result<u64, tokio_postgres::Error> {
    let order = crate::db::lock_order(messages.iter().map(|m| (m.job_id, m.scheduled_at)));
    let job_ids: Vec<Uuid> = order.iter().map(|&i| messages[i].job_id).collect();
    let times: Vec<DateTime<Utc>> = order.iter().map(|&i| messages[i].scheduled_at).collect();
    let fire_ids: Vec<Uuid> = order.iter().map(|&i| messages[i].fire_id).collect();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&job_ids, &times, &fire_ids];
    // Prepared once per connection: parsing and planning it on each call
    // cost more than running it.
    let statement = client
        .prepare_cached(
            "UPDATE scheduled_jobs s SET published_at = now()
             FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[]) AS p(job_id, scheduled_at, fire_id)
             WHERE s.job_id = p.job_id AND s.scheduled_at = p.scheduled_at
               -- Not an index condition (the unpublished index would
               -- mean a scan of every unpublished row): the key leads.
               AND (s.fire_id = p.fire_id AND s.published_at IS NULL AND s.status = 'pending') IS TRUE",
        )
        .await?;
    crate::db::retry_deadlock(|| client.execute(&statement, &params)).await
}

/// What a row read with the publish columns (`job_id, scheduled_at,
/// fire_id, execution_id, trigger, attempts`, and where a replay may have
/// set them `retry_from, retry_policy`) says of the slot to publish.
fn row_to_publish(row: &tokio_postgres::Row) -> RowToPublish {
    RowToPublish {
        job_id: row.get("job_id"),
        // Read beside the job's spec by every statement that publishes.
        namespace: row.try_get("namespace").unwrap_or_default(),
        scheduled_at: row.get("scheduled_at"),
        fire_id: row.get("fire_id"),
        execution_id: row.get("execution_id"),
        trigger: row.get::<_, Trigger>("trigger"),
        attempts: row.get::<_, i32>("attempts").max(0) as u32,
        retry_from: row.try_get::<_, i32>("retry_from").map_or(0, |n| n.max(0) as u32),
        // Rows read without the column are never replayed ones (claims, decisions).
        retry_policy: row
            .try_get::<_, Option<Value>>("retry_policy")
            .ok()
            .flatten()
            .and_then(|p| serde_json::from_value(p).ok()),
    }
}

/// The messages of rows that also carry their job's `spec` column, due at
/// `due_at(row)`, each with the attempt its row expects next
/// ([`FireMessage::next_for_row`]). A row whose spec does not parse is left
/// out (only the API writes specs, after validating them).
fn messages_for_rows(
    rows: &[tokio_postgres::Row],
    due_at: impl Fn(&tokio_postgres::Row) -> DateTime<Utc>,
) -> Vec<(FireMessage, u32)> {
    rows.iter()
        .filter_map(|row| {
            let spec = serde_json::from_value::<JobSpec>(row.get("spec")).ok()?;
            Some(FireMessage::next_for_row(row_to_publish(row), spec, due_at(row)))
        })
        .collect()
}

/// One entry of a ledger row's `history` (migrations/V3): `{"event", "at",
/// ...fields}`, the instant formatted as in the delivery headers. Appended
/// with `history = history || $n` in the UPDATE that records the event.
fn history_entry(event: &str, at: DateTime<Utc>, fields: Value) -> Value {
    let mut entry = json!({ "event": event, "at": domain::execution::format_instant(at) });
    if let (Some(entry), Value::Object(fields)) = (entry.as_object_mut(), fields) {
        entry.extend(fields);
    }
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sql_and_the_duration_of_presumed_gone_agree() {
        assert_eq!(WORKER_GONE_AFTER_SQL, format!("interval '{} seconds'", WORKER_GONE_AFTER.as_secs()));
    }
}
