//! What the harness knows about an algorithm, whatever engine runs it ([`Algorithm`]), what
//! the algorithms read of a run ([`AlgorithmSettings`]), and an engine's registry entry
//! ([`Entry`]): an algorithm and how to build one contender's locker from the engine's client.

use crate::primitive::{Asking, Primitive, PrimitiveKind};
use lock_core::context::ClientContext;
use lock_core::rwlock::WriterPolicy;
use lock_core::store::Consistency;
use lock_core::{LockError, Locker};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// One lock algorithm as reports and experiments see it (the same on every engine it runs
/// on).
#[derive(Debug)]
pub struct Algorithm {
    /// Short name, as `--algorithms` takes it.
    pub name: &'static str,
    /// One line for `bench-harness list` and the README.
    pub summary: &'static str,
    /// Reads `--time-source` to order its waiters (the skew experiment runs it per source).
    pub uses_time_source: bool,
    /// Reads `--poll-interval` (the poll-interval experiment runs it).
    pub uses_poll_interval: bool,
    /// The handoff the algorithm should achieve when someone waits, given the mean round trip
    /// and the settings: reports divide the measured median gap by it.
    pub ideal_handoff: Option<fn(Duration, &AlgorithmSettings) -> Duration>,
    /// The ideal handoff in words, for reports ("" without one).
    pub ideal_handoff_text: &'static str,
    /// Hands out fencing tokens that increase in grant order (false: plain Redlock, whose
    /// guards carry none; its token order is not checked, and reports say n/a).
    pub fences: bool,
    /// The primitives besides the mutex its family has (`--primitive`), built by its engines'
    /// [`Entry::shared`].
    pub primitives: &'static [PrimitiveKind],
}

impl Algorithm {
    /// An algorithm that reads neither the time source nor the poll interval and has no ideal
    /// handoff (fill in the rest with struct update syntax).
    pub const fn new(name: &'static str, summary: &'static str) -> Algorithm {
        Algorithm {
            name,
            summary,
            uses_time_source: false,
            uses_poll_interval: false,
            ideal_handoff: None,
            ideal_handoff_text: "",
            fences: true,
            primitives: &[],
        }
    }
}

/// What a constructor returns: it may need to connect first, hence a future.
pub type BuildFuture = Pin<Box<dyn Future<Output = Result<Arc<dyn Locker>, LockError>> + Send>>;

/// What a constructor of the other primitives returns.
pub type SharedFuture = Pin<Box<dyn Future<Output = Result<Asking, LockError>> + Send>>;

/// One algorithm on one engine: how to build a contender's locker from the engine's client
/// type `C`, its context (owner id, clocks, TTL, consistency, time source, seed) and the run's
/// settings.
pub struct Entry<C> {
    /// The algorithm.
    pub algorithm: &'static Algorithm,
    /// Builds one contender's locker.
    pub build: fn(C, ClientContext, &AlgorithmSettings) -> BuildFuture,
    /// Builds one contender's reader-writer lock, semaphore or elector of the same family
    /// (the one `settings.primitive` names; it refuses one it does not have), when the
    /// algorithm has any.
    pub shared: Option<fn(C, ClientContext, &AlgorithmSettings) -> SharedFuture>,
}

impl<C> Entry<C> {
    /// The exclusive lock `algorithm` alone.
    pub const fn mutex(
        algorithm: &'static Algorithm,
        build: fn(C, ClientContext, &AlgorithmSettings) -> BuildFuture,
    ) -> Self {
        Entry { algorithm, build, shared: None }
    }

    /// With `shared` for the other primitives.
    pub const fn with_shared(
        self,
        shared: fn(C, ClientContext, &AlgorithmSettings) -> SharedFuture,
    ) -> Self {
        Entry { shared: Some(shared), ..self }
    }

    /// Contender `ctx.owner`'s handle on the primitive `s.primitive` names: the locker, or
    /// the other primitive of the family; an error naming what is missing when the algorithm
    /// has none.
    pub async fn asking(
        &self,
        client: C,
        ctx: ClientContext,
        s: &AlgorithmSettings,
    ) -> Result<Asking, String> {
        match (s.primitive, self.shared) {
            (Primitive::Mutex, _) => {
                (self.build)(client, ctx, s).await.map(Asking::Mutex).map_err(|e| e.to_string())
            }
            (_, Some(shared)) => {
                let asking = shared(client, ctx, s).await.map_err(|e| e.to_string())?;
                match (s.primitive, &asking) {
                    (Primitive::Rw { readers_first: true, .. }, Asking::Rw(l))
                        if l.writer_policy() != WriterPolicy::ReadersFirst =>
                    {
                        Err(format!(
                            "the {} algorithm's reader-writer lock serves writers in queue \
                             order; it has no readers-first policy (--primitive {})",
                            self.algorithm.name, s.primitive
                        ))
                    }
                    _ => Ok(asking),
                }
            }
            (_, None) => Err(no_primitive(self.algorithm, s.primitive)),
        }
    }
}

/// Why `algorithm` cannot run `primitive`.
pub fn no_primitive(algorithm: &Algorithm, primitive: Primitive) -> String {
    format!(
        "the {} algorithm has no {} here (--primitive {primitive}); the algorithms with one \
         are listed by `bench-harness list`",
        algorithm.name,
        primitive.noun()
    )
}

/// A client that makes one kind of lock per owner, with nothing an algorithm chooses: the
/// engines with one algorithm (etcd's Mutex, ZooKeeper's recipe, the lock service) build
/// each contender's locker the same way, by [`Entry::per_owner`].
pub trait PerOwner: Send + 'static {
    /// The lock `owner` takes through this client.
    fn locker_of(&self, owner: &str) -> Result<Arc<dyn Locker>, LockError>;

    /// The reader-writer lock, semaphore or elector `owner` takes through this client, for
    /// `primitive` (never the mutex); `None` when the client has none of that kind.
    fn shared_of(&self, _owner: &str, _primitive: Primitive) -> Option<Result<Asking, LockError>> {
        None
    }
}

/// Implements [`PerOwner`] for a client type whose inherent `locker(&self, owner)` makes the
/// owner's lock (the lock crates give their clients no trait in common for it), and with
/// `rw: …, semaphore: …, elector: …` the inherent constructors of its other primitives.
macro_rules! per_owner_client {
    ($client:ty $(, rw: $rw:ident, semaphore: $sem:ident, elector: $el:ident)?) => {
        impl $crate::engines::algorithm::PerOwner for $client {
            fn locker_of(
                &self,
                owner: &str,
            ) -> Result<std::sync::Arc<dyn lock_core::Locker>, lock_core::LockError> {
                Ok(std::sync::Arc::new(self.locker(owner)?))
            }
            $(
            fn shared_of(
                &self,
                owner: &str,
                primitive: $crate::primitive::Primitive,
            ) -> Option<Result<$crate::primitive::Asking, lock_core::LockError>> {
                use $crate::primitive::{Asking, Primitive};
                use std::sync::Arc;
                Some(match primitive {
                    Primitive::Mutex => self.locker_of(owner).map(Asking::Mutex),
                    Primitive::Rw { .. } => self.$rw(owner).map(|l| Asking::Rw(Arc::new(l))),
                    Primitive::Semaphore { .. } => {
                        self.$sem(owner).map(|l| Asking::Semaphore(Arc::new(l)))
                    }
                    Primitive::Election => self.$el(owner).map(|l| Asking::Election(Arc::new(l))),
                })
            }
            )?
        }
    };
}
pub(crate) use per_owner_client;

impl<C: PerOwner> Entry<C> {
    /// The entry of `algorithm`, each contender's locker made by its client for its owner id
    /// (the run's settings are the client's, given when it connected).
    pub const fn per_owner(algorithm: &'static Algorithm) -> Self {
        Entry { algorithm, build: build_per_owner::<C>, shared: Some(build_shared_per_owner::<C>) }
    }
}

fn build_shared_per_owner<C: PerOwner>(
    client: C,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> SharedFuture {
    let primitive = s.primitive;
    Box::pin(async move {
        client.shared_of(&ctx.owner, primitive).unwrap_or_else(|| {
            Err(LockError::Config(format!(
                "this engine has no {} (--primitive {primitive})",
                primitive.noun()
            )))
        })
    })
}

fn build_per_owner<C: PerOwner>(
    client: C,
    ctx: ClientContext,
    _: &AlgorithmSettings,
) -> BuildFuture {
    Box::pin(async move { client.locker_of(&ctx.owner) })
}

impl<C> Entry<C> {
    /// The entry of `algorithm` in `entries`.
    pub fn find<'a>(entries: &'a [Entry<C>], algorithm: &Algorithm) -> Option<&'a Entry<C>> {
        entries.iter().find(|e| e.algorithm.name == algorithm.name)
    }

    /// The algorithms of `entries`, in order.
    pub fn algorithms(entries: &[Entry<C>]) -> Vec<&'static Algorithm> {
        entries.iter().map(|e| e.algorithm).collect()
    }
}

/// What the algorithms read of a run, in the model's time, with the time scale of the run's
/// clock.
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
    /// Lease TTL, Redis expiry, ZooKeeper session timeout, etcd lease TTL (model time).
    pub ttl: Duration,
    /// Consistency of every read and write of the Cassandra-model locks.
    pub consistency: Consistency,
    /// What orders the queue lock's waiters.
    pub time_source: TimeSourceKind,
    /// What the contenders ask for (`--primitive`).
    pub primitive: Primitive,
}

impl AlgorithmSettings {
    /// A model duration on the tokio clock.
    pub fn scaled(&self, d: Duration) -> Duration {
        d * self.time_scale
    }
}

/// `name()`, the name used on the command line and in result files, and a [`fmt::Display`]
/// that writes it, for an enum of settings.
macro_rules! named {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The name used on the command line and in result files.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use named;

/// What orders the queue lock's entries: the time source of its stamps.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum TimeSourceKind {
    /// Each contender's own (possibly skewed) clock.
    Local,
    /// A hybrid logical clock per contender over its skewed clock.
    Hlc,
    /// The thesis's replicated GlobalTime service (three service replicas updating every
    /// 500 ms, with clocks skewed like the contenders').
    Global,
}

named!(TimeSourceKind {
    Local => "local",
    Hlc => "hlc",
    Global => "global",
});

/// The shadow lock's backoff preset (`lock_shadow::Backoff::preset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackoffPreset {
    /// Thesis listing 4: 0–1000 ms after `AnotherThreadIsOwner`, 0–50·attempt ms after
    /// `ConcurrentAttempt`.
    Thesis,
    /// The production successor: 0–50·⌊e^min(attempt,5)⌋ ms after `ConcurrentAttempt`.
    Production,
}

named!(BackoffPreset {
    Thesis => "thesis",
    Production => "production",
});
