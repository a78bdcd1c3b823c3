//! The `cronshard-api` binary as an operator meets it: `--help` and the
//! errors at startup never show a secret from the environment (the
//! connection strings' passwords, the bearer tokens).

use std::process::Command;
use std::time::Duration;

const SECRET: &str = "Sk-api-41c7d2";

fn api() -> Command {
    let mut c = testing::command_with_secret_env(env!("CARGO_BIN_EXE_cronshard-api"), SECRET);
    c.env("REDIS_URLS", format!("redis://:{SECRET}@127.0.0.1:1,redis://u:{SECRET}@127.0.0.1:2"))
        .env("API_TOKENS", format!("{SECRET},other-{SECRET}"))
        .env("LISTEN_ADDR", "127.0.0.1:0");
    c
}

fn run(c: &mut Command) -> (Option<std::process::ExitStatus>, String) {
    testing::output_within(c, Duration::from_secs(20)).expect("running cronshard-api")
}

#[test]
fn help_shows_which_variables_are_read_but_not_their_secret_values() {
    for args in [&["--help"][..], &["-h"], &["migrate", "--help"], &["serve", "--help"]] {
        let (status, out) = run(api().args(args));
        assert!(status.is_some_and(|s| s.success()), "{args:?}: {out}");
        assert!(!out.contains(SECRET), "{args:?} shows a secret:\n{out}");
        if args.len() == 1 {
            for name in ["DATABASE_URL", "REDIS_URLS", "AMQP_URL", "API_TOKENS"] {
                assert!(out.contains(&format!("[env: {name}]")), "{args:?}: {name} is not listed:\n{out}");
            }
            // A value that is not a secret is still shown.
            assert!(out.contains("[env: LISTEN_ADDR=127.0.0.1:0]"), "{out}");
        }
    }
    // The key-encryption keys are named, never shown.
    let key = testing::TEST_SECRETS_KEK.split_once(':').unwrap().1;
    for args in [&["--help"][..], &["secrets", "rotate", "--help"]] {
        let (status, out) = run(api().env("SECRETS_KEK", testing::TEST_SECRETS_KEK).args(args));
        assert!(status.is_some_and(|s| s.success()), "{args:?}: {out}");
        assert!(!out.contains(key), "{args:?}:\n{out}");
        assert!(args.len() > 1 || out.contains("[env: SECRETS_KEK]"), "{out}");
    }
}

#[test]
fn a_malformed_connection_string_stops_the_api_without_printing_its_password() {
    let cases = [
        ("REDIS_URLS", format!("redis://:{SECRET}@[bad")),
        ("REDIS_URLS", format!("redis://user:{SECRET}@host:notaport")),
        ("DATABASE_URL", format!("postgres://app:{SECRET}@host:notaport/db")),
        ("DATABASE_URL", format!("host=db password={SECRET} port=x")),
    ];
    for (name, value) in cases {
        let (status, out) = run(api().env(name, &value));
        assert!(status.is_some_and(|s| !s.success()), "{name}={value} did not stop the API: {out}");
        assert!(out.contains("Error:"), "{name}={value}: no error shown: {out}");
        assert!(!out.contains(SECRET), "{name}={value}: the error shows the secret:\n{out}");
    }
}

#[test]
fn migrate_against_an_unreachable_database_fails_without_its_password() {
    let (status, out) = run(api().arg("migrate"));
    assert!(status.is_some_and(|s| !s.success()), "{out}");
    assert!(out.contains("Error:"), "{out}");
    assert!(!out.contains(SECRET), "the error shows the secret:\n{out}");
}
