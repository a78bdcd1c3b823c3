//! A RabbitMQ cluster on this host: nodes set up as the single private node
//! is ([`Rabbit`]: node name, ports, database, logs, home of their own),
//! sharing one Erlang cookie, joined to the first with `rabbitmqctl
//! stop_app; join_cluster; start_app`. Quorum queues (`AMQP_QUEUE_TYPE=quorum`)
//! keep a member on each node and survive the loss of one.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use super::{Rabbit, free_dist_port, free_port};

pub struct RabbitCluster {
    pub nodes: Vec<Rabbit>,
    cookie: String,
}

impl RabbitCluster {
    /// Picks the names and ports of `n` nodes; [`Self::start_all`] starts them.
    pub fn new(run_dir: &Path, id: &str, n: usize) -> anyhow::Result<Self> {
        let nodes = (0..n)
            .map(|i| {
                Ok(Rabbit {
                    node: format!("chaos-{id}-{i}@localhost"),
                    port: free_port()?,
                    dist_port: free_dist_port()?,
                    dir: run_dir.join(format!("rabbitmq-{i}")),
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { nodes, cookie: uuid::Uuid::new_v4().simple().to_string().to_uppercase() })
    }

    /// New and started (stopped again when the start fails).
    pub async fn start(run_dir: &Path, id: &str, n: usize) -> anyhow::Result<Self> {
        let mut cluster = Self::new(run_dir, id, n)?;
        if let Err(e) = cluster.start_all().await {
            cluster.stop().await;
            return Err(e);
        }
        Ok(cluster)
    }

    /// Boots every node side by side, then joins the others to the first.
    pub async fn start_all(&mut self) -> anyhow::Result<()> {
        for n in &self.nodes {
            n.prepare(Some(&self.cookie))?;
        }
        futures::future::try_join_all(self.nodes.iter().map(Rabbit::start)).await?;
        let Some((first, others)) = self.nodes.split_first() else { return Ok(()) };
        // One at a time: two joins at once can race in the cluster's schema.
        for n in others {
            n.ctl(&["stop_app"]).await?;
            n.ctl(&["join_cluster", &first.node]).await?;
            n.ctl(&["start_app"]).await?;
        }
        self.wait_running(0, self.nodes.len(), Duration::from_secs(60)).await
    }

    pub fn amqp_url(&self, i: usize) -> String {
        self.nodes[i].amqp_url()
    }

    /// Every node's URL separated by commas (`AMQP_URL`).
    pub fn amqp_urls(&self) -> String {
        self.nodes.iter().map(Rabbit::amqp_url).collect::<Vec<_>>().join(",")
    }

    /// The nodes node `via` sees running in its cluster.
    pub async fn running_nodes(&self, via: usize) -> anyhow::Result<Vec<String>> {
        let out = self.nodes[via].ctl(&["-q", "cluster_status", "--formatter", "json"]).await?;
        let status: serde_json::Value =
            serde_json::from_str(out.trim()).with_context(|| format!("cluster_status: {out}"))?;
        Ok(status["running_nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|n| Some(n.as_str()?.to_owned()))
            .collect())
    }

    /// Waits until node `via` sees `count` nodes running.
    async fn wait_running(&self, via: usize, count: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let running = self.running_nodes(via).await;
            if running.as_ref().is_ok_and(|r| r.len() >= count) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} does not see {count} nodes running after {timeout:?}: {running:?}",
                self.nodes[via].node
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGKILL of node `i`'s Erlang VM: its peers see it go at once (the
    /// distribution connections close).
    pub async fn kill(&self, i: usize) -> anyhow::Result<()> {
        self.nodes[i].kill().await
    }

    /// Starts node `i` again on its database and waits until the others
    /// see it running in the cluster; returns the time it took.
    pub async fn restart(&self, i: usize) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.nodes[i].start().await?;
        let via = (i + 1) % self.nodes.len();
        self.wait_running(via, self.nodes.len(), Duration::from_secs(60)).await?;
        Ok(t.elapsed())
    }

    /// `rabbitmqctl stop` of every running node side by side (SIGKILL of
    /// one that would not).
    pub async fn stop(&mut self) {
        let stops = self.nodes.iter().filter(|n| n.pid().is_some()).map(|n| async move {
            if let Err(e) = n.stop().await {
                eprintln!("chaos: stopping RabbitMQ node {}: {e:#}", n.node);
            }
            Rabbit::kill_from_pid_file(&n.dir);
        });
        futures::future::join_all(stops).await;
    }
}
