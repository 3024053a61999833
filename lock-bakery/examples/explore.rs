//! Larger exclusion sweeps of the bakery lock and per-request traces of one run, beyond what
//! the test suite runs (see `tests/exclusion.rs`).
//!
//! `cargo run --release -p lock-bakery --example explore -- sweep` (env `EXPLORE`, `SEEDS`);
//! `cargo run --release -p lock-bakery --example explore -- trace` (env `SEED`, `ONE`, `WHO`, `TO_MS`).
#[path = "../tests/support/sim.rs"]
mod sim;
use lock_core::embedded::LatencyModel;
use lock_core::Consistency;
use sim::*;
use std::time::Duration;

fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("sweep") => sweep_seeds(),
        Some("trace") => trace_seed(),
        _ => {
            eprintln!("usage: explore sweep|trace (see the source for the environment variables)");
            std::process::exit(2);
        }
    }
}

/// A larger sweep for the figures; see the module docs.
fn sweep_seeds() {
    let var = std::env::var("EXPLORE").unwrap_or_else(|_| "quorum".into());
    let seeds: u64 = std::env::var("SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let sc = match var.as_str() {
        "one" => Scenario { consistency: Consistency::One, ..Scenario::quorum() },
        "one-jitter" => Scenario {
            consistency: Consistency::One,
            latency: LatencyModel::new(Duration::ZERO, Duration::from_millis(10)),
            ..Scenario::quorum()
        },
        "one-restarts" => {
            Scenario { consistency: Consistency::One, rolling_restarts: true, ..Scenario::quorum() }
        }
        "restarts" => Scenario { rolling_restarts: true, ..Scenario::quorum() },
        "crowd" => Scenario { contenders: 32, rounds: 3, ..Scenario::quorum() },
        _ => Scenario::quorum(),
    };
    let t = std::time::Instant::now();
    let s = sweep(10_000..10_000 + seeds, sc);
    print(&var, &s);
    eprintln!("  ({:?} wall)", t.elapsed());
    for (seed, a, b) in s.overlaps.iter().take(5) {
        eprintln!(
            "  seed {seed}: {} held for {:?}, {} granted {:?} after its grant",
            a.owner,
            a.released - a.granted,
            b.owner,
            b.granted - a.granted
        );
    }
}

/// Prints the store requests of one run; see the module docs.
fn trace_seed() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    let one = std::env::var("ONE").is_ok();
    let sc = if one {
        Scenario { consistency: Consistency::One, rolling_restarts: true, ..Scenario::quorum() }
    } else {
        Scenario::quorum()
    };
    let trace: Trace = Default::default();
    let r = run_traced(seed, sc, Some(trace.clone()));
    eprintln!("seed {seed}: {} holds, {} overlapping pairs", r.holds.len(), r.overlaps.len());
    let who: Vec<String> =
        std::env::var("WHO").unwrap_or_default().split(',').map(String::from).collect();
    let to_ms: f64 = std::env::var("TO_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(f64::MAX);
    for (t0, t1, name, what) in trace.lock().unwrap().iter() {
        if (who == [""] || who.contains(name)) && t0.as_secs_f64() * 1e3 <= to_ms {
            eprintln!(
                "{:>9.3} {:>9.3} {name} {what}",
                t0.as_secs_f64() * 1e3,
                t1.as_secs_f64() * 1e3
            );
        }
    }
}
