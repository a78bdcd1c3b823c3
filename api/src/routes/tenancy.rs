//! `/v1/namespaces` and `/v1/tokens`: who may act where. An admin of every
//! namespace (a bootstrap token, or a stored token with `["*"]`) manages
//! namespaces and their quotas; an admin of some namespaces makes and
//! revokes tokens for those, with at most its own role.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::{Map, Value, json};
use store::audit;
use uuid::Uuid;

use crate::AppState;
use crate::auth::{new_token, token_hash};
use crate::caller::{Caller, EVERY_NAMESPACE, Role, Scope};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JsonBody, PathParams};
use crate::model::{Namespace, NamespaceList, NewToken, TokenInfo, TokenList};
use crate::tenancy;

/// The body as an object with only the `allowed` keys.
fn object<'a>(body: &'a Value, allowed: &[&str]) -> ApiResult<&'a Map<String, Value>> {
    let obj = body.as_object().ok_or_else(|| field("", "the request body must be a JSON object"))?;
    if let Some(key) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(field(key, format!("unknown field; expected one of: {}", allowed.join(", "))));
    }
    Ok(obj)
}

/// An optional non-negative number field (null = no limit).
fn limit(obj: &Map<String, Value>, key: &str) -> ApiResult<Option<f64>> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64() {
            Some(n) if n >= 0.0 && n.is_finite() => Ok(Some(n)),
            _ => Err(field(key, "must be a number of at least 0, or null for no limit")),
        },
    }
}

fn max_jobs(obj: &Map<String, Value>) -> ApiResult<Option<i64>> {
    match obj.get("max_jobs") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_i64()
            .filter(|n| *n >= 0)
            .map(Some)
            .ok_or_else(|| field("max_jobs", "must be an integer of at least 0, or null for no limit")),
    }
}

/// A namespace name field.
fn namespace_name(v: Option<&Value>, key: &str) -> ApiResult<String> {
    let name = v.and_then(Value::as_str).ok_or_else(|| field(key, "is required and must be a string"))?;
    crate::params::namespace_name(name).map_err(|why| field(key, why))?;
    Ok(name.to_owned())
}

fn no_namespace(name: &str) -> ApiError {
    ApiError::NotFound(format!("no namespace {name:?}"))
}

/// The `{name}` of a namespace's path: one that is not a valid name names
/// no namespace (and may hold what Postgres text cannot).
fn namespace_path(name: &str) -> ApiResult<()> {
    crate::params::namespace_name(name).map_err(|_| no_namespace(name))
}

/// `POST /v1/namespaces` with `{name, max_jobs?, max_fires_per_second?}`.
#[utoipa::path(
    post,
    path = "/v1/namespaces",
    tag = "namespaces",
    request_body(content = crate::model::Object, description = "`{name, max_jobs?, max_fires_per_second?}`", content_type = "application/json"),
    responses(
        (status = 201, description = "The namespace", body = Namespace),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 409, description = "The name is taken", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn create_namespace(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<Namespace>)> {
    caller.require_cluster_admin()?;
    let obj = object(&body, &["name", "max_jobs", "max_fires_per_second"])?;
    let name = namespace_name(obj.get("name"), "name")?;
    let (jobs, fires) = (max_jobs(obj)?, limit(obj, "max_fires_per_second")?);
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let quotas = tenancy::Quotas { max_jobs: jobs, max_fires_per_second: fires };
    if !tenancy::write_namespace(&tx, &name, quotas, tenancy::Write::Create).await? {
        return Err(ApiError::Conflict(format!("namespace {name:?} exists")));
    }
    let entry = audit::Entry::other(audit::Action::NamespaceCreate, Some(&name), name.clone())
        .with_details(json!({ "max_jobs": jobs, "max_fires_per_second": fires }));
    audit::record(&tx, &caller.audit(None), &[entry]).await?;
    tx.commit().await?;
    let namespace = tenancy::namespace(&client, &name, false).await?.ok_or_else(|| no_namespace(&name))?;
    Ok((StatusCode::CREATED, Json(namespace)))
}

/// `GET /v1/namespaces`: those the token acts in.
#[utoipa::path(
    get,
    path = "/v1/namespaces",
    tag = "namespaces",
    responses(
        (status = 200, description = "The namespaces this token acts in, with their quotas and use", body = NamespaceList),
        crate::model::Unauthorized,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn list_namespaces(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<NamespaceList>> {
    let client = state.pg.get().await?;
    Ok(Json(NamespaceList { items: tenancy::namespaces(&client, &caller.scope).await? }))
}

/// `GET /v1/namespaces/{name}`
#[utoipa::path(
    get,
    path = "/v1/namespaces/{name}",
    tag = "namespaces",
    params(("name" = String, Path, description = "The namespace")),
    responses(
        (status = 200, description = "The namespace", body = Namespace),
        crate::model::Unauthorized,
        (status = 404, description = "No such namespace for this token", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn get_namespace(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<Json<Namespace>> {
    namespace_path(&name)?;
    if !caller.scope.contains(&name) {
        return Err(no_namespace(&name));
    }
    let client = state.pg.get().await?;
    Ok(Json(tenancy::namespace(&client, &name, false).await?.ok_or_else(|| no_namespace(&name))?))
}

/// `PUT /v1/namespaces/{name}` with `{max_jobs?, max_fires_per_second?}`:
/// sets both quotas (an absent one is no limit). Jobs already there stay;
/// the quotas apply to what is created or changed next.
#[utoipa::path(
    put,
    path = "/v1/namespaces/{name}",
    tag = "namespaces",
    params(("name" = String, Path, description = "The namespace")),
    request_body(content = crate::model::Object, description = "`{max_jobs?, max_fires_per_second?}`", content_type = "application/json"),
    responses(
        (status = 200, description = "The namespace", body = Namespace),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 404, description = "No such namespace", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn update_namespace(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(name): PathParams<String>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<Namespace>> {
    caller.require_cluster_admin()?;
    namespace_path(&name)?;
    let obj = object(&body, &["max_jobs", "max_fires_per_second"])?;
    let (jobs, fires) = (max_jobs(obj)?, limit(obj, "max_fires_per_second")?);
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let quotas = tenancy::Quotas { max_jobs: jobs, max_fires_per_second: fires };
    if !tenancy::write_namespace(&tx, &name, quotas, tenancy::Write::Update).await? {
        return Err(no_namespace(&name));
    }
    let entry = audit::Entry::other(audit::Action::NamespaceUpdate, Some(&name), name.clone())
        .with_details(json!({ "max_jobs": jobs, "max_fires_per_second": fires }));
    audit::record(&tx, &caller.audit(None), &[entry]).await?;
    tx.commit().await?;
    Ok(Json(tenancy::namespace(&client, &name, false).await?.ok_or_else(|| no_namespace(&name))?))
}

/// `DELETE /v1/namespaces/{name}`: only a namespace that never had a job
/// (a deleted job's history stays under its namespace), never `default`.
#[utoipa::path(
    delete,
    path = "/v1/namespaces/{name}",
    tag = "namespaces",
    params(("name" = String, Path, description = "The namespace")),
    responses(
        (status = 204, description = "Deleted"),
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 404, description = "No such namespace", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The namespace has jobs, or is `default`", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn delete_namespace(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(name): PathParams<String>,
) -> ApiResult<StatusCode> {
    caller.require_cluster_admin()?;
    namespace_path(&name)?;
    if name == "default" {
        return Err(ApiError::Conflict("the default namespace cannot be deleted".into()));
    }
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    match tenancy::delete_namespace(&tx, &name).await? {
        Ok(true) => {
            // Cluster-wide: the namespace's own entries go unread with it.
            let entry = audit::Entry::other(audit::Action::NamespaceDelete, None, name.clone());
            audit::record(&tx, &caller.audit(None), &[entry]).await?;
            tx.commit().await?;
            Ok(StatusCode::NO_CONTENT)
        }
        Ok(false) => Err(no_namespace(&name)),
        Err(jobs) => Err(ApiError::Conflict(format!(
            "namespace {name:?} has {jobs} job(s), deleted ones included (their history stays under it)"
        ))),
    }
}

/// `POST /v1/tokens` with `{name, role, namespaces}`: the token is in the
/// response, once.
#[utoipa::path(
    post,
    path = "/v1/tokens",
    tag = "tokens",
    request_body(content = crate::model::Object, description = "`{name, role: read|write|admin, namespaces: [..] (\"*\" = every namespace)}`", content_type = "application/json"),
    responses(
        (status = 201, description = "The token, shown only here", body = NewToken),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<NewToken>)> {
    caller.require(Role::Admin)?;
    let obj = object(&body, &["name", "role", "namespaces"])?;
    let name = obj
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| (1..=200).contains(&n.chars().count()) && domain::text::first_hidden(n).is_none())
        .ok_or_else(|| field("name", "is required: 1-200 characters, no control, bidi or zero-width characters"))?
        .to_owned();
    let role = obj
        .get("role")
        .and_then(Value::as_str)
        .and_then(Role::parse)
        .ok_or_else(|| field("role", "must be one of read, write, admin"))?;
    if role > caller.role {
        return Err(ApiError::Forbidden(format!(
            "a {} token cannot make a {} token",
            caller.role.as_str(),
            role.as_str()
        )));
    }
    let names: Vec<String> = match obj.get("namespaces").and_then(Value::as_array) {
        Some(items) if !items.is_empty() => {
            let mut names = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let key = format!("namespaces[{i}]");
                if item.as_str() == Some(EVERY_NAMESPACE) {
                    names.push(EVERY_NAMESPACE.to_owned());
                } else {
                    names.push(namespace_name(Some(item), &key)?);
                }
            }
            names
        }
        _ => return Err(field("namespaces", "is required: a non-empty list of namespace names, or [\"*\"]")),
    };
    let scope = Scope::from_list(names);
    if !caller.scope.covers(&scope) {
        return Err(ApiError::Forbidden("a token can only be given namespaces its maker acts in".into()));
    }
    let client = state.pg.get().await?;
    if let Scope::Only(names) = &scope {
        for (i, name) in names.iter().enumerate() {
            if tenancy::namespace(&client, name, false).await?.is_none() {
                return Err(field(&format!("namespaces[{i}]"), format!("no namespace {name:?}")));
            }
        }
    }
    let token = new_token();
    let mut client = client;
    let tx = client.transaction().await?;
    let (id, created_at) = tenancy::insert_token(&tx, &name, &token_hash(&token), role, &scope).await?;
    let details = json!({ "name": name, "role": role.as_str(), "namespaces": scope.to_list() });
    audit::record(&tx, &caller.audit(None), &token_entries(audit::Action::TokenCreate, id, &scope, Some(details)))
        .await?;
    tx.commit().await?;
    tracing::info!(token.id = %id, token.name = %name, role = role.as_str(), "API token created");
    let info = TokenInfo { id, name, role, namespaces: scope.to_list(), created_at, revoked_at: None };
    Ok((StatusCode::CREATED, Json(NewToken { info, token })))
}

/// `GET /v1/tokens`: the stored tokens within the caller's namespaces.
#[utoipa::path(
    get,
    path = "/v1/tokens",
    tag = "tokens",
    responses(
        (status = 200, description = "Stored tokens (never the tokens themselves), newest first", body = TokenList),
        crate::model::Unauthorized,
        crate::model::Forbidden,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn list_tokens(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<TokenList>> {
    caller.require(Role::Admin)?;
    let client = state.pg.get().await?;
    Ok(Json(TokenList { items: tenancy::tokens(&client, &caller.scope).await? }))
}

/// `DELETE /v1/tokens/{id}`: revokes a token at once on this replica and
/// within a few seconds on the others.
#[utoipa::path(
    delete,
    path = "/v1/tokens/{id}",
    tag = "tokens",
    params(("id" = uuid::Uuid, Path, description = "The token's id")),
    responses(
        (status = 204, description = "Revoked"),
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 404, description = "No such token within this token's namespaces", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<String>,
) -> ApiResult<StatusCode> {
    caller.require(Role::Admin)?;
    let missing = || ApiError::NotFound(format!("no token with id {id:?}"));
    let id: Uuid = id.parse().map_err(|_| missing())?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let token = tenancy::token(&tx, id, &caller.scope).await?.ok_or_else(missing)?;
    tenancy::revoke_token(&tx, id).await?;
    let details = json!({ "name": token.name });
    let scope = Scope::from_list(token.namespaces);
    audit::record(&tx, &caller.audit(None), &token_entries(audit::Action::TokenRevoke, id, &scope, Some(details)))
        .await?;
    tx.commit().await?;
    state.token_cache.clear();
    tracing::info!(token.id = %id, "API token revoked");
    Ok(StatusCode::NO_CONTENT)
}

/// A token's change, entered once per namespace it acts in (each
/// namespace's admins read it), or once for the cluster for a token of
/// every namespace.
fn token_entries(action: audit::Action, id: Uuid, scope: &Scope, details: Option<Value>) -> Vec<audit::Entry> {
    let namespaces: Vec<Option<&str>> = match scope {
        Scope::Every => vec![None],
        Scope::Only(names) => names.iter().map(|n| Some(n.as_str())).collect(),
    };
    namespaces
        .into_iter()
        .map(|ns| {
            let entry = audit::Entry::other(action, ns, id.to_string());
            match &details {
                Some(d) => entry.with_details(d.clone()),
                None => entry,
            }
        })
        .collect()
}
