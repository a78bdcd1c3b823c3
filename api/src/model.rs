//! The bodies the API answers with: the handlers build these types and the
//! OpenAPI document describes the same types (`ToSchema`), so what is
//! documented is what is sent.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use chrono::{DateTime, Utc};

use common::execution::{serialize_instant, serialize_opt_instant};
use common::job::{FieldError, JobSpec};

/// A stored job: its definition plus server-assigned fields.
#[derive(Serialize, ToSchema)]
pub struct Job {
    #[serde(flatten)]
    pub spec: JobSpec,
    pub id: Uuid,
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
    pub role: crate::auth::Role,
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
pub use common::ledger::Status as ExecutionStatus;

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
pub use common::ledger::{Execution, ExecutionWithHistory};

/// A page of a job's executions, newest first.
#[derive(Serialize, ToSchema)]
pub struct ExecutionPage {
    pub items: Vec<Execution>,
    /// Pass as `cursor` for the next page (a `scheduled_at`); null on the last page.
    pub next_cursor: Option<String>,
}

/// A page of executions across jobs, newest first.
#[derive(Serialize, ToSchema)]
pub struct ExecutionSearchPage {
    pub items: Vec<Execution>,
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
    pub job_id: Option<Uuid>,
    /// Scheduled at or after (inclusive).
    pub from: Option<chrono::DateTime<chrono::Utc>>,
    /// Scheduled before (exclusive).
    pub to: Option<chrono::DateTime<chrono::Utc>>,
    #[schema(minimum = 1, maximum = 1000, default = 100)]
    pub limit: Option<i64>,
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
    #[serde(serialize_with = "serialize_instant")]
    pub at: DateTime<Utc>,
    /// The same instant in the cron job's time zone (cron jobs only).
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local: Option<String>,
    /// Set when this fire's local offset differs from a millisecond before (DST).
    #[schema(required = false)]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dst_shift: bool,
}

/// The next fire times of a job.
#[derive(Serialize, ToSchema)]
pub struct NextFires {
    pub job_id: Uuid,
    pub fire_times: Vec<FireTime>,
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

/// An error (RFC 9457), sent as `application/problem+json`.
#[derive(Serialize, ToSchema)]
pub struct Problem {
    #[serde(rename = "type")]
    #[schema(example = "about:blank")]
    pub kind: String,
    #[schema(example = "Invalid request")]
    pub title: String,
    #[schema(example = 422)]
    pub status: u16,
    pub detail: String,
    /// Present on validation errors (422): one entry per bad field.
    #[schema(required = false)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
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
problem_response!(PayloadTooLarge, 413, "The request body exceeds 256 KiB");
problem_response!(ValidationFailed, 422, "Validation failed; `errors` names each bad field");
problem_response!(InternalError, 500, "Internal error (details only in the server log)");
