//! Which lock each acquire asks for: the key distribution over the run's K locks
//! (`--key-dist`).
//!
//! | text | meaning |
//! |---|---|
//! | `fixed` | contender *i* asks for lock *i* mod K, always (the default) |
//! | `uniform` | each acquire draws its lock uniformly from the K locks |
//! | `zipf:S` | each acquire draws lock *r* − 1 with probability ∝ 1 / *r*^S (S > 0): rank 1, lock 0, is the hottest |
//!
//! With `fixed` and K ≥ N contenders every lock has one contender and nothing contends; the
//! drawn distributions put many contenders on a few hot locks while the rest see a request now
//! and then, as a service locking many ids does. Draws come from the contender's own RNG,
//! seeded from the run's seed and its index, so a simulated run stays reproducible from
//! `--seed`; `fixed` draws nothing.
//!
//! Zipf's law is sampled by inverting its CDF: [`ZipfTable`] precomputes the cumulative
//! weights of the K ranks once per run (8 bytes a rank: 800 kB at K = 100,000), and each draw
//! is one uniform number and a binary search, O(log K).

use rand::rngs::StdRng;
use rand::RngExt;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// How each acquire picks its lock among the run's K.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum KeyDist {
    /// Contender *i* asks for lock *i* mod K, always.
    #[default]
    Fixed,
    /// Each acquire draws its lock uniformly.
    Uniform,
    /// Each acquire draws lock *r* − 1 with probability ∝ 1 / *r*^`s`.
    Zipf {
        /// The exponent: above zero, finite (0.99 is the usual "skewed" workload).
        s: f64,
    },
}

impl KeyDist {
    /// True for the default, `fixed`.
    pub fn is_fixed(&self) -> bool {
        *self == KeyDist::Fixed
    }
}

impl fmt::Display for KeyDist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyDist::Fixed => f.write_str("fixed"),
            KeyDist::Uniform => f.write_str("uniform"),
            KeyDist::Zipf { s } => write!(f, "zipf:{s}"),
        }
    }
}

impl FromStr for KeyDist {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        let (kind, rest) = match s.split_once(':') {
            Some((k, r)) => (k.trim().to_ascii_lowercase(), Some(r.trim())),
            None => (s.to_ascii_lowercase(), None),
        };
        match (kind.as_str(), rest) {
            ("fixed", None) => Ok(KeyDist::Fixed),
            ("uniform", None) => Ok(KeyDist::Uniform),
            ("zipf", Some(exponent)) => {
                let s: f64 = exponent.parse().map_err(|_| {
                    format!("'{text}': the Zipf exponent '{exponent}' is not a number (e.g. zipf:0.99)")
                })?;
                if !s.is_finite() || s <= 0.0 {
                    return Err(format!(
                        "'{text}': the Zipf exponent must be above zero and finite (e.g. zipf:0.99); for no skew use uniform"
                    ));
                }
                Ok(KeyDist::Zipf { s })
            }
            ("zipf", None) => Err(format!("'{text}': give the exponent, e.g. zipf:0.99")),
            ("fixed" | "uniform", Some(_)) => {
                Err(format!("'{text}': {kind} takes no parameter"))
            }
            _ => Err(format!(
                "unknown key distribution '{text}' (use fixed, uniform or zipf:S with S > 0, e.g. zipf:0.99)"
            )),
        }
    }
}

crate::dist::serde_as_text!(KeyDist);

/// Zipf's law over `K` ranks as a cumulative table: rank *r* (from 1) has weight 1 / *r*^S.
#[derive(Debug, Clone, PartialEq)]
pub struct ZipfTable {
    /// `cdf[i]`: the probability of a rank ≤ i + 1; the last entry is exactly 1.
    cdf: Vec<f64>,
}

impl ZipfTable {
    /// The table of `ranks` ranks (at least one) with exponent `s`.
    pub fn new(ranks: usize, s: f64) -> ZipfTable {
        let ranks = ranks.max(1);
        let mut cdf = Vec::with_capacity(ranks);
        let mut sum = 0.0;
        for r in 1..=ranks {
            sum += (r as f64).powf(-s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        // Rounding may leave the last sum a hair below 1; a draw must always land.
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        ZipfTable { cdf }
    }

    /// How many ranks.
    pub fn ranks(&self) -> usize {
        self.cdf.len()
    }

    /// The probability of rank index `i` (0: the hottest).
    pub fn share(&self, i: usize) -> f64 {
        match i {
            0 => self.cdf[0],
            _ => self.cdf[i] - self.cdf[i - 1],
        }
    }

    /// The rank index (0: the hottest) whose cumulative interval holds `u`, drawn uniformly in
    /// [0, 1): the first rank whose cumulative probability exceeds `u`.
    pub fn rank_of(&self, u: f64) -> usize {
        self.cdf.partition_point(|&c| c <= u).min(self.cdf.len() - 1)
    }

    /// One draw from `rng`.
    pub fn sample(&self, rng: &mut StdRng) -> usize {
        self.rank_of(rng.random::<f64>())
    }
}

/// The run's locks and how an acquire picks one: built once per run, shared (cheaply cloned)
/// by its contenders.
#[derive(Debug, Clone)]
pub struct Keys {
    ids: Arc<[String]>,
    draw: Draw,
}

#[derive(Debug, Clone)]
enum Draw {
    Fixed,
    Uniform,
    Zipf(Arc<ZipfTable>),
}

impl Keys {
    /// `dist` over `locks` locks whose ids are `ids` (the locks a run may ask for: with
    /// `fixed`, only those contenders have).
    pub fn new(dist: KeyDist, locks: usize, ids: Vec<String>) -> Keys {
        let draw = match dist {
            KeyDist::Fixed => Draw::Fixed,
            KeyDist::Uniform => Draw::Uniform,
            KeyDist::Zipf { s } => Draw::Zipf(Arc::new(ZipfTable::new(locks, s))),
        };
        Keys { ids: ids.into(), draw }
    }

    /// True when each contender keeps one lock.
    pub fn is_fixed(&self) -> bool {
        matches!(self.draw, Draw::Fixed)
    }

    /// The lock of the next acquire of a contender whose own lock (under `fixed`) is `home`:
    /// `home`, or a draw from `rng`.
    pub fn next(&self, home: usize, rng: &mut StdRng) -> usize {
        match &self.draw {
            Draw::Fixed => home,
            Draw::Uniform => rng.random_range(0..self.ids.len().max(1)),
            Draw::Zipf(table) => table.sample(rng),
        }
    }

    /// The id of lock `index`.
    pub fn id(&self, index: usize) -> &str {
        &self.ids[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn key_dists_parse_print_and_refuse_bad_text() {
        for text in ["fixed", "uniform", "zipf:0.99", "zipf:1", "zipf:2.5"] {
            let d: KeyDist = text.parse().unwrap();
            assert_eq!(d.to_string(), text);
            let json = serde_json::to_string(&d).unwrap();
            assert_eq!(serde_json::from_str::<KeyDist>(&json).unwrap(), d);
        }
        assert_eq!("Zipf: 0.5".parse::<KeyDist>(), Ok(KeyDist::Zipf { s: 0.5 }));
        assert!(KeyDist::default().is_fixed());
        crate::dist::assert_refused::<KeyDist>(&[
            ("zipf:0", "above zero"),
            ("zipf:-1", "above zero"),
            ("zipf:inf", "above zero"),
            ("zipf:NaN", "above zero"),
            ("zipf:x", "not a number"),
            ("zipf", "exponent"),
            ("uniform:3", "no parameter"),
            ("pareto", "unknown key distribution"),
        ]);
    }

    /// Σ_{r=1..k} r^-s, the normaliser of Zipf's law.
    fn harmonic(k: usize, s: f64) -> f64 {
        (1..=k).map(|r| (r as f64).powf(-s)).sum()
    }

    #[test]
    fn the_zipf_table_holds_the_law() {
        let t = ZipfTable::new(1000, 0.99);
        assert_eq!(t.ranks(), 1000);
        let h = harmonic(1000, 0.99);
        for i in [0, 1, 9, 999] {
            let want = ((i + 1) as f64).powf(-0.99) / h;
            assert!((t.share(i) - want).abs() < 1e-12, "rank {}: {} vs {want}", i + 1, t.share(i));
        }
        assert!((1..1000).all(|i| t.share(i) <= t.share(i - 1)), "shares fall with the rank");
        assert_eq!(t.rank_of(0.0), 0);
        assert_eq!(t.rank_of(t.share(0)), 1, "a cumulative bound belongs to the next rank");
        assert_eq!(t.rank_of(0.999_999_999_9), 999);
        let one = ZipfTable::new(1, 3.0);
        assert_eq!((one.share(0), one.rank_of(0.5)), (1.0, 0));
    }

    #[test]
    fn zipf_draws_give_the_hottest_lock_its_theoretical_share() {
        let t = ZipfTable::new(1000, 0.99);
        let mut rng = StdRng::seed_from_u64(7);
        let n = 200_000;
        let mut counts = vec![0u64; 1000];
        for _ in 0..n {
            counts[t.sample(&mut rng)] += 1;
        }
        let want = 1.0 / harmonic(1000, 0.99);
        let got = counts[0] as f64 / n as f64;
        // Six standard deviations of a binomial share at this n.
        let sd = (want * (1.0 - want) / n as f64).sqrt();
        assert!((got - want).abs() < 6.0 * sd, "rank 1: {got} of draws, {want} expected");
        let second = counts[1] as f64 / n as f64;
        assert!((second - want * 2f64.powf(-0.99)).abs() < 6.0 * sd, "rank 2: {second}");
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
    }

    #[test]
    fn a_hundred_thousand_ranks_build_and_draw_in_range() {
        let t = ZipfTable::new(100_000, 1.2);
        let mut rng = StdRng::seed_from_u64(1);
        assert!((0..10_000).all(|_| t.sample(&mut rng) < 100_000));
        assert!(t.share(0) > t.share(99_999));
    }

    #[test]
    fn keys_draw_from_the_contenders_rng_and_fixed_draws_nothing() {
        let ids = |k: usize| (0..k).map(|i| format!("lock-{i}")).collect::<Vec<_>>();
        let fixed = Keys::new(KeyDist::Fixed, 8, ids(8));
        let mut rng = StdRng::seed_from_u64(3);
        let untouched = StdRng::seed_from_u64(3);
        assert!(fixed.is_fixed());
        assert!((0..100).all(|_| fixed.next(5, &mut rng) == 5));
        assert_eq!(rng, untouched, "fixed draws nothing from the RNG");
        assert_eq!(fixed.id(5), "lock-5");

        let uniform = Keys::new(KeyDist::Uniform, 8, ids(8));
        let picks: Vec<usize> = (0..4000).map(|_| uniform.next(5, &mut rng)).collect();
        for lock in 0..8 {
            let n = picks.iter().filter(|&&p| p == lock).count();
            assert!((400..600).contains(&n), "lock {lock}: {n} of 4000");
        }
        let zipf = Keys::new(KeyDist::Zipf { s: 0.99 }, 8, ids(8));
        let (mut a, mut b) = (StdRng::seed_from_u64(9), StdRng::seed_from_u64(9));
        let xs: Vec<usize> = (0..50).map(|_| zipf.next(0, &mut a)).collect();
        let ys: Vec<usize> = (0..50).map(|_| zipf.next(0, &mut b)).collect();
        assert_eq!(xs, ys, "the same seed draws the same locks");
        assert!(xs.iter().any(|&x| x != xs[0]));
    }
}
