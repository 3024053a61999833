//! Requests that need no session, for operators and their tools (`lockctl`): a node's status,
//! the locks and who holds and waits for them, an administrator's force-release, and
//! membership changes. Each request dials the leader as a session's would ([`find_leader`]),
//! over TLS and with the credentials of the [`ClientConfig`], and hangs up once answered. A
//! membership change, which waits for a new node to catch up, is sent once the leader is
//! found and given the whole request timeout; both changes are idempotent (a voter added
//! again, a non-member removed, are answered with the members), so one sent again after a
//! lost answer does what one would.

use super::connection::{Conn, DialError};
use super::leader::find_leader;
use super::{backend_of, ClientConfig, PushSink, Shared};
use crate::proto::{ErrorKind, LockInfo, Member, Reply, Request, Status, MAX_LOCKS_PER_REPLY};
use lock_core::lock::{validate_id, LockError};
use lock_core::BackendErrorKind;
use std::sync::Arc;
use tokio::time::Instant;

/// Why an administration request failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The service refused it, as `kind` says; nothing was changed.
    #[error("the service refused ({kind:?}): {message}")]
    Refused {
        /// Why.
        kind: ErrorKind,
        /// For humans.
        message: String,
    },
    /// The service answered something this client does not expect (another version?).
    #[error("unexpected answer: {0}")]
    Unexpected(String),
    /// No leader answered in time, the credentials or TLS were refused, or the request was
    /// invalid before it was sent: the client's error.
    #[error(transparent)]
    Client(#[from] LockError),
}

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
    async fn ask_leader(&self, request: Request) -> Result<Reply, AdminError> {
        let deadline = Instant::now() + self.shared.config.request_timeout;
        let pushes = PushSink::default();
        let (conn, reply) = find_leader(&self.shared, &request, None, &pushes, deadline).await?;
        conn.hang_up().await;
        refused(reply)
    }

    /// Send `request`, which may take long, to the leader with the whole request timeout to
    /// answer it: the leader is found first (by a listing of one lock, which only it
    /// answers), and found again if it changed meanwhile.
    async fn ask_leader_patiently(&self, request: Request) -> Result<Reply, AdminError> {
        let deadline = Instant::now() + self.shared.config.request_timeout;
        let probe = Request::Locks { prefix: String::new(), after: None, limit: 1 };
        let pushes = PushSink::default();
        loop {
            let (conn, _) = find_leader(&self.shared, &probe, None, &pushes, deadline).await?;
            let reply = conn.request(&self.shared, request.clone(), deadline).await;
            conn.hang_up().await;
            match reply {
                Ok(Reply::NotLeader { .. }) if Instant::now() < deadline => continue,
                Ok(reply) => return refused(reply),
                Err(e) => {
                    return Err(AdminError::Client(backend_of(BackendErrorKind::Unavailable, e)))
                }
            }
        }
    }

    /// The status of the node at `endpoint` (any node answers, leader or not).
    pub async fn status_of(&self, endpoint: &str) -> Result<Status, AdminError> {
        let deadline = Instant::now() + self.shared.config.request_timeout;
        let conn = match Conn::dial(endpoint, &self.shared, PushSink::default()).await {
            Ok(c) => c,
            Err(DialError::Refused(why)) => {
                return Err(backend_of(BackendErrorKind::Refused, why).into())
            }
            Err(DialError::Retry(why)) => {
                return Err(backend_of(BackendErrorKind::Unavailable, why).into())
            }
        };
        let reply = conn.request(&self.shared, Request::Status, deadline).await;
        conn.hang_up().await;
        match refused(reply.map_err(|e| backend_of(BackendErrorKind::Unavailable, e))?)? {
            Reply::Status(s) => Ok(*s),
            other => Err(unexpected(other)),
        }
    }

    /// The leader's status: the first node's status names the leader, whose own is asked.
    pub async fn status(&self) -> Result<Status, AdminError> {
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
            let why = format!("no node among {:?} answered", self.shared.endpoints);
            backend_of(BackendErrorKind::Unavailable, why).into()
        })
    }

    /// At most `limit` locks whose ids start with `prefix` and sort after `after`, with their
    /// holders and queues, as the leader has them; and whether more match.
    pub async fn locks(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Result<(Vec<LockInfo>, bool), AdminError> {
        let limit = limit.clamp(1, MAX_LOCKS_PER_REPLY);
        let request =
            Request::Locks { prefix: prefix.to_string(), after: after.map(String::from), limit };
        match self.ask_leader(request).await? {
            Reply::Locks { locks, more } => Ok((locks, more)),
            other => Err(unexpected(other)),
        }
    }

    /// Every lock whose id starts with `prefix`, page after page.
    pub async fn all_locks(&self, prefix: &str) -> Result<Vec<LockInfo>, AdminError> {
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
    pub async fn force_release(&self, lock_id: &str) -> Result<bool, AdminError> {
        validate_id("lock id", lock_id)?;
        match self.ask_leader(Request::ForceRelease { lock: lock_id.to_string() }).await? {
            Reply::Released => Ok(true),
            Reply::NotHeld => Ok(false),
            other => Err(unexpected(other)),
        }
    }

    /// Make node `id`, running at `peer`/`client`, a voting member (administrators only): a
    /// learner until it has caught up. The members once the change has committed.
    pub async fn add_member(
        &self,
        id: u64,
        peer: &str,
        client: &str,
    ) -> Result<Vec<Member>, AdminError> {
        let request = Request::AddMember { id, peer: peer.into(), client: client.into() };
        self.members_after(request).await
    }

    /// Take node `id` out of the cluster (administrators only). The members once the change
    /// has committed.
    pub async fn remove_member(&self, id: u64) -> Result<Vec<Member>, AdminError> {
        self.members_after(Request::RemoveMember { id }).await
    }

    async fn members_after(&self, request: Request) -> Result<Vec<Member>, AdminError> {
        match self.ask_leader_patiently(request).await? {
            Reply::Members { members } => Ok(members),
            other => Err(unexpected(other)),
        }
    }
}

/// A reply, or the refusal it says.
fn refused(reply: Reply) -> Result<Reply, AdminError> {
    match reply {
        Reply::Error { kind, message } => Err(AdminError::Refused { kind, message }),
        other => Ok(other),
    }
}

fn unexpected(reply: Reply) -> AdminError {
    AdminError::Unexpected(format!("{reply:?}"))
}
