//! Turning due slots into published messages, in batches:
//!
//! 1. **Lock** every slot with one pipelined `SET lock NX PX` on a Redis
//!    shard. Losers skip the database; if Redis is unreachable every slot
//!    counts as won and the ledger decides.
//! 2. **Claim** the won slots with one multi-row `INSERT … ON CONFLICT`: only
//!    rows this node actually inserted (with a fresh fire id) are published,
//!    so a lost lock (Redis failover, flush) cannot cause a second execution.
//!    The insert joins `jobs`, so a slot of a job deleted, paused or changed
//!    since the node last heard of it is never claimed.
//! 3. **Publish** with streamed publisher confirms, then stamp `published_at`.
//! 4. **Verify** lost slots after a grace period: if the lock winner died
//!    before claiming, the slot has no ledger row and this node claims it.
//!
//! Rows claimed but never stamped (crash, broker outage) are republished by
//! the outbox sweep. Failures delay a batch, they never drop it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::Pool as PgPool;
use runtime::redis::Pool as RedisPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use broker::publisher::Publisher;
use domain::message::FireMessage;
use runtime::backoff::Backoff;
use runtime::redis::Keys;
use store::ledger::claim::{self as ledger_claim, Decided, Slot, SlotState};

use crate::lookahead::DispatchPace;

pub mod lock;
mod sweeps;

/// Times one step of the dispatcher: it does one thing at a time, so a slow
/// step delays every slot behind it.
async fn timed<T>(stage: &'static str, work: impl std::future::Future<Output = T>) -> T {
    runtime::telemetry::timed(runtime::metrics::DISPATCH_STAGE_SECONDS, stage, work).await
}

/// Slots claimed, published and stamped together. A claimed row waits for
/// its stamp until its whole chunk is published, and the outbox sweep of
/// every node republishes a row unstamped for `outbox_grace` (10 s): a
/// 10,000-slot batch published at the broker's pace during a herd took
/// longer than that, and ~900 rows per 100,000 went out twice.
const CLAIM_CHUNK: usize = 1_000;

/// A slot held by a row of an older version is asked about again this long
/// after its due instant: the worker holding the row decides it at the due
/// instant (delivered, or cancelled for the version in force).
const RECHECK_AFTER_DUE: TimeDelta = TimeDelta::milliseconds(300);
/// And then this often while the row is still not final.
const RECHECK_EVERY: TimeDelta = TimeDelta::milliseconds(500);
/// For at most this long after the slot: by then a row still held is not
/// being moved by anyone, and the stranded-row sweep moves it on.
const RECHECK_FOR: TimeDelta = TimeDelta::minutes(30);
/// A row cancelled by a change this long ago and not re-taken by the
/// version in force is the `sweep_unretaken`'s: the owners' re-checks take
/// it within a second when they are alive.
const UNRETAKEN_GRACE: Duration = Duration::from_secs(5);
/// How far back `sweep_unretaken` looks (an index range on the slot).
const UNRETAKEN_LOOKBACK: Duration = Duration::from_secs(3600);

/// On stop, a claim or publish that keeps failing is given up after this
/// long: the other owner (or this node's restart) covers those slots.
const GIVE_UP_ON_STOP_AFTER: Duration = Duration::from_secs(3);

/// What the core loop hands the dispatcher.
#[derive(Debug)]
pub enum Work {
    Fire(Vec<Slot>),
    /// Slots decided without firing (misfires, calendar exclusions). They
    /// are written ahead of the next claim of a slot of the same job, or
    /// while the dispatcher has nothing to fire (see `Unrecorded`).
    Record(Vec<Decided>),
}

/// Rows written per statement when the dispatcher writes decisions with
/// nothing to fire: about 40 ms of Postgres here, so a slot handed over
/// meanwhile waits no longer than that (slots are handed over ahead of
/// their due instant).
const RECORD_IDLE_CHUNK: usize = 5_000;

/// Decided slots not yet written, by job.
///
/// A job's ledger must stay a prefix in time: a later slot of a job is
/// never claimed while its earlier decided slots exist only in this node's
/// memory (a node that stopped then would leave them to nobody: loads
/// start after the job's last ledger slot). Writing every decision before
/// any further claim kept that, but put them all in front of every job's
/// fires: after a 5-minute total outage, half a million misfire rows held
/// the first late fire for 8 s. Now a job's decisions are written right
/// before a claim of one of its slots, and the rest while the dispatcher
/// is idle, so the prefix rule holds per job and one job's decisions never
/// delay another's fires.
#[derive(Debug, Default)]
pub(crate) struct Unrecorded {
    by_job: std::collections::HashMap<Uuid, Vec<Decided>>,
    /// Jobs in the order their first decision came, for the idle writes
    /// (an id whose rows were taken meanwhile is passed over).
    order: VecDeque<Uuid>,
}

impl Unrecorded {
    pub(crate) fn add(&mut self, rows: Vec<Decided>) {
        for row in rows {
            let job = row.slot.job_id;
            let entry = self.by_job.entry(job).or_default();
            if entry.is_empty() {
                self.order.push_back(job);
            }
            entry.push(row);
        }
        // Ids whose rows a claim took stay in `order` until an idle write
        // passes them; a dispatcher that is never idle must not collect them.
        if self.order.len() > 2 * self.by_job.len() + 1024 {
            let mut seen = std::collections::HashSet::new();
            let by_job = &self.by_job;
            self.order.retain(|job| by_job.contains_key(job) && seen.insert(*job));
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.by_job.is_empty()
    }

    /// Every decision of the jobs of `slots`.
    pub(crate) fn take_for(&mut self, slots: &[Slot]) -> Vec<Decided> {
        let mut rows = Vec::new();
        for slot in slots {
            if let Some(mut job_rows) = self.by_job.remove(&slot.job_id) {
                rows.append(&mut job_rows);
            }
        }
        rows
    }

    /// Whole jobs' decisions, oldest job first, until `max_rows` are taken.
    pub(crate) fn take_chunk(&mut self, max_rows: usize) -> Vec<Decided> {
        let mut rows = Vec::new();
        while rows.len() < max_rows {
            let Some(job) = self.order.pop_front() else { break };
            if let Some(mut job_rows) = self.by_job.remove(&job) {
                rows.append(&mut job_rows);
            }
        }
        rows
    }
}

#[derive(Debug, Clone)]
pub struct DispatchConfig {
    pub node_id: String,
    pub keys: Keys,
    /// How long after a lost lock race the slot is checked for a ledger row
    /// (taken over when the winner has not claimed it by then).
    pub verify_after: Duration,
    /// Age after which a claimed, unpublished row is republished.
    pub outbox_grace: Duration,
    /// A row `running` longer than its attempt timeout plus this is
    /// recovered: its worker and its message are gone.
    pub running_grace: Duration,
    /// A `pending` row this long past its due instant and its publish, or a
    /// `retrying` row this long past its next attempt, is stranded.
    pub stranded_after: Duration,
}

pub struct Dispatcher {
    pub config: DispatchConfig,
    pub pg: PgPool,
    pub redis: Vec<RedisPool>,
    pub publisher: Publisher,
    /// Slots to ask about again, and when: those whose lock another node
    /// won, and those held by a row of an older version.
    verify: VecDeque<(DateTime<Utc>, Slot)>,
    /// Published messages whose rows get `published_at` once `STAMP_AFTER`
    /// has passed, oldest first.
    unstamped: VecDeque<(std::time::Instant, Vec<FireMessage>)>,
    unrecorded: Unrecorded,
    /// What the lookahead reads of this dispatcher's pace.
    pace: Arc<DispatchPace>,
    /// When the stranded-row sweep last found the queues caught up.
    queues_caught_up_at: Option<DateTime<Utc>>,
    /// Batches whose locks timed out, reported once in a while.
    lock_timeouts: runtime::telemetry::EveryInterval,
}

/// How long after its confirm a published row is stamped. By then a worker
/// has usually taken the row (a pre-armed message is taken on arrival),
/// and the stamp, which only touches `pending` rows, writes nothing; stamped
/// at once, half the rows of a 2,000 fires/s run got a row version each.
/// Well inside `outbox_grace`, after which an unstamped row is republished.
const STAMP_AFTER: Duration = Duration::from_secs(1);

impl Dispatcher {
    pub fn new(config: DispatchConfig, pg: PgPool, redis: Vec<RedisPool>, publisher: Publisher) -> Self {
        Self {
            config,
            pg,
            redis,
            publisher,
            verify: VecDeque::new(),
            unstamped: VecDeque::new(),
            unrecorded: Unrecorded::default(),
            pace: Arc::default(),
            queues_caught_up_at: None,
            lock_timeouts: runtime::telemetry::EveryInterval::new(Duration::from_secs(10)),
        }
    }

    /// The pace this dispatcher measures, for the node's lookahead.
    pub fn pace(&self) -> Arc<DispatchPace> {
        Arc::clone(&self.pace)
    }

    /// Consumes batches until the channel closes (the timer stopped), so
    /// every slot handed over before shutdown is still claimed and published.
    pub async fn run(mut self, mut batches: mpsc::Receiver<Work>, token: CancellationToken) {
        let mut sweep = tokio::time::interval(self.config.outbox_grace.max(Duration::from_secs(1)));
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut verify_tick = tokio::time::interval(Duration::from_millis(500));
        verify_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                work = batches.recv() => match work {
                    Some(Work::Fire(mut slots)) => {
                        // The timer hands over what entered the lookahead since
                        // its last wake, often a few slots; what queued up while
                        // the last batch was out goes together, for the same
                        // round trips.
                        while slots.len() < CLAIM_CHUNK {
                            match batches.try_recv() {
                                Ok(Work::Fire(more)) => slots.extend(more),
                                Ok(Work::Record(rows)) => self.unrecorded.add(rows),
                                Err(_) => break,
                            }
                        }
                        let (count, started) = (slots.len(), std::time::Instant::now());
                        timed("fire", self.fire(slots, &token)).await;
                        self.pace.record(count, started.elapsed());
                    }
                    Some(Work::Record(rows)) => self.unrecorded.add(rows),
                    None => {
                        self.settle_lost_on_stop().await;
                        self.stamp(true).await;
                        // What no claim took along. One try per chunk: the
                        // next load decides these slots again if they are
                        // not written (none of their jobs' later slots was
                        // claimed here).
                        while !self.unrecorded.is_empty() {
                            let rows = self.unrecorded.take_chunk(RECORD_IDLE_CHUNK);
                            if let Err(e) = timed("record", self.try_record(&rows)).await {
                                tracing::warn!(error = %format!("{e:#}"), "writing decided slots on stop failed; the next load decides them again");
                                break;
                            }
                        }
                        break;
                    }
                },
                _ = std::future::ready(()), if !self.unrecorded.is_empty() && batches.is_empty() => {
                    let rows = self.unrecorded.take_chunk(RECORD_IDLE_CHUNK);
                    timed("record", self.record(rows)).await;
                }
                _ = verify_tick.tick(), if !token.is_cancelled() => {
                    timed("verify", self.verify_lost()).await;
                    self.stamp(false).await;
                }
                _ = sweep.tick(), if !token.is_cancelled() => {
                    if let Err(e) = timed("sweep", self.sweep_outbox()).await {
                        tracing::warn!(error = %format!("{e:#}"), "outbox sweep failed");
                    }
                    if let Err(e) = timed("recover", self.recover_running()).await {
                        tracing::warn!(error = %format!("{e:#}"), "recovering stuck running rows failed");
                    }
                    if let Err(e) = timed("stranded", self.sweep_stranded()).await {
                        tracing::warn!(error = %format!("{e:#}"), "sweeping stranded ledger rows failed");
                    }
                    if let Err(e) = timed("unretaken", self.sweep_unretaken()).await {
                        tracing::warn!(error = %format!("{e:#}"), "re-taking cancelled slots failed");
                    }
                }
            }
        }
    }

    /// Locks, claims and publishes one batch, retrying until it is done, a
    /// chunk at a time: each chunk is claimed right after its locks are
    /// taken. Locking a whole batch first held the locks of its last chunks
    /// for seconds before their claims when the dispatcher was behind; the
    /// other owner, which lost those races, re-checks a slot only at its
    /// due instant, and a winner stopped in between left the slot to that
    /// re-check alone.
    pub async fn fire(&mut self, slots: Vec<Slot>, token: &CancellationToken) {
        for chunk in slots.chunks(CLAIM_CHUNK) {
            self.fire_chunk(chunk, token).await;
        }
    }

    async fn fire_chunk(&mut self, slots: &[Slot], token: &CancellationToken) {
        if slots.is_empty() {
            return;
        }
        let won = timed("lock", self.lock(slots)).await;
        let (mine, lost): (Vec<_>, Vec<_>) = slots.iter().cloned().zip(won).partition(|(_, won)| *won);
        metrics::counter!(runtime::metrics::LOCK_WINS_TOTAL).increment(mine.len() as u64);
        metrics::counter!(runtime::metrics::LOCK_LOSSES_TOTAL).increment(lost.len() as u64);
        // A lost slot is checked `verify_after` after the race, ahead of its
        // due instant when it was raced ahead of it. The winner claims right
        // after its lock, so a slot still open then has a winner that cannot
        // claim (crashed, or cut off from Postgres while it reaches Redis):
        // taken over then, it is not late at all. (Checked at the due
        // instant, a herd's losers read every one of its rows in the instant
        // its deliveries start, competing with them.) A winner that is merely
        // slow loses nothing: the claim is idempotent, and its own claim then
        // conflicts. A change after the check is not the loser's business:
        // every owner of the version in force re-takes a cancelled slot.
        let verify_at = runtime::clock::now() + TimeDelta::from_std(self.config.verify_after).unwrap_or_default();
        for (slot, _) in lost {
            self.verify.push_back((verify_at, slot));
        }
        let mine: Vec<Slot> = mine.into_iter().map(|(s, _)| s).collect();
        self.claim_and_publish(&mine, token).await;
    }

    async fn claim_and_publish(&mut self, slots: &[Slot], token: &CancellationToken) {
        if slots.is_empty() {
            return;
        }
        let mut backoff = Backoff::new(Duration::from_millis(100));
        let claimed = loop {
            match timed("claim", self.claim(slots)).await {
                Ok(c) => break c,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), slots = slots.len(), "claiming slots failed; retrying");
                    metrics::counter!(runtime::metrics::CLAIM_RETRIES_TOTAL).increment(1);
                    // On shutdown the other owner (or our restart) covers these.
                    if token.is_cancelled() && backoff.trying_for() > GIVE_UP_ON_STOP_AFTER {
                        return;
                    }
                    backoff.wait().await;
                }
            }
        };
        let conflicts = slots.len() - claimed.len();
        metrics::counter!(runtime::metrics::CLAIM_CONFLICTS_TOTAL).increment(conflicts as u64);
        if conflicts > 0 {
            // A row of an older version (armed before an edit, a pause and a
            // resume) is decided by its worker at the due instant; if it is
            // cancelled, the slot is this version's to take. Without a second
            // look it was lost.
            let taken: std::collections::HashSet<(Uuid, DateTime<Utc>)> =
                claimed.iter().map(|(m, _)| (m.job_id, m.scheduled_at)).collect();
            let conflicted: Vec<Slot> =
                slots.iter().filter(|s| !taken.contains(&(s.job_id, s.scheduled_at))).cloned().collect();
            match self.check_slots(&conflicted).await {
                Ok(states) => {
                    let waiting = conflicted
                        .into_iter()
                        .zip(states)
                        .filter(|(_, state)| *state == SlotState::HeldByOlderVersion)
                        .map(|(s, _)| s)
                        .collect();
                    self.wait_for_older_versions(waiting, runtime::clock::now());
                }
                Err(e) => {
                    // Asked again with the lost slots; the claim is idempotent.
                    tracing::warn!(error = %format!("{e:#}"), "checking conflicting slots failed; will retry");
                    let at = runtime::clock::now() + RECHECK_EVERY;
                    self.verify.extend(conflicted.into_iter().map(|s| (at, s)));
                }
            }
        }
        self.publish(claimed, token).await;
    }

    /// Publishes claimed rows, retrying until the broker confirms; their
    /// stamps follow `STAMP_AFTER` later, in one statement.
    async fn publish(&mut self, claimed: Vec<(FireMessage, u32)>, token: &CancellationToken) {
        if claimed.is_empty() {
            return;
        }
        let batch = broker::outbox::as_batch(&claimed);
        let mut backoff = Backoff::new(Duration::from_millis(100));
        loop {
            match timed("publish", self.publisher.publish_attempts(&batch)).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), messages = batch.len(), "publishing failed; retrying");
                    metrics::counter!(runtime::metrics::PUBLISH_RETRIES_TOTAL).increment(1);
                    // Claimed rows stay pending: the outbox sweep of any node republishes them.
                    if token.is_cancelled() && backoff.trying_for() > GIVE_UP_ON_STOP_AFTER {
                        return;
                    }
                    backoff.wait().await;
                }
            }
        }
        let messages: Vec<FireMessage> = claimed.into_iter().map(|(m, _)| m).collect();
        let now = runtime::clock::now();
        for m in &messages {
            let lateness = (now - m.due_at).num_milliseconds() as f64 / 1000.0;
            metrics::histogram!(runtime::metrics::PUBLISH_LEAD_SECONDS).record(-lateness);
        }
        metrics::counter!(runtime::metrics::FIRES_TOTAL).increment(messages.len() as u64);
        self.unstamped.push_back((std::time::Instant::now(), messages));
        self.stamp(false).await;
    }

    /// Stamps `published_at` on the published rows whose `STAMP_AFTER` has
    /// passed (`all`: every one, when stopping), in one statement.
    async fn stamp(&mut self, all: bool) {
        let mut due = Vec::new();
        while let Some((at, _)) = self.unstamped.front()
            && (all || at.elapsed() >= STAMP_AFTER)
        {
            due.extend(self.unstamped.pop_front().map(|(_, m)| m).unwrap_or_default());
        }
        if due.is_empty() {
            return;
        }
        if let Err(e) = timed("stamp", self.mark_published(&due)).await {
            // Harmless: the sweep republishes and the worker drops the duplicate.
            tracing::warn!(error = %format!("{e:#}"), "stamping published_at failed");
        }
    }

    /// Inserts rows for slots decided without firing; a row that exists
    /// (another owner decided or fired the slot) is left alone.
    async fn record(&self, rows: Vec<Decided>) {
        let mut backoff = Backoff::new(Duration::from_millis(100));
        for attempt in 0.. {
            match self.try_record(&rows).await {
                Ok(_) => return,
                Err(e) if attempt < 20 => {
                    tracing::warn!(error = %format!("{e:#}"), "recording misfire decisions failed; retrying");
                    backoff.wait().await;
                }
                Err(e) => {
                    // The next load of these jobs decides the same slots again.
                    tracing::error!(error = %format!("{e:#}"), rows = rows.len(), "giving up recording misfire decisions");
                    return;
                }
            }
        }
    }

    async fn try_record(&self, rows: &[Decided]) -> anyhow::Result<u64> {
        let client = self.pg.get().await?;
        let n = ledger_claim::record_decided(&client, &self.config.node_id, rows).await?;
        metrics::counter!(runtime::metrics::MISFIRE_RECORDED_TOTAL).increment(n);
        Ok(n)
    }

    /// Claims the slots, after writing what this node decided of the same
    /// jobs' earlier slots (see [`Unrecorded`]); returns the messages of
    /// those this node took.
    async fn claim(&mut self, slots: &[Slot]) -> anyhow::Result<Vec<(FireMessage, u32)>> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let ahead = self.unrecorded.take_for(slots);
        if !ahead.is_empty()
            && let Err(e) = timed("record", self.try_record(&ahead)).await
        {
            // Kept for the retry of this claim: never claimed without them.
            self.unrecorded.add(ahead);
            return Err(e);
        }
        let mut client = self.pg.get().await?;
        Ok(ledger_claim::claim(&mut client, &self.config.node_id, slots).await?)
    }

    async fn check_slots(&self, slots: &[Slot]) -> anyhow::Result<Vec<SlotState>> {
        let client = self.pg.get().await?;
        Ok(ledger_claim::check_slots(&client, slots).await?)
    }

    async fn mark_published(&self, messages: &[FireMessage]) -> anyhow::Result<()> {
        let client = self.pg.get().await?;
        let messages: Vec<&FireMessage> = messages.iter().collect();
        store::ledger::stamp_published(&client, &messages).await?;
        Ok(())
    }

    /// Re-checks the slots this node did not claim: those whose lock another
    /// node won (claimed here if the winner died before claiming), and those
    /// held by a row of an older version (re-taken here once that row is
    /// cancelled; left alone once it is delivered).
    async fn verify_lost(&mut self) {
        let now = runtime::clock::now();
        // Not in order of `at` (lost slots wait longer than re-checks), and
        // at most a few batches long: a scan is enough.
        let (due, waiting): (Vec<_>, Vec<_>) = self.verify.drain(..).partition(|(at, _)| *at <= now);
        self.verify = waiting.into();
        let due: Vec<Slot> = due.into_iter().map(|(_, s)| s).collect();
        if due.is_empty() {
            return;
        }
        let token = CancellationToken::new();
        let before = due.len();
        let checked = async {
            let states = self.check_slots(&due).await?;
            let (mut open, mut waiting) = (Vec::new(), Vec::new());
            for (slot, state) in due.iter().zip(states) {
                match state {
                    SlotState::Open => open.push(slot.clone()),
                    SlotState::HeldByOlderVersion => waiting.push(slot.clone()),
                    SlotState::Settled => {}
                }
            }
            // Claiming is idempotent: a slot the winner claims meanwhile simply conflicts.
            anyhow::Ok((self.claim(&open).await?, waiting))
        };
        match checked.await {
            Ok((claimed, waiting)) => {
                if !claimed.is_empty() {
                    tracing::warn!(slots = claimed.len(), checked = before, "claimed slots nobody else had");
                    metrics::counter!(runtime::metrics::TAKEOVER_CLAIMS_TOTAL).increment(claimed.len() as u64);
                }
                self.wait_for_older_versions(waiting, now);
                self.publish(claimed, &token).await;
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "verifying lost slots failed; will retry");
                let retry_at = now + TimeDelta::seconds(1);
                self.verify.extend(due.into_iter().map(|s| (retry_at, s)));
            }
        }
    }

    /// On stop, asks at once about every slot still waiting for a re-check:
    /// nobody else remembers them. A slot whose lock the other owner won
    /// and has not claimed yet (its dispatcher far behind, or stopping too)
    /// is claimed here; the claim is idempotent, so a winner that claims
    /// meanwhile only conflicts. Left to wait, such a slot was lost when
    /// both owners stopped while a later slot of its job was already in the
    /// ledger (the next owners start after the job's last ledger slot).
    async fn settle_lost_on_stop(&mut self) {
        if self.verify.is_empty() {
            return;
        }
        let waiting = self.verify.len();
        let now = runtime::clock::now();
        for (at, _) in self.verify.iter_mut() {
            *at = (*at).min(now);
        }
        self.verify_lost().await;
        // What still waits (held by an older version's row, or the check
        // failed) is left to the other nodes' sweeps.
        tracing::info!(checked = waiting, left = self.verify.len(), "re-checked lost slots before stopping");
    }

    /// Asks again about slots held by a row of an older version, shortly
    /// after their due instant (when the worker holding the row decides it)
    /// and then every `RECHECK_EVERY`, for at most `RECHECK_FOR` after the
    /// slot; a row still not final then is the stranded-row sweep's.
    fn wait_for_older_versions(&mut self, slots: Vec<Slot>, now: DateTime<Utc>) {
        for slot in slots {
            if now - slot.scheduled_at > RECHECK_FOR {
                tracing::warn!(job.id = %slot.job_id, slot = %slot.scheduled_at, "gave up waiting for an older version's row");
                continue;
            }
            let at = (slot.scheduled_at + RECHECK_AFTER_DUE).max(now + RECHECK_EVERY);
            self.verify.push_back((at, slot));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::slot::{Status, Trigger};

    fn decided(job: Uuid, k: i64) -> Decided {
        let at = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::seconds(k);
        Decided::one(
            Slot { job_id: job, scheduled_at: at, job_version: 1, trigger: Trigger::Misfire, max_runs: None },
            Status::Skipped,
            "test".into(),
        )
    }

    #[test]
    fn decisions_go_with_their_jobs_claims_or_whole_per_job_in_arrival_order() {
        let (a, b, c) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let mut unrecorded = Unrecorded::default();
        unrecorded.add(vec![decided(a, 1), decided(b, 1), decided(a, 2)]);
        unrecorded.add(vec![decided(c, 1), decided(b, 2)]);
        let slot_of_b = decided(b, 3).slot;
        let taken: Vec<(Uuid, i64)> = unrecorded
            .take_for(&[slot_of_b])
            .iter()
            .map(|d| (d.slot.job_id, d.slot.scheduled_at.timestamp()))
            .collect();
        assert_eq!(taken, vec![(b, 1), (b, 2)]);
        // Whole jobs, oldest first, past the limit rather than splitting one.
        let chunk: Vec<Uuid> = unrecorded.take_chunk(1).iter().map(|d| d.slot.job_id).collect();
        assert_eq!(chunk, vec![a, a]);
        let chunk: Vec<Uuid> = unrecorded.take_chunk(10).iter().map(|d| d.slot.job_id).collect();
        assert_eq!(chunk, vec![c]);
        assert!(unrecorded.is_empty());
    }

    #[test]
    fn a_dispatcher_that_is_never_idle_keeps_its_bookkeeping_bounded() {
        let mut unrecorded = Unrecorded::default();
        let waiting = Uuid::now_v7();
        unrecorded.add(vec![decided(waiting, 0)]);
        for k in 0..100_000 {
            let job = Uuid::now_v7();
            unrecorded.add(vec![decided(job, k)]);
            unrecorded.take_for(&[decided(job, k + 1).slot]);
        }
        assert!(unrecorded.order.len() <= 1026, "{} ids kept", unrecorded.order.len());
        assert_eq!(unrecorded.take_chunk(10).len(), 1, "the waiting job's decision is still there");
    }
}
