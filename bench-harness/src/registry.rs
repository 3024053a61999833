//! The algorithm registry: name → constructor.
//!
//! Every lock algorithm the harness can measure is one [`AlgorithmEntry`] in [`REGISTRY`]. An
//! entry says which backends it runs on, which run settings it reads (so that the sweeps know
//! whom the poll-interval and clock-skew experiments concern), what its ideal handoff costs,
//! and how to build one contender's [`Locker`] from that contender's [`ContenderSetup`].
//!
//! Adding an algorithm is one entry: a `build_*` function that matches on
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
}

impl AlgorithmSettings {
    /// The settings of `cfg`.
    pub fn of(cfg: &RunConfig) -> Self {
        AlgorithmSettings {
            poll_interval: cfg.poll_interval,
            backoff: cfg.backoff,
            time_scale: cfg.time_scale(),
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

/// One registered algorithm.
pub struct AlgorithmEntry {
    /// Short name, as `Locker::algorithm` returns it and `--algorithms` takes it.
    pub name: &'static str,
    /// One line for `bench-harness list` and the README.
    pub summary: &'static str,
    /// The backends it runs on.
    pub backends: &'static [BackendKind],
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
    /// True when the algorithm runs on `backend`.
    pub fn runs_on(&self, backend: BackendKind) -> bool {
        self.backends.contains(&backend)
    }
}

impl std::fmt::Debug for AlgorithmEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlgorithmEntry")
            .field("name", &self.name)
            .field("backends", &self.backends)
            .finish()
    }
}

/// Backends of the algorithms written against the Cassandra cell model.
const CELL_MODEL: &[BackendKind] = &[BackendKind::Embedded, BackendKind::Cassandra];

/// Every algorithm the harness knows, in the order they run and appear in tables.
pub static REGISTRY: &[AlgorithmEntry] = &[
    AlgorithmEntry {
        name: "shadow",
        summary: "2012 shadow-table lock with randomized backoff (thesis listings 3-4)",
        backends: CELL_MODEL,
        uses_time_source: false,
        uses_poll_interval: false,
        ideal_handoff: None,
        ideal_handoff_text: "",
        build: build_shadow,
    },
    AlgorithmEntry {
        name: "queue",
        summary: "timestamp-ordered queue lock (thesis section 5, listings 5-7)",
        backends: CELL_MODEL,
        uses_time_source: true,
        uses_poll_interval: true,
        ideal_handoff: Some(queue_ideal_handoff),
        ideal_handoff_text: "3 round trips + half the poll interval",
        build: build_queue,
    },
    AlgorithmEntry {
        name: "bakery",
        summary: "Lamport's bakery on Choosing/Numbers column families (seed 002)",
        backends: CELL_MODEL,
        uses_time_source: false,
        uses_poll_interval: true,
        ideal_handoff: Some(bakery_ideal_handoff),
        ideal_handoff_text: "1 round trip + half the poll interval",
        build: build_bakery,
    },
];

/// The entry named `name`.
pub fn lookup(name: &str) -> Option<&'static AlgorithmEntry> {
    REGISTRY.iter().find(|e| e.name == name)
}

/// Every registered name.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.name).collect()
}

/// The entries that run on `backend`, in registry order.
pub fn for_backend(backend: BackendKind) -> Vec<&'static AlgorithmEntry> {
    REGISTRY.iter().filter(|e| e.runs_on(backend)).collect()
}

/// Resolves `--algorithms` (empty: every algorithm of the backend), keeping the registry's
/// order and dropping repeats.
pub fn resolve(
    names: &[String],
    backend: BackendKind,
) -> Result<Vec<&'static AlgorithmEntry>, String> {
    if names.is_empty() {
        let all = for_backend(backend);
        if all.is_empty() {
            return Err(format!(
                "no registered algorithm runs on the {backend} backend"
            ));
        }
        return Ok(all);
    }
    let mut picked = Vec::new();
    for name in names {
        let entry = lookup(name).ok_or_else(|| {
            format!(
                "unknown algorithm '{name}' (known: {})",
                crate::registry::names().join(", ")
            )
        })?;
        if !entry.runs_on(backend) {
            return Err(format!(
                "algorithm '{name}' does not run on the {backend} backend"
            ));
        }
        if !picked
            .iter()
            .any(|e: &&AlgorithmEntry| e.name == entry.name)
        {
            picked.push(entry);
        }
    }
    picked.sort_by_key(|e| REGISTRY.iter().position(|r| r.name == e.name));
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
            other => Err(unsupported("queue", &other)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_resolvable() {
        let names = names();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "duplicate {n}");
            assert_eq!(lookup(n).map(|e| e.name), Some(*n));
        }
        assert!(names.contains(&"shadow") && names.contains(&"queue"));
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
    }

    #[test]
    fn queue_ideal_handoff_is_three_round_trips_and_half_a_poll() {
        let s = AlgorithmSettings {
            poll_interval: Duration::from_millis(20),
            backoff: BackoffPreset::Thesis,
            time_scale: 1,
        };
        assert_eq!(
            queue_ideal_handoff(Duration::from_millis(1), &s),
            Duration::from_millis(13)
        );
    }
}
