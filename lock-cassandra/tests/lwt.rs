//! Lightweight transactions (`CellStore::cas`, `read_serial`) on a real Cassandra or ScyllaDB
//! cluster: rules 8–13 of `lock_core::store` as the server keeps them.
//!
//! Runs only when `LOCK_TEST_CASSANDRA=host:port[,host:port…]` names a cluster; without it
//! every test says so and returns. The tests write to a keyspace of their own,
//! `distributed_locks_lwt_test`, created without tablets where the server knows them
//! (ScyllaDB refuses LWT in a keyspace with tablets; Cassandra refuses the option), each into
//! rows of its own with a per-run prefix, so they can be repeated against one cluster.

use lock_cassandra::fixture::{self, fresh_row};
use lock_cassandra::{CassandraConfig, CassandraStore};
use lock_core::store::{
    CasChange, CasCondition, CasRequest, CasResult, CasTimeoutKind, Cell, CellStore, Consistency,
    SerialConsistency, Slice, StoreError,
};
use lock_core::time::PhysicalClock;
use std::collections::HashSet;
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYSPACE: &str = "distributed_locks_lwt_test";
const TABLE: &str = "lock_cassandra_lwt_itest";
const Q: Consistency = Consistency::Quorum;
const SERIAL: SerialConsistency = SerialConsistency::Serial;

fn config() -> Option<CassandraConfig> {
    match fixture::test_config().expect("LOCK_TEST_CASSANDRA: host:port[,host:port…]") {
        Some(config) => Some(config.with_keyspace(KEYSPACE)),
        None => {
            // Straight to stderr, past the test harness's capture, so that it is seen.
            let _ = writeln!(
                std::io::stderr(),
                "LOCK_TEST_CASSANDRA not set: Cassandra lightweight-transaction tests not run"
            );
            None
        }
    }
}

/// A store on the tests' keyspace, which is created first if missing, without tablets where
/// the server knows them.
async fn connect(config: CassandraConfig) -> CassandraStore {
    let probe = CassandraStore::connect(CassandraConfig { create_schema: false, ..config.clone() })
        .await
        .expect("connect to LOCK_TEST_CASSANDRA");
    fixture::create_keyspace_without_tablets_where_known(&probe, KEYSPACE, &config.replication)
        .await
        .expect("create the keyspace");
    CassandraStore::connect(config).await.expect("connect to LOCK_TEST_CASSANDRA")
}

async fn store() -> Option<CassandraStore> {
    Some(connect(config()?).await)
}

fn set(column: &str, value: &str, ttl: Option<Duration>) -> CasChange {
    CasChange::Set { column: column.into(), value: value.as_bytes().to_vec(), ttl }
}

fn del(column: &str) -> CasChange {
    CasChange::Delete { column: column.into() }
}

fn cell(column: &str, value: &str) -> Cell {
    Cell { column: column.into(), value: value.as_bytes().to_vec(), timestamp: 0 }
}

async fn cas<S: CellStore>(
    s: &S,
    row: &str,
    conditions: Vec<CasCondition>,
    changes: Vec<CasChange>,
) -> Result<CasResult, StoreError> {
    s.cas(TABLE, row, &CasRequest { conditions, changes }, SERIAL, Q).await
}

/// The row's cells as `(column, value)`, read at QUORUM.
async fn values<S: CellStore>(s: &S, row: &str) -> Vec<(String, String)> {
    let cells = s.read(TABLE, row, Slice::all(), Q).await.expect("read");
    cells.into_iter().map(|c| (c.column, String::from_utf8(c.value).expect("utf-8"))).collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter().map(|(c, v)| (c.to_string(), v.to_string())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_not_exists_applies_once_then_reports_the_current_cell() {
    let Some(s) = store().await else { return };
    let r = fresh_row("ine");
    let first = cas(&s, &r, vec![CasCondition::absent("owner")], vec![set("owner", "w1", None)])
        .await
        .unwrap();
    assert_eq!(first, CasResult { applied: true, current: vec![] });
    let second = cas(&s, &r, vec![CasCondition::absent("owner")], vec![set("owner", "w2", None)])
        .await
        .unwrap();
    assert_eq!(second, CasResult { applied: false, current: vec![cell("owner", "w1")] });
    assert_eq!(values(&s, &r).await, pairs(&[("owner", "w1")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_update_and_delete_apply_only_on_the_expected_value() {
    let Some(s) = store().await else { return };
    let r = fresh_row("ifv");
    cas(&s, &r, vec![CasCondition::absent("owner")], vec![set("owner", "w1", None)]).await.unwrap();

    let wrong =
        cas(&s, &r, vec![CasCondition::equals("owner", "w9")], vec![set("owner", "w2", None)])
            .await
            .unwrap();
    assert_eq!(wrong, CasResult { applied: false, current: vec![cell("owner", "w1")] });
    assert_eq!(values(&s, &r).await, pairs(&[("owner", "w1")]));
    let right =
        cas(&s, &r, vec![CasCondition::equals("owner", "w1")], vec![set("owner", "w2", None)])
            .await
            .unwrap();
    assert_eq!(
        right,
        CasResult { applied: true, current: vec![cell("owner", "w1")] },
        "rebuilt from the condition"
    );
    assert_eq!(values(&s, &r).await, pairs(&[("owner", "w2")]));

    let wrong =
        cas(&s, &r, vec![CasCondition::equals("owner", "w1")], vec![del("owner")]).await.unwrap();
    assert_eq!(wrong, CasResult { applied: false, current: vec![cell("owner", "w2")] });
    assert_eq!(values(&s, &r).await, pairs(&[("owner", "w2")]));
    let right =
        cas(&s, &r, vec![CasCondition::equals("owner", "w2")], vec![del("owner")]).await.unwrap();
    assert!(right.applied);
    assert!(values(&s, &r).await.is_empty());

    // On a cell that no longer exists the server answers `[applied]` alone.
    let gone =
        cas(&s, &r, vec![CasCondition::equals("owner", "w2")], vec![del("owner")]).await.unwrap();
    assert_eq!(gone, CasResult { applied: false, current: vec![] });
    let gone =
        cas(&s, &r, vec![CasCondition::equals("owner", "w2")], vec![set("owner", "w3", None)])
            .await
            .unwrap();
    assert_eq!(gone, CasResult { applied: false, current: vec![] });
    assert!(values(&s, &r).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conditional_batch_applies_all_or_nothing_and_keeps_each_cells_ttl() {
    let Some(s) = store().await else { return };
    let r = fresh_row("batch");
    cas(&s, &r, vec![CasCondition::absent("fence")], vec![set("fence", "41", None)]).await.unwrap();
    // The LWT lock's acquire: owner absent (INSERT IF NOT EXISTS with a TTL) and the fencing
    // counter at 41 (UPDATE IF value = '41'), in one Paxos round.
    let one_second = Some(Duration::from_secs(1));
    let acquire = |owner: &str, fence: (&str, &str)| {
        (
            vec![CasCondition::absent("owner"), CasCondition::equals("fence", fence.0)],
            vec![set("owner", owner, one_second), set("fence", fence.1, None)],
        )
    };
    let written = Instant::now();
    let (conditions, changes) = acquire("w1", ("41", "42"));
    let won = cas(&s, &r, conditions, changes).await.unwrap();
    assert_eq!(won, CasResult { applied: true, current: vec![cell("fence", "41")] });
    assert_eq!(values(&s, &r).await, pairs(&[("fence", "42"), ("owner", "w1")]));

    // Both conditions fail: both current cells come back, in column order; nothing changes.
    let (conditions, changes) = acquire("w2", ("41", "43"));
    let lost = cas(&s, &r, conditions, changes).await.unwrap();
    assert_eq!(
        lost,
        CasResult { applied: false, current: vec![cell("fence", "42"), cell("owner", "w1")] }
    );
    // One condition holds (the fence), the other not: still nothing changes.
    let (conditions, changes) = acquire("w2", ("42", "43"));
    let lost = cas(&s, &r, conditions, changes).await.unwrap();
    assert!(!lost.applied);
    assert_eq!(lost.current, vec![cell("fence", "42"), cell("owner", "w1")]);
    assert_eq!(values(&s, &r).await, pairs(&[("fence", "42"), ("owner", "w1")]));

    // A batch whose conditioned cells do not exist: `[applied]` alone.
    let none = cas(
        &s,
        &r,
        vec![CasCondition::equals("x", "1"), CasCondition::equals("y", "1")],
        vec![set("x", "2", None), set("y", "2", None)],
    )
    .await
    .unwrap();
    assert_eq!(none, CasResult { applied: false, current: vec![] });

    // The owner cell's TTL (1 s asked, 2 s bound) ends it; the fence, without TTL, stays.
    tokio::time::sleep(Duration::from_millis(2300).saturating_sub(written.elapsed())).await;
    assert_eq!(values(&s, &r).await, pairs(&[("fence", "42")]));
    let (conditions, changes) = acquire("w2", ("42", "43"));
    assert!(
        cas(&s, &r, conditions, changes).await.unwrap().applied,
        "the expired owner no longer blocks"
    );
    assert_eq!(values(&s, &r).await, pairs(&[("fence", "43"), ("owner", "w2")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_cell_is_absent_for_the_next_if_not_exists() {
    let Some(s) = store().await else { return };
    let r = fresh_row("expire");
    let written = Instant::now();
    let first = cas(
        &s,
        &r,
        vec![CasCondition::absent("owner")],
        vec![set("owner", "w1", Some(Duration::from_secs(1)))],
    );
    assert!(first.await.unwrap().applied);
    // Alive for at least the TTL asked (1 s).
    tokio::time::sleep(Duration::from_millis(700).saturating_sub(written.elapsed())).await;
    let early = cas(&s, &r, vec![CasCondition::absent("owner")], vec![set("owner", "w2", None)])
        .await
        .unwrap();
    assert!(written.elapsed() < Duration::from_secs(1), "the check ran too late to mean anything");
    assert_eq!(early, CasResult { applied: false, current: vec![cell("owner", "w1")] });
    // Gone after the bound TTL (2 s).
    tokio::time::sleep(Duration::from_millis(2300).saturating_sub(written.elapsed())).await;
    let late = cas(&s, &r, vec![CasCondition::absent("owner")], vec![set("owner", "w2", None)])
        .await
        .unwrap();
    assert_eq!(late, CasResult { applied: true, current: vec![] });
    assert_eq!(values(&s, &r).await, pairs(&[("owner", "w2")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_of_concurrent_if_not_exists_wins() {
    let Some(s) = store().await else { return };
    const N: usize = 8;
    let r = Arc::new(fresh_row("race"));
    let start = Arc::new(tokio::sync::Barrier::new(N));
    let began = Instant::now();
    let tasks: Vec<_> = (0..N)
        .map(|i| {
            let (client, r, start) = (s.client(format!("w{i}")), r.clone(), start.clone());
            tokio::spawn(async move {
                let me = format!("w{i}");
                start.wait().await;
                (
                    me.clone(),
                    cas(
                        &client,
                        &r,
                        vec![CasCondition::absent("owner")],
                        vec![set("owner", &me, None)],
                    )
                    .await,
                )
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("task"));
    }
    let took = began.elapsed();
    // The final holder, settled by a SERIAL read (final even if some CAS timed out).
    let holder = s.read_serial(TABLE, &r, Slice::all(), SERIAL).await.unwrap();
    assert_eq!(holder.len(), 1, "{holder:?}");
    let holder = String::from_utf8(holder[0].value.clone()).unwrap();
    let (mut won, mut timed_out) = (Vec::new(), Vec::new());
    for (me, outcome) in &outcomes {
        match outcome {
            Ok(CasResult { applied: true, .. }) => won.push(me.clone()),
            Ok(CasResult { applied: false, current }) => {
                assert_eq!(current, &vec![cell("owner", &holder)], "{me} lost")
            }
            Err(StoreError::CasTimeout { .. }) => timed_out.push(me.clone()),
            Err(e) => panic!("{me}: {e}"),
        }
    }
    eprintln!("{N} concurrent IF NOT EXISTS in {took:?}: won {won:?}, timed out {timed_out:?}, holder {holder}");
    assert!(won.len() <= 1, "two winners: {won:?}");
    match won.as_slice() {
        [one] => assert_eq!(one, &holder),
        // Nobody saw itself win: then the holder is one whose outcome was unknown.
        _ => assert!(timed_out.contains(&holder), "holder {holder} neither won nor timed out"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_advanced_by_cas_from_several_tasks_loses_no_update() {
    let Some(s) = store().await else { return };
    const TASKS: usize = 8;
    const EACH: usize = 10;
    let r = Arc::new(fresh_row("counter"));
    assert!(
        cas(&s, &r, vec![CasCondition::absent("n")], vec![set("n", "0", None)])
            .await
            .unwrap()
            .applied
    );
    let began = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (client, r) = (s.client(format!("t{t}")), r.clone());
            tokio::spawn(async move {
                // Values are `n:task:attempt`, so a SERIAL read after a timeout tells whose it is.
                let (mut known, mut mine, mut unknown, mut attempts) =
                    ("0".to_string(), Vec::new(), 0usize, 0usize);
                while mine.len() + unknown < EACH {
                    attempts += 1;
                    let n: u64 = known.split(':').next().unwrap().parse().unwrap();
                    let next = format!("{}:{t}:{attempts}", n + 1);
                    let condition = CasCondition::equals("n", known.as_str());
                    match cas(&client, &r, vec![condition], vec![set("n", &next, None)]).await {
                        Ok(CasResult { applied: true, .. }) => {
                            mine.push(n + 1);
                            known = next;
                        }
                        Ok(CasResult { applied: false, current }) => {
                            let cell = current
                                .first()
                                .unwrap_or_else(|| panic!("counter vanished: {current:?}"));
                            known = String::from_utf8(cell.value.clone()).unwrap();
                        }
                        Err(StoreError::CasTimeout { .. }) => {
                            // Unknown outcome: the SERIAL read is final for it (rule 12).
                            let now =
                                client.read_serial(TABLE, &r, Slice::all(), SERIAL).await.unwrap();
                            known = String::from_utf8(now[0].value.clone()).unwrap();
                            if known == next {
                                mine.push(n + 1);
                            } else {
                                unknown += 1;
                            }
                        }
                        Err(e) => panic!("task {t}: {e}"),
                    }
                }
                (mine, unknown, attempts)
            })
        })
        .collect();
    let (mut all, mut unknown, mut attempts) = (Vec::new(), 0, 0);
    for t in tasks {
        let (mine, u, a) = t.await.expect("task");
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "one task's values must strictly increase: {mine:?}"
        );
        all.extend(mine);
        unknown += u;
        attempts += a;
    }
    let took = began.elapsed();
    let last = s.read_serial(TABLE, &r, Slice::all(), SERIAL).await.unwrap();
    let last: u64 = String::from_utf8(last[0].value.clone())
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    eprintln!(
        "{TASKS} tasks x {EACH} increments by CAS: final {last}, {} known applied, {unknown} unknown, {attempts} attempts, {took:?}",
        all.len()
    );
    let distinct: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "two tasks were granted the same value: {all:?}");
    // No lost update: every increment known to have applied is counted in the final value;
    // those of unknown outcome count at most once each.
    assert!(
        last as usize >= all.len() && last as usize <= all.len() + unknown,
        "final {last}, applied {all:?}, unknown {unknown}"
    );
    assert!(distinct.iter().all(|&v| v >= 1 && v <= last));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serial_read_sees_the_latest_cas_with_its_ballot_timestamp() {
    let Some(s) = store().await else { return };
    let r = fresh_row("serial");
    let writer = s.client("writer").with_row_prefix("lwt/");
    let stored = writer.stored_row(&r);
    let before = PhysicalClock::System.now_micros();
    cas(&writer, &r, vec![CasCondition::absent("c")], vec![set("c", "1", None)]).await.unwrap();
    let first = s.read_serial(TABLE, &stored, Slice::all(), SERIAL).await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].value, b"1");
    // Written with the deciding ballot's timestamp (rule 10): a reading of the server's clock
    // in µs, so near the client's (the test assumes the two clocks within a minute).
    let skew = 60_000_000;
    assert!(
        (first[0].timestamp - before).abs() < skew,
        "ballot timestamp {} vs client clock {before}",
        first[0].timestamp
    );
    for v in ["2", "3"] {
        let prev = s
            .read_serial(TABLE, &stored, Slice::all(), SerialConsistency::LocalSerial)
            .await
            .unwrap();
        let prev_value = String::from_utf8(prev[0].value.clone()).unwrap();
        assert!(
            cas(&writer, &r, vec![CasCondition::equals("c", prev_value)], vec![set("c", v, None)])
                .await
                .unwrap()
                .applied
        );
        let now = writer.read_serial(TABLE, &r, Slice::first(1), SERIAL).await.unwrap();
        assert_eq!(now.len(), 1);
        assert_eq!(now[0].value, v.as_bytes(), "the SERIAL read right after the CAS sees it");
        assert!(
            now[0].timestamp > prev[0].timestamp,
            "each decided CAS writes with a greater ballot"
        );
    }
    // A slice of nothing sends nothing and finds nothing; a row never written is empty.
    assert!(s.read_serial(TABLE, &stored, Slice::first(0), SERIAL).await.unwrap().is_empty());
    assert!(s
        .read_serial(TABLE, &fresh_row("none"), Slice::all(), SERIAL)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shapes_cql_cannot_express_fail_before_any_round_trip() {
    let Some(s) = store().await else { return };
    // A table no test creates: any request that reached the server would create it first.
    let untouched = "lock_cassandra_lwt_never";
    let r = fresh_row("refused");
    let refused = [
        (
            vec![CasCondition::absent("a"), CasCondition::equals("b", "1")],
            vec![set("a", "1", None)],
            "'b' has no change",
        ),
        (
            vec![CasCondition::absent("a"), CasCondition::equals("a", "1")],
            vec![set("a", "1", None)],
            "two conditions",
        ),
        (vec![CasCondition::absent("a")], vec![del("a")], "no DELETE … IF NOT EXISTS"),
        (vec![], vec![set("a", "1", None)], "no condition"),
        (vec![CasCondition::absent("a")], vec![], "no change"),
    ];
    let client = s.client("refused").with_row_prefix("lwt/");
    for (conditions, changes, why) in refused {
        let request = CasRequest { conditions, changes };
        for result in [
            s.cas(untouched, &r, &request, SERIAL, Q).await,
            client.cas(untouched, &r, &request, SERIAL, Q).await,
            s.cas(TABLE, &r, &request, SERIAL, Q).await,
        ] {
            match result {
                Err(StoreError::Rejected(m)) => assert!(m.contains(why), "{m} should say {why:?}"),
                other => panic!("{request:?} should be refused, got {other:?}"),
            }
        }
    }
    assert!(
        !s.known_tables().contains(&untouched.to_string()),
        "a refused CAS set up the table: {:?}",
        s.known_tables()
    );
    assert!(values(&s, &r).await.is_empty());
    // A cut-off client sends nothing either.
    client.cut_off(true);
    let request = CasRequest {
        conditions: vec![CasCondition::absent("a")],
        changes: vec![set("a", "1", None)],
    };
    assert!(matches!(
        client.cas(TABLE, &r, &request, SERIAL, Q).await,
        Err(StoreError::Unreachable(_))
    ));
    assert!(matches!(
        client.read_serial(TABLE, &r, Slice::all(), SERIAL).await,
        Err(StoreError::Unreachable(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_marker_outliving_its_value_is_refused_not_reported_as_a_held_cell() {
    let Some(s) = store().await else { return };
    let r = fresh_row("marker");
    // INSERT without TTL (a row marker for good), then UPDATE with a TTL (the value only).
    assert!(
        cas(&s, &r, vec![CasCondition::absent("c")], vec![set("c", "1", None)])
            .await
            .unwrap()
            .applied
    );
    let written = Instant::now();
    let update = cas(
        &s,
        &r,
        vec![CasCondition::equals("c", "1")],
        vec![set("c", "2", Some(Duration::from_secs(1)))],
    );
    assert!(update.await.unwrap().applied);
    tokio::time::sleep(Duration::from_millis(2300).saturating_sub(written.elapsed())).await;
    assert!(values(&s, &r).await.is_empty(), "the value expired");
    assert!(s.read_serial(TABLE, &r, Slice::all(), SERIAL).await.unwrap().is_empty());
    // The cell model says absent, CQL's IF NOT EXISTS says the row exists.
    match cas(&s, &r, vec![CasCondition::absent("c")], vec![set("c", "3", None)]).await {
        Err(StoreError::Rejected(m)) => assert!(m.contains("row marker"), "{m}"),
        other => panic!("expected the row-marker refusal, got {other:?}"),
    }
    // A condition on the value sees it absent, as the model does.
    let none =
        cas(&s, &r, vec![CasCondition::equals("c", "2")], vec![set("c", "3", None)]).await.unwrap();
    assert_eq!(none, CasResult { applied: false, current: vec![] });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cas_the_client_gives_up_on_is_a_paxos_timeout() {
    let Some(config) = config() else { return };
    // A request timeout of 1 µs: the driver's timer fires at its next millisecond tick, which
    // a Paxos round on a local node sometimes beats. Every error must be the client-side
    // timeout of its kind, and within 20 tries each kind must show up at least once.
    // (The keyspace is made ready with the usual timeout; preparing the statements and
    // creating the table are not bound by the request timeout.)
    let quorum = SERIAL.required(config.quorum_base());
    drop(connect(config.clone()).await);
    let s = CassandraStore::connect(config.with_request_timeout(Duration::from_micros(1)))
        .await
        .expect("connect");
    s.ensure_tables(&[TABLE]).await.expect("tables");
    let (mut cas_timeouts, mut read_timeouts, mut answered) = (0, 0, 0);
    for _ in 0..20 {
        let r = fresh_row("giveup");
        match cas(&s, &r, vec![CasCondition::absent("c")], vec![set("c", "1", None)]).await {
            Ok(_) => answered += 1,
            Err(StoreError::CasTimeout {
                kind: CasTimeoutKind::Paxos,
                received: 0,
                required,
                contentions: 0,
            }) if required == quorum => cas_timeouts += 1,
            Err(other) => panic!("expected a client-side CAS timeout, got {other:?}"),
        }
        match s.read_serial(TABLE, &r, Slice::all(), SERIAL).await {
            Ok(_) => answered += 1,
            Err(StoreError::ReadTimeout {
                consistency: Consistency::Quorum,
                received: 0,
                required,
            }) if required == quorum => read_timeouts += 1,
            Err(other) => panic!("expected a client-side read timeout, got {other:?}"),
        }
        if cas_timeouts > 0 && read_timeouts > 0 {
            break;
        }
    }
    eprintln!(
        "1 µs request timeout: {cas_timeouts} CAS and {read_timeouts} SERIAL reads timed out, {answered} answered"
    );
    assert!(
        cas_timeouts > 0 && read_timeouts > 0,
        "{cas_timeouts} CAS, {read_timeouts} SERIAL read timeouts in 20 tries"
    );
}
