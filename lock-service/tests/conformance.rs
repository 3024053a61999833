//! The shared conformance suite for the lock service on a 3-node cluster: session TTL 2 s,
//! each contender on its own client (and session).
//!
//! Every contender reaches every node through a proxy of its own, in front of the node's
//! client proxy, and dials only those (`follow_leader_hints: false`, so a follower's hint
//! cannot lead it around its proxies). The suite's crash and lost-lease scenarios thus cut
//! one contender off from the whole cluster, as a crash or a partition of that client would.
//! Every scenario of the suite runs; none is skipped.

mod support;

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use std::sync::Arc;
use std::time::Duration;
use test_servers::ContenderProxies;

struct ServiceFixture {
    proxies: ContenderProxies,
    ttl: Duration,
}

#[async_trait]
impl Fixture for ServiceFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let endpoints: Vec<String> =
            self.proxies.open(name).await.iter().map(ToString::to_string).collect();
        let config =
            ClientConfig { ttl: self.ttl, follow_leader_hints: false, ..ClientConfig::default() };
        let client = ServiceClient::connect(&endpoints, config)
            .await
            .expect("connect to the cluster through the contender's proxies");
        Arc::new(client.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // The leader checks its sessions every 20 ms and a grant is pushed in the commit that
        // frees the lock; the rest is margin for a loaded 2-core machine.
        Duration::from_millis(1000)
    }
}

async fn make_fixture(_seed: u64) -> ServiceFixture {
    let cluster = tokio::task::spawn_blocking(support::shared_cluster).await.expect("cluster");
    let nodes = (0..cluster.len()).map(|i| cluster.client_addr(i)).collect();
    ServiceFixture { proxies: ContenderProxies::new(nodes), ttl: Duration::from_secs(2) }
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
