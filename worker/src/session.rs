//! The worker's life (`run`) and its broker sessions: the heartbeat runs
//! for the whole life, while each session connects to RabbitMQ, declares the
//! topology, consumes the main queue on a few channels and the waiting queue
//! on one more, and hands every message to a task (`processing::handle`); a
//! lost session is reconnected with backoff.
//!
//! The session loop and the heartbeat loop are watched for `/healthz`;
//! `/readyz` reads whether a session consumes (`broker`) and whether the
//! heartbeat reaches Postgres (`postgres`).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use deadpool_postgres::Pool;
use futures::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use broker::amqp::{self, Topology};
use runtime::backoff::Backoff;
use runtime::health::{Health, Report, Verdict, Watchdog};

use super::WorkerConfig;
use super::deliver::Deliverers;
use super::heartbeat::{self, Holding, LastBeat};
use super::holdings::HeldBytes;
use super::processing::{self, Shared};
use super::retry::RetryPublisher;

/// Channels the worker consumes on, sharing the prefetch. RabbitMQ hands
/// messages to consumers in turn, in the order they registered: with 32 per
/// worker, the first 32 messages of a burst all went to the worker that
/// registered first, and with slots in bundles a burst is a few dozen
/// messages. Bundles also shortened the unacked lists that the channels
/// were there to split (see below), so 4 are enough.
const CONSUMER_CHANNELS: usize = 4;

/// How long a starting worker waits for its first clock check.
const CLOCK_FIRST_CHECK_BOUND: Duration = Duration::from_secs(5);

/// A watched loop that has not turned for this long, and is not waiting on
/// a service, is stalled: `/healthz` fails and Kubernetes restarts the worker.
const LOOP_STALL_BOUND: Duration = Duration::from_secs(60);

/// Runs until `token` is cancelled; reconnects to RabbitMQ with backoff.
pub async fn run(config: WorkerConfig, pg: Pool, token: CancellationToken) -> anyhow::Result<()> {
    run_with_health(config, pg, Health::new(), token).await
}

/// As [`run`], reporting its loops and readiness to `health` (what the
/// binary serves on its metrics port).
pub async fn run_with_health(
    config: WorkerConfig,
    pg: Pool,
    health: Health,
    token: CancellationToken,
) -> anyhow::Result<()> {
    // The clock before the first message: a pre-armed message is held until
    // its due instant by the corrected clock. A worker never stops over its
    // clock (it would strand what it holds); it corrects and reports.
    let (clock_tx, _) = tokio::sync::watch::channel(runtime::clock::ClockVerdict::InBounds);
    runtime::clock::check_once(&pg, &config.clock, &clock_tx, CLOCK_FIRST_CHECK_BOUND).await;
    let clock_stop = CancellationToken::new();
    let clock = tokio::spawn(runtime::clock::discipline(pg.clone(), config.clock, clock_tx, clock_stop.clone()));
    let deliverers = Arc::new(Deliverers::new(&config, pg.clone())?);
    let holding = Arc::new(Holding::default());
    // Shared by the sessions: a lost session's tasks hold theirs until they end.
    let held = HeldBytes::new(config.max_held_bytes);
    let gauges = tokio::spawn({
        let held = held.clone();
        async move { held.keep_gauges().await }
    });
    let last_beat = Arc::new(LastBeat::default());
    // Only a worker that can deliver says it is alive, and it stays so
    // until its last delivery has ended: a worker presumed gone loses its
    // `running` rows to redeliveries.
    let beats_stop = CancellationToken::new();
    let beats_report = Report::default();
    let beats = tokio::spawn(heartbeat::run(
        pg.clone(),
        config.worker_id.clone(),
        holding.clone(),
        last_beat.clone(),
        beats_report.clone(),
        health.watchdog("heartbeat", LOOP_STALL_BOUND),
        beats_stop.clone(),
    ));
    let consuming = Report::default();
    readiness(&health, consuming.clone(), last_beat.clone(), beats_report);
    let alive = health.watchdog("session", LOOP_STALL_BOUND);
    // Alert notices go out beside deliveries, whatever RabbitMQ's state:
    // they are read from Postgres.
    let alerts_stop = CancellationToken::new();
    let alerts = crate::alerts::AlertSender::new(
        pg.clone(),
        store::secrets::Vault::new(config.keyring.clone()),
        crate::deliver::ssrf::SsrfGuard::new(config.allow_cidrs.clone()),
    )?;
    let alerts = tokio::spawn(alerts.run(alerts_stop.clone()));
    let first_delay = Duration::from_millis(200);
    let mut backoff = Backoff::new(first_delay);
    while !token.is_cancelled() {
        alive.tick();
        let session_started = std::time::Instant::now();
        let link = Link { consuming: &consuming, alive: &alive };
        match consume(&config, &pg, deliverers.clone(), holding.clone(), &held, last_beat.clone(), link, &token).await {
            Ok(()) => break,
            Err(e) => {
                consuming.fail(format!("not consuming: {e:#}"));
                tracing::warn!(error = %format!("{e:#}"), "worker lost RabbitMQ; reconnecting");
                // A session that ran is a new outage: its retries start
                // from the first delay, not where the last outage left off.
                if session_started.elapsed() > Backoff::MAX {
                    backoff = Backoff::new(first_delay);
                }
                if !backoff.wait_unless_cancelled(&token).await {
                    break;
                }
            }
        }
    }
    alerts_stop.cancel();
    let _ = alerts.await;
    beats_stop.cancel();
    let _ = beats.await;
    clock_stop.cancel();
    let _ = clock.await;
    gauges.abort();
    Ok(())
}

/// The worker's `/readyz` checks, read from state its loops keep: a
/// session consumes (`broker`), and its heartbeat went out recently on an
/// open Postgres session (`postgres`; what lets it take and finish rows).
fn readiness(health: &Health, consuming: Report, last_beat: Arc<LastBeat>, beats: Report) {
    health.check("broker", move || consuming.status(None).into());
    health.check("postgres", move || {
        if last_beat.fresh() {
            return Verdict::Ok;
        }
        Verdict::Failed(beats.status(None).err().unwrap_or_else(|| "no recent heartbeat on an open session".into()))
    });
}

/// What a session tells the rest of the worker about itself.
struct Link<'a> {
    /// Whether it consumes, and if not why.
    consuming: &'a Report,
    /// Its turns; connecting, awaiting messages and draining are waits on
    /// the broker and on deliveries.
    alive: &'a Watchdog,
}

/// One broker session: until `token` is cancelled (Ok) or the connection
/// or a consumer is lost (Err).
#[allow(clippy::too_many_arguments)]
async fn consume(
    config: &WorkerConfig,
    pg: &Pool,
    deliverers: Arc<Deliverers>,
    holding: Arc<Holding>,
    held: &Arc<HeldBytes>,
    last_beat: Arc<LastBeat>,
    link: Link<'_>,
    token: &CancellationToken,
) -> anyhow::Result<()> {
    let connecting = link.alive.waiting();
    let connection = amqp::connect(&config.amqp_url, &format!("cronshard-worker {}", config.worker_id))
        .await
        .context("connecting to RabbitMQ")?;
    let topology = Topology::new(&config.cluster).with_queue_type(config.queue_type);
    let publish = amqp::confirm_channel(&connection).await?;
    topology.declare(&publish).await?;
    // The prefetch is split over several channels: a pre-armed message is
    // acked at its due instant, not in the order it arrived, and RabbitMQ
    // walks a channel's unacked list from the oldest to find it. One list
    // of 45,000 made each such ack cost ~2 ms of the broker's time and
    // stalled publishing for seconds (docs/benchmarks.md).
    let channels = CONSUMER_CHANNELS.min(usize::from(config.prefetch)).max(1);
    let per_channel = (usize::from(config.prefetch) / channels).max(1) as u16;
    // One more channel, with one channel's share, takes the slots that wait
    // for their destination: whatever their number, the main queue's slots
    // never queue behind them.
    let queues = std::iter::repeat_n(&topology.main_queue, channels).chain([&topology.waiting_queue]);
    let mut consume_channels = Vec::with_capacity(channels + 1);
    let mut consumers = Vec::with_capacity(channels + 1);
    for (i, queue) in queues.enumerate() {
        let channel = connection.create_channel().await?;
        channel.basic_qos(per_channel, BasicQosOptions::default()).await?;
        consumers.push(
            channel
                .basic_consume(
                    queue.as_str().into(),
                    format!("{}#{i}", config.worker_id).as_str().into(),
                    BasicConsumeOptions::default(),
                    FieldTable::default(),
                )
                .await?,
        );
        consume_channels.push(channel);
    }
    let mut consumer = futures::stream::select_all(consumers);
    drop(connecting);
    link.consuming.ok();
    tracing::info!(worker.id = %config.worker_id, queue = %topology.main_queue, waiting_queue = %topology.waiting_queue, "consuming");
    let retry = RetryPublisher::new(topology, publish);
    let shared = Arc::new(Shared::new(config, pg, deliverers, retry, holding, last_beat));
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
            // At the held-bytes cap the next message waits in the broker.
            // Waiting for room (deliveries ending) or for a message is
            // waiting on services; handling one is the loop's own turn.
            next = async {
                let _waiting = link.alive.waiting();
                held.room().await;
                consumer.next().await
            } => match next {
                Some(Ok(mut delivery)) => {
                    // Parsed here, so that its charge counts before the next
                    // message is taken; the raw body is not kept (the slots
                    // carry what they need).
                    let body = std::mem::take(&mut delivery.data);
                    let messages = domain::message::parse_body(&body);
                    let charges = held.charge_message(body.len(), messages.as_ref().map_or(0, Vec::len));
                    drop(body);
                    let shared = shared.clone();
                    let in_flight = in_flight.clone();
                    let session = session.clone();
                    tasks.spawn(processing::handle(shared, processing::Received::of(delivery), messages, charges, in_flight, session));
                }
                Some(Err(e)) => break Err(e.into()),
                None => break Err(anyhow::anyhow!("consumer cancelled by the broker")),
            },
        }
    };
    // Not consuming from here on, whatever the drain below takes.
    match &result {
        Ok(()) => link.consuming.fail("not consuming: stopping"),
        Err(e) => link.consuming.fail(format!("not consuming: {e:#}")),
    }
    let _draining = link.alive.waiting();
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
