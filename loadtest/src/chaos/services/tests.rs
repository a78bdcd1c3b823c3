//! The replicated services against real redis-server, Sentinel, Postgres
//! and RabbitMQ (deploy/scripts/services.sh ensure replicated): a write
//! acknowledged by the replicas survives the kill of each primary, and
//! nothing is left running afterwards.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use lapin::options::{BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use tokio::time::Instant;

use super::resp::{self, Resp};
use super::*;

fn test_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("cronshard-services-{what}-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// None of `pids` runs, no process names `dir`.
fn assert_nothing_left(pids: &[u32], dir: &Path) {
    assert!(!pids.is_empty());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| alive(*p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<_> = pids.iter().filter(|p| alive(**p)).collect();
    assert!(left.is_empty(), "processes left: {left:?}");
    let pgrep = std::process::Command::new("pgrep").arg("-af").arg(dir).output().unwrap();
    let found = String::from_utf8_lossy(&pgrep.stdout);
    assert!(found.trim().is_empty(), "processes naming {}: {found}", dir.display());
}

/// SET, acknowledged by the replica (`WAIT 1`), kill of the primary, the
/// key on the new primary, the old one back as a replica with the key.
async fn redis_failover(redis: &mut ReplicatedRedis, shard: usize) -> anyhow::Result<RedisFailover> {
    let value = format!("value of shard {shard}");
    let primary = redis.primary(shard).await?;
    resp::command(primary, &["SET", "chaos:key", &value]).await?;
    let acked = resp::command(primary, &["WAIT", "1", "5000"]).await?;
    anyhow::ensure!(acked == Resp::Int(1), "WAIT: {acked:?}");
    let kill = redis.kill_primary(shard).await?;
    let failover = redis.wait_new_primary(&kill, Duration::from_secs(30)).await?;
    let kept = resp::command(failover.new, &["GET", "chaos:key"]).await?;
    anyhow::ensure!(kept.text() == Some(value.as_str()), "shard {shard}: the new primary has {kept:?}");
    let rejoin = redis.rejoin(&kill).await?;
    let copy = resp::command(kill.port, &["GET", "chaos:key"]).await?;
    anyhow::ensure!(copy.text() == Some(value.as_str()), "shard {shard}: the rejoined node has {copy:?}");
    let role = resp::command(kill.port, &["ROLE"]).await?;
    anyhow::ensure!(role.items().first().and_then(Resp::text) == Some("slave"), "rejoined as {role:?}");
    eprintln!(
        "redis shard {shard}: primary {} killed, {} named by a Sentinel after {} ms, by all after {} ms; \
         the old one back as a replica in {} ms",
        failover.old,
        failover.new,
        failover.first_reported.as_millis(),
        failover.agreed.as_millis(),
        rejoin.as_millis()
    );
    Ok(failover)
}

#[tokio::test]
async fn redis_sentinel_failover_keeps_acknowledged_writes() {
    let dir = test_dir("redis");
    let t = Instant::now();
    let mut redis = ReplicatedRedis::start(&dir).await.unwrap();
    eprintln!("2 shards × (primary + replica) and 3 Sentinels ready in {} ms", t.elapsed().as_millis());
    let result = async {
        let url = redis.url(1);
        anyhow::ensure!(
            url.starts_with("redis-sentinel://127.0.0.1:")
                && url.ends_with("/shard-1")
                && url.matches(',').count() == 2,
            "{url}"
        );
        // The product reads the URLs (one per shard) and reaches each primary through the Sentinels.
        let urls = redis.urls();
        anyhow::ensure!(runtime::redis::shard_urls(std::slice::from_ref(&urls)) == [redis.url(0), redis.url(1)]);
        let pools = runtime::redis::pools(&[urls])?;
        for pool in &pools {
            drop(pool.get().await?);
        }
        for shard in 0..2 {
            redis_failover(&mut redis, shard).await?;
        }
        // The product's pool follows the failover to the new primary.
        let deadline = Instant::now() + Duration::from_secs(10);
        while let Err(e) = pools[0].get().await {
            anyhow::ensure!(Instant::now() < deadline, "the product's pool after the failover: {e:#}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The rejoined node is a full member: it is promoted at the next kill.
        let again = redis_failover(&mut redis, 0).await?;
        anyhow::ensure!(again.new == redis.shards[0][0].port, "{again:?}");
        Ok(())
    }
    .await;
    let pids = redis.pids();
    assert_eq!(pids.len(), 7);
    redis.stop().await;
    assert_nothing_left(&pids, &dir);
    result.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

async fn pg_failover(sync: bool) -> anyhow::Result<()> {
    let dir = test_dir(if sync { "pg-sync" } else { "pg-async" });
    let t = Instant::now();
    let mut pair = PgPair::start(&dir, sync).await?;
    eprintln!(
        "postgres primary + {} standby ready in {} ms",
        if sync { "sync" } else { "async" },
        t.elapsed().as_millis()
    );
    let result = async {
        let (client, connection) = tokio_postgres::connect(&pair.admin_url(), tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        client.batch_execute("CREATE TABLE kept (id bigint PRIMARY KEY, at timestamptz DEFAULT now())").await?;
        client.execute("INSERT INTO kept (id) VALUES (1)", &[]).await?;
        // Writes in flight at the kill: a share of them is lost when asynchronous.
        let writer = tokio::spawn(async move {
            let mut committed = 1i64;
            while client.execute("INSERT INTO kept (id) VALUES ($1)", &[&(committed + 1)]).await.is_ok() {
                committed += 1;
            }
            committed
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        let kill = pair.kill_primary().await?;
        let committed = writer.await?;
        let promotion = pair.promote_standby(Some(&kill)).await?;
        let before = kill.before.context("no positions before the kill")?;
        // The multi-host URL finds the promoted server.
        let (client, connection) = tokio_postgres::connect(&pair.admin_url(), tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let kept: i64 = client.query_one("SELECT count(*) FROM kept", &[]).await?.get(0);
        let port: i32 = client.query_one("SELECT inet_server_port()", &[]).await?.get(0);
        anyhow::ensure!(port == i32::from(promotion.port), "the URL reached {port}");
        eprintln!(
            "postgres ({}): before the kill primary {} standby received {} replayed {} ({} bytes unreceived); \
             promoted in {} ms ({} ms after the kill); {} bytes of WAL lost; {kept} of {committed} committed rows kept",
            if sync { "sync" } else { "async" },
            before.primary,
            before.standby_received,
            before.standby_replayed,
            before.unreceived_bytes(),
            promotion.promote.as_millis(),
            promotion.since_kill.as_millis(),
            promotion.lost_bytes.unwrap_or_default(),
        );
        if sync {
            anyhow::ensure!(kept >= committed, "synchronous: {kept} of {committed} committed rows kept");
        }
        client.execute("INSERT INTO kept (id) VALUES (-1)", &[]).await?;
        let rejoin = pair.rejoin_old_primary().await?;
        // A commit waits for the rejoined standby again when synchronous.
        client.execute("INSERT INTO kept (id) VALUES (-2)", &[]).await?;
        let standby = pair.standby().context("no standby after the rejoin")?.connect().await?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let n: i64 = standby.query_one("SELECT count(*) FROM kept WHERE id < 0", &[]).await?.get(0);
            if n == 2 {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "the rejoined standby has {n} of the 2 rows");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let lsns = pair.lsns().await?;
        eprintln!("postgres: old primary back as a standby in {} ms; now {lsns:?}", rejoin.as_millis());
        Ok(())
    }
    .await;
    let pids: Vec<u32> = pair.nodes.iter().flat_map(Pg::pids).collect();
    pair.stop().await;
    assert_nothing_left(&pids, &dir);
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

#[tokio::test]
async fn pg_synchronous_standby_keeps_every_commit() {
    pg_failover(true).await.unwrap();
}

/// Reports what was lost; on loopback the standby is rarely behind by
/// more than the last few commits, often by nothing.
#[tokio::test]
async fn pg_asynchronous_standby_failover() {
    pg_failover(false).await.unwrap();
}

/// A message confirmed on a quorum queue survives the kill of the node
/// that leads it; the node comes back into the cluster.
async fn rabbit_failover(cluster: &RabbitCluster) -> anyhow::Result<()> {
    let queue = "chaos.services-test";
    let connection = Connection::connect(&cluster.amqp_url(0), ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    // Declared through node 0: it leads the queue (client-local leader).
    channel.queue_declare(queue.into(), QueueDeclareOptions { durable: true, ..Default::default() }, args).await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    let confirm = channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            b"kept",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await?
        .await?;
    anyhow::ensure!(confirm.is_ack(), "not confirmed");
    let _ = connection.close(200, "done".into()).await;
    let t = Instant::now();
    cluster.kill(0).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let message = loop {
        // A channel is closed by a failed operation: a new one each time,
        // through the product's connect, which passes over the dead node.
        let get = async {
            let connection = broker::amqp::connect(&cluster.amqp_urls(), "chaos services test").await?;
            let channel = connection.create_channel().await?;
            let got = channel.basic_get(queue.into(), BasicGetOptions { no_ack: true }).await;
            let _ = connection.close(200, "done".into()).await;
            anyhow::Ok(got?)
        };
        // Fails, or finds nothing, until the other members elect a leader.
        let last = match get.await {
            Ok(Some(m)) => break m,
            Ok(None) => "the queue is empty".to_owned(),
            Err(e) => format!("{e:#}"),
        };
        anyhow::ensure!(Instant::now() < deadline, "the message not available through the others after 30 s: {last}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    anyhow::ensure!(message.delivery.data == b"kept");
    let available = t.elapsed();
    let back = cluster.restart(0).await?;
    eprintln!(
        "rabbitmq: node 0 killed, the confirmed message read through the others after {} ms; node 0 back in the \
         cluster in {} ms",
        available.as_millis(),
        back.as_millis()
    );
    Ok(())
}

#[tokio::test]
#[ignore = "about a minute: three RabbitMQ nodes, Postgres, Redis, each primary killed"]
async fn replicated_topology_survives_the_loss_of_each_primary() {
    let work_dir = test_dir("replicated");
    let t = Instant::now();
    let mut services = Services::start(&work_dir, "test", Topology::Replicated { pg_sync: true }).await.unwrap();
    eprintln!("replicated topology up in {} ms: {}", t.elapsed().as_millis(), services.describe());
    let result = async {
        anyhow::ensure!(services.amqp_url().split(',').count() == 3, "{}", services.amqp_url());
        anyhow::ensure!(services.redis_urls().matches("redis-sentinel://").count() == 2, "{}", services.redis_urls());
        let r = services.replicated_mut()?;
        for shard in 0..2 {
            redis_failover(&mut r.redis, shard).await?;
        }
        rabbit_failover(&r.rabbit).await?;
        let (client, connection) = tokio_postgres::connect(&r.pg.admin_url(), tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        client.batch_execute("CREATE TABLE kept (id int); INSERT INTO kept VALUES (1)").await?;
        let kill = r.pg.kill_primary().await?;
        let promotion = r.pg.promote_standby(Some(&kill)).await?;
        let (client, connection) = tokio_postgres::connect(&services.pg_admin_url(), tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        let kept: i64 = client.query_one("SELECT count(*) FROM kept", &[]).await?.get(0);
        anyhow::ensure!(kept == 1, "the committed row is gone");
        eprintln!("postgres: promoted {} ms after the kill", promotion.since_kill.as_millis());
        Ok(())
    }
    .await;
    let pids = services.pids();
    let dir = services.dir.clone();
    services.stop().await;
    assert_nothing_left(&pids, &dir);
    result.unwrap();
    let _ = std::fs::remove_dir_all(&work_dir);
}

#[tokio::test]
async fn the_reaper_stops_the_replicated_services_of_a_dead_run() {
    // A run whose owner is gone (pid 0 runs nothing of ours): its Redis
    // nodes, Sentinels and Postgres servers are stopped, the directory removed.
    let work_dir = test_dir("reaper");
    let dir = work_dir.join("run-dead");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("owner.pid"), "0").unwrap();
    let mut redis = ReplicatedRedis::start(&dir).await.unwrap();
    let pg = PgPair::start(&dir, false).await.unwrap();
    let mut pids = redis.pids();
    pids.extend(pg.nodes.iter().flat_map(Pg::pids));
    // As if this process had died: the children are no longer its to stop.
    for node in redis.shards.iter_mut().flatten() {
        std::mem::forget(node.child.take());
    }
    for s in &mut redis.sentinels {
        std::mem::forget(s.child.take());
    }
    reap_stale(&work_dir).await;
    assert!(!dir.exists());
    assert_nothing_left(&pids, &work_dir);
    let _ = std::fs::remove_dir_all(&work_dir);
}

#[tokio::test]
#[ignore = "about 15 s: a RabbitMQ node boots (deploy/chaos.sh runs this topology too)"]
async fn single_topology_starts_and_stops() {
    let work_dir = test_dir("single");
    let t = Instant::now();
    let services = Services::start(&work_dir, "single", Topology::Single).await.unwrap();
    eprintln!("single topology up in {} ms: {}", t.elapsed().as_millis(), services.describe());
    assert_eq!(services.redis_urls().matches("redis://127.0.0.1:").count(), 2);
    assert_eq!(services.amqp_url(), services.rabbit().unwrap().amqp_url());
    assert_eq!(services.pg_admin_url(), services.pg().unwrap().admin_url());
    assert!(services.replicated().is_err());
    let pids = services.pids();
    assert!(pids.len() >= 4, "{pids:?}");
    let dir = services.dir.clone();
    services.stop().await;
    assert!(!dir.exists());
    assert_nothing_left(&pids, &dir);
    let _ = std::fs::remove_dir_all(&work_dir);
}
