//! Micro-benchmarks in wall time on the embedded store without latency:
//!
//! - `uncontended/<algorithm>`: one acquire + release of a free lock, per registered
//!   algorithm (the algorithm's own CPU cost: its store requests, lease task and token), with
//!   tombstones purged at once;
//! - `store/<op>/<replicas>`: the store's own operations: a one-cell write, a whole-row read
//!   of a 10-cell row, and a one-cell slice of a 100-cell row, with 1 and 3 replicas at QUORUM.
//!
//! `cargo bench -p bench-harness` (add `-- --quick` for a fast pass).

use bench_harness::config::{ClockMode, RunConfig};
use bench_harness::engines::embedded::{Latency, Options};
use bench_harness::engines::ContenderSpec;
use criterion::{criterion_group, BenchmarkId, Criterion};
use lock_core::embedded::{EmbeddedConfig, EmbeddedStore};
use lock_core::store::{CellStore, CellWrite, Consistency, Slice};
use std::hint::black_box;
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime")
}

fn uncontended(c: &mut Criterion) {
    let rt = runtime();
    let cfg = RunConfig {
        clock: ClockMode::Wall,
        // Tombstones go at the next scan: otherwise every queue-head read scans the tombstones
        // of the last second's iterations, and the bench measures that instead of the lock.
        engine: bench_harness::engines::EngineOptions::of(&Options {
            latency: Latency::ZERO,
            replicas: 1,
            gc_grace: std::time::Duration::ZERO,
            tombstone_cost: std::time::Duration::ZERO,
            ..Options::default()
        }),
        threads: 1,
        ..RunConfig::default()
    };
    let mut group = c.benchmark_group("uncontended");
    for algorithm in cfg.backend.algorithms() {
        let (engine, locker) = rt.block_on(async {
            let engine =
                cfg.backend.open(cfg.engine_setup("bench")).await.expect("embedded engine");
            let spec = ContenderSpec {
                index: 0,
                owner: RunConfig::owner_id(0),
                seed: cfg.contender_seed(0),
                skew_us: 0,
                session: None,
            };
            let asking = engine.contender(algorithm, spec).await.expect("locker");
            let locker = asking.mutex().cloned().expect("the default primitive is the mutex");
            (engine, locker)
        });
        group.bench_function(algorithm.name, |b| {
            b.iter(|| {
                rt.block_on(async {
                    let guard = locker.lock("bench-lock", None).await.expect("free lock");
                    black_box(guard.token());
                    guard.release().await.expect("release");
                })
            })
        });
        drop(engine);
    }
    group.finish();
}

fn cell(column: String, timestamp: i64) -> CellWrite {
    CellWrite { column, value: b"value".to_vec(), timestamp, ttl: None }
}

fn store_ops(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("store");
    for replicas in [1usize, 3] {
        let store = rt.block_on(async {
            EmbeddedStore::new(EmbeddedConfig { replicas, ..EmbeddedConfig::default() })
        });
        let client = store.client("bench");
        rt.block_on(async {
            let small: Vec<CellWrite> = (0..10).map(|i| cell(format!("c{i:03}"), 1)).collect();
            client.write("t", "small", &small, Consistency::Quorum).await.expect("write");
            let large: Vec<CellWrite> = (0..100).map(|i| cell(format!("c{i:03}"), 1)).collect();
            client.write("t", "large", &large, Consistency::Quorum).await.expect("write");
        });
        let mut ts = 10i64;
        group.bench_with_input(BenchmarkId::new("write", replicas), &replicas, |b, _| {
            b.iter(|| {
                ts += 1;
                rt.block_on(client.write("t", "w", &[cell("x".into(), ts)], Consistency::Quorum))
                    .expect("write")
            })
        });
        group.bench_with_input(BenchmarkId::new("read_row_10", replicas), &replicas, |b, _| {
            b.iter(|| {
                black_box(
                    rt.block_on(client.read("t", "small", Slice::all(), Consistency::Quorum))
                        .expect("read"),
                )
            })
        });
        group.bench_with_input(BenchmarkId::new("slice_1_of_100", replicas), &replicas, |b, _| {
            b.iter(|| {
                black_box(
                    rt.block_on(client.read(
                        "t",
                        "large",
                        Slice::from("c050", 1),
                        Consistency::Quorum,
                    ))
                    .expect("read"),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, uncontended, store_ops);

// `criterion_main!` plus the font: the harness's plotters build renders text with ab_glyph
// from registered fonts only (no system fonts), and criterion draws its reports with
// plotters, so the embedded DejaVu Sans must be registered before the first report.
fn main() {
    bench_harness::report::charts::register_fonts();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
