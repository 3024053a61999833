//! # lock-core
//!
//! The foundation every lock algorithm of this workspace stands on:
//!
//! - [`lock`]: the lock interface (thesis listing 1): a mandatory lock with an optional
//!   timeout, a soft lock, a guard with lock id, owner id and fencing token that releases on
//!   [`LockGuard::release`] or drop, a signal when the lease is lost (from its keeper, or from
//!   its [`LeaseDeadline`] passing on the holder's clock, whichever comes first), the three
//!   attempt states of the 2012 algorithm, and typed errors;
//! - [`store`]: the Cassandra cell model, as the [`CellStore`] trait the Cassandra algorithms
//!   are generic over;
//! - [`embedded`]: the default backend, an in-process store with exactly those semantics, a
//!   latency model, replication with per-operation consistency, replicas that can be stopped,
//!   per-client clock skew and isolation, and operation counters; it runs in simulated time in
//!   a [`rt::Simulation`] and in wall time on a multi-thread tokio runtime;
//! - [`rt`]: the runtime every lock and the embedded store call for time, sleeps and
//!   tasks: a deterministic single-threaded executor in simulated time ([`rt::Simulation`]),
//!   tokio elsewhere;
//! - [`time`]: clocks and time sources (local clock with skew, the thesis's GlobalTime service,
//!   a hybrid logical clock);
//! - [`lease`]: the lease keeper that renews a holder's cells every TTL/2 and says when the
//!   lease is lost;
//! - [`fence`]: fencing tokens on the cell store;
//! - [`session`]: one session at a time, renewed when it ends, for the server backends whose
//!   locks live in a session (ZooKeeper's, an etcd lease);
//! - [`order`]: Lamport's first come, first served over one lock's grants, as the
//!   conformance suite checks it and the harness counts it;
//! - [`requests`]: the hook through which the server backends report each request they send,
//!   so that their load can be counted (the embedded store counts its own);
//! - [`rwlock`] and [`semaphore`]: beside the lock, a reader-writer lock and a counting
//!   semaphore whose permits are leases, in the lock's style (timeouts, try variants, the
//!   lost signal, tokens); [`election`]: leader election, a lock plus an announced value and
//!   a stream of changes; [`usage`]: the requests they refuse as mistakes of the caller;
//! - `conformance` (feature `conformance`): the shared suite every algorithm runs.
//!
//! # Which rows stay bounded
//!
//! Tombstones stay for `gc_grace` (10 days) and every read pays for those before its live cells
//! ([`embedded`] models both), so every row the algorithms write was checked for growth:
//!
//! | row | columns | bounded? |
//! |---|---|---|
//! | shadow lock: main, shadow | thread id | yes: one cell per thread; a new cell replaces the thread's own tombstone |
//! | queue lock: main | thread id | yes, likewise |
//! | queue lock (thesis): queue | time + thread id, new per request | **no**: one tombstone per request, all before the live cells; reads fail past 100,000 (Cassandra's failure threshold; `results/longrun/README.md` shows the growth) |
//! | queue-bounded: queue, main | thread id (ticket in the value) | yes: at most K tombstones per read for K threads |
//! | bakery: `Choosing`, `Numbers` | thread id | yes: one cell per thread |
//! | fencing tokens ([`fence`]) | `MAX − token` | live cells: the newest [`fence::KEEP_TOKENS`] (plus one per crashed holder); its tombstones sort after the live cells, so the `first(1)` read scans none; they are purged by compaction |
//! | `GlobalTime` ([`time`]) | one column | yes: one cell, only overwritten |
//!
//! ```
//! use lock_core::embedded::{EmbeddedConfig, EmbeddedStore};
//! use lock_core::store::{CellStore, CellWrite, Consistency, Slice};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::store::StoreError> {
//! let store = EmbeddedStore::new(EmbeddedConfig::default());
//! let client = store.client("worker-1");
//! let cell = CellWrite { column: "owner".into(), value: b"worker-1".to_vec(), timestamp: 10, ttl: None };
//! client.write("locks", "invoice-42", &[cell], Consistency::Quorum).await?;
//! let row = client.read("locks", "invoice-42", Slice::all(), Consistency::Quorum).await?;
//! assert_eq!(row[0].value, b"worker-1");
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod backend;
pub mod context;
pub mod doorbell;
pub mod election;
pub mod embedded;
pub mod fence;
pub mod lease;
pub mod lock;
pub mod order;
pub mod requests;
pub mod retry;
pub mod rt;
pub mod rwlock;
pub mod secret;
pub mod semaphore;
pub mod session;
pub mod store;
pub mod time;
pub mod tls;
pub mod usage;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use backend::{BackendError, BackendErrorKind};
pub use election::{Elector, Leader, Leadership, Observer};
pub use lock::{AttemptResult, LeaseDeadline, LeaseState, LockError, LockGuard, Locker};
pub use rwlock::{Access, RwLocker, WriterPolicy};
pub use semaphore::{Permits, Semaphore};
pub use store::{Cell, CellStore, CellWrite, Consistency, Micros, Slice, StoreError};
pub use usage::UsageError;
