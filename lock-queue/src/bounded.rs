//! # The bounded queue lock
//!
//! The thesis's queue lock ([`crate::QueueLocker`]) writes a new queue column for every request
//! (time + thread id) and deletes it afterwards. On Cassandra every deletion stays as a
//! tombstone for `gc_grace_seconds` (10 days), and all of them sort before the live cells, so
//! every read of the queue head scans every request made since: grants slow down as the run
//! goes on, and once the row holds more tombstones than Cassandra's failure threshold
//! (`tombstone_failure_threshold`, 100,000 by default) every read fails
//! (`TombstoneOverwhelmingException`; `results/longrun/README.md` has a real node's run and
//! the embedded store's). This lock keeps the thesis's protocol and order and changes only
//! *where* a waiter's place is written.
//!
//! ## Protocol
//!
//! Per lock id two rows, in their own tables ([`BOUNDED_QUEUE_TABLE`], [`BOUNDED_MAIN_TABLE`]).
//!
//! *Queue cell*: column = the **thread id**, value = the **ticket**: the time from the
//! configured [`TimeSource`] in microseconds, zero-padded to 20 digits (the thesis's column
//! prefix). A thread's place is `(ticket, thread id)`; the queue's order is the order of
//! places, which is exactly the thesis's column order (time, ties broken by thread id).
//!
//! `GetLock`:
//! 1. join: take the time, write our queue cell (column = our id, value = our ticket);
//! 2. read the **whole** queue row; the head is the live cell with the least place. If our cell
//!    is missing or holds another ticket, our place is gone (expired): the lease is lost.
//!    If the head is ours: write our cell into the main row, read the main row; alone there
//!    means the lock is ours; otherwise delete our main cell, wait a poll interval, go to 2;
//! 3. not the head: wait a poll interval and go to 2.
//!
//! `TryGetLock`: if the main row holds a cell, false; join; while we are the head, try the main
//! row as above (alone: true; not alone: delete, wait, re-check); not the head: leave, false.
//!
//! Release, timeout and failure stop the lease and delete our main and queue cells, as in the
//! thesis's lock.
//!
//! ## Why tombstones stay bounded
//!
//! Every column of the queue row is a thread id, and a thread's next join writes its cell
//! with a newer timestamp than its last deletion (the context's timestamps strictly increase),
//! so the new cell *replaces* the thread's own tombstone instead of adding one. The row thus
//! never holds more cells, live or dead, than the distinct thread ids that queued for the lock
//! within the last `gc_grace` (plus the compaction interval); the main row likewise. A read of
//! either row therefore scans at most **K tombstones, K being the number of distinct owner ids
//! using the lock** — K − 1 for a waiter's whole-row reads, in which its own cell is live;
//! K only for the soft lock's first look at a free main row: 64 for the harness's 64
//! contenders, whatever the run length, against one per request ever made for the thesis's
//! queue. The test
//! `tests/bounded.rs` runs both locks side by side until the thesis's queue reads scan tens of
//! times that bound.
//!
//! ## Why it is still safe and FIFO
//!
//! - **Mutual exclusion** does not depend on the queue at all: as in the thesis (Theorem 1), a
//!   thread holds the lock only after it wrote its cell into the main row and then read the
//!   main row with only its own cell in it. Two threads that both did so would each have
//!   written before reading, so by Lemma 1 (QUORUM writes and reads) one of them saw both
//!   cells. The queue only decides who *tries*, which keeps the main row uncontended.
//! - **FIFO**: the head is the least place among the live queue cells, computed from the whole
//!   row, so it is the same thread the thesis's `first(1)` read would return for the same
//!   places. The thesis's order argument carries over unchanged: with agreeing clocks a later
//!   request gets a greater ticket and is never the head while an earlier one waits
//!   (`tests/bounded.rs` counts overtakes: zero).
//! - **A replaced place cannot be confused with an old one**: a thread's old queue cell and
//!   its tombstone both carry older timestamps than its new join, so neither can reappear over
//!   it (a renewal still in flight from the last hold was stopped before the deletion, whose
//!   timestamp is greater still). A place is identified by the ticket in the value: a waiter
//!   that finds its column with another ticket knows it lost its place.
//!
//! ## Choices and their costs
//! - **Whole-row reads**: the queue row holds at most one cell per thread, so reading all of it
//!   costs K cells; the thesis's `first(1)` would save nothing here and is what scans the
//!   tombstones there.
//! - **One place per thread id per lock**: two requests under the same owner id on the same
//!   lock at once share a queue cell (the later join moves the earlier one's place). The
//!   thesis's main row already has that restriction, since its column is the thread id, so
//!   the interface's contract is unchanged: one outstanding request per owner and lock.
//! - **A restarted owner whose clock runs behind its own last deletion** cannot write its cell
//!   until its clock passes that deletion's timestamp (last write wins); it then sees its place
//!   missing and gets [`LockError::LeaseLost`] instead of waiting forever. The thesis's main
//!   row has the same exposure.
//! - Poll interval, timeouts, leases, fencing, time sources: as [`crate::QueueLocker`].
//!
//! ## Invariants the tests check
//! - the shared conformance suite (at most one holder, soft lock, timeouts, crash, leases,
//!   fencing), simulated and wall time;
//! - with agreeing clocks no overtakes (FIFO), and two contenders take turns;
//! - over a long run the thesis's queue reads scan thousands of tombstones while this lock's
//!   never scan more than K − 1 (the waiters' reads the test makes).

use crate::protocol::{Parts, Place, Queue};
use crate::{queue_column_time, QueueConfig};
use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::lock::LockError;
use lock_core::store::{Cell, CellStore, Micros, Slice};
#[allow(unused_imports)]
use lock_core::time::TimeSource;

/// The bounded queue lock's main row's table: who holds the lock.
pub const BOUNDED_MAIN_TABLE: &str = "bounded_queue_lock_main";
/// The bounded queue lock's queue row's table: one cell per waiting thread, value its ticket.
pub const BOUNDED_QUEUE_TABLE: &str = "bounded_queue_lock_queue";

/// A ticket: the join time, zero-padded to 20 digits so that byte order is time order.
pub fn ticket(micros: Micros) -> String {
    format!("{:020}", micros.max(0))
}

/// The bounded queue lock for one owner (thread).
pub struct BoundedQueueLocker<S> {
    parts: Parts<S>,
}

/// The head of a queue row: the live cell with the least `(ticket, thread id)`.
fn head(queue: &[Cell]) -> Option<&Cell> {
    queue
        .iter()
        .min_by(|a, b| ticket_order(&a.value, &b.value).then_with(|| a.column.cmp(&b.column)))
}

/// Two tickets in byte order, as `Ord` on byte slices orders them. Every waiter looks for
/// the head of the whole row at each poll, one comparison per cell; tickets of [`ticket`]'s
/// 20 digits are compared as three big-endian words, without a call into `memcmp` each.
fn ticket_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    fn words(t: &[u8; 20]) -> (u64, u64, u32) {
        let word = |at: usize| u64::from_be_bytes(t[at..at + 8].try_into().unwrap_or([0; 8]));
        (word(0), word(8), u32::from_be_bytes(t[16..20].try_into().unwrap_or([0; 4])))
    }
    match (<&[u8; 20]>::try_from(a), <&[u8; 20]>::try_from(b)) {
        (Ok(a), Ok(b)) => words(a).cmp(&words(b)),
        _ => a.cmp(b),
    }
}

impl<S: CellStore + Clone> BoundedQueueLocker<S> {
    /// A locker for `ctx.owner` over `store`.
    pub fn new(store: S, ctx: ClientContext, config: QueueConfig) -> Result<Self, LockError> {
        Ok(BoundedQueueLocker { parts: Parts::new(store, ctx, config)? })
    }
}

#[async_trait]
impl<S: CellStore + Clone> Queue for BoundedQueueLocker<S> {
    type Store = S;
    const MAIN_TABLE: &'static str = BOUNDED_MAIN_TABLE;

    fn parts(&self) -> &Parts<S> {
        &self.parts
    }

    /// Step 1: take the time, write our queue cell over our own last one, keep it.
    async fn join(&self, lock_id: &str) -> Result<Place, LockError> {
        let err = |e| LockError::store(lock_id, e);
        let ticket = ticket(self.parts.ctx.time.now().await.map_err(err)?);
        let owner = &self.parts.ctx.owner;
        crate::protocol::join_queue(
            self,
            BOUNDED_QUEUE_TABLE,
            lock_id,
            owner,
            ticket.as_bytes(),
            ticket.clone(),
        )
        .await
    }

    /// Step 2, once: read the whole queue; is its head (the least place) ours? The main row is
    /// then [`crate::protocol`]'s, as in the thesis's lock.
    async fn is_head(&self, lock_id: &str, place: &Place) -> Result<bool, LockError> {
        let c = self.parts.ctx.consistency;
        let read = self.parts.store.read_shared(BOUNDED_QUEUE_TABLE, lock_id, Slice::all(), c);
        let queue = read.await.map_err(|e| LockError::store(lock_id, e))?;
        self.head_of(&queue, lock_id, place)
    }
}

impl<S: CellStore + Clone> BoundedQueueLocker<S> {
    /// What one look at the queue tells: is our place its head?
    fn head_of(&self, queue: &[Cell], lock_id: &str, place: &Place) -> Result<bool, LockError> {
        // The cells come in column order (the store's contract): ours is found by halving.
        let owner = self.parts.ctx.owner.as_str();
        let ours = queue
            .binary_search_by(|cell| cell.column.as_str().cmp(owner))
            .ok()
            .and_then(|i| queue.get(i));
        if ours.is_none_or(|cell| cell.value != place.id.as_bytes()) {
            return Err(place
                .lease
                .lost_error(lock_id, "our queue cell is no longer in the queue"));
        }
        let Some(first) = head(queue) else { return Ok(false) };
        if let Some(t) = std::str::from_utf8(&first.value).ok().and_then(queue_column_time) {
            self.parts.ctx.time.observe(t);
        }
        Ok(first.column == self.parts.ctx.owner)
    }
}

queue_locker!(BoundedQueueLocker, "queue-bounded");

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(column: &str, value: &[u8]) -> Cell {
        Cell { column: column.into(), value: value.to_vec(), timestamp: 0 }
    }

    #[test]
    fn tickets_order_as_their_bytes_do() {
        let tickets: Vec<Vec<u8>> = [0, 1, 9, 10, 99_999_999, 100_000_000, 1_700_000_000_123_456]
            .into_iter()
            .map(|t| ticket(t).into_bytes())
            .chain([b"".to_vec(), b"0".to_vec(), b"00000000000000000001x".to_vec()])
            .chain([ticket(5).into_bytes()].map(|mut t| {
                t[19] = 0xff;
                t
            }))
            .collect();
        for a in &tickets {
            for b in &tickets {
                assert_eq!(ticket_order(a, b), a.as_slice().cmp(b.as_slice()), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn the_head_is_the_least_ticket_then_the_least_thread() {
        let queue = [
            cell("c1", ticket(20).as_bytes()),
            cell("c2", ticket(10).as_bytes()),
            cell("c3", ticket(10).as_bytes()),
            cell("c4", ticket(11).as_bytes()),
        ];
        assert_eq!(head(&queue).map(|c| c.column.as_str()), Some("c2"));
        assert_eq!(head(&queue[2..]).map(|c| c.column.as_str()), Some("c3"));
        assert!(head(&[]).is_none());
    }
}
