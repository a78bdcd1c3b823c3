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
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use deadpool_postgres::Pool as PgPool;
use deadpool_redis::Pool as RedisPool;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use common::backoff::Backoff;
use common::execution::execution_id;
use common::job::JobSpec;
use common::message::{FireMessage, Trigger};
use common::redis::Keys;

use common::publisher::Publisher;

/// Times one step of the dispatcher: it does one thing at a time, so a slow
/// step delays every slot behind it.
async fn timed<T>(stage: &'static str, work: impl std::future::Future<Output = T>) -> T {
    common::telemetry::timed(common::metrics::DISPATCH_STAGE_SECONDS, stage, work).await
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

/// One due occurrence of a job, as the timer hands it over.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub job_id: Uuid,
    pub scheduled_at: DateTime<Utc>,
    pub job_version: i64,
    pub trigger: Trigger,
}

/// A slot decided without firing (misfire policy): recorded in the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub slot: Slot,
    pub status: &'static str,
    pub reason: String,
}

/// What the core loop hands the dispatcher.
#[derive(Debug)]
pub enum Work {
    Fire(Vec<Slot>),
    Record(Vec<Recorded>),
}

#[derive(Debug, Clone)]
pub struct DispatchConfig {
    pub node_id: String,
    pub keys: Keys,
    pub lock_ttl: Duration,
    /// How long after its due time a lost slot is checked for a ledger row.
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
}

/// How long after its confirm a published row is stamped. By then a worker
/// has usually taken the row (a pre-armed message is taken on arrival),
/// and the stamp, which only touches `pending` rows, writes nothing; stamped
/// at once, half the rows of a 2,000 fires/s run got a row version each.
/// Well inside `outbox_grace`, after which an unstamped row is republished.
const STAMP_AFTER: Duration = Duration::from_secs(1);

/// A claimed row, ready to publish.
struct Claimed {
    message: FireMessage,
    attempt: u32,
}

impl Dispatcher {
    pub fn new(config: DispatchConfig, pg: PgPool, redis: Vec<RedisPool>, publisher: Publisher) -> Self {
        Self { config, pg, redis, publisher, verify: VecDeque::new(), unstamped: VecDeque::new() }
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
                        let mut records_after = None;
                        while slots.len() < CLAIM_CHUNK {
                            match batches.try_recv() {
                                Ok(Work::Fire(more)) => slots.extend(more),
                                Ok(Work::Record(rows)) => {
                                    records_after = Some(rows);
                                    break;
                                }
                                Err(_) => break,
                            }
                        }
                        timed("fire", self.fire(slots, &token)).await;
                        if let Some(rows) = records_after {
                            timed("record", self.record(rows)).await;
                        }
                    }
                    Some(Work::Record(rows)) => timed("record", self.record(rows)).await,
                    None => {
                        self.stamp(true).await;
                        break;
                    }
                },
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

    /// Locks, claims and publishes one batch, retrying until it is done.
    pub async fn fire(&mut self, slots: Vec<Slot>, token: &CancellationToken) {
        if slots.is_empty() {
            return;
        }
        let won = timed("lock", self.lock(&slots)).await;
        let (mine, lost): (Vec<_>, Vec<_>) = slots.into_iter().zip(won).partition(|(_, won)| *won);
        metrics::counter!(common::metrics::LOCK_WINS_TOTAL).increment(mine.len() as u64);
        metrics::counter!(common::metrics::LOCK_LOSSES_TOTAL).increment(lost.len() as u64);
        let verify_at = |s: &Slot| {
            s.scheduled_at.max(Utc::now()) + TimeDelta::from_std(self.config.verify_after).unwrap_or_default()
        };
        for (slot, _) in lost {
            self.verify.push_back((verify_at(&slot), slot));
        }
        let mine: Vec<Slot> = mine.into_iter().map(|(s, _)| s).collect();
        for chunk in mine.chunks(CLAIM_CHUNK) {
            self.claim_and_publish(chunk, token).await;
        }
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
                    metrics::counter!(common::metrics::CLAIM_RETRIES_TOTAL).increment(1);
                    // On shutdown the other owner (or our restart) covers these.
                    if token.is_cancelled() && backoff.delay() > Duration::from_secs(2) {
                        return;
                    }
                    backoff.wait().await;
                }
            }
        };
        let conflicts = slots.len() - claimed.len();
        metrics::counter!(common::metrics::CLAIM_CONFLICTS_TOTAL).increment(conflicts as u64);
        if conflicts > 0 {
            // A row of an older version (armed before an edit, a pause and a
            // resume) is decided by its worker at the due instant; if it is
            // cancelled, the slot is this version's to take. Without a second
            // look it was lost.
            let taken: std::collections::HashSet<(Uuid, DateTime<Utc>)> =
                claimed.iter().map(|c| (c.message.job_id, c.message.scheduled_at)).collect();
            let conflicted: Vec<Slot> =
                slots.iter().filter(|s| !taken.contains(&(s.job_id, s.scheduled_at))).cloned().collect();
            match check_slots(&self.pg, &conflicted).await {
                Ok(states) => {
                    let waiting = conflicted
                        .into_iter()
                        .zip(states)
                        .filter(|(_, state)| *state == SlotState::HeldByOlderVersion)
                        .map(|(s, _)| s)
                        .collect();
                    self.wait_for_older_versions(waiting, Utc::now());
                }
                Err(e) => {
                    // Asked again with the lost slots; the claim is idempotent.
                    tracing::warn!(error = %format!("{e:#}"), "checking conflicting slots failed; will retry");
                    let at = Utc::now() + RECHECK_EVERY;
                    self.verify.extend(conflicted.into_iter().map(|s| (at, s)));
                }
            }
        }
        self.publish(claimed, token).await;
    }

    async fn publish(&mut self, claimed: Vec<Claimed>, token: &CancellationToken) {
        if claimed.is_empty() {
            return;
        }
        let attempts: Vec<u32> = claimed.iter().map(|c| c.attempt).collect();
        let messages: Vec<FireMessage> = claimed.into_iter().map(|c| c.message).collect();
        let batch: Vec<(&FireMessage, u32)> = messages.iter().zip(attempts).collect();
        let mut backoff = Backoff::new(Duration::from_millis(100));
        loop {
            match timed("publish", self.publisher.publish_attempts(&batch)).await {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), messages = messages.len(), "publishing failed; retrying");
                    metrics::counter!(common::metrics::PUBLISH_RETRIES_TOTAL).increment(1);
                    // Claimed rows stay pending: the outbox sweep of any node republishes them.
                    if token.is_cancelled() && backoff.delay() > Duration::from_secs(2) {
                        return;
                    }
                    backoff.wait().await;
                }
            }
        }
        let now = Utc::now();
        for m in &messages {
            let lateness = (now - m.due_at).num_milliseconds() as f64 / 1000.0;
            metrics::histogram!(common::metrics::PUBLISH_LEAD_SECONDS).record(-lateness);
        }
        metrics::counter!(common::metrics::FIRES_TOTAL).increment(messages.len() as u64);
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
    async fn record(&self, rows: Vec<Recorded>) {
        let mut backoff = Backoff::new(Duration::from_millis(100));
        for attempt in 0.. {
            match self.try_record(&rows).await {
                Ok(n) => {
                    metrics::counter!(common::metrics::MISFIRE_RECORDED_TOTAL).increment(n);
                    return;
                }
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

    async fn try_record(&self, rows: &[Recorded]) -> anyhow::Result<u64> {
        let client = self.pg.get().await?;
        let (job_ids, times, versions) = key_columns(rows.iter().map(|r| &r.slot));
        let fire_ids: Vec<Uuid> = rows.iter().map(|_| Uuid::now_v7()).collect();
        let exec_ids: Vec<String> = rows.iter().map(|r| execution_id(r.slot.job_id, r.slot.scheduled_at)).collect();
        let statuses: Vec<&str> = rows.iter().map(|r| r.status).collect();
        let reasons: Vec<&str> = rows.iter().map(|r| r.reason.as_str()).collect();
        let n = client
            .execute(
                concat!(r#"INSERT INTO scheduled_jobs
                     (job_id, scheduled_at, fire_id, execution_id, trigger, status, reason, scheduler_node, finished_at, job_version)
                 SELECT s.job_id, s.scheduled_at, s.fire_id, s.execution_id, 'misfire', s.status, s.reason, $8, now(), s.job_version
                 FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[], $4::uuid[], $5::text[], $6::text[], $7::text[])
                      AS s(job_id, scheduled_at, job_version, fire_id, execution_id, status, reason)
                 WHERE "#,
                common::claimable_by!("s.job_id", "s.job_version", "s.scheduled_at"),
                r#"
                 ON CONFLICT (job_id, scheduled_at) DO NOTHING"#),
                &[&job_ids, &times, &versions, &fire_ids, &exec_ids, &statuses, &reasons, &self.config.node_id],
            )
            .await?;
        Ok(n)
    }

    /// One pipelined SET NX PX per slot; `true` = this node may claim it.
    async fn lock(&self, slots: &[Slot]) -> Vec<bool> {
        let ttl_ms = self.config.lock_ttl.as_millis() as u64;
        for shard in &self.redis {
            let result: anyhow::Result<Vec<bool>> = async {
                let mut conn = shard.get().await?;
                let mut pipe = redis::pipe();
                for s in slots {
                    pipe.cmd("SET")
                        .arg(self.config.keys.lock(s.job_id, s.job_version, s.scheduled_at))
                        .arg(&self.config.node_id)
                        .arg("NX")
                        .arg("PX")
                        .arg(ttl_ms);
                }
                let replies: Vec<Option<String>> = pipe.query_async(&mut *conn).await?;
                Ok(replies.into_iter().map(|r| r.is_some()).collect())
            }
            .await;
            match result {
                Ok(won) => return won,
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "Redis lock failed on a shard; trying the next"),
            }
        }
        tracing::warn!("no Redis shard reachable for locks; the ledger claim decides");
        vec![true; slots.len()]
    }

    /// Inserts ledger rows for the slots; returns those this node inserted.
    /// Slots go in lock order: a conflicting row is locked as it is met.
    async fn claim(&self, slots: &[Slot]) -> anyhow::Result<Vec<Claimed>> {
        if slots.is_empty() {
            return Ok(Vec::new());
        }
        let order = common::db::lock_order(slots.iter().map(|s| (s.job_id, s.scheduled_at)));
        let slots: Vec<&Slot> = order.into_iter().map(|i| &slots[i]).collect();
        let client = self.pg.get().await?;
        let (job_ids, times, versions) = key_columns(slots.iter().copied());
        let fire_ids: Vec<Uuid> = slots.iter().map(|_| Uuid::now_v7()).collect();
        let exec_ids: Vec<String> = slots.iter().map(|s| execution_id(s.job_id, s.scheduled_at)).collect();
        let triggers: Vec<&str> = slots.iter().map(|s| s.trigger.as_str()).collect();
        let stmt = client.prepare_cached(CLAIM_SQL).await?;
        let rows = client
            .query(&stmt, &[&job_ids, &times, &versions, &fire_ids, &exec_ids, &triggers, &self.config.node_id])
            .await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in rows {
            let job_id: Uuid = row.get("job_id");
            let spec: JobSpec = match serde_json::from_value(row.get("spec")) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(job.id = %job_id, error = %format!("{e:#}"), "claimed a job whose spec does not parse");
                    continue;
                }
            };
            let scheduled_at: DateTime<Utc> = row.get("scheduled_at");
            let (message, attempt) = FireMessage::next_for_row(&row, spec, scheduled_at);
            claimed.push(Claimed { message, attempt });
        }
        Ok(claimed)
    }

    async fn mark_published(&self, messages: &[FireMessage]) -> anyhow::Result<()> {
        let client = self.pg.get().await?;
        let messages: Vec<&FireMessage> = messages.iter().collect();
        common::ledger::mark_published(&client, &messages).await?;
        Ok(())
    }

    /// Re-checks the slots this node did not claim: those whose lock another
    /// node won (claimed here if the winner died before claiming), and those
    /// held by a row of an older version (re-taken here once that row is
    /// cancelled; left alone once it is delivered).
    async fn verify_lost(&mut self) {
        let now = Utc::now();
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
            let states = check_slots(&self.pg, &due).await?;
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
                    metrics::counter!(common::metrics::TAKEOVER_CLAIMS_TOTAL).increment(claimed.len() as u64);
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

    /// Delivers again, under the same execution id, rows left `running`
    /// past their attempt timeout plus the grace by a worker that is no
    /// longer alive (no recent heartbeat): the worker died and its
    /// message was lost with a broker that kept nothing (a worker crash alone
    /// is handled sooner, by the broker's redelivery). The lost attempt
    /// counts; the recovered delivery is the next one.
    pub async fn recover_running(&mut self) -> anyhow::Result<usize> {
        let grace = self.config.running_grace.as_secs_f64();
        let client = self.pg.get().await?;
        // Back to `pending` and committed BEFORE publishing: a worker must
        // never see the message while the row still says `running` (it would
        // drop it as a duplicate). Unpublished, the row is the outbox
        // sweep's to republish if the publish below fails.
        let rows = client
            .query(
                &format!(
                "WITH stuck AS (
                     SELECT l.job_id, l.scheduled_at FROM scheduled_jobs l JOIN jobs j ON j.id = l.job_id
                     -- A row starts at or after its slot: the bound on
                     -- `scheduled_at` is an index range that skips the armed
                     -- rows (tens of thousands under load) before the join.
                     WHERE l.status = 'running' AND l.scheduled_at < now() - make_interval(secs => $1)
                       AND l.started_at < now() - make_interval(secs =>
                             coalesce((j.spec->'target'->>'timeout_ms')::double precision / 1000, 30) + $1)
                       AND {worker_gone}
                     ORDER BY l.started_at LIMIT 500 FOR UPDATE OF l SKIP LOCKED)
                 UPDATE scheduled_jobs l SET status = 'pending', published_at = NULL, fired_at = now(),
                        error = format('attempt %s never finished (its worker and message were lost); delivering again', l.attempts),
                        history = l.history || jsonb_build_array(jsonb_build_object(
                            'event', 'recovered', 'at', cronshard_instant(now()), 'lost_attempt', l.attempts,
                            'worker_id', l.worker_id, 'started_at', cronshard_instant(l.started_at)))
                 FROM stuck WHERE l.job_id = stuck.job_id AND l.scheduled_at = stuck.scheduled_at
                 RETURNING l.job_id, l.scheduled_at, l.fire_id, l.execution_id, l.trigger, l.attempts,
                           (SELECT spec FROM jobs WHERE id = l.job_id) AS spec",
                worker_gone = common::ledger::WORKER_PRESUMED_GONE
            ),
                &[&grace],
            )
            .await?;
        let messages = FireMessage::next_for_rows(&rows, |_| Utc::now());
        if !messages.is_empty() {
            tracing::warn!(rows = messages.len(), "recovered rows stuck in running");
            metrics::counter!(common::metrics::RUNNING_RECOVERED_TOTAL).increment(messages.len() as u64);
            self.publisher.publish_attempts(&as_batch(&messages)).await?;
            common::ledger::mark_published(&client, &messages.iter().map(|(m, _)| m).collect::<Vec<_>>()).await?;
        }
        Ok(messages.len())
    }

    /// Moves on ledger rows that no process is going to move: a `pending`
    /// row whose message went out (`published_at`) and was due more than
    /// `stranded_after` ago, or a `retrying` row whose next attempt was due
    /// more than `stranded_after` ago. Their message is gone (a broker that
    /// lost it, a queue deleted) or was dropped (a message that did not
    /// match its row: the bug class this sweep exists for). Each is
    /// published again under its execution id and fire id as the attempt
    /// its row expects, which a worker starts or, for a slot no longer
    /// wanted, records as skipped; a copy that meets another is dropped by
    /// the start rule. Counted in `cronshard_ledger_stranded_total`: any
    /// count is a finding (docs/operations.md names the alert).
    pub async fn sweep_stranded(&mut self) -> anyhow::Result<usize> {
        let after = self.config.stranded_after.as_secs_f64();
        let mut client = self.pg.get().await?;
        let tx = client.transaction().await?;
        let rows = tx
            .query(
                "WITH stranded AS (
                     SELECT l.job_id, l.scheduled_at FROM scheduled_jobs l
                     WHERE l.status IN ('pending', 'retrying')
                       -- An unpublished `pending` row is the outbox sweep's.
                       AND ((l.status = 'pending' AND l.published_at IS NOT NULL
                             AND greatest(l.scheduled_at, l.published_at) < now() - make_interval(secs => $1))
                         OR (l.status = 'retrying'
                             AND coalesce(l.next_attempt_at, l.finished_at + interval '1 hour')
                                 < now() - make_interval(secs => $1)))
                     ORDER BY l.scheduled_at LIMIT 1000 FOR UPDATE OF l SKIP LOCKED)
                 UPDATE scheduled_jobs l SET published_at = now(),
                        next_attempt_at = CASE WHEN l.status = 'retrying' THEN now() END,
                        history = l.history || jsonb_build_array(jsonb_build_object(
                            'event', 'stranded', 'at', cronshard_instant(now()), 'status', l.status,
                            'attempts', l.attempts))
                 FROM stranded WHERE l.job_id = stranded.job_id AND l.scheduled_at = stranded.scheduled_at
                 RETURNING l.job_id, l.scheduled_at, l.fire_id, l.execution_id, l.trigger, l.attempts, l.status,
                           (SELECT spec FROM jobs WHERE id = l.job_id) AS spec",
                &[&after],
            )
            .await?;
        for row in &rows {
            let status: &str = row.get("status");
            metrics::counter!(common::metrics::LEDGER_STRANDED_TOTAL, "status" => status.to_owned()).increment(1);
        }
        let messages = FireMessage::next_for_rows(&rows, |_| Utc::now());
        if !messages.is_empty() {
            self.publisher.publish_attempts(&as_batch(&messages)).await?;
            let examples: Vec<&str> = messages.iter().take(5).map(|(m, _)| m.execution_id.as_str()).collect();
            tracing::warn!(
                rows = messages.len(),
                ?examples,
                "moved on stranded ledger rows (nothing was going to move them)"
            );
        }
        tx.commit().await?;
        Ok(messages.len())
    }

    /// Re-takes slots that a change cancelled and nobody re-took: a row
    /// `skipped` (`superseded`, `paused`) under an older version than the
    /// one in force at its slot, when that version is live and fires there.
    /// Normally the owners' claims re-take such a row within a second (see
    /// `wait_for_older_versions`); this catches what they did not, because
    /// they died or restarted meanwhile, or the version in force is no
    /// longer the job's current one (a change after the slot). Counted as
    /// stranded (`status="skipped"`). A row whose version in force does
    /// not fire at its slot is marked decided for that version, so that it
    /// is not read again.
    pub async fn sweep_unretaken(&mut self) -> anyhow::Result<usize> {
        let client = self.pg.get().await?;
        // A version with `max_runs` re-takes a slot only while the job's runs
        // before it leave room (the ledger counts runs across versions).
        let rows = client
            .query(
                concat!(
                    "SELECT l.job_id, l.scheduled_at, l.trigger, c.version, c.spec, j.created_at,
                            c.spec #>> '{schedule,max_runs}' IS NULL
                            OR (SELECT count(*) FROM scheduled_jobs r
                                WHERE r.job_id = l.job_id AND r.scheduled_at < l.scheduled_at AND ",
                    common::counts_as_run!(),
                    ") < (c.spec #>> '{schedule,max_runs}')::bigint AS runs_left
                     FROM scheduled_jobs l
                     JOIN jobs j ON j.id = l.job_id AND j.deleted_at IS NULL
                     CROSS JOIN LATERAL (SELECT c.version, c.state, c.spec FROM job_changes c
                                         WHERE c.job_id = l.job_id AND c.valid_from <= l.scheduled_at
                                         ORDER BY c.version DESC LIMIT 1) c
                     WHERE l.status = 'skipped' AND l.reason IN ('superseded', 'paused')
                       AND l.scheduled_at > now() - make_interval(secs => $2)
                       AND l.finished_at < now() - make_interval(secs => $1)
                       AND c.state = 'live' AND c.version > l.job_version
                     ORDER BY l.scheduled_at LIMIT 1000"
                ),
                &[&UNRETAKEN_GRACE.as_secs_f64(), &UNRETAKEN_LOOKBACK.as_secs_f64()],
            )
            .await?;
        let (mut slots, mut decided) = (Vec::new(), Vec::new());
        for row in &rows {
            let slot = Slot {
                job_id: row.get(0),
                scheduled_at: row.get(1),
                job_version: row.get(3),
                trigger: Trigger::parse(row.get(2)),
            };
            let runs_left: bool = row.get(6);
            let fires = runs_left
                && serde_json::from_value::<JobSpec>(row.get(4))
                    .ok()
                    .and_then(|spec| spec.compile(row.get(5)).ok())
                    .is_some_and(|schedule| schedule.fires_at(slot.scheduled_at));
            if fires { slots.push(slot) } else { decided.push(slot) }
        }
        if !decided.is_empty() {
            let (job_ids, times, versions) = key_columns(decided.iter());
            client
                .execute(
                    "UPDATE scheduled_jobs l SET job_version = d.version
                     FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[]) AS d(job_id, scheduled_at, version)
                     WHERE l.job_id = d.job_id AND l.scheduled_at = d.scheduled_at
                       AND (l.status = 'skipped' AND l.job_version < d.version) IS TRUE",
                    &[&job_ids, &times, &versions],
                )
                .await?;
        }
        drop(client);
        let claimed = self.claim(&slots).await?;
        if !claimed.is_empty() {
            metrics::counter!(common::metrics::LEDGER_STRANDED_TOTAL, "status" => "skipped")
                .increment(claimed.len() as u64);
            let examples: Vec<&str> = claimed.iter().take(5).map(|c| c.message.execution_id.as_str()).collect();
            tracing::warn!(slots = claimed.len(), ?examples, "re-took slots a change had cancelled and nobody re-took");
        }
        let n = claimed.len();
        self.publish(claimed, &CancellationToken::new()).await;
        Ok(n)
    }

    /// Republishes claimed rows whose publish was never confirmed.
    pub async fn sweep_outbox(&mut self) -> anyhow::Result<usize> {
        let grace = TimeDelta::from_std(self.config.outbox_grace)?;
        let messages: Vec<FireMessage> = {
            let mut client = self.pg.get().await?;
            let tx = client.transaction().await?;
            let rows = tx
                .query(
                    "SELECT s.job_id, s.scheduled_at, s.fire_id, s.execution_id, s.trigger, j.spec, s.attempts
                     FROM scheduled_jobs s JOIN jobs j ON j.id = s.job_id
                     WHERE s.status = 'pending' AND s.published_at IS NULL AND s.fired_at < $1
                     ORDER BY s.fired_at LIMIT 1000 FOR UPDATE OF s SKIP LOCKED",
                    &[&(Utc::now() - grace)],
                )
                .await?;
            let out = FireMessage::next_for_rows(&rows, |row| row.get("scheduled_at"));
            if !out.is_empty() {
                self.publisher.publish_attempts(&as_batch(&out)).await?;
                common::ledger::mark_published(&tx, &out.iter().map(|(m, _)| m).collect::<Vec<_>>()).await?;
            }
            tx.commit().await?;
            out.into_iter().map(|(m, _)| m).collect::<Vec<FireMessage>>()
        };
        if !messages.is_empty() {
            tracing::warn!(messages = messages.len(), "republished claimed rows that had no confirmed publish");
            metrics::counter!(common::metrics::OUTBOX_REPUBLISHED_TOTAL).increment(messages.len() as u64);
        }
        Ok(messages.len())
    }
}

/// The `$1` (job ids), `$2` (slot times) and `$3` (job versions) arrays of
/// the statements that take slots.
fn key_columns<'a>(slots: impl Iterator<Item = &'a Slot>) -> (Vec<Uuid>, Vec<DateTime<Utc>>, Vec<i64>) {
    let mut columns = (Vec::new(), Vec::new(), Vec::new());
    for s in slots {
        columns.0.push(s.job_id);
        columns.1.push(s.scheduled_at);
        columns.2.push(s.job_version);
    }
    columns
}

/// Where a slot stands for a claimer, as `check_slots` reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// No ledger row, or one the claimer may re-take: claim it.
    Open,
    /// A row of an older version of the job that is not final yet (a worker
    /// holds it armed, or its message is on its way): once delivered it
    /// stands; once cancelled it is the claimer's to re-take. Ask again.
    HeldByOlderVersion,
    /// Claimed, delivered or decided for good: nothing to do.
    Settled,
}

/// Reads where each slot stands. A read, because the claim's `ON CONFLICT
/// DO UPDATE` locks every conflicting row even where its `WHERE` declines
/// the update: claiming every lost slot (half of all slots, with two
/// owners) cost a row lock each, on rows the workers were writing at that
/// moment, and deadlocked with them.
pub async fn check_slots(pg: &PgPool, slots: &[Slot]) -> anyhow::Result<Vec<SlotState>> {
    if slots.is_empty() {
        return Ok(Vec::new());
    }
    let client = pg.get().await?;
    let stmt = client
        .prepare_cached(concat!(
            "SELECT b.i, CASE WHEN ",
            common::held_by_older_version!("b.job_version"),
            " IS TRUE THEN 1 ELSE 2 END
             FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[])
                  WITH ORDINALITY AS b(job_id, scheduled_at, job_version, i)
             JOIN scheduled_jobs l ON l.job_id = b.job_id AND l.scheduled_at = b.scheduled_at
             WHERE ",
            common::retakeable_by!("b.job_version"),
            " IS NOT TRUE"
        ))
        .await?;
    let (job_ids, times, versions) = key_columns(slots.iter());
    let mut states = vec![SlotState::Open; slots.len()];
    for row in client.query(&stmt, &[&job_ids, &times, &versions]).await? {
        let (i, state): (i64, i32) = (row.get(0), row.get(1));
        states[i as usize - 1] = if state == 1 { SlotState::HeldByOlderVersion } else { SlotState::Settled };
    }
    Ok(states)
}

/// The slots the claim could still insert or re-take.
pub async fn unclaimed(pg: &PgPool, slots: Vec<Slot>) -> anyhow::Result<Vec<Slot>> {
    let states = check_slots(pg, &slots).await?;
    Ok(slots.into_iter().zip(states).filter(|(_, state)| *state == SlotState::Open).map(|(s, _)| s).collect())
}

/// The claim: insert each slot of a job that still exists, is not paused and
/// has the version the timer used; re-take a row only when it was skipped
/// because an older version of the job had pre-armed it.
const CLAIM_SQL: &str = concat!(
    "
WITH slots AS (
    SELECT * FROM unnest($1::uuid[], $2::timestamptz[], $3::bigint[], $4::uuid[], $5::text[], $6::text[])
        AS s(job_id, scheduled_at, job_version, fire_id, execution_id, trigger)
), claimed AS (
    INSERT INTO scheduled_jobs AS l
        (job_id, scheduled_at, fire_id, execution_id, trigger, status, scheduler_node, fired_at, job_version)
    SELECT s.job_id, s.scheduled_at, s.fire_id, s.execution_id, s.trigger, 'pending', $7, now(), s.job_version
    FROM slots s WHERE ",
    common::claimable_by!("s.job_id", "s.job_version", "s.scheduled_at"),
    "
    ON CONFLICT (job_id, scheduled_at) DO UPDATE
        -- A re-take starts the slot afresh: every field a delivery or a
        -- cancellation wrote goes, or the first message (attempt 1) would
        -- meet a row that already counts an attempt and be dropped.
        SET fire_id = EXCLUDED.fire_id, status = 'pending', scheduler_node = EXCLUDED.scheduler_node,
            fired_at = EXCLUDED.fired_at, job_version = EXCLUDED.job_version, published_at = NULL,
            reason = NULL, finished_at = NULL, attempts = 0, worker_id = NULL, started_at = NULL,
            http_status = NULL, sqs_message_id = NULL, response_excerpt = NULL, error = NULL,
            next_attempt_at = NULL,
            history = l.history || jsonb_build_array(jsonb_build_object(
                'event', 'retaken', 'at', cronshard_instant(now()), 'version', EXCLUDED.job_version,
                'from_version', l.job_version, 'reason', l.reason))
        WHERE ",
    common::retakeable_by!("EXCLUDED.job_version"),
    "
    RETURNING l.job_id, l.scheduled_at, l.fire_id, l.execution_id, l.trigger, l.attempts
)
SELECT c.job_id, c.scheduled_at, c.fire_id, c.execution_id, c.trigger, c.attempts, j.spec
FROM claimed c JOIN jobs j ON j.id = c.job_id"
);

/// Messages with their attempts, as the publisher takes them.
fn as_batch(messages: &[(FireMessage, u32)]) -> Vec<(&FireMessage, u32)> {
    messages.iter().map(|(m, a)| (m, *a)).collect()
}
