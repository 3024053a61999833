//! The result contract: [`Summary`] is what a run measured, in one serde structure. The
//! console table, `summary.json`, the charts and the sweep all read it; nothing else carries
//! results between measuring and showing them. It holds no wall-clock readings, so the same
//! seed gives a byte-identical file.

use super::log::{ErrorCounts, RunOutcome};
use super::metrics::{
    self, CdfPoint, HandoffStats, LatencyStats, LongestRun, Overtakes, StoreLoad,
};
use super::safety::{self, SafetyFigures};
use super::shares::{self, ShareFigures};
use crate::config::RunConfig;
use crate::engines::Algorithm;
use serde::{Deserialize, Serialize};

/// Version of the `summary.json` layout; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything a run produced, one entry per algorithm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Layout version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// `bench-harness <version>`.
    pub tool: String,
    /// The settings, whole.
    pub config: RunConfig,
    /// Values derived from the settings that the metrics use.
    pub derived: Derived,
    /// One report per algorithm, in the order they ran.
    pub results: Vec<AlgorithmReport>,
}

impl Summary {
    /// An empty summary for `cfg`.
    pub fn new(cfg: &RunConfig) -> Self {
        Summary {
            schema_version: SCHEMA_VERSION,
            tool: format!("bench-harness {}", env!("CARGO_PKG_VERSION")),
            config: cfg.redacted(),
            derived: Derived::of(cfg),
            results: Vec::new(),
        }
    }

    /// The report of `algorithm`.
    pub fn result(&self, algorithm: &str) -> Option<&AlgorithmReport> {
        self.results.iter().find(|r| r.algorithm == algorithm)
    }
}

/// Values derived from the settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Derived {
    /// Mean round trip to one replica of the embedded store's model (`fixed + jitter / 2`),
    /// the unit of handoff gaps in round trips; `None` on real servers (not measured).
    pub mean_round_trip_ms: Option<f64>,
    /// Mean hold time.
    pub mean_hold_ms: f64,
    /// Mean think time.
    pub mean_think_ms: f64,
    /// How much slower than the model the tokio clock ran (simulated time is dilated so that
    /// sub-millisecond delays survive tokio's millisecond timers; see
    /// [`crate::config::SIMULATED_TIME_SCALE`]).
    pub time_scale: u32,
}

impl Derived {
    /// Derived values of `cfg`.
    pub fn of(cfg: &RunConfig) -> Self {
        let ms = |d: std::time::Duration| d.as_micros() as f64 / 1000.0;
        Derived {
            mean_round_trip_ms: cfg.modelled_round_trip().map(ms),
            mean_hold_ms: ms(cfg.hold.mean()),
            mean_think_ms: ms(cfg.think.mean()),
            time_scale: cfg.time_scale(),
        }
    }
}

/// Grants per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// Grants per second per lock.
    pub grants_per_second_per_lock: f64,
    /// Grants per second over all locks.
    pub grants_per_second: f64,
}

/// How evenly the lock was shared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Fairness {
    /// Jain's index over grants per contender (1 is perfectly even, 1/n is one contender
    /// getting everything); `None` without grants.
    pub jain_index: Option<f64>,
    /// The longest run of consecutive grants to one contender.
    pub longest_run: LongestRun,
    /// Later requests granted before earlier ones.
    pub overtakes: Overtakes,
    /// Fewest grants a contender got.
    pub min_grants_per_contender: u64,
    /// Most grants a contender got.
    pub max_grants_per_contender: u64,
    /// Contenders that got no grant at all.
    pub starved_contenders: u64,
}

/// Safety: what must be zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Safety {
    /// Holds that began before the previous hold of the same lock ended.
    pub overlapping_holds: u64,
    /// Grants whose fencing token did not exceed every earlier token of the lock; `None`
    /// (null) for an algorithm that hands out no fencing token (plain Redlock).
    pub token_order_violations: Option<u64>,
}

impl Safety {
    /// The token-order violations for a table: their count, or "n/a" without tokens.
    pub fn token_violations_text(&self) -> String {
        self.token_order_violations.map_or_else(|| "n/a".into(), |n| n.to_string())
    }
}

/// One contender's share.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContenderReport {
    /// Contender index.
    pub contender: u32,
    /// Its lock; left out when each acquire drew its lock ([`crate::keys::KeyDist`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<u32>,
    /// Its clock skew.
    pub skew_us: i64,
    /// Grants it got.
    pub grants: u64,
    /// Its median acquisition latency.
    pub p50_ms: f64,
    /// Its 99th percentile.
    pub p99_ms: f64,
    /// Its longest wait.
    pub max_ms: f64,
    /// Its request still waiting at the end, if any: since when.
    pub unfinished_since_us: Option<u64>,
}

/// Everything measured for one algorithm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AlgorithmReport {
    /// The algorithm.
    pub algorithm: String,
    /// Grants in the run, the drain included.
    pub grants: u64,
    /// Grants granted within the run's window (throughput and store load count these).
    pub grants_in_window: u64,
    /// When the drain ended: the last contender finished, in ms on the run's clock.
    pub finished_ms: f64,
    /// Requests still waiting when the drain ended (given up).
    pub unfinished_requests: u64,
    /// Acquisition latency (HDR histogram over all contenders).
    pub latency: LatencyStats,
    /// Grants per second.
    pub throughput: Throughput,
    /// The lock's own cost of passing from one holder to a waiting one.
    pub handoff: HandoffStats,
    /// Fairness.
    pub fairness: Fairness,
    /// Load on the store (`null` figures when the backend's requests are not counted).
    pub store: StoreLoad,
    /// Must be zero.
    pub safety: Safety,
    /// Safety under faults: overlaps, stale writes to the fenced resource, leases lost,
    /// unavailability ([`super::safety`]).
    #[serde(default)]
    pub fault_safety: SafetyFigures,
    /// What a reader-writer lock, a semaphore or an election measures besides (`--primitive`;
    /// left out for the mutex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<ShareFigures>,
    /// Failures.
    pub errors: ErrorCounts,
    /// The latency CDF, for plotting.
    pub latency_cdf: Vec<CdfPoint>,
    /// Per contender (left out of sweep files).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contenders: Vec<ContenderReport>,
}

impl AlgorithmReport {
    /// The median handoff gap over the algorithm's ideal handoff, if it has one.
    pub fn handoff_ratio(&self) -> Option<f64> {
        self.handoff.ratio_to_ideal
    }

    /// True when both safety counts are zero and the fenced resource accepted no stale write.
    pub fn is_safe(&self) -> bool {
        self.safety.overlapping_holds == 0
            && self.safety.token_order_violations.unwrap_or(0) == 0
            && self.fault_safety.stale_accepted == 0
    }
}

/// Computes every metric of one algorithm's run.
pub fn analyze(cfg: &RunConfig, algorithm: &Algorithm, run: &RunOutcome) -> AlgorithmReport {
    let grants = &run.grants;
    let histogram = run.histogram();
    let per_contender = metrics::grants_per_contender(grants, cfg.threads);
    // Round trips and the ideal handoff are known only for the embedded store's model.
    let round_trip = cfg.modelled_round_trip();
    let round_trip_us = round_trip.map_or(0.0, |rt| rt.as_micros() as f64);
    let ideal_us = algorithm
        .ideal_handoff
        .zip(round_trip)
        .map(|(f, rt)| f(rt, &cfg.settings()).as_micros() as f64);
    let handoff = metrics::handoff(grants, round_trip_us, ideal_us);
    let store = run
        .counters
        .as_ref()
        .map(|c| {
            metrics::store_load(
                c,
                metrics::grants_in_window(grants, run.duration_us),
                run.duration_us,
            )
        })
        .unwrap_or_default();
    let store = metrics::StoreLoad { sessions_opened: run.sessions_opened, ..store };
    let contenders = run
        .contenders
        .iter()
        .map(|c| {
            let s = metrics::latency_stats(&c.latencies.histogram());
            ContenderReport {
                contender: c.index,
                lock: c.lock,
                skew_us: c.skew_us,
                grants: per_contender.get(c.index as usize).copied().unwrap_or(0),
                p50_ms: s.p50_ms,
                p99_ms: s.p99_ms,
                max_ms: s.max_ms,
                unfinished_since_us: c.unfinished_since_us,
            }
        })
        .collect();
    let gps = metrics::grants_per_second_per_lock(grants, run.duration_us, cfg.locks);
    AlgorithmReport {
        algorithm: algorithm.name.to_string(),
        grants: grants.len(),
        grants_in_window: metrics::grants_in_window(grants, run.duration_us) as u64,
        finished_ms: run.finished_us as f64 / 1000.0,
        unfinished_requests: run
            .contenders
            .iter()
            .filter(|c| c.unfinished_since_us.is_some())
            .count() as u64,
        latency: metrics::latency_stats(&histogram),
        throughput: Throughput {
            grants_per_second_per_lock: metrics::round4(gps),
            grants_per_second: metrics::round4(gps * cfg.locks as f64),
        },
        handoff,
        fairness: Fairness {
            jain_index: metrics::jain_index(&per_contender).map(metrics::round4),
            longest_run: metrics::longest_run(grants),
            overtakes: metrics::overtakes(grants),
            min_grants_per_contender: per_contender.iter().copied().min().unwrap_or(0),
            max_grants_per_contender: per_contender.iter().copied().max().unwrap_or(0),
            starved_contenders: per_contender.iter().filter(|&&n| n == 0).count() as u64,
        },
        store,
        safety: Safety {
            overlapping_holds: metrics::overlapping_holds(grants),
            token_order_violations: algorithm
                .fences
                .then(|| metrics::token_order_violations(grants)),
        },
        fault_safety: safety::figures(
            grants,
            run.resource.iter(),
            &run.faults,
            cfg.ttl.as_micros() as u64,
        ),
        shares: shares::figures(cfg.primitive, grants),
        errors: run.errors(),
        latency_cdf: metrics::latency_cdf(&histogram),
        contenders,
    }
}
