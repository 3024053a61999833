//! A grant after a wait in `GET_LOCK` longer than the lease keeps its lease: the lease counts
//! from the token's draw, sent after the grant arrived, not from the request sent before the
//! wait. Counted from there, the lease would seem spent at once, and the first ping would be
//! given no time at all: a slow answer (here a link held for 0.5 s) would report the lease lost
//! while the server still holds the lock.

use crate::support;
use lock_core::{LeaseState, Locker};
use lock_mariadb::MariaBackend;
use std::time::Duration;
use test_servers::Proxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_a_wait_longer_than_the_lease_keeps_it() {
    let ttl = Duration::from_secs(1);
    let server = support::shared();
    let config = support::config(ttl, &support::unique_table("long_wait"));
    let direct = MariaBackend::connect(&server.url(), config.clone()).await.expect("connect");
    let proxy = Proxy::start(server.addr()).await;
    let via = MariaBackend::connect(&support::url_at(server, proxy.addr()), config)
        .await
        .expect("connect through the proxy");
    let (a, b) = (direct.locker("first").unwrap(), via.locker("second").unwrap());
    let held = a.lock("long-wait", None).await.expect("lock");
    let waiter = tokio::spawn(async move { b.lock("long-wait", None).await });
    tokio::time::sleep(ttl * 3 / 2).await;
    held.release().await.expect("release");
    let granted = waiter.await.unwrap().expect("granted after the wait");
    // Held across the first ping, a third of a lease after the grant.
    proxy.pause();
    tokio::time::sleep(ttl / 2).await;
    proxy.resume();
    tokio::time::sleep(ttl).await;
    let state = granted.lease_state();
    assert!(matches!(state, LeaseState::Held), "{state:?}");
    granted.release().await.expect("release");
}
