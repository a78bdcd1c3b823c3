//! Replicated Redis: per shard a primary and a replica (`--replicaof`),
//! and three Sentinels watching both shards (master names `shard-0` and
//! `shard-1`, quorum 2). No persistence, as for the single shards.
//!
//! A node that comes back empty must never be a primary, even for a
//! moment: its replica would copy its emptiness (a full resync to an empty
//! data set). So a killed primary is started again only once the Sentinels
//! name another primary, and then as a replica of that one
//! ([`ReplicatedRedis::rejoin`]); it never starts as a primary.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use tokio::process::Command;
use tokio::time::Instant;

use super::resp;
use super::{free_port, kill_redis, spawn_redis};

pub const MASTER_NAMES: [&str; 2] = ["shard-0", "shard-1"];
const SENTINELS: usize = 3;
const QUORUM: usize = 2;
/// A primary silent for this long is down in a Sentinel's eyes.
const DOWN_AFTER_MS: u32 = 1000;
/// Bounds each step of a failover; a failed attempt is retried after
/// twice this.
const FAILOVER_TIMEOUT_MS: u32 = 3000;

/// A redis-server of a replicated shard, with a directory of its own.
pub struct RedisNode {
    pub port: u16,
    run_dir: PathBuf,
    pub(super) child: Option<tokio::process::Child>,
}

impl RedisNode {
    fn new(run_dir: &Path) -> anyhow::Result<Self> {
        Ok(Self { port: free_port()?, run_dir: run_dir.to_owned(), child: None })
    }

    fn dir(&self) -> PathBuf {
        self.run_dir.join(format!("redis-{}", self.port))
    }

    fn pid_file(&self) -> PathBuf {
        self.run_dir.join(format!("redis-{}.pid", self.port))
    }

    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    pub fn runs(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    async fn start(&mut self, replica_of: Option<u16>) -> anyhow::Result<()> {
        // Empty at every start, as a node without persistence is: no
        // `dump.rdb` left by an earlier full sync is loaded.
        let dir = self.dir();
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        // Sentinels rewrite a node's config at a failover (`CONFIG REWRITE`).
        let conf = dir.join("redis.conf");
        std::fs::write(&conf, "")?;
        let mut c = Command::new("redis-server");
        c.arg(&conf)
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", "", "--appendonly", "no"])
            // A replica's sync starts at once, not after 5 s of waiting for others.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(dir.join("redis.log"));
        if let Some(primary) = replica_of {
            c.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        self.child = Some(spawn_redis(c, self.port, &self.pid_file()).await?);
        Ok(())
    }

    async fn kill(&mut self) -> anyhow::Result<()> {
        let pid_file = self.pid_file();
        kill_redis(&mut self.child, &pid_file).await
    }

    /// `INFO replication`, field by field.
    pub async fn replication(&self) -> anyhow::Result<HashMap<String, String>> {
        let info = resp::command(self.port, &["INFO", "replication"]).await?;
        Ok(info
            .text()
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect())
    }
}

/// A Sentinel: `redis-server <conf> --sentinel`, its config file (which it
/// rewrites as it learns) in a directory of its own.
pub struct Sentinel {
    pub port: u16,
    run_dir: PathBuf,
    pub(super) child: Option<tokio::process::Child>,
}

impl Sentinel {
    fn dir(&self) -> PathBuf {
        self.run_dir.join(format!("sentinel-{}", self.port))
    }

    fn pid_file(&self) -> PathBuf {
        self.run_dir.join(format!("redis-sentinel-{}.pid", self.port))
    }

    pub fn addr(&self) -> SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    async fn start(&mut self, masters: &[(&str, u16)]) -> anyhow::Result<()> {
        let dir = self.dir();
        std::fs::create_dir_all(&dir)?;
        let mut conf = format!(
            "port {}\nbind 127.0.0.1\ndir \"{}\"\nlogfile \"{}\"\n\
             sentinel resolve-hostnames no\nsentinel announce-hostnames no\nsentinel announce-ip 127.0.0.1\n",
            self.port,
            dir.display(),
            dir.join("sentinel.log").display()
        );
        for (name, port) in masters {
            conf.push_str(&format!(
                "sentinel monitor {name} 127.0.0.1 {port} {QUORUM}\n\
                 sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}\n\
                 sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}\n\
                 sentinel parallel-syncs {name} 1\n"
            ));
        }
        let file = dir.join("sentinel.conf");
        std::fs::write(&file, conf)?;
        let mut c = Command::new("redis-server");
        c.arg(&file).arg("--sentinel");
        self.child = Some(spawn_redis(c, self.port, &self.pid_file()).await?);
        Ok(())
    }

    async fn kill(&mut self) -> anyhow::Result<()> {
        let pid_file = self.pid_file();
        kill_redis(&mut self.child, &pid_file).await
    }

    /// The primary this Sentinel names for `master` (`SENTINEL get-master-addr-by-name`).
    async fn primary(&self, master: &str) -> anyhow::Result<u16> {
        let reply = resp::command(self.port, &["SENTINEL", "get-master-addr-by-name", master]).await?;
        let port = reply.items().get(1).and_then(|p| p.text()).with_context(|| format!("{master}: {reply:?}"))?;
        Ok(port.parse()?)
    }
}

/// A primary killed by [`ReplicatedRedis::kill_primary`].
#[derive(Clone, Copy, Debug)]
pub struct RedisKill {
    pub shard: usize,
    pub port: u16,
    pub at: Instant,
}

/// A failover as the Sentinels report it, timed from the kill.
#[derive(Clone, Copy, Debug)]
pub struct RedisFailover {
    pub old: u16,
    pub new: u16,
    /// Until a Sentinel first named the new primary.
    pub first_reported: Duration,
    /// Until every Sentinel names it and it answers `ROLE` as a master.
    pub agreed: Duration,
}

/// Two shards of a primary and a replica each, three Sentinels watching both.
pub struct ReplicatedRedis {
    /// Per shard its two nodes: the first starts as the primary; after a
    /// failover the Sentinels' word is what counts ([`Self::primary`]).
    pub shards: Vec<[RedisNode; 2]>,
    pub sentinels: Vec<Sentinel>,
}

impl ReplicatedRedis {
    /// Picks the ports; [`Self::start_all`] starts the processes.
    pub fn new(run_dir: &Path) -> anyhow::Result<Self> {
        // A Sentinel changes directory to its `dir`: paths must not be relative.
        let run_dir = std::path::absolute(run_dir)?;
        Ok(Self {
            shards: MASTER_NAMES
                .iter()
                .map(|_| Ok([RedisNode::new(&run_dir)?, RedisNode::new(&run_dir)?]))
                .collect::<anyhow::Result<_>>()?,
            sentinels: (0..SENTINELS)
                .map(|_| Ok(Sentinel { port: free_port()?, run_dir: run_dir.clone(), child: None }))
                .collect::<anyhow::Result<_>>()?,
        })
    }

    /// New and started (stopped again when the start fails).
    pub async fn start(run_dir: &Path) -> anyhow::Result<Self> {
        let mut redis = Self::new(run_dir)?;
        if let Err(e) = redis.start_all().await {
            redis.stop().await;
            return Err(e);
        }
        Ok(redis)
    }

    /// Starts the primaries, their replicas and the Sentinels, and waits
    /// until a failover can be agreed on.
    pub async fn start_all(&mut self) -> anyhow::Result<()> {
        for [primary, replica] in &mut self.shards {
            primary.start(None).await?;
            replica.start(Some(primary.port)).await?;
        }
        let masters: Vec<(&str, u16)> =
            MASTER_NAMES.iter().copied().zip(self.shards.iter().map(|s| s[0].port)).collect();
        for s in &mut self.sentinels {
            s.start(&masters).await?;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.ready().await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(e.context("the Sentinels and replicas not ready after 30 s"));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Each Sentinel knows the two others and each primary's replica, and
    /// each replica's link is up: from then on a failover can be agreed on
    /// and promotes a replica that holds the data.
    async fn ready(&self) -> anyhow::Result<()> {
        for s in &self.sentinels {
            for name in MASTER_NAMES {
                let m = resp::command(s.port, &["SENTINEL", "MASTER", name]).await?;
                anyhow::ensure!(
                    m.field("flags") == Some("master")
                        && m.field("num-other-sentinels") == Some(&(SENTINELS - 1).to_string())
                        && m.field("num-slaves") == Some("1"),
                    "sentinel {}: {name} not ready: {m:?}",
                    s.port
                );
            }
        }
        for [_, replica] in &self.shards {
            let link = replica.replication().await?.get("master_link_status").cloned();
            anyhow::ensure!(link.as_deref() == Some("up"), "replica {}: link {link:?}", replica.port);
        }
        Ok(())
    }

    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(Sentinel::addr).collect()
    }

    /// The product's URL of shard `shard`:
    /// `redis-sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/shard-0`.
    pub fn url(&self, shard: usize) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|s| format!("127.0.0.1:{}", s.port)).collect();
        format!("redis-sentinel://{}/{}", hosts.join(","), MASTER_NAMES[shard])
    }

    /// Both shards' URLs separated by commas (`REDIS_URLS`).
    pub fn urls(&self) -> String {
        (0..self.shards.len()).map(|i| self.url(i)).collect::<Vec<_>>().join(",")
    }

    /// The primary each Sentinel names for `shard` (`None`: no answer).
    pub async fn reported_primaries(&self, shard: usize) -> Vec<Option<u16>> {
        let asks = self.sentinels.iter().map(|s| s.primary(MASTER_NAMES[shard]));
        futures::future::join_all(asks).await.into_iter().map(Result::ok).collect()
    }

    /// The primary of `shard` that a majority of the Sentinels names.
    pub async fn primary(&self, shard: usize) -> anyhow::Result<u16> {
        let reported = self.reported_primaries(shard).await;
        reported
            .iter()
            .flatten()
            .copied()
            .find(|p| reported.iter().filter(|r| **r == Some(*p)).count() > SENTINELS / 2)
            .with_context(|| format!("shard {shard}: no primary named by a majority of the Sentinels: {reported:?}"))
    }

    /// The nodes' addresses of `shard` (for a client that follows a
    /// failover by itself, or a check).
    pub fn node_addrs(&self, shard: usize) -> Vec<SocketAddr> {
        self.shards[shard].iter().map(RedisNode::addr).collect()
    }

    fn node_mut(&mut self, shard: usize, port: u16) -> anyhow::Result<&mut RedisNode> {
        self.shards[shard]
            .iter_mut()
            .find(|n| n.port == port)
            .with_context(|| format!("no node {port} in shard {shard}"))
    }

    /// SIGKILL of the node the Sentinels name as `shard`'s primary.
    pub async fn kill_primary(&mut self, shard: usize) -> anyhow::Result<RedisKill> {
        let port = self.primary(shard).await?;
        self.node_mut(shard, port)?.kill().await?;
        Ok(RedisKill { shard, port, at: Instant::now() })
    }

    /// Waits until the Sentinels name a new primary for the killed one's
    /// shard, every one of them, and the new primary says it is one.
    pub async fn wait_new_primary(&self, kill: &RedisKill, timeout: Duration) -> anyhow::Result<RedisFailover> {
        let deadline = kill.at + timeout;
        let mut first_reported = None;
        loop {
            let reported = self.reported_primaries(kill.shard).await;
            if first_reported.is_none() && reported.iter().any(|r| r.is_some_and(|p| p != kill.port)) {
                first_reported = Some(kill.at.elapsed());
            }
            if let Some(Some(new)) = reported.first()
                && *new != kill.port
                && reported.iter().all(|r| *r == Some(*new))
                && let Ok(role) = resp::command(*new, &["ROLE"]).await
                && role.items().first().and_then(|r| r.text()) == Some("master")
            {
                let agreed = kill.at.elapsed();
                return Ok(RedisFailover {
                    old: kill.port,
                    new: *new,
                    first_reported: first_reported.unwrap_or(agreed),
                    agreed,
                });
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "shard {}: no new primary agreed on {timeout:?} after the kill of {} (sentinels name {reported:?})",
                kill.shard,
                kill.port
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the killed primary again, empty, as a replica of the primary
    /// the Sentinels name now; returns once its link is up (its full sync
    /// done). Refuses while the Sentinels still name the killed node.
    pub async fn rejoin(&mut self, kill: &RedisKill) -> anyhow::Result<Duration> {
        let t = Instant::now();
        let primary = self.primary(kill.shard).await?;
        anyhow::ensure!(
            primary != kill.port,
            "shard {}: the Sentinels still name {} as the primary; started now, empty, it would empty its replica",
            kill.shard,
            kill.port
        );
        let node = self.node_mut(kill.shard, kill.port)?;
        anyhow::ensure!(!node.runs(), "node {} runs", kill.port);
        node.start(Some(primary)).await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let link = node.replication().await.ok().and_then(|r| r.get("master_link_status").cloned());
            if link.as_deref() == Some("up") {
                return Ok(t.elapsed());
            }
            anyhow::ensure!(Instant::now() < deadline, "node {}: replica link still {link:?} after 30 s", kill.port);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pids(&self) -> Vec<u32> {
        let nodes = self.shards.iter().flatten().filter_map(RedisNode::pid);
        nodes.chain(self.sentinels.iter().filter_map(|s| s.child.as_ref()?.id())).collect()
    }

    /// SIGKILL of every node and Sentinel.
    pub async fn stop(&mut self) {
        for node in self.shards.iter_mut().flatten() {
            if let Err(e) = node.kill().await {
                eprintln!("chaos: stopping redis-server on {}: {e:#}", node.port);
            }
        }
        for s in &mut self.sentinels {
            if let Err(e) = s.kill().await {
                eprintln!("chaos: stopping the Sentinel on {}: {e:#}", s.port);
            }
        }
    }
}
