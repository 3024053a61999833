//! # The shadow-table lock (2012)
//!
//! The Cassandra lock the thesis (`seeds/000`, section 4, listings 3 and 4) starts from and
//! replaces. Threads do not queue: they race through a *shadow* table and back off at random.
//!
//! ## Protocol
//!
//! Two tables, main ([`MAIN_TABLE`]) and shadow ([`SHADOW_TABLE`]), one row per lock id; a
//! thread's cell has its thread id as column name. `TryLock(lockId, threadId)`, listing 3:
//!
//! 1. read the cells of row `lockId` in the main table;
//! 2. if there is exactly one: return `Success` if its column is `threadId` (3–4), else
//!    `AnotherThreadIsOwner` (5–6);
//! 3. write our cell into the shadow row (7); read the shadow row (8);
//! 4. if ours is the only shadow cell (9) and the main row has no cells (10): write our cell
//!    into the main row (11), delete our shadow cell (12), return `Success` (13);
//! 5. otherwise delete our shadow cell (14) and return `ConcurrentAttempt` (15).
//!
//! Step 10 reads the main row **again**. Read literally with the row of step 1, the listing
//! admits two holders: B reads an empty main row, A then wins the shadow round, writes main
//! and deletes its shadow cell, and B — whose shadow read now finds only itself — trusts its
//! stale "main is empty" and writes main too (`tests/literal_listing.rs` keeps this counterexample:
//! [`ShadowConfig::reread_main`] `= false` breaks mutual exclusion on the embedded store). With
//! the fresh read, the winner of a shadow round
//! either sees the earlier winner's main cell, or the earlier winner's shadow cell is still
//! there (it is deleted only after the main cell is written), so the round fails.
//!
//! `GetLock`, listing 4: repeat `TryLock`; after `AnotherThreadIsOwner` sleep a random
//! 0–1000 ms; after `ConcurrentAttempt` sleep a random 0–50·attempt ms and count the attempt
//! up (attempt starts at 1). [`Backoff::thesis`] keeps these constants;
//! [`Backoff::production`] is the successor's (0–50·⌊e^min(attempt,5)⌋ ms after
//! `ConcurrentAttempt`). The soft lock is one `TryLock`.
//!
//! ## A release that timed out (finding of the fault soak)
//! Lines 3–4 of listing 3 return `Success` when the one main cell is the caller's own. In
//! Cassandra a write or delete that times out (`WriteTimeout`: fewer acknowledgements than the
//! consistency level asked) is not undone: it may sit on a minority of replicas. So a holder
//! whose release timed out leaves its main cell on a replica that missed the delete, while the
//! replica that applied it holds the tombstone. A QUORUM read that reaches the tombstone sees a
//! free lock, and a contender B takes it through the shadow round; a QUORUM read by the old
//! holder A that reaches only replicas without the tombstone sees its own cell alone, and A
//! re-enters. If A reads after B's fresh read of step 10 and before B's main write lands, both
//! hold. The fault soak found it (`bench-harness soak -a shadow --seed 3`: an overlap at
//! QUORUM right after a stopped replica came back while another had been dropping mutations);
//! `tests/release_timeout.rs` replays it step by step.
//! QUORUM protects what was acknowledged, and a timed-out delete was not. By default
//! ([`OwnCell::Clear`]) step 2 deletes such a leftover and reports `ConcurrentAttempt`, so the
//! caller competes through the shadow round, whose cells B's attempt still holds;
//! [`OwnCell::Reenter`] keeps the listing for the test.
//!
//! Leases (section 5.3): every cell carries the context's TTL; the main cell of a holder is
//! rewritten every TTL/2 by the [`LeaseKeeper`]; release stops it and deletes the cell. The
//! fencing token comes from [`lock_core::fence`] after the grant.
//!
//! ## Row growth
//! Both rows' columns are thread ids, so a thread's next cell (written with a newer timestamp
//! than its last deletion) replaces its own tombstone: each row holds at most one cell, live or
//! dead, per thread that used the lock within the last `gc_grace`, and a read scans at most
//! K tombstones for K threads (K when the lock is free and every thread's cell is dead),
//! however long the lock runs, so its throughput does not decay (`results/longrun/README.md`
//! has the runs, on a real node and on the embedded store).
//!
//! ## Invariants the tests check
//! - at most one holder per lock id (hold intervals never overlap, over many seeds, in
//!   simulated and wall time) — the conformance suite;
//! - fencing tokens strictly increase in grant order, also after a holder crashed;
//! - a crashed holder's lock is free after its TTL and not before;
//! - and the thesis's complaint, measured: the lock is unfair — a releasing thread re-takes it
//!   while the others sleep, so owners come in long bursts (`tests/unfairness.rs`).
//!
//! ## Example
//! ```
//! use lock_core::{context::ClientContext, embedded::{EmbeddedConfig, EmbeddedStore}, Locker};
//! use lock_shadow::{ShadowConfig, ShadowLocker};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! let store = EmbeddedStore::new(EmbeddedConfig::default());
//! let client = store.client("worker-1");
//! let ctx = ClientContext::new("worker-1", client.clock(), 42);
//! let locker = ShadowLocker::new(client, ctx, ShadowConfig::default())?;
//! let guard = locker.lock("invoice-42", None).await?;
//! assert_eq!(guard.token(), 1);
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::lease::{delete_cells, CellKey, CellRelease, LeaseConfig, LeaseKeeper};
use lock_core::lock::{validate_id, AttemptResult, LockError, LockGuard, Locker};
use lock_core::store::{CellStore, CellWrite, Slice};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

/// The main table: who holds the lock.
pub const MAIN_TABLE: &str = "shadow_lock_main";
/// The shadow table: where threads race for the right to write the main table.
pub const SHADOW_TABLE: &str = "shadow_lock_shadow";

/// How long `GetLock` sleeps between attempts.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Backoff {
    /// After `AnotherThreadIsOwner`: uniform in `0..=owner_max`.
    pub owner_max: Duration,
    /// After `ConcurrentAttempt` number `attempt`: uniform in `0..=step·f(attempt)`.
    pub concurrent_step: Duration,
    /// `f`: linear (the thesis) or exponential (the production successor).
    pub growth: Growth,
}

/// How the `ConcurrentAttempt` backoff grows with the attempt number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Growth {
    /// `f(attempt) = attempt` (thesis listing 4).
    Linear,
    /// `f(attempt) = ⌊e^min(attempt, 5)⌋` (the lock that succeeded it in production).
    Exponential,
}

impl Backoff {
    /// Listing 4: 0–1000 ms after `AnotherThreadIsOwner`, 0–50·attempt ms after
    /// `ConcurrentAttempt`.
    pub fn thesis() -> Self {
        Backoff {
            owner_max: Duration::from_millis(1000),
            concurrent_step: Duration::from_millis(50),
            growth: Growth::Linear,
        }
    }
    /// The production successor: 0–50·⌊e^min(attempt,5)⌋ ms after `ConcurrentAttempt`.
    pub fn production() -> Self {
        Backoff { growth: Growth::Exponential, ..Backoff::thesis() }
    }
    /// A named preset: `thesis` or `production`.
    pub fn preset(name: &str) -> Option<Self> {
        match name {
            "thesis" => Some(Backoff::thesis()),
            "production" => Some(Backoff::production()),
            _ => None,
        }
    }
    /// The upper bound of the sleep after `ConcurrentAttempt` number `attempt` (from 1).
    pub fn concurrent_max(&self, attempt: u32) -> Duration {
        let factor = match self.growth {
            Growth::Linear => attempt as f64,
            Growth::Exponential => (attempt.min(5) as f64).exp().floor(),
        };
        self.concurrent_step.mul_f64(factor)
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::thesis()
    }
}

/// Settings of the shadow-table lock.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ShadowConfig {
    /// Backoff between attempts of the mandatory lock.
    pub backoff: Backoff,
    /// Step 10 reads the main row again (default). `false` reuses the row read at step 1, the
    /// listing read literally, which admits two holders (see the crate docs); kept only so a
    /// test can show the counterexample.
    pub reread_main: bool,
    /// What step 2 does when the one main cell is the caller's own although it does not hold
    /// the lock (default [`OwnCell::Clear`]; see "A release that timed out" in the crate docs).
    #[serde(default)]
    pub own_cell: OwnCell,
}

/// Step 2 of listing 3 finds the one main cell is the caller's own, though the caller holds no
/// guard: the leftover of a release (or of a failed main write) whose delete timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OwnCell {
    /// Delete the leftover and report `ConcurrentAttempt`: the next attempt goes through the
    /// shadow round like anyone's (the default).
    #[default]
    Clear,
    /// Listing 3, lines 3–4: return `Success` at once. Admits two holders after a release
    /// that timed out (`tests/release_timeout.rs`); kept only so a test can show it.
    Reenter,
}

impl Default for ShadowConfig {
    fn default() -> Self {
        ShadowConfig { backoff: Backoff::thesis(), reread_main: true, own_cell: OwnCell::Clear }
    }
}

/// The shadow-table lock for one owner (thread).
pub struct ShadowLocker<S> {
    store: S,
    ctx: ClientContext,
    config: ShadowConfig,
    rng: Mutex<StdRng>,
}

impl<S: CellStore + Clone> ShadowLocker<S> {
    /// A locker for `ctx.owner` over `store`.
    pub fn new(store: S, ctx: ClientContext, config: ShadowConfig) -> Result<Self, LockError> {
        ctx.validate()?;
        let rng = Mutex::new(StdRng::seed_from_u64(ctx.seed));
        Ok(ShadowLocker { store, ctx, config, rng })
    }

    fn cell(&self) -> CellWrite {
        CellWrite {
            column: self.ctx.owner.clone(),
            value: self.ctx.owner.as_bytes().to_vec(),
            timestamp: self.ctx.timestamps.next(),
            ttl: Some(self.ctx.ttl),
        }
    }

    async fn main_row(
        &self,
        lock_id: &str,
    ) -> Result<std::sync::Arc<[lock_core::Cell]>, LockError> {
        self.store
            .read_shared(MAIN_TABLE, lock_id, Slice::all(), self.ctx.consistency)
            .await
            .map_err(|e| LockError::store(lock_id, e))
    }

    /// Listing 3, one attempt. On `Success` the main cell is ours; returns when its write
    /// started, for the lease.
    pub async fn try_lock_once(
        &self,
        lock_id: &str,
    ) -> Result<(AttemptResult, Instant), LockError> {
        validate_id("lock id", lock_id)?;
        let c = self.ctx.consistency;
        let err = |e| LockError::store(lock_id, e);
        let main = self.main_row(lock_id).await?;
        if main.len() == 1 {
            if main[0].column != self.ctx.owner {
                return Ok((AttemptResult::AnotherThreadIsOwner, lock_core::rt::now()));
            }
            return self.own_leftover(lock_id).await;
        }
        self.store.write(SHADOW_TABLE, lock_id, &[self.cell()], c).await.map_err(err)?;
        let shadow = self.store.read_shared(SHADOW_TABLE, lock_id, Slice::all(), c).await;
        let result = match shadow {
            Ok(shadow) if shadow.len() == 1 && shadow[0].column == self.ctx.owner => {
                // Step 10, with a fresh read (see the crate docs).
                let main_now =
                    if self.config.reread_main { self.main_row(lock_id).await } else { Ok(main) };
                match main_now {
                    Ok(main) if main.is_empty() => {
                        let started = lock_core::rt::now();
                        match self.store.write(MAIN_TABLE, lock_id, &[self.cell()], c).await {
                            Ok(()) => Ok((AttemptResult::Success, started)),
                            Err(e) => {
                                // It may have landed: take it back before giving up.
                                let key = CellKey::new(MAIN_TABLE, lock_id, &self.ctx.owner);
                                let _ = delete_cells(&self.store, &[key], &self.ctx.timestamps, c)
                                    .await;
                                Err(err(e))
                            }
                        }
                    }
                    Ok(_) => Ok((AttemptResult::ConcurrentAttempt, lock_core::rt::now())),
                    Err(e) => Err(e),
                }
            }
            Ok(_) => Ok((AttemptResult::ConcurrentAttempt, lock_core::rt::now())),
            Err(e) => Err(err(e)),
        };
        // Steps 12 and 14: our shadow cell goes in every case.
        let shadow_key = CellKey::new(SHADOW_TABLE, lock_id, &self.ctx.owner);
        let cleanup = delete_cells(&self.store, &[shadow_key], &self.ctx.timestamps, c).await;
        let result = result?;
        cleanup.map_err(err)?;
        Ok(result)
    }

    /// Step 2 found our own cell alone in the main row, though we hold no guard (see
    /// [`OwnCell`]).
    async fn own_leftover(&self, lock_id: &str) -> Result<(AttemptResult, Instant), LockError> {
        let c = self.ctx.consistency;
        let err = |e| LockError::store(lock_id, e);
        match self.config.own_cell {
            OwnCell::Reenter => {
                // The listing: ours, so ours. Rewrite it so the lease starts from a write we
                // know the time of.
                let started = lock_core::rt::now();
                self.store.write(MAIN_TABLE, lock_id, &[self.cell()], c).await.map_err(err)?;
                Ok((AttemptResult::Success, started))
            }
            OwnCell::Clear => {
                // Other quorums may not see it (its delete reached a minority), and one of
                // them may be winning the lock right now: take it back, then compete.
                let key = CellKey::new(MAIN_TABLE, lock_id, &self.ctx.owner);
                delete_cells(&self.store, &[key], &self.ctx.timestamps, c).await.map_err(err)?;
                Ok((AttemptResult::ConcurrentAttempt, lock_core::rt::now()))
            }
        }
    }

    /// Turn a successful attempt into a guard: start the lease on the main cell, then take a
    /// fencing token and check the lease ([`CellRelease::into_guard`]).
    async fn grant(&self, lock_id: &str, main_written: Instant) -> Result<LockGuard, LockError> {
        let c = self.ctx.consistency;
        let lease = LeaseKeeper::start(
            self.store.clone(),
            self.ctx.timestamps.clone(),
            LeaseConfig::new(self.ctx.ttl, c),
        );
        lease.add(
            CellKey::new(MAIN_TABLE, lock_id, &self.ctx.owner),
            self.ctx.owner.as_bytes().to_vec(),
            main_written,
        );
        CellRelease::new(&self.store, &self.ctx, lock_id, lease).into_guard(&self.ctx.owner).await
    }

    fn sleep_for(&self, result: AttemptResult, attempt: &mut u32) -> Duration {
        let b = &self.config.backoff;
        let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            AttemptResult::AnotherThreadIsOwner => {
                Duration::from_micros(rng.random_range(0..=b.owner_max.as_micros() as u64))
            }
            AttemptResult::ConcurrentAttempt => {
                let max = b.concurrent_max(*attempt);
                *attempt += 1;
                Duration::from_micros(rng.random_range(0..=max.as_micros() as u64))
            }
            AttemptResult::Success => Duration::ZERO,
        }
    }
}

#[async_trait]
impl<S: CellStore + Clone> Locker for ShadowLocker<S> {
    fn algorithm(&self) -> &str {
        "shadow"
    }

    fn owner(&self) -> &str {
        &self.ctx.owner
    }

    /// Listing 4.
    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let start = lock_core::rt::now();
        let deadline = timeout.map(|t| start + t);
        let mut attempt = 1;
        loop {
            let (result, written) = self.try_lock_once(lock_id).await?;
            if result == AttemptResult::Success {
                return self.grant(lock_id, written).await;
            }
            let pause = self.sleep_for(result, &mut attempt);
            match deadline {
                Some(d) if lock_core::rt::now() + pause >= d => {
                    lock_core::rt::sleep_until(d).await;
                    return Err(LockError::Timeout {
                        lock_id: lock_id.to_string(),
                        waited: lock_core::rt::elapsed(start),
                    });
                }
                _ => lock_core::rt::sleep(pause).await,
            }
        }
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        match self.try_lock_once(lock_id).await? {
            (AttemptResult::Success, written) => self.grant(lock_id, written).await.map(Some),
            _ => Ok(None),
        }
    }
}
