//! # The bakery lock
//!
//! Lamport's bakery algorithm (1974) on two Cassandra column families, as `seeds/002` (a 2012
//! blog post, "purely experimental", after an idea on the Cassandra wiki; its PHP code used
//! phpcassa at QUORUM) describes it. Customers draw a number on entering; the smallest
//! number is served first. The seed's author was "not sure it'll work at all": the tests
//! below decide, and their verdict is that **it holds at QUORUM** and fails at ONE.
//!
//! ## Protocol
//!
//! Two tables, [`CHOOSING_TABLE`] and [`NUMBERS_TABLE`], one row per lock id, one cell per
//! contender with its owner id (the seed's PID) as column name. `Choosing[me]` is
//! [`CHOOSING_TRUE`] or [`CHOOSING_FALSE`]; `Numbers[me]` is a number ([`number_value`]).
//!
//! [`Locker::lock`] (the seed's steps 1–9):
//! 1. wait until no other contender's `Choosing` cell is true;
//! 2. write `Choosing[me] = true`;
//! 3. read the `Numbers` row and take one more than its greatest number ([`next_number`]; 1 for
//!    an empty row);
//! 4. write `Numbers[me] = number`;
//! 5. write `Choosing[me] = false`;
//! 6. wait until no other contender's `Choosing` cell is true ([`first_choosing`]);
//! 7. wait until no other `Numbers` cell holds a smaller `(number, owner)` pair ([`turn`]);
//! 8. enter: take a fencing token, check the lease, hand out the guard.
//!
//! Release (step 10) deletes both our cells. [`Locker::try_lock`] is one pass that refuses
//! instead of waiting: refused at once, writing nothing, when someone is choosing (step 1) or
//! any number is in the row (it would be smaller than ours); otherwise steps 2–5, and refused
//! — deleting both cells — when step 6 or 7 would wait.
//!
//! ## Choices the seed leaves open
//! - **Numbers** are decimal, zero-padded to 20 digits, and compared as numbers: as plain
//!   strings `"9" > "10"`, and "the last number registered" (the last column: column order is
//!   owner order) is not the greatest one. Ties (two contenders that read the same row at
//!   step 3) are broken by owner id, byte-wise (seed step 8).
//! - **Foreign values fail safe**: a `Choosing` value other than `false` counts as choosing, a
//!   `Numbers` value that is not a number counts as smaller than ours; both make us wait.
//! - **Poll interval**: [`DEFAULT_POLL_INTERVAL`] (20 ms, as the queue lock's, so the two
//!   compare on equal terms): a waiter costs at most 50 reads a second, and notices a release
//!   10 ms later on average. Configurable in [`BakeryConfig`].
//! - **Step 1** is the seed's, not Lamport's; safety does not rest on it. It keeps newcomers
//!   from drawing while someone draws (fewer ties), at the price of one read.
//! - **Step 6** waits for one read of the whole row showing nobody choosing, where Lamport's
//!   waits for each process in turn. Both are safe (below); the snapshot can be held up by a
//!   stream of choosers, but in the tests (up to 64 contenders) no mandatory waiter starved.
//!
//! ## Leases and fencing
//! Both cells carry the context's TTL and are kept by one [`LeaseKeeper`] from the moment they
//! are written: a waiter's number would otherwise expire under a long wait, and others would
//! take it for gone and enter ahead of it. A cell joins the lease before its write goes out, so
//! a write that failed — but may have landed — is deleted with the rest on any failure or
//! timeout.
//! Step 5 goes out only while the lease still holds (`Choosing[me] = true` must not have
//! expired mid-choice: others would have taken us for not choosing before our number was
//! there); the grant checks the lease again after the fencing token ([`lock_core::fence`]), as
//! the other Cassandra locks do. A waiter whose lease is lost, or whose number vanished from
//! the row, stops with [`LockError::LeaseLost`]. A renewal racing step 5 may put `true` back
//! until the next renewal (TTL/2): that can only make others wait, never enter.
//!
//! The bakery compares no clocks: write timestamps only order one client's writes to its own
//! cells, so clock skew between clients cannot break it (tested up to ±1 h). Each contender
//! reuses its two cells, so rows stay as small as the set of contenders (no tombstone build-up
//! as in the queue lock's row: a read scans at most K − 1 tombstones for K contenders, so
//! throughput does not decay over a long run; `results/longrun/README.md` has the runs);
//! numbers grow while the row never empties, and start again at 1 when it does.
//!
//! ## Why it holds at QUORUM
//! Suppose `i` and `j` both hold the lock, with `(n_i, i) < (n_j, j)`. `j`'s last step-7 read
//! did not show `n_i`, so `i`'s step-4 write had not completed when that read began (a QUORUM
//! read sees every QUORUM write completed before it: the thesis's Lemma 1). Take `j`'s
//! step-6 read, which came earlier, and what it showed of `i`:
//! - **nothing**: `i`'s step-2 write had not completed when that read began; `j`'s step 4 had.
//!   So `i`'s step 3 began after `j`'s number was written, saw it, and `n_i > n_j`: contradiction.
//! - **`false`**: some replica had applied `i`'s step 5, which `i` sends only after its step 4
//!   completed; `j`'s step-7 read began later still and must have seen `n_i`: contradiction.
//! - **`true`**: then `j` would have waited.
//!
//! (A `false` left from an earlier attempt is deleted, with a newer timestamp, before the next
//! one; a newer `true` not yet visible is the first case.) The argument needs both cells to stay
//! in the store while they matter, which the lease and its checks provide, and fails at ONE,
//! where a read need not see a completed write.
//!
//! ## Verdict of the tests
//! - **Conformance** (`tests/conformance.rs`): the shared suite passes, including 64 contenders
//!   over 12 seeds and a multi-thread wall-time run.
//! - **First come, first served** as Lamport defined it: a contender whose doorway (steps 2–5)
//!   ended before another's request began is served first. The guard says when its doorway
//!   ended (`LockGuard::queued_at`), and the suite's `one_lock_one_holder` checks the order.
//!   A grant can still be overtaken by request time, but only by a request whose doorway
//!   overlapped its own: none is overtaken in line. The order comes from the numbers drawn,
//!   not from a clock, so this holds at any clock skew, where the queue locks lose it
//!   (lock-queue's docs; the bench-harness test
//!   `skewed_clocks_break_first_come_first_served_for_the_queue_lock_but_not_the_bakery`
//!   checks both at ±100 ms).
//! - **Hunting a counterexample** (`tests/exclusion.rs`): contenders mixing mandatory locks,
//!   mandatory locks with 1–60 ms timeouts and soft locks, ±5 s clock skew, 50 µs–3 ms round
//!   trips (a read often finds a write on some replicas only). In the suite: 200 seeds on three
//!   replicas, 20 with ±1 h skew, 20 on five replicas, 50 with rolling replica restarts, and a
//!   wall-time run: no overlap, tokens always rising, every mandatory round granted, no cell
//!   left behind. Larger sweeps, with more seeds, more contenders and rolling restarts, run
//!   with `cargo run --release -p lock-bakery --example explore -- sweep` (the docs of
//!   `tests/exclusion.rs` say how to choose them).
//! - **At ONE it breaks.** Traced (seed 28 of
//!   `consistency_one_with_stale_replicas_admits_two_holders`, which checks that it still
//!   reproduces; `explore -- trace` prints its store requests): a contender draws a number
//!   while a replica is down; that replica comes back without its cells (no hinted handoff).
//!   Later another contender, holding a greater number, reads `Numbers` at ONE from that
//!   replica alone, finds no smaller pair and enters; the first, whose reads reach replicas
//!   that have its cell, enters too. `tests/scenarios.rs` scripts the same case
//!   deterministically, and shows that QUORUM refuses it. Latency jitter alone (no stale
//!   replica, the explorer's `EXPLORE=one-jitter`) found no overlap at ONE: the window is a
//!   fraction of a round trip.
//! - **Why step 2 matters** (`tests/scenarios.rs`): a contender that skips it and writes its
//!   number late enters beside the holder; with it, the holder waits at step 6.
//! - **Costs**: a contender that crashes mid-choice blocks everyone at step 1 until its
//!   `Choosing` cell expires (one TTL; a crashed holder costs the same); the soft lock only
//!   succeeds when nobody holds or waits.
//!
//! ## Example
//! ```
//! use lock_core::{context::ClientContext, embedded::{EmbeddedConfig, EmbeddedStore}, Locker};
//! use lock_bakery::{BakeryConfig, BakeryLocker};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), lock_core::LockError> {
//! let store = EmbeddedStore::new(EmbeddedConfig::default());
//! let client = store.client("worker-1");
//! let ctx = ClientContext::new("worker-1", client.clock(), 7);
//! let locker = BakeryLocker::new(client, ctx, BakeryConfig::default())?;
//! let guard = locker.lock("invoice-42", None).await?;
//! assert_eq!(guard.token(), 1);
//! // ... the critical section ...
//! guard.release().await?;
//! assert!(locker.try_lock("invoice-42").await?.is_some());
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use async_trait::async_trait;
use lock_core::context::ClientContext;
use lock_core::lease::{CellKey, CellRelease, LeaseConfig, LeaseKeeper};
use lock_core::lock::{validate_id, LockError, LockGuard, Locker};
use lock_core::store::{Cell, CellStore, CellWrite, Consistency, Slice, StoreError};
use poll::{Place, Polled};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

mod poll;

/// The `Choosing` column family: one row per lock id, one cell per contender that is taking,
/// or has taken, a number.
pub const CHOOSING_TABLE: &str = "bakery_choosing";
/// The `Numbers` column family: one row per lock id, one cell per contender holding a number.
pub const NUMBERS_TABLE: &str = "bakery_numbers";

/// The value of a `Choosing` cell while its owner is choosing.
pub const CHOOSING_TRUE: &[u8] = b"true";
/// The value of a `Choosing` cell once its owner has written its number.
pub const CHOOSING_FALSE: &[u8] = b"false";

/// The default wait between two reads while waiting (20 ms, as the queue lock's).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Settings of the bakery lock.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BakeryConfig {
    /// Wait between two reads of the `Choosing` or `Numbers` row while waiting.
    pub poll_interval: Duration,
}

impl Default for BakeryConfig {
    fn default() -> Self {
        BakeryConfig { poll_interval: DEFAULT_POLL_INTERVAL }
    }
}

/// The value of a `Numbers` cell holding `number`: decimal, zero-padded to 20 digits, so that
/// byte-wise order (cqlsh, sorting) agrees with numeric order. Parse it with [`parse_number`].
pub fn number_value(number: u64) -> Vec<u8> {
    format!("{number:020}").into_bytes()
}

/// The number a `Numbers` cell holds; `None` when the value is not a decimal number.
///
/// Exactly what `str::parse::<u64>` accepts (an optional `+`, then one or more ASCII digits,
/// no overflow), read from the bytes directly, eight digits at a time: every waiter parses
/// every cell of the row at each poll (64 cells of 20 digits 50 times a simulated second),
/// and a digit-by-digit parse was the simulator's costliest line after the store's merge.
pub fn parse_number(value: &[u8]) -> Option<u64> {
    let mut digits = match value {
        [b'+', rest @ ..] => rest,
        _ => value,
    };
    if digits.is_empty() {
        return None;
    }
    let mut n = 0u64;
    while let Some((chunk, rest)) = digits.split_first_chunk::<8>() {
        n = n.checked_mul(100_000_000)?.checked_add(eight_digits(*chunk)?)?;
        digits = rest;
    }
    digits.iter().try_fold(n, |n, &b| {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Eight ASCII digits, most significant first, as a number; `None` unless all are digits.
/// The bytes are handled as one little-endian word: a byte is a digit when its high nibble is
/// 3 and adding 6 keeps it so; then pairs, quadruples and the octet are combined with two
/// multiplications (the usual "SWAR" parse).
fn eight_digits(chunk: [u8; 8]) -> Option<u64> {
    const HIGH_NIBBLES: u64 = 0xF0F0_F0F0_F0F0_F0F0;
    const ZEROS: u64 = 0x3030_3030_3030_3030;
    let word = u64::from_le_bytes(chunk);
    let all_digits = word & HIGH_NIBBLES == ZEROS
        && word.wrapping_add(0x0606_0606_0606_0606) & HIGH_NIBBLES == ZEROS;
    if !all_digits {
        return None;
    }
    let v = word - ZEROS;
    // Each byte now holds its digit; neighbours combine into two-digit values...
    let v = v.wrapping_mul(10).wrapping_add(v >> 8);
    // ...and those into the eight-digit number (the low byte of each 16-bit lane matters).
    const LANES: u64 = 0x0000_00FF_0000_00FF;
    const MUL_1: u64 = 100 + (1_000_000 << 32);
    const MUL_2: u64 = 1 + (10_000 << 32);
    Some(
        (v & LANES).wrapping_mul(MUL_1).wrapping_add(((v >> 16) & LANES).wrapping_mul(MUL_2)) >> 32,
    )
}

/// True when a `Choosing` cell says its owner is choosing. Anything but [`CHOOSING_FALSE`]
/// counts as choosing: an unknown value makes others wait, never enter.
pub fn is_choosing(value: &[u8]) -> bool {
    value != CHOOSING_FALSE
}

/// What the `Choosing` and `Numbers` rows of one lock id hold, for tests and tools.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BakeryRows {
    /// `(owner, choosing)` per `Choosing` cell, in column order.
    pub choosing: Vec<(String, bool)>,
    /// `(owner, number)` per `Numbers` cell, in column order (`None`: not a number).
    pub numbers: Vec<(String, Option<u64>)>,
}

impl BakeryRows {
    /// True when neither row holds a cell.
    pub fn is_empty(&self) -> bool {
        self.choosing.is_empty() && self.numbers.is_empty()
    }
}

/// Read both rows of `lock_id`.
pub async fn read_rows<S: CellStore + ?Sized>(
    store: &S,
    lock_id: &str,
    consistency: Consistency,
) -> Result<BakeryRows, StoreError> {
    let choosing = store.read(CHOOSING_TABLE, lock_id, Slice::all(), consistency).await?;
    let numbers = store.read(NUMBERS_TABLE, lock_id, Slice::all(), consistency).await?;
    Ok(BakeryRows {
        choosing: choosing.into_iter().map(|c| (c.column, is_choosing(&c.value))).collect(),
        numbers: numbers.into_iter().map(|c| (c.column, parse_number(&c.value))).collect(),
    })
}

/// Step 3: the number to take after reading the `Numbers` row: one more than the greatest
/// number of the others (1 for an empty row). Cells that hold no number are skipped.
pub fn next_number(numbers: &[Cell], me: &str) -> u64 {
    numbers
        .iter()
        .filter(|c| c.column != me)
        .filter_map(|c| parse_number(&c.value))
        .max()
        .unwrap_or(0)
        .saturating_add(1)
}

/// Who, among the `Choosing` cells of others, is choosing (the first in column order).
pub fn first_choosing<'a>(choosing: &'a [Cell], me: &str) -> Option<&'a str> {
    choosing.iter().find(|c| c.column != me && is_choosing(&c.value)).map(|c| c.column.as_str())
}

/// The outcome of reading the `Numbers` row while waiting for our turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// No other cell holds a smaller `(number, owner)` pair: the lock is ours.
    Ours,
    /// `owner` holds a smaller pair (a cell that holds no number counts as smaller).
    Behind {
        /// The first contender ahead of us, in `(number, owner)` order.
        owner: String,
        /// Its number (`None`: its cell holds no number).
        number: Option<u64>,
    },
    /// Our own cell is missing or holds another number: our lease is gone.
    Gone,
}

/// Step 6: is it our turn, given the `Numbers` row? Pairs compare number first, then owner id
/// byte-wise (ties of equal numbers are broken by owner id).
pub fn turn(numbers: &[Cell], me: &str, mine: u64) -> Turn {
    match ahead_of(numbers, me, mine) {
        Ahead::Nobody => Turn::Ours,
        Ahead::Owner { owner, number } => Turn::Behind { owner: owner.to_string(), number },
        Ahead::Gone => Turn::Gone,
    }
}

/// [`Turn`] with the owner ahead borrowed from the row: a waiter polling for its turn looks
/// at nothing but the verdict, and copies no owner id at each poll.
enum Ahead<'a> {
    Nobody,
    Owner { owner: &'a str, number: Option<u64> },
    Gone,
}

fn ahead_of<'a>(numbers: &'a [Cell], me: &str, mine: u64) -> Ahead<'a> {
    // One pass over the row (every waiter runs this at each poll): our own number, and the
    // least pair ahead of ours.
    let mut own: Option<&Cell> = None;
    let mut ahead: Option<(Option<u64>, &str)> = None;
    for c in numbers {
        if c.column == me {
            own = own.or(Some(c));
            continue;
        }
        let pair = (parse_number(&c.value), c.column.as_str());
        // A cell that holds no number sorts first (`None < Some`): we wait for it to go.
        if pair.0.is_none_or(|n| (n, pair.1) < (mine, me)) && ahead.is_none_or(|a| pair < a) {
            ahead = Some(pair);
        }
    }
    if own.is_none_or(|c| parse_number(&c.value) != Some(mine)) {
        return Ahead::Gone;
    }
    match ahead {
        None => Ahead::Nobody,
        Some((number, owner)) => Ahead::Owner { owner, number },
    }
}

/// A contender that has drawn its number: the number and the lease on its two cells.
struct Ticket {
    number: u64,
    lease: LeaseKeeper,
    /// When the doorway ended (the number written, choosing cleared).
    drawn: Instant,
}

/// Why a wait ended without the lock.
enum Stop {
    Timeout,
    Failed(LockError),
}

/// Lamport's bakery lock for one owner (the seed's PID).
pub struct BakeryLocker<S> {
    store: S,
    ctx: ClientContext,
    config: BakeryConfig,
}

impl<S: CellStore + Clone> BakeryLocker<S> {
    /// A locker for `ctx.owner` over `store`.
    pub fn new(store: S, ctx: ClientContext, config: BakeryConfig) -> Result<Self, LockError> {
        ctx.validate()?;
        if config.poll_interval.is_zero() {
            return Err(LockError::Config(
                "the bakery lock's poll interval must be above zero".into(),
            ));
        }
        Ok(BakeryLocker { store, ctx, config })
    }

    /// The settings.
    pub fn config(&self) -> &BakeryConfig {
        &self.config
    }

    fn me(&self) -> &str {
        &self.ctx.owner
    }

    async fn read(&self, table: &str, lock_id: &str) -> Result<Vec<Cell>, LockError> {
        self.store
            .read(table, lock_id, Slice::all(), self.ctx.consistency)
            .await
            .map_err(|e| LockError::store(lock_id, e))
    }

    /// [`BakeryLocker::read`] as a shared snapshot ([`CellStore::read_shared`]): the waits
    /// read a whole row at every poll, and a store that hands out one snapshot per unchanged
    /// row lets a waiter tell an unchanged row by its address ([`Polled`]).
    async fn read_shared(&self, table: &str, lock_id: &str) -> Result<Arc<[Cell]>, LockError> {
        self.store
            .read_shared(table, lock_id, Slice::all(), self.ctx.consistency)
            .await
            .map_err(|e| LockError::store(lock_id, e))
    }

    /// Register `column` of `table` with the lease under `value` (before writing it, so that
    /// a failed or abandoned write is cleaned up too), then write it.
    async fn put(
        &self,
        lease: &LeaseKeeper,
        table: &str,
        lock_id: &str,
        value: &[u8],
    ) -> Result<(), LockError> {
        let started = lock_core::rt::now();
        lease.add(CellKey::new(table, lock_id, self.me()), value.to_vec(), started);
        let cell = CellWrite {
            column: self.ctx.owner.clone(),
            value: value.to_vec(),
            timestamp: self.ctx.timestamps.next(),
            ttl: Some(self.ctx.ttl),
        };
        self.store
            .write(table, lock_id, std::slice::from_ref(&cell), self.ctx.consistency)
            .await
            .map_err(|e| LockError::store(lock_id, e))
    }

    /// Leave (timeout, soft lock refused, error): stop the lease and delete both our cells.
    async fn abandon(&self, lock_id: &str, lease: LeaseKeeper) {
        let _ = CellRelease::new(&self.store, &self.ctx, lock_id, lease).run().await;
    }

    /// Sleep one poll interval, or until the deadline if that comes first (then `Timeout`).
    async fn pause(&self, deadline: Option<Instant>) -> Result<(), Stop> {
        let wake = lock_core::rt::now() + self.config.poll_interval;
        match deadline {
            Some(d) if wake >= d => {
                lock_core::rt::sleep_until(d).await;
                Err(Stop::Timeout)
            }
            _ => {
                lock_core::rt::sleep_until(wake).await;
                Ok(())
            }
        }
    }

    /// Steps 2–5: set `Choosing[me] = true`, read `Numbers`, write `Numbers[me] = max + 1`,
    /// set `Choosing[me] = false`. Both cells are leased from the moment they are written; on
    /// any failure both are deleted.
    async fn draw(&self, lock_id: &str) -> Result<Ticket, LockError> {
        let lease = LeaseKeeper::start(
            self.store.clone(),
            self.ctx.timestamps.clone(),
            LeaseConfig::new(self.ctx.ttl, self.ctx.consistency),
        );
        match self.draw_with(lock_id, &lease).await {
            Ok(number) => Ok(Ticket { number, lease, drawn: lock_core::rt::now() }),
            Err(e) => {
                self.abandon(lock_id, lease).await;
                Err(e)
            }
        }
    }

    async fn draw_with(&self, lock_id: &str, lease: &LeaseKeeper) -> Result<u64, LockError> {
        self.put(lease, CHOOSING_TABLE, lock_id, CHOOSING_TRUE).await?;
        let numbers = self.read_shared(NUMBERS_TABLE, lock_id).await?;
        let number = next_number(&numbers, self.me());
        self.put(lease, NUMBERS_TABLE, lock_id, &number_value(number)).await?;
        // `Choosing[me] = true` must not have vanished (expired) while we chose: others would
        // have taken us for not choosing before our number was there.
        if !lease.holds() {
            return Err(lease.lost_error(lock_id, "the lease ran out while choosing a number"));
        }
        self.put(lease, CHOOSING_TABLE, lock_id, CHOOSING_FALSE).await?;
        Ok(number)
    }

    /// Step 6: wait until no `Choosing` cell of another contender is true. `soft` gives up at
    /// the first one instead.
    async fn await_choosers(
        &self,
        lock_id: &str,
        ticket: &Ticket,
        deadline: Option<Instant>,
        soft: bool,
    ) -> Result<(), Stop> {
        let mut choosing = Polled::default();
        loop {
            if ticket.lease.is_lost() {
                return Err(Stop::Failed(
                    ticket.lease.lost_error(lock_id, "lease lost while waiting"),
                ));
            }
            let cells = self.read_shared(CHOOSING_TABLE, lock_id).await.map_err(Stop::Failed)?;
            if choosing.verdict(cells, |c| first_choosing(c, self.me()).is_none()) {
                return Ok(());
            }
            if soft {
                return Err(Stop::Timeout);
            }
            self.pause(deadline).await?;
        }
    }

    /// Step 7: wait until no other contender holds a smaller `(number, owner)` pair. `soft`
    /// gives up at the first one instead.
    async fn await_turn(
        &self,
        lock_id: &str,
        ticket: &Ticket,
        deadline: Option<Instant>,
        soft: bool,
    ) -> Result<(), Stop> {
        let mut numbers = Polled::default();
        loop {
            if ticket.lease.is_lost() {
                return Err(Stop::Failed(
                    ticket.lease.lost_error(lock_id, "lease lost while waiting"),
                ));
            }
            let cells = self.read_shared(NUMBERS_TABLE, lock_id).await.map_err(Stop::Failed)?;
            let me = self.me();
            match numbers.verdict(cells, |c| poll::place_of(c, me, ticket.number)) {
                Place::First => return Ok(()),
                Place::Gone => {
                    return Err(Stop::Failed(
                        ticket
                            .lease
                            .lost_error(lock_id, "our number is no longer in the Numbers row"),
                    ))
                }
                Place::Behind if soft => return Err(Stop::Timeout),
                Place::Behind => self.pause(deadline).await?,
            }
        }
    }

    /// The lock is ours: take a fencing token, check the lease still held, hand out the guard.
    /// Our place was fixed when the doorway (steps 2–5) ended: Lamport's first come, first
    /// served orders us before every request whose doorway began later.
    async fn grant(&self, lock_id: &str, ticket: Ticket) -> Result<LockGuard, LockError> {
        let queued_at = ticket.drawn;
        CellRelease::new(&self.store, &self.ctx, lock_id, ticket.lease)
            .into_guard(self.me())
            .await
            .map(|guard| guard.with_queued_at(queued_at))
    }
}

#[async_trait]
impl<S: CellStore + Clone> Locker for BakeryLocker<S> {
    fn algorithm(&self) -> &str {
        "bakery"
    }

    fn owner(&self) -> &str {
        &self.ctx.owner
    }

    /// Steps 1–7, waiting at steps 1, 6 and 7; a timeout deletes whatever was written.
    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let start = lock_core::rt::now();
        let deadline = timeout.map(|t| start + t);
        let timed_out = || LockError::Timeout {
            lock_id: lock_id.to_string(),
            waited: lock_core::rt::elapsed(start),
        };
        // Step 1: nobody may be choosing when we start (nothing of ours is written yet).
        let mut choosing = Polled::default();
        loop {
            let cells = self.read_shared(CHOOSING_TABLE, lock_id).await?;
            if choosing.verdict(cells, |c| first_choosing(c, self.me()).is_none()) {
                break;
            }
            if self.pause(deadline).await.is_err() {
                return Err(timed_out());
            }
        }
        let ticket = self.draw(lock_id).await?;
        let waited = match self.await_choosers(lock_id, &ticket, deadline, false).await {
            Ok(()) => self.await_turn(lock_id, &ticket, deadline, false).await,
            Err(stop) => Err(stop),
        };
        match waited {
            Ok(()) => self.grant(lock_id, ticket).await,
            Err(stop) => {
                self.abandon(lock_id, ticket.lease).await;
                Err(match stop {
                    Stop::Timeout => timed_out(),
                    Stop::Failed(e) => e,
                })
            }
        }
    }

    /// One pass of steps 1–7 that gives up, deleting its cells, wherever `lock` would wait.
    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        let choosing = self.read(CHOOSING_TABLE, lock_id).await?;
        if first_choosing(&choosing, self.me()).is_some() {
            return Ok(None);
        }
        // Anyone holding a number now would be ahead of the number we would draw.
        let numbers = self.read(NUMBERS_TABLE, lock_id).await?;
        if numbers.iter().any(|c| c.column != self.me()) {
            return Ok(None);
        }
        let ticket = self.draw(lock_id).await?;
        let waited = match self.await_choosers(lock_id, &ticket, None, true).await {
            Ok(()) => self.await_turn(lock_id, &ticket, None, true).await,
            Err(stop) => Err(stop),
        };
        match waited {
            Ok(()) => self.grant(lock_id, ticket).await.map(Some),
            Err(stop) => {
                self.abandon(lock_id, ticket.lease).await;
                match stop {
                    Stop::Timeout => Ok(None),
                    Stop::Failed(e) => Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(column: &str, value: &[u8]) -> Cell {
        Cell { column: column.into(), value: value.to_vec(), timestamp: 0 }
    }

    #[test]
    fn numbers_round_trip_and_sort_numerically_as_bytes() {
        for n in [0u64, 1, 9, 10, 99, 100, u64::MAX] {
            assert_eq!(parse_number(&number_value(n)), Some(n));
        }
        // The seed's trap: "9" > "10" as strings. Padded values sort as numbers do.
        assert!(number_value(9) < number_value(10));
        assert_eq!(parse_number(b"10"), Some(10));
        assert_eq!(parse_number(b"x"), None);
    }

    #[test]
    fn parse_number_accepts_what_str_parse_accepts() {
        let max = u64::MAX.to_string();
        let over = "18446744073709551616";
        let cases: [&[u8]; 17] = [
            b"",
            b"+",
            b"-",
            b"-0",
            b"-1",
            b"+7",
            b"++7",
            b"0",
            b"00000000000000000042",
            b" 1",
            b"1 ",
            b"1_000",
            b"12a",
            max.as_bytes(),
            over.as_bytes(),
            &[0xff, b'1'],
            "\u{0661}".as_bytes(),
        ];
        for case in cases {
            let by_str = std::str::from_utf8(case).ok().and_then(|s| s.parse::<u64>().ok());
            assert_eq!(parse_number(case), by_str, "{case:?}");
        }
    }

    #[test]
    fn eight_digits_at_once_agree_with_one_at_a_time() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            // xorshift: a fixed stream of cases, no dependency.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let r = next();
            let len = (r % 26) as usize;
            let mut case: Vec<u8> = (0..len)
                .map(|i| {
                    let b = (next() >> (i % 8)) as u8;
                    // Mostly digits, sometimes a neighbour of the digit range or any byte.
                    match b % 16 {
                        0 => b'0' - 1,
                        1 => b'9' + 1,
                        2 => b,
                        _ => b'0' + b % 10,
                    }
                })
                .collect();
            if r % 7 == 0 {
                case.insert(0, b'+');
            }
            let by_str = std::str::from_utf8(&case).ok().and_then(|s| s.parse::<u64>().ok());
            assert_eq!(parse_number(&case), by_str, "{case:?}");
        }
        assert_eq!(parse_number(&number_value(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_number(b"0000000000000000000000000042"), Some(42));
    }

    #[test]
    fn next_number_is_one_above_the_numeric_maximum_of_the_others() {
        assert_eq!(next_number(&[], "me"), 1);
        let row = [
            cell("a", b"9"),
            cell("b", &number_value(10)),
            cell("me", &number_value(50)),
            cell("z", b"junk"),
        ];
        assert_eq!(next_number(&row, "me"), 11);
    }

    #[test]
    fn ties_are_broken_by_owner_id_and_junk_makes_us_wait() {
        let row = [cell("a", &number_value(3)), cell("b", &number_value(3))];
        assert_eq!(turn(&row, "a", 3), Turn::Ours);
        assert_eq!(turn(&row, "b", 3), Turn::Behind { owner: "a".into(), number: Some(3) });
        let row = [cell("a", &number_value(4)), cell("b", &number_value(3))];
        assert_eq!(turn(&row, "a", 4), Turn::Behind { owner: "b".into(), number: Some(3) });
        let row = [cell("a", &number_value(1)), cell("z", b"??")];
        assert_eq!(turn(&row, "a", 1), Turn::Behind { owner: "z".into(), number: None });
        assert_eq!(turn(&row, "b", 1), Turn::Gone);
        assert_eq!(turn(&[cell("a", &number_value(2))], "a", 1), Turn::Gone);
    }

    #[test]
    fn only_false_means_not_choosing() {
        let row = [cell("a", CHOOSING_FALSE), cell("b", CHOOSING_TRUE), cell("me", CHOOSING_TRUE)];
        assert_eq!(first_choosing(&row, "me"), Some("b"));
        assert_eq!(first_choosing(&row[..1], "me"), None);
        assert!(is_choosing(b"1"));
    }
}
