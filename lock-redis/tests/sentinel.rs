//! The locks through Redis Sentinel: a backend that asks the Sentinels for
//! the master, both single-server locks on it, and bad input refused fast with clear errors.
//! Failovers are `tests/sentinel_failover.rs`; the safety finding `tests/sentinel_safety.rs`.

use crate::sentinel_support;

use lock_core::{LockError, Locker};
use lock_redis::{JedisConfig, RedisBackend, TokenConfig};
use sentinel_support::{
    backend, blocking, config, get, sentinels, until_ok, FakeSentinel, CONNECT,
};
use std::time::{Duration, Instant};
use test_servers::{redis_call, shared_redis, ClosedPort, RedisCluster, RedisServer, Reply};
use test_servers::{SilentServer, REDIS_MASTER_NAME};

/// Both locks through Sentinel: their keys land on the master the Sentinels name; a name no
/// Sentinel knows is a configuration error that names it and the Sentinels, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_locks_work_through_sentinel() {
    let cluster = blocking(|| RedisCluster::sentinel(2, 3));
    let master = blocking(|| cluster.wait_for_leader(Duration::from_secs(10))).unwrap();
    let backend = backend(&cluster, "s:").await;
    let addrs = cluster.sentinel_addrs();
    let list = addrs.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    assert_eq!(backend.address(), format!("sentinel master '{REDIS_MASTER_NAME}' via {list}"));
    assert_eq!(backend.connections_made(), 1);

    let jedis = backend.jedis("j", JedisConfig::new(Duration::from_secs(5))).unwrap();
    let guard = jedis.lock("jedis", Some(Duration::from_secs(5))).await.unwrap();
    assert!(matches!(get(&cluster, master, "s:jedis"), Reply::Bulk(_)), "on the master");
    guard.release().await.unwrap();
    assert_eq!(get(&cluster, master, "s:jedis"), Reply::Nil);

    let token = backend.token("t", TokenConfig::new(Duration::from_secs(5))).unwrap();
    let guard = token.lock("token", Some(Duration::from_secs(5))).await.unwrap();
    assert_eq!(guard.token(), 1);
    let value = get(&cluster, master, "s:token");
    assert!(value.text().is_some_and(|v| v.starts_with("t:")), "on the master: {value:?}");
    assert!(token.try_lock("token").await.unwrap().is_none(), "held");
    guard.release().await.unwrap();
    assert_eq!(token.lock("token", None).await.unwrap().token(), 2);
    assert_eq!(backend.connections_made(), 1);

    let start = Instant::now();
    let err = RedisBackend::connect_sentinel(&sentinels(&cluster), "nosuchmaster", config("s:"))
        .await
        .expect_err("no Sentinel knows that name");
    eprintln!("unknown master name refused in {:?}: {err}", start.elapsed());
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.to_string().contains("'nosuchmaster'"), "{message}");
    assert!(addrs.iter().all(|a| message.to_string().contains(&a.to_string())), "{message}");
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
}

/// No Sentinel reachable (nothing listens, or only servers that are no Sentinel, or one that
/// never answers): a backend error naming each, within one connect timeout per Sentinel at
/// most. An empty or malformed list is a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sentinel_lists_fail_fast_and_say_why() {
    let closed = [ClosedPort::new(), ClosedPort::new()];
    let nobody: Vec<String> = closed.iter().map(|p| p.addr().to_string()).collect();
    let start = Instant::now();
    let err = RedisBackend::connect_sentinel(&nobody, "m", config("x:")).await.unwrap_err();
    eprintln!("no Sentinel listening, refused in {:?}: {err}", start.elapsed());
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(nobody.iter().all(|a| err.to_string().contains(a)), "{err}");
    assert!(start.elapsed() < Duration::from_secs(1), "took {:?}", start.elapsed());

    // A plain Redis server is no Sentinel; a silent one costs one connect timeout.
    let silent = SilentServer::start().await;
    let wrong = vec![shared_redis().addr().to_string(), silent.addr().to_string()];
    let start = Instant::now();
    let err = RedisBackend::connect_sentinel(&wrong, "m", config("x:")).await.unwrap_err();
    let took = start.elapsed();
    eprintln!("a Redis and a silent server as Sentinels, refused in {took:?}: {err}");
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(wrong.iter().all(|a| err.to_string().contains(a)), "{err}");
    assert!(took >= CONNECT && took < CONNECT + Duration::from_secs(1), "took {took:?}");

    let err = RedisBackend::connect_sentinel(&[], "m", config("x:")).await.unwrap_err();
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
    let bad = vec!["127.0.0.1".to_string()];
    let err = RedisBackend::connect_sentinel(&bad, "m", config("x:")).await.unwrap_err();
    assert!(matches!(&err, LockError::Config(m) if m.contains("\"127.0.0.1\"")), "{err:?}");
    let err = RedisBackend::connect_sentinel(&nobody, "", config("x:")).await.unwrap_err();
    assert!(matches!(err, LockError::Config(_)), "{err:?}");
}

/// A master demoted to replica under an open connection (no `CLIENT KILL`: a stand-in
/// Sentinel, two plain servers): the next write is answered `READONLY`, which drops the
/// connection; an instance the Sentinel still names but whose `ROLE` is not master fails the
/// attempt; once the Sentinel names the new master, the same backend is granted there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_demoted_under_an_open_connection_is_left_on_readonly() {
    let (old, new) = blocking(|| (RedisServer::start(), RedisServer::start()));
    let sentinel = FakeSentinel::start().await;
    sentinel.name(Some(old.addr()));
    let list = vec![sentinel.addr().to_string()];
    let backend = RedisBackend::connect_sentinel(&list, "m", config("d:")).await.unwrap();
    let token = backend.token("t", TokenConfig::new(Duration::from_secs(5))).unwrap();
    token.lock("before", None).await.unwrap().release().await.unwrap();

    let port = new.port.to_string();
    let demoted = redis_call(old.addr(), &["REPLICAOF", "127.0.0.1", &port]).unwrap();
    assert_eq!(demoted, Reply::Status("OK".into()));
    let err = token.try_lock("after").await.expect_err("a replica refuses the grant");
    eprintln!("the demoted master answered: {err}");
    assert!(
        matches!(&err, LockError::Backend { source: message, .. } if message.to_string().contains("read only replica"))
    );
    // Dropped: the next request reconnects, and the Sentinel still names the replica.
    let err = token.try_lock("after").await.expect_err("the named instance is no master");
    eprintln!("reconnect to the demoted instance refused: {err}");
    assert!(err.to_string().contains("its ROLE is 'slave', not master"), "{err}");
    assert_eq!(backend.connections_made(), 1);

    sentinel.name(Some(new.addr()));
    let (guard, failures, took) =
        until_ok(Duration::from_secs(5), || token.try_lock("after")).await;
    let guard = guard.expect("free on the new master");
    eprintln!("on the new master after {took:?} and {} more failures", failures.count);
    let value = redis_call(new.addr(), &["GET", "d:after"]).unwrap();
    assert!(value.text().is_some_and(|v| v.starts_with("t:")), "granted on the new master");
    assert_eq!(backend.connections_made(), 2);
    guard.release().await.unwrap();

    // At connect time too: an instance whose ROLE is not master is refused, naming it.
    sentinel.name(Some(old.addr()));
    let err = RedisBackend::connect_sentinel(&list, "m", config("d:")).await.unwrap_err();
    assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
    assert!(err.to_string().contains(&old.addr().to_string()), "{err}");
}
