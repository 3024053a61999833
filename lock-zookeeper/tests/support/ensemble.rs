//! A 3-server ZooKeeper ensemble for the conformance suites, and their fixture on it: each
//! contender on its own session, through a proxy of its own in front of every server, with a
//! connect string of all three.
//!
//! Every contender reaches every server through a proxy of its own, in front of the server's
//! client proxy, and its connect string names those three (the client picks one at random,
//! so sessions live on followers as well as on the leader, and their writes are forwarded).
//! So the suites' crash and lost-lease scenarios cut one contender off from the whole
//! ensemble, as a crash or a partition of that client would, and its session expires on the
//! ensemble's clock, while the others keep theirs.
//!
//! One ensemble per test binary, started by the first test and warmed up through each of its
//! servers before any test uses it (as `support` warms up the single server: fresh JVMs are
//! slow at first), then shared by all (each fixture has a lock root of its own). Its servers
//! are killed when the binary exits (test-servers arms `PR_SET_PDEATHSIG` on a thread that
//! lives as long as each server; the static ensemble is never dropped).

use async_trait::async_trait;
use lock_core::conformance::{Contenders, Fixture, Mode};
use lock_core::election::Elector;
use lock_core::{Locker, RwLocker, Semaphore};
use lock_zookeeper::{ZkBackend, ZkConfig};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use test_servers::{ContenderProxies, ZkCluster};

/// How many servers the ensemble has.
const SERVERS: usize = 3;

/// The binary's ensemble, warmed up: started on a thread of its own (the warm-up runs a
/// runtime of its own, which cannot be started on a test runtime's worker).
fn shared_ensemble() -> &'static ZkCluster {
    static ENSEMBLE: OnceLock<ZkCluster> = OnceLock::new();
    ENSEMBLE.get_or_init(|| {
        std::thread::spawn(|| {
            let started = std::time::Instant::now();
            let ensemble = ZkCluster::start(SERVERS);
            eprintln!("ZooKeeper ensemble of {SERVERS} formed in {:?}", started.elapsed());
            let hosts: Vec<String> =
                (0..SERVERS).map(|i| ensemble.client_addr(i).to_string()).collect();
            warm_up(&hosts);
            eprintln!("... and warmed up after {:?}", started.elapsed());
            ensemble
        })
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Run the lock recipe's requests a few hundred times through each server (one session on
/// each, at once) before any test does: a fresh JVM interprets them slowly at first, which
/// eats into the timing margins of the crash and expiry scenarios. Each server serves its own
/// session's reads and forwards its writes to the leader, so every one of them is warmed.
fn warm_up(hosts: &[String]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("warm-up runtime");
    rt.block_on(async {
        let rounds: Vec<_> = hosts
            .iter()
            .enumerate()
            .map(|(i, host)| tokio::spawn(warm_up_through(i, host.clone())))
            .collect();
        for round in rounds {
            round.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
        }
    });
}

/// [`warm_up`]'s session at server `i` (at `host`).
async fn warm_up_through(i: usize, host: String) {
    // A JVM that has just started may take longer than one connection timeout to set up the
    // first session on a loaded machine: try again for a while.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let client = loop {
        let attempt = zookeeper_client::Client::connector()
            .with_session_timeout(Duration::from_secs(2))
            .with_connection_timeout(Duration::from_secs(5))
            .connect(&host)
            .await;
        match attempt {
            Ok(client) => break client,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("warm-up session at server {i}: {e}; trying again");
            }
            Err(e) => panic!("warm-up session at server {i}: none within 30 s: {e}"),
        }
    };
    let persistent =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let ephemeral = zookeeper_client::CreateMode::EphemeralSequential
        .with_acls(zookeeper_client::Acls::anyone_all());
    let dir = format!("/warm-up-{i}");
    let _ = client.mkdir(&dir, &persistent).await;
    for _ in 0..300 {
        let (_, seq) =
            client.create(&format!("{dir}/lock-"), b"w", &ephemeral).await.expect("warm-up create");
        let path = format!("{dir}/lock-{seq}");
        let _ = client.list_children(&dir).await;
        let _ = client.check_and_watch_stat(&path).await;
        let _ = client.delete(&path, None).await;
    }
}

/// The conformance fixture on the ensemble: every contender has its own session, through a
/// proxy of its own in front of each server.
pub struct EnsembleFixture {
    /// In front of the servers' client proxies.
    proxies: ContenderProxies,
    root: String,
    session_timeout: Duration,
}

impl EnsembleFixture {
    pub fn new(tag: &str, session_timeout: Duration) -> EnsembleFixture {
        let ensemble = shared_ensemble();
        EnsembleFixture {
            proxies: ContenderProxies::new((0..SERVERS).map(|i| ensemble.client_addr(i)).collect()),
            root: super::unique_root(tag),
            session_timeout,
        }
    }
}

impl EnsembleFixture {
    /// A new session for contender `name`, through its own proxies.
    pub async fn backend(&self, name: &str) -> ZkBackend {
        let hosts: Vec<String> =
            self.proxies.open(name).await.iter().map(ToString::to_string).collect();
        let config = ZkConfig {
            session_timeout: self.session_timeout,
            connect_timeout: Duration::from_secs(10),
            root: self.root.clone(),
            ..ZkConfig::default()
        };
        let backend = ZkBackend::connect_with(&hosts.join(","), config)
            .await
            .expect("connect to the ensemble through the contender's proxies");
        assert_eq!(
            backend.session_timeout(),
            self.session_timeout,
            "the ensemble must grant the asked session timeout"
        );
        backend
    }
}

/// The fixture's settings, whatever the primitive. (A contender is cut off by its proxies:
/// `cut_off`, in each impl, since `async_trait` does not see into a macro.)
macro_rules! ensemble_contenders {
    () => {
        fn ttl(&self) -> Duration {
            self.session_timeout
        }
        fn mode(&self) -> Mode {
            Mode::Wall
        }
        fn notice_slack(&self) -> Duration {
            // As on one server: the leader expires sessions on its tick (200 ms) after the
            // timeout, the watch fires at once; the rest is margin for a loaded 2-core machine.
            Duration::from_millis(1200)
        }
    };
}

#[async_trait]
impl Fixture for EnsembleFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        Arc::new(self.backend(name).await.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    ensemble_contenders!();
}

#[async_trait]
impl Contenders<dyn RwLocker> for EnsembleFixture {
    async fn contender(&self, name: &str) -> Arc<dyn RwLocker> {
        Arc::new(self.backend(name).await.rw_locker(name).expect("reader-writer lock"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    ensemble_contenders!();
}

#[async_trait]
impl Contenders<dyn Semaphore> for EnsembleFixture {
    async fn contender(&self, name: &str) -> Arc<dyn Semaphore> {
        Arc::new(self.backend(name).await.semaphore(name).expect("semaphore"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    ensemble_contenders!();
}

#[async_trait]
impl Contenders<dyn Elector> for EnsembleFixture {
    async fn contender(&self, name: &str) -> Arc<dyn Elector> {
        Arc::new(self.backend(name).await.elector(name).expect("elector"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    ensemble_contenders!();
}
