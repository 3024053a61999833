//! Test support: the test binary's ZooKeeper (from `test-servers`) warmed up for the lock
//! recipe, and the conformance [`Fixture`] on it, a cuttable proxy per contender, for the
//! mutex, the reader-writer lock and the semaphore; a 3-server ensemble and its fixture
//! ([`ensemble`]); kazoo run as a contender ([`kazoo`]).
#![allow(dead_code)]

pub mod ensemble;
pub mod kazoo;

use async_trait::async_trait;
use lock_core::conformance::{Contenders, Fixture, Mode};
use lock_core::election::Elector;
use lock_core::secret::Credentials;
use lock_core::tls::TlsFiles;
use lock_core::{Locker, RwLocker, Semaphore};
use lock_zookeeper::{ZkBackend, ZkConfig};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use test_servers::{shared_zookeeper_with, Proxy, TestPki, ZkClientAuth, ZkServer};

/// The test binary's ZooKeeper (from `test-servers`), warmed up before any test uses it.
pub fn shared() -> &'static ZkServer {
    shared_zookeeper_with(|server| warm_up(&server.hosts()))
}

/// The test binary's ZooKeeper with TLS on its client port, trusting `pki`'s client
/// certificates and asking for them as `auth` says, warmed up (through its plain probe port)
/// before any test uses it. One per test binary: `pki` and `auth` are the first caller's.
pub fn shared_tls(pki: &TestPki, auth: ZkClientAuth) -> &'static ZkServer {
    static SERVER: std::sync::OnceLock<ZkServer> = std::sync::OnceLock::new();
    SERVER.get_or_init(|| {
        let server = ZkServer::start_tls(pki, auth);
        warm_up(&server.plain_addr().to_string());
        server
    })
}

/// Run the lock recipe's requests a few hundred times before any test does: a fresh JVM
/// interprets them slowly at first, and the time between the server's last touch of a
/// session and the client learning of its grant then eats into the timing margins of the
/// crash and expiry tests.
fn warm_up(hosts: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("warm-up runtime");
    rt.block_on(async {
        // A JVM that has just started may take longer than one connection timeout to set up
        // the first session on a loaded machine: try again for a while before giving up.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let client = loop {
            let attempt = zookeeper_client::Client::connector()
                .with_session_timeout(Duration::from_secs(2))
                .with_connection_timeout(Duration::from_secs(5))
                .connect(hosts)
                .await;
            match attempt {
                Ok(client) => break client,
                Err(e) if tokio::time::Instant::now() < deadline => {
                    eprintln!("warm-up session: {e}; trying again");
                }
                Err(e) => panic!("warm-up session: no session within 30 s: {e}"),
            }
        };
        let dir = "/warm-up";
        let persistent = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        let ephemeral = zookeeper_client::CreateMode::EphemeralSequential
            .with_acls(zookeeper_client::Acls::anyone_all());
        let _ = client.mkdir(dir, &persistent).await;
        for _ in 0..300 {
            let (_, seq) = client
                .create(&format!("{dir}/lock-"), b"w", &ephemeral)
                .await
                .expect("warm-up create");
            let path = format!("{dir}/lock-{seq}");
            let _ = client.list_children(dir).await;
            let _ = client.check_and_watch_stat(&path).await;
            let _ = client.delete(&path, None).await;
        }
    });
}

/// A lock root no other test of this binary uses.
pub fn unique_root(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("/t{}-{tag}/locks", N.fetch_add(1, Ordering::Relaxed))
}

/// The conformance fixture: every contender has its own session through its own proxy; each
/// fixture has a lock root of its own.
pub struct ZkFixture {
    server: SocketAddr,
    root: String,
    session_timeout: Duration,
    proxies: Mutex<HashMap<String, Proxy>>,
    credentials: Option<Credentials>,
    tls: Option<TlsFiles>,
}

impl ZkFixture {
    pub async fn new(tag: &str, session_timeout: Duration) -> ZkFixture {
        let server = shared().addr();
        ZkFixture {
            server,
            root: unique_root(tag),
            session_timeout,
            proxies: Mutex::default(),
            credentials: None,
            tls: None,
        }
    }

    /// This fixture on `server`, a TLS server, every contender connecting with `files`.
    pub fn over_tls(self, server: &ZkServer, files: TlsFiles) -> ZkFixture {
        ZkFixture { server: server.addr(), tls: Some(files), ..self }
    }

    /// This fixture with every contender authenticated as `credentials`: every znode of its
    /// locks then carries the creator-only ACL.
    pub fn with_credentials(self, credentials: Credentials) -> ZkFixture {
        ZkFixture { credentials: Some(credentials), ..self }
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// A new session for contender `name`, through its own proxy.
    pub async fn backend(&self, name: &str) -> ZkBackend {
        let proxy = Proxy::start(self.server).await;
        let config = ZkConfig {
            session_timeout: self.session_timeout,
            connect_timeout: Duration::from_secs(10),
            root: self.root.clone(),
            credentials: self.credentials.clone(),
            tls: self.tls.clone(),
            ..ZkConfig::default()
        };
        let backend = ZkBackend::connect_with(&proxy.addr().to_string(), config)
            .await
            .expect("connect through the proxy");
        assert_eq!(
            backend.session_timeout(),
            self.session_timeout,
            "the server must grant the asked session timeout"
        );
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

/// The fixture's settings, whatever the primitive. (A contender is cut off by its proxy:
/// `cut_off`, in each impl, since `async_trait` does not see into a macro.)
macro_rules! zk_contenders {
    () => {
        fn ttl(&self) -> Duration {
            self.session_timeout
        }
        fn mode(&self) -> Mode {
            Mode::Wall
        }
        fn notice_slack(&self) -> Duration {
            // The server expires sessions on its tick (200 ms) after the timeout; the watch
            // fires at once; the rest is margin for a loaded 2-core machine.
            Duration::from_millis(1200)
        }
    };
}

impl ZkFixture {
    fn cut(&self, name: &str) {
        if let Some(p) = self.proxies.lock().unwrap().get(name) {
            p.cut();
        }
    }
}

#[async_trait]
impl Fixture for ZkFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        Arc::new(self.backend(name).await.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        self.cut(name);
    }
    zk_contenders!();
}

#[async_trait]
impl Contenders<dyn RwLocker> for ZkFixture {
    async fn contender(&self, name: &str) -> Arc<dyn RwLocker> {
        Arc::new(self.backend(name).await.rw_locker(name).expect("reader-writer lock"))
    }
    async fn cut_off(&self, name: &str) {
        self.cut(name);
    }
    zk_contenders!();
}

#[async_trait]
impl Contenders<dyn Semaphore> for ZkFixture {
    async fn contender(&self, name: &str) -> Arc<dyn Semaphore> {
        Arc::new(self.backend(name).await.semaphore(name).expect("semaphore"))
    }
    async fn cut_off(&self, name: &str) {
        self.cut(name);
    }
    zk_contenders!();
}

#[async_trait]
impl Contenders<dyn Elector> for ZkFixture {
    async fn contender(&self, name: &str) -> Arc<dyn Elector> {
        Arc::new(self.backend(name).await.elector(name).expect("elector"))
    }
    async fn cut_off(&self, name: &str) {
        self.cut(name);
    }
    zk_contenders!();
}
