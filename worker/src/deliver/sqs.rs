//! SQS delivery with aws-sdk-sqs: one SendMessage per attempt, carrying the
//! same three `X-Cronshard-*` values as an HTTP callback, as message
//! attributes. A returned MessageId is success.
//!
//! The client comes from the operator's AWS configuration (region,
//! credentials, and `AWS_ENDPOINT_URL_SQS` / `AWS_ENDPOINT_URL` for a custom
//! endpoint such as moto), loaded on the first SQS delivery, so a worker
//! without any AWS configuration starts and delivers HTTP jobs as usual; its
//! SQS deliveries fail with the reason in the ledger.
//!
//! No SSRF guard here: the SDK sends every request to the endpoint of the
//! operator's configuration and passes the job's `queue_url` only as the
//! `QueueUrl` parameter (JSON protocol), so a job cannot make the worker
//! connect to a host of its choosing. A `queue_url` on another host or region
//! than the configured endpoint is not followed; SQS answers it with
//! `QueueDoesNotExist` (or an invalid-address error).
//!
//! Decisions:
//! - Body: the target's `body`; when it is absent or empty (SQS refuses an
//!   empty body) a small JSON document
//!   `{"job_id":…,"execution_id":…,"scheduled_at":…}`.
//! - Attributes: the target's `message_attributes` as `String` attributes,
//!   then `X-Cronshard-Execution-Id` and `X-Cronshard-Scheduled-At`
//!   (`String`) and `X-Cronshard-Attempt` (`Number`, e.g. `1`). The three
//!   `X-Cronshard-*` names are reserved: the API refuses a target attribute
//!   of such a name (in any case), and one stored before it did is replaced.
//!   Then the Standard Webhooks `webhook-id`, `webhook-timestamp` and (when
//!   the namespace has signing keys) `webhook-signature` (`String`), signed
//!   over the message body as an HTTP delivery's body is (`signing`).
//!   SQS allows 10 attributes per message, so a target may name at most 4;
//!   a definition stored with 5 to 7 before signing gets the `webhook-*`
//!   attributes only when all of them fit (none when they do not);
//!   names must be SQS names (letters, digits, `-`, `_`, `.`). The API checks
//!   all of this when a job is created (`domain::job`); the checks here are
//!   for definitions stored before it did.
//! - FIFO queues (URL ends in `.fifo`): `MessageGroupId` from the target
//!   (required), `MessageDeduplicationId` from the target or else the
//!   execution id (≤ 128 characters of letters, digits and punctuation — a
//!   scheduled `uuid@2026-12-15T15:00:00.000Z` is 61, a manual `…#manual` 68),
//!   so a retry or replay of one slot within SQS's 5-minute window is
//!   delivered once. Standard queues get the group id when one is set (fair
//!   queues) and never a deduplication id.
//! - Failures are retried (per the job's retry policy) except those the job
//!   itself causes and that no retry can fix: the queue does not exist,
//!   invalid parameters, message contents or attribute names, an unsupported
//!   operation, a request that cannot be built. Throttling, network, timeout,
//!   credential, permission, KMS and missing-region errors are retried: they
//!   are the operator's to fix, and another worker may be configured.

use std::time::Duration;

use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::types::MessageAttributeValue;
use tokio::sync::OnceCell;

use domain::execution::format_instant;
use domain::job::{SqsTarget, check_sqs_attribute_name, folded_header, is_sqs_char as sqs_char};
use domain::message::FireMessage;

use super::signing::{Signing, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use super::{ATTEMPT_NAME, DeliveryError, EXECUTION_ID_NAME, Outcome, SCHEDULED_AT_NAME, SqsFault};

const RESERVED: [&str; 3] = [EXECUTION_ID_NAME, SCHEDULED_AT_NAME, ATTEMPT_NAME];
/// SQS's limit of message attributes per message.
const MAX_ATTRIBUTES: usize = 10;

/// Error codes caused by the job's target that a retry cannot fix. Both the
/// JSON-protocol names and the query-compatible ones SQS also sends.
const PERMANENT_CODES: &[&str] = &[
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
    "InvalidAddress",
    "InvalidMessageContents",
    "UnsupportedOperation",
    "AWS.SimpleQueueService.UnsupportedOperation",
    "InvalidParameterValue",
    "InvalidParameterCombination",
    "MissingParameter",
    "InvalidAttributeName",
    "InvalidAttributeValue",
    "ValidationException",
    "ValidationError",
];

pub struct SqsDelivery {
    /// `Some`: configuration given by the caller (tests); `None`: the usual
    /// AWS environment, loaded on first use.
    given: Option<SdkConfig>,
    client: OnceCell<Client>,
}

impl SqsDelivery {
    /// `config`: an explicit AWS configuration, or `None` for the usual AWS
    /// environment (`aws_config::defaults`), loaded on the first delivery.
    pub fn new(config: Option<SdkConfig>) -> Self {
        Self { given: config, client: OnceCell::new() }
    }

    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async {
                let sdk = match &self.given {
                    Some(c) => c.clone(),
                    None => aws_config::defaults(BehaviorVersion::latest()).load().await,
                };
                // Bound every send so a hung endpoint cannot hold a delivery
                // slot forever; timeouts set by the operator take precedence.
                let ours = TimeoutConfig::builder()
                    .operation_attempt_timeout(Duration::from_secs(10))
                    .operation_timeout(Duration::from_secs(30))
                    .build();
                let timeouts = match sdk.timeout_config() {
                    Some(theirs) => {
                        let mut merged = theirs.clone();
                        merged.take_defaults_from(&ours);
                        merged
                    }
                    None => ours,
                };
                let conf = aws_sdk_sqs::config::Builder::from(&sdk).timeout_config(timeouts).build();
                tracing::info!(region = conf.region().map(|r| r.as_ref()).unwrap_or("(none)"), "SQS client configured");
                Client::from_conf(conf)
            })
            .await
    }

    /// Sends one message. On success the outcome comes with the SQS MessageId.
    pub async fn deliver(
        &self,
        target: &SqsTarget,
        message: &FireMessage,
        attempt: u32,
        signing: &Signing,
    ) -> (Outcome, Option<String>) {
        let client = self.client().await;
        if client.config().region().is_none() {
            return (Outcome::failure(DeliveryError::NoAwsRegion), None);
        }
        let fifo = target.queue_url.ends_with(".fifo");
        let body = match target.body.as_deref() {
            Some(b) if !b.is_empty() => b.to_owned(),
            _ => default_body(message),
        };
        let attributes = match attributes(target, message, attempt, signing, &body) {
            Ok(a) => a,
            Err(e) => return (Outcome::failure(DeliveryError::InvalidTarget(e)), None),
        };
        if let Some(c) = body.chars().find(|c| !sqs_char(*c)) {
            let error = DeliveryError::InvalidTarget(format!("the body contains {c:?}, which SQS does not allow"));
            return (Outcome::failure(error), None);
        }
        if fifo && target.message_group_id.is_none() {
            let error = DeliveryError::InvalidTarget("a FIFO queue (.fifo) needs a message_group_id".into());
            return (Outcome::failure(error), None);
        }
        let mut request = client
            .send_message()
            .queue_url(&target.queue_url)
            .message_body(body)
            .set_message_attributes(Some(attributes))
            .set_message_group_id(target.message_group_id.clone());
        if fifo {
            let dedup = target.message_deduplication_id.clone().unwrap_or_else(|| message.execution_id.clone());
            request = request.message_deduplication_id(dedup);
        }
        match request.send().await {
            Ok(out) => {
                let Some(id) = out.message_id else {
                    return (Outcome::failure(DeliveryError::SqsNoMessageId), None);
                };
                let excerpt = out.sequence_number.map(|n| format!("SequenceNumber {n}")).unwrap_or_default();
                (
                    Outcome::Success { http_status: None, answer: super::Answer { excerpt, ..Default::default() } },
                    Some(id),
                )
            }
            Err(e) => (Outcome::failure(describe(&e)), None),
        }
    }
}

fn default_body(m: &FireMessage) -> String {
    serde_json::json!({
        "job_id": m.job_id,
        "execution_id": m.execution_id,
        "scheduled_at": format_instant(m.scheduled_at),
    })
    .to_string()
}

fn attributes(
    target: &SqsTarget,
    m: &FireMessage,
    attempt: u32,
    signing: &Signing,
    body: &str,
) -> Result<std::collections::HashMap<String, MessageAttributeValue>, String> {
    let value = |data_type: &str, v: String| {
        MessageAttributeValue::builder().data_type(data_type).string_value(v).build().map_err(|e| e.to_string())
    };
    let mut out = std::collections::HashMap::new();
    for (name, v) in &target.message_attributes {
        // Validation refuses these names (in any case); a definition stored
        // before it did may hold one.
        if RESERVED.iter().any(|r| r.eq_ignore_ascii_case(name)) || folded_header(name).starts_with("webhook-") {
            continue;
        }
        if let Err(why) = check_sqs_attribute_name(name) {
            return Err(format!("message attribute {name:?} is not a valid SQS attribute name: {why}"));
        }
        if v.is_empty() {
            return Err(format!("message attribute {name:?} is empty; SQS needs a value"));
        }
        if let Some(c) = v.chars().find(|c| !sqs_char(*c)) {
            return Err(format!("message attribute {name:?} contains {c:?}, which SQS does not allow"));
        }
        out.insert(name.clone(), value("String", v.clone())?);
    }
    if out.len() + RESERVED.len() > MAX_ATTRIBUTES {
        return Err(format!(
            "{} message attributes plus the 3 X-Cronshard-* ones exceed SQS's limit of {MAX_ATTRIBUTES}",
            out.len()
        ));
    }
    out.insert(EXECUTION_ID_NAME.into(), value("String", m.execution_id.clone())?);
    out.insert(SCHEDULED_AT_NAME.into(), value("String", format_instant(m.scheduled_at))?);
    out.insert(ATTEMPT_NAME.into(), value("Number", attempt.to_string())?);
    let signature = signing.signature(&m.execution_id, body.as_bytes());
    let webhook = 2 + usize::from(signature.is_some());
    if out.len() + webhook <= MAX_ATTRIBUTES {
        out.insert(WEBHOOK_ID.into(), value("String", m.execution_id.clone())?);
        out.insert(WEBHOOK_TIMESTAMP.into(), value("String", signing.timestamp.to_string())?);
        if let Some(signature) = signature {
            out.insert(WEBHOOK_SIGNATURE.into(), value("String", signature)?);
        }
    }
    Ok(out)
}

/// The SDK's error as a `DeliveryError`: whether a retry may help is
/// decided here, by the kind of error and SQS's error code.
fn describe(e: &SdkError<SendMessageError>) -> DeliveryError {
    match e {
        SdkError::ServiceError(service) => {
            let err = service.err();
            let code = err.code().unwrap_or("unknown");
            let permanent = err.is_queue_does_not_exist()
                || err.is_invalid_address()
                || err.is_invalid_message_contents()
                || err.is_unsupported_operation()
                || PERMANENT_CODES.contains(&code);
            let fault = SqsFault {
                status: service.raw().status().as_u16(),
                code: code.to_owned(),
                message: err.message().unwrap_or("").to_owned(),
                queue_missing: err.is_queue_does_not_exist(),
            };
            if permanent { DeliveryError::SqsRejected(fault) } else { DeliveryError::SqsService(fault) }
        }
        SdkError::TimeoutError(_) => DeliveryError::SqsTimedOut(DisplayErrorContext(e).to_string()),
        SdkError::ConstructionFailure(_) => DeliveryError::SqsUnbuildable(DisplayErrorContext(e).to_string()),
        _ => DeliveryError::SqsTransport(DisplayErrorContext(e).to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_names_are_valid_sqs_attribute_names() {
        for name in RESERVED {
            assert_eq!(check_sqs_attribute_name(name), Ok(()), "{name}");
        }
    }

    #[test]
    fn attribute_names_follow_sqs_rules() {
        for ok in ["a", "Trace-Id", "x_y.z", &"a".repeat(256)] {
            assert_eq!(check_sqs_attribute_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "has space", "a!b", "a~b", ".a", "a.", "a..b", "AWS.x", "amazon.Thing", &"a".repeat(257)] {
            assert!(check_sqs_attribute_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn execution_ids_are_valid_deduplication_ids() {
        let job = uuid::Uuid::new_v4();
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-15T15:00:00.123Z").unwrap().to_utc();
        for id in [domain::execution::execution_id(job, at), domain::execution::manual_execution_id(job, at)] {
            assert!(id.len() <= 128, "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_alphanumeric() || b.is_ascii_punctuation()), "{id}");
        }
    }

    #[test]
    fn body_characters() {
        assert!("{\"a\": \"é ✓ 😀\"}\n\t".chars().all(sqs_char));
        assert!(!sqs_char('\u{0}') && !sqs_char('\u{1b}') && !sqs_char('\u{FFFE}'));
    }
}
