//! A server restart ends every session and every `GET_LOCK` lock with it: the holder is told,
//! and the next holder's fencing token is still above the last one (the token's row is
//! committed, its log flushed, before the token is answered).

use crate::support;
use lock_core::Locker;
use lock_mariadb::MariaBackend;
use std::time::Duration;
use test_servers::MariadbServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_tells_the_holder_and_tokens_keep_rising() {
    let mut server = tokio::task::spawn_blocking(MariadbServer::start).await.unwrap();
    let ttl = Duration::from_secs(2);
    let config = support::config(ttl, "restart_fence");
    let backend = MariaBackend::connect(&server.url(), config).await.expect("connect");
    let a = backend.locker("a").unwrap();
    let b = backend.locker("b").unwrap();
    let mut last = 0;
    for _ in 0..5 {
        let g = a.try_lock("warm").await.unwrap().unwrap();
        last = g.token();
        g.release().await.unwrap();
    }
    let held = a.lock("restarted", None).await.expect("lock");
    assert!(held.token() > last);
    let server = tokio::task::spawn_blocking(move || {
        server.stop();
        server
    })
    .await
    .unwrap();
    let lost = tokio::time::timeout(ttl + Duration::from_secs(1), held.lost())
        .await
        .expect("the holder must be told within a lease that its session ended");
    eprintln!("holder told: {lost}");
    let server = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.start_again();
        server
    })
    .await
    .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(15), b.lock("restarted", None))
        .await
        .expect("the lock must be free after the restart")
        .expect("lock");
    assert!(next.token() > held.token(), "token {} after {}", next.token(), held.token());
    next.release().await.expect("release");
    drop(held);
    drop(server);
}
