//! The session: its connection to the leader, its holders and waiters, its resumption after
//! a failover, and the keep-alive that renews it or declares it lost.

use super::connection::Conn;
use super::leader::find_leader;
use super::observations::Observations;
use super::{backend_of, lock, refusal_kind};
use super::{PushSink, Shared};
use crate::proto::{ErrorKind, Held, Push, Reply, Request, SessionId};
use lock_core::lock::{LeaseDeadline, LeaseLost, LeaseState, LockError};
use lock_core::{BackendError, BackendErrorKind};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

pub(super) type Key = (String, String);

/// Whether an answer to `request` shows the leader kept the session alive: a keep-alive (a
/// quorum check) or a command it committed.
pub(super) fn renews(request: &Request) -> bool {
    matches!(request, Request::KeepAlive { .. } | Request::Acquire { .. } | Request::Release { .. })
}

/// A session: its connection, its holders and its waiters.
pub(super) struct Session {
    pub(super) id: SessionId,
    /// The key the node answered the `Open` with: a resume presents it.
    pub(super) key: Option<String>,
    pub(super) shared: Arc<Shared>,
    pub(super) pushes: PushSink,
    pub(super) conn: tokio::sync::Mutex<Option<Conn>>,
    pub(super) lost: watch::Sender<Option<String>>,
    /// The send time of the last request the leader answered (the session stands until a
    /// TTL after it; see the module docs).
    pub(super) renewed: Mutex<Instant>,
    /// `renewed` plus the TTL, for the guards to read.
    pub(super) deadline: LeaseDeadline,
    pub(super) held: Mutex<HashMap<Key, watch::Sender<LeaseState>>>,
    /// Each waiting ask, by lock and owner: its attempt and where its token goes.
    pub(super) waiting: Mutex<HashMap<Key, (u64, oneshot::Sender<u64>)>>,
    /// The last attempt number given to an ask.
    pub(super) asks: AtomicU64,
    /// The asks whose release has an unknown outcome (see [`Session::give_up`]), by lock and
    /// owner and attempt.
    pub(super) unsettled: Mutex<BTreeSet<(Key, u64)>>,
    /// Told when the node ends the session's connection: the keep-alive task then resumes
    /// the session at once if it holds or waits for a lock (see [`keep_alive`]).
    pub(super) dropped: Arc<tokio::sync::Notify>,
    /// The elections it follows.
    pub(super) observations: Observations,
    /// Counts the times the session resumed on a new connection: a node pushes only what it
    /// was asked to on the connection it was asked on.
    pub(super) resumed: watch::Sender<u64>,
}

impl Session {
    /// Open a session with the leader, and start its keep-alive.
    pub(super) async fn open(shared: Arc<Shared>) -> Result<Arc<Session>, LockError> {
        let pushes = PushSink::default();
        let sent = Instant::now();
        let deadline = sent + shared.config.request_timeout;
        let ttl_ms = shared.config.ttl.as_millis() as u64;
        let (conn, reply) =
            find_leader(&shared, &Request::Open { ttl_ms }, None, &pushes, deadline).await?;
        let (id, key) = match reply {
            Reply::Opened { session, key } => (session, key),
            Reply::Error { kind: ErrorKind::BadRequest, message } => {
                return Err(LockError::Config(message))
            }
            Reply::Error { kind, message } => {
                return Err(backend_of(
                    refusal_kind(kind),
                    format!("the service refused a session ({kind:?}): {message}"),
                ))
            }
            other => {
                return Err(backend_of(
                    BackendErrorKind::Protocol,
                    format!("unexpected answer to open: {other:?}"),
                ))
            }
        };
        let ttl = shared.config.ttl;
        let session = Arc::new(Session {
            id,
            key,
            shared,
            pushes,
            conn: tokio::sync::Mutex::new(Some(conn)),
            lost: watch::channel(None).0,
            renewed: Mutex::new(sent),
            deadline: LeaseDeadline::new(
                Some(sent + ttl),
                format!("no request answered within the session TTL ({ttl:?})"),
            ),
            held: Mutex::default(),
            waiting: Mutex::default(),
            asks: AtomicU64::new(0),
            unsettled: Mutex::default(),
            dropped: Arc::default(),
            observations: Observations::default(),
            resumed: watch::channel(0).0,
        });
        let _ = session.pushes.set(Arc::downgrade(&session));
        tokio::spawn(keep_alive(Arc::downgrade(&session)));
        Ok(session)
    }

    pub(super) fn renewed_at(&self) -> Instant {
        *lock(&self.renewed)
    }

    /// A request sent at `sent` was answered by the leader.
    pub(super) fn renew(&self, sent: Instant) {
        let mut at = lock(&self.renewed);
        if sent > *at {
            *at = sent;
            self.deadline.set(Some(sent + self.shared.config.ttl));
        }
    }

    pub(super) fn lost_reason(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    pub(super) fn on_push(&self, push: Push) {
        match push {
            Push::Granted { lock, owner, token, attempt } => {
                self.granted(&[(lock, owner, token, attempt)])
            }
            Push::Revoked { lock, owner, token, by } => self.revoked(lock, owner, token, by),
            Push::Leader { lock, leader } => self.observations.pushed(&lock, leader),
            Push::Members { members } => {
                if self.shared.config.follow_leader_hints {
                    self.shared.learn(members.into_iter().map(|m| m.client).collect());
                }
            }
            Push::SessionEnded { reason } => {
                self.lose(format!("the service ended the session: {reason}"))
            }
        }
    }

    /// An administrator took a lock this session held: its guard is told.
    pub(super) fn revoked(&self, lock_id: String, owner: String, token: u64, by: String) {
        if let Some(tx) = lock(&self.held).remove(&(lock_id.clone(), owner)) {
            let reason = format!("lock {lock_id:?} (token {token}) was force-released by {by}");
            tx.send_replace(LeaseState::Lost(LeaseLost { reason }));
        }
    }

    /// Hand grants to the asks they answer. A grant for an ask nobody waits for any more was
    /// given up on: that ask's release gives it back, or a newer ask of the same owner gives
    /// it up on the server before being served itself. So a grant goes only to the very ask
    /// it names, never to a later one of the same owner.
    pub(super) fn granted(&self, held: &[Held]) {
        let mut waiting = lock(&self.waiting);
        for (lock, owner, token, attempt) in held {
            let key = (lock.clone(), owner.clone());
            if waiting.get(&key).is_some_and(|(waits, _)| waits == attempt) {
                if let Some((_, tx)) = waiting.remove(&key) {
                    let _ = tx.send(*token);
                }
            }
        }
    }

    /// Whether the session holds or waits for any lock.
    pub(super) fn has_locks(&self) -> bool {
        !lock(&self.held).is_empty() || !lock(&self.waiting).is_empty()
    }

    /// Whether the session's connection is open.
    pub(super) async fn connected(&self) -> bool {
        self.conn.lock().await.as_ref().is_some_and(Conn::is_open)
    }

    /// A new ask's attempt number.
    pub(super) fn next_ask(&self) -> u64 {
        self.asks.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Forget `attempt`'s waiter, if it is still the one waiting.
    pub(super) fn stop_waiting(&self, key: &Key, attempt: u64) {
        let mut waiting = lock(&self.waiting);
        if waiting.get(key).is_some_and(|(waits, _)| *waits == attempt) {
            waiting.remove(key);
        }
    }

    /// The session is over: tell every holder and waiter, once.
    pub(super) fn lose(&self, reason: String) {
        let first = self.lost.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason.clone());
                true
            } else {
                false
            }
        });
        if !first {
            return;
        }
        tracing::debug!("session {} lost: {reason}", self.id);
        for (_, tx) in lock(&self.held).drain() {
            tx.send_replace(LeaseState::Lost(LeaseLost { reason: reason.clone() }));
        }
        lock(&self.waiting).clear();
        self.observations.end(&reason);
        if let Ok(mut c) = self.conn.try_lock() {
            if let Some(conn) = c.take() {
                conn.close();
            }
        }
    }

    /// Send `body` to the leader, reconnecting (and resuming) as needed, until the client's
    /// request timeout.
    pub(super) async fn call(&self, body: Request) -> Result<Reply, LockError> {
        let deadline = Instant::now() + self.shared.config.request_timeout;
        self.call_until(body, deadline).await
    }

    pub(super) async fn call_until(
        &self,
        body: Request,
        deadline: Instant,
    ) -> Result<Reply, LockError> {
        let mut hint = None;
        loop {
            if let Some(reason) = self.lost_reason() {
                return Err(LockError::LeaseLost { lock_id: String::new(), reason });
            }
            let conn = self.connection(hint.take(), deadline).await?;
            let sent = Instant::now();
            // A node that keeps the connection open and answers nothing (paused, stalled) is
            // given up on after TTL/3, not at the deadline: the session then resumes on the
            // leader the others elected while its lease still stands.
            let attempt = deadline.min(sent + self.shared.config.ttl / 3);
            let last = match conn.request(&self.shared, body.clone(), attempt).await {
                Ok(Reply::NotLeader { leader }) => {
                    let follow = self.shared.config.follow_leader_hints;
                    hint = leader.filter(|l| follow && self.shared.worth_following(l, &conn.addr));
                    self.drop_conn(&conn).await;
                    format!("{}: not the leader", conn.addr)
                }
                Ok(Reply::Error { kind: ErrorKind::Unavailable, message }) => {
                    self.drop_conn(&conn).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    format!("{}: {message}", conn.addr)
                }
                Ok(Reply::Error { kind: ErrorKind::SessionGone, message }) => {
                    self.lose(message.clone());
                    return Err(LockError::LeaseLost { lock_id: String::new(), reason: message });
                }
                Ok(reply) => {
                    if renews(&body) && !matches!(reply, Reply::Error { .. }) {
                        self.renew(sent);
                    }
                    return Ok(reply);
                }
                Err(e) => {
                    self.drop_conn(&conn).await;
                    self.shared.demote(&conn.addr);
                    e
                }
            };
            if Instant::now() >= deadline {
                return Err(backend_of(
                    BackendErrorKind::Timeout,
                    format!(
                        "request not answered within {:?}: {last}",
                        self.shared.config.request_timeout
                    ),
                ));
            }
        }
    }

    /// Give up the ask `attempt` of `key` (its grant or its queue place) and learn the
    /// outcome, sending the release again across reconnects and failovers until `deadline`.
    /// The outcome is known when the release is answered (released, left the queue, or not
    /// held: an earlier copy committed) or when the session is over: the server ended it, or
    /// no request was answered for a whole TTL, after which the client counts it lost (as
    /// the keep-alive does) and the server's expiry frees its locks. Otherwise the release
    /// stays *unsettled*: it is sent again after each answered keep-alive and before this
    /// key's next ask on the session ([`Session::settle`]), and the error says so.
    pub(super) async fn give_up(
        &self,
        key: &Key,
        attempt: u64,
        deadline: Instant,
    ) -> Result<(), LockError> {
        let request = Request::Release {
            session: self.id,
            lock: key.0.clone(),
            owner: key.1.clone(),
            attempt,
        };
        let unknown = match self.call_until(request, deadline).await {
            Ok(Reply::Released | Reply::Cancelled | Reply::NotHeld)
            | Err(LockError::LeaseLost { .. }) => None,
            Ok(Reply::Error { kind, message }) => {
                // Refused before anything was committed; sending it again is refused alike.
                lock(&self.unsettled).remove(&(key.clone(), attempt));
                return Err(backend_of(
                    refusal_kind(kind),
                    format!("the release of lock {:?} was refused ({kind:?}): {message}", key.0),
                ));
            }
            Ok(other) => Some(backend_of(
                BackendErrorKind::Protocol,
                format!("unexpected answer to the release of lock {:?}: {other:?}", key.0),
            )),
            Err(e) => Some(e),
        };
        let Some(e) = unknown else {
            lock(&self.unsettled).remove(&(key.clone(), attempt));
            return Ok(());
        };
        let ttl = self.shared.config.ttl;
        if Instant::now() >= self.renewed_at() + ttl {
            self.lose(format!(
                "no request answered within the session TTL ({ttl:?}): the service may \
                 have expired the session"
            ));
            lock(&self.unsettled).remove(&(key.clone(), attempt));
            return Ok(());
        }
        lock(&self.unsettled).insert((key.clone(), attempt));
        let kind = e.backend_kind().unwrap_or(BackendErrorKind::Unavailable);
        Err(LockError::backend(
            super::BACKEND,
            kind,
            BackendError::context(
                format!(
                    "the release of lock {:?} has an unknown outcome: it is sent again \
                     before this owner's next ask for the lock (the lock is freed when the \
                     session ends)",
                    key.0
                ),
                e,
            ),
        ))
    }

    /// Send the unsettled releases of `key` (every key: `None`) again, oldest ask first,
    /// each until the client's request timeout or `by`: `Ok` once none of them is left.
    pub(super) async fn settle(&self, key: Option<&Key>, by: Instant) -> Result<(), LockError> {
        let due: Vec<(Key, u64)> = lock(&self.unsettled)
            .iter()
            .filter(|(k, _)| key.is_none_or(|key| k == key))
            .cloned()
            .collect();
        for (k, attempt) in due {
            let deadline = by.min(Instant::now() + self.shared.config.request_timeout);
            self.give_up(&k, attempt, deadline).await?;
        }
        Ok(())
    }

    pub(super) async fn drop_conn(&self, conn: &Conn) {
        conn.close();
        let mut c = self.conn.lock().await;
        if c.as_ref().is_some_and(|c| Arc::ptr_eq(&c.closed, &conn.closed)) {
            *c = None;
        }
    }

    /// The open connection, or a new one to the leader with the session resumed on it.
    pub(super) async fn connection(
        &self,
        hint: Option<String>,
        deadline: Instant,
    ) -> Result<Conn, LockError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_open()) {
            return Ok(c.clone());
        }
        let resume = Request::Resume { session: self.id, key: self.key.clone() };
        let (conn, reply) =
            find_leader(&self.shared, &resume, hint, &self.pushes, deadline).await?;
        match reply {
            Reply::Resumed { held } => {
                self.granted(&held);
                *slot = Some(conn.clone());
                self.resumed.send_modify(|n| *n += 1);
                Ok(conn)
            }
            Reply::Error { kind: ErrorKind::SessionGone, message } => {
                conn.close();
                drop(slot);
                self.lose(message.clone());
                Err(LockError::LeaseLost { lock_id: String::new(), reason: message })
            }
            Reply::Error { kind, message } => {
                conn.close();
                Err(backend_of(
                    refusal_kind(kind),
                    format!(
                        "the service refused to resume session {} ({kind:?}): {message}",
                        self.id
                    ),
                ))
            }
            other => {
                conn.close();
                Err(backend_of(
                    BackendErrorKind::Protocol,
                    format!("unexpected answer to resume: {other:?}"),
                ))
            }
        }
    }
}

/// Renew `session` every TTL/3; declare it lost when a whole TTL passes from the send time
/// of the last answered keep-alive.
///
/// When the node ends the connection while the session holds or waits for a lock, renew at
/// once instead: the renewal finds the leader and resumes the session there, so a grant the
/// new leader pushes reaches its waiter now, not at the next keep-alive (up to TTL/3 later,
/// which after a leader's death was most of the handoff's delay). ZooKeeper's and etcd's
/// clients reconnect at once too. An idle session reconnects at its next request.
pub(super) async fn keep_alive(session: Weak<Session>) {
    let Some((ttl, dropped)) = session.upgrade().map(|s| (s.shared.config.ttl, s.dropped.clone()))
    else {
        return;
    };
    let mut next = None;
    loop {
        let Some(s) = session.upgrade() else {
            return;
        };
        // Every answered request renews the session (the leader counts a commit as it counts
        // a keep-alive): a keep-alive goes out only after TTL/3 without one.
        let due = next.take().unwrap_or_else(|| s.renewed_at() + ttl / 3);
        drop(s);
        let woken = tokio::select! {
            _ = tokio::time::sleep_until(due) => false,
            _ = dropped.notified() => true,
        };
        let Some(s) = session.upgrade() else {
            return;
        };
        if s.lost_reason().is_some() {
            return;
        }
        let limit = s.renewed_at() + ttl;
        if woken {
            if !s.has_locks() || s.connected().await {
                next = Some(due);
                continue;
            }
        } else if s.renewed_at() + ttl / 3 > Instant::now() {
            continue;
        }
        match s.call_until(Request::KeepAlive { session: s.id }, limit).await {
            Ok(Reply::Alive) => {
                // A release whose outcome was unknown has a leader to go to now: the lock
                // must not stay held until its owner asks for it again.
                // Bounded by when the next keep-alive is due.
                if let Err(e) = s.settle(None, s.renewed_at() + ttl / 3).await {
                    tracing::debug!("session {}: {e}", s.id);
                }
            }
            Err(LockError::LeaseLost { .. }) => return,
            other => {
                tracing::debug!("session {}: keep-alive {other:?}", s.id);
                next = Some(Instant::now() + Duration::from_millis(100));
            }
        }
        if Instant::now() >= s.renewed_at() + ttl {
            s.lose(format!(
                "no request answered within the session TTL ({ttl:?}): the service may \
                 have expired the session"
            ));
            return;
        }
    }
}
