//! The failover scenarios every clustered engine's tests run, written once against
//! [`Cluster`]: each engine's test file adds only what it checks of its own.

use std::time::{Duration, Instant};
use test_servers::{Cluster, ClusterEngine};

/// The cluster's leader, after checking that no two members talk past the proxies (a link
/// that bypassed them could not be cut).
pub fn formed<E: ClusterEngine>(cluster: &Cluster<E>, timeout: Duration) -> usize {
    assert_eq!(cluster.direct_links(), Vec::<(usize, usize)>::new(), "members bypass the proxies");
    cluster.wait_for_leader(timeout).unwrap()
}

/// Kill the leader and wait for another: `(old, new)`.
pub fn kill_leader<E: ClusterEngine>(cluster: &Cluster<E>, timeout: Duration) -> (usize, usize) {
    fault_leader(cluster, timeout, "kill", |old| cluster.kill(old))
}

/// Cut the leader off from its peers and clients and wait for another: `(old, new)`.
pub fn cut_off_leader<E: ClusterEngine>(cluster: &Cluster<E>, timeout: Duration) -> (usize, usize) {
    fault_leader(cluster, timeout, "cut-off", |old| cluster.cut_off(old))
}

/// Pause the leader (`SIGSTOP`) and wait for another: `(old, new)`; the old one stays paused.
pub fn pause_leader<E: ClusterEngine>(cluster: &Cluster<E>, timeout: Duration) -> (usize, usize) {
    fault_leader(cluster, timeout, "pause", |old| cluster.pause(old).unwrap())
}

fn fault_leader<E: ClusterEngine>(
    cluster: &Cluster<E>,
    timeout: Duration,
    fault: &str,
    inflict: impl FnOnce(usize),
) -> (usize, usize) {
    let old = cluster.wait_for_leader(timeout).unwrap();
    let at = Instant::now();
    inflict(old);
    let new = cluster.wait_for_new_leader(old, timeout).unwrap();
    eprintln!("{} {fault} of leader {old}: member {new} leads after {:?}", E::KIND, at.elapsed());
    (old, new)
}
