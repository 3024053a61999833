//! Many locks and shared sessions, end to end: `--key-dist` spreads each contender's acquires
//! over the locks (the hottest taking the most grants, the checker judging every lock on its
//! own), bad distributions are usage errors, and `--sessions N` runs a real server's
//! contenders over N sessions, as the server's own requests count them. The server test
//! starts the lock service (this binary's hidden `lock-server`), which needs nothing installed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

use crate::support;
use support::{run_checked, scratch, BIN};

fn dir(name: &str) -> std::path::PathBuf {
    scratch("bench-harness-locks", name)
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("the binary runs")
}

fn summary_of(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

/// Per algorithm, per contender, the grants of each lock: `grants.csv` read back.
fn grants_by_contender(dir: &Path) -> BTreeMap<String, BTreeMap<u32, BTreeMap<u32, u64>>> {
    let csv = std::fs::read_to_string(dir.join("grants.csv")).unwrap();
    let mut out: BTreeMap<String, BTreeMap<u32, BTreeMap<u32, u64>>> = BTreeMap::new();
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (lock, contender) = (f[1].parse().unwrap(), f[2].parse().unwrap());
        *out.entry(f[0].to_string())
            .or_default()
            .entry(contender)
            .or_default()
            .entry(lock)
            .or_default() += 1;
    }
    out
}

#[test]
fn zipf_keys_spread_each_contender_over_the_locks_and_the_hottest_gets_the_most() {
    let out = dir("zipf");
    let args = [
        "-a",
        "queue,shadow",
        "--threads",
        "16",
        "--locks",
        "100",
        "--key-dist",
        "zipf:0.99",
        "--duration",
        "10s",
    ];
    let (code, text) = run_checked(&out, &args);
    assert_eq!(code, Some(0), "the checker found no overlap and no stale write: {text}");
    let summary = summary_of(&out);
    assert_eq!(summary["config"]["key_dist"], "zipf:0.99");
    let by_algorithm = grants_by_contender(&out);
    assert_eq!(by_algorithm.len(), 2, "{by_algorithm:?}");
    for (algorithm, contenders) in &by_algorithm {
        // Under `fixed` each of the 16 contenders would touch its own lock and no other.
        assert!(contenders.values().any(|locks| locks.len() >= 2), "{algorithm}: {contenders:?}");
        let busy = contenders.values().filter(|locks| locks.values().sum::<u64>() >= 10);
        assert!(busy.clone().count() > 0, "{algorithm}: {contenders:?}");
        assert!(busy.clone().all(|locks| locks.len() >= 2), "{algorithm}: {contenders:?}");
        let mut per_lock: BTreeMap<u32, u64> = BTreeMap::new();
        for locks in contenders.values() {
            for (lock, n) in locks {
                *per_lock.entry(*lock).or_default() += n;
            }
        }
        assert!(per_lock.len() > 16, "{algorithm}: more locks than contenders: {per_lock:?}");
        let hottest = per_lock.iter().max_by_key(|(_, n)| **n).map(|(lock, _)| *lock);
        assert_eq!(hottest, Some(0), "{algorithm}: lock 0 is rank 1: {per_lock:?}");
        let r =
            summary["results"].as_array().unwrap().iter().find(|r| r["algorithm"] == *algorithm);
        let r = r.unwrap();
        assert_eq!(r["safety"]["overlapping_holds"], 0, "{r}");
        assert_eq!(r["errors"]["lock_errors"], 0, "{r}");
        // A contender's report names no lock of its own: it had many.
        assert!(r["contenders"][0].get("lock").is_none(), "{}", r["contenders"][0]);
    }
}

#[test]
fn a_bad_key_distribution_is_a_usage_error_naming_the_flag() {
    for bad in ["zipf:0", "zipf:x", "pareto"] {
        let o = run(&["--key-dist", bad, "--threads", "2", "--duration", "1s"]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{bad}: {e}");
        assert!(e.contains("--key-dist") && e.contains(bad), "{bad}: {e}");
    }
}

/// The summary of the lock service, started by the harness, with 8 contenders on 4 locks
/// drawn uniformly, and `extra` flags.
fn service_run(name: &str, extra: &[&str]) -> serde_json::Value {
    let out = dir(name);
    let mut args = vec![
        "--backend",
        "service",
        "--spawn-service",
        "--threads",
        "8",
        "--locks",
        "4",
        "--key-dist",
        "uniform",
        "--duration",
        "2s",
        "--ttl",
        "4s",
    ];
    args.extend_from_slice(extra);
    let (code, text) = run_checked(&out, &args);
    assert_eq!(code, Some(0), "{text}");
    let locks: BTreeSet<u32> = grants_by_contender(&out)
        .values()
        .flat_map(|c| c.values().flat_map(|l| l.keys()))
        .copied()
        .collect();
    assert_eq!(locks.len(), 4, "every lock granted: {locks:?}");
    summary_of(&out)
}

#[test]
fn contenders_share_two_sessions_of_the_lock_service() {
    let summary = service_run("service-shared", &["--sessions", "2"]);
    assert_eq!(summary["config"]["sessions"], 2);
    let r = &summary["results"][0];
    assert!(r["grants"].as_u64().unwrap() > 10, "{r}");
    assert_eq!(r["errors"]["lock_errors"], 0, "{r}");
    assert_eq!(r["errors"]["release_errors"], 0, "{r}");
    assert_eq!(r["errors"]["leases_lost_while_holding"], 0, "{r}");
    assert_eq!(r["safety"]["overlapping_holds"], 0, "{r}");
    // The service's Open requests: two sessions for eight owners...
    assert_eq!(r["store"]["sessions_opened"], 2, "{}", r["store"]);
    // ...where a session each opens eight.
    let own = service_run("service-own", &[]);
    assert_eq!(own["results"][0]["store"]["sessions_opened"], 8, "{}", own["results"][0]["store"]);
    assert!(own["config"].get("sessions").is_none(), "{}", own["config"]);
}
