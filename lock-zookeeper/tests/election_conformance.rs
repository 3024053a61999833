//! The shared election suite for [`ZkElector`] against a real ZooKeeper server: session
//! timeout 2 s (the "TTL"), each contender on its own session through a proxy of its own
//! (`support::ZkFixture`), so that the lost-leadership scenario cuts one candidate off. Every
//! scenario runs; none is skipped.
//!
//! [`ZkElector`]: lock_zookeeper::ZkElector

use crate::support;

use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::ZkFixture {
    support::ZkFixture::new("election", Duration::from_secs(2)).await
}

lock_core::election_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 2,
    contenders = 8
);
