//! Logging setup: `tracing` with text for people and JSON for pipelines,
//! every line passed through [`domain::redact::text`] on its way out.

use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

use crate::config::LogFormat;

/// Installs the global subscriber. `RUST_LOG` overrides the default `info`.
pub fn init(format: LogFormat) {
    let requested = std::env::var("RUST_LOG").ok();
    let filter = filter(requested.as_deref());
    let registry = tracing_subscriber::registry().with(filter);
    let out = Redacting(io::stdout);
    match format {
        LogFormat::Json => registry.with(fmt::layer().json().with_current_span(false).with_writer(out)).init(),
        LogFormat::Text => registry.with(fmt::layer().with_target(false).with_writer(out)).init(),
    }
}

/// The log filter for `RUST_LOG` (`None`: unset). tokio-postgres logs every
/// statement's parameters at debug (job specs with their headers and
/// bodies), so it stays at info under a blanket `debug` unless `RUST_LOG`
/// names it.
fn filter(requested: Option<&str>) -> EnvFilter {
    let Some(requested) = requested.filter(|r| !r.trim().is_empty()) else {
        return EnvFilter::new("info,lapin=warn");
    };
    let filter = EnvFilter::builder().parse_lossy(requested);
    if requested.contains("tokio_postgres") {
        filter
    } else {
        filter.add_directive("tokio_postgres=info".parse().expect("a valid directive"))
    }
}

/// Log output with the secrets of URLs and connection strings masked
/// ([`domain::redact::text`]): the last line of defence for a URL that reaches
/// a log line whole, in a library's error text or a dependency's own log.
/// The formatter writes each event at once, so each event is redacted whole.
pub struct Redacting<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Redacting<M> {
    type Writer = RedactingWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter { inner: self.0.make_writer(), buf: Vec::new() }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        RedactingWriter { inner: self.0.make_writer_for(meta), buf: Vec::new() }
    }
}

/// Holds what is written until it is flushed or dropped, then writes it
/// redacted.
pub struct RedactingWriter<W: Write> {
    inner: W,
    buf: Vec<u8>,
}

impl<W: Write> RedactingWriter<W> {
    fn emit(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let written = match std::str::from_utf8(&self.buf) {
            Ok(text) if !domain::redact::might_hold_secret(text) => self.inner.write_all(&self.buf),
            _ => self.inner.write_all(domain::redact::text(&String::from_utf8_lossy(&self.buf)).as_bytes()),
        };
        self.buf.clear();
        written
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.emit()?;
        self.inner.flush()
    }
}

impl<W: Write> Drop for RedactingWriter<W> {
    fn drop(&mut self) {
        let _ = self.emit();
    }
}

/// Runs `work` and records how long it took in the histogram `name` under
/// `stage`, so that an operator can see where the time goes (and where
/// work waits).
pub async fn timed<T>(name: &'static str, stage: &'static str, work: impl std::future::Future<Output = T>) -> T {
    timed_into(&metrics::histogram!(name, "stage" => stage), work).await
}

/// Times `work` into a histogram handle taken beforehand (a hot path's,
/// looked up once rather than on every record).
pub async fn timed_into<T>(histogram: &metrics::Histogram, work: impl std::future::Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let out = work.await;
    histogram.record(started.elapsed().as_secs_f64());
    out
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;
    use tracing_subscriber::prelude::*;

    use super::Redacting;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn statement_parameters_stay_out_of_a_blanket_debug_unless_asked_for() {
        use tracing::level_filters::LevelFilter;
        let max = |f: Option<&str>| super::filter(f).max_level_hint();
        assert_eq!(max(None), Some(LevelFilter::INFO));
        let shown = |f: &str, target: &str| {
            let out = Captured::default();
            let layer = tracing_subscriber::fmt::layer().with_writer(out.clone()).with_ansi(false);
            let subscriber = tracing_subscriber::registry().with(layer.with_filter(super::filter(Some(f))));
            tracing::subscriber::with_default(subscriber, || match target {
                "tokio_postgres" => tracing::debug!(target: "tokio_postgres::query", "executing statement"),
                _ => tracing::debug!(target: "worker::processing", "a debug line"),
            });
            !out.0.lock().unwrap().is_empty()
        };
        assert!(!shown("debug", "tokio_postgres"));
        assert!(shown("debug", "worker"));
        assert!(shown("debug,tokio_postgres=debug", "tokio_postgres"));
    }

    #[test]
    fn log_lines_leave_with_their_secrets_masked() {
        for json in [false, true] {
            let out = Captured::default();
            let layer = tracing_subscriber::fmt::layer().with_writer(Redacting(out.clone())).with_ansi(false);
            let subscriber: Box<dyn tracing::Subscriber + Send + Sync> = if json {
                Box::new(tracing_subscriber::registry().with(layer.json()))
            } else {
                Box::new(tracing_subscriber::registry().with(layer))
            };
            tracing::subscriber::with_default(subscriber, || {
                let url = "http://127.0.0.1:9/hook?api_key=SECRET-ONE";
                tracing::warn!(error = %format!("error sending request for url ({url})"), "delivery failed");
                tracing::info!(target_url = url, "plain field");
                tracing::info!("connecting to amqp://app:SECRET-TWO@broker:5672/%2f");
                tracing::info!("a line without secrets");
            });
            let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
            assert!(!text.contains("SECRET"), "json={json}: {text}");
            assert!(text.contains("api_key=***"), "json={json}: {text}");
            assert!(text.contains("amqp://app:***@broker:5672/%2f"), "json={json}: {text}");
            assert!(text.contains("a line without secrets"), "json={json}: {text}");
            assert_eq!(text.lines().count(), 4, "json={json}: one line per event: {text}");
        }
    }
}

/// Counts events and says when to log them: at most once per interval,
/// with the count since the last report, so an event that can happen
/// thousands of times a second is seen in the log without flooding it.
pub struct EveryInterval {
    interval: std::time::Duration,
    state: std::sync::Mutex<(Option<std::time::Instant>, u64)>,
}

impl EveryInterval {
    pub fn new(interval: std::time::Duration) -> Self {
        Self { interval, state: std::sync::Mutex::new((None, 0)) }
    }

    /// Counts one event; `Some(count)` (this one included) when it is time
    /// to report: on the first event, then once an interval has passed.
    pub fn add(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.1 += 1;
        let now = std::time::Instant::now();
        if state.0.is_some_and(|last| now.duration_since(last) < self.interval) {
            return None;
        }
        let count = state.1;
        *state = (Some(now), 0);
        Some(count)
    }
}

#[cfg(test)]
mod every_interval_tests {
    use super::EveryInterval;

    #[test]
    fn reports_the_first_event_then_the_count_once_per_interval() {
        let every = EveryInterval::new(std::time::Duration::from_millis(50));
        assert_eq!(every.add(), Some(1));
        assert_eq!(every.add(), None);
        assert_eq!(every.add(), None);
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(every.add(), Some(3), "the two held back and this one");
        assert_eq!(every.add(), None);
    }
}
