//! The checker: `bench-harness check DIR` (and `run --check`).
//!
//! It trusts nothing the run computed. It reads `grants.csv`, `resource.csv` and `faults.csv`
//! from DIR, recomputes every safety figure with [`crate::measure::safety`] per algorithm,
//! names the overlapping grants, and fails ([`Unsafe`], exit status 3) when any algorithm had
//! an overlapping hold or a stale write the fenced resource accepted. The fenced resource's
//! accept/reject decisions are read as they were made; only which writes were stale is
//! derived, from the grant log.

use crate::dist::parse_duration;
use crate::measure::grant_log::GrantLog;
use crate::measure::log::{FaultWindow, ResourceWrite};
use crate::measure::metrics::Grant;
use crate::measure::safety::{self, SafetyFigures};
use crate::measure::spool::{Spool, Spooled};
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

/// One algorithm's logs as read back: the grants sorted on disk, the resource's writes
/// spooled to disk in the order of the file, and the faults.
#[derive(Debug, Default)]
pub struct Logs {
    /// Its grants.
    pub grants: GrantLog,
    /// Its resource writes.
    pub writes: Spooled<ResourceWrite>,
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

/// Reads the three logs of `dir`, per algorithm in the order they first appear. The files are
/// read a line at a time and the grants and writes go to disk as they are read, so a soak's
/// millions of rows cost what a minute's do.
pub fn read_logs(dir: &Path) -> anyhow::Result<Vec<(String, Logs)>> {
    let open = |name: &str| {
        let path = dir.join(name);
        let file = std::fs::File::open(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        anyhow::Ok(std::io::BufReader::with_capacity(1 << 16, file))
    };
    // Each algorithm's rows, by its place among the names.
    let mut names: Vec<String> = Vec::new();
    let mut place = |name: &str| match names.iter().position(|n| n == name) {
        Some(at) => at,
        None => {
            names.push(name.to_string());
            names.len() - 1
        }
    };
    let mut grants: Vec<Spool<Grant>> = Vec::new();
    files::each_grant_row(open("grants.csv")?, |name, g| entry(&mut grants, place(name)).push(&g))?;
    let mut writes: Vec<Spool<ResourceWrite>> = Vec::new();
    files::each_resource_row(open("resource.csv")?, |name, w| {
        entry(&mut writes, place(name)).push(&w)
    })?;
    let mut faults: Vec<Vec<FaultWindow>> = Vec::new();
    for (name, f) in files::read_faults_csv(open("faults.csv")?)? {
        entry(&mut faults, place(&name)).push(f);
    }
    let on_disk = "cannot keep the logs in a temporary file";
    let (mut grants, mut writes, mut faults) =
        (grants.into_iter(), writes.into_iter(), faults.into_iter());
    names
        .into_iter()
        .map(|name| {
            let spooled = grants.next().unwrap_or_default().finish().context(on_disk)?;
            let logs = Logs {
                grants: GrantLog::sort(spooled.iter()).context(on_disk)?,
                writes: writes.next().unwrap_or_default().finish().context(on_disk)?,
                faults: faults.next().unwrap_or_default(),
            };
            Ok((name, logs))
        })
        .collect()
}

/// Entry `at` of `v`, which grows with defaults up to it.
fn entry<T: Default>(v: &mut Vec<T>, at: usize) -> &mut T {
    if v.len() <= at {
        v.resize_with(at + 1, T::default);
    }
    &mut v[at]
}

/// The checker's verdicts for every algorithm of `dir`.
pub fn check_dir(dir: &Path, ttl: Duration) -> anyhow::Result<Vec<Verdict>> {
    let ttl_us = ttl.as_micros() as u64;
    Ok(read_logs(dir)?
        .into_iter()
        .map(|(algorithm, logs)| {
            let (figures, overlaps) =
                safety::judge(&logs.grants, logs.writes.iter(), &logs.faults, ttl_us);
            Verdict { figures, overlaps, grants: logs.grants.len() as usize, algorithm }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::passes::GrantPasses;
    use crate::primitive::Share;
    use crate::report::files::{grant_line, resource_line};

    fn grant(lock: u32, contender: u32, granted_us: u64, released_us: u64, token: u64) -> Grant {
        Grant {
            lock,
            contender,
            requested_us: 0,
            granted_us,
            released_us,
            token,
            lease_lost: false,
            crashed: false,
            queued_us: None,
            share: Share::Exclusive,
        }
    }

    #[test]
    fn each_algorithm_gets_its_rows_in_the_order_its_name_first_appears() {
        let dir = tempfile::tempdir().unwrap();
        let (b1, a1, b2, b3) = (
            grant(0, 1, 30, 40, 3),
            grant(0, 2, 0, 10, 1),
            grant(0, 2, 0, 20, 1),
            grant(0, 3, 15, 25, 2),
        );
        let rows = [("b", b1), ("a", a1), ("b", b2), ("b", b3)];
        let mut grants = format!("{}\n", files::GRANTS_CSV_HEADER);
        for (name, g) in rows {
            // Either line ending reads the same.
            grants += &format!("{name},{}\r\n", grant_line(&g));
        }
        std::fs::write(dir.path().join("grants.csv"), grants).unwrap();
        let w = ResourceWrite { lock: 0, contender: 2, token: 1, at_us: 18, accepted: true };
        let resource = format!(
            "{}\nc,{}\nb,{}\n",
            files::RESOURCE_CSV_HEADER,
            resource_line(&w),
            resource_line(&w)
        );
        std::fs::write(dir.path().join("resource.csv"), resource).unwrap();
        std::fs::write(dir.path().join("faults.csv"), format!("{}\n", files::FAULTS_CSV_HEADER))
            .unwrap();

        let logs = read_logs(dir.path()).unwrap();
        let names: Vec<&str> = logs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["b", "a", "c"]);
        let b: Vec<Grant> = logs[0].1.grants.pass().collect();
        assert_eq!(b, [b2, b3, b1], "in grant order");
        assert_eq!(logs[1].1.grants.len(), 1);
        assert_eq!((logs[2].1.grants.len(), logs[2].1.writes.len()), (0, 1));

        // b's contender 2 held until 20 and contender 3 was granted at 15: one overlap, and
        // its write at 18 came after the next grant, so it was stale and accepted.
        let verdicts = check_dir(dir.path(), Duration::from_secs(1)).unwrap();
        let f = &verdicts[0].figures;
        assert_eq!((verdicts[0].grants, f.overlapping_holds), (3, 1));
        assert_eq!((f.stale_writes, f.stale_accepted), (1, 1));
        assert!(verdict(&verdicts).is_err());
    }

    #[test]
    fn a_bad_row_is_named_by_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let good = grant_line(&grant(0, 1, 0, 10, 1));
        let text = format!("{}\nq,{good}\nq,0,1,0,x,10,1,false,false\n", files::GRANTS_CSV_HEADER);
        std::fs::write(dir.path().join("grants.csv"), text).unwrap();
        let e = read_logs(dir.path()).unwrap_err();
        assert!(e.to_string().contains("grants.csv line 3: field 5 (\"x\") is not valid"), "{e}");
        let e = read_logs(&dir.path().join("nowhere")).unwrap_err();
        assert!(e.to_string().starts_with("cannot read "), "{e}");
    }
}
