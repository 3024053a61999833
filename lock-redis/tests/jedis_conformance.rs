//! The shared conformance suite for the jedis-lock algorithm (seed 001) against a real
//! `redis-server`: expiry 2 s, renewal every 1 s, retry every 100 ms, one clock for all.

use crate::support;

use lock_redis::{JedisConfig, Variant};
use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::RedisFixture {
    let ttl = Duration::from_secs(2);
    support::RedisFixture::new("jedis", Variant::Jedis(JedisConfig::new(ttl)), ttl).await
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 16
);
