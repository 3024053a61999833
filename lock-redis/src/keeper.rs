//! The lease keeper both Redis variants share: renew while held, say when the lease is lost,
//! and undo the grant on release.

use crate::RedisBackend;
use async_trait::async_trait;
use lock_core::lock::{LeaseLost, LeaseState, Release};
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

/// One variant's renewal step.
#[async_trait]
pub(crate) trait Renew: Send + 'static {
    async fn renew(&mut self) -> Result<Renewal, LockError>;
}

/// How the holder's traces are removed on release.
pub(crate) enum Undo {
    /// jedis-lock: `DEL key`, whoever holds it now.
    Del,
    /// Token lock: delete only while the key holds `token`.
    IfToken(String),
}

pub(crate) struct Keeper {
    state: Arc<watch::Sender<LeaseState>>,
    task: JoinHandle<()>,
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

    /// Tell the holder the guard was released (after its keys are deleted).
    pub(crate) fn released(&self) {
        self.state.send_replace(LeaseState::Released);
    }

    /// Start keeping a lease valid until `valid_until`: renew every `every` (never, for
    /// `None`), retry a failed renewal every `retry`, and publish `Lost` when `valid_until`
    /// passes without a successful renewal or a renewal finds the key taken.
    pub(crate) fn spawn(
        valid_until: Instant,
        every: Option<Duration>,
        retry: Duration,
        renew: Box<dyn Renew>,
    ) -> (watch::Receiver<LeaseState>, Keeper) {
        let (tx, rx) = watch::channel(LeaseState::Held);
        let state = Arc::new(tx);
        let task = tokio::spawn(run(renew, state.clone(), valid_until, every, retry));
        (rx, Keeper { state, task })
    }
}

async fn run(
    mut renew: Box<dyn Renew>,
    state: Arc<watch::Sender<LeaseState>>,
    mut valid_until: Instant,
    every: Option<Duration>,
    retry: Duration,
) {
    let mut next = every.map(|e| Instant::now() + e);
    let mut last_error: Option<String> = None;
    loop {
        tokio::time::sleep_until(next.map_or(valid_until, |n| n.min(valid_until))).await;
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
        match tokio::time::timeout(valid_until - now, renew.renew()).await {
            Ok(Ok(Renewal::Extended(until))) => {
                valid_until = valid_until.max(until);
                next = Some(now + every);
                last_error = None;
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
            },
        };
        self.keeper.released();
        result
    }
}
