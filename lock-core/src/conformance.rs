//! The conformance suite every lock algorithm runs (feature `conformance`).
//!
//! An algorithm crate gets the whole suite with one line in a test file:
//!
//! ```text
//! lock_core::embedded_conformance_suite!(|client, ctx| std::sync::Arc::new(MyLocker::new(client, ctx)));
//! ```
//!
//! which runs every scenario on the embedded store in simulated time over seeded jitter, and
//! mutual exclusion once more on a multi-thread runtime in wall time. Backends with their own
//! server implement [`Fixture`] and use [`conformance_suite!`](crate::conformance_suite).
//!
//! The scenarios, each named after the invariant it checks:
//! - the thesis's four (section 5.5): [`one_lock_one_holder`], [`many_locks_many_holders`],
//!   [`lease_outlives_ttl_by_renewal`], [`crashed_holder_frees_lock_after_ttl`];
//! - [`soft_lock_is_immediate_and_never_shared`], [`mandatory_lock_times_out_cleanly`],
//!   [`lost_lease_is_signalled`], [`fencing_tokens_strictly_increase`],
//!   [`invalid_ids_are_rejected`];
//! - [`mutual_exclusion_under_contention`]: 64 contenders with random hold times, every hold
//!   interval recorded and checked for overlap.
//!
//! The other primitives have suites of their own, in the same shape, over [`Contenders`] (a
//! [`Fixture`] for any primitive): [`rwlock`] for reader-writer locks and [`semaphore`] for
//! semaphores, each with a macro for any backend and one for the embedded store, and
//! [`election`] for leader elections.

use crate::context::ClientContext;
use crate::embedded::{EmbeddedClient, EmbeddedStore};
use crate::lock::{LockError, LockGuard, Locker};
use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

pub mod contenders;
pub mod election;
pub mod rwlock;
pub mod semaphore;
pub use contenders::{Contenders, EmbeddedContenders};

/// How a test's runtime keeps time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Current-thread runtime with a paused clock: free, reproducible.
    Simulated,
    /// Multi-thread runtime in wall time: real parallelism, real servers.
    Wall,
}

/// A backend plus an algorithm, able to hand out one locker per contender.
#[async_trait]
pub trait Fixture: Send + Sync + 'static {
    /// A locker for contender `name`, with its own client (connection, session) to the backend.
    async fn locker(&self, name: &str) -> Arc<dyn Locker>;
    /// Cut contender `name` off from the backend, as a crash or partition would: from now on
    /// its renewals and releases fail, and nothing it had is cleaned up by it.
    async fn cut_off(&self, name: &str);
    /// The lease TTL the lockers use (for ZooKeeper: the session timeout).
    fn ttl(&self) -> Duration;
    /// How time is kept.
    fn mode(&self) -> Mode;
    /// Extra time a waiter may need to notice a free lock (poll interval, backoff), used as
    /// slack in time-bounded assertions.
    fn notice_slack(&self) -> Duration {
        Duration::from_millis(1500)
    }
}

/// Build a runtime for `mode` and run `test` against a fresh fixture made from `seed`.
pub fn run<Fx, M, MF, T, TF, R>(mode: Mode, seed: u64, make: M, test: T) -> R
where
    Fx: Send + Sync + 'static,
    M: FnOnce(u64) -> MF,
    MF: Future<Output = Fx>,
    T: FnOnce(Arc<Fx>) -> TF,
    TF: Future<Output = R>,
{
    let rt = match mode {
        Mode::Simulated => {
            tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build()
        }
        Mode::Wall => {
            tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build()
        }
    }
    .expect("build a tokio runtime");
    rt.block_on(async move {
        let fx = Arc::new(make(seed).await);
        test(fx).await
    })
}

/// A hold of a lock, as seen by its holder: from the grant to the release call.
#[derive(Debug, Clone)]
pub struct Hold {
    /// Lock id.
    pub lock_id: String,
    /// Holder.
    pub owner: String,
    /// When `lock` returned.
    pub granted: Instant,
    /// When the holder called release.
    pub released: Instant,
    /// Fencing token of the grant.
    pub token: u64,
}

/// Every hold interval of a run.
#[derive(Debug, Default, Clone)]
pub struct HoldLog(Arc<Mutex<Vec<Hold>>>);

impl HoldLog {
    /// Record one hold.
    pub fn push(&self, hold: Hold) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(hold);
    }
    /// All holds so far.
    pub fn holds(&self) -> Vec<Hold> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Check that no two holds of one lock overlap and that fencing tokens of one lock strictly
/// increase in grant order; `Err` describes the first violation. `Ok` is the number of holds.
pub fn check_exclusive(holds: &[Hold]) -> Result<usize, String> {
    let mut by_lock: std::collections::BTreeMap<&str, Vec<&Hold>> = Default::default();
    for h in holds {
        by_lock.entry(&h.lock_id).or_default().push(h);
    }
    for (lock, mut hs) in by_lock {
        hs.sort_by_key(|h| (h.granted, h.released));
        for w in hs.windows(2) {
            if w[1].granted < w[0].released {
                return Err(format!(
                    "mutual exclusion violated on {lock}: {} held from {:?} to {:?}, {} granted at {:?}",
                    w[0].owner, w[0].granted, w[0].released, w[1].owner, w[1].granted
                ));
            }
            if w[1].token <= w[0].token {
                return Err(format!(
                    "fencing token did not increase on {lock}: {} got {} after {} got {}",
                    w[1].owner, w[1].token, w[0].owner, w[0].token
                ));
            }
        }
    }
    Ok(holds.len())
}

/// [`check_exclusive`], panicking on a violation.
pub fn assert_exclusive(holds: &[Hold]) -> usize {
    check_exclusive(holds).unwrap_or_else(|e| panic!("{e}"))
}

async fn hold_for(
    log: &HoldLog,
    guard: LockGuard,
    granted: Instant,
    hold: Duration,
) -> Result<(), LockError> {
    crate::rt::sleep(hold).await;
    log.push(Hold {
        lock_id: guard.lock_id().to_string(),
        owner: guard.owner().to_string(),
        granted,
        released: crate::rt::now(),
        token: guard.token(),
    });
    guard.release().await
}

fn wall_scale(mode: Mode, sim: usize, wall: usize) -> usize {
    match mode {
        Mode::Simulated => sim,
        Mode::Wall => wall,
    }
}

/// Thesis 5.5, scenario 1: one lock id is held by one contender at a time. A lock that says
/// when each request's place in line was fixed ([`LockGuard::queued_at`]) must also serve
/// first come, first served ([`check_first_come_first_served`]).
pub async fn one_lock_one_holder<F: Fixture>(fx: Arc<F>) {
    let contenders = 8;
    let rounds = wall_scale(fx.mode(), 6, 3);
    let log = HoldLog::default();
    let asks = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..contenders {
        let locker = fx.locker(&format!("c{i}")).await;
        let (log, asks) = (log.clone(), asks.clone());
        tasks.push(crate::rt::spawn(async move {
            for _ in 0..rounds {
                let requested = crate::rt::now();
                let g = locker.lock("one-lock", None).await.expect("lock");
                let granted = crate::rt::now();
                let ask = Ask { requested, queued: g.queued_at(), granted };
                asks.lock().unwrap_or_else(|e| e.into_inner()).push(ask);
                hold_for(&log, g, granted, Duration::from_millis(20)).await.expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    assert_eq!(assert_exclusive(&log.holds()), contenders * rounds);
    let asks = asks.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Err(e) = check_first_come_first_served(&asks) {
        panic!("{e}");
    }
}

/// One request of one lock: when it began, when its place in line was fixed (if the lock
/// says), when it was granted.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    /// When `lock` was called.
    pub requested: Instant,
    /// [`LockGuard::queued_at`].
    pub queued: Option<Instant>,
    /// When `lock` returned.
    pub granted: Instant,
}

/// Lamport's first come, first served over the grants of one lock
/// ([`crate::order::overtaken_in_line`]): a request whose place was fixed before another
/// request began is granted first. Requests without a place are not judged (a lock without a
/// line promises no order); a place must lie within its request.
pub fn check_first_come_first_served(asks: &[Ask]) -> Result<(), String> {
    for a in asks {
        if let Some(q) = a.queued {
            if q < a.requested || q > a.granted {
                return Err(format!("a place in line fixed outside its request: {a:?}"));
            }
        }
    }
    let mut by_grant: Vec<&Ask> = asks.iter().collect();
    by_grant.sort_by_key(|a| a.granted);
    match crate::order::overtaken_in_line(by_grant.iter().map(|a| (a.requested, a.queued))).first()
    {
        Some(&(late, first)) => Err(format!(
            "not first come, first served: {:?} began after {:?} was in line and was granted first",
            by_grant[first], by_grant[late]
        )),
        None => Ok(()),
    }
}

/// Thesis 5.5, scenario 2: many lock ids are held by many contenders at once, and each id
/// still by one at a time.
pub async fn many_locks_many_holders<F: Fixture>(fx: Arc<F>) {
    let locks = 4;
    // Part 1: contender i takes lock i; all must hold at the same time.
    let barrier = Arc::new(tokio::sync::Barrier::new(locks));
    let mut tasks = Vec::new();
    for i in 0..locks {
        let locker = fx.locker(&format!("solo{i}")).await;
        let barrier = barrier.clone();
        tasks.push(crate::rt::spawn(async move {
            let g = locker.lock(&format!("res-{i}"), None).await.expect("lock");
            // Every contender reaches this point only while holding its own lock.
            barrier.wait().await;
            g.release().await.expect("release");
        }));
    }
    let all = async {
        for t in tasks {
            t.await.expect("contender task");
        }
    };
    crate::rt::timeout(fx.ttl() * 3, all)
        .await
        .expect("distinct locks must be held at once, not in turn");

    // Part 2: 12 contenders over 4 locks, exclusion per lock.
    let log = HoldLog::default();
    let mut tasks = Vec::new();
    for i in 0..12 {
        let locker = fx.locker(&format!("m{i}")).await;
        let log = log.clone();
        let rounds = wall_scale(fx.mode(), 4, 2);
        tasks.push(crate::rt::spawn(async move {
            for r in 0..rounds {
                let id = format!("res-{}", (i + r) % locks);
                let g = locker.lock(&id, None).await.expect("lock");
                hold_for(&log, g, crate::rt::now(), Duration::from_millis(10))
                    .await
                    .expect("release");
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    assert_exclusive(&log.holds());
}

/// Thesis 5.5, scenario 3: a holder keeps its lease past the TTL by renewal; nobody else gets
/// the lock meanwhile, and the holder is never told its lease was lost.
pub async fn lease_outlives_ttl_by_renewal<F: Fixture>(fx: Arc<F>) {
    let ttl = fx.ttl();
    let holder = fx.locker("holder").await;
    let other = fx.locker("other").await;
    let g = holder.lock("leased", None).await.expect("lock");
    let until = crate::rt::now() + ttl * 3;
    let mut checks = 0;
    while crate::rt::now() < until {
        assert!(
            other.try_lock("leased").await.expect("try_lock").is_none(),
            "lock taken while its lease was renewed"
        );
        assert!(!g.is_lost(), "lease lost although the store was reachable: {:?}", g.lease_state());
        checks += 1;
        crate::rt::sleep(ttl / 4).await;
    }
    assert!(checks >= 10);
    g.release().await.expect("release");
    let g2 = crate::rt::timeout(fx.notice_slack() + ttl, other.lock("leased", None))
        .await
        .expect("lock must be free right after release")
        .expect("lock");
    g2.release().await.expect("release");
}

/// Thesis 5.5, scenario 4: a holder that crashes (its task aborted, cut off from the store,
/// nothing released) frees the lock after its TTL, and not before.
///
/// Prints the measured time from the grant to the next grant.
pub async fn crashed_holder_frees_lock_after_ttl<F: Fixture>(fx: Arc<F>) {
    let ttl = fx.ttl();
    let crasher = fx.locker("crasher").await;
    let survivor = fx.locker("survivor").await;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = crate::rt::spawn(async move {
        let g = crasher.lock("crash", None).await.expect("lock");
        let _ = tx.send((crate::rt::now(), g.token()));
        std::future::pending::<()>().await;
        drop(g);
    });
    let (granted, crashed_token) = rx.await.expect("crasher got the lock");
    fx.cut_off("crasher").await;
    task.abort();
    let _ = task.await;
    let poll = Duration::from_millis(50);
    let g = loop {
        if let Some(g) = survivor.try_lock("crash").await.expect("try_lock") {
            break g;
        }
        assert!(
            crate::rt::now() < granted + ttl * 3,
            "lock of a crashed holder not freed within 3 x TTL"
        );
        crate::rt::sleep(poll).await;
    };
    let freed_after = g.token();
    let waited = crate::rt::now() - granted;
    eprintln!("crashed holder: next grant {waited:?} after the crashed grant (TTL {ttl:?})");
    assert!(
        waited >= ttl.mul_f64(0.9),
        "lock freed {waited:?} after the crash, before the TTL {ttl:?}"
    );
    assert!(
        waited <= ttl + fx.notice_slack(),
        "lock freed only {waited:?} after the crash (TTL {ttl:?})"
    );
    assert!(
        freed_after > crashed_token,
        "fencing token {freed_after} not above the crashed holder's {crashed_token}"
    );
    g.release().await.expect("release");
}

/// The soft lock returns at once and is never granted while another contender holds the lock.
pub async fn soft_lock_is_immediate_and_never_shared<F: Fixture>(fx: Arc<F>) {
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    let g =
        a.try_lock("soft").await.expect("try_lock").expect("free lock must be granted to try_lock");
    for _ in 0..5 {
        let start = crate::rt::now();
        assert!(
            b.try_lock("soft").await.expect("try_lock").is_none(),
            "soft lock granted while held"
        );
        let took = crate::rt::elapsed(start);
        assert!(took < Duration::from_secs(1), "soft lock took {took:?}: it must not wait");
    }
    g.release().await.expect("release");
    let g = b.try_lock("soft").await.expect("try_lock").expect("lock free after release");
    g.release().await.expect("release");
}

/// A mandatory lock with a timeout gives up with [`LockError::Timeout`] after the timeout and
/// leaves nothing behind that delays the next contender.
pub async fn mandatory_lock_times_out_cleanly<F: Fixture>(fx: Arc<F>) {
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    let c = fx.locker("c").await;
    let g = a.lock("timed", None).await.expect("lock");
    let timeout = Duration::from_millis(1500);
    let start = crate::rt::now();
    match b.lock("timed", Some(timeout)).await {
        Err(LockError::Timeout { lock_id, waited }) => {
            assert_eq!(lock_id, "timed");
            assert!(waited >= timeout, "reported {waited:?}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    let took = crate::rt::elapsed(start);
    assert!(took >= timeout && took < timeout + Duration::from_secs(2), "timeout took {took:?}");
    g.release().await.expect("release");
    // The timed-out waiter must not block the lock until its leftovers expire.
    let start = crate::rt::now();
    let g = crate::rt::timeout(fx.notice_slack() * 2, c.lock("timed", None))
        .await
        .expect("a timed-out waiter left something that blocks the lock")
        .expect("lock");
    assert!(crate::rt::elapsed(start) < fx.ttl(), "next grant waited for leftovers to expire");
    g.release().await.expect("release");
}

/// A holder whose renewals cannot reach the store is told its lease is lost, within about one
/// TTL, and another contender then gets the lock.
pub async fn lost_lease_is_signalled<F: Fixture>(fx: Arc<F>) {
    let ttl = fx.ttl();
    let a = fx.locker("a").await;
    let b = fx.locker("b").await;
    let g = a.lock("lossy", None).await.expect("lock");
    let cut = crate::rt::now();
    fx.cut_off("a").await;
    let lost = crate::rt::timeout(ttl * 2, g.lost())
        .await
        .expect("lost lease not signalled within 2 x TTL");
    assert!(g.is_lost());
    let after = crate::rt::elapsed(cut);
    eprintln!("lost lease signalled {after:?} after the cut ({lost})");
    assert!(after <= ttl + Duration::from_secs(1), "signalled only after {after:?}");
    let g2 = crate::rt::timeout(ttl * 2 + fx.notice_slack(), b.lock("lossy", None))
        .await
        .expect("lock of a holder with a lost lease not freed")
        .expect("lock");
    assert!(g2.token() > g.token());
    drop(g);
    g2.release().await.expect("release");
}

/// Fencing tokens strictly increase in grant order, across holders.
pub async fn fencing_tokens_strictly_increase<F: Fixture>(fx: Arc<F>) {
    let lockers = [fx.locker("f0").await, fx.locker("f1").await, fx.locker("f2").await];
    let mut last = 0;
    for round in 0..9 {
        let l = &lockers[round % 3];
        let g = l.lock("fenced", None).await.expect("lock");
        assert!(g.token() > last, "token {} after {last}", g.token());
        assert_eq!(g.lock_id(), "fenced");
        assert_eq!(g.owner(), l.owner());
        last = g.token();
        g.release().await.expect("release");
    }
}

/// Empty, over-long and malformed lock ids are refused with [`LockError::InvalidId`], and
/// nothing is written.
pub async fn invalid_ids_are_rejected<F: Fixture>(fx: Arc<F>) {
    let a = fx.locker("a").await;
    for bad in [String::new(), "x".repeat(crate::lock::MAX_ID_LEN + 1), "a/b".into()] {
        assert!(
            matches!(a.lock(&bad, None).await, Err(LockError::InvalidId { .. })),
            "lock({bad:?})"
        );
        assert!(
            matches!(a.try_lock(&bad).await, Err(LockError::InvalidId { .. })),
            "try_lock({bad:?})"
        );
    }
}

/// `contenders` contenders over one lock, `rounds` grants each, random hold and think times
/// from `seed`; returns every hold.
pub async fn contended_holds<F: Fixture>(
    fx: Arc<F>,
    contenders: usize,
    rounds: usize,
    seed: u64,
) -> Vec<Hold> {
    let log = HoldLog::default();
    let mut tasks = Vec::new();
    for i in 0..contenders {
        let locker = fx.locker(&format!("mx{i}")).await;
        let log = log.clone();
        let mut rng = StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        tasks.push(crate::rt::spawn(async move {
            for _ in 0..rounds {
                let g = locker.lock("contended", None).await.expect("lock");
                let hold = Duration::from_micros(rng.random_range(0..5_000));
                hold_for(&log, g, crate::rt::now(), hold).await.expect("release");
                crate::rt::sleep(Duration::from_micros(rng.random_range(0..2_000))).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    log.holds()
}

/// Mutual exclusion under contention: [`contended_holds`], then no two holds overlap and
/// tokens increase. Returns the number of holds checked.
pub async fn mutual_exclusion_under_contention<F: Fixture>(
    fx: Arc<F>,
    contenders: usize,
    rounds: usize,
    seed: u64,
) -> usize {
    let n = assert_exclusive(&contended_holds(fx, contenders, rounds, seed).await);
    assert_eq!(n, contenders * rounds);
    n
}

/// One grant of a contention run, as its contender saw it.
#[derive(Debug, Clone)]
pub struct Grant {
    /// Contender index.
    pub contender: usize,
    /// When it called `lock`.
    pub requested: Instant,
    /// When `lock` returned.
    pub granted: Instant,
    /// When it called release.
    pub released: Instant,
    /// Fencing token.
    pub token: u64,
}

/// `contenders` contenders loop lock -> hold -> release -> think on one lock id until
/// `duration` has passed; returns every grant in grant order. For the algorithms' own
/// property tests (fairness, bursts).
pub async fn contention_log<F: Fixture>(
    fx: Arc<F>,
    contenders: usize,
    duration: Duration,
    hold: Duration,
    think: Duration,
) -> Vec<Grant> {
    let log = Arc::new(Mutex::new(Vec::new()));
    let end = crate::rt::now() + duration;
    let mut tasks = Vec::new();
    for i in 0..contenders {
        let locker = fx.locker(&format!("p{i}")).await;
        let log = log.clone();
        tasks.push(crate::rt::spawn(async move {
            while crate::rt::now() < end {
                let requested = crate::rt::now();
                let g = locker.lock("property", None).await.expect("lock");
                let granted = crate::rt::now();
                crate::rt::sleep(hold).await;
                let released = crate::rt::now();
                let token = g.token();
                g.release().await.expect("release");
                log.lock().unwrap_or_else(|e| e.into_inner()).push(Grant {
                    contender: i,
                    requested,
                    granted,
                    released,
                    token,
                });
                crate::rt::sleep(think).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("contender task");
    }
    let mut grants = std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()));
    grants.sort_by_key(|g| (g.granted, g.token));
    grants
}

/// The embedded store as the conformance suite uses it: the default benchmark cluster (three
/// replicas at QUORUM, ~1 ms round trips with seeded jitter) in simulated time, a smaller one
/// in wall time.
pub struct EmbeddedFixture {
    store: EmbeddedStore,
    seed: u64,
    mode: Mode,
    ttl: Duration,
    build: Arc<dyn Fn(EmbeddedClient, ClientContext) -> Arc<dyn Locker> + Send + Sync>,
}

impl EmbeddedFixture {
    /// A fixture whose lockers `build` makes from a store client and a context.
    pub fn new(
        seed: u64,
        mode: Mode,
        build: impl Fn(EmbeddedClient, ClientContext) -> Arc<dyn Locker> + Send + Sync + 'static,
    ) -> Self {
        let (config, ttl) = contenders::embedded_setup(seed, mode);
        EmbeddedFixture {
            store: EmbeddedStore::new(config),
            seed,
            mode,
            ttl,
            build: Arc::new(build),
        }
    }

    /// A fixture on an existing `store` (another fixture's, say), with the TTL of `mode`.
    pub fn with_store(
        store: EmbeddedStore,
        seed: u64,
        mode: Mode,
        build: impl Fn(EmbeddedClient, ClientContext) -> Arc<dyn Locker> + Send + Sync + 'static,
    ) -> Self {
        let (_, ttl) = contenders::embedded_setup(seed, mode);
        EmbeddedFixture { store, seed, mode, ttl, build: Arc::new(build) }
    }

    /// The store, for counters and faults.
    pub fn store(&self) -> &EmbeddedStore {
        &self.store
    }
}

#[async_trait]
impl Fixture for EmbeddedFixture {
    async fn locker(&self, name: &str) -> Arc<dyn Locker> {
        let (client, ctx) = contenders::embedded_contender(&self.store, self.seed, name, self.ttl);
        (self.build)(client, ctx)
    }
    async fn cut_off(&self, name: &str) {
        self.store.isolate(name, true);
    }
    fn ttl(&self) -> Duration {
        self.ttl
    }
    fn mode(&self) -> Mode {
        self.mode
    }
}

/// Run the whole suite for a [`Fixture`]: `$make` is an `async fn(seed: u64) -> impl Fixture`,
/// `$mode` a [`Mode`], `$seeds` how many seeds the contention test runs, `$contenders` how many
/// contenders it has.
///
/// With `run_if = expr` (a `Result<(), String>`), every test first evaluates `expr` and, on
/// `Err(why)`, prints `why` and returns: for suites that need a server only the user can name
/// (a Cassandra cluster). Other suites must not use it: a missing server is a failure.
#[macro_export]
macro_rules! conformance_suite {
    ($mode:expr, $make:expr, seeds = $seeds:expr, contenders = $contenders:expr) => {
        $crate::conformance_suite!(
            $mode,
            $make,
            seeds = $seeds,
            contenders = $contenders,
            run_if = Ok::<(), String>(())
        );
    };
    ($mode:expr, $make:expr, seeds = $seeds:expr, contenders = $contenders:expr, run_if = $gate:expr) => {
        mod conformance {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;

            #[test]
            fn one_lock_is_held_by_one_contender_at_a_time() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 1, $make, c::one_lock_one_holder);
            }
            #[test]
            fn many_locks_are_held_by_many_contenders_at_once() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 2, $make, c::many_locks_many_holders);
            }
            #[test]
            fn lease_is_kept_past_its_ttl_by_renewal() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 3, $make, c::lease_outlives_ttl_by_renewal);
            }
            #[test]
            fn crashed_holder_frees_the_lock_after_its_ttl_and_not_before() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 4, $make, c::crashed_holder_frees_lock_after_ttl);
            }
            #[test]
            fn soft_lock_returns_at_once_and_is_never_shared() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 5, $make, c::soft_lock_is_immediate_and_never_shared);
            }
            #[test]
            fn mandatory_lock_times_out_and_leaves_nothing_behind() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 6, $make, c::mandatory_lock_times_out_cleanly);
            }
            #[test]
            fn lost_lease_is_signalled_to_the_holder() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 7, $make, c::lost_lease_is_signalled);
            }
            #[test]
            fn fencing_tokens_strictly_increase_in_grant_order() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 8, $make, c::fencing_tokens_strictly_increase);
            }
            #[test]
            fn invalid_lock_ids_are_rejected() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                c::run($mode, 9, $make, c::invalid_ids_are_rejected);
            }
            #[test]
            fn no_two_holds_overlap_under_contention_over_many_seeds() {
                if let Err(why) = $gate {
                    // Past the test harness's capture, so the run says what it did not do.
                    use std::io::Write as _;
                    let _ = writeln!(std::io::stderr(), "{why}");
                    return;
                }
                let mut holds = 0;
                for seed in 0..$seeds {
                    holds += c::run($mode, 1000 + seed, $make, |fx| async move {
                        c::mutual_exclusion_under_contention(fx, $contenders, 4, 1000 + seed).await
                    });
                }
                eprintln!(
                    "mutual exclusion: {holds} holds over {} seeds checked, no overlap",
                    $seeds
                );
            }
        }
    };
}

/// The whole suite on the embedded store for a Cassandra-model algorithm: `$build` is a
/// closure `|client: EmbeddedClient, ctx: ClientContext| -> Arc<dyn Locker>`. Runs every
/// scenario in simulated time, the contention test over 12 seeds with 64 contenders, and the
/// contention test once more on a multi-thread runtime in wall time.
#[macro_export]
macro_rules! embedded_conformance_suite {
    ($build:expr) => {
        $crate::conformance_suite!(
            $crate::conformance::Mode::Simulated,
            |seed| async move {
                $crate::conformance::EmbeddedFixture::new(
                    seed,
                    $crate::conformance::Mode::Simulated,
                    $build,
                )
            },
            seeds = 12,
            contenders = 64
        );

        mod conformance_wall {
            #[allow(unused_imports)]
            use super::*;
            use $crate::conformance as c;

            #[test]
            fn no_two_holds_overlap_with_real_parallelism_in_wall_time() {
                c::run(
                    c::Mode::Wall,
                    77,
                    |seed| async move { c::EmbeddedFixture::new(seed, c::Mode::Wall, $build) },
                    |fx| async move {
                        let n = c::mutual_exclusion_under_contention(fx, 8, 3, 77).await;
                        eprintln!("wall time, multi-thread: {n} holds checked, no overlap");
                    },
                );
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_come_first_served_judges_only_requests_already_in_line() {
        let t0 = crate::rt::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ask =
            |r, q: Option<u64>, g| Ask { requested: at(r), queued: q.map(at), granted: at(g) };
        // B began (at 5) before A's place was fixed (at 6) and was served first: fine.
        assert!(check_first_come_first_served(&[ask(0, Some(6), 30), ask(5, Some(7), 20)]).is_ok());
        // C began (at 10) after A was in line (at 6) and was served first: refused.
        let e = check_first_come_first_served(&[ask(0, Some(6), 30), ask(10, Some(11), 20)]);
        assert!(e.unwrap_err().contains("not first come"));
        // A lock without a line is not judged.
        assert!(check_first_come_first_served(&[ask(0, None, 30), ask(10, None, 20)]).is_ok());
        // A place outside its own request is a bug of the lock.
        assert!(check_first_come_first_served(&[ask(5, Some(4), 30)]).is_err());
    }
}
