//! The shared conformance suite for plain Redlock on five real masters: TTL 2 s, extension
//! every 1 s, retries within 50 ms. Plain Redlock has no fencing token, so its guards are
//! numbered by the test process for the suite's token checks ([`redlock_support::Numbered`]);
//! every other check is Redlock's own. `redlock_fenced_conformance.rs` runs the fenced
//! variant unwrapped.

use crate::redlock_support;

use lock_redis::RedlockVariant;
use redlock_support::{config, RedlockFixture};
use std::time::Duration;

async fn make_fixture(seed: u64) -> RedlockFixture {
    let variant = RedlockVariant::Plain(config(Duration::from_secs(2), seed));
    RedlockFixture::shared("redlock", variant).numbered()
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 2,
    contenders = 12
);
