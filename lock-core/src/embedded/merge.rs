//! How a coordinator merges several replicas' answers to a read: per column, by the cell
//! reconciliation rules, before it drops dead cells and applies the slice's limit.

use super::row::{self, DeadCursor, LiveCell};
use super::Answer;
use super::RawAnswer;
use crate::store::{reconcile_weighed, Cell, Micros, Weighed};
use std::cmp::Ordering as CmpOrdering;
use std::iter::Peekable;
use std::sync::Arc;
use tokio::time::Instant;

/// Merges replicas' raw answers per column and applies the limit to the live cells. `None`
/// when the answers cannot tell the result: a replica stopped at its limit, and up to that
/// point too few merged cells are alive (another replica knew of newer deaths).
///
/// Only a column live on some replica can be live in the result, so the merge walks the
/// replicas' live cells and looks each one up in the other replicas' answers: their live
/// cells, or their dead cells as they were at their read instants. Every read of a row that
/// several replicas answer comes through here (the bakery's waiters read 64-cell rows 50
/// times a simulated second each), so it borrows what it compares and copies only the cells
/// it returns.
pub(super) fn merge(answers: &[Answer], limit: Option<usize>) -> Option<Vec<Cell>> {
    let mut out = Vec::new();
    merge_into(answers, limit, &mut out).then_some(out)
}

/// [`merge`] into `out`, reusing its cells; false when the answers cannot tell (`out` then
/// holds no meaningful cells).
pub(super) fn merge_into(answers: &[Answer], limit: Option<usize>, out: &mut Vec<Cell>) -> bool {
    let raws: Vec<&RawAnswer> = answers
        .iter()
        .filter_map(|a| match a {
            Answer::Raw(raw) => Some(raw),
            _ => None,
        })
        .collect();
    // Up to the first column at which a replica stopped, every replica's cells are known.
    let bound: Option<&str> =
        raws.iter().filter(|r| r.truncated).filter_map(|r| r.live.last()).min();
    let cap = limit.unwrap_or(usize::MAX);
    let mut lists: Vec<_> = raws.iter().map(|r| r.live.iter().peekable()).collect();
    let mut cursors = vec![DeadCursor::default(); raws.len()];
    let mut filled = Filler::new(out);
    // A k-way merge of the sorted live lists, k being the few replicas read.
    while filled.len() < cap {
        if let Some((column, cell)) = shared_head(&mut lists) {
            if bound.is_some_and(|b| &**column > b) {
                break;
            }
            filled.push(column, &cell.value, cell.timestamp);
            continue;
        }
        let Some(column) = least_next(&mut lists) else { break };
        if bound.is_some_and(|b| &**column > b) {
            break;
        }
        if let Some(best) = winner(column, &mut lists, &raws, &mut cursors) {
            filled.push(column, best.value, best.timestamp);
        }
    }
    let conclusive = filled.len() >= cap || bound.is_none();
    filled.finish();
    conclusive
}

/// Writes an answer's cells over the cells already in a buffer, in order: a column or a
/// value copied into a `String` or `Vec` that held one before reuses its allocation, so a
/// waiter polling a row with a buffer of its own allocates nothing once it has grown.
pub(super) struct Filler<'a> {
    pub(super) out: &'a mut Vec<Cell>,
    pub(super) len: usize,
}

impl<'a> Filler<'a> {
    pub(super) fn new(out: &'a mut Vec<Cell>) -> Self {
        Filler { out, len: 0 }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push(&mut self, column: &str, value: &[u8], timestamp: Micros) {
        match self.out.get_mut(self.len) {
            Some(cell) => {
                cell.column.clear();
                cell.column.push_str(column);
                cell.value.clear();
                cell.value.extend_from_slice(value);
                cell.timestamp = timestamp;
            }
            None => self.out.push(Cell {
                column: String::from(column),
                value: value.to_vec(),
                timestamp,
            }),
        }
        self.len += 1;
    }

    /// Drops the cells past the answer's end.
    pub(super) fn finish(self) {
        self.out.truncate(self.len);
    }
}

/// The replicas' next live cell when every replica's is the same write, taken off every
/// list: the common case, since replicas that applied the same writes hold the same
/// allocations (one per written cell). Their expiries may differ (each replica counts a TTL
/// from its own apply instant), but the answer holds no expiry: whichever of them
/// reconciliation picks, it answers the same column, value and timestamp, which is what
/// [`least_next`] and [`winner`] would find, without weighing the versions.
fn shared_head<'a, L>(lists: &mut [Peekable<L>]) -> Option<(&'a Arc<str>, &'a LiveCell)>
where
    L: Iterator<Item = (&'a Arc<str>, &'a LiveCell)>,
{
    let (first, rest) = lists.split_first_mut()?;
    let &(column, cell) = first.peek()?;
    let same = |l: &mut Peekable<L>| {
        l.peek().is_some_and(|&(k, c)| {
            Arc::ptr_eq(k, column)
                && Arc::ptr_eq(&c.value, &cell.value)
                && c.timestamp == cell.timestamp
        })
    };
    if !rest.iter_mut().all(same) {
        return None;
    }
    for list in lists.iter_mut() {
        list.next();
    }
    Some((column, cell))
}

/// The least column among the replicas' next live cells; `None` when every list is done.
fn least_next<'a, L>(lists: &mut [Peekable<L>]) -> Option<&'a Arc<str>>
where
    L: Iterator<Item = (&'a Arc<str>, &'a LiveCell)>,
{
    let heads = lists.iter_mut().filter_map(|l| l.peek().map(|&(k, _)| k));
    heads.reduce(|least, k| if !Arc::ptr_eq(k, least) && k < least { k } else { least })
}

/// The reconciled version of `column` over the replicas' answers, when it is live; takes the
/// column off the live lists. Columns come in increasing order, so each replica's dead cells
/// are searched on from where its `cursors` entry says the last search ended.
pub(super) fn winner<'a, L>(
    column: &Arc<str>,
    lists: &mut [Peekable<L>],
    raws: &[&RawAnswer],
    cursors: &mut [DeadCursor],
) -> Option<Weighed<'a, Instant>>
where
    L: Iterator<Item = (&'a Arc<str>, &'a LiveCell)>,
{
    let mut best: Option<Weighed<'a, Instant>> = None;
    for ((list, raw), cursor) in lists.iter_mut().zip(raws).zip(cursors) {
        let version = match list.next_if(|&(k, _)| Arc::ptr_eq(k, column) || k == column) {
            Some((_, c)) => row::weigh_live(c),
            None => match raw.dead.get_after(cursor, column) {
                Some(d) => Weighed::dead(d.timestamp),
                None => continue,
            },
        };
        best = match best {
            Some(cur) if reconcile_weighed(&version, &cur) != CmpOrdering::Greater => Some(cur),
            _ => Some(version),
        };
    }
    best.filter(|b| !b.dead)
}
