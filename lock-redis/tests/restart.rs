//! A Redis server that restarts under its clients: contenders keep going on
//! the same backends once it is back, a holder is told its lease is lost, and what a restart
//! without persistence does to locks and fencing tokens, shown rather than hidden.
//!
//! Each test has a server of its own (a restart would disturb the binary's other tests). Run
//! with `--nocapture` to see how long the grants took to resume.

use lock_core::{LeaseState, LockError, Locker};
use lock_redis::{JedisConfig, RedisBackend, RedisConnectConfig, TokenConfig, Variant};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_servers::RedisServer;

use crate::support;
use support::until_ok;

/// Connect and response timeouts of the contenders' backends: a request during the outage must
/// fail within them.
const CONNECT: Duration = Duration::from_secs(1);
const RESPONSE: Duration = Duration::from_secs(1);

async fn backend(server: &RedisServer, tag: &str) -> RedisBackend {
    let config = RedisConnectConfig {
        connect_timeout: CONNECT,
        response_timeout: RESPONSE,
        key_prefix: format!("{tag}:"),
        ..RedisConnectConfig::default()
    };
    RedisBackend::connect_with(&server.url(), config).await.expect("connect")
}

/// Run a blocking server operation from a multi-threaded test runtime.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

/// How long after a restart requests may still fail: the longest reconnect delay (1 s by
/// default), one connect attempt, and margin for a loaded machine.
const RECOVERY: Duration = Duration::from_secs(5);
/// How long each lock call may wait (it rides out the outage until then).
const WAIT: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Tally {
    grants: AtomicU64,
    errors: AtomicU64,
    /// Errors that were not `LockError::Backend`.
    wrong: Mutex<Vec<String>>,
    /// The longest time a failed release took.
    slowest_failure: Mutex<Duration>,
    /// The longest time a failed lock call took (it retries the outage within its deadline).
    slowest_lock_failure: Mutex<Duration>,
    /// When the first grant after the restart happened.
    first_grant_after: Mutex<Option<Instant>>,
    restarted: AtomicBool,
}

impl Tally {
    fn failed(&self, e: &LockError, took: Duration) {
        self.errors.fetch_add(1, Ordering::SeqCst);
        if !matches!(e, LockError::Backend { backend: "redis", .. }) {
            self.wrong.lock().unwrap().push(e.to_string());
        }
        let mut slowest = self.slowest_failure.lock().unwrap();
        *slowest = (*slowest).max(took);
    }

    fn lock_failed(&self, e: &LockError, took: Duration) {
        self.failed(e, Duration::ZERO);
        let mut slowest = self.slowest_lock_failure.lock().unwrap();
        *slowest = (*slowest).max(took);
    }
}

/// Contenders loop lock / hold / release on one lock id; the server is stopped while they run
/// and started again once every contender has seen a failure. Grants must resume on the same
/// backends.
async fn contenders_survive_a_restart(variant: Variant, name: &str) {
    let mut server = RedisServer::start();
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut backends = Vec::new();
    let mut tasks = Vec::new();
    const CONTENDERS: usize = 4;
    for i in 0..CONTENDERS {
        let backend = backend(&server, name).await;
        let locker = backend.locker(&format!("c{i}"), variant.clone()).unwrap();
        backends.push(backend);
        let (tally, stop) = (tally.clone(), stop.clone());
        let failed_once = Arc::new(AtomicBool::new(false));
        tasks.push((
            failed_once.clone(),
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let start = Instant::now();
                    match locker.lock("restart", Some(WAIT)).await {
                        Ok(guard) => {
                            tally.grants.fetch_add(1, Ordering::SeqCst);
                            if tally.restarted.load(Ordering::SeqCst) {
                                tally
                                    .first_grant_after
                                    .lock()
                                    .unwrap()
                                    .get_or_insert_with(Instant::now);
                            }
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            let start = Instant::now();
                            if let Err(e) = guard.release().await {
                                tally.failed(&e, start.elapsed());
                                failed_once.store(true, Ordering::SeqCst);
                            }
                        }
                        Err(LockError::Timeout { .. }) => {}
                        Err(e) => {
                            tally.lock_failed(&e, start.elapsed());
                            failed_once.store(true, Ordering::SeqCst);
                            // As a client would: do not spin on a dead server.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            }),
        ));
    }
    // Let them run a while before the fault.
    let before = tokio::time::timeout(Duration::from_secs(30), async {
        while tally.grants.load(Ordering::SeqCst) < 20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(before.is_ok(), "no grants before the restart");
    let stopped = Instant::now();
    blocking(|| server.stop());
    // Down until every contender has seen the outage.
    let all_failed = tokio::time::timeout(Duration::from_secs(30), async {
        while !tasks.iter().all(|(f, _)| f.load(Ordering::SeqCst)) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(all_failed.is_ok(), "some contender never noticed the outage");
    // And down for a second at least, so that the reconnect backoff has grown past its first
    // steps: the resumption below includes it.
    tokio::time::sleep_until((stopped + Duration::from_secs(1)).into()).await;
    let grants_during = tally.grants.load(Ordering::SeqCst);
    blocking(|| server.start_again());
    let answering = Instant::now();
    tally.restarted.store(true, Ordering::SeqCst);
    let resumed = tokio::time::timeout(Duration::from_secs(30), async {
        while tally.grants.load(Ordering::SeqCst) < grants_during + 20 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    for (_, t) in tasks {
        t.await.unwrap();
    }
    assert!(resumed.is_ok(), "grants did not resume within 30 s of the server answering again");
    let first = tally.first_grant_after.lock().unwrap().expect("a grant after the restart");
    let errors = tally.errors.load(Ordering::SeqCst);
    let slowest = *tally.slowest_failure.lock().unwrap();
    eprintln!(
        "redis {name}: {} s outage; grants resumed {:?} after the server answered again ({:?} after it was stopped); \
         {errors} requests failed, the slowest in {slowest:?}; {} grants in all",
        (answering - stopped).as_secs_f64(),
        first.saturating_duration_since(answering),
        first - stopped,
        tally.grants.load(Ordering::SeqCst)
    );
    let wrong = tally.wrong.lock().unwrap();
    assert!(wrong.is_empty(), "errors other than LockError::Backend: {wrong:?}");
    assert!(errors >= CONTENDERS as u64);
    // A release: bounded by one connect attempt plus one response; a lock call: by its own
    // deadline plus its last attempt; with margin for a loaded machine.
    assert!(
        slowest < CONNECT + RESPONSE + Duration::from_secs(2),
        "a release during the outage took {slowest:?}"
    );
    let slowest_lock = *tally.slowest_lock_failure.lock().unwrap();
    assert!(
        slowest_lock < WAIT + CONNECT + RESPONSE + Duration::from_secs(2),
        "a lock call during the outage took {slowest_lock:?}"
    );
    for b in &backends {
        assert!(
            b.connections_made() >= 2,
            "each backend reconnected by itself: {}",
            b.connections_made()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_contenders_resume_after_a_server_restart() {
    contenders_survive_a_restart(Variant::Token(TokenConfig::new(Duration::from_secs(2))), "token")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jedis_contenders_resume_after_a_server_restart() {
    contenders_survive_a_restart(Variant::Jedis(JedisConfig::new(Duration::from_secs(2))), "jedis")
        .await;
}

/// A holder whose server stays down past its lease is told the lease is lost, in time: no
/// later than one TTL after its last successful renewal was sent.
async fn holder_across_a_long_outage(variant: Variant, ttl: Duration, name: &str) {
    let mut server = RedisServer::start();
    let backend = backend(&server, name).await;
    let locker = backend.locker("holder", variant).unwrap();
    let guard = locker.lock("outage", Some(Duration::from_secs(5))).await.unwrap();
    let granted = Instant::now();
    blocking(|| server.stop());
    let lost = tokio::time::timeout(ttl * 3, guard.lost())
        .await
        .expect("the holder is told its lease is lost");
    let after = granted.elapsed();
    eprintln!("redis {name}: holder told after {after:?} (TTL {ttl:?}): {lost}");
    assert!(lost.reason.contains("no renewal succeeded"), "{lost}");
    assert!(after >= ttl / 2, "told before any renewal could have been due: {after:?}");
    // Released while the server is down: a quick backend error, the guard ends anyway.
    let start = Instant::now();
    let err = guard.release().await.expect_err("the server is down");
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(
        start.elapsed() < CONNECT + RESPONSE + Duration::from_secs(2),
        "release took {:?}",
        start.elapsed()
    );
    blocking(|| server.start_again());
    // The same backend serves again; the restarted server (no persistence) has no lock.
    let (again, failures, took) = until_ok(RECOVERY, || locker.try_lock("outage")).await;
    eprintln!(
        "redis {name}: the same backend served again after {took:?} and {failures} failed requests"
    );
    assert!(again.is_some(), "the lock is free after the restart");
    again.unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_holder_is_told_its_lease_is_lost_during_an_outage() {
    let ttl = Duration::from_secs(1);
    holder_across_a_long_outage(Variant::Token(TokenConfig::new(ttl)), ttl, "token-holder").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jedis_holder_is_told_its_lease_is_lost_during_an_outage() {
    let ttl = Duration::from_secs(1);
    holder_across_a_long_outage(Variant::Jedis(JedisConfig::new(ttl)), ttl, "jedis-holder").await;
}

/// A short restart (well within the TTL) of a server without persistence: the lock key and
/// the fencing counter are gone, so another client is granted the lock while the holder's lease
/// is still valid by its own reckoning, with a **smaller** fencing token. The holder learns it
/// at its next renewal. This is unsafe, and inherent to a Redis that forgets: shown, not hidden.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_grants_a_second_holder_with_a_smaller_token() {
    let ttl = Duration::from_secs(6);
    let mut server = RedisServer::start();
    let a = backend(&server, "forget").await.token("a", TokenConfig::new(ttl)).unwrap();
    let b = backend(&server, "forget").await.token("b", TokenConfig::new(ttl)).unwrap();
    // Move the fencing counter on, so that a reset is visible.
    for _ in 0..5 {
        a.lock("forget", None).await.unwrap().release().await.unwrap();
    }
    let ga = a.lock("forget", None).await.unwrap();
    let granted = Instant::now();
    blocking(|| server.restart_after(Duration::ZERO));
    let (gb, _, _) = until_ok(RECOVERY, || b.try_lock("forget")).await;
    let gb =
        gb.expect("FAULT NOT SHOWN: the restarted server forgot a's key, so b should get the lock");
    assert!(
        granted.elapsed() < ttl / 2,
        "the restart took too long for this test to mean anything"
    );
    assert_eq!(
        ga.lease_state(),
        LeaseState::Held,
        "a still believes it holds the lock while b holds it too"
    );
    assert!(
        gb.token() < ga.token(),
        "the fencing counter restarted: b {} after a {}",
        gb.token(),
        ga.token()
    );
    let lost = tokio::time::timeout(ttl, ga.lost()).await.expect("a is told at its next renewal");
    assert!(lost.reason.contains("no longer holds"), "{lost}");
    eprintln!(
        "redis without persistence: b granted beside a; tokens a {} b {}; a told after {:?}: {lost}",
        ga.token(),
        gb.token(),
        granted.elapsed()
    );
    gb.release().await.unwrap();
    ga.release().await.unwrap();
}

/// The same restart with persistence (append-only file, fsync always): the key and the counter
/// survive, nobody else gets the lock, and the holder's next renewal succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_with_persistence_keeps_the_lock_and_the_tokens() {
    let ttl = Duration::from_secs(2);
    let mut server = RedisServer::start_persistent();
    let a = backend(&server, "keep").await.token("a", TokenConfig::new(ttl)).unwrap();
    let b = backend(&server, "keep").await.token("b", TokenConfig::new(ttl)).unwrap();
    let ga = a.lock("keep", None).await.unwrap();
    blocking(|| server.restart_after(Duration::ZERO));
    let (gb, _, _) = until_ok(RECOVERY, || b.try_lock("keep")).await;
    assert!(gb.is_none(), "a's key survived");
    // Past two renewals: a's lease is renewed on the restarted server.
    tokio::time::sleep(ttl + ttl / 2).await;
    assert_eq!(ga.lease_state(), LeaseState::Held, "a renewed its lease on the restarted server");
    let ta = ga.token();
    ga.release().await.unwrap();
    let gb = b.try_lock("keep").await.unwrap().expect("free after a's release");
    assert!(gb.token() > ta, "the fencing counter survived");
    gb.release().await.unwrap();
}
