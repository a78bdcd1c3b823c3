//! `cronshard`, the command-line client of the cronshard REST API: jobs
//! and their history, executions, calendars, signing keys, the audit log,
//! alert channels, rules and incidents, the cluster and schedule previews,
//! shown as tables for people or as the API's JSON (or YAML) for scripts,
//! with exit codes that tell the kinds of failure apart (`failure::Exit`).
//! It speaks HTTP only; docs/cli.md is its guide.

pub mod args;
mod client;
mod commands;
pub mod failure;
mod input;
mod output;
// What the workspace shares about showing text (the domain crate, which
// links no database, Redis or broker client): URLs shown with their secrets
// masked, and the characters never printed raw.
use domain::{redact, text};

use std::io::Write;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::failure::{Exit, Failure};

/// Runs the command line of this process; returns the exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Usage errors exit 2, --help and --version 0 (clap's codes).
            let _ = e.print();
            return e.exit_code();
        }
    };
    match run(cli) {
        Ok(out) => match std::io::stdout().lock().write_all(out.as_bytes()) {
            Ok(()) => Exit::Ok as i32,
            // A reader that stopped early (`| head`) is not a failure.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Exit::Ok as i32,
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

fn run(cli: Cli) -> Result<String, Failure> {
    if let Command::Completions { shell } = cli.command {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut args::command(), "cronshard", &mut out);
        return String::from_utf8(out).map_err(|e| Failure::other(e.to_string()));
    }
    let ctx = commands::Ctx {
        api: client::Api::new(&cli.global.url, cli.global.token)?.with_reason(cli.global.reason.as_deref())?,
        format: cli.global.output,
        namespace: cli.global.namespace.filter(|n| !n.is_empty()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::other(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(commands::run(&ctx, cli.command))
}
