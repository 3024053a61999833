//! The queue lock's promise (thesis section 5): with clocks that agree, the lock is granted in
//! queue order, so no request is overtaken by a later one, and turns alternate.
use lock_core::conformance::{self as c, EmbeddedFixture, Mode};
use lock_queue::QueueLocker;
use std::sync::Arc;
use std::time::Duration;

fn run(contenders: usize, seed: u64) -> Vec<c::Grant> {
    c::run(
        Mode::Simulated,
        seed,
        |seed| async move {
            EmbeddedFixture::new(seed, Mode::Simulated, |client, ctx| {
                Arc::new(QueueLocker::new(client, ctx, Default::default()).expect("config"))
                    as Arc<dyn lock_core::Locker>
            })
        },
        move |fx| {
            c::contention_log(
                fx,
                contenders,
                Duration::from_secs(30),
                Duration::from_millis(10),
                Duration::from_millis(1),
            )
        },
    )
}

/// Grants whose request came strictly after the request of someone granted later.
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
        let grants = run(contenders, seed);
        let n = overtakes(&grants);
        eprintln!(
            "queue lock, {contenders} contenders, 30 s simulated: {} grants, {n} overtakes",
            grants.len()
        );
        assert!(grants.len() > 100);
        assert_eq!(n, 0, "a later request was granted before an earlier one");
    }
}

#[test]
fn two_contenders_take_turns() {
    let grants = run(2, 4);
    let retakes = grants.windows(2).filter(|w| w[0].contender == w[1].contender).count();
    eprintln!(
        "queue lock, 2 contenders: {retakes} of {} handoffs went back to the releaser",
        grants.len() - 1
    );
    assert_eq!(retakes, 0);
}

#[test]
fn the_overtake_counter_counts() {
    // The checker itself must be able to fail.
    let t0 = tokio::time::Instant::now();
    let g = |contender, req: u64, granted: u64| c::Grant {
        contender,
        requested: t0 + Duration::from_millis(req),
        granted: t0 + Duration::from_millis(granted),
        released: t0 + Duration::from_millis(granted + 1),
        token: granted,
    };
    assert_eq!(overtakes(&[g(0, 0, 5), g(1, 1, 10)]), 0);
    assert_eq!(overtakes(&[g(1, 1, 5), g(0, 0, 10)]), 1);
}
