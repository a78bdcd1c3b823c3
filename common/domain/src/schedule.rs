//! Fire-time math for the three schedule kinds: once, fixed interval and cron
//! in an IANA time zone.
//!
//! Everything here is pure: the current time is always an argument. Instants
//! are `DateTime<Utc>` at millisecond precision; schedule inputs (`at`,
//! `anchor`, `start_at`, `end_at`) are truncated to whole milliseconds.
//!
//! Cron expressions are matched against local wall-clock time and mapped to
//! instants by the schedule's [`DstRule`]: by default a wall time that occurs
//! twice fires only at its first occurrence, and a wall time that does not
//! exist fires at the end of the gap. Fire times are always strictly
//! increasing.
//!
//! The expressions are evaluated here, over bit sets of each field, rather
//! than by the `cron` crate (which only parses the plain fields): the crate
//! knows neither `L`, `W` nor `#`, and a day predicate on top of its
//! iterator would walk every minute of a day that does not match.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use chrono::{DateTime, Datelike, LocalResult, NaiveDate, NaiveDateTime, TimeDelta, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

/// How many matching wall times one `next_after` call may pass over before
/// giving up. Each scan starts where its answer can begin (see
/// [`CronSchedule::scan_start`]) and jumps over a skipped gap in one step,
/// so a call passes over a handful at most; the bound only stops a zone
/// whose transitions would defeat that.
const MAX_SKIPPED_CANDIDATES: usize = 10_000;

/// The calendar cron fire times are looked for in: the one of the `cron`
/// crate these schedules were first evaluated by, kept so that no fire time
/// moved when the evaluation came here.
const FIRST_YEAR: i32 = 1970;
const LAST_YEAR: i32 = 2100;

/// A schedule that cannot be compiled. `field` names the offending key of the
/// schedule object (`expr`, `exprs`, `timezone`, `every_ms`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ScheduleError {
    pub field: &'static str,
    pub message: String,
}

impl ScheduleError {
    fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self { field, message: message.into() }
    }

    fn expr(message: impl Into<String>) -> Self {
        Self::new("expr", message)
    }
}

/// Parses an IANA time zone name such as `Europe/Berlin` or `UTC`.
pub fn parse_timezone(name: &str) -> Result<Tz, ScheduleError> {
    name.parse::<Tz>().map_err(|_| ScheduleError::new("timezone", format!("unknown IANA time zone {name:?}")))
}

/// Truncates an instant to whole milliseconds.
pub fn truncate_to_millis(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(t.timestamp_millis()).unwrap_or(t)
}

/// What a cron schedule does with the wall times a daylight saving time
/// transition repeats or skips (`schedule.dst`). The default is the rule
/// every cron schedule had before it could be chosen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DstRule {
    #[serde(default)]
    pub repeated: Repeated,
    #[serde(default)]
    pub missing: Missing,
}

impl DstRule {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The rule in words, for explanations.
    pub fn describe(&self) -> String {
        let repeated = match self.repeated {
            Repeated::First => "a repeated wall time fires at its first occurrence",
            Repeated::Last => "a repeated wall time fires at its second occurrence",
            Repeated::Both => "a repeated wall time fires at both occurrences",
        };
        let missing = match self.missing {
            Missing::Skip => "a skipped wall time does not fire",
            Missing::Shift => "a skipped wall time fires at the end of the gap",
        };
        format!("{repeated}; {missing}")
    }
}

/// A wall time that occurs twice (the clocks go back).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Repeated {
    /// Fires at its first occurrence only.
    #[default]
    First,
    /// Fires at its second occurrence only.
    Last,
    /// Fires at each occurrence.
    Both,
}

impl Repeated {
    pub const NAMES: &str = "first, last, both";

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "first" => Some(Self::First),
            "last" => Some(Self::Last),
            "both" => Some(Self::Both),
            _ => None,
        }
    }
}

/// A wall time that does not exist (the clocks go forward).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Missing {
    /// Does not fire.
    Skip,
    /// Fires at the end of the gap, once however many such wall times fall in it.
    #[default]
    Shift,
}

impl Missing {
    pub const NAMES: &str = "skip, shift";

    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "skip" => Some(Self::Skip),
            "shift" => Some(Self::Shift),
            _ => None,
        }
    }
}

/// One or more cron expressions bound to a time zone and a [`DstRule`]; it
/// fires at the union of their wall times, once where they coincide.
///
/// Accepted syntax: 5 fields (`minute hour day-of-month month day-of-week`),
/// 6 fields (seconds first), or one of `@yearly @annually @monthly @weekly
/// @daily @midnight @hourly`. Day of week is 0-7 (0 and 7 are Sunday) or
/// `SUN`-`SAT`, plus `nL` (the last weekday n of the month) and `n#k` (the
/// k-th weekday n); months are 1-12 or `JAN`-`DEC`; day of month is 1-31
/// plus `L` (the last day), `L-n` (n days before it), `nW` (the weekday
/// nearest day n, within the month) and `LW` (the last weekday). As in
/// crontab, when both day-of-month and day-of-week are restricted (neither
/// starts with `*` or `?`), a day matches if either matches. A 7th (year)
/// field is rejected.
///
/// Parsed schedules are shared: a node holding a million jobs that use a
/// handful of schedules keeps a handful of parsed copies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronSchedule {
    inner: Arc<CronInner>,
}

#[derive(Debug, PartialEq, Eq)]
struct CronInner {
    exprs: Vec<String>,
    timezone: Tz,
    dst: DstRule,
    specs: Vec<CronFields>,
}

/// Everything that makes two parses the same schedule.
type CronKey = (Vec<String>, Tz, DstRule);
type CronCache = Mutex<HashMap<CronKey, Weak<CronInner>>>;

/// Distinct schedules remembered; beyond it parses are not shared.
const CRON_CACHE_MAX: usize = 10_000;

fn cron_cache() -> &'static CronCache {
    static CACHE: OnceLock<CronCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Which occurrence of a repeated wall time an instant is taken from; a
/// schedule whose rule is `both` fires at the union of the two mappings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Occurrence {
    First,
    Last,
}

impl CronSchedule {
    /// One expression with the default DST rule (calendar rules, and most jobs).
    pub fn parse(expr: &str, timezone: &str) -> Result<Self, ScheduleError> {
        Self::parse_all(&[expr], timezone, DstRule::default())
    }

    /// Several expressions (at least one) fired as one schedule. An error in
    /// one of several names it by its position (`exprs[2]: ...`).
    pub fn parse_all(exprs: &[impl AsRef<str>], timezone: &str, dst: DstRule) -> Result<Self, ScheduleError> {
        let timezone = parse_timezone(timezone)?;
        let exprs: Vec<String> = exprs.iter().map(|e| e.as_ref().to_owned()).collect();
        if exprs.is_empty() {
            return Err(ScheduleError::new("exprs", "must hold at least one cron expression"));
        }
        let key = (exprs, timezone, dst);
        if let Some(inner) = cron_cache().lock().ok().and_then(|c| c.get(&key).and_then(Weak::upgrade)) {
            return Ok(Self { inner });
        }
        let many = key.0.len() > 1;
        let specs = key
            .0
            .iter()
            .enumerate()
            .map(|(i, e)| {
                compile_expr(e).map_err(|err| match many {
                    true => ScheduleError::new("exprs", format!("exprs[{i}]: {}", err.message)),
                    false => err,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let inner = Arc::new(CronInner { exprs: key.0.clone(), timezone, dst, specs });
        if let Ok(mut cache) = cron_cache().lock() {
            if cache.len() >= CRON_CACHE_MAX {
                cache.retain(|_, w| w.strong_count() > 0);
            }
            if cache.len() < CRON_CACHE_MAX {
                cache.insert(key, Arc::downgrade(&inner));
            }
        }
        Ok(Self { inner })
    }

    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Staying inside the calendar also keeps naive_local() clear of
        // chrono's range limits.
        if after.year() > LAST_YEAR {
            return None;
        }
        let after = after.max(DateTime::UNIX_EPOCH - TimeDelta::days(2));
        match self.inner.dst.repeated {
            Repeated::First => self.next_mapped(after, Occurrence::First),
            Repeated::Last => self.next_mapped(after, Occurrence::Last),
            // Each mapping is monotone; their union is every occurrence.
            Repeated::Both => {
                let first = self.next_mapped(after, Occurrence::First);
                let last = self.next_mapped(after, Occurrence::Last);
                match (first, last) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
            }
        }
    }

    /// The first instant after `after` that a matching wall time maps to
    /// when a repeated wall time is taken at `occurrence`. The mapping is
    /// monotone in the wall time, so the first candidate past `after` is
    /// the answer.
    fn next_mapped(&self, after: DateTime<Utc>, occurrence: Occurrence) -> Option<DateTime<Utc>> {
        let tz = self.inner.timezone;
        let mut from = self.scan_start(after, occurrence);
        for _ in 0..MAX_SKIPPED_CANDIDATES {
            #[cfg(test)]
            tests::count_step();
            let wall = self.next_wall_time(from)?;
            let instant = match tz.from_local_datetime(&wall) {
                LocalResult::Single(t) => t.to_utc(),
                LocalResult::Ambiguous(a, b) => match occurrence {
                    Occurrence::First => a.to_utc().min(b.to_utc()),
                    Occurrence::Last => a.to_utc().max(b.to_utc()),
                },
                LocalResult::None => {
                    let end = gap_end(tz, wall)?;
                    match self.inner.dst.missing {
                        Missing::Shift => end,
                        // Every wall time before the end's own is in the gap.
                        Missing::Skip => {
                            from = end.with_timezone(&tz).naive_local();
                            continue;
                        }
                    }
                }
            };
            if instant > after {
                return Some(instant);
            }
            from = wall + TimeDelta::seconds(1);
        }
        None
    }

    /// The earliest wall time whose instant under `occurrence` can be after
    /// `after`: `after`'s own wall time, except inside a repeated stretch.
    /// There the first pass's wall times map to instants before the second
    /// pass: `Last` takes them from the stretch's start when `after` is in
    /// the first pass, and `First` skips to the stretch's end when `after`
    /// is in the second (else it would pass over every wall time of the
    /// stretch, all of them already fired).
    fn scan_start(&self, after: DateTime<Utc>, occurrence: Occurrence) -> NaiveDateTime {
        let tz = self.inner.timezone;
        let wall = after.with_timezone(&tz).naive_local().max(first_wall());
        let LocalResult::Ambiguous(a, b) = tz.from_local_datetime(&wall) else { return wall };
        let (early, late) = (a.to_utc().min(b.to_utc()), a.to_utc().max(b.to_utc()));
        let Some(change) = offset_change(tz, early, late) else { return wall };
        match occurrence {
            Occurrence::Last if after < late => change.with_timezone(&tz).naive_local(),
            Occurrence::First if after >= late => {
                let first_pass_offset = wall - early.naive_utc();
                change.naive_utc() + first_pass_offset
            }
            _ => wall,
        }
    }

    pub fn timezone(&self) -> Tz {
        self.inner.timezone
    }

    pub fn dst(&self) -> DstRule {
        self.inner.dst
    }

    /// The expressions as given.
    pub fn exprs(&self) -> &[String] {
        &self.inner.exprs
    }

    /// The first wall time at or after `from` (rounded up to the second)
    /// that an expression names, whether or not it exists in the zone.
    pub fn next_wall_time(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        let from = ceil_to_second(from.max(first_wall()))?;
        self.inner.specs.iter().filter_map(|s| s.next_at_or_after(from)).min()
    }

    /// Whether the wall time of `at` in the schedule's zone matches an
    /// expression, at that expression's resolution: the second for 6 fields,
    /// the minute for 5 fields and shortcuts (so `* * * * SAT,SUN` matches
    /// every instant of a weekend). Calendars use it for exclusion rules.
    pub fn matches_wall_time(&self, at: DateTime<Utc>) -> bool {
        let wall = at.with_timezone(&self.inner.timezone).naive_local();
        self.inner.specs.iter().any(|s| {
            let truncated = match s.with_seconds {
                true => wall.with_nanosecond(0),
                false => wall.with_second(0).and_then(|w| w.with_nanosecond(0)),
            };
            truncated.is_some_and(|w| s.matches(w))
        })
    }

    /// The shortest gap, in seconds, between two fires of the expressions
    /// together, judged from their seconds, minutes and hours as if every
    /// day fired (the day fields only remove fires; across midnight the gap
    /// is counted as if the next day fired too) and without DST shifts.
    pub fn min_gap_secs(&self) -> u64 {
        let mut fires = vec![0u64; 86_400 / 64 + 1];
        for s in &self.inner.specs {
            for h in bits(u64::from(s.hours)) {
                for m in bits(s.minutes) {
                    for sec in bits(s.seconds) {
                        let t = h * 3600 + m * 60 + sec;
                        fires[t as usize / 64] |= 1 << (t % 64);
                    }
                }
            }
        }
        let times: Vec<u32> = (0..86_400u32).filter(|t| fires[*t as usize / 64] >> (t % 64) & 1 == 1).collect();
        let (Some(first), Some(last)) = (times.first(), times.last()) else { return 86_400 };
        let wrap = first + 86_400 - last;
        u64::from(times.windows(2).map(|w| w[1] - w[0]).fold(wrap, u32::min))
    }

    #[cfg(test)]
    fn matches_wall(&self, local: NaiveDateTime) -> bool {
        self.inner.specs.iter().any(|s| s.matches(local))
    }
}

/// The first second after `early` whose UTC offset is `late`'s (the two
/// instants of one repeated wall time straddle one change of offset).
fn offset_change(tz: Tz, early: DateTime<Utc>, late: DateTime<Utc>) -> Option<DateTime<Utc>> {
    use chrono::Offset;
    let offset = |secs: i64| DateTime::from_timestamp(secs, 0).map(|t| t.with_timezone(&tz).offset().fix());
    let target = late.with_timezone(&tz).offset().fix();
    // Invariant: offset(lo) differs from the target, offset(hi) is it.
    let (mut lo, mut hi) = (early.timestamp(), late.timestamp() + 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if offset(mid)? == target {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0)
}

fn first_wall() -> NaiveDateTime {
    NaiveDate::from_ymd_opt(FIRST_YEAR, 1, 1).unwrap_or_default().and_time(Default::default())
}

fn ceil_to_second(t: NaiveDateTime) -> Option<NaiveDateTime> {
    match t.nanosecond() {
        0 => Some(t),
        n => t.checked_add_signed(TimeDelta::nanoseconds(1_000_000_000 - i64::from(n))),
    }
}

/// The transition instant of the gap containing `local`, found by bisecting
/// UTC seconds: the first second whose wall time is past `local`. Offsets are
/// under 24h, so ±1 day brackets it (wall(lo) < local < wall(hi)).
fn gap_end(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    let wall = |secs: i64| DateTime::from_timestamp(secs, 0).map(|t| t.with_timezone(&tz).naive_local());
    let guess = local.and_utc().timestamp();
    let (mut lo, mut hi) = (guess - 86_400, guess + 86_400);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if wall(mid)? > local {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    DateTime::from_timestamp(hi, 0)
}

/// The positions of the set bits of `set`, lowest first.
fn bits(mut set: u64) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        let bit = (set != 0).then(|| set.trailing_zeros())?;
        set &= set - 1;
        Some(bit)
    })
}

/// The lowest set bit of `set` at or above `from`.
fn next_bit(set: u64, from: u32) -> Option<u32> {
    if from >= 64 {
        return None;
    }
    let above = set >> from << from;
    (above != 0).then(|| above.trailing_zeros())
}

/// One expression as sets: bit n of each field is set when value n matches.
#[derive(Debug, PartialEq, Eq)]
struct CronFields {
    seconds: u64,
    minutes: u64,
    hours: u32,
    /// Bits 1-12.
    months: u16,
    days: DaySpec,
    /// A 6-field expression, matched at the second; else at the minute.
    with_seconds: bool,
}

/// The day fields, resolved month by month ([`DaySpec::mask`]).
#[derive(Debug, Default, PartialEq, Eq)]
struct DaySpec {
    /// Day-of-month numbers, bits 1-31.
    dom: u32,
    /// `L-n`: bit n (`L` itself is bit 0).
    before_last: u32,
    /// `nW`: bit n.
    nearest_weekday: u32,
    /// `LW`.
    last_weekday: bool,
    /// Weekdays, bit 0 = Sunday.
    dow: u8,
    /// `nL`: bit n.
    last_dow: u8,
    /// `n#k`: bit k of entry n.
    nth_dow: [u8; 7],
    /// Both fields restricted: a day matches either (crontab); else both.
    either: bool,
}

impl DaySpec {
    /// The matching days of one month, bits 1-31.
    fn mask(&self, year: i32, month: u32) -> u32 {
        let Some(first) = NaiveDate::from_ymd_opt(year, month, 1) else { return 0 };
        let len = days_in_month(year, month);
        let all = ((1u64 << (len + 1)) - 2) as u32;
        // Weekday of day 1, 0 = Sunday; day d is weekday (w1 + d - 1) % 7.
        let w1 = first.weekday().num_days_from_sunday();
        let weekday = |d: u32| (w1 + d - 1) % 7;
        let nearest = |n: u32| match weekday(n) {
            6 if n == 1 => 3,
            6 => n - 1,
            0 if n == len => n - 2,
            0 => n + 1,
            _ => n,
        };

        let mut dom = self.dom & all;
        for n in bits(u64::from(self.before_last)).filter(|n| *n < len) {
            dom |= 1 << (len - n);
        }
        for n in bits(u64::from(self.nearest_weekday)).filter(|n| *n <= len) {
            dom |= 1 << nearest(n);
        }
        if self.last_weekday {
            dom |= 1 << nearest(len);
        }

        // Days 1, 8, 15, 22 and 29, moved to start at the first day with weekday w.
        const WEEKLY: u64 = 1 << 1 | 1 << 8 | 1 << 15 | 1 << 22 | 1 << 29;
        let mut dow = match self.dow {
            0x7f => all,
            set => bits(u64::from(set)).fold(0, |acc, w| acc | (WEEKLY << ((w + 7 - w1) % 7)) as u32) & all,
        };
        for w in bits(u64::from(self.last_dow)) {
            dow |= 1 << (len - (weekday(len) + 7 - w) % 7);
        }
        for (w, ks) in self.nth_dow.iter().enumerate() {
            let first_w = 1 + (w as u32 + 7 - w1) % 7;
            for k in bits(u64::from(*ks)) {
                let d = first_w + 7 * (k - 1);
                if d <= len {
                    dow |= 1 << d;
                }
            }
        }
        if self.either { dom | dow } else { dom & dow }
    }
}

fn days_in_month(year: i32, month: u32) -> u32 {
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if NaiveDate::from_ymd_opt(year, 2, 29).is_some() => 29,
        2 => 28,
        _ => 31,
    }
}

impl CronFields {
    fn matches(&self, wall: NaiveDateTime) -> bool {
        self.months >> wall.month() & 1 == 1
            && self.days.mask(wall.year(), wall.month()) >> wall.day() & 1 == 1
            && self.hours >> wall.hour() & 1 == 1
            && self.minutes >> wall.minute() & 1 == 1
            && self.seconds >> wall.second() & 1 == 1
            && wall.nanosecond() == 0
    }

    /// The first matching wall time at or after `from` (a whole second):
    /// month by month, then the first matching day, then the first time of
    /// day, each a bit scan, so a call costs a few steps per month passed.
    fn next_at_or_after(&self, from: NaiveDateTime) -> Option<NaiveDateTime> {
        let (mut year, mut month, mut day) = (from.year(), from.month(), from.day());
        let mut time = from.num_seconds_from_midnight();
        while year <= LAST_YEAR {
            #[cfg(test)]
            tests::count_step();
            let next_month = |year: i32, month: u32| if month == 12 { (year + 1, 1) } else { (year, month + 1) };
            if self.months >> month & 1 == 0 {
                (year, month) = next_month(year, month);
                (day, time) = (1, 0);
                continue;
            }
            let days = u64::from(self.days.mask(year, month)) >> day << day;
            if days == 0 {
                (year, month) = next_month(year, month);
                (day, time) = (1, 0);
                continue;
            }
            let found = days.trailing_zeros();
            if found != day {
                (day, time) = (found, 0);
            }
            match self.time_at_or_after(time) {
                Some(t) => {
                    return NaiveDate::from_ymd_opt(year, month, day)?.and_hms_opt(t / 3600, t / 60 % 60, t % 60);
                }
                None => (day, time) = (day + 1, 0),
            }
        }
        None
    }

    /// The first matching second of the day at or after `time` (seconds
    /// since midnight).
    fn time_at_or_after(&self, time: u32) -> Option<u32> {
        let (h, m, s) = (time / 3600, time / 60 % 60, time % 60);
        let first_second = next_bit(self.seconds, 0)?;
        let first_minute = next_bit(self.minutes, 0)?;
        let at = |h: u32, m: u32, s: u32| h * 3600 + m * 60 + s;
        if self.hours >> h & 1 == 1 {
            if self.minutes >> m & 1 == 1
                && let Some(s) = next_bit(self.seconds, s)
            {
                return Some(at(h, m, s));
            }
            if let Some(m) = next_bit(self.minutes, m + 1) {
                return Some(at(h, m, first_second));
            }
        }
        let h = next_bit(u64::from(self.hours), h + 1)?;
        Some(at(h, first_minute, first_second))
    }
}

/// Name and allowed values of each field, for error messages.
const FIELDS: [(&str, &str); 6] = [
    ("seconds", "0-59"),
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day-of-month", "1-31, L, L-n, nW or LW"),
    ("month", "1-12 or JAN-DEC"),
    ("day-of-week", "0-7 or SUN-SAT, nL or n#k"),
];
const DOM: usize = 3;
const DOW: usize = 5;

/// Parses one expression of our syntax. Seconds, minutes, hours, months and
/// the plain part of day-of-month are read by the `cron` crate (6 fields,
/// seconds first); day-of-week and the day-of-month forms the crate does
/// not know are read here.
fn compile_expr(expr: &str) -> Result<CronFields, ScheduleError> {
    let trimmed = expr.trim();
    let text = match trimmed.strip_prefix('@') {
        Some(name) => shortcut(name)?,
        None => trimmed,
    };
    let fields: Vec<&str> = text.split_whitespace().collect();
    let (sec, min, hour, dom, month, dow) = match *fields.as_slice() {
        [min, hour, dom, month, dow] => ("0", min, hour, dom, month, dow),
        [sec, min, hour, dom, month, dow] => (sec, min, hour, dom, month, dow),
        [] => {
            return Err(ScheduleError::expr(
                "is empty; expected 5 fields (minute hour day-of-month month day-of-week), \
                 6 fields (seconds first) or a shortcut such as @daily",
            ));
        }
        [..] if fields.len() == 7 => {
            return Err(ScheduleError::expr(format!(
                "{trimmed:?} has 7 fields; a year field is not supported, use 5 fields \
                 (minute hour day-of-month month day-of-week) or 6 (seconds first)"
            )));
        }
        [..] => {
            return Err(ScheduleError::expr(format!(
                "{trimmed:?} has {} fields; expected 5 (minute hour day-of-month month \
                 day-of-week), 6 (seconds first) or a shortcut such as @daily",
                fields.len()
            )));
        }
    };
    let mut days = parse_dow(dow)?;
    let plain_dom = parse_dom_specials(dom, &mut days)?;
    // Vixie cron: a field starting with `*` counts as unrestricted.
    let restricted = |f: &str| !f.starts_with(['*', '?']);
    days.either = restricted(dom) && restricted(dow);

    let original = [sec, min, hour, dom, month, dow];
    let for_crate = [sec, min, hour, plain_dom.as_deref().unwrap_or("*"), month, "*"];
    let parsed = cron::Schedule::from_str(&for_crate.join(" ")).map_err(|e| diagnose(&original, &for_crate, &e))?;
    if plain_dom.is_some() {
        days.dom = set_of(parsed.days_of_month()) as u32;
    }
    Ok(CronFields {
        seconds: set_of(parsed.seconds()),
        minutes: set_of(parsed.minutes()),
        hours: set_of(parsed.hours()) as u32,
        months: set_of(parsed.months()) as u16,
        days,
        with_seconds: fields.len() == 6,
    })
}

/// A field the crate parsed, as bits (every value is under 64).
fn set_of(spec: &impl cron::TimeUnitSpec) -> u64 {
    spec.iter().fold(0, |acc, v| acc | 1 << v)
}

fn shortcut(name: &str) -> Result<&'static str, ScheduleError> {
    Ok(match name.to_ascii_lowercase().as_str() {
        "yearly" | "annually" => "0 0 1 1 *",
        "monthly" => "0 0 1 * *",
        "weekly" => "0 0 * * 0",
        "daily" | "midnight" => "0 0 * * *",
        "hourly" => "0 * * * *",
        _ => {
            return Err(ScheduleError::expr(format!(
                "unknown shortcut \"@{name}\"; expected one of @yearly, @annually, @monthly, \
                 @weekly, @daily, @midnight, @hourly"
            )));
        }
    })
}

/// Names the first field the crate rejects on its own, with the crate's reason.
fn diagnose(original: &[&str; 6], for_crate: &[&str; 6], whole: &cron::error::Error) -> ScheduleError {
    for (i, field) in for_crate.iter().enumerate() {
        let mut probe = ["*"; 6];
        probe[i] = field;
        if let Err(e) = cron::Schedule::from_str(&probe.join(" ")) {
            let (name, allowed) = FIELDS[i];
            return ScheduleError::expr(format!(
                "{name} field {:?} is invalid (allowed {allowed}): {}",
                original[i],
                crate_reason(&e)
            ));
        }
    }
    ScheduleError::expr(format!("invalid cron expression: {}", crate_reason(whole)))
}

/// The crate's message is "<input>\n<caret>\n<reason>"; keep the reason.
fn crate_reason(e: &cron::error::Error) -> String {
    let text = e.to_string();
    let reason: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with('^'))
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if reason.is_empty() { "unexpected syntax".to_owned() } else { reason.join(" ") }
}

/// Takes the items of a day-of-month field that name days relative to the
/// month (`L`, `L-n`, `nW`, `LW`) into `days`; the rest, for the crate, or
/// `None` when nothing is left.
fn parse_dom_specials(field: &str, days: &mut DaySpec) -> Result<Option<String>, ScheduleError> {
    let (name, allowed) = FIELDS[DOM];
    let invalid =
        |why: String| ScheduleError::expr(format!("{name} field {field:?} is invalid (allowed {allowed}): {why}"));
    let mut plain = Vec::new();
    for item in field.split(',') {
        let upper = item.to_ascii_uppercase();
        if !upper.contains(['L', 'W']) {
            plain.push(item);
            continue;
        }
        if upper == "L" {
            days.before_last |= 1;
        } else if upper == "LW" {
            days.last_weekday = true;
        } else if let Some(n) = upper.strip_prefix("L-") {
            match number(n) {
                Some(n @ 1..=30) => days.before_last |= 1 << n,
                _ => return Err(invalid(format!("in {item:?}, L-n takes n from 1 to 30 (days before the last)"))),
            }
        } else if let Some(n) = upper.strip_suffix('W') {
            match number(n) {
                Some(n @ 1..=31) => days.nearest_weekday |= 1 << n,
                _ => {
                    return Err(invalid(format!(
                        "in {item:?}, nW takes one day n from 1 to 31 (the weekday nearest it)"
                    )));
                }
            }
        } else {
            return Err(invalid(format!("{item:?} is not a day of the month")));
        }
    }
    Ok((!plain.is_empty()).then(|| plain.join(",")))
}

/// Crontab day-of-week (0-7, 0 and 7 = Sunday, names, lists, ranges, steps,
/// `nL`, `n#k`) into `DaySpec`'s weekday sets.
fn parse_dow(field: &str) -> Result<DaySpec, ScheduleError> {
    let mut spec = DaySpec::default();
    if field == "*" || field == "?" {
        spec.dow = 0x7f;
        return Ok(spec);
    }
    let (name, allowed) = FIELDS[DOW];
    let invalid =
        |why: String| ScheduleError::expr(format!("{name} field {field:?} is invalid (allowed {allowed}): {why}"));
    for item in field.split(',') {
        let upper = item.to_ascii_uppercase();
        if upper == "L" {
            return Err(invalid(
                "L alone is not a day; write nL for the last weekday n of the month (5L: the last Friday), \
                 or L in day-of-month for the last day"
                    .to_owned(),
            ));
        }
        if let Some(day) = upper.strip_suffix('L') {
            spec.last_dow |= 1 << (dow_value(day).map_err(&invalid)? % 7);
            continue;
        }
        if let Some((day, k)) = item.split_once('#') {
            let day = dow_value(day).map_err(&invalid)? % 7;
            match number(k) {
                Some(k @ 1..=5) => spec.nth_dow[day] |= 1 << k,
                _ => return Err(invalid(format!("in {item:?}, n#k takes k from 1 to 5 (the k-th such weekday)"))),
            }
            continue;
        }
        let (base, step) = match item.split_once('/') {
            Some((base, step)) => match step.parse::<usize>() {
                Ok(s @ 1..=7) => (base, Some(s)),
                _ => return Err(invalid(format!("step {step:?} must be between 1 and 7"))),
            },
            None => (item, None),
        };
        let (lo, hi) = if base == "*" || base == "?" {
            (0, 7)
        } else if let Some((a, b)) = base.split_once('-') {
            let a = dow_value(a).map_err(&invalid)?;
            let b = dow_value(b).map_err(&invalid)?;
            // `FRI-SUN` / `5-0`: Sunday closes the week as 7.
            let b = if b == 0 && a > 0 { 7 } else { b };
            if a > b {
                return Err(invalid(format!("range {base:?} runs backwards")));
            }
            (a, b)
        } else {
            let a = dow_value(base).map_err(&invalid)?;
            // `N/step` means N-7/step, as in cronie.
            (a, if step.is_some() { 7 } else { a })
        };
        for d in (lo..=hi).step_by(step.unwrap_or(1)) {
            spec.dow |= 1 << (d % 7);
        }
    }
    Ok(spec)
}

/// A number written in digits only (`str::parse` would take a sign).
fn number(s: &str) -> Option<u32> {
    s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse().ok()).flatten()
}

fn dow_value(s: &str) -> Result<usize, String> {
    if s.is_empty() {
        return Err("empty value".to_owned());
    }
    if s.bytes().all(|b| b.is_ascii_digit()) {
        return match s.parse::<usize>() {
            Ok(d @ 0..=7) => Ok(d),
            _ => Err(format!("{s:?} is out of range 0-7 (0 and 7 are Sunday)")),
        };
    }
    const NAMES: [(&str, &str); 7] = [
        ("sun", "sunday"),
        ("mon", "monday"),
        ("tue", "tuesday"),
        ("wed", "wednesday"),
        ("thu", "thursday"),
        ("fri", "friday"),
        ("sat", "saturday"),
    ];
    let lower = s.to_ascii_lowercase();
    NAMES
        .iter()
        .position(|(short, long)| lower == *short || lower == *long)
        .ok_or_else(|| format!("{s:?} is not a day of the week (0-7 or SUN-SAT)"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recurrence {
    Once {
        at: DateTime<Utc>,
    },
    /// Fires at `anchor + k * every_ms` for k >= 0. `every_ms` must be >= 1;
    /// 0 never fires.
    Interval {
        every_ms: u64,
        anchor: DateTime<Utc>,
    },
    Cron(CronSchedule),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledSchedule {
    pub recurrence: Recurrence,
    pub start_at: Option<DateTime<Utc>>,
    pub end_at: Option<DateTime<Utc>>,
}

impl CompiledSchedule {
    /// The first fire time strictly after `after`, inside [start_at, end_at]
    /// (both inclusive). None when it never fires again.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let end = self.end_at.map(truncate_to_millis);
        if end.is_some_and(|e| after >= e) {
            return None;
        }
        // A fire exactly at start_at counts, so search from just before it.
        let from = match self.start_at.map(truncate_to_millis) {
            Some(start) if start > after => start - TimeDelta::nanoseconds(1),
            _ => after,
        };
        let next = match &self.recurrence {
            Recurrence::Once { at } => Some(truncate_to_millis(*at)).filter(|at| *at > from),
            Recurrence::Interval { every_ms, anchor } => interval_next(*every_ms, truncate_to_millis(*anchor), from),
            Recurrence::Cron(cron) => cron.next_after(from),
        }?;
        match end {
            Some(e) if next > e => None,
            _ => Some(next),
        }
    }

    /// Whether `t` is a fire time of this schedule (inside its window).
    pub fn fires_at(&self, t: DateTime<Utc>) -> bool {
        t.checked_sub_signed(TimeDelta::nanoseconds(1)).is_some_and(|before| self.next_after(before) == Some(t))
    }

    /// The last fire time strictly before `before`, found with `next_after`
    /// alone (so it agrees with it, DST rules included): a window doubling
    /// backwards until it holds a fire time, then a binary search for the
    /// latest instant whose next fire is still before `before`. About
    /// 2 × log2(distance in ms) calls of `next_after`; `None` when nothing
    /// fires between the Unix epoch (or `start_at`) and `before`.
    pub fn prev_before(&self, before: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let fires_before = |t: DateTime<Utc>| self.next_after(t).is_some_and(|n| n < before);
        let epoch = DateTime::UNIX_EPOCH - TimeDelta::days(2);
        let floor = match self.start_at.map(truncate_to_millis) {
            Some(start) => (start - TimeDelta::milliseconds(1)).max(epoch),
            None => epoch,
        };
        if before <= floor || !fires_before(floor) {
            return None;
        }
        // Invariant: fires_before(lo) and !fires_before(hi).
        let mut width = TimeDelta::seconds(1);
        let mut lo = loop {
            match before.checked_sub_signed(width) {
                Some(t) if t > floor => {
                    if fires_before(t) {
                        break t;
                    }
                }
                _ => break floor,
            }
            width = width.checked_mul(2)?;
        };
        let mut hi = before;
        // Fire times are whole milliseconds, so (lo, hi] of 1 ms holds one at most.
        while hi - lo > TimeDelta::milliseconds(1) {
            let mid = lo + (hi - lo) / 2;
            if fires_before(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        self.next_after(lo)
    }

    /// Every fire time strictly after `after`, in order (lazily).
    pub fn fires_after(&self, after: DateTime<Utc>) -> impl Iterator<Item = DateTime<Utc>> + '_ {
        std::iter::successors(self.next_after(after), move |t| self.next_after(*t))
    }

    /// Up to `count` fire times strictly after `after` (for previews).
    pub fn upcoming(&self, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        self.fires_after(after).take(count).collect()
    }
}

/// Smallest `anchor + k * every_ms` (k >= 0) strictly after `after`; exact in
/// nanoseconds so a sub-millisecond `after` cannot be rounded onto a slot.
fn interval_next(every_ms: u64, anchor: DateTime<Utc>, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if every_ms == 0 {
        return None;
    }
    if anchor > after {
        return Some(anchor);
    }
    const NANOS: i128 = 1_000_000_000;
    let elapsed = after.signed_duration_since(anchor);
    let elapsed_ns = i128::from(elapsed.num_seconds()) * NANOS + i128::from(elapsed.subsec_nanos());
    let every_ns = i128::from(every_ms) * 1_000_000;
    let offset_ns = (elapsed_ns / every_ns + 1) * every_ns;
    let offset = TimeDelta::new(i64::try_from(offset_ns / NANOS).ok()?, u32::try_from(offset_ns % NANOS).ok()?)?;
    anchor.checked_add_signed(offset)
}

#[cfg(test)]
mod tests {
    #[test]
    fn prev_before_follows_dst_and_the_window() {
        let t = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().to_utc();
        let s = CompiledSchedule {
            recurrence: Recurrence::Cron(CronSchedule::parse("30 2 * * *", "America/New_York").unwrap()),
            start_at: Some(t("2027-03-13T00:00:00Z")),
            end_at: None,
        };
        // 02:30 does not exist on 2027-03-14: that day fires at the gap's end.
        assert_eq!(s.prev_before(t("2027-03-15T06:30:00Z")), Some(t("2027-03-14T07:00:00Z")));
        assert_eq!(s.prev_before(t("2027-03-14T07:00:00.001Z")), Some(t("2027-03-14T07:00:00Z")));
        assert_eq!(s.prev_before(t("2027-03-14T07:00:00Z")), Some(t("2027-03-13T07:30:00Z")));
        assert_eq!(s.prev_before(t("2027-03-13T07:30:00Z")), None, "before start_at");
        assert!(s.fires_at(t("2027-03-14T07:00:00Z")));
        assert!(!s.fires_at(t("2027-03-14T07:30:00Z")));
        assert!(!s.fires_at(t("2027-03-12T07:30:00Z")), "before start_at");
    }

    #[test]
    fn identical_cron_schedules_share_one_parse() {
        let a = CronSchedule::parse("*/7 * * * *", "Europe/Berlin").unwrap();
        let b = CronSchedule::parse("*/7 * * * *", "Europe/Berlin").unwrap();
        let c = CronSchedule::parse("*/7 * * * *", "UTC").unwrap();
        assert!(Arc::ptr_eq(&a.inner, &b.inner));
        assert!(!Arc::ptr_eq(&a.inner, &c.inner));
        // The DST rule and the list of expressions are part of the identity.
        let last = DstRule { repeated: Repeated::Last, ..DstRule::default() };
        let d = CronSchedule::parse_all(&["*/7 * * * *"], "Europe/Berlin", last).unwrap();
        let e = CronSchedule::parse_all(&["*/7 * * * *"], "Europe/Berlin", last).unwrap();
        assert!(Arc::ptr_eq(&d.inner, &e.inner));
        assert!(!Arc::ptr_eq(&a.inner, &d.inner));
        assert_eq!(d.dst(), last);
        let f = CronSchedule::parse_all(&["*/7 * * * *", "0 9 * * *"], "Europe/Berlin", DstRule::default()).unwrap();
        assert!(!Arc::ptr_eq(&a.inner, &f.inner));
        assert_eq!(f.exprs(), ["*/7 * * * *", "0 9 * * *"]);
    }

    thread_local! {
        /// Candidates and months a test's calls have looked at.
        static STEPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    pub(super) fn count_step() {
        STEPS.with(|s| s.set(s.get() + 1));
    }

    /// The steps `next_after` takes from `after`: wall-time candidates
    /// mapped, and months (or days within one) looked at.
    fn steps(s: &CronSchedule, after: DateTime<Utc>) -> usize {
        STEPS.with(|c| c.set(0));
        s.next_after(after);
        STEPS.with(|c| c.get())
    }

    #[test]
    fn a_fire_costs_a_few_steps_whatever_the_expression_and_the_clocks() {
        let rule = |repeated, missing| DstRule { repeated, missing };
        let berlin = |expr: &str, dst| CronSchedule::parse_all(&[expr], "Europe/Berlin", dst).unwrap();
        let default = DstRule::default();
        // (schedule, from, most steps). Every minute of the last day, from
        // the first of the month: no walk over the days before.
        let cases = [
            (cron("* * L * *", "UTC"), "2026-01-01T00:00:00Z", 4),
            (cron("* * * * * *", "UTC"), "2026-01-01T10:00:00.5Z", 4),
            (cron("0 9 * * 5L", "UTC"), "2026-01-01T00:00:00Z", 4),
            (cron("0 9 15W * *", "UTC"), "2026-01-16T00:00:00Z", 4),
            // Every second, inside the repeated hour of 2026-10-25: from
            // the second pass under `first` (no walk over the hour already
            // fired), from the first pass under `last` and `both`.
            (berlin("* * * * * *", default), "2026-10-25T01:30:00Z", 4),
            (berlin("* * * * * *", rule(Repeated::Last, Missing::Shift)), "2026-10-25T00:00:01Z", 4),
            (berlin("* * * * * *", rule(Repeated::Both, Missing::Shift)), "2026-10-25T00:59:59Z", 8),
            // Every second into the gap of 2026-03-29, skipped in one step.
            (berlin("* * * * * *", rule(Repeated::First, Missing::Skip)), "2026-03-29T00:59:59Z", 6),
            (berlin("* * * * * *", default), "2026-03-29T00:59:59Z", 4),
        ];
        for (s, from, most) in cases {
            let n = steps(&s, utc(from));
            assert!(n <= most, "{:?} from {from}: {n} steps", s.exprs());
        }
        // An expression that never fires looks at each February to 2100, once.
        let never = cron("0 0 30 2 *", "UTC");
        assert!(steps(&never, utc("2026-01-01T00:00:00Z")) <= 2 * 12 * 75, "a month a step");
    }

    fn days_of(expr: &str, after: &str, n: usize) -> Vec<String> {
        fires(expr, "UTC", after, n).iter().map(|t| t.format("%Y-%m-%d %a").to_string()).collect()
    }

    #[test]
    fn last_day_and_days_before_it() {
        let got = days_of("0 0 L * *", "2026-01-15T00:00:00Z", 4);
        assert_eq!(got, ["2026-01-31 Sat", "2026-02-28 Sat", "2026-03-31 Tue", "2026-04-30 Thu"]);
        assert_eq!(days_of("0 0 L 2 *", "2027-03-01T00:00:00Z", 1), ["2028-02-29 Tue"], "leap year");
        let got = days_of("0 0 L-2 * *", "2026-01-01T00:00:00Z", 3);
        assert_eq!(got, ["2026-01-29 Thu", "2026-02-26 Thu", "2026-03-29 Sun"]);
        // `L-30` is the 1st of a 31-day month and nothing in a shorter one.
        assert_eq!(days_of("0 0 L-30 * *", "2026-01-02T00:00:00Z", 2), ["2026-03-01 Sun", "2026-05-01 Fri"]);
        // Listed with plain days, lower case, and the same day twice fires once.
        assert_eq!(
            days_of("0 0 1,l,31 * *", "2026-01-02T00:00:00Z", 3),
            ["2026-01-31 Sat", "2026-02-01 Sun", "2026-02-28 Sat"]
        );
        // Every minute of the last day: 1440 fires, then the next month's.
        let s = cron("* * L * *", "UTC");
        let minutes = CompiledSchedule { recurrence: Recurrence::Cron(s), start_at: None, end_at: None }
            .upcoming(utc("2026-01-30T23:59:00Z"), 1441);
        assert_eq!((minutes[0], minutes[1439]), (utc("2026-01-31T00:00:00Z"), utc("2026-01-31T23:59:00Z")));
        assert_eq!(minutes[1440], utc("2026-02-28T00:00:00Z"));
    }

    #[test]
    fn nearest_weekday_stays_in_the_month() {
        // The 15th of February and March 2026 are Sundays (Monday fires), of
        // August a Saturday (Friday fires); of April a Wednesday.
        let got = days_of("0 9 15W * *", "2026-02-01T00:00:00Z", 4);
        assert_eq!(got, ["2026-02-16 Mon", "2026-03-16 Mon", "2026-04-15 Wed", "2026-05-15 Fri"]);
        assert_eq!(days_of("0 9 15W 8 *", "2026-01-01T00:00:00Z", 1), ["2026-08-14 Fri"]);
        // 1 August 2026 is a Saturday: Monday the 3rd, not Friday 31 July.
        assert_eq!(days_of("0 9 1W 8 *", "2026-01-01T00:00:00Z", 1), ["2026-08-03 Mon"]);
        // 31 May 2026 is a Sunday: Friday the 29th, not Monday 1 June; a
        // month without a 31st has no fire, as for plain 31.
        assert_eq!(days_of("0 9 31W 4-6 *", "2026-01-01T00:00:00Z", 1), ["2026-05-29 Fri"]);
        // LW: the last weekday.
        let got = days_of("0 9 LW * *", "2026-01-01T00:00:00Z", 5);
        assert_eq!(got, ["2026-01-30 Fri", "2026-02-27 Fri", "2026-03-31 Tue", "2026-04-30 Thu", "2026-05-29 Fri"]);
        assert_eq!(days_of("0 9 1W,15W * *", "2026-07-31T12:00:00Z", 2), ["2026-08-03 Mon", "2026-08-14 Fri"]);
    }

    #[test]
    fn last_and_nth_weekdays_of_the_month() {
        let got = days_of("0 0 * * 5L", "2026-01-01T00:00:00Z", 4);
        assert_eq!(got, ["2026-01-30 Fri", "2026-02-27 Fri", "2026-03-27 Fri", "2026-04-24 Fri"]);
        assert_eq!(days_of("0 0 * * FRIL", "2026-01-01T00:00:00Z", 4), got);
        // Sunday is 0 or 7, whichever way it is written.
        assert_eq!(days_of("0 0 * * 0L", "2026-01-01T00:00:00Z", 1), days_of("0 0 * * 7L", "2026-01-01T00:00:00Z", 1));
        let got = days_of("0 0 * * 2#2", "2026-01-01T00:00:00Z", 3);
        assert_eq!(got, ["2026-01-13 Tue", "2026-02-10 Tue", "2026-03-10 Tue"]);
        assert_eq!(days_of("0 0 * * TUE#2", "2026-01-01T00:00:00Z", 3), got);
        // A fifth Monday exists in some months only.
        let got = days_of("0 0 * * 1#5", "2026-01-01T00:00:00Z", 4);
        assert_eq!(got, ["2026-03-30 Mon", "2026-06-29 Mon", "2026-08-31 Mon", "2026-11-30 Mon"]);
        // Mixed with plain weekdays: every Monday and the last Friday.
        let got = days_of("0 0 * 1 MON,5L", "2026-01-01T00:00:00Z", 5);
        assert_eq!(got, ["2026-01-05 Mon", "2026-01-12 Mon", "2026-01-19 Mon", "2026-01-26 Mon", "2026-01-30 Fri"]);
    }

    #[test]
    fn special_days_keep_the_day_of_month_or_day_of_week_rule() {
        // Both restricted: the last day OR the last Friday.
        let got = days_of("0 0 L * 5L", "2026-01-01T00:00:00Z", 4);
        assert_eq!(got, ["2026-01-30 Fri", "2026-01-31 Sat", "2026-02-27 Fri", "2026-02-28 Sat"]);
        // The 1st OR the second Tuesday.
        assert_eq!(days_of("0 0 1 * 2#2", "2026-01-02T00:00:00Z", 2), ["2026-01-13 Tue", "2026-02-01 Sun"]);
        // A `*`-prefixed field restricts by AND: odd days that are a last Friday.
        assert_eq!(days_of("0 0 */2 * 5L", "2026-01-01T00:00:00Z", 2), ["2026-02-27 Fri", "2026-03-27 Fri"]);
        // `?` is unrestricted.
        assert_eq!(days_of("0 0 L * ?", "2026-01-15T00:00:00Z", 1), ["2026-01-31 Sat"]);
    }

    #[test]
    fn special_forms_that_are_refused_name_what_is_allowed() {
        for (expr, says) in [
            ("0 0 L-0 * *", "L-n takes n from 1 to 30"),
            ("0 0 L-31 * *", "L-n takes n from 1 to 30"),
            ("0 0 L-+3 * *", "L-n takes n from 1 to 30"),
            ("0 0 32W * *", "nW takes one day n from 1 to 31"),
            ("0 0 1-5W * *", "nW takes one day n"),
            ("0 0 W * *", "nW takes one day n"),
            ("0 0 LX * *", "\"LX\" is not a day of the month"),
            ("0 0 * * L", "L alone is not a day"),
            ("0 0 * * 2#6", "n#k takes k from 1 to 5"),
            ("0 0 * * 2#+1", "n#k takes k from 1 to 5"),
            ("0 0 * * 9#1", "out of range 0-7"),
            ("0 0 * * 1-5L", "not a day of the week"),
        ] {
            let e = expr_err(expr);
            assert!(e.message.contains(says), "{expr}: {e}");
            let field = if expr.ends_with("* *") { "day-of-month" } else { "day-of-week" };
            assert!(e.message.contains(field), "{expr}: {e}");
            assert!(e.message.contains("allowed"), "{expr}: {e}");
        }
    }

    #[test]
    fn several_expressions_fire_their_union_once() {
        let s = CronSchedule::parse_all(&["0 9 * * MON-FRI", "0 11 * * SAT,SUN"], "UTC", DstRule::default()).unwrap();
        let s = CompiledSchedule { recurrence: Recurrence::Cron(s), start_at: None, end_at: None };
        let got: Vec<String> =
            s.upcoming(utc("2026-03-05T00:00:00Z"), 5).iter().map(|t| t.format("%a %H:%M").to_string()).collect();
        assert_eq!(got, ["Thu 09:00", "Fri 09:00", "Sat 11:00", "Sun 11:00", "Mon 09:00"]);
        // Where two expressions name the same wall time, one fire.
        let s = CronSchedule::parse_all(&["*/20 * * * *", "*/30 * * * *"], "UTC", DstRule::default()).unwrap();
        let s = CompiledSchedule { recurrence: Recurrence::Cron(s), start_at: None, end_at: None };
        let got: Vec<String> =
            s.upcoming(utc("2026-03-05T00:00:00Z"), 5).iter().map(|t| t.format("%H:%M").to_string()).collect();
        assert_eq!(got, ["00:20", "00:30", "00:40", "01:00", "01:20"]);
        // 5 and 6 fields together, each matched at its own resolution.
        let s = CronSchedule::parse_all(&["0 12 * * *", "30 0 12 * * *"], "UTC", DstRule::default()).unwrap();
        assert!(s.matches_wall_time(utc("2026-03-05T12:00:45Z")), "the 5-field one covers the minute");
        assert!(!s.matches_wall_time(utc("2026-03-05T12:01:30Z")));
        assert_eq!(s.next_after(utc("2026-03-05T12:00:00Z")), Some(utc("2026-03-05T12:00:30Z")));
        let e = CronSchedule::parse_all(&["0 12 * * *", "0 12 * *"], "UTC", DstRule::default()).unwrap_err();
        assert_eq!(e.field, "exprs");
        assert!(e.message.starts_with("exprs[1]: "), "{e}");
        let none: [&str; 0] = [];
        assert_eq!(CronSchedule::parse_all(&none, "UTC", DstRule::default()).unwrap_err().field, "exprs");
    }

    fn rule(repeated: Repeated, missing: Missing) -> DstRule {
        DstRule { repeated, missing }
    }

    fn fires_by(rule: DstRule, exprs: &[&str], tz: &str, after: &str, until: &str) -> Vec<DateTime<Utc>> {
        let s = CronSchedule::parse_all(exprs, tz, rule).unwrap();
        let s = CompiledSchedule { recurrence: Recurrence::Cron(s), start_at: None, end_at: Some(utc(until)) };
        s.upcoming(utc(after), 100)
    }

    #[test]
    fn each_dst_rule_at_new_yorks_transitions() {
        use Missing::*;
        use Repeated::*;
        // 2026-11-01: 02:00 EDT becomes 01:00 EST at 06:00Z; 01:30 happens at
        // 05:30Z and 06:30Z.
        let fall = |repeated| {
            fires_by(
                rule(repeated, Shift),
                &["30 1 * * *"],
                "America/New_York",
                "2026-10-31T12:00:00Z",
                "2026-11-02T00:00:00Z",
            )
        };
        assert_eq!(fall(First), [utc("2026-11-01T05:30:00Z")]);
        assert_eq!(fall(Last), [utc("2026-11-01T06:30:00Z")]);
        assert_eq!(fall(Both), [utc("2026-11-01T05:30:00Z"), utc("2026-11-01T06:30:00Z")]);
        // 2026-03-08: 02:00 EST becomes 03:00 EDT at 07:00Z; 02:30 does not exist.
        let spring = |missing| {
            fires_by(
                rule(First, missing),
                &["30 2 * * *"],
                "America/New_York",
                "2026-03-07T12:00:00Z",
                "2026-03-09T12:00:00Z",
            )
        };
        assert_eq!(spring(Shift), [utc("2026-03-08T07:00:00Z"), utc("2026-03-09T06:30:00Z")]);
        assert_eq!(spring(Skip), [utc("2026-03-09T06:30:00Z")]);
        // `skip` leaves a wall time after the gap alone: 03:00 EDT fires.
        let three = fires_by(
            rule(First, Skip),
            &["0 2,3 * * *"],
            "America/New_York",
            "2026-03-08T00:00:00Z",
            "2026-03-08T12:00:00Z",
        );
        assert_eq!(three, [utc("2026-03-08T07:00:00Z")]);
        // Every 20 minutes over the repeated hour: `both` fires each wall
        // time twice, in order of the instants.
        let every = |repeated| {
            fires_by(
                rule(repeated, Shift),
                &["*/20 1 * * *"],
                "America/New_York",
                "2026-11-01T05:00:00Z",
                "2026-11-01T07:00:00Z",
            )
            .iter()
            .map(|t| t.format("%H:%M").to_string())
            .collect::<Vec<_>>()
        };
        assert_eq!(every(First), ["05:20", "05:40"]);
        assert_eq!(every(Last), ["06:00", "06:20", "06:40"]);
        assert_eq!(every(Both), ["05:20", "05:40", "06:00", "06:20", "06:40"]);
    }

    #[test]
    fn scans_start_where_their_answer_can_begin() {
        // From inside the first pass of a repeated hour, `last` goes back to
        // the hour's start; from inside the second, `first` goes past it.
        let tz: Tz = "Europe/Berlin".parse().unwrap();
        let last =
            CronSchedule::parse_all(&["* * * * * *"], "Europe/Berlin", rule(Repeated::Last, Missing::Shift)).unwrap();
        let first = cron("* * * * * *", "Europe/Berlin");
        // 2026-10-25: 03:00 CEST becomes 02:00 CET at 01:00Z.
        let in_first_pass = utc("2026-10-25T00:40:00.5Z");
        assert_eq!(last.scan_start(in_first_pass, Occurrence::Last), "2026-10-25T02:00:00".parse().unwrap());
        assert_eq!(last.next_after(in_first_pass), Some(utc("2026-10-25T01:00:00Z")));
        let in_second_pass = utc("2026-10-25T01:40:00Z");
        assert_eq!(first.scan_start(in_second_pass, Occurrence::First), "2026-10-25T03:00:00".parse().unwrap());
        assert_eq!(first.next_after(in_second_pass), Some(utc("2026-10-25T02:00:00Z")));
        let plain = utc("2026-10-24T12:00:00Z");
        assert_eq!(first.scan_start(plain, Occurrence::Last), plain.with_timezone(&tz).naive_local());
    }

    use super::*;
    use chrono::{Offset, Weekday};
    use proptest::prelude::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().to_utc()
    }

    fn cron(expr: &str, tz: &str) -> CronSchedule {
        CronSchedule::parse(expr, tz).unwrap()
    }

    fn fires(expr: &str, tz: &str, after: &str, n: usize) -> Vec<DateTime<Utc>> {
        let s = CompiledSchedule { recurrence: Recurrence::Cron(cron(expr, tz)), start_at: None, end_at: None };
        s.upcoming(utc(after), n)
    }

    fn expr_err(expr: &str) -> ScheduleError {
        let err = CronSchedule::parse(expr, "UTC").unwrap_err();
        assert_eq!(err.field, "expr", "{err}");
        err
    }

    #[test]
    fn five_and_six_fields() {
        let five = fires("30 9 * * *", "UTC", "2026-01-01T00:00:00Z", 2);
        assert_eq!(five, [utc("2026-01-01T09:30:00Z"), utc("2026-01-02T09:30:00Z")]);
        let six = fires("15 30 9 * * *", "UTC", "2026-01-01T00:00:00Z", 1);
        assert_eq!(six, [utc("2026-01-01T09:30:15Z")]);
        let secs = fires("*/20 * * * * *", "UTC", "2026-01-01T00:00:00Z", 3);
        assert_eq!(secs, [utc("2026-01-01T00:00:20Z"), utc("2026-01-01T00:00:40Z"), utc("2026-01-01T00:01:00Z")]);
        let named = fires("0 0 1 JAN,jul *", "UTC", "2026-02-01T00:00:00Z", 2);
        assert_eq!(named, [utc("2026-07-01T00:00:00Z"), utc("2027-01-01T00:00:00Z")]);
        // Extra whitespace is fine.
        assert!(CronSchedule::parse("  0   9 * *  * ", "UTC").is_ok());
    }

    #[test]
    fn next_is_strictly_after() {
        let s = cron("0 9 * * *", "UTC");
        let at = utc("2026-01-01T09:00:00Z");
        assert_eq!(s.next_after(at), Some(utc("2026-01-02T09:00:00Z")));
        let just_before = at - TimeDelta::milliseconds(1);
        assert_eq!(s.next_after(just_before), Some(at));
    }

    #[test]
    fn shortcuts() {
        let after = "2026-03-04T05:06:07Z"; // a Wednesday
        let cases = [
            ("@yearly", "2027-01-01T00:00:00Z"),
            ("@annually", "2027-01-01T00:00:00Z"),
            ("@monthly", "2026-04-01T00:00:00Z"),
            ("@weekly", "2026-03-08T00:00:00Z"), // Sunday
            ("@daily", "2026-03-05T00:00:00Z"),
            ("@midnight", "2026-03-05T00:00:00Z"),
            ("@hourly", "2026-03-04T06:00:00Z"),
            ("@DAILY", "2026-03-05T00:00:00Z"),
        ];
        for (expr, want) in cases {
            assert_eq!(fires(expr, "UTC", after, 1), [utc(want)], "{expr}");
        }
        assert!(expr_err("@reboot").message.contains("@reboot"));
        assert!(expr_err("@daily 5").message.contains("unknown shortcut"));
    }

    #[test]
    fn weekdays_mon_to_fri() {
        let got = fires("0 9 * * 1-5", "UTC", "2026-03-01T00:00:00Z", 10);
        assert_eq!(got.len(), 10);
        for t in &got {
            assert!(!matches!(t.weekday(), Weekday::Sat | Weekday::Sun), "{t}");
            assert_eq!((t.hour(), t.minute()), (9, 0));
        }
        assert_eq!(got[0], utc("2026-03-02T09:00:00Z")); // Monday
        assert_eq!(got[4], utc("2026-03-06T09:00:00Z")); // Friday
        assert_eq!(got[5], utc("2026-03-09T09:00:00Z")); // next Monday
        let named = fires("0 9 * * MON-FRI", "UTC", "2026-03-01T00:00:00Z", 10);
        assert_eq!(named, got);
    }

    #[test]
    fn sunday_is_0_7_and_sun() {
        let want = [utc("2026-03-08T09:00:00Z"), utc("2026-03-15T09:00:00Z")];
        for expr in ["0 9 * * 0", "0 9 * * 7", "0 9 * * SUN", "0 9 * * sunday"] {
            assert_eq!(fires(expr, "UTC", "2026-03-02T00:00:00Z", 2), want, "{expr}");
        }
        assert_eq!(
            fires("0 0 9 * * 0", "UTC", "2026-03-02T00:00:00Z", 2),
            want,
            "6 fields use the crontab numbering too"
        );
    }

    #[test]
    fn day_of_week_lists_ranges_steps() {
        let weekdays = |expr: &str| -> Vec<Weekday> {
            fires(expr, "UTC", "2026-03-01T00:00:00Z", 7) // starts on a Sunday
                .iter()
                .map(|t| t.weekday())
                .collect()
        };
        use Weekday::*;
        assert_eq!(weekdays("0 0 * * 0,6")[..4], [Sat, Sun, Sat, Sun]);
        assert_eq!(weekdays("0 0 * * */2")[..4], [Tue, Thu, Sat, Sun]);
        assert_eq!(weekdays("0 0 * * 5-7")[..4], [Fri, Sat, Sun, Fri]);
        assert_eq!(weekdays("0 0 * * FRI-SUN")[..4], [Fri, Sat, Sun, Fri]);
        assert_eq!(weekdays("0 0 * * 1-5/2")[..4], [Mon, Wed, Fri, Mon]);
        assert_eq!(weekdays("0 0 * * 1/3")[..4], [Mon, Thu, Sun, Mon]);
        assert_eq!(weekdays("0 0 * * 0-6"), weekdays("0 0 * * *"));
        assert_eq!(parse_dow("0-7").unwrap().dow, 0x7f);
        assert_eq!(parse_dow("1-5").unwrap().dow, 0b0111110);
        assert_eq!(parse_dow("7").unwrap().dow, 1);
    }

    #[test]
    fn day_of_month_or_day_of_week() {
        // Restricted in both: the 13th OR any Friday (crontab), not Friday the 13th.
        let got = fires("0 0 13 * 5", "UTC", "2026-03-01T00:00:00Z", 4);
        assert_eq!(
            got,
            [
                utc("2026-03-06T00:00:00Z"),
                utc("2026-03-13T00:00:00Z"), // both: fires once
                utc("2026-03-20T00:00:00Z"),
                utc("2026-03-27T00:00:00Z"),
            ]
        );
        let april = fires("0 0 13 * 5", "UTC", "2026-04-04T00:00:00Z", 2);
        assert_eq!(april, [utc("2026-04-10T00:00:00Z"), utc("2026-04-13T00:00:00Z")]);
        // `*`-prefixed day-of-month: AND, as in Vixie cron.
        let and = fires("0 0 */2 * 5", "UTC", "2026-03-01T00:00:00Z", 1);
        assert_eq!(and, [utc("2026-03-13T00:00:00Z")]);
    }

    #[test]
    fn errors_name_the_field() {
        assert!(expr_err("* * * *").message.contains("4 fields"));
        assert!(expr_err("").message.contains("empty"));
        assert!(expr_err("0 0 0 1 1 * 2030").message.contains("year"));
        let e = expr_err("61 * * * *");
        assert!(e.message.contains("minute field \"61\""), "{e}");
        assert!(e.message.contains("Minutes must be"), "crate reason: {e}");
        let e = expr_err("0 0 * 13 *");
        assert!(e.message.contains("month field \"13\""), "{e}");
        let e = expr_err("0 0 * FOO *");
        assert!(e.message.contains("FOO"), "{e}");
        let e = expr_err("? * * * *");
        assert!(e.message.contains("minute field \"?\""), "{e}");
        let e = expr_err("0 0 32 * *");
        assert!(e.message.contains("day-of-month"), "{e}");
        for bad in ["8", "MOO", "1-", "3-1", "*/0", "*/8", "1,,2", "L", "8L", "1#0", "1#6", "1#", "#2", "5L#2"] {
            let e = expr_err(&format!("0 0 * * {bad}"));
            assert!(e.message.contains("day-of-week"), "{bad}: {e}");
        }
        let e = CronSchedule::parse("0 0 * * *", "Mars/Olympus").unwrap_err();
        assert_eq!(e.field, "timezone");
        assert_eq!(e.message, "unknown IANA time zone \"Mars/Olympus\"");
        assert_eq!(e.to_string(), "timezone: unknown IANA time zone \"Mars/Olympus\"");
        assert!(parse_timezone("").is_err());
        assert_eq!(parse_timezone("UTC").unwrap(), Tz::UTC);
        assert_eq!(cron("0 0 * * *", "Asia/Kolkata").timezone(), Tz::Asia__Kolkata);
    }

    #[test]
    fn once() {
        let s = CompiledSchedule {
            recurrence: Recurrence::Once { at: utc("2026-05-01T12:00:00.123456Z") },
            start_at: None,
            end_at: None,
        };
        let at = utc("2026-05-01T12:00:00.123Z");
        assert_eq!(s.next_after(utc("2026-01-01T00:00:00Z")), Some(at));
        assert_eq!(s.next_after(at - TimeDelta::milliseconds(1)), Some(at));
        assert_eq!(s.next_after(at), None);
        assert_eq!(s.upcoming(utc("2026-01-01T00:00:00Z"), 5), [at]);
    }

    #[test]
    fn interval() {
        let anchor = utc("2026-01-01T00:00:00.000Z");
        let s = CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: 1500, anchor },
            start_at: None,
            end_at: None,
        };
        assert_eq!(s.next_after(anchor - TimeDelta::days(3)), Some(anchor));
        assert_eq!(s.next_after(anchor), Some(utc("2026-01-01T00:00:01.500Z")));
        assert_eq!(s.next_after(utc("2026-01-01T00:00:01.499999Z")), Some(utc("2026-01-01T00:00:01.500Z")));
        assert_eq!(s.next_after(utc("2026-01-01T00:00:01.500001Z")), Some(utc("2026-01-01T00:00:03Z")));
        assert_eq!(
            s.upcoming(utc("2026-01-01T00:00:02Z"), 3),
            [utc("2026-01-01T00:00:03Z"), utc("2026-01-01T00:00:04.500Z"), utc("2026-01-01T00:00:06Z")]
        );
        // Sub-millisecond anchors are truncated.
        let fine = CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: 1000, anchor: utc("2026-01-01T00:00:00.000999Z") },
            start_at: None,
            end_at: None,
        };
        assert_eq!(fine.next_after(anchor), Some(utc("2026-01-01T00:00:01Z")));
        // Far from the anchor, no overflow.
        let far = s.next_after(utc("2400-06-01T00:00:00Z")).unwrap();
        assert!(far > utc("2400-06-01T00:00:00Z"));
        assert_eq!((far - anchor).num_milliseconds() % 1500, 0);
    }

    #[test]
    fn interval_zero_never_fires() {
        let s = CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: 0, anchor: utc("2026-01-01T00:00:00Z") },
            start_at: None,
            end_at: None,
        };
        assert_eq!(s.next_after(utc("2026-06-01T00:00:00Z")), None);
        assert!(s.upcoming(utc("2025-06-01T00:00:00Z"), 3).is_empty());
    }

    #[test]
    fn window_bounds_are_inclusive() {
        let start = utc("2026-01-10T00:00:00Z");
        let end = utc("2026-01-12T00:00:00Z");
        let s = CompiledSchedule {
            recurrence: Recurrence::Cron(cron("0 0 * * *", "UTC")),
            start_at: Some(start),
            end_at: Some(end),
        };
        assert_eq!(s.next_after(utc("2020-01-01T00:00:00Z")), Some(start));
        assert_eq!(s.upcoming(utc("2020-01-01T00:00:00Z"), 10), [start, utc("2026-01-11T00:00:00Z"), end]);
        assert_eq!(s.next_after(end), None);
        assert_eq!(s.next_after(utc("2030-01-01T00:00:00Z")), None);

        let interval = CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: 7_000, anchor: utc("2026-01-01T00:00:00Z") },
            start_at: Some(utc("2026-01-01T00:00:10Z")),
            end_at: Some(utc("2026-01-01T00:00:28Z")),
        };
        assert_eq!(
            interval.upcoming(utc("2025-01-01T00:00:00Z"), 10),
            [utc("2026-01-01T00:00:14Z"), utc("2026-01-01T00:00:21Z"), utc("2026-01-01T00:00:28Z")]
        );
        let once_outside = CompiledSchedule {
            recurrence: Recurrence::Once { at: utc("2026-01-01T00:00:00Z") },
            start_at: Some(utc("2026-01-02T00:00:00Z")),
            end_at: None,
        };
        assert_eq!(once_outside.next_after(utc("2025-01-01T00:00:00Z")), None);
    }

    #[test]
    fn impossible_expression_ends() {
        let s = cron("0 0 30 2 *", "Europe/Berlin");
        assert_eq!(s.next_after(utc("2026-01-01T00:00:00Z")), None);
        // The cron crate's calendar ends in 2100.
        let daily = cron("@daily", "UTC");
        assert_eq!(daily.next_after(utc("2100-12-31T00:00:00Z")), None);
    }

    #[test]
    fn extreme_instants_do_not_panic() {
        let (min, max) = (DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC);
        for zone in ["Asia/Kolkata", "America/New_York", "Pacific/Kiritimati"] {
            let c = cron("* * * * *", zone);
            assert_eq!(c.next_after(max), None);
            // The crate's calendar starts in 1970: same answer as from 1969.
            assert_eq!(c.next_after(min), c.next_after(utc("1969-12-31T00:00:00Z")));
        }
        for recurrence in [
            Recurrence::Once { at: max },
            Recurrence::Interval { every_ms: u64::MAX, anchor: min },
            Recurrence::Interval { every_ms: 1, anchor: max },
            Recurrence::Cron(cron("0 0 * * *", "UTC")),
        ] {
            let s = CompiledSchedule { recurrence, start_at: Some(min), end_at: Some(max) };
            let _ = s.upcoming(min, 2);
            let _ = s.upcoming(max - TimeDelta::days(1), 2);
        }
        let s = CompiledSchedule {
            recurrence: Recurrence::Interval { every_ms: u64::MAX, anchor: min },
            start_at: None,
            end_at: None,
        };
        assert_eq!(s.next_after(min), None, "the next slot is past chrono's range");
    }

    const ZONES: [&str; 6] =
        ["UTC", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago"];

    fn minute_field() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*".to_owned()),
            (1u32..=30).prop_map(|s| format!("*/{s}")),
            (0u32..60).prop_map(|m| m.to_string()),
            (0u32..60, 0u32..60).prop_map(|(a, b)| format!("{a},{b}")),
            (0u32..30, 30u32..60, 1u32..10).prop_map(|(a, b, s)| format!("{a}-{b}/{s}")),
        ]
    }

    fn hour_field() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*".to_owned()),
            (1u32..=12).prop_map(|s| format!("*/{s}")),
            (0u32..24).prop_map(|h| h.to_string()),
            (0u32..4, 0u32..24).prop_map(|(a, b)| format!("{a},{b}")),
            (0u32..12, 12u32..24).prop_map(|(a, b)| format!("{a}-{b}")),
        ]
    }

    fn cron_expr() -> impl Strategy<Value = String> {
        let dom = prop_oneof![
            6 => prop_oneof![Just("*"), Just("1"), Just("1,15"), Just("10-20"), Just("*/3"), Just("31")],
            3 => prop_oneof![Just("L"), Just("L-3"), Just("15W"), Just("1W"), Just("LW"), Just("L,15")],
        ];
        let month = prop_oneof![Just("*"), Just("1-6"), Just("JAN,JUL"), Just("*/2"), Just("MAR,OCT,NOV")];
        let dow = prop_oneof![
            6 => prop_oneof![Just("*"), Just("1-5"), Just("0,6"), Just("*/2"), Just("5-7"), Just("SUN"), Just("MON-FRI")],
            3 => prop_oneof![Just("5L"), Just("2#2"), Just("MON#1,FRI#3"), Just("1L,3"), Just("0#5")],
        ];
        let seconds = prop_oneof![Just(""), Just("0 "), Just("*/20 ")];
        let fields = (seconds, minute_field(), hour_field(), dom, month, dow)
            .prop_map(|(s, m, h, d, mo, w)| format!("{s}{m} {h} {d} {mo} {w}"));
        prop_oneof![
            8 => fields,
            1 => prop_oneof![Just("@hourly".to_owned()), Just("@daily".to_owned()), Just("@weekly".to_owned())],
        ]
    }

    fn dst_rule() -> impl Strategy<Value = DstRule> {
        let repeated = prop::sample::select(vec![Repeated::First, Repeated::Last, Repeated::Both]);
        let missing = prop::sample::select(vec![Missing::Shift, Missing::Skip]);
        (repeated, missing).prop_map(|(repeated, missing)| DstRule { repeated, missing })
    }

    /// One to three expressions with a DST rule.
    fn cron_schedule() -> impl Strategy<Value = (Vec<String>, DstRule)> {
        (prop::collection::vec(cron_expr(), 1..=3), dst_rule())
    }

    fn cron_of((exprs, rule): &(Vec<String>, DstRule), zone: &str) -> CronSchedule {
        CronSchedule::parse_all(exprs, zone, *rule).unwrap()
    }

    /// The `which`-th change of offset of `zone` in `year` (to the second),
    /// if it has that many.
    fn transition(zone: &str, year: i32, which: usize) -> Option<DateTime<Utc>> {
        let tz: Tz = zone.parse().unwrap();
        let offset = |t: DateTime<Utc>| t.with_timezone(&tz).offset().fix();
        let start = NaiveDate::from_ymd_opt(year, 1, 1)?.and_time(Default::default()).and_utc();
        let day = (0..366)
            .map(|d| start + TimeDelta::days(d))
            .filter(|t| offset(*t) != offset(*t + TimeDelta::days(1)))
            .nth(which)?;
        let (mut lo, mut hi) = (day, day + TimeDelta::days(1));
        while hi - lo > TimeDelta::seconds(1) {
            let mid = lo + (hi - lo) / 2;
            if offset(mid) == offset(lo) { lo = mid } else { hi = mid }
        }
        Some(hi)
    }

    /// Anywhere in 2020..2031, or within 4 hours of one of the zone's
    /// transitions, where the DST rules differ.
    fn when(zone: &str, anywhere: DateTime<Utc>, near: Option<(i32, usize, i64)>) -> DateTime<Utc> {
        near.and_then(|(year, which, lead_s)| {
            transition(zone, year, which)
                .map(|t| t + TimeDelta::milliseconds(lead_s * 1000 + anywhere.timestamp_subsec_millis() as i64))
        })
        .unwrap_or(anywhere)
    }

    fn near() -> impl Strategy<Value = Option<(i32, usize, i64)>> {
        prop::option::of((2020i32..2031, 0usize..2, -4 * 3600i64..4 * 3600))
    }

    fn instant() -> impl Strategy<Value = DateTime<Utc>> {
        // 2020-01-01 .. 2031-01-01, millisecond precision.
        (1_577_836_800_000i64..1_924_992_000_000).prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
    }

    fn is_gap_end(tz: Tz, t: DateTime<Utc>) -> bool {
        let before = (t - TimeDelta::seconds(1)).with_timezone(&tz).offset().fix();
        let after = t.with_timezone(&tz).offset().fix();
        after.local_minus_utc() > before.local_minus_utc()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn cron_fires_increase_and_match(
            schedule in cron_schedule(),
            zone in prop::sample::select(&ZONES[..]),
            anywhere in instant(),
            near in near(),
        ) {
            let s = cron_of(&schedule, zone);
            let (tz, rule) = (s.timezone(), schedule.1);
            let mut cursor = when(zone, anywhere, near);
            for _ in 0..8 {
                let Some(next) = s.next_after(cursor) else { break };
                prop_assert!(next > cursor, "{schedule:?} {zone}: {next} <= {cursor}");
                let wall = next.with_timezone(&tz).naive_local();
                prop_assert!(
                    s.matches_wall(wall) || (is_gap_end(tz, next) && rule.missing == Missing::Shift),
                    "{schedule:?} {zone}: {next} (local {wall}) neither matches nor ends a gap"
                );
                // A repeated wall time fires at the occurrences the rule names.
                if let LocalResult::Ambiguous(a, b) = tz.from_local_datetime(&wall) {
                    let (first, last) = (a.to_utc().min(b.to_utc()), a.to_utc().max(b.to_utc()));
                    match rule.repeated {
                        Repeated::First => prop_assert_eq!(next, first),
                        Repeated::Last => prop_assert_eq!(next, last),
                        Repeated::Both => prop_assert!(next == first || next == last),
                    }
                }
                cursor = next;
            }
        }

        #[test]
        fn several_expressions_fire_the_union_of_their_fires(
            schedule in cron_schedule(),
            zone in prop::sample::select(&ZONES[..]),
            anywhere in instant(),
            near in near(),
        ) {
            let union = cron_of(&schedule, zone);
            let each: Vec<CronSchedule> =
                schedule.0.iter().map(|e| cron_of(&(vec![e.clone()], schedule.1), zone)).collect();
            let mut cursor = when(zone, anywhere, near);
            for _ in 0..6 {
                let want = each.iter().filter_map(|s| s.next_after(cursor)).min();
                prop_assert_eq!(union.next_after(cursor), want, "{:?} {} after {}", schedule, zone, cursor);
                let Some(next) = want else { break };
                cursor = next;
            }
        }

        #[test]
        fn prev_before_inverts_next_after(
            schedule in cron_schedule(),
            zone in prop::sample::select(&ZONES[..]),
            every_ms in 1u64..50_000_000,
            kind in 0u8..4,
            anchor in instant(),
            anywhere in instant(),
            near in near(),
            start in prop::option::of(instant()),
        ) {
            let after = when(zone, anywhere, near);
            let recurrence = match kind {
                0 => Recurrence::Once { at: anchor },
                1 => Recurrence::Interval { every_ms, anchor },
                _ => Recurrence::Cron(cron_of(&schedule, zone)),
            };
            let s = CompiledSchedule { recurrence, start_at: start, end_at: None };
            if let Some(n) = s.next_after(after) {
                prop_assert!(s.fires_at(n));
                match s.next_after(n) {
                    Some(m) => {
                        prop_assert_eq!(s.prev_before(m), Some(n));
                        // Anywhere strictly between two fires, the previous one is n.
                        let mid = n + (m - n) / 2;
                        if mid > n {
                            prop_assert_eq!(s.prev_before(mid), Some(n));
                            prop_assert!(!s.fires_at(mid) || mid == m);
                        }
                    }
                    None => prop_assert_eq!(s.prev_before(n + TimeDelta::days(1)), Some(n)),
                }
                // Nothing fires before the first fire after max(start, epoch).
                let first = s.next_after(DateTime::UNIX_EPOCH - TimeDelta::days(3));
                if let Some(first) = first {
                    prop_assert_eq!(s.prev_before(first), None);
                }
            }
        }

        #[test]
        fn interval_slots(
            every_ms in prop_oneof![1u64..10_000, 1u64..100_000_000, Just(86_400_000u64)],
            anchor in instant(),
            after in instant(),
        ) {
            let s = CompiledSchedule {
                recurrence: Recurrence::Interval { every_ms, anchor },
                start_at: None,
                end_at: None,
            };
            let every = TimeDelta::milliseconds(every_ms as i64);
            let next = s.next_after(after).unwrap();
            prop_assert!(next > after);
            prop_assert_eq!((next - anchor).num_milliseconds() % every_ms as i64, 0);
            prop_assert!(next >= anchor);
            if next == anchor {
                prop_assert!(anchor > after);
            } else {
                prop_assert!(next - every <= after);
            }
            let more = s.upcoming(after, 4);
            prop_assert_eq!(more[0], next);
            for w in more.windows(2) {
                prop_assert_eq!(w[1] - w[0], every);
            }
        }

        #[test]
        fn windows_are_respected(
            schedule in cron_schedule(),
            zone in prop::sample::select(&ZONES[..]),
            every_ms in 1u64..50_000_000,
            kind in 0u8..3,
            anchor in instant(),
            after in instant(),
            start in prop::option::of(instant()),
            len_ms in prop::option::of(0i64..400_000_000_000),
        ) {
            let recurrence = match kind {
                0 => Recurrence::Once { at: anchor },
                1 => Recurrence::Interval { every_ms, anchor },
                _ => Recurrence::Cron(cron_of(&schedule, zone)),
            };
            let end = len_ms.map(|l| start.unwrap_or(anchor) + TimeDelta::milliseconds(l));
            let windowed = CompiledSchedule { recurrence: recurrence.clone(), start_at: start, end_at: end };
            let open = CompiledSchedule { recurrence, start_at: None, end_at: None };
            let fires = windowed.upcoming(after, 4);
            for (i, t) in fires.iter().enumerate() {
                prop_assert!(*t > after);
                prop_assert!(start.is_none_or(|s| *t >= s), "{t} before start");
                prop_assert!(end.is_none_or(|e| *t <= e), "{t} after end");
                if i > 0 {
                    prop_assert!(*t > fires[i - 1]);
                }
            }
            // The window only filters: the first windowed fire is the first
            // unwindowed fire at or after max(after, start).
            let from = match start {
                Some(s) if s > after => s - TimeDelta::milliseconds(1),
                _ => after,
            };
            let expected = open.next_after(from).filter(|t| end.is_none_or(|e| *t <= e));
            prop_assert_eq!(fires.first().copied(), expected);
        }
    }
}

/// The delivery offset of one slot of a job with `jitter_ms`: a fixed
/// pseudo-random value in `[0, jitter_ms)` ms, a hash of the job and the
/// slot, so every node, every re-publish and every view (next, preview,
/// explain) computes the same instant without storing it. The slot keeps its
/// scheduled time and execution id; only when it is delivered moves.
pub fn jitter_offset(job_id: uuid::Uuid, scheduled_at: DateTime<Utc>, jitter_ms: u64) -> TimeDelta {
    use std::hash::Hasher;
    if jitter_ms == 0 {
        return TimeDelta::zero();
    }
    // Fixed keys: the offset must be the same on every node and release.
    let mut h = siphasher::sip::SipHasher13::new_with_keys(0x6372_6f6e_7368_6172, 0x6a69_7474_6572_0001);
    h.write(job_id.as_bytes());
    h.write_i64(scheduled_at.timestamp_millis());
    TimeDelta::milliseconds((h.finish() % jitter_ms) as i64)
}

#[cfg(test)]
mod jitter_tests {
    use super::*;

    #[test]
    fn jitter_is_stable_bounded_and_spread() {
        let at: DateTime<Utc> = "2026-12-01T08:00:00Z".parse().unwrap();
        let offsets: Vec<i64> =
            (0..10_000u128).map(|i| jitter_offset(uuid::Uuid::from_u128(i), at, 1_000).num_milliseconds()).collect();
        assert!(offsets.iter().all(|o| (0..1_000).contains(o)));
        // Every tenth of the window gets about a tenth of the jobs.
        for decile in 0..10 {
            let n = offsets.iter().filter(|o| **o / 100 == decile).count();
            assert!((800..1_200).contains(&n), "decile {decile} has {n} of 10000");
        }
        let id = uuid::Uuid::from_u128(42);
        assert_eq!(jitter_offset(id, at, 1_000), jitter_offset(id, at, 1_000));
        assert_eq!(jitter_offset(id, at, 0), TimeDelta::zero());
    }
}
