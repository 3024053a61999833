//! Requests that need no session, for operators and their tools (`lockctl`): a node's status,
//! the locks and who holds and waits for them, an administrator's force-release, and
//! membership changes. Each request dials the leader as a session's would ([`find_leader`]),
//! over TLS and with the credentials of the [`ClientConfig`], and hangs up once answered.

use super::connection::{Conn, DialError};
use super::leader::find_leader;
use super::locker::unexpected;
use super::{backend_of, refusal_kind, ClientConfig, PushSink, Shared};
use crate::proto::{LockInfo, Member, Reply, Request, Status, MAX_LOCKS_PER_REPLY};
use lock_core::lock::{validate_id, LockError};
use lock_core::BackendErrorKind;
use std::sync::Arc;
use tokio::time::Instant;

/// A client for the service's administration: no session, one connection per request.
#[derive(Clone)]
pub struct ServiceAdmin {
    shared: Arc<Shared>,
}

impl ServiceAdmin {
    /// A client of the service at `endpoints` (`host:port` of any of its nodes' client
    /// ports). Nothing is dialled before the first request.
    pub fn new(endpoints: &[String], config: ClientConfig) -> Result<ServiceAdmin, LockError> {
        Ok(ServiceAdmin { shared: Arc::new(Shared::new(endpoints, config)?) })
    }

    /// Send `request` to the leader and return its answer; a refusal (`Error`) is an error.
    async fn ask_leader(&self, request: Request) -> Result<Reply, LockError> {
        let deadline = Instant::now() + self.shared.config.request_timeout;
        let pushes = PushSink::default();
        let (conn, reply) = find_leader(&self.shared, &request, None, &pushes, deadline).await?;
        conn.hang_up().await;
        refused(reply)
    }

    /// The status of the node at `endpoint` (any node answers, leader or not).
    pub async fn status_of(&self, endpoint: &str) -> Result<Status, LockError> {
        let deadline = Instant::now() + self.shared.config.request_timeout;
        let conn = match Conn::dial(endpoint, &self.shared, PushSink::default()).await {
            Ok(c) => c,
            Err(DialError::Refused(why) | DialError::Retry(why)) => {
                return Err(backend_of(BackendErrorKind::Unavailable, why))
            }
        };
        let reply = conn.request(&self.shared, Request::Status, deadline).await;
        conn.hang_up().await;
        match refused(reply.map_err(|e| backend_of(BackendErrorKind::Unavailable, e))?)? {
            Reply::Status(s) => Ok(*s),
            other => Err(unexpected("(status)", other)),
        }
    }

    /// The leader's status: the first node's status names the leader, whose own is asked.
    pub async fn status(&self) -> Result<Status, LockError> {
        let mut last = None;
        for endpoint in &self.shared.endpoints {
            match self.status_of(endpoint).await {
                Ok(s) if s.leader == Some(s.id) => return Ok(s),
                Ok(s) => match s.leader_addr.clone() {
                    Some(addr) => match self.status_of(&addr).await {
                        Ok(l) if l.leader == Some(l.id) => return Ok(l),
                        Ok(_) => last = Some(s),
                        Err(e) => return Err(e),
                    },
                    None => last = Some(s),
                },
                Err(e) if self.shared.endpoints.len() == 1 => return Err(e),
                Err(_) => {}
            }
        }
        last.ok_or_else(|| {
            backend_of(
                BackendErrorKind::Unavailable,
                format!("no node among {:?} answered", self.shared.endpoints),
            )
        })
    }

    /// At most `limit` locks whose ids start with `prefix` and sort after `after`, with their
    /// holders and queues, as the leader has them; and whether more match.
    pub async fn locks(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<LockInfo>, bool), LockError> {
        let limit = limit.clamp(1, MAX_LOCKS_PER_REPLY);
        let request =
            Request::Locks { prefix: prefix.to_string(), after: after.map(String::from), limit };
        match self.ask_leader(request).await? {
            Reply::Locks { locks, more } => Ok((locks, more)),
            other => Err(unexpected(prefix, other)),
        }
    }

    /// Every lock whose id starts with `prefix`, page after page.
    pub async fn all_locks(&self, prefix: &str) -> Result<Vec<LockInfo>, LockError> {
        let mut all: Vec<LockInfo> = Vec::new();
        loop {
            let after = all.last().map(|l| l.lock.clone());
            let (page, more) = self.locks(prefix, after.as_deref(), MAX_LOCKS_PER_REPLY).await?;
            all.extend(page);
            if !more {
                return Ok(all);
            }
        }
    }

    /// Take `lock_id` from whoever holds it (administrators only): its holder is told `Lost`
    /// and the lock goes to its next waiter. `Ok(true)` if it was held.
    pub async fn force_release(&self, lock_id: &str) -> Result<bool, LockError> {
        validate_id("lock id", lock_id)?;
        match self.ask_leader(Request::ForceRelease { lock: lock_id.to_string() }).await? {
            Reply::Released => Ok(true),
            Reply::NotHeld => Ok(false),
            other => Err(unexpected(lock_id, other)),
        }
    }

    /// Make node `id`, running at `peer`/`client`, a voting member (administrators only): a
    /// learner until it has caught up. The members once the change has committed.
    pub async fn add_member(
        &self,
        id: u64,
        peer: &str,
        client: &str,
    ) -> Result<Vec<Member>, LockError> {
        let request = Request::AddMember { id, peer: peer.into(), client: client.into() };
        self.members_after(request).await
    }

    /// Take node `id` out of the cluster (administrators only). The members once the change
    /// has committed.
    pub async fn remove_member(&self, id: u64) -> Result<Vec<Member>, LockError> {
        self.members_after(Request::RemoveMember { id }).await
    }

    async fn members_after(&self, request: Request) -> Result<Vec<Member>, LockError> {
        match self.ask_leader(request).await? {
            Reply::Members { members } => Ok(members),
            other => Err(unexpected("(membership)", other)),
        }
    }
}

/// A reply, or the error it says.
fn refused(reply: Reply) -> Result<Reply, LockError> {
    match reply {
        Reply::Error { kind, message } => {
            Err(backend_of(refusal_kind(kind), format!("refused ({kind:?}): {message}")))
        }
        other => Ok(other),
    }
}
