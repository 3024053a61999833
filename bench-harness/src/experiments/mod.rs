//! Experiments: many runs, one question each, written into `results/`.
//!
//! - [`sweep`]: the thesis's benchmark, regenerated: every algorithm against the number of
//!   contenders, the poll interval and clock skew, in simulated time (`bench-harness sweep`,
//!   `scripts/regenerate-results.sh`);
//! - [`longrun`]: every algorithm over an hour of simulated time, where Cassandra's
//!   tombstones show (`bench-harness longrun`, `scripts/regenerate-results.sh`);
//! - [`compare`]: the engines side by side in wall time (`bench-harness engines`,
//!   `scripts/compare-engines.sh`);
//! - [`scale`]: every engine the harness can start against clients, locks and key
//!   distribution, with what each point costs the servers and the harness (`bench-harness
//!   scale`, `scripts/regenerate-results.sh`);
//! - [`primitives`]: the reader-writer locks, semaphores and elections of every engine that
//!   has them, fair weather and under leader faults (`bench-harness primitives`,
//!   `scripts/regenerate-results.sh`).
//!
//! The sweep writes `results/README.md`; the experiments measured apart keep their files in a
//! directory of their own and a [`Section`] of that README, which both they and the sweep
//! regenerate from their JSON file, so neither overwrites the other's work.

pub mod compare;
pub mod longrun;
pub mod primitives;
pub mod safety;
pub mod scale;
pub mod soak;
pub mod sweep;

use crate::report::files;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// A section of the results README owned by an experiment measured apart.
pub struct Section {
    /// The experiment's directory under the results directory.
    pub dir: &'static str,
    /// The marker line before the section.
    pub begin: &'static str,
    /// The marker line after it.
    pub end: &'static str,
    /// The section's text from the files in `results_dir/dir`; `None` when they are missing.
    pub render: fn(results_dir: &Path) -> anyhow::Result<Option<String>>,
}

/// The sections the sweep regenerates, in order.
pub static SECTIONS: &[&Section] = &[&longrun::SECTION, &compare::SECTION];

/// `readme` with the text between `section`'s markers replaced by `text` (or `text` appended,
/// after a blank line, when the markers are missing).
pub fn splice(readme: &str, section: &Section, text: &str) -> String {
    if let (Some(b), Some(e)) = (readme.find(section.begin), readme.find(section.end)) {
        if b < e {
            let mut end = e + section.end.len();
            if readme[end..].starts_with('\n') {
                end += 1;
            }
            return format!("{}{}{}", &readme[..b], text, &readme[end..]);
        }
    }
    let mut out = readme.trim_end_matches('\n').to_string();
    out.push_str("\n\n");
    out.push_str(text);
    out
}

/// After an experiment wrote into `out`: when `out` is `section.dir` and its parent holds a
/// README.md (the sweep's), regenerate that README's section. Returns the README updated.
pub fn update_results_readme(out: &Path, section: &Section) -> anyhow::Result<Option<PathBuf>> {
    if out.file_name().is_none_or(|n| n != section.dir) {
        return Ok(None);
    }
    let results = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        Some(_) => Path::new("."),
        None => return Ok(None),
    };
    let readme_path = results.join("README.md");
    let Ok(readme) = std::fs::read_to_string(&readme_path) else {
        return Ok(None);
    };
    let Some(text) = (section.render)(results)? else {
        return Ok(None);
    };
    files::write_atomic(&readme_path, splice(&readme, section, &text).as_bytes())?;
    Ok(Some(readme_path))
}

/// `bench-harness <version>`, the tool line of every experiment's JSON file.
pub fn tool() -> String {
    format!("bench-harness {}", env!("CARGO_PKG_VERSION"))
}

/// What every point of a wall-time experiment shares (flattened into its scenario, so result
/// files show the fields at the scenario's top level).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PointTiming {
    /// Hold time.
    pub hold: crate::dist::Dist,
    /// Think time.
    pub think: crate::dist::Dist,
    /// Wall time of each point's window.
    #[serde(with = "crate::dist::serde_duration")]
    pub duration: std::time::Duration,
    /// Lease TTL, Redis expiry, ZooKeeper session timeout, etcd lease TTL (whole seconds).
    #[serde(with = "crate::dist::serde_duration")]
    pub ttl: std::time::Duration,
    /// Poll interval of the polling locks.
    #[serde(with = "crate::dist::serde_duration")]
    pub poll_interval: std::time::Duration,
    /// Seed.
    pub seed: u64,
}

/// The flags every point of a wall-time experiment shares: hold and think times, TTL, poll
/// interval and seed.
#[derive(clap::Args, Debug, Clone)]
pub struct PointArgs {
    /// Hold and think times.
    #[command(flatten)]
    pub workload: crate::args::WorkloadArgs,
    /// Lease TTL and poll interval.
    #[command(flatten)]
    pub timing: crate::args::TimingArgs,
    /// Seed of the contenders' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl PointTiming {
    /// The timing `args` give, each point's window `duration`.
    pub fn of(args: &PointArgs, duration: std::time::Duration) -> PointTiming {
        PointTiming {
            hold: args.workload.hold,
            think: args.workload.think,
            duration,
            ttl: args.timing.ttl,
            poll_interval: args.timing.poll_interval,
            seed: args.seed,
        }
    }

    /// `cfg` with this timing.
    pub fn apply(&self, cfg: &mut crate::config::RunConfig) {
        cfg.hold = self.hold;
        cfg.think = self.think;
        cfg.duration = self.duration;
        cfg.ttl = self.ttl;
        cfg.poll_interval = self.poll_interval;
        cfg.seed = self.seed;
    }
}

/// Says what an experiment wrote: its summary `json`, the charts `drawn`, README.md, into
/// `out` (and `also`, e.g. ", and the engines section of results/README.md"), and how long it
/// took since `wall`.
pub fn say_written(
    quiet: bool,
    json: &str,
    drawn: &[PathBuf],
    out: &Path,
    also: &str,
    wall: std::time::Instant,
) {
    let names: Vec<String> = drawn
        .iter()
        .filter_map(|f| f.file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .collect();
    let (names, out, secs) = (names.join(", "), out.display(), wall.elapsed().as_secs_f64());
    let line = format!("wrote {json}, {names} and README.md into {out}{also} in {secs:.1} s");
    crate::report::progress::status(quiet, &line);
}

/// What an experiment that can redraw does first: with `redraw`, the summary it wrote into
/// `out/file` earlier (nothing is measured); otherwise `None`, with `out` ready for a new one.
pub fn earlier_or_prepare<T: serde::de::DeserializeOwned>(
    out: &Path,
    file: &str,
    redraw: bool,
) -> anyhow::Result<Option<T>> {
    if redraw {
        return files::read_earlier(&out.join(file)).map(Some);
    }
    files::prepare_dir(out)?;
    Ok(None)
}

/// Runs `run` on every job on `threads` OS threads, longest first as `order` lists them (every
/// index once); results in job order. The first failure stops the others and is returned.
pub fn parallel<J: Sync, R: Send>(
    jobs: &[J],
    order: &[usize],
    threads: usize,
    bar: &indicatif::ProgressBar,
    run: fn(&J) -> anyhow::Result<R>,
) -> anyhow::Result<Vec<R>> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<anyhow::Result<R>>>> =
        Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..threads.clamp(1, jobs.len().max(1)) {
            scope.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&index) = order.get(k) else { break };
                let done = run(&jobs[index]);
                let failed = done.is_err();
                results.lock().unwrap_or_else(|e| e.into_inner())[index] = Some(done);
                bar.inc(1);
                if failed {
                    // Let the other threads stop early too.
                    next.store(order.len(), Ordering::Relaxed);
                    break;
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(anyhow::anyhow!("a run did not happen (an earlier run failed)"))
            })
        })
        .collect()
}

/// `previous` with each row of `fresh` in place of the row with the same key, or else added at
/// the end: how an experiment re-run for some of its rows keeps the others.
pub fn replace_rows<T, K: PartialEq>(
    mut previous: Vec<T>,
    fresh: Vec<T>,
    key: impl Fn(&T) -> K,
) -> Vec<T> {
    for row in fresh {
        let k = key(&row);
        match previous.iter_mut().find(|r| key(r) == k) {
            Some(old) => *old = row,
            None => previous.push(row),
        }
    }
    previous
}

#[cfg(test)]
mod tests {
    #[test]
    fn replaced_rows_keep_their_place_and_new_rows_go_last() {
        let previous = vec![("a", 1), ("b", 2), ("c", 3)];
        let fresh = vec![("b", 20), ("d", 40)];
        let merged = super::replace_rows(previous, fresh, |r| r.0);
        assert_eq!(merged, vec![("a", 1), ("b", 20), ("c", 3), ("d", 40)]);
    }

    use super::*;

    #[test]
    fn a_section_is_replaced_in_place_or_appended() {
        let s = &compare::SECTION;
        let sec = format!("{}\nnew\n{}\n", s.begin, s.end);
        let plain = "# Results\n\ntext\n";
        let once = splice(plain, s, &sec);
        assert_eq!(once, format!("# Results\n\ntext\n\n{sec}"));
        // Idempotent, and what surrounds the section stays.
        assert_eq!(splice(&once, s, &sec), once);
        let old = format!("# R\n\n{}\nold\n{}\n\n## After\n", s.begin, s.end);
        assert_eq!(splice(&old, s, &sec), format!("# R\n\n{sec}\n## After\n"));
        // Two sections side by side keep each other.
        let l = &longrun::SECTION;
        let both = splice(&once, l, &format!("{}\nlong\n{}\n", l.begin, l.end));
        assert!(both.contains("new") && both.contains("long"));
        assert_eq!(splice(&both, s, &sec), both);
    }

    #[test]
    fn parallel_keeps_job_order_and_reports_failures() {
        let bar = indicatif::ProgressBar::hidden();
        let jobs = [3u32, 1, 2];
        let out = parallel(&jobs, &[2, 0, 1], 2, &bar, |j| Ok(j * 10)).unwrap();
        assert_eq!(out, [30, 10, 20]);
        let err = parallel(&jobs, &[0, 1, 2], 1, &bar, |j| {
            anyhow::ensure!(*j != 1, "job {j} failed");
            Ok(*j)
        })
        .unwrap_err();
        assert!(err.to_string().contains("job 1 failed"), "{err}");
    }
}
