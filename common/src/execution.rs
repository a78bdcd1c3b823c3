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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_documented() {
        let t = DateTime::parse_from_rfc3339("2026-12-15T15:00:00.123456+00:00").unwrap().with_timezone(&Utc);
        let id = Uuid::nil();
        assert_eq!(execution_id(id, truncate_ms(t)), "00000000-0000-0000-0000-000000000000@2026-12-15T15:00:00.123Z");
        assert_eq!(format_instant(truncate_ms(t) - TimeDelta::milliseconds(123)), "2026-12-15T15:00:00.000Z");
    }
}
