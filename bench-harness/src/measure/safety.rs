//! Safety under faults, as pure functions over three logs: the grants, the writes the fenced
//! resource saw, and the fault windows. The run computes them from its record and the checker
//! (`bench-harness check DIR`) recomputes them from `grants.csv`, `resource.csv` and
//! `faults.csv` alone, with this same code.
//!
//! - **Overlapping holds**: a grant whose hold `[granted, released)` began before an earlier
//!   hold of the same lock ended; the overlap time is the union, per lock, of the times two
//!   holds were open at once.
//! - **Stale writes**: a resource write by a holder made after another holder of the same lock
//!   was granted (the other's grant after this holder's grant, and not after the write). The
//!   fenced resource should reject every one of them (its token is below the newer holder's);
//!   a resource without fencing accepts them all, which is what "accepted without fencing"
//!   counts.
//! - **Leases lost and signalled**: grants whose holder's guard said `Lost` before release,
//!   and how many of the holders that wrote stale were among them.
//! - **Unavailability**: per lock, the time during which some request was waiting and nobody
//!   held the lock, in total and within the windows of each fault kind (each window extended
//!   by the lease TTL, since a fault's effect on a lease outlasts the fault by up to one TTL).
//! - **Resumed after**: per fault kind, the longest time from the end of one of its windows to
//!   the first grant (of any lock) at or after it: how long the run took to grant again once
//!   the fault was healed (a restarted server answering, a partition healed).

use super::conflict::broken_time_us;
use super::log::{FaultWindow, ResourceWrite};
use super::metrics::GrantPasses;
use super::passes::instants;
use super::spool::{self, Record};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

/// The safety figures of one algorithm's run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SafetyFigures {
    /// Holds that began before an earlier hold of the same lock ended.
    pub overlapping_holds: u64,
    /// Total time, in microseconds, during which two holds of one lock were open at once.
    pub overlap_us: u64,
    /// Overlapping holds that began outside every `pause` window (extended by the TTL):
    /// the ones no lease-based lock admits by design.
    pub overlaps_outside_pauses: u64,
    /// Resource writes made after another holder was granted.
    pub stale_writes: u64,
    /// Stale writes the fenced resource accepted (must be 0).
    pub stale_accepted: u64,
    /// Stale writes the fenced resource rejected.
    pub stale_rejected: u64,
    /// Stale writes a resource without fencing would have accepted (all of them).
    pub stale_accepted_without_fencing: u64,
    /// Resource writes in all.
    pub resource_writes: u64,
    /// Grants whose holder was told its lease was lost before it let go.
    pub leases_lost_signalled: u64,
    /// Grants that made a stale write.
    pub stale_holders: u64,
    /// Of those, the ones told their lease was lost before they let go.
    pub stale_holders_told: u64,
    /// Grants whose holder crashed while holding.
    pub crashed_holds: u64,
    /// Time, in microseconds, during which someone waited and nobody held, summed over locks.
    pub unavailable_us: u64,
    /// The same within the windows of each fault kind (extended by the TTL), by kind name.
    pub unavailable_us_by_fault: BTreeMap<String, u64>,
    /// Per fault kind, the longest time from a window's end to the next grant, in
    /// microseconds (windows with no grant after them are left out).
    #[serde(default)]
    pub resumed_after_us_by_fault: BTreeMap<String, u64>,
    /// Per fault kind, the time its windows (extended by the TTL) cover, in microseconds: what
    /// its unavailability is measured over.
    #[serde(default)]
    pub window_us_by_fault: BTreeMap<String, u64>,
}

impl SafetyFigures {
    /// True when nothing unsafe happened: no overlap and no stale write accepted.
    pub fn is_safe(&self) -> bool {
        self.overlapping_holds == 0 && self.stale_accepted == 0
    }
}

pub use super::metrics::Overlap;

/// Time during which the open holds of one lock conflicted (for a mutex: at least two were
/// open; [`super::conflict`]), summed over the locks of `grants`.
pub fn overlap_time_us(grants: &(impl GrantPasses + ?Sized)) -> u64 {
    let mut pass = grants.pass().peekable();
    let mut total = 0;
    while let Some(lock) = pass.peek().map(|g| g.lock) {
        let holds = std::iter::from_fn(|| pass.next_if(|g| g.lock == lock));
        total += broken_time_us(holds.map(|g| (g.granted_us, g.released_us, g.share)));
    }
    total
}

/// A grant as the stale-write check reads it: who held which lock with which token from
/// when, and when that lock's next grant at a later instant came (`u64::MAX` for none).
#[derive(Debug, Clone, Copy)]
struct Tenure {
    lock: u32,
    contender: u32,
    token: u64,
    granted_us: u64,
    next_granted_us: u64,
}

impl Tenure {
    /// Its place in the order the check merges in: the writer, then the grant time.
    fn key(&self) -> (u32, u32, u64, u64) {
        (self.lock, self.contender, self.token, self.granted_us)
    }
}

impl Record for Tenure {
    const SIZE: usize = 32;

    fn put(&self, out: &mut Vec<u8>) {
        out.extend(self.lock.to_le_bytes());
        out.extend(self.contender.to_le_bytes());
        for word in [self.token, self.granted_us, self.next_granted_us] {
            out.extend(word.to_le_bytes());
        }
    }

    fn get(b: &[u8]) -> Self {
        let (word, half) = (|at| spool::u64_at(b, at), |at| spool::u32_at(b, at));
        Tenure {
            lock: half(0),
            contender: half(4),
            token: word(8),
            granted_us: word(16),
            next_granted_us: word(24),
        }
    }
}

/// Each grant of a pass as a [`Tenure`]: a lock's grants at one instant all have the lock's
/// first grant after that instant as their next.
fn tenures(grants: &(impl GrantPasses + ?Sized)) -> impl Iterator<Item = Tenure> + '_ {
    instants(grants.pass()).flat_map(|(at, next)| {
        let next_granted_us = next.unwrap_or(u64::MAX);
        at.into_iter().map(move |g| Tenure {
            lock: g.lock,
            contender: g.contender,
            token: g.token,
            granted_us: g.granted_us,
            next_granted_us,
        })
    })
}

/// Calls `visit` with each of `writes` and whether it was stale: whether another holder of
/// the write's lock was granted after the writer's grant and not after the write. The
/// writer's grant is its latest grant with the write's lock, contender and token up to the
/// write (a contender's holds never overlap each other; tokens may repeat when a lock is
/// unsafe, as at ONE).
///
/// A merge: the grants, each with its lock's next grant time, and the writes are both sorted
/// on disk by lock, contender, token and time ([`spool::sorted`]), so each write meets its
/// writer's latest grant as the two are read side by side. The writes come in that order, not
/// the resource's. What the check holds in memory is a sort's run, whatever the length of the
/// logs: a soak has millions of writes.
///
/// # Panics
///
/// When the sorts' temporary files cannot be written or read back: a failing disk, which no
/// figure of the run can survive (as [`spool::Spooled::iter`]).
pub fn each_write_judged(
    grants: &(impl GrantPasses + ?Sized),
    writes: impl IntoIterator<Item = ResourceWrite>,
    mut visit: impl FnMut(&ResourceWrite, bool),
) {
    let on_disk = |e: std::io::Error| -> ! {
        panic!("cannot sort the stale-write check's logs in a temporary file: {e}")
    };
    let held = spool::sorted(tenures(grants), Tenure::key).unwrap_or_else(|e| on_disk(e));
    let writes = spool::sorted(writes, |w| (w.lock, w.contender, w.token, w.at_us))
        .unwrap_or_else(|e| on_disk(e));
    let mut held = held.iter().peekable();
    let mut latest: Option<Tenure> = None;
    for w in writes.iter() {
        let at = (w.lock, w.contender, w.token, w.at_us);
        while let Some(t) = held.next_if(|t| t.key() <= at) {
            latest = Some(t);
        }
        let mine =
            latest.filter(|t| (t.lock, t.contender, t.token) == (w.lock, w.contender, w.token));
        visit(&w, mine.is_some_and(|t| t.next_granted_us <= w.at_us));
    }
}

/// The intervals, per lock, during which someone waited on the lock and nobody held it.
pub fn idle_intervals(grants: &(impl GrantPasses + ?Sized)) -> Vec<(u64, u64)> {
    let mut idle = Vec::new();
    each_idle(grants, |interval| idle.push(interval));
    idle
}

/// Calls `visit` with each idle interval of `grants` ([`idle_intervals`]) instead of keeping
/// them: a lock handed from waiter to waiter is idle between every two holds, so there are
/// about as many intervals as grants.
///
/// A sweep over each lock's edges in time order: +1 per waiting request at its start, -1 at
/// its grant, +WAY per hold at its grant, -WAY at its release; waited on and not held means a
/// level in [1, WAY). The grants come in grant order, but their requests and releases do not:
/// the edges wait in a heap until no grant to come can have an earlier one. A request waits
/// at most the log's longest wait (found by a first pass), so every edge to come is at or
/// after the latest grant less that wait, and the heap holds one longest wait's edges and the
/// open holds' releases. Only the level before each instant's first edge decides whether the
/// time up to that instant was idle, so edges at one instant may be taken in any order.
pub fn each_idle(grants: &(impl GrantPasses + ?Sized), mut visit: impl FnMut((u64, u64))) {
    const WAY: i64 = 1 << 32;
    let longest_wait = grants.pass().map(|g| g.latency_us()).max().unwrap_or(0);
    let (mut level, mut since) = (0i64, 0u64);
    let mut take = |(t, d): (u64, i64)| {
        if (1..WAY).contains(&level) && t > since {
            visit((since, t));
        }
        level += d;
        since = t;
    };
    // The edges not yet taken, earliest first. Every lock's are taken before the next lock's
    // first, so each lock starts at level 0.
    let mut edges: BinaryHeap<Reverse<(u64, i64)>> = BinaryHeap::new();
    let mut lock = None;
    for g in grants.pass() {
        if lock != Some(g.lock) {
            lock = Some(g.lock);
            while let Some(Reverse(edge)) = edges.pop() {
                take(edge);
            }
        }
        let waited = g.granted_us > g.requested_us;
        let held = g.released_us > g.granted_us;
        if waited {
            edges.push(Reverse((g.requested_us, 1)));
        }
        let d = if waited { -1 } else { 0 } + if held { WAY } else { 0 };
        if d != 0 {
            edges.push(Reverse((g.granted_us, d)));
        }
        if held {
            edges.push(Reverse((g.released_us, -WAY)));
        }
        let horizon = g.granted_us.saturating_sub(longest_wait);
        while let Some(&Reverse(edge)) = edges.peek().filter(|e| e.0 .0 < horizon) {
            edges.pop();
            take(edge);
        }
    }
    while let Some(Reverse(edge)) = edges.pop() {
        take(edge);
    }
}

/// The total length of `intervals`, clipped to `within` when given (half-open windows).
pub fn total_us(intervals: &[(u64, u64)], within: Option<&[(u64, u64)]>) -> u64 {
    intervals.iter().map(|&interval| length_us(interval, within)).sum()
}

/// The length of `(a, b)`, clipped to `within` when given.
fn length_us((a, b): (u64, u64), within: Option<&[(u64, u64)]>) -> u64 {
    match within {
        None => b - a,
        Some(windows) => windows.iter().map(|&(x, y)| b.min(y).saturating_sub(a.max(x))).sum(),
    }
}

/// The windows of `kind`, each extended by `extend_us`, merged so that none is counted twice.
pub fn windows_of(faults: &[FaultWindow], kind: &str, extend_us: u64) -> Vec<(u64, u64)> {
    let mut w: Vec<(u64, u64)> = faults
        .iter()
        .filter(|f| f.kind == kind)
        .map(|f| (f.start_us, f.end_us.saturating_add(extend_us)))
        .collect();
    w.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(w.len());
    for (a, b) in w {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
}

/// Every safety figure of one algorithm from its three logs, with its overlapping grants;
/// `ttl_us` extends each fault window for the unavailability by kind and for telling
/// pause-caused overlaps apart.
pub fn judge(
    grants: &(impl GrantPasses + ?Sized),
    writes: impl IntoIterator<Item = ResourceWrite>,
    faults: &[FaultWindow],
    ttl_us: u64,
) -> (SafetyFigures, Vec<Overlap>) {
    let found = super::metrics::overlaps(grants);
    let pauses = windows_of(faults, "pause", ttl_us);
    let in_pause = |t: u64| pauses.iter().any(|&(a, b)| (a..b).contains(&t));
    // Each kind's windows, and the idle time in all and within each, in one sweep.
    let kinds: BTreeSet<&str> = faults.iter().map(|w| w.kind.as_str()).collect();
    let windows: Vec<(&str, Vec<(u64, u64)>)> =
        kinds.into_iter().map(|kind| (kind, windows_of(faults, kind, ttl_us))).collect();
    let (mut unavailable_us, mut unavailable_by_kind) = (0, vec![0; windows.len()]);
    each_idle(grants, |interval| {
        unavailable_us += length_us(interval, None);
        for (sum, (_, w)) in unavailable_by_kind.iter_mut().zip(&windows) {
            *sum += length_us(interval, Some(w));
        }
    });
    let mut f = SafetyFigures {
        overlapping_holds: found.len() as u64,
        overlap_us: overlap_time_us(grants),
        overlaps_outside_pauses: found.iter().filter(|o| !in_pause(o.second.granted_us)).count()
            as u64,
        leases_lost_signalled: grants.pass().filter(|g| g.lease_lost).count() as u64,
        crashed_holds: grants.pass().filter(|g| g.crashed).count() as u64,
        unavailable_us,
        ..SafetyFigures::default()
    };
    let mut stale_grants = BTreeSet::new();
    each_write_judged(grants, writes, |w, stale| {
        f.resource_writes += 1;
        if !stale {
            return;
        }
        f.stale_writes += 1;
        f.stale_accepted_without_fencing += 1;
        if w.accepted {
            f.stale_accepted += 1;
        } else {
            f.stale_rejected += 1;
        }
        stale_grants.insert((w.lock, w.contender, w.token));
    });
    f.stale_holders = stale_grants.len() as u64;
    f.stale_holders_told = grants
        .pass()
        .filter(|g| g.lease_lost && stale_grants.contains(&(g.lock, g.contender, g.token)))
        .count() as u64;
    for ((kind, windows), unavailable) in windows.iter().zip(unavailable_by_kind) {
        f.unavailable_us_by_fault.insert(kind.to_string(), unavailable);
        f.window_us_by_fault.insert(kind.to_string(), windows.iter().map(|(a, b)| b - a).sum());
    }
    f.resumed_after_us_by_fault = resumed_after(grants, faults);
    (f, found)
}

/// Per fault kind, the longest wait from a window's end to the first grant at or after it.
/// One pass: each lock's grants come in grant order, so the first grant at or after an end is
/// the earliest of each lock's first one there, and each lock moves once through the ends in
/// order.
pub fn resumed_after(
    grants: &(impl GrantPasses + ?Sized),
    faults: &[FaultWindow],
) -> BTreeMap<String, u64> {
    let mut ends: Vec<(u64, usize)> =
        faults.iter().enumerate().map(|(i, w)| (w.end_us, i)).collect();
    ends.sort_unstable();
    // Per window, the first grant at or after its end, over the locks seen so far.
    let mut first_from: Vec<Option<u64>> = vec![None; faults.len()];
    // Per lock, the ends already given their first grant of this lock: a prefix of `ends`.
    let (mut lock, mut done) = (None, 0);
    for g in grants.pass() {
        if lock != Some(g.lock) {
            (lock, done) = (Some(g.lock), 0);
        }
        while let Some(&(_, i)) = ends.get(done).filter(|(end, _)| *end <= g.granted_us) {
            let first = first_from[i].get_or_insert(g.granted_us);
            *first = (*first).min(g.granted_us);
            done += 1;
        }
    }
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    for (w, next) in faults.iter().zip(first_from) {
        if let Some(next) = next {
            let wait = next - w.end_us;
            let most = out.entry(w.kind.clone()).or_insert(0);
            *most = (*most).max(wait);
        }
    }
    out
}

/// Every safety figure of one algorithm from its three logs ([`judge`] without the list of
/// overlapping grants).
pub fn figures(
    grants: &(impl GrantPasses + ?Sized),
    writes: impl IntoIterator<Item = ResourceWrite>,
    faults: &[FaultWindow],
    ttl_us: u64,
) -> SafetyFigures {
    judge(grants, writes, faults, ttl_us).0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::metrics::{by_lock, overlaps, Grant};

    fn g(contender: u32, req: u64, granted: u64, released: u64, token: u64) -> Grant {
        crate::measure::metrics::test_grant(0, contender, req, granted, released, token)
    }

    /// Whether each of `writes` was stale, in their order.
    fn stale_flags(grants: &[Grant], writes: &[ResourceWrite]) -> Vec<bool> {
        let judged = |w: &ResourceWrite| {
            let mut stale = None;
            each_write_judged(grants, [*w], |_, s| stale = Some(s));
            stale.expect("one write judged")
        };
        writes.iter().map(judged).collect()
    }

    fn w(contender: u32, token: u64, at_us: u64, accepted: bool) -> ResourceWrite {
        ResourceWrite { lock: 0, contender, token, at_us, accepted }
    }

    #[test]
    fn overlaps_are_named_and_timed() {
        // 0 holds [10, 50); 1 is granted at 30 (a paused holder's lease ran out), holds to 40;
        // 2 follows at 50.
        let grants = [g(0, 0, 10, 50, 1), g(1, 5, 30, 40, 2), g(2, 6, 50, 60, 3)];
        let found = overlaps(&grants);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].first.contender, found[0].second.contender), (0, 1));
        assert_eq!(overlap_time_us(&grants), 10);
        // Back to back is not an overlap.
        assert!(overlaps(&[g(0, 0, 0, 10, 1), g(1, 0, 10, 20, 2)]).is_empty());
    }

    #[test]
    fn stale_writes_are_those_after_a_newer_grant() {
        let grants = [g(0, 0, 10, 50, 1), g(1, 5, 30, 40, 2)];
        // 0 writes at its grant (fresh), 1 writes at its grant (fresh), 0 writes at 49 after 1
        // was granted (stale, rejected by fencing), 1 writes at 39 (fresh).
        let writes = [w(0, 1, 10, true), w(1, 2, 30, true), w(1, 2, 39, true), w(0, 1, 49, false)];
        assert_eq!(stale_flags(&grants, &writes), [false, false, false, true]);
        // A token seen again later (an unsafe lock repeats tokens) is matched to the writer's
        // latest grant, not its first.
        let again = [g(0, 0, 10, 20, 1), g(1, 0, 30, 40, 2), g(0, 0, 50, 60, 1)];
        assert_eq!(stale_flags(&again, &[w(0, 1, 59, false)]), [false]);
        // A write before any grant of its key, and a write whose token no grant of that
        // contender carried, are not stale (nothing says which hold made them).
        assert_eq!(stale_flags(&grants, &[w(0, 1, 5, true), w(0, 9, 49, true)]), [false, false]);
        let mut lost = grants;
        lost[0].lease_lost = true;
        let f = figures(&lost, writes, &[], 0);
        assert_eq!((f.stale_writes, f.stale_rejected, f.stale_accepted), (1, 1, 0));
        assert_eq!(f.stale_accepted_without_fencing, 1);
        assert_eq!((f.stale_holders, f.stale_holders_told), (1, 1));
        assert!(!f.is_safe(), "an overlap is never safe");
    }

    #[test]
    fn resumed_after_is_the_longest_wait_from_a_window_end_to_the_next_grant() {
        let grants = [g(0, 0, 0, 10, 1), g(1, 5, 130, 140, 2), g(0, 150, 400, 410, 3)];
        let w = |kind: &str, start_us, end_us| FaultWindow {
            kind: kind.into(),
            target: "server".into(),
            start_us,
            end_us,
        };
        let got = resumed_after(
            &grants,
            &[w("server-restart", 20, 100), w("server-restart", 160, 380), w("pause", 500, 600)],
        );
        assert_eq!(got.get("server-restart"), Some(&30));
        assert_eq!(got.get("pause"), None, "no grant after it");
    }

    #[test]
    fn unavailability_is_waiting_with_nobody_holding() {
        // 0 holds [0, 10); 1 waits from 5, is granted at 30: 20 us unavailable.
        let grants = [g(0, 0, 0, 10, 1), g(1, 5, 30, 40, 2)];
        let idle = idle_intervals(&grants);
        assert_eq!(total_us(&idle, None), 20);
        assert_eq!(total_us(&idle, Some(&[(0, 15)])), 5);
        let faults =
            [FaultWindow { kind: "crash".into(), target: "c0".into(), start_us: 8, end_us: 9 }];
        let f = figures(&grants, [], &faults, 4);
        assert_eq!(f.unavailable_us_by_fault["crash"], 3, "window [8, 13) holds 10..13");
        assert_eq!(f.overlaps_outside_pauses, 0);
    }

    #[test]
    fn the_idle_sweep_agrees_with_sorting_every_edge() {
        // The sweep as first written: four edges per grant, all sorted.
        fn by_sorting_edges(list: &[Grant]) -> Vec<(u64, u64)> {
            const WAY: i64 = 1 << 32;
            let mut edges = Vec::new();
            for g in list {
                if g.granted_us > g.requested_us {
                    edges.extend([(g.requested_us, 1), (g.granted_us, -1)]);
                }
                if g.released_us > g.granted_us {
                    edges.extend([(g.granted_us, WAY), (g.released_us, -WAY)]);
                }
            }
            edges.sort_by_key(|&(t, d)| (t, d));
            let (mut level, mut since, mut idle) = (0i64, 0u64, Vec::new());
            for (t, d) in edges {
                if (1..WAY).contains(&level) && t > since {
                    idle.push((since, t));
                }
                level += d;
                since = t;
            }
            idle
        }
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for round in 0..200 {
            // Coarse instants, so that edges often fall on one instant; holds of length 0,
            // requests granted at once, overlaps and gaps all occur.
            let grants: Vec<Grant> = (0..rng.random_range(0..40))
                .map(|i| {
                    let granted = rng.random_range(0..60u64);
                    let requested =
                        granted.saturating_sub(rng.random_range(0..[3, 30][i as usize % 2]));
                    let released = granted + rng.random_range(0..6);
                    let lock = rng.random_range(0..2);
                    Grant { lock, ..g(i % 5, requested, granted, released, u64::from(i)) }
                })
                .collect();
            let each_lock: Vec<(u64, u64)> =
                by_lock(&grants).values().flat_map(|list| by_sorting_edges(list)).collect();
            assert_eq!(idle_intervals(&grants), each_lock, "round {round}: {grants:?}");
            // The first grant after each window's end, by a search of each lock's list.
            let faults: Vec<FaultWindow> = (0..rng.random_range(0..4))
                .map(|k| {
                    let end_us = rng.random_range(0..70);
                    let kind = ["crash", "pause"][k % 2].into();
                    FaultWindow { kind, target: "c".into(), start_us: 0, end_us }
                })
                .collect();
            let mut resumed: BTreeMap<String, u64> = BTreeMap::new();
            for w in &faults {
                let next = by_lock(&grants)
                    .values()
                    .filter_map(|l| l.get(l.partition_point(|g| g.granted_us < w.end_us)))
                    .map(|g| g.granted_us)
                    .min();
                if let Some(next) = next {
                    let most = resumed.entry(w.kind.clone()).or_insert(0);
                    *most = (*most).max(next - w.end_us);
                }
            }
            assert_eq!(resumed_after(&grants, &faults), resumed, "round {round}");
        }
    }

    /// The merge judges every write as the definition does: the writer's latest grant up to
    /// the write, and a grant of the lock after that one and not after the write.
    #[test]
    fn writes_are_judged_as_a_search_of_the_whole_log_judges_them() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for round in 0..300 {
            // Tokens repeat (as at ONE) and grants share instants.
            let grants: Vec<Grant> = (0..rng.random_range(0..40))
                .map(|i: u32| {
                    let granted = rng.random_range(0..60u64);
                    let released = granted + rng.random_range(0..6);
                    let lock = rng.random_range(0..2);
                    let token = rng.random_range(0..8);
                    Grant { lock, ..g(i % 4, granted, granted, released, token) }
                })
                .collect();
            let writes: Vec<ResourceWrite> = (0..rng.random_range(0..60))
                .map(|_| ResourceWrite {
                    lock: rng.random_range(0..3),
                    contender: rng.random_range(0..4),
                    token: rng.random_range(0..8),
                    at_us: rng.random_range(0..70),
                    accepted: rng.random_bool(0.5),
                })
                .collect();
            let stale = |w: &ResourceWrite| {
                let mine = grants
                    .iter()
                    .filter(|g| (g.lock, g.contender, g.token) == (w.lock, w.contender, w.token))
                    .filter(|g| g.granted_us <= w.at_us)
                    .map(|g| g.granted_us)
                    .max();
                mine.is_some_and(|mine| {
                    grants
                        .iter()
                        .any(|h| h.lock == w.lock && h.granted_us > mine && h.granted_us <= w.at_us)
                })
            };
            let key = |(w, s): &(ResourceWrite, bool)| (w.lock, w.contender, w.token, w.at_us, *s);
            let mut expected: Vec<(ResourceWrite, bool)> =
                writes.iter().map(|w| (*w, stale(w))).collect();
            expected.sort_by_key(key);
            let mut judged = Vec::new();
            each_write_judged(&grants, writes.iter().copied(), |w, s| judged.push((*w, s)));
            judged.sort_by_key(key);
            assert_eq!(judged, expected, "round {round}: {grants:?}");
        }
    }

    #[test]
    fn windows_merge_and_extend() {
        let faults = [
            FaultWindow { kind: "pause".into(), target: "a".into(), start_us: 0, end_us: 10 },
            FaultWindow { kind: "pause".into(), target: "b".into(), start_us: 12, end_us: 20 },
            FaultWindow { kind: "crash".into(), target: "c".into(), start_us: 100, end_us: 110 },
        ];
        assert_eq!(windows_of(&faults, "pause", 5), [(0, 25)]);
        assert_eq!(windows_of(&faults, "crash", 0), [(100, 110)]);
    }
}
