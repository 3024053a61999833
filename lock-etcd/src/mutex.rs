//! etcd's `concurrency.Mutex`: one key per waiter under `<root>/<lock id>/`, the lowest create
//! revision holding the lock (the crate docs give the protocol step by step).

use crate::queue::Line;
use crate::{Inner, CANDIDATES, ELECTIONS, RWLOCKS, SEMAPHORES};
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::{LockError, LockGuard, Locker};
use std::sync::Arc;
use std::time::Duration;

/// etcd's Mutex for one owner. See the crate docs for the protocol.
pub struct EtcdLock {
    pub(crate) inner: Arc<Inner>,
    pub(crate) owner: String,
}

impl std::fmt::Debug for EtcdLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdLock")
            .field("owner", &self.owner)
            .field("endpoints", &self.inner.endpoints)
            .finish()
    }
}

#[async_trait]
impl Locker for EtcdLock {
    fn algorithm(&self) -> &str {
        "etcd"
    }
    fn owner(&self) -> &str {
        &self.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        check_lock_id(lock_id)?;
        // The whole wait runs on one lease: our place in the queue is a key of it.
        let session = self.inner.session().await?;
        let prefix = self.inner.lock_prefix(lock_id);
        let line = Line {
            session: &session,
            lock_id,
            owner: &self.owner,
            key_prefix: &prefix,
            ahead: &prefix,
        };
        line.lock(timeout).await
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        check_lock_id(lock_id)?;
        let session = self.inner.session().await?;
        let prefix = self.inner.lock_prefix(lock_id);
        let line = Line {
            session: &session,
            lock_id,
            owner: &self.owner,
            key_prefix: &prefix,
            ahead: &prefix,
        };
        line.try_lock().await
    }
}

/// A valid lock id that is not the name of one of the other primitives' parents: a mutex
/// there would wait behind every reader-writer lock, semaphore or election.
fn check_lock_id(lock_id: &str) -> Result<(), LockError> {
    validate_id("lock id", lock_id)?;
    if [RWLOCKS, SEMAPHORES, ELECTIONS, CANDIDATES].contains(&lock_id) {
        return Err(LockError::InvalidId {
            what: "lock id",
            id: lock_id.to_string(),
            reason: format!(
                "is reserved: <root>/{lock_id}/ holds the keys of this backend's other primitives"
            ),
        });
    }
    Ok(())
}
