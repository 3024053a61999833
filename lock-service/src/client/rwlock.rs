//! The reader-writer lock on a client's session: the service's own shared asks.
//!
//! A read asks for the lock as [`Share::Read`], a write as the mutex does; the server keeps
//! both in the lock's one FIFO queue ([`crate::state`]), so a reader behind a waiting writer
//! waits for it ([`WriterPolicy::Fifo`]) and a writer's release grants every reader up to the
//! next writer in one commit. Guards, releases, retries and the lost signal are the mutex's.

use super::locker::ServiceLocker;
use crate::proto::Share;
use async_trait::async_trait;
use lock_core::lock::{validate_id, LockError, LockGuard};
use lock_core::rwlock::{Access, ReadHolds, RwLocker, WriterPolicy};
use std::time::Duration;

/// A [`RwLocker`] on a [`ServiceClient`](super::ServiceClient)'s session.
pub struct ServiceRwLocker {
    pub(super) locker: ServiceLocker,
    pub(super) reads: ReadHolds,
}

fn share(access: Access) -> Share {
    match access {
        Access::Read => Share::Read,
        Access::Write => Share::Exclusive,
    }
}

impl ServiceRwLocker {
    /// Check the ask before anything is sent: a valid id, and no write of a lock this owner
    /// reads.
    fn check(&self, lock_id: &str, access: Access) -> Result<(), LockError> {
        validate_id("lock id", lock_id)?;
        self.reads.check(lock_id, &self.locker.owner, access)
    }

    fn granted(&self, access: Access, guard: LockGuard) -> LockGuard {
        match access {
            Access::Read => self.reads.track(guard),
            Access::Write => guard,
        }
    }
}

#[async_trait]
impl RwLocker for ServiceRwLocker {
    fn algorithm(&self) -> &str {
        super::ALGORITHM
    }

    fn owner(&self) -> &str {
        &self.locker.owner
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
        self.check(lock_id, access)?;
        let guard = self.locker.acquire(lock_id, share(access), timeout).await?;
        Ok(self.granted(access, guard))
    }

    async fn try_lock(
        &self,
        lock_id: &str,
        access: Access,
    ) -> Result<Option<LockGuard>, LockError> {
        self.check(lock_id, access)?;
        let guard = self.locker.try_acquire(lock_id, share(access)).await?;
        Ok(guard.map(|g| self.granted(access, g)))
    }
}
