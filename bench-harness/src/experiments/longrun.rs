//! `bench-harness longrun`: the locks over an hour, not a minute.
//!
//! Cassandra keeps a deletion as a tombstone for `gc_grace_seconds` (10 days) and every read
//! scans the tombstones before the live cells it returns. A lock that writes a new column per
//! request (the thesis's queue lock) therefore slows down as its row's head of tombstones
//! grows, and fails once a read would scan more than `tombstone_failure_threshold` (100,000);
//! one that reuses its column names (shadow, bakery, queue-bounded) replaces its own
//! tombstones and stays flat. A sweep point lasts a minute and cannot show it; this
//! experiment runs each algorithm for `--duration` (an hour) of simulated time on one lock and
//! cuts the run into intervals (a minute each):
//!
//! - **calibration**: the run made on a real Apache Cassandra 4.0 node (one node on
//!   loopback, 8 contenders, one lock id, 180 s, grants per 30 s), repeated on the embedded
//!   store with its calibrated tombstone cost and a loopback-like latency, beside the real
//!   node's figures ([`REAL_NODE_QUEUE`]);
//! - **long run**: every algorithm at each of `--contenders` (8 and 64) for the duration:
//!   grants per second, median latency and tombstones per read per interval, and when each
//!   would fail: the first interval with a read failed past the threshold, or else the time at
//!   which its tombstones per read, growing as in the run's last quarter, would pass it.
//!
//! It writes `longrun.json`, `longrun.png`/`.svg` and `README.md` into `--out`
//! (`results/longrun/`), and the long-run section of the results README one directory up.

use crate::args::ScenarioArgs;
use crate::config::{ClockMode, RunConfig};
use crate::dist::parse_positive_duration;
use crate::dist::{format_duration, serde_duration};
use crate::engines::{self, Algorithm};
use crate::measure::log::RunOutcome;
use crate::report::charts::{algorithm_color, render_lines, Formats, Legend, LineChart, Series};
use crate::report::{console, files, progress};
use anyhow::{anyhow, Context};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The settings of `bench-harness longrun`.
#[derive(Args, Debug, Clone)]
pub struct LongrunArgs {
    /// Output directory (longrun.json, longrun.png/.svg, README.md). When it is called
    /// `longrun` and its parent holds the sweep's README.md, that README's long-run section is
    /// regenerated too.
    #[arg(short, long, value_name = "DIR", default_value = "results/longrun")]
    pub out: PathBuf,
    /// Simulated length of each run.
    #[arg(short, long, default_value = "60m", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Duration,
    /// Length of the intervals the runs are cut into.
    #[arg(long, default_value = "1m", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub interval: Duration,
    /// Contender counts.
    #[arg(long, value_delimiter = ',', default_value = "8,64", value_parser = clap::value_parser!(u32).range(1..))]
    pub contenders: Vec<u32>,
    /// Leave out the calibration against the real node (8 contenders, 180 s).
    #[arg(long)]
    pub no_calibration: bool,
    /// OS threads running runs in parallel, each running its own simulation.
    #[arg(short, long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// The scenario every run shares.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
}

/// Grants per 30 s of the thesis's queue lock on the real node (Apache Cassandra 4.0,
/// one node on loopback, 8 contenders, one lock id, 180 s): reference data measured there,
/// shown beside the model's, never used to compute anything.
pub const REAL_NODE_QUEUE: [u64; 6] = [1413, 1313, 1234, 1135, 959, 963];
/// The same run's shadow and bakery locks, first and last 30 s.
pub const REAL_NODE_FLAT: [(&str, u64, u64); 2] = [("shadow", 1898, 1863), ("bakery", 1541, 1558)];
/// Cassandra's `tombstone_warn_threshold`: a read that scans more is logged.
pub const WARN_THRESHOLD: f64 = 1_000.0;
/// Cassandra's `tombstone_failure_threshold`: a read that would scan more fails.
pub const FAILURE_THRESHOLD: f64 = 100_000.0;
/// Where the long-run section of the results README begins and ends.
pub const SECTION_BEGIN: &str = "<!-- longrun:begin: generated from longrun/longrun.json by `bench-harness longrun` and `bench-harness sweep`; do not edit -->";
/// Where it ends.
pub const SECTION_END: &str = "<!-- longrun:end -->";
/// The directory, under the results directory, that holds this experiment's files.
pub const LONGRUN_DIR: &str = "longrun";

/// The long-run section of the results README.
pub static SECTION: super::Section = super::Section {
    dir: LONGRUN_DIR,
    begin: SECTION_BEGIN,
    end: SECTION_END,
    render: section_for,
};

/// The long-run section for the results README in `results_dir`, from
/// `results_dir/longrun/longrun.json`; `None` when that file does not exist.
pub fn section_for(results_dir: &Path) -> anyhow::Result<Option<String>> {
    let path = results_dir.join(LONGRUN_DIR).join("longrun.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let s: LongrunSummary =
        serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))?;
    Ok(Some(section(&s, LONGRUN_DIR)))
}

/// One interval of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Its start, in seconds since the run's start.
    pub start_s: f64,
    /// Grants granted in it.
    pub grants: u64,
    /// Grants per second in it.
    pub grants_per_s: f64,
    /// Median acquisition latency of its grants (ms; 0 without grants).
    pub p50_ms: f64,
    /// Mean tombstones scanned per read in it.
    pub tombstones_per_read: f64,
    /// Reads in it that failed past the failure threshold.
    pub failed_reads: u64,
}

/// One algorithm's run cut into intervals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LongRun {
    /// The algorithm.
    pub algorithm: String,
    /// Contenders.
    pub contenders: usize,
    /// Interval length.
    #[serde(with = "serde_duration")]
    pub interval: Duration,
    /// The intervals, in order.
    pub intervals: Vec<Interval>,
    /// Most tombstones one read scanned in the run.
    pub max_tombstones_per_read: u64,
    /// Lock errors of the run (failed reads surface as these).
    pub lock_errors: u64,
    /// When reads first failed (seconds), if they did.
    pub failed_at_s: Option<f64>,
    /// Else, when its tombstones per read would pass the failure threshold at the growth of
    /// the run's last quarter (seconds); `None` when they do not grow.
    pub would_fail_at_s: Option<f64>,
}

impl LongRun {
    /// Grants per second: first and last `n` intervals, and the change in percent.
    pub fn trend(&self, n: usize) -> (f64, f64, f64) {
        let k = n.min(self.intervals.len()).max(1);
        let mean = |xs: &[Interval]| {
            xs.iter().map(|i| i.grants_per_s).sum::<f64>() / xs.len().max(1) as f64
        };
        let first = mean(&self.intervals[..k.min(self.intervals.len())]);
        let last = mean(&self.intervals[self.intervals.len().saturating_sub(k)..]);
        let change = if first > 0.0 { (last / first - 1.0) * 100.0 } else { 0.0 };
        (first, last, change)
    }
}

/// `longrun.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LongrunSummary {
    /// Layout version.
    pub schema_version: u32,
    /// `bench-harness <version>`.
    pub tool: String,
    /// The scenario of the long runs.
    pub base: RunConfig,
    /// The calibration scenario.
    pub calibration_base: RunConfig,
    /// The calibration runs (8 contenders, 180 s, 30 s intervals).
    pub calibration: Vec<LongRun>,
    /// The long runs.
    pub runs: Vec<LongRun>,
}

struct Job {
    calibration: bool,
    cfg: RunConfig,
    algorithm: &'static Algorithm,
    interval: Duration,
}

/// The scenario of the long runs: the command line's, in simulated time on an in-process
/// engine, sampling the counters every interval.
fn base(args: &LongrunArgs) -> anyhow::Result<RunConfig> {
    let mut base = RunConfig::on(args.scenario.backend);
    args.scenario.apply(&mut base).map_err(|e| anyhow!(e))?;
    anyhow::ensure!(
        base.backend.in_process(),
        "the long run needs simulated time, on an engine inside this process (the {} backend is a server)",
        base.backend
    );
    base.clock = ClockMode::Simulated;
    base.duration = args.duration;
    base.sample_every = Some(args.interval);
    let algorithms = engines::resolve(&base.algorithms, base.backend).map_err(|e| anyhow!(e))?;
    base.algorithms = algorithms.iter().map(|a| a.name.to_string()).collect();
    base.validate().map_err(|e| anyhow!(e))?;
    Ok(base)
}

/// The calibration scenario: the real-node run (one replica with a loopback-like round
/// trip, 8 contenders, 180 s, 30 s intervals), the engine's other settings as given.
fn calibration_base(base: &RunConfig) -> anyhow::Result<RunConfig> {
    let engine = base.backend.single_node(&base.engine).ok_or_else(|| {
        anyhow!(
            "the {} engine has no model of a single node on loopback (--no-calibration leaves the calibration out)",
            base.backend
        )
    })?;
    Ok(RunConfig {
        engine,
        threads: 8,
        duration: Duration::from_secs(180),
        sample_every: Some(Duration::from_secs(30)),
        ..base.clone()
    })
}

fn plan(args: &LongrunArgs) -> anyhow::Result<(RunConfig, RunConfig, Vec<Job>)> {
    let base = base(args)?;
    let calibration = calibration_base(&base)?;
    let algorithms = engines::resolve(&base.algorithms, base.backend).map_err(|e| anyhow!(e))?;
    let mut jobs = Vec::new();
    if !args.no_calibration {
        for &algorithm in &algorithms {
            jobs.push(Job {
                calibration: true,
                cfg: calibration.clone(),
                algorithm,
                interval: Duration::from_secs(30),
            });
        }
    }
    let mut levels: Vec<usize> = args.contenders.iter().map(|&n| n as usize).collect();
    levels.sort_unstable();
    levels.dedup();
    for n in levels {
        for &algorithm in &algorithms {
            let cfg = RunConfig { threads: n, ..base.clone() };
            jobs.push(Job { calibration: false, cfg, algorithm, interval: args.interval });
        }
    }
    Ok((base, calibration, jobs))
}

/// `bench-harness longrun`.
pub fn run(args: &LongrunArgs) -> anyhow::Result<()> {
    let (base, calibration_base, jobs) = plan(args)?;
    files::prepare_dir(&args.out)?;
    let wall = std::time::Instant::now();
    progress::status(
        args.quiet,
        &format!("longrun: {} runs on {} threads; {base}", jobs.len(), args.jobs),
    );
    let bar = progress::bar(jobs.len() as u64, "longrun", args.quiet, "runs");
    // The longest runs first: most contenders, the long runs before the calibration.
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse((!jobs[k].calibration, jobs[k].cfg.threads)));
    let done = super::parallel(&jobs, &order, args.jobs as usize, &bar, run_job)?;
    bar.finish_and_clear();
    let (calibration, runs): (Vec<_>, Vec<_>) =
        jobs.iter().zip(done).partition(|(job, _)| job.calibration);
    let summary = LongrunSummary {
        schema_version: crate::measure::summary::SCHEMA_VERSION,
        tool: format!("bench-harness {}", env!("CARGO_PKG_VERSION")),
        base,
        calibration_base,
        calibration: calibration.into_iter().map(|(_, r)| r).collect(),
        runs: runs.into_iter().map(|(_, r)| r).collect(),
    };
    files::write_json(&args.out.join("longrun.json"), &summary)?;
    let chart = draw(&args.out, &summary)?;
    files::write_atomic(&args.out.join("README.md"), readme(&summary).as_bytes())?;
    let updated = super::update_results_readme(&args.out, &SECTION)?;
    progress::status(
        args.quiet,
        &format!(
            "wrote longrun.json, {} and README.md into {}{} in {:.1} s",
            chart.len(),
            args.out.display(),
            updated.map_or(String::new(), |p| format!(
                ", and the long-run section of {}",
                p.display()
            )),
            wall.elapsed().as_secs_f64()
        ),
    );
    print!("{}", table(&summary));
    Ok(())
}

fn run_job(job: &Job) -> anyhow::Result<LongRun> {
    let outcome = crate::run::run_algorithm(&job.cfg, job.algorithm, None).with_context(|| {
        format!("long run of {} with {} contenders", job.algorithm.name, job.cfg.threads)
    })?;
    Ok(cut(&outcome, job.cfg.threads, job.interval))
}

/// Cuts a run into intervals of `interval`: grants and their median latency from the grant
/// log, tombstones per read and failed reads from the counter samples' differences.
pub fn cut(run: &RunOutcome, contenders: usize, interval: Duration) -> LongRun {
    let every = interval.as_micros().max(1) as u64;
    let n = run.duration_us.div_ceil(every) as usize;
    let mut latencies: Vec<Vec<u64>> = vec![Vec::new(); n];
    for g in run.grants.iter().filter(|g| g.granted_us < run.duration_us) {
        latencies[(g.granted_us / every) as usize].push(g.latency_us());
    }
    // Cumulative tombstone counts at each interval's end: the samples, then the window's end.
    let mut marks: Vec<lock_core::embedded::TombstoneStats> =
        run.samples.iter().map(|s| crate::measure::metrics::all_tombstones(&s.counters)).collect();
    marks.push(
        run.counters.as_ref().map(crate::measure::metrics::all_tombstones).unwrap_or_default(),
    );
    let mut intervals = Vec::with_capacity(n);
    let zero = lock_core::embedded::TombstoneStats::default();
    for (k, mut lat) in latencies.into_iter().enumerate() {
        let before = if k == 0 { &zero } else { marks.get(k - 1).unwrap_or(&zero) };
        let after = marks.get(k).unwrap_or(before);
        let reads = after.reads.saturating_sub(before.reads);
        let scanned = after.scanned.saturating_sub(before.scanned);
        let length_s = (every.min(run.duration_us - k as u64 * every)) as f64 / 1e6;
        lat.sort_unstable();
        intervals.push(Interval {
            start_s: (k as u64 * every) as f64 / 1e6,
            grants: lat.len() as u64,
            grants_per_s: round2(lat.len() as f64 / length_s),
            p50_ms: lat.get(lat.len() / 2).map_or(0.0, |&us| round2(us as f64 / 1000.0)),
            tombstones_per_read: if reads == 0 {
                0.0
            } else {
                round2(scanned as f64 / reads as f64)
            },
            failed_reads: after.failed.saturating_sub(before.failed),
        });
    }
    let failed_at_s = intervals.iter().find(|i| i.failed_reads > 0).map(|i| i.start_s);
    LongRun {
        algorithm: run.algorithm.to_string(),
        contenders,
        interval,
        max_tombstones_per_read: marks.last().map_or(0, |m| m.max),
        lock_errors: run.errors().lock_errors,
        would_fail_at_s: if failed_at_s.is_some() { None } else { extrapolate(&intervals) },
        failed_at_s,
        intervals,
    }
}

/// When tombstones per read reach the failure threshold if they keep growing as they did over
/// the run's last quarter (a straight line through its first and last interval); `None` when
/// they do not grow, or stay under Cassandra's warning threshold (a few tombstones of reused
/// columns come and go: no trend to extend).
fn extrapolate(intervals: &[Interval]) -> Option<f64> {
    let last = intervals.last()?;
    if last.tombstones_per_read < WARN_THRESHOLD {
        return None;
    }
    let from = &intervals[intervals.len() - intervals.len().div_ceil(4)];
    let dt = last.start_s - from.start_s;
    let rate = (last.tombstones_per_read - from.tombstones_per_read) / dt;
    (dt > 0.0 && rate > 1e-9)
        .then(|| last.start_s + (FAILURE_THRESHOLD - last.tombstones_per_read) / rate)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn minutes(s: Option<f64>) -> String {
    match s {
        Some(s) if s < 3600.0 * 48.0 => format!("{:.0} min", s / 60.0),
        Some(s) => format!("{:.1} days", s / 86_400.0),
        None => "never".into(),
    }
}

fn fails(r: &LongRun) -> String {
    match (r.failed_at_s, r.would_fail_at_s) {
        (Some(s), _) => format!("failed at {}", minutes(Some(s))),
        (None, Some(s)) => format!("would fail at ~{}", minutes(Some(s))),
        (None, None) => format!("never: at most {} per read", r.max_tombstones_per_read),
    }
}

/// The console table: a row per run, within 120 columns.
pub fn table(s: &LongrunSummary) -> String {
    let headers = [
        "algorithm",
        "n",
        "first grants/s",
        "last grants/s",
        "change",
        "tombs/read end",
        "max tombs/read",
        "when reads fail",
    ];
    let rows: Vec<Vec<String>> = s
        .calibration
        .iter()
        .chain(&s.runs)
        .map(|r| {
            let (first, last, change) = r.trend(trend_intervals(r));
            vec![
                r.algorithm.clone(),
                r.contenders.to_string(),
                format!("{first:.1}"),
                format!("{last:.1}"),
                format!("{change:.1}%"),
                format!("{:.0}", r.intervals.last().map_or(0.0, |i| i.tombstones_per_read)),
                r.max_tombstones_per_read.to_string(),
                fails(r),
            ]
        })
        .collect();
    console::render(&headers, 1, &rows)
}

/// How many intervals make the "first" and "last" of a trend: 10 minutes of a long run, one
/// interval of the calibration.
fn trend_intervals(r: &LongRun) -> usize {
    ((600.0 / r.interval.as_secs_f64()) as usize).clamp(1, (r.intervals.len() / 2).max(1))
}

/// Draws `longrun.png`/`.svg`: grants per second, median latency and tombstones per read
/// against time, a panel row per contention level.
pub fn draw(dir: &Path, s: &LongrunSummary) -> anyhow::Result<Vec<PathBuf>> {
    let mut levels: Vec<usize> = s.runs.iter().map(|r| r.contenders).collect();
    levels.dedup();
    let mut charts = Vec::new();
    for n in &levels {
        let runs: Vec<&LongRun> = s.runs.iter().filter(|r| r.contenders == *n).collect();
        let chart = |title: String, y: &str, log: bool, f: fn(&Interval) -> f64| LineChart {
            title,
            x_label: "simulated minutes".into(),
            y_label: y.into(),
            x_log: false,
            y_log: log,
            y_range: None,
            legend: Legend::UpperLeft,
            series: runs
                .iter()
                .map(|r| Series {
                    markers: false,
                    ..Series::new(
                        r.algorithm.clone(),
                        algorithm_color(&r.algorithm),
                        r.intervals
                            .iter()
                            .map(|i| (i.start_s / 60.0, f(i)))
                            .filter(|(_, v)| !log || *v > 0.0)
                            .collect(),
                    )
                })
                .collect(),
        };
        charts.push(chart(format!("Grants per second, {n} contenders"), "grants/s", false, |i| {
            i.grants_per_s
        }));
        charts
            .push(chart(format!("Median latency, {n} contenders"), "ms (log)", true, |i| i.p50_ms));
        charts.push(chart(
            format!("Tombstones per read, {n} contenders"),
            "tombstones (log)",
            true,
            |i| i.tombstones_per_read,
        ));
    }
    if charts.is_empty() {
        return Ok(Vec::new());
    }
    render_lines(&dir.join("longrun"), &charts, 3, (520, 400), Formats::PngAndSvg)
}

/// `results/longrun/README.md`.
pub fn readme(s: &LongrunSummary) -> String {
    let mut md = String::from("# The locks over an hour\n\n");
    let _ = writeln!(
        md,
        "Generated by `bench-harness longrun` (`scripts/regenerate-results.sh`); do not edit by hand. \
         Every number comes from `longrun.json` in this directory, except the real node's, measured on Apache Cassandra 4.0.\n"
    );
    md.push_str(&section_body(s, "."));
    md
}

/// The long-run section of the results README.
pub fn section(s: &LongrunSummary, dir: &str) -> String {
    format!(
        "{SECTION_BEGIN}\n## Over an hour: tombstones\n\n{}{SECTION_END}\n",
        section_body(s, dir)
    )
}

fn section_body(s: &LongrunSummary, dir: &str) -> String {
    let mut md = String::new();
    calibration_text(&mut md, s);
    long_text(&mut md, s, dir);
    md
}

fn calibration_text(md: &mut String, s: &LongrunSummary) {
    if s.calibration.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "**Against a real node.** Issue 11 ran the queue lock on a real Apache Cassandra 4.0 node (one node on loopback, \
         8 contenders, one lock id, 180 s): its grants per 30 s fell from {} to {}, and Cassandra logged ~7,000 tombstones scanned \
         per read by the end. The same run on the {} (seed {}):\n",
        REAL_NODE_QUEUE[0],
        REAL_NODE_QUEUE[5],
        s.calibration_base.backend.describe(&s.calibration_base.engine, &s.calibration_base.settings()),
        s.calibration_base.seed
    );
    let _ = writeln!(
        md,
        "| grants per 30 s | {} | change | tombstones per read at the end |",
        (0..6).map(|k| format!("{}–{} s", k * 30, k * 30 + 30)).collect::<Vec<_>>().join(" | ")
    );
    let _ = writeln!(md, "|---|{}---:|---:|", "---:|".repeat(6));
    let real_change = (REAL_NODE_QUEUE[5] as f64 / REAL_NODE_QUEUE[0] as f64 - 1.0) * 100.0;
    let _ = writeln!(
        md,
        "| queue, real node | {} | {real_change:.0}% | ~7,000 |",
        REAL_NODE_QUEUE.iter().map(|g| g.to_string()).collect::<Vec<_>>().join(" | ")
    );
    for (name, first, last) in REAL_NODE_FLAT {
        let change = (last as f64 / first as f64 - 1.0) * 100.0;
        let _ = writeln!(md, "| {name}, real node | {first} | | | | | {last} | {change:+.0}% | |");
    }
    for r in &s.calibration {
        let (first, last, change) = r.trend(1);
        let _ = (first, last);
        let _ = writeln!(
            md,
            "| {}, model | {} | {change:+.0}% | {:.0} |",
            r.algorithm,
            r.intervals.iter().map(|i| i.grants.to_string()).collect::<Vec<_>>().join(" | "),
            r.intervals.last().map_or(0.0, |i| i.tombstones_per_read)
        );
    }
    md.push('\n');
}

fn long_text(md: &mut String, s: &LongrunSummary, dir: &str) {
    if s.runs.is_empty() {
        return;
    }
    let b = &s.base;
    let _ = writeln!(
        md,
        "**Over {}.** Every algorithm on one lock for {} of simulated time on the {}, hold {}, think {}, poll {} (seed {}); \
         first and last 10 minutes, tombstones per read in the last interval, and when reads fail (Cassandra fails a read past \
         100,000 tombstones): the first failed read, or else when tombstones per read would pass 100,000 if they kept growing as \
         in the run's last quarter.\n",
        format_duration(b.duration),
        format_duration(b.duration),
        b.backend.describe(&b.engine, &b.settings()),
        b.hold,
        b.think,
        format_duration(b.poll_interval),
        b.seed
    );
    let _ = writeln!(md, "| algorithm | contenders | grants/s, first 10 min | grants/s, last 10 min | change | tombstones per read at the end | most in one read | reads fail |");
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|---|");
    for r in &s.runs {
        let (first, last, change) = r.trend(trend_intervals(r));
        let _ = writeln!(
            md,
            "| {} | {} | {first:.1} | {last:.1} | {change:+.1}% | {:.0} | {} | {} |",
            r.algorithm,
            r.contenders,
            r.intervals.last().map_or(0.0, |i| i.tombstones_per_read),
            r.max_tombstones_per_read,
            fails(r)
        );
    }
    let _ = writeln!(
        md,
        "\nWhy: every request of the thesis's queue lock writes a queue cell with a new column name (its time and thread id) and \
         deletes it afterwards; the tombstone stays for gc_grace (10 days) at the head of the row, and every read of the queue \
         head scans all of them. Shadow, bakery and queue-bounded write columns named by thread id, so a thread's next write \
         replaces its own tombstone: their reads scan at most one tombstone per contender, however long they run.\n\n\
         ![grants per second, median latency and tombstones per read against time]({dir}/longrun.png)\n"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The committed results' long runs (results/longrun) print within the terminal.
    #[test]
    fn the_console_table_of_the_committed_results_fits_the_terminal() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/longrun/longrun.json");
        let text = std::fs::read_to_string(&path).expect("results/longrun/longrun.json");
        let summary: LongrunSummary = serde_json::from_str(&text).expect("parses");
        let t = table(&summary);
        let widest = crate::report::console::widest_line(&t);
        assert!(widest <= crate::report::console::WIDTH, "{widest} columns:\n{t}");
        assert_eq!(t.lines().count(), 2 + summary.calibration.len() + summary.runs.len());
    }

    /// The committed README is what the generator writes from the committed longrun.json: a
    /// change to the generator's words is a change to results/longrun/README.md too.
    #[test]
    fn the_committed_readme_is_what_the_committed_summary_renders() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/longrun");
        let text = std::fs::read_to_string(dir.join("longrun.json")).expect("longrun.json");
        let summary: LongrunSummary = serde_json::from_str(&text).expect("parses");
        let committed = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
        assert_eq!(readme(&summary), committed, "regenerate results/longrun");
    }

    fn interval(start_s: f64, t: f64) -> Interval {
        Interval {
            start_s,
            grants: 1,
            grants_per_s: 1.0,
            p50_ms: 1.0,
            tombstones_per_read: t,
            failed_reads: 0,
        }
    }

    #[test]
    fn growth_is_extrapolated_to_the_failure_threshold() {
        let growing: Vec<Interval> =
            (0..8).map(|k| interval(k as f64 * 60.0, (k + 1) as f64 * 1000.0)).collect();
        // 1,000 tombstones per read more each minute: 100,000 at minute 99.
        let at = extrapolate(&growing).unwrap();
        assert!((at - 99.0 * 60.0).abs() < 1e-6, "{at}");
        // Growing, but far under the warning threshold: reused columns, no trend.
        let small: Vec<Interval> = (0..8).map(|k| interval(k as f64 * 60.0, k as f64)).collect();
        assert_eq!(extrapolate(&small), None);
        let flat: Vec<Interval> = (0..8).map(|k| interval(k as f64 * 60.0, 7.0)).collect();
        assert_eq!(extrapolate(&flat), None);
    }
}
