//! The one encoder and decoder of a fire message's AMQP form: its body (one
//! message, or a bundle's array), content type, message id, and the headers
//! cronshard reads back (the attempt, a wait for the destination, why a
//! message was parked). Every publisher builds its messages here and the
//! worker reads them here, so the two cannot disagree on a header.

use std::time::Duration;

use chrono::{DateTime, Utc};
use domain::message::FireMessage;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};

/// The attempt number of the message's slot. The worker owns it; `x-death`
/// is only a cross-check because RabbitMQ 3.13+ ignores a republished one.
pub const ATTEMPT_HEADER: &str = "x-cronshard-attempt";
/// Marks a message handed back to wait for its destination: it went
/// through a delay queue without an attempt, so its broker death count
/// says nothing about its attempt.
pub const WAIT_HEADER: &str = "x-cronshard-wait";
/// Marks the message that times out an attempt awaiting its receiver's
/// report (async completion): the same attempt, back at its deadline.
pub const COMPLETION_CHECK_HEADER: &str = "x-cronshard-completion-check";
/// When a parked message was parked, and why (for an operator reading the
/// failed queue).
pub const FAILED_AT_HEADER: &str = "x-cronshard-failed-at";
pub const FAILURE_REASON_HEADER: &str = "x-cronshard-failure-reason";
/// Content type of a bundle: several fire messages as one JSON array
/// (`domain::message::bundle`).
pub const BUNDLE_CONTENT_TYPE: &str = "application/vnd.cronshard.bundle+json";
const ONE_MESSAGE_CONTENT_TYPE: &str = "application/json";

/// What a message's headers say besides its body.
#[derive(Debug, Clone, Default)]
pub struct Headers {
    pub attempt: u32,
    /// Handed back to wait for its destination, the attempt not made.
    pub wait: bool,
    /// Back at the deadline of an attempt awaiting its report.
    pub completion_check: bool,
    /// Parked: when, and why.
    pub failed: Option<(DateTime<Utc>, String)>,
    /// Dropped by the broker after this long in a queue.
    pub expiration: Option<Duration>,
}

impl Headers {
    pub fn attempt(attempt: u32) -> Self {
        Self { attempt, ..Self::default() }
    }
}

/// The body and properties of one AMQP message carrying `group` (one fire
/// message, or a bundle of several of the same attempt), persistent, its
/// message id the first slot's execution id.
pub fn encode(group: &[&FireMessage], headers: &Headers) -> serde_json::Result<(Vec<u8>, BasicProperties)> {
    let (payload, content_type) = match group {
        [one] => (serde_json::to_vec(one)?, ONE_MESSAGE_CONTENT_TYPE),
        many => (serde_json::to_vec(many)?, BUNDLE_CONTENT_TYPE),
    };
    let mut table = FieldTable::default();
    table.insert(ATTEMPT_HEADER.into(), AMQPValue::LongInt(headers.attempt as i32));
    if headers.wait {
        table.insert(WAIT_HEADER.into(), AMQPValue::Boolean(true));
    }
    if headers.completion_check {
        table.insert(COMPLETION_CHECK_HEADER.into(), AMQPValue::Boolean(true));
    }
    if let Some((at, reason)) = &headers.failed {
        table.insert(FAILED_AT_HEADER.into(), AMQPValue::LongString(domain::execution::format_instant(*at).into()));
        table.insert(FAILURE_REASON_HEADER.into(), AMQPValue::LongString(reason.as_str().into()));
    }
    let mut properties = BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type(content_type.into())
        .with_message_id(group.first().map_or("", |m| m.execution_id.as_str()).into())
        .with_headers(table);
    if let Some(ttl) = headers.expiration {
        properties = properties.with_expiration(ttl.as_millis().to_string().into());
    }
    Ok((payload, properties))
}

/// The attempt a received message carries (1 when the header is missing or
/// not a positive integer).
pub fn attempt_of(properties: &BasicProperties) -> u32 {
    properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(ATTEMPT_HEADER))
        .and_then(|v| match v {
            AMQPValue::LongInt(n) => Some(*n as i64),
            AMQPValue::LongLongInt(n) => Some(*n),
            AMQPValue::ShortInt(n) => Some(*n as i64),
            AMQPValue::LongUInt(n) => Some(*n as i64),
            _ => None,
        })
        .filter(|n| *n >= 1)
        .map(|n| n as u32)
        .unwrap_or(1)
}

/// Whether the message was handed back to wait for its destination.
pub fn is_wait(properties: &BasicProperties) -> bool {
    flag(properties, WAIT_HEADER)
}

/// Whether the message times out an attempt awaiting its report.
pub fn is_completion_check(properties: &BasicProperties) -> bool {
    flag(properties, COMPLETION_CHECK_HEADER)
}

fn flag(properties: &BasicProperties, name: &str) -> bool {
    properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(name))
        .is_some_and(|v| matches!(v, AMQPValue::Boolean(true)))
}

/// Times the message went through retry queues, by RabbitMQ's own `x-death`
/// count. Only a cross-check: RabbitMQ 3.13+ no longer trusts an `x-death`
/// a client republished, so the attempt header is what the worker goes by.
pub fn retries_by_x_death(properties: &BasicProperties) -> Option<u32> {
    let headers = properties.headers().as_ref()?;
    let AMQPValue::FieldArray(deaths) = headers.inner().get("x-death")? else { return None };
    let mut total = 0;
    for death in deaths.as_slice() {
        let AMQPValue::FieldTable(t) = death else { continue };
        let expired_in_retry_queue =
            matches!(t.inner().get("reason"), Some(AMQPValue::LongString(r)) if r.to_string() == "expired");
        if let (true, Some(AMQPValue::LongLongInt(n))) = (expired_in_retry_queue, t.inner().get("count")) {
            total += *n as u32;
        }
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_encoded_is_decoded() {
        let m = testing_message();
        for attempt in [1, 2, 7] {
            let (_, properties) = encode(&[&m], &Headers::attempt(attempt)).unwrap();
            assert_eq!(attempt_of(&properties), attempt);
            assert!(!is_wait(&properties));
        }
        let (body, properties) = encode(&[&m, &m], &Headers { wait: true, ..Headers::attempt(3) }).unwrap();
        assert_eq!(properties.content_type().as_ref().map(|c| c.as_str()), Some(BUNDLE_CONTENT_TYPE));
        assert!(is_wait(&properties));
        assert!(!is_completion_check(&properties));
        assert_eq!(domain::message::parse_body(&body).unwrap().len(), 2);
        let (_, properties) = encode(&[&m], &Headers { completion_check: true, ..Headers::attempt(2) }).unwrap();
        assert!(is_completion_check(&properties) && !is_wait(&properties));
        assert_eq!(attempt_of(&properties), 2);
        assert_eq!(attempt_of(&BasicProperties::default()), 1, "no header: a first attempt");
    }

    fn testing_message() -> FireMessage {
        serde_json::from_value(serde_json::json!({
            "v": 1, "fire_id": "00000000-0000-0000-0000-000000000001", "job_id": "00000000-0000-0000-0000-000000000002",
            "scheduled_at": "2026-12-15T15:00:00.000Z", "due_at": "2026-12-15T15:00:00.000Z",
            "execution_id": "x", "trigger": "schedule",
            "target": {"kind": "http", "url": "http://127.0.0.1:9/", "method": "POST", "timeout_ms": 1000, "headers": {}},
            "retry": null
        }))
        .unwrap()
    }
}
