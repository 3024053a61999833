//! The shared conformance suite for the ZooKeeper recipe (seed 004) against a real ZooKeeper
//! server: session timeout 2 s (the "TTL"), each contender on its own session.

use crate::support;

use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::ZkFixture {
    support::ZkFixture::new("conf", Duration::from_secs(2)).await
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
