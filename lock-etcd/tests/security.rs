//! etcd with authentication on, and what a stranger can do to a holder with and without it.
//!
//! A secured etcd of the test binary's own (`test_servers::shared_etcd_with`) has two users
//! besides `root`, each with a role that grants READWRITE on one prefix only: `locker` on
//! `/secure/`, where the tests lock, and `stranger` on `/elsewhere/`. Their passwords are made
//! up when the binary starts; none is committed. On it: the whole conformance suite as
//! `locker`; clear refusals of a wrong password, of no credentials and of a role that does not
//! cover the lock root; strangers refused when they delete a holder's key. On the open etcd of
//! `test_servers::shared_etcd`, the same deletion succeeds, and the holder is told.

use crate::support;

use etcd_client::{Client, ConnectOptions, GetOptions, PutOptions, SortOrder, SortTarget};
use lock_core::requests::RequestTally;
use lock_core::secret::{Credentials, Secret};
use lock_core::{BackendError, BackendErrorKind, LeaseState, LockError, LockGuard, Locker};
use lock_etcd::{EtcdBackend, EtcdConfig};

use std::time::{Duration, Instant};
use test_servers::{etcd_post, etcd_post_as, etcd_token, shared_etcd_with, Etcd, EtcdServer};

/// Long enough that no lease expiry or renewal can explain what a test sees.
const LONG_TTL: Duration = Duration::from_secs(30);

use support::{credentials, password, users, LOCKER, STRANGER};

/// The test binary's secured etcd.
fn secured() -> &'static EtcdServer {
    shared_etcd_with(|server| {
        server.secure(&password("root"), &users()).unwrap_or_else(|e| panic!("{e}"))
    })
}

/// A lock root under `locker`'s prefix that no other test uses.
fn secured_root(tag: &str) -> String {
    format!("/secure{}", support::unique_root(tag))
}

/// Settings for `ttl` under `root`, as `who` (if anyone).
fn config(root: &str, ttl: Duration, who: Option<Credentials>) -> EtcdConfig {
    EtcdConfig { credentials: who, ..support::config(root, ttl) }
}

async fn make_fixture(_seed: u64) -> support::EtcdFixture {
    let server = secured().addr();
    support::EtcdFixture::secured(
        server,
        secured_root("conf"),
        Duration::from_secs(2),
        credentials(LOCKER),
    )
}

// The whole suite, every contender authenticated as `locker`, whose role covers only
// `/secure/`.
lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 1,
    contenders = 12
);

#[test]
fn the_secured_server_wants_a_token_for_keys_and_answers_its_probes_without_one() {
    let server = secured();
    let range = r#"{"key":"L3NlY3VyZS8="}"#; // "/secure/"
    let anonymous = etcd_post(server.addr(), "/v3/kv/range", range).unwrap();
    assert!(anonymous.contains("user name is empty"), "{anonymous}");
    let token = etcd_token(server.addr(), LOCKER.0, &password(LOCKER.0)).unwrap();
    let read = etcd_post_as(server.addr(), "/v3/kv/range", range, &token).unwrap();
    assert!(read.contains("\"header\"") && !read.contains("error"), "{read}");
    let wrong = etcd_token(server.addr(), LOCKER.0, "wrong").unwrap_err();
    assert!(wrong.to_string().contains("authentication failed"), "{wrong}");
    // The readiness and leader probes of test-servers need no token.
    let status = etcd_post(server.addr(), "/v3/maintenance/status", "{}").unwrap();
    assert!(status.contains("\"leader\""), "{status}");
}

/// The driver's error of type `E` behind `source`: the source itself, the error inside its
/// context, or one further down its chain of sources.
fn driver_error<E: std::error::Error + 'static>(source: &BackendError) -> Option<&E> {
    if let Some(e) = source.downcast_ref::<E>() {
        return Some(e);
    }
    let mut next = std::error::Error::source(source);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// The message of a backend error, or a failure naming what came instead.
fn backend_message(err: &LockError) -> String {
    match err {
        LockError::Backend { backend, source: message, .. } => {
            assert_eq!(*backend, "etcd");
            message.to_string()
        }
        other => panic!("expected a backend error, got {other:?}"),
    }
}

/// Connect to `server` as `who`, expecting a refusal within a few seconds: its message.
async fn refused(server: &EtcdServer, who: Option<Credentials>) -> String {
    let start = Instant::now();
    let config = config(&secured_root("refused"), LONG_TTL, who);
    let err = EtcdBackend::connect_with(&server.endpoint(), config)
        .await
        .expect_err("etcd must refuse this client");
    let took = start.elapsed();
    assert!(took < Duration::from_secs(5), "refused only after {took:?}: {err}");
    assert_eq!(err.backend_kind(), Some(BackendErrorKind::Refused), "not an outage: {err}");
    let message = backend_message(&err);
    assert!(message.contains(&server.addr().to_string()), "names the endpoint: {message}");
    for secret in [password(LOCKER.0), password(STRANGER.0), password("root")] {
        assert!(!format!("{err} {err:?}").contains(&secret), "shows a password: {err:?}");
    }
    eprintln!("refused in {took:?}: {message}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_at_connect_naming_the_user_and_never_the_password() {
    let server = secured();
    let wrong = Credentials::new(LOCKER.0, Secret::new(format!("{}-wrong", password(LOCKER.0))));
    let message = refused(server, Some(wrong.clone())).await;
    assert!(message.contains("refused the credentials of user 'locker'"), "{message}");
    let config = config(&secured_root("refused"), LONG_TTL, Some(wrong));
    let err = EtcdBackend::connect_with(&server.endpoint(), config).await.expect_err("refused");
    let LockError::Backend { source, .. } = &err else { panic!("{err:?}") };
    let driver = driver_error::<etcd_client::Error>(source).expect("etcd's own error is kept");
    let etcd_client::Error::GRpcStatus(status) = driver else { panic!("{driver:?}") };
    assert!(status.message().contains("authentication failed"), "{status:?}");
    assert!(message.contains("authentication failed, invalid user ID or password"), "{message}");
    assert!(!message.contains("-wrong"), "shows the wrong password: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_credentials_is_refused_at_connect_saying_so() {
    let message = refused(secured(), None).await;
    assert!(
        message.contains("has authentication enabled and no credentials were given"),
        "{message}"
    );
    assert!(message.contains("EtcdConfig::credentials"), "says what to set: {message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_whose_role_does_not_cover_the_lock_root_is_refused_naming_it() {
    let message = refused(secured(), Some(credentials(STRANGER))).await;
    assert!(
        message.contains("denies user 'stranger' access to the lock root /secure/"),
        "{message}"
    );
    assert!(message.contains("permission denied"), "{message}");
    assert!(message.contains("READWRITE"), "says what the role needs: {message}");
}

/// A holder and a waiter queued behind it on `endpoint`, as `who`: the holder's guard, its
/// key, its backend, and the waiter's task.
async fn holder_and_waiter(
    endpoint: &str,
    root: &str,
    who: Option<Credentials>,
) -> (LockGuard, String, EtcdBackend, tokio::task::JoinHandle<Result<LockGuard, LockError>>) {
    let connect = || EtcdBackend::connect_with(endpoint, config(root, LONG_TTL, who.clone()));
    let holder = connect().await.expect("the holder connects");
    let guard = holder.locker("holder").unwrap().lock("k", None).await.unwrap();
    let waiter = connect().await.expect("the waiter connects").locker("waiter").unwrap();
    let wait = tokio::spawn(async move { waiter.lock("k", None).await });
    let prefix = holder.lock_prefix("k");
    let mut kv = holder.client().kv_client();
    let first = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let keys = kv.get(prefix.as_str(), Some(first.clone())).await.expect("read the queue");
        if keys.kvs().len() == 2 {
            let key = String::from_utf8_lossy(keys.kvs()[0].key()).into_owned();
            return (guard, key, holder, wait);
        }
        assert!(Instant::now() < until, "the waiter's key: not within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A plain etcd client on `endpoint`, as `who` (if anyone).
async fn client(endpoint: &str, who: Option<(&str, &str)>) -> Client {
    let options = who.map(|(user, _)| ConnectOptions::new().with_user(user, password(user)));
    Client::connect([endpoint], options).await.expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_secured_etcd_strangers_cannot_delete_overwrite_or_revoke_a_holders_key() {
    let server = secured();
    let endpoint = server.endpoint();
    let (guard, key, holder, wait) =
        holder_and_waiter(&endpoint, &secured_root("acl"), Some(credentials(LOCKER))).await;
    let other = client(&endpoint, Some(STRANGER)).await;
    let anonymous = client(&endpoint, None).await;
    for (who, mut c, refusal) in [
        ("a user of another identity", other, "permission denied"),
        ("a client without credentials", anonymous, "user name is empty"),
    ] {
        let deleted = c.delete(key.as_str(), None).await.expect_err(who).to_string();
        assert!(deleted.contains(refusal), "{who} deleting {key}: {deleted}");
        let put = c.put(key.as_str(), "mine", None).await.expect_err(who).to_string();
        assert!(put.contains(refusal), "{who} overwriting {key}: {put}");
        // etcd-client sends no token with lease requests; etcd checks a revoke against the
        // lease's keys, so it is refused as a client without credentials.
        let revoked = c.lease_revoke(holder.lease_id()).await.expect_err(who).to_string();
        assert!(revoked.contains("user name is empty"), "{who} revoking the lease: {revoked}");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(guard.lease_state(), LeaseState::Held, "the holder still holds");
    assert!(!wait.is_finished(), "the waiter was granted the lock while the holder held it");
    guard.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), wait).await.expect("granted");
    next.unwrap().expect("the waiter's grant").release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_open_etcd_a_stranger_that_deletes_the_holders_key_is_told_to_the_holder() {
    // Without authentication anyone who reaches etcd may delete any key. Deleting the holder's
    // key grants the lock to the next waiter while the holder's lease (30 s, so not its
    // expiry) still stands: two holders. An ACL prevents it (the test above); here the holder
    // is at least told, from the watch of its own key.
    let endpoint = support::shared().endpoint();
    let (guard, key, holder, wait) =
        holder_and_waiter(&endpoint, &support::unique_root("stranger-delete"), None).await;
    let mut stranger = client(&endpoint, None).await;
    let deleted_at = Instant::now();
    stranger.delete(key.as_str(), None).await.expect("an open etcd lets anyone delete");
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("told");
    let told = deleted_at.elapsed();
    assert!(told < Duration::from_secs(2), "told only after {told:?}");
    let expected = format!("its key {key} was deleted by another client");
    assert!(lost.reason.contains(&expected), "{lost}");
    assert!(lost.reason.contains("still stands"), "{lost}");
    let next = tokio::time::timeout(Duration::from_secs(5), wait).await.expect("granted");
    let next = next.unwrap().expect("the waiter is granted: the unsafety an ACL prevents");
    assert_eq!(holder.sessions_made(), 1, "the holder's lease never ended");
    eprintln!("holder told {told:?} after the deletion: {lost}");
    next.release().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_open_etcd_a_stranger_that_overwrites_the_holders_key_is_told_to_the_holder() {
    // A stranger's put keeps the key (and its create revision, its place) but binds it to the
    // stranger's lease: when that lease goes, so does the key, and the waiter is granted while
    // the holder's lease stands. The holder is told at the put.
    let endpoint = support::shared().endpoint();
    let (guard, key, holder, wait) =
        holder_and_waiter(&endpoint, &support::unique_root("stranger-put"), None).await;
    let mut stranger = client(&endpoint, None).await;
    let theirs = stranger.lease_grant(60, None).await.expect("a lease").id();
    let put = PutOptions::new().with_lease(theirs);
    stranger.put(key.as_str(), "mine", Some(put)).await.expect("an open etcd lets anyone write");
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await.expect("told");
    let expected = format!("its key {key} was overwritten by another client");
    assert!(lost.reason.contains(&expected), "{lost}");
    assert!(lost.reason.contains(&format!("now bound to lease {theirs:x}")), "{lost}");
    let told = Instant::now();
    stranger.lease_revoke(theirs).await.expect("the stranger revokes its lease");
    let next = tokio::time::timeout(Duration::from_secs(5), wait).await.expect("granted");
    let next = next.unwrap().expect("the waiter is granted once the stranger's lease is gone");
    assert!(told.elapsed() < Duration::from_secs(5));
    assert_eq!(holder.sessions_made(), 1, "the holder's lease never ended");
    eprintln!("holder told at the overwrite: {lost}");
    next.release().await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_token_is_replaced_and_the_caller_never_sees_it() {
    // etcd's simple tokens expire after --auth-token-ttl without use; here 1 s.
    let server = tokio::task::block_in_place(|| {
        EtcdServer::launch_with(Etcd::default().with_auth_token_ttl(1))
            .unwrap_or_else(|e| panic!("{e}"))
    });
    server.secure(&password("root"), &users()).unwrap_or_else(|e| panic!("{e}"));
    let tally = RequestTally::new();
    let config = EtcdConfig {
        requests: tally.hook(),
        ..config(&secured_root("token"), LONG_TTL, Some(credentials(LOCKER)))
    };
    let backend = EtcdBackend::connect_with(&server.endpoint(), config).await.expect("connect");
    assert_eq!(tally.of("auth", "Authenticate"), 1, "{:?}", tally.counts());
    let locker = backend.locker("a").unwrap();
    locker.lock("k", None).await.unwrap().release().await.unwrap();
    // Lease keep-alives carry no token: nothing keeps it fresh.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let guard = locker.lock("k", None).await.expect("a lock after the token expired");
    assert_eq!(tally.of("auth", "Authenticate"), 2, "one new token: {:?}", tally.counts());
    assert_eq!(tally.of("kv", "Txn"), 3, "the refused create, sent again: {:?}", tally.counts());
    guard.release().await.unwrap();
}
