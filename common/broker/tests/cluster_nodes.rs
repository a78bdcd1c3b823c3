//! `AMQP_URL` naming several nodes of one RabbitMQ cluster: a node that
//! refuses or never answers is passed over, and the node that answered is
//! tried first on the next connection (a reconnect after a node's loss does
//! not wait out a dead node's timeout every time).

use std::time::{Duration, Instant};

/// A port that accepts TCP connections and never says a word: a node whose
/// host is partitioned away rather than refusing.
async fn silent_node() -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    (format!("amqp://guest:guest@{addr}/%2f"), task)
}

#[tokio::test]
async fn a_dead_or_silent_node_is_passed_over_and_the_live_one_is_tried_first_next_time() {
    let refused = "amqp://guest:guest@127.0.0.1:1/%2f".to_owned();
    let (silent, _task) = silent_node().await;
    let live = testing::amqp_url();
    let urls = format!("{refused},{silent}, {live}");

    let started = Instant::now();
    let connection = broker::amqp::connect(&urls, "cluster nodes test").await.expect("the live node");
    assert!(connection.status().connected());
    let first = started.elapsed();
    assert!(first >= Duration::from_secs(4), "the silent node was not waited for ({first:?})");
    assert!(first < Duration::from_secs(20), "{first:?}");
    connection.close(200, "done".into()).await.unwrap();

    let started = Instant::now();
    let connection = broker::amqp::connect(&urls, "cluster nodes test").await.expect("the live node again");
    assert!(started.elapsed() < Duration::from_secs(2), "the node that answered was not tried first");
    connection.close(200, "done".into()).await.unwrap();

    let e = broker::amqp::connect(&format!("{refused},amqp://guest:guest@127.0.0.1:2/%2f"), "cluster nodes test")
        .await
        .map(|_| ())
        .expect_err("no node is up");
    assert!(!e.to_string().is_empty());
}
