//! The sweep's charts, a function per figure, every value read from [`SweepSummary`].

use super::{Experiment, SweepSummary, HEADLINE_CONTENDERS, SIDE_CONTENDERS, TIMELINE_CONTENDERS};
use crate::measure::summary::{AlgorithmReport, Summary};
use crate::report::charts::{
    algorithm_color, lighter, render_lines, render_timelines, Formats, Legend, LineChart, Series,
    TimelinePanel, PALETTE,
};
use crate::report::figures::{cdf_chart, timeline_window, Holds};
use std::path::{Path, PathBuf};

fn pts(
    summary: &SweepSummary,
    e: Experiment,
    series: &str,
    y: impl Fn(&AlgorithmReport) -> Option<f64>,
) -> Vec<(f64, f64)> {
    summary.series(e, series).iter().filter_map(|p| y(&p.report).map(|v| (p.x, v))).collect()
}

fn per_algorithm(
    summary: &SweepSummary,
    e: Experiment,
    y: impl Fn(&AlgorithmReport) -> Option<f64> + Copy,
) -> Vec<Series> {
    summary
        .series_names(e)
        .iter()
        .map(|name| Series::new(name.clone(), algorithm_color(name), pts(summary, e, name, y)))
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
    Figure { png: name("png").unwrap_or_default(), svg: name("svg"), caption: caption.into() }
}

/// Draws every chart of the sweep into `dir` (PNG and SVG), in the order the README shows
/// them; an experiment without points draws nothing.
pub fn draw(
    dir: &Path,
    s: &SweepSummary,
    timelines: &[(usize, String, Holds)],
) -> anyhow::Result<Vec<Figure>> {
    let mut figs = Vec::new();
    if !s.series_names(Experiment::Contention).is_empty() {
        figs.push(latency_vs_contenders(dir, s)?);
        figs.push(throughput_vs_contenders(dir, s)?);
        figs.extend(latency_cdf(dir, s)?);
        figs.push(fairness_vs_contenders(dir, s)?);
        figs.push(store_ops_vs_contenders(dir, s)?);
        figs.extend(push_vs_polling(dir, s)?);
    }
    for n in TIMELINE_CONTENDERS {
        figs.extend(timeline(dir, s, timelines, n)?);
    }
    if !s.series_names(Experiment::PollInterval).is_empty() {
        figs.push(poll_interval(dir, s)?);
    }
    if !s.series_names(Experiment::Skew).is_empty() {
        figs.push(clock_skew(dir, s)?);
    }
    Ok(figs)
}

/// Median and 99th-percentile latency against contenders.
fn latency_vs_contenders(dir: &Path, s: &SweepSummary) -> anyhow::Result<Figure> {
    let both = Formats::PngAndSvg;
    let p50 =
        contention_chart(s, "Median acquisition latency", "p50 latency (ms, log)", true, |r| {
            Some(r.latency.p50_ms)
        });
    let p99 = contention_chart(
        s,
        "99th percentile acquisition latency",
        "p99 latency (ms, log)",
        true,
        |r| Some(r.latency.p99_ms),
    );
    Ok(figure(
        render_lines(&dir.join("latency_vs_contenders"), &[p50, p99], 2, (640, 440), both)?,
        "Acquisition latency (request to grant) against the number of contenders on one lock: median and 99th percentile.",
    ))
}

/// Grants per second against contenders.
fn throughput_vs_contenders(dir: &Path, s: &SweepSummary) -> anyhow::Result<Figure> {
    let both = Formats::PngAndSvg;
    let thr = LineChart {
        legend: Legend::LowerRight,
        ..contention_chart(s, "Throughput", "grants per second per lock", false, |r| {
            Some(r.throughput.grants_per_second_per_lock)
        })
    };
    Ok(figure(
        render_lines(&dir.join("throughput_vs_contenders"), &[thr], 1, (800, 440), both)?,
        "Grants per second on one lock against the number of contenders.",
    ))
}

/// The latency CDF at [`HEADLINE_CONTENDERS`], when the sweep has that level.
fn latency_cdf(dir: &Path, s: &SweepSummary) -> anyhow::Result<Option<Figure>> {
    let both = Formats::PngAndSvg;
    let c = Experiment::Contention;
    let headline = Summary {
        results: s
            .points
            .iter()
            .filter(|p| p.experiment == c && p.threads == HEADLINE_CONTENDERS)
            .map(|p| p.report.clone())
            .collect(),
        ..Summary::new(&s.base)
    };
    if headline.results.is_empty() {
        return Ok(None);
    }
    let title = format!("Acquisition latency CDF, {HEADLINE_CONTENDERS} contenders");
    Ok(Some(figure(
        render_lines(
            &dir.join(format!("latency_cdf_{HEADLINE_CONTENDERS}")),
            &[cdf_chart(&title, &headline)],
            1,
            (800, 480),
            both,
        )?,
        &format!(
            "Distribution of acquisition latency at {HEADLINE_CONTENDERS} contenders (log scale)."
        ),
    )))
}

/// Jain's index, the longest run and overtaken grants against contenders.
fn fairness_vs_contenders(dir: &Path, s: &SweepSummary) -> anyhow::Result<Figure> {
    let both = Formats::PngAndSvg;
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
        ..contention_chart(s, "Grants overtaken by a later request", "% of grants", false, |r| {
            Some(r.fairness.overtakes.overtaken_fraction * 100.0)
        })
    };
    Ok(figure(
        render_lines(&dir.join("fairness_vs_contenders"), &[jain, run, over], 3, (520, 420), both)?,
        "Fairness against the number of contenders: Jain's index over grants per contender, the longest run of consecutive grants to one contender, and the share of grants that a later request overtook.",
    ))
}

/// Store requests per grant and per second against contenders.
fn store_ops_vs_contenders(dir: &Path, s: &SweepSummary) -> anyhow::Result<Figure> {
    let both = Formats::PngAndSvg;
    let ops =
        contention_chart(s, "Store requests per grant", "requests per grant (log)", true, |r| {
            r.store.ops_per_grant
        });
    let ops_s =
        contention_chart(s, "Store requests per second", "requests per second (log)", true, |r| {
            r.store.ops_per_second
        });
    Ok(figure(
        render_lines(&dir.join("store_ops_vs_contenders"), &[ops, ops_s], 2, (640, 440), both)?,
        "Load on the store against the number of contenders: requests (reads, writes, deletes, lease renewals) per grant and per second.",
    ))
}

/// The locks told their turn against the locks that poll for it: store requests per grant and
/// the median handoff gap against contenders, for queue-push, queue, shadow and bakery (the
/// ones the sweep ran).
const PUSH_AND_POLLING: [&str; 4] = ["queue-push", "queue", "shadow", "bakery"];

fn push_vs_polling(dir: &Path, s: &SweepSummary) -> anyhow::Result<Option<Figure>> {
    let names: Vec<String> = s
        .series_names(Experiment::Contention)
        .into_iter()
        .filter(|n| PUSH_AND_POLLING.contains(&n.as_str()))
        .collect();
    if !names.iter().any(|n| n == "queue-push") {
        return Ok(None);
    }
    let only = |y: fn(&AlgorithmReport) -> Option<f64>| -> Vec<Series> {
        names
            .iter()
            .map(|n| {
                Series::new(n.clone(), algorithm_color(n), pts(s, Experiment::Contention, n, y))
            })
            .collect()
    };
    let ops = LineChart::against_contenders(
        "Store requests per grant",
        "requests per grant (log)",
        true,
        only(|r| r.store.ops_per_grant),
    );
    let gap = LineChart::against_contenders(
        "Median handoff gap (release to next grant)",
        "gap (ms, log)",
        true,
        only(|r| (r.handoff.count > 0).then_some(r.handoff.p50_ms)),
    );
    Ok(Some(figure(
        render_lines(&dir.join("push_vs_polling"), &[ops, gap], 2, (640, 440), Formats::PngAndSvg)?,
        "Told against polling: queue-push's releaser rings the next waiter, the others poll (queue, bakery) or back off (shadow). \
         Store requests per grant and the median handoff gap against contenders.",
    )))
}

/// The owner timeline of `n` contenders, when the sweep kept their grant logs.
fn timeline(
    dir: &Path,
    s: &SweepSummary,
    timelines: &[(usize, String, Holds)],
    n: usize,
) -> anyhow::Result<Option<Figure>> {
    let both = Formats::PngAndSvg;
    let logs: Vec<(String, Holds)> = timelines
        .iter()
        .filter(|(t, _, _)| *t == n)
        .map(|(_, name, g)| (name.clone(), g.clone()))
        .collect();
    if logs.is_empty() {
        return Ok(None);
    }
    let window =
        timeline_window(&logs, if n <= 2 { 40 } else { 80 }, s.base.duration.as_secs_f64());
    let panels: Vec<TimelinePanel> = logs
        .iter()
        .map(|(name, holds)| TimelinePanel {
            title: format!("{name}: who holds the lock, {n} contenders"),
            color: algorithm_color(name),
            contenders: n,
            holds: holds.clone(),
            window,
            faults: Vec::new(),
        })
        .collect();
    Ok(Some(figure(
        render_timelines(&dir.join(format!("timeline_{n}")), &panels, 1100, both)?,
        &format!("Owner timeline of {n} contenders: a bar per hold, one row per contender, over the first holds of the run."),
    )))
}

/// The poll-interval experiment's lines per algorithm: p50, p99, the handoff gap with its
/// ideal, store requests per grant.
fn poll_series(s: &SweepSummary, poll_names: &[String]) -> [Vec<Series>; 4] {
    let p = Experiment::PollInterval;
    let mut p50 = Vec::new();
    let mut p99 = Vec::new();
    let mut gap = Vec::new();
    let mut ops = Vec::new();
    for name in poll_names {
        let color = algorithm_color(name);
        p50.push(Series::new(name.clone(), color, pts(s, p, name, |r| Some(r.latency.p50_ms))));
        p99.push(Series::new(name.clone(), color, pts(s, p, name, |r| Some(r.latency.p99_ms))));
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
        ops.push(Series::new(name.clone(), color, pts(s, p, name, |r| r.store.ops_per_grant)));
    }
    [p50, p99, gap, ops]
}

/// The poll-interval experiment: latency, the handoff gap against its ideal, store requests.
fn poll_interval(dir: &Path, s: &SweepSummary) -> anyhow::Result<Figure> {
    let both = Formats::PngAndSvg;
    let p = Experiment::PollInterval;
    let poll_names = s.series_names(p);
    let [p50, p99, gap, ops] = poll_series(s, &poll_names);
    let side = s.series(p, &poll_names[0]).first().map_or(SIDE_CONTENDERS, |pt| pt.threads);
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
        chart("Handoff gap (release to next grant)".into(), "ms (log)", gap, Legend::UpperLeft),
        chart(
            "Store requests per grant".into(),
            "requests per grant (log)",
            ops,
            Legend::UpperRight,
        ),
    ];
    Ok(figure(
        render_lines(&dir.join("poll_interval"), &charts, 2, (620, 420), both)?,
        &format!(
            "The poll interval of the locks that poll ({}): acquisition latency, the median handoff gap against the algorithm's ideal \
             (lighter line: for the queue lock 3 round trips + half a poll interval, for the bakery 1 round trip + half a poll interval), \
             and store requests per grant.",
            poll_names.join(", ")
        ),
    ))
}

/// The clock-skew experiment: overtaken grants and Jain's index per time source.
fn clock_skew(dir: &Path, s: &SweepSummary) -> anyhow::Result<Figure> {
    let both = Formats::PngAndSvg;
    let k = Experiment::Skew;
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
        v.into_iter().map(|(x, y)| (if x <= 0.0 { 0.01 } else { x }, y)).collect::<Vec<_>>()
    };
    let over: Vec<Series> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            Series::new(
                n.clone(),
                color(i, n),
                shift(pts(s, k, n, |r| Some(r.fairness.overtakes.overtaken_fraction * 100.0))),
            )
        })
        .collect();
    let jain: Vec<Series> = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            Series::new(n.clone(), color(i, n), shift(pts(s, k, n, |r| r.fairness.jain_index)))
        })
        .collect();
    let side = s.series(k, &names[0]).first().map_or(SIDE_CONTENDERS, |pt| pt.threads);
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
    Ok(figure(
        render_lines(&dir.join("clock_skew"), &charts, 2, (640, 440), both)?,
        "Clock skew: each contender's clock is offset uniformly in ±skew. The queue lock orders its waiters by the time source's reading (local clock, hybrid logical clock, GlobalTime service); the shadow lock does not use time and is the reference. Where two lines coincide, the later one hides the earlier.",
    ))
}
