//! Where each session's connection is, so that a grant committed for a waiter is pushed down
//! its connection in the same step that applied it.
//!
//! A connection's sessions are forgotten when it closes ([`Hub::detach`]): nothing of a
//! closed connection is kept (its writer, its socket) until its sessions end. So are the
//! elections those sessions observed ([`Hub::observe`]): a client observes again on the
//! connection it resumes on.

use super::gate::ConnId;
use super::lock;
use crate::proto::{encode, Push, ServerFrame, SessionId};
use crate::state::Event;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use tokio::sync::mpsc;

/// A connection's outgoing frames.
pub(super) type Outbox = mpsc::Sender<Vec<u8>>;

/// The most frames waiting to be written to one connection. A client that stops reading its
/// socket while the server has grants to push for it is cut off when this fills, rather than
/// letting the node buffer without bound.
pub(super) const OUTBOX: usize = 4096;

/// Where each session's connection is, to push its grants.
#[derive(Default)]
pub(super) struct Hub {
    conns: Mutex<Conns>,
}

/// The sessions' connections, and each connection's sessions.
#[derive(Default)]
struct Conns {
    by_session: HashMap<SessionId, (ConnId, Outbox)>,
    by_conn: HashMap<ConnId, HashSet<SessionId>>,
    /// The sessions observing each election, and the elections each session observes.
    observers: HashMap<String, HashSet<SessionId>>,
    observing: HashMap<SessionId, HashSet<String>>,
}

impl Conns {
    fn insert(&mut self, session: SessionId, conn: ConnId, out: &Outbox) {
        if let Some((old, _)) = self.by_session.insert(session, (conn, out.clone())) {
            self.forget(old, session);
        }
        self.by_conn.entry(conn).or_default().insert(session);
    }

    fn remove(&mut self, session: SessionId) -> Option<Outbox> {
        self.unobserve(session);
        let (conn, out) = self.by_session.remove(&session)?;
        self.forget(conn, session);
        Some(out)
    }

    /// `session` observes nothing any more.
    fn unobserve(&mut self, session: SessionId) {
        for election in self.observing.remove(&session).unwrap_or_default() {
            if let Some(sessions) = self.observers.get_mut(&election) {
                sessions.remove(&session);
                if sessions.is_empty() {
                    self.observers.remove(&election);
                }
            }
        }
    }

    /// `conn` no longer serves `session`.
    fn forget(&mut self, conn: ConnId, session: SessionId) {
        if let Some(sessions) = self.by_conn.get_mut(&conn) {
            sessions.remove(&session);
            if sessions.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
    }
}

impl Hub {
    /// `session`'s pushes go to connection `conn`, whose frames go to `out`, from now on.
    pub(super) fn attach(&self, session: SessionId, conn: ConnId, out: &Outbox) {
        lock(&self.conns).insert(session, conn, out);
    }

    /// Connection `conn` is closed: forget the sessions it served.
    pub(super) fn detach(&self, conn: ConnId) {
        let mut conns = lock(&self.conns);
        for session in conns.by_conn.remove(&conn).unwrap_or_default() {
            conns.by_session.remove(&session);
            conns.unobserve(session);
        }
    }

    /// Push the changes of `election` to `session` from now on (while it stays on its
    /// connection).
    pub(super) fn observe(&self, session: SessionId, election: &str) {
        let mut conns = lock(&self.conns);
        conns.observers.entry(election.to_string()).or_default().insert(session);
        conns.observing.entry(session).or_default().insert(election.to_string());
    }

    /// Whether connection `conn` serves a session.
    pub(super) fn serves(&self, conn: ConnId) -> bool {
        lock(&self.conns).by_conn.contains_key(&conn)
    }

    /// Push `push` to every connection that serves a session.
    pub(super) fn broadcast(&self, push: Push) {
        let frame = encode(&ServerFrame::Push(push));
        let conns = lock(&self.conns);
        let mut told = std::collections::HashSet::new();
        for (conn, out) in conns.by_session.values() {
            if told.insert(*conn) {
                let _ = out.try_send(frame.clone());
            }
        }
    }

    pub(super) fn deliver(&self, events: Vec<Event>) {
        let mut conns = lock(&self.conns);
        for event in events {
            match event {
                Event::Granted { session, lock, owner, token, attempt } => {
                    let push = Push::Granted { lock, owner, token, attempt };
                    push_to(&mut conns, session, push);
                }
                Event::Revoked { session, lock, owner, token, by } => {
                    push_to(&mut conns, session, Push::Revoked { lock, owner, token, by });
                }
                Event::Leader { lock, leader } => {
                    let observers: Vec<SessionId> =
                        conns.observers.get(&lock).into_iter().flatten().copied().collect();
                    for session in observers {
                        let push = Push::Leader { lock: lock.clone(), leader: leader.clone() };
                        push_to(&mut conns, session, push);
                    }
                }
                Event::Ended { session, reason } => {
                    if let Some(out) = conns.remove(session) {
                        let push = ServerFrame::Push(Push::SessionEnded { reason });
                        let _ = out.try_send(encode(&push));
                    }
                }
            }
        }
    }
}

/// Push `push` to `session`'s connection; one too slow to take it is forgotten (its client
/// resumes, and learns what it holds, when it reconnects).
fn push_to(conns: &mut Conns, session: SessionId, push: Push) {
    let Some((_, out)) = conns.by_session.get(&session) else {
        return;
    };
    if out.try_send(encode(&ServerFrame::Push(push))).is_err() {
        tracing::warn!("session {session}'s connection does not keep up: dropped");
        conns.remove(session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A closed connection's sessions are forgotten, and only its own: a session that moved
    /// to another connection stays with it.
    #[test]
    fn a_closed_connection_keeps_nothing() {
        let hub = Hub::default();
        let (out, _rx) = mpsc::channel(1);
        hub.attach(1, 10, &out);
        hub.attach(2, 10, &out);
        hub.attach(2, 11, &out);
        assert!(hub.serves(10) && hub.serves(11));
        hub.detach(10);
        assert!(!hub.serves(10));
        let conns = lock(&hub.conns);
        assert!(!conns.by_session.contains_key(&1));
        assert_eq!(conns.by_session.get(&2).map(|(c, _)| *c), Some(11));
        drop(conns);
        hub.detach(11);
        let conns = lock(&hub.conns);
        assert!(conns.by_session.is_empty() && conns.by_conn.is_empty());
    }
}
