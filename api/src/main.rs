//! `cronshard-api`: the REST server; `cronshard-api migrate` applies the
//! migrations, creates the ledger partitions and exits.

use std::net::SocketAddr;
use std::sync::Arc;

use clap::{Parser, Subcommand};

use runtime::config::{LogArgs, ServiceArgs};

// No Debug: it would print the tokens.
#[derive(Parser)]
#[command(version, about = "The cronshard REST API")]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    service: ServiceArgs,
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    limits: runtime::config::LimitArgs,
    /// Address the API listens on.
    #[arg(long, env = "LISTEN_ADDR", default_value = "0.0.0.0:8080")]
    listen_addr: SocketAddr,
    /// Accepted bearer tokens, comma-separated. Empty turns auth off.
    #[arg(long, env = "API_TOKENS", default_value = "", value_delimiter = ',', hide_env_values = true)]
    api_tokens: Vec<String>,
    /// Milliseconds a client has to send a request's headers, from when the
    /// server starts waiting for them (also how long a keep-alive connection
    /// may sit idle); past it the connection is closed.
    #[arg(
        long,
        env = "HTTP_HEADER_READ_TIMEOUT_MS",
        default_value_t = api::server::Limits::DEFAULT_HEADER_READ_TIMEOUT.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    http_header_read_timeout_ms: u64,
    /// The ledger's retention as the schedulers apply it (set it as for them):
    /// `migrate` maintains the partitions with it, and the explain endpoint
    /// tells a slot past it from a missing one.
    #[command(flatten)]
    ledger: store::ledger::partitions::LedgerArgs,
    /// Namespaces `migrate` declares, as JSON: [{"name": "team-a", "max_jobs": 100,
    /// "max_fires_per_second": 50}, ...]. Each is created if missing and gets exactly the
    /// quotas given (an absent quota is no limit); namespaces not listed are left alone.
    #[arg(long, env = "NAMESPACES", default_value = "[]")]
    namespaces: String,
    #[command(flatten)]
    secrets: store::secrets::SecretsArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the API (the default).
    Serve,
    /// Apply migrations and create ledger partitions, then exit. With
    /// SECRETS_KEK set, also seals secret header values stored in clear by
    /// versions before encryption at rest.
    Migrate,
    /// Key management of secret header values at rest.
    #[command(subcommand)]
    Secrets(SecretsCommand),
}

#[derive(Subcommand, Debug)]
enum SecretsCommand {
    /// Re-seal every data key with the first key of SECRETS_KEK (after a new
    /// key was put first); the keys after it must still open the data keys
    /// sealed before. Then the old key can be dropped from SECRETS_KEK.
    Rotate,
}

fn main() -> std::process::ExitCode {
    // A failure's text may quote a connection string: printed redacted.
    domain::redact::exit_code(run())
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    let retention = args.ledger.retention()?;
    runtime::telemetry::init(args.log.log_format);
    match args.command.unwrap_or(Command::Serve) {
        Command::Migrate => {
            store::db::migrate(&args.service.database_url).await?;
            let mut client = store::db::connect(&args.service.database_url).await?;
            let report = store::ledger::partitions::maintain(&mut client, chrono::Utc::now(), retention).await?;
            tracing::info!(created = report.created.len(), "migrations applied; ledger partitions ready");
            let declared = api::tenancy::Declared::parse_list(&args.namespaces)?;
            let pool = store::db::pool(&args.service.database_url, 1)?;
            let pooled = pool.get().await?;
            for ns in &declared {
                api::tenancy::write_namespace(&pooled, &ns.name, ns.quotas(), api::tenancy::Write::Declare).await?;
            }
            tracing::info!(namespaces = declared.len(), "declared namespaces applied");
            // The pool holds one connection: the sealing below takes it.
            drop(pooled);
            let keyring = args.secrets.keyring()?;
            if keyring.is_empty() {
                tracing::warn!("SECRETS_KEK is empty: secret header values stored in clear (if any) stay so");
            } else {
                let vault = store::secrets::Vault::new(keyring);
                let mut client = pool.get().await?;
                let sealed = store::secrets::seal_stored_in_clear(&vault, &mut client).await?;
                tracing::info!(rows = sealed, "secret header values in clear sealed");
            }
            Ok(())
        }
        Command::Secrets(SecretsCommand::Rotate) => {
            let keyring = args.secrets.keyring()?;
            let vault = store::secrets::Vault::new(keyring);
            let pool = store::db::pool(&args.service.database_url, 1)?;
            let mut client = pool.get().await?;
            let resealed = vault.rotate(&mut client).await?;
            println!(
                "{resealed} data key(s) re-sealed with key-encryption key {}",
                vault.keyring().ids().split(", ").next().unwrap_or_default()
            );
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
            let keyring = args.secrets.keyring()?;
            if keyring.is_empty() {
                tracing::warn!(
                    "SECRETS_KEK is empty: jobs with secret headers are refused (their values are stored sealed by it)"
                );
            }
            let pg = store::db::pool(&args.service.database_url, args.service.database_pool_size)?;
            let state = api::AppState {
                job_changes: store::notify::Announcer::start(pg.clone()),
                vault: store::secrets::Vault::new(keyring),
                pg,
                redis: runtime::redis::pools(&args.service.redis_urls)?,
                keys: runtime::redis::Keys::new(&args.service.cluster_name),
                cluster: args.service.cluster_name.clone(),
                tokens: Arc::new(tokens),
                token_cache: Default::default(),
                publisher: api::AppState::publisher(&args.service.amqp_url, broker::amqp::Topology::of(&args.service)),
                retention,
                limits: Arc::new(args.limits.limits()?),
            };
            // `/metrics` sits beside the router: the recorder is process-global,
            // and tests build many routers in one process.
            let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
                .set_buckets(&[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5])?
                .install_recorder()?;
            runtime::metrics::describe_all();
            let metrics_state = state.clone();
            let app = api::router(state).route(
                "/metrics",
                axum::routing::get(move |headers: axum::http::HeaderMap| {
                    let (prometheus, state) = (prometheus.clone(), metrics_state.clone());
                    async move {
                        use axum::response::IntoResponse;
                        match api::auth::may_read_metrics(&state, &headers).await {
                            Ok(true) => prometheus.render().into_response(),
                            Ok(false) => api::error::ApiError::Unauthorized.into_response(),
                            Err(e) => e.into_response(),
                        }
                    }
                }),
            );
            let listener = tokio::net::TcpListener::bind(args.listen_addr).await?;
            tracing::info!(addr = %listener.local_addr()?, "cronshard-api listening");
            let limits = api::server::Limits {
                header_read_timeout: std::time::Duration::from_millis(args.http_header_read_timeout_ms),
            };
            api::server::serve(listener, app, limits, runtime::shutdown::signal()).await?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's consistency checks, and `--help` shows no secret env value.
    #[test]
    fn cli_is_well_formed() {
        runtime::config::assert_cli_well_formed(super::Args::command());
    }
}
