//! Faults end to end on the embedded store in simulated time: the nemesis, the fenced resource
//! and the checker, each the way a user meets it (the library for figures, the binary for exit
//! statuses and files).

use bench_harness::check;
use bench_harness::config::RunConfig;
use bench_harness::measure::summary;
use bench_harness::run;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support;
use support::{run_checked, BIN};

fn scratch(name: &str) -> PathBuf {
    support::scratch("bench-harness-faults", name)
}

fn faulty(algorithm: &str, threads: usize, duration: Duration, faults: &str) -> RunConfig {
    RunConfig {
        algorithms: vec![algorithm.into()],
        threads,
        duration,
        faults: faults.parse().unwrap(),
        ..RunConfig::default()
    }
}

#[test]
fn replica_faults_break_the_locks_at_one_and_not_at_quorum() {
    let args = |consistency: &'static str| {
        vec![
            "--threads",
            "16",
            "--duration",
            "60s",
            "-a",
            "shadow,bakery",
            "--consistency",
            consistency,
            "--faults",
            "replica-stop:5s@15s,replica-lag:5s@15s",
        ]
    };
    let one = scratch("one");
    let (code, text) = run_checked(&one, &args("ONE"));
    assert_eq!(code, Some(3), "{text}");
    assert!(
        text.contains("overlapping holds") && text.contains("granted at"),
        "names the grants: {text}"
    );
    // The checker alone, from the files, agrees.
    let verdicts = check::check_dir(&one, Duration::from_secs(10)).unwrap();
    assert!(verdicts.iter().any(|v| v.figures.overlapping_holds > 0));
    let faults = std::fs::read_to_string(one.join("faults.csv")).unwrap();
    assert!(
        faults.contains(",replica-stop,replica-") && faults.contains(",replica-lag,replica-"),
        "{faults}"
    );

    let (code, text) = run_checked(&scratch("quorum"), &args("QUORUM"));
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("safe: no overlapping hold"), "{text}");
}

#[test]
fn a_holder_paused_past_its_lease_overlaps_and_fencing_rejects_every_stale_write() {
    for algorithm in ["shadow", "queue", "bakery", "queue-bounded", "queue-push", "lwt"] {
        let cfg = RunConfig {
            ttl: Duration::from_secs(2),
            ..faulty(algorithm, 8, Duration::from_secs(45), "pause:5s@20s")
        };
        let a = cfg.backend.algorithm(algorithm).unwrap();
        let outcome = run::run_algorithm(&cfg, a, None).unwrap();
        let r = summary::analyze(&cfg, a, &outcome);
        let f = &r.fault_safety;
        assert!(!outcome.faults.is_empty(), "{algorithm}: no pause injected");
        assert!(
            f.overlapping_holds > 0,
            "{algorithm}: a pause past the lease gave no overlap: {f:?}"
        );
        assert!(f.stale_writes > 0, "{algorithm}: {f:?}");
        assert_eq!(f.stale_accepted, 0, "{algorithm}: fencing let a stale write in: {f:?}");
        assert_eq!(f.stale_rejected, f.stale_writes, "{algorithm}");
        assert_eq!(f.stale_accepted_without_fencing, f.stale_writes, "{algorithm}");
        assert_eq!(
            f.stale_holders_told, f.stale_holders,
            "{algorithm}: a stale holder was not told: {f:?}"
        );
        assert_eq!(f.overlaps_outside_pauses, 0, "{algorithm}: {f:?}");
    }
}

#[test]
fn a_silently_partitioned_holder_works_on_told_and_fenced() {
    // Holds of three leases and more: the cut-off holder is still in its critical section
    // when its lease ends on the store and the next waiter is granted (with holds of one or
    // two leases it is mostly done by then). Unlike a pause, the holder is not frozen: only
    // what it sends and receives is held, and its client tells it that the lease is gone.
    for algorithm in ["shadow", "queue", "lwt"] {
        let cfg = RunConfig {
            ttl: Duration::from_secs(2),
            hold: "uniform:6s..8s".parse().unwrap(),
            ..faulty(algorithm, 4, Duration::from_secs(45), "silent-partition:5s@20s")
        };
        let a = cfg.backend.algorithm(algorithm).unwrap();
        let outcome = run::run_algorithm(&cfg, a, None).unwrap();
        let r = summary::analyze(&cfg, a, &outcome);
        let f = &r.fault_safety;
        assert!(
            outcome.faults.iter().any(|w| w.kind == "silent-partition"),
            "{algorithm}: no silent partition injected"
        );
        assert!(f.overlapping_holds > 0, "{algorithm}: the cut-off holder overlapped none: {f:?}");
        assert!(f.leases_lost_signalled > 0, "{algorithm}: nobody was told: {f:?}");
        assert_eq!(f.stale_accepted, 0, "{algorithm}: fencing let a stale write in: {f:?}");
        assert_eq!(
            f.stale_holders_told, f.stale_holders,
            "{algorithm}: a cut-off holder was not told its lease ended: {f:?}"
        );
    }
}

#[test]
fn crashed_holders_leave_their_lock_until_the_lease_ends_and_nothing_overlaps() {
    for algorithm in ["shadow", "queue", "bakery", "queue-bounded", "queue-push", "lwt"] {
        let cfg = RunConfig {
            ttl: Duration::from_secs(2),
            locks: 2,
            ..faulty(algorithm, 6, Duration::from_secs(40), "crash:3s@4s")
        };
        let a = cfg.backend.algorithm(algorithm).unwrap();
        let outcome = run::run_algorithm(&cfg, a, None).unwrap();
        let r = summary::analyze(&cfg, a, &outcome);
        let f = &r.fault_safety;
        assert_eq!(f.overlapping_holds, 0, "{algorithm}: {f:?}");
        assert!(outcome.faults.len() >= 9, "{algorithm}: {} crashes", outcome.faults.len());
        // Contenders come back under new owner ids and get grants again.
        assert!(outcome.faults.iter().any(|w| w.target.contains('.')), "{:?}", outcome.faults);
        let last_crash = outcome.faults.iter().map(|w| w.end_us).max().unwrap();
        assert!(
            outcome.grants.iter().any(|g| g.granted_us > last_crash),
            "{algorithm}: no grant after the last crash"
        );
    }
}

#[test]
fn a_run_with_faults_is_reproducible_byte_for_byte() {
    let faults = "pause:3s@9s,crash:2s@7s,clock-jump:1s@5s,partition:2s@8s,silent-partition:2s@11s,replica-stop:3s@10s,replica-lag:2s@6s";
    let files = |name: &str| {
        let dir = scratch(name);
        let o = Command::new(BIN)
            .args([
                "--threads",
                "8",
                "--duration",
                "30s",
                "-a",
                "queue,bakery",
                "--ttl",
                "2s",
                "--quiet",
            ])
            .args(["--faults", faults, "--out"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        ["grants.csv", "resource.csv", "faults.csv"]
            .map(|f| std::fs::read_to_string(dir.join(f)).unwrap())
    };
    let first = files("same-a");
    assert_eq!(first, files("same-b"));
    let kinds = [
        "pause",
        "crash",
        "clock-jump",
        "partition",
        "silent-partition",
        "replica-stop",
        "replica-lag",
    ];
    for kind in kinds {
        assert!(
            first[2].contains(&format!(",{kind},")),
            "{kind} missing from faults.csv:\n{}",
            first[2]
        );
    }
    assert!(first[1].lines().count() > 100, "the resource saw the critical sections");
}

#[test]
fn a_small_soak_checks_every_grant_under_mixed_faults() {
    // The soak command in small: every Cassandra-model lock at QUORUM, many locks, crashes,
    // partitions, clock jumps, stopped and overloaded replicas; the checker judges the files.
    let dir = scratch("soak");
    let o = Command::new(BIN)
        .args([
            "soak",
            "--grants",
            "20000",
            "--threads",
            "64",
            "--locks",
            "16",
            "--run-length",
            "40s",
            "--quiet",
        ])
        .arg("--out")
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}{}", String::from_utf8_lossy(&o.stderr));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for algorithm in ["shadow", "queue", "bakery", "queue-bounded", "queue-push", "lwt"] {
        let row = readme.lines().find(|l| l.starts_with(&format!("| {algorithm} |"))).unwrap();
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let grants: u64 = cells[2].parse().unwrap();
        assert!(grants >= 20_000, "{row}");
        assert_eq!(cells[6], "0", "overlaps: {row}");
    }
}

#[test]
fn faults_an_engine_cannot_inject_are_refused_before_the_run() {
    let o = Command::new(BIN).args(["--faults", "server-restart:1s@5s"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("cannot inject server-restart"), "{e}");
    let o = Command::new(BIN).args(["--faults", "pause:9s@5s"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("shorter than PERIOD"));
}
