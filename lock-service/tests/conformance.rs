//! The shared conformance suites (the mutex, the reader-writer lock, the semaphore, the
//! election) for the lock service on a 3-node cluster: session TTL 2 s, each contender on
//! its own client (and session).
//!
//! Every contender reaches every node through a proxy of its own, in front of the node's
//! client proxy, and dials only those (`support::ServiceFixture`). The suite's crash and
//! lost-lease scenarios thus cut one contender off from the whole cluster, as a crash or a
//! partition of that client would. Every scenario of the suite runs; none is skipped.

use crate::support;

use std::time::Duration;
use support::ServiceFixture;
use test_servers::ContenderProxies;

async fn make_fixture(_seed: u64) -> ServiceFixture {
    let cluster = tokio::task::spawn_blocking(support::shared_cluster).await.expect("cluster");
    let nodes = (0..cluster.len()).map(|i| cluster.client_addr(i)).collect();
    ServiceFixture {
        proxies: ContenderProxies::new(nodes),
        ttl: Duration::from_secs(2),
        secured: None,
    }
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);

lock_core::rwlock_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 2,
    contenders = 12
);

lock_core::semaphore_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 2,
    contenders = 12
);

lock_core::election_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 2,
    contenders = 12
);
