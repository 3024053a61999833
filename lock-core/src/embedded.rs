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
//! - **Time.** Every delay is a sleep of [`crate::rt`] and every instant its clock's;
//!   TTLs run on the store's clock (the replica's apply instant plus the TTL, exactly, with no
//!   rounding to seconds; a zero TTL expires at once). Inside a [`crate::rt::Simulation`]
//!   timers are exact to the nanosecond. Under tokio (wall time, or a test's paused clock)
//!   a sleep ends on the next millisecond tick, so sub-millisecond latencies round up (a
//!   200 µs round trip takes 1 ms); latency models in whole milliseconds are taken as they
//!   are.
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
//!   As Cassandra keeps them in SSTables, the store keeps a row's older dead cells on disk
//!   ([`EmbeddedConfig::dead_cells_on_disk`], on by default): a store holding an hour of
//!   tombstones takes the memory of one holding minutes, and what it answers is the same.
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
//!   [`EmbeddedConfig::seed`], and nothing that affects a result iterates a hash map. Inside a
//!   [`crate::rt::Simulation`] the store costs no wall time, and the same seed and the same
//!   client code give bit-for-bit the same run; so does a current-thread tokio runtime with a
//!   paused clock (`start_paused = true`), with tokio's own order. On a multi-thread runtime
//!   it runs in wall time.
//! - **Cost.** With zero latency (the default) a request is served inline, without spawning,
//!   followed by one `yield_now` so that tight loops of requests stay fair on one thread.
//! - **Speed, and what bounds it.** With latency, a request is one timer per replica message
//!   that changes or reads a replica and per answer the coordinator waits for: four wake-ups
//!   for a `QUORUM` read of three replicas, five for a write. Tasks woken at one instant run
//!   in the order the executor gives them, and that order is part of the run: a read that runs
//!   first misses the write that runs second. The simulation executor draws that order from
//!   its seed, so a run depends on the seed and on the executor, not on a timer wheel's
//!   layout. What is left of a simulated run's wall time is the store's own work (merging the
//!   replicas' answers, scanning tombstones) and the locks' (`perf record` of `bench-harness
//!   --threads 64 -a ALGORITHM --duration 300s` shows it per lock; `benches/simulator.rs` in
//!   bench-harness measures grants per wall second).
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
//! - `row`: one row on one replica, live and dead cells apart; `spill`: the file its older
//!   dead cells are sealed into;
//! - `handles`: [`EmbeddedStore`] and [`EmbeddedClient`], the handles callers hold;
//! - `read`: the read path, rounds and tombstone scans; `merge`: how replicas' answers merge;
//!   `cache`: the answers of the last reads, shared by the readers of an unchanged row;
//! - `paxos`: lightweight transactions;
//! - this module itself: the coordinator (how a request reaches the replicas: timelines,
//!   writes in flight) and the replicas (their data and the mutations they apply). Every
//!   module above uses them, and they use `handles` and `read`: kept here, below no sibling,
//!   the modules import in one direction.
//!
//! [`reconcile`]: crate::store::reconcile
//! [`StoreError::Unavailable`]: crate::store::StoreError::Unavailable
//! [`StoreError::WriteTimeout`]: crate::store::StoreError::WriteTimeout
//! [`StoreError::Unreachable`]: crate::store::StoreError::Unreachable
//! [`StoreError::TombstoneOverwhelming`]: crate::store::StoreError::TombstoneOverwhelming

use crate::store::{Cell, CellWrite, Consistency, Micros, Slice, StoreError};
use counters::OpKind;
use handles::{ClientState, Inner};
use rand::RngExt;
use read::ReadScan;
use row::{DeadAt, DeadCell, DeadCells, Incoming, LiveCell, LiveSlice, Row};
use spill::Spill;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

mod cache;
mod config;
mod counters;
mod handles;
mod merge;
mod paxos;
mod read;
mod row;
mod spill;

pub use config::{EmbeddedConfig, LatencyModel};
pub use counters::{OpCounts, StoreCounters, TombstoneHistogram, TombstoneStats};
pub use handles::{EmbeddedClient, EmbeddedStore};
pub use paxos::PaxosVariant;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding a lock must not take the whole store down with it:
    // every critical section leaves the data consistent between statements.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// The coordinator: how a request reaches the replicas.
// The coordinator: how a request reaches the replicas. Each request gets a timeline of
// messages (a replica acts half-way through its round trip, its answer arrives at the end),
// which the request walks with tokio sleeps; a write still due to some replicas when the
// request ends goes on in the background.

impl Inner {
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
        let inner = Arc::clone(self.inner);
        let table = self.table.to_owned();
        let row = self.row.to_owned();
        let mutation = self.mutation.to_owned_mutation();
        let _ = crate::rt::try_spawn(async move {
            for (at, replica) in pending {
                crate::rt::sleep_until(at).await;
                inner.deliver(replica, &table, &row, mutation.as_mutation(), crate::rt::now());
            }
        });
    }
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
        crate::rt::sleep_until(self.inner.deadline(crate::rt::now())).await;
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
        let start = crate::rt::now();
        let required = c.required(inner.replicas.len());

        if inner.config.latency.is_zero() && inner.none_lagging() {
            let alive = inner.replicas.iter().filter(|r| r.is_running()).count();
            if alive < required {
                crate::rt::yield_now().await;
                return Err(StoreError::Unavailable { consistency: c, required, alive });
            }
            let policy = inner.config.row_policy();
            let acks =
                inner.replicas.iter().filter(|r| r.apply(table, row, m, start, policy)).count();
            crate::rt::yield_now().await;
            if acks >= required {
                return Ok(());
            }
            // Only when a replica stopped between the check and the apply (another thread).
            crate::rt::sleep_until(inner.deadline(start)).await;
            return Err(StoreError::WriteTimeout { consistency: c, received: acks, required });
        }

        let live = inner.running();
        if live.len() < required {
            crate::rt::yield_now().await;
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
            // An acknowledgement that does not complete the request changes nothing anyone
            // can see, so the coordinator counts it without waking up at its instant.
            let acked = ev.reply && applied.get(ev.slot).copied().unwrap_or(false);
            if ev.at > now && (!ev.reply || (acked && acks + 1 >= required)) {
                crate::rt::sleep_until(ev.at).await;
                slept = true;
                now = crate::rt::now();
            }
            flight.next += 1;
            if ev.reply {
                if acked {
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
            crate::rt::yield_now().await;
        }
        if acks >= required {
            return Ok(());
        }
        // Every event left is after the deadline, so waiting for it skips none of them.
        crate::rt::sleep_until(deadline).await;
        Err(StoreError::WriteTimeout { consistency: c, received: acks, required })
    }
}

// One replica.
// One replica: its rows, its fault state (running, lagging, dropping), the mutations it
// applies and the reads it answers, each at the instant the coordinator's timeline says.

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
    /// Where its rows seal their older dead cells, when the store keeps them on disk.
    spill: Option<Arc<Spill>>,
}

impl Replica {
    fn new(spill: Option<Arc<Spill>>) -> Self {
        Replica {
            spill,
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
            let spill = self.spill.clone();
            rows.insert(row.to_owned(), Row::new(now, policy.compaction_interval, spill));
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
                cells.merge(
                    column,
                    Incoming::Dead(DeadCell { timestamp, dead_at: DeadAt::of(now) }),
                    now,
                );
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

/// A replica's answer to a read.
enum Answer {
    /// Live cells, already sliced: the lone answer of a read that needs no merge.
    Live(LiveSlice),
    /// Live cells and a snapshot of the dead ones, for merging.
    Raw(RawAnswer),
    /// The replica aborted its scan after this many tombstones (the failure threshold).
    Overwhelmed(u64),
}
