//! The election's conformance suite: at most one leader at any instant and terms rising,
//! the leader and its value known to everyone, observers told every change in order, a
//! candidacy that times out leaving nothing behind, a leader cut off told so and replaced,
//! and bad input refused.
//!
//! An implementation runs it with one line:
//! [`election_conformance_suite!`](crate::election_conformance_suite) for any [`Contenders`]
//! of `dyn Elector`.

#[allow(unused_imports)]
use super::Mode;
use super::{check_exclusive, Contenders, Hold};
use crate::election::{Elector, Leader, MAX_VALUE_LEN};
use crate::lock::{LockError, MAX_ID_LEN};
use crate::usage::UsageError;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Handles of an election, one per contender.
pub trait ElectionFixture: Contenders<dyn Elector> {}
impl<T: Contenders<dyn Elector>> ElectionFixture for T {}

/// Wait until `check` holds of `election`'s leader as `e` sees it, for up to `within`.
async fn leader_becomes(
    e: &dyn Elector,
    election: &str,
    within: Duration,
    check: impl Fn(&Option<Leader>) -> bool,
) -> Option<Leader> {
    let until = crate::rt::now() + within;
    loop {
        let leader = e.leader(election).await.expect("leader");
        if check(&leader) {
            return leader;
        }
        assert!(crate::rt::now() < until, "the leader of {election:?} stayed {leader:?}");
        crate::rt::sleep(Duration::from_millis(50)).await;
    }
}

/// The observer's next change, within `within`.
async fn next_change(observer: &mut crate::election::Observer, within: Duration) -> Option<Leader> {
    crate::rt::timeout(within, observer.changed())
        .await
        .expect("a change is observed in time")
        .expect("observation goes on")
}

/// Everyone sees who leads and what it announced: nobody at first, then the candidate with
/// its value and term, then its proclamation, then nobody once it resigned.
pub async fn the_leader_and_its_value_are_known<F: ElectionFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let within = fx.notice_slack() * 2;
    assert_eq!(b.leader("el-known").await.expect("leader"), None);
    let mut l = a.campaign("el-known", b"a:1".to_vec(), None).await.expect("campaign");
    assert_eq!((l.election(), l.owner(), l.value()), ("el-known", a.owner(), &b"a:1"[..]));
    let seen = leader_becomes(&*b, "el-known", within, |l| l.is_some()).await;
    let expected = Leader { owner: a.owner().into(), value: b"a:1".to_vec(), term: l.term() };
    assert_eq!(seen, Some(expected));
    l.proclaim(b"a:2".to_vec()).await.expect("proclaim");
    assert_eq!(l.value(), b"a:2");
    leader_becomes(&*b, "el-known", within, |x| x.as_ref().is_some_and(|x| x.value == b"a:2"))
        .await;
    l.resign().await.expect("resign");
    leader_becomes(&*b, "el-known", within, Option::is_none).await;
}

/// An observer is told every change, in order, once each: nobody, the first leader, its
/// proclamation, nobody, the second leader, nobody.
pub async fn observers_see_every_change_in_order<F: ElectionFixture>(fx: Arc<F>) {
    let o = fx.contender("observer").await;
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let mut observer = o.observe("el-watched").await.expect("observe");
    let within = fx.notice_slack() * 2;
    assert_eq!(next_change(&mut observer, within).await, None, "first: nobody leads");
    let pause = Duration::from_millis(300);
    let mut la = a.campaign("el-watched", b"a:1".to_vec(), None).await.expect("campaign");
    let lead = |e: &Arc<dyn Elector>, value: &[u8], term| Leader {
        owner: e.owner().into(),
        value: value.to_vec(),
        term,
    };
    assert_eq!(next_change(&mut observer, within).await, Some(lead(&a, b"a:1", la.term())));
    crate::rt::sleep(pause).await;
    la.proclaim(b"a:2".to_vec()).await.expect("proclaim");
    assert_eq!(next_change(&mut observer, within).await, Some(lead(&a, b"a:2", la.term())));
    crate::rt::sleep(pause).await;
    let first_term = la.term();
    la.resign().await.expect("resign");
    assert_eq!(next_change(&mut observer, within).await, None, "after the resignation: nobody");
    let lb = b.campaign("el-watched", b"b:1".to_vec(), None).await.expect("campaign");
    assert!(lb.term() > first_term, "term {} after {first_term}", lb.term());
    assert_eq!(next_change(&mut observer, within).await, Some(lead(&b, b"b:1", lb.term())));
    crate::rt::sleep(pause).await;
    lb.resign().await.expect("resign");
    assert_eq!(
        next_change(&mut observer, within).await,
        None,
        "after the last resignation: nobody"
    );
    let quiet = crate::rt::timeout(fx.notice_slack(), observer.changed()).await;
    assert!(quiet.is_err(), "a change reported twice or made up: {quiet:?}");
}

/// A candidacy times out while another leads ([`LockError::Timeout`]) and leaves nothing
/// that delays the next candidate once the leader resigns.
pub async fn a_candidacy_times_out_cleanly<F: ElectionFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let c = fx.contender("c").await;
    let l = a.campaign("el-timed", b"a".to_vec(), None).await.expect("campaign");
    let timeout = Duration::from_millis(1500);
    match b.campaign("el-timed", b"b".to_vec(), Some(timeout)).await {
        Err(LockError::Timeout { waited, .. }) => assert!(waited >= timeout, "{waited:?}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    let term = l.term();
    l.resign().await.expect("resign");
    let start = crate::rt::now();
    let lc = crate::rt::timeout(fx.notice_slack() * 2, c.campaign("el-timed", b"c".to_vec(), None))
        .await
        .expect("a timed-out candidacy left something that blocks the election")
        .expect("campaign");
    assert!(crate::rt::elapsed(start) < fx.ttl(), "the next leader waited for leftovers to expire");
    assert!(lc.term() > term);
    lc.resign().await.expect("resign");
}

/// A leader cut off from the backend is told within about one TTL; another candidate is
/// elected with a greater term; the deposed leader's proclamation and resignation are
/// refused ([`UsageError::NotLeader`]).
pub async fn a_lost_leadership_is_signalled_and_replaced<F: ElectionFixture>(fx: Arc<F>) {
    let ttl = fx.ttl();
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let mut l = a.campaign("el-lossy", b"a".to_vec(), None).await.expect("campaign");
    let cut = crate::rt::now();
    fx.cut_off("a").await;
    crate::rt::timeout(ttl * 2, l.lost()).await.expect("lost leadership not signalled");
    assert!(
        crate::rt::elapsed(cut) <= ttl + Duration::from_secs(1),
        "signalled after {:?}",
        crate::rt::elapsed(cut)
    );
    let lb = crate::rt::timeout(
        ttl * 2 + fx.notice_slack(),
        b.campaign("el-lossy", b"b".to_vec(), None),
    )
    .await
    .expect("a lost leader is not replaced")
    .expect("campaign");
    assert!(lb.term() > l.term(), "term {} after {}", lb.term(), l.term());
    let refused =
        |r: Result<(), LockError>| matches!(r, Err(LockError::Usage(UsageError::NotLeader { .. })));
    assert!(refused(l.proclaim(b"again".to_vec()).await), "a deposed leader proclaimed");
    assert!(refused(l.resign().await), "a deposed leader's resignation was taken");
    lb.resign().await.expect("resign");
}

/// A value too long and malformed ids are refused at once, and nothing is held after them.
pub async fn bad_input_is_refused<F: ElectionFixture>(fx: Arc<F>) {
    let a = fx.contender("a").await;
    let b = fx.contender("b").await;
    let start = crate::rt::now();
    let long = vec![b'x'; MAX_VALUE_LEN + 1];
    match a.campaign("el-bad", long, Some(Duration::from_secs(30))).await {
        Err(LockError::Usage(UsageError::ValueTooLarge { len, max })) => {
            assert_eq!((len, max), (MAX_VALUE_LEN + 1, MAX_VALUE_LEN))
        }
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
    assert!(crate::rt::elapsed(start) < Duration::from_secs(1), "the refusal must not wait");
    let l = crate::rt::timeout(
        fx.notice_slack(),
        b.campaign("el-bad", vec![b'y'; MAX_VALUE_LEN], None),
    )
    .await
    .expect("nothing is held after a refused candidacy")
    .expect("campaign with the longest value allowed");
    l.resign().await.expect("resign");
    for bad in [String::new(), "x".repeat(MAX_ID_LEN + 1), "a/b".into()] {
        let invalid = |r: &Result<(), LockError>| matches!(r, Err(LockError::InvalidId { .. }));
        assert!(invalid(&a.campaign(&bad, vec![], None).await.map(|_| ())), "campaign({bad:?})");
        assert!(invalid(&a.leader(&bad).await.map(|_| ())), "leader({bad:?})");
        assert!(invalid(&a.observe(&bad).await.map(|_| ())), "observe({bad:?})");
    }
}

/// `contenders` candidates of one election, `rounds` leaderships each, random terms and
/// pauses from `seed`: no two leaderships overlap and terms rise ([`check_exclusive`]).
pub async fn one_leader_at_a_time<F: ElectionFixture>(
    fx: Arc<F>,
    contenders: usize,
    rounds: usize,
    seed: u64,
) -> usize {
    let log = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..contenders {
        let e = fx.contender(&format!("c{i}")).await;
        let log = log.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        tasks.push(crate::rt::spawn(async move {
            for _ in 0..rounds {
                let lead = Duration::from_millis(rng.random_range(1..20));
                let pause = Duration::from_millis(rng.random_range(0..10));
                let l = e.campaign("el-contended", e.owner().as_bytes().to_vec(), None).await;
                let l = l.expect("campaign");
                let granted = crate::rt::now();
                crate::rt::sleep(lead).await;
                log.lock().unwrap_or_else(|e| e.into_inner()).push(Hold {
                    lock_id: l.election().to_string(),
                    owner: l.owner().to_string(),
                    granted,
                    released: crate::rt::now(),
                    token: l.term(),
                });
                l.resign().await.expect("resign");
                crate::rt::sleep(pause).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("candidate task");
    }
    let holds = log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let n = check_exclusive(&holds).unwrap_or_else(|e| panic!("two leaders at once: {e}"));
    assert_eq!(n, contenders * rounds);
    n
}

/// Run the election suite for a [`Contenders`] of `dyn Elector`: `$make` is an
/// `async fn(seed: u64) -> impl Contenders<dyn Elector>`, `$mode` a [`Mode`], `$seeds` how
/// many seeds the contention test runs, `$contenders` how many candidates it has.
#[macro_export]
macro_rules! election_conformance_suite {
    ($mode:expr, $make:expr, seeds = $seeds:expr, contenders = $contenders:expr) => {
        mod election_conformance {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;
            use $crate::conformance::election as el;

            #[test]
            fn the_leader_and_its_value_are_known_to_everyone() {
                c::run($mode, 1, $make, el::the_leader_and_its_value_are_known);
            }
            #[test]
            fn observers_see_every_change_in_order_once() {
                c::run($mode, 2, $make, el::observers_see_every_change_in_order);
            }
            #[test]
            fn a_candidacy_times_out_and_leaves_nothing_behind() {
                c::run($mode, 3, $make, el::a_candidacy_times_out_cleanly);
            }
            #[test]
            fn a_leader_cut_off_is_told_and_replaced_with_a_greater_term() {
                c::run($mode, 4, $make, el::a_lost_leadership_is_signalled_and_replaced);
            }
            #[test]
            fn values_too_long_and_invalid_ids_are_refused() {
                c::run($mode, 5, $make, el::bad_input_is_refused);
            }
            #[test]
            fn at_most_one_leader_at_a_time_over_many_seeds() {
                let mut n = 0;
                for seed in 0..$seeds {
                    n += c::run($mode, 1000 + seed, $make, |fx| async move {
                        el::one_leader_at_a_time(fx, $contenders, 4, 1000 + seed).await
                    });
                }
                eprintln!("elections: {n} leaderships over {} seeds, never two at once", $seeds);
            }
        }
    };
}
