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
//!   (no hinted handoff, no read repair). [`EmbeddedStore::isolate`] cuts one client off: its
//!   requests fail with [`StoreError::Unreachable`] after the request timeout, unapplied.
//! - **Time.** Every delay is a tokio sleep and every instant a [`tokio::time::Instant`];
//!   TTLs run on the store's clock (the replica's apply instant plus the TTL, exactly, with no
//!   rounding to seconds; a zero TTL expires at once). Dead cells older than
//!   [`EmbeddedConfig::gc_grace`] are purged lazily when a read scans over them. Lower it for
//!   long benchmark runs whose rows collect tombstones: every read scans the tombstones before
//!   the first live cell, as in Cassandra. tokio's timer has millisecond resolution: a sleep
//!   ends on the next millisecond tick, so sub-millisecond latencies round up (a 200 µs round
//!   trip takes 1 ms). Latency models in whole milliseconds are taken as they are.
//! - **Determinism.** The only randomness is the store's RNG seeded from
//!   [`EmbeddedConfig::seed`], and nothing that affects a result iterates a hash map. On a
//!   current-thread runtime with a paused clock (`start_paused = true`) the store costs no wall
//!   time, and the same seed and the same client code give bit-for-bit the same run. On a
//!   multi-thread runtime it runs in wall time.
//! - **Cost.** With zero latency (the default) a request is served inline, without spawning,
//!   followed by one `yield_now` so that tight loops of requests stay fair on a current-thread
//!   runtime.
//!
//! Besides what a real cluster does differently anyway (TTLs in whole seconds, speculative
//! retries, read repair), one thing differs in how sliced reads are served: a replica answers
//! a read with a limit only up to its `limit`-th live cell, and when the merged answers turn out
//! too short (replicas disagree about which cells are alive) the coordinator queries the same
//! replicas again for the rest of the row: one more round trip, like Cassandra's short-read
//! protection.

use crate::store::{reconcile, Cell, CellStore, CellWrite, Consistency, Micros, Slice, StoreError, Version};
use crate::time::{LocalClock, PhysicalClock, SIMULATED_EPOCH_MICROS};
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::cmp::Ordering as CmpOrdering;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

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
    /// How long a tombstone or an expired cell must have been dead before it may be purged
    /// (Cassandra's `gc_grace_seconds`). Default 10 days.
    pub gc_grace: Duration,
}

impl EmbeddedConfig {
    /// Default [`EmbeddedConfig::request_timeout`]: Cassandra's write timeout.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default [`EmbeddedConfig::gc_grace`]: Cassandra's `gc_grace_seconds` of 10 days.
    pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(10 * 24 * 3600);
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            replicas: 1,
            latency: LatencyModel::ZERO,
            seed: 0,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            gc_grace: Self::DEFAULT_GC_GRACE,
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
}

impl OpCounts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.reads + self.writes + self.deletes
    }

    fn bump(&mut self, kind: OpKind) {
        match kind {
            OpKind::Read => self.reads += 1,
            OpKind::Write => self.writes += 1,
            OpKind::Delete => self.deletes += 1,
        }
    }

    fn add(&mut self, other: &OpCounts) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.deletes += other.deletes;
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

#[derive(Clone, Copy)]
enum OpKind {
    Read,
    Write,
    Delete,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding a lock must not take the whole store down with it:
    // every critical section leaves the data consistent between statements.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One version of one cell on one replica.
#[derive(Clone, Debug)]
struct StoredCell {
    timestamp: Micros,
    version: Version<Instant>,
    /// When the cell is or will be dead: the apply instant of a tombstone, the expiry of a TTL
    /// cell. Both count towards `gc_grace` from then on.
    dead_at: Option<Instant>,
}

impl StoredCell {
    fn is_dead(&self, now: Instant) -> bool {
        self.dead_at.is_some_and(|d| d <= now)
    }

    fn purgeable(&self, now: Instant, grace: Duration) -> bool {
        self.dead_at.is_some_and(|d| d <= now && now.duration_since(d) >= grace)
    }
}

/// Columns are shared strings so that answering a read for merging clones no column names.
type Row = BTreeMap<Arc<str>, StoredCell>;
type Tables = BTreeMap<String, BTreeMap<String, Row>>;

/// A cell as one replica reports it to a merging coordinator: dead cells included, with
/// liveness judged at the replica's read instant.
struct RawEntry {
    column: Arc<str>,
    timestamp: Micros,
    version: Version<Instant>,
    dead: bool,
}

struct Replica {
    running: AtomicBool,
    tables: Mutex<Tables>,
}

impl Replica {
    fn new() -> Self {
        Replica { running: AtomicBool::new(true), tables: Mutex::new(BTreeMap::new()) }
    }

    fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Applies a mutation at `now`; false when the replica is stopped (no acknowledgement).
    fn apply(&self, table: &str, row: &str, m: Mutation<'_>, now: Instant) -> bool {
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
            rows.insert(row.to_owned(), BTreeMap::new());
        }
        let Some(cells) = rows.get_mut(row) else { return true };
        match m {
            Mutation::Write(writes) => {
                for w in writes {
                    let expires_at = w.ttl.and_then(|ttl| now.checked_add(ttl));
                    let cell = StoredCell {
                        timestamp: w.timestamp,
                        version: Version::Live { value: w.value.clone(), expires_at },
                        dead_at: expires_at,
                    };
                    merge_into(cells, &w.column, cell, now);
                }
            }
            Mutation::Delete { column, timestamp } => {
                let cell = StoredCell { timestamp, version: Version::Tombstone, dead_at: Some(now) };
                merge_into(cells, column, cell, now);
            }
        }
        true
    }

    /// Walks the row from `start` on, purging cells dead for longer than `grace`, and hands
    /// every other cell with its liveness at `now` to `visit` until it returns false. `None`
    /// when the replica is stopped (no answer).
    fn scan(
        &self,
        table: &str,
        row: &str,
        start: Option<&str>,
        now: Instant,
        grace: Duration,
        mut visit: impl FnMut(&Arc<str>, &StoredCell, bool) -> bool,
    ) -> Option<()> {
        if !self.is_running() {
            return None;
        }
        let mut tables = lock(&self.tables);
        let Some(rows) = tables.get_mut(table) else { return Some(()) };
        let Some(cells) = rows.get_mut(row) else { return Some(()) };
        let lower = match start {
            Some(s) => Bound::Included(s),
            None => Bound::Unbounded,
        };
        let mut purge: Vec<Arc<str>> = Vec::new();
        for (column, cell) in cells.range::<str, _>((lower, Bound::Unbounded)) {
            if cell.purgeable(now, grace) {
                purge.push(column.clone());
                continue;
            }
            if !visit(column, cell, cell.is_dead(now)) {
                break;
            }
        }
        if !purge.is_empty() {
            for column in &purge {
                cells.remove(&**column);
            }
            if cells.is_empty() {
                rows.remove(row);
                if rows.is_empty() {
                    tables.remove(table);
                }
            }
        }
        Some(())
    }

    /// The live cells of a slice: what a lone replica answers when no merge is needed.
    fn read_live(&self, table: &str, row: &str, slice: &Slice, now: Instant, grace: Duration) -> Option<Vec<Cell>> {
        let limit = slice.limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        if limit == 0 {
            return self.is_running().then_some(out);
        }
        self.scan(table, row, slice.start.as_deref(), now, grace, |column, cell, dead| {
            if !dead {
                if let Version::Live { value, .. } = &cell.version {
                    out.push(Cell { column: column.to_string(), value: value.clone(), timestamp: cell.timestamp });
                }
            }
            out.len() < limit
        })?;
        Some(out)
    }

    /// The cells from `start` on, dead ones included, up to the `limit`-th live one; the flag
    /// says whether the row holds more cells after the last one returned.
    fn read_raw(
        &self,
        table: &str,
        row: &str,
        start: Option<&str>,
        limit: Option<usize>,
        now: Instant,
        grace: Duration,
    ) -> Option<(Vec<RawEntry>, bool)> {
        let limit = limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        if limit == 0 {
            return self.is_running().then_some((out, false));
        }
        let mut live = 0usize;
        let mut truncated = false;
        self.scan(table, row, start, now, grace, |column, cell, dead| {
            if live >= limit {
                truncated = true;
                return false;
            }
            out.push(RawEntry {
                column: Arc::clone(column),
                timestamp: cell.timestamp,
                version: cell.version.clone(),
                dead,
            });
            if !dead {
                live += 1;
            }
            true
        })?;
        Some((out, truncated))
    }

    /// The live cells of a whole row, bypassing the request path.
    fn snapshot(&self, table: &str, row: &str, now: Instant) -> Vec<Cell> {
        let tables = lock(&self.tables);
        let Some(cells) = tables.get(table).and_then(|rows| rows.get(row)) else { return Vec::new() };
        cells
            .iter()
            .filter(|(_, c)| !c.is_dead(now))
            .filter_map(|(column, c)| match &c.version {
                Version::Live { value, .. } => {
                    Some(Cell { column: column.to_string(), value: value.clone(), timestamp: c.timestamp })
                }
                Version::Tombstone => None,
            })
            .collect()
    }
}

/// Reconciles `new` with the cell already stored under `column`, keeping the winner.
fn merge_into(cells: &mut Row, column: &str, new: StoredCell, now: Instant) {
    match cells.get_mut(column) {
        Some(old) => {
            let order = reconcile(
                new.timestamp,
                &new.version,
                new.is_dead(now),
                old.timestamp,
                &old.version,
                old.is_dead(now),
            );
            if order == CmpOrdering::Greater {
                *old = new;
            }
        }
        None => {
            cells.insert(Arc::from(column), new);
        }
    }
}

#[derive(Clone, Copy)]
enum Mutation<'a> {
    Write(&'a [CellWrite]),
    Delete { column: &'a str, timestamp: Micros },
}

enum OwnedMutation {
    Write(Vec<CellWrite>),
    Delete { column: String, timestamp: Micros },
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
            Mutation::Delete { column, timestamp } => OwnedMutation::Delete { column: column.to_owned(), timestamp },
        }
    }
}

impl OwnedMutation {
    fn as_mutation(&self) -> Mutation<'_> {
        match self {
            OwnedMutation::Write(cells) => Mutation::Write(cells),
            OwnedMutation::Delete { column, timestamp } => Mutation::Delete { column, timestamp: *timestamp },
        }
    }
}

/// Per-client state shared by all handles with the same id.
#[derive(Default)]
struct ClientState {
    isolated: AtomicBool,
    reads: AtomicU64,
    writes: AtomicU64,
    deletes: AtomicU64,
}

impl ClientState {
    fn bump(&self, kind: OpKind) {
        let counter = match kind {
            OpKind::Read => &self.reads,
            OpKind::Write => &self.writes,
            OpKind::Delete => &self.deletes,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn counts(&self) -> OpCounts {
        OpCounts {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            deletes: self.deletes.load(Ordering::Relaxed),
        }
    }

    fn reset(&self) {
        self.reads.store(0, Ordering::Relaxed);
        self.writes.store(0, Ordering::Relaxed);
        self.deletes.store(0, Ordering::Relaxed);
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
            }),
        }
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

    /// A snapshot of the request counters.
    pub fn counters(&self) -> StoreCounters {
        let per_table = lock(&self.inner.table_counts).clone();
        let per_client = lock(&self.inner.clients)
            .iter()
            .map(|(id, state)| (id.clone(), state.counts()))
            .filter(|(_, counts)| counts.total() > 0)
            .collect();
        StoreCounters { per_table, per_client }
    }

    /// Zero every counter (e.g. after a benchmark's warm-up).
    pub fn reset_counters(&self) {
        // Per-table counts first, client counts second: a request racing with the reset may be
        // counted in one map and not the other, which a benchmark's warm-up cut tolerates.
        lock(&self.inner.table_counts).clear();
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
        self.inner.replicas.get(index).map(|r| r.snapshot(table, row, Instant::now()))
    }

    fn caller(&self) -> Caller<'_> {
        Caller { inner: &self.inner, state: &self.inner.anonymous, id: "" }
    }
}

#[async_trait]
impl CellStore for EmbeddedStore {
    async fn write(&self, table: &str, row: &str, cells: &[CellWrite], c: Consistency) -> Result<(), StoreError> {
        self.caller().mutate(table, row, Mutation::Write(cells), c).await
    }
    async fn delete(&self, table: &str, row: &str, column: &str, ts: Micros, c: Consistency) -> Result<(), StoreError> {
        self.caller().mutate(table, row, Mutation::Delete { column, timestamp: ts }, c).await
    }
    async fn read(&self, table: &str, row: &str, slice: Slice, c: Consistency) -> Result<Vec<Cell>, StoreError> {
        self.caller().read(table, row, &slice, c).await
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

    /// The client's local clock: the store's clock plus the client's skew.
    pub fn clock(&self) -> LocalClock {
        LocalClock::new(self.store.physical_clock(), self.skew)
    }

    /// The store this client talks to.
    pub fn store(&self) -> &EmbeddedStore {
        &self.store
    }

    fn caller(&self) -> Caller<'_> {
        Caller { inner: &self.store.inner, state: &self.state, id: &self.id }
    }
}

#[async_trait]
impl CellStore for EmbeddedClient {
    async fn write(&self, table: &str, row: &str, cells: &[CellWrite], c: Consistency) -> Result<(), StoreError> {
        self.caller().mutate(table, row, Mutation::Write(cells), c).await
    }
    async fn delete(&self, table: &str, row: &str, column: &str, ts: Micros, c: Consistency) -> Result<(), StoreError> {
        self.caller().mutate(table, row, Mutation::Delete { column, timestamp: ts }, c).await
    }
    async fn read(&self, table: &str, row: &str, slice: Slice, c: Consistency) -> Result<Vec<Cell>, StoreError> {
        self.caller().read(table, row, &slice, c).await
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

    fn running(&self) -> Vec<usize> {
        (0..self.replicas.len()).filter(|&i| self.replicas[i].is_running()).collect()
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
/// that simultaneous events keep a fixed order (each replica's apply before its reply).
fn timeline(inner: &Inner, start: Instant, slots: impl Iterator<Item = usize>) -> Vec<Event> {
    let mut events = Vec::new();
    {
        let mut rng = lock(&inner.rng);
        for slot in slots {
            let rt = inner.config.latency.sample(&mut rng);
            // An instant beyond the clock's range is never reached: that message is lost.
            if let Some(at) = start.checked_add(rt / 2) {
                events.push(Event { at, slot, reply: false });
            }
            if let Some(at) = start.checked_add(rt) {
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
                if let Some(r) = inner.replicas.get(replica) {
                    r.apply(&table, &row, mutation.as_mutation(), Instant::now());
                }
            }
        });
    }
}

/// A replica's answer to a read.
enum Answer {
    /// Live cells, already sliced: the lone answer of a read that needs no merge.
    Live(Vec<Cell>),
    /// Cells with tombstones, for merging; the flag says the replica stopped at the limit.
    Raw(Vec<RawEntry>, bool),
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

    async fn mutate(&self, table: &str, row: &str, m: Mutation<'_>, c: Consistency) -> Result<(), StoreError> {
        self.count(table, m.kind());
        self.check_reachable().await?;
        let inner = self.inner;
        let start = Instant::now();
        let required = c.required(inner.replicas.len());

        if inner.config.latency.is_zero() {
            let alive = inner.replicas.iter().filter(|r| r.is_running()).count();
            if alive < required {
                tokio::task::yield_now().await;
                return Err(StoreError::Unavailable { consistency: c, required, alive });
            }
            let acks = inner.replicas.iter().filter(|r| r.apply(table, row, m, start)).count();
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
        let events = timeline(inner, start, live.iter().copied());
        let mut flight = InFlight { inner, table, row, mutation: m, events, next: 0 };
        let mut applied = vec![false; inner.replicas.len()];
        let mut acks = 0usize;
        let mut slept = false;
        while let Some(&ev) = flight.events.get(flight.next) {
            if ev.at > deadline {
                break;
            }
            if ev.at > Instant::now() {
                tokio::time::sleep_until(ev.at).await;
                slept = true;
            }
            flight.next += 1;
            if ev.reply {
                if applied.get(ev.slot).copied().unwrap_or(false) {
                    acks += 1;
                    if acks >= required {
                        break;
                    }
                }
            } else if let Some(r) = inner.replicas.get(ev.slot) {
                let ok = r.apply(table, row, m, Instant::now());
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

    async fn read(&self, table: &str, row: &str, slice: &Slice, c: Consistency) -> Result<Vec<Cell>, StoreError> {
        self.count(table, OpKind::Read);
        self.check_reachable().await?;
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

        let grace = inner.config.gc_grace;
        if required == 1 {
            // A lone answer needs no merge: the replica slices its live cells itself.
            let read_live = |replica: usize, now: Instant| {
                inner.replicas.get(replica)?.read_live(table, row, slice, now, grace).map(Answer::Live)
            };
            return match self.read_round(&chosen, c, read_live).await?.pop() {
                Some(Answer::Live(cells)) => Ok(cells),
                _ => Ok(Vec::new()),
            };
        }

        let start = slice.start.as_deref();
        let read_raw = |limit: Option<usize>| {
            move |replica: usize, now: Instant| {
                inner.replicas.get(replica)?.read_raw(table, row, start, limit, now, grace).map(|(entries, truncated)| Answer::Raw(entries, truncated))
            }
        };
        let answers = self.read_round(&chosen, c, read_raw(slice.limit)).await?;
        if let Some(cells) = merge(answers, slice.limit) {
            return Ok(cells);
        }
        let answers = self.read_round(&chosen, c, read_raw(None)).await?;
        Ok(merge(answers, slice.limit).unwrap_or_default())
    }

    /// One round of a read: every chosen replica reads half-way through its round trip, the
    /// answers arrive at the end; all of them are needed.
    async fn read_round(
        &self,
        chosen: &[usize],
        c: Consistency,
        read: impl Fn(usize, Instant) -> Option<Answer>,
    ) -> Result<Vec<Answer>, StoreError> {
        let inner = self.inner;
        let start = Instant::now();
        let required = chosen.len();
        let mut answers: Vec<Option<Answer>> = Vec::with_capacity(required);
        let mut received = 0usize;

        if inner.config.latency.is_zero() {
            for &replica in chosen {
                let answer = read(replica, start);
                received += usize::from(answer.is_some());
                answers.push(answer);
            }
            tokio::task::yield_now().await;
        } else {
            answers.resize_with(required, || None);
            let deadline = inner.deadline(start);
            let mut slept = false;
            for ev in timeline(inner, start, 0..required) {
                if ev.at > deadline {
                    break;
                }
                if ev.at > Instant::now() {
                    tokio::time::sleep_until(ev.at).await;
                    slept = true;
                }
                let Some(answer) = answers.get_mut(ev.slot) else { continue };
                if ev.reply {
                    // A stopped replica read nothing and sends nothing.
                    if answer.is_some() {
                        received += 1;
                        if received == required {
                            break;
                        }
                    }
                } else if let Some(&replica) = chosen.get(ev.slot) {
                    *answer = read(replica, Instant::now());
                }
            }
            if !slept {
                tokio::task::yield_now().await;
            }
        }

        if received < required {
            tokio::time::sleep_until(inner.deadline(start)).await;
            return Err(StoreError::ReadTimeout { consistency: c, received, required });
        }
        Ok(answers.into_iter().flatten().collect())
    }
}

/// Merges replicas' raw answers per column and applies the limit to the live cells. `None`
/// when the answers cannot tell the result: a replica stopped at its limit, and up to that
/// point too few merged cells are alive (another replica knew of newer deaths).
fn merge(answers: Vec<Answer>, limit: Option<usize>) -> Option<Vec<Cell>> {
    // Up to the first column at which a replica stopped, every replica's cells are known.
    let mut bound: Option<Arc<str>> = None;
    let mut lists = Vec::with_capacity(answers.len());
    for answer in answers {
        let Answer::Raw(entries, truncated) = answer else { continue };
        if truncated {
            if let Some(last) = entries.last() {
                if bound.as_ref().is_none_or(|b| last.column < *b) {
                    bound = Some(Arc::clone(&last.column));
                }
            }
        }
        lists.push(entries.into_iter().peekable());
    }
    let cap = limit.unwrap_or(usize::MAX);
    let mut out = Vec::new();
    // A k-way merge of the sorted answers, k being the few replicas read.
    while out.len() < cap {
        let Some(column) = lists.iter_mut().filter_map(|l| l.peek().map(|e| Arc::clone(&e.column))).min() else {
            break;
        };
        if bound.as_ref().is_some_and(|b| column > *b) {
            break;
        }
        let mut winner: Option<RawEntry> = None;
        for list in &mut lists {
            let Some(e) = list.next_if(|e| e.column == column) else { continue };
            winner = match winner {
                Some(cur)
                    if reconcile(e.timestamp, &e.version, e.dead, cur.timestamp, &cur.version, cur.dead)
                        != CmpOrdering::Greater =>
                {
                    Some(cur)
                }
                _ => Some(e),
            };
        }
        let Some(e) = winner else { break };
        if e.dead {
            continue;
        }
        if let Version::Live { value, .. } = e.version {
            out.push(Cell { column: e.column.to_string(), value, timestamp: e.timestamp });
        }
    }
    if out.len() < cap && bound.is_some() {
        return None;
    }
    Some(out)
}
