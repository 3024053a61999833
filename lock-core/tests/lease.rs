//! The lease keeper (thesis 5.3): renews every TTL/2, says when the lease is lost, stops on
//! release. Simulated time.
use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel};
use lock_core::lease::{CellKey, LeaseConfig, LeaseKeeper};
use lock_core::store::{CellStore, CellWrite, Consistency, Slice};
use lock_core::time::TimestampGenerator;
use lock_core::LeaseState;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::{sleep, Instant};

const TTL: Duration = Duration::from_secs(4);

async fn setup(
) -> (EmbeddedStore, lock_core::embedded::EmbeddedClient, Arc<TimestampGenerator>, LeaseKeeper) {
    let store = EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel { fixed: Duration::from_millis(1), jitter: Duration::from_millis(1) },
        ..EmbeddedConfig::default()
    });
    let client = store.client("holder");
    let ts = Arc::new(TimestampGenerator::new(client.clock()));
    let started = Instant::now();
    let cell = CellWrite {
        column: "holder".into(),
        value: b"v".to_vec(),
        timestamp: ts.next(),
        ttl: Some(TTL),
    };
    client.write("t", "lock", &[cell], Consistency::Quorum).await.unwrap();
    let keeper =
        LeaseKeeper::start(client.clone(), ts.clone(), LeaseConfig::new(TTL, Consistency::Quorum));
    keeper.add(CellKey::new("t", "lock", "holder"), b"v".to_vec(), started);
    (store, client, ts, keeper)
}

async fn present(store: &EmbeddedStore) -> bool {
    !store
        .client("reader")
        .read("t", "lock", Slice::all(), Consistency::Quorum)
        .await
        .unwrap()
        .is_empty()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn renewal_keeps_a_cell_past_its_ttl_and_stopping_lets_it_expire() {
    let (store, _client, _ts, keeper) = setup().await;
    let rx = keeper.subscribe();
    for _ in 0..20 {
        sleep(TTL / 4).await;
        assert!(present(&store).await, "cell expired although renewed");
        assert_eq!(*rx.borrow(), LeaseState::Held);
    }
    let until = keeper.valid_until().unwrap();
    assert!(until > Instant::now() + TTL / 4, "validity must move forward with renewals");
    let cells = keeper.stop().await;
    assert_eq!(cells, vec![CellKey::new("t", "lock", "holder")]);
    assert_eq!(*rx.borrow(), LeaseState::Released);
    sleep(TTL + Duration::from_millis(10)).await;
    assert!(!present(&store).await, "cell outlived its TTL after renewal stopped");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn blocked_renewal_is_signalled_as_lost_when_the_ttl_runs_out() {
    let (store, _client, _ts, keeper) = setup().await;
    let rx = keeper.subscribe();
    sleep(TTL).await; // one renewal done
    let blocked_at = Instant::now();
    store.isolate("holder", true);
    let mut rx2 = rx.clone();
    while !matches!(*rx2.borrow_and_update(), LeaseState::Lost(_)) {
        rx2.changed().await.unwrap();
    }
    let after = blocked_at.elapsed();
    eprintln!("lease lost {after:?} after renewals were blocked (TTL {TTL:?})");
    // The last renewal was at most TTL/2 before the block; the loss is declared exactly when
    // its validity ends, not before.
    assert!(after >= TTL / 2 - Duration::from_millis(10) && after <= TTL, "after {after:?}");
    assert!(keeper.is_lost());
    // The cell is really gone by then (or within a round trip): no one is misled.
    sleep(Duration::from_millis(10)).await;
    store.isolate("holder", false);
    assert!(!present(&store).await);
    // A lost lease stays lost; renewals do not resume and bring the cell back.
    sleep(TTL).await;
    assert!(!present(&store).await);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_frozen_holder_is_told_at_the_deadline_not_when_it_thaws() {
    // The holder's process freezes (a GC pause) before its renewal: the renewal waits for the
    // thaw, and the keeper must declare the loss when the lease runs out, not after.
    let (store, _client, _ts, keeper) = setup().await;
    let rx = keeper.subscribe();
    let until = keeper.valid_until().unwrap();
    sleep(TTL / 4).await;
    store.pause_client("holder", true);
    sleep(TTL * 2).await;
    assert!(matches!(*rx.borrow(), LeaseState::Lost(_)), "{:?}", *rx.borrow());
    assert!(!present(&store).await, "the cell outlived its TTL while its holder was frozen");
    assert!(Instant::now() > until);
    store.pause_client("holder", false);
    drop(keeper);
}
