//! A CI-sized Jepsen-style run: six contenders take one lock in turn on a 3-node cluster
//! while a nemesis kills the leader every few seconds (and starts it again with its data a
//! second later); every grant is checked. No two holds may overlap, fencing tokens must rise
//! in grant order, no holder may be told its session was lost (the session TTL outlives a
//! failover), and the lock must keep being granted after every failover. The full-length run
//! is the harness's `safety` command (leader faults on `--spawn-service=3`).

use crate::support;

use crate::support::load::Load;
use lock_service::client::ClientConfig;
use std::sync::Arc;
use std::time::Duration;

const CONTENDERS: usize = 6;
const ROUNDS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_grant_is_exclusive_while_the_leader_is_killed_again_and_again() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cluster =
        Arc::new(tokio::task::spawn_blocking(|| support::cluster(3)).await.expect("cluster"));
    let config = ClientConfig { ttl: Duration::from_secs(5), ..ClientConfig::default() };
    let load = Load::start(&cluster.endpoints(), CONTENDERS, "jepsen", config).await;
    let mut grants_before = Vec::new();
    for round in 0..ROUNDS {
        tokio::time::sleep(Duration::from_secs(2)).await;
        grants_before.push(load.grants());
        let c = cluster.clone();
        let leader = tokio::task::spawn_blocking(move || {
            let leader = c.wait_for_leader(Duration::from_secs(10))?;
            c.kill(leader);
            std::thread::sleep(Duration::from_secs(1));
            c.restart(leader)?;
            Ok::<_, String>(leader)
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        eprintln!("round {round}: killed and restarted leader {leader}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    grants_before.push(load.grants());
    load.finish().await;
    eprintln!("grants by phase {grants_before:?}");
    for w in grants_before.windows(2) {
        // A failover costs about a second of the two between kills; a lock that stalls
        // (a lost grant, a session nobody expires) makes a handful at most.
        assert!(w[1] >= w[0] + 20, "the lock stalled between two failovers: {grants_before:?}");
    }
}
