//! Backfills: a job's past slots run on request (`POST
//! /v1/jobs/{id}/backfill`), at a bounded rate and concurrency, by the
//! schedulers (`scheduler/src/backfill.rs`); listed, read with their
//! progress, and cancelled here. A dry run lists the slots a backfill would
//! run and writes nothing.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use uuid::Uuid;

use domain::backfill::{self, Mode};
use domain::execution::serialize_instant;
use domain::job::{JobSpec, Overlap};
use domain::slot::Status;
use store::audit::{self, Action};
use store::backfills::{self, Backfill};

use crate::AppState;
use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JobIdPath, JsonBody, PathParams, QueryParams};
use crate::params::{not_found, parse_time};

/// Most slots a dry run lists (it counts them all).
const DRY_RUN_LISTED_MAX: usize = 1_000;

/// A backfill as the API shows it.
#[derive(Serialize, ToSchema)]
pub struct BackfillView {
    pub id: Uuid,
    pub job_id: Uuid,
    /// The job's key (null for a job without one).
    pub job_key: Option<String>,
    pub namespace: String,
    #[serde(serialize_with = "serialize_instant")]
    pub from: DateTime<Utc>,
    #[serde(serialize_with = "serialize_instant")]
    pub to: DateTime<Utc>,
    pub slots: Mode,
    /// `oldest_first` or `newest_first`.
    pub order: &'static str,
    pub rate_per_second: f64,
    pub max_concurrency: u32,
    /// The overlap policy its executions follow; null: the job's own.
    pub overlap: Option<Overlap>,
    pub state: backfill::State,
    pub progress: Progress,
    #[serde(serialize_with = "serialize_instant")]
    pub created_at: DateTime<Utc>,
    /// The name of the token that made it.
    pub created_by: String,
    #[serde(serialize_with = "domain::execution::serialize_opt_instant")]
    pub finished_at: Option<DateTime<Utc>>,
}

/// Where a backfill stands.
#[derive(Serialize, ToSchema)]
pub struct Progress {
    /// Slots in its plan.
    pub planned: usize,
    /// Slots not handled yet.
    pub remaining: usize,
    /// Slots handled without a run: the mode did not take them (a row
    /// already there for `missing`, not failed for `failed`) or in flight.
    pub passed_over: usize,
    /// Runs started and not finished yet.
    pub in_flight: i64,
    pub succeeded: i64,
    pub failed: i64,
    /// Runs decided without a delivery (skipped by an overlap policy, ...).
    pub skipped: i64,
}

async fn view(client: &impl deadpool_postgres::GenericClient, b: Backfill) -> ApiResult<BackfillView> {
    let statuses = store::ledger::changes::backfilled_statuses(client, b.id, b.job_id, b.from, b.to).await?;
    let (job_key, _) = store::jobs::names_of(client, &[b.job_id]).await?.of(b.job_id);
    let count = |s: &[Status]| s.iter().map(|s| statuses.get(s).copied().unwrap_or(0)).sum::<i64>();
    let progress = Progress {
        planned: b.slots.len(),
        remaining: b.remaining().len(),
        passed_over: b.passed_over,
        in_flight: count(&[Status::Pending, Status::Running, Status::Retrying]),
        succeeded: count(&[Status::Succeeded]),
        failed: count(&[Status::Failed]),
        skipped: count(&[Status::Skipped, Status::Missed]),
    };
    Ok(BackfillView {
        id: b.id,
        job_id: b.job_id,
        job_key,
        namespace: b.namespace,
        from: b.from,
        to: b.to,
        slots: b.mode,
        order: if b.newest_first { "newest_first" } else { "oldest_first" },
        rate_per_second: b.rate_per_second,
        max_concurrency: b.max_concurrency,
        overlap: b.overlap,
        state: b.state,
        progress,
        created_at: b.created_at,
        created_by: b.created_by,
        finished_at: b.finished_at,
    })
}

/// The body of a backfill.
#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BackfillRequest {
    /// The first instant of the range (RFC 3339); slots at it count.
    pub from: String,
    /// The last instant of the range; slots at it count. Not in the future:
    /// the schedule fires those.
    pub to: String,
    /// Which slots run: `missing` (no ledger row; the default), `failed`, or
    /// `all` (every slot not in flight, succeeded ones again).
    pub slots: Option<String>,
    /// `oldest_first` (the default) or `newest_first`.
    pub order: Option<String>,
    /// Most slots started per second (0.01 to 1,000; default 10).
    pub rate_per_second: Option<f64>,
    /// Most of its runs in flight at once (1 to 100; default 5).
    pub max_concurrency: Option<u32>,
    /// `allow`, `forbid` or `replace`; default: the job's own policy.
    pub overlap: Option<String>,
    /// List the slots it would run; write nothing.
    pub dry_run: Option<bool>,
}

/// What a dry run would do.
#[derive(Serialize, ToSchema)]
pub struct BackfillPlan {
    pub dry_run: bool,
    pub job_id: Uuid,
    /// Slots of the schedule in the range.
    pub planned: usize,
    /// Of those, the ones the mode would run now.
    pub would_run: usize,
    /// The first of them (at most 1,000), in the order they would run.
    #[schema(value_type = Vec<String>)]
    pub slots: Vec<String>,
}

/// A backfill made (201) or planned (200, dry run).
pub enum Made {
    Backfill(Box<BackfillView>),
    Plan(BackfillPlan),
}

impl IntoResponse for Made {
    fn into_response(self) -> Response {
        match self {
            Made::Backfill(b) => (StatusCode::CREATED, Json(b)).into_response(),
            Made::Plan(p) => (StatusCode::OK, Json(p)).into_response(),
        }
    }
}

fn parse_request(body: &Value) -> ApiResult<BackfillRequest> {
    serde_json::from_value(body.clone()).map_err(|e| field("", format!("invalid backfill request: {e}")))
}

#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/backfill",
    tag = "jobs",
    description = "Runs the job's past slots in a range: those without a ledger row (`missing`), those that \
                   failed, or all of them, at a bounded rate and concurrency, each under the slot's own execution \
                   id with trigger `backfill`. Durable: any scheduler carries it on, and a slot is never run twice \
                   by it. One running backfill per job. With `dry_run`, the slots it would run.",
    params(("id" = String, Path, description = "The job: its id, its key, or namespace:key")),
    request_body(content = BackfillRequest, content_type = "application/json"),
    responses(
        (status = 201, description = "The backfill, running", body = BackfillView),
        (status = 200, description = "A dry run: the slots it would run", body = BackfillPlan),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        (status = 409, description = "The job has a running backfill", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    JsonBody(body): JsonBody,
) -> ApiResult<Made> {
    let request = parse_request(&body)?;
    let dry_run = request.dry_run.unwrap_or(false);
    caller.require(if dry_run { Role::Read } else { Role::Write })?;
    let from = parse_time(Some(&request.from), "from")?.expect("given");
    let to = parse_time(Some(&request.to), "to")?.expect("given");
    if from > to {
        return Err(field("from", "must not be after `to`"));
    }
    if to > Utc::now() {
        return Err(field("to", "is in the future: the schedule fires those slots; backfill past ones"));
    }
    let mode = match request.slots.as_deref() {
        None => Mode::Missing,
        Some(s) => Mode::parse(s).ok_or_else(|| field("slots", "must be one of missing, failed, all"))?,
    };
    let newest_first = match request.order.as_deref() {
        None | Some("oldest_first") => false,
        Some("newest_first") => true,
        Some(_) => return Err(field("order", "must be oldest_first or newest_first")),
    };
    let rate = request.rate_per_second.unwrap_or(backfill::RATE_DEFAULT);
    if !(backfill::RATE_MIN..=backfill::RATE_MAX).contains(&rate) {
        return Err(field("rate_per_second", format!("must be from {} to {}", backfill::RATE_MIN, backfill::RATE_MAX)));
    }
    let concurrency = request.max_concurrency.unwrap_or(backfill::CONCURRENCY_DEFAULT);
    if !(1..=backfill::CONCURRENCY_MAX).contains(&concurrency) {
        return Err(field("max_concurrency", format!("must be from 1 to {}", backfill::CONCURRENCY_MAX)));
    }
    let overlap = match request.overlap.as_deref() {
        None => None,
        Some("allow") => Some(Overlap::Allow),
        Some("forbid") => Some(Overlap::Forbid),
        Some("replace") => Some(Overlap::Replace),
        Some(_) => return Err(field("overlap", "must be one of allow, forbid, replace")),
    };
    let mut client = state.pg.get().await?;
    let job = store::jobs::get(&client, id, caller.scope.sql().as_deref()).await?.ok_or_else(|| not_found(id))?;
    let spec: JobSpec = serde_json::from_value(job.spec.clone())?;
    let schedule = spec.compile(job.created_at).map_err(|e| ApiError::Internal(anyhow::anyhow!("{e:?}")))?;
    let slots = backfill::plan(&schedule, from, to, newest_first, backfill::SLOTS_MAX).map_err(|_| {
        field(
            "from",
            format!("the range holds more than {} slots of the job; narrow it (or run several)", backfill::SLOTS_MAX),
        )
    })?;
    if dry_run {
        let rows = store::ledger::changes::slots_with_rows(&client, id, &slots).await?;
        let in_flight = |s: &Option<Status>| matches!(s, Some(Status::Pending | Status::Running | Status::Retrying));
        let would: Vec<&DateTime<Utc>> = slots
            .iter()
            .filter(|at| match (mode, rows.get(at)) {
                (Mode::Missing, row) => row.is_none(),
                (Mode::Failed, Some(status)) => *status == Some(Status::Failed),
                (Mode::Failed, None) => false,
                (Mode::All, Some(status)) => !in_flight(status),
                (Mode::All, None) => true,
            })
            .collect();
        return Ok(Made::Plan(BackfillPlan {
            dry_run: true,
            job_id: id,
            planned: slots.len(),
            would_run: would.len(),
            slots: would.iter().take(DRY_RUN_LISTED_MAX).map(|at| domain::execution::format_instant(**at)).collect(),
        }));
    }
    let tx = client.transaction().await?;
    let new = Backfill {
        id: Uuid::now_v7(),
        job_id: id,
        namespace: job.namespace.clone(),
        from,
        to,
        mode,
        newest_first,
        rate_per_second: rate,
        max_concurrency: concurrency,
        overlap,
        slots,
        next_index: 0,
        passed_over: 0,
        state: backfill::State::Running,
        next_at: Utc::now(),
        created_at: Utc::now(),
        created_by: caller.actor.author().name.to_owned(),
        finished_at: None,
    };
    let made = backfills::create(&tx, &new).await?.ok_or_else(|| {
        ApiError::Conflict(format!("job {id} has a running backfill; cancel it or wait for it to finish"))
    })?;
    let entry = audit::Entry::job(Action::JobBackfill, &job.namespace, id, None).with_details(serde_json::json!({
        "backfill_id": made.id, "from": domain::execution::format_instant(from),
        "to": domain::execution::format_instant(to), "slots": mode.as_str(), "planned": made.slots.len(),
    }));
    audit::record(&tx, &caller.audit(None), &[entry]).await?;
    tx.commit().await?;
    tracing::info!(backfill.id = %made.id, job.id = %id, planned = made.slots.len(), mode = mode.as_str(), "backfill made");
    Ok(Made::Backfill(Box::new(view(&client, made).await?)))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this job's backfills (its id, key or namespace:key).
    job: Option<String>,
    /// At most this many, newest first (1 to 100; default 20).
    limit: Option<String>,
}

/// A page of backfills, newest first.
#[derive(Serialize, ToSchema)]
pub struct BackfillPage {
    pub items: Vec<BackfillView>,
}

#[utoipa::path(
    get,
    path = "/v1/backfills",
    tag = "jobs",
    params(ListQuery),
    responses(
        (status = 200, description = "Backfills, newest first", body = BackfillPage),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<ListQuery>,
) -> ApiResult<Json<BackfillPage>> {
    let limit = crate::params::int_param(q.limit.as_deref(), "limit", 1..=100, 20)?;
    let job = crate::params::parse_job_filter(&state, &caller, "job", q.job.as_deref()).await?;
    let client = state.pg.get().await?;
    let scope = caller.scope.sql();
    let mut items = Vec::new();
    for b in backfills::list(&client, job, scope.as_deref(), limit).await? {
        items.push(view(&client, b).await?);
    }
    Ok(Json(BackfillPage { items }))
}

fn no_backfill(id: Uuid) -> ApiError {
    ApiError::NotFound(format!("no backfill {id}"))
}

#[utoipa::path(
    get,
    path = "/v1/backfills/{id}",
    tag = "jobs",
    params(("id" = Uuid, Path, description = "The backfill's id")),
    responses(
        (status = 200, description = "The backfill and its progress", body = BackfillView),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        (status = 404, description = "No such backfill", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<Uuid>,
) -> ApiResult<Json<BackfillView>> {
    let client = state.pg.get().await?;
    let b = backfills::get(&client, id, caller.scope.sql().as_deref()).await?.ok_or_else(|| no_backfill(id))?;
    Ok(Json(view(&client, b).await?))
}

#[utoipa::path(
    post,
    path = "/v1/backfills/{id}/cancel",
    tag = "jobs",
    description = "Stops a running backfill: no further slot starts; the runs already started finish. A finished \
                   backfill is answered as it is.",
    params(("id" = Uuid, Path, description = "The backfill's id")),
    responses(
        (status = 200, description = "The backfill, cancelled (or as it was, when already finished)", body = BackfillView),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        (status = 404, description = "No such backfill", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<Uuid>,
) -> ApiResult<Json<BackfillView>> {
    caller.require(Role::Write)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let scope = caller.scope.sql();
    let was_running = backfills::get(&tx, id, scope.as_deref()).await?.ok_or_else(|| no_backfill(id))?.state
        == backfill::State::Running;
    let b = backfills::cancel(&tx, id, scope.as_deref()).await?.ok_or_else(|| no_backfill(id))?;
    if was_running {
        let entry = audit::Entry::job(Action::JobBackfillCancel, &b.namespace, b.job_id, None)
            .with_details(serde_json::json!({ "backfill_id": id }));
        audit::record(&tx, &caller.audit(None), &[entry]).await?;
    }
    tx.commit().await?;
    Ok(Json(view(&client, b).await?))
}
