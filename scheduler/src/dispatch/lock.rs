//! The first step of a batch: one pipelined `SET lock NX PX` per slot on a
//! Redis shard, so that of a job's two owners only one goes on to the
//! database for each slot.

use std::time::Duration;

use super::{Dispatcher, Slot};

/// The longest a batch waits for its locks. The lock only saves work (the
/// ledger's claim never lets a slot be taken twice): a losing claim costs
/// the database tens of microseconds a slot, while waiting on a slow Redis
/// holds every slot of the batch back and makes the node's measured pace,
/// and so its lookahead, what the slow link allows. A node whose Redis links
/// had 500 ms added each way spent 2 s a batch on connection timeouts, its
/// lookahead went to its 30 s maximum, and the slots it then claimed all at
/// once when the latency ended came seconds late. A pipelined batch of
/// 1,000 locks takes a few milliseconds on loopback; a tenth of the minimum
/// lead (2 s) leaves the rest of the lead for claiming and publishing.
const LOCK_BOUND: Duration = Duration::from_millis(200);

impl Dispatcher {
    /// `true` = this node may claim the slot. Tries the shards in order; if
    /// none answers within `LOCK_BOUND` every slot counts as won and the
    /// ledger's claim decides (it never lets a slot be taken twice, the lock
    /// only saves work). A lock set after the bound still keeps the other
    /// owner off the slot, which this node then claims.
    pub(super) async fn lock(&self, slots: &[Slot]) -> Vec<bool> {
        match tokio::time::timeout(LOCK_BOUND, self.lock_on_a_shard(slots)).await {
            Ok(Some(won)) => won,
            Ok(None) => {
                tracing::warn!("no Redis shard reachable for locks; the ledger claim decides");
                vec![true; slots.len()]
            }
            Err(_) => {
                metrics::counter!(common::metrics::SCHEDULER_LOCKS_TIMED_OUT_TOTAL).increment(1);
                // A slow link makes every batch say so: once in a while.
                if let Some(batches) = self.lock_timeouts.add() {
                    tracing::warn!(
                        batches,
                        bound_ms = LOCK_BOUND.as_millis() as u64,
                        "Redis locks slower than their bound; the ledger claim decides"
                    );
                }
                vec![true; slots.len()]
            }
        }
    }

    async fn lock_on_a_shard(&self, slots: &[Slot]) -> Option<Vec<bool>> {
        let ttl_ms = self.config.lock_ttl.as_millis() as u64;
        for shard in &self.redis {
            let result: anyhow::Result<Vec<bool>> = async {
                let mut conn = shard.get().await?;
                let mut pipe = redis::pipe();
                for s in slots {
                    pipe.cmd("SET")
                        .arg(self.config.keys.lock(s.job_id, s.job_version, s.scheduled_at))
                        .arg(&self.config.node_id)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl_ms);
                }
                let replies: Vec<Option<String>> = pipe.query_async(&mut *conn).await?;
                Ok(replies.into_iter().map(|r| r.is_some()).collect())
            }
            .await;
            match result {
                Ok(won) => return Some(won),
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "Redis lock failed on a shard; trying the next"),
            }
        }
        None
    }
}
