//! What a node tells its operators: Prometheus metrics and a health rule, served over HTTP by
//! the `server`'s `http` module when `--metrics-addr` is given, and the node-local record of
//! when each current grant was applied ([`crate::counts::GrantTimes`]).
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
//!   where every node applies the committed log (`raft`'s state machine, by
//!   [`crate::counts`]), from each command's [`Outcome`](crate::state::Outcome) and
//!   [`Event`](crate::state::Event)s: the table itself ([`crate::state::LockTable::apply`])
//!   reads no clock. The apply path keeps a mirror of the asks it saw (who holds or waits, since when),
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
use crate::counts::ApplyMetrics;
use openraft::ServerState;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::{Duration, Instant};

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
