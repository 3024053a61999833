//! An acquire whose lightweight transaction ends without an answer is settled by a SERIAL read
//! (crate docs, step 2): the lock is ours exactly when the read shows our owner value, and no
//! way of losing answers gives two holders.

use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::embedded::{
    EmbeddedClient, EmbeddedConfig, EmbeddedStore, LatencyModel, PaxosVariant,
};
use lock_core::store::{
    CasRequest, CasResult, CasTimeoutKind, CellStore, CellWrite, Consistency, Micros,
    SerialConsistency, Slice, StoreError,
};
use lock_core::{Cell, Locker};
use lock_lwt::{LwtConfig, LwtLocker, OWNER};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What the wrapper does to the next acquiring CAS (one whose conditions include `owner`
/// absent).
#[derive(Clone, Copy, PartialEq)]
enum Lose {
    /// Forward it, then answer with a timeout: applied, but the client does not know.
    AnswerAfterApplying,
    /// Answer with a timeout without forwarding: never applied.
    RequestBeforeSending,
}

/// A store handle that loses the answer of the next `n` acquiring CAS requests.
#[derive(Clone)]
struct Lossy {
    inner: EmbeddedClient,
    lose: Lose,
    remaining: Arc<AtomicU32>,
}

fn timeout() -> StoreError {
    StoreError::CasTimeout {
        kind: CasTimeoutKind::Commit,
        received: 1,
        required: 2,
        contentions: 0,
    }
}

#[async_trait]
impl CellStore for Lossy {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.inner.write(table, row, cells, c).await
    }
    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        ts: Micros,
        c: Consistency,
    ) -> Result<(), StoreError> {
        self.inner.delete(table, row, column, ts, c).await
    }
    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.inner.read(table, row, slice, c).await
    }
    async fn cas(
        &self,
        table: &str,
        row: &str,
        r: &CasRequest,
        s: SerialConsistency,
        c: Consistency,
    ) -> Result<CasResult, StoreError> {
        let acquiring = r
            .conditions
            .iter()
            .any(|c| c.column == OWNER && c.expect == lock_core::store::Expect::Absent);
        if acquiring
            && self
                .remaining
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
        {
            if self.lose == Lose::AnswerAfterApplying {
                self.inner.cas(table, row, r, s, c).await?;
            }
            return Err(timeout());
        }
        self.inner.cas(table, row, r, s, c).await
    }
    async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        s: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        self.inner.read_serial(table, row, slice, s).await
    }
}

fn store() -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel::new(Duration::from_millis(1), Duration::ZERO),
        ..EmbeddedConfig::default()
    })
}

fn locker(store: &EmbeddedStore, owner: &str, lose: Lose, n: u32) -> LwtLocker<Lossy> {
    let client = store.client(owner);
    let ctx = ClientContext::new(owner, client.clock(), 3).with_ttl(Duration::from_secs(10));
    let lossy = Lossy { inner: client, lose, remaining: Arc::new(AtomicU32::new(n)) };
    LwtLocker::new(lossy, ctx, LwtConfig::default()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_acquire_that_applied_without_an_answer_is_found_by_the_serial_read() {
    let s = store();
    let a = locker(&s, "a", Lose::AnswerAfterApplying, 1);
    let b = locker(&s, "b", Lose::AnswerAfterApplying, 0);
    let g =
        a.try_lock("job").await.unwrap().expect("the read shows our owner value: the lock is ours");
    assert_eq!(g.token(), 1);
    assert_eq!(s.counters().per_client["a"].serial_reads, 1, "settled by one SERIAL read");
    assert!(b.try_lock("job").await.unwrap().is_none(), "one holder");
    g.release().await.unwrap();
    assert_eq!(b.try_lock("job").await.unwrap().expect("free after release").token(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_acquire_that_never_applied_is_not_a_grant_and_leaves_nothing() {
    let s = store();
    let a = locker(&s, "a", Lose::RequestBeforeSending, 1);
    assert!(a.try_lock("job").await.unwrap().is_none(), "the read shows no owner: not ours");
    assert!(s
        .client("x")
        .read_serial(lock_lwt::LOCK_TABLE, "job", Slice::all(), SerialConsistency::Serial)
        .await
        .unwrap()
        .is_empty());
    // The mandatory lock goes on trying, and gets it.
    let g = a.lock("job", Some(Duration::from_secs(1))).await.unwrap();
    assert_eq!(g.token(), 1);
}

/// Sixteen contenders on three replicas whose messages are late and dropped, with every
/// answer of some acquires lost: unknown outcomes of both kinds, settled, never two holders.
#[tokio::test(start_paused = true)]
async fn lost_answers_and_overloaded_replicas_never_give_two_holders() {
    let mut unknown_seen = 0;
    let mut grants_seen = 0;
    for seed in 0..20u64 {
        for variant in [PaxosVariant::V1, PaxosVariant::V2] {
            let s = EmbeddedStore::new(EmbeddedConfig {
                replicas: 3,
                latency: LatencyModel::new(Duration::from_micros(800), Duration::from_micros(400)),
                seed,
                paxos: variant,
                request_timeout: Duration::from_millis(300),
                ..EmbeddedConfig::default()
            });
            s.lag_replica((seed % 3) as usize, Duration::from_millis(2), 0.3);
            let holds = Arc::new(std::sync::Mutex::new(Vec::new()));
            let tasks: Vec<_> = (0..16)
                .map(|i| {
                    let lose = if i % 2 == 0 {
                        Lose::AnswerAfterApplying
                    } else {
                        Lose::RequestBeforeSending
                    };
                    let l = locker(&s, &format!("c{i}"), lose, 2);
                    let holds = Arc::clone(&holds);
                    tokio::spawn(async move {
                        for _ in 0..3 {
                            let g = l
                                .lock("contended", Some(Duration::from_secs(60)))
                                .await
                                .expect("lock");
                            let granted = Instant::now();
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            let lost = g.is_lost();
                            holds.lock().unwrap().push((granted, Instant::now(), g.token(), lost));
                            g.release().await.expect("release");
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            let mut holds = std::mem::take(&mut *holds.lock().unwrap());
            holds.sort_by_key(|h| h.0);
            for w in holds.windows(2) {
                assert!(
                    w[0].1 <= w[1].0,
                    "{variant} seed {seed}: overlapping holds {:?} and {:?}",
                    w[0],
                    w[1]
                );
                assert!(
                    w[0].2 < w[1].2,
                    "{variant} seed {seed}: tokens not increasing {:?} {:?}",
                    w[0],
                    w[1]
                );
            }
            assert!(holds.iter().all(|h| !h.3), "no lease lost");
            grants_seen += holds.len();
            unknown_seen += s.counters().total().serial_reads;
        }
    }
    assert_eq!(grants_seen, 20 * 2 * 16 * 3);
    assert!(
        unknown_seen >= 20 * 2 * 16,
        "every contender lost answers: {unknown_seen} SERIAL reads"
    );
}
