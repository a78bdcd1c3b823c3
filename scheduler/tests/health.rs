//! The metrics port's probes on real processes: a scheduler's and a
//! worker's `/readyz` follow their links to Redis and RabbitMQ, cut and
//! restored through a proxy, while `/healthz` answers 200 throughout (an
//! outside service never decides liveness).

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use serde_json::{Value, json};

use support::{ProcEnv, Stack, TcpProxy, free_addr, metrics_text};
use testing::wait_for;

/// One probe's status and JSON body; None while the port does not answer.
async fn probe(http: &reqwest::Client, addr: &str, path: &str) -> Option<(u16, Value)> {
    let response = http.get(format!("http://{addr}{path}")).timeout(Duration::from_secs(2)).send().await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.json().await.ok()?))
}

/// Waits until `/readyz` answers `status` with a body `accept` takes, and
/// asserts on every poll that `/healthz` answers 200 whenever the port
/// answers at all.
async fn readyz_until(
    http: &reqwest::Client,
    addr: &str,
    what: &str,
    status: u16,
    accept: impl Fn(&Value) -> bool,
) -> Value {
    let accept = &accept;
    wait_for(what, Duration::from_secs(60), || async move {
        if let Some((live, body)) = probe(http, addr, "/healthz").await {
            assert_eq!(live, 200, "/healthz while waiting for {what}: {body}");
        }
        let (code, body) = probe(http, addr, "/readyz").await?;
        (code == status && accept(&body)).then_some(body)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_is_ready_in_the_live_set_and_unready_naming_redis_while_cut_off_from_it() {
    let stack = Stack::start("health-redis").await;
    let redis_addr = testing::redis_url().trim_start_matches("redis://").parse().unwrap();
    let proxy = TcpProxy::start(redis_addr).await.unwrap();
    let metrics = free_addr();
    // A password in the URL (the default user takes any): no probe may show it.
    let secret = "probe-s3cret";
    let _node = ProcEnv { redis_urls: format!("redis://default:{secret}@{}", proxy.addr), ..stack.proc_env() }
        .scheduler_command("node-0")
        .env("METRICS_ADDR", &metrics)
        .spawn()
        .unwrap();
    let http = &stack.http;

    let ready = readyz_until(http, &metrics, "the node to be ready", 200, |_| true).await;
    assert_eq!(
        ready,
        json!({ "ready": true, "checks": { "clock": "ok", "live_set": "ok", "postgres": "ok", "redis": "ok" } })
    );
    let (_, live) = probe(http, &metrics, "/healthz").await.unwrap();
    assert_eq!(live, json!({ "live": true, "loops": { "core": "ok", "membership": "ok" } }));
    // Ready means in the live set, as the API (on Redis directly) sees it too.
    let cluster: Value = http.get(format!("{}/v1/cluster", stack.api)).send().await.unwrap().json().await.unwrap();
    assert!(cluster["nodes"].as_array().unwrap().iter().any(|n| n["node_id"] == "node-0"), "{cluster}");
    // `/metrics` is served on the same port as before.
    let text = metrics_text(http, &metrics).await.expect("/metrics answers");
    assert!(text.contains(runtime::metrics::HEARTBEAT_LAST_SUCCESS), "{text}");

    proxy.cut();
    let cut = readyz_until(http, &metrics, "/readyz to name the cut Redis link", 503, |body| {
        body["checks"]["redis"].as_str().is_some_and(|why| why.starts_with("shard 1: "))
    })
    .await;
    println!("cut off from Redis: {cut}");
    assert_eq!(cut["ready"], false);
    assert_eq!(cut["checks"]["postgres"], "ok", "only Redis is cut: {cut}");
    assert_eq!(cut["checks"]["clock"], "ok", "{cut}");
    assert!(!cut.to_string().contains(secret), "a probe shows the Redis password: {cut}");

    proxy.restore();
    let back = readyz_until(http, &metrics, "the node to be ready again", 200, |_| true).await;
    assert_eq!(back["checks"]["live_set"], "ok");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_ready_while_it_consumes_and_unready_naming_the_broker_while_cut_off_from_it() {
    let stack = Stack::start("health-amqp").await;
    let proxy = TcpProxy::start("127.0.0.1:5672".parse().unwrap()).await.unwrap();
    let metrics = free_addr();
    let _worker = stack
        .proc_env()
        .command("cronshard-worker")
        .env("WORKER_ID", "worker-0")
        .env("AMQP_URL", format!("amqp://guest:guest@{}/%2f", proxy.addr))
        .env("METRICS_ADDR", &metrics)
        .spawn()
        .unwrap();
    let http = &stack.http;

    let ready = readyz_until(http, &metrics, "the worker to be ready", 200, |_| true).await;
    assert_eq!(ready, json!({ "ready": true, "checks": { "broker": "ok", "postgres": "ok" } }));
    assert!(metrics_text(http, &metrics).await.is_some_and(|t| t.contains("cronshard_clock_offset_seconds")));
    // The session loop waits on the broker for its next message.
    let (_, live) = probe(http, &metrics, "/healthz").await.unwrap();
    assert_eq!(live["live"], true);
    assert_eq!(live["loops"]["heartbeat"], "ok", "{live}");
    assert!(live["loops"]["session"].is_string(), "{live}");

    proxy.cut();
    let cut = readyz_until(http, &metrics, "/readyz to name the cut broker link", 503, |body| {
        body["checks"]["broker"].as_str().is_some_and(|why| why.starts_with("not consuming: "))
    })
    .await;
    println!("cut off from RabbitMQ: {cut}");
    assert_eq!(cut["checks"]["postgres"], "ok", "only RabbitMQ is cut: {cut}");
    assert!(!cut.to_string().contains("guest:guest"), "a probe shows the broker's credentials: {cut}");

    proxy.restore();
    readyz_until(http, &metrics, "the worker to consume again", 200, |_| true).await;
    stack.stop().await;
}
