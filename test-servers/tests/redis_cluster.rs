//! Redis behind its proxies: a master, 2 replicas and 3 Sentinels that promote a replica when
//! the master is killed or cut off; a replication link that can be held back alone; and 5
//! independent masters for Redlock.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};
use test_servers::{redis_call, RedisCluster, Reply};

/// Sentinel deems a master down after 2 s, then elects a Sentinel to fail it over: a few
/// seconds, with room for a second round.
const FAILOVER: Duration = Duration::from_secs(20);

fn call(addr: SocketAddr, args: &[&str]) -> Reply {
    redis_call(addr, args).unwrap_or_else(|e| panic!("{args:?} to {addr}: {e}"))
}

/// The first word of `ROLE` at member `i`'s own port ("master", "slave").
fn role(cluster: &RedisCluster, i: usize) -> String {
    match call(cluster.direct_addr(i), &["ROLE"]) {
        Reply::Array(a) => a[0].text().unwrap_or("").to_string(),
        other => panic!("ROLE: {other:?}"),
    }
}

/// Poll `what` every 50 ms until it holds, or panic after `timeout` naming `name`.
fn eventually(timeout: Duration, name: &str, what: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !what() {
        assert!(Instant::now() < deadline, "{name} did not happen within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sentinel_promotes_a_replica_when_the_master_is_killed() {
    let started = Instant::now();
    let cluster = RedisCluster::sentinel(2, 3);
    eprintln!("Redis master + 2 replicas + 3 Sentinels formed in {:?}", started.elapsed());
    assert_eq!(support::formed(&cluster, FAILOVER), 0, "member 0 starts as the master");
    assert_eq!(call(cluster.client_addr(0), &["SET", "k", "v"]), Reply::Status("OK".into()));

    let (master, next) = support::kill_leader(&cluster, FAILOVER);
    eventually(FAILOVER, "the promoted replica's ROLE master", || role(&cluster, next) == "master");
    assert_eq!(call(cluster.client_addr(next), &["GET", "k"]), Reply::Bulk("v".into()));

    // The old master comes back empty (no persistence), as a master, and is made a replica of
    // the new one only after Sentinel saw it claim the wrong role for 8 s (4 hello periods,
    // fixed in Sentinel): a window in which a client that reaches it can write to it.
    cluster.restart(master).unwrap();
    eventually(FAILOVER, "the old master turned replica", || role(&cluster, master) == "slave");
    assert_eq!(cluster.leader(), Some(next));
    eprintln!("Redis Sentinel kill test took {:?}", started.elapsed());
}

#[test]
fn sentinel_promotes_a_replica_when_the_master_is_cut_off() {
    let cluster = RedisCluster::sentinel(2, 3);
    let (master, next) = support::cut_off_leader(&cluster, FAILOVER);
    assert!(redis_call(cluster.client_addr(master), &["PING"]).is_err(), "its clients are cut");
    eventually(FAILOVER, "the promoted replica's ROLE master", || role(&cluster, next) == "master");
    // Cut off, the old master still believes it is one: the split brain Redis allows.
    assert_eq!(role(&cluster, master), "master");
    cluster.heal(master);
    eventually(FAILOVER, "the old master turned replica", || role(&cluster, master) == "slave");
}

#[test]
fn sentinel_promotes_a_replica_when_the_master_is_paused() {
    let cluster = RedisCluster::sentinel(2, 3);
    let (master, next) = support::pause_leader(&cluster, FAILOVER);
    eventually(FAILOVER, "the promoted replica's ROLE master", || role(&cluster, next) == "master");
    cluster.resume(master).unwrap();
    eventually(FAILOVER, "the old master turned replica", || role(&cluster, master) == "slave");
}

#[test]
fn a_held_replication_link_keeps_a_write_from_the_replica_alone() {
    let cluster = RedisCluster::sentinel(2, 3);
    let (master, held, free) = (0, 1, 2);
    cluster.hold_link(held, master);
    assert_eq!(call(cluster.client_addr(master), &["SET", "k", "v"]), Reply::Status("OK".into()));
    eventually(Duration::from_secs(5), "replication to the free replica", || {
        call(cluster.direct_addr(free), &["GET", "k"]) == Reply::Bulk("v".into())
    });
    // Absence cannot be polled for: the held replica gets 300 ms more than the free one took.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(call(cluster.direct_addr(held), &["GET", "k"]), Reply::Nil, "held back");
    cluster.release_link(held, master);
    eventually(Duration::from_secs(5), "the held write delivered", || {
        call(cluster.direct_addr(held), &["GET", "k"]) == Reply::Bulk("v".into())
    });
}

#[test]
fn redlock_masters_are_independent() {
    let started = Instant::now();
    let cluster = RedisCluster::masters(5, true);
    eprintln!("5 Redis masters started in {:?}", started.elapsed());
    assert_eq!(cluster.leader(), None, "independent masters have no leader");
    assert_eq!(cluster.direct_links(), Vec::<(usize, usize)>::new());
    assert!((0..5).all(|i| role(&cluster, i) == "master"));
    call(cluster.client_addr(0), &["SET", "k", "v"]);
    // Absence cannot be polled for: 200 ms is ages for a replication on loopback.
    std::thread::sleep(Duration::from_millis(200));
    assert!((1..5).all(|i| call(cluster.client_addr(i), &["GET", "k"]) == Reply::Nil));

    // One master down or cut off leaves the others serving.
    cluster.kill(1);
    cluster.cut_off(2);
    assert!(redis_call(cluster.client_addr(2), &["PING"]).is_err());
    assert!([0, 3, 4]
        .iter()
        .all(|&i| call(cluster.client_addr(i), &["PING"]) == Reply::Status("PONG".into())));

    // Persistent: a restart keeps the key; a restart without data forgets it (Redlock's
    // unsafe case).
    cluster.restart(0).unwrap();
    assert_eq!(call(cluster.client_addr(0), &["GET", "k"]), Reply::Bulk("v".into()));
    cluster.restart_without_data(0).unwrap();
    assert_eq!(call(cluster.client_addr(0), &["GET", "k"]), Reply::Nil);
}
