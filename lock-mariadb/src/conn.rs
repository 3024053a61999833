//! A connection (one server session) and what every lock on one needs: the requests it
//! reports, a locker's idle connections, and requests bounded in time.

use crate::errors::{backend_error, client_error, BACKEND};
use lock_core::requests::RequestHook;
use lock_core::{BackendErrorKind, LockError};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// A connection (one server session). Dropping it closes the connection (the driver sends
/// `COM_QUIT` from a task of its own): the server ends the session, and with it every lock
/// the session holds.
pub(crate) struct Conn {
    conn: mysql_async::Conn,
    requests: RequestHook,
    pub(crate) idle_since: Instant,
}

impl Conn {
    pub(crate) fn new(conn: mysql_async::Conn, requests: RequestHook) -> Conn {
        Conn { conn, requests, idle_since: Instant::now() }
    }

    /// The driver's connection, to send one request of `command`, which is reported first.
    pub(crate) fn send(&mut self, command: &str) -> &mut mysql_async::Conn {
        self.requests.sent(BACKEND, command);
        &mut self.conn
    }

    /// The driver's connection, to read what the last answer said (no request).
    pub(crate) fn last(&self) -> &mysql_async::Conn {
        &self.conn
    }
}

/// `request` bounded by `limit`; a late answer is a transient timeout.
pub(crate) async fn bounded<T>(
    target: &str,
    limit: Duration,
    request: impl std::future::Future<Output = Result<T, mysql_async::Error>>,
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

/// A locker's idle connections, each kept for at most half a lease (the server ends a
/// session silent for a lease).
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
            if conn.idle_since.elapsed() < self.keep {
                return Some(conn);
            }
        }
        None
    }

    /// Keep `conn` for a later acquisition (it holds no lock).
    pub(crate) fn put(&self, mut conn: Conn) {
        conn.idle_since = Instant::now();
        let mut conns = self.conns.lock().unwrap_or_else(|e| e.into_inner());
        if conns.len() < self.max {
            conns.push(conn);
        }
    }
}
