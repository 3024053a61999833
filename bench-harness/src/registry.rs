//! The algorithm registry: name → constructor.
//!
//! Every lock algorithm the harness can measure is one [`AlgorithmEntry`] in [`REGISTRY`] **per
//! backend it runs on**: the Cassandra-model algorithms (shadow, queue, bakery) have an entry
//! for the embedded store and one for Cassandra; the Redis locks (jedis, redis-token) one for
//! Redis; the ZooKeeper recipe one for ZooKeeper. An entry says which run settings it reads
//! (so that the sweeps know whom the poll-interval and clock-skew experiments concern), what
//! its ideal handoff costs, and how to build one contender's [`Locker`] from that contender's
//! [`ContenderSetup`].
//!
//! Adding an algorithm is one entry per backend: a `build_*` function that matches on
//! [`BackendClient`] and returns the locker, and a line in [`REGISTRY`].

use crate::backend::BackendClient;
use crate::config::{BackendKind, BackoffPreset, RunConfig};
use lock_core::context::ClientContext;
use lock_core::{LockError, Locker};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The algorithm-specific settings of a run, in the model's time.
///
/// A constructor must pass every duration through [`AlgorithmSettings::scaled`] (and take
/// every time constant of its algorithm from settings, not from a hard-coded default): in
/// simulated time the tokio clock runs [`crate::config::SIMULATED_TIME_SCALE`] times slower
/// than the model (see there why).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AlgorithmSettings {
    /// The queue lock's (and other polling algorithms') wait between polls.
    pub poll_interval: Duration,
    /// The shadow lock's backoff.
    pub backoff: BackoffPreset,
    /// Tokio-clock time per unit of model time.
    pub time_scale: u32,
    /// Lease TTL, Redis expiry, ZooKeeper session timeout (model time).
    pub ttl: Duration,
}

impl AlgorithmSettings {
    /// The settings of `cfg`.
    pub fn of(cfg: &RunConfig) -> Self {
        AlgorithmSettings {
            poll_interval: cfg.poll_interval,
            backoff: cfg.backoff,
            time_scale: cfg.time_scale(),
            ttl: cfg.ttl,
        }
    }

    /// A model duration on the tokio clock.
    pub fn scaled(&self, d: Duration) -> Duration {
        d * self.time_scale
    }
}

/// Everything a constructor gets for one contender.
pub struct ContenderSetup {
    /// Contender index, from 0.
    pub index: usize,
    /// The backend handle of this contender.
    pub client: BackendClient,
    /// Owner id, lease TTL, consistency, clocks and seed.
    pub ctx: ClientContext,
    /// The algorithm-specific settings.
    pub settings: AlgorithmSettings,
}

/// What a constructor returns: it may need to connect first (real backends), hence a future.
pub type BuildFuture = Pin<Box<dyn Future<Output = Result<Arc<dyn Locker>, LockError>> + Send>>;

/// One registered algorithm on one backend.
pub struct AlgorithmEntry {
    /// Short name, as `--algorithms` takes it (the same on every backend it runs on).
    pub name: &'static str,
    /// One line for `bench-harness list` and the README.
    pub summary: &'static str,
    /// The backend of this entry.
    pub backend: BackendKind,
    /// Reads `--time-source` to order its waiters (the skew experiment runs it per source).
    pub uses_time_source: bool,
    /// Reads `--poll-interval` (the poll-interval experiment runs it).
    pub uses_poll_interval: bool,
    /// The handoff the algorithm should achieve when someone waits, given the mean round trip
    /// and the settings: the harness reports the measured median gap divided by it.
    pub ideal_handoff: Option<fn(Duration, &AlgorithmSettings) -> Duration>,
    /// The ideal handoff in words, for reports ("" without one).
    pub ideal_handoff_text: &'static str,
    /// Builds one contender's locker.
    pub build: fn(ContenderSetup) -> BuildFuture,
}

impl AlgorithmEntry {
    /// True when this entry is for `backend`.
    pub fn runs_on(&self, backend: BackendKind) -> bool {
        self.backend == backend
    }
}

impl std::fmt::Debug for AlgorithmEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlgorithmEntry")
            .field("name", &self.name)
            .field("backend", &self.backend)
            .finish()
    }
}

const SHADOW_SUMMARY: &str = "2012 shadow-table lock with randomized backoff (thesis listings 3-4)";
const QUEUE_SUMMARY: &str = "timestamp-ordered queue lock (thesis section 5, listings 5-7)";
const BAKERY_SUMMARY: &str = "Lamport's bakery on Choosing/Numbers column families (seed 002)";

const fn shadow(backend: BackendKind) -> AlgorithmEntry {
    AlgorithmEntry {
        name: "shadow",
        summary: SHADOW_SUMMARY,
        backend,
        uses_time_source: false,
        uses_poll_interval: false,
        ideal_handoff: None,
        ideal_handoff_text: "",
        build: build_shadow,
    }
}

const fn queue(backend: BackendKind) -> AlgorithmEntry {
    AlgorithmEntry {
        name: "queue",
        summary: QUEUE_SUMMARY,
        backend,
        uses_time_source: true,
        uses_poll_interval: true,
        ideal_handoff: Some(queue_ideal_handoff),
        ideal_handoff_text: "3 round trips + half the poll interval",
        build: build_queue,
    }
}

const fn bakery(backend: BackendKind) -> AlgorithmEntry {
    AlgorithmEntry {
        name: "bakery",
        summary: BAKERY_SUMMARY,
        backend,
        uses_time_source: false,
        uses_poll_interval: true,
        ideal_handoff: Some(bakery_ideal_handoff),
        ideal_handoff_text: "1 round trip + half the poll interval",
        build: build_bakery,
    }
}

/// Every algorithm on every backend it runs on, in the order they run and appear in tables
/// (the first appearance of a name fixes its place).
pub static REGISTRY: &[AlgorithmEntry] = &[
    shadow(BackendKind::Embedded),
    queue(BackendKind::Embedded),
    bakery(BackendKind::Embedded),
    shadow(BackendKind::Cassandra),
    queue(BackendKind::Cassandra),
    bakery(BackendKind::Cassandra),
    AlgorithmEntry {
        name: "jedis",
        summary: "jedis-lock: SETNX/GETSET with client-clock expiry, retry every 100 ms (seed 001)",
        backend: BackendKind::Redis,
        uses_time_source: false,
        uses_poll_interval: false,
        ideal_handoff: None,
        ideal_handoff_text: "",
        build: build_jedis,
    },
    AlgorithmEntry {
        name: "redis-token",
        summary: "token lock: SET NX PX + token-checked Lua release, retry every 50 ms",
        backend: BackendKind::Redis,
        uses_time_source: false,
        uses_poll_interval: false,
        ideal_handoff: None,
        ideal_handoff_text: "",
        build: build_redis_token,
    },
    AlgorithmEntry {
        name: "zookeeper",
        summary: "ephemeral sequential znodes, each waiter watching its predecessor (seed 004)",
        backend: BackendKind::Zookeeper,
        uses_time_source: false,
        uses_poll_interval: false,
        ideal_handoff: None,
        ideal_handoff_text: "",
        build: build_zookeeper,
    },
];

/// The entry of `name` on `backend`.
pub fn lookup(name: &str, backend: BackendKind) -> Option<&'static AlgorithmEntry> {
    REGISTRY
        .iter()
        .find(|e| e.name == name && e.backend == backend)
}

/// True when some backend runs an algorithm called `name`.
pub fn is_known(name: &str) -> bool {
    REGISTRY.iter().any(|e| e.name == name)
}

/// Every registered name, once, in registry order.
pub fn names() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for e in REGISTRY {
        if !out.contains(&e.name) {
            out.push(e.name);
        }
    }
    out
}

/// The names of the algorithms that run on `backend`, in registry order.
pub fn names_for(backend: BackendKind) -> Vec<&'static str> {
    for_backend(backend).iter().map(|e| e.name).collect()
}

/// The backends `name` runs on.
pub fn backends_of(name: &str) -> Vec<BackendKind> {
    REGISTRY
        .iter()
        .filter(|e| e.name == name)
        .map(|e| e.backend)
        .collect()
}

/// The entries that run on `backend`, in registry order.
pub fn for_backend(backend: BackendKind) -> Vec<&'static AlgorithmEntry> {
    REGISTRY.iter().filter(|e| e.runs_on(backend)).collect()
}

/// Resolves `--algorithms` (empty: every algorithm of the backend), keeping the registry's
/// order and dropping repeats. An algorithm that does not run on `backend` is an error that
/// lists the ones that do.
pub fn resolve(
    names: &[String],
    backend: BackendKind,
) -> Result<Vec<&'static AlgorithmEntry>, String> {
    let available = names_for(backend);
    if names.is_empty() {
        if available.is_empty() {
            return Err(format!(
                "no registered algorithm runs on the {backend} backend"
            ));
        }
        return Ok(for_backend(backend));
    }
    let mut picked: Vec<&'static AlgorithmEntry> = Vec::new();
    for name in names {
        let Some(entry) = lookup(name, backend) else {
            let elsewhere = backends_of(name);
            let why = if elsewhere.is_empty() {
                format!(
                    "unknown algorithm '{name}' (known: {})",
                    crate::registry::names().join(", ")
                )
            } else {
                format!(
                    "algorithm '{name}' does not run on the {backend} backend (it runs on: {})",
                    elsewhere
                        .iter()
                        .map(|b| b.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(format!(
                "{why}; available on --backend {backend}: {}",
                available.join(", ")
            ));
        };
        if !picked.iter().any(|e| e.name == entry.name) {
            picked.push(entry);
        }
    }
    picked.sort_by_key(|e| {
        REGISTRY
            .iter()
            .position(|r| r.name == e.name && r.backend == e.backend)
    });
    Ok(picked)
}

fn unsupported(name: &str, client: &BackendClient) -> LockError {
    LockError::Config(format!(
        "the {name} algorithm cannot use the backend client {client:?}"
    ))
}

/// The queue lock's ideal handoff when a waiter is next: it notices the release after half a
/// poll interval on average, then reads the queue head, writes the main row and reads it back
/// (three round trips).
pub fn queue_ideal_handoff(round_trip: Duration, s: &AlgorithmSettings) -> Duration {
    round_trip * 3 + s.poll_interval / 2
}

/// The bakery lock's ideal handoff when a waiter is next: it notices the release after half a
/// poll interval on average, in one read of the `Numbers` row.
pub fn bakery_ideal_handoff(round_trip: Duration, s: &AlgorithmSettings) -> Duration {
    round_trip + s.poll_interval / 2
}

fn build_bakery(setup: ContenderSetup) -> BuildFuture {
    Box::pin(async move {
        #[allow(clippy::needless_update)]
        let config = lock_bakery::BakeryConfig {
            poll_interval: setup.settings.scaled(setup.settings.poll_interval),
            ..lock_bakery::BakeryConfig::default()
        };
        #[allow(unreachable_patterns)]
        match setup.client {
            BackendClient::Embedded(client) => Ok(Arc::new(lock_bakery::BakeryLocker::new(
                client, setup.ctx, config,
            )?) as Arc<dyn Locker>),
            BackendClient::Cassandra(client) => Ok(Arc::new(lock_bakery::BakeryLocker::new(
                client, setup.ctx, config,
            )?) as Arc<dyn Locker>),
            other => Err(unsupported("bakery", &other)),
        }
    })
}

fn build_shadow(setup: ContenderSetup) -> BuildFuture {
    Box::pin(async move {
        let s = setup.settings;
        let mut backoff = lock_shadow::Backoff::preset(s.backoff.name()).ok_or_else(|| {
            LockError::Config(format!("unknown backoff preset {}", s.backoff.name()))
        })?;
        backoff.owner_max = s.scaled(backoff.owner_max);
        backoff.concurrent_step = s.scaled(backoff.concurrent_step);
        let config = lock_shadow::ShadowConfig {
            backoff,
            ..lock_shadow::ShadowConfig::default()
        };
        #[allow(unreachable_patterns)]
        match setup.client {
            BackendClient::Embedded(client) => Ok(Arc::new(lock_shadow::ShadowLocker::new(
                client, setup.ctx, config,
            )?) as Arc<dyn Locker>),
            BackendClient::Cassandra(client) => Ok(Arc::new(lock_shadow::ShadowLocker::new(
                client, setup.ctx, config,
            )?) as Arc<dyn Locker>),
            other => Err(unsupported("shadow", &other)),
        }
    })
}

fn build_queue(setup: ContenderSetup) -> BuildFuture {
    Box::pin(async move {
        #[allow(clippy::needless_update)]
        let config = lock_queue::QueueConfig {
            poll_interval: setup.settings.scaled(setup.settings.poll_interval),
            ..lock_queue::QueueConfig::default()
        };
        #[allow(unreachable_patterns)]
        match setup.client {
            BackendClient::Embedded(client) => Ok(Arc::new(lock_queue::QueueLocker::new(
                client, setup.ctx, config,
            )?) as Arc<dyn Locker>),
            BackendClient::Cassandra(client) => Ok(Arc::new(lock_queue::QueueLocker::new(
                client, setup.ctx, config,
            )?) as Arc<dyn Locker>),
            other => Err(unsupported("queue", &other)),
        }
    })
}

/// jedis-lock as the seed has it (retry every 100 ms), with the run's TTL as its expiry and
/// the contender's (possibly skewed) clock: expiries are judged by client clocks.
fn build_jedis(setup: ContenderSetup) -> BuildFuture {
    Box::pin(async move {
        let config = lock_redis::JedisConfig::new(setup.settings.scaled(setup.settings.ttl))
            .with_clock(setup.ctx.timestamps.clock());
        match setup.client {
            BackendClient::Redis(backend) => {
                backend.locker(&setup.ctx.owner, lock_redis::Variant::Jedis(config))
            }
            other => Err(unsupported("jedis", &other)),
        }
    })
}

/// The token lock with the run's TTL (renewed every TTL/2, retry every 50 ms).
fn build_redis_token(setup: ContenderSetup) -> BuildFuture {
    Box::pin(async move {
        let config = lock_redis::TokenConfig::new(setup.settings.scaled(setup.settings.ttl));
        match setup.client {
            BackendClient::Redis(backend) => {
                backend.locker(&setup.ctx.owner, lock_redis::Variant::Token(config))
            }
            other => Err(unsupported("redis-token", &other)),
        }
    })
}

/// The ZooKeeper recipe on the contender's own session (whose timeout is the run's TTL).
fn build_zookeeper(setup: ContenderSetup) -> BuildFuture {
    Box::pin(async move {
        match setup.client {
            BackendClient::Zookeeper(backend) => {
                Ok(Arc::new(backend.locker(&setup.ctx.owner)?) as Arc<dyn Locker>)
            }
            other => Err(unsupported("zookeeper", &other)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_algorithm_and_backend() {
        for (i, e) in REGISTRY.iter().enumerate() {
            assert!(
                !REGISTRY[..i]
                    .iter()
                    .any(|o| o.name == e.name && o.backend == e.backend),
                "duplicate {} on {}",
                e.name,
                e.backend
            );
            assert_eq!(lookup(e.name, e.backend).map(|x| x.name), Some(e.name));
        }
        assert_eq!(
            names_for(BackendKind::Embedded),
            ["shadow", "queue", "bakery"]
        );
        assert_eq!(
            names_for(BackendKind::Cassandra),
            ["shadow", "queue", "bakery"]
        );
        assert_eq!(names_for(BackendKind::Redis), ["jedis", "redis-token"]);
        assert_eq!(names_for(BackendKind::Zookeeper), ["zookeeper"]);
        assert_eq!(
            names(),
            [
                "shadow",
                "queue",
                "bakery",
                "jedis",
                "redis-token",
                "zookeeper"
            ]
        );
        assert!(is_known("jedis") && !is_known("paxos"));
    }

    #[test]
    fn resolve_keeps_registry_order_and_rejects_unknown_names() {
        let picked = resolve(
            &["queue".into(), "shadow".into(), "queue".into()],
            BackendKind::Embedded,
        )
        .unwrap();
        assert_eq!(
            picked.iter().map(|e| e.name).collect::<Vec<_>>(),
            ["shadow", "queue"]
        );
        assert_eq!(
            resolve(&[], BackendKind::Embedded).unwrap().len(),
            for_backend(BackendKind::Embedded).len()
        );
        let e = resolve(&["paxos".into()], BackendKind::Embedded).unwrap_err();
        assert!(e.contains("paxos") && e.contains("queue"), "{e}");
        let e = resolve(&["jedis".into()], BackendKind::Cassandra).unwrap_err();
        assert!(
            e.contains("does not run on the cassandra backend")
                && e.contains("runs on: redis")
                && e.contains("available on --backend cassandra: shadow, queue, bakery"),
            "{e}"
        );
        let e = resolve(&["queue".into()], BackendKind::Zookeeper).unwrap_err();
        assert!(
            e.contains("available on --backend zookeeper: zookeeper"),
            "{e}"
        );
    }

    #[test]
    fn queue_ideal_handoff_is_three_round_trips_and_half_a_poll() {
        let s = AlgorithmSettings {
            poll_interval: Duration::from_millis(20),
            backoff: BackoffPreset::Thesis,
            time_scale: 1,
            ttl: Duration::from_secs(10),
        };
        assert_eq!(
            queue_ideal_handoff(Duration::from_millis(1), &s),
            Duration::from_millis(13)
        );
    }
}
