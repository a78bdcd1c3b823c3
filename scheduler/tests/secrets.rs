//! No secret reaches a log line, an error, the ledger or the API's view of
//! it, through the real binaries: the API, a scheduler and a worker run as
//! processes with their stdout and stderr captured, given
//!
//! - a bearer token (`API_TOKENS`),
//! - a password in `DATABASE_URL` (the local Postgres trusts loopback, so it
//!   is sent nowhere, but every process holds it),
//! - a password in `REDIS_URLS`, required by a private redis-server,
//! - an AWS secret key in the worker's environment,
//!
//! and jobs whose targets carry secrets of their own: a callback URL with
//! `?api_key=` on a closed port (refused, retried, failed: its error is
//! recorded), an `X-Api-Key` header, and an SQS queue URL with a query on a
//! queue that does not exist. Afterwards every process's output, the ledger's
//! `error` column and history, the failed queue's failure reason and the
//! API's answers about the executions are searched for every secret.
//!
//! The job's own target, as the API returns it, is the user's data and keeps
//! them: it is not searched.

#[path = "support/lib.rs"]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use chrono::{TimeDelta, Utc};
use serde_json::{Value, json};

use domain::execution::{format_instant, truncate_ms};
use support::free_addr;
use testing::{TestDb, unique_cluster, wait_for};

const TOKEN: &str = "tok-SECRET-a1b2c3d4";
const DB_PASSWORD: &str = "dbpw-SECRET-e5f6a7";
const REDIS_PASSWORD: &str = "redispw-SECRET-b8c9d0";
const AWS_SECRET: &str = "awssk-SECRET-e1f2a3";
const API_KEY: &str = "apikey-SECRET-b4c5d6";
const HEADER_VALUE: &str = "hdr-SECRET-e7f8a9";
const QUEUE_TOKEN: &str = "qtok-SECRET-b0c1d2";

const SECRETS: [&str; 7] = [TOKEN, DB_PASSWORD, REDIS_PASSWORD, AWS_SECRET, API_KEY, HEADER_VALUE, QUEUE_TOKEN];

/// Our crates at debug (their every log line), the rest at info: what an
/// operator chasing a problem turns on. `TEST_SECRETS_LOG` overrides it.
const LOG_FILTER: &str = "info,api=debug,scheduler=debug,worker=debug,common=debug,cronshard_api=debug,\
                          cronshard_scheduler=debug,cronshard_worker=debug,tower_http=debug,lapin=warn";

/// `url` with `password` in its userinfo.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (user, host) = rest.split_once('@').expect("TEST_DATABASE_URL names a user");
    let user = user.split(':').next().unwrap();
    format!("{scheme}://{user}:{password}@{host}")
}

/// A process whose stdout and stderr go to one file each.
struct Proc {
    name: &'static str,
    child: tokio::process::Child,
    logs: [PathBuf; 2],
}

impl Proc {
    fn output(&self) -> String {
        self.logs.iter().map(|p| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()).collect()
    }
}

struct Cluster {
    dir: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl Cluster {
    fn spawn(&self, name: &'static str, bin: &str, extra: &[(&str, String)]) -> Proc {
        let logs = [self.dir.join(format!("{name}.stdout")), self.dir.join(format!("{name}.stderr"))];
        let mut c = tokio::process::Command::new(support::binary(bin));
        c.envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(std::process::Stdio::null())
            .stdout(std::fs::File::create(&logs[0]).unwrap())
            .stderr(std::fs::File::create(&logs[1]).unwrap())
            .kill_on_drop(true);
        Proc { name, child: c.spawn().unwrap(), logs }
    }
}

/// A private redis-server that wants a password.
fn redis_with_password(port: u16) -> tokio::process::Child {
    tokio::process::Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
        .args(["--requirepass", REDIS_PASSWORD])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server is installed (deploy/scripts/services.sh installs it)")
}

fn find_secrets(what: &str, text: &str) -> Vec<String> {
    SECRETS
        .iter()
        .filter(|s| text.contains(*s))
        .map(|s| {
            let at = text.find(s).unwrap();
            let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
            let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
            format!("{what} shows {s}: {}", &text[line_start..line_end])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_a_log_an_error_or_the_ledger() {
    let db = TestDb::new().await.unwrap();
    let cluster = unique_cluster("secrets");
    let dir = std::env::temp_dir().join(format!("cronshard-{cluster}"));
    std::fs::create_dir_all(&dir).unwrap();

    let redis_addr = free_addr();
    let redis_port: u16 = redis_addr.rsplit(':').next().unwrap().parse().unwrap();
    let _redis = redis_with_password(redis_port);
    wait_for("the private redis-server", Duration::from_secs(10), || async {
        tokio::net::TcpStream::connect(&redis_addr).await.ok().map(|_| ())
    })
    .await;

    let env = Cluster {
        dir: dir.clone(),
        env: vec![
            ("DATABASE_URL", with_password(&db.url, DB_PASSWORD)),
            ("REDIS_URLS", format!("redis://:{REDIS_PASSWORD}@{redis_addr}")),
            ("AMQP_URL", testing::amqp_url()),
            ("CLUSTER_NAME", cluster.clone()),
            ("RUST_LOG", std::env::var("TEST_SECRETS_LOG").unwrap_or_else(|_| LOG_FILTER.to_owned())),
            ("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8".to_owned()),
            ("METRICS_ADDR", free_addr()),
            ("SECRETS_KEK", testing::TEST_SECRETS_KEK.to_owned()),
        ],
    };
    let api_addr = free_addr();
    let mut procs = vec![
        env.spawn("api", "cronshard-api", &[("LISTEN_ADDR", api_addr.clone()), ("API_TOKENS", TOKEN.to_owned())]),
        env.spawn(
            "scheduler",
            "cronshard-scheduler",
            &[
                ("NODE_ID", "secrets-node".to_owned()),
                ("METRICS_ADDR", free_addr()),
                ("HEARTBEAT_INTERVAL_MS", "1000".to_owned()),
                ("POLL_INTERVAL_MS", "500".to_owned()),
            ],
        ),
        env.spawn(
            "worker",
            "cronshard-worker",
            &[
                ("WORKER_ID", "secrets-worker".to_owned()),
                ("METRICS_ADDR", free_addr()),
                ("AWS_ACCESS_KEY_ID", "secrets-test".to_owned()),
                ("AWS_SECRET_ACCESS_KEY", AWS_SECRET.to_owned()),
                ("AWS_REGION", "us-east-1".to_owned()),
                ("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:4566".to_owned()),
            ],
        ),
    ];

    let api = format!("http://{api_addr}");
    let http = reqwest::Client::new();
    let authed = |rb: reqwest::RequestBuilder| rb.bearer_auth(TOKEN);
    wait_for("the API to be ready", Duration::from_secs(30), || async {
        http.get(format!("{api}/readyz")).send().await.ok().filter(|r| r.status() == 200)
    })
    .await;
    wait_for("the scheduler to join", Duration::from_secs(30), || async {
        let c: Value = authed(http.get(format!("{api}/v1/cluster"))).send().await.ok()?.json().await.ok()?;
        (c["live_nodes"] == 1).then_some(())
    })
    .await;

    // Every answer about executions (and the API's errors) is searched.
    let mut answers = String::new();
    let due = truncate_ms(Utc::now() + TimeDelta::seconds(2));
    let closed_port = free_addr();
    let mut jobs = vec![json!({
        "name": "secret-callback",
        "schedule": { "kind": "once", "at": format_instant(due) },
        "target": {
            "kind": "http",
            "url": format!("http://{closed_port}/hook?api_key={API_KEY}&page=1"),
            "headers": { "X-Api-Key": HEADER_VALUE },
            "timeout_ms": 2000,
        },
        "retry": { "max_retries": 1, "base_delay_ms": 200, "multiplier": 1.0 },
    })];
    let moto_up = tokio::net::TcpStream::connect("127.0.0.1:4566").await.is_ok();
    if moto_up {
        jobs.push(json!({
            "name": "secret-queue",
            "schedule": { "kind": "once", "at": format_instant(due) },
            "target": {
                "kind": "sqs",
                "queue_url": format!("http://127.0.0.1:4566/000000000000/missing-{cluster}?token={QUEUE_TOKEN}"),
            },
            "retry": { "max_retries": 0 },
        }));
    }
    let mut ids = Vec::new();
    for job in &jobs {
        let r = authed(http.post(format!("{api}/v1/jobs"))).json(job).send().await.unwrap();
        let status = r.status();
        let body: Value = r.json().await.unwrap();
        assert_eq!(status, 201, "creating {job}: {body}");
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    // A refused request quoting a secret in its body: the answer names the
    // repeated key, not the values.
    let dup = format!(r#"{{"name": "x", "target": {{"url": "http://h/?api_key={API_KEY}", "url": "b"}}}}"#);
    let r = authed(http.post(format!("{api}/v1/jobs"))).header("content-type", "application/json").body(dup);
    answers.push_str(&r.send().await.unwrap().text().await.unwrap());
    // A wrong token.
    answers
        .push_str(&http.get(format!("{api}/v1/jobs")).bearer_auth("wrong").send().await.unwrap().text().await.unwrap());

    let mut rows = Vec::new();
    for id in &ids {
        let row = wait_for("the execution to fail for good", Duration::from_secs(30), || async {
            let page: Value =
                authed(http.get(format!("{api}/v1/jobs/{id}/executions"))).send().await.ok()?.json().await.ok()?;
            page["items"].as_array()?.first().filter(|r| r["status"] == "failed").cloned()
        })
        .await;
        let scheduled_at = row["scheduled_at"].as_str().unwrap().to_owned();
        for path in [
            format!("/v1/jobs/{id}/executions"),
            format!("/v1/jobs/{id}/executions/{scheduled_at}"),
            format!("/v1/executions?job_id={id}"),
        ] {
            let r = authed(http.get(format!("{api}{path}"))).send().await.unwrap();
            answers.push_str(&r.text().await.unwrap());
        }
        rows.push(row);
    }
    // The failing callback was retried and its error is recorded, redacted,
    // with the rest of it kept.
    let callback = &rows[0];
    assert_eq!(callback["attempts"], 2, "{callback}");
    let error = callback["error"].as_str().unwrap_or_else(|| panic!("no error recorded: {callback}"));
    assert!(error.contains("api_key=***&page=***"), "the recorded error lost its URL: {error}");

    // What the ledger holds, read directly.
    let client = store::db::connect(&db.url).await.unwrap();
    for r in client.query("SELECT coalesce(error, ''), history::text FROM scheduled_jobs", &[]).await.unwrap() {
        answers.push_str(&r.get::<_, String>(0));
        answers.push_str(&r.get::<_, String>(1));
    }
    // What the failed queue says of each message.
    let reasons = failure_reasons(&cluster).await;
    assert_eq!(reasons.len(), ids.len(), "failed-queue messages: {reasons:?}");
    answers.push_str(&reasons.join("\n"));

    for p in &procs {
        let pid = p.child.id().unwrap();
        let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    }
    for p in &mut procs {
        if tokio::time::timeout(Duration::from_secs(15), p.child.wait()).await.is_err() {
            let _ = p.child.kill().await;
        }
    }

    let mut leaks = find_secrets("the API's answers, the ledger or the failed queue", &answers);
    for p in &procs {
        let out = p.output();
        assert!(!out.trim().is_empty(), "{} logged nothing", p.name);
        leaks.extend(find_secrets(p.name, &out));
    }
    let worker_log = procs[2].output();
    assert!(worker_log.contains("api_key=***"), "the worker did not log the failing callback:\n{worker_log}");
    assert!(leaks.is_empty(), "secrets leaked (logs in {}):\n{}", dir.display(), leaks.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
    let _ = broker::amqp::Topology::new(&cluster).delete_at(&testing::amqp_url()).await;
}

/// The `x-cronshard-failure-reason` of every message in the cluster's failed
/// queue.
async fn failure_reasons(cluster: &str) -> Vec<String> {
    use lapin::options::BasicGetOptions;
    let connection = broker::amqp::connect(&testing::amqp_url(), "secrets test").await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let queue = broker::amqp::Topology::new(cluster).failed_queue;
    let mut out = Vec::new();
    while let Some(message) = channel.basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true }).await.unwrap()
    {
        let reason = message
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get("x-cronshard-failure-reason").cloned())
            .map(|v| format!("{v:?}"))
            .unwrap_or_default();
        out.push(reason);
    }
    let _ = connection.close(0, "done".into()).await;
    out
}
