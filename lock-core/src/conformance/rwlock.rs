//! The reader-writer lock's conformance suite: writers exclude everyone, readers share, the
//! writer policy the lock declares holds, and timeouts, try variants, refused upgrades, lost
//! leases and fencing tokens behave as for the mutex.
//!
//! An implementation runs it with one line: [`rwlock_conformance_suite!`](crate::rwlock_conformance_suite)
//! for any [`Contenders`], or
//! [`embedded_rwlock_conformance_suite!`](crate::embedded_rwlock_conformance_suite) for a
//! Cassandra-model algorithm on the embedded store.

use super::Contenders;
#[allow(unused_imports)]
use super::Mode;
use crate::lock::{LockError, MAX_ID_LEN};
use crate::rwlock::{Access, RwLocker, WriterPolicy};
use crate::usage::UsageError;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Handles of a reader-writer lock, one per contender.
pub trait RwFixture: Contenders<dyn RwLocker> {}
impl<T: Contenders<dyn RwLocker>> RwFixture for T {}

/// One hold of a reader-writer lock, from the grant to the release call.
#[derive(Debug, Clone)]
pub struct RwHold {
    /// Lock id.
    pub lock_id: String,
    /// Holder.
    pub owner: String,
    /// Read or write.
    pub access: Access,
    /// When the lock call was made.
    pub requested: Instant,
    /// When the lock call returned.
    pub granted: Instant,
    /// When the holder called release.
    pub released: Instant,
    /// The guard's fencing token.
    pub token: u64,
}

/// What a run of holds showed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RwStats {
    /// Holds checked.
    pub holds: usize,
    /// Holds that were writes.
    pub writes: usize,
    /// The most readers that held one lock at one instant.
    pub max_readers: usize,
}

/// Check that no write hold overlaps another hold of its lock, and the tokens' order: a write
/// granted after another hold ended, and any hold after a write ended, carries a greater
/// token; a read asked for after another read ended, too. (Two reads may draw their tokens at
/// once: a read granted after another ended, but asked for before, may carry a smaller one.)
/// `Err` describes the first violation.
pub fn check_readers_writers(holds: &[RwHold]) -> Result<RwStats, String> {
    let mut by_lock: BTreeMap<&str, Vec<&RwHold>> = BTreeMap::new();
    for h in holds {
        by_lock.entry(&h.lock_id).or_default().push(h);
    }
    let mut stats = RwStats {
        holds: holds.len(),
        writes: holds.iter().filter(|h| h.access == Access::Write).count(),
        max_readers: 0,
    };
    for (lock, mut hs) in by_lock {
        hs.sort_by_key(|h| (h.granted, h.released));
        for (i, a) in hs.iter().enumerate() {
            for b in &hs[i + 1..] {
                let either_writes = a.access == Access::Write || b.access == Access::Write;
                if b.granted < a.released {
                    if either_writes {
                        return Err(format!(
                            "a writer overlapped on {lock}: {} ({}) held from {:?} to {:?}, {} ({}) granted at {:?}",
                            a.owner, a.access.name(), a.granted, a.released, b.owner,
                            b.access.name(), b.granted
                        ));
                    }
                } else if (either_writes || b.requested >= a.released) && b.token <= a.token {
                    return Err(format!(
                        "fencing token did not increase on {lock}: {} ({}) got {} after {} ({}) released {}",
                        b.owner, b.access.name(), b.token, a.owner, a.access.name(), a.token
                    ));
                }
            }
        }
        let mut events: Vec<(Instant, i64)> = hs
            .iter()
            .filter(|h| h.access == Access::Read)
            .flat_map(|h| [(h.granted, 1), (h.released, -1)])
            .collect();
        // At one instant a release comes before a grant: touching holds do not overlap.
        events.sort();
        let mut now = 0i64;
        for (_, d) in events {
            now += d;
            stats.max_readers = stats.max_readers.max(now as usize);
        }
    }
    Ok(stats)
}

/// A shared log of holds.
#[derive(Debug, Default, Clone)]
struct Log(Arc<Mutex<Vec<RwHold>>>);

impl Log {
    fn push(&self, hold: RwHold) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(hold);
    }
    fn holds(&self) -> Vec<RwHold> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Hold `guard` for `hold`, log it, release it.
async fn hold_for(
    log: &Log,
    guard: crate::lock::LockGuard,
    access: Access,
    requested: Instant,
    hold: Duration,
) {
    let granted = crate::rt::now();
    crate::rt::sleep(hold).await;
    log.push(RwHold {
        lock_id: guard.lock_id().to_string(),
        owner: guard.owner().to_string(),
        access,
        requested,
        granted,
        released: crate::rt::now(),
        token: guard.token(),
    });
    guard.release().await.expect("release");
}

/// Four readers hold one lock at once; a writer is refused by `try_lock` and waits for all of
/// them; while it writes, readers are refused.
pub async fn readers_share_and_writers_wait<F: RwFixture>(fx: Arc<F>) {
    let readers = 4;
    let barrier = Arc::new(tokio::sync::Barrier::new(readers + 1));
    let (done_tx, _) = tokio::sync::broadcast::channel::<()>(1);
    let mut tasks = Vec::new();
    for i in 0..readers {
        let r = fx.contender(&format!("r{i}")).await;
        let (barrier, mut done) = (barrier.clone(), done_tx.subscribe());
        tasks.push(crate::rt::spawn(async move {
            let g = r.read("rw-shared", None).await.expect("read");
            barrier.wait().await;
            let _ = done.recv().await;
            g.release().await.expect("release");
        }));
    }
    crate::rt::timeout(fx.ttl() * 3, barrier.wait())
        .await
        .expect("readers must hold the lock together, not in turn");
    let w = fx.contender("w").await;
    assert!(
        w.try_lock("rw-shared", Access::Write).await.expect("try write").is_none(),
        "a writer was let in beside readers"
    );
    let writer = {
        let w = w.clone();
        crate::rt::spawn(async move {
            let g = w.write("rw-shared", None).await.expect("write");
            (crate::rt::now(), g)
        })
    };
    crate::rt::sleep(fx.notice_slack()).await;
    assert!(!writer.is_finished(), "a writer was granted while readers held the lock");
    let all_released = crate::rt::now();
    done_tx.send(()).expect("readers listen");
    for t in tasks {
        t.await.expect("reader task");
    }
    let (granted, g) = crate::rt::timeout(fx.ttl() + fx.notice_slack(), writer)
        .await
        .expect("writer granted once the readers left")
        .expect("writer task");
    assert!(granted >= all_released);
    let r = fx.contender("late-reader").await;
    assert!(
        r.try_lock("rw-shared", Access::Read).await.expect("try read").is_none(),
        "a reader was let in beside a writer"
    );
    g.release().await.expect("release");
    let g = r.try_lock("rw-shared", Access::Read).await.expect("try read");
    g.expect("free lock granted to try_lock").release().await.expect("release");
}

/// A writer waits behind a reader; a reader that asks after it is refused by `try_lock` when
/// the policy is [`WriterPolicy::Fifo`] and admitted when it is
/// [`WriterPolicy::ReadersFirst`]; the writer is granted once the readers leave.
pub async fn later_readers_follow_the_writer_policy<F: RwFixture>(fx: Arc<F>) {
    let first = fx.contender("first-reader").await;
    let writer = fx.contender("writer").await;
    let later = fx.contender("later-reader").await;
    let policy = later.writer_policy();
    let g = first.read("rw-policy", None).await.expect("read");
    let waiting =
        crate::rt::spawn(async move { writer.write("rw-policy", None).await.expect("write") });
    // Long enough for the writer's ask to be in line on every backend.
    crate::rt::sleep(fx.notice_slack()).await;
    let passed = later.try_lock("rw-policy", Access::Read).await.expect("try read");
    match policy {
        WriterPolicy::Fifo => assert!(
            passed.is_none(),
            "FIFO policy, yet a reader that asked after a waiting writer was let in"
        ),
        WriterPolicy::ReadersFirst => {
            assert!(passed.is_some(), "readers-first policy, yet a reader was kept out")
        }
    }
    assert!(!waiting.is_finished(), "the writer was granted while a reader held the lock");
    if let Some(p) = passed {
        p.release().await.expect("release");
    }
    g.release().await.expect("release");
    let w = crate::rt::timeout(fx.ttl() + fx.notice_slack(), waiting)
        .await
        .expect("the writer is granted once the readers leave")
        .expect("writer task");
    w.release().await.expect("release");
}

/// A write ask times out behind a reader, a read ask behind a writer, each with
/// [`LockError::Timeout`], and neither leaves anything that delays the next ask.
pub async fn asks_time_out_cleanly<F: RwFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let c = fx.contender("c").await;
    let timeout = Duration::from_millis(1500);
    for (held, asked) in [(Access::Read, Access::Write), (Access::Write, Access::Read)] {
        let g = a.lock("rw-timed", held, None).await.expect("lock");
        let start = crate::rt::now();
        match b.lock("rw-timed", asked, Some(timeout)).await {
            Err(LockError::Timeout { lock_id, waited }) => {
                assert_eq!(lock_id, "rw-timed");
                assert!(waited >= timeout, "reported {waited:?}");
            }
            other => {
                panic!("{} behind {}: expected a timeout, got {other:?}", asked.name(), held.name())
            }
        }
        let took = crate::rt::elapsed(start);
        assert!(took < timeout + Duration::from_secs(2), "the timeout took {took:?}");
        g.release().await.expect("release");
        let start = crate::rt::now();
        let g = crate::rt::timeout(fx.notice_slack() * 2, c.lock("rw-timed", Access::Write, None))
            .await
            .expect("a timed-out ask left something that blocks the lock")
            .expect("write");
        assert!(
            crate::rt::elapsed(start) < fx.ttl(),
            "the next grant waited for leftovers to expire"
        );
        g.release().await.expect("release");
    }
}

/// A write ask by an owner that holds the lock for reading is refused at once
/// ([`UsageError::Upgrade`]); the read guard is still held; once it is released, the owner
/// can write.
pub async fn upgrade_is_refused<F: RwFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let g = a.read("rw-upgrade", None).await.expect("read");
    let start = crate::rt::now();
    match a.lock("rw-upgrade", Access::Write, Some(Duration::from_secs(30))).await {
        Err(LockError::Usage(UsageError::Upgrade { lock_id, owner })) => {
            assert_eq!((lock_id.as_str(), owner.as_str()), ("rw-upgrade", a.owner()));
        }
        other => panic!("expected the upgrade to be refused, got {other:?}"),
    }
    assert!(crate::rt::elapsed(start) < Duration::from_secs(1), "the refusal must not wait");
    assert!(matches!(
        a.try_lock("rw-upgrade", Access::Write).await,
        Err(LockError::Usage(UsageError::Upgrade { .. }))
    ));
    assert!(!g.is_lost());
    assert!(b.try_lock("rw-upgrade", Access::Write).await.expect("try write").is_none());
    g.release().await.expect("release");
    let w = a.write("rw-upgrade", Some(fx.ttl())).await.expect("write after the read is released");
    w.release().await.expect("release");
}

/// A holder cut off from the backend is told its lease is lost within about one TTL, reader
/// or writer, and the lock then goes to the next ask with a greater token.
pub async fn lost_holders_are_told<F: RwFixture>(fx: Arc<F>) {
    let ttl = fx.ttl();
    for (i, access) in [Access::Read, Access::Write].into_iter().enumerate() {
        let name = format!("lossy-{}", access.name());
        let a = fx.contender(&name).await;
        let b = fx.contender(&format!("next-{i}")).await;
        let lock_id = format!("rw-lossy-{i}");
        let g = a.lock(&lock_id, access, None).await.expect("lock");
        let cut = crate::rt::now();
        fx.cut_off(&name).await;
        crate::rt::timeout(ttl * 2, g.lost()).await.unwrap_or_else(|_| {
            panic!("a lost {} lease not signalled within 2 x TTL", access.name())
        });
        assert!(
            crate::rt::elapsed(cut) <= ttl + Duration::from_secs(1),
            "signalled after {:?}",
            crate::rt::elapsed(cut)
        );
        let g2 = crate::rt::timeout(ttl * 2 + fx.notice_slack(), b.write(&lock_id, None))
            .await
            .expect("the lock of a lost holder is not freed")
            .expect("write");
        assert!(g2.token() > g.token(), "token {} after {}", g2.token(), g.token());
        drop(g);
        g2.release().await.expect("release");
    }
}

/// Empty, over-long and malformed lock ids are refused with [`LockError::InvalidId`].
pub async fn invalid_ids_are_rejected<F: RwFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    for bad in [String::new(), "x".repeat(MAX_ID_LEN + 1), "a/b".into()] {
        for access in [Access::Read, Access::Write] {
            assert!(
                matches!(a.lock(&bad, access, None).await, Err(LockError::InvalidId { .. })),
                "{}({bad:?})",
                access.name()
            );
            assert!(
                matches!(a.try_lock(&bad, access).await, Err(LockError::InvalidId { .. })),
                "try {}({bad:?})",
                access.name()
            );
        }
    }
}

/// `contenders` contenders on one lock, `rounds` asks each, `reads_percent` of them reads, with
/// random holds and pauses from `seed`; every hold checked ([`check_readers_writers`]).
pub async fn readers_writers_under_contention<F: RwFixture>(
    fx: Arc<F>,
    contenders: usize,
    rounds: usize,
    reads_percent: u32,
    seed: u64,
) -> RwStats {
    let log = Log::default();
    let mut tasks = Vec::new();
    for i in 0..contenders {
        let l = fx.contender(&format!("c{i}")).await;
        let log = log.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        tasks.push(crate::rt::spawn(async move {
            for _ in 0..rounds {
                let access = if rng.random_range(0..100) < reads_percent {
                    Access::Read
                } else {
                    Access::Write
                };
                let hold = Duration::from_millis(rng.random_range(1..20));
                let pause = Duration::from_millis(rng.random_range(0..10));
                let requested = crate::rt::now();
                let g = l.lock("rw-contended", access, None).await.expect("lock");
                hold_for(&log, g, access, requested, hold).await;
                crate::rt::sleep(pause).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    let stats = check_readers_writers(&log.holds()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stats.holds, contenders * rounds);
    stats
}

/// Run the reader-writer suite for a [`Contenders`] of `dyn RwLocker`: `$make` is an
/// `async fn(seed: u64) -> impl Contenders<dyn RwLocker>`, `$mode` a [`Mode`], `$seeds` how
/// many seeds the contention test runs, `$contenders` how many contenders it has.
#[macro_export]
macro_rules! rwlock_conformance_suite {
    ($mode:expr, $make:expr, seeds = $seeds:expr, contenders = $contenders:expr) => {
        mod rwlock_conformance {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;
            use $crate::conformance::rwlock as rw;

            #[test]
            fn readers_share_the_lock_and_a_writer_waits_for_all_of_them() {
                c::run($mode, 1, $make, rw::readers_share_and_writers_wait);
            }
            #[test]
            fn later_readers_pass_a_waiting_writer_only_if_the_policy_says_so() {
                c::run($mode, 2, $make, rw::later_readers_follow_the_writer_policy);
            }
            #[test]
            fn read_and_write_asks_time_out_and_leave_nothing_behind() {
                c::run($mode, 3, $make, rw::asks_time_out_cleanly);
            }
            #[test]
            fn a_write_ask_by_a_reader_is_refused_as_an_upgrade() {
                c::run($mode, 4, $make, rw::upgrade_is_refused);
            }
            #[test]
            fn readers_and_writers_cut_off_are_told_their_lease_is_lost() {
                c::run($mode, 5, $make, rw::lost_holders_are_told);
            }
            #[test]
            fn invalid_lock_ids_are_rejected_for_reads_and_writes() {
                c::run($mode, 6, $make, rw::invalid_ids_are_rejected);
            }
            #[test]
            fn writers_exclude_everyone_and_readers_share_over_many_seeds() {
                let mut total = c::rwlock::RwStats::default();
                for seed in 0..$seeds {
                    let s = c::run($mode, 1000 + seed, $make, |fx| async move {
                        rw::readers_writers_under_contention(fx, $contenders, 4, 75, 1000 + seed)
                            .await
                    });
                    total.holds += s.holds;
                    total.writes += s.writes;
                    total.max_readers = total.max_readers.max(s.max_readers);
                }
                assert!(total.max_readers >= 2, "readers never shared the lock: {total:?}");
                eprintln!("readers-writers: {total:?} over {} seeds, no writer overlapped", $seeds);
            }
        }
    };
}

/// The reader-writer suite on the embedded store for a Cassandra-model algorithm: `$build` is
/// a closure `|client: EmbeddedClient, ctx: ClientContext| -> Arc<dyn RwLocker>`. Every scenario
/// in simulated time, contention over 8 seeds with 32 contenders, and contention once more on
/// a multi-thread runtime in wall time.
#[macro_export]
macro_rules! embedded_rwlock_conformance_suite {
    ($build:expr) => {
        $crate::rwlock_conformance_suite!(
            $crate::conformance::Mode::Simulated,
            |seed| async move {
                $crate::conformance::EmbeddedContenders::<dyn $crate::rwlock::RwLocker>::new(
                    seed,
                    $crate::conformance::Mode::Simulated,
                    $build,
                )
            },
            seeds = 8,
            contenders = 32
        );

        mod rwlock_conformance_wall {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;

            #[test]
            fn no_writer_overlaps_with_real_parallelism_in_wall_time() {
                c::run(
                    c::Mode::Wall,
                    77,
                    |seed| async move {
                        c::EmbeddedContenders::<dyn $crate::rwlock::RwLocker>::new(
                            seed,
                            c::Mode::Wall,
                            $build,
                        )
                    },
                    |fx| async move {
                        let s = c::rwlock::readers_writers_under_contention(fx, 8, 3, 75, 77).await;
                        eprintln!("wall time, multi-thread: {s:?}, no writer overlapped");
                    },
                );
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(owner: &str, access: Access, from: u64, to: u64, token: u64) -> RwHold {
        let t0 = crate::rt::now();
        RwHold {
            lock_id: "l".into(),
            owner: owner.into(),
            access,
            requested: t0 + Duration::from_millis(from.saturating_sub(1)),
            granted: t0 + Duration::from_millis(from),
            released: t0 + Duration::from_millis(to),
            token,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_checker_refuses_writers_beside_anyone_and_shrinking_tokens() {
        use Access::{Read, Write};
        // Readers overlapping with equal tokens, then a writer with a greater one: fine.
        let ok =
            [hold("a", Read, 0, 10, 1), hold("b", Read, 5, 15, 1), hold("c", Write, 15, 20, 2)];
        let s = check_readers_writers(&ok).unwrap();
        assert_eq!((s.holds, s.writes, s.max_readers), (3, 1, 2));
        // A writer overlapping a reader.
        let bad = [hold("a", Read, 0, 10, 1), hold("w", Write, 9, 12, 2)];
        assert!(check_readers_writers(&bad).unwrap_err().contains("a writer overlapped"));
        // A writer after a reader with the reader's token.
        let bad = [hold("a", Read, 0, 10, 3), hold("w", Write, 10, 12, 3)];
        assert!(check_readers_writers(&bad).unwrap_err().contains("did not increase"));
        // A reader asked for after a reader ended, with a smaller token.
        let bad = [hold("a", Read, 0, 10, 3), hold("b", Read, 11, 12, 2)];
        assert!(check_readers_writers(&bad).is_err());
        // A reader asked for before a reader ended and granted after: its draw may have
        // raced the other's.
        let mut raced = hold("b", Read, 11, 12, 2);
        raced.requested = raced.granted - Duration::from_millis(5);
        assert!(check_readers_writers(&[hold("a", Read, 0, 10, 3), raced]).is_ok());
    }
}
