//! Figures and how every scenario hands them back: percentiles, the
//! lateness-over-time series, and the one report writer (a JSON file in the
//! output directory plus a readable table on stdout).
//!
//! A report's `rows` are the table: the same label/value pairs are printed,
//! stored in the JSON and rendered into `docs/benchmarks.md` by `report`
//! (see `doc.rs`), so no scenario formats its figures twice.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Value, json};

/// Nearest-rank percentile of an ascending slice (`p` in 0..=1).
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Summary of a set of millisecond values.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Percentiles {
    pub count: usize,
    pub min: i64,
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
    pub max: i64,
}

impl Percentiles {
    /// `None` for an empty set.
    pub fn of(mut values: Vec<i64>) -> Option<Self> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable();
        Some(Self {
            count: values.len(),
            min: values[0],
            p50: percentile(&values, 0.5),
            p90: percentile(&values, 0.9),
            p99: percentile(&values, 0.99),
            max: values[values.len() - 1],
        })
    }

    /// `p50 / p90 / p99 / max ms`, the way every table shows lateness.
    pub fn cell(p: Option<Self>) -> String {
        match p {
            Some(p) => format!("{} / {} / {} / {} ms", fmt_int(p.p50), fmt_int(p.p90), fmt_int(p.p99), fmt_int(p.max)),
            None => "no deliveries".into(),
        }
    }
}

/// Lateness per second of scheduled time, relative to a scenario's time zero.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LatenessSeries {
    pub points: Vec<SeriesPoint>,
    /// Instants worth marking on a plot (seconds from time zero, label).
    pub events: Vec<(f64, String)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SeriesPoint {
    /// Seconds from time zero (scheduled time).
    pub t: i64,
    pub deliveries: usize,
    pub p50_ms: i64,
    pub p99_ms: i64,
    pub max_ms: i64,
}

impl LatenessSeries {
    /// Buckets `(scheduled_at, lateness_ms)` pairs by whole seconds after `zero`.
    pub fn build(zero: DateTime<Utc>, samples: impl IntoIterator<Item = (DateTime<Utc>, i64)>) -> Self {
        let mut buckets: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for (at, late) in samples {
            buckets.entry((at - zero).num_milliseconds().div_euclid(1000)).or_default().push(late);
        }
        let points = buckets
            .into_iter()
            .filter_map(|(t, v)| {
                let p = Percentiles::of(v)?;
                Some(SeriesPoint { t, deliveries: p.count, p50_ms: p.p50, p99_ms: p.p99, max_ms: p.max })
            })
            .collect();
        Self { points, events: Vec::new() }
    }

    pub fn mark(&mut self, at_secs: f64, label: impl Into<String>) {
        self.events.push((at_secs, label.into()));
    }
}

/// CPU cores, memory, kernel and CPU model of this machine.
pub fn machine() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let meminfo = read("/proc/meminfo");
    let mem_kb: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0);
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, m)| m.trim().to_owned())
        .unwrap_or_default();
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "memory_gib": (mem_kb as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "cpu_model": model,
    })
}

/// `12,345` (figures are easier to read with separators).
pub fn fmt_int(v: i64) -> String {
    let s = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 { format!("-{out}") } else { out }
}

/// A rate or duration with one decimal and thousands separators.
pub fn fmt_f(v: f64) -> String {
    let tenths = (v * 10.0).round() as i64;
    let sign = if tenths < 0 { "-" } else { "" };
    format!("{sign}{}.{}", fmt_int((tenths / 10).abs()), (tenths % 10).abs())
}

/// Output options shared by every scenario.
#[derive(clap::Args, Clone, Debug)]
pub struct OutArgs {
    /// Directory for the JSON result (and plots); created if missing.
    #[arg(long, default_value = "bench-results")]
    pub out: PathBuf,
    /// File name stem of the result (default: the scenario and its size).
    #[arg(long)]
    pub name: Option<String>,
}

/// One scenario's result: the table rows plus everything else as JSON.
pub struct Report {
    scenario: &'static str,
    name: String,
    title: String,
    started_at: DateTime<Utc>,
    rows: Vec<(String, String)>,
    data: serde_json::Map<String, Value>,
    plots: Vec<String>,
}

impl Report {
    pub fn new(scenario: &'static str, default_name: String, title: impl Into<String>, out: &OutArgs) -> Self {
        Self {
            scenario,
            name: out.name.clone().unwrap_or(default_name),
            title: title.into(),
            started_at: Utc::now(),
            rows: Vec::new(),
            data: Default::default(),
            plots: Vec::new(),
        }
    }

    /// A row of the readable table.
    pub fn row(&mut self, label: impl Into<String>, value: impl std::fmt::Display) {
        self.rows.push((label.into(), value.to_string()));
    }

    /// A figure or series kept in the JSON only.
    pub fn data(&mut self, key: &str, value: impl Serialize) {
        self.data.insert(key.to_owned(), serde_json::to_value(value).unwrap_or(Value::Null));
    }

    /// Writes `series` as `<name>.svg` into the output directory.
    pub fn plot(&mut self, out: &OutArgs, series: &LatenessSeries, title: &str) -> anyhow::Result<()> {
        std::fs::create_dir_all(&out.out)?;
        let file = format!("{}.svg", self.name);
        std::fs::write(out.out.join(&file), crate::plot::lateness_svg(series, title))?;
        self.plots.push(file);
        Ok(())
    }

    /// Writes `<out>/<name>.json` and prints the table.
    pub fn finish(self, out: &OutArgs) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(&out.out)?;
        let path = out.out.join(format!("{}.json", self.name));
        let command: Vec<String> = std::env::args().collect();
        let doc = json!({
            "scenario": self.scenario,
            "name": self.name,
            "title": self.title,
            "command": shell_words(&command),
            "started_at": domain::execution::format_instant(self.started_at),
            "finished_at": domain::execution::format_instant(Utc::now()),
            "machine": machine(),
            "rows": self.rows.iter().map(|(l, v)| json!([l, v])).collect::<Vec<_>>(),
            "plots": self.plots,
            "data": self.data,
        });
        std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
        println!("{}", table(&self.title, &self.rows));
        println!("result: {}", path.display());
        for p in &self.plots {
            println!("plot:   {}", Path::new(&out.out).join(p).display());
        }
        Ok(path)
    }
}

/// The argv as a shell command line (arguments with odd characters quoted).
pub fn shell_words(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty() && a.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c)) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A two-column plain-text table under a title.
pub fn table(title: &str, rows: &[(String, String)]) -> String {
    let w = rows.iter().map(|(l, _)| l.chars().count()).max().unwrap_or(0);
    let mut out = format!("\n{title}\n{}\n", "=".repeat(title.chars().count()));
    for (l, v) in rows {
        out.push_str(&format!("  {l:<w$}  {v}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_and_formatting() {
        let p = Percentiles::of((1..=100).rev().collect()).unwrap();
        assert_eq!((p.min, p.p50, p.p90, p.p99, p.max), (1, 51, 90, 99, 100));
        assert!(Percentiles::of(Vec::new()).is_none());
        assert_eq!(fmt_int(1_234_567), "1,234,567");
        assert_eq!(fmt_int(-1000), "-1,000");
        assert_eq!(fmt_int(999), "999");
        assert_eq!(fmt_f(1234.56), "1,234.6");
        assert_eq!(fmt_f(1234.96), "1,235.0");
        assert_eq!(fmt_f(-0.5), "-0.5");
        assert_eq!(shell_words(&["a".into(), "b c".into()]), "a 'b c'");
    }

    #[test]
    fn series_buckets_by_scheduled_second() {
        let zero = DateTime::from_timestamp(1_000, 0).unwrap();
        let at = |ms: i64| zero + chrono::TimeDelta::milliseconds(ms);
        let s = LatenessSeries::build(zero, [(at(10), 5), (at(900), 7), (at(1500), 100), (at(-1), 1)]);
        let ts: Vec<i64> = s.points.iter().map(|p| p.t).collect();
        assert_eq!(ts, [-1, 0, 1]);
        assert_eq!(s.points[1].deliveries, 2);
        assert_eq!(s.points[2].p99_ms, 100);
    }
}
