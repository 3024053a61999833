//! The counting semaphore on one Redis server (`redis-semaphore`): N permits whose holders keep
//! leases by the server's clock, on the leased queue of asks the reader-writer lock uses too
//! ([`crate::queue`] has the keys, the scripts and why never more than N are held).
//!
//! Redisson's `RPermitExpirableSemaphore` leases permits too, but it computes their expiry
//! from the client's clock and lets any acquire take whatever permits are free. Here:
//!
//! - **Expiry by the server's clock.** Each ask's lease end is the server's `TIME`, read inside
//!   the script, plus the TTL; every script removes the asks whose lease ended before it
//!   counts. Client clocks play no part.
//! - **k permits in one atomic step.** An acquire of k permits is one ask of weight k, granted
//!   whole or not at all by one script, with k tokens from one `INCRBY k` of the semaphore's
//!   counter (the tokens `last - k + 1 ..= last`). An acquire made after other permits were
//!   released carries greater tokens than all of theirs.
//! - **FIFO, so a k-permit ask does not starve.** An ask is granted when the permits of the
//!   asks ahead of it in line, holders and waiters, plus its own are at most N. A later ask of
//!   fewer permits does not pass a waiting ask of more, so the head of the line is served as
//!   soon as enough permits are released; the cost is that permits may stay free while the
//!   head waits for more of them. A first-fit semaphore (Redisson's) keeps permits busier but
//!   lets a stream of 1-permit acquires keep a k-permit acquire waiting indefinitely.
//! - **The size is stored.** The first ask of an idle semaphore writes its N; an ask naming
//!   another N while any ask (holder or waiter) is in line is refused with
//!   [`UsageError::LimitMismatch`](lock_core::UsageError::LimitMismatch), before anything is
//!   written. The size goes with the last ask, so an idle semaphore can be used with another.
//! - **Polling.** A waiter polls every [`SemaphoreConfig::retry_interval`], which also renews
//!   its place's lease, as the reader-writer lock's waiters do (its docs say why not pub/sub).
//! - Holders renew every [`SemaphoreConfig::renew_every`] and are told
//!   [`LeaseState::Lost`](lock_core::LeaseState::Lost) when their lease runs out or their ask is
//!   gone; release, a timeout, a failed call and a dropped `acquire` future remove the ask by
//!   its id and nothing else; `try_acquire` makes one poll that leaves at once unless granted.

use crate::keeper::check_lease;
use crate::queue::{Asker, Keys, Lease, Order, Want};
use crate::{check_owner, RedisBackend};
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::semaphore::{check_acquire, Permits, Semaphore};
use lock_core::{LockError, LockGuard};
use std::time::Duration;

/// Settings of a [`RedisSemaphore`].
#[derive(Debug, Clone, Copy)]
pub struct SemaphoreConfig {
    /// An ask's lease, counted by the server: a holder's, renewed by its keeper, and a
    /// waiter's, renewed by its polls.
    pub ttl: Duration,
    /// How often a holder renews (default `ttl / 2`).
    pub renew_every: Duration,
    /// Sleep between a waiter's polls, and between renewal retries after an error (default
    /// 50 ms).
    pub retry_interval: Duration,
}

impl Default for SemaphoreConfig {
    fn default() -> Self {
        SemaphoreConfig::new(Duration::from_secs(10))
    }
}

impl SemaphoreConfig {
    /// TTL `ttl`, renewal every `ttl / 2`, polls every 50 ms.
    pub fn new(ttl: Duration) -> Self {
        SemaphoreConfig { ttl, renew_every: ttl / 2, retry_interval: Duration::from_millis(50) }
    }
}

/// The Redis semaphore for one owner. The crate docs ("The reader-writer lock and the
/// semaphore") give the protocol, its invariants and its choices.
#[derive(Debug)]
pub struct RedisSemaphore {
    backend: RedisBackend,
    owner: String,
    config: SemaphoreConfig,
}

impl RedisSemaphore {
    pub(crate) fn new(
        backend: RedisBackend,
        owner: &str,
        config: SemaphoreConfig,
    ) -> Result<Self, LockError> {
        check_owner(owner)?;
        check_lease("semaphore", config.ttl, config.renew_every, config.retry_interval)?;
        Ok(RedisSemaphore { backend, owner: owner.to_string(), config })
    }

    /// The settings.
    pub fn config(&self) -> &SemaphoreConfig {
        &self.config
    }

    /// The key of `semaphore_id`'s line; its other keys add `/expiry`, `/asks`, `/fence` and
    /// `/size`.
    pub fn key(&self, semaphore_id: &str) -> String {
        format!("{}/sem", self.backend.key(semaphore_id))
    }

    /// The ask, after the checks that send nothing.
    fn asker<'a>(
        &'a self,
        semaphore_id: &'a str,
        limit: u32,
        count: u32,
    ) -> Result<Asker<'a>, LockError> {
        validate_id("semaphore id", semaphore_id)?;
        check_acquire(semaphore_id, limit, count)?;
        Ok(Asker {
            backend: &self.backend,
            owner: &self.owner,
            id: semaphore_id,
            keys: Keys::new(self.key(semaphore_id), true),
            want: Want::Permits { count, limit },
            order: Order::Fifo,
            lease: Lease {
                ttl: self.config.ttl,
                renew_every: self.config.renew_every,
                retry_interval: self.config.retry_interval,
            },
        })
    }
}

/// The permits of a grant whose guard carries the last of its `count` tokens.
fn permits(guard: LockGuard, limit: u32, count: u32) -> Permits {
    let last = guard.token();
    Permits::new(guard, limit, (last + 1 - u64::from(count)..=last).collect())
}

#[async_trait]
impl Semaphore for RedisSemaphore {
    fn algorithm(&self) -> &str {
        "redis-semaphore"
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    async fn acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
        timeout: Option<Duration>,
    ) -> Result<Permits, LockError> {
        let guard = self.asker(semaphore_id, limit, count)?.wait(timeout).await?;
        Ok(permits(guard, limit, count))
    }

    async fn try_acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
    ) -> Result<Option<Permits>, LockError> {
        let guard = self.asker(semaphore_id, limit, count)?.once().await?;
        Ok(guard.map(|g| permits(g, limit, count)))
    }
}
