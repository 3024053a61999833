//! The replicated state: every lock's holder and FIFO queue, every live session, and the one
//! function, [`LockTable::apply`], that every node runs on every committed [`Command`] in log
//! order. It reads no clock and no randomness: given the same log, every replica holds the
//! same table.
//!
//! ## Stamps: session ids and fencing tokens
//! An entry carries one command, or a batch of them ([`Command::Batch`]) that the leader
//! gathered while its previous write was under way. Every command applied is given a
//! *stamp*: its entry's log index, or one more than the previous command's stamp when that
//! is greater (the second command of a batch, or any command after a batch). A session's id
//! is the stamp of its `Open`; a grant's fencing token is the stamp of the command that made
//! it. Stamps rise strictly in log order and within an entry, on every node alike, so every
//! later grant of any lock has a greater token, whatever the batches. A log of one command
//! per entry (all a node of an earlier version wrote) is stamped with its log indexes, the
//! ids and tokens that node handed out. The last stamp is part of the table, and so of
//! every snapshot.
//!
//! ## Asks, told apart by their attempt
//! An owner's asks for a lock carry an *attempt* number, unique within the session: a retry
//! of an ask (after a lost answer or a failover) repeats it, a new ask takes a greater one.
//! A release names the ask whose grant or queue place it gives up. When an ask of an owner
//! arrives while another ask of the same owner holds or waits for the same lock:
//! - **the same attempt** is answered what it was answered before (the same grant, the same
//!   queue place), so a retry never takes two places;
//! - **an older attempt** arrived late and changes nothing ([`Outcome::Superseded`]);
//! - **a newer attempt while the older one waits** takes its place in the queue: a queued
//!   ask was told nothing it could have acted on. A newer soft ask (no `wait`) takes the
//!   older one out of the queue instead, and is answered busy;
//! - **a newer attempt while the older one holds** first gives the older grant up, in the
//!   same entry and exactly as that ask's release would (the lock goes to the next waiter),
//!   and is then served as any new ask: granted with a new, greater token if the lock is
//!   free, queued behind the waiters, or busy.
//!
//! The table cannot tell whether the older grant's answer reached its caller: an ask given
//! up on may have been granted unseen, but a caller whose release failed with an unknown
//! outcome (a timeout, a lost connection, no leader) has held that grant and used its token.
//! Answering the newer ask with the old grant would show that caller one grant as two
//! acquisitions, under one token. Giving the old grant up and serving the new ask as new
//! keeps every grant answering one ask only, keeps tokens rising in grant order, and needs
//! no round trip: the caller is asking for the lock, so it no longer counts on the old grant.
//! Refusing the new ask until the old grant's release commits was the other choice; it
//! would fail every ask made again before a background release lands, for no safety gained.
//! The cost: such an ask joins the back of the queue, behind asks that came after its
//! older grant. The client also sends such releases again until their outcome is known
//! ([`crate::client`]), so this rule is seldom what frees the older grant.

//!
//! ## Shared asks: readers and permits
//! Every ask says what it wants ([`Share`]): the lock alone (a mutex, a write; what an entry
//! that says nothing asks), a read beside other reads, or k of a semaphore's N permits. One
//! lock id has one FIFO queue for all of them, and its holders: one exclusive holder, or any
//! number that share. An ask is granted at once only when nobody waits and it fits beside the
//! holders (no holder for a write; only readers for a read; the permits held plus its own at
//! most N); otherwise it queues (or, soft, is busy). When holders leave, the head of the queue
//! is granted for as long as it fits, all in the command that freed them: a writer's release
//! grants every reader up to the next writer in one commit, under that command's stamp, and
//! a reader behind a waiting writer waits for it, so no writer starves. A grant of k permits
//! takes k stamps of its own, past every stamp so far, one token per permit; the next command
//! is stamped past them. Asks of another kind (permits against reads and writes) or for a
//! semaphore of another size are refused with [`Outcome::Mismatch`] and change nothing.
//!
//! ## Elections
//! A candidacy is an exclusive ask with a value: its holder leads the election named by the
//! lock id and announces the value, which [`Command::Proclaim`] changes. Whenever a command
//! changes who leads an election or what it announces, applying it pushes [`Event::Leader`]
//! (after the command's other events), so each change is told once, in log order; a plain
//! lock's holder leads nothing and is never announced.

use crate::proto::{Held, HolderInfo, LeaderInfo, LockInfo, SessionId, Share, WaiterInfo};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A change to the table: the payload of a Raft log entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub enum Command {
    /// Open a session; its id is this command's stamp (see the module docs).
    Open {
        /// Its TTL, which the leader enforces.
        ttl_ms: u64,
        /// The identity that opened it, on a server that authenticates its clients: only
        /// that identity may act for the session (absent on an open server).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        identity: Option<String>,
        /// The hex SHA-256 of the session's key, a secret the proposing node drew at random
        /// and told the client alone: a resume of the session must present the key (absent
        /// in entries written before sessions had keys: such a session resumes without one).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The most live sessions its identity may have (all the sessions opened without an
        /// identity count together): past it the session is refused
        /// ([`Outcome::LimitReached`]) and nothing changes. The leader puts its own limit
        /// here, so that the count is taken in log order, where every command in flight
        /// has been counted (absent: no limit, as in entries written before).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_sessions: Option<u64>,
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
        /// Which of the owner's asks this is (0 in entries written before asks were told
        /// apart): see the module docs.
        #[serde(default)]
        attempt: u64,
        /// What the ask wants: alone (entries written before shared asks), beside readers, or
        /// some of a semaphore's permits (see the module docs).
        #[serde(default, skip_serializing_if = "Share::is_exclusive")]
        share: Share,
        /// The identity asking (see [`Command::Open`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// A candidacy's value: its holder leads the election of this lock id, announcing it
        /// (see the module docs).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        value: Option<Vec<u8>>,
        /// The most asks (holds and queue places) the session may have: a new ask past it is
        /// refused ([`Outcome::LimitReached`]) and changes nothing; an ask of an owner that
        /// already holds or waits for this lock is not a new one. Counted in log order, like
        /// [`Command::Open`]'s `max_sessions` (absent: no limit).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_asks: Option<u64>,
    },
    /// The leader of the election of `lock` announces `value` instead.
    Proclaim {
        /// The session.
        session: SessionId,
        /// The election's lock id.
        lock: String,
        /// The owner within the session.
        owner: String,
        /// The ask that was granted the leadership.
        attempt: u64,
        /// The new value.
        value: Vec<u8>,
        /// The identity asking (see [`Command::Open`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// Release `lock` (handing it to the first live waiter), or leave its queue.
    Release {
        /// The session.
        session: SessionId,
        /// The lock id.
        lock: String,
        /// The owner within the session.
        owner: String,
        /// The ask whose grant or place this gives up.
        #[serde(default)]
        attempt: u64,
        /// The identity asking (see [`Command::Open`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The client ended its session.
    Close {
        /// The session.
        session: SessionId,
        /// The identity asking (see [`Command::Open`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// An administrator took `lock` from its holder, whoever that is: the holder is told
    /// (its guard becomes `Lost`) and the lock goes to its next waiter.
    ForceRelease {
        /// The lock id.
        lock: String,
        /// The administrator, for the log and the holder's notice.
        by: String,
    },
    /// The leader saw no keep-alive for a whole TTL: the session is over.
    Expire {
        /// The session.
        session: SessionId,
    },
    /// Commands applied one after the other, in this order, each with a stamp of its own:
    /// what the leader gathered from its clients while its previous write was under way.
    Batch(Vec<Command>),
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
    /// The leader's new value is announced.
    Proclaimed,
    /// The session belongs to another identity: nothing was changed.
    Forbidden,
    /// A newer ask of the same owner for the same lock holds or waits: this older ask
    /// arrived late and changed nothing.
    Superseded,
    /// A limit the command carried (sessions of an identity, asks of a session) was reached:
    /// nothing was changed.
    LimitReached,
    /// The lock id is held or waited for by asks of another kind (a semaphore's permits
    /// against a lock's reads and writes) or for a semaphore of another size, as this share
    /// says: nothing was changed.
    Mismatch(Share),
    /// The entry was not a command (a new leader's blank entry, a membership change).
    Nothing,
    /// What each command of a [`Command::Batch`] did, in its order.
    Batch(Vec<Outcome>),
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
        /// The ask it answers.
        attempt: u64,
    },
    /// An administrator took the lock `owner` of `session` held.
    Revoked {
        /// The session.
        session: SessionId,
        /// The lock id.
        lock: String,
        /// The owner.
        owner: String,
        /// The token it held the lock with.
        token: u64,
        /// The administrator.
        by: String,
    },
    /// Who leads the election of `lock` changed: a new leader, a new value, or nobody.
    Leader {
        /// The election's lock id.
        lock: String,
        /// Who leads now.
        leader: Option<LeaderInfo>,
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
    /// The identity that opened it (see [`Command::Open`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity: Option<String>,
    /// The hex SHA-256 of its key (see [`Command::Open`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Holder {
    session: SessionId,
    owner: String,
    /// The grant's fencing token; a grant of k permits holds tokens `token .. token + k`.
    token: u64,
    #[serde(default)]
    attempt: u64,
    #[serde(default, skip_serializing_if = "Share::is_exclusive")]
    share: Share,
    /// The value a leader announces, for a candidacy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<Vec<u8>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Waiter {
    session: SessionId,
    owner: String,
    #[serde(default)]
    attempt: u64,
    #[serde(default, skip_serializing_if = "Share::is_exclusive")]
    share: Share,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<Vec<u8>>,
}

/// One lock id's holders and queue. At most one of `holder` (an exclusive grant) and `shared`
/// (grants that share: reads, or a semaphore's permits) is in use.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
struct LockEntry {
    holder: Option<Holder>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    shared: Vec<Holder>,
    queue: VecDeque<Waiter>,
}

impl LockEntry {
    /// Every grant of this lock.
    fn holders(&self) -> impl Iterator<Item = &Holder> {
        self.holder.iter().chain(self.shared.iter())
    }

    /// Whether an ask for `share` can hold beside the holders now.
    fn fits(&self, share: Share) -> bool {
        if self.holder.is_some() {
            return false;
        }
        match share {
            Share::Exclusive => self.shared.is_empty(),
            Share::Read => self.shared.iter().all(|h| h.share == Share::Read),
            Share::Permits { count, limit } => {
                let mut taken = u64::from(count);
                for h in &self.shared {
                    match h.share {
                        Share::Permits { count, .. } => taken += u64::from(count),
                        Share::Exclusive | Share::Read => return false,
                    }
                }
                taken <= u64::from(limit)
            }
        }
    }

    /// What another ask of this lock wants, when `share` cannot be asked beside it: permits
    /// against reads and writes, or permits of another size.
    fn mismatch(&self, share: Share) -> Option<Share> {
        let others = self.holders().map(|h| h.share).chain(self.queue.iter().map(|w| w.share));
        others.into_iter().find(|o| {
            o.limit().is_some() != share.limit().is_some()
                || (o.limit().is_some() && o.limit() != share.limit())
        })
    }

    /// Put `holder` among the holders.
    fn hold(&mut self, holder: Holder) {
        match holder.share {
            Share::Exclusive => self.holder = Some(holder),
            Share::Read | Share::Permits { .. } => self.shared.push(holder),
        }
    }
}

/// Every lock and session; see the module docs.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct LockTable {
    sessions: BTreeMap<SessionId, Session>,
    locks: BTreeMap<String, LockEntry>,
    /// How many locks administrators took from their holders.
    #[serde(default)]
    forced: u64,
    /// The stamp of the last command applied (see the module docs).
    #[serde(default)]
    stamp: u64,
}

/// Who asks: an owner of a session, in one of its asks, for what.
#[derive(Clone, Copy)]
struct Asker<'a> {
    session: SessionId,
    owner: &'a str,
    attempt: u64,
    share: Share,
    value: Option<&'a [u8]>,
}

impl Asker<'_> {
    /// The same owner, in any of its asks.
    fn is(&self, session: SessionId, owner: &str) -> bool {
        self.session == session && self.owner == owner
    }

    /// The same owner in this very ask.
    fn owns(&self, session: SessionId, owner: &str, attempt: u64) -> bool {
        self.is(session, owner) && self.attempt == attempt
    }

    /// This ask, waiting.
    fn waiter(&self) -> Waiter {
        Waiter {
            session: self.session,
            owner: self.owner.to_string(),
            attempt: self.attempt,
            share: self.share,
            value: self.value.map(<[u8]>::to_vec),
        }
    }
}

impl Waiter {
    /// This waiter, holding with `token`.
    fn granted(self, token: u64) -> Holder {
        Holder {
            session: self.session,
            owner: self.owner,
            token,
            attempt: self.attempt,
            share: self.share,
            value: self.value,
        }
    }
}

impl LockTable {
    /// Apply `command`, of the entry at log `index`, pushing what waiting clients must be told
    /// onto `events`. Each command (each of a batch) takes the next stamp (see the module docs).
    pub fn apply(&mut self, index: u64, command: &Command, events: &mut Vec<Event>) -> Outcome {
        let index = match command {
            Command::Batch(commands) => {
                return Outcome::Batch(
                    commands.iter().map(|c| self.apply(index, c, events)).collect(),
                );
            }
            _ => {
                self.stamp = index.max(self.stamp + 1);
                self.stamp
            }
        };
        // Who leads each election the command may change, before and after it. A command on one
        // lock (every grant and release) borrows its id from the command: the mutex's hot path
        // allocates nothing for this, and a plain lock's holder leads nothing.
        let one: Option<&str> = match command {
            Command::Acquire { lock, .. }
            | Command::Release { lock, .. }
            | Command::Proclaim { lock, .. }
            | Command::ForceRelease { lock, .. } => Some(lock),
            _ => None,
        };
        let ending: Vec<String> = match command {
            Command::Close { session, .. } | Command::Expire { session } => self
                .sessions
                .get(session)
                .map(|s| s.locks.iter().cloned().collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        let one_before = one.map(|l| self.leader_of(l));
        let ending_before: Vec<Option<LeaderInfo>> =
            ending.iter().map(|l| self.leader_of(l)).collect();
        let outcome = self.apply_one(index, command, events);
        let watched = one
            .into_iter()
            .zip(one_before)
            .chain(ending.iter().map(String::as_str).zip(ending_before));
        for (lock, before) in watched {
            let leader = self.leader_of(lock);
            if leader != before {
                events.push(Event::Leader { lock: lock.to_string(), leader });
            }
        }
        outcome
    }

    /// Apply one command (not a batch) stamped `index`.
    fn apply_one(&mut self, index: u64, command: &Command, events: &mut Vec<Event>) -> Outcome {
        match command {
            // Returned above.
            Command::Batch(_) => Outcome::Nothing,
            Command::Open { ttl_ms, identity, key, max_sessions } => {
                let open = self.sessions_of(identity.as_deref()) as u64;
                if max_sessions.is_some_and(|max| open >= max) {
                    return Outcome::LimitReached;
                }
                let s = Session {
                    ttl_ms: *ttl_ms,
                    locks: BTreeSet::new(),
                    identity: identity.clone(),
                    key: key.clone(),
                };
                self.sessions.insert(index, s);
                Outcome::Opened(index)
            }
            Command::Acquire { session, by, .. }
            | Command::Release { session, by, .. }
            | Command::Proclaim { session, by, .. }
            | Command::Close { session, by }
                if !self.may_act(*session, by.as_deref()) =>
            {
                Outcome::Forbidden
            }
            Command::Acquire { session, lock, owner, max_asks: Some(max), .. }
                if self.has_session(*session)
                    && !self.is_asking(*session, lock, owner)
                    && self.asks_of(*session) as u64 >= *max =>
            {
                Outcome::LimitReached
            }
            Command::Acquire { session, lock, owner, wait, attempt, share, value, .. } => {
                let value = value.as_deref();
                let who =
                    Asker { session: *session, owner, attempt: *attempt, share: *share, value };
                self.acquire(index, who, lock, *wait, events)
            }
            Command::Release { session, lock, owner, attempt, .. } => {
                let share = Share::Exclusive;
                let who = Asker { session: *session, owner, attempt: *attempt, share, value: None };
                self.release(index, who, lock, events)
            }
            Command::Proclaim { session, lock, owner, attempt, value, .. } => {
                self.proclaim(*session, owner, *attempt, lock, value)
            }
            Command::Close { session, .. } => {
                self.end(index, *session, "closed by its client", events)
            }
            Command::ForceRelease { lock, by } => self.force_release(index, lock, by, events),
            Command::Expire { session } => self.end(
                index,
                *session,
                "expired: the leader heard no keep-alive for a whole TTL",
                events,
            ),
        }
    }

    /// Whether the identity `by` may act for `session`: a session opened by an identity
    /// belongs to it alone; one opened on an open server (none) to anyone. An unknown session
    /// is left to the command itself (it answers `SessionGone`).
    fn may_act(&self, session: SessionId, by: Option<&str>) -> bool {
        match self.sessions.get(&session).and_then(|s| s.identity.as_deref()) {
            Some(owner) => by == Some(owner),
            None => true,
        }
    }

    /// Take `lock` from its holders for the administrator `by`, and hand it to the next
    /// waiters.
    fn force_release(
        &mut self,
        index: u64,
        lock: &str,
        by: &str,
        events: &mut Vec<Event>,
    ) -> Outcome {
        let Some(entry) = self.locks.get_mut(lock) else {
            return Outcome::NotHeld;
        };
        let taken: Vec<Holder> =
            entry.holder.take().into_iter().chain(entry.shared.drain(..)).collect();
        if taken.is_empty() {
            return Outcome::NotHeld;
        }
        for holder in taken {
            if !self.involves(holder.session, lock) {
                if let Some(s) = self.sessions.get_mut(&holder.session) {
                    s.locks.remove(lock);
                }
            }
            self.forced += 1;
            events.push(Event::Revoked {
                session: holder.session,
                lock: lock.to_string(),
                owner: holder.owner,
                token: holder.token,
                by: by.to_string(),
            });
        }
        self.hand_over(index, lock, events);
        Outcome::Released
    }

    /// Who leads the election of `lock`: its holder, when that holder campaigned with a
    /// value (a plain lock's holder leads nothing).
    pub fn leader_of(&self, lock: &str) -> Option<LeaderInfo> {
        let h = self.locks.get(lock)?.holder.as_ref()?;
        let value = h.value.clone()?;
        Some(LeaderInfo { owner: h.owner.clone(), value, term: h.token })
    }

    /// The leader (owner of `session`, in ask `attempt`) of the election of `lock` announces
    /// `value`; anyone else changes nothing.
    fn proclaim(
        &mut self,
        session: SessionId,
        owner: &str,
        attempt: u64,
        lock: &str,
        value: &[u8],
    ) -> Outcome {
        if !self.sessions.contains_key(&session) {
            return Outcome::SessionGone;
        }
        let holder = self.locks.get_mut(lock).and_then(|e| e.holder.as_mut());
        match holder.filter(|h| h.session == session && h.owner == owner && h.attempt == attempt) {
            Some(Holder { value: Some(v), .. }) => {
                *v = value.to_vec();
                Outcome::Proclaimed
            }
            _ => Outcome::NotHeld,
        }
    }

    /// The first fencing token of a grant of `share` made by the command stamped `index`: the
    /// stamp itself, or, for k permits, k stamps of their own past every stamp so far (so a
    /// permit's token is unique and the next command's stamp is greater still).
    fn token_for(&mut self, index: u64, share: Share) -> u64 {
        match share {
            Share::Exclusive | Share::Read => index,
            Share::Permits { .. } => {
                let first = self.stamp + 1;
                self.stamp += share.tokens();
                first
            }
        }
    }

    fn acquire(
        &mut self,
        index: u64,
        who: Asker<'_>,
        lock: &str,
        wait: bool,
        events: &mut Vec<Event>,
    ) -> Outcome {
        if !self.sessions.contains_key(&who.session) {
            return Outcome::SessionGone;
        }
        if let Some(entry) = self.locks.get_mut(lock) {
            let held = entry.holders().find(|h| who.is(h.session, &h.owner));
            if let Some((attempt, token)) = held.map(|h| (h.attempt, h.token)) {
                match who.attempt.cmp(&attempt) {
                    // The same ask again (a retry after a lost answer): the same grant.
                    Ordering::Equal => return Outcome::Granted(token),
                    Ordering::Less => return Outcome::Superseded,
                    // A newer ask: the older one's grant may have been answered and its token
                    // used, so it is given up first, as its release would give it up (to the
                    // next waiter, in this entry), and this ask is served as a new one.
                    Ordering::Greater => {
                        let older = Asker { attempt, ..who };
                        self.release(index, older, lock, events);
                    }
                }
            } else if let Some(w) = entry.queue.iter_mut().find(|w| who.is(w.session, &w.owner)) {
                match who.attempt.cmp(&w.attempt) {
                    Ordering::Equal => return Outcome::Queued,
                    Ordering::Less => return Outcome::Superseded,
                    // A newer ask that waits for the same takes the older one's place: that
                    // one was never granted, so it was told nothing it could have used.
                    Ordering::Greater if wait && w.share == who.share => {
                        w.attempt = who.attempt;
                        return Outcome::Queued;
                    }
                    // A newer soft ask cannot wait, and a newer ask for something else does
                    // not inherit a place asked for another: the older one leaves the queue.
                    Ordering::Greater => {
                        let older = Asker { attempt: w.attempt, ..who };
                        self.release(index, older, lock, events);
                    }
                }
            }
        }
        if let Some(other) = self.locks.get(lock).and_then(|e| e.mismatch(who.share)) {
            return Outcome::Mismatch(other);
        }
        if !self.sessions.contains_key(&who.session) {
            return Outcome::SessionGone;
        }
        let entry = self.locks.entry(lock.to_string()).or_default();
        // First come, first served: an ask is granted at once only when nobody waits ahead of
        // it and it fits beside the holders.
        let outcome = if entry.queue.is_empty() && entry.fits(who.share) {
            let token = self.token_for(index, who.share);
            let entry = self.locks.entry(lock.to_string()).or_default();
            entry.hold(who.waiter().granted(token));
            Outcome::Granted(token)
        } else if wait {
            entry.queue.push_back(who.waiter());
            Outcome::Queued
        } else {
            if entry.holder.is_none() && entry.shared.is_empty() && entry.queue.is_empty() {
                self.locks.remove(lock);
            }
            return Outcome::Busy;
        };
        if let Some(s) = self.sessions.get_mut(&who.session) {
            s.locks.insert(lock.to_string());
        }
        outcome
    }

    fn release(
        &mut self,
        index: u64,
        who: Asker<'_>,
        lock: &str,
        events: &mut Vec<Event>,
    ) -> Outcome {
        if !self.sessions.contains_key(&who.session) {
            return Outcome::SessionGone;
        }
        let Some(entry) = self.locks.get_mut(lock) else {
            return Outcome::NotHeld;
        };
        // Only the ask that holds or waits gives it up: a late release of an older ask of the
        // same owner, whose place a newer ask took, changes nothing.
        let outcome =
            if entry.holder.as_ref().is_some_and(|h| who.owns(h.session, &h.owner, h.attempt)) {
                entry.holder = None;
                Outcome::Released
            } else if let Some(at) =
                entry.shared.iter().position(|h| who.owns(h.session, &h.owner, h.attempt))
            {
                entry.shared.remove(at);
                Outcome::Released
            } else if let Some(at) =
                entry.queue.iter().position(|w| who.owns(w.session, &w.owner, w.attempt))
            {
                entry.queue.remove(at);
                Outcome::Cancelled
            } else {
                return Outcome::NotHeld;
            };
        // The session may still hold or wait for this lock under another owner.
        if !self.involves(who.session, lock) {
            if let Some(s) = self.sessions.get_mut(&who.session) {
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
                entry.shared.retain(|h| h.session != session);
                if entry.holder.as_ref().is_some_and(|h| h.session == session) {
                    entry.holder = None;
                }
            }
            self.hand_over(index, lock, events);
        }
        events.push(Event::Ended { session, reason: reason.to_string() });
        Outcome::Ended
    }

    /// Grant `lock` to the waiters at the head of its queue for as long as the first of them
    /// fits beside the holders (one writer, or every reader up to the first writer, or permit
    /// asks while permits last), each in this command (token `index`, or permits' own
    /// stamps); drop the entry when nobody holds or waits.
    fn hand_over(&mut self, index: u64, lock: &str, events: &mut Vec<Event>) {
        loop {
            let Some(entry) = self.locks.get_mut(lock) else {
                return;
            };
            let Some(share) = entry.queue.front().map(|w| w.share).filter(|s| entry.fits(*s))
            else {
                break;
            };
            let token = self.token_for(index, share);
            let entry = self.locks.get_mut(lock).expect("the entry is still there");
            let next = entry.queue.pop_front().expect("a waiter at the head");
            events.push(Event::Granted {
                session: next.session,
                lock: lock.to_string(),
                owner: next.owner.clone(),
                token,
                attempt: next.attempt,
            });
            entry.hold(next.granted(token));
        }
        if self
            .locks
            .get(lock)
            .is_some_and(|e| e.holder.is_none() && e.shared.is_empty() && e.queue.is_empty())
        {
            self.locks.remove(lock);
        }
    }

    /// Whether `owner` of `session` holds or waits for `lock` (in any ask).
    pub fn is_asking(&self, session: SessionId, lock: &str, owner: &str) -> bool {
        self.locks.get(lock).is_some_and(|e| {
            e.holders().any(|h| h.session == session && h.owner == owner)
                || e.queue.iter().any(|w| w.session == session && w.owner == owner)
        })
    }

    fn involves(&self, session: SessionId, lock: &str) -> bool {
        self.locks.get(lock).is_some_and(|e| {
            e.holders().any(|h| h.session == session)
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
            .flat_map(|lock| {
                let holders = self.locks.get(lock).into_iter().flat_map(LockEntry::holders);
                holders
                    .filter(|h| h.session == session)
                    .map(|h| (lock.clone(), h.owner.clone(), h.token, h.attempt))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// The identity that opened `session`: `None` when it is not live, `Some(None)` when it
    /// was opened on an open server.
    pub fn identity_of(&self, session: SessionId) -> Option<Option<&str>> {
        self.sessions.get(&session).map(|s| s.identity.as_deref())
    }

    /// The hex SHA-256 of `session`'s key: `None` when it is not live, `Some(None)` when it
    /// was opened by an entry written before sessions had keys.
    pub fn key_of(&self, session: SessionId) -> Option<Option<&str>> {
        self.sessions.get(&session).map(|s| s.key.as_deref())
    }

    /// How many live sessions `identity` opened.
    pub fn sessions_of(&self, identity: Option<&str>) -> usize {
        self.sessions.values().filter(|s| s.identity.as_deref() == identity).count()
    }

    /// How many asks (holds and places in queues) `session` has.
    pub fn asks_of(&self, session: SessionId) -> usize {
        let Some(s) = self.sessions.get(&session) else {
            return 0;
        };
        s.locks
            .iter()
            .filter_map(|l| self.locks.get(l))
            .map(|e| {
                e.holders().filter(|h| h.session == session).count()
                    + e.queue.iter().filter(|w| w.session == session).count()
            })
            .sum()
    }

    /// How many locks administrators took from their holders, over the cluster's life.
    pub fn forced_releases(&self) -> u64 {
        self.forced
    }

    /// How many lock ids have a holder or a queue.
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }

    /// At most `limit` locks whose ids start with `prefix` and sort after `after`, in id
    /// order, with their holders and queues; and whether more match. A holder's `held_ms` is
    /// left for the node to fill: the table keeps no time.
    pub fn list(&self, prefix: &str, after: Option<&str>, limit: usize) -> (Vec<LockInfo>, bool) {
        use std::ops::Bound;
        let start = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        let identity =
            |session: SessionId| self.sessions.get(&session).and_then(|s| s.identity.clone());
        let mut matching = self
            .locks
            .range((start, Bound::Unbounded))
            .take_while(|(id, _)| id.starts_with(prefix));
        let locks: Vec<LockInfo> = matching
            .by_ref()
            .take(limit)
            .map(|(id, e)| LockInfo {
                lock: id.clone(),
                holders: e
                    .holders()
                    .map(|h| HolderInfo {
                        session: h.session,
                        identity: identity(h.session),
                        owner: h.owner.clone(),
                        token: h.token,
                        share: h.share,
                        held_ms: None,
                    })
                    .collect(),
                waiters: e
                    .queue
                    .iter()
                    .map(|w| WaiterInfo {
                        session: w.session,
                        identity: identity(w.session),
                        owner: w.owner.clone(),
                        share: w.share,
                    })
                    .collect(),
            })
            .collect();
        (locks, matching.next().is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(session: SessionId, owner: &str, wait: bool) -> Command {
        ask(session, owner, wait, 1)
    }

    fn ask(session: SessionId, owner: &str, wait: bool, attempt: u64) -> Command {
        Command::Acquire {
            session,
            lock: "l".into(),
            owner: owner.into(),
            wait,
            attempt,
            by: None,
            share: Share::Exclusive,
            value: None,
            max_asks: None,
        }
    }

    fn release(session: SessionId, owner: &str) -> Command {
        give_up(session, owner, 1)
    }

    fn give_up(session: SessionId, owner: &str, attempt: u64) -> Command {
        Command::Release { session, lock: "l".into(), owner: owner.into(), attempt, by: None }
    }

    fn granted(session: SessionId, owner: &str, token: u64, attempt: u64) -> Event {
        Event::Granted { session, lock: "l".into(), owner: owner.into(), token, attempt }
    }

    /// What a command that changes nothing leaves as it was: everything but the last stamp.
    fn locks_and_sessions(t: &LockTable) -> LockTable {
        LockTable { stamp: 0, ..t.clone() }
    }

    /// Two sessions opened at indexes 1 and 2.
    fn two_sessions() -> LockTable {
        let mut t = LockTable::default();
        let mut ev = Vec::new();
        assert_eq!(
            t.apply(
                1,
                &Command::Open { ttl_ms: 1000, identity: None, key: None, max_sessions: None },
                &mut ev
            ),
            Outcome::Opened(1)
        );
        assert_eq!(
            t.apply(
                2,
                &Command::Open { ttl_ms: 1000, identity: None, key: None, max_sessions: None },
                &mut ev
            ),
            Outcome::Opened(2)
        );
        t
    }

    #[test]
    fn release_hands_the_lock_to_the_first_waiter_in_the_same_entry() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        t.apply(
            3,
            &Command::Open { ttl_ms: 1000, identity: None, key: None, max_sessions: None },
            &mut ev,
        );
        assert_eq!(t.apply(4, &acquire(1, "a", true), &mut ev), Outcome::Granted(4));
        assert_eq!(t.apply(5, &acquire(2, "b", true), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(6, &acquire(3, "c", true), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(7, &acquire(3, "c", false), &mut ev), Outcome::Queued, "retry");
        assert!(ev.is_empty());
        assert_eq!(t.apply(8, &release(1, "a"), &mut ev), Outcome::Released);
        assert_eq!(ev, vec![granted(2, "b", 8, 1)]);
        assert_eq!(t.held_by(2), vec![("l".into(), "b".into(), 8, 1)]);
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
        t.apply(
            3,
            &Command::Open { ttl_ms: 1000, identity: None, key: None, max_sessions: None },
            &mut ev,
        );
        t.apply(4, &acquire(1, "a", true), &mut ev);
        t.apply(5, &acquire(2, "b", true), &mut ev);
        t.apply(6, &acquire(3, "c", true), &mut ev);
        assert_eq!(t.apply(7, &Command::Expire { session: 2 }, &mut ev), Outcome::Ended);
        assert_eq!(t.apply(8, &Command::Expire { session: 1 }, &mut ev), Outcome::Ended);
        let grants: Vec<_> =
            ev.iter().filter(|e| matches!(e, Event::Granted { .. })).cloned().collect();
        assert_eq!(grants, vec![granted(3, "c", 8, 1)]);
        assert_eq!(t.apply(9, &acquire(1, "a", true), &mut ev), Outcome::SessionGone);
        assert_eq!(
            t.apply(10, &Command::Close { session: 1, by: None }, &mut ev),
            Outcome::SessionGone
        );
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

    /// Commands sharing an entry each get a stamp of their own: distinct session ids, tokens
    /// rising within the entry and past it, and a handoff in a batch granted with a greater
    /// token than the grant it follows.
    #[test]
    fn a_batch_stamps_each_command_on_from_its_entry_and_later_entries_go_on_past_it() {
        let mut t = LockTable::default();
        let mut ev = Vec::new();
        let open = Command::Open { ttl_ms: 1000, identity: None, key: None, max_sessions: None };
        assert_eq!(
            t.apply(5, &Command::Batch(vec![open.clone(), open.clone(), open.clone()]), &mut ev),
            Outcome::Batch(vec![Outcome::Opened(5), Outcome::Opened(6), Outcome::Opened(7)])
        );
        // The next entry's index (6) is below the stamps taken: it goes on from the last.
        assert_eq!(t.apply(6, &acquire(5, "a", true), &mut ev), Outcome::Granted(8));
        let batch = Command::Batch(vec![
            acquire(6, "b", true),
            release(5, "a"),
            acquire(7, "c", false),
            Command::Release {
                session: 7,
                lock: "m".into(),
                owner: "c".into(),
                attempt: 1,
                by: None,
            },
        ]);
        assert_eq!(
            t.apply(7, &batch, &mut ev),
            Outcome::Batch(vec![
                Outcome::Queued,
                Outcome::Released,
                Outcome::Busy,
                Outcome::NotHeld
            ])
        );
        assert_eq!(ev, vec![granted(6, "b", 10, 1)], "the handoff takes the release's stamp");
        // A later entry whose index is past every stamp is stamped with its index again.
        assert_eq!(t.apply(100, &Command::Expire { session: 6 }, &mut ev), Outcome::Ended);
        assert_eq!(t.apply(101, &acquire(7, "c", true), &mut ev), Outcome::Granted(101));
        let t2: LockTable = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(t2, t, "the last stamp is in the snapshot");
    }

    #[test]
    fn a_new_ask_takes_the_queue_place_of_one_given_up_on_and_its_late_release_changes_nothing() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        t.apply(3, &acquire(1, "a", true), &mut ev);
        // b asks (1), gives up, and asks again (2) before its first ask's release arrives.
        assert_eq!(t.apply(4, &ask(2, "b", true, 1), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(5, &ask(2, "b", true, 2), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(6, &give_up(2, "b", 1), &mut ev), Outcome::NotHeld, "late release");
        assert_eq!(t.apply(7, &release(1, "a"), &mut ev), Outcome::Released);
        assert_eq!(ev, vec![granted(2, "b", 7, 2)], "the grant answers the second ask");
        assert_eq!(t.apply(8, &give_up(2, "b", 2), &mut ev), Outcome::Released);
        assert_eq!(t.lock_count(), 0);
    }

    #[test]
    fn a_newer_ask_of_a_holder_gives_the_old_grant_up_and_gets_a_token_of_its_own() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        assert_eq!(t.apply(3, &ask(1, "a", true, 1), &mut ev), Outcome::Granted(3));
        assert_eq!(t.apply(4, &ask(2, "b", true, 1), &mut ev), Outcome::Queued);
        // a's release of token 3 had an unknown outcome (it never committed) and a asks again:
        // token 3 goes to b, the next waiter, and a queues behind it.
        assert_eq!(t.apply(5, &ask(1, "a", true, 2), &mut ev), Outcome::Queued);
        assert_eq!(ev, vec![granted(2, "b", 5, 1)]);
        assert_eq!(t.held_by(1), vec![]);
        assert_eq!(t.apply(6, &ask(1, "a", true, 2), &mut ev), Outcome::Queued, "retry");
        // The first ask, arriving late again, changes nothing.
        let before = t.clone();
        assert_eq!(t.apply(7, &ask(1, "a", true, 1), &mut ev), Outcome::Superseded);
        assert_eq!(locks_and_sessions(&t), locks_and_sessions(&before));
        ev.clear();
        assert_eq!(t.apply(8, &give_up(2, "b", 1), &mut ev), Outcome::Released);
        assert_eq!(ev, vec![granted(1, "a", 8, 2)]);
        // With nobody waiting, a newer ask (a soft one here) is granted at once, in the entry
        // that gives the older grant up: a greater token, never the old one again.
        ev.clear();
        assert_eq!(t.apply(9, &ask(1, "a", false, 3), &mut ev), Outcome::Granted(9));
        assert!(ev.is_empty(), "nobody else to grant: {ev:?}");
        assert_eq!(t.apply(10, &ask(1, "a", false, 3), &mut ev), Outcome::Granted(9), "retry");
        assert_eq!(t.apply(11, &give_up(1, "a", 2), &mut ev), Outcome::NotHeld, "late release");
        assert_eq!(t.held_by(1), vec![("l".into(), "a".into(), 9, 3)]);
        assert_eq!(t.apply(12, &ask(1, "a", true, 2), &mut ev), Outcome::Superseded);
        // A newer soft ask cannot wait: an older waiting ask of its owner leaves the queue.
        assert_eq!(t.apply(13, &ask(2, "b", true, 2), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(14, &ask(2, "b", false, 3), &mut ev), Outcome::Busy);
        assert_eq!(t.asks_of(2), 0);
        assert_eq!(t.apply(15, &give_up(1, "a", 3), &mut ev), Outcome::Released);
        assert_eq!(t.lock_count(), 0);
    }

    proptest::proptest! {
        /// Whatever the order in which asks, retries and releases of two owners' asks commit,
        /// a grant (its token) answers one ask only, and tokens rise in grant order.
        #[test]
        fn a_grant_answers_one_ask_only(
            steps in proptest::collection::vec((0..4usize, 1..5u64, 0..3u8), 1..60)
        ) {
            let mut t = two_sessions();
            let mut answered: BTreeMap<u64, (SessionId, String, u64)> = BTreeMap::new();
            let mut last = 0;
            for (i, (who, attempt, what)) in steps.into_iter().enumerate() {
                let index = 3 + i as u64;
                let (session, owner) = [(1, "a"), (1, "b"), (2, "a"), (2, "c")][who];
                let command = match what {
                    0 => ask(session, owner, true, attempt),
                    1 => ask(session, owner, false, attempt),
                    _ => give_up(session, owner, attempt),
                };
                let mut ev = Vec::new();
                let mut grants = Vec::new();
                if let Outcome::Granted(token) = t.apply(index, &command, &mut ev) {
                    grants.push((token, (session, owner.to_string(), attempt)));
                }
                for e in ev {
                    if let Event::Granted { session, owner, token, attempt, .. } = e {
                        grants.push((token, (session, owner, attempt)));
                    }
                }
                for (token, ask) in grants {
                    let first = answered.entry(token).or_insert_with(|| ask.clone());
                    proptest::prop_assert_eq!(&*first, &ask, "token {} answered twice", token);
                    if token > last {
                        proptest::prop_assert_eq!(token, index, "a new grant's token");
                        last = token;
                    }
                }
            }
        }
    }

    #[test]
    fn a_session_belongs_to_the_identity_that_opened_it() {
        let mut t = LockTable::default();
        let mut ev = Vec::new();
        let open = Command::Open {
            ttl_ms: 1000,
            identity: Some("alice".into()),
            key: None,
            max_sessions: None,
        };
        assert_eq!(t.apply(1, &open, &mut ev), Outcome::Opened(1));
        let as_ = |by: Option<&str>, c: Command| match c {
            Command::Acquire { session, lock, owner, wait, attempt, share, value, .. } => {
                let by = by.map(Into::into);
                Command::Acquire {
                    session,
                    lock,
                    owner,
                    wait,
                    attempt,
                    by,
                    share,
                    value,
                    max_asks: None,
                }
            }
            Command::Release { session, lock, owner, attempt, .. } => {
                Command::Release { session, lock, owner, attempt, by: by.map(Into::into) }
            }
            other => other,
        };
        assert_eq!(
            t.apply(2, &as_(Some("alice"), acquire(1, "a", true)), &mut ev),
            Outcome::Granted(2)
        );
        let before = t.clone();
        for by in [Some("mallory"), None] {
            assert_eq!(t.apply(3, &as_(by, release(1, "a")), &mut ev), Outcome::Forbidden);
            assert_eq!(t.apply(3, &as_(by, acquire(1, "m", true)), &mut ev), Outcome::Forbidden);
            let close = Command::Close { session: 1, by: by.map(Into::into) };
            assert_eq!(t.apply(3, &close, &mut ev), Outcome::Forbidden);
        }
        assert_eq!(
            locks_and_sessions(&t),
            locks_and_sessions(&before),
            "a refused command changes nothing"
        );
        assert!(ev.is_empty());
        assert_eq!(t.identity_of(1), Some(Some("alice")));
        assert_eq!(t.sessions_of(Some("alice")), 1);
        assert_eq!(t.asks_of(1), 1);
        assert_eq!(t.apply(4, &as_(Some("alice"), release(1, "a")), &mut ev), Outcome::Released);
    }

    /// A limit carried in a command is counted in log order: the command past it changes
    /// nothing, whatever was in flight when the leader proposed it.
    #[test]
    fn a_command_past_its_limit_changes_nothing() {
        let mut t = LockTable::default();
        let mut ev = Vec::new();
        let open = |identity: Option<&str>| Command::Open {
            ttl_ms: 1000,
            identity: identity.map(Into::into),
            key: Some(crate::auth::token_hash("k")),
            max_sessions: Some(2),
        };
        assert_eq!(t.apply(1, &open(Some("alice")), &mut ev), Outcome::Opened(1));
        assert_eq!(t.apply(2, &open(Some("alice")), &mut ev), Outcome::Opened(2));
        let before = locks_and_sessions(&t);
        assert_eq!(t.apply(3, &open(Some("alice")), &mut ev), Outcome::LimitReached);
        assert_eq!(locks_and_sessions(&t), before);
        assert_eq!(t.apply(4, &open(Some("bob")), &mut ev), Outcome::Opened(4));
        assert_eq!(t.key_of(4), Some(Some(crate::auth::token_hash("k").as_str())));
        let limited = |lock: &str, attempt| Command::Acquire {
            session: 4,
            lock: lock.into(),
            owner: "o".into(),
            wait: true,
            attempt,
            by: Some("bob".into()),
            share: Share::Exclusive,
            value: None,
            max_asks: Some(1),
        };
        assert_eq!(t.apply(5, &limited("l", 1), &mut ev), Outcome::Granted(5));
        let before = locks_and_sessions(&t);
        assert_eq!(t.apply(6, &limited("m", 1), &mut ev), Outcome::LimitReached);
        assert_eq!(locks_and_sessions(&t), before);
        // Asking again for a lock the owner holds is not a new ask.
        assert_eq!(t.apply(7, &limited("l", 2), &mut ev), Outcome::Granted(7));
        assert!(ev.is_empty(), "{ev:?}");
        // An entry written before limits and keys reads as without them.
        let old: Command = serde_json::from_str(r#"{"Open":{"ttl_ms":1000}}"#).unwrap();
        assert_eq!(t.apply(8, &old, &mut ev), Outcome::Opened(8));
        assert_eq!(t.key_of(8), Some(None));
    }

    #[test]
    fn a_forced_release_tells_the_holder_and_grants_the_next_waiter() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        t.apply(3, &acquire(1, "a", true), &mut ev);
        t.apply(4, &acquire(2, "b", true), &mut ev);
        let force = Command::ForceRelease { lock: "l".into(), by: "root".into() };
        assert_eq!(t.apply(5, &force, &mut ev), Outcome::Released);
        let revoked = Event::Revoked {
            session: 1,
            lock: "l".into(),
            owner: "a".into(),
            token: 3,
            by: "root".into(),
        };
        assert_eq!(ev, vec![revoked, granted(2, "b", 5, 1)]);
        assert_eq!(t.forced_releases(), 1);
        assert_eq!(t.held_by(1), vec![]);
        assert_eq!(t.asks_of(1), 0);
        assert_eq!(
            t.apply(6, &release(1, "a"), &mut ev),
            Outcome::NotHeld,
            "the old holder's release"
        );
        assert_eq!(t.held_by(2), vec![("l".into(), "b".into(), 5, 1)]);
        let mut ev = Vec::new();
        t.apply(7, &release(2, "b"), &mut ev);
        assert_eq!(t.apply(8, &force, &mut ev), Outcome::NotHeld);
        assert_eq!(t.forced_releases(), 1);
    }

    #[test]
    fn entries_written_before_asks_were_told_apart_still_read() {
        let old = r#"{"Acquire":{"session":1,"lock":"l","owner":"a","wait":true}}"#;
        let command: Command = serde_json::from_str(old).unwrap();
        assert_eq!(command, ask(1, "a", true, 0));
    }

    fn shared(session: SessionId, owner: &str, share: Share, wait: bool) -> Command {
        Command::Acquire {
            session,
            lock: "l".into(),
            owner: owner.into(),
            wait,
            attempt: 1,
            by: None,
            share,
            value: None,
            max_asks: None,
        }
    }

    const READ: Share = Share::Read;
    const WRITE: Share = Share::Exclusive;

    #[test]
    fn readers_share_and_a_reader_behind_a_waiting_writer_waits_for_it() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        assert_eq!(t.apply(3, &shared(1, "r1", READ, true), &mut ev), Outcome::Granted(3));
        assert_eq!(t.apply(4, &shared(2, "r2", READ, true), &mut ev), Outcome::Granted(4));
        assert_eq!(t.apply(5, &shared(1, "w", WRITE, true), &mut ev), Outcome::Queued);
        // First come, first served: a reader after the waiting writer does not join the
        // readers; a soft one is answered busy.
        assert_eq!(t.apply(6, &shared(2, "r3", READ, true), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(7, &shared(2, "r4", READ, false), &mut ev), Outcome::Busy);
        assert!(ev.is_empty());
        assert_eq!(t.apply(8, &release(1, "r1"), &mut ev), Outcome::Released);
        assert!(ev.is_empty(), "the writer waits for every reader: {ev:?}");
        assert_eq!(t.apply(9, &release(2, "r2"), &mut ev), Outcome::Released);
        assert_eq!(ev, vec![granted(1, "w", 9, 1)]);
        ev.clear();
        assert_eq!(t.apply(10, &release(1, "w"), &mut ev), Outcome::Released);
        assert_eq!(ev, vec![granted(2, "r3", 10, 1)]);
        assert_eq!(t.held_by(2), vec![("l".to_string(), "r3".to_string(), 10, 1)]);
    }

    #[test]
    fn a_writer_hands_over_to_every_reader_up_to_the_next_writer_in_one_command() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        assert_eq!(t.apply(3, &shared(1, "w1", WRITE, true), &mut ev), Outcome::Granted(3));
        for (i, (owner, share)) in
            [("r1", READ), ("r2", READ), ("w2", WRITE), ("r3", READ)].into_iter().enumerate()
        {
            let at = 4 + i as u64;
            assert_eq!(t.apply(at, &shared(2, owner, share, true), &mut ev), Outcome::Queued);
        }
        assert_eq!(t.apply(8, &release(1, "w1"), &mut ev), Outcome::Released);
        // One commit, one token: the readers were granted together.
        assert_eq!(ev, vec![granted(2, "r1", 8, 1), granted(2, "r2", 8, 1)]);
        assert_eq!(t.asks_of(2), 4);
        ev.clear();
        assert_eq!(t.apply(9, &release(2, "r1"), &mut ev), Outcome::Released);
        assert_eq!(t.apply(10, &release(2, "r2"), &mut ev), Outcome::Released);
        assert_eq!(ev, vec![granted(2, "w2", 10, 1)]);
    }

    #[test]
    fn permits_are_granted_in_queue_order_with_a_token_each() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        let permits = |count| Share::Permits { count, limit: 3 };
        // Two permits: tokens 4 and 5, stamps of their own past the command's 3, so the next
        // command is stamped 6.
        assert_eq!(t.apply(3, &shared(1, "a", permits(2), true), &mut ev), Outcome::Granted(4));
        assert_eq!(t.stamp, 5);
        assert_eq!(t.apply(4, &shared(1, "b", permits(2), true), &mut ev), Outcome::Queued);
        assert_eq!(t.stamp, 6);
        // One permit is free, but the ask of two ahead is not passed.
        assert_eq!(t.apply(6, &shared(2, "c", permits(1), true), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(7, &shared(2, "d", permits(1), false), &mut ev), Outcome::Busy);
        assert_eq!(t.apply(8, &release(1, "a"), &mut ev), Outcome::Released);
        // b's two permits and c's one, in one command, each with tokens of its own.
        assert_eq!(ev, vec![granted(1, "b", 10, 1), granted(2, "c", 12, 1)]);
        assert_eq!(t.stamp, 12);
        assert_eq!(t.apply(9, &release(2, "c"), &mut ev), Outcome::Released);
        assert_eq!(t.stamp, 13, "stamps stay above every permit's token");
    }

    #[test]
    fn an_ask_of_another_kind_or_size_is_refused_and_changes_nothing() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        let three = Share::Permits { count: 1, limit: 3 };
        assert_eq!(t.apply(3, &shared(1, "a", three, true), &mut ev), Outcome::Granted(4));
        let before = locks_and_sessions(&t);
        let four = Share::Permits { count: 1, limit: 4 };
        assert_eq!(t.apply(4, &shared(2, "b", four, true), &mut ev), Outcome::Mismatch(three));
        assert_eq!(t.apply(5, &shared(2, "b", READ, true), &mut ev), Outcome::Mismatch(three));
        assert_eq!(t.apply(6, &shared(2, "b", WRITE, false), &mut ev), Outcome::Mismatch(three));
        assert_eq!(locks_and_sessions(&t), before);
        assert!(ev.is_empty());
    }

    #[test]
    fn an_ended_readers_session_frees_its_share_for_the_writer() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        assert_eq!(t.apply(3, &shared(1, "r", READ, true), &mut ev), Outcome::Granted(3));
        assert_eq!(t.apply(4, &shared(2, "w", WRITE, true), &mut ev), Outcome::Queued);
        assert_eq!(t.apply(5, &Command::Expire { session: 1 }, &mut ev), Outcome::Ended);
        assert_eq!(ev[0], granted(2, "w", 5, 1));
        assert_eq!(t.lock_count(), 1);
    }

    #[test]
    fn a_mutex_ask_says_nothing_of_its_share_on_the_wire() {
        let json = serde_json::to_string(&ask(1, "a", true, 2)).unwrap();
        assert!(!json.contains("share"), "{json}");
        let read = serde_json::to_string(&shared(1, "a", READ, true)).unwrap();
        assert_eq!(serde_json::from_str::<Command>(&read).unwrap(), shared(1, "a", READ, true));
    }

    fn campaign(session: SessionId, owner: &str, value: &[u8]) -> Command {
        Command::Acquire {
            session,
            lock: "l".into(),
            owner: owner.into(),
            wait: true,
            attempt: 1,
            by: None,
            share: Share::Exclusive,
            value: Some(value.to_vec()),
            max_asks: None,
        }
    }

    fn leader(owner: &str, value: &[u8], term: u64) -> Event {
        let leader = Some(LeaderInfo { owner: owner.into(), value: value.to_vec(), term });
        Event::Leader { lock: "l".into(), leader }
    }

    #[test]
    fn an_election_announces_each_leader_its_values_and_vacancies_in_their_commits() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        assert_eq!(t.apply(3, &campaign(1, "a", b"a:1"), &mut ev), Outcome::Granted(3));
        assert_eq!(ev, vec![leader("a", b"a:1", 3)]);
        ev.clear();
        assert_eq!(t.apply(4, &campaign(2, "b", b"b:1"), &mut ev), Outcome::Queued);
        assert!(ev.is_empty(), "a waiting candidate changes nothing: {ev:?}");
        let proclaim = |session, owner: &str, value: &[u8]| Command::Proclaim {
            session,
            lock: "l".into(),
            owner: owner.into(),
            attempt: 1,
            value: value.to_vec(),
            by: None,
        };
        assert_eq!(t.apply(5, &proclaim(2, "b", b"usurper"), &mut ev), Outcome::NotHeld);
        assert_eq!(t.apply(6, &proclaim(1, "a", b"a:2"), &mut ev), Outcome::Proclaimed);
        assert_eq!(ev, vec![leader("a", b"a:2", 3)]);
        assert_eq!(t.leader_of("l").map(|l| l.value), Some(b"a:2".to_vec()));
        ev.clear();
        // The resignation elects the next candidate in the same commit.
        assert_eq!(t.apply(7, &release(1, "a"), &mut ev), Outcome::Released);
        assert_eq!(ev, vec![granted(2, "b", 7, 1), leader("b", b"b:1", 7)]);
        ev.clear();
        assert_eq!(t.apply(8, &Command::Expire { session: 2 }, &mut ev), Outcome::Ended);
        assert!(ev.contains(&Event::Leader { lock: "l".into(), leader: None }), "{ev:?}");
        assert_eq!(t.leader_of("l"), None);
    }

    #[test]
    fn a_plain_lock_leads_nothing_and_announces_nothing() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        assert_eq!(t.apply(3, &acquire(1, "a", true), &mut ev), Outcome::Granted(3));
        assert_eq!(t.apply(4, &release(1, "a"), &mut ev), Outcome::Released);
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(t.leader_of("l"), None);
    }

    #[test]
    fn a_listing_pages_through_the_locks_of_a_prefix_with_holders_and_queues() {
        let mut t = two_sessions();
        let mut ev = Vec::new();
        let on = |lock: &str, session, owner: &str| Command::Acquire {
            session,
            lock: lock.into(),
            owner: owner.into(),
            wait: true,
            attempt: 1,
            by: None,
            max_asks: None,
            share: Share::Exclusive,
            value: None,
        };
        for (i, lock) in ["a.1", "a.2", "a.3", "b.1"].into_iter().enumerate() {
            assert_eq!(
                t.apply(3 + i as u64, &on(lock, 1, "x"), &mut ev),
                Outcome::Granted(3 + i as u64)
            );
        }
        assert_eq!(t.apply(7, &on("a.2", 2, "y"), &mut ev), Outcome::Queued);
        let (page, more) = t.list("a.", None, 2);
        assert!(more);
        let ids: Vec<_> = page.iter().map(|l| l.lock.as_str()).collect();
        assert_eq!(ids, ["a.1", "a.2"]);
        assert_eq!(page[1].holders.len(), 1);
        assert_eq!((page[1].holders[0].session, page[1].holders[0].token), (1, 4));
        assert_eq!(page[1].waiters.len(), 1);
        assert_eq!((page[1].waiters[0].session, page[1].waiters[0].owner.as_str()), (2, "y"));
        let (rest, more) = t.list("a.", Some("a.2"), 2);
        assert!(!more);
        assert_eq!(rest.iter().map(|l| l.lock.as_str()).collect::<Vec<_>>(), ["a.3"]);
        assert_eq!(t.list("", None, 10).0.len(), 4);
        assert!(t.list("c", None, 10).0.is_empty());
        // An `after` before the prefix starts at the prefix.
        assert_eq!(t.list("b.", Some("a.9"), 10).0.len(), 1);
    }
}
