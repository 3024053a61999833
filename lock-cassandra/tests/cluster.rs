//! The cell-store semantics of `lock_core::store` on a real Cassandra or ScyllaDB cluster.
//!
//! Runs only when `LOCK_TEST_CASSANDRA=host:port[,host:port…]` names a cluster (see
//! `scripts/cassandra-test.sh`); without it every test says so and returns. The tests write to
//! the keyspace `distributed_locks_test`, each into rows of its own with a per-run prefix, so
//! they can be repeated against one cluster.

use lock_cassandra::fixture::fresh_row;
use lock_cassandra::{CassandraClient, CassandraConfig, CassandraStore, Replication};
use lock_core::store::{Cell, CellStore, CellWrite, Consistency, Micros, Slice, StoreError};
use lock_core::time::{LocalClock, PhysicalClock, TimestampGenerator};
use std::io::Write;
use std::time::Duration;

const ENV: &str = "LOCK_TEST_CASSANDRA";
const KEYSPACE: &str = "distributed_locks_test";
const TABLE: &str = "lock_cassandra_itest";
const Q: Consistency = Consistency::Quorum;

fn config() -> Option<CassandraConfig> {
    match std::env::var(ENV) {
        Ok(nodes) if !nodes.trim().is_empty() => Some(
            CassandraConfig::from_nodes(&nodes)
                .expect("LOCK_TEST_CASSANDRA: host:port[,host:port…]")
                .with_keyspace(KEYSPACE),
        ),
        _ => {
            // Straight to stderr, past the test harness's capture, so that it is seen.
            let _ = writeln!(
                std::io::stderr(),
                "LOCK_TEST_CASSANDRA not set: Cassandra integration tests not run"
            );
            None
        }
    }
}

async fn store() -> Option<CassandraStore> {
    let config = config()?;
    Some(CassandraStore::connect(config).await.expect("connect to LOCK_TEST_CASSANDRA"))
}

fn cell(column: &str, value: &[u8], timestamp: Micros, ttl: Option<Duration>) -> CellWrite {
    CellWrite { column: column.into(), value: value.to_vec(), timestamp, ttl }
}

fn columns(cells: &[Cell]) -> Vec<&str> {
    cells.iter().map(|c| c.column.as_str()).collect()
}

async fn row<S: CellStore>(s: &S, row: &str) -> Vec<Cell> {
    s.read(TABLE, row, Slice::all(), Q).await.expect("read")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn last_write_wins_by_timestamp_not_by_arrival() {
    let Some(s) = store().await else { return };
    let r = fresh_row("lww");
    s.write(TABLE, &r, &[cell("c", b"new", 200, None)], Q).await.unwrap();
    s.write(TABLE, &r, &[cell("c", b"old", 100, None)], Q).await.unwrap();
    assert_eq!(
        row(&s, &r).await,
        vec![Cell { column: "c".into(), value: b"new".to_vec(), timestamp: 200 }]
    );
    s.write(TABLE, &r, &[cell("c", b"newer", 201, None)], Q).await.unwrap();
    assert_eq!(row(&s, &r).await[0].value, b"newer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_timestamps_keep_the_greater_value() {
    let Some(s) = store().await else { return };
    let r = fresh_row("tie");
    for v in [&b"a"[..], b"b", b"a"] {
        s.write(TABLE, &r, &[cell("c", v, 100, None)], Q).await.unwrap();
    }
    assert_eq!(row(&s, &r).await[0].value, b"b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_wins_a_tie_and_its_tombstone_blocks_older_writes() {
    let Some(s) = store().await else { return };
    let r = fresh_row("tomb");
    s.write(TABLE, &r, &[cell("c", b"v", 100, None), cell("keep", b"k", 100, None)], Q)
        .await
        .unwrap();
    s.delete(TABLE, &r, "c", 100, Q).await.unwrap();
    assert_eq!(
        columns(&row(&s, &r).await),
        ["keep"],
        "a deletion wins over a write of the same timestamp"
    );
    s.write(TABLE, &r, &[cell("c", b"late", 99, None)], Q).await.unwrap();
    assert_eq!(columns(&row(&s, &r).await), ["keep"], "an older write must not resurrect the cell");
    s.write(TABLE, &r, &[cell("c", b"again", 101, None)], Q).await.unwrap();
    assert_eq!(columns(&row(&s, &r).await), ["c", "keep"]);
    // A deletion older than the cell does nothing.
    s.delete(TABLE, &r, "c", 50, Q).await.unwrap();
    assert_eq!(columns(&row(&s, &r).await), ["c", "keep"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_expire_after_their_ttl_and_never_before() {
    let Some(s) = store().await else { return };
    let r = fresh_row("ttl");
    let ts = PhysicalClock::System.now_micros();
    s.write(
        TABLE,
        &r,
        &[cell("short", b"s", ts, Some(Duration::from_secs(1))), cell("forever", b"f", ts, None)],
        Q,
    )
    .await
    .unwrap();
    // Bound as 2 s (1 s asked + the margin): alive for at least 1 s after the write.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(columns(&row(&s, &r).await), ["forever", "short"]);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(
        columns(&row(&s, &r).await),
        ["forever"],
        "the TTL cell must be gone 2.3 s after its write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_are_sorted_byte_wise_and_sliced() {
    let Some(s) = store().await else { return };
    let r = fresh_row("slice");
    let names = ["é", "b", "a0", "Z", "a", "~"];
    let ts = 1000;
    for (i, n) in names.iter().enumerate() {
        s.write(TABLE, &r, &[cell(n, n.as_bytes(), ts + i as i64, None)], Q).await.unwrap();
    }
    let sorted = ["Z", "a", "a0", "b", "~", "é"];
    let all = row(&s, &r).await;
    assert_eq!(columns(&all), sorted);
    assert_eq!(all[0].timestamp, ts + 3);
    assert_eq!(all[5].value, "é".as_bytes());
    let read = |slice: Slice| {
        let s = s.clone();
        let r = r.clone();
        async move { s.read(TABLE, &r, slice, Q).await.unwrap() }
    };
    assert_eq!(columns(&read(Slice::first(1)).await), ["Z"]);
    assert_eq!(columns(&read(Slice::first(2)).await), ["Z", "a"]);
    assert_eq!(columns(&read(Slice::from("a0", 2)).await), ["a0", "b"]);
    assert_eq!(columns(&read(Slice::from("a1", 10)).await), ["b", "~", "é"]);
    assert_eq!(
        columns(&read(Slice { start: Some("b".into()), limit: None }).await),
        ["b", "~", "é"]
    );
    assert!(read(Slice::from("ö", 3)).await.is_empty());
    assert!(read(Slice::first(0)).await.is_empty());
    // The head of the row moves on when its first cell is deleted.
    s.delete(TABLE, &r, "Z", ts + 100, Q).await.unwrap();
    assert_eq!(columns(&read(Slice::first(1)).await), ["a"]);
    // An empty row reads as no cells.
    assert!(row(&s, &fresh_row("empty")).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cells_of_one_write_land_together_with_their_own_timestamps_and_ttls() {
    let Some(s) = store().await else { return };
    let r = fresh_row("batch");
    let ts = PhysicalClock::System.now_micros();
    s.write(
        TABLE,
        &r,
        &[
            cell("x", b"1", ts, None),
            cell("y", b"", ts + 1, Some(Duration::from_secs(30))),
            cell("z", b"3", ts + 2, None),
        ],
        Q,
    )
    .await
    .unwrap();
    let got = row(&s, &r).await;
    assert_eq!(columns(&got), ["x", "y", "z"]);
    assert_eq!(got.iter().map(|c| c.timestamp).collect::<Vec<_>>(), [ts, ts + 1, ts + 2]);
    assert_eq!(got[1].value, b"", "an empty value is a value, not an absent cell");
    s.write(TABLE, &r, &[], Q).await.expect("a write of no cells is a no-op");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lemma_1_of_two_writers_at_least_one_sees_both() {
    let Some(s) = store().await else { return };
    for round in 0..20 {
        let r = fresh_row("lemma1");
        let ts = PhysicalClock::System.now_micros();
        let mut tasks = Vec::new();
        for who in ["a", "b"] {
            let client = s.client(who);
            let r = r.clone();
            tasks.push(tokio::spawn(async move {
                client.write(TABLE, &r, &[cell(who, who.as_bytes(), ts, None)], Q).await.unwrap();
                client.read(TABLE, &r, Slice::all(), Q).await.unwrap().len()
            }));
        }
        let mut seen = Vec::new();
        for t in tasks {
            seen.push(t.await.unwrap());
        }
        assert!(seen.contains(&2), "round {round}: neither writer saw both cells ({seen:?})");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_increase_on_the_cluster() {
    let Some(s) = store().await else { return };
    let lock = fresh_row("fence");
    let clients: Vec<CassandraClient> = (0..3).map(|i| s.client(format!("f{i}"))).collect();
    let timestamps: Vec<TimestampGenerator> = (0..3)
        .map(|_| TimestampGenerator::new(LocalClock::new(PhysicalClock::System, 0)))
        .collect();
    let mut last = 0;
    for round in 0..9 {
        let i = round % 3;
        let token =
            lock_core::fence::next_token(&clients[i], &timestamps[i], &lock, clients[i].id(), Q)
                .await
                .unwrap();
        assert_eq!(token, last + 1);
        last = token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_client_fails_at_once_and_the_others_go_on() {
    let Some(s) = store().await else { return };
    let r = fresh_row("cut");
    let a = s.client("a");
    let b = s.client("b");
    a.cut_off(true);
    let err = a.write(TABLE, &r, &[cell("a", b"a", 1, None)], Q).await.unwrap_err();
    assert!(matches!(&err, StoreError::Unreachable(m) if m.contains("'a'")), "{err}");
    assert!(matches!(a.read(TABLE, &r, Slice::all(), Q).await, Err(StoreError::Unreachable(_))));
    b.write(TABLE, &r, &[cell("b", b"b", 1, None)], Q).await.unwrap();
    a.cut_off(false);
    assert_eq!(columns(&a.read(TABLE, &r, Slice::all(), Q).await.unwrap()), ["b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_prefixes_keep_clients_apart() {
    let Some(s) = store().await else { return };
    let r = fresh_row("prefix");
    let one = s.client("x").with_row_prefix("one/");
    let two = s.client("x").with_row_prefix("two/");
    one.write(TABLE, &r, &[cell("c", b"1", 1, None)], Q).await.unwrap();
    assert!(two.read(TABLE, &r, Slice::all(), Q).await.unwrap().is_empty());
    assert_eq!(s.read(TABLE, &format!("one/{r}"), Slice::all(), Q).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tables_are_made_on_first_use_and_bad_names_are_refused() {
    let Some(s) = store().await else { return };
    s.ensure_tables(&lock_cassandra::ALGORITHM_TABLES).await.unwrap();
    s.read(TABLE, &fresh_row("t"), Slice::all(), Q).await.unwrap();
    let known = s.known_tables();
    for t in lock_cassandra::ALGORITHM_TABLES.iter().chain([&TABLE]) {
        assert!(known.iter().any(|k| k == t), "{t} not in {known:?}");
    }
    let err = s.read("Bad-Name", "r", Slice::all(), Q).await.unwrap_err();
    assert!(matches!(&err, StoreError::Rejected(m) if m.contains("Bad-Name")), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_few_replicas_is_unavailable_and_not_applied() {
    let Some(config) = config() else { return };
    // A keyspace asking for one replica more than the cluster has nodes: ALL cannot be met.
    let probe = CassandraStore::connect(config.clone()).await.expect("connect");
    let nodes = probe.session().get_cluster_state().get_nodes_info().len() as u32;
    let keyspace = format!("distributed_locks_test_rf{}", nodes + 1);
    let replication = Replication::EveryDatacenter { replication_factor: nodes + 1 };
    // ScyllaDB refuses more replicas than nodes in keyspaces with tablets (its default), and
    // Cassandra does not know the `tablets` option: without tablets where it is known.
    lock_cassandra::fixture::create_keyspace_without_tablets_where_known(
        &probe,
        &keyspace,
        &replication,
    )
    .await
    .expect("create the over-replicated keyspace");
    drop(probe);
    let s = CassandraStore::connect(config.with_keyspace(keyspace).with_replication(replication))
        .await
        .expect("connect to the over-replicated keyspace");
    let err = s
        .write(TABLE, &fresh_row("unavail"), &[cell("c", b"v", 1, None)], Consistency::All)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Unavailable {
            consistency: Consistency::All,
            required: nodes as usize + 1,
            alive: nodes as usize
        }
    );
    assert!(!err.may_have_applied());
}
