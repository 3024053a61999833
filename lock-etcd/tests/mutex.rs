//! The Mutex protocol as the server sees it: keys bound to the lease and ordered by create
//! revision, first come first served, nothing left behind by timed-out, cancelled or refused
//! attempts, a stalled holder told before its lease can expire, and clear errors for an
//! unreachable server and impossible settings.

use crate::support;

use etcd_client::{Client, GetOptions};
use lock_core::{BackendErrorKind, LeaseState, LockError, Locker};
use lock_etcd::{EtcdBackend, EtcdConfig};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::EtcdFixture;

const TTL: Duration = Duration::from_secs(2);

/// The keys under `prefix`: (key, create revision, lease), in key order.
async fn keys(client: &Client, prefix: &str) -> Vec<(String, i64, i64)> {
    let mut kv = client.kv_client();
    let got = kv.get(prefix, Some(GetOptions::new().with_prefix())).await.expect("read the prefix");
    got.kvs()
        .iter()
        .map(|kv| {
            (String::from_utf8_lossy(kv.key()).into_owned(), kv.create_revision(), kv.lease())
        })
        .collect()
}

async fn wait_for<F: std::future::Future<Output = bool>>(
    mut cond: impl FnMut() -> F,
    within: Duration,
    what: &str,
) {
    let until = Instant::now() + within;
    while !cond().await {
        assert!(Instant::now() < until, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_bound_to_the_lease_and_the_token_is_the_create_revision() {
    let fx = EtcdFixture::new("keys", TTL).await;
    let a = fx.backend("a").await;
    let b = fx.backend("b").await;
    let g = a.locker("a").unwrap().lock("k", None).await.unwrap();
    let prefix = a.lock_prefix("k");
    let client = a.client();
    let held = keys(&client, &prefix).await;
    assert_eq!(held.len(), 1, "{held:?}");
    let (key, revision, lease) = &held[0];
    assert!(key.starts_with(&format!("{prefix}{:x}-", a.lease_id())), "{key}");
    assert_eq!((*revision as u64, *lease), (g.token(), a.lease_id()));

    let waiter = b.locker("b").unwrap();
    let w = tokio::spawn(async move { waiter.lock("k", None).await });
    wait_for(
        || async { keys(&client, &prefix).await.len() == 2 },
        Duration::from_secs(5),
        "the waiter's key",
    )
    .await;
    let queued = keys(&client, &prefix).await;
    let theirs =
        queued.iter().find(|k| k.2 == b.lease_id()).expect("b's key is bound to b's lease");
    assert!(theirs.1 > g.token() as i64, "a later create revision: {queued:?}");
    g.release().await.unwrap();
    let gw = w.await.unwrap().unwrap();
    assert_eq!(gw.token(), theirs.1 as u64, "the token is the waiter's own create revision");
    assert_eq!(keys(&client, &prefix).await.len(), 1, "the released key is gone");
    gw.release().await.unwrap();
    assert!(keys(&client, &prefix).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_are_first_come_first_served() {
    let fx = EtcdFixture::new("fifo", TTL).await;
    let holder = fx.backend("h").await;
    let client = holder.client();
    let prefix = holder.lock_prefix("q");
    let g = holder.locker("h").unwrap().lock("q", None).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let locker = fx.backend(&format!("w{i}")).await.locker(&format!("w{i}")).unwrap();
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = locker.lock("q", Some(Duration::from_secs(20))).await.unwrap();
            order.lock().unwrap().push(i);
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.unwrap();
        }));
        // Each waiter is queued before the next one asks.
        wait_for(
            || async { keys(&client, &prefix).await.len() == i + 2 },
            Duration::from_secs(5),
            "queued",
        )
        .await;
    }
    g.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timed_out_cancelled_and_refused_attempts_leave_no_key() {
    let fx = EtcdFixture::new("timeout", TTL).await;
    let h = fx.backend("h").await;
    let (client, prefix) = (h.client(), h.lock_prefix("t"));
    let g = h.locker("h").unwrap().lock("t", None).await.unwrap();
    let w = fx.backend("w").await.locker("w").unwrap();
    let start = Instant::now();
    match w.lock("t", Some(Duration::from_millis(500))).await {
        Err(LockError::Timeout { waited, .. }) => assert!(waited >= Duration::from_millis(500)),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(keys(&client, &prefix).await.len(), 1, "the timed-out waiter deleted its key");

    // Cancelled from outside (the future dropped): its key goes in the background.
    assert!(tokio::time::timeout(Duration::from_millis(300), w.lock("t", None)).await.is_err());
    wait_for(
        || async { keys(&client, &prefix).await.len() == 1 },
        Duration::from_secs(3),
        "cancelled key gone",
    )
    .await;

    // The soft lock on a held lock queues, sees it is not first, and leaves.
    assert!(w.try_lock("t").await.unwrap().is_none());
    assert_eq!(keys(&client, &prefix).await.len(), 1);
    g.release().await.unwrap();
    w.try_lock("t").await.unwrap().expect("free").release().await.unwrap();
    assert!(keys(&client, &prefix).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holder_is_told_before_its_lease_can_expire_and_the_next_waiter_gets_the_lock() {
    let fx = EtcdFixture::new("stall", TTL).await;
    let g = fx.backend("h").await.locker("h").unwrap().lock("s", None).await.unwrap();
    let waiter = fx.backend("w").await.locker("w").unwrap();
    let w = tokio::spawn(async move {
        let guard = waiter.lock("s", Some(Duration::from_secs(20))).await;
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A stall, not a close: no byte passes, the keep-alives go unanswered.
    let start = Instant::now();
    fx.with_proxy("h", |p| p.pause());
    let lost = tokio::time::timeout(TTL * 2, g.lost()).await.expect("holder told");
    let told = Instant::now();
    assert!(
        told - start <= TTL,
        "told after {:?}: later than the lease could have lasted",
        told - start
    );
    assert!(lost.reason.contains("keep-alive"), "{lost}");
    let (granted, guard) = w.await.unwrap();
    let guard = guard.expect("the waiter gets the lock once the holder's lease expired");
    assert!(granted > told, "the waiter was granted before the holder was told");
    eprintln!(
        "stalled holder told after {:?}; waiter granted {:?} after that",
        told - start,
        granted - told
    );
    assert!(matches!(g.lease_state(), LeaseState::Lost(_)));
    guard.release().await.unwrap();
    drop(g);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_lease_ends_fails_and_the_backend_goes_on_with_a_new_lease() {
    let fx = EtcdFixture::new("waitlost", TTL).await;
    let g = fx.backend("h").await.locker("h").unwrap().lock("l", None).await.unwrap();
    let wb = fx.backend("w").await;
    let waiter = wb.locker("w").unwrap();
    let w = tokio::spawn(async move { waiter.lock("l", None).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    fx.with_proxy("w", |p| p.pause());
    let err =
        tokio::time::timeout(TTL * 3, w).await.expect("the waiter fails").unwrap().unwrap_err();
    assert!(
        matches!(&err, LockError::LeaseLost { reason, .. } if reason.contains("our place")),
        "{err}"
    );
    fx.with_proxy("w", |p| p.resume());
    g.release().await.unwrap();
    let again = wb
        .locker("w")
        .unwrap()
        .lock("l", Some(Duration::from_secs(10)))
        .await
        .expect("a new lease");
    assert_eq!(wb.sessions_made(), 2);
    again.release().await.unwrap();
}

#[tokio::test]
async fn unreachable_server_fails_naming_the_address() {
    let start = Instant::now();
    let err = EtcdBackend::connect("http://127.0.0.1:1", TTL)
        .await
        .expect_err("nothing listens on port 1");
    let took = start.elapsed();
    match &err {
        LockError::Backend { backend, source: message, .. } => {
            assert_eq!(*backend, "etcd");
            assert!(message.to_string().contains("127.0.0.1:1"), "{message}");
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
    assert!(took < Duration::from_secs(15), "took {took:?}");
    eprintln!("unreachable: {err} ({took:?})");
}

#[tokio::test]
async fn an_unreachable_address_is_unavailable_and_keeps_the_drivers_error() {
    let closed = test_servers::ClosedPort::new();
    let err = EtcdBackend::connect(&format!("http://{}", closed.addr()), TTL)
        .await
        .expect_err("nothing listens there");
    let LockError::Backend { backend: "etcd", kind, source } = &err else { panic!("{err:?}") };
    assert!(
        matches!(kind, BackendErrorKind::Unavailable | BackendErrorKind::Timeout),
        "an outage, not a refusal: {kind} {err}"
    );
    assert!(kind.is_transient(), "{err}");
    assert!(source.to_string().contains(&closed.addr().to_string()), "names the address: {err}");
    // The driver's error: the source of the sentence that spells out its causes.
    let driver = std::error::Error::source(source).expect("a source");
    assert!(driver.downcast_ref::<etcd_client::Error>().is_some(), "{driver:?}");
}

#[tokio::test]
async fn silent_server_fails_within_the_connect_timeout() {
    let silent = test_servers::SilentServer::start().await;
    let addr = silent.addr();
    let config = EtcdConfig { connect_timeout: Duration::from_secs(3), ..EtcdConfig::default() };
    let start = Instant::now();
    let err =
        EtcdBackend::connect_with(&addr.to_string(), config).await.expect_err("silent server");
    let took = start.elapsed();
    assert!(
        matches!(&err, LockError::Backend { source: message, .. } if message.to_string().contains(&addr.to_string())),
        "{err}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[tokio::test]
async fn bad_settings_are_config_errors() {
    let endpoint = support::shared().endpoint();
    for root in ["locks", "/", "", "/a//b"] {
        let config = EtcdConfig { root: root.into(), ..EtcdConfig::default() };
        assert!(
            matches!(EtcdBackend::connect_with(&endpoint, config).await, Err(LockError::Config(_))),
            "root {root:?}"
        );
    }
    let short = EtcdConfig { lease_ttl: Duration::from_millis(500), ..EtcdConfig::default() };
    assert!(matches!(EtcdBackend::connect_with(&endpoint, short).await, Err(LockError::Config(_))));
    assert!(matches!(EtcdBackend::connect(" , ", TTL).await, Err(LockError::Config(_))));
    let backend = EtcdBackend::connect(&endpoint, TTL).await.unwrap();
    assert!(matches!(backend.locker("a/b"), Err(LockError::InvalidId { .. })));
    assert!(matches!(
        backend.locker("a").unwrap().lock("x/y", None).await,
        Err(LockError::InvalidId { .. })
    ));
}

/// A stall longer than the request timeout (3 s here) while a lock call creates its key: the
/// call retries within its own deadline instead of failing at the first timeout, and is granted
/// once the server answers again; the create whose answer was lost leaves no key behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_call_retries_a_stalled_create_within_its_deadline() {
    let fx = EtcdFixture::new("stall-create", Duration::from_secs(15)).await;
    let locker = fx.backend("a").await.locker("a").unwrap();
    fx.with_proxy("a", |p| p.pause());
    let asking = tokio::spawn(async move { locker.lock("c", Some(Duration::from_secs(30))).await });
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(!asking.is_finished(), "the call is still retrying, not failed");
    fx.with_proxy("a", |p| p.resume());
    let guard = asking.await.unwrap().expect("granted once the server answers again");
    // Only the granted key is left under the lock's prefix, once the lost create is swept.
    let mut client = Client::connect([support::shared().endpoint()], None).await.unwrap();
    let prefix = format!("{}/c/", fx.root());
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let keys = client.get(prefix.as_str(), Some(GetOptions::new().with_prefix())).await;
        let n = keys.unwrap().kvs().len();
        if n == 1 {
            break;
        }
        assert!(Instant::now() < until, "{n} keys under the lock: the lost create was not swept");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    guard.release().await.unwrap();
}
