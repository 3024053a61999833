//! What the lock costs the store, in round trips counted by the embedded store's Paxos: an
//! uncontended acquire and release are two lightweight transactions, 4 round trips each on
//! Cassandra 4.0's Paxos and 2 on Paxos v2; and under contention, what waiting by plain reads
//! ([`WaitProbe::Read`]) saves against retrying the CAS ([`WaitProbe::Cas`]).

use lock_core::context::ClientContext;
use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel, PaxosVariant};
use lock_core::Locker;
use lock_lwt::{LwtConfig, LwtLocker, WaitProbe};
use std::time::Duration;
use tokio::time::Instant;

fn store(variant: PaxosVariant, seed: u64) -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel::new(Duration::from_millis(1), Duration::ZERO),
        seed,
        paxos: variant,
        ..EmbeddedConfig::default()
    })
}

fn locker(
    store: &EmbeddedStore,
    owner: &str,
    probe: WaitProbe,
) -> LwtLocker<lock_core::embedded::EmbeddedClient> {
    let client = store.client(owner);
    let ctx = ClientContext::new(owner, client.clock(), owner.len() as u64);
    LwtLocker::new(client, ctx, LwtConfig { probe, ..LwtConfig::default() }).unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_uncontended_acquire_and_release_cost_two_lightweight_transactions() {
    for (variant, per_lwt) in [(PaxosVariant::V1, 4), (PaxosVariant::V2, 2)] {
        let s = store(variant, 1);
        let a = locker(&s, "a", WaitProbe::Read);
        let start = Instant::now();
        let g = a.lock("job", None).await.unwrap();
        let acquired = start.elapsed();
        let after_acquire = s.counters().total();
        // A critical section: v2's commit, sent without waiting, lands meanwhile.
        tokio::time::sleep(Duration::from_millis(10)).await;
        g.release().await.unwrap();
        let total = s.counters().total();
        assert_eq!(
            (after_acquire.cas, after_acquire.round_trips()),
            (1, per_lwt),
            "{variant} acquire"
        );
        assert_eq!(
            (total.cas, total.round_trips()),
            (2, 2 * per_lwt),
            "{variant} acquire + release"
        );
        assert_eq!(
            acquired,
            Duration::from_millis(per_lwt),
            "{variant}: one 1 ms round trip per phase"
        );
        // The next grant of the same locker expects the fence it left: again one LWT each way.
        tokio::time::sleep(Duration::from_millis(10)).await;
        let g = a.lock("job", None).await.unwrap();
        assert_eq!(g.token(), 2);
        tokio::time::sleep(Duration::from_millis(10)).await;
        g.release().await.unwrap();
        assert_eq!(s.counters().total().cas, 4, "{variant}: no failed acquire in between");
    }
}

/// Round trips per grant with 32 contenders for 20 s of simulated time.
async fn contended(probe: WaitProbe) -> (usize, f64) {
    let s = store(PaxosVariant::V1, 9);
    let end = Instant::now() + Duration::from_secs(20);
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let l = locker(&s, &format!("c{i:02}"), probe);
            tokio::spawn(async move {
                let mut grants = 0;
                while Instant::now() < end {
                    let g = l.lock("hot", None).await.expect("lock");
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    g.release().await.expect("release");
                    grants += 1;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                grants
            })
        })
        .collect();
    let mut grants = 0;
    for t in tasks {
        grants += t.await.unwrap();
    }
    (grants, s.counters().total().round_trips() as f64 / grants as f64)
}

#[tokio::test(start_paused = true)]
async fn waiting_by_reads_keeps_waiters_out_of_the_holders_paxos_rounds() {
    let (read_grants, read_cost) = contended(WaitProbe::Read).await;
    let (cas_grants, cas_cost) = contended(WaitProbe::Cas).await;
    eprintln!("32 contenders, 20 s: probe=read {read_grants} grants, {read_cost:.1} round trips/grant; probe=cas {cas_grants} grants, {cas_cost:.1}");
    assert!(
        read_cost < cas_cost,
        "reads {read_cost:.1} vs CAS {cas_cost:.1} round trips per grant"
    );
    assert!(read_grants > cas_grants, "reads {read_grants} vs CAS {cas_grants} grants");
}
