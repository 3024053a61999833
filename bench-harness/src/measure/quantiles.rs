//! Exact quantiles of values read twice, without keeping them.
//!
//! The first reading counts the values into buckets: one per value below 128, then 64 per
//! power of two (each spans 1/64 of its values or less), 3,776 counters in all. It finds, for
//! each quantile, the bucket holding the value of its rank (nearest rank, as
//! [`super::metrics::quantile_sorted`]) and that value's rank within the bucket. The second
//! reading counts the distinct values of those buckets only, and the rank within the bucket
//! names the value. What is kept is the counters and the distinct values of at most one
//! bucket per quantile: at most the bucket's width, and at most as many as the values that
//! fell in it.

use std::collections::BTreeMap;

/// Values below this have a bucket each.
const EXACT: u64 = 128;
/// Buckets per power of two above [`EXACT`].
const PER_OCTAVE: u64 = 64;
/// Buckets in all: 128 exact, then 64 for each of the 57 powers of two from 2^7 to 2^63.
const BUCKETS: usize = 3_776;

/// The bucket of `v`: monotonic in `v`, contiguous.
fn bucket(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    // `v` has `bits` significant bits; its top seven, `v >> shift`, are in [64, 128).
    let bits = 64 - u64::from(v.leading_zeros());
    let shift = bits - 7;
    (shift * PER_OCTAVE + (v >> shift)) as usize
}

/// The count, sum and exact nearest-rank quantiles `qs` of the values `each` visits; `each`
/// is called twice and must visit the same values both times. `None` for each quantile when
/// there are no values.
pub fn exact(each: impl Fn(&mut dyn FnMut(u64)), qs: &[f64]) -> Exact {
    let mut counts = vec![0u64; BUCKETS];
    let (mut count, mut sum) = (0u64, 0u64);
    each(&mut |v| {
        counts[bucket(v)] += 1;
        count += 1;
        sum += v;
    });
    if count == 0 {
        return Exact { count, sum, quantiles: vec![None; qs.len()] };
    }
    // Per quantile: its bucket, and its value's rank in it (from 1).
    let targets: Vec<(usize, u64)> = qs
        .iter()
        .map(|&q| {
            let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).clamp(1, count);
            let mut below = 0;
            for (b, &n) in counts.iter().enumerate() {
                if below + n >= rank {
                    return (b, rank - below);
                }
                below += n;
            }
            unreachable!("the ranks are within the count")
        })
        .collect();
    drop(counts);
    let mut distinct: BTreeMap<usize, BTreeMap<u64, u64>> =
        targets.iter().map(|&(b, _)| (b, BTreeMap::new())).collect();
    each(&mut |v| {
        if let Some(values) = distinct.get_mut(&bucket(v)) {
            *values.entry(v).or_default() += 1;
        }
    });
    let quantiles = targets
        .iter()
        .map(|&(b, rank)| {
            let mut seen = 0;
            distinct[&b].iter().find_map(|(&v, &n)| {
                seen += n;
                (seen >= rank).then_some(v)
            })
        })
        .collect();
    Exact { count, sum, quantiles }
}

/// What [`exact`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exact {
    /// How many values.
    pub count: u64,
    /// Their sum.
    pub sum: u64,
    /// Each quantile asked for, in the order asked.
    pub quantiles: Vec<Option<u64>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::metrics::quantile_sorted;

    #[test]
    fn buckets_are_monotonic_contiguous_and_fine() {
        let edges = [0, 1, 127, 128, 129, 255, 256, 1 << 20, (1 << 20) + 1, u64::MAX - 1, u64::MAX];
        for w in edges.windows(2) {
            assert!(bucket(w[0]) <= bucket(w[1]), "{w:?}");
        }
        assert_eq!(bucket(127) + 1, bucket(128));
        assert_eq!(bucket(255) + 1, bucket(256));
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        // A bucket spans at most 1/64 of its values.
        assert_eq!(bucket(1 << 20), bucket((1 << 20) + (1 << 14) - 1));
        assert_ne!(bucket(1 << 20), bucket((1 << 20) + (1 << 14)));
    }

    #[test]
    fn quantiles_are_those_of_sorting_every_value() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let qs = [0.0, 0.01, 0.5, 0.9, 0.99, 1.0];
        for round in 0..300 {
            // Few distinct values (ties in one bucket), wide ranges (many buckets), or both.
            let top = [4, 200, 5_000, 1 << 40][round % 4];
            let values: Vec<u64> =
                (0..rng.random_range(0..500)).map(|_| rng.random_range(0..top)).collect();
            let got = exact(|visit| values.iter().for_each(|&v| visit(v)), &qs);
            let mut sorted = values.clone();
            sorted.sort_unstable();
            let want: Vec<Option<u64>> = qs.iter().map(|&q| quantile_sorted(&sorted, q)).collect();
            assert_eq!(got.quantiles, want, "round {round}");
            assert_eq!((got.count, got.sum), (values.len() as u64, values.iter().sum()));
        }
    }
}
