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
//! Points run in parallel on `--jobs` OS threads, each point in its own current-thread
//! runtime with a paused clock, so the result does not depend on the number of jobs. The
//! charts, `sweep.json` (every point's [`AlgorithmReport`]) and `README.md` (the headline
//! table and the charts) go to `--out` (default `results/`). Nothing written depends on the
//! wall clock: the same seed regenerates the same files.

use crate::charts::{
    algorithm_color, lighter, render_lines, render_timelines, Formats, Legend, LineChart, Series,
    TimelinePanel, PALETTE,
};
use crate::cli::SweepArgs;
use crate::config::{ClockMode, RunConfig, TimeSourceKind};
use crate::dist::format_duration;
use crate::figures::{cdf_chart, holds_of_lock0, timeline_window};
use crate::metrics::Grant;
use crate::registry::{self, AlgorithmEntry};
use crate::summary::{analyze, AlgorithmReport, Summary};
use crate::{output, progress};
use anyhow::{anyhow, Context};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

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
    entry: &'static AlgorithmEntry,
    keep_grants: bool,
    /// Rough cost, to start the longest jobs first.
    cost: f64,
}

struct Done {
    point: SweepPoint,
    grants: Option<Vec<Grant>>,
}

/// The sweep's plan: base scenario, contender counts, side experiments.
pub struct Plan {
    base: RunConfig,
    jobs: Vec<Job>,
}

impl Plan {
    /// Builds the plan of `args`.
    pub fn new(args: &SweepArgs) -> anyhow::Result<Plan> {
        let mut base = RunConfig::default();
        args.scenario.apply(&mut base);
        base.clock = ClockMode::Simulated;
        base.duration = args.duration.unwrap_or(if args.quick {
            Duration::from_secs(10)
        } else {
            Duration::from_secs(60)
        });
        anyhow::ensure!(
            base.backend == crate::config::BackendKind::Embedded,
            "the sweep runs in simulated time on the embedded store (--backend embedded)"
        );
        let entries = registry::resolve(&base.algorithms, base.backend).map_err(|e| anyhow!(e))?;
        base.algorithms = entries.iter().map(|e| e.name.to_string()).collect();
        base.validate().map_err(|e| anyhow!(e))?;

        let mut contenders: Vec<usize> = args.contenders.iter().map(|&n| n as usize).collect();
        if args.quick && contenders == [1, 2, 4, 8, 16, 32, 64, 128, 256] {
            contenders = vec![1, 2, 4, 8];
        }
        contenders.sort_unstable();
        contenders.dedup();
        let side = if args.quick { 4 } else { SIDE_CONTENDERS };
        let polls: Vec<u64> = if args.quick {
            vec![5, 20, 100]
        } else {
            POLL_INTERVALS_MS.to_vec()
        };
        let skews: Vec<u64> = if args.quick {
            vec![0, 10_000, 1_000_000]
        } else {
            SKEWS_US.to_vec()
        };

        let mut jobs = Vec::new();
        let cost = |cfg: &RunConfig, entry: &AlgorithmEntry| {
            let polling = if entry.uses_poll_interval {
                20.0 / cfg.poll_interval.as_secs_f64().max(1e-3) / 1000.0
            } else {
                0.1
            };
            // Polling readers may read whole rows of every contender: up to quadratic.
            let n = cfg.threads as f64;
            n * (1.0 + n / 32.0) * cfg.duration.as_secs_f64() * (polling + 0.05)
        };
        for &n in &contenders {
            for &entry in &entries {
                let cfg = RunConfig {
                    threads: n,
                    duration: contention_duration(base.duration, n),
                    ..base.clone()
                };
                jobs.push(Job {
                    experiment: Experiment::Contention,
                    series: entry.name.to_string(),
                    x: n as f64,
                    cost: cost(&cfg, entry),
                    cfg,
                    entry,
                    keep_grants: TIMELINE_CONTENDERS.contains(&n),
                });
            }
        }
        for &entry in entries.iter().filter(|e| e.uses_poll_interval) {
            for &ms in &polls {
                let cfg = RunConfig {
                    threads: side,
                    poll_interval: Duration::from_millis(ms),
                    ..base.clone()
                };
                jobs.push(Job {
                    experiment: Experiment::PollInterval,
                    series: entry.name.to_string(),
                    x: ms as f64,
                    cost: cost(&cfg, entry),
                    cfg,
                    entry,
                    keep_grants: false,
                });
            }
        }
        for &entry in &entries {
            let sources: &[TimeSourceKind] = if entry.uses_time_source {
                &[
                    TimeSourceKind::Local,
                    TimeSourceKind::Hlc,
                    TimeSourceKind::Global,
                ]
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
                    let series = if entry.uses_time_source {
                        format!("{}/{}", entry.name, source)
                    } else {
                        entry.name.to_string()
                    };
                    jobs.push(Job {
                        experiment: Experiment::Skew,
                        series,
                        x: us as f64 / 1000.0,
                        cost: cost(&cfg, entry),
                        cfg,
                        entry,
                        keep_grants: false,
                    });
                }
            }
        }
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

fn run_job(job: &Job) -> anyhow::Result<Done> {
    let run = crate::runner::run_algorithm(&job.cfg, job.entry, None).with_context(|| {
        format!(
            "sweep point {} {} = {}",
            job.series,
            experiment_name(job.experiment),
            job.x
        )
    })?;
    let mut report = analyze(&job.cfg, job.entry, &run);
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
        grants: job.keep_grants.then_some(run.grants),
    })
}

fn experiment_name(e: Experiment) -> &'static str {
    match e {
        Experiment::Contention => "contenders",
        Experiment::PollInterval => "poll interval (ms)",
        Experiment::Skew => "skew (ms)",
    }
}

/// Runs every job on `jobs` threads; results in plan order.
fn execute(plan: &Plan, jobs: usize, bar: &indicatif::ProgressBar) -> anyhow::Result<Vec<Done>> {
    let mut order: Vec<usize> = (0..plan.jobs.len()).collect();
    order.sort_by(|&a, &b| plan.jobs[b].cost.total_cmp(&plan.jobs[a].cost));
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<Done>>>> =
        Mutex::new((0..plan.jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, plan.jobs.len().max(1)) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&index) = order.get(k) else { break };
                let done = run_job(&plan.jobs[index]);
                let failed = done.is_err();
                results.lock().unwrap_or_else(|e| e.into_inner())[index] = Some(done);
                bar.inc(1);
                if failed {
                    // Let the other workers stop early too.
                    next.store(order.len(), Ordering::Relaxed);
                    break;
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Some(Ok(done)) => out.push(done),
            Some(Err(e)) => return Err(e),
            None => {
                return Err(anyhow!(
                    "a sweep point did not run (an earlier point failed)"
                ))
            }
        }
    }
    Ok(out)
}

/// `bench-harness sweep`.
pub fn run(args: &SweepArgs) -> anyhow::Result<()> {
    let plan = Plan::new(args)?;
    output::prepare_dir(&args.out)?;
    let wall = std::time::Instant::now();
    progress::status(
        args.quiet,
        &format!(
            "sweep: {} runs on {} threads; base scenario: {}",
            plan.len(),
            args.jobs,
            output::describe(&plan.base)
        ),
    );
    let bar = progress::bar(plan.len() as u64, "sweep", args.quiet, "runs");
    let done = execute(&plan, args.jobs as usize, &bar)?;
    bar.finish_and_clear();

    let mut timelines: Vec<(usize, String, Vec<Grant>)> = Vec::new();
    let mut points = Vec::with_capacity(done.len());
    for d in done {
        if let Some(grants) = d.grants {
            timelines.push((d.point.threads, d.point.series.clone(), grants));
        }
        points.push(d.point);
    }
    let summary = SweepSummary {
        schema_version: crate::summary::SCHEMA_VERSION,
        tool: format!("bench-harness {}", env!("CARGO_PKG_VERSION")),
        base: plan.base.clone(),
        points,
    };
    output::write_json(&args.out.join("sweep.json"), &summary)?;
    let images = draw(&args.out, &summary, &timelines)?;
    let mut readme = readme(&summary, &images, &args.out);
    // The engines comparison (`bench-harness engines`) is measured apart, in wall time; its
    // section is regenerated from its own engines.json, as that command regenerates it.
    if let Some(section) = crate::engines::section_for(&args.out)? {
        readme = crate::engines::splice_section(&readme, &section);
    }
    output::write_atomic(&args.out.join("README.md"), readme.as_bytes())?;
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

fn pts(
    summary: &SweepSummary,
    e: Experiment,
    series: &str,
    y: impl Fn(&AlgorithmReport) -> Option<f64>,
) -> Vec<(f64, f64)> {
    summary
        .series(e, series)
        .iter()
        .filter_map(|p| y(&p.report).map(|v| (p.x, v)))
        .collect()
}

fn per_algorithm(
    summary: &SweepSummary,
    e: Experiment,
    y: impl Fn(&AlgorithmReport) -> Option<f64> + Copy,
) -> Vec<Series> {
    summary
        .series_names(e)
        .iter()
        .map(|name| {
            Series::new(
                name.clone(),
                algorithm_color(name),
                pts(summary, e, name, y),
            )
        })
        .collect()
}

fn contention_chart(
    summary: &SweepSummary,
    title: &str,
    y_label: &str,
    y_log: bool,
    y: impl Fn(&AlgorithmReport) -> Option<f64> + Copy,
) -> LineChart {
    LineChart::against_contenders(
        title,
        y_label,
        y_log,
        per_algorithm(summary, Experiment::Contention, y),
    )
}

/// A figure written into the results, with its caption.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File name of the PNG.
    pub png: String,
    /// File name of the SVG, if written.
    pub svg: Option<String>,
    /// Caption.
    pub caption: String,
}

fn figure(files: Vec<PathBuf>, caption: &str) -> Figure {
    let name = |ext: &str| {
        files
            .iter()
            .find(|f| f.extension().is_some_and(|e| e == ext))
            .and_then(|f| f.file_name())
            .map(|n| n.to_string_lossy().into_owned())
    };
    Figure {
        png: name("png").unwrap_or_default(),
        svg: name("svg"),
        caption: caption.into(),
    }
}

fn draw(
    dir: &Path,
    s: &SweepSummary,
    timelines: &[(usize, String, Vec<Grant>)],
) -> anyhow::Result<Vec<Figure>> {
    let mut figs = Vec::new();
    let both = Formats::PngAndSvg;
    let c = Experiment::Contention;
    if !s.series_names(c).is_empty() {
        let p50 = contention_chart(
            s,
            "Median acquisition latency",
            "p50 latency (ms, log)",
            true,
            |r| Some(r.latency.p50_ms),
        );
        let p99 = contention_chart(
            s,
            "99th percentile acquisition latency",
            "p99 latency (ms, log)",
            true,
            |r| Some(r.latency.p99_ms),
        );
        figs.push(figure(
            render_lines(&dir.join("latency_vs_contenders"), &[p50, p99], 2, (640, 440), both)?,
            "Acquisition latency (request to grant) against the number of contenders on one lock: median and 99th percentile.",
        ));
        let thr = LineChart {
            legend: Legend::LowerRight,
            ..contention_chart(s, "Throughput", "grants per second per lock", false, |r| {
                Some(r.throughput.grants_per_second_per_lock)
            })
        };
        figs.push(figure(
            render_lines(
                &dir.join("throughput_vs_contenders"),
                &[thr],
                1,
                (800, 440),
                both,
            )?,
            "Grants per second on one lock against the number of contenders.",
        ));
        let headline = Summary {
            results: s
                .points
                .iter()
                .filter(|p| p.experiment == c && p.threads == HEADLINE_CONTENDERS)
                .map(|p| p.report.clone())
                .collect(),
            ..Summary::new(&s.base)
        };
        if !headline.results.is_empty() {
            let title = format!("Acquisition latency CDF, {HEADLINE_CONTENDERS} contenders");
            figs.push(figure(
                render_lines(&dir.join(format!("latency_cdf_{HEADLINE_CONTENDERS}")), &[cdf_chart(&title, &headline)], 1, (800, 480), both)?,
                &format!("Distribution of acquisition latency at {HEADLINE_CONTENDERS} contenders (log scale)."),
            ));
        }
        let jain = LineChart {
            y_range: Some((0.0, 1.05)),
            legend: Legend::LowerLeft,
            ..contention_chart(
                s,
                "Jain's fairness index over grants per contender",
                "Jain index (1 = even)",
                false,
                |r| r.fairness.jain_index,
            )
        };
        let run = contention_chart(
            s,
            "Longest run of grants to one contender",
            "grants in a row (log)",
            true,
            |r| Some(r.fairness.longest_run.length as f64),
        );
        let over = LineChart {
            y_range: Some((0.0, 100.0)),
            ..contention_chart(
                s,
                "Grants overtaken by a later request",
                "% of grants",
                false,
                |r| Some(r.fairness.overtakes.overtaken_fraction * 100.0),
            )
        };
        figs.push(figure(
            render_lines(&dir.join("fairness_vs_contenders"), &[jain, run, over], 3, (520, 420), both)?,
            "Fairness against the number of contenders: Jain's index over grants per contender, the longest run of consecutive grants to one contender, and the share of grants that a later request overtook.",
        ));
        let ops = contention_chart(
            s,
            "Store requests per grant",
            "requests per grant (log)",
            true,
            |r| r.store.ops_per_grant,
        );
        let ops_s = contention_chart(
            s,
            "Store requests per second",
            "requests per second (log)",
            true,
            |r| r.store.ops_per_second,
        );
        figs.push(figure(
            render_lines(&dir.join("store_ops_vs_contenders"), &[ops, ops_s], 2, (640, 440), both)?,
            "Load on the store against the number of contenders: requests (reads, writes, deletes, lease renewals) per grant and per second.",
        ));
    }
    for n in TIMELINE_CONTENDERS {
        let logs: Vec<(String, Vec<Grant>)> = timelines
            .iter()
            .filter(|(t, _, _)| *t == n)
            .map(|(_, name, g)| (name.clone(), g.clone()))
            .collect();
        if logs.is_empty() {
            continue;
        }
        let window = timeline_window(
            &logs,
            if n <= 2 { 40 } else { 80 },
            s.base.duration.as_secs_f64(),
        );
        let panels: Vec<TimelinePanel> = logs
            .iter()
            .map(|(name, grants)| TimelinePanel {
                title: format!("{name}: who holds the lock, {n} contenders"),
                color: algorithm_color(name),
                contenders: n,
                holds: holds_of_lock0(grants),
                window,
            })
            .collect();
        figs.push(figure(
            render_timelines(&dir.join(format!("timeline_{n}")), &panels, 1100, both)?,
            &format!("Owner timeline of {n} contenders: a bar per hold, one row per contender, over the first holds of the run."),
        ));
    }
    let p = Experiment::PollInterval;
    let poll_names = s.series_names(p);
    if !poll_names.is_empty() {
        let mut p50 = Vec::new();
        let mut p99 = Vec::new();
        let mut gap = Vec::new();
        let mut ops = Vec::new();
        for name in &poll_names {
            let color = algorithm_color(name);
            p50.push(Series::new(
                name.clone(),
                color,
                pts(s, p, name, |r| Some(r.latency.p50_ms)),
            ));
            p99.push(Series::new(
                name.clone(),
                color,
                pts(s, p, name, |r| Some(r.latency.p99_ms)),
            ));
            gap.push(Series::new(
                format!("{name} median"),
                color,
                pts(s, p, name, |r| Some(r.handoff.p50_ms)),
            ));
            gap.push(Series {
                markers: false,
                ..Series::new(
                    format!("{name} ideal"),
                    lighter(color),
                    pts(s, p, name, |r| r.handoff.ideal_ms),
                )
            });
            ops.push(Series::new(
                name.clone(),
                color,
                pts(s, p, name, |r| r.store.ops_per_grant),
            ));
        }
        let side = s
            .series(p, &poll_names[0])
            .first()
            .map_or(SIDE_CONTENDERS, |pt| pt.threads);
        let chart = |title: String, y_label: &str, series: Vec<Series>, legend: Legend| LineChart {
            title,
            x_label: "poll interval (ms, log)".into(),
            y_label: y_label.into(),
            x_log: true,
            y_log: true,
            y_range: None,
            series,
            legend,
        };
        let charts = [
            chart(
                format!("Median acquisition latency, {side} contenders"),
                "ms (log)",
                p50,
                Legend::UpperLeft,
            ),
            chart(
                format!("99th percentile latency, {side} contenders"),
                "ms (log)",
                p99,
                Legend::UpperLeft,
            ),
            chart(
                "Handoff gap (release to next grant)".into(),
                "ms (log)",
                gap,
                Legend::UpperLeft,
            ),
            chart(
                "Store requests per grant".into(),
                "requests per grant (log)",
                ops,
                Legend::UpperRight,
            ),
        ];
        figs.push(figure(
            render_lines(&dir.join("poll_interval"), &charts, 2, (620, 420), both)?,
            &format!(
                "The poll interval of the locks that poll ({}): acquisition latency, the median handoff gap against the algorithm's ideal \
                 (lighter line: for the queue lock 3 round trips + half a poll interval, for the bakery 1 round trip + half a poll interval), \
                 and store requests per grant.",
                poll_names.join(", ")
            ),
        ));
    }
    let k = Experiment::Skew;
    if !s.series_names(k).is_empty() {
        let color = |_: usize, name: &str| match name.rsplit_once('/') {
            Some((_, "local")) => PALETTE[1],
            Some((_, "hlc")) => PALETTE[6],
            Some((_, "global")) => PALETTE[3],
            Some(_) => PALETTE[7],
            None => algorithm_color(name),
        };
        let names = s.series_names(k);
        // Skew 0 cannot sit on a log axis: it is drawn at 0.01 ms and listed in the README.
        let shift = |v: Vec<(f64, f64)>| {
            v.into_iter()
                .map(|(x, y)| (if x <= 0.0 { 0.01 } else { x }, y))
                .collect::<Vec<_>>()
        };
        let over: Vec<Series> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                Series::new(
                    n.clone(),
                    color(i, n),
                    shift(pts(s, k, n, |r| {
                        Some(r.fairness.overtakes.overtaken_fraction * 100.0)
                    })),
                )
            })
            .collect();
        let jain: Vec<Series> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                Series::new(
                    n.clone(),
                    color(i, n),
                    shift(pts(s, k, n, |r| r.fairness.jain_index)),
                )
            })
            .collect();
        let side = s
            .series(k, &names[0])
            .first()
            .map_or(SIDE_CONTENDERS, |pt| pt.threads);
        let charts = [
            LineChart {
                title: format!("Overtaken grants, {side} contenders"),
                x_label: "clock skew ± (ms, log; 0 drawn at 0.01)".into(),
                y_label: "% of grants".into(),
                x_log: true,
                y_log: false,
                y_range: Some((0.0, 100.0)),
                series: over,
                legend: Legend::UpperLeft,
            },
            LineChart {
                title: "Jain's fairness index".into(),
                x_label: "clock skew ± (ms, log; 0 drawn at 0.01)".into(),
                y_label: "Jain index".into(),
                x_log: true,
                y_log: false,
                y_range: Some((0.0, 1.05)),
                series: jain,
                legend: Legend::LowerLeft,
            },
        ];
        figs.push(figure(
            render_lines(&dir.join("clock_skew"), &charts, 2, (640, 440), both)?,
            "Clock skew: each contender's clock is offset uniformly in ±skew. The queue lock orders its waiters by the time source's reading (local clock, hybrid logical clock, GlobalTime service); the shadow lock does not use time and is the reference. Where two lines coincide, the later one hides the earlier.",
        ));
    }
    Ok(figs)
}

/// A fraction as a percentage, with more digits below 1%.
fn pct(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p > 0.0 && p < 1.0 {
        format!("{p:.2}%")
    } else {
        format!("{p:.1}%")
    }
}

fn f1(x: f64) -> String {
    format!("{x:.1}")
}

fn fopt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

/// A row of a README table: its label and a point's value.
type Metric = (&'static str, fn(&AlgorithmReport) -> String);

/// The columns of a README table of experiment `e`: the distinct `key`s of its points, in
/// `cmp` order.
fn columns<K: PartialEq>(
    s: &SweepSummary,
    e: Experiment,
    key: impl Fn(&SweepPoint) -> K,
    cmp: impl FnMut(&K, &K) -> std::cmp::Ordering,
) -> Vec<K> {
    let mut xs: Vec<K> = s
        .points
        .iter()
        .filter(|p| p.experiment == e)
        .map(key)
        .collect();
    xs.sort_by(cmp);
    xs.dedup();
    xs
}

/// A README table's header and rule: `first`, `metric`, then one right-aligned column per
/// heading.
fn table_head(md: &mut String, first: &str, headings: impl Iterator<Item = String>) {
    let mut header = format!("| {first} | metric |");
    let mut rule = String::from("|---|---|");
    for h in headings {
        let _ = write!(header, " {h} |");
        rule.push_str("---:|");
    }
    let _ = writeln!(md, "{header}\n{rule}");
}

/// A README table's rows: one per series of experiment `e` (`names`) and metric, with the
/// metric of the series' point whose `key` is each column's `x` (`-` where it has none).
fn metric_rows<K: PartialEq>(
    md: &mut String,
    s: &SweepSummary,
    e: Experiment,
    names: &[String],
    xs: &[K],
    key: impl Fn(&SweepPoint) -> K,
    metrics: &[Metric],
) {
    for name in names {
        let series = s.series(e, name);
        for (label, f) in metrics {
            let mut row = format!("| {name} | {label} |");
            for x in xs {
                let cell = series
                    .iter()
                    .find(|p| key(p) == *x)
                    .map_or("-".into(), |p| f(&p.report));
                let _ = write!(row, " {cell} |");
            }
            let _ = writeln!(md, "{row}");
        }
    }
}

/// The text of `results/README.md`.
pub fn readme(s: &SweepSummary, figs: &[Figure], out: &Path) -> String {
    let b = &s.base;
    let mut md = String::new();
    let _ = writeln!(md, "# Benchmark results\n");
    let _ = writeln!(
        md,
        "Generated by `bench-harness sweep` (`scripts/regenerate-results.sh`); do not edit by hand. \
         Every number comes from `sweep.json` in this directory; the same seed regenerates the same files.\n"
    );
    let _ = writeln!(md, "## Scenario\n");
    let _ = writeln!(
        md,
        "Each contender loops: request the lock, hold it for {hold}, release it, think for {think}, \
         for {dur} of simulated time per point (points above {head} contenders for {dur} × {head} / contenders, \
         at least a quarter of it), on the embedded store: {rep} replicas, reads and writes at {cons}, \
         a round trip to one replica of {lat} (mean {rt}). Lease TTL {ttl}; the polling locks poll every {poll}; \
         the shadow lock backs off as in the thesis (`{backoff}`); seed {seed}. The tombstone grace of the store is {gc}.\n",
        hold = b.hold,
        think = b.think,
        dur = format_duration(b.duration),
        head = HEADLINE_CONTENDERS,
        rep = b.replicas,
        cons = b.consistency,
        lat = b.latency,
        rt = format_duration(b.mean_round_trip()),
        ttl = format_duration(b.ttl),
        poll = format_duration(b.poll_interval),
        backoff = b.backoff.name(),
        seed = b.seed,
        gc = format_duration(b.gc_grace),
    );
    let found = findings(s);
    if !found.is_empty() {
        let _ = writeln!(md, "## Findings\n");
        for f in found {
            let _ = writeln!(md, "- {f}");
        }
        md.push('\n');
    }
    let headline: Vec<&SweepPoint> = s
        .points
        .iter()
        .filter(|p| p.experiment == Experiment::Contention && p.threads == HEADLINE_CONTENDERS)
        .collect();
    if !headline.is_empty() {
        let _ = writeln!(
            md,
            "## Headline: {HEADLINE_CONTENDERS} contenders on one lock\n"
        );
        let _ = writeln!(
            md,
            "| algorithm | grants/s | p50 ms | p99 ms | max ms | handoff gap p50 ms (round trips) | gap / ideal | Jain | longest run | overtaken | store ops / grant | overlapping holds | token order violations |"
        );
        let _ = writeln!(
            md,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for p in &headline {
            let r = &p.report;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} ({}) | {} | {} | {} | {:.1}% | {} | {} | {} |",
                r.algorithm,
                f1(r.throughput.grants_per_second_per_lock),
                f1(r.latency.p50_ms),
                f1(r.latency.p99_ms),
                f1(r.latency.max_ms),
                f1(r.handoff.p50_ms),
                fopt(r.handoff.p50_round_trips, 1),
                fopt(r.handoff.ratio_to_ideal, 2),
                fopt(r.fairness.jain_index, 3),
                r.fairness.longest_run.length,
                r.fairness.overtakes.overtaken_fraction * 100.0,
                fopt(r.store.ops_per_grant, 1),
                r.safety.overlapping_holds,
                r.safety.token_order_violations,
            );
        }
        let ideals: Vec<String> = headline
            .iter()
            .filter_map(|p| registry::lookup(&p.series, crate::config::BackendKind::Embedded))
            .filter(|e| !e.ideal_handoff_text.is_empty())
            .map(|e| format!("{}: {}", e.name, e.ideal_handoff_text))
            .collect();
        let _ = writeln!(
            md,
            "\n*gap / ideal*: the median handoff gap over the algorithm's ideal handoff ({}). \
             The gap runs from the holder's call to release to the next holder's grant, so it also holds the release's own deletes \
             and the fencing token's read and write.\n",
            ideals.join("; ")
        );
    }
    let names = s.series_names(Experiment::Contention);
    if !names.is_empty() {
        let _ = writeln!(md, "## Against the number of contenders\n");
        let threads = |p: &SweepPoint| p.threads;
        let xs = columns(s, Experiment::Contention, threads, usize::cmp);
        table_head(&mut md, "algorithm", xs.iter().map(|x| x.to_string()));
        let mut row = String::from("| all | simulated s |");
        for x in &xs {
            let d = s
                .points
                .iter()
                .find(|p| p.experiment == Experiment::Contention && p.threads == *x)
                .map(|p| p.duration);
            let _ = write!(
                row,
                " {} |",
                d.map_or("-".into(), |d| format!("{}", d.as_secs_f64()))
            );
        }
        let _ = writeln!(md, "{row}");
        let metrics: [Metric; 6] = [
            ("p50 ms", |r| f1(r.latency.p50_ms)),
            ("p99 ms", |r| f1(r.latency.p99_ms)),
            ("grants/s", |r| f1(r.throughput.grants_per_second_per_lock)),
            ("Jain", |r| fopt(r.fairness.jain_index, 3)),
            ("longest run", |r| r.fairness.longest_run.length.to_string()),
            ("ops/grant", |r| fopt(r.store.ops_per_grant, 1)),
        ];
        metric_rows(
            &mut md,
            s,
            Experiment::Contention,
            &names,
            &xs,
            threads,
            &metrics,
        );
        md.push('\n');
        let unsafe_points: Vec<String> = s
            .points
            .iter()
            .filter(|p| !p.report.is_safe())
            .map(|p| format!("{} {} {}", p.series, experiment_name(p.experiment), p.x))
            .collect();
        if unsafe_points.is_empty() {
            let _ = writeln!(md, "Every point of every experiment had 0 overlapping holds and 0 fencing-token order violations.\n");
        } else {
            let _ = writeln!(
                md,
                "**Safety violations** at: {}.\n",
                unsafe_points.join("; ")
            );
        }
    }
    let skew_names = s.series_names(Experiment::Skew);
    if !skew_names.is_empty() {
        let _ = writeln!(md, "## Clock skew\n");
        let skew = |p: &SweepPoint| p.x;
        let xs = columns(s, Experiment::Skew, skew, f64::total_cmp);
        table_head(
            &mut md,
            "series",
            xs.iter().map(|x| {
                format!(
                    "±{}",
                    format_duration(Duration::from_micros((x * 1000.0).round() as u64))
                )
            }),
        );
        let metrics: [Metric; 2] = [
            ("overtaken", |r| {
                format!("{:.1}%", r.fairness.overtakes.overtaken_fraction * 100.0)
            }),
            ("Jain", |r| fopt(r.fairness.jain_index, 3)),
        ];
        metric_rows(
            &mut md,
            s,
            Experiment::Skew,
            &skew_names,
            &xs,
            skew,
            &metrics,
        );
        md.push('\n');
    }
    let _ = writeln!(md, "## Charts\n");
    for f in figs {
        let svg = f
            .svg
            .as_ref()
            .map_or(String::new(), |s| format!(" ([SVG]({s}))"));
        let _ = writeln!(
            md,
            "### {}\n\n{}{svg}\n\n![{}]({})\n",
            title_of(&f.png),
            f.caption,
            title_of(&f.png),
            f.png
        );
    }
    let _ = writeln!(md, "## Regenerating\n");
    let _ = writeln!(
        md,
        "```sh\nscripts/regenerate-results.sh          # = cargo run --release -p bench-harness -- sweep --out {}\n```\n\n\
         Simulated time: a paused tokio clock, dilated {}x so that the store's sub-millisecond round trips survive tokio's \
         millisecond timers. The points run in parallel on two threads; the result does not depend on how many.",
        out.display(),
        crate::config::SIMULATED_TIME_SCALE
    );
    md
}

/// Observations read off the data (each sentence states numbers from `sweep.json`).
pub fn findings(s: &SweepSummary) -> Vec<String> {
    let mut out = Vec::new();
    let c = Experiment::Contention;
    for name in s.series_names(c) {
        let pts = s.series(c, &name);
        let (Some(first), Some(last)) = (
            pts.iter().find(|p| p.threads >= 2).or(pts.first()),
            pts.last(),
        ) else {
            continue;
        };
        let contended: Vec<&&SweepPoint> = pts.iter().filter(|p| p.threads >= 2).collect();
        let min_jain = contended
            .iter()
            .filter_map(|p| p.report.fairness.jain_index)
            .fold(f64::INFINITY, f64::min);
        let max_run = contended
            .iter()
            .map(|p| (p.report.fairness.longest_run.length, p.threads))
            .max();
        let max_over = contended
            .iter()
            .map(|p| p.report.fairness.overtakes.overtaken_fraction)
            .fold(0.0, f64::max);
        let mut line = format!(
            "**{name}**: from {} to {} contenders the median latency goes from {} to {} ms and the 99th percentile from {} to {} ms, at {} to {} grants/s",
            first.threads,
            last.threads,
            f1(first.report.latency.p50_ms),
            f1(last.report.latency.p50_ms),
            f1(first.report.latency.p99_ms),
            f1(last.report.latency.p99_ms),
            f1(first.report.throughput.grants_per_second_per_lock),
            f1(last.report.throughput.grants_per_second_per_lock),
        );
        if min_jain.is_finite() {
            let _ = write!(line, "; Jain's index is never below {min_jain:.3}");
        }
        if let Some((run, n)) = max_run {
            let _ = write!(
                line,
                "; the longest run of grants to one contender is {run} (at {n} contenders)"
            );
        }
        if max_over == 0.0 {
            line.push_str("; no grant is overtaken");
        } else {
            let _ = write!(line, "; up to {} of grants are overtaken", pct(max_over));
        }
        let _ = write!(
            line,
            "; store requests per grant go from {} to {}.",
            fopt(first.report.store.ops_per_grant, 1),
            fopt(last.report.store.ops_per_grant, 1)
        );
        out.push(line);
    }
    for p in s.points.iter().filter(|p| {
        p.experiment == c
            && p.threads == HEADLINE_CONTENDERS
            && p.report.handoff.ratio_to_ideal.is_some()
    }) {
        let ideal = registry::lookup(&p.series, crate::config::BackendKind::Embedded)
            .map_or("", |e| e.ideal_handoff_text);
        out.push(format!(
            "**{}** at {HEADLINE_CONTENDERS} contenders: the median handoff gap is {} ms = {} round trips, {} times its ideal of {} ms ({ideal}).",
            p.series,
            f1(p.report.handoff.p50_ms),
            fopt(p.report.handoff.p50_round_trips, 1),
            fopt(p.report.handoff.ratio_to_ideal, 2),
            fopt(p.report.handoff.ideal_ms, 1),
        ));
    }
    let k = Experiment::Skew;
    for name in s.series_names(k) {
        let pts = s.series(k, &name);
        let (Some(zero), Some(last)) = (pts.first(), pts.last()) else {
            continue;
        };
        if name.ends_with("/global") && zero.report.fairness.jain_index.is_some_and(|j| j < 0.9) {
            out.push(format!(
                "**{name}**: Jain's index is {} already without skew. The GlobalTime cell only moves when a service replica updates it (every 500 ms, thesis listing 8), \
                 so every waiter that joins within one period gets the same time and the queue orders them by thread id: low ids re-join ahead of high ids until the period ends.",
                fopt(zero.report.fairness.jain_index, 3)
            ));
        } else if name.contains('/') && zero.x == 0.0 {
            let threshold = pts
                .iter()
                .find(|p| p.report.fairness.overtakes.overtaken_fraction >= 0.01);
            out.push(format!(
                "**{name}**: {:.1}% of grants overtaken without skew, {:.1}% at ±{} ms{} (Jain {} at ±{} ms).",
                zero.report.fairness.overtakes.overtaken_fraction * 100.0,
                last.report.fairness.overtakes.overtaken_fraction * 100.0,
                last.x,
                threshold.map_or(String::new(), |t| format!("; overtakes pass 1% from ±{} ms on", t.x)),
                fopt(last.report.fairness.jain_index, 3),
                last.x,
            ));
        }
    }
    out
}

fn title_of(png: &str) -> String {
    let stem = png.trim_end_matches(".png").replace('_', " ");
    let mut c = stem.chars();
    c.next().map_or(String::new(), |f| {
        f.to_uppercase().collect::<String>() + c.as_str()
    })
}
