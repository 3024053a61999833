//! Time: the clocks clients read, the write-timestamp generator, and the time sources that
//! order the queue lock.
//!
//! Nothing here reads a global clock directly. [`PhysicalClock::Tokio`] reads [`crate::rt`]'s
//! clock, so inside a [`crate::rt::Simulation`] (or under tokio's paused clock) time is
//! simulated and reproducible;
//! [`PhysicalClock::System`] reads the system clock for runs against a real cluster, where
//! processes on different machines must agree on the epoch.
//!
//! Three [`TimeSource`]s are offered, so a benchmark can show how each behaves under skew:
//! - [`LocalClock`]: the client's own clock, with a configurable skew;
//! - [`GlobalTime`]: the thesis's replicated service (listing 8), read from a `GlobalTime` cell
//!   that [`GlobalTimeService`] replicas keep at the maximum of their clocks;
//! - [`HybridClock`]: a hybrid logical clock that never goes backwards and moves past every
//!   timestamp it has observed.
//!
//! The `GlobalTime` row stays one cell: it is only ever overwritten (no TTL, no deletion), so
//! it holds no tombstone and a read of it scans none, however long the service runs.

use crate::store::{CellStore, CellWrite, Consistency, Micros, Slice, StoreError};
use async_trait::async_trait;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// 2026-01-01T00:00:00Z in microseconds: the epoch simulated clocks start from, so simulated
/// timestamps look like real ones and have 16 digits, like the thesis's.
pub const SIMULATED_EPOCH_MICROS: Micros = 1_767_225_600_000_000;

/// Where physical time comes from.
#[derive(Debug, Clone, Copy)]
pub enum PhysicalClock {
    /// The runtime's clock ([`crate::rt::now`]), anchored so that `origin` reads as `epoch`:
    /// simulated inside a simulation, wall time otherwise. One process only (instants are not comparable across
    /// processes).
    Tokio {
        /// The instant that reads as `epoch`.
        origin: Instant,
        /// Microseconds since the Unix epoch at `origin`.
        epoch: Micros,
    },
    /// The system clock (microseconds since the Unix epoch): for several processes or machines.
    System,
}

impl PhysicalClock {
    /// A tokio clock that reads [`SIMULATED_EPOCH_MICROS`] now.
    pub fn tokio() -> Self {
        PhysicalClock::Tokio { origin: crate::rt::now(), epoch: SIMULATED_EPOCH_MICROS }
    }

    /// Microseconds now.
    pub fn now_micros(&self) -> Micros {
        match *self {
            PhysicalClock::Tokio { origin, epoch } => {
                epoch + crate::rt::now().saturating_duration_since(origin).as_micros() as Micros
            }
            PhysicalClock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_micros() as Micros)
                .unwrap_or(0),
        }
    }
}

/// A client's local clock: a physical clock plus a fixed skew (positive runs ahead), plus an
/// optional [`ClockJump`] that a fault injector moves while the clock is in use.
#[derive(Debug, Clone)]
pub struct LocalClock {
    base: PhysicalClock,
    skew: Micros,
    jump: Option<ClockJump>,
}

impl LocalClock {
    /// A clock reading `base` shifted by `skew_micros`.
    pub fn new(base: PhysicalClock, skew_micros: Micros) -> Self {
        LocalClock { base, skew: skew_micros, jump: None }
    }
    /// The same clock, also shifted by whatever `jump` holds at each reading.
    pub fn with_jump(mut self, jump: ClockJump) -> Self {
        self.jump = Some(jump);
        self
    }
    /// The clock's reading in microseconds.
    pub fn now_micros(&self) -> Micros {
        let jumped = self.jump.as_ref().map_or(0, ClockJump::offset);
        self.base.now_micros() + self.skew + jumped
    }
    /// The configured skew (without any jump).
    pub fn skew(&self) -> Micros {
        self.skew
    }
}

/// A step a clock has taken, shared by every copy of the clocks built with it: what an NTP
/// step, a VM migration or an operator's `date -s` does to a machine's clock while programs
/// read it. Every reading of a [`LocalClock::with_jump`] clock adds the current offset, so
/// write timestamps, queue times and expiry values all see the jump at once.
#[derive(Debug, Clone, Default)]
pub struct ClockJump(Arc<AtomicI64>);

impl ClockJump {
    /// No jump yet.
    pub fn new() -> Self {
        Self::default()
    }
    /// The clock jumps by `micros` (negative: backwards) from now on, on top of earlier jumps.
    pub fn jump(&self, micros: Micros) {
        self.0.fetch_add(micros, Ordering::AcqRel);
    }
    /// The total offset of every jump so far.
    pub fn offset(&self) -> Micros {
        self.0.load(Ordering::Acquire)
    }
}

/// Strictly increasing write timestamps for one client, like the drivers' monotonic timestamp
/// generators: `max(clock, last + 1)`.
///
/// Why: a client that writes a cell and then deletes it within one microsecond (always, in
/// simulated time without latency) would otherwise give both the same timestamp, and the
/// deletion would win the tie against its own later re-write.
#[derive(Debug)]
pub struct TimestampGenerator {
    clock: LocalClock,
    last: AtomicI64,
}

impl TimestampGenerator {
    /// A generator over `clock`.
    pub fn new(clock: LocalClock) -> Self {
        TimestampGenerator { clock, last: AtomicI64::new(i64::MIN) }
    }
    /// The next timestamp: greater than every one handed out before.
    pub fn next(&self) -> Micros {
        let now = self.clock.now_micros();
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = now.max(last.saturating_add(1));
            match self.last.compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
    /// The underlying clock.
    pub fn clock(&self) -> LocalClock {
        self.clock.clone()
    }
}

/// A source of "now" for ordering (the queue lock's column names).
#[async_trait]
pub trait TimeSource: Send + Sync + 'static {
    /// The current time in microseconds. May cost a store read (the GlobalTime service).
    async fn now(&self) -> Result<Micros, StoreError>;
    /// Tell the source about a timestamp seen in the store (used by the hybrid clock).
    fn observe(&self, _seen: Micros) {}
    /// A short name for reports.
    fn name(&self) -> &'static str;
}

#[async_trait]
impl TimeSource for LocalClock {
    async fn now(&self) -> Result<Micros, StoreError> {
        Ok(self.now_micros())
    }
    fn name(&self) -> &'static str {
        "local"
    }
}

/// A hybrid logical clock folded into microseconds: `now = max(physical, last + 1,
/// observed + 1)`.
///
/// It never goes backwards, and after it has observed a timestamp `t` it only returns values
/// above `t`: a client whose clock is behind still queues after every entry it has seen.
#[derive(Debug)]
pub struct HybridClock {
    physical: LocalClock,
    last: AtomicI64,
}

impl HybridClock {
    /// A hybrid clock over a (possibly skewed) physical clock.
    pub fn new(physical: LocalClock) -> Self {
        HybridClock { physical, last: AtomicI64::new(i64::MIN) }
    }
    /// The next reading (synchronous; [`TimeSource::now`] calls this).
    pub fn tick(&self) -> Micros {
        let pt = self.physical.now_micros();
        let mut last = self.last.load(Ordering::Acquire);
        loop {
            // Strictly above anything handed out or observed before this call.
            let next = pt.max(last.saturating_add(1));
            match self.last.compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }
}

#[async_trait]
impl TimeSource for HybridClock {
    async fn now(&self) -> Result<Micros, StoreError> {
        Ok(self.tick())
    }
    fn observe(&self, seen: Micros) {
        self.last.fetch_max(seen, Ordering::AcqRel);
    }
    fn name(&self) -> &'static str {
        "hlc"
    }
}

/// The table, row and column of the `GlobalTime` cell.
pub const GLOBAL_TIME_TABLE: &str = "time_service";
/// Row of the `GlobalTime` cell.
pub const GLOBAL_TIME_ROW: &str = "global";
/// Column of the `GlobalTime` cell.
pub const GLOBAL_TIME_COLUMN: &str = "GlobalTime";

fn decode_time(value: &[u8]) -> Option<Micros> {
    value.try_into().ok().map(Micros::from_be_bytes)
}

/// Readers of the thesis's time service: the value of the `GlobalTime` cell.
pub struct GlobalTime<S> {
    store: S,
    consistency: Consistency,
}

impl<S: CellStore> GlobalTime<S> {
    /// A reader over `store`, reading at `consistency`.
    pub fn new(store: S, consistency: Consistency) -> Self {
        GlobalTime { store, consistency }
    }
    /// Read the cell: `None` before any replica wrote it.
    pub async fn read(&self) -> Result<Option<Micros>, StoreError> {
        read_global_time(&self.store, self.consistency).await
    }
}

/// Read the `GlobalTime` cell: `None` before any replica wrote it.
pub async fn read_global_time<S: CellStore>(
    store: &S,
    consistency: Consistency,
) -> Result<Option<Micros>, StoreError> {
    let cells = store
        .read(GLOBAL_TIME_TABLE, GLOBAL_TIME_ROW, Slice::from(GLOBAL_TIME_COLUMN, 1), consistency)
        .await?;
    Ok(cells
        .into_iter()
        .find(|c| c.column == GLOBAL_TIME_COLUMN)
        .and_then(|c| decode_time(&c.value)))
}

#[async_trait]
impl<S: CellStore> TimeSource for GlobalTime<S> {
    async fn now(&self) -> Result<Micros, StoreError> {
        self.read().await?.ok_or_else(|| {
            StoreError::Rejected(
                "GlobalTime has not been written by any time-service replica yet".into(),
            )
        })
    }
    fn name(&self) -> &'static str {
        "global-time"
    }
}

/// One replica's step of listing 8 (`TryUpdateGlobalTime`): read the local clock and the
/// `GlobalTime` cell; if local is greater, write `GlobalTime = local` with write timestamp
/// `local`. Returns the value written, if any.
///
/// Why the cell never decreases (Theorem 5): its value always equals its write timestamp, and
/// a write with a smaller timestamp cannot replace a cell with a greater one.
pub async fn try_update_global_time<S: CellStore>(
    store: &S,
    clock: &LocalClock,
    consistency: Consistency,
) -> Result<Option<Micros>, StoreError> {
    let local = clock.now_micros();
    let global = read_global_time(store, consistency).await?;
    if global.is_none_or(|g| local > g) {
        let cell = CellWrite {
            column: GLOBAL_TIME_COLUMN.into(),
            value: local.to_be_bytes().to_vec(),
            timestamp: local,
            ttl: None,
        };
        store
            .write(GLOBAL_TIME_TABLE, GLOBAL_TIME_ROW, std::slice::from_ref(&cell), consistency)
            .await?;
        return Ok(Some(local));
    }
    Ok(None)
}

/// The replicated time service: replicas that each run [`try_update_global_time`] every
/// `period` (the thesis: 500 ms) with their own, possibly skewed, clocks.
pub struct GlobalTimeService {
    replicas: Vec<crate::rt::JoinHandle<()>>,
}

impl GlobalTimeService {
    /// The thesis's update period.
    pub const DEFAULT_PERIOD: Duration = Duration::from_millis(500);

    /// Start one replica per clock, each writing through its own store handle. Failed updates
    /// are retried at the next period (the service must outlive store hiccups).
    pub fn start<S: CellStore + Clone>(
        replicas: Vec<(S, LocalClock)>,
        period: Duration,
        consistency: Consistency,
    ) -> Self {
        let replicas = replicas
            .into_iter()
            .map(|(store, clock)| {
                crate::rt::spawn(async move {
                    // The first update at once, then one a period after the last began
                    // (a late one delays the next instead of bunching them).
                    loop {
                        let began = crate::rt::now();
                        let _ = try_update_global_time(&store, &clock, consistency).await;
                        crate::rt::sleep_until((began + period).max(crate::rt::now())).await;
                    }
                })
            })
            .collect();
        GlobalTimeService { replicas }
    }

    /// Stop replica `index` as if its process died.
    pub fn kill(&self, index: usize) {
        if let Some(r) = self.replicas.get(index) {
            r.abort();
        }
    }

    /// Number of replicas started.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// True when no replica was started.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }
}

impl Drop for GlobalTimeService {
    fn drop(&mut self) {
        for r in &self.replicas {
            r.abort();
        }
    }
}

/// A shared, type-erased time source.
pub type SharedTimeSource = Arc<dyn TimeSource>;
