//! Cron fire times across real tzdb DST transitions, as exact UTC instants.
//!
//! Rules under test, each against a brute-force reference over every wall
//! minute: a repeated wall time fires at its first occurrence (the default),
//! its second or both, as the schedule's DST rule says; a skipped wall time
//! fires at the end of the gap (the default) or not at all; fires strictly
//! increase.

use std::sync::LazyLock;

use chrono::{DateTime, Datelike, LocalResult, NaiveDateTime, Offset, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use domain::schedule::{CompiledSchedule, CronSchedule, DstRule, Missing, Recurrence, Repeated};
use proptest::prelude::*;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().to_utc()
}

fn offset(tz: Tz, t: DateTime<Utc>) -> i32 {
    t.with_timezone(&tz).offset().fix().local_minus_utc()
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Transition {
    at: DateTime<Utc>,
    before: i32,
    after: i32,
}

impl Transition {
    fn is_gap(&self) -> bool {
        self.after > self.before
    }
    /// Wall-clock span [start, end) the transition skips or repeats.
    fn wall_span(&self) -> (NaiveDateTime, NaiveDateTime) {
        let a = self.at.naive_utc() + TimeDelta::seconds(self.before.into());
        let b = self.at.naive_utc() + TimeDelta::seconds(self.after.into());
        (a.min(b), a.max(b))
    }
}

/// Offset changes in [from, to), read from chrono-tz by sampling every 6h
/// and bisecting to the second (transitions are months apart).
fn transitions(tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<Transition> {
    let step = TimeDelta::hours(6);
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let (before, after) = (offset(tz, t), offset(tz, t + step));
        if before != after {
            let (mut lo, mut hi) = (t.timestamp(), (t + step).timestamp());
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if offset(tz, DateTime::from_timestamp(mid, 0).unwrap()) == before {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            let at = DateTime::from_timestamp(hi, 0).unwrap();
            out.push(Transition { at, before, after });
        }
        t += step;
    }
    out
}

/// Northern and southern hemisphere, hour and half-hour shifts, and
/// Santiago's transitions at midnight (its gap and its repeated hour cross
/// the day boundary).
const ZONES: [Tz; 5] =
    [Tz::America__New_York, Tz::Europe__Berlin, Tz::Australia__Lord_Howe, Tz::America__Santiago, Tz::Australia__Sydney];

/// Every DST rule.
const RULES: [DstRule; 6] = [
    DstRule { repeated: Repeated::First, missing: Missing::Shift },
    DstRule { repeated: Repeated::Last, missing: Missing::Shift },
    DstRule { repeated: Repeated::Both, missing: Missing::Shift },
    DstRule { repeated: Repeated::First, missing: Missing::Skip },
    DstRule { repeated: Repeated::Last, missing: Missing::Skip },
    DstRule { repeated: Repeated::Both, missing: Missing::Skip },
];

/// Every transition of ZONES in 2020..=2035.
static ALL_TRANSITIONS: LazyLock<Vec<(Tz, Vec<Transition>)>> = LazyLock::new(|| {
    ZONES
        .iter()
        .map(|&tz| {
            let found = transitions(tz, utc("2019-12-31T00:00:00Z"), utc("2036-01-02T00:00:00Z"));
            (tz, found)
        })
        .collect()
});

fn zone_transitions(tz: Tz) -> &'static [Transition] {
    &ALL_TRANSITIONS.iter().find(|(z, _)| *z == tz).unwrap().1
}

/// Fires in (from, to], by chaining next_after.
fn fires_between(s: &CronSchedule, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut out = Vec::new();
    let mut cursor = from;
    while let Some(t) = s.next_after(cursor) {
        assert!(t > cursor, "{t} not after {cursor}");
        if t > to {
            break;
        }
        out.push(t);
        cursor = t;
        assert!(out.len() < 100_000, "runaway");
    }
    out
}

fn times(list: &[&str]) -> Vec<DateTime<Utc>> {
    list.iter().map(|s| utc(s)).collect()
}

fn assert_transitions(tz: Tz, year: i32, want: &[Transition]) {
    let got: Vec<Transition> = zone_transitions(tz).iter().filter(|t| t.at.year() == year).copied().collect();
    assert_eq!(got, want, "{tz} transitions in {year}");
}

const EST: i32 = -5 * 3600;
const EDT: i32 = -4 * 3600;
const CET: i32 = 3600;
const CEST: i32 = 7200;
const LHST: i32 = 10 * 3600 + 1800;
const LHDT: i32 = 11 * 3600;

#[test]
fn new_york_2026_transitions_are_as_expected() {
    assert_transitions(
        Tz::America__New_York,
        2026,
        &[
            Transition { at: utc("2026-03-08T07:00:00Z"), before: EST, after: EDT },
            Transition { at: utc("2026-11-01T06:00:00Z"), before: EDT, after: EST },
        ],
    );
}

#[test]
fn new_york_spring_forward() {
    let s = CronSchedule::parse("30 2 * * *", "America/New_York").unwrap();
    assert_eq!(
        fires_between(&s, utc("2026-03-06T12:00:00Z"), utc("2026-03-10T00:00:00Z")),
        times(&[
            "2026-03-07T07:30:00Z", // 02:30 EST
            "2026-03-08T07:00:00Z", // 02:30 does not exist: gap end, 03:00 EDT
            "2026-03-09T06:30:00Z", // 02:30 EDT
        ])
    );

    let quarter = CronSchedule::parse("*/15 * * * *", "America/New_York").unwrap();
    assert_eq!(
        fires_between(&quarter, utc("2026-03-08T06:30:00Z"), utc("2026-03-08T07:30:00Z")),
        times(&[
            "2026-03-08T06:45:00Z", // 01:45 EST
            "2026-03-08T07:00:00Z", // 02:00..02:45 and 03:00 EDT, once
            "2026-03-08T07:15:00Z",
            "2026-03-08T07:30:00Z",
        ])
    );

    // 02:00 and 02:30 both map to the gap end and fire once.
    let both = CronSchedule::parse("0,30 2 * * *", "America/New_York").unwrap();
    assert_eq!(
        fires_between(&both, utc("2026-03-08T00:00:00Z"), utc("2026-03-09T12:00:00Z")),
        times(&["2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z", "2026-03-09T06:30:00Z",])
    );
    // Asked from exactly the gap end, the gap does not fire again.
    assert_eq!(s.next_after(utc("2026-03-08T07:00:00Z")), Some(utc("2026-03-09T06:30:00Z")));
}

#[test]
fn new_york_fall_back() {
    let s = CronSchedule::parse("30 1 * * *", "America/New_York").unwrap();
    assert_eq!(
        fires_between(&s, utc("2026-10-31T00:00:00Z"), utc("2026-11-02T12:00:00Z")),
        times(&[
            "2026-10-31T05:30:00Z", // 01:30 EDT
            "2026-11-01T05:30:00Z", // first 01:30 (EDT) only, not 06:30Z
            "2026-11-02T06:30:00Z", // 01:30 EST
        ])
    );
    // From inside the second 01:xx pass, the repeated 01:30 is already past.
    assert_eq!(s.next_after(utc("2026-11-01T06:10:00Z")), Some(utc("2026-11-02T06:30:00Z")));

    let quarter = CronSchedule::parse("*/15 * * * *", "America/New_York").unwrap();
    let got = fires_between(&quarter, utc("2026-11-01T04:50:00Z"), utc("2026-11-01T07:20:00Z"));
    assert_eq!(
        got,
        times(&[
            "2026-11-01T05:00:00Z", // 01:00 EDT
            "2026-11-01T05:15:00Z",
            "2026-11-01T05:30:00Z",
            "2026-11-01T05:45:00Z",
            "2026-11-01T07:00:00Z", // 02:00 EST; the EST 01:xx pass is silent
            "2026-11-01T07:15:00Z",
        ])
    );
    assert_eq!(quarter.next_after(utc("2026-11-01T06:20:00Z")), Some(utc("2026-11-01T07:00:00Z")));
}

#[test]
fn berlin_2026() {
    assert_transitions(
        Tz::Europe__Berlin,
        2026,
        &[
            Transition { at: utc("2026-03-29T01:00:00Z"), before: CET, after: CEST },
            Transition { at: utc("2026-10-25T01:00:00Z"), before: CEST, after: CET },
        ],
    );
    let half_two = CronSchedule::parse("30 2 * * *", "Europe/Berlin").unwrap();
    assert_eq!(
        fires_between(&half_two, utc("2026-03-27T12:00:00Z"), utc("2026-03-30T12:00:00Z")),
        times(&[
            "2026-03-28T01:30:00Z", // 02:30 CET
            "2026-03-29T01:00:00Z", // gap end, 03:00 CEST
            "2026-03-30T00:30:00Z", // 02:30 CEST
        ])
    );
    assert_eq!(
        fires_between(&half_two, utc("2026-10-24T12:00:00Z"), utc("2026-10-26T12:00:00Z")),
        times(&[
            "2026-10-25T00:30:00Z", // first 02:30 (CEST) only
            "2026-10-26T01:30:00Z", // 02:30 CET
        ])
    );

    let quarter = CronSchedule::parse("0 */15 * * * *", "Europe/Berlin").unwrap();
    assert_eq!(
        fires_between(&quarter, utc("2026-03-29T00:30:00Z"), utc("2026-03-29T01:30:00Z")),
        times(&[
            "2026-03-29T00:45:00Z", // 01:45 CET
            "2026-03-29T01:00:00Z", // 03:00 CEST, once
            "2026-03-29T01:15:00Z",
            "2026-03-29T01:30:00Z",
        ])
    );
    assert_eq!(
        fires_between(&quarter, utc("2026-10-24T23:50:00Z"), utc("2026-10-25T02:20:00Z")),
        times(&[
            "2026-10-25T00:00:00Z", // 02:00 CEST
            "2026-10-25T00:15:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-25T00:45:00Z",
            "2026-10-25T02:00:00Z", // 03:00 CET; the CET 02:xx pass is silent
            "2026-10-25T02:15:00Z",
        ])
    );
}

#[test]
fn lord_howe_half_hour_shifts_2026() {
    let tz = Tz::Australia__Lord_Howe;
    // Read from chrono-tz: DST ends Sun 5 Apr 02:00 -> 01:30, starts Sun 4 Oct 02:00 -> 02:30.
    let ends = Transition { at: utc("2026-04-04T15:00:00Z"), before: LHDT, after: LHST };
    let starts = Transition { at: utc("2026-10-03T15:30:00Z"), before: LHST, after: LHDT };
    assert_transitions(tz, 2026, &[ends, starts]);
    let wall = |s: &str| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M").unwrap();
    assert_eq!(ends.wall_span(), (wall("2026-04-05 01:30"), wall("2026-04-05 02:00")));
    assert_eq!(starts.wall_span(), (wall("2026-10-04 02:00"), wall("2026-10-04 02:30")));

    // Repeated half hour: 01:45 fires once, at its LHDT occurrence.
    let repeated = CronSchedule::parse("45 1 * * *", "Australia/Lord_Howe").unwrap();
    assert_eq!(
        fires_between(&repeated, utc("2026-04-03T12:00:00Z"), utc("2026-04-05T18:00:00Z")),
        times(&[
            "2026-04-03T14:45:00Z", // 01:45 LHDT
            "2026-04-04T14:45:00Z", // first 01:45 (LHDT), not 15:15Z
            "2026-04-05T15:15:00Z", // 01:45 LHST
        ])
    );

    // Gap: 02:15 does not exist on 4 Oct and fires at the gap end.
    let gap = CronSchedule::parse("15 2 * * *", "Australia/Lord_Howe").unwrap();
    assert_eq!(
        fires_between(&gap, utc("2026-10-02T12:00:00Z"), utc("2026-10-04T18:00:00Z")),
        times(&[
            "2026-10-02T15:45:00Z", // 02:15 LHST
            "2026-10-03T15:30:00Z", // gap end, 02:30 LHDT
            "2026-10-04T15:15:00Z", // 02:15 LHDT
        ])
    );

    let tens = CronSchedule::parse("*/10 * * * *", "Australia/Lord_Howe").unwrap();
    assert_eq!(
        fires_between(&tens, utc("2026-04-04T14:25:00Z"), utc("2026-04-04T15:40:00Z")),
        times(&[
            "2026-04-04T14:30:00Z", // 01:30 LHDT
            "2026-04-04T14:40:00Z",
            "2026-04-04T14:50:00Z",
            "2026-04-04T15:30:00Z", // 02:00 LHST; the second 01:3x-01:5x is silent
            "2026-04-04T15:40:00Z",
        ])
    );
    assert_eq!(
        fires_between(&tens, utc("2026-10-03T15:25:00Z"), utc("2026-10-03T15:50:00Z")),
        times(&[
            "2026-10-03T15:30:00Z", // 02:00, 02:10, 02:20 (gap) and 02:30 LHDT, once
            "2026-10-03T15:40:00Z",
            "2026-10-03T15:50:00Z",
        ])
    );
}

#[test]
fn compiled_window_across_gap() {
    let s = CompiledSchedule {
        recurrence: Recurrence::Cron(CronSchedule::parse("30 2 * * *", "America/New_York").unwrap()),
        start_at: Some(utc("2026-03-08T07:00:00Z")),
        end_at: Some(utc("2026-03-09T06:30:00Z")),
    };
    assert_eq!(s.upcoming(utc("2020-01-01T00:00:00Z"), 5), times(&["2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"]));
}

/// Minute/hour sets for a simple expression, checked independently of the
/// crate: `m h * * *`.
#[derive(Debug, Clone)]
struct Simple {
    expr: String,
    minutes: [bool; 60],
    hours: [bool; 24],
}

impl Simple {
    fn matches(&self, wall: NaiveDateTime) -> bool {
        wall.second() == 0 && self.minutes[wall.minute() as usize] && self.hours[wall.hour() as usize]
    }
}

fn simple(minute_step_or_list: Result<u32, Vec<u32>>, hours: Option<Vec<u32>>, six: bool) -> Simple {
    let mut minutes = [false; 60];
    let minute_text = match minute_step_or_list {
        Ok(step) => {
            (0..60).step_by(step as usize).for_each(|m| minutes[m] = true);
            format!("*/{step}")
        }
        Err(list) => {
            list.iter().for_each(|&m| minutes[m as usize] = true);
            list.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        }
    };
    let mut hour_set = [false; 24];
    let hour_text = match hours {
        None => {
            hour_set = [true; 24];
            "*".to_owned()
        }
        Some(list) => {
            list.iter().for_each(|&h| hour_set[h as usize] = true);
            list.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        }
    };
    let prefix = if six { "0 " } else { "" };
    Simple { expr: format!("{prefix}{minute_text} {hour_text} * * *"), minutes, hours: hour_set }
}

/// Brute force over every wall-clock minute, mapped by the stated rule.
fn reference(
    tz: Tz,
    transitions: &[Transition],
    spec: &Simple,
    rule: DstRule,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Vec<DateTime<Utc>> {
    let margin = TimeDelta::hours(3);
    let mut wall = (from.with_timezone(&tz).naive_local() - margin).with_second(0).unwrap().with_nanosecond(0).unwrap();
    let last = to.with_timezone(&tz).naive_local() + margin;
    let mut out = Vec::new();
    while wall <= last {
        if spec.matches(wall) {
            match tz.from_local_datetime(&wall) {
                LocalResult::Single(t) => out.push(t.to_utc()),
                LocalResult::Ambiguous(a, b) => {
                    let (first, last) = (a.to_utc().min(b.to_utc()), a.to_utc().max(b.to_utc()));
                    match rule.repeated {
                        Repeated::First => out.push(first),
                        Repeated::Last => out.push(last),
                        Repeated::Both => out.extend([first, last]),
                    }
                }
                LocalResult::None => {
                    let gap = transitions
                        .iter()
                        .find(|tr| {
                            let (start, end) = tr.wall_span();
                            tr.is_gap() && start <= wall && wall < end
                        })
                        .expect("a non-existent wall time lies in a known gap");
                    if rule.missing == Missing::Shift {
                        out.push(gap.at);
                    }
                }
            }
        }
        wall += TimeDelta::minutes(1);
    }
    out.retain(|t| *t > from && *t <= to);
    out.sort();
    out.dedup();
    out
}

fn check_window(tz: Tz, spec: &Simple, rule: DstRule, from: DateTime<Utc>, to: DateTime<Utc>) -> Result<(), String> {
    let transitions = zone_transitions(tz);
    let s = CronSchedule::parse_all(&[&spec.expr], tz.name(), rule).map_err(|e| e.to_string())?;
    let got = fires_between(&s, from, to);
    for pair in got.windows(2) {
        if pair[0] >= pair[1] {
            return Err(format!("not increasing: {pair:?}"));
        }
    }
    for t in &got {
        let wall = t.with_timezone(&tz).naive_local();
        let gap_end = transitions.iter().any(|tr| tr.is_gap() && tr.at == *t);
        if !(spec.matches(wall) || (gap_end && rule.missing == Missing::Shift)) {
            return Err(format!("{t} (local {wall}) neither matches nor ends a gap"));
        }
    }
    let want = reference(tz, transitions, spec, rule, from, to);
    if got != want {
        return Err(format!("{} in {tz}, {rule:?}, over ({from}, {to}]:\n got  {got:?}\n want {want:?}", spec.expr));
    }
    // The previous fire of each is the one before it (after `from`).
    let compiled = CompiledSchedule { recurrence: Recurrence::Cron(s), start_at: None, end_at: None };
    for pair in got.windows(2) {
        if compiled.prev_before(pair[1]) != Some(pair[0]) {
            return Err(format!("{} in {tz}, {rule:?}: prev_before({}) is not {}", spec.expr, pair[1], pair[0]));
        }
    }
    Ok(())
}

#[test]
fn every_transition_2020_2035_under_every_rule() {
    let specs = [
        simple(Ok(5), None, false),
        simple(Err(vec![0, 30]), None, false),
        simple(Err(vec![15, 45]), Some(vec![1, 2, 3]), true),
        simple(Err(vec![0, 30]), Some(vec![22, 23, 0, 1]), false),
    ];
    for (tz, list) in ALL_TRANSITIONS.iter() {
        // Two per year, every year.
        assert_eq!(list.len(), 32, "{tz}: {list:?}");
        for tr in list {
            for spec in &specs {
                for rule in RULES {
                    let from = tr.at - TimeDelta::hours(3);
                    let to = tr.at + TimeDelta::hours(3);
                    if let Err(e) = check_window(*tz, spec, rule, from, to) {
                        panic!("{e}");
                    }
                }
            }
        }
    }
}

fn spec_strategy() -> impl Strategy<Value = Simple> {
    let minutes = prop_oneof![
        prop::sample::select(vec![1u32, 5, 7, 10, 15, 20, 30]).prop_map(Ok),
        prop::collection::btree_set(0u32..60, 1..4).prop_map(|s| Err(s.into_iter().collect())),
    ];
    let hours = prop_oneof![
        Just(None),
        prop::collection::btree_set(0u32..5, 1..4).prop_map(|s| Some(s.into_iter().collect())),
        prop::collection::btree_set(prop::sample::select(vec![21u32, 22, 23, 0, 1]), 1..4)
            .prop_map(|s| Some(s.into_iter().collect())),
    ];
    (minutes, hours, any::<bool>()).prop_map(|(m, h, six)| simple(m, h, six))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn fires_follow_the_rule_around_transitions(
        zone in 0usize..ZONES.len(),
        pick in any::<prop::sample::Index>(),
        lead_min in 0i64..360,
        len_min in 1i64..720,
        spec in spec_strategy(),
        rule in prop::sample::select(&RULES[..]),
    ) {
        let (tz, list) = &ALL_TRANSITIONS[zone];
        let tr = pick.get(list);
        let from = tr.at - TimeDelta::minutes(lead_min) + TimeDelta::seconds(lead_min % 7 * 13);
        let to = from + TimeDelta::minutes(len_min);
        if let Err(e) = check_window(*tz, &spec, rule, from, to) {
            prop_assert!(false, "{}", e);
        }
    }

    #[test]
    fn fires_follow_the_rule_anywhere(
        zone in 0usize..ZONES.len(),
        start_s in 1_577_836_800i64..2_082_758_400, // 2020..2036
        len_min in 1i64..2_000,
        spec in spec_strategy(),
        rule in prop::sample::select(&RULES[..]),
    ) {
        let tz = ZONES[zone];
        let from = DateTime::from_timestamp(start_s, 0).unwrap();
        let to = from + TimeDelta::minutes(len_min);
        if let Err(e) = check_window(tz, &spec, rule, from, to) {
            prop_assert!(false, "{}", e);
        }
    }
}
