//! The token lock: `SET key token NX PX ttl`, renewal and release by token-checking Lua; on a
//! tracking backend its holder is told at once when another client changes its key
//! ([`crate::tracking`]).

use crate::keeper::{
    check_lease, Cause, Keeper, RedisRelease, Renew, Renewal, Undo, RELEASE_IF_TOKEN,
};
use crate::{check_owner, RedisBackend};
use async_trait::async_trait;
use lock_core::{LockError, LockGuard};
use std::sync::LazyLock;
use std::time::Duration;
use tokio::time::Instant;

/// Settings of a [`TokenLock`].
#[derive(Debug, Clone, Copy)]
pub struct TokenConfig {
    /// The key's time to live (`PX`), counted by the server.
    pub ttl: Duration,
    /// How often a holder renews (default `ttl / 2`, as every lease in this workspace).
    pub renew_every: Duration,
    /// Sleep between attempts of a waiting mandatory lock, and between renewal retries after
    /// an error (default 50 ms).
    pub retry_interval: Duration,
}

impl Default for TokenConfig {
    fn default() -> Self {
        TokenConfig::new(Duration::from_secs(10))
    }
}

impl TokenConfig {
    /// TTL `ttl`, renewal every `ttl / 2`, retry every 50 ms.
    pub fn new(ttl: Duration) -> Self {
        TokenConfig { ttl, renew_every: ttl / 2, retry_interval: Duration::from_millis(50) }
    }
}

/// Grant and fencing token in one atomic step: the counter moves only for a grant, so tokens
/// follow grant order exactly. The `GET` after a grant is for tracking: a key read inside a
/// script is tracked for the connection that ran it (Redis 6 and 7 both), so the holder's key
/// is watched from its grant on at no extra request; without tracking it costs nothing.
static ACQUIRE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('GET', KEYS[1])
  return redis.call('INCR', KEYS[2])
end
return 0",
    )
});

/// `PEXPIRE`s the key only while it holds our token: Redlock's extension on each master.
pub(crate) static RENEW_IF_TOKEN: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0",
    )
});

/// The token lock's renewal: `PEXPIRE` the key only while it holds our token (1), and say what
/// it holds otherwise: nothing (0) or another token (-1). The `GET` after the `PEXPIRE` keeps
/// the key tracked: our own `PEXPIRE` ends its tracking (Redis drops a key from the tracking
/// table at every change, even one `NOLOOP` keeps silent), and the read starts it again.
static RENEW: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('GET', KEYS[1])
  return 1
end
if v then return -1 end
return 0",
    )
});

/// The token lock for one owner. See the crate docs for the protocol.
#[derive(Debug)]
pub struct TokenLock {
    backend: RedisBackend,
    owner: String,
    config: TokenConfig,
}

impl TokenLock {
    pub(crate) fn new(
        backend: RedisBackend,
        owner: &str,
        config: TokenConfig,
    ) -> Result<Self, LockError> {
        check_owner(owner)?;
        check_lease("token-lock", config.ttl, config.renew_every, config.retry_interval)?;
        Ok(TokenLock { backend, owner: owner.to_string(), config })
    }

    /// The settings.
    pub fn config(&self) -> &TokenConfig {
        &self.config
    }

    fn ttl_ms(&self) -> u64 {
        self.config.ttl.as_millis() as u64
    }

    async fn attempt(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        let key = self.backend.key(lock_id);
        // Unique per acquisition, so that a holder never mistakes a later grant (its own
        // included) for its lease.
        let token = format!("{}:{:016x}", self.owner, rand::random::<u64>());
        // Watched before the script goes (see `Tracker::watch`); dropped if not granted.
        let mut watch = self.backend.tracker().map(|t| t.watch(&key));
        let mut conn = self.backend.conn().await?;
        // The server's TTL starts after this moment, so the lease is certainly valid until
        // `sent + ttl`.
        let sent = Instant::now();
        let fence: i64 = match ACQUIRE
            .key(&key)
            .key(self.backend.fence_key(lock_id))
            .arg(&token)
            .arg(self.ttl_ms())
            .invoke_async(&mut conn)
            .await
        {
            Ok(fence) => fence,
            Err(e) => {
                // The script may have run with its answer lost: the key would then hold this
                // attempt's token, which no guard has, until its TTL ends. Delete it (only if
                // it holds that token) without holding up the caller's next attempt.
                let (backend, key2) = (self.backend.clone(), key.clone());
                tokio::spawn(async move {
                    if let Ok(mut conn) = backend.conn().await {
                        let mut undo = RELEASE_IF_TOKEN.key(&key2);
                        let _ = undo.arg(&token).invoke_async::<i64>(&mut conn).await;
                    }
                });
                return Err(self.backend.err("acquire script on", &key, e));
            }
        };
        if fence == 0 {
            return Ok(None);
        }
        if let Some(w) = &mut watch {
            w.granted_on(conn.generation());
        }
        let renew = TokenRenew {
            backend: self.backend.clone(),
            key: key.clone(),
            token: token.clone(),
            ttl: self.config.ttl,
        };
        let (lease, keeper) = Keeper::spawn(
            sent + self.config.ttl,
            Some(self.config.renew_every),
            self.config.retry_interval,
            Box::new(renew),
            watch,
        );
        let deadline = keeper.deadline();
        let release =
            RedisRelease { keeper, backend: self.backend.clone(), key, undo: Undo::IfToken(token) };
        let guard = LockGuard::new(lock_id, &self.owner, fence as u64, lease, Box::new(release));
        Ok(Some(guard.with_deadline(deadline)))
    }
}

struct TokenRenew {
    backend: RedisBackend,
    key: String,
    token: String,
    ttl: Duration,
}

#[async_trait]
impl Renew for TokenRenew {
    async fn renew(&mut self, cause: Cause) -> Result<Renewal, LockError> {
        let sent = Instant::now();
        let mut conn = self.backend.conn().await?;
        let found: i64 = RENEW
            .key(&self.key)
            .arg(&self.token)
            .arg(self.ttl.as_millis() as u64)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.backend.err("renewal script on", &self.key, e))?;
        Ok(match found {
            1 => Renewal::Extended(sent + self.ttl),
            _ => Renewal::Gone(gone(&self.key, found == 0, cause)),
        })
    }
}

/// Why the holder of `key` lost it, from what the renewal found (`missing`: no key; else
/// another token) and why it ran.
fn gone(key: &str, missing: bool, cause: Cause) -> String {
    match (cause, missing) {
        (Cause::Invalidated, true) => format!(
            "its key {key} was changed or deleted by another client: Redis reported the tracked \
             key changed and it no longer exists (a DEL, a flush or an eviction; an expiry by \
             its TTL is reported the same way, but this holder's lease, which ends before the \
             key's TTL, had not run out)"
        ),
        (Cause::Invalidated, false) => format!(
            "its key {key} was changed or deleted by another client: Redis reported the tracked \
             key changed and it now holds another client's token (overwritten, or deleted and \
             granted again)"
        ),
        (_, true) => format!(
            "{key} no longer holds this holder's token: it no longer exists (its TTL ran out, \
             or another client deleted it)"
        ),
        (_, false) => format!(
            "{key} no longer holds this holder's token: it holds another client's (its TTL ran \
             out and another client took the lock, or another client overwrote it)"
        ),
    }
}

polling_locker!(TokenLock, "redis-token");
