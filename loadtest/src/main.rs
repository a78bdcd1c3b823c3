//! `cronshard-loadtest`: drives a running stack through its public API and
//! measures at a real HTTP receiver it runs itself.
//!
//! - `sink`: the callback receiver alone. Logs each delivery as a JSON line
//!   (execution id, scheduled time, attempt, lateness) and serves what it got
//!   at `GET /deliveries`, so demos and tests can read it back.
//! - `startup`: a scheduler node starting on N jobs (time to first fire,
//!   memory per owned job).
//! - `rebalance`: ownership movement when scaling the cluster.
//! - `deliver`: worker throughput against a local receiver.
//! - `api`: REST API creates/s and GET latency under client load.
//! - `herd`: N one-shot jobs due in the same instant (lateness at the receiver).

mod api_bench;
mod benchdb;
mod deliver;
mod herd;
mod rebalance;
mod sink;
mod startup;

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
    /// Seed N jobs, start a scheduler, measure time to first fire and memory per job.
    Startup(startup::StartupArgs),
    /// Share of jobs and owner assignments moved when scaling the cluster.
    Rebalance(rebalance::RebalanceArgs),
    /// Worker throughput: deliveries per second for K worker processes.
    Deliver(deliver::DeliverArgs),
    /// REST API: creates/s and GET latency under concurrent clients.
    Api(api_bench::ApiArgs),
    /// N one-shot jobs due in the same instant: lateness, misses, duplicates.
    Herd(herd::HerdArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Sink(args) => sink::run(args).await,
        Command::Startup(args) => startup::run(args).await,
        Command::Rebalance(args) => rebalance::run(args),
        Command::Deliver(args) => deliver::run(args).await,
        Command::Api(args) => api_bench::run(args).await,
        Command::Herd(args) => herd::run(args).await,
    }
}
