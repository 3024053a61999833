//! The soak's finding, replayed step by step: a release whose delete timed out leaves the
//! holder's main cell on a replica that missed the delete, and listing 3's lines 3–4 (the one
//! main cell is mine: `Success`) then admit two holders at QUORUM. The default
//! ([`OwnCell::Clear`]) takes the leftover back and competes instead. See the crate docs, "A
//! release that timed out".
//!
//! Three replicas, no latency, simulated time. Which replicas a QUORUM read reaches is steered
//! by stopping the third: with one stopped, a read goes to the other two.

use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::embedded::{EmbeddedClient, EmbeddedConfig, EmbeddedStore};
use lock_core::store::{CellStore, CellWrite, Consistency, Micros, Slice, StoreError};
use lock_core::{Cell, LockError, LockGuard, Locker};
use lock_shadow::{OwnCell, ShadowConfig, ShadowLocker, MAIN_TABLE};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// A store handle whose writes to the main table wait at a gate: the test holds B between its
/// fresh read of step 10 and its main write.
#[derive(Clone)]
struct Gated {
    inner: EmbeddedClient,
    reached: Arc<Notify>,
    open: Arc<Notify>,
}

#[async_trait]
impl CellStore for Gated {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        if table == MAIN_TABLE {
            self.reached.notify_one();
            self.open.notified().await;
        }
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
}

fn ctx(store: &EmbeddedStore, owner: &str, seed: u64) -> ClientContext {
    ClientContext::new(owner, store.client(owner).clock(), seed)
        .with_consistency(Consistency::Quorum)
}

/// What A's second `lock` call got while B was between its step-10 read and its main write,
/// and B's own result.
struct Outcome {
    a_again: Result<LockGuard, LockError>,
    b: Result<LockGuard, LockError>,
}

async fn replay(own_cell: OwnCell) -> Outcome {
    let store = EmbeddedStore::new(EmbeddedConfig { replicas: 3, ..EmbeddedConfig::default() });
    let config = ShadowConfig { own_cell, ..ShadowConfig::default() };
    let a = ShadowLocker::new(store.client("a"), ctx(&store, "a", 1), config).unwrap();
    let gate = Gated { inner: store.client("b"), reached: Arc::default(), open: Arc::default() };
    let b = Arc::new(ShadowLocker::new(gate.clone(), ctx(&store, "b", 2), config).unwrap());

    // A holds; then its release times out: replica 2 is down and replica 0 drops every
    // mutation, so only replica 1 applies the delete.
    let held = a.lock("L", None).await.expect("A takes the free lock");
    store.stop_replica(2);
    store.lag_replica(0, Duration::ZERO, 1.0);
    let release = held.release().await;
    assert!(
        release.is_err(),
        "the release must time out for the replay to mean anything: {release:?}"
    );
    store.lag_replica(0, Duration::ZERO, 0.0);
    store.start_replica(2);

    // B reads replicas 1 and 2: 1's tombstone is newer than 2's cell, the lock is free. B wins
    // the shadow round and stops at the gate, before its main write.
    store.stop_replica(0);
    let b_task = tokio::spawn({
        let b = Arc::clone(&b);
        async move { b.lock("L", None).await }
    });
    gate.reached.notified().await;

    // A asks again and reads replicas 0 and 2, neither of which saw its delete.
    store.start_replica(0);
    store.stop_replica(1);
    let a_task = tokio::spawn(async move {
        let got = a.lock("L", Some(Duration::from_secs(3))).await;
        (a, got)
    });
    // Let A's first attempt finish before B's main write goes out.
    tokio::time::sleep(Duration::from_millis(1)).await;
    gate.open.notify_one();
    let b = b_task.await.unwrap();
    let (_a, a_again) = a_task.await.unwrap();
    Outcome { a_again, b }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn listing_3_lines_3_and_4_admit_two_holders_after_a_release_that_timed_out() {
    let out = replay(OwnCell::Reenter).await;
    let b = out.b.expect("B is granted");
    let a = out.a_again.expect("A re-enters on its leftover cell (the finding)");
    assert!(!a.is_lost() && !b.is_lost(), "two holders of one lock at once");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn clearing_the_leftover_keeps_one_holder() {
    let out = replay(OwnCell::Clear).await;
    let b = out.b.expect("B is granted");
    assert!(!b.is_lost());
    match out.a_again {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("A must wait while B holds, got {:?}", other.map(|g| g.token())),
    }
}
