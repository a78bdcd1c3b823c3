//! `chaos`: steady periodic load (the `steady` jobs: half cron, half
//! interval) while faults are injected one after another, each for a bounded
//! time and followed by an observation period, and a fault × figures matrix.
//!
//! Isolation: the run starts its own Redis shards, RabbitMQ node and
//! PostgreSQL cluster ([`services`]) on free loopback ports, so restarting
//! or stopping them never touches the machine's shared services. Each
//! scheduler reaches Redis and Postgres through proxies of its own
//! (`testing::proxy`), so one node can be cut off or slowed alone. The
//! processes run with the binaries' own defaults unless `--tuned true`.
//!
//! Two receivers in this process: A takes most jobs, B a share
//! (`--receiver-b-share`) and is the one `receiver-down` takes down. Both
//! answer `500` to the first attempt of a fixed share of execution ids, so
//! the product's retries run all along.
//!
//! Per fault (a window of scheduled time from the injection to the end of
//! its restore, then the observation): slots due, what became of each
//! ([`verdict`]: delivered, missed by policy, failed by the retry policy,
//! lost, without final status, duplicated, crash redeliveries), lateness
//! during and after the fault, the earliest request (clock skew), time to
//! recover and the ledger's verdict. The ledger is read after a final drain
//! (until no slot of the run is `pending`, `running` or `retrying`, or
//! `--drain-max-secs`). The process exits non-zero when any window has a
//! duplicated or lost slot, one without a final status, or one whose first
//! request reached a receiver before its due instant.

pub mod services;
pub mod verdict;

/// Seconds at the end of an observation that do not judge the recovery when
/// another fault follows: the binaries' lookahead (2 s) plus a second.
const RECOVERY_GUARD_SECS: i64 = 3;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use serde_json::json;

use crate::receiver::Receiver;
use crate::report::{OutArgs, Percentiles, Report, fmt_f, fmt_int};
use crate::stack::{Stack, StackArgs, parse_env_pair};
use crate::steady::{LoadArgs, sleep_until};
use services::Services;
use testing::proxy::{Mode, TcpProxy};
use verdict::{Context, Figures, LedgerRow, Slot};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    KillScheduler,
    KillWorker,
    RedisRestart,
    RedisShardDown,
    SchedulerCutFromRedis,
    SchedulerCutFromPostgres,
    RedisLatency,
    RabbitmqRestart,
    QueuesDeleted,
    PostgresRestart,
    AllSchedulersDown,
    Scale,
    ReceiverDown,
    ClockSkew,
    RedisPrimaryKilled,
    RabbitmqNodeKilled,
    PostgresFailoverSync,
    PostgresFailoverAsync,
    RollingUpgrade,
    RollingRollback,
    SchedulerPartitionedFromRedis,
}

impl Fault {
    pub const ALL: [Fault; 14] = [
        Fault::KillScheduler,
        Fault::KillWorker,
        Fault::RedisRestart,
        Fault::RedisShardDown,
        Fault::SchedulerCutFromRedis,
        Fault::SchedulerCutFromPostgres,
        Fault::RedisLatency,
        Fault::RabbitmqRestart,
        Fault::QueuesDeleted,
        Fault::PostgresRestart,
        Fault::AllSchedulersDown,
        Fault::Scale,
        Fault::ClockSkew,
        Fault::ReceiverDown,
    ];

    /// Faults beyond the fourteen of the matrix on the single services.
    pub const MORE: [Fault; 1] = [Fault::SchedulerPartitionedFromRedis];

    /// The faults of replicated services (`--faults` naming any of them runs
    /// the replicated topology, see [`services::Topology::Replicated`]).
    pub const REPLICATED: [Fault; 4] = [
        Fault::RedisPrimaryKilled,
        Fault::RabbitmqNodeKilled,
        Fault::PostgresFailoverSync,
        Fault::PostgresFailoverAsync,
    ];

    /// A release change process by process under load (`--previous-bin-dir`):
    /// the stack starts on the previous release's binaries and schema.
    pub const UPGRADE: [Fault; 2] = [Fault::RollingUpgrade, Fault::RollingRollback];

    /// The CI-sized subset of `--quick --replicated`: one failover of a
    /// primary that every scheduler and worker writes to.
    pub const QUICK_REPLICATED: [Fault; 2] = [Fault::RedisPrimaryKilled, Fault::PostgresFailoverSync];

    /// The CI-sized subset of `--quick`. The queues go early: their stranded
    /// rows are moved on a minute later, while the next faults run.
    pub const QUICK: [Fault; 5] = [
        Fault::KillScheduler,
        Fault::QueuesDeleted,
        Fault::KillWorker,
        Fault::RedisRestart,
        Fault::SchedulerCutFromPostgres,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::KillScheduler => "kill-scheduler",
            Fault::KillWorker => "kill-worker",
            Fault::RedisRestart => "redis-restart",
            Fault::RedisShardDown => "redis-shard-down",
            Fault::SchedulerCutFromRedis => "scheduler-cut-from-redis",
            Fault::SchedulerCutFromPostgres => "scheduler-cut-from-postgres",
            Fault::RedisLatency => "redis-latency",
            Fault::RabbitmqRestart => "rabbitmq-restart",
            Fault::QueuesDeleted => "queues-deleted",
            Fault::PostgresRestart => "postgres-restart",
            Fault::AllSchedulersDown => "all-schedulers-down",
            Fault::Scale => "scale",
            Fault::ReceiverDown => "receiver-down",
            Fault::ClockSkew => "clock-skew",
            Fault::RedisPrimaryKilled => "redis-primary-killed",
            Fault::RabbitmqNodeKilled => "rabbitmq-node-killed",
            Fault::PostgresFailoverSync => "postgres-failover-sync",
            Fault::PostgresFailoverAsync => "postgres-failover-async",
            Fault::RollingUpgrade => "rolling-upgrade",
            Fault::RollingRollback => "rolling-rollback",
            Fault::SchedulerPartitionedFromRedis => "scheduler-partitioned-from-redis",
        }
    }

    fn parse(s: &str) -> anyhow::Result<Self> {
        Fault::ALL
            .into_iter()
            .chain(Fault::MORE)
            .chain(Fault::REPLICATED)
            .chain(Fault::UPGRADE)
            .find(|f| f.name() == s.trim())
            .with_context(|| {
                format!(
                    "unknown fault {s:?}; known: {}, {}; on replicated services {}; with --previous-bin-dir {}",
                    Fault::ALL.map(Fault::name).join(", "),
                    Fault::MORE.map(Fault::name).join(", "),
                    Fault::REPLICATED.map(Fault::name).join(", "),
                    Fault::UPGRADE.map(Fault::name).join(", ")
                )
            })
    }

    /// Needs the replicated topology (and none of the single one's proxies).
    pub fn replicated(self) -> bool {
        Fault::REPLICATED.contains(&self)
    }

    /// One node affected: the faults the lateness target (p99 ≤ 1 s) is for.
    pub fn single_node(self) -> bool {
        matches!(
            self,
            Fault::KillScheduler
                | Fault::KillWorker
                | Fault::SchedulerCutFromRedis
                | Fault::SchedulerPartitionedFromRedis
                | Fault::SchedulerCutFromPostgres
                | Fault::RedisLatency
        )
    }
}

#[derive(clap::Args)]
pub struct ChaosArgs {
    /// Faults to inject, in this order, comma-separated (default: all 14 in
    /// this order): kill-scheduler, kill-worker, redis-restart,
    /// redis-shard-down, scheduler-cut-from-redis, scheduler-cut-from-postgres,
    /// redis-latency, rabbitmq-restart, queues-deleted, postgres-restart,
    /// all-schedulers-down, scale, clock-skew, receiver-down (last: receiver
    /// B's circuit may stay open minutes after it is back, delaying its
    /// slots into the next windows).
    /// On replicated services (a run of their own): redis-primary-killed,
    /// rabbitmq-node-killed, postgres-failover-sync, postgres-failover-async.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// `postgres-failover-*`: how long the primary is dead before the standby
    /// is promoted (what a failover manager takes to notice and decide).
    #[arg(long, default_value_t = 5)]
    promote_after_secs: u64,
    /// The previous release's binaries (`deploy/build-previous.sh` builds
    /// them): the stack starts on them and on their schema, and
    /// `rolling-upgrade` / `rolling-rollback` replace each process, one at
    /// a time, with the `--bin-dir` build or back.
    #[arg(long)]
    previous_bin_dir: Option<PathBuf>,
    /// CI-sized run: kill-scheduler, queues-deleted, kill-worker,
    /// redis-restart, scheduler-cut-from-postgres at 500 fires/s, 10 s
    /// faults, 15 s observation (each may still be given explicitly).
    #[arg(long)]
    quick: bool,
    /// Run the faults of replicated services (all four; with `--quick`
    /// redis-primary-killed and postgres-failover-sync) on the replicated
    /// topology: Redis shards under Sentinel, a Postgres primary and
    /// standby, a three-node RabbitMQ cluster with quorum queues.
    #[arg(long)]
    replicated: bool,
    /// Fires per second the jobs produce together [default: 2,000; --quick 500].
    #[arg(long)]
    rate: Option<f64>,
    /// Each job fires once per period (jobs = rate × period).
    #[arg(long, default_value_t = 5000)]
    period_ms: u64,
    /// Share of cron jobs (the rest are interval jobs).
    #[arg(long, default_value_t = 0.5)]
    cron_share: f64,
    /// Misfire policy of the jobs: fire_once, skip, fire_all, or mixed.
    #[arg(long, default_value = "fire_once")]
    misfire: String,
    /// Share of execution ids whose first attempt the receivers answer 500.
    #[arg(long, default_value_t = 0.05)]
    fail_first_share: f64,
    /// Share of the jobs aimed at receiver B, the one `receiver-down` takes down.
    #[arg(long, default_value_t = 0.1)]
    receiver_b_share: f64,
    /// Firing before anything is measured [default: 10; --quick 5].
    #[arg(long)]
    warmup_secs: Option<i64>,
    /// Undisturbed window before the first fault: the steady p99 the
    /// recovery is judged against [default: 20; --quick 10].
    #[arg(long)]
    baseline_secs: Option<i64>,
    /// How long each fault lasts, but the two below [default: 20; --quick 10].
    #[arg(long)]
    fault_secs: Option<i64>,
    /// Observation after each fault, before the next [default: 30; --quick 15].
    #[arg(long)]
    observe_secs: Option<i64>,
    /// How long every scheduler is down in `all-schedulers-down`.
    #[arg(long, default_value_t = 300)]
    all_down_secs: i64,
    /// How long receiver B answers 503 in `receiver-down`.
    #[arg(long, default_value_t = 600)]
    receiver_down_secs: i64,
    /// Delay added to each direction of one scheduler's Redis links in `redis-latency`.
    #[arg(long, default_value_t = 500)]
    latency_ms: u64,
    /// Clock error of the skewed nodes in `clock-skew` (one scheduler and one
    /// worker this much fast, another scheduler this much slow).
    #[arg(long, default_value_t = 2000)]
    skew_ms: i64,
    /// libfaketime, for `clock-skew` (Debian package `faketime`).
    #[arg(long, default_value = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")]
    faketime_lib: PathBuf,
    /// Recovered: every later second's p99 ≤ max(factor × baseline p99, floor).
    #[arg(long, default_value_t = 2.0)]
    recovery_factor: f64,
    /// The floor is the product's own "normal" lateness: p99 under 250 ms
    /// is what a herd of 10,000 and the return from overload are held to.
    /// Twice a 20 s baseline's p99 alone (194 ms in one run) was crossed by
    /// single undisturbed seconds minutes later (232 ms), which read as
    /// "not recovered" long after the fault's backlog was gone.
    #[arg(long, default_value_t = 250)]
    recovery_floor_ms: i64,
    /// Longest wait at the end for every slot of the run to reach a final status.
    #[arg(long, default_value_t = 900)]
    drain_max_secs: u64,
    /// Scheduler nodes (2 owners per job need at least 2).
    #[arg(long, default_value_t = 3)]
    schedulers: usize,
    /// Worker processes.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// `true`: the benchmarks' tuned prefetch, in-flight and lookahead
    /// (see `steady --help`); `false`: the binaries' own defaults.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    tuned: bool,
    /// More environment for every scheduler, `NAME=VALUE` (repeatable).
    #[arg(long = "scheduler-env", value_parser = parse_env_pair)]
    scheduler_env: Vec<(String, String)>,
    /// More environment for every worker, `NAME=VALUE` (repeatable).
    #[arg(long = "worker-env", value_parser = parse_env_pair)]
    worker_env: Vec<(String, String)>,
    /// Directory of the release binaries.
    #[arg(long, env = "CRONSHARD_BIN_DIR", default_value = "target/release")]
    bin_dir: PathBuf,
    /// Log filter of the stack's processes.
    #[arg(long, default_value = "warn")]
    stack_log: String,
    /// Write each process's output to `<dir>/<cluster>-<process>.log`.
    #[arg(long)]
    stack_log_dir: Option<PathBuf>,
    /// Where the private services keep their data (a `run-<id>` directory
    /// per run, removed at the end; those of dead runs are cleaned up).
    #[arg(long, default_value = "/var/tmp/cronshard-chaos")]
    work_dir: PathBuf,
    #[command(flatten)]
    out: OutArgs,
}

/// The flags with `--quick` applied.
struct Plan {
    faults: Vec<Fault>,
    topology: services::Topology,
    rate: f64,
    warmup: i64,
    baseline: i64,
    fault: i64,
    observe: i64,
}

impl Plan {
    fn resolve(a: &ChaosArgs) -> anyhow::Result<Self> {
        let q = a.quick;
        let faults = if !a.faults.is_empty() {
            a.faults.iter().map(|f| Fault::parse(f)).collect::<anyhow::Result<Vec<_>>>()?
        } else if a.replicated {
            if q { Fault::QUICK_REPLICATED.to_vec() } else { Fault::REPLICATED.to_vec() }
        } else if q {
            Fault::QUICK.to_vec()
        } else {
            Fault::ALL.into_iter().chain(Fault::MORE).collect()
        };
        let upgrades = faults.iter().any(|f| Fault::UPGRADE.contains(f));
        anyhow::ensure!(
            !upgrades || a.previous_bin_dir.is_some(),
            "rolling-upgrade and rolling-rollback need --previous-bin-dir (deploy/build-previous.sh builds it)"
        );
        let replicated = faults.iter().filter(|f| f.replicated()).count();
        anyhow::ensure!(
            replicated == 0 || replicated == faults.len(),
            "the faults of replicated services ({}) run on a topology of their own: give them in a run without the others",
            Fault::REPLICATED.map(Fault::name).join(", ")
        );
        // Synchronous or not is set per fault on the running pair.
        let topology =
            if replicated > 0 { services::Topology::Replicated { pg_sync: false } } else { services::Topology::Single };
        let plan = Self {
            faults,
            topology,
            rate: a.rate.unwrap_or(if q { 500.0 } else { 2000.0 }),
            warmup: a.warmup_secs.unwrap_or(if q { 5 } else { 10 }),
            baseline: a.baseline_secs.unwrap_or(if q { 10 } else { 20 }),
            fault: a.fault_secs.unwrap_or(if q { 10 } else { 20 }),
            observe: a.observe_secs.unwrap_or(if q { 15 } else { 30 }),
        };
        anyhow::ensure!(
            plan.baseline >= 5 && plan.fault >= 1 && plan.observe >= 5,
            "need a baseline and an observation of at least 5 s"
        );
        anyhow::ensure!(a.schedulers >= 2, "chaos needs at least 2 schedulers (2 owners per job)");
        anyhow::ensure!(a.workers >= 2, "chaos needs at least 2 workers (one is killed)");
        Ok(plan)
    }

    fn duration(&self, a: &ChaosArgs, f: Fault) -> i64 {
        match f {
            Fault::AllSchedulersDown => a.all_down_secs,
            Fault::ReceiverDown => a.receiver_down_secs,
            _ => self.fault,
        }
    }
}

/// One injected fault: its window of scheduled time and what was done.
#[derive(Clone, Debug, Serialize)]
struct Injected {
    fault: Fault,
    start: DateTime<Utc>,
    /// When the restore finished (the fault's window ends here).
    end: DateTime<Utc>,
    /// End of the observation after it.
    observe_end: DateTime<Utc>,
    notes: Vec<String>,
}

fn now_ms() -> DateTime<Utc> {
    domain::execution::truncate_ms(Utc::now())
}

/// A scheduler's own links: one proxy per Redis shard, one to Postgres.
struct NodeLinks {
    redis: Vec<TcpProxy>,
    pg: TcpProxy,
}

/// The running scenario: the stack, the nodes' links, the services, the
/// receivers, and what explains outcomes later.
struct Run<'a> {
    args: &'a ChaosArgs,
    services: &'a mut Services,
    stack: Stack,
    links: BTreeMap<String, NodeLinks>,
    receivers: [Receiver; 2],
    ctx: Context,
}

impl Run<'_> {
    /// Starts scheduler `name` behind proxies of its own, with `extra` environment.
    async fn start_node(&mut self, name: &str, extra: &[(String, String)]) -> anyhow::Result<()> {
        if self.services.replicated().is_ok() {
            // Sentinel URLs and the database URL of both servers: each node
            // finds the primaries itself, no proxies of its own.
            let mut env = vec![
                ("REDIS_URLS".to_owned(), self.services.redis_urls()),
                ("DATABASE_URL".to_owned(), self.stack.database()?.1.to_owned()),
            ];
            env.extend(self.args.scheduler_env.iter().cloned());
            env.extend(extra.iter().cloned());
            self.stack.start_scheduler(name, &env)?;
            self.record_pids();
            return Ok(());
        }
        let mut redis = Vec::new();
        for shard in &self.services.redis {
            redis.push(TcpProxy::start(shard.addr()).await?);
        }
        let pg = TcpProxy::start(self.services.pg()?.addr()).await?;
        let (db_name, _) = self.stack.database()?;
        let mut env = vec![
            (
                "REDIS_URLS".to_owned(),
                redis.iter().map(|p| format!("redis://{}", p.addr)).collect::<Vec<_>>().join(","),
            ),
            ("DATABASE_URL".to_owned(), testing::with_database(&format!("postgres://postgres@{}", pg.addr), db_name)),
        ];
        env.extend(self.args.scheduler_env.iter().cloned());
        env.extend(extra.iter().cloned());
        self.stack.start_scheduler(name, &env)?;
        self.links.insert(name.to_owned(), NodeLinks { redis, pg });
        self.record_pids();
        Ok(())
    }

    async fn add_node(&mut self) -> anyhow::Result<String> {
        let name = self.stack.next_scheduler_name();
        self.start_node(&name, &[]).await?;
        Ok(name)
    }

    async fn kill_node(&mut self, name: &str) -> anyhow::Result<()> {
        self.stack.kill(name).await?;
        self.links.remove(name);
        Ok(())
    }

    async fn stop_node(&mut self, name: &str) -> anyhow::Result<()> {
        self.stack.terminate(name, Duration::from_secs(30)).await?;
        self.links.remove(name);
        Ok(())
    }

    /// Notes the stack's pids in the run's directory, for a later run to
    /// clean up after this one if it is killed.
    fn record_pids(&self) {
        let me = std::process::id();
        let targets = self.stack.targets();
        let pids: Vec<u32> = targets.lock().expect("targets").iter().map(|(_, p)| *p).filter(|p| *p != me).collect();
        self.services.record_stack(pids);
    }

    fn first_scheduler(&self) -> anyhow::Result<String> {
        self.stack.schedulers().into_iter().next().context("no scheduler running")
    }

    fn links(&self, name: &str) -> anyhow::Result<&NodeLinks> {
        self.links.get(name).with_context(|| format!("no links of {name}"))
    }

    /// libfaketime's environment for a clock `ms` off (a fixed offset;
    /// monotonic time stays real, so timers keep their length).
    fn skewed(&self, ms: i64) -> Vec<(String, String)> {
        vec![
            ("LD_PRELOAD".into(), self.args.faketime_lib.display().to_string()),
            ("FAKETIME".into(), format!("{:+}", ms as f64 / 1000.0)),
            ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
        ]
    }

    /// Injects `fault`, holds it for `secs` from its start, restores.
    async fn inject(&mut self, fault: Fault, secs: i64) -> anyhow::Result<Injected> {
        let start = now_ms();
        let until = start + TimeDelta::seconds(secs);
        let mut notes = Vec::new();
        match fault {
            Fault::KillScheduler => {
                let victim = self.first_scheduler()?;
                self.kill_node(&victim).await?;
                notes.push(format!("kill -9 {victim}"));
                sleep_until(until).await;
                let new = self.add_node().await?;
                notes.push(format!("replacement {new} started after {secs} s"));
            }
            Fault::KillWorker => {
                let victim = self.stack.workers().into_iter().next().context("no worker running")?;
                self.stack.kill(&victim).await?;
                self.ctx.worker_kills.push(Utc::now());
                notes.push(format!("kill -9 {victim} (deliveries in flight)"));
                sleep_until(until).await;
                self.stack.start_worker(&victim, &[])?;
                notes.push(format!("{victim} started again (same worker id) after {secs} s"));
            }
            Fault::RedisRestart => {
                let t = tokio::time::Instant::now();
                for shard in &mut self.services.redis {
                    shard.stop().await?;
                }
                for shard in &mut self.services.redis {
                    shard.start().await?;
                }
                notes.push(format!(
                    "both shards killed (-9) and started again empty on the same ports: down {} ms",
                    t.elapsed().as_millis()
                ));
                sleep_until(until).await;
            }
            Fault::RedisShardDown => {
                self.services.redis[1].stop().await?;
                notes.push("shard 2 of 2 killed (-9)".into());
                sleep_until(until).await;
                self.services.redis[1].start().await?;
                notes.push(format!("shard 2 started again (empty) after {secs} s"));
            }
            Fault::SchedulerCutFromRedis => {
                let victim = self.first_scheduler()?;
                self.links(&victim)?.redis.iter().for_each(TcpProxy::cut);
                notes.push(format!("{victim}'s links to both Redis shards cut"));
                sleep_until(until).await;
                self.links(&victim)?.redis.iter().for_each(TcpProxy::restore);
            }
            Fault::SchedulerPartitionedFromRedis => {
                let victim = self.first_scheduler()?;
                self.links(&victim)?.redis.iter().for_each(|p| p.set(Mode::Partition));
                notes.push(format!(
                    "{victim} partitioned from both Redis shards: its connections stay open, nothing crosses (timeouts, not errors)"
                ));
                sleep_until(until).await;
                self.links(&victim)?.redis.iter().for_each(TcpProxy::restore);
            }
            Fault::SchedulerCutFromPostgres => {
                let victim = self.first_scheduler()?;
                self.links(&victim)?.pg.cut();
                notes.push(format!("{victim}'s link to Postgres cut (Redis and RabbitMQ kept)"));
                sleep_until(until).await;
                self.links(&victim)?.pg.restore();
            }
            Fault::RedisLatency => {
                let victim = self.first_scheduler()?;
                let delay = Duration::from_millis(self.args.latency_ms);
                self.links(&victim)?.redis.iter().for_each(|p| p.set(Mode::Delay(delay)));
                notes.push(format!(
                    "{victim}'s Redis links: +{} ms each way (round trip +{} ms)",
                    self.args.latency_ms,
                    2 * self.args.latency_ms
                ));
                sleep_until(until).await;
                self.links(&victim)?.redis.iter().for_each(TcpProxy::restore);
            }
            Fault::RabbitmqRestart => {
                let t = tokio::time::Instant::now();
                self.services.rabbit()?.stop().await?;
                let stopped = t.elapsed();
                self.services.rabbit()?.start().await?;
                notes.push(format!(
                    "rabbitmqctl stop ({} ms), started again on the same port and data: down {} ms",
                    stopped.as_millis(),
                    t.elapsed().as_millis()
                ));
                sleep_until(until).await;
            }
            Fault::QueuesDeleted => {
                let prefix = format!("{}.", self.stack.cluster);
                let queues: Vec<String> =
                    self.services.rabbit()?.queues().await?.into_iter().filter(|q| q.starts_with(&prefix)).collect();
                let connection =
                    broker::amqp::connect(&self.services.rabbit()?.amqp_url(), "chaos queues-deleted").await?;
                let channel = connection.create_channel().await?;
                let mut lost = Vec::new();
                for q in &queues {
                    let n = channel.queue_delete(q.as_str().into(), Default::default()).await?;
                    lost.push(format!("{} ({n} ready)", q.trim_start_matches(&prefix)));
                }
                let _ = connection.close(200, "done".into()).await;
                notes.push(format!(
                    "deleted {} queues with their messages (unacked ones with them): {}",
                    queues.len(),
                    lost.join(", ")
                ));
                sleep_until(until).await;
            }
            Fault::PostgresRestart => {
                let t = tokio::time::Instant::now();
                self.services.pg()?.restart().await?;
                notes.push(format!("pg_ctl restart -m fast: {} ms", t.elapsed().as_millis()));
                sleep_until(until).await;
            }
            Fault::AllSchedulersDown => {
                let names = self.stack.schedulers();
                for n in &names {
                    self.kill_node(n).await?;
                }
                notes.push(format!("kill -9 of all {} schedulers", names.len()));
                sleep_until(until).await;
                for n in &names {
                    self.start_node(n, &[]).await?;
                }
                notes.push(format!("all started again (same node ids) after {secs} s"));
            }
            Fault::Scale => {
                let before = self.stack.schedulers();
                let (a, b) = (self.add_node().await?, self.add_node().await?);
                notes.push(format!("{} → {}: added {a}, {b}", before.len(), before.len() + 2));
                sleep_until(start + TimeDelta::milliseconds(secs * 500)).await;
                let now = self.stack.schedulers();
                let stop: Vec<String> = now.iter().take(now.len().saturating_sub(2)).cloned().collect();
                for n in &stop {
                    self.stop_node(n).await?;
                }
                notes.push(format!("{} → 2 at {} s: stopped (SIGTERM) {}", now.len(), secs / 2, stop.join(", ")));
                sleep_until(until).await;
                let added = self.add_node().await?;
                notes.push(format!("2 → 3 at the end: added {added}"));
            }
            Fault::ReceiverDown => {
                self.receivers[1].set_down(true);
                notes.push(format!("receiver B answers 503 to everything for {secs} s"));
                sleep_until(until).await;
                self.receivers[1].set_down(false);
                self.ctx.receiver_b_down.push((start, now_ms()));
            }
            Fault::RedisPrimaryKilled => {
                let redis = &mut self.services.replicated_mut()?.redis;
                let kill = redis.kill_primary(0).await?;
                let failover = redis.wait_new_primary(&kill, Duration::from_secs(60)).await?;
                notes.push(format!(
                    "shard 1's primary (port {}) killed (-9); the Sentinels named its replica (port {}) after {} ms, all three and its ROLE agreeing after {} ms",
                    failover.old,
                    failover.new,
                    failover.first_reported.as_millis(),
                    failover.agreed.as_millis()
                ));
                sleep_until(until).await;
                let rejoined = self.services.replicated_mut()?.redis.rejoin(&kill).await?;
                notes.push(format!(
                    "the old primary started again (empty) as a replica: in sync after {} ms",
                    rejoined.as_millis()
                ));
            }
            Fault::RabbitmqNodeKilled => {
                let cluster = &self.services.replicated()?.rabbit;
                cluster.kill(0).await?;
                notes.push(
                    "RabbitMQ node 1 of 3 killed (-9): its connections dropped, its quorum queue members lost".into(),
                );
                sleep_until(until).await;
                let back = self.services.replicated()?.rabbit.restart(0).await?;
                notes.push(format!(
                    "node 1 started again on its data: running in the cluster after {} ms",
                    back.as_millis()
                ));
            }
            Fault::PostgresFailoverSync | Fault::PostgresFailoverAsync => {
                let sync = fault == Fault::PostgresFailoverSync;
                let pair = &mut self.services.replicated_mut()?.pg;
                set_synchronous(pair, sync).await?;
                let kill = pair.kill_primary().await?;
                if let Some(b) = kill.before {
                    notes.push(format!(
                        "{} replication; just before the kill the standby lacked {} bytes of WAL ({} not replayed)",
                        if sync { "synchronous (remote_apply)" } else { "asynchronous" },
                        b.unreceived_bytes(),
                        b.replay_lag_bytes()
                    ));
                }
                notes.push(format!("primary (port {}) killed (-9)", kill.port));
                tokio::time::sleep(Duration::from_secs(self.args.promote_after_secs)).await;
                let promoted = self.services.replicated_mut()?.pg.promote_standby(Some(&kill)).await?;
                notes.push(format!(
                    "standby (port {}) promoted {} s after the kill (pg_ctl promote {} ms); WAL never received: {}",
                    promoted.port,
                    self.args.promote_after_secs,
                    promoted.promote.as_millis(),
                    promoted.lost_bytes.map_or("unknown".into(), |b| format!("{b} bytes"))
                ));
                sleep_until(until).await;
                let rejoined = self.services.replicated_mut()?.pg.rejoin_old_primary().await?;
                notes.push(format!(
                    "the old primary rejoined as the new one's standby (fresh base backup) in {} ms",
                    rejoined.as_millis()
                ));
            }
            Fault::RollingUpgrade | Fault::RollingRollback => {
                let upgrade = fault == Fault::RollingUpgrade;
                let to = if upgrade {
                    self.args.bin_dir.clone()
                } else {
                    self.args.previous_bin_dir.clone().context("--previous-bin-dir")?
                };
                if upgrade {
                    // The new release's migrations first, the old processes running.
                    let t = tokio::time::Instant::now();
                    crate::benchdb::migrate_with(&to.join("cronshard-api"), self.stack.database()?.1).await?;
                    notes.push(format!("the new release's migrations applied in {} ms", t.elapsed().as_millis()));
                }
                self.stack.set_bin_dir(to.clone());
                let which = if upgrade { "the new release" } else { "the previous release" };
                let schedulers = self.stack.schedulers();
                let n = schedulers.len();
                let t = tokio::time::Instant::now();
                for name in &schedulers {
                    // As a StatefulSet rolls: one pod at a time, the next
                    // once the new one is back in the live set.
                    self.stop_node(name).await?;
                    self.start_node(name, &[]).await?;
                    self.stack.wait_live_nodes(n, Duration::from_secs(60)).await?;
                }
                notes.push(format!(
                    "{n} schedulers replaced one at a time by {which} (SIGTERM, same node ids): {} ms",
                    t.elapsed().as_millis()
                ));
                let t = tokio::time::Instant::now();
                let workers = self.stack.workers();
                for name in &workers {
                    self.stack.terminate(name, Duration::from_secs(30)).await?;
                    self.stack.start_worker(name, &[])?;
                }
                notes.push(format!(
                    "{} workers replaced one at a time (SIGTERM, same ids): {} ms",
                    workers.len(),
                    t.elapsed().as_millis()
                ));
                let t = tokio::time::Instant::now();
                self.stack.restart_api(Duration::from_secs(30)).await?;
                notes.push(format!("the API replaced: {} ms", t.elapsed().as_millis()));
                self.record_pids();
                sleep_until(until).await;
            }
            Fault::ClockSkew => {
                let scheds = self.stack.schedulers();
                let worker = self.stack.workers().into_iter().last().context("no worker running")?;
                let ms = self.args.skew_ms;
                let skewed = [(scheds[0].clone(), ms), (scheds[1].clone(), -ms)];
                for (name, off) in &skewed {
                    self.stop_node(name).await?;
                    let env = self.skewed(*off);
                    self.start_node(name, &env).await?;
                }
                self.stack.terminate(&worker, Duration::from_secs(30)).await?;
                self.stack.start_worker(&worker, &self.skewed(ms))?;
                notes.push(format!(
                    "restarted (SIGTERM, same ids) under libfaketime: {} {:+} ms, {} {:+} ms, {worker} {:+} ms",
                    skewed[0].0, ms, skewed[1].0, -ms, ms
                ));
                sleep_until(until).await;
                for (name, _) in &skewed {
                    self.stop_node(name).await?;
                    self.start_node(name, &[]).await?;
                }
                self.stack.terminate(&worker, Duration::from_secs(30)).await?;
                self.stack.start_worker(&worker, &[])?;
                notes.push("all three restarted with the true clock".into());
            }
        }
        let end = now_ms();
        Ok(Injected { fault, start, end, observe_end: end, notes })
    }
}

/// Makes the pair's commits wait for the standby (`remote_apply`: a commit
/// returns once the standby has applied it) or not, from the next commit on.
async fn set_synchronous(pair: &mut services::PgPair, sync: bool) -> anyhow::Result<()> {
    let client = pair.primary().connect().await?;
    let (names, level) = if sync { ("'*'", "remote_apply") } else { ("''", "local") };
    // One statement each: ALTER SYSTEM refuses to run in a transaction.
    for statement in [
        format!("ALTER SYSTEM SET synchronous_standby_names = {names}"),
        format!("ALTER SYSTEM SET synchronous_commit = {level}"),
        "SELECT pg_reload_conf()".to_owned(),
    ] {
        client.batch_execute(&statement).await.with_context(|| format!("{statement}: switching replication"))?;
    }
    // The pair lifts the requirement on the promoted server (no standby
    // to wait for) and puts it back once the old primary rejoins.
    pair.sync = sync;
    Ok(())
}

pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let plan = Plan::resolve(&args)?;
    for bin in ["cronshard-api", "cronshard-scheduler", "cronshard-worker"] {
        anyhow::ensure!(
            args.bin_dir.join(bin).exists(),
            "{} not found: build with `cargo build --release --bins` or pass --bin-dir",
            args.bin_dir.join(bin).display()
        );
    }
    if plan.faults.contains(&Fault::ClockSkew) {
        anyhow::ensure!(
            args.faketime_lib.exists(),
            "{} not found: clock-skew needs libfaketime (`apt-get install -y faketime`) or --faketime-lib",
            args.faketime_lib.display()
        );
    }
    services::reap_stale(&args.work_dir).await;
    let id = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let t = tokio::time::Instant::now();
    let mut services = Services::start(&args.work_dir, &id, plan.topology).await?;
    eprintln!(
        "chaos: private services up in {:.1} s ({}) under {}",
        t.elapsed().as_secs_f64(),
        services.describe(),
        services.dir.display()
    );
    // Ctrl-C or SIGTERM drops the scenario (its processes are killed with
    // the stack) and still stops the services.
    let result = tokio::select! {
        r = scenario(&args, &plan, &mut services) => r,
        _ = runtime::shutdown::signal() => Err(anyhow::anyhow!("interrupted")),
    };
    services.stop().await;
    let violations = result?;
    anyhow::ensure!(
        violations == 0,
        "{violations} slots duplicated, lost, without a final ledger status or delivered early (see the matrix)"
    );
    Ok(())
}

/// Every ledger row of `[from, to)`: execution id → row, with the slots of
/// the jobs' decided runs (`decided_ranges`, one record for an outage's
/// misfires) that have no row of their own. Read by minute, so a long
/// run's rows are never all in one answer.
async fn read_ledger(
    db_url: &str,
    jobs: &[crate::stack::CreatedJob],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<HashMap<String, LedgerRow>> {
    let client = store::db::connect(db_url).await?;
    let stmt = client
        .prepare(
            "SELECT execution_id, status,
                    CASE WHEN status = 'failed' AND history @> '[{\"event\": \"gave_up\"}]'
                         THEN 'destination down past the horizon' ELSE reason END,
                    history @> '[{\"event\": \"recovered\"}]' OR history @> '[{\"redelivered\": true}]'
             FROM scheduled_jobs WHERE scheduled_at >= $1 AND scheduled_at < $2",
        )
        .await?;
    let mut rows = HashMap::new();
    let mut at = from;
    while at < to {
        let next = (at + TimeDelta::minutes(1)).min(to);
        for r in client.query(&stmt, &[&at, &next]).await? {
            rows.insert(
                r.get::<_, String>(0),
                LedgerRow { status: r.get(1), reason: r.get(2), crash_redelivery: r.get(3) },
            );
        }
        at = next;
    }
    let by_id: HashMap<uuid::Uuid, &crate::stack::CreatedJob> = jobs.iter().map(|j| (j.id, j)).collect();
    let runs = client
        .query(
            "SELECT job_id, first_at, last_at, status, reason FROM decided_ranges WHERE last_at >= $1 AND first_at < $2",
            &[&from, &to],
        )
        .await?;
    for r in runs {
        let Some(job) = by_id.get(&r.get::<_, uuid::Uuid>(0)) else { continue };
        let (first, last): (DateTime<Utc>, DateTime<Utc>) = (r.get(1), r.get(2));
        for due in job.slots(first.max(from), (last + TimeDelta::microseconds(1)).min(to)) {
            rows.entry(domain::execution::execution_id(job.id, due)).or_insert_with(|| LedgerRow {
                status: r.get(3),
                reason: r.get(4),
                crash_redelivery: false,
            });
        }
    }
    Ok(rows)
}

/// Prints, for a few due slots that have no ledger row at all, their job's
/// rows around them: what the nodes decided just before and after shows how
/// the slot fell through.
async fn explain_rowless(
    db_url: &str,
    jobs: &[crate::stack::CreatedJob],
    ledger: &HashMap<String, LedgerRow>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> anyhow::Result<()> {
    let mut rowless: Vec<(uuid::Uuid, DateTime<Utc>)> = Vec::new();
    let mut count = 0usize;
    for job in jobs {
        for due in job.slots(from, to) {
            if !ledger.contains_key(domain::execution::execution_id(job.id, due).as_str()) {
                count += 1;
                if rowless.len() < 3 {
                    rowless.push((job.id, due));
                }
            }
        }
    }
    if count == 0 {
        return Ok(());
    }
    eprintln!("chaos: {count} due slots have no ledger row; around the first ones:");
    let client = store::db::connect(db_url).await?;
    for (job, due) in rowless {
        eprintln!("chaos:   job {job}, slot {due} has no row; its rows within 40 s:");
        let rows = client
            .query(
                "SELECT scheduled_at, status, trigger, scheduler_node, fired_at, reason, job_version
                 FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at BETWEEN $2 AND $3 ORDER BY scheduled_at",
                &[&job, &(due - TimeDelta::seconds(40)), &(due + TimeDelta::seconds(40))],
            )
            .await?;
        for r in rows {
            eprintln!(
                "chaos:     {} {} {} {} fired {:?} v{} {:?}",
                r.get::<_, DateTime<Utc>>(0),
                r.get::<_, String>(1),
                r.get::<_, String>(2),
                r.get::<_, String>(3),
                r.get::<_, Option<DateTime<Utc>>>(4),
                r.get::<_, i64>(6),
                r.get::<_, Option<String>>(5),
            );
        }
    }
    Ok(())
}

/// Waits until no slot of `[from, to)` is `pending`, `running` or
/// `retrying`, or `max` has passed; returns how many still are.
async fn drain(db_url: &str, from: DateTime<Utc>, to: DateTime<Utc>, max: Duration) -> anyhow::Result<i64> {
    let client = store::db::connect(db_url).await?;
    let started = tokio::time::Instant::now();
    let mut last_note = started;
    loop {
        let left: i64 = client
            .query_one(
                "SELECT count(*) FROM scheduled_jobs WHERE status IN ('pending', 'running', 'retrying')
                   AND scheduled_at >= $1 AND scheduled_at < $2",
                &[&from, &to],
            )
            .await?
            .get(0);
        if left == 0 || started.elapsed() >= max {
            return Ok(left);
        }
        if last_note.elapsed() >= Duration::from_secs(15) {
            eprintln!("chaos: drain: {left} slots not final yet after {} s", started.elapsed().as_secs());
            last_note = tokio::time::Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// `p50 / p99 / max ms`, the matrix's lateness cell.
fn lat_cell(p: Option<Percentiles>) -> String {
    p.map(|p| format!("{} / {} / {}", fmt_int(p.p50), fmt_int(p.p99), fmt_int(p.max))).unwrap_or_else(|| "—".into())
}

fn secs_between(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_milliseconds() as f64 / 1000.0
}

/// The figures of one fault, for the report, the matrix and the JSON.
#[derive(Serialize)]
struct FaultResult {
    #[serde(flatten)]
    injected: Injected,
    /// Slots due from the start of the fault to the end of its observation.
    whole: Figures,
    during: Figures,
    after: Figures,
    recovery_secs: Option<i64>,
    /// `receiver-down`: the slots of receiver B due during the fault.
    receiver_b: Option<Figures>,
}

async fn scenario(args: &ChaosArgs, plan: &Plan, services: &mut Services) -> anyhow::Result<usize> {
    let title = format!(
        "Chaos: {} fires/s, {} faults, {} schedulers and {} workers on private services",
        fmt_f(plan.rate),
        plan.faults.len(),
        args.schedulers,
        args.workers
    );
    let mut report = Report::new("chaos", report_name(args), title.clone(), &args.out);
    let receivers = [
        Receiver::loopback_chaos(args.fail_first_share).await?,
        Receiver::loopback_chaos(args.fail_first_share).await?,
    ];
    let mut stack_args = StackArgs::defaults();
    stack_args.schedulers = 0; // started below, each behind its own proxies
    stack_args.workers = args.workers;
    stack_args.tuned = args.tuned;
    stack_args.admin_database_url = services.pg_admin_url();
    stack_args.stack_redis_urls = Some(services.redis_urls());
    stack_args.stack_amqp_url = Some(services.amqp_url());
    stack_args.bin_dir = args.bin_dir.clone();
    if let Some(previous) = &args.previous_bin_dir {
        // The cluster as it runs before the upgrade: the previous release's
        // processes on its own schema.
        stack_args.bin_dir = previous.clone();
        stack_args.migrate_by_binaries = true;
    }
    stack_args.stack_log = args.stack_log.clone();
    stack_args.stack_log_dir = args.stack_log_dir.clone();
    stack_args.worker_env = args.worker_env.clone();
    if plan.topology != services::Topology::Single {
        // Replicated by Raft over the three nodes: a confirmed message
        // survives the loss of the node that took it.
        stack_args.stack_env.push(("AMQP_QUEUE_TYPE".into(), "quorum".into()));
    }
    let stack = Stack::start("chaos", &stack_args).await?;
    let mut run = Run { args, services, stack, links: BTreeMap::new(), receivers, ctx: Context::default() };
    for _ in 0..args.schedulers {
        run.add_node().await?;
    }
    run.stack.wait_live_nodes(args.schedulers, Duration::from_secs(60)).await?;

    // The load: the steady scenario's jobs, a share of them aimed at B.
    let load = LoadArgs {
        rate: plan.rate,
        period_ms: args.period_ms,
        cron_share: args.cron_share,
        misfire: args.misfire.clone(),
    };
    let n = load.jobs();
    let t0 = domain::execution::truncate_ms(Utc::now() + TimeDelta::seconds(8 + n as i64 / 300));
    let share = args.receiver_b_share.clamp(0.0, 1.0);
    let on_b = |i: usize| ((i + 1) as f64 * share).floor() > (i as f64 * share).floor();
    let mut bodies = load.bodies(&run.receivers[0].hook_url(), t0);
    for (i, b) in bodies.iter_mut().enumerate() {
        if on_b(i) {
            b["target"]["url"] = json!(run.receivers[1].hook_url());
        }
    }
    let (jobs, create_secs) = run.stack.create_jobs_batched(bodies, 500).await?;
    anyhow::ensure!(Utc::now() < t0, "creating {n} jobs took {create_secs:.1} s, past the start instant");
    eprintln!("chaos: {n} jobs created in {create_secs:.1} s; firing from {}", domain::execution::format_instant(t0));

    let measure_from = t0 + TimeDelta::seconds(plan.warmup);
    sleep_until(measure_from).await;
    let sampler = crate::procstat::Sampler::start(run.stack.targets());
    sleep_until(measure_from + TimeDelta::seconds(plan.baseline)).await;
    let baseline_end = now_ms();
    let mut injected: Vec<Injected> = Vec::new();
    for &fault in &plan.faults {
        let secs = plan.duration(args, fault);
        eprintln!("chaos: {} for {secs} s", fault.name());
        let injected_now = run.inject(fault, secs).await;
        run.record_pids();
        let mut inj = injected_now.with_context(|| format!("injecting {}", fault.name()))?;
        inj.observe_end = inj.end + TimeDelta::seconds(plan.observe);
        for note in &inj.notes {
            eprintln!("chaos:   {note}");
        }
        sleep_until(inj.observe_end).await;
        injected.push(inj);
    }
    let measure_to = injected.last().map_or(baseline_end, |i| i.observe_end);
    let usage = sampler.stop().await;

    // The final drain: every slot of the run final, or the bound.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let db_url = run.stack.database()?.1.to_owned();
    let drain_started = tokio::time::Instant::now();
    let left = drain(&db_url, measure_from, measure_to, Duration::from_secs(args.drain_max_secs)).await?;
    let drained_secs = drain_started.elapsed().as_secs();
    eprintln!("chaos: drained in {drained_secs} s ({left} not final)");
    let ledger = read_ledger(&db_url, &jobs, measure_from, measure_to).await?;
    explain_rowless(&db_url, &jobs, &ledger, measure_from, measure_to).await?;
    let got: Vec<Vec<(crate::receiver::Delivery, u16)>> =
        run.receivers.iter().map(Receiver::snapshot_with_status).collect();
    let cluster = run.stack.get_json("/v1/cluster").await.ok();
    let Run { stack, ctx, .. } = run;
    stack.shutdown().await?;

    // Every due slot, by due instant, with what the receivers and the ledger say.
    let mut slots: Vec<(String, Slot)> = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        for due in job.slots(measure_from, measure_to) {
            slots.push((domain::execution::execution_id(job.id, due), Slot::new(due, on_b(i))));
        }
    }
    slots.sort_by_key(|(_, s)| s.due);
    let mut arrivals = Vec::new();
    let mut unexpected = 0usize;
    {
        let index: HashMap<&str, usize> = slots.iter().enumerate().map(|(i, (id, _))| (id.as_str(), i)).collect();
        for (d, status) in got.iter().flatten() {
            match index.get(&*d.execution_id) {
                Some(&i) => arrivals.push((i, d.received_at, *status)),
                None if d.scheduled_at.is_some_and(|s| s >= measure_from && s < measure_to) => unexpected += 1,
                None => {}
            }
        }
    }
    drop(got);
    for (i, at, status) in arrivals {
        slots[i].1.arrived(at, status);
    }
    for (id, s) in &mut slots {
        s.ledger = ledger.get(id.as_str()).cloned();
    }
    let window = |from: DateTime<Utc>, to: DateTime<Utc>| {
        let a = slots.partition_point(|(_, s)| s.due < from);
        let b = slots.partition_point(|(_, s)| s.due < to);
        &slots[a..b]
    };
    let figures = |from, to, lateness_of: &dyn Fn(&Slot) -> bool| {
        Figures::of(&ctx, window(from, to).iter().map(|(id, s)| (id.as_str(), s)), lateness_of)
    };
    let all = |_: &Slot| true;
    let baseline = figures(measure_from, baseline_end, &all);
    let threshold = baseline.lateness.map_or(args.recovery_floor_ms, |p| {
        ((p.p99 as f64 * args.recovery_factor).round() as i64).max(args.recovery_floor_ms)
    });
    let mut results = Vec::new();
    for (i, inj) in injected.iter().enumerate() {
        // While receiver B is down its slots wait by design: the lateness
        // and recovery of `receiver-down` are receiver A's.
        let only_a = |s: &Slot| !s.on_b;
        let lateness_of: &dyn Fn(&Slot) -> bool = if inj.fault == Fault::ReceiverDown { &only_a } else { &all };
        // The slots due in the last seconds before the next fault are
        // already armed in a worker or queued when it starts: its effect
        // shows on them, so they do not judge this fault's recovery.
        let judged_until = if i + 1 < injected.len() {
            inj.observe_end - TimeDelta::seconds(RECOVERY_GUARD_SECS)
        } else {
            inj.observe_end
        };
        let after_slots = window(inj.end, judged_until).iter().filter(|(_, s)| lateness_of(s));
        let recovery = verdict::recovery_secs(
            after_slots
                .filter(|(_, s)| ctx.outcome(s) != verdict::Outcome::ByPolicy)
                .map(|(_, s)| (s.due, s.lateness_ms())),
            inj.end,
            judged_until,
            threshold,
        );
        let receiver_b = (inj.fault == Fault::ReceiverDown).then(|| {
            Figures::of(
                &ctx,
                window(inj.start, inj.end).iter().filter(|(_, s)| s.on_b).map(|(id, s)| (id.as_str(), s)),
                all,
            )
        });
        results.push(FaultResult {
            injected: inj.clone(),
            whole: figures(inj.start, inj.observe_end, lateness_of),
            during: figures(inj.start, inj.end, lateness_of),
            after: figures(inj.end, inj.observe_end, lateness_of),
            recovery_secs: recovery,
            receiver_b,
        });
    }
    let series_all = {
        let mut s = crate::report::LatenessSeries::build(
            measure_from,
            slots.iter().filter_map(|(_, s)| Some((s.due, s.lateness_ms()?))),
        );
        for r in &results {
            s.mark(secs_between(measure_from, r.injected.start), r.injected.fault.name());
            s.mark(secs_between(measure_from, r.injected.end), "end");
        }
        s
    };

    // The report.
    let mut settings = stack_args.settings();
    for (k, v) in &args.scheduler_env {
        settings.push_str(&format!("; scheduler {k}={v}"));
    }
    report.row("settings", settings);
    report.row(
        "services",
        format!(
            "private on loopback: 2 redis-server shards (no persistence), a RabbitMQ node, a PostgreSQL cluster of \
             {} (max_connections 300); each scheduler reaches Redis and Postgres through proxies of its own",
            services::pg_bin().display()
        ),
    );
    report.row("stack", format!("{} schedulers, {} workers, the API", args.schedulers, args.workers));
    report.row(
        "jobs (period, cron jobs, on receiver B)",
        format!(
            "{} (every {} ms, {} cron, {} on B)",
            fmt_int(n as i64),
            args.period_ms,
            fmt_int(load.cron_jobs() as i64),
            fmt_int((0..n).filter(|i| on_b(*i)).count() as i64)
        ),
    );
    report.row(
        "receivers",
        format!(
            "first attempt answered 500 for {}% of execution ids; misfire policy {}",
            fmt_f(args.fail_first_share * 100.0),
            args.misfire
        ),
    );
    report.row(
        "timeline",
        format!(
            "{} s warm-up, {} s baseline, faults of {} s (all-schedulers-down {} s, receiver-down {} s), {} s observation each",
            plan.warmup, plan.baseline, plan.fault, args.all_down_secs, args.receiver_down_secs, plan.observe
        ),
    );
    report.row("final drain", format!("{drained_secs} s; {left} slots not final at its end"));
    report.row(
        "baseline: due / delivered / lost / duplicated",
        format!(
            "{} / {} / {} / {}",
            fmt_int(baseline.due as i64),
            fmt_int(baseline.delivered as i64),
            baseline.lost,
            baseline.duplicated
        ),
    );
    report.row("baseline lateness p50 / p90 / p99 / max", Percentiles::cell(baseline.lateness));
    report.row(
        "recovery threshold",
        format!(
            "{} ms = max({} × baseline p99, {} ms); recovered from the first second after the fault's end from \
             which every second's p99 (a slot not yet requested counts as infinitely late) stays at or under it, \
             up to {RECOVERY_GUARD_SECS} s before the next fault (those slots are armed when it starts)",
            fmt_int(threshold),
            args.recovery_factor,
            args.recovery_floor_ms
        ),
    );
    if unexpected > 0 {
        report.row("requests for ids not due", unexpected);
    }
    for r in &results {
        let f = r.injected.fault.name();
        let w = &r.whole;
        report.row(format!("{f}: notes"), r.injected.notes.join("; "));
        report.row(
            format!("{f}: due / delivered / by policy / failed (retry policy) / lost / not final"),
            format!(
                "{} / {} / {} / {} / {} / {}",
                fmt_int(w.due as i64),
                fmt_int(w.delivered as i64),
                w.missed_by_policy,
                w.failed_by_retry_policy,
                w.lost,
                w.no_final_status
            ),
        );
        report.row(
            format!("{f}: duplicated / crash redeliveries"),
            format!("{} / {}", w.duplicated, w.crash_redeliveries),
        );
        report.row(
            format!("{f}: lateness during / after"),
            format!("{}; {}", Percentiles::cell(r.during.lateness), Percentiles::cell(r.after.lateness)),
        );
        report.row(format!("{f}: ledger (due during the fault)"), r.during.ledger_cell());
        if let Some(b) = &r.receiver_b {
            report.row(
                format!("{f}: receiver B's slots due during the fault"),
                format!(
                    "{} due: {} delivered (lateness {}), {} failed by the retry policy, {} lost, {} not final; ledger {}",
                    fmt_int(b.due as i64),
                    fmt_int(b.delivered as i64),
                    Percentiles::cell(b.lateness),
                    fmt_int(b.failed_by_retry_policy as i64),
                    b.lost,
                    b.no_final_status,
                    b.ledger_cell()
                ),
            );
        }
        for (what, ids) in [
            ("lost", &w.lost_examples),
            ("duplicated", &w.duplicated_examples),
            ("not final", &w.no_final_examples),
            ("early", &w.early_examples),
        ] {
            if !ids.is_empty() {
                report.row(format!("{f}: {what} (examples)"), ids.join(" "));
            }
        }
    }
    crate::procstat::rows(&mut report, &usage);
    report.plot(&args.out, &series_all, &format!("{title}: lateness per second"))?;
    let matrix = matrix(&baseline, &results, threshold);
    report.data(
        "plan",
        json!({
            "faults": plan.faults, "rate": plan.rate, "warmup_secs": plan.warmup, "baseline_secs": plan.baseline,
            "fault_secs": plan.fault, "observe_secs": plan.observe, "all_down_secs": args.all_down_secs,
            "receiver_down_secs": args.receiver_down_secs, "latency_ms": args.latency_ms, "skew_ms": args.skew_ms,
            "tuned": args.tuned, "fail_first_share": args.fail_first_share, "receiver_b_share": args.receiver_b_share,
        }),
    );
    report.data("window", json!({ "t0": t0, "from": measure_from, "baseline_end": baseline_end, "to": measure_to }));
    report.data("recovery_threshold_ms", threshold);
    report.data("baseline", &baseline);
    report.data("faults", &results);
    report.data("drain", json!({ "secs": drained_secs, "left": left }));
    report.data("series", &series_all);
    // What judges `receiver-down`, second by second: receiver A's slots only.
    if results.iter().any(|r| r.injected.fault == Fault::ReceiverDown) {
        let series_a = crate::report::LatenessSeries::build(
            measure_from,
            slots.iter().filter(|(_, s)| !s.on_b).filter_map(|(_, s)| Some((s.due, s.lateness_ms()?))),
        );
        report.data("series_receiver_a", &series_a);
    }
    report.data("cluster_at_end", cluster);
    report.data("matrix_markdown", &matrix);
    let name = report_name(args);
    report.finish(&args.out)?;
    std::fs::write(args.out.out.join(format!("{name}-matrix.md")), &matrix)?;
    println!("\n{matrix}");
    Ok(baseline.violations() + results.iter().map(|r| r.whole.violations()).sum::<usize>())
}

fn report_name(args: &ChaosArgs) -> String {
    args.out.name.clone().unwrap_or_else(|| format!("chaos-{}", if args.quick { "quick" } else { "run" }))
}

fn yes_no(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

/// The fault × figures matrix and the targets, as markdown.
fn matrix(baseline: &Figures, results: &[FaultResult], threshold: i64) -> String {
    let mut s = String::new();
    s.push_str(
        "| fault | fault (s) | slots due (fault + observation) | delivered | missed by policy | failed (retry policy) \
         | lost | no final status | duplicated (crash redeliveries) | lateness during p50 / p99 / max (ms) \
         | lateness after p50 / p99 / max (ms) | earliest (ms) | recovery (s) |\n",
    );
    s.push_str("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
    let row = |s: &mut String, name: &str, secs: String, w: &Figures, during: String, after: String, rec: String| {
        s.push_str(&format!(
            "| {name} | {secs} | {} | {} | {} | {} | {} | {} | {} ({}) | {during} | {after} | {} | {rec} |\n",
            fmt_int(w.due as i64),
            fmt_int(w.delivered as i64),
            fmt_int(w.missed_by_policy as i64),
            fmt_int(w.failed_by_retry_policy as i64),
            fmt_int(w.lost as i64),
            fmt_int(w.no_final_status as i64),
            fmt_int(w.duplicated as i64),
            fmt_int(w.crash_redeliveries as i64),
            w.earliest_ms.map(fmt_int).unwrap_or_else(|| "—".into()),
        ));
    };
    row(&mut s, "baseline (no fault)", "—".into(), baseline, lat_cell(baseline.lateness), "—".into(), "—".into());
    for r in results {
        row(
            &mut s,
            r.injected.fault.name(),
            fmt_f(secs_between(r.injected.start, r.injected.end)),
            &r.whole,
            lat_cell(r.during.lateness),
            lat_cell(r.after.lateness),
            r.recovery_secs.map(|v| v.to_string()).unwrap_or_else(|| "not within the observation".into()),
        );
    }
    s.push_str(
        "\nLedger, slots due during each fault (final status after the drain):\n\n| fault | ledger |\n|---|---|\n",
    );
    for r in results {
        s.push_str(&format!("| {} | {} |\n", r.injected.fault.name(), r.during.ledger_cell()));
    }
    s.push_str(&format!(
        "\nTargets (recovery threshold {} ms):\n\n| fault | 0 duplicated | 0 without final status | 0 missed but by policy \
         | nothing early | p99 ≤ 1 s during (single-node faults) | recovery ≤ 10 s |\n|---|---|---|---|---|---|---|\n",
        fmt_int(threshold)
    ));
    for r in results {
        let w = &r.whole;
        let p99 = if r.injected.fault.single_node() {
            yes_no(r.during.lateness.is_some_and(|p| p.p99 <= 1000)).to_owned()
        } else {
            "—".to_owned()
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {p99} | {} |\n",
            r.injected.fault.name(),
            yes_no(w.duplicated == 0),
            yes_no(w.no_final_status == 0),
            yes_no(w.lost == 0),
            yes_no(w.early == 0),
            yes_no(r.recovery_secs.is_some_and(|v| v <= 10)),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_names_round_trip_and_quick_is_a_subset() {
        for f in Fault::ALL {
            assert_eq!(Fault::parse(f.name()).unwrap(), f);
        }
        assert!(Fault::parse("nope").is_err());
        assert!(Fault::QUICK.iter().all(|f| Fault::ALL.contains(f)));
    }

    #[test]
    fn the_matrix_has_a_row_per_fault_and_flags_misses() {
        let t = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        // A 20 s kill-worker fault whose slots had these figures.
        let kill_worker = |figures: Figures| FaultResult {
            injected: Injected {
                fault: Fault::KillWorker,
                start: t,
                end: t + TimeDelta::seconds(20),
                observe_end: t + TimeDelta::seconds(50),
                notes: vec![],
            },
            whole: figures.clone(),
            during: figures,
            after: Figures::default(),
            recovery_secs: Some(3),
            receiver_b: None,
        };
        let mut lost = Figures { due: 10, delivered: 9, lost: 1, ..Default::default() };
        lost.ledger.insert("succeeded".into(), 9);
        let m = matrix(&Figures::default(), &[kill_worker(lost)], 100);
        assert!(m.contains("| kill-worker | 20.0 | 10 | 9 | 0 | 0 | 1 | 0 | 0 (0) |"), "{m}");
        assert!(m.contains("| kill-worker | yes | yes | **no** | yes | **no** | yes |"), "{m}");
        let early = Figures { due: 10, delivered: 10, early: 1, ..Default::default() };
        let m = matrix(&Figures::default(), &[kill_worker(early)], 100);
        assert!(m.contains("| kill-worker | yes | yes | yes | **no** | **no** | yes |"), "{m}");
    }
}
