//! The `cronshard-worker` binary as an operator meets it: `--help`, the
//! errors at startup and the logs of a worker that cannot reach its services
//! never show a secret from the environment.

use std::process::Command;
use std::time::Duration;

const SECRET: &str = "Sk-worker-8e05aa";

fn worker() -> Command {
    let mut c = testing::command_with_secret_env(env!("CARGO_BIN_EXE_cronshard-worker"), SECRET);
    c.env("METRICS_ADDR", "127.0.0.1:0");
    c
}

fn run(c: &mut Command, limit: Duration) -> (Option<std::process::ExitStatus>, String) {
    testing::output_within(c, limit).expect("running cronshard-worker")
}

#[test]
fn help_shows_which_variables_are_read_but_not_their_secret_values() {
    let (status, out) = run(worker().arg("--help"), Duration::from_secs(20));
    testing::assert_help_hides_secrets(status, &out, SECRET, "[env: METRICS_ADDR=127.0.0.1:0]");
    // The key-encryption keys are named, never shown.
    let (status, out) =
        run(worker().env("SECRETS_KEK", testing::TEST_SECRETS_KEK).arg("--help"), Duration::from_secs(20));
    let key = testing::TEST_SECRETS_KEK.split_once(':').unwrap().1;
    testing::assert_help_hides_secret_values(status, &out, key, &["SECRETS_KEK"], "[env: METRICS_ADDR=127.0.0.1:0]");
}

#[test]
fn a_malformed_database_url_stops_the_worker_without_printing_its_password() {
    for value in [format!("postgres://app:{SECRET}@host:notaport/db"), format!("host=db password={SECRET} port=x")] {
        let (status, out) = run(worker().env("DATABASE_URL", &value), Duration::from_secs(20));
        assert!(status.is_some_and(|s| !s.success()), "{value} did not stop the worker: {out}");
        assert!(out.contains("Error:"), "{value}: no error shown: {out}");
        assert!(!out.contains(SECRET), "{value}: the error shows the secret:\n{out}");
    }
}

/// Unreachable or unparsable, the broker URL is retried and logged: the
/// logs say what fails, without the password.
#[test]
fn a_worker_that_cannot_reach_its_broker_logs_why_without_the_password() {
    for value in [format!("amqp://app:{SECRET}@127.0.0.1:1/%2f"), format!("amqp://app:{SECRET}@[bad")] {
        let (_, out) = run(worker().env("AMQP_URL", &value), Duration::from_secs(3));
        assert!(out.contains("RabbitMQ"), "{value}: nothing logged about the broker:\n{out}");
        assert!(!out.contains(SECRET), "{value}: the logs show the secret:\n{out}");
    }
}
