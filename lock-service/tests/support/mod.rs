//! What the service's tests share: a cluster of `lock-server` nodes built from this crate.

#![allow(dead_code)]

pub mod load;

use clap::Parser;
use lock_service::server::ServerArgs;
use std::sync::OnceLock;
use test_servers::{ClusterOptions, LockService, ServiceCluster};

/// A new cluster of `n` nodes (killed and removed when dropped).
pub fn cluster(n: usize) -> ServiceCluster {
    ServiceCluster::launch(
        LockService::new(env!("CARGO_BIN_EXE_lock-server")),
        &ClusterOptions::new(n),
    )
    .unwrap_or_else(|e| panic!("start a lock-service cluster of {n}: {e}"))
}

/// The test binary's 3-node cluster, started by the first caller on a thread of its own.
pub fn shared_cluster() -> &'static ServiceCluster {
    static CLUSTER: OnceLock<ServiceCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        std::thread::spawn(|| {
            let started = std::time::Instant::now();
            let c = cluster(3);
            eprintln!("lock-service cluster of 3 formed in {:?}", started.elapsed());
            c
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// The arguments of a single-node cluster on free ports in `dir`, with `extra` arguments.
pub fn node_args(dir: &std::path::Path, token: &str, extra: &[&str]) -> ServerArgs {
    let (peer, client) = (test_servers::free_port(), test_servers::free_port());
    let cluster = format!("0=127.0.0.1:{peer}/127.0.0.1:{client}");
    let dir = dir.to_str().unwrap();
    let mut argv =
        vec!["lock-server", "--id", "0", "--cluster", &cluster, "--data-dir", dir, "--init"];
    argv.extend_from_slice(&["--cluster-token", token]);
    argv.extend_from_slice(extra);
    ServerArgs::try_parse_from(argv).expect("arguments")
}

/// A secured cluster: every node serves clients over TLS with a certificate of `pki`, talks
/// to its peers over mutual TLS (the same CA), and authenticates clients against a users file
/// of `users` (all `client`s) and `root` (an `admin`), each with a random token.
pub struct SecuredCluster {
    /// The nodes.
    pub cluster: ServiceCluster,
    /// Their CA and certificates.
    pub pki: test_servers::TestPki,
    /// Every user and its token.
    pub tokens: Vec<(String, String)>,
    _dir: tempfile::TempDir,
}

impl SecuredCluster {
    /// Start `n` nodes with the users `users` and `root`.
    pub fn start(n: usize, users: &[&str]) -> SecuredCluster {
        use lock_service::auth::token_hash;
        let pki = test_servers::TestPki::new("service");
        let dir = tempfile::tempdir().unwrap();
        let mut tokens: Vec<(String, String)> =
            users.iter().map(|u| (u.to_string(), test_servers::random_password())).collect();
        tokens.push(("root".into(), test_servers::random_password()));
        let lines: Vec<String> = tokens
            .iter()
            .map(|(u, t)| {
                let role = if u == "root" { "admin" } else { "client" };
                format!("{u} {role} {}", token_hash(t))
            })
            .collect();
        let file = dir.path().join("users");
        std::fs::write(&file, lines.join("\n")).unwrap();
        let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
        let args = [
            "--users".to_string(),
            s(&file),
            "--tls-cert".into(),
            s(&pki.server().cert),
            "--tls-key".into(),
            s(&pki.server().key),
            "--tls-ca".into(),
            s(pki.ca_file()),
        ];
        let engine = LockService::new(env!("CARGO_BIN_EXE_lock-server")).with_args(&args);
        let cluster = ServiceCluster::launch(engine, &ClusterOptions::new(n))
            .unwrap_or_else(|e| panic!("start a secured lock-service cluster of {n}: {e}"));
        SecuredCluster { cluster, pki, tokens, _dir: dir }
    }

    /// `user`'s credentials.
    pub fn credentials(&self, user: &str) -> lock_core::secret::Credentials {
        let token = self.tokens.iter().find(|(u, _)| u == user).expect("a user").1.clone();
        lock_core::secret::Credentials::new(user, lock_core::secret::Secret::new(token))
    }

    /// What a client of the cluster trusts.
    pub fn tls(&self) -> lock_core::tls::TlsFiles {
        lock_core::tls::TlsFiles::trusting(self.pki.ca_file())
    }
}

/// The conformance suite's fixture on a cluster: each contender reaches every node through a
/// proxy of its own and dials only those (`follow_leader_hints: false`, so a follower's hint
/// cannot lead it around its proxies), as a user of `secured` if given.
pub struct ServiceFixture {
    /// The contenders' proxies.
    pub proxies: test_servers::ContenderProxies,
    /// The session TTL.
    pub ttl: std::time::Duration,
    /// The secured cluster the contenders log in to, and the users they log in as (by the
    /// hash of their names: several may share one, as processes of one service would).
    pub secured: Option<(&'static SecuredCluster, &'static [&'static str])>,
}

impl ServiceFixture {
    /// A client for contender `name`, through its own proxies.
    pub async fn client(&self, name: &str) -> lock_service::client::ServiceClient {
        use lock_service::client::{ClientConfig, ServiceClient};
        let endpoints: Vec<String> =
            self.proxies.open(name).await.iter().map(ToString::to_string).collect();
        let mut config =
            ClientConfig { ttl: self.ttl, follow_leader_hints: false, ..ClientConfig::default() };
        if let Some((cluster, users)) = self.secured {
            let user = users[name.bytes().map(usize::from).sum::<usize>() % users.len()];
            config.credentials = Some(cluster.credentials(user));
            config.tls = Some(cluster.tls());
        }
        ServiceClient::connect(&endpoints, config)
            .await
            .expect("connect to the cluster through the contender's proxies")
    }
}

/// The fixture's settings, whatever the primitive: the session TTL, wall time, and how soon a
/// grant is seen. (A contender is cut off by its proxies: `cut_off`, in each impl, since
/// `async_trait` does not see into a macro.)
macro_rules! service_contenders {
    () => {
        fn ttl(&self) -> std::time::Duration {
            self.ttl
        }
        fn mode(&self) -> lock_core::conformance::Mode {
            lock_core::conformance::Mode::Wall
        }
        fn notice_slack(&self) -> std::time::Duration {
            // The leader checks its sessions every 20 ms and a grant is pushed in the commit
            // that frees the lock; the rest is margin for a loaded machine.
            std::time::Duration::from_millis(1000)
        }
    };
}

#[async_trait::async_trait]
impl lock_core::conformance::Fixture for ServiceFixture {
    async fn locker(&self, name: &str) -> std::sync::Arc<dyn lock_core::Locker> {
        std::sync::Arc::new(self.client(name).await.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    service_contenders!();
}

#[async_trait::async_trait]
impl lock_core::conformance::Contenders<dyn lock_core::RwLocker> for ServiceFixture {
    async fn contender(&self, name: &str) -> std::sync::Arc<dyn lock_core::RwLocker> {
        std::sync::Arc::new(self.client(name).await.rw_locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    service_contenders!();
}

#[async_trait::async_trait]
impl lock_core::conformance::Contenders<dyn lock_core::Elector> for ServiceFixture {
    async fn contender(&self, name: &str) -> std::sync::Arc<dyn lock_core::Elector> {
        std::sync::Arc::new(self.client(name).await.elector(name).expect("elector"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    service_contenders!();
}

#[async_trait::async_trait]
impl lock_core::conformance::Contenders<dyn lock_core::Semaphore> for ServiceFixture {
    async fn contender(&self, name: &str) -> std::sync::Arc<dyn lock_core::Semaphore> {
        std::sync::Arc::new(self.client(name).await.semaphore(name).expect("semaphore"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    service_contenders!();
}
