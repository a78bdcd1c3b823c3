//! The one plot: lateness p50 and p99 per second over time, as a
//! hand-written SVG, with a scenario's events (kill, add) as dashed lines.

use std::fmt::Write;

use crate::report::{LatenessSeries, fmt_int};

const W: f64 = 900.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A "nice" tick step (1, 2 or 5 × 10^k) giving about `target` ticks.
fn nice_step(range: f64, target: f64) -> f64 {
    let raw = (range / target).max(1e-9);
    let pow = 10f64.powf(raw.log10().floor());
    let m = raw / pow;
    pow * if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    }
}

pub fn lateness_svg(series: &LatenessSeries, title: &str) -> String {
    let pts = &series.points;
    let t_min = pts.iter().map(|p| p.t as f64).chain(series.events.iter().map(|e| e.0)).fold(f64::MAX, f64::min);
    let t_max = pts.iter().map(|p| p.t as f64 + 1.0).chain(series.events.iter().map(|e| e.0)).fold(f64::MIN, f64::max);
    let (t_min, t_max) = if t_min < t_max { (t_min.min(0.0), t_max) } else { (0.0, 1.0) };
    let y_top = pts.iter().map(|p| p.p99_ms).max().unwrap_or(1).max(1) as f64;
    let y_step = nice_step(y_top, 5.0);
    let y_max = (y_top / y_step).ceil() * y_step;
    let x = |t: f64| LEFT + (t - t_min) / (t_max - t_min) * (W - LEFT - RIGHT);
    let y = |v: f64| TOP + (1.0 - v.max(0.0) / y_max) * (H - TOP - BOTTOM);

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>
"#,
        W / 2.0,
        escape(title)
    );
    // Axes, grid and labels.
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            fmt_int(v as i64)
        );
        v += y_step;
    }
    let t_step = nice_step(t_max - t_min, 10.0).max(1.0);
    let mut t = (t_min / t_step).ceil() * t_step;
    while t <= t_max + 1e-9 {
        let xx = x(t);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#999"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            H - BOTTOM,
            H - BOTTOM + 5.0,
            H - BOTTOM + 18.0,
            t as i64
        );
        t += t_step;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{b}" stroke="#333"/><line x1="{LEFT}" y1="{b}" x2="{r}" y2="{b}" stroke="#333"/>
<text x="{cx}" y="{xl}" text-anchor="middle">scheduled time (s from start)</text>
<text transform="translate(16 {cy}) rotate(-90)" text-anchor="middle">lateness (ms)</text>"##,
        b = H - BOTTOM,
        r = W - RIGHT,
        cx = (LEFT + W - RIGHT) / 2.0,
        xl = H - 12.0,
        cy = (TOP + H - BOTTOM) / 2.0,
    );
    // Events.
    for (at, label) in &series.events {
        let xx = x(*at);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{:.1}" stroke="#c00" stroke-dasharray="5 4"/><text x="{:.1}" y="{:.1}" fill="#c00">{}</text>"##,
            H - BOTTOM,
            xx + 4.0,
            TOP + 12.0,
            escape(label)
        );
    }
    // The two lines, drawn as steps of one second each.
    for (name, color, value) in [
        ("p99", "#d62728", (|p: &crate::report::SeriesPoint| p.p99_ms) as fn(&_) -> i64),
        ("p50", "#1f77b4", |p: &crate::report::SeriesPoint| p.p50_ms),
    ] {
        let mut d = String::new();
        for (i, p) in pts.iter().enumerate() {
            let (x0, x1, yy) = (x(p.t as f64), x(p.t as f64 + 1.0), y(value(p) as f64));
            let cmd = if i == 0 || pts[i - 1].t != p.t - 1 { 'M' } else { 'L' };
            let _ = write!(d, "{cmd}{x0:.1},{yy:.1} L{x1:.1},{yy:.1} ");
        }
        let _ = writeln!(
            s,
            r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="1.5"><title>{name}</title></path>"#
        );
    }
    let lx = W - RIGHT - 130.0;
    let _ = writeln!(
        s,
        r##"<rect x="{lx}" y="{TOP}" width="125" height="40" fill="white" stroke="#ccc"/>
<line x1="{a}" y1="{y1}" x2="{b}" y2="{y1}" stroke="#d62728" stroke-width="2"/><text x="{c}" y="{t1}">p99 per second</text>
<line x1="{a}" y1="{y2}" x2="{b}" y2="{y2}" stroke="#1f77b4" stroke-width="2"/><text x="{c}" y="{t2}">p50 per second</text>
</svg>"##,
        a = lx + 6.0,
        b = lx + 26.0,
        c = lx + 32.0,
        y1 = TOP + 13.0,
        t1 = TOP + 17.0,
        y2 = TOP + 29.0,
        t2 = TOP + 33.0,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::SeriesPoint;

    #[test]
    fn draws_lines_and_events() {
        let mut series = LatenessSeries {
            points: (0..5).map(|t| SeriesPoint { t, deliveries: 1, p50_ms: 10, p99_ms: 20 + t, max_ms: 30 }).collect(),
            events: Vec::new(),
        };
        series.mark(2.5, "kill <node>");
        let svg = lateness_svg(&series, "t");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("kill &lt;node&gt;"));
        assert_eq!(svg.matches("<path").count(), 2);
        assert_eq!(nice_step(970.0, 5.0), 200.0);
    }
}
