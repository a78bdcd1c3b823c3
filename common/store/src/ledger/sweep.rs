//! The sweeps every scheduler runs: rows that no process is going to move
//! are found here and moved on (leased to publish again, recovered,
//! re-taken). Each commits its change and returns the messages of the rows
//! it moved; the broker's outbox (`broker::outbox`) publishes them after
//! the commit, and the caller counts and logs them.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::Pool;

use super::claim::{Slot, key_columns};
use super::{Status, WORKER_PRESUMED_GONE, messages_for_rows};
use domain::message::FireMessage;

/// Most rows one pass of a sweep moves; the next pass takes the rest.
const SWEEP_BATCH: i64 = 1_000;

/// Leases claimed rows whose publish was never confirmed (`pending`,
/// unstamped, claimed more than `grace` ago: the claimer crashed, or the
/// broker was down) to be published again, and returns their messages.
/// The lease is `fired_at`, renewed to now and committed before the
/// publish: no other sweep takes the rows for another `grace`, so two
/// schedulers sweeping at once do not both publish them, and no row lock
/// is held while the broker answers. A sweep that dies between the commit
/// and the publish leaves the rows unstamped: the next lease takes them
/// `grace` later. A row is stamped only after its publish was confirmed.
pub async fn lease_unconfirmed(pg: &Pool, grace: Duration) -> anyhow::Result<Vec<(FireMessage, u32)>> {
    let grace = TimeDelta::from_std(grace)?;
    let client = pg.get().await?;
    let rows = client
        .query(
            "WITH unconfirmed AS (
                 SELECT s.job_id, s.scheduled_at FROM scheduled_jobs s
                 WHERE s.status = 'pending' AND s.published_at IS NULL AND s.fired_at < $1
                 ORDER BY s.fired_at LIMIT $2 FOR UPDATE SKIP LOCKED)
             UPDATE scheduled_jobs s SET fired_at = now()
             FROM unconfirmed u WHERE s.job_id = u.job_id AND s.scheduled_at = u.scheduled_at
             RETURNING s.job_id, s.scheduled_at, s.fire_id, s.execution_id, s.trigger, s.attempts, s.retry_from, s.retry_policy,
                       (SELECT spec FROM jobs WHERE id = s.job_id) AS spec,
                       (SELECT namespace FROM jobs WHERE id = s.job_id) AS namespace",
            &[&(Utc::now() - grace), &SWEEP_BATCH],
        )
        .await?;
    Ok(messages_for_rows(&rows, |row| row.get("scheduled_at")))
}

/// Delivers again, under the same execution id, rows left `running` past
/// their attempt timeout plus `grace` by a worker that is no longer alive
/// (no recent heartbeat): the worker died and its message was lost with a
/// broker that kept nothing (a worker crash alone is handled sooner, by the
/// broker's redelivery). The lost attempt counts; the recovered delivery is
/// the next one. Returns the messages to publish: the rows are `pending`
/// and unstamped, so the outbox publishes and stamps them, or the lease of
/// [`lease_unconfirmed`] does if that publish fails.
pub async fn recover_running(pg: &Pool, grace: Duration) -> anyhow::Result<Vec<(FireMessage, u32)>> {
    let grace = grace.as_secs_f64();
    let client = pg.get().await?;
    // Back to `pending` and committed BEFORE publishing: a worker must never
    // see the message while the row still says `running` (it would drop it
    // as a duplicate). Unpublished, the row is the outbox sweep's to
    // republish if the publish below fails.
    let rows = client
        .query(
            &format!(
                "WITH stuck AS (
                     SELECT l.job_id, l.scheduled_at FROM scheduled_jobs l JOIN jobs j ON j.id = l.job_id
                     -- A row starts at or after its slot: the bound on
                     -- `scheduled_at` is an index range that skips the armed
                     -- rows (tens of thousands under load) before the join.
                     WHERE l.status = 'running' AND l.scheduled_at < now() - make_interval(secs => $1)
                       AND ((l.awaiting_until IS NULL
                             AND l.started_at < now() - make_interval(secs =>
                                   coalesce((j.spec->'target'->>'timeout_ms')::double precision / 1000, 30) + $1)
                             AND {WORKER_PRESUMED_GONE})
                         -- Awaiting a report past its deadline, and the
                         -- message that was to time it out never came (a
                         -- broker that lost it): timed out here instead.
                         OR l.awaiting_until < now() - make_interval(secs => $1 + 60))
                     ORDER BY l.started_at LIMIT 500 FOR UPDATE OF l SKIP LOCKED)
                 UPDATE scheduled_jobs l SET status = 'pending', published_at = NULL, fired_at = now(),
                        awaiting_until = NULL,
                        error = CASE WHEN l.awaiting_until IS NULL
                                THEN format('attempt %s never finished (its worker and message were lost); delivering again', l.attempts)
                                ELSE format('attempt %s was never reported complete and its deadline passed unnoticed; delivering again', l.attempts)
                                END,
                        history = l.history || jsonb_build_array(jsonb_build_object(
                            'event', 'recovered', 'at', cronshard_instant(now()), 'lost_attempt', l.attempts,
                            'worker_id', l.worker_id, 'started_at', cronshard_instant(l.started_at)))
                 FROM stuck WHERE l.job_id = stuck.job_id AND l.scheduled_at = stuck.scheduled_at
                 RETURNING l.job_id, l.scheduled_at, l.fire_id, l.execution_id, l.trigger, l.attempts, l.retry_from, l.retry_policy,
                           (SELECT spec FROM jobs WHERE id = l.job_id) AS spec,
                       (SELECT namespace FROM jobs WHERE id = l.job_id) AS namespace"
            ),
            &[&grace],
        )
        .await?;
    Ok(messages_for_rows(&rows, |_| Utc::now()))
}

/// Moves on ledger rows that no process is going to move: a `pending` row
/// whose message went out (`published_at`) and was due before `cutoff`, or
/// a `retrying` row whose next attempt was due before `cutoff`. Their
/// message is gone (a broker that lost it, a queue deleted) or was dropped
/// (a message that did not match its row: the bug class this sweep exists
/// for). The caller puts `cutoff` where a message that was in the queues
/// by then must have reached a worker (see `Dispatcher::sweep_stranded`).
/// Each is published again under its execution id and fire id as the
/// attempt its row expects, which a worker starts or, for a slot no longer
/// wanted, records as skipped; a copy that meets another is dropped by the
/// start rule. Returns each row's status and its message, to publish: the
/// rows are stamped (`published_at` renewed) by the same statement, so a
/// publish that fails leaves them to the next pass `cutoff` later.
pub async fn move_on_stranded(pg: &Pool, cutoff: DateTime<Utc>) -> anyhow::Result<Vec<(Status, (FireMessage, u32))>> {
    let client = pg.get().await?;
    let rows = client
        .query(
            "WITH stranded AS (
                 SELECT l.job_id, l.scheduled_at FROM scheduled_jobs l
                 WHERE l.status IN ('pending', 'retrying')
                   -- Implied by both branches below (a slot comes before its
                   -- publish and its attempts); as a range of the status
                   -- index it keeps the scan off the rows armed ahead and
                   -- any backlog younger than the cutoff, which a filter
                   -- alone visits on every pass of every node.
                   AND l.scheduled_at < $1
                   -- An unpublished `pending` row is the outbox sweep's.
                   AND ((l.status = 'pending' AND l.published_at IS NOT NULL
                         AND greatest(l.scheduled_at, l.published_at) < $1)
                     OR (l.status = 'retrying'
                         AND coalesce(l.next_attempt_at, l.finished_at + interval '1 hour') < $1))
                 ORDER BY l.scheduled_at LIMIT $2 FOR UPDATE OF l SKIP LOCKED)
             UPDATE scheduled_jobs l SET published_at = now(),
                    next_attempt_at = CASE WHEN l.status = 'retrying' THEN now() END,
                    history = l.history || jsonb_build_array(jsonb_build_object(
                        'event', 'stranded', 'at', cronshard_instant(now()), 'status', l.status,
                        'attempts', l.attempts))
             FROM stranded WHERE l.job_id = stranded.job_id AND l.scheduled_at = stranded.scheduled_at
             RETURNING l.job_id, l.scheduled_at, l.fire_id, l.execution_id, l.trigger, l.attempts, l.retry_from, l.retry_policy, l.status,
                       (SELECT spec FROM jobs WHERE id = l.job_id) AS spec,
                       (SELECT namespace FROM jobs WHERE id = l.job_id) AS namespace",
            &[&cutoff, &SWEEP_BATCH],
        )
        .await?;
    let statuses: std::collections::HashMap<(uuid::Uuid, DateTime<Utc>), Status> =
        rows.iter().map(|row| ((row.get("job_id"), row.get("scheduled_at")), row.get("status"))).collect();
    Ok(messages_for_rows(&rows, |_| Utc::now())
        .into_iter()
        .filter_map(|(m, attempt)| Some((*statuses.get(&(m.job_id, m.scheduled_at))?, (m, attempt))))
        .collect())
}

/// A slot a change cancelled that nobody re-took, with what the version
/// in force at it needs to decide whether it fires there.
#[derive(Debug, Clone)]
pub struct Unretaken {
    /// The slot, under the version in force at it.
    pub slot: Slot,
    /// That version's definition (`jobs.spec` form).
    pub spec: serde_json::Value,
    pub job_created_at: DateTime<Utc>,
    /// False when the job's `max_runs` is used up by the runs before the slot.
    pub runs_left: bool,
}

/// Rows `skipped` (`superseded`, `paused`) more than `grace` ago under an
/// older version than the one in force at their slot (within `lookback`),
/// when that version is live: normally the owners' claims re-take such a
/// row within a second; these are what they did not re-take (they died or
/// restarted meanwhile, or the version in force is no longer the job's
/// current one).
pub async fn unretaken(
    client: &impl deadpool_postgres::GenericClient,
    grace: Duration,
    lookback: Duration,
) -> Result<Vec<Unretaken>, tokio_postgres::Error> {
    // A version with `max_runs` re-takes a slot only while the job's runs
    // before it leave room (the ledger counts runs across versions).
    let rows = client
        .query(
            concat!(
                "SELECT l.job_id, l.scheduled_at, l.trigger, c.version, c.spec, j.created_at,
                        (c.spec #>> '{schedule,max_runs}')::bigint AS max_runs,
                        c.spec #>> '{schedule,max_runs}' IS NULL
                        OR (SELECT count(*) FROM scheduled_jobs r
                            WHERE r.job_id = l.job_id AND r.scheduled_at < l.scheduled_at AND ",
                counts_as_run!(),
                ") < (c.spec #>> '{schedule,max_runs}')::bigint AS runs_left
                 FROM scheduled_jobs l
                 JOIN jobs j ON j.id = l.job_id AND j.deleted_at IS NULL
                 CROSS JOIN LATERAL (SELECT c.version, c.state, c.spec FROM job_changes c
                                     WHERE c.job_id = l.job_id AND c.valid_from <= l.scheduled_at
                                     ORDER BY c.version DESC LIMIT 1) c
                 WHERE l.status = 'skipped' AND l.reason IN ('superseded', 'paused')
                   AND l.scheduled_at > now() - make_interval(secs => $2)
                   AND l.finished_at < now() - make_interval(secs => $1)
                   AND c.state = 'live' AND c.version > l.job_version
                 ORDER BY l.scheduled_at LIMIT $3"
            ),
            &[&grace.as_secs_f64(), &lookback.as_secs_f64(), &SWEEP_BATCH],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Unretaken {
            slot: Slot {
                job_id: row.get("job_id"),
                scheduled_at: row.get("scheduled_at"),
                job_version: row.get("version"),
                trigger: row.get("trigger"),
                max_runs: row.get::<_, Option<i64>>("max_runs").map(|m| m as u64),
            },
            spec: row.get("spec"),
            job_created_at: row.get("created_at"),
            runs_left: row.get("runs_left"),
        })
        .collect())
}

/// Marks skipped rows as decided for the version in force at their slot
/// (which does not fire there), so that [`unretaken`] does not read them
/// again.
pub async fn decided_for_version(
    client: &impl deadpool_postgres::GenericClient,
    slots: &[Slot],
) -> Result<u64, tokio_postgres::Error> {
    if slots.is_empty() {
        return Ok(0);
    }
    let (job_ids, times, versions) = key_columns(slots.iter());
    client
        .execute(
            "UPDATE scheduled_jobs l SET job_version = d.version
             FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[]) AS d(job_id, scheduled_at, version)
             WHERE l.job_id = d.job_id AND l.scheduled_at = d.scheduled_at
               AND (l.status = 'skipped' AND l.job_version < d.version) IS TRUE",
            &[&job_ids, &times, &versions],
        )
        .await
}
