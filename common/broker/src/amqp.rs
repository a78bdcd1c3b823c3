//! RabbitMQ: connection and the queue topology, declared idempotently by
//! whoever publishes or consumes.
//!
//! - main queue `{cluster}.cron_scheduler`: durable; a rejected message
//!   dead-letters through `{cluster}.cron_dlx` to the failed queue.
//! - failed queue `{cluster}.cron_scheduler_failed`: messages past their retries.
//! - retry queues `{cluster}.cron_scheduler_retry_{delay_ms}`: one per delay,
//!   holding each message for exactly that delay (per-queue TTL, so no head of
//!   line blocking) and dead-lettering it back to the main queue; a retry queue
//!   deletes itself after sitting unused (`DELAY_QUEUE_IDLE_EXPIRY`).
//! - waiting queue `{cluster}.cron_scheduler_waiting`, and its delay queues
//!   `{cluster}.cron_scheduler_wait_{delay_ms}`: slots handed back to wait
//!   for their destination's circuit come back here, not to the main queue.
//!   All the slots of a host that is down come back together at the end of
//!   its cool-down; in the main queue they were ahead of every other host's
//!   slots, which waited behind them (up to 28 s at 2,000 fires/s with one
//!   host in ten down for 4 minutes). Workers consume both queues at once.
//!
//! Every queue is a classic durable queue, or, with `AMQP_QUEUE_TYPE=quorum`,
//! a quorum queue: replicated by Raft over the broker's nodes and written to
//! disk before the publisher's confirm, so a confirmed message survives the
//! loss of a broker node's disk; dead-lettering (retries coming back, messages
//! past their retries) is then at-least-once instead of RabbitMQ's default
//! at-most-once. The type of an existing queue cannot be changed in place.

use std::time::Duration;

use lapin::options::{ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

/// How long one node may take to accept a connection before the next is tried.
const NODE_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The node that accepted the last connection: tried first next time, so a
/// node that is down costs one refused attempt per reconnect at most once.
static PREFERRED_NODE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Connects to the broker at `urls`: one AMQP URL, or several nodes of one
/// cluster separated by commas (`amqp://h1:5672/%2f,amqp://h2:5672/%2f`),
/// tried in turn from the one that answered last until one accepts.
pub async fn connect(urls: &str, name: &str) -> lapin::Result<Connection> {
    let nodes: Vec<&str> = urls.split(',').map(str::trim).filter(|u| !u.is_empty()).collect();
    let first = PREFERRED_NODE.load(std::sync::atomic::Ordering::Relaxed);
    let mut last_error = None;
    for i in 0..nodes.len().max(1) {
        let index = (first + i) % nodes.len().max(1);
        let url = nodes.get(index).copied().unwrap_or(urls);
        let props = ConnectionProperties::default().with_connection_name(name.into());
        let attempt = match tokio::time::timeout(NODE_CONNECT_TIMEOUT, Connection::connect(url, props)).await {
            Ok(result) => result.map_err(redacted),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "node {} of {} did not accept a connection within {NODE_CONNECT_TIMEOUT:?}",
                    index + 1,
                    nodes.len()
                ),
            )
            .into()),
        };
        match attempt {
            Ok(connection) => {
                PREFERRED_NODE.store(index, std::sync::atomic::Ordering::Relaxed);
                return Ok(connection);
            }
            Err(e) => {
                if nodes.len() > 1 {
                    tracing::debug!(node = index + 1, error = %e, "RabbitMQ node refused; trying the next");
                }
                last_error = Some(e);
            }
        }
    }
    Err(last_error.expect("at least one node tried"))
}

/// lapin quotes a URL it cannot parse whole, password included
/// (`Invalid URL: 'amqp://user:pw@...'`): such an error is given back with
/// its text redacted (`domain::redact`), as the same kind of error.
fn redacted(e: lapin::Error) -> lapin::Error {
    match e.kind() {
        lapin::ErrorKind::IOError(io) if domain::redact::might_hold_secret(&io.to_string()) => {
            std::io::Error::new(io.kind(), domain::redact::text(&io.to_string())).into()
        }
        _ if domain::redact::might_hold_secret(&e.to_string()) => {
            std::io::Error::other(domain::redact::text(&e.to_string())).into()
        }
        _ => e,
    }
}

pub use runtime::config::QueueType;

/// What a delay queue holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Delayed {
    /// The next attempt after a failed one: back to the main queue.
    Retry,
    /// A slot waiting for its destination, the attempt not made: back to the waiting queue.
    Wait,
}

/// How long a delay queue lives unused past its delay (`x-expires`), so
/// that the queues of delays no longer used go away. To RabbitMQ "unused"
/// means no consumer, no declare and no `basic.get` — publishing does not
/// count, and an expiring queue is deleted with the messages in it. So
/// whoever publishes to a delay queue declares it again at least every
/// `Topology::delay_queue_redeclare_every` (half of this): a message
/// published at t leaves by t + delay, and the queue lives until at least
/// t + delay + half of this.
pub const DELAY_QUEUE_IDLE_EXPIRY: Duration = Duration::from_secs(600);

#[derive(Debug, Clone)]
pub struct Topology {
    pub main_queue: String,
    pub dlx: String,
    pub failed_queue: String,
    pub waiting_queue: String,
    retry_prefix: String,
    wait_prefix: String,
    queue_type: QueueType,
    delay_queue_idle_expiry: Duration,
}

impl Topology {
    /// The queues of the cluster a process's flags name, of the configured type.
    pub fn of(service: &runtime::config::ServiceArgs) -> Self {
        Self::new(&service.cluster_name).with_queue_type(service.amqp_queue_type)
    }

    pub fn new(cluster: &str) -> Self {
        Self {
            main_queue: format!("{cluster}.cron_scheduler"),
            dlx: format!("{cluster}.cron_dlx"),
            failed_queue: format!("{cluster}.cron_scheduler_failed"),
            waiting_queue: format!("{cluster}.cron_scheduler_waiting"),
            retry_prefix: format!("{cluster}.cron_scheduler_retry_"),
            wait_prefix: format!("{cluster}.cron_scheduler_wait_"),
            queue_type: QueueType::Classic,
            delay_queue_idle_expiry: DELAY_QUEUE_IDLE_EXPIRY,
        }
    }

    /// A shorter life for unused delay queues than `DELAY_QUEUE_IDLE_EXPIRY`
    /// (tests that watch one expire).
    pub fn with_delay_queue_idle_expiry(mut self, expiry: Duration) -> Self {
        self.delay_queue_idle_expiry = expiry;
        self
    }

    /// How often a publisher declares a delay queue it keeps using, so that
    /// it never expires with messages in it.
    pub fn delay_queue_redeclare_every(&self) -> Duration {
        self.delay_queue_idle_expiry / 2
    }

    pub fn with_queue_type(mut self, queue_type: QueueType) -> Self {
        self.queue_type = queue_type;
        self
    }

    /// The arguments every queue of this type is declared with: for quorum
    /// queues the type, and at-least-once dead-lettering, which RabbitMQ
    /// allows only with `reject-publish` overflow (no length limit is set,
    /// so it never rejects).
    fn queue_args(&self, dead_letters: bool) -> FieldTable {
        let mut args = FieldTable::default();
        if self.queue_type == QueueType::Quorum {
            args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
            if dead_letters {
                args.insert("x-dead-letter-strategy".into(), AMQPValue::LongString("at-least-once".into()));
                args.insert("x-overflow".into(), AMQPValue::LongString("reject-publish".into()));
            }
        }
        args
    }

    /// The delay queue of `delay_ms` for `kind`.
    pub fn delay_queue(&self, kind: Delayed, delay_ms: u64) -> String {
        match kind {
            Delayed::Retry => format!("{}{delay_ms}", self.retry_prefix),
            Delayed::Wait => format!("{}{delay_ms}", self.wait_prefix),
        }
    }

    /// Where the messages of a delay queue of `kind` go once their delay has passed.
    fn after_delay(&self, kind: Delayed) -> &str {
        match kind {
            Delayed::Retry => &self.main_queue,
            Delayed::Wait => &self.waiting_queue,
        }
    }

    /// Declares the main and waiting queues, the DLX and the failed queue.
    pub async fn declare(&self, channel: &Channel) -> lapin::Result<()> {
        let durable = QueueDeclareOptions { durable: true, ..Default::default() };
        channel
            .exchange_declare(
                self.dlx.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions { durable: true, ..Default::default() },
                FieldTable::default(),
            )
            .await?;
        channel.queue_declare(self.failed_queue.as_str().into(), durable, self.queue_args(false)).await?;
        channel
            .queue_bind(
                self.failed_queue.as_str().into(),
                self.dlx.as_str().into(),
                self.failed_queue.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let mut args = self.queue_args(true);
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString(self.dlx.as_str().into()));
        args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(self.failed_queue.as_str().into()));
        for queue in [&self.main_queue, &self.waiting_queue] {
            channel.queue_declare(queue.as_str().into(), durable, args.clone()).await?;
        }
        Ok(())
    }

    /// Deletes the main, waiting and failed queues and the DLX, with
    /// whatever they hold: for a cluster that is done for good (a benchmark
    /// run). Delay queues expire by themselves (`x-expires`).
    pub async fn delete(&self, channel: &Channel) -> lapin::Result<()> {
        for queue in [&self.main_queue, &self.waiting_queue, &self.failed_queue] {
            channel.queue_delete(queue.as_str().into(), Default::default()).await?;
        }
        channel.exchange_delete(self.dlx.as_str().into(), Default::default()).await
    }

    /// Connects to `amqp_url` and deletes this cluster's queues (`delete`).
    pub async fn delete_at(&self, amqp_url: &str) -> anyhow::Result<()> {
        let connection = connect(amqp_url, "cronshard cleanup").await?;
        let deleted = self.delete(&connection.create_channel().await?).await;
        let _ = connection.close(200, "done".into()).await;
        Ok(deleted?)
    }

    /// Messages ready in the queues a fire message waits in for a worker
    /// (the main and the waiting queue): not yet handed to any consumer. A
    /// queue that does not exist counts 0: what it held went with it.
    pub async fn ready_messages(&self, connection: &Connection) -> lapin::Result<u64> {
        let mut ready = 0;
        for queue in [&self.main_queue, &self.waiting_queue] {
            // A channel each: the broker closes the channel of a passive
            // declare that names a missing queue.
            let channel = connection.create_channel().await?;
            let passive = QueueDeclareOptions { passive: true, ..Default::default() };
            match channel.queue_declare(queue.as_str().into(), passive, FieldTable::default()).await {
                Ok(declared) => {
                    ready += u64::from(declared.message_count());
                    let _ = channel.close(200, "counted".into()).await;
                }
                Err(e) if matches!(e.kind(), lapin::ErrorKind::ProtocolError(amqp) if amqp.get_id() == 404) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(ready)
    }

    /// Declares the delay queue of `kind` for one delay and returns its name.
    pub async fn declare_delay_queue(&self, channel: &Channel, kind: Delayed, delay_ms: u64) -> lapin::Result<String> {
        let name = self.delay_queue(kind, delay_ms);
        let mut args = self.queue_args(true);
        args.insert("x-message-ttl".into(), AMQPValue::LongLongInt(delay_ms as i64));
        args.insert("x-dead-letter-exchange".into(), AMQPValue::LongString("".into()));
        args.insert("x-dead-letter-routing-key".into(), AMQPValue::LongString(self.after_delay(kind).into()));
        // Expire only well after the last message could have left.
        let expires_ms = delay_ms.saturating_add(self.delay_queue_idle_expiry.as_millis() as u64);
        args.insert("x-expires".into(), AMQPValue::LongLongInt(expires_ms as i64));
        channel
            .queue_declare(name.as_str().into(), QueueDeclareOptions { durable: true, ..Default::default() }, args)
            .await?;
        Ok(name)
    }
}

/// A channel in publisher-confirm mode.
pub async fn confirm_channel(connection: &Connection) -> lapin::Result<Channel> {
    let channel = connection.create_channel().await?;
    channel.confirm_select(ConfirmSelectOptions::default()).await?;
    Ok(channel)
}

/// The delay queue a retry waits in: its delay rounded down to the top
/// four bits (eight rungs per doubling), so jittered retries share a few
/// dozen delay queues instead of one per millisecond. The message comes
/// back at most an eighth of its delay early, and the worker holds it the
/// rest of the way to its `due_at`.
pub fn retry_queue_delay_ms(delay_ms: u64) -> u64 {
    if delay_ms < 16 {
        return delay_ms;
    }
    let shift = 63 - delay_ms.leading_zeros() - 3;
    (delay_ms >> shift) << shift
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_come_back_to_the_waiting_queue_and_retries_to_the_main_one() {
        let t = Topology::new("c");
        assert_ne!(t.delay_queue(Delayed::Wait, 4_000), t.delay_queue(Delayed::Retry, 4_000));
        assert_eq!(t.after_delay(Delayed::Wait), t.waiting_queue);
        assert_eq!(t.after_delay(Delayed::Retry), t.main_queue);
    }
}
