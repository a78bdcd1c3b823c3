//! `cronshard-loadtest`: drives a running stack through its public API and
//! measures at a real HTTP receiver it runs itself.
//!
//! - `sink`: the callback receiver alone. Logs each delivery as a JSON line
//!   (execution id, scheduled time, attempt, lateness) and serves what it got
//!   at `GET /deliveries`, so demos and tests can read it back.

mod sink;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(version, about = "Load generator and callback sink for cronshard")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the callback receiver until Ctrl-C.
    Sink(sink::SinkArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Sink(args) => sink::run(args).await,
    }
}
