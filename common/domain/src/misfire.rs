//! The misfire rule: what a job's misfire policy does with slots that start
//! later than the misfire threshold. One rule, wherever the slots waited:
//! the scheduler applies it to the slots an outage left unfired
//! ([`decide`]), the worker to a slot that reached it late ([`late_slot`]),
//! so how late a slot may start does not depend on where it waited.
//!
//! - `fire_once`: the latest late slot fires; the others are coalesced into
//!   it (a slot a later run has already covered is coalesced too).
//! - `skip`: no late slot fires.
//! - `fire_all`: the latest `misfire_cap` late slots fire, in order; older
//!   ones are missed.
//!
//! Pure: time and the schedule are passed in.

use std::collections::VecDeque;

use chrono::{DateTime, TimeDelta, Utc};

use crate::job::MisfirePolicy;
use crate::schedule::CompiledSchedule;

/// What the rule does with one late slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delivered (late, or on time).
    Fire,
    /// Recorded `skipped` (policy `skip`).
    Skip,
    /// Recorded `skipped`: a run of the job after it covers it (`fire_once`).
    Coalesce,
    /// Recorded `missed`: beyond `fire_all`'s cap.
    Miss,
}

/// Whether a slot starting `late` after its due instant is a misfire: the
/// threshold itself is still on time.
pub fn is_late(late: TimeDelta, threshold: TimeDelta) -> bool {
    late > threshold
}

/// A slot reaching a worker `late` after its due instant. Only a scheduled
/// slot's first attempt can misfire: a message without a policy (an
/// operator's run) and a replay (`retry_from > 0`) always fire.
/// `ran_since_due`: a run of the job started at or after this slot's due
/// instant, which covers it under `fire_once`.
pub fn late_slot(
    policy: Option<MisfirePolicy>,
    late: TimeDelta,
    threshold: TimeDelta,
    retry_from: u32,
    ran_since_due: bool,
) -> Verdict {
    let Some(policy) = policy else { return Verdict::Fire };
    if retry_from != 0 || !is_late(late, threshold) {
        return Verdict::Fire;
    }
    match policy {
        MisfirePolicy::Skip => Verdict::Skip,
        MisfirePolicy::FireOnce if ran_since_due => Verdict::Coalesce,
        MisfirePolicy::FireOnce | MisfirePolicy::FireAll => Verdict::Fire,
    }
}

/// How many of a series of late slots fire: the latest ones.
pub fn fired_of_series(policy: MisfirePolicy, cap: u32) -> usize {
    match policy {
        MisfirePolicy::Skip => 0,
        MisfirePolicy::FireOnce => 1,
        MisfirePolicy::FireAll => cap as usize,
    }
}

/// What the rule does with the slots of a series that do not fire.
pub fn unfired_of_series(policy: MisfirePolicy) -> Verdict {
    match policy {
        MisfirePolicy::Skip => Verdict::Skip,
        MisfirePolicy::FireOnce => Verdict::Coalesce,
        MisfirePolicy::FireAll => Verdict::Miss,
    }
}

#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// Slots to fire late, oldest first.
    pub fire: Vec<DateTime<Utc>>,
    /// The slots not fired: every missed slot before the ones fired.
    pub unfired: Option<Unfired>,
}

/// The consecutive slots of a series that do not fire.
#[derive(Debug, PartialEq)]
pub struct Unfired {
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
    pub slots: u64,
    pub verdict: Verdict,
}

/// Decides the missed slots in `(since, until]` as one series. Only the
/// slots the policy fires are kept while the schedule is walked, so a long
/// outage of a frequent job costs time, not memory.
pub fn decide(
    schedule: &CompiledSchedule,
    policy: MisfirePolicy,
    cap: u32,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Decision {
    let keep = fired_of_series(policy, cap);
    let mut latest: VecDeque<DateTime<Utc>> = VecDeque::with_capacity(keep.min(1024) + 1);
    let mut older: Option<(DateTime<Utc>, DateTime<Utc>, u64)> = None;
    let mut cursor = since;
    while let Some(slot) = schedule.next_after(cursor) {
        if slot > until {
            break;
        }
        latest.push_back(slot);
        if latest.len() > keep
            && let Some(oldest) = latest.pop_front()
        {
            let run = older.get_or_insert((oldest, oldest, 0));
            run.1 = oldest;
            run.2 += 1;
        }
        cursor = slot;
    }
    let verdict = unfired_of_series(policy);
    Decision { fire: latest.into(), unfired: older.map(|(first, last, slots)| Unfired { first, last, slots, verdict }) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy() -> impl Strategy<Value = Option<MisfirePolicy>> {
        prop_oneof![
            Just(None),
            Just(Some(MisfirePolicy::Skip)),
            Just(Some(MisfirePolicy::FireOnce)),
            Just(Some(MisfirePolicy::FireAll)),
        ]
    }

    proptest! {
        /// A lone late slot is decided as the series of that one slot would
        /// be: the worker and the scheduler agree.
        #[test]
        fn a_lone_late_slot_is_decided_as_a_series_of_one(
            policy in policy(), late_ms in -5_000i64..120_000, threshold_ms in 0i64..60_000,
            retry_from in 0u32..3, ran_since_due in any::<bool>(), cap in 1u32..5,
        ) {
            let verdict = late_slot(policy, TimeDelta::milliseconds(late_ms), TimeDelta::milliseconds(threshold_ms), retry_from, ran_since_due);
            let on_time = policy.is_none() || retry_from > 0 || late_ms <= threshold_ms;
            match policy {
                _ if on_time => prop_assert_eq!(verdict, Verdict::Fire),
                Some(p) if ran_since_due && p == MisfirePolicy::FireOnce => prop_assert_eq!(verdict, Verdict::Coalesce),
                Some(p) if fired_of_series(p, cap) >= 1 => prop_assert_eq!(verdict, Verdict::Fire),
                Some(p) => prop_assert_eq!(verdict, unfired_of_series(p)),
                None => unreachable!(),
            }
        }
    }

    #[test]
    fn the_threshold_itself_is_on_time() {
        let threshold = TimeDelta::seconds(30);
        let skip = Some(MisfirePolicy::Skip);
        assert_eq!(late_slot(skip, threshold, threshold, 0, false), Verdict::Fire);
        assert_eq!(late_slot(skip, threshold + TimeDelta::milliseconds(1), threshold, 0, false), Verdict::Skip);
    }
}
