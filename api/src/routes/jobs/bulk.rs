//! `POST /v1/jobs/bulk`: pause, resume, delete or trigger every live job a
//! label selector matches in the caller's namespaces. Each job goes through
//! the step of the single-job route (`pause_or_resume`, `delete_job`,
//! `trigger_job`), so it changes exactly as it would there: the same new
//! version, the same cancelled ledger rows, the same manual execution. All
//! the jobs change in one transaction: an error (a resume that would exceed
//! a quota, a lost connection) changes none of them. The steps of several
//! jobs are pipelined on the transaction's connection (`IN_FLIGHT`), so a
//! call waits on the database's work rather than on a round trip per
//! statement.

use axum::Json;
use axum::extract::State;
use futures::{StreamExt, TryStreamExt};
use serde_json::Value;
use uuid::Uuid;

use domain::job::cap_field_errors;
use domain::labels::Selector;

use super::{delete_job, pause_or_resume, trigger_job};
use crate::AppState;
use crate::caller::{Caller, Role};
use crate::error::{ApiError, ApiResult};
use crate::extract::JsonBody;
use crate::model::{BulkAction, BulkResult};
use crate::params::{body_object, namespace_name};
use crate::selector;
use store::jobs::{self, BulkLock};

/// Most jobs one call changes. A call is one transaction holding a row lock
/// per job, and must end well within the request timeout (30 s): each job
/// costs its own statements (the ledger's cancel-on-change is planned over
/// every partition), about 2 ms on a busy 2-core machine.
pub const BULK_MAX: usize = 5_000;

/// Jobs whose steps are under way at once. They touch disjoint rows (each
/// job's own, all locked up front), so their order does not matter.
const IN_FLIGHT: usize = 32;

struct BulkRequest {
    action: BulkAction,
    selector: Selector,
    namespace: Option<String>,
}

/// The body, every problem named at once (422).
fn parse(body: &Value) -> ApiResult<BulkRequest> {
    use domain::job::FieldError;
    let mut problems = Vec::new();
    let map = body_object(body, &["action", "selector", "namespace"], &mut problems);
    let get = |key: &str| map.and_then(|m| m.get(key)).filter(|v| !v.is_null());
    let names = || BulkAction::ALL.map(BulkAction::as_str).join(", ");
    let action = match get("action").map(|v| v.as_str()) {
        None if map.is_some() => {
            problems.push(FieldError::new("action", format!("is required: one of {}", names())));
            None
        }
        None => None,
        Some(text) => {
            let action = text.and_then(|t| BulkAction::ALL.into_iter().find(|a| a.as_str() == t));
            if action.is_none() {
                problems.push(FieldError::new("action", format!("must be one of {}", names())));
            }
            action
        }
    };
    let selector = match get("selector") {
        None if map.is_some() => {
            problems.push(FieldError::new("selector", "is required: a label selector such as team=payments"));
            None
        }
        None => None,
        Some(Value::String(text)) => match selector::parse("selector", text) {
            Ok(s) if s.is_empty() => {
                problems.push(FieldError::new(
                    "selector",
                    "must not be empty: an empty selector would match every job; name the labels of the jobs to change",
                ));
                None
            }
            Ok(s) => Some(s),
            Err(ApiError::Validation(errors)) => {
                problems.extend(errors);
                None
            }
            Err(e) => return Err(e),
        },
        Some(_) => {
            problems.push(FieldError::new("selector", "must be a string"));
            None
        }
    };
    let namespace = match get("namespace") {
        None => None,
        Some(Value::String(name)) => match namespace_name(name) {
            Ok(()) => Some(name.clone()),
            Err(why) => {
                problems.push(FieldError::new("namespace", why));
                None
            }
        },
        Some(_) => {
            problems.push(FieldError::new("namespace", "must be a string"));
            None
        }
    };
    match (action, selector) {
        (Some(action), Some(selector)) if problems.is_empty() => Ok(BulkRequest { action, selector, namespace }),
        _ => Err(ApiError::Validation(cap_field_errors(problems))),
    }
}

#[utoipa::path(
    post,
    path = "/v1/jobs/bulk",
    tag = "jobs",
    request_body(content = crate::model::BulkRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The action was applied to every job the selector matched (at most 5,000 per \
                                      call): how many matched and how many changed", body = crate::model::BulkResult),
        crate::model::BadRequest,
        crate::model::Unauthorized,
        crate::model::Forbidden,
        (status = 409, description = "A resume would take a namespace over its quota, or a trigger would make more fires at once than a namespace's `max_fires_per_second` ever allows; no job was changed", body = crate::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "A trigger: over a namespace's `max_fires_per_second`, which fires made on request count against; nothing was fired. `Retry-After` says when they fit", body = crate::error::Problem, content_type = "application/problem+json",
         headers(("Retry-After" = u64, description = "Seconds until the namespaces' budgets have room"))),
        crate::model::PayloadTooLarge,
        crate::model::ValidationFailed,
        crate::model::InternalError,
    ),
    security(("bearer" = [])),
)]
pub async fn bulk(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<BulkResult>> {
    caller.require(Role::Write)?;
    let BulkRequest { action, selector, namespace } = parse(&body)?;
    let labels = selector::Predicate::new(&selector, 3);
    let scope = caller.scope.sql();
    let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = labels.params().collect();
    // A trigger changes no job row: it only reads the version, as the
    // single-job trigger does.
    let lock = if action == BulkAction::Trigger { BulkLock::Share } else { BulkLock::Update };
    let mut client = state.pg.get().await?;
    let tx = client.transaction().await?;
    // Every matched job is locked up front, in id order, so two bulk calls
    // over overlapping jobs wait for each other instead of deadlocking.
    let rows = jobs::lock_matching(
        &tx,
        scope.as_deref(),
        namespace.as_deref(),
        jobs::Matching::Any,
        &labels.sql,
        &params,
        BULK_MAX + 1,
        lock,
    )
    .await?;
    if rows.len() > BULK_MAX {
        return Err(crate::error::field(
            "selector",
            format!(
                "matches more than {BULK_MAX} jobs, the most one bulk call changes; narrow it (another label, \
                 a namespace) and make several calls"
            ),
        ));
    }
    // The jobs the action changes: a pause skips paused jobs, a resume active ones.
    let todo: Vec<(Uuid, String)> = rows
        .iter()
        .filter(|r| match action {
            BulkAction::Pause => !r.paused,
            BulkAction::Resume => r.paused,
            BulkAction::Delete | BulkAction::Trigger => true,
        })
        .map(|r| (r.id, r.namespace.clone()))
        .collect();
    // A trigger's fires are spent from their namespaces' budgets of fires
    // made on request, all or none, before any is made.
    if action == BulkAction::Trigger {
        let mut fires: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
        for (_, ns) in &todo {
            *fires.entry(ns.clone()).or_default() += 1;
        }
        crate::quota::spend_manual_fires(&state, &tx, &fires).await?;
    }
    // A quota is a sum over the namespace's jobs that each resume reads and
    // then adds to: in a namespace with quotas, resumes go one at a time.
    let mut in_flight = IN_FLIGHT;
    if action == BulkAction::Resume {
        let mut namespaces: Vec<&str> = todo.iter().map(|(_, ns)| ns.as_str()).collect();
        namespaces.sort_unstable();
        namespaces.dedup();
        for ns in namespaces {
            if crate::tenancy::quotas(&tx, ns).await?.is_some_and(|q| q != crate::tenancy::Quotas::default()) {
                in_flight = 1;
            }
        }
    }
    let ids: Vec<Uuid> = todo.iter().map(|(id, _)| *id).collect();
    let (tx_ref, caller_ref) = (&tx, &caller);
    let messages: Vec<Message> = futures::stream::iter(ids)
        .map(|id| step(tx_ref, caller_ref, action, id))
        .buffer_unordered(in_flight)
        .try_concat()
        .await?;
    let changed = todo.len() as u64;
    tx.commit().await?;
    // The publish takes a connection of its own: this one goes back first.
    drop(client);
    state.publish(&messages).await;
    let selector = selector.to_string();
    tracing::info!(action = action.as_str(), %selector, matched = rows.len(), changed, "bulk action");
    Ok(Json(BulkResult { action, selector, matched: rows.len() as u64, changed }))
}

/// A message of a manual fire, and the attempt it is.
type Message = (domain::message::FireMessage, u32);

/// One job's step of the action: the single-job route's own.
async fn step(
    tx: &impl deadpool_postgres::GenericClient,
    caller: &Caller,
    action: BulkAction,
    id: Uuid,
) -> ApiResult<Vec<Message>> {
    match action {
        BulkAction::Pause | BulkAction::Resume => {
            pause_or_resume(tx, caller, id, action == BulkAction::Pause, None).await?;
            Ok(Vec::new())
        }
        BulkAction::Delete => {
            delete_job(tx, caller, id, None).await?;
            Ok(Vec::new())
        }
        BulkAction::Trigger => Ok(trigger_job(tx, caller, id, None).await?.1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(body: Value) -> Vec<String> {
        match parse(&body) {
            Err(ApiError::Validation(errors)) => errors.into_iter().map(|e| e.field).collect(),
            Err(e) => panic!("{body}: {e:?}"),
            Ok(_) => panic!("{body} was accepted"),
        }
    }

    #[test]
    fn a_bulk_body_names_each_bad_field_and_refuses_an_empty_selector() {
        let ok = parse(&json!({ "action": "pause", "selector": "team=payments", "namespace": "team-a" })).unwrap();
        assert_eq!(
            (ok.action, ok.selector.to_string(), ok.namespace.as_deref()),
            (BulkAction::Pause, "team=payments".into(), Some("team-a"))
        );
        assert_eq!(fields(json!({ "action": "pause", "selector": "" })), ["selector"]);
        assert_eq!(fields(json!({ "action": "pause", "selector": "  " })), ["selector"]);
        assert_eq!(fields(json!({ "action": "pause" })), ["selector"]);
        assert_eq!(fields(json!({ "action": "stop", "selector": "a=b" })), ["action"]);
        assert_eq!(fields(json!({ "selector": "a=b,=c" })), ["action", "selector"]);
        assert_eq!(fields(json!({ "action": "delete", "selector": "a", "label": "x" })), ["label"]);
        assert_eq!(fields(json!({ "action": "delete", "selector": "a", "namespace": "Bad_Name" })), ["namespace"]);
        assert_eq!(fields(json!([1])), [""]);
    }
}
