//! Test support: the test binary's etcd (from `test-servers`) and its 3-member cluster, and
//! the conformance fixtures on them (the mutex's [`Fixture`] and the other primitives'
//! [`Contenders`]), a cuttable proxy per contender.
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{Contenders, Fixture, Mode};
use lock_core::secret::Credentials;
use lock_core::{Elector, Locker, RwLocker, Semaphore};
use lock_etcd::{EtcdBackend, EtcdConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use test_servers::{shared_etcd, ContenderProxies, EtcdCluster, EtcdServer, Proxy};

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

/// The fixtures' settings, whatever the primitive: the TTL, wall time, and how soon a waiter
/// notices a free lock.
macro_rules! etcd_settings {
    () => {
        fn ttl(&self) -> Duration {
            self.ttl
        }
        fn mode(&self) -> Mode {
            Mode::Wall
        }
        fn notice_slack(&self) -> Duration {
            // The server checks for expired leases every 500 ms; the watch fires at once; the
            // rest is margin for a loaded 2-core machine.
            Duration::from_millis(1200)
        }
    };
}

/// The other primitives on `$fixture`: each contender a handle made by `$make` on a backend
/// of its own (`$fixture::backend`), cut off by `$fixture::cut`. (`async_trait` does not see
/// into a macro, so each impl is written out by this one.)
macro_rules! etcd_contenders {
    ($fixture:ty) => {
        #[async_trait]
        impl Contenders<dyn RwLocker> for $fixture {
            async fn contender(&self, name: &str) -> Arc<dyn RwLocker> {
                Arc::new(self.backend(name).await.rw_locker(name).expect("rw locker"))
            }
            async fn cut_off(&self, name: &str) {
                self.cut(name);
            }
            etcd_settings!();
        }

        #[async_trait]
        impl Contenders<dyn Semaphore> for $fixture {
            async fn contender(&self, name: &str) -> Arc<dyn Semaphore> {
                Arc::new(self.backend(name).await.semaphore(name).expect("semaphore"))
            }
            async fn cut_off(&self, name: &str) {
                self.cut(name);
            }
            etcd_settings!();
        }

        #[async_trait]
        impl Contenders<dyn Elector> for $fixture {
            async fn contender(&self, name: &str) -> Arc<dyn Elector> {
                Arc::new(self.backend(name).await.elector(name).expect("elector"))
            }
            async fn cut_off(&self, name: &str) {
                self.cut(name);
            }
            etcd_settings!();
        }
    };
}

etcd_contenders!(EtcdFixture);
etcd_contenders!(ClusterFixture);

impl EtcdFixture {
    /// Cut contender `name` off from the server.
    pub fn cut(&self, name: &str) {
        if let Some(p) = self.proxies.lock().unwrap().get(name) {
            p.cut();
        }
    }
}

/// How many members the cluster has.
pub const MEMBERS: usize = 3;

/// The binary's cluster: started on a thread of its own (not on a test runtime's worker,
/// where a failed start would drop the cluster's proxy runtime inside another runtime).
pub fn shared_cluster() -> &'static EtcdCluster {
    static CLUSTER: OnceLock<EtcdCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        std::thread::spawn(|| {
            let started = std::time::Instant::now();
            let cluster = EtcdCluster::start(MEMBERS);
            eprintln!("etcd cluster of {MEMBERS} formed in {:?}", started.elapsed());
            cluster
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// The conformance fixture on the cluster: every contender has its own backend, through a
/// proxy of its own in front of each member.
pub struct ClusterFixture {
    /// In front of the members' client proxies.
    proxies: ContenderProxies,
    root: String,
    ttl: Duration,
}

impl ClusterFixture {
    pub fn new(tag: &str, ttl: Duration) -> ClusterFixture {
        let cluster = shared_cluster();
        ClusterFixture {
            proxies: ContenderProxies::new((0..MEMBERS).map(|i| cluster.client_addr(i)).collect()),
            root: unique_root(tag),
            ttl,
        }
    }

    /// A new backend for contender `name`, given the endpoints of its own proxies.
    pub async fn backend(&self, name: &str) -> EtcdBackend {
        let endpoints: Vec<String> =
            self.proxies.open(name).await.iter().map(|a| format!("http://{a}")).collect();
        let backend = EtcdBackend::connect_with(&endpoints.join(","), config(&self.root, self.ttl))
            .await
            .expect("connect to the cluster through the contender's proxies");
        assert_eq!(backend.lease_ttl(), self.ttl, "the cluster must grant the asked lease TTL");
        backend
    }

    /// Cut contender `name` off from the whole cluster.
    pub fn cut(&self, name: &str) {
        self.proxies.cut(name);
    }
}

#[async_trait]
impl Fixture for ClusterFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        Arc::new(self.backend(name).await.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        self.cut(name);
    }
    etcd_settings!();
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
