//! The shared conformance suite, unwrapped, for Redlock with the fencing token derived on a
//! majority (`redlock-fenced`) on five real masters: TTL 2 s, extension every 1 s, retries
//! within 50 ms.

use crate::redlock_support;

use lock_redis::RedlockVariant;
use redlock_support::{config, RedlockFixture};
use std::time::Duration;

async fn make_fixture(seed: u64) -> RedlockFixture {
    let variant = RedlockVariant::Fenced(config(Duration::from_secs(2), seed));
    RedlockFixture::shared("redlock-fenced", variant)
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 2,
    contenders = 12
);
