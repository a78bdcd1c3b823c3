//! A claim the database acknowledged and then lost (an asynchronous
//! failover to a standby that had not received it) leaves a fire message
//! whose ledger row does not exist. A worker process must not deliver it
//! blind, and must say so: the metric an operator alerts on.

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use serde_json::json;
use support::{ProcEnv, Sink, Stack, http_target, metric_value};
use testing::wait_for;

#[tokio::test]
async fn a_message_whose_claim_was_lost_is_counted_and_not_delivered() {
    let stack = Stack::start("lost-claim").await;
    let sink = Sink::start().await;
    let job = stack
        .create_job(json!({
            "name": "lost",
            "schedule": { "kind": "cron", "expr": "0 3 * * *", "timezone": "UTC" },
            "target": http_target(&sink.url("lost")),
        }))
        .await;
    let id: uuid::Uuid = job["id"].as_str().unwrap().parse().unwrap();
    // Claimed and published, no worker running yet.
    stack.post(&format!("/v1/jobs/{id}/trigger")).await;
    // What the promoted standby never received: the claim's row.
    let client = stack.pg.get().await.unwrap();
    let removed = client.execute("DELETE FROM scheduled_jobs WHERE job_id = $1", &[&id]).await.unwrap();
    assert_eq!(removed, 1, "the trigger's row");

    let env = ProcEnv {
        database_url: stack.db.url.clone(),
        cluster: stack.cluster.clone(),
        redis_urls: testing::redis_url(),
    };
    let metrics = support::free_addr();
    let _worker = env
        .command("cronshard-worker")
        .env("WORKER_ID", "worker-lost")
        .env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8")
        .env("METRICS_ADDR", &metrics)
        .spawn()
        .unwrap();
    wait_for("the worker to count the message without a row", Duration::from_secs(30), || async {
        (metric_value(&stack.http, &metrics, "cronshard_worker_messages_without_row_total").await? >= 1.0).then_some(())
    })
    .await;
    assert!(sink.received_on("lost").is_empty(), "a slot without a ledger row was delivered");
    stack.stop().await;
}
