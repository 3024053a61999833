//! The metrics, as pure functions over the grant log (and the store's counters).
//!
//! A [`Grant`] is one acquisition: who asked for which lock when, when it was granted, when
//! the holder let go, and the fencing token it got. Times are microseconds on the run's clock.
//! The holder "lets go" when it *calls* release: from then on it no longer acts under the
//! lock, so holds are `[granted_us, released_us)`, and the handoff gap includes the release's
//! own store requests.
//!
//! Every function here takes grants in any order; where an order matters they work per lock
//! in grant order (a pass of [`GrantPasses`]). Those over a whole run's log read it in passes
//! and keep no copy of it, nor a field per grant.

use super::conflict;
#[cfg(test)]
pub(crate) use super::grant::test_grant;
pub use super::grant::Grant;
#[cfg(test)]
use super::passes::grant_order;
use super::passes::with_previous;
pub use super::passes::GrantPasses;
use crate::primitive::Share;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
#[cfg(test)]
use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};

/// The grants of each lock, each list in grant order (ties by the release, then by
/// contender): the tests' oracles hold the whole log this way.
#[cfg(test)]
pub type ByLock<'a> = BTreeMap<u32, Cow<'a, [Grant]>>;

/// The grants of each lock in grant order ([`ByLock`]), borrowed from a log already sorted
/// that way.
#[cfg(test)]
pub fn by_lock(grants: &[Grant]) -> ByLock<'_> {
    if grants.is_sorted_by_key(grant_order) {
        return grants
            .chunk_by(|a, b| a.lock == b.lock)
            .filter_map(|list| Some((list.first()?.lock, Cow::Borrowed(list))))
            .collect();
    }
    let mut map: BTreeMap<u32, Vec<Grant>> = BTreeMap::new();
    for g in grants {
        map.entry(g.lock).or_default().push(*g);
    }
    map.into_iter()
        .map(|(lock, mut list)| {
            list.sort_by_key(grant_order);
            (lock, Cow::Owned(list))
        })
        .collect()
}

/// Highest latency a histogram records exactly: one hour. Longer values saturate.
pub const HISTOGRAM_MAX_US: u64 = 3_600_000_000;

/// An empty latency histogram: microseconds, three significant digits. Its counts grow to the
/// largest latency recorded instead of being allocated up to an hour at once: a run keeps one
/// per contender, and most latencies stay under a few seconds, where a histogram is half the
/// size. Record through [`record_latency`], which saturates at [`HISTOGRAM_MAX_US`].
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("valid histogram bounds")
}

/// Records one latency, saturating at [`HISTOGRAM_MAX_US`] (its bucket is the one a histogram
/// bounded at an hour saturates into, so quantiles are the same as with such a histogram).
pub fn record_latency(h: &mut Histogram<u64>, latency_us: u64) {
    // A growing histogram resizes for any value up to its hard limit, which an hour is far
    // below: recording cannot fail.
    let _ = h.record(latency_us.min(HISTOGRAM_MAX_US));
}

/// A histogram of the grants' acquisition latencies.
pub fn latency_histogram(grants: &[Grant]) -> Histogram<u64> {
    let mut h = new_histogram();
    for g in grants {
        record_latency(&mut h, g.latency_us());
    }
    h
}

/// Percentiles of a latency distribution, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Values recorded.
    pub count: u64,
    /// Mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest value.
    pub max_ms: f64,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// The percentiles of a histogram of microseconds (all zero when it is empty).
pub fn latency_stats(h: &Histogram<u64>) -> LatencyStats {
    if h.is_empty() {
        return LatencyStats::default();
    }
    LatencyStats {
        count: h.len(),
        mean_ms: h.mean().round() / 1000.0,
        p50_ms: ms(h.value_at_quantile(0.5)),
        p90_ms: ms(h.value_at_quantile(0.9)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        p999_ms: ms(h.value_at_quantile(0.999)),
        max_ms: ms(h.max()),
    }
}

/// One point of a latency CDF.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CdfPoint {
    /// Fraction of grants at or below `latency_ms`.
    pub quantile: f64,
    /// Latency.
    pub latency_ms: f64,
}

/// The CDF of a histogram at quantiles 0, 0.01, …, 0.99, 0.995, 0.999, 0.9999 and 1.
pub fn latency_cdf(h: &Histogram<u64>) -> Vec<CdfPoint> {
    if h.is_empty() {
        return Vec::new();
    }
    let mut qs: Vec<f64> = (0..100).map(|i| i as f64 / 100.0).collect();
    qs.extend([0.995, 0.999, 0.9999, 1.0]);
    qs.into_iter()
        .map(|q| CdfPoint {
            quantile: q,
            latency_ms: ms(if q >= 1.0 { h.max() } else { h.value_at_quantile(q) }),
        })
        .collect()
}

/// Grants granted within the run's window `[0, duration_us]`.
pub fn grants_in_window(grants: &(impl GrantPasses + ?Sized), duration_us: u64) -> usize {
    grants.pass().filter(|g| g.granted_us <= duration_us).count()
}

/// Grants per second per lock: the grants granted within the window over its length and the
/// number of locks.
pub fn grants_per_second_per_lock(
    grants: &(impl GrantPasses + ?Sized),
    duration_us: u64,
    locks: usize,
) -> f64 {
    if duration_us == 0 || locks == 0 {
        return 0.0;
    }
    grants_in_window(grants, duration_us) as f64 / (duration_us as f64 / 1e6) / locks as f64
}

/// The handoff gaps in microseconds: on each lock, from one holder's release to the next
/// holder's grant, counted only when the next holder was already waiting (its request came
/// before the release). Overlapping holds (negative gaps) are left out: they are counted by
/// [`overlapping_holds`].
pub fn handoff_gaps(grants: &(impl GrantPasses + ?Sized)) -> Vec<u64> {
    let mut gaps = Vec::new();
    each_handoff_gap(grants, &mut |gap| gaps.push(gap));
    gaps
}

/// Calls `visit` with each handoff gap ([`handoff_gaps`]) instead of keeping them.
pub fn each_handoff_gap(grants: &(impl GrantPasses + ?Sized), visit: &mut dyn FnMut(u64)) {
    for (prev, next) in with_previous(grants) {
        let Some(prev) = prev else { continue };
        if next.requested_us < prev.released_us && next.granted_us >= prev.released_us {
            visit(next.granted_us - prev.released_us);
        }
    }
}

/// [`handoff_stats`] of the log's [`handoff_gaps`], from two passes over the log instead of
/// a list of its gaps ([`super::quantiles::exact`]).
pub fn handoff(
    grants: &(impl GrantPasses + ?Sized),
    round_trip_us: f64,
    ideal_us: Option<f64>,
) -> HandoffStats {
    let found = super::quantiles::exact(|visit| each_handoff_gap(grants, visit), &HANDOFF_QS);
    let [p50, p90, p99] = [0, 1, 2].map(|i| found.quantiles[i]);
    gap_stats(found.count, found.sum, [p50, p90, p99], round_trip_us, ideal_us)
}

/// The quantiles of the handoff gaps reported: p50, p90, p99.
const HANDOFF_QS: [f64; 3] = [0.5, 0.9, 0.99];

/// Handoff gaps summarized, in time and in store round trips.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HandoffStats {
    /// Handoffs to a waiting contender.
    pub count: u64,
    /// Median gap.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Mean gap.
    pub mean_ms: f64,
    /// Median gap in mean store round trips (`None` without latency).
    pub p50_round_trips: Option<f64>,
    /// Mean gap in mean store round trips.
    pub mean_round_trips: Option<f64>,
    /// The algorithm's ideal handoff (see the registry), if it has one.
    pub ideal_ms: Option<f64>,
    /// Median gap over the ideal handoff.
    pub ratio_to_ideal: Option<f64>,
}

/// Exact quantile (nearest rank) of sorted values.
pub fn quantile_sorted(sorted: &[u64], q: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Summarizes gaps; `round_trip_us` converts to round trips, `ideal_us` gives the ratio.
pub fn handoff_stats(gaps: &[u64], round_trip_us: f64, ideal_us: Option<f64>) -> HandoffStats {
    let mut sorted = gaps.to_vec();
    sorted.sort_unstable();
    let qs = HANDOFF_QS.map(|q| quantile_sorted(&sorted, q));
    gap_stats(sorted.len() as u64, sorted.iter().sum(), qs, round_trip_us, ideal_us)
}

/// [`HandoffStats`] from the gaps' count, sum and quantiles ([`HANDOFF_QS`]).
fn gap_stats(
    count: u64,
    sum: u64,
    [p50, p90, p99]: [Option<u64>; 3],
    round_trip_us: f64,
    ideal_us: Option<f64>,
) -> HandoffStats {
    if count == 0 {
        return HandoffStats { ideal_ms: ideal_us.map(|i| i / 1000.0), ..HandoffStats::default() };
    }
    let q = |v: Option<u64>| v.unwrap_or(0) as f64;
    let mean = sum as f64 / count as f64;
    let per_rt = |x: f64| (round_trip_us > 0.0).then(|| round4(x / round_trip_us));
    HandoffStats {
        count,
        p50_ms: q(p50) / 1000.0,
        p90_ms: q(p90) / 1000.0,
        p99_ms: q(p99) / 1000.0,
        mean_ms: round4(mean / 1000.0),
        p50_round_trips: per_rt(q(p50)),
        mean_round_trips: per_rt(mean),
        ideal_ms: ideal_us.map(|i| i / 1000.0),
        ratio_to_ideal: ideal_us.filter(|i| *i > 0.0).map(|i| round4(q(p50) / i)),
    }
}

/// Rounds to four decimals, so that result files stay readable.
pub fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// Grants per contender, for contenders `0..contenders`.
pub fn grants_per_contender(grants: &(impl GrantPasses + ?Sized), contenders: usize) -> Vec<u64> {
    let mut counts = vec![0u64; contenders];
    for g in grants.pass() {
        if let Some(c) = counts.get_mut(g.contender as usize) {
            *c += 1;
        }
    }
    counts
}

/// Jain's fairness index `(Σx)² / (n·Σx²)`: 1 when all are equal, `1/n` when one gets all.
/// `None` for no values or all zero.
pub fn jain_index(xs: &[u64]) -> Option<f64> {
    let sum: f64 = xs.iter().map(|&x| x as f64).sum();
    let sq: f64 = xs.iter().map(|&x| (x as f64) * (x as f64)).sum();
    (sq > 0.0).then(|| sum * sum / (xs.len() as f64 * sq))
}

/// The longest run of consecutive grants of one lock to one contender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LongestRun {
    /// Grants in the run (0 without grants).
    pub length: u64,
    /// Who got them.
    pub contender: u32,
    /// On which lock.
    pub lock: u32,
}

/// The longest run of consecutive grants to one contender on one lock (the first such run
/// on a tie).
pub fn longest_run(grants: &(impl GrantPasses + ?Sized)) -> LongestRun {
    let mut best = LongestRun::default();
    let mut run = 0u64;
    for (prev, g) in with_previous(grants) {
        run = if prev.is_some_and(|p| p.contender == g.contender) { run + 1 } else { 1 };
        if run > best.length {
            best = LongestRun { length: run, contender: g.contender, lock: g.lock };
        }
    }
    best
}

/// Overtaking: a request granted before an earlier request on the same lock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Overtakes {
    /// Pairs (earlier request, later request) on one lock where the later one was granted
    /// first: the number of inversions of the request order in the grant order.
    pub pairs: u64,
    /// Grants that at least one later request overtook.
    pub overtaken_grants: u64,
    /// `overtaken_grants` over all grants.
    pub overtaken_fraction: f64,
    /// Overtakes of a request already in line: present when some grant carries the instant
    /// its place was fixed ([`Grant::queued_us`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_line: Option<InLine>,
}

impl Overtakes {
    /// The share overtaken in line for a table: a percentage, or "-" for a lock without a line.
    pub fn in_line_text(&self) -> String {
        self.in_line.map_or("-".into(), |l| format!("{:.1}%", l.overtaken_fraction * 100.0))
    }
}

/// First come, first served as Lamport defined it for the bakery: a request whose place in
/// line was fixed (its enqueue acknowledged) before another request *began* must be served
/// first. Requests on their way at the same time have no order a lock could keep, since the
/// network may deliver them either way round; [`Overtakes::overtaken_grants`] counts those
/// too, this does not. A grant without a place ([`Grant::queued_us`] unset) is judged from
/// its request, as there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct InLine {
    /// Grants served after a request that began once they were already in line.
    pub overtaken_grants: u64,
    /// `overtaken_grants` over all grants.
    pub overtaken_fraction: f64,
}

/// Counts overtakes per lock, in two passes: the first finds the longest wait, the second
/// counts. A request can be overtaken only by one made while it waited, so the second pass
/// keeps the requests of the last longest wait only (the ones a later grant may still have
/// asked before), sorted, and counts the inversions of the request order against them.
pub fn overtakes(grants: &(impl GrantPasses + ?Sized)) -> Overtakes {
    let (mut longest_wait, mut placed) = (0u64, false);
    for g in grants.pass() {
        longest_wait = longest_wait.max(g.latency_us());
        placed |= g.queued_us.is_some();
    }
    let (mut pairs, mut overtaken, mut in_line) = (0u64, 0u64, 0u64);
    let mut lock = None;
    let mut began = lock_core::order::LineJudge::default();
    let mut in_place = lock_core::order::LineJudge::default();
    // The requests granted so far on this lock that a later grant may have asked before.
    let mut recent: VecDeque<u64> = VecDeque::new();
    for g in grants.pass() {
        if lock != Some(g.lock) {
            lock = Some(g.lock);
            (began, in_place) = Default::default();
            recent.clear();
        }
        // In grant order, a grant is overtaken when an earlier grant was requested later,
        // and overtaken in line when that request began after this one's place was fixed
        // (judged from its request when it has no place).
        overtaken += u64::from(began.next(g.requested_us, Some(g.requested_us)).is_some());
        let place = g.queued_us.unwrap_or(g.requested_us);
        in_line += u64::from(in_place.next(g.requested_us, Some(place)).is_some());
        // Every later grant of this lock asked at or after this grant's time less the longest
        // wait: requests at or before that overtake none of them.
        let horizon = g.granted_us.saturating_sub(longest_wait);
        while recent.front().is_some_and(|&r| r <= horizon) {
            recent.pop_front();
        }
        let at = recent.partition_point(|&r| r <= g.requested_us);
        pairs += (recent.len() - at) as u64;
        recent.insert(at, g.requested_us);
    }
    let n = grants.grant_count();
    let fraction = |k: u64| if n == 0 { 0.0 } else { round4(k as f64 / n as f64) };
    Overtakes {
        pairs,
        overtaken_grants: overtaken,
        overtaken_fraction: fraction(overtaken),
        in_line: placed
            .then(|| InLine { overtaken_grants: in_line, overtaken_fraction: fraction(in_line) }),
    }
}

/// Grants whose hold began while holds of the same lock it may not share with were open
/// (must be 0): for a mutex, before an earlier hold ended ([`conflict`]).
pub fn overlapping_holds(grants: &(impl GrantPasses + ?Sized)) -> u64 {
    overlaps(grants).len() as u64
}

/// Two grants of one lock whose holds overlapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlap {
    /// The earlier grant: of those still held, the one held longest.
    pub first: Grant,
    /// The grant that began while `first` was held.
    pub second: Grant,
}

/// Every overlapping hold of `grants`, in grant order per lock: each grant that began while
/// holds it may not share with were open ([`conflict::admits`]), paired with the open hold
/// that ends last.
pub fn overlaps(grants: &(impl GrantPasses + ?Sized)) -> Vec<Overlap> {
    overlaps_in(grants.pass())
}

/// [`overlaps`] of grants lock by lock, each lock's in grant order: keeps the holds still open.
fn overlaps_in(grants: impl Iterator<Item = Grant>) -> Vec<Overlap> {
    let mut found = Vec::new();
    let mut open: Vec<Grant> = Vec::new();
    let mut lock = None;
    for g in grants {
        if lock != Some(g.lock) {
            lock = Some(g.lock);
            open.clear();
        }
        open.retain(|o| o.released_us > g.granted_us);
        if !conflict::admits(g.share, open.iter().map(|o| o.share)) {
            let first = open.iter().max_by_key(|o| o.released_us).copied();
            found.extend(first.map(|first| Overlap { first, second: g }));
        }
        open.push(g);
    }
    found
}

/// Grants whose fencing token is not greater than every token granted before on the same
/// lock (must be 0: tokens strictly increase in grant order). A reader's token need only
/// exceed every earlier writer's (readers admitted together may share one), and a semaphore's
/// permits are not ordered against each other: each is a lease of its own.
pub fn token_order_violations(grants: &(impl GrantPasses + ?Sized)) -> u64 {
    let mut violations = 0;
    let (mut max_any, mut max_alone): (Option<u64>, Option<u64>) = (None, None);
    for (prev, g) in with_previous(grants) {
        if prev.is_none() {
            (max_any, max_alone) = (None, None);
        }
        let bound = match g.share {
            Share::Exclusive | Share::Write => max_any,
            Share::Read => max_alone,
            Share::Permits { .. } => None,
        };
        if bound.is_some_and(|m| g.token <= m) {
            violations += 1;
        }
        max_any = Some(max_any.map_or(g.token, |m| m.max(g.token)));
        if g.share.is_exclusive() {
            max_alone = Some(max_alone.map_or(g.token, |m| m.max(g.token)));
        }
    }
    violations
}

/// Store requests, split by kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OpCount {
    /// Reads.
    pub reads: u64,
    /// Writes.
    pub writes: u64,
    /// Deletes.
    pub deletes: u64,
    /// Lightweight transactions.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cas: u64,
    /// SERIAL reads.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub serial_reads: u64,
    /// All.
    pub total: u64,
}

impl From<&lock_core::embedded::OpCounts> for OpCount {
    fn from(c: &lock_core::embedded::OpCounts) -> Self {
        OpCount {
            reads: c.reads,
            writes: c.writes,
            deletes: c.deletes,
            cas: c.cas,
            serial_reads: c.serial_reads,
            total: c.total(),
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The load a run put on the store. Every field is `None` (`null` in JSON, "n/a" in tables)
/// when the backend's requests are not counted (an engine whose `counts_requests` is false;
/// every engine of this crate counts them).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreLoad {
    /// Every request of the run (contenders, leases, time service).
    pub ops: Option<OpCount>,
    /// Requests per grant (of the window).
    pub ops_per_grant: Option<f64>,
    /// Requests per second of the run.
    pub ops_per_second: Option<f64>,
    /// Round trips between coordinator and replicas per grant: one per plain request plus the
    /// Paxos phases inside lightweight transactions. `None` where the Paxos phases are not
    /// seen (lightweight transactions on a real cluster) or requests are not counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_trips_per_grant: Option<f64>,
    /// Requests per table.
    pub per_table: BTreeMap<String, OpCount>,
    /// Sessions (leases, server sessions) the contenders' clients opened, setup included, by
    /// the window's end: one per contender, or N with `--sessions N`, plus any opened again
    /// after one was lost; left out where the engine has no sessions to count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions_opened: Option<u64>,
    /// Tombstones the run's reads scanned, when the engine knows (the embedded store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstones: Option<TombstoneCounts>,
    /// The same per table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tombstones_per_table: BTreeMap<String, TombstoneCounts>,
}

/// Tombstones scanned per read (Cassandra logs a warning past 1,000 in one read and fails the
/// read past 100,000).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TombstoneCounts {
    /// Reads counted.
    pub reads: u64,
    /// Median tombstones scanned by a read (within 3.2%).
    pub per_read_p50: u64,
    /// Most tombstones one read scanned.
    pub per_read_max: u64,
    /// Mean tombstones scanned by a read.
    pub per_read_mean: f64,
    /// Reads over the warning threshold.
    pub reads_over_warning: u64,
    /// Reads that failed past the failure threshold.
    pub reads_failed: u64,
}

impl TombstoneCounts {
    /// The figures of the store's statistics.
    pub fn of(s: &lock_core::embedded::TombstoneStats) -> Self {
        TombstoneCounts {
            reads: s.reads,
            per_read_p50: s.p50(),
            per_read_max: s.max,
            per_read_mean: round4(s.mean()),
            reads_over_warning: s.warned,
            reads_failed: s.failed,
        }
    }
}

/// The tombstone statistics of every table of `counters` together.
pub fn all_tombstones(
    counters: &lock_core::embedded::StoreCounters,
) -> lock_core::embedded::TombstoneStats {
    let mut all = lock_core::embedded::TombstoneStats::default();
    for t in counters.tombstones.values() {
        all.merge(t);
    }
    all
}

/// The tombstone figures of `counters`, all tables together and per table; `None` when the
/// engine counts no tombstones.
pub fn tombstone_counts(
    counters: &lock_core::embedded::StoreCounters,
) -> (Option<TombstoneCounts>, BTreeMap<String, TombstoneCounts>) {
    if counters.tombstones.is_empty() {
        return (None, BTreeMap::new());
    }
    let all = all_tombstones(counters);
    let per_table =
        counters.tombstones.iter().map(|(t, s)| (t.clone(), TombstoneCounts::of(s))).collect();
    (Some(TombstoneCounts::of(&all)), per_table)
}

/// Store load from the backend's counters, read at the end of the window that had `grants`
/// grants and lasted `duration_us`.
pub fn store_load(
    counters: &lock_core::embedded::StoreCounters,
    grants: usize,
    duration_us: u64,
) -> StoreLoad {
    let all = counters.total();
    // Paxos phases are counted only by a store that runs them (the embedded one).
    let round_trips_known = all.cas + all.serial_reads == 0 || all.paxos_round_trips > 0;
    let ops = OpCount::from(&all);
    let (tombstones, tombstones_per_table) = tombstone_counts(counters);
    StoreLoad {
        tombstones,
        tombstones_per_table,
        ops_per_grant: (grants > 0).then(|| round4(ops.total as f64 / grants as f64)),
        round_trips_per_grant: (grants > 0 && round_trips_known)
            .then(|| round4(all.round_trips() as f64 / grants as f64)),
        ops_per_second: Some(if duration_us == 0 {
            0.0
        } else {
            round4(ops.total as f64 / (duration_us as f64 / 1e6))
        }),
        per_table: counters.per_table.iter().map(|(t, c)| (t.clone(), c.into())).collect(),
        sessions_opened: None,
        ops: Some(ops),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_grant as g;

    /// The overtake pairs as first counted: every lock's requests in grant order, sorted.
    /// Pairs `i < j` with `xs[i] > xs[j]` (strictly), by merge sort; sorts `xs`.
    fn count_inversions(xs: &mut [u64]) -> u64 {
        let n = xs.len();
        if n < 2 {
            return 0;
        }
        let mid = n / 2;
        let mut count = count_inversions(&mut xs[..mid]) + count_inversions(&mut xs[mid..]);
        let mut merged = Vec::with_capacity(n);
        let (mut i, mut j) = (0, mid);
        while i < mid && j < n {
            if xs[i] <= xs[j] {
                merged.push(xs[i]);
                i += 1;
            } else {
                // Every remaining left element is greater than xs[j].
                count += (mid - i) as u64;
                merged.push(xs[j]);
                j += 1;
            }
        }
        merged.extend_from_slice(&xs[i..mid]);
        merged.extend_from_slice(&xs[j..n]);
        xs.copy_from_slice(&merged);
        count
    }

    /// Three contenders on one lock, handed over in request order.
    fn fifo() -> Vec<Grant> {
        vec![
            g(0, 0, 0, 10, 20, 1),
            g(0, 1, 5, 25, 35, 2),
            g(0, 2, 6, 40, 50, 3),
            g(0, 0, 30, 55, 60, 4),
        ]
    }

    #[test]
    fn handoff_gaps_count_only_waiting_successors() {
        // 0->1: 1 asked at 5 < 20: gap 5. 1->2: 6 < 35: gap 5. 2->0: 30 < 50: gap 5.
        assert_eq!(handoff_gaps(&fifo()), vec![5, 5, 5]);
        // A successor that asked after the release is not a handoff.
        let idle = vec![g(0, 0, 0, 10, 20, 1), g(0, 1, 30, 40, 50, 2)];
        assert!(handoff_gaps(&idle).is_empty());
        // Locks are separate.
        let two = vec![g(0, 0, 0, 10, 20, 1), g(1, 1, 0, 22, 30, 1)];
        assert!(handoff_gaps(&two).is_empty());
        let s = handoff_stats(&[1000, 2000, 3000, 10_000], 1000.0, Some(2000.0));
        assert_eq!(s.count, 4);
        assert_eq!(s.p50_ms, 2.0);
        assert_eq!(s.p50_round_trips, Some(2.0));
        assert_eq!(s.mean_round_trips, Some(4.0));
        assert_eq!(s.ratio_to_ideal, Some(1.0));
        assert_eq!(handoff_stats(&[1000], 0.0, None).p50_round_trips, None);
    }

    #[test]
    fn by_lock_borrows_a_sorted_log_and_sorts_any_other() {
        let mut log = fifo();
        log.extend([g(1, 2, 0, 12, 30, 1), g(1, 0, 0, 31, 40, 2)]);
        let sorted = by_lock(&log);
        assert!(sorted.values().all(|l| matches!(l, Cow::Borrowed(_))));
        let mut shuffled = log.clone();
        shuffled.reverse();
        let owned = by_lock(&shuffled);
        assert!(owned.values().all(|l| matches!(l, Cow::Owned(_))));
        assert_eq!(sorted, owned);
        assert_eq!(sorted[&1].iter().map(|g| g.contender).collect::<Vec<_>>(), [2, 0]);
        // Equal grant instants are ordered by release, then by contender.
        let ties = [g(0, 1, 0, 10, 30, 2), g(0, 0, 0, 10, 20, 1)];
        assert_eq!(by_lock(&ties)[&0].iter().map(|g| g.contender).collect::<Vec<_>>(), [0, 1]);
    }

    #[test]
    fn jain_index_bounds() {
        assert_eq!(jain_index(&[5, 5, 5, 5]), Some(1.0));
        assert_eq!(jain_index(&[8, 0, 0, 0]), Some(0.25));
        assert_eq!(jain_index(&[0, 0]), None);
        assert_eq!(jain_index(&[]), None);
        let j = jain_index(&[1, 2, 3]).unwrap();
        assert!((j - 36.0 / 42.0).abs() < 1e-12);
        assert_eq!(grants_per_contender(&fifo(), 4), vec![2, 1, 1, 0]);
    }

    #[test]
    fn longest_run_finds_bursts() {
        assert_eq!(longest_run(&fifo()).length, 1);
        let burst = vec![
            g(0, 1, 0, 1, 2, 1),
            g(0, 0, 0, 3, 4, 2),
            g(0, 0, 4, 5, 6, 3),
            g(0, 0, 6, 7, 8, 4),
            g(0, 1, 0, 9, 10, 5),
            g(1, 2, 0, 1, 2, 1),
            g(1, 2, 2, 3, 4, 2),
        ];
        assert_eq!(longest_run(&burst), LongestRun { length: 3, contender: 0, lock: 0 });
        assert_eq!(longest_run(&[]).length, 0);
    }

    #[test]
    fn overtakes_count_inversions_of_request_order() {
        let o = overtakes(&fifo());
        assert_eq!((o.pairs, o.overtaken_grants), (0, 0));
        // Contender 0 re-takes (asked at 30) before 1 (asked at 5) and 2 (asked at 6).
        let unfair = vec![
            g(0, 0, 0, 10, 20, 1),
            g(0, 0, 30, 40, 50, 2),
            g(0, 1, 5, 55, 60, 3),
            g(0, 2, 6, 65, 70, 4),
        ];
        let o = overtakes(&unfair);
        assert_eq!(o.pairs, 2);
        assert_eq!(o.overtaken_grants, 2);
        assert_eq!(o.overtaken_fraction, 0.5);
        // Equal request times are no overtake.
        assert_eq!(overtakes(&[g(0, 1, 5, 10, 11, 1), g(0, 0, 5, 12, 13, 2)]).pairs, 0);
        let mut xs = vec![3, 1, 2, 5, 4];
        assert_eq!(count_inversions(&mut xs), 3);
        assert_eq!(xs, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn the_passes_agree_with_judging_each_lock_list_whole() {
        use lock_core::order::overtaken_in_line;
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for round in 0..300 {
            // Coarse instants: ties, holds of length 0, long and short waits, two locks.
            let grants: Vec<Grant> = (0..rng.random_range(0..60))
                .map(|i| {
                    let granted = rng.random_range(0..100u64);
                    let requested = granted.saturating_sub(rng.random_range(0..[3, 40][i % 2]));
                    let released = granted + rng.random_range(0..6);
                    let queued =
                        rng.random_bool(0.5).then(|| rng.random_range(requested..=granted));
                    let lock = rng.random_range(0..2);
                    let grant = g(lock, i as u32 % 7, requested, granted, released, i as u64);
                    Grant { queued_us: queued, ..grant }
                })
                .collect();
            let locks = by_lock(&grants);
            let (mut pairs, mut overtaken, mut in_line, mut gaps) = (0, 0, 0, Vec::new());
            for list in locks.values() {
                pairs +=
                    count_inversions(&mut list.iter().map(|g| g.requested_us).collect::<Vec<_>>());
                let began = list.iter().map(|g| (g.requested_us, Some(g.requested_us)));
                overtaken += overtaken_in_line(began).len() as u64;
                let placed = list
                    .iter()
                    .map(|g| (g.requested_us, Some(g.queued_us.unwrap_or(g.requested_us))));
                in_line += overtaken_in_line(placed).len() as u64;
                for pair in list.windows(2) {
                    let (prev, next) = (pair[0], pair[1]);
                    if next.requested_us < prev.released_us && next.granted_us >= prev.released_us {
                        gaps.push(next.granted_us - prev.released_us);
                    }
                }
            }
            let o = overtakes(&grants);
            let got =
                (o.pairs, o.overtaken_grants, o.in_line.map_or(in_line, |l| l.overtaken_grants));
            assert_eq!(got, (pairs, overtaken, in_line), "round {round}: {grants:?}");
            assert_eq!(handoff_gaps(&grants), gaps, "round {round}");
            let ideal = Some(3.0);
            assert_eq!(
                handoff(&grants, 2.0, ideal),
                handoff_stats(&gaps, 2.0, ideal),
                "round {round}"
            );
        }
    }

    #[test]
    fn overtakes_in_line_count_only_requests_that_began_after_a_place_was_fixed() {
        let placed = |g: Grant, q: u64| Grant { queued_us: Some(q), ..g };
        // Without places, no in-line figure at all.
        assert_eq!(overtakes(&fifo()).in_line, None);
        // 1 asked at 5 and 2 at 6; 2's ask reached the lock first (placed at 7, 1 at 8).
        // By request time 1 was overtaken; in line it was not: 2 was placed before 1.
        let reordered = vec![
            placed(g(0, 0, 0, 1, 20, 1), 1),
            placed(g(0, 2, 6, 21, 30, 2), 7),
            placed(g(0, 1, 5, 31, 40, 3), 8),
        ];
        let o = overtakes(&reordered);
        assert_eq!(o.overtaken_grants, 1);
        assert_eq!(o.in_line, Some(InLine { overtaken_grants: 0, overtaken_fraction: 0.0 }));
        // 3 asked at 9, after 1 was placed at 8, and was served before it: a real overtake.
        let unfair = vec![
            placed(g(0, 0, 0, 1, 20, 1), 1),
            placed(g(0, 3, 9, 21, 30, 2), 10),
            placed(g(0, 1, 5, 31, 40, 3), 8),
        ];
        let o = overtakes(&unfair);
        assert_eq!(o.in_line.map(|l| l.overtaken_grants), Some(1));
        // A grant without a place is judged by its request, as before.
        let mixed =
            vec![placed(g(0, 0, 0, 1, 20, 1), 1), g(0, 2, 6, 21, 30, 2), g(0, 1, 5, 31, 40, 3)];
        assert_eq!(overtakes(&mixed).in_line.map(|l| l.overtaken_grants), Some(1));
    }

    #[test]
    fn safety_checks_find_overlaps_and_token_regressions() {
        assert_eq!(overlapping_holds(&fifo()), 0);
        assert_eq!(token_order_violations(&fifo()), 0);
        let bad = vec![
            g(0, 0, 0, 10, 30, 1),
            g(0, 1, 0, 20, 40, 2),
            g(0, 2, 0, 45, 50, 2),
            g(1, 3, 0, 20, 25, 1),
        ];
        assert_eq!(overlapping_holds(&bad), 1);
        assert_eq!(token_order_violations(&bad), 1);
        // Back-to-back holds (release and grant in the same microsecond) do not overlap.
        assert_eq!(overlapping_holds(&[g(0, 0, 0, 10, 20, 1), g(0, 1, 0, 20, 30, 2)]), 0);
    }

    #[test]
    fn latency_percentiles_and_throughput() {
        let grants: Vec<Grant> =
            (0..100).map(|i| g(0, 0, 0, (i + 1) * 1000, (i + 1) * 1000 + 1, i + 1)).collect();
        let s = latency_stats(&latency_histogram(&grants));
        assert_eq!(s.count, 100);
        assert!((s.p50_ms - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.p99_ms - 99.0).abs() < 0.1, "{s:?}");
        assert!((s.max_ms - 100.0).abs() < 0.1, "{s:?}");
        let cdf = latency_cdf(&latency_histogram(&grants));
        assert_eq!(cdf.first().unwrap().quantile, 0.0);
        assert_eq!(cdf.last().unwrap().quantile, 1.0);
        assert!(cdf.windows(2).all(|w| w[0].latency_ms <= w[1].latency_ms));
        assert_eq!(grants_per_second_per_lock(&grants, 10_000_000, 2), 5.0);
        // Grants after the window (the drain) do not count.
        assert_eq!(grants_in_window(&grants, 50_000), 50);
        assert_eq!(grants_per_second_per_lock(&grants, 50_000, 1), 1000.0);
        assert_eq!(latency_stats(&new_histogram()), LatencyStats::default());
    }

    #[test]
    fn a_latency_histogram_grows_to_what_it_records_and_saturates_at_an_hour() {
        let bounded = || Histogram::<u64>::new_with_max(HISTOGRAM_MAX_US, 3).unwrap();
        let mut h = new_histogram();
        let mut reference = bounded();
        for us in [1, 999, 20_000, 1_500_000] {
            record_latency(&mut h, us);
            reference.saturating_record(us);
        }
        // Up to a second and a half: about half of an hour-bounded histogram's counts.
        assert!(
            h.distinct_values() * 3 < reference.distinct_values() * 2,
            "{}",
            h.distinct_values()
        );
        assert_eq!(latency_stats(&h), latency_stats(&reference));
        assert_eq!(latency_cdf(&h), latency_cdf(&reference));
        // Past an hour: the same bucket as the bounded histogram's saturation.
        record_latency(&mut h, 2 * HISTOGRAM_MAX_US);
        reference.saturating_record(2 * HISTOGRAM_MAX_US);
        assert_eq!(latency_stats(&h), latency_stats(&reference));
        assert_eq!(h.max(), reference.max());
    }

    #[test]
    fn store_load_divides_by_grants_and_time() {
        let mut counters = lock_core::embedded::StoreCounters::default();
        counters.per_table.insert("t".into(), lock_core::embedded::OpCounts::new(6, 3, 1));
        let l = store_load(&counters, 5, 2_000_000);
        assert_eq!(l.ops.as_ref().map(|o| o.total), Some(10));
        assert_eq!(l.ops_per_grant, Some(2.0));
        assert_eq!(l.ops_per_second, Some(5.0));
        let uncounted = serde_json::to_value(StoreLoad::default()).unwrap();
        assert!(uncounted["ops"].is_null() && uncounted["ops_per_second"].is_null());
        assert_eq!(store_load(&counters, 0, 0).ops_per_grant, None);
    }
}
