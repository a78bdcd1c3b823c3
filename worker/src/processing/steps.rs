//! The steps of a slot's way that take more than one call: each performs
//! what the slot's lifecycle asked and reports back what the lifecycle
//! needs.

use std::time::Duration;

use domain::job::MisfirePolicy;
use domain::message::FireMessage;
use domain::slot::Status;
use store::ledger::delivery::{self as ledger, HeldSlot, LateDecision, LateSlot, OverlapDecision, StartRequest};

use super::{Shared, timed};
use crate::destination::Waiting;
use crate::lifecycle;

impl Shared {
    /// Asks the ledger to skip a late slot by its job's misfire policy (the
    /// workers are behind: overload, or a backlog after an outage). The
    /// same rule as the scheduler's for an outage's slots
    /// (`domain::misfire`), so how late a slot may start does not depend on
    /// where it waited; and a skip costs one row write instead of a
    /// delivery and two, which helps a backlog drain where the workers or
    /// receivers, not Postgres, are the limit.
    pub(super) async fn skip_late(&self, m: &FireMessage, mut late: LateSlot) -> anyhow::Result<LateDecision> {
        let (policy, late_ms) = (late.policy, late.late_ms);
        // A job's late fire_once slots are decided one at a time here: a
        // backlog brings them together, and each must see whether the one
        // before was let run (its row may not say so yet).
        let job_runs = (policy == MisfirePolicy::FireOnce).then(|| self.late_runs.of(m.job_id));
        let mut last_run = match &job_runs {
            Some(cell) => Some(cell.clone().lock_owned().await),
            None => None,
        };
        late.ran_since_due = lifecycle::ran_since_due(last_run.as_deref().copied().flatten(), m.due_at);
        let decision = timed("late_skip", self.late_skips.call(late)).await?;
        if let Some(last_run) = last_run.as_deref_mut() {
            *last_run = lifecycle::late_run_after(*last_run, decision, m.scheduled_at, runtime::clock::now());
        }
        drop(last_run);
        if decision == LateDecision::Deliver {
            return Ok(decision);
        }
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
        Ok(decision)
    }

    /// Says on the held row that its delivery waits for its destination.
    /// A failed write does not stop the wait: the row is only less telling.
    pub(super) async fn note_waiting(&self, m: &FireMessage, slot: HeldSlot, waiting: Waiting) {
        let wait = ledger::DestinationWait {
            slot,
            fire_id: m.fire_id,
            reason: waiting.reason.as_str(),
            destination: waiting.destination.clone(),
            since: waiting.since,
        };
        match timed("note_waiting", self.notes.call(wait)).await {
            Ok(_) => {
                tracing::debug!(execution.id = %m.execution_id, destination = %waiting.destination, reason = waiting.reason.as_str(), "delivery waits for its destination")
            }
            Err(e) => {
                tracing::warn!(execution.id = %m.execution_id, error = %format!("{e:#}"), "recording the wait in the ledger failed")
            }
        }
    }

    /// A slot handed back to wait for its destination is on its way back.
    pub(super) fn handed_back(&self, m: &FireMessage, attempt: u32, delay: Duration, waiting: &Waiting, again: bool) {
        self.deliverers.destinations.released(waiting);
        let back_in_ms = delay.as_millis() as u64;
        if again {
            metrics::counter!(runtime::metrics::WORKER_WAITED_AGAIN_TOTAL).increment(1);
            tracing::debug!(execution.id = %m.execution_id, attempt, destination = %waiting.destination, back_in_ms, "back while its destination's circuit is still open; waits again");
        } else {
            tracing::debug!(execution.id = %m.execution_id, attempt, destination = %waiting.destination, reason = waiting.reason.as_str(), back_in_ms, "handed back to wait for its destination; the attempt is not counted");
        }
    }

    /// Applies the job's overlap policy at the due instant; false when the
    /// slot was skipped instead of delivered.
    pub(super) async fn overlap_lets_run(&self, m: &FireMessage, request: &StartRequest) -> anyhow::Result<bool> {
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

    /// Gives a `running` row of this worker back at once, so the message's
    /// next worker need not wait until this one is presumed gone (the
    /// orphan check covers a failure here).
    pub(super) async fn give_back(&self, slot: HeldSlot, fire_id: uuid::Uuid, execution_id: &str) {
        if let Err(e) = Box::pin(ledger::release(&self.pg, &self.config.worker_id, slot, fire_id)).await {
            tracing::warn!(execution.id = %execution_id, error = %format!("{e:#}"), "giving the row back failed; the orphan check will")
        }
    }
}
