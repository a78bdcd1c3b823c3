//! The `churn` scenario at CI size: 12 jobs changed near their slots for
//! 35 s while schedulers are killed and added, every slot judged against the
//! model. The stack is this build's binaries, which sit beside the load
//! generator's, so `cargo build --workspace --bins` must have run
//! (deploy/test.sh does). Services come from `TEST_DATABASE_URL`,
//! `TEST_REDIS_URL` and `TEST_AMQP_URL`, as for every other test.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

#[test]
fn churn_keeps_every_slot() {
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_cronshard-loadtest"));
    let bin_dir = exe.parent().expect("the binary's directory").to_path_buf();
    for bin in ["cronshard-api", "cronshard-scheduler", "cronshard-worker"] {
        assert!(
            bin_dir.join(bin).exists(),
            "{} is missing: run `cargo build --workspace --bins` first",
            bin_dir.join(bin).display()
        );
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("churn");
    let mut cmd = Command::new(&exe);
    cmd.arg("churn")
        .args(["--jobs", "12", "--seconds", "35", "--kill-nodes", "true"])
        // Bounds the run at about 2 minutes when slots are lost (a killed
        // node's jobs wait out its 30 s heartbeat before moving).
        .args(["--settle-seconds", "60"])
        .arg("--bin-dir")
        .arg(&bin_dir)
        .args(["--admin-database-url", &testing::admin_database_url()])
        .arg("--out")
        .arg(&out)
        .args(["--name", "churn-ci"]);
    // The stack's processes inherit the environment: point them at the test services.
    if let Ok(url) = std::env::var("TEST_REDIS_URL") {
        cmd.env("REDIS_URLS", url);
    }
    if let Ok(url) = std::env::var("TEST_AMQP_URL") {
        cmd.env("AMQP_URL", url);
    }
    let started = Instant::now();
    let output = cmd.output().expect("running cronshard-loadtest churn");
    let took = started.elapsed();
    println!("{}", String::from_utf8_lossy(&output.stdout));
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    println!("churn took {:.1} s", took.as_secs_f64());
    assert!(
        output.status.success(),
        "churn failed ({}) after {:.1} s: see its output above",
        output.status,
        took.as_secs_f64()
    );
}
