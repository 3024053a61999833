//! The queue semaphore (`queue-semaphore`): the thesis's queue lock where the first asks that
//! fit within N permits hold.
//!
//! An ask of k permits tries while the permits of the asks ahead of it in the queue (holders
//! and earlier waiters) plus k are at most N, and the main row admits it while the permits
//! there plus k are at most N ([`crate::shared`] has the protocol and why never more than N
//! are held). Asks are served in queue order: an ask of several permits at the head is not
//! passed by later asks of fewer, so it never starves, and permits may stay free meanwhile.
//!
//! Every cell carries its ask's N, and an ask that sees another N in either row is refused
//! ([`UsageError::LimitMismatch`](lock_core::usage::UsageError::LimitMismatch)). An acquire of
//! k permits draws k consecutive tokens with one write ([`lock_core::fence::next_tokens`]);
//! asks holding at the same time may draw overlapping ranges.
//!
//! Rows: [`SEMAPHORE_MAIN_TABLE`] and [`SEMAPHORE_QUEUE_TABLE`].

use crate::protocol::{self, Parts};
use crate::shared::{Ask, Asking, Tables};
use crate::QueueConfig;
use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::lock::{validate_id, LockError, LockGuard};
use lock_core::semaphore::{check_acquire, Permits, Semaphore};
use lock_core::store::CellStore;
use std::time::Duration;

/// Who holds permits.
pub const SEMAPHORE_MAIN_TABLE: &str = "queue_semaphore_main";
/// Who waits for them, in time order.
pub const SEMAPHORE_QUEUE_TABLE: &str = "queue_semaphore_queue";

struct SemaphoreTables;
impl Tables for SemaphoreTables {
    const MAIN: &'static str = SEMAPHORE_MAIN_TABLE;
    const QUEUE: &'static str = SEMAPHORE_QUEUE_TABLE;
}

/// The queue semaphore for one owner. An owner holds at most one acquire of a semaphore at a
/// time (its main cell is named after it).
pub struct QueueSemaphore<S> {
    parts: Parts<S>,
}

impl<S: CellStore + Clone> QueueSemaphore<S> {
    /// A semaphore client for `ctx.owner` over `store`.
    pub fn new(store: S, ctx: ClientContext, config: QueueConfig) -> Result<Self, LockError> {
        Ok(QueueSemaphore { parts: Parts::new(store, ctx, config)? })
    }

    fn asking(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
    ) -> Result<Asking<'_, S, SemaphoreTables>, LockError> {
        validate_id("semaphore id", semaphore_id)?;
        check_acquire(semaphore_id, limit, count)?;
        Ok(Asking::new(&self.parts, Ask::Permits { count, limit }))
    }
}

/// The permits of a grant: its guard carries the greatest of its `count` tokens.
fn permits(guard: LockGuard, limit: u32, count: u32) -> Permits {
    let last = guard.token();
    let tokens = (last + 1 - count as u64..=last).collect();
    Permits::new(guard, limit, tokens)
}

#[async_trait]
impl<S: CellStore + Clone> Semaphore for QueueSemaphore<S> {
    fn algorithm(&self) -> &str {
        "queue-semaphore"
    }

    fn owner(&self) -> &str {
        &self.parts.ctx.owner
    }

    async fn acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
        timeout: Option<Duration>,
    ) -> Result<Permits, LockError> {
        let asking = self.asking(semaphore_id, limit, count)?;
        let guard = protocol::lock(&asking, semaphore_id, timeout).await?;
        Ok(permits(guard, limit, count))
    }

    async fn try_acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
    ) -> Result<Option<Permits>, LockError> {
        let asking = self.asking(semaphore_id, limit, count)?;
        let guard = protocol::try_lock(&asking, semaphore_id).await?;
        Ok(guard.map(|g| permits(g, limit, count)))
    }
}
