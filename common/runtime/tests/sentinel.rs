//! A shard found through Redis Sentinel, with real redis-server processes:
//! a primary, a replica and a Sentinel on free loopback ports. The pool
//! follows the primary through a failover the Sentinel runs while the old
//! primary stays up (demoted to a replica: its connections answer pings but
//! refuse writes) and through the loss of the new primary's process.
#![cfg(feature = "redis")]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis::AsyncCommands;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Server {
    port: u16,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis_server(dir: &Path, args: &[String]) -> Server {
    let port = free_port();
    let child = Command::new("redis-server")
        .args(args)
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server (deploy/scripts/services.sh installs it)");
    Server { port, child }
}

async fn query(port: u16, cmd: &redis::Cmd) -> redis::RedisResult<redis::Value> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    cmd.query_async(&mut conn).await
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The port the Sentinel names as the primary of `shard`.
async fn primary_port(sentinel: u16) -> Option<u16> {
    let v = query(sentinel, redis::cmd("SENTINEL").arg("get-master-addr-by-name").arg("shard")).await.ok()?;
    let (_, port): (String, String) = redis::from_redis_value(v).ok()?;
    port.parse().ok()
}

/// `role` of the server on `port` ("master" or "slave").
async fn role(port: u16) -> Option<String> {
    let v = query(port, &redis::cmd("ROLE")).await.ok()?;
    match v {
        redis::Value::Array(items) => items.first().and_then(|r| redis::from_redis_value::<String>(r.clone()).ok()),
        _ => None,
    }
}

fn temp_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("cronshard-{label}-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn a_sentinel_shard_follows_its_primary_through_a_demotion_and_a_crash() {
    let dir = temp_dir("sentinel");
    let first = redis_server(&dir, &[]);
    let second = redis_server(&dir, &["--replicaof".into(), "127.0.0.1".into(), first.port.to_string()]);
    let sentinel_port = free_port();
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {sentinel_port}\nbind 127.0.0.1\ndir {}\nsentinel resolve-hostnames no\n\
             sentinel monitor shard 127.0.0.1 {} 1\nsentinel down-after-milliseconds shard 1000\n\
             sentinel failover-timeout shard 4000\n",
            dir.display(),
            first.port
        ),
    )
    .unwrap();
    let sentinel = Server {
        port: sentinel_port,
        child: Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server --sentinel"),
    };
    wait_until("the Sentinel to know the replica", || async {
        let replicas = query(sentinel.port, redis::cmd("SENTINEL").arg("replicas").arg("shard")).await;
        matches!(replicas, Ok(redis::Value::Array(r)) if !r.is_empty())
    })
    .await;

    // The first Sentinel address is dead: the pool asks the next one.
    let url = format!("redis-sentinel://127.0.0.1:{},127.0.0.1:{}/shard", free_port(), sentinel.port);
    let shards = runtime::redis::shard_urls(&[url.clone(), "redis://127.0.0.1:1".into()]);
    assert_eq!(shards, vec![url.clone(), "redis://127.0.0.1:1".to_owned()], "a Sentinel URL is one shard");
    let pool = runtime::redis::pools(std::slice::from_ref(&url)).unwrap().remove(0);

    // Until the Sentinel has checked the primary once, it may not name it yet.
    wait_until("a first write through the Sentinel's primary", || async {
        match pool.get().await {
            Ok(mut c) => c.set::<_, _, ()>("k", "before").await.is_ok(),
            Err(_) => false,
        }
    })
    .await;

    // A failover while the old primary stays up: it becomes a replica. The
    // pooled connection to it still answers a ping; it must not be handed out.
    // Refused (NOGOODSLAVE) until the Sentinel has seen the replica's link up.
    wait_until("the Sentinel to accept a failover", || async {
        query(sentinel.port, redis::cmd("SENTINEL").arg("failover").arg("shard")).await.is_ok()
    })
    .await;
    wait_until("the Sentinel to name the replica the primary", || async {
        primary_port(sentinel.port).await == Some(second.port)
    })
    .await;
    wait_until("the old primary to be demoted", || async { role(first.port).await.as_deref() == Some("slave") }).await;
    wait_until("the new primary to accept writes", || async { role(second.port).await.as_deref() == Some("master") })
        .await;
    let mut conn = pool.get().await.expect("a connection to the new primary");
    let _: () = conn.set("k", "after-demotion").await.expect("a write after the demotion");
    drop(conn);
    let on_new: Option<String> =
        redis::from_redis_value(query(second.port, redis::cmd("GET").arg("k")).await.unwrap()).unwrap();
    assert_eq!(on_new.as_deref(), Some("after-demotion"), "the write went to the new primary");

    // The new primary's process dies: the Sentinel promotes the old one back.
    let second_port = second.port;
    drop(second);
    wait_until("the Sentinel to promote the first server again", || async {
        primary_port(sentinel.port).await == Some(first.port)
    })
    .await;
    wait_until("a write through the pool after the crash", || async {
        match pool.get().await {
            Ok(mut c) => c.set::<_, _, ()>("k", "after-crash").await.is_ok(),
            Err(_) => false,
        }
    })
    .await;
    assert_eq!(role(first.port).await.as_deref(), Some("master"));
    assert!(role(second_port).await.is_none(), "the crashed server is gone");

    // Demoted without the Sentinel (an operator's REPLICAOF): the pooled
    // connection is not closed and still answers a ping. It must not be
    // handed out, nor a new one to a server that is no longer the primary.
    let elsewhere = redis_server(&dir, &[]);
    let _: redis::Value =
        query(first.port, redis::cmd("REPLICAOF").arg("127.0.0.1").arg(elsewhere.port)).await.unwrap();
    assert_eq!(role(first.port).await.as_deref(), Some("slave"));
    assert!(pool.get().await.is_err(), "a connection to a demoted server was handed out");
    drop(sentinel);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn sentinel_urls_are_checked_and_shards_split_where_a_scheme_starts() {
    let s = |v: &[&str]| runtime::redis::shard_urls(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    assert_eq!(s(&["redis://a:1", "redis://b:2"]), vec!["redis://a:1", "redis://b:2"]);
    // clap splits REDIS_URLS on commas: the pieces are put back together.
    assert_eq!(
        s(&["redis-sentinel://a:1", "b:2", "c:3/shard-0", "redis-sentinel://d:4", "e:5/shard-1"]),
        vec!["redis-sentinel://a:1,b:2,c:3/shard-0", "redis-sentinel://d:4,e:5/shard-1"]
    );
    for (bad, names) in [
        ("redis-sentinel://a:1,b:2", "master name"),
        ("redis-sentinel://a:1,b:2/", "master name"),
        ("redis-sentinel://a:1,b/shard", "host:port"),
        ("redis-sentinel://a:1/shard/0/x", "/<master name>[/<db>]"),
    ] {
        let e = runtime::redis::pools(&[bad.to_owned()]).err().map(|e| format!("{e:#}")).unwrap_or_default();
        assert!(e.contains(names), "{bad}: {e}");
    }
    // Credentials never show in an error.
    let e = runtime::redis::pools(&["redis-sentinel://user:hunter2@a:1,b/shard".to_owned()]).err().unwrap();
    assert!(!format!("{e:#}").contains("hunter2"), "{e:#}");
    assert!(runtime::redis::pools(&["redis-sentinel://user:pw@127.0.0.1:1,127.0.0.1:2/shard/3".to_owned()]).is_ok());
}
