//! The lease keeper (thesis section 5.3).
//!
//! Every cell an algorithm writes carries a TTL of N seconds, so that a holder that dies frees
//! the lock within N seconds. While a thread holds the lock, or waits in a queue where its place
//! would otherwise expire, the keeper rewrites its cells every N/2 seconds with fresh
//! timestamps. Release stops the keeper and deletes the cells.
//!
//! A lease is **valid until** the earliest `write start + TTL` over its cells: a cell's TTL runs
//! from the moment the store applied the write, which is never before the client started it,
//! so until then every cell is certainly still there. When that moment passes without a
//! successful renewal (the store is unreachable, or the renewal came too late), the keeper
//! stops renewing — a late renewal would put the cell back after another thread may have taken
//! the lock — and publishes [`LeaseState::Lost`].

use crate::lock::{LeaseDeadline, LeaseLost, LeaseState};
use crate::store::{CellStore, CellWrite, Consistency};
use crate::time::TimestampGenerator;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// The address of one cell.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CellKey {
    /// Table.
    pub table: String,
    /// Row key.
    pub row: String,
    /// Column name.
    pub column: String,
}

impl CellKey {
    /// A cell address.
    pub fn new(
        table: impl Into<String>,
        row: impl Into<String>,
        column: impl Into<String>,
    ) -> Self {
        CellKey { table: table.into(), row: row.into(), column: column.into() }
    }
}

/// How a lease is kept.
#[derive(Debug, Clone, Copy)]
pub struct LeaseConfig {
    /// TTL of every leased cell.
    pub ttl: Duration,
    /// How often cells are rewritten; the thesis: TTL / 2.
    pub renew_every: Duration,
    /// Consistency of renewal writes.
    pub consistency: Consistency,
}

impl LeaseConfig {
    /// TTL `ttl`, renewal every `ttl / 2`.
    pub fn new(ttl: Duration, consistency: Consistency) -> Self {
        LeaseConfig { ttl, renew_every: ttl / 2, consistency }
    }
}

struct Leased {
    value: Vec<u8>,
    confirmed_at: Instant,
}

struct Shared {
    cells: Mutex<BTreeMap<CellKey, Leased>>,
    ttl: Duration,
    /// Until when every kept cell is certainly in the store, published at each change of
    /// `cells`; the keeper and the guard read it.
    deadline: LeaseDeadline,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<CellKey, Leased>> {
        self.cells.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Until when every kept cell is certainly in the store: the earliest confirmation plus
    /// the TTL, as last published.
    fn valid_until(&self) -> Option<Instant> {
        self.deadline.until()
    }
    /// Publish the deadline of `cells` (the map, locked by the caller after each change).
    fn publish(&self, cells: &BTreeMap<CellKey, Leased>) {
        self.deadline.set(cells.values().map(|c| c.confirmed_at + self.ttl).min());
    }
}

/// A running lease: a background task renewing a set of cells. Dropping it stops renewal
/// (without deleting the cells; that is the algorithm's release).
pub struct LeaseKeeper {
    shared: Arc<Shared>,
    state: Arc<watch::Sender<LeaseState>>,
    task: Option<crate::rt::JoinHandle<()>>,
}

impl LeaseKeeper {
    /// Start keeping a lease (with no cells yet; [`LeaseKeeper::add`] them as they are written).
    pub fn start<S: CellStore + Clone>(
        store: S,
        timestamps: Arc<TimestampGenerator>,
        config: LeaseConfig,
    ) -> Self {
        let shared = Arc::new(Shared {
            cells: Mutex::new(BTreeMap::new()),
            ttl: config.ttl,
            deadline: LeaseDeadline::new(
                None,
                format!("cells were not renewed within their TTL of {:?}", config.ttl),
            ),
        });
        let (tx, _) = watch::channel(LeaseState::Held);
        let state = Arc::new(tx);
        let task =
            crate::rt::spawn(renew_loop(store, timestamps, config, shared.clone(), state.clone()));
        LeaseKeeper { shared, state, task: Some(task) }
    }

    /// Keep `key` alive from now on; `written_at` is when the write that created it started.
    pub fn add(&self, key: CellKey, value: Vec<u8>, written_at: Instant) {
        let mut cells = self.shared.lock();
        cells.insert(key, Leased { value, confirmed_at: written_at });
        self.shared.publish(&cells);
    }

    /// Stop renewing `key` (before deleting it).
    pub fn remove(&self, key: &CellKey) {
        let mut cells = self.shared.lock();
        cells.remove(key);
        self.shared.publish(&cells);
    }

    /// The cells being kept.
    pub fn cells(&self) -> Vec<CellKey> {
        self.shared.lock().keys().cloned().collect()
    }

    /// Until when every kept cell is certainly in the store.
    pub fn valid_until(&self) -> Option<Instant> {
        self.shared.valid_until()
    }

    /// [`LeaseKeeper::valid_until`], kept up to date for a guard to read.
    pub fn deadline(&self) -> LeaseDeadline {
        self.shared.deadline.clone()
    }

    /// True while the lease is not lost and every kept cell is certainly in the store now.
    pub fn holds(&self) -> bool {
        !self.is_lost() && self.valid_until().is_some_and(|d| crate::rt::now() < d)
    }

    /// True when the lease was lost.
    pub fn is_lost(&self) -> bool {
        matches!(*self.state.borrow(), LeaseState::Lost(_))
    }

    /// The lost reason, if lost.
    pub fn lost_reason(&self) -> Option<LeaseLost> {
        match &*self.state.borrow() {
            LeaseState::Lost(l) => Some(l.clone()),
            _ => None,
        }
    }

    /// The error for a lease lost on `lock_id`: the keeper's own reason if it declared the loss,
    /// else `why` (the caller noticed first, e.g. its cell vanished).
    pub fn lost_error(&self, lock_id: &str, why: &str) -> crate::lock::LockError {
        let reason = self.lost_reason().map(|l| l.reason).unwrap_or_else(|| why.to_string());
        crate::lock::LockError::LeaseLost { lock_id: lock_id.to_string(), reason }
    }

    /// A receiver of state changes, for the guard.
    pub fn subscribe(&self) -> watch::Receiver<LeaseState> {
        self.state.subscribe()
    }

    /// Stop renewing and wait for the renewal task to be gone; returns the cells that were kept,
    /// for the caller to delete. The state becomes [`LeaseState::Released`] unless it was lost.
    pub async fn stop(mut self) -> Vec<CellKey> {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        self.state.send_if_modified(|s| {
            if matches!(s, LeaseState::Held) {
                *s = LeaseState::Released;
                true
            } else {
                false
            }
        });
        self.cells()
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The cells of one row being renewed, with their values.
type RowCells = Vec<(CellKey, Vec<u8>)>;

async fn renew_loop<S: CellStore>(
    store: S,
    timestamps: Arc<TimestampGenerator>,
    config: LeaseConfig,
    shared: Arc<Shared>,
    state: Arc<watch::Sender<LeaseState>>,
) {
    let retry_every = (config.renew_every / 4).max(Duration::from_millis(10));
    let mut next = crate::rt::now() + config.renew_every;
    loop {
        // Wake for the next renewal, or at the deadline if renewals keep failing.
        let deadline = shared.valid_until();
        let wake = deadline.map_or(next, |d| d.min(next));
        crate::rt::sleep_until(wake).await;

        let started = crate::rt::now();
        if let Some(d) = shared.valid_until() {
            if started >= d {
                let _ = state.send(LeaseState::Lost(LeaseLost {
                    reason: format!("cells were not renewed within their TTL of {:?}", config.ttl),
                }));
                return;
            }
        }
        if started < next {
            continue;
        }

        // One write per row: the cells of one row go in one request.
        let snapshot: Vec<(CellKey, Vec<u8>)> =
            shared.lock().iter().map(|(k, v)| (k.clone(), v.value.clone())).collect();
        let mut rows: BTreeMap<(String, String), RowCells> = BTreeMap::new();
        for (k, v) in snapshot {
            rows.entry((k.table.clone(), k.row.clone())).or_default().push((k, v));
        }
        let mut all_ok = true;
        for ((table, row), cells) in rows {
            let writes: Vec<CellWrite> = cells
                .iter()
                .map(|(k, v)| CellWrite {
                    column: k.column.clone(),
                    value: v.clone(),
                    timestamp: timestamps.next(),
                    ttl: Some(config.ttl),
                })
                .collect();
            // A renewal still unanswered when the lease runs out is as good as failed: the
            // holder must hear of the loss then, not when the answer comes (a frozen client
            // may see it seconds later, after others have taken the lock).
            let write = store.write(&table, &row, &writes, config.consistency);
            let answer = match shared.valid_until() {
                Some(d) => crate::rt::timeout_at(d, write).await,
                None => Ok(write.await),
            };
            let Ok(answer) = answer else {
                let _ = state.send(LeaseState::Lost(LeaseLost {
                    reason: format!(
                        "a renewal was still unanswered when the cells' TTL of {:?} ran out",
                        config.ttl
                    ),
                }));
                return;
            };
            match answer {
                Ok(()) => {
                    let mut map = shared.lock();
                    for (k, _) in cells {
                        // Removed meanwhile (released): leave it removed.
                        if let Some(c) = map.get_mut(&k) {
                            c.confirmed_at = started;
                        }
                    }
                    shared.publish(&map);
                }
                Err(_) => all_ok = false,
            }
        }
        next = if all_ok { started + config.renew_every } else { crate::rt::now() + retry_every };
    }
}

/// Release for the Cassandra-model algorithms: stop the lease, then delete every cell it kept
/// with fresh timestamps (greater than any renewal's, so a renewal still in flight cannot
/// bring a cell back).
pub struct CellRelease<S> {
    /// The store.
    pub store: S,
    /// The lease to stop.
    pub lease: LeaseKeeper,
    /// The client's timestamps.
    pub timestamps: Arc<TimestampGenerator>,
    /// Consistency of the deletes.
    pub consistency: Consistency,
    /// The lock id, for errors.
    pub lock_id: String,
    /// The fencing token of the grant this release ends, once there is one: the release then
    /// trims the fencing row ([`crate::fence::trim_older`]).
    pub fence_token: Option<u64>,
    /// Run once the first cell is deleted (the lock's main cell, which sorts first, when it
    /// holds one), before the others and before the fencing row is trimmed: the push queue
    /// lock rings the next waiter there ([`CellRelease::then`]).
    pub after_first_delete: Option<AfterDelete>,
}

/// A step a release takes once its first cell is deleted ([`CellRelease::after_first_delete`]).
pub type AfterDelete =
    Box<dyn FnOnce() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send>;

impl<S: CellStore + Clone> CellRelease<S> {
    /// The release of `lease` on `lock_id`, for the client of `ctx`.
    pub fn new(
        store: &S,
        ctx: &crate::context::ClientContext,
        lock_id: &str,
        lease: LeaseKeeper,
    ) -> Self {
        CellRelease {
            store: store.clone(),
            lease,
            timestamps: ctx.timestamps.clone(),
            consistency: ctx.consistency,
            lock_id: lock_id.to_string(),
            fence_token: None,
            after_first_delete: None,
        }
    }

    /// The same release, taking `step` once its first cell is deleted (whatever the delete
    /// answered), before the other cells and the fencing row.
    pub fn then(mut self, step: Option<AfterDelete>) -> Self {
        self.after_first_delete = step;
        self
    }

    /// Complete a grant whose cells this release keeps: take a fencing token
    /// ([`crate::fence`], steps 1–2), check that the lease still held when it was written
    /// (step 3), and hand out the guard. On failure everything is released and the error
    /// returned, so the caller holds nothing.
    pub async fn into_guard(
        self,
        owner: &str,
    ) -> Result<crate::lock::LockGuard, crate::lock::LockError> {
        self.into_guard_with_tokens(owner, 1).await.map(|(guard, _)| guard)
    }

    /// [`CellRelease::into_guard`] with `count` tokens (a semaphore's permits, one each): the
    /// guard carries the greatest, and the release trims from it.
    pub async fn into_guard_with_tokens(
        mut self,
        owner: &str,
        count: u64,
    ) -> Result<(crate::lock::LockGuard, Vec<u64>), crate::lock::LockError> {
        let tokens = match crate::fence::next_tokens(
            &self.store,
            &self.timestamps,
            &self.lock_id,
            owner,
            count,
            self.consistency,
        )
        .await
        {
            Ok(t) => t,
            Err(e) => {
                let lock_id = self.lock_id.clone();
                let _ = self.run().await;
                return Err(crate::lock::LockError::store(&lock_id, e));
            }
        };
        if !self.lease.holds() {
            let lock_id = self.lock_id.clone();
            let _ = self.run().await;
            return Err(crate::lock::LockError::LeaseLost {
                lock_id,
                reason: "the lease ran out before the grant was complete".into(),
            });
        }
        let token = *tokens.end();
        self.fence_token = Some(token);
        let watch = self.lease.subscribe();
        let lock_id = self.lock_id.clone();
        let deadline = self.lease.deadline();
        let guard = crate::lock::LockGuard::new(lock_id, owner, token, watch, Box::new(self))
            .with_deadline(deadline);
        Ok((guard, tokens.collect()))
    }
}

impl<S: CellStore> CellRelease<S> {
    /// Stop the lease and delete its cells; the first error is returned after every delete was
    /// tried.
    pub async fn run(self) -> Result<(), crate::lock::LockError> {
        let cells = self.lease.stop().await;
        let (first, rest) = cells.split_at(cells.len().min(1));
        let deleted_first =
            delete_cells(&self.store, first, &self.timestamps, self.consistency).await;
        if let Some(step) = self.after_first_delete {
            step().await;
        }
        let deleted = deleted_first
            .and(delete_cells(&self.store, rest, &self.timestamps, self.consistency).await);
        // After the lock's own cells: the next holder need not wait for this round trip.
        let trimmed = match self.fence_token {
            Some(t) => {
                crate::fence::trim_older(
                    &self.store,
                    &self.timestamps,
                    &self.lock_id,
                    t,
                    self.consistency,
                )
                .await
            }
            None => Ok(()),
        };
        deleted.and(trimmed).map_err(|e| crate::lock::LockError::store(&self.lock_id, e))
    }
}

/// Delete cells one by one with fresh timestamps; every delete is tried, the first error is
/// returned.
pub async fn delete_cells<S: CellStore + ?Sized>(
    store: &S,
    cells: &[CellKey],
    timestamps: &TimestampGenerator,
    consistency: Consistency,
) -> Result<(), crate::store::StoreError> {
    let mut first_err = None;
    for k in cells {
        if let Err(e) =
            store.delete(&k.table, &k.row, &k.column, timestamps.next(), consistency).await
        {
            first_err.get_or_insert(e);
        }
    }
    first_err.map_or(Ok(()), Err)
}

#[async_trait::async_trait]
impl<S: CellStore> crate::lock::Release for CellRelease<S> {
    async fn release(self: Box<Self>) -> Result<(), crate::lock::LockError> {
        (*self).run().await
    }
}
