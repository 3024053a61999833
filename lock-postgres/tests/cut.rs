//! A holder whose connection is cut (both ends see it close) is told at once: the server ended
//! the session and freed the lock the moment it saw the close, and another client may already
//! hold it, so waiting for the next ping (a third of a lease) would leave two holders.

use crate::support;
use lock_core::Locker;
use lock_postgres::PgBackend;
use std::time::{Duration, Instant};
use test_servers::Proxy;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_connection_is_cut_is_told_at_once() {
    let ttl = Duration::from_secs(3);
    let server = support::shared();
    let config = support::config(ttl, &support::unique_sequence("cut"));
    let proxy = Proxy::start(server.addr()).await;
    let via = PgBackend::connect(&support::url_at(server, proxy.addr()), config.clone())
        .await
        .expect("connect through the proxy");
    let other = PgBackend::connect(&server.url(), config).await.expect("connect");
    let held = via.locker("cut-holder").unwrap().lock("cut", None).await.expect("lock");
    let waiter = {
        let other = other.locker("cut-waiter").unwrap();
        tokio::spawn(async move { other.lock("cut", Some(Duration::from_secs(10))).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let cut = Instant::now();
    proxy.cut();
    let lost = tokio::time::timeout(ttl / 3, held.lost()).await;
    let told = cut.elapsed();
    let second = waiter.await.unwrap().expect("the waiter is granted once the session ends");
    let granted = cut.elapsed();
    eprintln!("cut: holder told after {told:?}, waiter granted after {granted:?}");
    assert!(lost.is_ok(), "the holder was not told within a third of the lease");
    assert!(told < ttl / 6, "told {told:?} after the cut: at a ping, not at the close");
    assert!(second.token() > held.token());
    second.release().await.expect("release");
}
