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
