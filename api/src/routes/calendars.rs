//! `/v1/calendars`: named sets of excluded times that jobs reference by
//! name (`calendars` in a job). Each lives in a namespace; `?namespace=`
//! picks it as for a job (the caller's only namespace, or `default` for a
//! caller of every one). A calendar a live job references cannot be deleted.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Deserialize;

use domain::calendar::CalendarSpec;
use store::calendars::{self, Delete, Put};

use store::audit;

use crate::AppState;
use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JsonBody, PathParams, QueryParams};
use crate::model::{Calendar, CalendarPage};
use crate::params::parse_limit;

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct NamespaceQuery {
    /// The calendar's namespace (default: the token's only one, or `default`).
    namespace: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this namespace's calendars.
    namespace: Option<String>,
    /// Page size, 1 to 500 (default 50).
    limit: Option<String>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

fn no_calendar(namespace: &str, name: &str) -> ApiError {
    ApiError::NotFound(format!("no calendar {name:?} in namespace {namespace:?}"))
}

/// The namespace and name a request names, checked.
fn address(caller: &Caller, namespace: Option<&str>, name: &str) -> ApiResult<String> {
    domain::labels::check_name(name).map_err(|why| field("name", why))?;
    caller.namespace_for_new_job(namespace)
}

#[utoipa::path(
    put,
    path = "/v1/calendars/{name}",
    tag = "calendars",
    params(("name" = String, Path, description = "The calendar's name (a DNS label)"), NamespaceQuery),
    request_body(content = CalendarSpec, content_type = "application/json"),
    responses(
        (status = 201, description = "The calendar was created", body = Calendar),
        (status = 200, description = "The calendar was replaced; jobs that reference it skip by the new one from the next slot the schedulers arm", body = Calendar),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn put(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(name): PathParams<String>,
    QueryParams(query): QueryParams<NamespaceQuery>,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Calendar>)> {
    caller.require(Role::Write)?;
    let namespace = address(&caller, query.namespace.as_deref(), &name)?;
    let spec = CalendarSpec::from_json(&body).map_err(ApiError::Validation)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let put = write(&tx, &caller, &namespace, &name, &spec, &body).await?;
    tx.commit().await?;
    Ok(match put {
        Put::Created(s) => {
            tracing::info!(calendar = %name, namespace = %namespace, "calendar created");
            (StatusCode::CREATED, Json(s.into()))
        }
        Put::Replaced(s) => {
            tracing::info!(calendar = %name, namespace = %namespace, version = s.version, "calendar replaced");
            (StatusCode::OK, Json(s.into()))
        }
    })
}

/// Creates or replaces a calendar (`body`: its definition as sent, what
/// the audit log records) in the caller's transaction.
pub(crate) async fn write(
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    namespace: &str,
    name: &str,
    spec: &CalendarSpec,
    body: &serde_json::Value,
) -> ApiResult<Put> {
    let put = calendars::put(tx, namespace, name, spec).await?;
    let version = match &put {
        Put::Created(s) | Put::Replaced(s) => s.version,
    };
    let entry = audit::Entry::other(audit::Action::CalendarPut, Some(namespace), name)
        .with_details(serde_json::json!({ "version": version, "definition": body }));
    audit::record(tx, &caller.audit(None), &[entry]).await?;
    Ok(put)
}

#[utoipa::path(
    get,
    path = "/v1/calendars/{name}",
    tag = "calendars",
    params(("name" = String, Path, description = "The calendar's name"), NamespaceQuery),
    responses(
        (status = 200, description = "The calendar", body = Calendar),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        (status = 404, description = "No such calendar in that namespace", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(name): PathParams<String>,
    QueryParams(query): QueryParams<NamespaceQuery>,
) -> ApiResult<Json<Calendar>> {
    let namespace = address(&caller, query.namespace.as_deref(), &name)?;
    let client = state.pg.get().await?;
    let stored = calendars::get(&client, &namespace, &name).await?.ok_or_else(|| no_calendar(&namespace, &name))?;
    Ok(Json(stored.into()))
}

#[utoipa::path(
    get,
    path = "/v1/calendars",
    tag = "calendars",
    params(ListQuery),
    responses(
        (status = 200, description = "Calendars of the token's namespaces, by namespace and name", body = CalendarPage),
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
    QueryParams(query): QueryParams<ListQuery>,
) -> ApiResult<Json<CalendarPage>> {
    let limit = parse_limit(query.limit.as_deref())?;
    crate::params::namespace_param(query.namespace.as_deref())?;
    let namespaces = match &query.namespace {
        Some(ns) if caller.scope.contains(ns) => Some(vec![ns.clone()]),
        Some(_) => return Ok(Json(CalendarPage { items: Vec::new(), next_cursor: None })),
        None => caller.scope.sql(),
    };
    let after = match query.cursor.as_deref() {
        None | Some("") => None,
        Some(c) => Some(c.split_once('/').ok_or_else(|| field("cursor", "is not a cursor returned by this endpoint"))?),
    };
    let client = state.pg.get().await?;
    let mut rows = calendars::list(&client, namespaces.as_deref(), after, limit + 1).await?;
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next_cursor = has_more.then(|| rows.last().map(|c| domain::calendar::key(&c.namespace, &c.name))).flatten();
    Ok(Json(CalendarPage { items: rows.into_iter().map(Calendar::from).collect(), next_cursor }))
}

#[utoipa::path(
    delete,
    path = "/v1/calendars/{name}",
    tag = "calendars",
    params(("name" = String, Path, description = "The calendar's name"), NamespaceQuery),
    responses(
        (status = 204, description = "Deleted"),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 404, description = "No such calendar in that namespace", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Live jobs reference the calendar (the first ones are named)", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(name): PathParams<String>,
    QueryParams(query): QueryParams<NamespaceQuery>,
) -> ApiResult<StatusCode> {
    caller.require(Role::Write)?;
    let namespace = address(&caller, query.namespace.as_deref(), &name)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    match calendars::delete(&tx, &namespace, &name).await? {
        Delete::Deleted => {
            let entry = audit::Entry::other(audit::Action::CalendarDelete, Some(&namespace), name.clone());
            audit::record(&tx, &caller.audit(None), &[entry]).await?;
            tx.commit().await?;
            tracing::info!(calendar = %name, namespace = %namespace, "calendar deleted");
            Ok(StatusCode::NO_CONTENT)
        }
        Delete::NotFound => Err(no_calendar(&namespace, &name)),
        Delete::InUse(jobs) => Err(ApiError::Conflict(format!(
            "calendar {name:?} is referenced by live jobs ({}); remove it from them first",
            jobs.iter().map(|j| j.to_string()).collect::<Vec<_>>().join(", ")
        ))),
    }
}
