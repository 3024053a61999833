//! The requests a backend reports ([`EtcdConfig::requests`]) against what the protocol says one
//! grant costs (the crate docs, "Requests per grant"), on a real etcd, and against what an etcd
//! of the test's own received by its metrics: each RPC once, nothing left out, nothing counted
//! twice.

use crate::support;

use lock_core::requests::RequestTally;
use lock_core::Locker;
use lock_etcd::{EtcdBackend, EtcdConfig};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Long enough that no renewal falls inside a test's locking (one every TTL/3 = 10 s), so the
/// key-value requests can be counted exactly.
const TTL: Duration = Duration::from_secs(30);

/// A backend on the test binary's etcd whose requests go to a tally of its own, emptied once
/// the connect's requests were counted: the read of the lock root (the access check), its
/// lease's grant, and the first renewal the keep-alive stream sends as it opens (from a task
/// of its own, so it may come a moment after connect returns).
async fn counted(root: &str) -> (EtcdBackend, Arc<RequestTally>) {
    let tally = RequestTally::new();
    let config = EtcdConfig { requests: tally.hook(), ..support::config(root, TTL) };
    let backend = EtcdBackend::connect_with(&support::shared().endpoint(), config)
        .await
        .expect("connect to the test etcd");
    assert_eq!(tally.of("kv", "Range"), 1, "the access check");
    assert_eq!(tally.of("lease", "LeaseGrant"), 1);
    wait_until(|| tally.of("lease", "LeaseKeepAlive") == 1, "the stream's first renewal").await;
    assert_eq!(tally.total(), 3, "{:?}", tally.counts());
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
async fn an_uncontended_grant_costs_a_txn_a_watch_and_a_delete_and_a_session_its_lease_requests() {
    let root = support::unique_root("requests-alone");
    let (backend, tally) = counted(&root).await;
    let locker = backend.locker("solo").unwrap();
    for _ in 0..3 {
        // Released at once: the watch of our own key is still opened, once per grant.
        locker.lock("k", None).await.unwrap().release().await.unwrap();
    }
    wait_until(|| tally.of("watch", "Watch") == 3, "the holders' watches").await;
    assert_eq!(lock_requests(&tally), (3, 0, 3, 3), "{:?}", tally.counts());
    assert_eq!(tally.total(), 9, "3 requests per uncontended grant: {:?}", tally.counts());

    // A soft lock refused costs two: its create, and its delete.
    let guard = locker.lock("k", None).await.unwrap();
    let (other, theirs) = counted(&root).await;
    assert!(other.locker("other").unwrap().try_lock("k").await.unwrap().is_none());
    assert_eq!(lock_requests(&theirs), (1, 0, 0, 1), "{:?}", theirs.counts());
    guard.release().await.unwrap();
    wait_until(|| tally.of("watch", "Watch") == 4, "the fourth holder's watch").await;

    // Dropping the backend revokes its lease.
    tally.reset();
    drop(locker);
    drop(backend);
    wait_until(|| tally.of("lease", "LeaseRevoke") == 1, "the lease's revoke").await;
    assert_eq!(tally.total(), 1, "{:?}", tally.counts());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_waiting_costs_seven_requests_however_long_the_queue() {
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
        wait_until(|| tally.of("watch", "Watch") == 2, "the holder's watch of its key").await;
        // Txn; Range (the predecessor); Watch (on it); Range (none left before ours); Range
        // (our own key, still there); Watch (on our key, while we hold); DeleteRange: C waited
        // behind two keys and paid what B paid.
        assert_eq!(lock_requests(&tally), (1, 3, 2, 1), "{:?}", tally.counts());
        assert_eq!(tally.total(), 7, "{:?}", tally.counts());
    }
}

/// The RPC messages the etcd at `addr` has received so far, by method, from its metrics
/// (`grpc_server_msg_received_total`: one per unary request, one per message on a stream).
fn received(addr: std::net::SocketAddr) -> BTreeMap<String, u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("etcd's client port");
    // HTTP/1.0: the answer comes whole, not in chunks.
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("grpc_server_msg_received_total{")) {
        let (labels, n) = line.rsplit_once("} ").expect("{labels} count");
        let method = labels.split("grpc_method=\"").nth(1).and_then(|m| m.split('"').next());
        let n: u64 = n.trim().parse().expect("a count");
        if let (Some(method), true) = (method, n > 0) {
            out.insert(method.to_string(), n);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_received_every_rpc_the_hooks_reported_and_no_other() {
    let server = tokio::task::block_in_place(test_servers::EtcdServer::launch).expect("an etcd");
    let before = received(server.addr());
    let tally = RequestTally::new();
    let config = EtcdConfig { requests: tally.hook(), ..support::config("/locks", TTL) };
    let endpoint = server.endpoint();
    let connect = || EtcdBackend::connect_with(&endpoint, config.clone());
    let (a, b) = (connect().await.unwrap(), connect().await.unwrap());
    let (la, lb) = (a.locker("a").unwrap(), b.locker("b").unwrap());
    la.lock("k", None).await.unwrap().release().await.unwrap();
    let held = la.lock("k", None).await.unwrap();
    assert!(lb.try_lock("k").await.unwrap().is_none());
    let wait = tokio::spawn(async move { lb.lock("k", None).await });
    // a's two holds watched their keys; b watches a's.
    wait_until(|| tally.of("watch", "Watch") == 3, "b's watch").await;
    held.release().await.unwrap();
    wait.await.unwrap().unwrap().release().await.unwrap();
    drop((la, a, b));

    // Each RPC reported once as it went out, each counted by the server as it came in.
    let ours = || -> BTreeMap<String, u64> {
        tally.counts().into_iter().map(|((_, rpc), n)| (rpc, n)).collect()
    };
    let since = || -> BTreeMap<String, u64> {
        let mut now = received(server.addr());
        now.iter_mut().for_each(|(m, n)| *n -= before.get(m).copied().unwrap_or(0));
        now.retain(|_, n| *n > 0);
        now
    };
    let until = Instant::now() + Duration::from_secs(5);
    while since() != ours() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(since(), ours(), "server (left) and hooks (right)");
    assert_eq!(tally.of("lease", "LeaseRevoke"), 2, "both leases revoked: {:?}", ours());
}

/// etcd's default keep-alive enforcement (`--grpc-keepalive-min-time` 5 s, the server of
/// `test-servers` keeps the default) closes a connection whose client pings more often than
/// that, answering `too_many_pings`: every stream on it breaks, so a holder's keep-alive
/// stream and a waiter's watch are opened again. Held idle for well past the minimum, a
/// holder and a waiter keep their streams: the only keep-alive is the holder's one renewal
/// (one every TTL/3 = 10 s) and nobody watches again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_holder_and_waiter_keep_their_streams_under_etcds_ping_policy() {
    let root = support::unique_root("requests-pings");
    let (holder, held) = counted(&root).await;
    let (waiter, waits) = counted(&root).await;
    let guard = holder.locker("holder").unwrap().lock("k", None).await.unwrap();
    let queued = tokio::spawn(async move {
        let locker = waiter.locker("waiter").unwrap();
        let guard = locker.lock("k", Some(Duration::from_secs(60))).await;
        (guard.map(|g| g.token()), locker, waiter)
    });
    wait_until(|| waits.of("watch", "Watch") == 1, "the waiter's watch").await;
    held.reset();
    waits.reset();

    tokio::time::sleep(Duration::from_secs(12)).await;

    assert!(!guard.is_lost(), "the holder's lease was lost: {:?}", guard.lease_state());
    assert!(!queued.is_finished(), "the waiter stopped waiting");
    assert!(held.of("lease", "LeaseKeepAlive") <= 1, "holder: {:?}", held.counts());
    assert_eq!(lock_requests(&held), (0, 0, 0, 0), "holder: {:?}", held.counts());
    assert!(waits.of("lease", "LeaseKeepAlive") <= 1, "waiter: {:?}", waits.counts());
    assert_eq!(lock_requests(&waits), (0, 0, 0, 0), "waiter: {:?}", waits.counts());

    let token = guard.token();
    guard.release().await.unwrap();
    let (granted, _locker, _waiter) = queued.await.unwrap();
    assert!(granted.unwrap() > token);
}
