//! # The queue lock
//!
//! The thesis's own algorithm (`seeds/000`, section 5, listings 5–7): threads queue in a
//! Cassandra row ordered by time, and only the head of the queue tries to take the lock, so
//! the lock is handed over in arrival order instead of being fought for.
//!
//! ## Protocol
//!
//! Per lock id two rows: the **queue** row ([`QUEUE_TABLE`]) and the **main** row
//! ([`MAIN_TABLE`]).
//!
//! *Queue column* (listing 5): the time from the configured [`TimeSource`] in microseconds,
//! left-padded with zeros to 20 digits, followed by the thread id. Cells sort byte-wise, so the
//! row's order is arrival order, ties broken by thread id. In the main row the column is the
//! thread id.
//!
//! `GetLock` (listing 6):
//! 1. join the queue: write our queue cell;
//! 2. read the first cell of the queue; if it is ours: write our cell into the main row (3) and
//!    read the main row; if ours is the only cell (4) the lock is ours (5); otherwise delete our
//!    main cell (7) and go to 2;
//! 3. not first (9): wait and go to 2 (10).
//!
//! `TryGetLock` (listing 7):
//! 1. if the main row holds any cell, return false (1–2);
//! 2. join the queue (3);
//! 3. if first (4): write into the main row (5); alone means true (6–7); otherwise delete our
//!    main cell and re-check from 3 (8–10);
//! 4. not first: leave the queue and return false (11–13).
//!
//! ## Choices the thesis leaves open
//! - **Poll interval**: how long a waiter waits before reading the queue again. Default
//!   [`DEFAULT_POLL_INTERVAL`] (20 ms): on a LAN cluster with ~1 ms round trips a release is
//!   noticed on average 10 ms later, against the shadow lock's random 0–1000 ms sleep, while a
//!   waiter costs at most 50 queue reads a second. The harness charts its effect.
//! - The listing goes from a failed main-row check straight back to step 2. We wait one poll
//!   interval there too: a first-in-queue waiter whose main check fails is facing a holder
//!   (whose clock put it later in the queue), and without a wait it would loop on three round
//!   trips without pause.
//! - Release deletes the main cell before the queue cell (the lease keeper keeps cells sorted,
//!   and [`MAIN_TABLE`] sorts before [`QUEUE_TABLE`]): the next waiter, seeing itself first,
//!   then finds the main row already empty.
//!
//! - **Time source**: any [`TimeSource`] of the context. With the local clock, a client whose
//!   clock is behind queues ahead of earlier arrivals (the thesis's own caveat); the GlobalTime
//!   service removes skew but moves only every 500 ms, so joiners within one period tie and are
//!   ordered by thread id; the hybrid clock observes only the queue head's time, which is older
//!   than any new joiner's, so here it behaves like the local clock. The harness charts all
//!   three against skew.
//! - **Timeout**: checked between polls; a grant that completes while the deadline passes is
//!   still returned (the lock is held, so returning it is the useful answer).
//!
//! ## Leases and fencing
//! Every cell carries the context's TTL. The queue cell is kept by the
//! [`LeaseKeeper`](lock_core::lease::LeaseKeeper) from the moment it is written — a waiter's
//! place would otherwise expire — and the main cell from the grant. Release, timeout and
//! failure stop the keeper and delete the cells. A waiter whose lease is lost stops waiting
//! with [`LockError::LeaseLost`]. The fencing token comes from [`lock_core::fence`].
//!
//! ## Invariants the tests check
//! - at most one holder (Theorems 1 and 3), over many seeds, simulated and wall time;
//! - with agreeing clocks the lock is granted in queue order: no overtakes
//!   (`tests/fairness.rs`);
//! - first come, first served: a request whose queue cell was acknowledged before another
//!   request began is granted first; the guard says when (`LockGuard::queued_at`) and the
//!   suite's `one_lock_one_holder` checks it, for all three locks;
//! - fencing tokens strictly increase; a crashed holder frees the lock after its TTL;
//! - a timed-out or soft-lock attempt leaves no queue cell behind.
//!
//! ## First come, first served needs agreeing clocks
//! A request's place is its queue time, read from the contender's clock before it writes its
//! queue cell. With skewed clocks a request that begins *after* another's cell was
//! acknowledged can still read an earlier time and go ahead of it: a breach of first come,
//! first served, not a reordering of concurrent requests (the harness counts these as
//! "overtaken in line"). So with skewed clocks the queue locks (this one, the bounded and the
//! push variants) break first come, first served, and the more the clocks disagree, the more
//! grants go to a request that came later. A hybrid logical clock (`--time-source hlc`) does
//! not help: it moves past what a contender has seen, and the contender takes its time before
//! it reads the queue; nor does the thesis's GlobalTime once its replicas' clocks are skewed
//! too. The bakery lock orders by the numbers it draws and reads no clock for that, so it
//! keeps first come, first served whatever the skew. The bench-harness test
//! `skewed_clocks_break_first_come_first_served_for_the_queue_lock_but_not_the_bakery`
//! (`bench-harness/tests/cli.rs`) shows both: with clocks skewed by ±100 ms the queue lock's
//! grants are overtaken in line, the bakery's never. The queue locks' figures against skew, for
//! each time source, are in the sweep's "Clock skew" section (`results/README.md`).
//!
//! ## Tombstones, and the bounded variant
//! Every request writes a new queue column and deletes it afterwards. On Cassandra each
//! deletion stays as a tombstone for `gc_grace_seconds` (10 days), before every live cell of
//! the queue row, so every head read scans one tombstone per request made since: reads grow
//! slower for the whole run and fail once the row holds more tombstones than the store's
//! failure threshold (Cassandra's `tombstone_failure_threshold`, 100,000 by default; the
//! embedded store models this, see `lock_core::embedded`; a real node's and the model's runs
//! are in `results/longrun/README.md`). The lock stays as the thesis wrote it;
//! [`bounded::BoundedQueueLocker`] keeps its protocol and order with one reused queue column
//! per thread, so its reads scan at most one tombstone per thread. [`push::PushQueueLocker`]
//! (`queue-push`) is the bounded lock with doorbells: whoever releases rings the next waiter
//! instead of letting it poll (the feedback section 6 of the thesis wished for). The main row's
//! columns are thread ids already: a thread's next main cell replaces its own tombstone, so
//! the main row holds at most one cell per thread.
//!
//! ## Readers, writers and permits
//! [`QueueRwLocker`] (`queue-rw`) and [`QueueSemaphore`] (`queue-semaphore`) are the same
//! protocol for asks that may share the lock: the queue decides who tries, the main row who
//! holds, and "alone in the main row" becomes "the others there leave room" (readers beside
//! readers, at most N permits). [`shared`] has the protocol and its safety argument.
//!
//! ```
//! use lock_core::{context::ClientContext, embedded::{EmbeddedConfig, EmbeddedStore}};
//! use lock_core::{Access, RwLocker, Semaphore};
//! use lock_queue::{QueueRwLocker, QueueSemaphore};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! let store = EmbeddedStore::new(EmbeddedConfig::default());
//! let client = |name: &str| {
//!     let c = store.client(name);
//!     let ctx = ClientContext::new(name, c.clock(), 7);
//!     (c, ctx)
//! };
//! let (c, ctx) = client("reader-1");
//! let reader = QueueRwLocker::new(c, ctx, Default::default())?;
//! let (c, ctx) = client("reader-2");
//! let other = QueueRwLocker::new(c, ctx, Default::default())?;
//! let a = reader.read("catalogue", None).await?;
//! let b = other.read("catalogue", None).await?; // readers share
//! // It holds a read: asking to write is refused, not a wait for itself.
//! assert!(other.try_lock("catalogue", Access::Write).await.is_err());
//! a.release().await?;
//! b.release().await?;
//!
//! let (c, ctx) = client("worker-1");
//! let pool = QueueSemaphore::new(c, ctx, Default::default())?;
//! let permits = pool.acquire("db-connections", 4, 2, None).await?; // 2 of 4 permits
//! assert_eq!(permits.tokens().len(), 2);
//! permits.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Example
//! ```
//! use lock_core::{context::ClientContext, embedded::{EmbeddedConfig, EmbeddedStore}, Locker};
//! use lock_queue::{QueueConfig, QueueLocker};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! let store = EmbeddedStore::new(EmbeddedConfig::default());
//! let client = store.client("worker-1");
//! let ctx = ClientContext::new("worker-1", client.clock(), 7);
//! let locker = QueueLocker::new(client, ctx, QueueConfig::default())?;
//! if let Some(guard) = locker.try_lock("report-2026").await? {
//!     // ... the critical section ...
//!     guard.release().await?;
//! }
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::lock::LockError;
use lock_core::store::{CellStore, Micros, Slice};
#[allow(unused_imports)]
use lock_core::time::TimeSource;
use protocol::{Parts, Place, Queue};
use std::time::Duration;

/// The [`Locker`] of a queue lock: listings 6 and 7 from [`protocol`], whatever its queue.
macro_rules! queue_locker {
    ($locker:ident, $name:literal) => {
        #[async_trait::async_trait]
        impl<S: lock_core::store::CellStore + Clone> lock_core::lock::Locker for $locker<S> {
            fn algorithm(&self) -> &str {
                $name
            }

            fn owner(&self) -> &str {
                &self.parts.ctx.owner
            }

            /// Listing 6, with a timeout that leaves the queue.
            async fn lock(
                &self,
                lock_id: &str,
                timeout: Option<std::time::Duration>,
            ) -> Result<lock_core::lock::LockGuard, lock_core::lock::LockError> {
                crate::protocol::lock(self, lock_id, timeout).await
            }

            /// Listing 7.
            async fn try_lock(
                &self,
                lock_id: &str,
            ) -> Result<Option<lock_core::lock::LockGuard>, lock_core::lock::LockError> {
                crate::protocol::try_lock(self, lock_id).await
            }
        }
    };
}

pub mod bounded;
mod protocol;
pub mod push;
pub mod rwlock;
pub mod semaphore;
pub mod shared;
pub use bounded::BoundedQueueLocker;
pub use push::{PushConfig, PushQueueLocker};
pub use rwlock::QueueRwLocker;
pub use semaphore::QueueSemaphore;

/// The main row's table: who holds the lock.
pub const MAIN_TABLE: &str = "queue_lock_main";
/// The queue row's table: who waits, in time order.
pub const QUEUE_TABLE: &str = "queue_lock_queue";

/// The default wait between two reads of the queue.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Settings of the queue lock.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueueConfig {
    /// Wait between two reads of the queue.
    pub poll_interval: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig { poll_interval: DEFAULT_POLL_INTERVAL }
    }
}

/// Listing 5: the queue column of a thread joining at `micros`.
pub fn queue_column(micros: Micros, owner: &str) -> String {
    format!("{:020}{owner}", micros.max(0))
}

/// The time prefix of a queue column.
pub fn queue_column_time(column: &str) -> Option<Micros> {
    column.get(..20).and_then(|t| t.parse().ok())
}

/// The queue lock for one owner (thread).
pub struct QueueLocker<S> {
    parts: Parts<S>,
}

impl<S: CellStore + Clone> QueueLocker<S> {
    /// A locker for `ctx.owner` over `store`.
    pub fn new(store: S, ctx: ClientContext, config: QueueConfig) -> Result<Self, LockError> {
        Ok(QueueLocker { parts: Parts::new(store, ctx, config)? })
    }
}

#[async_trait]
impl<S: CellStore + Clone> Queue for QueueLocker<S> {
    type Store = S;
    const MAIN_TABLE: &'static str = MAIN_TABLE;

    fn parts(&self) -> &Parts<S> {
        &self.parts
    }

    /// Listing 5 and step 1 of listings 6/7: take the time, write the queue cell, keep it.
    async fn join(&self, lock_id: &str) -> Result<Place, LockError> {
        let err = |e| LockError::store(lock_id, e);
        let now = self.parts.ctx.time.now().await.map_err(err)?;
        let column = queue_column(now, &self.parts.ctx.owner);
        protocol::join_queue(
            self,
            QUEUE_TABLE,
            lock_id,
            &column,
            self.parts.ctx.owner.as_bytes(),
            column.clone(),
        )
        .await
    }

    /// Steps 2–3 of listing 6 (4–5 of listing 7): read the first queue cell; is it ours? The
    /// main row (the rest of the steps) is [`protocol`]'s.
    async fn is_head(&self, lock_id: &str, place: &Place) -> Result<bool, LockError> {
        let c = self.parts.ctx.consistency;
        let head = self.parts.store.read_shared(QUEUE_TABLE, lock_id, Slice::first(1), c).await;
        let head = head.map_err(|e| LockError::store(lock_id, e))?;
        let Some(first) = head.first() else {
            // Our own cell is gone (expired, or the store lost it): the lease says so.
            return Err(place
                .lease
                .lost_error(lock_id, "our queue cell is no longer in the queue"));
        };
        if let Some(t) = queue_column_time(&first.column) {
            self.parts.ctx.time.observe(t);
        }
        if first.column > place.id {
            return Err(place
                .lease
                .lost_error(lock_id, "our queue cell is no longer in the queue"));
        }
        Ok(first.column == place.id)
    }
}

queue_locker!(QueueLocker, "queue");
