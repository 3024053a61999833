//! The shared semaphore suite for the Redis semaphore against a real `redis-server`: TTL 2 s,
//! renewal every 1 s, polls every 50 ms, each contender on its own backend through a proxy of
//! its own.

use crate::support;

use lock_redis::{TokenConfig, Variant};
use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::RedisFixture {
    let ttl = Duration::from_secs(2);
    // The fixture's mutex variant is not used here.
    support::RedisFixture::new("sem", Variant::Token(TokenConfig::new(ttl)), ttl).await
}

lock_core::semaphore_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 2,
    contenders = 12
);
