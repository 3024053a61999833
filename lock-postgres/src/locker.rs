//! The backend (a server and settings), its lockers, and each locker's idle connections.

use crate::conn::{bounded, first_value, lease_start, Conn, Idle};
use crate::errors::{backend_error, client_error, BACKEND, LOCK_NOT_AVAILABLE};
use crate::holder;
use crate::key::advisory_key;
use crate::xact::XactGuard;
use crate::PgConfig;
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::retry::{Backoff, Retries};
use lock_core::{BackendErrorKind, LockError, LockGuard, Locker};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_postgres::config::SslMode;
use tokio_postgres::NoTls;
use tokio_postgres_rustls::MakeRustlsConnect;

/// A PostgreSQL server and how to use it: hands out [`PgLocker`]s.
#[derive(Clone)]
pub struct PgBackend {
    pg: tokio_postgres::Config,
    config: PgConfig,
    target: String,
    tls: Option<MakeRustlsConnect>,
}

impl std::fmt::Debug for PgBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBackend")
            .field("target", &self.target)
            .field("config", &self.config)
            .finish()
    }
}

impl PgBackend {
    /// Connect to the server at `url` (`postgres://user:password@host:port/database`, or
    /// libpq's `key=value` form): check that it can keep leases (PostgreSQL 14 or later) and
    /// that the fencing sequence exists, creating it if it is missing. Fails within
    /// [`PgConfig::connect_timeout`] with the server's address and the cause.
    pub async fn connect(url: &str, config: PgConfig) -> Result<PgBackend, LockError> {
        let pg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| LockError::Config(format!("PostgreSQL connection string: {e}")))?;
        PgBackend::connect_to(pg, config).await
    }

    /// [`PgBackend::connect`] with the driver's connection settings built by the caller (host,
    /// port, database, user); [`PgConfig`]'s own settings (timeouts, keep-alive, TLS,
    /// credentials) are applied on top.
    pub async fn connect_to(
        mut pg: tokio_postgres::Config,
        config: PgConfig,
    ) -> Result<PgBackend, LockError> {
        config.validate()?;
        pg.connect_timeout(config.connect_timeout);
        if let Some(c) = &config.credentials {
            pg.user(&c.user).password(c.password.expose());
        }
        if let Some(k) = config.keepalive {
            pg.keepalives(true).keepalives_idle(k).keepalives_interval(k).keepalives_retries(3);
        }
        let tls = match &config.tls {
            Some(files) => {
                pg.ssl_mode(SslMode::Require);
                Some(crate::tls::connector(files)?)
            }
            None => {
                pg.ssl_mode(SslMode::Disable);
                None
            }
        };
        let target = describe(&pg);
        let backend = PgBackend { pg, config, target, tls };
        let conn = backend.open("lock-postgres").await?;
        backend.prepare_sequence(&conn).await?;
        Ok(backend)
    }

    /// The settings.
    pub fn config(&self) -> &PgConfig {
        &self.config
    }

    /// A locker for `owner` (shown as the connections' `application_name`, truncated by the
    /// server to 63 bytes).
    pub fn locker(&self, owner: &str) -> Result<PgLocker, LockError> {
        validate_id("owner id", owner)?;
        Ok(PgLocker {
            inner: Arc::new(Inner {
                backend: self.clone(),
                owner: owner.to_string(),
                idle: Arc::new(Idle::new(self.config.max_idle, self.config.lease_ttl / 2)),
            }),
        })
    }

    /// A new connection with the lease's session settings.
    pub(crate) async fn open(&self, application: &str) -> Result<Conn, LockError> {
        let mut pg = self.pg.clone();
        pg.application_name(application);
        self.config.requests.sent(BACKEND, "connect");
        let connect = async {
            match &self.tls {
                Some(tls) => pg.connect(tls.clone()).await.map(|(client, connection)| {
                    Conn::new(client, connection, self.config.requests.clone())
                }),
                None => pg.connect(NoTls).await.map(|(client, connection)| {
                    Conn::new(client, connection, self.config.requests.clone())
                }),
            }
        };
        let conn = match tokio::time::timeout(self.config.connect_timeout, connect).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(backend_error(format!("connect to {}", self.target), e)),
            Err(_) => {
                return Err(client_error(
                    BackendErrorKind::Timeout,
                    format!(
                        "connect to {}: no answer within {:?}",
                        self.target, self.config.connect_timeout
                    ),
                ))
            }
        };
        let ttl_ms = self.config.lease_ttl.as_millis();
        let probe = (self.config.lease_ttl.as_secs() / 3).max(1);
        let session = format!(
            "SET idle_session_timeout = {ttl_ms}; \
             SET idle_in_transaction_session_timeout = {ttl_ms}; SET tcp_keepalives_idle = {probe}; \
             SET tcp_keepalives_interval = {probe}; SET tcp_keepalives_count = 3; \
             SET tcp_user_timeout = {ttl_ms}"
        );
        conn.sent("SET");
        match self.bounded(conn.client.batch_execute(&session)).await {
            Ok(()) => Ok(conn),
            Err(e) if e.backend_kind() == Some(BackendErrorKind::Protocol) => Err(LockError::Config(
                format!("{}: the server cannot keep leases (PostgreSQL 14 or later is needed for idle_session_timeout): {e}", self.target),
            )),
            Err(e) => Err(e),
        }
    }

    async fn prepare_sequence(&self, conn: &Conn) -> Result<(), LockError> {
        let seq = &self.config.fencing_sequence;
        conn.sent("prepare");
        let exists = self
            .bounded(conn.client.simple_query(&format!("SELECT to_regclass('{seq}') IS NOT NULL")))
            .await?;
        if first_value(&exists).as_deref() == Some("t") {
            return Ok(());
        }
        conn.sent("prepare");
        match self.bounded(conn.client.batch_execute(&format!("CREATE SEQUENCE IF NOT EXISTS {seq}"))).await {
            Ok(()) => Ok(()),
            Err(e) if e.backend_kind() == Some(BackendErrorKind::Refused) => Err(LockError::Config(format!(
                "{}: the fencing sequence {seq} is missing and this user may not create it; \
                 as its owner run: CREATE SEQUENCE {seq}; GRANT USAGE ON SEQUENCE {seq} TO <user> ({e})",
                self.target
            ))),
            Err(e) => Err(e),
        }
    }

    /// `request` bounded by the request timeout, its error mapped.
    pub(crate) async fn bounded<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    ) -> Result<T, LockError> {
        bounded(&self.target, self.config.request_timeout, request).await
    }
}

fn describe(pg: &tokio_postgres::Config) -> String {
    let host = pg
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    format!("postgres at {host}:{port}")
}

struct Inner {
    backend: PgBackend,
    owner: String,
    idle: Arc<Idle>,
}

/// Advisory locks for one owner; each held or awaited lock on a connection of its own.
#[derive(Clone)]
pub struct PgLocker {
    inner: Arc<Inner>,
}

impl PgLocker {
    async fn connection(&self) -> Result<Conn, LockError> {
        match self.inner.idle.take() {
            Some(conn) => Ok(conn),
            None => self.inner.backend.open(&self.inner.owner).await,
        }
    }

    fn guard(
        &self,
        lock_id: &str,
        key: i64,
        conn: Conn,
        token: &str,
        sent: Instant,
    ) -> Result<LockGuard, LockError> {
        let token: u64 = token.parse().map_err(|_| {
            client_error(
                BackendErrorKind::Protocol,
                format!("fencing token {token:?} is not a number"),
            )
        })?;
        let config = &self.inner.backend.config;
        let (lease, deadline, release) = holder::hold(
            conn,
            key,
            config.lease_ttl,
            config.request_timeout,
            sent,
            self.inner.backend.target.clone(),
            self.inner.idle.clone(),
        );
        let guard = LockGuard::new(lock_id, self.inner.owner.clone(), token, lease, release);
        Ok(guard.with_deadline(deadline))
    }

    async fn attempt(
        &self,
        lock_id: &str,
        key: i64,
        start: Instant,
        deadline: Option<Instant>,
    ) -> Result<LockGuard, LockError> {
        let timed_out =
            || LockError::Timeout { lock_id: lock_id.to_string(), waited: start.elapsed() };
        let remaining = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(r) if !r.is_zero() => Some(r),
                _ => return Err(timed_out()),
            },
            None => None,
        };
        let conn = self.connection().await?;
        let backend = &self.inner.backend;
        let seq = &backend.config.fencing_sequence;
        // 0 disables the server's timeout: wait in its queue for as long as it takes.
        let wait_ms = remaining.map_or(0, |r| r.as_millis().max(1));
        let sql = format!(
            "SET lock_timeout = {wait_ms}; SELECT pg_advisory_lock({key}); SELECT nextval('{seq}')"
        );
        let sent = Instant::now();
        conn.sent("lock");
        let answer = match remaining {
            Some(r) => {
                bounded(
                    &backend.target,
                    r + backend.config.request_timeout,
                    conn.client.simple_query(&sql),
                )
                .await
            }
            None => conn
                .client
                .simple_query(&sql)
                .await
                .map_err(|e| backend_error(backend.target.clone(), e)),
        };
        match answer {
            Ok(rows) => match first_value(&rows) {
                Some(token) => {
                    let config = &backend.config;
                    let started = lease_start(
                        &conn,
                        sent,
                        config.lease_ttl,
                        config.request_timeout,
                        &backend.target,
                    )
                    .await?;
                    self.guard(lock_id, key, conn, &token, started)
                }
                None => Err(client_error(BackendErrorKind::Protocol, "nextval answered no row")),
            },
            Err(e) if is_lock_timeout(&e) => {
                // The server gave the wait up and holds nothing for us: the connection is clean.
                self.inner.idle.put(conn);
                Err(timed_out())
            }
            // The connection is dropped (closed): whatever it may have been granted ends with it.
            Err(e) => Err(e),
        }
    }
}

impl PgLocker {
    /// The transaction-level lock: open a transaction, take `pg_advisory_xact_lock` in it
    /// (waiting in the server's queue for at most `timeout`), and hand the transaction over for
    /// the guarded writes ([`XactGuard`]). The lock ends with the transaction.
    pub async fn transaction(
        &self,
        lock_id: &str,
        timeout: Option<Duration>,
    ) -> Result<XactGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let key = advisory_key(lock_id);
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let backend = &self.inner.backend;
        let seq = &backend.config.fencing_sequence;
        Retries::new(Backoff::default(), deadline)
            .run(|| async {
                let remaining = match deadline {
                    Some(d) => match d.checked_duration_since(Instant::now()) {
                        Some(r) if !r.is_zero() => Some(r),
                        _ => {
                            return Err(LockError::Timeout {
                                lock_id: lock_id.to_string(),
                                waited: start.elapsed(),
                            })
                        }
                    },
                    None => None,
                };
                let conn = self.connection().await?;
                let wait_ms = remaining.map_or(0, |r| r.as_millis().max(1));
                let sql = format!(
                    "BEGIN; SET LOCAL lock_timeout = {wait_ms}; \
                     SELECT pg_advisory_xact_lock({key}); SELECT nextval('{seq}')"
                );
                let sent = Instant::now();
                conn.sent("transaction");
                let request = conn.client.simple_query(&sql);
                let answer = match remaining {
                    Some(r) => {
                        bounded(&backend.target, r + backend.config.request_timeout, request).await
                    }
                    None => request.await.map_err(|e| backend_error(backend.target.clone(), e)),
                };
                match answer {
                    Ok(rows) => {
                        let token = first_value(&rows).ok_or_else(|| {
                            client_error(BackendErrorKind::Protocol, "nextval answered no row")
                        })?;
                        let token: u64 = token.parse().map_err(|_| {
                            client_error(
                                BackendErrorKind::Protocol,
                                format!("fencing token {token:?} is not a number"),
                            )
                        })?;
                        let config = &backend.config;
                        let started = lease_start(
                            &conn,
                            sent,
                            config.lease_ttl,
                            config.request_timeout,
                            &backend.target,
                        )
                        .await?;
                        Ok(XactGuard::start(
                            conn,
                            lock_id,
                            token,
                            backend.config.lease_ttl,
                            backend.config.request_timeout,
                            started,
                            backend.target.clone(),
                            self.inner.idle.clone(),
                        ))
                    }
                    Err(e) if is_lock_timeout(&e) => {
                        // The failed transaction is still open: end it, then the connection
                        // is clean.
                        conn.sent("ROLLBACK");
                        if backend.bounded(conn.client.batch_execute("ROLLBACK")).await.is_ok() {
                            self.inner.idle.put(conn);
                        }
                        Err(LockError::Timeout {
                            lock_id: lock_id.to_string(),
                            waited: start.elapsed(),
                        })
                    }
                    Err(e) => Err(e),
                }
            })
            .await
    }
}

fn is_lock_timeout(e: &LockError) -> bool {
    match e {
        LockError::Backend { source, .. } => source
            .downcast_ref::<tokio_postgres::Error>()
            .and_then(|e| e.code())
            .is_some_and(|c| c.code() == LOCK_NOT_AVAILABLE),
        _ => false,
    }
}

#[async_trait]
impl Locker for PgLocker {
    fn algorithm(&self) -> &str {
        "postgres"
    }

    fn owner(&self) -> &str {
        &self.inner.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let key = advisory_key(lock_id);
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        Retries::new(Backoff::default(), deadline)
            .run(|| self.attempt(lock_id, key, start, deadline))
            .await
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        let key = advisory_key(lock_id);
        let backend = &self.inner.backend;
        let deadline = Instant::now() + backend.config.request_timeout;
        let seq = &backend.config.fencing_sequence;
        let sql = format!("SELECT CASE WHEN pg_try_advisory_lock({key}) THEN nextval('{seq}') END");
        Retries::new(Backoff::default(), Some(deadline))
            .run(|| async {
                let conn = self.connection().await?;
                let sent = Instant::now();
                conn.sent("try_lock");
                let rows = backend.bounded(conn.client.simple_query(&sql)).await?;
                match first_value(&rows) {
                    Some(token) => self.guard(lock_id, key, conn, &token, sent).map(Some),
                    None => {
                        self.inner.idle.put(conn);
                        Ok(None)
                    }
                }
            })
            .await
    }
}
