//! The leased queue of asks that the reader-writer lock ([`crate::rwlock`]) and the semaphore
//! ([`crate::semaphore`]) share: who holds and who waits, each ask with a lease kept by the
//! server's clock, granted by one Lua script that reads the whole queue at once.
//!
//! # Keys
//! For a queue at `<base>` (`<prefix><lock id>/rw`, `<prefix><semaphore id>/sem`):
//! - `<base>`: a sorted set of ask ids scored by their place in line, a number drawn from the
//!   counter when the ask first reaches the server;
//! - `<base>/expiry`: a sorted set of the same ask ids scored by when each lease ends, in
//!   milliseconds of the server's clock (`TIME`, read inside the script);
//! - `<base>/asks`: a hash of what each ask wants, `r1` (read), `w1` (write), `p<k>` (k permits),
//!   and once granted its last token after a colon (`p2:41`);
//! - `<base>/fence`: the counter: it numbers places in line (`INCR`) and tokens (`INCRBY k`).
//!   It never expires, so tokens never go back while the server keeps its writes;
//! - `<base>/size` (semaphores): the size N its holders and waiters use.
//!
//! Every script first removes every ask whose lease ended (its expiry is not after the
//! server's now), so expired asks neither hold nor wait. The keys other than the counter are
//! given the latest lease's end as their expiry after every change, so that a queue whose
//! clients all vanished is gone from the server one TTL later; Redis deletes an emptied set or
//! hash by itself, and the size goes with the last ask.
//!
//! # Asking
//! An ask id is the owner id plus 64 random bits, drawn once per `lock` or `acquire` call, so a
//! waiter keeps its place across polls. Each poll runs the ask script: purge, enqueue the ask
//! if it is not in line (again at the back, if its lease ended while it could not reach the
//! server), extend its lease by the TTL, and grant it if the rule of its kind allows:
//! - **FIFO reads and writes**: a read when no write is ahead of it, a write when nothing is;
//! - **readers first**: a read when no write holds; a write when nothing holds and no write
//!   waits ahead of it;
//! - **permits**: when the permits of the asks ahead of it (holders and waiters) plus its own
//!   are at most N.
//!
//! A grant draws its tokens (`INCRBY k`: the last is the guard's token) and writes them into
//! the ask; a poll that finds its ask granted already (the answer to the granting poll was
//! lost) returns the same tokens. A `try` poll removes its ask when it is not granted. A
//! waiter polls every retry interval, so its lease is renewed by its polls; a holder's lease
//! is renewed by the lease keeper ([`crate::keeper`]) with the renewal script, which fails
//! (the holder is told it lost the lease) once the ask is no longer in line. Release, a
//! timeout, any failed `lock` call, and a `lock` future dropped while it waits run the leave
//! script: the ask id's entries, and nothing else, are removed.
//!
//! # Why the rules exclude
//! New asks join at the back, and the asks ahead of a given one only ever leave. A FIFO write
//! is granted with nothing ahead, so everything present later is behind it, and reads wait for
//! every write ahead. For permits, take the granted ask furthest back: every ask now ahead of
//! it was ahead of it at its grant, so the permits held are at most what its grant counted, N.
//! Readers first decides on the holders themselves, in the same atomic script.

use crate::keeper::{Keeper, RedisRelease, Renew, Renewal, Undo};
use crate::link::Conn;
use crate::{poll_until, RedisBackend};
use async_trait::async_trait;
use lock_core::usage::UsageError;
use lock_core::{BackendErrorKind, LockError, LockGuard};
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;
use tokio::time::Instant;

/// Every script's start: the keys, the server's now in milliseconds, the purge of expired
/// asks, and `tidy`, which gives the keys (not the counter) the latest lease's end as expiry
/// and deletes the size with the last ask.
const PRELUDE: &str = r"
local order, expiry, asks, counter, size = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function drop(id)
  redis.call('ZREM', order, id)
  redis.call('ZREM', expiry, id)
  redis.call('HDEL', asks, id)
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', expiry, '-inf', now)) do drop(id) end
local function tidy()
  local last = redis.call('ZRANGE', expiry, -1, -1, 'WITHSCORES')
  if last[2] then
    local at = string.format('%d', tonumber(last[2]) + 1)
    redis.call('PEXPIREAT', order, at)
    redis.call('PEXPIREAT', expiry, at)
    redis.call('PEXPIREAT', asks, at)
    if size then redis.call('PEXPIREAT', size, at) end
  elseif size then
    redis.call('DEL', size)
  end
end
";

/// One poll of an ask (`ARGV`: id, kind `r`/`w`/`p`, permits k, TTL ms, size N, try `1`,
/// readers first `1`): `{1, last token}` granted, `{0, 0}` not (a try's ask removed), `{-1,
/// N in use}` for a semaphore whose holders and waiters use another size (nothing written).
static ASK: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{PRELUDE}{}",
        r"
local id, kind, k, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local limit, try, readers_first = tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7] == '1'
if size then
  local stored = redis.call('GET', size)
  if stored and tonumber(stored) ~= limit and redis.call('ZCARD', order) > 0 then
    return {-1, tonumber(stored)}
  end
end
local mine = redis.call('HGET', asks, id)
if not mine then
  redis.call('ZADD', order, redis.call('INCR', counter), id)
  mine = kind .. k
  redis.call('HSET', asks, id, mine)
  if size then redis.call('SET', size, limit) end
end
redis.call('ZADD', expiry, now + ttl, id)
local held = string.match(mine, ':(%d+)$')
if held then
  tidy()
  return {1, tonumber(held)}
end
local ok, ahead, permits_ahead = true, true, 0
for _, other in ipairs(redis.call('ZRANGE', order, 0, -1)) do
  if other == id then
    ahead = false
    if not readers_first then break end
  else
    local v = redis.call('HGET', asks, other) or ''
    local okind = string.sub(v, 1, 1)
    local granted = string.find(v, ':') ~= nil
    if readers_first then
      if kind == 'r' and okind == 'w' and granted then ok = false end
      if kind == 'w' and (granted or (ahead and okind == 'w')) then ok = false end
    elseif kind == 'r' then
      if okind == 'w' then ok = false end
    elseif kind == 'w' then
      ok = false
    else
      permits_ahead = permits_ahead + (tonumber(string.match(v, '^%a(%d+)')) or 0)
    end
  end
end
if kind == 'p' and permits_ahead + k > limit then ok = false end
if not ok then
  if try then drop(id) end
  tidy()
  return {0, 0}
end
local last = redis.call('INCRBY', counter, k)
redis.call('HSET', asks, id, mine .. ':' .. last)
tidy()
return {1, last}
"
    ))
});

/// A holder's renewal (`ARGV`: id, TTL ms): 1 with its lease extended by the TTL from the
/// server's now, 0 when the ask is no longer in line.
static RENEW: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{PRELUDE}{}",
        r"
if not redis.call('ZSCORE', expiry, ARGV[1]) then
  tidy()
  return 0
end
redis.call('ZADD', expiry, now + tonumber(ARGV[2]), ARGV[1])
tidy()
return 1
"
    ))
});

/// Remove one ask (`ARGV[1]`), held or waiting, and nothing else: 1 if it was in line.
static LEAVE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(&format!(
        "{PRELUDE}{}",
        r"
local gone = redis.call('ZREM', order, ARGV[1])
drop(ARGV[1])
tidy()
return gone
"
    ))
});

/// The keys of one queue.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    order: String,
    expiry: String,
    asks: String,
    counter: String,
    size: Option<String>,
}

impl Keys {
    /// The keys of the queue at `base`, with a size key for a semaphore.
    pub(crate) fn new(base: String, sized: bool) -> Keys {
        Keys {
            expiry: format!("{base}/expiry"),
            asks: format!("{base}/asks"),
            counter: format!("{base}/fence"),
            size: sized.then(|| format!("{base}/size")),
            order: base,
        }
    }

    /// Every key, in the order the scripts take them.
    fn list(&self) -> Vec<String> {
        let mut keys =
            vec![self.order.clone(), self.expiry.clone(), self.asks.clone(), self.counter.clone()];
        keys.extend(self.size.clone());
        keys
    }

    /// `script` invoked on these keys.
    fn invocation<'a>(&self, script: &'a redis::Script) -> redis::ScriptInvocation<'a> {
        let mut inv = script.prepare_invoke();
        for key in self.list() {
            inv.key(key);
        }
        inv
    }
}

/// One ask in one queue.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    keys: Keys,
    id: String,
}

impl Entry {
    /// What a release runs: the leave script for this ask.
    fn undo(&self) -> Undo {
        Undo::Script { script: &LEAVE, keys: self.keys.list(), args: vec![self.id.clone()] }
    }

    /// Remove this ask from its queue on `conn`, held or waiting.
    pub(crate) async fn leave_on(
        &self,
        backend: &RedisBackend,
        conn: &mut Conn,
    ) -> Result<(), LockError> {
        self.keys
            .invocation(&LEAVE)
            .arg(&self.id)
            .invoke_async::<i64>(conn)
            .await
            .map(|_| ())
            .map_err(|e| backend.err("leave script on", &self.keys.order, e))
    }

    async fn leave(&self, backend: &RedisBackend) -> Result<(), LockError> {
        let mut conn = backend.conn().await?;
        self.leave_on(backend, &mut conn).await
    }

    /// Leave in the background: for an ask whose last answer was lost, or whose waiter went.
    fn leave_later(self, backend: RedisBackend) {
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = self.leave(&backend).await;
            });
        }
    }
}

/// What an ask wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Want {
    /// Shared with other reads.
    Read,
    /// Alone.
    Write,
    /// `count` of the `limit` permits.
    Permits { count: u32, limit: u32 },
}

/// How reads and writes are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// In line: a later ask never passes an earlier one it conflicts with.
    Fifo,
    /// A read passes waiting writes.
    ReadersFirst,
}

/// A lease's timing.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    pub(crate) ttl: Duration,
    pub(crate) renew_every: Duration,
    pub(crate) retry_interval: Duration,
}

/// One poll's answer.
enum Poll {
    /// Granted with `last` as its last token; its lease is valid until `sent` + TTL.
    Granted {
        last: u64,
        sent: Instant,
    },
    Waiting,
    /// The semaphore is in use with `stored` permits.
    Mismatch(u32),
}

/// One `lock`, `try_lock`, `acquire` or `try_acquire` call's ask.
pub(crate) struct Asker<'a> {
    pub(crate) backend: &'a RedisBackend,
    pub(crate) owner: &'a str,
    /// The lock or semaphore id.
    pub(crate) id: &'a str,
    pub(crate) keys: Keys,
    pub(crate) want: Want,
    pub(crate) order: Order,
    pub(crate) lease: Lease,
}

/// A waiter's ask, removed when its `lock` call ends without a grant, the future dropped
/// included.
struct Pending {
    backend: RedisBackend,
    entry: Option<Entry>,
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(entry) = self.entry.take() {
            entry.leave_later(self.backend.clone());
        }
    }
}

impl Asker<'_> {
    fn entry(&self) -> Entry {
        let id = format!("{}:{:016x}", self.owner, rand::random::<u64>());
        Entry { keys: self.keys.clone(), id }
    }

    async fn poll(&self, entry: &Entry, once: bool) -> Result<Poll, LockError> {
        let (kind, count, limit) = match self.want {
            Want::Read => ("r", 1, 0),
            Want::Write => ("w", 1, 0),
            Want::Permits { count, limit } => ("p", count, limit),
        };
        let mut conn = self.backend.conn().await?;
        // The server starts the lease after this moment: it is certainly valid until
        // `sent + ttl`.
        let sent = Instant::now();
        let reply: Vec<i64> = self
            .keys
            .invocation(&ASK)
            .arg(&entry.id)
            .arg(kind)
            .arg(count)
            .arg(self.lease.ttl.as_millis() as u64)
            .arg(limit)
            .arg(if once { "1" } else { "0" })
            .arg(if self.order == Order::ReadersFirst { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.backend.err("ask script on", &self.keys.order, e))?;
        match *reply.as_slice() {
            [1, last] if last > 0 => Ok(Poll::Granted { last: last as u64, sent }),
            [0, _] => Ok(Poll::Waiting),
            [-1, stored] => Ok(Poll::Mismatch(stored.clamp(0, u32::MAX as i64) as u32)),
            _ => Err(self.backend.err_text(
                BackendErrorKind::Protocol,
                "ask script on",
                &self.keys.order,
                format!("unexpected reply {reply:?}"),
            )),
        }
    }

    fn mismatch(&self, stored: u32) -> LockError {
        let asked = match self.want {
            Want::Permits { limit, .. } => limit,
            _ => 0,
        };
        UsageError::LimitMismatch { semaphore: self.id.to_string(), asked, stored }.into()
    }

    /// Wait in line until granted, or until `timeout` passes; the ask is removed on every way
    /// out but a grant.
    pub(crate) async fn wait(&self, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        let entry = self.entry();
        let mut pending = Pending { backend: self.backend.clone(), entry: Some(entry.clone()) };
        let queued = OnceLock::new();
        let (entry_ref, queued_ref) = (&entry, &queued);
        let result = poll_until(
            self.id,
            timeout,
            || self.lease.retry_interval,
            || async move {
                let poll = self.poll(entry_ref, false).await?;
                queued_ref.get_or_init(Instant::now);
                match poll {
                    Poll::Granted { last, sent } => Ok(Some((last, sent))),
                    Poll::Waiting => Ok(None),
                    Poll::Mismatch(stored) => Err(self.mismatch(stored)),
                }
            },
        )
        .await;
        match result {
            Ok((last, sent)) => {
                pending.entry = None;
                let guard = self.guard(entry, last, sent);
                Ok(match (self.order, queued.get()) {
                    (Order::Fifo, Some(at)) => guard.with_queued_at(*at),
                    _ => guard,
                })
            }
            Err(e) => {
                // Removed before the caller hears of it: a place kept in line would hold up
                // the asks behind it. If the server cannot be reached, the ask's lease ends one
                // TTL after its last poll.
                if let Some(entry) = pending.entry.take() {
                    let _ = entry.leave(self.backend).await;
                }
                Err(e)
            }
        }
    }

    /// One poll that leaves the line at once if not granted.
    pub(crate) async fn once(&self) -> Result<Option<LockGuard>, LockError> {
        let entry = self.entry();
        match self.poll(&entry, true).await {
            Ok(Poll::Granted { last, sent }) => Ok(Some(self.guard(entry, last, sent))),
            Ok(Poll::Waiting) => Ok(None),
            Ok(Poll::Mismatch(stored)) => Err(self.mismatch(stored)),
            Err(e) => {
                // The script may have run with its answer lost, granting an ask no guard has.
                entry.leave_later(self.backend.clone());
                Err(e)
            }
        }
    }

    /// The guard of `entry`, granted with `last` as its last token by a poll sent at `sent`.
    fn guard(&self, entry: Entry, last: u64, sent: Instant) -> LockGuard {
        let renew =
            EntryRenew { backend: self.backend.clone(), entry: entry.clone(), ttl: self.lease.ttl };
        let (lease, keeper) = Keeper::spawn(
            sent + self.lease.ttl,
            Some(self.lease.renew_every),
            self.lease.retry_interval,
            Box::new(renew),
            None,
        );
        let deadline = keeper.deadline();
        let release = RedisRelease {
            keeper,
            backend: self.backend.clone(),
            key: self.keys.order.clone(),
            undo: entry.undo(),
        };
        LockGuard::new(self.id, self.owner, last, lease, Box::new(release)).with_deadline(deadline)
    }
}

/// A holder's renewal: its ask's lease extended while it is still in line.
struct EntryRenew {
    backend: RedisBackend,
    entry: Entry,
    ttl: Duration,
}

#[async_trait]
impl Renew for EntryRenew {
    async fn renew(&mut self, _cause: crate::keeper::Cause) -> Result<Renewal, LockError> {
        let mut conn = self.backend.conn().await?;
        let sent = Instant::now();
        let order = &self.entry.keys.order;
        let found: i64 = self
            .entry
            .keys
            .invocation(&RENEW)
            .arg(&self.entry.id)
            .arg(self.ttl.as_millis() as u64)
            .invoke_async(&mut conn)
            .await
            .map_err(|e| self.backend.err("renewal script on", order, e))?;
        Ok(match found {
            1 => Renewal::Extended(sent + self.ttl),
            _ => Renewal::Gone(format!(
                "its ask {} is no longer in {order}: its lease ran out on the server (no \
                 renewal arrived within the TTL) and it was removed, or another client removed it",
                self.entry.id
            )),
        })
    }
}
