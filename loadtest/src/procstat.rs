//! CPU and memory of every process of a run, sampled once a second from
//! `/proc/<pid>/stat` (utime + stime) and `/proc/<pid>/status` (VmRSS).
//!
//! Two kinds of target:
//! - the stack's own processes (by pid, from a list the [`Stack`] keeps up to
//!   date as schedulers are killed and added);
//! - the services, found by process name and summed per service: every
//!   `postgres` process (server and all backends, including those serving
//!   other databases on the same server), `redis-server`, and RabbitMQ's
//!   Erlang VM (`beam.smp`). Summed RSS counts shared pages once per process.
//!
//! [`Stack`]: crate::stack::Stack

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// `(display name, pid)` of the processes to follow.
pub type Targets = Arc<Mutex<Vec<(String, u32)>>>;

/// Services sampled by process name: (display name, `comm` values).
const SERVICES: [(&str, &[&str]); 3] =
    [("postgres (all)", &["postgres"]), ("redis-server", &["redis-server"]), ("rabbitmq (beam.smp)", &["beam.smp"])];

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`).
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// (utime + stime in ticks, VmRSS in bytes) of one process.
fn sample(pid: u32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 here.
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    Some((ticks, rss_kb * 1024))
}

/// Pids of processes whose `comm` is one of `names`.
fn pids_named(names: &[&str]) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        names.contains(&comm.trim()).then_some(pid)
    })
    .collect()
}

/// One process (or service) over the sampled window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessUsage {
    pub name: String,
    /// Average CPU over the time it was sampled, in % of one core.
    pub cpu_avg_pct: f64,
    /// Highest one-second CPU, in % of one core.
    pub cpu_max_pct: f64,
    pub rss_max_mb: f64,
    pub rss_last_mb: f64,
    /// Per-second samples: (seconds since the sampler started, CPU %, RSS MB).
    pub samples: Vec<(f64, f64, f64)>,
}

#[derive(Default)]
struct Track {
    /// Last (ticks, instant) per pid, to turn tick counters into rates.
    last: BTreeMap<u32, (u64, Instant)>,
    first_at: Option<Instant>,
    ticks_total: u64,
    usage: ProcessUsage,
}

/// Samples until the token is cancelled, then returns one usage per target
/// (stack processes in the order first seen, then the services).
pub async fn sample_until(targets: Targets, token: CancellationToken) -> Vec<ProcessUsage> {
    let tck = clock_ticks();
    let start = Instant::now();
    let mut tracks: BTreeMap<String, Track> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = token.cancelled() => break,
            _ = tick.tick() => {}
        }
        let now = Instant::now();
        let mut groups: Vec<(String, Vec<u32>)> =
            targets.lock().expect("targets").iter().map(|(n, p)| (n.clone(), vec![*p])).collect();
        groups.extend(SERVICES.iter().map(|(n, comms)| (n.to_string(), pids_named(comms))));
        for (name, pids) in groups {
            let track = tracks.entry(name.clone()).or_insert_with(|| {
                order.push(name.clone());
                Track { usage: ProcessUsage { name: name.clone(), ..Default::default() }, ..Default::default() }
            });
            let (mut delta_ticks, mut rss, mut any) = (0u64, 0u64, false);
            let mut secs = 0f64;
            for pid in pids {
                let Some((ticks, r)) = sample(pid) else { continue };
                any = true;
                rss += r;
                if let Some((prev, at)) = track.last.get(&pid) {
                    delta_ticks += ticks.saturating_sub(*prev);
                    secs = secs.max(now.duration_since(*at).as_secs_f64());
                }
                track.last.insert(pid, (ticks, now));
            }
            if !any {
                continue;
            }
            track.first_at.get_or_insert(now);
            track.ticks_total += delta_ticks;
            let cpu = if secs > 0.0 { delta_ticks as f64 / tck / secs * 100.0 } else { 0.0 };
            let rss_mb = rss as f64 / 1_048_576.0;
            let u = &mut track.usage;
            u.cpu_max_pct = u.cpu_max_pct.max(cpu);
            u.rss_max_mb = u.rss_max_mb.max(rss_mb);
            u.rss_last_mb = rss_mb;
            u.samples.push((round1(now.duration_since(start).as_secs_f64()), round1(cpu), round1(rss_mb)));
            let span = now.duration_since(track.first_at.unwrap_or(now)).as_secs_f64();
            u.cpu_avg_pct = if span > 0.0 { track.ticks_total as f64 / tck / span * 100.0 } else { 0.0 };
        }
    }
    order
        .into_iter()
        .filter_map(|n| tracks.remove(&n))
        .map(|t| {
            let mut u = t.usage;
            u.cpu_avg_pct = round1(u.cpu_avg_pct);
            u.cpu_max_pct = round1(u.cpu_max_pct);
            u.rss_max_mb = round1(u.rss_max_mb);
            u.rss_last_mb = round1(u.rss_last_mb);
            u
        })
        .collect()
}

fn round1(v: f64) -> f64 {
    (v * 10.0).round() / 10.0
}

/// Runs [`sample_until`] in the background; `stop` returns the figures.
pub struct Sampler {
    token: CancellationToken,
    task: tokio::task::JoinHandle<Vec<ProcessUsage>>,
}

impl Sampler {
    pub fn start(targets: Targets) -> Self {
        let token = CancellationToken::new();
        let task = tokio::spawn(sample_until(targets, token.clone()));
        Self { token, task }
    }

    pub async fn stop(self) -> Vec<ProcessUsage> {
        self.token.cancel();
        self.task.await.unwrap_or_default()
    }
}

/// Adds one table row per process: average and peak CPU, peak RSS.
pub fn rows(report: &mut crate::report::Report, usage: &[ProcessUsage]) {
    for u in usage {
        report.row(
            format!("cpu avg / max, rss max: {}", u.name),
            format!("{:.0}% / {:.0}%, {:.0} MB", u.cpu_avg_pct, u.cpu_max_pct, u.rss_max_mb),
        );
    }
    report.data("processes", usage);
}

#[cfg(test)]
mod tests {
    #[test]
    fn samples_this_process() {
        let (ticks, rss) = super::sample(std::process::id()).unwrap();
        assert!(rss > 0);
        let _ = ticks;
    }
}
