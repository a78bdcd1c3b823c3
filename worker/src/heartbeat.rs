//! Liveness: this worker's row in `worker_heartbeats` (`run`), when the last
//! beat went out (`LastBeat`, which the verification of an armed row needs),
//! and which slots a task of this worker holds (`Holding`), so that the
//! periodic orphan check can give back the `running` rows no task handles.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use deadpool_postgres::Pool;
use runtime::health::{Report, Watchdog};
use tokio_util::sync::CancellationToken;

use store::ledger::delivery::{self as ledger, HeldSlot};

/// Heartbeats between two orphan checks (a scan of this worker's `running`
/// rows): 30 s.
const ORPHAN_CHECK_EVERY: u64 = 6;

/// Whether the session the last beat went out on is still open.
type SessionOpen = Box<dyn Fn() -> bool + Send + Sync>;

/// When this worker's last successful heartbeat went out, and on which
/// session. While the beat is recent and the session open, no other worker
/// can presume this one gone and take its rows.
#[derive(Default)]
pub(crate) struct LastBeat(Mutex<Option<(Instant, SessionOpen)>>);

impl LastBeat {
    /// Recorded before the beat is sent: the row's `seen_at` is no earlier.
    fn record(&self, sent: Instant, session_open: SessionOpen) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((sent, session_open));
    }

    /// A beat went out within the last two beat periods, so at least one
    /// period remains before anyone may presume this worker gone; and the
    /// session it went out on is open (once Postgres ends it, the others
    /// presume this worker gone at once).
    pub(crate) fn fresh(&self) -> bool {
        let recent = store::ledger::WORKER_GONE_AFTER - store::ledger::WORKER_HEARTBEAT_EVERY;
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|(sent, session_open)| sent.elapsed() < recent && session_open())
    }
}

/// How soon a heartbeat is tried again after its session was lost: the
/// others presume this worker gone until it beats on a new one.
const SESSION_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// The slots (with attempt) that a task of this worker is handling. A row
/// `running` under this worker's id with no entry here has no task: it is an
/// orphan, which any copy of its message may take back and which
/// `release_orphans` gives back; one with an entry must be left alone.
/// Outlives broker sessions: a task of a lost session may still be giving
/// its row back when the message returns.
#[derive(Default)]
pub(crate) struct Holding(Mutex<foldhash::HashSet<HeldSlot>>);

/// A task's entry in `Holding`, removed when the task ends.
pub(crate) struct Hold<'a> {
    holding: &'a Holding,
    slot: HeldSlot,
}

impl Holding {
    /// None when another task of this worker handles the same attempt.
    pub(crate) fn hold(&self, slot: HeldSlot) -> Option<Hold<'_>> {
        let inserted = self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(slot);
        // Lazily (`then`, not `then_some`): a `Hold` made for a slot already
        // held would be dropped at once, taking the other task's entry, and
        // under the lock of this very statement, which deadlocked the thread.
        inserted.then(|| Hold { holding: self, slot })
    }

    fn snapshot(&self) -> Vec<HeldSlot> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).iter().copied().collect()
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        self.holding.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.slot);
    }
}

/// Keeps this worker's row in `worker_heartbeats` fresh until `token` is
/// cancelled, then deletes it. Beats go out on one connection of their own,
/// whose backend pid the row records: when the process dies, Postgres ends
/// that session and the others presume this worker gone without waiting for
/// its heartbeat to age. The stuck-`running` sweep leaves alone what a
/// worker with a fresh heartbeat holds. A failed refresh is retried at the
/// next beat; three in a row make the rows this worker holds recoverable.
/// At start and every `ORPHAN_CHECK_EVERY` beats it also gives back the rows
/// under its id that no task of it handles. Each beat's outcome goes to
/// `beats` (for `/readyz`); `alive` is ticked every turn, and a statement
/// counts as a wait on Postgres.
pub(crate) async fn run(
    pg: Pool,
    worker_id: String,
    holding: Arc<Holding>,
    last_beat: Arc<LastBeat>,
    beats: Report,
    alive: Watchdog,
    token: CancellationToken,
) {
    let mut session: Option<Arc<deadpool_postgres::ClientWrapper>> = None;
    'beats: for beat_number in 0u64.. {
        // Waits on Postgres until the beat is written or has failed.
        let waiting = alive.waiting();
        if beat_number % ORPHAN_CHECK_EVERY == 0 {
            match ledger::release_orphans(&pg, &worker_id, holding.snapshot()).await {
                Ok(0) => {}
                Ok(rows) => {
                    tracing::warn!(rows, "gave back rows running under this worker with no task on them");
                    metrics::counter!(runtime::metrics::WORKER_ORPHANS_RELEASED_TOTAL).increment(rows);
                }
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "releasing orphaned rows failed"),
            }
        }
        let sent = Instant::now();
        let beat = async {
            let client = match session.take() {
                Some(client) if !client.is_closed() => client,
                // Out of the pool for good: the session must live as long
                // as the beats say it does.
                _ => Arc::new(deadpool_postgres::Object::take(pg.get().await?)),
            };
            store::heartbeats::beat(&client, &worker_id).await?;
            anyhow::Ok(client)
        };
        match beat.await {
            Ok(client) => {
                let probe = client.clone();
                last_beat.record(sent, Box::new(move || !probe.is_closed()));
                session = Some(client);
                beats.ok();
            }
            Err(e) => {
                beats.fail(format!("heartbeat failed: {e:#}"));
                tracing::warn!(error = %format!("{e:#}"), "worker heartbeat failed")
            }
        }
        drop(waiting);
        let next_beat = tokio::time::sleep(store::ledger::WORKER_HEARTBEAT_EVERY);
        tokio::pin!(next_beat);
        // A lost session is replaced at once, not at the next beat.
        loop {
            alive.tick();
            tokio::select! {
                _ = token.cancelled() => break 'beats,
                _ = &mut next_beat => break,
                _ = tokio::time::sleep(SESSION_RETRY) => {
                    if session.as_ref().is_none_or(|c| c.is_closed()) {
                        break;
                    }
                }
            }
        }
    }
    if let Ok(client) = pg.get().await {
        let _ = store::heartbeats::forget(&client, &worker_id).await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use chrono::Utc;

    use super::*;

    #[test]
    fn a_second_hold_on_a_held_slot_is_refused_and_leaves_the_first_in_place() {
        // On a thread of its own: the bug this guards against was a deadlock.
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let holding = Holding::default();
            let slot: HeldSlot = (uuid::Uuid::now_v7(), Utc::now(), 1);
            let first = holding.hold(slot).expect("a free slot is held");
            let second = holding.hold(slot).is_none();
            let still_held = holding.snapshot() == [slot];
            drop(first);
            let _ = done.send((second, still_held, holding.snapshot().is_empty()));
        });
        let (refused, still_held, released) =
            finished.recv_timeout(Duration::from_secs(5)).expect("holding a held slot deadlocked");
        assert!(refused, "a second task must not hold the same attempt");
        assert!(still_held, "the refused hold must not remove the first task's entry");
        assert!(released, "the entry goes when its task ends");
    }

    #[test]
    fn a_heartbeat_is_fresh_for_one_beat_less_than_others_wait_before_presuming_the_worker_gone() {
        let last_beat = LastBeat::default();
        assert!(!last_beat.fresh(), "no beat yet");
        last_beat.record(Instant::now(), Box::new(|| true));
        assert!(last_beat.fresh());
        let margin = store::ledger::WORKER_HEARTBEAT_EVERY;
        let ago = |d: Duration| Instant::now().checked_sub(d).expect("uptime");
        last_beat
            .record(ago(store::ledger::WORKER_GONE_AFTER - margin - Duration::from_millis(100)), Box::new(|| true));
        assert!(last_beat.fresh());
        last_beat.record(ago(store::ledger::WORKER_GONE_AFTER - margin), Box::new(|| true));
        assert!(!last_beat.fresh(), "within one beat of being presumed gone");
    }

    #[test]
    fn a_recent_beat_on_a_session_postgres_has_ended_is_not_fresh() {
        let last_beat = LastBeat::default();
        let open = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let probe = open.clone();
        last_beat.record(Instant::now(), Box::new(move || probe.load(std::sync::atomic::Ordering::Relaxed)));
        assert!(last_beat.fresh());
        open.store(false, std::sync::atomic::Ordering::Relaxed);
        assert!(!last_beat.fresh(), "the others presume this worker gone once its session ended");
    }
}
