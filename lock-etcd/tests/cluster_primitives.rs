//! The shared conformance suites of the reader-writer lock, the semaphore and the election on
//! a 3-member etcd cluster: lease TTL 2 s, each contender on its own backend whose client is
//! given the endpoints of all three members, each through a proxy of the contender's own, so
//! that the suites' lost-lease scenarios cut one contender off from the whole cluster (as the
//! mutex's cluster suite does, `cluster_conformance.rs`). Every scenario runs; none is
//! skipped.

use crate::support;

use std::time::Duration;
use support::ClusterFixture;

async fn make_fixture(_seed: u64) -> ClusterFixture {
    ClusterFixture::new("cluster-prim", Duration::from_secs(2))
}

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
