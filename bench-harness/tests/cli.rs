//! The binary, end to end: usage errors, failures, a small run, a small sweep, determinism.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_bench-harness");
const HEADER: &str = "algorithm,lock,contender,requested_us,granted_us,released_us,token";

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("bench-harness-cli")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn zero_threads_is_a_usage_error() {
    let o = run(&["--threads", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--threads"), "{}", stderr(&o));
}

#[test]
fn an_unknown_algorithm_is_a_usage_error_that_lists_the_known_ones() {
    let o = run(&["--algorithms", "queue,paxos"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("unknown algorithm 'paxos'") && e.contains("shadow") && e.contains("queue"),
        "{e}"
    );
}

#[test]
fn zero_and_negative_durations_are_usage_errors() {
    let o = run(&["--duration", "0s"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("zero"), "{}", stderr(&o));
    let o = run(&["--duration", "-5s"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("negative"), "{}", stderr(&o));
    let o = run(&["--duration", "5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn an_unwritable_output_directory_fails_with_exit_code_1() {
    let dir = scratch("unwritable");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = file.join("results");
    let o = run(&[
        "--threads",
        "2",
        "--duration",
        "1s",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.starts_with("error: cannot create the output directory"),
        "{e}"
    );
}

#[test]
fn backends_not_built_in_say_so() {
    let o = run(&["--backend", "redis", "--clock", "wall", "--duration", "1s"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("not yet built in this binary"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn help_has_examples_and_the_store_model() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let h = stdout(&o);
    assert!(
        h.contains("Examples:") && h.contains("800us+400us") && h.contains("QUORUM"),
        "{h}"
    );
    let o = run(&["list"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("shadow") && stdout(&o).contains("queue"));
}

#[test]
fn a_small_run_writes_summary_csv_and_charts() {
    let dir = scratch("small");
    let o = run(&[
        "--threads",
        "4",
        "--duration",
        "2s",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).is_empty(),
        "--quiet prints nothing on stderr: {}",
        stderr(&o)
    );
    let table = stdout(&o);
    assert!(
        table.contains("shadow") && table.contains("queue") && table.contains("gap/ideal"),
        "{table}"
    );

    let csv = std::fs::read_to_string(dir.join("grants.csv")).unwrap();
    assert_eq!(csv.lines().next(), Some(HEADER));
    assert!(csv.lines().skip(1).any(|l| l.starts_with("shadow,")));
    assert!(csv.lines().skip(1).any(|l| l.starts_with("queue,")));

    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["config"]["threads"], 4);
    assert_eq!(summary["config"]["duration"], "2s");
    assert_eq!(summary["config"]["latency"], "800us+400us");
    let results = summary["results"].as_array().unwrap();
    // Every registered algorithm of the embedded store, the two thesis locks among them.
    assert!(results.len() >= 2);
    for name in ["shadow", "queue"] {
        assert!(
            results.iter().any(|r| r["algorithm"] == name),
            "{name} missing"
        );
    }
    for r in results {
        assert!(r["grants"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["safety"]["overlapping_holds"], 0);
        assert_eq!(r["safety"]["token_order_violations"], 0);
        assert!(
            r["latency"]["p99_ms"].as_f64().unwrap() >= r["latency"]["p50_ms"].as_f64().unwrap()
        );
    }
    let queue = results.iter().find(|r| r["algorithm"] == "queue").unwrap();
    assert!(
        queue["handoff"]["ratio_to_ideal"].as_f64().is_some(),
        "{queue}"
    );
    for chart in [
        "latency_cdf.png",
        "latency_cdf.svg",
        "timeline.png",
        "grants_per_contender.png",
    ] {
        assert!(
            std::fs::metadata(dir.join(chart)).unwrap().len() > 1000,
            "{chart}"
        );
    }
}

#[test]
fn the_same_seed_gives_byte_identical_results() {
    let args = |dir: &Path| {
        vec![
            "--threads".to_string(),
            "6".into(),
            "--locks".into(),
            "2".into(),
            "--duration".into(),
            "3s".into(),
            "--skew".into(),
            "2ms".into(),
            "--think".into(),
            "uniform:0ms..4ms".into(),
            "--seed".into(),
            "7".into(),
            "-q".into(),
            "--out".into(),
            dir.to_str().unwrap().into(),
        ]
    };
    let (a, b) = (scratch("same-seed-a"), scratch("same-seed-b"));
    for dir in [&a, &b] {
        let o = Command::new(BIN).args(args(dir)).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    for file in ["summary.json", "grants.csv"] {
        let (x, y) = (
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
        );
        assert!(x == y, "{file} differs between two runs with the same seed");
    }
    let c = scratch("other-seed");
    let mut other = args(&c);
    other[11] = "8".into();
    assert!(Command::new(BIN)
        .args(other)
        .output()
        .unwrap()
        .status
        .success());
    assert_ne!(
        std::fs::read(a.join("grants.csv")).unwrap(),
        std::fs::read(c.join("grants.csv")).unwrap()
    );
}

#[test]
fn the_global_time_source_runs() {
    let dir = scratch("global");
    let o = run(&[
        "-a",
        "queue",
        "--threads",
        "4",
        "--duration",
        "3s",
        "--time-source",
        "global",
        "--skew",
        "5ms",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap();
    assert!(summary["results"][0]["grants"].as_u64().unwrap() > 0);
    assert_eq!(summary["results"][0]["safety"]["overlapping_holds"], 0);
}

#[test]
fn a_quick_sweep_writes_the_results_directory() {
    let dir = scratch("sweep");
    let o = run(&[
        "sweep",
        "--quick",
        "--contenders",
        "1,2,8",
        "--duration",
        "2s",
        "-q",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for needle in [
        "# Benchmark results",
        "## Findings",
        "latency_vs_contenders.png",
        "timeline_2.png",
        "timeline_8.png",
        "poll_interval.png",
        "clock_skew.png",
    ] {
        assert!(readme.contains(needle), "README lacks {needle}:\n{readme}");
    }
    for chart in [
        "latency_vs_contenders",
        "throughput_vs_contenders",
        "fairness_vs_contenders",
        "store_ops_vs_contenders",
        "poll_interval",
        "clock_skew",
        "timeline_2",
        "timeline_8",
    ] {
        assert!(dir.join(format!("{chart}.png")).exists(), "{chart}.png");
    }
    let sweep: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("sweep.json")).unwrap()).unwrap();
    let points = sweep["points"].as_array().unwrap();
    assert!(points
        .iter()
        .all(|p| p["report"]["safety"]["overlapping_holds"] == 0));
    assert!(points
        .iter()
        .any(|p| p["experiment"] == "skew" && p["series"] == "queue/global"));
}
