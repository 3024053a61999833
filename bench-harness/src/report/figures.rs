//! The charts of one run, drawn from its [`Summary`] and grant logs into the output directory:
//!
//! - `latency_cdf.png` / `.svg`: the acquisition latency CDF of every algorithm;
//! - `timeline.png`: who held lock 0 when (under `--key-dist zipf:S`, the hottest lock), one
//!   panel per algorithm (the shadow lock's bursts against the queue lock's turn-taking); with
//!   `--faults`, around the first fault, with the fault windows shaded and labelled (kind and
//!   target);
//! - `grants_per_contender.png`: grants per contender, sorted, per algorithm (a flat line is
//!   a fair lock).

use super::charts::{
    algorithm_color, render_lines, render_timelines, Formats, LineChart, Series, TimelinePanel,
};
use crate::measure::log::FaultWindow;
use crate::measure::metrics::Grant;
use crate::measure::summary::Summary;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Who held lock 0 when, as timeline bars: contender, grant and release in seconds. A run's
/// charts keep these of each algorithm, not its grant log (a third of its size, and only lock
/// 0's).
pub type Holds = Vec<(u32, f64, f64)>;

/// Holds of lock 0 as timeline bars, in seconds.
pub fn holds_of_lock0(grants: impl IntoIterator<Item = Grant>) -> Holds {
    grants
        .into_iter()
        .filter(|g| g.lock == 0)
        .map(|g| (g.contender, g.granted_us as f64 / 1e6, g.released_us as f64 / 1e6))
        .collect()
}

/// Holds of lock 0 in a run's owner timeline: without faults it shows the run's start, up to
/// the release of the [`TIMELINE_HOLDS`]-th hold of lock 0 of the busiest algorithm.
pub const TIMELINE_HOLDS: usize = 120;

/// What a run's owner timeline needs of one algorithm's grant log (in grant order): lock 0's
/// holds, of a run `with_faults` all of them (its window follows the first fault of any
/// algorithm), otherwise the ones granted by the release of its [`TIMELINE_HOLDS`]-th hold,
/// since the window ends there or before ([`timeline_window`]) and no other hold is drawn.
pub fn holds_for_timeline(grants: impl Iterator<Item = Grant> + Clone, with_faults: bool) -> Holds {
    let lock0 = grants.filter(|g| g.lock == 0);
    let end_us = if with_faults { None } else { nth_release(lock0.clone(), TIMELINE_HOLDS) };
    lock0
        .take_while(|g| end_us.is_none_or(|end| g.granted_us <= end))
        .map(|g| (g.contender, g.granted_us as f64 / 1e6, g.released_us as f64 / 1e6))
        .collect()
}

/// The `n`-th earliest release of `grants` (in grant order), keeping `n` of them: once a grant
/// comes after the `n`-th earliest release so far, no later one releases before it.
fn nth_release(grants: impl Iterator<Item = Grant>, n: usize) -> Option<u64> {
    let mut earliest = std::collections::BinaryHeap::with_capacity(n + 1);
    for g in grants {
        if earliest.len() == n && earliest.peek().is_some_and(|&nth| g.granted_us > nth) {
            break;
        }
        earliest.push(g.released_us);
        if earliest.len() > n {
            earliest.pop();
        }
    }
    (earliest.len() == n && n > 0).then(|| earliest.peek().copied()).flatten()
}

/// The time window in seconds that shows about `holds` holds of lock 0 of the busiest
/// algorithm (but no more than the run).
pub fn timeline_window(logs: &[(String, Holds)], holds: usize, duration_s: f64) -> (f64, f64) {
    let end = logs
        .iter()
        .filter_map(|(_, lock0)| {
            let mut times: Vec<f64> = lock0.iter().map(|&(_, _, released)| released).collect();
            times.sort_unstable_by(f64::total_cmp);
            times.get(holds.saturating_sub(1)).copied()
        })
        .fold(f64::INFINITY, f64::min);
    (0.0, if end.is_finite() && end > 0.0 { end.min(duration_s) } else { duration_s })
}

/// Latency CDF panel for a set of algorithms' reports.
pub fn cdf_chart(title: &str, summary: &Summary) -> LineChart {
    LineChart {
        title: title.to_string(),
        x_label: "acquisition latency (ms, log)".into(),
        y_label: "fraction of grants".into(),
        x_log: true,
        y_log: false,
        y_range: Some((0.0, 1.02)),
        legend: super::charts::Legend::LowerRight,
        series: summary
            .results
            .iter()
            .map(|r| Series {
                name: r.algorithm.clone(),
                color: algorithm_color(&r.algorithm),
                points: r
                    .latency_cdf
                    .iter()
                    .map(|p| (p.latency_ms.max(0.001), p.quantile))
                    .collect(),
                markers: false,
            })
            .collect(),
    }
}

/// The timeline's window when the run had faults: around the first one, so that what it
/// did to the holds shows (`None` without faults).
pub fn fault_window(faults: &[FaultWindow], duration_s: f64) -> Option<(f64, f64)> {
    let first = faults.iter().min_by_key(|f| f.start_us)?;
    let (a, b) = (first.start_us as f64 / 1e6, first.end_us as f64 / 1e6);
    let span = (b - a).max(1.0);
    Some(((a - span).max(0.0), (b + 2.0 * span).min(duration_s.max(b))))
}

/// Draws the charts of a run into `dir`; returns the files written. `faults` holds each
/// algorithm's fault windows (by name), shaded in its owner timeline.
pub fn draw_run(
    dir: &Path,
    summary: &Summary,
    logs: &[(String, Holds)],
    faults: &BTreeMap<String, Vec<FaultWindow>>,
) -> anyhow::Result<Vec<PathBuf>> {
    let cfg = &summary.config;
    let mut files = Vec::new();
    let title = format!("Acquisition latency, {} contenders", cfg.threads);
    files.extend(render_lines(
        &dir.join("latency_cdf"),
        &[cdf_chart(&title, summary)],
        1,
        (900, 540),
        Formats::PngAndSvg,
    )?);

    let duration_s = cfg.duration.as_secs_f64();
    let all_faults: Vec<FaultWindow> = faults.values().flatten().cloned().collect();
    let window = fault_window(&all_faults, duration_s)
        .unwrap_or_else(|| timeline_window(logs, TIMELINE_HOLDS, duration_s));
    let panels: Vec<TimelinePanel> = logs
        .iter()
        .map(|(name, holds)| TimelinePanel {
            faults: faults
                .get(name)
                .into_iter()
                .flatten()
                .map(|f| {
                    (
                        f.start_us as f64 / 1e6,
                        f.end_us as f64 / 1e6,
                        format!("{} {}", f.kind, f.target),
                    )
                })
                .collect(),
            title: if cfg.key_dist.is_fixed() {
                format!(
                    "{name}: holders of lock 0 ({} contenders)",
                    cfg.threads.div_ceil(cfg.locks)
                )
            } else {
                format!("{name}: holders of lock 0 of {} (keys {})", cfg.locks, cfg.key_dist)
            },
            color: algorithm_color(name),
            contenders: cfg.threads,
            holds: holds.clone(),
            window,
        })
        .collect();
    files.extend(render_timelines(&dir.join("timeline"), &panels, 1100, Formats::Png)?);

    let per_contender = LineChart {
        title: format!("Grants per contender, sorted ({} contenders)", cfg.threads),
        x_label: "contenders, most served first".into(),
        y_label: "grants".into(),
        series: summary
            .results
            .iter()
            .map(|r| {
                let mut counts: Vec<u64> = r.contenders.iter().map(|c| c.grants).collect();
                counts.sort_unstable_by(|a, b| b.cmp(a));
                Series {
                    name: r.algorithm.clone(),
                    color: algorithm_color(&r.algorithm),
                    points: counts
                        .iter()
                        .enumerate()
                        .map(|(i, &n)| (i as f64 + 1.0, n as f64))
                        .collect(),
                    markers: cfg.threads <= 64,
                }
            })
            .collect(),
        ..LineChart::default()
    };
    files.extend(render_lines(
        &dir.join("grants_per_contender"),
        &[per_contender],
        1,
        (900, 480),
        Formats::Png,
    )?);
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without faults the timeline draws the same bars from the holds kept as from every hold
    /// of lock 0, and finds the same window, whichever algorithm is the busiest.
    #[test]
    fn the_holds_kept_draw_the_timeline_every_hold_draws() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let log = |rng: &mut rand::rngs::StdRng, n: usize| {
            let mut grants: Vec<Grant> = (0..n)
                .map(|i| {
                    let granted = rng.random_range(0..1_000_000u64);
                    let held = rng.random_range(0..200_000);
                    let lock = rng.random_range(0..2);
                    crate::measure::metrics::test_grant(
                        lock,
                        i as u32 % 7,
                        0,
                        granted,
                        granted + held,
                        0,
                    )
                })
                .collect();
            grants.sort_by_key(|g| (g.lock, g.granted_us, g.contender));
            grants
        };
        let mut cut = 0;
        for round in 0..50 {
            let logs: Vec<Vec<Grant>> = (0..3)
                .map(|_| {
                    let n = rng.random_range(0..400);
                    log(&mut rng, n)
                })
                .collect();
            let every: Vec<(String, Holds)> =
                logs.iter().map(|g| (String::new(), holds_of_lock0(g.iter().copied()))).collect();
            let kept: Vec<(String, Holds)> = logs
                .iter()
                .map(|g| (String::new(), holds_for_timeline(g.iter().copied(), false)))
                .collect();
            let window = timeline_window(&every, TIMELINE_HOLDS, 1.0);
            assert_eq!(timeline_window(&kept, TIMELINE_HOLDS, 1.0), window, "round {round}");
            let (t0, t1) = window;
            let drawn = |holds: &Holds| -> Holds {
                holds.iter().filter(|(_, s, e)| *e >= t0 && *s <= t1).copied().collect()
            };
            for ((_, all), (_, some)) in every.iter().zip(&kept) {
                assert_eq!(drawn(all), drawn(some), "round {round}");
                assert!(some.len() <= all.len());
                cut += usize::from(some.len() < all.len());
            }
        }
        assert!(cut > 10, "the holds were cut in {cut} logs only");
    }
}
