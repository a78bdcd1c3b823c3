//! Calendars: named sets of excluded times (holidays, maintenance windows,
//! weekends) that jobs reference by name. A slot of a job falls on an
//! excluded time when, in the calendar's time zone, its date is one of the
//! calendar's `dates`, lies in one of its `ranges` (both ends included), or
//! its wall time matches one of its `rules` (cron expressions matched at
//! their own resolution: `* * * * SAT,SUN` excludes weekends, `* 0-5 * * *`
//! nights). Such a slot is not fired: the ledger records it `skipped`, reason
//! `calendar:NAME`.

use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::job::FieldError;
use crate::schedule::{CronSchedule, parse_timezone};

pub mod limits {
    pub const DATES_MAX: usize = 1_000;
    pub const RANGES_MAX: usize = 1_000;
    pub const RULES_MAX: usize = 50;
    pub const DESCRIPTION_MAX_CHARS: usize = 1_000;
}

/// A calendar as the API takes and shows it (and `calendars.spec` stores).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CalendarSpec {
    /// IANA zone in which dates, ranges and rules are read.
    #[cfg_attr(feature = "openapi", schema(example = "Europe/Berlin"))]
    pub timezone: String,
    /// Excluded days, `YYYY-MM-DD`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["2026-12-25", "2026-12-26"])))]
    pub dates: Vec<NaiveDate>,
    /// Excluded stretches of days, both ends included.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<DateRange>,
    /// Excluded wall times, as cron expressions (5 or 6 fields).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "openapi", schema(example = json!(["* * * * SAT,SUN"])))]
    pub rules: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DateRange {
    pub from: NaiveDate,
    pub to: NaiveDate,
}

/// A calendar ready to answer "is this instant excluded?".
#[derive(Debug, Clone)]
pub struct Calendar {
    pub name: String,
    zone: Tz,
    /// Sorted, for binary search.
    dates: Vec<NaiveDate>,
    ranges: Vec<DateRange>,
    rules: Vec<CronSchedule>,
}

impl Calendar {
    /// Compiles a stored spec (validated by the API when it was written).
    pub fn compile(name: &str, spec: &CalendarSpec) -> Result<Calendar, String> {
        let zone = parse_timezone(&spec.timezone).map_err(|e| e.message)?;
        let rules = spec
            .rules
            .iter()
            .map(|r| CronSchedule::parse(r, &spec.timezone).map_err(|e| e.message))
            .collect::<Result<Vec<_>, _>>()?;
        let mut dates = spec.dates.clone();
        dates.sort();
        Ok(Calendar { name: name.to_owned(), zone, dates, ranges: spec.ranges.clone(), rules })
    }

    /// Whether the calendar excludes the instant.
    pub fn excludes(&self, at: DateTime<Utc>) -> bool {
        let day = at.with_timezone(&self.zone).date_naive();
        self.dates.binary_search(&day).is_ok()
            || self.ranges.iter().any(|r| r.from <= day && day <= r.to)
            || self.rules.iter().any(|rule| rule.matches_wall_time(at))
    }
}

/// The first of `calendars` that excludes `at`, by name.
pub fn first_excluding<'a>(calendars: impl IntoIterator<Item = &'a Calendar>, at: DateTime<Utc>) -> Option<&'a str> {
    calendars.into_iter().find(|c| c.excludes(at)).map(|c| c.name.as_str())
}

impl CalendarSpec {
    /// Validates a calendar given as JSON, reporting every problem with its field.
    pub fn from_json(value: &Value) -> Result<CalendarSpec, Vec<FieldError>> {
        let mut errors = Vec::new();
        let Some(map) = value.as_object() else {
            return Err(vec![FieldError::new("", "the request body must be a JSON object")]);
        };
        let allowed = ["timezone", "dates", "ranges", "rules", "description"];
        for key in map.keys().filter(|k| !allowed.contains(&k.as_str())) {
            errors.push(FieldError::new(
                crate::text::excerpt(key, crate::job::limits::KEY_IN_PATH_MAX_CHARS),
                format!("unknown field; expected one of: {}", allowed.join(", ")),
            ));
        }
        let timezone = match map.get("timezone").and_then(Value::as_str) {
            Some(tz) => match parse_timezone(tz) {
                Ok(_) => Some(tz.to_owned()),
                Err(e) => {
                    errors.push(FieldError::new("timezone", e.message));
                    None
                }
            },
            None => {
                errors.push(FieldError::new("timezone", "is required: an IANA time zone such as Europe/Berlin"));
                None
            }
        };
        let dates = array(map, "dates", limits::DATES_MAX, &mut errors)
            .iter()
            .enumerate()
            .filter_map(|(i, v)| date(v, &format!("dates[{i}]"), &mut errors))
            .collect();
        let mut ranges = Vec::new();
        for (i, v) in array(map, "ranges", limits::RANGES_MAX, &mut errors).iter().enumerate() {
            let field = format!("ranges[{i}]");
            let Some(range) = v.as_object() else {
                errors.push(FieldError::new(&field, "must be an object with from and to (YYYY-MM-DD)"));
                continue;
            };
            for key in range.keys().filter(|k| !["from", "to"].contains(&k.as_str())) {
                let key = crate::text::excerpt(key, crate::job::limits::KEY_IN_PATH_MAX_CHARS);
                errors.push(FieldError::new(format!("{field}.{key}"), "unknown field; expected one of: from, to"));
            }
            let from = date(range.get("from").unwrap_or(&Value::Null), &format!("{field}.from"), &mut errors);
            let to = date(range.get("to").unwrap_or(&Value::Null), &format!("{field}.to"), &mut errors);
            if let (Some(from), Some(to)) = (from, to) {
                if to < from {
                    errors.push(FieldError::new(format!("{field}.to"), "must not be before from"));
                } else {
                    ranges.push(DateRange { from, to });
                }
            }
        }
        let mut rules = Vec::new();
        for (i, v) in array(map, "rules", limits::RULES_MAX, &mut errors).iter().enumerate() {
            let field = format!("rules[{i}]");
            match v.as_str() {
                Some(expr) if expr.len() > crate::job::limits::CRON_EXPR_MAX_BYTES => errors.push(FieldError::new(
                    &field,
                    format!("must be at most {} bytes", crate::job::limits::CRON_EXPR_MAX_BYTES),
                )),
                Some(expr) => match CronSchedule::parse(expr, timezone.as_deref().unwrap_or("UTC")) {
                    Ok(_) => rules.push(expr.to_owned()),
                    Err(e) => errors.push(FieldError::new(&field, e.message)),
                },
                None => errors.push(FieldError::new(&field, "must be a cron expression (a string)")),
            }
        }
        let description = match map.get("description") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.chars().count() <= limits::DESCRIPTION_MAX_CHARS => Some(s.clone()),
            Some(_) => {
                errors.push(FieldError::new(
                    "description",
                    format!("must be a string of at most {} characters", limits::DESCRIPTION_MAX_CHARS),
                ));
                None
            }
        };
        match timezone {
            Some(timezone) if errors.is_empty() => Ok(CalendarSpec { timezone, dates, ranges, rules, description }),
            _ => Err(crate::job::cap_field_errors(errors)),
        }
    }
}

fn array<'a>(map: &'a Map<String, Value>, key: &str, max: usize, errors: &mut Vec<FieldError>) -> &'a [Value] {
    match map.get(key) {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) if items.len() <= max => items,
        Some(Value::Array(_)) => {
            errors.push(FieldError::new(key, format!("must have at most {max} entries")));
            &[]
        }
        Some(_) => {
            errors.push(FieldError::new(key, "must be an array"));
            &[]
        }
    }
}

fn date(value: &Value, field: &str, errors: &mut Vec<FieldError>) -> Option<NaiveDate> {
    match value.as_str().map(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d")) {
        Some(Ok(d)) => Some(d),
        _ => {
            errors.push(FieldError::new(field, "must be a date such as 2026-12-25 (YYYY-MM-DD)"));
            None
        }
    }
}

/// The key of a calendar in a scheduler's map: names are per namespace.
pub fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn dates_ranges_and_rules_are_read_in_the_calendars_zone() {
        let spec = CalendarSpec::from_json(&json!({
            "timezone": "Europe/Berlin",
            "dates": ["2026-12-25"],
            "ranges": [{"from": "2026-12-30", "to": "2027-01-01"}],
            "rules": ["* * * * SAT,SUN", "* 0-5 * * *"],
        }))
        .unwrap();
        let c = Calendar::compile("holidays", &spec).unwrap();
        // 23:30 UTC on the 24th is 00:30 on the 25th in Berlin.
        assert!(c.excludes(t("2026-12-24T23:30:00Z")));
        assert!(!c.excludes(t("2026-12-24T10:00:00Z")));
        assert!(c.excludes(t("2027-01-01T12:00:00Z")));
        // 23:00 UTC on the 1st is 00:00 on the 2nd in Berlin: the night rule.
        assert!(c.excludes(t("2027-01-01T23:00:00Z")));
        // Monday 2027-01-04 at 13:00 Berlin: nothing excludes it.
        assert!(!c.excludes(t("2027-01-04T12:00:00Z")));
        // Saturday 2026-12-05, any time of day.
        assert!(c.excludes(t("2026-12-05T14:17:31Z")));
        // A Wednesday at 05:59:59 Berlin is night, 06:00 is not.
        assert!(c.excludes(t("2026-12-09T04:59:59Z")));
        assert!(!c.excludes(t("2026-12-09T05:00:00Z")));
    }

    #[test]
    fn bad_calendars_name_each_bad_field() {
        let errors = CalendarSpec::from_json(&json!({
            "timezone": "Mars/Olympus", "dates": ["2026-13-01"], "ranges": [{"from": "2026-02-02", "to": "2026-02-01"}],
            "rules": ["not cron"], "colour": "red",
        }))
        .unwrap_err();
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        for f in ["timezone", "dates[0]", "ranges[0].to", "rules[0]", "colour"] {
            assert!(fields.contains(&f), "{f} not in {fields:?}");
        }
    }
}
