//! Test support for the Sentinel tests: backends that find the master of a test-servers
//! [`RedisCluster`] through its Sentinels, and probes of the members.
#![allow(dead_code)]

use lock_core::LockError;
use lock_redis::{RedisBackend, RedisConnectConfig};
use std::future::Future;
use std::time::{Duration, Instant};
use test_servers::{redis_call, RedisCluster, Reply, REDIS_MASTER_NAME};

/// Connect and response timeouts of the tests' backends: a request during a failover must
/// fail within them (plus one connect timeout per Sentinel that does not answer).
pub const CONNECT: Duration = Duration::from_secs(1);
pub const RESPONSE: Duration = Duration::from_secs(1);

/// The longest a failover may take in these tests: Sentinel deems the master down after 2 s,
/// elects one of its own and promotes a replica; room for a second round on a loaded machine.
pub const FAILOVER: Duration = Duration::from_secs(20);

/// The longest a failed request may take: one attempt (the Sentinels answer at once on
/// loopback; the master's connect and response timeouts) and its own response timeout, with
/// margin for a loaded machine.
pub const SLOWEST_FAILURE: Duration = Duration::from_secs(4);

/// The cluster's Sentinels, the first as `redis://host:port/`, the others as `host:port`
/// (both forms are accepted).
pub fn sentinels(cluster: &RedisCluster) -> Vec<String> {
    let addrs = cluster.sentinel_addrs();
    let mut out: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    out[0] = format!("redis://{}/", addrs[0]);
    out
}

pub fn config(prefix: &str) -> RedisConnectConfig {
    RedisConnectConfig {
        connect_timeout: CONNECT,
        response_timeout: RESPONSE,
        key_prefix: prefix.to_string(),
        ..RedisConnectConfig::default()
    }
}

/// A backend that finds the cluster's master through its Sentinels.
pub async fn backend(cluster: &RedisCluster, prefix: &str) -> RedisBackend {
    RedisBackend::connect_sentinel(&sentinels(cluster), REDIS_MASTER_NAME, config(prefix))
        .await
        .expect("connect through Sentinel")
}

/// Run a blocking cluster operation from a multi-threaded test runtime.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

/// What a run of failing requests looked like.
#[derive(Debug, Default)]
pub struct Failures {
    pub count: u32,
    pub slowest: Duration,
    pub first: Option<String>,
}

/// Repeat `request` every 50 ms until it succeeds, for at most `bound`: every failure must be a
/// [`LockError::Backend`] that took less than [`SLOWEST_FAILURE`]. Returns the value, the
/// failures and how long it took.
pub async fn until_ok<T, F, Fut>(bound: Duration, mut request: F) -> (T, Failures, Duration)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, LockError>>,
{
    let start = Instant::now();
    let mut failures = Failures::default();
    loop {
        let sent = Instant::now();
        match request().await {
            Ok(v) => return (v, failures, start.elapsed()),
            Err(e) => {
                let took = sent.elapsed();
                assert!(matches!(e, LockError::Backend { .. }), "{e:?}");
                assert!(took < SLOWEST_FAILURE, "a failed request took {took:?}: {e}");
                failures.count += 1;
                failures.slowest = failures.slowest.max(took);
                failures.first.get_or_insert_with(|| e.to_string());
                assert!(start.elapsed() < bound, "still failing after {:?}: {e}", start.elapsed());
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// `GET key` at member `i`'s own port (whatever the faults on its proxy).
pub fn get(cluster: &RedisCluster, i: usize, key: &str) -> Reply {
    redis_call(cluster.direct_addr(i), &["GET", key]).unwrap_or_else(|e| panic!("GET at {i}: {e}"))
}

/// The first word of `ROLE` at member `i`'s own port ("master", "slave").
pub fn role(cluster: &RedisCluster, i: usize) -> String {
    match redis_call(cluster.direct_addr(i), &["ROLE"]) {
        Ok(Reply::Array(a)) => a[0].text().unwrap_or("").to_string(),
        other => panic!("ROLE at {i}: {other:?}"),
    }
}

/// Poll `what` every 50 ms until it holds, or panic after `timeout` naming `name`.
pub fn eventually(timeout: Duration, name: &str, what: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !what() {
        assert!(Instant::now() < deadline, "{name} did not happen within {timeout:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
