//! Configuration shared by every binary. Each value is a flag that falls back
//! to an environment variable (the names are listed in README.md,
//! "Configuration") and then to a default that works against a local stack.

use clap::{Args, ValueEnum};

use crate::ledger::partitions::Retention;

/// Connection settings every binary needs. The connection strings may carry
/// passwords, so `--help` never shows the values the environment gives them
/// (`hide_env_values`), and logs and errors show them only through
/// [`crate::redact`].
#[derive(Args, Clone)]
pub struct ServiceArgs {
    /// Postgres DSN.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/cronshard",
        hide_env_values = true
    )]
    pub database_url: String,

    /// Comma-separated Redis shard URLs (1 or 2).
    #[arg(
        long,
        env = "REDIS_URLS",
        default_value = "redis://127.0.0.1:6379",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_urls: Vec<String>,

    /// RabbitMQ URL.
    #[arg(long, env = "AMQP_URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f", hide_env_values = true)]
    pub amqp_url: String,

    /// RabbitMQ queue type of every queue: `classic`, or `quorum` (replicated
    /// and on disk before a publish is confirmed; slower). Every process of a
    /// cluster must use the same; an existing queue keeps its type.
    #[arg(long, env = "AMQP_QUEUE_TYPE", value_enum, default_value = "classic")]
    pub amqp_queue_type: crate::amqp::QueueType,

    /// Prefix that isolates one cluster's Redis keys and RabbitMQ queues.
    #[arg(long, env = "CLUSTER_NAME", default_value = "cronshard")]
    pub cluster_name: String,

    /// Largest number of pooled Postgres connections.
    #[arg(long, env = "DATABASE_POOL_SIZE", default_value_t = 16)]
    pub database_pool_size: usize,
}

impl ServiceArgs {
    /// The cluster's RabbitMQ queues, of the configured type.
    pub fn topology(&self) -> crate::amqp::Topology {
        crate::amqp::Topology::new(&self.cluster_name).with_queue_type(self.amqp_queue_type)
    }
}

/// Shows the connection strings redacted: the passwords stay out of any
/// `{:?}` of the arguments.
impl std::fmt::Debug for ServiceArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceArgs")
            .field("database_url", &crate::redact::url(&self.database_url))
            .field("redis_urls", &self.redis_urls.iter().map(|u| crate::redact::url(u)).collect::<Vec<_>>())
            .field("amqp_url", &crate::redact::url(&self.amqp_url))
            .field("amqp_queue_type", &self.amqp_queue_type)
            .field("cluster_name", &self.cluster_name)
            .field("database_pool_size", &self.database_pool_size)
            .finish()
    }
}

/// Words in an environment variable's name that say its value may be a
/// secret, or a URL that may carry one.
const SECRET_ENV_WORDS: &[&str] = &["URL", "DSN", "TOKEN", "PASSWORD", "SECRET", "KEY", "CREDENTIAL"];

/// The flags of `command` (and of its subcommands) whose environment
/// variable may hold a secret (its name says URL, TOKEN, PASSWORD, SECRET,
/// KEY, ...) but whose value `--help` would show: clap prints
/// `[env: NAME=value]` unless the flag has `hide_env_values = true`. Each
/// binary's tests assert there are none.
pub fn unhidden_secret_env_flags(command: &clap::Command) -> Vec<String> {
    let mut out = Vec::new();
    for arg in command.get_arguments() {
        let Some(env) = arg.get_env().map(|e| e.to_string_lossy().to_ascii_uppercase()) else { continue };
        if !arg.is_hide_env_values_set() && SECRET_ENV_WORDS.iter().any(|w| env.contains(w)) {
            out.push(format!("{} --{} ({env})", command.get_name(), arg.get_id()));
        }
    }
    for sub in command.get_subcommands() {
        out.extend(unhidden_secret_env_flags(sub));
    }
    out
}

/// This machine's host name (a pod's name on Kubernetes), or `fallback`
/// when it cannot be read: the default identity of a node or a worker.
pub fn host_name(fallback: &str) -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| fallback.to_owned())
}

/// What every binary's command line must satisfy (each binary's unit test
/// calls this): clap's own consistency checks, and no flag whose variable
/// may hold a secret showing its value in `--help`.
pub fn assert_cli_well_formed(command: clap::Command) {
    assert_eq!(unhidden_secret_env_flags(&command), Vec::<String>::new(), "secret env values shown by --help");
    command.debug_assert();
}

/// Log output settings.
#[derive(Args, Clone, Debug)]
pub struct LogArgs {
    /// `text` for people, `json` for log pipelines.
    #[arg(long, env = "LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Clock discipline: how often a process measures its clock against the
/// database's, and the offset beyond which a scheduler stops firing.
#[derive(Args, Clone, Debug)]
pub struct ClockArgs {
    /// Milliseconds between two clock checks against the database.
    #[arg(long, env = "CLOCK_CHECK_INTERVAL_MS", default_value_t = crate::clock::ClockConfig::DEFAULT_CHECK_EVERY_MS,
          value_parser = clap::value_parser!(u64).range(100..))]
    pub clock_check_interval_ms: u64,
    /// Largest clock offset (milliseconds, either way) at which a scheduler
    /// node keeps firing; beyond it the node leaves the cluster until the
    /// offset is back within it.
    #[arg(long, env = "CLOCK_MAX_OFFSET_MS", default_value_t = crate::clock::ClockConfig::DEFAULT_MAX_OFFSET_MS,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub clock_max_offset_ms: u64,
}

impl ClockArgs {
    pub fn config(&self) -> crate::clock::ClockConfig {
        crate::clock::ClockConfig {
            check_every: std::time::Duration::from_millis(self.clock_check_interval_ms),
            max_offset: std::time::Duration::from_millis(self.clock_max_offset_ms),
        }
    }
}

/// Cluster-wide retry defaults, used when a job has no retry policy of its own.
#[derive(Args, Clone, Debug)]
pub struct RetryDefaults {
    /// Retries after the first attempt.
    #[arg(long, env = "CRON_MAX_RETRIES", default_value_t = 3)]
    pub cron_max_retries: u32,
    /// Delay before the first retry.
    #[arg(long, env = "CRON_RETRY_DELAY_MS", default_value_t = 30_000)]
    pub cron_retry_delay_ms: u64,
    /// Each further retry waits this many times longer.
    #[arg(long, env = "CRON_RETRY_DELAY_MULTIPLIER", default_value_t = 2.0)]
    pub cron_retry_delay_multiplier: f64,
    /// Upper bound of any retry delay.
    #[arg(long, env = "CRON_RETRY_MAX_DELAY_MS", default_value_t = 3_600_000)]
    pub cron_retry_max_delay_ms: u64,
}

/// The ledger's retention and partitions ahead: the schedulers apply them
/// (partition maintenance), `migrate` too, and the API explains with them.
#[derive(Args, Clone, Debug)]
pub struct LedgerArgs {
    /// Days a ledger row that succeeded is kept; its day partition is then
    /// compacted (those rows removed).
    #[arg(
        long,
        env = "LEDGER_RETENTION_DAYS",
        default_value_t = Retention::DEFAULT_SUCCEEDED_DAYS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub ledger_retention_days: u32,
    /// Days every other ledger row is kept (failed, skipped, missed); its day
    /// partition is then dropped. At least --ledger-retention-days.
    #[arg(
        long,
        env = "LEDGER_UNSUCCESSFUL_RETENTION_DAYS",
        default_value_t = Retention::DEFAULT_UNSUCCESSFUL_DAYS,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub ledger_unsuccessful_retention_days: u32,
    /// Day partitions kept created ahead of today.
    #[arg(long, env = "LEDGER_PARTITIONS_AHEAD_DAYS", default_value_t = Retention::DEFAULT_AHEAD_DAYS)]
    pub ledger_partitions_ahead_days: u32,
}

impl LedgerArgs {
    /// The retention, or an error naming the flags when the longer one is
    /// shorter.
    pub fn retention(&self) -> anyhow::Result<Retention> {
        let retention = Retention {
            ahead_days: self.ledger_partitions_ahead_days,
            succeeded_days: self.ledger_retention_days,
            unsuccessful_days: self.ledger_unsuccessful_retention_days,
        };
        retention.check().map_err(|e| {
            anyhow::anyhow!(
                "--ledger-unsuccessful-retention-days (LEDGER_UNSUCCESSFUL_RETENTION_DAYS) is {}, shorter than \
                 --ledger-retention-days (LEDGER_RETENTION_DAYS) {}: rows that did not succeed must be kept at least as \
                 long as those that did",
                e.unsuccessful_days,
                e.succeeded_days
            )
        })?;
        Ok(retention)
    }
}

impl RetryDefaults {
    pub fn policy(&self) -> crate::job::RetryPolicy {
        crate::job::RetryPolicy {
            max_retries: self.cron_max_retries,
            base_delay_ms: self.cron_retry_delay_ms,
            multiplier: self.cron_retry_delay_multiplier,
            max_delay_ms: self.cron_retry_max_delay_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    #[command(name = "config")]
    struct Shared {
        #[command(flatten)]
        service: super::ServiceArgs,
        #[command(flatten)]
        log: super::LogArgs,
        #[command(flatten)]
        retry: super::RetryDefaults,
        #[command(flatten)]
        ledger: super::LedgerArgs,
        /// A flag a later change might add without hiding it.
        #[arg(long, env = "SOME_API_KEY")]
        key: Option<String>,
    }

    #[test]
    fn debug_output_redacts_the_connection_strings() {
        let args = Shared::parse_from([
            "config",
            "--database-url=postgres://app:pw1@db/x",
            "--redis-urls=redis://:pw2@a,redis://:pw3@b",
            "--amqp-url=amqp://app:pw4@mq/%2f",
        ]);
        let shown = format!("{:?}", args.service);
        for pw in ["pw1", "pw2", "pw3", "pw4"] {
            assert!(!shown.contains(pw), "{shown}");
        }
        assert!(shown.contains("postgres://app:***@db/x") && shown.contains("redis://:***@b"), "{shown}");
    }

    #[test]
    fn the_shared_connection_strings_are_hidden_and_an_unhidden_secret_is_found() {
        assert_eq!(super::unhidden_secret_env_flags(&Shared::command()), vec!["config --key (SOME_API_KEY)"]);
    }

    #[test]
    fn ledger_retention_defaults_and_order() {
        let defaults = Shared::parse_from(["config"]).ledger.retention().unwrap();
        assert_eq!(defaults, crate::ledger::partitions::Retention::default());
        let set =
            Shared::parse_from(["config", "--ledger-retention-days=30", "--ledger-unsuccessful-retention-days=30"]);
        let r = set.ledger.retention().unwrap();
        assert_eq!((r.succeeded_days, r.unsuccessful_days), (30, 30));

        let reversed = Shared::parse_from(["config", "--ledger-unsuccessful-retention-days=40"]);
        let e = reversed.ledger.retention().unwrap_err().to_string();
        assert!(e.contains("--ledger-unsuccessful-retention-days (LEDGER_UNSUCCESSFUL_RETENTION_DAYS) is 40"), "{e}");
        assert!(e.contains("--ledger-retention-days (LEDGER_RETENTION_DAYS) 45"), "{e}");
        assert!(Shared::try_parse_from(["config", "--ledger-retention-days=0"]).is_err());
    }
}
