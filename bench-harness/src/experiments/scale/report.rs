//! The scale sweep's outputs, from [`ScaleSummary`] alone: the chart, the console table and
//! `README.md`.

use super::{Cell, ScaleArgs, ScalePoint, ScaleSummary};
use crate::config::ClockMode;
use crate::dist::format_duration;
use crate::report::charts::{algorithm_color, lighter, render_lines, Formats, LineChart, Series};
use crate::report::{console, files};
use anyhow::Result;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The algorithm whose figures the README sets over others'.
const SERVICE: &str = "service";

/// A table of the service's figure over other engines' at the same shape.
struct Ratio {
    /// The sentence before the table.
    intro: &'static str,
    /// The algorithms the service is set over.
    others: &'static [&'static str],
    /// The figure.
    figure: fn(&ScalePoint) -> f64,
}

/// Throughput over etcd's and ZooKeeper's locks, and Redis's token lock (whose server the
/// harness starts with its append-only file synced on every write, as the service syncs its
/// log); then the tail of the wait over theirs.
const RATIOS: [Ratio; 2] = [
    Ratio {
        intro: "The service's grants per second over the other engines' at the same shape (one server, \
                or a cluster of as many members; Redis's token lock on one server syncing every write):",
        others: &["etcd", "zookeeper", "redis-token"],
        figure: |p| p.grants_per_second,
    },
    Ratio {
        intro: "The service's p99 acquisition latency over the other engines' at the same shape \
                (below 1: the service's tail is shorter):",
        others: &["etcd", "zookeeper"],
        figure: |p| p.p99_ms,
    },
];

/// What profiling the lock service at these scales found, in words that hold for any run (the
/// figures are the tables').
const SERVICE_PROFILE: &str = "## Where the service's time goes\n\n\
The lock service, profiled at hundreds of clients on a thousand locks, used neither its cores nor its \
disk to the full: openraft's core appends one proposal at a time and waits for that append to be synced \
before it takes the next, so one command per entry was one disk sync per command, one after the other. \
The leader now proposes every command that queued while its writes were under way as one entry (group \
commit, as etcd, ZooKeeper and Redis do), so one append, one sync and one replication round serve them \
all, and a grant still costs two requests. \
What bounds it now is the handoff: a waiter is granted only when the holder's release is on disk \
(on a cluster, on the leader's disk and then a follower's), so under a Zipf law the few hot locks, \
each at one sync plus one hold per grant, set the pace while the node has time to spare. See \
`lock-service`'s crate documentation for the design.\n\n";

/// Writes the chart and README.md from `s`, says so, and prints the table.
pub(super) fn write_outputs(args: &ScaleArgs, s: &ScaleSummary, wall: Instant) -> Result<()> {
    let drawn = draw(&args.out, s)?;
    files::write_atomic(&args.out.join("README.md"), readme(s).as_bytes())?;
    crate::experiments::say_written(args.quiet, "scale.json", &drawn, &args.out, "", wall);
    print!("{}", table(s));
    Ok(())
}

/// A series' colour: its algorithm's, lighter on a cluster.
fn color_of(s: &ScaleSummary, series: &str) -> plotters::style::RGBColor {
    match s.points.iter().find(|p| p.series() == series) {
        Some(p) if !p.topology.is_empty() => lighter(algorithm_color(&p.algorithm)),
        Some(p) => algorithm_color(&p.algorithm),
        None => algorithm_color(series),
    }
}

/// Draws `scale.png` and `scale.svg`: aggregate grants/s against clients, a panel per cell,
/// a line per series.
pub fn draw(dir: &Path, s: &ScaleSummary) -> Result<Vec<PathBuf>> {
    let charts: Vec<LineChart> = s
        .scenario
        .cells
        .iter()
        .map(|&cell| {
            let series = s
                .series()
                .into_iter()
                .map(|name| {
                    let points = s
                        .scenario
                        .clients
                        .iter()
                        .filter_map(|&n| s.point(&name, cell, n))
                        .map(|p| (p.clients as f64, p.grants_per_second))
                        .filter(|(_, v)| *v > 0.0)
                        .collect();
                    Series::new(name.clone(), color_of(s, &name), points)
                })
                .filter(|l| !l.points.is_empty())
                .collect();
            let mut chart = LineChart::against_contenders(
                &cell.title(),
                "grants per second (log)",
                true,
                series,
            );
            chart.x_label = "clients (log)".into();
            // Room above the lines for the legend.
            let values = chart.series.iter().flat_map(|l| l.points.iter().map(|&(_, v)| v));
            let (low, high) = values.fold((f64::MAX, 0.0f64), |(l, h), v| (l.min(v), h.max(v)));
            if high > 0.0 {
                chart.y_range = Some((low * 0.7, high * 6.0));
            }
            chart
        })
        .collect();
    let cols = charts.len().clamp(1, 3);
    render_lines(&dir.join("scale"), &charts, cols, (620, 460), Formats::PngAndSvg)
}

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn or_dash(x: Option<f64>, digits: usize) -> String {
    x.map_or("-".into(), |v| format!("{v:.digits$}"))
}

/// One figure of a point, as a table cell.
struct Figure {
    /// The table's heading.
    title: &'static str,
    /// The cell.
    cell: fn(&ScalePoint) -> String,
    /// The table of the service's figure over others' that follows this one, if any.
    ratio: Option<&'static Ratio>,
}

const FIGURES: &[Figure] = &[
    Figure {
        title: "Aggregate grants per second",
        cell: |p| format!("{:.0}", p.grants_per_second),
        ratio: Some(&RATIOS[0]),
    },
    Figure {
        title: "Acquisition latency p50 / p99, ms",
        cell: |p| format!("{} / {}", f1(p.p50_ms), f1(p.p99_ms)),
        ratio: Some(&RATIOS[1]),
    },
    Figure {
        title: "Store requests per grant",
        cell: |p| or_dash(p.requests_per_grant, 1),
        ratio: None,
    },
    Figure {
        title: "Server CPU seconds per 1,000 grants / peak resident set MiB (summed over members)",
        cell: |p| match p.server {
            Some(s) => format!("{} / {:.0}", or_dash(s.cpu_s_per_1000_grants, 2), s.peak_rss_mib),
            None => "in process".into(),
        },
        ratio: None,
    },
    Figure {
        title: "Harness CPU ms per grant",
        cell: |p| or_dash(p.harness_cpu_ms_per_grant, 3),
        ratio: None,
    },
    Figure {
        title: "Errors / overlapping holds",
        cell: |p| format!("{} / {}", p.errors, p.overlaps),
        ratio: None,
    },
];

/// The table of `figure` at `cell`: a row per series, a column per client count.
fn pivot(md: &mut String, s: &ScaleSummary, cell: Cell, figure: &Figure) {
    let _ = writeln!(md, "{}:\n", figure.title);
    let clients = &s.scenario.clients;
    let head: Vec<String> = clients.iter().map(|n| format!("{n} clients")).collect();
    let _ = writeln!(md, "| engine | {} |", head.join(" | "));
    let _ = writeln!(md, "|---|{}", "---:|".repeat(clients.len()));
    for name in s.series() {
        let cells: Vec<String> = clients
            .iter()
            .map(|&n| s.point(&name, cell, n).map_or("-".into(), figure.cell))
            .collect();
        if cells.iter().any(|c| c != "-") {
            let _ = writeln!(md, "| {name} | {} |", cells.join(" | "));
        }
    }
    md.push('\n');
}

/// The service's figure over each other engine's at `cell`, like with like (one server over
/// one server, a cluster over a cluster of the same shape): a row per pair, a column per
/// client count.
fn ratios(md: &mut String, s: &ScaleSummary, cell: Cell, ratio: &Ratio) {
    let (num, dens) = (SERVICE, ratio.others);
    let mut rows = Vec::new();
    let topologies: Vec<&str> = {
        let mut t: Vec<&str> = s.points.iter().map(|p| p.topology.as_str()).collect();
        t.dedup();
        t.sort_unstable();
        t.dedup();
        t
    };
    for den in dens {
        for topology in &topologies {
            let at = |algorithm: &str, n: usize| {
                s.points.iter().find(|p| {
                    p.algorithm == algorithm
                        && p.topology == *topology
                        && p.cell == cell
                        && p.clients == n
                })
            };
            let mut names = None;
            let cells: Vec<String> = s
                .scenario
                .clients
                .iter()
                .map(|&n| match (at(num, n), at(den, n)) {
                    (Some(a), Some(b)) if (ratio.figure)(b) > 0.0 => {
                        names = Some((a.series(), b.series()));
                        format!("{:.2}", (ratio.figure)(a) / (ratio.figure)(b))
                    }
                    _ => "-".into(),
                })
                .collect();
            if let Some((a, b)) = names {
                rows.push(format!("| {a} / {b} | {} |", cells.join(" | ")));
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    let head: Vec<String> = s.scenario.clients.iter().map(|n| format!("{n} clients")).collect();
    let _ = writeln!(md, "{}\n", ratio.intro);
    let _ = writeln!(md, "| ratio | {} |", head.join(" | "));
    let _ = writeln!(md, "|---|{}", "---:|".repeat(head.len()));
    for r in rows {
        let _ = writeln!(md, "{r}");
    }
    md.push('\n');
}

fn list(v: impl IntoIterator<Item = String>) -> String {
    v.into_iter().collect::<Vec<_>>().join(", ")
}

/// `README.md`.
pub fn readme(s: &ScaleSummary) -> String {
    let sc = &s.scenario;
    let mut md = String::from("# Scale: clients × locks × key distribution\n\n");
    let _ = writeln!(
        md,
        "Generated by `bench-harness scale` ({}) from [scale.json](scale.json); do not edit.\n",
        s.tool
    );
    let servers = list(
        s.series()
            .into_iter()
            .filter(|n| s.points.iter().any(|p| p.series() == *n && p.clock == ClockMode::Wall)),
    );
    let models =
        list(s.series().into_iter().filter(|n| {
            s.points.iter().any(|p| p.series() == *n && p.clock == ClockMode::Simulated)
        }));
    let _ = writeln!(
        md,
        "Each point is one run: N clients (contenders, each with a client of its own) loop request, hold {hold}, \
         release, think {think}, for a window of {dur}, on {cells}, at {clients} clients. \
         Servers the harness starts for each point, in wall time: {servers}. \
         In process, in simulated time: {models}. Lease TTL {ttl}, poll interval {poll}, seed {seed}. \
         The points of one locks × distribution and client count ran one after another.\n",
        hold = sc.timing.hold,
        think = sc.timing.think,
        dur = format_duration(sc.timing.duration),
        cells = list(sc.cells.iter().map(Cell::title)),
        clients = list(sc.clients.iter().map(|n| n.to_string())),
        servers = if servers.is_empty() { "none".into() } else { servers },
        models = if models.is_empty() { "none".into() } else { models },
        ttl = format_duration(sc.timing.ttl),
        poll = format_duration(sc.timing.poll_interval),
        seed = sc.timing.seed,
    );
    let _ = writeln!(
        md,
        "Grants per second count the window's grants over all locks. Server CPU is the user and system time of every \
         process the harness started for the point (members, Sentinels), read from `/proc/<pid>/stat` and \
         interpolated to the window's start and end, so neither the servers' start nor the drain counts; peak \
         resident set is `VmHWM` from `/proc/<pid>/status`, summed over those processes. Harness CPU is this \
         process's own time (its contenders, their clients, and the proxies in front of a cluster's members): in the \
         window on a server, over the whole run in process, where the store itself is part of the harness. \
         Wall-time figures vary from run to run; all of them share this machine's cores with the servers.\n"
    );
    for &cell in &sc.cells {
        let _ = writeln!(md, "## {}\n", cell.title());
        for figure in FIGURES {
            pivot(&mut md, s, cell, figure);
            if let Some(ratio) = figure.ratio {
                ratios(&mut md, s, cell, ratio);
            }
        }
    }
    let failed: Vec<&ScalePoint> = s.points.iter().filter(|p| p.errors > 0).collect();
    if !failed.is_empty() {
        let _ = writeln!(md, "## Errors\n\nEach point that had errors, and its first:\n");
    }
    for p in &failed {
        let _ = writeln!(
            md,
            "- {} with {} clients on {}: {} errors, the first: {}",
            p.series(),
            p.clients,
            p.cell.title(),
            p.errors,
            p.first_error.as_deref().unwrap_or("-")
        );
    }
    if !failed.is_empty() {
        md.push('\n');
    }
    if s.points.iter().any(|p| p.algorithm == SERVICE) {
        md.push_str(SERVICE_PROFILE);
    }
    let _ = writeln!(md, "## Chart\n");
    let _ = writeln!(
        md,
        "Aggregate grants per second against clients (both log), a panel per locks × distribution, a line per engine \
         ([SVG](scale.svg)).\n\n![scale](scale.png)\n"
    );
    let _ = writeln!(md, "## Regenerating\n");
    let _ = writeln!(
        md,
        "```sh\ncargo run --release -p bench-harness --features etcd -- scale --out results/scale\n```\n\n\
         It needs redis-server, redis-sentinel, zookeeper and etcd-server installed (`--engines` and `--no-clusters` \
         shrink the set, `--clients`, `--locks`, `--dists` and `--duration` the grid)."
    );
    md
}

/// The console table: one row per point.
pub fn table(s: &ScaleSummary) -> String {
    let headers = [
        "engine",
        "locks",
        "clients",
        "grants/s",
        "p50 ms",
        "p99 ms",
        "srv CPU s/1k",
        "RSS MiB",
        "cpu ms/grant",
        "err",
        "overlaps",
    ];
    let rows: Vec<Vec<String>> = s
        .points
        .iter()
        .map(|p| {
            vec![
                p.series(),
                p.cell.title(),
                p.clients.to_string(),
                format!("{:.0}", p.grants_per_second),
                f1(p.p50_ms),
                f1(p.p99_ms),
                or_dash(p.server.and_then(|c| c.cpu_s_per_1000_grants), 2),
                p.server.map_or("-".into(), |c| format!("{:.0}", c.peak_rss_mib)),
                or_dash(p.harness_cpu_ms_per_grant, 3),
                p.errors.to_string(),
                p.overlaps.to_string(),
            ]
        })
        .collect();
    console::render(&headers, 2, &rows)
}

#[cfg(test)]
mod tests {
    use super::super::{ScaleScenario, ServerCost};
    use super::*;
    use crate::engines::EngineRef;
    use crate::keys::KeyDist;
    use std::time::Duration;

    fn point(backend: &str, topology: &str, cell: Cell, clients: usize, gps: f64) -> ScalePoint {
        let backend = EngineRef::find(backend).unwrap();
        let algorithm = *backend.algorithm_names().last().unwrap();
        ScalePoint {
            backend,
            algorithm: algorithm.to_string(),
            topology: topology.into(),
            clock: ClockMode::Wall,
            cell,
            clients,
            grants: (gps * 10.0) as u64,
            grants_per_second: gps,
            p50_ms: 1.25,
            p99_ms: 9.5,
            requests_per_grant: Some(3.0),
            errors: 0,
            first_error: None,
            overlaps: 0,
            server: Some(ServerCost {
                processes: 1,
                cpu_s: 2.0,
                cpu_s_per_1000_grants: Some(0.5),
                peak_rss_mib: 40.0,
            }),
            harness_cpu_s: 1.0,
            harness_cpu_ms_per_grant: Some(0.25),
            wall_s: 12.0,
        }
    }

    #[test]
    fn the_readme_pivots_every_figure_and_sets_the_service_over_zookeeper_like_with_like() {
        let one = Cell { locks: 1, key_dist: KeyDist::Fixed };
        let many = Cell { locks: 100, key_dist: KeyDist::Zipf { s: 0.99 } };
        let mut points = Vec::new();
        for cell in [one, many] {
            for n in [4, 16] {
                points.push(point("service", "", cell, n, 800.0));
                points.push(point("zookeeper", "", cell, n, 200.0));
                points.push(point("service", "×3", cell, n, 300.0));
                points.push(point("zookeeper", "×3", cell, n, 600.0));
                points.push(point("redis", "", cell, n, 1600.0));
                points.push(point("redis", "sentinel", cell, n, 1600.0));
            }
        }
        let s = ScaleSummary {
            schema_version: 1,
            tool: "bench-harness test".into(),
            scenario: ScaleScenario {
                timing: crate::experiments::PointTiming {
                    hold: "1ms".parse().unwrap(),
                    think: "exp:5ms".parse().unwrap(),
                    duration: Duration::from_secs(10),
                    ttl: Duration::from_secs(10),
                    poll_interval: Duration::from_millis(20),
                    seed: 1,
                },
                clients: vec![4, 16],
                cells: vec![one, many],
            },
            points,
        };
        let md = readme(&s);
        assert!(md.contains("## 1 lock\n") && md.contains("## 100 locks, zipf:0.99\n"), "{md}");
        assert_eq!(md.matches("| engine | 4 clients | 16 clients |").count(), 2 * FIGURES.len());
        assert_eq!(md.matches("| service / zookeeper | 4.00 | 4.00 |").count(), 2, "{md}");
        assert_eq!(md.matches("| service×3 / zookeeper×3 | 0.50 | 0.50 |").count(), 2, "{md}");
        assert!(!md.contains("/ etcd"), "no etcd point, no etcd ratio: {md}");
        assert_eq!(md.matches("| service / redis/redis-token | 0.50 | 0.50 |").count(), 2, "{md}");
        // Every point's p99 is the same: a p99 ratio of 1 for ZooKeeper, none for Redis.
        assert_eq!(md.matches("| service / zookeeper | 1.00 | 1.00 |").count(), 2, "{md}");
        assert_eq!(md.matches("| service×3 / zookeeper×3 | 1.00 | 1.00 |").count(), 2, "{md}");
        assert_eq!(md.matches("| ratio |").count(), 4, "{md}");
        assert!(!md.contains("/ redis sentinel"), "no service beside Sentinel: {md}");
        assert!(md.contains("| zookeeper×3 | 600 | 600 |"), "{md}");
        assert!(md.contains("| service | 0.50 / 40 | 0.50 / 40 |"), "{md}");
        assert_eq!(md.matches("## Where the service's time goes").count(), 1, "{md}");
        assert!(!md.contains("## Errors"), "no point had errors: {md}");
        let mut failing = s.clone();
        failing.points[0].errors = 3;
        failing.points[0].first_error = Some("refused".into());
        let md = readme(&failing);
        assert!(md.contains("## Errors\n\n"), "{md}");
        assert!(md.contains("on 1 lock: 3 errors, the first: refused\n\n## "), "{md}");
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<ScaleSummary>(&json).unwrap(), s);
        let t = table(&s);
        assert_eq!(t.lines().count(), 2 + s.points.len(), "{t}");
    }
}
