//! The node's core: which jobs it owns, when each fires next, and what to
//! catch up. A state machine without I/O: time is passed in, job rows come
//! from the feed, members from the membership loop, and due slots, misfire
//! decisions and catch-up runs go out to the dispatcher. `node.rs` wires it
//! to those loops.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use uuid::Uuid;

use domain::calendar::{self, Calendar};
use domain::ownership;
use domain::schedule::CompiledSchedule;
use domain::slot::{Status, Trigger};

use crate::feed::{self, JobRow};
use crate::misfire;
use crate::timer::{Generation, TimerHeap};
use store::ledger::claim::{Decided, Slot};

/// What the node knows about every live job, owned or not: its version, so
/// a membership change is recomputed locally and only the jobs this node
/// gains are fetched from the database. Owned state is boxed so a job this
/// node does not own costs one small table entry.
struct Known {
    version: i64,
    owned: Option<Box<Owned>>,
}

/// A job this node owns.
struct Owned {
    schedule: CompiledSchedule,
    runs: u64,
    max_runs: Option<u64>,
    /// Its live timer entry; 0 = not scheduled (it never fires again).
    generation: Generation,
    /// The slot that entry stands for: the timer runs on the delivery
    /// instant (the slot plus its jitter), the ledger on the slot.
    next_slot: DateTime<Utc>,
    jitter_ms: u64,
    /// Keys (`namespace/name`) of the calendars whose excluded times it skips.
    calendars: Box<[String]>,
}

/// Late slots of a job found when it was (re)loaded, waiting for the
/// catch-up rate limiter: a misfire policy's late fires, and the slots of
/// earlier versions nobody fired.
///
/// Two rules keep the ledger a prefix in time for every job (it never holds
/// a slot of a job after one that still waits in a node's memory, so a node
/// that stops or dies with a run queued leaves the job's last ledger slot
/// before it, and the next owner decides those slots again):
/// - a job's runs go out in the order they were queued, whole;
/// - a job's live slot never goes out before its queued runs: when the
///   timer reaches it, the job's runs are handed over first, ahead of the
///   rate limiter. The limiter only spreads the runs of jobs whose next
///   live slot is further away, so one job's wait never delays another's
///   live slots (with a run waiting behind every job's, a restart after a
///   long outage held every timer for minutes).
struct CatchUpRun {
    token: u64,
    slots: Vec<Slot>,
}

pub struct Core {
    node_id: String,
    rf: usize,
    misfire_threshold: TimeDelta,
    /// The order catch-up runs go out under the rate limiter: (job, token).
    /// An entry whose run was handed over with the job's live slot is
    /// passed over.
    catchup: VecDeque<(Uuid, u64)>,
    /// Each job's runs not yet handed over, oldest first.
    runs: HashMap<Uuid, VecDeque<CatchUpRun>>,
    /// The last token handed to a run.
    last_run_token: u64,
    /// Misfire decisions not yet handed to the dispatcher.
    records: Vec<Decided>,
    members: Vec<String>,
    jobs: HashMap<Uuid, Known>,
    owned_count: usize,
    heap: TimerHeap,
    /// Every calendar, by `namespace/name`, as last loaded.
    calendars: HashMap<String, Arc<Calendar>>,
    /// Slots of jobs naming a calendar this node has not loaded, in the
    /// order they came due: a slot is never fired past a part of its job's
    /// definition the node has not seen (see [`Core::take_held`]).
    held: Vec<Held>,
    /// A job referenced a calendar not loaded yet: the node should reload
    /// now rather than at its next poll.
    calendars_wanted: bool,
}

/// A slot held until its job's calendars are loaded.
struct Held {
    slot: Slot,
    /// When it was first held: past [`CALENDAR_WAIT`] it is recorded, not fired.
    since: DateTime<Utc>,
    /// Whether its run is given back if it is not fired after all (recorded
    /// excluded or unavailable): a live slot's run is counted when it is
    /// held, so the job's timer stops at `max_runs`, and an unfired slot is
    /// no run; a catch-up slot's run was counted when its run was queued
    /// and stays so, as for an excluded catch-up slot.
    uncount_unless_fired: bool,
}

/// How long a slot waits for a calendar its job names before it is recorded
/// `skipped` with reason `calendar_unavailable:NAME` instead of firing. A
/// calendar is committed before any job that names it (the API checks), so
/// only a database the node cannot read for this long leaves one missing.
pub const CALENDAR_WAIT: TimeDelta = TimeDelta::seconds(domain::slot::reason::CALENDAR_WAIT_SECS);

/// What a job's calendars say about one instant.
enum CalendarVerdict {
    Fire,
    /// Excluded by the named calendar.
    Excluded(String),
    /// The named calendar is not loaded: neither fire nor skip yet.
    Missing(String),
}

/// Whether `generation` is `job`'s live timer entry.
fn is_live(jobs: &HashMap<Uuid, Known>, job: Uuid, generation: Generation) -> bool {
    jobs.get(&job).and_then(|k| k.owned.as_ref()).is_some_and(|o| o.generation == generation)
}

impl Core {
    pub fn new(node_id: String, replication_factor: usize, misfire_threshold: TimeDelta, members: Vec<String>) -> Self {
        Self {
            node_id,
            rf: replication_factor.max(1),
            misfire_threshold,
            catchup: VecDeque::new(),
            runs: HashMap::new(),
            last_run_token: 0,
            records: Vec::new(),
            members,
            jobs: HashMap::new(),
            owned_count: 0,
            heap: TimerHeap::default(),
            calendars: HashMap::new(),
            held: Vec::new(),
            calendars_wanted: false,
        }
    }

    /// Replaces the calendars; slots handed over from now on are judged by
    /// them, and held slots whose calendars are now loaded are released
    /// (by the next [`Core::take_held`]).
    pub fn set_calendars(&mut self, calendars: HashMap<String, Arc<Calendar>>) {
        self.calendars = calendars;
    }

    /// What the job's calendars (keys) say about `at`: the first that
    /// excludes it, or the first not loaded. A calendar the node has not
    /// loaded is never taken to exclude nothing: it is one created moments
    /// before the job (the API refuses a job naming a missing calendar and
    /// the delete of one a job names), and firing past it is the defect of
    /// firing a slot under a definition the node has only partly seen.
    fn verdict(calendars: &HashMap<String, Arc<Calendar>>, keys: &[String], at: DateTime<Utc>) -> CalendarVerdict {
        for key in keys {
            match calendars.get(key) {
                None => {
                    let name = key.split_once('/').map_or(key.as_str(), |(_, name)| name);
                    return CalendarVerdict::Missing(name.to_owned());
                }
                Some(c) if c.excludes(at) => return CalendarVerdict::Excluded(c.name.clone()),
                Some(_) => {}
            }
        }
        CalendarVerdict::Fire
    }

    /// Whether a job referenced a calendar this node has not loaded since
    /// the last call: the node should reload its calendars now.
    pub fn take_calendars_wanted(&mut self) -> bool {
        std::mem::take(&mut self.calendars_wanted)
    }

    /// Whether slots wait for calendars.
    pub fn has_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// Judges `slot` by its job's calendars: out to fire, recorded as
    /// excluded, or held while a calendar is missing. A job that already
    /// has held slots holds its later ones too, so its slots leave in order.
    /// Returns false only when the slot was recorded excluded (no run).
    fn judge(
        &mut self,
        slot: Slot,
        keys: &[String],
        now: DateTime<Utc>,
        uncount_unless_fired: bool,
        out: &mut Vec<Slot>,
    ) -> bool {
        if self.held.iter().any(|h| h.slot.job_id == slot.job_id) {
            self.held.push(Held { slot, since: now, uncount_unless_fired });
            return true;
        }
        match Self::verdict(&self.calendars, keys, slot.scheduled_at) {
            CalendarVerdict::Fire => {
                out.push(slot);
                true
            }
            CalendarVerdict::Excluded(name) => {
                self.records.push(Decided::one(slot, Status::Skipped, domain::slot::reason::calendar(&name)));
                false
            }
            CalendarVerdict::Missing(_) => {
                self.calendars_wanted = true;
                self.held.push(Held { slot, since: now, uncount_unless_fired });
                true
            }
        }
    }

    /// A held slot was recorded, not fired: a live slot's run is given back,
    /// and a timer that had stopped at `max_runs` starts again.
    fn unfired(&mut self, held: &Held) {
        if !held.uncount_unless_fired {
            return;
        }
        let id = held.slot.job_id;
        if let Some(owned) = self.jobs.get_mut(&id).and_then(|k| k.owned.as_mut()) {
            owned.runs = owned.runs.saturating_sub(1);
            if owned.generation == 0 {
                let last = owned.next_slot;
                owned.arm(&mut self.heap, id, last);
            }
        }
    }

    /// Held slots whose calendars are now loaded, in order (excluded ones
    /// become records); a slot held longer than [`CALENDAR_WAIT`] is
    /// recorded `skipped` with reason `calendar_unavailable:NAME`, never
    /// fired. A job stays held from its first still-missing slot on.
    pub fn take_held(&mut self, now: DateTime<Utc>) -> Vec<Slot> {
        let mut out = Vec::new();
        let mut still_held: Vec<Held> = Vec::new();
        for held in std::mem::take(&mut self.held) {
            if still_held.iter().any(|h| h.slot.job_id == held.slot.job_id) {
                still_held.push(held);
                continue;
            }
            let owned = self.jobs.get(&held.slot.job_id).and_then(|k| k.owned.as_ref());
            let keys = owned.map(|o| &o.calendars[..]).unwrap_or(&[]);
            match Self::verdict(&self.calendars, keys, held.slot.scheduled_at) {
                CalendarVerdict::Fire => out.push(held.slot),
                CalendarVerdict::Excluded(name) => {
                    self.unfired(&held);
                    let reason = domain::slot::reason::calendar(&name);
                    self.records.push(Decided::one(held.slot, Status::Skipped, reason))
                }
                CalendarVerdict::Missing(name) if now - held.since >= CALENDAR_WAIT => {
                    tracing::warn!(job.id = %held.slot.job_id, calendar = %name, "calendar still not loaded; slot recorded, not fired");
                    self.unfired(&held);
                    let reason = domain::slot::reason::calendar_unavailable(&name);
                    self.records.push(Decided::one(held.slot, Status::Skipped, reason))
                }
                CalendarVerdict::Missing(_) => {
                    self.calendars_wanted = true;
                    still_held.push(held);
                }
            }
        }
        self.held = still_held;
        out
    }

    pub fn owned_count(&self) -> usize {
        self.owned_count
    }

    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// Misfire decisions (skipped / missed slots) to record.
    pub fn take_records(&mut self) -> Vec<Decided> {
        std::mem::take(&mut self.records)
    }

    pub fn has_catchup(&self) -> bool {
        !self.catchup.is_empty()
    }

    /// Whole catch-up runs, oldest first, until `budget` slots are taken
    /// (the last run may go past it: a job's run is published as one
    /// ordered bundle, so it is never split). Empty when `budget` is 0.
    pub fn take_catchup(&mut self, budget: usize, now: DateTime<Utc>) -> Vec<Slot> {
        let mut slots = Vec::new();
        while slots.len() < budget {
            let Some((job, token)) = self.catchup.pop_front() else { break };
            self.hand_over_runs(job, Some(token), now, &mut slots);
        }
        slots
    }

    /// Moves `job`'s queued runs up to `until` (all of them with `None`)
    /// into `out`, in order; a slot a calendar excludes is recorded instead.
    fn hand_over_runs(&mut self, job: Uuid, until: Option<u64>, now: DateTime<Utc>, out: &mut Vec<Slot>) {
        let keys = self.jobs.get(&job).and_then(|k| k.owned.as_ref()).map(|o| o.calendars.clone()).unwrap_or_default();
        loop {
            let Some(queued) = self.runs.get_mut(&job) else { return };
            if queued.front().is_none_or(|run| until.is_some_and(|u| run.token > u)) {
                if queued.is_empty() {
                    self.runs.remove(&job);
                }
                return;
            }
            let Some(run) = queued.pop_front() else { return };
            for slot in run.slots {
                self.judge(slot, &keys, now, false, out);
            }
        }
    }

    fn is_owner(&self, job: Uuid) -> bool {
        ownership::is_owner(&self.node_id, job, &self.members, self.rf)
    }

    /// Stops owning `id` (it stays known).
    fn disown(&mut self, id: Uuid) {
        if let Some(owned) = self.jobs.get_mut(&id).and_then(|k| k.owned.take()) {
            self.owned_count -= 1;
            if owned.generation != 0 {
                self.heap.forgot();
            }
        }
    }

    pub fn apply(&mut self, row: JobRow, now: DateTime<Utc>) {
        if row.deleted {
            self.disown(row.id);
            self.jobs.remove(&row.id);
            return;
        }
        // A re-read of a row we already applied (the feed may repeat rows).
        let current = self.jobs.get(&row.id);
        if current.is_some_and(|k| k.version > row.version) {
            return;
        }
        let unchanged = current.is_some_and(|k| k.version == row.version && k.owned.is_some());
        // Late slots to catch up, in order.
        let mut late = Vec::new();
        // Runs the ledger holds plus the earlier versions' slots caught up now.
        let mut runs = row.runs;
        if let Some(history) = &row.history
            && !unchanged
            && self.is_owner(row.id)
        {
            runs += self.catch_up_past_versions(&row, history, now, &mut late);
        }
        // Queued before any return below: a paused job's (or one whose
        // schedule no longer compiles) earlier versions still fire.
        self.queue_run(row.id, std::mem::take(&mut late));
        let Some(spec) = row.spec else {
            // Paused: known (so that a membership change can hand it over
            // and its history be read), never scheduled.
            self.disown(row.id);
            self.jobs.insert(row.id, Known { version: row.version, owned: None });
            return;
        };
        if !self.is_owner(row.id) {
            self.disown(row.id);
            self.jobs.insert(row.id, Known { version: row.version, owned: None });
            return;
        }
        if unchanged {
            return;
        }
        self.disown(row.id);
        self.jobs.insert(row.id, Known { version: row.version, owned: None });
        let schedule = match spec.compile(row.created_at) {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(job.id = %row.id, error = %format!("{e:#}"), "stored schedule does not compile; ignoring job");
                return;
            }
        };
        // Slots less late than the misfire threshold still fire (the claim
        // makes that safe); older ones belong to the misfire policy. Slots
        // before the last change (an update, a resume) belonged to the
        // previous version.
        // This version is in force from `updated_at` on: it takes the slots
        // due at or after it (those before belong to the previous version).
        let changed_at = row.created_at.max(row.updated_at) - TimeDelta::microseconds(1);
        let mut from = changed_at.max(now - spec.misfire_threshold(self.misfire_threshold));
        let mut owned = Owned {
            runs,
            max_runs: spec.schedule.max_runs,
            schedule,
            generation: 0,
            next_slot: DateTime::<Utc>::MIN_UTC,
            jitter_ms: spec.jitter_ms,
            calendars: spec.calendars.iter().map(|name| calendar::key(&row.namespace, name)).collect(),
        };
        // Load what the job names before its first slot, not at the next poll.
        if owned.calendars.iter().any(|k| !self.calendars.contains_key(k)) {
            self.calendars_wanted = true;
        }
        if let Some(history) = row.history {
            // Decided up to the last ledger slot, but from a slot before it
            // that has no row: the ledger is not a prefix there (an owner
            // stopped holding it in memory), and nobody else will decide it.
            let decided_to = history.decided_to();
            let since = changed_at.max(history.looked_back_to).max(decided_to.unwrap_or(DateTime::<Utc>::MIN_UTC));
            if since < from {
                // The slots the job missed since its last one in the ledger
                // are one series, judged by its oldest: when that one is a
                // misfire (nobody owned the job for longer than the
                // threshold), the policy decides every slot due by now, the
                // ones less late than the threshold included, so `fire_once`
                // fires once for the lot. Firing those too, one by one, gave
                // each job of a long outage a burst of late fires that kept
                // its live slots waiting behind them. A job with a slot
                // without a row before its last one (`first_gap`) has rows in
                // that series, so only its misfired part is decided.
                let no_rows_since = decided_to == history.last_slot;
                if no_rows_since && owned.schedule.next_after(since).is_some_and(|oldest| oldest <= from) {
                    from = now;
                }
                let mut d = misfire::decide(&owned.schedule, spec.misfire, spec.misfire_cap, since, from);
                d.fire.truncate(runs_left(owned.max_runs, owned.runs));
                if !d.fire.is_empty() || d.record.is_some() {
                    // One line per job at debug: after an outage every job has some;
                    // the node logs the totals.
                    tracing::debug!(job.id = %row.id, policy = ?spec.misfire, fire = d.fire.len(), recorded = d.record.as_ref().map_or(0, |r| r.slots), "misfired slots found");
                }
                let slot = |at| Slot {
                    job_id: row.id,
                    scheduled_at: at,
                    job_version: row.version,
                    trigger: Trigger::Misfire,
                    max_runs: spec.schedule.max_runs,
                };
                owned.runs += d.fire.len() as u64;
                late.extend(d.fire.into_iter().map(slot));
                self.records.extend(d.record.map(|run| run.decided(slot)));
            }
            // Slots up to the last one in the ledger are taken care of (a
            // gained job was fired by its previous owners until now), except
            // from the first one an older version holds or a change cancelled:
            // the timer takes those again (a claim of a settled slot is a
            // harmless conflict).
            if let Some(last) = decided_to {
                let settled_to = history.unsettled_from.map_or(last, |u| last.min(u - TimeDelta::microseconds(1)));
                from = from.max(settled_to);
            }
        }
        // The slots after `from` are counted as `take_due` takes them.
        let counted_again = row.runs_since_change.iter().filter(|t| **t > from).count() as u64;
        owned.runs = owned.runs.saturating_sub(counted_again);
        self.queue_run(row.id, late);
        owned.arm(&mut self.heap, row.id, from);
        self.owned_count += 1;
        self.jobs.insert(row.id, Known { version: row.version, owned: Some(Box::new(owned)) });
    }

    /// Queues a job's late slots: they wait for the rate limiter, or go out
    /// ahead of the job's next live slot, whichever comes first (see
    /// `CatchUpRun`).
    fn queue_run(&mut self, job: Uuid, late: Vec<Slot>) {
        if late.is_empty() {
            return;
        }
        self.last_run_token += 1;
        let token = self.last_run_token;
        self.runs.entry(job).or_default().push_back(CatchUpRun { token, slots: late });
        self.catchup.push_back((job, token));
    }

    /// The slots of the job's earlier live versions that nobody fired and no
    /// ledger row covers (after `last_slot`): the job had no live owner
    /// while those versions were in force (both owners died, and it was
    /// changed before their heartbeats expired). Each is decided under the
    /// version in force at it: fired if less late than the misfire
    /// threshold, else by that version's misfire policy. Every slot fired
    /// counts towards the `max_runs` of the version it fires under (the
    /// ledger's runs come first: these slots are later than all of them).
    /// Returns how many slots it fired.
    fn catch_up_past_versions(
        &mut self,
        row: &JobRow,
        history: &feed::History,
        now: DateTime<Utc>,
        late: &mut Vec<Slot>,
    ) -> u64 {
        let covered = history.looked_back_to.max(history.last_slot.unwrap_or(DateTime::<Utc>::MIN_UTC));
        let mut runs = row.runs;
        for past in &history.past {
            let misfired_before = now - past.spec.misfire_threshold(self.misfire_threshold);
            let max_runs = past.spec.schedule.max_runs;
            let Ok(schedule) = past.spec.compile(row.created_at) else { continue };
            let since = covered.max(past.valid_from - TimeDelta::microseconds(1));
            let until = past.until - TimeDelta::microseconds(1);
            if since >= until {
                continue;
            }
            let slot =
                |at, trigger| Slot { job_id: row.id, scheduled_at: at, job_version: past.version, trigger, max_runs };
            if since < misfired_before {
                let mut d = misfire::decide(
                    &schedule,
                    past.spec.misfire,
                    past.spec.misfire_cap,
                    since,
                    until.min(misfired_before),
                );
                d.fire.truncate(runs_left(max_runs, runs));
                runs += d.fire.len() as u64;
                late.extend(d.fire.into_iter().map(|at| slot(at, Trigger::Misfire)));
                self.records.extend(d.record.map(|run| run.decided(|at| slot(at, Trigger::Misfire))));
            }
            let mut cursor = since.max(misfired_before);
            while runs_left(max_runs, runs) > 0
                && let Some(at) = schedule.next_after(cursor).filter(|at| *at <= until)
            {
                late.push(slot(at, Trigger::Schedule));
                runs += 1;
                cursor = at;
            }
        }
        runs - row.runs
    }

    /// Recomputes ownership for the new live set; returns the jobs gained,
    /// which the caller fetches and feeds back through `apply`.
    pub fn rebalance(&mut self, members: Vec<String>) -> Vec<Uuid> {
        self.members = members;
        let (mut lost, mut gained) = (Vec::new(), Vec::new());
        for (id, known) in &self.jobs {
            match (known.owned.is_some(), self.is_owner(*id)) {
                (true, false) => lost.push(*id),
                (false, true) => gained.push(*id),
                _ => {}
            }
        }
        for id in &lost {
            self.disown(*id);
        }
        tracing::info!(node.id = %self.node_id, lost = lost.len(), gained = gained.len(), owned = self.owned_count, "ownership recomputed");
        gained
    }

    pub fn next_deadline(&mut self) -> Option<DateTime<Utc>> {
        let jobs = &self.jobs;
        self.heap.peek(|job, g| is_live(jobs, job, g))
    }

    /// Pops every slot due by `horizon` (up to `max`) and re-arms its job.
    pub fn take_due(&mut self, horizon: DateTime<Utc>, now: DateTime<Utc>, max: usize) -> Vec<Slot> {
        let mut slots = Vec::new();
        while slots.len() < max {
            let jobs = &self.jobs;
            let Some((id, _delivery)) = self.heap.pop_due(horizon, |job, g| is_live(jobs, job, g)) else { break };
            // The job's queued catch-up runs go out first (see `CatchUpRun`).
            self.hand_over_runs(id, None, now, &mut slots);
            let Some(known) = self.jobs.get_mut(&id) else { continue };
            let Some(owned) = known.owned.as_mut() else { continue };
            let at = owned.next_slot;
            let slot = Slot {
                job_id: id,
                scheduled_at: at,
                job_version: known.version,
                trigger: Trigger::Schedule,
                max_runs: owned.max_runs,
            };
            let keys = owned.calendars.clone();
            // An excluded slot is recorded, not fired, and is no run; a held
            // one counts until it is recorded unfired (`Core::unfired`).
            if self.judge(slot, &keys, now, true, &mut slots)
                && let Some(owned) = self.jobs.get_mut(&id).and_then(|k| k.owned.as_mut())
            {
                owned.runs += 1;
            }
            if let Some(owned) = self.jobs.get_mut(&id).and_then(|k| k.owned.as_mut()) {
                owned.arm(&mut self.heap, id, at);
            }
        }
        slots
    }

    /// The timer's slots per second of fire time between `from` and `until`
    /// (see [`TimerHeap::due_per_second`]).
    pub fn due_per_second(
        &self,
        from: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> impl Iterator<Item = (DateTime<Utc>, u32)> + '_ {
        self.heap.due_per_second(from, until)
    }

    pub fn compact_timer(&mut self) {
        let jobs = &self.jobs;
        self.heap.compact_if_bloated(|job, g| is_live(jobs, job, g));
    }
}

/// How many more slots a job with `max_runs` may run after `runs`.
fn runs_left(max_runs: Option<u64>, runs: u64) -> usize {
    max_runs.map_or(usize::MAX, |max| max.saturating_sub(runs) as usize)
}

impl Owned {
    fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if runs_left(self.max_runs, self.runs) == 0 {
            return None;
        }
        self.schedule.next_after(t)
    }

    /// Puts the job's first slot after `t` on the timer at its delivery
    /// instant, or leaves it off (generation 0) when it never fires again.
    fn arm(&mut self, heap: &mut TimerHeap, id: Uuid, t: DateTime<Utc>) {
        self.generation = match self.next_after(t) {
            Some(slot) => {
                self.next_slot = slot;
                heap.push(id, slot + domain::schedule::jitter_offset(id, slot, self.jitter_ms))
            }
            None => 0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::job::JobSpec;
    use feed::{History, PastVersion};

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn state() -> Core {
        Core::new("n0".into(), 2, TimeDelta::seconds(30), vec!["n0".into()])
    }

    fn every_two_seconds(max_runs: u64) -> JobSpec {
        serde_json::from_value(serde_json::json!({
            "name": "j",
            "schedule": {"kind": "cron", "expr": "*/2 * * * * *", "timezone": "UTC", "max_runs": max_runs},
            "target": {"kind": "http", "url": "http://127.0.0.1:1/", "method": "POST", "timeout_ms": 1000},
        }))
        .unwrap()
    }

    /// A job whose version 1 (in force 12:00:00–12:00:20) fired its slots up
    /// to 12:00:06 before its owners died, reloaded at 12:00:22 under version
    /// 2 with the ledger holding `runs` runs.
    fn reloaded(runs: u64) -> JobRow {
        let spec = every_two_seconds(4);
        JobRow {
            id: Uuid::from_u128(7),
            version: 2,
            created_at: t("2026-01-01T11:59:59Z"),
            updated_at: t("2026-01-01T12:00:20Z"),
            namespace: "default".into(),
            spec: Some(spec.clone()),
            deleted: false,
            runs,
            runs_since_change: Vec::new(),
            history: Some(History {
                last_slot: Some(t("2026-01-01T12:00:06Z")),
                first_gap: None,
                unsettled_from: None,
                looked_back_to: t("2026-01-01T11:00:00Z"),
                past: vec![PastVersion {
                    version: 1,
                    valid_from: t("2026-01-01T12:00:00Z"),
                    until: t("2026-01-01T12:00:20Z"),
                    spec,
                }],
            }),
        }
    }

    #[test]
    fn catch_up_of_earlier_versions_stops_at_max_runs() {
        let now = t("2026-01-01T12:00:22Z");
        for (runs, caught_up) in [(0, 4), (2, 2), (4, 0)] {
            let mut state = state();
            let row = reloaded(runs);
            let id = row.id;
            state.apply(row, now);
            let slots: Vec<_> = queued_fires(&state).iter().map(|s| (s.scheduled_at, s.job_version)).collect();
            let expected: Vec<_> =
                (0..caught_up).map(|i| (t("2026-01-01T12:00:08Z") + TimeDelta::seconds(2 * i), 1)).collect();
            assert_eq!(slots, expected, "ledger holds {runs} runs");
            // Every run is used up: version 2 never fires.
            let owned = state.jobs[&id].owned.as_ref().expect("owned");
            assert_eq!((owned.runs, owned.generation), (4, 0), "ledger holds {runs} runs");
        }
    }

    /// A job naming a calendar not loaded yet, with caught-up slots of an
    /// earlier version and `max_runs`: once the calendar arrives, every run
    /// it has left fires, the held catch-up slots counted once (they were
    /// counted when queued), so its live slots are not cut short.
    #[test]
    fn held_slots_count_each_run_once_under_max_runs() {
        let now = t("2026-01-01T12:00:22Z");
        let mut state = state();
        let mut row = reloaded(2);
        let mut spec = every_two_seconds(10);
        spec.calendars = vec!["c".into()];
        row.spec = Some(spec.clone());
        row.history.as_mut().unwrap().past[0].spec = spec;
        state.apply(row, now);
        let mut fired = state.take_catchup(usize::MAX, now);
        fired.extend(state.take_due(t("2026-01-01T12:00:24Z"), now, usize::MAX));
        assert!(fired.is_empty(), "nothing fires before the calendar is loaded: {fired:?}");
        let calendar = Calendar::compile("c", &serde_json::from_value(serde_json::json!({"timezone": "UTC"})).unwrap());
        state.set_calendars(HashMap::from([("default/c".to_owned(), Arc::new(calendar.unwrap()))]));
        fired.extend(state.take_held(now));
        fired.extend(state.take_due(t("2026-01-01T12:01:00Z"), t("2026-01-01T12:01:00Z"), usize::MAX));
        let versions: Vec<i64> = fired.iter().map(|s| s.job_version).collect();
        // Runs 3 to 10: the six slots of version 1 it missed, then two of version 2.
        assert_eq!(versions, [1, 1, 1, 1, 1, 1, 2, 2], "{fired:?}");
    }

    #[test]
    fn catch_up_of_earlier_versions_without_max_runs_fires_every_slot() {
        let now = t("2026-01-01T12:00:22Z");
        let mut state = state();
        let mut row = reloaded(0);
        let mut spec = every_two_seconds(4);
        spec.schedule.max_runs = None;
        row.spec = Some(spec.clone());
        row.history.as_mut().unwrap().past[0].spec = spec;
        state.apply(row, now);
        // 12:00:08 to 12:00:18 under version 1; version 2 takes 12:00:20 on,
        // once those are handed over.
        assert_eq!(queued_fires(&state).len(), 6);
        assert_eq!(state.next_deadline(), Some(t("2026-01-01T12:00:20Z")));
        assert_eq!(state.take_catchup(100, now).len(), 6);
        assert_eq!(state.next_deadline(), Some(t("2026-01-01T12:00:20Z")));
    }

    fn queued_fires(state: &Core) -> Vec<Slot> {
        state
            .catchup
            .iter()
            .filter_map(|(job, token)| state.runs.get(job)?.iter().find(|r| r.token == *token))
            .flat_map(|r| r.slots.iter().cloned())
            .collect()
    }

    /// Jobs every two seconds whose owners were all down from 12:00:06 on,
    /// reloaded at `now` with a misfire policy of `fire_once`: each has one
    /// coalesced late fire to catch up.
    fn misfired_jobs(n: u128, now: DateTime<Utc>) -> Core {
        let mut state = state();
        for id in 1..=n {
            let mut row = reloaded(0);
            row.id = Uuid::from_u128(id);
            let mut spec = every_two_seconds(0);
            spec.schedule.max_runs = None;
            spec.misfire = domain::job::MisfirePolicy::FireOnce;
            row.spec = Some(spec);
            row.history.as_mut().unwrap().past.clear();
            state.apply(row, now);
        }
        state
    }

    /// The ledger stays a prefix in time for every job: a job's live slots
    /// never go out before its queued catch-up run (a node that stopped with
    /// the run queued would leave a gap the next owner never decides), and
    /// they do not wait for other jobs' runs either: the rate limiter held
    /// every job's timer behind every earlier run, so a restart after a long
    /// outage fired nothing live for minutes.
    #[test]
    fn a_jobs_live_slots_go_out_right_after_its_own_run_and_not_after_the_others() {
        let now = t("2026-01-01T12:10:00Z");
        let mut state = misfired_jobs(3, now);
        assert_eq!(queued_fires(&state).len(), 3);
        // No catch-up budget at all: the timer still hands every job over
        // at its next live slot, each job's late fire first.
        let due = state.take_due(now + TimeDelta::seconds(2), now, 1000);
        for id in 1..=3u128 {
            let job: Vec<&Slot> = due.iter().filter(|s| s.job_id == Uuid::from_u128(id)).collect();
            assert_eq!(job[0].trigger, Trigger::Misfire, "{job:?}");
            assert!(job.len() > 1 && job[1..].iter().all(|s| s.trigger == Trigger::Schedule), "{job:?}");
            assert!(job.windows(2).all(|w| w[0].scheduled_at < w[1].scheduled_at), "{job:?}");
        }
        // Their runs left the queue with them.
        assert!(state.take_catchup(10, now).is_empty());
        assert!(queued_fires(&state).is_empty());
    }

    proptest::proptest! {
        /// Any interleaving of rate-limited catch-up and timer hand-overs:
        /// every job's slots come out in time order, its late fire once,
        /// and nothing is handed over twice.
        #[test]
        fn catch_up_and_timer_hand_over_every_jobs_slots_in_order(
            jobs in 1u128..30,
            steps in proptest::collection::vec((0usize..4, 0i64..1500), 1..40),
        ) {
            let now = t("2026-01-01T12:10:00Z");
            let mut state = misfired_jobs(jobs, now);
            let mut out: Vec<Slot> = Vec::new();
            let mut clock = now;
            for (budget, advance_ms) in steps {
                out.extend(state.take_catchup(budget, clock));
                clock += TimeDelta::milliseconds(advance_ms);
                out.extend(state.take_due(clock, clock, 7));
            }
            out.extend(state.take_catchup(usize::MAX, clock));
            out.extend(state.take_due(clock, clock, usize::MAX));
            let mut seen = std::collections::HashSet::new();
            for id in 1..=jobs {
                let job: Vec<&Slot> = out.iter().filter(|s| s.job_id == Uuid::from_u128(id)).collect();
                proptest::prop_assert!(job.windows(2).all(|w| w[0].scheduled_at < w[1].scheduled_at), "{:?}", job);
                proptest::prop_assert_eq!(job.iter().filter(|s| s.trigger == Trigger::Misfire).count(), 1);
                proptest::prop_assert_eq!(job[0].trigger, Trigger::Misfire);
            }
            for slot in &out {
                proptest::prop_assert!(seen.insert((slot.job_id, slot.scheduled_at)), "twice: {:?}", slot);
            }
        }
    }

    /// A node gains a job 200 ms before a slot whose row an older version
    /// holds armed, while the previous owner already claimed later slots:
    /// its timer starts at that slot (to re-take it once cancelled), not
    /// after the last claimed one.
    #[test]
    fn a_gained_job_starts_at_the_first_slot_an_older_version_holds() {
        let now = t("2026-01-01T12:00:21.800Z");
        let mut state = state();
        let mut row = reloaded(0);
        let mut spec = every_two_seconds(4);
        spec.schedule.max_runs = None;
        row.spec = Some(spec);
        let history = row.history.as_mut().unwrap();
        history.past.clear();
        history.last_slot = Some(t("2026-01-01T12:00:30Z"));
        history.unsettled_from = Some(t("2026-01-01T12:00:22Z"));
        state.apply(row.clone(), now);
        assert_eq!(state.next_deadline(), Some(t("2026-01-01T12:00:22Z")));
        // With nothing unsettled, the slots up to the last claimed are done.
        row.history.as_mut().unwrap().unsettled_from = None;
        let mut state = self::state();
        state.apply(row, now);
        assert_eq!(state.next_deadline(), Some(t("2026-01-01T12:00:32Z")));
    }

    /// A job whose ledger has a slot without a row before its last one (an
    /// owner stopped holding it in memory while the other owner claimed a
    /// later slot) is decided again from that slot: fired when it is less
    /// late than the misfire threshold, by the misfire policy when older.
    /// Started after the last slot, as before, that slot was lost for good.
    #[test]
    fn a_slot_without_a_row_before_the_last_one_is_decided_again() {
        let now = t("2026-01-01T12:00:41.500Z");
        let row = |gap: &str| {
            let mut row = reloaded(0);
            let mut spec = every_two_seconds(4);
            spec.schedule.max_runs = None;
            row.spec = Some(spec);
            row.updated_at = row.created_at;
            let history = row.history.as_mut().unwrap();
            history.past.clear();
            history.last_slot = Some(t("2026-01-01T12:00:40Z"));
            history.first_gap = Some(t(gap));
            row
        };

        // Within the threshold: the timer starts at the gap; the slots after
        // it that have rows are handed over again and conflict in the claim.
        let mut state = state();
        state.apply(row("2026-01-01T12:00:36Z"), now);
        assert!(state.take_records().is_empty());
        let due: Vec<_> = state.take_due(now, now, 100).into_iter().map(|s| s.scheduled_at).collect();
        assert_eq!(due, [t("2026-01-01T12:00:36Z"), t("2026-01-01T12:00:38Z"), t("2026-01-01T12:00:40Z")]);

        // Older than the threshold (12:00:11.5): the policy decides it
        // (`fire_once` records the older slots and fires the latest one,
        // which has a row and so only conflicts); the timer starts at the
        // threshold.
        let mut state = self::state();
        state.apply(row("2026-01-01T12:00:04Z"), now);
        let recorded: Vec<_> =
            state.take_records().into_iter().map(|d| (d.slot.scheduled_at, d.last_at, d.slots)).collect();
        assert_eq!(recorded, [(t("2026-01-01T12:00:04Z"), t("2026-01-01T12:00:08Z"), 3)], "one run of the older slots");
        let due: Vec<_> = state.take_due(now, now, 100).into_iter().map(|s| s.scheduled_at).collect();
        assert_eq!(due.first(), Some(&t("2026-01-01T12:00:10Z")), "the late fire, then the timer's slots: {due:?}");
        assert_eq!(due.get(1), Some(&t("2026-01-01T12:00:12Z")));

        // A gap at or after the last slot is no gap.
        let mut state = self::state();
        state.apply(row("2026-01-01T12:00:40Z"), now);
        assert_eq!(state.next_deadline(), Some(t("2026-01-01T12:00:42Z")));
    }

    proptest::proptest! {
        /// A job reloaded after its owners were down for a random time,
        /// compared slot by slot with the model: its missed slots are one
        /// series judged by the oldest. Oldest less late than the threshold
        /// (a failover): every slot fires, late, as scheduled. Older (an
        /// outage): the policy decides every slot due by now, none of them
        /// fires as a scheduled slot, the ones it fires are the latest, and
        /// the rest are one recorded run. Either way each slot is accounted
        /// for once and the timer goes on after now.
        #[test]
        fn a_jobs_missed_slots_are_one_series_judged_by_its_oldest(
            down_ms in 0i64..150_000,
            policy in 0usize..3,
            cap in 1u32..6,
        ) {
            use domain::job::MisfirePolicy;
            let policy = [MisfirePolicy::FireOnce, MisfirePolicy::Skip, MisfirePolicy::FireAll][policy];
            let last_slot = t("2026-01-01T12:00:06Z");
            let now = last_slot + TimeDelta::milliseconds(down_ms);
            let mut state = state();
            let mut row = reloaded(0);
            let mut spec = every_two_seconds(0);
            spec.schedule.max_runs = None;
            spec.misfire = policy;
            spec.misfire_cap = cap;
            row.spec = Some(spec);
            row.updated_at = row.created_at;
            row.history.as_mut().unwrap().past.clear();
            state.apply(row, now);
            let records = state.take_records();
            let mut out = state.take_catchup(usize::MAX, now);
            out.extend(state.take_due(now, now, usize::MAX));

            let missed: Vec<DateTime<Utc>> =
                (1..).map(|k| last_slot + TimeDelta::seconds(2 * k)).take_while(|s| *s <= now).collect();
            let fired: Vec<(DateTime<Utc>, Trigger)> = out.iter().map(|s| (s.scheduled_at, s.trigger)).collect();
            let outage = missed.first().is_some_and(|oldest| *oldest <= now - TimeDelta::seconds(30));
            if outage {
                let keep = match policy {
                    MisfirePolicy::Skip => 0,
                    MisfirePolicy::FireOnce => 1,
                    MisfirePolicy::FireAll => cap as usize,
                }.min(missed.len());
                let (recorded, latest) = missed.split_at(missed.len() - keep);
                let expected: Vec<_> = latest.iter().map(|s| (*s, Trigger::Misfire)).collect();
                proptest::prop_assert_eq!(fired, expected);
                let runs: Vec<_> = records.iter().map(|d| (d.slot.scheduled_at, d.last_at, d.slots)).collect();
                let expected_runs: Vec<_> = match (recorded.first(), recorded.last()) {
                    (Some(first), Some(last)) => vec![(*first, *last, recorded.len() as u64)],
                    _ => vec![],
                };
                proptest::prop_assert_eq!(runs, expected_runs);
            } else {
                let expected: Vec<_> = missed.iter().map(|s| (*s, Trigger::Schedule)).collect();
                proptest::prop_assert_eq!(fired, expected);
                proptest::prop_assert!(records.is_empty());
            }
            proptest::prop_assert!(state.next_deadline().is_some_and(|next| next > now));
        }
    }

    // ---------------------------------------------------------- properties

    use proptest::prelude::*;

    const BASE: &str = "2026-01-01T12:00:00Z";

    fn ms(offset: i64) -> DateTime<Utc> {
        t(BASE) + TimeDelta::milliseconds(offset)
    }

    fn interval(every_ms: u64, anchor_ms: i64) -> JobSpec {
        serde_json::from_value(serde_json::json!({
            "name": "j",
            "schedule": {"kind": "interval", "every_ms": every_ms, "start_at": ms(anchor_ms)},
            "target": {"kind": "http", "url": "http://127.0.0.1:1/", "method": "POST", "timeout_ms": 1000},
        }))
        .unwrap()
    }

    /// A created or changed job, as the feed hands it over (no history).
    fn changed(id: u128, version: i64, spec: JobSpec, changed_ms: i64) -> JobRow {
        JobRow {
            id: Uuid::from_u128(id),
            version,
            created_at: ms(-60_000),
            updated_at: ms(changed_ms),
            namespace: "default".into(),
            spec: Some(spec),
            deleted: false,
            runs: 0,
            runs_since_change: Vec::new(),
            history: None,
        }
    }

    fn core_of(members: &[&str]) -> Core {
        Core::new("n0".into(), 2, TimeDelta::seconds(30), members.iter().map(|m| m.to_string()).collect())
    }

    /// Every slot up to `until_ms`, taken `step_ms` at a time in batches of
    /// at most `max`.
    fn drain(core: &mut Core, until_ms: i64, step_ms: i64, max: usize) -> Vec<Slot> {
        let mut out = Vec::new();
        let mut horizon = 0;
        while horizon < until_ms {
            horizon = (horizon + step_ms).min(until_ms);
            loop {
                let batch = core.take_due(ms(horizon), ms(horizon), max);
                let n = batch.len();
                out.extend(batch);
                if n < max {
                    break;
                }
            }
        }
        out
    }

    fn key(slots: &[Slot]) -> Vec<(Uuid, DateTime<Utc>, i64)> {
        slots.iter().map(|s| (s.job_id, s.scheduled_at, s.job_version)).collect()
    }

    /// (every_ms, anchor_ms) of a few interval jobs.
    fn jobs() -> impl Strategy<Value = Vec<(u64, i64)>> {
        prop::collection::vec((200u64..5_000, 0i64..5_000), 1..12)
    }

    proptest! {
        /// Slots come out in time order across batches, each job's strictly
        /// increasing, and none is lost: exactly the schedule's slots.
        #[test]
        fn due_slots_come_out_in_order_and_complete(jobs in jobs(), step in 1i64..3_000, max in 1usize..6) {
            let mut core = core_of(&["n0"]);
            for (i, (every, anchor)) in jobs.iter().enumerate() {
                core.apply(changed(i as u128 + 1, 1, interval(*every, *anchor), 0), ms(0));
            }
            let until = 20_000;
            let out = drain(&mut core, until, step, max);
            prop_assert!(out.windows(2).all(|w| w[0].scheduled_at <= w[1].scheduled_at));
            for (i, (every, anchor)) in jobs.iter().enumerate() {
                let id = Uuid::from_u128(i as u128 + 1);
                let got: Vec<_> = out.iter().filter(|s| s.job_id == id).map(|s| s.scheduled_at).collect();
                let expected: Vec<_> =
                    (0..).map(|k| ms(anchor + k * *every as i64)).take_while(|at| *at <= ms(until)).collect();
                prop_assert_eq!(got, expected);
            }
        }

        /// With jitter, every slot still comes out exactly once, keyed by its
        /// scheduled time, and never before its delivery instant minus the
        /// horizon step nor later than one step after it.
        #[test]
        fn jittered_slots_come_out_by_their_delivery_instant(jobs in jobs(), jitter in 1u64..400, step in 1i64..300) {
            let mut core = core_of(&["n0"]);
            for (i, (every, anchor)) in jobs.iter().enumerate() {
                let mut spec = interval(*every, *anchor);
                spec.jitter_ms = jitter.min(*every - 1);
                core.apply(changed(i as u128 + 1, 1, spec, 0), ms(0));
            }
            let until = 10_000;
            let mut horizon = 0;
            let mut out = Vec::new();
            while horizon < until {
                horizon = (horizon + step).min(until);
                for slot in core.take_due(ms(horizon), ms(horizon), usize::MAX) {
                    out.push((slot.clone(), horizon));
                }
            }
            for (i, (every, anchor)) in jobs.iter().enumerate() {
                let id = Uuid::from_u128(i as u128 + 1);
                let jitter_ms = jitter.min(*every - 1);
                let got: Vec<_> = out.iter().filter(|(s, _)| s.job_id == id).collect();
                for (slot, taken_at) in &got {
                    let delivery = slot.scheduled_at + domain::schedule::jitter_offset(id, slot.scheduled_at, jitter_ms);
                    prop_assert!(delivery <= ms(*taken_at) && ms(*taken_at) < delivery + TimeDelta::milliseconds(step));
                }
                let delivered_by_end = |at: DateTime<Utc>| at + domain::schedule::jitter_offset(id, at, jitter_ms) <= ms(until);
                let expected: Vec<_> = (0..).map(|k| ms(anchor + k * *every as i64)).take_while(|at| delivered_by_end(*at)).collect();
                prop_assert_eq!(got.iter().map(|(s, _)| s.scheduled_at).collect::<Vec<_>>(), expected);
            }
        }

        /// A row older than the one applied (the feed may repeat or reorder
        /// rows) changes nothing.
        #[test]
        fn an_older_version_is_ignored(jobs in jobs(), other in (200u64..5_000, 0i64..5_000)) {
            let (mut reordered, mut straight) = (core_of(&["n0"]), core_of(&["n0"]));
            for (i, (every, anchor)) in jobs.iter().enumerate() {
                let id = i as u128 + 1;
                straight.apply(changed(id, 2, interval(*every, *anchor), 0), ms(0));
                reordered.apply(changed(id, 2, interval(*every, *anchor), 0), ms(0));
                reordered.apply(changed(id, 1, interval(other.0, other.1), -1_000), ms(0));
            }
            prop_assert_eq!(key(&drain(&mut reordered, 15_000, 1_000, 100)), key(&drain(&mut straight, 15_000, 1_000, 100)));
        }

        /// A membership change drops exactly the jobs this node no longer
        /// owns, reports exactly those it gained, and leaves the timers of
        /// the jobs it keeps untouched.
        #[test]
        fn a_rebalance_drops_only_lost_jobs(
            jobs in jobs(),
            before in prop::collection::vec(any::<bool>(), 4),
            after in prop::collection::vec(any::<bool>(), 4),
        ) {
            let pick = |on: &[bool]| -> Vec<String> {
                std::iter::once("n0".to_string())
                    .chain(on.iter().enumerate().filter(|(_, on)| **on).map(|(i, _)| format!("n{}", i + 1)))
                    .collect()
            };
            let (m1, m2) = (pick(&before), pick(&after));
            let owns = |members: &[String], id: Uuid| ownership::is_owner("n0", id, members, 2);
            let mut core = Core::new("n0".into(), 2, TimeDelta::seconds(30), m1.clone());
            let mut kept_only = Core::new("n0".into(), 2, TimeDelta::seconds(30), m1.clone());
            for (i, (every, anchor)) in jobs.iter().enumerate() {
                let row = changed(i as u128 + 1, 1, interval(*every, *anchor), 0);
                if owns(&m2, row.id) {
                    kept_only.apply(row.clone(), ms(0));
                }
                core.apply(row, ms(0));
            }
            let ids: Vec<Uuid> = (1..=jobs.len() as u128).map(Uuid::from_u128).collect();
            let mut gained = core.rebalance(m2.clone());
            gained.sort();
            let expected: Vec<Uuid> = ids.iter().copied().filter(|id| !owns(&m1, *id) && owns(&m2, *id)).collect();
            prop_assert_eq!(gained, expected);
            prop_assert_eq!(core.owned_count(), ids.iter().filter(|id| owns(&m1, **id) && owns(&m2, **id)).count());
            // The kept jobs fire as if nothing had happened.
            let kept: Vec<_> = drain(&mut core, 15_000, 700, 100);
            let reference: Vec<_> = drain(&mut kept_only, 15_000, 700, 100)
                .into_iter()
                .filter(|s| owns(&m1, s.job_id))
                .collect();
            prop_assert_eq!(key(&kept), key(&reference));
        }

        /// A change inside the lookahead window: slots taken before it stay
        /// as they were; from the change on, exactly the new version's slots
        /// come out, under the new version, and none of the old one's.
        #[test]
        fn a_change_in_the_lookahead_window_replaces_exactly_the_slots_after_it(
            old in (200u64..3_000, 0i64..3_000),
            new in (200u64..3_000, 0i64..3_000),
            armed_to in 2_000i64..8_000,
            change_back in 1i64..2_000,
        ) {
            let mut core = core_of(&["n0"]);
            core.apply(changed(1, 1, interval(old.0, old.1), -10_000), ms(0));
            let before = drain(&mut core, armed_to, 500, 100);
            // Made while the slots up to `armed_to` are already handed out.
            let change = armed_to - change_back;
            core.apply(changed(1, 2, interval(new.0, new.1), change), ms(change));
            let after = drain(&mut core, 20_000, 500, 100);
            prop_assert!(before.iter().all(|s| s.job_version == 1 && s.scheduled_at <= ms(armed_to)));
            let expected: Vec<_> = (0..)
                .map(|k| ms(new.1 + k * new.0 as i64))
                .skip_while(|at| *at < ms(change))
                .take_while(|at| *at <= ms(20_000))
                .map(|at| (Uuid::from_u128(1), at, 2))
                .collect();
            prop_assert_eq!(key(&after), expected);
        }

        /// A job naming a calendar the node has not loaded never fires past
        /// it: its slots wait (in order) until the calendar arrives, then each
        /// is either fired (in order, once) or recorded as excluded, and no
        /// slot is lost. Jobs without calendars are not held back.
        #[test]
        fn slots_never_fire_past_a_calendar_not_loaded_yet(
            jobs in jobs(),
            named in prop::collection::vec(any::<bool>(), 12),
            loaded_at in 0i64..20_000,
            step in 100i64..1_500,
        ) {
            let mut core = core_of(&["n0"]);
            for (i, (every, anchor)) in jobs.iter().enumerate() {
                let mut spec = interval(*every, *anchor);
                if named[i] {
                    spec.calendars = vec!["odd".into()];
                }
                core.apply(changed(i as u128, 1, spec, -10_000), ms(0));
            }
            // Odd seconds of the minute are excluded.
            let calendar = Calendar::compile("odd", &serde_json::from_value(serde_json::json!({
                "timezone": "UTC", "rules": ["1-59/2 * * * * *"]
            })).unwrap()).unwrap();
            let (mut fired, mut recorded) = (Vec::new(), Vec::new());
            let mut horizon = 0;
            let mut loaded = false;
            while horizon < 25_000 {
                horizon += step;
                if !loaded && horizon >= loaded_at {
                    loaded = true;
                    core.set_calendars(HashMap::from([("default/odd".to_owned(), Arc::new(calendar.clone()))]));
                }
                let batch = core.take_held(ms(horizon));
                prop_assert!(loaded || batch.is_empty());
                fired.extend(batch);
                let due = core.take_due(ms(horizon), ms(horizon), usize::MAX);
                for s in &due {
                    let i = s.job_id.as_u128() as usize;
                    prop_assert!(!named[i] || loaded, "slot {} of a job naming an unloaded calendar fired", s.scheduled_at);
                }
                fired.extend(due);
                recorded.extend(core.take_records());
            }
            fired.extend(core.take_held(ms(horizon)));
            recorded.extend(core.take_records());
            prop_assert!(!core.has_held());
            for (i, (every, anchor)) in jobs.iter().enumerate() {
                let id = Uuid::from_u128(i as u128);
                let expected: Vec<_> = (0..)
                    .map(|k| ms(anchor + k * *every as i64))
                    .skip_while(|at| *at <= ms(-10_000))
                    .take_while(|at| *at <= ms(horizon))
                    .collect();
                let mine: Vec<_> = fired.iter().filter(|s| s.job_id == id).map(|s| s.scheduled_at).collect();
                prop_assert!(mine.windows(2).all(|w| w[0] < w[1]), "job {i} fired out of order: {mine:?}");
                let skipped: Vec<_> = recorded.iter().filter(|d| d.slot.job_id == id).map(|d| d.slot.scheduled_at).collect();
                let mut all: Vec<_> = mine.iter().chain(&skipped).copied().collect();
                all.sort();
                prop_assert_eq!(&all, &expected, "job {} lost or repeated a slot", i);
                if named[i] {
                    prop_assert!(mine.iter().all(|at| !calendar.excludes(*at)));
                    prop_assert!(skipped.iter().all(|at| calendar.excludes(*at)));
                } else {
                    prop_assert!(skipped.is_empty());
                }
            }
        }
    }

    /// A calendar that never arrives: the slot is recorded
    /// `calendar_unavailable:NAME` after [`CALENDAR_WAIT`], never fired.
    #[test]
    fn a_calendar_that_never_loads_records_its_slots_unavailable_after_the_wait() {
        let mut core = core_of(&["n0"]);
        let mut spec = interval(1_000, 0);
        spec.calendars = vec!["late".into()];
        core.apply(changed(1, 1, spec, -10_000), ms(0));
        assert!(core.take_calendars_wanted(), "a job naming an unloaded calendar asks for a reload");
        assert!(core.take_due(ms(1_000), ms(1_000), 100).is_empty());
        assert!(core.has_held());
        assert!(core.take_held(ms(1_000 + CALENDAR_WAIT.num_milliseconds() - 1)).is_empty());
        assert!(core.take_records().is_empty(), "nothing decided before the wait is over");
        assert!(core.take_held(ms(1_000 + CALENDAR_WAIT.num_milliseconds())).is_empty());
        let records = core.take_records();
        assert!(!records.is_empty());
        assert!(records.iter().all(|r| r.reason == "calendar_unavailable:late" && r.status == Status::Skipped));
        assert!(!core.has_held(), "every held slot is decided");
    }
}
