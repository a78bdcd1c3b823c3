//! What a message's task keeps of its AMQP delivery.

use lapin::Acker;
use lapin::message::Delivery;
use lapin::types::AMQPValue;

use common::message::ATTEMPT_HEADER;

use crate::retry;

fn attempt_of(delivery: &Delivery) -> u32 {
    delivery
        .properties
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

/// Times the message went through retry queues, by RabbitMQ's own `x-death`
/// count. Only a cross-check: RabbitMQ 3.13+ no longer trusts an `x-death`
/// a client republished, so the attempt header is what the worker goes by.
fn retries_by_x_death(delivery: &Delivery) -> Option<u32> {
    let headers = delivery.properties.headers().as_ref()?;
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

/// What a message's task keeps of its AMQP delivery: how to settle it and
/// how it arrived. Taken apart in the session, so that the task does not
/// carry the delivery (432 bytes, its headers) until the ack.
pub(crate) struct Received {
    pub(super) acker: Acker,
    pub(super) attempt: u32,
    pub(super) redelivered: bool,
    /// Handed back to wait for its destination (`retry::is_wait`).
    pub(super) waited: bool,
    pub(super) retries_by_x_death: Option<u32>,
}

impl Received {
    pub(crate) fn of(delivery: Delivery) -> Self {
        Received {
            attempt: attempt_of(&delivery),
            redelivered: delivery.redelivered,
            waited: retry::is_wait(&delivery),
            retries_by_x_death: retries_by_x_death(&delivery),
            acker: delivery.acker,
        }
    }
}
