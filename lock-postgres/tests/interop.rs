//! Our lock and a `psql` session's `pg_advisory_lock` on the documented key exclude each other
//! both ways, and the key our client computes is the one the server's SQL expression does.

use crate::support;
use lock_core::{LockError, Locker};
use lock_postgres::{advisory_key, PgBackend, KEY_SQL};
use std::time::Duration;
use test_servers::{psql_call, PsqlSession};

/// `name` as a SQL string literal.
fn literal(name: &str) -> String {
    format!("'{}'", name.replace('\'', "''"))
}

/// The documented expression with `name` in place of `$1`.
fn key_sql(name: &str) -> String {
    KEY_SQL.replace("$1", &literal(name))
}

#[test]
fn the_client_computes_the_key_the_server_does() {
    let conn = support::shared().conn();
    for name in ["invoice-42", "", "ünïcødé 🔒", "it's", "x".repeat(200).as_str(), "a b\tc"] {
        let server = psql_call(&conn, &format!("SELECT {}", key_sql(name))).expect("psql");
        assert_eq!(server.trim(), advisory_key(name).to_string(), "key of {name:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_psql_session_and_our_lock_exclude_each_other_both_ways() {
    let server = support::shared();
    let backend = PgBackend::connect(
        &server.url(),
        support::config(Duration::from_secs(2), &support::unique_sequence("interop")),
    )
    .await
    .expect("connect");
    let ours = backend.locker("ours").unwrap();
    let name = "interop-both-ways";
    let key = key_sql(name);
    let mut psql =
        tokio::task::spawn_blocking(move || PsqlSession::open(&support::shared().conn()))
            .await
            .unwrap()
            .expect("psql session");

    // psql holds it: our soft lock is refused, our mandatory lock times out.
    let (out, mut psql) = tokio::task::spawn_blocking(move || {
        (psql.query(&format!("SELECT pg_advisory_lock({key})")), psql)
    })
    .await
    .unwrap();
    out.expect("psql takes the lock");
    assert!(ours.try_lock(name).await.expect("try_lock").is_none(), "granted while psql holds it");
    match ours.lock(name, Some(Duration::from_millis(700))).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected a timeout while psql holds the lock, got {other:?}"),
    }

    // psql lets go: our waiting lock is granted.
    let waiter = {
        let ours = ours.clone();
        tokio::spawn(async move { ours.lock(name, Some(Duration::from_secs(10))).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "granted while psql still holds the lock");
    let key = key_sql(name);
    let (out, mut psql) = tokio::task::spawn_blocking(move || {
        (psql.query(&format!("SELECT pg_advisory_unlock({key})")), psql)
    })
    .await
    .unwrap();
    assert_eq!(out.expect("psql unlocks").trim(), "t");
    let guard = waiter.await.unwrap().expect("granted once psql let go");

    // We hold it: psql's try is refused, its blocking lock waits until our release.
    let key = key_sql(name);
    let (out, mut psql) = tokio::task::spawn_blocking(move || {
        (psql.query(&format!("SELECT pg_try_advisory_lock({key})")), psql)
    })
    .await
    .unwrap();
    assert_eq!(out.expect("psql tries").trim(), "f", "psql got the lock we hold");
    let key = key_sql(name);
    let (sent, mut psql) = tokio::task::spawn_blocking(move || {
        let sent = psql.send(&format!("SELECT pg_advisory_lock({key})"));
        let waiting = psql.wait_output(Duration::from_millis(500));
        ((sent, waiting), psql)
    })
    .await
    .unwrap();
    sent.0.expect("send");
    assert_eq!(sent.1.expect("psql waits"), None, "psql's lock returned while we hold it");
    guard.release().await.expect("release");
    let (granted, psql) =
        tokio::task::spawn_blocking(move || (psql.wait_output(Duration::from_secs(5)), psql))
            .await
            .unwrap();
    assert!(granted.expect("psql's wait").is_some(), "psql not granted after our release");
    drop(psql);
}
