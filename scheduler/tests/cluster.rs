//! The cluster with real processes: several `cronshard-scheduler` and
//! `cronshard-worker` binaries on the real Postgres, Redis and RabbitMQ,
//! counting deliveries by execution id at a real HTTP receiver. Each test
//! asserts that every slot in its window arrived exactly once.

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use common::execution::{format_instant, truncate_ms};
use common::testing::wait_for;
use support::{
    ProcEnv, RedisServer, Sink, Stack, TcpProxy, assert_exactly_once, expected_executions, http_target, kill9,
};

const EVERY_MS: i64 = 1000;

async fn live_nodes(stack: &Stack) -> Option<usize> {
    let c: Value = stack.http.get(format!("{}/v1/cluster", stack.api)).send().await.ok()?.json().await.ok()?;
    c["live_nodes"].as_u64().map(|n| n as usize)
}

async fn create_interval_jobs(stack: &Stack, sink: &Sink, n: usize, start: DateTime<Utc>) -> Vec<String> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let job = stack
            .create_job(json!({
                "name": format!("job-{i}"),
                "schedule": { "kind": "interval", "every_ms": EVERY_MS, "start_at": format_instant(start) },
                "target": http_target(&sink.url("tick")),
            }))
            .await;
        ids.push(job["id"].as_str().unwrap().to_owned());
    }
    ids
}

/// Waits until the receiver has seen a slot scheduled at or after `t`.
async fn until_delivered_past(sink: &Sink, t: DateTime<Utc>, within: Duration) {
    let mark = format_instant(t);
    wait_for(&format!("a delivery scheduled at or after {mark}"), within, || async {
        sink.received().iter().any(|r| r.scheduled_at >= mark).then_some(())
    })
    .await;
}

async fn all_delivered(sink: &Sink, expected: &std::collections::BTreeSet<String>, within: Duration) {
    wait_for(&format!("all {} expected executions", expected.len()), within, || async {
        let got: std::collections::BTreeSet<String> = sink.received().into_iter().map(|r| r.execution_id).collect();
        expected.is_subset(&got).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_node_and_adding_one_neither_misses_nor_duplicates() {
    let sink = Sink::start().await;
    let stack = Stack::start("kill-add").await;
    let env =
        ProcEnv { database_url: stack.db.url.clone(), cluster: stack.cluster.clone(), redis_urls: common::testing::redis_url() };
    let mut nodes = vec![env.scheduler("node-0"), env.scheduler("node-1"), env.scheduler("node-2")];
    let _workers = [env.worker("worker-0"), env.worker("worker-1")];
    wait_for("3 live nodes", Duration::from_secs(60), || async { (live_nodes(&stack).await? == 3).then_some(()) }).await;

    let start = truncate_ms(Utc::now() + TimeDelta::seconds(6));
    let jobs = create_interval_jobs(&stack, &sink, 300, start).await;

    until_delivered_past(&sink, start + TimeDelta::seconds(6), Duration::from_secs(30)).await;
    kill9(&nodes[1]);
    until_delivered_past(&sink, start + TimeDelta::seconds(14), Duration::from_secs(30)).await;
    nodes.push(env.scheduler("node-3"));
    wait_for("node-3 to join", Duration::from_secs(60), || async {
        let c: Value = stack.http.get(format!("{}/v1/cluster", stack.api)).send().await.ok()?.json().await.ok()?;
        c["nodes"].as_array()?.iter().any(|n| n["node_id"] == "node-3").then_some(())
    })
    .await;
    let window_end = truncate_ms(Utc::now() + TimeDelta::seconds(6));
    let expected = expected_executions(&jobs, start, EVERY_MS, window_end);
    // A slot whose lock the killed node held is taken over after the verify delay.
    all_delivered(&sink, &expected, Duration::from_secs(60)).await;
    let in_window: Vec<_> = sink.received().into_iter().filter(|r| expected.contains(&r.execution_id)).collect();
    assert_exactly_once(&in_window, &expected);
    drop(nodes);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_from_redis_neither_misses_nor_duplicates() {
    let sink = Sink::start().await;
    let stack = Stack::start("cut-redis").await;
    let redis_addr = common::testing::redis_url().trim_start_matches("redis://").parse().unwrap();
    let proxy = TcpProxy::start(redis_addr).await;
    let env =
        ProcEnv { database_url: stack.db.url.clone(), cluster: stack.cluster.clone(), redis_urls: common::testing::redis_url() };
    let cut_env = ProcEnv { redis_urls: format!("redis://{}", proxy.addr), ..env.clone() };
    let _nodes = [env.scheduler("node-0"), env.scheduler("node-1"), cut_env.scheduler("node-cut")];
    let _workers = [env.worker("worker-0"), env.worker("worker-1")];
    wait_for("3 live nodes", Duration::from_secs(60), || async { (live_nodes(&stack).await? == 3).then_some(()) }).await;

    let start = truncate_ms(Utc::now() + TimeDelta::seconds(5));
    let jobs = create_interval_jobs(&stack, &sink, 100, start).await;
    until_delivered_past(&sink, start + TimeDelta::seconds(3), Duration::from_secs(30)).await;
    proxy.cut();
    // Past the 30 s heartbeat TTL the others drop the cut node and take over
    // its jobs, while it keeps firing what it owns through the ledger claim.
    wait_for("the cut node to leave the live set", Duration::from_secs(90), || async {
        (live_nodes(&stack).await? == 2).then_some(())
    })
    .await;
    until_delivered_past(&sink, Utc::now() + TimeDelta::seconds(3), Duration::from_secs(30)).await;
    proxy.restore();
    wait_for("the cut node to rejoin", Duration::from_secs(60), || async { (live_nodes(&stack).await? == 3).then_some(()) })
        .await;
    let window_end = truncate_ms(Utc::now() + TimeDelta::seconds(3));
    let expected = expected_executions(&jobs, start, EVERY_MS, window_end);
    all_delivered(&sink, &expected, Duration::from_secs(60)).await;
    let in_window: Vec<_> = sink.received().into_iter().filter(|r| expected.contains(&r.execution_id)).collect();
    assert_exactly_once(&in_window, &expected);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flushing_redis_mid_run_does_not_execute_a_slot_twice() {
    let sink = Sink::start().await;
    let stack = Stack::start("flush").await;
    let redis = RedisServer::start().await;
    let env = ProcEnv { database_url: stack.db.url.clone(), cluster: stack.cluster.clone(), redis_urls: redis.url() };
    let _nodes = [env.scheduler("node-0"), env.scheduler("node-1"), env.scheduler("node-2")];
    let _workers = [env.worker("worker-0"), env.worker("worker-1")];
    // The API reads cluster state from the shared Redis; wait on the private one.
    let pools = common::redis::pools(&[redis.url()]).unwrap();
    let members = || async {
        let mut conn = pools[0].get().await.ok()?;
        let keys: Vec<String> = redis::AsyncCommands::keys(&mut *conn, format!("{}:node:*", env.cluster)).await.ok()?;
        // A private server: KEYS is fine on its few keys.
        Some(keys.len())
    };
    wait_for("3 heartbeats", Duration::from_secs(60), || async { (members().await? == 3).then_some(()) }).await;

    let start = truncate_ms(Utc::now() + TimeDelta::seconds(5));
    let jobs = create_interval_jobs(&stack, &sink, 100, start).await;
    until_delivered_past(&sink, start + TimeDelta::seconds(3), Duration::from_secs(30)).await;
    // Every lock and heartbeat is gone: each node briefly believes it is
    // alone and owns everything; only the ledger claim stands in the way.
    let mut conn = pools[0].get().await.unwrap();
    let _: () = redis::cmd("FLUSHALL").query_async(&mut *conn).await.unwrap();
    drop(conn);
    let window_end = truncate_ms(Utc::now() + TimeDelta::seconds(8));
    let expected = expected_executions(&jobs, start, EVERY_MS, window_end);
    all_delivered(&sink, &expected, Duration::from_secs(60)).await;
    let in_window: Vec<_> = sink.received().into_iter().filter(|r| expected.contains(&r.execution_id)).collect();
    assert_exactly_once(&in_window, &expected);
    stack.stop().await;
}
