//! The counting semaphore on a client's session: the service's own permit asks.
//!
//! An acquire asks for the semaphore's id as [`Share::Permits`]; the server grants asks in
//! their FIFO order while their permits fit in N, a grant of k permits taking k fencing tokens
//! of its own ([`crate::state`]). Every ask names N, and an ask naming another N than the
//! semaphore's holders and waiters is refused
//! ([`UsageError::LimitMismatch`](lock_core::usage::UsageError::LimitMismatch)). Semaphore ids
//! and lock ids share one namespace on a server: an id in use as one is refused as the other.

use super::locker::ServiceLocker;
use crate::proto::Share;
use async_trait::async_trait;
use lock_core::lock::{validate_id, LockError, LockGuard};
use lock_core::semaphore::{check_acquire, Permits, Semaphore};
use std::time::Duration;

/// A [`Semaphore`] on a [`ServiceClient`](super::ServiceClient)'s session. An owner holds at
/// most one acquire of a semaphore at a time.
pub struct ServiceSemaphore {
    pub(super) locker: ServiceLocker,
}

/// The ask, checked before anything is sent.
fn ask(semaphore_id: &str, limit: u32, count: u32) -> Result<Share, LockError> {
    validate_id("semaphore id", semaphore_id)?;
    check_acquire(semaphore_id, limit, count)?;
    Ok(Share::Permits { count, limit })
}

/// The permits of a grant whose guard carries the first of its `count` tokens.
fn permits(guard: LockGuard, limit: u32, count: u32) -> Permits {
    let first = guard.token();
    Permits::new(guard, limit, (first..first + u64::from(count)).collect())
}

#[async_trait]
impl Semaphore for ServiceSemaphore {
    fn algorithm(&self) -> &str {
        super::ALGORITHM
    }

    fn owner(&self) -> &str {
        &self.locker.owner
    }

    async fn acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
        timeout: Option<Duration>,
    ) -> Result<Permits, LockError> {
        let share = ask(semaphore_id, limit, count)?;
        let guard = self.locker.acquire(semaphore_id, share, timeout).await?;
        Ok(permits(guard, limit, count))
    }

    async fn try_acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
    ) -> Result<Option<Permits>, LockError> {
        let share = ask(semaphore_id, limit, count)?;
        let guard = self.locker.try_acquire(semaphore_id, share).await?;
        Ok(guard.map(|g| permits(g, limit, count)))
    }
}
