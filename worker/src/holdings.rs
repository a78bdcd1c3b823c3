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

    /// Waits until what is held is below the cap.
    pub(crate) async fn room(&self) {
        loop {
            // Registered before the check, so a release in between still wakes us.
            let freed = self.freed.notified();
            if self.held.load(Ordering::SeqCst) < self.cap {
                return;
            }
            freed.await;
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
        tokio::time::sleep(Duration::from_secs(60)).await;
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
