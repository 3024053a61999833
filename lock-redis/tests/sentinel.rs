//! The locks through Redis Sentinel (issue 21, item 4): a backend that asks the Sentinels for
//! the master, both single-server locks on it, and bad input refused fast with clear errors.
//! Failovers are `tests/sentinel_failover.rs`; the safety finding `tests/sentinel_safety.rs`.

mod sentinel_support;

use lock_core::{LockError, Locker};
use lock_redis::{JedisConfig, RedisBackend, TokenConfig};
use sentinel_support::{backend, blocking, config, get, sentinels, CONNECT};
use std::time::{Duration, Instant};
use test_servers::{free_port, shared_redis, RedisCluster, Reply, SilentServer, REDIS_MASTER_NAME};

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
    assert!(message.contains("'nosuchmaster'"), "{message}");
    assert!(addrs.iter().all(|a| message.contains(&a.to_string())), "{message}");
    assert!(start.elapsed() < Duration::from_secs(2), "took {:?}", start.elapsed());
}

/// No Sentinel reachable (nothing listens, or only servers that are no Sentinel, or one that
/// never answers): a backend error naming each, within one connect timeout per Sentinel at
/// most. An empty or malformed list is a configuration error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sentinel_lists_fail_fast_and_say_why() {
    let nobody = vec![format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port())];
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
