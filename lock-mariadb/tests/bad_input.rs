//! Bad input gets a clear error within seconds and leaves nothing held: a wrong password, a
//! server that is not there, settings that cannot work.

use crate::support;
use lock_core::{BackendErrorKind, LockError};
use lock_mariadb::MariaBackend;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_wrong_password_is_refused_at_once_and_says_so() {
    let server = support::shared();
    let password = &server.user().password;
    let wrong = server.url().replacen(&format!(":{password}@"), ":not-the-password@", 1);
    assert_ne!(wrong, server.url());
    let start = Instant::now();
    let err = MariaBackend::connect(&wrong, support::config(Duration::from_secs(2), "t_unused"))
        .await
        .expect_err("a wrong password must be refused");
    assert_eq!(err.backend_kind(), Some(BackendErrorKind::Refused), "{err}");
    assert!(err.to_string().contains("Access denied"), "the error must name the cause: {err}");
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
}

#[tokio::test]
async fn a_server_that_is_not_there_is_unavailable_within_the_connect_timeout() {
    let server = support::shared();
    let closed = test_servers::ClosedPort::new();
    let url = support::url_at(server, closed.addr());
    let start = Instant::now();
    let err = MariaBackend::connect(&url, support::config(Duration::from_secs(2), "t_unused"))
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
    for (ttl, seq) in [
        (Duration::from_millis(500), "t_ok"),
        (Duration::from_millis(1500), "t_ok"),
        (Duration::from_secs(2), "bad-name; DROP"),
    ] {
        let err =
            MariaBackend::connect(&url, support::config(ttl, seq)).await.expect_err("refused");
        assert!(matches!(err, LockError::Config(_)), "{err}");
    }
    let err = MariaBackend::connect(
        "mysql://nobody@127.0.0.1:notaport/db",
        support::config(Duration::from_secs(2), "t_ok"),
    )
    .await
    .expect_err("refused");
    assert!(matches!(err, LockError::Config(_)), "{err}");
}
