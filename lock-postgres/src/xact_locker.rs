//! The transaction-level lock behind the plain [`Locker`] interface.

use crate::locker::PgLocker;
use async_trait::async_trait;
use lock_core::{LockError, LockGuard, Locker};
use std::time::Duration;

/// The transaction-level lock as a [`Locker`]: each grant is an open transaction holding
/// `pg_advisory_xact_lock` ([`PgLocker::transaction`]), released by its commit. What it
/// guards cannot be written in that transaction through this interface (use
/// [`PgLocker::transaction`] for that): it is the lock that stays whole behind a pooler in
/// transaction pooling, where a session lock is taken on one server connection and released
/// on another, because a transaction keeps its server connection until it ends.
///
/// `try_lock` asks with the shortest wait the server takes (`lock_timeout` of 1 ms): the
/// server has no transaction-level try that answers in the same round trip as the token.
#[derive(Clone)]
pub struct PgXactLocker {
    locker: PgLocker,
}

impl PgXactLocker {
    /// The transaction-level lock of `locker`'s owner, on its backend.
    pub fn new(locker: PgLocker) -> PgXactLocker {
        PgXactLocker { locker }
    }
}

#[async_trait]
impl Locker for PgXactLocker {
    fn algorithm(&self) -> &str {
        "postgres-xact"
    }

    fn owner(&self) -> &str {
        self.locker.owner()
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        let guard = self.locker.transaction(lock_id, timeout).await?;
        Ok(guard.into_lock_guard(self.locker.owner()))
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        match self.lock(lock_id, Some(Duration::from_millis(1))).await {
            Ok(guard) => Ok(Some(guard)),
            Err(LockError::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}
