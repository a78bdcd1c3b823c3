//! End to end through the real binaries: `cronshard-api migrate`, then the
//! API, a scheduler and a worker as separate processes on the real services.
//! A job created over REST calls back a real HTTP receiver within a second of
//! its scheduled time, with the documented headers, and its ledger row ends
//! `succeeded`.

#[path = "support/lib.rs"]
mod support;

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use domain::execution::{format_instant, truncate_ms};
use support::{ProcEnv, Sink, free_addr, http_target};
use testing::{TestDb, unique_cluster, wait_for};

struct Env {
    database_url: String,
    cluster: String,
}

impl Env {
    fn command(&self, bin: &str) -> Command {
        ProcEnv {
            database_url: self.database_url.clone(),
            cluster: self.cluster.clone(),
            redis_urls: testing::redis_url(),
        }
        .command(bin)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_created_over_rest_calls_back_on_time_through_the_real_binaries() {
    let db = TestDb::new().await.unwrap();
    let env = Env { database_url: db.url.clone(), cluster: unique_cluster("e2e") };
    let sink = Sink::start().await;

    let status = env.command("cronshard-api").arg("migrate").status().await.unwrap();
    assert!(status.success(), "cronshard-api migrate failed");

    let api_addr = free_addr();
    let mut processes: Vec<Child> = vec![
        env.command("cronshard-api")
            .env("LISTEN_ADDR", &api_addr)
            .env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8")
            .spawn()
            .unwrap(),
        env.command("cronshard-scheduler")
            .env("NODE_ID", "e2e-node")
            .env("METRICS_ADDR", free_addr())
            .env("HEARTBEAT_INTERVAL_MS", "1000")
            .spawn()
            .unwrap(),
        env.command("cronshard-worker")
            .env("WORKER_ID", "e2e-worker")
            .env("METRICS_ADDR", free_addr())
            .env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8")
            .spawn()
            .unwrap(),
    ];
    let api = format!("http://{api_addr}");
    let http = reqwest::Client::new();
    wait_for("the API to be ready", Duration::from_secs(20), || async {
        http.get(format!("{api}/readyz")).send().await.ok().filter(|r| r.status() == 200)
    })
    .await;
    wait_for("the scheduler to join", Duration::from_secs(20), || async {
        let c: Value = http.get(format!("{api}/v1/cluster")).send().await.ok()?.json().await.ok()?;
        (c["live_nodes"] == 1).then_some(())
    })
    .await;

    let due: DateTime<Utc> = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let created: Value = http
        .post(format!("{api}/v1/jobs"))
        .json(&json!({
            "name": "e2e",
            "schedule": { "kind": "once", "at": format_instant(due) },
            "target": http_target(&sink.url("e2e")),
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().expect("created job has an id").to_owned();

    let got =
        wait_for("the callback", Duration::from_secs(10), || async { sink.received_on("e2e").into_iter().next() })
            .await;
    let lateness = got.received_at - due;
    assert!(lateness >= TimeDelta::zero() && lateness < TimeDelta::seconds(1), "callback {lateness} after its time");
    assert_eq!(got.execution_id, format!("{id}@{}", format_instant(due)));
    assert_eq!(got.scheduled_at, format_instant(due));
    assert_eq!(got.attempt, 1);

    let row = wait_for("the ledger row to say succeeded", Duration::from_secs(5), || async {
        let page: Value = http.get(format!("{api}/v1/jobs/{id}/executions")).send().await.ok()?.json().await.ok()?;
        page["items"].as_array()?.first().filter(|r| r["status"] == "succeeded").cloned()
    })
    .await;
    assert_eq!(row["attempts"], 1);
    assert_eq!(row["http_status"], 200);
    assert_eq!(row["scheduler_node"], "e2e-node");
    assert_eq!(row["worker_id"], "e2e-worker");
    assert_eq!(sink.received_on("e2e").len(), 1, "delivered more than once");
    let metrics = http.get(format!("{api}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("cronshard_api_request_seconds"), "API /metrics: {metrics}");

    // SIGTERM: every binary shuts down cleanly and the node leaves the cluster at once.
    for p in &processes {
        let pid = p.id().unwrap() as i32;
        let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    }
    for p in &mut processes {
        let status = tokio::time::timeout(Duration::from_secs(15), p.wait())
            .await
            .expect("binary did not stop on SIGTERM")
            .unwrap();
        assert!(status.success(), "a binary exited with {status} on SIGTERM");
    }
    let redis = runtime::redis::pools(&[testing::redis_url()]).unwrap();
    let mut conn = redis[0].get().await.unwrap();
    let heartbeat: Option<String> =
        redis::AsyncCommands::get(&mut *conn, format!("{}:node:e2e-node", env.cluster)).await.unwrap();
    assert_eq!(heartbeat, None, "the heartbeat outlived a clean shutdown");
}
