//! The worker's writes: starting, verifying, finishing and giving back
//! attempts. Every write names the fire id and the attempt, so a duplicate
//! or stale message can never overwrite a newer outcome.
//!
//! Both transitions run as multi-row statements over `unnest` arrays (fed by
//! `batch::Batcher`): a burst of N due messages costs a handful of round
//! trips, not 2·N. Each row keeps exactly the conditions a single-row write
//! would have.

// Per-slot sets and maps hash with foldhash: SipHash over their
// (id, instant, …) keys was a visible share of a worker's CPU per slot. The
// keys are ids and instants the product makes, never a caller's free text.
use foldhash::{HashMap, HashSet, HashSetExt};

use chrono::{DateTime, Utc};
use deadpool_postgres::{ClientWrapper, Pool};
use tokio_postgres::Client;
use uuid::Uuid;

use super::Status;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The row is ours to deliver.
    Go,
    /// Already running elsewhere, finished, or from another fire: drop it.
    Duplicate,
    /// The job was deleted, paused or changed since the slot was claimed.
    Cancelled(&'static str),
    /// A redelivered copy of an attempt another live task holds `running`
    /// (its first copy came back after a failed batch or a lost session
    /// while the holder may still be delivering): neither deliver nor drop
    /// it; requeue it after this long, by when the holder has finished,
    /// given the row back, or been presumed gone.
    Busy(std::time::Duration),
}

/// Longest a busy redelivery is held before it is requeued and asked again.
const BUSY_RECHECK_MAX: std::time::Duration = std::time::Duration::from_secs(2);
/// Shortest, so that a requeued message does not spin.
pub const BUSY_RECHECK_MIN: std::time::Duration = std::time::Duration::from_millis(250);

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

/// What a statement saw of `jobs`: the xmin of its snapshot. Every job
/// change it did not see (committed after it, or still running when it
/// began) has `change_xid` at or above this, so "has this job changed
/// since?" is one index range read, not a row lookup per slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobsSeen(pub i64);

impl JobsSeen {
    /// Saw nothing: every change counts as after it.
    pub const NOTHING: JobsSeen = JobsSeen(0);
}

/// A row this worker armed ahead, asked about at its due instant.
#[derive(Debug, Clone)]
pub struct VerifyRequest {
    pub row: StartRequest,
    /// What the arming statement saw of `jobs`.
    pub jobs_seen: JobsSeen,
}

/// Above this many jobs changed since the arming of a batch, the batch is
/// verified row by row (the changed-jobs read would cost more than it saves).
const CHANGED_JOBS_MAX: i64 = 1_000;

// SLOT_KEY_ONLY: in the multi-row statements the slot's key is the only
// index condition; every other predicate is wrapped in `(…) IS TRUE`, which
// no index can serve. Otherwise the generic plan, from statistics in which
// `pending` and `running` rows are rare, picks the status index and scans
// every pending or running row per statement: with 45,000 armed rows that
// was 110-140 ms per start statement, the whole ~1,200 deliveries/s limit.

/// Moves each request's row to `running` for its fire and attempt. A
/// redelivery of the same attempt may take a `running` row back only from a
/// worker presumed gone (no heartbeat for three beats); a row this worker
/// holds with no task on it (the caller checks `Holding` first) is an orphan
/// and taken back by any copy. The next attempt may take the row while the
/// failed one is still recording.
///
/// An `UPDATE … FROM` changes a row once however many inputs match it, so
/// the batch runs in rounds in which each slot appears once; a second message
/// for a slot is decided against the row the first one left.
pub async fn start_batch(
    pool: &Pool,
    worker_id: &str,
    requests: Vec<StartRequest>,
) -> anyhow::Result<Vec<(Start, JobsSeen)>> {
    let client = pool.get().await?;
    let mut answers = vec![(Start::Duplicate, JobsSeen::NOTHING); requests.len()];
    // Sized up front: grown insert by insert, their rehashing was a visible
    // share of a worker's CPU in a burst.
    let mut seen: HashSet<(Uuid, DateTime<Utc>, Uuid, i32)> = HashSet::with_capacity(requests.len());
    let mut left: Vec<usize> = (0..requests.len()).collect();
    while !left.is_empty() {
        let mut in_round: HashSet<Slot> = HashSet::with_capacity(left.len());
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

async fn start_round(
    client: &ClientWrapper,
    worker_id: &str,
    rows: &[&StartRequest],
) -> anyhow::Result<Vec<(Start, JobsSeen)>> {
    let mut started = start_rows(client, worker_id, rows).await?;
    // A row that the partition maintenance moved out of the default
    // partition while the statement waited for it is skipped, not updated:
    // a second statement finds it where it went.
    let refused: Vec<&StartRequest> =
        rows.iter().copied().filter(|r| !started.contains_key(&(r.job_id, r.scheduled_at))).collect();
    if !refused.is_empty() {
        started.extend(start_rows(client, worker_id, &refused).await?);
    }
    let mut answers = Vec::with_capacity(rows.len());
    for r in rows {
        answers.push(match started.get(&(r.job_id, r.scheduled_at)) {
            Some(seen) => (Start::Go, *seen),
            None => (explain_refusal(client, r, None).await?, JobsSeen::NOTHING),
        });
    }
    Ok(answers)
}

/// The start statement: the rows it moved to `running`, with what it saw of `jobs`.
async fn start_rows(
    client: &ClientWrapper,
    worker_id: &str,
    rows: &[&StartRequest],
) -> anyhow::Result<HashMap<Slot, JobsSeen>> {
    let sorted: Vec<&StartRequest> =
        crate::db::in_lock_order(rows, |r| (r.job_id, r.scheduled_at)).into_iter().copied().collect();
    let job_ids: Vec<Uuid> = sorted.iter().map(|r| r.job_id).collect();
    let scheduled: Vec<DateTime<Utc>> = sorted.iter().map(|r| r.scheduled_at).collect();
    let fire_ids: Vec<Uuid> = sorted.iter().map(|r| r.fire_id).collect();
    let attempts: Vec<i32> = sorted.iter().map(|r| r.attempt).collect();
    let redelivered: Vec<bool> = sorted.iter().map(|r| r.redelivered).collect();
    let due: Vec<DateTime<Utc>> = sorted.iter().map(|r| r.due_at).collect();
    let stmt = client
        .prepare_cached(&format!(
            "UPDATE scheduled_jobs l SET status = 'running', attempts = b.attempt, worker_id = $6,
                    started_at = greatest(now(), b.due_at), finished_at = NULL
             FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[], $4::int[], $5::bool[], $7::timestamptz[])
                  AS b(job_id, scheduled_at, fire_id, attempt, redelivered, due_at)
             WHERE l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at
               -- `IS TRUE`: see SLOT_KEY_ONLY.
               AND (l.fire_id = b.fire_id
               AND ((l.status IN ('pending', 'retrying') AND l.attempts = b.attempt - 1)
                    -- A row awaiting a receiver's report (async completion)
                    -- is nobody's to start: its report or deadline moves it.
                    OR (l.status = 'running' AND l.attempts = b.attempt AND l.awaiting_until IS NULL
                        AND (l.worker_id = $6 OR (b.redelivered AND {worker_gone})))
                    -- The worker of attempt n-1 publishes attempt n before it
                    -- records `retrying`; a short delay can bring attempt n in
                    -- between. An attempt n exists only once n-1 has failed.
                    OR (l.status = 'running' AND l.attempts = b.attempt - 1 AND b.attempt > 1
                        AND l.awaiting_until IS NULL))
               ) IS TRUE AND {slot_wanted}
             -- The statement's own snapshot: what `slot_wanted` was judged on.
             RETURNING l.job_id, l.scheduled_at, pg_snapshot_xmin(pg_current_snapshot())::text::bigint",
            worker_gone = super::WORKER_PRESUMED_GONE,
            slot_wanted = slot_wanted!(),
        ))
        .await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
        [&job_ids, &scheduled, &fire_ids, &attempts, &redelivered, &worker_id, &due];
    let returned = crate::db::retry_deadlock(|| client.query(&stmt, &params)).await?;
    Ok(returned.iter().map(|row| ((row.get(0), row.get(1)), JobsSeen(row.get(2)))).collect())
}

/// A scheduled slot whose first attempt reached a worker later than the
/// misfire threshold, for its job's misfire policy to decide.
#[derive(Debug, Clone)]
pub struct LateSlot {
    pub job_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub fire_id: Uuid,
    /// When it was due (its scheduled time plus the job's jitter).
    pub due_at: DateTime<Utc>,
    /// `skip` or `fire_once` (`fire_all` delivers every slot: never asked).
    pub policy: domain::job::MisfirePolicy,
    /// How late it reached the worker, for the recorded reason.
    pub late_ms: i64,
    /// `fire_once`: a late slot of the job this worker let run since this
    /// one was due, with when (the caller's own record: its row may not
    /// show the run yet). `None`: the ledger's runs decide.
    pub ran_since_due: Option<(DateTime<Utc>, DateTime<Utc>)>,
}

/// What [`skip_late_batch`] did with a late slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LateDecision {
    /// Not skipped: the caller starts it as usual.
    Deliver,
    /// Recorded `skipped`; under `fire_once`, coalesced into this slot of
    /// the job, which ran (or was let run) at this instant.
    Skipped { into: Option<(DateTime<Utc>, DateTime<Utc>)> },
}

/// Records `skipped`, without a delivery, the late slots their job's
/// misfire policy gives up: under `skip` every one; under `fire_once` one
/// whose job has already run since the slot was due (the caller's
/// `ran_since_due`, or the job's latest earlier scheduled slot that ran,
/// if it started at or after this one's due instant): that run covered
/// it, and the slot is coalesced into it. So a
/// run of late slots makes one late delivery, as after an outage, and a
/// job is never starved: under an overload that lasts, each `fire_once`
/// job still runs about once per its slots' lateness, and the rest are
/// skipped, which cuts the load until the workers catch up. Only a row
/// still `pending` for its first attempt (`attempts = 0`: no retry, no
/// replay) of this fire and still wanted is skipped; every other slot
/// answers false and goes on to [`start_batch`], which decides it as
/// usual, so a slot this cannot skip (a row moved between partitions under
/// the statement, say) is delivered late rather than lost.
pub async fn skip_late_batch(pool: &Pool, worker_id: &str, slots: Vec<LateSlot>) -> anyhow::Result<Vec<LateDecision>> {
    let client = pool.get().await?;
    let sorted = crate::db::in_lock_order(&slots, |s| (s.job_id, s.scheduled_at));
    let job_ids: Vec<Uuid> = sorted.iter().map(|s| s.job_id).collect();
    let scheduled: Vec<DateTime<Utc>> = sorted.iter().map(|s| s.scheduled_at).collect();
    let fire_ids: Vec<Uuid> = sorted.iter().map(|s| s.fire_id).collect();
    let policies: Vec<&str> = sorted.iter().map(|s| s.policy.as_str()).collect();
    let late_ms: Vec<i64> = sorted.iter().map(|s| s.late_ms).collect();
    let due: Vec<DateTime<Utc>> = sorted.iter().map(|s| s.due_at).collect();
    let ran_slot: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|s| s.ran_since_due.map(|r| r.0)).collect();
    let ran_at: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|s| s.ran_since_due.map(|r| r.1)).collect();
    let stmt = client
        .prepare_cached(&format!(
            "UPDATE scheduled_jobs l SET status = 'skipped', finished_at = now(), worker_id = $6, reason = d.reason,
                    history = l.history || jsonb_build_array(jsonb_build_object(
                        'event', 'skipped', 'at', cronshard_instant(now()), 'reason', d.reason, 'worker_id', $6::text))
             FROM (SELECT b.job_id, b.scheduled_at, b.fire_id,
                          coalesce(b.ran_slot, r.scheduled_at) AS ran_slot, coalesce(b.ran_at, r.started_at) AS ran_at,
                          'misfire policy ' || b.policy || ': '
                          || CASE WHEN b.policy = 'fire_once'
                                  THEN 'coalesced into ' || cronshard_instant(coalesce(b.ran_slot, r.scheduled_at))
                                       || ', which ran at ' || cronshard_instant(coalesce(b.ran_at, r.started_at))
                                       || ' since this slot was due; '
                                  ELSE '' END
                          || 'reached a worker ' || round(b.late_ms / 1000.0, 1) || ' s after its due time' AS reason
                   FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[], $4::text[], $5::bigint[], $7::timestamptz[],
                               $8::timestamptz[], $9::timestamptz[])
                        AS b(job_id, scheduled_at, fire_id, policy, late_ms, due_at, ran_slot, ran_at)
                   -- The job's latest earlier scheduled slot that ran (skipped
                   -- ones in between are stepped over; an hour back at most).
                   LEFT JOIN LATERAL (
                        SELECT r.scheduled_at, r.started_at FROM scheduled_jobs r
                        WHERE r.job_id = b.job_id AND r.scheduled_at < b.scheduled_at
                          AND r.scheduled_at >= b.scheduled_at - interval '1 hour'
                          AND r.trigger NOT IN {on_request} AND r.status IN ('running', 'retrying', 'succeeded', 'failed')
                        ORDER BY r.scheduled_at DESC LIMIT 1) r
                        ON b.policy = 'fire_once'
                   WHERE b.policy = 'skip' OR b.ran_slot IS NOT NULL OR r.started_at >= b.due_at) d
             WHERE l.job_id = d.job_id AND l.scheduled_at = d.scheduled_at
               -- `IS TRUE`: see SLOT_KEY_ONLY.
               AND (l.fire_id = d.fire_id AND l.status = 'pending' AND l.attempts = 0) IS TRUE
               AND {slot_wanted}
             RETURNING l.job_id, l.scheduled_at, d.ran_slot, d.ran_at",
            slot_wanted = slot_wanted!(),
            on_request = crate::ledger_on_request!(),
        ))
        .await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] =
        [&job_ids, &scheduled, &fire_ids, &policies, &late_ms, &worker_id, &due, &ran_slot, &ran_at];
    let skipped: HashMap<Slot, LateDecision> = crate::db::retry_deadlock(|| client.query(&stmt, &params))
        .await?
        .iter()
        .map(|row| {
            let into = row.get::<_, Option<DateTime<Utc>>>(2).zip(row.get::<_, Option<DateTime<Utc>>>(3));
            ((row.get(0), row.get(1)), LateDecision::Skipped { into })
        })
        .collect();
    Ok(slots
        .iter()
        .map(|s| skipped.get(&(s.job_id, s.scheduled_at)).copied().unwrap_or(LateDecision::Deliver))
        .collect())
}

/// Finds out why a row could not be started (`armed_by: None`) or, for a
/// row this worker armed ahead (`armed_by: Some(worker)`), why it may not be
/// delivered now; and records a cancellation on a row nobody will run. Rare
/// (duplicates, cancelled slots), so one query per row is fine.
async fn explain_refusal(client: &Client, r: &StartRequest, armed_by: Option<&str>) -> anyhow::Result<Start> {
    let row = client
        .query_opt(
            &format!(
                "SELECT l.status, l.fire_id, l.attempts, l.worker_id, {unwanted},
                        extract(epoch FROM (SELECT w.seen_at FROM worker_heartbeats w
                                            WHERE w.worker_id = l.worker_id AND {session_open})
                                           + {gone_after} - now())::float8,
                        l.awaiting_until IS NOT NULL
                 FROM scheduled_jobs l
                 WHERE l.job_id = $1 AND l.scheduled_at = $2",
                unwanted = super::UNWANTED_REASON,
                gone_after = super::WORKER_GONE_AFTER_SQL,
                session_open = super::WORKER_SESSION_OPEN,
            ),
            &[&r.job_id, &r.scheduled_at],
        )
        .await?;
    let Some(row) = row else {
        // Every message is published after its claim commits: a claim the
        // database no longer has was lost after it was acknowledged.
        tracing::error!(job.id = %r.job_id, scheduled_at = %r.scheduled_at, "a fire message has no ledger row: its claim was lost (database failover?) or retention removed it");
        metrics::counter!(runtime::metrics::WORKER_MESSAGES_WITHOUT_ROW_TOTAL).increment(1);
        return Ok(Start::Duplicate);
    };
    let (status, fire_id, attempts, worker): (Status, Uuid, i32, Option<&str>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    // Delivered and answered 202: a copy of its message has nothing to do.
    if row.get::<_, bool>(6) {
        return Ok(Start::Duplicate);
    }
    // A redelivery must not drop its message while a live holder has the
    // row: the holder's own copy may be this one, returned to the queue. (A
    // gone holder's row the statement did not take belongs to a cancelled
    // job; the stuck-`running` sweep settles it.)
    let holder_alive_for = row.get::<_, Option<f64>>(5).unwrap_or(0.0);
    if armed_by.is_none()
        && r.redelivered
        && status == Status::Running
        && fire_id == r.fire_id
        && attempts == r.attempt
        && holder_alive_for > 0.0
    {
        let wait = std::time::Duration::from_secs_f64(holder_alive_for).clamp(BUSY_RECHECK_MIN, BUSY_RECHECK_MAX);
        return Ok(Start::Busy(wait));
    }
    let still_ours = fire_id == r.fire_id
        && match armed_by {
            None => matches!(status, Status::Pending | Status::Retrying),
            Some(me) => status == Status::Running && attempts == r.attempt && worker == Some(me),
        };
    if !still_ours {
        return Ok(Start::Duplicate);
    }
    let reason = match row.get::<_, Option<&str>>(4) {
        Some("deleted") => "deleted",
        Some("paused") => "paused",
        Some(_) => "superseded",
        // Wanted, yet not startable by this message: a stale copy.
        None => return Ok(Start::Duplicate),
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
/// the version that claimed the slot)? Reads, not writes: the row already
/// says `running` for this worker and attempt. A delete or pause that
/// committed before this read cancels the slot; one after it is ordered
/// after the fire, just as with a start at the due instant.
///
/// `heartbeat_fresh`: this worker's last heartbeat is recent enough that
/// nobody can have presumed it gone, so nobody has taken an armed row over
/// (only a redelivery to a worker that finds this one gone may). Then only
/// a change to its job can make a row unwanted, and the rows of jobs
/// unchanged since their arming need no lookup: a burst of 50,000 slots
/// costs one read of the changed jobs instead of 50,000 lookups, which took
/// a quarter of both cores while the burst was being delivered.
pub async fn verify_batch(
    pool: &Pool,
    worker_id: &str,
    heartbeat_fresh: bool,
    requests: Vec<VerifyRequest>,
) -> anyhow::Result<Vec<Start>> {
    let client = pool.get().await?;
    let mut to_check: Vec<usize> = (0..requests.len()).collect();
    if heartbeat_fresh {
        let oldest_seen = requests.iter().map(|r| r.jobs_seen).min().unwrap_or(JobsSeen::NOTHING);
        if let Some(changed) = jobs_changed_since(&client, oldest_seen).await? {
            to_check.retain(|&i| changed.contains(&requests[i].row.job_id));
        }
    }
    metrics::counter!(runtime::metrics::WORKER_VERIFIED_TOTAL, "by" => "jobs_unchanged")
        .increment((requests.len() - to_check.len()) as u64);
    metrics::counter!(runtime::metrics::WORKER_VERIFIED_TOTAL, "by" => "row").increment(to_check.len() as u64);
    let mut answers = vec![Start::Go; requests.len()];
    if to_check.is_empty() {
        return Ok(answers);
    }
    let stmt = client
        .prepare_cached(concat!(
            "SELECT b.i FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[], $4::int[])
                             WITH ORDINALITY AS b(job_id, scheduled_at, fire_id, attempt, i)
             JOIN scheduled_jobs l ON l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at
             WHERE l.fire_id = b.fire_id AND l.attempts = b.attempt AND l.worker_id = $5
               -- `IS TRUE`: see SLOT_KEY_ONLY.
               AND (l.status = 'running') IS TRUE
               AND ",
            slot_wanted!()
        ))
        .await?;
    let rows: Vec<&StartRequest> = to_check.iter().map(|&i| &requests[i].row).collect();
    let column = |f: fn(&StartRequest) -> Uuid| -> Vec<Uuid> { rows.iter().map(|r| f(r)).collect() };
    let ours: HashSet<i64> = client
        .query(
            &stmt,
            &[
                &column(|r| r.job_id),
                &rows.iter().map(|r| r.scheduled_at).collect::<Vec<_>>(),
                &column(|r| r.fire_id),
                &rows.iter().map(|r| r.attempt).collect::<Vec<_>>(),
                &worker_id,
            ],
        )
        .await?
        .iter()
        .map(|row| row.get(0))
        .collect();
    for (n, (&i, r)) in to_check.iter().zip(rows).enumerate() {
        if !ours.contains(&(n as i64 + 1)) {
            answers[i] = explain_refusal(&client, r, Some(worker_id)).await?;
        }
    }
    Ok(answers)
}

/// The jobs changed since a statement that saw `seen`, or None when there
/// are more than `CHANGED_JOBS_MAX` (checking row by row is then cheaper).
async fn jobs_changed_since(client: &ClientWrapper, seen: JobsSeen) -> anyhow::Result<Option<HashSet<Uuid>>> {
    // Ordered by the indexed column so that even a generic plan walks the
    // index from `seen` and stops at the limit.
    let stmt = client.prepare_cached("SELECT id FROM jobs WHERE change_xid >= $1 ORDER BY change_xid LIMIT $2").await?;
    let rows = client.query(&stmt, &[&seen.0, &(CHANGED_JOBS_MAX + 1)]).await?;
    Ok((rows.len() as i64 <= CHANGED_JOBS_MAX).then(|| rows.iter().map(|row| row.get(0)).collect()))
}

/// A slot and attempt a task of this worker handles.
pub type HeldSlot = (Uuid, DateTime<Utc>, i32);

/// Gives back a row this worker moved to `running` but will not deliver
/// (it is stopping, or lost its broker session or the processing failed):
/// the row returns to `pending` for the attempt before, so the message,
/// requeued by the broker, starts it again wherever it lands, without
/// waiting for this worker to be presumed gone.
pub async fn release(pool: &Pool, worker_id: &str, slot: HeldSlot, fire_id: Uuid) -> anyhow::Result<bool> {
    let (job_id, scheduled_at, attempt) = slot;
    let released = pool
        .get()
        .await?
        .execute(
            &format!(
                // The broker requeues the message: the row has one out, and
                // the outbox sweep must not publish another.
                "UPDATE scheduled_jobs l SET {RELEASED}, published_at = coalesce(l.published_at, now())
                 WHERE l.job_id = $1 AND l.scheduled_at = $2 AND l.fire_id = $3 AND l.attempts = $4
                   AND l.status = 'running' AND l.worker_id = $5"
            ),
            &[&job_id, &scheduled_at, &fire_id, &attempt, &worker_id],
        )
        .await?;
    Ok(released == 1)
}

/// Releases the rows `running` under this worker's id that no task of it
/// handles (`held` is every slot a task had when the statement was sent): a
/// task stopped and its `release` failed, or the worker restarted under the
/// same id. Their messages may be gone too, so they are also marked
/// unpublished: the outbox sweep publishes them again (a copy that meets
/// another is dropped by the start rule). A row is an orphan only once it
/// has been due for `ORPHAN_AFTER`, so a task that started it after `held`
/// was read is never mistaken for none.
pub async fn release_orphans(pool: &Pool, worker_id: &str, held: Vec<HeldSlot>) -> anyhow::Result<u64> {
    let client = pool.get().await?;
    let (job_ids, times, attempts): (Vec<Uuid>, Vec<DateTime<Utc>>, Vec<i32>) =
        held.into_iter().fold(Default::default(), |(mut a, mut b, mut c), (j, t, n)| {
            a.push(j);
            b.push(t);
            c.push(n);
            (a, b, c)
        });
    let released = client
        .execute(
            &format!(
                "UPDATE scheduled_jobs l SET {RELEASED}, published_at = NULL
                 WHERE l.status = 'running' AND l.worker_id = $1 AND l.awaiting_until IS NULL
                   -- A row starts at or after its slot: an index range on
                   -- the slot skips the rows armed ahead.
                   AND l.scheduled_at < now() - make_interval(secs => $5)
                   AND l.started_at < now() - make_interval(secs => $5)
                   AND NOT EXISTS (SELECT 1 FROM unnest($2::uuid[], $3::timestamptz[], $4::int[]) AS h(job_id, scheduled_at, attempt)
                                   WHERE h.job_id = l.job_id AND h.scheduled_at = l.scheduled_at AND h.attempt = l.attempts)"
            ),
            &[&worker_id, &job_ids, &times, &attempts, &ORPHAN_AFTER.as_secs_f64()],
        )
        .await?;
    Ok(released)
}

/// Takes the timeout of an attempt that awaits its receiver's report
/// (async completion) past its deadline: the row stops awaiting and is
/// this worker's `running` attempt, to be finished as a failure (and
/// retried by its policy) like any failed delivery. False when the report
/// came first, the deadline is not reached, or another copy took it.
pub async fn expire_awaiting(pool: &Pool, worker_id: &str, slot: HeldSlot, fire_id: Uuid) -> anyhow::Result<bool> {
    let (job_id, scheduled_at, attempt) = slot;
    let client = pool.get().await?;
    let n = client
        .execute(
            "UPDATE scheduled_jobs SET awaiting_until = NULL, worker_id = $5, started_at = now(),
                    history = history || jsonb_build_array(jsonb_build_object(
                        'event', 'completion_timed_out', 'at', cronshard_instant(now()), 'attempt', attempts,
                        'deadline', cronshard_instant(awaiting_until)))
             WHERE job_id = $1 AND scheduled_at = $2 AND fire_id = $3 AND attempts = $4 AND status = 'running'
               AND awaiting_until <= now()",
            &[&job_id, &scheduled_at, &fire_id, &attempt, &worker_id],
        )
        .await?;
    Ok(n == 1)
}

/// What a receiver's completion report came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Completed {
    /// Recorded: the row is final now.
    Recorded(Status),
    /// The same report for the same attempt was recorded before.
    AlreadyRecorded(Status),
    /// The row is not running this attempt any more (timed out and retried,
    /// replaced, or reported differently): the report changes nothing.
    NotAwaiting {
        status: Status,
        attempts: i32,
    },
    NoSuchExecution,
}

/// Records a receiver's report of attempt `attempt` of an execution: final
/// `succeeded` or `failed`, with its short result. Only while that attempt
/// runs (awaiting, or just answered 202 and not yet recorded as such);
/// a report repeated for a final row is answered as recorded before. With
/// `after_completion: delete`, the job is deleted with the final outcome.
pub async fn complete(
    client: &impl deadpool_postgres::GenericClient,
    slot: (Uuid, DateTime<Utc>),
    execution_id: &str,
    attempt: i32,
    status: Status,
    result: Option<&str>,
) -> anyhow::Result<Completed> {
    let (job_id, scheduled_at) = slot;
    let row = client
        .query_opt(
            &format!(
                "WITH finished AS (
                     UPDATE scheduled_jobs l SET status = $5, finished_at = now(), awaiting_until = NULL,
                            next_attempt_at = NULL,
                            error = CASE WHEN $5 = 'failed' THEN coalesce('reported failed: ' || $6, 'reported failed') END,
                            response_excerpt = coalesce($6, l.response_excerpt),
                            history = l.history || jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                                'event', 'completed', 'at', cronshard_instant(now()), 'attempt', l.attempts,
                                'outcome', $5::text, 'result', $6::text)))
                     WHERE l.job_id = $1 AND l.scheduled_at = $2 AND l.execution_id = $3 AND l.attempts = $4
                       AND l.status = 'running'
                     RETURNING l.job_id, l.status,
                               (SELECT spec->>'after_completion' = 'delete' FROM jobs WHERE id = l.job_id) AS delete_job),
                 deleted AS ({delete_after})
                 SELECT status FROM finished",
                delete_after = crate::jobs::DELETE_AFTER_COMPLETION,
            ),
            &[&job_id, &scheduled_at, &execution_id, &attempt, &status.as_str(), &result],
        )
        .await?;
    if row.is_some() {
        return Ok(Completed::Recorded(status));
    }
    let Some(row) = client
        .query_opt(
            "SELECT status, attempts,
                    history @> jsonb_build_array(jsonb_build_object('event', 'completed', 'attempt', $4::int,
                                                                    'outcome', $5::text))
             FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2 AND execution_id = $3",
            &[&job_id, &scheduled_at, &execution_id, &attempt, &status.as_str()],
        )
        .await?
    else {
        return Ok(Completed::NoSuchExecution);
    };
    let (now, attempts, same_before): (Status, i32, bool) = (row.get(0), row.get(1), row.get(2));
    Ok(if same_before && attempts == attempt {
        Completed::AlreadyRecorded(now)
    } else {
        Completed::NotAwaiting { status: now, attempts }
    })
}

/// How long past its start a `running` row of this worker with no task on
/// it waits before `release_orphans` gives it back.
pub const ORPHAN_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// The assignment that gives a `running` row back (alias `l`).
const RELEASED: &str = "status = 'pending', attempts = l.attempts - 1, worker_id = NULL, started_at = NULL,
    history = l.history || jsonb_build_array(jsonb_build_object(
        'event', 'released', 'at', cronshard_instant(now()), 'attempt', l.attempts, 'worker_id', l.worker_id))";

/// One attempt's outcome.
#[derive(Debug, Clone)]
pub struct FinishRequest {
    pub job_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub fire_id: Uuid,
    pub attempt: i32,
    pub status: Status,
    pub http_status: Option<i32>,
    pub sqs_message_id: Option<String>,
    pub excerpt: Option<String>,
    /// The receiver's kept response headers, as a JSON object.
    pub response_headers: Option<serde_json::Value>,
    pub error: Option<String>,
    /// Which rule of the delivery contract decided the outcome, and for a
    /// retry how its delay was chosen, in words (the history's `rule`).
    pub rule: Option<String>,
    pub redelivered: bool,
    /// For `retrying`: when the next attempt is due (the retry's delay).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// An asynchronous completion's 202: the row stays `running` and awaits
    /// the receiver's report until then (`status` is `running`).
    pub awaiting_until: Option<DateTime<Utc>>,
    /// The job is deleted with a final outcome (`after_completion: delete`,
    /// as the message said; the job's current definition must still say so).
    pub delete_job: bool,
}

/// Records outcomes, each only on a row its attempt is still running, and
/// appends the attempt to the row's history (who ran it, when, what came of
/// it) in the same write. Answers whether each outcome was recorded.
impl FinishRequest {
    /// The outcome of `attempt` of `m`, with nothing but a status yet.
    pub fn new(
        m: &domain::message::FireMessage,
        attempt: u32,
        redelivered: bool,
        status: Status,
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
            response_headers: None,
            error: None,
            rule: None,
            redelivered,
            next_attempt_at: None,
            awaiting_until: None,
            delete_job: m.after_completion.is_delete(),
        }
    }
}

pub async fn finish_batch(pool: &Pool, requests: Vec<FinishRequest>) -> anyhow::Result<Vec<bool>> {
    let client = pool.get().await?;
    let all: Vec<&FinishRequest> = requests.iter().collect();
    let mut recorded = finish_rows(&client, &all).await?;
    // As for starts: a row moved between partitions under the statement is
    // skipped by it, and found by a second one.
    let missed: Vec<&FinishRequest> =
        all.into_iter().filter(|r| !recorded.contains(&(r.job_id, r.scheduled_at, r.attempt))).collect();
    if !missed.is_empty() {
        recorded.extend(finish_rows(&client, &missed).await?);
    }
    Ok(requests.iter().map(|r| recorded.contains(&(r.job_id, r.scheduled_at, r.attempt))).collect())
}

/// The outcome statement: the rows (slot and attempt) it recorded.
async fn finish_rows(
    client: &ClientWrapper,
    requests: &[&FinishRequest],
) -> anyhow::Result<HashSet<(Uuid, DateTime<Utc>, i32)>> {
    let stmt = client
        .prepare_cached(&format!(
            "WITH finished AS (
                 UPDATE scheduled_jobs l SET status = b.status, http_status = b.http_status,
                    finished_at = CASE WHEN b.awaiting_until IS NULL THEN now() END,
                    awaiting_until = b.awaiting_until,
                    sqs_message_id = coalesce(b.sqs_message_id, l.sqs_message_id),
                    response_excerpt = b.excerpt, response_headers = b.response_headers, error = b.error,
                    next_attempt_at = b.next_attempt_at,
                    history = l.history || jsonb_build_array(jsonb_build_object(
                        'event', 'attempt', 'attempt', b.attempt, 'worker_id', l.worker_id,
                        'started_at', cronshard_instant(l.started_at), 'finished_at', cronshard_instant(now()),
                        'outcome', CASE WHEN b.awaiting_until IS NULL THEN b.status ELSE 'accepted' END,
                        'http_status', b.http_status, 'sqs_message_id', b.sqs_message_id,
                        'error', b.error, 'redelivered', b.redelivered)
                      -- Only when present: entries of older versions have none.
                      || jsonb_strip_nulls(jsonb_build_object('rule', b.rule, 'response_headers', b.response_headers,
                             'next_attempt_at', cronshard_instant(b.next_attempt_at),
                             'awaiting_until', cronshard_instant(b.awaiting_until))))
                 FROM unnest($1::uuid[], $2::timestamptz[], $3::uuid[], $4::int[], $5::text[], $6::int[],
                             $7::text[], $8::text[], $9::text[], $10::bool[], $11::timestamptz[], $12::jsonb[],
                             $13::text[], $14::timestamptz[], $15::bool[])
                      AS b(job_id, scheduled_at, fire_id, attempt, status, http_status, sqs_message_id, excerpt,
                           error, redelivered, next_attempt_at, response_headers, rule, awaiting_until, delete_job)
                 WHERE l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at
                   -- `IS TRUE`: see SLOT_KEY_ONLY. A row awaiting a report is
                   -- finished by the report or its deadline, not by a delivery.
                   AND (l.fire_id = b.fire_id AND l.attempts = b.attempt AND l.status = 'running'
                        AND l.awaiting_until IS NULL) IS TRUE
                 RETURNING l.job_id, l.scheduled_at, l.attempts, l.status, b.delete_job),
                 deleted AS ({delete_after})
                 SELECT job_id, scheduled_at, attempts FROM finished",
            delete_after = crate::jobs::DELETE_AFTER_COMPLETION,
        ))
        .await?;
    let sorted: Vec<&FinishRequest> =
        crate::db::in_lock_order(requests, |r| (r.job_id, r.scheduled_at)).into_iter().copied().collect();
    let col =
        |f: fn(&FinishRequest) -> Option<String>| -> Vec<Option<String>> { sorted.iter().map(|r| f(r)).collect() };
    let next_attempts: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|r| r.next_attempt_at).collect();
    let response_headers: Vec<Option<&serde_json::Value>> =
        sorted.iter().map(|r| r.response_headers.as_ref()).collect();
    let rules = col(|r| r.rule.clone());
    let awaiting: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|r| r.awaiting_until).collect();
    let delete_job: Vec<bool> = sorted.iter().map(|r| r.delete_job).collect();
    let (job_ids, times, fire_ids, attempts, statuses, http_statuses, sqs_ids, excerpts, errors, redelivered) = (
        sorted.iter().map(|r| r.job_id).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.scheduled_at).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.fire_id).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.attempt).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.status.as_str()).collect::<Vec<_>>(),
        sorted.iter().map(|r| r.http_status).collect::<Vec<_>>(),
        col(|r| r.sqs_message_id.clone()),
        col(|r| r.excerpt.clone()),
        col(|r| r.error.clone()),
        sorted.iter().map(|r| r.redelivered).collect::<Vec<_>>(),
    );
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 15] = [
        &job_ids,
        &times,
        &fire_ids,
        &attempts,
        &statuses,
        &http_statuses,
        &sqs_ids,
        &excerpts,
        &errors,
        &redelivered,
        &next_attempts,
        &response_headers,
        &rules,
        &awaiting,
        &delete_job,
    ];
    Ok(crate::db::retry_deadlock(|| client.query(&stmt, &params))
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect())
}

pub fn lateness_seconds(started: DateTime<Utc>, scheduled_at: DateTime<Utc>) -> f64 {
    (started - scheduled_at).num_milliseconds() as f64 / 1000.0
}

/// What a job's overlap policy made of a slot about to be delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverlapDecision {
    /// Deliver it; `replaced` are the older executions whose remaining
    /// retries this slot cancelled (policy `replace`).
    Run { replaced: Vec<String> },
    /// Recorded `skipped`: `forbid` and an older execution still in flight,
    /// or `replace` and a newer one already begun. Names that execution.
    Skipped { reason: &'static str, because_of: String },
}

/// An older execution of the job still in flight at `now()`: claimed and
/// not final, begun (a row armed ahead of its due instant has not), and
/// due before the slot `$2`. A pending row due earlier counts: it is about
/// to run. Every partition's key index answers it (job id, slot range).
const OLDER_IN_FLIGHT: &str = "o.job_id = $1 AND o.scheduled_at < $2
    AND (o.status IN ('pending', 'retrying') OR (o.status = 'running' AND o.started_at <= now()))";

/// A newer execution of the job that has begun: started, or past it.
const NEWER_BEGUN: &str = "o.job_id = $1 AND o.scheduled_at > $2
    AND (o.status NOT IN ('pending', 'running') OR (o.status = 'running' AND o.started_at <= now()))";

/// Applies the job's overlap policy to the slot this worker holds
/// (`running`, this fire and attempt) at its due instant, before delivery.
///
/// - `forbid`: the slot's first attempt is skipped (reason `overlap`) while
///   an older execution is in flight. An older row never waits for a newer
///   one, so two slots cannot both wait for each other, and one whose
///   predecessor is final runs.
/// - `replace`: an attempt of a slot that a newer execution has already
///   begun is skipped (reason `replaced`); otherwise the older executions
///   waiting for a retry or for their receiver's report (async completion)
///   are skipped (reason `replaced`) and their retry messages are dropped on
///   arrival, as for any final row. An older attempt being delivered
///   finishes; its next attempt, if any, meets the newer slot here and is
///   skipped. Under `forbid`, an attempt awaiting its report is in flight.
///
/// All decisions are rows in the ledger, so they hold across workers and
/// restarts.
pub async fn apply_overlap(
    pool: &Pool,
    worker_id: &str,
    r: &StartRequest,
    policy: domain::job::Overlap,
) -> anyhow::Result<OverlapDecision> {
    use domain::job::Overlap;
    let client = pool.get().await?;
    let skip_self = |reason: &'static str, other: &'static str| {
        format!(
            "WITH other AS (SELECT o.execution_id FROM scheduled_jobs o WHERE {other} ORDER BY o.scheduled_at LIMIT 1)
             UPDATE scheduled_jobs l SET status = 'skipped', reason = '{reason}', finished_at = now(),
                    history = l.history || jsonb_build_array(jsonb_build_object(
                        'event', 'skipped', 'at', cronshard_instant(now()), 'reason', '{reason}',
                        'execution_id', other.execution_id))
             FROM other
             WHERE l.job_id = $1 AND l.scheduled_at = $2 AND l.fire_id = $3 AND l.attempts = $4
               AND l.status = 'running' AND l.worker_id = $5
             RETURNING other.execution_id"
        )
    };
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 5] =
        [&r.job_id, &r.scheduled_at, &r.fire_id, &r.attempt, &worker_id];
    match policy {
        Overlap::Allow => Ok(OverlapDecision::Run { replaced: Vec::new() }),
        Overlap::Forbid => {
            if r.attempt > 1 {
                return Ok(OverlapDecision::Run { replaced: Vec::new() });
            }
            let sql = skip_self(domain::slot::reason::OVERLAP, OLDER_IN_FLIGHT);
            Ok(match client.query_opt(&sql, &params).await? {
                Some(row) => OverlapDecision::Skipped { reason: domain::slot::reason::OVERLAP, because_of: row.get(0) },
                None => OverlapDecision::Run { replaced: Vec::new() },
            })
        }
        Overlap::Replace => {
            let sql = skip_self(domain::slot::reason::REPLACED, NEWER_BEGUN);
            if let Some(row) = client.query_opt(&sql, &params).await? {
                return Ok(OverlapDecision::Skipped { reason: domain::slot::reason::REPLACED, because_of: row.get(0) });
            }
            let replaced = client
                .query(
                    &format!(
                        "UPDATE scheduled_jobs o SET status = 'skipped', reason = '{reason}', finished_at = now(),
                                next_attempt_at = NULL, awaiting_until = NULL,
                                history = o.history || jsonb_build_array(jsonb_build_object(
                                    'event', 'skipped', 'at', cronshard_instant(now()), 'reason', '{reason}',
                                    'execution_id', (SELECT execution_id FROM scheduled_jobs
                                                     WHERE job_id = $1 AND scheduled_at = $2)))
                         -- An attempt awaiting its receiver's report (async
                         -- completion) is replaced too: the newer slot runs
                         -- instead, and the late report changes nothing.
                         WHERE o.job_id = $1 AND o.scheduled_at < $2
                           AND (o.status = 'retrying' OR (o.status = 'running' AND o.awaiting_until IS NOT NULL))
                         RETURNING o.execution_id",
                        reason = domain::slot::reason::REPLACED
                    ),
                    &[&r.job_id, &r.scheduled_at],
                )
                .await?
                .iter()
                .map(|row| row.get(0))
                .collect();
            Ok(OverlapDecision::Run { replaced })
        }
    }
}

/// Why a slot waits for its destination without an attempt (the `reason`
/// of its `waiting` history entry): the host's circuit breaker is open.
pub const WAITING_CIRCUIT_OPEN: &str = "destination circuit open";
/// The host was at its concurrency limit for longer than a message may be
/// held.
pub const WAITING_CONCURRENCY: &str = "destination at its concurrency limit";

/// A slot a worker holds (`running`, this fire and attempt) that waits for
/// its destination host.
#[derive(Debug, Clone)]
pub struct DestinationWait {
    /// The attempt the worker took and has not made.
    pub slot: HeldSlot,
    pub fire_id: Uuid,
    /// `WAITING_CIRCUIT_OPEN` or `WAITING_CONCURRENCY`.
    pub reason: &'static str,
    /// `host:port`.
    pub destination: String,
    /// When the outage began on this worker: one `waiting` entry per row
    /// per (worker, outage).
    pub since: DateTime<Utc>,
}

/// A waiting slot handed back to the broker, due back at `back_at`.
#[derive(Debug, Clone)]
pub struct HandBack {
    pub wait: DestinationWait,
    pub back_at: DateTime<Utc>,
}

/// A waiting slot parked at its horizon, with the row's `error`.
#[derive(Debug, Clone)]
pub struct GiveUp {
    pub wait: DestinationWait,
    pub error: String,
}

/// The `waiting` history entry of input row `b` (worker `$1`), and whether
/// row `l` already has one for that worker and outage.
const WAITING_ENTRY: &str = "jsonb_build_object('event', 'waiting', 'reason', b.reason, 'at', cronshard_instant(now()),
    'destination', b.destination, 'since', cronshard_instant(b.since), 'worker_id', $1::text, 'attempt', b.attempt)";
const WAITING_NOTED: &str = "l.history @> jsonb_build_array(jsonb_build_object(
    'event', 'waiting', 'worker_id', $1::text, 'since', cronshard_instant(b.since)))";
/// The rows of the input (`$2`… the waits, `$9` the hand-backs' `back_at`,
/// `$10` the give-ups' `error`), joined to the rows worker `$1` holds for
/// their attempt.
const HELD_INPUT: &str = "unnest($2::uuid[], $3::timestamptz[], $4::uuid[], $5::int[], $6::text[], $7::text[],
                          $8::timestamptz[], $9::timestamptz[], $10::text[])
        AS b(job_id, scheduled_at, fire_id, attempt, reason, destination, since, back_at, error)";
const HELD_BY_WORKER: &str = "l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at
    -- `IS TRUE`: see SLOT_KEY_ONLY.
    AND (l.fire_id = b.fire_id AND l.attempts = b.attempt AND l.status = 'running' AND l.worker_id = $1) IS TRUE";

/// One input row of a `HELD_INPUT` statement: the wait, and the hand-back's
/// `back_at` or the give-up's `error` where the statement writes one.
type HeldRow<'a> = (&'a DestinationWait, Option<DateTime<Utc>>, Option<&'a str>);

/// Runs `sql` (a multi-row UPDATE over `HELD_INPUT` returning the key) for
/// `waits` in lock order, a second time for rows a partition move made it
/// skip; answers, per input, whether its row was updated.
async fn update_held(pool: &Pool, sql: &str, worker_id: &str, waits: &[HeldRow<'_>]) -> anyhow::Result<Vec<bool>> {
    let client = pool.get().await?;
    let stmt = client.prepare_cached(sql).await?;
    let run = |rows: Vec<usize>| {
        let (client, stmt) = (&client, &stmt);
        async move {
            let sorted: Vec<usize> =
                crate::db::lock_order(rows.iter().map(|&i| (waits[i].0.slot.0, waits[i].0.slot.1)))
                    .into_iter()
                    .map(|k| rows[k])
                    .collect();
            let col = |f: &dyn Fn(&DestinationWait) -> Uuid| sorted.iter().map(|&i| f(waits[i].0)).collect::<Vec<_>>();
            let (job_ids, fire_ids) = (col(&|w| w.slot.0), col(&|w| w.fire_id));
            let times: Vec<DateTime<Utc>> = sorted.iter().map(|&i| waits[i].0.slot.1).collect();
            let attempts: Vec<i32> = sorted.iter().map(|&i| waits[i].0.slot.2).collect();
            let reasons: Vec<&str> = sorted.iter().map(|&i| waits[i].0.reason).collect();
            let destinations: Vec<&str> = sorted.iter().map(|&i| waits[i].0.destination.as_str()).collect();
            let since: Vec<DateTime<Utc>> = sorted.iter().map(|&i| waits[i].0.since).collect();
            let back_at: Vec<Option<DateTime<Utc>>> = sorted.iter().map(|&i| waits[i].1).collect();
            let errors: Vec<Option<&str>> = sorted.iter().map(|&i| waits[i].2).collect();
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 10] = [
                &worker_id,
                &job_ids,
                &times,
                &fire_ids,
                &attempts,
                &reasons,
                &destinations,
                &since,
                &back_at,
                &errors,
            ];
            let updated: HashSet<Slot> = crate::db::retry_deadlock(|| client.query(stmt, &params))
                .await?
                .iter()
                .map(|row| (row.get(0), row.get(1)))
                .collect();
            anyhow::Ok(updated)
        }
    };
    let mut updated = run((0..waits.len()).collect()).await?;
    let missed: Vec<usize> =
        (0..waits.len()).filter(|&i| !updated.contains(&(waits[i].0.slot.0, waits[i].0.slot.1))).collect();
    if !missed.is_empty() {
        updated.extend(run(missed).await?);
    }
    Ok(waits.iter().map(|(w, _, _)| updated.contains(&(w.slot.0, w.slot.1))).collect())
}

/// Says on each row that its delivery waits for its destination while this
/// worker holds it (`running`): a `waiting` entry, once per outage. Answers,
/// per input, whether the entry was added. One statement for a batch: an
/// outage makes every slot of the host wait at once.
pub async fn note_waiting_batch(
    pool: &Pool,
    worker_id: &str,
    waits: Vec<DestinationWait>,
) -> anyhow::Result<Vec<bool>> {
    let sql = format!(
        "UPDATE scheduled_jobs l SET history = l.history || jsonb_build_array({WAITING_ENTRY})
         FROM {HELD_INPUT}
         WHERE {HELD_BY_WORKER} AND NOT {WAITING_NOTED}
         RETURNING l.job_id, l.scheduled_at"
    );
    let rows: Vec<HeldRow> = waits.iter().map(|w| (w, None, None)).collect();
    update_held(pool, &sql, worker_id, &rows).await
}

/// Hands held slots back to wait elsewhere (each message goes to a delay
/// queue as the same attempt): `running` → `retrying` with the attempt not
/// counted (`attempts` back to n − 1, which the start rule expects of the
/// returning message) and `next_attempt_at` when the message is back, so
/// that the stranded-row sweep finds it if the message is lost. Adds the
/// `waiting` entry unless the row has it for this outage. Answers, per
/// input, whether the row was this worker's to hand back.
pub async fn wait_for_destination_batch(
    pool: &Pool,
    worker_id: &str,
    hand_backs: Vec<HandBack>,
) -> anyhow::Result<Vec<bool>> {
    let sql = format!(
        "UPDATE scheduled_jobs l SET status = 'retrying', attempts = l.attempts - 1, worker_id = NULL,
                started_at = NULL, next_attempt_at = b.back_at,
                history = CASE WHEN {WAITING_NOTED} THEN l.history
                               ELSE l.history || jsonb_build_array({WAITING_ENTRY}) END
         FROM {HELD_INPUT}
         WHERE {HELD_BY_WORKER}
         RETURNING l.job_id, l.scheduled_at"
    );
    let rows: Vec<HeldRow> = hand_backs.iter().map(|h| (&h.wait, Some(h.back_at), None)).collect();
    update_held(pool, &sql, worker_id, &rows).await
}

/// Sends a waiting slot back to wait again without taking its row: its
/// message came back while the circuit it waits for is still open on this
/// worker past the hold, so a start and a hand-back (two status changes,
/// each through every index of the partition) would only restore the row
/// as it is. The row must be `retrying` for that attempt (`attempts`
/// n − 1, nobody's), and say it waits for this very outage of this worker
/// (the `waiting` entry its hand-back wrote): any other row goes the whole
/// way. Only `next_attempt_at` changes, so that the stranded-row sweep
/// still finds the slot if its message is lost; no indexed column changes,
/// so the update can stay on its page (HOT). Answers, per input, whether
/// the row was moved.
pub async fn wait_again_batch(pool: &Pool, worker_id: &str, hand_backs: Vec<HandBack>) -> anyhow::Result<Vec<bool>> {
    let sql = format!(
        "UPDATE scheduled_jobs l SET next_attempt_at = b.back_at
         FROM {HELD_INPUT}
         WHERE l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at
           -- `IS TRUE`: see SLOT_KEY_ONLY.
           AND (l.fire_id = b.fire_id AND l.attempts = b.attempt - 1 AND l.status = 'retrying'
                AND l.worker_id IS NULL AND {WAITING_NOTED}) IS TRUE
         RETURNING l.job_id, l.scheduled_at"
    );
    let rows: Vec<HeldRow> = hand_backs.iter().map(|h| (&h.wait, Some(h.back_at), None)).collect();
    update_held(pool, &sql, worker_id, &rows).await
}

/// Parks held slots that cannot be delivered within their horizon, without
/// an attempt: `running` → `failed` (`attempts` back to n − 1: the attempt
/// was never made), the `error` saying why and a `gave_up` history entry.
/// The caller has published each to the failed queue first. One statement
/// for a batch: an outage brings its slots' horizons one after the other,
/// hundreds a second. Answers, per input, whether the row was this
/// worker's to park.
pub async fn give_up_waiting_batch(pool: &Pool, worker_id: &str, give_ups: Vec<GiveUp>) -> anyhow::Result<Vec<bool>> {
    let sql = format!(
        "UPDATE scheduled_jobs l SET status = 'failed', attempts = l.attempts - 1, finished_at = now(),
                next_attempt_at = NULL, error = b.error,
                history = l.history || jsonb_build_array(jsonb_build_object(
                    'event', 'gave_up', 'reason', b.reason, 'at', cronshard_instant(now()),
                    'destination', b.destination, 'since', cronshard_instant(b.since), 'worker_id', $1::text,
                    'attempt', b.attempt))
         FROM {HELD_INPUT}
         WHERE {HELD_BY_WORKER}
         RETURNING l.job_id, l.scheduled_at"
    );
    let rows: Vec<HeldRow> = give_ups.iter().map(|g| (&g.wait, None, Some(g.error.as_str()))).collect();
    update_held(pool, &sql, worker_id, &rows).await
}
