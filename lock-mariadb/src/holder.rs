//! A held lock: its connection, the keeper that holds the server's `wait_timeout` off, and
//! the release that unlocks and returns the connection to its locker.

use crate::conn::{bounded, Conn, Idle};
use crate::errors::BACKEND;
use async_trait::async_trait;
use lock_core::lock::{LeaseLost, Release};
use lock_core::{LeaseDeadline, LeaseState, LockError};
use mysql_async::prelude::Queryable;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Why the keeper stopped: released (hand the connection back), or abandoned (its sender
/// dropped without a word).
type Stop = oneshot::Receiver<()>;

/// Start keeping the lock `name` just granted on `conn`, its lease counted from `started` (a
/// request sent on the connection after the grant's answer arrived): returns the lease's
/// state, its deadline and the release.
pub(crate) fn hold(
    conn: Conn,
    name: String,
    ttl: Duration,
    request_timeout: Duration,
    started: Instant,
    target: String,
    idle: Arc<Idle>,
) -> (watch::Receiver<LeaseState>, LeaseDeadline, Box<dyn Release>) {
    let (lease_tx, lease_rx) = watch::channel(LeaseState::Held);
    let deadline = LeaseDeadline::new(
        Some(started + ttl),
        format!("no ping answered within the lease ({ttl:?})"),
    );
    let lease_tx = Arc::new(lease_tx);
    let (stop, stopped) = oneshot::channel();
    let linger = ttl * 2 + request_timeout;
    let keeper = tokio::spawn(keep(conn, ttl, deadline.clone(), lease_tx.clone(), stopped, linger));
    let held = Held {
        name,
        request_timeout,
        target,
        idle,
        lease: lease_tx,
        stop: Some(stop),
        keeper: Some(keeper),
    };
    (lease_rx, deadline, Box::new(held))
}

/// Ping (`COM_PING`) every third of the lease, moving `deadline` on at each answer; say the
/// lease is lost when it ends without an answered ping, or when the connection breaks (the connection is then closed). Returns the
/// connection when told to stop for a release, `None` when it was lost.
async fn keep(
    mut conn: Conn,
    ttl: Duration,
    deadline: LeaseDeadline,
    lease: Arc<watch::Sender<LeaseState>>,
    mut stop: Stop,
    linger: Duration,
) -> Option<Conn> {
    let lost = |reason: String| {
        lease.send_replace(LeaseState::Lost(LeaseLost { reason }));
    };
    loop {
        tokio::select! {
            told = &mut stop => {
                if told.is_err() {
                    // Abandoned without a release (a crash, for fault injection): silent
                    // until the server has surely ended the session, then closed.
                    tokio::time::sleep(linger).await;
                    return None;
                }
                return Some(conn);
            }
            _ = tokio::time::sleep(ttl / 3) => {}
        }
        let sent = Instant::now();
        let left = deadline.until().unwrap_or(sent).saturating_duration_since(sent);
        match tokio::time::timeout(left, conn.send("COM_PING").ping()).await {
            Ok(Ok(())) => deadline.set(Some(sent + ttl)),
            Ok(Err(e)) => {
                lost(format!("the connection to {BACKEND} broke: {e}"));
                return None;
            }
            Err(_) => {
                lost(format!(
                    "no ping answered within the lease ({ttl:?}): the server may have ended \
                     the session"
                ));
                return None;
            }
        }
    }
}

struct Held {
    name: String,
    request_timeout: Duration,
    target: String,
    idle: Arc<Idle>,
    lease: Arc<watch::Sender<LeaseState>>,
    stop: Option<oneshot::Sender<()>>,
    keeper: Option<JoinHandle<Option<Conn>>>,
}

#[async_trait]
impl Release for Held {
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let Some(keeper) = self.keeper.take() else { return Ok(()) };
        // The keeper answers at once, or after its ping (bounded by the lease).
        let conn = keeper.await.ok().flatten();
        let was_lost = matches!(*self.lease.borrow(), LeaseState::Lost(_));
        self.lease.send_replace(LeaseState::Released);
        let Some(mut conn) = conn else {
            // Lost: the connection is closed, which ends the session; a server that cannot
            // hear it ends the session when the lease runs out.
            return Ok(());
        };
        if was_lost {
            return Ok(());
        }
        let unlock =
            conn.send("RELEASE_LOCK").exec_first("SELECT RELEASE_LOCK(?)", (self.name.as_str(),));
        match bounded(&self.target, self.request_timeout, unlock).await {
            // Released: the session holds nothing more, the connection can serve again.
            Ok(Some(Some(1u8))) => self.idle.put(conn),
            // Not held by this session (it cannot be, unless the session was replaced), or no
            // answer: the connection is closed, which ends whatever it still holds.
            Ok(_) | Err(_) => drop(conn),
        }
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // A release took both; otherwise dropping the sender tells the keeper it was abandoned.
        drop(self.stop.take());
        drop(self.keeper.take());
    }
}
