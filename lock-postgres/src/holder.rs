//! A held lock: its connection, the keeper that holds the server's idle timer off, and the
//! release that unlocks and returns the connection to its locker.

use crate::conn::{bounded, first_value, keep, Conn, Idle};
use async_trait::async_trait;
use lock_core::lock::Release;
use lock_core::{LeaseDeadline, LeaseState, LockError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Start keeping the lock `key` just granted on `conn` (the grant's request was sent at
/// `sent`): returns the lease's state, its deadline and the release.
pub(crate) fn hold(
    conn: Conn,
    key: i64,
    ttl: Duration,
    request_timeout: Duration,
    sent: Instant,
    target: String,
    idle: Arc<Idle>,
) -> (watch::Receiver<LeaseState>, LeaseDeadline, Box<dyn Release>) {
    let (lease_tx, lease_rx) = watch::channel(LeaseState::Held);
    let deadline = LeaseDeadline::new(
        Some(sent + ttl),
        format!("no ping answered within the lease ({ttl:?})"),
    );
    let lease_tx = Arc::new(lease_tx);
    let (stop, stopped) = oneshot::channel();
    let keeper = tokio::spawn(keep(
        conn.client.clone(),
        conn.closed(),
        conn.requests(),
        ttl,
        deadline.clone(),
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
    (lease_rx, deadline, Box::new(held))
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
