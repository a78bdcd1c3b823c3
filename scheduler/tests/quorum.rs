//! The pipeline with `AMQP_QUEUE_TYPE=quorum`: every queue is a quorum
//! queue, slots are delivered once, a retry comes back through its retry
//! queue's dead-lettering, and a message past its retries reaches the
//! failed queue.

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use chrono::{TimeDelta, Utc};
use lapin::options::BasicGetOptions;
use serde_json::json;

use broker::amqp::{Delayed, QueueType, Topology};
use domain::execution::{format_instant, truncate_ms};
use support::{Sink, Stack, assert_ticks_delivered_once, create_ticking_jobs, http_target};
use testing::wait_for;

/// Whether the cluster's queues (and the retry queue of `retry_ms`) exist
/// as quorum queues: declaring them as such is accepted (equivalent), and
/// as classic refused.
async fn are_quorum(connection: &lapin::Connection, cluster: &str, retry_ms: Option<u64>) -> bool {
    let declare = |queue_type| async move {
        let channel = connection.create_channel().await.unwrap();
        let topology = Topology::new(cluster).with_queue_type(queue_type);
        match retry_ms {
            Some(ms) => topology.declare_delay_queue(&channel, Delayed::Retry, ms).await.map(drop),
            None => topology.declare(&channel).await,
        }
    };
    let as_quorum = declare(QueueType::Quorum).await;
    let as_classic = declare(QueueType::Classic).await;
    as_quorum.is_ok() && as_classic.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_quorum_queues_slots_retries_and_failures_travel_as_with_classic_ones() {
    let (ok_sink, flaky_sink, broken_sink) = (Sink::start().await, Sink::start().await, Sink::start().await);
    flaky_sink.fail_first(2, 503);
    broken_sink.fail_first(usize::MAX, 500);
    let mut stack = Stack::start("quorum").await;
    let mut node = stack.node_config("node-a");
    node.queue_type = QueueType::Quorum;
    stack.start_node(node);
    let mut worker = stack.worker_config("worker-a");
    worker.queue_type = QueueType::Quorum;
    stack.start_worker(worker);

    let start = truncate_ms(Utc::now() + TimeDelta::seconds(3));
    let jobs = create_ticking_jobs(&stack, &ok_sink, 20, start).await;
    let once = |name: &str, sink: &Sink, retries: u32| {
        json!({
            "name": name,
            "schedule": { "kind": "once", "at": format_instant(start) },
            "target": http_target(&sink.url(name)),
            "retry": { "max_retries": retries, "base_delay_ms": 300, "multiplier": 2.0 },
        })
    };
    let flaky = stack.create_job(once("flaky", &flaky_sink, 3)).await["id"].as_str().unwrap().to_owned();
    let broken = stack.create_job(once("broken", &broken_sink, 1)).await["id"].as_str().unwrap().to_owned();

    let connection = broker::amqp::connect(&testing::amqp_url(), "quorum test").await.unwrap();
    let topology = Topology::new(&stack.cluster);
    assert!(are_quorum(&connection, &stack.cluster, None).await, "the main and failed queues are not quorum queues");

    assert_ticks_delivered_once(&ok_sink, &jobs, start, start + TimeDelta::seconds(4)).await;

    // Two failures, then success: both retries came back from the retry
    // queues (quorum, dead-lettering at least once) to the main queue.
    let row = wait_for("the flaky slot to succeed", Duration::from_secs(20), || async {
        stack.ledger(&flaky, start).await.filter(|r| r["status"] == "succeeded")
    })
    .await;
    assert_eq!(row["attempts"], 3);
    assert_eq!(flaky_sink.received().iter().map(|r| r.attempt).collect::<Vec<_>>(), [1, 2, 3]);
    assert!(are_quorum(&connection, &stack.cluster, Some(300)).await, "the first retry queue is not a quorum queue");

    // Past its one retry, the broken slot ends failed and its message is in
    // the failed queue.
    wait_for("the broken slot to fail", Duration::from_secs(20), || async {
        stack.ledger(&broken, start).await.filter(|r| r["status"] == "failed")
    })
    .await;
    assert_eq!(broken_sink.received().len(), 2);
    let channel = connection.create_channel().await.unwrap();
    let parked = wait_for("the failed queue's message", Duration::from_secs(10), || async {
        channel
            .basic_get(topology.failed_queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .map(|m| domain::message::parse_body(&m.delivery.data).unwrap())
    })
    .await;
    assert_eq!(parked[0].job_id.to_string(), broken);
    let _ = connection.close(200, "done".into()).await;
    stack.stop().await;
}
