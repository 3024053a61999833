//! The grant log as the analysis reads it: in passes, each one over every grant, lock by lock,
//! each lock's grants in grant order ([`grant_order`]).
//!
//! A metric that reads the log this way keeps only what it carries from one grant to the next
//! (a running maximum, the holds still open, the requests that a later one may still overtake)
//! and needs no copy of the log or of a field per grant; one that needs a figure of the whole
//! log first (the longest wait, the rank of a quantile) reads it twice. So the metrics cost
//! what the log's source costs to read: a slice in memory, or a run's log sorted on disk
//! ([`super::grant_log::GrantLog`]).

use super::grant::Grant;

/// The order of a pass: by lock, then by grant time, ties by release, then by contender.
pub fn grant_order(g: &Grant) -> (u32, u64, u64, u32) {
    (g.lock, g.granted_us, g.released_us, g.contender)
}

/// A grant log that can be read in passes, lock by lock in [`grant_order`].
pub trait GrantPasses {
    /// One pass over every grant.
    fn pass(&self) -> Box<dyn Iterator<Item = Grant> + '_>;
    /// How many grants a pass yields.
    fn grant_count(&self) -> u64;
}

impl GrantPasses for [Grant] {
    /// A log already in [`grant_order`] (as a run's is, unless grants of one lock share an
    /// instant) is read where it is; any other is read from a sorted copy (stable: grants
    /// equal in that order keep theirs).
    fn pass(&self) -> Box<dyn Iterator<Item = Grant> + '_> {
        if self.is_sorted_by_key(grant_order) {
            return Box::new(self.iter().copied());
        }
        let mut sorted = self.to_vec();
        sorted.sort_by_key(grant_order);
        Box::new(sorted.into_iter())
    }

    fn grant_count(&self) -> u64 {
        self.len() as u64
    }
}

impl GrantPasses for Vec<Grant> {
    fn pass(&self) -> Box<dyn Iterator<Item = Grant> + '_> {
        self.as_slice().pass()
    }

    fn grant_count(&self) -> u64 {
        self.len() as u64
    }
}

impl<const N: usize> GrantPasses for [Grant; N] {
    fn pass(&self) -> Box<dyn Iterator<Item = Grant> + '_> {
        self.as_slice().pass()
    }

    fn grant_count(&self) -> u64 {
        N as u64
    }
}

/// A pass cut into instants: each lock's grants at one grant time, in the pass's order, with
/// the time of that lock's next grant (`None` after its last).
pub fn instants<I: Iterator<Item = Grant>>(pass: I) -> Instants<I> {
    Instants { pass: pass.peekable() }
}

/// The iterator of [`instants`].
#[derive(Clone)]
pub struct Instants<I: Iterator<Item = Grant>> {
    pass: std::iter::Peekable<I>,
}

impl<I: Iterator<Item = Grant>> Iterator for Instants<I> {
    type Item = (Vec<Grant>, Option<u64>);

    fn next(&mut self) -> Option<Self::Item> {
        let first = self.pass.next()?;
        let mut at = vec![first];
        let same = |g: &Grant| (g.lock, g.granted_us) == (first.lock, first.granted_us);
        while let Some(g) = self.pass.next_if(same) {
            at.push(g);
        }
        let next = self.pass.peek().filter(|g| g.lock == first.lock).map(|g| g.granted_us);
        Some((at, next))
    }
}

/// Each grant of a pass with the one before it on the same lock (`None` for a lock's first).
pub fn with_previous<'a>(
    grants: &'a (impl GrantPasses + ?Sized),
) -> impl Iterator<Item = (Option<Grant>, Grant)> + 'a {
    let mut previous: Option<Grant> = None;
    grants.pass().map(move |g| {
        let before = previous.filter(|p| p.lock == g.lock);
        previous = Some(g);
        (before, g)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::grant::test_grant as g;

    #[test]
    fn a_pass_is_lock_by_lock_in_grant_order_whatever_the_log_order() {
        let log = [g(1, 0, 0, 12, 30, 1), g(0, 1, 0, 10, 30, 2), g(0, 0, 0, 10, 20, 1)];
        let order: Vec<(u32, u32)> = log.pass().map(|g| (g.lock, g.contender)).collect();
        assert_eq!(order, [(0, 0), (0, 1), (1, 0)], "ties on the grant by release");
        let mut sorted = log.to_vec();
        sorted.sort_by_key(grant_order);
        assert!(sorted.pass().eq(log.pass()));
        assert_eq!(log.grant_count(), 3);
        let pairs: Vec<(Option<u32>, u32)> =
            with_previous(&log).map(|(p, g)| (p.map(|p| p.contender), g.contender)).collect();
        assert_eq!(pairs, [(None, 0), (Some(0), 1), (None, 0)], "a lock's first has none");
    }
}
