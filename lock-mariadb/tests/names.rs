//! What a lock name is on MariaDB: compared byte for byte (case matters), at most 64
//! characters here, and the same name a `mariadb` client's `GET_LOCK` takes.

use crate::support;
use lock_core::{LockError, Locker};
use lock_mariadb::MariaBackend;
use std::time::Duration;

async fn backend(tag: &str) -> MariaBackend {
    let server = support::shared();
    MariaBackend::connect(
        &server.url(),
        support::config(Duration::from_secs(2), &support::unique_table(tag)),
    )
    .await
    .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_differ_only_in_case_are_different_locks() {
    let backend = backend("case").await;
    let a = backend.locker("a").unwrap();
    let b = backend.locker("b").unwrap();
    let held = a.lock("Invoice-7", Some(Duration::from_secs(5))).await.expect("lock");
    assert!(b.try_lock("Invoice-7").await.unwrap().is_none(), "the same name is excluded");
    // MariaDB compares GET_LOCK names byte for byte: another case is another lock.
    let other = b.try_lock("invoice-7").await.unwrap().expect("a different lock on MariaDB");
    assert!(b.try_lock("INVOICE-7").await.unwrap().is_some());
    drop(other);
    held.release().await.unwrap();
}

#[tokio::test]
async fn a_name_over_64_characters_is_refused_before_anything_is_sent() {
    let backend = backend("long").await;
    let locker = backend.locker("a").unwrap();
    let long = "x".repeat(65);
    for result in [
        locker.lock(&long, Some(Duration::from_secs(1))).await.map(drop),
        locker.try_lock(&long).await.map(drop),
    ] {
        match result {
            Err(LockError::InvalidId { reason, .. }) => {
                assert!(reason.contains("64"), "{reason}")
            }
            other => panic!("expected InvalidId, got {other:?}"),
        }
    }
    // 64 characters of up to 3 bytes each: the longest names the server takes.
    let longest = "é".repeat(64);
    let guard = locker.try_lock(&longest).await.unwrap().expect("a 64-character name");
    guard.release().await.unwrap();
    let emoji = "🔒".repeat(48);
    let guard = locker.try_lock(&emoji).await.unwrap().expect("a 192-byte name");
    guard.release().await.unwrap();
}

#[tokio::test]
async fn tokens_rise_across_locks() {
    let backend = backend("token").await;
    let locker = backend.locker("a").unwrap();
    let first = locker.try_lock("t1").await.unwrap().unwrap();
    let second = locker.try_lock("t2").await.unwrap().unwrap();
    assert!(second.token() > first.token(), "{} then {}", first.token(), second.token());
    let last = second.token();
    first.release().await.unwrap();
    second.release().await.unwrap();
    let third = locker.lock("t1", None).await.unwrap();
    assert!(third.token() > last);
    third.release().await.unwrap();
}
