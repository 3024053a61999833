//! Test support: the test binary's etcd (from `test-servers`) and the conformance [`Fixture`]
//! on it, a cuttable proxy per contender.
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::secret::Credentials;
use lock_core::Locker;
use lock_etcd::{EtcdBackend, EtcdConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use test_servers::{shared_etcd, EtcdServer, Proxy};

/// The test binary's etcd.
pub fn shared() -> &'static EtcdServer {
    shared_etcd()
}

/// A lock root no other test of this binary uses.
pub fn unique_root(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("/t{}-{tag}/locks", N.fetch_add(1, Ordering::Relaxed))
}

/// Settings for tests: `ttl`, a root of the test's own, 3 s requests.
pub fn config(root: &str, ttl: Duration) -> EtcdConfig {
    EtcdConfig {
        lease_ttl: ttl,
        connect_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(3),
        root: root.to_string(),
        ..EtcdConfig::default()
    }
}

/// The conformance fixture: every contender has its own backend (client and lease) through its
/// own proxy; each fixture has a lock root of its own.
pub struct EtcdFixture {
    server: SocketAddr,
    root: String,
    ttl: Duration,
    /// Whom every contender authenticates as, on a secured server.
    credentials: Option<Credentials>,
    proxies: Mutex<HashMap<String, Proxy>>,
}

impl EtcdFixture {
    pub async fn new(tag: &str, ttl: Duration) -> EtcdFixture {
        EtcdFixture {
            server: shared().addr(),
            root: unique_root(tag),
            ttl,
            credentials: None,
            proxies: Mutex::default(),
        }
    }

    /// A fixture on the etcd at `server`, locking under `root`, every contender authenticated
    /// as `credentials`.
    pub fn secured(
        server: SocketAddr,
        root: String,
        ttl: Duration,
        credentials: Credentials,
    ) -> EtcdFixture {
        EtcdFixture { server, root, ttl, credentials: Some(credentials), proxies: Mutex::default() }
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// A new backend for contender `name`, through its own proxy.
    pub async fn backend(&self, name: &str) -> EtcdBackend {
        let proxy = Proxy::start(self.server).await;
        let endpoint = format!("http://{}", proxy.addr());
        let config =
            EtcdConfig { credentials: self.credentials.clone(), ..config(&self.root, self.ttl) };
        let backend =
            EtcdBackend::connect_with(&endpoint, config).await.expect("connect through the proxy");
        assert_eq!(backend.lease_ttl(), self.ttl, "the server must grant the asked lease TTL");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxy) {
            old.cut();
        }
        backend
    }

    /// Run `f` on contender `name`'s proxy.
    pub fn with_proxy<R>(&self, name: &str, f: impl FnOnce(&Proxy) -> R) -> R {
        f(self.proxies.lock().unwrap().get(name).expect("no such contender"))
    }
}

#[async_trait]
impl Fixture for EtcdFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        Arc::new(self.backend(name).await.locker(name).expect("locker"))
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
        // The server checks for expired leases every 500 ms; the watch fires at once; the rest
        // is margin for a loaded 2-core machine.
        Duration::from_millis(1200)
    }
}

/// The user the secured tests lock as, and the prefix its role covers.
pub const LOCKER: (&str, &str) = ("locker", "/secure/");
/// A user of another identity, whose role covers another prefix.
pub const STRANGER: (&str, &str) = ("stranger", "/elsewhere/");

/// `who`'s password: made up when the test binary starts, the same for the whole run.
pub fn password(who: &str) -> String {
    static SALT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let salt = SALT.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!("{:x}{nanos:x}", std::process::id())
    });
    format!("{who}-{salt}")
}

/// The credentials of `user` (a [`LOCKER`]-like pair).
pub fn credentials((user, _): (&str, &str)) -> Credentials {
    Credentials::new(user, lock_core::secret::Secret::new(password(user)))
}

/// The users and their prefixes, in `EtcdServer::secure`'s terms.
pub fn users() -> Vec<test_servers::EtcdUser> {
    [LOCKER, STRANGER]
        .iter()
        .map(|&(user, prefix)| test_servers::EtcdUser::new(user, &password(user), prefix))
        .collect()
}
