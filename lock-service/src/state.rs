//! The replicated state: every lock's holder and FIFO queue, every live session, and the one
//! function, [`LockTable::apply`], that every node runs on every committed [`Command`] in log
//! order. It reads no clock and no randomness: given the same log, every replica holds the
//! same table, and a grant's fencing token is the log index of the entry that made it.

use crate::proto::{Held, SessionId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A change to the table: the payload of a Raft log entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Command {
    /// Open a session; its id is this entry's log index.
    Open {
        /// Its TTL, which the leader enforces.
        ttl_ms: u64,
    },
    /// Take `lock` for `owner` of `session`, or queue for it (`wait`).
    Acquire {
        /// The session.
        session: SessionId,
        /// The lock id.
        lock: String,
        /// The owner within the session.
        owner: String,
        /// Queue when held.
        wait: bool,
    },
    /// Release `lock` (handing it to the first live waiter), or leave its queue.
    Release {
        /// The session.
        session: SessionId,
        /// The lock id.
        lock: String,
        /// The owner within the session.
        owner: String,
    },
    /// The client ended its session.
    Close {
        /// The session.
        session: SessionId,
    },
    /// The leader saw no keep-alive for a whole TTL: the session is over.
    Expire {
        /// The session.
        session: SessionId,
    },
}

/// What applying a [`Command`] did, for the client that proposed it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Outcome {
    /// A session was opened with this id.
    Opened(SessionId),
    /// The owner holds the lock with this token (now, or already).
    Granted(u64),
    /// The owner waits in the lock's queue (now, or already).
    Queued,
    /// The lock is held by someone else and the owner would not wait.
    Busy,
    /// The owner released the lock.
    Released,
    /// The owner left the lock's queue.
    Cancelled,
    /// The owner neither held nor waited for the lock.
    NotHeld,
    /// The session ended (closed or expired) now.
    Ended,
    /// The session does not exist (any more).
    SessionGone,
    /// The entry was not a command (a new leader's blank entry, a membership change).
    Nothing,
}

/// News for a client that did not ask just now, produced while applying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `owner` of `session` was handed `lock`.
    Granted {
        /// The session.
        session: SessionId,
        /// The lock id.
        lock: String,
        /// The owner.
        owner: String,
        /// The fencing token.
        token: u64,
    },
    /// The session is over.
    Ended {
        /// The session.
        session: SessionId,
        /// Why.
        reason: String,
    },
}

/// A live session.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Session {
    /// Its TTL in milliseconds.
    pub ttl_ms: u64,
    /// The locks it holds or waits for (to free them when it ends).
    locks: BTreeSet<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Holder {
    session: SessionId,
    owner: String,
    token: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Waiter {
    session: SessionId,
    owner: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
struct LockEntry {
    holder: Option<Holder>,
    queue: VecDeque<Waiter>,
}

/// Every lock and session; see the module docs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LockTable {
    sessions: BTreeMap<SessionId, Session>,
    locks: BTreeMap<String, LockEntry>,
}

impl LockTable {
    /// Apply the entry at log `index`, pushing what waiting clients must be told onto `events`.
    pub fn apply(&mut self, index: u64, command: &Command, events: &mut Vec<Event>) -> Outcome {
        match command {
            Command::Open { ttl_ms } => {
                self.sessions.insert(index, Session { ttl_ms: *ttl_ms, locks: BTreeSet::new() });
                Outcome::Opened(index)
            }
            Command::Acquire { session, lock, owner, wait } => {
                self.acquire(index, *session, lock, owner, *wait)
            }
            Command::Release { session, lock, owner } => {
                self.release(index, *session, lock, owner, events)
            }
            Command::Close { session } => self.end(index, *session, "closed by its client", events),
            Command::Expire { session } => self.end(
                index,
                *session,
                "expired: the leader heard no keep-alive for a whole TTL",
                events,
            ),
        }
    }

    fn acquire(
        &mut self,
        index: u64,
        session: SessionId,
        lock: &str,
        owner: &str,
        wait: bool,
    ) -> Outcome {
        let Some(s) = self.sessions.get_mut(&session) else {
            return Outcome::SessionGone;
        };
        let entry = self.locks.entry(lock.to_string()).or_default();
        let me = |h_session: SessionId, h_owner: &str| h_session == session && h_owner == owner;
        match &entry.holder {
            None => {
                entry.holder = Some(Holder { session, owner: owner.to_string(), token: index });
                s.locks.insert(lock.to_string());
                Outcome::Granted(index)
            }
            // Asked again (a retry after a lost answer): the same grant.
            Some(h) if me(h.session, &h.owner) => Outcome::Granted(h.token),
            Some(_) if entry.queue.iter().any(|w| me(w.session, &w.owner)) => Outcome::Queued,
            Some(_) if wait => {
                entry.queue.push_back(Waiter { session, owner: owner.to_string() });
                s.locks.insert(lock.to_string());
                Outcome::Queued
            }
            Some(_) => Outcome::Busy,
        }
    }

    fn release(
        &mut self,
        index: u64,
        session: SessionId,
        lock: &str,
        owner: &str,
        events: &mut Vec<Event>,
    ) -> Outcome {
        if !self.sessions.contains_key(&session) {
            return Outcome::SessionGone;
        }
        let Some(entry) = self.locks.get_mut(lock) else {
            return Outcome::NotHeld;
        };
        let me = |w_session: SessionId, w_owner: &str| w_session == session && w_owner == owner;
        let outcome = if entry.holder.as_ref().is_some_and(|h| me(h.session, &h.owner)) {
            entry.holder = None;
            Outcome::Released
        } else if let Some(at) = entry.queue.iter().position(|w| me(w.session, &w.owner)) {
            entry.queue.remove(at);
            Outcome::Cancelled
        } else {
            return Outcome::NotHeld;
        };
        // The session may still hold or wait for this lock under another owner.
        if !self.involves(session, lock) {
            if let Some(s) = self.sessions.get_mut(&session) {
                s.locks.remove(lock);
            }
        }
        self.hand_over(index, lock, events);
        outcome
    }

    /// End `session`: every lock it holds goes to its next waiter, every queue forgets it.
    fn end(
        &mut self,
        index: u64,
        session: SessionId,
        reason: &str,
        events: &mut Vec<Event>,
    ) -> Outcome {
        let Some(s) = self.sessions.remove(&session) else {
            return Outcome::SessionGone;
        };
        for lock in &s.locks {
            if let Some(entry) = self.locks.get_mut(lock) {
                entry.queue.retain(|w| w.session != session);
                if entry.holder.as_ref().is_some_and(|h| h.session == session) {
                    entry.holder = None;
                }
            }
            self.hand_over(index, lock, events);
        }
        events.push(Event::Ended { session, reason: reason.to_string() });
        Outcome::Ended
    }

    /// If `lock` is free, grant it to the first waiter (token `index`); drop it when nobody
    /// holds or waits.
    fn hand_over(&mut self, index: u64, lock: &str, events: &mut Vec<Event>) {
        let Some(entry) = self.locks.get_mut(lock) else {
            return;
        };
        if entry.holder.is_none() {
            if let Some(next) = entry.queue.pop_front() {
                events.push(Event::Granted {
                    session: next.session,
                    lock: lock.to_string(),
                    owner: next.owner.clone(),
                    token: index,
                });
                entry.holder =
                    Some(Holder { session: next.session, owner: next.owner, token: index });
            }
        }
        if entry.holder.is_none() && entry.queue.is_empty() {
            self.locks.remove(lock);
        }
    }

    fn involves(&self, session: SessionId, lock: &str) -> bool {
        self.locks.get(lock).is_some_and(|e| {
            e.holder.as_ref().is_some_and(|h| h.session == session)
                || e.queue.iter().any(|w| w.session == session)
        })
    }

    /// Every live session and its TTL in milliseconds.
    pub fn sessions(&self) -> impl Iterator<Item = (SessionId, u64)> + '_ {
        self.sessions.iter().map(|(id, s)| (*id, s.ttl_ms))
    }

    /// Whether `session` is live.
    pub fn has_session(&self, session: SessionId) -> bool {
        self.sessions.contains_key(&session)
    }

    /// How many sessions are live.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// The locks `session` holds, with their owners and tokens.
    pub fn held_by(&self, session: SessionId) -> Vec<Held> {
        let Some(s) = self.sessions.get(&session) else {
            return Vec::new();
        };
        s.locks
            .iter()
            .filter_map(|lock| {
                let h = self.locks.get(lock)?.holder.as_ref()?;
                (h.session == session).then(|| (lock.clone(), h.owner.clone(), h.token))
            })
            .collect()
    }

    /// How many lock ids have a holder or a queue.
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(session: SessionId, owner: &str, wait: bool) -> Command {
        Command::Acquire { session, lock: "l".into(), owner: owner.into(), wait }
    }

    fn release(session: SessionId, owner: &str) -> Command {
        Command::Release { session, lock: "l".into(), owner: owner.into() }
    }

    /// Two sessions opened at indexes 1 and 2.
    fn two_sessions() -> LockTable {
        let mut t = LockTable::default();
        let mut ev = Vec::new();
        assert_eq!(t.apply(1, &Command::Open { ttl_ms: 1000 }, &mut ev), Outcome::Opened(1));
        assert_eq!(t.apply(2, &Command::Open { ttl_ms: 1000 }, &mut ev), Outcome::Opened(2));
        t
    }

    #[test]
    fn release_hands_the_lock_to_the_first_waiter_in_the_same_entry() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        t.apply(3, &Command::Open { ttl_ms: 1000 }, &mut ev);
        assert_eq!(t.apply(4, &acquire(1, "a", true), &mut ev), Outcome::Granted(4));
        assert_eq!(t.apply(5, &acquire(2, "b", true), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(6, &acquire(3, "c", true), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(7, &acquire(3, "c", false), &mut ev), Outcome::Queued, "retry");
        assert!(ev.is_empty());
        assert_eq!(t.apply(8, &release(1, "a"), &mut ev), Outcome::Released);
        assert_eq!(
            ev,
            vec![Event::Granted { session: 2, lock: "l".into(), owner: "b".into(), token: 8 }]
        );
        assert_eq!(t.held_by(2), vec![("l".into(), "b".into(), 8)]);
        assert_eq!(t.apply(9, &acquire(2, "b", true), &mut ev), Outcome::Granted(8), "retry");
    }

    #[test]
    fn soft_lock_is_busy_and_a_waiter_can_leave_the_queue() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        t.apply(3, &acquire(1, "a", true), &mut ev);
        assert_eq!(t.apply(4, &acquire(2, "b", false), &mut ev), Outcome::Busy);
        assert_eq!(t.apply(5, &acquire(2, "b", true), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(6, &release(2, "b"), &mut ev), Outcome::Cancelled);
        assert_eq!(t.apply(7, &release(1, "a"), &mut ev), Outcome::Released);
        assert!(ev.is_empty(), "nobody left to grant: {ev:?}");
        assert_eq!(t.lock_count(), 0, "a free lock with no queue leaves nothing behind");
        assert_eq!(t.apply(8, &release(1, "a"), &mut ev), Outcome::NotHeld);
    }

    #[test]
    fn an_ended_session_frees_its_locks_and_leaves_every_queue() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        t.apply(3, &Command::Open { ttl_ms: 1000 }, &mut ev);
        t.apply(4, &acquire(1, "a", true), &mut ev);
        t.apply(5, &acquire(2, "b", true), &mut ev);
        t.apply(6, &acquire(3, "c", true), &mut ev);
        assert_eq!(t.apply(7, &Command::Expire { session: 2 }, &mut ev), Outcome::Ended);
        assert_eq!(t.apply(8, &Command::Expire { session: 1 }, &mut ev), Outcome::Ended);
        let grants: Vec<_> =
            ev.iter().filter(|e| matches!(e, Event::Granted { .. })).cloned().collect();
        assert_eq!(
            grants,
            vec![Event::Granted { session: 3, lock: "l".into(), owner: "c".into(), token: 8 }]
        );
        assert_eq!(t.apply(9, &acquire(1, "a", true), &mut ev), Outcome::SessionGone);
        assert_eq!(t.apply(10, &Command::Close { session: 1 }, &mut ev), Outcome::SessionGone);
        assert!(!t.has_session(1) && t.has_session(3));
    }

    #[test]
    fn tokens_strictly_increase_per_lock() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        let mut last = 0;
        for i in 0..10u64 {
            let (s, o) = if i % 2 == 0 { (1, "a") } else { (2, "b") };
            let Outcome::Granted(token) = t.apply(10 + 2 * i, &acquire(s, o, true), &mut ev) else {
                panic!("free lock not granted");
            };
            assert!(token > last);
            last = token;
            assert_eq!(t.apply(11 + 2 * i, &release(s, o), &mut ev), Outcome::Released);
        }
    }
}
