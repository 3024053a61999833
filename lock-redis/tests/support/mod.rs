//! Test support: the conformance [`Fixture`] on the test binary's `redis-server` (from
//! `test-servers`), a cuttable proxy per contender; the same fixture hands out reader-writer
//! locks and semaphores ([`Contenders`]).
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{Contenders, Fixture, Mode};
use lock_core::secret::Credentials;
use lock_core::{LockError, Locker, RwLocker, Semaphore, WriterPolicy};
use lock_redis::{RedisBackend, RedisConnectConfig, RwLockConfig, SemaphoreConfig, Variant};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
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
    /// Whom every contender connects as (none: the open shared server).
    credentials: Option<Credentials>,
    /// TLS: every contender connects with a `rediss://` URL trusting these files.
    tls: Option<lock_core::tls::TlsFiles>,
    /// The writer policy of its reader-writer locks.
    policy: WriterPolicy,
}

impl RedisFixture {
    /// Run `f` on contender `name`'s proxy.
    pub fn with_proxy<R>(&self, name: &str, f: impl FnOnce(&Proxy) -> R) -> R {
        f(self.proxies.lock().unwrap().get(name).expect("no such contender"))
    }

    pub async fn new(tag: &str, variant: Variant, ttl: Duration) -> RedisFixture {
        RedisFixture::on(shared_redis().addr(), None, tag, variant, ttl)
    }

    /// A fixture on the server at `server`, every contender connecting as `credentials`.
    pub fn on(
        server: SocketAddr,
        credentials: Option<Credentials>,
        tag: &str,
        variant: Variant,
        ttl: Duration,
    ) -> RedisFixture {
        let (prefix, proxies) = (unique_prefix(tag), Mutex::default());
        RedisFixture {
            server,
            prefix,
            variant,
            ttl,
            proxies,
            credentials,
            tls: None,
            policy: WriterPolicy::Fifo,
        }
    }

    /// The same fixture over TLS: `rediss://` URLs (to loopback proxies, so a server
    /// certificate for 127.0.0.1 is valid for them) trusting `tls`.
    pub fn with_tls(self, tls: lock_core::tls::TlsFiles) -> RedisFixture {
        RedisFixture { tls: Some(tls), ..self }
    }

    /// The same fixture, its reader-writer locks of writer policy `policy`.
    pub fn with_writer_policy(self, policy: WriterPolicy) -> RedisFixture {
        RedisFixture { policy, ..self }
    }

    /// The key prefix of this fixture's locks.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub async fn backend(&self, name: &str) -> RedisBackend {
        let proxy = Proxy::start(self.server).await;
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        let url = format!("{scheme}://{}/", proxy.addr());
        let config = RedisConnectConfig {
            key_prefix: self.prefix.clone(),
            credentials: self.credentials.clone(),
            tls: self.tls.clone(),
            ..RedisConnectConfig::default()
        };
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

#[async_trait]
impl Contenders<dyn RwLocker> for RedisFixture {
    async fn contender(&self, name: &str) -> Arc<dyn RwLocker> {
        let config = RwLockConfig::new(self.ttl).with_policy(self.policy);
        Arc::new(self.backend(name).await.rwlock(name, config).expect("reader-writer lock"))
    }
    async fn cut_off(&self, name: &str) {
        Fixture::cut_off(self, name).await
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // A waiter polls every 50 ms; the rest is margin for a loaded 2-core machine.
        Duration::from_millis(1000)
    }
}

#[async_trait]
impl Contenders<dyn Semaphore> for RedisFixture {
    async fn contender(&self, name: &str) -> Arc<dyn Semaphore> {
        let config = SemaphoreConfig::new(self.ttl);
        Arc::new(self.backend(name).await.semaphore(name, config).expect("semaphore"))
    }
    async fn cut_off(&self, name: &str) {
        Fixture::cut_off(self, name).await
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // A waiter polls every 50 ms; the rest is margin for a loaded 2-core machine.
        Duration::from_millis(1000)
    }
}

/// The tag of the key prefixes the secured server's lock user may touch: `t<n>-secure:`.
pub const SECURE_TAG: &str = "secure";

/// A `redis-server` whose default user is off, with ACL users of random passwords: `locker`,
/// allowed the commands the locks need ([`lock_redis::ACL_COMMANDS`]) on the keys of prefixes
/// made by [`unique_prefix`]`(SECURE_TAG)`; `other`, allowed the same commands on `other:*`
/// alone; `rotating`, as `locker`, for the one test that changes its password; and `admin`,
/// allowed everything, to change it.
pub struct Secured {
    pub server: test_servers::RedisServer,
    pub locker: test_servers::AclUser,
    pub other: test_servers::AclUser,
    pub rotating: test_servers::AclUser,
    pub admin: test_servers::AclUser,
}

impl Secured {
    /// `user`'s credentials for a [`RedisConnectConfig`].
    pub fn credentials(user: &test_servers::AclUser) -> Credentials {
        Credentials::new(user.name(), lock_core::secret::Secret::new(user.password()))
    }
}

/// The test binary's secured server, started at its first use.
pub fn secured_redis() -> &'static Secured {
    static SERVER: std::sync::OnceLock<Secured> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        let commands = lock_redis::ACL_COMMANDS;
        let locker =
            test_servers::AclUser::new("locker", &format!("~t*-{SECURE_TAG}:* {commands}"));
        let other = test_servers::AclUser::new("other", &format!("~other:* {commands}"));
        let rotating = test_servers::AclUser::new("rotating", locker.rules());
        let admin = test_servers::AclUser::new("admin", "~* &* +@all");
        let users = [locker.clone(), other.clone(), rotating.clone(), admin.clone()];
        let server = test_servers::RedisServer::start_secured(&users);
        Secured { server, locker, other, rotating, admin }
    })
}

/// Repeat `request` until it succeeds, for at most `bound`: the first requests after a restart
/// may fail (the one that finds the old connection broken, and those within the reconnect
/// backoff). Returns the value, how many failed (all must be `LockError::Backend`) and how long
/// it took.
pub async fn until_ok<T, F, Fut>(bound: Duration, mut request: F) -> (T, u32, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, LockError>>,
{
    let start = Instant::now();
    let mut failures = 0;
    loop {
        match request().await {
            Ok(v) => return (v, failures, start.elapsed()),
            Err(e) => {
                assert!(matches!(e, LockError::Backend { .. }), "{e:?}");
                failures += 1;
                assert!(start.elapsed() < bound, "still failing after {:?}: {e}", start.elapsed());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}
