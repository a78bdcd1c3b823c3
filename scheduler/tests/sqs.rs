//! SQS delivery on the real pipeline (API → Postgres → node → RabbitMQ →
//! worker) against a real moto SQS server on loopback: the one on
//! 127.0.0.1:4566 when it runs, else a private `moto_server` started here.

#[path = "support/lib.rs"]
mod support;

use std::collections::HashMap;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::config::Credentials;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use domain::execution::{format_instant, truncate_ms};
use support::{Sink, Stack, free_addr, http_target};
use testing::wait_for;

fn at(t: DateTime<Utc>) -> String {
    format_instant(truncate_ms(t))
}

/// A moto SQS endpoint; a server started here is killed (and reaped) on drop.
struct Moto {
    endpoint: String,
    child: Option<std::process::Child>,
}

impl Drop for Moto {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Moto {
    async fn start() -> Moto {
        if tokio::net::TcpStream::connect("127.0.0.1:4566").await.is_ok() {
            return Moto { endpoint: "http://127.0.0.1:4566".into(), child: None };
        }
        let addr = free_addr();
        let port = addr.rsplit(':').next().unwrap().to_owned();
        let child = std::process::Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("moto_server is installed (pip install 'moto[server]'; deploy/scripts/services.sh installs it)");
        // Owned before the wait, so a timeout still kills it.
        let moto = Moto { endpoint: format!("http://{addr}"), child: Some(child) };
        wait_for("moto_server to listen", Duration::from_secs(30), || async {
            tokio::net::TcpStream::connect(&addr).await.ok().map(|_| ())
        })
        .await;
        moto
    }

    /// What the worker is given: moto's endpoint, us-east-1, test credentials.
    async fn aws(&self) -> SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .endpoint_url(&self.endpoint)
            .credentials_provider(Credentials::new("test", "test", None, None, "cronshard-tests"))
            .load()
            .await
    }
}

async fn create_queue(sqs: &aws_sdk_sqs::Client, fifo: bool) -> String {
    let name = format!("cronshard-{}", uuid::Uuid::new_v4().simple());
    let mut request = sqs.create_queue();
    if fifo {
        request = request
            .queue_name(format!("{name}.fifo"))
            .attributes(QueueAttributeName::FifoQueue, "true")
            .attributes(QueueAttributeName::ContentBasedDeduplication, "false");
    } else {
        request = request.queue_name(name);
    }
    request.send().await.expect("CreateQueue on moto").queue_url.expect("a queue URL")
}

/// The next message on the queue, with all its attributes (long polling).
async fn receive(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Message {
    wait_for("a message on the queue", Duration::from_secs(20), || async {
        sqs.receive_message()
            .queue_url(queue_url)
            .wait_time_seconds(1)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .message_system_attribute_names(MessageSystemAttributeName::MessageDeduplicationId)
            .send()
            .await
            .expect("ReceiveMessage on moto")
            .messages?
            .into_iter()
            .next()
    })
    .await
}

fn attribute(m: &Message, name: &str) -> (String, String) {
    let a = m.message_attributes().and_then(|a| a.get(name)).unwrap_or_else(|| panic!("attribute {name} missing"));
    (a.data_type().to_owned(), a.string_value().unwrap_or_default().to_owned())
}

/// The slot's ledger row once it reached `status`.
async fn ledger_row(stack: &Stack, job_id: &str, slot: DateTime<Utc>, status: &str) -> Value {
    let id: uuid::Uuid = job_id.parse().unwrap();
    wait_for(&format!("the slot to be recorded as {status}"), Duration::from_secs(20), || async {
        let client = stack.pg.get().await.ok()?;
        let row = client
            .query_opt(
                "SELECT status, attempts, sqs_message_id, error, http_status FROM scheduled_jobs
                 WHERE job_id = $1 AND scheduled_at = $2",
                &[&id, &slot],
            )
            .await
            .ok()??;
        let row = json!({
            "status": row.get::<_, String>(0), "attempts": row.get::<_, i32>(1),
            "sqs_message_id": row.get::<_, Option<String>>(2), "error": row.get::<_, Option<String>>(3),
            "http_status": row.get::<_, Option<i32>>(4),
        });
        (row["status"] == status).then_some(row)
    })
    .await
}

async fn stack_with_worker(label: &str, aws: Option<SdkConfig>) -> Stack {
    let mut stack = Stack::start(label).await;
    stack.start_node(stack.node_config("node-a"));
    let mut worker = stack.worker_config("worker-a");
    worker.aws = aws;
    stack.start_worker(worker);
    stack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_standard_queue_gets_the_body_and_attributes_and_the_message_id_is_recorded() {
    let moto = Moto::start().await;
    let aws = moto.aws().await;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let queue_url = create_queue(&sqs, false).await;
    let stack = stack_with_worker("sqs-std", Some(aws)).await;
    // A signing key: the message carries the Standard Webhooks attributes,
    // signed over its body (the worker reads the namespace's keys at the
    // delivery, after this).
    let key: Value = stack.post("/v1/signing-keys").await;
    let secret = key["secret"].as_str().unwrap().to_owned();

    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let job = stack
        .create_job(json!({
            "name": "to-sqs",
            "schedule": { "kind": "once", "at": at(due) },
            "target": {
                "kind": "sqs", "queue_url": queue_url, "body": "{\"hello\":\"sqs\"}",
                "message_attributes": { "Tenant": "acme" },
            },
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();

    let m = receive(&sqs, &queue_url).await;
    assert_eq!(m.body(), Some("{\"hello\":\"sqs\"}"));
    assert_eq!(attribute(&m, "X-Cronshard-Execution-Id"), ("String".into(), format!("{id}@{}", at(due))));
    assert_eq!(attribute(&m, "X-Cronshard-Scheduled-At"), ("String".into(), at(due)));
    assert_eq!(attribute(&m, "X-Cronshard-Attempt"), ("Number".into(), "1".into()));
    assert_eq!(attribute(&m, "Tenant"), ("String".into(), "acme".into()));
    assert_eq!(attribute(&m, "webhook-id"), ("String".into(), format!("{id}@{}", at(due))));
    assert_eq!(m.message_attributes().unwrap().len(), 7);
    let signed = testing::SignedRequest {
        headers: ["webhook-id", "webhook-timestamp", "webhook-signature"]
            .iter()
            .map(|n| ((*n).to_owned(), attribute(&m, n).1))
            .collect(),
        body: m.body().unwrap().as_bytes().to_vec(),
    };
    assert_eq!(
        testing::verify_webhooks(&secret, &[signed], 0),
        vec![Ok(())],
        "the Standard Webhooks library verifies it"
    );

    let row = ledger_row(&stack, &id, due, "succeeded").await;
    assert_eq!(row["attempts"], 1);
    assert_eq!(row["sqs_message_id"], json!(m.message_id().unwrap()));
    assert_eq!(row["http_status"], Value::Null);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fifo_queue_gets_the_group_id_and_the_execution_id_as_deduplication_id() {
    let moto = Moto::start().await;
    let aws = moto.aws().await;
    let sqs = aws_sdk_sqs::Client::new(&aws);
    let queue_url = create_queue(&sqs, true).await;
    let stack = stack_with_worker("sqs-fifo", Some(aws)).await;

    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let job = stack
        .create_job(json!({
            "name": "to-fifo",
            "schedule": { "kind": "once", "at": at(due) },
            "target": { "kind": "sqs", "queue_url": queue_url, "message_group_id": "tenant-acme" },
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    let execution_id = format!("{id}@{}", at(due));

    let m = receive(&sqs, &queue_url).await;
    // No body given: a small JSON document naming the slot.
    let body: Value = serde_json::from_str(m.body().unwrap()).unwrap();
    assert_eq!(body, json!({ "job_id": id, "execution_id": execution_id, "scheduled_at": at(due) }));
    assert_eq!(attribute(&m, "X-Cronshard-Execution-Id").1, execution_id);
    assert_eq!(attribute(&m, "X-Cronshard-Scheduled-At").1, at(due));
    assert_eq!(attribute(&m, "X-Cronshard-Attempt").1, "1");
    let system: HashMap<_, _> = m.attributes().cloned().unwrap_or_default();
    assert_eq!(system.get(&MessageSystemAttributeName::MessageGroupId).map(String::as_str), Some("tenant-acme"));
    assert_eq!(system.get(&MessageSystemAttributeName::MessageDeduplicationId), Some(&execution_id));

    let row = ledger_row(&stack, &id, due, "succeeded").await;
    assert_eq!(row["sqs_message_id"], json!(m.message_id().unwrap()));
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nonexistent_queue_fails_at_once_with_the_reason() {
    let moto = Moto::start().await;
    let aws = moto.aws().await;
    let stack = stack_with_worker("sqs-missing", Some(aws)).await;
    let queue_url = format!("{}/123456789012/cronshard-missing-{}", moto.endpoint, uuid::Uuid::new_v4().simple());

    let due = truncate_ms(Utc::now() + TimeDelta::seconds(1));
    let job = stack
        .create_job(json!({
            "name": "to-nowhere",
            "schedule": { "kind": "once", "at": at(due) },
            "target": { "kind": "sqs", "queue_url": queue_url },
            "retry": { "max_retries": 3, "base_delay_ms": 500, "multiplier": 2.0 },
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    let row = ledger_row(&stack, &id, due, "failed").await;
    assert_eq!(row["attempts"], 1, "a missing queue is not retried: {row}");
    assert_eq!(row["sqs_message_id"], Value::Null);
    let error = row["error"].as_str().unwrap();
    assert!(error.contains("queue does not exist") && error.contains("NonExistentQueue"), "{error}");
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_without_an_aws_region_delivers_http_and_fails_sqs_with_the_reason() {
    let sink = Sink::start().await;
    // Credentials but no region (an explicit "none", so nothing asks EC2).
    let aws = aws_config::defaults(BehaviorVersion::latest())
        .region(None::<Region>)
        .credentials_provider(Credentials::new("test", "test", None, None, "cronshard-tests"))
        .load()
        .await;
    let stack = stack_with_worker("sqs-noregion", Some(aws)).await;

    let due = truncate_ms(Utc::now() + TimeDelta::seconds(1));
    let once = |name: &str, target: Value| {
        json!({ "name": name, "schedule": { "kind": "once", "at": at(due) }, "target": target,
                "retry": { "max_retries": 0 } })
    };
    let http = stack.create_job(once("http", http_target(&sink.url("http")))).await;
    let sqs = stack
        .create_job(once("sqs", json!({ "kind": "sqs", "queue_url": "https://sqs.us-east-1.amazonaws.com/1/q" })))
        .await;

    let row = ledger_row(&stack, sqs["id"].as_str().unwrap(), due, "failed").await;
    assert!(row["error"].as_str().unwrap().contains("no AWS region"), "{row}");
    ledger_row(&stack, http["id"].as_str().unwrap(), due, "succeeded").await;
    assert_eq!(sink.received_on("http").len(), 1);
    stack.stop().await;
}
