//! # bench-harness
//!
//! The workspace's benchmark: N contenders on every registered lock
//! algorithm, each looping request → hold → release → think, measured on
//!
//! - **acquisition latency** (HDR histograms: p50, p90, p99, p99.9, max),
//! - **throughput** (grants per second per lock),
//! - **handoff gap** (release to the next grant while someone waits, also in store round
//!   trips and against the algorithm's ideal handoff),
//! - **fairness** (Jain's index, the longest run of grants to one contender, overtakes by
//!   request time, and for locks with a line, overtakes of requests already in it:
//!   [`measure::metrics::InLine`]),
//! - **store load** (requests per grant and per second),
//! - **safety** (overlapping holds and fencing-token order, both must be zero).
//!
//! The contenders ask for the mutex by default, or ([`primitive`], `--primitive`) for a
//! reader-writer lock, a semaphore or an election, each grant then checked against that
//! primitive's rule ([`measure::conflict`]) and measured for what it is chosen by
//! ([`measure::shares`]).
//!
//! `cargo run -p bench-harness -- --threads 64` runs every algorithm on the embedded store in
//! simulated time, prints the comparison and writes `out/summary.json`, `out/grants.csv` and
//! charts; `bench-harness sweep` regenerates the thesis's benchmark charts in `results/`.
//!
//! Real servers are engines too: `--backend cassandra --nodes host:port`, `--backend redis
//! --redis URL`, `--backend zookeeper --zookeeper host:port`, all in wall time; `--processes
//! P` spreads the contenders over P worker processes; `bench-harness engines` compares the
//! engines side by side.
//!
//! ## The pipeline
//!
//! The folders follow the data:
//!
//! 1. [`cli`]: the command line → a [`config::RunConfig`] (each layer reads the part of it
//!    it needs: the engine its options, the algorithms [`engines::AlgorithmSettings`]);
//! 2. [`engines`]: where the locks live, one module per engine behind the [`engines::Engine`]
//!    trait, each with its options, connection, counters and algorithms;
//! 3. [`mod@run`]: the contenders of one algorithm on its opened engine, in this process or in
//!    worker processes → the raw record, [`measure::log::RunOutcome`];
//! 4. [`measure`]: pure metrics over that record → [`measure::summary::Summary`], the one
//!    result contract;
//! 5. [`report`]: the console table, `summary.json`, `grants.csv` and charts, from the
//!    summary alone;
//! 6. [`experiments`]: many runs into `results/`: the sweep and the engines comparison.
//!
//! ## Memory
//!
//! What a run holds grows with what it records, not only with its contenders:
//!
//! - **constant**: the counters and the store's live cells;
//! - **per latency bucket**: per contender, its latencies as the histogram buckets it hit
//!   ([`measure::latencies`]: a dense histogram per contender was most of the memory of a run
//!   of a thousand contenders). A long run keeps finding buckets of its latencies' tail, so
//!   this grows, slowly, at 12 bytes a bucket;
//! - **per grant, on disk**: the grant log and the fenced resource's log (two writes a hold)
//!   are written to disk as the run goes ([`measure::spool`]). The grant log is then sorted
//!   on disk by an external merge sort ([`measure::grant_log`]), which holds one run of
//!   records in memory, and every metric reads it in passes ([`measure::passes`]), keeping
//!   only what it carries from one grant to the next: the holds still open, the requests of
//!   the last longest wait, counters for exact quantiles. The stale-write check sorts the
//!   writes and the grants on disk the same way and merges them
//!   ([`measure::safety::each_write_judged`]). Once analysed, a run keeps only the lock-0
//!   holds its owner timeline can show. The checker ([`check`]) reads the CSV files back a
//!   line at a time into the same sorted log and spool, so checking a soak's run holds no
//!   more than checking a minute's;
//! - **per deletion**: the embedded store keeps every tombstone for `gc_grace` (ten days, as
//!   Cassandra does), so a simulated hour holds six times the tombstones of ten minutes; as
//!   Cassandra, it keeps all but each row's newest ones on disk
//!   (`lock_core::embedded::EmbeddedConfig::dead_cells_on_disk`). `--gc-grace` shorter than
//!   the run lets compaction purge them, and changes what reads scan.
//!
//! The binary's allocator (mimalloc) asks for no huge pages and returns freed memory at
//! once; with either default a run's resident memory was mostly the allocator's.
//!
//! ## Example
//!
//! Measure the queue lock with eight contenders for five simulated seconds:
//!
//! ```
//! use bench_harness::{config::RunConfig, measure::summary, run};
//! use std::time::Duration;
//!
//! let cfg = RunConfig {
//!     algorithms: vec!["queue".into()],
//!     threads: 8,
//!     duration: Duration::from_secs(5),
//!     ..RunConfig::default()
//! };
//! let queue = cfg.backend.algorithm("queue").unwrap();
//! let outcome = run::run_algorithm(&cfg, queue, None)?;
//! let report = summary::analyze(&cfg, queue, &outcome);
//! assert!(report.grants > 0);
//! assert_eq!(report.safety.overlapping_holds, 0);
//! assert!(report.fairness.jain_index.unwrap() > 0.9);
//! # Ok::<(), anyhow::Error>(())
//! ```
#![deny(missing_docs)]

pub mod args;
pub mod check;
pub mod cli;
pub mod config;
pub mod dist;
pub mod engines;
pub mod experiments;
pub mod faults;
pub mod keys;
pub mod measure;
pub mod primitive;
pub mod report;
pub mod run;

use args::RunArgs;
use cli::{Cli, Command};
use config::ClockMode;
use measure::summary::{self, Summary};
use report::{figures, files, progress, table};
use std::path::Path;

/// A usage error found after parsing (a combination of settings, an algorithm that does not
/// run on the chosen backend): the binary exits with 2, as for clap's own usage errors.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// What a failed command means to a script that runs it: its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// A usage error (exit 2): nothing ran.
    Usage,
    /// The checker found a run unsafe (exit 3).
    Unsafe,
    /// Anything else (exit 1): a server that cannot be reached or started, a file that
    /// cannot be written.
    Failed,
}

impl Failure {
    /// What `error` (from [`run()`]) means: a [`UsageError`] or a [`check::Unsafe`] anywhere in
    /// its chain, else a failure.
    pub fn of(error: &anyhow::Error) -> Failure {
        if error.chain().any(|e| e.is::<UsageError>()) {
            Failure::Usage
        } else if error.chain().any(|e| e.is::<check::Unsafe>()) {
            Failure::Unsafe
        } else {
            Failure::Failed
        }
    }

    /// What to tell the user: the usage error's or the violation's own text, else the whole
    /// chain of `error`.
    pub fn message(self, error: &anyhow::Error) -> String {
        let own = |e: &&(dyn std::error::Error + 'static)| match self {
            Failure::Usage => e.is::<UsageError>(),
            Failure::Unsafe => e.is::<check::Unsafe>(),
            Failure::Failed => false,
        };
        error.chain().find(own).map_or_else(|| format!("{error:#}"), |e| e.to_string())
    }

    /// The process's exit code.
    pub fn exit_code(self) -> u8 {
        match self {
            Failure::Failed => 1,
            Failure::Usage => 2,
            Failure::Unsafe => 3,
        }
    }
}

/// Runs what the command line asks for.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => run_command(&cli.run),
        Some(Command::Run(args)) => run_command(&args),
        Some(Command::Sweep(args)) => experiments::sweep::run(&args),
        Some(Command::Engines(args)) => experiments::compare::run(&args),
        Some(Command::Longrun(args)) => experiments::longrun::run(&args),
        Some(Command::Check(args)) => check::run(&args),
        Some(Command::Soak(args)) => experiments::soak::run(&args),
        Some(Command::Safety(args)) => experiments::safety::run(&args),
        Some(Command::Primitives(args)) => experiments::primitives::run(&args),
        Some(Command::Scale(args)) => experiments::scale::run(&args),
        Some(Command::List) => {
            print!("{}", engines::list());
            Ok(())
        }
        Some(Command::Worker) => run::processes::worker_main(),
        Some(Command::LockServer(args)) => Ok(lock_service::server::serve(args)?),
    }
}

/// `bench-harness [run]`: every algorithm in turn, results written as each one ends.
pub fn run_command(args: &RunArgs) -> anyhow::Result<()> {
    let cfg = args.to_config().map_err(|e| anyhow::Error::new(UsageError(e)))?;
    let summary = run_scenario(&cfg, &args.out, args.quiet)?;
    let view = if args.wide { table::View::Wide } else { table::View::Compact };
    print!("{}", table::table(&summary, view));
    if !args.quiet {
        print!("{}", table::notes(&summary, view));
    }
    if let Some(shares) = report::shares::table(&summary) {
        print!("{shares}");
    }
    if args.check {
        println!("\ncheck {}:", args.out.display());
        check::check_and_report(&args.out, cfg.ttl, 10)?;
    }
    Ok(())
}

/// Runs every algorithm of `cfg` into `out`: after each algorithm `summary.json`,
/// `grants.csv` and the charts are (re)written. Returns the summary.
pub fn run_scenario(cfg: &config::RunConfig, out: &Path, quiet: bool) -> anyhow::Result<Summary> {
    files::prepare_dir(out)?;
    let csv = files::RunLogs::create(out, cfg.primitive)?;
    let mut summary = Summary::new(cfg);
    let mut logs = Vec::new();
    let mut faults = std::collections::BTreeMap::new();
    // The scenario in a few lines of the terminal's width rather than one 250-character line.
    progress::status(quiet, &report::console::wrap(&cfg.to_string(), report::console::WIDTH));
    let total = std::time::Instant::now();
    for algorithm in engines::resolve(&cfg.algorithms, cfg.backend).map_err(UsageError)? {
        let bar = (cfg.clock == ClockMode::Wall)
            .then(|| progress::bar(cfg.duration.as_millis() as u64, algorithm.name, quiet, "ms"));
        let outcome = run::run_algorithm(cfg, algorithm, bar.as_ref())?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let report = summary::analyze(cfg, algorithm, &outcome);
        progress::status(quiet, &one_line(&report, outcome.wall_time));
        summary.results.push(report);
        csv.append(&outcome)?;
        files::write_json(&out.join("summary.json"), &summary)?;
        faults.insert(algorithm.name.to_string(), outcome.faults);
        let holds = figures::holds_for_timeline(outcome.grants.iter(), !cfg.faults.is_empty());
        drop(outcome.grants);
        logs.push((algorithm.name.to_string(), holds));
        figures::draw_run(out, &summary, &logs, &faults)?;
    }
    progress::status(
        quiet,
        &format!(
            "\nwrote {}/summary.json, grants.csv and charts in {:.1} s\n",
            out.display(),
            total.elapsed().as_secs_f64()
        ),
    );
    Ok(summary)
}

/// The status line after one algorithm's run.
fn one_line(report: &summary::AlgorithmReport, wall: std::time::Duration) -> String {
    format!(
        "{:>8}: {} grants, p50 {:.1} ms, p99 {:.1} ms, Jain {}, {} errors ({:.1} s wall)",
        report.algorithm,
        report.grants,
        report.latency.p50_ms,
        report.latency.p99_ms,
        report.fairness.jain_index.map_or("-".into(), |j| format!("{j:.3}")),
        report.errors.total(),
        wall.as_secs_f64()
    )
}

/// The README's examples (adding an engine, adding an algorithm) compile and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
