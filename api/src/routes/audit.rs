//! `GET /v1/audit`: who changed what, when and why, newest first (admins,
//! their namespaces' entries; an admin of every namespace also reads the
//! cluster's own: namespaces, tokens of every namespace). Nothing in the
//! API changes or deletes an entry; the retention sweep of the schedulers
//! drops those older than `AUDIT_RETENTION_DAYS`.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use domain::diff::Change;
use store::audit;

use crate::AppState;
use crate::caller::{Caller, Role};
use crate::error::{ApiResult, field};
use crate::extract::QueryParams;
use crate::params::{parse_limit, parse_time};

/// Who made a change: a token's name and, for a stored token, its id
/// (never the token).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditActor {
    pub name: String,
    pub token_id: Option<Uuid>,
}

/// One change made through the API.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Increasing with each entry: the cursor of the next page.
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The namespace changed in; null for the cluster itself.
    pub namespace: Option<String>,
    pub actor: AuditActor,
    /// The request's `X-Request-Id` (or one the API made), as echoed in its response.
    pub request_id: String,
    /// `resource.verb`: job.create, job.replace, job.patch, job.pause, job.resume,
    /// job.delete, job.trigger, job.rollback, job.apply, execution.replay, calendar.put,
    /// calendar.delete, namespace.create|update|delete, token.create|revoke,
    /// signing_key.create|rotate|revoke, alert_channel.create|delete,
    /// alert_rule.create|update|delete.
    pub action: String,
    pub resource: String,
    pub resource_id: String,
    pub job_id: Option<Uuid>,
    /// The job version the change made.
    pub job_version: Option<i64>,
    /// The `note` given, or the request's `X-Audit-Reason`.
    pub reason: Option<String>,
    /// What a change of something other than a job's definition was
    /// (never a secret).
    #[schema(value_type = Option<Object>)]
    pub details: Option<Value>,
    /// A job change: what differs from the version before (secret values
    /// masked); the whole definition for a create.
    #[schema(value_type = Vec<Object>)]
    pub changes: Vec<Change>,
}

impl AuditEntry {
    pub fn of(r: audit::Record) -> AuditEntry {
        let changes = match r.job_version {
            Some(_) if r.spec_before.is_some() || r.spec_after.is_some() => {
                let before = if r.action == audit::Action::JobCreate.as_str() { None } else { r.spec_before.as_ref() };
                domain::diff::changes(before, r.spec_after.as_ref())
            }
            _ => Vec::new(),
        };
        AuditEntry {
            id: r.id,
            at: r.at,
            namespace: r.namespace,
            actor: AuditActor { name: r.actor_name, token_id: r.actor_token },
            request_id: r.request_id,
            action: r.action,
            resource: r.resource,
            resource_id: r.resource_id,
            job_id: r.job_id,
            job_version: r.job_version,
            reason: r.reason,
            details: r.details,
            changes,
        }
    }
}

/// A page of the log, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditPage {
    pub items: Vec<AuditEntry>,
    /// Pass as `cursor` for the older entries; null on the last page.
    pub next_cursor: Option<String>,
}

/// An unknown parameter is a 400 naming it, not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    namespace: Option<String>,
    job: Option<String>,
    actor: Option<String>,
    action: Option<String>,
    since: Option<String>,
    until: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "audit",
    params(
        ("namespace" = Option<String>, Query, description = "Only this namespace's entries"),
        ("job" = Option<String>, Query, description = "Only this job's entries (its id, key or namespace:key)"),
        ("actor" = Option<String>, Query, description = "Only changes by this token (its name or id)"),
        ("action" = Option<String>, Query, example = "job.pause",
         description = "Only this action (`job.pause`), or every action on a resource (`job`)"),
        ("since" = Option<DateTime<Utc>>, Query, description = "Entries at or after this RFC 3339 instant"),
        ("until" = Option<DateTime<Utc>>, Query, description = "Entries before this RFC 3339 instant"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)"),
    ),
    responses(
        (status = 200, description = "Entries, newest first", body = AuditPage),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<AuditQuery>,
) -> ApiResult<Json<AuditPage>> {
    caller.require(Role::Admin)?;
    let limit = parse_limit(q.limit.as_deref())?;
    crate::params::namespace_param(q.namespace.as_deref())?;
    let job_id = crate::params::parse_job_filter(&state, &caller, "job", q.job.as_deref()).await?;
    let before_id = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => Some(c.parse::<i64>().map_err(|_| field("cursor", "is not a cursor returned by this endpoint"))?),
    };
    if let Some(action) = q.action.as_deref()
        && audit::Action::parse(action).is_none()
        && !audit::Action::ALL.iter().any(|a| a.resource() == action)
    {
        return Err(field("action", "is neither an action (such as job.pause) nor a resource (such as job)"));
    }
    for (name, value) in [("actor", q.actor.as_deref())] {
        if value.is_some_and(|v| v.contains('\0')) {
            return Err(field(name, "must not contain a NUL character"));
        }
    }
    let scope = caller.scope.sql();
    let filter = audit::Filter {
        scope: scope.as_deref(),
        namespace: q.namespace.as_deref(),
        job_id,
        actor: q.actor.as_deref(),
        action: q.action.as_deref(),
        since: parse_time(q.since.as_deref(), "since")?,
        until: parse_time(q.until.as_deref(), "until")?,
        before_id,
        limit: limit + 1,
    };
    let client = state.pg.get().await?;
    let mut rows = audit::list(&client, &filter).await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = more.then(|| rows.last().map(|r| r.id.to_string())).flatten();
    Ok(Json(AuditPage { items: rows.into_iter().map(AuditEntry::of).collect(), next_cursor }))
}
