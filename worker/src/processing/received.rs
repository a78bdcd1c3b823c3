//! What a message's task keeps of its AMQP delivery.

use broker::properties;
use lapin::Acker;
use lapin::message::Delivery;

/// What a message's task keeps of its AMQP delivery: how to settle it and
/// how it arrived. Taken apart in the session, so that the task does not
/// carry the delivery (432 bytes, its headers) until the ack.
pub(crate) struct Received {
    pub(super) acker: Acker,
    pub(super) attempt: u32,
    pub(super) redelivered: bool,
    /// Handed back to wait for its destination (`broker::properties::is_wait`).
    pub(super) waited: bool,
    /// Times out an attempt awaiting its report (`is_completion_check`).
    pub(super) completion_check: bool,
    pub(super) retries_by_x_death: Option<u32>,
}

impl Received {
    pub(crate) fn of(delivery: Delivery) -> Self {
        Received {
            attempt: properties::attempt_of(&delivery.properties),
            redelivered: delivery.redelivered,
            waited: properties::is_wait(&delivery.properties),
            completion_check: properties::is_completion_check(&delivery.properties),
            retries_by_x_death: properties::retries_by_x_death(&delivery.properties),
            acker: delivery.acker,
        }
    }
}
