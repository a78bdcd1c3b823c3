//! A secret header sealed at rest reaches the receiver in clear and nothing
//! else: a worker without the key that sealed it fails the delivery with an
//! error naming the keys by id (never a value), the failed queue keeps no
//! secret header and drops what it parks after a while, and after the
//! key-encryption key is rotated (`cronshard-api secrets rotate`) a worker
//! that has only the new key delivers it. Real API, node and workers, with
//! the API binary for the rotation.

#[path = "support/lib.rs"]
mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use domain::execution::{format_instant, truncate_ms};
use support::Stack;
use testing::wait_for;

const SECRET: &str = "Bearer sealed-SECRET-5a6b7c";
/// A second key-encryption key: id k2, 32 bytes of 0x07.
const K2: &str = "k2:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=";

/// A receiver that records each request's Authorization header and answers 200.
async fn header_sink() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let out = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                if let Some(line) = head.lines().find(|l| l.to_ascii_lowercase().starts_with("authorization:")) {
                    seen.lock().unwrap().push(line.split_once(':').unwrap().1.trim().to_owned());
                }
                let _ = socket.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").await;
            });
        }
    });
    (url, out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sealed_secret_opens_only_for_its_request_and_survives_a_key_rotation() {
    let (url, seen) = header_sink().await;
    let mut stack = Stack::start("secrets-rotate").await;
    stack.start_node(stack.node_config("node-a"));
    // The only worker has only the new key: the data key is sealed by test-1.
    let mut worker = stack.worker_config("worker-k2");
    worker.keyring = store::secrets::Keyring::parse(K2).unwrap();
    stack.start_worker(worker);

    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let job = stack
        .create_job(json!({
            "name": "sealed",
            "schedule": { "kind": "once", "at": format_instant(due) },
            "target": { "kind": "http", "url": url, "secret_headers": { "Authorization": SECRET } },
            "retry": { "max_retries": 0 },
        }))
        .await;
    let id = job["id"].as_str().unwrap().to_owned();
    let row = wait_for("the slot to fail", Duration::from_secs(30), || async {
        stack.ledger(&id, due).await.filter(|r| r["status"] == "failed")
    })
    .await;
    let error = row["history"][0]["error"].as_str().unwrap_or_default().to_owned();
    assert!(error.contains("\"test-1\"") && error.contains("k2"), "the error names the keys: {row}");
    assert!(!error.contains("sealed-SECRET"), "{error}");
    assert!(seen.lock().unwrap().is_empty(), "nothing may be sent without the secret");

    // The parked message keeps no secret header, sealed or not, and expires.
    let parked = parked_messages(&stack.cluster).await;
    assert_eq!(parked.len(), 1, "{parked:?}");
    let (body, expiration) = &parked[0];
    assert!(!body.contains("sealed-SECRET") && !body.contains(store::secrets::SEALED_PREFIX), "{body}");
    assert_eq!(expiration.as_deref(), Some(worker::defaults::FAILED_QUEUE_TTL.as_millis().to_string().as_str()));

    // A rotation whose keys cannot open the data key changes nothing.
    let out = rotate(&stack, K2).await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("\"test-1\""), "{stderr}");
    // The new key first, the old one after it: the data key is re-sealed.
    let out = rotate(&stack, &format!("{K2},{}", testing::TEST_SECRETS_KEK)).await;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 data key(s) re-sealed with key-encryption key k2"));
    let kek: String =
        stack.pg.get().await.unwrap().query_one("SELECT kek_id FROM secret_data_keys", &[]).await.unwrap().get(0);
    assert_eq!(kek, "k2");

    // Replayed, the worker with only k2 now opens it: the receiver gets the value.
    let r = stack
        .http
        .post(format!("{}/v1/executions/{id}/{}/replay", stack.api, format_instant(due)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    wait_for("the replayed delivery", Duration::from_secs(30), || async {
        (!seen.lock().unwrap().is_empty()).then_some(())
    })
    .await;
    assert_eq!(*seen.lock().unwrap(), vec![SECRET.to_owned()]);
    stack.stop().await;
}

async fn rotate(stack: &Stack, kek: &str) -> std::process::Output {
    tokio::process::Command::new(support::binary("cronshard-api"))
        .args(["secrets", "rotate"])
        .env("DATABASE_URL", &stack.proc_env().database_url)
        .env("SECRETS_KEK", kek)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap()
}

/// Bodies and `expiration`s of the messages in the cluster's failed queue.
async fn parked_messages(cluster: &str) -> Vec<(String, Option<String>)> {
    use lapin::options::BasicGetOptions;
    let connection = broker::amqp::connect(&testing::amqp_url(), "secrets test").await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let queue = broker::amqp::Topology::new(cluster).failed_queue;
    let mut out = Vec::new();
    while let Some(m) = channel.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap() {
        let expiration = m.properties.expiration().as_ref().map(|e| e.to_string());
        out.push((String::from_utf8_lossy(&m.data).to_string(), expiration));
    }
    let _ = connection.close(0, "done".into()).await;
    out
}
