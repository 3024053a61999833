//! The recipe's own properties against a real ZooKeeper: znode layout, one watch per waiter
//! (no herd), first-come-first-served grants, session loss, clean timeouts and cancellation,
//! connection failures.

use crate::support;

use lock_core::{LeaseState, LockError, LockGuard, Locker};
use lock_zookeeper::{Guids, NodeNaming, ZkBackend, ZkConfig, ZkLockOptions};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::ZkFixture;
use zookeeper_client as zk;

const SESSION: Duration = Duration::from_secs(2);

async fn raw() -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(&support::shared().hosts())
        .await
        .unwrap()
}

/// The children of `dir` in queue order: by the sequence their names end in (names have
/// different prefixes, each a new UUID, so their text order is not the queue's).
async fn children(raw: &zk::Client, dir: &str) -> Vec<String> {
    let mut c = raw.list_children(dir).await.unwrap_or_default();
    c.sort_by(|a, b| a[a.len() - 10..].cmp(&b[b.len() - 10..]));
    c
}

/// Watched paths under `prefix`, each with the sessions watching it (four-letter `wchp`).
fn watches_under(prefix: &str) -> BTreeMap<String, Vec<String>> {
    let out = test_servers::four_letter(support::shared().port, "wchp").expect("wchp");
    let mut map = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in out.lines() {
        if line.starts_with(char::is_whitespace) {
            if let Some(p) = &current {
                map.entry(p.clone()).or_insert_with(Vec::new).push(line.trim().to_string());
            }
        } else if line.starts_with(prefix) {
            current = Some(line.trim().to_string());
        } else {
            current = None;
        }
    }
    map
}

async fn wait_for(mut cond: impl FnMut() -> bool, within: Duration, what: &str) {
    let until = Instant::now() + within;
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn znodes_are_ephemeral_sequential_children_of_the_lock_dir() {
    let fx = ZkFixture::new("layout", SESSION).await;
    let backend = fx.backend("a").await;
    let raw = raw().await;
    let dir = backend.lock_dir("invoice-42");
    assert_eq!(dir, format!("{}/invoice-42", fx.root()));
    let g = backend.locker("a").unwrap().lock("invoice-42", None).await.unwrap();
    let kids = children(&raw, &dir).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert!(is_protected(&kids[0]), "Curator's protected form by default: {kids:?}");
    let (data, stat) = raw.get_data(&format!("{dir}/{}", kids[0])).await.unwrap();
    assert_eq!(data, b"a", "a znode's data is its owner id");
    assert_ne!(stat.ephemeral_owner, 0, "lock znodes are ephemeral");
    assert_eq!(g.token(), stat.czxid as u64, "the fencing token is the znode's czxid");
    g.release().await.unwrap();
    assert!(children(&raw, &dir).await.is_empty(), "release deletes the znode");
    assert!(raw.check_stat(&dir).await.unwrap().is_some(), "the lock dir stays");
}

/// Curator's protected form: `_c_`, a UUID (36 characters), `-lock-`, a 10-digit sequence.
fn is_protected(name: &str) -> bool {
    let (tag, rest) = name.split_at_checked(3 + 36 + 1).unwrap_or(("", ""));
    tag.starts_with("_c_")
        && tag.ends_with('-')
        && rest
            .strip_prefix("lock-")
            .is_some_and(|seq| seq.len() == 10 && seq.parse::<u32>().is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_naming_makes_the_seeds_names() {
    let fx = ZkFixture::new("plain", SESSION).await;
    let backend = fx.backend("a").await;
    let raw = raw().await;
    let options = ZkLockOptions::new(Guids::seeded(1)).with_naming(NodeNaming::Plain);
    let locker = backend.locker_with("a", options).unwrap();
    assert_eq!(locker.naming(), NodeNaming::Plain);
    let g = locker.lock("p", None).await.unwrap();
    let kids = children(&raw, &backend.lock_dir("p")).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert!(kids[0].starts_with("lock-") && kids[0].len() == "lock-".len() + 10, "{kids:?}");
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protected_names_come_from_the_injected_seed() {
    let fx = ZkFixture::new("seeded", SESSION).await;
    let raw = raw().await;
    // The GUID of each name: everything before `lock-<sequence>`.
    let mut tags = Vec::new();
    for (name, seed) in [("a", 7), ("b", 7), ("c", 8)] {
        let locker =
            fx.backend(name).await.locker_with(name, ZkLockOptions::new(Guids::seeded(seed)));
        let g = locker.unwrap().lock(name, None).await.unwrap();
        let kids = children(&raw, &format!("{}/{name}", fx.root())).await;
        assert!(kids.len() == 1 && is_protected(&kids[0]), "{kids:?}");
        tags.push(kids[0][..40].to_string());
        g.release().await.unwrap();
    }
    assert_eq!(tags[0], tags[1], "the same seed makes the same GUIDs");
    assert_ne!(tags[0], tags[2], "another seed, other GUIDs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_waiter_watches_only_its_predecessor_and_grants_are_first_come_first_served() {
    let fx = ZkFixture::new("herd", SESSION).await;
    let raw = raw().await;
    let holder = fx.backend("h").await.locker("h").unwrap();
    let dir = format!("{}/herd", fx.root());
    let g = holder.lock("herd", None).await.unwrap();

    let waiters = 5;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, LockGuard)>();
    let mut tasks = Vec::new();
    for i in 0..waiters {
        let locker: Arc<dyn Locker> =
            Arc::new(fx.backend(&format!("w{i}")).await.locker(&format!("w{i}")).unwrap());
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let g = locker.lock("herd", None).await.expect("waiter locks");
            let _ = tx.send((i, g));
        }));
        // Queue them in a known order: wait until this waiter's znode is there.
        let want = i + 2;
        let until = Instant::now() + Duration::from_secs(5);
        while children(&raw, &dir).await.len() < want {
            assert!(Instant::now() < until, "waiter {i} did not queue");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let queue = children(&raw, &dir).await;
    assert_eq!(queue.len(), waiters + 1);

    // Every znode but the last is watched by exactly one waiting session (its successor's),
    // and nobody watches the directory's children: a release wakes one waiter, not all. The
    // holder's znode is watched by its holder too (crate docs, "What a holder is told").
    let prefix = fx.root().to_string();
    // (As sets: the watches come sorted by path, which is not queue order.)
    let expected: std::collections::BTreeSet<String> =
        queue[..waiters].iter().map(|n| format!("{dir}/{n}")).collect();
    wait_for(
        || watches_under(&prefix).len() == waiters,
        Duration::from_secs(5),
        "one watch per waiter",
    )
    .await;
    let watches = watches_under(&prefix);
    assert_eq!(
        watches.keys().cloned().collect::<std::collections::BTreeSet<_>>(),
        expected,
        "watched paths: {watches:?}"
    );
    let held = format!("{dir}/{}", queue[0]);
    for (path, sessions) in &watches {
        let watchers = if *path == held { 2 } else { 1 };
        assert_eq!(sessions.len(), watchers, "{path} watched by {sessions:?}");
    }
    let distinct: std::collections::BTreeSet<_> = watches.values().flatten().collect();
    assert_eq!(distinct.len(), waiters + 1, "each waiter watches one znode, the holder its own");

    // Hand the lock down the queue: each release grants exactly the next waiter.
    g.release().await.unwrap();
    for expect in 0..waiters {
        let (i, g) = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("next grant")
            .unwrap();
        assert_eq!(i, expect, "grants follow queue order");
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(rx.try_recv().is_err(), "a release woke more than one waiter");
        g.release().await.unwrap();
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_holders_session_frees_the_lock_for_the_next_waiter() {
    let fx = ZkFixture::new("kill", SESSION).await;
    let raw = raw().await;
    let holder = fx.backend("h").await.locker("h").unwrap();
    let waiter = fx.backend("w").await.locker("w").unwrap();
    let g = holder.lock("kill", None).await.unwrap();
    let granted = Instant::now();
    let waiting = tokio::spawn(async move { waiter.lock("kill", None).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished());
    // The holder's process "dies": its connection goes, nothing is released by it.
    fx.with_proxy("h", |p| p.cut());
    let lost =
        tokio::time::timeout(Duration::from_secs(1), g.lost()).await.expect("holder told at once");
    eprintln!("holder told: {lost}");
    let gw =
        tokio::time::timeout(SESSION * 3, waiting).await.expect("waiter granted").unwrap().unwrap();
    let waited = granted.elapsed();
    eprintln!("waiter granted {waited:?} after the holder's grant (session timeout {SESSION:?})");
    assert!(
        waited >= SESSION.mul_f64(0.9),
        "freed after {waited:?}, before the session could expire"
    );
    assert!(waited <= SESSION + Duration::from_millis(1500), "freed only after {waited:?}");
    assert!(gw.token() > g.token());
    assert_eq!(
        children(&raw, &format!("{}/kill", fx.root())).await.len(),
        1,
        "only the waiter's znode is left"
    );
    gw.release().await.unwrap();
    drop(g);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_holder_is_told_before_its_session_can_expire() {
    let fx = ZkFixture::new("stall", SESSION).await;
    let g = fx.backend("h").await.locker("h").unwrap().lock("stall", None).await.unwrap();
    // A stall, not a close: no byte passes, so the client first notices a dead connection.
    fx.with_proxy("h", |p| p.pause());
    let start = Instant::now();
    let lost = tokio::time::timeout(SESSION * 2, g.lost()).await.expect("holder told");
    let after = start.elapsed();
    eprintln!("stalled holder told after {after:?}: {lost}");
    assert!(
        after < SESSION,
        "told only after {after:?}: the server may have expired the session already"
    );
    assert!(matches!(g.lease_state(), LeaseState::Lost(_)));
    drop(g);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_and_cancelled_waiters_leave_no_znode() {
    let fx = ZkFixture::new("timeout", SESSION).await;
    let raw = raw().await;
    let dir = format!("{}/t", fx.root());
    let g = fx.backend("h").await.locker("h").unwrap().lock("t", None).await.unwrap();
    let w = fx.backend("w").await.locker("w").unwrap();
    let start = Instant::now();
    match w.lock("t", Some(Duration::from_millis(500))).await {
        Err(LockError::Timeout { waited, .. }) => assert!(waited >= Duration::from_millis(500)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(children(&raw, &dir).await.len(), 1, "the timed-out waiter deleted its znode");

    // Cancelled from outside (the future dropped): its znode goes in the background.
    assert!(tokio::time::timeout(Duration::from_millis(300), w.lock("t", None)).await.is_err());
    let until = Instant::now() + Duration::from_secs(3);
    while children(&raw, &dir).await.len() > 1 {
        assert!(Instant::now() < until, "a cancelled waiter left its znode behind");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Soft lock on a held lock: not queued at all.
    assert!(w.try_lock("t").await.unwrap().is_none());
    assert_eq!(children(&raw, &dir).await.len(), 1);
    g.release().await.unwrap();
    w.try_lock("t").await.unwrap().expect("free").release().await.unwrap();
}

#[tokio::test]
async fn unreachable_server_fails_naming_the_address_with_a_transient_kind() {
    let closed = test_servers::ClosedPort::new();
    let addr = closed.addr().to_string();
    let start = Instant::now();
    let err = ZkBackend::connect(&addr, SESSION).await.expect_err("nothing listens there");
    let took = start.elapsed();
    match &err {
        LockError::Backend { backend, kind, source: message } => {
            assert_eq!(*backend, "zookeeper");
            assert!(message.to_string().contains(&addr), "{message}");
            assert!(kind.is_transient(), "{kind}: {message}");
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    assert!(took < Duration::from_secs(15), "took {took:?}");
    eprintln!("unreachable: {err} ({took:?})");
}

#[tokio::test]
async fn silent_server_fails_within_the_connect_timeout() {
    let silent = test_servers::SilentServer::start().await;
    let addr = silent.addr();
    let config = ZkConfig {
        session_timeout: SESSION,
        connect_timeout: Duration::from_secs(3),
        ..ZkConfig::default()
    };
    let start = Instant::now();
    let err = ZkBackend::connect_with(&addr.to_string(), config).await.expect_err("silent server");
    let took = start.elapsed();
    assert!(
        matches!(&err, LockError::Backend { source: message, .. } if message.to_string().contains(&addr.to_string())),
        "{err}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[tokio::test]
async fn bad_settings_are_config_errors() {
    let hosts = support::shared().hosts();
    for root in ["locks", "/", ""] {
        let config = ZkConfig { root: root.into(), ..ZkConfig::default() };
        assert!(
            matches!(ZkBackend::connect_with(&hosts, config).await, Err(LockError::Config(_))),
            "root {root:?}"
        );
    }
    let backend = ZkBackend::connect(&hosts, SESSION).await.unwrap();
    assert!(matches!(backend.locker("a/b"), Err(LockError::InvalidId { .. })));
}
