//! A CI-sized Jepsen-style run: six contenders take one lock in turn on a 3-node cluster
//! while a nemesis kills the leader every few seconds (and starts it again with its data a
//! second later); every grant is checked. No two holds may overlap, fencing tokens must rise
//! in grant order, no holder may be told its session was lost (the session TTL outlives a
//! failover), and the lock must keep being granted after every failover. The full-length run
//! is the harness's `safety` command (leader faults on `--spawn-service=3`).

use crate::support;

use lock_core::conformance::{assert_exclusive, Hold, HoldLog};
use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

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
    let log = HoldLog::default();
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicUsize::new(0));
    let lost = Arc::new(AtomicUsize::new(0));
    let config = ClientConfig { ttl: Duration::from_secs(5), ..ClientConfig::default() };
    let mut contenders = Vec::new();
    for i in 0..CONTENDERS {
        let client = ServiceClient::connect(&cluster.endpoints(), config.clone()).await.unwrap();
        let locker = client.locker(&format!("c{i}")).unwrap();
        let (log, stop, errors, lost) = (log.clone(), stop.clone(), errors.clone(), lost.clone());
        contenders.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let g = match locker.lock("jepsen", Some(Duration::from_secs(10))).await {
                    Ok(g) => g,
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::SeqCst) < 5 {
                            eprintln!("c{i}: lock: {e}");
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let granted = Instant::now();
                tokio::time::sleep(Duration::from_millis(2)).await;
                if g.is_lost() {
                    lost.fetch_add(1, Ordering::SeqCst);
                }
                log.push(Hold {
                    lock_id: "jepsen".into(),
                    owner: g.owner().to_string(),
                    granted,
                    released: Instant::now(),
                    token: g.token(),
                });
                if let Err(e) = g.release().await {
                    if errors.fetch_add(1, Ordering::SeqCst) < 5 {
                        eprintln!("c{i}: release: {e}");
                    }
                }
            }
        }));
    }
    let mut grants_before = Vec::new();
    for round in 0..ROUNDS {
        tokio::time::sleep(Duration::from_secs(2)).await;
        grants_before.push(log.holds().len());
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
    grants_before.push(log.holds().len());
    stop.store(true, Ordering::SeqCst);
    for c in contenders {
        tokio::time::timeout(Duration::from_secs(15), c).await.expect("contender stops").unwrap();
    }
    let holds = log.holds();
    let checked = assert_exclusive(&holds);
    eprintln!(
        "{checked} grants checked, {} lock errors, grants by phase {grants_before:?}",
        errors.load(Ordering::SeqCst)
    );
    assert_eq!(lost.load(Ordering::SeqCst), 0, "a holder lost its session in a failover");
    for w in grants_before.windows(2) {
        // A failover costs about a second of the two between kills; a lock that stalls
        // (a lost grant, a session nobody expires) makes a handful at most.
        assert!(w[1] >= w[0] + 20, "the lock stalled between two failovers: {grants_before:?}");
    }
}
