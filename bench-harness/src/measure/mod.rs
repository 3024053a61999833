//! Measuring: from a run's raw record ([`log`]) to every figure the harness reports.
//!
//! - [`log`]: what the contenders leave behind: the grant log, per-contender latencies and
//!   failures, the store's request counters;
//! - [`grant`]: one acquisition in the grant log; [`grant_log`]: a run's grant log, sorted
//!   on disk;
//! - [`latencies`]: a contender's latencies, as a histogram of the buckets it hit;
//! - [`metrics`]: pure functions over the grant log (latency, throughput, handoff gaps,
//!   fairness, store load, safety), unit-tested;
//! - [`passes`]: the grant log read in passes, lock by lock in grant order, which the
//!   metrics over a whole log fold instead of copying it; [`quantiles`]: exact quantiles of
//!   values read twice;
//! - [`safety`]: safety under faults from the grant log, the fenced resource's writes and the
//!   fault windows (the checker recomputes it from the CSV files);
//! - [`spool`]: logs kept on disk, read back in order and sorted there;
//! - [`summary`]: the one result contract, [`summary::Summary`], that the console table,
//!   `summary.json`, the charts and the experiments read.

pub mod conflict;
pub mod grant;
pub mod grant_log;
pub mod latencies;
pub mod log;
pub mod metrics;
pub mod passes;
pub mod quantiles;
pub mod safety;
pub mod shares;
pub mod spool;
pub mod summary;
