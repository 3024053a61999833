//! When holds of one lock conflict, for every primitive: the rule the checker applies to each
//! grant against the holds open when it began, and to the time during which the open holds
//! broke it.
//!
//! A set of holds is admissible when at most one holds alone and then nobody else, readers
//! share with readers only, and the permits held do not exceed the semaphore's size. A mutex's
//! holds are the case where every hold is alone.

use crate::primitive::Share;

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
/// lock) broke the rule together.
pub fn broken_time_us(holds: &[(u64, u64, Share)]) -> u64 {
    let mut edges: Vec<(u64, i64, Share)> = Vec::with_capacity(holds.len() * 2);
    for &(a, b, share) in holds {
        if b > a {
            edges.push((a, 1, share));
            edges.push((b, -1, share));
        }
    }
    // Ends before starts at one instant: back-to-back holds do not overlap.
    edges.sort_by_key(|&(t, d, _)| (t, d));
    let (mut open, mut since, mut total) = (Open::default(), 0u64, 0u64);
    for (t, d, share) in edges {
        if open.broken() {
            total += t - since;
        }
        open.add(share, d);
        since = t;
    }
    total
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
        assert_eq!(broken_time_us(&[(0, 10, Write), (5, 20, Read), (8, 30, Read)]), 5);
        // Readers alone, back to back writers: never.
        assert_eq!(broken_time_us(&[(0, 10, Read), (5, 20, Read), (20, 30, Write)]), 0);
        // Three permits of two from 6 to 9.
        assert_eq!(broken_time_us(&[(0, 10, P(1)), (3, 9, P(1)), (6, 12, P(1))]), 3);
        // The mutex's case: two holds alone.
        assert_eq!(broken_time_us(&[(0, 10, Exclusive), (4, 12, Exclusive)]), 6);
    }
}
