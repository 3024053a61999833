//! Replication of the embedded store: consistency levels, stopped replicas, timeouts, and a
//! wall-time smoke test on a multi-thread runtime.

use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel};
use lock_core::store::{CellStore, CellWrite, Consistency, Micros, Slice, StoreError};
use std::time::Duration;
use tokio::time::Instant;

const T: &str = "t";
const ROW: &str = "r";
const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

fn cell(column: &str, value: &str, timestamp: Micros) -> CellWrite {
    CellWrite { column: column.into(), value: value.as_bytes().to_vec(), timestamp, ttl: None }
}

fn three(latency: LatencyModel) -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig { replicas: 3, latency, seed: 7, ..Default::default() })
}

async fn columns(s: &impl CellStore, slice: Slice, c: Consistency) -> Vec<String> {
    s.read(T, ROW, slice, c).await.expect("read").into_iter().map(|c| c.column).collect()
}

fn on_replica(s: &EmbeddedStore, index: usize) -> Vec<String> {
    s.inspect_replica(index, T, ROW).expect("replica").into_iter().map(|c| c.column).collect()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn quorum_read_after_write_holds_with_one_of_three_replicas_stopped() {
    for latency in
        [LatencyModel::ZERO, LatencyModel::new(Duration::from_millis(1), Duration::from_millis(4))]
    {
        for stopped in [A, B, C] {
            let s = three(latency);
            s.stop_replica(stopped);
            for i in 0..20 {
                let column = format!("c{i:02}");
                s.write(T, ROW, &[cell(&column, "v", i)], Consistency::Quorum).await.unwrap();
                let got = columns(&s, Slice::all(), Consistency::Quorum).await;
                assert!(got.contains(&column), "stopped {stopped}, {latency:?}: {got:?}");
            }
            assert_eq!(on_replica(&s, stopped), Vec::<String>::new());
        }
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn quorum_read_sees_a_quorum_write_through_the_overlapping_replica() {
    // Written to A and B while C was down; then C is back and A is down: B is in every quorum.
    let s = three(LatencyModel::ZERO);
    s.stop_replica(C);
    s.write(T, ROW, &[cell("x", "v", 1)], Consistency::Quorum).await.unwrap();
    s.start_replica(C);
    assert_eq!(on_replica(&s, C), Vec::<String>::new(), "no hinted handoff");
    s.stop_replica(A);
    for _ in 0..20 {
        assert_eq!(columns(&s, Slice::all(), Consistency::Quorum).await, ["x"]);
    }
    // A deletion that C missed is not undone by C's older live cell either.
    s.start_replica(A);
    s.write(T, ROW, &[cell("y", "v", 2)], Consistency::All).await.unwrap();
    s.stop_replica(C);
    s.delete(T, ROW, "y", 3, Consistency::Quorum).await.unwrap();
    s.start_replica(C);
    s.stop_replica(A);
    assert_eq!(on_replica(&s, C), ["y"]);
    for _ in 0..20 {
        assert_eq!(columns(&s, Slice::all(), Consistency::Quorum).await, ["x"]);
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn one_read_may_be_stale_while_quorum_reads_never_are() {
    let s = three(LatencyModel::ZERO);
    s.stop_replica(C);
    s.write(T, ROW, &[cell("x", "v", 1)], Consistency::Quorum).await.unwrap();
    s.start_replica(C);
    let mut stale_at_one = 0;
    for _ in 0..100 {
        if columns(&s, Slice::all(), Consistency::One).await.is_empty() {
            stale_at_one += 1;
        }
    }
    // Replica C is chosen about a third of the time by the seeded RNG.
    assert!(stale_at_one > 0 && stale_at_one < 100, "stale ONE reads: {stale_at_one}");
    for _ in 0..100 {
        assert_eq!(columns(&s, Slice::all(), Consistency::Quorum).await, ["x"]);
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn sliced_quorum_read_merges_tombstones_before_applying_the_limit() {
    // C missed the deletion of a and b. A limit-1 read answered by A and C must skip them:
    // C stops at its stale a, so the coordinator asks again for the rest of the row.
    for latency in
        [LatencyModel::ZERO, LatencyModel::new(Duration::from_millis(2), Duration::from_millis(3))]
    {
        let s = three(latency);
        s.write(
            T,
            ROW,
            &[cell("a", "v", 1), cell("b", "v", 1), cell("c", "v", 1), cell("d", "v", 1)],
            Consistency::All,
        )
        .await
        .unwrap();
        s.stop_replica(C);
        s.delete(T, ROW, "a", 2, Consistency::Quorum).await.unwrap();
        s.delete(T, ROW, "b", 2, Consistency::Quorum).await.unwrap();
        s.start_replica(C);
        s.stop_replica(B);
        let cases: Vec<(Slice, Vec<&str>)> = vec![
            (Slice::first(1), vec!["c"]),
            (Slice::first(2), vec!["c", "d"]),
            (Slice::from("b", 1), vec!["c"]),
            (Slice::from("a", 5), vec!["c", "d"]),
            (Slice::all(), vec!["c", "d"]),
        ];
        for (slice, expected) in cases {
            assert_eq!(
                columns(&s, slice.clone(), Consistency::Quorum).await,
                expected,
                "{slice:?} {latency:?}"
            );
        }
        // At ONE, replica C alone answers with its stale cells now and then.
        let mut saw_stale = false;
        for _ in 0..50 {
            saw_stale |= columns(&s, Slice::first(1), Consistency::One).await == ["a"];
        }
        assert!(saw_stale);
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn unavailable_when_too_few_replicas_run_and_nothing_is_applied() {
    // (stopped replicas, consistency, required, alive)
    let cases = [
        (vec![A, B], Consistency::Quorum, 2, 1),
        (vec![B], Consistency::All, 3, 2),
        (vec![A, B, C], Consistency::One, 1, 0),
    ];
    for (stopped, c, required, alive) in cases {
        let s = three(LatencyModel::new(Duration::from_millis(5), Duration::ZERO));
        for &r in &stopped {
            s.stop_replica(r);
        }
        let t0 = Instant::now();
        let expected = StoreError::Unavailable { consistency: c, required, alive };
        assert_eq!(
            s.write(T, ROW, &[cell("x", "v", 1)], c).await,
            Err(expected.clone()),
            "{stopped:?} {c}"
        );
        assert_eq!(s.delete(T, ROW, "x", 1, c).await, Err(expected.clone()));
        assert_eq!(s.read(T, ROW, Slice::all(), c).await, Err(expected.clone()));
        assert_eq!(Instant::now(), t0, "Unavailable is immediate");
        tokio::time::sleep(Duration::from_millis(50)).await;
        for r in 0..3 {
            assert_eq!(
                on_replica(&s, r),
                Vec::<String>::new(),
                "replica {r} applied an unavailable write"
            );
        }
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn write_times_out_when_replicas_stop_mid_flight_and_may_have_applied() {
    let s = three(LatencyModel::new(Duration::from_millis(10), Duration::ZERO));
    let t0 = Instant::now();
    let write = {
        let s = s.clone();
        tokio::spawn(
            async move { s.write(T, ROW, &[cell("x", "v", 1)], Consistency::Quorum).await },
        )
    };
    // Before the replicas apply the write (at 5 ms), two of them go down.
    tokio::time::sleep(Duration::from_millis(2)).await;
    s.stop_replica(A);
    s.stop_replica(B);
    let err = write.await.unwrap().unwrap_err();
    assert_eq!(
        err,
        StoreError::WriteTimeout { consistency: Consistency::Quorum, received: 1, required: 2 }
    );
    assert!(err.may_have_applied());
    assert_eq!(Instant::now() - t0, s.config().request_timeout);
    // It was applied where a replica was running: a timeout is not a rollback.
    assert_eq!(on_replica(&s, C), ["x"]);
    assert_eq!(on_replica(&s, A), Vec::<String>::new());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn read_times_out_when_a_chosen_replica_stops_mid_flight() {
    let s = three(LatencyModel::new(Duration::from_millis(10), Duration::ZERO));
    s.write(T, ROW, &[cell("x", "v", 1)], Consistency::All).await.unwrap();
    let t0 = Instant::now();
    let read = {
        let s = s.clone();
        tokio::spawn(async move { s.read(T, ROW, Slice::all(), Consistency::All).await })
    };
    tokio::time::sleep(Duration::from_millis(2)).await;
    s.stop_replica(B);
    let err = read.await.unwrap().unwrap_err();
    assert_eq!(
        err,
        StoreError::ReadTimeout { consistency: Consistency::All, received: 2, required: 3 }
    );
    assert_eq!(Instant::now() - t0, s.config().request_timeout);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn write_completes_at_the_quorum_ack_and_slower_replicas_apply_in_the_background() {
    let s = three(LatencyModel::new(Duration::from_millis(2), Duration::from_millis(40)));
    let mut saw_lagging_replica = false;
    for i in 0..20 {
        let column = format!("c{i:02}");
        s.write(T, ROW, &[cell(&column, "v", i)], Consistency::Quorum).await.unwrap();
        let holding = (0..3).filter(|&r| on_replica(&s, r).contains(&column)).count();
        assert!(holding >= 2, "a QUORUM write completed on {holding} replicas");
        saw_lagging_replica |= holding == 2;
    }
    assert!(saw_lagging_replica, "with 40 ms of jitter some third replica should lag");
    tokio::time::sleep(Duration::from_millis(50)).await;
    for r in 0..3 {
        assert_eq!(on_replica(&s, r).len(), 20, "replica {r}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_write_abandoned_by_its_caller_still_lands() {
    // The messages were sent: dropping the request future does not recall them.
    let s = three(LatencyModel::new(Duration::from_millis(10), Duration::ZERO));
    let abandoned = tokio::time::timeout(
        Duration::from_millis(3),
        s.write(T, ROW, &[cell("x", "v", 1)], Consistency::All),
    )
    .await;
    assert!(abandoned.is_err());
    assert_eq!(on_replica(&s, A), Vec::<String>::new());
    tokio::time::sleep(Duration::from_millis(5)).await;
    for r in 0..3 {
        assert_eq!(on_replica(&s, r), ["x"], "replica {r}");
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn every_consistency_level_takes_one_round_trip_without_jitter() {
    // Without jitter every replica answers after the same round trip, so every level takes
    // exactly one round trip: the coordinator adds no time of its own.
    let s = three(LatencyModel::new(Duration::from_millis(8), Duration::ZERO));
    for c in [Consistency::One, Consistency::Quorum, Consistency::All] {
        let t0 = Instant::now();
        s.write(T, ROW, &[cell("x", "v", 1)], c).await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_millis(8), "write at {c}");
        let t0 = Instant::now();
        s.read(T, ROW, Slice::all(), c).await.unwrap();
        assert_eq!(Instant::now() - t0, Duration::from_millis(8), "read at {c}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writers_on_a_multi_thread_runtime_in_wall_time() {
    let s = EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel::new(Duration::from_micros(100), Duration::from_micros(400)),
        seed: 1,
        ..Default::default()
    });
    let writers = 8;
    let per_writer = 25;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let client = s.client(format!("w{w}"));
        tasks.push(tokio::spawn(async move {
            for i in 0..per_writer {
                let ts = (i * writers + w) as Micros;
                let own = cell(&format!("w{w}-{i:03}"), "v", ts);
                // Everyone also fights over one column: the greatest timestamp must win.
                let shared = cell("shared", &format!("w{w}-{i}"), ts);
                client.write(T, ROW, &[own, shared], Consistency::Quorum).await.unwrap();
                let seen = client
                    .read(T, ROW, Slice::from(format!("w{w}-{i:03}"), 1), Consistency::Quorum)
                    .await
                    .unwrap();
                assert_eq!(seen.first().map(|c| c.column.clone()), Some(format!("w{w}-{i:03}")));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let row = s.read(T, ROW, Slice::all(), Consistency::Quorum).await.unwrap();
    assert_eq!(row.len(), writers * per_writer + 1);
    let shared = row.iter().find(|c| c.column == "shared").unwrap();
    assert_eq!(shared.timestamp, (writers * per_writer - 1) as Micros);
    let total = s.counters().total();
    assert_eq!(
        (total.writes, total.reads),
        ((writers * per_writer) as u64, (writers * per_writer + 1) as u64)
    );
}

/// A coordinator wakes up only when something happens that someone can see: a replica
/// reading or applying at its instant, and the answer that completes the request. A QUORUM
/// read of two replicas is two reads and one completing answer: three timers; a QUORUM write
/// to three replicas is three applies and the second acknowledgement: four. (Round trips of
/// 800-1200 us: every replica acts, half-way, before any answer arrives.)
#[test]
fn a_coordinator_wakes_for_what_happens_not_for_every_answer() {
    let mut sim = lock_core::rt::Simulation::new(3);
    let s = three(LatencyModel::new(Duration::from_micros(800), Duration::from_micros(400)));
    sim.block_on(s.write(T, ROW, &[cell("x", "v", 1)], Consistency::All)).unwrap();
    for _ in 0..20 {
        let before = sim.timers_fired();
        let read = sim.block_on(s.read(T, ROW, Slice::all(), Consistency::Quorum)).unwrap();
        assert_eq!(read.len(), 1);
        assert_eq!(sim.timers_fired() - before, 3, "two reads and the completing answer");
    }
    for i in 2..22 {
        let before = sim.timers_fired();
        sim.block_on(s.write(T, ROW, &[cell("x", "w", i)], Consistency::Quorum)).unwrap();
        assert_eq!(sim.timers_fired() - before, 4, "three applies and the completing answer");
    }
}
