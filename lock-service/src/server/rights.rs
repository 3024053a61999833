//! What each client connection of a node without users may do: the sessions it may act for,
//! and the sessions it is opening.
//!
//! **Why per connection.** Without `--users` every client is the same nobody, so nothing but
//! the connection tells one client from another. A session belongs to the connections that
//! opened it or resumed it with its key (which only the client that opened it was told), and
//! only those may act for it: keep it alive, ask, release, proclaim, observe, close. A
//! session's id is a log index, easy to guess; its key is not. The client that loses its
//! connection (a failover, a broken link) resumes the session with the key on its next one,
//! which may then act for it; nothing of it is lost.
//!
//! **The limit on sessions, per connection.** On such a node `--max-sessions-per-identity`
//! counts the live sessions each connection may act for and those it is opening. The count
//! and the reservation of a place are one step under one mutex, and a place is turned into
//! the session (or given back) under the same mutex when its commit ends, so every `Open` in
//! flight is counted exactly once and a burst of pipelined opens never passes the limit. A
//! resume is never refused for the limit: a client keeps its sessions across connections.
//!
//! **What it costs.** A client that opens many connections gets a quota on each; what bounds
//! it is the cap on all the sessions of a node without users (`--max-anonymous-sessions`,
//! counted in the replicated state). Counting per client address instead would not be
//! dodged by new connections, but it would lump together every client behind one NAT, proxy
//! or host, and they would starve each other as all clients do under one identity. A node
//! with users counts per identity instead, in the replicated state, and needs none of this.

use super::gate::ConnId;
use super::lock;
use crate::proto::SessionId;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// The rights of the client connections of one node.
#[derive(Default)]
pub(super) struct Rights {
    conns: Mutex<HashMap<ConnId, Conn>>,
}

/// One connection's sessions, and its opens in flight.
#[derive(Default)]
struct Conn {
    sessions: HashSet<SessionId>,
    opening: usize,
}

/// A place reserved for a session a connection is opening: given back when dropped, unless
/// [`Opening::opened`] turned it into the session.
pub(super) struct Opening<'a> {
    rights: &'a Rights,
    conn: ConnId,
    done: bool,
}

impl Rights {
    /// Whether connection `conn` may act for `session`.
    pub(super) fn allows(&self, conn: ConnId, session: SessionId) -> bool {
        lock(&self.conns).get(&conn).is_some_and(|c| c.sessions.contains(&session))
    }

    /// Connection `conn` may act for `session` from now on (it resumed it with its key).
    pub(super) fn grant(&self, conn: ConnId, session: SessionId) {
        lock(&self.conns).entry(conn).or_default().sessions.insert(session);
    }

    /// Connection `conn` is closed: it may do nothing any more.
    pub(super) fn forget(&self, conn: ConnId) {
        lock(&self.conns).remove(&conn);
    }

    /// A place for a session connection `conn` opens, if the live sessions it may act for
    /// (`live` tells which are live) and those it is opening are fewer than `limit`; else
    /// how many there are.
    pub(super) fn reserve(
        &self,
        conn: ConnId,
        limit: usize,
        live: impl Fn(SessionId) -> bool,
    ) -> Result<Opening<'_>, usize> {
        let mut conns = lock(&self.conns);
        let c = conns.entry(conn).or_default();
        c.sessions.retain(|s| live(*s));
        let taken = c.sessions.len() + c.opening;
        if taken >= limit {
            return Err(taken);
        }
        c.opening += 1;
        Ok(Opening { rights: self, conn, done: false })
    }
}

impl Opening<'_> {
    /// The session was opened: the place is now `session`, which the connection may act for.
    pub(super) fn opened(mut self, session: SessionId) {
        self.done = true;
        let mut conns = lock(&self.rights.conns);
        // A connection closed meanwhile keeps nothing.
        if let Some(c) = conns.get_mut(&self.conn) {
            c.opening -= 1;
            c.sessions.insert(session);
        }
    }
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if !self.done {
            if let Some(c) = lock(&self.rights.conns).get_mut(&self.conn) {
                c.opening -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Places in flight count like sessions; a place given back or a session ended frees
    /// room; a closed connection keeps nothing.
    #[test]
    fn opens_in_flight_count_until_they_end() {
        let rights = Rights::default();
        let a = rights.reserve(1, 2, |_| true).ok().unwrap();
        let b = rights.reserve(1, 2, |_| true).ok().unwrap();
        assert_eq!(rights.reserve(1, 2, |_| true).err(), Some(2));
        assert!(rights.reserve(2, 2, |_| true).is_ok(), "another connection has its own");
        a.opened(10);
        assert!(rights.allows(1, 10) && !rights.allows(2, 10));
        drop(b);
        let c = rights.reserve(1, 2, |_| true).ok().unwrap();
        assert_eq!(rights.reserve(1, 2, |_| true).err(), Some(2));
        drop(c);
        assert!(rights.reserve(1, 1, |s| s != 10).is_ok(), "an ended session frees its place");
        rights.forget(1);
        assert!(!rights.allows(1, 10));
    }
}
