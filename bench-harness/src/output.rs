//! Writing results: the console comparison table, `summary.json` and `grants.csv`.

use crate::config::{BackendKind, RunConfig};
use crate::dist::format_duration;
use crate::metrics::Grant;
use crate::summary::{AlgorithmReport, Summary};
use anyhow::Context;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The exact header of `grants.csv`.
pub const GRANTS_CSV_HEADER: &str =
    "algorithm,lock,contender,requested_us,granted_us,released_us,token";

/// One line describing the scenario.
pub fn describe(cfg: &RunConfig) -> String {
    let skew = if cfg.skew.is_zero() {
        String::new()
    } else {
        format!(", skew ±{}", format_duration(cfg.skew))
    };
    let contention = format!(
        "{} contenders on {} lock{}, hold {}, think {}, {} {} time",
        cfg.threads,
        cfg.locks,
        if cfg.locks == 1 { "" } else { "s" },
        cfg.hold,
        cfg.think,
        format_duration(cfg.duration),
        cfg.clock,
    );
    let processes = if cfg.processes > 1 {
        format!(" in {} worker processes", cfg.processes)
    } else {
        String::new()
    };
    // The settings of the cell-model locks (embedded store and Cassandra).
    let cell_locks = format!(
        "{skew}, time source {}, poll {}, backoff {}, seed {}",
        cfg.time_source,
        format_duration(cfg.poll_interval),
        cfg.backoff.name(),
        cfg.seed,
    );
    match cfg.backend {
        BackendKind::Embedded => format!(
            "{contention}; {} store: {} replica{} at {}, round trip {} (mean {}){cell_locks}",
            cfg.backend,
            cfg.replicas,
            if cfg.replicas == 1 { "" } else { "s" },
            cfg.consistency,
            cfg.latency,
            format_duration(cfg.mean_round_trip()),
        ),
        BackendKind::Cassandra => format!(
            "{contention}{processes}; cassandra at {} (keyspace {}), reads and writes at {}, TTL {}{cell_locks}",
            crate::backend::address(cfg),
            crate::backend::cassandra_config(cfg)
                .map(|c| c.keyspace)
                .unwrap_or_else(|_| "?".into()),
            cfg.consistency,
            format_duration(cfg.ttl),
        ),
        BackendKind::Redis => format!(
            "{contention}{processes}; redis at {}, TTL {}{}, seed {}",
            crate::backend::address(cfg),
            format_duration(cfg.ttl),
            skew,
            cfg.seed,
        ),
        BackendKind::Zookeeper => format!(
            "{contention}{processes}; zookeeper at {}, session timeout {}, seed {}",
            crate::backend::address(cfg),
            format_duration(cfg.ttl),
            cfg.seed,
        ),
    }
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

/// The comparison table, one row per algorithm.
pub fn table(summary: &Summary) -> String {
    let header = [
        "algorithm",
        "grants",
        "grants/s/lock",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "gap p50 ms",
        "gap RTs",
        "gap/ideal",
        "Jain",
        "longest run",
        "overtaken",
        "ops/grant",
        "ops/s",
        "overlaps",
        "token viol.",
    ];
    let rows: Vec<Vec<String>> = summary.results.iter().map(row).collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: &[String], out: &mut String| {
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i == 0 {
                let _ = write!(out, "{cell:<w$}");
            } else {
                let _ = write!(out, "  {cell:>w$}");
            }
        }
        out.push('\n');
    };
    line(
        &header.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
        &mut out,
    );
    line(
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
        &mut out,
    );
    for r in &rows {
        line(r, &mut out);
    }
    out
}

fn row(r: &AlgorithmReport) -> Vec<String> {
    vec![
        r.algorithm.clone(),
        r.grants.to_string(),
        format!("{:.1}", r.throughput.grants_per_second_per_lock),
        format!("{:.1}", r.latency.p50_ms),
        format!("{:.1}", r.latency.p90_ms),
        format!("{:.1}", r.latency.p99_ms),
        format!("{:.1}", r.latency.max_ms),
        format!("{:.1}", r.handoff.p50_ms),
        opt(r.handoff.p50_round_trips, 1),
        opt(r.handoff.ratio_to_ideal, 2),
        opt(r.fairness.jain_index, 3),
        r.fairness.longest_run.length.to_string(),
        format!("{:.1}%", r.fairness.overtakes.overtaken_fraction * 100.0),
        if r.store.ops.is_some() {
            opt(r.store.ops_per_grant, 1)
        } else {
            "n/a".into()
        },
        r.store
            .ops_per_second
            .map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}")),
        r.safety.overlapping_holds.to_string(),
        r.safety.token_order_violations.to_string(),
    ]
}

/// Notes under the table: what the columns mean, and anything that went wrong.
pub fn notes(summary: &Summary) -> String {
    let mut out = String::new();
    out.push_str(
        "Requests still waiting at the end are drained (they may wait up to another duration); throughput and store load count the window only.\n\
         latency: request to grant. gap: release to the next grant while someone waited (RTs: in mean store round trips; \
         gap/ideal: median gap over the algorithm's ideal handoff). Jain: fairness of grants per contender (1 = even). \
         overtaken: grants that a later request overtook.\n",
    );
    for r in &summary.results {
        if !r.is_safe() {
            let _ = writeln!(
                out,
                "SAFETY VIOLATION in {}: {} overlapping holds, {} fencing-token order violations",
                r.algorithm, r.safety.overlapping_holds, r.safety.token_order_violations
            );
        }
        if !r.errors.is_clean() {
            let _ = writeln!(
                out,
                "{}: {} lock errors, {} release errors, {} leases lost while holding (first: {})",
                r.algorithm,
                r.errors.lock_errors,
                r.errors.release_errors,
                r.errors.leases_lost_while_holding,
                r.errors.first_error.as_deref().unwrap_or("-")
            );
        }
        if r.unfinished_requests > 0 {
            let _ = writeln!(
                out,
                "{}: {} requests were still waiting when the drain ended (at {:.1} s) and were given up; their waits are not in the latency figures",
                r.algorithm,
                r.unfinished_requests,
                r.finished_ms / 1000.0
            );
        }
        if r.fairness.starved_contenders > 0 {
            let _ = writeln!(
                out,
                "{}: {} contenders got no grant at all",
                r.algorithm, r.fairness.starved_contenders
            );
        }
    }
    out
}

/// Creates `dir` (and parents), failing with a clear message when it cannot be written.
pub fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output directory {}", dir.display()))?;
    let probe = dir.join(".bench-harness-write-test");
    fs::write(&probe, b"")
        .with_context(|| format!("cannot write into the output directory {}", dir.display()))?;
    let _ = fs::remove_file(probe);
    Ok(())
}

/// Writes `value` as pretty JSON with a final newline, through a temporary file so that a
/// reader never sees half a file.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value).context("cannot serialize the results")?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// Writes `bytes` to `path` through a temporary file in the same directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = tmp_path(path);
    fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// `grants.csv`: created with its header, then appended to as each algorithm finishes.
pub struct GrantsCsv {
    path: PathBuf,
}

impl GrantsCsv {
    /// Creates (or truncates) `path` and writes the header.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        fs::write(path, format!("{GRANTS_CSV_HEADER}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(GrantsCsv {
            path: path.to_path_buf(),
        })
    }

    /// Appends the grants of `algorithm`.
    pub fn append(&self, algorithm: &str, grants: &[Grant]) -> anyhow::Result<()> {
        let mut text = String::with_capacity(grants.len() * 48);
        for g in grants {
            let _ = writeln!(
                text,
                "{algorithm},{},{},{},{},{},{}",
                g.lock, g.contender, g.requested_us, g.granted_us, g.released_us, g.token
            );
        }
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .with_context(|| format!("cannot append to {}", self.path.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("cannot append to {}", self.path.display()))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads a `grants.csv` back (for charts and tests): `(algorithm, grant)` rows.
pub fn read_grants_csv(text: &str) -> anyhow::Result<Vec<(String, Grant)>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    anyhow::ensure!(
        header == GRANTS_CSV_HEADER,
        "unexpected grants.csv header: {header}"
    );
    lines
        .enumerate()
        .map(|(i, line)| {
            let f: Vec<&str> = line.split(',').collect();
            anyhow::ensure!(f.len() == 7, "line {}: expected 7 fields", i + 2);
            let n = |k: usize| {
                f[k].parse::<u64>()
                    .with_context(|| format!("line {}: field {}", i + 2, k + 1))
            };
            Ok((
                f[0].to_string(),
                Grant {
                    lock: n(1)? as u32,
                    contender: n(2)? as u32,
                    requested_us: n(3)?,
                    granted_us: n(4)?,
                    released_us: n(5)?,
                    token: n(6)?,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_csv_round_trips() {
        let dir = std::env::temp_dir().join(format!("bench-harness-csv-{}", std::process::id()));
        prepare_dir(&dir).unwrap();
        let csv = GrantsCsv::create(&dir.join("grants.csv")).unwrap();
        let g = Grant {
            lock: 1,
            contender: 2,
            requested_us: 3,
            granted_us: 4,
            released_us: 5,
            token: 6,
        };
        csv.append("queue", &[g]).unwrap();
        csv.append("shadow", &[g, g]).unwrap();
        let text = fs::read_to_string(csv.path()).unwrap();
        assert!(text.starts_with(&format!("{GRANTS_CSV_HEADER}\nqueue,1,2,3,4,5,6\n")));
        let back = read_grants_csv(&text).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2], ("shadow".to_string(), g));
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn unwritable_directories_are_reported() {
        let file = std::env::temp_dir().join(format!("bench-harness-file-{}", std::process::id()));
        fs::write(&file, b"x").unwrap();
        let e = prepare_dir(&file.join("sub")).unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot create the output directory"),
            "{e:#}"
        );
        let _ = fs::remove_file(file);
    }
}
