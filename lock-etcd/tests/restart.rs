//! An etcd server that restarts under its clients: contenders go on once it is back, a holder
//! keeps its key (and is not told anything) across a restart shorter than its lease, and after
//! an outage longer than the lease the holder is told, the waiters fail with `LeaseLost`, the
//! lapsed leases are revoked once the server is back, and the same backends go on with new
//! leases.
//!
//! Each test has a server of its own (a restart would disturb the binary's other tests); the
//! server keeps its data directory across the restart, as a real one does. Run with
//! `--nocapture` to see how long the grants took to resume.

use crate::support;

use lock_core::{LeaseState, LockError, Locker};
use lock_etcd::EtcdBackend;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_servers::EtcdServer;

async fn backend(server: &EtcdServer, ttl: Duration) -> EtcdBackend {
    EtcdBackend::connect_with(&server.endpoint(), support::config("/restart", ttl))
        .await
        .expect("connect")
}

fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_resume_after_a_server_restart() {
    let ttl = Duration::from_secs(6);
    let mut server = EtcdServer::start();
    let grants = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let restarted = Arc::new(Mutex::new(None::<Instant>));
    let first_after = Arc::new(Mutex::new(None::<Instant>));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    let mut backends = Vec::new();
    for i in 0..4 {
        let backend = backend(&server, ttl).await;
        let locker = backend.locker(&format!("c{i}")).unwrap();
        backends.push(backend);
        let (grants, errors, restarted, first_after, stop) =
            (grants.clone(), errors.clone(), restarted.clone(), first_after.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match locker.lock("restart", Some(Duration::from_secs(20))).await {
                    Ok(guard) => {
                        grants.fetch_add(1, Ordering::SeqCst);
                        if restarted.lock().unwrap().is_some() {
                            first_after.lock().unwrap().get_or_insert_with(Instant::now);
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        if let Err(e) = guard.release().await {
                            errors.lock().unwrap().push(format!("{e:?}"));
                        }
                    }
                    Err(e) => {
                        errors.lock().unwrap().push(format!("{e:?}"));
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }
    let wait_grants = |n: u64| {
        let grants = grants.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(60), async {
                while grants.load(Ordering::SeqCst) < n {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .is_ok()
        }
    };
    assert!(wait_grants(20).await, "no grants before the restart");
    let stopped = Instant::now();
    blocking(|| server.restart_after(Duration::from_millis(500)));
    let answering = Instant::now();
    *restarted.lock().unwrap() = Some(answering);
    let before = grants.load(Ordering::SeqCst);
    let resumed = wait_grants(before + 20).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await.unwrap();
    }
    assert!(resumed, "grants did not resume within 60 s of the server answering again");
    let first = first_after.lock().unwrap().expect("a grant after the restart");
    let errors = errors.lock().unwrap();
    eprintln!(
        "etcd: {:?} outage; grants resumed {:?} after the server answered again ({:?} after it was stopped); \
         leases per backend {:?}; {} errors, the first: {:?}",
        answering - stopped,
        first.saturating_duration_since(answering),
        first - stopped,
        backends.iter().map(|b| b.sessions_made()).collect::<Vec<_>>(),
        errors.len(),
        errors.first()
    );
    for e in errors.iter() {
        assert!(
            e.starts_with("Backend") || e.starts_with("LeaseLost"),
            "an untyped or unexpected error: {e}"
        );
    }
    // The outage was far shorter than the lease: every backend kept its first lease.
    assert!(backends.iter().all(|b| b.sessions_made() == 1), "a lease was lost in a short restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_keeps_its_key_across_a_restart_shorter_than_its_lease() {
    let ttl = Duration::from_secs(6);
    let mut server = EtcdServer::start();
    let a = backend(&server, ttl).await;
    let b = backend(&server, ttl).await;
    let guard = a.locker("a").unwrap().lock("short", None).await.unwrap();
    blocking(|| server.restart_after(Duration::from_millis(500)));
    // The lease survived: a still holds the lock and was never told otherwise.
    let other = b.locker("b").unwrap();
    assert!(other.try_lock("short").await.expect("b's request after the restart").is_none());
    tokio::time::sleep(ttl).await;
    assert_eq!(guard.lease_state(), LeaseState::Held, "renewed across the restart and after it");
    assert!(other.try_lock("short").await.unwrap().is_none(), "still a's, a whole TTL later");
    guard.release().await.unwrap();
    other.try_lock("short").await.unwrap().expect("free once released").release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_longer_than_the_lease_the_holder_is_told_and_new_leases_take_over() {
    let ttl = Duration::from_secs(6);
    let mut server = EtcdServer::start();
    let a = backend(&server, ttl).await;
    let b = backend(&server, ttl).await;
    let guard = a.locker("a").unwrap().lock("long", None).await.unwrap();
    let waiter = b.locker("b").unwrap();
    let w = tokio::spawn(async move { waiter.lock("long", None).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    blocking(|| server.stop());
    let lost = tokio::time::timeout(ttl * 2, guard.lost()).await.expect("the holder is told");
    assert!(lost.reason.contains("keep-alive"), "{lost}");
    let err =
        tokio::time::timeout(ttl * 2, w).await.expect("the waiter fails").unwrap().unwrap_err();
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    blocking(|| server.start_again());
    // The restarted server gives the old leases a whole TTL again, so a's key would hold the
    // lock for a TTL after the server is back (and for ever, were it restarted within each
    // TTL): a's backend revokes the lease it gave up as soon as the server answers.
    let start = Instant::now();
    let g =
        b.locker("b").unwrap().lock("long", Some(ttl * 5)).await.expect("a new lease takes over");
    let took = start.elapsed();
    eprintln!("granted on a new lease {took:?} after the server came back");
    assert!(took < ttl, "a's lapsed lease was left to expire: granted after {took:?}");
    assert!(g.token() > guard.token());
    assert_eq!(b.sessions_made(), 2);
    g.release().await.unwrap();
    drop(guard);
}
