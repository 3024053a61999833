//! The coordinator's cache of read answers: per row and slice, the cells the last read of it
//! returned, as one shared snapshot, and the replicas' live slices known to hold exactly
//! those cells.
//!
//! Waiters poll the same rows over and over, and between two changes of a row every read of
//! it merges the same answers into the same cells. A read whose replicas all answered with
//! slices known to hold the cached cells returns the cached snapshot without merging. That is
//! exact: when every answer's live cells are the same columns with the same values and
//! timestamps, each column of the merge is one of those versions on every replica (a column
//! live on a replica is not among its dead cells, so no tombstone takes part), reconciliation
//! picks one of equal versions, and the answers stop at the same last column, so the merge
//! returns those cells, is conclusive, and neither the dead cells nor the limits change that.
//! Expiries do not matter either: each replica took its snapshot at its read instant, after
//! moving the cells expired by then to its dead ones.
//!
//! A slice is known by its snapshot's address, held weakly ([`SliceId`]): while the address
//! matches, the snapshot has not changed. A slice not known yet is compared with the cached
//! cells once, and known from then on; any other read merges as before. A merge that gives
//! the cached cells again keeps the cached snapshot, so that equal answers are one
//! allocation, which readers may compare by address.
//!
//! What the cache holds only decides how an answer is computed, never what it is: a run
//! gives the same results with the cache as without it.

use super::row::{LiveSlice, SliceId};
use crate::store::{Cell, Slice};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Slices remembered per row (different starts or limits): the oldest goes first.
const SLICES_PER_ROW: usize = 8;
/// Replica slices known to hold a slice's cells: the oldest goes first.
const KNOWN_PER_SLICE: usize = 8;
/// Rows remembered in all; past this the cache starts afresh (a benchmark over many lock
/// ids then keeps what it reads again soon).
const ROWS_MAX: usize = 4096;

/// The cache (see the module docs).
#[derive(Default)]
pub(super) struct ReadCache {
    tables: BTreeMap<String, BTreeMap<String, Vec<Entry>>>,
    rows: usize,
    /// The buffer merges write into, kept for the next one.
    scratch: Vec<Cell>,
}

/// The last answer to reads of one slice of one row.
struct Entry {
    start: Option<String>,
    limit: Option<usize>,
    cells: Arc<[Cell]>,
    /// Replica slices that hold exactly `cells`.
    known: Vec<SliceId>,
}

impl ReadCache {
    /// The answer to a read of `slice` of `table`/`row` whose replicas answered with the live
    /// slices `answers`: the cached cells when every one of them is known to hold them,
    /// otherwise what `merge` writes into the buffer it is given (it returns false when the
    /// answers cannot tell; then so does this, with `None`).
    pub(super) fn answer(
        &mut self,
        table: &str,
        row: &str,
        slice: &Slice,
        answers: &[&LiveSlice],
        merge: impl FnOnce(&mut Vec<Cell>) -> bool,
    ) -> Option<Arc<[Cell]>> {
        let (entry, scratch) = self.entry(table, row, slice);
        if answers.iter().all(|a| entry.knows(a)) {
            return Some(Arc::clone(&entry.cells));
        }
        if !merge(scratch) {
            return None;
        }
        if scratch.as_slice() != &*entry.cells {
            entry.cells = Arc::from(std::mem::take(scratch));
            entry.known.clear();
        }
        Some(Arc::clone(&entry.cells))
    }

    /// The entry of one slice of one row, made empty when there is none, and the scratch
    /// buffer.
    fn entry(&mut self, table: &str, row: &str, slice: &Slice) -> (&mut Entry, &mut Vec<Cell>) {
        if self.rows >= ROWS_MAX && !self.has_row(table, row) {
            self.tables.clear();
            self.rows = 0;
        }
        if !self.tables.contains_key(table) {
            self.tables.insert(table.to_owned(), BTreeMap::new());
        }
        let rows = self.tables.get_mut(table).expect("inserted above");
        if !rows.contains_key(row) {
            rows.insert(row.to_owned(), Vec::new());
            self.rows += 1;
        }
        let entries = rows.get_mut(row).expect("inserted above");
        let found = entries
            .iter()
            .position(|e| e.limit == slice.limit && e.start.as_deref() == slice.start.as_deref());
        let i = match found {
            Some(i) => i,
            None => {
                if entries.len() >= SLICES_PER_ROW {
                    entries.remove(0);
                }
                entries.push(Entry {
                    start: slice.start.clone(),
                    limit: slice.limit,
                    cells: Arc::from(Vec::new()),
                    known: Vec::new(),
                });
                entries.len() - 1
            }
        };
        (&mut entries[i], &mut self.scratch)
    }

    fn has_row(&self, table: &str, row: &str) -> bool {
        self.tables.get(table).is_some_and(|rows| rows.contains_key(row))
    }
}

impl Entry {
    /// Whether `slice` holds exactly this entry's cells: known already, or compared now (and
    /// known from then on when it does).
    fn knows(&mut self, slice: &LiveSlice) -> bool {
        let Some(id) = slice.id() else { return self.cells.is_empty() };
        if self.known.iter().any(|k| slice.is(k)) {
            return true;
        }
        if !same_cells(slice, &self.cells) {
            return false;
        }
        if self.known.len() >= KNOWN_PER_SLICE {
            self.known.remove(0);
        }
        self.known.push(id);
        true
    }
}

/// Whether a replica's live slice holds exactly `cells`: the same columns, values and
/// timestamps, in order.
fn same_cells(slice: &LiveSlice, cells: &[Cell]) -> bool {
    slice.len() == cells.len()
        && slice.iter().zip(cells).all(|((column, live), cell)| {
            live.timestamp == cell.timestamp
                && **column == *cell.column
                && *live.value == *cell.value
        })
}

#[cfg(test)]
mod tests;
