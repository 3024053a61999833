//! The shared conformance suite on a secured 3-node cluster: clients over TLS, each contender
//! authenticated as a user of its own, the nodes talking to each other over mutual TLS
//! (`support::SecuredCluster`). Otherwise as `tests/conformance.rs`: each contender reaches
//! every node through proxies of its own, which the suite cuts to crash or partition it.

mod support;

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceClient};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use support::SecuredCluster;
use test_servers::ContenderProxies;

/// The users the contenders log in as (the suite names its contenders freely, so each gets
/// one of these by the hash of its name: several may share one, as processes of one service
/// would).
const USERS: [&str; 4] = ["u0", "u1", "u2", "u3"];

fn cluster() -> &'static SecuredCluster {
    static CLUSTER: OnceLock<SecuredCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        std::thread::spawn(|| SecuredCluster::start(3, &USERS))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

struct SecuredFixture {
    secured: &'static SecuredCluster,
    proxies: ContenderProxies,
    ttl: Duration,
}

#[async_trait]
impl Fixture for SecuredFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let endpoints: Vec<String> =
            self.proxies.open(name).await.iter().map(ToString::to_string).collect();
        let user = USERS[name.bytes().map(usize::from).sum::<usize>() % USERS.len()];
        let config = ClientConfig {
            ttl: self.ttl,
            follow_leader_hints: false,
            credentials: Some(self.secured.credentials(user)),
            tls: Some(self.secured.tls()),
            ..ClientConfig::default()
        };
        let client = ServiceClient::connect(&endpoints, config)
            .await
            .expect("connect to the secured cluster through the contender's proxies");
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
        Duration::from_millis(1000)
    }
}

async fn make_fixture(_seed: u64) -> SecuredFixture {
    let secured = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let nodes = (0..secured.cluster.len()).map(|i| secured.cluster.client_addr(i)).collect();
    SecuredFixture { secured, proxies: ContenderProxies::new(nodes), ttl: Duration::from_secs(2) }
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
