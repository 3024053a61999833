//! The client: a [`ServiceClient`] holds one session (one connection to the leader, kept
//! alive every TTL/3), and hands out [`ServiceLocker`]s that implement [`Locker`] on it.
//!
//! - **Finding the leader.** The client dials the nodes it was given in turn; a follower
//!   answers `NotLeader` with the leader's address, which the client dials next. After a
//!   failover (a broken connection, `NotLeader`, `Unavailable`) it finds the new leader the
//!   same way and *resumes* its session there: the reply lists what the session holds, so a
//!   grant pushed while it was away is not lost. A session that holds or waits for a lock
//!   does this as soon as its node drops the connection; an idle one at its next request.
//! - **Retries are safe**: the server treats an acquire of a lock the owner already holds or
//!   waits for as the same request, and a release of a lock it neither holds nor waits for as
//!   done; so a request whose answer was lost is sent again (until
//!   [`ClientConfig::request_timeout`]).
//! - **The lost-session signal.** The server counts a keep-alive, or a command it committed,
//!   from when it receives it, so the client knows its session stands until the *send* time
//!   of the last such request answered, plus the TTL. A session busy with commands sends no
//!   keep-alive; an idle one sends one every TTL/3. When that moment passes without a fresh answer, or the server
//!   says the session ended, every guard of the session is told [`LeaseState::Lost`], every
//!   waiter fails with [`LockError::LeaseLost`], and the next request opens a new session.

use crate::proto::{
    decode, encode, read_bytes, ClientFrame, ErrorKind, Held, Push, Reply, Request, ServerFrame,
    SessionId, MAX_SERVER_FRAME,
};
use crate::tls::BoxIo;
use async_trait::async_trait;
use lock_core::lock::{validate_id, LeaseLost, LeaseState, LockError, LockGuard, Locker, Release};
use lock_core::BackendErrorKind;
use lock_core::requests::RequestHook;
use lock_core::secret::Credentials;
use lock_core::tls::TlsFiles;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;
use tokio::io::WriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::TlsConnector;

/// The algorithm's name in results.
pub const ALGORITHM: &str = "service";
const BACKEND: &str = "lock-service";

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
    /// Dial the leader a follower names (its advertised client address). Off, the client
    /// dials only the endpoints it was given, in turn: for a client that must reach the
    /// service through addresses of its own (a proxy, a tunnel).
    pub follow_leader_hints: bool,
    /// Who this client is, on a service that authenticates its clients (`lock-server
    /// --users`): the user's name and its token. A refusal fails at once, naming the user.
    pub credentials: Option<Credentials>,
    /// Speak TLS, trusting the CA in `ca` (required) and presenting `cert`/`key` if given;
    /// the nodes' certificates must name the host or IP address the client dials.
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn backend(message: impl Into<String>) -> LockError {
    LockError::backend(BACKEND, BackendErrorKind::Other, message.into())
}

fn kind_of(request: &Request) -> &'static str {
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
    }
}

/// What every session of a client shares.
struct Shared {
    endpoints: Vec<String>,
    /// The endpoints in the order to try them: the last leader first, failures last.
    order: Mutex<Vec<String>>,
    /// The nodes that failed to connect or to answer since they last answered: a hint naming
    /// one is not followed ([`find_leader`]).
    failed: Mutex<Vec<String>>,
    config: ClientConfig,
    next_id: AtomicU64,
    /// The TLS connector, when the config asks for TLS.
    tls: Option<TlsConnector>,
}

impl Shared {
    fn promote(&self, addr: &str) {
        lock(&self.failed).retain(|f| f != addr);
        let mut order = lock(&self.order);
        if let Some(at) = order.iter().position(|a| a == addr) {
            let a = order.remove(at);
            order.insert(0, a);
        }
    }

    /// Whether to dial the node a follower at `from` names as leader next: not itself, and
    /// not one that failed since it last answered (see [`find_leader`]).
    fn worth_following(&self, leader: &str, from: &str) -> bool {
        leader != from && !lock(&self.failed).iter().any(|f| f == leader)
    }

    fn demote(&self, addr: &str) {
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

/// Where a connection's reader hands the pushes: the session, once it exists (a push comes
/// only for a session's locks, so none arrives before the session is opened).
type PushSink = Arc<OnceLock<Weak<Session>>>;

/// One connection to one node: its write half, written by whoever sends, and a reader task
/// that routes replies by id and hands pushes to the session. Neither goes through another
/// task: a handoff's path (the release sent, the grant pushed) wakes only the tasks that
/// wait for it.
#[derive(Clone)]
struct Conn {
    wr: Arc<tokio::sync::Mutex<WriteHalf<BoxIo>>>,
    pending: Arc<Mutex<HashMap<u64, oneshot::Sender<Reply>>>>,
    closed: Arc<AtomicBool>,
    /// What the node said when it refused the connection as a whole (a plain client at a
    /// TLS-only node), if it did.
    refusal: Arc<Mutex<Option<String>>>,
    addr: String,
}

/// Why a connection to a node could not be made.
enum DialError {
    /// Try another node, or the same one later: it is down, or the network is.
    Retry(String),
    /// Every node will answer the same (a certificate not trusted, credentials refused, TLS
    /// on one side only): fail now, saying so.
    Refused(String),
}

impl Conn {
    async fn dial(addr: &str, shared: &Shared, pushes: PushSink) -> Result<Conn, DialError> {
        let timeout = shared.config.connect_timeout;
        let retry = |e: String| DialError::Retry(format!("{addr}: {e}"));
        let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| retry("connect timed out".into()))?
            .map_err(|e| retry(e.to_string()))?;
        stream.set_nodelay(true).map_err(|e| retry(e.to_string()))?;
        let io: BoxIo = match &shared.tls {
            None => Box::new(stream),
            Some(tls) => {
                match tokio::time::timeout(timeout * 5, crate::tls::connect(tls, addr, stream))
                    .await
                {
                    Ok(Ok(io)) => io,
                    // A handshake the node answered with a certificate we refuse, an alert, or
                    // bytes that are not TLS: every node will do the same.
                    Ok(Err(e)) if !e.contains("unexpected EOF") && !e.contains("reset") => {
                        return Err(DialError::Refused(e))
                    }
                    Ok(Err(e)) => return Err(DialError::Retry(e)),
                    Err(_) => return Err(retry("TLS handshake timed out".into())),
                }
            }
        };
        let (mut rd, wr) = tokio::io::split(io);
        let conn = Conn {
            wr: Arc::new(tokio::sync::Mutex::new(wr)),
            pending: Arc::default(),
            closed: Arc::default(),
            refusal: Arc::default(),
            addr: addr.to_string(),
        };
        let (pending, closed, refusal) =
            (conn.pending.clone(), conn.closed.clone(), conn.refusal.clone());
        tokio::spawn(async move {
            while let Ok(Some(bytes)) = read_bytes(&mut rd, MAX_SERVER_FRAME).await {
                match decode::<ServerFrame>(&bytes) {
                    Ok(ServerFrame::Reply {
                        id: 0,
                        body: Reply::Error { kind: ErrorKind::Unauthenticated, message },
                    }) => {
                        *lock(&refusal) = Some(message);
                        break;
                    }
                    Ok(ServerFrame::Reply { id, body }) => {
                        if let Some(tx) = lock(&pending).remove(&id) {
                            let _ = tx.send(body);
                        }
                    }
                    Ok(ServerFrame::Push(p)) => {
                        if let Some(session) = pushes.get().and_then(Weak::upgrade) {
                            session.on_push(p);
                        }
                    }
                    Err(_) => break,
                }
            }
            // A close of our own set the flag first; otherwise the node or the network ended it.
            let lost = !closed.swap(true, Ordering::SeqCst);
            // Every request still waiting learns the connection is gone.
            lock(&pending).clear();
            if lost {
                if let Some(session) = pushes.get().and_then(Weak::upgrade) {
                    session.dropped.notify_one();
                }
            }
        });
        if let Some(c) = &shared.config.credentials {
            conn.hello(shared, c).await?;
        }
        Ok(conn)
    }

    /// Say who this connection is; a refusal is final.
    async fn hello(&self, shared: &Shared, c: &Credentials) -> Result<(), DialError> {
        let deadline = Instant::now() + shared.config.connect_timeout * 2;
        let hello = Request::Hello { user: c.user.clone(), token: c.password.expose().to_string() };
        match self.request(shared, hello, deadline).await {
            Ok(Reply::Welcome { .. }) => Ok(()),
            Ok(Reply::Error { kind: ErrorKind::Unauthenticated, message }) => {
                self.close();
                Err(DialError::Refused(format!(
                    "{}: the service refused {:?}: {message}",
                    self.addr, c.user
                )))
            }
            Ok(Reply::Error { kind: ErrorKind::BadRequest, message })
                if message.contains("Hello") || message.contains("malformed") =>
            {
                self.close();
                Err(DialError::Refused(format!(
                    "{}: the node does not take credentials: {message}",
                    self.addr
                )))
            }
            Ok(other) => {
                self.close();
                Err(DialError::Retry(format!(
                    "{}: unexpected answer to hello: {other:?}",
                    self.addr
                )))
            }
            Err(e) => Err(match self.refused() {
                Some(why) => DialError::Refused(format!("{}: {why}", self.addr)),
                None => DialError::Retry(e),
            }),
        }
    }

    /// The node's refusal of this connection as a whole, if it sent one.
    fn refused(&self) -> Option<String> {
        lock(&self.refusal).clone()
    }

    fn is_open(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        lock(&self.pending).clear();
    }

    /// Send `body` and wait for its answer until `deadline`; `Err` if the connection failed.
    async fn request(
        &self,
        shared: &Shared,
        body: Request,
        deadline: Instant,
    ) -> Result<Reply, String> {
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id, tx);
        shared.config.requests.sent("service", kind_of(&body));
        let frame = encode(&ClientFrame { id, body });
        let write = async { crate::proto::send(&mut *self.wr.lock().await, &frame).await };
        let written = self.is_open() && matches!(timeout_at(deadline, write).await, Ok(Ok(())));
        if !written {
            // A write cut short leaves half a frame on the wire: the connection is done.
            self.close();
            return Err(format!("{}: connection closed", self.addr));
        }
        match timeout_at(deadline, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(format!("{}: connection lost", self.addr)),
            Err(_) => {
                lock(&self.pending).remove(&id);
                Err(format!("{}: no answer in time", self.addr))
            }
        }
    }
}

/// Dial nodes until one that leads answers `first`: the hint first, then every endpoint, the
/// ones that answered last time first. Each attempt gets [`ClientConfig::connect_timeout`] to
/// connect and as long again to answer, so a dead node (or one cut off behind a proxy that
/// still accepts) costs at most that before the next is tried. A follower's hint naming a node
/// that failed since it last answered is not followed: until the election ends, followers
/// still name the old leader, and dialling a paused or cut-off leader again on each hint cost
/// twice the connect timeout each time. Such a node is still tried in its turn (last), so one
/// that comes back is found.
async fn find_leader(
    shared: &Shared,
    first: &Request,
    mut hint: Option<String>,
    pushes: &PushSink,
    deadline: Instant,
) -> Result<(Conn, Reply), LockError> {
    let mut failures: Vec<String> = Vec::new();
    // Between rounds with no leader found: 50 ms, doubling to 400 ms, so that every session
    // of every client looking for the leader during an election does not flood the nodes.
    let mut pause = Duration::from_millis(50);
    loop {
        let mut candidates: Vec<String> = hint.take().into_iter().collect();
        candidates.extend(lock(&shared.order).iter().cloned());
        for addr in candidates {
            if Instant::now() >= deadline {
                break;
            }
            let attempt = deadline.min(Instant::now() + shared.config.connect_timeout * 2);
            let conn = match Conn::dial(&addr, shared, pushes.clone()).await {
                Ok(c) => c,
                Err(DialError::Refused(why)) => return Err(backend(why)),
                Err(DialError::Retry(e)) => {
                    shared.demote(&addr);
                    failures.push(e);
                    continue;
                }
            };
            match conn.request(shared, first.clone(), attempt).await {
                Ok(Reply::NotLeader { leader }) => {
                    conn.close();
                    failures.push(format!("{addr}: not the leader"));
                    let follow = shared.config.follow_leader_hints;
                    if let Some(l) = leader.filter(|l| follow && shared.worth_following(l, &addr)) {
                        hint = Some(l);
                        break;
                    }
                }
                Ok(Reply::Error { kind: ErrorKind::Unavailable, message }) => {
                    conn.close();
                    failures.push(format!("{addr}: {message}"));
                }
                Ok(Reply::Error { kind: ErrorKind::Unauthenticated, message }) => {
                    conn.close();
                    return Err(backend(format!(
                        "{addr}: {message} (give the client credentials)"
                    )));
                }
                Ok(reply) => {
                    shared.promote(&addr);
                    return Ok((conn, reply));
                }
                Err(e) => {
                    conn.close();
                    if let Some(why) = conn.refused() {
                        return Err(backend(format!("{addr}: {why}")));
                    }
                    shared.demote(&addr);
                    failures.push(e);
                }
            }
        }
        if Instant::now() >= deadline {
            failures.dedup();
            let tail: Vec<_> = failures.iter().rev().take(6).rev().cloned().collect();
            return Err(backend(format!(
                "no leader among {:?} answered within {:?}: {}",
                shared.endpoints,
                shared.config.request_timeout,
                tail.join("; ")
            )));
        }
        if hint.is_none() {
            tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
            pause = (pause * 2).min(Duration::from_millis(400));
        }
    }
}

type Key = (String, String);

/// Whether an answer to `request` shows the leader kept the session alive: a keep-alive (a
/// quorum check) or a command it committed.
fn renews(request: &Request) -> bool {
    matches!(request, Request::KeepAlive { .. } | Request::Acquire { .. } | Request::Release { .. })
}

/// A session: its connection, its holders and its waiters.
struct Session {
    id: SessionId,
    shared: Arc<Shared>,
    pushes: PushSink,
    conn: tokio::sync::Mutex<Option<Conn>>,
    lost: watch::Sender<Option<String>>,
    /// The send time of the last request the leader answered (the session stands until a
    /// TTL after it; see the module docs).
    renewed: Mutex<Instant>,
    held: Mutex<HashMap<Key, watch::Sender<LeaseState>>>,
    /// Each waiting ask, by lock and owner: its attempt and where its token goes.
    waiting: Mutex<HashMap<Key, (u64, oneshot::Sender<u64>)>>,
    /// The last attempt number given to an ask.
    asks: AtomicU64,
    /// Told when the node ends the session's connection: the keep-alive task then resumes
    /// the session at once if it holds or waits for a lock (see [`keep_alive`]).
    dropped: Arc<tokio::sync::Notify>,
}

impl Session {
    /// Open a session with the leader, and start its keep-alive.
    async fn open(shared: Arc<Shared>) -> Result<Arc<Session>, LockError> {
        let pushes = PushSink::default();
        let sent = Instant::now();
        let deadline = sent + shared.config.request_timeout;
        let ttl_ms = shared.config.ttl.as_millis() as u64;
        let (conn, reply) =
            find_leader(&shared, &Request::Open { ttl_ms }, None, &pushes, deadline).await?;
        let id = match reply {
            Reply::Opened { session } => session,
            Reply::Error { kind: ErrorKind::BadRequest, message } => {
                return Err(LockError::Config(message))
            }
            Reply::Error { kind, message } => {
                return Err(backend(format!("the service refused a session ({kind:?}): {message}")))
            }
            other => return Err(backend(format!("unexpected answer to open: {other:?}"))),
        };
        let session = Arc::new(Session {
            id,
            shared,
            pushes,
            conn: tokio::sync::Mutex::new(Some(conn)),
            lost: watch::channel(None).0,
            renewed: Mutex::new(sent),
            held: Mutex::default(),
            waiting: Mutex::default(),
            asks: AtomicU64::new(0),
            dropped: Arc::default(),
        });
        let _ = session.pushes.set(Arc::downgrade(&session));
        tokio::spawn(keep_alive(Arc::downgrade(&session)));
        Ok(session)
    }

    fn renewed_at(&self) -> Instant {
        *lock(&self.renewed)
    }

    /// A request sent at `sent` was answered by the leader.
    fn renew(&self, sent: Instant) {
        let mut at = lock(&self.renewed);
        if sent > *at {
            *at = sent;
        }
    }

    fn lost_reason(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    fn on_push(&self, push: Push) {
        match push {
            Push::Granted { lock, owner, token, attempt } => {
                self.granted(&[(lock, owner, token, attempt)])
            }
            Push::Revoked { lock, owner, token, by } => self.revoked(lock, owner, token, by),
            Push::SessionEnded { reason } => {
                self.lose(format!("the service ended the session: {reason}"))
            }
        }
    }

    /// An administrator took a lock this session held: its guard is told.
    fn revoked(&self, lock_id: String, owner: String, token: u64, by: String) {
        if let Some(tx) = lock(&self.held).remove(&(lock_id.clone(), owner)) {
            let reason = format!("lock {lock_id:?} (token {token}) was force-released by {by}");
            tx.send_replace(LeaseState::Lost(LeaseLost { reason }));
        }
    }

    /// Hand grants to the asks they answer. A grant for an ask nobody waits for any more was
    /// given up on: that ask's release gives it back, or a newer ask of the same owner takes
    /// it over on the server, which then answers that ask itself. So a grant goes only to
    /// the very ask it names, never to a later one of the same owner.
    fn granted(&self, held: &[Held]) {
        let mut waiting = lock(&self.waiting);
        for (lock, owner, token, attempt) in held {
            let key = (lock.clone(), owner.clone());
            if waiting.get(&key).is_some_and(|(waits, _)| waits == attempt) {
                if let Some((_, tx)) = waiting.remove(&key) {
                    let _ = tx.send(*token);
                }
            }
        }
    }

    /// Whether the session holds or waits for any lock.
    fn has_locks(&self) -> bool {
        !lock(&self.held).is_empty() || !lock(&self.waiting).is_empty()
    }

    /// Whether the session's connection is open.
    async fn connected(&self) -> bool {
        self.conn.lock().await.as_ref().is_some_and(Conn::is_open)
    }

    /// A new ask's attempt number.
    fn next_ask(&self) -> u64 {
        self.asks.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Forget `attempt`'s waiter, if it is still the one waiting.
    fn stop_waiting(&self, key: &Key, attempt: u64) {
        let mut waiting = lock(&self.waiting);
        if waiting.get(key).is_some_and(|(waits, _)| *waits == attempt) {
            waiting.remove(key);
        }
    }

    /// The session is over: tell every holder and waiter, once.
    fn lose(&self, reason: String) {
        let first = self.lost.send_if_modified(|r| {
            if r.is_none() {
                *r = Some(reason.clone());
                true
            } else {
                false
            }
        });
        if !first {
            return;
        }
        tracing::debug!("session {} lost: {reason}", self.id);
        for (_, tx) in lock(&self.held).drain() {
            tx.send_replace(LeaseState::Lost(LeaseLost { reason: reason.clone() }));
        }
        lock(&self.waiting).clear();
        if let Ok(mut c) = self.conn.try_lock() {
            if let Some(conn) = c.take() {
                conn.close();
            }
        }
    }

    /// Send `body` to the leader, reconnecting (and resuming) as needed, until the client's
    /// request timeout.
    async fn call(&self, body: Request) -> Result<Reply, LockError> {
        let deadline = Instant::now() + self.shared.config.request_timeout;
        self.call_until(body, deadline).await
    }

    async fn call_until(&self, body: Request, deadline: Instant) -> Result<Reply, LockError> {
        let mut hint = None;
        loop {
            if let Some(reason) = self.lost_reason() {
                return Err(LockError::LeaseLost { lock_id: String::new(), reason });
            }
            let conn = self.connection(hint.take(), deadline).await?;
            let sent = Instant::now();
            // A node that keeps the connection open and answers nothing (paused, stalled) is
            // given up on after TTL/3, not at the deadline: the session then resumes on the
            // leader the others elected while its lease still stands.
            let attempt = deadline.min(sent + self.shared.config.ttl / 3);
            let last = match conn.request(&self.shared, body.clone(), attempt).await {
                Ok(Reply::NotLeader { leader }) => {
                    let follow = self.shared.config.follow_leader_hints;
                    hint = leader.filter(|l| follow && self.shared.worth_following(l, &conn.addr));
                    self.drop_conn(&conn).await;
                    format!("{}: not the leader", conn.addr)
                }
                Ok(Reply::Error { kind: ErrorKind::Unavailable, message }) => {
                    self.drop_conn(&conn).await;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    format!("{}: {message}", conn.addr)
                }
                Ok(Reply::Error { kind: ErrorKind::SessionGone, message }) => {
                    self.lose(message.clone());
                    return Err(LockError::LeaseLost { lock_id: String::new(), reason: message });
                }
                Ok(reply) => {
                    if renews(&body) && !matches!(reply, Reply::Error { .. }) {
                        self.renew(sent);
                    }
                    return Ok(reply);
                }
                Err(e) => {
                    self.drop_conn(&conn).await;
                    self.shared.demote(&conn.addr);
                    e
                }
            };
            if Instant::now() >= deadline {
                return Err(backend(format!(
                    "request not answered within {:?}: {last}",
                    self.shared.config.request_timeout
                )));
            }
        }
    }

    async fn drop_conn(&self, conn: &Conn) {
        conn.close();
        let mut c = self.conn.lock().await;
        if c.as_ref().is_some_and(|c| Arc::ptr_eq(&c.closed, &conn.closed)) {
            *c = None;
        }
    }

    /// The open connection, or a new one to the leader with the session resumed on it.
    async fn connection(&self, hint: Option<String>, deadline: Instant) -> Result<Conn, LockError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_open()) {
            return Ok(c.clone());
        }
        let resume = Request::Resume { session: self.id };
        let (conn, reply) =
            find_leader(&self.shared, &resume, hint, &self.pushes, deadline).await?;
        match reply {
            Reply::Resumed { held } => {
                self.granted(&held);
                *slot = Some(conn.clone());
                Ok(conn)
            }
            Reply::Error { kind: ErrorKind::SessionGone, message } => {
                conn.close();
                drop(slot);
                self.lose(message.clone());
                Err(LockError::LeaseLost { lock_id: String::new(), reason: message })
            }
            other => {
                conn.close();
                Err(backend(format!("unexpected answer to resume: {other:?}")))
            }
        }
    }
}

/// Renew `session` every TTL/3; declare it lost when a whole TTL passes from the send time
/// of the last answered keep-alive.
///
/// When the node ends the connection while the session holds or waits for a lock, renew at
/// once instead: the renewal finds the leader and resumes the session there, so a grant the
/// new leader pushes reaches its waiter now, not at the next keep-alive (up to TTL/3 later,
/// which after a leader's death was most of the handoff's delay). ZooKeeper's and etcd's
/// clients reconnect at once too. An idle session reconnects at its next request.
async fn keep_alive(session: Weak<Session>) {
    let Some((ttl, dropped)) = session.upgrade().map(|s| (s.shared.config.ttl, s.dropped.clone()))
    else {
        return;
    };
    let mut next = None;
    loop {
        let Some(s) = session.upgrade() else {
            return;
        };
        // Every answered request renews the session (the leader counts a commit as it counts
        // a keep-alive): a keep-alive goes out only after TTL/3 without one.
        let due = next.take().unwrap_or_else(|| s.renewed_at() + ttl / 3);
        drop(s);
        let woken = tokio::select! {
            _ = tokio::time::sleep_until(due) => false,
            _ = dropped.notified() => true,
        };
        let Some(s) = session.upgrade() else {
            return;
        };
        if s.lost_reason().is_some() {
            return;
        }
        let limit = s.renewed_at() + ttl;
        if woken {
            if !s.has_locks() || s.connected().await {
                next = Some(due);
                continue;
            }
        } else if s.renewed_at() + ttl / 3 > Instant::now() {
            continue;
        }
        match s.call_until(Request::KeepAlive { session: s.id }, limit).await {
            Ok(Reply::Alive) => {}
            Err(LockError::LeaseLost { .. }) => return,
            other => {
                tracing::debug!("session {}: keep-alive {other:?}", s.id);
                next = Some(Instant::now() + Duration::from_millis(100));
            }
        }
        if Instant::now() >= s.renewed_at() + ttl {
            s.lose(format!(
                "no request answered within the session TTL ({ttl:?}): the service may \
                 have expired the session"
            ));
            return;
        }
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
        if endpoints.is_empty() {
            return Err(LockError::Config("no lock-service endpoint given".into()));
        }
        if !(crate::server::MIN_TTL..=crate::server::MAX_TTL).contains(&config.ttl) {
            return Err(LockError::Config(format!(
                "session TTL {:?} is out of range: {:?} to {:?}",
                config.ttl,
                crate::server::MIN_TTL,
                crate::server::MAX_TTL
            )));
        }
        let tls = config
            .tls
            .as_ref()
            .map(crate::tls::client_connector)
            .transpose()
            .map_err(|e| LockError::Config(format!("lock-service TLS: {e}")))?;
        let shared = Arc::new(Shared {
            endpoints: endpoints.to_vec(),
            order: Mutex::new(endpoints.to_vec()),
            failed: Mutex::new(Vec::new()),
            config,
            next_id: AtomicU64::new(1),
            tls,
        });
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
            Reply::Error { kind, message } => {
                Err(backend(format!("force-release of {lock_id:?} refused ({kind:?}): {message}")))
            }
            other => Err(unexpected(lock_id, other)),
        }
    }

    /// End the session: every lock it holds goes to the next waiter at once.
    pub async fn close(&self) -> Result<(), LockError> {
        let Some(s) = self.session.lock().await.take() else {
            return Ok(());
        };
        let result = s.call(Request::Close { session: s.id }).await;
        s.lose("the session was closed by its client".into());
        result.map(|_| ())
    }
}

/// A [`Locker`] on a [`ServiceClient`]'s session.
pub struct ServiceLocker {
    client: ServiceClient,
    owner: String,
}

/// Leaves the queue (or releases a grant that raced in) if an acquisition is abandoned. The
/// release names the ask, so it gives up that ask only, even if it arrives after a new ask of
/// the same owner for the same lock (see [`crate::state`]).
struct Cancel {
    session: Arc<Session>,
    key: Key,
    attempt: u64,
    armed: bool,
}

impl Cancel {
    /// The ask this guards (`wait`: the mandatory lock, else the soft one).
    fn ask(&self, wait: bool) -> Request {
        Request::Acquire {
            session: self.session.id,
            lock: self.key.0.clone(),
            owner: self.key.1.clone(),
            wait,
            attempt: self.attempt,
        }
    }

    /// The release that gives the ask up.
    fn request(&self) -> Request {
        Request::Release {
            session: self.session.id,
            lock: self.key.0.clone(),
            owner: self.key.1.clone(),
            attempt: self.attempt,
        }
    }

    async fn now(mut self) {
        self.armed = false;
        self.session.stop_waiting(&self.key, self.attempt);
        let _ = self.session.call(self.request()).await;
    }
}

impl Drop for Cancel {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.session.stop_waiting(&self.key, self.attempt);
        let (session, request) = (self.session.clone(), self.request());
        if let Ok(h) = tokio::runtime::Handle::try_current() {
            h.spawn(async move {
                let _ = session.call(request).await;
            });
        }
    }
}

struct ServiceRelease {
    session: Arc<Session>,
    key: Key,
    attempt: u64,
}

#[async_trait]
impl Release for ServiceRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        if let Some(tx) = lock(&self.session.held).remove(&self.key) {
            tx.send_replace(LeaseState::Released);
        }
        if self.session.lost_reason().is_some() {
            return Ok(());
        }
        let request = Request::Release {
            session: self.session.id,
            lock: self.key.0.clone(),
            owner: self.key.1.clone(),
            attempt: self.attempt,
        };
        match self.session.call(request).await {
            Ok(_) | Err(LockError::LeaseLost { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl ServiceLocker {
    fn guard(&self, session: Arc<Session>, lock_id: &str, token: u64, attempt: u64) -> LockGuard {
        let key = (lock_id.to_string(), self.owner.clone());
        let (tx, rx) = watch::channel(LeaseState::Held);
        lock(&session.held).insert(key.clone(), tx);
        if let Some(reason) = session.lost_reason() {
            if let Some(tx) = lock(&session.held).remove(&key) {
                tx.send_replace(LeaseState::Lost(LeaseLost { reason }));
            }
        }
        let release = ServiceRelease { session, key, attempt };
        LockGuard::new(lock_id, &self.owner, token, rx, Box::new(release))
    }

    fn with_lock(e: LockError, lock_id: &str) -> LockError {
        match e {
            LockError::LeaseLost { reason, .. } => {
                LockError::LeaseLost { lock_id: lock_id.to_string(), reason }
            }
            other => other,
        }
    }

    async fn acquire(
        &self,
        lock_id: &str,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, LockError> {
        let start = Instant::now();
        let session = self.client.live_session().await?;
        let key = (lock_id.to_string(), self.owner.clone());
        let (tx, rx) = oneshot::channel();
        let attempt = session.next_ask();
        lock(&session.waiting).insert(key.clone(), (attempt, tx));
        let cancel = Cancel { session: session.clone(), key, attempt, armed: true };
        let request = cancel.ask(true);
        let timed_out = |cancel: Cancel| async move {
            cancel.now().await;
            LockError::Timeout { lock_id: lock_id.to_string(), waited: start.elapsed() }
        };
        let deadline = timeout.map(|t| start + t);
        let reply = match deadline {
            Some(d) => match tokio::time::timeout_at(d, session.call(request)).await {
                Ok(r) => r,
                Err(_) => return Err(timed_out(cancel).await),
            },
            None => session.call(request).await,
        };
        // The answer (granted or queued) says the ask is in the lock's queue: no ask made
        // after this instant can be served before it.
        let queued_at = Instant::now();
        let token = match reply.map_err(|e| Self::with_lock(e, lock_id))? {
            Reply::Granted { token } => token,
            Reply::Queued => {
                let granted = match deadline {
                    Some(d) => match tokio::time::timeout_at(d, rx).await {
                        Ok(r) => r,
                        Err(_) => return Err(timed_out(cancel).await),
                    },
                    None => rx.await,
                };
                granted.map_err(|_| LockError::LeaseLost {
                    lock_id: lock_id.to_string(),
                    reason: session.lost_reason().unwrap_or_else(|| "the session ended".into()),
                })?
            }
            other => return Err(unexpected(lock_id, other)),
        };
        let mut cancel = cancel;
        cancel.armed = false;
        session.stop_waiting(&cancel.key, attempt);
        Ok(self.guard(session, lock_id, token, attempt).with_queued_at(queued_at))
    }
}

fn unexpected(lock_id: &str, reply: Reply) -> LockError {
    match reply {
        Reply::Error { kind: ErrorKind::BadRequest, message } => LockError::InvalidId {
            what: "lock id",
            id: lock_id.chars().take(64).collect(),
            reason: message,
        },
        Reply::Error { kind, message } => {
            backend(format!("lock {lock_id:?}: the service refused ({kind:?}): {message}"))
        }
        other => backend(format!("unexpected answer for lock {lock_id:?}: {other:?}")),
    }
}

#[async_trait]
impl Locker for ServiceLocker {
    fn algorithm(&self) -> &str {
        ALGORITHM
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        self.acquire(lock_id, timeout).await
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        let session = self.client.live_session().await?;
        let attempt = session.next_ask();
        // Dropped before the answer (or failed), the ask may still have been granted: give it
        // back, as an abandoned `lock` does.
        let key = (lock_id.to_string(), self.owner.clone());
        let mut cancel = Cancel { session: session.clone(), key, attempt, armed: true };
        let reply =
            session.call(cancel.ask(false)).await.map_err(|e| Self::with_lock(e, lock_id))?;
        cancel.armed = false;
        match reply {
            Reply::Granted { token } => Ok(Some(
                self.guard(session, lock_id, token, attempt).with_queued_at(Instant::now()),
            )),
            Reply::Busy => Ok(None),
            other => Err(unexpected(lock_id, other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_naming_a_node_that_failed_since_it_last_answered_is_not_followed() {
        let nodes = ["a:1".to_string(), "b:1".to_string(), "c:1".to_string()];
        let shared = Shared {
            endpoints: nodes.to_vec(),
            order: Mutex::new(nodes.to_vec()),
            failed: Mutex::new(Vec::new()),
            config: ClientConfig::default(),
            next_id: AtomicU64::new(1),
            tls: None,
        };
        let follows = |leader: &str, from: &str| shared.worth_following(leader, from);
        assert!(follows("a:1", "b:1"));
        assert!(!follows("b:1", "b:1"), "a node naming itself");
        // a:1 stops answering: it goes last, and b's hint naming it is not followed...
        shared.demote("a:1");
        assert_eq!(*lock(&shared.order), ["b:1", "c:1", "a:1"]);
        assert!(!follows("a:1", "b:1"));
        assert!(follows("c:1", "b:1"));
        // ...until it answers again.
        shared.promote("a:1");
        assert_eq!(*lock(&shared.order), ["a:1", "b:1", "c:1"]);
        assert!(follows("a:1", "b:1"));
    }
}
