//! The default backend: an in-process store with exactly the semantics of the Cassandra cell
//! model (the rules are listed in [`crate::store`]), plus what a benchmark needs, able to run
//! in simulated time.
//!
//! # The model
//!
//! - **Replicas.** The store keeps [`EmbeddedConfig::replicas`] full copies of the data. Each
//!   holds its rows sorted by column name byte-wise, and applies every write or delete by
//!   reconciling it with the version already there ([`reconcile`]): the greater timestamp wins,
//!   on a tie a tombstone or an expired cell wins over a live one, between live cells the
//!   greater value wins. An expired TTL cell therefore acts as a tombstone with the cell's own
//!   timestamp, so a write with an older timestamp does not bring it back.
//! - **Latency.** A request to one replica takes a round trip sampled from the
//!   [`LatencyModel`]; the replica applies the write (or takes its read snapshot) half-way and the
//!   answer reaches the coordinator at the end of the round trip.
//! - **Writes and deletes** go to every running replica. They complete when
//!   `consistency.required(replicas)` replicas acknowledged; the others still apply them later,
//!   as in Cassandra. This also holds when the caller drops the future before it completes: a
//!   message once sent is not recalled, so a cancelled write may still land.
//!   With too few running replicas the request fails at once with
//!   [`StoreError::Unavailable`] and nothing is applied; when acknowledgements do not arrive in
//!   [`EmbeddedConfig::request_timeout`] it fails with [`StoreError::WriteTimeout`] (and may
//!   have been applied).
//! - **Reads** go to `required` running replicas chosen at random by the store's seeded RNG.
//!   Each answers with its row state (tombstones included) at its own read instant; the
//!   coordinator merges the answers per column with [`reconcile`] and only then drops dead
//!   cells and applies the slice's limit. Dropping dead cells first would let one replica's
//!   stale live cell hide another replica's newer tombstone. So a `QUORUM` read sees every
//!   `QUORUM` write that completed before it, and a `ONE` read may be stale.
//! - **Faults.** [`EmbeddedStore::stop_replica`] makes a replica ignore writes and reads until
//!   [`EmbeddedStore::start_replica`]; it keeps its data but misses what was written meanwhile
//!   (no hinted handoff, no read repair). [`EmbeddedStore::lag_replica`] makes a replica
//!   overloaded, as a Cassandra node whose mutation stage is backed up: it applies (and
//!   acknowledges) every mutation late by a fixed delay and drops a fraction of them without
//!   applying or acknowledging them (Cassandra's "dropped MUTATION messages"), while it still
//!   answers reads at once from what it has. [`EmbeddedStore::isolate`] cuts one client off:
//!   its requests fail with [`StoreError::Unreachable`] after the request timeout, unapplied.
//!   [`EmbeddedStore::pause_client`] freezes one client as a stop-the-world GC pause or
//!   `SIGSTOP` would: a request it would send waits until it resumes, and an answer that
//!   arrives meanwhile is seen only then (a request already sent still reaches the replicas).
//!   [`EmbeddedStore::jump_clock`] steps one client's clock.
//! - **Time.** Every delay is a tokio sleep and every instant a [`tokio::time::Instant`];
//!   TTLs run on the store's clock (the replica's apply instant plus the TTL, exactly, with no
//!   rounding to seconds; a zero TTL expires at once). tokio's timer has millisecond
//!   resolution: a sleep ends on the next millisecond tick, so sub-millisecond latencies round
//!   up (a 200 µs round trip takes 1 ms). Latency models in whole milliseconds are taken as
//!   they are.
//! - **Tombstones stay**, as in Cassandra. A deletion leaves a tombstone, and a TTL cell past
//!   its expiry becomes one, until a **compaction** purges it. The compaction model: each
//!   replica compacts each row at the row's first access (read or write) at least
//!   [`EmbeddedConfig::compaction_interval`] after its previous compaction (or its creation),
//!   and purges the dead cells that have been dead for at least [`EmbeddedConfig::gc_grace`]
//!   by then. The interval defaults to `gc_grace` itself, so a dead cell lives between one and
//!   two `gc_grace` past its death: with the default of 10 days, never within a benchmark; with
//!   a short `gc_grace` (the harness's `--gc-grace`), the old lazy purge's behaviour, roughly.
//!   Compacting on access rather than on a timer keeps the store deterministic and costs nothing
//!   for rows nobody reads; a row nobody reads has nobody paying for its tombstones either.
//! - **Reads pay for tombstones.** A replica reading a slice scans the dead cells between the
//!   slice's start and its `limit`-th live cell (to the row's end when the row has fewer), as
//!   Cassandra counts "tombstone cells" scanned; each costs
//!   [`EmbeddedConfig::tombstone_scan_cost`], added to that replica's answer time (so a
//!   `QUORUM` read waits for the slower of its replicas' scans). Past
//!   [`EmbeddedConfig::tombstone_warn_threshold`] the read is counted as warned; past
//!   [`EmbeddedConfig::tombstone_failure_threshold`] the replica aborts the scan after
//!   threshold + 1 tombstones (paying for those) and the read fails with
//!   [`StoreError::TombstoneOverwhelming`]. [`EmbeddedStore::tombstone_counters`] gives, per
//!   table, the tombstones scanned per read ([`TombstoneStats`]: a read counts the largest scan
//!   among its replicas, as the slowest one decides its answer time).
//!   Counting is cheap at any size: a row keeps its live cells and its dead cells apart, the
//!   dead ones in sorted chunks of at most 256, so a read's count is the difference of two
//!   ranks in the dead cells, each a binary search plus a sum of chunk lengths, never a walk
//!   over the tombstones themselves (`tests/tombstones.rs` times 100,000 `first(1)` reads over
//!   150,000 tombstones and prints what they took). A coordinator merging several replicas gets
//!   from each a copy-on-write snapshot of its live cells (one `Arc`, and where the slice
//!   lies in them) and of its dead cells (one `Arc` too), and looks the few live candidates
//!   up in the others' snapshots: a read copies no cell until it builds its answer.
//! - **Calibration** of [`EmbeddedConfig::DEFAULT_TOMBSTONE_SCAN_COST`] against a real Apache
//!   Cassandra 4.0 node (a single node on loopback, 8 contenders on one lock id for 180 s): the
//!   cost is chosen so that the thesis's queue lock, whose reads scan every tombstone its queue
//!   left, loses grants over the run as it did on the node, while the shadow and bakery locks,
//!   whose reads scan at most one tombstone per thread (their columns are thread ids), stay
//!   flat as they did there. A cheaper scan makes the queue lock decay less. `bench-harness
//!   longrun` reruns the comparison: `results/longrun/README.md` sets the real node's grants
//!   per 30 s beside the model's.
//! - **Determinism.** The only randomness is the store's RNG seeded from
//!   [`EmbeddedConfig::seed`], and nothing that affects a result iterates a hash map. On a
//!   current-thread runtime with a paused clock (`start_paused = true`) the store costs no wall
//!   time, and the same seed and the same client code give bit-for-bit the same run. On a
//!   multi-thread runtime it runs in wall time.
//! - **Cost.** With zero latency (the default) a request is served inline, without spawning,
//!   followed by one `yield_now` so that tight loops of requests stay fair on a current-thread
//!   runtime.
//! - **Speed, and what bounds it.** With latency, a request is one tokio timer per replica
//!   message that changes or reads a replica and per answer the coordinator waits for: four
//!   wake-ups of a paused runtime for a `QUORUM` read of three replicas, five for a write. Two
//!   tasks woken at one tick run in the order tokio's timer wheel and run queue give them, and
//!   that order is part of the run: a read that runs first misses the write that runs second. So
//!   the same seed gives the same run only as long as tokio orders them, and an executor of
//!   our own, however much faster, would give other runs for the same seeds. Under tokio, a
//!   large share of a simulated run's wall time goes to tokio's scheduler, timer wheel and
//!   clock (`perf record` of `bench-harness --threads 64 -a ALGORITHM --duration 300s` shows
//!   it per lock). That share stays whatever the store and the locks cost: it bounds the
//!   grants per wall second of each lock at its figure divided by the share
//!   (`benches/simulator.rs` in bench-harness measures the figure).
//!
//! Besides what a real cluster does differently anyway (TTLs in whole seconds, speculative
//! retries, read repair), one thing differs in how sliced reads are served: a replica answers
//! a read with a limit only up to its `limit`-th live cell, and when the merged answers turn out
//! too short (replicas disagree about which cells are alive) the coordinator queries the same
//! replicas again for the rest of the row: one more round trip, like Cassandra's short-read
//! protection.
//!
//! # Layout
//!
//! - `config`: [`EmbeddedConfig`] and its [`LatencyModel`];
//! - `counters`: the request counters ([`OpCounts`], [`StoreCounters`]) and the tombstone
//!   statistics ([`TombstoneStats`], [`TombstoneHistogram`]);
//! - `row`: one row on one replica, live and dead cells apart;
//! - `replica`: one replica's data and the mutations it applies;
//! - `handles`: [`EmbeddedStore`] and [`EmbeddedClient`], the handles callers hold;
//! - `coordinator`: how a request reaches the replicas (timelines, writes in flight);
//! - `read`: the read path, rounds and tombstone scans; `merge`: how replicas' answers merge;
//! - `paxos`: lightweight transactions.
//!
//! [`reconcile`]: crate::store::reconcile
//! [`StoreError::Unavailable`]: crate::store::StoreError::Unavailable
//! [`StoreError::WriteTimeout`]: crate::store::StoreError::WriteTimeout
//! [`StoreError::Unreachable`]: crate::store::StoreError::Unreachable
//! [`StoreError::TombstoneOverwhelming`]: crate::store::StoreError::TombstoneOverwhelming

use std::sync::{Mutex, MutexGuard};

mod config;
mod coordinator;
mod counters;
mod handles;
mod merge;
mod paxos;
mod read;
mod replica;
mod row;

pub use config::{EmbeddedConfig, LatencyModel};
pub use counters::{OpCounts, StoreCounters, TombstoneHistogram, TombstoneStats};
pub use handles::{EmbeddedClient, EmbeddedStore};
pub use paxos::PaxosVariant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding a lock must not take the whole store down with it:
    // every critical section leaves the data consistent between statements.
    m.lock().unwrap_or_else(|e| e.into_inner())
}
