//! The requests a backend reports ([`ZkConfig::requests`]) against what the protocol says one
//! grant costs (the crate docs, "Requests per grant"), on a real ZooKeeper, and against the
//! packets a server of the test's own received: each request once, nothing left out, nothing
//! counted twice.

use crate::support;

use lock_core::requests::RequestTally;
use lock_core::Locker;
use lock_zookeeper::{ZkBackend, ZkConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A backend on the test binary's ZooKeeper whose requests go to a tally of its own, emptied
/// once the session's `connect` was counted.
async fn counted(root: &str) -> (ZkBackend, Arc<RequestTally>) {
    let tally = RequestTally::new();
    let config = ZkConfig {
        session_timeout: Duration::from_secs(10),
        root: root.to_string(),
        requests: tally.hook(),
        ..ZkConfig::default()
    };
    let backend =
        ZkBackend::connect_with(&support::shared().hosts(), config).await.expect("a session");
    assert_eq!(tally.of("session", "connect"), 1);
    assert_eq!(tally.total(), 1, "{:?}", tally.counts());
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

/// The requests on znodes of `tally`, as (create, getChildren, exists, delete), and their sum.
fn znode_requests(tally: &RequestTally) -> ((u64, u64, u64, u64), u64) {
    let of = |command| tally.of("znodes", command);
    ((of("create"), of("getChildren"), of("exists"), of("delete")), tally.to("znodes"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_grant_costs_a_create_a_list_a_watch_and_a_delete() {
    // Neither the root nor its parent exists yet.
    let root = support::unique_root("requests-alone");
    let (backend, tally) = counted(&root).await;
    let locker = backend.locker("solo").unwrap();

    locker.lock("k", None).await.unwrap().release().await.unwrap();
    // 4 (the holder's watch on its own znode is the `exists`), plus 2 for the lock's directory, plus 2 for each of its 2 missing parents: the
    // create that finds no directory, then directory, parent and grandparent each refused
    // (going up) and made (coming down).
    assert_eq!(znode_requests(&tally), ((7, 1, 1, 1), 10), "{:?}", tally.counts());
    tally.reset();
    locker.lock("k", None).await.unwrap().release().await.unwrap();
    assert_eq!(znode_requests(&tally), ((1, 1, 1, 1), 4), "{:?}", tally.counts());
    tally.reset();
    // A new lock id under the root that now exists: its directory's two.
    locker.lock("k2", None).await.unwrap().release().await.unwrap();
    assert_eq!(znode_requests(&tally), ((3, 1, 1, 1), 6), "{:?}", tally.counts());
    tally.reset();

    // The soft lock: as the mandatory lock, and leaving at once when not first (no list
    // before the create: on an ensemble it could be a follower's, behind a release).
    let guard = locker.try_lock("k").await.unwrap().expect("free");
    assert_eq!(znode_requests(&tally), ((1, 1, 1, 0), 3), "{:?}", tally.counts());
    let (other, theirs) = counted(&root).await;
    assert!(other.locker("other").unwrap().try_lock("k").await.unwrap().is_none());
    assert_eq!(znode_requests(&theirs), ((1, 1, 0, 1), 3), "refused: {:?}", theirs.counts());
    guard.release().await.unwrap();
    assert_eq!(znode_requests(&tally), ((1, 1, 1, 1), 4), "{:?}", tally.counts());

    // The backend's last user gone, its session is closed.
    tally.reset();
    drop(locker);
    drop(backend);
    wait_until(|| tally.of("session", "closeSession") == 1, "the session's close").await;
    assert_eq!(tally.total(), 1, "{:?}", tally.counts());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_after_waiting_costs_six_requests_however_long_the_queue() {
    let root = support::unique_root("requests-queue");
    // A holds (its first lock of the id makes the directories); B and C queue behind it in
    // that order.
    let (a, _) = counted(&root).await;
    let held = a.locker("a").unwrap().lock("k", None).await.unwrap();
    let mut waiters = Vec::new();
    for name in ["b", "c"] {
        let (backend, tally) = counted(&root).await;
        let locker = backend.locker(name).unwrap();
        let wait = tokio::spawn(async move { locker.lock("k", None).await });
        // Queued and watching its predecessor before the next one comes.
        wait_until(|| tally.of("znodes", "exists") == 1, "the waiter's watch").await;
        waiters.push((backend, tally, wait));
    }
    held.release().await.unwrap();
    for (_backend, tally, wait) in waiters {
        let guard = wait.await.unwrap().unwrap();
        guard.release().await.unwrap();
        // create; getChildren; exists, setting the watch; getChildren (ours first now);
        // exists, watching our own znode; delete: C waited behind two znodes and paid what B
        // paid.
        assert_eq!(znode_requests(&tally), ((1, 2, 2, 1), 6), "{:?}", tally.counts());
    }
}

/// The packets a ZooKeeper server has received (`mntr`'s `zk_packets_received`: every request,
/// ping and connect of every session, and every four-letter command), but for the `mntr`s that
/// read them.
struct Packets {
    port: u16,
    reads: u64,
}

impl Packets {
    /// The count, once the server serves `mntr` (a server that has just started may answer
    /// that it does not serve requests yet).
    fn received(&mut self) -> u64 {
        for _ in 0..50 {
            let mntr = test_servers::four_letter(self.port, "mntr").unwrap_or_default();
            let line = mntr.lines().find_map(|l| l.strip_prefix("zk_packets_received"));
            if let Some(n) = line.and_then(|n| n.trim().parse::<u64>().ok()) {
                self.reads += 1;
                return n - self.reads;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no zk_packets_received from mntr on port {}", self.port)
    }
}

/// The session timeout of the count below: the servers' longest (`maxSessionTimeout`).
const PING_SESSION: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_received_every_request_the_hooks_reported_and_no_other() {
    let server = tokio::task::block_in_place(test_servers::ZkServer::launch).expect("a server");
    let mut packets = Packets { port: server.addr().port(), reads: 0 };
    packets.received();
    let tally = RequestTally::new();
    // A long session (the servers' longest): the client pings after 3/20 of it without a
    // request (9 s), which this test leaves it only on a machine loaded enough to take that
    // long (see the count below).
    let config =
        ZkConfig { session_timeout: PING_SESSION, requests: tally.hook(), ..ZkConfig::default() };
    let (a, b) = (
        ZkBackend::connect_with(&server.hosts(), config.clone()).await.unwrap(),
        ZkBackend::connect_with(&server.hosts(), config).await.unwrap(),
    );
    // Each new session's first ping, which the client sends unseen, has arrived once the count
    // stands still.
    let mut before = packets.received();
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = packets.received();
        if now == before {
            break;
        }
        before = now;
    }
    tally.reset();
    let counted_from = Instant::now();

    let (la, lb) = (a.locker("a").unwrap(), b.locker("b").unwrap());
    la.lock("k", None).await.unwrap().release().await.unwrap();
    let held = la.lock("k", None).await.unwrap();
    assert!(lb.try_lock("k").await.unwrap().is_none());
    let wait = tokio::spawn(async move { lb.lock("k", Some(Duration::from_secs(5))).await });
    // a's two grants each watched a's own znode; the third `exists` is b's watch.
    wait_until(|| tally.of("znodes", "exists") == 3, "b's watch").await;
    held.release().await.unwrap();
    wait.await.unwrap().unwrap().release().await.unwrap();
    drop((la, a, b));

    // Each request reported once as it went out, each counted by the server as it came in:
    // the sessions' closes included.
    let until = Instant::now() + Duration::from_secs(5);
    let mut seen = packets.received() - before;
    while seen != tally.total() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
        seen = packets.received() - before;
    }
    // The client's pings go unreported: none unless a session went 9 s without a request,
    // at most one per session per 9 s since the count began.
    let pings = 2 * (counted_from.elapsed().as_secs() / (PING_SESSION * 3 / 20).as_secs());
    assert!(
        (tally.total()..=tally.total() + pings).contains(&seen),
        "{seen} packets for {} requests ({pings} pings allowed): {:?}",
        tally.total(),
        tally.counts()
    );
    assert_eq!(tally.of("session", "closeSession"), 2, "{:?}", tally.counts());
}

/// With `watch_holder` off a grant costs one request less (no `exists`), and the holder is
/// not told of a stranger's delete: the trade the option makes (crate docs, "What the
/// holder's watch costs").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_holders_watch_a_grant_costs_three_and_a_strangers_delete_goes_untold() {
    let root = support::unique_root("requests-unwatched");
    let tally = RequestTally::new();
    let config = ZkConfig {
        session_timeout: Duration::from_secs(10),
        root: root.clone(),
        requests: tally.hook(),
        watch_holder: false,
        ..ZkConfig::default()
    };
    let backend = ZkBackend::connect_with(&support::shared().hosts(), config).await.unwrap();
    let locker = backend.locker("solo").unwrap();
    locker.lock("k", None).await.unwrap().release().await.unwrap();
    tally.reset();
    let guard = locker.lock("k", None).await.unwrap();
    guard_stays_held_after_a_strangers_delete(&root, &guard).await;
    guard.release().await.unwrap();
    assert_eq!(znode_requests(&tally), ((1, 1, 0, 1), 3), "{:?}", tally.counts());
}

/// Delete every znode of lock `k` under `root` as another session, and check that `guard`
/// still says `Held` half a second later.
async fn guard_stays_held_after_a_strangers_delete(root: &str, guard: &lock_core::LockGuard) {
    let stranger = zookeeper_client::Client::connect(&support::shared().hosts()).await.unwrap();
    let dir = format!("{root}/k");
    let (children, _) = stranger.get_children(&dir).await.unwrap();
    assert_eq!(children.len(), 1, "{children:?}");
    stranger.delete(&format!("{dir}/{}", children[0]), None).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(guard.lease_state(), lock_core::LeaseState::Held);
}
