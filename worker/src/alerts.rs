//! Sends the alert notices the schedulers' evaluations queue
//! (`alert_notifications`, see `store::alerts`). Each worker takes the
//! oldest due notice no other worker holds, under its row lock, sends it
//! and records the attempt in the same transaction: a worker that dies
//! mid-send leaves it pending, and the next one sends it with the same
//! `webhook-id` (the notice's id), which a receiver dedupes on.
//!
//! A `webhook` channel gets the incident as JSON, signed with the
//! namespace's signing keys exactly as a delivery is (Standard Webhooks);
//! a `slack` channel gets `{"text": …}`. The address is opened from its
//! sealed form right before the request and goes through the same SSRF
//! guard as callbacks. 2xx is delivered; 408, 425, 429, 5xx and network
//! errors are retried with exponential backoff (1 s doubling to 10 min,
//! equal jitter) for up to `ATTEMPTS_MAX` attempts; any other answer gives up.
//! A channel over its `max_per_minute` has the notice wait its turn.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use store::alerts::{self, ChannelKind, NoticeKind, Outgoing, Sent};
use store::secrets::Vault;

use crate::deliver::signing::{self, Signer};
use crate::deliver::ssrf::{GuardedResolver, SsrfGuard};

/// Attempts before a notice is given up (19 waits: at most 6,423 s, about
/// 1 h 47 min, of backoff; at least half that).
pub const ATTEMPTS_MAX: i32 = 20;
/// How long one attempt may take.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a worker looks for due notices when there were none.
const POLL_EVERY: Duration = Duration::from_millis(500);

pub struct AlertSender {
    pg: deadpool_postgres::Pool,
    vault: Vault,
    signer: Signer,
    client: reqwest::Client,
    guard: Arc<SsrfGuard>,
}

impl AlertSender {
    pub fn new(pg: deadpool_postgres::Pool, vault: Vault, guard: SsrfGuard) -> anyhow::Result<Self> {
        let guard = Arc::new(guard);
        let client = reqwest::Client::builder()
            .user_agent(concat!("cronshard/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .timeout(ATTEMPT_TIMEOUT)
            .dns_resolver(Arc::new(GuardedResolver { guard: guard.clone() }))
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        let signer = Signer::new(pg.clone(), vault.clone(), signing::ACTIVE_KEYS_FRESH_FOR);
        Ok(Self { pg, vault, signer, client, guard })
    }

    pub async fn run(self, token: CancellationToken) {
        let failures = runtime::telemetry::EveryInterval::new(Duration::from_secs(60));
        loop {
            let more = tokio::select! {
                _ = token.cancelled() => return,
                sent = self.send_one() => sent,
            };
            match more {
                Ok(true) => continue,
                Ok(false) => {}
                Err(e) => {
                    if let Some(failed) = failures.add() {
                        tracing::warn!(error = %format!("{e:#}"), failed, "sending alert notices failed");
                    }
                }
            }
            tokio::select! {
                _ = token.cancelled() => return,
                _ = tokio::time::sleep(POLL_EVERY) => {}
            }
        }
    }

    /// Sends the oldest due notice; false when there was none.
    async fn send_one(&self) -> anyhow::Result<bool> {
        let mut client = self.pg.get().await?;
        let tx = client.transaction().await?;
        let Some(notice) = alerts::next_due(&tx).await? else { return Ok(false) };
        let sent = if notice.sent_last_minute >= i64::from(notice.max_per_minute) {
            Sent::Deferred { after: Duration::from_secs(10) }
        } else {
            self.attempt(&notice).await
        };
        let outcome = match &sent {
            Sent::Delivered { .. } => "delivered",
            Sent::Retry { .. } => "retrying",
            Sent::GaveUp { .. } => "failed",
            Sent::Deferred { .. } => "deferred",
        };
        metrics::counter!(runtime::metrics::ALERT_NOTICES_TOTAL, "outcome" => outcome).increment(1);
        match &sent {
            Sent::GaveUp { error, .. } => {
                tracing::error!(notice.id = %notice.id, channel.id = %notice.channel_id, error = %error, "alert notice given up")
            }
            Sent::Retry { error, .. } => {
                tracing::warn!(notice.id = %notice.id, channel.id = %notice.channel_id, error = %error, "alert notice failed; retrying")
            }
            _ => {}
        }
        alerts::mark(&tx, notice.id, &sent).await?;
        tx.commit().await?;
        Ok(true)
    }

    async fn attempt(&self, notice: &Outgoing) -> Sent {
        match self.request(notice).await {
            Ok(status) if (200..300).contains(&status) => Sent::Delivered { status: i32::from(status) },
            Ok(status) if matches!(status, 408 | 425 | 429) || status >= 500 => {
                self.retry(notice, Some(i32::from(status)), format!("HTTP {status}"))
            }
            Ok(status) => Sent::GaveUp { status: Some(i32::from(status)), error: format!("HTTP {status}") },
            Err(Failure::Refused(e)) => Sent::GaveUp { status: None, error: e },
            Err(Failure::Transient(e)) => self.retry(notice, None, e),
        }
    }

    fn retry(&self, notice: &Outgoing, status: Option<i32>, error: String) -> Sent {
        if notice.attempts + 1 >= ATTEMPTS_MAX {
            return Sent::GaveUp { status, error: format!("{error} (gave up after {ATTEMPTS_MAX} attempts)") };
        }
        Sent::Retry { after: backoff(notice.id, notice.attempts), status, error }
    }

    async fn request(&self, notice: &Outgoing) -> Result<u16, Failure> {
        let aad = alerts::channel_url_aad(&notice.namespace, notice.channel_id);
        let url = self
            .vault
            .open(&self.pg, &aad, &notice.url_sealed)
            .await
            .map_err(|e| Failure::Transient(format!("the channel's address cannot be opened: {e}")))?;
        let url = String::from_utf8(url).map_err(|_| Failure::Refused("the channel's address is not text".into()))?;
        let parsed = reqwest::Url::parse(&url).map_err(|e| Failure::Refused(format!("invalid address: {e}")))?;
        if let Some(ip) = domain::netguard::literal_host(&parsed)
            && let Some(refusal) = self.guard.refusal(ip)
        {
            return Err(Failure::Refused(format!("the channel's address refers to {refusal}")));
        }
        let body = payload(notice);
        let bytes = serde_json::to_vec(&body).map_err(|e| Failure::Refused(e.to_string()))?;
        let id = notice.id.to_string();
        let timestamp = runtime::clock::now().timestamp();
        let mut request = self
            .client
            .post(parsed)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(signing::WEBHOOK_ID, &id)
            .header(signing::WEBHOOK_TIMESTAMP, timestamp.to_string());
        if notice.channel_kind == ChannelKind::Webhook {
            let keys = self
                .signer
                .keys(&notice.namespace)
                .await
                .map_err(|e| Failure::Transient(format!("the namespace's signing keys cannot be read: {e}")))?;
            if let Some(signature) = signing::signature(&keys, &id, timestamp, &bytes) {
                request = request.header(signing::WEBHOOK_SIGNATURE, signature);
            }
        }
        let response = request.body(bytes).send().await.map_err(|e| {
            // Without the URL: a Slack address is a secret.
            Failure::Transient(domain::redact::text(&format!("{:#}", anyhow::Error::new(e.without_url()))))
        })?;
        Ok(response.status().as_u16())
    }
}

enum Failure {
    /// Not worth another attempt.
    Refused(String),
    Transient(String),
}

/// 1 s doubling per attempt up to 10 min, equal jitter drawn from the
/// notice's id and attempt (a retry's wait is reproducible).
fn backoff(id: uuid::Uuid, attempts: i32) -> Duration {
    let base =
        Duration::from_secs(1).saturating_mul(1u32 << attempts.clamp(0, 10) as u32).min(Duration::from_secs(600));
    let seed = id.as_u128() as u64 ^ (attempts as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let fraction = (seed % 1000) as f64 / 1000.0;
    base / 2 + base.mul_f64(fraction / 2.0)
}

/// The notice's body: the incident as JSON for a webhook; a line of text for Slack.
pub fn payload(notice: &Outgoing) -> Value {
    let i = &notice.incident;
    let kind = notice.kind;
    match notice.channel_kind {
        ChannelKind::Webhook => json!({
            "type": format!("alert.{}", kind.as_str()),
            "notice_id": notice.id,
            "incident": i,
        }),
        ChannelKind::Slack => {
            let job = i["job"]["name"].as_str().unwrap_or("a deleted job");
            let namespace = i["job"]["namespace"].as_str().unwrap_or_default();
            let rule = i["rule"]["name"].as_str().unwrap_or_default();
            let text = match kind {
                NoticeKind::Firing => format!(
                    ":rotating_light: *{rule}* fired for job *{job}* ({namespace}): {}",
                    i["summary"].as_str().unwrap_or_default()
                ),
                NoticeKind::Resolved => format!(
                    ":white_check_mark: *{rule}* resolved for job *{job}* ({namespace}): {}",
                    i["resolution"].as_str().unwrap_or_default()
                ),
            };
            json!({ "text": text })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_equal_jitter_up_to_ten_minutes() {
        let id = uuid::Uuid::now_v7();
        for attempts in 0..25 {
            let base = Duration::from_secs(1u64 << attempts.min(10)).min(Duration::from_secs(600));
            let wait = backoff(id, attempts);
            assert!(
                wait >= base / 2 && wait <= base,
                "attempt {attempts}: {wait:?} outside [{:?}, {base:?}]",
                base / 2
            );
        }
    }
}
