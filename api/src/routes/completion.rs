//! `POST /v1/executions/{execution_id}/complete`: the receiver of a job
//! whose completion is `async` answered a delivery 202 and reports here how
//! the work ended. It holds no API token: the attempt's completion token
//! (sent with the delivery as `X-Cronshard-Completion-Token`) is its
//! authority, for that attempt of that execution only.

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

use domain::slot::Status;
use store::ledger::delivery::{self, Completed};

use crate::AppState;
use crate::error::{ApiError, ApiResult, field};
use crate::extract::{JsonBody, PathParams};

/// The header a receiver sends its completion token in (or as a bearer
/// token in `Authorization`).
pub const TOKEN_HEADER: &str = "x-cronshard-completion-token";
/// Bytes of a report's `result`: a short summary, kept on the ledger row.
pub const RESULT_MAX_BYTES: usize = 1024;

/// How the work the receiver took on with its 202 ended.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompletionReport {
    /// `succeeded` or `failed`. A reported failure is final: it is not
    /// retried (the receiver knows its work failed; a timeout is retried).
    pub status: ReportedStatus,
    /// A short result or reason, at most 1,024 bytes, kept on the execution
    /// (masked as response excerpts are).
    #[serde(default)]
    #[schema(max_length = 1024)]
    pub result: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReportedStatus {
    Succeeded,
    Failed,
}

impl ReportedStatus {
    fn status(self) -> Status {
        match self {
            ReportedStatus::Succeeded => Status::Succeeded,
            ReportedStatus::Failed => Status::Failed,
        }
    }
}

/// The report's effect.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CompletionRecorded {
    pub execution_id: String,
    /// The attempt the token reported.
    pub attempt: u32,
    /// The execution's status now.
    pub status: crate::model::ExecutionStatus,
    /// False when this same report was recorded before (a repeated report
    /// is answered the same way and changes nothing).
    pub recorded_now: bool,
}

#[utoipa::path(
    post,
    path = "/v1/executions/{execution_id}/complete",
    tag = "executions",
    params(
        ("execution_id" = String, Path, description = "The execution id the delivery carried (`webhook-id`, `X-Cronshard-Execution-Id`), percent-encoded (`#` as `%23`)"),
        ("X-Cronshard-Completion-Token" = Option<String>, Header, description = "The attempt's completion token, as the delivery carried it (or as `Authorization: Bearer <token>`)"),
    ),
    request_body(content = CompletionReport, content_type = "application/json"),
    responses(
        (status = 200, description = "The outcome is recorded (or was, by this same report before)", body = CompletionRecorded),
        crate::model::BadRequest,
        crate::model::CompletionTokenRejected,
        crate::model::ExecutionNotFound,
        crate::model::NotAwaitingReport,
        crate::model::ValidationFailed,
        crate::model::SecretsUnconfigured,
        crate::model::InternalError,
    ),
    security(()),
)]
pub async fn complete(
    State(state): State<AppState>,
    PathParams(execution_id): PathParams<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody,
) -> ApiResult<Json<CompletionRecorded>> {
    let report: CompletionReport = serde_json::from_value(body)
        .map_err(|e| ApiError::BadRequest(format!("the body is not a completion report: {e}")))?;
    if let Some(result) = &report.result
        && result.len() > RESULT_MAX_BYTES
    {
        return Err(field("result", format!("must be at most {RESULT_MAX_BYTES} bytes (it has {})", result.len())));
    }
    let token = presented_token(&headers).ok_or_else(|| {
        ApiError::UnauthorizedBecause(format!(
            "a completion report needs the attempt's completion token, in {TOKEN_HEADER} or as a bearer token"
        ))
    })?;
    let keyring = state.vault.keyring();
    if keyring.is_empty() {
        return Err(ApiError::Unavailable(format!(
            "completion reports cannot be checked: {}",
            store::secrets::SecretError::NoKek
        )));
    }
    // A token is checked before the id is read as a slot: an id that is not
    // one is answered as an unknown token would be, telling a prober nothing.
    let wrong_token = || ApiError::UnauthorizedBecause("the completion token is not one of this execution's".into());
    let attempt = store::completion::verify(keyring, &execution_id, token).ok_or_else(wrong_token)?;
    let slot = domain::execution::parse_execution_id(&execution_id).ok_or_else(wrong_token)?;
    let result = report.result.as_deref().map(domain::redact::response_body);
    let client = state.pg.get().await?;
    let status = report.status.status();
    let completed = delivery::complete(&client, slot, &execution_id, attempt as i32, status, result.as_deref()).await?;
    let (status, recorded_now) = match completed {
        Completed::Recorded(status) => (status, true),
        Completed::AlreadyRecorded(status) => (status, false),
        Completed::NotAwaiting { status, attempts } => {
            return Err(ApiError::Conflict(format!(
                "attempt {attempt} of {execution_id} no longer awaits a report: the execution is {status} \
                 after attempt {attempts} (a report after the deadline, a replaced run or a different earlier \
                 report changes nothing)",
                status = status.as_str()
            )));
        }
        Completed::NoSuchExecution => return Err(ApiError::NotFound(format!("no execution {execution_id}"))),
    };
    tracing::info!(execution.id = %execution_id, attempt, outcome = status.as_str(), recorded_now, "completion reported");
    Ok(Json(CompletionRecorded { execution_id, attempt, status, recorded_now }))
}

/// The token in `X-Cronshard-Completion-Token`, else a bearer token.
fn presented_token(headers: &HeaderMap) -> Option<&str> {
    if let Some(token) = headers.get(TOKEN_HEADER) {
        return token.to_str().ok();
    }
    let authorization = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = authorization.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then_some(token.trim())
}
