//! The backend (a server and settings), its lockers, and each locker's idle connections.

use crate::conn::{bounded, Conn, Idle};
use crate::errors::{backend_error, client_error, BACKEND};
use crate::holder;
use crate::name::validate_name;
use crate::MariaConfig;
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::retry::{Backoff, Retries};
use lock_core::{BackendErrorKind, LockError, LockGuard, Locker};
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// The longest single wait asked of `GET_LOCK` (a year): MariaDB takes no "for ever" (a
/// negative timeout answers `NULL` at once), so a lock call without a deadline asks again
/// after each year.
const FOREVER_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// A MariaDB server and how to use it: hands out [`MariaLocker`]s.
#[derive(Clone)]
pub struct MariaBackend {
    opts: Opts,
    config: MariaConfig,
    target: String,
}

impl std::fmt::Debug for MariaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MariaBackend")
            .field("target", &self.target)
            .field("config", &self.config)
            .finish()
    }
}

impl MariaBackend {
    /// Connect to the server at `url` (`mysql://user:password@host:port/database`): check that
    /// the fencing table exists and has its row, creating them if they are missing. Fails within
    /// [`MariaConfig::connect_timeout`] with the server's address and the cause.
    pub async fn connect(url: &str, config: MariaConfig) -> Result<MariaBackend, LockError> {
        config.validate()?;
        let parsed = Opts::from_url(url)
            .map_err(|e| LockError::Config(format!("MariaDB connection URL: {e}")))?;
        let target = format!("mariadb at {}:{}", parsed.ip_or_hostname(), parsed.tcp_port());
        let mut builder = OptsBuilder::from_opts(parsed)
            // Never switch to the server's Unix socket: the address given is the one to use
            // (a proxy, a TLS endpoint).
            .prefer_socket(false)
            .stmt_cache_size(16)
            .tcp_keepalive(config.keepalive);
        if let Some(c) = &config.credentials {
            builder = builder.user(Some(&c.user)).pass(Some(c.password.expose()));
        }
        if let Some(files) = &config.tls {
            builder = builder.ssl_opts(Some(crate::tls::ssl_opts(files)?));
        }
        let backend = MariaBackend { opts: builder.into(), config, target };
        let mut conn = backend.open().await?;
        backend.prepare_table(&mut conn).await?;
        Ok(backend)
    }

    /// The settings.
    pub fn config(&self) -> &MariaConfig {
        &self.config
    }

    /// A locker for `owner`.
    pub fn locker(&self, owner: &str) -> Result<MariaLocker, LockError> {
        validate_id("owner id", owner)?;
        Ok(MariaLocker {
            inner: Arc::new(Inner {
                backend: self.clone(),
                owner: owner.to_string(),
                idle: Arc::new(Idle::new(self.config.max_idle, self.config.lease_ttl / 2)),
            }),
        })
    }

    /// A new connection with the lease's session setting.
    pub(crate) async fn open(&self) -> Result<Conn, LockError> {
        let limit = self.config.connect_timeout;
        self.config.requests.sent(BACKEND, "connect");
        let mut conn =
            match tokio::time::timeout(limit, mysql_async::Conn::new(self.opts.clone())).await {
                Ok(Ok(conn)) => Conn::new(conn, self.config.requests.clone()),
                Ok(Err(e)) => return Err(backend_error(format!("connect to {}", self.target), e)),
                Err(_) => {
                    return Err(client_error(
                        BackendErrorKind::Timeout,
                        format!("connect to {}: no answer within {limit:?}", self.target),
                    ))
                }
            };
        let session = format!("SET SESSION wait_timeout = {}", self.config.lease_ttl.as_secs());
        self.bounded(conn.send("SET").query_drop(session)).await?;
        Ok(conn)
    }

    async fn prepare_table(&self, conn: &mut Conn) -> Result<(), LockError> {
        let table = &self.config.fencing_table;
        let create = format!(
            "CREATE TABLE IF NOT EXISTS {table} \
             (id TINYINT PRIMARY KEY, v BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB"
        );
        let seed = format!("INSERT IGNORE INTO {table} (id, v) VALUES (1, 0)");
        let made = match self.bounded(conn.send("prepare").query_drop(create)).await {
            Ok(()) => self.bounded(conn.send("prepare").query_drop(seed)).await,
            Err(e) => Err(e),
        };
        match made {
            Ok(()) => Ok(()),
            Err(e) if e.backend_kind() == Some(BackendErrorKind::Refused) => {
                Err(LockError::Config(format!(
                    "{}: the fencing table {table} is missing or not writable by this user; as \
                     its owner run: CREATE TABLE {table} (id TINYINT PRIMARY KEY, v BIGINT \
                     UNSIGNED NOT NULL) ENGINE=InnoDB; INSERT INTO {table} VALUES (1, 0); \
                     GRANT SELECT, UPDATE ON {table} TO <user> ({e})",
                    self.target
                )))
            }
            Err(e) => Err(e),
        }
    }

    /// Draw the next fencing token on `conn`: one autocommitted `UPDATE` of the table's row,
    /// whose new value comes back in the answer (`LAST_INSERT_ID(expr)`).
    pub(crate) async fn draw_token(&self, conn: &mut Conn) -> Result<u64, LockError> {
        let table = &self.config.fencing_table;
        let draw = format!("UPDATE {table} SET v = LAST_INSERT_ID(v + 1) WHERE id = 1");
        self.bounded(conn.send("UPDATE").query_drop(draw)).await?;
        match (conn.last().affected_rows(), conn.last().last_insert_id()) {
            (1, Some(token)) if token > 0 => Ok(token),
            (rows, id) => Err(client_error(
                BackendErrorKind::Protocol,
                format!(
                    "{}: drawing a fencing token from {table} changed {rows} rows and gave {id:?} \
                     (its row id = 1 is missing?)",
                    self.target
                ),
            )),
        }
    }

    /// `request` bounded by the request timeout, its error mapped.
    pub(crate) async fn bounded<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, mysql_async::Error>>,
    ) -> Result<T, LockError> {
        bounded(&self.target, self.config.request_timeout, request).await
    }
}

struct Inner {
    backend: MariaBackend,
    owner: String,
    idle: Arc<Idle>,
}

/// `GET_LOCK` locks for one owner; each held or awaited lock on a connection of its own.
#[derive(Clone)]
pub struct MariaLocker {
    inner: Arc<Inner>,
}

/// What one `GET_LOCK` asked in one statement answered.
enum Answer {
    /// Granted, with this fencing token, drawn by a request sent at this instant: after the
    /// grant's answer arrived, so before the server's idle timer restarted (after the draw's
    /// answer), however long the wait was. The lease counts from there.
    Granted(u64, Instant),
    /// Not granted within the wait (`GET_LOCK` answered 0).
    NotGranted,
}

impl MariaLocker {
    async fn connection(&self) -> Result<Conn, LockError> {
        match self.inner.idle.take() {
            Some(conn) => Ok(conn),
            None => self.inner.backend.open().await,
        }
    }

    /// `GET_LOCK(name, wait)` on `conn`, bounded by `limit` on the client's side, and when
    /// granted the next fencing token, drawn on the same connection.
    async fn get_lock(
        &self,
        conn: &mut Conn,
        lock_id: &str,
        wait_secs: f64,
        limit: Duration,
    ) -> Result<Answer, LockError> {
        let backend = &self.inner.backend;
        let get = conn.send("GET_LOCK").exec_first("SELECT GET_LOCK(?, ?)", (lock_id, wait_secs));
        let granted: Option<Option<i64>> = bounded(&backend.target, limit, get).await?;
        match granted {
            Some(Some(1)) => {
                let drawn = Instant::now();
                backend.draw_token(conn).await.map(|token| Answer::Granted(token, drawn))
            }
            Some(Some(0)) => Ok(Answer::NotGranted),
            other => Err(client_error(
                BackendErrorKind::Other,
                format!("{}: GET_LOCK({lock_id:?}) answered {other:?} (an error)", backend.target),
            )),
        }
    }

    /// The guard of a grant whose lease starts at `started`.
    fn guard(&self, lock_id: &str, conn: Conn, token: u64, started: Instant) -> LockGuard {
        let config = &self.inner.backend.config;
        let (lease, deadline, release) = holder::hold(
            conn,
            lock_id.to_string(),
            config.lease_ttl,
            config.request_timeout,
            started,
            self.inner.backend.target.clone(),
            self.inner.idle.clone(),
        );
        LockGuard::new(lock_id, self.inner.owner.clone(), token, lease, release)
            .with_deadline(deadline)
    }

    async fn attempt(
        &self,
        lock_id: &str,
        start: Instant,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        let timed_out =
            || LockError::Timeout { lock_id: lock_id.to_string(), waited: start.elapsed() };
        let request_timeout = self.inner.backend.config.request_timeout;
        let mut conn = self.connection().await?;
        loop {
            let remaining = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(r) if !r.is_zero() => Some(r),
                    _ => {
                        self.inner.idle.put(conn);
                        return Err(timed_out());
                    }
                },
                None => None,
            };
            // The server waits: GET_LOCK takes fractional seconds (to the microsecond).
            let wait_secs = remaining.map_or(FOREVER_SECS, |r| r.as_secs_f64().max(0.000_001));
            let limit = Duration::from_secs_f64(wait_secs) + request_timeout;
            // An error drops the connection (closed): whatever it may have been granted ends
            // with its session.
            match self.get_lock(&mut conn, lock_id, wait_secs, limit).await? {
                Answer::Granted(token, drawn) => {
                    return Ok(self.guard(lock_id, conn, token, drawn));
                }
                // The server gave the wait up and holds nothing for us.
                Answer::NotGranted if deadline.is_some() => {
                    self.inner.idle.put(conn);
                    return Err(timed_out());
                }
                Answer::NotGranted => continue,
            }
        }
    }
}

#[async_trait]
impl Locker for MariaLocker {
    fn algorithm(&self) -> &str {
        "mariadb"
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_name(lock_id)?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        Retries::new(Backoff::default(), deadline)
            .run(|| self.attempt(lock_id, start, deadline))
            .await
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_name(lock_id)?;
        let request_timeout = self.inner.backend.config.request_timeout;
        let deadline = Instant::now() + request_timeout;
        Retries::new(Backoff::default(), Some(deadline))
            .run(|| async {
                let mut conn = self.connection().await?;
                match self.get_lock(&mut conn, lock_id, 0.0, request_timeout).await? {
                    Answer::Granted(token, drawn) => {
                        Ok(Some(self.guard(lock_id, conn, token, drawn)))
                    }
                    Answer::NotGranted => {
                        self.inner.idle.put(conn);
                        Ok(None)
                    }
                }
            })
            .await
    }
}
