//! The [`Locker`] on a client's session: an acquisition, its cancellation when abandoned,
//! and the release behind each guard.
//!
//! **A release is sent until its outcome is known** ([`Session::give_up`]): a guard's
//! release goes to the leader again across reconnects and failovers for up to a session TTL
//! (at least the request timeout), since within a TTL without an answered request the
//! client counts its session lost and the server's expiry frees its locks anyway. So
//! [`LockGuard::release`] returns `Ok` once the lock is released, or once the session that
//! held it is over; an error means the outcome is still unknown after that long with the
//! session alive. Such a release, and an abandoned ask's release that failed alike, stays
//! unsettled: it is sent again after each answered keep-alive, and before the next ask of
//! the same lock and owner on the session, which is not sent until the release's outcome is
//! known. The server keeps the last line of defence: a newer ask of an owner whose older ask
//! still holds gives that grant up first, so it is never answered the old grant as new
//! ([`crate::state`]).

use super::session::{Key, Session};
use super::{backend_of, lock, refusal_kind, ServiceClient, ALGORITHM};
use crate::proto::{ErrorKind, Reply, Request, Share};
use async_trait::async_trait;
use lock_core::lock::{validate_id, LeaseLost, LeaseState, LockError, LockGuard, Locker, Release};
use lock_core::usage::UsageError;
use lock_core::BackendErrorKind;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

/// A [`Locker`] on a [`ServiceClient`]'s session.
pub struct ServiceLocker {
    pub(super) client: ServiceClient,
    pub(super) owner: String,
}

/// What an ask wants: its share of the lock, and a campaign's value for an election.
#[derive(Debug, Clone, Default)]
pub(super) struct Ask {
    pub(super) share: Share,
    pub(super) value: Option<Vec<u8>>,
}

impl From<Share> for Ask {
    fn from(share: Share) -> Self {
        Ask { share, value: None }
    }
}

/// A granted ask: its guard, the session it holds on, and its attempt.
pub(super) struct Granted {
    pub(super) guard: LockGuard,
    pub(super) session: Arc<Session>,
    pub(super) attempt: u64,
}

/// Leaves the queue (or releases a grant that raced in) if an acquisition is abandoned. The
/// release names the ask, so it gives up that ask only, even if it arrives after a new ask of
/// the same owner for the same lock (see [`crate::state`]).
pub(super) struct Cancel {
    pub(super) session: Arc<Session>,
    pub(super) key: Key,
    pub(super) attempt: u64,
    pub(super) ask: Ask,
    pub(super) armed: bool,
}

impl Cancel {
    /// The ask this guards (`wait`: the mandatory lock, else the soft one).
    pub(super) fn request(&self, wait: bool) -> Request {
        Request::Acquire {
            session: self.session.id,
            lock: self.key.0.clone(),
            owner: self.key.1.clone(),
            wait,
            attempt: self.attempt,
            share: self.ask.share,
            value: self.ask.value.clone(),
        }
    }

    pub(super) async fn now(mut self) {
        self.armed = false;
        self.session.stop_waiting(&self.key, self.attempt);
        let deadline = Instant::now() + self.session.shared.config.request_timeout;
        let _ = self.session.give_up(&self.key, self.attempt, deadline).await;
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.session.stop_waiting(&self.key, self.attempt);
        let (session, key, attempt) = (self.session.clone(), self.key.clone(), self.attempt);
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let deadline = Instant::now() + session.shared.config.request_timeout;
                let _ = session.give_up(&key, attempt, deadline).await;
            });
        }
    }
}

pub(super) struct ServiceRelease {
    pub(super) session: Arc<Session>,
    pub(super) key: Key,
    pub(super) attempt: u64,
}

#[async_trait]
impl Release for ServiceRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        if let Some(tx) = lock(&self.session.held).remove(&self.key) {
            tx.send_replace(LeaseState::Released);
        }
        if self.session.lost_reason().is_some() {
            return Ok(());
        }
        let config = &self.session.shared.config;
        let deadline = Instant::now() + config.request_timeout.max(config.ttl);
        self.session.give_up(&self.key, self.attempt, deadline).await
    }
}

impl ServiceLocker {
    pub(super) fn guard(
        &self,
        session: Arc<Session>,
        lock_id: &str,
        token: u64,
        attempt: u64,
    ) -> LockGuard {
        let key = (lock_id.to_string(), self.owner.clone());
        let (tx, rx) = watch::channel(LeaseState::Held);
        lock(&session.held).insert(key.clone(), tx);
        if let Some(reason) = session.lost_reason() {
            if let Some(tx) = lock(&session.held).remove(&key) {
                tx.send_replace(LeaseState::Lost(LeaseLost { reason }));
            }
        }
        let deadline = session.deadline.clone();
        let release = ServiceRelease { session, key, attempt };
        LockGuard::new(lock_id, &self.owner, token, rx, Box::new(release)).with_deadline(deadline)
    }

    pub(super) fn with_lock(e: LockError, lock_id: &str) -> LockError {
        match e {
            LockError::LeaseLost { reason, .. } => {
                LockError::LeaseLost { lock_id: lock_id.to_string(), reason }
            }
            other => other,
        }
    }

    /// Wait for `lock_id` as `share` says (the mutex: alone), or until `timeout` passes.
    pub(super) async fn acquire(
        &self,
        lock_id: &str,
        share: Share,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, LockError> {
        self.ask(lock_id, share.into(), timeout).await.map(|g| g.guard)
    }

    /// Wait until `ask` of `lock_id` is granted, or until `timeout` passes.
    pub(super) async fn ask(
        &self,
        lock_id: &str,
        ask: Ask,
        timeout: Option<Duration>,
    ) -> Result<Granted, LockError> {
        let share = ask.share;
        let start = Instant::now();
        let session = self.client.live_session().await?;
        let key = (lock_id.to_string(), self.owner.clone());
        let deadline = timeout.map(|t| start + t);
        let by = Instant::now() + self.client.shared.config.request_timeout;
        let settled = session.settle(Some(&key), deadline.map_or(by, |d| d.min(by)));
        if let Err(e) = settled.await {
            return Err(match deadline {
                Some(d) if Instant::now() >= d => {
                    LockError::Timeout { lock_id: lock_id.to_string(), waited: start.elapsed() }
                }
                _ => Self::with_lock(e, lock_id),
            });
        }
        let (tx, rx) = oneshot::channel();
        let attempt = session.next_ask();
        lock(&session.waiting).insert(key.clone(), (attempt, tx));
        let cancel = Cancel { session: session.clone(), key, attempt, ask, armed: true };
        let request = cancel.request(true);
        let timed_out = |cancel: Cancel| async move {
            cancel.now().await;
            LockError::Timeout { lock_id: lock_id.to_string(), waited: start.elapsed() }
        };
        let reply = match deadline {
            Some(d) => match tokio::time::timeout_at(d, session.call(request)).await {
                Ok(r) => r,
                Err(_) => return Err(timed_out(cancel).await),
            },
            None => session.call(request).await,
        };
        // The answer (granted or queued) says the ask is in the lock's queue: no ask made
        // after this instant can be served before it.
        let queued_at = Instant::now();
        let token = match reply.map_err(|e| Self::with_lock(e, lock_id))? {
            Reply::Granted { token } => token,
            Reply::Queued => {
                let granted = match deadline {
                    Some(d) => match tokio::time::timeout_at(d, rx).await {
                        Ok(r) => r,
                        Err(_) => return Err(timed_out(cancel).await),
                    },
                    None => rx.await,
                };
                granted.map_err(|_| LockError::LeaseLost {
                    lock_id: lock_id.to_string(),
                    reason: session.lost_reason().unwrap_or_else(|| "the session ended".into()),
                })?
            }
            other => return Err(refused(lock_id, share, other)),
        };
        let mut cancel = cancel;
        cancel.armed = false;
        session.stop_waiting(&cancel.key, attempt);
        let guard = self.guard(session.clone(), lock_id, token, attempt).with_queued_at(queued_at);
        Ok(Granted { guard, session, attempt })
    }
}

/// The error for an ask of `lock_id` as `share` answered `reply`: a [`Reply::Mismatch`] is
/// the caller's mistake ([`UsageError`]), anything else [`unexpected`].
pub(super) fn refused(lock_id: &str, share: Share, reply: Reply) -> LockError {
    let Reply::Mismatch { share: used } = reply else { return unexpected(lock_id, reply) };
    let kind = |s: Share| if s.limit().is_some() { "a semaphore" } else { "a lock" };
    let usage = match (share.limit(), used.limit()) {
        (Some(asked), Some(stored)) => {
            UsageError::LimitMismatch { semaphore: lock_id.to_string(), asked, stored }
        }
        _ => UsageError::KindMismatch {
            id: lock_id.to_string(),
            asked: kind(share),
            used_as: kind(used),
        },
    };
    usage.into()
}

pub(super) fn unexpected(lock_id: &str, reply: Reply) -> LockError {
    match reply {
        Reply::Error { kind: ErrorKind::BadRequest, message } => LockError::InvalidId {
            what: "lock id",
            id: lock_id.chars().take(64).collect(),
            reason: message,
        },
        Reply::Error { kind, message } => backend_of(
            refusal_kind(kind),
            format!("lock {lock_id:?}: the service refused ({kind:?}): {message}"),
        ),
        other => backend_of(
            BackendErrorKind::Protocol,
            format!("unexpected answer for lock {lock_id:?}: {other:?}"),
        ),
    }
}

#[async_trait]
impl Locker for ServiceLocker {
    fn algorithm(&self) -> &str {
        ALGORITHM
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        self.acquire(lock_id, Share::Exclusive, timeout).await
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        self.try_acquire(lock_id, Share::Exclusive).await
    }
}

impl ServiceLocker {
    /// Ask for `lock_id` as `share` says, and return at once: `None` when it is not granted.
    pub(super) async fn try_acquire(
        &self,
        lock_id: &str,
        share: Share,
    ) -> Result<Option<LockGuard>, LockError> {
        let session = self.client.live_session().await?;
        let key = (lock_id.to_string(), self.owner.clone());
        let by = Instant::now() + self.client.shared.config.request_timeout;
        session.settle(Some(&key), by).await.map_err(|e| Self::with_lock(e, lock_id))?;
        let attempt = session.next_ask();
        // Dropped before the answer (or failed), the ask may still have been granted: give it
        // back, as an abandoned `lock` does.
        let ask = Ask::from(share);
        let mut cancel = Cancel { session: session.clone(), key, attempt, ask, armed: true };
        let reply =
            session.call(cancel.request(false)).await.map_err(|e| Self::with_lock(e, lock_id))?;
        cancel.armed = false;
        match reply {
            Reply::Granted { token } => Ok(Some(
                self.guard(session, lock_id, token, attempt).with_queued_at(Instant::now()),
            )),
            Reply::Busy => Ok(None),
            other => Err(refused(lock_id, share, other)),
        }
    }
}
