//! Clock discipline with real processes whose wall clocks are skewed by
//! libfaketime (monotonic time left real, as a misset system clock would
//! be): deliveries are never early, a node beyond the offset limit leaves
//! the cluster while its jobs are fired exactly once by the others, and it
//! rejoins once its clock is back.
//!
//! Needs libfaketime (`deploy/scripts/services.sh ensure faketime`).

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;

use domain::execution::truncate_ms;
use support::{
    ProcEnv, Sink, Stack, assert_ticks_delivered_once, create_ticking_jobs, free_addr, libfaketime, metric_value,
};
use testing::wait_for;

/// How early a delivery may reach the receiver: never. The corrected clock
/// never runs ahead of the database's, which is this machine's real clock
/// and the one the sink stamps arrivals with.
const EARLY_BOUND: TimeDelta = TimeDelta::zero();

/// A process of `env` whose wall clock is shifted by the offset written in
/// `skew_file` (libfaketime syntax, "+2" = 2 s fast), re-read every second
/// so that a test can set the clock right while the process runs.
fn skewed(env: &ProcEnv, bin: &str, skew_file: &std::path::Path, metrics: &str) -> tokio::process::Command {
    let mut c = env.command(bin);
    c.env("LD_PRELOAD", libfaketime())
        .env("FAKETIME_TIMESTAMP_FILE", skew_file)
        .env("FAKETIME_CACHE_DURATION", "1")
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("METRICS_ADDR", metrics)
        .env("CLOCK_CHECK_INTERVAL_MS", "500");
    c
}

async fn cluster_nodes(stack: &Stack) -> Option<Vec<String>> {
    let c: Value = stack.http.get(format!("{}/v1/cluster", stack.api)).send().await.ok()?.json().await.ok()?;
    let mut nodes: Vec<String> =
        c["nodes"].as_array()?.iter().filter_map(|n| n["node_id"].as_str().map(str::to_owned)).collect();
    nodes.sort();
    Some(nodes)
}

fn write_skew(path: &std::path::Path, skew: &str) {
    std::fs::write(path, format!("{skew}\n")).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skewed_clocks_deliver_nothing_early_and_a_node_beyond_the_limit_hands_its_jobs_over() {
    let sink = Sink::start().await;
    let stack = Stack::start("clock-skew").await;
    let env = stack.proc_env();
    let dir = std::env::temp_dir().join(&stack.cluster);
    std::fs::create_dir_all(&dir).unwrap();
    let (fast_file, slow_file, worker_file) = (dir.join("fast"), dir.join("slow"), dir.join("worker"));
    write_skew(&fast_file, "+2");
    write_skew(&slow_file, "-2");
    write_skew(&worker_file, "+2");
    let (fast_metrics, slow_metrics, worker_metrics) = (free_addr(), free_addr(), free_addr());

    let _node = env.scheduler("node-0");
    let _fast = skewed(&env, "cronshard-scheduler", &fast_file, &fast_metrics)
        .env("NODE_ID", "node-fast")
        .env("HEARTBEAT_INTERVAL_MS", "1000")
        .spawn()
        .unwrap();
    let _slow = skewed(&env, "cronshard-scheduler", &slow_file, &slow_metrics)
        .env("NODE_ID", "node-slow")
        .env("HEARTBEAT_INTERVAL_MS", "1000")
        .spawn()
        .unwrap();
    // The only worker runs 2 s fast: uncorrected, it would hand every
    // pre-armed slot to the receiver up to 2 s before its instant.
    let _worker = skewed(&env, "cronshard-worker", &worker_file, &worker_metrics)
        .env("WORKER_ID", "worker-fast")
        .env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8")
        .spawn()
        .unwrap();

    // Each skewed process measures its offset, and the nodes beyond the
    // 1 s limit say so.
    for (addr, expected_offset, expected_in_bounds) in
        [(&fast_metrics, 2.0, 0.0), (&slow_metrics, -2.0, 0.0), (&worker_metrics, 2.0, 0.0)]
    {
        wait_for(&format!("{addr} to measure its clock"), Duration::from_secs(30), || async {
            let offset = metric_value(&stack.http, addr, "cronshard_clock_offset_seconds").await?;
            let in_bounds = metric_value(&stack.http, addr, "cronshard_clock_in_bounds").await?;
            ((offset - expected_offset).abs() < 0.05 && in_bounds == expected_in_bounds).then_some(())
        })
        .await;
    }
    wait_for("node-0 to be live", Duration::from_secs(30), || async {
        (cluster_nodes(&stack).await? == ["node-0"]).then_some(())
    })
    .await;

    let start = truncate_ms(Utc::now() + TimeDelta::seconds(4));
    let jobs = create_ticking_jobs(&stack, &sink, 60, start).await;
    let window_end = start + TimeDelta::seconds(6);
    let in_window = assert_ticks_delivered_once(&sink, &jobs, start, window_end).await;
    // Neither skewed node joined while the slots fired.
    assert_eq!(cluster_nodes(&stack).await.unwrap(), ["node-0"]);
    let earliest =
        in_window.iter().map(|r| r.received_at - r.scheduled_at.parse::<DateTime<Utc>>().unwrap()).min().unwrap();
    assert!(
        earliest >= -EARLY_BOUND,
        "a delivery reached the receiver {} ms before its slot",
        -earliest.num_milliseconds()
    );

    // Set the fast node's clock right: it rejoins, and owns jobs again.
    write_skew(&fast_file, "+0");
    wait_for("node-fast to rejoin", Duration::from_secs(30), || async {
        (cluster_nodes(&stack).await? == ["node-0", "node-fast"]).then_some(())
    })
    .await;
    wait_for("node-fast to own jobs", Duration::from_secs(30), || async {
        (metric_value(&stack.http, &fast_metrics, "cronshard_owned_jobs").await? > 0.0).then_some(())
    })
    .await;
    let rejoined_at = truncate_ms(Utc::now() + TimeDelta::seconds(1));
    let until = rejoined_at + TimeDelta::seconds(4);
    // Every slot from the first to past the rejoin, exactly once, none early.
    let all = assert_ticks_delivered_once(&sink, &jobs, start, until).await;
    let earliest = all.iter().map(|r| r.received_at - r.scheduled_at.parse::<DateTime<Utc>>().unwrap()).min().unwrap();
    assert!(earliest >= -EARLY_BOUND, "a delivery was {} ms early", -earliest.num_milliseconds());
    stack.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
