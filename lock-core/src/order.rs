//! Lamport's **first come, first served**, judged over the grants of one lock: the rule the
//! conformance suite checks (`conformance::check_first_come_first_served`) and the harness
//! counts ("overtaken in line"), written once so the two cannot drift apart.
//!
//! Lamport defined it for the bakery: a request whose place in line was fixed (its doorway
//! passed) before another request *began* must be served first. Requests on their way at the
//! same time have no order a lock could keep, since the network may deliver them either way
//! round, so they are not judged against each other. A lock tells when a request's place was
//! fixed through [`crate::lock::LockGuard::queued_at`]; a caller judging a request without
//! one may pass its start instead (the stricter "by request time"), or leave it out.

/// The requests of one lock that were overtaken in line.
///
/// `asks` are that lock's requests **in the order they were granted**, each as (when it
/// began, when its place in line was fixed); a request whose place is `None` is not judged,
/// though its start still counts against the requests granted after it. Any ordered stamp
/// will do: `Instant`s, microseconds.
///
/// Returns, for each overtaken request, its index in `asks` and the index of one request
/// granted before it that began after its place was fixed (the one that began last).
pub fn overtaken_in_line<T: Ord + Copy>(
    asks: impl IntoIterator<Item = (T, Option<T>)>,
) -> Vec<(usize, usize)> {
    let mut judge = LineJudge::default();
    let judged = asks.into_iter().map(|(requested, place)| judge.next(requested, place));
    judged.enumerate().filter_map(|(i, by)| Some((i, by?))).collect()
}

/// [`overtaken_in_line`] one request at a time, for a caller that reads a lock's grants as
/// they come and keeps none of them: it remembers only the request granted so far that began
/// last.
#[derive(Debug, Clone)]
pub struct LineJudge<T> {
    /// The request granted so far that began last: its index and its start.
    latest: Option<(usize, T)>,
    /// The index the next request gets.
    next: usize,
}

impl<T> Default for LineJudge<T> {
    fn default() -> Self {
        LineJudge { latest: None, next: 0 }
    }
}

impl<T: Ord + Copy> LineJudge<T> {
    /// Judges the next request granted (its start, and when its place in line was fixed):
    /// the index of a request granted before it that began after its place was fixed (the
    /// one that began last), or `None`.
    pub fn next(&mut self, requested: T, place: Option<T>) -> Option<usize> {
        let i = self.next;
        self.next += 1;
        let by = match (place, self.latest) {
            (Some(p), Some((j, began))) if began > p => Some(j),
            _ => None,
        };
        if self.latest.is_none_or(|(_, began)| requested > began) {
            self.latest = Some((i, requested));
        }
        by
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_that_began_after_a_place_was_fixed_and_was_served_first_overtakes_it() {
        // In grant order: (began, placed). 1 began at 9, after 2's place was fixed at 8.
        let asks = [(0, Some(1)), (9, Some(10)), (5, Some(8))];
        assert_eq!(overtaken_in_line(asks), vec![(2, 1)]);
    }

    #[test]
    fn requests_on_their_way_at_once_are_not_judged_against_each_other() {
        // 2 began at 6 and 1 at 5, but 2's ask reached the lock first (placed at 7 before 8).
        let asks = [(0, Some(1)), (6, Some(7)), (5, Some(8))];
        assert!(overtaken_in_line(asks).is_empty());
    }

    #[test]
    fn a_request_without_a_place_is_not_judged_but_counts_against_later_grants() {
        assert!(overtaken_in_line([(0, Some(1)), (10, None), (5, None)]).is_empty());
        assert_eq!(overtaken_in_line([(10, None), (5, Some(6))]), vec![(1, 0)]);
        // Judged by request time: its start as its place.
        assert_eq!(overtaken_in_line([(6u64, Some(6)), (5, Some(5))]), vec![(1, 0)]);
        assert!(overtaken_in_line::<u64>([]).is_empty());
    }
}
