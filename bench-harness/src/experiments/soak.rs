//! `bench-harness soak`: at least a million checked grants per Cassandra-model algorithm, at
//! QUORUM, under a mixed fault schedule.
//!
//! Each algorithm runs on the embedded store in simulated time, many locks at once (so that a
//! simulated minute yields many grants), under crashes, partitions, clock jumps, stopped
//! replicas and overloaded replicas — every fault the Cassandra locks are meant to survive at
//! QUORUM. Pauses are left out on purpose: no lease-based lock survives a holder paused past its
//! lease, which the safety experiment shows separately. Runs are repeated with the next seed
//! until the algorithm has the grants asked for; each run's directory gets the three logs, and
//! the checker ([`crate::check`]) reads them back and judges every grant. Any overlap or
//! accepted stale write fails the command (exit status 3) and keeps the run's directory and
//! seed, to be turned into a test.

use crate::check;

use crate::args::algorithm_name;
use crate::config::RunConfig;
use crate::dist::parse_positive_duration;
use crate::engines;
use crate::faults::FaultPlan;
use crate::report::{console, files, progress};
use crate::run as runner;
use anyhow::Context;
use clap::Args;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The settings of `soak`.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// Grants to check per algorithm at least (runs are repeated with the next seed until
    /// there are this many).
    #[arg(long, default_value_t = 1_000_000)]
    pub grants: u64,
    /// Algorithms (default: every Cassandra-model algorithm).
    #[arg(short, long, value_delimiter = ',', value_parser = algorithm_name)]
    pub algorithms: Vec<String>,
    /// Contenders per run; contender i asks for lock i % LOCKS.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: u32,
    /// Lock ids per run.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub locks: u32,
    /// Simulated time of one run.
    #[arg(long, default_value = "120s", value_parser = parse_positive_duration)]
    pub run_length: Duration,
    /// The fault schedule.
    #[arg(long, value_name = "FAULTS", default_value = DEFAULT_FAULTS)]
    pub faults: FaultPlan,
    /// Seed of the first run (run k uses SEED + k).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory.
    #[arg(short, long, value_name = "DIR", default_value = "out/soak")]
    pub out: PathBuf,
    /// No status lines.
    #[arg(short, long)]
    pub quiet: bool,
}

/// The default mixed schedule: everything the Cassandra locks must survive at QUORUM.
pub const DEFAULT_FAULTS: &str =
    "crash:2s@5s,partition:2s@5s,clock-jump:1s@5s,replica-stop:3s@10s,replica-lag:3s@10s";

/// What one algorithm's soak found.
#[derive(Debug)]
pub struct Soaked {
    /// The algorithm.
    pub algorithm: String,
    /// Grants checked.
    pub grants: u64,
    /// Runs (seeds) it took.
    pub runs: u32,
    /// Faults injected.
    pub faults: u64,
    /// Overlaps, stale writes accepted and rejected, leases lost and crashed holds, summed.
    pub figures: crate::measure::safety::SafetyFigures,
    /// Wall time.
    pub wall: Duration,
    /// The directories of the runs the checker judged unsafe.
    pub unsafe_runs: Vec<PathBuf>,
}

/// Adds the figures the soak's table shows.
fn add(sum: &mut crate::measure::safety::SafetyFigures, f: &crate::measure::safety::SafetyFigures) {
    sum.overlapping_holds += f.overlapping_holds;
    sum.stale_accepted += f.stale_accepted;
    sum.stale_rejected += f.stale_rejected;
    sum.leases_lost_signalled += f.leases_lost_signalled;
    sum.crashed_holds += f.crashed_holds;
}

/// The configuration of run `k` of `algorithm`, `length` of simulated time long.
fn config(args: &SoakArgs, algorithm: &str, k: u32, length: Duration) -> Result<RunConfig, String> {
    let mut cfg = RunConfig::on(engines::EngineRef::default_engine());
    cfg.algorithms = vec![algorithm.to_string()];
    cfg.threads = args.threads as usize;
    cfg.locks = args.locks as usize;
    cfg.duration = length;
    cfg.faults = args.faults.clone();
    cfg.seed = args.seed + u64::from(k);
    cfg.validate()?;
    Ok(cfg)
}

/// Soaks one algorithm into `out/<algorithm>/run-K/`.
fn soak_one(
    args: &SoakArgs,
    algorithm: &'static engines::Algorithm,
    out: &Path,
    quiet: bool,
) -> anyhow::Result<Soaked> {
    let wall = Instant::now();
    let mut s = Soaked {
        algorithm: algorithm.name.to_string(),
        grants: 0,
        runs: 0,
        faults: 0,
        figures: Default::default(),
        wall: Duration::ZERO,
        unsafe_runs: Vec::new(),
    };
    let mut simulated = Duration::ZERO;
    while s.grants < args.grants {
        let length = next_length(args, s.grants, simulated);
        let cfg = config(args, algorithm.name, s.runs, length).map_err(crate::UsageError)?;
        simulated += length;
        let dir = out.join(algorithm.name).join(format!("run-{}", s.runs));
        files::prepare_dir(&dir)?;
        let outcome = runner::run_algorithm(&cfg, algorithm, None)?;
        files::RunLogs::create(&dir, cfg.primitive)?.append(&outcome)?;
        let summary = crate::measure::summary::analyze(&cfg, algorithm, &outcome);
        let mut whole = crate::measure::summary::Summary::new(&cfg);
        whole.results.push(summary);
        files::write_json(&dir.join("summary.json"), &whole)?;
        // The verdict is the checker's, from the files alone.
        for v in check::check_dir(&dir, cfg.ttl)? {
            s.grants += v.grants as u64;
            add(&mut s.figures, &v.figures);
            if !v.figures.is_safe() {
                s.unsafe_runs.push(dir.clone());
            }
        }
        s.faults += outcome.faults.len() as u64;
        s.runs += 1;
        progress::status(
            quiet,
            &format!(
                "{:>14}: run {} (seed {}): {} grants so far, {} overlaps, {:.0} s wall\n",
                algorithm.name,
                s.runs,
                cfg.seed,
                s.grants,
                s.figures.overlapping_holds,
                wall.elapsed().as_secs_f64()
            ),
        );
    }
    s.wall = wall.elapsed();
    Ok(s)
}

/// Shortest last run: long enough for every kind of fault of the schedule to come round.
const MIN_RUN: Duration = Duration::from_secs(20);

/// The length of the next run: the full run length, or, once the runs so far tell how many
/// grants a simulated second yields and fewer than a full run's are missing, a tenth more
/// than that rate says the missing grants take (at least [`MIN_RUN`]). A soak then checks
/// about the grants asked for, not up to a whole run more. It depends only on the
/// algorithm's own runs, so the runs and their lengths are the same however the soak's
/// algorithms share the processors.
fn next_length(args: &SoakArgs, grants: u64, simulated: Duration) -> Duration {
    let full = args.run_length;
    if grants == 0 || simulated.is_zero() {
        return full;
    }
    let rate = grants as f64 / simulated.as_secs_f64();
    let missing = args.grants.saturating_sub(grants) as f64;
    let secs = (missing / rate * 1.1).ceil();
    if secs >= full.as_secs_f64() {
        return full;
    }
    Duration::from_secs_f64(secs).max(MIN_RUN).min(full)
}

/// Soaks every algorithm, as many at once as the machine has processors: each run is a
/// simulation on a current-thread runtime of its own, independent of the others, so running
/// them side by side changes nothing in them and divides the soak's wall time. Results come
/// back in the order of `algorithms`.
fn soak_all(
    args: &SoakArgs,
    algorithms: &[&'static engines::Algorithm],
) -> anyhow::Result<Vec<Soaked>> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, algorithms.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::with_capacity(algorithms.len()));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while let Some(&a) =
                    algorithms.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                {
                    let soaked = soak_one(args, a, &args.out, args.quiet);
                    done.lock().unwrap_or_else(|e| e.into_inner()).push((a.name, soaked));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(name, _)| algorithms.iter().position(|a| a.name == *name));
    done.into_iter().map(|(_, soaked)| soaked).collect()
}

/// The soak's report: a row per algorithm.
pub fn render(args: &SoakArgs, soaked: &[Soaked]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Soak: {} contenders on {} locks, QUORUM, runs of {}s of simulated time (the last one \
         shorter when fewer grants are missing), faults {}\n",
        args.threads,
        args.locks,
        args.run_length.as_secs(),
        args.faults
    );
    let _ = writeln!(
        out,
        "| algorithm | grants checked | runs | faults | crashed holds | overlaps | stale writes accepted / rejected | leases lost | wall s | grants per wall s |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for s in soaked {
        let _ = writeln!(out, "| {} |", cells(s).join(" | "));
    }
    out
}

/// A soaked algorithm's cells, in the order of both tables' columns.
fn cells(s: &Soaked) -> Vec<String> {
    vec![
        s.algorithm.to_string(),
        s.grants.to_string(),
        s.runs.to_string(),
        s.faults.to_string(),
        s.figures.crashed_holds.to_string(),
        s.figures.overlapping_holds.to_string(),
        format!("{} / {}", s.figures.stale_accepted, s.figures.stale_rejected),
        s.figures.leases_lost_signalled.to_string(),
        format!("{:.0}", s.wall.as_secs_f64()),
        format!("{:.0}", s.grants as f64 / s.wall.as_secs_f64().max(1e-9)),
    ]
}

/// The soak's table for the terminal: the README's columns under headers short enough to
/// stay within 120 columns.
pub fn console_table(soaked: &[Soaked]) -> String {
    let headers = [
        "algorithm",
        "grants",
        "runs",
        "faults",
        "crashed",
        "overlaps",
        "stale acc/rej",
        "leases lost",
        "wall s",
        "grants/wall s",
    ];
    let rows: Vec<Vec<String>> = soaked.iter().map(cells).collect();
    console::render(&headers, 1, &rows)
}

/// `bench-harness soak`.
pub fn run(args: &SoakArgs) -> anyhow::Result<()> {
    let algorithms = engines::resolve(&args.algorithms, engines::EngineRef::default_engine())
        .map_err(crate::UsageError)?;
    // Validate once before any run starts.
    for a in &algorithms {
        config(args, a.name, 0, args.run_length).map_err(crate::UsageError)?;
    }
    files::prepare_dir(&args.out)?;
    let soaked = soak_all(args, &algorithms)?;
    let report = render(args, &soaked);
    files::write_atomic(&args.out.join("README.md"), report.as_bytes())
        .context("cannot write the soak's README")?;
    print!("{}", console_table(&soaked));
    println!("{} has the table and the settings.", args.out.join("README.md").display());
    let bad: Vec<String> =
        soaked.iter().flat_map(|s| s.unsafe_runs.iter().map(|d| d.display().to_string())).collect();
    if !bad.is_empty() {
        return Err(check::Unsafe(format!(
            "unsafe runs (their seeds are in each summary.json): {}",
            bad.join(", ")
        ))
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod console_tests {
    use super::*;
    use crate::report::console::{widest_line, WIDTH};
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        soak: SoakArgs,
    }

    fn args(line: &[&str]) -> SoakArgs {
        Cli::parse_from(std::iter::once("soak").chain(line.iter().copied())).soak
    }

    #[test]
    fn the_last_run_is_as_long_as_the_missing_grants_need() {
        let a = args(&[]);
        let s = Duration::from_secs;
        assert_eq!(next_length(&a, 0, Duration::ZERO), s(120), "nothing measured yet");
        // 300,000 grants in 120 s: 2,500 a second.
        assert_eq!(next_length(&a, 300_000, s(120)), s(120));
        assert_eq!(next_length(&a, 900_000, s(360)), s(44), "100,000 missing, a tenth more");
        assert_eq!(next_length(&a, 990_000, s(360)), MIN_RUN);
        assert_eq!(next_length(&a, 700_000, s(360)), s(120), "a full run is not enough");
        let short = args(&["--run-length", "10s", "--grants", "1000"]);
        assert_eq!(next_length(&short, 900, s(10)), s(10), "never past the run length");
    }

    /// Every Cassandra-model lock with figures as wide as a long faulty soak gives.
    #[test]
    fn the_console_table_fits_the_terminal() {
        let algorithms = engines::resolve(&[], engines::EngineRef::default_engine()).unwrap();
        let soaked: Vec<Soaked> = algorithms
            .iter()
            .map(|a| Soaked {
                algorithm: a.name.to_string(),
                grants: 123_456_789,
                runs: 12_345,
                faults: 1_234_567,
                figures: crate::measure::safety::SafetyFigures {
                    crashed_holds: 123_456,
                    overlapping_holds: 12_345,
                    stale_accepted: 123_456,
                    stale_rejected: 1_234_567,
                    leases_lost_signalled: 123_456,
                    ..Default::default()
                },
                wall: Duration::from_secs(123_456),
                unsafe_runs: Vec::new(),
            })
            .collect();
        let t = console_table(&soaked);
        assert!(widest_line(&t) <= WIDTH, "{} columns:\n{t}", widest_line(&t));
        assert_eq!(t.lines().count(), 2 + soaked.len(), "{t}");
    }
}
