//! How answers are shown: `table` for people (aligned columns, instants in
//! UTC RFC 3339 with milliseconds), `json` the API's body as it came (for
//! scripts), `yaml` the same document as YAML.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;

use crate::failure::{Failure, Result};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

/// The text to print for an answer: its raw JSON, its YAML, or the table
/// `table` makes of it.
pub fn render(format: Format, raw: &str, value: &Value, table: impl FnOnce(&Value) -> String) -> Result<String> {
    match format {
        Format::Json => Ok(with_newline(raw.trim_end().to_owned())),
        Format::Yaml => yaml(value),
        Format::Table => Ok(with_newline(table(value))),
    }
}

pub fn yaml(value: &Value) -> Result<String> {
    yaml_serde::to_string(value).map_err(|e| Failure::other(format!("cannot write YAML: {e}")))
}

fn with_newline(mut s: String) -> String {
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// An instant as the tables show it: UTC, RFC 3339, milliseconds; `-` for
/// none. Text that is not an instant is shown as it is.
pub fn utc(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => match DateTime::parse_from_rfc3339(s) {
            Ok(t) => t.with_timezone(&Utc).to_rfc3339_opts(SecondsFormat::Millis, true),
            Err(_) => s.clone(),
        },
        other => text(other),
    }
}

/// A scalar as text (`-` for null); an object or array as compact JSON.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// At most `max` characters of `s` on one line, with `…` when cut.
pub fn cut(s: &str, max: usize) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut out: String = one_line.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// Columns aligned on the widest cell, two spaces apart; the last column is
/// not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 == widths.len() {
                out.push_str(cell);
            } else {
                out.push_str(cell);
                out.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(&mut headers.iter().copied());
    for row in rows {
        out.push('\n');
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// `KEY:  value` lines, values aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k}:{}{v}", " ".repeat(width - k.chars().count() + 2)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `k=v,k2=v2` of a labels object; `-` when there are none.
pub fn labels(v: &Value) -> String {
    match v.as_object() {
        Some(map) if !map.is_empty() => {
            map.iter().map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>().join(",")
        }
        _ => "-".to_owned(),
    }
}

/// A job's schedule in one phrase: `cron 0 8 * * * Europe/Berlin`,
/// `every 60000 ms`, `once 2026-12-24T17:00:00.000Z`.
pub fn schedule(s: &Value) -> String {
    let kind = s["kind"].as_str().unwrap_or("?");
    let mut out = match kind {
        "cron" => format!("cron {} {}", text(&s["expr"]), s["timezone"].as_str().unwrap_or("UTC")),
        "interval" => format!("every {} ms", text(&s["every_ms"])),
        "once" => format!("once {}", utc(&s["at"])),
        other => other.to_owned(),
    };
    if let Some(n) = s["max_runs"].as_u64() {
        out.push_str(&format!(" (max {n} runs)"));
    }
    out
}

/// How DST bent a fire time (`dst`, `dst_shift` of the API): `gap`,
/// `overlap`, with `offset changes` when the zone's offset changes at it.
pub fn dst(fire: &Value) -> String {
    let mark = fire["dst"].as_str();
    let shift = fire["dst_shift"].as_bool().unwrap_or(false);
    match (mark, shift) {
        (Some(m), true) => format!("{m}, offset changes"),
        (Some(m), false) => m.to_owned(),
        (None, true) => "offset changes".to_owned(),
        (None, false) => String::new(),
    }
}

/// The table of fire times of `next` and `preview`: the UTC instant, the
/// wall time and offset in the schedule's zone (cron), the DST mark and,
/// with jitter, the delivery instant.
pub fn fire_times(fires: &Value) -> String {
    let items = fires.as_array().map(Vec::as_slice).unwrap_or_default();
    let jittered = items.iter().any(|f| !f["fires_at"].is_null());
    let mut headers = vec!["AT (UTC)", "LOCAL", "OFFSET", "DST"];
    if jittered {
        headers.push("DELIVERED AT (UTC)");
    }
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|f| {
            let mut row = vec![
                utc(&f["at"]),
                f["local"].as_str().unwrap_or("-").to_owned(),
                f["offset"].as_str().unwrap_or("-").to_owned(),
                dst(f),
            ];
            if jittered {
                row.push(utc(&f["fires_at"]));
            }
            row
        })
        .collect();
    table(&headers, &rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_and_instants_are_utc_with_ms() {
        let t = table(&["A", "LONGER", "C"], &[vec!["xyz".into(), "1".into(), "last".into()]]);
        assert_eq!(t, "A    LONGER  C\nxyz  1       last");
        assert_eq!(utc(&json!("2026-03-29T03:00:00+02:00")), "2026-03-29T01:00:00.000Z");
        assert_eq!(utc(&json!(null)), "-");
        assert_eq!(fields(&[("ID", "x".into()), ("VERSION", "3".into())]), "ID:       x\nVERSION:  3");
        assert_eq!(cut("a  b\nc", 10), "a b c");
        assert_eq!(cut("abcdefghijkl", 5), "abcd…");
    }

    #[test]
    fn fire_times_show_local_time_and_dst_marks() {
        let fires = json!([
            {"at": "2026-03-28T01:30:00.000Z", "local": "2026-03-28T02:30:00.000+01:00", "offset": "+01:00"},
            {"at": "2026-03-29T01:00:00.000Z", "local": "2026-03-29T03:00:00.000+02:00", "offset": "+02:00",
             "dst": "gap", "dst_shift": true},
        ]);
        let shown = fire_times(&fires);
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(lines[0], "AT (UTC)                  LOCAL                          OFFSET  DST");
        assert_eq!(lines[2], "2026-03-29T01:00:00.000Z  2026-03-29T03:00:00.000+02:00  +02:00  gap, offset changes");
        assert_eq!(
            schedule(&json!({"kind": "cron", "expr": "0 8 * * *", "timezone": "Europe/Berlin"})),
            "cron 0 8 * * * Europe/Berlin"
        );
        assert_eq!(
            schedule(&json!({"kind": "interval", "every_ms": 60000, "max_runs": 3})),
            "every 60000 ms (max 3 runs)"
        );
    }
}
