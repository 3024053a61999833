//! queue-push's failure cases: a ring is a hint, so whatever happens to it costs latency and
//! never safety. On the embedded store in simulated time (3 replicas, ~1 ms round trips), with
//! its in-process doorbells; the last test rings across two real processes over UDP.

use lock_core::conformance::{self as c, EmbeddedFixture, Fixture, Mode};
use lock_core::doorbell::{Doorbell, RingFaults, UdpDoorbells};
use lock_core::store::{CellStore, CellWrite, Consistency};
use lock_core::Locker;
use lock_queue::push::{DEFAULT_FALLBACK_POLL, PUSH_QUEUE_TABLE};
use lock_queue::{PushConfig, PushQueueLocker};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

fn fixture(seed: u64) -> EmbeddedFixture {
    EmbeddedFixture::new(seed, Mode::Simulated, |client, ctx| {
        let bell = client.doorbell().expect("doorbells");
        Arc::new(PushQueueLocker::new(client, ctx, PushConfig::default(), bell).expect("config"))
            as Arc<dyn Locker>
    })
}

/// How long `waiter` takes to be granted `lock` once `release` runs.
async fn handoff(holder: lock_core::LockGuard, waiter: Arc<dyn Locker>, lock: &str) -> Duration {
    let lock = lock.to_owned();
    let task = tokio::spawn(async move { waiter.lock(&lock, None).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let guard = task.await.unwrap().unwrap();
    let took = released.elapsed();
    guard.release().await.unwrap();
    took
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_ring_wakes_the_next_waiter_within_round_trips_not_a_poll() {
    let fx = fixture(1);
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    let took = handoff(a.lock("L", None).await.unwrap(), b, "L").await;
    // Release's delete, queue read, ring, main write and read, fencing token: ~6.5 round trips
    // (plus the release's own queue delete) — far below the 1 s fallback poll.
    assert!(took < Duration::from_millis(20), "handoff took {took:?}");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn lost_rings_cost_a_fallback_poll_and_never_a_second_holder() {
    let fx = fixture(2);
    let bells = fx.store().doorbells();
    bells.set_faults(RingFaults { drop: 1.0, delay: Duration::ZERO });
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    let took = handoff(a.lock("L", None).await.unwrap(), b, "L").await;
    // b polls a fallback interval after its own last look, which came before the release.
    assert!(
        took > Duration::from_millis(20)
            && took <= DEFAULT_FALLBACK_POLL + Duration::from_millis(100),
        "{took:?}"
    );
    // Under contention with every ring lost, late or kept: still one holder at a time.
    for faults in [
        RingFaults { drop: 1.0, delay: Duration::ZERO },
        RingFaults { drop: 0.5, delay: Duration::from_millis(30) },
    ] {
        bells.set_faults(faults);
        let holds = c::contended_holds(Arc::new(fixture_with(&fx)), 6, 4, 3).await;
        assert_eq!(c::assert_exclusive(&holds), 24, "{faults:?}");
    }
}

/// Same store, fresh lockers (names differ from the other tests' ones).
fn fixture_with(fx: &EmbeddedFixture) -> impl Fixture {
    struct Same(EmbeddedFixture);
    #[async_trait::async_trait]
    impl Fixture for Same {
        async fn locker(&self, name: &str) -> Arc<dyn Locker> {
            self.0.locker(name).await
        }
        async fn cut_off(&self, name: &str) {
            self.0.cut_off(name).await
        }
        fn ttl(&self) -> Duration {
            self.0.ttl()
        }
        fn mode(&self) -> Mode {
            self.0.mode()
        }
    }
    let store = fx.store().clone();
    Same(EmbeddedFixture::with_store(store, 5, Mode::Simulated, |client, ctx| {
        let bell = client.doorbell().expect("doorbells");
        Arc::new(PushQueueLocker::new(client, ctx, PushConfig::default(), bell).expect("config"))
            as Arc<dyn Locker>
    }))
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn duplicated_and_stale_rings_cost_at_most_a_failed_try() {
    let fx = fixture(4);
    let bells = fx.store().doorbells();
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    let held = a.lock("L", None).await.unwrap();
    let waiter = tokio::spawn({
        let b = Arc::clone(&b);
        async move { b.lock("L", None).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Rings for b's real place while a still holds: b tries the main row, finds a, waits on.
    let queue = fx
        .store()
        .client("probe")
        .read(PUSH_QUEUE_TABLE, "L", lock_core::Slice::all(), Consistency::Quorum)
        .await
        .unwrap();
    let b_cell = queue.iter().find(|cell| cell.column == "b").expect("b queued");
    let ticket = std::str::from_utf8(&b_cell.value).unwrap().split(' ').next().unwrap().to_owned();
    for _ in 0..3 {
        bells.ring("local", "L", "b", &ticket);
    }
    // And rings for a place b never had.
    bells.ring("local", "L", "b", "00000000000000000001");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "b was granted while a held the lock");
    let (rung, delivered) = bells.counts();
    assert!(rung >= 4 && delivered >= 3, "rung {rung}, delivered {delivered}");
    held.release().await.unwrap();
    waiter.await.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_waiter_that_left_is_not_rung_and_the_one_behind_it_is() {
    let fx = fixture(5);
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    let c_ = fx.locker("c").await;
    let held = a.lock("L", None).await.unwrap();
    // b queues first and gives up; c queues behind it.
    let b_gave_up = tokio::spawn(async move { b.lock("L", Some(Duration::from_millis(30))).await });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let took = {
        let waiter = tokio::spawn(async move { c_.lock("L", None).await });
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(matches!(b_gave_up.await.unwrap(), Err(lock_core::LockError::Timeout { .. })));
        let released = Instant::now();
        held.release().await.unwrap();
        let g = waiter.await.unwrap().unwrap();
        let took = released.elapsed();
        g.release().await.unwrap();
        took
    };
    assert!(took < Duration::from_millis(20), "c was rung past b's empty place: {took:?}");
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_unreachable_address_at_the_head_costs_its_ttl_and_a_poll_not_the_lock() {
    let fx = fixture(6);
    // A cell left by a process that is gone, first in the queue, ringing nowhere.
    let ghost = CellWrite {
        column: "ghost".into(),
        value: b"00000000000000000000 udp://127.0.0.1:9".to_vec(),
        timestamp: 1,
        ttl: Some(Duration::from_secs(3)),
    };
    fx.store()
        .client("ghost")
        .write(PUSH_QUEUE_TABLE, "L", &[ghost], Consistency::Quorum)
        .await
        .unwrap();
    let w = fx.locker("w").await;
    let started = Instant::now();
    w.lock("L", None).await.unwrap().release().await.unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(3) + DEFAULT_FALLBACK_POLL * 2,
        "{took:?}"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_holder_that_crashes_without_ringing_is_succeeded_after_its_ttl() {
    let fx = fixture(7);
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    let held = a.lock("L", None).await.unwrap();
    let crashed = Instant::now();
    held.abandon();
    fx.cut_off("a").await;
    b.lock("L", None).await.unwrap().release().await.unwrap();
    let took = crashed.elapsed();
    let ttl = fx.ttl();
    assert!(took >= ttl && took < ttl + DEFAULT_FALLBACK_POLL * 2, "{took:?} (TTL {ttl:?})");
}

/// The child's side of the two-process test (the same test, run again by the parent with
/// `PUSH_DOORBELL_PARENT` set): listen, print our address, ring the parent back when rung.
async fn doorbell_child(parent: String) {
    let bells = UdpDoorbells::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let bell = bells.listen("L", "child", "t-child");
    println!("ADDRESS {}", bells.address());
    tokio::time::timeout(Duration::from_secs(20), bell.notified()).await.expect("the parent rang");
    bells.ring(&parent, "L", "parent", "t-parent");
    // Give the datagram time to leave before the process exits.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn two_processes_on_loopback_ring_each_others_doorbells() {
    use std::io::BufRead;
    if let Ok(parent) = std::env::var("PUSH_DOORBELL_PARENT") {
        return doorbell_child(parent).await;
    }
    let bells = UdpDoorbells::bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let bell = bells.listen("L", "parent", "t-parent");
    // This test's name as the harness knows it: its module path without the binary's name.
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let name = format!("{module}::two_processes_on_loopback_ring_each_others_doorbells");
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name.as_str(), "--exact", "--nocapture"])
        .env("PUSH_DOORBELL_PARENT", bells.address())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    // Read the child's output to its end (a closed pipe would fail its test harness), passing
    // the address on.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(a) = line.strip_prefix("ADDRESS ") {
                let _ = tx.send(a.to_owned());
            }
        }
    });
    let address = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(20)))
        .await
        .unwrap()
        .expect("the child printed its doorbell address");
    assert!(address.starts_with("udp://127.0.0.1:"), "{address}");
    // Ring until the child rings back (a datagram sent before it listened is lost, as UDP is).
    let rang_back = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            bells.ring(&address, "L", "child", "t-child");
            if tokio::time::timeout(Duration::from_millis(200), bell.notified()).await.is_ok() {
                break;
            }
        }
    })
    .await;
    assert!(rang_back.is_ok(), "the child process never rang back");
    assert!(child.wait().unwrap().success());
    assert_eq!(bells.delivered(), 1);
}
