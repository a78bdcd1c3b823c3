//! Prometheus exporter for the scheduler and worker (`METRICS_ADDR`).

use std::net::SocketAddr;

use metrics_exporter_prometheus::PrometheusBuilder;

/// Serves `/metrics` on `addr`. Latency histograms get buckets in seconds.
pub fn install_exporter(addr: SocketAddr) -> anyhow::Result<()> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0])?
        .install()?;
    Ok(())
}
