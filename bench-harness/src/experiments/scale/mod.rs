//! `bench-harness scale`: how each engine's throughput and cost grow with the number of
//! clients, the number of locks and how the acquires spread over them.
//!
//! It sweeps clients (64, 256, 1000 by default) × locks (1, 100, 10 000) × key distribution
//! (uniform, zipf:0.99) over every server engine the harness can start, at one server and as
//! the cluster it starts ([`crate::engines::Engine::spawned`] and
//! [`crate::engines::Engine::clustered`]: the lock service, etcd and ZooKeeper ×1 and ×3, Redis
//! with its append-only file and through Sentinel, Redlock's masters), in wall time, and the
//! in-process engines (the Cassandra-model locks on the embedded store) in simulated time. On
//! one lock every distribution draws lock-0, so that lock count runs once. Each point is one
//! `run` configuration: one algorithm, hold 1 ms, think `exp:5ms`, a short window (10 s).
//!
//! Per point it records aggregate grants per second, p50 and p99 acquisition latency, store
//! requests per grant, errors and overlapping holds (from the run's own figures), and what
//! the point cost the machine ([`probe`]): the CPU seconds of the servers the harness started
//! per 1,000 grants and their peak resident set (summed over members), and the harness's own
//! CPU per grant.
//!
//! It writes into `--out` (default `results/scale/`):
//!
//! | file | contents |
//! |---|---|
//! | `scale.json` | [`ScaleSummary`]: the scenario and every point |
//! | `scale.png` / `.svg` | aggregate grants/s against clients, a panel per locks × distribution, a line per engine |
//! | `README.md` | per locks × distribution, tables with a row per engine and members and a column per client count, the service's throughput over etcd's and ZooKeeper's; generated from `scale.json` |
//!
//! With `--engines`, the points measured are merged into the `scale.json` already in `--out`
//! when it is of the same scenario (see [`ScaleArgs::engines`]), and the other engines' points
//! stay; a `scale.json` of another scenario is refused.
//!
//! A server the harness cannot start fails the sweep with what to install
//! ([`test_servers::INSTALL_HINT`]); none is skipped.

pub mod probe;
mod report;

pub use report::{draw, readme, table};

use crate::args::engine_parser;
use crate::config::{ClockMode, RunConfig};
use crate::dist::{format_duration, parse_positive_duration};
use crate::engines::{EngineOptions, EngineRef};
use crate::experiments::compare::{algorithm_of, series_name};
use crate::experiments::{PointArgs, PointTiming};
use crate::keys::KeyDist;
use crate::measure::summary::analyze;
use crate::report::{files, progress};
use anyhow::Context;
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The settings of `bench-harness scale`.
#[derive(Args, Debug, Clone)]
#[command(mut_arg("hold", |a| a.default_value("1ms")))]
pub struct ScaleArgs {
    /// Output directory (scale.json, scale.png/.svg, README.md).
    #[arg(short, long, value_name = "DIR", default_value = "results/scale")]
    pub out: PathBuf,
    /// Client counts (contenders, each with its own client of the engine).
    #[arg(long, value_delimiter = ',', default_value = "64,256,1000", value_parser = clap::value_parser!(u32).range(1..))]
    pub clients: Vec<u32>,
    /// Lock counts.
    #[arg(long, value_delimiter = ',', default_value = "1,100,10000", value_parser = clap::value_parser!(u32).range(1..))]
    pub locks: Vec<u32>,
    /// How each acquire draws its lock: uniform, zipf:S (see `run --key-dist`); on one lock
    /// every distribution is the same and runs once.
    #[arg(long, value_delimiter = ',', default_value = "uniform,zipf:0.99")]
    pub dists: Vec<KeyDist>,
    /// Measured window of each point, in wall time on a server and simulated time in process
    /// (the drain of waiting requests may add up to as much again).
    #[arg(short, long, default_value = "10s", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Duration,
    /// A tiny grid: 2 and 8 clients on 1 and 10 locks, uniform, 1 s per point.
    #[arg(long, conflicts_with_all = ["clients", "locks", "dists", "duration"])]
    pub quick: bool,
    /// The engines, comma-separated [default: every engine the harness can start, and the
    /// in-process ones]. When --out already holds a scale.json of the same scenario (clients,
    /// cells, window, hold, think, TTL, poll interval and seed), the points measured replace
    /// those of the same engine, variant, algorithm, cell and client count, and every other
    /// point stays where a full run puts it; a scale.json of another scenario is refused before
    /// anything runs.
    #[arg(long, value_name = "ENGINE,...", value_delimiter = ',', value_parser = engine_parser())]
    pub engines: Vec<EngineRef>,
    /// Only one server per engine, not the clusters the harness starts.
    #[arg(long)]
    pub no_clusters: bool,
    /// Hold and think times, TTL, poll interval, seed.
    #[command(flatten)]
    pub point: PointArgs,
    /// No progress bars or status lines.
    #[arg(short, long)]
    pub quiet: bool,
    /// Measure nothing: redraw the chart and regenerate README.md from the scale.json already
    /// in --out.
    #[arg(long)]
    pub redraw: bool,
}

/// The scenario every point shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleScenario {
    /// Hold and think times, each point's window, TTL, poll interval, seed.
    #[serde(flatten)]
    pub timing: PointTiming,
    /// Client counts, ascending.
    pub clients: Vec<usize>,
    /// Lock counts and distributions, in the order they ran.
    pub cells: Vec<Cell>,
}

/// One lock count and key distribution: a table of the README and a panel of the chart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Cell {
    /// Locks.
    pub locks: usize,
    /// How each acquire draws its lock (`fixed` on one lock: always lock-0).
    pub key_dist: KeyDist,
}

impl Cell {
    /// "100 locks, zipf:0.99"; "1 lock".
    pub fn title(&self) -> String {
        if self.locks == 1 {
            "1 lock".into()
        } else {
            format!("{} locks, {}", self.locks, self.key_dist)
        }
    }
}

/// What the servers the harness started for a point cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ServerCost {
    /// Processes started for the point (members, Sentinels).
    pub processes: usize,
    /// Their CPU seconds in the window, summed.
    pub cpu_s: f64,
    /// CPU seconds per 1,000 grants of the window; `None` without grants.
    pub cpu_s_per_1000_grants: Option<f64>,
    /// The sum of their peak resident sets (`VmHWM`), in MiB.
    pub peak_rss_mib: f64,
}

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScalePoint {
    /// The engine.
    pub backend: EngineRef,
    /// The algorithm.
    pub algorithm: String,
    /// The shape of the engine's cluster ("×3", "sentinel"); empty for one server or a model.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub topology: String,
    /// The clock the point ran on.
    pub clock: ClockMode,
    /// The point's locks and distribution.
    pub cell: Cell,
    /// Clients.
    pub clients: usize,
    /// Grants in the window.
    pub grants: u64,
    /// Grants per second over all locks.
    pub grants_per_second: f64,
    /// Median acquisition latency, ms.
    pub p50_ms: f64,
    /// 99th percentile acquisition latency, ms.
    pub p99_ms: f64,
    /// Store requests per grant; `None` where the engine does not count them.
    pub requests_per_grant: Option<f64>,
    /// Lock errors, release errors and leases lost while holding.
    pub errors: u64,
    /// The first error, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
    /// Holds that began before the previous hold of the same lock ended.
    pub overlaps: u64,
    /// The servers' cost; `None` in process.
    pub server: Option<ServerCost>,
    /// The harness's CPU seconds: in the window on a server, over the whole run in process.
    pub harness_cpu_s: f64,
    /// Harness CPU ms per grant; `None` without grants.
    pub harness_cpu_ms_per_grant: Option<f64>,
    /// Wall time the point took, the servers' start and the drain included.
    pub wall_s: f64,
}

impl ScalePoint {
    /// The line's name in charts and tables ("etcd×3", "redis sentinel/jedis").
    pub fn series(&self) -> String {
        series_name(self.backend, &self.topology, &self.algorithm)
    }
}

/// `scale.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleSummary {
    /// Layout version (that of `summary.json`).
    pub schema_version: u32,
    /// `bench-harness <version>`.
    pub tool: String,
    /// The shared scenario.
    pub scenario: ScaleScenario,
    /// Every point, in the order they ran.
    pub points: Vec<ScalePoint>,
}

impl ScaleSummary {
    /// The series in the order they first appear.
    pub fn series(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for s in self.points.iter().map(ScalePoint::series) {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }

    /// The point of `series` at `cell` with `clients`.
    pub fn point(&self, series: &str, cell: Cell, clients: usize) -> Option<&ScalePoint> {
        self.points.iter().find(|p| p.cell == cell && p.clients == clients && p.series() == series)
    }
}

/// The grid of `args`: client counts ascending, and the cells, one lock count running once.
fn grid(args: &ScaleArgs) -> (Vec<usize>, Vec<Cell>, Duration) {
    if args.quick {
        let cell = |locks| Cell { locks, key_dist: KeyDist::Uniform };
        return (vec![2, 8], vec![Cell { locks: 1, key_dist: KeyDist::Fixed }, cell(10)], {
            Duration::from_secs(1)
        });
    }
    let mut clients: Vec<usize> = args.clients.iter().map(|&n| n as usize).collect();
    clients.sort_unstable();
    clients.dedup();
    let mut locks: Vec<usize> = args.locks.iter().map(|&n| n as usize).collect();
    locks.sort_unstable();
    locks.dedup();
    let mut cells = Vec::new();
    for locks in locks {
        if locks == 1 {
            cells.push(Cell { locks, key_dist: KeyDist::Fixed });
            continue;
        }
        for &key_dist in &args.dists {
            let cell = Cell { locks, key_dist };
            if !cells.contains(&cell) {
                cells.push(cell);
            }
        }
    }
    (clients, cells, args.duration)
}

/// The engines of `args` with the options of each of their variants: in-process engines as
/// they are, servers as one server and as a cluster the harness starts. An engine named by
/// `--engines` that the harness can neither run in process nor start is a usage error.
fn variants(args: &ScaleArgs) -> anyhow::Result<Vec<(EngineRef, EngineOptions)>> {
    let mut out = Vec::new();
    for e in EngineRef::all() {
        let named = args.engines.contains(&e);
        if !args.engines.is_empty() && !named {
            continue;
        }
        let found = engine_variants(e, !args.no_clusters);
        if found.is_empty() && named {
            return Err(anyhow::Error::new(crate::UsageError(format!(
                "--engines {e}: the harness cannot start a {e} server, and scale runs only servers it starts"
            ))));
        }
        out.extend(found.into_iter().map(|o| (e, o)));
    }
    anyhow::ensure!(!out.is_empty(), "no engine to measure");
    Ok(out)
}

/// The variants of `e` a run measures, in order: an in-process engine as it is; a server as
/// one server the harness starts, then (with `clusters`) as the cluster it starts.
fn engine_variants(e: EngineRef, clusters: bool) -> Vec<EngineOptions> {
    if e.in_process() {
        return vec![e.default_options()];
    }
    let clustered = if clusters { e.clustered() } else { None };
    e.spawned().into_iter().chain(clustered).collect()
}

/// The runs of `args`, cell by cell and client count by client count, every engine at one
/// point running one after the other, so that the points a table puts side by side ran
/// seconds apart (as in `bench-harness engines`).
pub fn plan(args: &ScaleArgs) -> anyhow::Result<(ScaleScenario, Vec<RunConfig>)> {
    let (clients, cells, duration) = grid(args);
    let timing = PointTiming::of(&args.point, duration);
    let variants = variants(args)?;
    let mut runs = Vec::new();
    for &cell in &cells {
        for &n in &clients {
            for (backend, engine) in &variants {
                for a in backend.algorithm_names() {
                    let mut cfg = RunConfig {
                        engine: engine.clone(),
                        algorithms: vec![a.to_string()],
                        threads: n,
                        locks: cell.locks,
                        key_dist: cell.key_dist,
                        ..RunConfig::on(*backend)
                    };
                    timing.apply(&mut cfg);
                    cfg.validate().map_err(|e| anyhow::Error::new(crate::UsageError(e)))?;
                    runs.push(cfg);
                }
            }
        }
    }
    let scenario = ScaleScenario { timing, clients, cells };
    Ok((scenario, runs))
}

/// `bench-harness scale`.
pub fn run(args: &ScaleArgs) -> anyhow::Result<()> {
    let (scenario, runs) = plan(args)?;
    let wall = std::time::Instant::now();
    let earlier = crate::experiments::earlier_or_prepare(&args.out, "scale.json", args.redraw)?;
    if let Some(summary) = earlier {
        return report::write_outputs(args, &summary, wall);
    }
    let mut summary = ScaleSummary {
        schema_version: crate::measure::summary::SCHEMA_VERSION,
        tool: crate::experiments::tool(),
        scenario,
        points: Vec::new(),
    };
    let previous = previous_points(args, &summary.scenario)?;
    let kept = match &previous {
        Some(points) => format!(", merged into the {} points of scale.json", points.len()),
        None => String::new(),
    };
    progress::status(
        args.quiet,
        &format!(
            "scale: {} points of {} each (plus the servers' start and the drain){kept}",
            runs.len(),
            format_duration(summary.scenario.timing.duration)
        ),
    );
    let merging = previous.is_some();
    summary.points = previous.unwrap_or_default();
    for cfg in &runs {
        let point = measure_point(cfg, args.quiet)?;
        if merging {
            let earlier = std::mem::take(&mut summary.points);
            summary.points = merge(&summary.scenario, earlier, vec![point]);
        } else {
            summary.points.push(point);
        }
        // Written after every point, so that a sweep cut short keeps what it measured.
        files::write_json(&args.out.join("scale.json"), &summary)?;
    }
    report::write_outputs(args, &summary, wall)
}

/// With `--engines`, the points of the `scale.json` already in `--out`, which the points
/// measured now are merged into; `None` without `--engines` or without that file. A file of
/// another layout version or another scenario is refused before anything is measured: its
/// points and the new ones would not be comparable.
fn previous_points(
    args: &ScaleArgs,
    scenario: &ScaleScenario,
) -> anyhow::Result<Option<Vec<ScalePoint>>> {
    if args.engines.is_empty() {
        return Ok(None);
    }
    let path = args.out.join("scale.json");
    let text = match std::fs::read_to_string(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(crate::UsageError(format!(
                "--engines merges into {}, which cannot be read: {e}",
                path.display()
            ))
            .into())
        }
        Ok(text) => text,
    };
    let earlier: ScaleSummary = serde_json::from_str(&text).with_context(|| {
        format!("--engines merges into {}, which is not a scale summary", path.display())
    })?;
    let version = crate::measure::summary::SCHEMA_VERSION;
    if earlier.schema_version != version {
        return Err(crate::UsageError(format!(
            "--engines merges into {}, which is of layout version {} where this harness writes \
             {version}; run scale without --engines to measure every engine again, or choose \
             another --out",
            path.display(),
            earlier.schema_version
        ))
        .into());
    }
    if earlier.scenario != *scenario {
        let mut differences = scenario_differences(&earlier.scenario, scenario);
        if differences.is_empty() {
            differences.push(format!("{:?} (this run: {scenario:?})", earlier.scenario));
        }
        return Err(crate::UsageError(format!(
            "--engines merges into {}, whose points were measured with other settings: {}. \
             Re-run with the settings it was measured with, without --engines to measure every \
             engine again, or into another --out",
            path.display(),
            differences.join("; ")
        ))
        .into());
    }
    Ok(Some(earlier.points))
}

/// What differs between the scenario of `earlier` points and that of this run, a phrase each:
/// "clients 64, 256 (this run: 2, 8)".
fn scenario_differences(earlier: &ScaleScenario, now: &ScaleScenario) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, there: String, here: String| {
        if there != here {
            out.push(format!("{name} {there} (this run: {here})"));
        }
    };
    let (a, b) = (&earlier.timing, &now.timing);
    let list =
        |clients: &[usize]| clients.iter().map(usize::to_string).collect::<Vec<_>>().join(", ");
    field("clients", list(&earlier.clients), list(&now.clients));
    let cells = |cells: &[Cell]| cells.iter().map(Cell::title).collect::<Vec<_>>().join(" / ");
    field("cells", cells(&earlier.cells), cells(&now.cells));
    field("duration", format_duration(a.duration), format_duration(b.duration));
    field("hold", a.hold.to_string(), b.hold.to_string());
    field("think", a.think.to_string(), b.think.to_string());
    field("ttl", format_duration(a.ttl), format_duration(b.ttl));
    field("poll interval", format_duration(a.poll_interval), format_duration(b.poll_interval));
    field("seed", a.seed.to_string(), b.seed.to_string());
    out
}

/// `previous` with every point of `fresh` in place of the one of the same engine, variant,
/// algorithm, cell and client count, or else added; then in the order a full run of
/// `scenario` measures them ([`run_order`]), so that an engine measured later sits where it
/// would have, not at the end.
fn merge(
    scenario: &ScaleScenario,
    previous: Vec<ScalePoint>,
    fresh: Vec<ScalePoint>,
) -> Vec<ScalePoint> {
    let mut points = crate::experiments::replace_rows(previous, fresh, |p| {
        (p.backend, p.topology.clone(), p.algorithm.clone(), p.cell, p.clients)
    });
    let variants: Vec<(EngineRef, String)> = EngineRef::all()
        .flat_map(|e| engine_variants(e, true).into_iter().map(move |o| (e, e.topology(&o))))
        .collect();
    points.sort_by_cached_key(|p| run_order(scenario, &variants, p));
    points
}

/// Where a full run puts `p`: by cell and client count as `scenario` lists them, then by
/// engine and variant as `variants` lists them, then by algorithm as its engine lists them.
/// The sort is stable; what the lists do not hold goes last.
fn run_order(
    scenario: &ScaleScenario,
    variants: &[(EngineRef, String)],
    p: &ScalePoint,
) -> [usize; 4] {
    let position = |found: Option<usize>| found.unwrap_or(usize::MAX);
    [
        position(scenario.cells.iter().position(|c| *c == p.cell)),
        position(scenario.clients.iter().position(|n| *n == p.clients)),
        position(variants.iter().position(|(e, t)| *e == p.backend && *t == p.topology)),
        position(p.backend.algorithm_names().iter().position(|a| *a == p.algorithm)),
    ]
}

/// `x / grants × per`, `None` without grants.
fn per_grant(x: f64, grants: u64, per: f64) -> Option<f64> {
    (grants > 0).then(|| x / grants as f64 * per)
}

/// One measured point, with what it cost.
pub fn measure_point(cfg: &RunConfig, quiet: bool) -> anyhow::Result<ScalePoint> {
    let algorithm = algorithm_of(cfg)?;
    let topology = cfg.backend.topology(&cfg.engine);
    let series = series_name(cfg.backend, &topology, algorithm.name);
    let cell = Cell { locks: cfg.locks, key_dist: cfg.key_dist };
    let label = format!("{series} with {} clients on {}", cfg.threads, cell.title());
    let bar = progress::bar(cfg.duration.as_millis() as u64, label.clone(), quiet, "ms");
    let sampler = (cfg.clock == ClockMode::Wall).then(|| probe::Sampler::start(&bar));
    let own_before = probe::own_cpu_s();
    let run =
        crate::run::run_algorithm(cfg, algorithm, Some(&bar)).with_context(|| label.clone())?;
    let own_whole = probe::own_cpu_s().zip(own_before).map(|(after, before)| after - before);
    bar.finish_and_clear();
    let report = analyze(cfg, algorithm, &run);
    let grants = report.grants_in_window;
    let (server, harness_cpu_s) = match sampler {
        Some(sampler) => {
            let cost = sampler.stop(cfg.duration).with_context(|| {
                format!("{label}: the run's progress never moved, so its window cannot be placed")
            })?;
            let server = (cost.processes > 0).then(|| ServerCost {
                processes: cost.processes,
                cpu_s: cost.server_cpu_s,
                cpu_s_per_1000_grants: per_grant(cost.server_cpu_s, grants, 1000.0),
                peak_rss_mib: cost.server_peak_rss_kib as f64 / 1024.0,
            });
            (server, cost.harness_cpu_s)
        }
        None => (None, own_whole.context("getrusage failed")?),
    };
    if cfg.backend.spawns_server(&cfg.engine) && server.is_none() {
        anyhow::bail!("{label}: no server process of this harness was seen under /proc");
    }
    let point = ScalePoint {
        backend: cfg.backend,
        algorithm: algorithm.name.to_string(),
        topology,
        clock: cfg.clock,
        cell,
        clients: cfg.threads,
        grants,
        grants_per_second: report.throughput.grants_per_second,
        p50_ms: report.latency.p50_ms,
        p99_ms: report.latency.p99_ms,
        requests_per_grant: report.store.ops_per_grant,
        errors: report.errors.total(),
        first_error: report.errors.first_error.clone(),
        overlaps: report.safety.overlapping_holds,
        server,
        harness_cpu_s,
        harness_cpu_ms_per_grant: per_grant(harness_cpu_s, grants, 1000.0),
        wall_s: (run.wall_time.as_secs_f64() * 10.0).round() / 10.0,
    };
    progress::status(
        quiet,
        &format!(
            "{label:>40}: {:.0} grants/s, p50 {:.1} ms, p99 {:.1} ms, server CPU {} s/1000 grants ({:.1} s wall)",
            point.grants_per_second,
            point.p50_ms,
            point.p99_ms,
            point
                .server
                .and_then(|s| s.cpu_s_per_1000_grants)
                .map_or("-".into(), |c| format!("{c:.2}")),
            point.wall_s
        ),
    );
    Ok(point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(extra: &[&str]) -> ScaleArgs {
        let mut all = vec!["bench-harness", "scale"];
        all.extend_from_slice(extra);
        let cli = crate::cli::Cli::try_parse_from(all).unwrap();
        let Some(crate::cli::Command::Scale(args)) = cli.command else { panic!("scale") };
        args
    }

    #[test]
    fn the_default_grid_runs_one_lock_once_and_every_engine_at_one_and_its_cluster() {
        let args = parse(&["--engines", "embedded,zookeeper,service"]);
        let (scenario, runs) = plan(&args).unwrap();
        assert_eq!(scenario.clients, [64, 256, 1000]);
        assert_eq!(scenario.cells.len(), 1 + 2 * 2, "{:?}", scenario.cells);
        assert_eq!(scenario.cells[0], Cell { locks: 1, key_dist: KeyDist::Fixed });
        assert_eq!(scenario.timing.hold.to_string(), "1ms");
        // Every algorithm of the embedded store; zookeeper and service ×1 and ×3.
        let embedded = EngineRef::find("embedded").unwrap().algorithm_names();
        let per_point = embedded.len() + 2 + 2;
        assert_eq!(runs.len(), scenario.cells.len() * 3 * per_point);
        let first: Vec<String> = runs[..per_point]
            .iter()
            .map(|r| series_name(r.backend, &r.backend.topology(&r.engine), &r.algorithms[0]))
            .collect();
        let mut expected: Vec<String> = embedded.iter().map(|a| format!("embedded/{a}")).collect();
        expected.extend(["zookeeper", "zookeeper×3", "service", "service×3"].map(String::from));
        assert_eq!(first, expected);
        assert!(runs.iter().all(|r| (r.clock == ClockMode::Simulated) == r.backend.in_process()));
        assert!(runs.iter().all(|r| r.duration == Duration::from_secs(10)));
        let quick = plan(&parse(&["--quick", "--no-clusters", "--engines", "service"])).unwrap();
        assert_eq!(quick.0.clients, [2, 8]);
        assert_eq!(quick.1.len(), 2 * 2);
        assert!(quick.1.iter().all(|r| r.duration == Duration::from_secs(1)));
        assert!(crate::cli::Cli::try_parse_from([
            "bench-harness",
            "scale",
            "--quick",
            "--locks",
            "5"
        ])
        .is_err());
    }

    fn point(
        backend: EngineRef,
        topology: &str,
        algorithm: &str,
        cell: Cell,
        n: usize,
    ) -> ScalePoint {
        ScalePoint {
            backend,
            algorithm: algorithm.into(),
            topology: topology.into(),
            clock: if backend.in_process() { ClockMode::Simulated } else { ClockMode::Wall },
            cell,
            clients: n,
            grants: 10,
            grants_per_second: 1.0,
            p50_ms: 1.0,
            p99_ms: 2.0,
            requests_per_grant: None,
            errors: 0,
            first_error: None,
            overlaps: 0,
            server: None,
            harness_cpu_s: 1.0,
            harness_cpu_ms_per_grant: None,
            wall_s: 1.0,
        }
    }

    /// A point of each run of `cfgs`, in their order.
    fn points_of(cfgs: &[RunConfig]) -> Vec<ScalePoint> {
        cfgs.iter()
            .map(|r| {
                let cell = Cell { locks: r.locks, key_dist: r.key_dist };
                let topology = r.backend.topology(&r.engine);
                point(r.backend, &topology, &r.algorithms[0], cell, r.threads)
            })
            .collect()
    }

    fn summary(scenario: ScaleScenario, points: Vec<ScalePoint>) -> ScaleSummary {
        ScaleSummary {
            schema_version: crate::measure::summary::SCHEMA_VERSION,
            tool: crate::experiments::tool(),
            scenario,
            points,
        }
    }

    #[test]
    fn merged_points_replace_their_own_and_take_the_place_a_full_run_gives_them() {
        let all = ["--quick", "--engines", "embedded,zookeeper,service"];
        let (scenario, runs) = plan(&parse(&all)).unwrap();
        let full = points_of(&runs);
        // The order a full run measures in is the order merged points are sorted into.
        let mut sorted = full.clone();
        sorted.reverse();
        assert_eq!(merge(&scenario, Vec::new(), sorted), full);

        // An earlier run without the embedded store, then the service's points measured again
        // and the embedded store's added: the service's replace theirs, the embedded store's
        // go first at each point, as in a full run, and the others stay as they were.
        let (_, without) = plan(&parse(&["--quick", "--engines", "zookeeper,service"])).unwrap();
        let previous = points_of(&without);
        let (_, again) = plan(&parse(&["--quick", "--engines", "service,embedded"])).unwrap();
        let mut fresh = points_of(&again);
        for p in &mut fresh {
            p.grants_per_second = 2.0;
        }
        let merged = merge(&scenario, previous.clone(), fresh.clone());
        assert_eq!(merged.len(), full.len());
        let keys = |ps: &[ScalePoint]| -> Vec<(String, Cell, usize)> {
            ps.iter().map(|p| (p.series(), p.cell, p.clients)).collect()
        };
        assert_eq!(keys(&merged), keys(&full));
        for p in &merged {
            let measured_again = p.backend.name() != "zookeeper";
            let expected = if measured_again { 2.0 } else { 1.0 };
            assert_eq!(p.grants_per_second, expected, "{} on {}", p.series(), p.cell.title());
        }
        // A re-run without clusters keeps the clusters' earlier points.
        let (_, single) =
            plan(&parse(&["--quick", "--no-clusters", "--engines", "service"])).unwrap();
        let mut fresh = points_of(&single);
        for p in &mut fresh {
            p.grants_per_second = 3.0;
        }
        let merged = merge(&scenario, previous, fresh);
        assert_eq!(keys(&merged), keys(&points_of(&without)));
        for p in &merged {
            let expected = if p.series() == "service" { 3.0 } else { 1.0 };
            assert_eq!(p.grants_per_second, expected, "{} on {}", p.series(), p.cell.title());
        }
    }

    #[test]
    fn engines_merge_only_into_a_scale_json_of_the_same_scenario() {
        let dir = std::env::temp_dir().join(format!("bench-harness-scale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.to_str().unwrap();
        let quick = |engines: &str| parse(&["--quick", "--engines", engines, "--out", out]);
        let (scenario, runs) = plan(&quick("embedded,service")).unwrap();
        // No file yet: nothing to merge into.
        assert_eq!(previous_points(&quick("service"), &scenario).unwrap(), None);
        let points = points_of(&runs);
        let json = dir.join("scale.json");
        files::write_json(&json, &summary(scenario.clone(), points.clone())).unwrap();
        assert_eq!(previous_points(&quick("service"), &scenario).unwrap(), Some(points.clone()));
        // Without --engines the run is whole, as before.
        let whole = parse(&["--quick", "--out", out]);
        assert_eq!(previous_points(&whole, &scenario).unwrap(), None);

        // Another scenario is refused, naming the file and every setting that differs.
        let other = parse(&["--engines", "service", "--seed", "7", "--out", out]);
        let (other_scenario, _) = plan(&other).unwrap();
        let e = previous_points(&other, &other_scenario).unwrap_err();
        assert_eq!(crate::Failure::of(&e), crate::Failure::Usage, "{e}");
        let text = e.to_string();
        assert!(text.contains(&json.display().to_string()), "{text}");
        for expected in [
            "clients 2, 8 (this run: 64, 256, 1000)",
            "cells 1 lock / 10 locks, uniform (this run: 1 lock / 100 locks, uniform /",
            "duration 1s (this run: 10s)",
            "seed 1 (this run: 7)",
        ] {
            assert!(text.contains(expected), "{expected:?} not in {text}");
        }
        assert!(!text.contains("hold") && !text.contains("ttl"), "{text}");

        // So is another layout, and a file that is no scale summary.
        let mut old = summary(scenario.clone(), points);
        old.schema_version += 1;
        files::write_json(&json, &old).unwrap();
        let e = previous_points(&quick("service"), &scenario).unwrap_err();
        assert_eq!(crate::Failure::of(&e), crate::Failure::Usage, "{e}");
        assert!(e.to_string().contains("layout version"), "{e}");
        std::fs::write(&json, "[]").unwrap();
        let e = previous_points(&quick("service"), &scenario).unwrap_err();
        assert!(format!("{e:#}").contains("is not a scale summary"), "{e:#}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_engine_the_harness_cannot_start_is_refused() {
        let e = plan(&parse(&["--engines", "cassandra"])).unwrap_err();
        assert_eq!(crate::Failure::of(&e), crate::Failure::Usage, "{e}");
        assert!(e.to_string().contains("cannot start a cassandra server"), "{e}");
    }
}
