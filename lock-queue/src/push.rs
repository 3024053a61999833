//! # The push queue lock: told "your turn" instead of polling
//!
//! Section 6 of the thesis: the queue lock "constantly hits the database", and the load would
//! drop if the store could tell a waiter that its turn came — "unfortunately Cassandra has no
//! such mechanism". The lock's own clients can: whoever releases the lock knows who is next.
//! This lock is the bounded queue lock ([`crate::bounded`]) — same rows, same ownership
//! protocol, so the same safety and FIFO arguments — plus a **doorbell** per waiter
//! ([`lock_core::doorbell`]).
//!
//! ## Protocol
//!
//! Per lock id a queue row ([`PUSH_QUEUE_TABLE`]) and a main row ([`PUSH_MAIN_TABLE`]).
//! *Queue cell*: column = the thread id, value = `TICKET ADDRESS`: the 20-digit ticket of the
//! bounded lock, a space, and the address of the waiter's doorbell (`local` in one process on
//! the embedded store, `udp://host:port` across processes). The head is the live cell with the
//! least `(ticket, thread id)`.
//!
//! `GetLock`:
//! 1. listen at our doorbell for our place (the lock id and our ticket), then join: write our
//!    queue cell, kept by the lease;
//! 2. read the whole queue row; our cell gone means our place is lost; if the head is ours, try
//!    the main row (write our main cell, read the row: alone = ours; else delete our cell);
//! 3. not granted: wait for a ring **or** the fallback poll ([`PushConfig::fallback_poll`],
//!    default 1 s), whichever comes first;
//! 4. rung: go straight to the main-row try of step 2 (the ringer read the queue and found us
//!    first); not rung: step 2.
//!
//! Release and leave (timeout, soft lock refused, error): stop the lease, delete our main cell,
//! then **read the queue row and ring the doorbell of its head other than us** (with the
//! head's ticket), then delete our queue cell and trim the fencing row. The ring comes after
//! the main cell's delete was acknowledged, so the woken waiter finds the main row free; it
//! skips its own head read, so our queue cell still being there does not matter. The next
//! holder's handoff thus costs: one delete, one queue read, one ring (half a round trip), its
//! main write and read, and its fencing token (two) — 6.5 round trips, instead of the queue
//! lock's half a poll interval on average before its own three.
//!
//! ## Why a ring never costs safety
//! A ring is a hint. Mutual exclusion rests on the main row alone (thesis Theorem 1, as in the
//! queue lock): a woken waiter takes the lock only by writing its main cell and reading the
//! main row with nobody else in it. A ring that is lost or late costs latency (the fallback
//! poll finds the turn); a duplicated one costs a failed main-row try; a ring for a place the
//! waiter no longer holds (it left, or rejoined with a new ticket) is dropped by its doorbell;
//! an address nobody listens on (a crashed process, a stale cell) swallows the ring, and the
//! waiter's own fallback poll and the dead cell's TTL do the rest.
//!
//! ## FIFO
//! The ringer rings the head of a QUORUM read of the queue, which is the waiter the bounded
//! lock's own head check would pick; a woken waiter skips its own head read, so with agreeing
//! clocks it is the first in the queue. A waiter that polls still checks the head itself.
//!
//! ## Choices and their costs
//! - **Fallback poll**: 1 s by default for the head, longer behind it: a waiter with k others
//!   ahead polls after `fallback × (1 + k/8)`, at most 8 s. It bounds the latency a lost ring
//!   costs the head (the only waiter a ring is for), and keeps the store load of N waiters
//!   near `8·ln(1 + N/8)` reads a second (at the default fallback), which grows far slower
//!   than N: requests per grant stay flat as contenders grow.
//! - **Whole-row reads** of the queue by the releaser: at most one cell per thread (the
//!   bounded layout), so reading the head costs K cells and at most K tombstones.
//! - **Every leave rings** the head, whether or not the leaver was first: a spurious ring costs
//!   the head one failed main-row try, and leaves are rare (timeouts, refused soft locks).
//! - **Doorbells are per process**: [`lock_core::doorbell::UdpDoorbells`] demultiplexes rings by
//!   lock id and owner id, so one socket serves every waiter of a process.
//!
//! ## Invariants the tests check
//! - the conformance suite (at most one holder, soft lock, timeouts, crash, leases, fencing);
//! - lost, late, duplicated and stale rings, an unreachable address and a holder that crashes
//!   without ringing: still one holder at a time, and every waiter granted;
//! - two processes on loopback ringing each other's doorbells over UDP.

use crate::bounded::ticket;
use crate::protocol::{Parts, Place, Queue};
use crate::{queue_column_time, QueueConfig};
use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::doorbell::Doorbell;
use lock_core::lease::AfterDelete;
use lock_core::lock::LockError;
use lock_core::store::{Cell, CellStore, Slice};
use std::sync::Arc;
use std::time::Duration;

/// The push queue lock's main row's table: who holds the lock.
pub const PUSH_MAIN_TABLE: &str = "push_queue_lock_main";
/// The push queue lock's queue row's table: one cell per waiting thread, value its ticket and
/// doorbell address.
pub const PUSH_QUEUE_TABLE: &str = "push_queue_lock_queue";

/// The default fallback poll.
pub const DEFAULT_FALLBACK_POLL: Duration = Duration::from_secs(1);

/// Settings of the push queue lock.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PushConfig {
    /// How long a waiter waits for a ring before it reads the queue itself.
    pub fallback_poll: Duration,
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig { fallback_poll: DEFAULT_FALLBACK_POLL }
    }
}

/// The ticket (the first 20 bytes) and doorbell address of a queue cell's value.
fn parse_value(value: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(value).ok()?;
    let (ticket, address) = text.split_once(' ')?;
    (ticket.len() == 20).then_some((ticket, address))
}

/// The head of a queue row: the live cell with the least `(ticket, thread id)`; cells whose
/// value cannot be read sort last.
fn head(queue: &[Cell]) -> Option<(&Cell, &str, &str)> {
    queue
        .iter()
        .filter_map(|c| parse_value(&c.value).map(|(t, a)| (c, t, a)))
        .min_by(|a, b| (a.1, &a.0.column).cmp(&(b.1, &b.0.column)))
}

/// The push queue lock for one owner (thread).
pub struct PushQueueLocker<S> {
    parts: Parts<S>,
    bell: Arc<dyn Doorbell>,
}

impl<S: CellStore + Clone> PushQueueLocker<S> {
    /// A locker for `ctx.owner` over `store`, woken through `bell` (one per process: the
    /// embedded store's [`CellStore::doorbell`], or a [`lock_core::doorbell::UdpDoorbells`]).
    pub fn new(
        store: S,
        ctx: ClientContext,
        config: PushConfig,
        bell: Arc<dyn Doorbell>,
    ) -> Result<Self, LockError> {
        if bell.address().contains(char::is_whitespace) {
            return Err(LockError::Config(format!(
                "a doorbell address must not contain spaces: {}",
                bell.address()
            )));
        }
        let parts = Parts::new(store, ctx, QueueConfig { poll_interval: config.fallback_poll })?;
        Ok(PushQueueLocker { parts, bell })
    }
}

#[async_trait]
impl<S: CellStore + Clone> Queue for PushQueueLocker<S> {
    type Store = S;
    const MAIN_TABLE: &'static str = PUSH_MAIN_TABLE;

    fn parts(&self) -> &Parts<S> {
        &self.parts
    }

    /// Step 1: listen for our place, then write our queue cell (ticket and address).
    async fn join(&self, lock_id: &str) -> Result<Place, LockError> {
        let err = |e| LockError::store(lock_id, e);
        let ticket = ticket(self.parts.ctx.time.now().await.map_err(err)?);
        let owner = &self.parts.ctx.owner;
        let bell = self.bell.listen(lock_id, owner, &ticket);
        let value = format!("{ticket} {}", self.bell.address());
        match crate::protocol::join_queue(
            self,
            PUSH_QUEUE_TABLE,
            lock_id,
            owner,
            value.as_bytes(),
            ticket,
        )
        .await
        {
            Ok(mut place) => {
                place.bell = Some(bell);
                Ok(place)
            }
            Err(e) => {
                self.bell.forget(lock_id, owner);
                Err(e)
            }
        }
    }

    /// Step 2's head check: read the whole queue; is its head ours?
    async fn is_head(&self, lock_id: &str, place: &Place) -> Result<bool, LockError> {
        let c = self.parts.ctx.consistency;
        let err = |e| LockError::store(lock_id, e);
        let read = self.parts.store.read_shared(PUSH_QUEUE_TABLE, lock_id, Slice::all(), c);
        let queue = read.await.map_err(err)?;
        let ours = queue.iter().find(|cell| cell.column == self.parts.ctx.owner);
        if ours.and_then(|cell| parse_value(&cell.value)).is_none_or(|(t, _)| t != place.id) {
            return Err(place
                .lease
                .lost_error(lock_id, "our queue cell is no longer in the queue"));
        }
        let ahead = queue
            .iter()
            .filter_map(|c| parse_value(&c.value).map(|(t, _)| (t, &c.column)))
            .filter(|(t, column)| (*t, *column) < (place.id.as_str(), &self.parts.ctx.owner))
            .count();
        place.ahead.store(ahead, std::sync::atomic::Ordering::Relaxed);
        let Some((first, first_ticket, _)) = head(&queue) else { return Ok(false) };
        if let Some(t) = queue_column_time(first_ticket) {
            self.parts.ctx.time.observe(t);
        }
        Ok(first.column == self.parts.ctx.owner)
    }

    /// The fallback poll, longer for waiters far from the head: `fallback × (1 + ahead / 8)`,
    /// at most 8 × fallback. Only the head can be rung in vain, and it polls at the fallback.
    fn next_poll(&self, place: &Place) -> Duration {
        let ahead = place.ahead.load(std::sync::atomic::Ordering::Relaxed).min(56) as u32;
        self.parts.config.poll_interval * (8 + ahead) / 8
    }

    /// Once our first cell is gone (the main cell, when we held the lock): stop listening,
    /// read the queue, ring its head other than us (our queue cell goes right after).
    fn after_delete(&self, lock_id: &str) -> Option<AfterDelete> {
        let (store, bell) = (self.parts.store.clone(), Arc::clone(&self.bell));
        let (lock_id, owner, c) =
            (lock_id.to_owned(), self.parts.ctx.owner.clone(), self.parts.ctx.consistency);
        Some(Box::new(move || {
            Box::pin(async move {
                bell.forget(&lock_id, &owner);
                // A failed read rings nobody: the waiters' fallback polls find their turn.
                let Ok(queue) = store.read(PUSH_QUEUE_TABLE, &lock_id, Slice::all(), c).await
                else {
                    return;
                };
                let others: Vec<Cell> =
                    queue.into_iter().filter(|cell| cell.column != owner).collect();
                if let Some((next, ticket, address)) = head(&others) {
                    bell.ring(address, &lock_id, &next.column, ticket);
                }
            })
        }))
    }
}

queue_locker!(PushQueueLocker, "queue-push");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_value_is_a_ticket_and_an_address() {
        assert_eq!(
            parse_value(b"00000000000000000042 udp://127.0.0.1:9"),
            Some(("00000000000000000042", "udp://127.0.0.1:9"))
        );
        assert_eq!(parse_value(b"42 local"), None);
        assert_eq!(parse_value(b"00000000000000000042"), None);
    }
}
