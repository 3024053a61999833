//! Time sources that order the queue lock: the thesis's GlobalTime service, its known freeze,
//! the hybrid clock and the write-timestamp generator. All in simulated time.
use lock_core::embedded::{EmbeddedConfig, EmbeddedStore, LatencyModel};
use lock_core::store::Consistency;
use lock_core::time::{
    GlobalTime, GlobalTimeService, HybridClock, LocalClock, PhysicalClock, TimeSource,
    TimestampGenerator,
};
use std::time::Duration;
use tokio::time::{sleep, Instant};

fn cluster(seed: u64) -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig {
        replicas: 3,
        latency: LatencyModel { fixed: Duration::from_millis(1), jitter: Duration::from_millis(2) },
        seed,
        ..EmbeddedConfig::default()
    })
}

/// Start one time-service replica per skew (ms), each through its own store client.
fn service(store: &EmbeddedStore, skews_ms: &[i64]) -> GlobalTimeService {
    let replicas = skews_ms
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let client = store.client(format!("time-{i}")).with_skew(s * 1000);
            let clock = client.clock();
            (client, clock)
        })
        .collect();
    GlobalTimeService::start(replicas, GlobalTimeService::DEFAULT_PERIOD, Consistency::Quorum)
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn global_time_never_decreases_under_skewed_replicas() {
    let store = cluster(1);
    let _svc = service(&store, &[-300, 0, 250, -40]);
    let reader = GlobalTime::new(store.client("reader"), Consistency::Quorum);
    let fastest = LocalClock::new(store.physical_clock(), 250_000);
    sleep(Duration::from_millis(600)).await;
    let mut last = 0;
    let mut readings = 0;
    for _ in 0..400 {
        let now = reader.now().await.expect("GlobalTime written");
        assert!(now >= last, "GlobalTime went back from {last} to {now}");
        // It follows the fastest replica's clock, at most one period (plus a round trip) behind.
        let lag = fastest.now_micros() - now;
        assert!((0..=520_000).contains(&lag), "GlobalTime lags the fastest clock by {lag} µs");
        last = now;
        readings += 1;
        sleep(Duration::from_millis(37)).await;
    }
    assert_eq!(readings, 400);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn global_time_freezes_when_the_fastest_replica_dies() {
    // Thesis section 6: a replica whose clock ran ahead by 5 s writes GlobalTime from its
    // clock; when it dies, the others' clocks are 5 s behind the cell and cannot move it.
    let store = cluster(2);
    let svc = service(&store, &[0, 0, 5_000]);
    let reader = GlobalTime::new(store.client("reader"), Consistency::Quorum);
    sleep(Duration::from_secs(2)).await;
    let before = reader.now().await.unwrap();
    sleep(Duration::from_millis(600)).await;
    assert!(reader.now().await.unwrap() > before, "time moves while the fast replica lives");

    svc.kill(2);
    sleep(Duration::from_millis(600)).await;
    let frozen = reader.now().await.unwrap();
    let killed_at = Instant::now();
    let mut frozen_for = Duration::ZERO;
    loop {
        sleep(Duration::from_millis(100)).await;
        let now = reader.now().await.unwrap();
        assert!(now >= frozen);
        if now > frozen {
            break;
        }
        frozen_for = killed_at.elapsed();
        assert!(frozen_for < Duration::from_secs(10), "time never resumed");
    }
    eprintln!("GlobalTime stood still for {frozen_for:?} after the fastest replica (+5 s) died");
    assert!(frozen_for >= Duration::from_millis(3800), "froze only {frozen_for:?}");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn global_time_is_an_error_before_any_replica_wrote_it() {
    let store = cluster(3);
    let reader = GlobalTime::new(store.client("reader"), Consistency::Quorum);
    assert!(reader.now().await.is_err());
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn hybrid_clock_never_goes_back_and_passes_what_it_observed() {
    let behind = LocalClock::new(PhysicalClock::tokio(), -2_000_000);
    let hlc = HybridClock::new(behind.clone());
    let a = hlc.now().await.unwrap();
    let b = hlc.now().await.unwrap();
    assert!(b > a, "two readings in the same instant must differ");
    // A timestamp from a clock 2 s ahead.
    let seen = behind.now_micros() + 4_000_000;
    hlc.observe(seen);
    let c = hlc.now().await.unwrap();
    assert!(c > seen);
    sleep(Duration::from_secs(1)).await;
    assert!(hlc.now().await.unwrap() > c);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn local_clock_applies_its_skew_and_timestamps_strictly_increase() {
    let base = PhysicalClock::tokio();
    let ahead = LocalClock::new(base, 1_500);
    assert_eq!(ahead.now_micros() - base.now_micros(), 1_500);
    let gen = TimestampGenerator::new(ahead.clone());
    // Time does not move in a paused runtime without sleeps: still strictly increasing.
    let ts: Vec<i64> = (0..1000).map(|_| gen.next()).collect();
    assert!(ts.windows(2).all(|w| w[1] > w[0]));
    sleep(Duration::from_millis(5)).await;
    assert!(gen.next() >= ahead.now_micros());
}
