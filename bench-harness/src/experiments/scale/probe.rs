//! What a point costs the machine: the CPU time and peak resident set of the servers the
//! harness started for it, and the harness's own CPU time, read from `/proc`.
//!
//! The servers a run starts (`--spawn-X`) are child processes of this one (test-servers
//! spawns `redis-server`, `java`, `etcd` and `bench-harness lock-server` directly), so they are
//! found as the descendants of this process that did not exist when the point began: no engine
//! has to hand its processes out, and servers of earlier points, killed on drop, are never
//! counted again. A sampler thread reads every such process's `/proc/<pid>/stat` (user and
//! system CPU time) and `/proc/<pid>/status` (`VmHWM`, its peak resident set) every
//! [`EVERY`], and this process's own CPU time (`getrusage`), until the point ends. The proxies in
//! front of a cluster's members run inside the harness, so their CPU is the harness's.
//!
//! The CPU of the measured window alone (not the servers' start, a JVM's especially, nor the
//! drain) is each process's cumulative CPU at the window's end minus at its start, each read
//! by linear interpolation between the samples around it. The window's start is read off the
//! run's progress bar, which in wall time follows the run's clock (its position is the time
//! since the window began, set every 200 ms): the earliest `sampled at − position` seen.
//! Cost: a sample reads two small files per process; finding new processes reads
//! `/proc/self/task/*/children` every fourth sample. Both run in the harness and count as its
//! CPU (well under a millisecond per sample).

use indicatif::ProgressBar;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the sampler reads `/proc`.
pub const EVERY: Duration = Duration::from_millis(50);

/// One process's CPU time and peak resident set, as `/proc` gives them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    /// User plus system CPU seconds since it started.
    cpu_s: f64,
    /// `VmHWM`: its peak resident set so far, in KiB (0 when unreadable).
    peak_rss_kib: u64,
}

/// What the sampler saw.
#[derive(Debug, Default)]
struct Trace {
    /// Per process: its readings in time order.
    servers: BTreeMap<u32, Vec<(Instant, f64)>>,
    /// Per process: its highest `VmHWM`.
    peaks: BTreeMap<u32, u64>,
    /// This process's CPU seconds over time.
    own: Vec<(Instant, f64)>,
    /// The earliest estimate of the window's start.
    window_start: Option<Instant>,
}

/// The servers' and the harness's cost over one point's window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cost {
    /// Processes the harness started for the point (servers, members, Sentinels).
    pub processes: usize,
    /// Their CPU seconds in the window, summed.
    pub server_cpu_s: f64,
    /// The sum of their peak resident sets, in KiB.
    pub server_peak_rss_kib: u64,
    /// The harness's CPU seconds in the window (its contenders, clients and proxies).
    pub harness_cpu_s: f64,
}

/// Samples the processes a point starts, from before the point begins until [`Sampler::stop`].
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Trace>,
}

impl Sampler {
    /// Starts sampling; `bar` is the run's progress bar, whose position gives the window's
    /// start.
    pub fn start(bar: &ProgressBar) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let before: BTreeSet<u32> = descendants().into_iter().collect();
        let (flag, bar) = (Arc::clone(&stop), bar.clone());
        let thread = std::thread::spawn(move || sample(&flag, &bar, &before));
        Sampler { stop, thread }
    }

    /// Stops sampling; the cost of the window of length `window` (`None`: the progress bar
    /// never moved, as in simulated time).
    pub fn stop(self, window: Duration) -> Option<Cost> {
        self.stop.store(true, Ordering::Relaxed);
        let trace = self.thread.join().ok()?;
        let start = trace.window_start?;
        let end = start + window;
        let during = |series: &[(Instant, f64)]| at(series, end) - at(series, start);
        Some(Cost {
            processes: trace.servers.len(),
            server_cpu_s: trace.servers.values().map(|s| during(s)).sum(),
            server_peak_rss_kib: trace.peaks.values().sum(),
            harness_cpu_s: during(&trace.own),
        })
    }
}

fn sample(stop: &AtomicBool, bar: &ProgressBar, before: &BTreeSet<u32>) -> Trace {
    let mut trace = Trace::default();
    let mut known: BTreeSet<u32> = BTreeSet::new();
    let mut tick = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if tick.is_multiple_of(4) {
            known.extend(descendants().into_iter().filter(|p| !before.contains(p)));
        }
        tick += 1;
        let now = Instant::now();
        for &pid in &known {
            if let Some(r) = read(pid) {
                trace.servers.entry(pid).or_default().push((now, r.cpu_s));
                let peak = trace.peaks.entry(pid).or_default();
                *peak = (*peak).max(r.peak_rss_kib);
            }
        }
        if let Some(own) = own_cpu_s() {
            trace.own.push((now, own));
        }
        let position = Duration::from_millis(bar.position());
        if !position.is_zero() {
            let start = now.checked_sub(position).unwrap_or(now);
            trace.window_start = Some(trace.window_start.map_or(start, |s| s.min(start)));
        }
        std::thread::sleep(EVERY);
    }
    trace
}

/// The value of the cumulative `series` at `t`: interpolated between the samples around it,
/// the first before the first, the last after the last (the process had not started or had
/// ended).
fn at(series: &[(Instant, f64)], t: Instant) -> f64 {
    let Some(&(first_t, first)) = series.first() else { return 0.0 };
    if t <= first_t {
        return first;
    }
    for w in series.windows(2) {
        let ((t0, v0), (t1, v1)) = (w[0], w[1]);
        if t <= t1 {
            let span = (t1 - t0).as_secs_f64();
            let f = if span > 0.0 { (t - t0).as_secs_f64() / span } else { 1.0 };
            return v0 + (v1 - v0) * f;
        }
    }
    series.last().map_or(0.0, |&(_, v)| v)
}

/// Clock ticks per second, the unit of `/proc/<pid>/stat`'s CPU times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// User plus system CPU seconds from the text of a `/proc/<pid>/stat`; `None` when it does not
/// parse. The command name (field 2) may hold spaces and parentheses: fields are counted from
/// its closing parenthesis.
fn cpu_of_stat(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), …, utime (14), stime (15).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / ticks_per_second())
}

/// `VmHWM` in KiB from the text of a `/proc/<pid>/status`.
fn peak_rss_of_status(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn read(pid: u32) -> Option<Reading> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    Some(Reading {
        cpu_s: cpu_of_stat(&stat)?,
        peak_rss_kib: peak_rss_of_status(&status).unwrap_or(0),
    })
}

/// This process's user plus system CPU seconds, every thread included, from `getrusage`
/// (microseconds; `/proc/self/stat` counts clock ticks, too coarse for a simulated run that
/// takes a few milliseconds).
pub fn own_cpu_s() -> Option<f64> {
    // SAFETY: an all-zero rusage is a valid value, which getrusage overwrites.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Some(secs(usage.ru_utime) + secs(usage.ru_stime))
}

/// Every descendant of this process: the children of each of its threads
/// (`/proc/<pid>/task/<tid>/children`), theirs, and so on.
fn descendants() -> Vec<u32> {
    let mut out = Vec::new();
    let mut queue = vec![std::process::id()];
    while let Some(pid) = queue.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { continue };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                if !out.contains(&child) {
                    out.push(child);
                    queue.push(child);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_status_parse_past_a_name_with_spaces() {
        let tck = ticks_per_second();
        let stat = "42 (java (main) x) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 30 0 1000";
        assert_eq!(cpu_of_stat(stat), Some(300.0 / tck));
        assert_eq!(cpu_of_stat("garbage"), None);
        let status = "Name:\tjava\nVmPeak:\t 9000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t 100 kB\n";
        assert_eq!(peak_rss_of_status(status), Some(123_456));
        assert!(own_cpu_s().is_some_and(|s| s >= 0.0));
    }

    #[test]
    fn a_window_is_interpolated_between_samples() {
        let t0 = Instant::now();
        let s = |ms: u64, v: f64| (t0 + Duration::from_millis(ms), v);
        let series = [s(100, 1.0), s(200, 2.0), s(400, 2.0)];
        assert_eq!(at(&series, t0), 1.0);
        assert!((at(&series, t0 + Duration::from_millis(150)) - 1.5).abs() < 1e-9);
        assert_eq!(at(&series, t0 + Duration::from_millis(300)), 2.0);
        assert_eq!(at(&series, t0 + Duration::from_secs(9)), 2.0);
        assert_eq!(at(&[], t0), 0.0);
    }

    /// A child started after the sampler is found, its CPU and peak resident set read, and
    /// the window taken from the bar's position.
    #[test]
    fn a_child_started_during_the_point_is_sampled() {
        let bar = ProgressBar::hidden();
        let sampler = Sampler::start(&bar);
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("sh");
        std::thread::sleep(Duration::from_millis(300));
        bar.set_position(300);
        std::thread::sleep(Duration::from_millis(600));
        child.kill().expect("kills");
        child.wait().expect("waits");
        std::thread::sleep(Duration::from_millis(200));
        let cost = sampler.stop(Duration::from_secs(600)).expect("the bar moved");
        assert_eq!(cost.processes, 1);
        assert!(cost.server_cpu_s > 0.0, "{cost:?}");
        assert!(cost.server_peak_rss_kib > 0, "{cost:?}");
        assert!(cost.harness_cpu_s >= 0.0, "{cost:?}");
        let still = Sampler::start(&ProgressBar::hidden());
        assert_eq!(still.stop(Duration::from_secs(1)), None, "no window without the bar moving");
    }
}
