//! The console comparison table: a row per algorithm, an errors column, a line under the
//! table per algorithm that had an error (naming the first), and notes on what the columns
//! mean and anything else that went wrong.

use crate::measure::summary::{AlgorithmReport, Summary};
use std::fmt::Write as _;

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
        "stale acc/rej",
        "leases lost",
        "errors",
        "tombs/read p50/max",
        "tomb. warn/fail",
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
    line(&header.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &mut out);
    line(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(), &mut out);
    for r in &rows {
        line(r, &mut out);
    }
    out.push_str(&first_errors(summary));
    out
}

/// A line per algorithm that had an error: its counts by kind and the first message.
pub fn first_errors(summary: &Summary) -> String {
    let mut out = String::new();
    for r in summary.results.iter().filter(|r| !r.errors.is_clean()) {
        let _ = writeln!(
            out,
            "{}: {} lock errors, {} release errors, {} leases lost while holding{}; first error: {}",
            r.algorithm,
            r.errors.lock_errors,
            r.errors.release_errors,
            r.errors.leases_lost_while_holding,
            by_kind(&r.errors.by_kind),
            r.errors.first_error.as_deref().unwrap_or("-")
        );
    }
    out
}

/// " (by kind: store 2, timeout 1)", or nothing when no error was noted by kind.
fn by_kind(kinds: &std::collections::BTreeMap<String, u64>) -> String {
    if kinds.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
    format!(" (by kind: {})", parts.join(", "))
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
        if r.store.ops.is_some() { opt(r.store.ops_per_grant, 1) } else { "n/a".into() },
        r.store.ops_per_second.map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}")),
        r.safety.overlapping_holds.to_string(),
        r.safety.token_order_violations.to_string(),
        format!("{}/{}", r.fault_safety.stale_accepted, r.fault_safety.stale_rejected),
        r.fault_safety.leases_lost_signalled.to_string(),
        r.errors.total().to_string(),
        r.store.tombstones.map_or_else(
            || "n/a".to_string(),
            |t| format!("{}/{}", t.per_read_p50, t.per_read_max),
        ),
        r.store.tombstones.map_or_else(
            || "n/a".to_string(),
            |t| format!("{}/{}", t.reads_over_warning, t.reads_failed),
        ),
    ]
}

/// Notes under the table: what the columns mean, and anything that went wrong.
pub fn notes(summary: &Summary) -> String {
    let mut out = String::new();
    out.push_str(
        "Requests still waiting at the end are drained (they may wait up to another duration); throughput and store load count the window only.\n\
         latency: request to grant. gap: release to the next grant while someone waited (RTs: in mean store round trips; \
         gap/ideal: median gap over the algorithm's ideal handoff). Jain: fairness of grants per contender (1 = even). \
         overtaken: grants that a later request overtook. errors: lock errors + release errors + leases lost while holding. \
         tombs/read: tombstones a read scanned (median/most); warn/fail: reads over Cassandra's warning threshold (1,000) and failed past its failure threshold (100,000). \
         stale acc/rej: writes to the fenced resource made after another holder was granted, accepted/rejected by it (a resource without fencing accepts them all); \
         leases lost: holders told their lease was lost before they let go.\n",
    );
    for r in &summary.results {
        if !r.is_safe() {
            let _ = writeln!(
                out,
                "SAFETY VIOLATION in {}: {} overlapping holds ({:.1} ms in all), {} fencing-token order violations, {} stale writes accepted by the fenced resource",
                r.algorithm,
                r.safety.overlapping_holds,
                r.fault_safety.overlap_us as f64 / 1000.0,
                r.safety.token_order_violations,
                r.fault_safety.stale_accepted
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RunConfig;

    #[test]
    fn errors_have_a_column_and_the_first_one_is_named_under_the_table() {
        let cfg = RunConfig { algorithms: vec!["queue".into()], ..RunConfig::default() };
        let run = crate::measure::log::RunOutcome {
            algorithm: "queue",
            grants: Vec::new(),
            contenders: Vec::new(),
            counters: None,
            samples: Vec::new(),
            duration_us: 1,
            finished_us: 1,
            wall_time: std::time::Duration::ZERO,
            resource: Vec::new(),
            faults: Vec::new(),
        };
        let algorithm = cfg.backend.algorithm("queue").unwrap();
        let mut report = crate::measure::summary::analyze(&cfg, algorithm, &run);
        let mut summary = Summary::new(&cfg);
        summary.results.push(report.clone());
        let clean = table(&summary);
        assert!(clean.lines().next().unwrap().contains(" errors "), "{clean}");
        assert_eq!(clean.lines().count(), 3, "{clean}");
        report.errors.lock_errors = 2;
        report.errors.leases_lost_while_holding = 1;
        report.errors.first_error = Some("store unreachable: broken pipe".into());
        report.errors.by_kind.insert("store".into(), 2);
        summary.results[0] = report;
        let t = table(&summary);
        assert!(t.lines().nth(2).unwrap().contains(" 3  "), "{t}");
        assert!(
            t.contains("queue: 2 lock errors, 0 release errors, 1 leases lost while holding (by kind: store 2); first error: store unreachable: broken pipe"),
            "{t}"
        );
    }
}
