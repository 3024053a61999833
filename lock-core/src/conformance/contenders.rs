//! What the suites of the other primitives need from a backend: one handle per contender
//! ([`Contenders`]), and the embedded store as the Cassandra-model implementations use it
//! ([`EmbeddedContenders`]).

use super::Mode;
use crate::context::ClientContext;
use crate::embedded::{EmbeddedClient, EmbeddedConfig, EmbeddedStore, LatencyModel};
use crate::store::Consistency;
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// A backend plus an algorithm of some primitive `H` (`dyn RwLocker`, `dyn Semaphore`), able
/// to hand out one handle per contender: [`super::Fixture`] for any primitive.
#[async_trait]
pub trait Contenders<H: ?Sized + Send + Sync + 'static>: Send + Sync + 'static {
    /// A handle for contender `name`, with its own client (connection, session).
    async fn contender(&self, name: &str) -> Arc<H>;
    /// Cut contender `name` off from the backend, as a crash or partition would.
    async fn cut_off(&self, name: &str);
    /// The lease TTL (for ZooKeeper: the session timeout).
    fn ttl(&self) -> Duration;
    /// How time is kept.
    fn mode(&self) -> Mode;
    /// Extra time a waiter may need to notice a free lock (poll interval, backoff).
    fn notice_slack(&self) -> Duration {
        Duration::from_millis(1500)
    }
}

/// The embedded store's settings for a suite in `mode`, and the lease TTL: the default
/// benchmark cluster (three replicas at QUORUM, ~1 ms round trips with seeded jitter) in
/// simulated time, a faster one in wall time.
pub fn embedded_setup(seed: u64, mode: Mode) -> (EmbeddedConfig, Duration) {
    let (fixed, jitter, ttl) = match mode {
        Mode::Simulated => (800, 400, Duration::from_secs(10)),
        Mode::Wall => (100, 100, Duration::from_secs(2)),
    };
    let latency =
        LatencyModel { fixed: Duration::from_micros(fixed), jitter: Duration::from_micros(jitter) };
    (EmbeddedConfig { replicas: 3, latency, seed, ..EmbeddedConfig::default() }, ttl)
}

/// A client of `store` for contender `name`, and its context: the TTL, QUORUM, and a seed
/// drawn from the suite's seed and the name.
pub fn embedded_contender(
    store: &EmbeddedStore,
    seed: u64,
    name: &str,
    ttl: Duration,
) -> (EmbeddedClient, ClientContext) {
    let client = store.client(name);
    let seed = seed
        ^ name
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
    let ctx = ClientContext::new(name, client.clock(), seed)
        .with_ttl(ttl)
        .with_consistency(Consistency::Quorum);
    (client, ctx)
}

/// The embedded store as a [`Contenders`] of `H`: a cut-off contender is isolated from every
/// replica.
pub struct EmbeddedContenders<H: ?Sized> {
    store: EmbeddedStore,
    seed: u64,
    mode: Mode,
    ttl: Duration,
    build: Arc<dyn Fn(EmbeddedClient, ClientContext) -> Arc<H> + Send + Sync>,
}

impl<H: ?Sized> EmbeddedContenders<H> {
    /// Contenders whose handles `build` makes from a store client and a context.
    pub fn new(
        seed: u64,
        mode: Mode,
        build: impl Fn(EmbeddedClient, ClientContext) -> Arc<H> + Send + Sync + 'static,
    ) -> Self {
        let (config, ttl) = embedded_setup(seed, mode);
        EmbeddedContenders {
            store: EmbeddedStore::new(config),
            seed,
            mode,
            ttl,
            build: Arc::new(build),
        }
    }

    /// The store, for counters and faults.
    pub fn store(&self) -> &EmbeddedStore {
        &self.store
    }
}

#[async_trait]
impl<H: ?Sized + Send + Sync + 'static> Contenders<H> for EmbeddedContenders<H> {
    async fn contender(&self, name: &str) -> Arc<H> {
        let (client, ctx) = embedded_contender(&self.store, self.seed, name, self.ttl);
        (self.build)(client, ctx)
    }
    async fn cut_off(&self, name: &str) {
        self.store.isolate(name, true);
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        self.mode
    }
}
