//! The raw record of one algorithm's run, as the contenders leave it: the grant log, each
//! contender's latencies and failures, and the store's request counters. The metrics
//! ([`super::metrics`]) and the summary ([`super::summary`]) are computed from it alone.

use super::grant_log::GrantLog;
use super::latencies::Latencies;
use super::metrics::{new_histogram, Grant};
use super::spool::{self, Record, Spooled};
use crate::primitive::Share;
use hdrhistogram::Histogram;
use lock_core::embedded::StoreCounters;
use lock_core::LockError;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Failures seen by contenders (none are expected in a healthy run).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorCounts {
    /// `lock` calls that failed for another reason than the end of the run.
    pub lock_errors: u64,
    /// `release` calls that failed.
    pub release_errors: u64,
    /// Holds whose lease was lost before the holder let go.
    pub leases_lost_while_holding: u64,
    /// The first error message, for the report.
    pub first_error: Option<String>,
    /// Every failure by kind (`timeout`, `lease-lost`, `store`, `backend`, `invalid`,
    /// `config`), lock and release errors together.
    #[serde(default)]
    pub by_kind: std::collections::BTreeMap<String, u64>,
}

impl ErrorCounts {
    /// Keeps the first error's message.
    pub fn note(&mut self, e: &LockError) {
        self.first_error.get_or_insert_with(|| e.to_string());
        let kind = match e {
            LockError::InvalidId { .. } => "invalid",
            LockError::Timeout { .. } => "timeout",
            LockError::LeaseLost { .. } => "lease-lost",
            LockError::Store { .. } => "store",
            LockError::Backend { .. } => "backend",
            LockError::Config(_) => "config",
            LockError::Usage(_) => "usage",
        };
        *self.by_kind.entry(kind.to_string()).or_default() += 1;
    }

    /// Adds `other`'s counts (keeping the first message).
    pub fn add(&mut self, other: &ErrorCounts) {
        self.lock_errors += other.lock_errors;
        self.release_errors += other.release_errors;
        self.leases_lost_while_holding += other.leases_lost_while_holding;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
        for (kind, n) in &other.by_kind {
            *self.by_kind.entry(kind.clone()).or_default() += n;
        }
    }

    /// Every failure: lock errors, release errors and leases lost while holding.
    pub fn total(&self) -> u64 {
        self.lock_errors + self.release_errors + self.leases_lost_while_holding
    }

    /// True when nothing failed.
    pub fn is_clean(&self) -> bool {
        self.lock_errors == 0 && self.release_errors == 0 && self.leases_lost_while_holding == 0
    }
}

/// The grant log as a run writes it, on disk: one record a hold, in the order the holds ended
/// ([`super::spool`]). The run sorts it on disk into [`RunOutcome::grants`].
pub type GrantSpool = Spooled<Grant>;

impl Record for Grant {
    const SIZE: usize = 58;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend(self.lock.to_le_bytes());
        out.extend(self.contender.to_le_bytes());
        for word in [self.requested_us, self.granted_us, self.released_us, self.token] {
            out.extend(word.to_le_bytes());
        }
        out.extend(self.queued_us.unwrap_or(0).to_le_bytes());
        out.push(
            u8::from(self.lease_lost)
                | u8::from(self.crashed) << 1
                | u8::from(self.queued_us.is_some()) << 2,
        );
        let (kind, held, of) = match self.share {
            Share::Exclusive => (0u8, 0u32, 0u32),
            Share::Read => (1, 0, 0),
            Share::Write => (2, 0, 0),
            Share::Permits { held, of } => (3, held, of),
        };
        out.push(kind);
        out.extend(held.to_le_bytes());
        out.extend(of.to_le_bytes());
    }

    fn get(b: &[u8]) -> Self {
        let (word, half) = (|at| spool::u64_at(b, at), |at| spool::u32_at(b, at));
        let flags = b[48];
        Grant {
            lock: half(0),
            contender: half(4),
            requested_us: word(8),
            granted_us: word(16),
            released_us: word(24),
            token: word(32),
            queued_us: (flags & 4 != 0).then(|| word(40)),
            lease_lost: flags & 1 != 0,
            crashed: flags & 2 != 0,
            share: match b[49] {
                0 => Share::Exclusive,
                1 => Share::Read,
                2 => Share::Write,
                _ => Share::Permits { held: half(50), of: half(54) },
            },
        }
    }
}

/// What one contender did.
#[derive(Debug, Clone)]
pub struct ContenderOutcome {
    /// Contender index.
    pub index: u32,
    /// The lock it asked for; `None` when each acquire drew its lock
    /// ([`crate::keys::KeyDist`]).
    pub lock: Option<u32>,
    /// Its clock skew.
    pub skew_us: i64,
    /// Its acquisition latencies, in microseconds.
    pub latencies: Latencies,
    /// When its last request began, if the run ended before it was granted.
    pub unfinished_since_us: Option<u64>,
    /// Its failures.
    pub errors: ErrorCounts,
}

/// Everything one algorithm's run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The algorithm.
    pub algorithm: &'static str,
    /// The grant log, sorted, on disk.
    pub grants: GrantLog,
    /// Per contender, in index order.
    pub contenders: Vec<ContenderOutcome>,
    /// The store's request counters at the end of the run's window (before the drain), when
    /// the backend counts.
    pub counters: Option<StoreCounters>,
    /// The sessions (leases, server sessions) the contenders' clients had opened by the end of
    /// the window, setup included, when the engine counts them.
    pub sessions_opened: Option<u64>,
    /// The counters read during the window when the run asked for samples
    /// ([`crate::config::RunConfig::sample_every`]), in time order.
    pub samples: Vec<CounterSample>,
    /// The run's window on its clock, in microseconds.
    pub duration_us: u64,
    /// When the last contender finished (the drain included), in microseconds.
    pub finished_us: u64,
    /// How long the run took in wall time (not part of any result file: it varies).
    pub wall_time: Duration,
    /// Every write the fenced resource saw, in the order it decided them, on disk.
    pub resource: ResourceLog,
    /// Every fault injected, in start order.
    pub faults: Vec<FaultWindow>,
}

/// One write to the fenced resource (a line of `resource.csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceWrite {
    /// Lock index.
    pub lock: u32,
    /// The writing contender.
    pub contender: u32,
    /// The fencing token the write carried.
    pub token: u64,
    /// When the resource decided, in microseconds on the grant log's clock.
    pub at_us: u64,
    /// Whether the resource accepted it (its token was not below the highest accepted).
    pub accepted: bool,
}

/// The fenced resource's log, kept on disk: two writes a hold, as many as the grant log's
/// grants twice over, and read in order only ([`super::spool`]).
pub type ResourceLog = Spooled<ResourceWrite>;

impl Record for ResourceWrite {
    const SIZE: usize = 25;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend(self.lock.to_le_bytes());
        out.extend(self.contender.to_le_bytes());
        out.extend(self.token.to_le_bytes());
        out.extend(self.at_us.to_le_bytes());
        out.push(u8::from(self.accepted));
    }

    fn get(b: &[u8]) -> Self {
        let (word, half) = (|at| spool::u64_at(b, at), |at| spool::u32_at(b, at));
        ResourceWrite {
            lock: half(0),
            contender: half(4),
            token: word(8),
            at_us: word(16),
            accepted: b[24] != 0,
        }
    }
}

/// One injected fault (a line of `faults.csv`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultWindow {
    /// The kind's name (`pause`, `crash`, ...).
    pub kind: String,
    /// What it hit: an owner id (`c0003`), a replica (`replica-1`) or `server`.
    pub target: String,
    /// When it began, in microseconds on the grant log's clock.
    pub start_us: u64,
    /// When it was healed.
    pub end_us: u64,
}

impl RunOutcome {
    /// All contenders' errors added up.
    pub fn errors(&self) -> ErrorCounts {
        let mut sum = ErrorCounts::default();
        for c in &self.contenders {
            sum.add(&c.errors);
        }
        sum
    }

    /// All contenders' latencies in one histogram.
    pub fn histogram(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        for c in &self.contenders {
            c.latencies.add_to(&mut h);
        }
        h
    }
}

/// The store's counters at one moment of a run.
#[derive(Debug, Clone)]
pub struct CounterSample {
    /// When, in microseconds on the run's clock.
    pub at_us: u64,
    /// The counters since the run's start.
    pub counters: StoreCounters,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_comes_back_from_its_bytes() {
        let plain = Grant {
            lock: 3,
            contender: 9,
            requested_us: 1,
            granted_us: 2,
            released_us: 3,
            token: 4,
            ..Grant::default()
        };
        let grants = [
            plain,
            Grant { lease_lost: true, queued_us: Some(0), share: Share::Read, ..plain },
            Grant { crashed: true, share: Share::Write, ..plain },
            Grant {
                lock: u32::MAX,
                contender: u32::MAX,
                requested_us: u64::MAX,
                granted_us: u64::MAX - 1,
                released_us: u64::MAX - 2,
                token: u64::MAX - 3,
                lease_lost: true,
                crashed: true,
                queued_us: Some(u64::MAX - 4),
                share: Share::Permits { held: 7, of: u32::MAX },
            },
        ];
        for g in grants {
            let mut bytes = Vec::new();
            g.put(&mut bytes);
            assert_eq!(bytes.len(), Grant::SIZE);
            assert_eq!(Grant::get(&bytes), g);
        }
    }

    #[test]
    fn a_resource_write_comes_back_from_its_bytes() {
        for w in [
            ResourceWrite { lock: 0, contender: 0, token: 0, at_us: 0, accepted: false },
            ResourceWrite {
                lock: u32::MAX,
                contender: 7,
                token: u64::MAX - 1,
                at_us: 3_600_000_001,
                accepted: true,
            },
        ] {
            let mut bytes = Vec::new();
            w.put(&mut bytes);
            assert_eq!(bytes.len(), ResourceWrite::SIZE);
            assert_eq!(ResourceWrite::get(&bytes), w);
        }
    }
}
