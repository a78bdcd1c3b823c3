//! `cronshard`, the command-line client of the cronshard REST API: jobs
//! and their history, jobs as code (`apply`, `diff`), backfills, executions,
//! calendars, signing keys, the audit log, alert channels, rules and
//! incidents, the cluster and schedule previews, shown as tables for people
//! or as the API's JSON (or YAML) for scripts, with exit codes that tell the
//! kinds of failure apart (`failure::Exit`). Settings come from flags, the
//! environment or a context of the config file (`config`). It speaks HTTP
//! only; docs/cli.md is its guide.

pub mod args;
mod client;
mod commands;
mod config;
pub mod failure;
mod input;
mod output;
// What the workspace shares about showing text (the domain crate, which
// links no database, Redis or broker client): URLs shown with their secrets
// masked, and the characters never printed raw.
use domain::{redact, text};

use std::io::Write;

use clap::FromArgMatches;

use crate::args::{Cli, Command};
use crate::failure::{Exit, Failure};

/// Runs the command line of this process; returns the exit code.
pub fn main() -> i32 {
    // Usage errors exit 2, --help and --version 0 (clap's codes).
    let parsed = args::command().try_get_matches().and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run(cli, &matches) {
        Ok(done) => match std::io::stdout().lock().write_all(done.out.as_bytes()) {
            Ok(()) => done.exit as i32,
            // A reader that stopped early (`| head`) is not a failure.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => done.exit as i32,
            Err(e) => {
                eprintln!("error: cannot write the output: {e}");
                Exit::Other as i32
            }
        },
        Err(failure) => {
            eprintln!("{failure}");
            failure.exit as i32
        }
    }
}

fn run(cli: Cli, matches: &clap::ArgMatches) -> Result<commands::Done, Failure> {
    match cli.command {
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut args::command(), "cronshard", &mut out);
            return String::from_utf8(out).map(Into::into).map_err(|e| Failure::other(e.to_string()));
        }
        // The config file's own commands need no API (and no context).
        Command::Config(command) => return commands::config::run(&cli.global, matches, command).map(Into::into),
        _ => {}
    }
    let settings = config::settings(&cli.global)?;
    let ctx = commands::Ctx {
        api: client::Api::new(&settings.url, settings.token)?.with_reason(cli.global.reason.as_deref())?,
        format: settings.format,
        namespace: settings.namespace,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::other(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(commands::run(&ctx, cli.command))
}
