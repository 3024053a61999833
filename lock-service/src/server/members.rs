//! Changing the cluster's membership online: a node added as a learner, sent the log until it
//! has caught up and only then made a voter, so that a new node never counts towards a quorum
//! it cannot yet serve; a node removed by one joint-consensus change (openraft's
//! `change_membership`, which commits the joint configuration and then the new one).
//!
//! A node whose disk died is replaced under a new id: added as a new member, then the dead id
//! removed. Reusing the dead node's id with an empty log would let it vote as though it still
//! had the entries it acknowledged, which Raft's safety argument forbids.

use super::requests::{bad_request, forbidden, unavailable};
use super::Node;
use crate::auth::{Identity, Role};
use crate::proto::{Member, Push, Reply};
use crate::raft::{NodeId, NodeInfo};
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{ChangeMembers, ServerState};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// How long a new learner may take to catch up before the change gives up (it stays a
/// learner: adding it again resumes, removing it takes it out).
const CATCH_UP: Duration = Duration::from_secs(60);

impl Node {
    /// The members as this node's last membership entry lists them.
    pub(super) fn members(&self) -> Vec<Member> {
        let m = self.raft.metrics().borrow().membership_config.clone();
        let voters: BTreeSet<NodeId> = m.membership().voter_ids().collect();
        m.membership()
            .nodes()
            .map(|(id, n)| Member {
                id: *id,
                peer: n.peer.clone(),
                client: n.client.clone(),
                voter: voters.contains(id),
            })
            .collect()
    }

    /// Whether this node leads and is a voter of its latest membership: a leader that has just
    /// removed itself still calls itself leader until it steps down, and must neither list
    /// locks nor start another membership change (openraft's core refuses that state).
    pub(super) fn leads(&self) -> bool {
        let m = self.raft.metrics().borrow().clone();
        m.state == ServerState::Leader
            && m.current_leader == Some(self.id)
            && m.membership_config.membership().voter_ids().any(|v| v == self.id)
    }

    /// Make node `id` a voter: a learner first, a voter once it has caught up.
    pub(super) async fn add_member(
        &self,
        id: NodeId,
        peer: String,
        client: String,
        who: &Identity,
    ) -> Reply {
        if let Err(r) = admin_only(who, "change the membership") {
            return r;
        }
        if !self.leads() {
            return self.not_leader(None);
        }
        for (what, addr) in [("peer", &peer), ("client", &client)] {
            if !addr.contains(':') {
                return bad_request(format!(
                    "the new node's {what} address {addr:?} is not HOST:PORT"
                ));
            }
        }
        if let Some(m) = self.members().into_iter().find(|m| m.id == id) {
            if (m.peer.as_str(), m.client.as_str()) != (peer.as_str(), client.as_str()) {
                let what = if m.voter { "a voter" } else { "a learner" };
                return bad_request(format!(
                    "node {id} is already {what} at {}/{}: remove it first to move it",
                    m.peer, m.client
                ));
            }
            if m.voter {
                // Already done (a request sent again after its answer was lost): say so.
                return Reply::Members { members: self.members() };
            }
        }
        let info = NodeInfo { peer, client };
        match tokio::time::timeout(CATCH_UP, self.raft.add_learner(id, info, true)).await {
            Err(_) => {
                return unavailable(format!(
                    "node {id} was added as a learner but has not caught up within {CATCH_UP:?} \
                     (is it running, started with --id {id}, and reachable at its peer \
                     address?): it stays a learner; add it again to go on, or remove it"
                ))
            }
            Ok(Err(e)) => return self.membership_refusal(e),
            Ok(Ok(_)) => {}
        }
        let voters = BTreeSet::from([id]);
        match self.raft.change_membership(ChangeMembers::AddVoterIds(voters), false).await {
            Ok(_) => {
                tracing::warn!("node {id} joined the cluster as a voter (by {})", who.label());
                Reply::Members { members: self.members() }
            }
            Err(e) => self.membership_refusal(e),
        }
    }

    /// Take node `id` out of the cluster (as a voter or a learner).
    pub(super) async fn remove_member(&self, id: NodeId, who: &Identity) -> Reply {
        if let Err(r) = admin_only(who, "change the membership") {
            return r;
        }
        if !self.leads() {
            return self.not_leader(None);
        }
        let members = self.members();
        let Some(member) = members.iter().find(|m| m.id == id) else {
            // Already gone (or never a member): the members say which.
            return Reply::Members { members };
        };
        let change = if member.voter {
            if members.iter().filter(|m| m.voter).count() == 1 {
                return bad_request(format!("node {id} is the last voter: a cluster needs one"));
            }
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        match self.raft.change_membership(change, false).await {
            Ok(_) => {
                tracing::warn!("node {id} left the cluster (by {})", who.label());
                Reply::Members { members: self.members() }
            }
            Err(e) => self.membership_refusal(e),
        }
    }

    fn membership_refusal(
        &self,
        e: RaftError<NodeId, ClientWriteError<NodeId, NodeInfo>>,
    ) -> Reply {
        match e {
            RaftError::APIError(ClientWriteError::ChangeMembershipError(c)) => match c {
                ChangeMembershipError::InProgress(_) => unavailable(format!(
                    "another membership change is being committed: try again ({c})"
                )),
                other => bad_request(other.to_string()),
            },
            other => self.refusal(other),
        }
    }
}

/// Tell every session's connection the members each time they change, so that clients
/// learn of nodes added (and forget nodes removed) while they stay connected.
pub(super) async fn announce_members(node: Arc<Node>) {
    let mut metrics = node.raft.metrics();
    let mut last = *metrics.borrow().membership_config.log_id();
    while metrics.changed().await.is_ok() {
        let now = *metrics.borrow().membership_config.log_id();
        if now != last {
            last = now;
            node.hub.broadcast(Push::Members { members: node.members() });
        }
    }
}

/// Only an administrator (everyone, on a node without users) may do `what`.
fn admin_only(who: &Identity, what: &str) -> Result<(), Reply> {
    if who.role == Role::Admin {
        return Ok(());
    }
    Err(forbidden(format!("{} may not {what}: only an admin identity may", who.label())))
}
