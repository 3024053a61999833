//! A grant after a wait in the server's queue longer than the lease keeps its lease: the
//! lease counts from a ping sent after the grant arrived, not from the request sent before the
//! wait. Counted from there, the lease would seem spent at once, and the first ping would be
//! given no time at all: a slow answer (here a link held for 0.5 s) would report the lease lost
//! while the server still holds the lock.

use crate::support;
use lock_core::{LeaseState, Locker};
use lock_postgres::PgBackend;
use std::time::Duration;
use test_servers::Proxy;

/// The first holder keeps the lock for 1.5 leases while the second waits through a proxy;
/// once the second is granted, its link is held for half a lease, across its first ping.
async fn waits_then_pings_slowly(transaction: bool) {
    let ttl = Duration::from_secs(1);
    let server = support::shared();
    let config = support::config(ttl, &support::unique_sequence("long_wait"));
    let direct = PgBackend::connect(&server.url(), config.clone()).await.expect("connect");
    let proxy = Proxy::start(server.addr()).await;
    let via = PgBackend::connect(&support::url_at(server, proxy.addr()), config)
        .await
        .expect("connect through the proxy");
    let (a, b) = (direct.locker("first").unwrap(), via.locker("second").unwrap());
    let name = if transaction { "long-wait-x" } else { "long-wait" };
    let held = a.lock(name, None).await.expect("lock");
    let waiter = tokio::spawn(async move {
        if transaction {
            b.transaction(name, None).await.map(|x| (None, Some(x)))
        } else {
            b.lock(name, None).await.map(|g| (Some(g), None))
        }
    });
    tokio::time::sleep(ttl * 3 / 2).await;
    held.release().await.expect("release");
    let (guard, xact) = waiter.await.unwrap().expect("granted after the wait");
    proxy.pause();
    tokio::time::sleep(ttl / 2).await;
    proxy.resume();
    tokio::time::sleep(ttl).await;
    if let Some(guard) = guard {
        let state = guard.lease_state();
        assert!(matches!(state, LeaseState::Held), "{state:?}");
        guard.release().await.expect("release");
    }
    if let Some(xact) = xact {
        assert!(!xact.is_lost(), "the transaction's lease was lost");
        xact.commit().await.expect("commit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_a_wait_longer_than_the_lease_keeps_it() {
    waits_then_pings_slowly(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_after_a_wait_longer_than_the_lease_keeps_it() {
    waits_then_pings_slowly(true).await;
}
