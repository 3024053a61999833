//! `bench-harness engines`: the engines side by side in **wall time** — every engine the
//! command line or the environment points at (its address given: Redis, ZooKeeper, etcd,
//! Cassandra…) and the in-process ones (the embedded store with `--clock wall`), or those
//! named by `--engines` — at a few contention levels (1, 8, 64 contenders by default).
//!
//! It writes into `--out` (default `results/engines/`):
//!
//! | file | contents |
//! |---|---|
//! | `engines.json` | [`EnginesSummary`]: the scenario, the servers, and every point's [`AlgorithmReport`] |
//! | `engines.png` / `.svg` | p50 and p99 acquisition latency and throughput against contenders, a line per engine and algorithm |
//! | `README.md` | the table of every figure and the chart, generated from `engines.json` |
//!
//! and regenerates the engines section of the sweep's `README.md` one directory up (between
//! the markers [`SECTION_BEGIN`] and [`SECTION_END`], appended if missing). The sweep writes
//! the same section from the same `engines.json` ([`section_for`]), so neither generator
//! overwrites the other's work. Nothing in these files is typed by hand.
//!
//! Unlike the sweep, these are wall-time measurements against real servers on this machine:
//! they vary from run to run, and the embedded store's sub-millisecond latency model is
//! rounded up to tokio's 1 ms timer resolution.

mod report;

pub use report::{draw, readme, section, section_for, splice_section, table};

/// The engines section of the results README.
pub static SECTION: crate::experiments::Section = crate::experiments::Section {
    dir: ENGINES_DIR,
    begin: SECTION_BEGIN,
    end: SECTION_END,
    render: section_for,
};

use crate::args::{engine_parser, LockArgs, SessionArgs};
use crate::config::RunConfig;
use crate::dist::format_duration;
use crate::dist::{parse_duration, parse_positive_duration};
use crate::engines::EngineArgs;
use crate::engines::{Algorithm, EngineRef};
use crate::experiments::{PointArgs, PointTiming};
use crate::keys::KeyDist;
use crate::measure::summary::{analyze, AlgorithmReport};
use crate::report::{files, progress};
use anyhow::{anyhow, Context};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The settings of `bench-harness engines`.
#[derive(Args, Debug, Clone)]
// The shared flags mean the same here; `engines --help` keeps its own shorter wording.
#[command(
    mut_arg("hold", |a| a.help("Hold time distribution")),
    mut_arg("think", |a| a.help("Think time distribution")),
    mut_arg("ttl", |a| a.help("Lease TTL, Redis expiry, ZooKeeper session timeout, etcd lease TTL (rounded up to whole seconds)")),
    mut_arg("poll_interval", |a| a.help("Poll interval of the polling locks (queue, bakery)"))
)]
pub struct EnginesArgs {
    /// Output directory (engines.json, engines.png/.svg, README.md). When it is called
    /// `engines` and its parent holds the sweep's README.md, that README's engines section is
    /// regenerated too.
    #[arg(short, long, value_name = "DIR", default_value = "results/engines")]
    pub out: PathBuf,
    /// Contender counts.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64", value_parser = clap::value_parser!(u32).range(1..))]
    pub contenders: Vec<u32>,
    /// Wall time of each run (the drain of waiting requests may add up to as much again).
    #[arg(short, long, default_value = "10s", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Duration,
    /// The engines to compare, comma-separated [default: every engine this command or the
    /// environment points at (its address given), and the in-process ones].
    #[arg(long, value_delimiter = ',', value_parser = engine_parser())]
    pub engines: Vec<EngineRef>,
    /// Before measuring a real server, run each of its algorithms this long with 8
    /// contenders, unrecorded (a fresh JVM runs ZooKeeper's first requests slowly); 0: none.
    #[arg(long, default_value = "2s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub warm_up: Duration,
    /// Also compare each engine's cluster that the harness starts for each point (etcd and
    /// ZooKeeper with 3 members, the lock service with 3 nodes, Redis through Sentinel,
    /// PostgreSQL with a streaming standby),
    /// beside its single server: like with like, at the same member count.
    #[arg(long)]
    pub clusters: bool,
    /// The locks and how each acquire picks one.
    #[command(flatten)]
    pub keys: LockArgs,
    /// Clients of each engine the contenders share.
    #[command(flatten)]
    pub sessions: SessionArgs,
    /// Hold and think times, TTL, poll interval, seed.
    #[command(flatten)]
    pub point: PointArgs,
    /// Every engine's own options: an address given includes that engine.
    #[command(flatten)]
    pub engine_args: EngineArgs,
    /// No progress bars or status lines.
    #[arg(short, long)]
    pub quiet: bool,
    /// Measure nothing: redraw the chart and regenerate the READMEs from the engines.json
    /// already in --out.
    #[arg(long)]
    pub redraw: bool,
}

/// Where the engines section of the results README begins.
pub const SECTION_BEGIN: &str = "<!-- engines:begin: generated from engines/engines.json by `bench-harness engines` and `bench-harness sweep`; do not edit -->";
/// Where it ends.
pub const SECTION_END: &str = "<!-- engines:end -->";
/// The directory, under the results directory, that [`section_for`] reads.
pub const ENGINES_DIR: &str = "engines";

/// The scenario every point shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnginesScenario {
    /// Hold and think times, each point's window, TTL, poll interval, seed.
    #[serde(flatten)]
    pub timing: PointTiming,
    /// Contender counts.
    pub contenders: Vec<usize>,
    /// Locks (1 is left out).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub locks: usize,
    /// How each acquire picks its lock (`fixed` is left out).
    #[serde(default, skip_serializing_if = "KeyDist::is_fixed")]
    pub key_dist: KeyDist,
    /// Clients of each engine the contenders share; left out: one per contender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<usize>,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

/// One engine of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Engine {
    /// The backend.
    pub backend: EngineRef,
    /// Where it ran (contact points, URL, hosts; "in this process" for the embedded store).
    pub address: String,
    /// Its algorithms.
    pub algorithms: Vec<String>,
    /// The engine's caveat for wall-time figures, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The shape of its cluster ("×3"); empty for one server or a model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub topology: String,
}

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnginePoint {
    /// The backend.
    pub backend: EngineRef,
    /// The algorithm.
    pub algorithm: String,
    /// The shape of the engine's cluster ("×3"); empty for one server or a model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub topology: String,
    /// Contenders.
    pub contenders: usize,
    /// Wall time the point took, the drain included.
    pub wall_s: f64,
    /// Everything measured (per-contender details left out).
    pub report: AlgorithmReport,
}

impl EnginePoint {
    /// The line's name in charts and tables: `backend/algorithm`, or the backend alone when
    /// the algorithm has its name.
    pub fn series(&self) -> String {
        series_name(self.backend, &self.topology, &self.algorithm)
    }
}

/// The series of `algorithm` on `cfg`'s engine and cluster.
fn series_of(cfg: &RunConfig, algorithm: &str) -> String {
    series_name(cfg.backend, &cfg.backend.topology(&cfg.engine), algorithm)
}

/// `backend/algorithm`, or the algorithm alone when it is named after its backend; a
/// cluster's topology follows the backend ("etcd×3", "redis sentinel/jedis").
pub(crate) fn series_name(backend: EngineRef, topology: &str, algorithm: &str) -> String {
    let sep = if topology.starts_with('×') || topology.is_empty() { "" } else { " " };
    if backend.name() == algorithm {
        format!("{algorithm}{sep}{topology}")
    } else {
        format!("{backend}{sep}{topology}/{algorithm}")
    }
}

/// `engines.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnginesSummary {
    /// Layout version (that of `summary.json`).
    pub schema_version: u32,
    /// `bench-harness <version>`.
    pub tool: String,
    /// The shared scenario.
    pub scenario: EnginesScenario,
    /// The engines, in the order they ran.
    pub engines: Vec<Engine>,
    /// Every point, in the order they ran.
    pub points: Vec<EnginePoint>,
}

impl EnginesSummary {
    /// The series in the order they first appear.
    pub fn series(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in &self.points {
            let s = p.series();
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// The points of `series`, by contenders.
    pub fn points_of(&self, series: &str) -> Vec<&EnginePoint> {
        let mut pts: Vec<&EnginePoint> =
            self.points.iter().filter(|p| p.series() == series).collect();
        pts.sort_by_key(|p| p.contenders);
        pts
    }
}

/// The contender counts of `args`, ascending, each once.
fn contender_levels(args: &EnginesArgs) -> Vec<usize> {
    let mut contenders: Vec<usize> = args.contenders.iter().map(|&n| n as usize).collect();
    contenders.sort_unstable();
    contenders.dedup();
    contenders
}

/// The engines of `args`: those named by `--engines`, or else every engine the command line or
/// the environment points at (in-process engines always are), in [`crate::engines::ENGINES`]
/// order; each with the run configuration of its points (algorithms and contenders unset).
fn engines_of(args: &EnginesArgs) -> anyhow::Result<Vec<RunConfig>> {
    let chosen: Vec<EngineRef> = if args.engines.is_empty() {
        EngineRef::all().filter(|e| args.engine_args.is_configured(*e)).collect()
    } else {
        EngineRef::all().filter(|e| args.engines.contains(e)).collect()
    };
    anyhow::ensure!(
        !chosen.is_empty(),
        "nothing to compare: give a server's address (e.g. --redis, --zookeeper, --etcd, --nodes) or --engines"
    );
    chosen
        .into_iter()
        .map(|e| {
            let engine = args.engine_args.options(e).map_err(|m| anyhow!(m))?;
            let mut cfg = RunConfig {
                backend: e,
                engine,
                clock: crate::config::ClockMode::Wall,
                ..RunConfig::default()
            };
            PointTiming::of(&args.point, args.duration).apply(&mut cfg);
            args.keys.apply(&mut cfg);
            args.sessions.apply(&mut cfg);
            Ok(cfg)
        })
        .collect()
}

/// The runs of `args`: one [`RunConfig`] per engine, algorithm and contender count, level by
/// level: every engine's points at one contender count run one after the other before the
/// next count begins. Wall-time figures drift over a run of many minutes (other programs on
/// the disk, the machine's neighbours); measured engine after engine, a drift lands on one
/// engine's points only, while the points a comparison puts side by side (the same contender
/// count) run minutes apart. Level by level they run seconds apart, so a drift moves them
/// together.
pub fn plan(args: &EnginesArgs) -> anyhow::Result<(Vec<Engine>, Vec<RunConfig>)> {
    let contenders = contender_levels(args);
    let mut engines = Vec::new();
    let mut runs = Vec::new();
    let mut bases = engines_of(args)?;
    if args.clusters {
        let clusters: Vec<RunConfig> = bases
            .iter()
            .filter_map(|b| b.backend.clustered().map(|engine| RunConfig { engine, ..b.clone() }))
            .collect();
        bases.extend(clusters);
    }
    for base in &bases {
        engines.push(Engine {
            backend: base.backend,
            address: base.address(),
            algorithms: base.backend.algorithm_names().iter().map(|a| a.to_string()).collect(),
            note: base.backend.comparison_note(&base.engine),
            topology: base.backend.topology(&base.engine),
        });
    }
    for &n in &contenders {
        for base in &bases {
            for a in base.backend.algorithm_names() {
                let cfg = RunConfig { algorithms: vec![a.to_string()], threads: n, ..base.clone() };
                cfg.validate().map_err(|e| anyhow::Error::new(crate::UsageError(e)))?;
                runs.push(cfg);
            }
        }
    }
    Ok((engines, runs))
}

/// `bench-harness engines`.
pub fn run(args: &EnginesArgs) -> anyhow::Result<()> {
    let wall = std::time::Instant::now();
    let earlier = crate::experiments::earlier_or_prepare(&args.out, "engines.json", args.redraw)?;
    if let Some(summary) = earlier {
        return report::write_outputs(args, &summary, wall);
    }
    let (engines, runs) = plan(args)?;
    let mut summary = EnginesSummary {
        schema_version: crate::measure::summary::SCHEMA_VERSION,
        tool: crate::experiments::tool(),
        scenario: scenario(args),
        engines,
        points: Vec::new(),
    };
    progress::status(args.quiet, &announce(&summary.engines, runs.len(), args.duration));
    let mut warmed: Vec<String> = Vec::new();
    for cfg in &runs {
        let key = series_of(cfg, &cfg.algorithms[0]);
        if !cfg.backend.in_process() && !args.warm_up.is_zero() && !warmed.contains(&key) {
            warm_up(cfg, args)?;
            warmed.push(key);
        }
        summary.points.push(measure_point(cfg, args.quiet)?);
        files::write_json(&args.out.join("engines.json"), &summary)?;
    }
    report::write_outputs(args, &summary, wall)
}

fn scenario(args: &EnginesArgs) -> EnginesScenario {
    EnginesScenario {
        timing: PointTiming::of(&args.point, args.duration),
        contenders: contender_levels(args),
        locks: args.keys.locks as usize,
        key_dist: args.keys.key_dist,
        sessions: args.sessions.sessions.map(|n| n as usize),
    }
}

fn announce(engines: &[Engine], runs: usize, duration: Duration) -> String {
    let where_ = engines
        .iter()
        .map(|e| {
            if e.backend.in_process() {
                format!("the {} store in this process", e.backend)
            } else {
                format!("{} at {}", e.backend, e.address)
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "engines: {runs} runs of {} each (plus the drain of waiting requests), wall time; {where_}",
        format_duration(duration)
    )
}

pub(crate) fn algorithm_of(cfg: &RunConfig) -> anyhow::Result<&'static Algorithm> {
    let name = &cfg.algorithms[0];
    cfg.backend.algorithm(name).ok_or_else(|| anyhow!("{name} does not run on {}", cfg.backend))
}

/// An unrecorded run of `cfg`'s algorithm with 8 contenders (a fresh JVM runs ZooKeeper's
/// first requests slowly).
fn warm_up(cfg: &RunConfig, args: &EnginesArgs) -> anyhow::Result<()> {
    let series = series_of(cfg, &cfg.algorithms[0]);
    let warm = RunConfig { threads: 8, duration: args.warm_up, ..cfg.clone() };
    let bar = progress::bar(
        warm.duration.as_millis() as u64,
        format!("warm-up {series}"),
        args.quiet,
        "ms",
    );
    crate::run::run_algorithm(&warm, algorithm_of(cfg)?, Some(&bar))
        .with_context(|| format!("warming up {series}"))?;
    bar.finish_and_clear();
    Ok(())
}

/// One measured point.
fn measure_point(cfg: &RunConfig, quiet: bool) -> anyhow::Result<EnginePoint> {
    let algorithm = algorithm_of(cfg)?;
    let topology = cfg.backend.topology(&cfg.engine);
    let series = series_name(cfg.backend, &topology, algorithm.name);
    let label = format!("{series} ×{}", cfg.threads);
    let bar = progress::bar(cfg.duration.as_millis() as u64, label.clone(), quiet, "ms");
    let run = crate::run::run_algorithm(cfg, algorithm, Some(&bar))
        .with_context(|| format!("{series} with {} contenders", cfg.threads))?;
    bar.finish_and_clear();
    let mut report = analyze(cfg, algorithm, &run);
    report.contenders.clear();
    progress::status(
        quiet,
        &format!(
            "{label:>24}: {} grants, p50 {:.1} ms, p99 {:.1} ms, {:.1} grants/s ({:.1} s wall)",
            report.grants,
            report.latency.p50_ms,
            report.latency.p99_ms,
            report.throughput.grants_per_second_per_lock,
            run.wall_time.as_secs_f64()
        ),
    );
    Ok(EnginePoint {
        backend: cfg.backend,
        algorithm: algorithm.name.to_string(),
        topology,
        contenders: cfg.threads,
        wall_s: (run.wall_time.as_secs_f64() * 10.0).round() / 10.0,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_every_engine_algorithm_and_level() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "bench-harness",
            "engines",
            "--redis",
            "redis://127.0.0.1:1/",
            "--zookeeper",
            "127.0.0.1:1",
            "--contenders",
            "8,1,8",
        ])
        .unwrap();
        let Some(crate::cli::Command::Engines(mut args)) = cli.command else { panic!("engines") };
        // Whatever LOCK_CASSANDRA_NODES says: the engines named are compared.
        args.engines = ["embedded", "redis", "zookeeper"]
            .iter()
            .map(|n| EngineRef::find(n).unwrap())
            .collect();
        let (engines, runs) = plan(&args).unwrap();
        assert_eq!(
            engines.iter().map(|e| e.backend.name()).collect::<Vec<_>>(),
            ["embedded", "redis", "zookeeper"]
        );
        assert_eq!(engines[1].address, "redis://127.0.0.1:1/");
        assert!(engines[0].note.is_some());
        // Every algorithm of each engine at 1 and 8 contenders.
        let per_level: usize = engines.iter().map(|e| e.algorithms.len()).sum();
        assert_eq!(per_level, 6 + 2 + 1);
        assert_eq!(runs.len(), 2 * per_level);
        // Level by level: every engine at 1 contender, then every engine at 8.
        let levels: Vec<usize> = runs.iter().map(|r| r.threads).collect();
        assert_eq!(levels, [vec![1; per_level], vec![8; per_level]].concat());
        assert_eq!(runs[per_level - 1].backend.name(), "zookeeper");
        assert_eq!(runs[per_level].backend.name(), "embedded");
        assert!(runs.iter().all(|r| r.clock == crate::config::ClockMode::Wall));
        let zk = EngineRef::find("zookeeper").unwrap();
        assert_eq!(series_name(zk, "", "zookeeper"), "zookeeper");
        assert_eq!(series_name(zk, "×3", "zookeeper"), "zookeeper×3");
        let redis = EngineRef::find("redis").unwrap();
        assert_eq!(series_name(redis, "", "jedis"), "redis/jedis");
        assert_eq!(series_name(redis, "sentinel", "jedis"), "redis sentinel/jedis");
    }

    #[test]
    fn locks_key_dist_and_sessions_reach_every_point_and_the_readme() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let mut all = vec!["bench-harness", "engines", "--engines", "redis,zookeeper"];
            all.extend_from_slice(extra);
            let cli = crate::cli::Cli::try_parse_from(all).unwrap();
            let Some(crate::cli::Command::Engines(args)) = cli.command else { panic!("engines") };
            args
        };
        let args = parse(&["--locks", "50", "--key-dist", "zipf:0.99", "--sessions", "2"]);
        let (_, runs) = plan(&args).unwrap();
        assert!(!runs.is_empty());
        for r in &runs {
            assert_eq!((r.locks, r.key_dist, r.sessions), (50, KeyDist::Zipf { s: 0.99 }, Some(2)));
        }
        let summary = EnginesSummary {
            schema_version: 1,
            tool: String::new(),
            scenario: scenario(&args),
            engines: Vec::new(),
            points: Vec::new(),
        };
        let json = serde_json::to_string(&summary).unwrap();
        assert!(json.contains(r#""key_dist":"zipf:0.99""#) && json.contains(r#""sessions":2"#));
        assert_eq!(serde_json::from_str::<EnginesSummary>(&json).unwrap(), summary);
        let md = readme(&summary);
        assert!(md.contains("on 50 locks, each acquire drawing its lock (zipf:0.99)"), "{md}");
        assert!(md.contains("sharing 2 clients of each engine"), "{md}");

        let default = scenario(&parse(&[]));
        let json = serde_json::to_string(&default).unwrap();
        for key in ["locks", "key_dist", "sessions"] {
            assert!(!json.contains(key), "{key} in {json}");
        }
        let md = readme(&EnginesSummary { scenario: default, ..summary });
        assert!(md.contains("per point on one lock, at"), "{md}");

        // An engine that cannot share clients is a usage error naming it.
        let mut with_embedded = parse(&["--sessions", "2"]);
        with_embedded.engines.push(EngineRef::find("embedded").unwrap());
        let e = plan(&with_embedded).unwrap_err();
        assert_eq!(crate::Failure::of(&e), crate::Failure::Usage, "{e}");
        assert!(e.to_string().contains("--sessions") && e.to_string().contains("embedded"), "{e}");
    }
}
