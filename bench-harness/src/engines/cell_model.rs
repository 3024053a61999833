//! What the Cassandra-model engines (the embedded store and a real cluster) share: the
//! algorithms written against [`CellStore`] — shadow, queue, bakery — as registry entries for
//! any store type, the contenders' context (time source, TTL, consistency), the GlobalTime
//! service, and the tables the algorithms write.
//!
//! An algorithm written against `CellStore` runs on both engines by one entry in
//! [`entries`]; it is then listed by both, measured by both, and compared in the engines
//! comparison on both.

use super::algorithm::{
    no_primitive, Algorithm, AlgorithmSettings, BuildFuture, Entry, SharedFuture,
};
use super::TimeSourceKind;
use crate::primitive::{Asking, Primitive, PrimitiveKind};
use lock_core::context::ClientContext;
use lock_core::store::CellStore;
use lock_core::time::{GlobalTime, GlobalTimeService, HybridClock, LocalClock, SharedTimeSource};
use lock_core::{LockError, Locker};
use std::sync::Arc;
use std::time::Duration;

/// Every table the Cassandra-model algorithms use, created before a run on a real cluster so
/// that no contender pays for a schema change inside its timed section.
pub const TABLES: [&str; 13] = [
    "shadow_lock_main",
    "shadow_lock_shadow",
    lock_queue::MAIN_TABLE,
    lock_queue::QUEUE_TABLE,
    lock_queue::bounded::BOUNDED_MAIN_TABLE,
    lock_queue::bounded::BOUNDED_QUEUE_TABLE,
    lock_queue::push::PUSH_MAIN_TABLE,
    lock_queue::push::PUSH_QUEUE_TABLE,
    "lock_fence",
    "time_service",
    lock_bakery::CHOOSING_TABLE,
    lock_bakery::NUMBERS_TABLE,
    lock_lwt::LOCK_TABLE,
];

/// Number of replicas of the GlobalTime service when `--time-source global`.
pub const TIME_SERVICE_REPLICAS: usize = 3;

/// The 2012 shadow-table lock.
pub static SHADOW: Algorithm = Algorithm::new(
    "shadow",
    "2012 shadow-table lock with randomized backoff (thesis listings 3-4)",
);

/// The thesis's queue lock.
pub static QUEUE: Algorithm = Algorithm {
    uses_time_source: true,
    uses_poll_interval: true,
    ideal_handoff: Some(queue_ideal_handoff),
    ideal_handoff_text: "3 round trips + half the poll interval",
    primitives: &[PrimitiveKind::Rw, PrimitiveKind::Semaphore],
    ..Algorithm::new("queue", "timestamp-ordered queue lock (thesis section 5, listings 5-7)")
};

/// The queue lock whose reads scan a bounded number of tombstones (one queue column per
/// thread, reused).
pub static QUEUE_BOUNDED: Algorithm = Algorithm {
    uses_time_source: true,
    uses_poll_interval: true,
    ideal_handoff: Some(queue_ideal_handoff),
    ideal_handoff_text: "3 round trips + half the poll interval",
    ..Algorithm::new(
        "queue-bounded",
        "the queue lock with one reused queue column per thread: tombstones per read bounded",
    )
};

/// The bounded queue lock whose releaser rings the next waiter's doorbell.
pub static QUEUE_PUSH: Algorithm = Algorithm {
    uses_time_source: true,
    ideal_handoff: Some(push_ideal_handoff),
    ideal_handoff_text: "6.5 round trips: main delete, queue read, ring, main write and read, fencing token",
    ..Algorithm::new(
        "queue-push",
        "the bounded queue lock with doorbells: the releaser rings the next waiter (1 s fallback poll)",
    )
};

/// Lamport's bakery on two column families (seed 002).
pub static BAKERY: Algorithm = Algorithm {
    uses_poll_interval: true,
    ideal_handoff: Some(bakery_ideal_handoff),
    ideal_handoff_text: "1 round trip + half the poll interval",
    ..Algorithm::new("bakery", "Lamport's bakery on Choosing/Numbers column families (seed 002)")
};

/// Cassandra's lightweight transactions: one compare-and-set to take the lock.
/// No ideal handoff: waiters are unordered and back off at random, so the wait from a release
/// to the next attempt depends on how many wait, not on the algorithm alone.
pub static LWT: Algorithm = Algorithm::new(
    "lwt",
    "Cassandra lightweight transactions: INSERT IF NOT EXISTS with the fencing token in one Paxos round",
);

/// The Cassandra-model algorithms on store type `S`, in the order they run.
pub const fn entries<S: CellStore + Clone + 'static>() -> [Entry<S>; 6] {
    [
        Entry::mutex(&SHADOW, build_shadow::<S>),
        Entry::mutex(&QUEUE, build_queue::<S>).with_shared(build_queue_shared::<S>),
        Entry::mutex(&BAKERY, build_bakery::<S>),
        Entry::mutex(&QUEUE_BOUNDED, build_queue_bounded::<S>),
        Entry::mutex(&QUEUE_PUSH, build_queue_push::<S>),
        Entry::mutex(&LWT, build_lwt::<S>),
    ]
}

/// The push queue lock's ideal handoff: the releaser deletes its main cell, reads the queue
/// and rings the next waiter (half a round trip), which writes and reads the main row and
/// takes a fencing token (two round trips): 6.5 round trips, no poll.
pub fn push_ideal_handoff(round_trip: Duration, _s: &AlgorithmSettings) -> Duration {
    round_trip * 13 / 2
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

/// A contender's context on a cell store: owner, clock and seed, with the run's TTL and
/// consistency (on the tokio clock's scale) and the time source that orders queue entries;
/// `global` makes a reader of the GlobalTime service when that is the source.
pub fn context(
    owner: String,
    clock: LocalClock,
    seed: u64,
    s: &AlgorithmSettings,
    global: impl FnOnce() -> SharedTimeSource,
) -> ClientContext {
    let ctx = ClientContext::new(owner, clock.clone(), seed)
        .with_ttl(s.scaled(s.ttl))
        .with_consistency(s.consistency);
    match s.time_source {
        TimeSourceKind::Local => ctx,
        TimeSourceKind::Hlc => ctx.with_time(Arc::new(HybridClock::new(clock))),
        TimeSourceKind::Global => ctx.with_time(global()),
    }
}

/// A reader of the GlobalTime cell through `store`.
pub fn global_time<S: CellStore + Clone + 'static>(
    store: S,
    s: &AlgorithmSettings,
) -> SharedTimeSource {
    Arc::new(GlobalTime::new(store, s.consistency))
}

/// Starts the GlobalTime service when the settings ask for it and waits for its first value,
/// read through `probe`. `replica(i, skew_us)` makes replica `i`'s store handle and clock
/// (skewed by `skew_us` of the model).
pub async fn start_time_service<S>(
    s: &AlgorithmSettings,
    service_skews: &[i64],
    probe: &S,
    replica: impl Fn(usize, i64) -> (S, LocalClock),
) -> Result<Option<GlobalTimeService>, String>
where
    S: CellStore + Clone,
{
    if s.time_source != TimeSourceKind::Global {
        return Ok(None);
    }
    let replicas = service_skews.iter().enumerate().map(|(i, &skew)| replica(i, skew)).collect();
    let service = GlobalTimeService::start(
        replicas,
        s.scaled(GlobalTimeService::DEFAULT_PERIOD),
        s.consistency,
    );
    // The first updates need a read and a write; wait until the cell exists.
    let reader = GlobalTime::new(probe.clone(), s.consistency);
    let mut waited = Duration::ZERO;
    let step = s.scaled(Duration::from_millis(5));
    while !matches!(reader.read().await, Ok(Some(_))) {
        if waited > s.scaled(Duration::from_secs(5)) {
            return Err("the GlobalTime service wrote no value within 5 s".into());
        }
        lock_core::rt::sleep(step).await;
        waited += step;
    }
    Ok(Some(service))
}

/// A constructor's result as a [`BuildFuture`] (the cell-model lockers need no connecting).
fn ready<L: Locker + 'static>(locker: Result<L, LockError>) -> BuildFuture {
    Box::pin(async move { Ok(Arc::new(locker?) as Arc<dyn Locker>) })
}

fn build_shadow<S: CellStore + Clone + 'static>(
    store: S,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> BuildFuture {
    let Some(mut backoff) = lock_shadow::Backoff::preset(s.backoff.name()) else {
        return ready::<lock_shadow::ShadowLocker<S>>(Err(LockError::Config(format!(
            "unknown backoff preset {}",
            s.backoff.name()
        ))));
    };
    backoff.owner_max = s.scaled(backoff.owner_max);
    backoff.concurrent_step = s.scaled(backoff.concurrent_step);
    let config = lock_shadow::ShadowConfig { backoff, ..lock_shadow::ShadowConfig::default() };
    ready(lock_shadow::ShadowLocker::new(store, ctx, config))
}

/// The queue locks' configuration: the run's poll interval.
fn queue_config(s: &AlgorithmSettings) -> lock_queue::QueueConfig {
    #[allow(clippy::needless_update)]
    lock_queue::QueueConfig {
        poll_interval: s.scaled(s.poll_interval),
        ..lock_queue::QueueConfig::default()
    }
}

fn build_queue<S: CellStore + Clone + 'static>(
    store: S,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> BuildFuture {
    ready(lock_queue::QueueLocker::new(store, ctx, queue_config(s)))
}

/// The queue lock generalised: the readers ahead of the first writer hold, or the first
/// asks that fit in the semaphore's permits hold (`lock-queue`'s `queue-rw` and
/// `queue-semaphore`). The queue has no election.
fn build_queue_shared<S: CellStore + Clone + 'static>(
    store: S,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> SharedFuture {
    let (config, primitive) = (queue_config(s), s.primitive);
    let asking = match primitive {
        Primitive::Mutex => {
            lock_queue::QueueLocker::new(store, ctx, config).map(|l| Asking::Mutex(Arc::new(l)))
        }
        Primitive::Rw { .. } => {
            lock_queue::QueueRwLocker::new(store, ctx, config).map(|l| Asking::Rw(Arc::new(l)))
        }
        Primitive::Semaphore { .. } => lock_queue::QueueSemaphore::new(store, ctx, config)
            .map(|l| Asking::Semaphore(Arc::new(l))),
        Primitive::Election => Err(LockError::Config(no_primitive(&QUEUE, primitive))),
    };
    Box::pin(std::future::ready(asking))
}

fn build_lwt<S: CellStore + Clone + 'static>(
    store: S,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> BuildFuture {
    let defaults = lock_lwt::Backoff::default();
    let backoff = lock_lwt::Backoff {
        initial: s.scaled(defaults.initial),
        max: s.scaled(defaults.max),
        ..defaults
    };
    let config = lock_lwt::LwtConfig { backoff, ..lock_lwt::LwtConfig::default() };
    ready(lock_lwt::LwtLocker::new(store, ctx, config))
}

fn build_queue_bounded<S: CellStore + Clone + 'static>(
    store: S,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> BuildFuture {
    ready(lock_queue::BoundedQueueLocker::new(store, ctx, queue_config(s)))
}

fn build_queue_push<S: CellStore + Clone + 'static>(
    store: S,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> BuildFuture {
    let Some(bell) = store.doorbell() else {
        return ready::<lock_queue::PushQueueLocker<S>>(Err(LockError::Config(
            "queue-push needs doorbells, and this store has none".into(),
        )));
    };
    let config =
        lock_queue::PushConfig { fallback_poll: s.scaled(lock_queue::push::DEFAULT_FALLBACK_POLL) };
    ready(lock_queue::PushQueueLocker::new(store, ctx, config, bell))
}

fn build_bakery<S: CellStore + Clone + 'static>(
    store: S,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> BuildFuture {
    #[allow(clippy::needless_update)]
    let config = lock_bakery::BakeryConfig {
        poll_interval: s.scaled(s.poll_interval),
        ..lock_bakery::BakeryConfig::default()
    };
    ready(lock_bakery::BakeryLocker::new(store, ctx, config))
}

/// One contender's locker of `algorithm` from `entries` on a cell store: `client` with
/// `clock`, its context from [`context`].
pub async fn contender<S: CellStore + Clone + 'static>(
    entries: &[Entry<S>],
    algorithm: &Algorithm,
    client: S,
    clock: LocalClock,
    spec: super::ContenderSpec,
    s: &AlgorithmSettings,
) -> Result<crate::primitive::Asking, String> {
    let entry = Entry::find(entries, algorithm)
        .ok_or_else(|| format!("{} does not run on this engine", algorithm.name))?;
    let ctx = context(spec.owner, clock, spec.seed, s, || global_time(client.clone(), s));
    entry.asking(client, ctx, s).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::BackoffPreset;

    #[test]
    fn queue_ideal_handoff_is_three_round_trips_and_half_a_poll() {
        let s = AlgorithmSettings {
            poll_interval: Duration::from_millis(20),
            backoff: BackoffPreset::Thesis,
            time_scale: 1,
            ttl: Duration::from_secs(10),
            consistency: lock_core::store::Consistency::Quorum,
            time_source: TimeSourceKind::Local,
            primitive: crate::primitive::Primitive::Mutex,
        };
        assert_eq!(queue_ideal_handoff(Duration::from_millis(1), &s), Duration::from_millis(13));
        assert_eq!(bakery_ideal_handoff(Duration::from_millis(1), &s), Duration::from_millis(11));
    }
}
