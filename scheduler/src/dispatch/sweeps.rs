//! The sweeps each scheduler runs every `outbox_grace`: they find ledger
//! rows no process is going to move and move them on (the statements are
//! the ledger's; this counts and logs what they moved). Any count of
//! stranded rows is a finding: the operations guide names the alert.

use std::time::Duration;

use chrono::TimeDelta;
use tokio_util::sync::CancellationToken;

use domain::job::JobSpec;
use store::ledger::sweep;

use super::{Dispatcher, UNRETAKEN_GRACE, UNRETAKEN_LOOKBACK};

/// The queues count as caught up when no more than this many messages in
/// them wait for a worker (a message carries up to 25 slots: well under a
/// second of one worker's intake).
const CAUGHT_UP_READY: u64 = 50;
/// A message back in a queue at some instant had reached a worker by a
/// count this much later that found the queues caught up: the time a
/// message takes from its delay queue into the queue it waits in, and a
/// worker from taking it to writing its row.
const CAUGHT_UP_MARGIN: Duration = Duration::from_secs(10);

impl Dispatcher {
    /// Republishes claimed rows whose publish was never confirmed.
    pub async fn sweep_outbox(&mut self) -> anyhow::Result<usize> {
        let messages =
            broker::outbox::republish_unconfirmed(&self.pg, &mut self.publisher, self.config.outbox_grace).await?;
        if !messages.is_empty() {
            tracing::warn!(messages = messages.len(), "republished claimed rows that had no confirmed publish");
            metrics::counter!(runtime::metrics::OUTBOX_REPUBLISHED_TOTAL).increment(messages.len() as u64);
        }
        Ok(messages.len())
    }

    /// Delivers again rows left `running` by a worker that is gone.
    pub async fn recover_running(&mut self) -> anyhow::Result<usize> {
        let messages =
            broker::outbox::recover_running(&self.pg, &mut self.publisher, self.config.running_grace).await?;
        if !messages.is_empty() {
            tracing::warn!(rows = messages.len(), "recovered rows stuck in running");
            metrics::counter!(runtime::metrics::RUNNING_RECOVERED_TOTAL).increment(messages.len() as u64);
        }
        Ok(messages.len())
    }

    /// Moves on `pending` and `retrying` rows nothing is going to move,
    /// counted in `cronshard_ledger_stranded_total{status}`.
    ///
    /// A row's message may be late without being lost: behind a backlog in
    /// the main queue (overload, a herd), or in the waiting queue when a
    /// host's whole backlog comes back at once. Judged by age alone, every
    /// such row was republished (10,000–16,000 after each 10-minute
    /// receiver outage), doubling the backlog it was stuck in and raising
    /// the stranded alert for nothing. So a row counts as stranded only
    /// when it is `stranded_after` past due AND the queues were counted
    /// caught up at least `CAUGHT_UP_MARGIN` after it was due: by then its
    /// message, had it been in a queue, would have reached a worker. A lost
    /// message is thus moved on `stranded_after` after its due instant, or
    /// once the queues catch up, whichever is later. Until the first count
    /// (a node just started, the broker unreachable) nothing is judged.
    pub async fn sweep_stranded(&mut self) -> anyhow::Result<usize> {
        let counted_at = runtime::clock::now();
        match self.publisher.ready_messages().await {
            Ok(ready) => {
                metrics::gauge!(runtime::metrics::BROKER_READY_MESSAGES).set(ready as f64);
                if ready <= CAUGHT_UP_READY {
                    self.queues_caught_up_at = Some(counted_at);
                }
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "counting the queues' ready messages failed"),
        }
        let Some(caught_up_at) = self.queues_caught_up_at else { return Ok(0) };
        let cutoff = (counted_at - TimeDelta::from_std(self.config.stranded_after)?)
            .min(caught_up_at - TimeDelta::from_std(CAUGHT_UP_MARGIN)?);
        let moved = broker::outbox::move_on_stranded(&self.pg, &mut self.publisher, cutoff).await?;
        for (status, _) in &moved {
            metrics::counter!(runtime::metrics::LEDGER_STRANDED_TOTAL, "status" => status.as_str()).increment(1);
        }
        if !moved.is_empty() {
            let examples: Vec<&str> = moved.iter().take(5).map(|(_, m)| m.execution_id.as_str()).collect();
            tracing::warn!(
                rows = moved.len(),
                ?examples,
                "moved on stranded ledger rows (nothing was going to move them)"
            );
        }
        Ok(moved.len())
    }

    /// Re-takes slots that a change cancelled and nobody re-took: normally
    /// the owners' claims re-take such a row within a second (see
    /// `wait_for_older_versions`); this catches what they did not. Counted
    /// as stranded (`status="skipped"`). A row whose version in force does
    /// not fire at its slot is marked decided for that version, so that it
    /// is not read again.
    pub async fn sweep_unretaken(&mut self) -> anyhow::Result<usize> {
        let client = self.pg.get().await?;
        let found = sweep::unretaken(&client, UNRETAKEN_GRACE, UNRETAKEN_LOOKBACK).await?;
        let (mut slots, mut decided) = (Vec::new(), Vec::new());
        for row in found {
            let fires = row.runs_left
                && serde_json::from_value::<JobSpec>(row.spec)
                    .ok()
                    .and_then(|spec| spec.compile(row.job_created_at).ok())
                    .is_some_and(|schedule| schedule.fires_at(row.slot.scheduled_at));
            if fires { slots.push(row.slot) } else { decided.push(row.slot) }
        }
        sweep::decided_for_version(&client, &decided).await?;
        drop(client);
        let claimed = self.claim(&slots).await?;
        if !claimed.is_empty() {
            metrics::counter!(runtime::metrics::LEDGER_STRANDED_TOTAL, "status" => domain::slot::Status::Skipped.as_str())
                .increment(claimed.len() as u64);
            let examples: Vec<&str> = claimed.iter().take(5).map(|(m, _)| m.execution_id.as_str()).collect();
            tracing::warn!(slots = claimed.len(), ?examples, "re-took slots a change had cancelled and nobody re-took");
        }
        let n = claimed.len();
        self.publish(claimed, &CancellationToken::new()).await;
        Ok(n)
    }
}
