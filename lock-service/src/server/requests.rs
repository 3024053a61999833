//! What a node does with a client's request: the checks (ids, identity, the connection's
//! rights on a node without users, the session's key, limits), the leadership check a
//! keep-alive or a resume needs, and the command it commits.
//!
//! **Limits hold for requests in flight.** The limits on sessions per identity (and on all
//! the sessions of a node without users) and on asks per session are carried in the command
//! ([`Command::Open`]'s `max_sessions`, [`Command::Acquire`]'s `max_asks`) and checked again
//! when the command is applied, in log order: there every command committed before it has
//! been counted, whichever leader proposed it, so no burst of pipelined requests and no
//! change of leader lets a count pass its limit, and a refused command changes nothing. The
//! leader also checks the applied state before proposing, so that a client at its limit is
//! refused without a commit. The limit per connection of a node without users is the node's
//! own and is reserved before proposing ([`super::rights`]).

use super::gate::ConnId;
use super::hub::Outbox;
use super::{lock, Node, MAX_TTL, MIN_TTL};
use crate::auth::{key_matches, new_session_key, token_hash, Identity, Role};
use crate::proto::{ErrorKind, Reply, Request, SessionId, Share, MAX_LOCKS_PER_REPLY};
use crate::raft::{NodeId, NodeInfo};
use crate::state::{Command, Outcome};
use std::time::Duration;
use tokio::time::Instant;

impl Node {
    /// The answer to a request this node cannot serve because it does not lead.
    pub(super) fn not_leader(&self, hint: Option<&NodeInfo>) -> Reply {
        let leader = hint.map(|n| n.client.clone()).or_else(|| self.status().leader_addr);
        Reply::NotLeader { leader }
    }

    /// The answer to a request Raft refused: where the leader is, or that it cannot serve now.
    pub(super) fn refusal<E>(&self, e: openraft::error::RaftError<NodeId, E>) -> Reply
    where
        E: std::error::Error
            + openraft::TryAsRef<openraft::error::ForwardToLeader<NodeId, NodeInfo>>,
    {
        match e.forward_to_leader() {
            Some(f) => self.not_leader(f.leader_node.as_ref()),
            None => unavailable(e),
        }
    }

    /// Commit a command of client connection `conn` in its turn in the commit window
    /// ([`super::gate`]) and return what applying it did.
    pub(super) async fn propose(&self, conn: ConnId, command: Command) -> Result<Outcome, Reply> {
        let _place = self.gate.enter(conn).await;
        self.write(command).await
    }

    /// Commit `command`, in the next entry with whatever else is waiting ([`super::batch`]),
    /// and return what applying it did.
    pub(super) async fn write(&self, command: Command) -> Result<Outcome, Reply> {
        self.batcher.write(command).await.map_err(|e| self.refusal(e))
    }

    /// Confirm with a quorum that this node leads, by a check that started after this call
    /// did: keep-alives and resumes that arrive together share one check (one heartbeat
    /// round), so 64 sessions do not cost 64 rounds.
    pub(super) async fn confirm_lead(&self) -> Result<(), Reply> {
        let arrived = Instant::now();
        let _turn = self.confirming.lock().await;
        if lock(&self.confirmed).is_some_and(|at| at >= arrived) {
            return Ok(());
        }
        let started = Instant::now();
        match self.raft.ensure_linearizable().await {
            Ok(_) => {
                *lock(&self.confirmed) = Some(started);
                Ok(())
            }
            Err(e) => Err(self.refusal(e)),
        }
    }

    /// Note that `session` was heard from now (on the leader).
    pub(super) fn touch(&self, session: SessionId) {
        let mut lead = lock(&self.lead);
        if lead.term.is_some() {
            lead.seen.insert(session, Instant::now());
        }
    }

    /// Whether `who` may act for `session`, read from the applied state (a session's identity
    /// never changes): `Err` with the answer when it is gone or another identity's.
    pub(super) fn check_owner(&self, session: SessionId, who: &Identity) -> Result<(), Reply> {
        match self.sm.read(|a| a.table.identity_of(session).map(|i| i.map(str::to_string))) {
            None => Err(session_gone(session)),
            Some(Some(owner)) if who.name.as_deref() != Some(owner.as_str()) => Err(forbidden(
                format!("session {session} belongs to another identity than {}", who.label()),
            )),
            Some(_) => Ok(()),
        }
    }

    /// [`Node::check_owner`] before a commit: a session this node has not applied yet (a new
    /// leader catching up) is left to the state machine, which checks the identity again.
    /// So a refused request commits nothing, and one that slips past is refused in the log.
    pub(super) fn check_owner_known(
        &self,
        session: SessionId,
        who: &Identity,
    ) -> Result<(), Reply> {
        match self.check_owner(session, who) {
            Err(Reply::Error { kind: ErrorKind::SessionGone, .. }) => Ok(()),
            other => other,
        }
    }

    /// On a node without users, whether connection `conn` may act for `session`: only one
    /// that opened it or resumed it with its key may ([`super::rights`]). Else `Err` with the
    /// answer: `NotLeader` from a node that does not lead (the client is looking for the
    /// leader), `SessionGone` for a session that is not live, `Forbidden` otherwise. On a node
    /// with users the identity decides ([`Node::check_owner`]).
    pub(super) fn check_rights(&self, session: SessionId, conn: ConnId) -> Result<(), Reply> {
        if self.users.is_some() || self.rights.allows(conn, session) {
            return Ok(());
        }
        if !self.leads() {
            return Err(self.not_leader(None));
        }
        if !self.sm.read(|a| a.table.has_session(session)) {
            return Err(session_gone(session));
        }
        Err(forbidden(format!(
            "session {session} was neither opened nor resumed on this connection: on a node \
             without users only such a connection may act for it (resume it with its key)"
        )))
    }

    /// Whether `key` is `session`'s key: `Err` with the answer when it is not (or the session
    /// is not live). A session opened before sessions had keys resumes without one.
    pub(super) fn check_key(&self, session: SessionId, key: Option<&str>) -> Result<(), Reply> {
        let hash = self.sm.read(|a| a.table.key_of(session).map(|k| k.map(str::to_string)));
        match hash {
            None => Err(session_gone(session)),
            Some(None) => Ok(()),
            Some(Some(hash)) if key.is_some_and(|k| key_matches(&hash, k)) => Ok(()),
            Some(Some(_)) => Err(forbidden(format!(
                "the key given for session {session} is {}: a session is resumed only with \
                 the key its Open was answered with",
                if key.is_some() { "wrong" } else { "missing" }
            ))),
        }
    }

    /// Serve `request` of client connection `conn` (whose frames go to `out`), sent by `who`.
    pub(super) async fn handle(
        &self,
        request: Request,
        conn: ConnId,
        out: &Outbox,
        who: &Identity,
    ) -> Reply {
        let by = who.name.clone();
        match request {
            Request::Hello { .. } => {
                bad_request("this connection has already said who it is".into())
            }
            Request::Status => Reply::Status(Box::new(self.status())),
            Request::Open { ttl_ms } => self.open(ttl_ms, conn, out, who).await,
            Request::Resume { session, key } => {
                // Shared like a keep-alive's: after a failover every session resumes at once,
                // and one leadership check each (each a round of new peer connections)
                // overran the heartbeat interval, failed, and was retried by all of them.
                if let Err(r) = self.confirm_lead().await {
                    return r;
                }
                if let Err(r) =
                    self.check_owner(session, who).and(self.check_key(session, key.as_deref()))
                {
                    return r;
                }
                if self.users.is_none() {
                    self.rights.grant(conn, session);
                }
                // Attach before reading what it holds: a grant applied in between is then
                // pushed as well as listed, never lost.
                self.hub.attach(session, conn, out);
                if !self.sm.read(|a| a.table.has_session(session)) {
                    return session_gone(session);
                }
                self.touch(session);
                Reply::Resumed { held: self.sm.read(|a| a.table.held_by(session)) }
            }
            Request::KeepAlive { session } => {
                if let Err(r) = self.check_rights(session, conn) {
                    return r;
                }
                if let Err(r) = self.confirm_lead().await {
                    return r;
                }
                if let Err(r) = self.check_owner(session, who) {
                    return r;
                }
                self.touch(session);
                Reply::Alive
            }
            Request::Acquire { session, lock, owner, wait, attempt, share, value } => {
                if let Err(r) = check_ids(&lock, &owner) {
                    return r;
                }
                if let Err(r) = check_share(share).and(check_candidacy(share, value.as_deref())) {
                    return r;
                }
                if let Err(r) = self.check_rights(session, conn) {
                    return r;
                }
                if let Err(r) = self.check_owner_known(session, who) {
                    return r;
                }
                if let Err(r) = self.check_asks(session, &lock, &owner) {
                    return r;
                }
                let max_asks = Some(self.limits.asks_per_session as u64);
                let ask = Command::Acquire {
                    session,
                    lock,
                    owner,
                    wait,
                    attempt,
                    by,
                    share,
                    value,
                    max_asks,
                };
                self.commit(conn, ask).await
            }
            Request::Proclaim { session, lock, owner, attempt, value } => {
                if let Err(r) = check_ids(&lock, &owner) {
                    return r;
                }
                if let Err(r) = check_candidacy(Share::Exclusive, Some(&value)) {
                    return r;
                }
                if let Err(r) = self.check_rights(session, conn) {
                    return r;
                }
                if let Err(r) = self.check_owner_known(session, who) {
                    return r;
                }
                let proclaim = Command::Proclaim { session, lock, owner, attempt, value, by };
                self.commit(conn, proclaim).await
            }
            Request::Observe { session, lock } => {
                if let Err(r) = check_ids(&lock, "observer") {
                    return r;
                }
                if let Err(r) = self.check_rights(session, conn) {
                    return r;
                }
                // The leader's applied state is the newest: a deposed leader must not answer.
                if let Err(r) = self.confirm_lead().await {
                    return r;
                }
                if let Err(r) = self.check_owner(session, who) {
                    return r;
                }
                // Attach and register before reading who leads: a change applied in between
                // is then pushed as well as answered, never lost.
                self.hub.attach(session, conn, out);
                self.hub.observe(session, &lock);
                if !self.sm.read(|a| a.table.has_session(session)) {
                    return session_gone(session);
                }
                self.touch(session);
                Reply::Leader { leader: self.sm.read(|a| a.table.leader_of(&lock)) }
            }
            Request::Release { session, lock, owner, attempt } => {
                if let Err(r) = check_ids(&lock, &owner) {
                    return r;
                }
                if let Err(r) = self.check_rights(session, conn) {
                    return r;
                }
                if let Err(r) = self.check_owner_known(session, who) {
                    return r;
                }
                self.commit(conn, Command::Release { session, lock, owner, attempt, by }).await
            }
            Request::Close { session } => {
                match self.check_rights(session, conn).and(self.check_owner_known(session, who)) {
                    // Nothing to close.
                    Err(Reply::Error { kind: ErrorKind::SessionGone, .. }) => return Reply::Closed,
                    Err(r) => return r,
                    Ok(()) => {}
                }
                match self.commit(conn, Command::Close { session, by }).await {
                    Reply::Error { kind: ErrorKind::SessionGone, .. } => Reply::Closed,
                    r => r,
                }
            }
            Request::ForceRelease { lock } => self.force_release(lock, conn, who).await,
            Request::Locks { prefix, after, limit } => {
                self.list_locks(&prefix, after.as_deref(), limit)
            }
            Request::AddMember { id, peer, client } => self.add_member(id, peer, client, who).await,
            Request::RemoveMember { id } => self.remove_member(id, who).await,
        }
    }

    /// Refuse a new ask of a session that has as many as it may.
    pub(super) fn check_asks(
        &self,
        session: SessionId,
        lock: &str,
        owner: &str,
    ) -> Result<(), Reply> {
        let limit = self.limits.asks_per_session;
        let (asks, again) =
            self.sm.read(|a| (a.table.asks_of(session), a.table.is_asking(session, lock, owner)));
        if asks >= limit && !again {
            return Err(limit_reached(format!(
                "session {session} already holds or waits for {asks} locks, the most a \
                 session may (--max-asks-per-session {limit})"
            )));
        }
        Ok(())
    }

    /// The leader's listing of locks (see [`Request::Locks`]), each holder with how long ago
    /// this node applied its grant ([`super::GrantTimes`]).
    pub(super) fn list_locks(&self, prefix: &str, after: Option<&str>, limit: u32) -> Reply {
        if !self.leads() {
            return self.not_leader(None);
        }
        let limit = limit.clamp(1, MAX_LOCKS_PER_REPLY) as usize;
        let (mut locks, more) = self.sm.read(|a| a.table.list(prefix, after, limit));
        let times = self.grant_times();
        for lock in &mut locks {
            for h in &mut lock.holders {
                let since = times.since(&lock.lock, h.token);
                h.held_ms = since.map(|at| at.elapsed().as_millis() as u64);
            }
        }
        Reply::Locks { locks, more }
    }

    pub(super) async fn force_release(&self, lock: String, conn: ConnId, who: &Identity) -> Reply {
        if who.role != Role::Admin {
            return forbidden(format!(
                "{} may not force-release locks: only an admin identity may",
                who.label()
            ));
        }
        if let Err(r) = check_ids(&lock, "admin") {
            return r;
        }
        let by = who.label().to_string();
        let command = Command::ForceRelease { lock: lock.clone(), by: by.clone() };
        match self.propose(conn, command).await {
            Ok(Outcome::Released) => {
                tracing::warn!("lock {lock:?} force-released by {by}");
                Reply::Released
            }
            Ok(Outcome::NotHeld) => Reply::NotHeld,
            Ok(other) => unexpected(other),
            Err(r) => r,
        }
    }

    pub(super) async fn open(
        &self,
        ttl_ms: u64,
        conn: ConnId,
        out: &Outbox,
        who: &Identity,
    ) -> Reply {
        let ttl = Duration::from_millis(ttl_ms);
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return bad_request(format!(
                "session TTL {ttl:?} is out of range: {MIN_TTL:?} to {MAX_TTL:?}"
            ));
        }
        let identity = who.name.clone();
        let per = self.limits.sessions_per_identity;
        // With users, the identity's sessions; without, all the sessions together (the
        // cap), and a place of the connection's own, reserved until the commit ends.
        let cap = self.limits.anonymous_sessions;
        let max = if identity.is_some() { per } else { cap };
        let name = identity.clone();
        let too_many = move |open: usize| match &name {
            Some(name) => format!(
                "{name} already has {open} sessions open, the most one identity may \
                 (--max-sessions-per-identity {per})"
            ),
            None => format!(
                "the clients of this node (it has no --users) already have {open} sessions \
                 open, the most they may together (--max-anonymous-sessions {cap})"
            ),
        };
        let open = self.sm.read(|a| a.table.sessions_of(identity.as_deref()));
        if open >= max {
            return limit_reached(too_many(open));
        }
        let opening = match identity {
            Some(_) => None,
            None => {
                let live = |s| self.sm.read(|a| a.table.has_session(s));
                match self.rights.reserve(conn, per, live) {
                    Ok(place) => Some(place),
                    Err(taken) => {
                        return limit_reached(format!(
                            "this connection already has {taken} sessions open or opening, the \
                             most one connection may on a node without users \
                             (--max-sessions-per-identity {per})"
                        ))
                    }
                }
            }
        };
        // The key is drawn here, outside the state machine, which reads no randomness; the
        // log keeps only its hash.
        let key = new_session_key();
        let command = Command::Open {
            ttl_ms,
            identity,
            key: Some(token_hash(&key)),
            max_sessions: Some(max as u64),
        };
        match self.propose(conn, command).await {
            Ok(Outcome::Opened(session)) => {
                if let Some(place) = opening {
                    place.opened(session);
                }
                self.hub.attach(session, conn, out);
                self.touch(session);
                Reply::Opened { session, key: Some(key) }
            }
            Ok(Outcome::LimitReached) => limit_reached(too_many(max)),
            Ok(other) => unexpected(other),
            Err(r) => r,
        }
    }

    pub(super) async fn commit(&self, conn: ConnId, command: Command) -> Reply {
        let session = match &command {
            Command::Acquire { session, .. }
            | Command::Release { session, .. }
            | Command::Proclaim { session, .. }
            | Command::Close { session, .. }
            | Command::Expire { session } => *session,
            Command::Open { .. } | Command::ForceRelease { .. } | Command::Batch(_) => 0,
        };
        let outcome = self.propose(conn, command).await;
        if matches!(outcome, Ok(ref o) if matches!(o, Outcome::Granted(_) | Outcome::Queued
            | Outcome::Busy | Outcome::Released | Outcome::Cancelled | Outcome::NotHeld
            | Outcome::Superseded | Outcome::Mismatch(_) | Outcome::Proclaimed))
        {
            // A commit by this leader proves, like a keep-alive's quorum check, that it led
            // after the request arrived: a busy session needs no keep-alives.
            self.touch(session);
        }
        match outcome {
            Ok(Outcome::Granted(token)) => Reply::Granted { token },
            Ok(Outcome::Queued) => Reply::Queued,
            Ok(Outcome::Mismatch(share)) => Reply::Mismatch { share },
            Ok(Outcome::Proclaimed) => Reply::Proclaimed,
            Ok(Outcome::Busy) => Reply::Busy,
            Ok(Outcome::Released) => Reply::Released,
            Ok(Outcome::Cancelled) => Reply::Cancelled,
            Ok(Outcome::NotHeld) => Reply::NotHeld,
            Ok(Outcome::Ended) => Reply::Closed,
            Ok(Outcome::SessionGone) => session_gone(session),
            Ok(Outcome::Forbidden) => {
                forbidden(format!("session {session} belongs to another identity"))
            }
            Ok(Outcome::LimitReached) => limit_reached(format!(
                "session {session} already holds or waits for {} locks, the most a session \
                 may (--max-asks-per-session {})",
                self.limits.asks_per_session, self.limits.asks_per_session
            )),
            Ok(Outcome::Superseded) => Reply::Error {
                kind: ErrorKind::Superseded,
                message: format!(
                    "a newer ask of the same owner in session {session} holds or waits for \
                     the lock: this older one changed nothing"
                ),
            },
            Ok(other) => unexpected(other),
            Err(r) => r,
        }
    }
}

/// A permit ask must ask for 1 to `limit` permits of a semaphore of at least one.
fn check_share(share: Share) -> Result<(), Reply> {
    match share {
        Share::Permits { count, limit } if count == 0 || count > limit => Err(bad_request(
            format!("an ask must be for 1 to {limit} permits of its semaphore, not {count}"),
        )),
        _ => Ok(()),
    }
}

/// A candidacy's value: at most what every backend accepts, and only on an exclusive ask.
fn check_candidacy(share: Share, value: Option<&[u8]>) -> Result<(), Reply> {
    let Some(value) = value else { return Ok(()) };
    let max = lock_core::election::MAX_VALUE_LEN;
    if value.len() > max {
        return Err(bad_request(format!(
            "an election value of {} bytes, at most {max} are allowed",
            value.len()
        )));
    }
    if !share.is_exclusive() {
        return Err(bad_request("a candidacy is an exclusive ask".into()));
    }
    Ok(())
}

pub(super) fn bad_request(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::BadRequest, message }
}

pub(super) fn forbidden(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::Forbidden, message }
}

pub(super) fn limit_reached(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::LimitReached, message }
}

pub(super) fn unauthenticated(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::Unauthenticated, message }
}

pub(super) fn session_gone(session: SessionId) -> Reply {
    Reply::Error {
        kind: ErrorKind::SessionGone,
        message: format!("session {session} expired or was closed"),
    }
}

pub(super) fn unavailable(e: impl std::fmt::Display) -> Reply {
    Reply::Error { kind: ErrorKind::Unavailable, message: e.to_string() }
}

pub(super) fn unexpected(o: Outcome) -> Reply {
    unavailable(format!("unexpected outcome {o:?}"))
}

pub(super) fn check_ids(lock: &str, owner: &str) -> Result<(), Reply> {
    lock_core::lock::validate_id("lock id", lock)
        .and_then(|_| lock_core::lock::validate_id("owner id", owner))
        .map_err(|e| bad_request(e.to_string()))
}
