//! Per destination host (host:port of an HTTP callback, the host of an SQS
//! queue URL): a limit on the deliveries in progress at once on this worker,
//! learnt from the host's throughput (`limit`) unless fixed by the operator,
//! and a circuit breaker (`breaker`) that makes deliveries wait while the host
//! is down instead of spending their attempts on it.
//!
//! A slot meets its destination's gate (`Destinations::pass`) after its due
//! instant and before the worker-wide in-flight permit, so a slot waiting
//! for a busy or broken host holds none of the permits other hosts need,
//! and only slots that passed their gate queue for one.
//!
//! While a circuit is open a slot waits without an attempt: held here when
//! the cool-down ends within `hold_max`, otherwise handed back with a delay
//! (`Gate::Release`, through the retry queues, the attempt not counted), so
//! no message stays unacked for long (the broker closes the channel of a
//! message unacked past its consumer timeout) and waiting slots do not fill
//! the prefetch. A slot whose host's circuit is still open at the slot's
//! horizon (`wait_horizon`) is parked as failed (`Gate::GiveUp`).
//!
//! The hosts tracked are bounded (`MAX_TRACKED_HOSTS`, idle ones evicted),
//! and so are the label values of the per-host gauges: they are refreshed
//! for tracked hosts only, and the exporter forgets a gauge not refreshed
//! for `GAUGES_FORGOTTEN_AFTER`.

pub mod breaker;
pub mod limit;

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use domain::job::{RetryPolicy, Target};

use self::breaker::{Admission, Breaker, BreakerConfig, Call, CircuitState, Ticket, Transition};
use self::limit::{AdaptiveLimit, LimitConfig};
use super::backpressure::{DueBacklog, DueGuard};

/// The flags' defaults, stated once (reasons in docs/decisions.md).
pub mod defaults {
    /// Deliveries to one host at once on a worker at first, and the least
    /// the learnt limit goes down to on its own.
    pub const PER_HOST_INITIAL: usize = 64;
    pub const CIRCUIT_WINDOW_MS: u64 = 30_000;
    pub const CIRCUIT_MIN_CALLS: u32 = 20;
    pub const CIRCUIT_FAILURE_PERCENT: u8 = 50;
    pub const CIRCUIT_OPEN_MS: u64 = 10_000;
    pub const CIRCUIT_OPEN_MAX_MS: u64 = 300_000;
    pub const CIRCUIT_PROBES: u32 = 3;
    pub const CIRCUIT_HOLD_MS: u64 = 5_000;
}

/// Hosts whose state is kept; past it the least recently used idle one is
/// dropped. Also the bound of the per-host gauges' label values.
pub const MAX_TRACKED_HOSTS: usize = 1_000;
/// A host with nothing in flight or waiting and no open circuit is dropped
/// after this long without a delivery.
const IDLE_EVICT_AFTER: Duration = Duration::from_secs(600);
/// How often the per-host gauges are refreshed and idle hosts dropped.
const REFRESH_EVERY: Duration = Duration::from_secs(15);
/// The exporter drops a gauge series not set for this long: an evicted
/// host's series disappear, tracked ones are refreshed well within it.
pub const GAUGES_FORGOTTEN_AFTER: Duration = Duration::from_secs(120);
/// The longest a slot is held here for its destination in all, a margin
/// under RabbitMQ's default consumer timeout (30 min), past which the
/// broker closes the channel of an unacked message. Past it a slot is
/// handed back with a delay even when the host's queue is only long.
const HOLD_LIMIT: Duration = Duration::from_secs(600);
/// The longest delay a slot is handed back for: the first rung of the
/// ladder (`release_delay`) at or past the longest default cool-down
/// (300 s), so that a wait that long takes one hop; a longer one (a longer
/// cool-down set by the operator) takes more.
const RELEASE_DELAY_MAX_SECS: u64 = 325;

/// The destination settings of a worker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DestinationConfig {
    /// Deliveries to one host in progress at once: learnt between its
    /// bounds, or fixed (at most `max_in_flight` either way).
    pub per_host: LimitConfig,
    pub breaker: BreakerConfig,
    /// An open circuit whose cool-down ends within this is waited out
    /// here; a longer one hands the slot back with a delay.
    pub hold_max: Duration,
}

impl Default for DestinationConfig {
    fn default() -> Self {
        DestinationArgs::default().config()
    }
}

/// The worker's destination flags.
#[derive(clap::Args, Debug, Clone)]
pub struct DestinationArgs {
    /// Callback deliveries to one destination host (host:port) in progress at once on this
    /// worker, fixed; at most `WORKER_MAX_IN_FLIGHT`. Unset (the default), the worker learns
    /// each host's limit from its throughput: from 64 up to `WORKER_MAX_IN_FLIGHT`.
    #[arg(long, env = "WORKER_MAX_PER_HOST")]
    pub max_per_host: Option<usize>,
    /// Circuit breaker: how far back delivery outcomes count, per host.
    #[arg(long, env = "WORKER_CIRCUIT_WINDOW_MS", default_value_t = defaults::CIRCUIT_WINDOW_MS)]
    pub circuit_window_ms: u64,
    /// Circuit breaker: fewest counted outcomes in the window before the circuit may open;
    /// 0 turns the breaker off.
    #[arg(long, env = "WORKER_CIRCUIT_MIN_CALLS", default_value_t = defaults::CIRCUIT_MIN_CALLS)]
    pub circuit_min_calls: u32,
    /// Circuit breaker: share (percent) of outcomes in the window saying the host is unhealthy
    /// (connect errors, timeouts, 5xx, 429) that opens the circuit.
    #[arg(long, env = "WORKER_CIRCUIT_FAILURE_PERCENT", default_value_t = defaults::CIRCUIT_FAILURE_PERCENT,
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub circuit_failure_percent: u8,
    /// Circuit breaker: the first cool-down of an outage, during which deliveries to the host
    /// wait (without spending attempts).
    #[arg(long, env = "WORKER_CIRCUIT_OPEN_MS", default_value_t = defaults::CIRCUIT_OPEN_MS)]
    pub circuit_open_ms: u64,
    /// Circuit breaker: the longest cool-down; each failed probe doubles it up to this.
    #[arg(long, env = "WORKER_CIRCUIT_OPEN_MAX_MS", default_value_t = defaults::CIRCUIT_OPEN_MAX_MS)]
    pub circuit_open_max_ms: u64,
    /// Circuit breaker: deliveries let through at once when the cool-down is over; the first
    /// success closes the circuit, a failure re-opens it.
    #[arg(long, env = "WORKER_CIRCUIT_PROBES", default_value_t = defaults::CIRCUIT_PROBES,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub circuit_probes: u32,
    /// Circuit breaker: a slot whose host's cool-down ends within this is held by the worker;
    /// a longer one goes back to the broker with a delay (its attempt not counted).
    #[arg(long, env = "WORKER_CIRCUIT_HOLD_MS", default_value_t = defaults::CIRCUIT_HOLD_MS)]
    pub circuit_hold_ms: u64,
}

impl Default for DestinationArgs {
    fn default() -> Self {
        DestinationArgs {
            max_per_host: None,
            circuit_window_ms: defaults::CIRCUIT_WINDOW_MS,
            circuit_min_calls: defaults::CIRCUIT_MIN_CALLS,
            circuit_failure_percent: defaults::CIRCUIT_FAILURE_PERCENT,
            circuit_open_ms: defaults::CIRCUIT_OPEN_MS,
            circuit_open_max_ms: defaults::CIRCUIT_OPEN_MAX_MS,
            circuit_probes: defaults::CIRCUIT_PROBES,
            circuit_hold_ms: defaults::CIRCUIT_HOLD_MS,
        }
    }
}

impl DestinationArgs {
    pub fn config(&self) -> DestinationConfig {
        let open_for = Duration::from_millis(self.circuit_open_ms.max(1));
        let per_host = match self.max_per_host {
            Some(fixed) => LimitConfig::fixed(fixed),
            None => LimitConfig::adaptive(defaults::PER_HOST_INITIAL, defaults::PER_HOST_INITIAL, usize::MAX),
        };
        DestinationConfig {
            per_host,
            breaker: BreakerConfig {
                window: Duration::from_millis(self.circuit_window_ms.max(1)),
                min_calls: self.circuit_min_calls,
                failure_percent: self.circuit_failure_percent.clamp(1, 100),
                open_for,
                open_max: Duration::from_millis(self.circuit_open_max_ms).max(open_for),
                probes: self.circuit_probes.max(1),
            },
            hold_max: Duration::from_millis(self.circuit_hold_ms),
        }
    }
}

/// The destination a target is delivered to: `host:port` of an HTTP URL
/// (the scheme's port when none is given), the host of an SQS queue URL.
/// None for a URL that does not parse (its delivery fails on its own).
pub fn destination_of(target: &Target) -> Option<String> {
    Address::of(target).destination
}

/// A target's URL worked out once: the destination its gate is keyed by
/// and, for HTTP, the parsed URL its request goes to. Parsing a URL was
/// about 4% of a worker's instructions per slot in a herd, twice over.
pub(crate) struct Address {
    pub(crate) destination: Option<String>,
    pub(crate) http_url: Option<Result<url::Url, url::ParseError>>,
}

impl Address {
    pub(crate) fn of(target: &Target) -> Self {
        match target {
            Target::Http(t) => {
                let url = url::Url::parse(&t.url);
                Address { destination: url.as_ref().ok().and_then(destination_of_url), http_url: Some(url) }
            }
            Target::Sqs(t) => {
                let destination = url::Url::parse(&t.queue_url).ok().and_then(|u| destination_of_url(&u));
                Address { destination, http_url: None }
            }
        }
    }
}

fn destination_of_url(url: &url::Url) -> Option<String> {
    let host = url.host_str()?.to_ascii_lowercase();
    match url.port_or_known_default() {
        Some(port) => Some(format!("{host}:{port}")),
        None => Some(host),
    }
}

/// The latest instant a slot waits for an open circuit: from its due
/// instant, as long as the job's remaining retries would have gone on (the
/// delays before attempts `attempt + 1` … `max_retries + 1`), and at least
/// the longest cool-down, so that a slot meeting a circuit that just
/// opened always outlives its cool-down and sees a probe.
pub fn wait_horizon(policy: &RetryPolicy, attempt: u32, due_at: DateTime<Utc>, open_max: Duration) -> DateTime<Utc> {
    let last_attempt = policy.max_retries.saturating_add(1);
    let retries_span: u64 = (attempt..last_attempt).map(|n| policy.delay_ms(n)).fold(0, u64::saturating_add);
    let span = Duration::from_millis(retries_span).max(open_max);
    due_at + chrono::TimeDelta::from_std(span).unwrap_or(chrono::TimeDelta::MAX)
}

/// The delay a slot handed back waits in the broker: the first rung of a
/// ladder of whole seconds (1 to 16, then each at most 9/8 of the one
/// before: 43 rungs, one delay queue each) at or past the wait, so a slot
/// comes back once, at most an eighth of its wait (or a second) after its
/// circuit half-opens. Rounded down instead (powers of two, back before the
/// half-open), a 5-minute cool-down took five hops per slot, each a write
/// and a publish, and every slot of a host's backlog came back within the
/// same seconds before the half-open to meet it; past it, the probe (made
/// by the slots held here, or the first to come back) has usually decided,
/// and the returns are spread over the eighth.
pub fn release_delay(wait: Duration) -> Duration {
    let mut rung = 1;
    while rung < RELEASE_DELAY_MAX_SECS && Duration::from_secs(rung) < wait {
        rung = (rung + 1).max(rung * 9 / 8);
    }
    Duration::from_secs(rung)
}

/// Why a slot waits without an attempt; the words are the ledger's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    CircuitOpen,
    /// Held past `HOLD_LIMIT` for a host at its concurrency limit.
    Concurrency,
}

impl WaitReason {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitReason::CircuitOpen => store::ledger::delivery::WAITING_CIRCUIT_OPEN,
            WaitReason::Concurrency => store::ledger::delivery::WAITING_CONCURRENCY,
        }
    }

    fn metric_label(self) -> &'static str {
        match self {
            WaitReason::CircuitOpen => "circuit_open",
            WaitReason::Concurrency => "concurrency",
        }
    }
}

/// A slot waiting for its destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub destination: String,
    pub reason: WaitReason,
    /// When the outage began (the circuit left closed on this worker); for
    /// a concurrency wait, when the slot began waiting.
    pub since: DateTime<Utc>,
}

/// What a slot's gate decided.
pub(crate) enum Gate {
    /// Deliver now; report the outcome with `Pass::record`.
    Go(Pass),
    /// Hand the slot back for `delay` without an attempt.
    Release { delay: Duration, waiting: Waiting },
    /// The circuit is open past the slot's horizon: park it, not attempted.
    GiveUp(Waiting),
    /// The worker is stopping.
    Stopping,
}

/// The tracked destinations of one worker, kept across broker sessions.
pub(crate) struct Destinations {
    config: DestinationConfig,
    hosts: Mutex<HashMap<String, Arc<Host>>>,
    /// Targets' URLs as parsed (`Address`), by URL: jobs share few
    /// receivers, and a parse cost ten times a lookup.
    addresses: Mutex<HashMap<String, Arc<Address>>>,
}

/// URLs whose parse is kept; past it the cache starts afresh (a worker
/// whose every job has its own URL gains nothing from it and loses little).
const MAX_CACHED_ADDRESSES: usize = 1_000;

struct Host {
    key: String,
    /// One permit per delivery the limit allows; a shrink the free permits
    /// could not cover is `debt`, paid by permits forgotten as they return.
    slots: Arc<Semaphore>,
    debt: AtomicUsize,
    /// Deliveries admitted and not yet recorded.
    in_progress: AtomicUsize,
    state: Mutex<HostState>,
    /// Woken by every change of the breaker's state and freed probe place.
    changed: Notify,
    /// Slots waiting at this gate now.
    waiting: AtomicUsize,
    /// Of those, the slots held for its circuit (open or probing).
    held: AtomicUsize,
    /// Handles on its gauges, looked up once: `waiting` changes twice for
    /// every slot that queues here, and each lookup through the macro
    /// cloned the host's name. `Destinations::refresh` sets all three
    /// every `REFRESH_EVERY`, which keeps them in the exporter's registry
    /// while the host is tracked (gauges idle out after
    /// `GAUGES_FORGOTTEN_AFTER`).
    gauges: HostGauges,
}

struct HostGauges {
    limit: metrics::Gauge,
    state: metrics::Gauge,
    waiting: metrics::Gauge,
}

struct HostState {
    breaker: Breaker,
    limit: AdaptiveLimit,
    /// When the circuit last left closed; None while closed.
    outage_since: Option<DateTime<Utc>>,
    last_used: Instant,
}

impl Destinations {
    /// Also starts the task that refreshes the per-host gauges and drops
    /// idle hosts; it ends with the last reference.
    pub(crate) fn new(config: DestinationConfig) -> Arc<Self> {
        let destinations =
            Arc::new(Destinations { config, hosts: Mutex::new(HashMap::new()), addresses: Mutex::new(HashMap::new()) });
        let weak = Arc::downgrade(&destinations);
        tokio::spawn(maintain(weak));
        destinations
    }

    /// `target`'s address, parsed once per URL while it is cached.
    pub(crate) fn address(&self, target: &Target) -> Arc<Address> {
        let url = match target {
            Target::Http(t) => &t.url,
            Target::Sqs(t) => &t.queue_url,
        };
        let mut addresses = self.addresses.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(address) = addresses.get(url) {
            return address.clone();
        }
        if addresses.len() >= MAX_CACHED_ADDRESSES {
            addresses.clear();
        }
        let address = Arc::new(Address::of(target));
        addresses.insert(url.clone(), address.clone());
        address
    }

    fn host(&self, key: &str) -> Arc<Host> {
        let now = Instant::now();
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(host) = hosts.get(key) {
            host.lock().last_used = now;
            return host.clone();
        }
        if hosts.len() >= MAX_TRACKED_HOSTS {
            evict(&mut hosts, now, true);
        }
        let host = Arc::new(Host {
            key: key.to_owned(),
            slots: Arc::new(Semaphore::new(self.config.per_host.initial)),
            debt: AtomicUsize::new(0),
            in_progress: AtomicUsize::new(0),
            state: Mutex::new(HostState {
                breaker: Breaker::new(self.config.breaker),
                limit: AdaptiveLimit::new(self.config.per_host, now.into_std()),
                outage_since: None,
                last_used: now,
            }),
            changed: Notify::new(),
            waiting: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            gauges: HostGauges {
                limit: metrics::gauge!(runtime::metrics::WORKER_DESTINATION_LIMIT, "host" => key.to_owned()),
                state: metrics::gauge!(runtime::metrics::WORKER_CIRCUIT_STATE, "host" => key.to_owned()),
                waiting: metrics::gauge!(runtime::metrics::WORKER_DESTINATION_WAITING, "host" => key.to_owned()),
            },
        });
        hosts.insert(key.to_owned(), host.clone());
        host.publish_state(CircuitState::Closed);
        host.publish_limit(self.config.per_host.initial);
        host
    }

    /// What `pass` would decide at once for a slot that comes back from
    /// waiting while its host's circuit stays open here past the hold: hand
    /// it back again, for the delay answered. `None` when that is not
    /// certain (a host not tracked, a circuit not open that long, the
    /// slot's horizon first): the slot then goes the whole way.
    pub(crate) fn still_open(&self, target: &Target, horizon: DateTime<Utc>) -> Option<(Duration, Waiting)> {
        let key = destination_of(target)?;
        let host = self.hosts.lock().unwrap_or_else(|e| e.into_inner()).get(&key)?.clone();
        let now = Instant::now();
        let (until, since) = {
            let state = host.lock();
            (Instant::from_std(state.breaker.open_until(now.into_std())?), state.outage_since?)
        };
        let left = until - now;
        if left <= self.config.hold_max || runtime::clock::now() + left >= horizon {
            return None;
        }
        Some((release_delay(left), Waiting { destination: key, reason: WaitReason::CircuitOpen, since }))
    }

    /// Waits until `target`'s destination may take one more delivery (its
    /// circuit admits it and it is below its concurrency limit), or decides
    /// that the slot goes back or is given up. `due` counts the slot in the
    /// due backlog while it queues for a host with room, not while it waits
    /// for an open circuit. `note` is called once per outage the slot waits
    /// for, before it waits (the ledger says so meanwhile).
    pub(crate) async fn pass<N, F>(
        &self,
        destination: Option<&str>,
        horizon: DateTime<Utc>,
        backlog: &Arc<DueBacklog>,
        due: DueGuard,
        token: &CancellationToken,
        mut note: N,
    ) -> Gate
    where
        N: FnMut(Waiting) -> F,
        F: Future<Output = ()>,
    {
        let Some(key) = destination else {
            return Gate::Go(Pass { host: None, permit: None, ticket: None, _due: Some(due) });
        };
        let host = self.host(key);
        // The usual case costs no wait and no gauge update.
        if let Ok(permit) = host.slots.clone().try_acquire_owned() {
            let admission = host.lock().breaker.admit(Instant::now().into_std());
            match admission {
                Admission::Go(ticket) => return Gate::Go(host.pass(permit, ticket, Some(due))),
                Admission::WaitUntil(_) | Admission::WaitForProbes => drop(permit),
            }
        }
        let _waiting = host.waiting();
        let mut due = Some(due);
        let hold_until = Instant::now() + HOLD_LIMIT;
        let queued_since = runtime::clock::now();
        let mut noted: Option<DateTime<Utc>> = None;
        let mut probes_out_since: Option<Instant> = None;
        let mut held: Option<HeldGuard> = None;
        loop {
            // Registered before the state is read: a change in between still wakes us.
            let changed = host.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let now = Instant::now();
            let (open_until, outage) = {
                let state = host.lock();
                (state.breaker.open_until(now.into_std()), state.outage_since)
            };
            let circuit_waiting = |since: Option<DateTime<Utc>>| Waiting {
                destination: key.to_owned(),
                reason: WaitReason::CircuitOpen,
                since: since.unwrap_or_else(runtime::clock::now),
            };
            if let Some(until) = open_until.map(Instant::from_std) {
                // Not a delivery queueing in a burst: outcome writes need
                // not wait for it.
                due = None;
                let waiting = circuit_waiting(outage);
                // Still open at the horizon: it cannot go before then.
                if runtime::clock::now() + (until - now) >= horizon {
                    return Gate::GiveUp(waiting);
                }
                if until - now > self.config.hold_max || until > hold_until || !host.hold(&mut held, &self.config) {
                    return Gate::Release { delay: release_delay(until - now), waiting };
                }
                if noted != Some(waiting.since) {
                    noted = Some(waiting.since);
                    note(waiting).await;
                }
                tokio::select! {
                    _ = token.cancelled() => return Gate::Stopping,
                    _ = tokio::time::sleep_until(until) => {}
                    _ = changed => {}
                }
                continue;
            }
            if due.is_none() {
                due = Some(backlog.enter());
            }
            let permit = tokio::select! {
                _ = token.cancelled() => return Gate::Stopping,
                _ = tokio::time::sleep_until(hold_until) => {
                    let waiting = Waiting { destination: key.to_owned(), reason: WaitReason::Concurrency, since: queued_since };
                    return Gate::Release { delay: Duration::from_secs(1), waiting };
                }
                permit = host.slots.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    // The semaphore is never closed.
                    Err(_) => return Gate::Stopping,
                },
            };
            let admission = host.lock().breaker.admit(Instant::now().into_std());
            match admission {
                Admission::Go(ticket) => return Gate::Go(host.pass(permit, ticket, due)),
                // It opened while this slot queued: wait above.
                Admission::WaitUntil(_) => drop(permit),
                Admission::WaitForProbes => {
                    drop(permit);
                    due = None;
                    let waiting = circuit_waiting(host.lock().outage_since);
                    if runtime::clock::now() >= horizon {
                        return Gate::GiveUp(waiting);
                    }
                    // A probe may take its whole timeout (minutes): past the
                    // hold, wait in the broker as for an open circuit.
                    let until =
                        (*probes_out_since.get_or_insert_with(Instant::now) + self.config.hold_max).min(hold_until);
                    if Instant::now() >= until || !host.hold(&mut held, &self.config) {
                        return Gate::Release { delay: release_delay(self.config.hold_max), waiting };
                    }
                    if noted != Some(waiting.since) {
                        noted = Some(waiting.since);
                        note(waiting).await;
                    }
                    tokio::select! {
                        _ = token.cancelled() => return Gate::Stopping,
                        _ = tokio::time::sleep_until(until) => {}
                        _ = changed => {}
                    }
                }
            }
        }
    }

    /// Counts a slot handed back without an attempt.
    pub(crate) fn released(&self, waiting: &Waiting) {
        metrics::counter!(runtime::metrics::WORKER_DESTINATION_RELEASED_TOTAL, "reason" => waiting.reason.metric_label())
            .increment(1);
    }

    /// The state of `key`'s circuit now (closed for an untracked host).
    #[cfg(test)]
    fn state_of(&self, key: &str) -> CircuitState {
        let hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        hosts.get(key).map_or(CircuitState::Closed, |h| h.lock().breaker.state(Instant::now().into_std()))
    }

    fn refresh(&self) {
        let now = Instant::now();
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        evict(&mut hosts, now, false);
        for host in hosts.values() {
            let (state, limit) = {
                let state = host.lock();
                (state.breaker.state(now.into_std()), state.limit.limit())
            };
            host.publish_state(state);
            host.publish_limit(limit);
            host.publish_waiting(host.waiting.load(Ordering::SeqCst));
        }
        // Gauges the exporter would otherwise forget on an idle worker (the
        // slots record into a handle on this one: kept in the registry so).
        metrics::gauge!(runtime::metrics::WORKER_IN_FLIGHT).increment(0.0);
    }
}

/// Drops hosts nobody is using (no slot at their gate or in delivery) and
/// whose circuit is not open: those idle past `IDLE_EVICT_AFTER`, and, when
/// `make_room`, the least recently used one.
fn evict(hosts: &mut HashMap<String, Arc<Host>>, now: Instant, make_room: bool) {
    let evictable = |host: &Arc<Host>| -> Option<Instant> {
        let state = host.lock();
        (Arc::strong_count(host) == 1 && state.breaker.open_until(now.into_std()).is_none()).then_some(state.last_used)
    };
    hosts.retain(|_, host| evictable(host).is_none_or(|used| now.duration_since(used) < IDLE_EVICT_AFTER));
    if make_room && hosts.len() >= MAX_TRACKED_HOSTS {
        let oldest = hosts.iter().filter_map(|(k, h)| Some((evictable(h)?, k.clone()))).min();
        if let Some((_, key)) = oldest {
            hosts.remove(&key);
        }
    }
}

async fn maintain(destinations: Weak<Destinations>) {
    let mut every = tokio::time::interval(REFRESH_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(destinations) = destinations.upgrade() else { return };
        destinations.refresh();
    }
}

impl Host {
    fn lock(&self) -> std::sync::MutexGuard<'_, HostState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn pass(self: &Arc<Self>, permit: OwnedSemaphorePermit, ticket: Ticket, due: Option<DueGuard>) -> Pass {
        if ticket.is_probe() {
            self.publish_state(CircuitState::HalfOpen);
        }
        self.in_progress.fetch_add(1, Ordering::SeqCst);
        Pass { host: Some(self.clone()), permit: Some(permit), ticket: Some(ticket), _due: due }
    }

    /// A place among the slots held on this worker for the host's circuit
    /// (kept in `held` until the slot leaves the gate): at most
    /// the limit's start, so that an outage keeps at most that many of the
    /// host's messages in the prefetch. When every waiting slot comes back
    /// as the cool-down ends, the rest go back to the broker at once.
    fn hold(self: &Arc<Self>, held: &mut Option<HeldGuard>, config: &DestinationConfig) -> bool {
        if held.is_some() {
            return true;
        }
        if self.held.fetch_add(1, Ordering::SeqCst) >= config.per_host.initial {
            self.held.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        *held = Some(HeldGuard(self.clone()));
        true
    }

    fn waiting(self: &Arc<Self>) -> WaitingGuard {
        self.publish_waiting(self.waiting.fetch_add(1, Ordering::SeqCst) + 1);
        WaitingGuard(self.clone())
    }

    /// A delivery's end: its permit goes back, or pays a shrink's debt.
    fn release(&self, permit: OwnedSemaphorePermit) {
        self.in_progress.fetch_sub(1, Ordering::SeqCst);
        let paid = self.debt.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| d.checked_sub(1)).is_ok();
        if paid {
            permit.forget();
        }
    }

    /// Applies a new limit to the permits: a rise pays debt first, a fall
    /// takes free permits and owes the rest.
    fn resize(&self, from: usize, to: usize) {
        if to > from {
            let mut more = to - from;
            let _ = self.debt.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
                more = (to - from).saturating_sub(d);
                Some(d.saturating_sub(to - from))
            });
            self.slots.add_permits(more);
        } else {
            let fewer = from - to;
            let taken = self.slots.forget_permits(fewer);
            self.debt.fetch_add(fewer - taken, Ordering::SeqCst);
        }
        self.publish_limit(to);
    }

    fn publish_limit(&self, limit: usize) {
        self.gauges.limit.set(limit as f64);
    }

    fn publish_state(&self, state: CircuitState) {
        self.gauges.state.set(state.gauge());
    }

    fn publish_waiting(&self, n: usize) {
        self.gauges.waiting.set(n as f64);
    }

    /// Applies a recorded outcome's transition: the outage's start, the
    /// metrics, a log line.
    fn transitioned(&self, state: &mut HostState, transition: Transition) {
        match transition {
            Transition::Opened { until, reopened } => {
                let cool_down_ms = until.saturating_duration_since(Instant::now().into_std()).as_millis() as u64;
                if reopened {
                    tracing::warn!(destination = %self.key, cool_down_ms, "destination circuit re-opened: every probe of the round failed");
                } else {
                    state.outage_since = Some(runtime::clock::now());
                    tracing::warn!(destination = %self.key, cool_down_ms, "destination circuit opened: deliveries to it wait");
                }
                let from = if reopened { CircuitState::HalfOpen } else { CircuitState::Closed };
                metrics::counter!(runtime::metrics::WORKER_CIRCUIT_OPENS_TOTAL, "from" => from.as_str()).increment(1);
                self.publish_state(CircuitState::Open);
            }
            Transition::Closed => {
                let since = state.outage_since.take();
                tracing::info!(destination = %self.key, outage_since = ?since, "destination circuit closed: a probe succeeded");
                self.publish_state(CircuitState::Closed);
            }
        }
    }
}

/// One slot holding a place among the slots held for its host's circuit.
struct HeldGuard(Arc<Host>);

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One slot counted as waiting at its host's gate.
struct WaitingGuard(Arc<Host>);

impl Drop for WaitingGuard {
    fn drop(&mut self) {
        let n = self.0.waiting.fetch_sub(1, Ordering::SeqCst) - 1;
        self.0.publish_waiting(n);
    }
}

/// A delivery its destination admitted: holds the host's concurrency
/// place, the breaker's ticket and the slot's place in the due backlog
/// until its outcome is recorded.
pub(crate) struct Pass {
    host: Option<Arc<Host>>,
    permit: Option<OwnedSemaphorePermit>,
    ticket: Option<Ticket>,
    _due: Option<DueGuard>,
}

impl Pass {
    /// Reports what the delivery said about its destination and frees its places.
    pub(crate) fn record(mut self, call: Call) {
        let (Some(host), Some(ticket)) = (self.host.clone(), self.ticket.take()) else { return };
        let now = Instant::now().into_std();
        let mut state = host.lock();
        let transition = state.breaker.record(ticket, call, now);
        if let Some(transition) = transition {
            host.transitioned(&mut state, transition);
        }
        let before = state.limit.limit();
        if let Some(limit) = state.limit.record(host.in_progress.load(Ordering::SeqCst), now) {
            host.resize(before, limit);
            tracing::debug!(destination = %host.key, limit, "destination concurrency limit changed");
        }
        drop(state);
        if let Some(permit) = self.permit.take() {
            host.release(permit);
        }
        if ticket.is_probe() || transition.is_some() {
            host.changed.notify_waiters();
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        // Not delivered after all (the worker stopped, a task failed): a
        // probe's place goes to another slot.
        if let (Some(host), Some(ticket)) = (&self.host, self.ticket.take()) {
            if let Some(permit) = self.permit.take() {
                host.release(permit);
            }
            host.lock().breaker.cancel(ticket);
            if ticket.is_probe() {
                host.changed.notify_waiters();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(url: &str) -> Target {
        serde_json::from_value(serde_json::json!({ "kind": "http", "url": url, "method": "POST", "timeout_ms": 1000 }))
            .unwrap()
    }

    #[test]
    fn a_destination_is_host_and_port_of_the_url_or_the_queue_host() {
        assert_eq!(destination_of(&http("https://Hooks.Example.com/a?b=c")).as_deref(), Some("hooks.example.com:443"));
        assert_eq!(destination_of(&http("http://user:pw@10.0.0.1:8080/x")).as_deref(), Some("10.0.0.1:8080"));
        assert_eq!(destination_of(&http("http://[::1]/x")).as_deref(), Some("[::1]:80"));
        assert_eq!(destination_of(&http("not a url")), None);
        let sqs: Target = serde_json::from_value(serde_json::json!({
            "kind": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs"
        }))
        .unwrap();
        assert_eq!(destination_of(&sqs).as_deref(), Some("sqs.eu-west-1.amazonaws.com:443"));
    }

    #[tokio::test]
    async fn a_urls_address_is_parsed_once_while_cached_and_the_cache_stays_bounded() {
        let d = Destinations::new(config(4));
        let first = d.address(&http("http://127.0.0.1:9000/hook"));
        assert_eq!(first.destination.as_deref(), Some("127.0.0.1:9000"));
        assert_eq!(first.http_url.clone().unwrap().unwrap().as_str(), "http://127.0.0.1:9000/hook");
        assert!(Arc::ptr_eq(&first, &d.address(&http("http://127.0.0.1:9000/hook"))), "parsed again");
        let other = d.address(&http("http://127.0.0.1:9000/other"));
        assert_eq!(other.http_url.clone().unwrap().unwrap().path(), "/other");
        let bad = d.address(&http("not a url"));
        assert!(bad.destination.is_none() && bad.http_url.as_ref().is_some_and(|u| u.is_err()));
        for i in 0..2 * MAX_CACHED_ADDRESSES {
            d.address(&http(&format!("http://127.0.0.1:9000/{i}")));
            assert!(d.addresses.lock().unwrap().len() <= MAX_CACHED_ADDRESSES);
        }
    }

    #[test]
    fn a_slot_waits_as_long_as_its_remaining_retries_would_have_and_at_least_the_longest_cool_down() {
        let policy = RetryPolicy {
            max_retries: 3,
            base_delay_ms: 30_000,
            multiplier: 2.0,
            max_delay_ms: 3_600_000,
            jitter: Default::default(),
        };
        let due = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z").unwrap().to_utc();
        let at = |secs: i64| due + chrono::TimeDelta::seconds(secs);
        let short = Duration::from_secs(60);
        // Attempt 1: 30 + 60 + 120 s of retries.
        assert_eq!(wait_horizon(&policy, 1, due, short), at(210));
        assert_eq!(wait_horizon(&policy, 3, due, short), at(120));
        // The last attempt has no retries left: one longest cool-down.
        assert_eq!(wait_horizon(&policy, 4, due, short), at(60));
        assert_eq!(wait_horizon(&policy, 1, due, Duration::from_secs(300)), at(300));
        let none = RetryPolicy { max_retries: 0, ..policy };
        assert_eq!(wait_horizon(&none, 1, due, short), at(60));
    }

    #[test]
    fn a_slot_handed_back_comes_back_once_soon_after_its_wait_and_the_delay_queues_are_few() {
        let s = Duration::from_secs;
        assert_eq!(release_delay(Duration::from_millis(300)), s(1));
        assert_eq!(release_delay(s(5)), s(5));
        assert_eq!(release_delay(Duration::from_millis(16_001)), s(18));
        assert_eq!(release_delay(s(300)), s(RELEASE_DELAY_MAX_SECS));
        assert_eq!(release_delay(s(100_000)), s(RELEASE_DELAY_MAX_SECS), "longer waits hop at the longest rung");
        // Every wait up to the longest rung, to the millisecond: one hop,
        // never before the wait's end, at most an eighth (or a second) after it.
        let mut distinct = std::collections::BTreeSet::new();
        for ms in 1..=RELEASE_DELAY_MAX_SECS * 1000 {
            let wait = Duration::from_millis(ms);
            let delay = release_delay(wait);
            assert!(delay >= wait, "{wait:?} came back after {delay:?}, before its wait's end");
            let late = delay - wait;
            assert!(late <= (wait / 8).max(s(1)), "{wait:?} came back {late:?} after its wait's end");
            distinct.insert(delay);
        }
        assert_eq!(distinct.len(), 43, "{distinct:?}");
    }

    #[tokio::test]
    async fn a_lowered_limit_takes_effect_as_deliveries_end_and_a_raised_one_at_once() {
        let d = Destinations::new(config(4));
        let host = d.host("h:1");
        let mut held: Vec<_> = (0..3).map(|_| host.slots.clone().try_acquire_owned().unwrap()).collect();
        host.in_progress.fetch_add(3, Ordering::SeqCst);
        // 4 → 1: the free permit goes now, two more as deliveries end.
        host.resize(4, 1);
        assert_eq!((host.slots.available_permits(), host.debt.load(Ordering::SeqCst)), (0, 2));
        host.release(held.pop().unwrap());
        host.release(held.pop().unwrap());
        assert_eq!((host.slots.available_permits(), host.debt.load(Ordering::SeqCst)), (0, 0));
        host.release(held.pop().unwrap());
        assert_eq!(host.slots.available_permits(), 1, "one at once");
        // 1 → 3 with one delivery out: two more free at once.
        let out = host.slots.clone().try_acquire_owned().unwrap();
        host.in_progress.fetch_add(1, Ordering::SeqCst);
        host.resize(1, 3);
        assert_eq!(host.slots.available_permits(), 2);
        // A rise while a fall is owed pays the debt first.
        host.resize(3, 0);
        assert_eq!((host.slots.available_permits(), host.debt.load(Ordering::SeqCst)), (0, 1));
        host.resize(0, 2);
        assert_eq!((host.slots.available_permits(), host.debt.load(Ordering::SeqCst)), (1, 0));
        host.release(out);
        assert_eq!(host.slots.available_permits(), 2);
        assert_eq!(host.in_progress.load(Ordering::SeqCst), 0);
    }

    fn config(max_per_host: usize) -> DestinationConfig {
        DestinationConfig {
            per_host: LimitConfig::fixed(max_per_host),
            breaker: BreakerConfig {
                window: Duration::from_secs(10),
                min_calls: 4,
                failure_percent: 50,
                open_for: Duration::from_secs(2),
                open_max: Duration::from_secs(8),
                probes: 1,
            },
            hold_max: Duration::from_secs(3),
        }
    }

    async fn pass(d: &Destinations, target: &Target, backlog: &Arc<DueBacklog>, notes: &Mutex<Vec<Waiting>>) -> Gate {
        let horizon = Utc::now() + chrono::TimeDelta::seconds(60);
        let key = destination_of(target);
        d.pass(key.as_deref(), horizon, backlog, backlog.enter(), &CancellationToken::new(), |w| {
            notes.lock().unwrap().push(w);
            async {}
        })
        .await
    }

    fn go(gate: Gate) -> Pass {
        match gate {
            Gate::Go(pass) => pass,
            _ => panic!("expected Go"),
        }
    }

    /// Gates with `max_per_host`, a backlog and a notes list, and `url`'s
    /// host with its circuit opened by four unhealthy calls.
    async fn with_open_circuit(
        max_per_host: usize,
        url: &str,
    ) -> (Arc<Destinations>, Arc<DueBacklog>, Mutex<Vec<Waiting>>, Target) {
        let d = Destinations::new(config(max_per_host));
        let backlog = Arc::new(DueBacklog::new(100));
        let notes = Mutex::new(Vec::new());
        let dead = http(url);
        for _ in 0..4 {
            go(pass(&d, &dead, &backlog, &notes).await).record(Call::Unhealthy);
        }
        (d, backlog, notes, dead)
    }

    /// A full host makes its own slots queue, not another host's.
    #[tokio::test(start_paused = true)]
    async fn a_busy_host_holds_up_its_own_slots_only() {
        let d = Destinations::new(config(2));
        let backlog = Arc::new(DueBacklog::new(100));
        let notes = Mutex::new(Vec::new());
        let (busy, other) = (http("http://busy.example/"), http("http://other.example/"));
        let first = go(pass(&d, &busy, &backlog, &notes).await);
        let _second = go(pass(&d, &busy, &backlog, &notes).await);
        let third = pass(&d, &busy, &backlog, &notes);
        tokio::pin!(third);
        assert!(tokio::time::timeout(Duration::from_secs(1), &mut third).await.is_err(), "the third waits");
        // Another host goes at once, however many wait for the busy one.
        let elsewhere = go(pass(&d, &other, &backlog, &notes).await);
        elsewhere.record(Call::Healthy);
        first.record(Call::Healthy);
        let third = go(third.await);
        third.record(Call::Healthy);
        assert!(notes.lock().unwrap().is_empty(), "queueing for a busy host is not written to the ledger");
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_circuit_holds_short_waits_hands_long_ones_back_and_gives_up_past_the_horizon() {
        let (d, backlog, notes, dead) = with_open_circuit(8, "http://dead.example:8080/").await;
        assert_eq!(d.state_of("dead.example:8080"), CircuitState::Open);
        // Open for 2 s, within the 3 s hold: held, noted once, then a probe.
        let started = Instant::now();
        let probe = go(pass(&d, &dead, &backlog, &notes).await);
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(notes.lock().unwrap().len(), 1);
        assert_eq!(notes.lock().unwrap()[0].reason, WaitReason::CircuitOpen);
        // While the probe is out, another slot waits for it.
        let waiter = pass(&d, &dead, &backlog, &notes);
        tokio::pin!(waiter);
        assert!(tokio::time::timeout(Duration::from_millis(500), &mut waiter).await.is_err());
        // The probe fails: open again for 4 s, past the hold: handed back.
        probe.record(Call::Unhealthy);
        match waiter.await {
            Gate::Release { delay, waiting } => {
                assert_eq!(delay, Duration::from_secs(4), "the second cool-down");
                assert_eq!(waiting.reason, WaitReason::CircuitOpen);
            }
            _ => panic!("expected Release"),
        }
        // Each slot notes the outage once, and both name the same outage.
        let noted = notes.lock().unwrap().clone();
        assert_eq!(noted.len(), 2, "{noted:?}");
        assert_eq!(noted[0].since, noted[1].since);
        // A slot whose horizon comes before the cool-down ends is given up
        // at once: it could not be delivered in time.
        let started = Instant::now();
        let soon = Utc::now() + chrono::TimeDelta::seconds(2);
        let dead_key = destination_of(&dead);
        let gone =
            d.pass(dead_key.as_deref(), soon, &backlog, backlog.enter(), &CancellationToken::new(), |_| async {}).await;
        assert!(matches!(gone, Gate::GiveUp(_)));
        assert_eq!(started.elapsed(), Duration::ZERO);
        // Past its horizon, a slot is given up.
        let gone = d
            .pass(dead_key.as_deref(), Utc::now(), &backlog, backlog.enter(), &CancellationToken::new(), |_| async {})
            .await;
        assert!(matches!(gone, Gate::GiveUp(_)));
        // The probe after the cool-down succeeds: closed, and others go at once.
        tokio::time::advance(Duration::from_secs(4)).await;
        go(pass(&d, &dead, &backlog, &notes).await).record(Call::Healthy);
        assert_eq!(d.state_of("dead.example:8080"), CircuitState::Closed);
        go(pass(&d, &dead, &backlog, &notes).await).record(Call::Healthy);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_waiting_on_a_slow_probe_is_handed_back_after_the_hold() {
        let (d, backlog, notes, dead) = with_open_circuit(8, "http://dead.example/").await;
        tokio::time::advance(Duration::from_secs(2)).await;
        let _probe = go(pass(&d, &dead, &backlog, &notes).await);
        let started = Instant::now();
        match pass(&d, &dead, &backlog, &notes).await {
            Gate::Release { delay, waiting } => {
                assert_eq!(started.elapsed(), Duration::from_secs(3), "held for the hold");
                assert_eq!(delay, Duration::from_secs(3), "back after another hold");
                assert_eq!(waiting.reason, WaitReason::CircuitOpen);
            }
            _ => panic!("expected Release"),
        }
        assert_eq!(notes.lock().unwrap().len(), 1);
    }

    /// Held slots stay within the host's concurrency limit: the rest wait
    /// in the broker, not in the worker's prefetch.
    #[tokio::test(start_paused = true)]
    async fn at_most_max_per_host_slots_are_held_for_a_circuit() {
        let (d, backlog, notes, dead) = with_open_circuit(2, "http://dead.example/").await;
        let first = pass(&d, &dead, &backlog, &notes);
        let second = pass(&d, &dead, &backlog, &notes);
        tokio::pin!(first, second);
        assert!(tokio::time::timeout(Duration::from_millis(100), &mut first).await.is_err(), "held");
        assert!(tokio::time::timeout(Duration::from_millis(100), &mut second).await.is_err(), "held");
        let started = Instant::now();
        match pass(&d, &dead, &backlog, &notes).await {
            // Just after the 2 s cool-down ends, not before it.
            Gate::Release { delay, .. } => assert_eq!(delay, Duration::from_secs(2)),
            _ => panic!("expected Release"),
        }
        assert_eq!(started.elapsed(), Duration::ZERO, "handed back at once");
        // The held ones go to the probe when the cool-down ends.
        let probe = go(first.await);
        probe.record(Call::Healthy);
        go(second.await).record(Call::Healthy);
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_not_made_frees_its_place() {
        let (d, backlog, notes, dead) = with_open_circuit(8, "http://dead.example/").await;
        tokio::time::advance(Duration::from_secs(2)).await;
        let probe = go(pass(&d, &dead, &backlog, &notes).await);
        let waiter = pass(&d, &dead, &backlog, &notes);
        tokio::pin!(waiter);
        assert!(tokio::time::timeout(Duration::from_millis(100), &mut waiter).await.is_err());
        drop(probe);
        let next = go(waiter.await);
        next.record(Call::Healthy);
        assert_eq!(d.state_of("dead.example:80"), CircuitState::Closed);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_hosts_are_dropped_and_open_or_busy_ones_kept() {
        let long_outage = DestinationConfig {
            breaker: BreakerConfig {
                open_for: 2 * IDLE_EVICT_AFTER,
                open_max: 2 * IDLE_EVICT_AFTER,
                ..config(8).breaker
            },
            ..config(8)
        };
        let d = Destinations::new(long_outage);
        let backlog = Arc::new(DueBacklog::new(100));
        let notes = Mutex::new(Vec::new());
        go(pass(&d, &http("http://idle.example/"), &backlog, &notes).await).record(Call::Healthy);
        for _ in 0..4 {
            go(pass(&d, &http("http://dead.example/"), &backlog, &notes).await).record(Call::Unhealthy);
        }
        let busy = go(pass(&d, &http("http://busy.example/"), &backlog, &notes).await);
        let left = |at: Instant| {
            let mut hosts = d.hosts.lock().unwrap();
            evict(&mut hosts, at, false);
            let mut left: Vec<String> = hosts.keys().cloned().collect();
            left.sort();
            left
        };
        assert_eq!(left(Instant::now()).len(), 3, "none idle yet");
        assert_eq!(left(Instant::now() + IDLE_EVICT_AFTER), ["busy.example:80", "dead.example:80"]);
        busy.record(Call::Healthy);
        assert_eq!(left(Instant::now() + IDLE_EVICT_AFTER), ["dead.example:80"]);
        assert_eq!(left(Instant::now() + 3 * IDLE_EVICT_AFTER), Vec::<String>::new(), "its circuit half-open, idle");
    }
}
