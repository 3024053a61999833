//! The jedis-lock algorithm's known faults, shown against a real `redis-server`, and the token
//! lock beside it in the same situations; plus connection failures and configuration errors.

use crate::support;

use lock_core::conformance::Fixture as _;
use lock_core::time::{LocalClock, PhysicalClock};
use lock_core::{BackendErrorKind, LeaseState, LockError, Locker};
use lock_redis::{JedisConfig, RedisBackend, RedisConnectConfig, TokenConfig};
use std::time::{Duration, Instant};
use support::RedisFixture;

const EXPIRY: Duration = Duration::from_secs(1);

fn jedis() -> lock_redis::Variant {
    lock_redis::Variant::Jedis(JedisConfig::new(EXPIRY))
}

async fn raw() -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(test_servers::shared_redis().url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Holder `a` stalls (its traffic is held, as in a long GC pause) past the expiry, `b` takes
/// the lock, `a` comes back and releases late. Returns whether a third contender then got the
/// lock while `b` still held it.
async fn late_release(
    fx: &RedisFixture,
    make: impl Fn(&RedisBackend, &str) -> Box<dyn Locker>,
) -> (bool, [u64; 3]) {
    let a = make(&fx.backend("a").await, "a");
    let b = make(&fx.backend("b").await, "b");
    let c = make(&fx.backend("c").await, "c");
    let ga = a.lock("late", None).await.expect("a locks");
    fx.with_proxy("a", |p| p.pause());
    // Past the expiry: a's renewal is stuck in the stall, so nothing extends the lock.
    let gb = tokio::time::timeout(EXPIRY * 3, b.lock("late", None))
        .await
        .expect("b gets the lock once a's expiry passed")
        .expect("b locks");
    // a's keeper gave up when the lease ran out, before b could take it; allow for scheduling.
    tokio::time::timeout(Duration::from_millis(500), ga.lost())
        .await
        .expect("a is told its lease is lost");
    fx.with_proxy("a", |p| p.resume());
    let (ta, tb) = (ga.token(), gb.token());
    ga.release().await.expect("a's late release");
    let gc = c.try_lock("late").await.expect("try_lock");
    let tc = gc.as_ref().map_or(0, |g| g.token());
    let both = gc.is_some();
    gb.release().await.expect("release b");
    if let Some(gc) = gc {
        gc.release().await.expect("release c");
    }
    (both, [ta, tb, tc])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jedis_late_release_deletes_the_next_holders_lock() {
    let fx = RedisFixture::new("late-jedis", jedis(), EXPIRY).await;
    let (both, [ta, tb, tc]) =
        late_release(&fx, |be, name| Box::new(be.jedis(name, JedisConfig::new(EXPIRY)).unwrap()))
            .await;
    assert!(both, "FAULT NOT SHOWN: c should have got the lock b still held, after a's late DEL");
    // Fencing is what downstream storage can still rely on: each grant has a greater token.
    assert!(ta < tb && tb < tc, "tokens {ta} {tb} {tc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_lock_late_release_leaves_the_next_holders_lock() {
    let fx = RedisFixture::new(
        "late-token",
        lock_redis::Variant::Token(TokenConfig::new(EXPIRY)),
        EXPIRY,
    )
    .await;
    let (both, [ta, tb, _]) =
        late_release(&fx, |be, name| Box::new(be.token(name, TokenConfig::new(EXPIRY)).unwrap()))
            .await;
    assert!(!both, "the token lock's release must not delete another holder's key");
    assert!(ta < tb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jedis_original_without_renewal_is_up_for_grabs_after_its_expiry() {
    let fx = RedisFixture::new("norenew", jedis(), EXPIRY).await;
    let original = JedisConfig::new(EXPIRY).without_renewal();
    let a = fx.backend("a").await.jedis("a", original.clone()).unwrap();
    let b = fx.backend("b").await.jedis("b", original).unwrap();
    let ga = a.lock("busy", None).await.unwrap();
    let start = Instant::now();
    // a is alive and reachable, and still loses the lock: the library has no renewal.
    let gb =
        tokio::time::timeout(EXPIRY * 3, b.lock("busy", None)).await.expect("b takes it").unwrap();
    let after = start.elapsed();
    assert!(after >= EXPIRY.mul_f64(0.9), "taken after {after:?}, before the expiry");
    assert!(
        matches!(ga.lease_state(), LeaseState::Lost(_)),
        "a must be told: {:?}",
        ga.lease_state()
    );
    assert!(gb.token() > ga.token());
    gb.release().await.unwrap();
    drop(ga);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jedis_trusts_client_clocks_so_a_fast_clock_steals_a_live_lock() {
    let fx = RedisFixture::new("skew-jedis", jedis(), EXPIRY).await;
    let a = fx.backend("a").await.jedis("a", JedisConfig::new(EXPIRY)).unwrap();
    // Ahead by more than the expiry: every expiry a writes is already in c's past.
    let fast = LocalClock::new(PhysicalClock::System, 5_000_000);
    let c = fx.backend("c").await.jedis("c", JedisConfig::new(EXPIRY).with_clock(fast)).unwrap();
    let ga = a.lock("skewed", None).await.unwrap();
    let gc = c.try_lock("skewed").await.unwrap();
    let gc = gc.expect(
        "FAULT NOT SHOWN: c's fast clock should see a's live lock as expired and GETSET it",
    );
    assert_eq!(
        ga.lease_state(),
        LeaseState::Held,
        "a holds a live, renewed lease at the moment c takes it"
    );
    // The renewal addition notices the theft only afterwards, at a's next renewal.
    let lost =
        tokio::time::timeout(EXPIRY * 2, ga.lost()).await.expect("a is told at its next renewal");
    assert!(lost.reason.contains("no longer holds"), "{lost}");
    assert!(gc.token() > ga.token(), "the thief's fencing token is greater: storage can reject a");
    gc.release().await.unwrap();
    drop(ga);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jedis_slow_clock_waits_past_a_crashed_holders_expiry() {
    let fx = RedisFixture::new("slow-jedis", jedis(), EXPIRY).await;
    let a = fx.backend("a").await.jedis("a", JedisConfig::new(EXPIRY)).unwrap();
    let slow = LocalClock::new(PhysicalClock::System, -1_500_000);
    let c = fx.backend("c").await.jedis("c", JedisConfig::new(EXPIRY).with_clock(slow)).unwrap();
    let ga = a.lock("crashed", None).await.unwrap();
    let granted = Instant::now();
    fx.with_proxy("a", |p| p.cut());
    drop(ga);
    let gc = tokio::time::timeout(EXPIRY * 5, c.lock("crashed", None))
        .await
        .expect("c gets it eventually")
        .unwrap();
    let waited = granted.elapsed();
    // The lock was free for everyone else after EXPIRY; c, 1.5 s behind, waits 1.5 s longer.
    assert!(waited >= EXPIRY + Duration::from_millis(1300), "c waited only {waited:?}");
    gc.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_lock_has_no_client_clock_to_trust() {
    // TokenConfig has no clock at all: expiry is the server's PX. A contender polls for three
    // TTLs while the holder renews, and never gets the lock.
    let ttl = EXPIRY;
    let fx =
        RedisFixture::new("skew-token", lock_redis::Variant::Token(TokenConfig::new(ttl)), ttl)
            .await;
    let a = fx.backend("a").await.token("a", TokenConfig::new(ttl)).unwrap();
    let c = fx.backend("c").await.token("c", TokenConfig::new(ttl)).unwrap();
    let ga = a.lock("skewed", None).await.unwrap();
    match c.lock("skewed", Some(ttl * 3)).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected a timeout while a renews, got {other:?}"),
    }
    assert_eq!(ga.lease_state(), LeaseState::Held);
    ga.release().await.unwrap();
    let gc = c.try_lock("skewed").await.unwrap().expect("free after release");
    gc.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_hold_what_the_protocols_say() {
    let fx = RedisFixture::new("layout", jedis(), EXPIRY).await;
    let mut raw = raw().await;
    let backend = fx.backend("a").await;
    let before = PhysicalClock::System.now_micros() / 1000;
    let g = backend
        .jedis("a", JedisConfig::new(Duration::from_secs(30)))
        .unwrap()
        .lock("layout", None)
        .await
        .unwrap();
    let after = PhysicalClock::System.now_micros() / 1000;
    let key = backend.key("layout");
    let value: i64 = redis::cmd("GET").arg(&key).query_async(&mut raw).await.unwrap();
    assert!(
        (before + 30_001..=after + 30_001).contains(&value),
        "jedis writes now + expiry + 1 ms: {value}"
    );
    let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut raw).await.unwrap();
    assert_eq!(pttl, -1, "jedis keys carry no server-side TTL");
    let fence: u64 =
        redis::cmd("GET").arg(backend.fence_key("layout")).query_async(&mut raw).await.unwrap();
    assert_eq!(fence, g.token());
    g.release().await.unwrap();
    let exists: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw).await.unwrap();
    assert!(!exists, "release is DEL");

    let g = backend
        .token("a", TokenConfig::new(Duration::from_secs(5)))
        .unwrap()
        .lock("layout", None)
        .await
        .unwrap();
    let value: String = redis::cmd("GET").arg(&key).query_async(&mut raw).await.unwrap();
    assert!(value.starts_with("a:"), "token is owner:random, got {value}");
    let pttl: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut raw).await.unwrap();
    assert!((4_000..=5_000).contains(&pttl), "SET ... PX 5000 gives a TTL of 5 s: {pttl}");
    assert!(g.token() > fence, "one counter per lock id, shared by both variants");
    g.release().await.unwrap();
    let exists: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw).await.unwrap();
    assert!(!exists);
}

#[tokio::test]
async fn unreachable_server_fails_fast_naming_the_address() {
    let start = Instant::now();
    let err =
        RedisBackend::connect("redis://127.0.0.1:1/").await.expect_err("nothing listens on port 1");
    let took = start.elapsed();
    match &err {
        LockError::Backend { backend, source: message, .. } => {
            assert_eq!(*backend, "redis");
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
    let url = format!("redis://{}/", closed.addr());
    let err = RedisBackend::connect(&url).await.expect_err("nothing listens there");
    let LockError::Backend { backend: "redis", kind, source } = &err else { panic!("{err:?}") };
    assert!(
        matches!(kind, BackendErrorKind::Unavailable | BackendErrorKind::Timeout),
        "an outage, not a refusal: {kind} {err}"
    );
    assert!(kind.is_transient(), "{err}");
    assert!(source.to_string().contains(&closed.addr().to_string()), "names the address: {err}");
    let driver = source.downcast_ref::<redis::RedisError>().expect("the driver's error");
    assert!(driver.is_connection_refusal() || driver.is_io_error(), "{driver:?}");
    assert!(source.to_string().ends_with(&driver.to_string()), "{err}");
}

#[tokio::test]
async fn silent_server_fails_within_the_timeouts() {
    // Accepts connections and never answers, like a hung server.
    let silent = test_servers::SilentServer::start().await;
    let addr = silent.addr();
    let config = RedisConnectConfig {
        connect_timeout: Duration::from_secs(1),
        response_timeout: Duration::from_secs(1),
        ..RedisConnectConfig::default()
    };
    let start = Instant::now();
    let err = RedisBackend::connect_with(&format!("redis://{addr}/"), config)
        .await
        .expect_err("silent server");
    let took = start.elapsed();
    assert!(
        matches!(&err, LockError::Backend { source: message, .. } if message.to_string().contains(&addr.to_string())),
        "{err}"
    );
    assert_eq!(err.backend_kind(), Some(BackendErrorKind::Timeout), "{err}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[tokio::test]
async fn bad_urls_and_settings_are_config_errors() {
    assert!(matches!(RedisBackend::connect("not a url").await, Err(LockError::Config(_))));
    let backend = RedisBackend::connect(&test_servers::shared_redis().url()).await.unwrap();
    assert!(matches!(
        backend.jedis("a", JedisConfig::new(Duration::ZERO)),
        Err(LockError::Config(_))
    ));
    assert!(matches!(
        backend.token("a", TokenConfig::new(Duration::ZERO)),
        Err(LockError::Config(_))
    ));
    let bad_renewal = TokenConfig {
        renew_every: Duration::from_secs(20),
        ..TokenConfig::new(Duration::from_secs(10))
    };
    assert!(matches!(backend.token("a", bad_renewal), Err(LockError::Config(_))));
    assert!(matches!(
        backend.token("a/b", TokenConfig::default()),
        Err(LockError::InvalidId { .. })
    ));
    assert!(matches!(backend.jedis("", JedisConfig::default()), Err(LockError::InvalidId { .. })));
}

#[tokio::test]
async fn jedis_acquire_uses_the_configured_acquire_timeout() {
    let fx = RedisFixture::new("acquire", jedis(), EXPIRY).await;
    let cfg =
        JedisConfig::new(Duration::from_secs(10)).with_acquire_timeout(Duration::from_millis(300));
    let a = fx.backend("a").await.jedis("a", cfg.clone()).unwrap();
    let b = fx.backend("b").await.jedis("b", cfg).unwrap();
    let g = a.acquire("acq").await.unwrap();
    let start = Instant::now();
    assert!(matches!(b.acquire("acq").await, Err(LockError::Timeout { .. })));
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(300) && took < Duration::from_millis(1500), "{took:?}");
    g.release().await.unwrap();
    b.acquire("acq").await.unwrap().release().await.unwrap();
}

/// A server that stops answering for longer than the response timeout, then answers again:
/// the lock call rides it out within its own deadline (the failed attempts are retried after a
/// backoff) instead of failing at the first timeout; its token is a fresh grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_call_retries_a_stall_within_its_deadline() {
    let fx =
        RedisFixture::new("stall", lock_redis::Variant::Token(TokenConfig::new(EXPIRY)), EXPIRY)
            .await;
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    fx.with_proxy("a", |p| p.pause());
    let started = Instant::now();
    let asking = tokio::spawn(async move { a.lock("stall", Some(Duration::from_secs(20))).await });
    // Past the 2 s response timeout: at least one attempt has failed transiently.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!asking.is_finished(), "the call is still retrying, not failed");
    fx.with_proxy("a", |p| p.resume());
    let guard = asking.await.unwrap().expect("granted once the server answers again");
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert!(b.try_lock("stall").await.expect("b asks").is_none(), "a holds it");
    guard.release().await.expect("release");
    assert!(b.try_lock("stall").await.expect("b asks").is_some(), "released");
}

/// The same stall past the call's deadline: the call reports the server's error (transient,
/// naming what did not answer), not a plain timeout, so the caller learns why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_past_the_deadline_reports_the_servers_error() {
    let fx = RedisFixture::new(
        "stall-out",
        lock_redis::Variant::Token(TokenConfig::new(EXPIRY)),
        EXPIRY,
    )
    .await;
    let a = fx.locker("a").await;
    fx.with_proxy("a", |p| p.pause());
    let err = a.lock("stall-out", Some(Duration::from_secs(3))).await.expect_err("stalled");
    assert!(err.is_transient(), "the server's own error: {err}");
    fx.with_proxy("a", |p| p.resume());
}
