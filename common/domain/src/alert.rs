//! Alert rules: the conditions a rule watches a job for, and the pure
//! judgment of a job's newly final slots against one ([`judge`]). The
//! cluster evaluates rules itself (the scheduler's alert loop, in one
//! transaction per rule: `store::alerts`); this module decides, from the
//! state carried between evaluations and the slots since, whether an
//! incident opens, stays open or resolves.
//!
//! Slots are judged in the order they were due, each once its outcome is
//! final (succeeded, failed, skipped, missed): a slot still retrying holds
//! back the judgment of later ones, so "N consecutive failures" counts
//! slots in schedule order, not in the order their retries ended.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

use crate::slot::{Status, reason};

/// What a rule fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// An execution failed (every attempt spent, or failed at once).
    Failed,
    /// `threshold` executions in a row failed.
    ConsecutiveFailures,
    /// A slot was missed or skipped by its job's misfire policy (an outage
    /// of the schedulers, workers that fell behind), skipped because the
    /// previous execution was still running (overlap), or not fired because
    /// its calendar could not be read.
    Missed,
    /// A slot's first attempt started more than `threshold` ms after it was due.
    Late,
    /// No execution succeeded within `threshold` ms (a dead man's switch):
    /// fires for a job that stopped firing, is paused, or fails silently.
    Silent,
}

impl Condition {
    pub const ALL: [Condition; 5] =
        [Condition::Failed, Condition::ConsecutiveFailures, Condition::Missed, Condition::Late, Condition::Silent];

    pub const fn as_str(self) -> &'static str {
        match self {
            Condition::Failed => "failed",
            Condition::ConsecutiveFailures => "consecutive_failures",
            Condition::Missed => "missed",
            Condition::Late => "late",
            Condition::Silent => "silent",
        }
    }

    pub fn parse(s: &str) -> Option<Condition> {
        Condition::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// What `threshold` means for the condition, and its bounds; `None`
    /// when the condition takes none.
    pub fn threshold_bounds(self) -> Option<(&'static str, i64, i64)> {
        match self {
            Condition::Failed | Condition::Missed => None,
            Condition::ConsecutiveFailures => Some(("failures in a row", 2, 1_000)),
            Condition::Late => Some(("milliseconds late", 1, 24 * 3600 * 1000)),
            Condition::Silent => Some(("milliseconds without a success", 1_000, 90 * 24 * 3600 * 1000)),
        }
    }

    /// Checks a rule's `threshold` for the condition.
    pub fn check_threshold(self, threshold: Option<i64>) -> Result<(), String> {
        match (self.threshold_bounds(), threshold) {
            (None, None) => Ok(()),
            (None, Some(_)) => Err(format!("takes no threshold for condition {}", self.as_str())),
            (Some((what, _, _)), None) => Err(format!("is required for condition {} ({what})", self.as_str())),
            (Some((what, min, max)), Some(t)) if !(min..=max).contains(&t) => {
                Err(format!("must be from {min} to {max} ({what}) for condition {}", self.as_str()))
            }
            _ => Ok(()),
        }
    }
}

/// A final slot as the judgment reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgedSlot {
    pub scheduled_at: DateTime<Utc>,
    pub execution_id: String,
    pub status: Status,
    pub reason: Option<String>,
    pub error: Option<String>,
    pub http_status: Option<i32>,
    pub finished_at: Option<DateTime<Utc>>,
    /// First attempt's start against its due instant (attempted slots).
    pub lateness_ms: Option<i64>,
}

impl JudgedSlot {
    /// Whether its outcome is settled: nothing will change it unless an
    /// operator replays it.
    pub fn is_final(&self) -> bool {
        self.status.is_final()
    }

    fn is_missed(&self) -> bool {
        let reason = self.reason.as_deref().unwrap_or_default();
        self.status == Status::Missed
            || (self.status == Status::Skipped
                && (reason == reason::OVERLAP
                    || reason.starts_with(reason::MISFIRE_PREFIX)
                    || reason.starts_with(reason::CALENDAR_UNAVAILABLE_PREFIX)))
    }
}

/// What a rule carries for a job between evaluations.
#[derive(Debug, Clone, PartialEq)]
pub struct JobWatch {
    /// Since when the rule watches the job (its silent window starts here).
    pub watching_since: DateTime<Utc>,
    /// Slots due at or before this are judged.
    pub judged_through: DateTime<Utc>,
    pub consecutive_failures: i32,
    pub last_success_at: Option<DateTime<Utc>>,
}

/// The outcome of one judgment.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Nothing to tell.
    Quiet,
    /// The condition holds and no incident is open: open one.
    Open { summary: String, slots: Vec<JudgedSlot> },
    /// It still holds: these slots join the open incident (no new notice).
    Continue { slots: Vec<JudgedSlot> },
    /// It no longer holds: resolve the open incident.
    Resolve { resolution: String },
}

/// Slots an incident keeps (the first ones).
pub const INCIDENT_SLOTS_MAX: usize = 20;

/// Judges `slots` (due after `watch.judged_through`, oldest first, final or
/// not) for a rule of `condition` and `threshold`, with an incident open or
/// not, at `now`. Returns the watch to carry and the verdict.
pub fn judge(
    condition: Condition,
    threshold: Option<i64>,
    mut watch: JobWatch,
    slots: &[JudgedSlot],
    open: bool,
    now: DateTime<Utc>,
) -> (JobWatch, Verdict) {
    let threshold = threshold.unwrap_or(1);
    // Successes count for a silent rule in any order; everything else is
    // judged through the final prefix only.
    for s in slots.iter().filter(|s| s.status == Status::Succeeded) {
        let at = s.finished_at.unwrap_or(s.scheduled_at);
        watch.last_success_at = Some(watch.last_success_at.map_or(at, |l| l.max(at)));
    }
    let judged: Vec<&JudgedSlot> = slots.iter().take_while(|s| s.is_final()).collect();
    if condition == Condition::Silent {
        if let Some(last) = judged.last() {
            watch.judged_through = last.scheduled_at;
        }
        let since = watch.last_success_at.unwrap_or(watch.watching_since).max(watch.watching_since);
        let window = TimeDelta::milliseconds(threshold);
        let silent = now - since > window;
        let verdict = match (silent, open) {
            (true, false) => Verdict::Open {
                summary: match watch.last_success_at {
                    Some(at) => format!(
                        "no execution succeeded for {} (last success {}; window {})",
                        human(now - at),
                        at.format("%Y-%m-%dT%H:%M:%SZ"),
                        human(window)
                    ),
                    None => {
                        format!("no execution succeeded in the {} since the rule began watching the job", human(window))
                    }
                },
                slots: Vec::new(),
            },
            (false, true) => Verdict::Resolve {
                resolution: format!("an execution succeeded at {}", since.format("%Y-%m-%dT%H:%M:%SZ")),
            },
            _ => Verdict::Quiet,
        };
        return (watch, verdict);
    }
    // Walk the final slots up to the first change of state: at most one
    // transition per judgment, so an incident that opens and clears within
    // one batch of slots is told opened now and resolved at the next
    // evaluation, in that order, neither lost.
    let mut continued = Vec::new();
    for s in judged {
        let (bad, good) = match condition {
            Condition::Failed => (s.status == Status::Failed, s.status == Status::Succeeded),
            Condition::ConsecutiveFailures => {
                if s.status == Status::Failed {
                    watch.consecutive_failures += 1;
                } else if s.status == Status::Succeeded {
                    watch.consecutive_failures = 0;
                }
                (
                    s.status == Status::Failed && i64::from(watch.consecutive_failures) >= threshold,
                    s.status == Status::Succeeded,
                )
            }
            Condition::Missed => (s.is_missed(), s.status == Status::Succeeded),
            Condition::Late => match s.lateness_ms {
                Some(late) => (late > threshold, late <= threshold),
                None => (false, false),
            },
            Condition::Silent => unreachable!("judged above"),
        };
        watch.judged_through = s.scheduled_at;
        if bad && !open {
            let summary = summary(condition, threshold, s, watch.consecutive_failures);
            return (watch, Verdict::Open { summary, slots: vec![s.clone()] });
        }
        if bad && continued.len() < INCIDENT_SLOTS_MAX {
            continued.push(s.clone());
        }
        if good && open {
            let how = match condition {
                Condition::Late => format!("started {} ms after it was due", s.lateness_ms.unwrap_or(0)),
                _ => "succeeded".to_owned(),
            };
            let resolution = format!("{} of {} {how}", s.execution_id, s.scheduled_at.format("%Y-%m-%dT%H:%M:%SZ"));
            return (watch, Verdict::Resolve { resolution });
        }
    }
    let verdict = if continued.is_empty() { Verdict::Quiet } else { Verdict::Continue { slots: continued } };
    (watch, verdict)
}

fn summary(condition: Condition, threshold: i64, s: &JudgedSlot, consecutive: i32) -> String {
    let what = match condition {
        Condition::Failed => "failed".to_owned(),
        Condition::ConsecutiveFailures => {
            format!("failed ({consecutive} in a row; the rule's threshold is {threshold})")
        }
        Condition::Missed => match s.reason.as_deref() {
            Some(r) => format!("was {} ({r})", s.status.as_str()),
            None => format!("was {}", s.status.as_str()),
        },
        Condition::Late => {
            format!(
                "started {} ms after it was due (the rule's threshold is {threshold} ms)",
                s.lateness_ms.unwrap_or(0)
            )
        }
        Condition::Silent => unreachable!("summarised above"),
    };
    let detail = match (s.http_status, s.error.as_deref()) {
        (_, Some(e)) if condition != Condition::Late => format!(": {e}"),
        (Some(code), None) if condition != Condition::Late => format!(": HTTP {code}"),
        _ => String::new(),
    };
    format!("{} of {} {what}{detail}", s.execution_id, s.scheduled_at.format("%Y-%m-%dT%H:%M:%SZ"))
}

/// A duration as people say it: 90 s, 12 min, 3 h, 2 d.
pub fn human(d: TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..=119 => format!("{s} s"),
        120..=7_199 => format!("{} min", s / 60),
        7_200..=172_799 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn slot(at: i64, status: Status) -> JudgedSlot {
        JudgedSlot {
            scheduled_at: t(at),
            execution_id: format!("job@{at}"),
            status,
            reason: None,
            error: None,
            http_status: None,
            finished_at: Some(t(at + 1)),
            lateness_ms: Some(0),
        }
    }

    fn watch() -> JobWatch {
        JobWatch { watching_since: t(0), judged_through: t(0), consecutive_failures: 0, last_success_at: None }
    }

    #[test]
    fn a_failure_opens_once_and_a_success_resolves() {
        let (w, v) =
            judge(Condition::Failed, None, watch(), &[slot(1, Status::Failed), slot(2, Status::Failed)], false, t(10));
        assert!(matches!(&v, Verdict::Open { slots, .. } if slots.len() == 1), "{v:?}");
        assert_eq!(w.judged_through, t(1), "judged up to the transition; the rest next time");
        let (w, v) =
            judge(Condition::Failed, None, w, &[slot(2, Status::Failed), slot(3, Status::Failed)], true, t(10));
        assert!(matches!(v, Verdict::Continue { .. }), "an open incident is not raised again: {v:?}");
        let (_, v) = judge(Condition::Failed, None, w, &[slot(3, Status::Succeeded)], true, t(10));
        assert!(matches!(v, Verdict::Resolve { .. }), "{v:?}");
    }

    #[test]
    fn a_slot_still_retrying_holds_back_the_later_ones() {
        let slots = [slot(1, Status::Retrying), slot(2, Status::Failed)];
        let (w, v) = judge(Condition::Failed, None, watch(), &slots, false, t(10));
        assert_eq!(v, Verdict::Quiet);
        assert_eq!(w.judged_through, t(0), "nothing judged past the slot not final");
    }

    #[test]
    fn consecutive_failures_count_in_schedule_order_and_reset_on_success() {
        let c = Condition::ConsecutiveFailures;
        let slots =
            [slot(1, Status::Failed), slot(2, Status::Succeeded), slot(3, Status::Failed), slot(4, Status::Failed)];
        let (w, v) = judge(c, Some(3), watch(), &slots, false, t(10));
        assert_eq!(v, Verdict::Quiet);
        assert_eq!(w.consecutive_failures, 2);
        let (w, v) = judge(c, Some(3), w, &[slot(5, Status::Failed)], false, t(10));
        assert!(matches!(v, Verdict::Open { .. }), "{v:?}");
        assert_eq!(w.consecutive_failures, 3);
    }

    #[test]
    fn silent_fires_after_its_window_without_a_success_and_resolves_on_one() {
        let c = Condition::Silent;
        let (w, v) = judge(c, Some(60_000), watch(), &[], false, t(30));
        assert_eq!(v, Verdict::Quiet, "still inside the window from when watching began");
        let (w, v) = judge(c, Some(60_000), w, &[slot(20, Status::Failed)], false, t(61));
        assert!(matches!(v, Verdict::Open { .. }), "{v:?}");
        let (w, v) = judge(c, Some(60_000), w, &[slot(70, Status::Succeeded)], true, t(75));
        assert!(matches!(v, Verdict::Resolve { .. }), "{v:?}");
        assert_eq!(w.last_success_at, Some(t(71)));
        let (_, v) = judge(c, Some(60_000), w, &[], false, t(100));
        assert_eq!(v, Verdict::Quiet);
    }

    #[test]
    fn missed_and_late_read_the_slot() {
        let mut overlap = slot(1, Status::Skipped);
        overlap.reason = Some(reason::OVERLAP.into());
        let mut paused = slot(2, Status::Skipped);
        paused.reason = Some("paused".into());
        let (_, v) = judge(Condition::Missed, None, watch(), &[paused.clone()], false, t(10));
        assert_eq!(v, Verdict::Quiet, "a paused slot is not a missed one");
        let (_, v) = judge(Condition::Missed, None, watch(), &[overlap], false, t(10));
        assert!(matches!(v, Verdict::Open { .. }));
        let mut misfire = slot(2, Status::Skipped);
        misfire.reason = Some(format!("{}skip", reason::MISFIRE_PREFIX));
        let (_, v) = judge(Condition::Missed, None, watch(), &[misfire], false, t(10));
        assert!(matches!(v, Verdict::Open { .. }), "a slot the misfire policy skipped is missed");
        let mut late = slot(3, Status::Succeeded);
        late.lateness_ms = Some(5_000);
        let (_, v) = judge(Condition::Late, Some(1_000), watch(), &[late], false, t(10));
        assert!(matches!(v, Verdict::Open { .. }));
        let (_, v) = judge(Condition::Late, Some(1_000), watch(), &[slot(4, Status::Succeeded)], true, t(10));
        assert!(matches!(v, Verdict::Resolve { .. }));
    }

    #[test]
    fn thresholds_are_checked_per_condition() {
        assert!(Condition::Failed.check_threshold(None).is_ok());
        assert!(Condition::Failed.check_threshold(Some(3)).is_err());
        assert!(Condition::ConsecutiveFailures.check_threshold(None).is_err());
        assert!(Condition::ConsecutiveFailures.check_threshold(Some(1)).is_err());
        assert!(Condition::Silent.check_threshold(Some(60_000)).is_ok());
    }
}
