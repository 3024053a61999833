//! The lease keeper every Redis lock of the crate shares (jedis-lock, the token lock, Redlock,
//! the reader-writer lock and the semaphore): renew while held, say when the lease is lost,
//! and undo the grant on release (Redlock undoes its grants on its masters itself). A token-lock holder's keeper also answers the bell of its
//! [`Watch`] (Redis said its key changed, or a new connection must track it): it renews at
//! once, and the renewal's token check decides.

use crate::tracking::{Alert, Watch};
use crate::RedisBackend;
use async_trait::async_trait;
use lock_core::lock::{LeaseDeadline, LeaseLost, LeaseState, Release};
use lock_core::LockError;
use std::sync::{Arc, LazyLock};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What one renewal found.
pub(crate) enum Renewal {
    /// The key is still ours; the lease is now valid until then.
    Extended(Instant),
    /// The key holds something else: the lock expired and may be someone else's.
    Gone(String),
}

/// Why a renewal runs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Its time came (every `ttl / 2`), or a failed one is retried.
    Due,
    /// Redis said the key changed (a tracking invalidation): the renewal is the check, and a
    /// key that is no longer ours is reported as changed by another client.
    Invalidated,
    /// A new connection must track the key: the renewal reads it there.
    Rearmed,
}

/// One variant's renewal step.
#[async_trait]
pub(crate) trait Renew: Send + 'static {
    async fn renew(&mut self, cause: Cause) -> Result<Renewal, LockError>;
}

/// How the holder's traces are removed on release.
pub(crate) enum Undo {
    /// jedis-lock: `DEL key`, whoever holds it now.
    Del,
    /// Token lock: delete only while the key holds `token`.
    IfToken(String),
    /// Reader-writer lock and semaphore: run `script` on `keys` with `args`, the script that
    /// removes this ask, and nothing else, from its queue.
    Script {
        /// The script.
        script: &'static redis::Script,
        /// Its keys, in order.
        keys: Vec<String>,
        /// Its arguments, in order.
        args: Vec<String>,
    },
}

/// Check a lease's settings for `what` (`token-lock`, `reader-writer lock`, `semaphore`): a
/// TTL of at least 2 ms, renewals more often than the TTL, a positive retry interval.
pub(crate) fn check_lease(
    what: &str,
    ttl: Duration,
    renew_every: Duration,
    retry_interval: Duration,
) -> Result<(), LockError> {
    if ttl < Duration::from_millis(2) {
        return Err(LockError::Config(format!("{what} TTL {ttl:?} is below 2 ms")));
    }
    if renew_every.is_zero() || renew_every >= ttl {
        return Err(LockError::Config(format!(
            "{what} renewal every {renew_every:?} must be positive and below the TTL {ttl:?}"
        )));
    }
    if retry_interval.is_zero() {
        return Err(LockError::Config(format!("{what} retry interval must be positive")));
    }
    Ok(())
}

pub(crate) struct Keeper {
    state: Arc<watch::Sender<LeaseState>>,
    deadline: LeaseDeadline,
    task: JoinHandle<()>,
}

/// A keeper dropped without a release (the guard abandoned, as a crashed process would be)
/// renews no more: its key or ask is left to expire.
impl Drop for Keeper {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lose(state: &watch::Sender<LeaseState>, reason: String) {
    state.send_if_modified(|s| {
        if *s == LeaseState::Held {
            *s = LeaseState::Lost(LeaseLost { reason });
            true
        } else {
            false
        }
    });
}

impl Keeper {
    /// Stop renewing: a renewal that lands after the release would bring the key back.
    pub(crate) fn stop(&self) {
        self.task.abort();
    }

    /// The lease's deadline, moved on at each renewal, for the guard to read.
    pub(crate) fn deadline(&self) -> LeaseDeadline {
        self.deadline.clone()
    }

    /// Tell the holder the guard was released (after its keys are deleted).
    pub(crate) fn released(&self) {
        self.state.send_replace(LeaseState::Released);
    }

    /// Start keeping a lease valid until `valid_until`: renew every `every` (never, for
    /// `None`), retry a failed renewal every `retry`, renew at once when `watch` rings, and
    /// publish `Lost` when `valid_until` passes without a successful renewal or a renewal
    /// finds the key taken.
    pub(crate) fn spawn(
        valid_until: Instant,
        every: Option<Duration>,
        retry: Duration,
        renew: Box<dyn Renew>,
        watch: Option<Watch>,
    ) -> (watch::Receiver<LeaseState>, Keeper) {
        let (tx, rx) = watch::channel(LeaseState::Held);
        let state = Arc::new(tx);
        let lapsed = match every {
            None => "the lock's expiry passed and renewal is off: another client may hold it now",
            Some(_) => "no renewal succeeded before the lease ran out",
        };
        let deadline = LeaseDeadline::new(Some(valid_until), lapsed);
        let lease = (state.clone(), deadline.clone());
        let task = tokio::spawn(run(renew, lease, valid_until, every, retry, watch));
        (rx, Keeper { state, deadline, task })
    }
}

/// Sleep until `until`, or until `watch` rings: why the keeper wakes.
async fn wake(until: Instant, watch: &mut Option<Watch>) -> Cause {
    let Some(w) = watch else {
        tokio::time::sleep_until(until).await;
        return Cause::Due;
    };
    tokio::select! {
        _ = tokio::time::sleep_until(until) => Cause::Due,
        alert = w.next() => match alert {
            Alert::Invalidated => Cause::Invalidated,
            Alert::Rearmed => Cause::Rearmed,
        },
    }
}

async fn run(
    mut renew: Box<dyn Renew>,
    (state, deadline): (Arc<watch::Sender<LeaseState>>, LeaseDeadline),
    mut valid_until: Instant,
    every: Option<Duration>,
    retry: Duration,
    mut watch: Option<Watch>,
) {
    let mut next = every.map(|e| Instant::now() + e);
    let mut last_error: Option<String> = None;
    // An invalidation not yet answered by a renewal (one that failed is retried as such, so
    // that the holder is told what Redis said, not only what the retry found).
    let mut invalidated = false;
    loop {
        let cause = wake(next.map_or(valid_until, |n| n.min(valid_until)), &mut watch).await;
        invalidated |= cause == Cause::Invalidated;
        let cause = if invalidated { Cause::Invalidated } else { cause };
        let now = Instant::now();
        if now >= valid_until {
            let reason = match (&last_error, every) {
                (_, None) => {
                    "the lock's expiry passed and renewal is off: another client may hold it now"
                        .to_string()
                }
                (Some(e), _) => {
                    format!("no renewal succeeded before the lease ran out; last error: {e}")
                }
                (None, _) => "no renewal succeeded before the lease ran out".to_string(),
            };
            lose(&state, reason);
            return;
        }
        let Some(every) = every else { continue };
        // A renewal still unanswered when the lease runs out is as good as failed: waiting
        // longer would let the holder believe in a lock others may already have.
        match tokio::time::timeout(valid_until - now, renew.renew(cause)).await {
            Ok(Ok(Renewal::Extended(until))) => {
                valid_until = valid_until.max(until);
                deadline.set(Some(valid_until));
                next = Some(now + every);
                last_error = None;
                invalidated = false;
            }
            Ok(Ok(Renewal::Gone(why))) => {
                lose(&state, why);
                return;
            }
            Ok(Err(e)) => {
                last_error = Some(e.to_string());
                next = Some(Instant::now() + retry);
            }
            Err(_) => last_error = Some("renewal unanswered".into()),
        }
    }
}

/// Undoes one grant: stops the keeper, then removes the key as the variant prescribes.
pub(crate) struct RedisRelease {
    pub(crate) keeper: Keeper,
    pub(crate) backend: RedisBackend,
    pub(crate) key: String,
    pub(crate) undo: Undo,
}

/// Deletes the key only while it holds our token (`ARGV[1]`): the release of the token lock
/// and of Redlock on each master.
pub(crate) static RELEASE_IF_TOKEN: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0",
    )
});

#[async_trait]
impl Release for RedisRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        // Stopped first, so that no renewal can land after the key is gone and bring it back
        // (the connection keeps command order, so one already sent lands before the delete).
        self.keeper.stop();
        let result = match self.backend.conn().await {
            Err(e) => Err(e),
            Ok(mut conn) => match &self.undo {
                Undo::Del => redis::cmd("DEL")
                    .arg(&self.key)
                    .query_async::<i64>(&mut conn)
                    .await
                    .map(|_| ())
                    .map_err(|e| self.backend.err("DEL", &self.key, e)),
                Undo::IfToken(token) => RELEASE_IF_TOKEN
                    .key(&self.key)
                    .arg(token)
                    .invoke_async::<i64>(&mut conn)
                    .await
                    // 0: the key expired or is someone else's; nothing of ours is left to delete.
                    .map(|_| ())
                    .map_err(|e| self.backend.err("release script on", &self.key, e)),
                Undo::Script { script, keys, args } => {
                    let mut invocation = script.prepare_invoke();
                    for key in keys {
                        invocation.key(key);
                    }
                    for arg in args {
                        invocation.arg(arg);
                    }
                    invocation
                        .invoke_async::<i64>(&mut conn)
                        .await
                        .map(|_| ())
                        .map_err(|e| self.backend.err("release script on", &self.key, e))
                }
            },
        };
        self.keeper.released();
        result
    }
}
