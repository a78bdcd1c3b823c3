//! The OpenAPI 3 document, generated from the handlers' `#[utoipa::path]`
//! attributes and the model's `ToSchema` derives; served at `/openapi.json`
//! with Swagger UI at `/docs`. The bodies it describes are the types the
//! handlers return (`crate::model`), so the two cannot drift.

use domain::job::{
    FieldError, HttpTarget, JobSpec, MisfirePolicy, RetryPolicy, ScheduleKind, ScheduleSpec, SqsTarget, Target,
};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Discriminator, RefOr, Schema};
use utoipa::{Modify, OpenApi};

use crate::error::Problem;
use crate::model::*;

/// Path of the generated document.
pub const SPEC_PATH: &str = "/openapi.json";
/// Path of the Swagger UI.
pub const DOCS_PATH: &str = "/docs";

/// Prometheus metrics in the text exposition format (served by the binary
/// beside the router).
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    description = "With auth on, only callers with a valid token (any role) may read it.",
    responses(
        (status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain"),
        (status = 401, description = "Auth is on and the request has no valid token", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = []))
)]
pub async fn metrics_doc() {}

/// This document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "operations",
    responses((status = 200, description = "The OpenAPI document", body = Object, content_type = "application/json"))
)]
pub async fn spec_doc() {}

/// Adds the bearer scheme and the `kind` discriminators.
struct Tweaks;

impl Modify for Tweaks {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        // `kind` tells the variants of the tagged unions apart.
        for name in ["ScheduleKind", "Target"] {
            if let Some(RefOr::T(Schema::OneOf(one_of))) = components.schemas.get_mut(name) {
                one_of.discriminator = Some(Discriminator::new("kind"));
            }
        }
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                Http::builder()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("A bootstrap token of the server's API_TOKENS (admin of every namespace), or a token made with POST /v1/tokens; auth is off when API_TOKENS is empty"))
                    .build(),
            ),
        );
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "cronshard",
        description = "The cronshard REST API (v1): distributed job scheduling. Errors are application/problem+json.",
        license(name = "Apache-2.0", identifier = "Apache-2.0")
    ),
    paths(
        crate::routes::jobs::create,
        crate::routes::jobs::batch::batch,
        crate::routes::jobs::apply::apply,
        crate::routes::backfills::create,
        crate::routes::backfills::list,
        crate::routes::backfills::get,
        crate::routes::backfills::cancel,
        crate::routes::jobs::list,
        crate::routes::jobs::get,
        crate::routes::jobs::replace,
        crate::routes::jobs::patch::patch,
        crate::routes::jobs::delete,
        crate::routes::jobs::pause,
        crate::routes::jobs::resume,
        crate::routes::jobs::next,
        crate::routes::jobs::trigger,
        crate::routes::jobs::history::versions,
        crate::routes::jobs::history::rollback,
        crate::routes::audit::list,
        crate::routes::alerts::create_channel,
        crate::routes::alerts::list_channels,
        crate::routes::alerts::delete_channel,
        crate::routes::alerts::create_rule,
        crate::routes::alerts::list_rules,
        crate::routes::alerts::update_rule,
        crate::routes::alerts::delete_rule,
        crate::routes::alerts::incidents,
        crate::routes::jobs::bulk::bulk,
        crate::routes::schedules::preview,
        crate::routes::executions::of_job,
        crate::routes::explain::explain,
        crate::routes::executions::all,
        crate::routes::executions::replay_many,
        crate::routes::executions::replay_one,
        crate::routes::completion::complete,
        crate::routes::cluster::status,
        crate::routes::cluster::owners,
        crate::routes::cluster::workers,
        crate::routes::stats::lateness,
        crate::routes::stats::failures,
        crate::routes::stats::outcomes,
        crate::routes::health::healthz,
        crate::routes::health::readyz,
        crate::routes::calendars::put,
        crate::routes::calendars::get,
        crate::routes::calendars::list,
        crate::routes::calendars::delete,
        crate::routes::signing_keys::create,
        crate::routes::signing_keys::rotate,
        crate::routes::signing_keys::list,
        crate::routes::signing_keys::revoke,
        crate::routes::tenancy::create_namespace,
        crate::routes::tenancy::list_namespaces,
        crate::routes::tenancy::get_namespace,
        crate::routes::tenancy::update_namespace,
        crate::routes::tenancy::delete_namespace,
        crate::routes::tenancy::create_token,
        crate::routes::tenancy::list_tokens,
        crate::routes::tenancy::revoke_token,
        metrics_doc,
        spec_doc,
        crate::ui::redirect,
        crate::ui::index,
        crate::ui::asset,
    ),
    components(schemas(
        JobSpec,
        PauseState,
        crate::routes::jobs::PauseRequest,
        ScheduleSpec,
        ScheduleKind,
        Target,
        HttpTarget,
        SqsTarget,
        RetryPolicy,
        domain::job::Jitter,
        domain::contract::SuccessRule,
        domain::contract::StatusPattern,
        store::signing_keys::SigningKey,
        store::signing_keys::NewSigningKey,
        store::signing_keys::KeyState,
        crate::routes::signing_keys::Rotation,
        crate::routes::signing_keys::SigningKeyList,
        crate::routes::audit::AuditActor,
        crate::routes::audit::AuditEntry,
        crate::routes::audit::AuditPage,
        crate::routes::jobs::history::JobVersion,
        crate::routes::jobs::history::JobVersions,
        crate::routes::jobs::history::RollbackRequest,
        crate::routes::alerts::AlertChannel,
        crate::routes::alerts::AlertChannelList,
        store::alerts::Rule,
        crate::routes::alerts::AlertRuleList,
        crate::routes::alerts::AlertIncidentPage,
        domain::alert::Condition,
        MisfirePolicy,
        FieldError,
        Problem,
        Job,
        JobPage,
        Execution,
        ExecutionStatus,
        ExecutionPage,
        ExecutionSearchPage,
        ListedExecution,
        ExecutionWithHistory,
        SlotExplanation,
        crate::explain::Explanation,
        crate::explain::Verdict,
        ReplayRequest,
        ReplayOneRequest,
        BatchRequest,
        crate::model::ApplyRequest,
        crate::routes::backfills::BackfillRequest,
        crate::routes::backfills::BackfillView,
        crate::routes::backfills::BackfillPlan,
        crate::routes::backfills::BackfillPage,
        crate::routes::backfills::Progress,
        domain::backfill::Mode,
        domain::backfill::State,
        crate::model::PruneRequest,
        crate::model::ApplyResult,
        crate::model::ApplyItem,
        crate::model::ApplySummary,
        crate::routes::jobs::apply::Outcome,
        BatchItem,
        BatchResult,
        ReplayableStatus,
        ReplayResult,
        NextFires,
        FireTime,
        DstMark,
        SchedulePreviewRequest,
        SchedulePreview,
        BulkAction,
        BulkRequest,
        BulkResult,
        Cluster,
        ClusterNode,
        JobOwners,
        Worker,
        WorkerList,
        LatenessStats,
        LatenessBucket,
        FailureGroups,
        FailureGroup,
        FailureExample,
        JobOutcomes,
        JobOutcomesPage,
        ProbeStatus,
        Namespace,
        NamespaceList,
        TokenInfo,
        NewToken,
        TokenList,
        crate::caller::Role,
        domain::job::Overlap,
        Calendar,
        CalendarPage,
        domain::calendar::CalendarSpec,
        domain::calendar::DateRange,
    )),
    modifiers(&Tweaks),
    tags(
        (name = "jobs", description = "Job definitions"),
        (name = "schedules", description = "Fire times of a schedule before any job has it"),
        (name = "executions", description = "Outcome rows (the ledger)"),
        (name = "calendars", description = "Excluded dates, ranges and cron rules that jobs reference by name"),
        (name = "signing keys", description = "The secrets that sign a namespace's deliveries (Standard Webhooks)"),
        (name = "audit", description = "Who changed what, when and why (admin)"),
        (name = "alerts", description = "Notification channels, alert rules and the incidents they raise"),
        (name = "cluster", description = "Scheduler nodes and workers"),
        (name = "stats", description = "Aggregates over the ledger for an operator's console"),
        (name = "namespaces", description = "Namespaces and their quotas (admin of every namespace)"),
        (name = "tokens", description = "Scoped API tokens (admin)"),
        (name = "operations", description = "Probes, metrics and this document; open, no token"),
        (name = "console", description = "The operator console's page and files (/ui/); open, its data calls send a token")
    )
)]
pub struct ApiDoc;

/// The generated document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enum_values(schema: &str) -> Vec<String> {
        let doc = serde_json::to_value(document()).unwrap();
        doc["components"]["schemas"][schema]["enum"]
            .as_array()
            .unwrap_or_else(|| panic!("{schema} is not an enum schema"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    }

    /// The documented sets are the ledger's.
    #[test]
    fn documented_statuses_are_the_ledgers() {
        let all: Vec<String> = ExecutionStatus::ALL.iter().map(|s| s.to_string()).collect();
        assert_eq!(enum_values("ExecutionStatus"), all);
        let replayable: Vec<String> = ExecutionStatus::REPLAYABLE.iter().map(|s| s.to_string()).collect();
        assert_eq!(enum_values("ReplayableStatus"), replayable);
    }
}
