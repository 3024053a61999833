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
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_servers::Proxy;

struct ServiceFixture {
    nodes: Vec<SocketAddr>,
    ttl: Duration,
    proxies: Mutex<HashMap<String, Vec<Proxy>>>,
}

#[async_trait]
impl Fixture for ServiceFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let mut proxies = Vec::new();
        for node in &self.nodes {
            proxies.push(Proxy::start(*node).await);
        }
        let endpoints: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
        let config =
            ClientConfig { ttl: self.ttl, follow_leader_hints: false, ..ClientConfig::default() };
        let client = ServiceClient::connect(&endpoints, config)
            .await
            .expect("connect to the cluster through the contender's proxies");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxies) {
            old.iter().for_each(Proxy::cut);
        }
        Arc::new(client.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        if let Some(proxies) = self.proxies.lock().unwrap().get(name) {
            proxies.iter().for_each(Proxy::cut);
        }
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
    ServiceFixture {
        nodes: (0..cluster.len()).map(|i| cluster.client_addr(i)).collect(),
        ttl: Duration::from_secs(2),
        proxies: Mutex::default(),
    }
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
