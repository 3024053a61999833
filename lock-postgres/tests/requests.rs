//! The requests a grant costs, counted by the backend's hook: two per grant on a pooled
//! connection (the acquire batch and the unlock), however long the wait, since the wait is the
//! server's; a new connection adds its startup and its settings.

use crate::support;
use lock_core::requests::RequestTally;
use lock_core::Locker;
use lock_postgres::{PgBackend, PgConfig};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_costs_two_requests_on_a_pooled_connection() {
    let tally = RequestTally::new();
    let config = PgConfig {
        requests: tally.hook(),
        ..support::config(Duration::from_secs(3), &support::unique_sequence("requests"))
    };
    let backend = PgBackend::connect(&support::shared().url(), config).await.expect("connect");
    // The probe connection: startup, settings, the sequence's check (and its creation).
    assert_eq!((tally.of("postgres", "connect"), tally.of("postgres", "SET")), (1, 1));
    tally.reset();
    let locker = backend.locker("counted").unwrap();
    let g = locker.lock("counted", None).await.expect("lock");
    g.release().await.expect("release");
    assert_eq!(tally.of("postgres", "connect"), 1, "the first grant opens a connection");
    tally.reset();
    for _ in 0..3 {
        let g = locker.lock("counted", Some(Duration::from_secs(2))).await.expect("lock");
        g.release().await.expect("release");
    }
    let counts = tally.counts();
    assert_eq!(tally.total(), 6, "three grants on the pooled connection: {counts:?}");
    assert_eq!((tally.of("postgres", "lock"), tally.of("postgres", "unlock")), (3, 3));
}
