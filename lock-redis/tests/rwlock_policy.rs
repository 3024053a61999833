//! The Redis reader-writer lock beyond the shared suite, on the test binary's `redis-server`:
//! what each writer policy does to a writer under a stream of overlapping readers (the
//! readers-first lock, Redisson's policy, keeps it out for as long as the stream lasts; the
//! FIFO lock lets it in once the readers ahead of it leave), and that nothing of an ask stays
//! on the server after a release, a timeout or a dropped `lock` future.

use crate::support::unique_prefix;

use lock_core::{Access, LockError, RwLocker, WriterPolicy};
use lock_redis::{RedisBackend, RedisConnectConfig, RedisRwLock, RwLockConfig};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A backend of its own on the shared server, keys under `prefix`.
async fn backend(prefix: &str) -> RedisBackend {
    let config = RedisConnectConfig { key_prefix: prefix.into(), ..RedisConnectConfig::default() };
    RedisBackend::connect_with(&test_servers::shared_redis().url(), config).await.expect("connect")
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

/// One read hold of the stream.
struct Read {
    requested: Instant,
    granted: Instant,
}

/// What a writer met under a stream of readers.
struct Starved {
    /// From the write ask to its grant.
    waited: Duration,
    /// Whether it was granted before the stream stopped.
    granted_during_stream: bool,
    /// Reads asked for after the writer was in line and granted before it.
    passed: usize,
}

/// Four readers, each holding for 1 s and asking again at once, staggered by 250 ms, so that
/// some reader always holds while the stream runs (5 s); a writer asks 1 s into it.
async fn writer_under_a_stream_of_readers(policy: WriterPolicy) -> Starved {
    let prefix = unique_prefix("rw-stream");
    let config = RwLockConfig::new(Duration::from_secs(10)).with_policy(policy);
    let stream = Duration::from_secs(5);
    let start = Instant::now();
    let stop = start + stream;
    let reads = Arc::new(Mutex::new(Vec::<Read>::new()));
    let mut readers = Vec::new();
    for i in 0..4u32 {
        let lock = backend(&prefix).await.rwlock(&format!("reader-{i}"), config).unwrap();
        let reads = reads.clone();
        readers.push(tokio::spawn(async move {
            tokio::time::sleep_until(start + Duration::from_millis(250) * i).await;
            while Instant::now() < stop {
                let requested = Instant::now();
                let g = lock.read("stream", None).await.expect("read");
                let granted = Instant::now();
                tokio::time::sleep(Duration::from_secs(1)).await;
                reads.lock().unwrap().push(Read { requested, granted });
                g.release().await.expect("release");
            }
        }));
    }
    let writer = backend(&prefix).await.rwlock("writer", config).unwrap();
    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    let asked = Instant::now();
    let w = writer.write("stream", None).await.expect("write");
    let granted = Instant::now();
    // In line from its first poll's answer (the FIFO lock records it); at the latest, when
    // asked, plus a poll's round trip.
    let in_line = w.queued_at().unwrap_or(asked + Duration::from_millis(100));
    w.release().await.expect("release");
    for r in readers {
        r.await.expect("reader task");
    }
    let passed = reads
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.requested > in_line && r.granted < granted)
        .count();
    Starved { waited: granted - asked, granted_during_stream: granted < stop, passed }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_first_keeps_a_writer_out_for_as_long_as_readers_overlap() {
    let s = writer_under_a_stream_of_readers(WriterPolicy::ReadersFirst).await;
    eprintln!(
        "readers first: the writer waited {:?}, passed by {} later reads",
        s.waited, s.passed
    );
    assert!(
        !s.granted_during_stream,
        "the writer was granted after {:?}, while readers still overlapped",
        s.waited
    );
    assert!(s.passed >= 4, "only {} later reads passed the waiting writer", s.passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_lets_a_writer_in_once_the_readers_ahead_of_it_leave() {
    let s = writer_under_a_stream_of_readers(WriterPolicy::Fifo).await;
    eprintln!("FIFO: the writer waited {:?}, passed by {} later reads", s.waited, s.passed);
    assert_eq!(s.passed, 0, "reads that asked after the writer was in line were granted first");
    // The reads ahead of it hold for 1 s at most; the rest is polling and a loaded machine.
    assert!(s.waited < Duration::from_millis(2500), "the writer waited {:?}", s.waited);
    assert!(s.granted_during_stream);
}

/// The lock's keys but the counter, which must stay.
fn queue_keys(lock: &RedisRwLock, id: &str) -> Vec<String> {
    let base = lock.key(id);
    vec![format!("{base}/expiry"), format!("{base}/asks"), base]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_stays_after_a_release_a_timeout_or_a_dropped_ask() {
    let prefix = unique_prefix("rw-clean");
    // A TTL far beyond the test: anything left behind would block it, not expire.
    let config = RwLockConfig::new(Duration::from_secs(60));
    let a = Arc::new(backend(&prefix).await.rwlock("a", config).unwrap());
    let b = Arc::new(backend(&prefix).await.rwlock("b", config).unwrap());
    let keys = queue_keys(&a, "clean");

    let r = a.read("clean", None).await.expect("read");
    assert_eq!(existing(&keys).await, 3);
    match b.write("clean", Some(Duration::from_millis(300))).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    // A write ask whose future is dropped while it waits.
    let dropped = {
        let b = b.clone();
        tokio::spawn(async move { b.write("clean", None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!dropped.is_finished());
    dropped.abort();
    let _ = dropped.await;
    // Both write asks are gone: a reader that asks now is not behind a writer.
    let start = Instant::now();
    let r2 = tokio::time::timeout(Duration::from_secs(2), b.read("clean", None))
        .await
        .expect("a timed-out or dropped write ask still blocks readers")
        .expect("read");
    assert!(start.elapsed() < Duration::from_secs(2));
    r.release().await.expect("release");
    r2.release().await.expect("release");
    assert_eq!(existing(&keys).await, 0, "keys of a free lock left on the server");
    let w = a.try_lock("clean", Access::Write).await.expect("try write");
    let w = w.expect("a free lock refused to try_lock");
    let token = w.token();
    w.release().await.expect("release");
    assert_eq!(existing(&keys).await, 0);
    let counter: u64 = redis::cmd("GET")
        .arg(format!("{}/fence", a.key("clean")))
        .query_async(&mut probe().await)
        .await
        .expect("GET the counter");
    assert!(counter >= token, "the counter {counter} went below a token {token}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_holder_leaves_the_line_when_its_lease_ends_on_the_server() {
    let prefix = unique_prefix("rw-abandon");
    let ttl = Duration::from_millis(1500);
    let config = RwLockConfig::new(ttl);
    let a = backend(&prefix).await.rwlock("a", config).unwrap();
    let b = backend(&prefix).await.rwlock("b", config).unwrap();
    let w = a.write("abandoned", None).await.expect("write");
    let token = w.token();
    let abandoned = Instant::now();
    w.abandon();
    let r = b.read("abandoned", Some(ttl * 4)).await.expect("read after the lease ended");
    let waited = abandoned.elapsed();
    assert!(
        waited + Duration::from_millis(100) >= ttl,
        "granted after {waited:?}, within the lease"
    );
    assert!(r.token() > token);
    r.release().await.expect("release");
}
