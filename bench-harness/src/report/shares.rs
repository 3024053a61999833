//! The console table of a run of another primitive than the mutex (`--primitive`): a row per
//! algorithm with how many held at once against the limit, the reads' and the writes'
//! latency apart, and the failover after a holder's crash.

use super::console::{self, wrap, WIDTH};
use crate::measure::shares::ShareFigures;
use crate::measure::summary::Summary;

const LEGEND: &str = "holders: mean holders at once while somebody held (readers, for a \
    reader-writer lock; permits, for a semaphore) / the most at once / the limit (-: none); \
    read, write: latency, request to grant, p50/p99/max ms (write: every grant that is not a \
    read); failover: from a holder's crash to the next grant of its lock, p50/max ms, and how \
    many (none without --faults crash/who=holder).";

fn ms3(a: f64, b: f64, c: f64) -> String {
    format!("{a:.1}/{b:.1}/{c:.1}")
}

fn row(algorithm: &str, f: &ShareFigures) -> Vec<String> {
    let limit = f.limit.map_or_else(|| "-".to_string(), |l| l.to_string());
    let failover = match (f.failover_p50_ms, f.failover_max_ms) {
        (Some(p50), Some(max)) => format!("{p50:.0}/{max:.0} ({})", f.failovers),
        _ => "-".to_string(),
    };
    vec![
        algorithm.to_string(),
        f.primitive.to_string(),
        format!("{:.2}/{}/{limit}", f.mean_holders, f.max_holders),
        f.reads.as_ref().map_or_else(|| "-".into(), |r| ms3(r.p50_ms, r.p99_ms, r.max_ms)),
        ms3(f.writes.p50_ms, f.writes.p99_ms, f.writes.max_ms),
        failover,
    ]
}

/// The table and its legend, when the run's algorithms measured shares; `None` for the mutex.
pub fn table(summary: &Summary) -> Option<String> {
    let rows: Vec<Vec<String>> = summary
        .results
        .iter()
        .filter_map(|r| r.shares.as_ref().map(|f| row(&r.algorithm, f)))
        .collect();
    if rows.is_empty() {
        return None;
    }
    let headers = ["algorithm", "primitive", "holders", "read ms", "write ms", "failover ms"];
    Some(format!("\n{}{}\n", console::render(&headers, 2, &rows), wrap(LEGEND, WIDTH)))
}
