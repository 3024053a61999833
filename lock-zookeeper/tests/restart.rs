//! A ZooKeeper server that restarts under its clients: contenders go on
//! once it is back, a holder is told its lease is lost, and after an outage that outlasts the
//! session a waiter fails with `LeaseLost` and the same backend goes on with a new session.
//!
//! Each test has a server of its own (a restart would disturb the binary's other tests); the
//! server keeps its data directory across the restart, as a real one does. Run with
//! `--nocapture` to see how long the grants took to resume.

use lock_core::{LockError, Locker};
use lock_zookeeper::{ZkBackend, ZkConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_servers::ZkServer;

async fn backend(server: &ZkServer, session: Duration) -> ZkBackend {
    let config = ZkConfig { session_timeout: session, ..ZkConfig::default() };
    ZkBackend::connect_with(&server.hosts(), config).await.expect("connect")
}

fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_resume_after_a_server_restart() {
    // Long enough for the sessions to outlive a restart of the JVM on a loaded machine.
    let session = Duration::from_secs(8);
    let mut server = ZkServer::start();
    let grants = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let restarted = Arc::new(Mutex::new(None::<Instant>));
    let first_after = Arc::new(Mutex::new(None::<Instant>));
    let stop = Arc::new(AtomicBool::new(false));
    let mut backends = Vec::new();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let backend = backend(&server, session).await;
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
        "zookeeper: {:?} outage; grants resumed {:?} after the server answered again ({:?} after it was stopped); \
         sessions made per backend {:?}; {} errors: {:?}",
        answering - stopped,
        first.saturating_duration_since(answering),
        first - stopped,
        backends.iter().map(|b| b.sessions_made()).collect::<Vec<_>>(),
        errors.len(),
        errors
    );
    for e in errors.iter() {
        assert!(
            e.starts_with("Backend") || e.starts_with("LeaseLost"),
            "an untyped or unexpected error: {e}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_is_told_at_the_disconnection_and_keeps_its_znode_across_a_short_restart() {
    let session = Duration::from_secs(8);
    let mut server = ZkServer::start();
    let a = backend(&server, session).await;
    let b = backend(&server, session).await;
    let guard = a.locker("a").unwrap().lock("short", None).await.unwrap();
    blocking(|| server.stop());
    let lost =
        tokio::time::timeout(session, guard.lost()).await.expect("told at the disconnection");
    assert!(lost.reason.contains("disconnected"), "{lost}");
    blocking(|| server.start_again());
    // The server restored a's session from its log: the znode, and so the lock, is still a's
    // although a was told it is lost. b's request waits for the reconnection, then finds it.
    let other = b.locker("b").unwrap();
    let held = other.try_lock("short").await.expect("b's request after the restart");
    assert!(held.is_none(), "a's session and znode survived the restart");
    assert_eq!(a.sessions_made(), 1, "a kept its session");
    guard.release().await.expect("a's release after the restart");
    let gb = other.try_lock("short").await.unwrap().expect("free once a released");
    gb.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_an_outage_longer_than_the_session_a_waiter_fails_and_the_backend_gets_a_new_session()
{
    let session = Duration::from_secs(6);
    let mut server = ZkServer::start();
    let a = backend(&server, session).await;
    let b = backend(&server, session).await;
    let holder = a.locker("a").unwrap().lock("long", None).await.unwrap();
    let waiter = b.locker("b").unwrap();
    let waiting = {
        let waiter = b.locker("b").unwrap();
        tokio::spawn(async move { waiter.lock("long", None).await.map(|g| g.token()) })
    };
    // b is queued once its znode shows up behind a's.
    let raw = zookeeper_client::Client::connector()
        .with_session_timeout(session)
        .connect(&server.hosts())
        .await
        .unwrap();
    let dir = a.lock_dir("long");
    tokio::time::timeout(Duration::from_secs(20), async {
        while raw.list_children(&dir).await.map_or(0, |c| c.len()) < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("b queues behind a");
    drop(raw);
    // And has set its watch on a's znode: b is waiting, not still queueing. a watches its own
    // znode too (the holder's watch), so it is b's watch once two sessions watch it.
    let port = server.port;
    tokio::time::timeout(Duration::from_secs(20), async {
        while !test_servers::four_letter(port, "wchp")
            .is_some_and(|w| w.contains(&format!("{dir}/_c_")) && w.matches("0x").count() >= 2)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("b watches a's znode");
    assert!(!waiting.is_finished(), "b waits behind a");
    let stopped = Instant::now();
    blocking(|| server.stop());
    // The client gives the session up once it could not reach a server for 1.4 session
    // timeouts; the waiter's place went with it.
    let outcome = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("the waiter returns")
        .unwrap();
    let gave_up = stopped.elapsed();
    match outcome {
        Err(LockError::LeaseLost { reason, .. }) => {
            assert!(reason.contains("session ended"), "{reason}")
        }
        other => panic!("expected LeaseLost for the waiter, got {other:?}"),
    }
    assert!(matches!(holder.lease_state(), lock_core::LeaseState::Lost(_)));
    // Requests while the server is down fail with a backend error, bounded by the timeouts.
    let start = Instant::now();
    let err = waiter.try_lock("long").await.expect_err("the server is down");
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(start.elapsed() < Duration::from_secs(15), "took {:?}", start.elapsed());
    blocking(|| server.start_again());
    let answering = Instant::now();
    // The restarted server restores a's old session for one more session timeout, which would
    // keep a's znode, and the lock, that long (and for ever, were the server restarted within
    // each timeout); a's backend connects to the session it gave up and closes it, and b's
    // backend, on a new session, gets the lock.
    let granted = loop {
        match waiter.lock("long", Some(Duration::from_secs(20))).await {
            Ok(g) => break g,
            Err(LockError::Backend { .. }) if answering.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("b after the restart: {e:?}"),
        }
    };
    let took = answering.elapsed();
    eprintln!(
        "zookeeper long outage: the waiter failed {gave_up:?} after the stop; after the restart b's backend \
         (sessions made: {}) was granted the lock in {took:?}",
        b.sessions_made()
    );
    assert_eq!(b.sessions_made(), 2, "b's backend replaced its expired session");
    assert!(took < session, "a's session was left to expire: granted after {took:?}");
    granted.release().await.unwrap();
    drop(holder);
}
