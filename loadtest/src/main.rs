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
//! - `steady`: periodic jobs at R fires/s for D seconds.
//! - `failover`: steady load while a scheduler is killed and another added.
//! - `recovery`: every scheduler down for K seconds, then back.
//! - `churn`: jobs changed, paused, resumed, deleted, triggered and replayed
//!   near their slots while schedulers die; every slot judged against a model.
//! - `chaos`: steady load while faults are injected one after another on
//!   private services (nodes killed, cut off, slowed, skewed; Redis, RabbitMQ
//!   and Postgres restarted; queues deleted; a receiver down): a fault ×
//!   figures matrix, non-zero exit on a duplicate, a lost slot or one
//!   without a final ledger status.
//! - `ceiling`: the broker's publish-with-confirms + consume rate, no scheduler.
//! - `destinations`: a healthy receiver's lateness alone and beside a dead
//!   one (per-host limit and circuit breaker).
//! - `console`: the operator console's API calls on a database of a
//!   million jobs and ten million ledger rows (median, p99, the plans).
//! - `retention`: removing a day partition's rows that succeeded, by
//!   compaction against a plain `DELETE` (time, WAL, blocks, size), no stack.
//! - `report`: renders result files into `docs/benchmarks.md`.
//!
//! The scenarios share one [`stack::Stack`] (the processes they start), one
//! [`receiver::Receiver`], one tally of due slots ([`measure`]), one report
//! writer ([`report`]) and one plot ([`plot`]). `loadtest/run-suite.sh` runs
//! the suite and writes the document.

mod api_bench;
mod apply_bench;
mod benchdb;
mod ceiling;
mod chaos;
mod churn;
mod console;
mod deliver;
mod destinations;
mod doc;
mod herd;
mod http_ceiling;
mod measure;
mod plot;
mod procstat;
mod rebalance;
mod receiver;
mod recovery;
mod report;
mod retention;
mod sink;
mod stack;
mod startup;
mod steady;

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
    /// Jobs kept in files: an apply of N jobs (created, unchanged, one changed) against batch creates and PUTs.
    Apply(apply_bench::ApplyArgs),
    /// N one-shot jobs due in the same instant: lateness, misses, duplicates.
    Herd(herd::HerdArgs),
    /// Periodic jobs producing R fires/s for D seconds: lateness over time, CPU and memory.
    Steady(steady::SteadyArgs),
    /// Steady load while one scheduler is killed (-9) and another added.
    Failover(steady::FailoverArgs),
    /// Every scheduler down for K seconds, then back: catch-up and ledger outcomes.
    Recovery(recovery::RecoveryArgs),
    /// Jobs changed near their slots while nodes die: every slot judged against a model.
    Churn(churn::ChurnArgs),
    /// Steady load while faults are injected in turn on private services: fault × figures matrix.
    Chaos(chaos::ChaosArgs),
    /// Broker ceiling: fire messages published with confirms and consumed, no scheduler.
    Ceiling(ceiling::CeilingCmd),
    /// Console API calls on a database of N jobs and M ledger rows: latency and plans.
    Console(console::ConsoleArgs),
    /// Ledger retention: compaction of a day partition against a plain DELETE.
    Retention(retention::RetentionArgs),
    /// A healthy receiver's lateness alone, then beside a dead one (per-host limit, circuit breaker).
    Destinations(destinations::DestinationsArgs),
    /// Render result files into the generated section of docs/benchmarks.md.
    Report(doc::DocArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Args::parse().command {
        Command::Sink(args) => sink::run(args).await,
        Command::Startup(args) => startup::run(args).await,
        Command::Rebalance(args) => rebalance::run(args),
        Command::Deliver(args) => deliver::run(args).await,
        Command::Api(args) => api_bench::run(args).await,
        Command::Apply(args) => apply_bench::run(args).await,
        Command::Herd(args) => herd::run(args).await,
        Command::Steady(args) => steady::run_steady(args).await,
        Command::Failover(args) => steady::run_failover(args).await,
        Command::Recovery(args) => recovery::run(args).await,
        Command::Ceiling(args) => ceiling::run(args).await,
        Command::Churn(args) => churn::run(args).await,
        Command::Chaos(args) => chaos::run(args).await,
        Command::Console(args) => console::run(args).await,
        Command::Retention(args) => retention::run(args).await,
        Command::Destinations(args) => destinations::run(args).await,
        Command::Report(args) => doc::run(args),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        super::Args::command().debug_assert();
    }
}
