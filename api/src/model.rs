//! The bodies the API answers with: the handlers build these types and the
//! OpenAPI document describes the same types (`ToSchema`), so what is
//! documented is what is sent.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use chrono::{DateTime, Utc};

use domain::execution::{serialize_instant, serialize_opt_instant};
use domain::job::{FieldError, JobSpec};

use crate::error::Problem;

/// A stored job: its definition plus server-assigned fields.
#[derive(Serialize, ToSchema)]
pub struct Job {
    #[serde(flatten)]
    pub spec: JobSpec,
    pub id: Uuid,
    /// The name its team chose (a DNS label, unique among the namespace's
    /// live jobs), usable in paths instead of the id; null for none.
    #[schema(example = "nightly-report")]
    pub key: Option<String>,
    /// The namespace the job belongs to (set at create, never changed).
    pub namespace: String,
    /// Bumped by every change; also the `ETag`, and what `If-Match` compares.
    pub version: i64,
    #[serde(serialize_with = "serialize_instant")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "serialize_instant")]
    pub updated_at: DateTime<Utc>,
    /// The next fire time; null when paused or when the schedule is exhausted.
    #[serde(serialize_with = "serialize_opt_instant")]
    pub next_fire_at: Option<DateTime<Utc>>,
    /// While the job is paused: who paused it, when and why (null when it
    /// is live). Operational state: a replace or patch of the definition
    /// keeps it, only pause and resume change it.
    pub pause: Option<PauseState>,
}

/// Who paused a job, when and why.
#[derive(Serialize, ToSchema)]
pub struct PauseState {
    /// When it was paused (null for a job paused before this was recorded).
    #[serde(serialize_with = "serialize_opt_instant")]
    pub at: Option<DateTime<Utc>>,
    /// The name of the token that paused it (a bootstrap token of
    /// `API_TOKENS` is named by its position); never the token itself.
    pub by: Option<String>,
    /// The id of that token, when it is a stored one.
    pub by_token_id: Option<Uuid>,
    /// The `note` given to the pause.
    pub note: Option<String>,
}

/// A page of jobs, ordered by id.
#[derive(Serialize, ToSchema)]
pub struct JobPage {
    pub items: Vec<Job>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<Uuid>,
}

/// A namespace: a set of jobs that tokens are scoped to, with its quotas
/// (null = no limit) and what its live jobs use of them.
#[derive(Serialize, ToSchema)]
pub struct Namespace {
    pub name: String,
    pub max_jobs: Option<i64>,
    /// The most fires per second the namespace's jobs may add up to (each
    /// job counted at the densest stretch of its schedule).
    pub max_fires_per_second: Option<f64>,
    #[serde(serialize_with = "serialize_instant")]
    pub created_at: DateTime<Utc>,
    /// Live jobs (paused ones included).
    pub jobs: i64,
    /// What the live, unpaused jobs add up to, in fires per second.
    pub peak_fires_per_second: f64,
}

/// The namespaces a token may see.
#[derive(Serialize, ToSchema)]
pub struct NamespaceList {
    pub items: Vec<Namespace>,
}

/// A stored API token, without the token itself (it is shown once, at creation).
#[derive(Serialize, ToSchema)]
pub struct TokenInfo {
    pub id: Uuid,
    pub name: String,
    pub role: crate::caller::Role,
    /// The namespaces it acts in; `["*"]` = every namespace.
    pub namespaces: Vec<String>,
    #[serde(serialize_with = "serialize_instant")]
    pub created_at: DateTime<Utc>,
    #[serde(serialize_with = "serialize_opt_instant")]
    pub revoked_at: Option<DateTime<Utc>>,
}

/// A token just made: the only response that carries the token.
#[derive(Serialize, ToSchema)]
pub struct NewToken {
    #[serde(flatten)]
    pub info: TokenInfo,
    /// Send as `Authorization: Bearer <token>`. Not stored (only its
    /// SHA-256 is), so it cannot be shown again.
    pub token: String,
}

/// The stored tokens a token may see.
#[derive(Serialize, ToSchema)]
pub struct TokenList {
    pub items: Vec<TokenInfo>,
}

/// The status of an execution (ledger row): the ledger's own enum.
pub use domain::slot::Status as ExecutionStatus;

/// The statuses a replay takes.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReplayableStatus {
    Failed,
    Pending,
    Retrying,
    Running,
}

/// One execution (a ledger row), and one with its history: the ledger's types.
pub use store::ledger::{Execution, ExecutionWithHistory};

/// An execution in a listing, with the key and name of its job, so a
/// table can say which job without a lookup per row.
#[derive(Serialize, ToSchema)]
pub struct ListedExecution {
    #[serde(flatten)]
    pub execution: Execution,
    /// The job's key (null for a job without one).
    pub job_key: Option<String>,
    /// The job's name.
    pub job_name: Option<String>,
}

/// A page of a job's executions, newest first.
#[derive(Serialize, ToSchema)]
pub struct ExecutionPage {
    pub items: Vec<ListedExecution>,
    /// Pass as `cursor` for the next page (a `scheduled_at`); null on the last page.
    pub next_cursor: Option<String>,
}

/// A page of executions across jobs, newest first.
#[derive(Serialize, ToSchema)]
pub struct ExecutionSearchPage {
    pub items: Vec<ListedExecution>,
    /// Pass as `cursor` for the next page (`{scheduled_at}|{job_id}`); null on the last page.
    pub next_cursor: Option<String>,
}

/// A JSON object.
pub type Object = serde_json::Map<String, Value>;

/// "Did it fire, and if not, why?" for one slot of a job.
#[derive(Serialize, ToSchema)]
pub struct SlotExplanation {
    pub job_id: Uuid,
    /// The instant asked about (sub-millisecond digits kept: such an
    /// instant is never a fire time).
    #[schema(value_type = chrono::DateTime<chrono::Utc>)]
    pub scheduled_at: String,
    /// The slot's ledger row; null when there is none.
    pub execution: Option<ExecutionWithHistory>,
    pub explanation: crate::explain::Explanation,
}

/// The body of a bulk replay; every field is optional.
#[derive(Serialize, ToSchema)]
pub struct ReplayRequest {
    /// Which executions: `failed` (the default), or those no process holds:
    /// `pending` once due, `retrying`, `running` on a worker presumed gone.
    pub status: Option<ReplayableStatus>,
    /// The job: its id, its key, or `namespace:key`.
    pub job_id: Option<String>,
    /// Scheduled at or after (inclusive).
    pub from: Option<chrono::DateTime<chrono::Utc>>,
    /// Scheduled before (exclusive).
    pub to: Option<chrono::DateTime<chrono::Utc>>,
    /// Only executions made by this trigger.
    pub trigger: Option<domain::slot::Trigger>,
    /// Only executions whose last error contains this text (case-insensitive).
    #[schema(min_length = 1, max_length = 500)]
    pub error_contains: Option<String>,
    /// The replayed executions' retry policy (default: each job's own).
    pub retry: Option<domain::job::RetryPolicy>,
    #[schema(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
}

/// Options of a single replay.
#[derive(Serialize, ToSchema)]
pub struct ReplayOneRequest {
    /// The replayed execution's retry policy (default: the job's own).
    pub retry: Option<domain::job::RetryPolicy>,
}

/// The executions a bulk replay moved back to `pending`.
#[derive(Serialize, ToSchema)]
pub struct ReplayResult {
    pub replayed: u64,
    pub items: Vec<Execution>,
}

/// One upcoming fire time.
#[derive(Serialize, ToSchema)]
pub struct FireTime {
    /// The slot: its scheduled instant (and execution id).
    #[serde(serialize_with = "serialize_instant")]
    pub at: DateTime<Utc>,
    /// When the slot is delivered, for a job with `jitter_ms`: `at` plus the
    /// slot's fixed offset in `[0, jitter_ms)`.
    #[schema(required = false, value_type = Option<DateTime<Utc>>)]
    #[serde(serialize_with = "serialize_opt_instant", skip_serializing_if = "Option::is_none")]
    pub fires_at: Option<DateTime<Utc>>,
    /// The same instant as wall time in the cron schedule's time zone, with
    /// its offset (cron schedules only).
    #[schema(required = false, example = "2026-03-29T03:00:00.000+02:00")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    /// The zone's UTC offset at this instant (cron schedules only).
    #[schema(required = false, example = "+02:00")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<String>,
    /// How daylight saving time bent this fire, if it did (cron schedules only).
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<DstMark>,
    /// Set when the zone's offset changes at this very instant (a DST
    /// transition); see `dst` for whether the fire was moved.
    #[schema(required = false)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dst_shift: bool,
    /// The calendar that excludes this slot: it is recorded `skipped`
    /// (reason `calendar:NAME`), not delivered.
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded_by: Option<String>,
}

/// How daylight saving time bent a cron fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DstMark {
    /// The expression names a wall time the clocks skipped (spring forward):
    /// it fires at the end of the gap, this instant.
    Gap,
    /// This wall time happens twice (fall back): it fires at this, its first
    /// occurrence, and not at the second.
    Overlap,
}

/// The next fire times of a job.
#[derive(Serialize, ToSchema)]
pub struct NextFires {
    pub job_id: Uuid,
    pub fire_times: Vec<FireTime>,
}

/// The body of `POST /v1/schedules/preview`. Unknown fields are refused.
#[derive(Serialize, ToSchema)]
pub struct SchedulePreviewRequest {
    /// A schedule as a job's `schedule`, validated the same way. An interval
    /// without `start_at` is anchored at `from`, as a job created then.
    pub schedule: domain::job::ScheduleSpec,
    /// Fire times at or after this instant; default now.
    #[schema(required = false)]
    pub from: Option<DateTime<Utc>>,
    /// How many fire times (at most the schedule's `max_runs`).
    #[schema(required = false, minimum = 1, maximum = 1000, default = 10)]
    pub count: Option<u32>,
    /// A job's `jitter_ms`: with `job_id`, each fire time shows its delivery instant `fires_at`.
    #[schema(required = false, minimum = 0, maximum = 3_600_000)]
    pub jitter_ms: Option<u64>,
    /// The job whose jitter offsets to show (they are derived from its id); it need not exist.
    #[schema(required = false)]
    pub job_id: Option<Uuid>,
    /// Names of calendars (in `namespace`) whose excluded slots are marked `excluded_by`.
    #[schema(required = false, max_items = 16)]
    pub calendars: Option<Vec<String>>,
    /// Where the calendars are looked up (default: the token's only namespace, or `default`).
    #[schema(required = false)]
    pub namespace: Option<String>,
}

/// The fire times a schedule would have.
#[derive(Serialize, ToSchema)]
pub struct SchedulePreview {
    /// The instant the fire times start at (inclusive).
    #[serde(serialize_with = "serialize_instant")]
    pub from: DateTime<Utc>,
    pub fire_times: Vec<FireTime>,
    /// Said when the answer leaves something out (jitter without a job id).
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// What a bulk action does to each job its selector matches, as the
/// single-job route of the same name would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum BulkAction {
    /// Pauses the jobs that are not paused.
    Pause,
    /// Resumes the paused jobs.
    Resume,
    /// Deletes every matched job.
    Delete,
    /// Fires every matched job once now (paused ones too, as `trigger` does).
    Trigger,
}

impl BulkAction {
    pub const ALL: [BulkAction; 4] = [BulkAction::Pause, BulkAction::Resume, BulkAction::Delete, BulkAction::Trigger];

    pub const fn as_str(self) -> &'static str {
        match self {
            BulkAction::Pause => "pause",
            BulkAction::Resume => "resume",
            BulkAction::Delete => "delete",
            BulkAction::Trigger => "trigger",
        }
    }
}

/// The body of `POST /v1/jobs/bulk`. Unknown fields are refused.
#[derive(Serialize, ToSchema)]
pub struct BulkRequest {
    pub action: BulkAction,
    /// A label selector, as `selector` of `GET /v1/jobs`; must not be empty.
    #[schema(min_length = 1, example = "team=payments,tier!=batch")]
    pub selector: String,
    /// Only jobs of this namespace (among those the token acts in).
    #[schema(required = false)]
    pub namespace: Option<String>,
}

/// What a bulk action did: all of it, or (on an error) nothing.
#[derive(Serialize, ToSchema)]
pub struct BulkResult {
    pub action: BulkAction,
    /// The selector as understood, in canonical form.
    #[schema(example = "team=payments,tier!=batch")]
    pub selector: String,
    /// Live jobs of the caller's namespaces the selector matched.
    pub matched: u64,
    /// Those the action changed: a new version for pause, resume and delete
    /// (a job already paused is not paused again, nor an active one resumed),
    /// a manual execution for trigger.
    pub changed: u64,
}

/// A live scheduler node, from its heartbeat.
#[derive(Serialize, ToSchema)]
pub struct ClusterNode {
    pub node_id: String,
    /// Jobs the node owns, as its heartbeat reported it.
    pub owned_jobs: Value,
    /// When the node last beat, as its heartbeat reported it.
    pub heartbeat_at: Value,
}

/// The cluster as the Redis shards see it.
#[derive(Serialize, ToSchema)]
pub struct Cluster {
    pub cluster: String,
    pub live_nodes: u64,
    pub nodes: Vec<ClusterNode>,
    pub redis_shards_up: u64,
    pub redis_shards: u64,
}

/// A probe's answer.
#[derive(Serialize, ToSchema)]
pub struct ProbeStatus {
    #[schema(example = "ok")]
    pub status: String,
}

/// The problem+json error responses shared by many operations, declared once.
macro_rules! problem_response {
    ($name:ident, $status:literal, $description:literal) => {
        #[doc = $description]
        #[derive(utoipa::IntoResponses)]
        #[response(status = $status, content_type = "application/problem+json")]
        #[allow(dead_code)] // only its OpenAPI description is used
        pub struct $name(Problem);
    };
}

problem_response!(BadRequest, 400, "Malformed request: body not JSON, wrong Content-Type, bad query string or header");
problem_response!(Unauthorized, 401, "No or a wrong bearer token (only when API_TOKENS is set)");
problem_response!(Forbidden, 403, "The token's role does not allow the operation");
problem_response!(JobNotFound, 404, "No such job (or the id is not a UUID)");
problem_response!(SigningKeyNotFound, 404, "No such signing key in the namespace");
problem_response!(
    CompletionTokenRejected,
    401,
    "No completion token, or not the token of an attempt of this execution"
);
problem_response!(ExecutionNotFound, 404, "No such execution");
problem_response!(
    NotAwaitingReport,
    409,
    "The attempt no longer awaits a report: it timed out (and was retried or failed), was replaced, or was reported otherwise"
);
problem_response!(SigningKeysFull, 409, "The namespace has 5 signing keys in use already; revoke one first");
problem_response!(PayloadTooLarge, 413, "The request body exceeds 256 KiB");
problem_response!(ValidationFailed, 422, "Validation failed; `errors` names each bad field");
problem_response!(
    SecretsUnconfigured,
    503,
    "No key-encryption key is configured (SECRETS_KEK), so secrets can be neither sealed nor read"
);
problem_response!(InternalError, 500, "Internal error (details only in the server log)");

/// A calendar: excluded dates, date ranges and cron rules in a time zone.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Calendar {
    pub namespace: String,
    pub name: String,
    /// Bumped by every replace.
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(flatten)]
    pub spec: domain::calendar::CalendarSpec,
}

impl From<store::calendars::Stored> for Calendar {
    fn from(s: store::calendars::Stored) -> Self {
        Calendar {
            namespace: s.namespace,
            name: s.name,
            version: s.version,
            created_at: s.created_at,
            updated_at: s.updated_at,
            spec: s.spec,
        }
    }
}

/// One page of calendars, by namespace and name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CalendarPage {
    pub items: Vec<Calendar>,
    /// Pass as `cursor` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The scheduler nodes that own a job now (`GET /v1/jobs/{id}/owners`).
#[derive(Serialize, ToSchema)]
pub struct JobOwners {
    pub job_id: Uuid,
    /// The replication factor the live nodes announce in their heartbeats
    /// (the largest, should they differ; 2 for nodes that announce none).
    pub replication_factor: u64,
    /// The live nodes that own the job by rendezvous hashing, best first:
    /// the ones that fire it (each node judged by its own factor).
    pub owners: Vec<String>,
    /// Every live node, by id.
    pub live_nodes: Vec<String>,
}

/// A worker process, from its row in `worker_heartbeats`.
#[derive(Serialize, ToSchema)]
pub struct Worker {
    pub worker_id: String,
    /// When it last heartbeat (every 5 s); one not seen for 15 s is presumed gone.
    #[serde(serialize_with = "serialize_instant")]
    pub seen_at: DateTime<Utc>,
    /// How long ago that was, by the database's clock.
    pub age_ms: i64,
}

/// The workers that heartbeat, most recently seen first.
#[derive(Serialize, ToSchema)]
pub struct WorkerList {
    pub items: Vec<Worker>,
}

/// Delivery lateness in one minute of scheduled time.
#[derive(Serialize, ToSchema)]
pub struct LatenessBucket {
    /// The minute (its first instant).
    #[serde(serialize_with = "serialize_instant")]
    pub minute: DateTime<Utc>,
    /// Slots of the minute whose first attempt started; when the answer is
    /// `sampled`, an estimate (the minute's sampled rows ÷ `sample_rate`).
    pub deliveries: u64,
    /// The minute's rows the percentiles are computed from (= `deliveries`
    /// unless sampled).
    pub sampled_deliveries: u64,
    /// Lateness percentiles (nearest rank) and maximum, in milliseconds: the
    /// first attempt's start against the slot's due instant (its scheduled
    /// time plus the job's jitter offset).
    pub p50_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
}

/// Delivery lateness per minute (`GET /v1/stats/lateness`).
#[derive(Serialize, ToSchema)]
pub struct LatenessStats {
    #[serde(serialize_with = "serialize_instant")]
    pub from: DateTime<Utc>,
    #[serde(serialize_with = "serialize_instant")]
    pub to: DateTime<Utc>,
    /// Minutes with at least one delivery, oldest first.
    pub buckets: Vec<LatenessBucket>,
    /// Whether only a sample of the window's rows was read (a window of
    /// more than about 30,000 deliveries).
    pub sampled: bool,
    /// Rows the answer is computed from.
    pub sample_size: u64,
    /// The share of the window's rows read (1 when not sampled).
    pub sample_rate: f64,
}

/// The latest failure of a group.
#[derive(Serialize, ToSchema)]
pub struct FailureExample {
    pub job_id: Uuid,
    /// The job's key (null for a job without one).
    pub job_key: Option<String>,
    /// The job's name.
    pub job_name: Option<String>,
    #[serde(serialize_with = "serialize_instant")]
    pub scheduled_at: DateTime<Utc>,
    pub execution_id: String,
}

/// Failed executions with the same error text.
#[derive(Serialize, ToSchema)]
pub struct FailureGroup {
    /// The last attempt's error (credentials redacted); null when none was recorded.
    pub error: Option<String>,
    pub count: u64,
    /// Distinct jobs among them.
    pub jobs: u64,
    #[serde(serialize_with = "serialize_instant")]
    pub first_at: DateTime<Utc>,
    #[serde(serialize_with = "serialize_instant")]
    pub last_at: DateTime<Utc>,
    pub example: FailureExample,
}

/// Failed executions grouped by error (`GET /v1/executions/failures`).
#[derive(Serialize, ToSchema)]
pub struct FailureGroups {
    #[serde(serialize_with = "serialize_instant")]
    pub from: DateTime<Utc>,
    #[serde(serialize_with = "serialize_instant")]
    pub to: DateTime<Utc>,
    /// Most frequent first.
    pub groups: Vec<FailureGroup>,
    /// Failed rows grouped.
    pub rows_read: u64,
    /// The window holds more failed rows than are read (`rows_read`, the
    /// newest): counts are those of the newest failures only.
    pub capped: bool,
    /// Groups left out beyond `limit`.
    pub more_groups: u64,
}

/// A job's executions over a period, by status (`GET /v1/jobs/outcomes`).
#[derive(Serialize, ToSchema, Default)]
pub struct JobOutcomes {
    pub succeeded: u64,
    pub failed: u64,
    pub retrying: u64,
    pub running: u64,
    pub pending: u64,
    pub skipped: u64,
    pub missed: u64,
    /// Of `succeeded`, those whose first attempt started more than 1 s
    /// after the slot's due instant (with the job's jitter).
    pub late: u64,
}

impl From<&store::ledger::stats::Outcomes> for JobOutcomes {
    fn from(o: &store::ledger::stats::Outcomes) -> Self {
        use domain::slot::Status;
        let mut out = JobOutcomes { late: o.late, ..Default::default() };
        for (status, n) in &o.by_status {
            // Exhaustive: a new status fails to compile here until it has a field.
            let field = match status {
                Status::Succeeded => &mut out.succeeded,
                Status::Failed => &mut out.failed,
                Status::Retrying => &mut out.retrying,
                Status::Running => &mut out.running,
                Status::Pending => &mut out.pending,
                Status::Skipped => &mut out.skipped,
                Status::Missed => &mut out.missed,
            };
            *field += n;
        }
        out
    }
}

/// Outcomes of several jobs, by job id.
#[derive(Serialize, ToSchema)]
pub struct JobOutcomesPage {
    #[serde(serialize_with = "serialize_instant")]
    pub from: DateTime<Utc>,
    #[serde(serialize_with = "serialize_instant")]
    pub to: DateTime<Utc>,
    /// One entry per id asked for that names a job the token may see
    /// (deleted ones included); others are left out.
    pub items: std::collections::BTreeMap<Uuid, JobOutcomes>,
}

/// The body of `POST /v1/jobs/batch`.
#[derive(Serialize, ToSchema)]
pub struct BatchRequest {
    /// 1 to 1,000 job definitions, each as the body of `POST /v1/jobs`.
    #[schema(min_items = 1, max_items = 1000)]
    pub jobs: Vec<JobSpec>,
    /// All or nothing: any invalid job refuses the whole batch (default false:
    /// the valid jobs are created, the others answered with why).
    #[schema(required = false, default = false)]
    pub atomic: Option<bool>,
}

/// One job's outcome in a batch, at its index in the request.
#[derive(Serialize, ToSchema)]
pub struct BatchItem {
    pub index: usize,
    /// 201 created; 422 invalid; 409 over its namespace's quota.
    pub status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<Job>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
}

/// What a batch created and refused.
#[derive(Serialize, ToSchema)]
pub struct BatchResult {
    pub created: usize,
    pub refused: usize,
    pub items: Vec<BatchItem>,
}

/// The body of an apply (every field optional).
#[derive(Serialize, ToSchema)]
pub struct ApplyRequest {
    /// Namespace of the documents that name none, and the only one pruned
    /// (default: the token's only namespace, or `default`; every one of
    /// the token's namespaces is pruned when absent).
    pub namespace: Option<String>,
    /// Job documents: a create body with a `key` (required), at most 10,000.
    pub jobs: Vec<Object>,
    /// Calendar documents: a calendar body with its `name` (and optional
    /// `namespace`), at most 1,000. Applied before the jobs; never pruned.
    pub calendars: Vec<Object>,
    pub prune: Option<PruneRequest>,
    /// Validate and answer, write nothing.
    pub dry_run: Option<bool>,
}

/// Which jobs an apply deletes when no document names them.
#[derive(Serialize, ToSchema)]
pub struct PruneRequest {
    /// A label selector (required, not empty): the keyed jobs it matches
    /// that no document names are deleted. Jobs without a key never are.
    #[schema(example = "team=payments")]
    pub selector: String,
}

/// What an apply did (or, for a dry run, would do).
#[derive(Serialize, ToSchema)]
pub struct ApplyResult {
    pub dry_run: bool,
    /// Calendars first, then the jobs in the documents' order, then the
    /// jobs pruned.
    pub items: Vec<ApplyItem>,
    pub summary: ApplySummary,
}

/// What an apply did with one document (or one pruned job).
#[derive(Serialize, ToSchema)]
pub struct ApplyItem {
    /// `job` or `calendar`.
    pub kind: &'static str,
    pub namespace: String,
    /// A job's key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A calendar's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A job's id (null for a calendar, and for a job a dry run would create).
    pub id: Option<Uuid>,
    /// A job's version after the apply (null for a calendar, a job a dry run
    /// would create, and a pruned job).
    pub version: Option<i64>,
    pub result: crate::routes::jobs::apply::Outcome,
    /// For a changed job or calendar: what changed, secret values masked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<domain::diff::Change>>,
}

/// How many documents had each outcome.
#[derive(Serialize, ToSchema)]
pub struct ApplySummary {
    pub created: usize,
    pub changed: usize,
    pub unchanged: usize,
    pub deleted: usize,
}
