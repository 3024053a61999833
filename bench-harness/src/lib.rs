//! # bench-harness
//!
//! The workspace's benchmark (SPEC section 5): N contenders on every registered lock
//! algorithm, each looping request → hold → release → think, measured on
//!
//! - **acquisition latency** (HDR histograms: p50, p90, p99, p99.9, max),
//! - **throughput** (grants per second per lock),
//! - **handoff gap** (release to the next grant while someone waits, also in store round
//!   trips and against the algorithm's ideal handoff),
//! - **fairness** (Jain's index, the longest run of grants to one contender, overtakes),
//! - **store load** (requests per grant and per second),
//! - **safety** (overlapping holds and fencing-token order, both must be zero).
//!
//! `cargo run -p bench-harness -- --threads 64` runs every algorithm on the embedded store in
//! simulated time, prints the comparison and writes `out/summary.json`, `out/grants.csv` and
//! charts; `bench-harness sweep` regenerates the thesis's benchmark charts in `results/`.
//!
//! Real servers are built in too: `--backend cassandra --nodes host:port` (shadow, queue and
//! bakery on `lock_cassandra::CassandraStore`), `--backend redis --redis URL` (jedis,
//! redis-token), `--backend zookeeper --zookeeper host:port` (the ZooKeeper recipe), all in
//! wall time; `--processes P` spreads the contenders over P worker processes ([`worker`]);
//! `bench-harness engines` compares the engines side by side ([`engines`]).
//!
//! The modules, in the order data flows: [`cli`] → [`config::RunConfig`] → [`registry`]
//! (name and backend → constructor) and [`backend`] → [`runner`] (the grant log; or
//! [`worker`], several processes merged) → [`metrics`] (pure functions) →
//! [`summary::Summary`] (the one result contract) → [`output`], [`figures`], [`sweep`],
//! [`engines`].
//!
//! ## Example
//!
//! Measure the queue lock with eight contenders for five simulated seconds:
//!
//! ```
//! use bench_harness::{config::RunConfig, registry, runner, summary};
//! use std::time::Duration;
//!
//! let cfg = RunConfig {
//!     algorithms: vec!["queue".into()],
//!     threads: 8,
//!     duration: Duration::from_secs(5),
//!     ..RunConfig::default()
//! };
//! let entry = registry::lookup("queue", cfg.backend).unwrap();
//! let run = runner::run_algorithm(&cfg, entry, None)?;
//! let report = summary::analyze(&cfg, entry, &run);
//! assert!(report.grants > 0);
//! assert_eq!(report.safety.overlapping_holds, 0);
//! assert!(report.fairness.jain_index.unwrap() > 0.9);
//! # Ok::<(), anyhow::Error>(())
//! ```
#![deny(missing_docs)]

pub mod backend;
pub mod charts;
pub mod cli;
pub mod config;
pub mod counting;
pub mod dist;
pub mod engines;
pub mod figures;
pub mod metrics;
pub mod output;
pub mod progress;
pub mod registry;
pub mod runner;
pub mod summary;
pub mod sweep;
pub mod worker;

use anyhow::anyhow;
use cli::{Cli, Command, RunArgs};
use config::ClockMode;
use std::path::Path;
use summary::Summary;

/// A usage error found after parsing (a combination of settings, an algorithm that does not
/// run on the chosen backend): the binary exits with 2, as for clap's own usage errors.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Runs what the command line asks for.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        None => run_command(&cli.run),
        Some(Command::Run(args)) => run_command(&args),
        Some(Command::Sweep(args)) => sweep::run(&args),
        Some(Command::Engines(args)) => engines::run(&args),
        Some(Command::List) => {
            print!("{}", list());
            Ok(())
        }
        Some(Command::Worker) => worker::worker_main(),
    }
}

/// The algorithms per backend, for `bench-harness list`.
pub fn list() -> String {
    let mut out =
        String::from("algorithms per backend (--backend B, then --algorithms among its own):\n");
    for b in config::BackendKind::ALL {
        let how = match b {
            config::BackendKind::Embedded => {
                "in this process; simulated time (default) or --clock wall".to_string()
            }
            config::BackendKind::Cassandra => format!(
                "--nodes host:port[,...] (or LOCK_CASSANDRA_NODES; default {}), --keyspace; wall time",
                backend::DEFAULT_CASSANDRA_NODES
            ),
            config::BackendKind::Redis => format!(
                "--redis URL (default {}); wall time",
                backend::DEFAULT_REDIS_URL
            ),
            config::BackendKind::Zookeeper => format!(
                "--zookeeper host:port[,...] (default {}); wall time",
                backend::DEFAULT_ZOOKEEPER
            ),
        };
        let state = match backend::check_available(b) {
            Ok(()) => "",
            Err(_) => " [not built in]",
        };
        out.push_str(&format!("{}{state}: {how}\n", b.name()));
        for e in registry::for_backend(b) {
            out.push_str(&format!("  {:<12} {}\n", e.name, e.summary));
        }
    }
    out
}

/// `bench-harness [run]`: every algorithm in turn, results written as each one ends.
pub fn run_command(args: &RunArgs) -> anyhow::Result<()> {
    let cfg = args
        .to_config()
        .map_err(|e| anyhow::Error::new(UsageError(e)))?;
    let summary = run_scenario(&cfg, &args.out, args.quiet)?;
    print!("{}", output::table(&summary));
    if !args.quiet {
        print!("{}", output::notes(&summary));
    }
    Ok(())
}

/// Runs every algorithm of `cfg` into `out`: after each algorithm `summary.json`,
/// `grants.csv` and the charts are (re)written. Returns the summary.
pub fn run_scenario(cfg: &config::RunConfig, out: &Path, quiet: bool) -> anyhow::Result<Summary> {
    output::prepare_dir(out)?;
    let csv = output::GrantsCsv::create(&out.join("grants.csv"))?;
    let mut summary = Summary::new(cfg);
    let mut logs = Vec::new();
    progress::status(quiet, &format!("{}\n", output::describe(cfg)));
    let total = std::time::Instant::now();
    for name in &cfg.algorithms {
        let entry = registry::lookup(name, cfg.backend).ok_or_else(|| {
            anyhow!(
                "algorithm '{name}' does not run on the {} backend",
                cfg.backend
            )
        })?;
        let bar = match cfg.clock {
            ClockMode::Wall => Some(progress::bar(
                cfg.duration.as_millis() as u64,
                entry.name,
                quiet,
                "ms",
            )),
            ClockMode::Simulated => None,
        };
        let run = runner::run_algorithm(cfg, entry, bar.as_ref())?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let report = summary::analyze(cfg, entry, &run);
        progress::status(
            quiet,
            &format!(
                "{:>8}: {} grants, p50 {:.1} ms, p99 {:.1} ms, Jain {} ({:.1} s wall)",
                entry.name,
                report.grants,
                report.latency.p50_ms,
                report.latency.p99_ms,
                report
                    .fairness
                    .jain_index
                    .map_or("-".into(), |j| format!("{j:.3}")),
                run.wall_time.as_secs_f64()
            ),
        );
        summary.results.push(report);
        csv.append(entry.name, &run.grants)?;
        output::write_json(&out.join("summary.json"), &summary)?;
        logs.push((entry.name.to_string(), run.grants));
        figures::draw_run(out, &summary, &logs)?;
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
