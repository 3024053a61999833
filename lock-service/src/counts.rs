//! What a node counts as it applies the committed log, for its metrics
//! ([`crate::server::metrics`]): grants, releases, expirations and forced releases, wait and
//! hold times, and when each current grant was applied ([`GrantTimes`]). Counted beside the
//! state machine from each command's [`Outcome`] and [`Event`]s, with a mirror of who holds
//! or waits since when, so that the table itself ([`LockTable::apply`]) reads no clock and a
//! retried ask is not counted twice. Node-local: every node counts what it applies, on its own
//! monotonic clock; nothing of it is replicated. Below `raft` and `log`, which feed it, and
//! the `server`, which reads it.

use crate::proto::SessionId;
use crate::state::{Command, Event, LockTable, Outcome};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A histogram for waits and holds: from a millisecond to about an hour, four times wider
/// each bucket.
fn long_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 4.0, 12))
}

/// A histogram for commits and syncs: from 50 µs to over a second and a half, twice wider
/// each bucket.
pub(crate) fn short_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

fn seconds(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The figures counted where entries are applied (see the module docs).
#[derive(Clone)]
pub(crate) struct ApplyMetrics {
    pub(crate) grants: Counter,
    pub(crate) releases: Counter,
    pub(crate) expirations: Counter,
    pub(crate) forced: Counter,
    pub(crate) wait: Histogram,
    pub(crate) hold: Histogram,
}

impl Default for ApplyMetrics {
    fn default() -> Self {
        ApplyMetrics {
            grants: Counter::default(),
            releases: Counter::default(),
            expirations: Counter::default(),
            forced: Counter::default(),
            wait: long_histogram(),
            hold: long_histogram(),
        }
    }
}

/// One ask this node saw applied: holding (with its first token) or queued (since when, if
/// this node saw it queue).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ask {
    Held(u64),
    Queued(Option<Instant>),
}

/// One session's asks, by lock and owner.
#[derive(Default)]
struct SessionAsks {
    asks: HashMap<String, Vec<(String, Ask)>>,
    /// Places in queues loaded from a snapshot: the table lists a session's holds but not its
    /// queue places, so these are counted until they are granted, left or ended.
    unnamed_queued: usize,
}

/// The apply path's mirror of the asks, the grants' instants, and its figures.
#[derive(Default)]
pub(crate) struct Tracker {
    sessions: HashMap<SessionId, SessionAsks>,
    /// Every current grant: lock id → (first token, when this node applied it).
    grants: HashMap<String, Vec<(u64, Instant)>>,
    held: usize,
    queued: usize,
    metrics: ApplyMetrics,
}

impl Tracker {
    /// The figures this tracker counts into.
    pub(crate) fn metrics(&self) -> ApplyMetrics {
        self.metrics.clone()
    }

    /// The grants held and the asks queued.
    pub(crate) fn asks(&self) -> (usize, usize) {
        (self.held, self.queued)
    }

    /// Start over from `table`, loaded at `now` (a snapshot): its grants count from `now`.
    pub(crate) fn load(&mut self, table: &LockTable, now: Instant) {
        self.sessions.clear();
        self.grants.clear();
        self.held = 0;
        self.queued = 0;
        let sessions: Vec<SessionId> = table.sessions().map(|(s, _)| s).collect();
        for session in sessions {
            let held = table.held_by(session);
            let unnamed = table.asks_of(session).saturating_sub(held.len());
            for (lock, owner, token, _) in held {
                self.insert(session, &lock, &owner, Ask::Held(token));
                self.grants.entry(lock).or_default().push((token, now));
            }
            if unnamed > 0 {
                self.sessions.entry(session).or_default().unnamed_queued = unnamed;
                self.queued += unnamed;
            }
        }
    }

    /// Apply `command` to `table` as [`LockTable::apply`] does, and count what it did. A
    /// batch is applied here command by command, as [`LockTable::apply`] applies it (each
    /// with the next stamp), so that each command is counted with its own events.
    pub(crate) fn apply(
        &mut self,
        table: &mut LockTable,
        index: u64,
        command: &Command,
        events: &mut Vec<Event>,
        now: Instant,
    ) -> Outcome {
        if let Command::Batch(commands) = command {
            let outcomes = commands.iter().map(|c| self.apply(table, index, c, events, now));
            return Outcome::Batch(outcomes.collect());
        }
        let asked = match command {
            Command::Acquire { session, lock, owner, .. } if self.has_unnamed(*session) => {
                table.is_asking(*session, lock, owner)
            }
            _ => false,
        };
        let from = events.len();
        let outcome = table.apply(index, command, events);
        self.applied(command, &outcome, &events[from..], asked, now);
        outcome
    }

    /// Whether `session` has queue places this node cannot name (loaded from a snapshot): the
    /// apply path then asks the table, before an ask of it, whether its owner already asked.
    fn has_unnamed(&self, session: SessionId) -> bool {
        self.sessions.get(&session).is_some_and(|s| s.unnamed_queued > 0)
    }

    fn get(&self, session: SessionId, lock: &str, owner: &str) -> Option<Ask> {
        let list = self.sessions.get(&session)?.asks.get(lock)?;
        list.iter().find(|(o, _)| o == owner).map(|(_, a)| *a)
    }

    fn insert(&mut self, session: SessionId, lock: &str, owner: &str, ask: Ask) {
        match ask {
            Ask::Held(_) => self.held += 1,
            Ask::Queued(_) => self.queued += 1,
        }
        let asks = &mut self.sessions.entry(session).or_default().asks;
        let entry = (owner.to_string(), ask);
        match asks.get_mut(lock) {
            Some(list) => list.push(entry),
            None => {
                asks.insert(lock.to_string(), vec![entry]);
            }
        }
    }

    fn remove(&mut self, session: SessionId, lock: &str, owner: &str) -> Option<Ask> {
        let asks = &mut self.sessions.get_mut(&session)?.asks;
        let list = asks.get_mut(lock)?;
        let at = list.iter().position(|(o, _)| o == owner)?;
        let (_, ask) = list.swap_remove(at);
        if list.is_empty() {
            asks.remove(lock);
        }
        match ask {
            Ask::Held(_) => self.held -= 1,
            Ask::Queued(_) => self.queued -= 1,
        }
        Some(ask)
    }

    /// An ask of `session` that this node does not know, but that the table says waits: one
    /// of the session's unnamed places, now named.
    fn name_unnamed(&mut self, session: SessionId, lock: &str, owner: &str) {
        if self.get(session, lock, owner).is_some() {
            return;
        }
        let Some(s) = self.sessions.get_mut(&session).filter(|s| s.unnamed_queued > 0) else {
            return;
        };
        s.unnamed_queued -= 1;
        self.queued -= 1;
        self.insert(session, lock, owner, Ask::Queued(None));
    }

    fn start_grant(
        &mut self,
        session: SessionId,
        lock: &str,
        owner: &str,
        token: u64,
        now: Instant,
    ) {
        self.insert(session, lock, owner, Ask::Held(token));
        match self.grants.get_mut(lock) {
            Some(list) => list.push((token, now)),
            None => {
                self.grants.insert(lock.to_string(), vec![(token, now)]);
            }
        }
        self.metrics.grants.inc();
    }

    fn end_grant(&mut self, lock: &str, token: u64, now: Instant) {
        let Some(list) = self.grants.get_mut(lock) else {
            return;
        };
        if let Some(at) = list.iter().position(|(t, _)| *t == token) {
            let (_, since) = list.swap_remove(at);
            self.metrics.hold.observe(seconds(now.saturating_duration_since(since)));
        }
        if list.is_empty() {
            self.grants.remove(lock);
        }
    }

    /// `command` (not a batch) was applied at `now`, with `outcome` and `events`; `asked` is
    /// whether, before it, the table had its owner asking for its lock (looked up only when
    /// [`Tracker::has_unnamed`]).
    fn applied(
        &mut self,
        command: &Command,
        outcome: &Outcome,
        events: &[Event],
        asked: bool,
        now: Instant,
    ) {
        match (command, outcome) {
            (Command::Acquire { session, lock, owner, .. }, _) => {
                if asked {
                    self.name_unnamed(*session, lock, owner);
                }
                self.acquired(*session, lock, owner, outcome, now);
            }
            (Command::Release { session, lock, owner, .. }, Outcome::Released) => {
                if let Some(Ask::Held(token)) = self.remove(*session, lock, owner) {
                    self.end_grant(lock, token, now);
                }
                self.metrics.releases.inc();
            }
            (Command::Release { session, lock, owner, .. }, Outcome::Cancelled) => {
                self.name_unnamed(*session, lock, owner);
                self.remove(*session, lock, owner);
            }
            (Command::Close { session, .. }, Outcome::Ended) => self.end_session(*session, now),
            (Command::Expire { session }, Outcome::Ended) => {
                self.metrics.expirations.inc();
                self.end_session(*session, now);
            }
            _ => {}
        }
        for event in events {
            match event {
                Event::Granted { session, lock, owner, token, .. } => {
                    self.name_unnamed(*session, lock, owner);
                    match self.remove(*session, lock, owner) {
                        Some(Ask::Queued(Some(since))) => {
                            self.metrics.wait.observe(seconds(now.saturating_duration_since(since)))
                        }
                        Some(Ask::Held(older)) => self.end_grant(lock, older, now),
                        _ => {}
                    }
                    self.start_grant(*session, lock, owner, *token, now);
                }
                Event::Revoked { session, lock, owner, .. } => {
                    self.metrics.forced.inc();
                    if let Some(Ask::Held(token)) = self.remove(*session, lock, owner) {
                        self.end_grant(lock, token, now);
                    }
                }
                Event::Leader { .. } | Event::Ended { .. } => {}
            }
        }
    }

    /// An ask was applied with `outcome`. What the owner held or waited for before either
    /// stands (a retry, a late ask) or was given up for this ask (see `state`'s module docs).
    fn acquired(
        &mut self,
        session: SessionId,
        lock: &str,
        owner: &str,
        outcome: &Outcome,
        now: Instant,
    ) {
        match (self.get(session, lock, owner), outcome) {
            // Nothing changed.
            (
                _,
                Outcome::Superseded
                | Outcome::Forbidden
                | Outcome::SessionGone
                | Outcome::LimitReached,
            ) => return,
            // The same grant, or the same place, answered again.
            (Some(Ask::Held(token)), Outcome::Granted(again)) if token == *again => return,
            (Some(Ask::Queued(_)), Outcome::Queued) => return,
            _ => {}
        }
        // Any other answer means the owner's earlier ask was given up first.
        if let Some(Ask::Held(token)) = self.remove(session, lock, owner) {
            self.metrics.releases.inc();
            self.end_grant(lock, token, now);
        }
        match outcome {
            Outcome::Granted(token) => self.start_grant(session, lock, owner, *token, now),
            Outcome::Queued => self.insert(session, lock, owner, Ask::Queued(Some(now))),
            _ => {}
        }
    }

    fn end_session(&mut self, session: SessionId, now: Instant) {
        let Some(s) = self.sessions.remove(&session) else {
            return;
        };
        self.queued -= s.unnamed_queued;
        for (lock, list) in s.asks {
            for (_, ask) in list {
                match ask {
                    Ask::Held(token) => {
                        self.held -= 1;
                        self.end_grant(&lock, token, now);
                    }
                    Ask::Queued(_) => self.queued -= 1,
                }
            }
        }
    }
}

/// When each current grant was applied on this node, on its monotonic clock: lock id and
/// first fencing token to the instant (the readers one command grants share its token, and
/// its instant). Node-local (each node reads its own clock as it
/// applies the grant; a grant loaded from a snapshot counts from the load), and bounded by
/// the grants held: a grant's record goes when the grant ends.
#[derive(Clone)]
pub struct GrantTimes {
    tracker: Arc<Mutex<Tracker>>,
}

impl GrantTimes {
    pub(crate) fn new(tracker: Arc<Mutex<Tracker>>) -> GrantTimes {
        GrantTimes { tracker }
    }

    /// When the grant of `lock_id` with (first) token `token` was applied here, if it is held.
    pub fn since(&self, lock_id: &str, token: u64) -> Option<Instant> {
        let tracker = lock(&self.tracker);
        let list = tracker.grants.get(lock_id)?;
        list.iter().find(|(t, _)| *t == token).map(|(_, at)| *at)
    }

    /// How many grants are recorded (those held).
    pub fn len(&self) -> usize {
        lock(&self.tracker).grants.values().map(Vec::len).sum()
    }

    /// Whether no grant is held.
    pub fn is_empty(&self) -> bool {
        lock(&self.tracker).grants.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Share;

    /// What the table says is held and queued: (grants as (lock, token), queued count).
    fn truth(table: &LockTable) -> (Vec<(String, u64)>, usize) {
        let mut grants = Vec::new();
        let mut queued = 0;
        for (session, _) in table.sessions().collect::<Vec<_>>() {
            let held = table.held_by(session);
            queued += table.asks_of(session) - held.len();
            grants.extend(held.into_iter().map(|(lock, _, token, _)| (lock, token)));
        }
        grants.sort();
        (grants, queued)
    }

    fn mirrored(t: &Tracker) -> (Vec<(String, u64)>, usize) {
        let mut grants: Vec<(String, u64)> = t
            .grants
            .iter()
            .flat_map(|(lock, list)| list.iter().map(move |(token, _)| (lock.clone(), *token)))
            .collect();
        grants.sort();
        assert_eq!(t.held, grants.len(), "held count");
        (grants, t.queued)
    }

    /// A deterministic stream of numbers (no dependency for a shuffle).
    struct Dice(u64);
    impl Dice {
        fn roll(&mut self, n: u64) -> u64 {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// Random asks, retries, newer and older attempts, releases, shares, batches, forced
    /// releases, closes and expiries, with snapshot loads between: after every command the
    /// mirror holds exactly the table's grants and queue places, and the counters add up.
    #[test]
    fn the_mirror_follows_the_table_through_every_kind_of_command() {
        for seed in 0..20 {
            let mut dice = Dice(seed);
            let mut table = LockTable::default();
            let mut tracker = Tracker::default();
            let now = Instant::now();
            let mut index = 0;
            let mut sessions: Vec<SessionId> = Vec::new();
            let mut attempts: HashMap<(SessionId, String, String), u64> = HashMap::new();
            let mut loaded = 0u64;
            let mut made = std::collections::HashSet::new();
            for _ in 0..400 {
                index += 1;
                let mut command = |dice: &mut Dice| -> Command {
                    let session = sessions
                        .get(dice.roll(sessions.len().max(1) as u64) as usize)
                        .copied()
                        .unwrap_or(1);
                    let lock = format!("l{}", dice.roll(3));
                    let owner = format!("o{}", dice.roll(2));
                    let attempt =
                        attempts.entry((session, lock.clone(), owner.clone())).or_insert(1);
                    match dice.roll(20) {
                        0..=2 => Command::Open {
                            ttl_ms: 1000,
                            identity: None,
                            key: None,
                            max_sessions: None,
                        },
                        3..=9 => {
                            match dice.roll(4) {
                                0 => *attempt += 1,
                                1 => *attempt = attempt.saturating_sub(1).max(1),
                                _ => {}
                            }
                            let share = match (lock.as_str(), dice.roll(2)) {
                                ("l2", _) => Share::Permits { count: 1, limit: 2 },
                                (_, 0) => Share::Read,
                                _ => Share::Exclusive,
                            };
                            Command::Acquire {
                                session,
                                lock,
                                owner,
                                wait: dice.roll(4) > 0,
                                attempt: *attempt,
                                share,
                                by: None,
                                max_asks: None,
                                value: None,
                            }
                        }
                        10..=14 => {
                            Command::Release { session, lock, owner, attempt: *attempt, by: None }
                        }
                        15 => Command::ForceRelease { lock, by: "root".into() },
                        16 => Command::Close { session, by: None },
                        17 => Command::Expire { session },
                        _ => Command::Open {
                            ttl_ms: 1000,
                            identity: None,
                            key: None,
                            max_sessions: None,
                        },
                    }
                };
                let cmd = if dice.roll(5) == 0 {
                    Command::Batch((0..3).map(|_| command(&mut dice)).collect())
                } else {
                    command(&mut dice)
                };
                let mut events = Vec::new();
                let outcome = tracker.apply(&mut table, index, &cmd, &mut events, now);
                let outcomes = match outcome {
                    Outcome::Batch(o) => o,
                    o => vec![o],
                };
                let commands = match &cmd {
                    Command::Batch(c) => c.clone(),
                    c => vec![c.clone()],
                };
                for (c, o) in commands.iter().zip(&outcomes) {
                    match (c, o) {
                        (_, Outcome::Opened(s)) => sessions.push(*s),
                        (
                            Command::Acquire { session, lock, owner, .. },
                            Outcome::Granted(token),
                        ) => {
                            made.insert((lock.clone(), *token, *session, owner.clone()));
                        }
                        _ => {}
                    }
                }
                for e in &events {
                    if let Event::Granted { session, lock, owner, token, .. } = e {
                        made.insert((lock.clone(), *token, *session, owner.clone()));
                    }
                }
                // A grant is one token of one owner (the readers one command grants share
                // its token): a retry answered it again makes no other.
                assert_eq!(tracker.metrics.grants.get(), made.len() as u64, "seed {seed}");
                assert_eq!(mirrored(&tracker), truth(&table), "seed {seed} after {cmd:?}");
                let m = &tracker.metrics;
                let ended = m.releases.get() + m.forced.get();
                assert!(ended + tracker.held as u64 <= m.grants.get() + loaded, "seed {seed}");
                if dice.roll(40) == 0 {
                    let copy = table.clone();
                    tracker.load(&copy, now);
                    // Grants held at a load were counted before, or are counted now.
                    loaded += tracker.held as u64;
                    assert_eq!(mirrored(&tracker), truth(&table), "seed {seed} after a load");
                }
            }
        }
    }
}

#[cfg(test)]
mod counting {
    use super::*;

    /// A retried ask (the same attempt) is answered the same grant and counted once; a newer
    /// ask of the same owner gives the older grant up (a release) and is granted anew.
    #[test]
    fn a_retry_is_not_a_second_grant_and_a_newer_ask_releases_the_older() {
        let mut table = LockTable::default();
        let mut tracker = Tracker::default();
        let now = Instant::now();
        let mut events = Vec::new();
        let open = Command::Open { ttl_ms: 1000, identity: None, key: None, max_sessions: None };
        let Outcome::Opened(session) = tracker.apply(&mut table, 1, &open, &mut events, now) else {
            panic!("not opened");
        };
        let ask = |attempt| Command::Acquire {
            session,
            lock: "l".into(),
            owner: "o".into(),
            wait: true,
            attempt,
            share: Default::default(),
            by: None,
            max_asks: None,
            value: None,
        };
        let first = tracker.apply(&mut table, 2, &ask(1), &mut events, now);
        assert_eq!(tracker.apply(&mut table, 3, &ask(1), &mut events, now), first);
        assert_eq!(tracker.metrics.grants.get(), 1);
        assert!(GrantTimes::new(Arc::new(Mutex::new(Tracker::default()))).is_empty());
        let second = tracker.apply(&mut table, 4, &ask(2), &mut events, now);
        assert_ne!(second, first);
        assert_eq!((tracker.metrics.grants.get(), tracker.metrics.releases.get()), (2, 1));
        assert_eq!(tracker.asks(), (1, 0));
    }
}
