//! The CLI's test harness: the real `cronshard` binary against the real API
//! in-process (`TestApp` of the API's tests: own database, own cluster
//! name, ephemeral port) with auth on, a bootstrap token given to the CLI
//! through `CRONSHARD_TOKEN`.
#![allow(dead_code)] // each test binary uses part of it

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use uuid::Uuid;

use crate::app::{Options, TestApp};

/// The API's bootstrap token (an admin of every namespace).
pub const TOKEN: &str = "cli-test-bootstrap-5d1c0a";

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_cronshard"))
}

/// The sample files of `cli/examples/` that the `--help` examples name.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

pub fn example(name: &str) -> String {
    examples_dir().join(name).to_string_lossy().into_owned()
}

/// The repository's `examples/jobs/`: job and calendar files for `apply`.
pub fn jobs_examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/jobs")
}

/// The value `${REPORTS_TOKEN}` of `examples/jobs/nightly-report.yaml` gets.
pub const REPORTS_TOKEN: &str = "reports-secret-7c1e";

/// Copies the files of `from` (not its subdirectories) into `to`.
pub fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

pub struct Stack {
    pub app: TestApp,
}

impl Stack {
    pub async fn start(label: &str) -> Stack {
        Stack::start_with(label, Options::default()).await
    }

    pub async fn start_with(label: &str, mut opts: Options) -> Stack {
        opts.tokens = vec![TOKEN.to_owned()];
        Stack { app: TestApp::start_with(label, opts).await }
    }

    /// A stack whose jobs may call loopback addresses (`CALLBACK_ALLOW_CIDRS=127.0.0.0/8`,
    /// as `deploy/up.sh` runs it), as the files of `examples/jobs/` do.
    pub async fn start_loopback(label: &str) -> Stack {
        let limits = domain::job::Limits {
            allow_cidrs: domain::netguard::parse_allow_list("127.0.0.0/8").unwrap(),
            ..Default::default()
        };
        Stack::start_with(label, Options { job_limits: limits, ..Default::default() }).await
    }

    pub fn base(&self) -> String {
        self.app.url("")
    }

    /// The CLI with this stack's URL and the bootstrap token in its environment.
    pub fn cli(&self) -> Cli {
        Cli::new().env("CRONSHARD_URL", &self.base()).env("CRONSHARD_TOKEN", TOKEN)
    }

    /// A request to the API with the bootstrap token.
    pub fn authed(&self, rb: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        rb.bearer_auth(TOKEN)
    }

    /// Makes the namespace `name` (POST /v1/namespaces), expecting 201.
    pub async fn namespace(&self, name: &str) {
        let post = self.app.http.post(self.app.url("/v1/namespaces"));
        let made = self.app.send(self.authed(post).json(&serde_json::json!({ "name": name }))).await;
        assert_eq!(made.status, 201, "POST /v1/namespaces {name}: {}", made.text);
    }

    /// GET /v1/jobs/{id} with the bootstrap token, expecting 200.
    pub async fn job(&self, id: &str) -> Value {
        let r = self.app.send(self.authed(self.app.http.get(self.app.url(&format!("/v1/jobs/{id}"))))).await;
        assert_eq!(r.status, 200, "GET job {id}: {}", r.text);
        r.json()
    }

    /// Creates a job through the CLI (`-o json`); returns it.
    pub async fn create(&self, file: &str) -> Value {
        self.cli().args(["-o", "json", "jobs", "create", "-f", file]).ok().await.json()
    }

    /// Creates a job from a JSON definition through the CLI's stdin; returns its id.
    pub async fn create_json(&self, job: &Value) -> String {
        let out = self.cli().args(["-o", "json", "jobs", "create", "-f", "-"]).stdin(job.to_string()).ok().await;
        out.json()["id"].as_str().expect("id").to_owned()
    }

    /// A ledger row written straight into the test's database.
    pub async fn insert_row(&self, job: &str, at: DateTime<Utc>, status: &str, error: Option<&str>) {
        let id = Uuid::parse_str(job).unwrap();
        let execution_id = format!("{job}@{}", at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        self.app
            .sql()
            .await
            .execute(
                "INSERT INTO scheduled_jobs (job_id, scheduled_at, fire_id, execution_id, status, attempts, error,
                                             http_status, fired_at, started_at, finished_at)
                 VALUES ($1, $2, $3, $4, $5, 1, $6, CASE WHEN $6::text IS NULL THEN 200 ELSE 503 END, $2, $2,
                         $2::timestamptz + interval '1 s')",
                &[&id, &at, &Uuid::new_v4(), &execution_id, &status, &error],
            )
            .await
            .expect("inserting a ledger row");
    }

    /// A ledger row of `job` at `at` whose attempt 1 answered 202 and
    /// awaits its receiver's report for an hour; returns its execution id
    /// and that attempt's completion token.
    pub async fn insert_awaiting_row(&self, job: &str, at: DateTime<Utc>) -> (String, String) {
        self.insert_row(job, at, "running", None).await;
        let id = Uuid::parse_str(job).unwrap();
        self.app
            .sql()
            .await
            .execute(
                "UPDATE scheduled_jobs SET awaiting_until = now() + interval '1 hour', http_status = 202,
                        finished_at = NULL
                 WHERE job_id = $1 AND scheduled_at = $2",
                &[&id, &at],
            )
            .await
            .expect("marking the row awaiting");
        let execution_id = format!("{job}@{}", at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        let token = store::completion::token(&testing::test_keyring(), &execution_id, 1).unwrap();
        (execution_id, token)
    }
}

/// One run of the binary, built up like `std::process::Command`.
pub struct Cli {
    args: Vec<String>,
    env: Vec<(String, String)>,
    stdin: Option<String>,
    dir: Option<PathBuf>,
}

/// What a run did.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {self:?}"))
    }

    /// stdout's lines.
    pub fn lines(&self) -> Vec<&str> {
        self.stdout.lines().collect()
    }

    /// The value of a `KEY:  value` line of a field view.
    pub fn field(&self, key: &str) -> String {
        let prefix = format!("{key}:");
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {key} in {self:?}"))
            .trim()
            .to_owned()
    }
}

impl Default for Cli {
    fn default() -> Self {
        Self::new()
    }
}

impl Cli {
    pub fn new() -> Cli {
        Cli { args: Vec::new(), env: Vec::new(), stdin: None, dir: None }
    }

    pub fn args<I, S>(mut self, args: I) -> Cli
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Cli {
        self.env.push((key.to_owned(), value.to_owned()));
        self
    }

    pub fn stdin(mut self, text: String) -> Cli {
        self.stdin = Some(text);
        self
    }

    pub fn dir(mut self, dir: &Path) -> Cli {
        self.dir = Some(dir.to_owned());
        self
    }

    /// Runs `program` (the CLI unless told otherwise) with these arguments.
    pub async fn run_program(self, program: &Path) -> Run {
        let mut command = tokio::process::Command::new(program);
        command
            .args(&self.args)
            .env_remove("CRONSHARD_URL")
            .env_remove("CRONSHARD_TOKEN")
            .env_remove("CRONSHARD_OUTPUT")
            .env_remove("CRONSHARD_NAMESPACE")
            .env_remove("CRONSHARD_CHANNEL_URL")
            .env_remove("CRONSHARD_COMPLETION_TOKEN")
            .env_remove("CRONSHARD_CONTEXT")
            .env_remove("XDG_CONFIG_HOME")
            // No config file of this machine's: a test that wants one names it.
            .env("CRONSHARD_CONFIG", "/nonexistent/cronshard-cli-tests/config.yaml")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(if self.stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(dir) = &self.dir {
            command.current_dir(dir);
        }
        let mut child = command.spawn().unwrap_or_else(|e| panic!("spawning {}: {e}", program.display()));
        if let Some(text) = self.stdin {
            let mut stdin = child.stdin.take().expect("piped stdin");
            stdin.write_all(text.as_bytes()).await.expect("writing stdin");
        }
        let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("{:?} did not finish within 60 s", self.args))
            .expect("waiting for the CLI");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    pub async fn run(self) -> Run {
        self.run_program(&binary()).await
    }

    /// Runs and expects exit code 0.
    pub async fn ok(self) -> Run {
        let args = self.args.clone();
        let run = self.run().await;
        assert_eq!(run.code, 0, "cronshard {args:?} failed: {run:?}");
        run
    }

    /// Runs and expects exit code `code`.
    pub async fn fails(self, code: i32) -> Run {
        let args = self.args.clone();
        let run = self.run().await;
        assert_eq!(run.code, code, "cronshard {args:?}: expected exit code {code}: {run:?}");
        assert!(run.stderr.starts_with("error: "), "no error message on stderr: {run:?}");
        run
    }
}

/// A fresh directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("cronshard-cli-{label}-{}", Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("creating a temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
