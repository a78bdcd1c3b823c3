//! The backfill loop every scheduler runs: takes a running backfill that is
//! due (one node at a time: `store::backfills::take_due` locks its row with
//! SKIP LOCKED), starts as many of its next slots as its rate and
//! concurrency allow, and records the step in the same transaction as the
//! ledger rows it made. The messages go out after the commit; a node lost
//! between the two leaves `pending` rows the outbox sweep publishes, so no
//! slot is started twice and none is lost.

use std::time::Duration;

use anyhow::Context;
use chrono::TimeDelta;
use tokio_util::sync::CancellationToken;

use broker::publisher::Publisher;
use domain::backfill::{self, State};
use domain::slot::Status;
use store::backfills;

/// How often a node looks for a step while backfills are running.
const TICK: Duration = Duration::from_millis(100);
/// How often it looks while none is: a new backfill starts within this.
const IDLE_TICK: Duration = Duration::from_secs(1);
/// Most steps one tick takes (several backfills may be due).
const STEPS_PER_TICK: usize = 16;
/// When a backfill at its concurrency looks again.
const RECHECK: TimeDelta = TimeDelta::milliseconds(200);

pub async fn run(pool: deadpool_postgres::Pool, mut publisher: Publisher, node_id: String, token: CancellationToken) {
    let failures = runtime::telemetry::EveryInterval::new(Duration::from_secs(60));
    let mut wait = IDLE_TICK;
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        wait = IDLE_TICK;
        for _ in 0..STEPS_PER_TICK {
            match step(&pool, &mut publisher, &node_id).await {
                Ok(true) => wait = TICK,
                Ok(false) => break,
                Err(e) => {
                    if let Some(failed) = failures.add() {
                        tracing::warn!(error = %format!("{e:#}"), failed, "a backfill step failed; it is retried");
                    }
                    break;
                }
            }
        }
    }
}

/// One step of one due backfill; `false` when none was due.
async fn step(pool: &deadpool_postgres::Pool, publisher: &mut Publisher, node_id: &str) -> anyhow::Result<bool> {
    let mut client = pool.get().await?;
    let tx = client.transaction().await?;
    let Some(b) = backfills::take_due(&tx).await? else { return Ok(false) };
    let now = runtime::clock::now();
    let statuses = store::ledger::changes::backfilled_statuses(&tx, b.id, b.job_id, b.from, b.to).await?;
    let in_flight: i64 = [Status::Pending, Status::Running, Status::Retrying]
        .iter()
        .map(|s| statuses.get(s).copied().unwrap_or(0))
        .sum();
    let Some((version, _)) = store::jobs::version_for_fire(&tx, b.job_id, None).await? else {
        // The job was deleted: nothing more of it runs.
        backfills::finish(&tx, b.id, State::Cancelled).await?;
        tx.commit().await?;
        tracing::info!(backfill.id = %b.id, job.id = %b.job_id, "backfill stopped: its job was deleted");
        return Ok(true);
    };
    if b.remaining().is_empty() {
        if in_flight == 0 {
            backfills::finish(&tx, b.id, State::Done).await?;
            tracing::info!(backfill.id = %b.id, job.id = %b.job_id, slots = b.slots.len(), "backfill done");
        } else {
            backfills::advance(&tx, b.id, 0, 0, now + RECHECK).await?;
        }
        tx.commit().await?;
        return Ok(true);
    }
    let may = backfill::may_start(now, b.next_at, b.rate_per_second, in_flight as usize, b.max_concurrency as usize);
    if may == 0 {
        backfills::advance(&tx, b.id, 0, 0, now + RECHECK).await?;
        tx.commit().await?;
        return Ok(true);
    }
    // Slots the mode passes over cost no start: keep going until `may`
    // slots started or the plan (or this step's bound) is used up.
    let mut handled = 0;
    let mut started = Vec::new();
    let mut messages = Vec::new();
    let remaining = b.remaining();
    while started.len() < may && handled < remaining.len() && handled < backfill::SLOTS_MAX {
        let take = (may - started.len()).min(remaining.len() - handled);
        let slots = &remaining[handled..handled + take];
        let (rows, mut made) =
            store::ledger::changes::start_backfilled(&tx, b.id, b.job_id, version, node_id, slots, b.mode).await?;
        handled += take;
        started.extend(rows);
        messages.append(&mut made);
    }
    if let Some(overlap) = b.overlap {
        for (m, _) in &mut messages {
            m.overlap = overlap;
        }
    }
    let next_at = if started.is_empty() { now } else { backfill::next_start(now, started.len(), b.rate_per_second) };
    backfills::advance(&tx, b.id, handled, handled - started.len(), next_at).await?;
    tx.commit().await?;
    drop(client);
    if !messages.is_empty() {
        let client = pool.get().await?;
        // A failure leaves the rows `pending` and unstamped: the outbox
        // sweep publishes them.
        broker::outbox::publish_then_stamp(publisher, &client, &messages)
            .await
            .context("publishing a backfill's executions")?;
    }
    tracing::debug!(backfill.id = %b.id, started = started.len(), handled, "backfill step");
    Ok(true)
}
