//! The checker: `bench-harness check DIR` (and `run --check`).
//!
//! It trusts nothing the run computed. It reads `grants.csv`, `resource.csv` and `faults.csv`
//! from DIR, recomputes every safety figure with [`crate::measure::safety`] per algorithm,
//! names the overlapping grants, and fails ([`Unsafe`], exit status 3) when any algorithm had
//! an overlapping hold or a stale write the fenced resource accepted. The fenced resource's
//! accept/reject decisions are read as they were made; only which writes were stale is
//! derived, from the grant log.

use crate::dist::parse_duration;
use crate::measure::log::{FaultWindow, ResourceWrite};
use crate::measure::metrics::Grant;
use crate::measure::safety::{self, SafetyFigures};
use crate::report::files;
use anyhow::Context;
use clap::Args;
use std::fmt::Write as _;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

/// The settings of `check`.
#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    /// The run's output directory (holding grants.csv, resource.csv and faults.csv).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Lease TTL of the run, by which each fault window is extended when unavailability is
    /// attributed to fault kinds [default: the ttl in DIR/summary.json, else 10s].
    #[arg(long, value_parser = parse_duration)]
    pub ttl: Option<Duration>,
    /// Overlapping grants to name per algorithm at most.
    #[arg(long, default_value_t = 10)]
    pub show: usize,
}

/// The checker found a violation: the binary exits with 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unsafe(pub String);

/// One algorithm's logs as read back.
#[derive(Debug, Default)]
pub struct Logs {
    /// Its grants.
    pub grants: Vec<Grant>,
    /// Its resource writes.
    pub writes: Vec<ResourceWrite>,
    /// Its faults.
    pub faults: Vec<FaultWindow>,
}

/// What the checker found for one algorithm.
#[derive(Debug)]
pub struct Verdict {
    /// The algorithm.
    pub algorithm: String,
    /// Its figures.
    pub figures: SafetyFigures,
    /// Its overlapping grants.
    pub overlaps: Vec<safety::Overlap>,
    /// How many grants it had.
    pub grants: usize,
}

/// Reads the three logs of `dir`, per algorithm in the order they first appear.
pub fn read_logs(dir: &Path) -> anyhow::Result<Vec<(String, Logs)>> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let grants = files::read_grants_csv(&read("grants.csv")?)?;
    let writes = files::read_resource_csv(&read("resource.csv")?)?;
    let faults = files::read_faults_csv(&read("faults.csv")?)?;
    let mut logs: Vec<(String, Logs)> = Vec::new();
    fn of(logs: &mut Vec<(String, Logs)>, name: String) -> &mut Logs {
        let at = match logs.iter().position(|(n, _)| *n == name) {
            Some(at) => at,
            None => {
                logs.push((name, Logs::default()));
                logs.len() - 1
            }
        };
        &mut logs[at].1
    }
    for (name, g) in grants {
        of(&mut logs, name).grants.push(g);
    }
    for (name, w) in writes {
        of(&mut logs, name).writes.push(w);
    }
    for (name, f) in faults {
        of(&mut logs, name).faults.push(f);
    }
    Ok(logs)
}

/// The checker's verdicts for every algorithm of `dir`.
pub fn check_dir(dir: &Path, ttl: Duration) -> anyhow::Result<Vec<Verdict>> {
    let ttl_us = ttl.as_micros() as u64;
    Ok(read_logs(dir)?
        .into_iter()
        .map(|(algorithm, logs)| {
            let (figures, overlaps) =
                safety::judge(&logs.grants, logs.writes.iter().copied(), &logs.faults, ttl_us);
            Verdict { figures, overlaps, grants: logs.grants.len(), algorithm }
        })
        .collect())
}

/// The TTL recorded in `dir/summary.json`, if any.
fn recorded_ttl(dir: &Path) -> Option<Duration> {
    let text = std::fs::read_to_string(dir.join("summary.json")).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    let ttl = json.get("config")?.get("ttl")?.as_str()?;
    crate::dist::parse_duration(ttl).ok()
}

/// The report printed by `check`.
pub fn render(verdicts: &[Verdict], show: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<14} {:>9} {:>8} {:>11} {:>6} {:>14} {:>14} {:>17} {:>11} {:>13}",
        "algorithm",
        "grants",
        "overlaps",
        "overlap ms",
        "stale",
        "stale accepted",
        "stale rejected",
        "without fencing",
        "leases lost",
        "unavailable s"
    );
    for v in verdicts {
        let f = &v.figures;
        let _ = writeln!(
            out,
            "{:<14} {:>9} {:>8} {:>11.1} {:>6} {:>14} {:>14} {:>17} {:>11} {:>13.1}",
            v.algorithm,
            v.grants,
            f.overlapping_holds,
            f.overlap_us as f64 / 1000.0,
            f.stale_writes,
            f.stale_accepted,
            f.stale_rejected,
            f.stale_accepted_without_fencing,
            f.leases_lost_signalled,
            f.unavailable_us as f64 / 1e6,
        );
    }
    for v in verdicts.iter().filter(|v| !v.figures.resumed_after_us_by_fault.is_empty()) {
        let resumed: Vec<String> = v
            .figures
            .resumed_after_us_by_fault
            .iter()
            .map(|(kind, us)| format!("{kind} {:.2} s", *us as f64 / 1e6))
            .collect();
        let _ = writeln!(
            out,
            "{}: grants resumed at most this long after a fault ended: {}",
            v.algorithm,
            resumed.join(", ")
        );
    }
    for v in verdicts.iter().filter(|v| !v.overlaps.is_empty()) {
        let _ = writeln!(out, "\n{}: {} overlapping holds", v.algorithm, v.overlaps.len());
        for o in v.overlaps.iter().take(show) {
            let _ = writeln!(
                out,
                "  lock {}: contender {} (token {}) held [{}, {}) us{}; contender {} (token {}) granted at {} us{}",
                o.first.lock,
                o.first.contender,
                o.first.token,
                o.first.granted_us,
                o.first.released_us,
                if o.first.lease_lost { ", told its lease was lost" } else { "" },
                o.second.contender,
                o.second.token,
                o.second.granted_us,
                if o.second.lease_lost { ", told its lease was lost" } else { "" },
            );
        }
        if v.overlaps.len() > show {
            let _ = writeln!(out, "  ... and {} more (--show N)", v.overlaps.len() - show);
        }
    }
    out
}

/// Fails with [`Unsafe`] naming every algorithm that overlapped or had a stale write accepted.
pub fn verdict(verdicts: &[Verdict]) -> Result<(), Unsafe> {
    let bad: Vec<String> = verdicts
        .iter()
        .filter(|v| !v.figures.is_safe())
        .map(|v| {
            format!(
                "{} ({} overlapping holds, {} stale writes accepted)",
                v.algorithm, v.figures.overlapping_holds, v.figures.stale_accepted
            )
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Unsafe(format!("unsafe: {}", bad.join("; "))))
    }
}

/// Checks `dir`, prints the report naming up to `show` overlapping grants per algorithm, and
/// fails with [`Unsafe`] when a run was unsafe.
pub fn check_and_report(dir: &Path, ttl: Duration, show: usize) -> anyhow::Result<()> {
    let verdicts = check_dir(dir, ttl)?;
    print!("{}", render(&verdicts, show));
    verdict(&verdicts)?;
    println!("safe: no overlapping hold and no stale write accepted in {}", dir.display());
    Ok(())
}

/// `bench-harness check DIR`.
pub fn run(args: &CheckArgs) -> anyhow::Result<()> {
    let ttl = args.ttl.or_else(|| recorded_ttl(&args.dir)).unwrap_or(Duration::from_secs(10));
    check_and_report(&args.dir, ttl, args.show)
}
