//! What a waiter concludes from the rows it polls, without looking at every cell again when
//! it need not.
//!
//! A waiter polls the `Numbers` row (or the `Choosing` row) and judges it: first in line,
//! behind someone, or gone. A store that hands out one snapshot per unchanged row
//! ([`CellStore::read_shared`]) lets that judgement be reused in two ways, both giving what
//! judging the cells afresh gives:
//!
//! - [`Polled`]: a waiter that gets the snapshot it judged last time keeps its conclusion;
//! - [`place_of`]: the waiters of one lock poll the same snapshots, and what decides each of
//!   them is the least `(number, owner)` pair of the row, which is the same for all: it is
//!   worked out once per snapshot, and each waiter only finds its own cell.
//!
//! [`CellStore::read_shared`]: lock_core::store::CellStore::read_shared

use super::{ahead_of, parse_number, Ahead};
use lock_core::store::Cell;
use std::cell::RefCell;
use std::sync::Arc;

/// Where a waiter stands in the `Numbers` row: the verdict of [`ahead_of`] without the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// No other cell holds a smaller pair.
    First,
    /// Another cell holds a smaller pair.
    Behind,
    /// Our own cell is missing or holds another number.
    Gone,
}

/// What a waiter concluded from the last row it polled, and that row.
pub(crate) struct Polled<T> {
    last: Option<(Arc<[Cell]>, T)>,
}

impl<T> Default for Polled<T> {
    fn default() -> Self {
        Polled { last: None }
    }
}

impl<T: Copy> Polled<T> {
    /// What `judge` concludes from `cells`: the last conclusion when `cells` is the row polled
    /// last, the same allocation (its cells cannot have changed: the snapshot is immutable,
    /// and holding it keeps its address from being reused).
    pub(crate) fn verdict(
        &mut self,
        cells: Arc<[Cell]>,
        judge: impl FnOnce(&Arc<[Cell]>) -> T,
    ) -> T {
        if let Some((last, verdict)) = &self.last {
            if Arc::ptr_eq(last, &cells) {
                return *verdict;
            }
        }
        let verdict = judge(&cells);
        self.last = Some((cells, verdict));
        verdict
    }
}

/// The least `(number, owner)` pair of one snapshot of the `Numbers` row.
struct Least {
    /// The snapshot, held so that its address stays its own.
    cells: Arc<[Cell]>,
    /// Whether its columns strictly increase, as a store returns them: each owner then has one
    /// cell, found by a binary search, and the least pair is nobody else's.
    sorted: bool,
    /// The index of the cell with the least pair (a cell with no number counts as least).
    least: Option<usize>,
}

impl Least {
    fn of(cells: &Arc<[Cell]>) -> Least {
        let sorted = cells.windows(2).all(|w| w[0].column < w[1].column);
        let least = cells
            .iter()
            .enumerate()
            .min_by(|(_, a), (_, b)| {
                (parse_number(&a.value), a.column.as_str())
                    .cmp(&(parse_number(&b.value), b.column.as_str()))
            })
            .map(|(i, _)| i);
        Least { cells: Arc::clone(cells), sorted, least }
    }
}

thread_local! {
    /// The least pair of the snapshot polled last on this thread.
    static LEAST: RefCell<Option<Least>> = const { RefCell::new(None) };
}

/// [`ahead_of`]'s verdict for `me`, holding `mine`, on the snapshot `cells`. With our own
/// cell `(mine, me)` in the row, someone is ahead exactly when the row's least pair is not
/// ours (pairs differ, since owners do); that pair is the snapshot's, kept for every waiter.
pub(crate) fn place_of(cells: &Arc<[Cell]>, me: &str, mine: u64) -> Place {
    LEAST.with(|slot| {
        let mut slot = slot.borrow_mut();
        let least = match &mut *slot {
            Some(least) if Arc::ptr_eq(&least.cells, cells) => least,
            other => other.insert(Least::of(cells)),
        };
        if !least.sorted {
            return match ahead_of(cells, me, mine) {
                Ahead::Nobody => Place::First,
                Ahead::Owner { .. } => Place::Behind,
                Ahead::Gone => Place::Gone,
            };
        }
        let own = cells.binary_search_by(|c| c.column.as_str().cmp(me)).ok().map(|i| &cells[i]);
        if own.is_none_or(|c| parse_number(&c.value) != Some(mine)) {
            return Place::Gone;
        }
        match least.least {
            Some(i) if cells[i].column != me => Place::Behind,
            _ => Place::First,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::number_value;

    fn verdict(cells: &[Cell], me: &str, mine: u64) -> Place {
        match ahead_of(cells, me, mine) {
            Ahead::Nobody => Place::First,
            Ahead::Owner { .. } => Place::Behind,
            Ahead::Gone => Place::Gone,
        }
    }

    /// Rows of a few owners with small numbers (ties, gaps, foreign values, unsorted rows):
    /// for every owner and number, the verdict is [`ahead_of`]'s.
    #[test]
    fn place_of_agrees_with_ahead_of() {
        let owners = ["a", "b", "c", "d", "e"];
        let values = |n: u64| match n {
            0 => b"x".to_vec(),
            n => number_value(n),
        };
        let mut rows: Vec<Vec<Cell>> = Vec::new();
        for mask in 0u32..32 {
            for shift in 0..3u64 {
                let row: Vec<Cell> = owners
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(i, o)| Cell {
                        column: (*o).into(),
                        value: values((i as u64 * 7 + shift * 3) % 5),
                        timestamp: 0,
                    })
                    .collect();
                let mut reversed = row.clone();
                reversed.reverse();
                rows.push(row);
                rows.push(reversed);
            }
        }
        for row in rows {
            let cells: Arc<[Cell]> = Arc::from(row);
            for me in owners.iter().chain(&["0", "z"]) {
                for mine in 0..6 {
                    assert_eq!(
                        place_of(&cells, me, mine),
                        verdict(&cells, me, mine),
                        "{me} holding {mine} in {cells:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_waiter_keeps_its_verdict_while_the_snapshot_is_the_same() {
        let cells: Arc<[Cell]> = Arc::from(vec![]);
        let mut polled = Polled::default();
        assert!(polled.verdict(Arc::clone(&cells), |_| true));
        assert!(polled.verdict(Arc::clone(&cells), |_| panic!("judged again")));
        assert!(!polled.verdict(Arc::from(vec![]), |_| false));
    }
}
