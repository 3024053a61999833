//! The bounded queue lock: FIFO like the thesis's queue lock, and tombstones per read bounded
//! by the number of threads, however long it runs; the thesis's grows with every request.
use lock_core::conformance::{self as c, EmbeddedFixture, Mode};
use lock_core::embedded::TombstoneStats;
use lock_core::Locker;
use lock_queue::bounded::{BOUNDED_MAIN_TABLE, BOUNDED_QUEUE_TABLE};
use lock_queue::{BoundedQueueLocker, QueueLocker, MAIN_TABLE, QUEUE_TABLE};
use std::sync::Arc;
use std::time::Duration;

fn bounded(
    client: lock_core::embedded::EmbeddedClient,
    ctx: lock_core::context::ClientContext,
) -> Arc<dyn Locker> {
    Arc::new(BoundedQueueLocker::new(client, ctx, Default::default()).expect("config"))
}

fn thesis(
    client: lock_core::embedded::EmbeddedClient,
    ctx: lock_core::context::ClientContext,
) -> Arc<dyn Locker> {
    Arc::new(QueueLocker::new(client, ctx, Default::default()).expect("config"))
}

/// Runs `contenders` on one lock for `secs` simulated seconds; the grants and the store's
/// tombstone counters per table.
fn run(
    build: fn(
        lock_core::embedded::EmbeddedClient,
        lock_core::context::ClientContext,
    ) -> Arc<dyn Locker>,
    contenders: usize,
    secs: u64,
    seed: u64,
) -> (Vec<c::Grant>, std::collections::BTreeMap<String, TombstoneStats>) {
    c::run(
        Mode::Simulated,
        seed,
        |seed| async move { EmbeddedFixture::new(seed, Mode::Simulated, build) },
        move |fx| async move {
            let grants = c::contention_log(
                fx.clone(),
                contenders,
                Duration::from_secs(secs),
                Duration::from_millis(5),
                Duration::from_millis(5),
            )
            .await;
            (grants, fx.store().tombstone_counters())
        },
    )
}

fn overtakes(grants: &[c::Grant]) -> usize {
    grants
        .iter()
        .enumerate()
        .filter(|(i, g)| grants[i + 1..].iter().any(|later| later.requested < g.requested))
        .count()
}

#[test]
fn grants_follow_queue_order_when_clocks_agree() {
    for (contenders, seed) in [(2, 1), (8, 2), (32, 3)] {
        let (grants, _) = run(bounded, contenders, 30, seed);
        let n = overtakes(&grants);
        eprintln!(
            "bounded queue lock, {contenders} contenders, 30 s simulated: {} grants, {n} overtakes",
            grants.len()
        );
        assert!(grants.len() > 100);
        assert_eq!(n, 0, "a later request was granted before an earlier one");
    }
}

#[test]
fn two_contenders_take_turns() {
    let (grants, _) = run(bounded, 2, 30, 4);
    let retakes = grants.windows(2).filter(|w| w[0].contender == w[1].contender).count();
    assert_eq!(retakes, 0);
}

/// The point of the variant: with Cassandra's 10-day gc_grace (the fixture's default) the
/// thesis's queue reads scan one tombstone per past request, the bounded one's at most one per
/// other contender.
#[test]
fn tombstones_per_read_stay_under_the_bound_while_the_thesis_queue_grows() {
    const CONTENDERS: usize = 8;
    const BOUND: u64 = CONTENDERS as u64 - 1;
    let started = std::time::Instant::now();
    let (thesis_grants, thesis_stats) = run(thesis, CONTENDERS, 120, 5);
    let (bounded_grants, bounded_stats) = run(bounded, CONTENDERS, 120, 5);
    let q = &thesis_stats[QUEUE_TABLE];
    let b = &bounded_stats[BOUNDED_QUEUE_TABLE];
    eprintln!(
        "120 s, {CONTENDERS} contenders: thesis queue {} grants, tombstones per read p50 {} max {}; \
         bounded {} grants, p50 {} max {} (wall {:?})",
        thesis_grants.len(), q.p50(), q.max, bounded_grants.len(), b.p50(), b.max, started.elapsed()
    );
    assert!(
        q.max > 20 * BOUND && q.p50() > 10 * BOUND,
        "the thesis's queue should have grown: {q:?}"
    );
    assert!(b.max <= BOUND, "bounded queue read scanned {} tombstones", b.max);
    assert!(bounded_stats[BOUNDED_MAIN_TABLE].max <= BOUND);
    // The thesis's main row is bounded the same way: its columns are thread ids.
    assert!(thesis_stats[MAIN_TABLE].max <= BOUND);
    assert_eq!(overtakes(&bounded_grants), 0);
}

/// What tombstones do to the thesis's queue lock on a long run: it stops working once its
/// queue row holds more tombstones than the failure threshold (100,000 on Cassandra; 200
/// here), and the error says why; the bounded lock goes on.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn past_the_failure_threshold_the_thesis_queue_fails_and_the_bounded_one_goes_on() {
    use lock_core::context::ClientContext;
    use lock_core::embedded::{EmbeddedConfig, EmbeddedStore};
    use lock_core::{LockError, StoreError};
    let store = EmbeddedStore::new(EmbeddedConfig {
        tombstone_failure_threshold: 200,
        ..Default::default()
    });
    let client = store.client("w");
    let ctx = ClientContext::new("w", client.clock(), 1);
    let thesis = QueueLocker::new(client.clone(), ctx.clone(), Default::default()).unwrap();
    let bounded = BoundedQueueLocker::new(client, ctx, Default::default()).unwrap();
    let mut failed_at = None;
    for round in 0..300 {
        // A new microsecond, so a new queue column (the store has no latency here).
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        match thesis.lock("l", None).await {
            Ok(g) => g.release().await.unwrap(),
            Err(e) => {
                assert!(
                    matches!(
                        &e,
                        LockError::Store {
                            source: StoreError::TombstoneOverwhelming { scanned: 201, .. },
                            ..
                        }
                    ),
                    "{e:?}"
                );
                assert!(e.to_string().contains("tombstone"), "{e}");
                eprintln!("thesis queue, round {round}: {e}");
                failed_at = Some(round);
                break;
            }
        }
    }
    assert_eq!(failed_at, Some(201), "one tombstone per request: request 202 scans 201");
    for _ in 0..1000 {
        bounded.lock("l", None).await.unwrap().release().await.unwrap();
    }
    assert_eq!(
        store.tombstone_counters()[BOUNDED_QUEUE_TABLE].max,
        0,
        "a lone thread's read finds its own cell live"
    );
}
