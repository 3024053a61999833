//! One contender's acquisition latencies, kept as a sparse histogram.
//!
//! A run keeps a histogram per contender for the per-contender report. An HDR histogram with
//! three significant digits holds a count for every bucket up to its largest value, recorded
//! or not: 50-200 KB for latencies of a second to a minute, whatever the number of grants. At
//! a thousand contenders that was most of a run's memory, for contenders that each got a few
//! dozen grants. [`Latencies`] keeps only the buckets it recorded, keyed by the least value of
//! each, so it costs in proportion to the distinct buckets hit (at most one per grant), and
//! turns into an HDR histogram when a figure is asked of it: the same buckets, so the same
//! quantiles, mean, least and greatest value as a histogram that recorded every latency.
//!
//! The buckets are two sorted arrays, the least values as `u32` (every bucket up to
//! [`HISTOGRAM_MAX_US`] fits) and the counts beside them: 12 bytes a bucket, where a B-tree
//! map's entries and nodes took more than twice that. A contender of a long run keeps finding
//! buckets of its latencies' tail, so this is what grows with the run; a new bucket is rare
//! beside a recorded latency, and costs a shift of the arrays.

use super::metrics::{new_histogram, HISTOGRAM_MAX_US};
use hdrhistogram::Histogram;
use std::sync::OnceLock;

/// Latencies in microseconds, by HDR bucket (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Latencies {
    /// The least value of each bucket recorded, ascending.
    buckets: Vec<u32>,
    /// How many latencies fell in each of `buckets`.
    counts: Vec<u64>,
}

// Every bucket's least value fits the arrays' `u32`.
const _: () = assert!(HISTOGRAM_MAX_US <= u32::MAX as u64);

/// The bucket layout of [`new_histogram`], whose arithmetic [`Latencies`] borrows.
fn layout() -> &'static Histogram<u64> {
    static LAYOUT: OnceLock<Histogram<u64>> = OnceLock::new();
    LAYOUT.get_or_init(new_histogram)
}

impl Latencies {
    /// None recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency, saturating at [`HISTOGRAM_MAX_US`] as
    /// [`super::metrics::record_latency`] does.
    pub fn record(&mut self, latency_us: u64) {
        let bucket = layout().lowest_equivalent(latency_us.min(HISTOGRAM_MAX_US));
        let bucket = u32::try_from(bucket).expect("a bucket up to HISTOGRAM_MAX_US fits");
        match self.buckets.binary_search(&bucket) {
            Ok(i) => self.counts[i] += 1,
            Err(i) => {
                // Grown by a quarter, not doubled: the arrays are what a long run keeps.
                if self.buckets.len() == self.buckets.capacity() {
                    let more = self.buckets.len() / 4 + 8;
                    self.buckets.reserve_exact(more);
                    self.counts.reserve_exact(more);
                }
                self.buckets.insert(i, bucket);
                self.counts.insert(i, 1);
            }
        }
    }

    /// How many latencies it holds.
    pub fn len(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Adds every latency to `h`, bucket by bucket.
    pub fn add_to(&self, h: &mut Histogram<u64>) {
        for (&bucket, &count) in self.buckets.iter().zip(&self.counts) {
            // A growing histogram resizes for any value a latency histogram holds: this
            // cannot fail.
            let _ = h.record_n(u64::from(bucket), count);
        }
    }

    /// An HDR histogram of the latencies ([`new_histogram`]).
    pub fn histogram(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        self.add_to(&mut h);
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::metrics::{latency_cdf, latency_stats, record_latency};
    use rand::{RngExt, SeedableRng};

    #[test]
    fn latencies_read_as_a_histogram_that_recorded_each_one() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let mut direct: Histogram<u64> = new_histogram();
        let mut merged: Histogram<u64> = new_histogram();
        for contender in 0..8 {
            let mut own = Latencies::new();
            let mut own_direct: Histogram<u64> = new_histogram();
            for _ in 0..rng.random_range(0..2_000) {
                let latency = match rng.random_range(0..10) {
                    0 => rng.random_range(0..100),
                    1 => 2 * HISTOGRAM_MAX_US,
                    _ => rng.random_range(0..30_000_000u64 >> contender),
                };
                own.record(latency);
                record_latency(&mut own_direct, latency);
                record_latency(&mut direct, latency);
            }
            assert_eq!(own.len(), own_direct.len());
            assert_eq!(latency_stats(&own.histogram()), latency_stats(&own_direct));
            own.add_to(&mut merged);
        }
        assert!(!direct.is_empty());
        assert_eq!(latency_stats(&merged), latency_stats(&direct));
        assert_eq!(latency_cdf(&merged), latency_cdf(&direct));
        assert_eq!(
            (merged.min(), merged.max(), merged.len()),
            (direct.min(), direct.max(), direct.len())
        );
    }

    #[test]
    fn it_keeps_only_the_buckets_it_recorded() {
        let mut l = Latencies::new();
        assert!(l.is_empty() && l.histogram().is_empty());
        for us in [1_000, 1_000, 1_000_000, 60_000_000] {
            l.record(us);
        }
        assert_eq!((l.len(), l.buckets.len()), (4, 3));
        // A dense histogram up to a minute holds thousands of counts.
        assert!(l.histogram().distinct_values() > 10_000);
    }
}
