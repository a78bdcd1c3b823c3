//! Cluster membership through Redis heartbeats.
//!
//! Each node writes `{cluster}:node:{id}` with a 30 s TTL to every reachable
//! shard and refreshes it every `heartbeat_interval` (well inside the TTL).
//! The live set is the union of unexpired heartbeats over all shards, so one
//! shard being down changes nothing. A node always counts itself as live, and
//! keeps its last view when no shard answers (a node cut off from Redis keeps
//! firing; the ledger claim keeps that safe). Clean shutdown deletes the
//! heartbeat at once so the others take over without waiting for the TTL.
//!
//! A node whose clock is out of bounds (`runtime::clock`) leaves the same
//! way and stops counting itself as live, so it owns nothing and its jobs'
//! other owners fire them; it beats again once its clock is back.
//!
//! What the heartbeats and live-set reads find is kept for the node's
//! `/readyz` ([`Probes`]): each shard's last answer, and whether the last
//! read found this node's own heartbeat.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use runtime::clock::ClockVerdict;
use runtime::health::{Report, Verdict, Watchdog};
use runtime::redis::Pool;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use runtime::redis::Keys;

pub const HEARTBEAT_TTL: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Membership {
    pub node_id: String,
    pub shards: Vec<Pool>,
    pub keys: Keys,
    pub heartbeat_interval: Duration,
    pub refresh_interval: Duration,
    /// Jobs this node owns, published in the heartbeat for `/v1/cluster`.
    pub owned_jobs: Arc<AtomicUsize>,
    /// The node's replication factor, published in the heartbeat so that
    /// the API computes a job's owners as the nodes do.
    pub replication_factor: usize,
    /// Whether this node's clock lets it fire.
    pub clock: watch::Receiver<ClockVerdict>,
    /// What the readiness probe reads of this node's Redis links.
    pub probes: Probes,
    /// Ticked every turn of [`Membership::run`]; its Redis calls are
    /// bounded by the client's connect and response timeouts.
    pub alive: Watchdog,
}

/// The outcomes the heartbeat loop leaves for `/readyz`.
#[derive(Clone)]
pub struct Probes {
    /// Each shard's last answer to a heartbeat or a live-set read, in the
    /// configured order.
    pub shards: Vec<Report>,
    /// Whether the last live-set read found this node's own heartbeat.
    pub listed: Report,
}

impl Probes {
    pub fn new(shards: usize) -> Self {
        Self { shards: (0..shards).map(|_| Report::default()).collect(), listed: Report::default() }
    }

    /// The `redis` check: every shard answered within `fresh_for`; with some
    /// answering, the others are only named (a node works on any one shard:
    /// its heartbeat and locks go to each shard that answers).
    pub fn redis(&self, fresh_for: Duration) -> Verdict {
        let failing: Vec<String> = self
            .shards
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.status(Some(fresh_for)).err().map(|why| format!("shard {}: {why}", i + 1)))
            .collect();
        match failing.len() {
            0 => Verdict::Ok,
            n if n == self.shards.len() => Verdict::Failed(failing.join("; ")),
            _ => Verdict::Degraded(failing.join("; ")),
        }
    }

    /// The `live_set` check: this node's heartbeat was in Redis at the last
    /// read, no longer than `fresh_for` ago.
    pub fn live_set(&self, fresh_for: Duration) -> Verdict {
        self.listed.status(Some(fresh_for)).into()
    }

    /// Records shard `i`'s answer.
    fn answered<T>(&self, i: usize, result: &anyhow::Result<T>) {
        match (self.shards.get(i), result) {
            (Some(report), Ok(_)) => report.ok(),
            (Some(report), Err(e)) => report.fail(format!("{e:#}")),
            (None, _) => {}
        }
    }
}

impl Membership {
    /// Writes the heartbeat to every shard; Ok if at least one took it.
    pub async fn beat(&self) -> anyhow::Result<usize> {
        let key = self.keys.node(&self.node_id);
        let mut value = serde_json::json!({
            "node_id": self.node_id,
            "heartbeat_at": runtime::clock::now(),
            "owned_jobs": self.owned_jobs.load(Ordering::Relaxed),
        });
        value[domain::ownership::HEARTBEAT_REPLICATION_FACTOR] = self.replication_factor.into();
        let value = value.to_string();
        let mut ok = 0;
        let mut last_err = None;
        for (i, shard) in self.shards.iter().enumerate() {
            let result: anyhow::Result<()> = async {
                let mut conn = shard.get().await?;
                let _: () = redis::pipe()
                    .set_ex(&key, &value, HEARTBEAT_TTL.as_secs())
                    .sadd(self.keys.registry(), &self.node_id)
                    .query_async(&mut *conn)
                    .await?;
                Ok(())
            }
            .await;
            self.probes.answered(i, &result);
            match result {
                Ok(()) => ok += 1,
                Err(e) => last_err = Some(e),
            }
        }
        match (ok, last_err) {
            (0, Some(e)) => Err(e),
            _ => Ok(ok),
        }
    }

    fn clock_in_bounds(&self) -> bool {
        *self.clock.borrow() == ClockVerdict::InBounds
    }

    /// The union of live heartbeats over all reachable shards (with this
    /// node while its clock lets it fire), or None when no shard answered.
    pub async fn live_set(&self) -> Option<Vec<String>> {
        let mut live = BTreeSet::new();
        let mut answered = false;
        for (i, shard) in self.shards.iter().enumerate() {
            let result = runtime::redis::live_nodes(shard, &self.keys).await;
            self.probes.answered(i, &result);
            if let Ok(nodes) = result {
                answered = true;
                live.extend(nodes.into_iter().map(|(id, _)| id));
            }
        }
        // Read before this node is added below: is its own heartbeat there?
        match (answered, self.clock_in_bounds(), live.contains(&self.node_id)) {
            (false, _, _) => self.probes.listed.fail("the live set could not be read: no Redis shard answered"),
            (true, false, _) => self.probes.listed.fail("left the cluster: clock out of bounds"),
            (true, true, false) => self.probes.listed.fail("this node's heartbeat is not in Redis"),
            (true, true, true) => self.probes.listed.ok(),
        }
        answered.then(|| {
            if self.clock_in_bounds() {
                live.insert(self.node_id.clone());
            } else {
                live.remove(&self.node_id);
            }
            live.into_iter().collect()
        })
    }

    pub async fn leave(&self) {
        let key = self.keys.node(&self.node_id);
        for shard in &self.shards {
            if let Ok(mut conn) = shard.get().await {
                let _: Result<(), _> =
                    redis::pipe().del(&key).srem(self.keys.registry(), &self.node_id).query_async(&mut *conn).await;
            }
        }
    }

    /// Runs heartbeats and live-set refreshes until `token` is cancelled, then
    /// deletes the heartbeat. The channel carries the sorted live set.
    pub async fn run(mut self, members: watch::Sender<Vec<String>>, token: CancellationToken) {
        let mut beat = tokio::time::interval(self.heartbeat_interval);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refresh = tokio::time::interval(self.refresh_interval);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.alive.tick();
            tokio::select! {
                _ = token.cancelled() => break,
                Ok(()) = self.clock.changed() => {
                    // Leave (or rejoin) at once, and refresh the live set
                    // now rather than at the next tick.
                    if self.clock_in_bounds() {
                        self.beat_and_report().await;
                    } else {
                        self.leave().await;
                        tracing::warn!(node.id = %self.node_id, "left the cluster: clock out of bounds");
                    }
                    refresh.reset_immediately();
                }
                _ = beat.tick(), if self.clock_in_bounds() => self.beat_and_report().await,
                _ = refresh.tick() => {
                    if let Some(live) = self.live_set().await {
                        members.send_if_modified(|current| {
                            if *current != live {
                                tracing::info!(node.id = %self.node_id, members = ?live, "live set changed");
                                *current = live;
                                true
                            } else {
                                false
                            }
                        });
                        metrics::gauge!(runtime::metrics::CLUSTER_LIVE_NODES).set(members.borrow().len() as f64);
                    }
                }
            }
        }
        self.leave().await;
        tracing::info!(node.id = %self.node_id, "heartbeat deleted");
    }

    async fn beat_and_report(&self) {
        match self.beat().await {
            Ok(_) => {
                metrics::gauge!(runtime::metrics::HEARTBEAT_LAST_SUCCESS).set(runtime::clock::now().timestamp() as f64)
            }
            Err(e) => {
                tracing::warn!(node.id = %self.node_id, error = %format!("{e:#}"), "heartbeat failed on every Redis shard")
            }
        }
    }
}
