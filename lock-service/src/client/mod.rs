//! The client: a [`ServiceClient`] holds one session (one connection to the leader, kept
//! alive every TTL/3), and hands out [`ServiceLocker`]s that implement
//! [`Locker`](lock_core::lock::Locker) on it.
//!
//! - **Finding the leader.** The client dials the nodes it was given in turn; a follower
//!   answers `NotLeader` with the leader's address, which the client dials next. After a
//!   failover (a broken connection, `NotLeader`, `Unavailable`) it finds the new leader the
//!   same way and *resumes* its session there: the reply lists what the session holds, so a
//!   grant pushed while it was away is not lost. A session that holds or waits for a lock
//!   does this as soon as its node drops the connection; an idle one at its next request.
//! - **Retries are safe**: the server treats an acquire of a lock the owner already holds or
//!   waits for as the same request, and answers a release of a lock it neither holds nor
//!   waits for `NotHeld`, which this client counts as done (a retried release whose first try
//!   committed); so a request whose answer was lost is sent again (until
//!   [`ClientConfig::request_timeout`]).
//! - **A release is sent until its outcome is known**: a guard's release for up to a session
//!   TTL, after which the session is over if nothing was answered; one still unknown is sent
//!   again after each keep-alive and before the owner's next ask for the lock (`locker`).
//! - **The lost-session signal.** The server counts a keep-alive, or a command it committed,
//!   from when it receives it, so the client knows its session stands until the *send* time
//!   of the last such request answered, plus the TTL. A session busy with commands sends no
//!   keep-alive; an idle one sends one every TTL/3. When that moment passes without a fresh
//!   answer, or the server says the session ended, every guard of the session is told
//!   [`LeaseState::Lost`](lock_core::lock::LeaseState::Lost), every waiter fails with
//!   [`LockError::LeaseLost`], and the next request opens a new session.
//!
//! One concept a file: `connection` (one connection to one node), `leader` (which node
//! to dial, and finding the leader), `session` (the session, its keep-alive and its
//! resumption), `locker` (the `Locker` on a session), `admin` (requests that need no
//! session: status, the locks listed, force-release, membership).

mod admin;
mod connection;
mod election;
mod leader;
mod locker;
mod observations;
mod observe;
mod rwlock;
mod semaphore;
mod session;

pub use admin::{AdminError, ServiceAdmin};
pub use election::ServiceElector;
pub use locker::ServiceLocker;
pub use rwlock::ServiceRwLocker;
pub use semaphore::ServiceSemaphore;

use crate::proto::{Reply, Request, SessionId};
use lock_core::lock::{validate_id, LockError};
use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use lock_core::tls::TlsFiles;
use lock_core::BackendErrorKind;
use locker::unexpected;
use session::Session;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio_rustls::TlsConnector;

/// The algorithm's name in results.
pub const ALGORITHM: &str = "service";
pub(crate) const BACKEND: &str = "lock-service";

/// How a client talks to the service.
#[derive(Clone)]
pub struct ClientConfig {
    /// The session's TTL: a holder that cannot renew for this long loses its locks.
    pub ttl: Duration,
    /// How long dialling one node may take.
    pub connect_timeout: Duration,
    /// How long one request may take, across reconnects and failovers.
    pub request_timeout: Duration,
    /// Told of every request sent, as `service` and the request's name (`Acquire`,
    /// `Release`, `KeepAlive`, `Open`, `Resume`, `Close`, `Status`): the load a lock puts on
    /// the service. One grant costs an `Acquire` and a `Release`, plus a `KeepAlive` per
    /// session every TTL/3.
    pub requests: RequestHook,
    /// Dial the leader a follower names (its advertised client address), and every member
    /// the leader lists (so that a client whose endpoints have all left the cluster still
    /// finds it). Off, the client dials only the endpoints it was given, in turn: for a
    /// client that must reach the service through addresses of its own (a proxy, a tunnel).
    pub follow_leader_hints: bool,
    /// Who this client is, on a service that authenticates its clients (`lock-server
    /// --users`): the user's name and its token. A refusal fails at once, naming the user.
    pub credentials: Option<Credentials>,
    /// Speak TLS, trusting the CA in `ca` (required); the nodes' certificates must name the
    /// host or IP address the client dials. The nodes ask no client certificate: the client
    /// says who it is with [`ClientConfig::credentials`].
    pub tls: Option<TlsFiles>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            ttl: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(5),
            requests: RequestHook::none(),
            follow_leader_hints: true,
            credentials: None,
            tls: None,
        }
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("ttl", &self.ttl)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("credentials", &self.credentials)
            .field("tls", &self.tls)
            .finish()
    }
}

/// Where a connection's reader hands the pushes: the session, once it exists (a push comes
/// only for a session's locks, so none arrives before the session is opened).
type PushSink = Arc<OnceLock<Weak<Session>>>;

/// What every session of a client shares.
struct Shared {
    pub(super) endpoints: Vec<String>,
    /// The endpoints in the order to try them: the last leader first, failures last.
    pub(super) order: Mutex<Vec<String>>,
    /// The nodes that failed to connect or to answer since they last answered: a hint naming
    /// one is not followed ([`find_leader`]).
    pub(super) failed: Mutex<Vec<String>>,
    pub(super) config: ClientConfig,
    pub(super) next_id: AtomicU64,
    /// The TLS connector, when the config asks for TLS.
    pub(super) tls: Option<TlsConnector>,
}

impl Shared {
    fn new(endpoints: &[String], config: ClientConfig) -> Result<Shared, LockError> {
        if endpoints.is_empty() {
            return Err(LockError::Config("no lock-service endpoint given".into()));
        }
        let tls = config
            .tls
            .as_ref()
            .map(crate::tls::client_connector)
            .transpose()
            .map_err(|e| LockError::Config(format!("lock-service TLS: {e}")))?;
        Ok(Shared {
            endpoints: endpoints.to_vec(),
            order: Mutex::new(endpoints.to_vec()),
            failed: Mutex::new(Vec::new()),
            config,
            next_id: AtomicU64::new(1),
            tls,
        })
    }

    pub(super) fn promote(&self, addr: &str) {
        lock(&self.failed).retain(|f| f != addr);
        let mut order = lock(&self.order);
        if let Some(at) = order.iter().position(|a| a == addr) {
            let a = order.remove(at);
            order.insert(0, a);
        }
    }

    /// Whether to dial the node a follower at `from` names as leader next: not itself, and
    /// not one that failed since it last answered (see [`find_leader`]).
    pub(super) fn worth_following(&self, leader: &str, from: &str) -> bool {
        leader != from && !lock(&self.failed).iter().any(|f| f == leader)
    }

    /// The cluster's members' client addresses, as a leader listed them: dial every one of
    /// them (after the ones known), and forget those learnt before that are no longer
    /// members. The endpoints the client was given are always kept.
    pub(super) fn learn(&self, members: Vec<String>) {
        let mut order = lock(&self.order);
        order.retain(|a| self.endpoints.contains(a) || members.contains(a));
        for m in members {
            if !order.contains(&m) {
                order.push(m);
            }
        }
    }

    pub(super) fn demote(&self, addr: &str) {
        let mut failed = lock(&self.failed);
        if !failed.iter().any(|f| f == addr) {
            failed.push(addr.to_string());
        }
        drop(failed);
        let mut order = lock(&self.order);
        if let Some(at) = order.iter().position(|a| a == addr) {
            let a = order.remove(at);
            order.push(a);
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fault the client found itself (there is no driver error to keep as the source).
pub(crate) fn backend_of(kind: BackendErrorKind, message: impl Into<String>) -> LockError {
    LockError::backend(BACKEND, kind, message.into())
}

/// The kind of the service's refusal `kind`.
pub(crate) fn refusal_kind(kind: crate::proto::ErrorKind) -> BackendErrorKind {
    use crate::proto::ErrorKind as K;
    match kind {
        K::Unauthenticated | K::Forbidden => BackendErrorKind::Refused,
        K::Unavailable => BackendErrorKind::Unavailable,
        K::BadRequest => BackendErrorKind::Protocol,
        K::SessionGone | K::LimitReached | K::Superseded => BackendErrorKind::Other,
    }
}

pub(crate) fn kind_of(request: &Request) -> &'static str {
    match request {
        Request::Open { .. } => "Open",
        Request::Resume { .. } => "Resume",
        Request::KeepAlive { .. } => "KeepAlive",
        Request::Acquire { .. } => "Acquire",
        Request::Release { .. } => "Release",
        Request::Close { .. } => "Close",
        Request::Status => "Status",
        Request::Hello { .. } => "Hello",
        Request::ForceRelease { .. } => "ForceRelease",
        Request::Proclaim { .. } => "Proclaim",
        Request::Observe { .. } => "Observe",
        Request::Locks { .. } => "Locks",
        Request::AddMember { .. } => "AddMember",
        Request::RemoveMember { .. } => "RemoveMember",
    }
}

/// A connection to the lock service: one session, shared by the lockers it hands out. When
/// the client and its lockers are all dropped and no guard of the session is alive, the
/// session is closed in the background (with a guard alive, it is kept alive with it).
#[derive(Clone)]
pub struct ServiceClient {
    shared: Arc<Shared>,
    session: Arc<tokio::sync::Mutex<Option<Arc<Session>>>>,
    sessions_made: Arc<AtomicU64>,
    _closer: Arc<Closer>,
}

/// Closes the session when the last clone of its client goes.
struct Closer {
    session: Arc<tokio::sync::Mutex<Option<Arc<Session>>>>,
}

impl Drop for Closer {
    fn drop(&mut self) {
        let Ok(mut slot) = self.session.try_lock() else {
            return;
        };
        let Some(s) = slot.take() else {
            return;
        };
        if !lock(&s.held).is_empty() || s.lost_reason().is_some() {
            return;
        }
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let _ = s.call(Request::Close { session: s.id }).await;
                s.lose("the session was closed by its client".into());
            });
        }
    }
}

impl ServiceClient {
    /// Connect to the service at `endpoints` (`host:port` of any of its nodes' client ports)
    /// and open a session; fails within [`ClientConfig::request_timeout`] if no leader
    /// answers, naming what each node said.
    pub async fn connect(endpoints: &[String], config: ClientConfig) -> Result<Self, LockError> {
        if !(crate::proto::MIN_TTL..=crate::proto::MAX_TTL).contains(&config.ttl) {
            return Err(LockError::Config(format!(
                "session TTL {:?} is out of range: {:?} to {:?}",
                config.ttl,
                crate::proto::MIN_TTL,
                crate::proto::MAX_TTL
            )));
        }
        let shared = Arc::new(Shared::new(endpoints, config)?);
        let session: Arc<tokio::sync::Mutex<Option<Arc<Session>>>> = Arc::default();
        let client = ServiceClient {
            shared,
            session: session.clone(),
            sessions_made: Arc::default(),
            _closer: Arc::new(Closer { session }),
        };
        client.live_session().await?;
        Ok(client)
    }

    /// `host:port,host:port,...` as [`ServiceClient::connect`] takes it.
    pub fn parse_endpoints(list: &str) -> Vec<String> {
        list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
    }

    /// The session now, or a new one if the last was lost.
    async fn live_session(&self) -> Result<Arc<Session>, LockError> {
        let mut slot = self.session.lock().await;
        if let Some(s) = slot.as_ref().filter(|s| s.lost_reason().is_none()) {
            return Ok(s.clone());
        }
        let s = Session::open(self.shared.clone()).await?;
        self.sessions_made.fetch_add(1, Ordering::Relaxed);
        *slot = Some(s.clone());
        Ok(s)
    }

    /// The current session's id (0 before one is open).
    pub async fn session_id(&self) -> SessionId {
        self.session.lock().await.as_ref().map_or(0, |s| s.id)
    }

    /// How many sessions this client has opened (one more after each lost one).
    pub fn sessions_made(&self) -> u64 {
        self.sessions_made.load(Ordering::Relaxed)
    }

    /// A locker for `owner` on this client's session.
    pub fn locker(&self, owner: &str) -> Result<ServiceLocker, LockError> {
        validate_id("owner id", owner)?;
        Ok(ServiceLocker { client: self.clone(), owner: owner.to_string() })
    }

    /// A reader-writer locker for `owner` on this client's session.
    pub fn rw_locker(&self, owner: &str) -> Result<ServiceRwLocker, LockError> {
        Ok(ServiceRwLocker { locker: self.locker(owner)?, reads: Default::default() })
    }

    /// An elector (a candidate and observer of elections) for `owner` on this client's
    /// session.
    pub fn elector(&self, owner: &str) -> Result<ServiceElector, LockError> {
        Ok(ServiceElector { locker: self.locker(owner)? })
    }

    /// A semaphore client for `owner` on this client's session.
    pub fn semaphore(&self, owner: &str) -> Result<ServiceSemaphore, LockError> {
        Ok(ServiceSemaphore { locker: self.locker(owner)? })
    }

    /// Take `lock_id` from whoever holds it, as an administrator: the holder's guard is told
    /// `Lost`, the lock goes to its next waiter, and the service logs and counts it.
    /// `Ok(true)` if it was held. Refused unless this client's identity is an admin (or the
    /// service authenticates no one, when anyone may).
    pub async fn force_release(&self, lock_id: &str) -> Result<bool, LockError> {
        validate_id("lock id", lock_id)?;
        let session = self.live_session().await?;
        match session.call(Request::ForceRelease { lock: lock_id.to_string() }).await? {
            Reply::Released => Ok(true),
            Reply::NotHeld => Ok(false),
            Reply::Error { kind, message } => Err(backend_of(
                refusal_kind(kind),
                format!("force-release of {lock_id:?} refused ({kind:?}): {message}"),
            )),
            other => Err(unexpected(lock_id, other)),
        }
    }

    /// End the session: every lock it holds goes to the next waiter at once.
    ///
    /// A session found already over is closed too: the node pushes `SessionEnded` in the
    /// commit that closes the session, often before the `Closed` reply, and the call then
    /// ends as lost. Either way the session is gone, which is what was asked; a guard whose
    /// lock went with an earlier end of the session was told then.
    pub async fn close(&self) -> Result<(), LockError> {
        let Some(s) = self.session.lock().await.take() else {
            return Ok(());
        };
        let result = s.call(Request::Close { session: s.id }).await;
        s.lose("the session was closed by its client".into());
        match result {
            Ok(_) | Err(LockError::LeaseLost { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
