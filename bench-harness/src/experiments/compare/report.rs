//! The engines comparison's outputs, from [`EnginesSummary`] alone: the chart, the console
//! table, `results/engines/README.md`, and the engines section of the results README.

use super::EnginesArgs;
use super::{Engine, EnginesSummary, ENGINES_DIR, SECTION_BEGIN, SECTION_END};
use crate::dist::format_duration;
use crate::measure::summary::AlgorithmReport;
use crate::report::charts::{algorithm_color, lighter, render_lines, Formats, LineChart, Series};
use crate::report::{console, files};
use anyhow::Context;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub(super) fn write_outputs(
    args: &EnginesArgs,
    summary: &EnginesSummary,
    wall: std::time::Instant,
) -> anyhow::Result<()> {
    let drawn = draw(&args.out, summary)?;
    files::write_atomic(&args.out.join("README.md"), readme(summary).as_bytes())?;
    let updated = crate::experiments::update_results_readme(&args.out, &super::SECTION)?;
    let also =
        updated.map_or(String::new(), |p| format!(", and the engines section of {}", p.display()));
    crate::experiments::say_written(args.quiet, "engines.json", &drawn, &args.out, &also, wall);
    print!("{}", table(summary));
    Ok(())
}

fn color_of(s: &EnginesSummary, series: &str) -> plotters::style::RGBColor {
    let Some(p) = s.points.iter().find(|p| p.series() == series) else {
        return algorithm_color(series);
    };
    let base = algorithm_color(&p.algorithm);
    // An algorithm on several engines (or clusters): every line after its first is lighter.
    let first = s.points.iter().find(|q| q.algorithm == p.algorithm);
    if first.is_some_and(|q| q.series() != p.series()) {
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
    let top =
        s.points.iter().map(|p| p.report.throughput.grants_per_second_per_lock).fold(0.0, f64::max);
    throughput.y_range = Some((0.0, (top * 1.6).max(1.0)));
    render_lines(
        &dir.join("engines"),
        &[
            chart("Median acquisition latency (wall time)", "p50 ms (log)", true, |r| {
                r.latency.p50_ms
            }),
            chart("99th percentile acquisition latency (wall time)", "p99 ms (log)", true, |r| {
                r.latency.p99_ms
            }),
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
    let headers = [
        "engine",
        "n",
        "grants",
        "grants/s",
        "p50 ms",
        "p99 ms",
        "max ms",
        "gap ms",
        "Jain",
        "ops/grant",
        "overlaps",
        "errors",
    ];
    let rows: Vec<Vec<String>> = s
        .points
        .iter()
        .map(|p| {
            let r = &p.report;
            vec![
                p.series(),
                p.contenders.to_string(),
                r.grants.to_string(),
                f1(r.throughput.grants_per_second_per_lock),
                f1(r.latency.p50_ms),
                f1(r.latency.p99_ms),
                f1(r.latency.max_ms),
                gap(r),
                r.fairness.jain_index.map_or("-".into(), |j| format!("{j:.3}")),
                ops_per_grant(r),
                r.safety.overlapping_holds.to_string(),
                r.errors.total().to_string(),
            ]
        })
        .collect();
    let mut out = console::render(&headers, 1, &rows);
    for p in s.points.iter().filter(|p| !p.report.errors.is_clean()) {
        let e = &p.report.errors;
        let _ = writeln!(
            out,
            "{} ×{}: {} lock errors, {} release errors, {} leases lost while holding; first error: {}",
            p.series(),
            p.contenders,
            e.lock_errors,
            e.release_errors,
            e.leases_lost_while_holding,
            e.first_error.as_deref().unwrap_or("-")
        );
    }
    out
}

fn engines_sentence(s: &EnginesSummary) -> String {
    s.engines
        .iter()
        .map(|e| {
            if e.backend.in_process() {
                format!("the {} store ({}) in wall time", e.backend, e.algorithms.join(", "))
            } else {
                format!("{} at `{}` ({})", e.backend, e.address, e.algorithms.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the two overtake columns count, and the gap.
const FAIRNESS_SENTENCE: &str =
    "Handoff gap: from a holder's release to the next grant of the lock. \
     Overtaken: grants served after a request that began later. Two requests on their way at the \
     same time can reach a server in either order (over two connections, through two proxies), so \
     this also counts reorderings no lock could prevent. Overtaken in line: grants served after a \
     request that began once their own place in line was fixed (the lock service's answer, \
     ZooKeeper's sequential create, etcd's keyed put, the queue locks' queue cell, the bakery's \
     doorway): Lamport's first come, first served, which only the lock itself can break; `-` \
     for locks without a line.";

/// Which engines count store requests, which do not.
fn store_load_sentence(s: &EnginesSummary) -> String {
    let (counted, not): (Vec<&Engine>, Vec<&Engine>) =
        s.engines.iter().partition(|e| e.backend.counts_requests());
    // An engine and its cluster are one name here.
    let names = |v: &[&Engine]| {
        let mut out: Vec<&str> = Vec::new();
        for name in v.iter().map(|e| e.backend.name()) {
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out.join(", ")
    };
    let mut text = String::from("Store load");
    if !counted.is_empty() {
        let _ = write!(text, " is counted for {} (requests sent, per grant)", names(&counted));
    }
    if !not.is_empty() {
        if !counted.is_empty() {
            text.push(';');
        }
        let _ =
            write!(text, " is n/a for {}: their clients do not expose request counts", names(&not));
    }
    text.push('.');
    text
}

/// Which locks the contenders asked for and through which clients, for the scenario's
/// sentence: "on one lock" by default.
fn locks_and_sessions(sc: &super::EnginesScenario) -> String {
    let locks = match (sc.locks, sc.key_dist) {
        (1, _) => "on one lock".to_string(),
        (k, crate::keys::KeyDist::Fixed) => format!("on {k} locks (contender i on lock i mod {k})"),
        (k, drawn) => format!("on {k} locks, each acquire drawing its lock ({drawn})"),
    };
    match sc.sessions {
        Some(n) => format!(
            "{locks}, the contenders sharing {n} client{} of each engine (contender i on client i mod {n})",
            if n == 1 { "" } else { "s" }
        ),
        None => locks,
    }
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
         for {dur} of wall time per point {on}, at {levels} contenders (requests still waiting \
         at the end are drained for up to another {dur}; throughput counts the window only). \
         Every point runs in a fresh namespace on its server (key prefix, znode root, etcd key prefix), after an unrecorded \
         warm-up of each algorithm on each server. \
         Lease TTL, Redis expiry, ZooKeeper session timeout and etcd lease TTL {ttl} (etcd's rounded up to whole seconds); the queue and bakery locks poll every {poll}; \
         the Redis locks retry as their sources do (jedis every 100 ms, the token lock every 50 ms). Seed {seed}.\n",
        hold = sc.timing.hold,
        think = sc.timing.think,
        dur = format_duration(sc.timing.duration),
        on = locks_and_sessions(sc),
        levels = sc
            .contenders
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(", "),
        ttl = format_duration(sc.timing.ttl),
        poll = format_duration(sc.timing.poll_interval),
        seed = sc.timing.seed,
    );
    if s.points.windows(2).all(|w| w[0].contenders <= w[1].contenders) {
        let _ = writeln!(
            md,
            "The points ran level by level: every engine at one contender count, one after another, \
             before the next count, so the points compared at one count ran seconds apart.\n"
        );
    }
    let _ = writeln!(md, "Engines: {}.\n", engines_sentence(s));
    for note in s.engines.iter().filter_map(|e| e.note.as_deref()) {
        let _ = writeln!(md, "{note}\n");
    }
    let _ = writeln!(md, "{}\n", store_load_sentence(s));
    let _ = writeln!(md, "{FAIRNESS_SENTENCE}\n");
    figures_table(&mut md, s);
    let _ = writeln!(md, "## Chart\n");
    let _ = writeln!(
        md,
        "Median and 99th-percentile acquisition latency (log scale) and grants per second against contenders, \
         a line per engine and algorithm ([SVG](engines.svg)).\n\n![engines](engines.png)\n"
    );
    let _ = writeln!(md, "## Regenerating\n");
    let _ = writeln!(
        md,
        "```sh\nscripts/compare-engines.sh    # starts redis-server, ZooKeeper and etcd on free loopback ports, runs, stops them\n```"
    );
    md
}

/// The median handoff gap, in ms with three decimals (sub-millisecond on the servers); `-`
/// when there was no handoff (one contender).
fn gap(r: &AlgorithmReport) -> String {
    if r.handoff.count == 0 {
        "-".into()
    } else {
        format!("{:.3}", r.handoff.p50_ms)
    }
}

/// The README's table: every point's figures.
fn figures_table(md: &mut String, s: &EnginesSummary) {
    let _ = writeln!(md, "## Figures\n");
    let _ = writeln!(
        md,
        "| engine / algorithm | contenders | grants | grants/s | p50 ms | p90 ms | p99 ms | max ms | handoff gap p50 ms | Jain | longest run | overtaken | overtaken in line | store ops / grant | overlapping holds | token order violations | errors | wall s |"
    );
    let _ = writeln!(
        md,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for name in s.series() {
        for p in s.points_of(&name) {
            let r = &p.report;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1}% | {} | {} | {} | {} | {} | {:.1} |",
                name,
                p.contenders,
                r.grants,
                f1(r.throughput.grants_per_second_per_lock),
                f1(r.latency.p50_ms),
                f1(r.latency.p90_ms),
                f1(r.latency.p99_ms),
                f1(r.latency.max_ms),
                gap(r),
                r.fairness.jain_index.map_or("-".into(), |j| format!("{j:.3}")),
                r.fairness.longest_run.length,
                r.fairness.overtakes.overtaken_fraction * 100.0,
                r.fairness.overtakes.in_line_text(),
                ops_per_grant(r),
                r.safety.overlapping_holds,
                r.safety.token_violations_text(),
                r.errors.total(),
                p.wall_s,
            );
        }
    }
    md.push('\n');
}

/// The engines section of the results README (between the markers), from `s`; `dir` is the
/// engines directory's name relative to that README.
pub fn section(s: &EnginesSummary, dir: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "{SECTION_BEGIN}");
    let _ = writeln!(md, "## Real engines in wall time\n");
    let levels: Vec<usize> = s.scenario.contenders.clone();
    let lv = levels.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" / ");
    let _ = writeln!(
        md,
        "Measured by `scripts/compare-engines.sh` (not by the sweep): {} — {} of wall time per point, hold {}, think {}. \
         The full table, the scenario and the caveats: [{dir}/README.md]({dir}/README.md).\n",
        engines_sentence(s),
        format_duration(s.scenario.timing.duration),
        s.scenario.timing.hold,
        s.scenario.timing.think,
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

/// `readme` with its engines section replaced by `section` (or appended).
pub fn splice_section(readme: &str, section: &str) -> String {
    crate::experiments::splice(readme, &super::SECTION, section)
}

/// The committed results include etcd, which only a build with the `etcd` feature (the
/// tests' build) knows.
#[cfg(all(test, feature = "etcd"))]
mod tests {
    use super::*;

    /// The committed results' engines comparison (results/engines) prints within the terminal.
    #[test]
    fn the_console_table_of_the_committed_results_fits_the_terminal() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/engines/engines.json");
        let text = std::fs::read_to_string(&path).expect("results/engines/engines.json");
        let summary: EnginesSummary = serde_json::from_str(&text).expect("parses");
        let t = table(&summary);
        let widest = crate::report::console::widest_line(&t);
        assert!(widest <= crate::report::console::WIDTH, "{widest} columns:\n{t}");
        assert!(t.lines().count() >= 2 + summary.points.len(), "{t}");
    }

    /// An engine run on one server and on its cluster is named once.
    #[test]
    fn the_store_load_sentence_names_an_engine_and_its_cluster_once() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/engines/engines.json");
        let text = std::fs::read_to_string(&path).expect("results/engines/engines.json");
        let summary: EnginesSummary = serde_json::from_str(&text).expect("parses");
        assert!(summary.engines.iter().any(|e| !e.topology.is_empty()), "no cluster committed");
        let sentence = store_load_sentence(&summary);
        for name in ["zookeeper", "etcd", "service"] {
            assert_eq!(sentence.matches(name).count(), 1, "{sentence}");
        }
    }
}
