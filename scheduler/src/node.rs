//! One scheduler node: the loops of `lib.rs`, wired together.
//!
//! The core loop owns all timer state (no locks): it applies job changes from
//! the feed, recomputes ownership when the live set changes, and hands due
//! slots to the dispatcher in batches. Shutdown runs in order: the core loop
//! stops taking slots, the dispatcher finishes what it was handed, then the
//! heartbeat is deleted so the other owners take over at once.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::Pool as PgPool;
use deadpool_redis::Pool as RedisPool;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use common::amqp::Topology;
use common::message::Trigger;
use common::partitions::{self, Retention};
use common::publisher::Publisher;
use common::redis::Keys;
use common::schedule::CompiledSchedule;

use crate::dispatch::{DispatchConfig, Dispatcher, Recorded, Slot, Work};
use crate::feed::{self, JobRow};
use crate::membership::Membership;
use crate::misfire;
use crate::ownership;
use crate::timer::{Generation, TimerHeap};

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: String,
    pub cluster: String,
    pub database_url: String,
    pub amqp_url: String,
    /// Owners per job.
    pub replication_factor: usize,
    /// Slots due this soon are claimed and published ahead of time.
    pub lookahead: Duration,
    /// A slot later than this is a misfire, handled by the job's misfire
    /// policy; a slot less late simply fires late.
    pub misfire_threshold: Duration,
    /// How far back a (re)loaded job is checked for misfires.
    pub misfire_lookback: Duration,
    /// Most ledger rows one misfire decision writes per job.
    pub misfire_record_max: usize,
    /// Cluster-wide rate of late fires during misfire catch-up (per second).
    pub catchup_rate: u32,
    pub batch_max: usize,
    pub poll_interval: Duration,
    pub heartbeat_interval: Duration,
    pub membership_refresh: Duration,
    pub lock_ttl: Duration,
    pub verify_after: Duration,
    pub outbox_grace: Duration,
    /// A ledger row `running` longer than its attempt timeout plus this is
    /// delivered again.
    pub running_grace: Duration,
    /// A ledger row not moved this long past when it should have been is
    /// moved on by the stranded-row sweep.
    pub stranded_after: Duration,
    pub maintenance_interval: Duration,
    pub retention: Retention,
}

impl NodeConfig {
    /// Defaults that suit production; tests override what they need.
    pub fn new(node_id: String, cluster: String, database_url: String, amqp_url: String) -> Self {
        Self {
            node_id,
            cluster,
            database_url,
            amqp_url,
            replication_factor: 2,
            lookahead: Duration::from_secs(2),
            misfire_threshold: Duration::from_secs(30),
            misfire_lookback: Duration::from_secs(24 * 3600),
            misfire_record_max: 1000,
            catchup_rate: 500,
            batch_max: 10_000,
            poll_interval: Duration::from_secs(5),
            heartbeat_interval: Duration::from_secs(10),
            membership_refresh: Duration::from_secs(2),
            lock_ttl: Duration::from_secs(120),
            verify_after: Duration::from_secs(5),
            outbox_grace: Duration::from_secs(10),
            running_grace: Duration::from_secs(60),
            stranded_after: Duration::from_secs(60),
            maintenance_interval: Duration::from_secs(3600),
            retention: Retention::default(),
        }
    }
}

/// What the node knows about every live job, owned or not: its version, so
/// a membership change is recomputed locally and only the jobs this node
/// gains are fetched from the database. Owned state is boxed so a job this
/// node does not own costs one small table entry.
struct Known {
    version: i64,
    owned: Option<Box<Owned>>,
}

/// A job this node owns.
struct Owned {
    schedule: CompiledSchedule,
    runs: u64,
    max_runs: Option<u64>,
    /// Its live timer entry; 0 = not scheduled (it never fires again).
    generation: Generation,
}

struct State {
    node_id: String,
    rf: usize,
    misfire_threshold: TimeDelta,
    misfire_record_max: usize,
    /// Misfired slots waiting for the catch-up rate limiter.
    catchup: VecDeque<Slot>,
    /// Misfire decisions not yet handed to the dispatcher.
    records: Vec<Recorded>,
    members: Vec<String>,
    jobs: HashMap<Uuid, Known>,
    owned_count: usize,
    heap: TimerHeap,
}

/// Whether `generation` is `job`'s live timer entry.
fn is_live(jobs: &HashMap<Uuid, Known>, job: Uuid, generation: Generation) -> bool {
    jobs.get(&job).and_then(|k| k.owned.as_ref()).is_some_and(|o| o.generation == generation)
}

impl State {
    fn is_owner(&self, job: Uuid) -> bool {
        ownership::is_owner(&self.node_id, job, &self.members, self.rf)
    }

    /// Stops owning `id` (it stays known).
    fn disown(&mut self, id: Uuid) {
        if let Some(owned) = self.jobs.get_mut(&id).and_then(|k| k.owned.take()) {
            self.owned_count -= 1;
            if owned.generation != 0 {
                self.heap.forgot();
            }
        }
    }

    fn apply(&mut self, row: JobRow, now: DateTime<Utc>) {
        if row.deleted {
            self.disown(row.id);
            self.jobs.remove(&row.id);
            return;
        }
        // A re-read of a row we already applied (the feed may repeat rows).
        let current = self.jobs.get(&row.id);
        if current.is_some_and(|k| k.version > row.version) {
            return;
        }
        let unchanged = current.is_some_and(|k| k.version == row.version && k.owned.is_some());
        // Runs the ledger holds plus the earlier versions' slots caught up now.
        let mut runs = row.runs;
        if let Some(history) = &row.history
            && !unchanged
            && self.is_owner(row.id)
        {
            runs += self.catch_up_past_versions(&row, history, now);
        }
        let Some(spec) = row.spec else {
            // Paused: known (so that a membership change can hand it over
            // and its history be read), never scheduled.
            self.disown(row.id);
            self.jobs.insert(row.id, Known { version: row.version, owned: None });
            return;
        };
        if !self.is_owner(row.id) {
            self.disown(row.id);
            self.jobs.insert(row.id, Known { version: row.version, owned: None });
            return;
        }
        if unchanged {
            return;
        }
        self.disown(row.id);
        self.jobs.insert(row.id, Known { version: row.version, owned: None });
        let schedule = match spec.compile(row.created_at) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(job.id = %row.id, error = %format!("{e:#}"), "stored schedule does not compile; ignoring job");
                return;
            }
        };
        // Slots less late than the misfire threshold still fire (the claim
        // makes that safe); older ones belong to the misfire policy. Slots
        // before the last change (an update, a resume) belonged to the
        // previous version.
        // This version is in force from `updated_at` on: it takes the slots
        // due at or after it (those before belong to the previous version).
        let changed_at = row.created_at.max(row.updated_at) - TimeDelta::microseconds(1);
        let mut from = changed_at.max(now - self.misfire_threshold);
        let mut owned = Owned { runs, max_runs: spec.schedule.max_runs, schedule, generation: 0 };
        if let Some(history) = row.history {
            let since =
                changed_at.max(history.looked_back_to).max(history.last_slot.unwrap_or(DateTime::<Utc>::MIN_UTC));
            if since < from {
                let mut d = misfire::decide(
                    &owned.schedule,
                    spec.misfire,
                    spec.misfire_cap,
                    since,
                    from,
                    self.misfire_record_max,
                );
                d.fire.truncate(runs_left(owned.max_runs, owned.runs));
                if !d.fire.is_empty() || !d.record.is_empty() || d.unrecorded > 0 {
                    tracing::info!(job.id = %row.id, policy = ?spec.misfire, fire = d.fire.len(), recorded = d.record.len(), unrecorded = d.unrecorded, "misfired slots found");
                    metrics::counter!("cronshard_misfire_unrecorded_total").increment(d.unrecorded);
                }
                let slot =
                    |at| Slot { job_id: row.id, scheduled_at: at, job_version: row.version, trigger: Trigger::Misfire };
                owned.runs += d.fire.len() as u64;
                self.catchup.extend(d.fire.into_iter().map(slot));
                self.records.extend(d.record.into_iter().map(|(at, status, reason)| Recorded {
                    slot: slot(at),
                    status,
                    reason,
                }));
            }
            // Slots up to the last one in the ledger are taken care of (a
            // gained job was fired by its previous owners until now), except
            // from the first one an older version holds or a change cancelled:
            // the timer takes those again (a claim of a settled slot is a
            // harmless conflict).
            if let Some(last) = history.last_slot {
                let settled_to = history.unsettled_from.map_or(last, |u| last.min(u - TimeDelta::microseconds(1)));
                from = from.max(settled_to);
            }
        }
        // The slots after `from` are counted as `take_due` takes them.
        let counted_again = row.runs_since_change.iter().filter(|t| **t > from).count() as u64;
        owned.runs = owned.runs.saturating_sub(counted_again);
        if let Some(next) = owned.next_after(from) {
            owned.generation = self.heap.push(row.id, next);
        }
        self.owned_count += 1;
        self.jobs.insert(row.id, Known { version: row.version, owned: Some(Box::new(owned)) });
    }

    /// The slots of the job's earlier live versions that nobody fired and no
    /// ledger row covers (after `last_slot`): the job had no live owner
    /// while those versions were in force (both owners died, and it was
    /// changed before their heartbeats expired). Each is decided under the
    /// version in force at it: fired if less late than the misfire
    /// threshold, else by that version's misfire policy. Every slot fired
    /// counts towards the `max_runs` of the version it fires under (the
    /// ledger's runs come first: these slots are later than all of them).
    /// Returns how many slots it fired.
    fn catch_up_past_versions(&mut self, row: &JobRow, history: &feed::History, now: DateTime<Utc>) -> u64 {
        let covered = history.looked_back_to.max(history.last_slot.unwrap_or(DateTime::<Utc>::MIN_UTC));
        let misfired_before = now - self.misfire_threshold;
        let mut runs = row.runs;
        for past in &history.past {
            let max_runs = past.spec.schedule.max_runs;
            let Ok(schedule) = past.spec.compile(row.created_at) else { continue };
            let since = covered.max(past.valid_from - TimeDelta::microseconds(1));
            let until = past.until - TimeDelta::microseconds(1);
            if since >= until {
                continue;
            }
            let slot = |at, trigger| Slot { job_id: row.id, scheduled_at: at, job_version: past.version, trigger };
            if since < misfired_before {
                let mut d = misfire::decide(
                    &schedule,
                    past.spec.misfire,
                    past.spec.misfire_cap,
                    since,
                    until.min(misfired_before),
                    self.misfire_record_max,
                );
                d.fire.truncate(runs_left(max_runs, runs));
                runs += d.fire.len() as u64;
                self.catchup.extend(d.fire.into_iter().map(|at| slot(at, Trigger::Misfire)));
                self.records.extend(d.record.into_iter().map(|(at, status, reason)| Recorded {
                    slot: slot(at, Trigger::Misfire),
                    status,
                    reason,
                }));
            }
            let mut cursor = since.max(misfired_before);
            while runs_left(max_runs, runs) > 0
                && let Some(at) = schedule.next_after(cursor).filter(|at| *at <= until)
            {
                self.catchup.push_back(slot(at, Trigger::Schedule));
                runs += 1;
                cursor = at;
            }
        }
        runs - row.runs
    }

    /// Recomputes ownership for the new live set; returns the jobs gained,
    /// which the caller fetches and feeds back through `apply`.
    fn rebalance(&mut self, members: Vec<String>) -> Vec<Uuid> {
        self.members = members;
        let (mut lost, mut gained) = (Vec::new(), Vec::new());
        for (id, known) in &self.jobs {
            match (known.owned.is_some(), self.is_owner(*id)) {
                (true, false) => lost.push(*id),
                (false, true) => gained.push(*id),
                _ => {}
            }
        }
        for id in &lost {
            self.disown(*id);
        }
        tracing::info!(node.id = %self.node_id, lost = lost.len(), gained = gained.len(), owned = self.owned_count, "ownership recomputed");
        gained
    }

    fn next_deadline(&mut self) -> Option<DateTime<Utc>> {
        let jobs = &self.jobs;
        self.heap.peek(|job, g| is_live(jobs, job, g))
    }

    /// Pops every slot due by `horizon` (up to `max`) and re-arms its job.
    fn take_due(&mut self, horizon: DateTime<Utc>, max: usize) -> Vec<Slot> {
        let mut slots = Vec::new();
        while slots.len() < max {
            let jobs = &self.jobs;
            let Some((id, at)) = self.heap.pop_due(horizon, |job, g| is_live(jobs, job, g)) else { break };
            let Some(known) = self.jobs.get_mut(&id) else { continue };
            let Some(owned) = known.owned.as_mut() else { continue };
            slots.push(Slot { job_id: id, scheduled_at: at, job_version: known.version, trigger: Trigger::Schedule });
            owned.runs += 1;
            owned.generation = match owned.next_after(at) {
                Some(next) => self.heap.push(id, next),
                None => 0,
            };
        }
        slots
    }

    fn compact_timer(&mut self) {
        let jobs = &self.jobs;
        self.heap.compact_if_bloated(|job, g| is_live(jobs, job, g));
    }
}

/// How many more slots a job with `max_runs` may run after `runs`.
fn runs_left(max_runs: Option<u64>, runs: u64) -> usize {
    max_runs.map_or(usize::MAX, |max| max.saturating_sub(runs) as usize)
}

impl Owned {
    fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if runs_left(self.max_runs, self.runs) == 0 {
            return None;
        }
        self.schedule.next_after(t)
    }
}

pub struct Node {
    pub config: NodeConfig,
    pub pg: PgPool,
    pub redis: Vec<RedisPool>,
}

impl Node {
    /// Runs until `token` is cancelled, then shuts down in order.
    pub async fn run(self, token: CancellationToken) -> anyhow::Result<()> {
        let cfg = self.config.clone();
        let keys = Keys::new(&cfg.cluster);
        let owned_jobs = Arc::new(AtomicUsize::new(0));
        let membership = Membership {
            node_id: cfg.node_id.clone(),
            shards: self.redis.clone(),
            keys: keys.clone(),
            heartbeat_interval: cfg.heartbeat_interval,
            refresh_interval: cfg.membership_refresh,
            owned_jobs: owned_jobs.clone(),
        };
        if let Err(e) = membership.beat().await {
            tracing::warn!(error = %format!("{e:#}"), "first heartbeat failed; starting alone until Redis answers");
        }
        let initial_members = membership.live_set().await.unwrap_or_else(|| vec![cfg.node_id.clone()]);
        tracing::info!(node.id = %cfg.node_id, members = ?initial_members, "joining cluster");
        let (members_tx, mut members_rx) = watch::channel(initial_members.clone());
        let heartbeat_token = CancellationToken::new();
        let heartbeat = tokio::spawn(membership.run(members_tx, heartbeat_token.clone()));

        let (feed_tx, mut feed_rx) = mpsc::channel::<Vec<JobRow>>(16);
        let feed_token = token.child_token();
        {
            let (pool, url, tx, poll_every, t) =
                (self.pg.clone(), cfg.database_url.clone(), feed_tx.clone(), cfg.poll_interval, feed_token.clone());
            let lookback = cfg.misfire_lookback;
            tokio::spawn(async move {
                let since = loop {
                    match feed::initial_load(&pool, lookback, &tx).await {
                        Ok(xmin) => break xmin,
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "loading jobs failed; retrying");
                            tokio::select! {
                                _ = t.cancelled() => return,
                                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                            }
                        }
                    }
                };
                tracing::info!("initial job load complete");
                feed::run(url, pool, since, poll_every, tx, t).await;
            });
        }

        // Before anything is claimed: a slot claimed into the default
        // partition is moved when its day's partition is created, and a
        // worker's statement waiting on the row then misses it.
        // Bounded: an unreachable database must not hold the node back.
        let _ =
            tokio::time::timeout(Duration::from_secs(10), maintain_partitions_once(&cfg.database_url, cfg.retention))
                .await;
        tokio::spawn(maintain_partitions(
            cfg.database_url.clone(),
            cfg.maintenance_interval,
            cfg.retention,
            feed_token.clone(),
        ));

        let (batch_tx, batch_rx) = mpsc::channel::<Work>(64);
        let dispatcher = Dispatcher::new(
            DispatchConfig {
                node_id: cfg.node_id.clone(),
                keys,
                lock_ttl: cfg.lock_ttl,
                verify_after: cfg.verify_after,
                outbox_grace: cfg.outbox_grace,
                running_grace: cfg.running_grace,
                stranded_after: cfg.stranded_after,
            },
            self.pg.clone(),
            self.redis.clone(),
            Publisher::new(
                cfg.amqp_url.clone(),
                format!("cronshard-scheduler {}", cfg.node_id),
                Topology::new(&cfg.cluster),
            ),
        );
        let dispatcher = tokio::spawn(dispatcher.run(batch_rx, token.clone()));

        let mut state = State {
            node_id: cfg.node_id.clone(),
            rf: cfg.replication_factor.max(1),
            misfire_threshold: TimeDelta::from_std(cfg.misfire_threshold)?,
            misfire_record_max: cfg.misfire_record_max,
            catchup: VecDeque::new(),
            records: Vec::new(),
            members: initial_members,
            jobs: HashMap::new(),
            owned_count: 0,
            heap: TimerHeap::default(),
        };
        let lookahead = TimeDelta::from_std(cfg.lookahead)?;
        // Slots are handed over at most once per tick: at a steady rate the
        // next deadline is always a millisecond away, and taking one or two
        // slots per wake made every claim, publish and stamp a round trip
        // for a handful of rows. A tenth of the lookahead still leaves the
        // pipeline nine tenths of it.
        let hand_over_tick = (lookahead / 10).min(TimeDelta::milliseconds(100));
        let mut handed_over = Utc::now() - hand_over_tick;
        let mut catchup_credit: i64 = 0;
        let mut catchup_tick = tokio::time::interval(Duration::from_millis(100));
        catchup_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let now = Utc::now();
            let wait = match state.next_deadline() {
                Some(at) => (at - lookahead)
                    .max(handed_over + hand_over_tick)
                    .signed_duration_since(now)
                    .to_std()
                    .unwrap_or(Duration::ZERO),
                None => Duration::from_secs(3600),
            };
            tokio::select! {
                biased;
                _ = token.cancelled() => break,
                Ok(()) = members_rx.changed() => {
                    let members = members_rx.borrow_and_update().clone();
                    let gained = state.rebalance(members);
                    if !gained.is_empty() {
                        tokio::spawn(fetch_gained(self.pg.clone(), gained, cfg.misfire_lookback, feed_tx.clone()));
                    }
                    owned_jobs.store(state.owned_count, Ordering::Relaxed);
                    metrics::gauge!("cronshard_owned_jobs").set(state.owned_count as f64);
                }
                Some(rows) = feed_rx.recv() => {
                    let now = Utc::now();
                    for row in rows {
                        state.apply(row, now);
                    }
                    state.compact_timer();
                    if !state.records.is_empty() && batch_tx.send(Work::Record(std::mem::take(&mut state.records))).await.is_err() {
                        break;
                    }
                    owned_jobs.store(state.owned_count, Ordering::Relaxed);
                    metrics::gauge!("cronshard_owned_jobs").set(state.owned_count as f64);
                }
                _ = tokio::time::sleep(wait) => {
                    let now = Utc::now();
                    handed_over = now;
                    let slots = state.take_due(now + lookahead, cfg.batch_max);
                    for s in &slots {
                        let late = (now - s.scheduled_at).num_milliseconds().max(0) as f64 / 1000.0;
                        metrics::histogram!("cronshard_fire_lateness_seconds").record(late);
                    }
                    if !slots.is_empty() && batch_tx.send(Work::Fire(slots)).await.is_err() {
                        break;
                    }
                }
                _ = catchup_tick.tick(), if !state.catchup.is_empty() => {
                    // The cluster-wide rate, shared by the live nodes. A job's
                    // catch-up run is handed over whole (it is published as
                    // one ordered bundle); what it takes beyond this tick's
                    // share is paid back by the next ticks.
                    let per_tick = (cfg.catchup_rate as usize / 10 / state.members.len().max(1)).max(1);
                    catchup_credit = (catchup_credit + per_tick as i64).min(per_tick as i64);
                    if catchup_credit <= 0 {
                        continue;
                    }
                    let mut n = (catchup_credit as usize).min(state.catchup.len());
                    while n < state.catchup.len() && state.catchup[n].job_id == state.catchup[n - 1].job_id {
                        n += 1;
                    }
                    catchup_credit -= n as i64;
                    let slots: Vec<Slot> = state.catchup.drain(..n).collect();
                    if batch_tx.send(Work::Fire(slots)).await.is_err() {
                        break;
                    }
                }
            }
        }
        tracing::info!(node.id = %cfg.node_id, "stopping: no new slots; finishing claimed ones");
        feed_token.cancel();
        drop(batch_tx);
        let _ = dispatcher.await;
        heartbeat_token.cancel();
        let _ = heartbeat.await;
        tracing::info!(node.id = %cfg.node_id, "stopped");
        Ok(())
    }
}

async fn fetch_gained(pool: PgPool, ids: Vec<Uuid>, lookback: Duration, out: mpsc::Sender<Vec<JobRow>>) {
    for chunk in ids.chunks(10_000) {
        let mut backoff = Duration::from_millis(100);
        loop {
            match feed::fetch(&pool, chunk, lookback).await {
                Ok(rows) => {
                    if out.send(rows).await.is_err() {
                        return;
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "fetching gained jobs failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }
}

/// Keeps ledger partitions created ahead and dropped after the retention.
async fn maintain_partitions(database_url: String, every: Duration, retention: Retention, token: CancellationToken) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        maintain_partitions_once(&database_url, retention).await;
    }
}

async fn maintain_partitions_once(database_url: &str, retention: Retention) {
    let result = async {
        let mut client = common::db::connect(database_url).await?;
        partitions::maintain(&mut client, Utc::now(), retention).await
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(error = %format!("{e:#}"), "ledger partition maintenance failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use common::job::JobSpec;
    use feed::{History, PastVersion};

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn state() -> State {
        State {
            node_id: "n0".into(),
            rf: 2,
            misfire_threshold: TimeDelta::seconds(30),
            misfire_record_max: 100,
            catchup: VecDeque::new(),
            records: Vec::new(),
            members: vec!["n0".into()],
            jobs: HashMap::new(),
            owned_count: 0,
            heap: TimerHeap::default(),
        }
    }

    fn every_two_seconds(max_runs: u64) -> JobSpec {
        serde_json::from_value(serde_json::json!({
            "name": "j",
            "schedule": {"kind": "cron", "expr": "*/2 * * * * *", "timezone": "UTC", "max_runs": max_runs},
            "target": {"kind": "http", "url": "http://127.0.0.1:1/", "method": "POST", "timeout_ms": 1000},
        }))
        .unwrap()
    }

    /// A job whose version 1 (in force 12:00:00–12:00:20) fired its slots up
    /// to 12:00:06 before its owners died, reloaded at 12:00:22 under version
    /// 2 with the ledger holding `runs` runs.
    fn reloaded(runs: u64) -> JobRow {
        let spec = every_two_seconds(4);
        JobRow {
            id: Uuid::from_u128(7),
            version: 2,
            created_at: t("2026-01-01T11:59:59Z"),
            updated_at: t("2026-01-01T12:00:20Z"),
            spec: Some(spec.clone()),
            deleted: false,
            runs,
            runs_since_change: Vec::new(),
            history: Some(History {
                last_slot: Some(t("2026-01-01T12:00:06Z")),
                unsettled_from: None,
                looked_back_to: t("2026-01-01T11:00:00Z"),
                past: vec![PastVersion {
                    version: 1,
                    valid_from: t("2026-01-01T12:00:00Z"),
                    until: t("2026-01-01T12:00:20Z"),
                    spec,
                }],
            }),
        }
    }

    #[test]
    fn catch_up_of_earlier_versions_stops_at_max_runs() {
        let now = t("2026-01-01T12:00:22Z");
        for (runs, caught_up) in [(0, 4), (2, 2), (4, 0)] {
            let mut state = state();
            let row = reloaded(runs);
            let id = row.id;
            state.apply(row, now);
            let slots: Vec<_> = state.catchup.iter().map(|s| (s.scheduled_at, s.job_version)).collect();
            let expected: Vec<_> =
                (0..caught_up).map(|i| (t("2026-01-01T12:00:08Z") + TimeDelta::seconds(2 * i), 1)).collect();
            assert_eq!(slots, expected, "ledger holds {runs} runs");
            // Every run is used up: version 2 never fires.
            let owned = state.jobs[&id].owned.as_ref().expect("owned");
            assert_eq!((owned.runs, owned.generation), (4, 0), "ledger holds {runs} runs");
        }
    }

    #[test]
    fn catch_up_of_earlier_versions_without_max_runs_fires_every_slot() {
        let now = t("2026-01-01T12:00:22Z");
        let mut state = state();
        let mut row = reloaded(0);
        let mut spec = every_two_seconds(4);
        spec.schedule.max_runs = None;
        row.spec = Some(spec.clone());
        row.history.as_mut().unwrap().past[0].spec = spec;
        state.apply(row, now);
        // 12:00:08 to 12:00:18 under version 1; version 2 takes 12:00:20 on.
        assert_eq!(state.catchup.len(), 6);
        assert_eq!(state.next_deadline(), Some(t("2026-01-01T12:00:20Z")));
    }

    /// A node gains a job 200 ms before a slot whose row an older version
    /// holds armed, while the previous owner already claimed later slots:
    /// its timer starts at that slot (to re-take it once cancelled), not
    /// after the last claimed one.
    #[test]
    fn a_gained_job_starts_at_the_first_slot_an_older_version_holds() {
        let now = t("2026-01-01T12:00:21.800Z");
        let mut state = state();
        let mut row = reloaded(0);
        let mut spec = every_two_seconds(4);
        spec.schedule.max_runs = None;
        row.spec = Some(spec);
        let history = row.history.as_mut().unwrap();
        history.past.clear();
        history.last_slot = Some(t("2026-01-01T12:00:30Z"));
        history.unsettled_from = Some(t("2026-01-01T12:00:22Z"));
        state.apply(row.clone(), now);
        assert_eq!(state.next_deadline(), Some(t("2026-01-01T12:00:22Z")));
        // With nothing unsettled, the slots up to the last claimed are done.
        row.history.as_mut().unwrap().unsettled_from = None;
        let mut state = self::state();
        state.apply(row, now);
        assert_eq!(state.next_deadline(), Some(t("2026-01-01T12:00:32Z")));
    }
}
