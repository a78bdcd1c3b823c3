//! After a failed delivery: whether there is a next attempt and after what
//! delay (`next_delay`), and the confirmed publish of the message to the
//! retry queue of that delay or, after the last retry, to the failed queue
//! (`RetryPublisher`). A slot waiting for its destination goes through delay
//! queues of its own, back to the waiting queue, as the same attempt
//! (`publish_wait`), in as many hops as its wait needs (`next_hop`).

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};

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

/// When a waiting message's wait ends (epoch milliseconds): its row's
/// `next_attempt_at`, written once when the slot was handed back.
const WAIT_UNTIL_HEADER: &str = "x-cronshard-wait-until";

fn header<'a>(delivery: &'a lapin::message::Delivery, name: &str) -> Option<&'a AMQPValue> {
    delivery.properties.headers().as_ref().and_then(|h| h.inner().get(name))
}

/// Whether the message was handed back to wait for its destination.
pub(crate) fn is_wait(delivery: &lapin::message::Delivery) -> bool {
    header(delivery, WAIT_HEADER).is_some_and(|v| matches!(v, AMQPValue::Boolean(true)))
}

/// When the wait of a message handed back ends, if it says (messages of
/// earlier versions do not: they are processed on arrival, as then).
pub(crate) fn wait_until(delivery: &lapin::message::Delivery) -> Option<DateTime<Utc>> {
    let millis = match header(delivery, WAIT_UNTIL_HEADER)? {
        AMQPValue::LongLongInt(n) => *n,
        AMQPValue::LongInt(n) => i64::from(*n),
        AMQPValue::LongUInt(n) => i64::from(*n),
        _ => return None,
    };
    DateTime::from_timestamp_millis(millis)
}

/// The next delay-queue hop of a waiting message that arrived at `now`,
/// or None when its wait is over (less than the shortest delay queue
/// left: the destination's gate holds it for the rest). A hop only
/// republishes: the row already says when the slot is back, so a long
/// wait costs the ledger one write however many hops it takes.
pub(crate) fn next_hop(wait_until: DateTime<Utc>, now: DateTime<Utc>) -> Option<Duration> {
    let left = (wait_until - now).to_std().ok()?;
    (left >= Duration::from_secs(1)).then(|| crate::destination::release_delay(left))
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
        self.publish_delayed(&retry, next_attempt, delay_ms, Delayed::Retry, None).await
    }

    /// The same attempt again after `delay`, through the waiting queue (a
    /// slot that waits for its destination until `wait_until`): its due
    /// instant is kept, which its wait is bounded from.
    pub(crate) async fn publish_wait(
        &self,
        m: &FireMessage,
        attempt: u32,
        delay: Duration,
        wait_until: DateTime<Utc>,
    ) -> anyhow::Result<()> {
        self.publish_delayed(m, attempt, delay.as_millis() as u64, Delayed::Wait, Some(wait_until)).await
    }

    async fn publish_delayed(
        &self,
        m: &FireMessage,
        attempt: u32,
        delay_ms: u64,
        kind: Delayed,
        wait_until: Option<DateTime<Utc>>,
    ) -> anyhow::Result<()> {
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
        if let Some(until) = wait_until {
            headers.insert(WAIT_UNTIL_HEADER.into(), AMQPValue::LongLongInt(until.timestamp_millis()));
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

    #[test]
    fn a_waiting_message_hops_until_less_than_a_second_of_its_wait_is_left_never_past_its_end() {
        let now = Utc::now();
        let ms = |n: i64| now + chrono::TimeDelta::milliseconds(n);
        let s = Duration::from_secs;
        assert_eq!(next_hop(ms(299_500), now), Some(s(256)));
        assert_eq!(next_hop(ms(43_500), now), Some(s(32)));
        assert_eq!(next_hop(ms(1_000), now), Some(s(1)));
        assert_eq!(next_hop(ms(999), now), None, "the gate holds it for the rest");
        assert_eq!(next_hop(ms(-5_000), now), None, "over");
        // Hop after hop, a wait ends within a second before its end, in
        // few hops, and no hop overshoots it.
        for wait_ms in [1_000, 1_500, 6_000, 12_345, 160_000, 299_999, 600_000] {
            let (end, mut at, mut hops) = (ms(wait_ms), now, 0);
            while let Some(delay) = next_hop(end, at) {
                at += chrono::TimeDelta::from_std(delay).unwrap();
                hops += 1;
                assert!(at <= end, "{wait_ms} ms: a hop past the end");
            }
            assert!(end - at < chrono::TimeDelta::seconds(1), "{wait_ms} ms: back {} early", end - at);
            assert!(hops <= 12, "{wait_ms} ms: {hops} hops");
        }
    }
}
