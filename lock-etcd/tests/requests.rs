//! The requests a backend reports ([`EtcdConfig::requests`]) against what the protocol says one
//! grant costs (the crate docs, "Requests per grant"), on a real etcd: each RPC once, nothing
//! left out, nothing counted twice.

mod support;

use lock_core::requests::RequestTally;
use lock_core::Locker;
use lock_etcd::{EtcdBackend, EtcdConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Long enough that no renewal falls inside a test's locking (one every TTL/3 = 10 s), so the
/// key-value requests can be counted exactly.
const TTL: Duration = Duration::from_secs(30);

/// A backend on the test binary's etcd whose requests go to a tally of its own, emptied once
/// the session's opening requests were counted: its lease's grant, and the first renewal the
/// keep-alive stream sends as it opens (from a task of its own, so it may come a moment after
/// connect returns).
async fn counted(root: &str) -> (EtcdBackend, Arc<RequestTally>) {
    let tally = RequestTally::new();
    let config = EtcdConfig { requests: tally.hook(), ..support::config(root, TTL) };
    let backend = EtcdBackend::connect_with(&support::shared().endpoint(), config)
        .await
        .expect("connect to the test etcd");
    assert_eq!(tally.of("lease", "LeaseGrant"), 1);
    wait_until(|| tally.of("lease", "LeaseKeepAlive") == 1, "the stream's first renewal").await;
    assert_eq!(tally.total(), 2, "{:?}", tally.counts());
    tally.reset();
    (backend, tally)
}

/// Waits until `cond` holds, or fails naming `what`.
async fn wait_until(cond: impl Fn() -> bool, what: &str) {
    let until = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < until, "{what}: not within 5 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The key-value and watch requests of `tally`, as (Txn, Range, Watch, DeleteRange).
fn lock_requests(tally: &RequestTally) -> (u64, u64, u64, u64) {
    (
        tally.of("kv", "Txn"),
        tally.of("kv", "Range"),
        tally.of("watch", "Watch"),
        tally.of("kv", "DeleteRange"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_grant_costs_a_txn_and_a_delete_and_a_session_its_lease_requests() {
    let root = support::unique_root("requests-alone");
    let (backend, tally) = counted(&root).await;
    let locker = backend.locker("solo").unwrap();
    for _ in 0..3 {
        locker.lock("k", None).await.unwrap().release().await.unwrap();
    }
    assert_eq!(lock_requests(&tally), (3, 0, 0, 3), "{:?}", tally.counts());
    assert_eq!(tally.total(), 6, "2 requests per uncontended grant: {:?}", tally.counts());

    // A soft lock refused costs the same two: its create, and its delete.
    let guard = locker.lock("k", None).await.unwrap();
    let (other, theirs) = counted(&root).await;
    assert!(other.locker("other").unwrap().try_lock("k").await.unwrap().is_none());
    assert_eq!(lock_requests(&theirs), (1, 0, 0, 1), "{:?}", theirs.counts());
    guard.release().await.unwrap();

    // Dropping the backend revokes its lease.
    tally.reset();
    drop(locker);
    drop(backend);
    wait_until(|| tally.of("lease", "LeaseRevoke") == 1, "the lease's revoke").await;
    assert_eq!(tally.total(), 1, "{:?}", tally.counts());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_waiting_costs_six_requests_however_long_the_queue() {
    let root = support::unique_root("requests-queue");
    // A holds; B and C queue behind it in that order.
    let (a, _) = counted(&root).await;
    let held = a.locker("a").unwrap().lock("k", None).await.unwrap();
    let mut waiters = Vec::new();
    for name in ["b", "c"] {
        let (backend, tally) = counted(&root).await;
        let locker = backend.locker(name).unwrap();
        let wait = tokio::spawn(async move { locker.lock("k", None).await });
        // Queued and watching its predecessor before the next one comes.
        wait_until(|| tally.of("watch", "Watch") == 1, "the waiter's watch").await;
        waiters.push((backend, tally, wait));
    }
    held.release().await.unwrap();
    for (_backend, tally, wait) in waiters {
        let guard = wait.await.unwrap().unwrap();
        guard.release().await.unwrap();
        // Txn; Range (the predecessor); Watch; Range (none left before ours); Range (our own
        // key, still there); DeleteRange: C waited behind two keys and paid what B paid.
        assert_eq!(lock_requests(&tally), (1, 3, 1, 1), "{:?}", tally.counts());
        assert_eq!(tally.total(), 6, "{:?}", tally.counts());
    }
}
