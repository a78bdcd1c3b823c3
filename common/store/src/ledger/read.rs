//! Reads of the ledger: executions as the API shows them, and what the
//! scheduler needs to know of the slots a job has already had.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tokio_postgres::Row;
use uuid::Uuid;

use super::{Status, Trigger};
use domain::execution::{serialize_instant, serialize_opt_instant};

/// One ledger row: what became of one slot of a job.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Execution {
    pub job_id: Uuid,
    #[serde(serialize_with = "serialize_instant")]
    pub scheduled_at: DateTime<Utc>,
    /// `{job_id}@{scheduled_at}`, or with `#manual` for a manual trigger.
    pub execution_id: String,
    pub fire_id: Uuid,
    pub trigger: Trigger,
    pub status: Status,
    pub attempts: i32,
    pub scheduler_node: Option<String>,
    pub worker_id: Option<String>,
    #[serde(serialize_with = "serialize_opt_instant")]
    pub fired_at: Option<DateTime<Utc>>,
    /// When the broker confirmed the message. Stays null when a worker had
    /// already started the row by then (the stamp only serves the outbox
    /// sweep, which looks at pending rows).
    #[serde(serialize_with = "serialize_opt_instant")]
    pub published_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "serialize_opt_instant")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(serialize_with = "serialize_opt_instant")]
    pub finished_at: Option<DateTime<Utc>>,
    pub http_status: Option<i32>,
    pub sqs_message_id: Option<String>,
    /// The first bytes of the latest answer's body, secrets masked.
    pub response_excerpt: Option<String>,
    /// The latest answer's kept headers (`content-type`, `location`,
    /// `retry-after`, request and trace ids), when it had any. Only on a
    /// single execution, not in listings.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub response_headers: Option<Value>,
    pub error: Option<String>,
    /// Why the slot was skipped or missed (paused, deleted, superseded, the
    /// misfire policy), or `replay`.
    pub reason: Option<String>,
    /// While `retrying`: when the next attempt is due.
    #[serde(serialize_with = "serialize_opt_instant", skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// While `running` after a 202 of an async-completion job: until when
    /// the attempt awaits its receiver's report.
    #[serde(serialize_with = "serialize_opt_instant", skip_serializing_if = "Option::is_none")]
    pub awaiting_until: Option<DateTime<Utc>>,
    /// Present when the entry is (a slot of) a decided run: consecutive
    /// slots of the job recorded together without firing (an outage's
    /// misfires). A listing shows a run once, at its first slot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<DecidedRun>,
}

/// Consecutive slots of a job decided together without firing: every due
/// slot from `first_at` to `last_at` that has no row of its own.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecidedRun {
    #[serde(serialize_with = "serialize_instant")]
    pub first_at: DateTime<Utc>,
    #[serde(serialize_with = "serialize_instant")]
    pub last_at: DateTime<Utc>,
    /// Due slots in the run, the first and last included.
    pub slots: i64,
}

/// A ledger row with its history.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionWithHistory {
    #[serde(flatten)]
    pub execution: Execution,
    /// What happened to the slot, oldest first. Each entry has `event`:
    /// `attempt` (`attempt`, `worker_id`, `started_at`, `finished_at`,
    /// `outcome`, `http_status`, `sqs_message_id`, `error`, `redelivered`,
    /// and when present `rule`: the delivery contract's rule that decided
    /// and how the next wait was chosen, `response_headers`,
    /// `next_attempt_at`),
    /// `skipped` (`at`, `reason`), `recovered` (`at`), `released` (`at`,
    /// `attempt`, `worker_id`: a worker gave back an attempt it did not
    /// deliver), `waiting` (`at`, `reason`, `destination`, `since`,
    /// `worker_id`, `attempt`: the delivery waits, without spending the
    /// attempt, for its destination host, e.g. `destination circuit open`;
    /// once per outage), `gave_up` (the same fields: it waited past the
    /// slot's retry horizon and was parked as failed without the attempt),
    /// `retaken`, `stranded` or `replay` (`at`), `decided` (`at`, `reason`:
    /// the slot is one of a decided run's, see `Execution::run`).
    pub history: Vec<serde_json::Map<String, Value>>,
}

impl Execution {
    /// From a `SELECT *` of the table, or an entry of [`list`] (where a
    /// decided run has `run_last_at` and `run_slots`).
    pub(super) fn from_row(r: &Row) -> Self {
        let job_id: Uuid = r.get("job_id");
        let scheduled_at: DateTime<Utc> = r.get("scheduled_at");
        let run_last_at: Option<DateTime<Utc>> = r.try_get("run_last_at").ok().flatten();
        Execution {
            job_id,
            scheduled_at,
            execution_id: r
                .get::<_, Option<String>>("execution_id")
                .unwrap_or_else(|| domain::execution::execution_id(job_id, scheduled_at)),
            fire_id: r.get::<_, Option<Uuid>>("fire_id").unwrap_or_else(Uuid::nil),
            trigger: r.get("trigger"),
            status: r.get("status"),
            attempts: r.get("attempts"),
            scheduler_node: r.get("scheduler_node"),
            worker_id: r.get("worker_id"),
            fired_at: r.get("fired_at"),
            published_at: r.get("published_at"),
            started_at: r.get("started_at"),
            finished_at: r.get("finished_at"),
            http_status: r.get("http_status"),
            sqs_message_id: r.get("sqs_message_id"),
            response_excerpt: r.get("response_excerpt"),
            response_headers: r.try_get("response_headers").ok().flatten(),
            // Redacted again on the way out: rows written before the worker
            // redacted its errors may hold a callback's credentials.
            error: r.get::<_, Option<String>>("error").map(|e| domain::redact::text(&e)),
            reason: r.get("reason"),
            next_attempt_at: r.try_get("next_attempt_at").ok().flatten(),
            awaiting_until: r.try_get("awaiting_until").ok().flatten(),
            run: run_last_at.map(|last_at| DecidedRun {
                first_at: scheduled_at,
                last_at,
                slots: r.try_get("run_slots").unwrap_or(0),
            }),
        }
    }
}

impl ExecutionWithHistory {
    pub(super) fn from_row(r: &Row) -> Self {
        ExecutionWithHistory {
            execution: Execution::from_row(r),
            history: serde_json::from_value::<Vec<serde_json::Map<String, Value>>>(r.get("history"))
                .unwrap_or_default()
                .into_iter()
                .map(|mut entry| {
                    if let Some(Value::String(error)) = entry.get_mut("error") {
                        *error = domain::redact::text(error);
                    }
                    entry
                })
                .collect(),
        }
    }
}

/// Which executions a listing takes (every field optional); `from` is
/// inclusive, `to` exclusive, on the slot's instant.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only rows of jobs in these namespaces (None = every namespace).
    pub namespaces: Option<Vec<String>>,
    pub job_id: Option<Uuid>,
    pub status: Option<Status>,
    pub from: Option<DateTime<Utc>>,
    pub to: Option<DateTime<Utc>>,
}

/// Up to `limit` executions matching `filter`, newest first, before the
/// cursor (the last item of the previous page: its slot, and its job for a
/// listing across jobs); and whether there are more.
pub async fn list(
    client: &impl deadpool_postgres::GenericClient,
    filter: &Filter,
    cursor: Option<(DateTime<Utc>, Option<Uuid>)>,
    limit: i64,
) -> Result<(Vec<Execution>, bool), tokio_postgres::Error> {
    let status = filter.status.map(Status::as_str);
    let (cursor_at, cursor_job) = (cursor.map(|c| c.0), cursor.and_then(|c| c.1));
    // With a job, the order is the slot's; across jobs, (slot, job).
    let rows = client
        .query(
            "SELECT * FROM (
                 SELECT job_id, scheduled_at, execution_id, fire_id, trigger, status, attempts, scheduler_node,
                        worker_id, fired_at, published_at, started_at, finished_at, http_status, sqs_message_id,
                        response_excerpt, error, reason, NULL::timestamptz AS run_last_at, NULL::bigint AS run_slots
                 FROM scheduled_jobs
                 UNION ALL
                 SELECT job_id, first_at, NULL::text, NULL::uuid, 'misfire', status, 0, scheduler_node,
                        NULL::text, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, recorded_at, NULL::integer,
                        NULL::text, NULL::text, NULL::text, reason, last_at, slots
                 FROM decided_ranges) e
             WHERE ($1::text IS NULL OR status = $1) AND ($2::uuid IS NULL OR job_id = $2)
               AND ($3::timestamptz IS NULL OR scheduled_at >= $3) AND ($4::timestamptz IS NULL OR scheduled_at < $4)
               AND ($5::timestamptz IS NULL
                    OR CASE WHEN $6::uuid IS NULL THEN scheduled_at < $5 ELSE (scheduled_at, job_id) < ($5, $6) END)
               AND ($8::text[] IS NULL OR job_id IN (SELECT id FROM jobs WHERE namespace = ANY($8)))
             ORDER BY scheduled_at DESC, job_id DESC LIMIT $7",
            &[
                &status,
                &filter.job_id,
                &filter.from,
                &filter.to,
                &cursor_at,
                &cursor_job,
                &(limit + 1),
                &filter.namespaces,
            ],
        )
        .await?;
    let more = rows.len() as i64 > limit;
    Ok((rows.iter().take(limit as usize).map(Execution::from_row).collect(), more))
}

/// The execution of one slot, with its history.
pub async fn get(
    client: &impl deadpool_postgres::GenericClient,
    job_id: Uuid,
    at: DateTime<Utc>,
) -> Result<Option<ExecutionWithHistory>, tokio_postgres::Error> {
    Ok(client
        .query_opt("SELECT * FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2", &[&job_id, &at])
        .await?
        .as_ref()
        .map(ExecutionWithHistory::from_row))
}

/// The slot `at` as a decided run (`decided_ranges`) records it, shown as
/// the row it stands for: the run's status and reason, trigger `misfire`,
/// the run itself in `run`, and one history entry `decided` (`at`,
/// `reason`). A run covers only its job's due slots: the
/// caller checks that `at` is one, and a slot's own row, when there is
/// one, wins over the run.
pub async fn decided_run_at(
    client: &impl deadpool_postgres::GenericClient,
    job_id: Uuid,
    at: DateTime<Utc>,
) -> Result<Option<ExecutionWithHistory>, tokio_postgres::Error> {
    let run = client
        .query_opt(
            "SELECT * FROM decided_ranges WHERE job_id = $1 AND first_at <= $2 AND last_at >= $2
             ORDER BY first_at DESC LIMIT 1",
            &[&job_id, &at],
        )
        .await?;
    Ok(run.map(|r| {
        let recorded_at: DateTime<Utc> = r.get("recorded_at");
        let mut entry = serde_json::Map::new();
        entry.insert("event".into(), "decided".into());
        entry.insert("at".into(), Value::String(domain::execution::format_instant(recorded_at)));
        entry.insert("reason".into(), Value::String(r.get("reason")));
        ExecutionWithHistory {
            execution: Execution {
                job_id,
                scheduled_at: at,
                execution_id: domain::execution::execution_id(job_id, at),
                fire_id: Uuid::nil(),
                trigger: Trigger::Misfire,
                status: r.get("status"),
                attempts: 0,
                scheduler_node: r.get("scheduler_node"),
                worker_id: None,
                fired_at: None,
                published_at: None,
                started_at: None,
                finished_at: Some(recorded_at),
                http_status: None,
                sqs_message_id: None,
                response_excerpt: None,
                response_headers: None,
                error: None,
                reason: r.get("reason"),
                next_attempt_at: None,
                awaiting_until: None,
                run: Some(DecidedRun { first_at: r.get("first_at"), last_at: r.get("last_at"), slots: r.get("slots") }),
            },
            history: vec![entry],
        }
    }))
}

/// Slots of the job before `at` that count towards `max_runs`, as the
/// scheduler counts them.
pub async fn runs_before(
    client: &impl deadpool_postgres::GenericClient,
    job_id: Uuid,
    at: DateTime<Utc>,
) -> Result<u64, tokio_postgres::Error> {
    let n: i64 = client
        .query_one(
            concat!(
                "SELECT count(*) FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at < $2 AND ",
                counts_as_run!()
            ),
            &[&job_id, &at],
        )
        .await?
        .get(0);
    Ok(n as u64)
}

/// SQL expression on a row of `jobs`: the runs its job has used, for a job
/// with `max_runs` (NULL otherwise). Spans every ledger partition, so a
/// statement that does not need it (a create) should not plan it.
#[macro_export]
macro_rules! ledger_runs_used_by_jobs_row {
    () => {
        concat!(
            "CASE WHEN jobs.spec->'schedule'->'max_runs' IS NOT NULL
                  THEN (SELECT count(*) FROM scheduled_jobs s WHERE s.job_id = jobs.id AND ",
            $crate::ledger_counts_as_run!("s."),
            ") END"
        )
    };
}

/// What the ledger holds of a job's slots since `since` (schedule and
/// misfire slots, not manual fires), as a new owner's timer needs it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Span {
    /// The latest slot taken care of (claimed or decided for the current
    /// version).
    pub last_slot: Option<DateTime<Utc>>,
    /// The earliest slot not taken care of: a row of an older version that
    /// is not final, or one cancelled for the version now in force. The
    /// slot is this version's to claim (or re-take) once that row is
    /// decided, so the timer starts there even when a later slot is
    /// already claimed (a previous owner claims ahead).
    pub unsettled_from: Option<DateTime<Utc>>,
    /// Every slot with a row (of any kind) in the `window` before
    /// `last_slot`, ascending: what a load compares with the schedule to
    /// find a slot left without a row.
    pub slots_before_last: Vec<DateTime<Utc>>,
    /// The decided runs (`decided_ranges`: first and last slot) that reach
    /// into that window.
    pub runs_before_last: Vec<(DateTime<Utc>, DateTime<Utc>)>,
}

impl Span {
    /// Whether the ledger holds a row or a decided run for `slot` (only
    /// slots inside the window asked for are known).
    pub fn has_row_before_last(&self, slot: DateTime<Utc>) -> bool {
        self.slots_before_last.binary_search(&slot).is_ok()
            || self.runs_before_last.iter().any(|(first, last)| *first <= slot && slot <= *last)
    }
}

/// The [`Span`] of each job, in one query pruned to the partitions since
/// `since`. Per job a few index probes, not a read of its rows: after an
/// outage the whole cluster loads at once against a ledger of millions of
/// rows, and an aggregate over every row of the lookback took tens of
/// seconds there.
pub async fn spans(
    client: &impl deadpool_postgres::GenericClient,
    job_ids: &[Uuid],
    since: DateTime<Utc>,
    window: chrono::TimeDelta,
) -> Result<HashMap<Uuid, Span>, tokio_postgres::Error> {
    let window_secs = window.as_seconds_f64();
    let rows = client
        .query(
            concat!(
                "SELECT j.id, t.last_slot, u.unsettled_from, coalesce(w.slots, '{}') AS slots,
                        coalesce(r.firsts, '{}') AS run_firsts, coalesce(r.lasts, '{}') AS run_lasts
                 FROM jobs j
                 LEFT JOIN LATERAL (
                     SELECT l.scheduled_at AS last_row FROM scheduled_jobs l
                     WHERE l.job_id = j.id AND l.scheduled_at >= $2 AND l.trigger NOT IN ",
                crate::ledger_on_request!(),
                "
                       AND NOT (",
                held_by_older_version!("j.version"),
                " OR ",
                retakeable_by!("j.version"),
                ")
                     ORDER BY l.scheduled_at DESC LIMIT 1) s ON true
                 LEFT JOIN LATERAL (
                     -- Decided runs are final: taken care of whatever their version.
                     SELECT max(d.last_at) AS last_run FROM decided_ranges d
                     WHERE d.job_id = j.id AND d.last_at >= $2) dr ON true
                 CROSS JOIN LATERAL (SELECT greatest(s.last_row, dr.last_run) AS last_slot) t
                 LEFT JOIN LATERAL (
                     -- Only a changed job has rows of an older version; the
                     -- first condition spares the others a read of their rows.
                     SELECT min(l.scheduled_at) AS unsettled_from FROM scheduled_jobs l
                     WHERE j.version > 1 AND l.job_id = j.id AND l.scheduled_at >= $2 AND l.trigger NOT IN ",
                crate::ledger_on_request!(),
                "
                       AND (",
                held_by_older_version!("j.version"),
                " OR ",
                retakeable_by!("j.version"),
                ")) u ON true
                 LEFT JOIN LATERAL (
                     SELECT array_agg(l.scheduled_at ORDER BY l.scheduled_at) AS slots FROM scheduled_jobs l
                     WHERE l.job_id = j.id AND l.scheduled_at < t.last_slot
                       AND l.scheduled_at >= greatest(t.last_slot - make_interval(secs => $3), $2)) w ON true
                 LEFT JOIN LATERAL (
                     SELECT array_agg(d.first_at ORDER BY d.first_at) AS firsts, array_agg(d.last_at ORDER BY d.first_at) AS lasts
                     FROM decided_ranges d
                     WHERE d.job_id = j.id AND d.first_at < t.last_slot
                       AND d.last_at >= greatest(t.last_slot - make_interval(secs => $3), $2)) r ON true
                 WHERE j.id = ANY($1) AND (t.last_slot IS NOT NULL OR u.unsettled_from IS NOT NULL)"
            ),
            &[&job_ids, &since, &window_secs],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let firsts: Vec<DateTime<Utc>> = r.get("run_firsts");
            let lasts: Vec<DateTime<Utc>> = r.get("run_lasts");
            let span = Span {
                last_slot: r.get("last_slot"),
                unsettled_from: r.get("unsettled_from"),
                slots_before_last: r.get("slots"),
                runs_before_last: firsts.into_iter().zip(lasts).collect(),
            };
            (r.get("id"), span)
        })
        .collect())
}

/// A job's runs towards `max_runs`, as the ledger still holds them (its
/// retention bounds the history).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Runs {
    pub total: u64,
    /// The slots of those runs due at or after the job's last change.
    pub since_change: Vec<DateTime<Utc>>,
}

/// The [`Runs`] of each job that has any, in one query.
pub async fn runs(
    client: &impl deadpool_postgres::GenericClient,
    job_ids: &[Uuid],
) -> Result<HashMap<Uuid, Runs>, tokio_postgres::Error> {
    let rows = client
        .query(
            concat!(
                "SELECT l.job_id, count(*),
                        coalesce(array_agg(l.scheduled_at) FILTER (WHERE l.scheduled_at >= j.updated_at), '{}')
                 FROM scheduled_jobs l JOIN jobs j ON j.id = l.job_id
                 WHERE l.job_id = ANY($1) AND ",
                counts_as_run!(),
                " GROUP BY l.job_id"
            ),
            &[&job_ids],
        )
        .await?;
    Ok(rows.iter().map(|r| (r.get(0), Runs { total: r.get::<_, i64>(1) as u64, since_change: r.get(2) })).collect())
}
