//! The change feed: how job creates, updates, pauses and deletes reach every
//! scheduler.
//!
//! The first read is a full load in one REPEATABLE READ snapshot, which also
//! yields the snapshot's xmin. After that the feed re-reads rows whose
//! `change_xid >= xmin` of the previous read's snapshot: every transaction
//! below that xmin had finished before the previous read and was seen by it,
//! so no change is skipped even when transactions commit out of order (an
//! `updated_at > watermark` poll can skip one). A row may be read twice;
//! consumers compare versions. LISTEN (`store::notify`) wakes the poll at once,
//! the periodic poll covers lost notifications and LISTEN reconnects.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use deadpool_postgres::Pool;
use futures::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio_postgres::{AsyncMessage, NoTls};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use domain::job::JobSpec;
use runtime::backoff::Backoff;
use store::jobs::feed::{self, FeedJob};

#[derive(Debug, Clone)]
pub struct JobRow {
    pub id: Uuid,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Where its calendars' names are looked up.
    pub namespace: String,
    /// `None` when the job is deleted or paused: it must not fire.
    pub spec: Option<JobSpec>,
    /// The job is deleted: it is forgotten, nothing of it fires again.
    pub deleted: bool,
    /// Slots already fired, counted only for jobs with `max_runs`.
    pub runs: u64,
    /// Of those, the slots due at or after this version came into force:
    /// the node takes slots from then on and counts each it takes, so the
    /// ones it will take again must not count twice.
    pub runs_since_change: Vec<DateTime<Utc>>,
    /// Set when the job is (re)loaded rather than changed: its latest slot in
    /// the ledger within the misfire lookback, so the node can find slots
    /// nobody fired while the job had no live owner.
    pub history: Option<History>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct History {
    pub last_slot: Option<DateTime<Utc>>,
    /// The earliest slot whose row an older version still holds (not final)
    /// or a change cancelled for the version now in force: this version
    /// decides it, so the timer starts there.
    pub unsettled_from: Option<DateTime<Utc>>,
    /// The earliest slot before `last_slot`, within `GAP_WINDOW` of it and
    /// of this version, that has no ledger row: a slot some owner held only
    /// in memory (queued, lost to a lock race, waiting for its claim) when it
    /// stopped, while a later slot of the job was already in the ledger.
    pub first_gap: Option<DateTime<Utc>>,
    /// Slots before this were not looked at.
    pub looked_back_to: DateTime<Utc>,
    /// The job's earlier live versions in force within the lookback, oldest
    /// first: their slots that nobody fired (the job had no live owner
    /// while they were in force) are caught up under them.
    pub past: Vec<PastVersion>,
}

impl History {
    /// The instant up to which the ledger holds every slot of the job: its
    /// last slot, or just before its first slot without a row.
    pub fn decided_to(&self) -> Option<DateTime<Utc>> {
        match (self.last_slot, self.first_gap) {
            (Some(last), Some(gap)) if gap < last => Some(gap - chrono::TimeDelta::microseconds(1)),
            (last, _) => last,
        }
    }
}

/// A live version that is no longer the job's current one.
#[derive(Debug, Clone, PartialEq)]
pub struct PastVersion {
    pub version: i64,
    /// In force from this instant (inclusive) until `until` (exclusive).
    pub valid_from: DateTime<Utc>,
    pub until: DateTime<Utc>,
    pub spec: JobSpec,
}

/// Fills `history` for every row of a job not deleted (paused ones too: a
/// version before the pause may have slots to catch up), in two queries.
async fn fill_history(
    client: &impl deadpool_postgres::GenericClient,
    rows: &mut [JobRow],
    lookback: Duration,
) -> anyhow::Result<()> {
    let ids: Vec<Uuid> = rows.iter().filter(|r| !r.deleted).map(|r| r.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let since = runtime::clock::now() - chrono::TimeDelta::from_std(lookback)?;
    // Each version with the instant the next one replaced it; the live ones
    // that ended inside the lookback.
    let mut past: std::collections::HashMap<Uuid, Vec<PastVersion>> = std::collections::HashMap::new();
    for v in store::jobs::feed::live_versions_ended_since(client, &ids, since).await? {
        let Ok(spec) = serde_json::from_value::<JobSpec>(v.spec) else { continue };
        past.entry(v.job_id).or_default().push(PastVersion {
            version: v.version,
            valid_from: v.valid_from,
            until: v.until,
            spec,
        });
    }
    // Pruned to the partitions inside the lookback.
    let spans = store::ledger::read::spans(client, &ids, since, GAP_WINDOW).await?;
    for row in rows.iter_mut().filter(|r| !r.deleted) {
        let span = spans.get(&row.id).cloned().unwrap_or_default();
        let first_gap = first_gap(row, &span, since);
        row.history = Some(History {
            last_slot: span.last_slot,
            first_gap,
            unsettled_from: span.unsettled_from,
            looked_back_to: since,
            past: past.remove(&row.id).unwrap_or_default(),
        });
    }
    Ok(())
}

/// The job's first slot in [`GAP_WINDOW`] before its last ledger slot (and
/// since its last change) that has no row (see `History::first_gap`).
fn first_gap(row: &JobRow, span: &store::ledger::read::Span, since: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let (spec, last) = (row.spec.as_ref()?, span.last_slot?);
    let schedule = spec.compile(row.created_at).ok()?;
    let changed_at = row.created_at.max(row.updated_at);
    let from = (last - GAP_WINDOW).max(since).max(changed_at) - chrono::TimeDelta::microseconds(1);
    schedule.fires_after(from).take_while(|slot| *slot < last).find(|slot| !span.has_row_before_last(*slot))
}

/// How far before a job's last ledger slot a load looks for slots left
/// without a row. What a stopped owner can have held in memory is bounded
/// by its backlog: its dispatcher's queue and its catch-up queue, which
/// after a total outage held slots up to about 80 s late on the 2-core
/// benchmark machine. The check costs one key lookup per slot in the
/// window (the fire rate times the window, for a whole cluster's load).
const GAP_WINDOW: chrono::TimeDelta = chrono::TimeDelta::seconds(120);

const PAGE: i64 = 10_000;

fn parse(job: FeedJob) -> JobRow {
    let spec = if job.paused || job.deleted {
        None
    } else {
        match serde_json::from_value::<JobSpec>(job.spec) {
            Ok(spec) => Some(spec),
            Err(e) => {
                // Only the API writes specs, after validation; never crash a node over one row.
                tracing::error!(job.id = %job.id, error = %format!("{e:#}"), "stored job spec does not parse; ignoring job");
                None
            }
        }
    };
    JobRow {
        id: job.id,
        version: job.version,
        created_at: job.created_at,
        updated_at: job.updated_at.unwrap_or_default(),
        namespace: job.namespace,
        spec,
        deleted: job.deleted,
        runs: 0,
        runs_since_change: Vec::new(),
        history: None,
    }
}

/// Fills `runs` for the rows whose job has a `max_runs`, now or in an
/// earlier version still to catch up (call after `fill_history`), in one
/// query. Counts what the ledger still holds (its retention bounds the
/// history).
async fn count_runs(client: &impl deadpool_postgres::GenericClient, rows: &mut [JobRow]) -> anyhow::Result<()> {
    let has_max_runs = |r: &JobRow| {
        r.spec.as_ref().is_some_and(|s| s.schedule.max_runs.is_some())
            || r.history.as_ref().is_some_and(|h| h.past.iter().any(|p| p.spec.schedule.max_runs.is_some()))
    };
    let ids: Vec<Uuid> = rows.iter().filter(|r| has_max_runs(r)).map(|r| r.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let mut counts = store::ledger::read::runs(client, &ids).await?;
    for row in rows.iter_mut() {
        if let Some(runs) = counts.remove(&row.id) {
            row.runs = runs.total;
            row.runs_since_change = runs.since_change;
        }
    }
    Ok(())
}

/// The current state of the given jobs (those gained on a membership change).
pub async fn fetch(pool: &Pool, ids: &[Uuid], lookback: Duration) -> anyhow::Result<Vec<JobRow>> {
    let client = pool.get().await?;
    let ids = ids.to_vec();
    let mut rows: Vec<JobRow> = feed::by_ids(&client, &ids).await?.into_iter().map(parse).collect();
    fill_history(&client, &mut rows, lookback).await?;
    count_runs(&client, &mut rows).await?;
    Ok(rows)
}

/// Loads every live job in one snapshot, page by page into `out`, and returns
/// the snapshot's xmin: the watermark of the first poll.
pub async fn initial_load(pool: &Pool, lookback: Duration, out: &mpsc::Sender<Vec<JobRow>>) -> anyhow::Result<i64> {
    let mut client = pool.get().await?;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let started = std::time::Instant::now();
    let xmin = feed::snapshot_xmin(&tx).await?;
    let mut after = Uuid::nil();
    let mut jobs = 0;
    // Paused jobs too: a node must know them to own them (a version before
    // the pause may have slots to catch up) and to notice a resume.
    loop {
        let jobs_read = feed::live_page(&tx, after, PAGE).await?;
        let Some(last) = jobs_read.last() else { break };
        after = last.id;
        let full = jobs_read.len() as i64 == PAGE;
        let mut page: Vec<JobRow> = jobs_read.into_iter().map(parse).collect();
        let page_started = std::time::Instant::now();
        fill_history(&tx, &mut page, lookback).await?;
        let history_ms = page_started.elapsed().as_millis() as u64;
        count_runs(&tx, &mut page).await?;
        jobs += page.len();
        tracing::debug!(
            jobs = page.len(),
            history_ms,
            total_ms = page_started.elapsed().as_millis() as u64,
            "loaded a page of jobs"
        );
        if out.send(page).await.is_err() {
            break;
        }
        if !full {
            break;
        }
    }
    tx.commit().await?;
    // How long a restart takes to know its jobs bounds how late the first
    // slots fire after an outage: worth a line at every start.
    tracing::info!(jobs, elapsed_ms = started.elapsed().as_millis() as u64, "initial job load complete");
    Ok(xmin)
}

/// Rows changed since the snapshot whose xmin is `since`, and the new xmin.
pub async fn poll(pool: &Pool, since: i64) -> anyhow::Result<(Vec<JobRow>, i64)> {
    let client = pool.get().await?;
    let (jobs, xmin) = feed::changed_since(&client, since).await?;
    let mut changed: Vec<JobRow> = jobs.into_iter().map(parse).collect();
    count_runs(&client, &mut changed).await?;
    Ok((changed, xmin))
}

/// Keeps `out` fed with changes until cancelled.
pub async fn run(
    database_url: String,
    pool: Pool,
    mut since: i64,
    poll_interval: Duration,
    calendars_changed: Arc<Notify>,
    out: mpsc::Sender<Vec<JobRow>>,
    token: CancellationToken,
) {
    let (wake_tx, mut wake_rx) = mpsc::channel::<()>(1);
    tokio::spawn(listen(database_url, wake_tx, calendars_changed, token.clone()));
    let mut tick = tokio::time::interval(poll_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
            Some(()) = wake_rx.recv() => {}
        }
        match poll(&pool, since).await {
            Ok((rows, xmin)) => {
                since = xmin;
                if !rows.is_empty() && out.send(rows).await.is_err() {
                    return;
                }
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "change feed poll failed; retrying"),
        }
    }
}

/// LISTENs on a dedicated connection and turns notifications into wake-ups:
/// of the feed for job changes, of the calendar watcher for calendar
/// changes; reconnects with capped backoff.
async fn listen(
    database_url: String,
    wake: mpsc::Sender<()>,
    calendars_changed: Arc<Notify>,
    token: CancellationToken,
) {
    let mut backoff = Backoff::new(Duration::from_millis(100));
    while !token.is_cancelled() {
        let result: anyhow::Result<()> = async {
            let (client, mut connection) =
                tokio_postgres::connect(&database_url, NoTls).await.context("LISTEN connect")?;
            let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
            let statement = format!("LISTEN {}; LISTEN {}", store::notify::CHANNEL, store::calendars::CHANGES_CHANNEL);
            let listen = client.batch_execute(&statement);
            let mut listen = std::pin::pin!(listen);
            // The connection must be polled for LISTEN itself to complete.
            loop {
                tokio::select! {
                    r = &mut listen => { r?; break; }
                    m = messages.next() => if m.is_none() { anyhow::bail!("connection closed") },
                }
            }
            backoff = Backoff::new(Duration::from_millis(100));
            // Catch up on anything that changed while we were not listening.
            let _ = wake.try_send(());
            calendars_changed.notify_one();
            loop {
                tokio::select! {
                    _ = token.cancelled() => return Ok(()),
                    m = messages.next() => match m {
                        Some(Ok(AsyncMessage::Notification(n))) => {
                            if n.channel() == store::calendars::CHANGES_CHANNEL {
                                calendars_changed.notify_one();
                            } else {
                                let _ = wake.try_send(());
                            }
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Err(e.into()),
                        None => anyhow::bail!("connection closed"),
                    },
                }
            }
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %format!("{e:#}"), "job change LISTEN connection lost; reconnecting");
            if !backoff.wait_unless_cancelled(&token).await {
                return;
            }
        }
    }
}
