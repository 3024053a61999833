//! The shared reader-writer lock and semaphore suites for [`ZkRwLocker`] and [`ZkSemaphore`]
//! against a real ZooKeeper server: session timeout 2 s (the "TTL"), each contender on its own
//! session through a proxy of its own (`support::ZkFixture`), so that the lost-lease
//! scenarios cut one contender off. Every scenario of both suites runs; none is skipped.
//!
//! [`ZkRwLocker`]: lock_zookeeper::ZkRwLocker
//! [`ZkSemaphore`]: lock_zookeeper::ZkSemaphore

use crate::support;

use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::ZkFixture {
    support::ZkFixture::new("rw-sem", Duration::from_secs(2)).await
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
