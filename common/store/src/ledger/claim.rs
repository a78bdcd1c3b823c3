//! The scheduler's writes: claiming due slots, recording slots decided
//! without firing, and reading where a slot stands for a claimer.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Status, Trigger};
use domain::execution::execution_id;
use domain::job::JobSpec;
use domain::message::FireMessage;

/// One due occurrence of a job, as the timer hands it over.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub job_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub job_version: i64,
    pub trigger: Trigger,
    /// The `max_runs` of `job_version` (versions never change): the claim
    /// refuses the slot once the ledger holds that many runs of the job.
    pub max_runs: Option<u64>,
}

/// Slots decided without firing (misfire policy, calendar): a run of
/// consecutive slots of one job version, recorded in the ledger. A run of
/// one slot is a ledger row; a longer run is one row of `decided_ranges`
/// (see [`record_decided`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// The run's first slot; its job, version and trigger are the run's.
    pub slot: Slot,
    /// The run's last slot: `slot.scheduled_at` for a run of one.
    pub last_at: DateTime<Utc>,
    /// The due slots of the run, its first and last included.
    pub slots: u64,
    /// `Skipped` or `Missed`.
    pub status: Status,
    pub reason: String,
}

impl Decided {
    /// One slot decided.
    pub fn one(slot: Slot, status: Status, reason: String) -> Self {
        Self { last_at: slot.scheduled_at, slot, slots: 1, status, reason }
    }
}

/// The `$1` (job ids), `$2` (slot times) and `$3` (job versions) arrays of
/// the statements that take slots.
pub(super) fn key_columns<'a>(slots: impl Iterator<Item = &'a Slot>) -> (Vec<Uuid>, Vec<DateTime<Utc>>, Vec<i64>) {
    let mut columns = (Vec::new(), Vec::new(), Vec::new());
    for s in slots {
        columns.0.push(s.job_id);
        columns.1.push(s.scheduled_at);
        columns.2.push(s.job_version);
    }
    columns
}

/// The claim, from a `slots` CTE and an extra condition on each slot: insert
/// each slot of a job that still exists, is not paused and has the version
/// the timer used; re-take a row only when it was skipped because an older
/// version of the job had pre-armed it.
macro_rules! claim_sql {
    ($slots:expr, $and:expr) => {
        concat!(
            "WITH ",
            $slots,
            ", claimed AS (
    INSERT INTO scheduled_jobs AS l
        (job_id, scheduled_at, fire_id, execution_id, trigger, status, scheduler_node, fired_at, job_version)
    SELECT s.job_id, s.scheduled_at, s.fire_id, s.execution_id, s.trigger, 'pending', $7, now(), s.job_version
    FROM slots s WHERE ",
            claimable_by!("s.job_id", "s.job_version", "s.scheduled_at"),
            $and,
            "
    ON CONFLICT (job_id, scheduled_at) DO UPDATE
        -- A re-take starts the slot afresh: every field a delivery or a
        -- cancellation wrote goes, or the first message (attempt 1) would
        -- meet a row that already counts an attempt and be dropped.
        SET fire_id = EXCLUDED.fire_id, status = 'pending', scheduler_node = EXCLUDED.scheduler_node,
            fired_at = EXCLUDED.fired_at, job_version = EXCLUDED.job_version, published_at = NULL,
            reason = NULL, finished_at = NULL, attempts = 0, worker_id = NULL, started_at = NULL,
            http_status = NULL, sqs_message_id = NULL, response_excerpt = NULL, error = NULL,
            next_attempt_at = NULL,
            history = l.history || jsonb_build_array(jsonb_build_object(
                'event', 'retaken', 'at', cronshard_instant(now()), 'version', EXCLUDED.job_version,
                'from_version', l.job_version, 'reason', l.reason))
        WHERE ",
            retakeable_by!("EXCLUDED.job_version"),
            "
    RETURNING l.job_id, l.scheduled_at, l.fire_id, l.execution_id, l.trigger, l.attempts
)
SELECT c.job_id, c.scheduled_at, c.fire_id, c.execution_id, c.trigger, c.attempts, j.spec, j.namespace
FROM claimed c JOIN jobs j ON j.id = c.job_id"
        )
    };
}

/// The claim of slots of versions without `max_runs`.
const CLAIM_SQL: &str = claim_sql!(
    "slots AS (
    SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[], $4::uuid[], $5::text[], $6::text[])
        AS s(job_id, scheduled_at, job_version, fire_id, execution_id, trigger)
)",
    ""
);

/// The claim of slots of versions with `max_runs` (`$8`): a slot is taken
/// only while the ledger's runs of the job (every version's, as
/// `ledger_counts_as_run` counts them) leave room for it and for the
/// batch's earlier slots of the same job that have no counted row yet. The
/// caller holds the jobs' run-cap locks, so the count is that of every
/// claim committed before.
const CLAIM_CAPPED_SQL: &str = claim_sql!(
    concat!(
        "input AS (
    SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[], $4::uuid[], $5::text[], $6::text[], $8::bigint[])
        AS s(job_id, scheduled_at, job_version, fire_id, execution_id, trigger, max_runs)
), slots AS (
    SELECT s.*,
           sum(CASE WHEN EXISTS (
                    SELECT 1 FROM scheduled_jobs l WHERE l.job_id = s.job_id AND l.scheduled_at = s.scheduled_at AND ",
        crate::ledger_counts_as_run!("l."),
        ") THEN 0 ELSE 1 END) OVER (PARTITION BY s.job_id ORDER BY s.scheduled_at) AS nth_new_run
    FROM input s
)"
    ),
    concat!(
        "
      AND s.nth_new_run + (SELECT count(*) FROM scheduled_jobs l WHERE l.job_id = s.job_id AND ",
        crate::ledger_counts_as_run!("l."),
        ") <= s.max_runs"
    )
);

/// Inserts ledger rows for the slots (or re-takes a row a change
/// cancelled) and returns the messages of those this node took, each with
/// the attempt its row expects, due at its slot. Slots go in lock order: a
/// conflicting row is locked as it is met. Idempotent: a slot another node
/// took simply conflicts and is left out, and so does a slot of a job whose
/// `max_runs` the ledger has used up.
///
/// `max_runs` is enforced here, not only by the nodes' run counts: a count a
/// node read from the ledger misses the runs other nodes have taken but not
/// claimed yet (an edit, a takeover, a catch-up while a claim is in
/// flight), and two nodes claiming different slots of one job each see the
/// other's as free. The claims of capped jobs therefore run in a
/// transaction that first takes each such job's run-cap lock.
pub async fn claim(
    client: &mut impl deadpool_postgres::GenericClient,
    node_id: &str,
    slots: &[Slot],
) -> Result<Vec<(FireMessage, u32)>, tokio_postgres::Error> {
    if slots.is_empty() {
        return Ok(Vec::new());
    }
    let (capped, free): (Vec<Slot>, Vec<Slot>) = slots.iter().cloned().partition(|s| s.max_runs.is_some());
    let mut claimed = claim_statement(&*client, CLAIM_SQL, node_id, &free).await?;
    if capped.is_empty() {
        return Ok(claimed);
    }
    let mut jobs: Vec<Uuid> = capped.iter().map(|s| s.job_id).collect();
    jobs.sort_unstable();
    jobs.dedup();
    let tx = client.transaction().await?;
    // In the order of the lock keys, so that two claimers never wait for each other in a cycle.
    tx.execute(
        "SELECT count(pg_advisory_xact_lock($1, k)) FROM (SELECT DISTINCT hashtext(j::text) AS k
                 FROM unnest($2::uuid[]) AS j ORDER BY k) keys",
        &[&RUN_CAP_LOCK_CLASS, &jobs],
    )
    .await?;
    claimed.extend(claim_statement(&tx, CLAIM_CAPPED_SQL, node_id, &capped).await?);
    tx.commit().await?;
    Ok(claimed)
}

/// First key of the per-job advisory locks that serialise the claims of a
/// job with `max_runs` (the second is a hash of the job id).
const RUN_CAP_LOCK_CLASS: i32 = 0x6372_6f6e;

/// Runs one of the claim statements for `slots` (none: no round trip).
async fn claim_statement(
    client: &impl deadpool_postgres::GenericClient,
    sql: &str,
    node_id: &str,
    slots: &[Slot],
) -> Result<Vec<(FireMessage, u32)>, tokio_postgres::Error> {
    if slots.is_empty() {
        return Ok(Vec::new());
    }
    let slots = crate::db::in_lock_order(slots, |s| (s.job_id, s.scheduled_at));
    let (job_ids, times, versions) = key_columns(slots.iter().copied());
    let fire_ids: Vec<Uuid> = slots.iter().map(|_| Uuid::now_v7()).collect();
    let exec_ids: Vec<String> = slots.iter().map(|s| execution_id(s.job_id, s.scheduled_at)).collect();
    let triggers: Vec<&str> = slots.iter().map(|s| s.trigger.as_str()).collect();
    let stmt = client.prepare_cached(sql).await?;
    let rows = if sql == CLAIM_CAPPED_SQL {
        let caps: Vec<i64> =
            slots.iter().map(|s| s.max_runs.map_or(i64::MAX, |m| m.min(i64::MAX as u64) as i64)).collect();
        client.query(&stmt, &[&job_ids, &times, &versions, &fire_ids, &exec_ids, &triggers, &node_id, &caps]).await?
    } else {
        client.query(&stmt, &[&job_ids, &times, &versions, &fire_ids, &exec_ids, &triggers, &node_id]).await?
    };
    let mut claimed = Vec::with_capacity(rows.len());
    for row in rows {
        let job_id: Uuid = row.get("job_id");
        let spec: JobSpec = match serde_json::from_value(row.get("spec")) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(job.id = %job_id, error = %format!("{e:#}"), "claimed a job whose spec does not parse");
                continue;
            }
        };
        let scheduled_at: DateTime<Utc> = row.get("scheduled_at");
        claimed.push(FireMessage::next_for_row(super::row_to_publish(&row), spec, scheduled_at));
    }
    Ok(claimed)
}

/// Records slots decided without firing: a run of one slot as a ledger
/// row, a longer run as one `decided_ranges` row (after an outage a
/// job's decided slots are one run, and writing them one row each made
/// the cluster's restart wait for the ledger). A slot or run that has a
/// row (another owner decided or fired it) is left alone, and so is one
/// its version may no longer claim. Returns the slots recorded.
pub async fn record_decided(
    client: &impl deadpool_postgres::GenericClient,
    node_id: &str,
    decided: &[Decided],
) -> Result<u64, tokio_postgres::Error> {
    let (single, runs): (Vec<&Decided>, Vec<&Decided>) = decided.iter().partition(|d| d.slots == 1);
    let mut recorded = 0;
    if !single.is_empty() {
        recorded += record_slots(client, node_id, &single).await?;
    }
    if !runs.is_empty() {
        recorded += record_runs(client, node_id, &runs).await?;
    }
    Ok(recorded)
}

/// Ledger rows for single decided slots (trigger `misfire` or the slot's).
async fn record_slots(
    client: &impl deadpool_postgres::GenericClient,
    node_id: &str,
    rows: &[&Decided],
) -> Result<u64, tokio_postgres::Error> {
    // Both owners of a job record the same decisions at about the same
    // time: in lock order, two such inserts wait for each other instead of
    // deadlocking (each deadlock failed a whole batch of decisions).
    let rows = crate::db::in_lock_order(rows, |r| (r.slot.job_id, r.slot.scheduled_at));
    let (job_ids, times, versions) = key_columns(rows.iter().map(|r| &r.slot));
    let fire_ids: Vec<Uuid> = rows.iter().map(|_| Uuid::now_v7()).collect();
    let exec_ids: Vec<String> = rows.iter().map(|r| execution_id(r.slot.job_id, r.slot.scheduled_at)).collect();
    let statuses: Vec<&str> = rows.iter().map(|r| r.status.as_str()).collect();
    let reasons: Vec<&str> = rows.iter().map(|r| r.reason.as_str()).collect();
    let triggers: Vec<&str> = rows.iter().map(|r| r.slot.trigger.as_str()).collect();
    let statement = client
        .prepare_cached(concat!(
            r#"INSERT INTO scheduled_jobs
                     (job_id, scheduled_at, fire_id, execution_id, trigger, status, reason, scheduler_node, finished_at, job_version)
                 SELECT s.job_id, s.scheduled_at, s.fire_id, s.execution_id, s.trigger, s.status, s.reason, $8, now(), s.job_version
                 FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[], $4::uuid[], $5::text[], $6::text[], $7::text[], $9::text[])
                      AS s(job_id, scheduled_at, job_version, fire_id, execution_id, status, reason, trigger)
                 WHERE "#,
            claimable_by!("s.job_id", "s.job_version", "s.scheduled_at"),
            r#"
                 ON CONFLICT (job_id, scheduled_at) DO NOTHING"#
        ))
        .await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 9] =
        [&job_ids, &times, &versions, &fire_ids, &exec_ids, &statuses, &reasons, &node_id, &triggers];
    crate::db::retry_deadlock(|| client.execute(&statement, &params)).await
}

/// One `decided_ranges` row per run. The version must be the one in force
/// at both ends of the run: versions only succeed each other, so it is then
/// the one in force at every slot between them.
async fn record_runs(
    client: &impl deadpool_postgres::GenericClient,
    node_id: &str,
    runs: &[&Decided],
) -> Result<u64, tokio_postgres::Error> {
    let runs = crate::db::in_lock_order(runs, |r| (r.slot.job_id, r.slot.scheduled_at));
    let (job_ids, firsts, versions) = key_columns(runs.iter().map(|r| &r.slot));
    let lasts: Vec<DateTime<Utc>> = runs.iter().map(|r| r.last_at).collect();
    let counts: Vec<i64> = runs.iter().map(|r| r.slots.min(i64::MAX as u64) as i64).collect();
    let statuses: Vec<&str> = runs.iter().map(|r| r.status.as_str()).collect();
    let reasons: Vec<&str> = runs.iter().map(|r| r.reason.as_str()).collect();
    let statement = client
        .prepare_cached(concat!(
            r#"INSERT INTO decided_ranges (job_id, first_at, last_at, slots, job_version, status, reason, scheduler_node)
                 SELECT s.job_id, s.first_at, s.last_at, s.slots, s.job_version, s.status, s.reason, $8
                 FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[], $4::timestamptz[], $5::bigint[], $6::text[], $7::text[])
                      AS s(job_id, first_at, job_version, last_at, slots, status, reason)
                 WHERE "#,
            claimable_by!("s.job_id", "s.job_version", "s.first_at"),
            " AND ",
            claimable_by!("s.job_id", "s.job_version", "s.last_at"),
            r#"
                 ON CONFLICT (job_id, first_at) DO NOTHING
                 RETURNING slots"#
        ))
        .await?;
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] =
        [&job_ids, &firsts, &versions, &lasts, &counts, &statuses, &reasons, &node_id];
    let rows = crate::db::retry_deadlock(|| client.query(&statement, &params)).await?;
    Ok(rows.iter().map(|r| r.get::<_, i64>(0) as u64).sum())
}

/// Where a slot stands for a claimer, as [`check_slots`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// No ledger row, or one the claimer may re-take: claim it.
    Open,
    /// A row of an older version of the job that is not final yet (a worker
    /// holds it armed, or its message is on its way): once delivered it
    /// stands; once cancelled it is the claimer's to re-take. Ask again.
    HeldByOlderVersion,
    /// Claimed, delivered or decided for good: nothing to do.
    Settled,
}

/// Reads where each slot stands. A read, because the claim's `ON CONFLICT
/// DO UPDATE` locks every conflicting row even where its `WHERE` declines
/// the update: claiming every lost slot (half of all slots, with two
/// owners) cost a row lock each, on rows the workers were writing at that
/// moment, and deadlocked with them.
pub async fn check_slots(
    client: &impl deadpool_postgres::GenericClient,
    slots: &[Slot],
) -> Result<Vec<SlotState>, tokio_postgres::Error> {
    if slots.is_empty() {
        return Ok(Vec::new());
    }
    let stmt = client
        .prepare_cached(concat!(
            "SELECT b.i, CASE WHEN ",
            held_by_older_version!("b.job_version"),
            " IS TRUE THEN 1 ELSE 2 END
             FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[])
                  WITH ORDINALITY AS b(job_id, scheduled_at, job_version, i)
             JOIN scheduled_jobs l ON l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at
             WHERE ",
            retakeable_by!("b.job_version"),
            " IS NOT TRUE"
        ))
        .await?;
    let (job_ids, times, versions) = key_columns(slots.iter());
    let mut states = vec![SlotState::Open; slots.len()];
    for row in client.query(&stmt, &[&job_ids, &times, &versions]).await? {
        let (i, state): (i64, i32) = (row.get(0), row.get(1));
        states[i as usize - 1] = if state == 1 { SlotState::HeldByOlderVersion } else { SlotState::Settled };
    }
    Ok(states)
}
