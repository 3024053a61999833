//! The lock through PgBouncer. In session pooling a client keeps one server connection from
//! login to logout, so a session-level advisory lock behaves as on the server itself (given a
//! pool as large as the locks held and awaited at once: a client beyond it waits in
//! PgBouncer for a connection). In transaction pooling each statement may run on another
//! server connection: the lock is taken on one, and the pings and the unlock go to whichever
//! is free; an advisory lock is re-entrant within a session, so a second client whose
//! statement lands on the holder's server connection is granted the same lock again.
//! Session-level advisory locks are unsafe behind transaction pooling; the tests assert that.

use crate::support;
use lock_core::conformance::{check_exclusive, Hold, HoldLog};
use lock_core::Locker;
use lock_postgres::PgBackend;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use test_servers::{psql_call, PgBouncer, PoolMode, PostgresServer};
use tokio::time::Instant;

/// `contenders` lockers, each with its own backend through `url`, `rounds` grants each of one
/// lock (2 s to get it), held 1-5 ms; every hold, and how many `lock` calls failed.
async fn contend(
    url: &str,
    sequence: &str,
    contenders: usize,
    rounds: usize,
) -> (Vec<Hold>, usize) {
    let log = HoldLog::default();
    let failed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..contenders {
        let config = support::config(Duration::from_secs(3), sequence);
        let backend = PgBackend::connect(url, config).await.expect("connect through pgbouncer");
        let locker = backend.locker(&format!("pool{i}")).unwrap();
        let (log, failed) = (log.clone(), failed.clone());
        tasks.push(tokio::spawn(async move {
            for r in 0..rounds {
                match locker.lock("pooled", Some(Duration::from_secs(2))).await {
                    Ok(g) => {
                        let granted = Instant::now();
                        tokio::time::sleep(Duration::from_millis(1 + ((i + r) % 5) as u64)).await;
                        log.push(Hold {
                            lock_id: g.lock_id().to_string(),
                            owner: g.owner().to_string(),
                            granted,
                            released: Instant::now(),
                            token: g.token(),
                        });
                        let _ = g.release().await;
                    }
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender");
    }
    (log.holds(), failed.load(Ordering::Relaxed))
}

/// Pairs of holds of the lock that overlap in time.
fn overlaps(holds: &[Hold]) -> usize {
    let mut n = 0;
    for (i, a) in holds.iter().enumerate() {
        for b in &holds[i + 1..] {
            if a.granted < b.released && b.granted < a.released {
                n += 1;
            }
        }
    }
    n
}

/// Session pooling, a pool as large as the contenders' connections: exclusion and rising
/// tokens hold, and every lock call succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_pooling_keeps_exclusion() {
    let server = tokio::task::spawn_blocking(PostgresServer::start).await.unwrap();
    let bouncer = {
        let server = &server;
        std::thread::scope(|s| {
            s.spawn(|| PgBouncer::launch(server, PoolMode::Session, 20).unwrap()).join().unwrap()
        })
    };
    let (holds, failed) = contend(&bouncer.url(), "pool_session_fence", 4, 10).await;
    eprintln!(
        "session pooling: {} holds, {} failed calls, {} overlaps",
        holds.len(),
        failed,
        overlaps(&holds)
    );
    assert_eq!(failed, 0);
    assert_eq!(check_exclusive(&holds), Ok(40));
    drop(bouncer);
    tokio::task::spawn_blocking(move || drop(server)).await.unwrap();
}

/// UNSAFE, asserted as such: transaction pooling with 2 server connections for 8 contenders.
/// Grants land on whichever server connection is free, re-entrantly on the one that already
/// holds the lock, and unlocks on the other: holds overlap (or calls fail, or a server
/// connection keeps the lock after its holder released it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_pooling_breaks_session_advisory_locks() {
    let server = tokio::task::spawn_blocking(PostgresServer::start).await.unwrap();
    let bouncer = {
        let server = &server;
        std::thread::scope(|s| {
            s.spawn(|| PgBouncer::launch(server, PoolMode::Transaction, 2).unwrap()).join().unwrap()
        })
    };
    let started = std::time::Instant::now();
    let (holds, failed) = contend(&bouncer.url(), "pool_txn_fence", 8, 5).await;
    let n = overlaps(&holds);
    let check = check_exclusive(&holds);
    // What the server holds afterwards, every lock released by its holder.
    let su = server.superuser_conn();
    let left = tokio::task::spawn_blocking(move || {
        psql_call(&su, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted")
            .unwrap()
    })
    .await
    .unwrap();
    eprintln!(
        "transaction pooling, 8 contenders x 5 rounds over 2 server connections, {:?}: \
         {} holds, {} failed lock calls, {} overlapping pairs of holds, check: {:?}; \
         advisory locks still granted on the server after every release: {}",
        started.elapsed(),
        holds.len(),
        failed,
        n,
        check,
        left
    );
    assert!(
        n > 0 || failed > 0 || check.is_err() || left != "0",
        "transaction pooling went unnoticed"
    );
    assert!(n > 0, "re-entrant grants on a shared server connection overlap");
    drop(bouncer);
    tokio::task::spawn_blocking(move || drop(server)).await.unwrap();
}
