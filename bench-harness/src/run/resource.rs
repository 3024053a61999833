//! The fenced resource: the downstream storage of Kleppmann's argument ("How to do
//! distributed locking", 2016). Every critical section writes to it twice, at the grant and
//! just before release, carrying its guard's fencing token; per lock, it rejects a write whose
//! token is below the highest it has accepted. The decision is made when the write arrives and
//! logged as it was made ([`ResourceWrite`], `resource.csv`); nothing recomputes it later.
//!
//! A holder whose lease ran out while it was paused still believes it holds the lock, and
//! writes when it resumes; by then a newer holder (with a higher token) has written, so the
//! resource rejects the stale write. Without fencing the write would land: the safety figures
//! count both.

use crate::measure::log::ResourceWrite;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The in-process fenced resource every contender of a run writes to.
#[derive(Debug, Default)]
pub struct FencedResource {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    highest: BTreeMap<u32, u64>,
    log: Vec<ResourceWrite>,
}

impl FencedResource {
    /// An empty resource.
    pub fn new() -> Self {
        Self::default()
    }

    /// A write by `contender` under lock `lock` with `token`, at `at_us` on the grant log's
    /// clock: accepted unless a higher token was accepted before. Returns whether it was.
    pub fn write(&self, lock: u32, contender: u32, token: u64, at_us: u64) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let highest = s.highest.entry(lock).or_insert(0);
        let accepted = token >= *highest;
        if accepted {
            *highest = token;
        }
        s.log.push(ResourceWrite { lock, contender, token, at_us, accepted });
        accepted
    }

    /// Every write so far, in the order decided.
    pub fn take_log(&self) -> Vec<ResourceWrite> {
        std::mem::take(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_below_the_highest_accepted_is_rejected_per_lock() {
        let r = FencedResource::new();
        assert!(r.write(0, 1, 5, 10));
        assert!(r.write(0, 1, 5, 20), "the same holder's second write");
        assert!(r.write(0, 2, 6, 30));
        assert!(!r.write(0, 1, 5, 40), "the stale holder");
        assert!(r.write(1, 1, 1, 50), "another lock has its own highest token");
        let log = r.take_log();
        assert_eq!(log.len(), 5);
        assert!(!log[3].accepted && log[3].at_us == 40);
    }
}
