//! The alert loop every scheduler runs: evaluates the alert rules that are
//! due (one node evaluates a rule at a time, in one transaction: see
//! `store::alerts`), and once an hour drops the audit entries past their
//! retention. Workers send the notices the evaluations queue.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often a rule is evaluated, by default.
pub const EVALUATION_INTERVAL_DEFAULT_MS: u64 = 5_000;
/// How long audit entries are kept, by default (about 13 months: a year's
/// reviews and then some).
pub const AUDIT_RETENTION_DAYS_DEFAULT: u64 = 400;

const AUDIT_PRUNE_EVERY: Duration = Duration::from_secs(3600);

pub async fn run(
    pool: deadpool_postgres::Pool,
    node_id: String,
    every: Duration,
    audit_retention: Duration,
    token: CancellationToken,
) {
    // Due rules are looked for four times per interval: a rule is evaluated
    // at most a quarter interval after it is due.
    let mut tick = tokio::time::interval((every / 4).max(Duration::from_millis(50)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let failures = runtime::telemetry::EveryInterval::new(Duration::from_secs(60));
    let mut pruned_at: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = token.cancelled() => return,
            _ = tick.tick() => {}
        }
        match store::alerts::evaluate_due(&pool, &node_id, every).await {
            Ok(n) if n > 0 => {
                metrics::counter!(runtime::metrics::ALERT_EVALUATIONS_TOTAL).increment(n as u64);
            }
            Ok(_) => {}
            Err(e) => {
                if let Some(failed) = failures.add() {
                    tracing::warn!(error = %format!("{e:#}"), failed, "evaluating alert rules failed");
                }
            }
        }
        if pruned_at.is_none_or(|at| at.elapsed() >= AUDIT_PRUNE_EVERY) {
            pruned_at = Some(tokio::time::Instant::now());
            let before = runtime::clock::now() - chrono::TimeDelta::from_std(audit_retention).unwrap_or_default();
            let pruned = async {
                let mut client = pool.get().await?;
                anyhow::Ok(store::audit::prune(&mut client, before).await?)
            }
            .await;
            match pruned {
                Ok(0) => {}
                Ok(n) => tracing::info!(entries = n, "audit entries past their retention dropped"),
                Err(e) => tracing::warn!(error = %format!("{e:#}"), "dropping old audit entries failed"),
            }
        }
    }
}
