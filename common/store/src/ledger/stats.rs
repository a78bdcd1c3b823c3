//! Aggregates over the ledger for an operator's console: failed executions
//! grouped by error, each job's outcomes over a period, and delivery
//! lateness per minute. Every read is bounded: the failures by a cap on the
//! rows read (newest first, through the `(status, scheduled_at)` index), the
//! outcomes by the primary key range of each job, and the lateness by a
//! sample of the window's rows once it holds more than [`LATENESS_EXACT_MAX`].
//!
//! **Lateness** is when a slot's first attempt started against the instant
//! it was due: its scheduled time plus, for a job with `jitter_ms`, the
//! slot's jitter offset (computed here, as the scheduler does, from the
//! job id and the slot). A row armed ahead of its due instant records the
//! due instant as its start, so an on-time delivery counts 0 ms.
//!
//! **Sampling.** Migration V11 keeps a partial index of the rows whose
//! [`SAMPLE_BUCKET`] (a hash of the execution id, 0..65535) is below
//! [`SAMPLE_BUCKETS_INDEXED`]: a fixed pseudo-random 1/8 of all rows,
//! independent of the slot's time, job or lateness. Reading the buckets
//! `0..k` of a window through it is a uniform sample of rate `k / 65536`
//! that costs index descents per bucket plus one heap fetch per sampled
//! row, whatever the window holds. The rate is chosen from the window's
//! count in the first 64 buckets (1/1024 of the rows).

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use uuid::Uuid;

use super::Status;

/// SQL: a row's sample bucket, a stable hash of its execution id (the
/// expression of the V11 index, spelled identically so the planner uses it).
macro_rules! ledger_sample_bucket {
    () => {
        "(hashtext(l.execution_id) & 65535)"
    };
}
pub const SAMPLE_BUCKET: &str = ledger_sample_bucket!();
/// How many buckets of the 65536 the V11 partial index holds (1/8).
pub const SAMPLE_BUCKETS_INDEXED: i32 = 8192;
/// Buckets counted to estimate a window's size (1/1024 of its rows).
const PROBE_BUCKETS: i32 = 64;
/// A window with up to about this many delivered rows is read whole (a
/// read costs about 11 µs a row on the benchmark machine: see
/// docs/benchmarks.md, "Console API").
pub const LATENESS_EXACT_MAX: u64 = 30_000;
/// A larger one is sampled down to about this many rows (at most 1/8 of it).
pub const LATENESS_SAMPLE_TARGET: u64 = 30_000;

/// SQL: the rows `l` of the buckets in the array `$n` within `[$from, $to)`,
/// through the V11 index: one index range per bucket. With `= ANY` of a
/// few hundred buckets, or a plain lateral join on them, the planner
/// preferred a parallel scan of the whole partition (2.6 s against an hour
/// of 7.2 million rows); `OFFSET 0` keeps the lateral subquery from being
/// flattened, so it runs once per bucket. The index predicate is repeated
/// literally so the planner knows the index covers the query.
macro_rules! sampled_rows {
    ($n:literal, $from:literal, $to:literal) => {
        concat!(
            "unnest($",
            $n,
            "::int[]) AS b(bucket) CROSS JOIN LATERAL (SELECT * FROM scheduled_jobs l WHERE ",
            ledger_sample_bucket!(),
            " = b.bucket AND ",
            ledger_sample_bucket!(),
            " < 8192",
            " AND l.scheduled_at >= $",
            $from,
            " AND l.scheduled_at < $",
            $to,
            " OFFSET 0) l"
        )
    };
}

/// SQL: when a row's first attempt started (its `started_at` while it is on
/// its first attempt; the first attempt entry of its history after a retry
/// or replay). NULL for a row no attempt has started, and for one armed
/// ahead whose due instant has not come.
macro_rules! first_started_at {
    () => {
        "(CASE WHEN l.attempts <= 1 THEN l.started_at
               ELSE coalesce((SELECT (e->>'started_at')::timestamptz FROM jsonb_array_elements(l.history) e
                              WHERE e->>'event' = 'attempt' ORDER BY (e->>'attempt')::int LIMIT 1), l.started_at)
          END)"
    };
}

/// SQL: the row was delivered at least once, or is being delivered.
macro_rules! attempted {
    () => {
        "l.attempts >= 1 AND l.status IN ('running', 'retrying', 'succeeded', 'failed')"
    };
}

/// SQL: the job of row `l` is in the namespaces `$n` (NULL = every one).
/// A scalar subquery: one primary key lookup per row read, where a
/// semi-join would hash every job of the namespaces (200,000 jobs: 0.5 s).
macro_rules! in_namespaces {
    ($n:literal) => {
        concat!(
            "($",
            $n,
            "::text[] IS NULL OR (SELECT j.namespace = ANY($",
            $n,
            ") FROM jobs j WHERE j.id = l.job_id))"
        )
    };
}

/// Lateness of one slot in milliseconds: first start against the due instant.
fn lateness_ms(job_id: Uuid, scheduled_at: DateTime<Utc>, first_start: DateTime<Utc>, jitter_ms: i64) -> i64 {
    let due = scheduled_at + domain::schedule::jitter_offset(job_id, scheduled_at, jitter_ms.max(0) as u64);
    (first_start - due).num_milliseconds()
}

/// Delivery lateness in one minute of scheduled time.
#[derive(Debug, Clone, PartialEq)]
pub struct LatenessMinute {
    pub minute: DateTime<Utc>,
    /// Slots whose first attempt started (an estimate when sampled).
    pub deliveries: u64,
    /// Of those, the rows read (all of them unless sampled).
    pub sampled: u64,
    pub p50_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
}

/// Lateness per minute of a window, and how it was read.
#[derive(Debug, Clone, PartialEq)]
pub struct Lateness {
    pub minutes: Vec<LatenessMinute>,
    /// The share of the window's rows read: 1 = all of them.
    pub sample_rate: f64,
    /// Rows read.
    pub sample_size: u64,
}

/// Nearest-rank percentile of an ascending slice.
fn percentile(sorted: &[i64], p: f64) -> i64 {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Delivery lateness per minute of scheduled time in `[from, to)`, of the
/// jobs in `namespaces` (None = every namespace). Minutes without a
/// delivery are left out.
pub async fn lateness(
    client: &impl deadpool_postgres::GenericClient,
    namespaces: Option<&[String]>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Lateness, tokio_postgres::Error> {
    let namespaces = namespaces.map(<[String]>::to_vec);
    let probe: Vec<i32> = (0..PROBE_BUCKETS).collect();
    let probed: i64 = client
        .query_one(
            concat!(
                "SELECT count(*) FROM ",
                sampled_rows!(1, 2, 3),
                " WHERE ",
                attempted!(),
                " AND ",
                in_namespaces!(4)
            ),
            &[&probe, &from, &to, &namespaces],
        )
        .await?
        .get(0);
    let estimate = probed as u64 * (65_536 / PROBE_BUCKETS) as u64;
    let buckets = if estimate <= LATENESS_EXACT_MAX {
        None
    } else {
        // At least one bucket (rate 1/65536), at most what the index holds.
        let k = (LATENESS_SAMPLE_TARGET as f64 * 65_536.0 / estimate as f64).ceil() as i32;
        Some(k.clamp(1, SAMPLE_BUCKETS_INDEXED))
    };
    // The job's jitter, NULL for a job outside the namespaces: one primary
    // key lookup per row (see `in_namespaces`; `OFFSET 0` keeps the planner
    // from evaluating it twice, once for the filter).
    let select = concat!(
        "SELECT * FROM (SELECT l.job_id, l.scheduled_at, ",
        first_started_at!(),
        " AS first_start,
                (SELECT coalesce((j.spec->>'jitter_ms')::bigint, 0) FROM jobs j
                 WHERE j.id = l.job_id AND ($3::text[] IS NULL OR j.namespace = ANY($3))) AS jitter_ms
         FROM {ROWS} AND ",
        attempted!(),
        " OFFSET 0) s WHERE jitter_ms IS NOT NULL"
    );
    let rows = match buckets {
        None => {
            let sql = select.replace("{ROWS}", "scheduled_jobs l WHERE l.scheduled_at >= $1 AND l.scheduled_at < $2");
            client.query(&sql, &[&from, &to, &namespaces]).await?
        }
        Some(k) => {
            let sampled: Vec<i32> = (0..k).collect();
            let sql = select.replace("{ROWS}", concat!(sampled_rows!(4, 1, 2), " WHERE true"));
            client.query(&sql, &[&from, &to, &namespaces, &sampled]).await?
        }
    };
    let rate = buckets.map_or(1.0, |k| k as f64 / 65_536.0);
    let now = Utc::now();
    let mut per_minute: std::collections::BTreeMap<DateTime<Utc>, Vec<i64>> = Default::default();
    let mut size = 0u64;
    for r in &rows {
        let Some(first_start) = r.get::<_, Option<DateTime<Utc>>>("first_start").filter(|t| *t <= now) else {
            continue;
        };
        let (job_id, at): (Uuid, DateTime<Utc>) = (r.get("job_id"), r.get("scheduled_at"));
        size += 1;
        let minute = at.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(at);
        per_minute.entry(minute).or_default().push(lateness_ms(job_id, at, first_start, r.get("jitter_ms")));
    }
    let minutes = per_minute
        .into_iter()
        .map(|(minute, mut values)| {
            values.sort_unstable();
            let n = values.len() as u64;
            LatenessMinute {
                minute,
                deliveries: (n as f64 / rate).round() as u64,
                sampled: n,
                p50_ms: percentile(&values, 0.50),
                p99_ms: percentile(&values, 0.99),
                max_ms: values[values.len() - 1],
            }
        })
        .collect();
    Ok(Lateness { minutes, sample_rate: rate, sample_size: size })
}

/// Failed executions with the same error text.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureGroup {
    /// The error (redacted); None for failures recorded without one.
    pub error: Option<String>,
    pub count: u64,
    /// Distinct jobs among them.
    pub jobs: u64,
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
    /// The latest of them.
    pub example: (Uuid, DateTime<Utc>, String),
}

/// Failures of a window grouped by error, and whether the read was capped.
#[derive(Debug, Clone, PartialEq)]
pub struct Failures {
    /// Most frequent first (ties by error text).
    pub groups: Vec<FailureGroup>,
    /// Groups beyond `max_groups` left out.
    pub more_groups: u64,
    pub rows_read: u64,
    /// More failed rows than `max_rows` in the window: only the newest
    /// `max_rows` were grouped.
    pub capped: bool,
}

/// The failed executions of slots in `[from, to)` of the jobs in
/// `namespaces`, grouped by error text, most frequent first: at most
/// `max_groups` groups over the newest `max_rows` failed rows.
pub async fn failures(
    client: &impl deadpool_postgres::GenericClient,
    namespaces: Option<&[String]>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    max_rows: i64,
    max_groups: usize,
) -> Result<Failures, tokio_postgres::Error> {
    let namespaces = namespaces.map(<[String]>::to_vec);
    let failed = Status::Failed.as_str();
    let rows = client
        .query(
            concat!(
                "WITH f AS (SELECT l.job_id, l.scheduled_at, l.execution_id, l.error FROM scheduled_jobs l
                            WHERE l.status = $1 AND l.scheduled_at >= $2 AND l.scheduled_at < $3 AND ",
                in_namespaces!(5),
                "           ORDER BY l.scheduled_at DESC LIMIT $4::bigint + 1),
                      kept AS (SELECT * FROM f ORDER BY scheduled_at DESC LIMIT $4)
                 SELECT error, count(*) AS n, count(DISTINCT job_id) AS jobs,
                        min(scheduled_at) AS first_at, max(scheduled_at) AS last_at,
                        (array_agg(job_id ORDER BY scheduled_at DESC, job_id))[1] AS ex_job,
                        (array_agg(scheduled_at ORDER BY scheduled_at DESC, job_id))[1] AS ex_at,
                        (array_agg(execution_id ORDER BY scheduled_at DESC, job_id))[1] AS ex_id,
                        (SELECT count(*) FROM f) AS read
                 FROM kept GROUP BY error"
            ),
            &[&failed, &from, &to, &max_rows, &namespaces],
        )
        .await?;
    let read = rows.first().map_or(0, |r| r.get::<_, i64>("read")) as u64;
    // Errors are redacted on the way out (rows written before the worker
    // redacted them may hold a callback's credentials); two texts that
    // redact alike become one group (its `jobs` then counts a job in both twice).
    let mut merged: HashMap<Option<String>, FailureGroup> = HashMap::new();
    for r in &rows {
        let error = r.get::<_, Option<String>>("error").map(|e| domain::redact::text(&e));
        let group = FailureGroup {
            error: error.clone(),
            count: r.get::<_, i64>("n") as u64,
            jobs: r.get::<_, i64>("jobs") as u64,
            first_at: r.get("first_at"),
            last_at: r.get("last_at"),
            example: (r.get("ex_job"), r.get("ex_at"), r.get("ex_id")),
        };
        match merged.get_mut(&error) {
            None => {
                merged.insert(error, group);
            }
            Some(g) => {
                g.count += group.count;
                g.jobs += group.jobs;
                g.first_at = g.first_at.min(group.first_at);
                if group.last_at > g.last_at {
                    g.last_at = group.last_at;
                    g.example = group.example;
                }
            }
        }
    }
    let mut groups: Vec<FailureGroup> = merged.into_values().collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.error.cmp(&b.error)));
    let more_groups = groups.len().saturating_sub(max_groups) as u64;
    groups.truncate(max_groups);
    Ok(Failures { groups, more_groups, rows_read: read.min(max_rows as u64), capped: read > max_rows as u64 })
}

/// A job's rows over a period, by status, and how many succeeded late.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcomes {
    pub by_status: HashMap<Status, u64>,
    /// Succeeded rows whose first attempt started more than [`LATE_AFTER`]
    /// after the slot's (jittered) due instant.
    pub late: u64,
}

/// How late a succeeded delivery may start and still count as on time.
pub const LATE_AFTER: TimeDelta = TimeDelta::seconds(1);

/// The [`Outcomes`] of each of `job_ids` over slots in `[from, to)`, each
/// job's rows read through the primary key range `(job_id, scheduled_at)`.
/// Jobs without a row in the period are left out.
pub async fn outcomes(
    client: &impl deadpool_postgres::GenericClient,
    job_ids: &[Uuid],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<HashMap<Uuid, Outcomes>, tokio_postgres::Error> {
    let late_ms = LATE_AFTER.num_milliseconds();
    let succeeded = Status::Succeeded.as_str();
    // Per job and status in one pass; a succeeded row is certainly late
    // when it started more than `late_ms` + the job's whole jitter after
    // its slot, certainly not when within `late_ms` of it. Only the rows in
    // between (jittered jobs) need their offset, computed below.
    let rows = client
        .query(
            concat!(
                "SELECT l.job_id, l.status, count(*) AS n,
                        count(*) FILTER (WHERE l.status = $4 AND late_ms > $5 + jitter_ms) AS late,
                        array_agg(l.scheduled_at) FILTER (WHERE l.status = $4 AND late_ms > $5
                                                          AND late_ms <= $5 + jitter_ms) AS unsure_at,
                        array_agg(late_ms) FILTER (WHERE l.status = $4 AND late_ms > $5
                                                   AND late_ms <= $5 + jitter_ms) AS unsure_ms,
                        max(jitter_ms) AS jitter_ms
                 FROM (SELECT l.job_id, l.status, l.scheduled_at, ",
                "            coalesce((j.spec->>'jitter_ms')::bigint, 0) AS jitter_ms,
                             CASE WHEN l.status = $4 THEN floor(extract(epoch FROM ",
                first_started_at!(),
                " - l.scheduled_at) * 1000)::bigint END AS late_ms
                       FROM jobs j CROSS JOIN LATERAL
                            (SELECT * FROM scheduled_jobs l
                             WHERE l.job_id = j.id AND l.scheduled_at >= $2 AND l.scheduled_at < $3) l
                       WHERE j.id = ANY($1)
                       -- Narrow rows into the aggregate: without it the
                       -- sort carried each row's history (2 s for 431,000 rows).
                       OFFSET 0) l
                 GROUP BY l.job_id, l.status"
            ),
            &[&job_ids, &from, &to, &succeeded, &late_ms],
        )
        .await?;
    let mut out: HashMap<Uuid, Outcomes> = HashMap::new();
    for r in &rows {
        let job_id: Uuid = r.get("job_id");
        let status: Status = r.get("status");
        let entry = out.entry(job_id).or_default();
        *entry.by_status.entry(status).or_default() += r.get::<_, i64>("n") as u64;
        entry.late += r.get::<_, i64>("late") as u64;
        let unsure_at: Option<Vec<DateTime<Utc>>> = r.get("unsure_at");
        let unsure_ms: Option<Vec<i64>> = r.get("unsure_ms");
        let jitter_ms: i64 = r.get::<_, Option<i64>>("jitter_ms").unwrap_or(0);
        for (at, raw) in unsure_at.unwrap_or_default().into_iter().zip(unsure_ms.unwrap_or_default()) {
            let offset = domain::schedule::jitter_offset(job_id, at, jitter_ms.max(0) as u64).num_milliseconds();
            if raw - offset > late_ms {
                entry.late += 1;
            }
        }
    }
    Ok(out)
}

/// The slots of each job due after its cursor and at or before `until`,
/// oldest first, at most `per_job` each, as an alert rule judges them
/// (`domain::alert::judge`): a primary key range per job. A run of slots a
/// misfire policy decided together (`decided_ranges`) is one item, at its
/// last slot. `jobs` holds (job, cursor, jitter_ms).
pub async fn slots_to_judge(
    client: &impl deadpool_postgres::GenericClient,
    jobs: &[(Uuid, DateTime<Utc>, i64)],
    until: DateTime<Utc>,
    per_job: i64,
) -> Result<Vec<(Uuid, domain::alert::JudgedSlot)>, tokio_postgres::Error> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<Uuid> = jobs.iter().map(|j| j.0).collect();
    let after: Vec<DateTime<Utc>> = jobs.iter().map(|j| j.1).collect();
    let jitter: Vec<i64> = jobs.iter().map(|j| j.2).collect();
    let rows = client
        .query(
            concat!(
                "SELECT j.job_id, j.jitter, s.*
                 FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[]) AS j(job_id, after, jitter)
                 CROSS JOIN LATERAL (
                     (SELECT l.scheduled_at, l.execution_id, l.status, l.reason, l.error, l.http_status, l.finished_at, ",
                first_started_at!(),
                " AS first_start
                      FROM scheduled_jobs l WHERE l.job_id = j.job_id AND l.scheduled_at > j.after AND l.scheduled_at <= $4
                      ORDER BY l.scheduled_at LIMIT $5)
                     UNION ALL
                     (SELECT r.last_at, 'the run ' || cronshard_instant(r.first_at) || ' to ' || cronshard_instant(r.last_at)
                             || ' (' || r.slots || ' slots)', r.status, r.reason, NULL, NULL, r.recorded_at, NULL
                      FROM decided_ranges r WHERE r.job_id = j.job_id AND r.last_at > j.after AND r.last_at <= $4
                      ORDER BY r.last_at LIMIT $5)
                     ORDER BY 1 LIMIT $5) s
                 ORDER BY j.job_id, s.scheduled_at"
            ),
            &[&ids, &after, &jitter, &until, &per_job],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let job_id: Uuid = r.get("job_id");
            let scheduled_at: DateTime<Utc> = r.get("scheduled_at");
            let first_start: Option<DateTime<Utc>> = r.get("first_start");
            let slot = domain::alert::JudgedSlot {
                scheduled_at,
                execution_id: r.get("execution_id"),
                status: r.get("status"),
                reason: r.get("reason"),
                error: r.get("error"),
                http_status: r.get("http_status"),
                finished_at: r.get("finished_at"),
                lateness_ms: first_start.map(|f| lateness_ms(job_id, scheduled_at, f, r.get("jitter"))),
            };
            (job_id, slot)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<i64> = (1..=100).collect();
        assert_eq!((percentile(&v, 0.5), percentile(&v, 0.99), percentile(&v, 1.0)), (50, 99, 100));
        assert_eq!((percentile(&[7], 0.5), percentile(&[7], 0.99)), (7, 7));
        assert_eq!((percentile(&[1, 2], 0.5), percentile(&[1, 2], 0.99)), (1, 2));
    }

    #[test]
    fn lateness_counts_from_the_jittered_instant() {
        let job = Uuid::from_u128(7);
        let at: DateTime<Utc> = "2026-12-01T08:00:00Z".parse().unwrap();
        let offset = domain::schedule::jitter_offset(job, at, 5_000);
        let start = at + offset + TimeDelta::milliseconds(40);
        assert_eq!(lateness_ms(job, at, start, 5_000), 40);
        assert_eq!(lateness_ms(job, at, start, 0), (offset + TimeDelta::milliseconds(40)).num_milliseconds());
    }
}
