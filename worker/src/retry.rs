//! After a failed delivery: whether there is a next attempt and after what
//! delay (`next_delay`), and the confirmed publish of the message to the
//! retry queue of that delay or, after the last retry, to the failed queue
//! (`RetryPublisher`). A slot waiting for its destination goes through delay
//! queues of its own, back to the waiting queue, as the same attempt
//! (`publish_wait`).

use std::collections::HashSet;

use lapin::options::BasicPublishOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel};
use tokio::sync::Mutex;

use common::amqp::{Delayed, Topology};
use common::job::RetryPolicy;
use common::message::{ATTEMPT_HEADER, FireMessage};

/// The delay before attempt `attempt + 1`, or None when `attempt` was the
/// last: the failure cannot be helped by a retry, or the policy's retries
/// are used up.
pub(crate) fn next_delay(policy: &RetryPolicy, attempt: u32, retryable: bool) -> Option<u64> {
    let retries_used = attempt - 1;
    (retryable && retries_used < policy.max_retries).then(|| policy.delay_ms(attempt))
}

/// Marks a message handed back to wait for its destination: it went
/// through a delay queue without an attempt, so its broker death count
/// says nothing about its attempt.
const WAIT_HEADER: &str = "x-cronshard-wait";

/// Whether the message was handed back to wait for its destination.
pub(crate) fn is_wait(delivery: &lapin::message::Delivery) -> bool {
    delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(WAIT_HEADER))
        .is_some_and(|v| matches!(v, AMQPValue::Boolean(true)))
}

/// Publishes follow-up messages on a confirm-mode channel of its own: the
/// message that failed is acked only once its follow-up is confirmed.
pub(crate) struct RetryPublisher {
    topology: Topology,
    channel: Channel,
    /// Delay queues declared on this connection.
    declared_delay_queues: Mutex<HashSet<(Delayed, u64)>>,
}

impl RetryPublisher {
    /// `channel` must be in confirm mode.
    pub(crate) fn new(topology: Topology, channel: Channel) -> Self {
        Self { topology, channel, declared_delay_queues: Mutex::new(HashSet::new()) }
    }

    async fn publish_to(&self, queue: &str, m: &FireMessage, headers: FieldTable) -> anyhow::Result<()> {
        let payload = serde_json::to_vec(m)?;
        let props = BasicProperties::default()
            .with_delivery_mode(2)
            .with_content_type("application/json".into())
            .with_message_id(m.execution_id.as_str().into())
            .with_headers(headers);
        let confirm = self
            .channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions { mandatory: true, ..Default::default() },
                &payload,
                props,
            )
            .await?
            .await?;
        // Mandatory: a message returned unroutable was not queued either.
        if !confirm.is_ack() || confirm.take_message().is_some() {
            anyhow::bail!("broker did not accept the message for {queue}");
        }
        Ok(())
    }

    /// To the retry queue of `delay_ms`, which dead-letters it back to the
    /// main queue once the delay has passed.
    pub(crate) async fn publish_retry(&self, m: &FireMessage, next_attempt: u32, delay_ms: u64) -> anyhow::Result<()> {
        // The message is due again only after its delay.
        let mut retry = m.clone();
        retry.due_at = common::clock::now();
        self.publish_delayed(&retry, next_attempt, delay_ms, Delayed::Retry).await
    }

    /// The same attempt again after `delay_ms`, through the waiting queue
    /// (a slot that waits for its destination): its due instant is kept,
    /// which its wait is bounded from.
    pub(crate) async fn publish_wait(&self, m: &FireMessage, attempt: u32, delay_ms: u64) -> anyhow::Result<()> {
        self.publish_delayed(m, attempt, delay_ms, Delayed::Wait).await
    }

    async fn publish_delayed(&self, m: &FireMessage, attempt: u32, delay_ms: u64, kind: Delayed) -> anyhow::Result<()> {
        {
            let mut declared = self.declared_delay_queues.lock().await;
            if !declared.contains(&(kind, delay_ms)) {
                self.topology.declare_delay_queue(&self.channel, kind, delay_ms).await?;
                declared.insert((kind, delay_ms));
            }
        }
        let mut headers = FieldTable::default();
        headers.insert(ATTEMPT_HEADER.into(), AMQPValue::LongInt(attempt as i32));
        if kind == Delayed::Wait {
            headers.insert(WAIT_HEADER.into(), AMQPValue::Boolean(true));
        }
        let result = self.publish_to(&self.topology.delay_queue(kind, delay_ms), m, headers).await;
        if result.is_err() {
            // The queue may have expired since we declared it.
            self.declared_delay_queues.lock().await.remove(&(kind, delay_ms));
        }
        result
    }

    /// To the failed queue, where an operator can see it, with when and why.
    pub(crate) async fn publish_failed(&self, m: &FireMessage, attempts: u32, reason: &str) -> anyhow::Result<()> {
        let mut headers = FieldTable::default();
        headers.insert(ATTEMPT_HEADER.into(), AMQPValue::LongInt(attempts as i32));
        headers.insert(
            "x-cronshard-failed-at".into(),
            AMQPValue::LongString(common::execution::format_instant(common::clock::now()).into()),
        );
        headers.insert("x-cronshard-failure-reason".into(), AMQPValue::LongString(reason.into()));
        self.publish_to(&self.topology.failed_queue, m, headers).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retryable_failure_is_retried_until_the_policy_is_used_up() {
        let policy = RetryPolicy { max_retries: 2, base_delay_ms: 1000, multiplier: 2.0, max_delay_ms: 60_000 };
        assert_eq!(next_delay(&policy, 1, true), Some(1000));
        assert_eq!(next_delay(&policy, 2, true), Some(2000));
        assert_eq!(next_delay(&policy, 3, true), None, "two retries used");
        assert_eq!(next_delay(&policy, 1, false), None, "a retry cannot help");
        let none = RetryPolicy { max_retries: 0, ..policy };
        assert_eq!(next_delay(&none, 1, true), None);
    }
}
