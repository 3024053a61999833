//! The handles callers hold: [`EmbeddedStore`], the store with its fault controls and
//! counters, and [`EmbeddedClient`], one client's view of it, with the per-client state the
//! handles of one id share. Both hand their requests to the coordinator.

use super::cache::ReadCache;
use super::counters::{OpCounts, OpKind, StoreCounters, TombstoneStats};
use super::Caller;
use super::{lock, EmbeddedConfig};
use super::{Mutation, Replica, SharedWrite, Spill};
use crate::rt::Signal;
use crate::store::{
    CasRequest, CasResult, Cell, CellStore, CellWrite, Consistency, Micros, SerialConsistency,
    Slice, StoreError,
};
use crate::time::{ClockJump, LocalClock, PhysicalClock, SIMULATED_EPOCH_MICROS};
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Per-client state shared by all handles with the same id.
pub(super) struct ClientState {
    pub(super) isolated: AtomicBool,
    /// True while the client is frozen ([`EmbeddedStore::pause_client`]).
    pub(super) paused: Signal<bool>,
    /// The client's clock steps ([`EmbeddedStore::jump_clock`]).
    jump: ClockJump,
    pub(super) reads: AtomicU64,
    pub(super) writes: AtomicU64,
    pub(super) deletes: AtomicU64,
    pub(super) cas: AtomicU64,
    pub(super) serial_reads: AtomicU64,
    pub(super) paxos_round_trips: AtomicU64,
    /// The last ballot timestamp this client's lightweight transactions used: ballots of one
    /// client strictly increase (Cassandra's `ClientState.getTimestampForPaxos`).
    pub(super) last_ballot: std::sync::atomic::AtomicI64,
}

impl Default for ClientState {
    fn default() -> Self {
        ClientState {
            isolated: AtomicBool::new(false),
            paused: Signal::new(false),
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
        // Its requests wait here together while it is frozen, and wake in the order they
        // came when it thaws: the order a simulated run takes them in.
        self.paused.wait_for(|paused| (!paused).then_some(())).await;
    }

    pub(super) fn bump(&self, kind: OpKind) {
        let counter = match kind {
            OpKind::Read => &self.reads,
            OpKind::Write => &self.writes,
            OpKind::Delete => &self.deletes,
            OpKind::Cas => &self.cas,
            OpKind::SerialRead => &self.serial_reads,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn counts(&self) -> OpCounts {
        OpCounts {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            deletes: self.deletes.load(Ordering::Relaxed),
            cas: self.cas.load(Ordering::Relaxed),
            serial_reads: self.serial_reads.load(Ordering::Relaxed),
            paxos_round_trips: self.paxos_round_trips.load(Ordering::Relaxed),
        }
    }

    pub(super) fn reset(&self) {
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

pub(super) struct Inner {
    pub(super) config: EmbeddedConfig,
    pub(super) origin: Instant,
    pub(super) replicas: Box<[Replica]>,
    pub(super) rng: Mutex<StdRng>,
    pub(super) clients: Mutex<BTreeMap<String, Arc<ClientState>>>,
    anonymous: Arc<ClientState>,
    pub(super) table_counts: Mutex<BTreeMap<String, OpCounts>>,
    pub(super) tombstones: Mutex<BTreeMap<String, TombstoneStats>>,
    /// The answers of the last reads, per row and slice ([`ReadCache`]).
    pub(super) reads: Mutex<ReadCache>,
    doorbells: std::sync::OnceLock<Arc<crate::doorbell::LocalDoorbells>>,
}

/// The in-process store. Cheap to clone (all clones share one store); see the
/// [module docs](crate::embedded) for its model.
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
        // One file for every replica's sealed dead cells, created at the first one sealed.
        let spill = config.dead_cells_on_disk.then(|| Arc::new(Spill::default()));
        let replicas = (0..config.replicas).map(|_| Replica::new(spill.clone())).collect();
        let anonymous = Arc::new(ClientState::default());
        let mut clients = BTreeMap::new();
        clients.insert(String::new(), Arc::clone(&anonymous));
        EmbeddedStore {
            inner: Arc::new(Inner {
                rng: Mutex::new(StdRng::seed_from_u64(config.seed)),
                config,
                origin: crate::rt::now(),
                replicas,
                clients: Mutex::new(clients),
                anonymous,
                table_counts: Mutex::new(BTreeMap::new()),
                tombstones: Mutex::new(BTreeMap::new()),
                reads: Mutex::new(ReadCache::default()),
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

    /// The first error met writing dead cells to disk ([`EmbeddedConfig::dead_cells_on_disk`]),
    /// if any: from then on they stay in memory, and what the store answers is the same.
    pub fn dead_cells_file_error(&self) -> Option<String> {
        self.inner.replicas.first()?.spill.as_ref()?.error()
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
        self.inner.client_state(client_id).paused.replace(paused);
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
        self.inner.replicas.get(index).map(|r| r.snapshot(table, row, crate::rt::now(), policy))
    }

    /// The dead cells (tombstones, expired TTL cells) replica `index` keeps in a row now, after
    /// any compaction due: for tests and reports of row growth. `None` for an index out of
    /// range or a stopped replica.
    pub fn inspect_tombstones(&self, index: usize, table: &str, row: &str) -> Option<usize> {
        let policy = self.inner.config.row_policy();
        let r = self.inner.replicas.get(index)?;
        r.is_running().then(|| r.tombstones(table, row, crate::rt::now(), policy))
    }

    /// Tombstones scanned by reads, per table, since the store was created or its counters
    /// last reset ([`EmbeddedStore::reset_counters`] resets these too).
    pub fn tombstone_counters(&self) -> BTreeMap<String, TombstoneStats> {
        lock(&self.inner.tombstones).clone()
    }

    pub(super) fn caller(&self) -> Caller<'_> {
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
    async fn read_shared(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Arc<[Cell]>, StoreError> {
        self.caller().read_shared(table, row, &slice, c).await
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

    pub(super) fn caller(&self) -> Caller<'_> {
        Caller { inner: &self.store.inner, state: &self.state, id: &self.id }
    }
}

impl EmbeddedClient {
    /// Runs one request as a frozen client sees it: not sent while frozen, its answer not
    /// seen while frozen ([`EmbeddedStore::pause_client`]).
    pub(super) async fn request<T>(&self, request: impl std::future::Future<Output = T>) -> T {
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
    async fn read_shared(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Arc<[Cell]>, StoreError> {
        self.request(self.caller().read_shared(table, row, &slice, c)).await
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
}
