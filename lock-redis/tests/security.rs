//! Locks a production Redis can run: ACL users, and a holder told at once when
//! another client changes its key.
//!
//! - On a secured server (default user off; `locker` may run the locks' commands on its key
//!   prefix, `other` the same commands on `other:*` only; passwords drawn at random per run): a
//!   wrong password, no credentials and a user whose key pattern misses the lock's keys each
//!   fail with a [`LockError::Backend`] that names the server, the user and what was refused,
//!   never the password, within the connect and response timeouts; a client of the other
//!   identity cannot touch the holder's key.
//! - On an open server: a stranger that deletes or overwrites the holder's key is reported to
//!   the holder at once (Redis's tracking invalidation), long before its next renewal, and a
//!   waiter gets the lock: the unsafety an ACL user per application prevents.
//! - Tracking across a reconnect: re-armed on the new connection, and while there is none the
//!   holder falls back to its renewal.

use crate::support;

use lock_core::secret::{Credentials, Secret};
use lock_core::{BackendError, BackendErrorKind, LeaseState, LockError, LockGuard, Locker};
use lock_redis::{RedisBackend, RedisConnectConfig, TokenConfig, TokenLock};
use redis::RedisError;
use std::time::{Duration, Instant};
use support::{secured_redis, unique_prefix, Secured, SECURE_TAG};
use test_servers::{redis_call, redis_call_as, shared_redis, Proxy, Reply};

/// Every refusal must come within these (and well within a test's patience).
const CONNECT: Duration = Duration::from_secs(1);
const RESPONSE: Duration = Duration::from_secs(1);

/// Long enough that a holder's first renewal (at `TTL / 2`) never comes within a test.
const LONG_TTL: Duration = Duration::from_secs(30);

/// How soon a holder must be told of a stranger's change: a push on loopback, then one
/// renewal script that checks, with margin for a loaded 2-core machine.
const TOLD_WITHIN: Duration = Duration::from_secs(2);

fn config(prefix: &str, credentials: Option<Credentials>) -> RedisConnectConfig {
    RedisConnectConfig {
        connect_timeout: CONNECT,
        response_timeout: RESPONSE,
        key_prefix: prefix.to_string(),
        credentials,
        ..RedisConnectConfig::default()
    }
}

/// The secured server, started off the async runtime.
async fn secured() -> &'static Secured {
    tokio::task::spawn_blocking(secured_redis).await.expect("a secured redis-server")
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

/// Connect to `url` expecting a refusal: its message, checked to come in time and to name the
/// server and never `password`.
async fn refused(url: &str, config: RedisConnectConfig, password: &str) -> String {
    let start = Instant::now();
    let err = RedisBackend::connect_with(url, config).await.expect_err("refused");
    let took = start.elapsed();
    let LockError::Backend { backend: "redis", kind, source } = err else { panic!("{err:?}") };
    let message = source.to_string();
    eprintln!("refused after {took:?}: {message}");
    assert_eq!(kind, BackendErrorKind::Refused, "a refusal, not an outage: {message}");
    assert!(!kind.is_transient(), "{message}");
    assert!(driver_error::<RedisError>(&source).is_some(), "keeps the driver's error: {message}");
    assert!(took < CONNECT + RESPONSE, "refused after {took:?}: {message}");
    assert!(!message.contains(password), "the password leaked: {message}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_refused_naming_the_server_and_the_user() {
    let s = secured().await;
    let prefix = unique_prefix(SECURE_TAG);
    let wrong = format!("{}-not", s.locker.password());
    let credentials = Some(Credentials::new("locker", Secret::new(wrong.clone())));
    let message = refused(&s.server.url(), config(&prefix, credentials.clone()), &wrong).await;
    assert!(message.contains(&s.server.url()), "names the server: {message}");
    assert!(message.contains("as user 'locker'"), "names the user: {message}");
    assert!(message.contains("WRONGPASS"), "says what was refused: {message}");
    assert!(!message.contains(s.locker.password()), "{message}");
    // Without tracking (RESP2: AUTH, whose refusal the driver words itself).
    let resp2 = RedisConnectConfig { tracking: false, ..config(&prefix, credentials) };
    let message = refused(&s.server.url(), resp2, &wrong).await;
    assert!(message.contains("as user 'locker': authentication refused"), "{message}");

    // The URL form: its password redacted from the address too.
    let url = s.server.url_as(&s.locker).replace(s.locker.password(), &wrong);
    let message = refused(&url, config(&prefix, None), &wrong).await;
    assert!(message.contains("redis://***@127.0.0.1:"), "the URL redacted: {message}");
    assert!(message.contains("as user 'locker'") && message.contains("WRONGPASS"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_on_a_server_whose_default_user_is_off_is_refused() {
    let s = secured().await;
    for tracking in [true, false] {
        let config = RedisConnectConfig { tracking, ..config("x:", None) };
        let message = refused(&s.server.url(), config, s.locker.password()).await;
        assert!(message.contains(&s.server.url()), "{message}");
        assert!(message.contains("without credentials"), "{message}");
        assert!(message.contains("NOAUTH"), "{message}");
        assert!(message.contains("RedisConnectConfig::credentials"), "says what to do: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_whose_key_pattern_misses_the_locks_keys_fails_at_once_not_in_a_loop() {
    let s = secured().await;
    let prefix = unique_prefix(SECURE_TAG);
    let credentials = Some(Secured::credentials(&s.other));
    // Connecting needs no key: it succeeds.
    let backend = RedisBackend::connect_with(&s.server.url(), config(&prefix, credentials))
        .await
        .expect("connect as other");
    let lock = backend.token("o", TokenConfig::default()).unwrap();
    let start = Instant::now();
    let err = lock.lock("x", Some(Duration::from_secs(10))).await.expect_err("NOPERM");
    let took = start.elapsed();
    let LockError::Backend { kind, source, .. } = err else { panic!("{err:?}") };
    let message = source.to_string();
    eprintln!("refused after {took:?}: {message}");
    assert_eq!(kind, BackendErrorKind::Refused, "{message}");
    let driver = driver_error::<RedisError>(&source).expect("keeps the driver's error");
    assert_eq!(driver.code(), Some("NOPERM"), "{message}");
    assert!(took < RESPONSE, "the mandatory lock gave up at once, not at its timeout: {took:?}");
    assert!(message.contains("as user 'other'"), "{message}");
    assert!(message.contains("NOPERM"), "{message}");
    assert!(message.contains(&format!("'{prefix}*'")), "names the pattern needed: {message}");
    assert!(!message.contains(s.other.password()), "{message}");
    let jedis = backend.jedis("o", lock_redis::JedisConfig::default()).unwrap();
    let err = jedis.try_lock("x").await.expect_err("NOPERM for jedis-lock too");
    assert!(err.to_string().contains("NOPERM"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_the_url_work_and_the_config_s_take_precedence() {
    let s = secured().await;
    let prefix = unique_prefix(SECURE_TAG);
    let by_url = RedisBackend::connect_with(&s.server.url_as(&s.locker), config(&prefix, None))
        .await
        .expect("the URL's credentials");
    let guard = by_url.token("u", TokenConfig::default()).unwrap().lock("x", None).await.unwrap();
    guard.release().await.unwrap();
    // `other`'s URL, `locker`'s credentials: locker's key pattern applies.
    let credentials = Some(Secured::credentials(&s.locker));
    let both = RedisBackend::connect_with(&s.server.url_as(&s.other), config(&prefix, credentials))
        .await
        .expect("the config's credentials");
    let guard = both.token("b", TokenConfig::default()).unwrap().lock("y", None).await.unwrap();
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reconnect_waits_the_longest_delay_and_says_why() {
    let s = secured().await;
    let prefix = unique_prefix(SECURE_TAG);
    let rotating = s.rotating.name();
    let config = config(&prefix, Some(Secured::credentials(&s.rotating)));
    let backend = RedisBackend::connect_with(&s.server.url(), config).await.unwrap();
    let lock = backend.token("r", TokenConfig::default()).unwrap();
    lock.try_lock("x").await.unwrap().expect("free").release().await.unwrap();
    // An operator rotates the password and drops the user's connections.
    let admin = |args: &[&str]| redis_call_as(s.server.addr(), &s.admin, args).unwrap();
    let rotated = format!(">{}-rotated", s.rotating.password());
    assert_eq!(
        admin(&["ACL", "SETUSER", rotating, "resetpass", &rotated]),
        Reply::Status("OK".into())
    );
    assert!(matches!(admin(&["CLIENT", "KILL", "USER", rotating]), Reply::Int(1)));
    tokio::time::sleep(Duration::from_millis(200)).await;

    let err = lock.try_lock("x").await.expect_err("the reconnect is refused").to_string();
    assert!(err.contains("as user 'rotating'") && err.contains("WRONGPASS"), "{err}");
    // Not retried as an outage (50 ms, then doubling): no attempt for the longest delay (1 s).
    let refused_at = Instant::now();
    while refused_at.elapsed() < Duration::from_millis(600) {
        let err = lock.try_lock("x").await.expect_err("still refused").to_string();
        assert!(err.contains("refused the backend as user 'rotating'"), "{err}");
        assert!(err.contains("next attempt in"), "no new attempt yet: {err}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let back = format!(">{}", s.rotating.password());
    assert_eq!(
        admin(&["ACL", "SETUSER", rotating, "resetpass", &back]),
        Reply::Status("OK".into())
    );
    let (again, _, took) = support::until_ok(Duration::from_secs(5), || lock.try_lock("x")).await;
    again.expect("free").release().await.unwrap();
    assert!(took < Duration::from_secs(2), "served again {took:?} after the password was restored");
}

/// `lock_id` held by a fresh backend's token lock with a long TTL.
async fn holder(
    url: &str,
    prefix: &str,
    credentials: Option<Credentials>,
) -> (TokenLock, LockGuard) {
    let backend = RedisBackend::connect_with(url, config(prefix, credentials)).await.unwrap();
    let lock = backend.token("holder", TokenConfig::new(LONG_TTL)).unwrap();
    let guard = lock.lock("x", None).await.unwrap();
    (lock, guard)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_another_identity_cannot_touch_the_holder_s_key() {
    let s = secured().await;
    let prefix = unique_prefix(SECURE_TAG);
    let locker = || Some(Secured::credentials(&s.locker));
    let (_lock, guard) = holder(&s.server.url(), &prefix, locker()).await;
    let key = format!("{prefix}x");
    for attempt in [vec!["DEL", &key], vec!["SET", &key, "mine"], vec!["GET", &key]] {
        let reply = redis_call_as(s.server.addr(), &s.other, &attempt).unwrap();
        assert!(
            matches!(&reply, Reply::Error(e) if e.starts_with("NOPERM")),
            "{attempt:?} as other: {reply:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(guard.lease_state(), LeaseState::Held, "nothing happened to the holder's key");
    let waiter = RedisBackend::connect_with(&s.server.url(), config(&prefix, locker())).await;
    let waiter = waiter.unwrap().token("waiter", TokenConfig::default()).unwrap();
    assert!(waiter.try_lock("x").await.unwrap().is_none(), "the waiter is not granted");
    // A user allowed the key (here the admin) still can, and the holder is told at once: the
    // push reaches a user without any pub/sub channel permission.
    assert_eq!(redis_call_as(s.server.addr(), &s.admin, &["DEL", &key]).unwrap(), Reply::Int(1));
    let lost = tokio::time::timeout(TOLD_WITHIN, guard.lost()).await.expect("told at once");
    assert!(lost.reason.contains("was changed or deleted by another client"), "{lost}");
}

/// A stranger (any client of the open server: no ACL user per application) runs `change` on
/// the holder's key: the holder must be told at once, with the reason, and a waiter gets the
/// lock once the key is free. This is what an ACL user per application prevents (the test
/// above): nothing in the lock can stop a client allowed to write its keys.
async fn a_stranger_changes_the_key(change: &[&str], reason: &str) {
    let server = shared_redis();
    let prefix = unique_prefix("stranger");
    let (_lock, guard) = holder(&server.url(), &prefix, None).await;
    let key = format!("{prefix}x");
    let args: Vec<&str> =
        change.iter().map(|a| if *a == "KEY" { key.as_str() } else { a }).collect();
    let changed = Instant::now();
    redis_call(server.addr(), &args).unwrap();
    let lost = tokio::time::timeout(TOLD_WITHIN, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("not told within {TOLD_WITHIN:?} of {args:?}"));
    let told = changed.elapsed();
    eprintln!("{args:?}: told after {told:?}: {lost}");
    assert!(lost.reason.contains("was changed or deleted by another client"), "{lost}");
    assert!(lost.reason.contains(reason), "{lost}");
    assert!(lost.reason.contains(&key), "{lost}");
    let waiter = RedisBackend::connect_with(&server.url(), config(&prefix, None)).await.unwrap();
    let waiter = waiter.token("waiter", TokenConfig::default()).unwrap();
    let granted = waiter.lock("x", Some(Duration::from_secs(2))).await.expect("the waiter");
    granted.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_s_del_is_reported_to_the_holder_at_once() {
    a_stranger_changes_the_key(&["DEL", "KEY"], "it no longer exists").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_s_set_is_reported_to_the_holder_at_once() {
    // With a TTL of its own, so that the waiter gets the lock once it expires.
    let change = ["SET", "KEY", "stranger", "PX", "300"];
    a_stranger_changes_the_key(&change, "it now holds another client's token").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_keep_the_key_tracked() {
    let server = shared_redis();
    let prefix = unique_prefix("renewed");
    let backend = RedisBackend::connect_with(&server.url(), config(&prefix, None)).await.unwrap();
    let config = TokenConfig { renew_every: Duration::from_secs(1), ..TokenConfig::new(LONG_TTL) };
    let guard = backend.token("holder", config).unwrap().lock("x", None).await.unwrap();
    // Two renewals (at 1 s and 2 s), each a PEXPIRE of our own that ends the key's tracking
    // and a read that starts it again; the next renewal comes at 3 s.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    redis_call(server.addr(), &["DEL", &format!("{prefix}x")]).unwrap();
    let lost = tokio::time::timeout(Duration::from_millis(400), guard.lost())
        .await
        .expect("told by the invalidation, before the next renewal");
    assert!(lost.reason.contains("was changed or deleted by another client"), "{lost}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tracking_is_re_armed_on_a_new_connection_and_missed_changes_are_caught_by_renewal() {
    let server = shared_redis();
    let prefix = unique_prefix("rearm");
    let key = format!("{prefix}x");
    let proxy = Proxy::start(server.addr()).await;
    let url = format!("redis://{}/", proxy.addr());
    let backend = RedisBackend::connect_with(&url, config(&prefix, None)).await.unwrap();
    // No renewal within the first part: what tracks the key on the new connection is the
    // holder's read when told of it.
    let guard = backend.token("holder", TokenConfig::new(LONG_TTL)).unwrap();
    let guard = guard.lock("x", None).await.unwrap();

    // The connection breaks; another request on the backend makes a new one, and the holder,
    // told of it, reads its key there at once.
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.heal();
    let other = backend.token("other", TokenConfig::default()).unwrap();
    let (probe, _, _) = support::until_ok(Duration::from_secs(5), || other.try_lock("probe")).await;
    probe.expect("free").release().await.unwrap();
    assert_eq!(backend.connections_made(), 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    redis_call(server.addr(), &["DEL", &key]).unwrap();
    let lost = tokio::time::timeout(Duration::from_millis(500), guard.lost())
        .await
        .expect("told by the invalidation on the new connection");
    assert!(lost.reason.contains("was changed or deleted by another client"), "{lost}");

    // No connection: a change is not pushed to anyone; the holder's renewal reconnects and
    // finds it (the fallback), within one renewal interval.
    let config = TokenConfig { renew_every: Duration::from_secs(1), ..TokenConfig::new(LONG_TTL) };
    let guard = backend.token("renewing", config).unwrap().lock("x", None).await.unwrap();
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(100)).await;
    redis_call(server.addr(), &["DEL", &key]).unwrap();
    proxy.heal();
    let lost = tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("told at its next renewal");
    assert!(lost.reason.contains("no longer exists"), "{lost}");
    assert!(!lost.reason.contains("changed or deleted by another client"), "{lost}");
}
