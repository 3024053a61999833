//! A 3-server ZooKeeper ensemble behind its proxies: it forms, says who leads, and elects
//! another leader when the leader is killed, cut off or paused.

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
    assert_eq!(cluster.direct_links(), Vec::<(usize, usize)>::new(), "peers bypass the proxies");
    let leader = cluster.wait_for_leader(ELECTION).unwrap();
    assert!((0..3).all(|i| serves(&cluster, i)));

    cluster.kill(leader);
    let killed = Instant::now();
    let next = cluster.wait_for_new_leader(leader, ELECTION).unwrap();
    eprintln!("new leader {next} after {:?}", killed.elapsed());
    cluster.restart(leader).unwrap();
    assert_eq!(
        cluster.wait_for_leader(ELECTION).unwrap(),
        next,
        "a rejoining server deposes no one"
    );
    assert_eq!(cluster.direct_links(), Vec::<(usize, usize)>::new(), "a restarted one neither");
    eprintln!("ZooKeeper kill test took {:?}", started.elapsed());
}

#[test]
fn a_leader_cut_off_from_peers_and_clients_loses_the_lead() {
    let cluster = ZkCluster::start(3);
    let leader = cluster.wait_for_leader(ELECTION).unwrap();
    cluster.cut_off(leader);
    let next = cluster.wait_for_new_leader(leader, ELECTION).unwrap();
    assert!(!serves(&cluster, leader), "the cut-off server's clients are cut");
    assert!(serves(&cluster, next));
    cluster.heal(leader);
    assert!(cluster.wait_for_leader(ELECTION).is_ok());
}

#[test]
fn a_paused_leader_is_replaced() {
    let cluster = ZkCluster::start(3);
    let leader = cluster.wait_for_leader(ELECTION).unwrap();
    cluster.pause(leader).unwrap();
    let next = cluster.wait_for_new_leader(leader, ELECTION).unwrap();
    assert_ne!(next, leader);
    cluster.resume(leader).unwrap();
}
