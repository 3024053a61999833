//! The shared reader-writer lock and semaphore suites for [`ZkRwLocker`] and [`ZkSemaphore`]
//! on a 3-server ZooKeeper ensemble: session timeout 2 s (the "TTL"), each contender on its own
//! session, with a connect string of all three servers, each through a proxy of its own
//! (`support::ensemble`, shared with the mutex's suite on the ensemble), so that the
//! lost-lease scenarios cut one contender off from the whole ensemble. Every scenario of both
//! suites runs; none is skipped.
//!
//! [`ZkRwLocker`]: lock_zookeeper::ZkRwLocker
//! [`ZkSemaphore`]: lock_zookeeper::ZkSemaphore

use crate::support::ensemble::EnsembleFixture;

use std::time::Duration;

async fn make_fixture(_seed: u64) -> EnsembleFixture {
    EnsembleFixture::new("ensemble-rw-sem", Duration::from_secs(2))
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
