//! `churn`: a randomized, model-based test of changing jobs shortly before
//! their slots (the bug class "a change near a slot loses, strands or
//! duplicates it").
//!
//! A real stack runs jobs of every kind (cron, interval, one-time, a few with
//! `max_runs`, a few whose receiver answers 500). For `--seconds`, a few
//! concurrent operators each take a free job and, timed to land within ±2 s
//! of one of its slots, PUT or apply (by key, as a job file would) a new
//! definition (a new URL tag `v{n}`), pause, resume, delete, trigger or
//! replay it; schedulers are killed (-9) and
//! added meanwhile. Every answered op is recorded with its [sent, received]
//! window, and every 2xx change becomes a new definition in the model. After
//! the ledger settles, every slot of the op phase is judged against the
//! model:
//!
//! - a change applies to the slots due at or after the instant it is made;
//!   the test only knows that instant lies in the op's window, so a slot
//!   within [`SLACK`] of it may follow the definition before or after;
//! - a slot the definition in force fires is delivered exactly once, under a
//!   definition (URL tag) in force between the slot and that delivery;
//! - a paused, deleted or unscheduled slot is not delivered, and a paused
//!   slot's ledger row says `skipped` / `paused`; a delete also stops what
//!   the job has not delivered yet, so a slot due within [`DELETE_REACH`]
//!   before it (or [`DELETE_REACH_AFTER_KILL`] when a scheduler was killed
//!   shortly before the slot) may go undelivered;
//! - a failing job's slot arrives 1 + (accepted replays) times, a trigger once;
//! - no ledger row of the phase is left unfinished (stranded).
//!
//! Ops on one job are serialized (one operator holds it at a time), so a
//! job's changes are totally ordered and its definitions form a sequence.
//! A `--seed` makes the choices repeatable (the timings are the machine's).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use reqwest::Method;
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use domain::execution::{execution_id, format_instant, truncate_ms};
use domain::job::{JobSpec, ScheduleKind, Target};
use domain::schedule::CompiledSchedule;

use crate::receiver::{Delivery, Receiver};
use crate::report::{OutArgs, Report, fmt_f, fmt_int};
use crate::stack::{Stack, StackArgs};
use crate::steady::sleep_until;
use testing::SeededRng as Rng;

/// How far either side of an op's [sent, received] window a slot counts as
/// made "at the same time" as the change: both ends are read on one clock,
/// but the instant the API applied the change is only known to be inside.
const SLACK: TimeDelta = TimeDelta::milliseconds(100);
/// Ops are timed to land within this much of a slot of their job.
const AIM: i64 = 2_000;

#[derive(clap::Args)]
pub struct ChurnArgs {
    /// Jobs created: cron, interval and one-time; 1 in 8 with max_runs,
    /// 1 in 10 aimed at a path the receiver answers 500.
    #[arg(long, default_value_t = 40)]
    jobs: usize,
    /// Length of the op phase.
    #[arg(long, default_value_t = 60)]
    seconds: i64,
    /// Longest wait after the op phase for the ledger to settle (no
    /// unfinished row, every required delivery in).
    #[arg(long, default_value_t = 90)]
    settle_seconds: i64,
    /// Seed of every random choice (default: random; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Kill -9 or add a scheduler every --kill-every-secs, keeping 2 to 4 live.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    kill_nodes: bool,
    #[arg(long, default_value_t = 15)]
    kill_every_secs: i64,
    /// Concurrent operators; each changes one job at a time.
    #[arg(long, default_value_t = 6)]
    operators: usize,
    /// Problems listed in detail.
    #[arg(long, default_value_t = 20)]
    show_problems: usize,
    #[command(flatten)]
    stack: StackArgs,
    #[command(flatten)]
    out: OutArgs,
}

// ---------------------------------------------------------------- the model

/// One definition of a job as the API answered it.
#[derive(Clone, Debug)]
struct Def {
    /// The `v{tag}` ending its target URL.
    tag: u32,
    schedule: CompiledSchedule,
    label: String,
    paused: bool,
    deleted: bool,
}

impl Def {
    /// Whether this definition delivers slot `t`.
    fn fires(&self, t: DateTime<Utc>) -> bool {
        !self.paused && !self.deleted && self.schedule.fires_at(t)
    }

    fn describe(&self) -> String {
        let state = if self.deleted {
            " (deleted)"
        } else if self.paused {
            " (paused)"
        } else {
            ""
        };
        format!("v{} {}{state}", self.tag, self.label)
    }
}

struct JobModel {
    index: usize,
    id: Uuid,
    fail: bool,
    max_runs: Option<u64>,
    /// The current schedule as the API returned it: "the same schedule" of a PUT.
    schedule_json: Value,
    /// `defs[k]` is in force after `k` changes (`defs[0]`: as created).
    defs: Vec<Def>,
    /// [sent, received] of each applied change; ordered, as ops on a job are serialized.
    changes: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    next_tag: u32,
    busy: bool,
    deleted: bool,
    /// A change whose outcome is unknown (no answer, 5xx) was sent then: the
    /// model cannot say what followed, so later slots are not judged.
    unknown_from: Option<DateTime<Utc>>,
}

impl JobModel {
    /// Indices of the oldest and newest definitions that may be in force at `t`.
    fn possible(&self, t: DateTime<Utc>) -> (usize, usize) {
        let lo = self.changes.iter().filter(|(_, r)| *r + SLACK < t).count();
        let hi = self.changes.iter().filter(|(s, _)| *s - SLACK <= t).count();
        (lo, hi.max(lo))
    }

    fn judged(&self, t: DateTime<Utc>) -> bool {
        self.unknown_from.is_none_or(|u| t < u - SLACK)
    }

    fn schedule_kind_at_creation(&self) -> &'static str {
        match self.defs[0].label.split(' ').next() {
            Some("cron") => "cron",
            Some("every") => "interval",
            _ => "once",
        }
    }

    /// When the delete was sent, if the job was deleted.
    fn delete_sent(&self) -> Option<DateTime<Utc>> {
        if self.deleted { self.changes.last().map(|c| c.0) } else { None }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum OpKind {
    Put,
    Pause,
    Resume,
    Delete,
    Trigger,
    Replay,
    /// A new definition through `POST /v1/apply`, the job named by its key.
    Apply,
}

impl OpKind {
    const ALL: [OpKind; 7] =
        [OpKind::Put, OpKind::Pause, OpKind::Resume, OpKind::Delete, OpKind::Trigger, OpKind::Replay, OpKind::Apply];

    fn name(self) -> &'static str {
        match self {
            OpKind::Put => "PUT",
            OpKind::Pause => "pause",
            OpKind::Resume => "resume",
            OpKind::Delete => "delete",
            OpKind::Trigger => "trigger",
            OpKind::Replay => "replay",
            OpKind::Apply => "apply",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
struct OpRecord {
    job: usize,
    kind: OpKind,
    sent: DateTime<Utc>,
    received: DateTime<Utc>,
    /// 0 when no answer came.
    status: u16,
    /// The slot the op was timed against.
    aimed_at: Option<DateTime<Utc>>,
    /// The resulting definition, the execution fired, or the refusal.
    detail: String,
}

/// A trigger or replay the API accepted: its execution must arrive.
#[derive(Clone, Debug)]
struct Manual {
    job: usize,
    execution_id: String,
    replay: bool,
    sent: DateTime<Utc>,
}

#[derive(Default)]
struct World {
    jobs: Vec<JobModel>,
    ops: Vec<OpRecord>,
    manual: Vec<Manual>,
    /// When a scheduler was killed -9.
    kills: Vec<DateTime<Utc>>,
}

/// What an operator is about to do.
struct Plan {
    job: usize,
    kind: OpKind,
    aimed_at: Option<DateTime<Utc>>,
    at: DateTime<Utc>,
}

/// An API answer and the instants around it.
struct Answer {
    sent: DateTime<Utc>,
    received: DateTime<Utc>,
    status: u16,
    body: Value,
}

impl World {
    /// Takes a free job and chooses what to do to it and when.
    fn pick(&mut self, rng: &mut Rng, now: DateTime<Utc>) -> Option<Plan> {
        let free: Vec<usize> =
            self.jobs.iter().filter(|j| !j.busy && !j.deleted && j.unknown_from.is_none()).map(|j| j.index).collect();
        if free.is_empty() {
            return None;
        }
        let job = &mut self.jobs[free[rng.below(free.len() as u64) as usize]];
        let def = job.defs.last().expect("a job has a definition");
        let weight = |k: OpKind| -> u64 {
            match k {
                OpKind::Put => 20,
                OpKind::Apply => 15,
                OpKind::Pause if def.paused => 3,
                OpKind::Pause => 15,
                OpKind::Resume if def.paused => 25,
                OpKind::Resume => 4,
                OpKind::Delete => 2,
                OpKind::Trigger => 10,
                OpKind::Replay if job.fail => 25,
                OpKind::Replay => 6,
            }
        };
        let mut roll = rng.below(OpKind::ALL.iter().map(|k| weight(*k)).sum());
        let kind = *OpKind::ALL
            .iter()
            .find(|k| {
                let w = weight(**k);
                if roll < w {
                    true
                } else {
                    roll -= w;
                    false
                }
            })
            .expect("the roll is below the total weight");
        // The next slot at least AIM away, so the whole ±AIM range is ahead.
        let aimed_at =
            def.schedule.next_after(now + TimeDelta::milliseconds(AIM)).filter(|t| *t < now + TimeDelta::seconds(20));
        let at = match aimed_at {
            Some(t) => t + TimeDelta::milliseconds(rng.between(-AIM, AIM)),
            None => now + TimeDelta::milliseconds(rng.between(0, AIM)),
        };
        job.busy = true;
        Some(Plan { job: job.index, kind, aimed_at, at })
    }

    /// Records an op's answer and applies it to the model when it was 2xx;
    /// frees the job.
    fn settle_op(&mut self, plan: &Plan, a: &Answer, error: Option<String>) {
        let ok = (200..300).contains(&a.status);
        let job = &mut self.jobs[plan.job];
        job.busy = false;
        let detail = if ok {
            match plan.kind {
                OpKind::Put | OpKind::Apply | OpKind::Pause | OpKind::Resume => match def_from_job(&a.body) {
                    Ok((def, schedule)) => {
                        let d = def.describe();
                        job.defs.push(def);
                        job.changes.push((a.sent, a.received));
                        job.schedule_json = schedule;
                        d
                    }
                    Err(e) => {
                        job.unknown_from.get_or_insert(a.sent);
                        format!("unreadable answer ({e:#}): outcome unknown")
                    }
                },
                OpKind::Delete => {
                    let mut def = job.defs.last().expect("a job has a definition").clone();
                    def.deleted = true;
                    let d = def.describe();
                    job.defs.push(def);
                    job.changes.push((a.sent, a.received));
                    job.deleted = true;
                    d
                }
                OpKind::Trigger | OpKind::Replay => match a.body["execution_id"].as_str() {
                    Some(id) => {
                        self.manual.push(Manual {
                            job: plan.job,
                            execution_id: id.to_owned(),
                            replay: plan.kind == OpKind::Replay,
                            sent: a.sent,
                        });
                        id.to_owned()
                    }
                    None => {
                        job.unknown_from.get_or_insert(a.sent);
                        "no execution_id in the answer: outcome unknown".into()
                    }
                },
            }
        } else if a.status == 0 || a.status >= 500 {
            // A 5xx or a lost answer may still have committed.
            job.unknown_from.get_or_insert(a.sent);
            format!("outcome unknown: {}", error.unwrap_or_else(|| problem_text(&a.body)))
        } else {
            problem_text(&a.body)
        };
        self.ops.push(OpRecord {
            job: plan.job,
            kind: plan.kind,
            sent: a.sent,
            received: a.received,
            status: a.status,
            aimed_at: plan.aimed_at,
            detail,
        });
    }
}

fn problem_text(body: &Value) -> String {
    body["detail"].as_str().or(body["title"].as_str()).unwrap_or_default().chars().take(120).collect()
}

/// The definition a job answer describes, and its schedule as JSON.
fn def_from_job(body: &Value) -> anyhow::Result<(Def, Value)> {
    // JobSpec ignores the answer's extra fields (id, version, ...).
    let spec: JobSpec = serde_json::from_value(body.clone())?;
    let created_at: DateTime<Utc> = body["created_at"].as_str().context("created_at")?.parse()?;
    let schedule = spec.compile(created_at)?;
    let Target::Http(target) = &spec.target else { anyhow::bail!("not an http target") };
    let tag = path_tag(&target.url).map(|(_, t)| t).context("no v{tag} at the end of the target URL")?;
    let label = match &spec.schedule.kind {
        ScheduleKind::Cron { .. } => format!("cron {}", spec.schedule.kind.cron_exprs().join(" | ")),
        ScheduleKind::Interval { every_ms } => {
            format!("every {every_ms} ms from {}", clock(spec.schedule.start_at.unwrap_or(created_at)))
        }
        ScheduleKind::Once { at } => format!("once at {}", clock(*at)),
    };
    let label = match spec.schedule.max_runs {
        Some(m) => format!("{label}, max_runs {m}"),
        None => label,
    };
    let paused = body["paused"].as_bool().context("paused")?;
    Ok((Def { tag, schedule, label, paused, deleted: false }, body["schedule"].clone()))
}

/// `(job index, tag)` of a `.../churn/{index}[/fail]/v{tag}` URL or path.
fn path_tag(path: &str) -> Option<(usize, u32)> {
    let (_, rest) = path.rsplit_once("/churn/")?;
    let (index, rest) = rest.split_once('/')?;
    let tag = rest.rsplit('/').next()?.strip_prefix('v')?;
    Some((index.parse().ok()?, tag.parse().ok()?))
}

/// `HH:MM:SS.mmm`, enough to read a run's listing.
fn clock(t: DateTime<Utc>) -> String {
    t.format("%H:%M:%S%.3f").to_string()
}

/// `t − base` as signed seconds with milliseconds.
fn rel(t: DateTime<Utc>, base: DateTime<Utc>) -> String {
    format!("{:+.3} s", (t - base).num_milliseconds() as f64 / 1000.0)
}

/// `{job}@{instant}[#manual]` → (job, instant, manual).
fn parse_execution_id(id: &str) -> Option<(Uuid, DateTime<Utc>, bool)> {
    let (job, rest) = id.split_once('@')?;
    let (at, manual) = match rest.strip_suffix("#manual") {
        Some(at) => (at, true),
        None => (rest, false),
    };
    Some((job.parse().ok()?, DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc), manual))
}

// ------------------------------------------------------------ job bodies

/// A random schedule: cron every 1 or 2 s, an interval of 1–3 s from a whole
/// second just ahead (so its slots are known), or, when `once_in` leaves
/// room, one instant inside it.
fn random_schedule(rng: &mut Rng, now: DateTime<Utc>, once_in: Option<(DateTime<Utc>, DateTime<Utc>)>) -> Value {
    let kind = rng.below(8);
    schedule_for(kind, rng, now, once_in)
}

/// The schedule of `kind` (0–2 cron, 3–5 interval, 6–7 once when `once_in` leaves room, else cron).
fn schedule_for(
    kind: u64,
    rng: &mut Rng,
    now: DateTime<Utc>,
    once_in: Option<(DateTime<Utc>, DateTime<Utc>)>,
) -> Value {
    let once_in = once_in.filter(|(from, to)| *to - *from >= TimeDelta::seconds(1));
    match (kind, once_in) {
        (6..=7, Some((from, to))) => {
            let at = from + TimeDelta::milliseconds(rng.between(0, (to - from).num_milliseconds()));
            json!({ "kind": "once", "at": format_instant(at) })
        }
        (0..=2, _) | (6..=7, None) => {
            let expr = if rng.one_in(2) { "* * * * * *" } else { "*/2 * * * * *" };
            json!({ "kind": "cron", "expr": expr, "timezone": "UTC" })
        }
        _ => {
            let second = now.duration_trunc(TimeDelta::seconds(1)).unwrap_or(now);
            let start = second + TimeDelta::seconds(rng.between(1, 3));
            json!({ "kind": "interval", "every_ms": rng.between(1000, 3000), "start_at": format_instant(start) })
        }
    }
}

/// The schedule a new definition gets: the same one, or half the time a
/// random one (a one-time slot within the op phase), keeping `max_runs`.
fn next_schedule(rng: &mut Rng, now: DateTime<Utc>, end: DateTime<Utc>, same: Value, max_runs: Option<u64>) -> Value {
    if rng.one_in(2) {
        return same;
    }
    let mut s = random_schedule(rng, now, Some((now + TimeDelta::seconds(3), end)));
    if let Some(m) = max_runs {
        s["max_runs"] = json!(m);
    }
    s
}

fn job_body(hook: &str, index: usize, fail: bool, tag: u32, schedule: Value, paused: Option<bool>) -> Value {
    let url = if fail { format!("{hook}/churn/{index}/fail/v{tag}") } else { format!("{hook}/churn/{index}/v{tag}") };
    let mut body = json!({
        "name": format!("churn-{index}"),
        // Its key: an apply finds the job by it.
        "key": format!("churn-{index}"),
        "schedule": schedule,
        "target": { "kind": "http", "url": url, "timeout_ms": 5000 },
        // fire_all: slots a killed owner left behind fire late rather than
        // being coalesced, so a kill alone never reads as a lost slot.
        "misfire": "fire_all",
    });
    if fail {
        body["retry"] = json!({ "max_retries": 0 });
    }
    if let Some(p) = paused {
        body["paused"] = json!(p);
    }
    body
}

// ------------------------------------------------------------ the API

struct Api {
    http: reqwest::Client,
    base: String,
}

impl Api {
    fn new(base: &str) -> anyhow::Result<Self> {
        Ok(Self { http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?, base: base.to_owned() })
    }

    /// One request, timed; a transport error is status 0 and its text.
    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> (Answer, Option<String>) {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            request = request.json(b);
        }
        let sent = Utc::now();
        let result = async {
            let r = request.send().await?;
            let status = r.status().as_u16();
            Ok::<_, reqwest::Error>((status, r.text().await?))
        }
        .await;
        let received = Utc::now();
        match result {
            Ok((status, text)) => {
                (Answer { sent, received, status, body: serde_json::from_str(&text).unwrap_or(Value::Null) }, None)
            }
            Err(e) => (Answer { sent, received, status: 0, body: Value::Null }, Some(e.to_string())),
        }
    }

    async fn get(&self, path: &str, query: &[(&str, String)]) -> anyhow::Result<Value> {
        let mut url = reqwest::Url::parse(&format!("{}{path}", self.base))?;
        url.query_pairs_mut().extend_pairs(query);
        let r = self.http.get(url).send().await?;
        anyhow::ensure!(r.status() == 200, "GET {path} answered {}", r.status());
        Ok(r.json().await?)
    }

    /// Whether any row scheduled at or before `end` is still pending, running or retrying.
    async fn unfinished(&self, end: DateTime<Utc>) -> anyhow::Result<bool> {
        for status in ["pending", "running", "retrying"] {
            let to = format_instant(end + TimeDelta::milliseconds(1));
            let page =
                self.get("/v1/executions", &[("status", status.into()), ("to", to), ("limit", "1".into())]).await?;
            if page["items"].as_array().is_some_and(|i| !i.is_empty()) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Every ledger row scheduled at or before `end`, by execution id.
    async fn ledger(&self, end: DateTime<Utc>) -> anyhow::Result<HashMap<String, LedgerRow>> {
        let mut rows = HashMap::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut query = vec![("to", format_instant(end + TimeDelta::milliseconds(1))), ("limit", "500".into())];
            if let Some(c) = &cursor {
                query.push(("cursor", c.clone()));
            }
            let page = self.get("/v1/executions", &query).await?;
            for item in page["items"].as_array().into_iter().flatten() {
                let row = LedgerRow {
                    status: item["status"].as_str().unwrap_or_default().to_owned(),
                    reason: item["reason"].as_str().map(str::to_owned),
                    attempts: item["attempts"].as_i64().unwrap_or_default(),
                };
                rows.insert(item["execution_id"].as_str().unwrap_or_default().to_owned(), row);
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => return Ok(rows),
            }
        }
    }
}

#[derive(Clone, Debug, Serialize)]
struct LedgerRow {
    status: String,
    reason: Option<String>,
    attempts: i64,
}

impl LedgerRow {
    fn finished(&self) -> bool {
        !matches!(self.status.as_str(), "pending" | "running" | "retrying")
    }

    fn describe(&self) -> String {
        match &self.reason {
            Some(r) => format!("{} ({r}), {} attempts", self.status, self.attempts),
            None => format!("{}, {} attempts", self.status, self.attempts),
        }
    }
}

// ------------------------------------------------------------ the run

struct Ctx {
    api: Api,
    hook: String,
    world: Mutex<World>,
    /// Signalled whenever an operator frees a job.
    released: tokio::sync::Notify,
    end: DateTime<Utc>,
}

async fn operator(ctx: Arc<Ctx>, mut rng: Rng) {
    loop {
        // Armed before looking, so a release between the look and the wait is not lost.
        let released = ctx.released.notified();
        tokio::pin!(released);
        released.as_mut().enable();
        let plan = ctx.world.lock().expect("world").pick(&mut rng, Utc::now());
        let Some(plan) = plan else {
            let left = (ctx.end - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return;
            }
            let _ = tokio::time::timeout(left, released).await;
            continue;
        };
        if plan.at >= ctx.end {
            ctx.world.lock().expect("world").jobs[plan.job].busy = false;
            ctx.released.notify_waiters();
            return;
        }
        // The deliberate timing of the op against its job's slot.
        sleep_until(plan.at).await;
        operate(&ctx, &plan, &mut rng).await;
        ctx.released.notify_waiters();
    }
}

async fn operate(ctx: &Ctx, plan: &Plan, rng: &mut Rng) {
    let (id, index, fail, max_runs, schedule_json, tag, def) = {
        let mut w = ctx.world.lock().expect("world");
        let job = &mut w.jobs[plan.job];
        let tag = job.next_tag;
        if matches!(plan.kind, OpKind::Put | OpKind::Apply) {
            job.next_tag += 1;
        }
        let def = job.defs.last().expect("a job has a definition").clone();
        (job.id, job.index, job.fail, job.max_runs, job.schedule_json.clone(), tag, def)
    };
    let now = Utc::now();
    let (answer, error) = match plan.kind {
        OpKind::Put => {
            let schedule = next_schedule(rng, now, ctx.end, schedule_json, max_runs);
            // Mostly keep the paused state; a PUT without `paused` also resumes.
            let paused = (rng.below(10) < 7).then_some(def.paused);
            let body = job_body(&ctx.hook, index, fail, tag, schedule, paused);
            ctx.api.call(Method::PUT, &format!("/v1/jobs/{id}"), Some(&body)).await
        }
        OpKind::Apply => {
            let schedule = next_schedule(rng, now, ctx.end, schedule_json, max_runs);
            let body = job_body(&ctx.hook, index, fail, tag, schedule, None);
            let (answer, error) = ctx.api.call(Method::POST, "/v1/apply", Some(&json!({ "jobs": [body] }))).await;
            let result = answer.body["items"][0]["result"].as_str().unwrap_or_default().to_owned();
            if !(200..300).contains(&answer.status) || error.is_some() {
                (answer, error)
            } else if result != "changed" {
                // A new tag always changes the definition: anything else is
                // the apply misreading the job.
                let error = Some(format!("apply answered {result:?} for a new definition"));
                (Answer { status: 0, ..answer }, error)
            } else {
                // The applied job as it now is (the op holds the job: nothing
                // else changes it meanwhile), timed as the apply.
                match ctx.api.get(&format!("/v1/jobs/churn-{index}"), &[]).await {
                    Ok(job) => (Answer { body: job, ..answer }, None),
                    Err(e) => (Answer { status: 0, ..answer }, Some(format!("reading the applied job: {e:#}"))),
                }
            }
        }
        OpKind::Pause => ctx.api.call(Method::POST, &format!("/v1/jobs/{id}/pause"), None).await,
        OpKind::Resume => ctx.api.call(Method::POST, &format!("/v1/jobs/{id}/resume"), None).await,
        OpKind::Delete => ctx.api.call(Method::DELETE, &format!("/v1/jobs/{id}"), None).await,
        OpKind::Trigger => ctx.api.call(Method::POST, &format!("/v1/jobs/{id}/trigger"), None).await,
        OpKind::Replay => {
            let failed = ctx
                .api
                .get(
                    "/v1/executions",
                    &[("status", "failed".into()), ("job_id", id.to_string()), ("limit", "50".into())],
                )
                .await
                .ok()
                .and_then(|v| v["items"].as_array().cloned())
                .unwrap_or_default();
            let at = if failed.is_empty() {
                // A past slot: not failed, so the answer is a refusal (404 or 409).
                let before = now - TimeDelta::milliseconds(rng.between(0, 5_000));
                def.schedule.prev_before(before).unwrap_or(truncate_ms(before))
            } else {
                let pick = &failed[rng.below(failed.len() as u64) as usize];
                pick["scheduled_at"].as_str().and_then(|s| s.parse().ok()).unwrap_or(truncate_ms(now))
            };
            let path = format!("/v1/executions/{id}/{}/replay", format_instant(at));
            ctx.api.call(Method::POST, &path, None).await
        }
    };
    ctx.world.lock().expect("world").settle_op(plan, &answer, error);
}

/// Everything the judge needs, read before the stack goes away.
struct RunRecord {
    world: World,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    nodes: Vec<(DateTime<Utc>, String)>,
    deliveries: Vec<(Delivery, Box<str>)>,
    ledger: HashMap<String, LedgerRow>,
    settle_secs: f64,
    settled: bool,
    /// The API's account of the listed problems' slots, by execution id.
    accounts: HashMap<String, Vec<String>>,
}

async fn drive(args: &ChurnArgs, seed: u64, receiver: &Receiver, stack: &mut Stack) -> anyhow::Result<RunRecord> {
    let mut rng = Rng::new(seed);
    let api = Api::new(&stack.api)?;
    let hook = receiver.hook_url();
    // The op phase starts on a whole second after every job is made.
    let lead = TimeDelta::seconds(3) + TimeDelta::milliseconds(30 * args.jobs as i64);
    let now = Utc::now();
    let start = (now + lead).duration_trunc(TimeDelta::seconds(1))? + TimeDelta::seconds(1);
    let end = start + TimeDelta::seconds(args.seconds);

    let mut world = World::default();
    for index in 0..args.jobs {
        // A fixed mix, so even a CI-size run has every kind, a failing job
        // and a max_runs job: 2 cron, 2 interval, 1 once in every 5.
        let kind = [0, 3, 1, 4, 6][index % 5];
        let fail = index % 10 == 1;
        let now = Utc::now();
        let mut schedule = schedule_for(kind, &mut rng, now, Some((start + TimeDelta::seconds(1), end)));
        let max_runs = (schedule["kind"] != "once" && index % 8 == 5).then(|| rng.between(3, 6) as u64);
        if let Some(m) = max_runs {
            schedule["max_runs"] = json!(m);
        }
        let body = job_body(&hook, index, fail, 1, schedule, None);
        let (a, error) = api.call(Method::POST, "/v1/jobs", Some(&body)).await;
        anyhow::ensure!(a.status == 201, "creating job {index} answered {}: {error:?} {}", a.status, a.body);
        let (def, schedule_json) = def_from_job(&a.body)?;
        world.jobs.push(JobModel {
            index,
            id: a.body["id"].as_str().context("id")?.parse()?,
            fail,
            max_runs,
            schedule_json,
            defs: vec![def],
            changes: Vec::new(),
            next_tag: 2,
            busy: false,
            deleted: false,
            unknown_from: None,
        });
    }
    anyhow::ensure!(Utc::now() < start, "creating {} jobs ran past the start of the op phase", args.jobs);
    eprintln!("churn: {} jobs created; ops from {} to {}", args.jobs, clock(start), clock(end));

    let ctx = Arc::new(Ctx { api, hook, world: Mutex::new(world), released: Default::default(), end });
    sleep_until(start).await;
    let operators: Vec<_> =
        (0..args.operators.max(1)).map(|_| tokio::spawn(operator(ctx.clone(), rng.fork()))).collect();

    let mut nodes = Vec::new();
    if args.kill_nodes {
        let every = TimeDelta::seconds(args.kill_every_secs.max(1));
        let mut next = start + every;
        // None in the last second: the change would not be seen by the phase.
        while next < end - TimeDelta::seconds(1) {
            sleep_until(next).await;
            let live = stack.schedulers();
            let at = Utc::now();
            if live.len() <= 2 || (live.len() < 4 && rng.one_in(2)) {
                let name = stack.add_scheduler()?;
                nodes.push((at, format!("add {name}")));
            } else {
                let victim = live[rng.below(live.len() as u64) as usize].clone();
                stack.kill_scheduler(&victim).await?;
                nodes.push((at, format!("kill -9 {victim}")));
            }
            eprintln!("churn: {} at {}", nodes.last().map(|n| n.1.as_str()).unwrap_or_default(), clock(at));
            next += every;
        }
    }
    for o in operators {
        o.await?;
    }
    let Ok(ctx) = Arc::try_unwrap(ctx) else { anyhow::bail!("an operator outlived the op phase") };
    let mut world = ctx.world.into_inner().expect("world");
    world.kills = nodes.iter().filter(|(_, e)| e.starts_with("kill")).map(|(at, _)| *at).collect();
    eprintln!("churn: op phase over ({} ops); settling", world.ops.len());

    // Settled: nothing unfinished at or before the end, and every execution
    // the model requires has arrived as often as required.
    let required: Vec<(String, u32)> =
        expectations(&world, start, end).into_iter().filter(|(_, e)| e.min > 0).map(|(id, e)| (id, e.min)).collect();
    let bound = Utc::now() + TimeDelta::seconds(args.settle_seconds);
    let settle_from = std::time::Instant::now();
    let settled = loop {
        let mut counts: HashMap<Box<str>, u32> = HashMap::new();
        for d in receiver.snapshot() {
            *counts.entry(d.execution_id).or_default() += 1;
        }
        let missing = required.iter().filter(|(id, n)| counts.get(id.as_str()).copied().unwrap_or(0) < *n).count();
        if missing == 0 && !ctx.api.unfinished(end).await? {
            break true;
        }
        if Utc::now() >= bound {
            break false;
        }
        // The ledger and the receiver have no change stream to await.
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let settle_secs = settle_from.elapsed().as_secs_f64();
    let ledger = ctx.api.ledger(end).await?;
    Ok(RunRecord {
        world,
        start,
        end,
        nodes,
        deliveries: receiver.snapshot_with_paths(),
        ledger,
        settle_secs,
        settled,
        accounts: HashMap::new(),
    })
}

// ------------------------------------------------------------ the judge

/// How long before a delete a slot may still be undelivered (late, or
/// re-taken after an earlier change), and so cancelled by it.
const DELETE_REACH: TimeDelta = TimeDelta::seconds(5);

/// After a kill -9 the dead node counts as live until its heartbeat expires
/// (30 s TTL, plus a membership refresh): a slot that only it would have
/// re-taken waits for the new owners, or for the re-take sweep (5 s grace,
/// 10 s period). A delete in that time may cancel it.
const DELETE_REACH_AFTER_KILL: TimeDelta = TimeDelta::seconds(50);
const KILL_SHADOW: TimeDelta = TimeDelta::seconds(35);

/// What one execution id may receive.
#[derive(Clone, Debug)]
struct Expect {
    job: usize,
    slot: DateTime<Utc>,
    manual: bool,
    /// Deliveries allowed, inclusive.
    min: u32,
    max: u32,
    /// Accepted replays of the slot (included in `min` and `max`).
    replays: u32,
    /// Some definition possibly in force fires the slot: it is counted as
    /// checked, and its first delivery's tag is checked.
    scheduled: bool,
    /// The oldest definition possibly in force at the slot.
    lo: usize,
    /// Every definition possibly in force is paused (not deleted) and would
    /// fire the slot: a ledger row must be `skipped` / `paused`.
    paused: bool,
}

/// The expectation of slot `t` of `job`, plus `replays` (min, max) accepted
/// replays of it. Slots before the op phase are only held to "at most once".
fn expect_slot(
    job: &JobModel,
    t: DateTime<Utc>,
    start: DateTime<Utc>,
    kills: &[DateTime<Utc>],
    replays: (u32, u32),
) -> Expect {
    let (lo, hi) = job.possible(t);
    let defs = &job.defs[lo..=hi];
    let (mut min, max) = if t < start {
        (0, 1)
    } else {
        (defs.iter().all(|d| d.fires(t)) as u32, defs.iter().any(|d| d.fires(t)) as u32)
    };
    // Which slots a max_runs job runs depends on ledger counts the model
    // does not keep: only "at most once" per slot and the total are judged.
    if job.max_runs.is_some() {
        min = 0;
    }
    // A delete stops whatever the job has not delivered yet: a slot due
    // shortly before it (a late or re-taken delivery) may be cancelled by it.
    let reach =
        if kills.iter().any(|k| *k <= t && t - *k < KILL_SHADOW) { DELETE_REACH_AFTER_KILL } else { DELETE_REACH };
    if job.delete_sent().is_some_and(|d| t > d - reach) {
        min = 0;
    }
    let paused = t >= start && defs.iter().all(|d| d.paused && !d.deleted && d.schedule.fires_at(t));
    Expect {
        job: job.index,
        slot: t,
        manual: false,
        min: min + replays.0,
        max: max + replays.1,
        replays: replays.1,
        scheduled: t >= start && max == 1,
        lo,
        paused,
    }
}

/// Every execution id the model says something about, independent of what arrived.
fn expectations(world: &World, start: DateTime<Utc>, end: DateTime<Utc>) -> BTreeMap<String, Expect> {
    let mut out = BTreeMap::new();
    // An accepted replay adds one delivery, unless the job was deleted
    // after it was sent (a delete stops what was not delivered yet).
    let mut replays: HashMap<&str, (u32, u32)> = HashMap::new();
    for m in &world.manual {
        let job = &world.jobs[m.job];
        let shadowed = job.delete_sent().is_some_and(|d| d >= m.sent);
        if m.replay {
            let r = replays.entry(m.execution_id.as_str()).or_default();
            r.0 += u32::from(!shadowed);
            r.1 += 1;
        } else if let Some((_, at, _)) = parse_execution_id(&m.execution_id) {
            let e = Expect {
                job: m.job,
                slot: at,
                manual: true,
                min: u32::from(!shadowed),
                max: 1,
                replays: 0,
                scheduled: false,
                lo: 0,
                paused: false,
            };
            out.insert(m.execution_id.clone(), e);
        }
    }
    // A failed manual fire may be replayed too: each accepted replay adds one.
    for (id, e) in out.iter_mut() {
        if let Some(&(min, max)) = replays.get(id.as_str()) {
            e.min += min;
            e.max += max;
            e.replays += max;
        }
    }
    for job in &world.jobs {
        let mut slots = BTreeSet::new();
        let mut seen: Vec<&CompiledSchedule> = Vec::new();
        for def in &job.defs {
            if seen.contains(&&def.schedule) {
                continue;
            }
            seen.push(&def.schedule);
            let mut cursor = start - TimeDelta::nanoseconds(1);
            while let Some(t) = def.schedule.next_after(cursor).filter(|t| *t <= end) {
                slots.insert(t);
                cursor = t;
            }
        }
        for m in world.manual.iter().filter(|m| m.replay && m.job == job.index) {
            if let Some((_, t, false)) = parse_execution_id(&m.execution_id) {
                slots.insert(t);
            }
        }
        for t in slots.into_iter().filter(|t| job.judged(*t)) {
            let id = execution_id(job.id, t);
            let e = expect_slot(job, t, start, &world.kills, replays.get(id.as_str()).copied().unwrap_or_default());
            if e.max > 0 || e.paused {
                out.insert(id, e);
            }
        }
    }
    out
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum ProblemKind {
    /// Fewer deliveries than required.
    Lost,
    /// More deliveries than allowed (or more runs than max_runs).
    Duplicated,
    /// The first delivery's tag is no definition in force between the slot and it.
    WrongDefinition,
    /// Delivered although no definition may fire it, or an id nothing names.
    Unexpected,
    /// A ledger row of the op phase still unfinished after settling.
    Stranded,
    /// A paused slot's ledger row is not `skipped` / `paused`.
    Ledger,
}

impl ProblemKind {
    fn name(self) -> &'static str {
        match self {
            ProblemKind::Lost => "LOST",
            ProblemKind::Duplicated => "DUPLICATED",
            ProblemKind::WrongDefinition => "WRONG DEFINITION",
            ProblemKind::Unexpected => "UNEXPECTED",
            ProblemKind::Stranded => "STRANDED",
            ProblemKind::Ledger => "LEDGER",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
struct Problem {
    kind: ProblemKind,
    job: Option<usize>,
    execution_id: String,
    slot: Option<DateTime<Utc>>,
    /// Allowed deliveries (min, max), where the model has a say.
    expected: Option<(u32, u32)>,
    got: usize,
    note: String,
}

#[derive(Debug, Default, Serialize)]
struct Verdict {
    /// Slots some definition in force fires (max_runs slots included).
    slots_checked: usize,
    /// Of those, delivered at least once.
    delivered: usize,
    /// Triggers and replayed executions checked.
    manual_checked: usize,
    /// Slots not judged: their job had an op with an unknown outcome before.
    unjudged_jobs: usize,
    lost: usize,
    duplicated: usize,
    wrong_definition: usize,
    unexpected: usize,
    stranded: usize,
    ledger: usize,
    problems: Vec<Problem>,
}

impl Verdict {
    fn push(&mut self, p: Problem) {
        *match p.kind {
            ProblemKind::Lost => &mut self.lost,
            ProblemKind::Duplicated => &mut self.duplicated,
            ProblemKind::WrongDefinition => &mut self.wrong_definition,
            ProblemKind::Unexpected => &mut self.unexpected,
            ProblemKind::Stranded => &mut self.stranded,
            ProblemKind::Ledger => &mut self.ledger,
        } += 1;
        self.problems.push(p);
    }

    fn failures(&self) -> usize {
        self.lost + self.duplicated + self.wrong_definition + self.unexpected + self.stranded + self.ledger
    }
}

/// Deliveries of one execution id, in arrival order.
type ById<'a> = HashMap<&'a str, Vec<&'a (Delivery, Box<str>)>>;

fn by_id(deliveries: &[(Delivery, Box<str>)]) -> ById<'_> {
    let mut out: ById = HashMap::new();
    for d in deliveries {
        out.entry(&*d.0.execution_id).or_default().push(d);
    }
    for v in out.values_mut() {
        v.sort_by_key(|d| d.0.received_at);
    }
    out
}

fn judge(
    world: &World,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    deliveries: &[(Delivery, Box<str>)],
    ledger: &HashMap<String, LedgerRow>,
) -> Verdict {
    let mut v =
        Verdict { unjudged_jobs: world.jobs.iter().filter(|j| j.unknown_from.is_some()).count(), ..Default::default() };
    let mut exp = expectations(world, start, end);
    let got = by_id(deliveries);
    let index_of: HashMap<Uuid, usize> = world.jobs.iter().map(|j| (j.id, j.index)).collect();
    // Ids that arrived but that no definition names: judged like any slot
    // (a definition might still fire them), else unexpected.
    for (id, ds) in &got {
        if exp.contains_key(*id) {
            continue;
        }
        let parsed = parse_execution_id(id);
        let job = parsed.and_then(|(job, _, _)| index_of.get(&job)).map(|&i| &world.jobs[i]);
        match (parsed, job) {
            (Some((_, t, false)), Some(job)) => {
                if t <= end && job.judged(t) {
                    exp.insert(id.to_string(), expect_slot(job, t, start, &world.kills, (0, 0)));
                }
            }
            (Some((_, _, true)), Some(job)) if !job.judged(ds[0].0.received_at) => {}
            _ => v.push(Problem {
                kind: ProblemKind::Unexpected,
                job: job.map(|j| j.index),
                execution_id: id.to_string(),
                slot: parsed.map(|p| p.1),
                expected: None,
                got: ds.len(),
                note: "no slot, trigger or replay of the model names it".into(),
            }),
        }
    }
    let mut runs: HashMap<usize, usize> = HashMap::new();
    for (id, e) in &exp {
        let job = &world.jobs[e.job];
        let ds = got.get(id.as_str()).map(Vec::as_slice).unwrap_or_default();
        let n = ds.len() as u32;
        if e.scheduled {
            v.slots_checked += 1;
            v.delivered += usize::from(n > 0);
        }
        if e.manual || e.replays > 0 {
            v.manual_checked += 1;
        }
        // Every slot run counts towards max_runs, those before the phase too.
        if !e.manual && n > 0 {
            *runs.entry(e.job).or_default() += 1;
        }
        let problem = |kind, note: String| Problem {
            kind,
            job: Some(e.job),
            execution_id: id.clone(),
            slot: Some(e.slot),
            expected: Some((e.min, e.max)),
            got: ds.len(),
            note,
        };
        if n < e.min {
            v.push(problem(ProblemKind::Lost, String::new()));
        } else if n > e.max {
            let kind = if e.max == 0 { ProblemKind::Unexpected } else { ProblemKind::Duplicated };
            v.push(problem(kind, String::new()));
        }
        if e.scheduled && n > 0 {
            let first = &ds[0];
            let (_, hi) = job.possible(first.0.received_at);
            let allowed: Vec<u32> = job.defs[e.lo..=hi.max(e.lo)].iter().map(|d| d.tag).collect();
            let ok = path_tag(&first.1).is_some_and(|(index, tag)| index == job.index && allowed.contains(&tag));
            if !ok {
                let note = format!(
                    "first delivery at {} to {}; allowed tags {allowed:?}",
                    rel(first.0.received_at, e.slot),
                    first.1
                );
                v.push(problem(ProblemKind::WrongDefinition, note));
            }
        }
        if e.paused
            && let Some(row) = ledger.get(id)
            && !(row.status == "skipped" && row.reason.as_deref() == Some("paused"))
        {
            v.push(problem(ProblemKind::Ledger, format!("paused slot's row is {}", row.describe())));
        }
    }
    for job in &world.jobs {
        if let Some(max) = job.max_runs
            && runs.get(&job.index).copied().unwrap_or(0) as u64 > max
        {
            v.push(Problem {
                kind: ProblemKind::Duplicated,
                job: Some(job.index),
                execution_id: job.id.to_string(),
                slot: None,
                expected: None,
                got: runs[&job.index],
                note: format!("{} slots run, max_runs {max}", runs[&job.index]),
            });
        }
    }
    let mut stranded: Vec<(&String, &LedgerRow)> = ledger.iter().filter(|(_, r)| !r.finished()).collect();
    stranded.sort_by(|a, b| a.0.cmp(b.0));
    for (id, row) in stranded {
        let parsed = parse_execution_id(id);
        let job = parsed.and_then(|(job, _, _)| index_of.get(&job).copied());
        if job.is_some_and(|j| parsed.is_some_and(|p| !world.jobs[j].judged(p.1))) {
            continue;
        }
        v.push(Problem {
            kind: ProblemKind::Stranded,
            job,
            execution_id: id.clone(),
            slot: parsed.map(|p| p.1),
            expected: None,
            got: got.get(id.as_str()).map_or(0, Vec::len),
            note: format!("row is {}", row.describe()),
        });
    }
    v.problems.sort_by_key(|p| (p.slot, p.job));
    v
}

/// A problem with what surrounds it: the job's definitions and ops near
/// the slot, node kills and adds before it, what arrived, the ledger row.
fn explain(p: &Problem, run: &RunRecord, got: &ById) -> String {
    let mut out = format!("{} ", p.kind.name());
    let job = p.job.map(|j| &run.world.jobs[j]);
    if let Some(job) = job {
        out.push_str(&format!("job {} ({})", job.index, job.id));
    }
    match p.slot {
        Some(t) => out.push_str(&format!(" slot {} ({} into the phase)", clock(t), rel(t, run.start))),
        None => out.push_str(&format!(" {}", p.execution_id)),
    }
    if let Some((min, max)) = p.expected {
        let want = if min == max { min.to_string() } else { format!("{min}..{max}") };
        out.push_str(&format!(": expected {want}, got {}", p.got));
    }
    if !p.note.is_empty() {
        out.push_str(&format!("; {}", p.note));
    }
    out.push('\n');
    let Some(t) = p.slot else { return out };
    if let Some(job) = job {
        let (lo, hi) = job.possible(t);
        // Each definition possibly in force, with the op that made it.
        let defs: Vec<String> = (lo..=hi)
            .map(|k| {
                let made = match k.checked_sub(1).map(|c| job.changes[c]) {
                    None => "since creation".to_owned(),
                    Some((sent, _)) => {
                        let op = run.world.ops.iter().find(|o| o.job == job.index && o.sent == sent);
                        format!("since {} sent {}", op.map_or("?", |o| o.kind.name()), rel(sent, t))
                    }
                };
                format!("{} ({made})", job.defs[k].describe())
            })
            .collect();
        out.push_str(&format!("    in force at the slot: {}\n", defs.join("  |  ")));
        out.push_str(&format!("    created as: {}\n", job.defs[0].describe()));
        for op in run.world.ops.iter().filter(|o| o.job == job.index) {
            if op.sent < t - TimeDelta::seconds(6) || op.sent > t + TimeDelta::seconds(4) {
                continue;
            }
            out.push_str(&format!(
                "    op {:<7} sent {} answered {} → {} {}\n",
                op.kind.name(),
                rel(op.sent, t),
                rel(op.received, t),
                op.status,
                op.detail
            ));
        }
    }
    for (at, what) in
        run.nodes.iter().filter(|(at, _)| *at > t - TimeDelta::seconds(35) && *at < t + TimeDelta::seconds(2))
    {
        out.push_str(&format!("    node {what} at {}\n", rel(*at, t)));
    }
    match got.get(p.execution_id.as_str()) {
        Some(ds) => {
            for (d, path) in ds {
                out.push_str(&format!("    arrived {} attempt {} at {path}\n", rel(d.received_at, t), d.attempt));
            }
        }
        None => out.push_str("    arrived: nothing\n"),
    }
    match run.ledger.get(&p.execution_id) {
        Some(row) => out.push_str(&format!("    ledger: {}\n", row.describe())),
        None => out.push_str("    ledger: no row\n"),
    }
    for line in run.accounts.get(&p.execution_id).into_iter().flatten() {
        out.push_str(&format!("    api: {line}\n"));
    }
    out
}

/// What the API's explain endpoint says of each problem's slot (its summary
/// and the row's history, in order), read before the stack goes away.
async fn api_accounts(api: &Api, world: &World, problems: &[Problem]) -> HashMap<String, Vec<String>> {
    let mut out = HashMap::new();
    for p in problems {
        let (Some(job), Some(t)) = (p.job, p.slot) else { continue };
        let path = format!("/v1/jobs/{}/executions/{}", world.jobs[job].id, format_instant(t));
        let Ok(answer) = api.get(&path, &[]).await else { continue };
        let e = &answer["explanation"];
        let mut lines = vec![e["summary"].as_str().unwrap_or_default().to_owned()];
        lines
            .extend(e["details"].as_array().into_iter().flatten().filter_map(|d| d.as_str()).map(|d| format!("  {d}")));
        out.insert(p.execution_id.clone(), lines);
    }
    out
}

pub async fn run(args: ChurnArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !args.kill_nodes || (2..=4).contains(&args.stack.schedulers),
        "--kill-nodes keeps 2 to 4 schedulers live: start with --schedulers 2 to 4"
    );
    anyhow::ensure!(args.seconds > 0 && args.jobs > 0, "need --jobs and --seconds above 0");
    let seed = args.seed.unwrap_or_else(|| Uuid::new_v4().as_u64_pair().0);
    println!("churn: seed {seed} (repeat the choices with --seed {seed})");
    let title = format!("Churn: {} jobs changed near their slots for {} s", args.jobs, args.seconds);
    let mut report = Report::new("churn", format!("churn-{}-{}s", args.jobs, args.seconds), title, &args.out);
    let receiver = Receiver::loopback_failing().await?;
    let mut stack = Stack::start("churn", &args.stack).await?;
    let recorded = async {
        let mut run = drive(&args, seed, &receiver, &mut stack).await?;
        let v = judge(&run.world, run.start, run.end, &run.deliveries, &run.ledger);
        let listed = &v.problems[..args.show_problems.min(v.problems.len())];
        run.accounts = api_accounts(&Api::new(&stack.api)?, &run.world, listed).await;
        anyhow::Ok((run, v))
    }
    .await;
    let down = stack.shutdown().await;
    let (run, v) = recorded?;
    down?;

    let got = by_id(&run.deliveries);
    if !v.problems.is_empty() {
        println!("\n{} problems; the first {}:\n", v.problems.len(), args.show_problems.min(v.problems.len()));
        for p in v.problems.iter().take(args.show_problems) {
            println!("{}", explain(p, &run, &got));
        }
    }

    let w = &run.world;
    let kind_count = |k: &str| w.jobs.iter().filter(|j| j.schedule_kind_at_creation() == k).count();
    report.row("seed", seed);
    report.row(
        "stack",
        format!(
            "{} schedulers, {} workers, {}; {}",
            args.stack.schedulers,
            args.stack.workers,
            args.stack.settings(),
            if args.kill_nodes {
                format!("every {} s kill -9 or add one: {}", args.kill_every_secs, run.nodes.len())
            } else {
                "no kills".into()
            }
        ),
    );
    report.row(
        "jobs: cron / interval / once (max_runs, failing)",
        format!(
            "{} / {} / {} ({}, {})",
            kind_count("cron"),
            kind_count("interval"),
            kind_count("once"),
            w.jobs.iter().filter(|j| j.max_runs.is_some()).count(),
            w.jobs.iter().filter(|j| j.fail).count()
        ),
    );
    let applied = w.ops.iter().filter(|o| (200..300).contains(&o.status)).count();
    report.row(
        "ops sent / applied (2xx)",
        format!(
            "{} / {} in {} s by {} operators ({}/s applied)",
            w.ops.len(),
            applied,
            args.seconds,
            args.operators,
            fmt_f(applied as f64 / args.seconds as f64)
        ),
    );
    let by_kind: Vec<String> = OpKind::ALL
        .iter()
        .map(|k| {
            let ok = w.ops.iter().filter(|o| o.kind == *k && (200..300).contains(&o.status)).count();
            format!("{} {ok}", k.name())
        })
        .collect();
    report.row("applied by kind", by_kind.join(", "));
    report.row(
        "slots checked / delivered",
        format!("{} / {}", fmt_int(v.slots_checked as i64), fmt_int(v.delivered as i64)),
    );
    report.row("triggers and replays checked", v.manual_checked);
    report.row("lost / duplicated", format!("{} / {}", v.lost, v.duplicated));
    report.row("wrong definition / unexpected", format!("{} / {}", v.wrong_definition, v.unexpected));
    report.row("stranded rows / paused rows not skipped", format!("{} / {}", v.stranded, v.ledger));
    if v.unjudged_jobs > 0 {
        report.row("jobs judged only up to an op of unknown outcome", v.unjudged_jobs);
    }
    report.row(
        "settled after the phase",
        format!("{} s{}", fmt_f(run.settle_secs), if run.settled { "" } else { " (bound reached)" }),
    );
    report
        .row("verdict", if v.failures() == 0 { "pass".to_owned() } else { format!("FAIL: {} problems", v.failures()) });
    report.data("seed", seed);
    report.data("window", json!({ "start": run.start, "end": run.end }));
    report.data("verdict", &v);
    report.data("ops", &w.ops);
    report.data("nodes", run.nodes.iter().map(|(at, e)| json!({ "at": at, "event": e })).collect::<Vec<_>>());
    report.finish(&args.out)?;
    anyhow::ensure!(
        v.failures() == 0,
        "churn found {} problems (lost {}, duplicated {}, wrong definition {}, unexpected {}, stranded {}, ledger {}); \
         repeat with --seed {seed}",
        v.failures(),
        v.lost,
        v.duplicated,
        v.wrong_definition,
        v.unexpected,
        v.stranded,
        v.ledger
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::schedule::Recurrence;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    fn at(ms: i64) -> DateTime<Utc> {
        t0() + TimeDelta::milliseconds(ms)
    }

    fn every_second(tag: u32, paused: bool) -> Def {
        Def {
            tag,
            schedule: CompiledSchedule {
                recurrence: Recurrence::Interval { every_ms: 1000, anchor: t0() },
                start_at: None,
                end_at: None,
            },
            label: "every 1000 ms".into(),
            paused,
            deleted: false,
        }
    }

    fn delivery(job: &JobModel, slot_ms: i64, after_ms: i64, tag: u32) -> (Delivery, Box<str>) {
        let d = Delivery {
            execution_id: execution_id(job.id, at(slot_ms)).into(),
            scheduled_at: Some(at(slot_ms)),
            attempt: 1,
            received_at: at(slot_ms + after_ms),
        };
        (d, format!("/hook/churn/0/v{tag}").into())
    }

    /// A job firing every second; paused in [5.3, 5.4] s, resumed in
    /// [8.95, 9.05] s, replaced by v2 (same schedule) in [10.5, 10.6] s.
    fn world() -> World {
        let job = JobModel {
            index: 0,
            id: Uuid::from_u128(7),
            fail: false,
            max_runs: None,
            schedule_json: Value::Null,
            defs: vec![every_second(1, false), every_second(1, true), every_second(1, false), every_second(2, false)],
            changes: vec![(at(5_300), at(5_400)), (at(8_950), at(9_050)), (at(10_500), at(10_600))],
            next_tag: 3,
            busy: false,
            deleted: false,
            unknown_from: None,
        };
        World { jobs: vec![job], ops: Vec::new(), manual: Vec::new(), kills: Vec::new() }
    }

    #[test]
    fn possible_definitions_widen_around_each_change() {
        let w = world();
        let j = &w.jobs[0];
        assert_eq!(j.possible(at(5_000)), (0, 0));
        assert_eq!(j.possible(at(5_250)), (0, 1));
        assert_eq!(j.possible(at(5_450)), (0, 1));
        assert_eq!(j.possible(at(6_000)), (1, 1));
        assert_eq!(j.possible(at(9_000)), (1, 2));
        assert_eq!(j.possible(at(12_000)), (3, 3));
    }

    #[test]
    fn judges_lost_paused_ambiguous_wrong_tag_and_duplicates() {
        let w = world();
        let j = &w.jobs[0];
        let (start, end) = (at(4_000), at(12_000));
        let got = vec![
            delivery(j, 4_000, 20, 1),
            // 5 s missing: lost.
            delivery(j, 7_000, 20, 1), // paused: unexpected
            delivery(j, 9_000, 20, 1), // resumed inside the window: either way
            delivery(j, 10_000, 20, 1),
            delivery(j, 11_000, 20, 1), // v2 was in force: wrong definition
            delivery(j, 12_000, 20, 2),
            delivery(j, 12_000, 900, 2), // duplicate
        ];
        let mut ledger = HashMap::new();
        let row = |s: &str, r: Option<&str>| LedgerRow { status: s.into(), reason: r.map(Into::into), attempts: 0 };
        ledger.insert(execution_id(j.id, at(6_000)), row("skipped", Some("paused")));
        ledger.insert(execution_id(j.id, at(8_000)), row("skipped", Some("superseded")));
        ledger.insert(execution_id(j.id, at(12_000)), row("running", None));
        let v = judge(&w, start, end, &got, &ledger);
        let kinds: Vec<(ProblemKind, i64)> =
            v.problems.iter().map(|p| (p.kind, (p.slot.unwrap() - t0()).num_milliseconds())).collect();
        assert_eq!(
            kinds,
            vec![
                (ProblemKind::Lost, 5_000),
                (ProblemKind::Unexpected, 7_000),
                (ProblemKind::Ledger, 8_000),
                (ProblemKind::WrongDefinition, 11_000),
                (ProblemKind::Duplicated, 12_000),
                (ProblemKind::Stranded, 12_000),
            ],
            "{:#?}",
            v.problems
        );
        // 4, 5, 9 (ambiguous), 10, 11, 12.
        assert_eq!((v.slots_checked, v.delivered), (6, 5));
    }

    #[test]
    fn triggers_and_replays_add_required_deliveries() {
        let mut w = world();
        let id = w.jobs[0].id;
        let manual = execution_id(id, at(4_321)) + "#manual";
        w.manual.push(Manual { job: 0, execution_id: manual.clone(), replay: false, sent: at(4_300) });
        w.manual.push(Manual { job: 0, execution_id: execution_id(id, at(4_000)), replay: true, sent: at(4_500) });
        let got = vec![delivery(&w.jobs[0], 4_000, 20, 1)];
        let v = judge(&w, at(4_000), at(4_000), &got, &HashMap::new());
        let lost: Vec<&str> =
            v.problems.iter().filter(|p| p.kind == ProblemKind::Lost).map(|p| p.execution_id.as_str()).collect();
        assert_eq!(lost, vec![execution_id(id, at(4_000)).as_str(), manual.as_str()]);
    }

    #[test]
    fn paths_and_ids_parse() {
        assert_eq!(path_tag("/hook/churn/12/v3"), Some((12, 3)));
        assert_eq!(path_tag("http://127.0.0.1:9/hook/churn/4/fail/v10"), Some((4, 10)));
        assert_eq!(path_tag("/hook"), None);
        let id = execution_id(Uuid::nil(), at(1_500));
        assert_eq!(parse_execution_id(&id), Some((Uuid::nil(), at(1_500), false)));
        assert_eq!(parse_execution_id(&format!("{id}#manual")), Some((Uuid::nil(), at(1_500), true)));
        let mut a = Rng::new(1);
        let mut b = Rng::new(1);
        assert_eq!(
            (0..5).map(|_| a.between(-3, 3)).collect::<Vec<_>>(),
            (0..5).map(|_| b.between(-3, 3)).collect::<Vec<_>>()
        );
    }
}
