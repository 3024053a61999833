//! The transaction-level lock: `pg_advisory_xact_lock` inside a transaction the caller writes
//! in, so the guarded writes and the lock end together.
//!
//! The session lock's holder writes elsewhere, after its grant, and a holder that was stalled
//! past its lease may still write when another holds the lock: that is what the fencing token
//! is for. Here the writes go through [`XactGuard::client`], inside the transaction that holds
//! the lock, and the lock is released by the transaction's end: [`XactGuard::commit`] makes the
//! writes visible and frees the lock at once; a rollback, a broken connection, or a holder
//! silent past its lease (the server's `idle_in_transaction_session_timeout`, set to the lease
//! TTL, ends the session) frees the lock and discards the writes. A stalled holder cannot write
//! after its lease ended: its transaction is gone. Fenced by construction, for writes to the
//! same database.
//!
//! The cost: the transaction is open for as long as the lock is held, which holds back vacuum
//! and keeps its row locks; and the writes must be in this database.

use crate::conn::{keep, Conn, Idle};
use crate::errors::{backend_error, client_error};
use async_trait::async_trait;
use lock_core::lock::Release;
use lock_core::{BackendErrorKind, LeaseDeadline, LeaseState, LockError, LockGuard};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A lock held by an open transaction: write through [`XactGuard::client`], then
/// [`XactGuard::commit`] (writes kept, lock freed) or [`XactGuard::rollback`]. Dropped, the
/// connection is closed: the transaction rolls back and the lock is freed.
#[must_use = "dropping the guard rolls the transaction back and frees the lock"]
pub struct XactGuard {
    conn: Option<Conn>,
    lock_id: String,
    token: u64,
    lease: watch::Receiver<LeaseState>,
    deadline: LeaseDeadline,
    stop: Option<oneshot::Sender<()>>,
    keeper: JoinHandle<()>,
    target: String,
    request_timeout: Duration,
    idle: Arc<Idle>,
}

impl std::fmt::Debug for XactGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XactGuard")
            .field("lock_id", &self.lock_id)
            .field("token", &self.token)
            .field("lease", &*self.lease.borrow())
            .finish()
    }
}

impl XactGuard {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        conn: Conn,
        lock_id: &str,
        token: u64,
        ttl: Duration,
        request_timeout: Duration,
        sent: Instant,
        target: String,
        idle: Arc<Idle>,
    ) -> XactGuard {
        let (lease_tx, lease) = watch::channel(LeaseState::Held);
        let deadline = LeaseDeadline::new(
            Some(sent + ttl),
            format!("no ping answered within the lease ({ttl:?})"),
        );
        let (stop, stopped) = oneshot::channel();
        let keeper = tokio::spawn(keep(
            conn.client.clone(),
            conn.closed(),
            conn.requests(),
            ttl,
            deadline.clone(),
            Arc::new(lease_tx),
            stopped,
        ));
        XactGuard {
            conn: Some(conn),
            lock_id: lock_id.to_string(),
            token,
            lease,
            deadline,
            stop: Some(stop),
            keeper,
            target,
            request_timeout,
            idle,
        }
    }

    /// The lock id.
    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }

    /// The fencing token (as the session lock's), for writes that leave this database.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The connection whose transaction holds the lock: every statement run on it is part of
    /// the transaction.
    pub fn client(&self) -> &tokio_postgres::Client {
        &self.conn.as_ref().expect("a guard has its connection until it ends").client
    }

    /// True when the lease was lost, or ran out on this client's clock: the transaction is,
    /// or is about to be, rolled back (a commit rolls it back).
    pub fn is_lost(&self) -> bool {
        matches!(*self.lease.borrow(), LeaseState::Lost(_)) || self.deadline.passed()
    }

    /// Commit: the writes become visible and the lock is freed, at once. A transaction the
    /// server already ended (the lease lost, the connection broken) is
    /// [`LockError::LeaseLost`]: nothing of it was kept.
    pub async fn commit(self) -> Result<(), LockError> {
        self.end("COMMIT").await
    }

    /// Roll back: the writes are discarded and the lock is freed.
    pub async fn rollback(self) -> Result<(), LockError> {
        self.end("ROLLBACK").await
    }

    async fn end(mut self, how: &str) -> Result<(), LockError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.keeper.abort();
        let conn = self.conn.take().expect("a guard has its connection until it ends");
        let lost = |reason: String| LockError::LeaseLost { lock_id: self.lock_id.clone(), reason };
        if let LeaseState::Lost(why) = &*self.lease.borrow() {
            return Err(lost(format!("{why}; the transaction was rolled back")));
        }
        // The server may end the session at any moment now, or already has: a commit could
        // not be told from a rollback. Closing the connection rolls back for certain.
        if self.deadline.passed() {
            drop(conn);
            return Err(lost(format!(
                "the lease ran out on this client's clock before the {how}: the connection was \
                 closed, so the transaction was rolled back"
            )));
        }
        conn.sent(how);
        match tokio::time::timeout(self.request_timeout, conn.client.batch_execute(how)).await {
            Ok(Ok(())) => {
                self.idle.put(conn);
                Ok(())
            }
            Ok(Err(e)) if e.is_closed() || conn.client.is_closed() => Err(lost(format!(
                "the server ended the session: the transaction was rolled back ({})",
                backend_error(self.target.clone(), e)
            ))),
            Ok(Err(e)) => Err(backend_error(format!("{how} on {}", self.target), e)),
            // Unknown: closing the connection rolls back whatever was not committed.
            Err(_) => Err(client_error(
                BackendErrorKind::Timeout,
                format!(
                    "{how} on {}: no answer within {:?}; the connection was closed, so the \
                     transaction committed or rolled back, unknown which",
                    self.target, self.request_timeout
                ),
            )),
        }
    }
}

impl XactGuard {
    /// This lock as a plain [`LockGuard`] of `owner`, for callers that need the lock and not
    /// the transaction: its release commits (nothing was written in it), its lease is this
    /// guard's.
    pub fn into_lock_guard(self, owner: &str) -> LockGuard {
        let (lock_id, token, lease) = (self.lock_id.clone(), self.token, self.lease.clone());
        let deadline = self.deadline.clone();
        LockGuard::new(lock_id, owner, token, lease, Box::new(self)).with_deadline(deadline)
    }
}

#[async_trait]
impl Release for XactGuard {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        (*self).commit().await
    }
}

impl Drop for XactGuard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.keeper.abort();
        // The connection, if still here, closes: the server rolls the transaction back.
    }
}
