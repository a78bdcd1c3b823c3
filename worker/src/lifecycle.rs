//! A slot's lifecycle in the worker, from its message's arrival to how the
//! message settles: a state machine without I/O. The driver
//! (`processing.rs`) feeds it events (the arrival, the ledger's answers,
//! the due instant, the destination's gate, the delivery's outcome) with
//! the time, and performs the one command it answers with: the next ledger
//! transition, wait, publish or delivery, or how the AMQP message settles.
//!
//! The rules it keeps, and the property tests check:
//! - a slot is delivered at most once per arrival, never before its due
//!   instant, and only after the ledger said the row is this attempt's to
//!   deliver (started, verified when armed ahead, the overlap policy let it);
//! - a late first attempt goes by its job's misfire policy
//!   (`domain::misfire`), asked of the ledger first;
//! - a failure is retried only when retryable and within the retry budget,
//!   and the follow-up is published before the outcome is recorded;
//! - the message is acked only once the slot's outcome is recorded or its
//!   row needs nothing more from this worker; a row this worker took and
//!   will not finish is given back before the message is requeued.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use domain::job::RetryPolicy;
use domain::message::FireMessage;
use domain::misfire::{self, Verdict};
use domain::slot::Status;
use domain::slot::Trigger;
use store::ledger::delivery::{
    DestinationWait, FinishRequest, GiveUp, HandBack, HeldSlot, JobsSeen, LateDecision, LateSlot, Start, StartRequest,
    VerifyRequest,
};

use super::deliver::{Answer, DeliveryError, Outcome};
use super::destination::{self, Waiting};
use super::retry;

/// How long a message waits before it is requeued after a failed step, so
/// that a database or broker outage does not spin.
pub(crate) const REQUEUE_AFTER_FAILURE: Duration = Duration::from_secs(1);

/// A completion check that comes back earlier than this before its deadline
/// (its delay queue rounds down by up to an eighth) goes round again instead
/// of being held: a 7-day timeout would otherwise hold a message for hours.
pub(crate) const CHECK_HOLD_AT_MOST: TimeDelta = TimeDelta::seconds(60);

/// The worker's settings the lifecycle decides by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    pub(crate) misfire_threshold: TimeDelta,
    pub(crate) retry_defaults: RetryPolicy,
    /// The longest cool-down of a destination's circuit.
    pub(crate) open_max: Duration,
    /// How long a failed outcome write is tried again.
    pub(crate) outcome_retry_for: Duration,
}

impl Rules {
    pub(crate) fn of(config: &super::WorkerConfig) -> Self {
        Rules {
            misfire_threshold: TimeDelta::from_std(config.misfire_threshold).unwrap_or(TimeDelta::MAX),
            retry_defaults: config.retry_defaults,
            open_max: config.destinations.breaker.open_max,
            outcome_retry_for: config.outcome_retry_for,
        }
    }
}

/// How a slot's message reached the worker.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    pub(crate) attempt: u32,
    pub(crate) redelivered: bool,
    /// Back from a delay queue where it waited for its destination.
    pub(crate) waited: bool,
    /// Back at the deadline of its attempt, which awaits the receiver's
    /// report (async completion): times it out if no report came.
    pub(crate) completion_check: bool,
}

impl Arrival {
    /// The first attempt, not handed back to wait for its destination: the
    /// one arrival that may be late by the misfire threshold (a slot handed
    /// back to wait was on time when it first arrived).
    pub(crate) fn is_first(&self) -> bool {
        self.attempt == 1 && !self.waited && !self.completion_check
    }
}

/// What the AMQP message of a slot needs once the slot is decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Settle {
    Ack,
    /// Back to the queue after this long (at once when the worker stops).
    Requeue(Duration),
    /// To the failed queue: the message cannot be read.
    Reject,
}

impl Settle {
    /// A message carrying both: requeued, after the longer wait (a message
    /// that cannot be read rejects whole).
    pub(crate) fn and(self, other: Settle) -> Settle {
        match (self, other) {
            (Settle::Reject, _) | (_, Settle::Reject) => Settle::Reject,
            (Settle::Ack, Settle::Ack) => Settle::Ack,
            (Settle::Requeue(a), Settle::Requeue(b)) => Settle::Requeue(a.max(b)),
            (Settle::Requeue(wait), Settle::Ack) | (Settle::Ack, Settle::Requeue(wait)) => Settle::Requeue(wait),
        }
    }
}

/// What the destination's gate decided.
#[derive(Debug)]
pub(crate) enum GateAnswer {
    Open,
    /// Hand the slot back for `delay` without an attempt.
    Release {
        delay: Duration,
        waiting: Waiting,
    },
    /// The circuit is open past the slot's horizon.
    GiveUp(Waiting),
}

/// What the driver tells the lifecycle.
#[derive(Debug)]
pub(crate) enum Event {
    Arrived,
    LateDecided(LateDecision),
    /// Back from waiting: whether its destination's circuit is still open
    /// past the hold (with the delay to wait again), `StillOpen(None)` if not.
    StillOpen(Option<(Duration, Waiting)>),
    /// The hand-back's row write: false when the row was not as expected.
    HandedBack(bool),
    /// The waiting queue gave it its turn.
    Paced,
    Started(Start, JobsSeen),
    /// The wait for the due instant ended.
    Due,
    Verified(Start),
    /// The overlap policy: whether the slot may run.
    Overlap(bool),
    Gate(GateAnswer),
    /// The follow-up message (retry, wait or failed queue) is confirmed.
    Published,
    /// The give-up's row write answered (recorded, or the row moved on).
    GaveUp,
    Delivered {
        outcome: Outcome,
        sqs_message_id: Option<String>,
    },
    /// The outcome write answered: recorded, or the row moved on (another
    /// delivery of this attempt took it back; its outcome stands).
    Recorded,
    /// Whether the attempt awaiting its report was timed out by this
    /// worker (false: the report came first, or another copy took it).
    Expired(bool),
    /// The outcome write failed, tried for this long; the next try would
    /// be after `next_try_in`.
    RecordFailed {
        tried_for: Duration,
        next_try_in: Duration,
    },
    Released,
    /// The worker is stopping.
    Stopping,
    /// The step failed (its error is the driver's to log).
    Failed,
}

/// What the lifecycle asks of the driver next.
#[derive(Debug)]
pub(crate) enum Command {
    /// Ask the ledger to skip the late slot by its job's misfire policy.
    SkipLate(LateSlot),
    /// Is the destination's circuit still open past `horizon`?
    CheckStillOpen {
        horizon: DateTime<Utc>,
    },
    /// Record the hand-back on the row: `again` for a slot back from
    /// waiting sent straight back (`wait_again_batch`), else a first one
    /// (`wait_for_destination_batch`).
    HandBack {
        hand_back: HandBack,
        again: bool,
    },
    /// Publish the same attempt to the waiting queue after `delay`.
    PublishWait {
        delay: Duration,
        waiting: Waiting,
        again: bool,
    },
    /// Wait for the waiting queue's pace.
    Pace,
    Start(StartRequest),
    /// Wait (charged as armed) for the due instant.
    WaitUntilDue(DateTime<Utc>),
    Verify(VerifyRequest),
    ApplyOverlap(StartRequest),
    /// Pass the destination's gate, waiting at most until `horizon`.
    PassGate {
        horizon: DateTime<Utc>,
    },
    /// Deliver the attempt now.
    Deliver,
    PublishRetry {
        next_attempt: u32,
        delay_ms: u64,
    },
    /// Publish the message that times the attempt out at `deadline` unless
    /// its receiver reports first.
    PublishCompletionCheck {
        deadline: DateTime<Utc>,
    },
    /// Take the timeout of the attempt awaiting its report.
    ExpireAwaiting {
        slot: HeldSlot,
        fire_id: uuid::Uuid,
    },
    /// Park the message in the failed queue, `attempts` made.
    PublishFailed {
        attempts: u32,
        error: String,
    },
    GiveUp(GiveUp),
    /// Record the outcome (the driver then follows [`Recording`]).
    Finish(FinishRequest),
    /// Give the `running` row back.
    Release {
        slot: HeldSlot,
        fire_id: uuid::Uuid,
    },
    Settle(Settle),
}

#[derive(Debug)]
enum Stage {
    Arrived,
    AskedLate,
    AskedStillOpen,
    HandingBack {
        delay: Duration,
        waiting: Waiting,
        again: bool,
    },
    PublishingWait,
    Pacing,
    Starting,
    Armed,
    Verifying,
    Overlap,
    AtGate,
    // Boxed, as is the outcome below: the stage is part of every waiting
    // slot's future, and these are its largest.
    PublishingGiveUp(Box<GiveUp>),
    GivingUp,
    Delivering,
    /// The outcome to record once the follow-up is confirmed, and the
    /// retry's delay.
    PublishingFollowUp(Box<FinishRequest>, Option<u64>),
    /// A 202 of an async completion: recorded as awaiting once the message
    /// that times it out is confirmed.
    PublishingCheck(Box<FinishRequest>),
    /// A completion check, waiting for its deadline.
    CheckArmed,
    /// A completion check far from its deadline, sent round again.
    CheckRepublishing,
    Expiring,
    /// Handed to [`Recording`].
    Finished,
    Releasing(Settle),
    Settled,
}

/// One slot of a message on its way through the worker.
#[derive(Debug)]
pub(crate) struct Lifecycle<'m> {
    m: &'m FireMessage,
    arrival: Arrival,
    policy: RetryPolicy,
    /// The attempt within the retry budget: a replay's counts from its first.
    budget_attempt: u32,
    /// The latest instant it waits for its destination.
    horizon: DateTime<Utc>,
    misfire_threshold: TimeDelta,
    stage: Stage,
    /// The row is `running` for this worker's attempt.
    took_row: bool,
    /// Its row was started before the due instant: verified at it.
    armed_early: bool,
    jobs_seen: JobsSeen,
}

impl<'m> Lifecycle<'m> {
    pub(crate) fn new(m: &'m FireMessage, arrival: Arrival, rules: &Rules) -> Self {
        let policy = m.retry.unwrap_or(rules.retry_defaults);
        let budget_attempt = arrival.attempt.saturating_sub(m.retry_from).max(1);
        let horizon = destination::wait_horizon(&policy, budget_attempt, m.due_at, rules.open_max);
        Lifecycle {
            m,
            arrival,
            policy,
            budget_attempt,
            horizon,
            misfire_threshold: rules.misfire_threshold,
            stage: Stage::Arrived,
            took_row: false,
            armed_early: false,
            jobs_seen: JobsSeen::NOTHING,
        }
    }

    /// The slot and attempt this lifecycle handles.
    pub(crate) fn slot(&self) -> HeldSlot {
        (self.m.job_id, self.m.scheduled_at, self.arrival.attempt as i32)
    }

    /// The next command, given `event` at `now`.
    pub(crate) fn next(&mut self, event: Event, now: DateTime<Utc>) -> Command {
        let stage = std::mem::replace(&mut self.stage, Stage::Settled);
        match (stage, event) {
            (Stage::Releasing(settle), Event::Released) => self.settled(settle),
            (Stage::Finished | Stage::Settled | Stage::Releasing(_), event) => {
                // A driver bug: nothing more may happen to this slot.
                tracing::error!(execution.id = %self.m.execution_id, ?event, "slot event after it was decided");
                Command::Settle(Settle::Requeue(REQUEUE_AFTER_FAILURE))
            }
            (_, Event::Stopping) => self.settle(Settle::Requeue(Duration::ZERO)),
            (_, Event::Failed) => self.settle(Settle::Requeue(REQUEUE_AFTER_FAILURE)),
            (Stage::Arrived, Event::Arrived) if self.arrival.completion_check => self.check_deadline(now),
            (Stage::Arrived, Event::Arrived) => self.arrived(now),
            (Stage::CheckArmed, Event::Due) => self.check_deadline(now),
            (Stage::CheckRepublishing, Event::Published) => self.settle(Settle::Ack),
            (Stage::Expiring, Event::Expired(false)) => self.settle(Settle::Ack),
            (Stage::Expiring, Event::Expired(true)) => {
                self.took_row = true;
                let timeout_ms = self.m.completion.map_or(0, |c| c.timeout_ms);
                self.delivered(Outcome::failure(DeliveryError::CompletionTimedOut { timeout_ms }), None, now)
            }
            (Stage::PublishingCheck(outcome), Event::Published) => {
                tracing::debug!(execution.id = %self.m.execution_id, attempt = self.arrival.attempt, "accepted; awaiting the receiver's report");
                metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => "accepted").increment(1);
                self.to(Stage::Finished, Command::Finish(*outcome))
            }
            (Stage::AskedLate, Event::LateDecided(LateDecision::Skipped { .. })) => self.settle(Settle::Ack),
            (Stage::AskedLate, Event::LateDecided(LateDecision::Deliver)) => self.on_time(),
            (Stage::AskedStillOpen, Event::StillOpen(Some((delay, waiting)))) => {
                self.hand_back(delay, waiting, true, now)
            }
            (Stage::AskedStillOpen, Event::StillOpen(None)) => self.to(Stage::Pacing, Command::Pace),
            (Stage::HandingBack { delay, waiting, again }, Event::HandedBack(true)) => {
                self.to(Stage::PublishingWait, Command::PublishWait { delay, waiting, again })
            }
            // Not as this worker's hand-back left it: the whole way instead.
            (Stage::HandingBack { again: true, .. }, Event::HandedBack(false)) => self.to(Stage::Pacing, Command::Pace),
            // Taken over meanwhile (this worker was presumed gone): not ours to hand back.
            (Stage::HandingBack { again: false, .. }, Event::HandedBack(false)) => self.settle(Settle::Ack),
            (Stage::PublishingWait, Event::Published) => self.settle(Settle::Ack),
            (Stage::Pacing, Event::Paced) => self.start(),
            (Stage::Starting, Event::Started(Start::Busy(wait), _)) => {
                tracing::debug!(execution.id = %self.m.execution_id, attempt = self.arrival.attempt, ?wait, "redelivered while a live worker holds the attempt; requeueing");
                metrics::counter!(runtime::metrics::WORKER_BUSY_REQUEUES_TOTAL).increment(1);
                self.settle(Settle::Requeue(wait))
            }
            (Stage::Starting, Event::Started(start, jobs_seen)) => {
                if !self.go_on(start) {
                    return self.settle(Settle::Ack);
                }
                self.took_row = true;
                self.jobs_seen = jobs_seen;
                self.armed_early = now < self.m.due_at;
                if self.armed_early { self.to(Stage::Armed, Command::WaitUntilDue(self.m.due_at)) } else { self.due() }
            }
            // Never delivered before the due instant, by this clock.
            (Stage::Armed, Event::Due) if now < self.m.due_at => {
                self.to(Stage::Armed, Command::WaitUntilDue(self.m.due_at))
            }
            (Stage::Armed, Event::Due) => self.due(),
            (Stage::Verifying, Event::Verified(start)) => {
                if self.go_on(start) {
                    self.overlap()
                } else {
                    self.settle(Settle::Ack)
                }
            }
            (Stage::Overlap, Event::Overlap(lets_run)) => {
                if lets_run {
                    self.gate()
                } else {
                    self.settle(Settle::Ack)
                }
            }
            (Stage::AtGate, Event::Gate(GateAnswer::Open)) => self.to(Stage::Delivering, Command::Deliver),
            (Stage::AtGate, Event::Gate(GateAnswer::Release { delay, waiting })) => {
                self.hand_back(delay, waiting, false, now)
            }
            (Stage::AtGate, Event::Gate(GateAnswer::GiveUp(waiting))) => self.give_up(waiting),
            (Stage::PublishingGiveUp(give_up), Event::Published) => self.to(Stage::GivingUp, Command::GiveUp(*give_up)),
            (Stage::GivingUp, Event::GaveUp) => self.settle(Settle::Ack),
            (Stage::Delivering, Event::Delivered { outcome, sqs_message_id }) => {
                self.delivered(outcome, sqs_message_id, now)
            }
            (Stage::PublishingFollowUp(outcome, retry_in_ms), Event::Published) => {
                let attempt = self.arrival.attempt;
                let error = outcome.error.as_deref().unwrap_or_default();
                match retry_in_ms {
                    Some(retry_in_ms) => {
                        tracing::warn!(execution.id = %self.m.execution_id, attempt, error = %error, retry_in_ms, "delivery failed; retry scheduled")
                    }
                    None => {
                        tracing::error!(execution.id = %self.m.execution_id, attempt, error = %error, "delivery failed for good")
                    }
                }
                metrics::counter!(runtime::metrics::WORKER_DELIVERIES_TOTAL, "outcome" => outcome.status.as_str())
                    .increment(1);
                self.to(Stage::Finished, Command::Finish(*outcome))
            }
            (stage, event) => {
                tracing::error!(execution.id = %self.m.execution_id, ?stage, ?event, "unexpected slot event");
                self.settle(Settle::Requeue(REQUEUE_AFTER_FAILURE))
            }
        }
    }

    /// A completion check: at its deadline, it takes the timeout of the
    /// attempt awaiting its report, if no report came.
    fn check_deadline(&mut self, now: DateTime<Utc>) -> Command {
        if self.m.due_at - now > CHECK_HOLD_AT_MOST {
            return self.to(Stage::CheckRepublishing, Command::PublishCompletionCheck { deadline: self.m.due_at });
        }
        if now < self.m.due_at {
            return self.to(Stage::CheckArmed, Command::WaitUntilDue(self.m.due_at));
        }
        let fire_id = self.m.fire_id;
        self.to(Stage::Expiring, Command::ExpireAwaiting { slot: self.slot(), fire_id })
    }

    fn to(&mut self, stage: Stage, command: Command) -> Command {
        self.stage = stage;
        command
    }

    fn arrived(&mut self, now: DateTime<Utc>) -> Command {
        let m = self.m;
        if self.arrival.is_first()
            && let Some(policy) = m.misfire
        {
            let late = now - m.due_at;
            // Would not fire if the job ran since it was due: the ledger
            // knows its runs (and skips it under `skip`), so it is asked.
            let threshold = m.starting_deadline_ms.map_or(self.misfire_threshold, domain::job::misfire_threshold_of);
            if misfire::late_slot(Some(policy), late, threshold, m.retry_from, true) != Verdict::Fire {
                let late = LateSlot {
                    job_id: m.job_id,
                    scheduled_at: m.scheduled_at,
                    fire_id: m.fire_id,
                    due_at: m.due_at,
                    policy,
                    late_ms: late.num_milliseconds(),
                    ran_since_due: None,
                };
                return self.to(Stage::AskedLate, Command::SkipLate(late));
            }
        }
        self.on_time()
    }

    /// Goes on as a slot the misfire policy lets run.
    fn on_time(&mut self) -> Command {
        if self.arrival.waited {
            return self.to(Stage::AskedStillOpen, Command::CheckStillOpen { horizon: self.horizon });
        }
        self.start()
    }

    fn start_request(&self) -> StartRequest {
        let m = self.m;
        StartRequest {
            job_id: m.job_id,
            scheduled_at: m.scheduled_at,
            fire_id: m.fire_id,
            attempt: self.arrival.attempt as i32,
            redelivered: self.arrival.redelivered,
            due_at: m.due_at,
        }
    }

    fn start(&mut self) -> Command {
        // A pre-armed message takes its row at once (arming), so that the
        // burst at the due instant costs reads, not row writes.
        self.to(Stage::Starting, Command::Start(self.start_request()))
    }

    /// At the due instant: an armed row is verified still ours and wanted.
    fn due(&mut self) -> Command {
        if self.armed_early {
            let verify = VerifyRequest { row: self.start_request(), jobs_seen: self.jobs_seen };
            return self.to(Stage::Verifying, Command::Verify(verify));
        }
        self.overlap()
    }

    fn overlap(&mut self) -> Command {
        // A manual trigger is an operator's explicit run: no overlap policy.
        if !self.m.overlap.is_allow() && self.m.trigger != Trigger::Manual {
            return self.to(Stage::Overlap, Command::ApplyOverlap(self.start_request()));
        }
        self.gate()
    }

    fn gate(&mut self) -> Command {
        self.to(Stage::AtGate, Command::PassGate { horizon: self.horizon })
    }

    fn destination_wait(&self, waiting: &Waiting) -> DestinationWait {
        DestinationWait {
            slot: self.slot(),
            fire_id: self.m.fire_id,
            reason: waiting.reason.as_str(),
            destination: waiting.destination.clone(),
            since: waiting.since,
        }
    }

    /// Hands the slot back to wait in a delay queue as the same attempt:
    /// the row first (`retrying`, the attempt not counted), then the
    /// message. A failed publish requeues the original message, which then
    /// finds the row startable again.
    fn hand_back(&mut self, delay: Duration, waiting: Waiting, again: bool, now: DateTime<Utc>) -> Command {
        let Ok(delay_delta) = TimeDelta::from_std(delay) else {
            return self.settle(Settle::Requeue(REQUEUE_AFTER_FAILURE));
        };
        let hand_back = HandBack { wait: self.destination_wait(&waiting), back_at: now + delay_delta };
        self.to(Stage::HandingBack { delay, waiting, again }, Command::HandBack { hand_back, again })
    }

    /// Parks a slot that cannot go before its horizon, without making the
    /// attempt: to the failed queue (where a replay can take it once the
    /// host is back), then `failed` in the ledger.
    fn give_up(&mut self, waiting: Waiting) -> Command {
        let attempt = self.arrival.attempt;
        let error = format!(
            "not delivered: {} ({}) since {}, and still at the slot's retry horizon; attempt {attempt} was not made",
            waiting.reason.as_str(),
            waiting.destination,
            domain::execution::format_instant(waiting.since)
        );
        let give_up = GiveUp { wait: self.destination_wait(&waiting), error: error.clone() };
        self.to(Stage::PublishingGiveUp(Box::new(give_up)), Command::PublishFailed { attempts: attempt - 1, error })
    }

    fn delivered(&mut self, outcome: Outcome, sqs_message_id: Option<String>, now: DateTime<Utc>) -> Command {
        let (m, attempt) = (self.m, self.arrival.attempt);
        let done = |status, answer: Answer| FinishRequest {
            response_headers: answer.headers_json(),
            rule: answer.rule,
            ..FinishRequest::new(m, attempt, self.arrival.redelivered, status, answer.excerpt)
        };
        match outcome {
            Outcome::Accepted { http_status, answer } => {
                // The receiver took the work and reports later: the attempt
                // stays `running`, awaiting, until its report or deadline.
                let timeout_ms = m.completion.map_or(0, |c| c.timeout_ms);
                let deadline = now + TimeDelta::milliseconds(timeout_ms as i64);
                let rule = answer.rule.clone().unwrap_or_default();
                let outcome = FinishRequest {
                    http_status: Some(i32::from(http_status)),
                    awaiting_until: Some(deadline),
                    delete_job: false,
                    rule: Some(format!(
                        "{rule}; awaiting the receiver's report until {}",
                        domain::execution::format_instant(deadline)
                    )),
                    ..done(Status::Running, answer)
                };
                self.to(Stage::PublishingCheck(Box::new(outcome)), Command::PublishCompletionCheck { deadline })
            }
            Outcome::Success { http_status, answer } => {
                // Debug, not info: the ledger records every occurrence, and a
                // line per success at thousands of fires a second is a log
                // pipeline's load, not an operator's signal. Failures stay warn.
                tracing::debug!(execution.id = %m.execution_id, attempt, http_status, sqs_message_id = sqs_message_id.as_deref(), "delivered");
                let outcome = FinishRequest {
                    http_status: http_status.map(i32::from),
                    sqs_message_id,
                    ..done(Status::Succeeded, answer)
                };
                self.to(Stage::Finished, Command::Finish(outcome))
            }
            Outcome::Failure { error, answer } => {
                // The text may quote the target's URL: its credentials stay out
                // of the ledger, the failed queue's header and the logs.
                let error_text = domain::redact::text(&error.to_string());
                let retry_after = answer.retry_after;
                let mut outcome = FinishRequest {
                    http_status: error.http_status().map(i32::from),
                    error: Some(error_text.clone()),
                    ..done(Status::Failed, answer)
                };
                // The follow-up is published (and confirmed) before the outcome
                // is recorded and the message acked: a crash in between
                // redelivers the attempt rather than losing the retry.
                let next = retry::next_delay(
                    &self.policy,
                    self.budget_attempt,
                    error.retryable(),
                    retry_after,
                    &m.execution_id,
                );
                let retry_in_ms = next.as_ref().map(|n| n.delay_ms);
                let publish = match next {
                    Some(next) => {
                        outcome.status = Status::Retrying;
                        outcome.next_attempt_at = Some(now + TimeDelta::milliseconds(next.delay_ms as i64));
                        outcome.rule = Some(match outcome.rule.take() {
                            Some(rule) => format!("{rule}; {}", next.why),
                            None => next.why,
                        });
                        Command::PublishRetry { next_attempt: attempt + 1, delay_ms: next.delay_ms }
                    }
                    None => {
                        let why = if !error.retryable() {
                            "not retried: another attempt cannot help"
                        } else {
                            "no retry left: the retry policy's attempts are used up"
                        };
                        outcome.rule = Some(match outcome.rule.take() {
                            Some(rule) if !error.retryable() => rule,
                            Some(rule) => format!("{rule}; {why}"),
                            None => why.to_owned(),
                        });
                        Command::PublishFailed { attempts: attempt, error: error_text }
                    }
                };
                self.to(Stage::PublishingFollowUp(Box::new(outcome), retry_in_ms), publish)
            }
        }
    }

    /// Whether a start or verification lets the delivery go on; logs why not.
    fn go_on(&self, start: Start) -> bool {
        let (m, attempt) = (self.m, self.arrival.attempt);
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
            // A verification never answers it; a start's is decided before.
            Start::Busy(_) => false,
        }
    }

    /// Settles the message, first giving back a row this worker took and
    /// will not deliver, so the message's next worker need not wait until
    /// this one is presumed gone.
    fn settle(&mut self, settle: Settle) -> Command {
        if self.took_row && settle != Settle::Ack {
            self.took_row = false;
            return self.to(Stage::Releasing(settle), Command::Release { slot: self.slot(), fire_id: self.m.fire_id });
        }
        self.settled(settle)
    }

    fn settled(&mut self, settle: Settle) -> Command {
        self.to(Stage::Settled, Command::Settle(settle))
    }
}

/// A delivered slot's outcome on its way into the ledger. The callback has
/// been made: a failed write is tried again for a while rather than
/// handing the message back, which would deliver it a second time. Owns
/// what it needs, so the slot's message can be freed while it waits.
#[derive(Debug)]
pub(crate) struct Recording {
    outcome: FinishRequest,
    retry_for: Duration,
    releasing: bool,
    settled: bool,
}

impl Recording {
    pub(crate) fn new(outcome: FinishRequest, rules: &Rules) -> Self {
        Recording { outcome, retry_for: rules.outcome_retry_for, releasing: false, settled: false }
    }

    pub(crate) fn outcome(&self) -> &FinishRequest {
        &self.outcome
    }

    /// The next command, given the outcome write's answer.
    pub(crate) fn next(&mut self, event: Event) -> Command {
        if self.settled {
            tracing::error!(?event, "outcome event after the slot was decided");
            return Command::Settle(Settle::Requeue(REQUEUE_AFTER_FAILURE));
        }
        match event {
            // Either way nothing is left for this message.
            Event::Recorded if !self.releasing => self.settle(Settle::Ack),
            Event::RecordFailed { tried_for, next_try_in } if !self.releasing => {
                if tried_for + next_try_in >= self.retry_for {
                    self.releasing = true;
                    let o = &self.outcome;
                    Command::Release { slot: (o.job_id, o.scheduled_at, o.attempt), fire_id: o.fire_id }
                } else {
                    Command::Finish(self.outcome.clone())
                }
            }
            Event::Released if self.releasing => self.settle(Settle::Requeue(REQUEUE_AFTER_FAILURE)),
            event => {
                tracing::error!(?event, "unexpected outcome event");
                self.settle(Settle::Requeue(REQUEUE_AFTER_FAILURE))
            }
        }
    }

    fn settle(&mut self, settle: Settle) -> Command {
        self.settled = true;
        Command::Settle(settle)
    }
}

/// The slots of a message (a bundle) that go one after the other, by
/// index: a job's misfire catch-up slots, which the scheduler bundles
/// oldest first, so the receiver sees them in scheduled order (and each
/// one's overlap check reads the row of the one before). Every other slot
/// goes its own way at once.
pub(crate) fn runs(messages: &[FireMessage]) -> Vec<Vec<usize>> {
    let mut runs: Vec<Vec<usize>> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let catch_up_of_same_job = |run: &&mut Vec<usize>| {
            let first = &messages[run[0]];
            m.trigger == Trigger::Misfire && first.trigger == Trigger::Misfire && first.job_id == m.job_id
        };
        match runs.iter_mut().find(catch_up_of_same_job) {
            Some(run) => run.push(i),
            None => runs.push(vec![i]),
        }
    }
    runs
}

/// A job's last late `fire_once` slot this worker let run, and when (or
/// the run the ledger named when it skipped one).
pub(crate) type LateRun = Option<(DateTime<Utc>, DateTime<Utc>)>;

/// The run a late slot due at `due_at` is coalesced into, from this
/// worker's own record (its row may not show the run yet).
pub(crate) fn ran_since_due(last: LateRun, due_at: DateTime<Utc>) -> LateRun {
    last.filter(|(_, ran_at)| *ran_at >= due_at)
}

/// The job's last late run once the ledger decided its late slot
/// `scheduled_at` at `now`: the slot itself when it was let run, else the
/// run it was coalesced into if later than the one known.
pub(crate) fn late_run_after(
    last: LateRun,
    decision: LateDecision,
    scheduled_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> LateRun {
    match decision {
        LateDecision::Deliver => Some((scheduled_at, now)),
        LateDecision::Skipped { into: Some(into) } if last.is_none_or(|(_, ran_at)| ran_at < into.1) => Some(into),
        LateDecision::Skipped { .. } => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::job::{MisfirePolicy, Overlap, Target};
    use proptest::prelude::*;

    use crate::destination::WaitReason;

    const THRESHOLD_SECS: i64 = 30;

    fn rules() -> Rules {
        Rules {
            misfire_threshold: TimeDelta::seconds(THRESHOLD_SECS),
            retry_defaults: RetryPolicy {
                max_retries: 3,
                base_delay_ms: 1000,
                multiplier: 2.0,
                max_delay_ms: 60_000,
                jitter: Default::default(),
            },
            open_max: Duration::from_secs(60),
            outcome_retry_for: Duration::from_secs(30),
        }
    }

    fn t0() -> DateTime<Utc> {
        DateTime::UNIX_EPOCH + TimeDelta::days(20_000)
    }

    /// A slot's message and how it arrives.
    #[derive(Debug, Clone)]
    struct Scenario {
        attempt: u32,
        waited: bool,
        redelivered: bool,
        trigger: Trigger,
        misfire: Option<MisfirePolicy>,
        /// The job's own misfire threshold, when it has one.
        starting_deadline_ms: Option<u64>,
        retry_from: u32,
        forbid_overlap: bool,
        max_retries: Option<u32>,
        /// Milliseconds from the due instant to the arrival (negative: early).
        arrives_ms: i64,
        /// The environment's answers, consumed one per command.
        answers: Vec<u8>,
        /// The job's completion is async: a delivery may be answered 202.
        async_completion: bool,
        /// The arrival is the check at the deadline of an attempt awaiting
        /// its report (`due_at` is that deadline).
        completion_check: bool,
    }

    fn scenario() -> impl Strategy<Value = Scenario> {
        (
            (1u32..6, any::<bool>(), any::<bool>(), 0u8..3),
            (0u8..4, 0u32..3, any::<bool>(), proptest::option::of(0u32..4)),
            -20_000i64..90_000,
            proptest::collection::vec(any::<u8>(), 40),
            (any::<bool>(), 0u8..4, proptest::option::of(1_000u64..90_000)),
        )
            .prop_map(
                |(
                    (attempt, waited, redelivered, trigger),
                    (misfire, retry_from, forbid, max_retries),
                    arrives_ms,
                    answers,
                    (async_completion, check, starting_deadline_ms),
                )| {
                    // A check is one arrival in four of an async job's.
                    let completion_check = async_completion && check == 0;
                    Scenario {
                        attempt,
                        redelivered,
                        trigger: [Trigger::Schedule, Trigger::Misfire, Trigger::Manual][trigger as usize],
                        misfire: [
                            None,
                            Some(MisfirePolicy::Skip),
                            Some(MisfirePolicy::FireOnce),
                            Some(MisfirePolicy::FireAll),
                        ][misfire as usize],
                        starting_deadline_ms,
                        retry_from: retry_from.min(attempt - 1),
                        forbid_overlap: forbid,
                        max_retries,
                        // A check comes back from a delay queue early or on time,
                        // at most a whole queue's delay early.
                        arrives_ms: if completion_check { arrives_ms.min(0) * 40 } else { arrives_ms },
                        answers,
                        async_completion,
                        completion_check,
                        // A check is never a first arrival's: no misfire rule.
                        waited: waited && !completion_check,
                    }
                },
            )
    }

    fn target() -> Target {
        let target =
            serde_json::json!({"kind": "http", "url": "http://127.0.0.1:9/", "method": "POST", "timeout_ms": 1000});
        serde_json::from_value(target).unwrap()
    }

    fn message(s: &Scenario) -> FireMessage {
        let mut m = testing::fire_message(target(), t0());
        m.trigger = s.trigger;
        m.misfire = s.misfire;
        m.starting_deadline_ms = s.starting_deadline_ms;
        m.retry_from = s.retry_from;
        m.overlap = if s.forbid_overlap { Overlap::Forbid } else { Overlap::Allow };
        m.retry = s.max_retries.map(|max_retries| RetryPolicy { max_retries, ..rules().retry_defaults });
        m.completion = s
            .async_completion
            .then_some(domain::job::Completion { mode: domain::job::CompletionMode::Async, timeout_ms: 60_000 });
        m
    }

    fn waiting(now: DateTime<Utc>) -> Waiting {
        Waiting { destination: "127.0.0.1:9".into(), reason: WaitReason::CircuitOpen, since: now }
    }

    /// What happened to one slot, as the environment saw it.
    #[derive(Debug, Default)]
    struct Trace {
        settles: Vec<Settle>,
        delivered_at: Vec<DateTime<Utc>>,
        asked_late: Option<LateDecision>,
        started: Option<Start>,
        started_at: Option<DateTime<Utc>>,
        verified: Option<Start>,
        overlap: Option<bool>,
        gate_open: bool,
        failure_retryable: Option<bool>,
        retries_published: Vec<u32>,
        failed_published: Vec<u32>,
        /// Deadlines of the completion checks published.
        checks_published: Vec<DateTime<Utc>>,
        accepted: bool,
        /// Whether this arrival took the timeout of an awaiting attempt.
        expired: Option<bool>,
        follow_up_confirmed: bool,
        finishes: Vec<FinishRequest>,
        /// Ledger transitions that end this attempt here: an outcome, a
        /// hand-back, a give-up, a late skip.
        terminal: usize,
        recorded: bool,
        released: bool,
        stopped: bool,
        commands_after_settle: usize,
    }

    /// Runs the lifecycle of `s` against an environment answering from
    /// `s.answers`, to its settle.
    fn run(s: &Scenario) -> Trace {
        let m = message(s);
        let arrival = Arrival {
            attempt: s.attempt,
            redelivered: s.redelivered,
            waited: s.waited,
            completion_check: s.completion_check,
        };
        let rules = rules();
        let mut slot = Lifecycle::new(&m, arrival, &rules);
        let mut recording: Option<Recording> = None;
        let mut answers = s.answers.iter().copied().cycle();
        let mut pick = |n: u8| answers.next().unwrap() % n;
        let mut now = m.due_at + TimeDelta::milliseconds(s.arrives_ms);
        let mut trace = Trace::default();
        let mut event = Event::Arrived;
        let mut tried_for = Duration::ZERO;
        let mut woken_early = false;
        for _ in 0..200 {
            let command = match &mut recording {
                Some(r) => r.next(event),
                None => slot.next(event, now),
            };
            // Time only goes forward, a little each step.
            now += TimeDelta::milliseconds(i64::from(pick(50)));
            event = match command {
                Command::SkipLate(late) => {
                    assert_eq!(late.late_ms, s.arrives_ms);
                    let decision = if pick(2) == 0 {
                        trace.terminal += 1;
                        LateDecision::Skipped { into: None }
                    } else {
                        LateDecision::Deliver
                    };
                    trace.asked_late = Some(decision);
                    Event::LateDecided(decision)
                }
                Command::CheckStillOpen { .. } => match pick(2) {
                    0 => Event::StillOpen(None),
                    _ => Event::StillOpen(Some((Duration::from_secs(4), waiting(now)))),
                },
                Command::HandBack { .. } => match pick(4) {
                    0 => Event::Failed,
                    1 => Event::HandedBack(false),
                    _ => {
                        trace.terminal += 1;
                        Event::HandedBack(true)
                    }
                },
                Command::PublishWait { .. } => {
                    if pick(2) == 0 {
                        Event::Failed
                    } else {
                        Event::Published
                    }
                }
                Command::Pace => match pick(5) {
                    0 => Event::Stopping,
                    _ => Event::Paced,
                },
                Command::Start(request) => {
                    assert_eq!(request.attempt as u32, s.attempt);
                    let start = match pick(8) {
                        0 => None,
                        1 => Some(Start::Duplicate),
                        2 => Some(Start::Cancelled("paused")),
                        3 => Some(Start::Busy(Duration::from_millis(300))),
                        _ => Some(Start::Go),
                    };
                    match start {
                        Some(start) => {
                            trace.started = Some(start);
                            trace.started_at = Some(now);
                            Event::Started(start, JobsSeen(7))
                        }
                        None => Event::Failed,
                    }
                }
                Command::WaitUntilDue(at) => {
                    assert_eq!(at, m.due_at);
                    match pick(6) {
                        0 => Event::Stopping,
                        // Woken early (a timer's coarseness), once: still
                        // not delivered before it.
                        1 if !woken_early => {
                            woken_early = true;
                            Event::Due
                        }
                        _ => {
                            now = now.max(at);
                            Event::Due
                        }
                    }
                }
                Command::Verify(v) => {
                    assert_eq!(v.jobs_seen, JobsSeen(7));
                    assert!(trace.started_at.is_some_and(|at| at < m.due_at), "verified only when armed early");
                    let start = [Start::Go, Start::Go, Start::Duplicate, Start::Cancelled("deleted")][pick(4) as usize];
                    trace.verified = Some(start);
                    Event::Verified(start)
                }
                Command::ApplyOverlap(_) => {
                    assert_ne!(s.trigger, Trigger::Manual, "an operator's run has no overlap policy");
                    assert!(s.forbid_overlap);
                    match pick(3) {
                        0 => Event::Failed,
                        answer => {
                            trace.overlap = Some(answer == 1);
                            Event::Overlap(answer == 1)
                        }
                    }
                }
                Command::PassGate { .. } => {
                    now += TimeDelta::milliseconds(i64::from(pick(200)));
                    match pick(6) {
                        0 => Event::Stopping,
                        1 => Event::Gate(GateAnswer::Release { delay: Duration::from_secs(2), waiting: waiting(now) }),
                        2 => Event::Gate(GateAnswer::GiveUp(waiting(now))),
                        _ => {
                            trace.gate_open = true;
                            Event::Gate(GateAnswer::Open)
                        }
                    }
                }
                Command::Deliver => {
                    assert!(!s.completion_check, "a completion check never delivers");
                    trace.delivered_at.push(now);
                    match pick(if s.async_completion { 4 } else { 3 }) {
                        3 => {
                            trace.accepted = true;
                            let answer = Answer { excerpt: "accepted".into(), ..Default::default() };
                            Event::Delivered {
                                outcome: Outcome::Accepted { http_status: 202, answer },
                                sqs_message_id: None,
                            }
                        }
                        0 => Event::Delivered {
                            outcome: Outcome::Success {
                                http_status: Some(200),
                                answer: Answer { excerpt: "ok".into(), ..Default::default() },
                            },
                            sqs_message_id: None,
                        },
                        1 => {
                            trace.failure_retryable = Some(true);
                            let error =
                                DeliveryError::HttpStatus { status: reqwest::StatusCode::BAD_GATEWAY, retryable: true };
                            Event::Delivered { outcome: Outcome::failure(error), sqs_message_id: None }
                        }
                        _ => {
                            trace.failure_retryable = Some(false);
                            let error = DeliveryError::InvalidTarget("no".into());
                            Event::Delivered { outcome: Outcome::failure(error), sqs_message_id: None }
                        }
                    }
                }
                Command::PublishRetry { next_attempt, .. } => {
                    trace.retries_published.push(next_attempt);
                    if pick(4) == 0 {
                        Event::Failed
                    } else {
                        trace.follow_up_confirmed = true;
                        Event::Published
                    }
                }
                Command::PublishCompletionCheck { deadline } => {
                    trace.checks_published.push(deadline);
                    if pick(4) == 0 {
                        Event::Failed
                    } else {
                        trace.follow_up_confirmed = true;
                        Event::Published
                    }
                }
                Command::ExpireAwaiting { slot: expired, fire_id } => {
                    assert!(s.completion_check, "only a completion check times an attempt out");
                    assert!(now >= m.due_at, "timed out at {now}, before its deadline {}", m.due_at);
                    assert_eq!((expired, fire_id), (slot.slot(), m.fire_id));
                    match pick(3) {
                        0 => Event::Failed,
                        answer => {
                            trace.expired = Some(answer == 1);
                            if answer == 1 {
                                trace.failure_retryable = Some(true);
                            }
                            Event::Expired(answer == 1)
                        }
                    }
                }
                Command::PublishFailed { attempts, .. } => {
                    trace.failed_published.push(attempts);
                    if pick(4) == 0 {
                        Event::Failed
                    } else {
                        trace.follow_up_confirmed = true;
                        Event::Published
                    }
                }
                Command::GiveUp(give_up) => {
                    assert_eq!(give_up.wait.slot.2 as u32, s.attempt);
                    match pick(3) {
                        0 => Event::Failed,
                        _ => {
                            trace.terminal += 1;
                            Event::GaveUp
                        }
                    }
                }
                Command::Finish(outcome) => {
                    if trace.finishes.is_empty() {
                        trace.terminal += 1;
                        recording = Some(Recording::new(outcome.clone(), &rules));
                    }
                    trace.finishes.push(outcome);
                    match pick(3) {
                        0 => {
                            let next_try_in = Duration::from_secs(u64::from(pick(8)));
                            tried_for += next_try_in;
                            Event::RecordFailed { tried_for, next_try_in }
                        }
                        _ => {
                            trace.recorded = true;
                            Event::Recorded
                        }
                    }
                }
                Command::Release { slot: released, .. } => {
                    assert_eq!(released, slot.slot());
                    trace.released = true;
                    Event::Released
                }
                Command::Settle(settle) => {
                    trace.settles.push(settle);
                    // Nothing more may happen: a stray event only requeues.
                    let stray = match &mut recording {
                        Some(r) => r.next(Event::Paced),
                        None => slot.next(Event::Paced, now),
                    };
                    if !matches!(stray, Command::Settle(Settle::Requeue(_))) {
                        trace.commands_after_settle += 1;
                    }
                    return trace;
                }
            };
            if matches!(event, Event::Stopping) {
                trace.stopped = true;
            }
        }
        trace
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        #[test]
        fn every_arrival_settles_once_and_keeps_the_delivery_rules(s in scenario()) {
            let trace = run(&s);
            let m = message(&s);
            // Exactly one settle, nothing after it; never a reject (a slot's
            // message was readable).
            prop_assert_eq!(trace.settles.len(), 1, "{:?}", trace);
            prop_assert_eq!(trace.commands_after_settle, 0);
            let settle = trace.settles[0];
            prop_assert_ne!(settle, Settle::Reject);
            // At most one ledger transition ends the attempt here, and a
            // retried outcome write is the same outcome.
            prop_assert!(trace.terminal <= 1, "{:?}", trace);
            let same_outcome = trace.finishes.windows(2).all(|w| format!("{:?}", w[0]) == format!("{:?}", w[1]));
            prop_assert!(same_outcome, "{:?}", trace.finishes);

            // Delivered at most once, never before its due instant, and
            // only with every answer on the way saying so.
            prop_assert!(trace.delivered_at.len() <= 1);
            if let Some(at) = trace.delivered_at.first() {
                prop_assert!(*at >= m.due_at, "delivered at {} before due {}", at, m.due_at);
                prop_assert_eq!(trace.started, Some(Start::Go));
                prop_assert!(trace.gate_open);
                prop_assert!(trace.asked_late.is_none_or(|d| d == LateDecision::Deliver));
                prop_assert!(trace.verified.is_none_or(|v| v == Start::Go));
                prop_assert!(trace.overlap != Some(false));
                let armed_early = trace.started_at.is_some_and(|at| at < m.due_at);
                prop_assert_eq!(trace.verified.is_some(), armed_early, "an armed row is verified at its due instant");
                let overlap_applies = s.forbid_overlap && s.trigger != Trigger::Manual;
                prop_assert_eq!(trace.overlap.is_some(), overlap_applies);
            }

            // A late first attempt of a scheduled slot under skip/fire_once is
            // asked of the ledger before anything else, and delivered only if
            // the ledger lets it; no other slot is asked.
            // Late by the job's own deadline when it has one, else the cluster's.
            let threshold_ms = s.starting_deadline_ms.map_or(THRESHOLD_SECS * 1000, |ms| ms as i64);
            let late = s.arrives_ms > threshold_ms;
            let may_skip = matches!(s.misfire, Some(MisfirePolicy::Skip | MisfirePolicy::FireOnce));
            let misfire_rule_applies = s.attempt == 1 && !s.waited && s.retry_from == 0 && may_skip && late;
            prop_assert_eq!(trace.asked_late.is_some(), misfire_rule_applies, "{:?}", trace);
            if trace.asked_late.is_some_and(|d| d != LateDecision::Deliver) {
                prop_assert!(trace.started.is_none() && trace.delivered_at.is_empty());
                prop_assert_eq!(settle, Settle::Ack);
            }

            // A failure is retried only when retryable and within the
            // budget (a replay's counted from its first attempt); otherwise
            // parked in the failed queue with the attempts made.
            if let Some(retryable) = trace.failure_retryable {
                let max_retries = s.max_retries.unwrap_or(rules().retry_defaults.max_retries);
                let budget_attempt = (s.attempt - s.retry_from).max(1);
                let retry = retryable && budget_attempt - 1 < max_retries;
                if retry {
                    prop_assert_eq!(&trace.retries_published, &vec![s.attempt + 1]);
                    prop_assert!(trace.failed_published.is_empty());
                } else {
                    prop_assert_eq!(&trace.failed_published, &vec![s.attempt]);
                    prop_assert!(trace.retries_published.is_empty());
                }
                // The outcome is written only once its follow-up is confirmed.
                if let Some(outcome) = trace.finishes.first() {
                    prop_assert!(trace.follow_up_confirmed);
                    let status = if retry { Status::Retrying } else { Status::Failed };
                    prop_assert_eq!(outcome.status, status);
                    prop_assert_eq!(outcome.next_attempt_at.is_some(), retry);
                }
            } else if !trace.delivered_at.is_empty() {
                prop_assert!(trace.retries_published.is_empty());
                if let Some(outcome) = trace.finishes.first() {
                    // A 202 of an async job leaves the attempt running,
                    // awaiting its report, once the check that times it out
                    // is confirmed; any other answer here is a success.
                    if trace.accepted {
                        prop_assert!(trace.follow_up_confirmed);
                        prop_assert_eq!(outcome.status, Status::Running);
                        prop_assert_eq!(outcome.awaiting_until, trace.checks_published.first().copied());
                    } else {
                        prop_assert_eq!(outcome.status, Status::Succeeded);
                        prop_assert!(outcome.awaiting_until.is_none());
                    }
                }
            }
            if !s.completion_check {
                prop_assert_eq!(trace.accepted, !trace.checks_published.is_empty(), "{:?}", trace);
            }
            if let Some(outcome) = trace.finishes.first() {
                prop_assert_eq!(outcome.attempt as u32, s.attempt);
                let ended = trace.delivered_at.len() + usize::from(trace.expired == Some(true));
                prop_assert_eq!(ended, 1, "an outcome only for a delivery or a timed-out report");
            }

            // A completion check delivers nothing: far from its deadline it
            // goes round again; at it, it fails the attempt only if it took
            // the timeout (the report did not come first).
            if s.completion_check {
                prop_assert!(trace.started.is_none() && trace.delivered_at.is_empty());
                let far = m.due_at - (m.due_at + TimeDelta::milliseconds(s.arrives_ms)) > CHECK_HOLD_AT_MOST;
                if far {
                    prop_assert_eq!(&trace.checks_published, &vec![m.due_at]);
                    prop_assert!(trace.expired.is_none());
                }
                if trace.expired == Some(false) {
                    prop_assert!(trace.finishes.is_empty());
                    prop_assert_eq!(settle, Settle::Ack);
                }
            }

            // Acked after a delivery only once its outcome was recorded; a
            // row taken and not finished is given back before a requeue.
            if !trace.delivered_at.is_empty() && settle == Settle::Ack {
                prop_assert!(trace.recorded, "{:?}", trace);
            }
            let took_row = trace.started == Some(Start::Go) || trace.expired == Some(true);
            if took_row && settle != Settle::Ack {
                prop_assert!(trace.released, "{:?}", trace);
            }
            prop_assert!(!trace.released || took_row, "only a row this worker took is given back");
            if trace.stopped {
                prop_assert_eq!(settle, Settle::Requeue(Duration::ZERO));
            }
            if let Some(Start::Busy(wait)) = trace.started {
                prop_assert_eq!(settle, Settle::Requeue(wait));
            }
        }
    }

    #[test]
    fn a_message_settles_as_its_most_cautious_slot() {
        let requeue = |ms| Settle::Requeue(Duration::from_millis(ms));
        assert_eq!(Settle::Ack.and(Settle::Ack), Settle::Ack);
        assert_eq!(Settle::Ack.and(requeue(5)), requeue(5));
        assert_eq!(requeue(5).and(requeue(9)), requeue(9));
        assert_eq!(requeue(5).and(Settle::Reject), Settle::Reject);
    }

    #[test]
    fn a_jobs_catch_up_slots_form_one_run_in_order() {
        let mut a1 = testing::fire_message(target(), t0());
        a1.trigger = Trigger::Misfire;
        let mut a2 = a1.clone();
        a2.scheduled_at += TimeDelta::seconds(1);
        let b = testing::fire_message(target(), t0());
        let mut a_live = a1.clone();
        a_live.trigger = Trigger::Schedule;
        assert_eq!(runs(&[a1, b, a2, a_live]), vec![vec![0, 2], vec![1], vec![3]]);
    }

    #[test]
    fn a_jobs_last_late_run_moves_forward_only() {
        let at = |s| t0() + TimeDelta::seconds(s);
        assert_eq!(late_run_after(None, LateDecision::Deliver, at(1), at(50)), Some((at(1), at(50))));
        let known = Some((at(1), at(50)));
        let older = LateDecision::Skipped { into: Some((at(0), at(40))) };
        assert_eq!(late_run_after(known, older, at(2), at(60)), known);
        let newer = LateDecision::Skipped { into: Some((at(3), at(70))) };
        assert_eq!(late_run_after(known, newer, at(2), at(80)), Some((at(3), at(70))));
        assert_eq!(ran_since_due(known, at(50)), known);
        assert_eq!(ran_since_due(known, at(51)), None);
    }
}
