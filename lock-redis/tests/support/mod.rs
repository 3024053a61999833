//! Test support: the conformance [`Fixture`] on the test binary's `redis-server` (from
//! `test-servers`), a cuttable proxy per contender.
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::Locker;
use lock_redis::{RedisBackend, RedisConnectConfig, Variant};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_servers::{shared_redis, Proxy};

/// A prefix no other test of this binary uses.
pub fn unique_prefix(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t{}-{tag}:", N.fetch_add(1, Ordering::Relaxed))
}

/// The conformance fixture: every contender has its own connection through its own proxy;
/// keys of one fixture carry a prefix of their own.
pub struct RedisFixture {
    server: SocketAddr,
    prefix: String,
    variant: Variant,
    ttl: Duration,
    proxies: Mutex<HashMap<String, Proxy>>,
}

impl RedisFixture {
    /// Run `f` on contender `name`'s proxy.
    pub fn with_proxy<R>(&self, name: &str, f: impl FnOnce(&Proxy) -> R) -> R {
        f(self.proxies.lock().unwrap().get(name).expect("no such contender"))
    }

    pub async fn new(tag: &str, variant: Variant, ttl: Duration) -> RedisFixture {
        let server = shared_redis().addr();
        RedisFixture { server, prefix: unique_prefix(tag), variant, ttl, proxies: Mutex::default() }
    }

    pub async fn backend(&self, name: &str) -> RedisBackend {
        let proxy = Proxy::start(self.server).await;
        let url = format!("redis://{}/", proxy.addr());
        let config =
            RedisConnectConfig { key_prefix: self.prefix.clone(), ..RedisConnectConfig::default() };
        let backend =
            RedisBackend::connect_with(&url, config).await.expect("connect through the proxy");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxy) {
            old.cut();
        }
        backend
    }
}

#[async_trait]
impl Fixture for RedisFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        self.backend(name).await.locker(name, self.variant.clone()).expect("locker")
    }
    async fn cut_off(&self, name: &str) {
        if let Some(p) = self.proxies.lock().unwrap().get(name) {
            p.cut();
        }
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // A waiter polls every 100 ms (jedis) / 50 ms (token); the rest is margin for a loaded
        // 2-core machine.
        Duration::from_millis(1000)
    }
}
