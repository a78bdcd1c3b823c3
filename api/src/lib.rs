//! The cronshard REST API (v1): a router over Postgres (jobs and the ledger)
//! and Redis (cluster state). `router` is all routes in one table; `serve`
//! runs it with graceful shutdown. The contract is the OpenAPI document
//! generated from the handlers, served at `/openapi.json` with Swagger UI at
//! `/docs`; docs/decisions.md records the choices behind it.

pub mod auth;
pub mod caller;
pub mod error;
pub mod explain;
pub mod extract;
pub mod fires;
pub mod idempotency;
pub mod job_ref;
pub mod model;
pub mod openapi;
pub mod params;
pub mod quota;
pub mod routes;
pub mod selector;
pub mod server;
pub mod tenancy;
pub mod ui;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{delete, get, post};
use deadpool_postgres::Pool as PgPool;
use runtime::redis::Pool as RedisPool;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

use runtime::redis::Keys;

use crate::error::ApiError;

pub const BODY_LIMIT_BYTES: usize = 256 * 1024;

/// The body limit of the route at `path`: an apply carries a whole folder
/// of job files, every other route one object or a bounded batch.
pub fn body_limit_of(path: &str) -> usize {
    if path == "/v1/apply" { routes::jobs::apply::APPLY_BODY_LIMIT_BYTES } else { BODY_LIMIT_BYTES }
}

#[derive(Clone)]
pub struct AppState {
    pub pg: PgPool,
    pub redis: Vec<RedisPool>,
    pub keys: Keys,
    pub cluster: String,
    /// The bootstrap admin tokens (`API_TOKENS`); empty = auth off.
    pub tokens: Arc<Vec<String>>,
    /// Stored tokens resolved lately.
    pub token_cache: Arc<auth::TokenCache>,
    /// Publishes manual triggers and replays (connects on first use).
    pub publisher: Arc<tokio::sync::Mutex<broker::publisher::Publisher>>,
    /// The ledger's retention (as the schedulers apply it), for explaining
    /// slots whose rows are gone.
    pub retention: store::ledger::partitions::Retention,
    /// What a job definition may be: the minimum interval and the internal
    /// ranges callback URLs may name (`MIN_INTERVAL_MS`, `CALLBACK_ALLOW_CIDRS`).
    pub limits: Arc<domain::job::Limits>,
    /// Wakes the schedulers after a create committed (see `store::notify`).
    pub job_changes: store::notify::Announcer,
    /// Seals secret header values before they are stored (`SECRETS_KEK`).
    pub vault: store::secrets::Vault,
}

impl AppState {
    /// A publisher for the cluster's queues on `amqp_url`.
    pub fn publisher(
        amqp_url: &str,
        topology: broker::amqp::Topology,
    ) -> Arc<tokio::sync::Mutex<broker::publisher::Publisher>> {
        Arc::new(tokio::sync::Mutex::new(broker::publisher::Publisher::new(
            amqp_url.to_owned(),
            "cronshard-api".to_owned(),
            topology,
        )))
    }

    /// Publishes the messages of rows committed `pending` and stamps them. A
    /// broker failure is not the caller's problem: the rows stay unpublished
    /// and every scheduler's outbox sweep publishes them within its grace period.
    pub async fn publish(&self, messages: &[(domain::message::FireMessage, u32)]) {
        if messages.is_empty() {
            return;
        }
        let published = match self.pg.get().await {
            Ok(client) => {
                let mut publisher = self.publisher.lock().await;
                broker::outbox::publish_then_stamp(&mut publisher, &client, messages).await
            }
            Err(e) => Err(e.into()),
        };
        if let Err(e) = published {
            // Harmless either way: the outbox sweep publishes an unstamped row
            // again, and the worker drops the duplicate.
            tracing::warn!(error = %format!("{e:#}"), "publishing or stamping failed; the outbox sweep will publish");
        }
    }
}

pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/jobs", post(routes::jobs::create).get(routes::jobs::list))
        .route("/jobs/batch", post(routes::jobs::batch::batch))
        .route(
            "/apply",
            post(routes::jobs::apply::apply).layer(DefaultBodyLimit::max(routes::jobs::apply::APPLY_BODY_LIMIT_BYTES)),
        )
        .route("/jobs/bulk", post(routes::jobs::bulk::bulk))
        // A fixed segment: matched before `/jobs/{id}` whatever the order here.
        .route("/jobs/outcomes", get(routes::stats::outcomes))
        .route(
            "/jobs/{id}",
            get(routes::jobs::get)
                .put(routes::jobs::replace)
                .patch(routes::jobs::patch::patch)
                .delete(routes::jobs::delete),
        )
        .route("/jobs/{id}/pause", post(routes::jobs::pause))
        .route("/jobs/{id}/versions", get(routes::jobs::history::versions))
        .route("/jobs/{id}/rollback", post(routes::jobs::history::rollback))
        .route("/audit", get(routes::audit::list))
        .route("/alert-channels", post(routes::alerts::create_channel).get(routes::alerts::list_channels))
        .route("/alert-channels/{id}", delete(routes::alerts::delete_channel))
        .route("/alert-rules", post(routes::alerts::create_rule).get(routes::alerts::list_rules))
        .route(
            "/alert-rules/{id}",
            axum::routing::patch(routes::alerts::update_rule).delete(routes::alerts::delete_rule),
        )
        .route("/alerts", get(routes::alerts::incidents))
        .route("/jobs/{id}/resume", post(routes::jobs::resume))
        .route("/jobs/{id}/next", get(routes::jobs::next))
        .route("/jobs/{id}/trigger", post(routes::jobs::trigger))
        .route("/jobs/{id}/backfill", post(routes::backfills::create))
        .route("/backfills", get(routes::backfills::list))
        .route("/backfills/{id}", get(routes::backfills::get))
        .route("/backfills/{id}/cancel", post(routes::backfills::cancel))
        .route("/jobs/{id}/owners", get(routes::cluster::owners))
        .route("/schedules/preview", post(routes::schedules::preview))
        .route("/executions", get(routes::executions::all))
        .route("/executions/replay", post(routes::executions::replay_many))
        .route("/executions/failures", get(routes::stats::failures))
        .route("/executions/{job_id}/{scheduled_at}/replay", post(routes::executions::replay_one))
        .route("/jobs/{id}/executions", get(routes::executions::of_job))
        .route("/jobs/{id}/executions/{scheduled_at}", get(routes::explain::explain))
        .route("/calendars", get(routes::calendars::list))
        .route(
            "/calendars/{name}",
            get(routes::calendars::get).put(routes::calendars::put).delete(routes::calendars::delete),
        )
        .route("/signing-keys", get(routes::signing_keys::list).post(routes::signing_keys::create))
        .route("/signing-keys/rotate", post(routes::signing_keys::rotate))
        .route("/signing-keys/{id}", delete(routes::signing_keys::revoke))
        .route("/cluster", get(routes::cluster::status))
        .route("/workers", get(routes::cluster::workers))
        .route("/stats/lateness", get(routes::stats::lateness))
        .route("/namespaces", post(routes::tenancy::create_namespace).get(routes::tenancy::list_namespaces))
        .route(
            "/namespaces/{name}",
            get(routes::tenancy::get_namespace)
                .put(routes::tenancy::update_namespace)
                .delete(routes::tenancy::delete_namespace),
        )
        .route("/tokens", post(routes::tenancy::create_token).get(routes::tenancy::list_tokens))
        .route("/tokens/{id}", axum::routing::delete(routes::tenancy::revoke_token))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::authenticate))
        // After the token layer, so outside it: a receiver reports with its
        // attempt's completion token, not an API token.
        .route("/executions/{execution_id}/complete", post(routes::completion::complete));
    Router::new()
        .nest("/v1", v1)
        .route("/healthz", get(routes::health::healthz))
        .route("/readyz", get(routes::health::readyz))
        // The operator console: static files, open like /docs; its data calls carry the token.
        .route(ui::UI_PATH, get(ui::redirect))
        .route("/ui/", get(ui::index))
        .route("/ui/{asset}", get(ui::asset))
        // The document and its UI are open: outside the /v1 token layer.
        .merge(utoipa_swagger_ui::SwaggerUi::new(openapi::DOCS_PATH).url(openapi::SPEC_PATH, openapi::document()))
        .fallback(|| async { ApiError::NotFound("no such route".into()) })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(middleware::from_fn(track_metrics))
        .layer(middleware::from_fn(caller::request_id))
        .layer(DefaultBodyLimit::max(BODY_LIMIT_BYTES))
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .layer(TimeoutLayer::with_status_code(axum::http::StatusCode::SERVICE_UNAVAILABLE, Duration::from_secs(30)))
        .with_state(state)
}

/// The span of a request in the debug log: its method, its target with the
/// query's values masked (`/v1/jobs?access_token=***`: a client may put a
/// secret there, and tower-http's default span prints the URI whole) and
/// its HTTP version.
fn request_span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    tracing::debug_span!(
        "request",
        method = %request.method(),
        uri = %domain::redact::url(&request.uri().to_string()),
        version = ?request.version(),
    )
}

/// Request latency by method, route template and status.
async fn track_metrics(request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::histogram!(runtime::metrics::API_REQUEST_SECONDS, "method" => method, "route" => route, "status" => status)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Serves until `shutdown` resolves, then drains in-flight requests; with
/// the default connection limits (`server::Limits`).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    server::serve(listener, router(state), server::Limits::default(), shutdown).await
}
