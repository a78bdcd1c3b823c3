//! One AMQP message on its way through the worker: parse (a fire message or
//! a bundle), per slot start the ledger row (arming a pre-armed one), wait
//! for the due instant, verify an armed row, deliver, record the outcome
//! (after publishing any follow-up), then settle the message: ack, or
//! requeue when a slot cannot be decided yet. The ledger writes of
//! concurrent messages go through `Batcher`s, a few large statements in a
//! burst.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lapin::Acker;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use domain::job::MisfirePolicy;
use domain::message::FireMessage;
use domain::slot::Status;
use domain::slot::Trigger;
use runtime::backoff::Backoff;
use runtime::telemetry::timed_into;
use store::ledger::delivery::{
    self as ledger, FinishRequest, HeldSlot, JobsSeen, LateDecision, LateSlot, OverlapDecision, Start, StartRequest,
    VerifyRequest,
};

use super::WorkerConfig;
use super::backpressure::DueBacklog;
use super::batch::{Answer, Batcher};
use super::deliver::{Deliverers, Outcome, destination_health};
use super::destination::{self, Gate, Waiting};
use super::heartbeat::{Hold, Holding, LastBeat};
use super::holdings::HeldCharge;
use super::pace::WaitingPace;
use super::retry::{self, RetryPublisher};

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

/// Per job, the last late `fire_once` slot this worker let run and when
/// (or the run the ledger named when it skipped one), behind a lock that
/// makes the job's late slots decide one at a time. Entries older than
/// `LATE_RUNS_KEPT` are dropped as the map grows.
struct LateRuns {
    inner: std::sync::Mutex<LateRunsInner>,
}

struct LateRunsInner {
    jobs: std::collections::HashMap<uuid::Uuid, LastLateRun>,
    /// Size at which the map is next swept: doubled past what a sweep
    /// kept, so a map of recent entries is not swept on every call.
    sweep_at: usize,
}

type LastLateRun = Arc<tokio::sync::Mutex<Option<(chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>)>>>;

/// How long a job's last late run is remembered: slots due before it that
/// arrive later still find it in the ledger.
const LATE_RUNS_KEPT: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// Entries past which the map is first swept of old ones.
const LATE_RUNS_SWEEP_AT: usize = 100_000;

impl Default for LateRuns {
    fn default() -> Self {
        let inner = LateRunsInner { jobs: Default::default(), sweep_at: LATE_RUNS_SWEEP_AT };
        Self { inner: std::sync::Mutex::new(inner) }
    }
}

impl LateRuns {
    fn of(&self, job_id: uuid::Uuid) -> LastLateRun {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.jobs.len() >= inner.sweep_at {
            let kept_after = runtime::clock::now() - LATE_RUNS_KEPT;
            // A locked entry is being decided: kept.
            inner.jobs.retain(|_, run| run.try_lock().map_or(true, |run| run.is_some_and(|(_, at)| at > kept_after)));
            inner.sweep_at = LATE_RUNS_SWEEP_AT.max(2 * inner.jobs.len());
        }
        inner.jobs.entry(job_id).or_default().clone()
    }
}

/// What the message tasks of one broker session share.
pub(crate) struct Shared {
    config: WorkerConfig,
    pg: Pool,
    deliverers: Arc<Deliverers>,
    retry: RetryPublisher,
    starts: Batcher<StartRequest, (Start, JobsSeen)>,
    late_skips: Batcher<LateSlot, LateDecision>,
    late_skip_report: runtime::telemetry::EveryInterval,
    late_runs: LateRuns,
    verifies: Batcher<VerifyRequest, Start>,
    finishes: Batcher<FinishRequest, bool>,
    notes: Batcher<ledger::DestinationWait, bool>,
    hand_backs: Batcher<ledger::HandBack, bool>,
    waits_again: Batcher<ledger::HandBack, bool>,
    give_ups: Batcher<ledger::GiveUp, bool>,
    due_backlog: Arc<DueBacklog>,
    holding: Arc<Holding>,
    metrics: SlotMetrics,
    /// How fast slots back from waiting go on.
    waiting_pace: WaitingPace,
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
async fn timed<T>(stage: &'static str, work: impl std::future::Future<Output = T>) -> T {
    runtime::telemetry::timed(runtime::metrics::WORKER_STAGE_SECONDS, stage, work).await
}

/// The metrics every slot records, looked up once per session: through the
/// macros each record hashed its name and labels and searched the registry
/// (3% of a worker's CPU in a herd's drain). Counters and histograms never
/// leave the registry; the one gauge is kept there by the destinations'
/// upkeep, which touches it every few seconds (`Destinations::refresh`).
struct SlotMetrics {
    lateness: metrics::Histogram,
    delivery_seconds: metrics::Histogram,
    attempt: metrics::Histogram,
    succeeded: metrics::Counter,
    in_flight: metrics::Gauge,
    stage_start: metrics::Histogram,
    stage_verify: metrics::Histogram,
    stage_finish: metrics::Histogram,
    stage_ack: metrics::Histogram,
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

/// What a message's task keeps of its AMQP delivery: how to settle it and
/// how it arrived. Taken apart in the session, so that the task does not
/// carry the delivery (432 bytes, its headers) until the ack.
pub(crate) struct Received {
    acker: Acker,
    attempt: u32,
    redelivered: bool,
    /// Handed back to wait for its destination (`retry::is_wait`).
    waited: bool,
    retries_by_x_death: Option<u32>,
}

impl Received {
    pub(crate) fn of(delivery: Delivery) -> Self {
        Received {
            attempt: broker::properties::attempt_of(&delivery.properties),
            redelivered: delivery.redelivered,
            waited: retry::is_wait(&delivery),
            retries_by_x_death: broker::properties::retries_by_x_death(&delivery.properties),
            acker: delivery.acker,
        }
    }
}

/// Handles one AMQP message: a single fire message or a bundle of them
/// (`broker::properties::BUNDLE_CONTENT_TYPE`), each slot on its own way to its due
/// instant. The message is acked once every slot in it is decided, or
/// requeued whole when one cannot be yet: the slots already decided come
/// back as duplicates, which the ledger drops.
/// `parsed` is the session's parse of the body (it charges the message
/// before taking the next).
pub(crate) async fn handle(
    shared: Arc<Shared>,
    received: Received,
    parsed: serde_json::Result<Vec<FireMessage>>,
    charges: Vec<HeldCharge>,
    in_flight: Arc<Semaphore>,
    token: CancellationToken,
) {
    let messages = match parsed {
        Ok(messages) if !messages.is_empty() => messages,
        result => {
            // Dead-letters to the failed queue, where an operator can see it.
            let error = result.err().map_or_else(|| "an empty bundle".to_owned(), |e| e.to_string());
            tracing::error!(error, "unparsable message; rejecting to the failed queue");
            let _ = received.acker.reject(BasicRejectOptions { requeue: false }).await;
            return;
        }
    };
    // A retried message passed through one retry queue per earlier failure.
    if let Some(retries) = received.retries_by_x_death
        && retries + 1 != received.attempt
        && !received.waited
    {
        tracing::debug!(execution.id = %messages[0].execution_id, attempt = received.attempt, x_death_retries = retries, "x-death disagrees with the attempt header; going by the header");
        metrics::counter!(runtime::metrics::WORKER_X_DEATH_MISMATCHES_TOTAL).increment(1);
    }
    // Boxed, so that this task keeps only what recording the outcomes
    // needs: the messages and every slot's steps are freed once the last
    // slot is delivered, while the outcomes wait for their statement
    // (deferred through a burst, `DueBacklog`).
    let (settle, delivered) =
        Box::pin(deliver_message(&shared, &received, messages, charges, &in_flight, &token)).await;
    let settle = if delivered.is_empty() { settle } else { settle.and(shared.record(delivered).await) };
    match settle {
        Settle::Ack => {
            if let Err(e) = timed_into(&shared.metrics.stage_ack, received.acker.ack(BasicAckOptions::default())).await
            {
                tracing::warn!(error = %e, "ack failed; the broker will redeliver");
            }
        }
        Settle::Requeue(wait) => requeue_after(&received.acker, wait, &token).await,
    }
}

/// Every slot of a message up to its delivery, or to a decision without
/// one: how the message settles so far, and the outcomes left to record.
async fn deliver_message<'a>(
    shared: &'a Shared,
    received: &Received,
    messages: Vec<FireMessage>,
    charges: Vec<HeldCharge>,
    in_flight: &Semaphore,
    token: &CancellationToken,
) -> (Settle, Vec<Delivered<'a>>) {
    let Received { attempt, redelivered, waited, .. } = *received;
    // A slot handed back to wait for its destination was on time when it
    // first arrived: only a first attempt's first arrival can be late.
    let first_arrival = attempt == 1 && !waited;
    let arrival = Arrival { attempt, redelivered, first_arrival, waited };
    // Slots go their own ways at once, except a job's misfire catch-up
    // slots, which the scheduler bundles oldest first: those are delivered
    // one after the other, so the receiver sees them in scheduled order.
    // Each slot with its charge, released as the slot is decided.
    let mut runs: Vec<Vec<(&FireMessage, HeldCharge)>> = Vec::new();
    for (m, charge) in messages.iter().zip(charges) {
        match runs.iter_mut().find(|run| {
            m.trigger == Trigger::Misfire && run[0].0.trigger == Trigger::Misfire && run[0].0.job_id == m.job_id
        }) {
            Some(run) => run.push((m, charge)),
            None => runs.push(vec![(m, charge)]),
        }
    }
    // Unordered, not `join_all`: a bundle's slots wake one at a time (a
    // ledger answer, a permit, a response), and `join_all` polls every slot
    // of the bundle on each wake; in a 100,000 herd those idle polls were a
    // visible share of a worker's CPU in the drain.
    let mut runs: FuturesUnordered<_> = runs
        .into_iter()
        .map(|run| async move {
            let mut settle = Settle::Ack;
            let mut delivered = Vec::new();
            let mut run = run.into_iter().peekable();
            while let Some((m, charge)) = run.next() {
                match handle_slot(shared, m, arrival, charge, in_flight, token).await {
                    SlotEnd::Settled(s) => settle = settle.and(s),
                    // The next catch-up slot's overlap check reads this one's row.
                    SlotEnd::Delivered(d) if run.peek().is_some() => settle = settle.and(shared.record(vec![d]).await),
                    SlotEnd::Delivered(d) => delivered.push(d),
                }
            }
            (settle, delivered)
        })
        .collect();
    let mut settle = Settle::Ack;
    let mut delivered = Vec::new();
    while let Some((run_settle, run_delivered)) = runs.next().await {
        settle = settle.and(run_settle);
        delivered.extend(run_delivered);
    }
    (settle, delivered)
}

/// What the AMQP message of a slot needs once the slot is decided.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Settle {
    Ack,
    /// Back to the queue after this long (at once when the worker stops).
    Requeue(Duration),
}

impl Settle {
    /// A message carrying both: requeued, after the longer wait.
    fn and(self, other: Settle) -> Settle {
        match (self, other) {
            (Settle::Ack, Settle::Ack) => Settle::Ack,
            (Settle::Requeue(a), Settle::Requeue(b)) => Settle::Requeue(a.max(b)),
            (Settle::Requeue(wait), Settle::Ack) | (Settle::Ack, Settle::Requeue(wait)) => Settle::Requeue(wait),
        }
    }
}

/// How a slot's message reached the worker.
#[derive(Debug, Clone, Copy)]
struct Arrival {
    attempt: u32,
    redelivered: bool,
    /// The first attempt, not handed back to wait for its destination: the
    /// one arrival that may be late by the misfire threshold.
    first_arrival: bool,
    /// Back from a delay queue where it waited for its destination.
    waited: bool,
}

/// How a slot's part in its message ends.
// Returned once and moved into a list: boxing would be an allocation per slot.
#[allow(clippy::large_enum_variant)]
enum SlotEnd<'a> {
    Settled(Settle),
    /// Delivered: its outcome is recorded with the message's others.
    Delivered(Delivered<'a>),
}

/// A delivered slot whose outcome is not recorded yet: all it keeps.
struct Delivered<'a> {
    outcome: FinishRequest,
    /// Its write, submitted at delivery: the ledger says so at once, and
    /// only the ack waits for the message's other slots.
    written: Answer<bool>,
    execution_id: String,
    /// Its `running` row stays this task's until the outcome is written:
    /// the orphan check leaves it alone.
    _hold: Hold<'a>,
    /// Its small charge (`HeldCharge::delivered`), released with it.
    _charge: HeldCharge,
}

async fn handle_slot<'a>(
    shared: &'a Shared,
    message: &FireMessage,
    arrival: Arrival,
    charge: HeldCharge,
    in_flight: &Semaphore,
    token: &CancellationToken,
) -> SlotEnd<'a> {
    let attempt = arrival.attempt;
    let slot: HeldSlot = (message.job_id, message.scheduled_at, attempt as i32);
    let Some(hold) = shared.holding.hold(slot) else {
        // Another task here has this attempt (the copy of a lost session,
        // still giving its row back): ask again shortly.
        return SlotEnd::Settled(Settle::Requeue(ledger::BUSY_RECHECK_MIN));
    };
    let mut took_row = false;
    let settle = match process(shared, message, arrival, charge, in_flight, token, &mut took_row).await {
        Ok(Processed::Delivered(outcome, charge)) => {
            let (execution_id, written) = (message.execution_id.clone(), shared.finishes.submit(outcome.clone()));
            return SlotEnd::Delivered(Delivered { outcome, written, execution_id, _hold: hold, _charge: charge });
        }
        Ok(Processed::Done) => Settle::Ack,
        // Stopping: the message goes back for another worker.
        Ok(Processed::Stopping) => Settle::Requeue(Duration::ZERO),
        Ok(Processed::Busy(wait)) => {
            metrics::counter!(runtime::metrics::WORKER_BUSY_REQUEUES_TOTAL).increment(1);
            Settle::Requeue(wait)
        }
        Err(e) => {
            tracing::warn!(execution.id = %message.execution_id, error = %format!("{e:#}"), "processing failed; message returns to the queue");
            // Requeue after a pause so a database outage does not spin.
            Settle::Requeue(Duration::from_secs(1))
        }
    };
    if took_row && settle != Settle::Ack {
        // This worker will not deliver it.
        shared.give_back(slot, message.fire_id, &message.execution_id).await;
    }
    drop(hold);
    SlotEnd::Settled(settle)
}

/// Returns the message to the queue after `wait` (cut short when the
/// worker stops), so that a message that cannot be decided yet does not spin.
async fn requeue_after(acker: &Acker, wait: Duration, token: &CancellationToken) {
    tokio::select! {
        _ = token.cancelled() => {}
        _ = tokio::time::sleep(wait) => {}
    }
    if let Err(e) = acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await {
        tracing::warn!(error = %e, "requeue failed; the broker will redeliver");
    }
}

enum Processed {
    /// Decided without delivery (or delivered and recorded): ack.
    Done,
    /// Delivered: the outcome to record, and the slot's charge while it waits.
    Delivered(FinishRequest, HeldCharge),
    /// The worker is stopping before the due instant: requeue.
    Stopping,
    /// Another live task holds the attempt: requeue after this long.
    Busy(Duration),
}

/// Whether a start or verification lets the delivery go on; logs why not.
fn go_on(m: &FireMessage, attempt: u32, start: Start) -> bool {
    match start {
        Start::Go => true,
        Start::Duplicate => {
            tracing::debug!(execution.id = %m.execution_id, attempt, "duplicate message dropped");
            metrics::counter!(runtime::metrics::WORKER_DUPLICATES_TOTAL).increment(1);
            false
        }
        Start::Cancelled(reason) => {
            tracing::info!(execution.id = %m.execution_id, reason, "slot cancelled before delivery");
            metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => Status::Skipped.as_str())
                .increment(1);
            false
        }
        // Decided by the caller before it gets here.
        Start::Busy(_) => false,
    }
}

/// One slot from its row's start to its outcome. Every slot of every
/// message in the prefetch is one of these futures, most of them waiting
/// (for the due instant, their host, an in-flight permit), and a future
/// is as large as its largest state: everything after the due instant is
/// boxed (`deliver_due`, and within it the delivery and the outcome and
/// retry writes), allocated only by the slots that reach it. Inline the
/// steps made each slot 12,480 bytes; with the delivery boxed, 1,816; with
/// everything after the due instant boxed, an armed slot's future is 752
/// (`-Zprint-type-sizes`), so a herd armed ahead of time fits in a third
/// of the memory.
async fn process(
    shared: &Shared,
    m: &FireMessage,
    arrival: Arrival,
    charge: HeldCharge,
    in_flight: &Semaphore,
    token: &CancellationToken,
    took_row: &mut bool,
) -> anyhow::Result<Processed> {
    let Arrival { attempt, redelivered, .. } = arrival;
    if arrival.first_arrival
        && let Some(late) = shared.late_slot(m)
        && Box::pin(shared.skip_late(m, late)).await?
    {
        return Ok(Processed::Done);
    }
    let policy = m.retry.unwrap_or(shared.config.retry_defaults);
    // A replay's budget counts from its first attempt.
    let budget_attempt = attempt.saturating_sub(m.retry_from).max(1);
    let horizon =
        destination::wait_horizon(&policy, budget_attempt, m.due_at, shared.config.destinations.breaker.open_max);
    if arrival.waited {
        if Box::pin(shared.wait_again(m, attempt, horizon)).await? {
            return Ok(Processed::Done);
        }
        // It takes the whole round now (its host is back, or may be): at
        // the waiting queue's pace. Sent back again above, it costs one
        // cheap write and is not paced: held back, it would stay in the
        // queue past its row's next return and be republished by the
        // stranded-row sweep.
        tokio::select! {
            _ = token.cancelled() => return Ok(Processed::Stopping),
            _ = shared.waiting_pace.turn(|| shared.due_backlog.is_queueing()) => {}
        }
    }
    let request = StartRequest {
        job_id: m.job_id,
        scheduled_at: m.scheduled_at,
        fire_id: m.fire_id,
        attempt: attempt as i32,
        redelivered,
        due_at: m.due_at,
    };
    // A pre-armed message takes its row at once (arming), so that the burst
    // at the due instant costs reads, not row writes.
    let (start, jobs_seen) = timed_into(&shared.metrics.stage_start, shared.starts.call(request.clone())).await?;
    if let Start::Busy(wait) = start {
        tracing::debug!(execution.id = %m.execution_id, attempt, ?wait, "redelivered while a live worker holds the attempt; requeueing");
        return Ok(Processed::Busy(wait));
    }
    if !go_on(m, attempt, start) {
        return Ok(Processed::Done);
    }
    *took_row = true;
    let armed_early = runtime::clock::now() < m.due_at;
    // Kept until the slot is decided.
    let charge = if armed_early {
        // Armed: charged as such until the due instant (`holdings`), never
        // delivered earlier.
        let armed = charge.arm();
        let wait = (m.due_at - runtime::clock::now()).to_std().unwrap_or(Duration::ZERO);
        tokio::select! {
            _ = token.cancelled() => return Ok(Processed::Stopping),
            _ = tokio::time::sleep(wait) => {}
        }
        tokio::select! {
            _ = token.cancelled() => return Ok(Processed::Stopping),
            charge = armed.due() => charge,
        }
    } else {
        charge
    };
    let slot = DueSlot { request, jobs_seen, armed_early, policy, budget_attempt, horizon };
    // Boxed: allocated at the due instant, so a waiting slot's future is
    // only as large as the steps above, and freed once it is delivered.
    match Box::pin(deliver_due(shared, m, arrival, slot, in_flight, token)).await? {
        AfterDue::Decided(processed) => Ok(processed),
        AfterDue::Record(outcome) => {
            // Its steps are freed with its message's: what it keeps until
            // the outcome is written is the outcome, charged as such.
            let text = [&outcome.excerpt, &outcome.error, &outcome.sqs_message_id];
            let charge = charge.delivered(text.iter().map(|t| t.as_ref().map_or(0, String::len)).sum());
            Ok(Processed::Delivered(outcome, charge))
        }
    }
}

/// What a slot carries past its due instant.
struct DueSlot {
    request: StartRequest,
    jobs_seen: JobsSeen,
    /// Its row was started before the due instant: verified at it.
    armed_early: bool,
    policy: domain::job::RetryPolicy,
    budget_attempt: u32,
    horizon: chrono::DateTime<chrono::Utc>,
}

/// Where a slot stands once its steps after the due instant are done.
enum AfterDue {
    Decided(Processed),
    /// Delivered (or failed, its follow-up published): the outcome to record.
    Record(FinishRequest),
}

/// A slot from its due instant to its delivery, or to a decision without
/// one.
async fn deliver_due(
    shared: &Shared,
    m: &FireMessage,
    arrival: Arrival,
    slot: DueSlot,
    in_flight: &Semaphore,
    token: &CancellationToken,
) -> anyhow::Result<AfterDue> {
    let decided = |processed| Ok(AfterDue::Decided(processed));
    let Arrival { attempt, redelivered, .. } = arrival;
    let DueSlot { request, jobs_seen, armed_early, policy, budget_attempt, horizon } = slot;
    let due_guard = shared.due_backlog.enter();
    // The check comes before the in-flight permit: every message due in a
    // burst asks at once, so the checks go in a few large statements. (With
    // the permit first, only `max_in_flight` could ask at a time: a 10,000
    // herd made 1,381 tiny statements instead of 25, each holding a permit
    // for a round trip.) A delete after the check is ordered after the
    // fire, as one after the due instant should be.
    if armed_early
        && !go_on(
            m,
            attempt,
            timed_into(
                &shared.metrics.stage_verify,
                shared.verifies.call(VerifyRequest { row: request.clone(), jobs_seen }),
            )
            .await?,
        )
    {
        return decided(Processed::Done);
    }
    // A manual trigger is an operator's explicit run: no overlap policy.
    if !m.overlap.is_allow() && m.trigger != Trigger::Manual && !Box::pin(shared.overlap_lets_run(m, &request)).await? {
        return decided(Processed::Done);
    }
    // The destination's gate before the worker-wide permit: a slot waiting
    // for a busy or broken host holds no permit another host needs.
    let slot: HeldSlot = (m.job_id, m.scheduled_at, attempt as i32);
    let address = shared.deliverers.destinations.address(&m.target);
    let gate = shared
        .deliverers
        .destinations
        .pass(address.destination.as_deref(), horizon, &shared.due_backlog, due_guard, token, |waiting| {
            shared.note_waiting(m, slot, waiting)
        })
        .await;
    let pass = match gate {
        Gate::Go(pass) => pass,
        Gate::Stopping => return decided(Processed::Stopping),
        Gate::Release { delay, waiting } => {
            return Box::pin(shared.wait_elsewhere(m, attempt, delay, waiting)).await.map(AfterDue::Decided);
        }
        Gate::GiveUp(waiting) => {
            return Box::pin(shared.give_up_waiting(m, attempt, waiting)).await.map(AfterDue::Decided);
        }
    };
    let permit = in_flight.acquire().await?;
    let started = runtime::clock::now();
    if attempt == 1 {
        let lateness = ledger::lateness_seconds(started, m.due_at).max(0.0);
        shared.metrics.lateness.record(lateness);
        if arrival.first_arrival {
            shared.waiting_pace.observe_live(Duration::from_secs_f64(lateness));
        }
    }
    shared.metrics.in_flight.increment(1.0);
    let (outcome, sqs_message_id) = Box::pin(shared.deliverers.deliver(m, attempt, address.http_url.clone())).await;
    shared.metrics.in_flight.decrement(1.0);
    shared.metrics.delivery_seconds.record((runtime::clock::now() - started).num_milliseconds() as f64 / 1000.0);
    shared.metrics.attempt.record(f64::from(attempt));
    drop(permit);
    pass.record(destination_health(&outcome));
    let done = |status, excerpt| FinishRequest::new(m, attempt, redelivered, status, excerpt);
    match outcome {
        Outcome::Success { http_status, excerpt } => {
            // Debug, not info: the ledger records every occurrence, and a
            // line per success at thousands of fires a second is a log
            // pipeline's load, not an operator's signal. Failures stay warn.
            tracing::debug!(execution.id = %m.execution_id, attempt, http_status, sqs_message_id = sqs_message_id.as_deref(), "delivered");
            shared.metrics.succeeded.increment(1);
            Ok(AfterDue::Record(FinishRequest {
                http_status: http_status.map(i32::from),
                sqs_message_id,
                ..done(Status::Succeeded, excerpt)
            }))
        }
        Outcome::Failure { error, excerpt } => {
            // The text may quote the target's URL: its credentials stay out
            // of the ledger, the failed queue's header and the logs.
            let error_text = domain::redact::text(&error.to_string());
            let mut next_attempt_at = None;
            // The follow-up is published (and confirmed) before the outcome
            // is recorded and the message acked: a crash in between
            // redelivers the attempt rather than losing the retry.
            let status = match retry::next_delay(&policy, budget_attempt, error.retryable()) {
                Some(delay) => {
                    next_attempt_at = Some(runtime::clock::now() + chrono::TimeDelta::milliseconds(delay as i64));
                    Box::pin(shared.retry.publish_retry(m, attempt + 1, delay)).await?;
                    tracing::warn!(execution.id = %m.execution_id, attempt, error = %error_text, retry_in_ms = delay, "delivery failed; retry scheduled");
                    Status::Retrying
                }
                None => {
                    Box::pin(shared.retry.publish_failed(m, attempt, &error_text)).await?;
                    tracing::error!(execution.id = %m.execution_id, attempt, error = %error_text, "delivery failed for good");
                    Status::Failed
                }
            };
            metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => status.as_str()).increment(1);
            Ok(AfterDue::Record(FinishRequest {
                http_status: error.http_status().map(i32::from),
                error: Some(error_text),
                next_attempt_at,
                ..done(status, excerpt)
            }))
        }
    }
}

impl Shared {
    /// The slot as a late one when the job's misfire policy decides it
    /// here: a scheduled slot (the message carries the policy), not a
    /// replay (an operator's explicit run), whose first attempt reached
    /// this worker later than the misfire threshold; `fire_all` delivers
    /// every slot, so it is never asked.
    fn late_slot(&self, m: &FireMessage) -> Option<LateSlot> {
        let Some(policy @ (MisfirePolicy::Skip | MisfirePolicy::FireOnce)) = m.misfire else { return None };
        let late = runtime::clock::now() - m.due_at;
        let threshold = chrono::TimeDelta::from_std(self.config.misfire_threshold).unwrap_or(chrono::TimeDelta::MAX);
        (m.retry_from == 0 && late > threshold).then(|| LateSlot {
            job_id: m.job_id,
            scheduled_at: m.scheduled_at,
            fire_id: m.fire_id,
            due_at: m.due_at,
            policy,
            late_ms: late.num_milliseconds(),
            ran_since_due: None,
        })
    }

    /// Applies the job's misfire policy to a late slot (the workers are
    /// behind: overload, or a backlog after an outage); true when it was
    /// recorded skipped instead of delivered. The same rule as the
    /// scheduler's for an outage's slots, so how late a slot may start does
    /// not depend on where it waited; and a skip costs one row write
    /// instead of a delivery and two, which helps a backlog drain where the
    /// workers or receivers, not Postgres, are the limit.
    async fn skip_late(&self, m: &FireMessage, mut late: LateSlot) -> anyhow::Result<bool> {
        let (policy, late_ms) = (late.policy, late.late_ms);
        // A job's late fire_once slots are decided one at a time here: a
        // backlog brings them together, and each must see whether the one
        // before was let run (its row may not say so yet).
        let job_runs = (policy == MisfirePolicy::FireOnce).then(|| self.late_runs.of(m.job_id));
        let mut last_run = match &job_runs {
            Some(cell) => Some(cell.clone().lock_owned().await),
            None => None,
        };
        late.ran_since_due = last_run.as_deref().copied().flatten().filter(|(_, ran_at)| *ran_at >= m.due_at);
        match timed("late_skip", self.late_skips.call(late)).await? {
            LateDecision::Deliver => {
                if let Some(last_run) = last_run.as_deref_mut() {
                    *last_run = Some((m.scheduled_at, runtime::clock::now()));
                }
                return Ok(false);
            }
            LateDecision::Skipped { into } => {
                if let (Some(last_run), Some(into)) = (last_run.as_deref_mut(), into)
                    && last_run.is_none_or(|(_, ran_at)| ran_at < into.1)
                {
                    *last_run = Some(into);
                }
            }
        }
        drop(last_run);
        tracing::debug!(execution.id = %m.execution_id, late_ms, policy = policy.as_str(), "slot reached the worker past the misfire threshold; skipped by its job's misfire policy");
        metrics::counter!(runtime::metrics::WORKER_LATE_SKIPPED_TOTAL, "policy" => policy.as_str()).increment(1);
        if let Some(skipped) = self.late_skip_report.add() {
            tracing::warn!(
                skipped,
                threshold_ms = self.config.misfire_threshold.as_millis() as u64,
                "scheduled slots reached this worker later than the misfire threshold and were skipped by their jobs' misfire policy (the workers are behind)"
            );
        }
        metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => Status::Skipped.as_str())
            .increment(1);
        Ok(true)
    }

    fn destination_wait(slot: HeldSlot, m: &FireMessage, waiting: &Waiting) -> ledger::DestinationWait {
        ledger::DestinationWait {
            slot,
            fire_id: m.fire_id,
            reason: waiting.reason.as_str(),
            destination: waiting.destination.clone(),
            since: waiting.since,
        }
    }

    /// Says on the held row that its delivery waits for its destination.
    /// A failed write does not stop the wait: the row is only less telling.
    async fn note_waiting(&self, m: &FireMessage, slot: HeldSlot, waiting: Waiting) {
        match timed("note_waiting", self.notes.call(Self::destination_wait(slot, m, &waiting))).await {
            Ok(_) => {
                tracing::debug!(execution.id = %m.execution_id, destination = %waiting.destination, reason = waiting.reason.as_str(), "delivery waits for its destination")
            }
            Err(e) => {
                tracing::warn!(execution.id = %m.execution_id, error = %format!("{e:#}"), "recording the wait in the ledger failed")
            }
        }
    }

    /// Hands the slot back to wait in a delay queue as the same attempt:
    /// the row first (`retrying`, the attempt not counted), then the
    /// message. A failed publish requeues the original message, which then
    /// finds the row startable again.
    async fn wait_elsewhere(
        &self,
        m: &FireMessage,
        attempt: u32,
        delay: Duration,
        waiting: Waiting,
    ) -> anyhow::Result<Processed> {
        let slot: HeldSlot = (m.job_id, m.scheduled_at, attempt as i32);
        let back_at = runtime::clock::now() + chrono::TimeDelta::from_std(delay)?;
        let hand_back = ledger::HandBack { wait: Self::destination_wait(slot, m, &waiting), back_at };
        if !timed("hand_back", self.hand_backs.call(hand_back)).await? {
            // Taken over meanwhile (this worker was presumed gone): not ours to hand back.
            return Ok(Processed::Done);
        }
        self.retry.publish_wait(m, attempt, delay.as_millis() as u64).await?;
        self.deliverers.destinations.released(&waiting);
        tracing::debug!(execution.id = %m.execution_id, attempt, destination = %waiting.destination, reason = waiting.reason.as_str(), back_in_ms = delay.as_millis() as u64, "handed back to wait for its destination; the attempt is not counted");
        Ok(Processed::Done)
    }

    /// A slot back from waiting whose host's circuit is still open here
    /// past the hold goes straight back to wait, its row only told when it
    /// returns (`wait_again_batch`), instead of a whole round (a start, the
    /// gate, a hand-back: two status changes) that would end the same way.
    /// Every hop towards a long cool-down's end was such a round, and a
    /// host down for minutes made them the bulk of the ledger's writes.
    /// False when it does not apply (the row is not as this worker's
    /// hand-back left it, or the circuit may admit the slot soon): the slot
    /// then goes the whole way. The row first, then the message, as in
    /// `wait_elsewhere`.
    async fn wait_again(
        &self,
        m: &FireMessage,
        attempt: u32,
        horizon: chrono::DateTime<chrono::Utc>,
    ) -> anyhow::Result<bool> {
        let Some((delay, waiting)) = self.deliverers.destinations.still_open(&m.target, horizon) else {
            return Ok(false);
        };
        let slot: HeldSlot = (m.job_id, m.scheduled_at, attempt as i32);
        let back_at = runtime::clock::now() + chrono::TimeDelta::from_std(delay)?;
        let again = ledger::HandBack { wait: Self::destination_wait(slot, m, &waiting), back_at };
        if !timed("wait_again", self.waits_again.call(again)).await? {
            return Ok(false);
        }
        self.retry.publish_wait(m, attempt, delay.as_millis() as u64).await?;
        self.deliverers.destinations.released(&waiting);
        metrics::counter!(runtime::metrics::WORKER_WAITED_AGAIN_TOTAL).increment(1);
        tracing::debug!(execution.id = %m.execution_id, attempt, destination = %waiting.destination, back_in_ms = delay.as_millis() as u64, "back while its destination's circuit is still open; waits again");
        Ok(true)
    }

    /// Parks a slot that cannot go before its horizon, without making the
    /// attempt: to the failed queue (where a replay can take it once the
    /// host is back), then `failed` in the ledger.
    async fn give_up_waiting(&self, m: &FireMessage, attempt: u32, waiting: Waiting) -> anyhow::Result<Processed> {
        let slot: HeldSlot = (m.job_id, m.scheduled_at, attempt as i32);
        let error = format!(
            "not delivered: {} ({}) since {}, and still at the slot's retry horizon; attempt {attempt} was not made",
            waiting.reason.as_str(),
            waiting.destination,
            domain::execution::format_instant(waiting.since)
        );
        self.retry.publish_failed(m, attempt - 1, &error).await?;
        let give_up = ledger::GiveUp { wait: Self::destination_wait(slot, m, &waiting), error: error.clone() };
        if timed("give_up", self.give_ups.call(give_up)).await? {
            metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => Status::Failed.as_str())
                .increment(1);
            tracing::error!(execution.id = %m.execution_id, attempt, error, "delivery given up");
        }
        Ok(Processed::Done)
    }

    /// Applies the job's overlap policy at the due instant; false when the
    /// slot was skipped instead of delivered.
    async fn overlap_lets_run(&self, m: &FireMessage, request: &StartRequest) -> anyhow::Result<bool> {
        let decision =
            timed("overlap", ledger::apply_overlap(&self.pg, &self.config.worker_id, request, m.overlap)).await?;
        match decision {
            OverlapDecision::Run { replaced } => {
                if !replaced.is_empty() {
                    tracing::info!(execution.id = %m.execution_id, replaced = ?replaced, "older executions' remaining retries cancelled (overlap policy replace)");
                    metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => Status::Skipped.as_str())
                        .increment(replaced.len() as u64);
                }
                Ok(true)
            }
            OverlapDecision::Skipped { reason, because_of } => {
                tracing::info!(execution.id = %m.execution_id, reason, because_of = %because_of, "slot skipped by the job's overlap policy");
                metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => Status::Skipped.as_str())
                    .increment(1);
                Ok(false)
            }
        }
    }

    /// Records the outcomes of a message's delivered slots, through the
    /// batched outcome writes, and says how the message settles. The
    /// callbacks have been made: a failed write is tried again for a while
    /// rather than handing the message back, which would deliver them a
    /// second time. Each slot's hold and charge go as its outcome is written.
    async fn record(&self, delivered: Vec<Delivered<'_>>) -> Settle {
        let give_up_at = std::time::Instant::now() + self.config.outcome_retry_for;
        let mut backoff = Backoff::new(Duration::from_millis(100));
        let mut pending = delivered;
        loop {
            let mut failed = Vec::new();
            let mut error = None;
            for mut slot in pending {
                match timed_into(&self.metrics.stage_finish, slot.written.get()).await {
                    Ok(true) => {}
                    // Another delivery of this attempt took the row back
                    // (this one was presumed dead); its outcome stands.
                    Ok(false) => {
                        tracing::debug!(execution.id = %slot.execution_id, "outcome not recorded: the row moved on")
                    }
                    Err(e) => {
                        failed.push(slot);
                        error = Some(e);
                    }
                }
            }
            let Some(error) = error else { return Settle::Ack };
            if std::time::Instant::now() + backoff.delay() >= give_up_at {
                for slot in failed {
                    tracing::warn!(execution.id = %slot.execution_id, error = %format!("{error:#}"), "recording the outcome failed; message returns to the queue");
                    let o = &slot.outcome;
                    self.give_back((o.job_id, o.scheduled_at, o.attempt), o.fire_id, &slot.execution_id).await;
                }
                return Settle::Requeue(Duration::from_secs(1));
            }
            tracing::warn!(execution.id = %failed[0].execution_id, slots = failed.len(), error = %format!("{error:#}"), "recording the outcome failed; trying again");
            metrics::counter!(runtime::metrics::WORKER_OUTCOME_RETRIES_TOTAL).increment(failed.len() as u64);
            backoff.wait().await;
            for slot in &mut failed {
                slot.written = self.finishes.submit(slot.outcome.clone());
            }
            pending = failed;
        }
    }

    /// Gives a `running` row of this worker back at once, so the message's
    /// next worker need not wait until this one is presumed gone (the
    /// orphan check covers a failure here).
    async fn give_back(&self, slot: HeldSlot, fire_id: uuid::Uuid, execution_id: &str) {
        if let Err(e) = Box::pin(ledger::release(&self.pg, &self.config.worker_id, slot, fire_id)).await {
            tracing::warn!(execution.id = %execution_id, error = %format!("{e:#}"), "giving the row back failed; the orphan check will")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn late_runs_forget_old_jobs_only_when_the_map_grows_and_keep_recent_ones() {
        let runs = LateRuns::default();
        let now = runtime::clock::now();
        let old = now - LATE_RUNS_KEPT - chrono::TimeDelta::seconds(1);
        let recent_job = uuid::Uuid::now_v7();
        *runs.of(recent_job).lock().await = Some((now, now));
        for _ in 1..LATE_RUNS_SWEEP_AT {
            *runs.of(uuid::Uuid::now_v7()).lock().await = Some((old, old));
        }
        assert_eq!(runs.inner.lock().unwrap().jobs.len(), LATE_RUNS_SWEEP_AT, "not swept below the size");
        // The next job's lookup sweeps: only the recent entry and the new one stay.
        runs.of(uuid::Uuid::now_v7());
        let inner = runs.inner.lock().unwrap();
        assert_eq!(inner.jobs.len(), 2);
        assert!(inner.jobs.contains_key(&recent_job));
        assert_eq!(inner.sweep_at, LATE_RUNS_SWEEP_AT, "the next sweep waits for the map to grow again");
    }
}
