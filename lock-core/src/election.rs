//! Leader election: campaign with a value, learn who leads and with what value, resign; the
//! leader's term is its fencing token.
//!
//! An [`Elector`] is bound to one owner, like a [`Locker`](crate::lock::Locker). Electing a
//! leader is a lock held for as long as the leader leads, plus a value the leader announces
//! (its address, say) and a way for everyone else to follow the changes:
//! - [`Elector::campaign`] waits until this owner leads (or the timeout passes) and returns a
//!   [`Leadership`]: a guard with the lock's lease, its lost signal and its token, the
//!   **term**. Terms strictly increase from one leader to the next, so a resource written only
//!   by leaders can refuse a deposed leader's writes by its term.
//! - [`Leadership::proclaim`] changes the announced value without an election;
//!   [`Leadership::resign`] gives leadership up (the next candidate is elected).
//! - [`Elector::leader`] answers who leads now; [`Elector::observe`] follows the changes: each
//!   new leader, each new value, and each vacancy, in the order they happened.
//!
//! # What an observer is promised
//! Every change it reports happened, in that order, and terms never go back. A backend that
//! learns of changes by watching may not see a leader that came and went between two of its
//! looks; each implementation says whether it can miss one (a leader that led for less than a
//! round trip). Every backend reports the leader that stays.
//!
//! # Values
//! At most [`MAX_VALUE_LEN`] bytes on every backend (the smallest limit among them, with room
//! for the rest of a request); a longer one is refused before anything is sent
//! ([`UsageError::ValueTooLarge`]).

use crate::lock::{LeaseLost, LeaseState, LockError, LockGuard};
use crate::usage::UsageError;
use async_trait::async_trait;
use std::time::Duration;

/// The longest value a candidate may announce, in bytes.
pub const MAX_VALUE_LEN: usize = 4 * 1024;

/// Who leads an election, and what it announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    /// The leader's owner id.
    pub owner: String,
    /// What it announced (its campaign value, or its last proclamation).
    pub value: Vec<u8>,
    /// Its term: its leadership's fencing token.
    pub term: u64,
}

/// Changes the value a leader announces. Implemented by each backend.
#[async_trait]
pub trait Proclaim: Send + Sync + 'static {
    /// Announce `value` for the leadership whose term is `term`. Refused with
    /// [`UsageError::NotLeader`] when that leadership is over.
    async fn proclaim(&self, term: u64, value: &[u8]) -> Result<(), LockError>;
}

/// Proof of leading an election. Resign with [`Leadership::resign`]; dropping it resigns in a
/// background task, as dropping a [`LockGuard`] releases.
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    guard: LockGuard,
    value: Vec<u8>,
    proclaim: Box<dyn Proclaim>,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("guard", &self.guard)
            .field("value_len", &self.value.len())
            .finish()
    }
}

impl Leadership {
    /// The leadership `guard` holds (its lock id is the election's, its token the term), having
    /// announced `value`.
    pub fn new(guard: LockGuard, value: Vec<u8>, proclaim: Box<dyn Proclaim>) -> Self {
        Leadership { guard, value, proclaim }
    }
    /// The election.
    pub fn election(&self) -> &str {
        self.guard.lock_id()
    }
    /// The leader's owner id.
    pub fn owner(&self) -> &str {
        self.guard.owner()
    }
    /// The term: strictly greater than every earlier leader's of this election.
    pub fn term(&self) -> u64 {
        self.guard.token()
    }
    /// The value announced last.
    pub fn value(&self) -> &[u8] {
        &self.value
    }
    /// The lease's state now.
    pub fn lease_state(&self) -> LeaseState {
        self.guard.lease_state()
    }
    /// True when leadership was lost: stop acting as the leader.
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }
    /// Resolves when leadership is lost.
    pub async fn lost(&self) -> LeaseLost {
        self.guard.lost().await
    }
    /// Announce `value` instead, without an election. Refused with
    /// [`UsageError::ValueTooLarge`] or, once leadership is over, [`UsageError::NotLeader`].
    pub async fn proclaim(&mut self, value: Vec<u8>) -> Result<(), LockError> {
        check_value(&value)?;
        if self.guard.is_lost() {
            return Err(self.not_leader());
        }
        self.proclaim.proclaim(self.term(), &value).await?;
        self.value = value;
        Ok(())
    }
    /// Give leadership up: the next candidate is elected. Once leadership was lost, refused
    /// with [`UsageError::NotLeader`] (and whatever was left of it is released all the same).
    pub async fn resign(self) -> Result<(), LockError> {
        let lost = self.guard.is_lost().then(|| self.not_leader());
        let released = self.guard.release().await;
        match lost {
            Some(e) => Err(e),
            None => released,
        }
    }
    /// Let go as a crashed process would ([`LockGuard::abandon`]).
    pub fn abandon(self) {
        self.guard.abandon()
    }
    /// The guard that holds the leadership: releasing it resigns (without the check
    /// [`Leadership::resign`] makes that leadership was not lost first). For code that
    /// handles every kind of hold alike (the harness's contenders).
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    fn not_leader(&self) -> LockError {
        UsageError::NotLeader { election: self.election().to_string(), term: self.term() }.into()
    }
}

/// Refuse a value longer than [`MAX_VALUE_LEN`].
pub fn check_value(value: &[u8]) -> Result<(), LockError> {
    if value.len() > MAX_VALUE_LEN {
        return Err(UsageError::ValueTooLarge { len: value.len(), max: MAX_VALUE_LEN }.into());
    }
    Ok(())
}

/// A stream of an election's changes ([`Elector::observe`]).
pub struct Observer {
    election: String,
    rx: tokio::sync::mpsc::UnboundedReceiver<Result<Option<Leader>, LockError>>,
}

impl Observer {
    /// An observer fed by `rx`: each item a change (a leader, or `None` for no leader), or the
    /// error that ended the observation.
    pub fn new(
        election: impl Into<String>,
        rx: tokio::sync::mpsc::UnboundedReceiver<Result<Option<Leader>, LockError>>,
    ) -> Self {
        Observer { election: election.into(), rx }
    }
    /// The election observed.
    pub fn election(&self) -> &str {
        &self.election
    }
    /// The next change: who leads now (`None`: nobody). An error when the observation ended
    /// (its session lost, its backend gone), after which no change comes.
    pub async fn changed(&mut self) -> Result<Option<Leader>, LockError> {
        match self.rx.recv().await {
            Some(change) => change,
            None => Err(LockError::LeaseLost {
                lock_id: self.election.clone(),
                reason: "the observation ended".into(),
            }),
        }
    }
}

/// A leader-election algorithm bound to one owner.
#[async_trait]
pub trait Elector: Send + Sync + 'static {
    /// The algorithm's short name.
    fn algorithm(&self) -> &str;
    /// The owner id.
    fn owner(&self) -> &str;
    /// Wait until this owner leads `election`, announcing `value`, or until `timeout` passes
    /// ([`LockError::Timeout`], with nothing of the candidacy left behind).
    async fn campaign(
        &self,
        election: &str,
        value: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Leadership, LockError>;
    /// Who leads `election` now.
    async fn leader(&self, election: &str) -> Result<Option<Leader>, LockError>;
    /// Follow `election`: the first change reported is who leads when the observation starts.
    async fn observe(&self, election: &str) -> Result<Observer, LockError>;
}
