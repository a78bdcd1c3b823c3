//! Execution ids and the one timestamp format used in them and in headers.

use chrono::{DateTime, DurationRound, SecondsFormat, TimeDelta, Utc};
use uuid::Uuid;

/// RFC 3339 with milliseconds and `Z`: `2026-12-15T15:00:00.000Z`.
pub fn format_instant(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Serializes an instant as [`format_instant`] writes it (serde's
/// `serialize_with`).
pub fn serialize_instant<S: serde::Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_instant(*t))
}

/// [`serialize_instant`] for an optional instant (null when absent).
pub fn serialize_opt_instant<S: serde::Serializer>(t: &Option<DateTime<Utc>>, s: S) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => serialize_instant(t, s),
        None => s.serialize_none(),
    }
}

/// Reads an instant (serde's `deserialize_with`). The form cronshard writes
/// (`2026-12-15T15:00:00.000Z`, any number of fraction digits up to nine)
/// is read directly: chrono's general RFC 3339 parser was about 2% of a
/// worker's instructions, reading two instants per fire message. Any other
/// form goes through that parser, as with chrono's own `Deserialize`.
pub fn deserialize_instant<'de, D: serde::Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    struct InstantVisitor;
    impl serde::de::Visitor<'_> for InstantVisitor {
        type Value = DateTime<Utc>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an RFC 3339 instant")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DateTime<Utc>, E> {
            match utc_instant(v) {
                Some(t) => Ok(t),
                None => v.parse::<DateTime<chrono::FixedOffset>>().map(|t| t.to_utc()).map_err(E::custom),
            }
        }
    }
    d.deserialize_str(InstantVisitor)
}

/// `YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z`, or None (a leap second included: the
/// general parser decides those).
fn utc_instant(s: &str) -> Option<DateTime<Utc>> {
    let b = s.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        b.get(range)?.iter().try_fold(0u32, |n, &c| c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0')))
    };
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(at(4, b'-') && at(7, b'-') && at(10, b'T') && at(13, b':') && at(16, b':') && b.last() == Some(&b'Z')) {
        return None;
    }
    let nanos = match b.len() {
        20 => 0,
        n if (22..=30).contains(&n) && at(19, b'.') => digits(20..n - 1)? * 10u32.pow(30 - n as u32),
        _ => return None,
    };
    let date = chrono::NaiveDate::from_ymd_opt(digits(0..4)? as i32, digits(5..7)?, digits(8..10)?)?;
    let (h, m, sec) = (digits(11..13)?, digits(14..16)?, digits(17..19)?);
    if sec >= 60 {
        return None;
    }
    Some(date.and_hms_nano_opt(h, m, sec, nanos)?.and_utc())
}

/// Fire times live at millisecond precision everywhere (ledger key, lock key,
/// execution id), so every instant entering the system is cut to it.
pub fn truncate_ms(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::milliseconds(1)).unwrap_or(t)
}

/// `{job_id}@{scheduled_at}`: the same on every retry, failover and replay of
/// one slot, so receivers can deduplicate on it.
pub fn execution_id(job_id: Uuid, scheduled_at: DateTime<Utc>) -> String {
    format!("{job_id}@{}", format_instant(scheduled_at))
}

/// A manual "trigger now" is not a slot of the schedule and must never be
/// mistaken for one by a receiver that deduplicates: it gets its own suffix.
pub fn manual_execution_id(job_id: Uuid, triggered_at: DateTime<Utc>) -> String {
    format!("{}#manual", execution_id(job_id, triggered_at))
}

/// The slot an execution id names: its job and ledger instant (a manual
/// run's is its trigger instant). None when `id` is not one this module made.
pub fn parse_execution_id(id: &str) -> Option<(Uuid, DateTime<Utc>)> {
    let (job_id, rest) = id.split_once('@')?;
    let instant = rest.strip_suffix("#manual").unwrap_or(rest);
    let at = DateTime::parse_from_rfc3339(instant).ok()?.with_timezone(&Utc);
    let job_id = Uuid::parse_str(job_id).ok()?;
    // Only the canonical form: another spelling of the same instant is not
    // an id this product handed out.
    let made = if rest.ends_with("#manual") { manual_execution_id(job_id, at) } else { execution_id(job_id, at) };
    (made == id).then_some((job_id, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn an_execution_id_reads_back_as_its_slot(secs in 0i64..4_102_444_800, ms in 0i64..1000, manual: bool) {
            let at = DateTime::from_timestamp(secs, 0).unwrap() + TimeDelta::milliseconds(ms);
            let job = Uuid::from_u128(secs as u128 * 7919 + ms as u128);
            let id = if manual { manual_execution_id(job, at) } else { execution_id(job, at) };
            proptest::prop_assert_eq!(parse_execution_id(&id), Some((job, at)));
        }
    }

    #[test]
    fn only_an_execution_id_as_made_is_read() {
        for bad in [
            "",
            "nope",
            "00000000-0000-0000-0000-000000000000",
            "00000000-0000-0000-0000-000000000000@",
            "00000000-0000-0000-0000-000000000000@2026-12-15T15:00:00Z",
            "00000000-0000-0000-0000-000000000000@2026-12-15T15:00:00.000Z#other",
            "0@2026-12-15T15:00:00.000Z",
        ] {
            assert_eq!(parse_execution_id(bad), None, "{bad}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_rfc3339_form_of_an_instant_is_read_directly_as_chrono_reads_it(
            secs in 0i64..4_102_444_800,
            nanos in 0u32..1_000_000_000,
        ) {
            let read = |s: &str| {
                let fast: Result<DateTime<Utc>, serde_json::Error> = deserialize_instant(serde_json::json!(s));
                let chrono: Result<DateTime<Utc>, _> = serde_json::from_value(serde_json::json!(s));
                assert_eq!(fast.as_ref().ok(), chrono.as_ref().ok(), "{s}");
                fast
            };
            let t = DateTime::from_timestamp(secs, nanos).unwrap();
            for form in [
                SecondsFormat::Secs,
                SecondsFormat::Millis,
                SecondsFormat::Micros,
                SecondsFormat::Nanos,
                SecondsFormat::AutoSi,
            ] {
                let text = t.to_rfc3339_opts(form, true);
                proptest::prop_assert!(utc_instant(&text).is_some(), "{}: not read directly", text);
                read(&text).unwrap();
            }
            proptest::prop_assert_eq!(read(&format_instant(t)).unwrap(), truncate_ms(t));
        }
    }

    #[test]
    fn other_forms_are_read_as_chrono_reads_them() {
        let read = |s: &str| {
            let fast: Result<DateTime<Utc>, serde_json::Error> = deserialize_instant(serde_json::json!(s));
            let chrono: Result<DateTime<Utc>, _> = serde_json::from_value(serde_json::json!(s));
            assert_eq!(fast.as_ref().ok(), chrono.as_ref().ok(), "{s}");
            fast
        };
        for other in [
            "2026-12-15T15:00:00.5+02:00",
            "2026-12-15 15:00:00Z",
            "2026-12-15t15:00:00z",
            "2016-12-31T23:59:60.250Z",
            "2026-12-15T15:00:00.1234567891Z",
            "2026-12-15T15:00:00.Z",
        ] {
            assert!(utc_instant(other).is_none(), "{other}: read directly");
            read(other).ok();
        }
        for bad in
            ["", "2026-02-30T00:00:00Z", "2026-12-15T24:00:00Z", "2026-12-15T15:00Z", "soon", "2026-12-15T15:00:00.000"]
        {
            assert!(read(bad).is_err(), "{bad}: accepted");
        }
    }

    #[test]
    fn formats_as_documented() {
        let t = DateTime::parse_from_rfc3339("2026-12-15T15:00:00.123456+00:00").unwrap().with_timezone(&Utc);
        let id = Uuid::nil();
        assert_eq!(execution_id(id, truncate_ms(t)), "00000000-0000-0000-0000-000000000000@2026-12-15T15:00:00.123Z");
        assert_eq!(format_instant(truncate_ms(t) - TimeDelta::milliseconds(123)), "2026-12-15T15:00:00.000Z");
    }
}
