//! cronshard's recurrence code against an evaluator it did not write:
//! Python's croniter, on random expressions within the syntax both read the
//! same way (5 and 6 fields, lists, ranges, steps, names, `?`, the
//! day-of-month/day-of-week OR rule, `L` and `nW` in day-of-month, `nL` and
//! `n#k` in day-of-week).
//!
//! What is compared is the expression's semantics: the next naive wall
//! times after a start, the schedule read in UTC. How wall times map to
//! instants across DST transitions is the tzdb reference test's
//! (`schedule_dst.rs`).
//!
//! Left out, because croniter reads them otherwise: an equal range (`5-5`
//! is every value to croniter), a day-of-week `N/step` (cronie's `N-7/step`
//! here), a day-of-week `#`/`L` beside a restricted day-of-month or a plain
//! weekday, `nW` beside anything, `nW` past the 28th (croniter moves it to
//! a shorter month's last day; a month without that day has no fire here),
//! a `*` inside a day field's list but not at its start (croniter then
//! reads the other day field as `*` when it names every day, where crontab
//! keeps it restricted and the OR rule applies), and the forms croniter
//! lacks (`L-n`, `LW`).
//!
//! Environment: `CRON_ORACLE_EXPRS` expressions (default 2000, a few
//! seconds), `CRON_ORACLE_SEED` to repeat a run (each run prints its seed),
//! `CRONITER_VENV` the venv `deploy/scripts/services.sh ensure croniter`
//! makes.

use std::io::Write as _;

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};
use domain::schedule::CronSchedule;
use serde_json::{Value, json};
use testing::SeededRng;

/// Fire times compared per expression.
const FIRES: usize = 6;

/// One expression as cronshard and croniter spell it (they differ only in
/// the last weekday: `5L` here, `L5` there).
#[derive(Debug, Clone)]
struct Expr {
    ours: String,
    theirs: String,
}

const MONTHS: [&str; 12] = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

fn between(rng: &mut SeededRng, lo: u32, hi: u32) -> u32 {
    rng.between(i64::from(lo), i64::from(hi)) as u32
}

/// A value of a field, by name when `names` are given (either case).
fn value(rng: &mut SeededRng, v: u32, lo: u32, names: Option<&[&str]>) -> String {
    match names {
        Some(names) => {
            let name = names[(v - lo) as usize];
            if rng.one_in(2) { name.to_lowercase() } else { name.to_owned() }
        }
        None => v.to_string(),
    }
}

/// One item of a plain field in `lo..=hi`: a value, a range (never an equal
/// one), a stepped range, `start/step` (not for day-of-week), or `*/step`.
fn item(rng: &mut SeededRng, lo: u32, hi: u32, names: Option<&[&str]>, start_step: bool) -> String {
    // Both ends of a range by name or both by number: the cron crate reads
    // no mix for months.
    let names = names.filter(|_| rng.one_in(3));
    match rng.below(10) {
        0..=3 => {
            let v = between(rng, lo, hi);
            value(rng, v, lo, names)
        }
        4 | 5 => {
            let a = between(rng, lo, hi - 1);
            let b = between(rng, a + 1, hi);
            format!("{}-{}", value(rng, a, lo, names), value(rng, b, lo, names))
        }
        6 => {
            let a = between(rng, lo, hi - 1);
            let b = between(rng, a + 1, hi);
            format!("{a}-{b}/{}", between(rng, 1, hi - lo))
        }
        7 if start_step => format!("{}/{}", between(rng, lo, hi), between(rng, 1, hi - lo)),
        _ => format!("*/{}", between(rng, 1, hi.max(2) - 1)),
    }
}

/// A plain field: `*` now and then, else a list of one to three items.
fn field(rng: &mut SeededRng, lo: u32, hi: u32, names: Option<&[&str]>, start_step: bool) -> String {
    if rng.one_in(4) {
        return "*".to_owned();
    }
    let n = 1 + usize::from(rng.one_in(3)) + usize::from(rng.one_in(4));
    (0..n).map(|_| item(rng, lo, hi, names, start_step)).collect::<Vec<_>>().join(",")
}

/// A plain day field: as [`field`], with a `*` item only at the start.
fn day_field(rng: &mut SeededRng, lo: u32, hi: u32, names: Option<&[&str]>, start_step: bool) -> String {
    let f = field(rng, lo, hi, names, start_step);
    let mut items = f.split(',');
    let first = items.next().unwrap_or_default().to_owned();
    std::iter::once(first)
        .chain(items.map(|i| if i.starts_with('*') { between(rng, lo, hi).to_string() } else { i.to_owned() }))
        .collect::<Vec<_>>()
        .join(",")
}

/// The two day fields, as (ours, theirs) for each.
fn day_fields(rng: &mut SeededRng) -> ((String, String), (String, String)) {
    let same = |f: String| (f.clone(), f);
    match rng.below(12) {
        // The last day of the month, alone or in a list, with any weekday field.
        0 | 1 => {
            let dom = if rng.one_in(2) { "L".to_owned() } else { format!("{},L", between(rng, 1, 28)) };
            let dow = if rng.one_in(2) { "*".to_owned() } else { day_field(rng, 0, 6, Some(&DAYS), false) };
            (same(dom), same(dow))
        }
        // The weekday nearest a day, alone.
        2 => (same(format!("{}W", between(rng, 1, 28))), same("*".to_owned())),
        // Nth and last weekdays of the month, with any day-of-month unrestricted.
        3 | 4 => {
            let n = 1 + usize::from(rng.one_in(2)) + usize::from(rng.one_in(3));
            let (mut ours, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..n {
                let day = between(rng, 0, 6);
                if rng.one_in(3) {
                    // croniter reads `L` before a number only.
                    ours.push(format!("{day}L"));
                    theirs.push(format!("L{day}"));
                } else {
                    let names = rng.one_in(2).then_some(&DAYS[..]);
                    let day = value(rng, day, 0, names);
                    let k = between(rng, 1, 5);
                    ours.push(format!("{day}#{k}"));
                    theirs.push(format!("{day}#{k}"));
                }
            }
            let dom = if rng.one_in(4) { "?" } else { "*" };
            (same(dom.to_owned()), (ours.join(","), theirs.join(",")))
        }
        // Plain fields: restricted in both (OR), `*`-prefixed (AND), `?`.
        _ => {
            let dom = if rng.one_in(8) { "?".to_owned() } else { day_field(rng, 1, 31, None, true) };
            let dow = match rng.below(8) {
                0 => "?".to_owned(),
                1 => "7".to_owned(),
                _ => day_field(rng, 0, 6, Some(&DAYS), false),
            };
            (same(dom), same(dow))
        }
    }
}

fn expression(rng: &mut SeededRng) -> Expr {
    let seconds = rng.one_in(4).then(|| field(rng, 0, 59, None, true));
    let minute = field(rng, 0, 59, None, true);
    let hour = field(rng, 0, 23, None, true);
    let ((dom_ours, dom_theirs), (dow_ours, dow_theirs)) = day_fields(rng);
    let month = field(rng, 1, 12, Some(&MONTHS), true);
    let prefix = seconds.map(|s| format!("{s} ")).unwrap_or_default();
    Expr {
        ours: format!("{prefix}{minute} {hour} {dom_ours} {month} {dow_ours}"),
        theirs: format!("{prefix}{minute} {hour} {dom_theirs} {month} {dow_theirs}"),
    }
}

fn naive(s: &str) -> NaiveDateTime {
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// croniter's answers to `queries`, one per query, from the venv's Python.
fn ask_croniter(queries: &[Value]) -> Vec<Value> {
    let venv = std::env::var("CRONITER_VENV").unwrap_or_else(|_| {
        let cache = std::env::var("XDG_CACHE_HOME")
            .unwrap_or_else(|_| format!("{}/.cache", std::env::var("HOME").unwrap_or_default()));
        format!("{cache}/cronshard/croniter-venv")
    });
    let python = format!("{venv}/bin/python");
    assert!(
        std::path::Path::new(&python).exists(),
        "croniter is missing ({python}): run `deploy/scripts/services.sh ensure croniter`"
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/croniter_oracle.py");
    let mut child = std::process::Command::new(&python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("croniter's script starts");
    let mut input = String::new();
    for q in queries {
        input.push_str(&q.to_string());
        input.push('\n');
    }
    // Written from a thread: the script answers while it reads, and a full
    // stdout pipe would otherwise stop both.
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).expect("the script reads"));
    let out = child.wait_with_output().expect("croniter's script runs");
    writer.join().expect("queries written");
    assert!(out.status.success(), "croniter's script failed: {}", String::from_utf8_lossy(&out.stderr));
    let answers: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(answers.len(), queries.len(), "one answer per query");
    answers
}

/// Up to FIRES wall times after `start` by cronshard, read in UTC.
fn ours(expr: &str, start: NaiveDateTime) -> Vec<NaiveDateTime> {
    let schedule = CronSchedule::parse(expr, "UTC").unwrap_or_else(|e| panic!("{expr:?} is refused: {e}"));
    let mut cursor: DateTime<Utc> = start.and_utc();
    let mut fires = Vec::new();
    while fires.len() < FIRES {
        let Some(next) = schedule.next_after(cursor) else { break };
        fires.push(next.naive_utc());
        cursor = next;
    }
    fires
}

#[test]
fn random_expressions_fire_as_croniter_says() {
    let count: usize = std::env::var("CRON_ORACLE_EXPRS").ok().and_then(|v| v.parse().ok()).unwrap_or(2000);
    let seed: u64 = std::env::var("CRON_ORACLE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
    });
    println!("cron oracle: {count} expressions, seed {seed} (CRON_ORACLE_SEED={seed} repeats this run)");
    let mut rng = SeededRng::new(seed);

    let cases: Vec<(Expr, NaiveDateTime)> = (0..count)
        .map(|_| {
            let expr = expression(&mut rng);
            // 2000-01-01 .. 2060-01-01, any second.
            let start = DateTime::from_timestamp(rng.between(946_684_800, 2_840_140_800), 0).unwrap().naive_utc();
            (expr, start)
        })
        .collect();
    let queries: Vec<Value> = cases
        .iter()
        .map(|(e, start)| json!({ "expr": e.theirs, "start": start.format("%Y-%m-%dT%H:%M:%S").to_string(), "n": FIRES }))
        .collect();
    let answers = ask_croniter(&queries);

    let mut mismatches = Vec::new();
    let mut exhausted = 0;
    for ((expr, start), answer) in cases.iter().zip(&answers) {
        if let Some(error) = answer["error"].as_str() {
            mismatches.push(format!("{:?}: croniter refuses {:?}: {error}", expr.ours, expr.theirs));
            continue;
        }
        let theirs: Vec<NaiveDateTime> =
            answer["fires"].as_array().unwrap().iter().map(|f| naive(f.as_str().unwrap())).collect();
        let ours = ours(&expr.ours, *start);
        let agree = if answer["exhausted"] == true {
            exhausted += 1;
            // croniter looks 50 years ahead: nothing of ours may fire in them.
            let last = theirs.last().copied().unwrap_or(*start);
            ours.len() > theirs.len()
                && ours[..theirs.len()] == theirs[..]
                && ours[theirs.len()] - last > TimeDelta::days(49 * 365)
                || ours == theirs
        } else {
            ours == theirs
        };
        if !agree {
            mismatches.push(format!(
                "{:?} (croniter {:?}) after {start}:\n    ours     {:?}\n    croniter {:?}",
                expr.ours, expr.theirs, ours, theirs
            ));
        }
    }
    println!("cron oracle: {} agree ({exhausted} with no fire within 50 years)", count - mismatches.len());
    assert!(
        mismatches.is_empty(),
        "{} of {count} expressions disagree with croniter (seed {seed}; CRON_ORACLE_SEED={seed} repeats it):\n{}",
        mismatches.len(),
        mismatches.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}
