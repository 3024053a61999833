//! The simulator's own speed: grants per wall second per algorithm, the figure that
//! bounds how long every simulated experiment takes. Each iteration is one whole run as `bench-harness --threads 64 -a ALGORITHM` makes
//! it (a fresh embedded store, 64 contenders on one lock, simulated time, seed 1), shortened
//! to [`SIMULATED`] so that an iteration takes a fraction of a second; criterion reports its
//! throughput in grants (elements) per second of wall time.
//!
//! `cargo bench -p bench-harness --bench simulator` for the full measurement; the short form,
//! fit for CI, `cargo bench -p bench-harness --bench simulator -- --warm-up-time 1
//! --measurement-time 2`, takes ten runs per algorithm, about 50 s in all on a 2-core
//! machine (after a release build of the workspace).
//!
//! `SIMULATOR_BENCH_SECONDS=600` runs the full 600 s instead (a minute or more per
//! algorithm).
//!
//! The runs are deterministic, so each algorithm's grant count is taken once, from a first
//! run, and every iteration is checked to grant exactly as many.

use bench_harness::config::RunConfig;
use bench_harness::engines::Algorithm;
use bench_harness::run::contenders::run_in_process;
use criterion::{criterion_group, Criterion, Throughput};
use std::time::Duration;

/// The binary's allocator (see `src/main.rs`), so that the figures are the binary's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Simulated time of one run by default: long enough for every algorithm to be past its
/// start (the first grants of the bakery and the queue locks come after a few hundred
/// milliseconds), short enough for ten runs of the slowest in a couple of seconds.
const SIMULATED: Duration = Duration::from_secs(5);

/// Another run length, in simulated seconds (e.g. 600 for the table, whose queue
/// and bakery rows carry the tombstones and the long queues of a long run).
const SECONDS_VAR: &str = "SIMULATOR_BENCH_SECONDS";

/// The default scenario of the embedded store for `algorithm`, 64 contenders, shortened.
fn scenario(algorithm: &Algorithm, duration: Duration) -> RunConfig {
    RunConfig {
        algorithms: vec![algorithm.name.to_string()],
        threads: 64,
        duration,
        ..RunConfig::default()
    }
}

/// [`SIMULATED`], or the seconds [`SECONDS_VAR`] asks for.
fn run_length() -> Duration {
    match std::env::var(SECONDS_VAR) {
        Ok(s) => {
            Duration::from_secs(s.parse().unwrap_or_else(|_| {
                panic!("{SECONDS_VAR}={s}: expected a whole number of seconds")
            }))
        }
        Err(_) => SIMULATED,
    }
}

/// One run of `algorithm`: its grant count.
fn grants(cfg: &RunConfig, algorithm: &'static Algorithm) -> u64 {
    let outcome = run_in_process(cfg, algorithm, None).expect("a simulated run");
    outcome.grants.len() as u64
}

fn simulator(c: &mut Criterion) {
    let mut group = c.benchmark_group("simulator");
    group.sample_size(10);
    let duration = run_length();
    for algorithm in RunConfig::default().backend.algorithms() {
        let cfg = scenario(algorithm, duration);
        let expected = grants(&cfg, algorithm);
        group.throughput(Throughput::Elements(expected));
        group.bench_function(algorithm.name, |b| {
            b.iter(|| assert_eq!(grants(&cfg, algorithm), expected, "a run is deterministic"))
        });
    }
    group.finish();
}

criterion_group!(benches, simulator);

// `criterion_main!` plus the font, as in `locks.rs`: criterion's reports are drawn with the
// harness's plotters build, which knows only the fonts registered with it.
fn main() {
    bench_harness::report::charts::register_fonts();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
