//! Store load on the server engines, the way a user runs them: the binary on a server it
//! starts itself (`--spawn-redis`, `--spawn-redlock`, `--spawn-zookeeper`, `--spawn-etcd`,
//! `--spawn-service`), and
//! the requests per grant its summary reports. Each lock crate reports the requests it sends;
//! a grant costs at least what its crate docs give for an uncontended one, so the counts must
//! reach that, filed under the servers and services the crate names. Needs `redis-server`,
//! ZooKeeper and etcd (`scripts/test.sh` installs them; the etcd test is in the build with the
//! `etcd` feature).

use std::path::PathBuf;

use crate::support;
use support::run_checked;

fn scratch(name: &str) -> PathBuf {
    support::scratch("bench-harness-store-load", name)
}

/// Runs `backend` with `spawn` (4 contenders on one lock for 2 s) and checks every algorithm's
/// store load: ops/grant a number, at least `least(algorithm)` requests per grant of the
/// window (the one grant whose release may fall after the window aside), and requests in every table of
/// `tables`. Returns the summary's results.
fn load_is_counted(
    backend: &str,
    spawn: &str,
    least: fn(&str) -> u64,
    tables: &[&str],
) -> Vec<serde_json::Value> {
    let dir = scratch(backend);
    let args = ["--backend", backend, spawn, "--threads", "4", "--duration", "2s", "--ttl", "4s"];
    let (code, text) = run_checked(&dir, &args);
    assert_eq!(code, Some(0), "{text}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let results = summary["results"].as_array().unwrap().clone();
    for r in &results {
        let (algorithm, store) = (r["algorithm"].as_str().unwrap(), &r["store"]);
        let grants = r["grants"].as_u64().unwrap();
        assert!(grants > 10, "{algorithm}: {r}");
        let per_grant = store["ops_per_grant"].as_f64().expect("ops/grant is counted");
        assert!(per_grant > 0.0, "{algorithm}: {store}");
        let total = store["ops"]["total"].as_u64().unwrap();
        // Requests are counted over the run's window, and so are the grants they are divided
        // by; `grants` also has those made as the contenders stop after it.
        let in_window = (total as f64 / per_grant).round() as u64;
        assert!(in_window <= grants, "{algorithm}: {in_window} grants in the window of {grants}");
        let least = least(algorithm);
        assert!(
            total >= least * (in_window - 1),
            "{algorithm}: {in_window} grants in the window, {least} each: {store}"
        );
        for table in tables {
            let n = store["per_table"][table]["total"].as_u64().unwrap_or(0);
            assert!(n > 0, "{algorithm}: no requests to {table}: {store}");
        }
        eprintln!("{backend} {algorithm}: {per_grant} requests per grant, {store}");
    }
    results
}

#[test]
fn redis_counts_its_commands() {
    let least = |a: &str| if a == "jedis" { 3 } else { 2 };
    let results = load_is_counted("redis", "--spawn-redis", least, &["redis"]);
    assert_eq!(results.len(), 2);
}

#[test]
fn redlock_counts_its_commands_on_every_master() {
    // 2 per master, 4 fenced: the crate docs' uncontended grants on 3 masters.
    let least = |a: &str| if a == "redlock-fenced" { 12 } else { 6 };
    let masters = ["master-0", "master-1", "master-2"];
    let results = load_is_counted("redlock", "--spawn-redlock=3", least, &masters);
    assert_eq!(results.len(), 2);
}

#[test]
fn zookeeper_counts_its_requests() {
    // Sessions are made before the window, and a busy session sends no ping, so the window's
    // requests are the znodes' (lock-zookeeper's own tests count the session's too): at least
    // a create, a list, the holder's watch on its own znode and a delete per grant.
    let results = load_is_counted("zookeeper", "--spawn-zookeeper", |_| 4, &["znodes"]);
    assert_eq!(results.len(), 1);
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_counts_its_rpcs() {
    // A Txn, the holder's Watch on its own key and a DeleteRange per grant, at least.
    let results = load_is_counted("etcd", "--spawn-etcd", |_| 3, &["kv", "lease", "watch"]);
    assert_eq!(results.len(), 1);
}

#[test]
fn the_lock_service_counts_its_requests() {
    // An Acquire and a Release per grant, plus each session's keep-alives.
    let results = load_is_counted("service", "--spawn-service", |_| 2, &["service"]);
    assert_eq!(results.len(), 1);
}
