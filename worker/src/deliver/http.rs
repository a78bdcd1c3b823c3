//! HTTP callback delivery with reqwest: the target's request plus the
//! `X-Cronshard-*` headers and the Standard Webhooks ones (`signing`); the
//! answer is judged by the target's contract (`domain::contract`). One client, behind the guarded
//! resolver, that never follows redirects itself: when the target says
//! `follow_redirects`, `deliver` follows up to 5 of them, each hop checked by
//! the SSRF guard. Connections are pooled per host.
//!
//! Redirects are followed here rather than by reqwest's policy, which can
//! refuse a hop but not change its headers: the target's `headers` and
//! `secret_headers` go only to the origin (scheme, host, port) of the
//! target's URL, unless the target says `forward_headers_on_redirect`, so a
//! redirect cannot carry a job's credentials to another site. The
//! `X-Cronshard-*` headers go to every hop. As browsers and reqwest do, a
//! 301, 302 or 303 turns a request other than GET or HEAD into a GET without
//! a body (and without the body's `Content-Type` and `Content-Encoding`); a
//! 307 or 308 repeats the method and body. The target's `timeout_ms` bounds
//! all hops together.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::redirect::Policy;
use reqwest::{Client, Method, StatusCode, Url};
use tokio::time::Instant;

use domain::contract::{self, Judgement};
use domain::execution::format_instant;
use domain::job::HttpTarget;
use domain::message::FireMessage;

use super::signing::{Signing, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use super::ssrf::{CallbackRefused, GuardedResolver, SsrfGuard};
use super::{
    ATTEMPT_NAME, Answer, COMPLETION_TOKEN_NAME, DeliveryError, EXECUTION_ID_NAME, Outcome, SCHEDULED_AT_NAME,
};

const EXCERPT_BYTES: usize = 1024;
/// The `X-Cronshard-*` names as header names, built once: given as text,
/// each request parsed all three again.
static CRONSHARD_HEADERS: LazyLock<[HeaderName; 3]> = LazyLock::new(|| {
    [EXECUTION_ID_NAME, SCHEDULED_AT_NAME, ATTEMPT_NAME]
        .map(|name| HeaderName::from_bytes(name.as_bytes()).expect("the X-Cronshard-* names are valid header names"))
});
static WEBHOOK_HEADERS: LazyLock<[HeaderName; 3]> =
    LazyLock::new(|| [WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE].map(HeaderName::from_static));
/// Parsed once: a lookup by `&str` parses the name on every call.
static KEPT_HEADERS: LazyLock<[HeaderName; contract::KEPT_RESPONSE_HEADERS.len()]> =
    LazyLock::new(|| contract::KEPT_RESPONSE_HEADERS.map(HeaderName::from_static));
/// The headers every request carries beside the target's: X-Cronshard-*
/// (3), webhook-* (3), the completion token; room made at once rather than
/// by growing the map as they are added.
const ADDED_HEADERS: usize = 7;
/// Most redirects followed for one attempt.
pub const MAX_REDIRECTS: usize = 5;

pub struct HttpDelivery {
    client: Client,
    guard: Arc<SsrfGuard>,
    body_matcher: contract::BodyMatcher,
}

impl HttpDelivery {
    /// `max_idle_per_host`: connections kept open to one host between bursts;
    /// the worker passes its in-flight limit, so a burst to one receiver
    /// reuses its connections instead of opening and closing hundreds.
    pub fn new(guard: SsrfGuard, max_idle_per_host: usize) -> anyhow::Result<Self> {
        let guard = Arc::new(guard);
        let client = Client::builder()
            .user_agent(concat!("cronshard/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .pool_max_idle_per_host(max_idle_per_host)
            .dns_resolver(Arc::new(GuardedResolver { guard: guard.clone() }))
            .redirect(Policy::none())
            .build()?;
        Ok(Self { client, guard, body_matcher: contract::BodyMatcher::default() })
    }

    /// The answer judged by the target's contract (`domain::contract`):
    /// its status, as much of its body as a body condition needs (else the
    /// excerpt's worth), its `Retry-After` and the headers kept.
    /// `accepts_202`: the job's completion is async, and a 202 leaves the
    /// attempt awaiting its receiver's report.
    async fn judge(&self, target: &HttpTarget, mut response: reqwest::Response, accepts_202: bool) -> Outcome {
        let status = response.status();
        let success = target.success.as_ref();
        let wanted = if success.is_some_and(|s| s.body_contains.is_some() || s.body_matches.is_some()) {
            contract::BODY_CHECKED_BYTES
        } else {
            EXCERPT_BYTES
        };
        let mut body = Vec::new();
        while body.len() < wanted {
            match response.chunk().await {
                Ok(Some(chunk)) => body.extend_from_slice(&chunk[..chunk.len().min(wanted - body.len())]),
                _ => break,
            }
        }
        let body = String::from_utf8_lossy(&body);
        let headers = kept_headers(response.headers());
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| contract::retry_after(v, runtime::clock::now()));
        let judgement =
            contract::judge(success, target.retry_statuses.as_deref(), status.as_u16(), &body, &self.body_matcher);
        let excerpt_end = body.floor_char_boundary(EXCERPT_BYTES);
        let excerpt = domain::redact::response_body(&body[..excerpt_end]);
        if accepts_202 && status == StatusCode::ACCEPTED {
            let rule = "HTTP 202 to a job whose completion is async".to_owned();
            return Outcome::Accepted {
                http_status: status.as_u16(),
                answer: Answer { excerpt, headers, retry_after, rule: Some(rule) },
            };
        }
        match judgement {
            Judgement::Success { rule } => Outcome::Success {
                http_status: Some(status.as_u16()),
                answer: Answer { excerpt, headers, retry_after, rule: Some(rule) },
            },
            Judgement::Failure { retryable, unexpected_body, rule } => {
                let error = if unexpected_body {
                    DeliveryError::UnexpectedBody { status, retryable }
                } else {
                    DeliveryError::HttpStatus { status, retryable }
                };
                Outcome::Failure { error, answer: Answer { excerpt, headers, retry_after, rule: Some(rule) } }
            }
        }
    }

    /// One attempt, unsigned (tests; the worker signs, `deliver_to`).
    pub async fn deliver(&self, target: &HttpTarget, message: &FireMessage, attempt: u32) -> Outcome {
        let unsigned =
            Signing { keys: Arc::from([]), timestamp: runtime::clock::now().timestamp(), completion_token: None };
        self.deliver_to(target, Url::parse(&target.url), message, attempt, &unsigned).await
    }

    /// `deliver` with the target's URL already parsed (`url`).
    pub async fn deliver_to(
        &self,
        target: &HttpTarget,
        url: Result<Url, url::ParseError>,
        message: &FireMessage,
        attempt: u32,
        signing: &Signing,
    ) -> Outcome {
        let first = match url {
            Ok(u) => u,
            Err(e) => return Outcome::failure(DeliveryError::InvalidTarget(format!("invalid URL: {e}"))),
        };
        // IP literals never reach the resolver, so check them here.
        if let Some(refusal) = literal_refusal(&self.guard, &first) {
            return Outcome::failure(DeliveryError::CallbackRefused(format!(
                "callback refused: the URL refers to {refusal}; allow it with CALLBACK_ALLOW_CIDRS"
            )));
        }
        let deadline = Instant::now() + Duration::from_millis(target.timeout_ms);
        // Only a redirect can leave it (each `origin` allocates).
        let origin = target.follow_redirects.then(|| first.origin());
        let mut url = first;
        let mut hop = Hop {
            method: Method::from_bytes(target.method.as_bytes()).unwrap_or(Method::POST),
            body: target.body.clone(),
            body_dropped: false,
        };
        let mut redirects = 0;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Outcome::failure(DeliveryError::TimedOut { timeout_ms: target.timeout_ms });
            }
            let same_origin = redirects == 0 || origin.as_ref().is_some_and(|o| url.origin() == *o);
            // Built in place rather than through `RequestBuilder`, which
            // moves the whole request on every header it adds. The URL is
            // moved in (a redirect's base is the response's URL, the same
            // one), and without redirects to follow the body is too.
            let mut request = reqwest::Request::new(hop.method.clone(), url);
            *request.timeout_mut() = Some(remaining);
            request.headers_mut().reserve(target.headers.len() + target.secret_headers.len() + ADDED_HEADERS);
            if let Err(e) = hop_headers(
                request.headers_mut(),
                target,
                same_origin || target.forward_headers_on_redirect,
                hop.body_dropped,
                message,
                attempt,
            ) {
                return Outcome::failure(e);
            }
            // Signed as sent on this hop: a 303 drops the body.
            sign(request.headers_mut(), signing, &message.execution_id, hop.body.as_deref().unwrap_or(""));
            let body = if target.follow_redirects { hop.body.clone() } else { hop.body.take() };
            *request.body_mut() = body.map(reqwest::Body::from);
            let response = match self.client.execute(request).await {
                Ok(r) => r,
                Err(e) => return Outcome::failure(request_error(&e, target.timeout_ms)),
            };
            let status = response.status();
            if target.follow_redirects
                && let Some(location) = redirect_location(&response)
            {
                if redirects == MAX_REDIRECTS {
                    return Outcome::failure(DeliveryError::Connection(format!(
                        "more than {MAX_REDIRECTS} redirects (the last an HTTP {status})"
                    )));
                }
                let next = match response.url().join(location) {
                    Ok(u) if u.scheme() == "http" || u.scheme() == "https" => u,
                    Ok(u) => {
                        return Outcome::failure(DeliveryError::Connection(format!(
                            "HTTP {status} redirects to a {} URL; only http and https are followed",
                            u.scheme()
                        )));
                    }
                    Err(e) => {
                        return Outcome::failure(DeliveryError::Connection(format!(
                            "HTTP {status} redirects to an invalid location: {e}"
                        )));
                    }
                };
                if let Some(refusal) = literal_refusal(&self.guard, &next) {
                    return Outcome::failure(DeliveryError::CallbackRefused(format!(
                        "callback refused: HTTP {status} redirects to {refusal}; allow it with CALLBACK_ALLOW_CIDRS"
                    )));
                }
                hop.redirect(status);
                url = next;
                redirects += 1;
                continue;
            }
            let accepts_202 = signing.completion_token.is_some();
            return self.judge(target, response, accepts_202).await;
        }
    }
}

/// One request of a delivery (the first, or one after a redirect), less
/// its URL.
struct Hop {
    method: Method,
    body: Option<String>,
    /// A 301/302/303 turned the request into one without a body: the body's
    /// own headers are not sent either.
    body_dropped: bool,
}

impl Hop {
    fn redirect(&mut self, status: StatusCode) {
        if matches!(status, StatusCode::MOVED_PERMANENTLY | StatusCode::FOUND | StatusCode::SEE_OTHER) {
            if self.method != Method::GET && self.method != Method::HEAD {
                self.method = Method::GET;
            }
            if self.body.take().is_some() {
                self.body_dropped = true;
            }
        }
    }
}

/// A hop's headers: the target's own (when they go to this hop's origin),
/// then the `X-Cronshard-*` ones. A name or value the HTTP crate refuses
/// (validation refuses them; a definition stored before it did may hold
/// one) fails the delivery for good, naming the header but never its value.
fn hop_headers(
    headers: &mut HeaderMap,
    target: &HttpTarget,
    targets_own: bool,
    body_dropped: bool,
    message: &FireMessage,
    attempt: u32,
) -> Result<(), DeliveryError> {
    if targets_own {
        let own = target.headers.iter().map(|h| (h, false));
        for ((name, value), secret) in own.chain(target.secret_headers.iter().map(|h| (h, true))) {
            if !sendable(name, body_dropped) {
                continue;
            }
            let refused =
                |what: &str| DeliveryError::InvalidTarget(format!("the header {name:?} has an invalid {what}"));
            let header_name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| refused("name"))?;
            let mut header_value = HeaderValue::from_str(value).map_err(|_| refused("value"))?;
            // Kept out of HTTP/2 header compression tables.
            header_value.set_sensitive(secret);
            headers.append(header_name, header_value);
        }
    }
    let [execution_id, scheduled_at, attempt_name] = &*CRONSHARD_HEADERS;
    let execution_id_value = HeaderValue::from_str(&message.execution_id).map_err(|_| {
        DeliveryError::InvalidTarget(format!("the execution id {:?} is not a header value", message.execution_id))
    })?;
    headers.append(execution_id, execution_id_value);
    let scheduled_at_value =
        HeaderValue::try_from(format_instant(message.scheduled_at)).expect("an RFC 3339 instant is a header value");
    headers.append(scheduled_at, scheduled_at_value);
    headers.append(attempt_name, HeaderValue::from(attempt));
    Ok(())
}

/// The Standard Webhooks headers of a hop: its id and instant always, its
/// signature when the namespace has keys.
fn sign(headers: &mut HeaderMap, signing: &Signing, execution_id: &str, body: &str) {
    let [id, timestamp, signature] = &*WEBHOOK_HEADERS;
    if let Some(token) = &signing.completion_token
        && let Ok(mut value) = HeaderValue::from_str(token)
    {
        value.set_sensitive(true);
        headers.append(COMPLETION_TOKEN_NAME, value);
    }
    if let Ok(value) = HeaderValue::from_str(execution_id) {
        headers.append(id, value);
    }
    headers.append(timestamp, HeaderValue::from(signing.timestamp));
    if let Some(signed) = signing.signature(execution_id, body.as_bytes()) {
        headers.append(signature, HeaderValue::try_from(signed).expect("base64 is a header value"));
    }
}

/// Whether a target header goes out: never a reserved one (validation
/// refuses them; a definition stored before it did may hold one), nor the
/// body's own headers once a redirect dropped the body.
fn sendable(name: &str, body_dropped: bool) -> bool {
    domain::job::reserved_header(name).is_none()
        && !(body_dropped
            && (name.eq_ignore_ascii_case("content-type") || name.eq_ignore_ascii_case("content-encoding")))
}

/// The response headers kept with the outcome, values cut to
/// `KEPT_HEADER_VALUE_MAX_BYTES` and redacted as text (a `Location` may
/// carry a token in its query).
fn kept_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    KEPT_HEADERS
        .iter()
        .filter_map(|name| {
            let value = String::from_utf8_lossy(headers.get(name)?.as_bytes()).into_owned();
            let cut = value.floor_char_boundary(contract::KEPT_HEADER_VALUE_MAX_BYTES);
            Some((name.as_str().to_owned(), domain::redact::text(&value[..cut])))
        })
        .collect()
}

/// The `Location` of a redirect that is followed (301, 302, 303, 307, 308).
fn redirect_location(response: &reqwest::Response) -> Option<&str> {
    let followed = matches!(
        response.status(),
        StatusCode::MOVED_PERMANENTLY
            | StatusCode::FOUND
            | StatusCode::SEE_OTHER
            | StatusCode::TEMPORARY_REDIRECT
            | StatusCode::PERMANENT_REDIRECT
    );
    if !followed {
        return None;
    }
    response.headers().get(reqwest::header::LOCATION)?.to_str().ok()
}

/// A request that got no response. The refusal is looked for first: it
/// decides that no retry is made, whatever else the error says.
fn request_error(e: &reqwest::Error, timeout_ms: u64) -> DeliveryError {
    if refused_by_guard(e) {
        DeliveryError::CallbackRefused(error_chain(e))
    } else if e.is_builder() {
        // The request cannot be built from the target (a header a stored
        // definition holds that reqwest refuses): every attempt would fail.
        DeliveryError::InvalidTarget(error_chain(e))
    } else if e.is_timeout() {
        DeliveryError::TimedOut { timeout_ms }
    } else {
        DeliveryError::Connection(error_chain(e))
    }
}

/// The guard's refusal of a URL's IP literal host (a name is checked by the
/// resolver when it is looked up).
fn literal_refusal(guard: &SsrfGuard, url: &Url) -> Option<domain::netguard::Refusal> {
    guard.refusal(domain::netguard::literal_host(url)?)
}

/// Whether the SSRF guard refused the callback's address somewhere in the
/// error's causes (reqwest wraps the resolver's error).
fn refused_by_guard(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |e| e.source()).any(|e| e.is::<CallbackRefused>())
}

/// The error and its causes on one line: reqwest's top-level message alone
/// ("error sending request") does not say what went wrong. reqwest's text
/// quotes the URL, so its credentials and query values are masked.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    domain::redact::text(&out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A request as a receiver saw it.
    #[derive(Debug, Clone)]
    struct Seen {
        method: String,
        path: String,
        headers: Vec<(String, String)>,
        body: String,
    }

    impl Seen {
        fn header(&self, name: &str) -> Vec<&str> {
            self.headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect()
        }
    }

    type Respond = dyn Fn(&str) -> (u16, Option<String>) + Send + Sync;

    /// A loopback HTTP/1.1 receiver: answers each request with the status
    /// (and `Location`, if any) `respond` gives for its path, and keeps it.
    struct Receiver {
        addr: SocketAddr,
        seen: Arc<Mutex<Vec<Seen>>>,
    }

    impl Receiver {
        async fn start(respond: impl Fn(&str) -> (u16, Option<String>) + Send + Sync + 'static) -> Receiver {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let seen = Arc::new(Mutex::new(Vec::new()));
            let respond: Arc<Respond> = Arc::new(respond);
            let log = seen.clone();
            tokio::spawn(async move {
                while let Ok((mut socket, _)) = listener.accept().await {
                    let (log, respond) = (log.clone(), respond.clone());
                    tokio::spawn(async move {
                        let mut buf = Vec::new();
                        let mut chunk = [0u8; 4096];
                        let head_end = loop {
                            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                                break i;
                            }
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
                        let mut lines = head.split("\r\n");
                        let mut request_line = lines.next().unwrap_or_default().split(' ');
                        let method = request_line.next().unwrap_or_default().to_owned();
                        let path = request_line.next().unwrap_or_default().to_owned();
                        let headers: Vec<(String, String)> = lines
                            .filter_map(|l| l.split_once(':'))
                            .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
                            .collect();
                        let length: usize = headers
                            .iter()
                            .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                            .and_then(|(_, v)| v.parse().ok())
                            .unwrap_or(0);
                        let mut body = buf[head_end + 4..].to_vec();
                        while body.len() < length {
                            match socket.read(&mut chunk).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => body.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let (status, location) = respond(&path);
                        let body = String::from_utf8_lossy(&body).into_owned();
                        log.lock().unwrap().push(Seen { method, path, headers, body });
                        let location = location.map(|l| format!("Location: {l}\r\n")).unwrap_or_default();
                        let answer = format!(
                            "HTTP/1.1 {status} X\r\n{location}Content-Length: 2\r\nConnection: close\r\n\r\nok"
                        );
                        let _ = socket.write_all(answer.as_bytes()).await;
                        let _ = socket.shutdown().await;
                    });
                }
            });
            Receiver { addr, seen }
        }

        fn url(&self, path: &str) -> String {
            format!("http://{}{path}", self.addr)
        }

        fn seen(&self) -> Vec<Seen> {
            self.seen.lock().unwrap().clone()
        }
    }

    fn target(url: &str) -> HttpTarget {
        HttpTarget {
            url: url.to_owned(),
            method: "POST".into(),
            headers: BTreeMap::from([
                ("X-Api-Key".to_owned(), "k-123".to_owned()),
                ("Content-Type".to_owned(), "application/json".to_owned()),
            ]),
            secret_headers: BTreeMap::from([("Authorization".to_owned(), "Bearer s3cret".to_owned())]),
            body: Some("{\"a\":1}".into()),
            timeout_ms: 5_000,
            follow_redirects: true,
            forward_headers_on_redirect: false,
            success: None,
            retry_statuses: None,
        }
    }

    fn message(target: &HttpTarget) -> FireMessage {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-15T15:00:00Z").unwrap().to_utc();
        testing::fire_message(domain::job::Target::Http(target.clone()), at)
    }

    fn loopback_allowed() -> HttpDelivery {
        HttpDelivery::new(SsrfGuard::new(SsrfGuard::parse_allow_list("127.0.0.0/8").unwrap()), 4).unwrap()
    }

    async fn deliver(delivery: &HttpDelivery, target: &HttpTarget) -> Outcome {
        delivery.deliver(target, &message(target), 3).await
    }

    #[track_caller]
    fn assert_success(outcome: &Outcome) {
        assert!(matches!(outcome, Outcome::Success { http_status: Some(200), .. }), "{outcome:?}");
    }

    #[tokio::test]
    async fn a_redirect_to_another_origin_drops_the_targets_headers_unless_the_job_opts_in() {
        let second = Receiver::start(|_| (200, None)).await;
        let landing = second.url("/landed");
        let first = Receiver::start(move |_| (307, Some(landing.clone()))).await;
        assert_ne!(first.addr.port(), second.addr.port());
        let delivery = loopback_allowed();

        let plain = target(&first.url("/start"));
        assert_success(&deliver(&delivery, &plain).await);
        let at_first = &first.seen()[0];
        assert_eq!(at_first.header("x-api-key"), ["k-123"]);
        assert_eq!(at_first.header("authorization"), ["Bearer s3cret"]);
        let at_second = &second.seen()[0];
        assert_eq!(at_second.path, "/landed");
        assert!(at_second.header("x-api-key").is_empty(), "{at_second:?}");
        assert!(at_second.header("authorization").is_empty(), "{at_second:?}");
        // cronshard's own headers go to every hop; a 307 repeats method and body.
        assert_eq!(at_second.header("x-cronshard-attempt"), ["3"]);
        assert_eq!(at_second.header("x-cronshard-execution-id").len(), 1);
        assert_eq!((at_second.method.as_str(), at_second.body.as_str()), ("POST", "{\"a\":1}"));

        let opted_in = HttpTarget { forward_headers_on_redirect: true, ..plain };
        assert_success(&deliver(&delivery, &opted_in).await);
        let at_second = &second.seen()[1];
        assert_eq!(at_second.header("x-api-key"), ["k-123"]);
        assert_eq!(at_second.header("authorization"), ["Bearer s3cret"]);
    }

    #[tokio::test]
    async fn a_redirect_within_the_origin_keeps_the_headers_and_a_302_turns_a_post_into_a_get() {
        let receiver = Receiver::start(|path| match path {
            "/moved" => (302, Some("/here?x=1".into())),
            _ => (200, None),
        })
        .await;
        assert_success(&deliver(&loopback_allowed(), &target(&receiver.url("/moved"))).await);
        let seen = receiver.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        let after = &seen[1];
        assert_eq!((after.method.as_str(), after.path.as_str(), after.body.as_str()), ("GET", "/here?x=1", ""));
        assert_eq!(after.header("x-api-key"), ["k-123"]);
        assert_eq!(after.header("authorization"), ["Bearer s3cret"]);
        assert!(after.header("content-type").is_empty(), "the body's header went with it: {after:?}");
    }

    /// The workspace's reqwest is patched (vendor/README.md) to skip two
    /// URL parses when a client cannot follow redirects. A client that can
    /// must still drop credentials on a cross-origin hop and report the final
    /// URL; one that cannot reports the URL it asked for.
    #[tokio::test]
    async fn the_patched_reqwest_still_strips_credentials_across_origins_and_reports_each_url() {
        let second = Receiver::start(|_| (200, None)).await;
        let landing = second.url("/landed");
        let first = Receiver::start(move |_| (302, Some(landing.clone()))).await;
        let start = format!("{}?q=1", first.url("/start"));

        let following = Client::new();
        let response = following.get(&start).header("authorization", "Bearer s3cret").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.url().as_str(), second.url("/landed"));
        assert_eq!(first.seen()[0].header("authorization"), ["Bearer s3cret"]);
        let at_second = &second.seen()[0];
        assert!(at_second.header("authorization").is_empty(), "{at_second:?}");

        let not_following = Client::builder().redirect(Policy::none()).build().unwrap();
        let response = not_following.get(&start).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::FOUND);
        assert_eq!(response.url().as_str(), start);
        assert_eq!(second.seen().len(), 1, "a client with Policy::none() followed a redirect");
    }

    #[tokio::test]
    async fn redirects_are_not_followed_unless_the_target_says_so() {
        let second = Receiver::start(|_| (200, None)).await;
        let landing = second.url("/landed");
        let first = Receiver::start(move |_| (302, Some(landing.clone()))).await;
        let target = HttpTarget { follow_redirects: false, ..target(&first.url("/start")) };
        match deliver(&loopback_allowed(), &target).await {
            Outcome::Failure { error: DeliveryError::HttpStatus { status, retryable }, .. } => {
                assert_eq!(status, StatusCode::FOUND);
                assert!(!retryable, "a 3xx is not retried by default");
            }
            other => panic!("{other:?}"),
        }
        assert!(second.seen().is_empty());
    }

    #[tokio::test]
    async fn a_redirect_to_an_internal_address_is_refused_and_not_retried() {
        let first = Receiver::start(|_| (302, Some("http://[::ffff:169.254.169.254]/latest/meta-data/".into()))).await;
        let Outcome::Failure { error, .. } = deliver(&loopback_allowed(), &target(&first.url("/start"))).await else {
            panic!("the redirect was followed")
        };
        let text = error.to_string();
        assert!(matches!(error, DeliveryError::CallbackRefused(_)), "{error:?}");
        assert!(!error.retryable());
        assert!(text.contains("169.254.169.254") && text.contains("cloud metadata"), "{text}");
        assert!(text.contains("CALLBACK_ALLOW_CIDRS"), "{text}");
    }

    #[tokio::test]
    async fn a_redirect_loop_stops_after_five_redirects() {
        let receiver = Receiver::start(|_| (302, Some("/again".into()))).await;
        let Outcome::Failure { error, .. } = deliver(&loopback_allowed(), &target(&receiver.url("/start"))).await
        else {
            panic!("a loop succeeded")
        };
        assert!(matches!(&error, DeliveryError::Connection(t) if t.contains("more than 5 redirects")), "{error:?}");
        assert_eq!(receiver.seen().len(), 1 + MAX_REDIRECTS);
    }

    #[tokio::test]
    async fn secret_headers_are_sent_like_headers_and_reserved_ones_of_old_definitions_are_not() {
        let receiver = Receiver::start(|_| (200, None)).await;
        let mut stored = target(&receiver.url("/hook"));
        // Refused by validation now; a definition stored before may hold them.
        stored.headers.insert("X-Cronshard-Attempt".into(), "99".into());
        stored.headers.insert("Host".into(), "evil.example".into());
        stored.headers.insert("Connection".into(), "upgrade".into());
        assert_success(&deliver(&loopback_allowed(), &stored).await);
        let seen = &receiver.seen()[0];
        assert_eq!(seen.header("authorization"), ["Bearer s3cret"]);
        assert_eq!(seen.header("x-api-key"), ["k-123"]);
        assert_eq!(seen.header("x-cronshard-attempt"), ["3"]);
        assert_eq!(seen.header("host"), [receiver.addr.to_string().as_str()]);
        assert!(!seen.header("connection").contains(&"upgrade"), "{seen:?}");
    }

    /// The request is built in place (not through reqwest's builder): a
    /// target that follows no redirects hands its URL and body over rather
    /// than copying them, and each header must still go out once.
    #[tokio::test]
    async fn a_target_that_follows_no_redirects_sends_its_method_body_and_each_header_once() {
        let receiver = Receiver::start(|_| (200, None)).await;
        let mut target =
            HttpTarget { follow_redirects: false, method: "PUT".into(), ..target(&receiver.url("/hook?a=b")) };
        // Bytes past ASCII are a valid field value (obs-text), as validation agrees.
        target.headers.insert("X-Label".into(), "café".into());
        let message = message(&target);
        assert_success(&loopback_allowed().deliver(&target, &message, 7).await);
        let seen = &receiver.seen()[0];
        assert_eq!((seen.method.as_str(), seen.path.as_str(), seen.body.as_str()), ("PUT", "/hook?a=b", "{\"a\":1}"));
        let scheduled_at = format_instant(message.scheduled_at);
        for (name, value) in [
            ("x-api-key", "k-123"),
            ("content-type", "application/json"),
            ("authorization", "Bearer s3cret"),
            ("x-cronshard-execution-id", message.execution_id.as_str()),
            ("x-cronshard-scheduled-at", scheduled_at.as_str()),
            ("x-cronshard-attempt", "7"),
            ("x-label", "café"),
        ] {
            assert_eq!(seen.header(name), [value], "{name}: {seen:?}");
        }
    }

    /// Validation refuses such headers; a definition stored before it did
    /// may hold one. Every attempt would fail alike, so none is retried, and
    /// the error names the header without quoting its value.
    #[tokio::test]
    async fn a_header_the_http_crate_refuses_fails_for_good_naming_it_but_not_its_value() {
        let receiver = Receiver::start(|_| (200, None)).await;
        let mut bad_value = target(&receiver.url("/hook"));
        bad_value.secret_headers.insert("X-Token".into(), "t0ps3cret\r\nX-Injected: 1".into());
        let mut bad_name = target(&receiver.url("/hook"));
        bad_name.headers.insert("Bad Name".into(), "v".into());
        for (stored, expected) in [
            (bad_value, "the header \"X-Token\" has an invalid value"),
            (bad_name, "the header \"Bad Name\" has an invalid name"),
        ] {
            let Outcome::Failure { error, .. } = deliver(&loopback_allowed(), &stored).await else {
                panic!("{expected}")
            };
            assert!(matches!(error, DeliveryError::InvalidTarget(_)) && !error.retryable(), "{error:?}");
            let text = error.to_string();
            assert_eq!(text, expected);
            assert!(!text.contains("t0ps3cret"));
        }
        assert!(receiver.seen().is_empty(), "a request went out: {:?}", receiver.seen());
    }

    #[tokio::test]
    async fn ip_literals_are_refused_by_rule_before_connecting() {
        let delivery = HttpDelivery::new(SsrfGuard::default(), 4).unwrap();
        for (url, rule) in [
            ("http://127.0.0.1:9/hook", "a loopback address"),
            ("http://[::127.0.0.1]:9/hook", "a loopback address"),
            ("http://[64:ff9b::a9fe:a9fe]/", "a cloud metadata address"),
            ("http://[2002:a9fe:a9fe::]/", "a cloud metadata address"),
            ("http://[fec0::1]/", "a site-local address"),
        ] {
            let Outcome::Failure { error, .. } = deliver(&delivery, &target(url)).await else { panic!("{url}") };
            let text = error.to_string();
            assert!(matches!(error, DeliveryError::CallbackRefused(_)), "{url}: {error:?}");
            assert!(text.contains(rule) && text.contains("CALLBACK_ALLOW_CIDRS"), "{url}: {text}");
        }
    }
}
