//! Scripted interleavings, each deterministic (simulated time, fixed latencies): why the
//! `Choosing` step is there, how ties are broken, what a crashed chooser costs, that waiting
//! cells are leased and abandoned ones removed, and the counterexample at consistency ONE.

use lock_bakery::{
    first_choosing, next_number, number_value, read_rows, turn, BakeryConfig, BakeryLocker, Turn,
};
use lock_bakery::{CHOOSING_FALSE, CHOOSING_TABLE, CHOOSING_TRUE, NUMBERS_TABLE};
use lock_core::context::ClientContext;
use lock_core::embedded::{EmbeddedClient, EmbeddedConfig, EmbeddedStore, LatencyModel};
use lock_core::time::TimestampGenerator;
use lock_core::{CellStore, CellWrite, Consistency, LockError, Locker, Slice};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

const L: &str = "printer";
const TTL: Duration = Duration::from_secs(10);

fn store(replicas: usize, rtt: Duration) -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig {
        replicas,
        latency: LatencyModel::new(rtt, Duration::ZERO),
        seed: 1,
        ..Default::default()
    })
}

fn locker(store: &EmbeddedStore, name: &str, c: Consistency) -> Arc<BakeryLocker<EmbeddedClient>> {
    let client = store.client(name);
    let ctx = ClientContext::new(name, client.clock(), 7).with_ttl(TTL).with_consistency(c);
    Arc::new(BakeryLocker::new(client, ctx, BakeryConfig::default()).unwrap())
}

/// A contender driven by hand, one store request at a time (it follows the protocol, or not).
struct Manual {
    client: EmbeddedClient,
    ts: TimestampGenerator,
}

impl Manual {
    fn new(store: &EmbeddedStore, name: &str) -> Self {
        let client = store.client(name);
        let ts = TimestampGenerator::new(client.clock());
        Manual { client, ts }
    }
    fn me(&self) -> String {
        self.client.id().to_string()
    }
    async fn put(&self, table: &str, value: &[u8]) {
        let w = CellWrite {
            column: self.me(),
            value: value.to_vec(),
            timestamp: self.ts.next(),
            ttl: Some(TTL),
        };
        self.client.write(table, L, &[w], Consistency::Quorum).await.unwrap();
    }
    async fn get(&self, table: &str) -> Vec<lock_core::Cell> {
        self.client.read(table, L, Slice::all(), Consistency::Quorum).await.unwrap()
    }
    async fn leave(&self) {
        for t in [CHOOSING_TABLE, NUMBERS_TABLE] {
            self.client
                .delete(t, L, &self.me(), self.ts.next(), Consistency::Quorum)
                .await
                .unwrap();
        }
    }
    /// Steps 6 and 7 once: would this contender enter now with `number`?
    async fn may_enter(&self, number: u64) -> bool {
        let choosing = self.get(CHOOSING_TABLE).await;
        let numbers = self.get(NUMBERS_TABLE).await;
        first_choosing(&choosing, &self.me()).is_none()
            && turn(&numbers, &self.me(), number) == Turn::Ours
    }
}

/// Waits until `owner`'s `Choosing` cell is true on replica 0: `owner` is past step 2.
async fn until_choosing(store: &EmbeddedStore, owner: &str) {
    loop {
        let row = store.inspect_replica(0, CHOOSING_TABLE, L).unwrap();
        if row.iter().any(|c| c.column == owner && c.value == CHOOSING_TRUE) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The interleaving both `Choosing` scenarios start from: `b` asks for the lock and is
/// choosing; `a` is a manual contender that has done nothing yet.
async fn b_choosing_then_a(
    store: &EmbeddedStore,
) -> (Manual, tokio::task::JoinHandle<Result<lock_core::LockGuard, LockError>>) {
    let b = locker(store, "b", Consistency::Quorum);
    let lock_b = tokio::spawn(async move { b.lock(L, None).await });
    until_choosing(store, "b").await;
    (Manual::new(store, "a"), lock_b)
}

/// Lamport's reason for `Choosing`, on the store: `a` reads `Numbers` before `b`'s number is
/// there, so both draw 1, and `a` wins the tie. If `a` skipped step 2, `b` (which cannot see
/// `a` at all) enters, and then `a`, writing its 1 late, finds itself first and enters too.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn without_choosing_a_late_drawer_enters_beside_the_holder() {
    // 6 ms round trips on one replica: a request applies 3 ms after it starts.
    let store = store(1, Duration::from_millis(6));
    let (a, lock_b) = b_choosing_then_a(&store).await;
    // `a` draws without announcing itself: it reads Numbers before b's number lands.
    let n_a = next_number(&a.get(NUMBERS_TABLE).await, "a");
    assert_eq!(n_a, 1);
    let guard_b = lock_b.await.unwrap().expect("b sees nobody and enters");
    let rows = read_rows(&store, L, Consistency::All).await.unwrap();
    assert_eq!(rows.numbers, [("b".to_string(), Some(1))]);
    a.put(NUMBERS_TABLE, &number_value(n_a)).await;
    assert!(a.may_enter(n_a).await, "(1, a) < (1, b): a enters while b holds the lock");
    guard_b.release().await.unwrap();
}

/// The same interleaving with step 2 done: `b`'s step 6 finds `a` choosing and waits; once
/// `a`'s number is there, `(1, a) < (1, b)` keeps `b` waiting until `a` leaves.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn with_choosing_the_late_drawer_is_waited_for() {
    let store = store(1, Duration::from_millis(6));
    let (a, lock_b) = b_choosing_then_a(&store).await;
    a.put(CHOOSING_TABLE, CHOOSING_TRUE).await;
    let n_a = next_number(&a.get(NUMBERS_TABLE).await, "a");
    assert_eq!(n_a, 1, "a read Numbers before b's number landed");
    // A slow chooser: b has its number by now and must wait for a at step 6.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!lock_b.is_finished(), "b entered while a was choosing");
    let rows = read_rows(&store, L, Consistency::All).await.unwrap();
    assert_eq!(rows.numbers, [("b".to_string(), Some(1))]);
    a.put(NUMBERS_TABLE, &number_value(n_a)).await;
    a.put(CHOOSING_TABLE, CHOOSING_FALSE).await;
    assert!(a.may_enter(n_a).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!lock_b.is_finished(), "b entered beside a");
    a.leave().await;
    let guard_b = tokio::time::timeout(Duration::from_millis(200), lock_b)
        .await
        .expect("b enters once a left")
        .unwrap()
        .unwrap();
    guard_b.release().await.unwrap();
}

/// Two contenders that choose at the same moment draw the same number; the smaller owner id
/// goes first, the other follows when it leaves.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn equal_numbers_are_ordered_by_owner_id() {
    let store = store(3, Duration::from_millis(2));
    let a = locker(&store, "a", Consistency::Quorum);
    let b = locker(&store, "b", Consistency::Quorum);
    let lock_b = tokio::spawn({
        let b = b.clone();
        async move { b.lock(L, None).await }
    });
    let guard_a = a.lock(L, None).await.unwrap();
    let rows = read_rows(&store, L, Consistency::All).await.unwrap();
    assert_eq!(
        rows.numbers,
        [("a".to_string(), Some(1)), ("b".to_string(), Some(1))],
        "both drew 1"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!lock_b.is_finished(), "(1, b) entered before (1, a) left");
    let token_a = guard_a.token();
    guard_a.release().await.unwrap();
    let guard_b = tokio::time::timeout(Duration::from_millis(100), lock_b)
        .await
        .expect("b follows")
        .unwrap()
        .unwrap();
    assert!(guard_b.token() > token_a);
    guard_b.release().await.unwrap();
}

/// A contender that crashed between steps 2 and 5 leaves `Choosing = true` behind: nobody
/// can start choosing (step 1) until that cell's TTL runs out. Safe, but the lock is dead for
/// up to one TTL, as it is after a crashed holder.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_crashed_chooser_blocks_the_lock_until_its_ttl() {
    let store = store(3, Duration::from_millis(1));
    let ghost = Manual::new(&store, "ghost");
    let a = locker(&store, "a", Consistency::Quorum);
    let crashed = Instant::now();
    ghost.put(CHOOSING_TABLE, CHOOSING_TRUE).await;
    assert!(a.try_lock(L).await.unwrap().is_none());
    assert!(matches!(
        a.lock(L, Some(Duration::from_secs(1))).await,
        Err(LockError::Timeout { .. })
    ));
    let rows = read_rows(&store, L, Consistency::All).await.unwrap();
    assert_eq!(
        rows.choosing,
        [("ghost".to_string(), true)],
        "a timed out at step 1, before writing"
    );
    let guard = a.lock(L, None).await.unwrap();
    let waited = crashed.elapsed();
    eprintln!("a crashed chooser blocked the lock for {waited:?} (TTL {TTL:?})");
    assert!(waited >= TTL && waited <= TTL + Duration::from_millis(100), "{waited:?}");
    guard.release().await.unwrap();
}

/// A waiter's cells are leased like a holder's: its number outlives the TTL while it waits,
/// and a timed-out waiter takes both its cells away.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn waiting_numbers_are_renewed_and_abandoned_ones_removed() {
    let store = store(3, Duration::from_millis(1));
    let a = locker(&store, "a", Consistency::Quorum);
    let b = locker(&store, "b", Consistency::Quorum);
    let c = locker(&store, "c", Consistency::Quorum);
    let guard_a = a.lock(L, None).await.unwrap();
    let lock_b = tokio::spawn({
        let b = b.clone();
        async move { b.lock(L, None).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let lock_c = tokio::spawn({
        let c = c.clone();
        async move { c.lock(L, Some(Duration::from_secs(1))).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rows = read_rows(&store, L, Consistency::All).await.unwrap();
    assert_eq!(
        rows.numbers,
        [("a".to_string(), Some(1)), ("b".to_string(), Some(2)), ("c".to_string(), Some(3))],
        "{rows:?}"
    );
    assert!(matches!(lock_c.await.unwrap(), Err(LockError::Timeout { .. })));
    tokio::time::sleep(TTL * 3).await;
    let rows = read_rows(&store, L, Consistency::All).await.unwrap();
    assert_eq!(
        rows.numbers,
        [("a".to_string(), Some(1)), ("b".to_string(), Some(2))],
        "after 3 x TTL: {rows:?}"
    );
    assert_eq!(rows.choosing, [("a".to_string(), false), ("b".to_string(), false)]);
    assert!(b.try_lock(L).await.is_ok_and(|g| g.is_none()));
    guard_a.release().await.unwrap();
    let guard_b = tokio::time::timeout(Duration::from_millis(100), lock_b)
        .await
        .expect("b enters")
        .unwrap()
        .unwrap();
    assert!(!guard_b.is_lost());
    guard_b.release().await.unwrap();
    assert!(read_rows(&store, L, Consistency::All).await.unwrap().is_empty());
}

/// The seed asks for QUORUM, and this is why. At ONE, `a` enters while two replicas are down,
/// so its cells reach one replica only; that replica then goes down and the other two come
/// back (no hinted handoff: they never got `a`'s cells). `b`'s reads find both rows empty, it
/// draws 1 and enters beside `a`. At QUORUM `a` cannot write with two replicas down, and with
/// one down at a time every read meets a replica that holds `a`'s number.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn consistency_one_admits_two_holders_when_reads_miss_the_holders_replica() {
    let s = store(3, Duration::ZERO);
    let a = locker(&s, "a", Consistency::One);
    let b = locker(&s, "b", Consistency::One);
    s.stop_replica(1);
    s.stop_replica(2);
    let guard_a = a.lock(L, None).await.expect("ONE needs one replica");
    s.start_replica(1);
    s.start_replica(2);
    s.stop_replica(0);
    let guard_b = b.lock(L, Some(Duration::from_secs(1))).await.expect("b's reads miss a's cells");
    assert_eq!(
        (guard_a.token(), guard_b.token()),
        (1, 1),
        "the fence row is stale too: both hold token 1"
    );
    drop((guard_a, guard_b));

    let s = store(3, Duration::ZERO);
    let a = locker(&s, "a", Consistency::Quorum);
    let b = locker(&s, "b", Consistency::Quorum);
    s.stop_replica(1);
    s.stop_replica(2);
    assert!(
        matches!(a.lock(L, None).await, Err(LockError::Store { .. })),
        "QUORUM refuses to write to one replica"
    );
    s.start_replica(1);
    let guard_a = a.lock(L, None).await.unwrap();
    s.start_replica(2);
    s.stop_replica(0);
    assert!(
        matches!(b.lock(L, Some(Duration::from_secs(1))).await, Err(LockError::Timeout { .. })),
        "replica 1 holds a's number"
    );
    guard_a.release().await.unwrap();
}
