//! `bench-harness sweep`: the thesis's benchmark section, regenerated.
//!
//! Three experiments on the embedded store in simulated time, every point a fresh run of the
//! base scenario with one setting changed:
//!
//! 1. **contention**: every algorithm at 1, 2, 4, …, 256 contenders on one lock (above 64
//!    contenders for a shorter time: [`contention_duration`]);
//! 2. **poll interval**: the algorithms that poll (the queue lock) at 16 contenders with poll
//!    intervals from 1 ms to 200 ms;
//! 3. **clock skew**: at 16 contenders with each contender's clock offset uniformly in
//!    ±skew, from 0 to 1 s; the algorithms that order waiters by time run once per time source
//!    (local clock, hybrid logical clock, the GlobalTime service), the others once as a
//!    reference.
//!
//! Points run in parallel on `--jobs` OS threads, each point in a simulation of its
//! own (`lock_core::rt::Simulation`), so the result does not depend on the number of jobs. The
//! charts, `sweep.json` (every point's [`AlgorithmReport`]) and `README.md` (the headline
//! table and the charts) go to `--out` (default `results/`). Nothing written depends on the
//! wall clock: the same seed regenerates the same files.

mod charts;
mod readme;

pub use charts::Figure;
pub use readme::{findings, readme};

use crate::args::ScenarioArgs;
use crate::config::{ClockMode, RunConfig};
use crate::dist::parse_positive_duration;
use crate::engines::{self, Algorithm, TimeSourceKind};
use crate::measure::summary::{analyze, AlgorithmReport};
use crate::report::figures::{holds_of_lock0, Holds};
use crate::report::{files, progress};
use anyhow::{anyhow, Context};
use clap::Args;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The settings of a sweep.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// Output directory (charts, sweep.json, README.md).
    #[arg(short, long, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Contender counts of the contention sweep.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128,256", value_parser = clap::value_parser!(u32).range(1..))]
    pub contenders: Vec<u32>,
    /// Simulated duration of each point (large contender counts get less, see --help of the
    /// README) [default: 60s, 10s with --quick].
    #[arg(short, long, value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// OS threads running sweep points in parallel, each running its own simulation.
    #[arg(short, long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    /// A small sweep (few points, short runs) to check the pipeline.
    #[arg(long)]
    pub quick: bool,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// The base scenario every point varies.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
}

/// Contenders of the poll-interval and skew experiments.
pub const SIDE_CONTENDERS: usize = 16;
/// The contention level of the CDF chart and the headline table.
pub const HEADLINE_CONTENDERS: usize = 64;
/// Contender counts whose owner timelines are drawn.
pub const TIMELINE_CONTENDERS: [usize; 2] = [2, 8];

/// The simulated length of a contention point: the base duration up to
/// [`HEADLINE_CONTENDERS`], then shorter in proportion (`base × 64 / n`, at least a quarter of
/// the base), so that the largest points — whose waiters each poll the store, some reading
/// rows of every contender — stay within the sweep's time budget.
pub fn contention_duration(base: Duration, contenders: usize) -> Duration {
    if contenders <= HEADLINE_CONTENDERS {
        return base;
    }
    (base * HEADLINE_CONTENDERS as u32 / contenders as u32).max(base / 4)
}

/// Poll intervals of the poll-interval experiment, in milliseconds.
pub const POLL_INTERVALS_MS: [u64; 8] = [1, 2, 5, 10, 20, 50, 100, 200];
/// Skews of the skew experiment, in microseconds.
pub const SKEWS_US: [u64; 6] = [0, 100, 1_000, 10_000, 100_000, 1_000_000];

/// Which experiment a point belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Experiment {
    /// Contenders vary.
    Contention,
    /// The poll interval varies.
    PollInterval,
    /// The clock skew varies.
    Skew,
}

/// One measured point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepPoint {
    /// The experiment.
    pub experiment: Experiment,
    /// The line it belongs to: the algorithm, or `algorithm/time source` in the skew
    /// experiment.
    pub series: String,
    /// The varied value: contenders, poll interval in ms, or skew in ms.
    pub x: f64,
    /// Contenders of this point.
    pub threads: usize,
    /// Simulated length of this point.
    #[serde(with = "crate::dist::serde_duration")]
    pub duration: Duration,
    /// The time source of this point.
    pub time_source: TimeSourceKind,
    /// Everything measured (per-contender rows left out; the CDF kept only at the headline
    /// contention level).
    pub report: AlgorithmReport,
}

/// The contents of `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepSummary {
    /// Layout version.
    pub schema_version: u32,
    /// `bench-harness <version>`.
    pub tool: String,
    /// The scenario every point varies.
    pub base: RunConfig,
    /// Every point, by experiment, series and x.
    pub points: Vec<SweepPoint>,
}

impl SweepSummary {
    /// The points of one experiment and series, by x.
    pub fn series(&self, experiment: Experiment, series: &str) -> Vec<&SweepPoint> {
        let mut pts: Vec<&SweepPoint> = self
            .points
            .iter()
            .filter(|p| p.experiment == experiment && p.series == series)
            .collect();
        pts.sort_by(|a, b| a.x.total_cmp(&b.x));
        pts
    }

    /// The series names of an experiment, in first-seen order.
    pub fn series_names(&self, experiment: Experiment) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for p in self.points.iter().filter(|p| p.experiment == experiment) {
            if !names.contains(&p.series) {
                names.push(p.series.clone());
            }
        }
        names
    }
}

/// One run to do.
struct Job {
    experiment: Experiment,
    series: String,
    x: f64,
    cfg: RunConfig,
    algorithm: &'static Algorithm,
    keep_grants: bool,
    /// Rough cost, to start the longest jobs first.
    cost: f64,
}

struct Done {
    point: SweepPoint,
    /// Lock 0's holds, for the owner timelines.
    holds: Option<Holds>,
}

/// The sweep's plan: base scenario, contender counts, side experiments.
pub struct Plan {
    base: RunConfig,
    jobs: Vec<Job>,
}

impl Plan {
    /// Builds the plan of `args`.
    pub fn new(args: &SweepArgs) -> anyhow::Result<Plan> {
        let base = base_scenario(args)?;
        let algorithms =
            engines::resolve(&base.algorithms, base.backend).map_err(|e| anyhow!(e))?;
        let side = if args.quick { 4 } else { SIDE_CONTENDERS };
        let mut jobs = contention_jobs(&base, &algorithms, &contender_levels(args));
        jobs.extend(poll_jobs(&base, &algorithms, side, args.quick));
        jobs.extend(skew_jobs(&base, &algorithms, side, args.quick));
        Ok(Plan { base, jobs })
    }

    /// Number of runs.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// True when there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// The scenario every point varies: the command line's, in simulated time.
fn base_scenario(args: &SweepArgs) -> anyhow::Result<RunConfig> {
    let mut base = RunConfig::on(args.scenario.backend);
    args.scenario.apply(&mut base).map_err(|e| anyhow!(e))?;
    base.clock = ClockMode::Simulated;
    base.duration = args.duration.unwrap_or(if args.quick {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(60)
    });
    anyhow::ensure!(
        base.backend.in_process(),
        "the sweep runs in simulated time, on an engine inside this process (the {} backend is a server)",
        base.backend
    );
    let algorithms = engines::resolve(&base.algorithms, base.backend).map_err(|e| anyhow!(e))?;
    base.algorithms = algorithms.iter().map(|a| a.name.to_string()).collect();
    base.validate().map_err(|e| anyhow!(e))?;
    Ok(base)
}

/// The contender counts of the contention experiment, ascending, each once (a few with
/// `--quick` when the default levels are asked for).
fn contender_levels(args: &SweepArgs) -> Vec<usize> {
    let mut contenders: Vec<usize> = args.contenders.iter().map(|&n| n as usize).collect();
    if args.quick && contenders == [1, 2, 4, 8, 16, 32, 64, 128, 256] {
        contenders = vec![1, 2, 4, 8];
    }
    contenders.sort_unstable();
    contenders.dedup();
    contenders
}

/// A rough cost of a run, to start the longest first: polling readers may read whole rows of
/// every contender, up to quadratic in the contenders.
fn cost(cfg: &RunConfig, algorithm: &Algorithm) -> f64 {
    let polling = if algorithm.uses_poll_interval {
        20.0 / cfg.poll_interval.as_secs_f64().max(1e-3) / 1000.0
    } else {
        0.1
    };
    let n = cfg.threads as f64;
    n * (1.0 + n / 32.0) * cfg.duration.as_secs_f64() * (polling + 0.05)
}

fn job(
    experiment: Experiment,
    series: String,
    x: f64,
    cfg: RunConfig,
    algorithm: &'static Algorithm,
) -> Job {
    Job {
        experiment,
        series,
        x,
        cost: cost(&cfg, algorithm),
        keep_grants: experiment == Experiment::Contention
            && TIMELINE_CONTENDERS.contains(&cfg.threads),
        cfg,
        algorithm,
    }
}

/// Every algorithm at every contender count.
fn contention_jobs(
    base: &RunConfig,
    algorithms: &[&'static Algorithm],
    levels: &[usize],
) -> Vec<Job> {
    let mut jobs = Vec::new();
    for &n in levels {
        for &a in algorithms {
            let cfg = RunConfig {
                threads: n,
                duration: contention_duration(base.duration, n),
                ..base.clone()
            };
            jobs.push(job(Experiment::Contention, a.name.to_string(), n as f64, cfg, a));
        }
    }
    jobs
}

/// The algorithms that poll, at `side` contenders, over the poll intervals.
fn poll_jobs(
    base: &RunConfig,
    algorithms: &[&'static Algorithm],
    side: usize,
    quick: bool,
) -> Vec<Job> {
    let polls: Vec<u64> = if quick { vec![5, 20, 100] } else { POLL_INTERVALS_MS.to_vec() };
    let mut jobs = Vec::new();
    for &a in algorithms.iter().filter(|a| a.uses_poll_interval) {
        for &ms in &polls {
            let cfg = RunConfig {
                threads: side,
                poll_interval: Duration::from_millis(ms),
                ..base.clone()
            };
            jobs.push(job(Experiment::PollInterval, a.name.to_string(), ms as f64, cfg, a));
        }
    }
    jobs
}

/// Every algorithm at `side` contenders over the skews; those that order waiters by time once
/// per time source.
fn skew_jobs(
    base: &RunConfig,
    algorithms: &[&'static Algorithm],
    side: usize,
    quick: bool,
) -> Vec<Job> {
    let skews: Vec<u64> = if quick { vec![0, 10_000, 1_000_000] } else { SKEWS_US.to_vec() };
    let mut jobs = Vec::new();
    for &a in algorithms {
        let sources: &[TimeSourceKind] = if a.uses_time_source {
            &[TimeSourceKind::Local, TimeSourceKind::Hlc, TimeSourceKind::Global]
        } else {
            &[TimeSourceKind::Local]
        };
        for &source in sources {
            for &us in &skews {
                let cfg = RunConfig {
                    threads: side,
                    skew: Duration::from_micros(us),
                    time_source: source,
                    ..base.clone()
                };
                let series = if a.uses_time_source {
                    format!("{}/{}", a.name, source)
                } else {
                    a.name.to_string()
                };
                jobs.push(job(Experiment::Skew, series, us as f64 / 1000.0, cfg, a));
            }
        }
    }
    jobs
}

fn run_job(job: &Job) -> anyhow::Result<Done> {
    let run = crate::run::run_algorithm(&job.cfg, job.algorithm, None).with_context(|| {
        format!("sweep point {} {} = {}", job.series, experiment_name(job.experiment), job.x)
    })?;
    let mut report = analyze(&job.cfg, job.algorithm, &run);
    report.contenders.clear();
    if !(job.experiment == Experiment::Contention && job.cfg.threads == HEADLINE_CONTENDERS) {
        report.latency_cdf.clear();
    }
    Ok(Done {
        point: SweepPoint {
            experiment: job.experiment,
            series: job.series.clone(),
            x: job.x,
            threads: job.cfg.threads,
            duration: job.cfg.duration,
            time_source: job.cfg.time_source,
            report,
        },
        holds: job.keep_grants.then(|| holds_of_lock0(run.grants.iter())),
    })
}

pub(crate) fn experiment_name(e: Experiment) -> &'static str {
    match e {
        Experiment::Contention => "contenders",
        Experiment::PollInterval => "poll interval (ms)",
        Experiment::Skew => "skew (ms)",
    }
}

/// Runs every job on `jobs` threads, the costliest first; results in plan order.
fn execute(plan: &Plan, jobs: usize, bar: &indicatif::ProgressBar) -> anyhow::Result<Vec<Done>> {
    let mut order: Vec<usize> = (0..plan.jobs.len()).collect();
    order.sort_by(|&a, &b| plan.jobs[b].cost.total_cmp(&plan.jobs[a].cost));
    super::parallel(&plan.jobs, &order, jobs, bar, run_job)
}

/// `bench-harness sweep`.
pub fn run(args: &SweepArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args)?;
    files::prepare_dir(&args.out)?;
    let wall = std::time::Instant::now();
    progress::status(
        args.quiet,
        &format!(
            "sweep: {} runs on {} threads; base scenario: {}",
            plan.len(),
            args.jobs,
            plan.base
        ),
    );
    let bar = progress::bar(plan.len() as u64, "sweep", args.quiet, "runs");
    let done = execute(&plan, args.jobs as usize, &bar)?;
    bar.finish_and_clear();

    let mut timelines: Vec<(usize, String, Holds)> = Vec::new();
    let mut points = Vec::with_capacity(done.len());
    for d in done {
        if let Some(holds) = d.holds {
            timelines.push((d.point.threads, d.point.series.clone(), holds));
        }
        points.push(d.point);
    }
    let summary = SweepSummary {
        schema_version: crate::measure::summary::SCHEMA_VERSION,
        tool: format!("bench-harness {}", env!("CARGO_PKG_VERSION")),
        base: plan.base.clone(),
        points,
    };
    files::write_json(&args.out.join("sweep.json"), &summary)?;
    let images = charts::draw(&args.out, &summary, &timelines)?;
    let mut readme = readme(&summary, &images, &args.out);
    // The experiments measured apart (the long run, the engines comparison in wall time)
    // keep their sections, regenerated from their own JSON files as they regenerate them.
    for section in super::SECTIONS {
        if let Some(text) = (section.render)(&args.out)? {
            readme = super::splice(&readme, section, &text);
        }
    }
    files::write_atomic(&args.out.join("README.md"), readme.as_bytes())?;
    progress::status(
        args.quiet,
        &format!(
            "wrote {} charts, sweep.json and README.md into {} in {:.1} s",
            images.len(),
            args.out.display(),
            wall.elapsed().as_secs_f64()
        ),
    );
    Ok(())
}
