//! What the message tasks of one broker session share: the worker's
//! settings and clients, and the batched ledger writes of concurrent
//! messages.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;

use domain::slot::Status;
use store::ledger::delivery::{
    self as ledger, FinishRequest, JobsSeen, LateDecision, LateSlot, Start, StartRequest, VerifyRequest,
};

use crate::WorkerConfig;
use crate::backpressure::DueBacklog;
use crate::batch::Batcher;
use crate::deliver::Deliverers;
use crate::heartbeat::{Holding, LastBeat};
use crate::late_runs::LateRuns;
use crate::lifecycle::Rules;
use crate::pace::WaitingPace;
use crate::retry::RetryPublisher;

/// Ledger statements at once and rows per statement. Few statements is the
/// point: while one runs, the next requests queue up and the next statement
/// takes them all, so a burst becomes a few large statements instead of many
/// small ones competing for the database. Starts gate deliveries, so they
/// get two (and smaller batches, so the first deliveries begin sooner);
/// outcomes only gate acks, so they get one.
const START_STATEMENTS: usize = 2;
const START_BATCH: usize = 500;
const FINISH_STATEMENTS: usize = 1;
const FINISH_BATCH: usize = 2000;
/// Rows per statement of the writes for slots waiting for their destination.
const WAIT_BATCH: usize = 1000;
/// How long an outcome write waits for others to share its statement. It
/// only delays the ack; at 2,000 fires/s the outcomes otherwise went out
/// ~500 statements/s of ~4 rows each, the largest share of Postgres's time.
const OUTCOME_LINGER: Duration = Duration::from_millis(20);

/// How often a worker skipping late slots says so in its log (with the
/// count since it last did): often enough to see, rarely enough that a
/// backlog of thousands does not flood the log.
const LATE_SKIP_REPORT_EVERY: Duration = Duration::from_secs(10);

/// What the message tasks of one broker session share.
pub(crate) struct Shared {
    pub(super) config: WorkerConfig,
    pub(super) pg: Pool,
    pub(super) deliverers: Arc<Deliverers>,
    pub(super) retry: RetryPublisher,
    pub(super) starts: Batcher<StartRequest, (Start, JobsSeen)>,
    pub(super) late_skips: Batcher<LateSlot, LateDecision>,
    pub(super) late_skip_report: runtime::telemetry::EveryInterval,
    pub(super) late_runs: LateRuns,
    /// What the slots' lifecycles decide by.
    pub(super) rules: Rules,
    pub(super) verifies: Batcher<VerifyRequest, Start>,
    pub(super) finishes: Batcher<FinishRequest, bool>,
    pub(super) notes: Batcher<ledger::DestinationWait, bool>,
    pub(super) hand_backs: Batcher<ledger::HandBack, bool>,
    pub(super) waits_again: Batcher<ledger::HandBack, bool>,
    pub(super) give_ups: Batcher<ledger::GiveUp, bool>,
    pub(super) due_backlog: Arc<DueBacklog>,
    pub(super) holding: Arc<Holding>,
    pub(super) metrics: SlotMetrics,
    pub(super) namespaces: crate::namespace_metrics::NamespaceMetrics,
    /// How fast slots back from waiting go on.
    pub(super) waiting_pace: WaitingPace,
}

impl Shared {
    pub(crate) fn new(
        config: &WorkerConfig,
        pg: &Pool,
        deliverers: Arc<Deliverers>,
        retry: RetryPublisher,
        holding: Arc<Holding>,
        last_beat: Arc<LastBeat>,
    ) -> Self {
        let due_backlog = Arc::new(DueBacklog::new(config.max_in_flight));
        Self {
            config: config.clone(),
            pg: pg.clone(),
            deliverers,
            retry,
            starts: {
                let (pg, worker_id) = (pg.clone(), config.worker_id.clone());
                Batcher::spawn(START_BATCH, START_STATEMENTS, Duration::ZERO, move |requests| {
                    let (pg, worker_id) = (pg.clone(), worker_id.clone());
                    async move { ledger::start_batch(&pg, &worker_id, requests).await }
                })
            },
            // Only late slots ask, and a backlog brings them in thousands:
            // one statement at a time, each taking what has queued.
            late_skips: {
                let (pg, worker_id) = (pg.clone(), config.worker_id.clone());
                Batcher::spawn(START_BATCH, 1, Duration::ZERO, move |slots| {
                    let (pg, worker_id) = (pg.clone(), worker_id.clone());
                    async move { ledger::skip_late_batch(&pg, &worker_id, slots).await }
                })
            },
            late_skip_report: runtime::telemetry::EveryInterval::new(LATE_SKIP_REPORT_EVERY),
            late_runs: LateRuns::default(),
            rules: Rules::of(config),
            verifies: {
                let (pg, worker_id) = (pg.clone(), config.worker_id.clone());
                Batcher::spawn(START_BATCH, START_STATEMENTS, Duration::ZERO, move |requests| {
                    let (pg, worker_id) = (pg.clone(), worker_id.clone());
                    // Read as the batch forms: a fresh heartbeat lets the
                    // check skip the rows of unchanged jobs (`verify_batch`).
                    let heartbeat_fresh = last_beat.fresh();
                    async move { ledger::verify_batch(&pg, &worker_id, heartbeat_fresh, requests).await }
                })
            },
            finishes: {
                let (pg, backlog) = (pg.clone(), due_backlog.clone());
                Batcher::spawn(FINISH_BATCH, FINISH_STATEMENTS, OUTCOME_LINGER, move |requests| {
                    let (pg, backlog) = (pg.clone(), backlog.clone());
                    async move {
                        backlog.defer_outcomes().await;
                        ledger::finish_batch(&pg, requests).await
                    }
                })
            },
            notes: waiting_writes(pg, &config.worker_id, |pg, worker_id, waits| async move {
                ledger::note_waiting_batch(&pg, &worker_id, waits).await
            }),
            hand_backs: waiting_writes(pg, &config.worker_id, |pg, worker_id, hand_backs| async move {
                ledger::wait_for_destination_batch(&pg, &worker_id, hand_backs).await
            }),
            waits_again: waiting_writes(pg, &config.worker_id, |pg, worker_id, hand_backs| async move {
                ledger::wait_again_batch(&pg, &worker_id, hand_backs).await
            }),
            give_ups: waiting_writes(pg, &config.worker_id, |pg, worker_id, give_ups| async move {
                ledger::give_up_waiting_batch(&pg, &worker_id, give_ups).await
            }),
            due_backlog,
            holding,
            metrics: SlotMetrics::new(),
            namespaces: Default::default(),
            waiting_pace: WaitingPace::new(),
        }
    }
}

/// A batcher of one kind of write for waiting slots. An outage makes every
/// waiting slot of a host write at once, and its horizons pass hundreds a
/// second: one statement at a time, each taking what has queued.
fn waiting_writes<T, W, Fut>(pg: &Pool, worker_id: &str, write: W) -> Batcher<T, bool>
where
    T: Send + 'static,
    W: Fn(Pool, String, Vec<T>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<Vec<bool>>> + Send + 'static,
{
    let (pg, worker_id) = (pg.clone(), worker_id.to_owned());
    Batcher::spawn(WAIT_BATCH, 1, OUTCOME_LINGER, move |items| write(pg.clone(), worker_id.clone(), items))
}

/// Times one stage of a message's way through the worker that is not on
/// every slot's way (those have their handles in `SlotMetrics`).
pub(super) async fn timed<T>(stage: &'static str, work: impl std::future::Future<Output = T>) -> T {
    runtime::telemetry::timed(runtime::metrics::WORKER_STAGE_SECONDS, stage, work).await
}

/// The metrics every slot records, looked up once per session: through the
/// macros each record hashed its name and labels and searched the registry
/// (3% of a worker's CPU in a herd's drain). Counters and histograms never
/// leave the registry; the one gauge is kept there by the destinations'
/// upkeep, which touches it every few seconds (`Destinations::refresh`).
pub(super) struct SlotMetrics {
    pub(super) lateness: metrics::Histogram,
    pub(super) delivery_seconds: metrics::Histogram,
    pub(super) attempt: metrics::Histogram,
    pub(super) succeeded: metrics::Counter,
    pub(super) in_flight: metrics::Gauge,
    pub(super) stage_start: metrics::Histogram,
    pub(super) stage_verify: metrics::Histogram,
    pub(super) stage_finish: metrics::Histogram,
    pub(super) stage_ack: metrics::Histogram,
}

impl SlotMetrics {
    fn new() -> Self {
        use runtime::metrics as m;
        let stage = |stage: &'static str| metrics::histogram!(m::WORKER_STAGE_SECONDS, "stage" => stage);
        SlotMetrics {
            lateness: metrics::histogram!(m::WORKER_LATENESS_SECONDS),
            delivery_seconds: metrics::histogram!(m::WORKER_DELIVERY_SECONDS),
            attempt: metrics::histogram!(m::WORKER_ATTEMPT),
            succeeded: metrics::counter!(m::WORKER_DELIVERIES_TOTAL, "outcome" => Status::Succeeded.as_str()),
            in_flight: metrics::gauge!(m::WORKER_IN_FLIGHT),
            stage_start: stage("start"),
            stage_verify: stage("verify"),
            stage_finish: stage("finish"),
            stage_ack: stage("ack"),
        }
    }
}
