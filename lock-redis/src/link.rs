//! The backend's connection to Redis, re-established after it breaks.
//!
//! Why not one `MultiplexedConnection` for the backend's life: a server restart closes it, and
//! from then on every request failed with "broken pipe" until the process made a new backend.
//! Why not the `redis` crate's `ConnectionManager`: a request issued while it reconnects waits
//! for the whole retry sequence (several connect attempts with exponential delays), so a lock
//! call during an outage could hang far beyond the configured timeouts; and it is a feature that
//! pulls in more crates. What a lock needs is narrower:
//!
//! - a request never waits longer than one connect attempt (`connect_timeout` +
//!   `response_timeout`) plus its own `response_timeout`;
//! - while the server is down, requests fail at once with [`LockError::Backend`] between
//!   attempts, and attempts are spaced by a bounded exponential backoff (from
//!   [`FIRST_RETRY`] doubling up to the configured maximum), so a crowd of contenders does not
//!   hammer a restarting server;
//! - the first request after the backoff has passed reconnects (one at a time: the others wait
//!   for that attempt rather than starting their own), and the backend goes on as before.
//!
//! A connection is dropped on an I/O failure (closed, reset, refused) and on errors the driver
//! marks as needing a reconnect; to a fixed server, a response timeout alone keeps it (the
//! server may be slow, and a paused network resumes on the same connection). On a tracking
//! connection (RESP3, below) the driver also says when the connection closes, and the link
//! drops it then, so that the next request reconnects instead of failing on it.
//!
//! **A refusal is not an outage.** A connect attempt the server refuses for who we are or what
//! we may do (`WRONGPASS`, `NOAUTH`, `NOPERM`, a server without RESP3 for tracking), or whose
//! TLS handshake a certificate fails, or that meets a port speaking TLS where the client does
//! not or the other way round ([`crate::tls`] says how that is told from an outage), fails with
//! a [`LockError::Backend`] that names the server, the user and what was refused, and the
//! backoff jumps to its maximum at once: nothing changes by asking again soon (an operator
//! must), so neither a waiter nor a holder's renewals hammer the server with it.
//!
//! **Tracking** ([`crate::tracking`]): with [`RedisConnectConfig::tracking`] every connection
//! speaks RESP3 and is armed with `CLIENT TRACKING ON NOLOOP` as part of its connect attempt;
//! the driver hands the server's `invalidate` pushes to the link's [`Tracker`], and a new
//! connection is announced to it ([`Tracker::rearmed`]) so that holders read their keys on it.
//!
//! **Where it connects** is the link's [`Target`]: one fixed server, or whichever instance the
//! Sentinels name as the master, asked again at every attempt ([`crate::sentinel`] says how).
//! Through Sentinel, a connection is dropped in three more cases, so that the next request
//! asks the Sentinels again:
//! - a `READONLY` or `MASTERDOWN` reply: the instance is a replica now (demoted while our
//!   connection survived, its `CLIENT KILL` lost or not sent yet); it will not become the master
//!   again by itself, so staying would fail every write;
//! - a response timeout: a master that does not answer is the very thing Sentinel fails over,
//!   and the guidelines say to resolve again after one. Kept, the connection to a paused master
//!   would carry our next requests to it once it resumes, deposed, until Sentinel demotes it
//!   (several seconds later: it waits for the instance to stay up);
//! - not `LOADING`: the instance that loads its data is the one the Sentinels name (a master
//!   restarted with persistence); asking again would name it again, a new connection per
//!   request until it is ready.
//!
//! An attempt through Sentinel may take one connect timeout per Sentinel that does not answer,
//! before the master's own connect attempt.
//!
//! **Every command the backend sends passes a [`Wire`]**, which reports it to the backend's
//! [`RequestHook`](lock_core::requests::RequestHook) before it goes: the locks' commands on
//! [`Conn`], and a connect attempt's `PING`, `ROLE`, `CLIENT TRACKING` and Sentinel queries.
//! One command is one request (a script's `EVALSHA` is one, and so is the `SCRIPT LOAD` the
//! driver sends when the server does not know the script yet); a pipeline of N commands is N.
//! What the driver sends by itself when it sets a connection up is counted too
//! ([`Wire::connected`]): its clients are made without the driver's `CLIENT SETINFO`
//! ([`quiet`](crate::wire::quiet)), so that is the `HELLO 3` of a RESP3
//! connection (which carries the credentials), or on RESP2 the `AUTH` credentials ask for, and
//! the `SELECT` of a database number.

use crate::attempt::{attempt_error, AttemptError, Said};
use crate::sentinel::Sentinels;
use crate::tls::connect_error;
use crate::tracking::Tracker;
use crate::wire::Wire;
use crate::{backend_err, RedisConnectConfig};
use lock_core::{BackendErrorKind, LockError};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, PushInfo, PushKind, RedisError};
use redis::{RedisFuture, ServerErrorKind, Value};
use std::fmt::Display;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::time::Instant;

/// The delay before the first reconnect attempt after a failed one.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(50);

struct State {
    /// The live connection and its generation (which invalidation compares, so that a failure
    /// seen on an old connection never drops a newer one).
    conn: Option<(u64, MultiplexedConnection)>,
    /// The last generation handed to a connect attempt.
    generation: u64,
    /// No new attempt before this instant (after a failed one).
    retry_at: Option<Instant>,
    /// The wait after the next failed attempt.
    backoff: Duration,
    /// Why the last attempt or connection failed, and its kind.
    last_error: String,
    last_kind: BackendErrorKind,
    /// Whether the last attempt was refused (credentials, ACL) rather than unanswered.
    refused: bool,
}

/// Where a [`Link`] connects.
pub(crate) enum Target {
    /// One server at a fixed address (the single-server mode, each Redlock master), with the
    /// credentials and protocol of the backend's settings.
    Fixed(redis::Client),
    /// The master the Sentinels name, asked at every attempt.
    Sentinel(Sentinels),
}

/// Who the link connects as, and whether it tracks keys.
pub(crate) struct Identity {
    /// How messages name the user: `as user 'locker'`, `without credentials`.
    pub(crate) who: String,
    /// Whether connections are armed for tracking (RESP3, `CLIENT TRACKING ON NOLOOP`).
    pub(crate) tracking: bool,
}

pub(crate) struct Link {
    /// Itself, for the driver's push callback (which must not keep the link alive).
    me: Weak<Link>,
    target: Target,
    config: AsyncConnectionConfig,
    /// Bound of one attempt at the server itself, handshake and first `PING` or `ROLE`
    /// included.
    attempt_timeout: Duration,
    /// The connect timeout: bound of one Sentinel's answer, and of the TLS handshake that tells
    /// a TLS-only port from an outage ([`connect_error`]).
    sentinel_timeout: Duration,
    max_backoff: Duration,
    addr: Arc<str>,
    who: String,
    /// The holders' bells, when connections track keys.
    tracker: Option<Arc<Tracker>>,
    state: Mutex<State>,
    /// Held by the one request that is reconnecting.
    connecting: tokio::sync::Mutex<()>,
    /// How many connections were made, the first included.
    connects: std::sync::atomic::AtomicU64,
    /// Where its commands are reported.
    wire: Wire,
}

impl Link {
    /// Connect now (so that a wrong address, refused credentials or an unknown master name
    /// fail the backend's `connect`), then keep the connection alive as the module docs say.
    pub(crate) async fn connect(
        target: Target,
        config: &RedisConnectConfig,
        identity: Identity,
        addr: Arc<str>,
        wire: Wire,
    ) -> Result<Arc<Link>, LockError> {
        let link = Link::unconnected(target, config, identity, addr, wire);
        let generation = link.next_generation();
        match link.open(generation).await {
            Ok(conn) => {
                link.install(generation, conn);
                Ok(link)
            }
            // Every Sentinel answered that it knows no such master: the name is wrong.
            Err(e @ AttemptError::UnknownMaster(_)) => {
                Err(LockError::Config(format!("cannot connect to Redis at {}: {e}", link.addr)))
            }
            Err(e) => Err(link.failed("cannot connect to Redis", e)),
        }
    }

    /// A link that connects at its first request: for a Redlock master that is down when the
    /// lock starts (one vote less, not a failure, while a majority answers).
    pub(crate) fn unconnected(
        target: Target,
        config: &RedisConnectConfig,
        identity: Identity,
        addr: Arc<str>,
        wire: Wire,
    ) -> Arc<Link> {
        let driver = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout));
        Arc::new_cyclic(|me| Link {
            me: me.clone(),
            target,
            config: driver,
            attempt_timeout: config.connect_timeout + config.response_timeout,
            sentinel_timeout: config.connect_timeout,
            max_backoff: config.max_reconnect_delay.max(FIRST_RETRY),
            addr,
            who: identity.who,
            tracker: identity.tracking.then(Tracker::new),
            state: Mutex::new(State {
                conn: None,
                generation: 0,
                retry_at: None,
                backoff: FIRST_RETRY,
                last_error: String::new(),
                last_kind: BackendErrorKind::Unavailable,
                refused: false,
            }),
            connecting: tokio::sync::Mutex::new(()),
            connects: 0.into(),
            wire,
        })
    }

    /// The error of a failed attempt, the driver's error kept: a refusal names the user it
    /// refused.
    fn failed(&self, what: &str, e: AttemptError) -> LockError {
        match e {
            AttemptError::Refused(s) => s.error(&format!("{what} at {} {}", self.addr, self.who)),
            AttemptError::Failed(s) => s.error(&format!("{what} at {}", self.addr)),
            AttemptError::UnknownMaster(m) => {
                backend_err(BackendErrorKind::Other, format!("{what} at {}: {m}", self.addr))
            }
        }
    }

    /// How messages name the user the link connects as (`as user 'locker'`).
    pub(crate) fn who(&self) -> &str {
        &self.who
    }

    /// The holders' bells, when the link's connections track keys.
    pub(crate) fn tracker(&self) -> Option<&Arc<Tracker>> {
        self.tracker.as_ref()
    }

    fn next_generation(&self) -> u64 {
        let mut s = self.state.lock().unwrap();
        s.generation += 1;
        s.generation
    }

    /// The driver's settings for connection `generation`: with tracking, a push callback
    /// that rings the holders' bells and drops the connection when the driver says it closed.
    fn driver_config(&self, generation: u64) -> AsyncConnectionConfig {
        if self.tracker.is_none() {
            return self.config.clone();
        }
        let me = self.me.clone();
        self.config.clone().set_push_sender(move |push: PushInfo| {
            if let Some(link) = me.upgrade() {
                link.pushed(generation, push);
            }
            Ok::<(), std::convert::Infallible>(())
        })
    }

    /// A push from the server (or the driver's own `Disconnection`) on connection `generation`.
    fn pushed(&self, generation: u64, push: PushInfo) {
        match (push.kind, &self.tracker) {
            (PushKind::Invalidate, Some(tracker)) => tracker.invalidated(&push.data),
            (PushKind::Disconnection, _) => self.broken(generation, &"the connection closed"),
            _ => {}
        }
    }

    /// One connect attempt at the target: through the Sentinels when it has them (each
    /// bounded by its own timeout), then TCP, handshake and a `PING` (fixed) or `ROLE`
    /// (Sentinel) that proves the peer speaks RESP, and the tracking command when the link
    /// tracks; the whole bounded (a port that accepts and never answers cannot hang it).
    async fn open(&self, generation: u64) -> Result<MultiplexedConnection, AttemptError> {
        let config = self.driver_config(generation);
        let bound = self.sentinel_timeout * self.sentinels() as u32 + self.attempt_timeout;
        let attempt = async {
            let conn = match &self.target {
                Target::Fixed(client) => self.open_fixed(client, &config).await?,
                Target::Sentinel(sentinels) => {
                    let sentinel = (&self.config, self.sentinel_timeout);
                    sentinels.connect(sentinel, &config, &self.wire).await?
                }
            };
            self.arm(conn).await
        };
        tokio::time::timeout(bound, attempt).await.map_err(|_| {
            let no_answer = format!("no answer within {bound:?}");
            AttemptError::Failed(Said::own(BackendErrorKind::Timeout, no_answer))
        })?
    }

    fn sentinels(&self) -> usize {
        match &self.target {
            Target::Fixed(_) => 0,
            Target::Sentinel(s) => s.len(),
        }
    }

    async fn open_fixed(
        &self,
        client: &redis::Client,
        config: &AsyncConnectionConfig,
    ) -> Result<MultiplexedConnection, AttemptError> {
        let refused = async |e: RedisError, step: &str| {
            connect_error(&e, step, client, self.sentinel_timeout).await
        };
        let conn = client.get_multiplexed_async_connection_with_config(config).await;
        let mut conn = match conn {
            Ok(conn) => conn,
            Err(e) => return Err(refused(e, "the connection").await),
        };
        self.wire.connected(client.get_connection_info().redis_settings());
        let pong = redis::cmd("PING").query_async(&mut self.wire.on(&mut conn)).await;
        let pong: String = match pong {
            Ok(pong) => pong,
            Err(e) => return Err(refused(e, "PING").await),
        };
        if pong != "PONG" {
            let odd = format!("PING answered {pong:?}");
            return Err(AttemptError::Failed(Said::own(BackendErrorKind::Protocol, odd)));
        }
        Ok(conn)
    }

    /// `CLIENT TRACKING ON NOLOOP` on a new connection, when the link tracks: the server
    /// tells it of changes to the keys it reads, except changes it makes itself.
    async fn arm(
        &self,
        mut conn: MultiplexedConnection,
    ) -> Result<MultiplexedConnection, AttemptError> {
        if self.tracker.is_some() {
            let () = redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("ON")
                .arg("NOLOOP")
                .query_async(&mut self.wire.on(&mut conn))
                .await
                .map_err(|e| attempt_error(&e, "CLIENT TRACKING"))?;
        }
        Ok(conn)
    }

    fn install(
        &self,
        generation: u64,
        conn: MultiplexedConnection,
    ) -> (u64, MultiplexedConnection) {
        {
            let mut s = self.state.lock().unwrap();
            s.conn = Some((generation, conn.clone()));
            s.retry_at = None;
            s.backoff = FIRST_RETRY;
        }
        self.connects.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(tracker) = &self.tracker {
            tracker.rearmed(generation);
        }
        (generation, conn)
    }

    /// The live connection, or `None` with the error to report while the backoff runs.
    fn current(&self) -> Result<Option<(u64, MultiplexedConnection)>, LockError> {
        let s = self.state.lock().unwrap();
        if let Some(c) = &s.conn {
            return Ok(Some(c.clone()));
        }
        match s.retry_at {
            Some(at) if Instant::now() < at => {
                let wait = at.saturating_duration_since(Instant::now());
                Err(match s.refused {
                    true => backend_err(
                        BackendErrorKind::Refused,
                        format!(
                            "Redis at {} refused the backend {}: {} (next attempt in {wait:?})",
                            self.addr, self.who, s.last_error
                        ),
                    ),
                    false => backend_err(
                        s.last_kind,
                        format!(
                            "Redis unreachable at {}: {} (reconnecting; next attempt in \
                             {wait:?})",
                            self.addr, s.last_error
                        ),
                    ),
                })
            }
            _ => Ok(None),
        }
    }

    /// A connection for one request: the live one, or a new one if the backoff allows an
    /// attempt now, or a [`LockError::Backend`] at once.
    pub(crate) async fn get(self: &Arc<Self>) -> Result<Conn, LockError> {
        if let Some((generation, conn)) = self.current()? {
            return Ok(Conn { link: self.clone(), generation, conn });
        }
        let _turn = self.connecting.lock().await;
        // Whoever held the turn before us may have connected, or failed and set a backoff.
        if let Some((generation, conn)) = self.current()? {
            return Ok(Conn { link: self.clone(), generation, conn });
        }
        let generation = self.next_generation();
        match self.open(generation).await {
            Ok(conn) => {
                let (generation, conn) = self.install(generation, conn);
                Ok(Conn { link: self.clone(), generation, conn })
            }
            Err(e) => {
                let mut s = self.state.lock().unwrap();
                // A refusal does not pass with time: wait the longest before asking again.
                let refused = matches!(e, AttemptError::Refused(_));
                let wait = if refused { self.max_backoff } else { s.backoff };
                s.retry_at = Some(Instant::now() + wait);
                s.backoff = (wait * 2).min(self.max_backoff);
                s.refused = refused;
                s.last_error = e.to_string();
                s.last_kind = match &e {
                    AttemptError::Refused(said) | AttemptError::Failed(said) => said.kind,
                    AttemptError::UnknownMaster(_) => BackendErrorKind::Other,
                };
                drop(s);
                Err(self.failed("cannot reconnect to Redis", e))
            }
        }
    }

    /// Forget connection `generation` after `e` showed it broken (or no longer on the
    /// master); the next request reconnects.
    fn broken(&self, generation: u64, e: &dyn Display) {
        let mut s = self.state.lock().unwrap();
        if s.conn.as_ref().is_some_and(|(g, _)| *g == generation) {
            s.conn = None;
            s.last_error = e.to_string();
        }
    }

    fn follows_sentinel(&self) -> bool {
        matches!(self.target, Target::Sentinel(_))
    }

    /// How many connections were made so far, the first included.
    pub(crate) fn connects(&self) -> u64 {
        self.connects.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Whether `e` means the connection cannot carry further requests.
fn breaks_connection(e: &RedisError) -> bool {
    e.is_unrecoverable_error() || e.is_connection_dropped() || (e.is_io_error() && !e.is_timeout())
}

/// Whether `e` means, through Sentinel, that the instance may no longer be the master: it
/// did not answer in time, or says it is a replica (see the module docs).
fn deposes_master(e: &RedisError) -> bool {
    e.is_timeout() || matches!(e.kind(), ErrorKind::Server(kind) if replica_says(kind))
}

/// Whether a server error of `kind` means the instance is a replica: `READONLY` to a write,
/// `MASTERDOWN` from a replica that lost its master.
fn replica_says(kind: ServerErrorKind) -> bool {
    matches!(kind, ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
}

/// One request's handle on the link's connection: reports a broken connection back to it.
pub(crate) struct Conn {
    link: Arc<Link>,
    generation: u64,
    conn: MultiplexedConnection,
}

impl Conn {
    /// Which of the link's connections this is (they count up from 1).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    fn check<T>(&self, r: Result<T, RedisError>) -> Result<T, RedisError> {
        if let Err(e) = &r {
            if breaks_connection(e) || (self.link.follows_sentinel() && deposes_master(e)) {
                self.link.broken(self.generation, e);
            }
        }
        r
    }

    /// The driver hands a server's error reply over as a value (`Value::ServerError`), made an
    /// error only when the caller converts it: a `READONLY` must be caught here.
    fn check_reply(&self, reply: &Value) {
        if let Value::ServerError(e) = reply {
            if self.link.follows_sentinel() && e.kind().is_some_and(replica_says) {
                self.link.broken(self.generation, e);
            }
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = self.link.wire.on(&mut self.conn).req_packed_command(cmd).await;
            let r = self.check(r);
            if let Ok(reply) = &r {
                self.check_reply(reply);
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = self
                .link
                .wire
                .on(&mut self.conn)
                .req_packed_commands(pipeline, offset, count)
                .await;
            let r = self.check(r);
            for reply in r.iter().flatten() {
                self.check_reply(reply);
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
