//! Membership changed online and a rolling restart, each under contenders taking one lock in
//! turn, every grant checked: 3 voters become 5, then 3 again with the founders gone and one
//! of them replaced under a new id after its disk "died"; and every node of a 3-node cluster
//! restarted in turn. No two holds may overlap, tokens rise in grant order, no holder loses
//! its session, and the lock keeps being granted through every change.

use crate::support;

use crate::support::load::Load;
use lock_service::client::{AdminError, ClientConfig, ServiceAdmin};
use lock_service::proto::ErrorKind;
use std::sync::Arc;
use std::time::Duration;
use test_servers::{ClusterOptions, LockService, ServiceCluster};
use tokio::time::Instant;

const CONTENDERS: usize = 4;
const LOCK: &str = "membership";

/// The contenders' client: a TTL that outlives a failover.
fn config() -> ClientConfig {
    ClientConfig {
        ttl: Duration::from_secs(5),
        request_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    }
}

/// The members once a change has committed; on failure, each node's last log lines first.
fn changed(
    cluster: &ServiceCluster,
    result: Result<Vec<lock_service::proto::Member>, AdminError>,
) -> Vec<lock_service::proto::Member> {
    result.unwrap_or_else(|e| {
        for i in 0..cluster.len() {
            let log = std::fs::read_to_string(cluster.dir(i).join("lock-server.log"));
            let log = log.unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            // A panic's message, and the last lines without the backtraces.
            for (at, _) in lines.iter().enumerate().filter(|(_, l)| l.contains("panicked at")) {
                eprintln!(
                    "--- node {i} panicked:\n{}",
                    lines[at..(at + 3).min(lines.len())].join("\n")
                );
            }
            let tail: Vec<&str> =
                lines.iter().rev().filter(|l| !l.starts_with(' ')).take(20).copied().collect();
            eprintln!("--- node {i}:\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
        }
        panic!("membership change: {e}")
    })
}

fn voters(members: &[lock_service::proto::Member]) -> Vec<u64> {
    members.iter().filter(|m| m.voter).map(|m| m.id).collect()
}

/// 3 → 5 → 3 voters while contenders take the lock: nodes 3 and 4 join, node 2's disk "dies"
/// and node 5 takes its place under a new id, and the founders 0 and 1 leave (the leader
/// among them). The contenders were given the founders' addresses only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_become_five_and_three_again_under_load() {
    let cluster: Arc<ServiceCluster> = Arc::new(
        tokio::task::spawn_blocking(|| {
            let engine = LockService::new(env!("CARGO_BIN_EXE_lock-server")).with_founders(3);
            ServiceCluster::launch(engine, &ClusterOptions::new(6))
        })
        .await
        .unwrap()
        .expect("a cluster of 3 founders and 3 nodes waiting to join"),
    );
    let founders: Vec<String> = cluster.endpoints()[..3].to_vec();
    let admin = ServiceAdmin::new(
        &cluster.endpoints(),
        ClientConfig { request_timeout: Duration::from_secs(90), ..ClientConfig::default() },
    )
    .unwrap();
    let load = Load::start(&founders, CONTENDERS, LOCK, config()).await;
    load.granting(50, "before any change").await;
    let add = |id: usize| {
        let (peer, client) =
            (cluster.peer_addr(id).to_string(), cluster.client_addr(id).to_string());
        let admin = admin.clone();
        async move { admin.add_member(id as u64, &peer, &client).await }
    };
    let started = Instant::now();
    assert_eq!(voters(&changed(&cluster, add(3).await)), [0, 1, 2, 3]);
    load.granting(50, "after node 3 joined").await;
    assert_eq!(voters(&changed(&cluster, add(4).await)), [0, 1, 2, 3, 4]);
    load.granting(50, "after node 4 joined").await;
    eprintln!("3 -> 5 voters in {:?}", started.elapsed());

    // Node 2 loses its disk: it is killed, and node 5 takes its place under a new id.
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || c.kill(2)).await.unwrap();
    assert_eq!(voters(&changed(&cluster, add(5).await)), [0, 1, 2, 3, 4, 5]);
    assert_eq!(voters(&changed(&cluster, admin.remove_member(2).await)), [0, 1, 3, 4, 5]);
    load.granting(50, "after node 2 was replaced by node 5").await;

    // The founders leave, the leader among them.
    let leader = admin.status().await.unwrap().leader;
    eprintln!("leader before the founders leave: {leader:?}");
    assert_eq!(voters(&changed(&cluster, admin.remove_member(0).await)), [1, 3, 4, 5]);
    assert_eq!(voters(&changed(&cluster, admin.remove_member(1).await)), [3, 4, 5]);
    let c = cluster.clone();
    tokio::task::spawn_blocking(move || {
        c.kill(0);
        c.kill(1);
    })
    .await
    .unwrap();
    load.granting(50, "after the founders left and were stopped").await;
    let status = admin.status().await.unwrap();
    assert!(matches!(status.leader, Some(3..=5)), "{status:?}");
    assert_eq!(voters(&status.members), [3, 4, 5]);
    let gap = load.finish().await;
    eprintln!("membership: longest gap between grants {gap:?}");
    // Sent again (an answer lost), a change does nothing more; a voter cannot move; the last
    // voter cannot go.
    assert_eq!(voters(&add(3).await.unwrap()), [3, 4, 5]);
    assert_eq!(voters(&admin.remove_member(0).await.unwrap()), [3, 4, 5]);
    let moved = admin.add_member(3, "127.0.0.1:1", "127.0.0.1:2").await.unwrap_err();
    assert!(matches!(moved, AdminError::Refused { kind: ErrorKind::BadRequest, .. }), "{moved}");
}

/// Every node of a 3-node cluster restarted in turn (with its data) while contenders take the
/// lock: no overlap, no session lost, and the lock granted again after each restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_under_load_loses_no_lock() {
    let cluster = Arc::new(tokio::task::spawn_blocking(|| support::cluster(3)).await.unwrap());
    let load = Load::start(&cluster.endpoints(), CONTENDERS, LOCK, config()).await;
    load.granting(50, "before the restarts").await;
    // Followers first, the leader last: what an operator does, so that one election is held.
    let mut left: Vec<usize> = (0..3).collect();
    while !left.is_empty() {
        let c = cluster.clone();
        let leader =
            tokio::task::spawn_blocking(move || c.wait_for_leader(Duration::from_secs(20)))
                .await
                .unwrap()
                .unwrap();
        let at = left.iter().position(|&n| n != leader).unwrap_or(0);
        let i = left.remove(at);
        let grants = load.grants();
        let c = cluster.clone();
        let restarted = Instant::now();
        tokio::task::spawn_blocking(move || {
            c.restart(i)?;
            c.wait_for_leader(Duration::from_secs(20))
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("restart node {i}: {e}"));
        load.granting(50, &format!("after node {i} restarted")).await;
        eprintln!(
            "node {i}{} restarted: {:?} to a leader and 50 grants, {} grants meanwhile, the \
             lock free for at most {:?}",
            if i == leader { " (the leader)" } else { "" },
            restarted.elapsed(),
            load.grants() - grants,
            load.longest_gap_since(restarted)
        );
    }
    let gap = load.finish().await;
    eprintln!("rolling restart: longest gap between grants {gap:?}");
}
