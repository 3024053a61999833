//! A 3-server ZooKeeper ensemble behind its proxies: it forms, says who leads, and elects
//! another leader when the leader is killed, cut off or paused.

use crate::support;

use std::time::{Duration, Instant};
use test_servers::{four_letter, ZkCluster};

/// A follower drops a silent leader after syncLimit (1 s), then elects: a few seconds.
const ELECTION: Duration = Duration::from_secs(20);

/// Whether member `i` serves clients through its client proxy (`srvr` names a mode).
fn serves(cluster: &ZkCluster, i: usize) -> bool {
    four_letter(cluster.client_addr(i).port(), "srvr").is_some_and(|s| s.contains("Mode: "))
}

#[test]
fn a_killed_leader_is_replaced_and_comes_back_as_a_follower() {
    let started = Instant::now();
    let cluster = ZkCluster::start(3);
    eprintln!("ZooKeeper ensemble of 3 formed in {:?}", started.elapsed());
    support::formed(&cluster, ELECTION);
    // Formed means every member serves, not only the leader and a majority that follows it.
    assert!((0..3).all(|i| serves(&cluster, i)), "a server of the formed ensemble serves no one");

    let (old, new) = support::kill_leader(&cluster, ELECTION);
    cluster.restart(old).unwrap();
    assert_eq!(
        cluster.wait_for_leader(ELECTION).unwrap(),
        new,
        "a rejoining server deposes no one"
    );
    assert_eq!(cluster.direct_links(), Vec::<(usize, usize)>::new(), "nor bypasses the proxies");
    eprintln!("ZooKeeper kill test took {:?}", started.elapsed());
}

#[test]
fn a_leader_cut_off_from_peers_and_clients_loses_the_lead() {
    let cluster = ZkCluster::start(3);
    let (old, new) = support::cut_off_leader(&cluster, ELECTION);
    assert!(!serves(&cluster, old), "the cut-off server's clients are cut");
    assert!(serves(&cluster, new));
    cluster.heal(old);
    assert!(cluster.wait_for_leader(ELECTION).is_ok());
}

#[test]
fn a_paused_leader_is_replaced() {
    let cluster = ZkCluster::start(3);
    let (old, _) = support::pause_leader(&cluster, ELECTION);
    cluster.resume(old).unwrap();
    assert!(cluster.wait_for_leader(ELECTION).is_ok());
}
