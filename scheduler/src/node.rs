//! One scheduler node: the loops of `lib.rs`, wired together.
//!
//! The core loop owns the node's [`Core`] (no locks): it applies job changes
//! from the feed, recomputes ownership when the live set changes, and hands
//! due slots to the dispatcher in batches. Shutdown runs in order: the core loop
//! stops taking slots, the dispatcher finishes what it was handed, then the
//! heartbeat is deleted so the other owners take over at once.
//!
//! The core loop and the heartbeat loop are watched for `/healthz`
//! (`runtime::health`); `/readyz` reads what the clock checks and the
//! heartbeat loop last found (`readiness`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::Pool as PgPool;
use runtime::redis::Pool as RedisPool;
use tokio::sync::{Notify, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use broker::amqp::{QueueType, Topology};
use broker::publisher::Publisher;
use runtime::backoff::Backoff;
use runtime::clock::{ClockConfig, ClockVerdict};
use runtime::health::{Health, Verdict, Watchdog};
use runtime::redis::Keys;
use store::ledger::partitions::{self, Retention};

use crate::core::Core;
use crate::dispatch::{DispatchConfig, Dispatcher, Work};
use crate::feed::{self, JobRow};
use crate::lookahead::Lookahead;
use crate::membership::{Membership, Probes};

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: String,
    pub cluster: String,
    pub database_url: String,
    pub amqp_url: String,
    /// The type of the cluster's RabbitMQ queues.
    pub queue_type: QueueType,
    /// Owners per job.
    pub replication_factor: usize,
    /// Slots due this soon are claimed and published ahead of time.
    pub lookahead: Duration,
    /// How far ahead a burst may be handed over (see `lookahead.rs`).
    pub max_lookahead: Duration,
    /// A loaded job whose oldest missed slot is later than this has every
    /// missed slot decided by its misfire policy; otherwise they simply
    /// fire late.
    pub misfire_threshold: Duration,
    /// How far back a (re)loaded job is checked for misfires.
    pub misfire_lookback: Duration,
    /// Cluster-wide rate of late fires during misfire catch-up (per second).
    pub catchup_rate: u32,
    pub batch_max: usize,
    pub poll_interval: Duration,
    pub heartbeat_interval: Duration,
    pub membership_refresh: Duration,
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
    /// How often each alert rule is evaluated.
    pub alert_evaluation_interval: Duration,
    /// How long audit entries are kept.
    pub audit_retention: Duration,
    /// Clock checks against the database, and the offset beyond which this
    /// node stops firing.
    pub clock: ClockConfig,
}

/// The node's defaults, stated once: [`NodeConfig::new`] and the binary's
/// flags both read them.
pub mod defaults {
    pub const REPLICATION_FACTOR: usize = domain::ownership::DEFAULT_REPLICATION_FACTOR;
    pub const LOOKAHEAD_MS: u64 = 2_000;
    pub const MAX_LOOKAHEAD_MS: u64 = 30_000;
    pub const POLL_INTERVAL_MS: u64 = 5_000;
    pub const HEARTBEAT_INTERVAL_MS: u64 = 10_000;
    pub const MISFIRE_THRESHOLD_MS: u64 = domain::job::MISFIRE_THRESHOLD_DEFAULT_MS;
    pub const MISFIRE_LOOKBACK_SECS: u64 = 24 * 3600;
    pub const CATCHUP_RATE: u32 = 500;
    pub const STRANDED_AFTER_SECS: u64 = 60;
}

impl NodeConfig {
    /// Defaults that suit production; tests override what they need.
    pub fn new(node_id: String, cluster: String, database_url: String, amqp_url: String) -> Self {
        Self {
            node_id,
            cluster,
            database_url,
            amqp_url,
            queue_type: QueueType::Classic,
            replication_factor: defaults::REPLICATION_FACTOR,
            lookahead: Duration::from_millis(defaults::LOOKAHEAD_MS),
            max_lookahead: Duration::from_millis(defaults::MAX_LOOKAHEAD_MS),
            misfire_threshold: Duration::from_millis(defaults::MISFIRE_THRESHOLD_MS),
            misfire_lookback: Duration::from_secs(defaults::MISFIRE_LOOKBACK_SECS),
            catchup_rate: defaults::CATCHUP_RATE,
            batch_max: 10_000,
            poll_interval: Duration::from_millis(defaults::POLL_INTERVAL_MS),
            heartbeat_interval: Duration::from_millis(defaults::HEARTBEAT_INTERVAL_MS),
            membership_refresh: Duration::from_secs(2),
            verify_after: Duration::from_secs(1),
            outbox_grace: Duration::from_secs(10),
            running_grace: Duration::from_secs(60),
            stranded_after: Duration::from_secs(defaults::STRANDED_AFTER_SECS),
            maintenance_interval: Duration::from_secs(3600),
            retention: Retention::default(),
            alert_evaluation_interval: Duration::from_millis(crate::alerts::EVALUATION_INTERVAL_DEFAULT_MS),
            audit_retention: Duration::from_secs(crate::alerts::AUDIT_RETENTION_DAYS_DEFAULT * 86_400),
            clock: ClockConfig::default(),
        }
    }
}

/// How long a starting node waits for its first clock check before it
/// goes on with the last correction (none: the local clock).
const CLOCK_FIRST_CHECK_BOUND: Duration = Duration::from_secs(5);

/// How long a stopping node waits for its feed tasks (a statement in flight).
const FEEDERS_STOP_BOUND: Duration = Duration::from_secs(5);

/// A watched loop that has not turned for this long, and is not waiting on
/// a service, is stalled: `/healthz` fails and Kubernetes restarts the
/// node. Far above any turn's own work (applying a large load of jobs).
const LOOP_STALL_BOUND: Duration = Duration::from_secs(60);

/// How often an idle core loop turns to show it is alive.
const ALIVE_EVERY: Duration = Duration::from_secs(1);

pub struct Node {
    pub config: NodeConfig,
    pub pg: PgPool,
    pub redis: Vec<RedisPool>,
}

impl Node {
    /// Runs until `token` is cancelled, then shuts down in order.
    pub async fn run(self, token: CancellationToken) -> anyhow::Result<()> {
        self.run_with_health(Health::new(), token).await
    }

    /// As [`Node::run`], reporting its loops and readiness to `health`
    /// (what the binary serves on its metrics port).
    pub async fn run_with_health(self, health: Health, token: CancellationToken) -> anyhow::Result<()> {
        // From the start: every step before the core loop is bounded, well
        // inside the stall bound.
        let alive = health.watchdog("core", LOOP_STALL_BOUND);
        let cfg = self.config.clone();
        let keys = Keys::new(&cfg.cluster);
        let owned_jobs = Arc::new(AtomicUsize::new(0));
        // The clock first: the first heartbeat, misfire decision and slot
        // are judged by the corrected clock, and a node out of bounds does
        // not join at all.
        let (clock_tx, clock_rx) = watch::channel(ClockVerdict::InBounds);
        runtime::clock::check_once(&self.pg, &cfg.clock, &clock_tx, CLOCK_FIRST_CHECK_BOUND).await;
        let clock_token = token.child_token();
        let clock_task =
            tokio::spawn(runtime::clock::discipline(self.pg.clone(), cfg.clock, clock_tx, clock_token.clone()));
        let membership = Membership {
            node_id: cfg.node_id.clone(),
            shards: self.redis.clone(),
            keys: keys.clone(),
            heartbeat_interval: cfg.heartbeat_interval,
            refresh_interval: cfg.membership_refresh,
            owned_jobs: owned_jobs.clone(),
            replication_factor: cfg.replication_factor,
            clock: clock_rx.clone(),
            probes: Probes::new(self.redis.len()),
            alive: health.watchdog("membership", LOOP_STALL_BOUND),
        };
        readiness(&health, &membership.probes, clock_rx.clone(), &cfg);
        if *clock_rx.borrow() != ClockVerdict::InBounds {
            tracing::error!(node.id = %cfg.node_id, "clock out of bounds: not joining the cluster until it is back");
        } else if let Err(e) = membership.beat().await {
            tracing::warn!(error = %format!("{e:#}"), "first heartbeat failed; starting alone until Redis answers");
        }
        let initial_members = match membership.live_set().await {
            Some(members) => members,
            None if *clock_rx.borrow() == ClockVerdict::InBounds => vec![cfg.node_id.clone()],
            None => Vec::new(),
        };
        tracing::info!(node.id = %cfg.node_id, members = ?initial_members, "joining cluster");
        let (members_tx, mut members_rx) = watch::channel(initial_members.clone());
        let heartbeat_token = CancellationToken::new();
        let heartbeat = tokio::spawn(membership.run(members_tx, heartbeat_token.clone()));

        let (feed_tx, mut feed_rx) = mpsc::channel::<Vec<JobRow>>(16);
        // The loops that feed the core (job rows, gained jobs, partitions):
        // tracked, cancelled together and awaited, within a bound, on stop.
        let feed_token = token.child_token();
        let feeders = TaskTracker::new();
        // Asks the calendar watcher to look now: a calendar changed (the
        // feed's LISTEN) or a job names one the core has not loaded.
        let calendars_check = Arc::new(Notify::new());
        {
            let (pool, url, tx, poll_every, t) =
                (self.pg.clone(), cfg.database_url.clone(), feed_tx.clone(), cfg.poll_interval, feed_token.clone());
            let calendars_changed = calendars_check.clone();
            let lookback = cfg.misfire_lookback;
            feeders.spawn(async move {
                let mut backoff = Backoff::new(Duration::from_secs(1));
                let since = loop {
                    match feed::initial_load(&pool, lookback, &tx).await {
                        Ok(xmin) => break xmin,
                        Err(e) => {
                            tracing::warn!(error = %format!("{e:#}"), "loading jobs failed; retrying");
                            if !backoff.wait_unless_cancelled(&t).await {
                                return;
                            }
                        }
                    }
                };
                feed::run(url, pool, since, poll_every, calendars_changed, tx, t).await;
            });
        }

        // Before anything is claimed: a slot claimed into the default
        // partition is moved when its day's partition is created, and a
        // worker's statement waiting on the row then misses it.
        // Bounded: an unreachable database must not hold the node back.
        let _ =
            tokio::time::timeout(Duration::from_secs(10), maintain_partitions_once(&cfg.database_url, cfg.retention))
                .await;
        feeders.spawn(maintain_partitions(
            cfg.database_url.clone(),
            cfg.maintenance_interval,
            cfg.retention,
            feed_token.clone(),
        ));

        feeders.spawn(vacuum_ledger(cfg.database_url.clone(), feed_token.clone()));
        feeders.spawn(crate::backfill::run(
            self.pg.clone(),
            Publisher::new(
                cfg.amqp_url.clone(),
                format!("cronshard-scheduler {} backfill", cfg.node_id),
                Topology::new(&cfg.cluster).with_queue_type(cfg.queue_type),
            ),
            cfg.node_id.clone(),
            feed_token.clone(),
        ));
        feeders.spawn(crate::alerts::run(
            self.pg.clone(),
            cfg.node_id.clone(),
            cfg.alert_evaluation_interval,
            cfg.audit_retention,
            feed_token.clone(),
        ));

        // Calendars before the first slot: a slot must not fire only because
        // its calendar was not read yet. Bounded, like the partitions.
        let (calendars_tx, mut calendars_rx) = watch::channel(HashMap::new());
        let first_calendars = tokio::time::timeout(Duration::from_secs(10), async {
            let mut backoff = Backoff::new(Duration::from_millis(200));
            loop {
                match load_calendars(&self.pg).await {
                    Ok(loaded) => break loaded,
                    Err(e) => {
                        tracing::warn!(error = %format!("{e:#}"), "loading calendars failed; retrying");
                        backoff.wait().await;
                    }
                }
            }
        })
        .await
        .ok();
        let fingerprint = first_calendars.as_ref().map(|(f, _)| f.clone());
        if let Some((_, calendars)) = first_calendars {
            calendars_tx.send_replace(calendars);
        }
        feeders.spawn(watch_calendars(
            self.pg.clone(),
            fingerprint,
            cfg.poll_interval,
            calendars_check.clone(),
            calendars_tx,
            feed_token.clone(),
        ));

        let (batch_tx, batch_rx) = mpsc::channel::<Work>(64);
        let batch_tx = Handover { tx: batch_tx, alive: alive.clone() };
        let dispatcher = Dispatcher::new(
            DispatchConfig {
                node_id: cfg.node_id.clone(),
                keys,
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
                Topology::new(&cfg.cluster).with_queue_type(cfg.queue_type),
            ),
        );
        let pace = dispatcher.pace();
        let dispatcher = tokio::spawn(dispatcher.run(batch_rx, token.clone()));

        let mut state = Core::new(
            cfg.node_id.clone(),
            cfg.replication_factor,
            TimeDelta::from_std(cfg.misfire_threshold)?,
            initial_members,
        );
        state.set_calendars(calendars_rx.borrow_and_update().clone());
        let lookahead = Lookahead::new(cfg.lookahead, cfg.max_lookahead)?;
        // Slots are handed over at most once per tick: at a steady rate the
        // next deadline is always a millisecond away, and taking one or two
        // slots per wake made every claim, publish and stamp a round trip
        // for a handful of rows. A tenth of the lookahead still leaves the
        // pipeline nine tenths of it.
        let hand_over_tick = (lookahead.min / 10).min(TimeDelta::milliseconds(100));
        let mut handed_over = runtime::clock::now() - hand_over_tick;
        // Slots handed to the dispatcher, against those it has finished.
        let mut handed: u64 = 0;
        let horizon = |state: &Core, handed: u64, now: DateTime<Utc>| {
            let backlog = handed.saturating_sub(pace.done());
            let due = state.due_per_second(now - TimeDelta::minutes(1), now + lookahead.max);
            lookahead.horizon(now, backlog, pace.slots_per_sec(), due)
        };
        // Slots held for a calendar not loaded yet are looked at this often.
        let mut held_tick = tokio::time::interval(Duration::from_millis(100));
        held_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut catchup_credit: i64 = 0;
        let mut catchup_tick = tokio::time::interval(Duration::from_millis(100));
        catchup_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut alive_tick = tokio::time::interval(ALIVE_EVERY);
        alive_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            alive.tick();
            let now = runtime::clock::now();
            let plan = horizon(&state, handed, now);
            metrics::gauge!(runtime::metrics::SCHEDULER_LOOKAHEAD_SECONDS)
                .set((plan - now).num_milliseconds() as f64 / 1000.0);
            let wait = match state.next_deadline() {
                // A slot within the maximum is re-planned every tick: its
                // burst may need handing over before the minimum reaches it.
                Some(at) => (at - lookahead.min)
                    .min(if at <= now + lookahead.max { now } else { at - lookahead.max })
                    .max(handed_over + hand_over_tick)
                    .signed_duration_since(now)
                    .to_std()
                    .unwrap_or(Duration::ZERO),
                None => Duration::from_secs(3600),
            };
            tokio::select! {
                biased;
                _ = token.cancelled() => break,
                Ok(()) = calendars_rx.changed() => {
                    state.set_calendars(calendars_rx.borrow_and_update().clone());
                    if !release_held(&mut state, &batch_tx, &calendars_check).await {
                        break;
                    }
                }
                _ = held_tick.tick(), if state.has_held() => {
                    if !release_held(&mut state, &batch_tx, &calendars_check).await {
                        break;
                    }
                }
                Ok(()) = members_rx.changed() => {
                    let members = members_rx.borrow_and_update().clone();
                    let gained = state.rebalance(members);
                    if !gained.is_empty() {
                        feeders.spawn(fetch_gained(
                            self.pg.clone(),
                            gained,
                            cfg.misfire_lookback,
                            feed_tx.clone(),
                            feed_token.clone(),
                        ));
                    }
                    owned_jobs.store(state.owned_count(), Ordering::Relaxed);
                    metrics::gauge!(runtime::metrics::OWNED_JOBS).set(state.owned_count() as f64);
                }
                Some(rows) = feed_rx.recv() => {
                    let now = runtime::clock::now();
                    let jobs = rows.len();
                    for row in rows {
                        state.apply(row, now);
                    }
                    if state.take_calendars_wanted() {
                        calendars_check.notify_one();
                    }
                    state.compact_timer();
                    let records = state.take_records();
                    if !records.is_empty() {
                        let slots: u64 = records.iter().map(|r| r.slots).sum();
                        tracing::info!(jobs, misfire_records = records.len(), misfired_slots = slots, "misfired slots found in loaded jobs");
                    }
                    if !records.is_empty() && batch_tx.send(Work::Record(records)).await.is_err() {
                        break;
                    }
                    owned_jobs.store(state.owned_count(), Ordering::Relaxed);
                    metrics::gauge!(runtime::metrics::OWNED_JOBS).set(state.owned_count() as f64);
                }
                _ = tokio::time::sleep(wait) => {
                    let now = runtime::clock::now();
                    handed_over = now;
                    let slots = state.take_due(horizon(&state, handed, now), now, cfg.batch_max);
                    if state.take_calendars_wanted() {
                        calendars_check.notify_one();
                    }
                    handed += slots.len() as u64;
                    for s in &slots {
                        let late = (now - s.scheduled_at).num_milliseconds().max(0) as f64 / 1000.0;
                        metrics::histogram!(runtime::metrics::FIRE_LATENESS_SECONDS).record(late);
                    }
                    if !slots.is_empty() && batch_tx.send(Work::Fire(slots)).await.is_err() {
                        break;
                    }
                    // Slots a calendar excluded.
                    let records = state.take_records();
                    if !records.is_empty() && batch_tx.send(Work::Record(records)).await.is_err() {
                        break;
                    }
                }
                _ = catchup_tick.tick(), if state.has_catchup() => {
                    // The cluster-wide rate, shared by the live nodes. A job's
                    // catch-up run is handed over whole (it is published as
                    // one ordered bundle); what it takes beyond this tick's
                    // share is paid back by the next ticks.
                    let per_tick = (cfg.catchup_rate as usize / 10 / state.members().len().max(1)).max(1);
                    catchup_credit = (catchup_credit + per_tick as i64).min(per_tick as i64);
                    let slots = state.take_catchup(catchup_credit.max(0) as usize, runtime::clock::now());
                    catchup_credit -= slots.len() as i64;
                    handed += slots.len() as u64;
                    if !slots.is_empty() && batch_tx.send(Work::Fire(slots)).await.is_err() {
                        break;
                    }
                    let records = state.take_records();
                    if !records.is_empty() && batch_tx.send(Work::Record(records)).await.is_err() {
                        break;
                    }
                }
                // Turns the loop (which ticks `alive`) while nothing else does.
                _ = alive_tick.tick() => {}
            }
        }
        tracing::info!(node.id = %cfg.node_id, "stopping: no new slots; finishing claimed ones");
        feed_token.cancel();
        feeders.close();
        drop(batch_tx);
        let _ = dispatcher.await;
        if tokio::time::timeout(FEEDERS_STOP_BOUND, feeders.wait()).await.is_err() {
            tracing::warn!("feed tasks did not stop in time; leaving them");
        }
        heartbeat_token.cancel();
        let _ = heartbeat.await;
        clock_token.cancel();
        let _ = clock_task.await;
        tracing::info!(node.id = %cfg.node_id, "stopped");
        Ok(())
    }
}

/// The core loop's way to the dispatcher. A dispatcher that is behind
/// (retrying through a Postgres, Redis or broker outage) makes a send wait:
/// the core loop then waits on those services, it is not stalled.
struct Handover {
    tx: mpsc::Sender<Work>,
    alive: Watchdog,
}

impl Handover {
    async fn send(&self, work: Work) -> Result<(), mpsc::error::SendError<Work>> {
        let _waiting = self.alive.waiting();
        self.tx.send(work).await
    }
}

/// The node's `/readyz` checks, each read from what a loop last found, never
/// a round trip of its own: in the live set (its heartbeat read back from
/// Redis), its clock within bounds, Postgres (the clock checks) and the
/// Redis shards (the heartbeats and live-set reads) answering.
fn readiness(health: &Health, probes: &Probes, clock: watch::Receiver<ClockVerdict>, cfg: &NodeConfig) {
    // A few missed live-set reads, a few missed clock checks.
    let redis_fresh = (cfg.membership_refresh * 5).max(Duration::from_secs(10));
    let postgres_fresh = (cfg.clock.check_every * 3).max(Duration::from_secs(10));
    let shards = probes.clone();
    health.check("redis", move || shards.redis(redis_fresh));
    let listed = probes.clone();
    health.check("live_set", move || listed.live_set(redis_fresh));
    let limit = cfg.clock.max_offset;
    health.check("clock", move || match *clock.borrow() {
        ClockVerdict::InBounds => Verdict::Ok,
        ClockVerdict::TooFar => Verdict::Failed(format!(
            "offset {} ms from the database's clock, beyond the limit of {} ms",
            runtime::clock::measured_offset().num_milliseconds(),
            limit.as_millis()
        )),
    });
    let database = runtime::clock::database_report();
    health.check("postgres", move || database.status(Some(postgres_fresh)).into());
}

type Calendars = HashMap<String, Arc<domain::calendar::Calendar>>;

/// Hands over the held slots whose calendars are loaded now, records those
/// excluded or held too long, and asks for a reload while some still wait.
/// False when the dispatcher is gone.
async fn release_held(state: &mut Core, batch_tx: &Handover, calendars_check: &Notify) -> bool {
    let slots = state.take_held(runtime::clock::now());
    if state.take_calendars_wanted() {
        calendars_check.notify_one();
    }
    if !slots.is_empty() && batch_tx.send(Work::Fire(slots)).await.is_err() {
        return false;
    }
    let records = state.take_records();
    records.is_empty() || batch_tx.send(Work::Record(records)).await.is_ok()
}

async fn load_calendars(pg: &PgPool) -> anyhow::Result<(String, Calendars)> {
    store::calendars::load_all(&pg.get().await?).await
}

/// Reloads the calendars whenever they change (checked every `every`, a
/// cheap fingerprint read, and at once when `check` is notified: a calendar
/// changed (LISTEN) or a job names one the core has not loaded) and hands
/// them to the core.
async fn watch_calendars(
    pg: deadpool_postgres::Pool,
    mut fingerprint: Option<String>,
    every: Duration,
    check: Arc<Notify>,
    out: watch::Sender<Calendars>,
    token: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
            _ = check.notified() => {}
        }
        let changed = async {
            let client = pg.get().await?;
            let now = store::calendars::fingerprint(&client).await?;
            anyhow::Ok(fingerprint.as_deref() != Some(now.as_str()))
        };
        match changed.await {
            Ok(false) => {}
            Ok(true) => match load_calendars(&pg).await {
                Ok((f, calendars)) => {
                    tracing::info!(calendars = calendars.len(), "calendars loaded");
                    fingerprint = Some(f);
                    out.send_replace(calendars);
                }
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "loading calendars failed; keeping the last ones"),
            },
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "checking calendars failed"),
        }
    }
}

/// Fetches the jobs this node gained and feeds them to the core, retrying
/// until it succeeds or the node stops.
async fn fetch_gained(
    pool: PgPool,
    ids: Vec<Uuid>,
    lookback: Duration,
    out: mpsc::Sender<Vec<JobRow>>,
    token: CancellationToken,
) {
    for chunk in ids.chunks(10_000) {
        let mut backoff = Backoff::new(Duration::from_millis(100));
        loop {
            let fetched = tokio::select! {
                _ = token.cancelled() => return,
                fetched = feed::fetch(&pool, chunk, lookback) => fetched,
            };
            match fetched {
                Ok(rows) => {
                    if out.send(rows).await.is_err() {
                        return;
                    }
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "fetching gained jobs failed; retrying");
                    if !backoff.wait_unless_cancelled(&token).await {
                        return;
                    }
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

/// How often a node looks for ledger partitions to vacuum: every write
/// of a slot leaves a dead row version, and the sweeps of every node walk
/// the index entries of those versions until a vacuum removes them.
const LEDGER_VACUUM_EVERY: Duration = Duration::from_secs(5);

/// Vacuums the ledger's churned partitions (one node at a time does it; see
/// `partitions::vacuum_churned`). A connection per pass, not one held: a
/// node would otherwise keep a Postgres connection for a few milliseconds of
/// work every 5 s.
async fn vacuum_ledger(database_url: String, token: CancellationToken) {
    let mut tick = tokio::time::interval(LEDGER_VACUUM_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Every pass fails while Postgres is away: a line a minute says so.
    let failures = runtime::telemetry::EveryInterval::new(Duration::from_secs(60));
    let mut memory = partitions::VacuumMemory::default();
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        let result = async {
            let client = store::db::connect(&database_url).await?;
            partitions::vacuum_churned(&client, &mut memory).await
        }
        .await;
        match result {
            Ok(vacuumed) => {
                for v in vacuumed {
                    metrics::counter!(runtime::metrics::LEDGER_VACUUMS_TOTAL).increment(1);
                    tracing::debug!(partition = %v.partition, dead_rows = v.dead_rows, took_ms = v.took.as_millis() as u64, "ledger partition vacuumed");
                }
            }
            Err(e) => {
                if let Some(failed) = failures.add() {
                    tracing::warn!(error = %format!("{e:#}"), failed, "vacuuming the ledger failed");
                }
            }
        }
    }
}

async fn maintain_partitions_once(database_url: &str, retention: Retention) {
    let result = async {
        let mut client = store::db::connect(database_url).await?;
        partitions::maintain(&mut client, runtime::clock::now(), retention).await
    }
    .await;
    if let Err(e) = result {
        tracing::warn!(error = %format!("{e:#}"), "ledger partition maintenance failed");
    }
}
