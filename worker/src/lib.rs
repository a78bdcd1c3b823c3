//! The worker: consumes the main queue, holds each message until its due
//! time, delivers it, and records the outcome in the ledger.
//!
//! Per message: parse → move the ledger row to `running` for this fire and
//! attempt (duplicates and cancelled slots stop here; a pre-armed message
//! does this on arrival, "arming" its row) → wait for `due_at` (never
//! earlier, by this clock) → for an armed row, verify it is still ours and
//! still wanted (a read) → deliver → on failure publish to the retry
//! queue of the next delay, or to the failed queue after the last retry →
//! record the outcome → ack. The two ledger writes of concurrent messages
//! are coalesced into multi-row statements (`batch`), so a burst of messages
//! due in the same instant costs a few round trips, not two per message. A message is acked only after its outcome is
//! recorded and any follow-up message is confirmed, so a crash anywhere
//! leads to a redelivery, never to a loss.

pub mod batch;
pub mod http;
pub mod ledger;
pub mod sqs;
pub mod ssrf;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use deadpool_postgres::Pool;
use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use tokio::sync::{Mutex, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use common::amqp::{self, Topology};
use common::backoff::Backoff;
use common::job::{RetryPolicy, Target};
use common::ledger::Status;
use common::message::{ATTEMPT_HEADER, FireMessage, Trigger};

use self::batch::Batcher;
use self::http::HttpDelivery;
use self::ledger::{FinishRequest, HeldSlot, JobsSeen, Start, StartRequest, VerifyRequest};
use self::sqs::SqsDelivery;
use self::ssrf::SsrfGuard;

#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub worker_id: String,
    pub cluster: String,
    pub amqp_url: String,
    /// Unacked messages the broker may hand this worker (includes pre-armed
    /// messages waiting for their due time).
    pub prefetch: u16,
    /// Deliveries in progress at once.
    pub max_in_flight: usize,
    pub retry_defaults: RetryPolicy,
    pub allow_cidrs: Vec<ipnet::IpNet>,
    /// AWS configuration for SQS targets; `None` = the usual AWS environment
    /// (`AWS_REGION`, credentials chain, `AWS_ENDPOINT_URL_SQS`), loaded on
    /// the first SQS delivery.
    pub aws: Option<aws_config::SdkConfig>,
}

/// What one delivery attempt came to.
#[derive(Debug)]
pub enum Outcome {
    Success {
        http_status: Option<u16>,
        excerpt: String,
    },
    Failure {
        http_status: Option<u16>,
        error: String,
        excerpt: String,
        /// False when trying again cannot help (e.g. a refused address).
        retryable: bool,
    },
}

impl Outcome {
    pub fn permanent(http_status: Option<u16>, error: String) -> Self {
        Outcome::Failure { http_status, error, excerpt: String::new(), retryable: false }
    }
}

struct Shared {
    config: WorkerConfig,
    pg: Pool,
    http: Arc<HttpDelivery>,
    sqs: Arc<SqsDelivery>,
    topology: Topology,
    /// Confirm-mode channel for retry and failed messages.
    publish: Channel,
    declared_retry_queues: Mutex<HashSet<u64>>,
    starts: Batcher<StartRequest, (Start, JobsSeen)>,
    verifies: Batcher<VerifyRequest, Start>,
    finishes: Batcher<FinishRequest, bool>,
    due_backlog: Arc<DueBacklog>,
    holding: Arc<Holding>,
}

/// When this worker's last successful heartbeat went out. While it is
/// recent, no other worker can presume this one gone and take its rows.
#[derive(Default)]
struct LastBeat(std::sync::Mutex<Option<std::time::Instant>>);

impl LastBeat {
    /// Recorded before the beat is sent: the row's `seen_at` is no earlier.
    fn record(&self, sent: std::time::Instant) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(sent);
    }

    /// A beat went out within the last two beat periods, so at least one
    /// period remains before anyone may presume this worker gone.
    fn fresh(&self) -> bool {
        let recent = common::ledger::WORKER_GONE_AFTER - common::ledger::WORKER_HEARTBEAT_EVERY;
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|sent| sent.elapsed() < recent)
    }
}

/// The slots (with attempt) that a task of this worker is handling. A row
/// `running` under this worker's id with no entry here has no task: it is an
/// orphan, which any copy of its message may take back and which
/// `release_orphans` gives back; one with an entry must be left alone.
/// Outlives broker sessions: a task of a lost session may still be giving
/// its row back when the message returns.
#[derive(Default)]
struct Holding(std::sync::Mutex<HashSet<HeldSlot>>);

/// A task's entry in `Holding`, removed when the task ends.
struct Hold<'a> {
    holding: &'a Holding,
    slot: HeldSlot,
}

impl Holding {
    /// None when another task of this worker handles the same attempt.
    fn hold(&self, slot: HeldSlot) -> Option<Hold<'_>> {
        let inserted = self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(slot);
        // Lazily (`then`, not `then_some`): a `Hold` made for a slot already
        // held would be dropped at once, taking the other task's entry, and
        // under the lock of this very statement, which deadlocked the thread.
        inserted.then(|| Hold { holding: self, slot })
    }

    fn snapshot(&self) -> Vec<HeldSlot> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect()
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.holding.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.slot);
    }
}

/// Messages past their due instant and not yet delivered. While more are
/// due than can be in delivery at once (a burst: deliveries are queueing),
/// outcome writes (and so acks) wait, for at most `OUTCOME_MAX_DEFER`, so
/// that Postgres and the broker serve the deliveries first; the outcomes
/// follow in a few large statements. Under steady load the backlog stays
/// within the in-flight limit and outcomes are written at once.
struct DueBacklog {
    count: std::sync::atomic::AtomicUsize,
    /// Deliveries that can run at once (`max_in_flight`).
    queueing_above: usize,
    drained: tokio::sync::Notify,
}

const OUTCOME_MAX_DEFER: Duration = Duration::from_secs(2);

impl DueBacklog {
    fn new(queueing_above: usize) -> Self {
        Self { count: Default::default(), queueing_above, drained: Default::default() }
    }

    fn enter(self: &Arc<Self>) -> DueGuard {
        self.count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        DueGuard(self.clone())
    }

    async fn drained_or(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let drained = self.drained.notified();
            if self.count.load(std::sync::atomic::Ordering::SeqCst) <= self.queueing_above {
                return;
            }
            tokio::select! {
                _ = drained => {}
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }
}

struct DueGuard(Arc<DueBacklog>);

impl Drop for DueGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == self.0.queueing_above + 1 {
            self.0.drained.notify_waiters();
        }
    }
}

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
/// How long an outcome write waits for others to share its statement. It
/// only delays the ack; at 2,000 fires/s the outcomes otherwise went out
/// ~500 statements/s of ~4 rows each, the largest share of Postgres's time.
const OUTCOME_LINGER: Duration = Duration::from_millis(20);
/// How long a failed outcome write is retried before the message is handed
/// back (and so delivered again).
const OUTCOME_RETRY_FOR: Duration = Duration::from_secs(30);
/// Channels the worker consumes on, sharing the prefetch. RabbitMQ hands
/// messages to consumers in turn, in the order they registered: with 32 per
/// worker, the first 32 messages of a burst all went to the worker that
/// registered first, and with slots in bundles a burst is a few dozen
/// messages. Bundles also shortened the unacked lists that the channels
/// were there to split (see below), so 4 are enough.
const CONSUMER_CHANNELS: usize = 4;
/// Heartbeats between two orphan checks (a scan of this worker's `running`
/// rows): 30 s.
const ORPHAN_CHECK_EVERY: u64 = 6;

/// Runs until `token` is cancelled; reconnects to RabbitMQ with backoff.
/// Keeps this worker's row in `worker_heartbeats` fresh until `token` is
/// cancelled, then deletes it. The stuck-`running` sweep leaves alone what a
/// worker with a fresh heartbeat holds. A failed refresh is retried at the
/// next beat; three in a row make the rows this worker holds recoverable.
/// At start and every `ORPHAN_CHECK_EVERY` beats it also gives back the rows
/// under its id that no task of it handles.
async fn heartbeat(
    pg: Pool,
    worker_id: String,
    holding: Arc<Holding>,
    last_beat: Arc<LastBeat>,
    token: CancellationToken,
) {
    for beat_number in 0u64.. {
        if beat_number % ORPHAN_CHECK_EVERY == 0 {
            match ledger::release_orphans(&pg, &worker_id, holding.snapshot()).await {
                Ok(0) => {}
                Ok(rows) => {
                    tracing::warn!(rows, "gave back rows running under this worker with no task on them");
                    metrics::counter!(common::metrics::WORKER_ORPHANS_RELEASED_TOTAL).increment(rows);
                }
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "releasing orphaned rows failed"),
            }
        }
        let sent = std::time::Instant::now();
        let beat = async {
            pg.get()
                .await?
                .execute(
                    "INSERT INTO worker_heartbeats (worker_id, seen_at) VALUES ($1, now())
                     ON CONFLICT (worker_id) DO UPDATE SET seen_at = now()",
                    &[&worker_id],
                )
                .await?;
            anyhow::Ok(())
        };
        match beat.await {
            Ok(()) => last_beat.record(sent),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "worker heartbeat failed"),
        }
        tokio::select! {
            _ = token.cancelled() => break,
            _ = tokio::time::sleep(common::ledger::WORKER_HEARTBEAT_EVERY) => {}
        }
    }
    if let Ok(client) = pg.get().await {
        let _ = client.execute("DELETE FROM worker_heartbeats WHERE worker_id = $1", &[&worker_id]).await;
    }
}

pub async fn run(config: WorkerConfig, pg: Pool, token: CancellationToken) -> anyhow::Result<()> {
    let http = Arc::new(HttpDelivery::new(SsrfGuard::new(config.allow_cidrs.clone()), config.max_in_flight)?);
    let sqs = Arc::new(SqsDelivery::new(config.aws.clone()));
    let holding = Arc::new(Holding::default());
    let last_beat = Arc::new(LastBeat::default());
    // Only a worker that can deliver says it is alive, and it stays so
    // until its last delivery has ended: a worker presumed gone loses its
    // `running` rows to redeliveries.
    let beats_stop = CancellationToken::new();
    let beats = tokio::spawn(heartbeat(
        pg.clone(),
        config.worker_id.clone(),
        holding.clone(),
        last_beat.clone(),
        beats_stop.clone(),
    ));
    let mut backoff = Backoff::new(Duration::from_millis(200));
    while !token.is_cancelled() {
        match consume(&config, &pg, http.clone(), sqs.clone(), holding.clone(), last_beat.clone(), &token).await {
            Ok(()) => break,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "worker lost RabbitMQ; reconnecting");
                if !backoff.wait_unless_cancelled(&token).await {
                    break;
                }
            }
        }
    }
    beats_stop.cancel();
    let _ = beats.await;
    Ok(())
}

async fn consume(
    config: &WorkerConfig,
    pg: &Pool,
    http: Arc<HttpDelivery>,
    sqs: Arc<SqsDelivery>,
    holding: Arc<Holding>,
    last_beat: Arc<LastBeat>,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let connection = amqp::connect(&config.amqp_url, &format!("cronshard-worker {}", config.worker_id))
        .await
        .context("connecting to RabbitMQ")?;
    let topology = Topology::new(&config.cluster);
    let publish = amqp::confirm_channel(&connection).await?;
    topology.declare(&publish).await?;
    // The prefetch is split over several channels: a pre-armed message is
    // acked at its due instant, not in the order it arrived, and RabbitMQ
    // walks a channel's unacked list from the oldest to find it. One list
    // of 45,000 made each such ack cost ~2 ms of the broker's time and
    // stalled publishing for seconds (docs/benchmarks.md).
    let channels = CONSUMER_CHANNELS.min(usize::from(config.prefetch)).max(1);
    let per_channel = (usize::from(config.prefetch) / channels).max(1) as u16;
    let mut consume_channels = Vec::with_capacity(channels);
    let mut consumers = Vec::with_capacity(channels);
    for i in 0..channels {
        let channel = connection.create_channel().await?;
        channel.basic_qos(per_channel, BasicQosOptions::default()).await?;
        consumers.push(
            channel
                .basic_consume(
                    topology.main_queue.as_str().into(),
                    format!("{}#{i}", config.worker_id).as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?,
        );
        consume_channels.push(channel);
    }
    let mut consumer = futures::stream::select_all(consumers);
    tracing::info!(worker.id = %config.worker_id, queue = %topology.main_queue, "consuming");
    let due_backlog = Arc::new(DueBacklog::new(config.max_in_flight));
    let shared = Arc::new(Shared {
        config: config.clone(),
        pg: pg.clone(),
        http,
        sqs,
        topology,
        publish,
        declared_retry_queues: Mutex::new(HashSet::new()),
        starts: {
            let (pg, worker_id) = (pg.clone(), config.worker_id.clone());
            Batcher::spawn(START_BATCH, START_STATEMENTS, Duration::ZERO, move |requests| {
                let (pg, worker_id) = (pg.clone(), worker_id.clone());
                async move { ledger::start_batch(&pg, &worker_id, requests).await }
            })
        },
        verifies: {
            let (pg, worker_id) = (pg.clone(), config.worker_id.clone());
            Batcher::spawn(START_BATCH, START_STATEMENTS, Duration::ZERO, move |requests| {
                let (pg, worker_id) = (pg.clone(), worker_id.clone());
                let heartbeat_fresh = last_beat.fresh();
                async move { ledger::verify_batch(&pg, &worker_id, heartbeat_fresh, requests).await }
            })
        },
        finishes: {
            let (pg, backlog) = (pg.clone(), due_backlog.clone());
            Batcher::spawn(FINISH_BATCH, FINISH_STATEMENTS, OUTCOME_LINGER, move |requests| {
                let (pg, backlog) = (pg.clone(), backlog.clone());
                async move {
                    backlog.drained_or(OUTCOME_MAX_DEFER).await;
                    ledger::finish_batch(&pg, requests).await
                }
            })
        },
        due_backlog,
        holding,
    });
    let in_flight = Arc::new(Semaphore::new(config.max_in_flight));
    let tasks = TaskTracker::new();
    // Ends with this connection: the broker requeues the unacked messages of
    // a lost connection at once, so those still waiting here must not be
    // delivered by this session (another worker, or the next session, has
    // them now).
    let session = token.child_token();
    let result = loop {
        tokio::select! {
            _ = token.cancelled() => break Ok(()),
            next = consumer.next() => match next {
                Some(Ok(delivery)) => {
                    let shared = shared.clone();
                    let in_flight = in_flight.clone();
                    let session = session.clone();
                    tasks.spawn(async move { handle(shared, delivery, in_flight, session).await });
                }
                Some(Err(e)) => break Err(e.into()),
                None => break Err(anyhow::anyhow!("consumer cancelled by the broker")),
            },
        }
    };
    // Stop taking messages, let in-flight deliveries finish (waiting ones are
    // returned to the queue by `handle`), then close: the broker requeues
    // anything still unacked.
    session.cancel();
    tasks.close();
    tasks.wait().await;
    for channel in consume_channels {
        let _ = channel.close(200, "worker stopping".into()).await;
    }
    let _ = connection.close(200, "worker stopping".into()).await;
    result
}

/// Times one stage of a message's way through the worker (ledger start,
/// verify, outcome write, ack).
async fn timed<T>(stage: &'static str, work: impl std::future::Future<Output = T>) -> T {
    common::telemetry::timed(common::metrics::WORKER_STAGE_SECONDS, stage, work).await
}

fn attempt_of(delivery: &Delivery) -> u32 {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(ATTEMPT_HEADER))
        .and_then(|v| match v {
            AMQPValue::LongInt(n) => Some(*n as i64),
            AMQPValue::LongLongInt(n) => Some(*n),
            AMQPValue::ShortInt(n) => Some(*n as i64),
            AMQPValue::LongUInt(n) => Some(*n as i64),
            _ => None,
        })
        .filter(|n| *n >= 1)
        .map(|n| n as u32)
        .unwrap_or(1)
}

/// Times the message went through retry queues, by RabbitMQ's own `x-death`
/// count. Only a cross-check: RabbitMQ 3.13+ no longer trusts an `x-death`
/// a client republished, so the attempt header is what the worker goes by.
fn retries_by_x_death(delivery: &Delivery) -> Option<u32> {
    let headers = delivery.properties.headers().as_ref()?;
    let AMQPValue::FieldArray(deaths) = headers.inner().get("x-death")? else { return None };
    let mut total = 0;
    for death in deaths.as_slice() {
        let AMQPValue::FieldTable(t) = death else { continue };
        let expired_in_retry_queue =
            matches!(t.inner().get("reason"), Some(AMQPValue::LongString(r)) if r.to_string() == "expired");
        if let (true, Some(AMQPValue::LongLongInt(n))) = (expired_in_retry_queue, t.inner().get("count")) {
            total += *n as u32;
        }
    }
    Some(total)
}

/// Handles one AMQP message: a single fire message or a bundle of them
/// (`message::BUNDLE_CONTENT_TYPE`), each slot on its own way to its due
/// instant. The message is acked once every slot in it is decided, or
/// requeued whole when one cannot be yet: the slots already decided come
/// back as duplicates, which the ledger drops.
async fn handle(shared: Arc<Shared>, delivery: Delivery, in_flight: Arc<Semaphore>, token: CancellationToken) {
    let messages = match common::message::parse_body(&delivery.data) {
        Ok(messages) if !messages.is_empty() => messages,
        result => {
            // Dead-letters to the failed queue, where an operator can see it.
            let error = result.err().map_or_else(|| "an empty bundle".to_owned(), |e| e.to_string());
            tracing::error!(error, "unparsable message; rejecting to the failed queue");
            let _ = delivery.acker.reject(BasicRejectOptions { requeue: false }).await;
            return;
        }
    };
    let attempt = attempt_of(&delivery);
    // A retried message passed through one retry queue per earlier failure.
    if let Some(retries) = retries_by_x_death(&delivery)
        && retries + 1 != attempt
    {
        tracing::debug!(execution.id = %messages[0].execution_id, attempt, x_death_retries = retries, "x-death disagrees with the attempt header; going by the header");
        metrics::counter!(common::metrics::WORKER_X_DEATH_MISMATCHES_TOTAL).increment(1);
    }
    // Slots go their own ways at once, except a job's misfire catch-up
    // slots, which the scheduler bundles oldest first: those are delivered
    // one after the other, so the receiver sees them in scheduled order.
    let mut runs: Vec<Vec<&FireMessage>> = Vec::new();
    for m in &messages {
        match runs.iter_mut().find(|run| {
            m.trigger == Trigger::Misfire && run[0].trigger == Trigger::Misfire && run[0].job_id == m.job_id
        }) {
            Some(run) => run.push(m),
            None => runs.push(vec![m]),
        }
    }
    let settles: Vec<Settle> = futures::future::join_all(runs.into_iter().map(|run| {
        let (shared, in_flight, token) = (&shared, &in_flight, &token);
        async move {
            let mut settles = Vec::with_capacity(run.len());
            for m in run {
                settles.push(handle_slot(shared, m, attempt, delivery.redelivered, in_flight, token).await);
            }
            settles
        }
    }))
    .await
    .into_iter()
    .flatten()
    .collect();
    match settles.into_iter().fold(Settle::Ack, Settle::and) {
        Settle::Ack => {
            if let Err(e) = timed("ack", delivery.acker.ack(BasicAckOptions::default())).await {
                tracing::warn!(execution.id = %messages[0].execution_id, error = %e, "ack failed; the broker will redeliver");
            }
        }
        Settle::Requeue(wait) => requeue_after(&delivery, wait, &token).await,
    }
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

async fn handle_slot(
    shared: &Shared,
    message: &FireMessage,
    attempt: u32,
    redelivered: bool,
    in_flight: &Semaphore,
    token: &CancellationToken,
) -> Settle {
    let slot: HeldSlot = (message.job_id, message.scheduled_at, attempt as i32);
    let Some(hold) = shared.holding.hold(slot) else {
        // Another task here has this attempt (the copy of a lost session,
        // still giving its row back): ask again shortly.
        return Settle::Requeue(ledger::BUSY_RECHECK_MIN);
    };
    let mut took_row = false;
    let result = process(shared, message, attempt, redelivered, in_flight, token, &mut took_row).await;
    if took_row && !matches!(result, Ok(Processed::Done)) {
        // This worker will not deliver it: give the row back at once rather
        // than make the message's next worker wait until this one is
        // presumed gone (the orphan check covers a failure here).
        match ledger::release(&shared.pg, &shared.config.worker_id, slot, message.fire_id).await {
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(execution.id = %message.execution_id, error = %format!("{e:#}"), "giving the row back failed; the orphan check will")
            }
        }
    }
    drop(hold);
    match result {
        Ok(Processed::Done) => Settle::Ack,
        // Stopping: the message goes back for another worker.
        Ok(Processed::Stopping) => Settle::Requeue(Duration::ZERO),
        Ok(Processed::Busy(wait)) => {
            metrics::counter!(common::metrics::WORKER_BUSY_REQUEUES_TOTAL).increment(1);
            Settle::Requeue(wait)
        }
        Err(e) => {
            tracing::warn!(execution.id = %message.execution_id, error = %format!("{e:#}"), "processing failed; message returns to the queue");
            // Requeue after a pause so a database outage does not spin.
            Settle::Requeue(Duration::from_secs(1))
        }
    }
}

/// Returns the message to the queue after `wait` (cut short when the
/// worker stops), so that a message that cannot be decided yet does not spin.
async fn requeue_after(delivery: &Delivery, wait: Duration, token: &CancellationToken) {
    tokio::select! {
        _ = token.cancelled() => {}
        _ = tokio::time::sleep(wait) => {}
    }
    if let Err(e) = delivery.acker.nack(BasicNackOptions { requeue: true, ..Default::default() }).await {
        tracing::warn!(error = %e, "requeue failed; the broker will redeliver");
    }
}

enum Processed {
    /// Delivered, or decided without delivery: ack.
    Done,
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
            metrics::counter!(common::metrics::WORKER_DUPLICATES_TOTAL).increment(1);
            false
        }
        Start::Cancelled(reason) => {
            tracing::info!(execution.id = %m.execution_id, reason, "slot cancelled before delivery");
            metrics::counter!(common::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => "skipped").increment(1);
            false
        }
        // Decided by the caller before it gets here.
        Start::Busy(_) => false,
    }
}

async fn process(
    shared: &Shared,
    m: &FireMessage,
    attempt: u32,
    redelivered: bool,
    in_flight: &Semaphore,
    token: &CancellationToken,
    took_row: &mut bool,
) -> anyhow::Result<Processed> {
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
    let (start, jobs_seen) = timed("start", shared.starts.call(request.clone())).await?;
    if let Start::Busy(wait) = start {
        tracing::debug!(execution.id = %m.execution_id, attempt, ?wait, "redelivered while a live worker holds the attempt; requeueing");
        return Ok(Processed::Busy(wait));
    }
    if !go_on(m, attempt, start) {
        return Ok(Processed::Done);
    }
    *took_row = true;
    let armed_early = Utc::now() < m.due_at;
    // Hold the message until its due instant, never earlier.
    let wait = (m.due_at - Utc::now()).to_std().unwrap_or(Duration::ZERO);
    tokio::select! {
        _ = token.cancelled() => return Ok(Processed::Stopping),
        _ = tokio::time::sleep(wait) => {}
    }
    let due_guard = shared.due_backlog.enter();
    // The check comes before the in-flight permit: every message due in a
    // burst asks at once, so the checks go in a few large statements. (With
    // the permit first, only `max_in_flight` could ask at a time: a 10,000
    // herd made 1,381 tiny statements instead of 25, each holding a permit
    // for a round trip.) A delete after the check is ordered after the
    // fire, as one after the due instant should be.
    if armed_early
        && !go_on(m, attempt, timed("verify", shared.verifies.call(VerifyRequest { row: request, jobs_seen })).await?)
    {
        return Ok(Processed::Done);
    }
    let permit = in_flight.acquire().await?;
    let started = Utc::now();
    if attempt == 1 {
        metrics::histogram!(common::metrics::WORKER_LATENESS_SECONDS)
            .record(ledger::lateness_seconds(started, m.due_at).max(0.0));
    }
    metrics::gauge!(common::metrics::WORKER_IN_FLIGHT).increment(1.0);
    let (outcome, sqs_message_id) = match &m.target {
        Target::Http(target) => (shared.http.deliver(target, m, attempt).await, None),
        Target::Sqs(target) => shared.sqs.deliver(target, m, attempt).await,
    };
    metrics::gauge!(common::metrics::WORKER_IN_FLIGHT).decrement(1.0);
    metrics::histogram!(common::metrics::WORKER_DELIVERY_SECONDS)
        .record((Utc::now() - started).num_milliseconds() as f64 / 1000.0);
    metrics::histogram!(common::metrics::WORKER_ATTEMPT).record(f64::from(attempt));
    drop(permit);
    drop(due_guard);
    let policy = m.retry.unwrap_or(shared.config.retry_defaults);
    let done = |status, excerpt| FinishRequest::new(m, attempt, redelivered, status, excerpt);
    match outcome {
        Outcome::Success { http_status, excerpt } => {
            tracing::info!(execution.id = %m.execution_id, attempt, http_status, sqs_message_id = sqs_message_id.as_deref(), "delivered");
            metrics::counter!(common::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => Status::Succeeded.as_str())
                .increment(1);
            let request = FinishRequest {
                http_status: http_status.map(i32::from),
                sqs_message_id,
                ..done(Status::Succeeded, excerpt)
            };
            shared.finish(m, request).await?;
        }
        Outcome::Failure { http_status, error, excerpt, retryable } => {
            let retries_used = attempt - 1;
            let mut next_attempt_at = None;
            let status = if retryable && retries_used < policy.max_retries {
                let delay = policy.delay_ms(attempt);
                next_attempt_at = Some(Utc::now() + chrono::TimeDelta::milliseconds(delay as i64));
                shared.publish_retry(m, attempt + 1, delay).await?;
                tracing::warn!(execution.id = %m.execution_id, attempt, error = %error, retry_in_ms = delay, "delivery failed; retry scheduled");
                Status::Retrying
            } else {
                shared.publish_failed(m, attempt, &error).await?;
                tracing::error!(execution.id = %m.execution_id, attempt, error = %error, "delivery failed for good");
                Status::Failed
            };
            metrics::counter!(common::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => status.as_str()).increment(1);
            let request = FinishRequest {
                http_status: http_status.map(i32::from),
                error: Some(error),
                next_attempt_at,
                ..done(status, excerpt)
            };
            shared.finish(m, request).await?;
        }
    }
    Ok(Processed::Done)
}

impl Shared {
    async fn finish(&self, m: &FireMessage, request: FinishRequest) -> anyhow::Result<()> {
        // The callback has been made: a failed write is tried again for a
        // while rather than handing the message back, which would deliver
        // it a second time.
        let give_up_at = std::time::Instant::now() + OUTCOME_RETRY_FOR;
        let mut backoff = Backoff::new(Duration::from_millis(100));
        let recorded = loop {
            match timed("finish", self.finishes.call(request.clone())).await {
                Ok(recorded) => break recorded,
                Err(e) if std::time::Instant::now() + backoff.delay() < give_up_at => {
                    tracing::warn!(execution.id = %m.execution_id, error = %format!("{e:#}"), "recording the outcome failed; trying again");
                    metrics::counter!(common::metrics::WORKER_OUTCOME_RETRIES_TOTAL).increment(1);
                    backoff.wait().await;
                }
                Err(e) => return Err(e),
            }
        };
        if !recorded {
            // Another delivery of this attempt took the row back (this one
            // was presumed dead); its outcome stands.
            tracing::debug!(execution.id = %m.execution_id, "outcome not recorded: the row moved on");
        }
        Ok(())
    }

    async fn publish_to(&self, queue: &str, m: &FireMessage, headers: FieldTable) -> anyhow::Result<()> {
        let payload = serde_json::to_vec(m)?;
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(m.execution_id.as_str().into())
            .with_headers(headers);
        let confirm = self
            .publish
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions { mandatory: true, ..Default::default() },
                &payload,
                props,
            )
            .await?
            .await?;
        if !confirm.is_ack() || confirm.take_message().is_some() {
            anyhow::bail!("broker did not accept the message for {queue}");
        }
        Ok(())
    }

    async fn publish_retry(&self, m: &FireMessage, next_attempt: u32, delay_ms: u64) -> anyhow::Result<()> {
        {
            let mut declared = self.declared_retry_queues.lock().await;
            if !declared.contains(&delay_ms) {
                self.topology.declare_retry_queue(&self.publish, delay_ms).await?;
                declared.insert(delay_ms);
            }
        }
        let mut headers = FieldTable::default();
        headers.insert(ATTEMPT_HEADER.into(), AMQPValue::LongInt(next_attempt as i32));
        // The message is due again only after its delay.
        let mut retry = m.clone();
        retry.due_at = Utc::now();
        let result = self.publish_to(&self.topology.retry_queue(delay_ms), &retry, headers).await;
        if result.is_err() {
            // The queue may have expired since we declared it.
            self.declared_retry_queues.lock().await.remove(&delay_ms);
        }
        result
    }

    async fn publish_failed(&self, m: &FireMessage, attempts: u32, reason: &str) -> anyhow::Result<()> {
        let mut headers = FieldTable::default();
        headers.insert(ATTEMPT_HEADER.into(), AMQPValue::LongInt(attempts as i32));
        headers.insert(
            "x-cronshard-failed-at".into(),
            AMQPValue::LongString(common::execution::format_instant(Utc::now()).into()),
        );
        headers.insert("x-cronshard-failure-reason".into(), AMQPValue::LongString(reason.into()));
        self.publish_to(&self.topology.failed_queue, m, headers).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_hold_on_a_held_slot_is_refused_and_leaves_the_first_in_place() {
        // On a thread of its own: the bug this guards against was a deadlock.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let holding = Holding::default();
            let slot: HeldSlot = (uuid::Uuid::now_v7(), Utc::now(), 1);
            let first = holding.hold(slot).expect("a free slot is held");
            let second = holding.hold(slot).is_none();
            let still_held = holding.snapshot() == [slot];
            drop(first);
            let _ = done.send((second, still_held, holding.snapshot().is_empty()));
        });
        let (refused, still_held, released) =
            finished.recv_timeout(Duration::from_secs(5)).expect("holding a held slot deadlocked");
        assert!(refused, "a second task must not hold the same attempt");
        assert!(still_held, "the refused hold must not remove the first task's entry");
        assert!(released, "the entry goes when its task ends");
    }

    #[test]
    fn a_heartbeat_is_fresh_for_one_beat_less_than_others_wait_before_presuming_the_worker_gone() {
        let last_beat = LastBeat::default();
        assert!(!last_beat.fresh(), "no beat yet");
        last_beat.record(std::time::Instant::now());
        assert!(last_beat.fresh());
        let margin = common::ledger::WORKER_HEARTBEAT_EVERY;
        let ago = |d: Duration| std::time::Instant::now().checked_sub(d).expect("uptime");
        last_beat.record(ago(common::ledger::WORKER_GONE_AFTER - margin - Duration::from_millis(100)));
        assert!(last_beat.fresh());
        last_beat.record(ago(common::ledger::WORKER_GONE_AFTER - margin));
        assert!(!last_beat.fresh(), "within one beat of being presumed gone");
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_wait_only_while_deliveries_queue_and_never_past_the_limit() {
        let backlog = Arc::new(DueBacklog::new(2));
        let steady: Vec<DueGuard> = (0..2).map(|_| backlog.enter()).collect();
        // Within the in-flight limit: no wait at all.
        let started = tokio::time::Instant::now();
        backlog.drained_or(OUTCOME_MAX_DEFER).await;
        assert_eq!(started.elapsed(), Duration::ZERO);

        // A burst: the wait ends when the backlog falls back to the limit.
        let burst = backlog.enter();
        let waiter = tokio::spawn({
            let backlog = backlog.clone();
            async move {
                let started = tokio::time::Instant::now();
                backlog.drained_or(OUTCOME_MAX_DEFER).await;
                started.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "outcomes must wait while deliveries queue");
        drop(burst);
        assert_eq!(waiter.await.unwrap(), Duration::from_millis(300));

        // A burst that does not drain: the wait is bounded.
        let stuck = backlog.enter();
        let started = tokio::time::Instant::now();
        backlog.drained_or(OUTCOME_MAX_DEFER).await;
        assert_eq!(started.elapsed(), OUTCOME_MAX_DEFER);
        drop((stuck, steady));
    }
}
