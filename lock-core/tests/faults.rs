//! The embedded store's fault switches that the harness's nemesis uses: an overloaded replica
//! (late and dropped mutations), a frozen client, and a client whose clock steps.

use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel};
use lock_core::store::{CellStore, CellWrite, Consistency, Micros, Slice};
use std::time::Duration;
use tokio::time::Instant;

const T: &str = "t";
const ROW: &str = "r";

fn cell(column: &str, timestamp: Micros) -> CellWrite {
    CellWrite { column: column.into(), value: b"v".to_vec(), timestamp, ttl: None }
}

fn three(latency: LatencyModel) -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig { replicas: 3, latency, seed: 11, ..Default::default() })
}

fn on_replica(s: &EmbeddedStore, index: usize) -> Vec<String> {
    s.inspect_replica(index, T, ROW).expect("replica").into_iter().map(|c| c.column).collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_lagging_replica_applies_late_and_one_reads_miss_the_write() {
    for latency in [LatencyModel::ZERO, LatencyModel::new(Duration::from_millis(1), Duration::ZERO)]
    {
        let s = three(latency);
        s.lag_replica(2, Duration::from_secs(1), 0.0);
        s.write(T, ROW, &[cell("x", 1)], Consistency::Quorum).await.unwrap();
        assert!(on_replica(&s, 2).is_empty(), "{latency:?}: applied before its lag");
        // A ONE read that lands on the lagging replica does not see the completed write.
        let mut stale = 0;
        for _ in 0..30 {
            if s.read(T, ROW, Slice::all(), Consistency::One).await.unwrap().is_empty() {
                stale += 1;
            }
        }
        assert!(stale > 0, "{latency:?}: no ONE read was stale");
        // QUORUM reads always overlap a replica that has it.
        for _ in 0..30 {
            assert_eq!(s.read(T, ROW, Slice::all(), Consistency::Quorum).await.unwrap().len(), 1);
        }
        // Past the lag (the apply is due exactly 1 s after the write began).
        tokio::time::sleep(Duration::from_millis(1_100)).await;
        assert_eq!(on_replica(&s, 2), ["x"], "{latency:?}: the late mutation landed");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_replica_that_drops_every_mutation_never_gets_them_and_quorum_still_works() {
    let s = three(LatencyModel::new(Duration::from_millis(1), Duration::ZERO));
    s.lag_replica(0, Duration::ZERO, 1.0);
    for i in 0..20 {
        s.write(T, ROW, &[cell(&format!("c{i:02}"), i)], Consistency::Quorum).await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(on_replica(&s, 0).is_empty());
    assert_eq!(on_replica(&s, 1).len(), 20);
    // Healthy again: new writes land, the dropped ones stay missing (no repair).
    s.lag_replica(0, Duration::ZERO, 0.0);
    s.write(T, ROW, &[cell("late", 99)], Consistency::All).await.unwrap();
    assert_eq!(on_replica(&s, 0), ["late"]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_partial_drop_loses_some_mutations_and_is_reproducible() {
    let run = || async {
        let s = three(LatencyModel::new(Duration::from_millis(1), Duration::ZERO));
        s.lag_replica(1, Duration::ZERO, 0.5);
        for i in 0..100 {
            s.write(T, ROW, &[cell(&format!("c{i:03}"), i)], Consistency::Quorum).await.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        on_replica(&s, 1)
    };
    let first = run().await;
    assert!((20..80).contains(&first.len()), "kept {} of 100", first.len());
    assert_eq!(first, run().await, "same seed, same drops");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_frozen_client_sends_nothing_and_sees_answers_only_when_thawed() {
    let s = three(LatencyModel::new(Duration::from_millis(2), Duration::ZERO));
    let client = s.client("frozen");
    s.pause_client("frozen", true);
    let start = Instant::now();
    let write = tokio::spawn({
        let client = client.clone();
        async move { client.write(T, ROW, &[cell("x", 1)], Consistency::Quorum).await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(on_replica(&s, 0).is_empty(), "sent while frozen");
    assert!(!write.is_finished());
    s.pause_client("frozen", false);
    write.await.unwrap().unwrap();
    assert!(start.elapsed() >= Duration::from_secs(5));
    assert_eq!(on_replica(&s, 0), ["x"]);

    // Frozen after sending: the write lands, its answer waits for the thaw.
    let write = tokio::spawn({
        let client = client.clone();
        async move { client.write(T, ROW, &[cell("y", 2)], Consistency::Quorum).await }
    });
    tokio::task::yield_now().await;
    s.pause_client("frozen", true);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(on_replica(&s, 0), ["x", "y"], "a sent request is not recalled");
    assert!(!write.is_finished(), "the answer was seen while frozen");
    s.pause_client("frozen", false);
    write.await.unwrap().unwrap();
    // Other clients were never frozen.
    s.client("other").read(T, ROW, Slice::all(), Consistency::Quorum).await.unwrap();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_clock_jump_is_seen_by_clocks_made_before_it() {
    let s = three(LatencyModel::ZERO);
    let client = s.client("jumpy").with_skew(1_000);
    let clock = client.clock();
    let other = s.client("steady").clock();
    assert_eq!(clock.now_micros() - other.now_micros(), 1_000);
    s.jump_clock("jumpy", -5_000_000);
    assert_eq!(clock.now_micros() - other.now_micros(), -4_999_000);
    assert_eq!(
        s.client("jumpy").clock().now_micros() - other.now_micros(),
        -5_000_000,
        "a new handle has no skew"
    );
    s.jump_clock("jumpy", 5_000_000);
    assert_eq!(clock.now_micros() - other.now_micros(), 1_000);
    assert_eq!(clock.skew(), 1_000);
}
