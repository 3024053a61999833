//! # The lightweight-transaction lock
//!
//! Cassandra's own answer to locking, a year after the thesis: since Cassandra 2.0 a
//! conditional statement (`INSERT … IF NOT EXISTS`, `UPDATE … IF col = ?`) runs a round of
//! Paxos among the row's replicas, so "take the lock if nobody has it" is one linearizable
//! compare-and-set instead of the thesis's write-then-read protocols. Open-source LWT locks
//! exist in Java (datanerds-io/lack, Ericsson ecChronos's CAS lock factory); this is the same
//! idea on the cell model ([`CellStore::cas`], rules 8–13 of `lock_core::store`), so it runs
//! on the embedded store's Paxos and on a real cluster alike.
//!
//! ## Protocol
//!
//! One row per lock id in [`LOCK_TABLE`], with two cells: **`owner`**, the holder's
//! `"<token> <owner id>"` with the lease TTL, and **`fence`**, the last fencing token handed
//! out, with no TTL. Every statement is a lightweight transaction at the configured serial
//! consistency (SERIAL) with its commit at the context's consistency (QUORUM).
//!
//! 1. **Acquire**: with `f` the fence last seen on this lock (none at first), one CAS
//!    `IF owner absent AND fence = f` (or `fence absent`) `SET owner = "<f+1> <me>" USING TTL,
//!    fence = f+1`. In CQL: a conditional batch on the lock's partition of
//!    `INSERT … owner … IF NOT EXISTS USING TTL ?` and `UPDATE … fence … IF value = ?`.
//!    - applied: the lock is ours with token `f+1`;
//!    - not applied, and the answer shows an owner: the lock is held; wait (3) and go to 1;
//!    - not applied, no owner, another fence: a holder came and went since we last looked;
//!      go to 1 at once with the fence the answer showed.
//! 2. **Unknown outcome** (the CAS timed out, [`StoreError::CasTimeout`], or the connection
//!    went): read the row at SERIAL. Our owner value there means the CAS applied: the lock is
//!    ours. Anything else means it did not, and never will (rule 12: a SERIAL read completes
//!    or buries every round in progress). Until the read succeeds it is retried with the
//!    backoff, for at most one TTL (after which the cell would have expired anyway).
//! 3. **Wait**: sleep the [`Backoff`] (exponential with jitter, from the context's seed) and
//!    go to 1.
//! 4. **Renew**, every TTL/2 while held: `UPDATE owner = <ours> USING TTL IF owner = <ours>`.
//!    Not applied means the lease ran out and someone else may hold the lock: the guard's
//!    lease is lost. A renewal that fails is retried until the lease's end.
//! 5. **Release**: `DELETE owner IF owner = <ours>`. Not applied means the lease had already
//!    run out: nothing of ours is left.
//!
//! ## Choices the sources leave open
//! - **The fencing token is taken in the acquiring CAS.** A counter advanced by a second CAS
//!   after the grant would not be monotonic across holders: a holder paused between its grant
//!   and its token could, after its lease ran out and a successor took token n+1, come back
//!   and take n+2, then write with a larger token than the rightful holder. In one Paxos round
//!   with the ownership check, the token cannot be separated from the grant. On Cassandra both
//!   cells are in the lock's partition, so the batch is one round.
//! - **Why tokens strictly increase across holders.** The `fence` cell has no TTL and is only
//!   ever changed by an applied acquire, from its current value `f` to `f+1` (the condition
//!   checks `f`). CAS operations on one row are linearizable, so the applied acquires form one
//!   sequence in which each sees its predecessor's value: tokens 1, 2, 3, … in that order. A
//!   holder's successor acquired only after the `owner` cell was gone (released or expired),
//!   so later in that sequence, with a greater token. A stale holder's writes therefore carry
//!   a smaller token than its successor's, and a resource that keeps the greatest token seen
//!   rejects them. An acquire whose outcome stayed unknown may consume a token nobody uses:
//!   gaps, never repeats.
//! - **The owner value carries the token**, so renewing and releasing are conditional on this
//!   grant, not merely on the owner id: a stale renewal or release of an earlier grant by the
//!   same owner cannot touch a later one.
//! - **Backoff** ([`Backoff::default`]): the first wait 10 ms, doubling up to 1 s, each drawn
//!   uniformly from its upper half; between waits a plain read of the row ([`WaitProbe::Read`],
//!   the default) and the CAS only when no owner shows. Waiters are not ordered: whoever tries
//!   first after a release wins, and when several try at once their Paxos rounds duel (each
//!   loser sleeps 0–100 ms inside the store and retries). Shorter waits make more duels, not
//!   faster handoffs: waiters that try again sooner collide more often. Retrying
//!   the CAS instead of reading ([`WaitProbe::Cas`], what the simplest LWT locks do) puts
//!   every waiter into the holder's Paxos rounds: fewer grants, and more round trips per
//!   grant (`tests/round_trips.rs` runs both with 32 contenders, checks that reading wins on
//!   both counts and prints the figures); with many such waiters a holder's release can lose
//!   its rounds for longer than the store's 1 s CAS contention timeout, which is why a
//!   release is retried (step 5).
//! - **The fence after a grant is the grant's token**: an applied answer shows the row as it
//!   was, so the locker remembers its own token, not the answer's fence (taking the answer's
//!   would make every next acquire fail once on a stale fence, a third lightweight
//!   transaction per grant; `tests/round_trips.rs` checks that a locker's next acquire is
//!   one).
//! - **A leftover owner cell of ours** (an acquire that applied after we gave up resolving it,
//!   or a release whose outcome stayed unknown): we hold no guard for it (a locker is not
//!   reentrant), so the acquire deletes it with `DELETE owner IF owner = <that value>` and
//!   retries at once, instead of waiting for its TTL.
//! - **Lease validity** starts when the acquiring or renewing request was *sent*: the store
//!   starts the cell's TTL when it commits, which is later, so the holder's view ends first.
//! - **Timeout** of the mandatory lock is checked between attempts; a grant that completes
//!   as the deadline passes is returned.
//!
//! ## Findings
//! - **Hundreds of waiters on one lock make almost no grant.** After a release, every waiter
//!   whose read finds the row free sends its CAS, and that many proposers' Paxos rounds duel
//!   on the one partition; the backoff spreads the waiters out, but not hundreds of them.
//!   `bench-harness scale` on the embedded store shows the rate on one lock falling to almost
//!   nothing from 64 to 256 and 1,000 contenders, with quorum reads timing out, while the
//!   same contenders spread over a hundred locks keep theirs: the duels are per lock
//!   (`results/scale/README.md`).
//!
//! ## Invariants the tests check
//! - the conformance suite: at most one holder over many seeds, lease renewal, crash
//!   recovery after the TTL, soft lock, timeout, lost-lease signal, increasing tokens;
//! - an acquire whose CAS times out is resolved by the SERIAL read and never gives two
//!   holders (`tests/unknown_outcome.rs`);
//! - an uncontended acquire and release cost 2 lightweight transactions: 8 round trips on
//!   Cassandra 4.0's Paxos (v1), 4 on Paxos v2 (`tests/round_trips.rs`).
//!
//! ## Example
//! ```
//! use lock_core::{context::ClientContext, embedded::{EmbeddedConfig, EmbeddedStore}, Locker};
//! use lock_lwt::{LwtConfig, LwtLocker};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! let store = EmbeddedStore::new(EmbeddedConfig { replicas: 3, ..EmbeddedConfig::default() });
//! let client = store.client("worker-1");
//! let ctx = ClientContext::new("worker-1", client.clock(), 7);
//! let locker = LwtLocker::new(client, ctx, LwtConfig::default())?;
//! let guard = locker.lock("nightly-report", None).await?;
//! assert_eq!(guard.token(), 1);
//! // ... the critical section, passing guard.token() to what it writes ...
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::lock::{
    validate_id, LeaseDeadline, LeaseLost, LeaseState, LockError, LockGuard, Locker, Release,
};
use lock_core::store::{
    CasChange, CasCondition, CasRequest, CellStore, SerialConsistency, Slice, StoreError,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

/// The table of the lock rows.
pub const LOCK_TABLE: &str = "lwt_lock";
/// Every table the lock uses.
pub const TABLES: &[&str] = &[LOCK_TABLE];
/// The cell naming the holder: `"<token> <owner id>"`, with the lease TTL.
pub const OWNER: &str = "owner";
/// The cell holding the last fencing token handed out, without TTL.
pub const FENCE: &str = "fence";
/// How many times in a row an acquire retries at once because the fence moved.
const FENCE_RACES: u32 = 4;

/// How long a waiter sleeps between attempts: exponential, capped, with jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first wait's upper bound.
    pub initial: Duration,
    /// The largest wait's upper bound.
    pub max: Duration,
    /// How much the bound grows after each failed attempt (at least 1).
    pub multiplier: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(1000),
            multiplier: 2.0,
        }
    }
}

impl Backoff {
    /// The wait after `failures` failed attempts: uniform in the upper half of the bound.
    pub fn delay(&self, failures: u32, rng: &mut StdRng) -> Duration {
        let growth = self.multiplier.max(1.0).powi(failures.min(64) as i32);
        let bound = self.initial.mul_f64(growth.min(1e6)).min(self.max);
        let nanos = u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rng.random_range(nanos / 2..=nanos))
    }
}

/// What a waiter does after each backoff, before it tries the acquiring CAS again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WaitProbe {
    /// Read the lock row at the context's consistency (one plain round trip, no Paxos) and
    /// try the CAS only when no owner shows: waiters then stay out of the holder's Paxos
    /// rounds. The read is only a hint; the CAS decides.
    #[default]
    Read,
    /// Try the CAS every time, as the simplest LWT locks do: every waiter's retry is a Paxos
    /// round on the lock's row, competing with the holder's renewal and release (see the
    /// crate docs for what that does under contention).
    Cas,
}

/// How the lock runs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LwtConfig {
    /// The Paxos quorum of every statement.
    pub serial: SerialConsistency,
    /// The waits between attempts.
    pub backoff: Backoff,
    /// What a waiter does between attempts.
    pub probe: WaitProbe,
}

/// The lightweight-transaction lock for one owner (see the [crate docs](crate)).
pub struct LwtLocker<S> {
    store: S,
    ctx: ClientContext,
    config: LwtConfig,
    rng: Mutex<StdRng>,
    /// The fence last seen per lock id: the next acquire's expectation.
    fences: Mutex<HashMap<String, u64>>,
}

/// What one acquire attempt found.
enum Attempt {
    /// The lock is ours; the lease runs from `sent`.
    Granted { token: u64, sent: Instant },
    /// Someone holds it (or the answer stayed unknown): wait and try again.
    Held,
}

impl<S: CellStore + Clone> LwtLocker<S> {
    /// A locker for `ctx.owner` on `store`. Fails on an invalid owner id or TTL.
    pub fn new(store: S, ctx: ClientContext, config: LwtConfig) -> Result<Self, LockError> {
        ctx.validate()?;
        if config.backoff.initial.is_zero() || config.backoff.max < config.backoff.initial {
            return Err(LockError::Config(format!(
                "backoff must start above zero and end at or above its start, got {:?}",
                config.backoff
            )));
        }
        let rng = Mutex::new(StdRng::seed_from_u64(ctx.seed));
        Ok(LwtLocker { store, ctx, config, rng, fences: Mutex::new(HashMap::new()) })
    }

    fn fence_hint(&self, lock_id: &str) -> Option<u64> {
        self.fences.lock().unwrap_or_else(|e| e.into_inner()).get(lock_id).copied()
    }

    fn saw_fence(&self, lock_id: &str, fence: Option<u64>) {
        let mut fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        match fence {
            Some(f) => {
                fences.insert(lock_id.to_owned(), f);
            }
            None => {
                fences.remove(lock_id);
            }
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        self.config.backoff.delay(failures, &mut self.rng.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn owner_value(&self, token: u64) -> Vec<u8> {
        format!("{token} {}", self.ctx.owner).into_bytes()
    }

    /// True when `value` is an owner value of this owner's (of any grant).
    fn is_ours(&self, value: &[u8]) -> bool {
        std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.split_once(' '))
            .is_some_and(|(_, owner)| owner == self.ctx.owner)
    }

    async fn cas(
        &self,
        lock_id: &str,
        request: &CasRequest,
    ) -> Result<lock_core::store::CasResult, StoreError> {
        self.store.cas(LOCK_TABLE, lock_id, request, self.config.serial, self.ctx.consistency).await
    }

    /// One acquire (steps 1 and 2), with the immediate retries of a moved fence.
    async fn attempt(&self, lock_id: &str) -> Result<Attempt, LockError> {
        for _ in 0..FENCE_RACES {
            let fence = self.fence_hint(lock_id);
            let token = fence.map_or(1, |f| f + 1);
            let mine = self.owner_value(token);
            let request = acquire_request(fence, &mine, self.ctx.ttl);
            let sent = lock_core::rt::now();
            let answer = match self.cas(lock_id, &request).await {
                Ok(answer) => answer,
                Err(e) if e.may_have_applied() => {
                    return self.resolve(lock_id, token, &mine, sent).await
                }
                Err(e) => return Err(LockError::store(lock_id, e)),
            };
            if answer.applied {
                // The answer shows the row before the change: the fence is now our token.
                self.saw_fence(lock_id, Some(token));
                return Ok(Attempt::Granted { token, sent });
            }
            self.saw_fence(
                lock_id,
                parse_fence(lock_id, answer.cell(FENCE).map(|c| c.value.as_slice()))?,
            );
            match answer.cell(OWNER) {
                Some(owner) if self.is_ours(&owner.value) => {
                    self.clear_leftover(lock_id, owner.value.clone()).await?
                }
                Some(_) => return Ok(Attempt::Held),
                None => {}
            }
        }
        Ok(Attempt::Held)
    }

    /// Step 2: an acquire whose outcome is unknown, settled by SERIAL reads.
    async fn resolve(
        &self,
        lock_id: &str,
        token: u64,
        mine: &[u8],
        sent: Instant,
    ) -> Result<Attempt, LockError> {
        let give_up = sent + self.ctx.ttl;
        let mut failures = 0;
        loop {
            match self
                .store
                .read_serial(LOCK_TABLE, lock_id, Slice::all(), self.config.serial)
                .await
            {
                Ok(cells) => {
                    let cell = |name: &str| {
                        cells.iter().find(|c| c.column == name).map(|c| c.value.as_slice())
                    };
                    self.saw_fence(lock_id, parse_fence(lock_id, cell(FENCE))?);
                    if cell(OWNER) == Some(mine) {
                        return Ok(Attempt::Granted { token, sent });
                    }
                    return Ok(Attempt::Held);
                }
                Err(e) => {
                    let pause = self.backoff(failures);
                    failures += 1;
                    if lock_core::rt::now() + pause >= give_up {
                        return Err(LockError::store(lock_id, e));
                    }
                    lock_core::rt::sleep(pause).await;
                }
            }
        }
    }

    /// Deletes an owner cell of ours that no guard holds.
    async fn clear_leftover(&self, lock_id: &str, value: Vec<u8>) -> Result<(), LockError> {
        let request = release_request(value);
        match self.cas(lock_id, &request).await {
            Ok(_) => Ok(()),
            Err(e) if e.may_have_applied() => Ok(()),
            Err(e) => Err(LockError::store(lock_id, e)),
        }
    }

    /// The wait probe: false when a plain read shows another owner (true on any doubt).
    async fn looks_free(&self, lock_id: &str) -> bool {
        if self.config.probe == WaitProbe::Cas {
            return true;
        }
        match self.store.read(LOCK_TABLE, lock_id, Slice::all(), self.ctx.consistency).await {
            Ok(cells) => {
                cells.iter().find(|c| c.column == OWNER).is_none_or(|c| self.is_ours(&c.value))
            }
            Err(_) => true,
        }
    }

    /// A granted attempt becomes a guard whose lease is renewed in the background.
    fn guard(&self, lock_id: &str, token: u64, sent: Instant) -> LockGuard {
        let (state, watch) = watch::channel(LeaseState::Held);
        let (stop, stopped) = oneshot::channel();
        let keeper = Keeper {
            store: self.store.clone(),
            lock_id: lock_id.to_owned(),
            mine: self.owner_value(token),
            ttl: self.ctx.ttl,
            serial: self.config.serial,
            commit: self.ctx.consistency,
        };
        let deadline = LeaseDeadline::new(
            Some(sent + self.ctx.ttl),
            "no renewal succeeded before the lease ran out",
        );
        let renewal = lock_core::rt::spawn(keeper.clone().run(deadline.clone(), state, stopped));
        let release = LwtRelease { keeper, stop: Some(stop), renewal: Some(renewal) };
        LockGuard::new(lock_id, self.ctx.owner.clone(), token, watch, Box::new(release))
            .with_deadline(deadline)
    }

    fn granted(&self, lock_id: &str, token: u64, sent: Instant) -> Option<LockGuard> {
        // A grant resolved too late to be of use: its lease is already over.
        (lock_core::rt::now() < sent + self.ctx.ttl).then(|| self.guard(lock_id, token, sent))
    }
}

/// The acquiring CAS: `IF owner absent AND fence = f SET owner, fence = f + 1`.
fn acquire_request(fence: Option<u64>, mine: &[u8], ttl: Duration) -> CasRequest {
    let next = fence.map_or(1, |f| f + 1);
    let fence_condition = match fence {
        Some(f) => CasCondition::equals(FENCE, f.to_string()),
        None => CasCondition::absent(FENCE),
    };
    CasRequest {
        conditions: vec![CasCondition::absent(OWNER), fence_condition],
        changes: vec![
            CasChange::Set { column: OWNER.into(), value: mine.to_vec(), ttl: Some(ttl) },
            CasChange::Set {
                column: FENCE.into(),
                value: next.to_string().into_bytes(),
                ttl: None,
            },
        ],
    }
}

/// `UPDATE owner USING TTL IF owner = ours`.
fn renew_request(mine: &[u8], ttl: Duration) -> CasRequest {
    CasRequest {
        conditions: vec![CasCondition::equals(OWNER, mine.to_vec())],
        changes: vec![CasChange::Set {
            column: OWNER.into(),
            value: mine.to_vec(),
            ttl: Some(ttl),
        }],
    }
}

/// `DELETE owner IF owner = ours`.
fn release_request(mine: Vec<u8>) -> CasRequest {
    CasRequest {
        conditions: vec![CasCondition::equals(OWNER, mine)],
        changes: vec![CasChange::Delete { column: OWNER.into() }],
    }
}

fn parse_fence(lock_id: &str, value: Option<&[u8]>) -> Result<Option<u64>, LockError> {
    let Some(value) = value else { return Ok(None) };
    std::str::from_utf8(value).ok().and_then(|v| v.parse().ok()).map(Some).ok_or_else(|| {
        LockError::store(
            lock_id,
            StoreError::Rejected(format!(
                "the fence cell of lock {lock_id:?} holds {:?}, not a token",
                String::from_utf8_lossy(value)
            )),
        )
    })
}

#[async_trait]
impl<S: CellStore + Clone> Locker for LwtLocker<S> {
    fn algorithm(&self) -> &str {
        "lwt"
    }

    fn owner(&self) -> &str {
        &self.ctx.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let start = lock_core::rt::now();
        let deadline = timeout.map(|t| start + t);
        let mut failures = 0;
        loop {
            if let Attempt::Granted { token, sent } = self.attempt(lock_id).await? {
                if let Some(guard) = self.granted(lock_id, token, sent) {
                    return Ok(guard);
                }
            }
            if deadline.is_some_and(|d| lock_core::rt::now() >= d) {
                return Err(LockError::Timeout {
                    lock_id: lock_id.to_owned(),
                    waited: lock_core::rt::elapsed(start),
                });
            }
            // Wait until the lock looks free (or the deadline comes: one last attempt then).
            loop {
                let pause = self.backoff(failures);
                failures = failures.saturating_add(1);
                let wake = deadline
                    .map_or(lock_core::rt::now() + pause, |d| d.min(lock_core::rt::now() + pause));
                lock_core::rt::sleep_until(wake).await;
                if deadline.is_some_and(|d| lock_core::rt::now() >= d)
                    || self.looks_free(lock_id).await
                {
                    break;
                }
            }
        }
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        match self.attempt(lock_id).await? {
            Attempt::Granted { token, sent } => Ok(self.granted(lock_id, token, sent)),
            Attempt::Held => Ok(None),
        }
    }
}

/// What renews and releases one grant.
#[derive(Clone)]
struct Keeper<S> {
    store: S,
    lock_id: String,
    mine: Vec<u8>,
    ttl: Duration,
    serial: SerialConsistency,
    commit: lock_core::store::Consistency,
}

impl<S: CellStore> Keeper<S> {
    /// Step 4: renew every TTL/2 until stopped, moving `deadline` on; say when the lease ends
    /// without a renewal.
    async fn run(
        self,
        deadline: LeaseDeadline,
        state: watch::Sender<LeaseState>,
        mut stopped: oneshot::Receiver<()>,
    ) {
        let mut next = lock_core::rt::now() + self.ttl / 2;
        let retry = (self.ttl / 10).min(Duration::from_secs(1));
        let mut valid_until = deadline.until().unwrap_or_else(lock_core::rt::now);
        loop {
            tokio::select! {
                biased;
                _ = &mut stopped => return,
                _ = lock_core::rt::sleep_until(valid_until) => {
                    lost(&state, "the lease ran out before a renewal succeeded");
                    return;
                }
                _ = lock_core::rt::sleep_until(next) => {}
            }
            let sent = lock_core::rt::now();
            let request = renew_request(&self.mine, self.ttl);
            let renewal =
                self.store.cas(LOCK_TABLE, &self.lock_id, &request, self.serial, self.commit);
            let answer = tokio::select! {
                biased;
                _ = &mut stopped => return,
                _ = lock_core::rt::sleep_until(valid_until) => {
                    lost(&state, "the lease ran out while a renewal was in flight");
                    return;
                }
                answer = renewal => answer,
            };
            match answer {
                Ok(r) if r.applied => {
                    valid_until = sent + self.ttl;
                    deadline.set(Some(valid_until));
                    next = sent + self.ttl / 2;
                }
                Ok(r) => {
                    let holder =
                        r.cell(OWNER).map(|c| String::from_utf8_lossy(&c.value).into_owned());
                    lost(
                        &state,
                        &format!(
                            "the lock row names another holder ({holder:?}): the lease had run out"
                        ),
                    );
                    return;
                }
                // Unknown or failed: the cell keeps its old TTL at worst; try again soon.
                Err(_) => next = lock_core::rt::now() + retry,
            }
        }
    }

    /// Step 5. A release that ends without an answer (contention past the store's CAS
    /// timeout, say) is sent again: if the first one applied, the next finds the cell gone and
    /// does nothing. After one TTL the cell has expired anyway, and the error is returned.
    async fn release(&self) -> Result<(), LockError> {
        let request = release_request(self.mine.clone());
        let give_up = lock_core::rt::now() + self.ttl;
        let mut pause = (self.ttl / 100).max(Duration::from_millis(10));
        loop {
            match self
                .store
                .cas(LOCK_TABLE, &self.lock_id, &request, self.serial, self.commit)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if e.may_have_applied() && lock_core::rt::now() + pause < give_up => {
                    lock_core::rt::sleep(pause).await;
                    pause = (pause * 2).min(self.ttl / 10);
                }
                Err(e) => return Err(LockError::store(&self.lock_id, e)),
            }
        }
    }
}

fn lost(state: &watch::Sender<LeaseState>, reason: &str) {
    state.send_replace(LeaseState::Lost(LeaseLost { reason: reason.to_owned() }));
}

/// The release of one grant: stop renewing, then delete the owner cell if it is still ours.
struct LwtRelease<S> {
    keeper: Keeper<S>,
    stop: Option<oneshot::Sender<()>>,
    renewal: Option<lock_core::rt::JoinHandle<()>>,
}

impl<S> Drop for LwtRelease<S> {
    fn drop(&mut self) {
        // Abandoned (a crash in tests): the renewal stops with the guard, the cell expires.
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
    }
}

#[async_trait]
impl<S: CellStore> Release for LwtRelease<S> {
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(renewal) = self.renewal.take() {
            let _ = renewal.await;
        }
        self.keeper.release().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_within_the_upper_half() {
        let b = Backoff::default();
        let mut rng = StdRng::seed_from_u64(1);
        for (failures, bound) in [(0, 10), (1, 20), (2, 40), (6, 640), (7, 1000), (30, 1000)] {
            let d = b.delay(failures, &mut rng);
            let bound = Duration::from_millis(bound);
            assert!(
                d >= bound / 2 && d <= bound,
                "{failures}: {d:?} not in {:?}..={bound:?}",
                bound / 2
            );
        }
    }

    #[test]
    fn the_acquire_takes_the_next_token_in_the_same_request() {
        let r = acquire_request(Some(41), b"42 me", Duration::from_secs(10));
        assert_eq!(
            r.conditions,
            vec![CasCondition::absent(OWNER), CasCondition::equals(FENCE, "41")]
        );
        assert!(r.changes.contains(&CasChange::Set {
            column: FENCE.into(),
            value: b"42".to_vec(),
            ttl: None
        }));
        let first = acquire_request(None, b"1 me", Duration::from_secs(10));
        assert_eq!(first.conditions[1], CasCondition::absent(FENCE));
    }

    #[test]
    fn a_corrupt_fence_cell_is_an_error_naming_the_lock() {
        let e = parse_fence("job", Some(b"x")).unwrap_err().to_string();
        assert!(e.contains("job") && e.contains("fence"), "{e}");
        assert_eq!(parse_fence("job", Some(b"7")).unwrap(), Some(7));
    }
}
