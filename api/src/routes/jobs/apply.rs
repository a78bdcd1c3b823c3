//! `POST /v1/apply`: makes a namespace's keyed jobs (and its calendars)
//! equal to a set of documents, in one transaction: what a team keeps in
//! Git. Each job is found by its key; a job whose definition would not
//! change is left alone (no write, no version, no slot touched); a changed
//! one goes through the replace's step (`update_job`), so it follows the
//! rule every change follows near its slots; a new one through the
//! create's statement. State is not definition: a job's pause, who made
//! it and why are kept whatever the documents say, and labels a document
//! leaves out are kept, as a replace keeps them. `prune` deletes the keyed
//! jobs a selector matches that the documents no longer name. A dry run
//! does all of it and rolls back, so it answers exactly what an apply
//! would do, refusals included.

use std::collections::{BTreeMap, HashMap, HashSet};

use axum::Json;
use axum::extract::State;
use chrono::Utc;
use serde_json::Value;
use uuid::Uuid;

use domain::calendar::CalendarSpec;
use domain::job::{FieldError, JobSpec, Target};
use store::audit::Action;
use store::calendars::Put;
use store::jobs;

use super::{Before, Change, Parsed, SECRET_SHOWN_AS, delete_job, fires_ever, keep_stored_secrets, new_job, parsed};
use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::JsonBody;
use crate::model::{ApplyItem, ApplyResult, ApplySummary};
use crate::{AppState, quota, selector};

/// Most jobs one apply names: one transaction over a bounded set.
pub const APPLY_JOBS_MAX: usize = 10_000;
/// Most calendars one apply names.
pub const APPLY_CALENDARS_MAX: usize = 1_000;
/// The body limit of this route: room for its most jobs.
pub const APPLY_BODY_LIMIT_BYTES: usize = 16 * 1024 * 1024;

/// What an apply does with one document.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Created,
    Changed,
    Unchanged,
    Deleted,
}

/// A request, checked.
struct Request {
    namespace: Option<String>,
    calendars: Vec<CalendarDocument>,
    jobs: Vec<JobDocument>,
    prune: Option<domain::labels::Selector>,
    prune_text: String,
    dry_run: bool,
}

struct CalendarDocument {
    namespace: String,
    name: String,
    spec: CalendarSpec,
    body: Value,
}

struct JobDocument {
    namespace: String,
    key: String,
    parsed: Parsed,
    body: Value,
}

#[utoipa::path(
    post,
    path = "/v1/apply",
    tag = "jobs",
    description = "Makes the cluster's keyed jobs and calendars equal to a set of documents, in one transaction. \
                   Each job document is a create body with a `key`: a job with that key in its namespace is \
                   updated when its definition would change (its pause and the labels the document leaves out are \
                   kept), left alone when it would not (no new version), and created when there is none. With \
                   `prune`, the keyed jobs its selector matches that no document names are deleted. With \
                   `dry_run`, the same answer and nothing written (a read token may ask for a dry run).",
    request_body(content = crate::model::ApplyRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "What was (or, for a dry run, would be) done with each document", body = ApplyResult),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 409, description = "A namespace's quota would be exceeded, or a key was taken meanwhile; nothing was applied", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::PayloadTooLarge,
        (status = 422, description = "A document is invalid: each error names `jobs[i].field` or `calendars[i].field`; nothing was applied", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn apply(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<ApplyResult>> {
    let request = parse(&caller, &state.limits, &body)?;
    // A dry run writes nothing (its transaction rolls back), so a read
    // token may ask, e.g. a pull request's check showing the diff.
    caller.require(if request.dry_run { Role::Read } else { Role::Write })?;
    let started = std::time::Instant::now();
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    tx.batch_execute(store::notify::DEFER_TO_AFTER_COMMIT).await?;

    let mut items: Vec<ApplyItem> = Vec::new();
    for (index, calendar) in request.calendars.iter().enumerate() {
        items.push(apply_calendar(&tx, &caller, calendar).await.map_err(|e| prefixed("calendars", index, e))?);
    }
    // Prune first: what it deletes frees its namespace's quota for what
    // the documents add.
    let named: HashSet<(&str, &str)> = request.jobs.iter().map(|j| (j.namespace.as_str(), j.key.as_str())).collect();
    let deleted = match &request.prune {
        Some(selector) => prune(&tx, &caller, &request, selector, &named).await?,
        None => Vec::new(),
    };
    let names: Vec<(&str, &str)> = named.iter().copied().collect();
    let scope = caller.scope.sql();
    let mut existing: HashMap<(String, String), (Uuid, jobs::Locked)> =
        jobs::lock_by_keys(&tx, &names, scope.as_deref())
            .await?
            .into_iter()
            .filter_map(|(id, locked)| locked.key.clone().map(|key| ((locked.namespace.clone(), key), (id, locked))))
            .collect();
    let mut creates: Vec<(usize, &JobDocument)> = Vec::new();
    let mut job_items: BTreeMap<usize, ApplyItem> = BTreeMap::new();
    for (index, document) in request.jobs.iter().enumerate() {
        match existing.remove(&(document.namespace.clone(), document.key.clone())) {
            Some((id, locked)) => {
                let item = update(&state, &tx, &caller, id, locked, document).await;
                job_items.insert(index, item.map_err(|e| prefixed("jobs", index, e))?);
            }
            None => creates.push((index, document)),
        }
    }
    for (index, item) in create(&state, &tx, &caller, &creates).await? {
        job_items.insert(index, item);
    }
    items.extend(job_items.into_values());
    items.extend(deleted);

    if request.dry_run {
        tx.rollback().await?;
        for item in &mut items {
            if item.result == Outcome::Created {
                item.id = None;
                item.version = None;
            }
        }
    } else {
        tx.commit().await?;
        if items.iter().any(|i| i.result == Outcome::Created) {
            state.job_changes.changed();
        }
    }
    let summary = ApplySummary {
        created: items.iter().filter(|i| i.result == Outcome::Created).count(),
        changed: items.iter().filter(|i| i.result == Outcome::Changed).count(),
        unchanged: items.iter().filter(|i| i.result == Outcome::Unchanged).count(),
        deleted: items.iter().filter(|i| i.result == Outcome::Deleted).count(),
    };
    tracing::info!(
        dry_run = request.dry_run,
        created = summary.created,
        changed = summary.changed,
        unchanged = summary.unchanged,
        deleted = summary.deleted,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "applied"
    );
    Ok(Json(ApplyResult { dry_run: request.dry_run, items, summary }))
}

/// Checks the whole request before anything is read or written: every
/// document's problems at once, each named by where it is.
fn parse(caller: &Caller, limits: &domain::job::Limits, body: &Value) -> ApiResult<Request> {
    let fields = ["namespace", "jobs", "calendars", "prune", "dry_run"];
    let map = body.as_object().ok_or_else(|| field("", "the request body must be a JSON object"))?;
    if let Some(unknown) = map.keys().find(|k| !fields.contains(&k.as_str())) {
        return Err(field(unknown, format!("unknown field; expected {}", fields.join(", "))));
    }
    let namespace = match map.get("namespace") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) => Some(caller.namespace_for_new_job(Some(n))?),
        Some(_) => return Err(field("namespace", "must be a string")),
    };
    let dry_run = match map.get("dry_run") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(field("dry_run", "must be true or false")),
    };
    let documents = |name: &str, max: usize| -> ApiResult<Vec<Value>> {
        match map.get(name) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) if items.len() <= max => Ok(items.clone()),
            Some(_) => Err(field(name, format!("must be an array of at most {max} documents"))),
        }
    };
    let (prune, prune_text) = match map.get("prune") {
        None | Some(Value::Null) => (None, String::new()),
        Some(Value::Object(p)) => {
            if let Some(unknown) = p.keys().find(|k| *k != "selector") {
                return Err(field(&format!("prune.{unknown}"), "unknown field; expected selector"));
            }
            let text = p.get("selector").and_then(Value::as_str).unwrap_or_default();
            let parsed = selector::parse("prune.selector", text)?;
            if text.trim().is_empty() {
                return Err(field(
                    "prune.selector",
                    "is required: pruning deletes the jobs it matches that no document names, so it must say which",
                ));
            }
            (Some(parsed), text.to_owned())
        }
        Some(_) => return Err(field("prune", "must be an object with a selector")),
    };
    let namespace_of = |named: Option<&str>| caller.namespace_for_new_job(named.or(namespace.as_deref()));

    let mut errors: Vec<FieldError> = Vec::new();
    let mut calendars = Vec::new();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for (index, doc) in documents("calendars", APPLY_CALENDARS_MAX)?.into_iter().enumerate() {
        let checked = (|| {
            let mut definition = doc.clone();
            let object = definition.as_object_mut().ok_or_else(|| field("", "must be a JSON object"))?;
            let name = match object.remove("name") {
                Some(Value::String(name)) => name,
                _ => return Err(field("name", "is required: the calendar's name")),
            };
            domain::labels::check_name(&name).map_err(|why| field("name", why))?;
            let named = match object.remove("namespace") {
                None | Some(Value::Null) => None,
                Some(Value::String(n)) => Some(n),
                Some(_) => return Err(field("namespace", "must be a string")),
            };
            let namespace = namespace_of(named.as_deref())?;
            let spec = CalendarSpec::from_json(&definition).map_err(ApiError::Validation)?;
            Ok(CalendarDocument { namespace, name, spec, body: definition })
        })();
        match checked {
            Ok(document) => {
                let id = (document.namespace.clone(), document.name.clone());
                if let Some(first) = seen.insert(id, index) {
                    errors.push(FieldError::new(
                        format!("calendars[{index}].name"),
                        format!("{:?} is also calendars[{first}]'s name in this namespace", document.name),
                    ));
                }
                calendars.push(document);
            }
            Err(e) => errors.extend(problems("calendars", index, e)?),
        }
    }
    let mut jobs = Vec::new();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for (index, doc) in documents("jobs", APPLY_JOBS_MAX)?.into_iter().enumerate() {
        let checked = parsed(&doc, limits).and_then(|parsed| {
            let key = parsed.key.clone().ok_or_else(|| {
                field("key", "is required: an applied job is found by its key (a DNS label unique in its namespace)")
            })?;
            let namespace = namespace_of(parsed.namespace.as_deref())?;
            Ok(JobDocument { namespace, key, parsed, body: doc })
        });
        match checked {
            Ok(document) => {
                if let Some(first) = seen.insert((document.namespace.clone(), document.key.clone()), index) {
                    errors.push(FieldError::new(
                        format!("jobs[{index}].key"),
                        format!("{:?} is also jobs[{first}]'s key in this namespace", document.key),
                    ));
                }
                jobs.push(document);
            }
            Err(e) => errors.extend(problems("jobs", index, e)?),
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::Validation(domain::job::cap_field_errors(errors)));
    }
    Ok(Request { namespace, calendars, jobs, prune, prune_text, dry_run })
}

/// A document's refusal as field errors under `{list}[{index}]`; anything
/// else (the database failing) fails the request.
fn problems(list: &str, index: usize, e: ApiError) -> ApiResult<Vec<FieldError>> {
    match prefixed(list, index, e) {
        ApiError::Validation(errors) => Ok(errors),
        other => Err(other),
    }
}

/// An error of one document, its fields named under `{list}[{index}]`.
fn prefixed(list: &str, index: usize, e: ApiError) -> ApiError {
    let at = |f: &str| if f.is_empty() { format!("{list}[{index}]") } else { format!("{list}[{index}].{f}") };
    match e {
        ApiError::Validation(errors) => {
            ApiError::Validation(errors.into_iter().map(|e| FieldError::new(at(&e.field), e.message)).collect())
        }
        ApiError::Conflict(detail) => ApiError::Conflict(format!("{}: {detail}", at(""))),
        other => other,
    }
}

async fn apply_calendar(
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    document: &CalendarDocument,
) -> ApiResult<ApplyItem> {
    let stored = store::calendars::get(tx, &document.namespace, &document.name).await?;
    let item = |result, changes| ApplyItem {
        kind: "calendar",
        namespace: document.namespace.clone(),
        key: None,
        name: Some(document.name.clone()),
        id: None,
        version: None,
        result,
        changes,
    };
    if let Some(stored) = &stored
        && stored.spec == document.spec
    {
        return Ok(item(Outcome::Unchanged, None));
    }
    let put = crate::routes::calendars::write(
        tx,
        caller,
        &document.namespace,
        &document.name,
        &document.spec,
        &document.body,
    )
    .await?;
    Ok(match (put, stored) {
        (Put::Replaced(_), Some(before)) => {
            let before = serde_json::to_value(&before.spec)?;
            let after = serde_json::to_value(&document.spec)?;
            item(Outcome::Changed, Some(domain::diff::changes(Some(&before), Some(&after))))
        }
        _ => item(Outcome::Created, None),
    })
}

/// One existing job: left alone when the document would not change its
/// definition, else replaced (a new version, through the replace's step).
async fn update(
    state: &AppState,
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    id: Uuid,
    locked: jobs::Locked,
    document: &JobDocument,
) -> ApiResult<ApplyItem> {
    let before = Before::of(locked)?;
    let mut spec = document.parsed.spec.clone();
    // State, not definition: a document's `paused` only says how a job is
    // created.
    super::keep_unsaid(&document.body, &mut spec, &before);
    spec.paused = before.paused;
    let spec = keep_equal_secrets(state, id, keep_stored_secrets(spec, &before.spec)?, &before.spec).await?;
    let stored_json = serde_json::to_value(&before.spec)?;
    let new_json = serde_json::to_value(&spec)?;
    let mut item = ApplyItem {
        kind: "job",
        namespace: before.namespace.clone(),
        key: Some(document.key.clone()),
        name: None,
        id: Some(id),
        version: Some(before.version),
        result: Outcome::Unchanged,
        changes: None,
    };
    if stored_json == new_json {
        return Ok(item);
    }
    let changes = domain::diff::changes(Some(&stored_json), Some(&new_json));
    let definition = Parsed { spec, namespace: Some(before.namespace.clone()), key: Some(document.key.clone()) };
    let stored = super::update_job(state, tx, Change::of(caller, Action::JobApply), id, &before, definition).await?;
    item.version = Some(stored.version);
    item.result = Outcome::Changed;
    item.changes = Some(changes);
    Ok(item)
}

/// A document's secret header values that equal the stored ones take
/// their stored (sealed) form, so a file that holds the secret in clear is
/// unchanged when it has not changed.
async fn keep_equal_secrets(state: &AppState, id: Uuid, mut spec: JobSpec, stored: &JobSpec) -> ApiResult<JobSpec> {
    let (Target::Http(new), Target::Http(old)) = (&mut spec.target, &stored.target) else { return Ok(spec) };
    for (name, value) in new.secret_headers.iter_mut() {
        let Some(sealed) = old.secret_headers.get(name) else { continue };
        if value == sealed || value == SECRET_SHOWN_AS {
            continue;
        }
        let mut one = BTreeMap::from([(name.clone(), sealed.clone())]);
        state
            .vault
            .open_headers(&state.pg, id, &mut one)
            .await
            .map_err(|e| ApiError::Unavailable(format!("a stored secret header value cannot be opened: {e}")))?;
        if one.get(name) == Some(value) {
            *value = sealed.clone();
        }
    }
    Ok(spec)
}

/// The new jobs, in one statement after the checks a create makes: each
/// can fire, its namespace's quota holds them all, its calendars exist.
async fn create(
    state: &AppState,
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    documents: &[(usize, &JobDocument)],
) -> ApiResult<Vec<(usize, ApplyItem)>> {
    if documents.is_empty() {
        return Ok(Vec::new());
    }
    let now = Utc::now();
    let mut by_namespace: BTreeMap<&str, (i64, f64)> = BTreeMap::new();
    let mut ids = Vec::with_capacity(documents.len());
    let mut specs = Vec::with_capacity(documents.len());
    let mut peaks = Vec::with_capacity(documents.len());
    for (index, document) in documents {
        let spec = &document.parsed.spec;
        fires_ever(spec).map_err(|e| prefixed("jobs", *index, e))?;
        crate::tenancy::check_references(tx, &document.namespace, &spec.calendars)
            .await
            .map_err(|e| prefixed("jobs", *index, e))?;
        let peak = quota::peak_fires_per_second(spec, now);
        let demand = by_namespace.entry(&document.namespace).or_default();
        demand.0 += 1;
        demand.1 += if spec.paused { 0.0 } else { peak };
        let id = Uuid::now_v7();
        let mut stored = spec.clone();
        if matches!(&spec.target, Target::Http(h) if !h.secret_headers.is_empty()) {
            super::seal_secrets(state, &document.namespace, id, &mut stored, None).await?;
        }
        ids.push(id);
        specs.push(serde_json::to_value(&stored)?);
        peaks.push(peak);
    }
    for (namespace, (new_jobs, peak)) in by_namespace {
        quota::check(tx, namespace, quota::Demand { new_jobs, peak, peak_before: 0.0 }).await?;
    }
    let new: Vec<jobs::NewJob> = documents
        .iter()
        .enumerate()
        .map(|(i, (_, d))| new_job(ids[i], Some(&d.key), &d.parsed.spec, &specs[i], &d.namespace, peaks[i]))
        .collect();
    let inserted = jobs::create(tx, &new, &caller.audit(None)).await;
    let rows = super::key_taken(inserted, None)?;
    let versions: HashMap<Uuid, i64> = rows.iter().map(|r| (r.id, r.version)).collect();
    Ok(documents
        .iter()
        .enumerate()
        .map(|(i, (index, d))| {
            let item = ApplyItem {
                kind: "job",
                namespace: d.namespace.clone(),
                key: Some(d.key.clone()),
                name: None,
                id: Some(ids[i]),
                version: versions.get(&ids[i]).copied(),
                result: Outcome::Created,
                changes: None,
            };
            (*index, item)
        })
        .collect())
}

/// Deletes the keyed jobs the selector matches, in the request's namespace
/// (or every namespace of the caller), that no document names.
async fn prune(
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    request: &Request,
    selector: &domain::labels::Selector,
    named: &HashSet<(&str, &str)>,
) -> ApiResult<Vec<ApplyItem>> {
    let labels = selector::Predicate::new(selector, 3);
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = labels.params().collect();
    let scope = caller.scope.sql();
    let matched = jobs::lock_matching(
        tx,
        scope.as_deref(),
        request.namespace.as_deref(),
        jobs::Matching::Keyed,
        &labels.sql,
        &params,
        APPLY_JOBS_MAX + 1,
        jobs::BulkLock::Update,
    )
    .await?;
    if matched.len() > APPLY_JOBS_MAX {
        return Err(field(
            "prune.selector",
            format!("matches more than {APPLY_JOBS_MAX} keyed jobs, the most one apply prunes; narrow it"),
        ));
    }
    let note: String = format!("pruned by apply: no longer in the applied files (selector {})", request.prune_text)
        .chars()
        .take(500)
        .collect();
    let mut deleted = Vec::new();
    for job in matched {
        let Some(key) = job.key else { continue };
        if named.contains(&(job.namespace.as_str(), key.as_str())) {
            continue;
        }
        delete_job(tx, caller, job.id, Some(&note)).await?;
        deleted.push(ApplyItem {
            kind: "job",
            namespace: job.namespace,
            key: Some(key),
            name: None,
            id: Some(job.id),
            version: None,
            result: Outcome::Deleted,
            changes: None,
        });
    }
    Ok(deleted)
}
