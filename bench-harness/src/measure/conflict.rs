//! When holds of one lock conflict, for every primitive: the rule the checker applies to each
//! grant against the holds open when it began, and to the time during which the open holds
//! broke it.
//!
//! A set of holds is admissible when at most one holds alone and then nobody else, readers
//! share with readers only, and the permits held do not exceed the semaphore's size. A mutex's
//! holds are the case where every hold is alone.

use crate::primitive::Share;
use std::cmp::Reverse;
use std::collections::binary_heap::{BinaryHeap, PeekMut};

/// The holds open at one instant, as counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Open {
    alone: i64,
    readers: i64,
    permits: i64,
    /// The largest semaphore size among the open permit holds.
    of: i64,
}

impl Open {
    fn add(&mut self, share: Share, sign: i64) {
        match share {
            Share::Exclusive | Share::Write => self.alone += sign,
            Share::Read => self.readers += sign,
            Share::Permits { held, of } => {
                self.permits += sign * i64::from(held);
                self.of = self.of.max(i64::from(of));
            }
        }
    }

    fn others(self) -> i64 {
        self.readers + i64::from(self.permits > 0)
    }

    /// True when these holds together break the primitive's rule.
    fn broken(self) -> bool {
        self.alone >= 2
            || (self.alone >= 1 && self.others() >= 1)
            || (self.readers >= 1 && self.permits > 0)
            || self.permits > self.of
    }
}

/// True when a hold of `share` may begin while the holds of `open` are held: together they
/// keep the rule.
pub fn admits(share: Share, open: impl IntoIterator<Item = Share>) -> bool {
    let mut now = Open::default();
    for s in open.into_iter().chain([share]) {
        now.add(s, 1);
    }
    !now.broken()
}

/// The time during which `holds` (half-open `[granted, released)` with their shares, of one
/// lock, in order of their start: a lock's grants in grant order) broke the rule together.
///
/// A sweep over the holds' edges in time order: the starts come in order, and the ends of the
/// holds still open wait in a heap, so that what it keeps is the holds open at once, not the
/// lock's every edge. Edges at one instant may be taken in any order: the time up to the next
/// instant is judged on the holds open once all of them are taken.
pub fn broken_time_us(holds: impl IntoIterator<Item = (u64, u64, Share)>) -> u64 {
    let mut ends: BinaryHeap<Reverse<(u64, Shared)>> = BinaryHeap::new();
    let mut sweep = Sweep::default();
    for (a, b, share) in holds {
        debug_assert!(a >= sweep.since, "holds come in order of their start");
        if b <= a {
            continue;
        }
        while let Some(Reverse((end, s))) =
            ends.peek_mut().filter(|e| e.0 .0 <= a).map(PeekMut::pop)
        {
            sweep.take(end, s.0, -1);
        }
        sweep.take(a, share, 1);
        ends.push(Reverse((b, Shared(share))));
    }
    while let Some(Reverse((end, s))) = ends.pop() {
        sweep.take(end, s.0, -1);
    }
    sweep.total
}

/// The holds open as the sweep stands at `since`, and the broken time up to it.
#[derive(Default)]
struct Sweep {
    open: Open,
    since: u64,
    total: u64,
}

impl Sweep {
    /// Takes an edge at `t`: a hold of `share` starting (`sign` 1) or ending (-1).
    fn take(&mut self, t: u64, share: Share, sign: i64) {
        if self.open.broken() {
            self.total += t - self.since;
        }
        self.open.add(share, sign);
        self.since = t;
    }
}

/// A share in the heap of open holds, ordered by its fields (the order is only a tie-break
/// between holds ending at one instant, which may be taken in any order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shared(Share);

impl Shared {
    fn key(self) -> (u8, u32, u32) {
        match self.0 {
            Share::Exclusive => (0, 0, 0),
            Share::Read => (1, 0, 0),
            Share::Write => (2, 0, 0),
            Share::Permits { held, of } => (3, held, of),
        }
    }
}

impl Ord for Shared {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Shared {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Share::*;

    const P: fn(u32) -> Share = |held| Permits { held, of: 2 };

    #[test]
    fn a_hold_alone_admits_nobody() {
        assert!(admits(Exclusive, []));
        assert!(!admits(Exclusive, [Exclusive]));
        assert!(!admits(Write, [Read]));
        assert!(!admits(Read, [Write]));
        assert!(admits(Read, [Read, Read]));
    }

    #[test]
    fn permits_are_counted_against_the_size() {
        assert!(admits(P(1), [P(1)]));
        assert!(!admits(P(1), [P(1), P(1)]));
        assert!(!admits(P(2), [P(1)]));
        assert!(admits(P(2), []));
    }

    #[test]
    fn broken_time_is_the_time_the_rule_was_broken() {
        // Two readers over a writer's tail: broken while the writer and a reader overlap.
        assert_eq!(broken_time_us([(0, 10, Write), (5, 20, Read), (8, 30, Read)]), 5);
        // Readers alone, back to back writers: never.
        assert_eq!(broken_time_us([(0, 10, Read), (5, 20, Read), (20, 30, Write)]), 0);
        // Three permits of two from 6 to 9.
        assert_eq!(broken_time_us([(0, 10, P(1)), (3, 9, P(1)), (6, 12, P(1))]), 3);
        // The mutex's case: two holds alone.
        assert_eq!(broken_time_us([(0, 10, Exclusive), (4, 12, Exclusive)]), 6);
    }

    /// The broken time by brute force: each unit of time judged on the holds open in it (holds
    /// of no length are none).
    fn broken_by_units(holds: &[(u64, u64, Share)]) -> u64 {
        let end = holds.iter().map(|h| h.1).max().unwrap_or(0);
        let mut of = Open::default();
        (0..end)
            .filter(|&t| {
                let mut open = Open::default();
                for &(_, b, share) in holds.iter().filter(|h| h.0 <= t && h.1 > h.0) {
                    // A semaphore's size is the largest seen so far, open or not.
                    of.add(share, 0);
                    if t < b {
                        open.add(share, 1);
                    }
                }
                Open { of: of.of, ..open }.broken()
            })
            .count() as u64
    }

    #[test]
    fn the_sweep_agrees_with_judging_every_instant() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let shares = [Exclusive, Read, Write, P(1), P(2), Permits { held: 1, of: 3 }];
        for _ in 0..500 {
            let mut holds: Vec<(u64, u64, Share)> = (0..rng.random_range(0..8))
                .map(|_| {
                    let a = rng.random_range(0..20);
                    (a, a + rng.random_range(0..10), shares[rng.random_range(0..shares.len())])
                })
                .collect();
            holds.sort_by_key(|h| h.0);
            assert_eq!(broken_time_us(holds.iter().copied()), broken_by_units(&holds), "{holds:?}");
        }
    }
}
