//! The sweeps each scheduler runs every `outbox_grace`: they find ledger
//! rows no process is going to move and move them on (the statements are
//! the ledger's; this counts and logs what they moved). Any count of
//! stranded rows is a finding: the operations guide names the alert.

use tokio_util::sync::CancellationToken;

use common::job::JobSpec;
use common::ledger::sweep;

use super::{Dispatcher, UNRETAKEN_GRACE, UNRETAKEN_LOOKBACK};

impl Dispatcher {
    /// Republishes claimed rows whose publish was never confirmed.
    pub async fn sweep_outbox(&mut self) -> anyhow::Result<usize> {
        let messages = sweep::republish_unconfirmed(&self.pg, &mut self.publisher, self.config.outbox_grace).await?;
        if !messages.is_empty() {
            tracing::warn!(messages = messages.len(), "republished claimed rows that had no confirmed publish");
            metrics::counter!(common::metrics::OUTBOX_REPUBLISHED_TOTAL).increment(messages.len() as u64);
        }
        Ok(messages.len())
    }

    /// Delivers again rows left `running` by a worker that is gone.
    pub async fn recover_running(&mut self) -> anyhow::Result<usize> {
        let messages = sweep::recover_running(&self.pg, &mut self.publisher, self.config.running_grace).await?;
        if !messages.is_empty() {
            tracing::warn!(rows = messages.len(), "recovered rows stuck in running");
            metrics::counter!(common::metrics::RUNNING_RECOVERED_TOTAL).increment(messages.len() as u64);
        }
        Ok(messages.len())
    }

    /// Moves on `pending` and `retrying` rows nothing is going to move,
    /// counted in `cronshard_ledger_stranded_total{status}`.
    pub async fn sweep_stranded(&mut self) -> anyhow::Result<usize> {
        let moved = sweep::move_on_stranded(&self.pg, &mut self.publisher, self.config.stranded_after).await?;
        for (status, _) in &moved {
            metrics::counter!(common::metrics::LEDGER_STRANDED_TOTAL, "status" => status.as_str()).increment(1);
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
            metrics::counter!(common::metrics::LEDGER_STRANDED_TOTAL, "status" => common::ledger::Status::Skipped.as_str())
                .increment(claimed.len() as u64);
            let examples: Vec<&str> = claimed.iter().take(5).map(|(m, _)| m.execution_id.as_str()).collect();
            tracing::warn!(slots = claimed.len(), ?examples, "re-took slots a change had cancelled and nobody re-took");
        }
        let n = claimed.len();
        self.publish(claimed, &CancellationToken::new()).await;
        Ok(n)
    }
}
