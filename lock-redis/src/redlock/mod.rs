//! Redlock: `SET NX PX` on every one of N independent masters, held on a majority within the
//! validity time. The protocol, its choices and its findings are in the crate docs.

mod fence;
mod masters;

pub use masters::RedisMasters;

use crate::keeper::{Cause, Keeper, Renew, Renewal, RELEASE_IF_TOKEN};
use crate::token::RENEW_IF_TOKEN;
use crate::{check_owner, RedisBackend};
use async_trait::async_trait;
use lock_core::lock::{validate_id, Release};
use lock_core::{BackendErrorKind, LockError, LockGuard, Locker};
use masters::{Late, Tally};
use rand::rngs::StdRng;
use rand::{Rng, RngExt, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The token of a plain Redlock guard: Redlock has no fencing token of its own. 0 is below
/// every token a fencing lock hands out, so a resource that refuses tokens below the highest
/// it has seen accepts every write carrying it: a Redlock holder is *unfenced*.
pub const NO_FENCING_TOKEN: u64 = 0;

/// How long a holder waits before retrying a failed extension (a master that did not answer
/// may answer the next time): short against any TTL this lock is used with.
const EXTEND_RETRY: Duration = Duration::from_millis(50);

/// Settings of a [`Redlock`].
#[derive(Debug, Clone, Copy)]
pub struct RedlockConfig {
    /// The keys' time to live on each master (`PX`), the doc's "lock validity time" before
    /// the elapsed time and the drift are taken off.
    pub ttl: Duration,
    /// How long one request to one master may take before that master counts as failed (the
    /// doc's per-instance timeout; default 50 ms, the top of its "5-50 ms" for a 10 s TTL).
    pub master_timeout: Duration,
    /// A failed attempt is retried after a delay drawn uniformly from `[0, retry_delay)`
    /// (default 200 ms, rslock's), so that contenders that split the votes do not meet again.
    pub retry_delay: Duration,
    /// The clock-drift allowance is `ttl * drift_factor + 2 ms` (default 0.01, the doc's).
    pub drift_factor: f64,
    /// How often a holder extends its keys (default `ttl / 2`, as every lease in this
    /// workspace).
    pub extend_every: Duration,
    /// The seed of the locker's randomness: its lock values and retry delays. Give every run
    /// its own (values must be unique across runs too, not only within one).
    pub seed: u64,
}

impl RedlockConfig {
    /// TTL `ttl`, randomness from `seed`, the rest at its default.
    pub fn new(ttl: Duration, seed: u64) -> Self {
        RedlockConfig {
            ttl,
            master_timeout: Duration::from_millis(50),
            retry_delay: Duration::from_millis(200),
            drift_factor: 0.01,
            extend_every: ttl / 2,
            seed,
        }
    }

    /// Set [`RedlockConfig::master_timeout`].
    pub fn with_master_timeout(mut self, timeout: Duration) -> Self {
        self.master_timeout = timeout;
        self
    }

    /// Set [`RedlockConfig::retry_delay`].
    pub fn with_retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The clock-drift allowance the validity time loses: `ttl * drift_factor + 2 ms`.
    pub fn drift(&self) -> Duration {
        self.ttl.mul_f64(self.drift_factor) + Duration::from_millis(2)
    }

    fn check(&self) -> Result<(), LockError> {
        let bad = |why: String| Err(LockError::Config(format!("Redlock {why}")));
        if !(0.0..1.0).contains(&self.drift_factor) {
            return bad(format!("drift factor {} must be in [0, 1)", self.drift_factor));
        }
        if self.ttl <= self.drift() + self.master_timeout {
            return bad(format!(
                "TTL {:?} leaves no validity after the drift {:?} and the master timeout {:?}",
                self.ttl,
                self.drift(),
                self.master_timeout
            ));
        }
        if self.master_timeout.is_zero() || self.retry_delay.is_zero() {
            return bad("master timeout and retry delay must be positive".into());
        }
        if self.extend_every.is_zero() || self.extend_every >= self.ttl - self.drift() {
            return bad(format!(
                "extension every {:?} must be positive and below the validity {:?}",
                self.extend_every,
                self.ttl - self.drift()
            ));
        }
        Ok(())
    }
}

/// Which Redlock a [`RedisMasters::locker`] runs.
#[derive(Debug, Clone, Copy)]
pub enum RedlockVariant {
    /// Redlock as the Redis doc gives it: guards carry [`NO_FENCING_TOKEN`].
    Plain(RedlockConfig),
    /// Redlock plus a fencing token read and written on a majority after the grant (crate
    /// docs, "A fencing token for Redlock").
    Fenced(RedlockConfig),
}

impl RedisMasters {
    /// A plain [`Redlock`] for `owner`.
    pub fn redlock(&self, owner: &str, config: RedlockConfig) -> Result<Redlock, LockError> {
        Redlock::new(self.clone(), owner, config, false)
    }

    /// A [`Redlock`] for `owner` whose guards carry a token derived on a majority.
    pub fn redlock_fenced(&self, owner: &str, config: RedlockConfig) -> Result<Redlock, LockError> {
        Redlock::new(self.clone(), owner, config, true)
    }

    /// A locker of either variant, as the benchmark harness takes it.
    pub fn locker(
        &self,
        owner: &str,
        variant: RedlockVariant,
    ) -> Result<Arc<dyn Locker>, LockError> {
        Ok(Arc::new(match variant {
            RedlockVariant::Plain(c) => self.redlock(owner, c)?,
            RedlockVariant::Fenced(c) => self.redlock_fenced(owner, c)?,
        }))
    }
}

/// Redlock for one owner on N independent masters. See the crate docs for the protocol.
pub struct Redlock {
    masters: RedisMasters,
    owner: String,
    config: RedlockConfig,
    fenced: bool,
    rng: Mutex<StdRng>,
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redlock")
            .field("masters", &self.masters)
            .field("owner", &self.owner)
            .field("config", &self.config)
            .field("fenced", &self.fenced)
            .finish()
    }
}

/// Mixes the owner into the seed, so that lockers given one seed draw different values.
fn owner_seed(seed: u64, owner: &str) -> u64 {
    owner
        .bytes()
        .fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

impl Redlock {
    fn new(
        masters: RedisMasters,
        owner: &str,
        config: RedlockConfig,
        fenced: bool,
    ) -> Result<Self, LockError> {
        check_owner(owner)?;
        config.check()?;
        let rng = Mutex::new(StdRng::seed_from_u64(owner_seed(config.seed, owner)));
        Ok(Redlock { masters, owner: owner.to_string(), config, fenced, rng })
    }

    /// The settings.
    pub fn config(&self) -> &RedlockConfig {
        &self.config
    }

    /// The masters.
    pub fn masters(&self) -> &RedisMasters {
        &self.masters
    }

    fn rng(&self) -> std::sync::MutexGuard<'_, StdRng> {
        self.rng.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Step 2's "random value": unique to this acquisition, so that only its holder's scripts
    /// match it.
    fn next_value(&self) -> String {
        format!("{}:{:016x}", self.owner, self.rng().next_u64())
    }

    /// The doc's "random delay" before a retry.
    fn retry_delay(&self) -> Duration {
        // At least 1 µs wide: a sub-microsecond setting must not make the range empty.
        let max = (self.config.retry_delay.as_micros() as u64).max(1);
        Duration::from_micros(self.rng().random_range(0..max))
    }

    fn lease(&self, lock_id: &str, value: &str) -> Lease {
        Lease {
            masters: self.masters.clone(),
            lock_id: lock_id.to_string(),
            value: value.to_string(),
            config: self.config,
        }
    }

    /// Steps 1 to 5 of the doc, once: `Some` when a majority granted within the validity.
    async fn attempt(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        let lease = self.lease(lock_id, &self.next_value());
        // Step 1: the keys' TTLs start after this instant on every master.
        let started = Instant::now();
        let tally = lease.set_on_all().await;
        // Steps 3 and 4: what is left of the TTL after the round and the drift allowance.
        let valid_until = started + self.config.ttl - self.config.drift();
        let won = tally.yes >= self.masters.quorum() && Instant::now() < valid_until;
        if !won {
            // Step 5: undo on every master, those that did not answer included (a SET may
            // have landed after its timeout).
            lease.delete_on_all().await;
            let n = self.masters.len();
            if tally.answered() < self.masters.quorum() {
                return Err(tally.too_few_answers("acquire", self.masters.quorum(), n));
            }
            return Ok(None);
        }
        let token = match self.fenced {
            false => NO_FENCING_TOKEN,
            true => match fence::next_token(&lease, valid_until).await {
                Ok(Some(t)) => t,
                other => {
                    lease.delete_on_all().await;
                    return other.map(|_| None);
                }
            },
        };
        Ok(Some(self.guard(lease, valid_until, token)))
    }

    fn guard(&self, lease: Lease, valid_until: Instant, token: u64) -> LockGuard {
        let lock_id = lease.lock_id.clone();
        let (watch, keeper) = Keeper::spawn(
            valid_until,
            Some(self.config.extend_every),
            EXTEND_RETRY,
            Box::new(lease.clone()),
            None,
        );
        let deadline = keeper.deadline();
        let release = RedlockRelease { keeper, lease };
        LockGuard::new(lock_id, &self.owner, token, watch, Box::new(release))
            .with_deadline(deadline)
    }
}

/// One acquisition's keys: the lock id and value, on every master.
#[derive(Clone)]
struct Lease {
    masters: RedisMasters,
    lock_id: String,
    value: String,
    config: RedlockConfig,
}

impl Lease {
    fn ttl_ms(&self) -> u64 {
        self.config.ttl.as_millis() as u64
    }

    /// Step 2: `SET key value NX PX ttl` on every master at once.
    async fn set_on_all(&self) -> Tally {
        let (lock_id, value, ttl) = (self.lock_id.clone(), self.value.clone(), self.ttl_ms());
        let answers = self
            .masters
            .on_all(self.config.master_timeout, Late::Drop, move |m| {
                set_nx(m, lock_id.clone(), value.clone(), ttl)
            })
            .await;
        Tally::of(answers)
    }

    /// `PEXPIRE` the key on every master where it still holds our value.
    async fn extend_on_all(&self) -> Tally {
        let (lock_id, value, ttl) = (self.lock_id.clone(), self.value.clone(), self.ttl_ms());
        let answers = self
            .masters
            .on_all(self.config.master_timeout, Late::Drop, move |m| {
                extend(m, lock_id.clone(), value.clone(), ttl)
            })
            .await;
        Tally::of(answers)
    }

    /// Delete the key on every master where it still holds our value. A delete the master
    /// timeout cuts off goes on to its end unheard ([`Late::Finish`]).
    async fn delete_on_all(&self) -> Tally {
        let (lock_id, value) = (self.lock_id.clone(), self.value.clone());
        let answers = self
            .masters
            .on_all(self.config.master_timeout, Late::Finish, move |m| {
                delete(m, lock_id.clone(), value.clone())
            })
            .await;
        Tally::of(answers)
    }
}

async fn set_nx(
    m: RedisBackend,
    lock_id: String,
    value: String,
    ttl_ms: u64,
) -> Result<bool, LockError> {
    let key = m.key(&lock_id);
    let mut conn = m.conn().await?;
    let set: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg(&value)
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(&mut conn)
        .await
        .map_err(|e| m.err("SET NX PX", &key, e))?;
    Ok(set.is_some())
}

async fn extend(
    m: RedisBackend,
    lock_id: String,
    value: String,
    ttl_ms: u64,
) -> Result<bool, LockError> {
    let key = m.key(&lock_id);
    let mut conn = m.conn().await?;
    let extended: i64 = RENEW_IF_TOKEN
        .key(&key)
        .arg(&value)
        .arg(ttl_ms)
        .invoke_async(&mut conn)
        .await
        .map_err(|e| m.err("extension script on", &key, e))?;
    Ok(extended == 1)
}

async fn delete(m: RedisBackend, lock_id: String, value: String) -> Result<bool, LockError> {
    let key = m.key(&lock_id);
    let mut conn = m.conn().await?;
    let deleted: i64 = RELEASE_IF_TOKEN
        .key(&key)
        .arg(&value)
        .invoke_async(&mut conn)
        .await
        .map_err(|e| m.err("release script on", &key, e))?;
    Ok(deleted == 1)
}

#[async_trait]
impl Renew for Lease {
    /// The doc's extension: held again only if a majority extended, and only for what is left
    /// of the TTL from the moment the round began, minus the drift.
    async fn renew(&mut self, _cause: Cause) -> Result<Renewal, LockError> {
        let sent = Instant::now();
        let tally = self.extend_on_all().await;
        let (n, quorum) = (self.masters.len(), self.masters.quorum());
        if tally.yes >= quorum {
            return Ok(Renewal::Extended(sent + self.config.ttl - self.config.drift()));
        }
        if tally.no > n - quorum {
            return Ok(Renewal::Gone(format!(
                "{} of {n} masters no longer hold this holder's value of {:?}: a majority is lost",
                tally.no, self.lock_id
            )));
        }
        // Too few answers to know: retried while the validity lasts, then the lease is lost.
        Err(match tally.answered() < quorum {
            true => tally.too_few_answers("extension", quorum, n),
            false => crate::backend_err(
                BackendErrorKind::Other,
                format!(
                    "Redlock extension: {} of {n} masters extended, {quorum} needed",
                    tally.yes
                ),
            ),
        })
    }
}

/// Undoes one grant: stops the extensions, then deletes the key on every master.
struct RedlockRelease {
    keeper: Keeper,
    lease: Lease,
}

#[async_trait]
impl Release for RedlockRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        self.keeper.stop();
        let tally = self.lease.delete_on_all().await;
        self.keeper.released();
        // A master that did not answer keeps its key until the TTL; only a majority that
        // cannot be reached keeps the lock from others.
        let (n, quorum) = (self.lease.masters.len(), self.lease.masters.quorum());
        match tally.answered() < quorum {
            true => Err(tally.too_few_answers("release", quorum, n)),
            false => Ok(()),
        }
    }
}

#[async_trait]
impl Locker for Redlock {
    fn algorithm(&self) -> &str {
        match self.fenced {
            false => "redlock",
            true => "redlock-fenced",
        }
    }
    fn owner(&self) -> &str {
        &self.owner
    }
    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        crate::poll_until(lock_id, timeout, || self.retry_delay(), || self.attempt(lock_id)).await
    }
    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        self.attempt(lock_id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_one_percent_of_the_ttl_plus_two_ms() {
        let c = RedlockConfig::new(Duration::from_secs(10), 1);
        assert_eq!(c.drift(), Duration::from_millis(102));
        assert!(c.check().is_ok());
    }

    #[test]
    fn impossible_settings_are_config_errors() {
        let ttl = Duration::from_millis(40);
        assert!(RedlockConfig::new(ttl, 1).check().is_err(), "no validity left after 50 ms");
        let mut c = RedlockConfig::new(Duration::from_secs(1), 1);
        c.drift_factor = 1.5;
        assert!(c.check().is_err());
        let c = RedlockConfig::new(Duration::from_secs(1), 1).with_retry_delay(Duration::ZERO);
        assert!(c.check().is_err());
    }

    #[test]
    fn owners_sharing_a_seed_draw_different_values() {
        assert_ne!(owner_seed(7, "a"), owner_seed(7, "b"));
        assert_eq!(owner_seed(7, "a"), owner_seed(7, "a"));
    }
}
