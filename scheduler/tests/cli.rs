//! The `cronshard-scheduler` binary as an operator meets it: `--help`, the
//! errors at startup and the logs of a node that cannot reach its services
//! never show a secret from the environment.

use std::process::Command;
use std::time::Duration;

const SECRET: &str = "Sk-scheduler-3b9f10";

fn scheduler() -> Command {
    let mut c = testing::command_with_secret_env(env!("CARGO_BIN_EXE_cronshard-scheduler"), SECRET);
    c.env("METRICS_ADDR", "127.0.0.1:0").env("NODE_ID", "cli-test");
    c
}

fn run(c: &mut Command, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    testing::output_within(c, limit).expect("running cronshard-scheduler")
}

#[test]
fn help_shows_which_variables_are_read_but_not_their_secret_values() {
    let (status, out) = run(scheduler().arg("--help"), Duration::from_secs(20));
    testing::assert_help_hides_secrets(status, &out, SECRET, "[env: NODE_ID=cli-test]");
}

#[test]
fn a_malformed_connection_string_stops_the_node_without_printing_its_password() {
    let cases = [
        ("REDIS_URLS", format!("redis://:{SECRET}@[bad")),
        ("REDIS_URLS", format!("redis://:{SECRET}@a,redis://:{SECRET}@b,redis://:{SECRET}@c")),
        ("DATABASE_URL", format!("postgres://app:{SECRET}@host:notaport/db")),
    ];
    for (name, value) in cases {
        let (status, out) = run(scheduler().env(name, &value), Duration::from_secs(20));
        assert!(status.is_some_and(|s| !s.success()), "{name}={value} did not stop the node: {out}");
        assert!(out.contains("Error:"), "{name}={value}: no error shown: {out}");
        assert!(!out.contains(SECRET), "{name}={value}: the error shows the secret:\n{out}");
    }
}

/// Nothing reachable: whether the node gives up or keeps trying, what it
/// says holds no password.
#[test]
fn a_node_that_cannot_reach_its_services_says_so_without_the_passwords() {
    let (_, out) = run(&mut scheduler(), Duration::from_secs(4));
    assert!(!out.trim().is_empty(), "the node said nothing");
    assert!(!out.contains(SECRET), "the output shows the secret:\n{out}");
}

#[test]
fn a_longer_retention_of_successes_than_of_failures_stops_the_node_naming_the_flags() {
    let (status, out) = run(scheduler().env("LEDGER_UNSUCCESSFUL_RETENTION_DAYS", "30"), Duration::from_secs(20));
    assert!(status.is_some_and(|s| !s.success()), "the node started: {out}");
    assert!(
        out.contains("--ledger-unsuccessful-retention-days (LEDGER_UNSUCCESSFUL_RETENTION_DAYS) is 30")
            && out.contains("--ledger-retention-days (LEDGER_RETENTION_DAYS) 45"),
        "{out}"
    );
}
