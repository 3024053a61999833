//! What a run of another primitive than the mutex measures besides the mutex's figures, as
//! pure functions over the grant log:
//!
//! - **concurrency**: how many hold at once, against the limit: the mean number of holders
//!   (permits, for a semaphore) over the time somebody of that kind held, and the most at once;
//!   for a reader-writer lock over the reads alone (how much sharing readers really get);
//! - **latency by kind**: reads and writes apart (a writer's wait is what a reader-writer lock
//!   trades against its readers'), with the longest writer wait;
//! - **failover**: after each crash of a holder (`--faults crash/who=holder`; in an election,
//!   the leader), the time until the next grant of its lock: when the next leader knows it
//!   leads. The crashed holder's lease must run out first, so this is at least the TTL.

use super::metrics::{
    latency_stats, new_histogram, record_latency, round4, Grant, GrantPasses, LatencyStats,
};
use crate::primitive::{Primitive, Share};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The figures of one run of a primitive other than the mutex.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareFigures {
    /// What the contenders asked for.
    pub primitive: Primitive,
    /// Mean holders at once while somebody held (a semaphore: permits held; a reader-writer
    /// lock: readers, over the time somebody read).
    pub mean_holders: f64,
    /// The most holders (permits, readers) at once.
    pub max_holders: u64,
    /// The most the primitive allows at once: a semaphore's size, 1 for an election, none
    /// for readers.
    pub limit: Option<u64>,
    /// The reads' acquisition latency (reader-writer lock only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<LatencyStats>,
    /// The writes' (every grant's, for a semaphore and an election).
    pub writes: LatencyStats,
    /// Crashes of a holder followed by a grant of its lock.
    pub failovers: u64,
    /// Median time from a holder's crash to the next grant of its lock, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_p50_ms: Option<f64>,
    /// The longest such time, in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover_max_ms: Option<f64>,
}

/// The figures of `grants` for `primitive`; `None` for the mutex. Each figure is one pass over
/// the log, keeping the holds still open and the crashes not yet followed by a grant.
pub fn figures(primitive: Primitive, grants: &(impl GrantPasses + ?Sized)) -> Option<ShareFigures> {
    if primitive.is_mutex() {
        return None;
    }
    let counted = |g: &Grant| match (primitive, g.share) {
        (Primitive::Rw { .. }, s) => s == Share::Read,
        _ => true,
    };
    let (mean, max) = concurrency(grants, counted);
    let latency = |keep: &dyn Fn(&Grant) -> bool| {
        let mut h = new_histogram();
        for g in grants.pass().filter(|g| keep(g)) {
            record_latency(&mut h, g.latency_us());
        }
        latency_stats(&h)
    };
    let is_rw = matches!(primitive, Primitive::Rw { .. });
    let failovers = failover_us(grants);
    let ms = |us: u64| us as f64 / 1000.0;
    Some(ShareFigures {
        primitive,
        mean_holders: round4(mean),
        max_holders: max,
        limit: match primitive {
            Primitive::Semaphore { limit, .. } => Some(u64::from(limit)),
            Primitive::Election => Some(1),
            _ => None,
        },
        reads: is_rw.then(|| latency(&|g| g.share == Share::Read)),
        writes: latency(&|g| g.share != Share::Read),
        failovers: failovers.len() as u64,
        failover_p50_ms: (!failovers.is_empty()).then(|| ms(failovers[failovers.len() / 2])),
        failover_max_ms: failovers.last().map(|&us| ms(us)),
    })
}

/// Over the holds `counted` keeps, weighted by the permits each holds (1 for others): the mean
/// of the weight held while any was held, and its most, over every lock. A sweep over each
/// lock's grants as they come, with the open holds' ends in a heap; ends before starts at one
/// instant: back-to-back holds are not at once.
fn concurrency(
    grants: &(impl GrantPasses + ?Sized),
    counted: impl Fn(&Grant) -> bool,
) -> (f64, u64) {
    let (mut weighted_us, mut held_us, mut max) = (0u128, 0u128, 0i64);
    let (mut level, mut since) = (0i64, 0u64);
    // Every edge of a lock is taken before the next lock's first: each lock starts at level 0.
    let mut step = |t: u64, d: i64| {
        if level > 0 {
            held_us += u128::from(t - since);
            weighted_us += u128::from(t - since) * level as u128;
        }
        level += d;
        max = max.max(level);
        since = t;
    };
    // The open holds' ends, earliest first, with their weights.
    let mut ends: BinaryHeap<Reverse<(u64, i64)>> = BinaryHeap::new();
    let mut lock = None;
    for g in grants.pass() {
        if lock != Some(g.lock) {
            lock = Some(g.lock);
            while let Some(Reverse((t, w))) = ends.pop() {
                step(t, -w);
            }
        }
        if !(counted(&g) && g.released_us > g.granted_us) {
            continue;
        }
        while let Some(&Reverse((t, w))) = ends.peek().filter(|e| e.0 .0 <= g.granted_us) {
            ends.pop();
            step(t, -w);
        }
        let w = match g.share {
            Share::Permits { held, .. } => i64::from(held),
            _ => 1,
        };
        step(g.granted_us, w);
        ends.push(Reverse((g.released_us, w)));
    }
    while let Some(Reverse((t, w))) = ends.pop() {
        step(t, -w);
    }

    let mean = if held_us == 0 { 0.0 } else { weighted_us as f64 / held_us as f64 };
    (mean, max as u64)
}

/// For each crash of a holder, the time to the next grant of its lock (the first in grant
/// order granted at or after the crash, other than the crashed hold itself), sorted. One
/// pass, keeping the crashes not yet followed by a grant.
fn failover_us(grants: &(impl GrantPasses + ?Sized)) -> Vec<u64> {
    let mut out = Vec::new();
    // Crashes of this lock waiting for the next grant: when each let go.
    let mut waiting: Vec<u64> = Vec::new();
    // The first grant of this lock at the latest grant instant.
    let mut first_at: Option<Grant> = None;
    let mut lock = None;
    for g in grants.pass() {
        if lock != Some(g.lock) {
            lock = Some(g.lock);
            (waiting, first_at) = (Vec::new(), None);
        }
        waiting.retain(|&crash| {
            let followed = crash <= g.granted_us;
            if followed {
                out.push(g.granted_us - crash);
            }
            !followed
        });
        if first_at.is_none_or(|f| f.granted_us != g.granted_us) {
            first_at = Some(g);
        }
        if !g.crashed {
            continue;
        }
        // A crash at its own grant instant is followed by the first grant of that instant,
        // which may come before it in grant order.
        match first_at.filter(|f| g.released_us == g.granted_us && *f != g) {
            Some(first) => out.push(first.granted_us - g.released_us),
            None => waiting.push(g.released_us),
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(contender: u32, req: u64, granted: u64, released: u64, share: Share) -> Grant {
        Grant {
            contender,
            requested_us: req,
            granted_us: granted,
            released_us: released,
            share,
            ..Grant::default()
        }
    }

    #[test]
    fn readers_concurrency_and_latency_apart_from_writers() {
        let grants = [
            g(0, 0, 0, 10_000, Share::Read),
            g(1, 0, 0, 10_000, Share::Read),
            g(2, 0, 5_000, 20_000, Share::Read),
            g(3, 0, 20_000, 30_000, Share::Write),
        ];
        let f = figures(Primitive::Rw { read_percent: 75, readers_first: false }, &grants).unwrap();
        // Readers held from 0 to 20 ms: two at once for 5 ms, three for 5, one for 10.
        assert_eq!(f.mean_holders, (2.0 * 5.0 + 3.0 * 5.0 + 10.0) / 20.0);
        assert_eq!(f.max_holders, 3);
        assert_eq!(f.limit, None);
        // Latencies as the HDR histogram keeps them: within its 3 significant digits.
        let near = |a: f64, b: f64| (a - b).abs() <= b / 500.0;
        assert!(near(f.reads.unwrap().max_ms, 5.0));
        assert!(near(f.writes.max_ms, 20.0));
        assert_eq!(f.writes.count, 1);
    }

    #[test]
    fn permits_are_weighted_and_the_limit_is_the_size() {
        let p = Share::Permits { held: 2, of: 4 };
        let grants = [g(0, 0, 0, 10, p), g(1, 0, 0, 10, p)];
        let f = figures(Primitive::Semaphore { limit: 4, permits: 2 }, &grants).unwrap();
        assert_eq!((f.mean_holders, f.max_holders, f.limit), (4.0, 4, Some(4)));
    }

    #[test]
    fn the_sweeps_agree_with_sorting_each_lock_list() {
        use crate::measure::metrics::by_lock;
        // As first written: every edge of a lock sorted, and a search per crash.
        fn by_edges(list: &[Grant]) -> (u128, u128, i64) {
            let (mut weighted_us, mut held_us, mut max) = (0u128, 0u128, 0i64);
            let mut edges: Vec<(u64, i64)> = Vec::new();
            for g in list.iter().filter(|g| g.released_us > g.granted_us) {
                let w = match g.share {
                    Share::Permits { held, .. } => i64::from(held),
                    _ => 1,
                };
                edges.extend([(g.granted_us, w), (g.released_us, -w)]);
            }
            edges.sort_unstable();
            let (mut level, mut since) = (0i64, 0u64);
            for (t, d) in edges {
                if level > 0 {
                    held_us += u128::from(t - since);
                    weighted_us += u128::from(t - since) * level as u128;
                }
                level += d;
                max = max.max(level);
                since = t;
            }
            (weighted_us, held_us, max)
        }
        fn by_search(list: &[Grant]) -> Vec<u64> {
            let mut out = Vec::new();
            for (i, crash) in list.iter().enumerate().filter(|(_, g)| g.crashed) {
                let after = list.partition_point(|g| g.granted_us < crash.released_us);
                let next = list[after..].iter().enumerate().find(|(k, _)| after + k != i);
                out.extend(next.map(|(_, g)| g.granted_us - crash.released_us));
            }
            out
        }
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for round in 0..300 {
            let grants: Vec<Grant> = (0..rng.random_range(0..40))
                .map(|i| {
                    let granted = rng.random_range(0..50u64);
                    let share = Share::Permits { held: rng.random_range(1..4), of: 8 };
                    Grant {
                        lock: rng.random_range(0..2),
                        crashed: rng.random_bool(0.2),
                        ..g(i % 5, granted, granted, granted + rng.random_range(0..6), share)
                    }
                })
                .collect();
            let (mut weighted, mut held, mut max, mut failovers) = (0, 0, 0, Vec::new());
            for list in by_lock(&grants).values() {
                let (w, h, m) = by_edges(list);
                (weighted, held, max) = (weighted + w, held + h, max.max(m));
                failovers.extend(by_search(list));
            }
            failovers.sort_unstable();
            let mean = if held == 0 { 0.0 } else { weighted as f64 / held as f64 };
            assert_eq!(concurrency(&grants, |_| true), (mean, max as u64), "round {round}");
            assert_eq!(failover_us(&grants), failovers, "round {round}: {grants:?}");
        }
    }

    #[test]
    fn failover_is_from_the_crash_to_the_next_grant() {
        let crashed = Grant { crashed: true, ..g(0, 0, 0, 1_000, Share::Exclusive) };
        let grants = [crashed, g(1, 500, 3_000, 4_000, Share::Exclusive)];
        let f = figures(Primitive::Election, &grants).unwrap();
        assert_eq!((f.failovers, f.failover_max_ms), (1, Some(2.0)));
        assert!(figures(Primitive::Mutex, &grants).is_none());
    }
}
