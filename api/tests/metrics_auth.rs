//! The API's `/metrics` answers only callers with a valid token when auth
//! is on (anonymous callers get the probes and the OpenAPI document), and
//! everyone when auth is off. Through the real binary, where `/metrics` is
//! mounted.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "metrics-auth-bootstrap-token";

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[tokio::test]
async fn metrics_need_a_valid_token_when_auth_is_on() {
    let db = common::testing::TestDb::new().await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cronshard-api"))
        .env("DATABASE_URL", &db.url)
        .env("REDIS_URLS", common::testing::redis_url())
        .env("AMQP_URL", common::testing::amqp_url())
        .env("CLUSTER_NAME", common::testing::unique_cluster("metrics-auth"))
        .env("LISTEN_ADDR", "127.0.0.1:0")
        .env("API_TOKENS", TOKEN)
        .env("RUST_LOG", "info")
        .env("LOG_FORMAT", "text")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting cronshard-api");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let addr = loop {
        let line = strip_ansi(&rx.recv_timeout(Duration::from_secs(30)).expect("the API's log went quiet"));
        if let Some(rest) = line.split("addr=").nth(1).filter(|_| line.contains("listening")) {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/metrics");
    let anonymous = http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let wrong = http.get(&url).bearer_auth("not-a-token").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let authed = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(authed.status(), 200);
    // The probes stay open.
    assert_eq!(http.get(format!("http://{addr}/healthz")).send().await.unwrap().status(), 200);
    let _ = child.kill();
    let _ = child.wait();
}
