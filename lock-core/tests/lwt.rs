//! Lightweight transactions on the embedded store: the rules of `lock_core::store` (8–13),
//! their cost in round trips, and linearizability of CAS operations under contention with a
//! stopped replica and the fault injector, over many seeds.

use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel, PaxosVariant};
use lock_core::store::{
    CasChange, CasCondition, CasRequest, CellStore, Consistency, SerialConsistency, Slice,
    StoreError,
};
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

const T: &str = "lwt";
const SERIAL: SerialConsistency = SerialConsistency::Serial;
const QUORUM: Consistency = Consistency::Quorum;

fn set(column: &str, value: &str, ttl: Option<Duration>) -> CasChange {
    CasChange::Set { column: column.into(), value: value.as_bytes().to_vec(), ttl }
}

fn insert_if_absent(column: &str, value: &str, ttl: Option<Duration>) -> CasRequest {
    CasRequest {
        conditions: vec![CasCondition::absent(column)],
        changes: vec![set(column, value, ttl)],
    }
}

fn store(replicas: usize, variant: PaxosVariant, seed: u64) -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig {
        replicas,
        latency: LatencyModel::new(Duration::from_millis(1), Duration::ZERO),
        seed,
        paxos: variant,
        ..EmbeddedConfig::default()
    })
}

#[tokio::test(start_paused = true)]
async fn conditions_decide_and_a_failed_cas_shows_the_current_cells() {
    for variant in [PaxosVariant::V1, PaxosVariant::V2] {
        let s = store(3, variant, 1);
        let a = s.client("a");
        let first =
            a.cas(T, "k", &insert_if_absent("owner", "a", None), SERIAL, QUORUM).await.unwrap();
        assert!(first.applied, "{variant}");
        let second =
            a.cas(T, "k", &insert_if_absent("owner", "b", None), SERIAL, QUORUM).await.unwrap();
        assert!(!second.applied, "{variant}");
        assert_eq!(second.cell("owner").map(|c| c.value.clone()), Some(b"a".to_vec()), "{variant}");

        let wrong = CasRequest {
            conditions: vec![CasCondition::equals("owner", "b")],
            changes: vec![CasChange::Delete { column: "owner".into() }],
        };
        assert!(!a.cas(T, "k", &wrong, SERIAL, QUORUM).await.unwrap().applied, "{variant}");
        let right = CasRequest {
            conditions: vec![CasCondition::equals("owner", "a")],
            changes: vec![CasChange::Delete { column: "owner".into() }],
        };
        assert!(a.cas(T, "k", &right, SERIAL, QUORUM).await.unwrap().applied, "{variant}");
        assert!(a.read_serial(T, "k", Slice::all(), SERIAL).await.unwrap().is_empty(), "{variant}");
        // A plain QUORUM read sees committed CAS changes too (v1 commits at QUORUM before answering).
        if variant == PaxosVariant::V1 {
            assert!(a.read(T, "k", Slice::all(), QUORUM).await.unwrap().is_empty());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn several_changes_apply_together_and_ttl_cells_expire() {
    let s = store(3, PaxosVariant::V1, 2);
    let a = s.client("a");
    let both = CasRequest {
        conditions: vec![CasCondition::absent("owner"), CasCondition::absent("fence")],
        changes: vec![set("owner", "a", Some(Duration::from_secs(2))), set("fence", "1", None)],
    };
    assert!(a.cas(T, "k", &both, SERIAL, QUORUM).await.unwrap().applied);
    let row = a.read_serial(T, "k", Slice::all(), SERIAL).await.unwrap();
    assert_eq!(row.iter().map(|c| c.column.as_str()).collect::<Vec<_>>(), ["fence", "owner"]);
    // Committed cells carry the ballot's timestamp: both the same.
    assert_eq!(row[0].timestamp, row[1].timestamp);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let row = a.read_serial(T, "k", Slice::all(), SERIAL).await.unwrap();
    assert_eq!(
        row.iter().map(|c| c.column.as_str()).collect::<Vec<_>>(),
        ["fence"],
        "the owner cell expired"
    );
    let next = CasRequest {
        conditions: vec![CasCondition::absent("owner"), CasCondition::equals("fence", "1")],
        changes: vec![set("owner", "b", None), set("fence", "2", None)],
    };
    assert!(s.client("b").cas(T, "k", &next, SERIAL, QUORUM).await.unwrap().applied);
}

/// Round trips of one uncontended operation, as counted by the store.
async fn round_trips(variant: PaxosVariant) -> [u64; 3] {
    let s = store(3, variant, 3);
    let a = s.client("a");
    let mut costs = [0; 3];
    let before = s.counters().total().round_trips();
    assert!(
        a.cas(T, "k", &insert_if_absent("owner", "a", None), SERIAL, QUORUM).await.unwrap().applied
    );
    // v2 sends its commit without waiting; let it land so the next prepare finds nothing to repair.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let after_applied = s.counters().total().round_trips();
    costs[0] = after_applied - before;
    assert!(
        !a.cas(T, "k", &insert_if_absent("owner", "b", None), SERIAL, QUORUM)
            .await
            .unwrap()
            .applied
    );
    let after_failed = s.counters().total().round_trips();
    costs[1] = after_failed - after_applied;
    a.read_serial(T, "k", Slice::all(), SERIAL).await.unwrap();
    costs[2] = s.counters().total().round_trips() - after_failed;
    costs
}

#[tokio::test(start_paused = true)]
async fn an_uncontended_cas_costs_the_round_trips_of_its_paxos() {
    // v1 (Cassandra 4.0): prepare, read, propose, commit; a failed CAS proposes an empty update
    // and skips the commit; a SERIAL read is prepare, empty propose, read.
    assert_eq!(round_trips(PaxosVariant::V1).await, [4, 3, 3]);
    // v2: the read rides on the prepare and the commit is not awaited; a failed CAS or a
    // SERIAL read still proposes the empty update.
    assert_eq!(round_trips(PaxosVariant::V2).await, [2, 2, 2]);
    let s = store(3, PaxosVariant::V1, 3);
    let a = s.client("a");
    let start = Instant::now();
    a.cas(T, "k", &insert_if_absent("owner", "a", None), SERIAL, QUORUM).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(4), "four 1 ms round trips");
    let c = s.counters();
    assert_eq!(
        (c.per_client["a"].cas, c.per_client["a"].paxos_round_trips, c.per_table[T].cas),
        (1, 4, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_quorum_is_needed_and_a_stopped_replica_catches_up_through_paxos() {
    let s = store(3, PaxosVariant::V1, 4);
    let a = s.client("a");
    s.stop_replica(0);
    s.stop_replica(1);
    let err =
        a.cas(T, "k", &insert_if_absent("owner", "a", None), SERIAL, QUORUM).await.unwrap_err();
    assert!(matches!(err, StoreError::Unavailable { required: 2, alive: 1, .. }), "{err}");
    s.start_replica(1);
    assert!(
        a.cas(T, "k", &insert_if_absent("owner", "a", None), SERIAL, QUORUM).await.unwrap().applied
    );
    // Replica 0 missed that commit; with replica 2 stopped, the next round's prepare reaches
    // replicas 0 and 1, finds 0 behind, repairs it and still decides on the committed state.
    s.start_replica(0);
    s.stop_replica(2);
    let again = a.cas(T, "k", &insert_if_absent("owner", "b", None), SERIAL, QUORUM).await.unwrap();
    assert!(!again.applied);
    assert_eq!(again.cell("owner").unwrap().value, b"a");
    assert_eq!(s.inspect_replica(0, T, "k").unwrap().len(), 1, "replica 0 was repaired");
}

#[tokio::test(start_paused = true)]
async fn contending_proposers_retry_and_exactly_one_insert_wins() {
    for variant in [PaxosVariant::V1, PaxosVariant::V2] {
        let s = EmbeddedStore::new(EmbeddedConfig {
            replicas: 3,
            latency: LatencyModel::new(Duration::from_millis(1), Duration::from_millis(2)),
            seed: 5,
            paxos: variant,
            ..EmbeddedConfig::default()
        });
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let c = s.client(format!("c{i}"));
                tokio::spawn(async move {
                    c.cas(
                        T,
                        "k",
                        &insert_if_absent("owner", &format!("c{i}"), None),
                        SERIAL,
                        QUORUM,
                    )
                    .await
                })
            })
            .collect();
        let mut winners = 0;
        let mut losers_saw = HashSet::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(r) if r.applied => winners += 1,
                Ok(r) => {
                    losers_saw.insert(r.cell("owner").unwrap().value.clone());
                }
                Err(e) => assert!(matches!(e, StoreError::CasTimeout { .. }), "{e}"),
            }
        }
        let owner = s.client("x").read_serial(T, "k", Slice::all(), SERIAL).await.unwrap();
        assert!(winners <= 1, "{variant}: {winners} winners");
        assert_eq!(owner.len(), 1, "{variant}");
        assert!(
            losers_saw.iter().all(|v| *v == owner[0].value),
            "{variant}: losers saw {losers_saw:?}, owner {owner:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Linearizability of CAS on one register, checked with the Wing & Gong search.

/// One operation of the history on a register holding a number (or nothing).
#[derive(Clone, Debug)]
enum Kind {
    /// `cas(expected → new)`; `Some(applied, current seen)` when it answered.
    Cas { expected: Option<u64>, new: u64, answer: Option<(bool, Option<u64>)> },
    /// A SERIAL read and what it saw (`None` when it failed: then it is left out).
    Read { saw: Option<u64> },
}

#[derive(Clone, Debug)]
struct Op {
    kind: Kind,
    invoked: Instant,
    /// `None`: no answer (the outcome is unknown), may take effect at any time after `invoked`.
    returned: Option<Instant>,
}

/// Applies `op` to `state` as a linearization step: the new state, or `None` when the op's
/// answer contradicts the state.
fn step(state: Option<u64>, op: &Op) -> Option<Option<u64>> {
    match &op.kind {
        Kind::Read { saw } => (*saw == state).then_some(state),
        Kind::Cas { expected, new, answer: Some((true, _)) } => {
            (state == *expected).then_some(Some(*new))
        }
        Kind::Cas { expected, answer: Some((false, current)), .. } => {
            (state != *expected && *current == state).then_some(state)
        }
        // Unknown outcome: linearized only when it applied (a no-op otherwise, same as never).
        Kind::Cas { expected, new, answer: None } => (state == *expected).then_some(Some(*new)),
    }
}

/// True when the history has a linearization (Wing & Gong with memoization of visited
/// (linearized set, state) pairs).
fn linearizable(ops: &[Op]) -> bool {
    assert!(ops.len() <= 128, "the search keeps its set in a u128");
    let definite: u128 = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| o.returned.is_some())
        .fold(0, |m, (i, _)| m | 1 << i);
    let mut seen = HashSet::new();
    fn search(
        ops: &[Op],
        definite: u128,
        done: u128,
        state: Option<u64>,
        seen: &mut HashSet<(u128, Option<u64>)>,
    ) -> bool {
        if done & definite == definite {
            return true;
        }
        if !seen.insert((done, state)) {
            return false;
        }
        // An op may go next when no pending op returned before it was invoked.
        let earliest_return = ops
            .iter()
            .enumerate()
            .filter(|(i, _)| done & (1 << i) == 0)
            .filter_map(|(_, o)| o.returned)
            .min();
        for (i, op) in ops.iter().enumerate() {
            if done & (1 << i) != 0 || earliest_return.is_some_and(|r| r < op.invoked) {
                continue;
            }
            if let Some(next) = step(state, op) {
                if search(ops, definite, done | 1 << i, next, seen) {
                    return true;
                }
            }
        }
        false
    }
    search(ops, definite, 0, None, &mut seen)
}

#[test]
fn the_checker_rejects_histories_that_are_not_linearizable() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let cas = |expected, new, applied, current, i, r| Op {
        kind: Kind::Cas { expected, new, answer: Some((applied, current)) },
        invoked: at(i),
        returned: Some(at(r)),
    };
    let read = |saw, i, r| Op { kind: Kind::Read { saw }, invoked: at(i), returned: Some(at(r)) };
    // Two inserts both applied.
    assert!(!linearizable(&[cas(None, 1, true, None, 0, 5), cas(None, 2, true, None, 1, 6)]));
    // A read after a completed write misses it.
    assert!(!linearizable(&[cas(None, 1, true, None, 0, 5), read(None, 6, 7)]));
    // A failed CAS reports a value nobody wrote.
    assert!(!linearizable(&[
        cas(None, 1, true, None, 0, 5),
        cas(Some(7), 2, false, Some(3), 6, 7)
    ]));
    // Reads going back in time.
    assert!(!linearizable(&[
        cas(None, 1, true, None, 0, 2),
        cas(Some(1), 2, true, Some(1), 3, 10),
        read(Some(2), 4, 5),
        read(Some(1), 6, 7)
    ]));
    // And accepts what is fine: overlapping ops in either order, an unknown op that took effect.
    assert!(linearizable(&[cas(None, 1, true, None, 0, 5), read(None, 1, 2), read(Some(1), 3, 9)]));
    let unknown = Op {
        kind: Kind::Cas { expected: None, new: 4, answer: None },
        invoked: at(0),
        returned: None,
    };
    assert!(linearizable(&[unknown.clone(), read(Some(4), 50, 51)]));
    assert!(linearizable(&[unknown, read(None, 50, 51)]));
}

fn encode(v: Option<u64>) -> Option<Vec<u8>> {
    v.map(|v| v.to_string().into_bytes())
}

fn decode(cell: Option<&lock_core::store::Cell>) -> Option<u64> {
    cell.map(|c| String::from_utf8_lossy(&c.value).parse().expect("a number"))
}

/// One client's operations: mostly CAS from the last value it saw to a value of its own, some
/// with a stale expectation, some SERIAL reads.
async fn client_ops(
    client: lock_core::embedded::EmbeddedClient,
    id: u64,
    ops: u64,
    seed: u64,
) -> Vec<Op> {
    let mut history = Vec::new();
    let mut last: Option<u64> = None;
    for i in 0..ops {
        let roll = (seed.wrapping_mul(6364136223846793005).wrapping_add(id * 31 + i * 7)) >> 33;
        tokio::time::sleep(Duration::from_micros(roll % 3000)).await;
        let invoked = Instant::now();
        if roll.is_multiple_of(5) {
            let saw = client.read_serial(T, "r", Slice::all(), SERIAL).await;
            if let Ok(cells) = saw {
                last = decode(cells.iter().find(|c| c.column == "v"));
                history.push(Op {
                    kind: Kind::Read { saw: last },
                    invoked,
                    returned: Some(Instant::now()),
                });
            }
            continue;
        }
        let expected = if roll.is_multiple_of(7) { Some(999_999) } else { last };
        let new = id * 1000 + i;
        let request = CasRequest {
            conditions: vec![match encode(expected) {
                Some(v) => CasCondition::equals("v", v),
                None => CasCondition::absent("v"),
            }],
            changes: vec![CasChange::Set {
                column: "v".into(),
                value: new.to_string().into_bytes(),
                ttl: None,
            }],
        };
        match client.cas(T, "r", &request, SERIAL, QUORUM).await {
            Ok(r) => {
                let current = decode(r.cell("v"));
                last = if r.applied { Some(new) } else { current };
                history.push(Op {
                    kind: Kind::Cas { expected, new, answer: Some((r.applied, current)) },
                    invoked,
                    returned: Some(Instant::now()),
                });
            }
            Err(e) if e.may_have_applied() => {
                history.push(Op {
                    kind: Kind::Cas { expected, new, answer: None },
                    invoked,
                    returned: None,
                });
            }
            // Unavailable: nothing was sent.
            Err(StoreError::Unavailable { .. }) => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    history
}

/// Five clients on one register of three replicas, one replica stopped for the first part of
/// the run (it comes back behind), another overloaded (late, dropping a third of its messages)
/// for a window: contention, repairs and unknown outcomes all happen.
async fn run_seed(seed: u64, variant: PaxosVariant) -> (Vec<Op>, usize) {
    let s = EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel::new(Duration::from_micros(500), Duration::from_millis(2)),
        seed,
        paxos: variant,
        request_timeout: Duration::from_millis(200),
        ..EmbeddedConfig::default()
    });
    let stopped = (seed % 3) as usize;
    let lagging = ((seed + 1) % 3) as usize;
    s.stop_replica(stopped);
    let nemesis = {
        let s = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(15 + seed % 20)).await;
            s.start_replica(stopped);
            s.lag_replica(lagging, Duration::from_millis(3), 0.33);
            tokio::time::sleep(Duration::from_millis(30)).await;
            s.lag_replica(lagging, Duration::ZERO, 0.0);
        })
    };
    let tasks: Vec<_> = (0..5u64)
        .map(|id| tokio::spawn(client_ops(s.client(format!("c{id}")), id + 1, 8, seed)))
        .collect();
    let mut history = Vec::new();
    for t in tasks {
        history.extend(t.await.unwrap());
    }
    nemesis.await.unwrap();
    let unknown = history.iter().filter(|o| o.returned.is_none()).count();
    (history, unknown)
}

#[tokio::test(start_paused = true)]
async fn cas_is_linearizable_under_contention_with_a_stopped_replica_over_many_seeds() {
    let mut totals = (0usize, 0usize, 0usize);
    for variant in [PaxosVariant::V1, PaxosVariant::V2] {
        for seed in 0..120u64 {
            let (history, unknown) = run_seed(seed, variant).await;
            let applied = history
                .iter()
                .filter(|o| matches!(o.kind, Kind::Cas { answer: Some((true, _)), .. }))
                .count();
            assert!(
                linearizable(&history),
                "{variant} seed {seed}: not linearizable:\n{history:#?}"
            );
            totals = (totals.0 + history.len(), totals.1 + applied, totals.2 + unknown);
        }
    }
    // The runs must exercise what they claim to: CAS that applied, and some of unknown outcome.
    assert!(totals.1 > 200 && totals.2 > 0, "ops, applied, unknown: {totals:?}");
    eprintln!("checked ops, applied, unknown: {totals:?}");
}
