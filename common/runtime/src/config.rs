//! Configuration shared by every binary. Each value is a flag that falls back
//! to an environment variable (the names are listed in README.md,
//! "Configuration") and then to a default that works against a local stack.

use clap::{Args, ValueEnum};

/// Connection settings every binary needs. The connection strings may carry
/// passwords, so `--help` never shows the values the environment gives them
/// (`hide_env_values`), and logs and errors show them only through
/// [`domain::redact`].
#[derive(Args, Clone)]
pub struct ServiceArgs {
    /// Postgres DSN; with a primary and standbys, list their hosts and ask
    /// for the writable one: `postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`.
    #[arg(
        long,
        env = "DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/cronshard",
        hide_env_values = true
    )]
    pub database_url: String,

    /// Comma-separated Redis shard URLs (1 or 2): `redis://host:port`, or a
    /// shard whose primary Sentinel names:
    /// `redis-sentinel://[user:password@]s1:26379,s2:26379,s3:26379/<master name>[/<db>]`.
    #[arg(
        long,
        env = "REDIS_URLS",
        default_value = "redis://127.0.0.1:6379",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub redis_urls: Vec<String>,

    /// RabbitMQ URL, or the URLs of several nodes of one cluster separated
    /// by commas (tried in turn until one accepts).
    #[arg(long, env = "AMQP_URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f", hide_env_values = true)]
    pub amqp_url: String,

    /// RabbitMQ queue type of every queue: `classic`, or `quorum` (replicated
    /// and on disk before a publish is confirmed; slower). Every process of a
    /// cluster must use the same; an existing queue keeps its type.
    #[arg(long, env = "AMQP_QUEUE_TYPE", value_enum, default_value = "classic")]
    pub amqp_queue_type: QueueType,

    /// Prefix that isolates one cluster's Redis keys and RabbitMQ queues.
    #[arg(long, env = "CLUSTER_NAME", default_value = "cronshard")]
    pub cluster_name: String,

    /// Largest number of pooled Postgres connections.
    #[arg(long, env = "DATABASE_POOL_SIZE", default_value_t = 16)]
    pub database_pool_size: usize,
}

/// The kind of RabbitMQ queue every queue of a cluster is declared as.
#[derive(ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QueueType {
    /// A classic durable queue on one broker node.
    #[default]
    Classic,
    /// A quorum queue (RabbitMQ 3.10 or later).
    Quorum,
}

/// Shows the connection strings redacted: the passwords stay out of any
/// `{:?}` of the arguments.
impl std::fmt::Debug for ServiceArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceArgs")
            .field("database_url", &domain::redact::url(&self.database_url))
            .field("redis_urls", &self.redis_urls.iter().map(|u| domain::redact::url(u)).collect::<Vec<_>>())
            .field("amqp_url", &domain::redact::url(&self.amqp_url))
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

/// The API's flags for `Limits`.
#[derive(clap::Args, Clone, Debug)]
pub struct LimitArgs {
    /// Internal ranges (loopback, private, ...) callback and SQS queue URLs may
    /// name as an IP literal anyway, comma-separated, e.g. `127.0.0.0/8`. Give
    /// it the workers' value: they refuse the same ranges when they connect.
    #[arg(long, env = "CALLBACK_ALLOW_CIDRS", default_value = "")]
    pub callback_allow_cidrs: String,
    /// Smallest interval between two fires of a job, in ms: the least
    /// `every_ms`, and the least gap of a cron expression with seconds.
    #[arg(
        long,
        env = "MIN_INTERVAL_MS",
        default_value_t = domain::job::limits::MIN_INTERVAL_MS_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=domain::job::limits::MIN_INTERVAL_MS_MAX)
    )]
    pub min_interval_ms: u64,
}

impl LimitArgs {
    pub fn limits(&self) -> anyhow::Result<domain::job::Limits> {
        Ok(domain::job::Limits {
            min_interval_ms: self.min_interval_ms,
            allow_cidrs: domain::netguard::parse_allow_list(&self.callback_allow_cidrs).map_err(anyhow::Error::msg)?,
        })
    }
}

impl RetryDefaults {
    pub fn policy(&self) -> domain::job::RetryPolicy {
        domain::job::RetryPolicy {
            max_retries: self.cron_max_retries,
            base_delay_ms: self.cron_retry_delay_ms,
            multiplier: self.cron_retry_delay_multiplier,
            max_delay_ms: self.cron_retry_max_delay_ms,
            // Equal jitter, as for a job that names no jitter.
            jitter: domain::job::Jitter::default(),
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
}
