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
//! marks as needing a reconnect; a response timeout alone keeps it (the server may be slow,
//! and a paused network resumes on the same connection).

use crate::backend_err;
use lock_core::LockError;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, RedisFuture, Value};
use std::fmt::Display;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The delay before the first reconnect attempt after a failed one.
pub(crate) const FIRST_RETRY: Duration = Duration::from_millis(50);

struct State {
    /// The live connection and its generation (which invalidation compares, so that a failure
    /// seen on an old connection never drops a newer one).
    conn: Option<(u64, MultiplexedConnection)>,
    generation: u64,
    /// No new attempt before this instant (after a failed one).
    retry_at: Option<Instant>,
    /// The wait after the next failed attempt.
    backoff: Duration,
    /// Why the last attempt or connection failed.
    last_error: String,
}

pub(crate) struct Link {
    client: redis::Client,
    config: AsyncConnectionConfig,
    /// Bound of one connect attempt, handshake and first `PING` included.
    attempt_timeout: Duration,
    max_backoff: Duration,
    addr: Arc<str>,
    state: Mutex<State>,
    /// Held by the one request that is reconnecting.
    connecting: tokio::sync::Mutex<()>,
    /// How many connections were made, the first included.
    connects: std::sync::atomic::AtomicU64,
}

impl Link {
    /// Connect now (so that a wrong address fails the backend's `connect`), then keep the
    /// connection alive as the module docs say.
    pub(crate) async fn connect(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
        max_backoff: Duration,
        addr: Arc<str>,
    ) -> Result<Link, LockError> {
        let link = Link::unconnected(client, connect_timeout, response_timeout, max_backoff, addr);
        let conn = link.open().await.map_err(|e| link.fail("cannot connect to Redis", &e))?;
        link.install(conn);
        Ok(link)
    }

    /// A link that connects at its first request: for a Redlock master that is down when the
    /// lock starts (one vote less, not a failure, while a majority answers).
    pub(crate) fn unconnected(
        client: redis::Client,
        connect_timeout: Duration,
        response_timeout: Duration,
        max_backoff: Duration,
        addr: Arc<str>,
    ) -> Link {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(response_timeout));
        Link {
            client,
            config,
            attempt_timeout: connect_timeout + response_timeout,
            max_backoff: max_backoff.max(FIRST_RETRY),
            addr,
            state: Mutex::new(State {
                conn: None,
                generation: 0,
                retry_at: None,
                backoff: FIRST_RETRY,
                last_error: String::new(),
            }),
            connecting: tokio::sync::Mutex::new(()),
            connects: 0.into(),
        }
    }

    fn fail(&self, what: &str, e: &dyn Display) -> LockError {
        backend_err(format!("{what} at {}: {e}", self.addr))
    }

    /// One connect attempt: TCP, handshake and a `PING` that proves the peer speaks RESP, all
    /// bounded by `attempt_timeout` (a port that accepts and never answers cannot hang it).
    async fn open(&self) -> Result<MultiplexedConnection, String> {
        let attempt = async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&self.config)
                .await
                .map_err(|e| e.to_string())?;
            let pong: String =
                redis::cmd("PING").query_async(&mut conn).await.map_err(|e| e.to_string())?;
            if pong != "PONG" {
                return Err(format!("PING answered {pong:?}"));
            }
            Ok(conn)
        };
        tokio::time::timeout(self.attempt_timeout, attempt)
            .await
            .map_err(|_| format!("no answer within {:?}", self.attempt_timeout))?
    }

    fn install(&self, conn: MultiplexedConnection) -> (u64, MultiplexedConnection) {
        let mut s = self.state.lock().unwrap();
        s.generation += 1;
        s.conn = Some((s.generation, conn.clone()));
        s.retry_at = None;
        s.backoff = FIRST_RETRY;
        self.connects.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        (s.generation, conn)
    }

    /// The live connection, or `None` with the error to report while the backoff runs.
    fn current(&self) -> Result<Option<(u64, MultiplexedConnection)>, LockError> {
        let s = self.state.lock().unwrap();
        if let Some(c) = &s.conn {
            return Ok(Some(c.clone()));
        }
        match s.retry_at {
            Some(at) if Instant::now() < at => Err(self.fail(
                "Redis unreachable",
                &format!(
                    "{} (reconnecting; next attempt in {:?})",
                    s.last_error,
                    at.saturating_duration_since(Instant::now())
                ),
            )),
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
        match self.open().await {
            Ok(conn) => {
                let (generation, conn) = self.install(conn);
                Ok(Conn { link: self.clone(), generation, conn })
            }
            Err(e) => {
                let mut s = self.state.lock().unwrap();
                s.retry_at = Some(Instant::now() + s.backoff);
                s.backoff = (s.backoff * 2).min(self.max_backoff);
                s.last_error = e.clone();
                Err(self.fail("cannot reconnect to Redis", &e))
            }
        }
    }

    /// Forget connection `generation` after `e` showed it broken; the next request reconnects.
    fn broken(&self, generation: u64, e: &RedisError) {
        let mut s = self.state.lock().unwrap();
        if s.conn.as_ref().is_some_and(|(g, _)| *g == generation) {
            s.conn = None;
            s.last_error = e.to_string();
        }
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

/// One request's handle on the link's connection: reports a broken connection back to it.
pub(crate) struct Conn {
    link: Arc<Link>,
    generation: u64,
    conn: MultiplexedConnection,
}

impl Conn {
    fn check<T>(&self, r: Result<T, RedisError>) -> Result<T, RedisError> {
        if let Err(e) = &r {
            if breaks_connection(e) {
                self.link.broken(self.generation, e);
            }
        }
        r
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = self.conn.req_packed_command(cmd).await;
            self.check(r)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = self.conn.req_packed_commands(pipeline, offset, count).await;
            self.check(r)
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}
