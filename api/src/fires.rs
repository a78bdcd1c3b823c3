//! Fire times as the API shows them (`GET /v1/jobs/{id}/next`,
//! `POST /v1/schedules/preview`): each slot with its wall time and UTC
//! offset in a cron schedule's zone, how DST bent it, and its jittered
//! delivery instant, and the calendar that excludes it, if any. The fire
//! times themselves come from `domain::schedule` (by the schedule's DST
//! rule: which occurrences of a repeated wall time fire, and whether a
//! skipped one fires at the end of the gap); this module only describes
//! them.

use chrono::{DateTime, LocalResult, Offset, SecondsFormat, TimeDelta, TimeZone, Utc};
use uuid::Uuid;

use domain::calendar::{Calendar, first_excluding};
use domain::schedule::{CompiledSchedule, CronSchedule, Missing, Recurrence, jitter_offset};

use crate::model::{DstMark, FireTime};

/// Whose jitter offsets to show.
#[derive(Debug, Clone, Copy)]
pub struct Jitter {
    pub job_id: Uuid,
    pub jitter_ms: u64,
}

/// Up to `count` fire times at or after `from` (a fire exactly at `from`
/// included). Instants after the year 9999 have no RFC 3339 form: the list
/// ends before them.
pub fn fire_times(
    schedule: &CompiledSchedule,
    from: DateTime<Utc>,
    count: usize,
    jitter: Option<Jitter>,
    calendars: &[Calendar],
) -> Vec<FireTime> {
    let after = from - TimeDelta::nanoseconds(1);
    let cron = match &schedule.recurrence {
        Recurrence::Cron(cron) => Some(cron),
        _ => None,
    };
    let last = DateTime::<Utc>::from_naive_utc_and_offset(
        chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
            .and_then(|d| d.and_hms_milli_opt(23, 59, 59, 999))
            .unwrap_or_default(),
        Utc,
    );
    schedule
        .upcoming(after, count)
        .into_iter()
        .map(|at| {
            let mut fire = FireTime {
                at,
                fires_at: None,
                local: None,
                offset: None,
                dst: None,
                dst_shift: false,
                excluded_by: first_excluding(calendars, at).map(str::to_owned),
            };
            if let Some(Jitter { job_id, jitter_ms }) = jitter.filter(|j| j.jitter_ms > 0) {
                fire.fires_at = Some(at + jitter_offset(job_id, at, jitter_ms));
            }
            if let Some(cron) = cron {
                describe(&mut fire, cron);
            }
            fire
        })
        .take_while(|fire| fire.fires_at.unwrap_or(fire.at) <= last)
        .collect()
}

/// Local time, offset and DST marks of a fire of `cron` at `fire.at`.
fn describe(fire: &mut FireTime, cron: &CronSchedule) {
    let (at, tz) = (fire.at, cron.timezone());
    let local = at.with_timezone(&tz);
    let before = (at - TimeDelta::milliseconds(1)).with_timezone(&tz);
    let (offset, offset_before) = (local.offset().fix(), before.offset().fix());
    fire.local = Some(local.to_rfc3339_opts(SecondsFormat::Millis, false));
    fire.offset = Some(offset.to_string());
    fire.dst_shift = offset != offset_before;
    // The clocks went forward at this very instant: wall times after the
    // one a millisecond before and before this one's did not exist, and a
    // fire the expressions name among them is moved here (unless the rule
    // skips them).
    if offset.local_minus_utc() > offset_before.local_minus_utc() && cron.dst().missing == Missing::Shift {
        let skipped_from = before.naive_local();
        let skipped_to = local.naive_local();
        if cron.next_wall_time(skipped_from).is_some_and(|w| w < skipped_to) {
            fire.dst = Some(DstMark::Gap);
            return;
        }
    }
    // A wall time that occurs twice: the rule says at which occurrences it
    // fires, and this is one of them (its offset tells which).
    if matches!(tz.from_local_datetime(&local.naive_local()), LocalResult::Ambiguous(..)) {
        fire.dst = Some(DstMark::Overlap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cron(expr: &str, tz: &str) -> CompiledSchedule {
        CompiledSchedule {
            recurrence: Recurrence::Cron(CronSchedule::parse(expr, tz).unwrap()),
            start_at: None,
            end_at: None,
        }
    }

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_gap_fire_and_an_overlap_fire_are_marked_and_plain_ones_are_not() {
        // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST at 01:00Z.
        let fires = fire_times(&cron("30 2 * * *", "Europe/Berlin"), t("2026-03-28T00:00:00Z"), 3, None, &[]);
        let at: Vec<_> = fires.iter().map(|f| (f.at, f.dst, f.offset.clone().unwrap())).collect();
        assert_eq!(
            at,
            [
                (t("2026-03-28T01:30:00Z"), None, "+01:00".to_owned()),
                (t("2026-03-29T01:00:00Z"), Some(DstMark::Gap), "+02:00".to_owned()),
                (t("2026-03-30T00:30:00Z"), None, "+02:00".to_owned()),
            ]
        );
        assert_eq!(fires[1].local.as_deref(), Some("2026-03-29T03:00:00.000+02:00"));
        // 03:00 itself exists: at the transition instant, but not moved.
        let three = fire_times(&cron("0 3 * * *", "Europe/Berlin"), t("2026-03-29T00:00:00Z"), 1, None, &[]);
        assert_eq!((three[0].at, three[0].dst, three[0].dst_shift), (t("2026-03-29T01:00:00Z"), None, true));

        // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00Z, so
        // 02:00-03:00 happens twice; 02:30 fires at its first occurrence.
        let fires = fire_times(&cron("30 2 * * *", "Europe/Berlin"), t("2026-10-24T00:00:00Z"), 3, None, &[]);
        let at: Vec<_> = fires.iter().map(|f| (f.at, f.dst)).collect();
        assert_eq!(
            at,
            [
                (t("2026-10-24T00:30:00Z"), None),
                (t("2026-10-25T00:30:00Z"), Some(DstMark::Overlap)),
                (t("2026-10-26T01:30:00Z"), None),
            ]
        );
        assert_eq!(fires[1].local.as_deref(), Some("2026-10-25T02:30:00.000+02:00"));
    }

    #[test]
    fn from_is_inclusive_and_jitter_moves_only_the_delivery() {
        let s = cron("0 * * * *", "UTC");
        let from = t("2026-05-01T10:00:00Z");
        let job_id = Uuid::from_u128(7);
        let fires = fire_times(&s, from, 2, Some(Jitter { job_id, jitter_ms: 60_000 }), &[]);
        assert_eq!(fires[0].at, from);
        assert_eq!(fires[1].at, t("2026-05-01T11:00:00Z"));
        for f in &fires {
            assert_eq!(f.fires_at, Some(f.at + jitter_offset(job_id, f.at, 60_000)));
            assert!(f.fires_at.unwrap() - f.at < TimeDelta::minutes(1));
        }
        assert!(fire_times(&s, from, 1, Some(Jitter { job_id, jitter_ms: 0 }), &[])[0].fires_at.is_none());
        // The year 10000 has no RFC 3339 form.
        let hourly = CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: 3_600_000, anchor: DateTime::UNIX_EPOCH },
            start_at: None,
            end_at: None,
        };
        let end = fire_times(&hourly, t("9999-12-31T22:00:00Z"), 5, None, &[]);
        assert_eq!(
            end.iter().map(|f| f.at).collect::<Vec<_>>(),
            [t("9999-12-31T22:00:00Z"), t("9999-12-31T23:00:00Z")]
        );
    }
}
