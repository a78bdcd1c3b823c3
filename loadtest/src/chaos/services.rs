//! The `chaos` scenario's private services, each on free loopback ports
//! with its data in the run's directory, so that restarting or stopping one
//! never touches the machine's shared services (other tests run against
//! those). Two topologies ([`Topology`]):
//!
//! - single: two redis-server shards, a RabbitMQ node, a PostgreSQL cluster;
//! - replicated: per Redis shard a primary and a replica watched by three
//!   Sentinels ([`ReplicatedRedis`]), a Postgres primary with a streaming
//!   standby ([`PgPair`]), a three-node RabbitMQ cluster ([`RabbitCluster`]),
//!   each with the faults of its kind (kill the primary, promote, rejoin).
//!
//! A run's directory (`<work dir>/run-<id>`) holds `owner.pid` (this
//! process), the pid files of the services and `stack.pids` (the stack's
//! processes, see [`Services::record_stack`]). A run that died without
//! cleaning up (SIGKILL, a crash) is cleaned by the next one: [`reap_stale`]
//! kills the stack processes and stops the services of every run directory
//! whose owner is gone, and removes the directory.

// The replicated topology's fault API (kill, promote, rejoin, positions) is
// the chaos scenario's to use, which does not use all of it (yet).
#![allow(dead_code, unused_imports)]

mod pg_pair;
mod rabbit_cluster;
mod redis_sentinel;
mod resp;
#[cfg(test)]
mod tests;

pub use pg_pair::{Lsn, PgKill, PgLsns, PgPair, PgPromotion};
pub use rabbit_cluster::RabbitCluster;
pub use redis_sentinel::{RedisFailover, RedisKill, RedisNode, ReplicatedRedis, Sentinel};

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::Command;
use tokio::time::Instant;

/// The newest installed PostgreSQL server's programs (Debian's layout:
/// `/usr/lib/postgresql/<major>/bin`).
pub fn pg_bin() -> PathBuf {
    std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let major: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .max_by_key(|(major, _)| *major)
        .map_or_else(|| PathBuf::from("/usr/lib/postgresql/15/bin"), |(_, bin)| bin)
}
/// Debian's real RabbitMQ scripts: the `/usr/sbin` wrappers switch to the
/// `rabbitmq` user and its home, which would find the shared node's cookie
/// and directories instead of this run's.
const RABBITMQ_BIN: &str = "/usr/lib/rabbitmq/bin";

/// A free loopback port, never one this process handed out before (a run
/// takes a dozen of them before starting anything on them).
fn free_port() -> anyhow::Result<u16> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    for _ in 0..100 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut given = GIVEN.lock().expect("ports");
        if !given.contains(&port) {
            given.push(port);
            return Ok(port);
        }
    }
    anyhow::bail!("no free loopback port not handed out before")
}

/// A free port `p` such that `p + 10,000 .. p + 10,010` exist too: the
/// Erlang distribution port, whose CLI tools take ports 10,000 above it.
fn free_dist_port() -> anyhow::Result<u16> {
    for _ in 0..100 {
        let p = free_port()?;
        if p < 55_000 {
            return Ok(p);
        }
    }
    anyhow::bail!("no free port below 55,000 for the Erlang distribution")
}

async fn port_open(port: u16) -> bool {
    tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok()
}

async fn wait_port(what: &str, port: u16, open: bool, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while port_open(port).await != open {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{what}: port {port} still {} after {timeout:?}",
            if open { "closed" } else { "open" }
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Does process `pid` run, with `needle` in its command line?
fn pid_runs(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " ").contains(needle))
        .unwrap_or(false)
}

/// `kill -<signal> pids...`: one command, so that the processes get it
/// microseconds apart.
fn signal(pids: &[u32], signal: &str) {
    if !pids.is_empty() {
        let _ = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .args(pids.iter().map(u32::to_string))
            .stderr(Stdio::null())
            .status();
    }
}

fn kill9(pid: u32) {
    signal(&[pid], "KILL");
}

/// The processes whose parent is `pid` (from `/proc/<child>/stat`).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let child: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            let ppid: u32 = stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()?;
            (ppid == pid).then_some(child)
        })
        .collect()
}

/// Does `pid` run (a zombie, dead and not yet reaped, does not)?
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| Some(stat[stat.rfind(')')? + 1..].split_whitespace().next()? != "Z"))
        .unwrap_or(false)
}

/// The pid on the first line of `file`.
fn read_pid(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.lines().next()?.trim().parse().ok()
}

/// Runs a command to its end; an error carries its output.
async fn run(mut c: Command, what: &str) -> anyhow::Result<String> {
    let out = c.stdin(Stdio::null()).output().await.with_context(|| format!("{what}: could not start"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    anyhow::ensure!(out.status.success(), "{what} failed ({}): {}", out.status, text.trim());
    Ok(text)
}

/// Starts redis-server as a child of this process (killed with it), notes
/// its pid in `pid_file` and waits for its port.
async fn spawn_redis(mut c: Command, port: u16, pid_file: &Path) -> anyhow::Result<tokio::process::Child> {
    let child = c
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting redis-server (deploy/scripts/services.sh installs it)")?;
    std::fs::write(pid_file, child.id().unwrap_or_default().to_string())?;
    wait_port("redis-server", port, true, Duration::from_secs(10)).await?;
    Ok(child)
}

/// SIGKILL of a redis-server child: gone at once, its keys with it.
async fn kill_redis(child: &mut Option<tokio::process::Child>, pid_file: &Path) -> anyhow::Result<()> {
    if let Some(mut c) = child.take() {
        c.start_kill()?;
        c.wait().await?;
    }
    let _ = std::fs::remove_file(pid_file);
    Ok(())
}

/// One redis-server, without persistence (a restart loses every key, as
/// the product must expect), a child of this process.
pub struct RedisShard {
    pub port: u16,
    dir: PathBuf,
    child: Option<tokio::process::Child>,
}

impl RedisShard {
    fn pid_file(&self) -> PathBuf {
        self.dir.join(format!("redis-{}.pid", self.port))
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn start(&mut self) -> anyhow::Result<()> {
        let mut c = Command::new("redis-server");
        c.args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir);
        self.child = Some(spawn_redis(c, self.port, &self.pid_file()).await?);
        Ok(())
    }

    /// SIGKILL: gone at once, its keys with it.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let pid_file = self.pid_file();
        kill_redis(&mut self.child, &pid_file).await
    }
}

/// A RabbitMQ node of its own: node name, AMQP and distribution ports,
/// database, logs, plugins (none) and Erlang cookie all in the run's
/// directory. Started detached (the foreground script needs a terminal's
/// signals); its pid file is what the reaper and the last resort use.
pub struct Rabbit {
    pub node: String,
    pub port: u16,
    dist_port: u16,
    dir: PathBuf,
}

impl Rabbit {
    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    fn pid_file(dir: &Path) -> PathBuf {
        dir.join("rabbitmq.pid")
    }

    fn command(&self, tool: &str) -> Command {
        let bin = Path::new(RABBITMQ_BIN).join(tool);
        let mut c = Command::new(if bin.exists() { bin } else { PathBuf::from(tool) });
        let d = &self.dir;
        c.current_dir(d)
            .env("HOME", d.join("home"))
            .env("RABBITMQ_NODENAME", &self.node)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_PID_FILE", Self::pid_file(d))
            .env("RABBITMQ_CONF_ENV_FILE", d.join("rabbitmq-env.conf"))
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
            .env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "-kernel inet_dist_use_interface {127,0,0,1}")
            .env("ERL_EPMD_ADDRESS", "127.0.0.1");
        c
    }

    /// The node's files; `cookie`: the Erlang cookie nodes of a cluster
    /// share (else the node makes one of its own at its first start).
    fn prepare(&self, cookie: Option<&str>) -> anyhow::Result<()> {
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(self.dir.join(sub))?;
        }
        if let Some(cookie) = cookie {
            use std::os::unix::fs::PermissionsExt;
            let file = self.dir.join("home/.erlang.cookie");
            std::fs::write(&file, cookie)?;
            // Erlang refuses a cookie file that others can read.
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o400))?;
        }
        // The machine's env file names the shared node: this one is empty.
        std::fs::write(self.dir.join("rabbitmq-env.conf"), "")?;
        std::fs::write(self.dir.join("rabbitmq.conf"), format!("listeners.tcp.1 = 127.0.0.1:{}\n", self.port))?;
        std::fs::write(self.dir.join("enabled_plugins"), "[].\n")?;
        Ok(())
    }

    pub async fn start(&self) -> anyhow::Result<()> {
        let mut c = self.command("rabbitmq-server");
        c.arg("-detached").stdout(Stdio::null()).stderr(Stdio::null());
        run(c, "rabbitmq-server -detached").await?;
        // `await_startup` fails at once while the node is not registered yet.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let mut ctl = self.command("rabbitmqctl");
            ctl.args(["-n", &self.node, "await_startup", "--timeout", "60"]);
            if run(ctl, "rabbitmqctl await_startup").await.is_ok() && port_open(self.port).await {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the private RabbitMQ node {} did not start within 120 s (logs in {})",
                self.node,
                self.dir.join("log").display()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `rabbitmqctl stop` (the node saves its queues and halts); SIGKILL
    /// if it is still there after 60 s.
    pub async fn stop(&self) -> anyhow::Result<()> {
        let mut c = self.command("rabbitmqctl");
        c.args(["-n", &self.node, "stop"]).arg(Self::pid_file(&self.dir));
        let stopped = tokio::time::timeout(Duration::from_secs(60), run(c, "rabbitmqctl stop")).await;
        if !matches!(stopped, Ok(Ok(_))) {
            Self::kill_from_pid_file(&self.dir);
        }
        wait_port("rabbitmq", self.port, false, Duration::from_secs(30)).await
    }

    /// The node's Erlang VM, when it runs.
    pub fn pid(&self) -> Option<u32> {
        read_pid(&Self::pid_file(&self.dir)).filter(|pid| pid_runs(*pid, "beam"))
    }

    /// SIGKILL of the node's Erlang VM (no goodbye to its peers), then
    /// waits for its AMQP port to close.
    pub async fn kill(&self) -> anyhow::Result<()> {
        Self::kill_from_pid_file(&self.dir);
        wait_port("rabbitmq", self.port, false, Duration::from_secs(30)).await
    }

    fn kill_from_pid_file(dir: &Path) {
        if let Some(pid) = read_pid(&Self::pid_file(dir))
            && pid_runs(pid, "beam")
        {
            kill9(pid);
        }
    }

    /// `rabbitmqctl -n <node> args...`: its output.
    async fn ctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut c = self.command("rabbitmqctl");
        c.args(["-n", &self.node]).args(args);
        run(c, &format!("rabbitmqctl {}", args.join(" "))).await
    }

    /// Names of the queues on the node.
    pub async fn queues(&self) -> anyhow::Result<Vec<String>> {
        let mut c = self.command("rabbitmqctl");
        c.args(["-n", &self.node, "-q", "list_queues", "name", "--no-table-headers"]);
        Ok(run(c, "rabbitmqctl list_queues")
            .await?
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect())
    }
}

/// A PostgreSQL cluster of its own (initdb in the run's directory, trust
/// authentication, loopback only). Run as the `postgres` user when this
/// process is root, since initdb refuses root.
pub struct Pg {
    pub port: u16,
    dir: PathBuf,
}

impl Pg {
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    fn tool(dir: &Path, name: &str) -> Command {
        let bin = pg_bin().join(name);
        let mut c = if running_as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(bin);
            c
        } else {
            Command::new(bin)
        };
        c.current_dir(dir);
        c
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The node's directory, owned by the user the server runs as.
    async fn prepare_dir(&self) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        if running_as_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.arg("postgres:").arg(&self.dir);
                    c
                },
                "chown of the Postgres directory",
            )
            .await?;
        }
        Ok(())
    }

    async fn init(&self) -> anyhow::Result<()> {
        self.prepare_dir().await?;
        let mut c = Self::tool(&self.dir, "initdb");
        c.arg("-D").arg(self.data()).args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        run(c, "initdb").await?;
        Ok(())
    }

    /// Appends settings to the cluster's `postgresql.conf` (a standby's
    /// base backup copies them).
    fn append_conf(&self, text: &str) -> anyhow::Result<()> {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(self.data().join("postgresql.conf"))?;
        f.write_all(text.as_bytes())?;
        Ok(())
    }

    /// A fresh data directory streamed from `primary` (`pg_basebackup -R`:
    /// `standby.signal` and `primary_conninfo` written), replicating
    /// through the slot `slot`, created on the primary.
    async fn base_backup_from(&self, primary: &Pg, slot: &str) -> anyhow::Result<()> {
        self.prepare_dir().await?;
        anyhow::ensure!(self.postmaster_pid().is_none(), "Postgres on {} runs", self.port);
        self.remove_stale_locks();
        if self.data().exists() {
            std::fs::remove_dir_all(self.data())?;
        }
        let mut c = Self::tool(&self.dir, "pg_basebackup");
        c.arg("-D")
            .arg(self.data())
            .args(["-h", "127.0.0.1", "-p", &primary.port.to_string(), "-U", "postgres", "-w"])
            // A fast checkpoint: the default spread one takes minutes.
            .args(["-R", "-X", "stream", "-C", "-S", slot, "-c", "fast", "--no-sync"]);
        run(c, "pg_basebackup").await?;
        Ok(())
    }

    /// The postmaster's pid, when it runs.
    pub fn postmaster_pid(&self) -> Option<u32> {
        Self::postmaster_in(&self.dir)
    }

    fn postmaster_in(dir: &Path) -> Option<u32> {
        read_pid(&dir.join("data/postmaster.pid")).filter(|pid| pid_runs(*pid, "postgres"))
    }

    /// The postmaster and its children.
    pub fn pids(&self) -> Vec<u32> {
        self.postmaster_pid().map(|pm| std::iter::once(pm).chain(children_of(pm)).collect()).unwrap_or_default()
    }

    /// A crash of the whole server: SIGKILL of the postmaster and of every
    /// child at once, as when its machine dies. (SIGKILL of the postmaster
    /// alone leaves its children serving the sessions they have until they
    /// notice.) Stopped first so that it forks nothing in between.
    pub async fn kill(&self) -> anyhow::Result<()> {
        let Some(pm) = self.postmaster_pid() else { anyhow::bail!("Postgres on {} does not run", self.port) };
        signal(&[pm], "STOP");
        let all: Vec<u32> = std::iter::once(pm).chain(children_of(pm)).collect();
        signal(&all, "KILL");
        let deadline = Instant::now() + Duration::from_secs(10);
        while all.iter().any(|p| alive(*p)) {
            anyhow::ensure!(Instant::now() < deadline, "Postgres on {}: processes left 10 s after SIGKILL", self.port);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.remove_stale_locks();
        Ok(())
    }

    /// The lock files of a dead postmaster. Postgres removes them itself
    /// at its next start unless their pid still exists, which a zombie's
    /// does until init reaps it (here up to a couple of seconds).
    fn remove_stale_locks(&self) {
        let _ = std::fs::remove_file(self.dir.join(format!(".s.PGSQL.{}.lock", self.port)));
        let _ = std::fs::remove_file(self.data().join("postmaster.pid"));
    }

    /// `pg_ctl promote -w`: returns once the standby accepts writes.
    async fn promote(&self) -> anyhow::Result<()> {
        let mut c = Self::tool(&self.dir, "pg_ctl");
        c.arg("-D").arg(self.data()).args(["-w", "-t", "60", "promote"]);
        run(c, "pg_ctl promote").await?;
        Ok(())
    }

    /// A session to the `postgres` database (its connection task spawned).
    pub async fn connect(&self) -> anyhow::Result<tokio_postgres::Client> {
        let url = format!("{}?connect_timeout=5", self.admin_url());
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .with_context(|| format!("connecting to Postgres on {}", self.port))?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// `pg_ctl stop -m immediate` when it runs.
    async fn stop(&self) -> anyhow::Result<()> {
        if self.postmaster_pid().is_some() { Self::stop_dir(&self.dir).await } else { Ok(()) }
    }

    pub async fn start(&self) -> anyhow::Result<()> {
        let mut c = Self::tool(&self.dir, "pg_ctl");
        c.arg("-D").arg(self.data()).arg("-l").arg(self.dir.join("postgres.log")).args(["-w", "-t", "60", "-o"]);
        // More connections than the default 100: five schedulers, two
        // workers and the API each pool up to 16.
        c.arg(format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300",
            self.port,
            self.dir.display()
        ))
        .arg("start");
        run(c, "pg_ctl start").await?;
        Ok(())
    }

    /// `pg_ctl restart -m fast`: every session is ended, the server comes back.
    pub async fn restart(&self) -> anyhow::Result<()> {
        let mut c = Self::tool(&self.dir, "pg_ctl");
        c.arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.join("postgres.log"))
            .args(["-w", "-t", "60", "-m", "fast", "restart"]);
        run(c, "pg_ctl restart").await?;
        Ok(())
    }

    async fn stop_dir(dir: &Path) -> anyhow::Result<()> {
        let mut c = Self::tool(dir, "pg_ctl");
        c.arg("-D").arg(dir.join("data")).args(["-w", "-t", "60", "-m", "immediate", "stop"]);
        run(c, "pg_ctl stop").await?;
        Ok(())
    }
}

/// Which services a run starts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Topology {
    /// Two redis-server shards, a RabbitMQ node, a PostgreSQL cluster.
    #[default]
    Single,
    /// Per Redis shard a primary and a replica watched by three Sentinels,
    /// a Postgres primary with a streaming standby (synchronous commit on
    /// the standby when `pg_sync`), a three-node RabbitMQ cluster.
    Replicated { pg_sync: bool },
}

/// The replicated topology's services.
pub struct Replicated {
    pub redis: ReplicatedRedis,
    pub pg: PgPair,
    pub rabbit: RabbitCluster,
    /// How long each took to start (side by side).
    pub startup: StartupTimes,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct StartupTimes {
    pub redis: Duration,
    pub pg: Duration,
    pub rabbit: Duration,
}

async fn timed(f: impl Future<Output = anyhow::Result<()>>) -> anyhow::Result<Duration> {
    let t = Instant::now();
    f.await?;
    Ok(t.elapsed())
}

/// Every private service of one run.
pub struct Services {
    pub dir: PathBuf,
    pub topology: Topology,
    /// The single topology's shards (none when replicated).
    pub redis: Vec<RedisShard>,
    rabbit: Option<Rabbit>,
    pg: Option<Pg>,
    /// The replicated topology's services.
    pub replicated: Option<Replicated>,
}

impl Services {
    /// Creates `<work_dir>/run-<id>` and starts the services of `topology` in it.
    pub async fn start(work_dir: &Path, id: &str, topology: Topology) -> anyhow::Result<Self> {
        std::fs::create_dir_all(work_dir)?;
        let dir = work_dir.join(format!("run-{id}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("owner.pid"), std::process::id().to_string())?;
        let mut services =
            Self { dir: dir.clone(), topology, redis: Vec::new(), rabbit: None, pg: None, replicated: None };
        match topology {
            Topology::Single => {
                services.redis = (0..2)
                    .map(|_| Ok(RedisShard { port: free_port()?, dir: dir.clone(), child: None }))
                    .collect::<anyhow::Result<_>>()?;
                services.rabbit = Some(Rabbit {
                    node: format!("chaos-{id}@localhost"),
                    port: free_port()?,
                    dist_port: free_dist_port()?,
                    dir: dir.join("rabbitmq"),
                });
                services.pg = Some(Pg { port: free_port()?, dir: dir.join("pg") });
            }
            Topology::Replicated { pg_sync } => {
                services.replicated = Some(Replicated {
                    redis: ReplicatedRedis::new(&dir)?,
                    pg: PgPair::new(&dir, pg_sync)?,
                    rabbit: RabbitCluster::new(&dir, id, 3)?,
                    startup: StartupTimes::default(),
                });
            }
        }
        // From here on the services are stopped on failure too.
        match services.start_all().await {
            Ok(()) => Ok(services),
            Err(e) => {
                services.stop().await;
                Err(e)
            }
        }
    }

    async fn start_all(&mut self) -> anyhow::Result<()> {
        if let Some(r) = &mut self.replicated {
            // The brokers boot (Erlang, then the joins) while the rest starts.
            let (redis, pg, rabbit) =
                tokio::join!(timed(r.redis.start_all()), timed(r.pg.start_all()), timed(r.rabbit.start_all()));
            r.startup = StartupTimes { redis: redis?, pg: pg?, rabbit: rabbit? };
            return Ok(());
        }
        for shard in &mut self.redis {
            shard.start().await?;
        }
        let (Some(rabbit), Some(pg)) = (&self.rabbit, &self.pg) else { return Ok(()) };
        rabbit.prepare(None)?;
        pg.init().await?;
        // The broker boots (several seconds of Erlang) while Postgres starts.
        let (rabbit, pg) = tokio::join!(rabbit.start(), pg.start());
        rabbit?;
        pg?;
        Ok(())
    }

    /// The single topology's RabbitMQ node.
    pub fn rabbit(&self) -> anyhow::Result<&Rabbit> {
        self.rabbit
            .as_ref()
            .context("the replicated topology has a RabbitMQ cluster (`replicated.rabbit`), no single node")
    }

    /// The single topology's Postgres.
    pub fn pg(&self) -> anyhow::Result<&Pg> {
        self.pg.as_ref().context("the replicated topology has a Postgres pair (`replicated.pg`), no single server")
    }

    pub fn replicated(&self) -> anyhow::Result<&Replicated> {
        self.replicated.as_ref().context("the single topology has no replicas")
    }

    pub fn replicated_mut(&mut self) -> anyhow::Result<&mut Replicated> {
        self.replicated.as_mut().context("the single topology has no replicas")
    }

    /// Notes the pids of the stack's processes for [`reap_stale`].
    pub fn record_stack(&self, pids: impl IntoIterator<Item = u32>) {
        let text: String = pids.into_iter().map(|p| format!("{p}\n")).collect();
        let _ = std::fs::write(self.dir.join("stack.pids"), text);
    }

    /// The product's `REDIS_URLS`: a `redis://` URL per shard, or when
    /// replicated a `redis-sentinel://` one per shard.
    pub fn redis_urls(&self) -> String {
        match &self.replicated {
            Some(r) => r.redis.urls(),
            None => self.redis.iter().map(RedisShard::url).collect::<Vec<_>>().join(","),
        }
    }

    /// The product's `AMQP_URL`: the node's, or the cluster nodes' separated by commas.
    pub fn amqp_url(&self) -> String {
        match (&self.replicated, &self.rabbit) {
            (Some(r), _) => r.rabbit.amqp_urls(),
            (None, Some(rabbit)) => rabbit.amqp_url(),
            (None, None) => String::new(),
        }
    }

    /// The admin Postgres URL (database `postgres`): when replicated, both
    /// servers, the session on the one that takes writes.
    pub fn pg_admin_url(&self) -> String {
        match (&self.replicated, &self.pg) {
            (Some(r), _) => r.pg.admin_url(),
            (None, Some(pg)) => pg.admin_url(),
            (None, None) => String::new(),
        }
    }

    /// Ports and names, for the log.
    pub fn describe(&self) -> String {
        let list = |ports: Vec<u16>| ports.iter().map(u16::to_string).collect::<Vec<_>>().join("+");
        match (&self.replicated, &self.rabbit, &self.pg) {
            (Some(r), _, _) => format!(
                "redis {} with sentinels {}, rabbitmq cluster {} on {}, postgres {} ({}) — started in \
                 {:.1} s, {:.1} s and {:.1} s",
                r.redis.shards.iter().map(|s| list(s.iter().map(|n| n.port).collect())).collect::<Vec<_>>().join(" "),
                list(r.redis.sentinels.iter().map(|s| s.port).collect()),
                r.rabbit.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>().join(","),
                list(r.rabbit.nodes.iter().map(|n| n.port).collect()),
                list(r.pg.nodes.iter().map(|n| n.port).collect()),
                if r.pg.sync { "synchronous standby" } else { "asynchronous standby" },
                r.startup.redis.as_secs_f64(),
                r.startup.rabbit.as_secs_f64(),
                r.startup.pg.as_secs_f64(),
            ),
            (None, Some(rabbit), Some(pg)) => format!(
                "redis {}, rabbitmq {} on {}, postgres {}",
                list(self.redis.iter().map(|s| s.port).collect()),
                rabbit.node,
                rabbit.port,
                pg.port
            ),
            _ => String::new(),
        }
    }

    /// Every process of the services that runs now.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.redis.iter().filter_map(|s| s.child.as_ref()?.id()).collect();
        pids.extend(self.rabbit.iter().filter_map(Rabbit::pid));
        pids.extend(self.pg.iter().flat_map(Pg::pids));
        if let Some(r) = &self.replicated {
            pids.extend(r.redis.pids());
            pids.extend(r.rabbit.nodes.iter().filter_map(Rabbit::pid));
            pids.extend(r.pg.nodes.iter().flat_map(Pg::pids));
        }
        pids
    }

    /// Stops everything and removes the run's directory; reports but
    /// survives a service that would not stop (the next run reaps it).
    pub async fn stop(mut self) {
        for shard in &mut self.redis {
            if let Err(e) = shard.stop().await {
                eprintln!("chaos: stopping redis-server on {}: {e:#}", shard.port);
            }
        }
        if let Some(rabbit) = &self.rabbit {
            if port_open(rabbit.port).await
                && let Err(e) = rabbit.stop().await
            {
                eprintln!("chaos: stopping the private RabbitMQ: {e:#}");
            }
            Rabbit::kill_from_pid_file(&rabbit.dir);
        }
        if let Some(pg) = &self.pg
            && let Err(e) = pg.stop().await
        {
            eprintln!("chaos: stopping the private PostgreSQL: {e:#}");
        }
        if let Some(r) = &mut self.replicated {
            tokio::join!(r.redis.stop(), r.rabbit.stop(), r.pg.stop());
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            eprintln!("chaos: removing {}: {e}", self.dir.display());
        }
    }
}

/// Stops the services of run directories under `work_dir` whose owner
/// process is gone, and removes them.
pub async fn reap_stale(work_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(work_dir) else { return };
    for entry in entries.flatten() {
        let dir = entry.path();
        if !dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("run-")) {
            continue;
        }
        if read_pid(&dir.join("owner.pid")).is_some_and(|pid| pid_runs(pid, "cronshard-loadtest")) {
            continue;
        }
        eprintln!("chaos: cleaning up {} (its run is gone)", dir.display());
        let stack = std::fs::read_to_string(dir.join("stack.pids")).unwrap_or_default();
        for pid in stack.lines().filter_map(|l| l.trim().parse().ok()) {
            if ["cronshard-api", "cronshard-scheduler", "cronshard-worker"].iter().any(|b| pid_runs(pid, b)) {
                kill9(pid);
            }
        }
        reap_services(&dir).await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// Kills or stops what runs of a run directory's services: the pid files
/// `redis-*.pid` (shards, replicated nodes, Sentinels), the RabbitMQ nodes
/// of `rabbitmq*/` and the Postgres servers of `pg*/`.
async fn reap_services(dir: &Path) {
    for f in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let (path, name) = (f.path(), f.file_name().to_string_lossy().into_owned());
        if name.starts_with("redis-")
            && name.ends_with(".pid")
            && let Some(pid) = read_pid(&path)
            && pid_runs(pid, "redis-server")
        {
            kill9(pid);
        } else if path.is_dir() && name.starts_with("rabbitmq") {
            Rabbit::kill_from_pid_file(&path);
        } else if path.is_dir() && name.starts_with("pg") && Pg::postmaster_in(&path).is_some() {
            let _ = Pg::stop_dir(&path).await;
        }
    }
}
