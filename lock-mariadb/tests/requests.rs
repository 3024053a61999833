//! The requests a grant costs, counted by the backend's hook: three per grant on an idle
//! connection (`GET_LOCK`, the token's `UPDATE`, `RELEASE_LOCK`), however long the wait, since
//! the wait is the server's; and credentials that stand in for the URL's.

use crate::support;
use lock_core::requests::RequestTally;
use lock_core::secret::{Credentials, Secret};
use lock_core::Locker;
use lock_mariadb::{MariaBackend, MariaConfig};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_costs_three_requests_on_an_idle_connection() {
    let tally = RequestTally::new();
    let config = MariaConfig {
        requests: tally.hook(),
        ..support::config(Duration::from_secs(3), &support::unique_table("requests"))
    };
    let backend = MariaBackend::connect(&support::shared().url(), config).await.expect("connect");
    // The probe connection: connect, the lease's setting, the table's check and its row.
    assert_eq!(
        (
            tally.of("mariadb", "connect"),
            tally.of("mariadb", "SET"),
            tally.of("mariadb", "prepare")
        ),
        (1, 1, 2)
    );
    tally.reset();
    let locker = backend.locker("counted").unwrap();
    let g = locker.lock("counted", None).await.expect("lock");
    g.release().await.expect("release");
    assert_eq!(tally.of("mariadb", "connect"), 1, "the first grant opens a connection");
    tally.reset();
    for _ in 0..3 {
        let g = locker.lock("counted", Some(Duration::from_secs(2))).await.expect("lock");
        g.release().await.expect("release");
    }
    let counts = tally.counts();
    assert_eq!(tally.total(), 9, "three grants on the idle connection: {counts:?}");
    assert_eq!(
        (
            tally.of("mariadb", "GET_LOCK"),
            tally.of("mariadb", "UPDATE"),
            tally.of("mariadb", "RELEASE_LOCK")
        ),
        (3, 3, 3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_stand_in_for_the_urls_user_and_password() {
    let server = support::shared();
    let conn = server.conn();
    let wrong = test_servers::MariadbConn { password: "not-the-password".into(), ..conn.clone() };
    let table = support::unique_table("creds");
    let refused =
        MariaBackend::connect(&wrong.url(), support::config(Duration::from_secs(3), &table))
            .await
            .expect_err("a wrong password in the URL is refused");
    assert!(refused.to_string().contains("Access denied"), "{refused}");
    let config = MariaConfig {
        credentials: Some(Credentials::new(conn.user.clone(), Secret::new(conn.password.clone()))),
        ..support::config(Duration::from_secs(3), &table)
    };
    let backend =
        MariaBackend::connect(&wrong.url(), config).await.expect("the credentials log in");
    let g = backend.locker("creds").unwrap().lock("creds", None).await.expect("lock");
    assert!(g.token() > 0);
    g.release().await.expect("release");
}
