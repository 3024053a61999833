//! What the thesis's queue lock and the bounded one share: everything but the queue itself.
//!
//! Both locks decide *who tries* with a queue and *who holds* with the main row, and only the
//! queue differs (a new column per request against one reused column per thread). So each
//! lock implements [`Queue`] — how it joins the queue and whether its place is the head — and
//! the rest is here, once:
//!
//! - [`try_main`]: the main-row step both rest their safety on (thesis Theorem 1): write our
//!   cell into the main row, read the row back, alone there means the lock is ours, otherwise
//!   delete our cell (asks that may share, in [`crate::shared`], replace "alone" with "the
//!   others leave room": [`Queue::admits`]);
//! - [`lock`]: listing 6's loop — while our lease holds, check the head and try the main row,
//!   else wait a poll interval — with a timeout that leaves the queue;
//! - [`try_lock`]: listing 7 — nothing if the main row is taken; else join, and while we are
//!   the head try the main row; not the head: leave and answer no;
//! - [`leave`] and [`grant`]: stop the lease and delete our cells, or keep the main cell too,
//!   take a fencing token and hand out the guard.

use crate::QueueConfig;
use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::lease::{delete_cells, AfterDelete, CellKey, CellRelease, LeaseConfig, LeaseKeeper};
use lock_core::lock::{validate_id, LockError, LockGuard};
use lock_core::store::{Cell, CellStore, CellWrite, Slice};
use std::time::Duration;
use tokio::time::Instant;

/// A waiter's place: what identifies its queue cell (the thesis's column, the bounded lock's
/// ticket) and the lease that keeps the cell.
pub(crate) struct Place {
    pub(crate) id: String,
    pub(crate) lease: LeaseKeeper,
    /// Where rings for this place arrive (the push lock's doorbell), if anywhere.
    pub(crate) bell: Option<std::sync::Arc<tokio::sync::Notify>>,
    /// Waiters ahead of this place at the last look at the queue (kept by the push lock).
    pub(crate) ahead: std::sync::atomic::AtomicUsize,
    /// When our queue cell's write was acknowledged: a request that begins later reads a
    /// later time and queues behind us ([`LockGuard::with_queued_at`]).
    pub(crate) queued_at: Instant,
}

/// One look at the queue and, when we are first, at the main row.
pub(crate) enum HeadCheck {
    /// The lock is ours; the main cell's write started then.
    Granted(Instant),
    /// We are first, but the main row holds someone else.
    Occupied,
    /// Someone is ahead of us.
    NotFirst,
}

/// What each queue lock is made of: its store, its client's context and its configuration,
/// checked once by [`Parts::new`].
pub(crate) struct Parts<S> {
    pub(crate) store: S,
    pub(crate) ctx: ClientContext,
    pub(crate) config: QueueConfig,
}

impl<S> Parts<S> {
    /// Checks the context and that the poll interval is above zero.
    pub(crate) fn new(
        store: S,
        ctx: ClientContext,
        config: QueueConfig,
    ) -> Result<Self, LockError> {
        ctx.validate()?;
        if config.poll_interval.is_zero() {
            return Err(LockError::Config(
                "the queue lock's poll interval must be above zero".into(),
            ));
        }
        Ok(Parts { store, ctx, config })
    }
}

/// A queue lock's own part: its queue.
#[async_trait]
pub(crate) trait Queue: Send + Sync {
    /// The store.
    type Store: CellStore + Clone;
    /// The main row's table.
    const MAIN_TABLE: &'static str;
    /// Store, context and configuration.
    fn parts(&self) -> &Parts<Self::Store>;
    /// Take the time, write our queue cell, keep it under a lease.
    async fn join(&self, lock_id: &str) -> Result<Place, LockError>;
    /// Read the queue: is our place its head? An error when our place is gone.
    async fn is_head(&self, lock_id: &str, place: &Place) -> Result<bool, LockError>;
    /// How much of the main row the soft lock reads before it joins the queue: the first cell
    /// is enough for the mutex (any cell means taken).
    fn main_slice(&self) -> Slice {
        Slice::first(1)
    }
    /// The value of our main cell (the mutex: our owner id).
    fn main_value(&self) -> Vec<u8> {
        self.parts().ctx.owner.as_bytes().to_vec()
    }
    /// Whether the main row's `others` (every cell but ours) leave room for us: for the mutex,
    /// only when there are none. An error when they show a request can never succeed.
    fn admits(&self, lock_id: &str, others: &[Cell]) -> Result<bool, LockError> {
        let _ = lock_id;
        Ok(others.is_empty())
    }
    /// How many fencing tokens a grant takes (a semaphore's permits: one each).
    fn tokens(&self) -> u64 {
        1
    }
    /// What a release or a leave does once its first cell is deleted (the main cell, when it
    /// holds one; the push lock rings the next waiter); nothing by default.
    fn after_delete(&self, _lock_id: &str) -> Option<AfterDelete> {
        None
    }
    /// How long to wait before looking at the queue again: the poll interval.
    fn next_poll(&self, _place: &Place) -> Duration {
        self.parts().config.poll_interval
    }
    /// Wait until `until`, or until rung at `place`'s doorbell (true: rung, the ringer saw us
    /// first in the queue). Without a doorbell, sleep.
    async fn wait(&self, place: &Place, until: Instant) -> bool {
        match &place.bell {
            Some(bell) => tokio::select! {
                biased;
                _ = bell.notified() => true,
                _ = lock_core::rt::sleep_until(until) => false,
            },
            None => {
                lock_core::rt::sleep_until(until).await;
                false
            }
        }
    }
}

/// A cell of ours, with the next timestamp and our TTL.
fn write_of(ctx: &ClientContext, column: &str, value: &[u8]) -> CellWrite {
    CellWrite {
        column: column.to_owned(),
        value: value.to_vec(),
        timestamp: ctx.timestamps.next(),
        ttl: Some(ctx.ttl),
    }
}

/// Step 1 of both locks once the time is taken: write our queue cell `column` = `value` into
/// `table` and keep it under a new lease; a failed write is taken back (it may have landed).
/// `id` is what identifies the place later.
pub(crate) async fn join_queue<Q: Queue>(
    q: &Q,
    table: &'static str,
    lock_id: &str,
    column: &str,
    value: &[u8],
    id: String,
) -> Result<Place, LockError> {
    let (store, ctx) = (&q.parts().store, &q.parts().ctx);
    let lease = LeaseKeeper::start(
        store.clone(),
        ctx.timestamps.clone(),
        LeaseConfig::new(ctx.ttl, ctx.consistency),
    );
    let started = lock_core::rt::now();
    let write = write_of(ctx, column, value);
    let key = CellKey::new(table, lock_id, column);
    if let Err(e) = store.write(table, lock_id, &[write], ctx.consistency).await {
        let _ = delete_cells(store, &[key], &ctx.timestamps, ctx.consistency).await;
        return Err(LockError::store(lock_id, e));
    }
    lease.add(key, value.to_vec(), started);
    Ok(Place { id, lease, bell: None, ahead: Default::default(), queued_at: lock_core::rt::now() })
}

/// The head check, once: if we are first, try the main row.
async fn check_head<Q: Queue>(q: &Q, lock_id: &str, place: &Place) -> Result<HeadCheck, LockError> {
    if q.is_head(lock_id, place).await? {
        try_main(q, lock_id).await
    } else {
        Ok(HeadCheck::NotFirst)
    }
}

/// Write our main cell and read the main row: if the others there leave room for us
/// ([`Queue::admits`]; for the mutex: alone), the lock is ours; otherwise delete our main cell.
async fn try_main<Q: Queue>(q: &Q, lock_id: &str) -> Result<HeadCheck, LockError> {
    let (store, ctx) = (&q.parts().store, &q.parts().ctx);
    let c = ctx.consistency;
    let err = |e| LockError::store(lock_id, e);
    let started = lock_core::rt::now();
    let main_write = write_of(ctx, &ctx.owner, &q.main_value());
    let main_key = CellKey::new(Q::MAIN_TABLE, lock_id, &ctx.owner);
    let main = match store.write(Q::MAIN_TABLE, lock_id, &[main_write], c).await {
        Ok(()) => store.read(Q::MAIN_TABLE, lock_id, Slice::all(), c).await,
        Err(e) => Err(e),
    };
    let admitted = main.map_err(err).and_then(|mut main| {
        let ours = main.iter().position(|cell| cell.column == ctx.owner);
        Ok(match ours {
            Some(i) => {
                main.remove(i);
                q.admits(lock_id, &main)?
            }
            None => false,
        })
    });
    match admitted {
        Ok(true) => Ok(HeadCheck::Granted(started)),
        Ok(false) => {
            delete_cells(store, &[main_key], &ctx.timestamps, c).await.map_err(err)?;
            Ok(HeadCheck::Occupied)
        }
        Err(e) => {
            let _ = delete_cells(store, &[main_key], &ctx.timestamps, c).await;
            Err(e)
        }
    }
}

/// Leave the queue (timeout, soft lock refused, error): stop the lease, delete our cells.
async fn leave<Q: Queue>(q: &Q, lock_id: &str, place: Place) {
    let release = CellRelease::new(&q.parts().store, &q.parts().ctx, lock_id, place.lease);
    let _ = release.then(q.after_delete(lock_id)).run().await;
}

/// The lock is ours: keep the main cell too, take a fencing token, hand out the guard.
async fn grant<Q: Queue>(
    q: &Q,
    lock_id: &str,
    place: Place,
    main_written: Instant,
) -> Result<LockGuard, LockError> {
    let ctx = &q.parts().ctx;
    let queued_at = place.queued_at;
    place.lease.add(CellKey::new(Q::MAIN_TABLE, lock_id, &ctx.owner), q.main_value(), main_written);
    CellRelease::new(&q.parts().store, ctx, lock_id, place.lease)
        .then(q.after_delete(lock_id))
        .into_guard_with_tokens(&ctx.owner, q.tokens())
        .await
        .map(|(guard, _)| guard.with_queued_at(queued_at))
}

/// Listing 6, with a timeout that leaves the queue.
pub(crate) async fn lock<Q: Queue>(
    q: &Q,
    lock_id: &str,
    timeout: Option<Duration>,
) -> Result<LockGuard, LockError> {
    validate_id("lock id", lock_id)?;
    let start = lock_core::rt::now();
    let deadline = timeout.map(|t| start + t);
    let place = q.join(lock_id).await?;
    let mut rung = false;
    loop {
        if place.lease.is_lost() {
            let e = place.lease.lost_error(lock_id, "lease lost while waiting");
            leave(q, lock_id, place).await;
            return Err(e);
        }
        // A ring means the ringer read the queue and found us first: go straight to the main
        // row, which alone decides who holds (a stale or mistaken ring costs a failed try).
        let checked =
            if rung { try_main(q, lock_id).await } else { check_head(q, lock_id, &place).await };
        match checked {
            Ok(HeadCheck::Granted(written)) => return grant(q, lock_id, place, written).await,
            Ok(HeadCheck::Occupied | HeadCheck::NotFirst) => {}
            Err(e) => {
                leave(q, lock_id, place).await;
                return Err(e);
            }
        }
        let wake = lock_core::rt::now() + q.next_poll(&place);
        match deadline {
            Some(d) if wake >= d => {
                lock_core::rt::sleep_until(d).await;
                leave(q, lock_id, place).await;
                return Err(LockError::Timeout {
                    lock_id: lock_id.to_string(),
                    waited: lock_core::rt::elapsed(start),
                });
            }
            _ => rung = q.wait(&place, wake).await,
        }
    }
}

/// Listing 7.
pub(crate) async fn try_lock<Q: Queue>(
    q: &Q,
    lock_id: &str,
) -> Result<Option<LockGuard>, LockError> {
    validate_id("lock id", lock_id)?;
    let main = q
        .parts()
        .store
        .read(Q::MAIN_TABLE, lock_id, q.main_slice(), q.parts().ctx.consistency)
        .await
        .map_err(|e| LockError::store(lock_id, e))?;
    if !q.admits(lock_id, &main)? {
        return Ok(None);
    }
    let place = q.join(lock_id).await?;
    loop {
        match check_head(q, lock_id, &place).await {
            Ok(HeadCheck::Granted(written)) => {
                return grant(q, lock_id, place, written).await.map(Some)
            }
            Ok(HeadCheck::Occupied) => {
                q.wait(&place, lock_core::rt::now() + q.parts().config.poll_interval).await;
            }
            Ok(HeadCheck::NotFirst) => {
                leave(q, lock_id, place).await;
                return Ok(None);
            }
            Err(e) => {
                leave(q, lock_id, place).await;
                return Err(e);
            }
        }
    }
}
