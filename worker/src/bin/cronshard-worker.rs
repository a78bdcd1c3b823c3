//! `cronshard-worker`: consumes fire messages and delivers callbacks.

use std::net::SocketAddr;

use clap::Parser;

use runtime::config::{ClockArgs, LogArgs, RetryDefaults, ServiceArgs};
use worker::{DestinationArgs, WorkerConfig, deliver::ssrf::SsrfGuard};

/// mimalloc, not glibc's malloc: each slot allocates and frees its steps,
/// its request and its outcome, and in a burst glibc's malloc and free were
/// a fifth of a worker's CPU, mimalloc's a twentieth (docs/decisions.md,
/// "mimalloc in the worker").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// No Debug: it would print the key-encryption keys.
#[derive(Parser)]
#[command(version, about = "A cronshard worker")]
struct Args {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(flatten)]
    log: LogArgs,
    #[command(flatten)]
    retry: RetryDefaults,
    /// Worker id recorded in the ledger. Defaults to host name and process id.
    #[arg(long, env = "WORKER_ID")]
    worker_id: Option<String>,
    /// Listen address of Prometheus `/metrics` and the `/healthz` and
    /// `/readyz` probes.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    metrics_addr: SocketAddr,
    /// Unacked messages of the main queue held at once (pre-armed ones wait
    /// here for their time); the waiting queue's consumer holds up to a
    /// quarter as many more.
    #[arg(long, env = "WORKER_PREFETCH", default_value_t = worker::defaults::PREFETCH)]
    prefetch: u16,
    /// Callback deliveries in progress at once.
    #[arg(long, env = "WORKER_MAX_IN_FLIGHT", default_value_t = worker::defaults::MAX_IN_FLIGHT)]
    max_in_flight: usize,
    /// Estimated memory of the slots held on their way, in MiB (bodies and
    /// per-slot state); slots armed ahead of their due instant have twice
    /// this, at a smaller charge each. Past either, further messages wait
    /// in the broker.
    #[arg(long, env = "WORKER_MAX_HELD_MB", default_value_t = worker::defaults::MAX_HELD_MB)]
    max_held_mb: usize,
    /// A scheduled slot reaching the worker later than this after its due
    /// time follows its job's misfire policy (skip, fire_once: recorded
    /// skipped instead of delivered; fire_all: delivered). The same
    /// setting as the scheduler's.
    #[arg(long, env = "MISFIRE_THRESHOLD_MS", default_value_t = domain::job::MISFIRE_THRESHOLD_DEFAULT_MS)]
    misfire_threshold_ms: u64,
    /// Private/loopback ranges callbacks may reach anyway, e.g. `127.0.0.0/8`.
    #[arg(long, env = "CALLBACK_ALLOW_CIDRS", default_value = "")]
    callback_allow_cidrs: String,
    #[command(flatten)]
    destinations: DestinationArgs,
    #[command(flatten)]
    clock: ClockArgs,
    #[command(flatten)]
    secrets: store::secrets::SecretsArgs,
    /// Threads that run the worker's deliveries; 0 = one per core. Scale
    /// workers by running more of them: each is one more consumer of the
    /// queue (why one thread: docs/decisions.md).
    #[arg(long, env = "WORKER_THREADS", default_value_t = worker::defaults::THREADS)]
    threads: usize,
}

fn main() -> std::process::ExitCode {
    disable_transparent_huge_pages();
    let args = Args::parse();
    // A failure's text may quote a connection string: printed redacted.
    domain::redact::exit_code(runtime(args.threads).and_then(|runtime| runtime.block_on(run(args))))
}

/// No transparent huge pages for this process. mimalloc asks for them on
/// its arenas, and at a herd's due instant a worker then stalled in the
/// kernel zeroing fresh 2 MiB pages and splitting them again on purge:
/// without them the due-instant check waited 22–68% less and each worker
/// held 10–36% less memory (docs/benchmarks.md).
/// Faults after this call honour it, whoever mapped the memory.
fn disable_transparent_huge_pages() {
    // A kernel without the setting leaves THP as it was: nothing to undo.
    if let Err(e) = nix::sys::prctl::set_thp_disable(true) {
        eprintln!("transparent huge pages stay as the kernel sets them: {e}");
    }
}

/// The runtime of `threads` threads (0: tokio's default, one per core).
fn runtime(threads: usize) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if threads > 0 {
        builder.worker_threads(threads);
    }
    Ok(builder.enable_all().build()?)
}

async fn run(args: Args) -> anyhow::Result<()> {
    runtime::telemetry::init(args.log.log_format);
    let health = runtime::health::Health::new();
    // Per-host gauges of hosts no longer tracked leave /metrics.
    runtime::metrics::install_exporter(
        args.metrics_addr,
        Some(worker::destination::GAUGES_FORGOTTEN_AFTER),
        health.clone(),
    )?;
    let host = runtime::config::host_name("cronshard-worker");
    let config = WorkerConfig {
        worker_id: args.worker_id.unwrap_or_else(|| format!("{host}-{}", std::process::id())),
        cluster: args.service.cluster_name.clone(),
        amqp_url: args.service.amqp_url.clone(),
        queue_type: args.service.amqp_queue_type,
        prefetch: args.prefetch,
        max_in_flight: args.max_in_flight.max(1),
        max_held_bytes: args.max_held_mb.max(1).saturating_mul(1 << 20),
        destinations: args.destinations.config(),
        retry_defaults: args.retry.policy(),
        allow_cidrs: SsrfGuard::parse_allow_list(&args.callback_allow_cidrs)?,
        misfire_threshold: std::time::Duration::from_millis(args.misfire_threshold_ms),
        // SQS targets use the standard AWS environment (AWS_REGION,
        // credentials, AWS_ENDPOINT_URL_SQS), read on the first SQS delivery.
        aws: None,
        clock: args.clock.config(),
        outcome_retry_for: worker::defaults::OUTCOME_RETRY_FOR,
        keyring: args.secrets.keyring()?,
        signing_keys_fresh_for: worker::deliver::signing::ACTIVE_KEYS_FRESH_FOR,
    };
    if config.keyring.is_empty() {
        tracing::warn!(
            "SECRETS_KEK is empty: secret header values sealed at rest cannot be opened, so their deliveries fail"
        );
    }
    let pg = store::db::pool_with_settings(
        &args.service.database_url,
        args.service.database_pool_size,
        store::db::HOT_PATH_SETTINGS,
    )?;
    let token = runtime::shutdown::token_on_signal();
    worker::run_with_health(config, pg, health, token).await
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// clap's consistency checks, and `--help` shows no secret env value.
    #[test]
    fn cli_is_well_formed() {
        runtime::config::assert_cli_well_formed(super::Args::command());
    }

    #[test]
    fn the_runtime_has_the_threads_asked_for() {
        assert_eq!(super::runtime(1).unwrap().metrics().num_workers(), 1);
        assert_eq!(super::runtime(3).unwrap().metrics().num_workers(), 3);
        let per_core = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(super::runtime(0).unwrap().metrics().num_workers(), per_core);
    }
}
