//! `bench-harness scale`, end to end: a tiny grid on the embedded store and one lock-service
//! node the harness starts, every figure read back from the files it wrote; `--engines` merging
//! into an earlier scale.json; and a server it cannot start, which fails naming what to install.

use crate::support;

use bench_harness::config::ClockMode;
use bench_harness::engines::EngineRef;
use bench_harness::experiments::scale::{ScalePoint, ScaleSummary};
use std::process::Command;

#[test]
fn a_tiny_grid_writes_every_figure_measured() {
    let dir = support::scratch("bench-harness-scale", "tiny");
    let out = Command::new(support::BIN)
        .args(["scale", "--quiet", "--engines", "embedded,service", "--no-clusters"])
        .args(["--clients", "2", "--locks", "1,2", "--dists", "uniform", "--duration", "1s"])
        .arg("--out")
        .arg(&dir)
        .output()
        .expect("the binary runs");
    let text = support::output_text(&out);
    assert!(out.status.success(), "{text}");

    let json = std::fs::read_to_string(dir.join("scale.json")).expect("scale.json");
    let s: ScaleSummary = serde_json::from_str(&json).expect("parses");
    assert_eq!(s.scenario.clients, [2]);
    assert_eq!(s.scenario.cells.len(), 2);
    let series = s.series();
    let embedded = EngineRef::find("embedded").unwrap().algorithm_names();
    let expected: Vec<String> = embedded.iter().map(|a| format!("embedded/{a}")).collect();
    assert_eq!(series, [expected, vec!["service".to_string()]].concat());
    assert_eq!(s.points.len(), 2 * series.len());
    for p in &s.points {
        let what = format!("{} on {}: {p:?}", p.series(), p.cell.title());
        assert!(p.grants > 0 && p.grants_per_second > 0.0, "{what}");
        assert!(p.p50_ms > 0.0 && p.p99_ms >= p.p50_ms, "{what}");
        assert!(p.requests_per_grant.is_some_and(|r| r >= 1.0), "{what}");
        assert_eq!((p.errors, p.overlaps), (0, 0), "{what}");
        assert!(p.harness_cpu_s > 0.0, "{what}");
        assert!(p.harness_cpu_ms_per_grant.is_some_and(|c| c > 0.0), "{what}");
        if p.backend.in_process() {
            assert_eq!((p.clock, p.server), (ClockMode::Simulated, None), "{what}");
        } else {
            assert_eq!(p.clock, ClockMode::Wall, "{what}");
            let server = p.server.expect("the node the harness started was sampled");
            assert_eq!(server.processes, 1, "{what}");
            assert!(server.cpu_s > 0.0 && server.peak_rss_mib > 1.0, "{what}");
            let per_1000 = server.cpu_s / p.grants as f64 * 1000.0;
            let recorded = server.cpu_s_per_1000_grants.expect("grants, so a cost per grant");
            assert!((recorded - per_1000).abs() < 1e-9 * per_1000, "{what}");
        }
    }

    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
    assert!(readme.contains("## 1 lock\n") && readme.contains("## 2 locks, uniform\n"), "{readme}");
    let service = &s.points.iter().find(|p| p.series() == "service").unwrap();
    let row = format!("| service | {:.0} |", service.grants_per_second);
    assert!(readme.contains(&row), "{row} not in {readme}");
    for chart in ["scale.png", "scale.svg"] {
        let len = std::fs::metadata(dir.join(chart)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "{chart}: {len} bytes");
    }
    // Redrawn from scale.json alone, the README is the same.
    let redraw = Command::new(support::BIN)
        .args(["scale", "--quiet", "--redraw", "--out"])
        .arg(&dir)
        .output()
        .expect("the binary runs");
    assert!(redraw.status.success(), "{}", String::from_utf8_lossy(&redraw.stderr));
    assert_eq!(std::fs::read_to_string(dir.join("README.md")).unwrap(), readme);
}

/// `bench-harness scale ARGS --quiet --out DIR`: its exit code and what it printed.
fn scale(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(support::BIN)
        .arg("scale")
        .args(args)
        .args(["--quiet", "--out"])
        .arg(dir)
        .output()
        .expect("the binary runs");
    (out.status.code(), support::output_text(&out))
}

fn read(dir: &std::path::Path) -> ScaleSummary {
    let json = std::fs::read_to_string(dir.join("scale.json")).expect("scale.json");
    serde_json::from_str(&json).expect("parses")
}

#[test]
fn engines_replace_their_own_points_and_keep_the_others() {
    let dir = support::scratch("bench-harness-scale", "merge");
    let embedded = ["--quick", "--engines", "embedded"];
    let (code, text) = scale(&dir, &embedded);
    assert_eq!(code, Some(0), "{text}");
    let first = read(&dir);
    assert!(!first.points.is_empty());

    // A point of another engine, as a full run would have left it, after the embedded store's.
    let mut with_other = first.clone();
    let mut other = first.points[0].clone();
    other.backend = EngineRef::find("service").unwrap();
    other.algorithm = other.backend.algorithm_names()[0].into();
    other.clock = ClockMode::Wall;
    // A figure that serde_json's default parser reads one ulp off: the merge keeps it exact.
    other.grants_per_second = 99414.14234139935;
    let same_point = |p: &&ScalePoint| (p.cell, p.clients) == (other.cell, other.clients);
    let at = first.points.iter().take_while(same_point).count();
    with_other.points.insert(at, other.clone());
    let json = serde_json::to_string_pretty(&with_other).unwrap();
    std::fs::write(dir.join("scale.json"), json).unwrap();

    let (code, text) = scale(&dir, &embedded);
    assert_eq!(code, Some(0), "{text}");
    let second = read(&dir);
    assert_eq!(second.points.len(), first.points.len() + 1);
    assert_eq!(second.points[at], other, "the other engine's point stays in its place");
    let again: Vec<_> = second.points.iter().filter(|p| p.backend.name() == "embedded").collect();
    assert_eq!(again.len(), first.points.len(), "the embedded store's points replaced, not added");
    for (a, b) in again.iter().zip(&first.points) {
        assert_eq!((a.series(), a.cell, a.clients), (b.series(), b.cell, b.clients));
    }
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
    assert!(readme.contains("| service | 99414 |"), "{readme}");

    // Another scenario is refused before anything runs, and scale.json stays as it was.
    let before = std::fs::read_to_string(dir.join("scale.json")).unwrap();
    let (code, text) = scale(&dir, &["--engines", "embedded", "--clients", "3", "--locks", "1"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("scale.json") && text.contains("clients 2, 8 (this run: 3)"), "{text}");
    assert_eq!(std::fs::read_to_string(dir.join("scale.json")).unwrap(), before);
}

#[test]
fn a_server_that_cannot_start_fails_naming_what_to_install() {
    let dir = support::scratch("bench-harness-scale", "missing");
    let empty = support::scratch("bench-harness-scale", "empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(support::BIN)
        .args(["scale", "--quiet", "--engines", "redis", "--no-clusters", "--quick", "--out"])
        .arg(&dir)
        .env("PATH", &empty)
        .output()
        .expect("the binary runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("redis-server") && err.contains("apt-get install"), "{err}");
}
