//! What an operator's console shows of the ledger: delivery lateness per
//! minute (`/v1/stats/lateness`), failures grouped by error
//! (`/v1/executions/failures`) and each job's outcomes
//! (`/v1/jobs/outcomes`). Each is confined to the caller's namespaces and
//! bounded in what it reads (`store::ledger::stats`).

use std::collections::{BTreeMap, BTreeSet};

use axum::Json;
use axum::extract::State;
use chrono::{TimeDelta, Utc};
use serde::Deserialize;
use uuid::Uuid;

use store::ledger::stats;

use crate::AppState;
use crate::caller::Caller;
use crate::error::{ApiResult, field};
use crate::extract::QueryParams;
use crate::model::{
    FailureExample, FailureGroup, FailureGroups, JobOutcomes, JobOutcomesPage, LatenessBucket, LatenessStats,
};
use crate::params::int_param;
use crate::params::parse_time;

/// An unknown parameter is a 400 naming it, not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatenessQuery {
    minutes: Option<String>,
}

/// `GET /v1/stats/lateness?minutes=60`
#[utoipa::path(
    get,
    path = "/v1/stats/lateness",
    tag = "stats",
    params(
        ("minutes" = Option<i64>, Query, minimum = 1, maximum = 1440, description = "The window: the last this many minutes (default 60)"),
    ),
    responses(
        (status = 200, description = "Delivery lateness per minute of scheduled time (the first attempt's start against the slot's due instant, jitter included); read from a uniform sample of the window's rows when it holds more than about 30,000 deliveries (`sampled`)", body = crate::model::LatenessStats),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn lateness(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<LatenessQuery>,
) -> ApiResult<Json<LatenessStats>> {
    let minutes = int_param(q.minutes.as_deref(), "minutes", 1..=1440, 60)?;
    let to = Utc::now();
    let from = to - TimeDelta::minutes(minutes);
    let client = state.pg.get().await?;
    let scope = caller.scope.sql();
    let read = stats::lateness(&client, scope.as_deref(), from, to).await?;
    let buckets = read
        .minutes
        .into_iter()
        .map(|m| LatenessBucket {
            minute: m.minute,
            deliveries: m.deliveries,
            sampled_deliveries: m.sampled,
            p50_ms: m.p50_ms,
            p99_ms: m.p99_ms,
            max_ms: m.max_ms,
        })
        .collect();
    Ok(Json(LatenessStats {
        from,
        to,
        buckets,
        sampled: read.sample_rate < 1.0,
        sample_size: read.sample_size,
        sample_rate: read.sample_rate,
    }))
}

/// Most failed rows one request groups (the newest ones of the window).
pub const FAILURES_MAX_ROWS: i64 = 10_000;

/// An unknown parameter is a 400 naming it, not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailuresQuery {
    from: Option<String>,
    to: Option<String>,
    limit: Option<String>,
}

/// `GET /v1/executions/failures?from&to&limit`
#[utoipa::path(
    get,
    path = "/v1/executions/failures",
    tag = "executions",
    params(
        ("from" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled at or after (RFC 3339; default an hour before `to`)"),
        ("to" = Option<chrono::DateTime<chrono::Utc>>, Query, description = "Scheduled before (RFC 3339; default now)"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Most groups returned (default 50)"),
    ),
    responses(
        (status = 200, description = "Failed executions grouped by error, most frequent first; at most the newest 10,000 failed rows of the window are grouped (`capped` says when there were more)", body = crate::model::FailureGroups),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn failures(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<FailuresQuery>,
) -> ApiResult<Json<FailureGroups>> {
    let limit = int_param(q.limit.as_deref(), "limit", 1..=500, 50)?;
    let to = parse_time(q.to.as_deref(), "to")?.unwrap_or_else(Utc::now);
    let from = parse_time(q.from.as_deref(), "from")?.unwrap_or(to - TimeDelta::hours(1));
    if from >= to {
        return Err(field("from", "must be before `to`"));
    }
    let client = state.pg.get().await?;
    let scope = caller.scope.sql();
    let read = stats::failures(&client, scope.as_deref(), from, to, FAILURES_MAX_ROWS, limit as usize).await?;
    let ids: Vec<uuid::Uuid> = read.groups.iter().map(|g| g.example.0).collect();
    let names = store::jobs::names_of(&client, &ids).await?;
    let groups = read
        .groups
        .into_iter()
        .map(|g| {
            let (job_key, job_name) = names.of(g.example.0);
            FailureGroup {
                error: g.error,
                count: g.count,
                jobs: g.jobs,
                first_at: g.first_at,
                last_at: g.last_at,
                example: FailureExample {
                    job_id: g.example.0,
                    job_key,
                    job_name,
                    scheduled_at: g.example.1,
                    execution_id: g.example.2,
                },
            }
        })
        .collect();
    Ok(Json(FailureGroups {
        from,
        to,
        groups,
        rows_read: read.rows_read,
        capped: read.capped,
        more_groups: read.more_groups,
    }))
}

/// Most job ids one outcomes request takes.
pub const OUTCOMES_MAX_IDS: usize = 500;

/// An unknown parameter is a 400 naming it, not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutcomesQuery {
    ids: Option<String>,
    hours: Option<String>,
}

/// `GET /v1/jobs/outcomes?ids=ID,ID,...&hours=24`
#[utoipa::path(
    get,
    path = "/v1/jobs/outcomes",
    tag = "jobs",
    params(
        ("ids" = String, Query, description = "Job ids, comma-separated (1 to 500)"),
        ("hours" = Option<i64>, Query, minimum = 1, maximum = 720, description = "The period: slots of the last this many hours (default 24)"),
    ),
    responses(
        (status = 200, description = "Each job's executions over the period by status, and how many succeeded late; ids of jobs the token may not see are left out", body = crate::model::JobOutcomesPage),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn outcomes(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<OutcomesQuery>,
) -> ApiResult<Json<JobOutcomesPage>> {
    let hours = int_param(q.hours.as_deref(), "hours", 1..=720, 24)?;
    let raw = q.ids.as_deref().unwrap_or_default();
    let mut ids = BTreeSet::new();
    let count = || field("ids", format!("must name 1 to {OUTCOMES_MAX_IDS} job ids, comma-separated"));
    // Counted as they are read: a list past the limit is refused there.
    for (i, part) in raw.split(',').map(str::trim).filter(|p| !p.is_empty()).enumerate() {
        if i == OUTCOMES_MAX_IDS {
            return Err(count());
        }
        let id = part
            .parse::<Uuid>()
            .map_err(|_| field("ids", format!("{} is not a job id (UUID)", domain::text::quoted(part))))?;
        ids.insert(id);
    }
    if ids.is_empty() {
        return Err(count());
    }
    let to = Utc::now();
    let from = to - TimeDelta::hours(hours);
    let ids: Vec<Uuid> = ids.into_iter().collect();
    let client = state.pg.get().await?;
    // Deleted jobs included, as their executions stay readable.
    let visible = store::jobs::existing(&client, &ids, caller.scope.sql().as_deref()).await?;
    let read = stats::outcomes(&client, &visible, from, to).await?;
    let items: BTreeMap<Uuid, JobOutcomes> =
        visible.iter().map(|id| (*id, read.get(id).map(JobOutcomes::from).unwrap_or_default())).collect();
    Ok(Json(JobOutcomesPage { from, to, items }))
}
