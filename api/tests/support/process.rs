//! The `cronshard-api` binary as a process, for the tests that need what
//! only the binary has (`/metrics`, its log). Only the API crate's tests
//! include it: the binary's path is known to them alone.
#![allow(dead_code)] // each test binary uses only part of it

use testing::{TestDb, redis_url, unique_cluster};

/// A `cronshard-api` binary on a fresh database, its log read line by line
/// (colours stripped) until it says where it listens.
pub struct ApiProcess {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Every log line read so far.
    pub log: Vec<String>,
    pub addr: String,
    _db: TestDb,
}

impl ApiProcess {
    /// Starts the binary with the machine's services, `LISTEN_ADDR=127.0.0.1:0`
    /// and `env` on top.
    pub async fn start(label: &str, env: &[(&str, &str)]) -> ApiProcess {
        use std::io::{BufRead, BufReader};
        let db = TestDb::new().await.expect("test database");
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cronshard-api"));
        command
            .env("DATABASE_URL", &db.url)
            .env("REDIS_URLS", redis_url())
            .env("AMQP_URL", testing::amqp_url())
            .env("CLUSTER_NAME", unique_cluster(label))
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("LOG_FORMAT", "text")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("starting cronshard-api");
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut api = ApiProcess { child, lines, log: Vec::new(), addr: String::new(), _db: db };
        api.addr = loop {
            let line = api.next_line();
            if let Some(rest) = line.split("addr=").nth(1).filter(|_| line.contains("listening")) {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
        };
        api
    }

    /// The next log line (waits up to 30 s), also kept in `log`.
    pub fn next_line(&mut self) -> String {
        let line =
            plain(&self.lines.recv_timeout(std::time::Duration::from_secs(30)).expect("the API's log went quiet"));
        self.log.push(line.clone());
        line
    }

    /// Stops the process and keeps whatever it logged before.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        while let Ok(line) = self.lines.recv_timeout(std::time::Duration::from_millis(200)) {
            self.log.push(plain(&line));
        }
    }
}

impl Drop for ApiProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A log line without its terminal colours (`ESC [ ... m`).
pub fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
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
