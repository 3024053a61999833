//! # lock-redis
//!
//! Two Redis locks against a real `redis-server`, side by side: the **jedis-lock** algorithm of
//! seed 001 ([`JedisLock`]) exactly as the seed describes it, and the **token lock** that
//! replaced it in practice ([`TokenLock`]: `SET key token NX PX ttl`, token-checked Lua scripts).
//!
//! ## The jedis-lock protocol (seed 001, SPEC 3.6)
//!
//! The seed (a Czech blog post by the author of `jedis-lock`) gives the acquisition as four
//! steps, with `lock timeout` the lock's expiry and the value a Unix timestamp:
//!
//! 1. `SETNX key <now + expiry + 1>`: reply 1 means the lock is acquired; otherwise go on.
//! 2. `GET key`: if the stored expiry is smaller than now the lock has expired, go on to 3;
//!    otherwise go to 4.
//! 3. `GETSET key <now + expiry + 1>`: if it returns the value read in step 2, the lock is
//!    acquired with a fresh expiry; otherwise go on.
//! 4. Sleep 100 ms and start over at 1, until the acquire timeout (default 10 s) has passed.
//!
//! Release is `DEL key`. The seed's example uses a 10 s acquire timeout and a 30 s expiry;
//! those are [`JedisConfig::default`]. Timestamps are milliseconds, as in the library
//! (`System.currentTimeMillis()`), read from an injected [`LocalClock`] so tests can skew a
//! client's clock.
//!
//! The seed names one drawback itself: a process that dies holding the lock makes the others
//! wait until its expiry. Two more are inherent and are **shown by tests, not hidden**
//! (`tests/faults.rs`):
//! - *it trusts the clients' clocks*: expiry is judged by the reader's clock, so a client whose
//!   clock runs ahead by more than the expiry sees a live lock as expired and takes it with
//!   `GETSET` while its holder still works under it;
//! - *a late release deletes someone else's lock*: `DEL` is unconditional, so a holder whose
//!   expiry passed (a pause, a slow critical section) and who then releases deletes the lock of
//!   the client that took it over, and a third client gets the lock beside the second.
//!
//! ### Additions to the seed (not in jedis-lock), each documented where it lives
//! The shared suite asks every lock for a lease that survives past its TTL, a signal when it is
//! lost, and a fencing token. The acquisition above stays exact; around it [`JedisLock`] adds:
//! - **renewal** every `expiry / 2`, in the algorithm's own terms: the value is the lock's only
//!   identity, so renewal is a compare-and-set of that value (Lua: if the key still holds the
//!   expiry we wrote, write a new one). It can be switched off
//!   ([`JedisConfig::without_renewal`]) to run the library as it was;
//! - **a lost-lease signal**: when the holder's own clock passes the expiry it last wrote
//!   without a successful renewal, or a renewal finds another value in the key;
//! - **a fencing token** from `INCR <key>/fence` right after the grant (a separate counter key,
//!   so the acquisition's commands are untouched).
//!
//! ## The token lock (the modern comparison, SPEC 3.6)
//!
//! 1. Acquire: one Lua script runs `SET key <token> NX PX <ttl>` and, only if that set the key,
//!    `INCR <key>/fence`; the token is the owner id plus 64 random bits, unique per
//!    acquisition. The fencing counter moves in the same atomic step as the grant, so tokens
//!    are strictly increasing in grant order.
//! 2. Not acquired: the mandatory lock retries every [`TokenConfig::retry_interval`] (50 ms)
//!    until its timeout; the soft lock returns at once.
//! 3. Renewal every `ttl / 2`: a Lua script `PEXPIRE`s the key only while it holds our token.
//! 4. Release: a Lua script `DEL`s the key only while it holds our token.
//!
//! Expiry is kept by the server's clock alone (`PX`), so client clocks are irrelevant, and a
//! late release finds another token and deletes nothing.
//!
//! ## Invariants
//! - At most one holder per key, as long as clocks agree (jedis) / always (token, given one
//!   Redis server that does not lose writes: no replication, no failover).
//! - A holder is told [`LeaseState::Lost`](lock_core::LeaseState::Lost) no later than the
//!   moment another client may take the lock: for the token lock, one TTL after the last
//!   renewal *was sent*; for jedis-lock, when its own clock passes the expiry it wrote.
//! - Fencing tokens strictly increase in grant order per lock id.
//! - A mandatory lock that times out has written nothing (both variants write only when they
//!   win).
//! - A mandatory lock whose future is dropped while its winning command is in flight leaves a
//!   key no guard will release: it blocks the lock until its TTL (token) or expiry (jedis).
//!   Bound the wait with the `timeout` argument rather than by dropping the future.
//! - Keys: `<prefix><lock id>` and `<prefix><lock id>/fence`; lock ids cannot contain `/`
//!   ([`validate_id`]), so a fence key never collides with a
//!   lock key.
//!
//! ## Server outages and restarts
//! A [`RedisBackend`] re-establishes its connection by itself (`src/link.rs` says how and why
//! not with the driver's `ConnectionManager`): while the server cannot be reached every request
//! fails with [`LockError::Backend`], never later than the connect timeout plus the response
//! timeout, and at once between reconnect attempts (50 ms after a failure, doubling up to
//! [`RedisConnectConfig::max_reconnect_delay`], 1 s by default). Once the server answers again,
//! requests succeed on the same backend after at most that delay; the first request on a
//! connection that broke while idle fails too ("broken pipe": it is what discovers the break).
//! `tests/restart.rs` measures it: with four contenders and a 1 s outage, grants resumed about
//! 0.6 s after the server answered again (the backoff had reached 800 ms), each backend on a
//! connection of its own making, and no failed request took more than about 0.2 s.
//!
//! What a **holder** sees during an outage: its renewals fail and are retried every retry
//! interval; if none succeeds before its lease runs out (one TTL after the last successful
//! renewal was sent, for jedis-lock its own expiry) it is told
//! [`LeaseState::Lost`](lock_core::LeaseState::Lost), "no renewal succeeded before the lease
//! ran out", with the last error. Releasing during the outage fails with
//! [`LockError::Backend`]; the key, if the server still has it, expires by its TTL (token) or
//! its expiry (jedis). A **waiter** (a mandatory lock in its retry loop) fails with the first
//! [`LockError::Backend`] rather than waiting out the outage; the caller decides whether to
//! retry.
//!
//! What happens **after** the restart depends on the server's persistence:
//! - **Without persistence** (Redis's default for a bare `redis-server`, and `save ""`), the
//!   restarted server has no keys: every lock is free at once, *while its holder's lease is
//!   still valid by the holder's reckoning*, and the fencing counter starts again from 0, so a
//!   new holder gets a **smaller** token than the old one. The old holder learns it at its next
//!   renewal (the key no longer holds its token, or value: `Lost`), up to `ttl / 2` later; until
//!   then two clients hold the lock, and fencing by token order cannot protect the resource.
//!   `tests/restart.rs` shows it. Run Redis with persistence, or keep a restarted server out of
//!   service for one TTL (Redlock's "delayed restart"), where that matters.
//! - **With an append-only file synced on every write** (`appendonly yes`, `appendfsync
//!   always`), keys and counters survive; their expiry times are absolute, so TTLs keep running
//!   while the server is down. A holder whose lease did not run out during the outage renews on
//!   the restarted server and keeps the lock; nobody else gets it. With a laxer fsync
//!   (`everysec`) the last second of grants and renewals may be lost, with the effects above.
//!
//! ## Conformance verdict
//! Both variants run the whole shared suite (`lock_core::conformance_suite!`) against a real
//! `redis-server` with a 2 s TTL/expiry (`tests/jedis_conformance.rs`,
//! `tests/token_conformance.rs`): every scenario passes. For [`JedisLock`] this rests on the
//! additions above (renewal, lost signal, fencing) and on the suite's clients sharing one
//! clock; with skewed clocks it fails mutual exclusion, which `tests/faults.rs` demonstrates.
//!
//! ## Example
//! ```no_run
//! use lock_core::Locker;
//! use lock_redis::{JedisConfig, RedisBackend, TokenConfig, Variant};
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! let backend = RedisBackend::connect("redis://127.0.0.1:6379/").await?;
//! // The seed's example: acquire timeout 10 s, expiry 30 s.
//! let jedis = backend.jedis("worker-1", JedisConfig::default())?;
//! let guard = jedis.acquire("lock.name").await?;
//! // ... do some stuff, passing guard.token() to storage that can fence ...
//! guard.release().await?;
//!
//! // The modern variant, as a trait object for a benchmark.
//! let locker = backend.locker("worker-2", Variant::Token(TokenConfig::new(Duration::from_secs(10))))?;
//! if let Some(guard) = locker.try_lock("invoice-42").await? {
//!     guard.release().await?;
//! }
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

/// [`Locker`] for a Redis lock (a struct with `owner`, `config.retry_interval` and
/// `async fn attempt(&self, lock_id) -> Result<Option<LockGuard>, LockError>`): `lock` repeats
/// `attempt` every retry interval until it wins or the timeout passes ([`poll_until`]),
/// `try_lock` makes one attempt.
macro_rules! polling_locker {
    ($lock:ty, $algorithm:literal) => {
        #[async_trait::async_trait]
        impl lock_core::Locker for $lock {
            fn algorithm(&self) -> &str {
                $algorithm
            }
            fn owner(&self) -> &str {
                &self.owner
            }
            async fn lock(
                &self,
                lock_id: &str,
                timeout: Option<std::time::Duration>,
            ) -> Result<lock_core::LockGuard, lock_core::LockError> {
                lock_core::lock::validate_id("lock id", lock_id)?;
                crate::poll_until(
                    lock_id,
                    timeout,
                    || self.config.retry_interval,
                    || self.attempt(lock_id),
                )
                .await
            }
            async fn try_lock(
                &self,
                lock_id: &str,
            ) -> Result<Option<lock_core::LockGuard>, lock_core::LockError> {
                lock_core::lock::validate_id("lock id", lock_id)?;
                self.attempt(lock_id).await
            }
        }
    };
}

mod jedis;
mod keeper;
mod link;
mod redlock;
mod token;

pub use jedis::{JedisConfig, JedisLock};
pub use lock_core::time::LocalClock;
pub use redlock::{RedisMasters, Redlock, RedlockConfig, RedlockVariant, NO_FENCING_TOKEN};
pub use token::{TokenConfig, TokenLock};

use link::{Conn, Link};
use lock_core::lock::validate_id;
use lock_core::{LockError, Locker};
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;

/// The backend name in [`LockError::Backend`].
pub const BACKEND: &str = "redis";

pub(crate) fn backend_err(message: impl Display) -> LockError {
    LockError::Backend { backend: BACKEND, message: message.to_string() }
}

/// How [`RedisBackend::connect_with`] connects, and how it names keys.
#[derive(Debug, Clone)]
pub struct RedisConnectConfig {
    /// Longest wait for the TCP connection and the first `PING` (default 5 s).
    pub connect_timeout: Duration,
    /// Longest wait for any reply (default 2 s). A command without a reply in time fails with
    /// [`LockError::Backend`]; renewal retries it while the lease is still valid.
    pub response_timeout: Duration,
    /// Prepended to every lock id to form its key (default `"lock:"`), so that several
    /// benchmarks or tests can share one server without seeing each other's keys.
    pub key_prefix: String,
    /// The longest wait between two reconnect attempts while the server is unreachable
    /// (default 1 s). The first retry comes 50 ms after a failed attempt and the delay doubles
    /// up to this; between attempts requests fail at once with [`LockError::Backend`].
    pub max_reconnect_delay: Duration,
}

impl Default for RedisConnectConfig {
    fn default() -> Self {
        RedisConnectConfig {
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(2),
            key_prefix: "lock:".into(),
            max_reconnect_delay: Duration::from_secs(1),
        }
    }
}

/// Which Redis lock a [`RedisBackend::locker`] runs.
#[derive(Debug, Clone)]
pub enum Variant {
    /// The jedis-lock algorithm of seed 001.
    Jedis(JedisConfig),
    /// The token lock (`SET NX PX` + Lua).
    Token(TokenConfig),
}

/// One connection to a Redis server, from which lockers are made.
///
/// All lockers made from one backend share its multiplexed connection; give each contender of
/// a benchmark its own backend when they must fail independently. A broken connection (a server
/// restart, a reset) is re-established by the backend itself: requests fail with
/// [`LockError::Backend`] while the server cannot be reached, within the connect and response
/// timeouts and at once between reconnect attempts, and succeed again once it answers. See the
/// crate docs, "Server outages and restarts", for what holders and waiters see.
#[derive(Clone)]
pub struct RedisBackend {
    link: Arc<Link>,
    addr: Arc<str>,
    prefix: Arc<str>,
}

impl std::fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBackend")
            .field("addr", &self.addr)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// The URL with any password replaced, fit for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

impl RedisBackend {
    /// Connect to `url` (`redis://host:port/[db]`) with the default [`RedisConnectConfig`].
    /// An unreachable server fails within about 5 s with a [`LockError::Backend`] naming the
    /// address.
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::connect_with(url, RedisConnectConfig::default()).await
    }

    /// Connect to `url` with `config`.
    pub async fn connect_with(url: &str, config: RedisConnectConfig) -> Result<Self, LockError> {
        let (client, addr) = Self::client(url, &config)?;
        let link = Link::connect(
            client,
            config.connect_timeout,
            config.response_timeout,
            config.max_reconnect_delay,
            addr.clone(),
        )
        .await?;
        Ok(RedisBackend { link: Arc::new(link), addr, prefix: config.key_prefix.into() })
    }

    /// A backend for `url` that connects at its first request (a Redlock master that is down
    /// when the lock starts); a bad URL or setting is still refused at once.
    pub(crate) fn unconnected(url: &str, config: RedisConnectConfig) -> Result<Self, LockError> {
        let (client, addr) = Self::client(url, &config)?;
        let link = Link::unconnected(
            client,
            config.connect_timeout,
            config.response_timeout,
            config.max_reconnect_delay,
            addr.clone(),
        );
        Ok(RedisBackend { link: Arc::new(link), addr, prefix: config.key_prefix.into() })
    }

    fn client(
        url: &str,
        config: &RedisConnectConfig,
    ) -> Result<(redis::Client, Arc<str>), LockError> {
        let addr = redact(url);
        if config.connect_timeout.is_zero() || config.response_timeout.is_zero() {
            return Err(LockError::Config(
                "Redis connect and response timeouts must be positive".into(),
            ));
        }
        let client = redis::Client::open(url)
            .map_err(|e| LockError::Config(format!("invalid Redis URL {addr}: {e}")))?;
        Ok((client, addr.into()))
    }

    /// How many connections this backend has made to the server: 1 after `connect`, one more
    /// for every reconnection after a broken connection.
    pub fn connections_made(&self) -> u64 {
        self.link.connects()
    }

    /// The server's address (password redacted).
    pub fn address(&self) -> &str {
        &self.addr
    }

    /// A [`JedisLock`] for `owner`.
    pub fn jedis(&self, owner: &str, config: JedisConfig) -> Result<JedisLock, LockError> {
        JedisLock::new(self.clone(), owner, config)
    }

    /// A [`TokenLock`] for `owner`.
    pub fn token(&self, owner: &str, config: TokenConfig) -> Result<TokenLock, LockError> {
        TokenLock::new(self.clone(), owner, config)
    }

    /// A locker of either variant, as the benchmark harness takes it.
    pub fn locker(&self, owner: &str, variant: Variant) -> Result<Arc<dyn Locker>, LockError> {
        Ok(match variant {
            Variant::Jedis(c) => Arc::new(self.jedis(owner, c)?),
            Variant::Token(c) => Arc::new(self.token(owner, c)?),
        })
    }

    /// The key of `lock_id`.
    pub fn key(&self, lock_id: &str) -> String {
        format!("{}{lock_id}", self.prefix)
    }

    /// The key of `lock_id`'s fencing counter.
    pub fn fence_key(&self, lock_id: &str) -> String {
        format!("{}{lock_id}/fence", self.prefix)
    }

    /// A connection for one request (re-established if it broke), or a [`LockError::Backend`].
    pub(crate) async fn conn(&self) -> Result<Conn, LockError> {
        self.link.get().await
    }

    pub(crate) fn err(&self, what: &str, key: &str, e: impl Display) -> LockError {
        backend_err(format!("{what} {key} at {}: {e}", self.addr))
    }
}

pub(crate) fn check_owner(owner: &str) -> Result<(), LockError> {
    validate_id("owner id", owner)
}

/// The mandatory-lock loop every lock of the crate shares: `attempt` until it wins, sleeping
/// `retry()` between attempts (a fixed interval, or Redlock's random delay), and give up with
/// [`LockError::Timeout`] once `timeout` has passed. A last attempt is made at the deadline
/// itself, so a lock freed just before it is not missed.
pub(crate) async fn poll_until<F, Fut, T>(
    lock_id: &str,
    timeout: Option<Duration>,
    mut retry: impl FnMut() -> Duration,
    mut attempt: F,
) -> Result<T, LockError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, LockError>>,
{
    let start = tokio::time::Instant::now();
    let deadline = timeout.map(|t| start + t);
    loop {
        if let Some(won) = attempt().await? {
            return Ok(won);
        }
        let now = tokio::time::Instant::now();
        let wake = match deadline {
            Some(d) if now >= d => {
                return Err(LockError::Timeout {
                    lock_id: lock_id.to_string(),
                    waited: start.elapsed(),
                })
            }
            Some(d) => (now + retry()).min(d),
            None => now + retry(),
        };
        tokio::time::sleep_until(wake).await;
    }
}
