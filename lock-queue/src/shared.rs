//! The queue lock for asks that may share the lock: readers beside readers, a semaphore's
//! permits beside each other. The thesis's idea, generalised: the queue decides *who tries*
//! and the main row *who holds*, and "alone" becomes "the others leave room".
//!
//! An ask is written into both rows with what it wants as the cell's value ([`Ask`]): `r` (a
//! read), `w` (a write), `p<k>/<n>` (k permits of n). Then:
//! - **who tries**: an ask whose queue cell sees, ahead of it in the queue, asks it fits
//!   beside ([`Ask::fits`]): a write must be first; a read may try while no write is ahead; k
//!   permits while the permits ahead plus k are at most n. Holders keep their queue cells, so
//!   "ahead" counts holders and earlier waiters alike: asks are served in queue order, and a
//!   reader behind a waiting writer waits for it;
//! - **who holds**: the main-row step of the mutex, with the same test: write our main cell,
//!   read the row, and we hold if the others there leave room for us, or else delete our cell
//!   and wait.
//!
//! # Why the main row keeps the limit
//! Take any set of asks holding at one instant, and the one among them whose main-cell write
//! finished last. Its read of the main row came after every other holder's write had finished
//! and before any of them released (they all hold at that instant), so at QUORUM it saw all of
//! them and admitted itself beside them: a write sees no other cell, so no writer holds beside
//! anyone; the permits it saw plus its own are at most n, so no more than n are held. This is
//! Theorem 1's argument, unchanged: it never relies on the queue.
//!
//! # What it costs
//! Every look at the queue reads the whole row up to the end (the mutex reads its first cell):
//! a waiter needs to see every ask ahead of it. Two asks that might share and race to the main
//! row may both see each other and both back off for a poll interval, as two mutex asks do.
//! The queue keeps the thesis's columns (time, then owner), with its tombstones: one per ask.

use crate::protocol::{join_queue, Parts, Place, Queue};
use crate::queue_column;
use async_trait::async_trait;
use lock_core::lock::LockError;
use lock_core::store::{Cell, CellStore, Slice};
use lock_core::usage::UsageError;
use std::marker::PhantomData;

/// What one ask wants, as written into the queue and main cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// A read of a reader-writer lock.
    Read,
    /// A write of a reader-writer lock; also what a cell that cannot be read is taken for.
    Write,
    /// `count` permits of a semaphore of `limit`.
    Permits {
        /// Permits asked for.
        count: u32,
        /// The semaphore's size.
        limit: u32,
    },
}

impl Ask {
    /// The cell value: `r`, `w` or `p<count>/<limit>`.
    pub fn encode(self) -> Vec<u8> {
        match self {
            Ask::Read => b"r".to_vec(),
            Ask::Write => b"w".to_vec(),
            Ask::Permits { count, limit } => format!("p{count}/{limit}").into_bytes(),
        }
    }

    /// The ask a cell value says; a value no ask writes is taken for a write, which fits
    /// beside nothing.
    pub fn decode(value: &[u8]) -> Ask {
        let parsed = match value {
            b"r" => Some(Ask::Read),
            b"w" => Some(Ask::Write),
            [b'p', rest @ ..] => std::str::from_utf8(rest).ok().and_then(|s| {
                let (count, limit) = s.split_once('/')?;
                Some(Ask::Permits { count: count.parse().ok()?, limit: limit.parse().ok()? })
            }),
            _ => None,
        };
        parsed.unwrap_or(Ask::Write)
    }

    /// Whether this ask can hold beside `others`.
    pub fn fits(self, others: &[Ask]) -> bool {
        match self {
            Ask::Write => others.is_empty(),
            Ask::Read => others.iter().all(|o| *o == Ask::Read),
            Ask::Permits { count, limit } => {
                let mut taken = count as u64;
                for o in others {
                    match o {
                        Ask::Permits { count, .. } => taken += *count as u64,
                        Ask::Read | Ask::Write => return false,
                    }
                }
                taken <= limit as u64
            }
        }
    }

    /// A semaphore ask beside asks of the same semaphore that give it another size.
    fn check_limit(self, semaphore: &str, others: &[Ask]) -> Result<(), LockError> {
        let Ask::Permits { limit: asked, .. } = self else { return Ok(()) };
        match others.iter().find_map(|o| match o {
            Ask::Permits { limit, .. } if *limit != asked => Some(*limit),
            _ => None,
        }) {
            Some(stored) => {
                Err(UsageError::LimitMismatch { semaphore: semaphore.to_string(), asked, stored }
                    .into())
            }
            None => Ok(()),
        }
    }

    /// The asks of `cells`, checked against this one's size.
    fn read_cells(self, lock_id: &str, cells: &[Cell]) -> Result<Vec<Ask>, LockError> {
        let asks: Vec<Ask> = cells.iter().map(|c| Ask::decode(&c.value)).collect();
        self.check_limit(lock_id, &asks)?;
        Ok(asks)
    }
}

/// The two rows of one primitive.
pub(crate) trait Tables: Send + Sync + 'static {
    /// Who holds.
    const MAIN: &'static str;
    /// Who waits, in time order.
    const QUEUE: &'static str;
}

/// One ask of a primitive on the queue protocol: what [`crate::protocol`] calls a queue.
pub(crate) struct Asking<'a, S, T> {
    parts: &'a Parts<S>,
    ask: Ask,
    tables: PhantomData<T>,
}

impl<'a, S, T> Asking<'a, S, T> {
    /// `ask` by the client of `parts`.
    pub(crate) fn new(parts: &'a Parts<S>, ask: Ask) -> Self {
        Asking { parts, ask, tables: PhantomData }
    }
}

#[async_trait]
impl<S: CellStore + Clone, T: Tables> Queue for Asking<'_, S, T> {
    type Store = S;
    const MAIN_TABLE: &'static str = T::MAIN;

    fn parts(&self) -> &Parts<S> {
        self.parts
    }

    /// Take the time, write our queue cell (its value: the ask), keep it.
    async fn join(&self, lock_id: &str) -> Result<Place, LockError> {
        let err = |e| LockError::store(lock_id, e);
        let now = self.parts.ctx.time.now().await.map_err(err)?;
        let column = queue_column(now, &self.parts.ctx.owner);
        join_queue(self, T::QUEUE, lock_id, &column, &self.ask.encode(), column.clone()).await
    }

    /// Read the queue: do we fit beside every ask ahead of us?
    async fn is_head(&self, lock_id: &str, place: &Place) -> Result<bool, LockError> {
        let c = self.parts.ctx.consistency;
        let read = self.parts.store.read_shared(T::QUEUE, lock_id, Slice::all(), c).await;
        let cells = read.map_err(|e| LockError::store(lock_id, e))?;
        match cells.iter().position(|cell| cell.column == place.id) {
            Some(ours) => {
                if let Some(t) = cells.first().and_then(|h| crate::queue_column_time(&h.column)) {
                    self.parts.ctx.time.observe(t);
                }
                self.ask.read_cells(lock_id, &cells[..ours]).map(|ahead| self.ask.fits(&ahead))
            }
            // Our own cell is gone (expired, or the store lost it): the lease says so.
            None => {
                Err(place.lease.lost_error(lock_id, "our queue cell is no longer in the queue"))
            }
        }
    }

    fn main_slice(&self) -> Slice {
        Slice::all()
    }

    fn main_value(&self) -> Vec<u8> {
        self.ask.encode()
    }

    fn admits(&self, lock_id: &str, others: &[Cell]) -> Result<bool, LockError> {
        self.ask.read_cells(lock_id, others).map(|others| self.ask.fits(&others))
    }

    fn tokens(&self) -> u64 {
        match self.ask {
            Ask::Permits { count, .. } => count as u64,
            Ask::Read | Ask::Write => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asks_round_trip_and_fit_as_their_primitive_says() {
        for a in [Ask::Read, Ask::Write, Ask::Permits { count: 2, limit: 5 }] {
            assert_eq!(Ask::decode(&a.encode()), a);
        }
        assert_eq!(Ask::decode(b"worker-1"), Ask::Write);
        assert_eq!(Ask::decode(b"p2/"), Ask::Write);
        let (r, w) = (Ask::Read, Ask::Write);
        assert!(r.fits(&[r, r]) && !r.fits(&[r, w]) && w.fits(&[]) && !w.fits(&[r]));
        let p = |count| Ask::Permits { count, limit: 4 };
        assert!(p(2).fits(&[p(1), p(1)]) && !p(2).fits(&[p(2), p(1)]) && !p(1).fits(&[w]));
        let other_size = Ask::Permits { count: 1, limit: 3 };
        assert!(p(1).check_limit("s", &[other_size]).is_err());
        assert!(p(1).check_limit("s", &[p(3)]).is_ok());
    }
}
