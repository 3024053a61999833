//! One ZooKeeper session: its client, how every request goes through it, and how it is made.

use crate::acl::node_acl;
use crate::error::{backend_err, caused, driver_err, kind_of};
use crate::op::{Op, SESSIONS, ZNODES};
use crate::{tls, NodeAcl, ZkConfig};
use lock_core::requests::RequestHook;
use lock_core::retry::{Backoff, Retries};
use lock_core::{BackendErrorKind, LockError};
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// One ZooKeeper session: its client and what the server granted.
pub(crate) struct Session {
    pub(crate) client: zk::Client,
    /// The session timeout the server granted.
    pub(crate) timeout: Duration,
    pub(crate) hosts: Arc<str>,
    /// The znodes this session created and has not deleted yet, as far as the backend knows:
    /// what an orphan sweep ([`sweep_orphans`]) must leave alone.
    pub(crate) known: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Where each request is reported.
    pub(crate) requests: RequestHook,
    /// The ACL of the znodes it creates.
    pub(crate) acl: Arc<NodeAcl>,
    /// Whom it authenticated as, for refusals (`digest user 'u'`, or `no credentials`).
    pub(crate) identity: Arc<str>,
    /// Whether holders watch their own znodes ([`ZkConfig::watch_holder`]).
    pub(crate) watch_holder: bool,
}

impl Session {
    /// A failure of `what` on `path` that the backend found itself, of `kind`.
    pub(crate) fn err(
        &self,
        what: &str,
        path: &str,
        kind: BackendErrorKind,
        why: impl Display,
    ) -> LockError {
        backend_err(kind, self.sentence(what, path, why))
    }

    /// A failure of `what` on `path` the backend tells in its own words `why`, which the
    /// driver's error `e` caused: of `e`'s kind, with `e` as its source.
    pub(crate) fn err_from(
        &self,
        what: &str,
        path: &str,
        why: impl Display,
        e: zk::Error,
    ) -> LockError {
        caused(kind_of(&e), self.sentence(what, path, why), e)
    }

    /// `{what} {path} on ZooKeeper at {hosts}: {why}`.
    fn sentence(&self, what: &str, path: &str, why: impl Display) -> String {
        format!("{what} {path} on ZooKeeper at {}: {why}", self.hosts)
    }

    /// The error of a request that failed with `e`, the driver's error kept as its source and
    /// its kind from `e` ([`kind_of`]): a refusal by an ACL says whose it was, since that is
    /// what the user must change.
    pub(crate) fn refused(&self, what: &str, path: &str, e: zk::Error) -> LockError {
        if e == zk::Error::NoAuth {
            let why = format!(
                "not authorised (NoAuth): the ACL of {} does not allow this to {}",
                if matches!(what, "create" | "mkdir" | "delete") { "its parent" } else { "it" },
                self.identity
            );
            return self.err_from(what, path, why, e);
        }
        driver_err(self.sentence(what, path, &e), e)
    }

    /// Run one request, `op` on `path`, which the client sent as `fut` was made: report it to
    /// the backend's hook (every request on a znode passes here), and bound it by the session
    /// timeout: while disconnected the client holds requests until it reconnects or the
    /// session expires, and a caller must not hang that long unannounced.
    pub(crate) async fn op<T>(
        &self,
        op: Op,
        path: &str,
        fut: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<Result<T, zk::Error>, LockError> {
        self.requests.sent(ZNODES, op.request());
        tokio::time::timeout(self.timeout, fut).await.map_err(|_| {
            let why = format!("no answer within the session timeout {:?}", self.timeout);
            self.err(op.what(), path, BackendErrorKind::Timeout, why)
        })
    }

    /// [`Session::op`] for a read that can be repeated (a list, a watch): one whose answer was
    /// lost with the connection is sent again once the client has reconnected within the
    /// session, so that a waiter keeps its place across a short outage even with a request on
    /// its way. A session that ends meanwhile answers `SessionExpired`.
    pub(crate) async fn read<T, F, Fut>(
        &self,
        op: Op,
        path: &str,
        request: F,
    ) -> Result<Result<T, zk::Error>, LockError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, zk::Error>>,
    {
        loop {
            match self.op(op, path, request()).await? {
                Err(zk::Error::ConnectionLoss) => {
                    if !connected(self).await {
                        return Ok(Err(zk::Error::SessionExpired));
                    }
                }
                other => return Ok(other),
            }
        }
    }

    /// Whether the session can never be used again (expired, closed, or refused).
    pub(crate) fn is_over(&self) -> bool {
        self.client.state().is_terminated()
    }
}

impl lock_core::session::Ending for Session {
    fn is_over(&self) -> bool {
        Session::is_over(self)
    }
}

impl Drop for Session {
    /// The last user of the session is gone: the client, dropped with it, closes the session
    /// (a `closeSession` request), which deletes its znodes at once.
    fn drop(&mut self) {
        if !self.is_over() {
            self.requests.sent(SESSIONS, "closeSession");
        }
    }
}

/// The pause before a failed delete or list is tried again while connected.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// Establish a session with `hosts`, or say why not within the connect timeout.
pub(crate) async fn open_session(
    hosts: &Arc<str>,
    config: &ZkConfig,
) -> Result<Session, LockError> {
    let acl = Arc::new(node_acl(config)?);
    let connector = Connector::of(config)?;
    let identity = connector.identity.clone();
    let connect = tokio::time::timeout(config.connect_timeout, connector.connect(hosts));
    // A connect that has no session soon: do the servers refuse this client's TLS, or its
    // plain text (crate docs, "TLS")?
    let attempt = tokio::select! {
        attempt = connect => attempt,
        refusal = tls::refusal(hosts, config.tls.as_ref()) => {
            return Err(backend_err(BackendErrorKind::Refused, refusal))
        }
    };
    let client = match attempt {
        Ok(Ok(c)) => c,
        Ok(Err(e @ zk::Error::Timeout)) => {
            return Err(driver_err(format!(
                "cannot connect to ZooKeeper at {hosts}: no session established within the session timeout {:?}",
                config.session_timeout
            ), e))
        }
        Ok(Err(e)) => {
            return Err(driver_err(format!("cannot connect to ZooKeeper at {hosts}: {e}"), e))
        }
        Err(_) => {
            return Err(backend_err(BackendErrorKind::Timeout, format!(
                "cannot connect to ZooKeeper at {hosts}: no session within {:?}",
                config.connect_timeout
            )))
        }
    };
    // The client's connect request, counted once the session is established: attempts that
    // reach no server send none.
    config.requests.sent(SESSIONS, "connect");
    tokio::spawn(close_if_given_up(
        client.state_watcher(),
        client.session().clone(),
        hosts.clone(),
        config.clone(),
    ));
    let timeout = client.session_timeout();
    let requests = config.requests.clone();
    Ok(Session {
        client,
        timeout,
        hosts: hosts.clone(),
        known: Default::default(),
        requests,
        acl,
        identity,
        watch_holder: config.watch_holder,
    })
}

/// How this backend connects: the driver's connector with the session timeout, credentials
/// and TLS of its configuration.
struct Connector {
    connector: zk::Connector,
    secure: bool,
    /// Whom it authenticates as, for refusals (`digest user 'u'`, or `no credentials`).
    identity: Arc<str>,
}

impl Connector {
    fn of(config: &ZkConfig) -> Result<Self, LockError> {
        let mut connector = zk::Client::connector().with_session_timeout(config.session_timeout);
        let identity: Arc<str> = match &config.credentials {
            Some(c) => {
                let pair = format!("{}:{}", c.user, c.password.expose());
                connector = connector.with_auth("digest", pair.as_bytes());
                format!("digest user '{}'", c.user).into()
            }
            None => "an unauthenticated session".into(),
        };
        let secure = match &config.tls {
            Some(files) => {
                connector = connector.with_tls(tls::options(files)?);
                true
            }
            None => false,
        };
        Ok(Connector { connector, secure, identity })
    }

    async fn connect(self, hosts: &str) -> Result<zk::Client, zk::Error> {
        match self.secure {
            true => self.connector.secure_connect(hosts).await,
            false => self.connector.connect(hosts).await,
        }
    }
}

/// Wait for the end of the session `states` watches; if the client gave it up (`Expired`),
/// connect to it again as `info` and close it, which deletes its znodes.
///
/// The client gives a session up when it has reached no server for 1.4 session timeouts, but
/// the server may still hold it: ZooKeeper restarted with its data gives every session it knew
/// a whole timeout again, so a server restarted within each timeout never expires a session
/// nobody renews, and its znodes, a holder's among them, keep the lock from everyone until the
/// restarts stop. Connecting to the session again revives it only to close it; a server that
/// no longer has it says so (`SessionExpired`) and there is nothing to do. Transient failures
/// are retried ([`lock_core::retry`], from [`RETRY_PAUSE`] doubling up to 1 s) for at most ten
/// session timeouts and never less than a minute; a server down for longer expires the session
/// one timeout after it serves again.
async fn close_if_given_up(
    mut states: zk::StateWatcher,
    info: zk::SessionInfo,
    hosts: Arc<str>,
    config: ZkConfig,
) {
    let mut state = states.peek_state();
    while !state.is_terminated() {
        state = states.changed().await;
    }
    if state != zk::SessionState::Expired {
        return;
    }
    let until =
        tokio::time::Instant::now() + (config.session_timeout * 10).max(Duration::from_secs(60));
    let backoff = Backoff { first: RETRY_PAUSE, ..Backoff::default() };
    let close = || async {
        let Connector { connector, secure, identity } = Connector::of(&config)?;
        let again = Connector { connector: connector.with_session(info.clone()), secure, identity };
        match tokio::time::timeout(config.connect_timeout, again.connect(&hosts)).await {
            Ok(Ok(client)) => {
                config.requests.sent(SESSIONS, "connect");
                config.requests.sent(SESSIONS, "close");
                // The last client of a session closes it when dropped.
                drop(client);
                Ok(())
            }
            Ok(Err(zk::Error::SessionExpired)) => Ok(()),
            Ok(Err(e)) => Err(driver_err(format!("closing a given-up session at {hosts}: {e}"), e)),
            Err(_) => Err(backend_err(BackendErrorKind::Timeout, "no session to close in time")),
        }
    };
    let _ = Retries::new(backoff, Some(until)).run(close).await;
}

/// Wait until `session` is connected; false if it ended instead.
pub(crate) async fn connected(session: &Session) -> bool {
    let mut states = session.client.state_watcher();
    let mut state = states.peek_state();
    while state != zk::SessionState::SyncConnected {
        if state.is_terminated() {
            return false;
        }
        state = states.changed().await;
    }
    true
}
