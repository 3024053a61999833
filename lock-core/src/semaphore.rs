//! The counting semaphore interface: at most N permits of one semaphore held at any instant.
//!
//! A [`Semaphore`] is bound to one owner, like a [`Locker`](crate::lock::Locker). An acquire
//! asks for k of a semaphore's N permits (`1 <= k <= N`) and returns [`Permits`]: a lease that
//! holds them together, is released together, tells its holder when it is lost, and carries
//! one token per permit.
//!
//! # The size of a semaphore
//! Every acquire names the semaphore's size N, as `consul lock -n N` and kazoo's
//! `Semaphore(max_leases=N)` do: the backends keep no configuration of their own. Clients of one
//! semaphore must agree on it; an implementation that can see the size its holders and
//! waiters use refuses another with [`UsageError::LimitMismatch`]. Asking for no permits, for
//! more than N, or naming N = 0 is refused before anything is written
//! ([`UsageError::check_permits`]).
//!
//! # Tokens
//! Each permit carries a token. Tokens of one acquire are distinct; an acquire called after
//! another's permits were released carries greater tokens than all of them. Permits held at
//! the same time are not ordered among themselves (on some backends two of them may even carry
//! the same number), so a token fences out a holder whose lease ran out only against later
//! holders, not against the N - 1 others beside it.

use crate::lock::{LeaseLost, LeaseState, LockError, LockGuard};
use crate::usage::UsageError;
use async_trait::async_trait;
use std::time::Duration;

/// Proof of holding some permits of a semaphore. Release with [`Permits::release`]; dropping
/// releases in a background task, as for [`LockGuard`].
#[must_use = "dropping the permits releases them at once"]
#[derive(Debug)]
pub struct Permits {
    guard: LockGuard,
    limit: u32,
    tokens: Vec<u64>,
}

impl Permits {
    /// Permits of a semaphore of `limit` permits, one per token, held by `guard`'s lease; the
    /// guard's lock id is the semaphore id.
    pub fn new(guard: LockGuard, limit: u32, tokens: Vec<u64>) -> Self {
        assert!(!tokens.is_empty(), "permits without a token");
        Permits { guard, limit, tokens }
    }
    /// The semaphore id.
    pub fn semaphore_id(&self) -> &str {
        self.guard.lock_id()
    }
    /// The owner id.
    pub fn owner(&self) -> &str {
        self.guard.owner()
    }
    /// The semaphore's size.
    pub fn limit(&self) -> u32 {
        self.limit
    }
    /// How many permits are held.
    pub fn count(&self) -> u32 {
        self.tokens.len() as u32
    }
    /// One token per permit.
    pub fn tokens(&self) -> &[u64] {
        &self.tokens
    }
    /// When this acquire's place in line was fixed ([`LockGuard::queued_at`]).
    pub fn queued_at(&self) -> Option<tokio::time::Instant> {
        self.guard.queued_at()
    }
    /// The lease's state now.
    pub fn lease_state(&self) -> LeaseState {
        self.guard.lease_state()
    }
    /// True when the lease was lost: stop acting under the permits.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }
    /// Resolves when the lease is lost.
    pub async fn lost(&self) -> LeaseLost {
        self.guard.lost().await
    }
    /// Let go as a crashed process would ([`LockGuard::abandon`]).
    pub fn abandon(self) {
        self.guard.abandon()
    }
    /// The guard that holds the permits: releasing it releases them all. For code that
    /// handles every kind of hold alike (the harness's contenders).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }
    /// Release every permit and wait until their traces are gone.
    pub async fn release(self) -> Result<(), LockError> {
        self.guard.release().await
    }
}

/// A counting semaphore algorithm bound to one owner.
#[async_trait]
pub trait Semaphore: Send + Sync + 'static {
    /// The algorithm's short name.
    fn algorithm(&self) -> &str;
    /// The owner id written into the backend.
    fn owner(&self) -> &str;
    /// Wait until `permits` of the `limit` permits of `semaphore_id` are held, or until
    /// `timeout` passes ([`LockError::Timeout`], with nothing of the attempt left behind).
    async fn acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        permits: u32,
        timeout: Option<Duration>,
    ) -> Result<Permits, LockError>;
    /// Return at once with the permits held (`Some`) or not (`None`).
    async fn try_acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        permits: u32,
    ) -> Result<Option<Permits>, LockError>;
}

/// Check an acquire's numbers ([`UsageError::check_permits`]) as a [`LockError`].
pub fn check_acquire(semaphore_id: &str, limit: u32, permits: u32) -> Result<(), LockError> {
    UsageError::check_permits(semaphore_id, limit, permits).map_err(LockError::from)
}
