//! `GET /v1/jobs/{id}/executions/{scheduled_at}`: reads the job and the
//! slot's ledger row and answers with the explanation `crate::explain`
//! derives from them.

use axum::Json;
use axum::extract::State;
use chrono::Utc;

use domain::execution::format_instant;

use crate::caller::Caller;
use crate::error::ApiResult;
use crate::explain::{JobFacts, absent, of_row, show};
use crate::extract::PathParams;
use crate::model::SlotExplanation;
use crate::params::{not_found, parse_slot};
use crate::{AppState, tenancy};

#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/executions/{scheduled_at}",
    tag = "executions",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
        ("scheduled_at" = chrono::DateTime<chrono::Utc>, Path, description = "The slot (RFC 3339), e.g. 2026-12-15T15:00:00.000Z"),
    ),
    responses(
        (status = 200, description = "The slot's ledger row (null when there is none) with its history, and why it did or did not fire", body = crate::model::SlotExplanation),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        (status = 404, description = "No job with this id ever existed", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn explain(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((job, at)): PathParams<(String, String)>,
) -> ApiResult<Json<SlotExplanation>> {
    let (job_id, at) = parse_slot(&state, &caller, &job, &at).await?;
    let client = state.pg.get().await?;
    if !tenancy::job_visible(&client, job_id, &caller.scope).await? {
        return Err(not_found(job_id));
    }
    // Deleted jobs included: their slots stay explainable.
    let job = store::jobs::get_any(&client, job_id).await?.map(JobFacts::of).transpose()?;
    let mut row = store::ledger::read::get(&client, job_id, at).await?;
    // A slot of a decided run (an outage's misfires) has no row of its own.
    let is_slot = |job: &JobFacts| job.schedule.next_after(at - chrono::TimeDelta::microseconds(1)) == Some(at);
    if row.is_none() && job.as_ref().is_some_and(is_slot) {
        row = store::ledger::read::decided_run_at(&client, job_id, at).await?;
    }
    let now = Utc::now();
    let mut explanation = match (&row, &job) {
        (Some(row), _) => of_row(row, now),
        (None, Some(job)) => {
            let runs_before = match job.spec.schedule.max_runs {
                Some(_) => Some(store::ledger::read::runs_before(&client, job_id, at).await?),
                None => None,
            };
            absent(job, at, now, runs_before, state.retention)
        }
        (None, None) => return Err(not_found(job_id)),
    };
    if let Some(job) = &job {
        explanation.previous_fire_at = job.schedule.prev_before(at).map(format_instant);
        explanation.next_fire_at = job.schedule.next_after(at).map(format_instant);
        if job.spec.jitter_ms > 0 {
            let offset = domain::schedule::jitter_offset(job_id, at, job.spec.jitter_ms);
            explanation.delivery_at = Some(format_instant(at + offset));
            explanation.details.push(format!(
                "The job has jitter_ms {}: this slot is delivered {} ms after its scheduled time, at {} \
                 (its execution id and scheduled time stay those of the slot).",
                job.spec.jitter_ms,
                offset.num_milliseconds(),
                show(at + offset)
            ));
        }
    }
    Ok(Json(SlotExplanation { job_id, scheduled_at: show(at), execution: row, explanation }))
}
