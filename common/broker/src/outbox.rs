//! The outbox: how a ledger row committed `pending` becomes a message. The
//! store commits the row first and returns its message; this module
//! publishes it, waits for the broker's confirm, and only then stamps the
//! row `published_at`. So a worker never meets a message without its row,
//! and a publish lost on the way (a crash, the broker down) leaves the row
//! unstamped, for [`republish_unconfirmed`] to publish again. No row lock
//! is held while the broker answers.
//!
//! A message may thus go out twice (a stamp that failed, a lease that ran
//! out while its publish was slow): the worker starts a row only for the
//! attempt of its fire id that the row expects, and drops the other copy.

use std::time::Duration;

use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use domain::message::FireMessage;
use domain::slot::Status;
use store::ledger::{stamp_published, sweep};

use crate::publisher::Publisher;

/// Publishes committed `pending` rows' messages, each as its attempt, then
/// stamps them: the one order every publisher follows. A failed stamp is
/// harmless (the lease republishes, the worker drops the extra copy); it is
/// returned so the caller can log it.
pub async fn publish_then_stamp(
    publisher: &mut Publisher,
    client: &impl deadpool_postgres::GenericClient,
    messages: &[(FireMessage, u32)],
) -> anyhow::Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    publisher.publish_attempts(&as_batch(messages)).await?;
    let published: Vec<&FireMessage> = messages.iter().map(|(m, _)| m).collect();
    stamp_published(client, &published).await.map_err(PublishedNotStamped)?;
    Ok(())
}

/// The broker confirmed the messages, but their rows could not be stamped.
#[derive(Debug, thiserror::Error)]
#[error("published, but stamping published_at failed: {0}")]
pub struct PublishedNotStamped(#[source] pub tokio_postgres::Error);

/// Messages with their attempts, as the publisher takes them.
pub fn as_batch(messages: &[(FireMessage, u32)]) -> Vec<(&FireMessage, u32)> {
    messages.iter().map(|(m, a)| (m, *a)).collect()
}

/// Publishes again the claimed rows whose publish was never confirmed
/// after `grace` (leased by the store for another `grace`, so that two
/// schedulers sweeping at once do not both publish them), and stamps them.
/// Returns the messages published.
pub async fn republish_unconfirmed(
    pg: &Pool,
    publisher: &mut Publisher,
    grace: Duration,
) -> anyhow::Result<Vec<FireMessage>> {
    let leased = sweep::lease_unconfirmed(pg, grace).await?;
    publish_then_stamp(publisher, &pg.get().await?, &leased).await?;
    Ok(leased.into_iter().map(|(m, _)| m).collect())
}

/// Delivers again rows left `running` by a worker that is gone
/// ([`sweep::recover_running`]): back to `pending`, committed, then
/// published and stamped. Returns the messages published.
pub async fn recover_running(
    pg: &Pool,
    publisher: &mut Publisher,
    grace: Duration,
) -> anyhow::Result<Vec<(FireMessage, u32)>> {
    let recovered = sweep::recover_running(pg, grace).await?;
    publish_then_stamp(publisher, &pg.get().await?, &recovered).await?;
    Ok(recovered)
}

/// Publishes again the rows nothing was going to move
/// ([`sweep::move_on_stranded`], which stamped them as it moved them on).
/// Returns each row's status and its message.
pub async fn move_on_stranded(
    pg: &Pool,
    publisher: &mut Publisher,
    cutoff: DateTime<Utc>,
) -> anyhow::Result<Vec<(Status, FireMessage)>> {
    let moved = sweep::move_on_stranded(pg, cutoff).await?;
    if !moved.is_empty() {
        let batch: Vec<(&FireMessage, u32)> = moved.iter().map(|(_, (m, a))| (m, *a)).collect();
        publisher.publish_attempts(&batch).await?;
    }
    Ok(moved.into_iter().map(|(status, (m, _))| (status, m)).collect())
}
