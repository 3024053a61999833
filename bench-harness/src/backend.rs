//! Backends: what a run opens before its contenders start, and what each contender gets.
//!
//! | backend | opened once per algorithm's run | each contender gets |
//! |---|---|---|
//! | embedded | a fresh [`EmbeddedStore`] with the run's seed (and the GlobalTime service) | a client handle with its clock skew |
//! | cassandra | a [`CassandraStore`] (one driver session), the lock tables created if missing, the GlobalTime service if asked | a [`CassandraClient`] on that session, its requests counted ([`CountingStore`]), row keys prefixed with the run's namespace |
//! | redis | a probe connection (so that an unreachable server fails once, clearly) | its own connection ([`RedisBackend`]), keys prefixed with the run's namespace |
//! | zookeeper | a probe session | its own session ([`ZkBackend`]), lock znodes under the run's own root |
//!
//! Every run of an algorithm on a real server uses a **namespace** of its own (row-key prefix,
//! key prefix or znode root), so runs never see each other's cells, keys or znodes — not even
//! the tombstones of an earlier run, which would slow the queue lock's reads. With
//! `--processes` the parent makes the namespace and every worker uses it.
//!
//! Real servers run in wall time, and their clients take write timestamps and expiries from
//! the system clock (`PhysicalClock::System`, plus the contender's skew): timestamps must keep
//! growing across runs and processes.

use crate::config::{BackendKind, RunConfig, TimeSourceKind};
use crate::counting::{CountingStore, RequestCounter};
use lock_cassandra::{CassandraClient, CassandraConfig, CassandraStore};
use lock_core::context::ClientContext;
use lock_core::embedded::{EmbeddedClient, EmbeddedConfig, EmbeddedStore, StoreCounters};
use lock_core::time::{GlobalTime, GlobalTimeService, HybridClock, LocalClock, PhysicalClock};
use lock_redis::{RedisBackend, RedisConnectConfig};
use lock_zookeeper::{ZkBackend, ZkConfig};
use std::sync::Arc;
use std::time::Duration;

/// Default Redis URL of `--backend redis`.
pub const DEFAULT_REDIS_URL: &str = "redis://127.0.0.1:6379/";
/// Default connect string of `--backend zookeeper`.
pub const DEFAULT_ZOOKEEPER: &str = "127.0.0.1:2181";
/// Default contact point of `--backend cassandra`.
pub const DEFAULT_CASSANDRA_NODES: &str = "127.0.0.1:9042";
/// How long connecting to Redis may take (TCP connect), and each reply.
pub const REDIS_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long establishing a ZooKeeper session may take.
pub const ZOOKEEPER_CONNECT_TIMEOUT: Duration = Duration::from_secs(8);
/// Every table the Cassandra-model algorithms of the registry use, created before a run so
/// that no contender pays for a schema change inside its timed section.
pub const CASSANDRA_TABLES: [&str; 8] = [
    "shadow_lock_main",
    "shadow_lock_shadow",
    "queue_lock_main",
    "queue_lock_queue",
    "lock_fence",
    "time_service",
    lock_bakery::CHOOSING_TABLE,
    lock_bakery::NUMBERS_TABLE,
];

/// What one contender talks to.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum BackendClient {
    /// A client handle on the embedded store (its own id, counters and clock skew).
    Embedded(EmbeddedClient),
    /// A client handle on a Cassandra / ScyllaDB session, its requests counted.
    Cassandra(CountingStore<CassandraClient>),
    /// A connection of its own to a Redis server.
    Redis(RedisBackend),
    /// A ZooKeeper session of its own.
    Zookeeper(ZkBackend),
}

/// Checks, before anything runs, that `kind` is built into this binary (all are).
pub fn check_available(kind: BackendKind) -> Result<(), String> {
    match kind {
        BackendKind::Embedded
        | BackendKind::Cassandra
        | BackendKind::Redis
        | BackendKind::Zookeeper => Ok(()),
    }
}

/// Where a backend of `cfg` lives, for messages: the contact points, URL or hosts.
pub fn address(cfg: &RunConfig) -> String {
    match cfg.backend {
        BackendKind::Embedded => "in this process".into(),
        BackendKind::Cassandra => cassandra_nodes(cfg).join(","),
        BackendKind::Redis => crate::config::redact_url(redis_url(cfg)),
        BackendKind::Zookeeper => zookeeper_hosts(cfg).to_string(),
    }
}

fn cassandra_nodes(cfg: &RunConfig) -> Vec<String> {
    if cfg.nodes.is_empty() {
        vec![DEFAULT_CASSANDRA_NODES.to_string()]
    } else {
        cfg.nodes.clone()
    }
}

fn redis_url(cfg: &RunConfig) -> &str {
    cfg.redis.as_deref().unwrap_or(DEFAULT_REDIS_URL)
}

fn zookeeper_hosts(cfg: &RunConfig) -> &str {
    cfg.zookeeper.as_deref().unwrap_or(DEFAULT_ZOOKEEPER)
}

/// A namespace no other run uses: the system time in microseconds and the process id.
pub fn fresh_namespace() -> String {
    format!(
        "bh{}p{}",
        PhysicalClock::System.now_micros(),
        std::process::id()
    )
}

/// The Cassandra configuration of `cfg`: `--nodes`, `--keyspace`, and from the environment
/// the replication of a keyspace created here and the local datacenter (see
/// `lock_cassandra::config`).
pub fn cassandra_config(cfg: &RunConfig) -> Result<CassandraConfig, String> {
    let nodes = cassandra_nodes(cfg).join(",");
    let from_env = CassandraConfig::from_vars(|name| {
        if name == lock_cassandra::config::ENV_NODES {
            Some(nodes.clone())
        } else if name == lock_cassandra::config::ENV_KEYSPACE {
            cfg.keyspace.clone().or_else(|| std::env::var(name).ok())
        } else {
            std::env::var(name).ok()
        }
    })
    .map_err(|e| format!("invalid Cassandra settings: {}", e.0))?;
    from_env.ok_or_else(|| "no Cassandra contact points (--nodes)".to_string())
}

/// A handle that reads a backend's request counters later (from another task).
#[derive(Clone)]
pub enum CounterHandle {
    /// The embedded store's own counters.
    Embedded(EmbeddedStore),
    /// The counters of every [`CountingStore`] of a run.
    Counted(Arc<RequestCounter>),
}

impl CounterHandle {
    /// The counts now.
    pub fn counters(&self) -> StoreCounters {
        match self {
            CounterHandle::Embedded(s) => s.counters(),
            CounterHandle::Counted(c) => c.snapshot(),
        }
    }
}

enum Store {
    Embedded(EmbeddedStore),
    Cassandra {
        store: CassandraStore,
        counter: Arc<RequestCounter>,
    },
    Redis,
    Zookeeper,
}

/// An opened backend: the store a run's contenders share, and services the run needs (the
/// GlobalTime service).
pub struct Backend {
    kind: BackendKind,
    store: Store,
    namespace: String,
    _time_service: Option<GlobalTimeService>,
}

impl Backend {
    /// Number of replicas of the GlobalTime service when `--time-source global`.
    pub const TIME_SERVICE_REPLICAS: usize = 3;

    /// Opens the backend for `cfg` in a namespace of its own. Call inside the run's tokio
    /// runtime: the embedded store's clock starts now. With `--time-source global` the
    /// service is started and its first value awaited.
    pub async fn open(cfg: &RunConfig) -> Result<Backend, String> {
        Self::open_in(cfg, &fresh_namespace()).await
    }

    /// Opens the backend for `cfg` in `namespace` (what several worker processes share).
    /// A server that cannot be reached fails with a message naming its address and what was
    /// tried.
    pub async fn open_in(cfg: &RunConfig, namespace: &str) -> Result<Backend, String> {
        check_available(cfg.backend)?;
        let (store, time_service) = match cfg.backend {
            BackendKind::Embedded => {
                let store = open_embedded(cfg);
                let scale = cfg.time_scale() as i64;
                let probe = store.client("time-service-probe");
                let service = start_time_service(cfg, &probe, |i, skew| {
                    let client = store
                        .client(format!("time-service-{i}"))
                        .with_skew(skew * scale);
                    let clock = client.clock();
                    (client, clock)
                })
                .await?;
                store.reset_counters();
                (Store::Embedded(store), service)
            }
            BackendKind::Cassandra => {
                let config = cassandra_config(cfg)?;
                let store = CassandraStore::connect(config).await.map_err(|e| {
                    format!(
                        "cannot reach the cassandra backend at {}: {e}",
                        address(cfg)
                    )
                })?;
                store.ensure_tables(&CASSANDRA_TABLES).await.map_err(|e| {
                    format!(
                        "cannot create the lock tables on the cassandra backend at {}: {e}",
                        address(cfg)
                    )
                })?;
                let counter = Arc::new(RequestCounter::default());
                let prefix = format!("{namespace}/");
                let probe = CountingStore::new(
                    store
                        .client("time-service-probe")
                        .with_row_prefix(prefix.clone()),
                    counter.clone(),
                );
                let service = start_time_service(cfg, &probe, |i, skew| {
                    let client = CountingStore::new(
                        store
                            .client(format!("time-service-{i}"))
                            .with_row_prefix(prefix.clone()),
                        counter.clone(),
                    );
                    (client, LocalClock::new(PhysicalClock::System, skew))
                })
                .await?;
                counter.reset();
                (Store::Cassandra { store, counter }, service)
            }
            BackendKind::Redis => {
                // One probe connection: an unreachable server fails here, once.
                connect_redis(cfg, namespace).await?;
                (Store::Redis, None)
            }
            BackendKind::Zookeeper => {
                connect_zookeeper(cfg, namespace).await?;
                (Store::Zookeeper, None)
            }
        };
        Ok(Backend {
            kind: cfg.backend,
            store,
            namespace: namespace.to_string(),
            _time_service: time_service,
        })
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        self.kind
    }

    /// The run's namespace on the server.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The handle and context of contender `index`, with its clock skewed by `skew_us` (of the
    /// model) and the run's time source, TTL and consistency, all on the tokio clock's scale
    /// ([`RunConfig::time_scale`]). Connects the contender's own connection or session on
    /// Redis and ZooKeeper.
    pub async fn contender(
        &self,
        cfg: &RunConfig,
        index: usize,
        skew_us: i64,
    ) -> Result<(BackendClient, ClientContext), String> {
        let owner = RunConfig::owner_id(index);
        let seed = cfg.contender_seed(index);
        let system = LocalClock::new(PhysicalClock::System, skew_us);
        let with_settings = |ctx: ClientContext| {
            ctx.with_ttl(cfg.scaled(cfg.ttl))
                .with_consistency(cfg.consistency)
        };
        Ok(match &self.store {
            Store::Embedded(store) => {
                let client = store
                    .client(owner.clone())
                    .with_skew(skew_us * cfg.time_scale() as i64);
                let clock = client.clock();
                let mut ctx = with_settings(ClientContext::new(owner, clock, seed));
                ctx = with_time_source(ctx, cfg, clock, || {
                    Arc::new(GlobalTime::new(client.clone(), cfg.consistency))
                });
                (BackendClient::Embedded(client), ctx)
            }
            Store::Cassandra { store, counter } => {
                let client = CountingStore::new(
                    store
                        .client(owner.clone())
                        .with_row_prefix(format!("{}/", self.namespace)),
                    counter.clone(),
                );
                let mut ctx = with_settings(ClientContext::new(owner, system, seed));
                ctx = with_time_source(ctx, cfg, system, || {
                    Arc::new(GlobalTime::new(client.clone(), cfg.consistency))
                });
                (BackendClient::Cassandra(client), ctx)
            }
            Store::Redis => {
                let backend = connect_redis(cfg, &self.namespace).await?;
                let ctx = with_settings(ClientContext::new(owner, system, seed));
                (BackendClient::Redis(backend), ctx)
            }
            Store::Zookeeper => {
                let backend = connect_zookeeper(cfg, &self.namespace).await?;
                let ctx = with_settings(ClientContext::new(owner, system, seed));
                (BackendClient::Zookeeper(backend), ctx)
            }
        })
    }

    /// The store's request counters since the contenders started, when the backend counts
    /// (the embedded store and Cassandra; Redis and ZooKeeper requests are not counted).
    pub fn counters(&self) -> Option<StoreCounters> {
        self.counters_handle().map(|h| h.counters())
    }

    /// A handle that reads the counters later (from another task), when the backend counts.
    pub fn counters_handle(&self) -> Option<CounterHandle> {
        match &self.store {
            Store::Embedded(s) => Some(CounterHandle::Embedded(s.clone())),
            Store::Cassandra { counter, .. } => Some(CounterHandle::Counted(counter.clone())),
            Store::Redis | Store::Zookeeper => None,
        }
    }
}

fn open_embedded(cfg: &RunConfig) -> EmbeddedStore {
    let latency = cfg.latency.model();
    EmbeddedStore::new(EmbeddedConfig {
        replicas: cfg.replicas,
        latency: lock_core::embedded::LatencyModel::new(
            cfg.scaled(latency.fixed),
            cfg.scaled(latency.jitter),
        ),
        seed: cfg.seed,
        request_timeout: cfg.scaled(EmbeddedConfig::DEFAULT_REQUEST_TIMEOUT),
        gc_grace: cfg.scaled(cfg.gc_grace),
        ..EmbeddedConfig::default()
    })
}

fn with_time_source(
    ctx: ClientContext,
    cfg: &RunConfig,
    clock: LocalClock,
    global: impl FnOnce() -> lock_core::time::SharedTimeSource,
) -> ClientContext {
    match cfg.time_source {
        TimeSourceKind::Local => ctx,
        TimeSourceKind::Hlc => ctx.with_time(Arc::new(HybridClock::new(clock))),
        TimeSourceKind::Global => ctx.with_time(global()),
    }
}

/// Starts the GlobalTime service when `cfg` asks for it (cell-store backends only) and waits
/// for its first value, read through `probe`. `replica(i, skew_us)` makes replica `i`'s store
/// handle and clock (skewed by `skew_us` of the model).
async fn start_time_service<S>(
    cfg: &RunConfig,
    probe: &S,
    replica: impl Fn(usize, i64) -> (S, LocalClock),
) -> Result<Option<GlobalTimeService>, String>
where
    S: lock_core::store::CellStore + Clone,
{
    if cfg.time_source != TimeSourceKind::Global || !cfg.backend.is_cell_store() {
        return Ok(None);
    }
    let replicas = cfg
        .service_skews(Backend::TIME_SERVICE_REPLICAS)
        .into_iter()
        .enumerate()
        .map(|(i, skew)| replica(i, skew))
        .collect();
    let service = GlobalTimeService::start(
        replicas,
        cfg.scaled(GlobalTimeService::DEFAULT_PERIOD),
        cfg.consistency,
    );
    // The first updates need a read and a write; wait until the cell exists.
    let reader = GlobalTime::new(probe.clone(), cfg.consistency);
    let mut waited = Duration::ZERO;
    let step = cfg.scaled(Duration::from_millis(5));
    while !matches!(reader.read().await, Ok(Some(_))) {
        if waited > cfg.scaled(Duration::from_secs(5)) {
            return Err("the GlobalTime service wrote no value within 5 s".into());
        }
        tokio::time::sleep(step).await;
        waited += step;
    }
    Ok(Some(service))
}

async fn connect_redis(cfg: &RunConfig, namespace: &str) -> Result<RedisBackend, String> {
    let config = RedisConnectConfig {
        connect_timeout: REDIS_CONNECT_TIMEOUT,
        key_prefix: format!("bench-harness:{namespace}:"),
        ..RedisConnectConfig::default()
    };
    RedisBackend::connect_with(redis_url(cfg), config)
        .await
        .map_err(|e| {
            format!(
                "cannot reach the redis backend at {} (--redis): {e}",
                address(cfg)
            )
        })
}

async fn connect_zookeeper(cfg: &RunConfig, namespace: &str) -> Result<ZkBackend, String> {
    let config = ZkConfig {
        session_timeout: cfg.ttl,
        connect_timeout: ZOOKEEPER_CONNECT_TIMEOUT,
        root: format!("/bench-harness/{namespace}"),
    };
    ZkBackend::connect_with(zookeeper_hosts(cfg), config)
        .await
        .map_err(|e| {
            format!(
                "cannot reach the zookeeper backend at {} (--zookeeper; tried to establish a session within {:?}): {e}",
                address(cfg),
                ZOOKEEPER_CONNECT_TIMEOUT
            )
        })
}
