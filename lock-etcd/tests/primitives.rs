//! The shared conformance suites of the reader-writer lock (etcd's `recipe.RWMutex`), the
//! semaphore and the election (etcd's `concurrency.Election`) against a real etcd server:
//! lease TTL 2 s, each contender on its own backend (client and lease) through a proxy that
//! can cut it off, as the mutex's suite runs (`conformance.rs`). Every scenario runs; none is
//! skipped.

use crate::support;

use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::EtcdFixture {
    support::EtcdFixture::new("prim", Duration::from_secs(2)).await
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
