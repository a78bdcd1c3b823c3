//! The metrics port of the scheduler and worker (`METRICS_ADDR`):
//! Prometheus's `/metrics`, and the `/healthz` and `/readyz` probes of
//! [`crate::health`], on one listener.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;

use crate::health::{Health, Probe};

/// How often the recorder drains its histograms, as the exporter's own
/// listener did.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Time a client has to send a request's head; also how long an idle
/// keep-alive connection is kept.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Installs the Prometheus recorder and serves, on `addr`, `/metrics` and
/// `health`'s `/healthz` and `/readyz`. Latency histograms get buckets in
/// seconds. With `idle`, a gauge series not set for that long leaves
/// `/metrics` (per-host gauges of hosts no longer tracked: the process must
/// set the gauges it keeps more often than that).
///
/// The exporter's own listener answers every path with the metrics, so the
/// probes could not sit beside them there: the port is served here, from
/// the recorder's handle.
pub fn install_exporter(addr: SocketAddr, idle: Option<Duration>, health: Health) -> anyhow::Result<()> {
    let listener = std::net::TcpListener::bind(addr).with_context(|| format!("listening on METRICS_ADDR {addr}"))?;
    listener.set_nonblocking(true)?;
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let handle = PrometheusBuilder::new()
        .set_buckets(&[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0])?
        .idle_timeout(MetricKindMask::GAUGE, idle)
        .install_recorder()?;
    describe_all();
    let upkept = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(UPKEEP_EVERY);
        loop {
            tick.tick().await;
            upkept.run_upkeep();
        }
    });
    tokio::spawn(serve(listener, handle, health));
    Ok(())
}

async fn serve(listener: tokio::net::TcpListener, metrics: PrometheusHandle, health: Health) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors, most likely: wait for some to close.
                tracing::warn!(error = %e, "accepting a connection on the metrics port failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (metrics, health) = (metrics.clone(), health.clone());
        let service = hyper::service::service_fn(move |request| answer(request, metrics.clone(), health.clone()));
        let connection = builder.serve_connection(TokioIo::new(stream), service);
        tokio::spawn(async move {
            // A scraper or prober that went away is its own business.
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "metrics port connection closed with an error");
            }
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    metrics: PrometheusHandle,
    health: Health,
) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(match request.uri().path() {
        "/metrics" => {
            // Rendering walks every series: off the runtime's threads, as
            // the exporter's listener did.
            let text = tokio::task::spawn_blocking(move || metrics.render()).await.unwrap_or_default();
            response(StatusCode::OK, "text/plain", text)
        }
        "/healthz" => probe(health.liveness()),
        "/readyz" => probe(health.readiness()),
        _ => response(StatusCode::NOT_FOUND, "text/plain", "not found: /metrics, /healthz or /readyz\n".into()),
    })
}

fn probe(probe: Probe) -> Response<Full<Bytes>> {
    let status = if probe.ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    response(status, "application/json", probe.body.to_string())
}

fn response(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Kinds of metric, for the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

macro_rules! catalog {
    ($($konst:ident = $name:literal, $kind:ident, $help:literal;)*) => {
        $(
            #[doc = $help]
            pub const $konst: &str = $name;
        )*
        /// Every metric the binaries record: name, kind, description.
        pub const CATALOG: &[(&str, Kind, &str)] = &[$(($name, Kind::$kind, $help)),*];
    };
}

// Every metric name, declared once with what it means.
catalog! {
    FIRES_TOTAL = "cronshard_fires_total", Counter,
        "Slots a scheduler claimed and published.";
    FIRE_LATENESS_SECONDS = "cronshard_fire_lateness_seconds", Histogram,
        "How late after its due instant a scheduler handed a slot to its dispatcher (0 when ahead).";
    SCHEDULER_LOCKS_TIMED_OUT_TOTAL = "cronshard_scheduler_lock_timeouts_total", Counter,
        "Batches whose Redis locks no shard answered within its share of the bound (200 ms in all): the ledger's claim decided their slots instead.";
    SCHEDULER_LOOKAHEAD_SECONDS = "cronshard_scheduler_lookahead_seconds", Gauge,
        "How far ahead a scheduler hands slots to its dispatcher now: LOOKAHEAD_MS, more before a burst, at most MAX_LOOKAHEAD_MS.";
    PUBLISH_LEAD_SECONDS = "cronshard_publish_lead_seconds", Histogram,
        "How long before its due instant a fire message was confirmed by the broker (negative: late).";
    PUBLISH_RETRIES_TOTAL = "cronshard_publish_retries_total", Counter,
        "Publishes of claimed slots that failed and were tried again.";
    CLAIM_RETRIES_TOTAL = "cronshard_claim_retries_total", Counter,
        "Claims of ledger rows that failed (Postgres errors) and were tried again.";
    CLAIM_CONFLICTS_TOTAL = "cronshard_claim_conflicts_total", Counter,
        "Slots whose ledger row already existed when a lock winner claimed them.";
    LOCK_WINS_TOTAL = "cronshard_lock_wins_total", Counter,
        "Slot locks (Redis SET NX) this node won.";
    LOCK_LOSSES_TOTAL = "cronshard_lock_losses_total", Counter,
        "Slot locks another owner held; the slot is verified later.";
    TAKEOVER_CLAIMS_TOTAL = "cronshard_takeover_claims_total", Counter,
        "Slots claimed by a lock loser because the winner never claimed them.";
    OUTBOX_REPUBLISHED_TOTAL = "cronshard_outbox_republished_total", Counter,
        "Claimed rows whose publish was never confirmed, published again by the outbox sweep.";
    RUNNING_RECOVERED_TOTAL = "cronshard_running_recovered_total", Counter,
        "Rows left running by a worker presumed gone, delivered again.";
    LEDGER_STRANDED_TOTAL = "cronshard_ledger_stranded_total", Counter,
        "Ledger rows no process was going to move, moved on by a sweep (label status); any count is a finding.";
    BROKER_READY_MESSAGES = "cronshard_broker_ready_messages", Gauge,
        "Messages in the main and waiting queues not yet taken by a worker, as a scheduler's stranded-row sweep last counted them.";
    ALERT_EVALUATIONS_TOTAL = "cronshard_alert_evaluations_total", Counter,
        "Alert rules this scheduler evaluated.";
    ALERT_NOTICES_TOTAL = "cronshard_alert_notices_total", Counter,
        "Alert notices a worker tried to send (label outcome: delivered, retrying, failed, deferred by the channel's rate limit).";
    NAMESPACE_DELIVERIES_TOTAL = "cronshard_namespace_deliveries_total", Counter,
        "Outcomes written by a worker, per namespace (labels namespace, outcome: succeeded, retrying, failed, running for an attempt answered 202 that awaits its report); past 1,000 namespaces per worker, the rest count under namespace=\"_other\".";
    NAMESPACE_LATENESS_SECONDS = "cronshard_namespace_lateness_seconds", Histogram,
        "How late after its due instant a slot's first attempt started, per namespace (label namespace; bounded as above).";
    LEDGER_VACUUMS_TOTAL = "cronshard_ledger_vacuums_total", Counter,
        "Ledger partitions vacuumed by a scheduler because their dead row versions passed the partitions' autovacuum trigger.";
    MISFIRE_RECORDED_TOTAL = "cronshard_misfire_recorded_total", Counter,
        "Missed slots recorded skipped or missed by a misfire policy.";
    DISPATCH_STAGE_SECONDS = "cronshard_dispatch_stage_seconds", Histogram,
        "Time a scheduler's dispatcher spent per stage (label stage: lock, claim, publish, ...).";
    OWNED_JOBS = "cronshard_owned_jobs", Gauge,
        "Jobs this scheduler node owns.";
    CLUSTER_LIVE_NODES = "cronshard_cluster_live_nodes", Gauge,
        "Scheduler nodes in this node's live set.";
    HEARTBEAT_LAST_SUCCESS = "cronshard_heartbeat_last_success_timestamp_seconds", Gauge,
        "Unix time of this node's last successful heartbeat into Redis.";
    CLOCK_OFFSET_SECONDS = "cronshard_clock_offset_seconds", Gauge,
        "This process's wall clock minus the database's, as last measured (the correction it fires and delivers by).";
    CLOCK_OFFSET_UNCERTAINTY_SECONDS = "cronshard_clock_offset_uncertainty_seconds", Gauge,
        "Half the round trip of the clock measurement: the true offset is within this of the measured one.";
    CLOCK_IN_BOUNDS = "cronshard_clock_in_bounds", Gauge,
        "1 while the clock offset is within CLOCK_MAX_OFFSET_MS, 0 beyond it (a scheduler then stops firing).";
    WORKER_DELIVERIES_TOTAL = "cronshard_worker_deliveries_total", Counter,
        "Delivery attempts by outcome (succeeded, retrying, failed, skipped).";
    WORKER_MESSAGES_WITHOUT_ROW_TOTAL = "cronshard_worker_messages_without_row_total", Counter,
        "Fire messages whose ledger row did not exist when a worker went to start them: the claim that published the message was committed and then lost (a database failover to a standby that had not received it), or retention removed the row. The message is dropped.";
    WORKER_DELIVERY_SECONDS = "cronshard_worker_delivery_seconds", Histogram,
        "Duration of one delivery attempt (HTTP call or SQS send).";
    WORKER_LATENESS_SECONDS = "cronshard_worker_lateness_seconds", Histogram,
        "How late after its due instant a delivery attempt started.";
    WORKER_ATTEMPT = "cronshard_worker_attempt", Histogram,
        "The attempt number of each delivery.";
    WORKER_IN_FLIGHT = "cronshard_worker_in_flight", Gauge,
        "Deliveries running now on this worker.";
    WORKER_HELD_BYTES = "cronshard_worker_held_bytes", Gauge,
        "Estimated memory of the slots this worker holds on their way (arrived due or past their due instant: their bodies and state); it takes no further message, and holds further due slots back, while this is at WORKER_MAX_HELD_MB.";
    WORKER_ARMED_BYTES = "cronshard_worker_armed_bytes", Gauge,
        "Estimated memory of the slots this worker holds armed ahead of their due instant; it takes no further message while this is at twice WORKER_MAX_HELD_MB.";
    WORKER_LATE_SKIPPED_TOTAL = "cronshard_worker_late_skipped_total", Counter,
        "Scheduled slots that reached this worker later than MISFIRE_THRESHOLD_MS and were recorded skipped by their job's misfire policy (label policy: skip, fire_once): the workers are behind.";
    WORKER_DUPLICATES_TOTAL = "cronshard_worker_duplicates_total", Counter,
        "Messages dropped because their row was already taken (redeliveries, superseded fires).";
    WORKER_VERIFIED_TOTAL = "cronshard_worker_verified_total", Counter,
        "Due-instant checks that a slot is still wanted (label by: how it was answered).";
    WORKER_BUSY_REQUEUES_TOTAL = "cronshard_worker_busy_requeues_total", Counter,
        "Redeliveries requeued because a live worker still holds the row.";
    WORKER_ORPHANS_RELEASED_TOTAL = "cronshard_worker_orphans_released_total", Counter,
        "Rows held by this worker without a message, given back.";
    WORKER_OUTCOME_RETRIES_TOTAL = "cronshard_worker_outcome_retries_total", Counter,
        "Writes of a delivery outcome that failed and were tried again.";
    WORKER_X_DEATH_MISMATCHES_TOTAL = "cronshard_worker_x_death_mismatches_total", Counter,
        "Retry messages whose broker death count disagreed with their attempt header.";
    WORKER_BATCH_SIZE = "cronshard_worker_batch_size", Histogram,
        "Rows per batched ledger statement of a worker (label stage).";
    WORKER_STAGE_SECONDS = "cronshard_worker_stage_seconds", Histogram,
        "Time a worker spent per stage (label stage: start, verify, finish, ack).";
    WORKER_CIRCUIT_STATE = "cronshard_worker_circuit_state", Gauge,
        "Circuit breaker of each destination host this worker tracks (label host, host:port): 0 closed, 1 half-open, 2 open.";
    WORKER_CIRCUIT_OPENS_TOTAL = "cronshard_worker_circuit_opens_total", Counter,
        "Times a destination's circuit opened (label from: closed, a new outage; half_open, a failed probe).";
    WORKER_DESTINATION_WAITING = "cronshard_worker_destination_waiting", Gauge,
        "Slots held on this worker for their destination host (label host): its circuit is open or half-open, or it is at its concurrency limit.";
    WORKER_DESTINATION_LIMIT = "cronshard_worker_destination_limit", Gauge,
        "Deliveries this worker lets run at once to each destination host it tracks (label host): learnt from the host's throughput unless WORKER_MAX_PER_HOST fixes it.";
    WORKER_DESTINATION_RELEASED_TOTAL = "cronshard_worker_destination_released_total", Counter,
        "Slots handed back to the broker with a delay, without an attempt, for their destination (label reason: circuit_open, concurrency).";
    WORKER_WAITED_AGAIN_TOTAL = "cronshard_worker_waited_again_total", Counter,
        "Slots back from waiting sent back again at once while their destination's circuit was still open, their row's next return moved without a start or hand-back (also counted in cronshard_worker_destination_released_total).";
    WORKER_WAITING_PACE = "cronshard_worker_waiting_pace_per_second", Gauge,
        "Slots back from waiting for their destination this worker lets on per second: halved while its live slots are late or its deliveries queue, raised while they are on time, back to the floor after a second without a turn.";
    API_REQUEST_SECONDS = "cronshard_api_request_seconds", Histogram,
        "API request duration by method, route and status.";
}

/// Registers every metric's description with the installed recorder, so
/// `/metrics` carries a `# HELP` line for each.
pub fn describe_all() {
    for (name, kind, help) in CATALOG {
        match kind {
            Kind::Counter => metrics::describe_counter!(*name, *help),
            Kind::Gauge => metrics::describe_gauge!(*name, *help),
            Kind::Histogram => metrics::describe_histogram!(*name, *help),
        }
    }
}

/// The value of `series` (a metric name, with its labels if it has any,
/// exactly as `/metrics` prints them) in a Prometheus text exposition.
pub fn value_in(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_value_is_read_by_its_exact_name_and_labels() {
        let text = "# HELP cronshard_fires_total Fires.\ncronshard_fires_total_extra 9\ncronshard_fires_total 12\nstage_seconds_count{stage=\"lock\"} 3\n";
        assert_eq!(value_in(text, "cronshard_fires_total"), Some(12.0));
        assert_eq!(value_in(text, "stage_seconds_count{stage=\"lock\"}"), Some(3.0));
        assert_eq!(value_in(text, "cronshard_missing"), None);
    }

    #[test]
    fn metric_names_are_unique_and_prefixed() {
        let mut names: Vec<&str> = CATALOG.iter().map(|m| m.0).collect();
        assert!(names.iter().all(|n| n.starts_with("cronshard_")));
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CATALOG.len());
    }
}
