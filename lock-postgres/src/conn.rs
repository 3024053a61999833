//! A connection to the server and what every lock on one needs: the task that drives it, the
//! requests it reports, the pings that keep its session's lease, a locker's idle connections,
//! and statements bounded in time.

use crate::errors::{backend_error, client_error, BACKEND};
use lock_core::lock::LeaseLost;
use lock_core::requests::RequestHook;
use lock_core::{BackendErrorKind, LeaseDeadline, LeaseState, LockError};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::{Client, SimpleQueryMessage};

/// A connection and the task that drives it. Dropping it closes the connection: the server
/// ends the session, and with it any lock the session holds.
pub(crate) struct Conn {
    pub(crate) client: Arc<Client>,
    requests: RequestHook,
    driver: Option<JoinHandle<()>>,
    closed: watch::Receiver<bool>,
    pub(crate) idle_since: Instant,
}

impl Conn {
    /// The connection of `client`, driven by `connection` on a task of its own, which says
    /// when the connection has ended (the server closed it, or it broke).
    pub(crate) fn new<F>(client: Client, connection: F, requests: RequestHook) -> Conn
    where
        F: std::future::Future + Send + 'static,
    {
        let (ended, closed) = watch::channel(false);
        let driver = tokio::spawn(async move {
            let _ = connection.await;
            ended.send_replace(true);
        });
        Conn {
            client: Arc::new(client),
            requests,
            driver: Some(driver),
            closed,
            idle_since: Instant::now(),
        }
    }

    /// Becomes true when the connection has ended.
    pub(crate) fn closed(&self) -> watch::Receiver<bool> {
        self.closed.clone()
    }

    /// Report one request (a query message, whatever its statements) of `command`.
    pub(crate) fn sent(&self, command: &str) {
        self.requests.sent(BACKEND, command);
    }

    /// The hook this connection reports to.
    pub(crate) fn requests(&self) -> RequestHook {
        self.requests.clone()
    }

    /// Leave the session open and silent, as a crashed host's would be: the server ends it
    /// (and frees its locks) one lease after its last statement; the connection is closed
    /// after `linger`.
    pub(crate) fn go_silent(mut self, linger: Duration) {
        let client = self.client.clone();
        let driver = self.driver.take();
        tokio::spawn(async move {
            tokio::time::sleep(linger).await;
            drop(client);
            if let Some(driver) = driver {
                driver.abort();
            }
        });
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(driver) = &self.driver {
            driver.abort();
        }
    }
}

/// When the lease of a grant whose request was sent at `sent` starts, as far as the client
/// can know: the server's idle timer starts when it answers, which the client knows only to lie
/// between the request's sending and the answer's arrival. After an answer within a third of
/// the lease, the sending is a close enough bound. After a longer wait in the server's queue it
/// is not (the lease would seem spent at once), so a ping goes at once: the server answers it
/// only while the session, and its lock, lives, and its sending, after the grant's answer
/// arrived, starts the lease. An unanswered ping is an error; the caller drops the connection,
/// which ends the session and what it was granted.
pub(crate) async fn lease_start(
    conn: &Conn,
    sent: Instant,
    ttl: Duration,
    request_timeout: Duration,
    target: &str,
) -> Result<Instant, LockError> {
    if sent.elapsed() <= ttl / 3 {
        return Ok(sent);
    }
    let now = Instant::now();
    conn.sent("ping");
    bounded(target, request_timeout.min(ttl / 2), conn.client.simple_query("SELECT 1")).await?;
    Ok(now)
}

/// Ping every third of the lease, moving `deadline` on at each answer; say the lease is lost
/// when it ends without an answered ping, or as soon as the connection ends (`closed`): a
/// server that closed it, or saw it closed, has ended the session and freed its locks at once.
pub(crate) async fn keep(
    client: Arc<Client>,
    mut closed: watch::Receiver<bool>,
    requests: RequestHook,
    ttl: Duration,
    deadline: LeaseDeadline,
    lease: Arc<watch::Sender<LeaseState>>,
    mut stop: oneshot::Receiver<()>,
) {
    let lost = |reason: String| {
        lease.send_replace(LeaseState::Lost(LeaseLost { reason }));
    };
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = closed.wait_for(|ended| *ended) => {
                return lost(format!(
                    "the connection to {BACKEND} ended: the server ended the session and its locks"
                ));
            }
            _ = tokio::time::sleep(ttl / 3) => {}
        }
        let sent = Instant::now();
        let valid_until = deadline.until().unwrap_or(sent);
        let left = valid_until.saturating_duration_since(sent);
        requests.sent(BACKEND, "ping");
        let ping = tokio::select! {
            _ = &mut stop => return,
            answer = tokio::time::timeout(left, client.simple_query("SELECT 1")) => answer,
        };
        match ping {
            Ok(Ok(_)) => deadline.set(Some(sent + ttl)),
            Ok(Err(e)) if e.is_closed() || client.is_closed() => {
                return lost(format!("the connection to {BACKEND} broke: {e}"));
            }
            Ok(Err(e)) if Instant::now() >= valid_until => {
                return lost(format!(
                    "no ping answered within the lease ({ttl:?}); last error: {e}"
                ));
            }
            Ok(Err(_)) => {}
            Err(_) => {
                return lost(format!(
                    "no ping answered within the lease ({ttl:?}): the server may have ended the session"
                ));
            }
        }
    }
}

/// `request` bounded by `limit`; a late answer is a transient timeout.
pub(crate) async fn bounded<T>(
    target: &str,
    limit: Duration,
    request: impl std::future::Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, LockError> {
    match tokio::time::timeout(limit, request).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(backend_error(target.to_string(), e)),
        Err(_) => Err(client_error(
            BackendErrorKind::Timeout,
            format!("{target}: no answer within {limit:?}"),
        )),
    }
}

/// The first column of the last row of a simple query's answer.
pub(crate) fn first_value(messages: &[SimpleQueryMessage]) -> Option<String> {
    messages.iter().rev().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
        _ => None,
    })?
}

/// A locker's idle connections, each kept for at most half a lease (the server ends a session
/// silent for a lease).
pub(crate) struct Idle {
    conns: Mutex<Vec<Conn>>,
    max: usize,
    keep: Duration,
}

impl Idle {
    pub(crate) fn new(max: usize, keep: Duration) -> Idle {
        Idle { conns: Mutex::new(Vec::new()), max, keep }
    }

    pub(crate) fn take(&self) -> Option<Conn> {
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(conn) = conns.pop() {
            if !conn.client.is_closed() && conn.idle_since.elapsed() < self.keep {
                return Some(conn);
            }
        }
        None
    }

    /// Keep `conn` for a later acquisition (it holds no lock).
    pub(crate) fn put(&self, mut conn: Conn) {
        conn.idle_since = Instant::now();
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if conns.len() < self.max && !conn.client.is_closed() {
            conns.push(conn);
        }
    }
}
