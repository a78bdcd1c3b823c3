//! The worked DST examples of docs/schedules.md are what the code does:
//! every row of the table under "Choosing the rule" is recomputed here, and
//! the table covers every rule at both transitions of each zone it names.

use std::collections::BTreeSet;

use chrono::{NaiveDate, TimeDelta};
use chrono_tz::Tz;
use domain::schedule::{CompiledSchedule, CronSchedule, DstRule, Recurrence};

const DOC: &str = include_str!("../../../docs/schedules.md");

/// The table's rows: zone and local day, expression, rule (JSON), fires.
fn rows() -> Vec<[String; 4]> {
    let start = DOC.find("### Choosing the rule").expect("docs/schedules.md has a section \"Choosing the rule\"");
    DOC[start..]
        .lines()
        .skip_while(|l| !l.starts_with("| zone"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells: Vec<String> = l.trim_matches('|').split('|').map(|c| c.trim().to_owned()).collect();
            cells.try_into().unwrap_or_else(|c: Vec<String>| panic!("4 cells expected: {c:?}"))
        })
        .collect()
}

fn unquote(cell: &str) -> &str {
    cell.trim().trim_start_matches('`').trim_end_matches('`')
}

/// The fires cell the code gives for one row: each fire whose wall time
/// falls on the local day, as `instant` (local time and zone abbreviation).
fn fires_cell(zone: &str, day: NaiveDate, expr: &str, rule: DstRule) -> String {
    let tz: Tz = zone.parse().unwrap();
    let cron = CronSchedule::parse_all(&[expr], zone, rule).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let schedule = CompiledSchedule { recurrence: Recurrence::Cron(cron), start_at: None, end_at: None };
    let from = day.and_hms_opt(0, 0, 0).unwrap().and_utc() - TimeDelta::days(1);
    let fires: Vec<String> = schedule
        .fires_after(from)
        .map(|t| t.with_timezone(&tz))
        .skip_while(|t| t.date_naive() < day)
        .take_while(|t| t.date_naive() == day)
        .map(|t| format!("`{}` ({})", t.to_utc().format("%Y-%m-%dT%H:%M:%SZ"), t.format("%H:%M %Z")))
        .collect();
    if fires.is_empty() { "none".to_owned() } else { fires.join(", ") }
}

#[test]
fn the_worked_dst_examples_are_what_the_code_does() {
    let rows = rows();
    assert!(rows.len() >= 10, "the table has {} rows", rows.len());
    let mut wrong = Vec::new();
    let mut covered = BTreeSet::new();
    for [place, expr, rule_cell, fires] in &rows {
        let (zone, day) = place.split_once(", ").unwrap_or_else(|| panic!("\"zone, day\" expected: {place}"));
        let day: NaiveDate = day.parse().unwrap_or_else(|e| panic!("{day}: {e}"));
        let rule: DstRule = serde_json::from_str(unquote(rule_cell)).unwrap_or_else(|e| panic!("{rule_cell}: {e}"));
        let want = fires_cell(zone, day, unquote(expr), rule);
        if *fires != want {
            wrong.push(format!("| {place} | {expr} | {rule_cell} | {want} |"));
        }
        covered.insert((zone.to_owned(), day, format!("{:?}", rule.repeated), format!("{:?}", rule.missing)));
    }
    assert!(
        wrong.is_empty(),
        "rows of docs/schedules.md that the code answers otherwise; the code's rows:\n{}",
        wrong.join("\n")
    );
    // Each zone shows each choice at its transition.
    for zone in ["Europe/Berlin", "America/New_York"] {
        for repeated in ["First", "Last", "Both"] {
            assert!(
                covered.iter().any(|(z, _, r, _)| z == zone && r == repeated),
                "{zone}: no row for repeated {repeated}"
            );
        }
        for missing in ["Shift", "Skip"] {
            assert!(
                covered.iter().any(|(z, _, _, m)| z == zone && m == missing),
                "{zone}: no row for missing {missing}"
            );
        }
    }
}
