use crate::rt::{self, JoinError, Simulation};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn sleeping_moves_the_clock_exactly_and_costs_no_wall_time() {
    let wall = std::time::Instant::now();
    let mut sim = Simulation::new(1);
    let waited = sim.block_on(async {
        let start = rt::now();
        rt::sleep(Duration::from_secs(3 * 3600)).await;
        rt::sleep(Duration::from_nanos(1_200)).await;
        rt::now() - start
    });
    assert_eq!(waited, Duration::from_secs(3 * 3600) + Duration::from_nanos(1_200));
    assert_eq!(sim.elapsed(), waited);
    assert!(wall.elapsed() < Duration::from_secs(5));
}

/// The order in which 64 tasks due at one instant run, under `seed`.
fn order_of_ties(seed: u64) -> Vec<usize> {
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut sim = Simulation::new(seed);
    let o = order.clone();
    sim.block_on(async move {
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let o = o.clone();
                rt::spawn(async move {
                    rt::sleep(Duration::from_millis(5)).await;
                    o.lock().unwrap().push(i);
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let order = order.lock().unwrap().clone();
    order
}

#[test]
fn ties_run_in_an_order_the_seed_fixes() {
    let a = order_of_ties(1);
    assert_eq!(a, order_of_ties(1), "one seed, one order");
    assert_ne!(a, order_of_ties(2), "another seed, another order");
    assert_ne!(a, (0..64).collect::<Vec<_>>(), "not simply the order the timers were set in");
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, (0..64).collect::<Vec<_>>(), "every task ran once");
}

#[test]
fn timers_fire_in_time_order_whatever_order_they_were_set_in() {
    let mut sim = Simulation::new(3);
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    sim.block_on(async move {
        let tasks: Vec<_> = [30u64, 10, 20, 10_000, 1]
            .into_iter()
            .map(|ms| {
                let o = o.clone();
                rt::spawn(async move {
                    rt::sleep(Duration::from_millis(ms)).await;
                    o.lock().unwrap().push((ms, rt::now()));
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let order = order.lock().unwrap();
    let ms: Vec<u64> = order.iter().map(|(ms, _)| *ms).collect();
    assert_eq!(ms, vec![1, 10, 20, 30, 10_000]);
    assert_eq!(order[4].1 - order[0].1, Duration::from_millis(9_999));
}

#[test]
fn a_timeout_ends_at_its_deadline_and_a_faster_future_wins() {
    let mut sim = Simulation::new(1);
    sim.block_on(async {
        let start = rt::now();
        let slow = rt::timeout(Duration::from_secs(2), rt::sleep(Duration::from_secs(10))).await;
        assert_eq!(slow, Err(rt::Elapsed));
        assert_eq!(rt::now() - start, Duration::from_secs(2));
        let fast = rt::timeout(Duration::from_secs(2), async {
            rt::sleep(Duration::from_millis(5)).await;
            7
        })
        .await;
        assert_eq!(fast, Ok(7));
        assert_eq!(rt::now() - start, Duration::from_millis(2_005));
    });
}

#[test]
fn a_cancelled_timeout_leaves_no_wake_up_behind() {
    let mut sim = Simulation::new(1);
    sim.block_on(async {
        for _ in 0..1_000 {
            let _ = rt::timeout(Duration::from_secs(60), rt::yield_now()).await;
        }
        rt::sleep(Duration::from_secs(120)).await;
    });
    assert_eq!(sim.timers_fired(), 1, "only the last sleep fired");
}

#[test]
fn an_aborted_task_is_cancelled_and_its_destructors_run() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    let mut sim = Simulation::new(1);
    let d = dropped.clone();
    sim.block_on(async move {
        let held = Counted(d.clone());
        let task = rt::spawn(async move {
            let _held = held;
            rt::sleep(Duration::from_secs(3600)).await;
            1
        });
        rt::sleep(Duration::from_secs(1)).await;
        assert!(!task.is_finished());
        task.abort();
        assert_eq!(task.await, Err(JoinError::Cancelled));
        assert_eq!(d.load(Ordering::SeqCst), 1);
    });
    assert_eq!(sim.elapsed(), Duration::from_secs(1), "the aborted sleep never fired");
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
}

#[test]
fn dropping_the_simulation_drops_every_task_even_those_their_destructors_spawn() {
    struct SpawnsOnDrop(Arc<AtomicUsize>);
    impl Drop for SpawnsOnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
            if self.0.load(Ordering::SeqCst) < 3 {
                let again = SpawnsOnDrop(self.0.clone());
                let _ = rt::try_spawn(async move {
                    let _again = again;
                    rt::sleep(Duration::from_secs(1)).await;
                });
            }
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    {
        let mut sim = Simulation::new(1);
        let d = drops.clone();
        sim.block_on(async move {
            let guard = SpawnsOnDrop(d);
            rt::spawn(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            });
            rt::yield_now().await;
        });
        assert_eq!(drops.load(Ordering::SeqCst), 0);
    }
    assert!(drops.load(Ordering::SeqCst) >= 2, "the task and what its drop spawned were dropped");
}

#[test]
#[should_panic(expected = "the simulation stalled")]
fn a_future_nothing_can_wake_stalls_loudly() {
    let mut sim = Simulation::new(1);
    sim.block_on(async {
        let (_tx, rx) = tokio::sync::oneshot::channel::<()>();
        let _ = rx.await;
    });
}

#[test]
fn tokio_channels_and_notify_wake_simulated_tasks() {
    let mut sim = Simulation::new(5);
    let got = sim.block_on(async {
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        let notify = Arc::new(tokio::sync::Notify::new());
        let n = notify.clone();
        rt::spawn(async move {
            for i in 0..10u32 {
                rt::sleep(Duration::from_millis(10)).await;
                tx.send(i).await.unwrap();
            }
            n.notify_one();
        });
        notify.notified().await;
        let mut got = Vec::new();
        while let Ok(i) = rx.try_recv() {
            got.push(i);
        }
        (got, rt::now())
    });
    assert_eq!(got.0, (0..10).collect::<Vec<_>>());
    assert_eq!(sim.elapsed(), Duration::from_millis(100));
}

#[test]
fn yielding_lets_every_ready_task_run_first() {
    let mut sim = Simulation::new(1);
    let order = sim.block_on(async {
        let order = Arc::new(Mutex::new(Vec::new()));
        let o = order.clone();
        let other = rt::spawn(async move { o.lock().unwrap().push("other") });
        rt::yield_now().await;
        order.lock().unwrap().push("main");
        other.await.unwrap();
        let order = order.lock().unwrap().clone();
        order
    });
    assert_eq!(order, vec!["other", "main"]);
}

#[test]
fn a_waker_called_from_another_thread_still_wakes_its_task() {
    let mut sim = Simulation::new(1);
    let polls = sim.block_on(async {
        let woken = Arc::new(AtomicBool::new(false));
        let flag = Arc::new(AtomicBool::new(false));
        let (flag_in_task, woken_in_task) = (flag.clone(), woken.clone());
        let waiter = rt::spawn(async move {
            let (flag, woken) = (flag_in_task, woken_in_task);
            let mut polls = 0;
            std::future::poll_fn(|cx| {
                polls += 1;
                if flag.load(Ordering::SeqCst) {
                    return std::task::Poll::Ready(());
                }
                if polls == 1 {
                    let (waker, flag, woken) = (cx.waker().clone(), flag.clone(), woken.clone());
                    std::thread::spawn(move || {
                        flag.store(true, Ordering::SeqCst);
                        waker.wake();
                        woken.store(true, Ordering::SeqCst);
                    });
                }
                std::task::Poll::Pending
            })
            .await;
            polls
        });
        // Keeps the simulation busy until the other thread has woken the waiter.
        let spinner = rt::spawn(async move {
            while !woken.load(Ordering::SeqCst) {
                rt::yield_now().await;
            }
        });
        let polls = waiter.await.unwrap();
        spinner.await.unwrap();
        polls
    });
    assert_eq!(polls, 2);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn outside_a_simulation_the_calls_go_to_tokio() {
    assert!(!rt::in_simulation());
    let start = rt::now();
    assert_eq!(start, tokio::time::Instant::now());
    let task = rt::spawn(async {
        rt::sleep(Duration::from_secs(30)).await;
        5
    });
    assert_eq!(task.await, Ok(5));
    assert_eq!(rt::now() - start, Duration::from_secs(30));
    assert_eq!(
        rt::timeout(Duration::from_secs(1), std::future::pending::<()>()).await,
        Err(rt::Elapsed)
    );
}

#[test]
fn outside_any_runtime_try_spawn_drops_the_work() {
    assert!(rt::try_spawn(async {}).is_none());
}

#[test]
fn the_timer_heap_pops_in_the_order_of_a_binary_heap() {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut ours = super::TimerHeap::default();
    let mut theirs = BinaryHeap::new();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for step in 0..20_000u32 {
        let r = next();
        // Few distinct due times and tie-breakers, so that entries tie on them.
        if r % 3 != 0 {
            let entry = (r % 64, (r >> 8) % 4, (r >> 16) as u32 % 8, step);
            ours.push(entry);
            theirs.push(Reverse(entry));
        } else {
            assert_eq!(ours.pop(), theirs.pop().map(|Reverse(e)| e));
        }
        assert_eq!(ours.peek(), theirs.peek().map(|Reverse(e)| e));
    }
    while let Some(Reverse(e)) = theirs.pop() {
        assert_eq!(ours.pop(), Some(e));
    }
    assert_eq!(ours.pop(), None);
}
