//! What a worker holds, in bytes. Every message is charged, from its
//! arrival to its settle (ack or requeue), an estimate of the memory it
//! keeps: its body, and per slot the parsed message and the slot's future
//! (waiting for its due instant, its host, a permit, or its outcome write).
//! The consumer takes no further message while the total is at the cap, so
//! past the machine's capacity the backlog waits in the broker, and a
//! worker's memory stays flat however far behind it falls. The prefetch
//! still bounds messages; this bounds what they cost, whatever their size.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The memory one slot keeps while its message is held, beside the body:
/// measured with heaptrack on a worker at 10,000 fires/s offered (the
/// slot's future in the message's `join_all`, 1,792 bytes; the boxed step
/// it is in while delivering or recording; the parsed message; its entries
/// in the ledger batchers and `Holding`), rounded up.
pub(crate) const SLOT_BYTES: usize = 4096;

/// How long the consumer waits at the cap before it logs that no held
/// message has settled (and again as often while that lasts).
const STALL_WARNING: std::time::Duration = std::time::Duration::from_secs(30);

/// The held-bytes budget of one worker (shared by its broker sessions).
pub(crate) struct HeldBytes {
    held: AtomicUsize,
    cap: usize,
    freed: Notify,
}

impl HeldBytes {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self { held: AtomicUsize::new(0), cap: cap.max(1), freed: Notify::new() })
    }

    /// What a message of `body_len` bytes carrying `slots` slots is charged.
    pub(crate) fn cost(body_len: usize, slots: usize) -> usize {
        body_len + slots * SLOT_BYTES
    }

    /// Charges `bytes` until the returned guard is dropped. Never refuses:
    /// the consumer asks for `room` before it takes a message, so the total
    /// exceeds the cap by at most one message.
    pub(crate) fn charge(self: &Arc<Self>, bytes: usize) -> HeldCharge {
        let now = self.held.fetch_add(bytes, Ordering::SeqCst) + bytes;
        metrics::gauge!(common::metrics::WORKER_HELD_BYTES).set(now as f64);
        HeldCharge { budget: self.clone(), bytes }
    }

    /// Waits until what is held is below the cap. Every `STALL_WARNING`
    /// without a message settled it says so: the deliveries are not keeping
    /// up, or something they wait for is stuck.
    pub(crate) async fn room(&self) {
        let started = tokio::time::Instant::now();
        let mut warn_at = started + STALL_WARNING;
        loop {
            // Registered before the check, so a release in between still wakes us.
            let freed = self.freed.notified();
            let held = self.held.load(Ordering::SeqCst);
            if held < self.cap {
                return;
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep_until(warn_at) => {
                    tracing::warn!(
                        held_bytes = held,
                        cap_bytes = self.cap,
                        waited_secs = started.elapsed().as_secs(),
                        "this worker holds all it may and no message has settled since: deliveries are not keeping up, or what they wait for (Postgres, a receiver, the broker) is stuck"
                    );
                    warn_at += STALL_WARNING;
                }
            }
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

/// One message's charge, released when the message is settled.
pub(crate) struct HeldCharge {
    budget: Arc<HeldBytes>,
    bytes: usize,
}

impl Drop for HeldCharge {
    fn drop(&mut self) {
        let before = self.budget.held.fetch_sub(self.bytes, Ordering::SeqCst);
        let now = before - self.bytes;
        metrics::gauge!(common::metrics::WORKER_HELD_BYTES).set(now as f64);
        // Only the step from at-or-over the cap to under it wakes the consumer.
        if before >= self.budget.cap && now < self.budget.cap {
            self.budget.freed.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_consumer_waits_at_the_cap_until_a_message_is_settled() {
        let budget = HeldBytes::new(10_000);
        // Under the cap: room at once, even for a message that crosses it.
        budget.room().await;
        let first = budget.charge(HeldBytes::cost(1_000, 2));
        budget.room().await;
        let second = budget.charge(HeldBytes::cost(1_000, 1));
        assert_eq!(budget.held(), 2_000 + 3 * SLOT_BYTES);
        assert!(budget.held() >= 10_000);

        let consumer = tokio::spawn({
            let budget = budget.clone();
            async move { budget.room().await }
        });
        // Past several stall warnings: still waiting, not given up.
        tokio::time::sleep(STALL_WARNING * 3 + Duration::from_secs(5)).await;
        assert!(!consumer.is_finished(), "no further message while at the cap");
        // Still at the cap after this one: the consumer keeps waiting.
        drop(HeldCharge { budget: budget.clone(), bytes: 0 });
        tokio::task::yield_now().await;
        assert!(!consumer.is_finished());
        drop(first);
        consumer.await.unwrap();
        drop(second);
        assert_eq!(budget.held(), 0);
    }
}
