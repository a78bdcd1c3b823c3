//! Ledger rows: a job's executions, newest first.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_postgres::Row;

use common::execution::format_instant;

use crate::AppState;
use crate::error::{ApiResult, field};
use crate::extract::{JobIdPath, QueryParams};
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

#[derive(Deserialize)]
pub struct ExecQuery {
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

pub async fn of_job(
    State(state): State<AppState>,
    JobIdPath(id): JobIdPath,
    QueryParams(q): QueryParams<ExecQuery>,
) -> ApiResult<Json<Value>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let before = parse_cursor(q.cursor.as_deref())?;
    let client = state.pg.get().await?;
    // A deleted job's history stays readable; an unknown id is a 404.
    if client.query_opt("SELECT 1 FROM jobs WHERE id = $1", &[&id]).await?.is_none() {
        return Err(crate::routes::jobs::not_found(id));
    }
    let rows = client
        .query(
            "SELECT * FROM scheduled_jobs WHERE job_id = $1 AND ($2::timestamptz IS NULL OR scheduled_at < $2)
             ORDER BY scheduled_at DESC LIMIT $3",
            &[&id, &before, &(limit + 1)],
        )
        .await?;
    let has_more = rows.len() as i64 > limit;
    let items: Vec<Value> = rows.iter().take(limit as usize).map(execution_json).collect();
    let next_cursor = has_more.then(|| items.last().map(|e| e["scheduled_at"].clone())).flatten();
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}
