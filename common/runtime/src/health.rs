//! Liveness and readiness of a scheduler or worker process: what its
//! metrics port answers on `/healthz` and `/readyz`
//! ([`crate::metrics::install_exporter`]).
//!
//! **Liveness** says the process's main loops still go round. Each loop
//! holds a [`Watchdog`] and ticks it as it turns; a loop that has not ticked
//! for its bound is stalled, and the process is restarted. A loop waiting on
//! an outside service (the core loop behind a dispatcher that retries
//! through a database outage, a worker reconnecting to its broker) says so
//! with [`Watchdog::waiting`] and counts as alive meanwhile: an outage must
//! never make Kubernetes restart every pod, which would not bring the
//! service back and would drop what the pods hold.
//!
//! **Readiness** is a set of named checks, each a function of state the
//! process already keeps (its loops' last results, kept in [`Report`]s).
//! A probe makes no round trip of its own, so it answers at once even while
//! a service hangs.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// What a readiness check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Working, with a fault named beside the checks (one Redis shard of
    /// two down): the process is still ready.
    Degraded(String),
    /// Not ready, and why.
    Failed(String),
}

impl From<Result<(), String>> for Verdict {
    fn from(result: Result<(), String>) -> Self {
        match result {
            Ok(()) => Verdict::Ok,
            Err(reason) => Verdict::Failed(reason),
        }
    }
}

type Check = Arc<dyn Fn() -> Verdict + Send + Sync>;

/// The process's watchdogs and readiness checks; clones share them.
#[derive(Clone, Default)]
pub struct Health {
    loops: Arc<Mutex<BTreeMap<&'static str, Watchdog>>>,
    checks: Arc<Mutex<BTreeMap<&'static str, Check>>>,
}

/// A probe's answer: its status and its JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub ok: bool,
    pub body: Value,
}

impl Health {
    pub fn new() -> Self {
        Self::default()
    }

    /// The watchdog of the loop `name`, which must tick at least every
    /// `bound` while it is not waiting on an outside service. A loop that
    /// starts again (a node run twice in one process) replaces its entry.
    pub fn watchdog(&self, name: &'static str, bound: Duration) -> Watchdog {
        let watchdog = Watchdog::new(bound);
        lock(&self.loops).insert(name, watchdog.clone());
        watchdog
    }

    /// Adds (or replaces) the readiness check `name`. It runs on every
    /// probe, so it must read state, never wait for a service.
    pub fn check(&self, name: &'static str, check: impl Fn() -> Verdict + Send + Sync + 'static) {
        lock(&self.checks).insert(name, Arc::new(check));
    }

    /// `/healthz`: alive while no watched loop is stalled.
    pub fn liveness(&self) -> Probe {
        let loops: Vec<(&'static str, Watchdog)> = lock(&self.loops).iter().map(|(n, w)| (*n, w.clone())).collect();
        let mut ok = true;
        let mut states = serde_json::Map::new();
        for (name, watchdog) in loops {
            let state = match watchdog.state() {
                LoopState::Turning => "ok".to_owned(),
                LoopState::Waiting => "waiting on a service".to_owned(),
                LoopState::Stalled(for_) => {
                    ok = false;
                    format!("stalled for {} s", for_.as_secs())
                }
            };
            states.insert(name.to_owned(), state.into());
        }
        Probe { ok, body: json!({ "live": ok, "loops": states }) }
    }

    /// `/readyz`: ready once checks are registered and none failed.
    pub fn readiness(&self) -> Probe {
        let checks: Vec<(&'static str, Check)> = lock(&self.checks).iter().map(|(n, c)| (*n, c.clone())).collect();
        // Before the process has registered its checks it knows nothing
        // about its services yet.
        let mut ok = !checks.is_empty();
        let mut results = serde_json::Map::new();
        let mut degraded = serde_json::Map::new();
        for (name, check) in checks {
            let result = match check() {
                Verdict::Ok => "ok".to_owned(),
                Verdict::Degraded(why) => {
                    degraded.insert(name.to_owned(), why.into());
                    "ok".to_owned()
                }
                Verdict::Failed(why) => {
                    ok = false;
                    why
                }
            };
            results.insert(name.to_owned(), result.into());
        }
        if results.is_empty() {
            results.insert("startup".to_owned(), "starting".into());
        }
        let mut body = json!({ "ready": ok, "checks": results });
        if !degraded.is_empty() {
            body["degraded"] = degraded.into();
        }
        Probe { ok, body }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One loop's sign of life. Ticking is an atomic store: cheap enough for
/// every turn of a hot loop.
#[derive(Clone)]
pub struct Watchdog(Arc<WatchdogState>);

struct WatchdogState {
    born: Instant,
    /// Milliseconds from `born` to the last tick.
    last_tick_ms: AtomicU64,
    /// Waits on outside services in progress.
    waiting: AtomicUsize,
    bound: Duration,
}

enum LoopState {
    Turning,
    Waiting,
    Stalled(Duration),
}

impl Watchdog {
    fn new(bound: Duration) -> Self {
        Self(Arc::new(WatchdogState {
            born: Instant::now(),
            last_tick_ms: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            bound,
        }))
    }

    /// The loop went round.
    pub fn tick(&self) {
        let ms = self.0.born.elapsed().as_millis() as u64;
        self.0.last_tick_ms.store(ms, Ordering::Relaxed);
    }

    /// The loop waits on an outside service until the guard is dropped
    /// (which ticks): alive meanwhile, however long the service takes.
    pub fn waiting(&self) -> Waiting {
        self.0.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(self.clone())
    }

    fn state(&self) -> LoopState {
        if self.0.waiting.load(Ordering::Relaxed) > 0 {
            return LoopState::Waiting;
        }
        let since =
            self.0.born.elapsed().saturating_sub(Duration::from_millis(self.0.last_tick_ms.load(Ordering::Relaxed)));
        if since > self.0.bound { LoopState::Stalled(since) } else { LoopState::Turning }
    }
}

/// A wait on an outside service ([`Watchdog::waiting`]).
pub struct Waiting(Watchdog);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.tick();
        self.0.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The longest reason a check gives: a driver's error can be long, a probe's
/// body stays small.
const REASON_MAX_CHARS: usize = 300;

/// The last outcome of something a loop does again and again (a heartbeat,
/// a clock check against the database), for a readiness check to read.
#[derive(Clone, Default)]
pub struct Report(Arc<Mutex<Outcome>>);

#[derive(Default)]
struct Outcome {
    ok_at: Option<Instant>,
    /// The failure since the last success, if any.
    failed: Option<String>,
}

impl Report {
    pub fn ok(&self) {
        let mut outcome = lock(&self.0);
        outcome.ok_at = Some(Instant::now());
        outcome.failed = None;
    }

    /// Records a failure; its text is redacted (an error may quote a
    /// connection string) and shortened.
    pub fn fail(&self, reason: impl std::fmt::Display) {
        let mut reason = domain::redact::text(&without_repeats(&reason.to_string()));
        if let Some((cut, _)) = reason.char_indices().nth(REASON_MAX_CHARS) {
            reason.truncate(cut);
            reason.push('…');
        }
        lock(&self.0).failed = Some(reason);
    }

    /// Ok when the last outcome was a success no older than `fresh_for`
    /// (`None`: of any age); otherwise why not.
    pub fn status(&self, fresh_for: Option<Duration>) -> Result<(), String> {
        let outcome = lock(&self.0);
        if let Some(reason) = &outcome.failed {
            return Err(reason.clone());
        }
        match outcome.ok_at {
            None => Err("not checked yet".to_owned()),
            Some(at) => match fresh_for {
                Some(bound) if at.elapsed() > bound => Err(format!("no answer for {} s", at.elapsed().as_secs())),
                _ => Ok(()),
            },
        }
    }
}

/// An error chain with each cause once: drivers wrap an error in layers
/// whose texts each end with their source's ("x: reset: reset: reset").
fn without_repeats(chain: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in chain.split(": ") {
        if parts.last() != Some(&part) {
            parts.push(part);
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_follows_its_last_outcome_and_ages() {
        let report = Report::default();
        assert_eq!(report.status(None), Err("not checked yet".to_owned()));
        report.ok();
        assert_eq!(report.status(Some(Duration::from_secs(60))), Ok(()));
        assert!(report.status(Some(Duration::ZERO)).is_err_and(|e| e.starts_with("no answer for")));
        report.fail("connecting to postgres://app:hunter2@db:5432/cronshard: connection refused");
        let reason = report.status(None).unwrap_err();
        assert!(!reason.contains("hunter2") && reason.contains("connection refused"), "{reason}");
        report.ok();
        assert_eq!(report.status(None), Ok(()));
        report.fail("creating a connection: Connection reset by peer: Connection reset by peer");
        assert_eq!(report.status(None), Err("creating a connection: Connection reset by peer".to_owned()));
        report.fail("x".repeat(1000));
        assert_eq!(report.status(None).unwrap_err().chars().count(), REASON_MAX_CHARS + 1);
    }

    #[test]
    fn readiness_names_every_check_and_fails_on_any_failure_but_not_on_a_degraded_one() {
        let health = Health::new();
        let before = health.readiness();
        assert!(!before.ok, "no checks yet: not ready");
        assert_eq!(before.body, json!({ "ready": false, "checks": { "startup": "starting" } }));
        let postgres = Report::default();
        postgres.ok();
        health.check("postgres", {
            let postgres = postgres.clone();
            move || postgres.status(None).into()
        });
        health.check("redis", || Verdict::Degraded("shard 2: connection refused".into()));
        let ready = health.readiness();
        assert!(ready.ok);
        assert_eq!(
            ready.body,
            json!({ "ready": true, "checks": { "postgres": "ok", "redis": "ok" },
                    "degraded": { "redis": "shard 2: connection refused" } })
        );
        postgres.fail("connection refused");
        let not_ready = health.readiness();
        assert!(!not_ready.ok);
        assert_eq!(not_ready.body["checks"]["postgres"], "connection refused");
        assert_eq!(not_ready.body["checks"]["redis"], "ok");
    }

    #[test]
    fn a_loop_is_stalled_past_its_bound_unless_it_waits_on_a_service() {
        let health = Health::new();
        assert!(health.liveness().ok, "no loops yet: alive");
        let core = health.watchdog("core", Duration::from_millis(50));
        assert!(health.liveness().ok);
        std::thread::sleep(Duration::from_millis(80));
        let stalled = health.liveness();
        assert!(!stalled.ok);
        assert!(stalled.body["loops"]["core"].as_str().unwrap().starts_with("stalled for"), "{}", stalled.body);
        core.tick();
        assert!(health.liveness().ok);
        let waiting = core.waiting();
        std::thread::sleep(Duration::from_millis(80));
        let live = health.liveness();
        assert!(live.ok, "a wait on a service is no stall");
        assert_eq!(live.body["loops"]["core"], "waiting on a service");
        drop(waiting);
        assert!(health.liveness().ok, "the wait's end counts as a tick");
    }
}
