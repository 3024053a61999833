//! The jedis-lock algorithm (seed 001): `SETNX` / `GET` / `GETSET` on an expiry timestamp.

use crate::keeper::{Cause, Keeper, RedisRelease, Renew, Renewal, Undo};
use crate::link::Conn;
use crate::{check_owner, RedisBackend};
use async_trait::async_trait;
use lock_core::time::{LocalClock, PhysicalClock};
use lock_core::{BackendErrorKind, LockError, LockGuard, Locker};
use std::sync::LazyLock;
use std::time::Duration;
use tokio::time::Instant;

/// Settings of a [`JedisLock`]. [`Default`] is the seed's example: acquire timeout 10 s,
/// expiry 30 s, retry every 100 ms, the system clock, and renewal on.
#[derive(Debug, Clone)]
pub struct JedisConfig {
    /// How long [`JedisLock::acquire`] keeps trying (the library's `timeoutMsecs`, 10 s).
    /// [`Locker::lock`] takes its timeout as an argument instead.
    pub acquire_timeout: Duration,
    /// How far in the future the written expiry lies (the library's `expireMsecs`, 30 s in the
    /// seed's example). Other clients take the lock once their clock passes it.
    pub expiry: Duration,
    /// Sleep between attempts (the library's fixed 100 ms).
    pub retry_interval: Duration,
    /// **Addition, not in jedis-lock**: while held, rewrite the expiry every `expiry / 2`
    /// (compare-and-set on the value we wrote). Off, the lock behaves like the library: it is
    /// up for grabs `expiry` after the grant however long its holder still works.
    pub renewal: bool,
    /// The client's clock, in whose milliseconds expiries are written and judged. Skew it to
    /// show that the algorithm trusts clients' clocks.
    pub clock: LocalClock,
}

impl Default for JedisConfig {
    fn default() -> Self {
        JedisConfig::new(Duration::from_secs(30))
    }
}

impl JedisConfig {
    /// The seed's settings with expiry `expiry`.
    pub fn new(expiry: Duration) -> Self {
        JedisConfig {
            acquire_timeout: Duration::from_secs(10),
            expiry,
            retry_interval: Duration::from_millis(100),
            renewal: true,
            clock: LocalClock::new(PhysicalClock::System, 0),
        }
    }
    /// Read time from `clock` (e.g. a skewed one).
    pub fn with_clock(mut self, clock: LocalClock) -> Self {
        self.clock = clock;
        self
    }
    /// Run as the library does: no renewal.
    pub fn without_renewal(mut self) -> Self {
        self.renewal = false;
        self
    }
    /// Set [`JedisConfig::acquire_timeout`].
    pub fn with_acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }
}

/// The jedis-lock algorithm of seed 001 for one owner. See the crate docs for the protocol,
/// its faults and the additions (renewal, lost signal, fencing).
#[derive(Debug)]
pub struct JedisLock {
    backend: RedisBackend,
    owner: String,
    config: JedisConfig,
}

/// Renewal's compare-and-set: the expiry value is the lock's only identity in this algorithm.
static RENEW_IF_VALUE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  return 1
end
return 0",
    )
});

impl JedisLock {
    pub(crate) fn new(
        backend: RedisBackend,
        owner: &str,
        config: JedisConfig,
    ) -> Result<Self, LockError> {
        check_owner(owner)?;
        if config.expiry < Duration::from_millis(2) {
            return Err(LockError::Config(format!(
                "jedis-lock expiry {:?} is below 2 ms",
                config.expiry
            )));
        }
        if config.retry_interval.is_zero() {
            return Err(LockError::Config("jedis-lock retry interval must be positive".into()));
        }
        Ok(JedisLock { backend, owner: owner.to_string(), config })
    }

    /// The library's `acquire()`: wait at most [`JedisConfig::acquire_timeout`].
    pub async fn acquire(&self, lock_id: &str) -> Result<LockGuard, LockError> {
        self.lock(lock_id, Some(self.config.acquire_timeout)).await
    }

    /// The settings.
    pub fn config(&self) -> &JedisConfig {
        &self.config
    }

    fn now_ms(&self) -> i64 {
        self.config.clock.now_micros().div_euclid(1000)
    }

    fn expiry_ms(&self) -> i64 {
        self.config.expiry.as_millis() as i64
    }

    /// Steps 1 to 3 of the seed, once.
    async fn attempt(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        let key = self.backend.key(lock_id);
        let mut conn = self.backend.conn().await?;
        // One expiry per round, used by SETNX and GETSET alike, as in the library.
        let started = Instant::now();
        let expires = self.now_ms() + self.expiry_ms() + 1;
        let set: i64 = redis::cmd("SETNX")
            .arg(&key)
            .arg(expires)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.backend.err("SETNX", &key, e))?;
        if set == 1 {
            return self.granted(&mut conn, lock_id, key, expires, started).await.map(Some);
        }
        let current: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.backend.err("GET", &key, e))?;
        let Some(current) = current else {
            // Released between SETNX and GET: the library, too, waits for the next round.
            return Ok(None);
        };
        let current_ms: i64 = current.parse().map_err(|_| {
            self.backend.err_text(
                BackendErrorKind::Protocol,
                "reading",
                &key,
                format!("it holds {current:?}, not a jedis-lock expiry timestamp"),
            )
        })?;
        if current_ms < self.now_ms() {
            let old: Option<String> = redis::cmd("GETSET")
                .arg(&key)
                .arg(expires)
                .query_async(&mut conn)
                .await
                .map_err(|e| self.backend.err("GETSET", &key, e))?;
            if old.as_deref() == Some(current.as_str()) {
                return self.granted(&mut conn, lock_id, key, expires, started).await.map(Some);
            }
            // Another client's GETSET came first. Ours has still overwritten its expiry with
            // ours (a few ms apart): the library lives with that, and so does this port.
        }
        Ok(None)
    }

    async fn granted(
        &self,
        conn: &mut Conn,
        lock_id: &str,
        key: String,
        expires: i64,
        started: Instant,
    ) -> Result<LockGuard, LockError> {
        let fence_key = self.backend.fence_key(lock_id);
        // Addition: a fencing token drawn after the grant; the holder before us drew its own
        // before its release, so ours is greater.
        let token: i64 = match redis::cmd("INCR").arg(&fence_key).query_async(conn).await {
            Ok(t) => t,
            Err(e) => {
                let _ = redis::cmd("DEL").arg(&key).query_async::<i64>(conn).await;
                return Err(self.backend.err("INCR", &fence_key, e));
            }
        };
        // The lease, by our clock, ends at `expires - 1` (`now + expiry` when the round began).
        let valid_until = started + self.config.expiry;
        let renew = JedisRenew {
            backend: self.backend.clone(),
            key: key.clone(),
            written: expires,
            clock: self.config.clock.clone(),
            expiry: self.config.expiry,
        };
        let every = self.config.renewal.then_some(self.config.expiry / 2);
        let (lease, keeper) =
            Keeper::spawn(valid_until, every, self.config.retry_interval, Box::new(renew), None);
        let deadline = keeper.deadline();
        let release = RedisRelease { keeper, backend: self.backend.clone(), key, undo: Undo::Del };
        let guard = LockGuard::new(lock_id, &self.owner, token as u64, lease, Box::new(release));
        Ok(guard.with_deadline(deadline))
    }
}

struct JedisRenew {
    backend: RedisBackend,
    key: String,
    written: i64,
    clock: LocalClock,
    expiry: Duration,
}

#[async_trait]
impl Renew for JedisRenew {
    async fn renew(&mut self, _cause: Cause) -> Result<Renewal, LockError> {
        let sent = Instant::now();
        let next = self.clock.now_micros().div_euclid(1000) + self.expiry.as_millis() as i64 + 1;
        let mut conn = self.backend.conn().await?;
        let swapped: i64 = RENEW_IF_VALUE
            .key(&self.key)
            .arg(self.written)
            .arg(next)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.backend.err("renewal script on", &self.key, e))?;
        if swapped == 1 {
            self.written = next;
            Ok(Renewal::Extended(sent + self.expiry))
        } else {
            // The value is the only identity this algorithm has: a different value means the
            // lock expired and was taken (or a losing GETSET overwrote ours; indistinguishable,
            // so the holder is told the safe thing).
            Ok(Renewal::Gone(format!(
                "{} no longer holds the expiry {} this holder wrote: the lock expired and another client took it",
                self.key, self.written
            )))
        }
    }
}

polling_locker!(JedisLock, "redis-jedis");
