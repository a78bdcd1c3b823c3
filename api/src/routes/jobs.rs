//! `/v1/jobs`: create, read, list (with label selectors), replace, delete,
//! pause, resume, next fire times, trigger; `bulk` and `patch` (submodules)
//! go through the same per-job steps (`update_job`, `pause_or_resume`,
//! `delete_job`, `trigger_job`), each run inside its caller's transaction.
//!
//! Every mutation bumps `version` (the change feed and the fire lock key on
//! it); the new version is in force from the instant it was made, for the
//! slots due from then on. In the same transaction the job's claimed
//! `pending` rows of those slots are marked `skipped` (see `cancel_claimed`),
//! so a slot already handed to a worker is cancelled exactly: the worker
//! only delivers a row it can still move to `running`.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, TimeDelta, Utc};
use serde::Deserialize;
use serde_json::Value;
use uuid::Uuid;

use domain::job::{JobSpec, Target};
use store::audit::{self, Action};
use store::jobs::{self, StoredJob};
use store::ledger::{self, Execution, changes::Cancel};

use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JobIdPath, JsonBody, OptionalJsonBody, QueryParams};
use crate::model::{Job, JobPage, NextFires};
use crate::params::{not_found, parse_limit, parse_time};
use crate::{AppState, fires, idempotency, quota, selector};

pub mod apply;
pub mod batch;
pub mod bulk;
pub mod history;
pub mod patch;

/// What the API shows instead of a secret header's value. Sent back in a
/// replace, it keeps the stored value.
pub const SECRET_SHOWN_AS: &str = domain::diff::SECRET_SHOWN_AS;

/// A job as the API shows it: secret header values are never shown.
pub fn job_of(job: &StoredJob, now: DateTime<Utc>) -> ApiResult<Job> {
    let mut spec: JobSpec = serde_json::from_value(job.spec.clone())?;
    if let Target::Http(http) = &mut spec.target {
        for value in http.secret_headers.values_mut() {
            *value = SECRET_SHOWN_AS.to_owned();
        }
    }
    spec.paused = job.paused;
    let runs_used_up = match (spec.schedule.max_runs, job.runs) {
        (Some(max), Some(runs)) => runs as u64 >= max,
        _ => false,
    };
    let next_fire_at = if spec.paused || runs_used_up {
        None
    } else {
        spec.compile(job.created_at).ok().and_then(|s| s.next_after(now))
    };
    let pause = spec.paused.then(|| crate::model::PauseState {
        at: job.pause.at,
        by: job.pause.by.clone(),
        by_token_id: job.pause.by_token,
        note: job.pause.note.clone(),
    });
    Ok(Job {
        id: job.id,
        key: job.key.clone(),
        namespace: job.namespace.clone(),
        version: job.version,
        created_at: job.created_at,
        updated_at: job.updated_at,
        next_fire_at,
        pause,
        spec,
    })
}

/// A job as a response (200), with its version as the `ETag`.
pub struct VersionedJob(pub Job);

impl IntoResponse for VersionedJob {
    fn into_response(self) -> Response {
        let version = self.0.version;
        versioned(StatusCode::OK, version, self.0)
    }
}

/// A create's answer: the job as first answered (the stored body, when
/// replayed for an idempotency key), with `ETag` and `Location`.
pub struct Created {
    pub status: u16,
    pub body: Value,
    pub replayed: bool,
}

impl IntoResponse for Created {
    fn into_response(self) -> Response {
        let location = format!("/v1/jobs/{}", self.body["id"].as_str().unwrap_or_default());
        let version = self.body["version"].as_i64().unwrap_or_default();
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::CREATED);
        let mut response = versioned(status, version, self.body);
        if let Ok(v) = HeaderValue::from_str(&location) {
            response.headers_mut().insert(header::LOCATION, v);
        }
        idempotency::mark_replayed(&mut response, self.replayed);
        response
    }
}

/// A response with `version` as its `ETag`.
fn versioned(status: StatusCode, version: i64, body: impl serde::Serialize) -> Response {
    let mut response = (status, Json(body)).into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{version}\"")) {
        response.headers_mut().insert(header::ETAG, v);
    }
    response
}

/// A job body, validated: its definition and the properties of the job it
/// names beside it (its namespace and key), when it names them.
struct Parsed {
    pub spec: JobSpec,
    pub namespace: Option<String>,
    pub key: Option<String>,
}

/// Validates a definition and checks it can ever fire.
fn validated(body: &Value, limits: &domain::job::Limits) -> ApiResult<Parsed> {
    let parsed = parsed(body, limits)?;
    fires_ever(&parsed.spec)?;
    Ok(parsed)
}

/// Validates a definition's fields; returns it with the `namespace` and
/// `key` it names, if any (properties of the job, not of its definition).
fn parsed(body: &Value, limits: &domain::job::Limits) -> ApiResult<Parsed> {
    let mut nul = Vec::new();
    find_nul("", body, &mut nul);
    if !nul.is_empty() {
        return Err(ApiError::Validation(domain::job::cap_field_errors(nul)));
    }
    let mut definition = body.clone();
    // `pause` is state the API shows beside the definition (who paused the
    // job, when, why): read-only, so a job read and written back as a whole
    // is taken, and what it says is never applied.
    if let Some(o) = definition.as_object_mut() {
        o.remove("pause");
    }
    let mut property = |name: &str| match definition.as_object_mut().and_then(|o| o.remove(name)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(value)) => Ok(Some(value)),
        Some(_) => Err(field(name, "must be a string")),
    };
    let namespace = property("namespace")?;
    let key = property("key")?;
    if let Some(key) = &key {
        domain::labels::check_job_key(key).map_err(|why| field("key", why))?;
    }
    let spec = JobSpec::from_json_with(&definition, limits).map_err(ApiError::Validation)?;
    Ok(Parsed { spec, namespace, key })
}

/// A job that would never fire is almost always a mistake (a past `at`, an
/// `end_at` gone by).
fn fires_ever(spec: &JobSpec) -> ApiResult<()> {
    let now = Utc::now();
    let schedule = spec.compile(now).map_err(|e| field(&format!("schedule.{}", e.field), e.message))?;
    if schedule.next_after(now).is_none() {
        return Err(match spec.schedule.kind {
            domain::job::ScheduleKind::Once { .. } => {
                field("schedule.at", "is in the past; a one-time job must be due in the future")
            }
            _ => field("schedule.end_at", "the schedule has no fire time before its end"),
        });
    }
    Ok(())
}

/// Postgres cannot store a NUL character in `jsonb` or `text`: such strings
/// (values or keys, anywhere in the body) are refused up front.
fn find_nul(path: &str, value: &Value, out: &mut Vec<domain::job::FieldError>) {
    let join = |k: &str| if path.is_empty() { k.to_owned() } else { format!("{path}.{k}") };
    match value {
        Value::String(s) if s.contains('\0') => {
            out.push(domain::job::FieldError::new(path, "must not contain a NUL character"))
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                find_nul(&join(&i.to_string()), v, out);
            }
        }
        Value::Object(map) => {
            for (k, v) in map {
                if k.contains('\0') {
                    out.push(domain::job::FieldError::new(
                        join(&k.replace('\0', "\\0")),
                        "must not contain a NUL character",
                    ));
                } else {
                    find_nul(&join(k), v, out);
                }
            }
        }
        _ => {}
    }
}

#[utoipa::path(
    post,
    path = "/v1/jobs",
    tag = "jobs",
    params(
        ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, pattern = "^[!-~]{1,255}$",
         description = "Makes the create safe to retry for 24 hours: a retry with the same key and the same job \
                        definition returns the first response (same job, 201, `Idempotent-Replayed: true`) instead \
                        of creating a second job; the same key with another definition is a 422. Keys are scoped \
                        to the bearer token. 1 to 255 visible ASCII characters, e.g. a UUID."),
    ),
    request_body(content = domain::job::JobSpec, content_type = "application/json"),
    responses(
        (status = 201, description = "The job was created (or, for a repeated `Idempotency-Key`, the first response \
                                      again, with `Idempotent-Replayed: true`); `Location` names it, `ETag` is its \
                                      version", body = crate::model::Job),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        (status = 409, description = "The `Idempotency-Key` expired while this request waited for it; retry", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::PayloadTooLarge,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult<Created> {
    caller.require(Role::Write)?;
    let Parsed { spec, namespace: named, key: job_key } = parsed(&body, &state.limits)?;
    let namespace = caller.namespace_for_new_job(named.as_deref())?;
    let key = idempotency::Key::from_request(&headers, &state, &spec)?;
    let mut client = state.pg.get().await?;
    // A retry is answered before the fire-time check: the first response
    // stands even when a one-time job's `at` has passed since.
    if let Some(key) = &key
        && let Some(first) = key.replay(&client).await?
    {
        return Ok(Created { status: first.status, body: first.body, replayed: true });
    }
    fires_ever(&spec)?;
    let id = Uuid::now_v7();
    let peak = quota::peak_fires_per_second(&spec, Utc::now());
    let mut spec_json = serde_json::to_value(&spec)?;
    let has_secrets = matches!(&spec.target, Target::Http(h) if !h.secret_headers.is_empty());
    if key.is_none() && spec.calendars.is_empty() && !has_secrets {
        let new = new_job(id, job_key.as_deref(), &spec, &spec_json, &namespace, peak);
        let created = jobs::create_unlimited(&client, &new, &caller.audit(None)).await;
        if let Some(stored) = key_taken(created, job_key.as_deref().map(|k| (namespace.as_str(), k)))? {
            let body = serde_json::to_value(job_of(&stored, Utc::now())?)?;
            return Ok(committed_create(&state, &spec, &namespace, body));
        }
        // The namespace has a quota, or is not there: the checks below say which.
    }
    let tx = client.transaction().await?;
    tx.batch_execute(store::notify::DEFER_TO_AFTER_COMMIT).await?;
    let counted = if spec.paused { 0.0 } else { peak };
    quota::check(&tx, &namespace, quota::Demand { new_jobs: 1, peak: counted, peak_before: 0.0 }).await?;
    crate::tenancy::check_references(&tx, &namespace, &spec.calendars).await?;
    if has_secrets {
        let mut sealed = spec.clone();
        seal_secrets(&state, &namespace, id, &mut sealed, None).await?;
        spec_json = serde_json::to_value(&sealed)?;
    }
    let new = new_job(id, job_key.as_deref(), &spec, &spec_json, &namespace, peak);
    let created = jobs::create(&tx, std::slice::from_ref(&new), &caller.audit(None)).await;
    let stored = key_taken(created, job_key.as_deref().map(|k| (namespace.as_str(), k)))?
        .pop()
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("the job's insert returned no row")))?;
    let job = job_of(&stored, Utc::now())?;
    let body = serde_json::to_value(&job)?;
    if let Some(key) = &key
        && !key.record(&tx, id, StatusCode::CREATED.as_u16(), &body).await?
    {
        // A concurrent request with this key committed first: undo our job
        // and answer with its response.
        tx.rollback().await?;
        let first = key.replay(&client).await?.ok_or_else(idempotency::vanished)?;
        return Ok(Created { status: first.status, body: first.body, replayed: true });
    }
    tx.commit().await?;
    let response = committed_create(&state, &spec, &namespace, body);
    if key.is_some() {
        idempotency::purge_expired(&client).await;
    }
    Ok(response)
}

/// The store's form of a validated job to create (`spec_json`: its
/// definition as stored, secret values sealed).
pub(crate) fn new_job<'a>(
    id: Uuid,
    key: Option<&'a str>,
    spec: &'a JobSpec,
    spec_json: &'a Value,
    namespace: &'a str,
    peak: f64,
) -> jobs::NewJob<'a> {
    jobs::NewJob {
        id,
        key,
        name: &spec.name,
        spec: spec_json,
        paused: spec.paused,
        namespace,
        peak_fires_per_second: peak,
    }
}

/// A write's result, with the database's refusal of a key a live job of
/// the namespace already has made a 409 that names it (`named`: the
/// namespace and key of a single job; `None` for several).
pub(crate) fn key_taken<T>(result: Result<T, tokio_postgres::Error>, named: Option<(&str, &str)>) -> ApiResult<T> {
    result.map_err(|e| {
        if e.as_db_error().and_then(|d| d.constraint()) != Some(JOBS_LIVE_KEY) {
            return ApiError::from(e);
        }
        ApiError::Conflict(match named {
            Some((namespace, key)) => format!("namespace {namespace:?} already has a live job with key {key:?}"),
            None => "a job made meanwhile took one of these keys; nothing was written, retry".to_owned(),
        })
    })
}

/// The unique index that keeps a key to one live job per namespace.
const JOBS_LIVE_KEY: &str = "jobs_live_key";

/// After a create committed: the schedulers are told, the log says so, and
/// the response is the new job's.
fn committed_create(state: &AppState, spec: &JobSpec, namespace: &str, body: Value) -> Created {
    state.job_changes.changed();
    tracing::info!(job.id = %body["id"].as_str().unwrap_or_default(), job.name = %spec.name, job.namespace = %namespace, "job created");
    Created { status: StatusCode::CREATED.as_u16(), body, replayed: false }
}

#[utoipa::path(
    get,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
    ),
    responses(
        (status = 200, description = "The job; `ETag` is its version", body = crate::model::Job),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn get(State(state): State<AppState>, caller: Caller, JobIdPath(id): JobIdPath) -> ApiResult<VersionedJob> {
    let client = state.pg.get().await?;
    let stored = jobs::get(&client, id, caller.scope.sql().as_deref()).await?.ok_or_else(|| not_found(id))?;
    Ok(VersionedJob(job_of(&stored, Utc::now())?))
}

/// An unknown parameter is a 400 naming it, not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    limit: Option<String>,
    cursor: Option<String>,
    name_prefix: Option<String>,
    kind: Option<String>,
    paused: Option<String>,
    namespace: Option<String>,
    selector: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/jobs",
    tag = "jobs",
    params(
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "Page size (default 50)"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("name_prefix" = Option<String>, Query, description = "Only jobs whose name starts with this text"),
        ("kind" = Option<String>, Query, description = "Only jobs of this schedule kind: once, interval or cron"),
        ("paused" = Option<bool>, Query, description = "Only paused (true) or active (false) jobs"),
        ("namespace" = Option<String>, Query, description = "Only jobs of this namespace (among those the token acts in)"),
        ("selector" = Option<String>, Query, example = "team=payments,tier!=batch",
         description = "Only jobs whose labels match this label selector (Kubernetes syntax): terms joined by `,`, \
                        all of which must hold: `k=v` (or `k==v`), `k!=v` (also matches jobs without `k`), \
                        `k in (a,b)`, `k notin (a,b)` (also matches jobs without `k`), `k` (has the label), \
                        `!k` (has not). At most 64 terms and 100 values per set; empty = no filter"),
    ),
    responses(
        (status = 200, description = "A page of jobs", body = crate::model::JobPage),
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
) -> ApiResult<Json<JobPage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let after = match q.cursor.as_deref() {
        None | Some("") => Uuid::nil(),
        Some(c) => c.parse::<Uuid>().map_err(|_| field("cursor", "is not a cursor returned by this endpoint"))?,
    };
    if let Some(kind) = q.kind.as_deref()
        && !["once", "interval", "cron"].contains(&kind)
    {
        return Err(field("kind", "must be one of once, interval, cron"));
    }
    let paused = match q.paused.as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => return Err(field("paused", "must be true or false")),
    };
    crate::params::namespace_param(q.namespace.as_deref())?;
    if q.name_prefix.as_deref().is_some_and(|p| p.contains('\0')) {
        return Err(field("name_prefix", "must not contain a NUL character"));
    }
    // Escape LIKE wildcards: a prefix is literal text.
    let prefix = q.name_prefix.map(|p| format!("{}%", p.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_")));
    let labels = selector::Predicate::new(&selector::parse("selector", q.selector.as_deref().unwrap_or(""))?, 8);
    let scope = caller.scope.sql();
    let filter = jobs::ListFilter {
        after,
        name_like: prefix.as_deref(),
        kind: q.kind.as_deref(),
        paused,
        scope: scope.as_deref(),
        namespace: q.namespace.as_deref(),
        labels_sql: &labels.sql,
        labels_params: labels.params().collect(),
        limit: limit + 1,
    };
    let client = state.pg.get().await?;
    let rows = jobs::list(&client, &filter).await?;
    let now = Utc::now();
    let has_more = rows.len() as i64 > limit;
    let items: Vec<Job> = rows.iter().take(limit as usize).map(|r| job_of(r, now)).collect::<ApiResult<_>>()?;
    let next_cursor = has_more.then(|| items.last().map(|j| j.id)).flatten();
    Ok(Json(JobPage { items, next_cursor }))
}

/// The version `If-Match` demands: `None` for no header or `*` (any current
/// version). Weak tags never match (RFC 9110 requires strong comparison).
fn if_match(headers: &HeaderMap) -> ApiResult<Option<i64>> {
    let Some(raw) = headers.get(header::IF_MATCH) else { return Ok(None) };
    let text = raw.to_str().unwrap_or_default().trim();
    if text == "*" {
        return Ok(None);
    }
    if text.starts_with("W/") {
        return Ok(Some(-1));
    }
    let tag = text.trim_matches('"');
    tag.parse::<i64>()
        .map(Some)
        .map_err(|_| ApiError::BadRequest(format!("If-Match must be a job version such as \"3\", got {text:?}")))
}

/// Most rows a resume writes for the slots of the paused period (the
/// latest ones), as the scheduler's misfire decisions are bounded.
const PAUSED_ROWS_MAX: usize = 1_000;

/// When a paused job is made live again (inside the change's transaction,
/// after the `UPDATE`): records the slots of the paused period as `skipped`
/// with reason `paused`, so the ledger and explain still say what became of
/// them. The period runs from the first paused version in the current run
/// of paused versions to the version now in force; its slots are those of
/// the definition the job had while paused (`before`). A slot that already
/// has a row keeps it.
async fn record_paused_period(
    tx: &impl deadpool_postgres::GenericClient,
    id: Uuid,
    before: &JobSpec,
    created_at: DateTime<Utc>,
    paused_version: i64,
) -> ApiResult<u64> {
    let Some((from, until)) = store::jobs::paused_period(tx, id, paused_version).await? else {
        return Ok(0);
    };
    let Ok(schedule) = before.compile(created_at) else { return Ok(0) };
    let mut slots = std::collections::VecDeque::new();
    let mut cursor = from - TimeDelta::microseconds(1);
    while let Some(t) = schedule.next_after(cursor).filter(|t| *t < until) {
        if slots.len() == PAUSED_ROWS_MAX {
            slots.pop_front();
        }
        slots.push_back(t);
        cursor = t;
    }
    if slots.is_empty() {
        return Ok(0);
    }
    let times: Vec<DateTime<Utc>> = slots.into_iter().collect();
    Ok(ledger::changes::record_paused_slots(tx, id, paused_version, &times).await?)
}

/// The job as it was before a change, locked for the change's transaction.
struct Before {
    key: Option<String>,
    version: i64,
    paused: bool,
    spec: JobSpec,
    created_at: DateTime<Utc>,
    namespace: String,
    /// What the job counts against its namespace's rate quota now.
    counted_peak: f64,
    /// What it counts while live.
    peak: f64,
}

/// A replace that sends a secret header back as the API showed it
/// (`SECRET_SHOWN_AS`) keeps its stored value, so that a job read, edited
/// and written back keeps its secrets.
fn keep_stored_secrets(mut spec: JobSpec, stored: &JobSpec) -> ApiResult<JobSpec> {
    let (Target::Http(new), Target::Http(old)) = (&mut spec.target, &stored.target) else { return Ok(spec) };
    for (name, value) in new.secret_headers.iter_mut() {
        if value == SECRET_SHOWN_AS {
            *value = old.secret_headers.get(name).cloned().ok_or_else(|| {
                field(
                    &format!("target.secret_headers.{name}"),
                    format!(
                        "is {SECRET_SHOWN_AS:?}, which keeps a stored secret, but the job has no secret header {name:?}"
                    ),
                )
            })?;
        }
    }
    Ok(spec)
}

/// Seals the secret header values of `spec` (job `id` of `namespace`) at
/// rest; values equal to the stored definition's (`stored`) are already
/// sealed and stay. The data key is read or made on a connection of its
/// own: a data key in use must never roll back with a refused change.
pub(crate) async fn seal_secrets(
    state: &AppState,
    namespace: &str,
    id: Uuid,
    spec: &mut JobSpec,
    stored: Option<&JobSpec>,
) -> ApiResult<()> {
    let Target::Http(http) = &mut spec.target else { return Ok(()) };
    if http.secret_headers.is_empty() {
        return Ok(());
    }
    let empty = std::collections::BTreeMap::new();
    let stored = match stored.map(|s| &s.target) {
        Some(Target::Http(old)) => &old.secret_headers,
        _ => &empty,
    };
    let client = state.pg.get().await?;
    state.vault.seal_headers(&client, namespace, id, &mut http.secret_headers, stored).await.map_err(|e| match e {
        store::secrets::SecretError::NoKek => field("target.secret_headers", e.to_string()),
        e => ApiError::Unavailable(format!("secret header values cannot be sealed: {e}")),
    })
}

/// Locks a live job of the caller's namespaces for a change.
async fn lock_for_change(tx: &impl deadpool_postgres::GenericClient, caller: &Caller, id: Uuid) -> ApiResult<Before> {
    let locked = jobs::lock_for_change(tx, id, caller.scope.sql().as_deref()).await?.ok_or_else(|| not_found(id))?;
    Before::of(locked)
}

impl Before {
    /// A job the store locked for a change.
    fn of(locked: jobs::Locked) -> ApiResult<Before> {
        Ok(Before {
            key: locked.key,
            version: locked.version,
            paused: locked.paused,
            spec: serde_json::from_value(locked.spec)?,
            created_at: locked.created_at,
            namespace: locked.namespace,
            counted_peak: if locked.paused { 0.0 } else { locked.peak_fires_per_second },
            peak: locked.peak_fires_per_second,
        })
    }
}

/// The ledger's side of a change from `before` to `paused` (the new state).
async fn settle_change(
    tx: &impl deadpool_postgres::GenericClient,
    id: Uuid,
    before: &Before,
    paused: bool,
) -> ApiResult<()> {
    ledger::changes::cancel_claimed(tx, id, if paused { Cancel::Paused } else { Cancel::Superseded }).await?;
    if before.paused && !paused {
        record_paused_period(tx, id, &before.spec, before.created_at, before.version).await?;
    }
    Ok(())
}

#[utoipa::path(
    put,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    description = "Replaces the job's definition and keeps its state: a body without `paused` keeps the job \
                   paused or live (and who paused it), one that would change it is refused (use the pause and \
                   resume routes), and labels the body leaves out are kept (`{}` clears them). `pause` in the \
                   body is read-only and ignored. A schedule set in the past is refused; an unchanged one is not.",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
        ("If-Match" = Option<String>, Header, description = "The version the change is based on, e.g. \"3\"; `*` or absent: any"),
    ),
    request_body(content = domain::job::JobSpec, content_type = "application/json"),
    responses(
        (status = 200, description = "The replaced job", body = crate::model::Job),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        (status = 412, description = "`If-Match` names a version other than the current one", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::PayloadTooLarge,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn replace(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult<VersionedJob> {
    caller.require(Role::Write)?;
    let expected = if_match(&headers)?;
    let mut definition = parsed(&body, &state.limits)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let before = lock_for_change(&tx, &caller, id).await?;
    check_version(id, &before, expected)?;
    // What the body leaves out of the job's state and metadata is kept:
    // a pipeline that PUTs definitions must not resume an operator's pause
    // or drop labels it never knew about.
    keep_unsaid(&body, &mut definition.spec, &before);
    let stored = update_job(&state, &tx, Change::of(&caller, Action::JobReplace), id, &before, definition).await?;
    tx.commit().await?;
    Ok(VersionedJob(job_of(&stored, Utc::now())?))
}

/// What a new definition (`body`, as sent) leaves out of the job's state
/// and metadata is kept: a pipeline that writes definitions must not resume
/// an operator's pause or drop labels it never knew about.
fn keep_unsaid(body: &Value, spec: &mut JobSpec, before: &Before) {
    let given = |key: &str| body.get(key).is_some_and(|v| !v.is_null());
    if !given("paused") {
        spec.paused = before.paused;
    }
    if !given("labels") {
        spec.labels = before.spec.labels.clone();
    }
}

/// 412 unless the job is at the version `If-Match` asked for (`None`: any).
fn check_version(id: Uuid, before: &Before, expected: Option<i64>) -> ApiResult<()> {
    match expected {
        Some(expected) if expected != before.version => {
            Err(ApiError::PreconditionFailed(format!("job {id} is at version {}, not {expected}", before.version)))
        }
        _ => Ok(()),
    }
}

/// Who makes a change of a job's definition, how, and why: what the audit
/// log records of it.
pub(crate) struct Change<'a> {
    pub caller: &'a Caller,
    pub action: Action,
    pub note: Option<&'a str>,
    pub details: Option<Value>,
}

impl<'a> Change<'a> {
    fn of(caller: &'a Caller, action: Action) -> Change<'a> {
        Change { caller, action, note: None, details: None }
    }
}

/// Replaces a locked job's definition with `definition` (validated, with
/// the namespace and key it names, if any): the step of a replace, a patch,
/// a rollback and an apply. Returns the job as stored.
async fn update_job(
    state: &AppState,
    tx: &impl deadpool_postgres::GenericClient,
    change: Change<'_>,
    id: Uuid,
    before: &Before,
    definition: Parsed,
) -> ApiResult<StoredJob> {
    let Parsed { spec, namespace: named, key } = definition;
    if let Some(named) = named
        && named != before.namespace
    {
        return Err(field("namespace", format!("is {:?}; a job cannot move to another namespace", before.namespace)));
    }
    let key = kept_key(before.key.as_deref(), key)?;
    if spec.paused != before.paused {
        return Err(field(
            "paused",
            format!(
                "is {}, but the job is {}: pausing is state, not definition; use POST /v1/jobs/{id}/{}",
                spec.paused,
                if before.paused { "paused" } else { "live" },
                if spec.paused { "pause" } else { "resume" }
            ),
        ));
    }
    // "In the future" is a rule for a schedule being set, not for every
    // write: a one-time job whose time has passed keeps its schedule
    // through an edit of its labels or target.
    if spec.schedule != before.spec.schedule {
        fires_ever(&spec)?;
    }
    // A rollback's secret values are the old version's, sealed for this
    // job: they are kept as they are, like the current ones.
    let secrets_from = match change.action {
        Action::JobRollback => None,
        _ => Some(&before.spec),
    };
    let mut spec = match secrets_from {
        Some(stored) => keep_stored_secrets(spec, stored)?,
        None => spec,
    };
    let sealed_reference = secrets_from.cloned().unwrap_or_else(|| spec.clone());
    seal_secrets(state, &before.namespace, id, &mut spec, Some(&sealed_reference)).await?;
    let peak = quota::peak_fires_per_second(&spec, Utc::now());
    let counted = if spec.paused { 0.0 } else { peak };
    let demand = quota::Demand { new_jobs: 0, peak: counted, peak_before: before.counted_peak };
    quota::check(tx, &before.namespace, demand).await?;
    crate::tenancy::check_references(tx, &before.namespace, &spec.calendars).await?;
    let replaced = jobs::replace(tx, id, key.as_deref(), &spec.name, &serde_json::to_value(&spec)?, peak).await;
    let stored = key_taken(replaced, key.as_deref().map(|k| (before.namespace.as_str(), k)))?;
    settle_change(tx, id, before, spec.paused).await?;
    let mut entry = audit::Entry::job(change.action, &before.namespace, id, Some(stored.version));
    entry.details = change.details;
    audit::record(tx, &change.caller.audit(change.note), &[entry]).await?;
    Ok(stored)
}

/// A job's key after a change that names `given` (or none): set once. A
/// job without one may be given one (a team adopting it into its job
/// files); a set key never changes, and a body that leaves it out keeps it.
fn kept_key(current: Option<&str>, given: Option<String>) -> ApiResult<Option<String>> {
    match (current, given) {
        (Some(current), Some(given)) if current != given => Err(field(
            "key",
            format!("is {given:?}, but the job's key is {current:?}; a key never changes (create a new job instead)"),
        )),
        (current, given) => Ok(given.or_else(|| current.map(str::to_owned))),
    }
}

#[utoipa::path(
    delete,
    path = "/v1/jobs/{id}",
    tag = "jobs",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
    ),
    request_body(content = Option<PauseRequest>, content_type = "application/json",
                 description = "Optional: a `note` saying why, recorded in the audit log"),
    responses(
        (status = 204, description = "Deleted; it never fires again"),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<StatusCode> {
    caller.require(Role::Write)?;
    let note = pause_note(body)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let skipped = delete_job(&tx, &caller, id, note.as_deref()).await?;
    tx.commit().await?;
    tracing::info!(job.id = %id, cancelled_slots = skipped, "job deleted");
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes a live job of the caller's namespaces (a tombstone, a new
/// version) and cancels what it had not delivered. Returns the ledger rows
/// cancelled.
async fn delete_job(
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    id: Uuid,
    note: Option<&str>,
) -> ApiResult<u64> {
    let (namespace, version) =
        jobs::delete(tx, id, caller.scope.sql().as_deref()).await?.ok_or_else(|| not_found(id))?;
    let entry = audit::Entry::job(Action::JobDelete, &namespace, id, Some(version));
    audit::record(tx, &caller.audit(note), &[entry]).await?;
    Ok(ledger::changes::cancel_claimed(tx, id, Cancel::Deleted).await?)
}

async fn set_paused(
    state: &AppState,
    caller: &Caller,
    id: Uuid,
    paused: bool,
    note: Option<&str>,
) -> ApiResult<VersionedJob> {
    caller.require(Role::Write)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let stored = pause_or_resume(&tx, caller, id, paused, note).await?;
    tx.commit().await?;
    Ok(VersionedJob(job_of(&stored, Utc::now())?))
}

/// Pauses (or resumes) a live job of the caller's namespaces: a new
/// version, its claimed rows cancelled, a resume's paused period recorded.
/// A pause records who paused it, when and why (`note`); a resume clears
/// that. Returns the job as stored.
pub(crate) async fn pause_or_resume(
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    id: Uuid,
    paused: bool,
    note: Option<&str>,
) -> ApiResult<StoredJob> {
    let before = lock_for_change(tx, caller, id).await?;
    if !paused && before.paused {
        // A resumed job counts against the rate quota again.
        let demand = quota::Demand { new_jobs: 0, peak: before.peak, peak_before: 0.0 };
        quota::check(tx, &before.namespace, demand).await?;
    }
    let stored = jobs::set_paused(tx, id, paused, caller.actor.author(), note).await?;
    settle_change(tx, id, &before, paused).await?;
    let action = if paused { Action::JobPause } else { Action::JobResume };
    let entry = audit::Entry::job(action, &before.namespace, id, Some(stored.version));
    audit::record(tx, &caller.audit(note), &[entry]).await?;
    Ok(stored)
}

/// The body of a pause (and of a resume, trigger or delete): why, for
/// whoever finds the job paused and for the audit log. Optional (an empty
/// body is one without a note); any other field is refused.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct PauseRequest {
    /// Why the job is paused (at most 500 characters, no control characters).
    #[schema(max_length = 500, example = "receiver maintenance until 14:00")]
    pub note: Option<String>,
}

/// Checks a pause note: shown to operators, so short and printable.
pub(crate) fn check_pause_note(note: Option<&str>) -> ApiResult<()> {
    let Some(note) = note else { return Ok(()) };
    if note.chars().count() > PAUSE_NOTE_MAX {
        return Err(field("note", format!("must be at most {PAUSE_NOTE_MAX} characters")));
    }
    if let Some(c) = domain::text::first_hidden(note) {
        return Err(field("note", domain::text::hidden_problem(c)));
    }
    Ok(())
}

/// Longest pause note (the column checks it too).
const PAUSE_NOTE_MAX: usize = 500;

#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/pause",
    tag = "jobs",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
    ),
    request_body(content = Option<PauseRequest>, content_type = "application/json",
                 description = "Optional: a `note` saying why; an empty body pauses without one"),
    responses(
        (status = 200, description = "The paused job; `pause` says who paused it, when and why", body = crate::model::Job),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn pause(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<VersionedJob> {
    let note = pause_note(body)?;
    set_paused(&state, &caller, id, true, note.as_deref()).await
}

/// The fields of an optional JSON object body, each field named in the
/// error when it is not one of `allowed`: an ignored field is a lost
/// instruction. An empty body has none.
fn body_fields(body: Option<Value>, allowed: &[&str]) -> ApiResult<serde_json::Map<String, Value>> {
    let map = match body {
        None => return Ok(serde_json::Map::new()),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(field("", "the request body must be a JSON object")),
    };
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        let expected = if allowed.is_empty() { "no fields".to_owned() } else { allowed.join(", ") };
        return Err(field(unknown, format!("unknown field; expected {expected}")));
    }
    Ok(map)
}

/// A pause's `note`, checked.
fn pause_note(body: Option<Value>) -> ApiResult<Option<String>> {
    let note = match body_fields(body, &["note"])?.remove("note") {
        None | Some(Value::Null) => None,
        Some(Value::String(note)) => Some(note),
        Some(_) => return Err(field("note", "must be a string")),
    };
    check_pause_note(note.as_deref())?;
    Ok(note)
}

#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/resume",
    tag = "jobs",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
    ),
    request_body(content = Option<PauseRequest>, content_type = "application/json",
                 description = "Optional: a `note` saying why, recorded in the audit log"),
    responses(
        (status = 200, description = "The resumed job", body = crate::model::Job),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn resume(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<VersionedJob> {
    let note = pause_note(body)?;
    set_paused(&state, &caller, id, false, note.as_deref()).await
}

/// An unknown parameter is a 400 naming it, not silently ignored.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NextQuery {
    count: Option<String>,
    from: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/jobs/{id}/next",
    tag = "jobs",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
        ("count" = Option<i64>, Query, minimum = 1, maximum = 1000, description = "How many (default 10)"),
        ("from" = Option<chrono::DateTime<chrono::Utc>>, Query,
         description = "Fire times at or after this RFC 3339 instant (default now), e.g. 2026-10-25T00:00:00Z"),
    ),
    responses(
        (status = 200, description = "The next fire times; with the job's `jitter_ms`, each one's delivery \
                                      instant `fires_at`", body = crate::model::NextFires),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn next(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    QueryParams(q): QueryParams<NextQuery>,
) -> ApiResult<Json<NextFires>> {
    let count = match q.count.as_deref() {
        None => 10,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=1000).contains(&n) => n,
            _ => return Err(field("count", "must be an integer from 1 to 1000")),
        },
    };
    let from = parse_time(q.from.as_deref(), "from")?.unwrap_or_else(Utc::now);
    let client = state.pg.get().await?;
    let stored = jobs::get(&client, id, caller.scope.sql().as_deref()).await?.ok_or_else(|| not_found(id))?;
    let spec: JobSpec = serde_json::from_value(stored.spec)?;
    let schedule = spec.compile(stored.created_at).map_err(|e| ApiError::Internal(e.into()))?;
    let jitter = fires::Jitter { job_id: id, jitter_ms: spec.jitter_ms };
    let namespace = stored.namespace;
    let calendars = crate::tenancy::calendars_named(&client, &namespace, &spec.calendars, "calendars").await?;
    let fire_times = fires::fire_times(&schedule, from, count, Some(jitter), &calendars);
    Ok(Json(NextFires { job_id: id, fire_times }))
}

/// `POST /v1/jobs/{id}/trigger`: fires the job once now, outside its
/// schedule, under its own execution id `{job_id}@{now}#manual`.
#[utoipa::path(
    post,
    path = "/v1/jobs/{id}/trigger",
    tag = "jobs",
    params(
        ("id" = String, Path, description = "The job: its id, its key, or namespace:key"),
    ),
    request_body(content = Option<PauseRequest>, content_type = "application/json",
                 description = "Optional: a `note` saying why, recorded in the audit log"),
    responses(
        (status = 202, description = "Fired once now, outside the schedule: the new execution", body = crate::model::Execution),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::JobNotFound,
        (status = 409, description = "The namespace's `max_fires_per_second` is 0: it makes no fire on request", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "Over the namespace's `max_fires_per_second`, which fires made on request count against; nothing was fired. `Retry-After` says when one fits", body = crate::error::Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds until the namespace's budget has room"))),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn trigger(
    State(state): State<AppState>,
    caller: Caller,
    JobIdPath(id): JobIdPath,
    OptionalJsonBody(body): OptionalJsonBody,
) -> ApiResult<(StatusCode, Json<Execution>)> {
    caller.require(Role::Write)?;
    let note = pause_note(body)?;
    let mut client = state.pg.get().await?;
    // The namespace's budget of fires made on request is spent first: a
    // request over it makes no fire and costs no write.
    let namespace =
        jobs::namespace_of(&client, id, caller.scope.sql().as_deref()).await?.ok_or_else(|| not_found(id))?;
    quota::spend_manual_fires(&state, &client, &std::collections::BTreeMap::from([(namespace, 1)])).await?;
    let tx = client.transaction().await?;
    let (execution, messages) = trigger_job(&tx, &caller, id, note.as_deref()).await?;
    tx.commit().await?;
    // The publish takes a connection of its own: this one goes back first.
    drop(client);
    state.publish(&messages).await;
    Ok((StatusCode::ACCEPTED, Json(execution)))
}

/// A manual fire of a live job of the caller's namespaces, now: its ledger
/// row, and the message to publish once the transaction commits.
async fn trigger_job(
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    id: Uuid,
    note: Option<&str>,
) -> ApiResult<(Execution, Vec<(domain::message::FireMessage, u32)>)> {
    let (version, namespace) =
        jobs::version_for_fire(tx, id, caller.scope.sql().as_deref()).await?.ok_or_else(|| not_found(id))?;
    let (execution, messages) = ledger::changes::insert_manual(tx, id, version).await?;
    let entry = audit::Entry::job(Action::JobTrigger, &namespace, id, None)
        .with_details(serde_json::json!({ "execution_id": execution.execution_id }));
    audit::record(tx, &caller.audit(note), &[entry]).await?;
    Ok((execution, messages))
}
