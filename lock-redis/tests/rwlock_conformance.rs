//! The shared reader-writer suite for the Redis reader-writer lock against a real
//! `redis-server`: TTL 2 s, renewal every 1 s, polls every 50 ms, each contender on its own
//! backend through a proxy of its own. The FIFO lock (the default) at the top; the
//! readers-first lock (Redisson's policy) in `readers_first::`, where the suite checks that a
//! later reader does pass a waiting writer.

use crate::support;

use lock_core::WriterPolicy;
use lock_redis::{TokenConfig, Variant};
use std::time::Duration;

async fn make_fixture(policy: WriterPolicy) -> support::RedisFixture {
    let ttl = Duration::from_secs(2);
    // The fixture's mutex variant is not used here.
    let variant = Variant::Token(TokenConfig::new(ttl));
    support::RedisFixture::new("rw", variant, ttl).await.with_writer_policy(policy)
}

lock_core::rwlock_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |_seed| async move { make_fixture(WriterPolicy::Fifo).await },
    seeds = 2,
    contenders = 12
);

/// The readers-first lock through the same suite.
mod readers_first {
    use super::*;

    lock_core::rwlock_conformance_suite!(
        lock_core::conformance::Mode::Wall,
        |_seed| async move { make_fixture(WriterPolicy::ReadersFirst).await },
        seeds = 2,
        contenders = 12
    );
}
