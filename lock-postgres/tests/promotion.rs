//! A failover to a promoted streaming replica: advisory locks are session state, never
//! WAL-logged, so the promoted replica has none of the old primary's and grants the lock at
//! once to a second locker, while the first still believes it holds it until its next ping
//! fails. That is unsafe by design; what keeps writers apart is the fencing token, and these
//! tests measure what the token does.
//!
//! How the fencing sequence behaves: `nextval` WAL-logs the sequence 32 values ahead of the
//! value it hands out (and again once those are used, or after a checkpoint) and hands out
//! the following ones without writing WAL. A standby that replayed that record continues
//! above every value the old primary could have handed out from it: the token after
//! promotion is about 33 above. A standby that had not received it (asynchronous
//! replication, the stream behind) continues from what it had, and hands out the same
//! tokens again. With synchronous replication, the transaction that drew a logged value
//! does not return before the standby has the record, so the token after a promotion is
//! always higher.

use crate::support;
use lock_core::{LockGuard, Locker};
use lock_postgres::PgBackend;
use std::time::{Duration, Instant};
use test_servers::{PostgresPair, Replication};

/// How the stream stands when the primary is killed.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stream {
    /// The standby has replayed everything before the kill.
    CaughtUp,
    /// The primary is killed right after the grant, without waiting for the standby.
    Racing,
    /// The standby stopped streaming before the grant.
    HeldBack,
    /// A first grant and release drew a token (logging the sequence 32 ahead), the standby
    /// replayed that, then stopped streaming before the grant.
    HeldBackAfterADraw,
}

/// What one failover gave.
struct Failover {
    first: u64,
    second: u64,
    kill_to_grant: Duration,
    first_told_after: Option<Duration>,
}

/// Hold a lock on the primary, kill it, promote the standby, take the lock there.
async fn failover(replication: Replication, stream: Stream) -> Failover {
    let ttl = Duration::from_secs(3);
    let pair = tokio::task::spawn_blocking(move || PostgresPair::start(replication)).await.unwrap();
    let sequence = support::unique_sequence("promo");
    let a_backend = PgBackend::connect(&pair.primary_url(), support::config(ttl, &sequence))
        .await
        .expect("connect to the primary");
    let a = a_backend.locker("promo-a").unwrap();
    if stream == Stream::HeldBackAfterADraw {
        a.lock("promoted", None).await.expect("lock").release().await.expect("release");
    }
    // The sequence exists on the standby before anything else happens.
    let pair = blocking(pair, |p| p.wait_caught_up(Duration::from_secs(10)).unwrap()).await;
    let pair = match stream {
        Stream::HeldBack | Stream::HeldBackAfterADraw => {
            blocking(pair, |p| p.hold_replication().unwrap()).await
        }
        _ => pair,
    };
    let held = a.lock("promoted", None).await.expect("lock on the primary");
    let mut pair = match stream {
        Stream::CaughtUp => {
            blocking(pair, |p| p.wait_caught_up(Duration::from_secs(10)).unwrap()).await
        }
        _ => pair,
    };

    let killed = Instant::now();
    pair = blocking(pair, |p| p.kill_primary()).await;
    let pair = blocking(pair, |p| {
        let took = p.promote().expect("promote");
        eprintln!("promotion took {took:?}");
    })
    .await;
    let b_backend = PgBackend::connect(&pair.replica_url(), support::config(ttl, &sequence))
        .await
        .expect("connect to the promoted replica");
    let b = b_backend.locker("promo-b").unwrap();
    let second: LockGuard = tokio::time::timeout(Duration::from_secs(5), b.try_lock("promoted"))
        .await
        .expect("an answer from the promoted replica")
        .expect("try_lock")
        .expect("the lock is free on the promoted replica at once");
    let kill_to_grant = killed.elapsed();
    let first_told_after = tokio::time::timeout(Duration::from_millis(10), held.lost())
        .await
        .ok()
        .map(|_| killed.elapsed());
    let _ = tokio::time::timeout(ttl, held.lost()).await.expect("the first holder is told");
    let first_told = killed.elapsed();
    let result =
        Failover { first: held.token(), second: second.token(), kill_to_grant, first_told_after };
    eprintln!(
        "{replication:?} {stream:?}: kill -> second grant {:?}; first holder told lost {}, \
         {first_told:?} after the kill; token on the primary {} -> on the promoted replica {}",
        result.kill_to_grant,
        match result.first_told_after {
            Some(_) => "before the second grant",
            None => "after the second grant (two holders meanwhile)",
        },
        result.first,
        result.second
    );
    second.release().await.expect("release");
    drop(held);
    tokio::task::spawn_blocking(move || drop(pair)).await.unwrap();
    result
}

/// Run `f` on `pair` on a blocking thread; the pair back.
async fn blocking(
    mut pair: PostgresPair,
    f: impl FnOnce(&mut PostgresPair) + Send + 'static,
) -> PostgresPair {
    tokio::task::spawn_blocking(move || {
        f(&mut pair);
        pair
    })
    .await
    .unwrap()
}

/// Asynchronous replication, the standby caught up before the kill: the lock is granted on
/// the promoted replica at once, and the token continues above (the record logged 32 ahead
/// had arrived).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_caught_up_the_lock_is_free_at_once_and_the_token_continues_above() {
    let run = failover(Replication::Async, Stream::CaughtUp).await;
    assert!(run.kill_to_grant < Duration::from_secs(5), "{:?}", run.kill_to_grant);
    assert!(run.second > run.first, "token {} after {}", run.second, run.first);
    assert!(run.second >= run.first + 32, "logged 32 ahead: {} after {}", run.second, run.first);
}

/// Asynchronous replication, the primary killed right after the grant: the grant's WAL is
/// flushed locally and the sender woken before `lock` returns, so on loopback the standby
/// has it and the token continues above (observed on every run; a slower network would
/// lose it, as [`async_held_back_the_promoted_replica_hands_out_the_same_token_again`]
/// shows).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_racing_the_token_continues_above_on_loopback() {
    let run = failover(Replication::Async, Stream::Racing).await;
    assert!(run.second > run.first, "token {} after {}", run.second, run.first);
}

/// UNSAFE, asserted as such: asynchronous replication with the standby behind (its stream
/// stopped before the grant): the promoted replica never saw the draw, so it hands out the
/// same token again: two holders of one lock with equal tokens, which no fencing check can
/// tell apart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_held_back_the_promoted_replica_hands_out_the_same_token_again() {
    let run = failover(Replication::Async, Stream::HeldBack).await;
    assert!(run.second <= run.first, "token {} after {}: not reused", run.second, run.first);
}

/// Asynchronous replication with the standby behind, but the grant's draw came from values
/// the sequence had already logged ahead (and the standby had replayed): the promoted
/// replica continues above, although it never saw this draw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_held_back_after_a_logged_draw_the_token_still_continues_above() {
    let run = failover(Replication::Async, Stream::HeldBackAfterADraw).await;
    assert_eq!(run.first, 2, "the second draw");
    assert!(run.second > run.first, "token {} after {}", run.second, run.first);
}

/// Synchronous replication, the primary killed right after the grant: the draw's commit
/// waited for the standby, so the token on the promoted replica is higher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_the_token_after_promotion_is_higher() {
    let run = failover(Replication::Sync, Stream::Racing).await;
    assert!(run.second > run.first, "token {} after {}", run.second, run.first);
}
