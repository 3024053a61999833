//! A run's grant log, sorted, on disk: what the analysis reads in passes and `grants.csv` is
//! written from, in memory no larger for a simulated hour than for a minute.
//!
//! The run spools its grants in the order the holds ended ([`super::log::GrantSpool`]); an
//! external sort ([`super::spool::sorted`]) puts them in [`log_order`] in a file of their
//! own. A pass ([`GrantPasses`]) reads that file as it is. [`GrantLog::iter`] gives the order
//! of `grants.csv` instead ([`csv_order`]): the two differ only among one lock's grants at
//! one instant, which it sorts again as it reads them, a handful at a time.

use super::grant::Grant;
use super::passes::{instants, GrantPasses};
use super::spool::{self, Spooled};

/// The order a [`GrantLog`] keeps: a pass's ([`super::passes::grant_order`]: lock, grant
/// time, release, contender), ties by request time, then token.
pub fn log_order(g: &Grant) -> (u32, u64, u64, u32, u64, u64) {
    (g.lock, g.granted_us, g.released_us, g.contender, g.requested_us, g.token)
}

/// The order of `grants.csv`: lock, grant time, contender, request time, release, token.
/// One contender's grants at one instant follow in the order it made them (each request
/// comes after its previous release).
pub fn csv_order(g: &Grant) -> (u32, u64, u32, u64, u64, u64) {
    (g.lock, g.granted_us, g.contender, g.requested_us, g.released_us, g.token)
}

/// A run's grant log in [`log_order`], on disk ([`super::spool`]).
#[derive(Debug, Clone, Default)]
pub struct GrantLog {
    sorted: Spooled<Grant>,
}

impl GrantLog {
    /// `grants`, sorted, on disk; an error when the temporary files cannot be written.
    pub fn sort(grants: impl IntoIterator<Item = Grant>) -> std::io::Result<GrantLog> {
        Ok(GrantLog { sorted: spool::sorted(grants, log_order)? })
    }

    /// How many grants it holds.
    pub fn len(&self) -> u64 {
        self.sorted.len()
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Every grant in [`csv_order`].
    ///
    /// # Panics
    ///
    /// As [`Spooled::iter`], when the temporary file cannot be read back.
    pub fn iter(&self) -> impl Iterator<Item = Grant> + Clone + '_ {
        instants(self.sorted.iter()).flat_map(|(mut at, _)| {
            at.sort_by_key(csv_order);
            at
        })
    }
}

impl GrantPasses for GrantLog {
    fn pass(&self) -> Box<dyn Iterator<Item = Grant> + '_> {
        Box::new(self.sorted.iter())
    }

    fn grant_count(&self) -> u64 {
        self.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::grant::test_grant as g;

    #[test]
    fn passes_read_grant_order_and_iter_reads_csv_order() {
        // Lock 1 first in the input; at instant 10 of lock 0, three contenders and one
        // contender twice (a zero-length hold, then its next).
        let grants = vec![
            g(1, 0, 0, 5, 9, 1),
            g(0, 2, 1, 10, 30, 4),
            g(0, 1, 2, 10, 20, 3),
            g(0, 0, 3, 10, 10, 1),
            g(0, 0, 10, 10, 15, 2),
            g(0, 1, 0, 1, 10, 0),
        ];
        let log = GrantLog::sort(grants.clone()).unwrap();
        assert_eq!(log.len(), 6);
        let mut by_csv = grants.clone();
        by_csv.sort_by_key(csv_order);
        assert_eq!(log.iter().collect::<Vec<_>>(), by_csv);
        // A pass reads what the slice's pass reads.
        assert_eq!(log.pass().collect::<Vec<_>>(), by_csv.pass().collect::<Vec<_>>());
        assert_eq!(log.pass().collect::<Vec<_>>(), grants.pass().collect::<Vec<_>>());
        assert!(GrantLog::default().iter().next().is_none());
        assert_eq!(GrantLog::sort(Vec::new()).unwrap().grant_count(), 0);
    }
}
