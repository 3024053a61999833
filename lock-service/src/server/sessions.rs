//! The leader's session clock: when each session was last heard from, and the expiry of
//! those silent for their TTL (see the module docs of [`crate::server`]).

use super::{lock, Node};
use crate::proto::SessionId;
use crate::state::Command;
use openraft::ServerState;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The leader's view of its sessions' liveness (empty on followers).
#[derive(Default)]
pub(super) struct Leadership {
    /// The term this node leads in, if it does.
    pub(super) term: Option<u64>,
    /// When each session was last heard from (or first seen by this leader).
    pub(super) seen: HashMap<SessionId, Instant>,
    /// Sessions whose expiry is being committed.
    pub(super) expiring: HashSet<SessionId>,
}

impl Node {
    /// One round of the leader's session clock: expire every session silent for its TTL.
    pub(super) fn expire_silent(self: &Arc<Self>) {
        let m = self.raft.metrics().borrow().clone();
        let leads = m.state == ServerState::Leader && m.current_leader == Some(self.id);
        let now = Instant::now();
        let mut lead = lock(&self.lead);
        if !leads {
            *lead = Leadership::default();
            return;
        }
        if lead.term != Some(m.current_term) {
            // A new term: every session starts a whole TTL from now (Chubby's rule).
            *lead = Leadership { term: Some(m.current_term), ..Leadership::default() };
        }
        let sessions: Vec<(SessionId, u64)> = self.sm.read(|a| a.table.sessions().collect());
        let live: HashSet<SessionId> = sessions.iter().map(|(s, _)| *s).collect();
        lead.seen.retain(|s, _| live.contains(s));
        for (session, ttl_ms) in sessions {
            let seen = *lead.seen.entry(session).or_insert(now);
            if now.duration_since(seen) >= Duration::from_millis(ttl_ms)
                && lead.expiring.insert(session)
            {
                let node = self.clone();
                tokio::spawn(async move {
                    if let Err(r) = node.write(Command::Expire { session }).await {
                        tracing::debug!("expiring session {session}: {r:?}");
                    }
                    lock(&node.lead).expiring.remove(&session);
                });
            }
        }
    }
}

/// The leader's session clock; see the module docs.
pub(super) async fn keep_sessions(node: Arc<Node>) {
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        node.expire_silent();
    }
}
