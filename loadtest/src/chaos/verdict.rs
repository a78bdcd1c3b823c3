//! What became of every slot of a `chaos` run, judged from the receivers
//! and the ledger together, and the figures of a window of scheduled time.
//!
//! A slot (an execution id the jobs' schedules say was due) is
//! - **delivered** when a receiver answered a request for it with 2xx;
//! - else **missed by policy** when the ledger recorded it `skipped` or
//!   `missed` (a misfire policy, an overlap: decided without a delivery);
//! - else **failed by the retry policy** when the ledger says `failed`, the
//!   slot's receiver was taken down at some point within an hour after its
//!   due instant, and every request for it was refused (the product gave up
//!   as its retry policy or destination horizon says);
//! - else **without final status** when the ledger still says `pending`,
//!   `running` or `retrying`;
//! - else **lost** (no ledger row, a `failed` row nothing explains, or a
//!   `succeeded` row no receiver confirmed).
//!
//! A delivered slot answered 2xx more than once is **duplicated**, unless
//! it is a **crash redelivery**: the ledger shows the attempt was taken over
//! from a worker (a `recovered` entry or an attempt marked `redelivered`)
//! and a worker was killed within 60 s after the first 2xx answer, the
//! at-least-once case receivers deduplicate by execution id
//! (docs/architecture.md, "Where exactly-once comes from").
//!
//! Lateness is that of a slot's first request at a receiver (whatever the
//! answer): received − due, both on this machine's clock; negative is early.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use crate::report::Percentiles;

/// A slot's ledger row, as far as the verdict needs it.
#[derive(Clone, Debug, Default)]
pub struct LedgerRow {
    pub status: String,
    pub reason: Option<String>,
    /// History shows the attempt taken over from a worker presumed gone.
    pub crash_redelivery: bool,
}

/// One due slot and what was seen of it.
#[derive(Clone, Debug)]
pub struct Slot {
    pub due: DateTime<Utc>,
    /// Aimed at the second receiver (the one `receiver-down` takes down).
    pub on_b: bool,
    pub first_arrival: Option<DateTime<Utc>>,
    pub arrivals: u32,
    pub oks: u32,
    pub first_ok_at: Option<DateTime<Utc>>,
    pub ledger: Option<LedgerRow>,
}

impl Slot {
    pub fn new(due: DateTime<Utc>, on_b: bool) -> Self {
        Self { due, on_b, first_arrival: None, arrivals: 0, oks: 0, first_ok_at: None, ledger: None }
    }

    /// Records one request for this slot at a receiver.
    pub fn arrived(&mut self, at: DateTime<Utc>, status: u16) {
        self.arrivals += 1;
        if self.first_arrival.is_none_or(|f| at < f) {
            self.first_arrival = Some(at);
        }
        if (200..300).contains(&status) {
            self.oks += 1;
            if self.first_ok_at.is_none_or(|f| at < f) {
                self.first_ok_at = Some(at);
            }
        }
    }

    pub fn lateness_ms(&self) -> Option<i64> {
        self.first_arrival.map(|a| (a - self.due).num_milliseconds())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    ByPolicy,
    FailedByRetryPolicy,
    NoFinalStatus,
    Lost,
}

/// What the run did that explains outcomes: when receiver B was down, when
/// a worker was killed.
#[derive(Clone, Debug, Default)]
pub struct Context {
    pub receiver_b_down: Vec<(DateTime<Utc>, DateTime<Utc>)>,
    pub worker_kills: Vec<DateTime<Utc>>,
}

impl Context {
    pub fn outcome(&self, s: &Slot) -> Outcome {
        if s.oks > 0 {
            return Outcome::Delivered;
        }
        let Some(row) = &s.ledger else { return Outcome::Lost };
        match row.status.as_str() {
            "pending" | "running" | "retrying" => Outcome::NoFinalStatus,
            "skipped" | "missed" => Outcome::ByPolicy,
            "failed" if s.on_b && self.b_down_within(s.due, s.due + TimeDelta::hours(1)) => {
                Outcome::FailedByRetryPolicy
            }
            _ => Outcome::Lost,
        }
    }

    fn b_down_within(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        self.receiver_b_down.iter().any(|(a, b)| *a < to && *b > from)
    }

    /// Extra 2xx deliveries of `s`: (duplicates, crash redeliveries).
    pub fn extra_deliveries(&self, s: &Slot) -> (u32, u32) {
        let extra = s.oks.saturating_sub(1);
        if extra == 0 {
            return (0, 0);
        }
        let crash = s.ledger.as_ref().is_some_and(|r| r.crash_redelivery)
            && s.first_ok_at
                .is_some_and(|ok| self.worker_kills.iter().any(|k| *k >= ok && *k - ok <= TimeDelta::seconds(60)));
        if crash { (0, extra) } else { (extra, 0) }
    }
}

/// The figures of the slots of one window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Figures {
    pub due: usize,
    pub delivered: usize,
    pub missed_by_policy: usize,
    pub failed_by_retry_policy: usize,
    pub lost: usize,
    pub no_final_status: usize,
    /// 2xx deliveries beyond a slot's first that no worker crash explains.
    pub duplicated: usize,
    /// 2xx deliveries beyond the first after a worker was killed mid-delivery.
    pub crash_redeliveries: usize,
    /// Slots with a request answered other than 2xx (retried or refused).
    pub refused_once: usize,
    /// Delivered slots whose ledger row does not say `succeeded`.
    pub ledger_disagrees: usize,
    /// Final ledger status (and reason, for rows decided without a delivery).
    pub ledger: BTreeMap<String, usize>,
    /// Lateness of the first request of the slots the window's lateness covers.
    pub lateness: Option<Percentiles>,
    /// The earliest first request relative to its due instant (negative: early).
    pub earliest_ms: Option<i64>,
    /// Slots whose first request reached a receiver a millisecond or more
    /// before their due instant. The corrected clock never runs ahead of the
    /// database's (this machine's, the receivers' too), so any is a bug.
    pub early: usize,
    pub lost_examples: Vec<String>,
    pub duplicated_examples: Vec<String>,
    pub no_final_examples: Vec<String>,
    pub early_examples: Vec<String>,
}

impl Figures {
    /// `slots` with their execution ids; `lateness_of` says which slots the
    /// lateness percentiles cover (the earliest request covers all).
    pub fn of<'a>(
        ctx: &Context,
        slots: impl IntoIterator<Item = (&'a str, &'a Slot)>,
        lateness_of: impl Fn(&Slot) -> bool,
    ) -> Self {
        let mut f = Figures::default();
        let mut late = Vec::new();
        for (id, s) in slots {
            f.due += 1;
            let example = |v: &mut Vec<String>| {
                if v.len() < 5 {
                    v.push(id.to_owned());
                }
            };
            match ctx.outcome(s) {
                Outcome::Delivered => f.delivered += 1,
                Outcome::ByPolicy => f.missed_by_policy += 1,
                Outcome::FailedByRetryPolicy => f.failed_by_retry_policy += 1,
                Outcome::NoFinalStatus => {
                    f.no_final_status += 1;
                    example(&mut f.no_final_examples);
                }
                Outcome::Lost => {
                    f.lost += 1;
                    example(&mut f.lost_examples);
                }
            }
            let (dup, crash) = ctx.extra_deliveries(s);
            f.duplicated += dup as usize;
            f.crash_redeliveries += crash as usize;
            if dup > 0 {
                example(&mut f.duplicated_examples);
            }
            if s.arrivals > s.oks {
                f.refused_once += 1;
            }
            // A reason's detail after the colon names the row's own slot
            // ("coalesced into <instant>"): the kind alone is counted.
            let key = match &s.ledger {
                None => "no ledger row".to_owned(),
                Some(r) => match (&r.reason, r.status.as_str()) {
                    (Some(reason), "skipped" | "missed" | "failed") => {
                        format!("{} ({})", r.status, reason.split(':').next().unwrap_or_default().trim())
                    }
                    _ => r.status.clone(),
                },
            };
            if s.oks > 0 && s.ledger.as_ref().is_none_or(|r| r.status != "succeeded") {
                f.ledger_disagrees += 1;
            }
            *f.ledger.entry(key).or_default() += 1;
            if let Some(l) = s.lateness_ms() {
                f.earliest_ms = Some(f.earliest_ms.map_or(l, |e| e.min(l)));
                if l < 0 {
                    f.early += 1;
                    example(&mut f.early_examples);
                }
                if lateness_of(s) {
                    late.push(l);
                }
            }
        }
        f.lateness = Percentiles::of(late);
        f
    }

    /// Slots that break the run's promises: duplicated, lost, without a
    /// final status, or delivered before their due instant.
    pub fn violations(&self) -> usize {
        self.duplicated + self.lost + self.no_final_status + self.early
    }

    /// The ledger's verdict in one cell: `succeeded 9,950 · skipped (misfire) 50`.
    pub fn ledger_cell(&self) -> String {
        self.ledger
            .iter()
            .map(|(k, v)| format!("{k} {}", crate::report::fmt_int(*v as i64)))
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// Time to recover: the seconds (of scheduled time, counted from the end of
/// the fault `end`) until the first whole second from which every second's
/// p99 lateness up to `until` is at most `threshold_ms`. A slot with no
/// request yet counts as infinitely late; a second with no slot is skipped.
/// `Some(0)` when no second after the fault was over; `None` when the last
/// second still was (not recovered within the observation).
pub fn recovery_secs(
    slots: impl IntoIterator<Item = (DateTime<Utc>, Option<i64>)>,
    end: DateTime<Utc>,
    until: DateTime<Utc>,
    threshold_ms: i64,
) -> Option<i64> {
    let mut seconds: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for (due, late) in slots {
        if due >= end && due < until {
            seconds.entry((due - end).num_milliseconds().div_euclid(1000)).or_default().push(late.unwrap_or(i64::MAX));
        }
    }
    let last = *seconds.keys().next_back()?;
    let last_bad = seconds
        .into_iter()
        .filter_map(|(k, mut v)| {
            v.sort_unstable();
            (crate::report::percentile(&v, 0.99) > threshold_ms).then_some(k)
        })
        .max();
    match last_bad {
        None => Some(0),
        Some(k) if k == last => None,
        Some(k) => Some(k + 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap() + TimeDelta::milliseconds(ms)
    }

    fn row(status: &str, crash: bool) -> Option<LedgerRow> {
        Some(LedgerRow { status: status.into(), reason: None, crash_redelivery: crash })
    }

    #[test]
    fn outcomes_follow_the_receiver_then_the_ledger() {
        let ctx = Context { receiver_b_down: vec![(at(10_000), at(20_000))], worker_kills: vec![at(5_000)] };
        let mut s = Slot::new(at(0), false);
        s.arrived(at(30), 500);
        assert_eq!(s.lateness_ms(), Some(30));
        s.ledger = row("retrying", false);
        assert_eq!(ctx.outcome(&s), Outcome::NoFinalStatus);
        s.arrived(at(30_030), 200);
        assert_eq!(ctx.outcome(&s), Outcome::Delivered);
        assert_eq!(s.lateness_ms(), Some(30), "lateness is the first request's");

        let mut policy = Slot::new(at(0), false);
        policy.ledger = row("skipped", false);
        assert_eq!(ctx.outcome(&policy), Outcome::ByPolicy);
        let mut failed_a = Slot::new(at(0), false);
        failed_a.ledger = row("failed", false);
        assert_eq!(ctx.outcome(&failed_a), Outcome::Lost, "receiver A was never down");
        let mut failed_b = Slot::new(at(0), true);
        failed_b.ledger = row("failed", false);
        assert_eq!(ctx.outcome(&failed_b), Outcome::FailedByRetryPolicy);
        let mut ghost = Slot::new(at(0), false);
        ghost.ledger = row("succeeded", false);
        assert_eq!(ctx.outcome(&ghost), Outcome::Lost, "succeeded but never answered 2xx");
        assert_eq!(ctx.outcome(&Slot::new(at(0), false)), Outcome::Lost, "no ledger row");
    }

    #[test]
    fn a_second_delivery_is_a_crash_redelivery_only_near_a_worker_kill() {
        let ctx = Context { receiver_b_down: Vec::new(), worker_kills: vec![at(5_000)] };
        let twice = |first_ok: i64, crash: bool| {
            let mut s = Slot::new(at(0), false);
            s.arrived(at(first_ok), 200);
            s.arrived(at(first_ok + 7_000), 200);
            s.ledger = row("succeeded", crash);
            ctx.extra_deliveries(&s)
        };
        assert_eq!(twice(4_900, true), (0, 1));
        assert_eq!(twice(4_900, false), (1, 0), "the ledger shows no takeover");
        assert_eq!(twice(5_100, true), (1, 0), "answered after the kill");
        assert_eq!(twice(-70_000, true), (1, 0), "answered long before the kill");
    }

    #[test]
    fn figures_count_and_recovery_follows_the_definition() {
        let ctx = Context::default();
        let mut slots = Vec::new();
        for i in 0..10 {
            let mut s = Slot::new(at(i * 100), false);
            s.arrived(at(i * 100 + 20 - i), 200);
            s.ledger = row("succeeded", false);
            slots.push((format!("id-{i}"), s));
        }
        slots[3].1.arrived(at(999), 200);
        for i in [8, 9] {
            slots[i].1 = Slot::new(at(i as i64 * 100), false);
            slots[i].1.ledger = Some(LedgerRow {
                status: "skipped".into(),
                reason: Some(format!("misfire policy fire_once: coalesced into 2026-11-25T17:35:0{i}.000Z")),
                crash_redelivery: false,
            });
        }
        let f = Figures::of(&ctx, slots.iter().map(|(id, s)| (id.as_str(), s)), |_| true);
        assert_eq!((f.due, f.delivered, f.missed_by_policy, f.duplicated, f.violations()), (10, 8, 2, 1, 1));
        assert_eq!(f.earliest_ms, Some(13));
        assert_eq!(f.ledger_cell(), "skipped (misfire policy fire_once) 2 · succeeded 8");
        // A first request before its due instant breaks a promise too;
        // one within the same millisecond does not count (arrivals are
        // compared in whole milliseconds).
        let mut early = Slot::new(at(2_000), false);
        early.arrived(at(1_999), 200);
        early.ledger = row("succeeded", false);
        let mut same_ms = Slot::new(at(3_000), false);
        same_ms.arrived(at(3_000) - TimeDelta::microseconds(400), 200);
        same_ms.ledger = row("succeeded", false);
        let f = Figures::of(&ctx, [("early", &early), ("same-ms", &same_ms)], |_| true);
        assert_eq!((f.early, f.violations(), f.earliest_ms), (1, 1, Some(-1)));
        assert_eq!(f.early_examples, ["early"]);

        // Seconds 0 and 1 bad, 2 and 3 good: recovered 2 s after the end.
        let lat = |s: i64, l: Option<i64>| (at(s * 1000 + 500), l);
        let series = [lat(0, None), lat(1, Some(5_000)), lat(2, Some(50)), lat(3, Some(60))];
        assert_eq!(recovery_secs(series, at(0), at(4_000), 100), Some(2));
        assert_eq!(recovery_secs([lat(0, Some(5)), lat(1, Some(9))], at(0), at(4_000), 100), Some(0));
        assert_eq!(recovery_secs([lat(0, Some(5)), lat(1, None)], at(0), at(4_000), 100), None);
        assert_eq!(recovery_secs([], at(0), at(4_000), 100), None);
    }
}
