//! The first step of a batch: one pipelined `SET lock NX PX` per slot on a
//! Redis shard, so that of a job's two owners only one goes on to the
//! database for each slot.

use super::{Dispatcher, Slot};

impl Dispatcher {
    /// `true` = this node may claim the slot. Tries the shards in order; if
    /// none answers every slot counts as won and the ledger's claim decides
    /// (it never lets a slot be taken twice, the lock only saves work).
    pub(super) async fn lock(&self, slots: &[Slot]) -> Vec<bool> {
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
                Ok(won) => return won,
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "Redis lock failed on a shard; trying the next"),
            }
        }
        tracing::warn!("no Redis shard reachable for locks; the ledger claim decides");
        vec![true; slots.len()]
    }
}
