//! Logging setup: `tracing` with text for people and JSON for pipelines.

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::LogFormat;

/// Installs the global subscriber. `RUST_LOG` overrides the default `info`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,lapin=warn"));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Json => registry.with(fmt::layer().json().with_current_span(false)).init(),
        LogFormat::Text => registry.with(fmt::layer().with_target(false)).init(),
    }
}

/// Runs `work` and records how long it took in the histogram `name` under
/// `stage`, so that an operator can see where the time goes (and where
/// work waits).
pub async fn timed<T>(name: &'static str, stage: &'static str, work: impl std::future::Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let out = work.await;
    metrics::histogram!(name, "stage" => stage).record(started.elapsed().as_secs_f64());
    out
}
