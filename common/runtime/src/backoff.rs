//! Exponential backoff between tries of an operation that failed: the one
//! retry loop every component uses.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Doubles from its first delay up to [`Backoff::MAX`].
///
/// The cap is what a dependency's return costs: a caller asleep in its
/// backoff notices it up to `MAX` later. At 5 s, a broker or database
/// restart kept every process waiting up to 5 s after it was back, on top
/// of the backlog it left. One try per second per caller is still nothing
/// for a dependency (a cluster has a handful of processes, and the workers'
/// concurrent writes share batched statements).
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    started: std::time::Instant,
}

impl Backoff {
    pub const MAX: Duration = Duration::from_secs(1);

    pub fn new(first: Duration) -> Self {
        Self { next: first.min(Self::MAX), started: std::time::Instant::now() }
    }

    /// How long the operation has been tried: callers give up by this, not
    /// by the delay, which stops growing at `MAX`.
    pub fn trying_for(&self) -> Duration {
        self.started.elapsed()
    }

    /// What the next wait sleeps.
    pub fn delay(&self) -> Duration {
        self.next
    }

    /// Sleeps the current delay, then doubles it.
    pub async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(Self::MAX);
    }

    /// Like [`Backoff::wait`], but answers `false` as soon as `token` is
    /// cancelled: the caller stops retrying.
    pub async fn wait_unless_cancelled(&mut self, token: &CancellationToken) -> bool {
        tokio::select! {
            _ = token.cancelled() => false,
            _ = self.wait() => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn doubles_up_to_the_cap_and_stops_on_cancel() {
        let mut b = Backoff::new(Duration::from_millis(100));
        let mut seen = Vec::new();
        for _ in 0..8 {
            seen.push(b.delay().as_millis());
            b.wait().await;
        }
        assert_eq!(seen, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        let token = CancellationToken::new();
        token.cancel();
        assert!(!b.wait_unless_cancelled(&token).await);
    }
}
