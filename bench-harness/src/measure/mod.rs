//! Measuring: from a run's raw record ([`log`]) to every figure the harness reports.
//!
//! - [`log`]: what the contenders leave behind: the grant log, per-contender latencies and
//!   failures, the store's request counters;
//! - [`latencies`]: a contender's latencies, as a histogram of the buckets it hit;
//! - [`metrics`]: pure functions over the grant log (latency, throughput, handoff gaps,
//!   fairness, store load, safety), unit-tested;
//! - [`safety`]: safety under faults from the grant log, the fenced resource's writes and the
//!   fault windows (the checker recomputes it from the CSV files);
//! - [`spool`]: logs kept on disk and read back in order (the fenced resource's);
//! - [`summary`]: the one result contract, [`summary::Summary`], that the console table,
//!   `summary.json`, the charts and the experiments read.

pub mod conflict;
pub mod latencies;
pub mod log;
pub mod metrics;
pub mod safety;
pub mod shares;
pub mod spool;
pub mod summary;
