//! Test support: each test gets its own database, cluster name (Redis key
//! prefix and queue names), and a way to await a condition instead of sleeping.
//!
//! Services are found through `TEST_DATABASE_URL` (an admin DSN, default the
//! local `postgres` database), `TEST_REDIS_URL` and `TEST_AMQP_URL`.

pub mod proxy;

use std::future::Future;
use std::time::Duration;

use uuid::Uuid;

pub fn admin_database_url() -> String {
    std::env::var("TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn redis_url() -> String {
    std::env::var("TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub fn amqp_url() -> String {
    std::env::var("TEST_AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// The key-encryption key tests give the API and the workers (`SECRETS_KEK`):
/// id `test-1`, 32 bytes of 0x2a. A test of rotation or of a wrong key makes its own.
pub const TEST_SECRETS_KEK: &str = "test-1:KioqKioqKioqKioqKioqKioqKioqKioqKioqKioqKio=";

/// The keyring of [`TEST_SECRETS_KEK`].
pub fn test_keyring() -> store::secrets::Keyring {
    store::secrets::Keyring::parse(TEST_SECRETS_KEK).expect("the test key parses")
}

/// A unique cluster name: isolates Redis keys and RabbitMQ queues per test.
pub fn unique_cluster(label: &str) -> String {
    format!("t-{label}-{}", &Uuid::new_v4().simple().to_string()[..12])
}

/// A freshly created and migrated database, dropped when this value is.
pub struct TestDb {
    pub name: String,
    pub url: String,
}

impl TestDb {
    pub async fn new() -> anyhow::Result<Self> {
        let admin = admin_database_url();
        let name = format!("cronshard_test_{}", Uuid::new_v4().simple());
        let url = with_database(&admin, &name);
        store::db::migrate(&url).await?;
        Ok(Self { name, url })
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let admin = admin_database_url();
        let name = self.name.clone();
        // Drop runs outside any runtime guarantee; a thread with its own
        // runtime works whether or not the test's runtime is still alive.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok()?;
            rt.block_on(async move {
                let client = store::db::connect(&admin).await.ok()?;
                client.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).await.ok()
            })
        })
        .join();
    }
}

/// Replaces the database name in a Postgres URL.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let root = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{root}/{name}?{q}"),
        None => format!("{root}/{name}"),
    }
}

/// Polls `check` until it returns `Some`, or fails after `timeout` with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Runs `command` until it exits or `limit` has passed (then kills it), and
/// returns its exit status (`None` when it was killed) and everything it
/// wrote to stdout and stderr. The output goes through files, so a chatty
/// process never blocks on a full pipe.
pub fn output_within(
    command: &mut std::process::Command,
    limit: Duration,
) -> std::io::Result<(Option<std::process::ExitStatus>, String)> {
    let dir = std::env::temp_dir();
    let id = Uuid::new_v4().simple();
    let paths = [dir.join(format!("cronshard-{id}.out")), dir.join(format!("cronshard-{id}.err"))];
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&paths[0])?)
        .stderr(std::fs::File::create(&paths[1])?)
        .spawn()?;
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if std::time::Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut output = String::new();
    for path in &paths {
        output.push_str(&String::from_utf8_lossy(&std::fs::read(path)?));
        let _ = std::fs::remove_file(path);
    }
    Ok((status, output))
}

/// A service binary's command with every connection string carrying
/// `secret` as its password (services on unreachable loopback ports) and
/// debug logging: what the CLI tests run to check that no secret shows.
pub fn command_with_secret_env(binary: &str, secret: &str) -> std::process::Command {
    let mut c = std::process::Command::new(binary);
    c.env("DATABASE_URL", format!("postgres://app:{secret}@127.0.0.1:1/cronshard"))
        .env("REDIS_URLS", format!("redis://:{secret}@127.0.0.1:1"))
        .env("AMQP_URL", format!("amqp://app:{secret}@127.0.0.1:1/%2f"))
        .env("RUST_LOG", "debug");
    c
}

/// `--help` output that succeeded, names the connection variables
/// without their values, shows no `secret`, and shows `visible` (an env
/// value that is not a secret, proving values are shown where allowed).
pub fn assert_help_hides_secrets(status: Option<std::process::ExitStatus>, out: &str, secret: &str, visible: &str) {
    assert_help_hides_secret_values(status, out, secret, &["DATABASE_URL", "REDIS_URLS", "AMQP_URL"], visible);
}

/// The same for any binary: `--help` succeeded, lists each variable of
/// `names` without its value, shows no `secret`, and shows `visible`.
pub fn assert_help_hides_secret_values(
    status: Option<std::process::ExitStatus>,
    out: &str,
    secret: &str,
    names: &[&str],
    visible: &str,
) {
    assert!(status.is_some_and(|s| s.success()), "{out}");
    assert!(!out.contains(secret), "--help shows a secret:\n{out}");
    for name in names {
        assert!(out.contains(&format!("[env: {name}]")), "{name} is not listed:\n{out}");
    }
    assert!(out.contains(visible), "{out}");
}

/// SplitMix64: a seeded sequence for randomized tests and scenarios (print
/// the seed, so a failure replays), without a `rand` dependency.
pub struct SeededRng(u64);

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 for n = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1).max(1) as u64) as i64
    }

    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// A child generator, so each task draws its own repeatable stream.
    pub fn fork(&mut self) -> Self {
        Self(self.next_u64())
    }
}

/// A scheduled fire message of a new job for `target`, due at its slot `at`
/// (unit tests that publish or deliver one).
pub fn fire_message(target: domain::job::Target, at: chrono::DateTime<chrono::Utc>) -> domain::message::FireMessage {
    let job_id = Uuid::now_v7();
    domain::message::FireMessage {
        v: domain::message::FIRE_MESSAGE_VERSION,
        fire_id: Uuid::now_v7(),
        job_id,
        namespace: "default".to_owned(),
        scheduled_at: at,
        due_at: at,
        execution_id: domain::execution::execution_id(job_id, at),
        trigger: domain::slot::Trigger::Schedule,
        target,
        retry: None,
        overlap: Default::default(),
        retry_from: 0,
        misfire: None,
        starting_deadline_ms: None,
        completion: None,
        after_completion: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaces_database_name() {
        assert_eq!(super::with_database("postgres://u@h:5432/postgres", "x"), "postgres://u@h:5432/x");
        assert_eq!(super::with_database("postgres://u@h/db?sslmode=disable", "x"), "postgres://u@h/x?sslmode=disable");
        assert_eq!(super::with_database("postgres://u@h", "x"), "postgres://u@h/x");
    }
}

/// A delivery as a receiver got it: its headers (lower-case names) and the
/// body's bytes.
#[derive(Debug, Clone)]
pub struct SignedRequest {
    pub headers: std::collections::BTreeMap<String, String>,
    pub body: Vec<u8>,
}

/// What the Standard Webhooks reference library for Python says of each
/// request under `secret`, with its clock `shift_secs` ahead: `Ok` or the
/// library's refusal. The library runs from the venv that
/// `deploy/scripts/services.sh ensure verifier` makes (`VERIFIER_VENV`).
pub fn verify_webhooks(secret: &str, requests: &[SignedRequest], shift_secs: i64) -> Vec<Result<(), String>> {
    use base64::Engine as _;
    use std::io::Write as _;
    let venv = std::env::var("VERIFIER_VENV").unwrap_or_else(|_| {
        let cache = std::env::var("XDG_CACHE_HOME")
            .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
        format!("{cache}/cronshard/verifier-venv")
    });
    let python = format!("{venv}/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "the Standard Webhooks verifier is missing ({python}): run `deploy/scripts/services.sh ensure verifier`"
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/verify_webhooks.py");
    let mut child = std::process::Command::new(&python)
        .args([script, secret, &shift_secs.to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the verifier starts");
    let mut input = String::new();
    for r in requests {
        let line = serde_json::json!({
            "headers": r.headers,
            "body_b64": base64::engine::general_purpose::STANDARD.encode(&r.body),
        });
        input.push_str(&line.to_string());
        input.push('\n');
    }
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("the verifier reads");
    let out = child.wait_with_output().expect("the verifier runs");
    assert!(out.status.success(), "the verifier failed: {}", String::from_utf8_lossy(&out.stderr));
    let verdicts: Vec<Result<(), String>> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| if l == "ok" { Ok(()) } else { Err(l.to_owned()) })
        .collect();
    assert_eq!(verdicts.len(), requests.len(), "one verdict per request");
    verdicts
}
