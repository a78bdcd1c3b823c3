//! "Did this slot fire, and if not, why?", without I/O: the verdict and
//! the words for a ledger row with its history, or, when there is no row,
//! the reason derived from the job and its schedule (fire times come from
//! common's schedule code, never from math of our own). The route
//! (`routes::explain`) reads the job and the row and hands them here.

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde::Serialize;
use serde_json::Value;

use domain::execution::{format_instant, truncate_ms};
use domain::job::{JobSpec, ScheduleKind};
use domain::schedule::CompiledSchedule;
use domain::slot::{Status, Trigger};
use store::ledger::ExecutionWithHistory;
use store::ledger::partitions::Retention;

use crate::error::ApiResult;

/// The answer in one word: a ledger row's status, or why there is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The slot has a ledger row, in this status.
    Recorded(Status),
    /// The instant is not a fire time of the job's schedule.
    NotAFireTime,
    /// Before the schedule's `start_at`.
    BeforeStart,
    /// After the schedule's `end_at`.
    AfterEnd,
    /// Before the job was created.
    BeforeCreation,
    /// The job was deleted before the slot.
    Deleted,
    /// The job was paused at the slot's time.
    Paused,
    /// The job had used up its `max_runs` before the slot.
    MaxRunsReached,
    /// The slot is in the future.
    NotDueYet,
    /// Older than the ledger retention: its record is gone.
    BeyondRetention,
    /// A due fire time with no record and no reason the API can tell.
    NotRecorded,
}

impl Verdict {
    /// The verdicts of a slot without a ledger row.
    const UNRECORDED: [Verdict; 10] = [
        Verdict::NotAFireTime,
        Verdict::BeforeStart,
        Verdict::AfterEnd,
        Verdict::BeforeCreation,
        Verdict::Deleted,
        Verdict::Paused,
        Verdict::MaxRunsReached,
        Verdict::NotDueYet,
        Verdict::BeyondRetention,
        Verdict::NotRecorded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Recorded(status) => status.as_str(),
            Verdict::NotAFireTime => "not_a_fire_time",
            Verdict::BeforeStart => "before_start",
            Verdict::AfterEnd => "after_end",
            Verdict::BeforeCreation => "before_creation",
            Verdict::Deleted => "deleted",
            Verdict::Paused => "paused",
            Verdict::MaxRunsReached => "max_runs_reached",
            Verdict::NotDueYet => "not_due_yet",
            Verdict::BeyondRetention => "beyond_retention",
            Verdict::NotRecorded => "not_recorded",
        }
    }
}

/// One word on the wire: the row's status or the reason there is none.
impl Serialize for Verdict {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl utoipa::PartialSchema for Verdict {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let words = Status::ALL.map(Verdict::Recorded).into_iter().chain(Verdict::UNRECORDED).map(Verdict::as_str);
        utoipa::openapi::schema::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .enum_values(Some(words))
            .description(Some(
                "The ledger row's status (pending … missed), or why the slot has no row: not_a_fire_time, \
                 before_start, after_end, before_creation, deleted, paused, max_runs_reached, not_due_yet, \
                 beyond_retention, not_recorded.",
            ))
            .into()
    }
}

impl utoipa::ToSchema for Verdict {}

/// Why a slot did or did not fire.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Explanation {
    pub verdict: Verdict,
    /// Whether a worker took the slot (at least one delivery attempt started).
    pub fired: bool,
    /// The answer in a sentence or two.
    pub summary: String,
    /// What happened, in order (claim, publish, each attempt, skips,
    /// recoveries, replays), or notes on the answer when there is no row.
    pub details: Vec<String>,
    /// The job's last fire time before the slot (its current schedule).
    #[schema(value_type = Option<chrono::DateTime<chrono::Utc>>)]
    pub previous_fire_at: Option<String>,
    /// The job's first fire time after the slot (its current schedule).
    #[schema(value_type = Option<chrono::DateTime<chrono::Utc>>)]
    pub next_fire_at: Option<String>,
    /// For a job with `jitter_ms`: when the slot is delivered (the slot
    /// plus its fixed offset).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<chrono::DateTime<chrono::Utc>>)]
    pub delivery_at: Option<String>,
}

/// What the explanation needs of a job.
pub struct JobFacts {
    pub spec: JobSpec,
    pub schedule: CompiledSchedule,
    paused: bool,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    deleted_at: Option<DateTime<Utc>>,
}

impl JobFacts {
    pub fn of(job: store::jobs::AnyJob) -> ApiResult<Self> {
        let spec: JobSpec = serde_json::from_value(job.spec)?;
        let schedule = spec.compile(job.created_at)?;
        Ok(Self {
            spec,
            schedule,
            paused: job.paused,
            created_at: job.created_at,
            updated_at: job.updated_at,
            deleted_at: job.deleted_at,
        })
    }
}

/// An instant as the API writes it; one with sub-millisecond digits (never
/// a fire time) keeps them, so it is not mistaken for one.
pub fn show(t: DateTime<Utc>) -> String {
    if truncate_ms(t) == t { format_instant(t) } else { t.to_rfc3339_opts(SecondsFormat::AutoSi, true) }
}

fn show_opt(t: Option<DateTime<Utc>>) -> String {
    t.map(show).unwrap_or_else(|| "(unknown)".to_owned())
}

/// A duration for people: "3 d 4 h", "5 min 2 s", "800 ms".
fn human(d: TimeDelta) -> String {
    let ms = d.num_milliseconds().abs();
    let units = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1_000, "s")];
    let parts: Vec<String> = units
        .iter()
        .scan(ms, |rest, (size, name)| {
            let n = *rest / size;
            *rest %= size;
            Some((n, *name))
        })
        .filter(|(n, _)| *n > 0)
        .take(2)
        .map(|(n, name)| format!("{n} {name}"))
        .collect();
    if parts.is_empty() { format!("{ms} ms") } else { parts.join(" ") }
}

/// Why a slot was skipped or missed, from the row's `reason`.
fn reason_text(reason: Option<&str>) -> String {
    match reason {
        Some("paused") => "the job was paused at its due instant".to_owned(),
        Some("deleted") => "the job was deleted before a worker delivered it".to_owned(),
        Some("superseded") => "the job was changed before this slot was due, and the version in force at the \
             slot does not fire at this instant (when it does, it re-takes the slot)"
            .to_owned(),
        Some(domain::slot::reason::OVERLAP) => {
            "the job's overlap policy is forbid and its previous execution was still \
             running or retrying at this slot's due instant"
                .to_owned()
        }
        Some(domain::slot::reason::REPLACED) => "the job's overlap policy is replace and a newer slot started: this \
             execution's remaining retries were cancelled"
            .to_owned(),
        Some(r) if r.starts_with(domain::slot::reason::CALENDAR_PREFIX) => format!(
            "the slot falls on a time that calendar \"{}\" excludes",
            &r[domain::slot::reason::CALENDAR_PREFIX.len()..]
        ),
        Some(r) if r.starts_with(domain::slot::reason::CALENDAR_UNAVAILABLE_PREFIX) => format!(
            "the job names calendar \"{}\", which the scheduler could not load within {} s of the slot, so \
             the slot was not fired (a slot never fires past a calendar its job names); check the \
             schedulers' database connection",
            &r[domain::slot::reason::CALENDAR_UNAVAILABLE_PREFIX.len()..],
            domain::slot::reason::CALENDAR_WAIT_SECS
        ),
        Some(r) if r.starts_with("misfire policy") => {
            format!("no scheduler could fire it on time (the cluster or the job's owners were down), and the job's {r}")
        }
        Some(r) => r.to_owned(),
        None => "no reason was recorded".to_owned(),
    }
}

/// One `history` entry (migrations/V3) as a line of the timeline.
fn describe_entry(e: &Value) -> String {
    let s = |k: &str| e.get(k).and_then(Value::as_str);
    match s("event") {
        Some("attempt") => {
            let mut line = format!("attempt {} on worker {}", e["attempt"], s("worker_id").unwrap_or("(unknown)"));
            if let Some(t) = s("started_at") {
                line += &format!(", started {t}");
            }
            if let Some(t) = s("finished_at") {
                line += &format!(", finished {t}");
            }
            if let Some(o) = s("outcome") {
                line += &format!(": {o}");
            }
            if let Some(code) = e.get("http_status").and_then(Value::as_i64) {
                line += &format!(" (HTTP {code})");
            }
            if let Some(id) = s("sqs_message_id") {
                line += &format!(" (SQS message {id})");
            }
            if let Some(err) = s("error") {
                line += &format!(": {err}");
            }
            if e.get("redelivered") == Some(&Value::Bool(true)) {
                line += " (a redelivery: the worker that had it was lost)";
            }
            // Which rule of the delivery contract decided, and the next wait.
            if let Some(rule) = s("rule") {
                line += &format!(" [{rule}]");
            }
            line
        }
        Some("skipped") => format!("skipped at {}: {}", s("at").unwrap_or("(unknown)"), reason_text(s("reason"))),
        Some("decided") => format!(
            "decided at {} together with the job's other missed slots of one run, recorded once: {}",
            s("at").unwrap_or("(unknown)"),
            reason_text(s("reason"))
        ),
        Some("retaken") => format!(
            "re-taken at {} by version {} of the job (a change made before the slot had cancelled the claim of version {}): claimed afresh",
            s("at").unwrap_or("(unknown)"),
            e.get("version").map_or("?".to_owned(), Value::to_string),
            e.get("from_version").map_or("?".to_owned(), Value::to_string)
        ),
        Some("stranded") => format!(
            "found stranded at {} ({} with {} attempt(s), not moved by any process past its bound): published again under the same execution id",
            s("at").unwrap_or("(unknown)"),
            s("status").unwrap_or("?"),
            e.get("attempts").map_or("?".to_owned(), Value::to_string)
        ),
        Some("recovered") => format!(
            "recovered at {}: found stuck in running past its timeout, delivered again under the same execution id",
            s("at").unwrap_or("(unknown)")
        ),
        Some("released") => format!(
            "released at {} by worker {}: it took attempt {} but did not deliver it (it stopped or lost its broker session); the attempt goes to the next worker",
            s("at").unwrap_or("(unknown)"),
            s("worker_id").unwrap_or("(unknown)"),
            e.get("attempt").map_or("?".to_owned(), Value::to_string)
        ),
        Some("waiting") => format!(
            "waiting from {} for its destination {}: {} (an outage seen by worker {} since {}); attempt {} is not \
             spent while it waits",
            s("at").unwrap_or("(unknown)"),
            s("destination").unwrap_or("(unknown)"),
            s("reason").unwrap_or("(no reason recorded)"),
            s("worker_id").unwrap_or("(unknown)"),
            s("since").unwrap_or("(unknown)"),
            e.get("attempt").map_or("?".to_owned(), Value::to_string)
        ),
        Some("gave_up") => format!(
            "given up at {} without attempt {}: {} for {} since {}, past the slot's retry horizon",
            s("at").unwrap_or("(unknown)"),
            e.get("attempt").map_or("?".to_owned(), Value::to_string),
            s("reason").unwrap_or("(no reason recorded)"),
            s("destination").unwrap_or("(unknown)"),
            s("since").unwrap_or("(unknown)")
        ),
        Some("replay") => {
            let mut line = format!("replayed through the API at {}", s("at").unwrap_or("(unknown)"));
            if let Some(original) = e.get("original").filter(|o| o.is_object()) {
                let o = |k: &str| original.get(k).and_then(Value::as_str).unwrap_or("(unknown)");
                line += &format!(
                    "; it had been claimed by {} at {} and was {} after {} attempt(s)",
                    o("scheduler_node"),
                    o("fired_at"),
                    o("status"),
                    original.get("attempts").and_then(Value::as_i64).unwrap_or(0)
                );
            }
            if let Some(from) = e.get("retry_from").and_then(Value::as_i64) {
                line += &format!("; a fresh retry budget counts from attempt {}", from + 1);
            }
            line
        }
        _ => format!("event {e}"),
    }
}

/// The explanation of an existing ledger row.
pub fn of_row(row: &ExecutionWithHistory, now: DateTime<Utc>) -> Explanation {
    let r = &row.execution;
    let (status, attempts, at, reason) = (r.status, r.attempts, r.scheduled_at, r.reason.clone());
    let node = r.scheduler_node.clone().unwrap_or_else(|| "(unknown)".to_owned());
    let worker = r.worker_id.clone().unwrap_or_else(|| "(unknown)".to_owned());
    let history: Vec<Value> = row.history.iter().cloned().map(Value::Object).collect();

    let mut details = Vec::new();
    match (r.trigger, r.fired_at) {
        (Trigger::Manual, fired) => details.push(format!("triggered manually through the API at {}", show_opt(fired))),
        (Trigger::Backfill, fired) => details.push(format!(
            "run by a backfill (a request to run the job's past slots), started by scheduler node {node} at {}",
            show_opt(fired)
        )),
        (Trigger::Misfire, fired) => details
            .push(format!("claimed late by scheduler node {node} at {}, by the job's misfire policy", show_opt(fired))),
        (_, Some(fired)) => details.push(format!("claimed by scheduler node {node} at {}", show(fired))),
        (_, None) => details.push(format!("recorded by scheduler node {node}")),
    }
    match r.published_at {
        Some(p) => details.push(format!("handed to the broker at {}", show(p))),
        None if status == Status::Pending => {
            details.push("not yet confirmed by the broker; the outbox sweep publishes it".to_owned())
        }
        None => {}
    }
    details.extend(history.iter().map(describe_entry));
    let has_attempts = history.iter().any(|e| e.get("event").and_then(Value::as_str) == Some("attempt"));
    if !has_attempts && attempts > 0 {
        // Rows written before the worker kept a history: the last attempt only.
        details.push(format!(
            "attempt {attempts} (the last) on worker {worker}, started {}, finished {}",
            show_opt(r.started_at),
            show_opt(r.finished_at)
        ));
    }

    let outcome = match (r.http_status, &r.sqs_message_id) {
        (Some(code), _) => format!(" (HTTP {code})"),
        (None, Some(id)) => format!(" (SQS message {id})"),
        (None, None) => String::new(),
    };
    let error = r.error.as_ref().map(|e| format!(": {e}")).unwrap_or_default();
    let summary = match status {
        Status::Pending if at > now => format!(
            "Pre-armed: claimed ahead of time by node {node}; a worker delivers it at {}, not before.",
            show(at)
        ),
        Status::Pending if reason.as_deref() == Some("replay") => {
            format!("Replayed; waiting for a worker to run attempt {}.", attempts + 1)
        }
        Status::Pending => format!("Claimed by node {node}; waiting for a worker to run attempt {}.", attempts + 1),
        Status::Running => match r.awaiting_until {
            Some(until) => format!(
                "Attempt {attempts} was delivered and accepted (HTTP 202); it awaits the receiver's completion report \
                 until {} ({} after now), then fails and is retried by its policy.",
                show(until),
                human((until - now).max(TimeDelta::zero()))
            ),
            None => {
                format!("It is firing: attempt {attempts} started on worker {worker} at {}.", show_opt(r.started_at))
            }
        },
        Status::Retrying => match r.next_attempt_at {
            Some(next) => format!(
                "It fired and attempt {attempts} failed{outcome}{error}; attempt {} is due at {} ({} after now).",
                attempts + 1,
                show(next),
                human((next - now).max(TimeDelta::zero()))
            ),
            None => {
                format!("It fired and attempt {attempts} failed{outcome}{error}; a retry is scheduled with backoff.")
            }
        },
        Status::Succeeded => {
            let retries =
                if attempts > 1 { format!(" after {} failed attempt(s)", attempts - 1) } else { String::new() };
            format!(
                "It fired: attempt {attempts} on worker {worker} succeeded at {}{outcome}{retries}.",
                show_opt(r.finished_at)
            )
        }
        Status::Failed => format!(
            "It fired but failed: {attempts} attempt(s), the last on worker {worker} ended at {}{outcome}{error}. \
             Replay it with POST /v1/executions/{}/{}/replay.",
            show_opt(r.finished_at),
            r.job_id,
            show(at)
        ),
        Status::Skipped if attempts > 0 && !has_attempts => format!(
            "It did not fire: worker {worker} held it ready for its due instant, and it was cancelled before \
             delivery because {}.",
            reason_text(reason.as_deref())
        ),
        Status::Skipped => format!("It did not fire: skipped because {}.", reason_text(reason.as_deref())),
        Status::Missed => format!(
            "It did not fire: no owner of the job was alive at the time, and the misfire policy did not fire it late ({}).",
            reason.as_deref().unwrap_or("no reason recorded")
        ),
    };
    // Waiting for its destination (or given up waiting) is the latest word.
    let last = history.last().filter(|e| {
        let event = e.get("event").and_then(Value::as_str);
        matches!((status, event), (Status::Pending | Status::Running | Status::Retrying, Some("waiting")))
            || (status == Status::Failed && event == Some("gave_up"))
    });
    let summary = match last {
        Some(e) => {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("(unknown)");
            let reason = s("reason");
            if status == Status::Failed {
                format!(
                    "It was not delivered: {reason} for {} since {}, past the slot's retry horizon, so it was \
                     parked as failed without making attempt {}. Replay it with POST /v1/executions/{}/{}/replay.",
                    s("destination"),
                    s("since"),
                    e.get("attempt").map_or("?".to_owned(), Value::to_string),
                    r.job_id,
                    show(at)
                )
            } else {
                format!(
                    "Waiting: {reason} for {} (an outage seen by worker {} since {}). The delivery waits without \
                     spending an attempt ({attempts} made so far) and goes once the destination takes deliveries again.",
                    s("destination"),
                    s("worker_id"),
                    s("since")
                )
            }
        }
        None => summary,
    };
    // An armed row counts an attempt before its due instant; a cancellation
    // then (the row says `skipped`) means no callback was ever made. Nor was
    // one for a slot waiting for its destination, but for earlier attempts.
    let fired = has_attempts
        || (last.is_none()
            && (matches!(status, Status::Running | Status::Retrying | Status::Succeeded | Status::Failed)
                || (attempts > 0 && history.is_empty() && status != Status::Skipped)));
    let verdict = Verdict::Recorded(status);
    Explanation { verdict, fired, summary, details, previous_fire_at: None, next_fire_at: None, delivery_at: None }
}

/// What the schedule is, in words.
fn describe_schedule(spec: &JobSpec, created_at: DateTime<Utc>) -> String {
    match &spec.schedule.kind {
        ScheduleKind::Once { at } => format!("a one-time job that fires only at {}", show(*at)),
        ScheduleKind::Interval { every_ms } => format!(
            "every {every_ms} ms from {}",
            show(spec.schedule.start_at.map(truncate_ms).unwrap_or(truncate_ms(created_at)))
        ),
        ScheduleKind::Cron { timezone, dst, .. } => {
            let exprs: Vec<String> = spec.schedule.kind.cron_exprs().iter().map(|e| format!("\"{e}\"")).collect();
            let rule = if dst.is_default() { String::new() } else { format!(" ({})", dst.describe()) };
            format!("cron {} in {timezone}{rule}", exprs.join(" or "))
        }
    }
}

/// Why a slot of an existing (or deleted) job has no ledger row.
pub fn absent(
    job: &JobFacts,
    at: DateTime<Utc>,
    now: DateTime<Utc>,
    runs_before: Option<u64>,
    retention: Retention,
) -> Explanation {
    let when = show(at);
    let mut details = Vec::new();
    if job.updated_at > at {
        details.push(format!(
            "The job was last changed at {}, after this slot; fire times here come from its current definition.",
            show(job.updated_at)
        ));
    }
    let open = CompiledSchedule { start_at: None, end_at: None, ..job.schedule.clone() };
    let max_runs_hit = match (job.spec.schedule.max_runs, runs_before) {
        (Some(max), Some(runs)) if runs >= max => Some((max, runs)),
        _ => None,
    };
    let (verdict, summary) = if !open.fires_at(at) {
        let nearest = |t: Option<DateTime<Utc>>| t.map(show).unwrap_or_else(|| "none".to_owned());
        (
            Verdict::NotAFireTime,
            format!(
                "{when} is not a fire time of the job's schedule ({}), so nothing was due then. \
                 The nearest fire times are {} before and {} after.",
                describe_schedule(&job.spec, job.created_at),
                nearest(open.prev_before(at)),
                nearest(open.next_after(at))
            ),
        )
    } else if let Some(start) = job.schedule.start_at.filter(|s| at < *s) {
        (
            Verdict::BeforeStart,
            format!("{when} is before the schedule's start_at {}; the job fires only from then on.", show(start)),
        )
    } else if let Some(end) = job.schedule.end_at.filter(|e| at > *e) {
        (
            Verdict::AfterEnd,
            format!("{when} is after the schedule's end_at {}; the job fires no more after it.", show(end)),
        )
    } else if let Some(deleted) = job.deleted_at.filter(|d| *d <= at) {
        (
            Verdict::Deleted,
            format!("The job was deleted at {}, before this slot; a deleted job never fires again.", show(deleted)),
        )
    } else if at < job.created_at {
        (
            Verdict::BeforeCreation,
            format!(
                "The job was created at {}, after this slot; a job fires only slots after its creation.",
                show(job.created_at)
            ),
        )
    } else if at > now {
        if job.paused {
            (
                Verdict::Paused,
                format!(
                    "{when} is in the future, but the job is paused: the slot fires only if the job is resumed before then."
                ),
            )
        } else if let Some((max, runs)) = max_runs_hit {
            (
                Verdict::MaxRunsReached,
                format!(
                    "{when} is in the future, but the job has run {runs} of its max_runs = {max} times: it fires no more."
                ),
            )
        } else {
            (
                Verdict::NotDueYet,
                format!(
                    "{when} is in the future (in {}): not due yet. The job's next fire time is {}.",
                    human(at - now),
                    job.schedule.next_after(now).map(show).unwrap_or_else(|| "none".to_owned())
                ),
            )
        }
    } else if at.date_naive() < retention.oldest_kept_day(now) {
        (
            Verdict::BeyondRetention,
            format!(
                "{when} is older than the ledger retention ({} days): its day partition has been dropped, so whatever \
                 happened to this slot is no longer recorded.",
                retention.unsuccessful_days
            ),
        )
    } else if at.date_naive() < retention.oldest_succeeded_day(now) {
        (
            Verdict::BeyondRetention,
            format!(
                "{when} is older than the ledger retention of slots that succeeded ({} days); slots that failed, were \
                 skipped or missed are kept {} days and this one has no record, so it most likely succeeded.",
                retention.succeeded_days, retention.unsuccessful_days
            ),
        )
    } else if let Some((max, runs)) = max_runs_hit {
        (
            Verdict::MaxRunsReached,
            format!(
                "The job had run {runs} times before this slot, reaching its max_runs = {max}: its schedule was exhausted."
            ),
        )
    } else if job.paused && job.updated_at <= at {
        (
            Verdict::Paused,
            format!(
                "The job was paused at the time: it is paused now and has not changed since {}, before this slot.",
                show(job.updated_at)
            ),
        )
    } else {
        if job.paused {
            details.push(format!(
                "The job is paused now (last changed at {}); if it was already paused at {when}, that is why. \
                 The API keeps no history of pauses to tell.",
                show(job.updated_at)
            ));
        }
        let summary = if now - at < TimeDelta::seconds(60) {
            format!(
                "{when} was due {} ago and has no ledger row yet: a scheduler may still be claiming it \
                 (late owners check a slot within seconds). Ask again shortly.",
                human(now - at)
            )
        } else {
            format!(
                "{when} was a due fire time, but no scheduler claimed it and no misfire decision recorded it. \
                 That happens when no owner of the job was alive then and the slot lay outside what the owners \
                 looked back over when they took the job again (MISFIRE_LOOKBACK_SECS, 24 h by default, and at \
                 most 1000 recorded slots per decision)."
            )
        };
        (Verdict::NotRecorded, summary)
    };
    Explanation {
        verdict,
        fired: false,
        summary,
        details,
        previous_fire_at: None,
        next_fire_at: None,
        delivery_at: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn job(schedule: Value, created: &str) -> JobFacts {
        let spec = JobSpec::from_json(&json!({
            "name": "j", "schedule": schedule, "target": { "kind": "http", "url": "https://x.example/" }
        }))
        .unwrap();
        let created_at = utc(created);
        JobFacts {
            schedule: spec.compile(created_at).unwrap(),
            spec,
            paused: false,
            created_at,
            updated_at: created_at,
            deleted_at: None,
        }
    }

    fn verdict(j: &JobFacts, at: &str, now: &str, runs: Option<u64>) -> Verdict {
        absent(j, utc(at), utc(now), runs, Retention::default()).verdict
    }

    #[test]
    fn absent_slots_get_the_first_reason_that_applies() {
        let hourly = job(
            json!({ "kind": "cron", "expr": "0 * * * *", "start_at": "2026-01-01T00:00:00Z",
                    "end_at": "2026-06-01T00:00:00Z", "max_runs": 10 }),
            "2026-01-02T00:30:00Z",
        );
        let now = "2026-03-01T12:00:00Z";
        assert_eq!(verdict(&hourly, "2026-02-01T10:30:00Z", now, Some(0)), Verdict::NotAFireTime);
        assert_eq!(verdict(&hourly, "2025-12-31T23:00:00Z", now, Some(0)), Verdict::BeforeStart);
        assert_eq!(verdict(&hourly, "2026-06-01T01:00:00Z", now, Some(0)), Verdict::AfterEnd);
        assert_eq!(verdict(&hourly, "2026-01-01T05:00:00Z", now, Some(0)), Verdict::BeforeCreation);
        assert_eq!(verdict(&hourly, "2026-03-01T13:00:00Z", now, Some(0)), Verdict::NotDueYet);
        assert_eq!(verdict(&hourly, "2026-03-01T13:00:00Z", now, Some(10)), Verdict::MaxRunsReached);
        assert_eq!(verdict(&hourly, "2026-02-01T10:00:00Z", now, Some(10)), Verdict::MaxRunsReached);
        assert_eq!(verdict(&hourly, "2026-02-01T10:00:00Z", now, Some(9)), Verdict::NotRecorded);
        assert_eq!(verdict(&hourly, "2026-01-03T10:00:00Z", "2026-05-01T00:00:00Z", Some(0)), Verdict::BeyondRetention);
        // Past the retention of slots that succeeded only: no row most likely means it succeeded.
        let e =
            absent(&hourly, utc("2026-01-03T10:00:00Z"), utc("2026-03-01T00:00:00Z"), Some(0), Retention::default());
        assert_eq!(e.verdict, Verdict::BeyondRetention);
        assert!(e.summary.contains("most likely succeeded"), "{}", e.summary);

        let now = "2026-01-10T00:00:00Z";
        let mut paused = job(json!({ "kind": "interval", "every_ms": 60_000 }), "2026-01-01T00:00:00Z");
        paused.paused = true;
        paused.updated_at = utc("2026-01-01T01:00:00Z");
        assert_eq!(verdict(&paused, "2026-01-01T02:00:00Z", now, None), Verdict::Paused);
        // Paused now, but changed after the slot: the API cannot tell.
        let e = absent(&paused, utc("2026-01-01T00:30:00Z"), utc(now), None, Retention::default());
        assert_eq!(e.verdict, Verdict::NotRecorded);
        assert!(e.details.iter().any(|d| d.contains("paused now")), "{:?}", e.details);
        assert_eq!(verdict(&paused, "2026-01-01T00:30:30Z", now, None), Verdict::NotAFireTime);

        let mut deleted = job(json!({ "kind": "interval", "every_ms": 60_000 }), "2026-01-01T00:00:00Z");
        deleted.deleted_at = Some(utc("2026-01-01T01:00:00Z"));
        assert_eq!(verdict(&deleted, "2026-01-01T01:00:00Z", now, None), Verdict::Deleted);
        assert_eq!(verdict(&deleted, "2026-01-01T00:59:00Z", now, None), Verdict::NotRecorded);
        assert_eq!(verdict(&deleted, "2026-12-01T00:00:00Z", now, None), Verdict::Deleted);
    }

    #[test]
    fn a_wrong_instant_names_the_nearest_fire_times() {
        let j =
            job(json!({ "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin" }), "2026-01-01T00:00:00Z");
        let e = absent(&j, utc("2026-02-10T07:30:00Z"), utc("2026-03-01T00:00:00Z"), None, Retention::default());
        assert_eq!(e.verdict, Verdict::NotAFireTime);
        assert!(
            e.summary.contains("2026-02-10T07:00:00.000Z") && e.summary.contains("2026-02-11T07:00:00.000Z"),
            "{}",
            e.summary
        );
        assert_eq!(show(utc("2026-02-10T07:00:00.0005Z")), "2026-02-10T07:00:00.000500Z");
        assert_eq!(human(TimeDelta::seconds(3 * 3600 + 61)), "3 h 1 min");
        assert_eq!(human(TimeDelta::milliseconds(800)), "800 ms");
    }

    #[test]
    fn history_entries_read_as_sentences() {
        let attempt = json!({ "event": "attempt", "attempt": 2, "worker_id": "w-1", "started_at": "a", "finished_at": "b",
                              "outcome": "retrying", "http_status": 503, "error": "busy", "redelivered": true,
                              "rule": "HTTP 503 is in retry_statuses (408, 425, 429, 5xx)" });
        let line = describe_entry(&attempt);
        for part in
            ["attempt 2 on worker w-1", "retrying", "HTTP 503", "busy", "redelivery", "[HTTP 503 is in retry_statuses"]
        {
            assert!(line.contains(part), "{line}");
        }
        assert!(describe_entry(&json!({ "event": "skipped", "at": "t", "reason": "paused" })).contains("paused"));
        assert!(describe_entry(&json!({ "event": "replay", "at": "t" })).starts_with("replayed"));
        let decided = json!({ "event": "decided", "at": "t", "reason": "misfire policy skip" });
        let line = describe_entry(&decided);
        assert!(line.starts_with("decided at t together with the job's other missed slots"), "{line}");
        assert!(line.contains("skip"), "{line}");
        assert!(describe_entry(&json!({ "event": "recovered", "at": "t" })).starts_with("recovered"));
        assert!(
            describe_entry(&json!({ "event": "released", "at": "t", "worker_id": "w", "attempt": 1 }))
                .starts_with("released at t by worker w: it took attempt 1")
        );
        let waiting = json!({ "event": "waiting", "at": "t", "reason": "destination circuit open",
                              "destination": "hooks.example:443", "since": "s", "worker_id": "w", "attempt": 2 });
        let line = describe_entry(&waiting);
        for part in ["waiting from t", "hooks.example:443", "destination circuit open", "worker w since s", "attempt 2"]
        {
            assert!(line.contains(part), "{line}");
        }
        let gave_up = json!({ "event": "gave_up", "at": "t", "reason": "destination circuit open",
                              "destination": "hooks.example:443", "since": "s", "worker_id": "w", "attempt": 1 });
        assert!(describe_entry(&gave_up).starts_with("given up at t without attempt 1: destination circuit open"));
    }

    fn row(status: Status, attempts: i32, history: Vec<Value>) -> ExecutionWithHistory {
        let at = utc("2026-03-01T12:00:00Z");
        let job_id = uuid::Uuid::nil();
        ExecutionWithHistory {
            execution: store::ledger::read::Execution {
                job_id,
                scheduled_at: at,
                execution_id: domain::execution::execution_id(job_id, at),
                fire_id: uuid::Uuid::nil(),
                trigger: Trigger::Schedule,
                status,
                attempts,
                scheduler_node: Some("node-a".into()),
                worker_id: None,
                fired_at: Some(at),
                published_at: Some(at),
                started_at: None,
                finished_at: None,
                http_status: None,
                sqs_message_id: None,
                response_excerpt: None,
                response_headers: None,
                error: None,
                reason: None,
                next_attempt_at: None,
                awaiting_until: None,
                run: None,
            },
            history: history.into_iter().map(|v| v.as_object().unwrap().clone()).collect(),
        }
    }

    #[test]
    fn a_slot_waiting_for_its_destination_says_the_circuit_is_open_and_that_it_did_not_fire() {
        let now = utc("2026-03-01T12:01:00Z");
        let waiting = json!({ "event": "waiting", "at": "2026-03-01T12:00:00.100Z", "reason": "destination circuit open",
                              "destination": "hooks.example:443", "since": "2026-03-01T11:59:50.000Z",
                              "worker_id": "w-1", "attempt": 1 });
        for status in [Status::Running, Status::Retrying] {
            let e = of_row(&row(status, if status == Status::Running { 1 } else { 0 }, vec![waiting.clone()]), now);
            assert_eq!(e.verdict, Verdict::Recorded(status));
            assert!(e.summary.starts_with("Waiting: destination circuit open for hooks.example:443"), "{}", e.summary);
            assert!(!e.fired, "no callback was made");
        }
        // A retry waiting: the earlier attempt was made.
        let attempt =
            json!({ "event": "attempt", "attempt": 1, "worker_id": "w-1", "outcome": "retrying", "http_status": 503 });
        let e = of_row(&row(Status::Retrying, 1, vec![attempt.clone(), waiting.clone()]), now);
        assert!(e.summary.contains("destination circuit open") && e.summary.contains("1 made so far"), "{}", e.summary);
        assert!(e.fired);
        // Delivered after the wait: the usual words.
        let done = json!({ "event": "attempt", "attempt": 1, "worker_id": "w-1", "outcome": "succeeded" });
        let e = of_row(&row(Status::Succeeded, 1, vec![waiting.clone(), done]), now);
        assert!(e.summary.starts_with("It fired"), "{}", e.summary);
        assert!(e.details.iter().any(|d| d.contains("destination circuit open")), "{:?}", e.details);
        // Given up past its horizon: failed, not attempted, replayable.
        let gave_up = json!({ "event": "gave_up", "at": "2026-03-01T12:05:00.000Z", "reason": "destination circuit open",
                              "destination": "hooks.example:443", "since": "2026-03-01T11:59:50.000Z",
                              "worker_id": "w-1", "attempt": 1 });
        let e = of_row(&row(Status::Failed, 0, vec![waiting, gave_up]), now);
        assert_eq!(e.verdict, Verdict::Recorded(Status::Failed));
        assert!(e.summary.starts_with("It was not delivered: destination circuit open"), "{}", e.summary);
        assert!(e.summary.contains("/replay"), "{}", e.summary);
        assert!(!e.fired);
    }
}
