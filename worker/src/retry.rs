//! After a failed delivery: whether there is a next attempt and after what
//! delay (`next_delay`), and the confirmed publish of the message to the
//! retry queue of that delay or, after the last retry, to the failed queue
//! (`RetryPublisher`). A slot waiting for its destination goes through delay
//! queues of its own, back to the waiting queue, as the same attempt
//! (`publish_wait`).

use std::collections::HashMap;
use std::time::Instant;

use lapin::Channel;
use lapin::options::BasicPublishOptions;
use tokio::sync::Mutex;

use broker::amqp::{Delayed, Topology};
use broker::properties::{self, Headers};
use domain::job::RetryPolicy;
use domain::message::FireMessage;

/// The wait before the next attempt, and how it was chosen in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NextAttempt {
    pub delay_ms: u64,
    pub why: String,
}

/// The wait before attempt `attempt + 1` (`attempt` counted within the
/// retry budget), or None when `attempt` was the last: the failure cannot
/// be helped by a retry, or the policy's retries are used up. The wait is
/// the policy's backoff spread by its jitter (drawn from `execution_id`
/// and the attempt), or as long as the receiver's `Retry-After` asked when
/// that is longer, up to the policy's `max_delay_ms`: a receiver cannot
/// park a retry for longer than the job allows, nor make it come sooner
/// than the backoff.
pub(crate) fn next_delay(
    policy: &RetryPolicy,
    attempt: u32,
    retryable: bool,
    retry_after: Option<std::time::Duration>,
    execution_id: &str,
) -> Option<NextAttempt> {
    let retries_used = attempt - 1;
    if !retryable || retries_used >= policy.max_retries {
        return None;
    }
    let backoff = policy.jittered_delay_ms(attempt, execution_id);
    let asked = retry_after.map(|d| (d.as_millis().min(u128::from(u64::MAX)) as u64).min(policy.max_delay_ms));
    Some(match asked {
        Some(asked) if asked > backoff => {
            let capped = if retry_after.is_some_and(|d| d.as_millis() > u128::from(policy.max_delay_ms)) {
                " (capped at retry.max_delay_ms)"
            } else {
                ""
            };
            NextAttempt { delay_ms: asked, why: format!("next attempt in {asked} ms, as Retry-After asked{capped}") }
        }
        _ => NextAttempt {
            delay_ms: backoff,
            why: format!(
                "next attempt in {backoff} ms (backoff {} ms, {} jitter)",
                policy.delay_ms(attempt),
                policy.jitter.as_str()
            ),
        },
    })
}

/// Publishes follow-up messages on a confirm-mode channel of its own: the
/// message that failed is acked only once its follow-up is confirmed.
pub(crate) struct RetryPublisher {
    topology: Topology,
    channel: Channel,
    /// Delay queues declared on this connection, and when last.
    declared_delay_queues: Mutex<HashMap<(Delayed, u64), Instant>>,
}

impl RetryPublisher {
    /// `channel` must be in confirm mode.
    pub(crate) fn new(topology: Topology, channel: Channel) -> Self {
        Self { topology, channel, declared_delay_queues: Mutex::new(HashMap::new()) }
    }

    async fn publish_to(&self, queue: &str, m: &FireMessage, headers: Headers) -> anyhow::Result<()> {
        let (payload, props) = properties::encode(&[m], &headers)?;
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

    /// Through the retry queue of about `delay_ms` (`broker::amqp::retry_queue_delay_ms`),
    /// which dead-letters it back to the main queue, due `delay_ms` from now.
    pub(crate) async fn publish_retry(&self, m: &FireMessage, next_attempt: u32, delay_ms: u64) -> anyhow::Result<()> {
        let mut retry = m.clone();
        retry.due_at = runtime::clock::now() + chrono::TimeDelta::milliseconds(delay_ms as i64);
        let queue_delay = broker::amqp::retry_queue_delay_ms(delay_ms);
        self.publish_delayed(&retry, queue_delay, Delayed::Retry, Headers::attempt(next_attempt)).await
    }

    /// The message that times out attempt `attempt`, awaiting its
    /// receiver's report, at `deadline`: through the retry queue of about
    /// that delay, back as the same attempt, due at the deadline.
    pub(crate) async fn publish_completion_check(
        &self,
        m: &FireMessage,
        attempt: u32,
        deadline: chrono::DateTime<chrono::Utc>,
    ) -> anyhow::Result<()> {
        let mut check = m.clone();
        check.due_at = deadline;
        let delay_ms = (deadline - runtime::clock::now()).num_milliseconds().max(0) as u64;
        let queue_delay = broker::amqp::retry_queue_delay_ms(delay_ms);
        let headers = Headers { completion_check: true, ..Headers::attempt(attempt) };
        self.publish_delayed(&check, queue_delay, Delayed::Retry, headers).await
    }

    /// The same attempt again after `delay_ms`, through the waiting queue
    /// (a slot that waits for its destination): its due instant is kept,
    /// which its wait is bounded from.
    pub(crate) async fn publish_wait(&self, m: &FireMessage, attempt: u32, delay_ms: u64) -> anyhow::Result<()> {
        self.publish_delayed(m, delay_ms, Delayed::Wait, Headers { wait: true, ..Headers::attempt(attempt) }).await
    }

    /// Declares the delay queue unless declared lately. Declared again
    /// while in use: publishing alone does not keep a queue from expiring,
    /// and it expires with its messages (a retry queue in use for 10
    /// minutes lost every retry in it).
    async fn declare_delay_queue(&self, kind: Delayed, delay_ms: u64) -> anyhow::Result<()> {
        let mut declared = self.declared_delay_queues.lock().await;
        let fresh = declared
            .get(&(kind, delay_ms))
            .is_some_and(|at| at.elapsed() < self.topology.delay_queue_redeclare_every());
        if !fresh {
            self.topology.declare_delay_queue(&self.channel, kind, delay_ms).await?;
            declared.insert((kind, delay_ms), Instant::now());
        }
        Ok(())
    }

    /// Through the delay queue of `kind` and `delay_ms`, declared first.
    async fn publish_delayed(
        &self,
        m: &FireMessage,
        delay_ms: u64,
        kind: Delayed,
        headers: Headers,
    ) -> anyhow::Result<()> {
        self.declare_delay_queue(kind, delay_ms).await?;
        let result = self.publish_to(&self.topology.delay_queue(kind, delay_ms), m, headers).await;
        if result.is_err() {
            // The queue may have expired since we declared it.
            self.declared_delay_queues.lock().await.remove(&(kind, delay_ms));
        }
        result
    }

    /// To the failed queue, where an operator can see it, with when and why.
    pub(crate) async fn publish_failed(&self, m: &FireMessage, attempts: u32, reason: &str) -> anyhow::Result<()> {
        let headers = Headers {
            failed: Some((runtime::clock::now(), reason.to_owned())),
            expiration: Some(crate::defaults::FAILED_QUEUE_TTL),
            ..Headers::attempt(attempts)
        };
        // A parked message is for an operator to look at (a replay works from
        // the ledger and the job): it keeps no secret header, not even sealed.
        let mut parked = m.clone();
        if let domain::job::Target::Http(http) = &mut parked.target {
            http.secret_headers.clear();
        }
        self.publish_to(&self.topology.failed_queue, &parked, headers).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    use domain::job::Jitter;

    fn delay(policy: &RetryPolicy, attempt: u32, retryable: bool, retry_after: Option<Duration>) -> Option<u64> {
        next_delay(policy, attempt, retryable, retry_after, "job@2026-12-07T08:00:00Z").map(|n| n.delay_ms)
    }

    #[test]
    fn a_retryable_failure_is_retried_until_the_policy_is_used_up() {
        let policy = RetryPolicy {
            max_retries: 2,
            base_delay_ms: 1000,
            multiplier: 2.0,
            max_delay_ms: 60_000,
            jitter: Jitter::None,
        };
        assert_eq!(delay(&policy, 1, true, None), Some(1000));
        assert_eq!(delay(&policy, 2, true, None), Some(2000));
        assert_eq!(delay(&policy, 3, true, None), None, "two retries used");
        assert_eq!(delay(&policy, 1, false, None), None, "a retry cannot help");
        let none = RetryPolicy { max_retries: 0, ..policy };
        assert_eq!(delay(&none, 1, true, None), None);
    }

    #[test]
    fn retry_after_lengthens_the_wait_within_the_cap_and_never_shortens_it() {
        let policy = RetryPolicy {
            max_retries: 5,
            base_delay_ms: 1000,
            multiplier: 2.0,
            max_delay_ms: 60_000,
            jitter: Jitter::None,
        };
        assert_eq!(delay(&policy, 1, true, Some(Duration::from_secs(20))), Some(20_000));
        assert_eq!(delay(&policy, 3, true, Some(Duration::from_millis(100))), Some(4_000), "the backoff is longer");
        let capped = next_delay(&policy, 1, true, Some(Duration::from_secs(3600)), "e").unwrap();
        assert_eq!(capped.delay_ms, 60_000);
        assert!(capped.why.contains("capped at retry.max_delay_ms"), "{}", capped.why);
        assert_eq!(delay(&policy, 6, true, Some(Duration::from_secs(5))), None, "not past the budget");
    }

    proptest::proptest! {
        /// Jitter stays within its bounds, is the same for the same
        /// attempt of the same execution, and spreads executions apart.
        #[test]
        fn jitter_stays_in_its_bounds_and_is_stable_per_attempt(
            base in 1u64..100_000, attempt in 1u32..8, jitter in 0usize..3, n in 0u64..1_000_000,
        ) {
            let jitter = [Jitter::Equal, Jitter::Full, Jitter::None][jitter];
            let policy = RetryPolicy { max_retries: 10, base_delay_ms: base, multiplier: 2.0, max_delay_ms: 3_600_000, jitter };
            let backoff = policy.delay_ms(attempt);
            let id = format!("job-{n}@2026-12-07T08:00:00Z");
            let d = policy.jittered_delay_ms(attempt, &id);
            let low = match jitter { Jitter::Equal => backoff / 2, Jitter::Full => 0, Jitter::None => backoff };
            proptest::prop_assert!((low..=backoff).contains(&d), "{d} not in {low}..={backoff}");
            proptest::prop_assert_eq!(d, policy.jittered_delay_ms(attempt, &id));
        }

        /// A retry's delay queue is at most its delay and at least seven
        /// eighths of it, and the queues are few.
        #[test]
        fn a_retry_queue_is_within_an_eighth_below_its_delay(delay_ms in 0u64..(7 * 24 * 3_600_000)) {
            let queue = broker::amqp::retry_queue_delay_ms(delay_ms);
            proptest::prop_assert!(queue <= delay_ms);
            proptest::prop_assert!(delay_ms - queue <= delay_ms / 8, "{delay_ms} -> {queue}");
        }
    }

    #[test]
    fn jittered_retries_of_a_herd_spread_out_over_few_queues() {
        let policy = RetryPolicy {
            max_retries: 3,
            base_delay_ms: 30_000,
            multiplier: 2.0,
            max_delay_ms: 3_600_000,
            jitter: Jitter::Equal,
        };
        let delays: Vec<u64> = (0..10_000).map(|i| policy.jittered_delay_ms(1, &format!("job-{i}@t"))).collect();
        let distinct: std::collections::HashSet<_> = delays.iter().collect();
        // 10,000 draws from 15,001 values: about 7,300 distinct if uniform.
        assert!(distinct.len() > 6_500, "10,000 executions spread over {} delays", distinct.len());
        let (low, high) = (delays.iter().min().unwrap(), delays.iter().max().unwrap());
        assert!(*low < 16_000 && *high > 29_000, "spread over {low}..{high} of 15,000..30,000");
        let queues: std::collections::HashSet<_> =
            delays.iter().map(|d| broker::amqp::retry_queue_delay_ms(*d)).collect();
        assert!(queues.len() <= 9, "{} delay queues", queues.len());
    }

    fn message(i: usize) -> FireMessage {
        let at = chrono::DateTime::parse_from_rfc3339("2026-12-15T15:00:00Z").unwrap().to_utc()
            + chrono::TimeDelta::seconds(i as i64);
        let target = serde_json::json!({ "url": "http://127.0.0.1:9/hook", "method": "POST", "timeout_ms": 1000 });
        testing::fire_message(domain::job::Target::Http(serde_json::from_value(target).unwrap()), at)
    }

    /// The bug: a delay queue declared once and then only published to
    /// expired `delay + x-expires` after its declaration, on the real
    /// broker, deleting the messages in it (every retry waiting in a 30 s
    /// retry queue, 10.5 minutes into a run). Here the queue's unused life
    /// is 2 s past its 1 s delay and a message goes in every 200 ms for
    /// 6 s: each must be taken, and come back out of the waiting queue once.
    #[tokio::test]
    async fn a_delay_queue_kept_in_use_never_expires_with_messages_in_it() {
        use futures::StreamExt;
        use lapin::options::{BasicConsumeOptions, QueueDeleteOptions};
        use lapin::types::FieldTable;
        let cluster = testing::unique_cluster("delay-expiry");
        let topology = Topology::new(&cluster).with_delay_queue_idle_expiry(std::time::Duration::from_secs(2));
        let connection = broker::amqp::connect(&testing::amqp_url(), "delay expiry test").await.unwrap();
        let channel = broker::amqp::confirm_channel(&connection).await.unwrap();
        topology.declare(&channel).await.unwrap();
        let consume = connection.create_channel().await.unwrap();
        let mut consumer = consume
            .basic_consume(
                topology.waiting_queue.as_str().into(),
                "test".into(),
                BasicConsumeOptions { no_ack: true, ..Default::default() },
                FieldTable::default(),
            )
            .await
            .unwrap();
        let publisher = RetryPublisher::new(topology.clone(), channel.clone());
        const SENT: usize = 30;
        let mut sent = std::collections::BTreeSet::new();
        for i in 0..SENT {
            let m = message(i);
            publisher.publish_wait(&m, 1, 1_000).await.expect("the delay queue takes every message");
            sent.insert(m.execution_id);
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        let mut back = std::collections::BTreeSet::new();
        while back.len() < SENT {
            let delivery = tokio::time::timeout(std::time::Duration::from_secs(10), consumer.next())
                .await
                .unwrap_or_else(|_| panic!("{} of {SENT} messages came back; the rest were lost", back.len()))
                .unwrap()
                .unwrap();
            let m: FireMessage = serde_json::from_slice(&delivery.data).unwrap();
            assert!(back.insert(m.execution_id), "a message came back twice");
        }
        assert_eq!(back, sent);
        let _ = channel
            .queue_delete(topology.delay_queue(Delayed::Wait, 1_000).as_str().into(), QueueDeleteOptions::default())
            .await;
        topology.delete(&channel).await.unwrap();
    }
}
