//! `cronshard-api`: the REST server; `cronshard-api migrate` applies the
//! migrations, creates the ledger partitions and exits.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use common::config::{LogArgs, ServiceArgs};

#[derive(Parser, Debug)]
#[command(version, about = "The cronshard REST API")]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    service: ServiceArgs,
    #[command(flatten)]
    log: LogArgs,
    /// Address the API listens on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8080")]
    listen_addr: SocketAddr,
    /// Accepted bearer tokens, comma-separated. Empty turns auth off.
    #[arg(long, env = "API_TOKENS", default_value = "", value_delimiter = ',')]
    api_tokens: Vec<String>,
    /// Days of ledger history the schedulers keep (set it as for them); the
    /// explain endpoint tells a slot older than this from a missing one.
    #[arg(long, env = "LEDGER_RETENTION_DAYS", default_value_t = common::ledger::partitions::Retention::DEFAULT_RETENTION_DAYS)]
    ledger_retention_days: u32,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply migrations and create ledger partitions, then exit.
    Migrate,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    common::telemetry::init(args.log.log_format);
    match args.command.unwrap_or(Command::Serve) {
        Command::Migrate => {
            common::db::migrate(&args.service.database_url).await?;
            let mut client = common::db::connect(&args.service.database_url).await?;
            let report =
                common::ledger::partitions::maintain(&mut client, chrono::Utc::now(), Default::default()).await?;
            tracing::info!(created = report.created.len(), "migrations applied; ledger partitions ready");
            Ok(())
        }
        Command::Serve => {
            let tokens: Vec<String> =
                args.api_tokens.into_iter().map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()).collect();
            if tokens.is_empty() {
                tracing::warn!(
                    "API_TOKENS is empty: AUTHENTICATION IS OFF and anyone who can reach this port can create jobs that call any URL. Set API_TOKENS in production."
                );
            }
            let state = api::AppState {
                pg: common::db::pool(&args.service.database_url, args.service.database_pool_size)?,
                redis: common::redis::pools(&args.service.redis_urls)?,
                keys: common::redis::Keys::new(&args.service.cluster_name),
                cluster: args.service.cluster_name.clone(),
                tokens: Arc::new(tokens),
                publisher: api::AppState::publisher(&args.service.amqp_url, &args.service.cluster_name),
                retention: common::ledger::partitions::Retention {
                    retention_days: args.ledger_retention_days,
                    ..Default::default()
                },
            };
            // `/metrics` sits beside the router: the recorder is process-global,
            // and tests build many routers in one process.
            let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets(&[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5])?
                .install_recorder()?;
            common::metrics::describe_all();
            let app = api::router(state).route(
                "/metrics",
                axum::routing::get(move || {
                    let prometheus = prometheus.clone();
                    async move { prometheus.render() }
                }),
            );
            let listener = tokio::net::TcpListener::bind(args.listen_addr).await?;
            tracing::info!(addr = %listener.local_addr()?, "cronshard-api listening");
            axum::serve(listener, app).with_graceful_shutdown(common::shutdown::signal()).await?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        super::Args::command().debug_assert();
    }
}
