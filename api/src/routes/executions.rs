//! Ledger rows: a job's executions, newest first.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;

use domain::execution::format_instant;
use domain::slot::{Status, Trigger};
use store::ledger::Execution;
use store::ledger::changes::{self, ReplaySelection};
use store::ledger::read::{self, Filter};

use store::audit;

use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JobIdPath, JsonBody, OptionalJsonBody, PathParams, QueryParams};
use crate::model::{ExecutionPage, ExecutionSearchPage, ReplayResult};
use crate::params::{not_found, parse_cursor, parse_job_filter, parse_limit, parse_slot, parse_status, parse_time};
use crate::{AppState, tenancy};

/// An unknown parameter is a 400 naming it, not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecQuery {
    status: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/executions",
    tag = "executions",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
        ("status" = Option<crate::model::ExecutionStatus>, Query, description = "Only executions in this status"),
        ("from" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled at or after (RFC 3339)"),
        ("to" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled before (RFC 3339)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "The job's executions, newest first", body = crate::model::ExecutionPage),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn of_job(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    QueryParams(q): QueryParams<ExecQuery>,
) -> ApiResult<Json<ExecutionPage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let before = parse_cursor(q.cursor.as_deref())?;
    let status = parse_status(q.status.as_deref(), &Status::ALL)?;
    let from = parse_time(q.from.as_deref(), "from")?;
    let to = parse_time(q.to.as_deref(), "to")?;
    let client = state.pg.get().await?;
    // A deleted job's history stays readable; an unknown id is a 404.
    if !tenancy::job_visible(&client, id, &caller.scope).await? {
        return Err(not_found(id));
    }
    let filter = Filter { namespaces: None, job_id: Some(id), status, from, to };
    let (items, more) = read::list(&client, &filter, before.map(|t| (t, None)), limit).await?;
    let next_cursor = more.then(|| items.last().map(|e| format_instant(e.scheduled_at))).flatten();
    Ok(Json(ExecutionPage { items: with_job_names(&client, items).await?, next_cursor }))
}

/// Listed executions with their jobs' keys and names (one lookup a page).
async fn with_job_names(
    client: &impl deadpool_postgres::GenericClient,
    items: Vec<Execution>,
) -> ApiResult<Vec<crate::model::ListedExecution>> {
    let mut ids: Vec<uuid::Uuid> = items.iter().map(|e| e.job_id).collect();
    ids.sort_unstable();
    ids.dedup();
    let names = store::jobs::names_of(client, &ids).await?;
    Ok(items
        .into_iter()
        .map(|execution| {
            let (job_key, job_name) = names.of(execution.job_id);
            crate::model::ListedExecution { execution, job_key, job_name }
        })
        .collect())
}

/// An unknown parameter is a 400 naming it, not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllQuery {
    status: Option<String>,
    job_id: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

/// `GET /v1/executions`: ledger rows across jobs, newest first, filtered by
/// status, job and scheduled time (`from` inclusive, `to` exclusive).
#[utoipa::path(
    get,
    path = "/v1/executions",
    tag = "executions",
    params(
        ("status" = Option<crate::model::ExecutionStatus>, Query, description = "Only executions in this status"),
        ("job_id" = Option<String>, Query, description = "Only executions of this job (its id, key or namespace:key)"),
        ("from" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled at or after (RFC 3339)"),
        ("to" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled before (RFC 3339)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "Executions across jobs, newest first", body = crate::model::ExecutionSearchPage),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn all(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<AllQuery>,
) -> ApiResult<Json<ExecutionSearchPage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let status = parse_status(q.status.as_deref(), &Status::ALL)?;
    let job_id = parse_job_filter(&state, &caller, "job_id", q.job_id.as_deref()).await?;
    let from = parse_time(q.from.as_deref(), "from")?;
    let to = parse_time(q.to.as_deref(), "to")?;
    // The cursor is the last row's (scheduled_at, job_id).
    let cursor = match q.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => {
            let (t, id) =
                c.split_once('|').ok_or_else(|| field("cursor", "is not a cursor returned by this endpoint"))?;
            let t = DateTime::parse_from_rfc3339(t)
                .map_err(|_| field("cursor", "is not a cursor returned by this endpoint"))?;
            let id =
                id.parse::<uuid::Uuid>().map_err(|_| field("cursor", "is not a cursor returned by this endpoint"))?;
            Some((t.with_timezone(&Utc), id))
        }
    };
    let client = state.pg.get().await?;
    let filter = Filter { namespaces: caller.scope.sql(), job_id, status, from, to };
    let (items, more) = read::list(&client, &filter, cursor.map(|(t, id)| (t, Some(id))), limit).await?;
    let next_cursor =
        more.then(|| items.last().map(|e| format!("{}|{}", format_instant(e.scheduled_at), e.job_id))).flatten();
    Ok(Json(ExecutionSearchPage { items: with_job_names(&client, items).await?, next_cursor }))
}

/// Replays the selected rows (see `ledger::changes::replay`) and publishes
/// each as its next attempt once committed. Returns the replayed rows. A
/// replay is a fire made on request: the rows it takes are spent from their
/// namespaces' budgets (`quota::spend_manual_fires`) before the commit, all
/// or none; over a budget nothing is replayed.
async fn replay_where(state: &AppState, caller: &Caller, selection: ReplaySelection) -> ApiResult<Vec<Execution>> {
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let (replayed, messages) = changes::replay(&tx, &selection).await?;
    if !replayed.is_empty() {
        let ids: Vec<uuid::Uuid> = replayed.iter().map(|e| e.job_id).collect();
        let fires = store::jobs::count_by_namespace(&tx, &ids).await?;
        crate::quota::spend_manual_fires(state, &tx, &fires).await?;
        let namespaces = store::jobs::namespaces_of(&tx, &ids).await?;
        let entries: Vec<audit::Entry> = replayed
            .iter()
            .map(|e| {
                let namespace = namespaces.get(&e.job_id).map(String::as_str).unwrap_or("default");
                audit::Entry::job(audit::Action::ExecutionReplay, namespace, e.job_id, None)
                    .with_details(serde_json::json!({ "execution_id": e.execution_id, "scheduled_at": e.scheduled_at }))
            })
            .collect();
        audit::record(&tx, &caller.audit(None), &entries).await?;
    }
    tx.commit().await?;
    // The publish takes a connection of its own: this one goes back first.
    drop(client);
    state.publish(&messages).await;
    Ok(replayed)
}

/// `POST /v1/executions/{job_id}/{scheduled_at}/replay`
#[utoipa::path(
    post,
    path = "/v1/executions/{job_id}/{scheduled_at}/replay",
    tag = "executions",
    params(
        ("job_id" = String, Path, description = "The job: its id, its key, or namespace:key"),
        ("scheduled_at" = chrono::DateTime<chrono::Utc>, Path, description = "The slot (RFC 3339)"),
    ),
    request_body(content = Option<crate::model::ReplayOneRequest>, description = "Optional: `{retry}`, the replayed execution's retry policy (default: the job's)", content_type = "application/json"),
    responses(
        (status = 202, description = "The execution, back to pending under a new fire id, with a fresh retry budget", body = crate::model::Execution),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        (status = 404, description = "No such execution", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The execution is held by a process (running on a live worker, pending before its slot) or already succeeded or decided, or its job is deleted; or its namespace's `max_fires_per_second` is 0", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "Over a namespace's `max_fires_per_second`, which replays count against; nothing was replayed. `Retry-After` says when they fit", body = crate::error::Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds until the namespaces' budgets have room"))),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn replay_one(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((job, at)): PathParams<(String, String)>,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<(StatusCode, Json<Execution>)> {
    caller.require(Role::Write)?;
    let (job_id, at) = parse_slot(&state, &caller, &job, &at).await?;
    let retry = match &body {
        Some(body) => {
            let obj = body.as_object().ok_or_else(|| field("", "the request body must be a JSON object"))?;
            if let Some(key) = obj.keys().find(|k| *k != "retry") {
                return Err(field(key, "unknown field; expected: retry"));
            }
            retry_policy(obj)?
        }
        None => None,
    };
    let no_execution =
        || ApiError::NotFound(format!("no execution of job {job_id} scheduled at {}", format_instant(at)));
    if !tenancy::job_visible(&state.pg.get().await?, job_id, &caller.scope).await? {
        return Err(no_execution());
    }
    let selection = ReplaySelection {
        statuses: Status::REPLAYABLE.to_vec(),
        filter: Filter {
            namespaces: None,
            job_id: Some(job_id),
            status: None,
            from: Some(at),
            to: Some(at + chrono::TimeDelta::microseconds(1)),
        },
        error_contains: None,
        triggers: None,
        retry,
        max: 1,
        slots: None,
        backfill: None,
    };
    let replayed = replay_where(&state, &caller, selection).await?;
    match replayed.into_iter().next() {
        Some(row) => Ok((StatusCode::ACCEPTED, Json(row))),
        None => {
            let client = state.pg.get().await?;
            Err(match changes::status_of(&client, job_id, at).await? {
                None => no_execution(),
                Some(status) => ApiError::Conflict(format!(
                    "the execution is {}; replay takes executions of existing jobs that failed, or that no \
                     process holds: pending once due, retrying, or running on a worker presumed gone",
                    status
                )),
            })
        }
    }
}

/// A replay's own `retry` fields, validated like a job's policy: the fields
/// given override the job's, field by field (`None`: the job's policy).
fn retry_policy(obj: &serde_json::Map<String, Value>) -> ApiResult<Option<Value>> {
    match obj.get("retry") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            // Every field is optional here (the job's fills the gap);
            // `max_retries`, required in a job's policy, is checked when given.
            let mut checked = v.clone();
            if let Some(obj) = checked.as_object_mut() {
                obj.entry("max_retries").or_insert(0.into());
            }
            domain::job::RetryPolicy::from_json(&checked).map_err(ApiError::Validation)?;
            Ok(Some(v.clone()))
        }
    }
}

/// Longest `error_contains` a bulk replay takes.
const ERROR_FILTER_MAX_CHARS: usize = 500;

/// `POST /v1/executions/replay` with `{status?, job_id?, from?, to?,
/// trigger?, error_contains?, retry?, limit?}`: replays executions in bulk
/// (oldest first, at most `limit`, default 100) in one status (default
/// `failed`; `pending`, `retrying` and `running` take only rows no process
/// holds), each with a fresh retry budget (`retry`, or the job's policy).
#[utoipa::path(
    post,
    path = "/v1/executions/replay",
    tag = "executions",
    request_body(content = crate::model::ReplayRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "The failed executions moved back to pending", body = crate::model::ReplayResult),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        (status = 409, description = "The replay would make more fires at once in a namespace than its `max_fires_per_second` ever allows (a smaller `limit` fits)", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "Over a namespace's `max_fires_per_second`, which replays count against; nothing was replayed. `Retry-After` says when they fit", body = crate::error::Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds until the namespaces' budgets have room"))),

        crate::model::PayloadTooLarge,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn replay_many(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<ReplayResult>)> {
    caller.require(Role::Write)?;
    let obj = body.as_object().ok_or_else(|| field("", "the request body must be a JSON object"))?;
    const FIELDS: [&str; 8] = ["status", "job_id", "from", "to", "trigger", "error_contains", "retry", "limit"];
    if let Some(key) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(field(key, format!("unknown field; expected one of: {}", FIELDS.join(", "))));
    }
    let text = |k: &str| -> ApiResult<Option<&str>> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(field(k, "must be a string")),
        }
    };
    let status = parse_status(text("status")?, &Status::REPLAYABLE)?.unwrap_or(Status::Failed);
    let job_id = parse_job_filter(&state, &caller, "job_id", text("job_id")?).await?;
    let from = parse_time(text("from")?, "from")?;
    let to = parse_time(text("to")?, "to")?;
    let limit = match obj.get("limit") {
        None | Some(Value::Null) => 100,
        Some(v) => match v.as_i64() {
            Some(n) if (1..=1000).contains(&n) => n,
            _ => return Err(field("limit", "must be an integer from 1 to 1000")),
        },
    };
    let triggers = match text("trigger")? {
        None => None,
        Some(t) => Some(vec![Trigger::ALL.into_iter().find(|k| k.as_str() == t).ok_or_else(|| {
            field("trigger", format!("must be one of: {}", Trigger::ALL.map(|k| k.as_str()).join(", ")))
        })?]),
    };
    let error_contains = match text("error_contains")? {
        Some(e) if e.is_empty() || e.chars().count() > ERROR_FILTER_MAX_CHARS => {
            return Err(field("error_contains", format!("must be 1 to {ERROR_FILTER_MAX_CHARS} characters")));
        }
        // Postgres text cannot hold one: a 500 otherwise (found by the API fuzzer).
        Some(e) if e.contains('\0') => return Err(field("error_contains", "must not contain a NUL character")),
        e => e.map(str::to_owned),
    };
    let selection = ReplaySelection {
        statuses: vec![status],
        filter: Filter { namespaces: caller.scope.sql(), job_id, status: None, from, to },
        error_contains,
        triggers,
        retry: retry_policy(obj)?,
        max: limit,
        slots: None,
        backfill: None,
    };
    let items = replay_where(&state, &caller, selection).await?;
    Ok((StatusCode::ACCEPTED, Json(ReplayResult { replayed: items.len() as u64, items })))
}
