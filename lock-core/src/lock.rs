//! The lock interface (thesis listing 1).
//!
//! The thesis's C# interface `IRemoteLocker { GetLock(lockId); TryGetLock(lockId, out lock) }`
//! becomes [`Locker::lock`] (mandatory, with an optional timeout) and [`Locker::try_lock`]
//! (soft). `IRemoteLock : IDisposable` becomes [`LockGuard`]: it carries the lock id, the
//! owner id and a fencing token, releases on [`LockGuard::release`] or on drop (the `using`
//! block), and tells its holder when the lease under it was lost.

pub use crate::backend::{BackendError, BackendErrorKind};
use crate::store::StoreError;
use async_trait::async_trait;
use std::fmt;
use std::time::Duration;
use tokio::sync::watch;

/// Longest lock id or owner id accepted, in bytes. Ids become row keys, column names, Redis
/// keys and znode names; 200 bytes keeps every backend well inside its limits.
pub const MAX_ID_LEN: usize = 200;

/// The result of one attempt of the 2012 shadow-table algorithm (thesis section 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum AttemptResult {
    /// The calling thread holds the lock.
    Success,
    /// Another thread holds the lock.
    AnotherThreadIsOwner,
    /// Another thread tried at the same moment; nobody won this round.
    ConcurrentAttempt,
}

/// Why a lease was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLost {
    /// What happened, for humans.
    pub reason: String,
}

impl fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The state of the lease under a guard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseState {
    /// The lease is held and being renewed.
    Held,
    /// The lease was lost: another holder may have the lock now.
    Lost(LeaseLost),
    /// The guard was released.
    Released,
}

/// Until when a lease is certainly held, by its holder's own clock: whatever keeps the lease
/// moves it on at each confirmed renewal, and the guard reads it.
///
/// The keeper also says [`LeaseState::Lost`] when this instant passes, but it is a task: on a
/// loaded machine it runs late, and the server may already have granted the lock to another.
/// The deadline is never later than the server's (it counts from when the renewal was sent,
/// the server from when it arrived), so a guard that compares it with the clock knows of the
/// loss before anyone else can be granted the lock. It carries the sentence the holder is
/// told then, the one its keeper would say. Without an instant (nothing is leased yet, or
/// the lease is not kept by time) it never passes.
#[derive(Clone, Debug)]
pub struct LeaseDeadline(std::sync::Arc<DeadlineInner>);

#[derive(Debug)]
struct DeadlineInner {
    until: std::sync::Mutex<Option<crate::rt::Instant>>,
    lapsed: String,
}

impl LeaseDeadline {
    /// A lease certainly held until `until` (`None`: not yet known); `lapsed` says why it is
    /// lost once that has passed (what went unanswered).
    pub fn new(until: Option<crate::rt::Instant>, lapsed: impl Into<String>) -> Self {
        let inner = DeadlineInner { until: std::sync::Mutex::new(until), lapsed: lapsed.into() };
        LeaseDeadline(std::sync::Arc::new(inner))
    }

    /// Move the deadline to `until` (a confirmed renewal), or forget it (`None`).
    pub fn set(&self, until: Option<crate::rt::Instant>) {
        *self.0.until.lock().unwrap_or_else(|e| e.into_inner()) = until;
    }

    /// The deadline now.
    pub fn until(&self) -> Option<crate::rt::Instant> {
        *self.0.until.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True once the deadline has passed on the current clock ([`crate::rt::now`]).
    pub fn passed(&self) -> bool {
        self.until().is_some_and(|d| crate::rt::now() >= d)
    }

    /// Why the lease is lost once the deadline has passed.
    pub fn lapsed(&self) -> LeaseLost {
        LeaseLost { reason: format!("{} (the lease ran out on the holder's clock)", self.0.lapsed) }
    }
}

/// What a lock operation can fail with.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum LockError {
    /// The lock id (or owner id) cannot be used.
    #[error("invalid {what} {id:?}: {reason}")]
    InvalidId {
        /// "lock id" or "owner id".
        what: &'static str,
        /// The rejected id (possibly truncated).
        id: String,
        /// Why.
        reason: String,
    },
    /// The mandatory lock was not granted in time. Nothing of the attempt is left in the store.
    #[error("timed out after {waited:?} waiting for lock {lock_id:?}")]
    Timeout {
        /// The lock id.
        lock_id: String,
        /// How long it waited.
        waited: Duration,
    },
    /// The lease under an acquisition (or a wait in a queue) was lost.
    #[error("lease on lock {lock_id:?} lost: {reason}")]
    LeaseLost {
        /// The lock id.
        lock_id: String,
        /// Why.
        reason: String,
    },
    /// The store failed.
    #[error("store error on lock {lock_id:?}: {source}")]
    Store {
        /// The lock id.
        lock_id: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// A server other than the cell store (Redis, ZooKeeper, etcd, the lock service) or its
    /// driver failed.
    #[error("{backend} error: {source}")]
    Backend {
        /// Which backend.
        backend: &'static str,
        /// What kind of failure, for a caller that branches (retry, or give up).
        kind: BackendErrorKind,
        /// The driver's error, or the client's own sentence where it found the fault.
        #[source]
        source: BackendError,
    },
    /// The configuration is impossible.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A request that can never succeed as asked (more permits than the semaphore has, a read
    /// lock asked to become a write lock): fix the call. Nothing was written or given up.
    #[error(transparent)]
    Usage(#[from] crate::usage::UsageError),
}

impl LockError {
    /// Wrap a store error for `lock_id`.
    pub fn store(lock_id: &str, source: StoreError) -> Self {
        LockError::Store { lock_id: lock_id.to_string(), source }
    }

    /// A backend's failure of `kind`: `source` is the driver's error, a
    /// [`BackendError::context`], or a sentence.
    pub fn backend(
        backend: &'static str,
        kind: BackendErrorKind,
        source: impl Into<BackendError>,
    ) -> Self {
        LockError::Backend { backend, kind, source: source.into() }
    }

    /// The backend's kind of failure, for a [`LockError::Backend`].
    pub fn backend_kind(&self) -> Option<BackendErrorKind> {
        match self {
            LockError::Backend { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// True when trying again may succeed: the backend did not answer in time or could not
    /// be reached ([`BackendErrorKind::is_transient`]). A lock call retries these within its
    /// deadline ([`crate::retry`]); every other error is final.
    pub fn is_transient(&self) -> bool {
        self.backend_kind().is_some_and(BackendErrorKind::is_transient)
    }
}

/// Check a lock id or owner id: non-empty, at most [`MAX_ID_LEN`] bytes, no control characters
/// and no `/` (znode path separator).
pub fn validate_id(what: &'static str, id: &str) -> Result<(), LockError> {
    let fail = |reason: &str| LockError::InvalidId {
        what,
        id: id.chars().take(64).collect(),
        reason: reason.to_string(),
    };
    if id.is_empty() {
        return Err(fail("must not be empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(fail(&format!("is {} bytes long, at most {MAX_ID_LEN} are allowed", id.len())));
    }
    if id.chars().any(|c| c.is_control()) {
        return Err(fail("must not contain control characters"));
    }
    if id.contains('/') {
        return Err(fail("must not contain '/'"));
    }
    Ok(())
}

/// Releases what an acquisition left in its backend. Implemented by each algorithm.
#[async_trait]
pub trait Release: Send + 'static {
    /// Stop renewing and remove the holder's traces.
    async fn release(self: Box<Self>) -> Result<(), LockError>;
}

/// Proof of holding a lock. Release it with [`LockGuard::release`]; dropping it releases in a
/// background task (it needs a tokio runtime then, and errors are not reported).
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    lock_id: String,
    owner: String,
    token: u64,
    lease: watch::Receiver<LeaseState>,
    release: Option<Box<dyn Release>>,
    queued_at: Option<tokio::time::Instant>,
    deadline: Option<LeaseDeadline>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lock_id", &self.lock_id)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("lease", &*self.lease.borrow())
            .field("queued_at", &self.queued_at)
            .field("deadline", &self.deadline.as_ref().and_then(LeaseDeadline::until))
            .finish()
    }
}

impl LockGuard {
    /// A guard for an acquisition; `lease` follows its lease, `release` undoes it.
    pub fn new(
        lock_id: impl Into<String>,
        owner: impl Into<String>,
        token: u64,
        lease: watch::Receiver<LeaseState>,
        release: Box<dyn Release>,
    ) -> Self {
        LockGuard {
            lock_id: lock_id.into(),
            owner: owner.into(),
            token,
            lease,
            release: Some(release),
            queued_at: None,
            deadline: None,
        }
    }

    /// Lets the guard read its lease's deadline ([`LeaseDeadline`]): once it has passed, the
    /// lease counts as lost whether or not its keeper has said so yet.
    pub fn with_deadline(mut self, deadline: LeaseDeadline) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Records when this acquisition's place in line was fixed: the instant its client learned
    /// that no request made after it could be served first. A lock with a queue sets it when
    /// its enqueue was acknowledged (the lock service's `Queued` or `Granted` answer,
    /// ZooKeeper's sequential create, etcd's keyed put, the queue locks' queue cell, the
    /// bakery's doorway); a lock without one (a spin lock, a lease taken by compare-and-set)
    /// leaves it unset.
    ///
    /// This is Lamport's first-come-first-served condition for the bakery: a request whose
    /// doorway ended before another's began must enter first. Two requests on their way at
    /// the same time have no order a lock could keep (they may reach it in either order), so
    /// fairness measured by when each *began* counts reorderings on the network as unfairness;
    /// measured from this instant it counts only what the lock itself reordered.
    pub fn with_queued_at(mut self, at: tokio::time::Instant) -> Self {
        self.queued_at = Some(at);
        self
    }
    /// When this acquisition's place in line was fixed ([`LockGuard::with_queued_at`]); `None`
    /// for a lock without a line.
    pub fn queued_at(&self) -> Option<tokio::time::Instant> {
        self.queued_at
    }
    /// The lock id (the thesis's `LockId`).
    pub fn lock_id(&self) -> &str {
        &self.lock_id
    }
    /// The owner id (the thesis's `ThreadId`).
    pub fn owner(&self) -> &str {
        &self.owner
    }
    /// The fencing token: strictly increasing per lock across holders. Pass it to downstream
    /// storage so that it can reject writes from a holder whose lease has expired.
    pub fn token(&self) -> u64 {
        self.token
    }
    /// The lease's state now: [`LeaseState::Lost`] also once the lease's deadline
    /// ([`LockGuard::with_deadline`]) has passed, before its keeper says so.
    pub fn lease_state(&self) -> LeaseState {
        let state = self.lease.borrow().clone();
        match state {
            LeaseState::Held if self.deadline_passed() => LeaseState::Lost(self.ran_out()),
            state => state,
        }
    }
    /// True when the lease was lost: stop acting under the lock.
    pub fn is_lost(&self) -> bool {
        match &*self.lease.borrow() {
            LeaseState::Lost(_) => true,
            LeaseState::Held => self.deadline_passed(),
            LeaseState::Released => false,
        }
    }
    /// Resolves when the lease is lost (never, while it is held). Use in `tokio::select!`
    /// beside the critical section to abort it.
    pub async fn lost(&self) -> LeaseLost {
        let mut rx = self.lease.clone();
        loop {
            let until = match &*rx.borrow_and_update() {
                LeaseState::Lost(l) => return l.clone(),
                LeaseState::Held => self.deadline.as_ref().and_then(LeaseDeadline::until),
                LeaseState::Released => None,
            };
            if until.is_some_and(|d| crate::rt::now() >= d) {
                return self.ran_out();
            }
            let ran_out = async {
                match until {
                    Some(d) => crate::rt::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(ran_out);
            tokio::select! {
                biased;
                alive = rx.changed() => if alive.is_err() {
                    // The keeper is gone without saying "lost": the guard was released, or
                    // abandoned and its lease left to run out.
                    ran_out.await;
                    return self.ran_out();
                },
                // Look again: a renewal may have moved the deadline on.
                () = &mut ran_out => {}
            }
        }
    }
    fn deadline_passed(&self) -> bool {
        self.deadline.as_ref().is_some_and(LeaseDeadline::passed)
    }
    fn ran_out(&self) -> LeaseLost {
        match &self.deadline {
            Some(deadline) => deadline.lapsed(),
            None => LeaseLost { reason: "the lease ran out on the holder's clock".into() },
        }
    }
    /// A receiver of lease-state changes.
    pub fn watch_lease(&self) -> watch::Receiver<LeaseState> {
        self.lease.clone()
    }
    /// The same guard with its release wrapped by `wrap` (which sees the algorithm's release
    /// and returns the one the guard will run): for a layer that must act when the guard
    /// ends, as [`crate::rwlock::ReadHolds`] does. A released or abandoned guard is returned
    /// as it is.
    pub fn map_release(mut self, wrap: impl FnOnce(Box<dyn Release>) -> Box<dyn Release>) -> Self {
        self.release = self.release.take().map(wrap);
        self
    }
    /// Let go of the guard as a crashed process would: nothing is released, the holder's
    /// cells, keys or znodes stay behind until their lease runs out, and whatever renewed
    /// them is dropped (for the cell-store locks, the lease keeper stops; a backend whose
    /// renewal runs elsewhere stops when its connection goes). For fault injection and
    /// crash tests; a program that means to give the lock up calls [`LockGuard::release`].
    pub fn abandon(mut self) {
        drop(self.release.take());
    }
    /// Release the lock and wait until its traces are gone from the store.
    pub async fn release(mut self) -> Result<(), LockError> {
        match self.release.take() {
            Some(r) => r.release().await,
            None => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(r) = self.release.take() {
            // Without a runtime (it is shutting down) the lease runs out instead.
            let _ = crate::rt::try_spawn(async move {
                let _ = r.release().await;
            });
        }
    }
}

/// A distributed lock algorithm bound to one owner (the thesis's thread).
///
/// One `Locker` may hold several lock ids at once; it must not ask for a lock id it already
/// holds (the algorithms are not reentrant).
#[async_trait]
pub trait Locker: Send + Sync + 'static {
    /// The algorithm's short name ("shadow", "queue", ...).
    fn algorithm(&self) -> &str;
    /// The owner id written into the store.
    fn owner(&self) -> &str;
    /// The mandatory lock: wait until the lock is held, or until `timeout` passes
    /// ([`LockError::Timeout`], with nothing of the attempt left in the store).
    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError>;
    /// The soft lock: return at once with the lock held (`Some`) or not (`None`).
    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;

    #[async_trait]
    impl Release for Nothing {
        async fn release(self: Box<Self>) -> Result<(), LockError> {
            Ok(())
        }
    }

    fn guard_until(
        until: crate::rt::Instant,
    ) -> (LockGuard, watch::Sender<LeaseState>, LeaseDeadline) {
        let (tx, rx) = watch::channel(LeaseState::Held);
        let deadline = LeaseDeadline::new(Some(until), "no renewal answered");
        let guard =
            LockGuard::new("l", "o", 1, rx, Box::new(Nothing)).with_deadline(deadline.clone());
        (guard, tx, deadline)
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_lease_past_its_deadline_is_lost_before_its_keeper_says_so() {
        let ttl = Duration::from_secs(2);
        let (guard, _keeper, _) = guard_until(crate::rt::now() + ttl);
        assert!(!guard.is_lost());
        assert_eq!(guard.lease_state(), LeaseState::Held);
        let started = crate::rt::now();
        let why = crate::rt::timeout(ttl * 5, guard.lost()).await.expect("never told");
        assert_eq!(crate::rt::now() - started, ttl, "told at the deadline, not later");
        assert!(why.reason.contains("no renewal answered"), "{why}");
        assert!(guard.is_lost());
        assert!(matches!(guard.lease_state(), LeaseState::Lost(_)));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_renewal_moves_the_deadline_on_and_a_release_is_never_lost() {
        let ttl = Duration::from_secs(2);
        let (guard, keeper, deadline) = guard_until(crate::rt::now() + ttl);
        let renew = async {
            crate::rt::sleep(ttl / 2).await;
            deadline.set(Some(crate::rt::now() + ttl));
        };
        let started = crate::rt::now();
        let ((), why) = tokio::join!(renew, guard.lost());
        assert_eq!(crate::rt::now() - started, ttl * 3 / 2, "lost at the renewed deadline");
        assert!(why.reason.contains("no renewal answered"), "{why}");
        // The keeper's own word wins over the deadline's.
        keeper.send_replace(LeaseState::Lost(LeaseLost { reason: "cut off".into() }));
        assert_eq!(guard.lost().await.reason, "cut off");

        let (released, keeper, _) = guard_until(crate::rt::now() + ttl);
        keeper.send_replace(LeaseState::Released);
        crate::rt::sleep(ttl * 2).await;
        assert!(!released.is_lost(), "a released guard's deadline means nothing");
        assert_eq!(released.lease_state(), LeaseState::Released);
        drop(keeper);
        let never = crate::rt::timeout(ttl * 5, released.lost()).await;
        assert!(never.is_err(), "a released guard's lease is never lost");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn an_abandoned_lease_is_lost_at_its_deadline() {
        let ttl = Duration::from_secs(2);
        let (guard, keeper, _) = guard_until(crate::rt::now() + ttl);
        drop(keeper);
        let started = crate::rt::now();
        crate::rt::timeout(ttl * 5, guard.lost()).await.expect("never told");
        assert_eq!(crate::rt::now() - started, ttl);
    }

    #[test]
    fn ids_are_validated() {
        assert!(validate_id("lock id", "invoice-42").is_ok());
        assert!(validate_id("lock id", "").is_err());
        assert!(validate_id("lock id", &"x".repeat(MAX_ID_LEN)).is_ok());
        assert!(validate_id("lock id", &"x".repeat(MAX_ID_LEN + 1)).is_err());
        assert!(validate_id("lock id", "a/b").is_err());
        assert!(validate_id("lock id", "a\nb").is_err());
        let e = validate_id("lock id", "").unwrap_err().to_string();
        assert!(e.contains("lock id") && e.contains("empty"), "{e}");
    }
}
