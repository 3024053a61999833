//! An election across the death of the service's leader node: the observer, whose connection
//! died with the node, observes again on the new leader and is told the next leader of the
//! election, elected on the new node when the old leader resigned there; its term is greater.

use crate::support;

use lock_core::Elector;
use lock_service::client::{ClientConfig, ServiceClient, ServiceElector};
use std::sync::Arc;
use std::time::Duration;
use test_servers::ServiceCluster;
use tokio::time::Instant;

async fn elector(cluster: &ServiceCluster, name: &str, ttl: Duration) -> ServiceElector {
    let config = ClientConfig { ttl, ..ClientConfig::default() };
    let client = ServiceClient::connect(&cluster.endpoints(), config).await.expect("connect");
    client.elector(name).expect("elector")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_follows_the_election_onto_the_new_leader_node() {
    let cluster =
        Arc::new(tokio::task::spawn_blocking(|| support::cluster(3)).await.expect("cluster"));
    let ttl = Duration::from_secs(6);
    let observer = elector(&cluster, "observer", ttl).await;
    let a = elector(&cluster, "a", ttl).await;
    let b = Arc::new(elector(&cluster, "b", ttl).await);
    let mut changes = observer.observe("el-failover").await.expect("observe");
    let first = tokio::time::timeout(Duration::from_secs(10), changes.changed()).await;
    assert_eq!(first.expect("observed in time").expect("observing"), None);
    let la = a.campaign("el-failover", b"a".to_vec(), None).await.expect("campaign");
    let seen = tokio::time::timeout(Duration::from_secs(10), changes.changed()).await;
    let seen = seen.expect("observed in time").expect("observing").expect("a leader");
    assert_eq!((seen.owner.as_str(), seen.term), ("a", la.term()));
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign("el-failover", b"b".to_vec(), None).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "two leaders at once");

    let node = {
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || c.wait_for_leader(Duration::from_secs(5)))
            .await
            .expect("cluster call")
            .expect("a leader node")
    };
    let killed = Instant::now();
    {
        let c = cluster.clone();
        tokio::task::spawn_blocking(move || {
            c.kill(node);
            c.wait_for_new_leader(node, Duration::from_secs(10))
        })
        .await
        .expect("cluster call")
        .expect("a new leader node");
    }
    let term = la.term();
    la.resign().await.expect("resign on the new leader node");
    let resigned = Instant::now();
    let lb = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiting candidate was never elected")
        .expect("candidate task")
        .expect("campaign");
    assert!(lb.term() > term, "term {} after {term}", lb.term());
    // The observer may also be told the vacancy; it must then be told b, never a again.
    let until = Instant::now() + Duration::from_secs(20);
    let told = loop {
        let left = until.saturating_duration_since(Instant::now());
        let change = tokio::time::timeout(left, changes.changed())
            .await
            .expect("the observer never learned the new leader")
            .expect("observing");
        match change {
            Some(l) if l.owner == "b" => break l,
            None => continue,
            Some(l) => panic!("told {l:?} after a's resignation"),
        }
    };
    assert_eq!(told.term, lb.term());
    eprintln!(
        "observer told the new leader {:?} after the resignation, {:?} after the node was killed",
        resigned.elapsed(),
        killed.elapsed()
    );
    lb.resign().await.expect("resign");
}
