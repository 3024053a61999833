//! Leader faults on clusters the harness starts itself (`--spawn-etcd=3`,
//! `--spawn-zookeeper=3`), the way a user runs them: the binary, the checker's exit status and
//! the CSV files. What the literature expects, checked rather than assumed: etcd and ZooKeeper
//! keep mutual exclusion through a killed, paused or cut-off leader (their logs are replicated
//! to a majority before they answer), and grants resume once a new leader is elected. Needs
//! ZooKeeper and etcd (`scripts/test.sh` installs them; the etcd tests are in the build with the
//! `etcd` feature); a missing one fails the test, naming the package.

use bench_harness::check;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

mod support;
use support::{run_checked, windows, BIN};

fn scratch(name: &str) -> PathBuf {
    support::scratch("bench-harness-cluster-faults", name)
}

/// A run with `fault` on a cluster: the checker finds it safe (exit 0), the fault hit the
/// leader at least once, and grants resumed within `resume` of each fault's end.
fn leader_fault_is_survived(dir: &Path, args: &[&str], fault: &str, resume: Duration) {
    let (code, text) = run_checked(dir, args);
    assert_eq!(code, Some(0), "{text}");
    let hits = windows(dir, fault);
    assert!(!hits.is_empty(), "no {fault} happened: {text}");
    assert!(hits.iter().all(|(t, _, _)| t == "leader"), "{hits:?}");
    let verdicts = check::check_dir(dir, Duration::from_secs(4)).unwrap();
    for v in &verdicts {
        assert_eq!(v.figures.overlapping_holds, 0, "{}: {text}", v.algorithm);
        let resumed = v.figures.resumed_after_us_by_fault.get(fault).copied();
        assert!(
            resumed.is_some_and(|us| us < resume.as_micros() as u64),
            "{}: grants must resume within {resume:?} of the {fault}'s end, got {resumed:?}",
            v.algorithm
        );
    }
}

fn run_args<'a>(backend: &'a str, spawn: &'a str, fault: &'a str) -> Vec<&'a str> {
    let args = ["--backend", backend, spawn, "--threads", "4", "--duration", "12s", "--ttl", "4s"];
    let mut all = args.to_vec();
    all.extend(["--faults", fault]);
    all
}

#[cfg(feature = "etcd")]
#[test]
fn an_etcd_cluster_keeps_its_lock_through_a_killed_leader() {
    let dir = scratch("etcd-leader-kill");
    let args = run_args("etcd", "--spawn-etcd=3", "leader-kill:2s@6s");
    leader_fault_is_survived(&dir, &args, "leader-kill", Duration::from_secs(6));
}

#[test]
fn a_zookeeper_ensemble_keeps_its_lock_through_a_paused_leader() {
    let dir = scratch("zk-leader-pause");
    let args = run_args("zookeeper", "--spawn-zookeeper=3", "leader-pause:2s@6s");
    leader_fault_is_survived(&dir, &args, "leader-pause", Duration::from_secs(6));
}

#[test]
fn a_leader_fault_without_a_cluster_says_what_starts_one() {
    let out = Command::new(BIN)
        .args(["--backend", "zookeeper", "--spawn-zookeeper", "--faults", "leader-kill:1s@5s"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--spawn-zookeeper=3"), "names the option that makes it possible: {err}");
}
