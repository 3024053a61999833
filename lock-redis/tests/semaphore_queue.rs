//! The Redis semaphore beyond the shared suite, on the test binary's `redis-server`: an ask of
//! every permit is not starved by a stream of 1-permit acquires (the line is FIFO), the size
//! is refused while a waiter (not only a holder) uses another and accepted again once the
//! semaphore is idle, leases end by the server's clock, and nothing but the counter stays on
//! the server once every ask is gone.

use crate::support::unique_prefix;

use lock_core::{LockError, Semaphore, UsageError};
use lock_redis::{RedisBackend, RedisConnectConfig, RedisSemaphore, SemaphoreConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A backend of its own on the shared server, keys under `prefix`.
async fn backend(prefix: &str) -> RedisBackend {
    let config = RedisConnectConfig { key_prefix: prefix.into(), ..RedisConnectConfig::default() };
    RedisBackend::connect_with(&test_servers::shared_redis().url(), config).await.expect("connect")
}

async fn semaphore(prefix: &str, owner: &str, ttl: Duration) -> Arc<RedisSemaphore> {
    Arc::new(backend(prefix).await.semaphore(owner, SemaphoreConfig::new(ttl)).unwrap())
}

/// A connection for looking at the server's keys.
async fn probe() -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(test_servers::shared_redis().url()).expect("client");
    client.get_multiplexed_async_connection().await.expect("probe connection")
}

/// How many of `keys` exist.
async fn existing(keys: &[String]) -> i64 {
    redis::cmd("EXISTS").arg(keys).query_async(&mut probe().await).await.expect("EXISTS")
}

/// The semaphore's keys but the counter, which must stay.
fn queue_keys(s: &RedisSemaphore, id: &str) -> Vec<String> {
    let base = s.key(id);
    vec![format!("{base}/expiry"), format!("{base}/asks"), format!("{base}/size"), base]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ask_of_every_permit_is_not_starved_by_single_permits() {
    let prefix = unique_prefix("sem-stream");
    let ttl = Duration::from_secs(10);
    let (n, stream) = (3u32, Duration::from_secs(5));
    let start = Instant::now();
    let stop = start + stream;
    // Three holders of one permit each, holding 1 s and asking again at once, staggered: some
    // permit is always held while the stream runs.
    let grants = Arc::new(Mutex::new(Vec::<(Instant, Instant)>::new()));
    let mut holders = Vec::new();
    for i in 0..n {
        let s = semaphore(&prefix, &format!("one-{i}"), ttl).await;
        let grants = grants.clone();
        holders.push(tokio::spawn(async move {
            tokio::time::sleep_until(start + Duration::from_millis(300) * i).await;
            while Instant::now() < stop {
                let requested = Instant::now();
                let p = s.acquire("stream", n, 1, None).await.expect("acquire one");
                grants.lock().unwrap().push((requested, Instant::now()));
                tokio::time::sleep(Duration::from_secs(1)).await;
                p.release().await.expect("release");
            }
        }));
    }
    let all = semaphore(&prefix, "all", ttl).await;
    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    let asked = Instant::now();
    let p = all.acquire("stream", n, n, None).await.expect("acquire all");
    let granted = Instant::now();
    let in_line = p.queued_at().expect("a FIFO grant records its place in line");
    assert_eq!(p.tokens().len(), n as usize);
    p.release().await.expect("release");
    for h in holders {
        h.await.expect("holder task");
    }
    let passed =
        grants.lock().unwrap().iter().filter(|(req, got)| *req > in_line && *got < granted).count();
    eprintln!(
        "an ask of {n} of {n} permits waited {:?}; {passed} later asks passed it",
        granted - asked
    );
    assert_eq!(passed, 0, "1-permit asks made after it was in line were granted first");
    // The holders ahead of it hold for 1 s at most; the rest is polling and a loaded machine.
    assert!(granted - asked < Duration::from_millis(2500), "waited {:?}", granted - asked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_size_is_refused_while_a_waiter_uses_another_and_free_once_idle() {
    let prefix = unique_prefix("sem-size");
    let ttl = Duration::from_secs(30);
    let (a, b, c) = (
        semaphore(&prefix, "a", ttl).await,
        semaphore(&prefix, "b", ttl).await,
        semaphore(&prefix, "c", ttl).await,
    );
    let keys = queue_keys(&a, "sized");
    let held = a.acquire("sized", 2, 2, None).await.expect("acquire");
    let waiter = {
        let b = b.clone();
        tokio::spawn(async move { b.acquire("sized", 2, 1, None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.release().await.expect("release");
    let waiting = waiter.await.expect("waiter task").expect("acquire");
    // Only the waiter's grant is in line now; a size of 3 is refused, and writes nothing.
    let asks_before: i64 = redis::cmd("HLEN")
        .arg(format!("{}/asks", a.key("sized")))
        .query_async(&mut probe().await)
        .await
        .unwrap();
    for r in [c.try_acquire("sized", 3, 1).await, c.acquire("sized", 3, 1, None).await.map(Some)] {
        match r {
            Err(LockError::Usage(UsageError::LimitMismatch { asked: 3, stored: 2, .. })) => {}
            other => panic!("expected a size mismatch, got {other:?}"),
        }
    }
    let asks_after: i64 = redis::cmd("HLEN")
        .arg(format!("{}/asks", a.key("sized")))
        .query_async(&mut probe().await)
        .await
        .unwrap();
    assert_eq!(asks_before, asks_after, "a refused ask left something in line");
    waiting.release().await.expect("release");
    assert_eq!(existing(&keys).await, 0, "keys of an idle semaphore left on the server");
    // Idle: another size is taken.
    let p = c.try_acquire("sized", 3, 3).await.expect("try_acquire").expect("an idle semaphore");
    assert_eq!(p.limit(), 3);
    p.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_end_by_the_servers_clock() {
    let prefix = unique_prefix("sem-clock");
    let ttl = Duration::from_secs(30);
    let a = semaphore(&prefix, "a", ttl).await;
    let p = a.acquire("clocked", 2, 1, None).await.expect("acquire");
    let mut conn = probe().await;
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut conn).await.unwrap();
    let now_ms = secs * 1000 + micros / 1000;
    let ends: Vec<String> = redis::cmd("ZRANGE")
        .arg(format!("{}/expiry", a.key("clocked")))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(ends.len(), 2, "one ask and its lease's end: {ends:?}");
    let left = ends[1].parse::<f64>().expect("a score") - now_ms as f64;
    let ttl_ms = ttl.as_millis() as f64;
    assert!(
        left > ttl_ms - 5_000.0 && left <= ttl_ms,
        "a lease ends {left} ms after the server's now, for a TTL of {ttl_ms} ms"
    );
    // The keys expire with the lease, so that a semaphore whose clients vanished goes too.
    let pttl: i64 = redis::cmd("PTTL").arg(a.key("clocked")).query_async(&mut conn).await.unwrap();
    assert!(pttl > 0 && pttl as f64 <= ttl_ms + 1.0, "PTTL {pttl}");
    p.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_holders_permits_return_when_its_lease_ends() {
    let prefix = unique_prefix("sem-abandon");
    let ttl = Duration::from_millis(1500);
    let a = semaphore(&prefix, "a", ttl).await;
    let b = semaphore(&prefix, "b", ttl).await;
    let p = a.acquire("abandoned", 2, 2, None).await.expect("acquire");
    let last = *p.tokens().iter().max().unwrap();
    let abandoned = Instant::now();
    p.abandon();
    let q = b.acquire("abandoned", 2, 2, Some(ttl * 4)).await.expect("acquire after the lease");
    let waited = abandoned.elapsed();
    assert!(
        waited + Duration::from_millis(100) >= ttl,
        "granted after {waited:?}, within the lease"
    );
    assert!(q.tokens().iter().all(|t| *t > last), "tokens {:?} after {last}", q.tokens());
    q.release().await.expect("release");
}
