//! A held lock: its connection, the keeper that holds the server's idle timer off, and the
//! release that unlocks and returns the connection to its locker.

use crate::errors::BACKEND;
use crate::locker::{bounded, first_value, Idle};
use async_trait::async_trait;
use lock_core::lock::{LeaseLost, Release};
use lock_core::requests::RequestHook;
use lock_core::{LeaseState, LockError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::Client;

/// A connection and the task that drives it. Dropping it closes the connection: the server
/// ends the session, and with it any lock the session holds.
pub(crate) struct Conn {
    pub(crate) client: Arc<Client>,
    requests: RequestHook,
    driver: Option<JoinHandle<()>>,
    pub(crate) idle_since: Instant,
}

impl Conn {
    pub(crate) fn new(client: Client, driver: JoinHandle<()>, requests: RequestHook) -> Conn {
        Conn {
            client: Arc::new(client),
            requests,
            driver: Some(driver),
            idle_since: Instant::now(),
        }
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
    fn go_silent(mut self, linger: Duration) {
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

/// Start keeping the lock `key` just granted on `conn` (the grant's request was sent at
/// `sent`): returns the lease's state and the release.
pub(crate) fn hold(
    conn: Conn,
    key: i64,
    ttl: Duration,
    request_timeout: Duration,
    sent: Instant,
    target: String,
    idle: Arc<Idle>,
) -> (watch::Receiver<LeaseState>, Box<dyn Release>) {
    let (lease_tx, lease_rx) = watch::channel(LeaseState::Held);
    let lease_tx = Arc::new(lease_tx);
    let (stop, stopped) = oneshot::channel();
    let keeper = tokio::spawn(keep(
        conn.client.clone(),
        conn.requests(),
        ttl,
        sent + ttl,
        lease_tx.clone(),
        stopped,
    ));
    let held = Held {
        conn: Some(conn),
        key,
        ttl,
        request_timeout,
        target,
        idle,
        lease: lease_tx,
        stop: Some(stop),
        keeper,
    };
    (lease_rx, Box::new(held))
}

/// Ping every third of the lease; say the lease is lost when it ends without an answered
/// ping, or when the connection breaks.
pub(crate) async fn keep(
    client: Arc<Client>,
    requests: RequestHook,
    ttl: Duration,
    mut valid_until: Instant,
    lease: Arc<watch::Sender<LeaseState>>,
    mut stop: oneshot::Receiver<()>,
) {
    let lost = |reason: String| {
        lease.send_replace(LeaseState::Lost(LeaseLost { reason }));
    };
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(ttl / 3) => {}
        }
        let sent = Instant::now();
        let left = valid_until.saturating_duration_since(sent);
        requests.sent(BACKEND, "ping");
        let ping = tokio::select! {
            _ = &mut stop => return,
            answer = tokio::time::timeout(left, client.simple_query("SELECT 1")) => answer,
        };
        match ping {
            Ok(Ok(_)) => valid_until = sent + ttl,
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

struct Held {
    conn: Option<Conn>,
    key: i64,
    ttl: Duration,
    request_timeout: Duration,
    target: String,
    idle: Arc<Idle>,
    lease: Arc<watch::Sender<LeaseState>>,
    stop: Option<oneshot::Sender<()>>,
    keeper: JoinHandle<()>,
}

impl Held {
    fn stop_keeping(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.keeper.abort();
    }
}

#[async_trait]
impl Release for Held {
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        self.stop_keeping();
        let Some(conn) = self.conn.take() else { return Ok(()) };
        let was_lost = matches!(*self.lease.borrow(), LeaseState::Lost(_));
        self.lease.send_replace(LeaseState::Released);
        if was_lost || conn.client.is_closed() {
            // Closing the connection ends the session; a server that cannot hear it ends the
            // session when the lease runs out.
            return Ok(());
        }
        let unlock = format!("SELECT pg_advisory_unlock({})", self.key);
        conn.sent("unlock");
        match bounded(&self.target, self.request_timeout, conn.client.simple_query(&unlock)).await {
            // Unlocked: the session holds nothing more, the connection can serve again.
            Ok(rows) if first_value(&rows).as_deref() == Some("t") => self.idle.put(conn),
            // Not held by this session (it cannot be, unless the session was replaced), or no
            // answer: the connection is closed, which ends whatever it still holds.
            Ok(_) | Err(_) => drop(conn),
        }
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.stop_keeping();
        if let Some(conn) = self.conn.take() {
            // Abandoned without a release (a crash, for fault injection): silent until the
            // server has surely ended the session.
            conn.go_silent(self.ttl * 2 + self.request_timeout);
        }
    }
}
