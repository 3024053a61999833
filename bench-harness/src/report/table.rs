//! The console comparison table: a row per algorithm, an errors column, a line under the
//! table per algorithm that had an error (naming the first), and notes on what the shown
//! columns mean and anything else that went wrong.
//!
//! The table fits a terminal of [`WIDTH`] columns ([`View::Compact`], the default): the
//! columns a person compares locks by are always there, a column that only matters when it is
//! not zero (stale writes, lost leases, tombstone warnings, …) joins them when some row has
//! something in it and the table still fits, and a line under the table names any such column
//! left out. [`View::Wide`] (`--wide`) shows every column. `summary.json` and the CSV files
//! always hold every figure.

use super::console::{self, wrap};
use crate::measure::summary::{AlgorithmReport, Summary};
use std::fmt::Write as _;

pub use super::console::WIDTH;

/// Which columns the console table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum View {
    /// The comparison columns, plus the notable ones while the table fits [`WIDTH`].
    #[default]
    Compact,
    /// Every column.
    Wide,
}

/// When the compact table shows a column.
#[derive(Clone, Copy)]
enum Shown {
    /// Always: a column locks are compared by.
    Always,
    /// When some row has something in it (and the table still fits).
    WhenNotable(fn(&AlgorithmReport) -> bool),
    /// Only in the wide table.
    WideOnly,
}

/// One column: its header, when the compact table shows it, what it means, and its cell.
struct Column {
    header: &'static str,
    shown: Shown,
    /// The legend entry; columns that share one (the latency percentiles) give the same text,
    /// and the legend says it once.
    legend: &'static str,
    cell: fn(&AlgorithmReport) -> String,
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".to_string(), |v| format!("{v:.digits$}"))
}

const LATENCY: &str = "pNN/max ms: latency, request to grant";

/// A latency percentile's column: `latency!("p50 ms", Always, p50_ms)`, to a tenth of a ms.
macro_rules! latency {
    ($header:literal, $shown:ident, $field:ident) => {
        Column {
            header: $header,
            shown: Shown::$shown,
            legend: LATENCY,
            cell: |r| format!("{:.1}", r.latency.$field),
        }
    };
}

/// Every column, in the order both views print them.
const COLUMNS: &[Column] = &[
    Column { header: "algorithm", shown: Shown::Always, legend: "", cell: |r| r.algorithm.clone() },
    Column {
        header: "grants",
        shown: Shown::WideOnly,
        legend: "grants: in the measured window",
        cell: |r| r.grants.to_string(),
    },
    Column {
        header: "grants/s",
        shown: Shown::Always,
        legend: "grants/s: per lock, in the measured window (requests still waiting at its end \
                 are drained, which may take another duration, and are not counted)",
        cell: |r| format!("{:.1}", r.throughput.grants_per_second_per_lock),
    },
    latency!("p50 ms", Always, p50_ms),
    latency!("p90 ms", WideOnly, p90_ms),
    latency!("p99 ms", Always, p99_ms),
    latency!("max ms", WideOnly, max_ms),
    Column {
        header: "gap p50 ms",
        shown: Shown::Always,
        legend: "gap: release to the next grant while someone waited (median)",
        cell: |r| format!("{:.1}", r.handoff.p50_ms),
    },
    Column {
        header: "gap RTs",
        shown: Shown::WideOnly,
        legend: "gap RTs: the gap in mean store round trips",
        cell: |r| opt(r.handoff.p50_round_trips, 1),
    },
    Column {
        header: "gap/ideal",
        shown: Shown::WideOnly,
        legend: "gap/ideal: median gap over the algorithm's ideal handoff",
        cell: |r| opt(r.handoff.ratio_to_ideal, 2),
    },
    Column {
        header: "Jain",
        shown: Shown::Always,
        legend: "Jain: fairness of grants per contender (1 = even)",
        cell: |r| opt(r.fairness.jain_index, 3),
    },
    Column {
        header: "longest run",
        shown: Shown::WideOnly,
        legend: "longest run: most grants in a row to one contender",
        cell: |r| r.fairness.longest_run.length.to_string(),
    },
    Column {
        header: "overtaken",
        shown: Shown::Always,
        legend: "overtaken: grants that a later request overtook",
        cell: |r| format!("{:.1}%", r.fairness.overtakes.overtaken_fraction * 100.0),
    },
    Column {
        header: "in line",
        shown: Shown::WideOnly,
        legend: "in line: grants overtaken by a request that began after they were in line (-: the lock has no line)",
        cell: |r| r.fairness.overtakes.in_line_text(),
    },
    Column {
        header: "ops/grant",
        shown: Shown::Always,
        legend: "ops/grant: store requests sent in the window per grant (setup, such as sessions opened, not counted; n/a: the engine does not count them)",
        cell: |r| if r.store.ops.is_some() { opt(r.store.ops_per_grant, 1) } else { "n/a".into() },
    },
    Column {
        header: "ops/s",
        shown: Shown::WideOnly,
        legend: "ops/s: store requests per second, in the measured window",
        cell: |r| r.store.ops_per_second.map_or_else(|| "n/a".to_string(), |v| format!("{v:.0}")),
    },
    Column {
        header: "overlaps",
        shown: Shown::Always,
        legend: "overlaps: grants made while another holder still held the lock (0 = safe)",
        cell: |r| r.safety.overlapping_holds.to_string(),
    },
    Column {
        header: "token viol.",
        shown: Shown::WhenNotable(|r| r.safety.token_order_violations != Some(0)),
        legend:
            "token viol.: grants whose fencing token was not above the previous holder's (n/a: \
                 the algorithm hands out none)",
        cell: |r| r.safety.token_violations_text(),
    },
    Column {
        header: "stale acc/rej",
        shown: Shown::WhenNotable(|r| {
            r.fault_safety.stale_accepted + r.fault_safety.stale_rejected > 0
        }),
        legend: "stale acc/rej: writes to the fenced resource made after another holder was \
                 granted, accepted/rejected by it (a resource without fencing accepts them all)",
        cell: |r| format!("{}/{}", r.fault_safety.stale_accepted, r.fault_safety.stale_rejected),
    },
    Column {
        header: "leases lost",
        shown: Shown::WhenNotable(|r| r.fault_safety.leases_lost_signalled > 0),
        legend: "leases lost: holders told their lease was lost before they let go",
        cell: |r| r.fault_safety.leases_lost_signalled.to_string(),
    },
    Column {
        header: "errors",
        shown: Shown::Always,
        legend: "errors: lock errors + release errors + leases lost while holding",
        cell: |r| r.errors.total().to_string(),
    },
    Column {
        header: "tombs/read p50/max",
        shown: Shown::WideOnly,
        legend: "tombs/read: tombstones a read scanned (median/most)",
        cell: |r| {
            r.store.tombstones.map_or_else(
                || "n/a".to_string(),
                |t| format!("{}/{}", t.per_read_p50, t.per_read_max),
            )
        },
    },
    Column {
        header: "tomb. warn/fail",
        shown: Shown::WhenNotable(|r| {
            r.store.tombstones.is_some_and(|t| t.reads_over_warning + t.reads_failed > 0)
        }),
        legend: "tomb. warn/fail: reads over Cassandra's tombstone warning threshold (1,000) \
                 and failed past its failure threshold (100,000)",
        cell: |r| {
            r.store.tombstones.map_or_else(
                || "n/a".to_string(),
                |t| format!("{}/{}", t.reads_over_warning, t.reads_failed),
            )
        },
    },
];

/// The columns a view shows for `summary`, and the notable columns the compact view had to
/// leave out to fit [`WIDTH`].
fn choose(summary: &Summary, view: View) -> (Vec<&'static Column>, Vec<&'static Column>) {
    if view == View::Wide {
        return (COLUMNS.iter().collect(), Vec::new());
    }
    let notable = |c: &Column| match c.shown {
        Shown::Always => true,
        Shown::WhenNotable(f) => summary.results.iter().any(f),
        Shown::WideOnly => false,
    };
    let mut shown: Vec<&Column> =
        COLUMNS.iter().filter(|c| matches!(c.shown, Shown::Always)).collect();
    let mut left_out = Vec::new();
    // Candidates in column order: the first ones listed get the room first.
    for c in COLUMNS.iter().filter(|c| matches!(c.shown, Shown::WhenNotable(_)) && notable(c)) {
        let mut with: Vec<&Column> = shown.clone();
        with.push(c);
        with.sort_by_key(|x| COLUMNS.iter().position(|y| std::ptr::eq(*x, y)));
        if width(&with, summary) <= WIDTH {
            shown = with;
        } else {
            left_out.push(c);
        }
    }
    (shown, left_out)
}

/// The headers and the cells of `columns` over `summary`'s rows.
fn cells(columns: &[&Column], summary: &Summary) -> (Vec<&'static str>, Vec<Vec<String>>) {
    let headers = columns.iter().map(|c| c.header).collect();
    let rows = summary.results.iter().map(|r| columns.iter().map(|c| (c.cell)(r)).collect());
    (headers, rows.collect())
}

/// The printed width of a table of `columns`.
fn width(columns: &[&Column], summary: &Summary) -> usize {
    let (headers, rows) = cells(columns, summary);
    console::width(&headers, &rows)
}

/// The comparison table, one row per algorithm, in `view`.
pub fn table(summary: &Summary, view: View) -> String {
    let (columns, left_out) = choose(summary, view);
    let (headers, rows) = cells(&columns, summary);
    let mut out = console::render(&headers, 1, &rows);
    if !left_out.is_empty() {
        let names: Vec<&str> = left_out.iter().map(|c| c.header).collect();
        let _ = writeln!(
            out,
            "Not zero but left out to fit {WIDTH} columns (see --wide): {}",
            names.join(", ")
        );
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

/// Notes under the table: what the shown columns mean (wrapped to [`WIDTH`]), and anything
/// that went wrong.
pub fn notes(summary: &Summary, view: View) -> String {
    let (columns, _) = choose(summary, view);
    let mut entries: Vec<&str> = Vec::new();
    for c in columns.iter().filter(|c| !c.legend.is_empty()) {
        if !entries.contains(&c.legend) {
            entries.push(c.legend);
        }
    }
    let mut out = wrap(&format!("{}.", entries.join("; ")), WIDTH);
    for r in &summary.results {
        if !r.is_safe() {
            let _ = writeln!(
                out,
                "SAFETY VIOLATION in {}: {} overlapping holds ({:.1} ms in all), {} fencing-token order violations, {} stale writes accepted by the fenced resource",
                r.algorithm,
                r.safety.overlapping_holds,
                r.fault_safety.overlap_us as f64 / 1000.0,
                r.safety.token_violations_text(),
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

    /// The report of a queue run of 1 µs that granted nothing and saw nothing.
    fn quiet_queue_report(cfg: &RunConfig) -> crate::measure::summary::AlgorithmReport {
        let run = crate::measure::log::RunOutcome {
            algorithm: "queue",
            grants: Default::default(),
            contenders: Vec::new(),
            counters: None,
            sessions_opened: None,
            samples: Vec::new(),
            duration_us: 1,
            finished_us: 1,
            wall_time: std::time::Duration::ZERO,
            resource: Default::default(),
            faults: Vec::new(),
        };
        let algorithm = cfg.backend.algorithm("queue").unwrap();
        crate::measure::summary::analyze(cfg, algorithm, &run)
    }

    #[test]
    fn errors_have_a_column_and_the_first_one_is_named_under_the_table() {
        let cfg = RunConfig { algorithms: vec!["queue".into()], ..RunConfig::default() };
        let mut report = quiet_queue_report(&cfg);
        let mut summary = Summary::new(&cfg);
        summary.results.push(report.clone());
        let clean = table(&summary, View::Wide);
        assert!(clean.lines().next().unwrap().contains(" errors "), "{clean}");
        assert_eq!(clean.lines().count(), 3, "{clean}");
        report.errors.lock_errors = 2;
        report.errors.leases_lost_while_holding = 1;
        report.errors.first_error = Some("store unreachable: broken pipe".into());
        report.errors.by_kind.insert("store".into(), 2);
        summary.results[0] = report;
        let t = table(&summary, View::Wide);
        assert!(t.lines().nth(2).unwrap().contains(" 3  "), "{t}");
        assert!(
            t.contains("queue: 2 lock errors, 0 release errors, 1 leases lost while holding (by kind: store 2); first error: store unreachable: broken pipe"),
            "{t}"
        );
    }

    /// A summary of the six default algorithms with figures as wide as a long, faulty run
    /// gives, so the widths are what a user can meet.
    fn wide_figures(notable: bool) -> Summary {
        let cfg = RunConfig::default();
        let mut summary = Summary::new(&cfg);
        for name in ["shadow", "queue", "bakery", "queue-bounded", "queue-push", "lwt"] {
            let mut r = quiet_queue_report(&cfg);
            r.algorithm = name.into();
            r.grants = 1_234_567;
            r.throughput.grants_per_second_per_lock = 12_345.6;
            r.latency.p50_ms = 12_345.6;
            r.latency.p99_ms = 123_456.7;
            r.handoff.p50_ms = 1_234.5;
            r.fairness.jain_index = Some(0.987);
            r.store.ops = None;
            r.errors.lock_errors = 12_345;
            if notable {
                r.safety.token_order_violations = Some(3);
                r.fault_safety.stale_accepted = 1_234;
                r.fault_safety.stale_rejected = 5_678;
                r.fault_safety.leases_lost_signalled = 99;
            }
            summary.results.push(r);
        }
        summary
    }

    fn header(t: &str) -> &str {
        t.lines().next().unwrap()
    }

    #[test]
    fn the_compact_table_fits_the_terminal_and_wide_shows_every_column() {
        for notable in [false, true] {
            let summary = wide_figures(notable);
            let compact = table(&summary, View::Compact);
            let longest = compact.lines().map(|l| l.chars().count()).max().unwrap();
            assert!(longest <= WIDTH, "{longest} columns:\n{compact}");
            for h in ["grants/s", "p50 ms", "p99 ms", "gap p50 ms", "Jain", "overlaps", "errors"] {
                assert!(header(&compact).contains(h), "{h} missing:\n{compact}");
            }
            assert!(!header(&compact).contains("gap RTs"), "{compact}");
            let wide = table(&summary, View::Wide);
            for c in COLUMNS {
                assert!(header(&wide).contains(c.header), "{} missing:\n{wide}", c.header);
            }
            assert!(header(&wide).chars().count() > WIDTH);
        }
    }

    #[test]
    fn notable_columns_join_while_they_fit_and_the_rest_are_named() {
        let quiet = table(&wide_figures(false), View::Compact);
        assert!(!header(&quiet).contains("stale acc/rej"), "{quiet}");
        assert!(!quiet.contains("left out"), "{quiet}");
        let faulty = table(&wide_figures(true), View::Compact);
        // The first notable column fits; what does not is named under the table.
        assert!(header(&faulty).contains("token viol."), "{faulty}");
        let named = faulty.lines().find(|l| l.contains("left out to fit 120")).expect(&faulty);
        for h in ["stale acc/rej", "leases lost"] {
            assert!(header(&faulty).contains(h) || named.contains(h), "{h}:\n{faulty}");
        }
    }

    #[test]
    fn the_legend_explains_the_shown_columns_only_within_the_width() {
        let summary = wide_figures(false);
        let compact = notes(&summary, View::Compact);
        assert!(compact.contains("Jain: fairness"), "{compact}");
        assert!(!compact.contains("gap RTs"), "{compact}");
        assert_eq!(compact.matches("latency, request to grant").count(), 1, "{compact}");
        assert!(compact.lines().all(|l| l.chars().count() <= WIDTH), "{compact}");
        let wide = notes(&summary, View::Wide);
        assert!(wide.contains("gap RTs") && wide.contains("tombs/read"), "{wide}");
    }
}
