//! The shared conformance suite on a secured 3-node cluster: clients over TLS, each contender
//! authenticated as one of four users, the nodes talking to each other over mutual TLS
//! (`support::SecuredCluster`). Otherwise as `tests/conformance.rs`: each contender reaches
//! every node through proxies of its own, which the suite cuts to crash or partition it.

use crate::support;

use std::sync::OnceLock;
use std::time::Duration;
use support::{SecuredCluster, ServiceFixture};
use test_servers::ContenderProxies;

/// The users the contenders log in as.
const USERS: &[&str] = &["u0", "u1", "u2", "u3"];

fn cluster() -> &'static SecuredCluster {
    static CLUSTER: OnceLock<SecuredCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        std::thread::spawn(|| SecuredCluster::start(3, USERS))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

async fn make_fixture(_seed: u64) -> ServiceFixture {
    let secured = tokio::task::spawn_blocking(cluster).await.expect("cluster");
    let nodes = (0..secured.cluster.len()).map(|i| secured.cluster.client_addr(i)).collect();
    ServiceFixture {
        proxies: ContenderProxies::new(nodes),
        ttl: Duration::from_secs(2),
        secured: Some((secured, USERS)),
    }
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
