//! `POST /v1/jobs/batch`: up to 1,000 jobs in one request. Each job is
//! validated exactly as a single create (`validated`, the namespace it
//! names, the quota of its namespace, the calendars it references) and
//! answered on its own (`201` with the job, or `422`/`409` with why), or,
//! with `"atomic": true`, all are created or none. The valid jobs go in one
//! multi-row `INSERT` in one transaction, so a batch costs a few round trips
//! instead of one transaction per job. An `Idempotency-Key` covers the whole
//! request: a retry gets the first response again.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use serde_json::Value;
use uuid::Uuid;

use domain::job::{FieldError, JobSpec};

use super::{job_of, new_job, validated};
use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::JsonBody;
use crate::model::{BatchItem, BatchResult};
use crate::{AppState, idempotency, quota};

/// Most jobs in one request: one transaction, one statement, a bounded body.
pub const BATCH_MAX: usize = 1_000;

/// One valid job of the batch, on its way in.
struct Valid {
    index: usize,
    id: Uuid,
    key: Option<String>,
    spec: JobSpec,
    namespace: String,
    peak: f64,
}

/// The outcome of one job, before the insert.
enum Outcome {
    Valid(Box<Valid>),
    Refused { index: usize, status: u16, errors: Vec<FieldError> },
}

/// A job's own problem becomes its item's answer; anything else (the
/// database failing) fails the whole request, as it would a single create,
/// and says nothing of its cause.
fn refusal(index: usize, e: ApiError) -> ApiResult<Outcome> {
    let (status, errors) = match e {
        ApiError::Validation(errors) => (422, errors),
        ApiError::Conflict(detail) => (409, vec![FieldError::new("", detail)]),
        ApiError::BadRequest(detail) => (400, vec![FieldError::new("", detail)]),
        other => return Err(other),
    };
    Ok(Outcome::Refused { index, status, errors })
}

#[utoipa::path(
    post,
    path = "/v1/jobs/batch",
    tag = "jobs",
    params(
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]{1,255}$",
         description = "Makes the batch safe to retry for 24 hours: a retry with the same key and the same jobs gets \
                        the first response again (`Idempotent-Replayed: true`) instead of creating them twice."),
    ),
    request_body(content = crate::model::BatchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Each job's outcome, in request order: 201 with the job, or 422/409 with why \
                                      (not atomic: the valid ones were created)", body = BatchResult),
        (status = 201, description = "Atomic: every job was created", body = BatchResult),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::PayloadTooLarge,
        (status = 409, description = "Atomic: a job does not fit its namespace's quota; nothing was created", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "The request is malformed, or (atomic) a job is invalid: each error names `jobs[i].field`; nothing was created", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn batch(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult<BatchAnswer> {
    caller.require(Role::Write)?;
    let obj = body.as_object().ok_or_else(|| field("", "the request body must be a JSON object"))?;
    if let Some(key) = obj.keys().find(|k| !["jobs", "atomic"].contains(&k.as_str())) {
        return Err(field(key, "unknown field; expected one of: jobs, atomic"));
    }
    let atomic = match obj.get("atomic") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(field("atomic", "must be true or false")),
    };
    let jobs = match obj.get("jobs") {
        Some(Value::Array(jobs)) if !jobs.is_empty() && jobs.len() <= BATCH_MAX => jobs,
        _ => return Err(field("jobs", format!("must be an array of 1 to {BATCH_MAX} job definitions"))),
    };

    // Validation first, off the database: every job on its own.
    let mut outcomes: Vec<Outcome> = jobs
        .iter()
        .enumerate()
        .map(|(index, job)| {
            let checked = validated(job, &state.limits)
                .and_then(|p| Ok((caller.namespace_for_new_job(p.namespace.as_deref())?, p.spec, p.key)));
            match checked {
                Ok((namespace, spec, key)) => {
                    let peak = quota::peak_fires_per_second(&spec, Utc::now());
                    Ok(Outcome::Valid(Box::new(Valid { index, id: Uuid::now_v7(), key, spec, namespace, peak })))
                }
                Err(e) => refusal(index, e),
            }
        })
        .collect::<ApiResult<_>>()?;
    if atomic {
        refuse_all_if_any(&outcomes)?;
    }
    let hashed: Vec<Option<(&JobSpec, &str)>> = outcomes
        .iter()
        .map(|o| match o {
            Outcome::Valid(v) => Some((&v.spec, v.namespace.as_str())),
            Outcome::Refused { .. } => None,
        })
        .collect();
    let key = idempotency::Key::from_request(&headers, &state, &(atomic, hashed, jobs.len()))?;
    let mut client = state.pg.get().await?;
    if let Some(key) = &key
        && let Some(first) = key.replay(&client).await?
    {
        return Ok(BatchAnswer { status: first.status, body: first.body, replayed: true });
    }

    let tx = client.transaction().await?;
    tx.batch_execute(store::notify::DEFER_TO_AFTER_COMMIT).await?;
    for (i, e) in taken_keys(&tx, &caller, &outcomes).await? {
        if atomic {
            return Err(e);
        }
        let index = match &outcomes[i] {
            Outcome::Valid(v) => v.index,
            Outcome::Refused { index, .. } => *index,
        };
        outcomes[i] = refusal(index, e)?;
    }
    // Per namespace: its quota for all its new jobs at once, and the
    // calendars they name (locked until commit, as for a single create).
    let mut by_namespace: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, o) in outcomes.iter().enumerate() {
        if let Outcome::Valid(v) = o {
            by_namespace.entry(v.namespace.clone()).or_default().push(i);
        }
    }
    for (namespace, members) in &by_namespace {
        let valid = |i: &usize| match &outcomes[*i] {
            Outcome::Valid(v) => Some(v),
            Outcome::Refused { .. } => None,
        };
        let peak: f64 = members.iter().filter_map(valid).filter(|v| !v.spec.paused).map(|v| v.peak).sum();
        let demand = quota::Demand { new_jobs: members.len() as i64, peak, peak_before: 0.0 };
        let mut refused: Vec<(usize, ApiError)> = Vec::new();
        if let Err(e) = quota::check(&tx, namespace, demand).await {
            if atomic {
                return Err(e);
            }
            // The whole namespace's share is refused: which of its jobs
            // would fit is not this call's choice to make.
            let detail = match &e {
                ApiError::Conflict(d) => d.clone(),
                ApiError::Validation(errors) => errors.iter().map(|e| e.message.clone()).collect::<Vec<_>>().join("; "),
                _ => return Err(e),
            };
            refused.extend(members.iter().map(|i| (*i, ApiError::Conflict(detail.clone()))));
        } else {
            for i in members {
                let Some(v) = valid(i) else { continue };
                if let Err(e) = crate::tenancy::check_references(&tx, namespace, &v.spec.calendars).await {
                    if atomic {
                        return Err(prefixed(v.index, e));
                    }
                    refused.push((*i, e));
                }
            }
        }
        for (i, e) in refused {
            let index = match &outcomes[i] {
                Outcome::Valid(v) => v.index,
                Outcome::Refused { index, .. } => *index,
            };
            outcomes[i] = refusal(index, e)?;
        }
    }

    let valid: Vec<&Valid> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Valid(v) => Some(&**v),
            Outcome::Refused { .. } => None,
        })
        .collect();
    let mut created: BTreeMap<Uuid, crate::model::Job> = BTreeMap::new();
    if !valid.is_empty() {
        let mut specs: Vec<Value> = Vec::with_capacity(valid.len());
        for v in &valid {
            if matches!(&v.spec.target, domain::job::Target::Http(h) if !h.secret_headers.is_empty()) {
                let mut sealed = v.spec.clone();
                super::seal_secrets(&state, &v.namespace, v.id, &mut sealed, None).await?;
                specs.push(serde_json::to_value(&sealed)?);
            } else {
                specs.push(serde_json::to_value(&v.spec)?);
            }
        }
        let new: Vec<_> = valid
            .iter()
            .zip(&specs)
            .map(|(v, spec)| new_job(v.id, v.key.as_deref(), &v.spec, spec, &v.namespace, v.peak))
            .collect();
        let inserted = store::jobs::create(&tx, &new, &caller.audit(None)).await;
        // A key taken by a create that committed since `taken_keys` looked.
        let rows = super::key_taken(inserted, None)?;
        let now = Utc::now();
        for row in &rows {
            let job = job_of(row, now)?;
            created.insert(job.id, job);
        }
    }
    let items: Vec<BatchItem> = outcomes
        .into_iter()
        .map(|o| match o {
            Outcome::Valid(v) => {
                BatchItem { index: v.index, status: 201, job: created.remove(&v.id), errors: Vec::new() }
            }
            Outcome::Refused { index, status, errors } => BatchItem { index, status, job: None, errors },
        })
        .collect();
    let result = BatchResult {
        created: items.iter().filter(|i| i.status == 201).count(),
        refused: items.iter().filter(|i| i.status != 201).count(),
        items,
    };
    let status = if atomic { StatusCode::CREATED } else { StatusCode::OK };
    let body = serde_json::to_value(&result)?;
    if let Some(key) = &key
        && !key.record(&tx, ids_first(&result), status.as_u16(), &body).await?
    {
        tx.rollback().await?;
        let first = key.replay(&client).await?.ok_or_else(idempotency::vanished)?;
        return Ok(BatchAnswer { status: first.status, body: first.body, replayed: true });
    }
    tx.commit().await?;
    if result.created > 0 {
        state.job_changes.changed();
    }
    tracing::info!(created = result.created, refused = result.refused, atomic, "jobs created in a batch");
    if key.is_some() {
        idempotency::purge_expired(&client).await;
    }
    Ok(BatchAnswer { status: status.as_u16(), body, replayed: false })
}

/// The valid jobs whose key another job of the batch (an earlier one) or a
/// live job of their namespace already has: each with its 409.
async fn taken_keys(
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    outcomes: &[Outcome],
) -> ApiResult<Vec<(usize, ApiError)>> {
    let keyed: Vec<(usize, &Valid, &str)> = outcomes
        .iter()
        .enumerate()
        .filter_map(|(i, o)| match o {
            Outcome::Valid(v) => v.key.as_deref().map(|k| (i, &**v, k)),
            Outcome::Refused { .. } => None,
        })
        .collect();
    if keyed.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<(&str, &str)> = keyed.iter().map(|(_, v, k)| (v.namespace.as_str(), *k)).collect();
    let scope = caller.scope.sql();
    let live: std::collections::HashSet<(String, String)> = store::jobs::lock_by_keys(tx, &names, scope.as_deref())
        .await?
        .into_iter()
        .filter_map(|(_, j)| j.key.map(|k| (j.namespace, k)))
        .collect();
    let mut first: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut taken = Vec::new();
    for (i, v, key) in keyed {
        let conflict = if live.contains(&(v.namespace.clone(), key.to_owned())) {
            Some(format!("namespace {:?} already has a live job with key {key:?}", v.namespace))
        } else {
            first.get(&(v.namespace.as_str(), key)).map(|earlier| format!("key {key:?} is also jobs[{earlier}]'s"))
        };
        match conflict {
            Some(detail) => taken.push((i, prefixed(v.index, ApiError::Conflict(detail)))),
            None => {
                first.insert((v.namespace.as_str(), key), v.index);
            }
        }
    }
    Ok(taken)
}

/// An atomic batch with an invalid job is one 422 naming each job's fields.
fn refuse_all_if_any(outcomes: &[Outcome]) -> ApiResult<()> {
    let errors: Vec<FieldError> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Refused { index, errors, .. } => Some(errors.iter().map(move |e| prefix(*index, e))),
            Outcome::Valid(_) => None,
        })
        .flatten()
        .collect();
    if errors.is_empty() { Ok(()) } else { Err(ApiError::Validation(domain::job::cap_field_errors(errors))) }
}

fn prefix(index: usize, e: &FieldError) -> FieldError {
    let path = if e.field.is_empty() { format!("jobs[{index}]") } else { format!("jobs[{index}].{}", e.field) };
    FieldError::new(path, e.message.clone())
}

fn prefixed(index: usize, e: ApiError) -> ApiError {
    match e {
        ApiError::Validation(errors) => ApiError::Validation(errors.iter().map(|e| prefix(index, e)).collect()),
        other => other,
    }
}

/// The job id an idempotency record points at: the first created (nil when none was).
fn ids_first(result: &BatchResult) -> Uuid {
    result.items.iter().find_map(|i| i.job.as_ref().map(|j| j.id)).unwrap_or_default()
}

/// A batch's answer: per index, as first answered (the stored body, when
/// replayed for an idempotency key).
pub struct BatchAnswer {
    status: u16,
    body: Value,
    replayed: bool,
}

impl IntoResponse for BatchAnswer {
    fn into_response(self) -> Response {
        let mut response =
            (StatusCode::from_u16(self.status).unwrap_or(StatusCode::OK), Json(self.body)).into_response();
        idempotency::mark_replayed(&mut response, self.replayed);
        response
    }
}
