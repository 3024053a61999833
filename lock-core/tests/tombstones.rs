//! "Tombstones stay", as in Cassandra: dead cells stay until a compaction after gc_grace, every
//! read scans and pays for the ones before its live cells, and past the thresholds it warns and
//! fails, on the embedded store in simulated time.

use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel, TombstoneHistogram};
use lock_core::store::{CellStore, CellWrite, Consistency, Micros, Slice, StoreError};
use std::time::Duration;
use tokio::time::Instant;

const T: &str = "t";
const ROW: &str = "r";
const Q: Consistency = Consistency::Quorum;

fn cell(column: &str, timestamp: Micros, ttl: Option<Duration>) -> CellWrite {
    CellWrite { column: column.into(), value: b"v".to_vec(), timestamp, ttl }
}

/// Writes and deletes `n` columns `c000000`… at the head of the row, then writes one live
/// column `z` after them.
async fn head_of_tombstones(s: &impl CellStore, n: usize) {
    for i in 0..n {
        let column = format!("c{i:06}");
        s.write(T, ROW, &[cell(&column, 1, None)], Q).await.unwrap();
        s.delete(T, ROW, &column, 2, Q).await.unwrap();
    }
    s.write(T, ROW, &[cell("z", 1, None)], Q).await.unwrap();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn tombstones_stay_for_gc_grace_and_go_at_the_next_compaction() {
    let s = EmbeddedStore::new(EmbeddedConfig {
        gc_grace: Duration::from_secs(60),
        compaction_interval: Some(Duration::from_secs(100)),
        ..Default::default()
    });
    head_of_tombstones(&s, 10).await;
    tokio::time::sleep(Duration::from_secs(90)).await;
    // Past gc_grace, but no compaction yet: reads still scan them.
    s.read(T, ROW, Slice::first(1), Q).await.unwrap();
    assert_eq!(s.inspect_tombstones(0, T, ROW), Some(10));
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The row's first access 100 s after its creation compacts it.
    assert_eq!(s.inspect_tombstones(0, T, ROW), Some(0));
    s.read(T, ROW, Slice::first(1), Q).await.unwrap();
    let stats = &s.tombstone_counters()[T];
    assert_eq!((stats.reads, stats.max, stats.p50()), (2, 10, 0));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn by_default_tombstones_stay_ten_days() {
    let s = EmbeddedStore::new(EmbeddedConfig::default());
    head_of_tombstones(&s, 5).await;
    tokio::time::sleep(Duration::from_secs(9 * 86_400)).await;
    assert_eq!(s.inspect_tombstones(0, T, ROW), Some(5));
    tokio::time::sleep(Duration::from_secs(2 * 86_400)).await;
    assert_eq!(
        s.inspect_tombstones(0, T, ROW),
        Some(0),
        "compacted 10 days after the row was created"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn expired_ttl_cells_are_tombstones_too() {
    let s = EmbeddedStore::new(EmbeddedConfig::default());
    for i in 0..4 {
        s.write(T, ROW, &[cell(&format!("a{i}"), 1, Some(Duration::from_secs(1)))], Q)
            .await
            .unwrap();
    }
    s.write(T, ROW, &[cell("b", 1, None)], Q).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = s.read(T, ROW, Slice::first(1), Q).await.unwrap();
    assert_eq!(got[0].column, "b");
    assert_eq!(s.tombstone_counters()[T].max, 4);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_read_counts_only_the_tombstones_before_its_limit() {
    let s = EmbeddedStore::new(EmbeddedConfig::default());
    // d0 ✝, l1, d2 ✝, d3 ✝, l4, d5 ✝
    for (i, dead) in [true, false, true, true, false, true].into_iter().enumerate() {
        let column = format!("c{i}");
        s.write(T, ROW, &[cell(&column, 1, None)], Q).await.unwrap();
        if dead {
            s.delete(T, ROW, &column, 2, Q).await.unwrap();
        }
    }
    let scanned = |slice: Slice| {
        let s = s.clone();
        async move {
            s.reset_counters();
            s.read(T, ROW, slice, Q).await.unwrap();
            s.tombstone_counters()[T].max
        }
    };
    assert_eq!(scanned(Slice::first(1)).await, 1);
    assert_eq!(scanned(Slice::first(2)).await, 3);
    assert_eq!(scanned(Slice::all()).await, 4);
    assert_eq!(scanned(Slice::from("c2", 1)).await, 2);
    assert_eq!(scanned(Slice::from("c5", 1)).await, 1);
    assert_eq!(scanned(Slice::first(0)).await, 0);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn reads_pay_for_the_tombstones_they_scan() {
    let rt = Duration::from_millis(1);
    for replicas in [1, 3] {
        let s = EmbeddedStore::new(EmbeddedConfig {
            replicas,
            latency: LatencyModel::new(rt, Duration::ZERO),
            tombstone_scan_cost: Duration::from_micros(10),
            ..Default::default()
        });
        head_of_tombstones(&s, 500).await;
        let t0 = Instant::now();
        s.read(T, ROW, Slice::first(1), Q).await.unwrap();
        assert_eq!(t0.elapsed(), rt + Duration::from_micros(10) * 500, "{replicas} replicas");
        // A read that starts past the tombstones scans none.
        let t0 = Instant::now();
        s.read(T, ROW, Slice::from("z", 1), Q).await.unwrap();
        assert_eq!(t0.elapsed(), rt);
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn past_the_failure_threshold_a_read_fails_with_a_typed_error() {
    for replicas in [1, 3] {
        let s = EmbeddedStore::new(EmbeddedConfig {
            replicas,
            latency: LatencyModel::new(Duration::from_millis(1), Duration::from_micros(300)),
            tombstone_warn_threshold: 10,
            tombstone_failure_threshold: 100,
            ..Default::default()
        });
        head_of_tombstones(&s, 50).await;
        s.read(T, ROW, Slice::first(1), Q).await.unwrap();
        head_of_tombstones(&s, 101).await; // c000000..c000100 again: 101 distinct tombstones
        let err = s.read(T, ROW, Slice::first(1), Q).await.unwrap_err();
        assert_eq!(
            err,
            StoreError::TombstoneOverwhelming { table: T.into(), row: ROW.into(), scanned: 101 }
        );
        assert!(err.to_string().contains("101 tombstones"), "{err}");
        assert!(!err.may_have_applied());
        let stats = &s.tombstone_counters()[T];
        assert_eq!(
            (stats.reads, stats.warned, stats.failed, stats.max),
            (2, 2, 1, 101),
            "{replicas} replicas"
        );
        // A whole-row read with the live cells first still fails: it scans them all.
        assert!(s.read(T, ROW, Slice::from("c000050", 1), Q).await.is_ok());
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_tombstone_on_one_replica_still_hides_a_stale_live_cell_on_another() {
    // Replica 2 misses the delete; QUORUM reads (2 of 3) always include a replica with it.
    let s = EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel::new(Duration::from_millis(1), Duration::from_micros(500)),
        seed: 3,
        ..Default::default()
    });
    for i in 0..200 {
        s.write(T, ROW, &[cell(&format!("c{i:03}"), 1, None)], Q).await.unwrap();
    }
    s.stop_replica(2);
    for i in 0..199 {
        s.delete(T, ROW, &format!("c{i:03}"), 2, Q).await.unwrap();
    }
    s.start_replica(2);
    for _ in 0..50 {
        let got = s.read(T, ROW, Slice::first(1), Q).await.unwrap();
        assert_eq!(got[0].column, "c199");
    }
}

#[test]
fn the_histogram_keeps_three_percent() {
    let mut h = TombstoneHistogram::default();
    for v in [0u64, 1, 31, 7023, 7023, 7023, 7023, 100_001] {
        h.record(v);
    }
    let (lo, hi) = TombstoneHistogram::bucket(7023);
    assert!(lo <= 7023 && 7023 <= hi && (hi - lo) as f64 / 7023.0 < 0.032, "{lo}..{hi}");
    assert_eq!(TombstoneHistogram::bucket(31), (31, 31));
    assert!((7023..=hi).contains(&h.quantile(0.5)), "{}", h.quantile(0.5));
    assert_eq!(h.quantile(0.0), 0);
}

/// A long run's scale: 150,000 tombstones at the head of a row, 100,000 `first(1)` reads.
/// Counting must not walk the tombstones (~300 chunk lengths per rank instead).
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn counting_150k_tombstones_for_100k_reads_is_cheap() {
    let s = EmbeddedStore::new(EmbeddedConfig {
        tombstone_failure_threshold: 1_000_000,
        ..Default::default()
    });
    let c = s.client("reader");
    let filled = std::time::Instant::now();
    head_of_tombstones(&c, 150_000).await;
    let fill = filled.elapsed();
    let started = std::time::Instant::now();
    for _ in 0..100_000 {
        let got = c.read(T, ROW, Slice::first(1), Q).await.unwrap();
        assert_eq!(got.len(), 1);
    }
    let reads = started.elapsed();
    let stats = &s.tombstone_counters()[T];
    eprintln!(
        "fill 150,000 tombstones: {fill:?}; 100,000 first(1) reads: {reads:?}; p50 {}",
        stats.p50()
    );
    assert_eq!((stats.reads, stats.max), (100_000, 150_000));
    assert!(reads < Duration::from_secs(10), "{reads:?}");
}
