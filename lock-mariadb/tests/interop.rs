//! Our lock and a `mariadb` client session's `GET_LOCK` on the same name exclude each other
//! both ways.

use crate::support;
use lock_core::{LockError, Locker};
use lock_mariadb::MariaBackend;
use std::time::Duration;
use test_servers::MariadbSession;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_session_and_our_lock_exclude_each_other_both_ways() {
    let server = support::shared();
    let backend = MariaBackend::connect(
        &server.url(),
        support::config(Duration::from_secs(2), &support::unique_table("interop")),
    )
    .await
    .expect("connect");
    let ours = backend.locker("ours").unwrap();
    let name = "interop-both-ways";
    let conn = server.conn();
    let session = tokio::task::spawn_blocking(move || MariadbSession::open(&conn));
    let mut session = session.await.unwrap().expect("mariadb session");

    // The session holds it: our soft lock is refused, our mandatory lock times out.
    let (out, mut session) = tokio::task::spawn_blocking(move || {
        (session.query(&format!("SELECT GET_LOCK('{name}', 0)")), session)
    })
    .await
    .unwrap();
    assert_eq!(out.expect("the session takes the lock"), "1");
    assert!(ours.try_lock(name).await.expect("try_lock").is_none(), "granted while held");
    match ours.lock(name, Some(Duration::from_millis(700))).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected a timeout while the session holds the lock, got {other:?}"),
    }

    // The session lets go: our waiting lock is granted.
    let waiter = {
        let ours = ours.clone();
        tokio::spawn(async move { ours.lock(name, Some(Duration::from_secs(10))).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "granted while the session still holds the lock");
    let (out, mut session) = tokio::task::spawn_blocking(move || {
        (session.query(&format!("SELECT RELEASE_LOCK('{name}')")), session)
    })
    .await
    .unwrap();
    assert_eq!(out.expect("the session releases"), "1");
    let guard = waiter.await.unwrap().expect("granted once the session let go");

    // We hold it: the session's try is refused, its blocking GET_LOCK waits for our release.
    let (out, mut session) = tokio::task::spawn_blocking(move || {
        (session.query(&format!("SELECT GET_LOCK('{name}', 0)")), session)
    })
    .await
    .unwrap();
    assert_eq!(out.expect("the session tries"), "0", "the session got the lock we hold");
    let (waiting, mut session) = tokio::task::spawn_blocking(move || {
        let sent = session.send(&format!("SELECT GET_LOCK('{name}', 10)"));
        (sent.and_then(|()| session.wait_output(Duration::from_millis(500))), session)
    })
    .await
    .unwrap();
    assert_eq!(waiting.expect("the session waits"), None, "granted while we hold the lock");
    guard.release().await.expect("release");
    let (granted, session) =
        tokio::task::spawn_blocking(move || (session.wait_output(Duration::from_secs(5)), session))
            .await
            .unwrap();
    assert_eq!(granted.expect("the session's wait").as_deref(), Some("1"));
    drop(session);
}
