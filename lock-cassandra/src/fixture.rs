//! A [`Fixture`] on a real cluster for the shared conformance suite of `lock_core`
//! (feature `conformance`).
//!
//! Every contender gets its own [`CassandraClient`] on one shared session (64 contenders do
//! not open 64 sessions), a context with the system clock (write timestamps must grow across
//! runs against a cluster that keeps earlier runs' tombstones), QUORUM, and the fixture's TTL.
//! [`Fixture::cut_off`] flips the contender's switch: its requests fail at once with
//! `Unreachable`, nothing it had is cleaned up. Every row key is prefixed with a namespace
//! unique to the fixture, so tests and runs never see each other's cells.
//!
//! ```text
//! lock_core::conformance_suite!(
//!     lock_core::conformance::Mode::Wall,
//!     |seed| async move {
//!         lock_cassandra::fixture::CassandraFixture::from_test_env(seed, |client, ctx| {
//!             std::sync::Arc::new(lock_queue::QueueLocker::new(client, ctx, Default::default()).unwrap())
//!         })
//!         .await
//!         .expect("LOCK_TEST_CASSANDRA set and reachable")
//!     },
//!     seeds = 2,
//!     contenders = 8
//! );
//! ```

use crate::{CassandraClient, CassandraConfig, CassandraStore, Replication, ALGORITHM_TABLES};
use async_trait::async_trait;
use lock_core::conformance::{Fixture, Mode};
use lock_core::context::ClientContext;
use lock_core::lock::Locker;
use lock_core::store::{Consistency, StoreError};
use lock_core::time::{LocalClock, PhysicalClock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The environment variable with the cluster the tests run against: `host:port[,host:port…]`.
pub const ENV_TEST_NODES: &str = "LOCK_TEST_CASSANDRA";
/// The environment variable with the CA file (PEM) of a test cluster that speaks TLS: set
/// with [`ENV_TEST_NODES`], the TLS tests run the conformance suite over TLS
/// ([`tls_test_config`]). The port [`ENV_TEST_NODES`] names must then take TLS (Cassandra's
/// `client_encryption_options` with `optional: true` takes both on one port).
pub const ENV_TEST_CA: &str = "LOCK_TEST_CASSANDRA_CA";
/// The client certificate (PEM) for a test cluster that requires one (optional).
pub const ENV_TEST_CERT: &str = "LOCK_TEST_CASSANDRA_CERT";
/// The client certificate's key (PEM) (optional, with [`ENV_TEST_CERT`]).
pub const ENV_TEST_KEY: &str = "LOCK_TEST_CASSANDRA_KEY";
/// The keyspace tests use, apart from the default one.
pub const TEST_KEYSPACE: &str = "distributed_locks_test";
/// The lease TTL of the fixture's lockers (CQL TTLs are whole seconds).
pub const DEFAULT_TEST_TTL: Duration = Duration::from_secs(2);

/// Makes a contender's locker from its store handle and context.
pub type BuildLocker = Arc<dyn Fn(CassandraClient, ClientContext) -> Arc<dyn Locker> + Send + Sync>;

/// The configuration tests use: the contact points of [`ENV_TEST_NODES`] and
/// [`TEST_KEYSPACE`]; `Ok(None)` when the variable is not set.
pub fn test_config() -> Result<Option<CassandraConfig>, StoreError> {
    match std::env::var(ENV_TEST_NODES) {
        Ok(nodes) if !nodes.trim().is_empty() => CassandraConfig::from_nodes(&nodes)
            .map(|c| Some(c.with_keyspace(TEST_KEYSPACE)))
            .map_err(|e| StoreError::Rejected(format!("{ENV_TEST_NODES}: {e}"))),
        _ => Ok(None),
    }
}

/// [`test_config`] over TLS, with the files of [`ENV_TEST_CA`], [`ENV_TEST_CERT`] and
/// [`ENV_TEST_KEY`]; `Ok(None)` unless both [`ENV_TEST_NODES`] and [`ENV_TEST_CA`] are set.
pub fn tls_test_config() -> Result<Option<CassandraConfig>, StoreError> {
    let path = |name| std::env::var(name).ok().filter(|p| !p.trim().is_empty());
    let (Some(config), Some(ca)) = (test_config()?, path(ENV_TEST_CA)) else {
        return Ok(None);
    };
    let mut files = lock_core::tls::TlsFiles::trusting(ca.trim());
    files.cert = path(ENV_TEST_CERT).map(|p| p.trim().into());
    files.key = path(ENV_TEST_KEY).map(|p| p.trim().into());
    let config = config.with_tls(files);
    config.validate().map_err(|e| StoreError::Rejected(format!("{ENV_TEST_CA}: {e}")))?;
    Ok(Some(config))
}

/// A row-key namespace unique to this process, this moment and `seed`.
pub fn unique_namespace(seed: u64) -> String {
    let micros = PhysicalClock::System.now_micros();
    format!("t{micros}-{}-{seed}/", std::process::id())
}

/// Create `keyspace` with `replication` if missing, through `store`'s session, without
/// tablets where the server knows the option and as usual where it does not: ScyllaDB
/// refuses lightweight transactions, and more replicas than nodes, in a keyspace with tablets
/// (its default on recent releases), and Apache Cassandra refuses the `tablets` option. Then
/// waits for schema agreement. For tests that need such a keyspace whatever the server.
pub async fn create_keyspace_without_tablets_where_known(
    store: &CassandraStore,
    keyspace: &str,
    replication: &Replication,
) -> Result<(), StoreError> {
    let mut refused = Vec::new();
    for tablets_off in [true, false] {
        let ddl = crate::cql::create_keyspace(keyspace, replication, tablets_off);
        match store.session().query_unpaged(ddl.as_str(), ()).await {
            Ok(_) => {
                return store.session().await_schema_agreement().await.map(drop).map_err(|e| {
                    StoreError::Rejected(format!("schema agreement after {ddl}: {e}"))
                });
            }
            Err(e) => refused.push(format!("{ddl}: {e}")),
        }
    }
    Err(StoreError::Rejected(format!(
        "could not create keyspace '{keyspace}': {}",
        refused.join("; ")
    )))
}

/// A row key no other test or run uses: `name`, the system clock in µs, the process id and a
/// per-process counter.
pub fn fresh_row(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}-{}",
        PhysicalClock::System.now_micros(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A backend on a real cluster plus an algorithm (see the module docs).
pub struct CassandraFixture {
    store: CassandraStore,
    namespace: String,
    seed: u64,
    ttl: Duration,
    notice_slack: Duration,
    clients: Mutex<HashMap<String, CassandraClient>>,
    build: BuildLocker,
}

impl CassandraFixture {
    /// Connect with `config`, create every table of [`ALGORITHM_TABLES`] now (so no test pays
    /// for schema changes inside a timed section), and hand out lockers made by `build`.
    pub async fn connect(
        config: CassandraConfig,
        seed: u64,
        build: impl Fn(CassandraClient, ClientContext) -> Arc<dyn Locker> + Send + Sync + 'static,
    ) -> Result<Self, StoreError> {
        let store = CassandraStore::connect(config).await?;
        store.ensure_tables(&ALGORITHM_TABLES).await?;
        Ok(CassandraFixture {
            store,
            namespace: unique_namespace(seed),
            seed,
            ttl: DEFAULT_TEST_TTL,
            notice_slack: Duration::from_millis(1500),
            clients: Mutex::new(HashMap::new()),
            build: Arc::new(build),
        })
    }

    /// [`CassandraFixture::connect`] to the cluster of [`ENV_TEST_NODES`]; `Ok(None)` when
    /// the variable is not set.
    pub async fn from_test_env(
        seed: u64,
        build: impl Fn(CassandraClient, ClientContext) -> Arc<dyn Locker> + Send + Sync + 'static,
    ) -> Result<Option<Self>, StoreError> {
        match test_config()? {
            Some(config) => CassandraFixture::connect(config, seed, build).await.map(Some),
            None => Ok(None),
        }
    }

    /// [`CassandraFixture::connect`] over TLS to the cluster of [`ENV_TEST_NODES`] with the
    /// CA of [`ENV_TEST_CA`] ([`tls_test_config`]); `Ok(None)` when either is not set.
    pub async fn from_test_env_tls(
        seed: u64,
        build: impl Fn(CassandraClient, ClientContext) -> Arc<dyn Locker> + Send + Sync + 'static,
    ) -> Result<Option<Self>, StoreError> {
        match tls_test_config()? {
            Some(config) => CassandraFixture::connect(config, seed, build).await.map(Some),
            None => Ok(None),
        }
    }

    /// Set the lease TTL of the lockers (at least 1 s).
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// Set the slack a waiter may need to notice a free lock (backoff, poll interval).
    pub fn with_notice_slack(mut self, slack: Duration) -> Self {
        self.notice_slack = slack;
        self
    }

    /// The store.
    pub fn store(&self) -> &CassandraStore {
        &self.store
    }

    /// The prefix of every row key this fixture's contenders use.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The store handle of contender `name`, made on first use.
    pub fn client(&self, name: &str) -> CassandraClient {
        let mut clients = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        clients
            .entry(name.to_string())
            .or_insert_with(|| self.store.client(name).with_row_prefix(self.namespace.clone()))
            .clone()
    }

    /// The context of contender `name`: system clock, QUORUM, the fixture's TTL, a seed of
    /// its own.
    pub fn context(&self, name: &str) -> ClientContext {
        let seed = self.seed
            ^ name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            });
        ClientContext::new(name, LocalClock::new(PhysicalClock::System, 0), seed)
            .with_ttl(self.ttl)
            .with_consistency(Consistency::Quorum)
    }
}

#[async_trait]
impl Fixture for CassandraFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        (self.build)(self.client(name), self.context(name))
    }

    async fn cut_off(&self, name: &str) {
        self.client(name).cut_off(true);
    }

    fn ttl(&self) -> Duration {
        self.ttl
    }

    fn mode(&self) -> Mode {
        Mode::Wall
    }

    fn notice_slack(&self) -> Duration {
        self.notice_slack
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_rows_differ_and_start_with_their_name() {
        let (a, b) = (fresh_row("lww"), fresh_row("lww"));
        assert_ne!(a, b);
        assert!(a.starts_with("lww-"), "{a}");
    }

    #[test]
    fn namespaces_differ_per_seed_and_end_with_a_separator() {
        let a = unique_namespace(1);
        let b = unique_namespace(2);
        assert_ne!(a, b);
        assert!(a.ends_with('/') && a.starts_with('t'), "{a}");
    }
}
