//! etcd's reader-writer lock recipe (`client/v3/experimental/recipes/rwmutex.go`,
//! `recipe.RWMutex`) on the mutex's machinery.
//!
//! # Layout
//! Lock `<id>` is the recipe's `pfx` = `<root>/rwlocks/<id>`. A reader creates a key of its own
//! under `<pfx>/read/`, a writer under `<pfx>/write/`, each `<lease hex>-<n>` (the recipe names
//! them after the clock; any unique suffix is the recipe's layout), bound to the lease, its
//! value the owner id. So a Go program's `recipe.NewRWMutex(session, "<root>/rwlocks/<id>")`
//! and this lock exclude each other.
//!
//! # Protocol
//! - **A reader** waits only for the write keys created before its own: it reads the last key
//!   under `<pfx>/write/` created before ours, watches it until it is deleted, and reads again
//!   until none is left.
//! - **A writer** waits for every key created before its own, readers' and writers' alike: the
//!   same loop over the whole `<pfx>/`.
//!
//! The create transaction also reads the first key of the range the ask waits for, so an ask
//! with nothing ahead holds after one round trip; each waiter watches one key, so a release
//! wakes only the asks that were waiting on that very key. Timeouts, cancellations, refused try
//! asks, lost answers, outages and the holder's task are the mutex's ([`crate::queue`]).
//!
//! # Order
//! Asks are served by create revision: a reader that asks after a waiting writer waits for it
//! ([`WriterPolicy::Fifo`]), and a writer waits only for the asks ahead of it, so nobody
//! starves.
//!
//! # Fencing tokens
//! The token is the key's create revision. A writer holds only once every key created before
//! its own is gone, so a write's revision exceeds that of every hold that ended before it was
//! granted (any such hold's key was created earlier: a key created after the writer's waits
//! for it). A hold granted after a write ended was asked for after the write's key existed
//! (an earlier reader would have held before the writer, an earlier writer too), so its
//! revision is greater. An ask made after a hold ended creates its key later, at a greater
//! revision. Two readers whose asks overlapped are not ordered.
//!
//! # What a caller cannot do
//! A write asked for by an owner that holds the lock for reading would wait for its own read
//! key: refused at once ([`lock_core::UsageError::Upgrade`]).

use crate::queue::Line;
use crate::{Inner, RWLOCKS};
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::rwlock::{Access, ReadHolds, RwLocker, WriterPolicy};
use lock_core::{LockError, LockGuard};
use std::sync::Arc;
use std::time::Duration;

/// etcd's reader-writer lock recipe for one owner. See the module docs for the protocol.
pub struct EtcdRwLocker {
    inner: Arc<Inner>,
    owner: String,
    reads: ReadHolds,
}

impl std::fmt::Debug for EtcdRwLocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdRwLocker")
            .field("owner", &self.owner)
            .field("endpoints", &self.inner.endpoints)
            .finish()
    }
}

impl EtcdRwLocker {
    pub(crate) fn new(inner: Arc<Inner>, owner: &str) -> EtcdRwLocker {
        EtcdRwLocker { inner, owner: owner.to_string(), reads: ReadHolds::default() }
    }

    /// Check the ask before anything is sent: a valid id, and no write of a lock this owner
    /// reads.
    fn check(&self, lock_id: &str, access: Access) -> Result<(), LockError> {
        validate_id("lock id", lock_id)?;
        self.reads.check(lock_id, &self.owner, access)
    }

    /// Where the ask's key goes, and the prefix whose earlier keys it waits for.
    fn places(&self, lock_id: &str, access: Access) -> (String, String) {
        let pfx = self.inner.kind_name(RWLOCKS, lock_id);
        match access {
            Access::Read => (format!("{pfx}/read/"), format!("{pfx}/write/")),
            Access::Write => (format!("{pfx}/write/"), format!("{pfx}/")),
        }
    }

    fn granted(&self, access: Access, guard: LockGuard) -> LockGuard {
        match access {
            Access::Read => self.reads.track(guard),
            Access::Write => guard,
        }
    }
}

#[async_trait]
impl RwLocker for EtcdRwLocker {
    fn algorithm(&self) -> &str {
        "etcd-rwmutex"
    }

    fn owner(&self) -> &str {
        &self.owner
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
        let session = self.inner.session().await?;
        let (key_prefix, ahead) = self.places(lock_id, access);
        let line = Line {
            session: &session,
            lock_id,
            owner: &self.owner,
            key_prefix: &key_prefix,
            ahead: &ahead,
        };
        let guard = line.lock(timeout).await?;
        Ok(self.granted(access, guard))
    }

    async fn try_lock(
        &self,
        lock_id: &str,
        access: Access,
    ) -> Result<Option<LockGuard>, LockError> {
        self.check(lock_id, access)?;
        let session = self.inner.session().await?;
        let (key_prefix, ahead) = self.places(lock_id, access);
        let line = Line {
            session: &session,
            lock_id,
            owner: &self.owner,
            key_prefix: &key_prefix,
            ahead: &ahead,
        };
        let guard = line.try_lock().await?;
        Ok(guard.map(|g| self.granted(access, g)))
    }
}
