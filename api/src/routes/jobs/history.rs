//! A job's history and its undo: `GET /v1/jobs/{id}/versions` lists every
//! version the job has had (from `job_changes`) with who made it, why and
//! what it changed; `POST /v1/jobs/{id}/rollback` makes a new version whose
//! definition is an old one's. A rollback is a replace: today's validation,
//! quotas and calendar references apply, the job's state (paused or live)
//! stays, and it is audited as `job.rollback`. Secret header values come
//! back from the old version's sealed values (sealed for this job, so they
//! open as they did).

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use domain::diff::Change;
use store::audit::{self, Action};

use super::{Change as JobChange, VersionedJob, check_version, if_match, job_of, lock_for_change, parsed, update_job};
use crate::AppState;
use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JobIdPath, JsonBody};
use crate::params::not_found;
use crate::routes::audit::AuditActor;

/// One version of a job.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobVersion {
    pub version: i64,
    /// From when it was in force (the slots due from then on were its).
    pub valid_from: DateTime<Utc>,
    /// `live`, `paused` or `deleted`.
    pub state: String,
    /// Who made it; null for a version the cluster made itself (a delete
    /// after completion) or one made before the audit log existed.
    pub author: Option<AuditActor>,
    /// The audited action that made it (`job.replace`, `job.pause`, …).
    pub action: Option<String>,
    pub reason: Option<String>,
    pub request_id: Option<String>,
    /// The definition (secret header values shown as `***`).
    #[schema(value_type = Object)]
    pub definition: Value,
    /// What differs from the version before it.
    #[schema(value_type = Vec<Object>)]
    pub changes: Vec<Change>,
}

/// Every version of a job, oldest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct JobVersions {
    pub job_id: Uuid,
    pub versions: Vec<JobVersion>,
}

#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/versions",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The job id (a deleted job's history is read too)")),
    responses(
        (status = 200, description = "Every version, oldest first, with its author and its changes", body = JobVersions),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn versions(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
) -> ApiResult<Json<JobVersions>> {
    let client = state.pg.get().await?;
    let scope = caller.scope.sql();
    let stored = audit::versions(&client, id, scope.as_deref()).await?.ok_or_else(|| not_found(id))?;
    let mut previous: Option<Value> = None;
    let mut versions = Vec::with_capacity(stored.len());
    for v in stored {
        let changes = domain::diff::changes(previous.as_ref(), Some(&v.spec));
        let (author, action, reason, request_id) = match v.change {
            Some(c) => (
                Some(AuditActor { name: c.actor_name, token_id: c.actor_token }),
                Some(c.action),
                c.reason,
                Some(c.request_id),
            ),
            None => (None, None, None, None),
        };
        versions.push(JobVersion {
            version: v.version,
            valid_from: v.valid_from,
            state: v.state,
            author,
            action,
            reason,
            request_id,
            definition: domain::diff::masked(&v.spec),
            changes,
        });
        previous = Some(v.spec);
    }
    Ok(Json(JobVersions { job_id: id, versions }))
}

/// The body of a rollback.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
pub struct RollbackRequest {
    /// The version whose definition the job takes again.
    pub version: i64,
    /// Why (at most 500 characters), recorded in the audit log.
    pub note: Option<String>,
}

#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/rollback",
    tag = "jobs",
    params(
        ("id" = Uuid, Path, description = "The job id"),
        ("If-Match" = Option<String>, Header, description = "Roll back only if the job is at this version (its `ETag`)"),
    ),
    request_body(content = RollbackRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The job at a new version whose definition is the old one's; `ETag` is the new version", body = crate::model::Job),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        (status = 412, description = "The job is not at the version `If-Match` names", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn rollback(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult<VersionedJob> {
    caller.require(Role::Write)?;
    let expected = if_match(&headers)?;
    let request = parse_request(&body)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let before = lock_for_change(&tx, &caller, id).await?;
    check_version(id, &before, expected)?;
    let scope = caller.scope.sql();
    let (old, _) = audit::version_spec(&tx, id, request.version, scope.as_deref())
        .await?
        .ok_or_else(|| field("version", format!("job {id} has no version {}", request.version)))?;
    if request.version == before.version {
        return Err(field("version", format!("is the job's current version ({})", before.version)));
    }
    // Today's rules: the old definition is validated again, as a replace's body.
    let mut definition = parsed(&old, &state.limits).map_err(|e| match e {
        ApiError::Validation(errors) => ApiError::Validation(
            errors
                .into_iter()
                .map(|mut e| {
                    e.message = format!("version {} no longer passes: {}", request.version, e.message);
                    e
                })
                .collect(),
        ),
        e => e,
    })?;
    definition.spec.paused = before.paused;
    let change = JobChange {
        caller: &caller,
        action: Action::JobRollback,
        note: request.note.as_deref(),
        details: Some(serde_json::json!({ "to_version": request.version, "from_version": before.version })),
    };
    let stored = update_job(&state, &tx, change, id, &before, definition).await?;
    tx.commit().await?;
    tracing::info!(job.id = %id, to_version = request.version, version = stored.version, "job rolled back");
    Ok(VersionedJob(job_of(&stored, Utc::now())?))
}

fn parse_request(body: &Value) -> ApiResult<RollbackRequest> {
    let map = body.as_object().ok_or_else(|| field("", "the request body must be a JSON object"))?;
    if let Some(unknown) = map.keys().find(|k| !["version", "note"].contains(&k.as_str())) {
        return Err(field(unknown, "unknown field; expected version, note"));
    }
    let version = map
        .get("version")
        .and_then(Value::as_i64)
        .filter(|v| *v >= 1)
        .ok_or_else(|| field("version", "is required: a version number of the job (1 or more)"))?;
    let note = match map.get("note") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(field("note", "must be a string")),
    };
    super::check_pause_note(note.as_deref())?;
    Ok(RollbackRequest { version, note })
}
