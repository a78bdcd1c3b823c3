//! `POST /v1/schedules/preview`: the fire times a schedule would have,
//! before any job has it. The schedule (and `jitter_ms`) are validated
//! exactly as a job's are, under the API's limits, and the fire times are
//! described as `GET /v1/jobs/{id}/next` describes a job's (`crate::fires`).
//! Nothing is stored; only the calendars named are read. Any role may ask.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use uuid::Uuid;

use domain::job::{FieldError, JobSpec, cap_field_errors};

use crate::AppState;
use crate::caller::Caller;
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::fires::{self, Jitter};
use crate::model::SchedulePreview;
use crate::params::body_object;

/// Most fire times one preview lists (as `next`).
pub const PREVIEW_MAX: usize = 1000;

/// The fields of a preview request.
const FIELDS: [&str; 7] = ["schedule", "from", "count", "jitter_ms", "job_id", "calendars", "namespace"];

struct Preview {
    spec: JobSpec,
    from: DateTime<Utc>,
    count: usize,
    job_id: Option<Uuid>,
    namespace: Option<String>,
}

/// The request, every problem named at once (422). The schedule and the
/// jitter are checked by the job validator itself, on a job that has them
/// (its name and target are placeholders that pass), so a preview accepts
/// exactly the schedules a create does, reported under the same field names.
fn parse(body: &Value, limits: &domain::job::Limits) -> ApiResult<Preview> {
    let mut problems = Vec::new();
    let map = body_object(body, &FIELDS, &mut problems);
    let get = |key: &str| map.and_then(|m| m.get(key)).filter(|v| !v.is_null());
    let from = match get("from") {
        None => Some(Utc::now()),
        Some(v) => {
            let t = v.as_str().and_then(|s| DateTime::parse_from_rfc3339(s).ok()).map(|t| t.to_utc());
            if t.is_none() {
                problems.push(FieldError::new("from", "must be an RFC 3339 timestamp such as 2026-03-29T00:00:00Z"));
            }
            t
        }
    };
    let count = match get("count") {
        None => 10,
        Some(v) => match v.as_u64() {
            Some(n @ 1..=1000) => n as usize,
            _ => {
                problems.push(FieldError::new("count", format!("must be an integer from 1 to {PREVIEW_MAX}")));
                10
            }
        },
    };
    let job_id = match get("job_id") {
        None => None,
        Some(v) => {
            let id = v.as_str().and_then(|s| s.parse::<Uuid>().ok());
            if id.is_none() {
                problems.push(FieldError::new("job_id", "must be a job id (UUID)"));
            }
            id
        }
    };
    let mut job = json!({
        "name": "preview",
        "target": { "kind": "http", "url": "https://preview.invalid/" },
    });
    if let Some(schedule) = get("schedule") {
        job["schedule"] = schedule.clone();
    }
    if let Some(jitter) = get("jitter_ms") {
        job["jitter_ms"] = jitter.clone();
    }
    if let Some(calendars) = get("calendars") {
        job["calendars"] = calendars.clone();
    }
    let namespace = match get("namespace") {
        None => None,
        Some(v) => {
            let name = v.as_str().map(str::to_owned);
            if name.is_none() {
                problems.push(FieldError::new("namespace", "must be a namespace name (a string)"));
            }
            name
        }
    };
    let spec = if map.is_some() {
        match JobSpec::from_json_with(&job, limits) {
            Ok(spec) => Some(spec),
            Err(errors) => {
                problems.extend(errors);
                None
            }
        }
    } else {
        None
    };
    match (spec, from) {
        (Some(spec), Some(from)) if problems.is_empty() => Ok(Preview { spec, from, count, job_id, namespace }),
        _ => Err(ApiError::Validation(cap_field_errors(problems))),
    }
}

#[utoipa::path(
    post,
    path = "/v1/schedules/preview",
    tag = "schedules",
    request_body(content = crate::model::SchedulePreviewRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The schedule's fire times at or after `from`, each with its wall time, UTC \
                                      offset and DST mark in a cron schedule's zone and, with `jitter_ms` and \
                                      `job_id`, its delivery instant", body = crate::model::SchedulePreview),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::PayloadTooLarge,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn preview(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<SchedulePreview>> {
    let Preview { spec, from, count, job_id, namespace } = parse(&body, &state.limits)?;
    let calendars = if spec.calendars.is_empty() {
        Vec::new()
    } else {
        let namespace = caller.namespace_for_new_job(namespace.as_deref())?;
        crate::tenancy::calendars_named(&state.pg.get().await?, &namespace, &spec.calendars, "calendars").await?
    };
    // An interval without `start_at` is anchored as a job created at `from` would be.
    let schedule = spec.compile(from).map_err(|e| ApiError::Internal(e.into()))?;
    let count = spec.schedule.max_runs.map_or(count, |max| count.min(max.try_into().unwrap_or(usize::MAX)));
    let jitter = job_id.map(|job_id| Jitter { job_id, jitter_ms: spec.jitter_ms });
    let note = (spec.jitter_ms > 0 && job_id.is_none()).then(|| {
        format!(
            "each slot is delivered at a fixed offset in [0, {}) ms after it, derived from the job id and the slot; \
             give job_id to see each slot's delivery instant (fires_at)",
            spec.jitter_ms
        )
    });
    let fire_times = fires::fire_times(&schedule, from, count, jitter, &calendars);
    Ok(Json(SchedulePreview { from, fire_times, note }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(body: Value) -> Vec<String> {
        match parse(&body, &Default::default()) {
            Err(ApiError::Validation(errors)) => errors.into_iter().map(|e| e.field).collect(),
            Err(e) => panic!("{body}: {e:?}"),
            Ok(_) => panic!("{body} was accepted"),
        }
    }

    #[test]
    fn a_preview_body_is_checked_as_a_jobs_schedule_is() {
        let cron = json!({ "kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin" });
        let ok =
            parse(&json!({ "schedule": cron, "count": 3, "from": "2026-03-29T00:00:00+01:00" }), &Default::default())
                .unwrap();
        assert_eq!((ok.count, ok.from), (3, "2026-03-28T23:00:00Z".parse().unwrap()));
        assert_eq!(fields(json!({})), ["schedule"]);
        assert_eq!(
            fields(json!({ "schedule": { "kind": "cron", "expr": "0 8 * * *", "timezone": "Mars/Olympus" } })),
            ["schedule.timezone"]
        );
        assert_eq!(fields(json!({ "schedule": { "kind": "interval", "every_ms": 10 } })), ["schedule.every_ms"]);
        assert_eq!(
            fields(json!({ "schedule": { "kind": "interval", "every_ms": 60_000 }, "jitter_ms": 60_000 })),
            ["jitter_ms"]
        );
        assert_eq!(
            fields(json!({ "schedule": cron, "count": 0, "from": "yesterday", "job_id": "x" })),
            ["from", "count", "job_id"]
        );
        assert_eq!(fields(json!({ "schedule": cron, "calendars": "holidays" })), ["calendars"]);
        assert_eq!(fields(json!("x")), [""]);
    }
}
