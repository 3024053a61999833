//! `bench-harness engines`: the engines side by side in **wall time** — Redis (jedis,
//! redis-token), ZooKeeper, Cassandra when given, and the embedded store (shadow, queue,
//! bakery with `--clock wall`) — at a few contention levels (1, 8, 64 contenders by default).
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

use crate::charts::{algorithm_color, lighter, render_lines, Formats, LineChart, Series};
use crate::cli::EnginesArgs;
use crate::config::{BackendKind, ClockMode, RunConfig};
use crate::dist::{format_duration, serde_duration, Dist};
use crate::summary::{analyze, AlgorithmReport};
use crate::{backend, output, progress, registry, runner};
use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the engines section of the results README begins.
pub const SECTION_BEGIN: &str = "<!-- engines:begin: generated from engines/engines.json by `bench-harness engines` and `bench-harness sweep`; do not edit -->";
/// Where it ends.
pub const SECTION_END: &str = "<!-- engines:end -->";
/// The directory, under the results directory, that [`section_for`] reads.
pub const ENGINES_DIR: &str = "engines";

/// The scenario every point shares.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnginesScenario {
    /// Hold time.
    pub hold: Dist,
    /// Think time.
    pub think: Dist,
    /// Wall time of each point's window.
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// Lease TTL, Redis expiry, ZooKeeper session timeout.
    #[serde(with = "serde_duration")]
    pub ttl: Duration,
    /// Poll interval of the polling locks.
    #[serde(with = "serde_duration")]
    pub poll_interval: Duration,
    /// Seed.
    pub seed: u64,
    /// Contender counts.
    pub contenders: Vec<usize>,
}

/// One engine of the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Engine {
    /// The backend.
    pub backend: BackendKind,
    /// Where it ran (contact points, URL, hosts; "in this process" for the embedded store).
    pub address: String,
    /// Its algorithms.
    pub algorithms: Vec<String>,
}

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EnginePoint {
    /// The backend.
    pub backend: BackendKind,
    /// The algorithm.
    pub algorithm: String,
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
        series_name(self.backend, &self.algorithm)
    }
}

fn series_name(backend: BackendKind, algorithm: &str) -> String {
    if backend.name() == algorithm {
        algorithm.to_string()
    } else {
        format!("{backend}/{algorithm}")
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
        let mut pts: Vec<&EnginePoint> = self
            .points
            .iter()
            .filter(|p| p.series() == series)
            .collect();
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

/// The runs of `args`: one [`RunConfig`] per engine, algorithm and contender count.
pub fn plan(args: &EnginesArgs) -> anyhow::Result<(Vec<Engine>, Vec<RunConfig>)> {
    let contenders = contender_levels(args);
    let base = RunConfig {
        clock: ClockMode::Wall,
        duration: args.duration,
        hold: args.workload.hold,
        think: args.workload.think,
        ttl: args.timing.ttl,
        poll_interval: args.timing.poll_interval,
        seed: args.seed,
        ..RunConfig::default()
    };
    let mut backends = Vec::new();
    if let Some(url) = args.redis.as_ref().filter(|u| !u.trim().is_empty()) {
        backends.push(RunConfig {
            backend: BackendKind::Redis,
            redis: Some(url.clone()),
            ..base.clone()
        });
    }
    if let Some(hosts) = args.zookeeper.as_ref().filter(|h| !h.trim().is_empty()) {
        backends.push(RunConfig {
            backend: BackendKind::Zookeeper,
            zookeeper: Some(hosts.clone()),
            ..base.clone()
        });
    }
    if let Some(nodes) = args.nodes.as_ref().filter(|n| !n.trim().is_empty()) {
        let nodes = lock_cassandra::config::parse_nodes(nodes)
            .map_err(|e| anyhow!("--nodes {nodes}: {}", e.0))?;
        backends.push(RunConfig {
            backend: BackendKind::Cassandra,
            nodes,
            ..base.clone()
        });
    }
    if !args.no_embedded {
        backends.push(RunConfig {
            backend: BackendKind::Embedded,
            ..base.clone()
        });
    }
    anyhow::ensure!(
        !backends.is_empty(),
        "nothing to compare: give --redis, --zookeeper or --nodes, or leave out --no-embedded"
    );
    let mut engines = Vec::new();
    let mut runs = Vec::new();
    for b in backends {
        let algorithms = registry::names_for(b.backend);
        engines.push(Engine {
            backend: b.backend,
            address: backend::address(&b),
            algorithms: algorithms.iter().map(|a| a.to_string()).collect(),
        });
        for &n in &contenders {
            for a in &algorithms {
                let cfg = RunConfig {
                    algorithms: vec![a.to_string()],
                    threads: n,
                    ..b.clone()
                };
                cfg.validate().map_err(|e| anyhow!(e))?;
                runs.push(cfg);
            }
        }
    }
    Ok((engines, runs))
}

/// `bench-harness engines`.
pub fn run(args: &EnginesArgs) -> anyhow::Result<()> {
    if args.redraw {
        let path = args.out.join("engines.json");
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "cannot read {} (--redraw needs an earlier run)",
                path.display()
            )
        })?;
        let summary: EnginesSummary = serde_json::from_str(&text)
            .with_context(|| format!("cannot parse {}", path.display()))?;
        return write_outputs(args, &summary, std::time::Instant::now());
    }
    let (engines, runs) = plan(args)?;
    output::prepare_dir(&args.out)?;
    let wall = std::time::Instant::now();
    let mut summary = EnginesSummary {
        schema_version: crate::summary::SCHEMA_VERSION,
        tool: format!("bench-harness {}", env!("CARGO_PKG_VERSION")),
        scenario: EnginesScenario {
            hold: args.workload.hold,
            think: args.workload.think,
            duration: args.duration,
            ttl: args.timing.ttl,
            poll_interval: args.timing.poll_interval,
            seed: args.seed,
            contenders: contender_levels(args),
        },
        engines: engines.clone(),
        points: Vec::new(),
    };
    progress::status(
        args.quiet,
        &format!(
            "engines: {} runs of {} each (plus the drain of waiting requests), wall time; {}",
            runs.len(),
            format_duration(args.duration),
            engines
                .iter()
                .map(|e| match e.backend {
                    BackendKind::Embedded => "the embedded store in this process".to_string(),
                    other => format!("{other} at {}", e.address),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let mut warmed: Vec<(BackendKind, String)> = Vec::new();
    for cfg in &runs {
        let name = &cfg.algorithms[0];
        if cfg.backend.is_remote()
            && !args.warm_up.is_zero()
            && !warmed.contains(&(cfg.backend, name.clone()))
        {
            warmed.push((cfg.backend, name.clone()));
            let warm = RunConfig {
                threads: 8,
                duration: args.warm_up,
                ..cfg.clone()
            };
            let entry = registry::lookup(name, cfg.backend)
                .ok_or_else(|| anyhow!("{name} does not run on {}", cfg.backend))?;
            let bar = progress::bar(
                warm.duration.as_millis() as u64,
                format!("warm-up {}", series_name(cfg.backend, name)),
                args.quiet,
                "ms",
            );
            runner::run_algorithm(&warm, entry, Some(&bar))
                .with_context(|| format!("warming up {}", series_name(cfg.backend, name)))?;
            bar.finish_and_clear();
        }
        let entry = registry::lookup(name, cfg.backend)
            .ok_or_else(|| anyhow!("{name} does not run on {}", cfg.backend))?;
        let label = format!("{} ×{}", series_name(cfg.backend, name), cfg.threads);
        let bar = progress::bar(
            cfg.duration.as_millis() as u64,
            label.clone(),
            args.quiet,
            "ms",
        );
        let run = runner::run_algorithm(cfg, entry, Some(&bar)).with_context(|| {
            format!(
                "{} with {} contenders",
                series_name(cfg.backend, name),
                cfg.threads
            )
        })?;
        bar.finish_and_clear();
        let mut report = analyze(cfg, entry, &run);
        report.contenders.clear();
        progress::status(
            args.quiet,
            &format!(
                "{label:>24}: {} grants, p50 {:.1} ms, p99 {:.1} ms, {:.1} grants/s ({:.1} s wall)",
                report.grants,
                report.latency.p50_ms,
                report.latency.p99_ms,
                report.throughput.grants_per_second_per_lock,
                run.wall_time.as_secs_f64()
            ),
        );
        summary.points.push(EnginePoint {
            backend: cfg.backend,
            algorithm: name.clone(),
            contenders: cfg.threads,
            wall_s: (run.wall_time.as_secs_f64() * 10.0).round() / 10.0,
            report,
        });
        output::write_json(&args.out.join("engines.json"), &summary)?;
    }
    write_outputs(args, &summary, wall)
}

fn write_outputs(
    args: &EnginesArgs,
    summary: &EnginesSummary,
    wall: std::time::Instant,
) -> anyhow::Result<()> {
    let files = draw(&args.out, summary)?;
    output::write_atomic(&args.out.join("README.md"), readme(summary).as_bytes())?;
    let updated = update_results_readme(&args.out)?;
    progress::status(
        args.quiet,
        &format!(
            "wrote engines.json, {} and README.md into {}{} in {:.1} s",
            files
                .iter()
                .filter_map(|f| f.file_name())
                .map(|f| f.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(", "),
            args.out.display(),
            updated.map_or(String::new(), |p| format!(
                ", and the engines section of {}",
                p.display()
            )),
            wall.elapsed().as_secs_f64()
        ),
    );
    print!("{}", table(summary));
    Ok(())
}

fn color_of(s: &EnginesSummary, series: &str) -> plotters::style::RGBColor {
    let Some(p) = s.points.iter().find(|p| p.series() == series) else {
        return algorithm_color(series);
    };
    let base = algorithm_color(&p.algorithm);
    // The cell-model algorithms run on two engines: Cassandra's lines are lighter.
    if p.backend == BackendKind::Cassandra {
        lighter(base)
    } else {
        base
    }
}

/// Draws `engines.png` and `engines.svg`: p50, p99 and throughput against contenders.
pub fn draw(dir: &Path, s: &EnginesSummary) -> anyhow::Result<Vec<PathBuf>> {
    let chart = |title: &str, y_label: &str, y_log: bool, y: fn(&AlgorithmReport) -> f64| {
        let series = s
            .series()
            .iter()
            .map(|name| {
                Series::new(
                    name.clone(),
                    color_of(s, name),
                    s.points_of(name)
                        .iter()
                        .map(|p| (p.contenders as f64, y(&p.report)))
                        .filter(|(_, v)| !y_log || *v > 0.0)
                        .collect(),
                )
            })
            .collect();
        LineChart::against_contenders(title, y_label, y_log, series)
    };
    let mut throughput = chart("Throughput (wall time)", "grants per second", false, |r| {
        r.throughput.grants_per_second_per_lock
    });
    // Room above the lines for the legend.
    let top = s
        .points
        .iter()
        .map(|p| p.report.throughput.grants_per_second_per_lock)
        .fold(0.0, f64::max);
    throughput.y_range = Some((0.0, (top * 1.6).max(1.0)));
    render_lines(
        &dir.join("engines"),
        &[
            chart(
                "Median acquisition latency (wall time)",
                "p50 ms (log)",
                true,
                |r| r.latency.p50_ms,
            ),
            chart(
                "99th percentile acquisition latency (wall time)",
                "p99 ms (log)",
                true,
                |r| r.latency.p99_ms,
            ),
            throughput,
        ],
        3,
        (620, 460),
        Formats::PngAndSvg,
    )
}

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn ops_per_grant(r: &AlgorithmReport) -> String {
    match (&r.store.ops, r.store.ops_per_grant) {
        (None, _) => "n/a".into(),
        (Some(_), Some(v)) => format!("{v:.1}"),
        (Some(_), None) => "-".into(),
    }
}

/// The console table: one row per point.
pub fn table(s: &EnginesSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>5} {:>8} {:>10} {:>9} {:>9} {:>9} {:>6} {:>10} {:>9} {:>8}",
        "engine",
        "n",
        "grants",
        "grants/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "Jain",
        "ops/grant",
        "overlaps",
        "errors"
    );
    for p in &s.points {
        let r = &p.report;
        let _ = writeln!(
            out,
            "{:<22} {:>5} {:>8} {:>10} {:>9} {:>9} {:>9} {:>6} {:>10} {:>9} {:>8}",
            p.series(),
            p.contenders,
            r.grants,
            f1(r.throughput.grants_per_second_per_lock),
            f1(r.latency.p50_ms),
            f1(r.latency.p99_ms),
            f1(r.latency.max_ms),
            r.fairness
                .jain_index
                .map_or("-".into(), |j| format!("{j:.3}")),
            ops_per_grant(r),
            r.safety.overlapping_holds,
            r.errors.lock_errors + r.errors.release_errors + r.errors.leases_lost_while_holding,
        );
    }
    out
}

fn engines_sentence(s: &EnginesSummary) -> String {
    s.engines
        .iter()
        .map(|e| match e.backend {
            BackendKind::Embedded => format!(
                "the embedded store ({}) in wall time",
                e.algorithms.join(", ")
            ),
            other => format!("{other} at `{}` ({})", e.address, e.algorithms.join(", ")),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `results/engines/README.md`.
pub fn readme(s: &EnginesSummary) -> String {
    let sc = &s.scenario;
    let mut md = String::new();
    let _ = writeln!(md, "# Engines compared in wall time\n");
    let _ = writeln!(
        md,
        "Generated by `bench-harness engines` (`scripts/compare-engines.sh`); do not edit by hand. \
         Every number comes from `engines.json` in this directory. These are wall-time measurements \
         against servers on one 2-core machine: they vary from run to run.\n"
    );
    let _ = writeln!(md, "## Scenario\n");
    let _ = writeln!(
        md,
        "Each contender loops: request the lock, hold it for {hold}, release it, think for {think}, \
         for {dur} of wall time per point on one lock, at {levels} contenders (requests still waiting \
         at the end are drained for up to another {dur}; throughput counts the window only). \
         Every point runs in a fresh namespace on its server (key prefix, znode root), after an unrecorded \
         warm-up of each algorithm on each server. \
         Lease TTL, Redis expiry and ZooKeeper session timeout {ttl}; the queue and bakery locks poll every {poll}; \
         the Redis locks retry as their sources do (jedis every 100 ms, the token lock every 50 ms). Seed {seed}.\n",
        hold = sc.hold,
        think = sc.think,
        dur = format_duration(sc.duration),
        levels = sc
            .contenders
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        ttl = format_duration(sc.ttl),
        poll = format_duration(sc.poll_interval),
        seed = sc.seed,
    );
    let _ = writeln!(md, "Engines: {}.\n", engines_sentence(s));
    if s.engines.iter().any(|e| e.backend == BackendKind::Embedded) {
        let _ = writeln!(
            md,
            "The embedded store keeps its model (3 replicas at QUORUM, round trip 800us + 0-400us) but runs on \
             real timers here, which round every delay up to the next millisecond: its latencies are those of the model \
             with 1-2 ms round trips, not of a network.\n"
        );
    }
    let _ = writeln!(
        md,
        "Store load is counted for the embedded store and Cassandra (requests sent, per grant); the Redis and \
         ZooKeeper clients do not expose request counts, so it is n/a for them.\n"
    );
    let _ = writeln!(md, "## Figures\n");
    let _ = writeln!(
        md,
        "| engine / algorithm | contenders | grants | grants/s | p50 ms | p90 ms | p99 ms | max ms | Jain | longest run | overtaken | store ops / grant | overlapping holds | token order violations | errors | wall s |"
    );
    let _ = writeln!(
        md,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for name in s.series() {
        for p in s.points_of(&name) {
            let r = &p.report;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1}% | {} | {} | {} | {} | {:.1} |",
                name,
                p.contenders,
                r.grants,
                f1(r.throughput.grants_per_second_per_lock),
                f1(r.latency.p50_ms),
                f1(r.latency.p90_ms),
                f1(r.latency.p99_ms),
                f1(r.latency.max_ms),
                r.fairness.jain_index.map_or("-".into(), |j| format!("{j:.3}")),
                r.fairness.longest_run.length,
                r.fairness.overtakes.overtaken_fraction * 100.0,
                ops_per_grant(r),
                r.safety.overlapping_holds,
                r.safety.token_order_violations,
                r.errors.lock_errors + r.errors.release_errors + r.errors.leases_lost_while_holding,
                p.wall_s,
            );
        }
    }
    md.push('\n');
    let _ = writeln!(md, "## Chart\n");
    let _ = writeln!(
        md,
        "Median and 99th-percentile acquisition latency (log scale) and grants per second against contenders, \
         a line per engine and algorithm ([SVG](engines.svg)).\n\n![engines](engines.png)\n"
    );
    let _ = writeln!(md, "## Regenerating\n");
    let _ = writeln!(
        md,
        "```sh\nscripts/compare-engines.sh    # starts redis-server and ZooKeeper on free loopback ports, runs, stops them\n```"
    );
    md
}

/// The engines section of the results README (between the markers), from `s`; `dir` is the
/// engines directory's name relative to that README.
pub fn section(s: &EnginesSummary, dir: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "{SECTION_BEGIN}");
    let _ = writeln!(md, "## Real engines in wall time\n");
    let levels: Vec<usize> = s.scenario.contenders.clone();
    let lv = levels
        .iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(" / ");
    let _ = writeln!(
        md,
        "Measured by `scripts/compare-engines.sh` (not by the sweep): {} — {} of wall time per point, hold {}, think {}. \
         The full table, the scenario and the caveats: [{dir}/README.md]({dir}/README.md).\n",
        engines_sentence(s),
        format_duration(s.scenario.duration),
        s.scenario.hold,
        s.scenario.think,
    );
    let _ = writeln!(
        md,
        "| engine / algorithm | p50 ms at {lv} contenders | p99 ms at {lv} | grants/s at {lv} | overlapping holds |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    for name in s.series() {
        let pts = s.points_of(&name);
        let cell = |f: &dyn Fn(&AlgorithmReport) -> f64| {
            levels
                .iter()
                .map(|n| {
                    pts.iter()
                        .find(|p| p.contenders == *n)
                        .map_or("-".to_string(), |p| f1(f(&p.report)))
                })
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let overlaps: u64 = pts.iter().map(|p| p.report.safety.overlapping_holds).sum();
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {overlaps} |",
            cell(&|r| r.latency.p50_ms),
            cell(&|r| r.latency.p99_ms),
            cell(&|r| r.throughput.grants_per_second_per_lock),
        );
    }
    let _ = writeln!(
        md,
        "\n![engines: latency and throughput against contenders]({dir}/engines.png)\n"
    );
    let _ = writeln!(md, "{SECTION_END}");
    md
}

/// The engines section for the results README in `results_dir`, from
/// `results_dir/engines/engines.json`; `None` when that file does not exist.
pub fn section_for(results_dir: &Path) -> anyhow::Result<Option<String>> {
    let path = results_dir.join(ENGINES_DIR).join("engines.json");
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let s: EnginesSummary =
        serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))?;
    Ok(Some(section(&s, ENGINES_DIR)))
}

/// `readme` with its engines section replaced by `section` (or `section` appended, after a
/// blank line, when it has none).
pub fn splice_section(readme: &str, section: &str) -> String {
    if let (Some(b), Some(e)) = (readme.find(SECTION_BEGIN), readme.find(SECTION_END)) {
        if b < e {
            let mut end = e + SECTION_END.len();
            if readme[end..].starts_with('\n') {
                end += 1;
            }
            return format!("{}{}{}", &readme[..b], section, &readme[end..]);
        }
    }
    let mut out = readme.trim_end_matches('\n').to_string();
    out.push_str("\n\n");
    out.push_str(section);
    out
}

/// After `bench-harness engines --out DIR`: when DIR is called `engines` and its parent holds
/// a README.md (the sweep's), regenerate that README's engines section. Returns the README
/// updated, if any.
pub fn update_results_readme(out: &Path) -> anyhow::Result<Option<PathBuf>> {
    if out.file_name().is_none_or(|n| n != ENGINES_DIR) {
        return Ok(None);
    }
    let Some(results) = out.parent() else {
        return Ok(None);
    };
    let results = if results.as_os_str().is_empty() {
        Path::new(".")
    } else {
        results
    };
    let readme_path = results.join("README.md");
    let Ok(readme) = std::fs::read_to_string(&readme_path) else {
        return Ok(None);
    };
    let Some(section) = section_for(results)? else {
        return Ok(None);
    };
    output::write_atomic(&readme_path, splice_section(&readme, &section).as_bytes())?;
    Ok(Some(readme_path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_replaced_in_place_or_appended() {
        let sec = format!("{SECTION_BEGIN}\nnew\n{SECTION_END}\n");
        let plain = "# Results\n\ntext\n";
        let once = splice_section(plain, &sec);
        assert_eq!(once, format!("# Results\n\ntext\n\n{sec}"));
        // Idempotent, and what surrounds the section stays.
        assert_eq!(splice_section(&once, &sec), once);
        let old = format!("# R\n\n{SECTION_BEGIN}\nold\n{SECTION_END}\n\n## After\n");
        assert_eq!(
            splice_section(&old, &sec),
            format!("# R\n\n{sec}\n## After\n")
        );
    }

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
        let Some(crate::cli::Command::Engines(mut args)) = cli.command else {
            panic!("engines")
        };
        args.nodes = None; // whatever LOCK_CASSANDRA_NODES says
        let (engines, runs) = plan(&args).unwrap();
        assert_eq!(
            engines.iter().map(|e| e.backend).collect::<Vec<_>>(),
            [
                BackendKind::Redis,
                BackendKind::Zookeeper,
                BackendKind::Embedded
            ]
        );
        // (2 redis + 1 zookeeper + 3 embedded algorithms) at 1 and 8 contenders.
        assert_eq!(runs.len(), 12);
        assert!(runs.iter().all(|r| r.clock == ClockMode::Wall));
        assert_eq!(
            series_name(BackendKind::Zookeeper, "zookeeper"),
            "zookeeper"
        );
        assert_eq!(series_name(BackendKind::Redis, "jedis"), "redis/jedis");
    }
}
