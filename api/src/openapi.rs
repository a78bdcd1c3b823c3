//! The OpenAPI 3 document, generated from the handlers' `#[utoipa::path]`
//! attributes and the model's `ToSchema` derives; served at `/openapi.json`
//! with Swagger UI at `/docs`. The response types here describe the JSON the
//! handlers build (they are documentation, not what the handlers construct).

use serde::Serialize;
use serde_json::Value;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Discriminator, RefOr, Schema};
use utoipa::{Modify, OpenApi, ToSchema};
use uuid::Uuid;

use common::job::{
    FieldError, HttpTarget, JobSpec, MisfirePolicy, RetryPolicy, ScheduleKind, ScheduleSpec, SqsTarget, Target,
};

/// Path of the generated document.
pub const SPEC_PATH: &str = "/openapi.json";
/// Path of the Swagger UI.
pub const DOCS_PATH: &str = "/docs";

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
    pub errors: Vec<FieldError>,
}

/// A stored job: its definition plus server-assigned fields.
#[derive(Serialize, ToSchema)]
pub struct Job {
    #[serde(flatten)]
    pub spec: JobSpec,
    pub id: Uuid,
    /// Bumped by every change; also the `ETag`, and what `If-Match` compares.
    pub version: i64,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub updated_at: chrono::DateTime<chrono::Utc>,
    /// The next fire time; null when paused or when the schedule is exhausted.
    pub next_fire_at: Option<chrono::DateTime<chrono::Utc>>,
}

/// A page of jobs, ordered by id.
#[derive(Serialize, ToSchema)]
pub struct JobPage {
    pub items: Vec<Job>,
    /// Pass as `cursor` for the next page; null on the last page.
    pub next_cursor: Option<Uuid>,
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

/// One execution: a ledger row of `scheduled_jobs`.
#[derive(Serialize, ToSchema)]
pub struct Execution {
    pub job_id: Uuid,
    pub scheduled_at: chrono::DateTime<chrono::Utc>,
    /// `{job_id}@{scheduled_at}`, or with `#manual` for a manual trigger.
    pub execution_id: String,
    pub fire_id: Uuid,
    /// What created the row (`schedule`, `manual`, ...).
    pub trigger: String,
    pub status: ExecutionStatus,
    pub attempts: i32,
    pub scheduler_node: Option<String>,
    pub worker_id: Option<String>,
    pub fired_at: Option<chrono::DateTime<chrono::Utc>>,
    /// When the broker confirmed the message. Stays null when a worker had
    /// already started the row by then (the stamp only serves the outbox
    /// sweep, which looks at pending rows).
    pub published_at: Option<chrono::DateTime<chrono::Utc>>,
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub http_status: Option<i32>,
    pub sqs_message_id: Option<String>,
    pub response_excerpt: Option<String>,
    pub error: Option<String>,
    pub reason: Option<String>,
}

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

/// A ledger row with its history.
#[derive(Serialize, ToSchema)]
pub struct ExecutionWithHistory {
    #[serde(flatten)]
    pub execution: Execution,
    /// What happened to the slot, oldest first. Each entry has `event`:
    /// `attempt` (`attempt`, `worker_id`, `started_at`, `finished_at`,
    /// `outcome`, `http_status`, `sqs_message_id`, `error`, `redelivered`),
    /// `skipped` (`at`, `reason`), `recovered` (`at`), `released` (`at`,
    /// `attempt`, `worker_id`: a worker gave back an attempt it did not
    /// deliver) or `replay` (`at`).
    pub history: Vec<Object>,
}

/// A JSON object.
pub type Object = serde_json::Map<String, Value>;

/// "Did it fire, and if not, why?" for one slot of a job.
#[derive(Serialize, ToSchema)]
pub struct SlotExplanation {
    pub job_id: Uuid,
    pub scheduled_at: chrono::DateTime<chrono::Utc>,
    /// The slot's ledger row; null when there is none.
    pub execution: Option<ExecutionWithHistory>,
    pub explanation: crate::routes::explain::Explanation,
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
    pub at: chrono::DateTime<chrono::Utc>,
    /// The same instant in the cron job's time zone (cron jobs only).
    #[schema(required = false)]
    pub local: String,
    /// Set when this fire's local offset differs from a millisecond before (DST).
    #[schema(required = false)]
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

/// Prometheus metrics in the text exposition format (served by the binary
/// beside the router).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses((status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain"))
)]
pub async fn metrics_doc() {}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI document", body = Object, content_type = "application/json"))
)]
pub async fn spec_doc() {}

/// Adds the bearer scheme and the `kind` discriminators.
struct Tweaks;

impl Modify for Tweaks {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        // `kind` tells the variants of the tagged unions apart.
        for name in ["ScheduleKind", "Target"] {
            if let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(name) {
                one_of.discriminator = Some(Discriminator::new("kind"));
            }
        }
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("One of the server's API_TOKENS (auth is off when none are set)"))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "cronshard",
        description = "The cronshard REST API (v1): distributed job scheduling. Errors are application/problem+json.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    paths(
        crate::routes::jobs::create,
        crate::routes::jobs::list,
        crate::routes::jobs::get,
        crate::routes::jobs::replace,
        crate::routes::jobs::delete,
        crate::routes::jobs::pause,
        crate::routes::jobs::resume,
        crate::routes::jobs::next,
        crate::routes::jobs::trigger,
        crate::routes::executions::of_job,
        crate::routes::explain::explain,
        crate::routes::executions::all,
        crate::routes::executions::replay_many,
        crate::routes::executions::replay_one,
        crate::routes::cluster::status,
        crate::routes::health::healthz,
        crate::routes::health::readyz,
        metrics_doc,
        spec_doc,
    ),
    components(schemas(
        JobSpec,
        ScheduleSpec,
        ScheduleKind,
        Target,
        HttpTarget,
        SqsTarget,
        RetryPolicy,
        MisfirePolicy,
        FieldError,
        Problem,
        Job,
        JobPage,
        Execution,
        ExecutionStatus,
        ExecutionPage,
        ExecutionSearchPage,
        ExecutionWithHistory,
        SlotExplanation,
        crate::routes::explain::Explanation,
        crate::routes::explain::Verdict,
        ReplayRequest,
        ReplayableStatus,
        ReplayResult,
        NextFires,
        FireTime,
        Cluster,
        ClusterNode,
        ProbeStatus,
    )),
    modifiers(&Tweaks),
    tags(
        (name = "jobs", description = "Job definitions"),
        (name = "executions", description = "Outcome rows (the ledger)"),
        (name = "cluster", description = "Scheduler nodes"),
        (name = "operations", description = "Probes, metrics and this document; open, no token")
    )
)]
pub struct ApiDoc;

/// The generated document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enum_values(schema: &str) -> Vec<String> {
        let doc = serde_json::to_value(document()).unwrap();
        doc["components"]["schemas"][schema]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{schema} is not an enum schema"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }

    /// The documented sets are the ledger's.
    #[test]
    fn documented_statuses_are_the_ledgers() {
        let all: Vec<String> = ExecutionStatus::ALL.iter().map(|s| s.to_string()).collect();
        assert_eq!(enum_values("ExecutionStatus"), all);
        let replayable: Vec<String> = ExecutionStatus::REPLAYABLE.iter().map(|s| s.to_string()).collect();
        assert_eq!(enum_values("ReplayableStatus"), replayable);
    }
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
problem_response!(JobNotFound, 404, "No such job (or the id is not a UUID)");
problem_response!(PayloadTooLarge, 413, "The request body exceeds 256 KiB");
problem_response!(ValidationFailed, 422, "Validation failed; `errors` names each bad field");
problem_response!(InternalError, 500, "Internal error (details only in the server log)");
