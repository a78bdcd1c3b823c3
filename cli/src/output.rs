//! How answers are shown: `table` for people (aligned columns, instants in
//! UTC RFC 3339 with milliseconds), `json` the API's body as it came (for
//! scripts), `yaml` the same document as YAML.
//!
//! Nothing from the API reaches the terminal raw: a table shows every
//! control, bidi or zero-width character of a value as an escape (`\r\n`,
//! `\u{1b}`, `\u{202e}`, `domain::text::escape`), so a value can neither
//! forge a line nor send the terminal an escape sequence; `json` writes
//! those characters as JSON escapes (`\u001b`, the same document), and
//! `yaml` too (a document holding one is written in YAML's JSON form).

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
        Format::Json => Ok(with_newline(json_escaped(raw.trim_end()))),
        Format::Yaml => yaml(value),
        // Every cell is escaped already; this catches a line a view wrote
        // from API data without a cell (its line breaks are the view's own).
        Format::Table => Ok(with_newline(table_escaped(&table(value)))),
    }
}

pub fn yaml(value: &Value) -> Result<String> {
    let text = yaml_serde::to_string(value).map_err(|e| Failure::other(format!("cannot write YAML: {e}")))?;
    if !text.chars().any(|c| crate::text::is_hidden(c) && !matches!(c, '\n' | '\r' | '\t')) {
        return Ok(text);
    }
    // The emitter escapes C0 controls but writes DEL, C1 controls and bidi
    // or zero-width characters raw. Rare: the document is then written in
    // YAML's JSON form (YAML 1.2 is a superset of JSON), whose double-quoted
    // strings take the same `\uXXXX` escapes.
    let json = serde_json::to_string_pretty(value).map_err(|e| Failure::other(format!("cannot write YAML: {e}")))?;
    Ok(with_newline(json_escaped(&json)))
}

/// One value as one line of JSON (JSON Lines), hidden characters escaped.
pub fn json_line(value: &Value) -> String {
    json_escaped(&value.to_string())
}

/// A valid JSON document with every hidden character (`domain::text`)
/// written as a `\uXXXX` escape: such characters can only stand inside
/// strings, where the escape means the same character, so the document is
/// unchanged. Newlines, tabs and carriage returns are left: raw, they can
/// only be whitespace between tokens.
fn json_escaped(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        if crate::text::is_hidden(c) && !matches!(c, '\n' | '\r' | '\t') {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Table text with each hidden character but the line breaks escaped.
fn table_escaped(text: &str) -> String {
    text.split('\n').map(|line| crate::text::escape(line).into_owned()).collect::<Vec<_>>().join("\n")
}

fn with_newline(mut s: String) -> String {
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// An instant as the tables show it: UTC, RFC 3339, milliseconds; `-` for
/// none. Text that is not an instant is shown as [`text`] shows it.
pub fn utc(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => match DateTime::parse_from_rfc3339(s) {
            Ok(t) => t.with_timezone(&Utc).to_rfc3339_opts(SecondsFormat::Millis, true),
            Err(_) => text(v),
        },
        other => text(other),
    }
}

/// A scalar as text (`-` for null); an object or array as compact JSON.
/// Hidden characters are escaped (`\u{1b}`): the text is for a terminal.
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".to_owned(),
        Value::String(s) => crate::text::escape(s).into_owned(),
        other => crate::text::escape(&other.to_string()).into_owned(),
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
/// not padded. A cell's hidden characters are escaped (one cell, one line).
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> =
        rows.iter().map(|row| row.iter().map(|c| crate::text::escape(c).into_owned()).collect()).collect();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
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
    for row in &rows {
        out.push('\n');
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// `KEY:  value` lines, values aligned; a value's hidden characters escaped.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    pairs
        .iter()
        .map(|(k, v)| format!("{k}:{}{}", " ".repeat(width - k.chars().count() + 2), crate::text::escape(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `k=v,k2=v2` of a labels object; `-` when there are none.
pub fn labels(v: &Value) -> String {
    match v.as_object() {
        Some(map) if !map.is_empty() => {
            map.iter().map(|(k, v)| format!("{}={}", crate::text::escape(k), text(v))).collect::<Vec<_>>().join(",")
        }
        _ => "-".to_owned(),
    }
}

/// A job's schedule in one phrase: `cron 0 8 * * * Europe/Berlin`,
/// `cron [0 9 * * MON-FRI; 0 11 * * SAT,SUN] UTC (dst repeated last)`,
/// `every 60000 ms`, `once 2026-12-24T17:00:00.000Z`.
pub fn schedule(s: &Value) -> String {
    let kind = s["kind"].as_str().unwrap_or("?");
    let mut out = match kind {
        "cron" => {
            let exprs = match s["exprs"].as_array() {
                Some(list) => format!("[{}]", list.iter().map(text).collect::<Vec<_>>().join("; ")),
                None => text(&s["expr"]),
            };
            let rule: Vec<String> = ["repeated", "missing"]
                .iter()
                .filter_map(|k| s["dst"][*k].as_str().map(|v| format!("{k} {}", crate::text::escape(v))))
                .collect();
            let rule = if rule.is_empty() { String::new() } else { format!(" (dst {})", rule.join(", ")) };
            format!("cron {exprs} {}{rule}", crate::text::escape(s["timezone"].as_str().unwrap_or("UTC")))
        }
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

/// The table of fire times of `next` and `preview`: every field the API
/// gives a fire time: the UTC instant, the wall time and offset in the
/// schedule's zone (cron), the DST marks, with jitter the delivery instant,
/// and with calendars the one that excludes the slot (`EXCLUDED BY`: the
/// slot is recorded skipped, not delivered).
pub fn fire_times(fires: &Value) -> String {
    let items = fires.as_array().map(Vec::as_slice).unwrap_or_default();
    let jittered = items.iter().any(|f| !f["fires_at"].is_null());
    let excluded = items.iter().any(|f| !f["excluded_by"].is_null());
    let mut headers = vec!["AT (UTC)", "LOCAL", "OFFSET", "DST"];
    if jittered {
        headers.push("DELIVERED AT (UTC)");
    }
    if excluded {
        headers.push("EXCLUDED BY");
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
            if excluded {
                row.push(f["excluded_by"].as_str().unwrap_or_default().to_owned());
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

    /// The class: a table that drops a field the API returns. Every field of
    /// the API's own fire time (`api::model::FireTime`, all set) must show in
    /// the table; a field added to the API without a column fails here.
    #[test]
    fn the_fire_times_table_shows_every_field_the_api_gives() {
        let at: DateTime<Utc> = "2026-03-29T01:00:00Z".parse().unwrap();
        let fire = api::model::FireTime {
            at,
            fires_at: Some(at + chrono::TimeDelta::milliseconds(1234)),
            local: Some("2026-03-29T03:00:00.000+02:00".into()),
            offset: Some("+02:00".into()),
            dst: Some(api::model::DstMark::Gap),
            dst_shift: true,
            excluded_by: Some("holidays".into()),
        };
        let value = serde_json::to_value(&fire).unwrap();
        let shown = fire_times(&json!([value.clone(), {"at": "2026-03-30T01:00:00.000Z"}]));
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[0],
            "AT (UTC)                  LOCAL                          OFFSET  DST                  DELIVERED AT (UTC)        EXCLUDED BY"
        );
        for (key, v) in value.as_object().unwrap() {
            let expected = match key.as_str() {
                "at" => "2026-03-29T01:00:00.000Z".to_owned(),
                "fires_at" => "2026-03-29T01:00:01.234Z".to_owned(),
                "dst" => "gap".to_owned(),
                "dst_shift" => "offset changes".to_owned(),
                "excluded_by" => "holidays".to_owned(),
                "local" | "offset" => v.as_str().unwrap().to_owned(),
                other => panic!("the API gives fire times a field {other:?} that the CLI's table does not show"),
            };
            assert!(lines[1].contains(&expected), "{key}: {expected:?} not in {:?}", lines[1]);
        }
        // A slot no calendar excludes has an empty cell.
        assert!(lines[2].starts_with("2026-03-30T01:00:00.000Z"), "{shown}");
    }

    #[test]
    fn no_value_reaches_the_terminal_raw() {
        let evil = "x\r\nforged\u{1b}[2J\u{7}\u{202e}\u{9b}";
        let t = table(&["A", "B"], &[vec![evil.into(), "b".into()]]);
        assert_eq!(t.lines().count(), 2, "{t}");
        assert!(!t.chars().any(|c| crate::text::is_hidden(c) && c != '\n'), "{t:?}");
        assert!(t.contains("x\\r\\nforged\\u{1b}[2J\\u{7}\\u{202e}\\u{9b}"), "{t}");
        let f = fields(&[("NAME", evil.into())]);
        assert_eq!(f.lines().count(), 1, "{f}");
        assert_eq!(text(&json!(evil)), crate::text::escape(evil));
        assert_eq!(labels(&json!({evil: evil})).lines().count(), 1);
        // A view's own line built from data without a cell is caught too
        // (but for a line break, which views leave to `text`).
        let shown = render(Format::Table, "", &json!(null), |_| "note: \u{1b}[2J\u{202e}\nnext".into()).unwrap();
        assert_eq!(shown, "note: \\u{1b}[2J\\u{202e}\nnext\n");
        // JSON: the same document, the characters as escapes.
        let raw = serde_json::to_string(&json!({"name": evil, "k": "\u{e0001}"})).unwrap();
        let shown = render(Format::Json, &raw, &json!(null), |_| String::new()).unwrap();
        assert!(!shown.trim_end().chars().any(crate::text::is_hidden), "{shown:?}");
        assert_eq!(serde_json::from_str::<Value>(&shown).unwrap(), serde_json::from_str::<Value>(&raw).unwrap());
        // YAML: the same document, the characters as escapes.
        let value = json!({"name": evil, "plain": "ok"});
        let shown = yaml(&value).unwrap();
        assert!(!shown.chars().any(|c| crate::text::is_hidden(c) && c != '\n'), "{shown:?}");
        assert_eq!(yaml_serde::from_str::<Value>(&shown).unwrap(), value);
        assert_eq!(yaml(&json!({"plain": "ok"})).unwrap(), "plain: ok\n");
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
            schedule(&json!({"kind": "cron", "exprs": ["0 9 * * MON-FRI", "0 11 * * SAT,SUN"], "timezone": "UTC",
                             "dst": {"repeated": "last", "missing": "skip"}})),
            "cron [0 9 * * MON-FRI; 0 11 * * SAT,SUN] UTC (dst repeated last, missing skip)"
        );
        assert_eq!(
            schedule(&json!({"kind": "interval", "every_ms": 60000, "max_runs": 3})),
            "every 60000 ms (max 3 runs)"
        );
    }
}
