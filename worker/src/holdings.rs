//! What a worker holds, in bytes. Every slot is charged, from its message's
//! arrival until the slot is decided, an estimate of the memory it keeps:
//! its share of the body, the parsed message and its future (waiting for
//! its host or a permit); once delivered, only its outcome waits for its
//! write, and the charge shrinks to that. The consumer takes no further
//! message while the total is at the cap, so past the machine's capacity
//! the backlog waits in the broker, and a worker's memory stays flat however
//! far behind it falls. A slot armed ahead of its due instant keeps far less
//! (its later steps are not allocated yet): it moves to a budget of its own
//! at a smaller charge, and back under the cap at its due instant, waiting
//! there if the cap is reached. So a herd armed ahead of time is held whole,
//! what is on its way never exceeds the cap, and the two budgets bound the
//! total. The prefetch still bounds messages; this bounds what they cost,
//! whatever their size.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The memory one slot on its way keeps, beside its share of the body:
/// measured with heaptrack on a worker at 10,000 fires/s offered (the
/// slot's future; the boxed steps it is in from its due instant, while
/// delivering or recording; the parsed message; its entries in the ledger
/// batchers and `Holding`), rounded up.
pub(crate) const SLOT_BYTES: usize = 4096;

/// What an armed slot keeps while it waits for its due instant, beside its
/// share of the body: its future up to the wait (888 bytes), the parsed
/// message, its entry in `Holding`. Measured from a worker's resident
/// memory with 25,000 slots armed (about 2,000 bytes a slot with the
/// body), rounded up.
pub(crate) const ARMED_SLOT_BYTES: usize = 2048;

/// What a delivered slot keeps until its outcome is written, beside the
/// outcome's text: the outcome (and its copy queued for the statement), its
/// entry in `Holding`, its share of its message's task, which is all that
/// is left of the message then (`processing::handle`). An estimate, rounded
/// up; checked against a worker's resident memory (docs/benchmarks.md).
pub(crate) const DELIVERED_SLOT_BYTES: usize = 768;

/// The armed slots' budget, as a multiple of the cap: a herd armed ahead of
/// its due instant is held whole up to 2 × 64 MiB / 2 KiB = 65,536 slots a
/// worker with the defaults, while what is on its way stays within the cap.
/// Slots taken under the cap arm once their rows start, so the budget is
/// exceeded by at most what was under the cap as it filled, at the armed
/// charge: the two together stay within about 3.5 times the cap.
const ARMED_CAP_PER_CAP: usize = 2;

/// How long the consumer waits at the cap before it logs that no held
/// message has settled (and again as often while that lasts).
const STALL_WARNING: std::time::Duration = std::time::Duration::from_secs(30);

/// How often the budgets' gauges are set even when nothing changes: the
/// exporter forgets a gauge not set for a while
/// (`destination::GAUGES_FORGOTTEN_AFTER`), and the budgets set theirs
/// through handles, which would then update a series no longer exported.
const GAUGES_KEPT_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// The held-bytes budget of one worker (shared by its broker sessions).
pub(crate) struct HeldBytes {
    /// Slots on their way (arrived due, or past their due instant) and
    /// unparsable bodies.
    held: Budget,
    /// Slots armed ahead of their due instant, at `ARMED_SLOT_BYTES`.
    armed: Budget,
    /// Wakes the consumer when a budget falls below its cap.
    freed: Notify,
    /// Wakes one due slot waiting for room under the cap at a time: a herd
    /// has tens of thousands waiting, and each slot decided makes room for
    /// about one (waking them all on every release cost more CPU than the
    /// deliveries).
    room_for_due: Notify,
}

/// Bytes against a cap, with the gauge that shows them. The gauge is a
/// handle looked up once: it changes two or three times for every slot, and
/// each lookup through the macro hashed its name and searched the registry.
struct Budget {
    bytes: AtomicUsize,
    cap: usize,
    gauge: metrics::Gauge,
}

impl Budget {
    fn new(cap: usize, gauge: &'static str) -> Self {
        Budget { bytes: AtomicUsize::new(0), cap, gauge: metrics::gauge!(gauge) }
    }

    fn add(&self, bytes: usize) {
        let now = self.bytes.fetch_add(bytes, Ordering::SeqCst) + bytes;
        self.gauge.set(now as f64);
    }

    /// Takes `bytes` off; answers the total before and after.
    fn sub(&self, bytes: usize) -> (usize, usize) {
        let before = self.bytes.fetch_sub(bytes, Ordering::SeqCst);
        let now = before - bytes;
        self.gauge.set(now as f64);
        (before, now)
    }

    fn load(&self) -> usize {
        self.bytes.load(Ordering::SeqCst)
    }
}

impl HeldBytes {
    pub(crate) fn new(cap: usize) -> Arc<Self> {
        let cap = cap.max(1);
        Arc::new(Self {
            held: Budget::new(cap, runtime::metrics::WORKER_HELD_BYTES),
            armed: Budget::new(cap.saturating_mul(ARMED_CAP_PER_CAP), runtime::metrics::WORKER_ARMED_BYTES),
            freed: Notify::new(),
            room_for_due: Notify::new(),
        })
    }

    /// Charges a message of `body_len` bytes: one charge per slot (its state
    /// and its share of the body), each released when its slot is decided,
    /// or one for the body when it carries no slot (unparsable). Never
    /// refuses: the consumer asks for `room` before it takes a message, so
    /// the total exceeds the cap by at most one message.
    pub(crate) fn charge_message(self: &Arc<Self>, body_len: usize, slots: usize) -> Vec<HeldCharge> {
        if slots == 0 {
            return vec![self.charge(body_len)];
        }
        let share = body_len.div_ceil(slots);
        (0..slots).map(|_| self.charge(SLOT_BYTES + share)).collect()
    }

    fn charge(self: &Arc<Self>, bytes: usize) -> HeldCharge {
        self.held.add(bytes);
        HeldCharge { budget: self.clone(), bytes }
    }

    fn release(&self, budget: &Budget, bytes: usize) {
        let (before, now) = budget.sub(bytes);
        // Only the step from at-or-over the cap to under it wakes the consumer.
        if before >= budget.cap && now < budget.cap {
            self.freed.notify_waiters();
        }
        if std::ptr::eq(budget, &self.held) && now < budget.cap {
            self.room_for_due.notify_one();
        }
    }

    fn has_room(&self) -> bool {
        self.held.load() < self.held.cap
    }

    /// Sets the budgets' gauges every `GAUGES_KEPT_EVERY`, for the
    /// worker's life, so that the exporter keeps them.
    pub(crate) async fn keep_gauges(&self) {
        let mut every = tokio::time::interval(GAUGES_KEPT_EVERY);
        loop {
            every.tick().await;
            for budget in [&self.held, &self.armed] {
                budget.gauge.set(budget.load() as f64);
            }
        }
    }

    /// Waits until both what is on its way and what is armed are below
    /// their caps: the consumer's wait before it takes a message. Every
    /// `STALL_WARNING` without a slot decided it says so: the deliveries
    /// are not keeping up, or something they wait for is stuck.
    pub(crate) async fn room(&self) {
        self.wait_for(|| self.has_room() && self.armed.load() < self.armed.cap).await
    }

    async fn wait_for(&self, ready: impl Fn() -> bool) {
        let started = tokio::time::Instant::now();
        let mut warn_at = started + STALL_WARNING;
        loop {
            // Registered before the check, so a release in between still wakes us.
            let freed = self.freed.notified();
            if ready() {
                return;
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep_until(warn_at) => {
                    tracing::warn!(
                        held_bytes = self.held.load(),
                        cap_bytes = self.held.cap,
                        armed_bytes = self.armed.load(),
                        armed_cap_bytes = self.armed.cap,
                        waited_secs = started.elapsed().as_secs(),
                        "this worker holds all it may and no slot has been decided since: deliveries are not keeping up, or what they wait for (Postgres, a receiver, the broker) is stuck"
                    );
                    warn_at += STALL_WARNING;
                }
            }
        }
    }

    #[cfg(test)]
    fn held(&self) -> usize {
        self.held.load()
    }

    #[cfg(test)]
    fn armed(&self) -> usize {
        self.armed.load()
    }
}

/// One slot's charge (or an unparsable body's), released when dropped.
pub(crate) struct HeldCharge {
    budget: Arc<HeldBytes>,
    bytes: usize,
}

impl HeldCharge {
    /// The slot is armed, waiting for its due instant: its charge moves
    /// from the cap to the armed budget, at `ARMED_SLOT_BYTES` instead of
    /// `SLOT_BYTES` (its steps after the due instant are not allocated yet).
    pub(crate) fn arm(mut self) -> ArmedCharge {
        let (budget, held) = (self.budget.clone(), std::mem::take(&mut self.bytes));
        let armed = held - SLOT_BYTES + ARMED_SLOT_BYTES;
        budget.armed.add(armed);
        budget.release(&budget.held, held);
        ArmedCharge { budget, held, armed }
    }
}

impl HeldCharge {
    /// The slot is delivered and only its outcome's write is left: its
    /// steps and its message are freed, so its charge shrinks to
    /// `DELIVERED_SLOT_BYTES` and the outcome's text, and the room goes to
    /// the next slots. Through a burst the writes are deferred while
    /// deliveries queue (`DueBacklog`): charged whole, the delivered slots
    /// filled the cap and held the next ones back.
    pub(crate) fn delivered(mut self, text_bytes: usize) -> HeldCharge {
        let kept = DELIVERED_SLOT_BYTES + text_bytes;
        if kept < self.bytes {
            let freed = std::mem::replace(&mut self.bytes, kept) - kept;
            self.budget.release(&self.budget.held, freed);
        }
        self
    }
}

impl Drop for HeldCharge {
    fn drop(&mut self) {
        self.budget.release(&self.budget.held, self.bytes);
    }
}

/// An armed slot's charge.
pub(crate) struct ArmedCharge {
    budget: Arc<HeldBytes>,
    /// What the slot is charged once on its way again.
    held: usize,
    armed: usize,
}

impl ArmedCharge {
    /// The due instant: the slot waits until what is on its way is below
    /// the cap, then its charge moves back. Every byte under the cap
    /// belongs to a slot on its way (armed ones are not there), each of
    /// which ends, so the wait ends too; past the cap, due slots wait in
    /// this small state rather than allocating their next steps.
    pub(crate) async fn due(mut self) -> HeldCharge {
        let budget = self.budget.clone();
        // `notify_one` keeps its wake for a slot not yet waiting, so a
        // release between the check and the wait is not missed.
        while !budget.has_room() {
            budget.room_for_due.notified().await;
        }
        let (held, armed) = (self.held, std::mem::take(&mut self.armed));
        budget.held.add(held);
        budget.release(&budget.armed, armed);
        // Room left: the next waiting slot's turn.
        if budget.has_room() {
            budget.room_for_due.notify_one();
        }
        HeldCharge { budget, bytes: held }
    }
}

impl Drop for ArmedCharge {
    fn drop(&mut self) {
        self.budget.release(&self.budget.armed, self.armed);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_consumer_waits_at_the_cap_until_a_slot_is_decided() {
        let cap = 8_000;
        let budget = HeldBytes::new(cap);
        // Under the cap: room at once, even for a message that crosses it.
        budget.room().await;
        let second = budget.charge_message(1_000, 1);
        budget.room().await;
        let mut first = budget.charge_message(1_000, 2);
        assert_eq!(budget.held(), 2_000 + 3 * SLOT_BYTES);
        assert!(budget.held() >= cap);

        let consumer = tokio::spawn({
            let budget = budget.clone();
            async move { budget.room().await }
        });
        // Past several stall warnings: still waiting, not given up.
        tokio::time::sleep(STALL_WARNING * 3 + Duration::from_secs(5)).await;
        assert!(!consumer.is_finished(), "no further message while at the cap");
        // One slot decided, still at the cap: the consumer keeps waiting.
        drop(second);
        tokio::task::yield_now().await;
        assert!(!consumer.is_finished());
        drop(first.pop());
        consumer.await.unwrap();
        drop(first);
        assert_eq!(budget.held(), 0);
        // An unparsable body is charged whole, once.
        let body = budget.charge_message(700, 0);
        assert_eq!((body.len(), budget.held()), (1, 700));
    }

    #[tokio::test(start_paused = true)]
    async fn armed_slots_leave_the_cap_and_wait_at_their_due_instant_for_room_under_it() {
        let cap = 3 * SLOT_BYTES;
        let budget = HeldBytes::new(cap);
        // A herd of six slots, more than the cap holds on their way.
        let herd = budget.charge_message(600, 6);
        assert_eq!(budget.held(), 600 + 6 * SLOT_BYTES);
        let armed: Vec<ArmedCharge> = herd.into_iter().map(HeldCharge::arm).collect();
        assert_eq!(budget.held(), 0, "armed slots leave the cap");
        assert_eq!(budget.armed(), 600 + 6 * ARMED_SLOT_BYTES);
        // So the consumer takes more while they wait.
        budget.room().await;

        // The due instant: slots go on while there is room under the cap,
        // the rest wait in their armed state.
        let mut due = armed.into_iter().map(|a| tokio::spawn(a.due())).collect::<Vec<_>>();
        tokio::time::sleep(Duration::from_millis(10)).await;
        let on_their_way: Vec<HeldCharge> = {
            let mut done = Vec::new();
            let mut waiting = Vec::new();
            for task in due.drain(..) {
                if task.is_finished() { done.push(task.await.unwrap()) } else { waiting.push(task) }
            }
            due = waiting;
            done
        };
        assert_eq!(on_their_way.len(), 3, "as many as fill the cap go on");
        assert!(budget.held() >= cap && budget.held() < cap + SLOT_BYTES + 100);
        assert_eq!(budget.armed(), 3 * (100 + ARMED_SLOT_BYTES));
        // And the consumer waits: what is on its way is at the cap.
        let consumer = tokio::spawn({
            let budget = budget.clone();
            async move { budget.room().await }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!consumer.is_finished());

        // Decided slots make room for the waiting ones, then for messages.
        drop(on_their_way);
        let rest: Vec<HeldCharge> = futures::future::join_all(due).await.into_iter().map(Result::unwrap).collect();
        assert_eq!(budget.armed(), 0);
        assert_eq!(budget.held(), 3 * (SLOT_BYTES + 100));
        drop(rest);
        consumer.await.unwrap();
        assert_eq!((budget.held(), budget.armed()), (0, 0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delivered_slot_keeps_a_small_charge_and_its_room_lets_a_due_slot_on() {
        let budget = HeldBytes::new(2 * SLOT_BYTES);
        let on_their_way = budget.charge_message(200, 2);
        let armed = budget.charge_message(100, 1).pop().unwrap().arm();
        let due = tokio::spawn(armed.due());
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!due.is_finished(), "the cap is full of slots on their way");

        // One is delivered, its outcome's write pending: 768 bytes and its text.
        let mut on_their_way = on_their_way.into_iter();
        let delivered = on_their_way.next().unwrap().delivered(40);
        assert_eq!(budget.held(), SLOT_BYTES + 100 + DELIVERED_SLOT_BYTES + 40);
        let due = due.await.unwrap();
        assert_eq!(budget.held(), 2 * SLOT_BYTES + 200 + DELIVERED_SLOT_BYTES + 40);
        // Never grows: a charge already smaller stays as it is.
        let tiny = budget.charge_message(0, 0).pop().unwrap().delivered(10);
        assert_eq!(tiny.bytes, 0);
        drop((delivered, due, on_their_way, tiny));
        assert_eq!((budget.held(), budget.armed()), (0, 0));
    }

    #[tokio::test]
    async fn the_consumer_also_waits_while_the_armed_budget_is_full() {
        let budget = HeldBytes::new(SLOT_BYTES);
        let armed: Vec<ArmedCharge> = (0..ARMED_CAP_PER_CAP * SLOT_BYTES / ARMED_SLOT_BYTES)
            .flat_map(|_| budget.charge_message(0, 1))
            .map(HeldCharge::arm)
            .collect();
        assert_eq!(budget.held(), 0);
        let consumer = tokio::spawn({
            let budget = budget.clone();
            async move { budget.room().await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!consumer.is_finished(), "the armed budget is full: no further message");
        drop(armed);
        consumer.await.unwrap();
        assert_eq!(budget.armed(), 0);
    }
}
