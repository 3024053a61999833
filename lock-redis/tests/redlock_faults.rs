//! Redlock under master faults, on five real masters of its own per test (a fault would
//! disturb the binary's other tests):
//!
//! - one master killed in the middle of a contended run: mutual exclusion holds (the doc's
//!   claim, and the literature's: a minority of dead masters costs votes, not safety);
//! - the literature's finding (Kleppmann, "How to do distributed locking", 2016): a master
//!   restarted **without its data** within the lock's validity lets a second client take a
//!   majority while the first still holds the lock. The test asserts that the overlap
//!   happens; the crate docs explain it ("Findings");
//! - the same restart **with** its data (append-only file, fsync always): no second holder;
//! - the fenced variant in the same scenario: its token orders the two holders when the
//!   second one's read majority reaches a master that kept the first one's token, and ties
//!   when the wiped master is the only one the two majorities share;
//! - a master paused past the master timeout while its script cache is empty: the release's
//!   delete there is refused `NOSCRIPT` after the timeout, and still loads the script and
//!   deletes the key.
//!
//! Run with `--nocapture` to see the overlaps measured.

use crate::redlock_support;

use lock_core::conformance::{assert_exclusive, contended_holds, Fixture};
use lock_core::{LeaseState, LockGuard, Locker};
use lock_redis::{RedisConnectConfig, RedisMasters, RedlockVariant, NO_FENCING_TOKEN};
use redlock_support::{assert_no_overlap, blocking, config, RedlockFixture, MASTERS};
use std::sync::Arc;
use std::time::Duration;
use test_servers::{redis_call, RedisCluster, Reply};
use tokio::time::Instant;

fn addrs(cluster: &RedisCluster) -> Vec<std::net::SocketAddr> {
    (0..MASTERS).map(|i| cluster.client_addr(i)).collect()
}

/// Eight contenders, four grants each, while master 2 is killed 150 ms into the run.
async fn contended_with_a_master_killed(
    variant: RedlockVariant,
) -> Vec<lock_core::conformance::Hold> {
    let cluster = Arc::new(RedisCluster::masters(MASTERS, false));
    let fx = Arc::new(RedlockFixture::new(addrs(&cluster), "killed", variant));
    let killer = {
        let cluster = cluster.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(150)).await;
            tokio::task::spawn_blocking(move || cluster.kill(2)).await.expect("kill");
        })
    };
    let holds = contended_holds(fx, 8, 4, 2101).await;
    killer.await.expect("killer");
    assert!(!cluster.is_running(2), "the master was killed during the run");
    holds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_master_killed_keeps_mutual_exclusion() {
    let holds =
        contended_with_a_master_killed(RedlockVariant::Plain(config(Duration::from_secs(2), 2101)))
            .await;
    assert!(holds.iter().all(|h| h.token == NO_FENCING_TOKEN));
    let n = assert_no_overlap(&holds);
    eprintln!("one master of five killed: {n} holds, no overlap");
    assert_eq!(n, 32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_master_killed_keeps_fencing_tokens_increasing() {
    let variant = RedlockVariant::Fenced(config(Duration::from_secs(2), 2102));
    let n = assert_exclusive(&contended_with_a_master_killed(variant).await);
    eprintln!("one master of five killed, fenced: {n} holds, no overlap, tokens increasing");
}

/// The finding's setup: A reaches masters 0, 1, 2 only (3 and 4 are cut off from it, the
/// partition of the doc's failure model) and is granted by exactly that bare majority. Then
/// master 2 restarts, with or without its data, and B (reaching `b_reaches`) tries the lock.
struct Scenario {
    cluster: RedisCluster,
    fx: RedlockFixture,
    a: Arc<dyn Locker>,
    b: Arc<dyn Locker>,
    a_guard: LockGuard,
    /// When A's grant returned.
    a_granted: Instant,
}

const TTL: Duration = Duration::from_secs(3);

async fn a_holds_a_bare_majority(
    persistent: bool,
    variant: RedlockVariant,
    b_reaches: &[usize],
) -> Scenario {
    let cluster = RedisCluster::masters(MASTERS, persistent);
    let fx = RedlockFixture::new(addrs(&cluster), "restart", variant);
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    fx.cut("a", &[3, 4], true);
    let unreachable: Vec<usize> = (0..MASTERS).filter(|i| !b_reaches.contains(i)).collect();
    fx.cut("b", &unreachable, true);
    let a_guard = a.try_lock("res").await.expect("try_lock").expect("A granted by 0, 1, 2");
    let a_granted = Instant::now();
    Scenario { cluster, fx, a, b, a_guard, a_granted }
}

impl Scenario {
    /// Restart master 2 and say how long it took; the finding needs it within A's validity.
    fn restart_master_2(&self, with_data: bool) -> Duration {
        let start = Instant::now();
        blocking(|| match with_data {
            true => self.cluster.restart(2),
            false => self.cluster.restart_without_data(2),
        })
        .expect("restart master 2");
        let took = start.elapsed();
        assert!(
            self.a_granted.elapsed() < TTL / 2,
            "restart took {took:?}: A's validity must still be running for the finding"
        );
        took
    }

    /// B's attempt, retried for a while (its connection to master 2 breaks with the restart
    /// and is made again at the next request).
    async fn b_tries(&self) -> Option<LockGuard> {
        for _ in 0..10 {
            if let Ok(Some(g)) = self.b.try_lock("res").await {
                return Some(g);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_without_its_data_lets_a_second_client_in() {
    let variant = RedlockVariant::Plain(config(TTL, 2103));
    let s = a_holds_a_bare_majority(false, variant, &[0, 1, 2, 3, 4]).await;
    let took = s.restart_master_2(false);
    let b_guard = s.b_tries().await.expect("B granted by 2 (empty after the restart), 3 and 4");
    let b_granted = Instant::now();
    // The overlap: A still holds by its own reckoning, and will for the rest of its validity.
    assert_eq!(s.a_guard.lease_state(), LeaseState::Held, "A must still believe it holds");
    let lost = tokio::time::timeout(TTL * 2, s.a_guard.lost()).await.expect("A is told, later");
    let overlap = b_granted.elapsed();
    eprintln!(
        "restart without data took {took:?}; B granted {:?} after A; two holders for {overlap:?}, \
         until A was told: {lost}",
        b_granted - s.a_granted
    );
    assert!(overlap >= Duration::from_millis(500), "overlap of only {overlap:?}");
    assert!(b_guard.lease_state() == LeaseState::Held, "B holds 2, 3 and 4 throughout");
    drop(s.a);
    b_guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_with_its_data_keeps_the_second_client_out() {
    let variant = RedlockVariant::Plain(config(TTL, 2104));
    let s = a_holds_a_bare_majority(true, variant, &[0, 1, 2, 3, 4]).await;
    s.restart_master_2(true);
    assert!(s.b_tries().await.is_none(), "master 2 kept A's key: B has only 3 and 4");
    assert_eq!(s.a_guard.lease_state(), LeaseState::Held);
    // Not released with `expect`: A reaches only 0, 1 and 2, and its first request to the
    // restarted master 2 fails on the broken connection, so a majority may not answer.
    drop(s.a_guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_tokens_order_the_two_holders_when_a_kept_token_is_read() {
    let variant = RedlockVariant::Fenced(config(TTL, 2105));
    let s = a_holds_a_bare_majority(false, variant, &[0, 1, 2, 3, 4]).await;
    s.restart_master_2(false);
    let b_guard = s.b_tries().await.expect("B granted by 2, 3 and 4");
    assert_eq!(s.a_guard.lease_state(), LeaseState::Held, "the lock overlaps all the same");
    // B's token read reached masters 0 and 1, which kept A's token: a fenced resource that
    // saw B's token refuses A's.
    assert!(b_guard.token() > s.a_guard.token(), "{} after {}", b_guard.token(), s.a_guard.token());
    drop(s.a_guard);
    b_guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_tokens_tie_when_the_wiped_master_is_all_the_majorities_share() {
    let variant = RedlockVariant::Fenced(config(TTL, 2106));
    // B reaches only 2, 3 and 4: its majorities share with A's only master 2.
    let s = a_holds_a_bare_majority(false, variant, &[2, 3, 4]).await;
    s.restart_master_2(false);
    let b_guard = s.b_tries().await.expect("B granted by 2, 3 and 4");
    assert_eq!(s.a_guard.lease_state(), LeaseState::Held);
    assert_eq!(
        b_guard.token(),
        s.a_guard.token(),
        "the token A wrote is gone with master 2's data: B draws it again"
    );
    drop(s.a_guard);
    let _ = s.fx;
    b_guard.release().await.expect("release");
}

/// A release whose delete on one master outlasts the master timeout still deletes the key
/// there. The master's script cache is empty (a restart or `SCRIPT FLUSH` empties it), so its
/// first compare-and-delete is refused `NOSCRIPT` and must be loaded and called again; the
/// master is paused past the timeout, so the refusal comes after it. A delete cut off at the
/// timeout never sends the second call, and the key stays until its TTL: a lock whose keys
/// stay on a majority that way is shut for a TTL with nobody holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_outlasting_the_master_timeout_still_runs_to_its_end() {
    // Long enough that only a delete can remove the key before the check.
    const LONG_TTL: Duration = Duration::from_secs(30);
    let cluster = blocking(|| RedisCluster::masters(MASTERS, false));
    let prefix = redlock_support::unique_prefix("late-delete");
    let connect = RedisConnectConfig { key_prefix: prefix.clone(), ..Default::default() };
    let masters = RedisMasters::connect_with(&cluster.urls(), connect).await.expect("connect");
    let locker = masters.redlock("a", config(LONG_TTL, 2107)).expect("redlock");
    let guard = locker.lock("res", Some(Duration::from_secs(10))).await.expect("granted");
    let (slow, key) = (cluster.client_addr(4), format!("{prefix}res"));
    blocking(|| {
        assert_eq!(redis_call(slow, &["EXISTS", &key]).expect("EXISTS"), Reply::Int(1));
        redis_call(slow, &["SCRIPT", "FLUSH"]).expect("SCRIPT FLUSH");
        // Longer than the tests' 250 ms master timeout.
        redis_call(slow, &["CLIENT", "PAUSE", "1000", "ALL"]).expect("CLIENT PAUSE");
    });
    guard.release().await.expect("four masters answered in time");
    // The pause ends, the refused call is answered, and the script is loaded and called.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let exists = blocking(|| redis_call(slow, &["EXISTS", &key])).expect("EXISTS");
        if exists == Reply::Int(0) {
            break;
        }
        assert!(Instant::now() < deadline, "the key outlived its release on master 4: {exists:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
