//! Bad input gets a clear error within seconds and leaves nothing held: a wrong password, a
//! server that is not there, settings that cannot work.

use crate::support;
use lock_core::{BackendErrorKind, LockError, Locker};
use lock_postgres::PgBackend;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_wrong_password_is_refused_at_once_and_says_so() {
    let server = support::shared();
    let url = support::url_at(server, server.addr());
    let password = url
        .split_once("://")
        .unwrap()
        .1
        .split_once('@')
        .unwrap()
        .0
        .split_once(':')
        .unwrap()
        .1
        .to_string();
    let wrong = url.replacen(&format!(":{password}@"), ":not-the-password@", 1);
    let start = Instant::now();
    let err = PgBackend::connect(&wrong, support::config(Duration::from_secs(2), "t_unused"))
        .await
        .expect_err("a wrong password must be refused");
    assert_eq!(err.backend_kind(), Some(BackendErrorKind::Refused), "{err}");
    assert!(err.to_string().contains("password"), "the error must name the cause: {err}");
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
}

#[tokio::test]
async fn a_server_that_is_not_there_is_unavailable_within_the_connect_timeout() {
    let server = support::shared();
    let closed = test_servers::ClosedPort::new();
    let url = support::url_at(server, closed.addr());
    let start = Instant::now();
    let err = PgBackend::connect(&url, support::config(Duration::from_secs(2), "t_unused"))
        .await
        .expect_err("nobody listens there");
    assert!(err.is_transient(), "a refused connection may pass: {err}");
    assert!(
        err.to_string().contains(&closed.addr().port().to_string()),
        "names the address: {err}"
    );
    assert!(start.elapsed() < Duration::from_secs(6), "took {:?}", start.elapsed());
}

#[tokio::test]
async fn impossible_settings_are_refused_before_connecting() {
    let server = support::shared();
    let url = server.url();
    for (ttl, seq) in
        [(Duration::from_millis(50), "t_ok"), (Duration::from_secs(2), "bad-name; DROP")]
    {
        let err = PgBackend::connect(&url, support::config(ttl, seq)).await.expect_err("refused");
        assert!(matches!(err, LockError::Config(_)), "{err}");
    }
    let err = PgBackend::connect(
        "postgres://nobody@127.0.0.1:notaport/db",
        support::config(Duration::from_secs(2), "t_ok"),
    )
    .await
    .expect_err("refused");
    assert!(matches!(err, LockError::Config(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_lock_table_is_a_final_error_naming_the_cause_and_holds_nothing() {
    let server = support::shared();
    let backend = PgBackend::connect(
        &server.url(),
        support::config(Duration::from_secs(2), &support::unique_sequence("full")),
    )
    .await
    .expect("connect");
    let locker = backend.locker("victim").unwrap();
    // A session that takes advisory locks until the shared lock table is full (its size is
    // max_locks_per_transaction × max_connections); the locks it got before the error stay
    // held, since session-level locks ignore the rollback.
    let hog = tokio::task::spawn_blocking(|| {
        let mut hog = test_servers::PsqlSession::open(&support::shared().conn()).expect("psql");
        let full =
            hog.query("SELECT count(pg_advisory_lock(g)) FROM generate_series(1, 2000000) g");
        (hog, full)
    })
    .await
    .unwrap();
    let (hog, full) = hog;
    let full = full.expect_err("two million locks cannot fit");
    assert!(full.to_string().contains("out of shared memory"), "{full}");
    let start = Instant::now();
    let err = locker.lock("no-room", Some(Duration::from_secs(5))).await.expect_err("no room");
    assert_eq!(err.backend_kind(), Some(BackendErrorKind::Protocol), "{err}");
    assert!(
        err.to_string().contains("out of shared memory"),
        "the error must name the cause: {err}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "took {:?}: a full table is final",
        start.elapsed()
    );
    drop(hog);
    // The hog's backend frees its locks as it exits, a moment after psql is killed.
    let freed = Instant::now();
    let g = loop {
        match locker.lock("no-room", Some(Duration::from_secs(2))).await {
            Ok(g) => break g,
            Err(e) if freed.elapsed() < Duration::from_secs(10) => {
                assert!(e.to_string().contains("out of shared memory"), "{e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the lock table did not free after the hog's session ended: {e}"),
        }
    };
    g.release().await.unwrap();
}
