//! Leader election on a client's session: a candidacy is an ask for the election's lock id
//! carrying the candidate's value, and its grant is the leadership.
//!
//! The state machine keeps the leader's value with its grant ([`crate::state`]) and, in the
//! commit that changes who leads or what it announced, pushes the change to every session
//! observing the election ([`super::observe`]). The term is the grant's fencing token, so it
//! rises with every leader. Candidates wait in the lock's FIFO queue: the next leader is the
//! candidate that asked first, elected in the commit that ends the last leadership (a
//! resignation, or the leader's session expiring).

use super::locker::{unexpected, Ask, ServiceLocker};
use super::observe::observe;
use super::session::Session;
use crate::proto::{Reply, Request, Share};
use async_trait::async_trait;
use lock_core::election::{check_value, Elector, Leader, Leadership, Observer, Proclaim};
use lock_core::lock::{validate_id, LockError};
use lock_core::usage::UsageError;
use std::sync::Arc;
use std::time::Duration;

/// An [`Elector`] on a [`ServiceClient`](super::ServiceClient)'s session.
pub struct ServiceElector {
    pub(super) locker: ServiceLocker,
}

/// Announces a leader's new value.
struct ServiceProclaim {
    session: Arc<Session>,
    election: String,
    owner: String,
    attempt: u64,
}

#[async_trait]
impl Proclaim for ServiceProclaim {
    async fn proclaim(&self, term: u64, value: &[u8]) -> Result<(), LockError> {
        let request = Request::Proclaim {
            session: self.session.id,
            lock: self.election.clone(),
            owner: self.owner.clone(),
            attempt: self.attempt,
            value: value.to_vec(),
        };
        match self.session.call(request).await? {
            Reply::Proclaimed => Ok(()),
            Reply::NotHeld => {
                Err(UsageError::NotLeader { election: self.election.clone(), term }.into())
            }
            other => Err(unexpected(&self.election, other)),
        }
    }
}

#[async_trait]
impl Elector for ServiceElector {
    fn algorithm(&self) -> &str {
        super::ALGORITHM
    }

    fn owner(&self) -> &str {
        &self.locker.owner
    }

    async fn campaign(
        &self,
        election: &str,
        value: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Leadership, LockError> {
        validate_id("election", election)?;
        check_value(&value)?;
        let ask = Ask { share: Share::Exclusive, value: Some(value.clone()) };
        let granted = self.locker.ask(election, ask, timeout).await?;
        let proclaim = ServiceProclaim {
            session: granted.session,
            election: election.to_string(),
            owner: self.locker.owner.clone(),
            attempt: granted.attempt,
        };
        Ok(Leadership::new(granted.guard, value, Box::new(proclaim)))
    }

    async fn leader(&self, election: &str) -> Result<Option<Leader>, LockError> {
        validate_id("election", election)?;
        let session = self.locker.client.live_session().await?;
        let ask = Request::Observe { session: session.id, lock: election.to_string() };
        match session.call(ask).await? {
            Reply::Leader { leader } => {
                Ok(leader.map(|l| Leader { owner: l.owner, value: l.value, term: l.term }))
            }
            other => Err(unexpected(election, other)),
        }
    }

    async fn observe(&self, election: &str) -> Result<Observer, LockError> {
        validate_id("election", election)?;
        let session = self.locker.client.live_session().await?;
        Ok(observe(&session, election))
    }
}
