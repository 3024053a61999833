//! The shared conformance suite for etcd's Mutex against a real etcd server: lease TTL 2 s,
//! each contender on its own backend (client and lease) through a proxy that can cut it off.

use crate::support;

use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::EtcdFixture {
    support::EtcdFixture::new("conf", Duration::from_secs(2)).await
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
