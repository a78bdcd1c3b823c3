//! Backpressure in a burst: counts the messages past their due instant and
//! not yet delivered (`DueBacklog`, one `DueGuard` each), and while more are
//! due than can be in delivery at once, defers outcome writes (and so acks)
//! so that Postgres and the broker serve the deliveries first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// The longest an outcome write (and so its ack) waits for a burst to drain.
const OUTCOME_MAX_DEFER: Duration = Duration::from_secs(2);

/// Messages past their due instant and not yet delivered. While more are
/// due than can be in delivery at once (a burst: deliveries are queueing),
/// outcome writes (and so acks) wait, for at most `OUTCOME_MAX_DEFER`, so
/// that Postgres and the broker serve the deliveries first; the outcomes
/// follow in a few large statements. Under steady load the backlog stays
/// within the in-flight limit and outcomes are written at once.
pub(crate) struct DueBacklog {
    count: AtomicUsize,
    /// Deliveries that can run at once (`max_in_flight`).
    queueing_above: usize,
    drained: Notify,
}

impl DueBacklog {
    pub(crate) fn new(queueing_above: usize) -> Self {
        Self { count: Default::default(), queueing_above, drained: Default::default() }
    }

    /// Counts one message as due until the guard is dropped (once delivered).
    pub(crate) fn enter(self: &Arc<Self>) -> DueGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        DueGuard(self.clone())
    }

    /// More are due than can be in delivery at once: deliveries are queueing.
    pub(crate) fn is_queueing(&self) -> bool {
        self.count.load(Ordering::SeqCst) > self.queueing_above
    }

    /// What an outcome write waits for before it goes out.
    pub(crate) async fn defer_outcomes(&self) {
        self.drained_or(OUTCOME_MAX_DEFER).await
    }

    async fn drained_or(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            // Registered before the check, so a drain in between still wakes us.
            let drained = self.drained.notified();
            if self.count.load(Ordering::SeqCst) <= self.queueing_above {
                return;
            }
            tokio::select! {
                _ = drained => {}
                _ = tokio::time::sleep_until(deadline) => return,
            }
        }
    }
}

/// One due message in the backlog.
pub(crate) struct DueGuard(Arc<DueBacklog>);

impl Drop for DueGuard {
    fn drop(&mut self) {
        // Only the step back to the limit wakes the waiters.
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == self.0.queueing_above + 1 {
            self.0.drained.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn outcomes_wait_only_while_deliveries_queue_and_never_past_the_limit() {
        let backlog = Arc::new(DueBacklog::new(2));
        let steady: Vec<DueGuard> = (0..2).map(|_| backlog.enter()).collect();
        // Within the in-flight limit: no wait at all.
        let started = tokio::time::Instant::now();
        backlog.defer_outcomes().await;
        assert_eq!(started.elapsed(), Duration::ZERO);

        // A burst: the wait ends when the backlog falls back to the limit.
        let burst = backlog.enter();
        let waiter = tokio::spawn({
            let backlog = backlog.clone();
            async move {
                let started = tokio::time::Instant::now();
                backlog.defer_outcomes().await;
                started.elapsed()
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "outcomes must wait while deliveries queue");
        drop(burst);
        assert_eq!(waiter.await.unwrap(), Duration::from_millis(300));

        // A burst that does not drain: the wait is bounded.
        let stuck = backlog.enter();
        let started = tokio::time::Instant::now();
        backlog.defer_outcomes().await;
        assert_eq!(started.elapsed(), OUTCOME_MAX_DEFER);
        drop((stuck, steady));
    }
}
