//! The `chaos` scenario's private services: two redis-server shards, a
//! RabbitMQ node and a PostgreSQL cluster, each on free loopback ports with
//! its data in the run's directory, so that restarting or stopping one never
//! touches the machine's shared services (other tests run against those).
//!
//! A run's directory (`<work dir>/run-<id>`) holds `owner.pid` (this
//! process), the pid files of the services and `stack.pids` (the stack's
//! processes, see [`Services::record_stack`]). A run that died without
//! cleaning up (SIGKILL, a crash) is cleaned by the next one: [`reap_stale`]
//! kills the stack processes and stops the services of every run directory
//! whose owner is gone, and removes the directory.

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

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
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

fn kill9(pid: u32) {
    let _ = std::process::Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
}

/// Runs a command to its end; an error carries its output.
async fn run(mut c: Command, what: &str) -> anyhow::Result<String> {
    let out = c.stdin(Stdio::null()).output().await.with_context(|| format!("{what}: could not start"))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    anyhow::ensure!(out.status.success(), "{what} failed ({}): {}", out.status, text.trim());
    Ok(text)
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
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string(), "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting redis-server (deploy/scripts/services.sh installs it)")?;
        std::fs::write(self.pid_file(), child.id().unwrap_or_default().to_string())?;
        self.child = Some(child);
        wait_port("redis-server", self.port, true, Duration::from_secs(10)).await
    }

    /// SIGKILL: gone at once, its keys with it.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.start_kill()?;
            c.wait().await?;
        }
        let _ = std::fs::remove_file(self.pid_file());
        Ok(())
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

    fn prepare(&self) -> anyhow::Result<()> {
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(self.dir.join(sub))?;
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

    fn kill_from_pid_file(dir: &Path) {
        if let Some(pid) = std::fs::read_to_string(Self::pid_file(dir)).ok().and_then(|p| p.trim().parse().ok())
            && pid_runs(pid, "beam")
        {
            kill9(pid);
        }
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

    async fn init(&self) -> anyhow::Result<()> {
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
        let mut c = Self::tool(&self.dir, "initdb");
        c.arg("-D").arg(self.data()).args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"]);
        run(c, "initdb").await?;
        Ok(())
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

/// Every private service of one run.
pub struct Services {
    pub dir: PathBuf,
    pub redis: Vec<RedisShard>,
    pub rabbit: Rabbit,
    pub pg: Pg,
}

impl Services {
    /// Creates `<work_dir>/run-<id>` and starts the services in it.
    pub async fn start(work_dir: &Path, id: &str) -> anyhow::Result<Self> {
        std::fs::create_dir_all(work_dir)?;
        let dir = work_dir.join(format!("run-{id}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("owner.pid"), std::process::id().to_string())?;
        let mut services = Self {
            redis: (0..2)
                .map(|_| Ok(RedisShard { port: free_port()?, dir: dir.clone(), child: None }))
                .collect::<anyhow::Result<_>>()?,
            rabbit: Rabbit {
                node: format!("chaos-{id}@localhost"),
                port: free_port()?,
                dist_port: free_dist_port()?,
                dir: dir.join("rabbitmq"),
            },
            pg: Pg { port: free_port()?, dir: dir.join("pg") },
            dir,
        };
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
        for shard in &mut self.redis {
            shard.start().await?;
        }
        self.rabbit.prepare()?;
        self.pg.init().await?;
        // The broker boots (several seconds of Erlang) while Postgres starts.
        let (rabbit, pg) = tokio::join!(self.rabbit.start(), self.pg.start());
        rabbit?;
        pg?;
        Ok(())
    }

    /// Notes the pids of the stack's processes for [`reap_stale`].
    pub fn record_stack(&self, pids: impl IntoIterator<Item = u32>) {
        let text: String = pids.into_iter().map(|p| format!("{p}\n")).collect();
        let _ = std::fs::write(self.dir.join("stack.pids"), text);
    }

    pub fn redis_urls(&self) -> String {
        self.redis.iter().map(RedisShard::url).collect::<Vec<_>>().join(",")
    }

    /// Stops everything and removes the run's directory; reports but
    /// survives a service that would not stop (the next run reaps it).
    pub async fn stop(mut self) {
        for shard in &mut self.redis {
            if let Err(e) = shard.stop().await {
                eprintln!("chaos: stopping redis-server on {}: {e:#}", shard.port);
            }
        }
        if port_open(self.rabbit.port).await
            && let Err(e) = self.rabbit.stop().await
        {
            eprintln!("chaos: stopping the private RabbitMQ: {e:#}");
        }
        Rabbit::kill_from_pid_file(&self.rabbit.dir);
        if self.pg.data().join("postmaster.pid").exists()
            && let Err(e) = Pg::stop_dir(&self.pg.dir).await
        {
            eprintln!("chaos: stopping the private PostgreSQL: {e:#}");
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
        let owner: Option<u32> =
            std::fs::read_to_string(dir.join("owner.pid")).ok().and_then(|p| p.trim().parse().ok());
        if owner.is_some_and(|pid| pid_runs(pid, "cronshard-loadtest")) {
            continue;
        }
        eprintln!("chaos: cleaning up {} (its run is gone)", dir.display());
        let stack = std::fs::read_to_string(dir.join("stack.pids")).unwrap_or_default();
        for pid in stack.lines().filter_map(|l| l.trim().parse().ok()) {
            if ["cronshard-api", "cronshard-scheduler", "cronshard-worker"].iter().any(|b| pid_runs(pid, b)) {
                kill9(pid);
            }
        }
        for f in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.starts_with("redis-")
                && name.ends_with(".pid")
                && let Some(pid) = std::fs::read_to_string(f.path()).ok().and_then(|p| p.trim().parse().ok())
                && pid_runs(pid, "redis-server")
            {
                kill9(pid);
            }
        }
        Rabbit::kill_from_pid_file(&dir.join("rabbitmq"));
        if dir.join("pg/data/postmaster.pid").exists() {
            let _ = Pg::stop_dir(&dir.join("pg")).await;
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
