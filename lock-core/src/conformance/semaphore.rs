//! The semaphore's conformance suite: no more than N permits held at any instant, N held at
//! once when asked for, tokens distinct within an acquire and increasing across acquires one
//! after another, timeouts, try variants, refused requests and lost leases.
//!
//! An implementation runs it with one line:
//! [`semaphore_conformance_suite!`](crate::semaphore_conformance_suite) for any
//! [`Contenders`], or
//! [`embedded_semaphore_conformance_suite!`](crate::embedded_semaphore_conformance_suite) for
//! a Cassandra-model algorithm on the embedded store.

use super::Contenders;
#[allow(unused_imports)]
use super::Mode;
use crate::lock::{LockError, MAX_ID_LEN};
use crate::semaphore::{Permits, Semaphore};
use crate::usage::UsageError;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Handles of a semaphore, one per contender.
pub trait SemaphoreFixture: Contenders<dyn Semaphore> {}
impl<T: Contenders<dyn Semaphore>> SemaphoreFixture for T {}

/// One hold of some permits, from the grant to the release call.
#[derive(Debug, Clone)]
pub struct PermitHold {
    /// Semaphore id.
    pub semaphore_id: String,
    /// Holder.
    pub owner: String,
    /// The semaphore's size.
    pub limit: u32,
    /// When acquire was called.
    pub requested: Instant,
    /// When acquire returned.
    pub granted: Instant,
    /// When the holder called release.
    pub released: Instant,
    /// One token per permit held.
    pub tokens: Vec<u64>,
}

/// What a run of holds showed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PermitStats {
    /// Holds checked.
    pub holds: usize,
    /// The most permits of one semaphore held at one instant.
    pub max_held: u32,
}

/// Check that the permits held of each semaphore never exceed its size at any instant, that an
/// acquire's tokens are distinct, and that an acquire called after another hold ended carries
/// greater tokens than all of that one's. `Err` describes the first violation.
pub fn check_permits(holds: &[PermitHold]) -> Result<PermitStats, String> {
    let mut stats = PermitStats { holds: holds.len(), max_held: 0 };
    let mut by_sem: BTreeMap<&str, Vec<&PermitHold>> = BTreeMap::new();
    for h in holds {
        let mut t = h.tokens.clone();
        t.sort_unstable();
        t.dedup();
        if t.len() != h.tokens.len() {
            return Err(format!("{} got repeated tokens in one acquire: {:?}", h.owner, h.tokens));
        }
        by_sem.entry(&h.semaphore_id).or_default().push(h);
    }
    for (sem, mut hs) in by_sem {
        hs.sort_by_key(|h| (h.granted, h.released));
        for (i, a) in hs.iter().enumerate() {
            for b in &hs[i + 1..] {
                let a_max = a.tokens.iter().max().copied().unwrap_or(0);
                let b_min = b.tokens.iter().min().copied().unwrap_or(0);
                if b.requested >= a.released && b_min <= a_max {
                    return Err(format!(
                        "tokens did not increase on {sem}: {} got {:?} after {} released {:?}",
                        b.owner, b.tokens, a.owner, a.tokens
                    ));
                }
            }
        }
        let mut events: Vec<(Instant, i64, &PermitHold)> = hs
            .iter()
            .flat_map(|h| {
                [(h.granted, h.tokens.len() as i64, *h), (h.released, -(h.tokens.len() as i64), *h)]
            })
            .collect();
        // A release before a grant at one instant: touching holds do not overlap.
        events.sort_by_key(|(at, d, _)| (*at, *d));
        let mut held = 0i64;
        for (at, d, h) in events {
            held += d;
            if held > h.limit as i64 {
                return Err(format!(
                    "{held} permits of {sem} held at {at:?}, which has {}: {} just took {:?}",
                    h.limit, h.owner, h.tokens
                ));
            }
            stats.max_held = stats.max_held.max(held as u32);
        }
    }
    Ok(stats)
}

/// A shared log of holds.
#[derive(Debug, Default, Clone)]
struct Log(Arc<Mutex<Vec<PermitHold>>>);

impl Log {
    fn push(&self, hold: PermitHold) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(hold);
    }
    fn holds(&self) -> Vec<PermitHold> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Hold `permits` for `hold`, log them, release them.
async fn hold_for(log: &Log, permits: Permits, requested: Instant, hold: Duration) {
    let granted = crate::rt::now();
    crate::rt::sleep(hold).await;
    log.push(PermitHold {
        semaphore_id: permits.semaphore_id().to_string(),
        owner: permits.owner().to_string(),
        limit: permits.limit(),
        requested,
        granted,
        released: crate::rt::now(),
        tokens: permits.tokens().to_vec(),
    });
    permits.release().await.expect("release");
}

/// N contenders hold one permit each at once; one more is refused by `try_acquire` and waits;
/// it is granted once a permit is released.
pub async fn n_permits_are_held_at_once<F: SemaphoreFixture>(fx: Arc<F>) {
    let n = 3u32;
    let barrier = Arc::new(tokio::sync::Barrier::new(n as usize + 1));
    let mut holders = Vec::new();
    for i in 0..n {
        let s = fx.contender(&format!("h{i}")).await;
        let barrier = barrier.clone();
        holders.push(crate::rt::spawn(async move {
            let p = s.acquire("sem-pool", n, 1, None).await.expect("acquire");
            assert_eq!((p.count(), p.limit(), p.tokens().len()), (1, n, 1));
            barrier.wait().await;
            p
        }));
    }
    crate::rt::timeout(fx.ttl() * 3, barrier.wait())
        .await
        .expect("N permits must be held together, not in turn");
    let extra = fx.contender("extra").await;
    let start = crate::rt::now();
    assert!(
        extra.try_acquire("sem-pool", n, 1).await.expect("try_acquire").is_none(),
        "a permit beyond the semaphore's size was granted"
    );
    assert!(crate::rt::elapsed(start) < Duration::from_secs(1), "try_acquire must not wait");
    let waiting = crate::rt::spawn(async move { extra.acquire("sem-pool", n, 1, None).await });
    crate::rt::sleep(fx.notice_slack()).await;
    assert!(!waiting.is_finished(), "a permit beyond the semaphore's size was granted");
    let mut held = Vec::new();
    for h in holders {
        held.push(h.await.expect("holder task"));
    }
    held.pop().expect("a holder").release().await.expect("release");
    let p = crate::rt::timeout(fx.ttl() + fx.notice_slack(), waiting)
        .await
        .expect("a released permit goes to the waiter")
        .expect("waiter task")
        .expect("acquire");
    p.release().await.expect("release");
    for p in held {
        p.release().await.expect("release");
    }
}

/// An acquire times out while every permit is held ([`LockError::Timeout`]) and leaves nothing
/// behind that delays the next one.
pub async fn acquire_times_out_cleanly<F: SemaphoreFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let c = fx.contender("c").await;
    let held = a.acquire("sem-timed", 2, 2, None).await.expect("acquire");
    let timeout = Duration::from_millis(1500);
    match b.acquire("sem-timed", 2, 1, Some(timeout)).await {
        Err(LockError::Timeout { lock_id, waited }) => {
            assert_eq!(lock_id, "sem-timed");
            assert!(waited >= timeout, "reported {waited:?}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    held.release().await.expect("release");
    let start = crate::rt::now();
    let p = crate::rt::timeout(fx.notice_slack() * 2, c.acquire("sem-timed", 2, 2, None))
        .await
        .expect("a timed-out acquire left something that holds permits")
        .expect("acquire");
    assert!(crate::rt::elapsed(start) < fx.ttl(), "the next grant waited for leftovers to expire");
    p.release().await.expect("release");
}

/// No permits, too many, a semaphore of none, and another size than its holders use are
/// refused at once with a [`UsageError`]; nothing is held after them.
pub async fn bad_requests_are_refused<F: SemaphoreFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let quick = Duration::from_secs(1);
    let refused = |r: Result<Option<Permits>, LockError>| match r {
        Err(LockError::Usage(u)) => u,
        other => panic!("expected a usage error, got {other:?}"),
    };
    let start = crate::rt::now();
    let u = refused(a.acquire("sem-sized", 3, 4, Some(Duration::from_secs(30))).await.map(Some));
    assert!(matches!(u, UsageError::TooManyPermits { asked: 4, limit: 3, .. }), "{u:?}");
    let u = refused(a.try_acquire("sem-sized", 0, 1).await);
    assert!(matches!(u, UsageError::NoPermits { .. }), "{u:?}");
    let u = refused(a.try_acquire("sem-sized", 3, 0).await);
    assert!(matches!(u, UsageError::ZeroAsked { .. }), "{u:?}");
    assert!(crate::rt::elapsed(start) < quick, "refusals must not wait");
    // Nothing of those is held: all three permits are free.
    let p = b.try_acquire("sem-sized", 3, 3).await.expect("try_acquire");
    let p = p.expect("every permit free after refused requests");
    let u = refused(a.acquire("sem-sized", 4, 1, Some(Duration::from_secs(30))).await.map(Some));
    assert!(matches!(u, UsageError::LimitMismatch { asked: 4, stored: 3, .. }), "{u:?}");
    assert!(!p.is_lost());
    p.release().await.expect("release");
}

/// A holder cut off from the backend is told its permits are lost within about one TTL, and
/// they go to the next acquire with greater tokens.
pub async fn lost_permits_are_signalled<F: SemaphoreFixture>(fx: Arc<F>) {
    let ttl = fx.ttl();
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let p = a.acquire("sem-lossy", 2, 2, None).await.expect("acquire");
    let cut = crate::rt::now();
    fx.cut_off("a").await;
    crate::rt::timeout(ttl * 2, p.lost()).await.expect("lost permits not signalled within 2 x TTL");
    assert!(
        crate::rt::elapsed(cut) <= ttl + Duration::from_secs(1),
        "signalled after {:?}",
        crate::rt::elapsed(cut)
    );
    let q = crate::rt::timeout(ttl * 2 + fx.notice_slack(), b.acquire("sem-lossy", 2, 2, None))
        .await
        .expect("lost permits are not freed")
        .expect("acquire");
    let (a_max, b_min) = (p.tokens().iter().max(), q.tokens().iter().min());
    assert!(b_min > a_max, "tokens {:?} after {:?}", q.tokens(), p.tokens());
    drop(p);
    q.release().await.expect("release");
}

/// Empty, over-long and malformed semaphore ids are refused with [`LockError::InvalidId`].
pub async fn invalid_ids_are_rejected<F: SemaphoreFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    for bad in [String::new(), "x".repeat(MAX_ID_LEN + 1), "a/b".into()] {
        assert!(
            matches!(a.acquire(&bad, 2, 1, None).await, Err(LockError::InvalidId { .. })),
            "acquire({bad:?})"
        );
        assert!(
            matches!(a.try_acquire(&bad, 2, 1).await, Err(LockError::InvalidId { .. })),
            "try_acquire({bad:?})"
        );
    }
}

/// `contenders` contenders on one semaphore of `limit` permits, `rounds` acquires each of 1
/// or 2 permits, random holds and pauses from `seed`; every hold checked ([`check_permits`]).
pub async fn permits_under_contention<F: SemaphoreFixture>(
    fx: Arc<F>,
    contenders: usize,
    rounds: usize,
    limit: u32,
    seed: u64,
) -> PermitStats {
    let log = Log::default();
    let mut tasks = Vec::new();
    for i in 0..contenders {
        let s = fx.contender(&format!("c{i}")).await;
        let log = log.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        tasks.push(crate::rt::spawn(async move {
            for _ in 0..rounds {
                let k = rng.random_range(1..=2u32.min(limit));
                let hold = Duration::from_millis(rng.random_range(1..20));
                let pause = Duration::from_millis(rng.random_range(0..10));
                let requested = crate::rt::now();
                let p = s.acquire("sem-contended", limit, k, None).await.expect("acquire");
                assert_eq!(p.count(), k);
                hold_for(&log, p, requested, hold).await;
                crate::rt::sleep(pause).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    let stats = check_permits(&log.holds()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stats.holds, contenders * rounds);
    stats
}

/// Run the semaphore suite for a [`Contenders`] of `dyn Semaphore`: `$make` is an
/// `async fn(seed: u64) -> impl Contenders<dyn Semaphore>`, `$mode` a [`Mode`], `$seeds` how
/// many seeds the contention test runs, `$contenders` how many contenders it has.
#[macro_export]
macro_rules! semaphore_conformance_suite {
    ($mode:expr, $make:expr, seeds = $seeds:expr, contenders = $contenders:expr) => {
        mod semaphore_conformance {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;
            use $crate::conformance::semaphore as sem;

            #[test]
            fn n_permits_are_held_at_once_and_one_more_waits() {
                c::run($mode, 1, $make, sem::n_permits_are_held_at_once);
            }
            #[test]
            fn an_acquire_times_out_and_leaves_nothing_behind() {
                c::run($mode, 2, $make, sem::acquire_times_out_cleanly);
            }
            #[test]
            fn bad_permit_counts_and_sizes_are_refused_and_hold_nothing() {
                c::run($mode, 3, $make, sem::bad_requests_are_refused);
            }
            #[test]
            fn a_holder_cut_off_is_told_its_permits_are_lost() {
                c::run($mode, 4, $make, sem::lost_permits_are_signalled);
            }
            #[test]
            fn invalid_semaphore_ids_are_rejected() {
                c::run($mode, 5, $make, sem::invalid_ids_are_rejected);
            }
            #[test]
            fn no_more_than_n_permits_are_held_over_many_seeds() {
                let mut holds = 0;
                let mut most = 0;
                for seed in 0..$seeds {
                    let s = c::run($mode, 1000 + seed, $make, |fx| async move {
                        sem::permits_under_contention(fx, $contenders, 4, 3, 1000 + seed).await
                    });
                    holds += s.holds;
                    most = most.max(s.max_held);
                }
                assert!(most >= 2, "permits were never held together");
                eprintln!(
                    "semaphore of 3: {holds} holds over {} seeds, at most {most} permits held",
                    $seeds
                );
            }
        }
    };
}

/// The semaphore suite on the embedded store for a Cassandra-model algorithm: `$build` is a
/// closure `|client: EmbeddedClient, ctx: ClientContext| -> Arc<dyn Semaphore>`. Every scenario
/// in simulated time, contention over 8 seeds with 32 contenders, and contention once more on
/// a multi-thread runtime in wall time.
#[macro_export]
macro_rules! embedded_semaphore_conformance_suite {
    ($build:expr) => {
        $crate::semaphore_conformance_suite!(
            $crate::conformance::Mode::Simulated,
            |seed| async move {
                $crate::conformance::EmbeddedContenders::<dyn $crate::semaphore::Semaphore>::new(
                    seed,
                    $crate::conformance::Mode::Simulated,
                    $build,
                )
            },
            seeds = 8,
            contenders = 32
        );

        mod semaphore_conformance_wall {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;

            #[test]
            fn no_more_than_n_permits_with_real_parallelism_in_wall_time() {
                c::run(
                    c::Mode::Wall,
                    77,
                    |seed| async move {
                        c::EmbeddedContenders::<dyn $crate::semaphore::Semaphore>::new(
                            seed,
                            c::Mode::Wall,
                            $build,
                        )
                    },
                    |fx| async move {
                        let s = c::semaphore::permits_under_contention(fx, 8, 3, 3, 77).await;
                        eprintln!("wall time, multi-thread: {s:?}");
                    },
                );
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(owner: &str, from: u64, to: u64, tokens: &[u64]) -> PermitHold {
        let t0 = crate::rt::now();
        PermitHold {
            semaphore_id: "s".into(),
            owner: owner.into(),
            limit: 3,
            requested: t0 + Duration::from_millis(from),
            granted: t0 + Duration::from_millis(from),
            released: t0 + Duration::from_millis(to),
            tokens: tokens.to_vec(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_checker_counts_permits_and_orders_tokens() {
        let ok = [hold("a", 0, 10, &[1, 2]), hold("b", 5, 15, &[2]), hold("c", 10, 20, &[3, 4])];
        assert_eq!(check_permits(&ok).unwrap(), PermitStats { holds: 3, max_held: 3 });
        let over = [hold("a", 0, 10, &[1, 2]), hold("b", 5, 15, &[3, 4])];
        assert!(check_permits(&over).unwrap_err().contains("4 permits"));
        let repeated = [hold("a", 0, 10, &[1, 1])];
        assert!(check_permits(&repeated).unwrap_err().contains("repeated"));
        let shrinking = [hold("a", 0, 10, &[5]), hold("b", 10, 15, &[5])];
        assert!(check_permits(&shrinking).unwrap_err().contains("did not increase"));
    }
}
