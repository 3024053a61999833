//! Running: one algorithm's contenders on its engine, producing the raw record of the run
//! ([`crate::measure::log::RunOutcome`]).
//!
//! - [`contenders`]: N contenders in this process, each looping request → hold → release →
//!   think on a freshly opened engine, in simulated or wall time, with the drain at the end;
//! - [`processes`]: the same contenders spread over P worker processes of this binary against
//!   one shared server, their grant logs merged;
//! - [`resource`]: the fenced resource every critical section writes to.

pub mod contenders;
pub mod nemesis;
pub mod processes;
pub mod resource;
pub mod stamp;

use crate::config::RunConfig;
use crate::engines::Algorithm;
use crate::measure::log::RunOutcome;
use indicatif::ProgressBar;

/// Runs `algorithm` under `cfg`: in this process, or with `--processes P` above 1 in P worker
/// processes. `progress`, in wall time, follows the run's clock.
pub fn run_algorithm(
    cfg: &RunConfig,
    algorithm: &'static Algorithm,
    progress: Option<&ProgressBar>,
) -> anyhow::Result<RunOutcome> {
    if cfg.processes > 1 {
        processes::run_algorithm(cfg, algorithm, progress)
    } else {
        contenders::run_in_process(cfg, algorithm, progress)
    }
}
