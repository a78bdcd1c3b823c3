//! How the schedulers hear of job changes at once: `LISTEN` on [`CHANNEL`],
//! woken by a `NOTIFY`. The periodic poll of the change feed is the safety
//! net when a notification is lost; a notification carries nothing.
//!
//! The `jobs` table's statement trigger notifies inside the writing
//! transaction, unless the transaction ran [`DEFER_TO_AFTER_COMMIT`]: then
//! the writer calls [`Announcer::changed`] after committing. The API's create
//! paths do, because a `NOTIFY` takes a database-wide lock at commit and
//! holds it until the commit is flushed to disk: with it in the transaction,
//! concurrent creates committed one after another instead of sharing flushes.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio::sync::Notify;

use runtime::backoff::Backoff;

/// The channel the schedulers listen on.
pub const CHANNEL: &str = "cronshard_jobs";

/// Run inside a transaction that writes `jobs`: its trigger sends no
/// notification; the writer calls [`Announcer::changed`] after the commit.
pub const DEFER_TO_AFTER_COMMIT: &str = "SET LOCAL cronshard.jobs_notify = 'after_commit'";

/// The same as an expression, for a write that is a statement of its own
/// (its transaction): evaluated in a CTE the write reads before its rows.
pub const DEFER_TO_AFTER_COMMIT_IN_STATEMENT: &str = "SELECT set_config('cronshard.jobs_notify', 'after_commit', true)";

/// How long one announcement is retried; past it the schedulers' poll
/// picks the change up.
const ANNOUNCE_RETRY_FOR: Duration = Duration::from_secs(10);

/// Sends one `NOTIFY` for any number of changes signalled while the last
/// one was on its way, on a connection of its own pool's.
#[derive(Clone)]
pub struct Announcer {
    pending: Arc<Notify>,
}

impl Announcer {
    /// Starts the announcing task (within a Tokio runtime).
    pub fn start(pg: Pool) -> Self {
        let pending = Arc::new(Notify::new());
        tokio::spawn(announce(pg, pending.clone()));
        Self { pending }
    }

    /// Jobs were changed and committed: wake the schedulers.
    pub fn changed(&self) {
        // Stores one permit when the task is busy: a change committed
        // while a NOTIFY is in flight gets a NOTIFY of its own after it.
        self.pending.notify_one();
    }
}

async fn announce(pg: Pool, pending: Arc<Notify>) {
    let statement = format!("NOTIFY {CHANNEL}");
    loop {
        pending.notified().await;
        let mut backoff = Backoff::new(Duration::from_millis(50));
        loop {
            let sent: anyhow::Result<()> = async { Ok(pg.get().await?.batch_execute(&statement).await?) }.await;
            match sent {
                Ok(()) => break,
                Err(e) if backoff.trying_for() < ANNOUNCE_RETRY_FOR => {
                    tracing::debug!(error = %format!("{e:#}"), "announcing job changes failed; retrying");
                    backoff.wait().await;
                }
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "announcing job changes failed; the schedulers' poll will see them");
                    break;
                }
            }
        }
    }
}
