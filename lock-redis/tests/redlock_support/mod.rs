//! Test support for Redlock: five independent masters (`test-servers`), and the conformance
//! [`Fixture`] on them, with a cuttable proxy per contender and master.
#![allow(dead_code)]

use async_trait::async_trait;
use lock_core::conformance::{assert_exclusive, Fixture, Hold, Mode};
use lock_core::lock::{validate_id, Release};
use lock_core::{LockError, LockGuard, Locker};
use lock_redis::{RedisConnectConfig, RedisMasters, RedlockConfig, RedlockVariant};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use test_servers::{Proxy, RedisCluster};

/// Redlock's N in every test: the doc's example.
pub const MASTERS: usize = 5;

/// The binary's five masters for the tests that leave them alone (the conformance suite);
/// tests that kill or restart a master start their own.
pub fn shared_masters() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::masters(MASTERS, false))
}

/// A prefix no other test of this binary uses.
pub fn unique_prefix(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("t{}-{tag}:", N.fetch_add(1, Ordering::Relaxed))
}

/// The settings of the tests: TTL `ttl`, a 250 ms master timeout (a loaded 2-core machine
/// answers loopback requests within it), retries within 50 ms.
pub fn config(ttl: Duration, seed: u64) -> RedlockConfig {
    RedlockConfig::new(ttl, seed)
        .with_master_timeout(Duration::from_millis(250))
        .with_retry_delay(Duration::from_millis(50))
}

/// Run a blocking cluster operation from a multi-threaded test runtime.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

/// Every contender reaches every master through a proxy of its own, so that it can be cut
/// off from all masters (a crash) or from some (a partition).
pub struct RedlockFixture {
    masters: Vec<SocketAddr>,
    prefix: String,
    variant: RedlockVariant,
    ttl: Duration,
    proxies: Mutex<HashMap<String, Vec<Proxy>>>,
    /// For the plain variant in the shared suite: see [`Numbered`].
    numbered: Option<Arc<AtomicU64>>,
}

impl RedlockFixture {
    /// A fixture on the masters at `masters` (their client proxies).
    pub fn new(masters: Vec<SocketAddr>, tag: &str, variant: RedlockVariant) -> Self {
        let ttl = match variant {
            RedlockVariant::Plain(c) | RedlockVariant::Fenced(c) => c.ttl,
        };
        RedlockFixture {
            masters,
            prefix: unique_prefix(tag),
            variant,
            ttl,
            proxies: Mutex::default(),
            numbered: None,
        }
    }

    /// A fixture on the shared masters.
    pub fn shared(tag: &str, variant: RedlockVariant) -> Self {
        let cluster = shared_masters();
        Self::new((0..MASTERS).map(|i| cluster.client_addr(i)).collect(), tag, variant)
    }

    /// Hand out guards numbered by the test process ([`Numbered`]).
    pub fn numbered(mut self) -> Self {
        self.numbered = Some(Arc::default());
        self
    }

    /// Contender `name`'s masters, each through a new proxy of its own.
    pub async fn masters(&self, name: &str) -> RedisMasters {
        let mut proxies = Vec::new();
        let mut urls = Vec::new();
        for addr in &self.masters {
            let proxy = Proxy::start(*addr).await;
            urls.push(format!("redis://{}/", proxy.addr()));
            proxies.push(proxy);
        }
        let config =
            RedisConnectConfig { key_prefix: self.prefix.clone(), ..RedisConnectConfig::default() };
        let masters = RedisMasters::connect_with(&urls, config).await.expect("connect");
        if let Some(old) = self.proxies.lock().unwrap().insert(name.to_string(), proxies) {
            old.iter().for_each(Proxy::cut);
        }
        masters
    }

    /// Cut contender `name` off from the masters `which` (a partition), or heal it.
    pub fn cut(&self, name: &str, which: &[usize], cut: bool) {
        let proxies = self.proxies.lock().unwrap();
        for &i in which {
            let p = &proxies.get(name).expect("no such contender")[i];
            if cut {
                p.cut()
            } else {
                p.heal()
            }
        }
    }
}

#[async_trait]
impl Fixture for RedlockFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let locker = self.masters(name).await.locker(name, self.variant).expect("locker");
        match &self.numbered {
            Some(n) => Arc::new(Numbered { inner: locker, next: n.clone() }),
            None => locker,
        }
    }
    async fn cut_off(&self, name: &str) {
        self.cut(name, &(0..self.masters.len()).collect::<Vec<_>>(), true);
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        Mode::Wall
    }
    fn notice_slack(&self) -> Duration {
        // Retries within 50 ms; the rest is margin for a loaded 2-core machine and for
        // contenders that split the votes and retry.
        Duration::from_millis(1000)
    }
}

/// Plain Redlock hands out [`lock_redis::NO_FENCING_TOKEN`] (it has none), and the shared
/// suite checks that tokens increase: by design that check fails. So for the plain variant
/// the suite runs through this wrapper, whose guards carry the test process's grant counter:
/// a token only one process can give, which is exactly what Redlock lacks. Every other check
/// (exclusion, leases, timeouts, the lost signal) is Redlock's own.
pub struct Numbered {
    inner: Arc<dyn Locker>,
    next: Arc<AtomicU64>,
}

impl Numbered {
    fn wrap(&self, g: LockGuard) -> LockGuard {
        assert_eq!(g.token(), lock_redis::NO_FENCING_TOKEN, "plain Redlock has no token");
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let (lock_id, owner, lease) =
            (g.lock_id().to_string(), g.owner().to_string(), g.watch_lease());
        LockGuard::new(lock_id, owner, n, lease, Box::new(Inner(g)))
    }
}

struct Inner(LockGuard);

#[async_trait]
impl Release for Inner {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        self.0.release().await
    }
}

#[async_trait]
impl Locker for Numbered {
    fn algorithm(&self) -> &str {
        self.inner.algorithm()
    }
    fn owner(&self) -> &str {
        self.inner.owner()
    }
    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        self.inner.lock(lock_id, timeout).await.map(|g| self.wrap(g))
    }
    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        Ok(self.inner.try_lock(lock_id).await?.map(|g| self.wrap(g)))
    }
}

/// No two holds of one lock overlap, whatever their tokens (plain Redlock's are all 0): the
/// holds are numbered in grant order before [`assert_exclusive`] checks them.
pub fn assert_no_overlap(holds: &[Hold]) -> usize {
    let mut holds = holds.to_vec();
    holds.sort_by_key(|h| (h.granted, h.released));
    for (n, h) in holds.iter_mut().enumerate() {
        h.token = n as u64 + 1;
    }
    assert_exclusive(&holds)
}
