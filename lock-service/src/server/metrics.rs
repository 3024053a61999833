//! What a node tells its operators: Prometheus metrics and a health rule, served over HTTP by
//! the `server`'s `http` module when `--metrics-addr` is given, and the node-local record of
//! when each current grant was applied ([`GrantTimes`]).
//!
//! **Why `prometheus-client`.** It is the Prometheus project's own Rust client: it writes the
//! text exposition format Prometheus and `promtool` read, its counters are atomics and its
//! histograms a short lock, and it needs no global registry, so each node (and each node a
//! test starts in one process) has its own. It brings no HTTP server, and none is needed: the
//! endpoint is a small HTTP/1.1 responder on tokio, one request per connection, its request
//! bounded in size and time, `GET` of `/metrics` and `/health` and nothing else (404 for
//! another path, 405 for another method, 400 for what is not HTTP/1.x, 408 for a request
//! that does not come whole in time).
//!
//! **Where each figure comes from.**
//! - Grants, releases, expirations, forced releases, and the wait and hold times, are counted
//!   where every node applies the committed log (`raft`'s state machine), from each command's
//!   [`Outcome`] and [`Event`]s: the table itself ([`crate::state::LockTable::apply`]) reads no
//!   clock. The apply path keeps a mirror of the asks it saw (who holds or waits, since when),
//!   so that a retried ask, answered the same grant again, is not counted twice. Every node
//!   counts them, leader or follower.
//! - Wait and hold times are read on this node's monotonic clock when it applies the entries:
//!   they are node-local, not replicated, and a follower that applies late counts from its
//!   own apply. A grant this node loaded from a snapshot (at start, or sent by the leader)
//!   counts from that load, and a place in a queue loaded so is not timed.
//! - Commit latency is measured by the leader's batcher, from a client command's handing to
//!   it to its outcome out of the state machine: the wait for a free write, the append, the
//!   syncs, the replication round and the apply.
//! - Sync latency is the log writer's `fdatasync` of its segments ([`crate::wal`]), once per
//!   batch of appends.
//! - Gauges are read when scraped: sessions from the table, grants held and waiters from the
//!   mirror above, Raft's term and leader from openraft, the applied index from the state
//!   machine and the committed index from what openraft last told the log store.
//!
//! **The metrics** (no label anywhere: nothing grows with the locks or sessions):
//!
//! | name | type | what |
//! |------|------|------|
//! | `lock_service_grants_total` | counter | grants applied: an ask granted at once, or a waiter handed the lock |
//! | `lock_service_releases_total` | counter | grants given up by their holder: a release, or a newer ask of the same owner giving up the older grant |
//! | `lock_service_session_expirations_total` | counter | sessions the leader expired for silence |
//! | `lock_service_forced_releases_total` | counter | grants an administrator took from their holders |
//! | `lock_service_wait_seconds` | histogram | an ask queued until it was granted |
//! | `lock_service_hold_seconds` | histogram | a grant until it ended (released, given up, its session ended, taken) |
//! | `lock_service_commit_seconds` | histogram | a client command handed to the leader's batcher until applied |
//! | `lock_service_log_sync_seconds` | histogram | one sync of the log's segments |
//! | `lock_service_sessions` | gauge | live sessions |
//! | `lock_service_grants_held` | gauge | grants held (a lock shared by three readers counts three) |
//! | `lock_service_waiters` | gauge | asks waiting in queues |
//! | `lock_service_raft_term` | gauge | this node's current Raft term |
//! | `lock_service_raft_is_leader` | gauge | 1 when this node leads, else 0 |
//! | `lock_service_raft_leader_id` | gauge | the leader's node id, -1 when no leader is known |
//! | `lock_service_raft_applied_index` | gauge | the last log index applied to the state machine |
//! | `lock_service_raft_commit_index` | gauge | the last log index this node knows committed |
//!
//! **Health.** A node is healthy when it knows a leader, its Raft is running, and within
//! [`APPLY_WAIT`] of the request it has applied every entry it knew committed when the request
//! came. A follower knows an entry committed once the leader has sent it that entry and the
//! commit index past it, so a follower still receiving a long backlog is judged on what has
//! reached it. `/health` answers 200 with a JSON object of the figures, or 503 with the same
//! object and a `reason`: no leader known, Raft stopped, or still applying.

use super::Node;
use crate::proto::SessionId;
use crate::state::{Command, Event, LockTable, Outcome};
use openraft::ServerState;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
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
    grants: Counter,
    releases: Counter,
    expirations: Counter,
    forced: Counter,
    wait: Histogram,
    hold: Histogram,
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

/// How long `/health` waits for the state machine to apply what this node knew committed.
pub const APPLY_WAIT: Duration = Duration::from_secs(1);

/// A node's figures at one moment, read for a scrape or a health check.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct View {
    id: u64,
    leader: Option<u64>,
    leads: bool,
    term: u64,
    applied: Option<u64>,
    committed: Option<u64>,
    #[serde(skip)]
    running: Result<(), String>,
    #[serde(skip)]
    sessions: usize,
    #[serde(skip)]
    held: usize,
    #[serde(skip)]
    waiters: usize,
}

/// The node's registry and the gauges set at each scrape.
pub(crate) struct Metrics {
    registry: Registry,
    sessions: Gauge,
    held: Gauge,
    waiters: Gauge,
    term: Gauge,
    leads: Gauge,
    leader: Gauge,
    applied: Gauge,
    committed: Gauge,
}

impl Metrics {
    /// A registry of the apply path's figures, the batcher's `commit` latency, the log's
    /// `sync` latency and the gauges.
    pub(crate) fn new(apply: &ApplyMetrics, commit: &Histogram, sync: &Histogram) -> Metrics {
        let mut m = Metrics {
            registry: Registry::with_prefix("lock_service"),
            sessions: Gauge::default(),
            held: Gauge::default(),
            waiters: Gauge::default(),
            term: Gauge::default(),
            leads: Gauge::default(),
            leader: Gauge::default(),
            applied: Gauge::default(),
            committed: Gauge::default(),
        };
        let r = &mut m.registry;
        r.register(
            "grants",
            "Grants applied: an ask granted at once, or a waiter handed the lock",
            apply.grants.clone(),
        );
        r.register(
            "releases",
            "Grants given up by their holder: a release, or a newer ask of the same owner",
            apply.releases.clone(),
        );
        r.register(
            "session_expirations",
            "Sessions the leader expired for silence",
            apply.expirations.clone(),
        );
        r.register(
            "forced_releases",
            "Grants an administrator took from their holders",
            apply.forced.clone(),
        );
        r.register(
            "wait_seconds",
            "From an ask queued to its grant, on this node's clock as it applied them",
            apply.wait.clone(),
        );
        r.register(
            "hold_seconds",
            "From a grant to its end, on this node's clock as it applied them",
            apply.hold.clone(),
        );
        r.register(
            "commit_seconds",
            "From a client command handed to the leader's batcher to its outcome, applied",
            commit.clone(),
        );
        r.register("log_sync_seconds", "One sync of the log's segments", sync.clone());
        r.register("sessions", "Live sessions", m.sessions.clone());
        r.register("grants_held", "Grants held", m.held.clone());
        r.register("waiters", "Asks waiting in queues", m.waiters.clone());
        r.register("raft_term", "This node's current Raft term", m.term.clone());
        r.register("raft_is_leader", "1 when this node leads, else 0", m.leads.clone());
        r.register(
            "raft_leader_id",
            "The leader's node id, -1 when no leader is known",
            m.leader.clone(),
        );
        r.register(
            "raft_applied_index",
            "The last log index applied to the state machine",
            m.applied.clone(),
        );
        r.register(
            "raft_commit_index",
            "The last log index this node knows committed",
            m.committed.clone(),
        );
        m
    }

    /// The metrics as of `view`, in Prometheus' text exposition format.
    pub(crate) fn render(&self, view: &View) -> String {
        let int = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let count = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.sessions.set(count(view.sessions));
        self.held.set(count(view.held));
        self.waiters.set(count(view.waiters));
        self.term.set(int(view.term));
        self.leads.set(i64::from(view.leads));
        self.leader.set(view.leader.map_or(-1, int));
        self.applied.set(view.applied.map_or(0, int));
        self.committed.set(view.committed.map_or(0, int));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

/// The `Content-Type` of [`Metrics::render`]'s text.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

impl Node {
    /// This node's figures now.
    pub(crate) fn view(&self) -> View {
        let m = self.raft.metrics().borrow().clone();
        let (applied, sessions) =
            self.sm.read(|a| (a.last.map(|l| l.index), a.table.session_count()));
        let (held, waiters) = self.sm.asks();
        View {
            id: self.id,
            leader: m.current_leader,
            leads: m.state == ServerState::Leader && m.current_leader == Some(self.id),
            term: m.current_term,
            applied,
            committed: self.log.committed_index(),
            running: m.running_state.map_err(|e| e.to_string()),
            sessions,
            held,
            waiters,
        }
    }

    /// The metrics in Prometheus' text format.
    pub(crate) fn render_metrics(&self) -> String {
        self.metrics.render(&self.view())
    }

    /// Whether this node is healthy (see the module docs), and its figures as a JSON object,
    /// with the reason when it is not.
    pub(crate) async fn health(&self) -> (bool, String) {
        let asked = self.view();
        let reason = if asked.leader.is_none() {
            Some("no leader known".to_string())
        } else if let Err(e) = &asked.running {
            Some(format!("raft has stopped: {e}"))
        } else {
            let target = asked.committed;
            let deadline = Instant::now() + APPLY_WAIT;
            loop {
                let applied = self.sm.read(|a| a.last.map(|l| l.index));
                if applied >= target {
                    break None;
                }
                if Instant::now() >= deadline {
                    break Some(format!(
                        "still applying: applied index {} of {} committed",
                        applied.map_or("none".into(), |a| a.to_string()),
                        target.map_or("none".into(), |c| c.to_string()),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let view = self.view();
        let mut body = serde_json::to_value(&view).unwrap_or_default();
        if let serde_json::Value::Object(fields) = &mut body {
            fields.insert("healthy".into(), reason.is_none().into());
            if let Some(r) = &reason {
                fields.insert("reason".into(), r.clone().into());
            }
        }
        (reason.is_none(), body.to_string())
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
