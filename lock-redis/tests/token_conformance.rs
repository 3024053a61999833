//! The shared conformance suite for the token lock (`SET NX PX` + Lua) against a real
//! `redis-server`: TTL 2 s, renewal every 1 s, retry every 50 ms.

use crate::support;

use lock_redis::{TokenConfig, Variant};
use std::time::Duration;

async fn make_fixture(_seed: u64) -> support::RedisFixture {
    let ttl = Duration::from_secs(2);
    support::RedisFixture::new("token", Variant::Token(TokenConfig::new(ttl)), ttl).await
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 16
);
