//! Configuration shared by every binary. Each value is a flag that falls back
//! to an environment variable (the names are listed in README.md,
//! "Configuration") and then to a default that works against a local stack.

use clap::{Args, ValueEnum};

/// Connection settings every binary needs.
#[derive(Args, Clone, Debug)]
pub struct ServiceArgs {
    /// Postgres DSN.
    #[arg(long, env = "DATABASE_URL", default_value = "postgres://postgres@127.0.0.1:5432/cronshard")]
    pub database_url: String,

    /// Comma-separated Redis shard URLs (1 or 2).
    #[arg(long, env = "REDIS_URLS", default_value = "redis://127.0.0.1:6379", value_delimiter = ',')]
    pub redis_urls: Vec<String>,

    /// RabbitMQ URL.
    #[arg(long, env = "AMQP_URL", default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    pub amqp_url: String,

    /// Prefix that isolates one cluster's Redis keys and RabbitMQ queues.
    #[arg(long, env = "CLUSTER_NAME", default_value = "cronshard")]
    pub cluster_name: String,

    /// Largest number of pooled Postgres connections.
    #[arg(long, env = "DATABASE_POOL_SIZE", default_value_t = 16)]
    pub database_pool_size: usize,
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
