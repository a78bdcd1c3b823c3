//! Each DST rule on the real stack, across a real transition: a cluster
//! whose every process (its own Postgres included) runs under libfaketime
//! with the wall clock set to 40 s before Berlin's clocks change, so the
//! scheduler and the worker fire the transition's slots as they would that
//! night. Every slot in the 15 s on either side is delivered once, at the
//! instants the rule names, and the ledger holds no other; the API's `next`
//! lists the same instants.
//!
//! The processes share one clock offset (libfaketime's relative form), and
//! the database's clock moves with theirs: each process corrects its clock
//! against the database's, so a shifted process beside the machine's
//! Postgres would be corrected back to the present. Redis and RabbitMQ stay
//! the machine's: they only count relative times (lock and message TTLs).
//!
//! Needs libfaketime (`deploy/scripts/services.sh ensure faketime`) and
//! PostgreSQL's server binaries (which the machine's Postgres has).

#[path = "support/lib.rs"]
mod support;

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use support::{ProcEnv, Sink, free_addr, http_target, libfaketime};
use testing::wait_for;

fn utc(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// The environment that sets a process's wall clock `offset_s` seconds
/// from the real one.
fn fake_clock(offset_s: i64) -> [(&'static str, String); 3] {
    [
        ("LD_PRELOAD", libfaketime()),
        ("FAKETIME", format!("{offset_s:+}")),
        // Timers and timeouts keep real time.
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
    ]
}

fn faked(cmd: &mut tokio::process::Command, offset_s: i64) {
    cmd.envs(fake_clock(offset_s));
}

/// A PostgreSQL server of this test's own, in a temporary directory, as the
/// `postgres` user when the test runs as root (the server refuses root).
struct PrivatePostgres {
    dir: PathBuf,
    port: u16,
    _server: tokio::process::Child,
}

fn postgres_bin(name: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL's server binaries under /usr/lib/postgresql (deploy/scripts/services.sh ensure)")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("postgres").exists())
        .collect();
    versions.sort_by_key(|p| p.to_string_lossy().split('/').nth(4).and_then(|v| v.parse::<u32>().ok()));
    versions.pop().expect("a PostgreSQL server version").join(name)
}

fn as_root() -> bool {
    std::process::Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// `program` with `env`, as the `postgres` user when we are root.
fn as_postgres(program: PathBuf, env: &[(&str, String)]) -> tokio::process::Command {
    if as_root() {
        // setpriv and env exec the program in their place, so killing the
        // child kills the server. The environment is set by `env`, after the
        // switch: libfaketime loaded into setpriv (root) would make state
        // the server (postgres) may not open.
        let mut c = tokio::process::Command::new("setpriv");
        c.args(["--reuid", "postgres", "--regid", "postgres", "--init-groups", "--", "env"]);
        c.args(env.iter().map(|(k, v)| format!("{k}={v}"))).arg(program);
        c
    } else {
        let mut c = tokio::process::Command::new(program);
        c.envs(env.iter().cloned());
        c
    }
}

impl PrivatePostgres {
    /// A fresh cluster, and its server started with the wall clock `offset_s`
    /// seconds from the real one.
    async fn start(offset_s: i64) -> Self {
        let dir = std::env::temp_dir().join(format!("cronshard-dst-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        if as_root() {
            let chown = std::process::Command::new("chown").arg("postgres:").arg(&dir).status().unwrap();
            assert!(chown.success(), "chown of {}", dir.display());
        }
        let data = dir.join("data");
        let initdb = as_postgres(postgres_bin("initdb"), &[])
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
            .stdout(std::process::Stdio::null())
            .status()
            .await
            .unwrap();
        assert!(initdb.success(), "initdb in {}", dir.display());
        let port: u16 = free_addr().rsplit(':').next().unwrap().parse().unwrap();
        let server = as_postgres(postgres_bin("postgres"), &fake_clock(offset_s))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .arg("-k")
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.join("server.log")).unwrap())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pg = PrivatePostgres { dir, port, _server: server };
        let admin = pg.url("postgres");
        let log = pg.dir.join("server.log");
        let ready = tokio::time::timeout(Duration::from_secs(30), async {
            while store::db::connect(&admin).await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        assert!(
            ready.await.is_ok(),
            "the private Postgres did not start: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        pg
    }

    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // The server is killed with its handle (declared last, dropped after this).
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// API, scheduler and worker binaries on the private Postgres, all under
/// one clock offset.
struct FakedStack {
    /// Seconds the stack's clocks are from the real one.
    offset_s: i64,
    api: String,
    http: reqwest::Client,
    cluster: String,
    database_url: String,
    _children: Vec<tokio::process::Child>,
    // Last: the server stops after the processes that use it.
    _pg: PrivatePostgres,
}

impl FakedStack {
    /// A stack whose clocks read `now` at the start.
    async fn start(label: &str, now: DateTime<Utc>) -> Self {
        let offset_s = (now - Utc::now()).num_seconds();
        let pg = PrivatePostgres::start(offset_s).await;
        let cluster = testing::unique_cluster(label);
        let database_url = pg.url("cronshard_dst");
        let env =
            ProcEnv { database_url: database_url.clone(), cluster: cluster.clone(), redis_urls: testing::redis_url() };
        let mut migrate = env.command("cronshard-api");
        faked(&mut migrate, offset_s);
        let migrated = migrate.arg("migrate").status().await.unwrap();
        assert!(migrated.success(), "cronshard-api migrate on the private Postgres");

        let api_addr = free_addr();
        let mut api = env.command("cronshard-api");
        api.env("LISTEN_ADDR", &api_addr).env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8");
        let mut scheduler = env.scheduler_command("dst-node");
        let mut worker = env.command("cronshard-worker");
        worker.env("WORKER_ID", "dst-worker").env("CALLBACK_ALLOW_CIDRS", "127.0.0.0/8");
        let mut children = Vec::new();
        for cmd in [&mut api, &mut scheduler, &mut worker] {
            faked(cmd, offset_s);
            children.push(cmd.spawn().unwrap());
        }
        let stack = FakedStack {
            offset_s,
            api: format!("http://{api_addr}"),
            http: reqwest::Client::new(),
            cluster,
            database_url,
            _children: children,
            _pg: pg,
        };
        wait_for("the scheduler node to join", Duration::from_secs(60), || async {
            let cluster: Value =
                stack.http.get(format!("{}/v1/cluster", stack.api)).send().await.ok()?.json().await.ok()?;
            cluster["nodes"].as_array()?.iter().any(|n| n["node_id"] == "dst-node").then_some(())
        })
        .await;
        stack
    }

    /// The stack's time.
    fn now(&self) -> DateTime<Utc> {
        Utc::now() + TimeDelta::seconds(self.offset_s)
    }

    async fn create_job(&self, body: &Value) -> Value {
        let r = self.http.post(format!("{}/v1/jobs", self.api)).json(body).send().await.unwrap();
        let status = r.status();
        let job: Value = r.json().await.unwrap();
        assert_eq!(status, 201, "{job}");
        job
    }

    /// The job's fire times at or after `from` up to `until`, by the API.
    async fn next(&self, job_id: &str, from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let from = from.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let url = format!("{}/v1/jobs/{job_id}/next?count=20&from={}", self.api, from.replace('+', "%2B"));
        let body: Value = self.http.get(url).send().await.unwrap().json().await.unwrap();
        let fires = body["fire_times"].as_array().unwrap_or_else(|| panic!("no fire times: {body}"));
        fires.iter().map(|f| utc(f["at"].as_str().unwrap())).take_while(|t| *t <= until).collect()
    }

    /// The slots the ledger holds for the job in [from, until].
    async fn ledger(&self, job_id: &str, from: DateTime<Utc>, until: DateTime<Utc>) -> Vec<DateTime<Utc>> {
        let client = store::db::connect(&self.database_url).await.unwrap();
        let id: uuid::Uuid = job_id.parse().unwrap();
        let rows = client
            .query(
                "SELECT scheduled_at FROM scheduled_jobs WHERE job_id = $1 AND scheduled_at BETWEEN $2 AND $3
                 ORDER BY scheduled_at",
                &[&id, &from, &until],
            )
            .await
            .unwrap();
        rows.iter().map(|r| r.get(0)).collect()
    }

    async fn stop(self) {
        // The broker is shared by every run: leave nothing behind.
        let _ = broker::amqp::Topology::new(&self.cluster).delete_at(&testing::amqp_url()).await;
    }
}

/// One job of a scenario: its name (the sink's path), its `dst` rule and
/// the slots it must fire in the window.
struct Case {
    name: &'static str,
    dst: Option<Value>,
    want: Vec<DateTime<Utc>>,
}

/// Creates each case's job on `schedule` (exprs in Berlin, plus its rule),
/// checks `next` against the expectation, then that the stack delivers
/// exactly the expected slots in [from, until], each once, and records no
/// other.
async fn run(
    stack: &FakedStack,
    sink: &Sink,
    exprs: &[&str],
    cases: &[Case],
    from: DateTime<Utc>,
    until: DateTime<Utc>,
) {
    let mut ids = Vec::new();
    for case in cases {
        let mut schedule = json!({ "kind": "cron", "exprs": exprs, "timezone": "Europe/Berlin" });
        if let Some(dst) = &case.dst {
            schedule["dst"] = dst.clone();
        }
        let job = stack
            .create_job(
                &json!({ "name": case.name, "schedule": schedule, "target": http_target(&sink.url(case.name)) }),
            )
            .await;
        let created_at = utc(job["created_at"].as_str().unwrap());
        assert!(
            created_at < from,
            "the stack took too long to start: {} created at {created_at}, after {from}",
            case.name
        );
        let id = job["id"].as_str().unwrap().to_owned();
        assert_eq!(stack.next(&id, from, until).await, case.want, "{}: next", case.name);
        ids.push(id);
    }
    let received = |name: &str| -> Vec<DateTime<Utc>> {
        let mut at: Vec<DateTime<Utc>> = sink.received_on(name).iter().map(|r| utc(&r.scheduled_at)).collect();
        at.sort();
        at
    };
    let last = cases.iter().filter_map(|c| c.want.last()).max().copied().unwrap_or(until);
    // Until the last slot by the stack's clock, and some for its delivery.
    let wait = (last - stack.now()).to_std().unwrap_or_default() + Duration::from_secs(30);
    let all_delivered = || cases.iter().all(|c| c.want.iter().all(|t| received(c.name).contains(t)));
    let delivered = tokio::time::timeout(wait, async {
        while !all_delivered() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if delivered.is_err() {
        let got: Vec<String> = cases.iter().map(|c| format!("{}: {:?}", c.name, received(c.name))).collect();
        panic!("not every expected slot was delivered by {} (stack time):\n{}", stack.now(), got.join("\n"));
    }
    for (case, id) in cases.iter().zip(&ids) {
        let got: Vec<DateTime<Utc>> = received(case.name).into_iter().filter(|t| *t >= from && *t <= until).collect();
        assert_eq!(got, case.want, "{}: deliveries, each once", case.name);
        // Every slot up to the last one delivered has been claimed by now:
        // the ledger shows no slot the rule does not name.
        assert_eq!(stack.ledger(id, from - TimeDelta::minutes(2), until).await, case.want, "{}: ledger", case.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a private Postgres and cluster under libfaketime, about a minute: run with `./deploy/test.sh --run-ignored all`"]
async fn each_repeated_rule_fires_its_occurrences_across_berlins_fall_back() {
    // 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00Z, so 02:00-02:59
    // happens at 00:00Z-01:00Z and again at 01:00Z-02:00Z.
    let t = utc("2026-10-25T01:00:00Z");
    let at = |s: i64| t + TimeDelta::seconds(s);
    let sink = Sink::start().await;
    let stack = FakedStack::start("dst-fall", t - TimeDelta::seconds(40)).await;
    // 02:59:45-02:59:55 (first pass: the seconds before t) and 02:00:00-02:00:10
    // (second pass: the seconds after t), every 5 s.
    let exprs = ["45-55/5 59 2 * * *", "0-10/5 0 2 * * *"];
    let first = vec![at(-15), at(-10), at(-5)];
    let last = vec![at(0), at(5), at(10)];
    let both = [first.clone(), last.clone()].concat();
    let cases = [
        Case { name: "default", dst: None, want: first.clone() },
        Case { name: "first", dst: Some(json!({ "repeated": "first" })), want: first },
        Case { name: "last", dst: Some(json!({ "repeated": "last" })), want: last },
        Case { name: "both", dst: Some(json!({ "repeated": "both" })), want: both },
    ];
    run(&stack, &sink, &exprs, &cases, at(-15), at(15)).await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a private Postgres and cluster under libfaketime, about a minute: run with `./deploy/test.sh --run-ignored all`"]
async fn each_missing_rule_fires_or_skips_the_gap_across_berlins_spring_forward() {
    // 2027-03-28: 02:00 CET becomes 03:00 CEST at 01:00Z; 02:00-02:59 does
    // not exist.
    let t = utc("2027-03-28T01:00:00Z");
    let at = |s: i64| t + TimeDelta::seconds(s);
    let sink = Sink::start().await;
    let stack = FakedStack::start("dst-spring", t - TimeDelta::seconds(40)).await;
    // 01:59:45-01:59:55 (the seconds before t), every 5 s of the missing
    // hour, and 03:00:05 and 03:00:10 (after t; 03:00:00 itself is not named).
    let exprs = ["45-55/5 59 1 * * *", "*/5 * 2 * * *", "5,10 0 3 * * *"];
    let before = [at(-15), at(-10), at(-5)];
    let after = [at(5), at(10)];
    let cases = [
        Case {
            name: "shift",
            dst: Some(json!({ "missing": "shift" })),
            want: [&before[..], &[at(0)], &after].concat(),
        },
        Case { name: "skip", dst: Some(json!({ "missing": "skip" })), want: [&before[..], &after].concat() },
    ];
    run(&stack, &sink, &exprs, &cases, at(-15), at(15)).await;
    stack.stop().await;
}
