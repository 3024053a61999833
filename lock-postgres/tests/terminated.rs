//! An administrator ends the holder's backend (`pg_terminate_backend`): the session and its
//! advisory lock are gone at once, another locker gets the lock at once with a higher token,
//! and the holder is told its lease is lost at its next ping (within a third of the TTL).

use crate::support;
use lock_core::{LeaseState, Locker};
use lock_postgres::PgBackend;
use std::time::{Duration, Instant};
use test_servers::psql_call;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_backend_frees_the_lock_at_once_and_the_holder_is_told() {
    let server = support::shared();
    let ttl = Duration::from_secs(3);
    let config = support::config(ttl, &support::unique_sequence("term"));
    let backend = PgBackend::connect(&server.url(), config).await.expect("connect");
    let owner = format!("term-holder-{}", std::process::id());
    let a = backend.locker(&owner).unwrap();
    let b = backend.locker("term-other").unwrap();
    let lock = format!("terminated-{}", std::process::id());
    let held = a.lock(&lock, None).await.expect("lock");
    assert!(b.try_lock(&lock).await.expect("try_lock").is_none(), "held");

    // The holder's backend: the session with the owner's application_name holding an
    // advisory lock.
    let su = server.superuser_conn();
    let find = format!(
        "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid) \
         WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = '{owner}'"
    );
    let pid = tokio::task::spawn_blocking({
        let su = su.clone();
        move || psql_call(&su, &find).expect("find the holder's backend")
    })
    .await
    .unwrap();
    assert!(!pid.is_empty() && !pid.contains('\n'), "one backend holds it: {pid:?}");

    let terminated = Instant::now();
    let sql = format!("SELECT pg_terminate_backend({pid})");
    let answer = tokio::task::spawn_blocking(move || psql_call(&su, &sql).unwrap()).await.unwrap();
    assert_eq!(answer, "t");

    // The lock is free as soon as the backend has exited.
    let next = loop {
        if let Some(g) = b.try_lock(&lock).await.expect("try_lock") {
            break g;
        }
        assert!(terminated.elapsed() < Duration::from_secs(2), "the lock stayed held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let free_after = terminated.elapsed();
    assert!(next.token() > held.token(), "token {} after {}", next.token(), held.token());

    let lost = tokio::time::timeout(ttl, held.lost())
        .await
        .expect("the holder must be told within a TTL that its session ended");
    let told_after = terminated.elapsed();
    eprintln!(
        "terminated backend {pid}: lock free again after {free_after:?} (token {} -> {}), \
         holder told after {told_after:?}: {lost}",
        held.token(),
        next.token()
    );
    assert!(told_after <= ttl / 3 + Duration::from_millis(1500), "told after {told_after:?}");
    assert!(matches!(held.lease_state(), LeaseState::Lost(_)));
    next.release().await.expect("release");
    held.release().await.expect("release of a lost lock");
}
