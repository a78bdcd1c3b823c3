//! Ledger rows: a job's executions, newest first.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_postgres::Row;

use common::execution::format_instant;
use common::ledger::Status;

use crate::AppState;
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JobIdPath, JsonBody, PathParams, QueryParams};
use crate::routes::jobs::parse_limit;

pub fn execution_json(r: &Row) -> Value {
    let t = |name: &str| r.get::<_, Option<DateTime<Utc>>>(name).map(format_instant);
    json!({
        "job_id": r.get::<_, uuid::Uuid>("job_id"),
        "scheduled_at": format_instant(r.get("scheduled_at")),
        "execution_id": r.get::<_, String>("execution_id"),
        "fire_id": r.get::<_, uuid::Uuid>("fire_id"),
        "trigger": r.get::<_, String>("trigger"),
        "status": r.get::<_, String>("status"),
        "attempts": r.get::<_, i32>("attempts"),
        "scheduler_node": r.get::<_, Option<String>>("scheduler_node"),
        "worker_id": r.get::<_, Option<String>>("worker_id"),
        "fired_at": t("fired_at"),
        "published_at": t("published_at"),
        "started_at": t("started_at"),
        "finished_at": t("finished_at"),
        "http_status": r.get::<_, Option<i32>>("http_status"),
        "sqs_message_id": r.get::<_, Option<String>>("sqs_message_id"),
        "response_excerpt": r.get::<_, Option<String>>("response_excerpt"),
        "error": r.get::<_, Option<String>>("error"),
        "reason": r.get::<_, Option<String>>("reason"),
    })
}

/// A ledger row with its `history` (migrations/V3), as the explain endpoint
/// shows it.
pub fn execution_with_history(r: &Row) -> Value {
    let mut v = execution_json(r);
    v["history"] = r.get::<_, Value>("history");
    v
}

#[derive(Deserialize)]
pub struct ExecQuery {
    status: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

fn parse_cursor(raw: Option<&str>) -> ApiResult<Option<DateTime<Utc>>> {
    match raw {
        None | Some("") => Ok(None),
        Some(c) => DateTime::parse_from_rfc3339(c)
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|_| field("cursor", "is not a cursor returned by this endpoint")),
    }
}

#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/executions",
    tag = "executions",
    params(
        ("id" = uuid::Uuid, Path, description = "The job id"),
        ("status" = Option<crate::openapi::ExecutionStatus>, Query, description = "Only executions in this status"),
        ("from" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled at or after (RFC 3339)"),
        ("to" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled before (RFC 3339)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "The job's executions, newest first", body = crate::openapi::ExecutionPage),
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
        crate::openapi::JobNotFound,
        crate::openapi::ValidationFailed,
        crate::openapi::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn of_job(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    QueryParams(q): QueryParams<ExecQuery>,
) -> ApiResult<Json<Value>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let before = parse_cursor(q.cursor.as_deref())?;
    let status = parse_status(q.status.as_deref(), &Status::ALL)?.map(Status::as_str);
    let from = parse_time(q.from.as_deref(), "from")?;
    let to = parse_time(q.to.as_deref(), "to")?;
    let client = state.pg.get().await?;
    // A deleted job's history stays readable; an unknown id is a 404.
    if client.query_opt("SELECT 1 FROM jobs WHERE id = $1", &[&id]).await?.is_none() {
        return Err(crate::routes::jobs::not_found(id));
    }
    let rows = client
        .query(
            "SELECT * FROM scheduled_jobs WHERE job_id = $1 AND ($2::timestamptz IS NULL OR scheduled_at < $2)
               AND ($3::text IS NULL OR status = $3)
               AND ($4::timestamptz IS NULL OR scheduled_at >= $4) AND ($5::timestamptz IS NULL OR scheduled_at < $5)
             ORDER BY scheduled_at DESC LIMIT $6",
            &[&id, &before, &status, &from, &to, &(limit + 1)],
        )
        .await?;
    let has_more = rows.len() as i64 > limit;
    let items: Vec<Value> = rows.iter().take(limit as usize).map(execution_json).collect();
    let next_cursor = has_more.then(|| items.last().map(|e| e["scheduled_at"].clone())).flatten();
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}

#[derive(Deserialize)]
pub struct AllQuery {
    status: Option<String>,
    job_id: Option<String>,
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

fn parse_status(raw: Option<&str>, allowed: &[Status]) -> ApiResult<Option<Status>> {
    match raw.map(str::parse::<Status>) {
        None => Ok(None),
        Some(Ok(s)) if allowed.contains(&s) => Ok(Some(s)),
        Some(_) => Err(field("status", format!("must be one of {}", Status::list(allowed)))),
    }
}

fn parse_time(raw: Option<&str>, name: &str) -> ApiResult<Option<DateTime<Utc>>> {
    raw.map(|s| {
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|_| field(name, "must be an RFC 3339 timestamp such as 2026-12-15T15:00:00Z"))
    })
    .transpose()
}

fn parse_job_id(raw: Option<&str>) -> ApiResult<Option<uuid::Uuid>> {
    raw.map(|s| s.parse::<uuid::Uuid>().map_err(|_| field("job_id", "must be a job id (UUID)"))).transpose()
}

/// `GET /v1/executions`: ledger rows across jobs, newest first, filtered by
/// status, job and scheduled time (`from` inclusive, `to` exclusive).
#[utoipa::path(
    get,
    path = "/v1/executions",
    tag = "executions",
    params(
        ("status" = Option<crate::openapi::ExecutionStatus>, Query, description = "Only executions in this status"),
        ("job_id" = Option<uuid::Uuid>, Query, description = "Only executions of this job"),
        ("from" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled at or after (RFC 3339)"),
        ("to" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled before (RFC 3339)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
    ),
    responses(
        (status = 200, description = "Executions across jobs, newest first", body = crate::openapi::ExecutionSearchPage),
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
        crate::openapi::ValidationFailed,
        crate::openapi::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn all(State(state): State<AppState>, QueryParams(q): QueryParams<AllQuery>) -> ApiResult<Json<Value>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let status = parse_status(q.status.as_deref(), &Status::ALL)?.map(Status::as_str);
    let job_id = parse_job_id(q.job_id.as_deref())?;
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
    let (cursor_t, cursor_id) = (cursor.map(|c| c.0), cursor.map(|c| c.1));
    let client = state.pg.get().await?;
    let rows = client
        .query(
            "SELECT * FROM scheduled_jobs
             WHERE ($1::text IS NULL OR status = $1) AND ($2::uuid IS NULL OR job_id = $2)
               AND ($3::timestamptz IS NULL OR scheduled_at >= $3) AND ($4::timestamptz IS NULL OR scheduled_at < $4)
               AND ($5::timestamptz IS NULL OR (scheduled_at, job_id) < ($5, $6))
             ORDER BY scheduled_at DESC, job_id DESC LIMIT $7",
            &[&status, &job_id, &from, &to, &cursor_t, &cursor_id, &(limit + 1)],
        )
        .await?;
    let has_more = rows.len() as i64 > limit;
    let items: Vec<Value> = rows.iter().take(limit as usize).map(execution_json).collect();
    let next_cursor = if has_more {
        items.last().map(|e| {
            format!("{}|{}", e["scheduled_at"].as_str().unwrap_or_default(), e["job_id"].as_str().unwrap_or_default())
        })
    } else {
        None
    };
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}

/// SQL predicate on a ledger row `l` in one of `Status::REPLAYABLE`: no
/// process holds it: a `pending` row of a due slot, a `retrying` row, a
/// `running` row whose worker is presumed gone. A fresh fire id makes any
/// copy still on its way a duplicate that workers drop, so a replay never
/// delivers twice.
fn replayable_row() -> String {
    format!(
        "((l.status <> 'pending' OR l.scheduled_at <= now()) AND (l.status <> 'running' OR {}))",
        common::ledger::WORKER_PRESUMED_GONE
    )
}

/// Moves the selected rows back to `pending` under a fresh fire id, keeping
/// the execution id and the attempt count, and publishes them as their next
/// attempt. Returns the replayed rows.
async fn replay_where(
    state: &AppState,
    statuses: &[Status],
    job_id: Option<uuid::Uuid>,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    max: i64,
) -> ApiResult<Vec<Value>> {
    let entry = json!([common::ledger::history_entry("replay", Utc::now(), json!({}))]);
    let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let rows = tx
        .query(
            &format!("WITH picked AS (
                 SELECT l.job_id, l.scheduled_at FROM scheduled_jobs l JOIN jobs j ON j.id = l.job_id AND j.deleted_at IS NULL
                 WHERE l.status = ANY($1) AND {replayable} AND ($2::uuid IS NULL OR l.job_id = $2)
                   AND ($3::timestamptz IS NULL OR l.scheduled_at >= $3) AND ($4::timestamptz IS NULL OR l.scheduled_at < $4)
                 ORDER BY l.scheduled_at LIMIT $5 FOR UPDATE OF l SKIP LOCKED)
             UPDATE scheduled_jobs l SET status = 'pending', fire_id = gen_random_uuid(), published_at = NULL,
                    finished_at = NULL, next_attempt_at = NULL, reason = 'replay', fired_at = now(),
                    scheduler_node = 'api', job_version = (SELECT version FROM jobs WHERE id = l.job_id),
                    history = l.history || $6::jsonb
             FROM picked WHERE l.job_id = picked.job_id AND l.scheduled_at = picked.scheduled_at
             RETURNING l.*", replayable = replayable_row()),
            &[&statuses, &job_id, &from, &to, &max, &entry],
        )
        .await?;
    let messages = crate::routes::jobs::fire_messages(&tx, &rows).await?;
    tx.commit().await?;
    crate::routes::jobs::publish(state, &messages).await;
    Ok(rows.iter().map(execution_json).collect())
}

/// The `{job_id}/{scheduled_at}` path segments naming one slot: an id that
/// is not a UUID names no job (404); a bad instant is a 422 on `scheduled_at`.
pub fn parse_slot(job: &str, at: &str) -> ApiResult<(uuid::Uuid, DateTime<Utc>)> {
    let job_id = job.parse::<uuid::Uuid>().map_err(|_| ApiError::NotFound(format!("no job with id {job:?}")))?;
    let at = DateTime::parse_from_rfc3339(at)
        .map_err(|_| field("scheduled_at", "must be an RFC 3339 timestamp such as 2026-12-15T15:00:00.000Z"))?
        .with_timezone(&Utc);
    Ok((job_id, at))
}

/// `POST /v1/executions/{job_id}/{scheduled_at}/replay`
#[utoipa::path(
    post,
    path = "/v1/executions/{job_id}/{scheduled_at}/replay",
    tag = "executions",
    params(
        ("job_id" = uuid::Uuid, Path, description = "The job id"),
        ("scheduled_at" = chrono::DateTime<chrono::Utc>, Path, description = "The slot (RFC 3339)"),
    ),
    responses(
        (status = 202, description = "The execution, back to pending under a new fire id", body = crate::openapi::Execution),
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
        (status = 404, description = "No such execution", body = crate::openapi::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The execution is held by a process (running on a live worker, pending before its slot) or already succeeded or decided, or its job is deleted", body = crate::openapi::Problem, content_type = "application/problem+json"),
        crate::openapi::ValidationFailed,
        crate::openapi::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn replay_one(
    State(state): State<AppState>,
    PathParams((job, at)): PathParams<(String, String)>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let (job_id, at) = parse_slot(&job, &at)?;
    let replayed = replay_where(
        &state,
        &Status::REPLAYABLE,
        Some(job_id),
        Some(at),
        Some(at + chrono::TimeDelta::microseconds(1)),
        1,
    )
    .await?;
    match replayed.into_iter().next() {
        Some(row) => Ok((StatusCode::ACCEPTED, Json(row))),
        None => {
            let client = state.pg.get().await?;
            let row = client
                .query_opt("SELECT status FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at = $2", &[&job_id, &at])
                .await?;
            Err(match row {
                None => ApiError::NotFound(format!("no execution of job {job_id} scheduled at {}", format_instant(at))),
                Some(r) => ApiError::Conflict(format!(
                    "the execution is {}; replay takes executions of existing jobs that failed, or that no \
                     process holds: pending once due, retrying, or running on a worker presumed gone",
                    r.get::<_, &str>(0)
                )),
            })
        }
    }
}

/// `POST /v1/executions/replay` with `{status?, job_id?, from?, to?, limit?}`:
/// replays executions in bulk (oldest first, at most `limit`, default 100)
/// in one status (default `failed`; `pending`, `retrying` and `running`
/// take only rows no process holds).
#[utoipa::path(
    post,
    path = "/v1/executions/replay",
    tag = "executions",
    request_body(content = crate::openapi::ReplayRequest, content_type = "application/json"),
    responses(
        (status = 202, description = "The failed executions moved back to pending", body = crate::openapi::ReplayResult),
        crate::openapi::BadRequest,
        crate::openapi::Unauthorized,
        crate::openapi::PayloadTooLarge,
        crate::openapi::ValidationFailed,
        crate::openapi::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn replay_many(
    State(state): State<AppState>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let obj = body.as_object().ok_or_else(|| field("", "the request body must be a JSON object"))?;
    for key in obj.keys() {
        if !["status", "job_id", "from", "to", "limit"].contains(&key.as_str()) {
            return Err(field(key, "unknown field; expected one of: status, job_id, from, to, limit"));
        }
    }
    let text = |k: &str| -> ApiResult<Option<&str>> {
        match obj.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(field(k, "must be a string")),
        }
    };
    let status = parse_status(text("status")?, &Status::REPLAYABLE)?.unwrap_or(Status::Failed);
    let job_id = parse_job_id(text("job_id")?)?;
    let from = parse_time(text("from")?, "from")?;
    let to = parse_time(text("to")?, "to")?;
    let limit = match obj.get("limit") {
        None | Some(Value::Null) => 100,
        Some(v) => match v.as_i64() {
            Some(n) if (1..=1000).contains(&n) => n,
            _ => return Err(field("limit", "must be an integer from 1 to 1000")),
        },
    };
    let replayed = replay_where(&state, &[status], job_id, from, to, limit).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "replayed": replayed.len(), "items": replayed }))))
}
