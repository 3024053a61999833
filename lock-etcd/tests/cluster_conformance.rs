//! The shared conformance suite for etcd's Mutex on a 3-member etcd cluster (the
//! suite passes for the locks on each cluster): lease TTL 2 s, each contender on its own
//! backend (client and lease) whose client is given the endpoints of all three members.
//!
//! Every contender reaches every member through a proxy of its own, in front of the member's
//! client proxy, and its client gets those three endpoints (it spreads its requests over them:
//! followers forward to the leader). So the suite's crash and lost-lease scenarios cut one
//! contender off from the whole cluster, as a crash or a partition of that client would, while
//! the others keep theirs. No member fault happens here (those are the harness's cluster
//! rows): this shows that the lock keeps every promise of the suite when its server is a
//! replicated cluster rather than one process. Every scenario of the suite runs; none is
//! skipped.
//!
//! One cluster per test binary, started by the first test and shared by all (each fixture has
//! a lock root of its own), as the single-server suite (`conformance.rs`) shares one server.
//! Its members are killed when the binary exits (test-servers arms `PR_SET_PDEATHSIG` on a
//! thread that lives as long as each member; the static cluster is never dropped).

use crate::support;

use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::Locker;
use lock_etcd::EtcdBackend;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use test_servers::{ContenderProxies, EtcdCluster};

/// How many members the cluster has.
const MEMBERS: usize = 3;

/// The binary's cluster: started on a thread of its own (not on a test runtime's worker,
/// where a failed start would drop the cluster's proxy runtime inside another runtime).
fn shared_cluster() -> &'static EtcdCluster {
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
struct ClusterFixture {
    /// In front of the members' client proxies.
    proxies: ContenderProxies,
    root: String,
    ttl: Duration,
}

impl ClusterFixture {
    fn new(tag: &str, ttl: Duration) -> ClusterFixture {
        let cluster = shared_cluster();
        ClusterFixture {
            proxies: ContenderProxies::new((0..MEMBERS).map(|i| cluster.client_addr(i)).collect()),
            root: support::unique_root(tag),
            ttl,
        }
    }
}

#[async_trait]
impl Fixture for ClusterFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let endpoints: Vec<String> =
            self.proxies.open(name).await.iter().map(|a| format!("http://{a}")).collect();
        let backend =
            EtcdBackend::connect_with(&endpoints.join(","), support::config(&self.root, self.ttl))
                .await
                .expect("connect to the cluster through the contender's proxies");
        assert_eq!(backend.lease_ttl(), self.ttl, "the cluster must grant the asked lease TTL");
        Arc::new(backend.locker(name).expect("locker"))
    }
    async fn cut_off(&self, name: &str) {
        self.proxies.cut(name);
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // As on one server: the leader checks for expired leases every 500 ms, the watch
        // fires at once; the rest is margin for a loaded 2-core machine.
        Duration::from_millis(1200)
    }
}

async fn make_fixture(_seed: u64) -> ClusterFixture {
    ClusterFixture::new("cluster", Duration::from_secs(2))
}

lock_core::conformance_suite!(
    lock_core::conformance::Mode::Wall,
    |seed| async move { make_fixture(seed).await },
    seeds = 3,
    contenders = 12
);
