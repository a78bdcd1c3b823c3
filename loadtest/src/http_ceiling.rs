//! The raw HTTP ceiling: what a plain client achieves against the
//! scenarios' receiver on this machine, with as many keep-alive connections
//! as the stack's workers may hold to one host. Requests carry the headers a
//! worker sends (execution id, scheduled instant, attempt) and no body, as a
//! herd job's callback does; nothing else runs in between (no broker, no
//! database, no ledger). A herd's drain rate divided by this is the share of
//! the physical limit of delivery the product reaches here.
//!
//! The receiver is a separate instance of the same code in this process, so
//! the ceiling's requests never mix with a scenario's deliveries.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::receiver::Receiver;

#[derive(clap::Args, Clone, Debug)]
pub struct HttpCeilingArgs {
    /// Requests the plain client sends for the raw HTTP ceiling.
    #[arg(long, default_value_t = 100_000)]
    pub http_ceiling_requests: usize,
    /// Keep-alive connections of the plain client (default: what the
    /// stack's workers may open to one host, workers × min(in-flight limit,
    /// per-host limit)).
    #[arg(long)]
    pub http_ceiling_connections: Option<usize>,
    /// Times the ceiling is measured (by the herd: before it and again
    /// after it); the median is the one compared with. The machine's speed
    /// moved by a third between herds minutes apart on a shared 2-core
    /// machine, and a ratio is only as steady as its denominator.
    #[arg(long, default_value_t = 3)]
    pub http_ceiling_runs: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct HttpCeiling {
    pub requests: usize,
    pub connections: usize,
    pub seconds: f64,
    /// Requests answered per second, first request to last answer (the
    /// median of the runs when there were several).
    pub per_second: f64,
    /// Each run's figure, in the order they ran.
    pub runs_per_second: Vec<f64>,
}

/// `runs` measurements one after the other; the median run stands for them.
pub async fn measure_median(requests: usize, connections: usize, runs: usize) -> anyhow::Result<HttpCeiling> {
    let mut all = Vec::with_capacity(runs.max(1));
    for _ in 0..runs.max(1) {
        all.push(measure(requests, connections).await?);
    }
    Ok(HttpCeiling::median_of(all))
}

impl HttpCeiling {
    /// The median of several measurements (the upper one of an even count),
    /// with each run's figure kept, in order.
    pub fn median_of(mut all: Vec<HttpCeiling>) -> HttpCeiling {
        let runs_per_second: Vec<f64> = all.iter().flat_map(|c| c.runs_per_second.iter().copied()).collect();
        let mut sorted = runs_per_second.clone();
        sorted.sort_by(f64::total_cmp);
        let per_second = sorted[sorted.len() / 2];
        let first = all.swap_remove(0);
        HttpCeiling { per_second, runs_per_second, seconds: first.requests as f64 / per_second, ..first }
    }
}

/// Sends `requests` requests over `connections` warmed keep-alive
/// connections to a fresh loopback receiver and times them.
pub async fn measure(requests: usize, connections: usize) -> anyhow::Result<HttpCeiling> {
    anyhow::ensure!(requests > 0 && connections > 0, "the HTTP ceiling needs requests and connections");
    let receiver = Receiver::loopback().await?;
    let url = receiver.hook_url();
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(connections)
        .timeout(Duration::from_secs(10))
        .build()?;
    let scheduled_at = domain::execution::format_instant(chrono::Utc::now());
    // One request per connection first, all at once, so every connection is
    // open before the clock starts (a worker's pool is warm after its first
    // burst too).
    let warm: Vec<_> = (0..connections).map(|i| request(&client, &url, &scheduled_at, requests + i).send()).collect();
    for r in futures::future::join_all(warm).await {
        r.context("warming the HTTP ceiling's connections")?.error_for_status()?;
    }

    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        let (client, url, next, scheduled_at) = (client.clone(), url.clone(), next.clone(), scheduled_at.clone());
        tasks.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= requests {
                    return anyhow::Ok(());
                }
                request(&client, &url, &scheduled_at, i)
                    .send()
                    .await
                    .context("a request of the HTTP ceiling")?
                    .error_for_status()?;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let seconds = started.elapsed().as_secs_f64();
    anyhow::ensure!(
        receiver.count() == requests + connections,
        "the receiver recorded {} requests of {}",
        receiver.count(),
        requests + connections
    );
    let per_second = requests as f64 / seconds;
    Ok(HttpCeiling { requests, connections, seconds, per_second, runs_per_second: vec![per_second] })
}

/// The request a worker sends for a herd job's first attempt.
fn request(client: &reqwest::Client, url: &str, scheduled_at: &str, i: usize) -> reqwest::RequestBuilder {
    client
        .post(url)
        .header("X-Cronshard-Execution-Id", format!("http-ceiling@{i}"))
        .header("X-Cronshard-Scheduled-At", scheduled_at)
        .header("X-Cronshard-Attempt", "1")
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn every_request_of_the_ceiling_reaches_the_receiver_once() {
        let c = super::measure(500, 8).await.unwrap();
        assert_eq!((c.requests, c.connections), (500, 8));
        assert!(c.seconds > 0.0 && c.per_second > 0.0, "{c:?}");
    }

    #[tokio::test]
    async fn the_median_run_stands_for_several() {
        let c = super::measure_median(300, 4, 3).await.unwrap();
        assert_eq!(c.runs_per_second.len(), 3);
        let mut sorted = c.runs_per_second.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(c.per_second, sorted[1], "{c:?}");
    }

    #[test]
    fn sets_measured_before_and_after_are_one_median_with_every_run_kept_in_order() {
        let set = |runs: &[f64]| super::HttpCeiling {
            requests: 1_000,
            connections: 8,
            seconds: 0.0,
            per_second: 0.0,
            runs_per_second: runs.to_vec(),
        };
        let c = super::HttpCeiling::median_of(vec![set(&[30.0, 31.0, 29.0]), set(&[50.0, 52.0, 51.0])]);
        assert_eq!(c.runs_per_second, vec![30.0, 31.0, 29.0, 50.0, 52.0, 51.0]);
        assert_eq!(c.per_second, 50.0, "the upper median of six");
        assert_eq!((c.requests, c.connections, c.seconds), (1_000, 8, 20.0));
    }

    #[tokio::test]
    async fn a_ceiling_without_requests_or_connections_is_refused() {
        assert!(super::measure(0, 8).await.is_err());
        assert!(super::measure(10, 0).await.is_err());
    }
}
