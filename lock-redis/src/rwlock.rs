//! The reader-writer lock on one Redis server (`redis-rw`): a leased queue of read and write
//! asks ([`crate::queue`] has the keys, the scripts and why they exclude), served in line by
//! default ([`WriterPolicy::Fifo`]), or readers first as Redisson's `RReadWriteLock` serves them
//! ([`WriterPolicy::ReadersFirst`], [`RwLockConfig::policy`]).
//!
//! # Protocol
//! 1. `lock` draws an ask id (owner id plus 64 random bits) and runs the ask script: expired
//!    asks are removed, the ask joins the line (its place numbered by `INCR` of the lock's
//!    counter) with a lease of one TTL by the server's clock, and is granted if its policy
//!    allows. A grant draws the guard's fencing token from the same counter in the same
//!    script.
//! 2. Not granted: the waiter polls again every [`RwLockConfig::retry_interval`], which also
//!    renews its place's lease; a waiter that crashes leaves the line one TTL after its last
//!    poll. Transient server failures are retried within the call's deadline
//!    ([`lock_core::retry`]).
//! 3. Held: the lease keeper renews the ask's lease every [`RwLockConfig::renew_every`] while the
//!    ask is still in line, and tells the holder
//!    [`LeaseState::Lost`](lock_core::LeaseState::Lost) when the lease runs out without a
//!    renewal (one TTL after the last successful one was sent) or a renewal finds the ask gone.
//! 4. Release, a timeout, a failed call and a dropped `lock` future remove the ask by its id and
//!    nothing else; `try_lock` polls once with an ask that leaves at once unless granted.
//!
//! # Policies, and who starves
//! - [`WriterPolicy::Fifo`] (the default): a read is granted when no write is ahead of it in
//!   line, a write when nothing is. A writer waits only for the asks ahead of it, so a stream
//!   of readers cannot keep it out; a reader asking after a waiting writer waits for that
//!   writer even when it could have joined the readers holding. Every other reader-writer lock
//!   of this workspace (the queue lock's, the lock service's, ZooKeeper's and etcd's recipes)
//!   works so, and a lock should not starve anyone by default.
//! - [`WriterPolicy::ReadersFirst`]: a read is granted whenever no write holds, a write when
//!   nothing holds and no write waits ahead of it. This is what Redis users run with Redisson:
//!   its `RReadWriteLock` keeps a hash whose `mode` field is `read` or `write`, and a reader
//!   enters whenever the mode is read, whoever waits. It **starves writers**: a writer waits
//!   for as long as reads keep overlapping, however long that is, since each new reader enters
//!   beside the last. `tests/rwlock_policy.rs` shows it: under a stream of overlapping readers
//!   the readers-first writer waits until the stream ends, while the FIFO writer is granted as
//!   soon as the readers ahead of it leave.
//!
//! # Fencing tokens
//! One counter per lock numbers places in line and grants alike, incremented inside the
//! scripts, so a grant's token exceeds every token drawn before it: a write's exceeds every
//! earlier hold's, and an ask made after a hold ended carries a greater one. Readers granted
//! at once carry distinct tokens.
//!
//! # Choices and their cost
//! - **Polling, not pub/sub.** A waiter polls every retry interval, as the token lock does; a
//!   poll is one `EVALSHA`. Pub/sub would wake waiters sooner after a release, at the price of
//!   a subscription per waiter, a channel in every ACL user, and a poll anyway to renew the
//!   waiter's place.
//! - **One script reads the whole line.** A poll walks the line in order, so its cost grows
//!   with the number of asks on the lock; the server runs nothing else meanwhile.
//! - **Not told at once.** Tracking
//!   ([`RedisConnectConfig::tracking`](crate::RedisConnectConfig::tracking)) tells the token
//!   lock's holder of a change to its key; here every ask changes the lock's keys, so a holder
//!   learns of its ask's removal at its next renewal. Its scripts' reads are tracked all the
//!   same, costing pushes nobody listens to.
//! - **No upgrade.** A write ask by an owner holding the lock for reading would wait for
//!   itself; it is refused with [`UsageError::Upgrade`](lock_core::UsageError::Upgrade) before
//!   anything is sent.

use crate::keeper::check_lease;
use crate::queue::{Asker, Keys, Lease, Order, Want};
use crate::{check_owner, RedisBackend};
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::rwlock::{Access, ReadHolds, RwLocker, WriterPolicy};
use lock_core::{LockError, LockGuard};
use std::time::Duration;

/// Settings of a [`RedisRwLock`].
#[derive(Debug, Clone, Copy)]
pub struct RwLockConfig {
    /// An ask's lease, counted by the server: a holder's, renewed by its keeper, and a
    /// waiter's, renewed by its polls.
    pub ttl: Duration,
    /// How often a holder renews (default `ttl / 2`).
    pub renew_every: Duration,
    /// Sleep between a waiter's polls, and between renewal retries after an error (default
    /// 50 ms).
    pub retry_interval: Duration,
    /// Whether later readers pass a waiting writer (default [`WriterPolicy::Fifo`]: no).
    pub policy: WriterPolicy,
}

impl Default for RwLockConfig {
    fn default() -> Self {
        RwLockConfig::new(Duration::from_secs(10))
    }
}

impl RwLockConfig {
    /// TTL `ttl`, renewal every `ttl / 2`, polls every 50 ms, FIFO.
    pub fn new(ttl: Duration) -> Self {
        RwLockConfig {
            ttl,
            renew_every: ttl / 2,
            retry_interval: Duration::from_millis(50),
            policy: WriterPolicy::Fifo,
        }
    }

    /// The same settings with writer policy `policy`.
    pub fn with_policy(self, policy: WriterPolicy) -> Self {
        RwLockConfig { policy, ..self }
    }
}

/// The Redis reader-writer lock for one owner. The crate docs ("The reader-writer lock and the
/// semaphore") give the protocol, its invariants and its choices.
#[derive(Debug)]
pub struct RedisRwLock {
    backend: RedisBackend,
    owner: String,
    config: RwLockConfig,
    reads: ReadHolds,
}

impl RedisRwLock {
    pub(crate) fn new(
        backend: RedisBackend,
        owner: &str,
        config: RwLockConfig,
    ) -> Result<Self, LockError> {
        check_owner(owner)?;
        check_lease("reader-writer lock", config.ttl, config.renew_every, config.retry_interval)?;
        Ok(RedisRwLock { backend, owner: owner.to_string(), config, reads: ReadHolds::default() })
    }

    /// The settings.
    pub fn config(&self) -> &RwLockConfig {
        &self.config
    }

    /// The key of `lock_id`'s line; its other keys add `/expiry`, `/asks` and `/fence`.
    pub fn key(&self, lock_id: &str) -> String {
        format!("{}/rw", self.backend.key(lock_id))
    }

    /// The ask of `lock_id` for `access`, after the checks that send nothing.
    fn asker<'a>(&'a self, lock_id: &'a str, access: Access) -> Result<Asker<'a>, LockError> {
        validate_id("lock id", lock_id)?;
        self.reads.check(lock_id, &self.owner, access)?;
        Ok(Asker {
            backend: &self.backend,
            owner: &self.owner,
            id: lock_id,
            keys: Keys::new(self.key(lock_id), false),
            want: match access {
                Access::Read => Want::Read,
                Access::Write => Want::Write,
            },
            order: match self.config.policy {
                WriterPolicy::Fifo => Order::Fifo,
                WriterPolicy::ReadersFirst => Order::ReadersFirst,
            },
            lease: Lease {
                ttl: self.config.ttl,
                renew_every: self.config.renew_every,
                retry_interval: self.config.retry_interval,
            },
        })
    }

    /// A read guard is registered, so that a write ask of the same lock is refused.
    fn granted(&self, access: Access, guard: LockGuard) -> LockGuard {
        match access {
            Access::Read => self.reads.track(guard),
            Access::Write => guard,
        }
    }
}

#[async_trait]
impl RwLocker for RedisRwLock {
    fn algorithm(&self) -> &str {
        match self.config.policy {
            WriterPolicy::Fifo => "redis-rw",
            WriterPolicy::ReadersFirst => "redis-rw-readers-first",
        }
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    fn writer_policy(&self) -> WriterPolicy {
        self.config.policy
    }

    async fn lock(
        &self,
        lock_id: &str,
        access: Access,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, LockError> {
        let guard = self.asker(lock_id, access)?.wait(timeout).await?;
        Ok(self.granted(access, guard))
    }

    async fn try_lock(
        &self,
        lock_id: &str,
        access: Access,
    ) -> Result<Option<LockGuard>, LockError> {
        let guard = self.asker(lock_id, access)?.once().await?;
        Ok(guard.map(|g| self.granted(access, g)))
    }
}
