//! HTTP callback delivery with reqwest: the target's request plus the
//! `X-Cronshard-*` headers; 2xx is success. Two clients share one guarded
//! resolver: one never follows redirects (the default), one follows up to 5
//! (each hop checked by the SSRF guard). Connections are pooled per host.

use std::sync::Arc;
use std::time::Duration;

use reqwest::redirect::Policy;
use reqwest::{Client, Method, Url};

use common::execution::format_instant;
use common::job::HttpTarget;
use common::message::FireMessage;

use super::ssrf::{CallbackRefused, GuardedResolver, SsrfGuard};
use super::{DeliveryError, Outcome};

const EXCERPT_BYTES: usize = 1024;

pub struct HttpDelivery {
    direct: Client,
    following: Client,
    guard: Arc<SsrfGuard>,
}

impl HttpDelivery {
    /// `max_idle_per_host`: connections kept open to one host between bursts;
    /// the worker passes its in-flight limit, so a burst to one receiver
    /// reuses its connections instead of opening and closing hundreds.
    pub fn new(guard: SsrfGuard, max_idle_per_host: usize) -> anyhow::Result<Self> {
        let guard = Arc::new(guard);
        let build = |policy: Policy| {
            Client::builder()
                .user_agent(concat!("cronshard/", env!("CARGO_PKG_VERSION")))
                .no_proxy()
                .connect_timeout(Duration::from_secs(10))
                .pool_max_idle_per_host(max_idle_per_host)
                .dns_resolver(Arc::new(GuardedResolver { guard: guard.clone() }))
                .redirect(policy)
                .build()
        };
        let hop_guard = guard.clone();
        let follow = Policy::custom(move |attempt| {
            if attempt.previous().len() >= 5 {
                return attempt.error("more than 5 redirects");
            }
            match literal_refusal(&hop_guard, attempt.url()) {
                Some(reason) => attempt.error(reason),
                None => attempt.follow(),
            }
        });
        Ok(Self { direct: build(Policy::none())?, following: build(follow)?, guard })
    }

    pub async fn deliver(&self, target: &HttpTarget, message: &FireMessage, attempt: u32) -> Outcome {
        let url = match Url::parse(&target.url) {
            Ok(u) => u,
            Err(e) => return Outcome::failure(DeliveryError::InvalidTarget(format!("invalid URL: {e}"))),
        };
        // IP literals never reach the resolver, so check them here.
        if let Some(reason) = literal_refusal(&self.guard, &url) {
            return Outcome::failure(DeliveryError::CallbackRefused(reason));
        }
        let method = Method::from_bytes(target.method.as_bytes()).unwrap_or(Method::POST);
        let client = if target.follow_redirects { &self.following } else { &self.direct };
        let mut request = client.request(method, url).timeout(Duration::from_millis(target.timeout_ms));
        for (name, value) in &target.headers {
            request = request.header(name, value);
        }
        request = request
            .header("X-Cronshard-Execution-Id", &message.execution_id)
            .header("X-Cronshard-Scheduled-At", format_instant(message.scheduled_at))
            .header("X-Cronshard-Attempt", attempt.to_string());
        if let Some(body) = &target.body {
            request = request.body(body.clone());
        }
        match request.send().await {
            Ok(mut response) => {
                let status = response.status();
                let mut excerpt = Vec::new();
                while excerpt.len() < EXCERPT_BYTES {
                    match response.chunk().await {
                        Ok(Some(chunk)) => {
                            excerpt.extend_from_slice(&chunk[..chunk.len().min(EXCERPT_BYTES - excerpt.len())])
                        }
                        _ => break,
                    }
                }
                let excerpt = String::from_utf8_lossy(&excerpt).into_owned();
                if status.is_success() {
                    Outcome::Success { http_status: Some(status.as_u16()), excerpt }
                } else {
                    Outcome::Failure { error: DeliveryError::HttpStatus(status), excerpt }
                }
            }
            Err(e) => Outcome::failure(request_error(&e, target.timeout_ms)),
        }
    }
}

/// A request that got no response. The refusal is looked for first: it
/// decides that no retry is made, whatever else the error says.
fn request_error(e: &reqwest::Error, timeout_ms: u64) -> DeliveryError {
    if refused_by_guard(e) {
        DeliveryError::CallbackRefused(error_chain(e))
    } else if e.is_timeout() {
        DeliveryError::TimedOut { timeout_ms }
    } else {
        DeliveryError::Connection(error_chain(e))
    }
}

fn literal_refusal(guard: &SsrfGuard, url: &Url) -> Option<String> {
    let ip = match url.host()? {
        url::Host::Ipv4(v4) => std::net::IpAddr::V4(v4),
        url::Host::Ipv6(v6) => std::net::IpAddr::V6(v6),
        url::Host::Domain(_) => return None,
    };
    guard
        .refusal(ip)
        .map(|reason| format!("callback refused: {ip} is a {reason} address; allow it with CALLBACK_ALLOW_CIDRS"))
}

/// Whether the SSRF guard refused the callback's address somewhere in the
/// error's causes (reqwest wraps the resolver's error).
fn refused_by_guard(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source()).any(|e| e.is::<CallbackRefused>())
}

/// The error and its causes on one line: reqwest's top-level message alone
/// ("error sending request") does not say what went wrong.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
