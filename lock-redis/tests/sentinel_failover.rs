//! A backend through Redis Sentinel follows a failover: requests fail with
//! `LockError::Backend` while the master is gone, within the timeouts, and succeed on the
//! promoted replica once the Sentinels name it. Each test has a cluster of its own (a master,
//! 2 replicas, 3 Sentinels; Sentinel deems a master down after 2 s). Run with `--nocapture`
//! for the figures.

use crate::sentinel_support;

use lock_core::{LeaseState, Locker};
use lock_redis::TokenConfig;
use sentinel_support::{backend, blocking, eventually, get, role, until_ok, FAILOVER};
use std::time::{Duration, Instant};
use test_servers::RedisCluster;

/// The old master killed: the backend's connection breaks, its reconnects fail (the Sentinels
/// still name the dead master, then no one answers there), and once a replica is promoted the
/// same backend is granted there, on a connection of its own making.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_is_followed_to_the_promoted_replica() {
    let cluster = blocking(|| RedisCluster::sentinel(2, 3));
    let old = blocking(|| cluster.wait_for_leader(FAILOVER)).unwrap();
    let backend = backend(&cluster, "k:").await;
    let token = backend.token("a", TokenConfig::new(Duration::from_secs(5))).unwrap();
    token.lock("before", None).await.unwrap().release().await.unwrap();
    let made = backend.connections_made();

    let killed = Instant::now();
    blocking(|| cluster.kill(old));
    let (guard, failures, took) = until_ok(FAILOVER, || token.try_lock("after")).await;
    let guard = guard.expect("the lock is free on the new master");
    let new = blocking(|| cluster.wait_for_new_leader(old, FAILOVER)).unwrap();
    eprintln!(
        "killed master {old}: granted on member {new} {took:?} after the kill; {} requests failed \
         meanwhile, the slowest in {:?}; first: {}",
        failures.count,
        failures.slowest,
        failures.first.as_deref().unwrap_or("-")
    );
    let value = get(&cluster, new, "k:after");
    assert!(value.text().is_some_and(|v| v.starts_with("a:")), "granted on the new master");
    assert!(failures.count >= 1, "requests failed while no master answered");
    assert!(backend.connections_made() > made, "reconnected by itself");
    assert!(killed.elapsed() < FAILOVER);
    guard.release().await.unwrap();
    assert!(token.try_lock("after").await.unwrap().is_some(), "released on the new master");
}

/// The old master paused (`SIGSTOP`), failed over, then resumed. A backend that keeps asking
/// during the pause sees its requests time out (a `LockError::Backend` each, within the
/// response timeout), drops the connection as it does through Sentinel, and follows the
/// failover. A backend that was idle keeps its connection to the paused master: once that
/// master resumes, deposed but a master by its own reckoning until Sentinel demotes it, the
/// idle backend is granted there a lock the other holds on the new master (two holders: the
/// finding); Sentinel's demotion (`REPLICAOF` + `CLIENT KILL`) drops the connection, and the
/// idle backend ends on the new master, where its deposed grant is not: it is told `Lost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_master_is_left_for_the_promoted_replica() {
    let cluster = blocking(|| RedisCluster::sentinel(2, 3));
    let old = blocking(|| cluster.wait_for_leader(FAILOVER)).unwrap();
    let ttl = Duration::from_secs(10);
    let busy = backend(&cluster, "p:").await;
    let idle = backend(&cluster, "p:").await;
    let busy_lock = busy.token("busy", TokenConfig::new(ttl)).unwrap();
    let idle_lock = idle.token("idle", TokenConfig::new(ttl)).unwrap();
    busy_lock.lock("warm", None).await.unwrap().release().await.unwrap();
    idle_lock.lock("warm", None).await.unwrap().release().await.unwrap();

    let paused = Instant::now();
    blocking(|| cluster.pause(old)).unwrap();
    let (probe, failures, took) = until_ok(FAILOVER, || busy_lock.try_lock("probe")).await;
    let new = blocking(|| cluster.wait_for_new_leader(old, FAILOVER)).unwrap();
    eprintln!(
        "paused master {old}: the busy backend was granted on member {new} {took:?} after the \
         pause; {} requests failed meanwhile, the slowest in {:?}; first: {}",
        failures.count,
        failures.slowest,
        failures.first.as_deref().unwrap_or("-")
    );
    assert!(get(&cluster, new, "p:probe").text().is_some_and(|v| v.starts_with("busy:")));
    assert!(failures.count >= 1 && busy.connections_made() >= 2);
    probe.expect("free on the new master").release().await.unwrap();
    // Not "probe": the first of those requests timed out in the paused master's socket buffer,
    // and the master runs it when it resumes.
    let held = busy_lock.try_lock("p").await.unwrap().expect("free on the new master");

    blocking(|| cluster.resume(old)).unwrap();
    let resumed = Instant::now();
    let deposed = idle_lock.try_lock("p").await.expect("the deposed master answers");
    let deposed = deposed.expect("FINDING NOT SHOWN: the resumed, deposed master grants");
    assert_eq!(held.lease_state(), LeaseState::Held, "two holders");
    assert!(get(&cluster, old, "p:p").text().is_some_and(|v| v.starts_with("idle:")));
    // The request that timed out at the pause, run after all (wiped by the demotion's resync).
    let stale = get(&cluster, old, "p:probe");
    eprintln!("the busy backend's timed-out grant, run by the resumed master: {stale:?}");
    assert_eq!(idle.connections_made(), 1, "still on its first connection, to the old master");

    blocking(|| eventually(FAILOVER, "the old master demoted", || role(&cluster, old) == "slave"));
    let demoted = resumed.elapsed();
    let (again, failures, _) = until_ok(FAILOVER, || idle_lock.try_lock("q")).await;
    let again = again.expect("free on the new master");
    assert!(get(&cluster, new, "p:q").text().is_some_and(|v| v.starts_with("idle:")));
    assert!(idle.connections_made() >= 2, "reconnected after Sentinel's CLIENT KILL");
    let lost = tokio::time::timeout(ttl, deposed.lost()).await.expect("told within a TTL");
    eprintln!(
        "resumed master {old}: granted to the idle backend at once (two holders), demoted after \
         {demoted:?}; the idle backend then on member {new} after {} failed requests ({}), its \
         deposed grant told lost {:?} after the resume: {lost}; {:?} in all",
        failures.count,
        failures.first.as_deref().unwrap_or("-"),
        resumed.elapsed(),
        paused.elapsed()
    );
    assert!(lost.reason.contains("no longer holds"), "{lost}");
    assert_eq!(held.lease_state(), LeaseState::Held, "the new master's holder kept its lock");
    again.release().await.unwrap();
    held.release().await.unwrap();
}
