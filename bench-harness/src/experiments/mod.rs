//! Experiments: many runs, one question each, written into `results/`.
//!
//! - [`sweep`]: the thesis's benchmark, regenerated: every algorithm against the number of
//!   contenders, the poll interval and clock skew, in simulated time (`bench-harness sweep`,
//!   `scripts/regenerate-results.sh`);
//! - [`compare`]: the engines side by side in wall time (`bench-harness engines`,
//!   `scripts/compare-engines.sh`).

pub mod compare;
pub mod sweep;
