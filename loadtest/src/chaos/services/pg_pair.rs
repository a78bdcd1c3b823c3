//! A Postgres primary and a streaming standby (`pg_basebackup -R` from the
//! primary, through a replication slot), asynchronous or synchronous
//! (`synchronous_standby_names = '*'`, `synchronous_commit = on`: a commit
//! returns once the standby has flushed it). The product reaches whichever
//! takes writes through a multi-host URL with
//! `target_session_attrs=read-write` ([`PgPair::url`]).
//!
//! While the primary is alone (its standby promoted away, or not yet back)
//! it does not wait for a standby: a promotion clears
//! `synchronous_standby_names` on the new primary and a rejoin sets it
//! again, as HA managers do, since commits would otherwise hang until a
//! standby came back.

use std::fmt;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;

use super::{Pg, free_port};

/// A WAL position (`16/B374D848`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lsn(pub u64);

impl std::str::FromStr for Lsn {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (hi, lo) = s.split_once('/').with_context(|| format!("not an LSN: {s}"))?;
        Ok(Lsn((u64::from_str_radix(hi, 16)? << 32) | u64::from_str_radix(lo, 16)?))
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// Where the primary's WAL and the standby's copy of it stand.
#[derive(Clone, Copy, Debug)]
pub struct PgLsns {
    /// `pg_current_wal_lsn()` on the primary.
    pub primary: Lsn,
    /// `pg_last_wal_receive_lsn()` on the standby: on its disk.
    pub standby_received: Lsn,
    /// `pg_last_wal_replay_lsn()` on the standby: visible there.
    pub standby_replayed: Lsn,
}

impl PgLsns {
    /// WAL the standby would lose if the primary died now.
    pub fn unreceived_bytes(&self) -> u64 {
        self.primary.0.saturating_sub(self.standby_received.0)
    }

    pub fn replay_lag_bytes(&self) -> u64 {
        self.primary.0.saturating_sub(self.standby_replayed.0)
    }
}

/// A primary killed by [`PgPair::kill_primary`].
#[derive(Clone, Copy, Debug)]
pub struct PgKill {
    pub port: u16,
    pub at: Instant,
    /// The positions just before the kill (`None`: they could not be read).
    pub before: Option<PgLsns>,
}

/// The standby's promotion after a kill.
#[derive(Clone, Copy, Debug)]
pub struct PgPromotion {
    pub port: u16,
    /// `pg_ctl promote -w` alone.
    pub promote: Duration,
    /// From the kill to the new primary taking writes.
    pub since_kill: Duration,
    /// The standby's last received and replayed positions: all it had.
    pub received: Lsn,
    pub replayed: Lsn,
    /// WAL the old primary had written before the kill that the standby
    /// never received (at least this much was lost; asynchronous only, a
    /// synchronous commit is always on the standby before it returns).
    pub lost_bytes: Option<u64>,
}

/// A primary and its standby.
pub struct PgPair {
    /// The two servers; [`Self::primary`] is the one that takes writes.
    pub nodes: [Pg; 2],
    /// Commits wait for the standby's flush.
    pub sync: bool,
    primary: usize,
    /// The other node streams from the primary (false from a promotion
    /// until [`Self::rejoin_old_primary`]).
    standby_attached: bool,
}

/// The replication slot on the primary for node `i` as a standby.
fn slot(i: usize) -> String {
    format!("standby_{i}")
}

async fn query_lsns(client: &tokio_postgres::Client, sql: &str) -> anyhow::Result<Vec<Option<Lsn>>> {
    let row = client.query_one(sql, &[]).await?;
    (0..row.len()).map(|i| row.get::<_, Option<String>>(i).map(|s| s.parse()).transpose()).collect()
}

impl PgPair {
    /// Picks the ports; [`Self::start_all`] starts the servers.
    pub fn new(run_dir: &Path, sync: bool) -> anyhow::Result<Self> {
        let node =
            |i: usize| -> anyhow::Result<Pg> { Ok(Pg { port: free_port()?, dir: run_dir.join(format!("pg-{i}")) }) };
        Ok(Self { nodes: [node(0)?, node(1)?], sync, primary: 0, standby_attached: false })
    }

    /// New and started (stopped again when the start fails).
    pub async fn start(run_dir: &Path, sync: bool) -> anyhow::Result<Self> {
        let mut pair = Self::new(run_dir, sync)?;
        if let Err(e) = pair.start_all().await {
            pair.stop().await;
            return Err(e);
        }
        Ok(pair)
    }

    /// initdb and start of the primary, base backup and start of the
    /// standby; returns once the standby streams.
    pub async fn start_all(&mut self) -> anyhow::Result<()> {
        let [primary, standby] = &self.nodes;
        primary.init().await?;
        let mut conf = String::from(
            "\n# The chaos scenario's replicated topology.\nwal_level = replica\nmax_wal_senders = 10\n\
             max_replication_slots = 10\nhot_standby = on\n\
             # Positions reported every second, not every 10 s: the lag figures stay fresh.\n\
             wal_receiver_status_interval = 1s\n",
        );
        if self.sync {
            conf.push_str("synchronous_commit = on\nsynchronous_standby_names = '*'\n");
        }
        primary.append_conf(&conf)?;
        primary.start().await?;
        standby.base_backup_from(primary, &slot(1)).await?;
        standby.start().await?;
        self.wait_streaming().await?;
        self.standby_attached = true;
        Ok(())
    }

    /// The server that takes writes (or did until it was killed).
    pub fn primary(&self) -> &Pg {
        &self.nodes[self.primary]
    }

    /// The server streaming from the primary, if one does.
    pub fn standby(&self) -> Option<&Pg> {
        self.standby_attached.then(|| &self.nodes[1 - self.primary])
    }

    /// The product's URL of database `db`: both servers, the session on
    /// the one that takes writes.
    pub fn url(&self, db: &str) -> String {
        let [a, b] = &self.nodes;
        format!("postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write", a.port, b.port)
    }

    pub fn admin_url(&self) -> String {
        self.url("postgres")
    }

    /// The primary's and the standby's WAL positions now.
    pub async fn lsns(&self) -> anyhow::Result<PgLsns> {
        let standby = self.standby().context("no standby streams from the primary")?;
        let (standby, primary) = (standby.connect().await?, self.primary().connect().await?);
        // The standby first: the primary's position, read after, is not behind it.
        let s = query_lsns(&standby, "SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text").await?;
        let p = query_lsns(&primary, "SELECT pg_current_wal_lsn()::text").await?;
        let (Some(primary), Some(received), Some(replayed)) = (p[0], s[0], s[1]) else {
            anyhow::bail!("no WAL position yet: primary {p:?}, standby {s:?}")
        };
        Ok(PgLsns { primary, standby_received: received, standby_replayed: replayed })
    }

    /// Waits until the primary's `pg_stat_replication` shows its standby streaming.
    async fn wait_streaming(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let streaming = async {
                let row = self
                    .primary()
                    .connect()
                    .await?
                    .query_one("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'", &[])
                    .await?;
                anyhow::Ok(row.get::<_, i64>(0) > 0)
            };
            if streaming.await.unwrap_or(false) {
                return Ok(());
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the standby does not stream from the primary on {} after 30 s (logs in {})",
                self.primary().port,
                self.nodes[1 - self.primary].dir.display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Notes the positions, then SIGKILL of the primary's every process
    /// ([`Pg::kill`]: the postmaster and its children at once).
    pub async fn kill_primary(&mut self) -> anyhow::Result<PgKill> {
        let before = match tokio::time::timeout(Duration::from_secs(2), self.lsns()).await {
            Ok(Ok(lsns)) => Some(lsns),
            _ => None,
        };
        self.primary().kill().await?;
        Ok(PgKill { port: self.primary().port, at: Instant::now(), before })
    }

    /// `pg_ctl promote` of the standby once the primary is dead (refused
    /// while it runs: two primaries). `kill`: the kill it follows, for the
    /// timing and the loss.
    pub async fn promote_standby(&mut self, kill: Option<&PgKill>) -> anyhow::Result<PgPromotion> {
        let standby = self.standby().context("no standby to promote")?;
        anyhow::ensure!(
            self.primary().postmaster_pid().is_none(),
            "the primary on {} runs: promoting its standby would make two primaries",
            self.primary().port
        );
        let s = query_lsns(
            &standby.connect().await?,
            "SELECT pg_last_wal_receive_lsn()::text, pg_last_wal_replay_lsn()::text",
        )
        .await?;
        let (Some(received), Some(replayed)) = (s[0], s[1]) else { anyhow::bail!("the standby has no WAL position") };
        let t = Instant::now();
        standby.promote().await?;
        let promote = t.elapsed();
        if self.sync {
            let client = standby.connect().await?;
            // Two statements: ALTER SYSTEM refuses a (multi-statement) transaction.
            client.batch_execute("ALTER SYSTEM SET synchronous_standby_names = ''").await?;
            client.batch_execute("SELECT pg_reload_conf()").await?;
        }
        let since_kill = kill.map_or(promote, |k| k.at.elapsed());
        let port = standby.port;
        self.primary = 1 - self.primary;
        self.standby_attached = false;
        Ok(PgPromotion {
            port,
            promote,
            since_kill,
            received,
            replayed,
            lost_bytes: kill.and_then(|k| k.before).map(|b| b.primary.0.saturating_sub(received.0)),
        })
    }

    /// The old primary back as the new primary's standby: its data thrown
    /// away, a fresh base backup (whatever it had that the new primary has
    /// not is gone anyway), started, streaming. Returns the time it took.
    pub async fn rejoin_old_primary(&mut self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        anyhow::ensure!(!self.standby_attached, "the standby streams already");
        let old = 1 - self.primary;
        let (primary, node) = (&self.nodes[self.primary], &self.nodes[old]);
        anyhow::ensure!(node.postmaster_pid().is_none(), "the old primary on {} runs", node.port);
        let client = primary.connect().await?;
        client
            .execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot(old)],
            )
            .await?;
        node.base_backup_from(primary, &slot(old)).await?;
        node.start().await?;
        self.wait_streaming().await?;
        if self.sync {
            client.batch_execute("ALTER SYSTEM RESET synchronous_standby_names").await?;
            client.batch_execute("SELECT pg_reload_conf()").await?;
        }
        self.standby_attached = true;
        Ok(t.elapsed())
    }

    /// `pg_ctl stop -m immediate` of what runs.
    pub async fn stop(&mut self) {
        for pg in &self.nodes {
            if let Err(e) = pg.stop().await {
                eprintln!("chaos: stopping Postgres on {}: {e:#}", pg.port);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_round_trip() {
        let lsn: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(lsn.0, (0x16 << 32) | 0xB374D848);
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn(0));
    }
}
