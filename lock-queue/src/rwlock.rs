//! The queue reader-writer lock (`queue-rw`): the thesis's queue lock whose readers share.
//!
//! Asks are served in queue order ([`WriterPolicy::Fifo`]): a read tries while no write is
//! ahead of it in the queue, a write only as the queue's head, and the main row admits a read
//! beside reads and a write beside nothing ([`crate::shared`] has the protocol and why no
//! writer ever holds beside anyone). A reader that asks after a waiting writer waits for it,
//! so writers never starve; the price is that such a reader does not join the readers already
//! holding.
//!
//! Rows: [`RW_MAIN_TABLE`] and [`RW_QUEUE_TABLE`], apart from the mutex's, so one lock id can
//! name a mutex and a reader-writer lock that do not meet. Tokens come from
//! [`lock_core::fence`] as for the mutex: readers granted together may draw the same one, and a
//! write's token is greater than every token drawn before it began.

use crate::protocol::{self, Parts};
use crate::shared::{Ask, Asking, Tables};
use crate::QueueConfig;
use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::lock::{validate_id, LockError, LockGuard};
use lock_core::rwlock::{Access, ReadHolds, RwLocker, WriterPolicy};
use lock_core::store::CellStore;
use std::time::Duration;

/// Who holds the reader-writer lock.
pub const RW_MAIN_TABLE: &str = "queue_rw_main";
/// Who waits for it, in time order.
pub const RW_QUEUE_TABLE: &str = "queue_rw_queue";

struct RwTables;
impl Tables for RwTables {
    const MAIN: &'static str = RW_MAIN_TABLE;
    const QUEUE: &'static str = RW_QUEUE_TABLE;
}

/// The queue reader-writer lock for one owner.
pub struct QueueRwLocker<S> {
    parts: Parts<S>,
    reads: ReadHolds,
}

impl<S: CellStore + Clone> QueueRwLocker<S> {
    /// A reader-writer locker for `ctx.owner` over `store`.
    pub fn new(store: S, ctx: ClientContext, config: QueueConfig) -> Result<Self, LockError> {
        Ok(QueueRwLocker { parts: Parts::new(store, ctx, config)?, reads: ReadHolds::default() })
    }

    fn asking(&self, access: Access) -> Asking<'_, S, RwTables> {
        let ask = match access {
            Access::Read => Ask::Read,
            Access::Write => Ask::Write,
        };
        Asking::new(&self.parts, ask)
    }

    /// A read guard is registered, so that a write ask of the same lock is refused.
    fn granted(&self, access: Access, guard: LockGuard) -> LockGuard {
        match access {
            Access::Read => self.reads.track(guard),
            Access::Write => guard,
        }
    }
}

#[async_trait]
impl<S: CellStore + Clone> RwLocker for QueueRwLocker<S> {
    fn algorithm(&self) -> &str {
        "queue-rw"
    }

    fn owner(&self) -> &str {
        &self.parts.ctx.owner
    }

    fn writer_policy(&self) -> WriterPolicy {
        WriterPolicy::Fifo
    }

    async fn lock(
        &self,
        lock_id: &str,
        access: Access,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        self.reads.check(lock_id, &self.parts.ctx.owner, access)?;
        let guard = protocol::lock(&self.asking(access), lock_id, timeout).await?;
        Ok(self.granted(access, guard))
    }

    async fn try_lock(
        &self,
        lock_id: &str,
        access: Access,
    ) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        self.reads.check(lock_id, &self.parts.ctx.owner, access)?;
        let guard = protocol::try_lock(&self.asking(access), lock_id).await?;
        Ok(guard.map(|g| self.granted(access, g)))
    }
}
