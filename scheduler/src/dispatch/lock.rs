//! The first step of a batch: one pipelined `SET lock NX PX` per slot on a
//! Redis shard, so that of a job's two owners only one goes on to the
//! database for each slot. The loser deletes the lock: both owners have
//! raced.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Dispatcher, RedisPool, Slot};

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

/// How long a slot's lock outlives the slot's due instant. The other owner
/// races for the lock when it hands the slot to its dispatcher, its
/// lookahead (2–30 s) before the due instant; after it only when its
/// dispatcher is that far behind. The lock must still be there then: a
/// lock gone costs that owner one conflicting claim in the ledger (never a
/// second fire, the claim decides). Once the other owner has raced (and
/// lost) the lock is deleted, so this is the life of a lock whose second
/// owner never came (it is down, or this node is the job's only one).
pub const LOCK_HOLD_PAST_DUE: Duration = Duration::from_secs(10);

/// The lock of a slot due at `scheduled_at`, set at `now`, lives until
/// `LOCK_HOLD_PAST_DUE` after the due instant (a slot already due: that
/// long from now). A jittered slot is handed over after its slot time, so
/// its lock lives `LOCK_HOLD_PAST_DUE` from the race: both owners race at
/// their lookahead before the same delivery instant, seconds apart.
pub fn lock_ttl(scheduled_at: DateTime<Utc>, now: DateTime<Utc>) -> Duration {
    (scheduled_at - now).to_std().unwrap_or_default() + LOCK_HOLD_PAST_DUE
}

impl Dispatcher {
    /// `true` = this node may claim the slot. Tries the shards in order,
    /// each for its share of `LOCK_BOUND`, so a shard that hangs (rather
    /// than refusing at once) leaves the next one time to decide the races.
    /// If none answers, every slot counts as won and the ledger's claim
    /// decides (it never lets a slot be taken twice, the lock only saves
    /// work). A lock set after its share still keeps the other owner off the
    /// slot, which this node then claims.
    pub(super) async fn lock(&self, slots: &[Slot]) -> Vec<bool> {
        let share = LOCK_BOUND / self.redis.len().max(1) as u32;
        let now = runtime::clock::now();
        let mut timed_out = 0;
        let mut won = None;
        for shard in &self.redis {
            match tokio::time::timeout(share, self.lock_on(shard, slots, now)).await {
                Ok(Ok(answer)) => {
                    won = Some(answer);
                    break;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %format!("{e:#}"), "Redis lock failed on a shard; trying the next")
                }
                Err(_) => timed_out += 1,
            }
        }
        if timed_out > 0 {
            if won.is_none() {
                metrics::counter!(runtime::metrics::SCHEDULER_LOCKS_TIMED_OUT_TOTAL).increment(1);
            }
            // A slow link makes every batch say so: once in a while.
            if let Some(batches) = self.lock_timeouts.add() {
                tracing::warn!(
                    batches,
                    share_ms = share.as_millis() as u64,
                    decided_by = if won.is_some() { "a later shard" } else { "the ledger claim" },
                    "a Redis shard did not answer the locks within its share of the bound"
                );
            }
        } else if won.is_none() {
            tracing::warn!("no Redis shard reachable for locks; the ledger claim decides");
        }
        won.unwrap_or_else(|| vec![true; slots.len()])
    }

    async fn lock_on(&self, shard: &RedisPool, slots: &[Slot], now: DateTime<Utc>) -> anyhow::Result<Vec<bool>> {
        let keys: Vec<String> =
            slots.iter().map(|s| self.config.keys.lock(s.job_id, s.job_version, s.scheduled_at)).collect();
        let mut conn = shard.get().await?;
        let mut pipe = redis::pipe();
        for (s, key) in slots.iter().zip(&keys) {
            pipe.cmd("SET")
                .arg(key)
                .arg(&self.config.node_id)
                .arg("NX")
                .arg("PX")
                .arg(lock_ttl(s.scheduled_at, now).as_millis() as u64);
        }
        let replies: Vec<Option<String>> = pipe.query_async(&mut *conn).await?;
        let won: Vec<bool> = replies.iter().map(Option::is_some).collect();
        let raced_by_both: Vec<String> = keys.into_iter().zip(&won).filter(|(_, won)| !**won).map(|(k, _)| k).collect();
        if !raced_by_both.is_empty() {
            tokio::spawn(release_raced_locks(shard.clone(), raced_by_both));
        }
        Ok(won)
    }
}

/// Deletes the locks of slots this node lost: a slot has two owners, and
/// the loser races second, so once it has lost no owner will ask again (the
/// loser checks the slot in the ledger, never the lock). Left to expire, a
/// lock would keep Redis at fire rate × (lead + `LOCK_HOLD_PAST_DUE`);
/// deleted, only the locks between the two owners' races stay, and Redis
/// keeps its size whatever the rate. A lock deleted too early (a third
/// racer after ownership moved, this node racing again after a restart)
/// only lets a claim reach the ledger, which never takes a slot twice. Not
/// awaited: the batch goes on to its claims, and a lock not deleted expires
/// as before.
async fn release_raced_locks(shard: RedisPool, keys: Vec<String>) {
    let deleted = async {
        let mut conn = shard.get().await?;
        redis::cmd("DEL").arg(&keys).query_async::<i64>(&mut *conn).await?;
        anyhow::Ok(())
    };
    if let Err(e) = deleted.await {
        tracing::debug!(error = %format!("{e:#}"), locks = keys.len(), "deleting lost races' locks failed; they expire");
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    #[test]
    fn a_lock_lives_until_the_hold_past_its_slots_due_instant() {
        let now = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_000);
        let ahead = lock_ttl(now + TimeDelta::milliseconds(2_500), now);
        assert_eq!(ahead, Duration::from_millis(2_500) + LOCK_HOLD_PAST_DUE);
        assert_eq!(
            lock_ttl(now - TimeDelta::seconds(90), now),
            LOCK_HOLD_PAST_DUE,
            "a slot already due: the hold from now"
        );
    }
}
