//! The default backend: an in-process store with exactly the semantics of SPEC section 1 (the
//! rules are listed in [`crate::store`]), plus what a benchmark needs, able to run in simulated
//! time.
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
//! - **Tombstones stay** (SPEC section 1). A deletion leaves a tombstone, and a TTL cell past
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
//!   150,000 tombstones: well under a second). A coordinator merging several replicas gets
//!   from each a copy-on-write snapshot of its live cells (one `Arc`, and where the slice
//!   lies in them) and of its dead cells (one `Arc` too), and looks the few live candidates
//!   up in the others' snapshots: a read copies no cell until it builds its answer.
//! - **Calibration** of [`EmbeddedConfig::DEFAULT_TOMBSTONE_SCAN_COST`] (1.2 µs per tombstone)
//!   against issue 11's Apache Cassandra 4.0 node (single node on loopback, 8 contenders on
//!   one lock id, 180 s). The harness, with the scan cost scaled like its other durations:
//!   `bench-harness -a queue,shadow,bakery --threads 8 --duration 180s --replicas 1
//!   --latency 500us+500us --gc-grace 240h` (hold 5 ms, think exp. 5 ms, poll 20 ms, seed 1),
//!   `grants.csv` bucketed by `granted_us` into 30-s windows:
//!
//!   | | 0–30 s | 30–60 | 60–90 | 90–120 | 120–150 | 150–180 | change |
//!   |---|---|---|---|---|---|---|---|
//!   | queue, real node | 1413 | 1313 | 1234 | 1135 | 959 | 963 | −32% |
//!   | queue, embedded | 1426 | 1273 | 1144 | 1077 | 1007 | 953 | −33% |
//!   | queue tombstones per read, p50 | 703 | 2111 | 3327 | 4479 | 5503 | 6527 | (real: 7023 at the end) |
//!   | shadow, real node | 1898 | | | | | 1863 | −2% |
//!   | shadow, embedded | 1723 | 1736 | 1711 | 1696 | 1712 | 1722 | −0.1% |
//!   | bakery, real node | 1541 | | | | | 1558 | +1% |
//!   | bakery, embedded | 1628 | 1646 | 1602 | 1650 | 1648 | 1638 | +0.6% |
//!
//!   The queue lock's median acquisition latency over the run was 197 ms (real node: 157 ms
//!   rising to 234 ms). With the same settings and 0.5 µs the queue lost 20%, with 0.8 µs
//!   25%, with 1.0 µs 30%. Shadow and bakery reads scan at most 8 tombstones (their columns are
//!   thread ids), so the cost leaves them flat, as on the real node.
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
//!   wake-ups of a paused runtime for a `QUORUM` read of three replicas, five for a write. Two tasks
//!   woken at one tick run in the order tokio's timer wheel and run queue give them, and that
//!   order is part of the run: a read that runs first misses the write that runs second. So
//!   the same seed gives the same run only as long as tokio orders them, and an executor of
//!   our own, however much faster, would give other runs for the same seeds. Under tokio,
//!   `perf record` of `bench-harness --threads 64 -a ALGORITHM --duration 300s` puts between
//!   a third and three fifths of the wall time in tokio's scheduler, timer wheel and clock
//!   (a third for the bakery, three fifths for lwt). That share stays whatever the store and
//!   the locks cost: it bounds the grants per wall second of each lock at its figure divided
//!   by the share (`benches/simulator.rs` in bench-harness measures the figure).
//!
//! Besides what a real cluster does differently anyway (TTLs in whole seconds, speculative
//! retries, read repair), one thing differs in how sliced reads are served: a replica answers
//! a read with a limit only up to its `limit`-th live cell, and when the merged answers turn out
//! too short (replicas disagree about which cells are alive) the coordinator queries the same
//! replicas again for the rest of the row: one more round trip, like Cassandra's short-read
//! protection.
//!
//! [`reconcile`]: crate::store::reconcile

use crate::store::{
    reconcile_weighed, CasRequest, CasResult, Cell, CellStore, CellWrite, Consistency, Micros,
    SerialConsistency, Slice, StoreError, Weighed,
};
use crate::time::{ClockJump, LocalClock, PhysicalClock, SIMULATED_EPOCH_MICROS};
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use row::{DeadCell, DeadCells, Incoming, LiveCell, LiveSlice, Row};
use std::cmp::Ordering as CmpOrdering;
use std::collections::BTreeMap;
use std::fmt;
use std::iter::Peekable;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

mod paxos;
mod row;

pub use paxos::PaxosVariant;

/// The round trip between a coordinator and one replica: `fixed` plus a uniform sample from
/// `[0, jitter]`, drawn independently for every replica of every request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LatencyModel {
    /// The part every round trip takes.
    pub fixed: Duration,
    /// The upper bound of the uniformly distributed extra part.
    pub jitter: Duration,
}

impl LatencyModel {
    /// No latency: requests are served inline.
    pub const ZERO: LatencyModel = LatencyModel { fixed: Duration::ZERO, jitter: Duration::ZERO };

    /// A round trip of `fixed` plus up to `jitter`.
    pub const fn new(fixed: Duration, jitter: Duration) -> Self {
        LatencyModel { fixed, jitter }
    }

    /// True when every round trip takes no time.
    pub fn is_zero(&self) -> bool {
        self.fixed.is_zero() && self.jitter.is_zero()
    }

    fn sample(&self, rng: &mut StdRng) -> Duration {
        // Without jitter no number is drawn, so adding replicas with a fixed latency does not
        // shift the RNG stream that chooses replicas for reads.
        if self.jitter.is_zero() {
            return self.fixed;
        }
        let max = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        self.fixed.saturating_add(Duration::from_nanos(rng.random_range(0..=max)))
    }
}

/// How an [`EmbeddedStore`] behaves. Missing fields take their defaults when deserialized.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EmbeddedConfig {
    /// Number of replicas (at least one; zero is treated as one). Default 1.
    pub replicas: usize,
    /// Round trip to one replica. Default: zero.
    pub latency: LatencyModel,
    /// Seed of the store's RNG (latency jitter, the replicas a read goes to). Default 0.
    pub seed: u64,
    /// How long a coordinator waits for enough answers before a timeout error; also how long
    /// an isolated client waits before it learns the store is unreachable. Default 2 s.
    pub request_timeout: Duration,
    /// How long a tombstone or an expired cell must have been dead before a compaction may
    /// purge it (Cassandra's `gc_grace_seconds`). Default 10 days.
    pub gc_grace: Duration,
    /// How often each replica compacts a row: a row is compacted at its first access at least
    /// this long after its previous compaction (or its creation), purging the cells dead for at
    /// least [`EmbeddedConfig::gc_grace`]. `None` (the default): `gc_grace` itself, so a dead
    /// cell goes between one and two `gc_grace` after its death.
    pub compaction_interval: Option<Duration>,
    /// What one replica takes to step over one tombstone while reading: added, times the
    /// tombstones it scanned, to that replica's answer time. Default
    /// [`EmbeddedConfig::DEFAULT_TOMBSTONE_SCAN_COST`].
    pub tombstone_scan_cost: Duration,
    /// A read that scans more tombstones than this on a replica counts as a warning (Cassandra
    /// logs one). Default 1,000.
    pub tombstone_warn_threshold: u64,
    /// A read that would scan more tombstones than this on a replica is aborted there and fails
    /// with [`StoreError::TombstoneOverwhelming`]. Default 100,000.
    pub tombstone_failure_threshold: u64,
    /// Which Paxos runs the lightweight transactions ([`CellStore::cas`]): Cassandra 4.0's
    /// (v1, the default: 4 round trips per applied CAS) or 4.1's (v2: 2). See [`PaxosVariant`].
    pub paxos: PaxosVariant,
    /// How long a lightweight transaction may go on losing rounds to other proposers before it
    /// fails with [`StoreError::CasTimeout`] (Cassandra's `cas_contention_timeout`). Default 1 s.
    pub cas_contention_timeout: Duration,
    /// The upper bound of the uniformly random sleep of a lightweight transaction after it
    /// lost a round to another proposer (Cassandra: 100 ms). Default 100 ms.
    pub cas_contention_backoff: Duration,
}

impl EmbeddedConfig {
    /// Default [`EmbeddedConfig::request_timeout`]: Cassandra's write timeout.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default [`EmbeddedConfig::gc_grace`]: Cassandra's `gc_grace_seconds` of 10 days.
    pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(10 * 24 * 3600);
    /// Default [`EmbeddedConfig::tombstone_scan_cost`], calibrated against a Cassandra 4.0
    /// node (see the module docs).
    pub const DEFAULT_TOMBSTONE_SCAN_COST: Duration = Duration::from_nanos(1_200);
    /// Default [`EmbeddedConfig::tombstone_warn_threshold`]: Cassandra's.
    pub const DEFAULT_TOMBSTONE_WARN_THRESHOLD: u64 = 1_000;
    /// Default [`EmbeddedConfig::tombstone_failure_threshold`]: Cassandra's.
    pub const DEFAULT_TOMBSTONE_FAILURE_THRESHOLD: u64 = 100_000;
    /// Default [`EmbeddedConfig::cas_contention_timeout`]: Cassandra's `cas_contention_timeout`.
    pub const DEFAULT_CAS_CONTENTION_TIMEOUT: Duration = Duration::from_secs(1);
    /// Default [`EmbeddedConfig::cas_contention_backoff`]: Cassandra's 0–100 ms.
    pub const DEFAULT_CAS_CONTENTION_BACKOFF: Duration = Duration::from_millis(100);

    /// The effective compaction interval: [`EmbeddedConfig::compaction_interval`] or
    /// [`EmbeddedConfig::gc_grace`].
    pub fn effective_compaction_interval(&self) -> Duration {
        self.compaction_interval.unwrap_or(self.gc_grace)
    }

    fn row_policy(&self) -> RowPolicy {
        RowPolicy {
            grace: self.gc_grace,
            compaction_interval: self.effective_compaction_interval(),
        }
    }

    /// What a replica that scanned `tombstones` adds to its answer time.
    fn scan_delay(&self, tombstones: u64) -> Duration {
        self.tombstone_scan_cost.saturating_mul(u32::try_from(tombstones).unwrap_or(u32::MAX))
    }
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            replicas: 1,
            latency: LatencyModel::ZERO,
            seed: 0,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            gc_grace: Self::DEFAULT_GC_GRACE,
            compaction_interval: None,
            tombstone_scan_cost: Self::DEFAULT_TOMBSTONE_SCAN_COST,
            tombstone_warn_threshold: Self::DEFAULT_TOMBSTONE_WARN_THRESHOLD,
            tombstone_failure_threshold: Self::DEFAULT_TOMBSTONE_FAILURE_THRESHOLD,
            paxos: PaxosVariant::default(),
            cas_contention_timeout: Self::DEFAULT_CAS_CONTENTION_TIMEOUT,
            cas_contention_backoff: Self::DEFAULT_CAS_CONTENTION_BACKOFF,
        }
    }
}

/// Requests of one kind, counted per client request (not per replica message).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpCounts {
    /// Read requests.
    pub reads: u64,
    /// Write requests (one per call, however many cells it carries).
    pub writes: u64,
    /// Delete requests.
    pub deletes: u64,
    /// Lightweight transactions ([`CellStore::cas`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub cas: u64,
    /// SERIAL reads ([`CellStore::read_serial`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub serial_reads: u64,
    /// Coordinator-to-replicas round trips spent inside lightweight transactions and SERIAL
    /// reads (every Paxos phase and read, retries after contention included); counted only by
    /// a store that sees them (the embedded one).
    #[serde(skip_serializing_if = "is_zero")]
    pub paxos_round_trips: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl OpCounts {
    /// Plain reads, writes and deletes only.
    pub fn new(reads: u64, writes: u64, deletes: u64) -> Self {
        OpCounts { reads, writes, deletes, ..OpCounts::default() }
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.reads + self.writes + self.deletes + self.cas + self.serial_reads
    }

    /// Round trips between coordinator and replicas: one per plain request, and those
    /// counted inside lightweight transactions. The same as [`OpCounts::total`] for the
    /// algorithms without lightweight transactions.
    pub fn round_trips(&self) -> u64 {
        self.reads + self.writes + self.deletes + self.paxos_round_trips
    }

    /// The requests counted here that `base`, an earlier reading of the same counter, had
    /// not: what was sent between the two readings.
    pub fn since(&self, base: &OpCounts) -> OpCounts {
        OpCounts {
            reads: self.reads - base.reads,
            writes: self.writes - base.writes,
            deletes: self.deletes - base.deletes,
            cas: self.cas - base.cas,
            serial_reads: self.serial_reads - base.serial_reads,
            paxos_round_trips: self.paxos_round_trips - base.paxos_round_trips,
        }
    }

    fn bump(&mut self, kind: OpKind) {
        match kind {
            OpKind::Read => self.reads += 1,
            OpKind::Write => self.writes += 1,
            OpKind::Delete => self.deletes += 1,
            OpKind::Cas => self.cas += 1,
            OpKind::SerialRead => self.serial_reads += 1,
        }
    }

    fn add(&mut self, other: &OpCounts) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.deletes += other.deletes;
        self.cas += other.cas;
        self.serial_reads += other.serial_reads;
        self.paxos_round_trips += other.paxos_round_trips;
    }
}

/// A snapshot of the request counters since the store was created or last reset. Failed
/// requests count too: they loaded the store (or the network) all the same.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StoreCounters {
    /// Requests per table.
    pub per_table: BTreeMap<String, OpCounts>,
    /// Requests per client id (the store's own [`CellStore`] impl is client `""`); clients
    /// without requests are left out.
    pub per_client: BTreeMap<String, OpCounts>,
    /// Tombstones scanned by reads, per table (tables whose reads were counted; empty for a
    /// store that does not know, such as a real cluster seen from the client).
    pub tombstones: BTreeMap<String, TombstoneStats>,
}

impl StoreCounters {
    /// All requests.
    pub fn total(&self) -> OpCounts {
        let mut sum = OpCounts::default();
        for c in self.per_table.values() {
            sum.add(c);
        }
        sum
    }
}

/// Tombstones scanned by the reads of one table.
///
/// "Per read" is the largest count among the replicas that answered the read, over all its
/// rounds (a short read's second round included): each replica scans its own copy, and the
/// slowest scan decides both the answer time and, past the thresholds, the warning and the
/// failure, as on a Cassandra coordinator. Reads that ended before every replica answered (a
/// timeout, an unavailable error) are not counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TombstoneStats {
    /// Reads counted.
    pub reads: u64,
    /// Tombstones scanned, summed over the counted reads.
    pub scanned: u64,
    /// The most tombstones one read scanned.
    pub max: u64,
    /// Reads that scanned more than the warning threshold.
    pub warned: u64,
    /// Reads that failed with [`StoreError::TombstoneOverwhelming`].
    pub failed: u64,
    /// Reads per tombstone count, in log-linear buckets: see [`TombstoneHistogram`].
    pub histogram: TombstoneHistogram,
}

impl TombstoneStats {
    /// The `q`-quantile (0 to 1) of tombstones scanned per read, within the histogram's
    /// precision; 0 without reads.
    pub fn quantile(&self, q: f64) -> u64 {
        self.histogram.quantile(q).min(self.max)
    }

    /// Adds `other`'s reads (e.g. of another table) to these.
    pub fn merge(&mut self, other: &TombstoneStats) {
        self.reads += other.reads;
        self.scanned += other.scanned;
        self.max = self.max.max(other.max);
        self.warned += other.warned;
        self.failed += other.failed;
        self.histogram.merge(&other.histogram);
    }

    /// The median of tombstones scanned per read.
    pub fn p50(&self) -> u64 {
        self.quantile(0.5)
    }

    /// The mean of tombstones scanned per read; 0 without reads.
    pub fn mean(&self) -> f64 {
        if self.reads == 0 {
            0.0
        } else {
            self.scanned as f64 / self.reads as f64
        }
    }

    fn record(&mut self, scanned: u64, warn: u64, failed: bool) {
        self.reads += 1;
        self.scanned += scanned;
        self.max = self.max.max(scanned);
        self.warned += u64::from(scanned > warn);
        self.failed += u64::from(failed);
        self.histogram.record(scanned);
    }
}

/// A histogram of counts in log-linear buckets: the counts below 32 exactly, above that 32
/// buckets per power of two (so a bucket's bounds differ by less than 3.2%). Serialized as
/// `[lowest value of the bucket, reads]` pairs of the non-empty buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TombstoneHistogram {
    buckets: BTreeMap<u64, u64>,
}

impl TombstoneHistogram {
    const SUB_BUCKET_BITS: u32 = 5;

    /// The lowest and the highest value of the bucket of `v`.
    pub fn bucket(v: u64) -> (u64, u64) {
        let exponent = 63 - v.max(1).leading_zeros();
        if exponent < Self::SUB_BUCKET_BITS {
            return (v, v);
        }
        let shift = exponent - Self::SUB_BUCKET_BITS;
        let low = (v >> shift) << shift;
        (low, low + ((1u64 << shift) - 1))
    }

    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        *self.buckets.entry(Self::bucket(v).0).or_default() += 1;
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &TombstoneHistogram) {
        for (low, n) in other.buckets() {
            *self.buckets.entry(low).or_default() += n;
        }
    }

    /// The non-empty buckets: (lowest value, count), in order.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.buckets.iter().map(|(k, v)| (*k, *v))
    }

    /// The highest value of the bucket holding the `q`-quantile; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total: u64 = self.buckets.values().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (&low, &n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return Self::bucket(low).1;
            }
        }
        self.buckets.keys().next_back().map_or(0, |&low| Self::bucket(low).1)
    }
}

#[derive(Clone, Copy)]
enum OpKind {
    Read,
    Write,
    Delete,
    Cas,
    SerialRead,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding a lock must not take the whole store down with it:
    // every critical section leaves the data consistent between statements.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type Tables = BTreeMap<String, BTreeMap<String, Row>>;

/// What one replica answers to a read that will be merged with other replicas' answers: its
/// live cells up to the limit, and its dead cells as they were at its read instant.
struct RawAnswer {
    live: LiveSlice,
    dead: DeadCells,
    /// The replica stopped at its limit: cells after its last live one are unknown.
    truncated: bool,
}

/// How a replica stores and purges: the parts of the config its rows need.
#[derive(Clone, Copy)]
struct RowPolicy {
    grace: Duration,
    compaction_interval: Duration,
}

struct Replica {
    running: AtomicBool,
    /// Extra delay of every mutation, in nanoseconds ([`EmbeddedStore::lag_replica`]).
    lag_nanos: AtomicU64,
    /// Mutations dropped, per million.
    drop_ppm: AtomicU32,
    tables: Mutex<Tables>,
    /// The Paxos state of every row a lightweight transaction touched (Cassandra's
    /// `system.paxos`): promised ballot, accepted proposal, most recent commit.
    paxos: Mutex<BTreeMap<(String, String), paxos::PaxosState>>,
}

impl Replica {
    fn new() -> Self {
        Replica {
            running: AtomicBool::new(true),
            lag_nanos: AtomicU64::new(0),
            drop_ppm: AtomicU32::new(0),
            tables: Mutex::new(BTreeMap::new()),
            paxos: Mutex::new(BTreeMap::new()),
        }
    }

    /// The extra delay of a mutation sent to this replica now.
    fn lag(&self) -> Duration {
        Duration::from_nanos(self.lag_nanos.load(Ordering::Acquire))
    }

    fn is_lagging(&self) -> bool {
        self.lag_nanos.load(Ordering::Acquire) > 0 || self.drop_ppm.load(Ordering::Acquire) > 0
    }

    fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Applies a mutation at `now`; false when the replica is stopped (no acknowledgement).
    fn apply(
        &self,
        table: &str,
        row: &str,
        m: Mutation<'_>,
        now: Instant,
        policy: RowPolicy,
    ) -> bool {
        if !self.is_running() {
            return false;
        }
        let mut tables = lock(&self.tables);
        // Look up before inserting so that the common case allocates no key strings.
        if !tables.contains_key(table) {
            tables.insert(table.to_owned(), BTreeMap::new());
        }
        let Some(rows) = tables.get_mut(table) else { return true };
        if !rows.contains_key(row) {
            rows.insert(row.to_owned(), Row::new(now, policy.compaction_interval));
        }
        let Some(cells) = rows.get_mut(row) else { return true };
        cells.advance(now, policy.grace, policy.compaction_interval);
        match m {
            Mutation::Write(writes) => {
                for w in writes {
                    let expires_at = w.ttl.and_then(|ttl| now.checked_add(ttl));
                    let value = Arc::clone(&w.value);
                    let cell = LiveCell { timestamp: w.timestamp, value, expires_at };
                    cells.merge(&w.column, Incoming::Live(cell), now);
                }
            }
            Mutation::Delete { column, timestamp } => {
                cells.merge(column, Incoming::Dead(DeadCell { timestamp, dead_at: now }), now);
            }
        }
        true
    }

    /// Brings the row to `now` (expiries, a due compaction) and hands it to `read`; `None` when
    /// the replica is stopped (no answer). A row emptied by compaction is dropped.
    fn with_row<T>(
        &self,
        table: &str,
        row: &str,
        now: Instant,
        policy: RowPolicy,
        read: impl FnOnce(Option<&Row>) -> T,
    ) -> Option<T> {
        if !self.is_running() {
            return None;
        }
        let mut tables = lock(&self.tables);
        let Some(cells) = tables.get_mut(table).and_then(|rows| rows.get_mut(row)) else {
            return Some(read(None));
        };
        cells.advance(now, policy.grace, policy.compaction_interval);
        if cells.is_empty() {
            if let Some(rows) = tables.get_mut(table) {
                rows.remove(row);
                if rows.is_empty() {
                    tables.remove(table);
                }
            }
            return Some(read(None));
        }
        Some(read(Some(cells)))
    }

    /// The live cells of a slice as a snapshot, and the tombstones scanned: what a lone
    /// replica answers. Nothing is copied until the coordinator builds its answer.
    fn read_live(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        now: Instant,
        policy: RowPolicy,
    ) -> Option<(LiveSlice, u64)> {
        let limit = slice.limit.unwrap_or(usize::MAX);
        self.with_row(table, row, now, policy, |r| {
            let Some(r) = r else { return (LiveSlice::default(), 0) };
            let scan = r.scan(slice.start.as_deref(), limit);
            (scan.live, scan.tombstones)
        })
    }

    /// The live cells from `start` up to `limit` with a snapshot of the dead cells, for a
    /// merging coordinator, and the tombstones scanned.
    fn read_raw(
        &self,
        table: &str,
        row: &str,
        start: Option<&str>,
        limit: Option<usize>,
        now: Instant,
        policy: RowPolicy,
    ) -> Option<(RawAnswer, u64)> {
        let limit = limit.unwrap_or(usize::MAX);
        self.with_row(table, row, now, policy, |r| {
            let Some(r) = r else {
                return (
                    RawAnswer {
                        live: LiveSlice::default(),
                        dead: DeadCells::default(),
                        truncated: false,
                    },
                    0,
                );
            };
            let scan = r.scan(start, limit);
            (
                RawAnswer { live: scan.live, dead: r.dead.clone(), truncated: scan.truncated },
                scan.tombstones,
            )
        })
    }

    /// The live cells of a whole row, bypassing the request path.
    fn snapshot(&self, table: &str, row: &str, now: Instant, policy: RowPolicy) -> Vec<Cell> {
        self.with_row(table, row, now, policy, |r| {
            r.map(|r| {
                r.live
                    .iter()
                    .map(|(k, c)| Cell {
                        column: String::from(&**k),
                        value: c.value.to_vec(),
                        timestamp: c.timestamp,
                    })
                    .collect()
            })
            .unwrap_or_default()
        })
        .unwrap_or_default()
    }

    /// The number of dead cells of a row (tombstones and expired cells not yet compacted
    /// away), bypassing the request path.
    fn tombstones(&self, table: &str, row: &str, now: Instant, policy: RowPolicy) -> usize {
        self.with_row(table, row, now, policy, |r| r.map_or(0, |r| r.dead.len())).unwrap_or(0)
    }
}

/// One cell of a write as the replicas receive it: its column and value are made once per
/// request and shared by every replica's copy. Replicas' rows then hold the same
/// allocations, and a coordinator merging their answers tells equal columns and values
/// apart by address before it compares bytes.
#[derive(Clone)]
struct SharedWrite {
    column: Arc<str>,
    value: Arc<[u8]>,
    timestamp: Micros,
    ttl: Option<Duration>,
}

impl SharedWrite {
    /// The cells of one write request.
    fn batch(cells: &[CellWrite]) -> Vec<SharedWrite> {
        cells
            .iter()
            .map(|c| SharedWrite {
                column: Arc::from(c.column.as_str()),
                value: Arc::from(c.value.as_slice()),
                timestamp: c.timestamp,
                ttl: c.ttl,
            })
            .collect()
    }
}

#[derive(Clone, Copy)]
enum Mutation<'a> {
    Write(&'a [SharedWrite]),
    Delete { column: &'a Arc<str>, timestamp: Micros },
}

enum OwnedMutation {
    Write(Vec<SharedWrite>),
    Delete { column: Arc<str>, timestamp: Micros },
}

impl Mutation<'_> {
    fn kind(&self) -> OpKind {
        match self {
            Mutation::Write(_) => OpKind::Write,
            Mutation::Delete { .. } => OpKind::Delete,
        }
    }

    fn to_owned_mutation(self) -> OwnedMutation {
        match self {
            Mutation::Write(cells) => OwnedMutation::Write(cells.to_vec()),
            Mutation::Delete { column, timestamp } => {
                OwnedMutation::Delete { column: Arc::clone(column), timestamp }
            }
        }
    }
}

impl OwnedMutation {
    fn as_mutation(&self) -> Mutation<'_> {
        match self {
            OwnedMutation::Write(cells) => Mutation::Write(cells),
            OwnedMutation::Delete { column, timestamp } => {
                Mutation::Delete { column, timestamp: *timestamp }
            }
        }
    }
}

/// Per-client state shared by all handles with the same id.
struct ClientState {
    isolated: AtomicBool,
    /// True while the client is frozen ([`EmbeddedStore::pause_client`]).
    paused: watch::Sender<bool>,
    /// The client's clock steps ([`EmbeddedStore::jump_clock`]).
    jump: ClockJump,
    reads: AtomicU64,
    writes: AtomicU64,
    deletes: AtomicU64,
    cas: AtomicU64,
    serial_reads: AtomicU64,
    paxos_round_trips: AtomicU64,
    /// The last ballot timestamp this client's lightweight transactions used: ballots of one
    /// client strictly increase (Cassandra's `ClientState.getTimestampForPaxos`).
    last_ballot: std::sync::atomic::AtomicI64,
}

impl Default for ClientState {
    fn default() -> Self {
        ClientState {
            isolated: AtomicBool::new(false),
            paused: watch::Sender::new(false),
            jump: ClockJump::new(),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            deletes: AtomicU64::new(0),
            cas: AtomicU64::new(0),
            serial_reads: AtomicU64::new(0),
            paxos_round_trips: AtomicU64::new(0),
            last_ballot: std::sync::atomic::AtomicI64::new(Micros::MIN),
        }
    }
}

impl ClientState {
    /// Returns once the client is not frozen (at once when it is not).
    async fn thawed(&self) {
        // Every request passes here twice and almost no client is ever frozen: looking at the
        // value costs less than a receiver (whose drop, the last one's, notifies the sender).
        // `wait_for` would return at once too, without yielding, so nothing else changes.
        if !*self.paused.borrow() {
            return;
        }
        let mut rx = self.paused.subscribe();
        // `wait_for` fails only when the sender is gone, and `self` holds it.
        let _ = rx.wait_for(|paused| !*paused).await;
    }

    fn bump(&self, kind: OpKind) {
        let counter = match kind {
            OpKind::Read => &self.reads,
            OpKind::Write => &self.writes,
            OpKind::Delete => &self.deletes,
            OpKind::Cas => &self.cas,
            OpKind::SerialRead => &self.serial_reads,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn counts(&self) -> OpCounts {
        OpCounts {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            deletes: self.deletes.load(Ordering::Relaxed),
            cas: self.cas.load(Ordering::Relaxed),
            serial_reads: self.serial_reads.load(Ordering::Relaxed),
            paxos_round_trips: self.paxos_round_trips.load(Ordering::Relaxed),
        }
    }

    fn reset(&self) {
        for c in [
            &self.reads,
            &self.writes,
            &self.deletes,
            &self.cas,
            &self.serial_reads,
            &self.paxos_round_trips,
        ] {
            c.store(0, Ordering::Relaxed);
        }
    }
}

struct Inner {
    config: EmbeddedConfig,
    origin: Instant,
    replicas: Box<[Replica]>,
    rng: Mutex<StdRng>,
    clients: Mutex<BTreeMap<String, Arc<ClientState>>>,
    anonymous: Arc<ClientState>,
    table_counts: Mutex<BTreeMap<String, OpCounts>>,
    tombstones: Mutex<BTreeMap<String, TombstoneStats>>,
    doorbells: std::sync::OnceLock<Arc<crate::doorbell::LocalDoorbells>>,
}

/// The in-process store. Cheap to clone (all clones share one store); see the
/// [module docs](self) for its model.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let running: Vec<bool> = self.inner.replicas.iter().map(Replica::is_running).collect();
        f.debug_struct("EmbeddedStore")
            .field("config", &self.inner.config)
            .field("replicas_running", &running)
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// A fresh, empty store. Call it inside a tokio runtime: the current tokio instant becomes
    /// the origin of the store's clock (simulated under a paused runtime).
    pub fn new(config: EmbeddedConfig) -> Self {
        let mut config = config;
        config.replicas = config.replicas.max(1);
        let replicas = (0..config.replicas).map(|_| Replica::new()).collect();
        let anonymous = Arc::new(ClientState::default());
        let mut clients = BTreeMap::new();
        clients.insert(String::new(), Arc::clone(&anonymous));
        EmbeddedStore {
            inner: Arc::new(Inner {
                rng: Mutex::new(StdRng::seed_from_u64(config.seed)),
                config,
                origin: Instant::now(),
                replicas,
                clients: Mutex::new(clients),
                anonymous,
                table_counts: Mutex::new(BTreeMap::new()),
                tombstones: Mutex::new(BTreeMap::new()),
                doorbells: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The store's doorbells ([`crate::doorbell`]), one set per store, made on first use: a
    /// ring arrives after half a round trip of the latency model (its one-way latency, with
    /// jitter from the store's seeded RNG), so that push handoffs cost in simulated time what
    /// a message on the cluster's network would.
    pub fn doorbells(&self) -> Arc<crate::doorbell::LocalDoorbells> {
        let inner = &self.inner;
        Arc::clone(inner.doorbells.get_or_init(|| {
            let weak = Arc::downgrade(inner);
            Arc::new(crate::doorbell::LocalDoorbells::new(
                move || match weak.upgrade() {
                    Some(inner) => inner.config.latency.sample(&mut lock(&inner.rng)) / 2,
                    None => Duration::ZERO,
                },
                inner.config.seed ^ 0x0D00_BE11,
            ))
        }))
    }

    /// A handle for the client `id`. Handles with the same id share counters and isolation.
    pub fn client(&self, id: impl Into<String>) -> EmbeddedClient {
        let id: String = id.into();
        let state = self.inner.client_state(&id);
        EmbeddedClient { store: self.clone(), id: Arc::from(id), state, skew: 0 }
    }

    /// The configuration, with `replicas` raised to at least one.
    pub fn config(&self) -> &EmbeddedConfig {
        &self.inner.config
    }

    /// Number of replicas.
    pub fn replica_count(&self) -> usize {
        self.inner.replicas.len()
    }

    /// Whether replica `index` is running (false for an index out of range).
    pub fn is_replica_running(&self, index: usize) -> bool {
        self.inner.replicas.get(index).is_some_and(Replica::is_running)
    }

    /// Stop replica `index`: it neither applies writes nor answers reads until restarted,
    /// including requests already in flight to it. An index out of range is ignored.
    pub fn stop_replica(&self, index: usize) {
        if let Some(r) = self.inner.replicas.get(index) {
            r.running.store(false, Ordering::Release);
        }
    }

    /// Restart replica `index` with the data it had when stopped; writes it missed meanwhile
    /// stay missing (no hinted handoff, no repair). An index out of range is ignored.
    pub fn start_replica(&self, index: usize) {
        if let Some(r) = self.inner.replicas.get(index) {
            r.running.store(true, Ordering::Release);
        }
    }

    /// Cut the client `client_id` off the store (`true`) or reconnect it (`false`). While cut
    /// off, each of its requests fails with [`StoreError::Unreachable`] after the request
    /// timeout, as a driver behind a network partition would, and is not applied. Works for
    /// handles created before or after the call.
    pub fn isolate(&self, client_id: &str, isolated: bool) {
        self.inner.client_state(client_id).isolated.store(isolated, Ordering::Release);
    }

    /// Freeze the client `client_id` (`true`) or let it go on (`false`), as a stop-the-world
    /// GC pause or `SIGSTOP` of its process would: while frozen, a request it starts is not
    /// sent, and the answer to a request already sent is not seen, until it is let go. What
    /// was sent still reaches the replicas. The caller freezes the rest of the client itself
    /// (its own timers): the store only holds its messages. Works for handles created before
    /// or after the call.
    pub fn pause_client(&self, client_id: &str, paused: bool) {
        self.inner.client_state(client_id).paused.send_replace(paused);
    }

    /// Step the clock of client `client_id` by `micros` (negative: backwards), on top of its
    /// skew and of earlier steps. Every [`EmbeddedClient::clock`] of that client, made before
    /// or after the call, reads the new time at once.
    pub fn jump_clock(&self, client_id: &str, micros: Micros) {
        self.inner.client_state(client_id).jump.jump(micros);
    }

    /// Make replica `index` overloaded: from now on it applies and acknowledges each mutation
    /// `lag` late and drops about `drop_fraction` of them (0.0 to 1.0) without applying or
    /// acknowledging them; reads it answers at once from what it has applied. `lag_replica(i,
    /// Duration::ZERO, 0.0)` makes it healthy again (what was dropped stays missing: no hints,
    /// no repair). An index out of range is ignored. Which mutations are dropped is drawn from
    /// the store's seeded RNG.
    pub fn lag_replica(&self, index: usize, lag: Duration, drop_fraction: f64) {
        if let Some(r) = self.inner.replicas.get(index) {
            let nanos = u64::try_from(lag.as_nanos()).unwrap_or(u64::MAX);
            r.lag_nanos.store(nanos, Ordering::Release);
            r.drop_ppm
                .store((drop_fraction.clamp(0.0, 1.0) * 1e6).round() as u32, Ordering::Release);
        }
    }

    /// A snapshot of the request counters.
    pub fn counters(&self) -> StoreCounters {
        let per_table = lock(&self.inner.table_counts).clone();
        let per_client = lock(&self.inner.clients)
            .iter()
            .map(|(id, state)| (id.clone(), state.counts()))
            .filter(|(_, counts)| counts.total() > 0)
            .collect();
        let tombstones = lock(&self.inner.tombstones).clone();
        StoreCounters { per_table, per_client, tombstones }
    }

    /// Zero every counter (e.g. after a benchmark's warm-up).
    pub fn reset_counters(&self) {
        // Per-table counts first, client counts second: a request racing with the reset may be
        // counted in one map and not the other, which a benchmark's warm-up cut tolerates.
        lock(&self.inner.table_counts).clear();
        lock(&self.inner.tombstones).clear();
        for state in lock(&self.inner.clients).values() {
            state.reset();
        }
    }

    /// The store's clock as a physical clock for clients: tokio time anchored at the store's
    /// creation, reading [`SIMULATED_EPOCH_MICROS`] then.
    pub fn physical_clock(&self) -> PhysicalClock {
        PhysicalClock::Tokio { origin: self.inner.origin, epoch: SIMULATED_EPOCH_MICROS }
    }

    /// The live cells of a row as replica `index` holds them now, bypassing latency, faults
    /// and counters: for tests that check what reached which replica. `None` for an index out
    /// of range.
    pub fn inspect_replica(&self, index: usize, table: &str, row: &str) -> Option<Vec<Cell>> {
        let policy = self.inner.config.row_policy();
        self.inner.replicas.get(index).map(|r| r.snapshot(table, row, Instant::now(), policy))
    }

    /// The dead cells (tombstones, expired TTL cells) replica `index` keeps in a row now, after
    /// any compaction due: for tests and reports of row growth. `None` for an index out of
    /// range or a stopped replica.
    pub fn inspect_tombstones(&self, index: usize, table: &str, row: &str) -> Option<usize> {
        let policy = self.inner.config.row_policy();
        let r = self.inner.replicas.get(index)?;
        r.is_running().then(|| r.tombstones(table, row, Instant::now(), policy))
    }

    /// Tombstones scanned by reads, per table, since the store was created or its counters
    /// last reset ([`EmbeddedStore::reset_counters`] resets these too).
    pub fn tombstone_counters(&self) -> BTreeMap<String, TombstoneStats> {
        lock(&self.inner.tombstones).clone()
    }

    fn caller(&self) -> Caller<'_> {
        Caller { inner: &self.inner, state: &self.inner.anonymous, id: "" }
    }
}

#[async_trait]
impl CellStore for EmbeddedStore {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        let cells = SharedWrite::batch(cells);
        self.caller().mutate(table, row, Mutation::Write(&cells), c).await
    }
    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        ts: Micros,
        c: Consistency,
    ) -> Result<(), StoreError> {
        let column = Arc::from(column);
        self.caller()
            .mutate(table, row, Mutation::Delete { column: &column, timestamp: ts }, c)
            .await
    }
    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        let mut out = Vec::new();
        self.caller().read(table, row, &slice, c, &mut out).await?;
        Ok(out)
    }
    async fn read_into(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        self.caller().read(table, row, &slice, c, out).await
    }
    async fn cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        self.caller().cas(table, row, request, serial, commit).await
    }
    async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.caller().read_serial(table, row, &slice, serial).await
    }
    fn doorbell(&self) -> Option<Arc<dyn crate::doorbell::Doorbell>> {
        Some(self.doorbells())
    }
}

/// A client's handle on an [`EmbeddedStore`]: its requests are counted under its id, it can be
/// isolated, and it carries its own clock skew. Cheap to clone.
#[derive(Clone)]
pub struct EmbeddedClient {
    store: EmbeddedStore,
    id: Arc<str>,
    state: Arc<ClientState>,
    skew: Micros,
}

impl fmt::Debug for EmbeddedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedClient")
            .field("id", &self.id)
            .field("skew_micros", &self.skew)
            .field("isolated", &self.state.isolated.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl EmbeddedClient {
    /// The client's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The same client with its clock running `skew_micros` ahead (negative: behind) of the
    /// store's clock.
    pub fn with_skew(mut self, skew_micros: i64) -> Self {
        self.skew = skew_micros;
        self
    }

    /// The configured clock skew in microseconds.
    pub fn skew(&self) -> Micros {
        self.skew
    }

    /// The client's local clock: the store's clock plus the client's skew, stepped by
    /// [`EmbeddedStore::jump_clock`].
    pub fn clock(&self) -> LocalClock {
        LocalClock::new(self.store.physical_clock(), self.skew).with_jump(self.state.jump.clone())
    }

    /// The store this client talks to.
    pub fn store(&self) -> &EmbeddedStore {
        &self.store
    }

    fn caller(&self) -> Caller<'_> {
        Caller { inner: &self.store.inner, state: &self.state, id: &self.id }
    }
}

impl EmbeddedClient {
    /// Runs one request as a frozen client sees it: not sent while frozen, its answer not
    /// seen while frozen ([`EmbeddedStore::pause_client`]).
    async fn request<T>(&self, request: impl std::future::Future<Output = T>) -> T {
        self.state.thawed().await;
        let answer = request.await;
        self.state.thawed().await;
        answer
    }
}

#[async_trait]
impl CellStore for EmbeddedClient {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        let cells = SharedWrite::batch(cells);
        self.request(self.caller().mutate(table, row, Mutation::Write(&cells), c)).await
    }
    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        ts: Micros,
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.request(self.caller().mutate(
            table,
            row,
            Mutation::Delete { column: &Arc::from(column), timestamp: ts },
            c,
        ))
        .await
    }
    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        let mut out = Vec::new();
        self.request(self.caller().read(table, row, &slice, c, &mut out)).await?;
        Ok(out)
    }
    async fn read_into(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        self.request(self.caller().read(table, row, &slice, c, out)).await
    }
    async fn cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        self.request(self.caller().cas(table, row, request, serial, commit)).await
    }
    async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.request(self.caller().read_serial(table, row, &slice, serial)).await
    }
    fn doorbell(&self) -> Option<Arc<dyn crate::doorbell::Doorbell>> {
        Some(self.store.doorbells())
    }
}

impl Inner {
    fn client_state(&self, id: &str) -> Arc<ClientState> {
        let mut clients = lock(&self.clients);
        if let Some(state) = clients.get(id) {
            return Arc::clone(state);
        }
        let state = Arc::new(ClientState::default());
        clients.insert(id.to_owned(), Arc::clone(&state));
        state
    }

    fn count_table(&self, table: &str, kind: OpKind) {
        let mut tables = lock(&self.table_counts);
        match tables.get_mut(table) {
            Some(counts) => counts.bump(kind),
            None => {
                let mut counts = OpCounts::default();
                counts.bump(kind);
                tables.insert(table.to_owned(), counts);
            }
        }
    }

    fn deadline(&self, start: Instant) -> Instant {
        // A timeout too large for the clock means "never"; ~30 years is never for any run.
        start
            .checked_add(self.config.request_timeout)
            .or_else(|| start.checked_add(Duration::from_secs(30 * 365 * 86_400)))
            .unwrap_or(start)
    }

    fn record_tombstones(&self, scan: &ReadScan<'_>, failed: bool) {
        let warn = self.config.tombstone_warn_threshold;
        let mut tables = lock(&self.tombstones);
        match tables.get_mut(scan.table) {
            Some(stats) => stats.record(scan.most, warn, failed),
            None => {
                let mut stats = TombstoneStats::default();
                stats.record(scan.most, warn, failed);
                tables.insert(scan.table.to_owned(), stats);
            }
        }
    }

    fn running(&self) -> Vec<usize> {
        (0..self.replicas.len()).filter(|&i| self.replicas[i].is_running()).collect()
    }

    /// A mutation reaches replica `replica` at `now`: an overloaded replica may drop it
    /// ([`EmbeddedStore::lag_replica`]). True when applied (it will be acknowledged).
    fn deliver(
        &self,
        replica: usize,
        table: &str,
        row: &str,
        m: Mutation<'_>,
        now: Instant,
    ) -> bool {
        let Some(r) = self.replicas.get(replica) else { return false };
        let drop_ppm = r.drop_ppm.load(Ordering::Acquire);
        if drop_ppm > 0
            && r.is_running()
            && lock(&self.rng).random_range(0..1_000_000u32) < drop_ppm
        {
            return false;
        }
        r.apply(table, row, m, now, self.config.row_policy())
    }

    /// True when no replica lags: requests may then be served inline without latency.
    fn none_lagging(&self) -> bool {
        !self.replicas.iter().any(Replica::is_lagging)
    }
}

/// One scheduled step of a request: a replica applies or reads (`reply == false`, half-way
/// through its round trip) or its answer reaches the coordinator (`reply == true`).
#[derive(Clone, Copy)]
struct Event {
    at: Instant,
    /// Index into the replicas (writes) or into the chosen replicas (reads).
    slot: usize,
    reply: bool,
}

/// Builds the timeline of one request to `slots` replicas, sorted by time; a stable sort so
/// that simultaneous events keep a fixed order (each replica's apply before its reply). For a
/// mutation (`slots` are replica indices) an overloaded replica's lag delays both its apply
/// and its acknowledgement.
fn timeline(
    inner: &Inner,
    start: Instant,
    slots: impl Iterator<Item = usize>,
    mutation: bool,
) -> Vec<Event> {
    let mut events = Vec::new();
    {
        let mut rng = lock(&inner.rng);
        for slot in slots {
            let lag = match inner.replicas.get(slot) {
                Some(r) if mutation => r.lag(),
                _ => Duration::ZERO,
            };
            let rt = inner.config.latency.sample(&mut rng);
            // An instant beyond the clock's range is never reached: that message is lost.
            if let Some(at) = start.checked_add(rt / 2 + lag) {
                events.push(Event { at, slot, reply: false });
            }
            if let Some(at) = start.checked_add(rt + lag) {
                events.push(Event { at, slot, reply: true });
            }
        }
    }
    events.sort_by_key(|e| e.at);
    events
}

/// A write in flight. Whatever applies are still due when it is dropped (the request
/// completed, timed out, or the caller gave up on it) go on in a background task: the
/// messages were sent and the replicas will act on them.
struct InFlight<'a> {
    inner: &'a Arc<Inner>,
    table: &'a str,
    row: &'a str,
    mutation: Mutation<'a>,
    events: Vec<Event>,
    next: usize,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let pending: Vec<(Instant, usize)> = self
            .events
            .get(self.next..)
            .unwrap_or(&[])
            .iter()
            .filter(|e| !e.reply)
            .map(|e| (e.at, e.slot))
            .collect();
        if pending.is_empty() {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        let inner = Arc::clone(self.inner);
        let table = self.table.to_owned();
        let row = self.row.to_owned();
        let mutation = self.mutation.to_owned_mutation();
        handle.spawn(async move {
            for (at, replica) in pending {
                tokio::time::sleep_until(at).await;
                inner.deliver(replica, &table, &row, mutation.as_mutation(), Instant::now());
            }
        });
    }
}

/// A replica's answer to a read.
enum Answer {
    /// Live cells, already sliced: the lone answer of a read that needs no merge.
    Live(LiveSlice),
    /// Live cells and a snapshot of the dead ones, for merging.
    Raw(RawAnswer),
    /// The replica aborted its scan after this many tombstones (the failure threshold).
    Overwhelmed(u64),
}

/// Who is asking: the store, its client handles, and the state the request is counted under.
struct Caller<'a> {
    inner: &'a Arc<Inner>,
    state: &'a ClientState,
    id: &'a str,
}

impl Caller<'_> {
    fn count(&self, table: &str, kind: OpKind) {
        self.state.bump(kind);
        self.inner.count_table(table, kind);
    }

    /// Returns `Err(Unreachable)` after the request timeout when the client is isolated.
    async fn check_reachable(&self) -> Result<(), StoreError> {
        if !self.state.isolated.load(Ordering::Acquire) {
            return Ok(());
        }
        tokio::time::sleep_until(self.inner.deadline(Instant::now())).await;
        Err(StoreError::Unreachable(format!(
            "client '{}' is cut off from the embedded store (simulated partition)",
            self.id
        )))
    }

    async fn mutate(
        &self,
        table: &str,
        row: &str,
        m: Mutation<'_>,
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.count(table, m.kind());
        self.check_reachable().await?;
        let inner = self.inner;
        let start = Instant::now();
        let required = c.required(inner.replicas.len());

        if inner.config.latency.is_zero() && inner.none_lagging() {
            let alive = inner.replicas.iter().filter(|r| r.is_running()).count();
            if alive < required {
                tokio::task::yield_now().await;
                return Err(StoreError::Unavailable { consistency: c, required, alive });
            }
            let policy = inner.config.row_policy();
            let acks =
                inner.replicas.iter().filter(|r| r.apply(table, row, m, start, policy)).count();
            tokio::task::yield_now().await;
            if acks >= required {
                return Ok(());
            }
            // Only when a replica stopped between the check and the apply (another thread).
            tokio::time::sleep_until(inner.deadline(start)).await;
            return Err(StoreError::WriteTimeout { consistency: c, received: acks, required });
        }

        let live = inner.running();
        if live.len() < required {
            tokio::task::yield_now().await;
            return Err(StoreError::Unavailable { consistency: c, required, alive: live.len() });
        }
        let deadline = inner.deadline(start);
        let events = timeline(inner, start, live.iter().copied(), true);
        let mut flight = InFlight { inner, table, row, mutation: m, events, next: 0 };
        let mut applied = vec![false; inner.replicas.len()];
        let mut acks = 0usize;
        let mut slept = false;
        // The clock moves only while the request sleeps (a paused clock not even then but by
        // the runtime's advance), so it is read again only after a sleep: every read of a
        // tokio instant takes a lock of the runtime's clock.
        let mut now = start;
        while let Some(&ev) = flight.events.get(flight.next) {
            if ev.at > deadline {
                break;
            }
            if ev.at > now {
                tokio::time::sleep_until(ev.at).await;
                slept = true;
                now = Instant::now();
            }
            flight.next += 1;
            if ev.reply {
                if applied.get(ev.slot).copied().unwrap_or(false) {
                    acks += 1;
                    if acks >= required {
                        break;
                    }
                }
            } else {
                let ok = inner.deliver(ev.slot, table, row, m, now);
                if let Some(a) = applied.get_mut(ev.slot) {
                    *a = ok;
                }
            }
        }
        if !slept {
            tokio::task::yield_now().await;
        }
        if acks >= required {
            return Ok(());
        }
        // Every event left is after the deadline, so waiting for it skips none of them.
        tokio::time::sleep_until(deadline).await;
        Err(StoreError::WriteTimeout { consistency: c, received: acks, required })
    }

    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        self.count(table, OpKind::Read);
        self.check_reachable().await?;
        self.quorum_read_into(table, row, slice, c, out).await
    }

    /// A read at `c` as a coordinator runs it, not counted as a request of its own (a
    /// lightweight transaction's reads are part of it).
    async fn quorum_read(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        let mut out = Vec::new();
        self.quorum_read_into(table, row, slice, c, &mut out).await?;
        Ok(out)
    }

    /// [`Caller::quorum_read`] into `out`, reusing its cells ([`CellStore::read_into`]).
    async fn quorum_read_into(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        c: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        let inner = self.inner;
        let required = c.required(inner.replicas.len());
        let mut chosen = inner.running();
        if chosen.len() < required {
            tokio::task::yield_now().await;
            return Err(StoreError::Unavailable { consistency: c, required, alive: chosen.len() });
        }
        if required < chosen.len() {
            let mut rng = lock(&inner.rng);
            for k in 0..required {
                let j = rng.random_range(k..chosen.len());
                chosen.swap(k, j);
            }
            chosen.truncate(required);
        }
        let mut scan = ReadScan { table, row, most: 0 };
        let result = self.read_rounds(&chosen, slice, c, &mut scan, out).await;
        match &result {
            Ok(_) => inner.record_tombstones(&scan, false),
            Err(StoreError::TombstoneOverwhelming { .. }) => inner.record_tombstones(&scan, true),
            Err(_) => {}
        }
        result
    }

    /// The rounds of one read: one, or two when merged answers came up short.
    async fn read_rounds(
        &self,
        chosen: &[usize],
        slice: &Slice,
        c: Consistency,
        scan: &mut ReadScan<'_>,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        let inner = self.inner;
        let (table, row) = (scan.table, scan.row);
        let policy = inner.config.row_policy();
        if chosen.len() == 1 {
            // A lone answer needs no merge: the replica slices its live cells itself.
            let read_live = |replica: usize, now: Instant| {
                let (live, tombstones) =
                    inner.replicas.get(replica)?.read_live(table, row, slice, now, policy)?;
                Some((Answer::Live(live), tombstones))
            };
            let mut filled = Filler::new(out);
            if let Some(Answer::Live(live)) =
                self.read_round(chosen, c, scan, read_live).await?.pop()
            {
                for (column, cell) in live.iter() {
                    filled.push(column, &cell.value, cell.timestamp);
                }
            }
            filled.finish();
            return Ok(());
        }

        let start = slice.start.as_deref();
        let read_raw = |limit: Option<usize>| {
            move |replica: usize, now: Instant| {
                let (raw, tombstones) =
                    inner.replicas.get(replica)?.read_raw(table, row, start, limit, now, policy)?;
                Some((Answer::Raw(raw), tombstones))
            }
        };
        let answers = self.read_round(chosen, c, scan, read_raw(slice.limit)).await?;
        if merge_into(answers, slice.limit, out) {
            return Ok(());
        }
        let answers = self.read_round(chosen, c, scan, read_raw(None)).await?;
        if !merge_into(answers, slice.limit, out) {
            out.clear();
        }
        Ok(())
    }

    /// One round of a read: every chosen replica reads half-way through its round trip and
    /// answers at its end, later by the time it took to step over the tombstones it scanned;
    /// all of them are needed. A replica whose scan passes the failure threshold aborts it
    /// and answers with a failure, which fails the read when it arrives.
    async fn read_round(
        &self,
        chosen: &[usize],
        c: Consistency,
        scan: &mut ReadScan<'_>,
        read: impl Fn(usize, Instant) -> Option<(Answer, u64)>,
    ) -> Result<Vec<Answer>, StoreError> {
        let inner = self.inner;
        let start = Instant::now();
        let required = chosen.len();
        let mut answers: Vec<Option<Answer>> = Vec::with_capacity(required);
        let mut received = 0usize;

        if inner.config.latency.is_zero() {
            let mut delay = Duration::ZERO;
            for &replica in chosen {
                let answer = read(replica, start).map(|(a, t)| scan.answered(&inner.config, a, t));
                delay = delay.max(answer.as_ref().map_or(Duration::ZERO, |(_, d)| *d));
                received += usize::from(answer.is_some());
                answers.push(answer.map(|(a, _)| a));
            }
            if delay.is_zero() {
                tokio::task::yield_now().await;
            } else {
                tokio::time::sleep(delay).await;
            }
        } else {
            answers.resize_with(required, || None);
            let deadline = inner.deadline(start);
            let mut slept = false;
            let mut events = timeline(inner, start, 0..required, false);
            let mut next = 0;
            // Read again only after a sleep, as in `mutate`.
            let mut now = start;
            while let Some(&ev) = events.get(next) {
                next += 1;
                if ev.at > deadline {
                    break;
                }
                if ev.at > now {
                    tokio::time::sleep_until(ev.at).await;
                    slept = true;
                    now = Instant::now();
                }
                let Some(answer) = answers.get_mut(ev.slot) else { continue };
                if ev.reply {
                    // A stopped replica read nothing and sends nothing.
                    if answer.is_some() {
                        received += 1;
                        if let Some(Answer::Overwhelmed(scanned)) = answer {
                            return Err(scan.overwhelmed(*scanned));
                        }
                        if received == required {
                            break;
                        }
                    }
                } else if let Some(&replica) = chosen.get(ev.slot) {
                    let Some((a, delay)) =
                        read(replica, now).map(|(a, t)| scan.answered(&inner.config, a, t))
                    else {
                        continue;
                    };
                    *answer = Some(a);
                    delay_reply(&mut events[next..], ev.slot, delay);
                }
            }
            if !slept {
                tokio::task::yield_now().await;
            }
        }

        if let Some(Answer::Overwhelmed(scanned)) =
            answers.iter().flatten().find(|a| matches!(a, Answer::Overwhelmed(_)))
        {
            return Err(scan.overwhelmed(*scanned));
        }
        if received < required {
            tokio::time::sleep_until(inner.deadline(start)).await;
            return Err(StoreError::ReadTimeout { consistency: c, received, required });
        }
        Ok(answers.into_iter().flatten().collect())
    }
}

/// Moves `slot`'s reply among the events still due `delay` later, keeping them sorted.
fn delay_reply(events: &mut [Event], slot: usize, delay: Duration) {
    if delay.is_zero() {
        return;
    }
    for e in events.iter_mut().filter(|e| e.reply && e.slot == slot) {
        e.at = e.at.checked_add(delay).unwrap_or(e.at);
    }
    events.sort_by_key(|e| e.at);
}

/// What one read scanned, for its answer times and the tombstone counters.
struct ReadScan<'a> {
    table: &'a str,
    row: &'a str,
    /// The most tombstones one replica scanned in one round.
    most: u64,
}

impl ReadScan<'_> {
    /// A replica read and scanned `tombstones`: its answer (a failure past the threshold, as
    /// Cassandra aborts the scan there) and the time the scan added to its answer.
    fn answered(
        &mut self,
        config: &EmbeddedConfig,
        answer: Answer,
        tombstones: u64,
    ) -> (Answer, Duration) {
        let limit = config.tombstone_failure_threshold;
        if tombstones > limit {
            let scanned = limit.saturating_add(1);
            self.most = self.most.max(scanned);
            return (Answer::Overwhelmed(scanned), config.scan_delay(scanned));
        }
        self.most = self.most.max(tombstones);
        (answer, config.scan_delay(tombstones))
    }

    fn overwhelmed(&self, scanned: u64) -> StoreError {
        StoreError::TombstoneOverwhelming {
            table: self.table.to_owned(),
            row: self.row.to_owned(),
            scanned,
        }
    }
}

/// Merges replicas' raw answers per column and applies the limit to the live cells. `None`
/// when the answers cannot tell the result: a replica stopped at its limit, and up to that
/// point too few merged cells are alive (another replica knew of newer deaths).
///
/// Only a column live on some replica can be live in the result, so the merge walks the
/// replicas' live cells and looks each one up in the other replicas' answers: their live
/// cells, or their dead cells as they were at their read instants. Every read of a row that
/// several replicas answer comes through here (the bakery's waiters read 64-cell rows 50
/// times a simulated second each), so it borrows what it compares and copies only the cells
/// it returns.
fn merge(answers: Vec<Answer>, limit: Option<usize>) -> Option<Vec<Cell>> {
    let mut out = Vec::new();
    merge_into(answers, limit, &mut out).then_some(out)
}

/// [`merge`] into `out`, reusing its cells; false when the answers cannot tell (`out` then
/// holds no meaningful cells).
fn merge_into(answers: Vec<Answer>, limit: Option<usize>, out: &mut Vec<Cell>) -> bool {
    let raws: Vec<RawAnswer> = answers
        .into_iter()
        .filter_map(|a| match a {
            Answer::Raw(raw) => Some(raw),
            _ => None,
        })
        .collect();
    // Up to the first column at which a replica stopped, every replica's cells are known.
    let bound: Option<&str> =
        raws.iter().filter(|r| r.truncated).filter_map(|r| r.live.last()).min();
    let cap = limit.unwrap_or(usize::MAX);
    let mut lists: Vec<_> = raws.iter().map(|r| r.live.iter().peekable()).collect();
    let mut filled = Filler::new(out);
    // A k-way merge of the sorted live lists, k being the few replicas read.
    while filled.len() < cap {
        if let Some((column, cell)) = shared_head(&mut lists) {
            if bound.is_some_and(|b| &**column > b) {
                break;
            }
            filled.push(column, &cell.value, cell.timestamp);
            continue;
        }
        let Some(column) = least_next(&mut lists) else { break };
        if bound.is_some_and(|b| &**column > b) {
            break;
        }
        if let Some(best) = winner(column, &mut lists, &raws) {
            filled.push(column, best.value, best.timestamp);
        }
    }
    let conclusive = filled.len() >= cap || bound.is_none();
    filled.finish();
    conclusive
}

/// Writes an answer's cells over the cells already in a buffer, in order: a column or a
/// value copied into a `String` or `Vec` that held one before reuses its allocation, so a
/// waiter polling a row with a buffer of its own allocates nothing once it has grown.
struct Filler<'a> {
    out: &'a mut Vec<Cell>,
    len: usize,
}

impl<'a> Filler<'a> {
    fn new(out: &'a mut Vec<Cell>) -> Self {
        Filler { out, len: 0 }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, column: &str, value: &[u8], timestamp: Micros) {
        match self.out.get_mut(self.len) {
            Some(cell) => {
                cell.column.clear();
                cell.column.push_str(column);
                cell.value.clear();
                cell.value.extend_from_slice(value);
                cell.timestamp = timestamp;
            }
            None => self.out.push(Cell {
                column: String::from(column),
                value: value.to_vec(),
                timestamp,
            }),
        }
        self.len += 1;
    }

    /// Drops the cells past the answer's end.
    fn finish(self) {
        self.out.truncate(self.len);
    }
}

/// The replicas' next live cell when every replica's is the same version, taken off every
/// list: the common case, since replicas that applied the same writes hold the same
/// allocations (one per written cell). Reconciling equal versions keeps that version, so this
/// is what [`least_next`] and [`winner`] would find, without weighing it against itself.
fn shared_head<'a, L>(lists: &mut [Peekable<L>]) -> Option<(&'a Arc<str>, &'a LiveCell)>
where
    L: Iterator<Item = (&'a Arc<str>, &'a LiveCell)>,
{
    let (first, rest) = lists.split_first_mut()?;
    let &(column, cell) = first.peek()?;
    let same = |l: &mut Peekable<L>| {
        l.peek().is_some_and(|&(k, c)| {
            Arc::ptr_eq(k, column)
                && Arc::ptr_eq(&c.value, &cell.value)
                && c.timestamp == cell.timestamp
                && c.expires_at == cell.expires_at
        })
    };
    if !rest.iter_mut().all(same) {
        return None;
    }
    for list in lists.iter_mut() {
        list.next();
    }
    Some((column, cell))
}

/// The least column among the replicas' next live cells; `None` when every list is done.
fn least_next<'a, L>(lists: &mut [Peekable<L>]) -> Option<&'a Arc<str>>
where
    L: Iterator<Item = (&'a Arc<str>, &'a LiveCell)>,
{
    let heads = lists.iter_mut().filter_map(|l| l.peek().map(|&(k, _)| k));
    heads.reduce(|least, k| if !Arc::ptr_eq(k, least) && k < least { k } else { least })
}

/// The reconciled version of `column` over the replicas' answers, when it is live; takes the
/// column off the live lists.
fn winner<'a, L>(
    column: &Arc<str>,
    lists: &mut [Peekable<L>],
    raws: &[RawAnswer],
) -> Option<Weighed<'a, Instant>>
where
    L: Iterator<Item = (&'a Arc<str>, &'a LiveCell)>,
{
    let mut best: Option<Weighed<'a, Instant>> = None;
    for (list, raw) in lists.iter_mut().zip(raws) {
        let version = match list.next_if(|&(k, _)| Arc::ptr_eq(k, column) || k == column) {
            Some((_, c)) => row::weigh_live(c),
            None => match raw.dead.get(column) {
                Some(d) => Weighed::dead(d.timestamp),
                None => continue,
            },
        };
        best = match best {
            Some(cur) if reconcile_weighed(&version, &cur) != CmpOrdering::Greater => Some(cur),
            _ => Some(version),
        };
    }
    best.filter(|b| !b.dead)
}
