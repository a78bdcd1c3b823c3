//! `cronshard-scheduler`: one scheduler node.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;

use runtime::config::{ClockArgs, LogArgs, ServiceArgs};
use scheduler::node::{Node, NodeConfig, defaults};
use store::ledger::partitions::LedgerArgs;

#[derive(Parser, Debug)]
#[command(version, about = "A cronshard scheduler node")]
struct Args {
    #[command(flatten)]
    service: ServiceArgs,
    #[command(flatten)]
    log: LogArgs,
    /// Stable node id (the StatefulSet pod name). Defaults to the host name.
    #[arg(long, env = "NODE_ID")]
    node_id: Option<String>,
    /// Listen address of Prometheus `/metrics` and the `/healthz` and
    /// `/readyz` probes.
    #[arg(long, env = "METRICS_ADDR", default_value = "0.0.0.0:9090")]
    metrics_addr: SocketAddr,
    /// Owners per job.
    #[arg(long, env = "REPLICATION_FACTOR", default_value_t = defaults::REPLICATION_FACTOR)]
    replication_factor: usize,
    /// Slots due within this many milliseconds are claimed and published ahead.
    #[arg(long, env = "LOOKAHEAD_MS", default_value_t = defaults::LOOKAHEAD_MS)]
    lookahead_ms: u64,
    /// The most milliseconds ahead a burst is claimed and published: the
    /// lead grows beyond LOOKAHEAD_MS when the slots due in a coming second
    /// need it, from the node's measured pace.
    #[arg(long, env = "MAX_LOOKAHEAD_MS", default_value_t = defaults::MAX_LOOKAHEAD_MS)]
    max_lookahead_ms: u64,
    /// Milliseconds between change-feed polls (LISTEN/NOTIFY wakes it sooner).
    #[arg(long, env = "POLL_INTERVAL_MS", default_value_t = defaults::POLL_INTERVAL_MS)]
    poll_interval_ms: u64,
    /// Milliseconds between heartbeats (the heartbeat TTL is 30 s).
    #[arg(long, env = "HEARTBEAT_INTERVAL_MS", default_value_t = defaults::HEARTBEAT_INTERVAL_MS)]
    heartbeat_interval_ms: u64,
    /// A loaded job whose oldest missed slot is later than this has every
    /// missed slot decided by its misfire policy; otherwise they fire late.
    #[arg(long, env = "MISFIRE_THRESHOLD_MS", default_value_t = defaults::MISFIRE_THRESHOLD_MS)]
    misfire_threshold_ms: u64,
    /// How far back a loaded job is checked for misfired slots.
    #[arg(long, env = "MISFIRE_LOOKBACK_SECS", default_value_t = defaults::MISFIRE_LOOKBACK_SECS)]
    misfire_lookback_secs: u64,
    /// Cluster-wide late fires per second while catching up on misfires.
    #[arg(long, env = "CATCHUP_RATE", default_value_t = defaults::CATCHUP_RATE)]
    catchup_rate: u32,
    /// Seconds after which a ledger row that should have moved (a published
    /// `pending` row past its due instant, a `retrying` row past its next
    /// attempt) counts as stranded and is published again, once the queues
    /// have also caught up with it (a message behind a backlog is late, not lost).
    #[arg(long, env = "STRANDED_AFTER_SECS", default_value_t = defaults::STRANDED_AFTER_SECS)]
    stranded_after_secs: u64,
    /// How often each alert rule is evaluated, in milliseconds.
    #[arg(long, env = "ALERT_EVALUATION_INTERVAL_MS", default_value_t = scheduler::alerts::EVALUATION_INTERVAL_DEFAULT_MS)]
    alert_evaluation_interval_ms: u64,
    /// Days an audit entry is kept (1 to 36,500); older ones are dropped hourly.
    #[arg(long, env = "AUDIT_RETENTION_DAYS", default_value_t = scheduler::alerts::AUDIT_RETENTION_DAYS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..=36_500))]
    audit_retention_days: u64,
    #[command(flatten)]
    ledger: LedgerArgs,
    #[command(flatten)]
    clock: ClockArgs,
}

fn main() -> std::process::ExitCode {
    // A failure's text may quote a connection string: printed redacted.
    domain::redact::exit_code(run())
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    let args = Args::parse();
    // Before anything connects: a bad retention stops the node at once.
    let retention = args.ledger.retention()?;
    runtime::telemetry::init(args.log.log_format);
    let health = runtime::health::Health::new();
    runtime::metrics::install_exporter(args.metrics_addr, None, health.clone())?;
    let node_id = args.node_id.clone().unwrap_or_else(|| runtime::config::host_name("cronshard-scheduler"));
    let mut config = NodeConfig::new(
        node_id,
        args.service.cluster_name.clone(),
        args.service.database_url.clone(),
        args.service.amqp_url.clone(),
    );
    config.replication_factor = args.replication_factor;
    config.lookahead = Duration::from_millis(args.lookahead_ms);
    config.max_lookahead = Duration::from_millis(args.max_lookahead_ms);
    config.poll_interval = Duration::from_millis(args.poll_interval_ms);
    config.heartbeat_interval = Duration::from_millis(args.heartbeat_interval_ms);
    config.misfire_threshold = Duration::from_millis(args.misfire_threshold_ms);
    config.misfire_lookback = Duration::from_secs(args.misfire_lookback_secs);
    config.catchup_rate = args.catchup_rate.max(1);
    config.stranded_after = Duration::from_secs(args.stranded_after_secs.max(1));
    config.retention = retention;
    config.alert_evaluation_interval = Duration::from_millis(args.alert_evaluation_interval_ms.max(100));
    config.audit_retention = Duration::from_secs(args.audit_retention_days * 86_400);
    config.clock = args.clock.config();
    config.queue_type = args.service.amqp_queue_type;
    let node = Node {
        config,
        pg: store::db::pool_with_settings(
            &args.service.database_url,
            args.service.database_pool_size,
            store::db::HOT_PATH_SETTINGS,
        )?,
        redis: runtime::redis::pools(&args.service.redis_urls)?,
    };
    let token = runtime::shutdown::token_on_signal();
    node.run_with_health(health, token).await
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
