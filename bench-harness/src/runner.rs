//! The runner: N contenders on one algorithm, each looping request → hold → release → think
//! until the run's duration ends.
//!
//! Each algorithm runs on a fresh backend (a fresh embedded store with the run's seed), in its
//! own tokio runtime: in simulated time a current-thread runtime with a paused clock, so that
//! the store's latencies, the holds and the thinks cost no wall time and the same seed gives
//! the same grant log; in wall time a two-worker multi-thread runtime.
//!
//! In simulated time the tokio clock is dilated ([`crate::config::SIMULATED_TIME_SCALE`]):
//! durations going in are multiplied, times coming out divided, so that the model keeps
//! microsecond resolution despite tokio's millisecond timers.
//!
//! The run's clock starts once the backend and every contender's locker are ready; every time
//! in the grant log is microseconds since then. When the duration ends contenders make no new
//! request, but the requests already waiting are **drained**: they keep waiting, for at most
//! another duration, so that the longest waits (the shadow lock's) are measured instead of
//! cut off. A request still waiting after the drain is given up (the lock's own timeout) and
//! reported as unfinished. Throughput and store load count only the run's window (grants
//! granted before its end, requests sent before it: the counters are read at the end).

use crate::backend::Backend;
use crate::config::{ClockMode, RunConfig};
use crate::dist::Dist;
use crate::metrics::{new_histogram, Grant};
use crate::registry::{AlgorithmEntry, AlgorithmSettings, ContenderSetup};
use anyhow::{anyhow, Context};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use lock_core::embedded::StoreCounters;
use lock_core::{LockError, Locker};
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

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
}

impl ErrorCounts {
    fn note(&mut self, e: &LockError) {
        self.first_error.get_or_insert_with(|| e.to_string());
    }

    fn add(&mut self, other: &ErrorCounts) {
        self.lock_errors += other.lock_errors;
        self.release_errors += other.release_errors;
        self.leases_lost_while_holding += other.leases_lost_while_holding;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }

    /// True when nothing failed.
    pub fn is_clean(&self) -> bool {
        self.lock_errors == 0 && self.release_errors == 0 && self.leases_lost_while_holding == 0
    }
}

/// What one contender did.
#[derive(Debug, Clone)]
pub struct ContenderOutcome {
    /// Contender index.
    pub index: u32,
    /// The lock it asked for.
    pub lock: u32,
    /// Its clock skew.
    pub skew_us: i64,
    /// Its acquisition latencies, in microseconds.
    pub histogram: Histogram<u64>,
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
    /// The grant log, sorted by lock, then grant time, then contender.
    pub grants: Vec<Grant>,
    /// Per contender, in index order.
    pub contenders: Vec<ContenderOutcome>,
    /// The store's request counters at the end of the run's window (before the drain), when
    /// the backend counts.
    pub counters: Option<StoreCounters>,
    /// The run's window on its clock, in microseconds.
    pub duration_us: u64,
    /// When the last contender finished (the drain included), in microseconds.
    pub finished_us: u64,
    /// How long the run took in wall time (not part of any result file: it varies).
    pub wall_time: Duration,
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

    /// All contenders' histograms merged.
    pub fn histogram(&self) -> Histogram<u64> {
        let mut h = new_histogram();
        for c in &self.contenders {
            // Same bounds everywhere: adding cannot fail.
            let _ = h.add(&c.histogram);
        }
        h
    }
}

/// A tokio runtime for `clock`.
pub fn runtime(clock: ClockMode) -> anyhow::Result<tokio::runtime::Runtime> {
    let rt = match clock {
        ClockMode::Simulated => tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build(),
        ClockMode::Wall => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build(),
    };
    rt.context("cannot start the tokio runtime")
}

/// Runs `entry` under `cfg` in a runtime of its own. `progress`, in wall time, follows the
/// run's clock (its length is set to the duration in milliseconds).
pub fn run_algorithm(
    cfg: &RunConfig,
    entry: &'static AlgorithmEntry,
    progress: Option<&ProgressBar>,
) -> anyhow::Result<RunOutcome> {
    let wall = std::time::Instant::now();
    let rt = runtime(cfg.clock)?;
    let mut outcome = rt.block_on(run_async(cfg, entry, progress))?;
    // Leases, the time service and in-flight store messages die with the runtime.
    drop(rt);
    outcome.wall_time = wall.elapsed();
    Ok(outcome)
}

struct Plan {
    scale: u32,
    index: usize,
    lock: usize,
    lock_id: String,
    skew_us: i64,
    seed: u64,
    hold: Dist,
    think: Dist,
    start: Instant,
    end: Instant,
    drain_end: Instant,
}

/// Model microseconds between two tokio instants.
fn us_between(scale: u32, start: Instant, t: Instant) -> u64 {
    t.saturating_duration_since(start).as_micros() as u64 / scale as u64
}

/// Runs `entry` under `cfg` on the current runtime.
pub async fn run_async(
    cfg: &RunConfig,
    entry: &'static AlgorithmEntry,
    progress: Option<&ProgressBar>,
) -> anyhow::Result<RunOutcome> {
    cfg.validate().map_err(|e| anyhow!(e))?;
    let backend = Backend::open(cfg).await.map_err(|e| anyhow!(e))?;
    let skews = cfg.contender_skews();
    let settings = AlgorithmSettings::of(cfg);
    let mut lockers: Vec<Arc<dyn Locker>> = Vec::with_capacity(cfg.threads);
    for (index, &skew) in skews.iter().enumerate() {
        let (client, ctx) = backend.contender(cfg, index, skew);
        let locker = (entry.build)(ContenderSetup {
            index,
            client,
            ctx,
            settings,
        })
        .await
        .with_context(|| {
            format!(
                "cannot set up contender {index} of the {} algorithm",
                entry.name
            )
        })?;
        lockers.push(locker);
    }

    let scale = cfg.time_scale();
    let start = Instant::now();
    let end = start + cfg.scaled(cfg.duration);
    let drain_end = end + cfg.scaled(cfg.duration);
    let mut tasks = Vec::with_capacity(cfg.threads);
    for (index, locker) in lockers.into_iter().enumerate() {
        let lock = cfg.lock_of(index);
        let plan = Plan {
            scale,
            index,
            lock,
            lock_id: RunConfig::lock_id(lock),
            skew_us: skews[index],
            seed: cfg.contender_seed(index) ^ 0xC0DE_C0DE,
            hold: cfg.hold,
            think: cfg.think,
            start,
            end,
            drain_end,
        };
        tasks.push(tokio::spawn(contender(locker, plan)));
    }

    // Only in wall time: in simulated time an extra timer task is pure overhead.
    let ticker = match (cfg.clock, progress) {
        (ClockMode::Wall, Some(bar)) => {
            let bar = bar.clone();
            bar.set_length(cfg.duration.as_millis() as u64);
            Some(tokio::spawn(async move {
                loop {
                    bar.set_position(start.elapsed().as_millis() as u64);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }))
        }
        _ => None,
    };

    // The counters as they stand when the window ends; the drain's requests are not load of
    // the measured window.
    let snapshot = {
        let counters = backend.counters_handle();
        tokio::spawn(async move {
            tokio::time::sleep_until(end).await;
            counters.map(|c| c.counters())
        })
    };

    let mut grants = Vec::new();
    let mut contenders = Vec::with_capacity(cfg.threads);
    for task in tasks {
        let (mut outcome_grants, outcome) = task.await.context("a contender task panicked")?;
        grants.append(&mut outcome_grants);
        contenders.push(outcome);
    }
    if let Some(t) = ticker {
        t.abort();
    }
    let finished_us = us_between(scale, start, Instant::now());
    if Instant::now() < end {
        tokio::time::sleep_until(end).await;
    }
    let counters = snapshot
        .await
        .context("the counter snapshot task panicked")?;
    grants.sort_by_key(|g| (g.lock, g.granted_us, g.contender));
    Ok(RunOutcome {
        algorithm: entry.name,
        grants,
        contenders,
        counters,
        duration_us: cfg.duration.as_micros() as u64,
        finished_us,
        wall_time: Duration::ZERO,
    })
}

async fn contender(locker: Arc<dyn Locker>, plan: Plan) -> (Vec<Grant>, ContenderOutcome) {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let scale = plan.scale;
    let us_since = |start: Instant, t: Instant| us_between(scale, start, t);
    let mut grants = Vec::new();
    let mut out = ContenderOutcome {
        index: plan.index as u32,
        lock: plan.lock as u32,
        skew_us: plan.skew_us,
        histogram: new_histogram(),
        unfinished_since_us: None,
        errors: ErrorCounts::default(),
    };
    loop {
        let requested = Instant::now();
        if requested >= plan.end {
            break;
        }
        match locker
            .lock(&plan.lock_id, Some(plan.drain_end - requested))
            .await
        {
            Ok(guard) => {
                let granted = Instant::now();
                out.histogram
                    .saturating_record(us_since(requested, granted));
                tokio::time::sleep(plan.hold.sample(&mut rng) * scale).await;
                if guard.is_lost() {
                    out.errors.leases_lost_while_holding += 1;
                }
                let token = guard.token();
                let released = Instant::now();
                if let Err(e) = guard.release().await {
                    out.errors.release_errors += 1;
                    out.errors.note(&e);
                }
                grants.push(Grant {
                    lock: plan.lock as u32,
                    contender: plan.index as u32,
                    requested_us: us_since(plan.start, requested),
                    granted_us: us_since(plan.start, granted),
                    released_us: us_since(plan.start, released),
                    token,
                });
                tokio::time::sleep(plan.think.sample(&mut rng) * scale).await;
            }
            Err(LockError::Timeout { .. }) => {
                out.unfinished_since_us = Some(us_since(plan.start, requested));
                break;
            }
            Err(e) => {
                out.errors.lock_errors += 1;
                out.errors.note(&e);
                // Never spin at one instant on a persistent failure.
                let pause = plan.think.sample(&mut rng).max(Duration::from_millis(1)) * scale;
                tokio::time::sleep(pause).await;
            }
        }
    }
    (grants, out)
}
