//! The transaction-level lock: the guarded writes and the lock end together. A commit makes
//! the writes visible and frees the lock; a holder that goes silent past its lease loses the
//! lock and its uncommitted writes with it, so it cannot write after another was granted.

use crate::support;
use lock_core::conformance::Fixture;
use lock_core::LockError;
use std::time::{Duration, Instant};
use test_servers::psql_call;

fn rows(table: &str, id: &str) -> String {
    psql_call(&support::shared().conn(), &format!("SELECT count(*) FROM {table} WHERE id = '{id}'"))
        .expect("psql")
}

fn table(tag: &str) -> String {
    let name = support::unique_sequence(tag);
    psql_call(&support::shared().conn(), &format!("CREATE TABLE {name} (id text, token bigint)"))
        .expect("create the table");
    name
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_keeps_the_writes_and_frees_the_lock() {
    let fx = support::PgFixture::new(Duration::from_secs(2));
    let a = fx.backend("a").await.locker("a").unwrap();
    let b = fx.locker("b").await;
    let t = table("xact_commit");
    let guard = a.transaction("xact-commit", Some(Duration::from_secs(5))).await.expect("lock");
    guard
        .client()
        .execute(&format!("INSERT INTO {t} VALUES ('w', $1)"), &[&(guard.token() as i64)])
        .await
        .expect("write in the transaction");
    assert!(
        b.try_lock("xact-commit").await.unwrap().is_none(),
        "the session lock must be excluded"
    );
    assert_eq!(rows(&t, "w"), "0", "an uncommitted write is visible");
    guard.commit().await.expect("commit");
    assert_eq!(rows(&t, "w"), "1");
    let g = b.try_lock("xact-commit").await.unwrap().expect("free once committed");
    g.release().await.unwrap();
    // A rollback discards the writes and frees the lock too.
    let guard = a.transaction("xact-commit", None).await.expect("lock");
    guard.client().execute(&format!("INSERT INTO {t} VALUES ('r', 0)"), &[]).await.unwrap();
    guard.rollback().await.expect("rollback");
    assert_eq!(rows(&t, "r"), "0");
    assert!(b.try_lock("xact-commit").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_silent_past_its_lease_loses_the_lock_and_its_writes() {
    let ttl = Duration::from_secs(2);
    let fx = support::PgFixture::new(ttl);
    let a = fx.backend("a").await.locker("a").unwrap();
    let b = fx.locker("b").await;
    let t = table("xact_fenced");
    let guard = a.transaction("xact-fenced", None).await.expect("lock");
    guard.client().execute(&format!("INSERT INTO {t} VALUES ('late', 1)"), &[]).await.unwrap();
    let cut = Instant::now();
    fx.cut_off("a").await;
    let next = tokio::time::timeout(ttl * 3, b.lock("xact-fenced", None))
        .await
        .expect("the silent holder's lock must be freed by the server")
        .expect("lock");
    let freed = cut.elapsed();
    eprintln!(
        "silent transaction holder: lock granted to the next {freed:?} after the cut (TTL {ttl:?})"
    );
    assert!(freed >= ttl.mul_f64(0.9), "freed after {freed:?}, before the lease ran out");
    assert!(next.token() > guard.token());
    assert!(guard.is_lost(), "the holder must know before another is granted");
    match guard.commit().await {
        Err(LockError::LeaseLost { .. }) => {}
        other => panic!("a commit after the lease ended must fail as lost, got {other:?}"),
    }
    assert_eq!(rows(&t, "late"), "0", "the silent holder's write survived its lease");
    next.release().await.unwrap();
}
