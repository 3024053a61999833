//! What another client of the ensemble can do to a held lock, with and without credentials
//! (crate docs, "Credentials and ACLs"): on an open lock path a stranger deletes the holder's
//! znode and the next waiter is granted while the holder works, and the holder is told at
//! once; with digest credentials and the creator-only ACL the stranger is refused, and so is a
//! contender with the wrong password, with an error that says whose identity was refused.

use crate::support;

use lock_core::secret::{Credentials, Secret};
use lock_core::{BackendErrorKind, LeaseState, LockError, LockGuard, Locker};
use lock_zookeeper::{ZkBackend, ZkConfig};
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client as zk;

const PASSWORD: &str = "right-password-7f3a";

fn locker_credentials() -> Credentials {
    Credentials::new("locker", Secret::new(PASSWORD))
}

/// A backend on the test binary's ZooKeeper with a session long enough that nothing but the
/// stranger can end a grant during a test.
async fn backend(root: &str, credentials: Option<Credentials>) -> ZkBackend {
    let config = ZkConfig {
        session_timeout: Duration::from_secs(20),
        root: root.to_string(),
        credentials,
        ..ZkConfig::default()
    };
    ZkBackend::connect_with(&support::shared().hosts(), config).await.expect("a session")
}

/// A plain client of the same server: the stranger, authenticated as `digest` if given.
async fn stranger(digest: Option<&str>) -> zk::Client {
    let mut connector = zk::Client::connector().with_session_timeout(Duration::from_secs(20));
    if let Some(pair) = digest {
        connector = connector.with_auth("digest", pair.as_bytes());
    }
    connector.connect(&support::shared().hosts()).await.expect("the stranger's session")
}

/// The holder's znode, once `queued` contenders are in the lock's directory: the one with the
/// lowest sequence number (the last ten digits of a name).
async fn holders_znode(client: &zk::Client, dir: &str, queued: usize) -> String {
    loop {
        let mut children = client.list_children(dir).await.expect("list the lock's directory");
        if children.len() == queued {
            children.sort_by_key(|n| n[n.len() - 10..].to_string());
            return format!("{dir}/{}", children[0]);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Wait until `guard` is told it lost the lock; the reason, and how long it took.
async fn told(guard: &LockGuard, within: Duration) -> (String, Duration) {
    let start = Instant::now();
    let lost = tokio::time::timeout(within, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("the holder was not told within {within:?}"));
    (lost.reason, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_open_path_a_stranger_hands_the_lock_over_and_the_holder_is_told_at_once() {
    let root = support::unique_root("open-stranger");
    let (a, b) = (backend(&root, None).await, backend(&root, None).await);
    let holder = a.locker("holder").unwrap().lock("k", None).await.unwrap();
    let waiter = b.locker("waiter").unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("k", None).await });

    // Any client may delete the holder's znode: the lock path carries the open ACL.
    let stranger = stranger(None).await;
    let znode = holders_znode(&stranger, &a.lock_dir("k"), 2).await;
    stranger.delete(&znode, None).await.expect("the open ACL lets a stranger delete");

    // The waiter is granted while the holder still works under the lock: the unsafety an ACL
    // prevents. Only fencing would protect the resource now (the waiter's token is greater).
    let granted = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter granted after the delete")
        .unwrap()
        .unwrap();
    assert!(granted.token() > holder.token());
    // The session (20 s) is healthy: only the watch on the holder's own znode can tell it.
    let (reason, after) = told(&holder, Duration::from_secs(2)).await;
    assert!(reason.contains("deleted by another client"), "{reason}");
    assert!(reason.contains(&znode), "{reason}");
    eprintln!("holder told {after:?} after the waiter's grant: {reason}");
    granted.release().await.unwrap();
    holder.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_open_path_a_stranger_rewriting_the_holders_znode_is_told_too() {
    let root = support::unique_root("open-rewrite");
    let a = backend(&root, None).await;
    let holder = a.locker("holder").unwrap().lock("k", None).await.unwrap();
    let stranger = stranger(None).await;
    let znode = holders_znode(&stranger, &a.lock_dir("k"), 1).await;
    stranger.set_data(&znode, b"mine now", None).await.expect("the open ACL lets it write");
    let (reason, _) = told(&holder, Duration::from_secs(2)).await;
    assert!(reason.contains("rewritten by another client"), "{reason}");
    holder.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_guard_is_not_told_its_own_delete() {
    let root = support::unique_root("own-delete");
    let a = backend(&root, None).await;
    let locker = a.locker("holder").unwrap();
    for _ in 0..20 {
        let guard = locker.lock("k", None).await.unwrap();
        let mut states = guard.watch_lease();
        guard.release().await.unwrap();
        // Whatever the monitor saw of our own delete, the guard went from Held to Released.
        assert_eq!(*states.borrow_and_update(), LeaseState::Released);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(*states.borrow(), LeaseState::Released);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_credentials_a_stranger_cannot_delete_or_rewrite_the_holders_znode() {
    let root = support::unique_root("secured-stranger");
    let a = backend(&root, Some(locker_credentials())).await;
    let b = backend(&root, Some(locker_credentials())).await;
    let holder = a.locker("holder").unwrap().lock("k", None).await.unwrap();
    let waiter = b.locker("waiter").unwrap();
    let waiting = tokio::spawn(async move { waiter.lock("k", None).await });

    // The holder's own identity lists the directory to name the znode for the strangers.
    let own = stranger(Some(&format!("locker:{PASSWORD}"))).await;
    let znode = holders_znode(&own, &a.lock_dir("k"), 2).await;
    for who in [None, Some("locker:wrong-password"), Some("someone-else:whatever")] {
        let s = stranger(who).await;
        assert_eq!(s.delete(&znode, None).await, Err(zk::Error::NoAuth), "{who:?} deleted it");
        assert_eq!(s.set_data(&znode, b"x", None).await.map(|_| ()), Err(zk::Error::NoAuth));
        assert!(
            matches!(s.list_children(&a.lock_dir("k")).await, Err(zk::Error::NoAuth)),
            "{who:?} may not even list the queue"
        );
    }
    // Nothing changed: the holder still holds, the waiter still waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(holder.lease_state(), LeaseState::Held);
    assert!(!waiting.is_finished(), "the waiter was granted");
    holder.release().await.unwrap();
    let granted = waiting.await.unwrap().unwrap();
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contender_with_the_wrong_password_or_none_is_refused_clearly() {
    let root = support::unique_root("secured-refused");
    let a = backend(&root, Some(locker_credentials())).await;
    // The lock's directory is made, with the creator-only ACL, by the first lock.
    a.locker("holder").unwrap().lock("k", None).await.unwrap().release().await.unwrap();

    let wrong = Credentials::new("locker", Secret::new("wrong-password-91c2"));
    for (credentials, whose) in
        [(Some(wrong), "digest user 'locker'"), (None, "an unauthenticated session")]
    {
        let b = backend(&root, credentials).await;
        let start = Instant::now();
        let e = b.locker("intruder").unwrap().lock("k", Some(Duration::from_secs(5))).await;
        let Err(LockError::Backend { kind, source: message, .. }) = e else {
            panic!("{whose}: expected a refusal, got {e:?}");
        };
        assert_eq!(kind, BackendErrorKind::Refused, "{whose}: {message}");
        assert_eq!(message.downcast_ref::<zk::Error>(), Some(&zk::Error::NoAuth), "{message}");
        assert!(start.elapsed() < Duration::from_secs(2), "{whose}: {:?}", start.elapsed());
        assert!(message.to_string().contains("not authorised (NoAuth)"), "{message}");
        assert!(message.to_string().contains(whose), "{message}");
        assert!(message.to_string().contains(&a.lock_dir("k")), "{message}");
        assert!(!message.to_string().contains("password-"), "a password in {message}");
        let e = b.locker("intruder").unwrap().try_lock("k").await.unwrap_err();
        assert!(e.to_string().contains("NoAuth"), "{e}");
        assert_eq!(e.backend_kind(), Some(BackendErrorKind::Refused), "{e}");
    }
}

#[tokio::test]
async fn a_creator_acl_without_credentials_is_a_config_error() {
    let config = ZkConfig { acl: Some(lock_zookeeper::NodeAcl::Creator), ..ZkConfig::default() };
    let e = ZkBackend::connect_with(&support::shared().hosts(), config).await.unwrap_err();
    assert!(matches!(&e, LockError::Config(m) if m.contains("needs credentials")), "{e}");
}
