//! Alerts: a namespace's notification channels (`/v1/alert-channels`),
//! the rules that watch its jobs (`/v1/alert-rules`), and the incidents
//! they opened with the notices sent (`/v1/alerts`). The cluster evaluates
//! the rules itself (every scheduler runs the evaluation loop; one
//! evaluates a rule at a time) and workers send the notices; see
//! `store::alerts` for why a notice is neither lost nor sent twice.
//!
//! A channel's address is sealed at rest with the namespace's data key (a
//! Slack incoming-webhook address is a secret) and shown as its scheme and
//! host only. Channels are an admin's (they send the namespace's data out);
//! rules a writer's.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use domain::alert::Condition;
use store::alerts::{self, ChannelKind};
use store::audit::{self, Action};

use crate::AppState;
use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JsonBody, PathParams, QueryParams};
use crate::params::parse_limit;

/// Default rate limit of a channel: notices per minute.
pub const CHANNEL_RATE_DEFAULT: i32 = 30;

/// A channel, its address shown as scheme and host.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertChannel {
    pub id: Uuid,
    pub namespace: String,
    pub name: String,
    /// `webhook` (JSON, signed with the namespace's signing keys) or `slack`
    /// (a Slack-compatible incoming webhook).
    pub kind: String,
    /// The address's scheme and host; the rest is never shown.
    pub url: String,
    /// Most notices sent to it per minute; more wait their turn.
    pub max_per_minute: i32,
    pub created_at: DateTime<Utc>,
}

impl From<alerts::Channel> for AlertChannel {
    fn from(c: alerts::Channel) -> Self {
        AlertChannel {
            id: c.id,
            namespace: c.namespace,
            name: c.name,
            kind: c.kind.as_str().to_owned(),
            url: c.url_shown,
            max_per_minute: c.max_per_minute,
            created_at: c.created_at,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertChannelList {
    pub items: Vec<AlertChannel>,
}

/// `scheme://host[:port]/…`: what people see of an address.
fn shown(url: &url::Url) -> String {
    let port = url.port().map(|p| format!(":{p}")).unwrap_or_default();
    format!("{}://{}{port}/…", url.scheme(), url.host_str().unwrap_or_default())
}

fn object<'a>(body: &'a Value, allowed: &[&str]) -> ApiResult<&'a serde_json::Map<String, Value>> {
    let map = body.as_object().ok_or_else(|| field("", "the request body must be a JSON object"))?;
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(field(unknown, format!("unknown field; expected one of: {}", allowed.join(", "))));
    }
    Ok(map)
}

fn name_field(map: &serde_json::Map<String, Value>) -> ApiResult<String> {
    let name = map.get("name").and_then(Value::as_str).unwrap_or_default();
    domain::labels::check_name(name).map_err(|e| field("name", e))?;
    Ok(name.to_owned())
}

fn namespace_field(caller: &Caller, map: &serde_json::Map<String, Value>) -> ApiResult<String> {
    let named = match map.get("namespace") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.as_str()),
        Some(_) => return Err(field("namespace", "must be a string")),
    };
    caller.namespace_for_new_job(named)
}

#[utoipa::path(
    post,
    path = "/v1/alert-channels",
    tag = "alerts",
    request_body(content = crate::model::Object, content_type = "application/json",
                 description = "`{name, kind: webhook|slack, url, max_per_minute? (1-600, default 30), namespace?}`"),
    responses(
        (status = 201, description = "The channel (its address shown as scheme and host)", body = AlertChannel),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 409, description = "The namespace has a channel of that name", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::SecretsUnconfigured,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn create_channel(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<AlertChannel>)> {
    caller.require(Role::Admin)?;
    let map = object(&body, &["name", "kind", "url", "max_per_minute", "namespace"])?;
    let name = name_field(map)?;
    let namespace = namespace_field(&caller, map)?;
    let kind = map
        .get("kind")
        .and_then(Value::as_str)
        .and_then(ChannelKind::parse)
        .ok_or_else(|| field("kind", "must be webhook or slack"))?;
    let raw = map.get("url").and_then(Value::as_str).ok_or_else(|| field("url", "is required: an http(s) URL"))?;
    if let Some(problem) =
        domain::job::http_url_problems(raw, &state.limits, "alert channel addresses", "").into_iter().next()
    {
        return Err(field("url", problem));
    }
    let url = url::Url::parse(raw).map_err(|e| field("url", format!("is not a valid URL ({e})")))?;
    let max_per_minute = match map.get("max_per_minute") {
        None | Some(Value::Null) => CHANNEL_RATE_DEFAULT,
        Some(v) => v
            .as_i64()
            .filter(|n| (1..=600).contains(n))
            .ok_or_else(|| field("max_per_minute", "must be an integer from 1 to 600"))? as i32,
    };
    let id = Uuid::now_v7();
    let mut client = state.pg.get().await?;
    let sealed = {
        // The data key on a connection of its own: one in use must never roll back.
        let key_client = state.pg.get().await?;
        state
            .vault
            .seal(&key_client, &namespace, &alerts::channel_url_aad(&namespace, id), raw.as_bytes())
            .await
            .map_err(|e| match e {
                store::secrets::SecretError::NoKek => {
                    ApiError::Unavailable(format!("alert channel addresses cannot be stored: {e}"))
                }
                e => ApiError::Unavailable(format!("the address cannot be sealed: {e}")),
            })?
    };
    let tx = client.transaction().await?;
    let url_shown = shown(&url);
    let new = alerts::NewChannel {
        id,
        namespace: &namespace,
        name: &name,
        kind,
        url_sealed: &sealed,
        url_shown: &url_shown,
        max_per_minute,
    };
    let channel = alerts::create_channel(&tx, &new)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("namespace {namespace:?} has an alert channel named {name:?}")))?;
    let details =
        serde_json::json!({ "name": name, "kind": kind.as_str(), "url": url_shown, "max_per_minute": max_per_minute });
    let entry = audit::Entry::other(Action::AlertChannelCreate, Some(&namespace), id.to_string()).with_details(details);
    audit::record(&tx, &caller.audit(None), &[entry]).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(channel.into())))
}

#[utoipa::path(
    get,
    path = "/v1/alert-channels",
    tag = "alerts",
    responses(
        (status = 200, description = "The channels of the token's namespaces", body = AlertChannelList),
        crate::model::Unauthorized,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn list_channels(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<AlertChannelList>> {
    let client = state.pg.get().await?;
    let scope = caller.scope.sql();
    let items = alerts::channels(&client, scope.as_deref()).await?.into_iter().map(Into::into).collect();
    Ok(Json(AlertChannelList { items }))
}

#[utoipa::path(
    delete,
    path = "/v1/alert-channels/{id}",
    tag = "alerts",
    params(("id" = Uuid, Path, description = "The channel's id")),
    responses(
        (status = 204, description = "Deleted"),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 404, description = "No such channel in the token's namespaces", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Rules still send to it", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn delete_channel(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<Uuid>,
) -> ApiResult<StatusCode> {
    caller.require(Role::Admin)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let scope = caller.scope.sql();
    match alerts::delete_channel(&tx, id, scope.as_deref()).await? {
        alerts::DeleteChannel::Deleted(c) => {
            let entry = audit::Entry::other(Action::AlertChannelDelete, Some(&c.namespace), id.to_string())
                .with_details(serde_json::json!({ "name": c.name }));
            audit::record(&tx, &caller.audit(None), &[entry]).await?;
            tx.commit().await?;
            Ok(StatusCode::NO_CONTENT)
        }
        alerts::DeleteChannel::NotFound => Err(ApiError::NotFound(format!("no alert channel with id {id}"))),
        alerts::DeleteChannel::InUse(rules) => Err(ApiError::Conflict(format!(
            "alert rules still send to this channel ({}); change or delete them first",
            rules.join(", ")
        ))),
    }
}

/// A rule, as the API shows it (the store's form: `jobs` or `selector`).
pub type AlertRule = alerts::Rule;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertRuleList {
    pub items: Vec<AlertRule>,
}

fn uuids(map: &serde_json::Map<String, Value>, key: &str, max: usize) -> ApiResult<Option<Vec<Uuid>>> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= max => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str()
                    .and_then(|s| s.parse::<Uuid>().ok())
                    .ok_or_else(|| field(&format!("{key}[{i}]"), "must be an id (a UUID)"))
            })
            .collect::<ApiResult<Vec<Uuid>>>()
            .map(Some),
        Some(_) => Err(field(key, format!("must be a list of 1 to {max} ids"))),
    }
}

/// A rule's `jobs`: each a job's id or key (in the rule's namespace).
fn job_refs(map: &serde_json::Map<String, Value>) -> ApiResult<Option<Vec<String>>> {
    const MAX: usize = 1_000;
    match map.get("jobs") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= MAX => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_str().map(str::to_owned).ok_or_else(|| field(&format!("jobs[{i}]"), "must be a job's id or key"))
            })
            .collect::<ApiResult<Vec<String>>>()
            .map(Some),
        Some(_) => Err(field("jobs", format!("must be a list of 1 to {MAX} job ids or keys"))),
    }
}

/// The ids of a rule's jobs, each a job of `namespace` (deleted ones too,
/// by id: a rule may outlive a job); a key names the namespace's live job.
async fn resolve_jobs(
    tx: &impl deadpool_postgres::GenericClient,
    namespace: &str,
    refs: &[String],
) -> ApiResult<Vec<Uuid>> {
    let scope = vec![namespace.to_owned()];
    let mut ids = Vec::with_capacity(refs.len());
    for (i, raw) in refs.iter().enumerate() {
        let unknown = || field(&format!("jobs[{i}]"), format!("no job {raw:?} in namespace {namespace:?}"));
        let id = match raw.parse::<Uuid>() {
            Ok(id) => id,
            Err(_) => {
                domain::labels::check_job_key(raw).map_err(|why| field(&format!("jobs[{i}]"), why))?;
                let found = store::jobs::by_key(tx, raw, Some(namespace), Some(&scope)).await?;
                found.iter().find(|m| m.live).map(|m| m.id).ok_or_else(unknown)?
            }
        };
        ids.push(id);
    }
    let known = store::jobs::existing(tx, &ids, Some(&scope)).await?;
    if let Some(i) = ids.iter().position(|id| !known.contains(id)) {
        return Err(field(&format!("jobs[{i}]"), format!("no job {:?} in namespace {namespace:?}", refs[i])));
    }
    Ok(ids)
}

async fn check_channels(
    tx: &impl deadpool_postgres::GenericClient,
    namespace: &str,
    channels: &[Uuid],
) -> ApiResult<()> {
    let existing = alerts::existing_channels(tx, namespace, channels).await?;
    if let Some((i, missing)) = channels.iter().enumerate().find(|(_, c)| !existing.contains(c)) {
        return Err(field(&format!("channels[{i}]"), format!("no alert channel {missing} in namespace {namespace:?}")));
    }
    Ok(())
}

#[utoipa::path(
    post,
    path = "/v1/alert-rules",
    tag = "alerts",
    request_body(content = crate::model::Object, content_type = "application/json",
                 description = "`{name, namespace?, jobs: [id or key..] | selector: \"team=pay\", condition: failed|consecutive_failures|missed|late|silent, threshold?, channels: [id..], enabled?}`"),
    responses(
        (status = 201, description = "The rule; it starts watching its jobs at its first evaluation", body = AlertRule),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 409, description = "The namespace has a rule of that name", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn create_rule(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<(StatusCode, Json<AlertRule>)> {
    caller.require(Role::Write)?;
    let map =
        object(&body, &["name", "namespace", "jobs", "selector", "condition", "threshold", "channels", "enabled"])?;
    let name = name_field(map)?;
    let namespace = namespace_field(&caller, map)?;
    let job_refs = job_refs(map)?;
    let selector = match map.get("selector") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => {
            let parsed = crate::selector::parse("selector", s)?;
            if parsed.is_empty() {
                return Err(field("selector", "must select something: an empty selector would watch every job"));
            }
            Some(s.clone())
        }
        Some(_) => return Err(field("selector", "must be a label selector (a string)")),
    };
    if job_refs.is_some() == selector.is_some() {
        return Err(field(
            "jobs",
            "give either jobs (a list of job ids or keys) or selector (a label selector), not both",
        ));
    }
    let condition = map
        .get("condition")
        .and_then(Value::as_str)
        .and_then(Condition::parse)
        .ok_or_else(|| field("condition", "must be one of failed, consecutive_failures, missed, late, silent"))?;
    let threshold = match map.get("threshold") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| field("threshold", "must be an integer"))?),
    };
    condition.check_threshold(threshold).map_err(|e| field("threshold", e))?;
    let channels = uuids(map, "channels", 10)?.ok_or_else(|| field("channels", "is required: 1 to 10 channel ids"))?;
    let enabled = match map.get("enabled") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(field("enabled", "must be true or false")),
    };
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    check_channels(&tx, &namespace, &channels).await?;
    let job_ids = match &job_refs {
        Some(refs) => Some(resolve_jobs(&tx, &namespace, refs).await?),
        None => None,
    };
    let rule = alerts::Rule {
        id: Uuid::now_v7(),
        namespace: namespace.clone(),
        name: name.clone(),
        job_ids,
        selector,
        condition,
        threshold,
        channels,
        enabled,
        created_at: Utc::now(),
    };
    let made = alerts::create_rule(&tx, &rule)
        .await?
        .ok_or_else(|| ApiError::Conflict(format!("namespace {namespace:?} has an alert rule named {name:?}")))?;
    let entry = audit::Entry::other(Action::AlertRuleCreate, Some(&namespace), made.id.to_string())
        .with_details(serde_json::to_value(&made)?);
    audit::record(&tx, &caller.audit(None), &[entry]).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(made)))
}

#[utoipa::path(
    get,
    path = "/v1/alert-rules",
    tag = "alerts",
    responses(
        (status = 200, description = "The rules of the token's namespaces", body = AlertRuleList),
        crate::model::Unauthorized,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn list_rules(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<AlertRuleList>> {
    let client = state.pg.get().await?;
    let scope = caller.scope.sql();
    let items = alerts::rules(&client, scope.as_deref()).await?;
    Ok(Json(AlertRuleList { items }))
}

#[utoipa::path(
    patch,
    path = "/v1/alert-rules/{id}",
    tag = "alerts",
    params(("id" = Uuid, Path, description = "The rule's id")),
    request_body(content = crate::model::Object, content_type = "application/json",
                 description = "`{enabled?, channels?}`: switch the rule on or off, or change where it sends"),
    responses(
        (status = 200, description = "The rule", body = AlertRule),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 404, description = "No such rule in the token's namespaces", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn update_rule(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<Uuid>,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<AlertRule>> {
    caller.require(Role::Write)?;
    let map = object(&body, &["enabled", "channels"])?;
    let enabled = match map.get("enabled") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => return Err(field("enabled", "must be true or false")),
    };
    let channels = uuids(map, "channels", 10)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let scope = caller.scope.sql();
    let rule = alerts::lock_rule(&tx, id, scope.as_deref())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no alert rule with id {id}")))?;
    if let Some(channels) = &channels {
        check_channels(&tx, &rule.namespace, channels).await?;
    }
    let updated =
        alerts::update_rule(&tx, id, enabled.unwrap_or(rule.enabled), channels.as_deref().unwrap_or(&rule.channels))
            .await?;
    let details = serde_json::json!({
        "enabled": { "before": rule.enabled, "after": updated.enabled },
        "channels": { "before": rule.channels, "after": updated.channels },
    });
    let entry =
        audit::Entry::other(Action::AlertRuleUpdate, Some(&rule.namespace), id.to_string()).with_details(details);
    audit::record(&tx, &caller.audit(None), &[entry]).await?;
    tx.commit().await?;
    Ok(Json(updated))
}

#[utoipa::path(
    delete,
    path = "/v1/alert-rules/{id}",
    tag = "alerts",
    params(("id" = Uuid, Path, description = "The rule's id")),
    responses(
        (status = 204, description = "Deleted, with its incidents"),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 404, description = "No such rule in the token's namespaces", body = crate::error::Problem, content_type = "application/problem+json"),
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn delete_rule(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<Uuid>,
) -> ApiResult<StatusCode> {
    caller.require(Role::Write)?;
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    let scope = caller.scope.sql();
    let rule = alerts::delete_rule(&tx, id, scope.as_deref())
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no alert rule with id {id}")))?;
    let entry = audit::Entry::other(Action::AlertRuleDelete, Some(&rule.namespace), id.to_string())
        .with_details(serde_json::json!({ "name": rule.name }));
    audit::record(&tx, &caller.audit(None), &[entry]).await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// An incident: a rule's condition held for a job from `opened_at` until
/// `resolved_at`, and the notices sent of it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AlertIncidentPage {
    #[schema(value_type = Vec<Object>)]
    pub items: Vec<alerts::Incident>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncidentQuery {
    job: Option<String>,
    rule: Option<String>,
    open: Option<String>,
    limit: Option<String>,
}

#[utoipa::path(
    get,
    path = "/v1/alerts",
    tag = "alerts",
    params(
        ("job" = Option<String>, Query, description = "Only this job's incidents (its id, key or namespace:key)"),
        ("rule" = Option<Uuid>, Query, description = "Only this rule's incidents"),
        ("open" = Option<bool>, Query, description = "Only open (true) or resolved (false) ones"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 500, description = "How many, newest first (default 50)"),
    ),
    responses(
        (status = 200, description = "Incidents, newest first, each with its notices (kind, state, attempts, when delivered)", body = AlertIncidentPage),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn incidents(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(q): QueryParams<IncidentQuery>,
) -> ApiResult<Json<AlertIncidentPage>> {
    let id = |name: &str, raw: Option<&str>| -> ApiResult<Option<Uuid>> {
        match raw {
            None | Some("") => Ok(None),
            Some(s) => s.parse().map(Some).map_err(|_| field(name, "must be an id (a UUID)")),
        }
    };
    let open = match q.open.as_deref() {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => return Err(field("open", "must be true or false")),
    };
    let scope = caller.scope.sql();
    let filter = alerts::IncidentFilter {
        scope: scope.as_deref(),
        job_id: crate::params::parse_job_filter(&state, &caller, "job", q.job.as_deref()).await?,
        rule_id: id("rule", q.rule.as_deref())?,
        open,
        limit: parse_limit(q.limit.as_deref())?,
    };
    let client = state.pg.get().await?;
    Ok(Json(AlertIncidentPage { items: alerts::incidents(&client, &filter).await? }))
}
