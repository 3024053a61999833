//! Member faults on clusters the harness starts itself (`--spawn-etcd=3`,
//! `--spawn-zookeeper=3`, `--spawn-redis=sentinel`, `--backend redlock --spawn-redlock`), the
//! way a user runs them: the binary, the checker's exit status and the CSV files. What the
//! literature expects, checked rather than assumed: etcd and ZooKeeper keep mutual exclusion
//! through a killed, paused or cut-off leader (their logs are replicated to a majority before
//! they answer), and grants resume once a new leader is elected; Redis through Sentinel follows
//! a killed master to the promoted replica, and loses the grant its master acknowledged while
//! replication was held back (the lost fencing counter hands the next holder the same token);
//! Redlock keeps mutual exclusion through a killed master. Needs ZooKeeper, etcd, redis-server
//! and redis-sentinel (`scripts/test.sh` installs them; the etcd tests are in the build with
//! the `etcd` feature); a missing one fails the test, naming the package.

use bench_harness::check;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support;
use support::{run_checked, windows, BIN};

fn scratch(name: &str) -> PathBuf {
    support::scratch("bench-harness-cluster-faults", name)
}

/// A run with `fault` on a cluster: the checker finds it safe (exit 0), the fault hit the
/// leader at least once, and grants resumed within `resume` of each fault's end.
fn leader_fault_is_survived(dir: &Path, args: &[&str], fault: &str, resume: Duration) {
    member_fault_is_survived(dir, args, fault, "leader", resume)
}

/// [`leader_fault_is_survived`] for a fault that hits `target` ("leader", "master").
fn member_fault_is_survived(
    dir: &Path,
    args: &[&str],
    fault: &str,
    target: &str,
    resume: Duration,
) {
    let (code, text) = run_checked(dir, args);
    assert_eq!(code, Some(0), "{text}");
    let hits = windows(dir, fault);
    assert!(!hits.is_empty(), "no {fault} happened: {text}");
    assert!(hits.iter().all(|(t, _, _)| t == target), "{hits:?}");
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
fn the_lock_service_keeps_its_lock_through_a_cut_off_leader() {
    let dir = scratch("service-leader-cut");
    let args = run_args("service", "--spawn-service=3", "leader-cut:2s@6s");
    leader_fault_is_survived(&dir, &args, "leader-cut", Duration::from_secs(6));
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

#[test]
fn redis_through_sentinel_follows_a_killed_master() {
    let dir = scratch("redis-sentinel-leader-kill");
    let mut args = run_args("redis", "--spawn-redis=sentinel", "leader-kill:6s@12s");
    // Seed 6 starts the first fault 3.2 s in (a quarter of its period), and 16 s see it end.
    args.extend(["--algorithms", "redis-token", "--seed", "6", "--duration", "16s"]);
    // Sentinel deems the master down after 2 s, then elects: grants resume on the promoted
    // replica while the old master is still down.
    member_fault_is_survived(&dir, &args, "leader-kill", "leader", Duration::from_secs(8));
}

/// The grant the master acknowledged while its replication was held back is lost in the
/// failover, and with it the fencing counter's increment: the next holder is handed the lost
/// grant's token again (`lock-redis`'s `tests/sentinel_safety.rs` shows the two holders).
#[test]
fn a_master_killed_with_its_replication_held_back_loses_the_last_grant() {
    let dir = scratch("redis-sentinel-lagged-kill");
    let args = [
        "--backend",
        "redis",
        "--spawn-redis=sentinel",
        "--algorithms",
        "redis-token",
        "--threads",
        "2",
        "--duration",
        "16s",
        "--hold",
        "500ms",
        "--ttl",
        "10s",
        "--faults",
        "lagged-leader-kill:10s@15s/lag=3s",
        // The fault starts 4 s in (seed 6), and the failover is over well before the end.
        "--seed",
        "6",
    ];
    let (_, text) = run_checked(&dir, &args);
    let hits = windows(&dir, "lagged-leader-kill");
    assert_eq!(hits.len(), 1, "{text}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let r = &summary["results"][0];
    assert!(r["safety"]["token_order_violations"].as_u64() >= Some(1), "{r}\n{text}");
}

#[test]
fn redlock_keeps_its_lock_through_a_killed_master() {
    let dir = scratch("redlock-master-kill");
    let args = run_args("redlock", "--spawn-redlock", "master-kill:3s@5s");
    member_fault_is_survived(&dir, &args, "master-kill", "master", Duration::from_secs(3));
}

#[test]
fn cluster_options_that_cannot_work_are_usage_errors() {
    let usage = |args: &[&str], says: &str| {
        let out = Command::new(BIN).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} must say {says:?}: {err}");
    };
    usage(
        &["--backend", "zookeeper", "--spawn-zookeeper=3", "--faults", "lagged-leader-kill:5s@9s"],
        "--spawn-redis=sentinel",
    );
    usage(&["--backend", "redlock", "--spawn-redlock", "--faults", "leader-kill:1s@5s"], "--spawn");
    usage(&["--backend", "redis", "--faults", "master-wipe:1s@5s"], "--spawn-redlock");
    usage(&["--backend", "redis", "--redis-sentinel", "localhost"], "127.0.0.1:26379");
    usage(&["--backend", "redlock", "--redlock", "localhost:6379"], "redis://");
    usage(
        &["--backend", "redis", "--faults", "lagged-leader-kill:5s@9s/lag=6s", "--spawn-redis"],
        "lag must be shorter",
    );
}

/// A master name the Sentinels do not know, or Sentinels nobody answers at, fail the run at
/// once (exit 1) naming what was asked, never a hang.
#[test]
fn an_unknown_sentinel_master_fails_fast() {
    let cluster = test_servers::RedisCluster::sentinel(1, 1);
    let sentinel = cluster.sentinel_addrs()[0].to_string();
    let started = std::time::Instant::now();
    let out = Command::new(BIN)
        .args(["--backend", "redis", "--redis-sentinel", &sentinel])
        .args(["--redis-master-name", "nosuchmaster", "--duration", "2s", "--quiet"])
        .args(["--out", scratch("unknown-master").to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("nosuchmaster") && err.contains(&sentinel), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15), "{:?}", started.elapsed());
    let closed = test_servers::ClosedPort::new();
    let dead = closed.addr().port();
    let out = Command::new(BIN)
        .args(["--backend", "redis", "--redis-sentinel", &format!("127.0.0.1:{dead}")])
        .args(["--duration", "2s", "--quiet", "--out"])
        .arg(scratch("no-sentinel"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{dead}")), "{err}");
    drop(closed);
}
