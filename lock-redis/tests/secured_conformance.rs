//! The shared conformance suites for the token lock, the reader-writer lock and the semaphore
//! on a secured `redis-server` (default user off), every contender connecting as an ACL user
//! allowed exactly the commands the locks need (`lock_redis::ACL_COMMANDS`) on its key prefix:
//! TTL 2 s, renewal every 1 s, retry every 50 ms, tracking on (the default).

use crate::support;

use lock_redis::{TokenConfig, Variant};
use std::time::Duration;
use support::{secured_redis, Secured, SECURE_TAG};

async fn make_fixture(_seed: u64) -> support::RedisFixture {
    let ttl = Duration::from_secs(2);
    let secured = tokio::task::spawn_blocking(secured_redis).await.expect("a secured server");
    let credentials = Some(Secured::credentials(&secured.locker));
    let variant = Variant::Token(TokenConfig::new(ttl));
    support::RedisFixture::on(secured.server.addr(), credentials, SECURE_TAG, variant, ttl)
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 16
);

lock_core::rwlock_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 1,
    contenders = 12
);

lock_core::semaphore_conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 1,
    contenders = 12
);
