use super::*;
use crate::embedded::merge::{merge, merge_into};
use crate::embedded::row::{DeadAt, DeadCell, Incoming, LiveCell, Row};
use crate::embedded::{Answer, RawAnswer};
use crate::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel};
use crate::store::{CellStore, CellWrite, Consistency};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::time::Duration;
use tokio::time::Instant;

const GRACE: Duration = Duration::from_millis(30);
const INTERVAL: Duration = Duration::from_millis(50);

fn raw(row: &Row, slice: &Slice) -> Answer {
    let scan = row.scan(slice.start.as_deref(), slice.limit.unwrap_or(usize::MAX));
    Answer::Raw(RawAnswer { live: scan.live, dead: row.dead.clone(), truncated: scan.truncated })
}

fn live(answer: &Answer) -> &LiveSlice {
    match answer {
        Answer::Raw(raw) => &raw.live,
        Answer::Live(live) => live,
        Answer::Overwhelmed(_) => panic!("no cells"),
    }
}

/// Random writes (some with TTLs), deletions, expiries and compactions, each reaching a
/// random subset of three replicas; after each, reads of random replica pairs and slices. The
/// cache answers exactly what a merge answers, and often without merging.
#[tokio::test(start_paused = true)]
async fn answers_what_a_merge_answers_through_writes_deletions_expiries_and_compactions() {
    let mut rng = StdRng::seed_from_u64(7);
    let start = Instant::now();
    let mut rows: Vec<Row> = (0..3).map(|_| Row::new(start, INTERVAL, None)).collect();
    let columns: Vec<Arc<str>> = (0..8).map(|i| Arc::from(format!("c{i}"))).collect();
    let values: Vec<Arc<[u8]>> = (0..3).map(|i| Arc::from(vec![b'a' + i; 4])).collect();
    let slices = [
        Slice::all(),
        Slice::first(1),
        Slice::first(3),
        Slice::from("c2", 2),
        Slice::from("c5", 10),
    ];
    let mut cache = ReadCache::default();
    let (mut hits, mut reads) = (0, 0);
    let mut now = start;
    for step in 0..4000i64 {
        now += Duration::from_millis(rng.random_range(0..3));
        let column = &columns[rng.random_range(0..columns.len())];
        let reach: Vec<usize> = (0..3).filter(|_| rng.random_range(0..8) > 0).collect();
        let op = rng.random_range(0..20);
        for &r in &reach {
            let row = &mut rows[r];
            row.advance(now, GRACE, INTERVAL);
            match op {
                0..=1 => row.merge(
                    column,
                    Incoming::Dead(DeadCell { timestamp: step, dead_at: DeadAt::of(now) }),
                    now,
                ),
                2..=7 => {
                    let ttl = (op == 7).then(|| now + Duration::from_millis(5));
                    let value = Arc::clone(&values[(step as usize) % values.len()]);
                    let cell = LiveCell { timestamp: step, value, expires_at: ttl };
                    row.merge(column, Incoming::Live(cell), now);
                }
                _ => {}
            }
        }
        for _ in 0..3 {
            let a = rng.random_range(0..3);
            let b = (a + rng.random_range(1..3)) % 3;
            let slice = &slices[rng.random_range(0..slices.len())];
            for r in [a, b] {
                rows[r].advance(now, GRACE, INTERVAL);
            }
            let answers = [raw(&rows[a], slice), raw(&rows[b], slice)];
            let lives = [live(&answers[0]), live(&answers[1])];
            let mut merged = false;
            let got = cache.answer("t", "r", slice, &lives, |out| {
                merged = true;
                merge_into(&answers, slice.limit, out)
            });
            let want = merge(&answers, slice.limit);
            assert_eq!(got.as_deref(), want.as_deref(), "step {step}, {slice:?}");
            reads += 1;
            hits += usize::from(!merged);
        }
    }
    assert!(hits > reads / 3, "{hits} hits in {reads} reads");
}

fn cell(column: &str, value: &str, timestamp: i64, ttl: Option<Duration>) -> CellWrite {
    CellWrite { column: column.into(), value: value.as_bytes().to_vec(), timestamp, ttl }
}

fn store() -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel::new(Duration::from_millis(1), Duration::from_micros(500)),
        gc_grace: Duration::from_millis(100),
        compaction_interval: Some(Duration::from_millis(100)),
        ..EmbeddedConfig::default()
    })
}

/// Reads of an unchanged row share one snapshot, equal to what a plain read returns; a write,
/// a deletion and an expiry each give a new one, with the new cells.
#[tokio::test(start_paused = true)]
async fn readers_of_an_unchanged_row_share_one_snapshot() {
    let s = store();
    let q = Consistency::Quorum;
    let read = |s: EmbeddedStore| async move {
        let shared = s.read_shared("t", "r", Slice::all(), q).await.unwrap();
        let plain = s.read("t", "r", Slice::all(), q).await.unwrap();
        assert_eq!(&*shared, plain.as_slice());
        shared
    };
    s.write("t", "r", &[cell("a", "1", 1, None), cell("b", "2", 1, None)], q).await.unwrap();
    crate::rt::sleep(Duration::from_millis(10)).await;
    let first = read(s.clone()).await;
    let again = read(s.clone()).await;
    assert!(Arc::ptr_eq(&first, &again));
    assert_eq!(first.len(), 2);

    s.write("t", "r", &[cell("c", "3", 2, Some(Duration::from_millis(50)))], q).await.unwrap();
    crate::rt::sleep(Duration::from_millis(10)).await;
    let written = read(s.clone()).await;
    assert_eq!(written.len(), 3);

    s.delete("t", "r", "a", 3, q).await.unwrap();
    crate::rt::sleep(Duration::from_millis(10)).await;
    let deleted = read(s.clone()).await;
    let columns = |cells: &[Cell]| cells.iter().map(|c| c.column.clone()).collect::<Vec<_>>();
    assert_eq!(columns(&deleted), ["b", "c"]);

    crate::rt::sleep(Duration::from_millis(60)).await;
    let expired = read(s.clone()).await;
    assert_eq!(columns(&expired), ["b"]);

    // A compaction purges the dead cells and leaves the live ones: the same answer.
    crate::rt::sleep(Duration::from_millis(250)).await;
    let compacted = read(s.clone()).await;
    assert_eq!(&*compacted, &*expired);
    for replica in 0..3 {
        assert_eq!(s.inspect_tombstones(replica, "t", "r"), Some(0));
    }
}
