//! One AMQP message on its way through the worker: parse (a fire message or
//! a bundle), then per slot perform what its lifecycle (`lifecycle.rs`, the
//! decisions) asks: start the ledger row (arming a pre-armed one), wait for
//! the due instant, verify an armed row, pass the destination's gate,
//! deliver, publish any follow-up, record the outcome; then settle the
//! message: ack, or requeue when a slot cannot be decided yet. The ledger
//! writes of concurrent messages go through `Batcher`s, a few large
//! statements in a burst.

mod received;
mod shared;
mod steps;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lapin::Acker;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use domain::message::FireMessage;
use domain::slot::Status;
use runtime::backoff::Backoff;
use runtime::telemetry::timed_into;
use store::ledger::delivery as ledger;

use super::batch::Answer;
use super::deliver::{Outcome, destination_health};
use super::destination::Gate;
use super::heartbeat::Hold;
use super::holdings::HeldCharge;
use super::lifecycle::{self, Arrival, Command, Event, GateAnswer, Lifecycle, Recording, Settle};

pub(crate) use self::received::Received;
pub(crate) use self::shared::Shared;
use self::shared::timed;

/// Handles one AMQP message: a single fire message or a bundle of them
/// (`message::BUNDLE_CONTENT_TYPE`), each slot on its own way to its due
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
    let settle = match parsed {
        Ok(messages) if !messages.is_empty() => {
            // A retried message passed through one retry queue per earlier failure.
            if let Some(retries) = received.retries_by_x_death
                && retries + 1 != received.attempt
                && !received.waited
                && !received.completion_check
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
            if delivered.is_empty() { settle } else { settle.and(shared.record(delivered).await) }
        }
        result => {
            let error = result.err().map_or_else(|| "an empty bundle".to_owned(), |e| e.to_string());
            tracing::error!(error, "unparsable message; rejecting to the failed queue");
            Settle::Reject
        }
    };
    match settle {
        Settle::Ack => {
            if let Err(e) = timed_into(&shared.metrics.stage_ack, received.acker.ack(BasicAckOptions::default())).await
            {
                tracing::warn!(error = %e, "ack failed; the broker will redeliver");
            }
        }
        Settle::Requeue(wait) => requeue_after(&received.acker, wait, &token).await,
        // Dead-letters to the failed queue, where an operator can see it.
        Settle::Reject => {
            let _ = received.acker.reject(BasicRejectOptions { requeue: false }).await;
        }
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
    let Received { attempt, redelivered, waited, completion_check, .. } = *received;
    let arrival = Arrival { attempt, redelivered, waited, completion_check };
    // Each slot with its charge, released as the slot is decided.
    let mut charges: Vec<Option<HeldCharge>> = charges.into_iter().map(Some).collect();
    let runs = lifecycle::runs(&messages);
    let messages = &messages;
    // Unordered, not `join_all`: a bundle's slots wake one at a time (a
    // ledger answer, a permit, a response), and `join_all` polls every slot
    // of the bundle on each wake; in a 100,000 herd those idle polls were a
    // visible share of a worker's CPU in the drain.
    let mut runs: FuturesUnordered<_> = runs
        .into_iter()
        .map(|run| {
            let run: Vec<_> = run.into_iter().map(|i| (&messages[i], charges[i].take())).collect();
            async move {
                let mut settle = Settle::Ack;
                let mut delivered = Vec::new();
                let mut run = run.into_iter().peekable();
                while let Some((m, charge)) = run.next() {
                    let Some(charge) = charge else { continue };
                    match handle_slot(shared, m, arrival, charge, in_flight, token).await {
                        SlotEnd::Settled(s) => settle = settle.and(s),
                        // The next catch-up slot's overlap check reads this one's row.
                        SlotEnd::Delivered(d) if run.peek().is_some() => {
                            settle = settle.and(shared.record(vec![d]).await)
                        }
                        SlotEnd::Delivered(d) => delivered.push(d),
                    }
                }
                (settle, delivered)
            }
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
    recording: Recording,
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

/// A slot's charge on its way: held, or armed until its due instant.
enum Charge {
    Held(HeldCharge),
    Armed,
}

/// One slot from its arrival to its settle or its delivery: performs each
/// command of its lifecycle and feeds the answer back. Every slot of every
/// message in the prefetch is one of these futures, most of them waiting
/// (for the due instant, their host, an in-flight permit), and a future is
/// as large as its largest state: the steps past the due instant (the
/// gate, the delivery, the overlap check and the publishes) are boxed,
/// allocated only by the slots that reach them. Inline, those steps made
/// each slot 12,480 bytes; boxed, an armed slot's future stays small, so a
/// herd armed ahead of time fits in a third of the memory.
async fn handle_slot<'a>(
    shared: &'a Shared,
    m: &FireMessage,
    arrival: Arrival,
    charge: HeldCharge,
    in_flight: &Semaphore,
    token: &CancellationToken,
) -> SlotEnd<'a> {
    let mut slot = Lifecycle::new(m, arrival, &shared.rules);
    let Some(hold) = shared.holding.hold(slot.slot()) else {
        // Another task here has this attempt (the copy of a lost session,
        // still giving its row back): ask again shortly.
        return SlotEnd::Settled(Settle::Requeue(ledger::BUSY_RECHECK_MIN));
    };
    let attempt = arrival.attempt;
    let mut charge = Charge::Held(charge);
    let mut due_guard = None;
    let mut gate_pass = None;
    let mut event = Event::Arrived;
    let settle = loop {
        event = match slot.next(event, runtime::clock::now()) {
            Command::SkipLate(late) => failed_or(m, Box::pin(shared.skip_late(m, late)).await, Event::LateDecided),
            Command::CheckStillOpen { horizon } => {
                Event::StillOpen(shared.deliverers.destinations.still_open(&m.target, horizon))
            }
            Command::HandBack { hand_back, again: false } => {
                failed_or(m, timed("hand_back", shared.hand_backs.call(hand_back)).await, Event::HandedBack)
            }
            Command::HandBack { hand_back, again: true } => {
                failed_or(m, timed("wait_again", shared.waits_again.call(hand_back)).await, Event::HandedBack)
            }
            Command::PublishWait { delay, waiting, again } => {
                let published = Box::pin(shared.retry.publish_wait(m, attempt, delay.as_millis() as u64)).await;
                if published.is_ok() {
                    shared.handed_back(m, attempt, delay, &waiting, again);
                }
                failed_or(m, published, |()| Event::Published)
            }
            // It takes the whole round now (its host is back, or may be): at
            // the waiting queue's pace. Sent back again before this, it costs
            // one cheap write and is not paced: held back, it would stay in
            // the queue past its row's next return and be republished by the
            // stranded-row sweep.
            Command::Pace => tokio::select! {
                _ = token.cancelled() => Event::Stopping,
                _ = shared.waiting_pace.turn(|| shared.due_backlog.is_queueing()) => Event::Paced,
            },
            Command::Start(request) => failed_or(
                m,
                timed_into(&shared.metrics.stage_start, shared.starts.call(request)).await,
                |(start, jobs_seen)| Event::Started(start, jobs_seen),
            ),
            Command::WaitUntilDue(due_at) => {
                // Armed: charged as such until the due instant (`holdings`).
                let Charge::Held(held) = std::mem::replace(&mut charge, Charge::Armed) else {
                    unreachable!("a slot is armed once at a time")
                };
                let armed = held.arm();
                let wait = (due_at - runtime::clock::now()).to_std().unwrap_or(Duration::ZERO);
                tokio::select! {
                    _ = token.cancelled() => Event::Stopping,
                    _ = tokio::time::sleep(wait) => tokio::select! {
                        _ = token.cancelled() => Event::Stopping,
                        held = armed.due() => {
                            charge = Charge::Held(held);
                            Event::Due
                        }
                    },
                }
            }
            // The check comes before the in-flight permit: every message due
            // in a burst asks at once, so the checks go in a few large
            // statements. (With the permit first, only `max_in_flight` could
            // ask at a time: a 10,000 herd made 1,381 tiny statements instead
            // of 25, each holding a permit for a round trip.) A delete after
            // the check is ordered after the fire, as one after the due
            // instant should be.
            Command::Verify(request) => {
                due_guard.get_or_insert_with(|| shared.due_backlog.enter());
                failed_or(
                    m,
                    timed_into(&shared.metrics.stage_verify, shared.verifies.call(request)).await,
                    Event::Verified,
                )
            }
            Command::ApplyOverlap(request) => {
                due_guard.get_or_insert_with(|| shared.due_backlog.enter());
                failed_or(m, Box::pin(shared.overlap_lets_run(m, &request)).await, Event::Overlap)
            }
            // The destination's gate before the worker-wide permit: a slot
            // waiting for a busy or broken host holds no permit another host
            // needs.
            Command::PassGate { horizon } => {
                let address = shared.deliverers.destinations.address(&m.target);
                let due = due_guard.take().unwrap_or_else(|| shared.due_backlog.enter());
                let held = slot.slot();
                let gate = Box::pin(shared.deliverers.destinations.pass(
                    address.destination.as_deref(),
                    horizon,
                    &shared.due_backlog,
                    due,
                    token,
                    |waiting| shared.note_waiting(m, held, waiting),
                ))
                .await;
                match gate {
                    Gate::Go(pass) => {
                        gate_pass = Some((pass, address));
                        Event::Gate(GateAnswer::Open)
                    }
                    Gate::Stopping => Event::Stopping,
                    Gate::Release { delay, waiting } => Event::Gate(GateAnswer::Release { delay, waiting }),
                    Gate::GiveUp(waiting) => Event::Gate(GateAnswer::GiveUp(waiting)),
                }
            }
            Command::Deliver => {
                let (pass, address) = gate_pass.take().expect("delivered through an open gate");
                let Ok(permit) = in_flight.acquire().await else {
                    event = failed(m, anyhow::anyhow!("the in-flight limit closed"));
                    continue;
                };
                let started = runtime::clock::now();
                if attempt == 1 {
                    let lateness = ledger::lateness_seconds(started, m.due_at).max(0.0);
                    shared.metrics.lateness.record(lateness);
                    shared.namespaces.late(&m.namespace, lateness);
                    if arrival.is_first() {
                        shared.waiting_pace.observe_live(Duration::from_secs_f64(lateness));
                    }
                }
                shared.metrics.in_flight.increment(1.0);
                let (outcome, sqs_message_id) =
                    Box::pin(shared.deliverers.deliver(m, attempt, address.http_url.clone())).await;
                shared.metrics.in_flight.decrement(1.0);
                let took = (runtime::clock::now() - started).num_milliseconds() as f64 / 1000.0;
                shared.metrics.delivery_seconds.record(took);
                shared.metrics.attempt.record(f64::from(attempt));
                drop(permit);
                pass.record(destination_health(&outcome));
                if matches!(outcome, Outcome::Success { .. }) {
                    shared.metrics.succeeded.increment(1);
                }
                Event::Delivered { outcome, sqs_message_id }
            }
            Command::PublishRetry { next_attempt, delay_ms } => {
                let published = Box::pin(shared.retry.publish_retry(m, next_attempt, delay_ms)).await;
                failed_or(m, published, |()| Event::Published)
            }
            Command::PublishCompletionCheck { deadline } => {
                let published = Box::pin(shared.retry.publish_completion_check(m, attempt, deadline)).await;
                failed_or(m, published, |()| Event::Published)
            }
            Command::ExpireAwaiting { slot, fire_id } => {
                let expired = ledger::expire_awaiting(&shared.pg, &shared.config.worker_id, slot, fire_id).await;
                failed_or(m, expired, Event::Expired)
            }
            Command::PublishFailed { attempts, error } => {
                let published = Box::pin(shared.retry.publish_failed(m, attempts, &error)).await;
                failed_or(m, published, |()| Event::Published)
            }
            Command::GiveUp(give_up) => {
                let error = give_up.error.clone();
                let recorded = timed("give_up", shared.give_ups.call(give_up)).await;
                if let Ok(true) = recorded {
                    metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => Status::Failed.as_str())
                        .increment(1);
                    tracing::error!(execution.id = %m.execution_id, attempt, error, "delivery given up");
                }
                failed_or(m, recorded, |_| Event::GaveUp)
            }
            Command::Finish(outcome) => {
                let Charge::Held(charge) = charge else { unreachable!("delivered past its due instant") };
                // Its steps are freed with its message's: what it keeps until
                // the outcome is written is the outcome, charged as such.
                let text = [&outcome.excerpt, &outcome.error, &outcome.sqs_message_id];
                let charge = charge.delivered(text.iter().map(|t| t.as_ref().map_or(0, String::len)).sum());
                shared.namespaces.outcome(&m.namespace, outcome.status);
                let written = shared.finishes.submit(outcome.clone());
                let recording = Recording::new(outcome, &shared.rules);
                let execution_id = m.execution_id.clone();
                return SlotEnd::Delivered(Delivered {
                    recording,
                    written,
                    execution_id,
                    _hold: hold,
                    _charge: charge,
                });
            }
            Command::Release { slot, fire_id } => {
                shared.give_back(slot, fire_id, &m.execution_id).await;
                Event::Released
            }
            Command::Settle(settle) => break settle,
        };
    };
    drop(hold);
    SlotEnd::Settled(settle)
}

/// The event of a step that failed: the message returns to the queue.
fn failed(m: &FireMessage, e: anyhow::Error) -> Event {
    tracing::warn!(execution.id = %m.execution_id, error = %format!("{e:#}"), "processing failed; message returns to the queue");
    Event::Failed
}

/// The event of a step's answer, or of its failure.
fn failed_or<T>(m: &FireMessage, result: anyhow::Result<T>, event: impl FnOnce(T) -> Event) -> Event {
    result.map_or_else(|e| failed(m, e), event)
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

impl Shared {
    /// Records the outcomes of a message's delivered slots, through the
    /// batched outcome writes, and says how the message settles (each
    /// slot's `Recording` decides whether a failed write is tried again).
    /// Each slot's hold and charge go as its outcome is written.
    async fn record(&self, delivered: Vec<Delivered<'_>>) -> Settle {
        let mut backoff = Backoff::new(Duration::from_millis(100));
        let mut settle = Settle::Ack;
        let mut pending = delivered;
        loop {
            let mut failed = Vec::new();
            let mut error = None;
            for mut slot in pending {
                let event = match timed_into(&self.metrics.stage_finish, slot.written.get()).await {
                    Ok(recorded) => {
                        if !recorded {
                            tracing::debug!(execution.id = %slot.execution_id, "outcome not recorded: the row moved on")
                        }
                        Event::Recorded
                    }
                    Err(e) => {
                        error = Some(e);
                        Event::RecordFailed { tried_for: backoff.trying_for(), next_try_in: backoff.delay() }
                    }
                };
                let mut command = slot.recording.next(event);
                if let Command::Release { slot: held, fire_id } = command {
                    let error = error.as_ref().map(|e| format!("{e:#}")).unwrap_or_default();
                    tracing::warn!(execution.id = %slot.execution_id, error, "recording the outcome failed; message returns to the queue");
                    self.give_back(held, fire_id, &slot.execution_id).await;
                    command = slot.recording.next(Event::Released);
                }
                match command {
                    Command::Settle(s) => settle = settle.and(s),
                    Command::Finish(_) => failed.push(slot),
                    command => {
                        unreachable!("an outcome's recording asks only to settle, write or release: {command:?}")
                    }
                }
            }
            let (Some(error), false) = (error, failed.is_empty()) else { return settle };
            tracing::warn!(execution.id = %failed[0].execution_id, slots = failed.len(), error = %format!("{error:#}"), "recording the outcome failed; trying again");
            metrics::counter!(runtime::metrics::WORKER_OUTCOME_RETRIES_TOTAL).increment(failed.len() as u64);
            backoff.wait().await;
            for slot in &mut failed {
                slot.written = self.finishes.submit(slot.recording.outcome().clone());
            }
            pending = failed;
        }
    }
}
