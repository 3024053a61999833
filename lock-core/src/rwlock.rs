//! The reader-writer lock interface: many readers at once, or one writer.
//!
//! A [`RwLocker`] is a [`Locker`](crate::lock::Locker) whose every ask says what it wants
//! ([`Access`]): readers share the lock with each other, a writer holds it alone. The guard is
//! the mutex's [`LockGuard`], with its lease, its lost signal and its fencing token.
//!
//! # Order, and who can starve
//! Each implementation says in [`RwLocker::writer_policy`] what a writer waits for:
//! - [`WriterPolicy::Fifo`]: asks are served in the order they were queued; a reader asking
//!   after a waiting writer waits behind it. A writer waits only for the holders and asks
//!   ahead of it, so nobody starves; readers give up some sharing (a reader that could have
//!   joined the current readers waits for the writer between them). Curator's and etcd's
//!   recipes, and the lock service, work so.
//! - [`WriterPolicy::ReadersFirst`]: a reader enters whenever no writer holds the lock. Readers
//!   share as much as they can, and a steady stream of them keeps a writer waiting for as long
//!   as it lasts. Redisson's `RReadWriteLock` works so.
//!
//! # Fencing tokens
//! Readers share, so readers granted at once may carry the same token. What holds on every
//! implementation: a write carries a greater token than every hold that ended before it was
//! granted, a hold granted after a write ended carries a greater token than the write's, and
//! an ask made after another hold ended carries a greater token than that hold's. Two readers
//! whose asks overlapped are not ordered: the later granted may carry the smaller token. A
//! resource written only under the write lock can fence with the token exactly as under the
//! mutex.
//!
//! # What a caller cannot do
//! Asking to write a lock this owner holds for reading would wait for itself behind a FIFO
//! queue; it is refused with [`UsageError::Upgrade`]
//! ([`ReadHolds`] tracks it for an implementation). Release the read guard, then ask to write.

use crate::lock::{LockError, LockGuard, Release};
use crate::usage::UsageError;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What an ask of a reader-writer lock wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Access {
    /// Shared with other readers.
    Read,
    /// Alone.
    Write,
}

impl Access {
    /// "read" or "write".
    pub fn name(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// Whether a waiting writer can be passed by readers that asked after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WriterPolicy {
    /// Served in queue order: a later reader waits behind a waiting writer. Nobody starves.
    Fifo,
    /// A reader enters whenever no writer holds: readers can keep a writer waiting as long as
    /// they keep coming.
    ReadersFirst,
}

/// A reader-writer lock algorithm bound to one owner.
///
/// Like [`Locker`](crate::lock::Locker), one `RwLocker` may hold several lock ids at once and
/// must not ask again for a lock id it holds.
#[async_trait]
pub trait RwLocker: Send + Sync + 'static {
    /// The algorithm's short name.
    fn algorithm(&self) -> &str;
    /// The owner id written into the backend.
    fn owner(&self) -> &str;
    /// Whether later readers can pass a waiting writer.
    fn writer_policy(&self) -> WriterPolicy;
    /// Wait until `lock_id` is held with `access`, or until `timeout` passes
    /// ([`LockError::Timeout`], with nothing of the attempt left behind).
    async fn lock(
        &self,
        lock_id: &str,
        access: Access,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, LockError>;
    /// Return at once with `lock_id` held with `access` (`Some`) or not (`None`).
    async fn try_lock(&self, lock_id: &str, access: Access)
        -> Result<Option<LockGuard>, LockError>;
    /// [`RwLocker::lock`] for reading.
    async fn read(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        self.lock(lock_id, Access::Read, timeout).await
    }
    /// [`RwLocker::lock`] for writing.
    async fn write(
        &self,
        lock_id: &str,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, LockError> {
        self.lock(lock_id, Access::Write, timeout).await
    }
}

/// The lock ids one owner holds for reading, so that asking to write one of them is refused
/// ([`UsageError::Upgrade`]) instead of waiting forever. An implementation checks
/// ([`ReadHolds::check`]) before a write ask and registers ([`ReadHolds::track`]) every read
/// guard it hands out; the entry goes when the guard is released, dropped or abandoned.
#[derive(Debug, Default, Clone)]
pub struct ReadHolds {
    held: Arc<Mutex<HashMap<String, usize>>>,
}

impl ReadHolds {
    /// Refuse a write ask of `lock_id` while `owner` holds it for reading.
    pub fn check(&self, lock_id: &str, owner: &str, access: Access) -> Result<(), LockError> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if access == Access::Write && held.get(lock_id).is_some_and(|n| *n > 0) {
            return Err(UsageError::Upgrade { lock_id: lock_id.into(), owner: owner.into() }.into());
        }
        Ok(())
    }

    /// `guard`, a read guard, registered until it is released, dropped or abandoned.
    pub fn track(&self, guard: LockGuard) -> LockGuard {
        let entry = ReadEntry { holds: self.clone(), lock_id: guard.lock_id().to_string() };
        *self
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(entry.lock_id.clone())
            .or_default() += 1;
        guard.map_release(move |inner| Box::new(Tracked { inner, _entry: entry }))
    }
}

/// One registered read guard; unregisters when dropped.
struct ReadEntry {
    holds: ReadHolds,
    lock_id: String,
}

impl Drop for ReadEntry {
    fn drop(&mut self) {
        let mut held = self.holds.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.lock_id) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.lock_id);
            }
        }
    }
}

/// A read guard's release, with its registration.
struct Tracked {
    inner: Box<dyn Release>,
    _entry: ReadEntry,
}

#[async_trait]
impl Release for Tracked {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        let Tracked { inner, _entry } = *self;
        inner.release().await
    }
}
