//! Delivery: one attempt at a slot's target, HTTP (`http`, behind the SSRF
//! guard of `ssrf`) or SQS (`sqs`), and what it came to (`Outcome`). Why an
//! attempt failed is a `DeliveryError`, which alone decides whether another
//! attempt may help; the job's retry policy decides whether one is made.

pub mod http;
pub mod signing;
pub mod sqs;
pub mod ssrf;

/// What cronshard adds to every delivery, under the same names: HTTP
/// headers (names are case-insensitive there) and SQS message attributes.
pub const EXECUTION_ID_NAME: &str = "X-Cronshard-Execution-Id";
pub const SCHEDULED_AT_NAME: &str = "X-Cronshard-Scheduled-At";
pub const ATTEMPT_NAME: &str = "X-Cronshard-Attempt";
/// The token a receiver of an async-completion job reports with.
pub const COMPLETION_TOKEN_NAME: &str = "x-cronshard-completion-token";

use domain::job::Target;
use domain::message::FireMessage;

use self::http::HttpDelivery;
use self::sqs::SqsDelivery;
use self::ssrf::SsrfGuard;
use super::WorkerConfig;
use super::destination::Destinations;
use super::destination::breaker::Call;

/// What one delivery attempt came to.
#[derive(Debug)]
pub enum Outcome {
    Success {
        http_status: Option<u16>,
        answer: Answer,
    },
    Failure {
        error: DeliveryError,
        answer: Answer,
    },
    /// A 202 to a job whose completion is `async`: the receiver reports
    /// the outcome later.
    Accepted {
        http_status: u16,
        answer: Answer,
    },
}

impl Outcome {
    /// A failure without an answer to keep.
    pub fn failure(error: DeliveryError) -> Self {
        Outcome::Failure { error, answer: Answer::default() }
    }

    pub fn answer(&self) -> &Answer {
        match self {
            Outcome::Success { answer, .. } | Outcome::Failure { answer, .. } | Outcome::Accepted { answer, .. } => {
                answer
            }
        }
    }
}

/// What the receiver said, as much as is kept: the first bytes of the body
/// (secrets masked), the chosen headers (`domain::contract::KEPT_RESPONSE_HEADERS`),
/// the wait a `Retry-After` asked for, and the contract's rule that decided
/// the outcome, in words.
#[derive(Debug, Default)]
pub struct Answer {
    pub excerpt: String,
    pub headers: Vec<(String, String)>,
    pub retry_after: Option<std::time::Duration>,
    pub rule: Option<String>,
}

impl Answer {
    /// The kept headers as a JSON object, or `None` when there are none.
    pub fn headers_json(&self) -> Option<serde_json::Value> {
        (!self.headers.is_empty()).then(|| {
            serde_json::Value::Object(
                self.headers.iter().map(|(n, v)| (n.clone(), serde_json::Value::String(v.clone()))).collect(),
            )
        })
    }
}

/// Why a delivery attempt failed. The text (`Display`) is what the ledger
/// records and the failed queue's `x-cronshard-failure-reason` carries.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The SSRF guard refused the callback's address: an IP literal in the
    /// URL, or every address its host resolves to. The text names the
    /// address and how to allow it.
    #[error("{0}")]
    CallbackRefused(String),
    /// The target cannot be delivered as it stands: an invalid URL, a body
    /// or message attribute SQS does not allow, a FIFO queue without a group
    /// id. The text says what is wrong.
    #[error("{0}")]
    InvalidTarget(String),
    /// No response within the target's `timeout_ms`.
    #[error("timed out after {timeout_ms} ms")]
    TimedOut { timeout_ms: u64 },
    /// The HTTP request failed without a response (connecting, TLS, a
    /// redirect that could not be followed); the text is the error with its
    /// causes.
    #[error("{0}")]
    Connection(String),
    /// The receiver answered with a status that is not a success by the
    /// target's contract; `retryable` says whether the contract retries it.
    #[error("HTTP {status}")]
    HttpStatus { status: reqwest::StatusCode, retryable: bool },
    /// The status was a success, but the body does not meet the target's
    /// success condition (`success.body_contains` or `body_matches`).
    #[error("HTTP {status} with a body that does not meet the success condition")]
    UnexpectedBody { status: reqwest::StatusCode, retryable: bool },
    /// This worker has no AWS region, so it cannot reach SQS at all.
    #[error("no AWS region is configured for SQS delivery on this worker (set AWS_REGION)")]
    NoAwsRegion,
    /// SQS refused the message for a reason in the job's target: the queue
    /// does not exist, invalid parameters, contents or attribute names, an
    /// unsupported operation.
    #[error("{0}")]
    SqsRejected(SqsFault),
    /// Any other SQS error answer: throttling, credentials, permissions, KMS.
    #[error("{0}")]
    SqsService(SqsFault),
    /// SQS did not answer within the SDK's timeouts.
    #[error("SQS SendMessage timed out: {0}")]
    SqsTimedOut(String),
    /// The SDK could not build the request from the target.
    #[error("SQS SendMessage could not be built: {0}")]
    SqsUnbuildable(String),
    /// The request got no usable answer from SQS (not sent, or the response
    /// could not be read).
    #[error("SQS SendMessage failed: {0}")]
    SqsTransport(String),
    /// SQS answered success without the MessageId the ledger records.
    #[error("SQS accepted the message but returned no MessageId")]
    SqsNoMessageId,
    /// A secret header value sealed at rest could not be opened on this
    /// worker (no or another key-encryption key, the data key unreadable);
    /// the text names the keys by id.
    #[error("secret headers could not be opened: {0}")]
    SecretUnavailable(store::secrets::SecretError),
    /// The namespace's signing keys could not be read or opened, and this
    /// worker has read none before: the delivery does not go out unsigned.
    #[error("the namespace's signing keys could not be read: {0}")]
    SigningKeysUnavailable(store::secrets::SecretError),
    /// The attempt's completion token (async completion) could not be made:
    /// no key-encryption key on this worker.
    #[error("the completion token could not be made: {0}")]
    CompletionTokenUnavailable(store::secrets::SecretError),
    /// Answered 202, and no report came within the job's completion timeout.
    #[error("no completion was reported within {timeout_ms} ms of the 202")]
    CompletionTimedOut { timeout_ms: u64 },
}

impl DeliveryError {
    /// Whether another attempt may succeed. No wildcard arm, so that a new
    /// variant has to be decided here.
    pub fn retryable(&self) -> bool {
        match self {
            // The job itself is at fault: every attempt would fail the same way.
            DeliveryError::CallbackRefused(_)
            | DeliveryError::InvalidTarget(_)
            | DeliveryError::SqsRejected(_)
            | DeliveryError::SqsUnbuildable(_) => false,
            // As the target's contract decided (`domain::contract::judge`).
            DeliveryError::HttpStatus { retryable, .. } | DeliveryError::UnexpectedBody { retryable, .. } => *retryable,
            DeliveryError::TimedOut { .. }
            | DeliveryError::Connection(_)
            | DeliveryError::SqsTimedOut(_)
            | DeliveryError::SqsTransport(_)
            | DeliveryError::SqsNoMessageId => true,
            // The operator's to fix, and another worker may be configured.
            DeliveryError::NoAwsRegion
            | DeliveryError::SqsService(_)
            | DeliveryError::SecretUnavailable(_)
            | DeliveryError::SigningKeysUnavailable(_)
            | DeliveryError::CompletionTokenUnavailable(_) => true,
            // The work the receiver took on may still be done by another attempt.
            DeliveryError::CompletionTimedOut { .. } => true,
        }
    }

    /// What the failure says about the destination host, for its circuit
    /// breaker: only what says the host is down or overloaded counts
    /// against it (no connection, no answer in time, 5xx, 429). An answer
    /// that blames the job (another 4xx, SQS refusing the message) shows the
    /// host is up; a failure before any request (refused by the SSRF guard,
    /// a target that cannot be sent, this worker's configuration) says
    /// nothing. No wildcard arm, so that a new variant has to be decided here.
    pub fn destination_health(&self) -> Call {
        match self {
            DeliveryError::CallbackRefused(_)
            | DeliveryError::InvalidTarget(_)
            | DeliveryError::NoAwsRegion
            | DeliveryError::SecretUnavailable(_)
            | DeliveryError::SigningKeysUnavailable(_)
            | DeliveryError::CompletionTokenUnavailable(_)
            | DeliveryError::SqsUnbuildable(_) => Call::NotCounted,
            // The host answered (202) long ago; the report is its work's.
            DeliveryError::CompletionTimedOut { .. } => Call::NotCounted,
            DeliveryError::TimedOut { .. }
            | DeliveryError::Connection(_)
            | DeliveryError::SqsTimedOut(_)
            | DeliveryError::SqsTransport(_) => Call::Unhealthy,
            DeliveryError::HttpStatus { status, .. } => status_health(status.as_u16()),
            // It answered as asked, just not with what the job expects.
            DeliveryError::UnexpectedBody { .. } => Call::Healthy,
            // SQS's own answers: throttling or a fault on its side.
            DeliveryError::SqsService(fault) => {
                if fault.code.contains("Throttl") {
                    Call::Unhealthy
                } else {
                    status_health(fault.status)
                }
            }
            // It answered: the fault is in the job (or SQS's odd answer).
            DeliveryError::SqsRejected(_) | DeliveryError::SqsNoMessageId => Call::Healthy,
        }
    }

    /// The receiver's status, for the ledger's `http_status`; only an HTTP
    /// answer has one (an SQS error's status is in the text).
    pub fn http_status(&self) -> Option<u16> {
        match self {
            DeliveryError::HttpStatus { status, .. } | DeliveryError::UnexpectedBody { status, .. } => {
                Some(status.as_u16())
            }
            _ => None,
        }
    }
}

/// 5xx and 429 say the host is broken or overloaded; any other answer
/// shows it is up.
fn status_health(status: u16) -> Call {
    if status >= 500 || status == 429 { Call::Unhealthy } else { Call::Healthy }
}

/// What one attempt said about its destination (a success: that it is up).
pub(crate) fn destination_health(outcome: &Outcome) -> Call {
    match outcome {
        Outcome::Success { .. } | Outcome::Accepted { .. } => Call::Healthy,
        Outcome::Failure { error, .. } => error.destination_health(),
    }
}

/// An error answer from SQS to SendMessage.
#[derive(Debug, Clone)]
pub struct SqsFault {
    /// The HTTP status of SQS's answer.
    pub status: u16,
    pub code: String,
    pub message: String,
    /// Said in words in the text: the codes for it are cryptic.
    pub queue_missing: bool,
}

impl std::fmt::Display for SqsFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = if self.queue_missing { "the queue does not exist: " } else { "" };
        write!(f, "SQS SendMessage failed (HTTP {}): {what}{}: {}", self.status, self.code, self.message)
    }
}

/// The two kinds of delivery a worker makes, built once and kept across
/// broker sessions (the HTTP connection pool and the SQS client with them),
/// with the destinations' concurrency limits and circuit breakers.
pub(crate) struct Deliverers {
    http: HttpDelivery,
    sqs: SqsDelivery,
    pub(crate) destinations: std::sync::Arc<Destinations>,
    /// Opens sealed secret header values right before a request.
    vault: store::secrets::Vault,
    /// The namespaces' signing keys.
    signer: signing::Signer,
    pg: deadpool_postgres::Pool,
}

impl Deliverers {
    pub(crate) fn new(config: &WorkerConfig, pg: deadpool_postgres::Pool) -> anyhow::Result<Self> {
        let mut destinations = config.destinations;
        destinations.per_host = destinations.per_host.capped(config.max_in_flight);
        Ok(Self {
            http: HttpDelivery::new(SsrfGuard::new(config.allow_cidrs.clone()), config.max_in_flight)?,
            sqs: SqsDelivery::new(config.aws.clone()),
            destinations: Destinations::new(destinations),
            vault: store::secrets::Vault::new(config.keyring.clone()),
            signer: signing::Signer::new(
                pg.clone(),
                store::secrets::Vault::new(config.keyring.clone()),
                config.signing_keys_fresh_for,
            ),
            pg,
        })
    }

    /// One attempt at the message's target (for HTTP, its URL as parsed
    /// for the destination's gate, `Address`); a successful SQS delivery
    /// comes with its MessageId.
    pub(crate) async fn deliver(
        &self,
        m: &FireMessage,
        attempt: u32,
        http_url: Option<Result<reqwest::Url, url::ParseError>>,
    ) -> (Outcome, Option<String>) {
        let mut signing = match self.signer.signing(m).await {
            Ok(signing) => signing,
            Err(e) => return (Outcome::failure(DeliveryError::SigningKeysUnavailable(e)), None),
        };
        if domain::job::Completion::is_async(m.completion.as_ref()) {
            match store::completion::token(self.vault.keyring(), &m.execution_id, attempt) {
                Ok(token) => signing.completion_token = Some(token),
                Err(e) => return (Outcome::failure(DeliveryError::CompletionTokenUnavailable(e)), None),
            }
        }
        match &m.target {
            Target::Http(target) => {
                let url = http_url.unwrap_or_else(|| reqwest::Url::parse(&target.url));
                if target.secret_headers.values().any(|v| store::secrets::is_sealed(v)) {
                    // Opened only here, for this request: the message, the
                    // ledger and the logs keep the sealed form.
                    let mut opened = target.clone();
                    if let Err(e) = self.vault.open_headers(&self.pg, m.job_id, &mut opened.secret_headers).await {
                        return (Outcome::failure(DeliveryError::SecretUnavailable(e)), None);
                    }
                    return (self.http.deliver_to(&opened, url, m, attempt, &signing).await, None);
                }
                (self.http.deliver_to(target, url, m, attempt, &signing).await, None)
            }
            // Boxed apart: the SDK's future (with the client's first
            // set-up) is about 11.6 KB, and inline it would size every
            // HTTP delivery's future too, allocated and copied per delivery.
            Target::Sqs(target) => Box::pin(self.sqs.deliver(target, m, attempt, &signing)).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use reqwest::StatusCode;

    use super::*;

    fn fault(queue_missing: bool) -> SqsFault {
        SqsFault {
            status: 400,
            code: "AWS.SimpleQueueService.NonExistentQueue".into(),
            message: "The specified queue does not exist.".into(),
            queue_missing,
        }
    }

    /// One error of each variant, with whether it is retryable.
    fn one_of_each() -> Vec<(DeliveryError, bool)> {
        vec![
            (DeliveryError::CallbackRefused("callback refused: 127.0.0.1 is a loopback address".into()), false),
            (DeliveryError::InvalidTarget("invalid URL: relative URL without a base".into()), false),
            (DeliveryError::TimedOut { timeout_ms: 1500 }, true),
            (DeliveryError::Connection("error sending request: connection refused".into()), true),
            (DeliveryError::HttpStatus { status: StatusCode::INTERNAL_SERVER_ERROR, retryable: true }, true),
            (DeliveryError::UnexpectedBody { status: StatusCode::OK, retryable: true }, true),
            (DeliveryError::NoAwsRegion, true),
            (DeliveryError::SqsRejected(fault(true)), false),
            (DeliveryError::SqsService(SqsFault { code: "ThrottlingException".into(), ..fault(false) }), true),
            (DeliveryError::SqsTimedOut("operation timeout".into()), true),
            (DeliveryError::SqsUnbuildable("missing queue url".into()), false),
            (DeliveryError::SqsTransport("dispatch failure".into()), true),
            (DeliveryError::SqsNoMessageId, true),
            (DeliveryError::SecretUnavailable(store::secrets::SecretError::NoKek), true),
            (DeliveryError::SigningKeysUnavailable(store::secrets::SecretError::NoKek), true),
            (DeliveryError::CompletionTokenUnavailable(store::secrets::SecretError::NoKek), true),
            (DeliveryError::CompletionTimedOut { timeout_ms: 1000 }, true),
        ]
    }

    /// Exhaustive, so a new variant fails to compile here until it is given
    /// a case in `one_of_each`.
    fn variant(e: &DeliveryError) -> &'static str {
        match e {
            DeliveryError::CallbackRefused(_) => "CallbackRefused",
            DeliveryError::InvalidTarget(_) => "InvalidTarget",
            DeliveryError::TimedOut { .. } => "TimedOut",
            DeliveryError::Connection(_) => "Connection",
            DeliveryError::HttpStatus { .. } => "HttpStatus",
            DeliveryError::UnexpectedBody { .. } => "UnexpectedBody",
            DeliveryError::NoAwsRegion => "NoAwsRegion",
            DeliveryError::SqsRejected(_) => "SqsRejected",
            DeliveryError::SqsService(_) => "SqsService",
            DeliveryError::SqsTimedOut(_) => "SqsTimedOut",
            DeliveryError::SqsUnbuildable(_) => "SqsUnbuildable",
            DeliveryError::SqsTransport(_) => "SqsTransport",
            DeliveryError::SqsNoMessageId => "SqsNoMessageId",
            DeliveryError::SecretUnavailable(_) => "SecretUnavailable",
            DeliveryError::SigningKeysUnavailable(_) => "SigningKeysUnavailable",
            DeliveryError::CompletionTokenUnavailable(_) => "CompletionTokenUnavailable",
            DeliveryError::CompletionTimedOut { .. } => "CompletionTimedOut",
        }
    }

    #[test]
    fn retryable_decides_every_variant() {
        let cases = one_of_each();
        let covered: std::collections::HashSet<_> = cases.iter().map(|(e, _)| variant(e)).collect();
        assert_eq!(covered.len(), 17, "one case per variant: {covered:?}");
        for (error, retryable) in cases {
            assert_eq!(error.retryable(), retryable, "{}: {error}", variant(&error));
        }
    }

    #[test]
    fn destination_health_decides_every_variant() {
        let expected = |e: &DeliveryError| match variant(e) {
            "CallbackRefused"
            | "InvalidTarget"
            | "NoAwsRegion"
            | "SqsUnbuildable"
            | "SecretUnavailable"
            | "SigningKeysUnavailable"
            | "CompletionTokenUnavailable"
            | "CompletionTimedOut" => Call::NotCounted,
            "TimedOut" | "Connection" | "SqsTimedOut" | "SqsTransport" => Call::Unhealthy,
            // 500 in `one_of_each`.
            "HttpStatus" => Call::Unhealthy,
            // ThrottlingException in `one_of_each`.
            "SqsService" => Call::Unhealthy,
            "SqsRejected" | "SqsNoMessageId" | "UnexpectedBody" => Call::Healthy,
            other => panic!("no expectation for {other}"),
        };
        for (error, _) in one_of_each() {
            assert_eq!(error.destination_health(), expected(&error), "{}: {error}", variant(&error));
        }
    }

    #[test]
    fn only_5xx_and_429_count_against_a_host() {
        for code in [500, 502, 503, 504, 599, 429] {
            let error = DeliveryError::HttpStatus { status: StatusCode::from_u16(code).unwrap(), retryable: true };
            assert_eq!(error.destination_health(), Call::Unhealthy, "{code}");
        }
        for code in [300, 400, 401, 403, 404, 409, 410, 422] {
            let error = DeliveryError::HttpStatus { status: StatusCode::from_u16(code).unwrap(), retryable: false };
            assert_eq!(error.destination_health(), Call::Healthy, "{code}");
        }
        let sqs = |status: u16, code: &str| {
            DeliveryError::SqsService(SqsFault { status, code: code.into(), ..fault(false) }).destination_health()
        };
        assert_eq!(sqs(400, "ThrottlingException"), Call::Unhealthy);
        assert_eq!(sqs(400, "RequestThrottled"), Call::Unhealthy);
        assert_eq!(sqs(500, "InternalError"), Call::Unhealthy);
        assert_eq!(sqs(503, "ServiceUnavailable"), Call::Unhealthy);
        assert_eq!(sqs(403, "AccessDenied"), Call::Healthy, "credentials: the operator's to fix, SQS is up");
        assert_eq!(
            destination_health(&Outcome::Success { http_status: Some(200), answer: Answer::default() }),
            Call::Healthy
        );
        assert_eq!(destination_health(&Outcome::failure(DeliveryError::TimedOut { timeout_ms: 1 })), Call::Unhealthy);
    }

    #[test]
    fn an_http_answer_is_retried_as_the_contract_decided() {
        for code in [400, 404, 429, 503] {
            for retryable in [true, false] {
                let error = DeliveryError::HttpStatus { status: StatusCode::from_u16(code).unwrap(), retryable };
                assert_eq!(error.retryable(), retryable, "{code}");
                assert_eq!(error.http_status(), Some(code));
            }
        }
    }

    #[test]
    fn only_an_http_answer_has_a_status() {
        for (error, _) in one_of_each() {
            let expected = match error {
                DeliveryError::HttpStatus { .. } => Some(500),
                DeliveryError::UnexpectedBody { .. } => Some(200),
                _ => None,
            };
            assert_eq!(error.http_status(), expected, "{error}");
        }
    }

    #[test]
    fn the_texts_are_those_the_ledger_has_always_recorded() {
        let text = |e: DeliveryError| e.to_string();
        assert_eq!(
            text(DeliveryError::HttpStatus { status: StatusCode::INTERNAL_SERVER_ERROR, retryable: true }),
            "HTTP 500 Internal Server Error"
        );
        assert_eq!(
            text(DeliveryError::HttpStatus { status: StatusCode::from_u16(599).unwrap(), retryable: true }),
            "HTTP 599 <unknown status code>"
        );
        assert_eq!(text(DeliveryError::TimedOut { timeout_ms: 1500 }), "timed out after 1500 ms");
        assert_eq!(text(DeliveryError::InvalidTarget("invalid URL: x".into())), "invalid URL: x");
        assert_eq!(text(DeliveryError::CallbackRefused("callback refused: y".into())), "callback refused: y");
        assert_eq!(text(DeliveryError::Connection("error sending request".into())), "error sending request");
        assert_eq!(
            text(DeliveryError::NoAwsRegion),
            "no AWS region is configured for SQS delivery on this worker (set AWS_REGION)"
        );
        assert_eq!(
            text(DeliveryError::SqsRejected(fault(true))),
            "SQS SendMessage failed (HTTP 400): the queue does not exist: \
             AWS.SimpleQueueService.NonExistentQueue: The specified queue does not exist."
        );
        assert_eq!(
            text(DeliveryError::SqsService(SqsFault { status: 403, code: "AccessDenied".into(), ..fault(false) })),
            "SQS SendMessage failed (HTTP 403): AccessDenied: The specified queue does not exist."
        );
        assert_eq!(text(DeliveryError::SqsTimedOut("t".into())), "SQS SendMessage timed out: t");
        assert_eq!(text(DeliveryError::SqsUnbuildable("b".into())), "SQS SendMessage could not be built: b");
        assert_eq!(text(DeliveryError::SqsTransport("d".into())), "SQS SendMessage failed: d");
        assert_eq!(text(DeliveryError::SqsNoMessageId), "SQS accepted the message but returned no MessageId");
    }
}
