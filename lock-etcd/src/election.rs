//! Leader election as etcd's `concurrency.Election` (`client/v3/concurrency/election.go`)
//! does it, key for key, so that `etcdctl elect`, a Go program and this crate take part in one
//! election.
//!
//! # Layout
//! Election `<id>` is the Go client's `pfx` = `<root>/elections/<id>` (what `etcdctl elect`
//! takes as its election name). A candidate's key is `<pfx>/<lease id in hex>`, bound to the
//! lease, its value the candidate's value and nothing else, so that every client reads the
//! same value. Beside it, created and deleted in the same transactions, this crate keeps its
//! owner id in `<root>/candidates/<id>/<lease id in hex>`, outside the election's prefix
//! (which Go reads whole): the owner a [`Leader`] names. A candidate of another client has no
//! such record, and is named by its key's last segment, its lease id in hex.
//!
//! # Protocol
//! - **Campaign**: `IF create_revision(key) = 0 THEN put(key, value), put(owner record) ELSE
//!   get(key)`. The leader is the key with the lowest create revision under the prefix; a
//!   candidate waits, as the mutex does, for the deletion of every key created before its own
//!   (Go's `waitDeletes`), then reads its key (gone: [`LockError::LeaseLost`]). A key already
//!   there (a campaign of ours whose answer was lost) is taken up as Go takes it up: the new
//!   value and owner are written over it, guarded by its create revision.
//! - **Proclaim**: `IF create_revision(key) = term THEN put(key, value)`; refused
//!   ([`UsageError::NotLeader`]) when the key is gone or another.
//! - **Resign**: delete the key and the owner record, in one transaction.
//! - **Leader**: the prefix's first key by create revision, and the owner records, in one
//!   transaction.
//! - **Observe** ([`crate::observe`]): watch the prefix.
//!
//! The term is the leader key's create revision. The next leader's key is the lowest of those
//! left, all created after the last leader's, so terms strictly increase.
//!
//! # One candidacy per session and election
//! Go names a candidate's key after its lease alone, so two campaigns on one lease would be
//! one candidate. The electors of one backend share its lease: their campaigns in one election
//! follow each other (a local slot per election, taken before the key is created and given
//! back once it is deleted), and a campaign waiting for that slot counts against its timeout.
//! Electors on different backends are independent candidates. A create whose answer was lost
//! is sent again as it is (create-or-get is idempotent); a campaign that fails after it
//! deletes the key at once and again one request timeout later, holding the slot until then.
//!
//! # What is told to whom
//! A leader's guard is the mutex's: told when the lease ends or another client deletes or
//! overwrites the key (our own proclamations are recognised and are not news).

use crate::holder::OwnWrites;
use crate::observe::{leader_of, observe, Places};
use crate::queue::{confirm, grant, place_lost, wait_turn, Pending, Waited};
use crate::rpc::Rpc;
use crate::session::Session;
use crate::Inner;
use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use lock_core::election::{check_value, Elector, Leader, Leadership, Observer, Proclaim};
use lock_core::lock::validate_id;
use lock_core::retry::{Backoff, Retries};
use lock_core::usage::UsageError;
use lock_core::{BackendErrorKind, LockError};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// etcd's election for one owner. See the module docs for the protocol.
pub struct EtcdElector {
    inner: Arc<Inner>,
    owner: String,
}

impl std::fmt::Debug for EtcdElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdElector")
            .field("owner", &self.owner)
            .field("endpoints", &self.inner.endpoints)
            .finish()
    }
}

/// Announces a leader's new value: Go's `Proclaim`.
struct EtcdProclaim {
    session: Arc<Session>,
    election: String,
    key: String,
    own_writes: Arc<OwnWrites>,
}

#[async_trait]
impl Proclaim for EtcdProclaim {
    async fn proclaim(&self, term: u64, value: &[u8]) -> Result<(), LockError> {
        let session = &self.session;
        // Recorded before it is sent: the holder's watch must not take it for a stranger's.
        self.own_writes.add(value);
        let lease = PutOptions::new().with_lease(session.lease);
        let txn = Txn::new()
            .when([Compare::create_revision(self.key.as_str(), CompareOp::Equal, term as i64)])
            .and_then([TxnOp::put(self.key.as_str(), value.to_vec(), Some(lease))]);
        let send = || {
            let (mut kv, txn) = (session.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        };
        let answer = session.call(Rpc::Txn, &self.key, send).await?;
        if !answer.succeeded() {
            return Err(UsageError::NotLeader { election: self.election.clone(), term }.into());
        }
        Ok(())
    }
}

impl EtcdElector {
    pub(crate) fn new(inner: Arc<Inner>, owner: &str) -> EtcdElector {
        EtcdElector { inner, owner: owner.to_string() }
    }

    /// Step 1: create our key and owner record, or find our key. Retried as it is within the
    /// deadline (create-or-get is idempotent). Its create revision, and whether it was there
    /// already.
    async fn create(
        &self,
        session: &Session,
        key: &str,
        owner_key: &str,
        value: &[u8],
        retries: &mut Retries,
    ) -> Result<(i64, Option<Vec<u8>>), LockError> {
        let lease = || Some(PutOptions::new().with_lease(session.lease));
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key, value.to_vec(), lease()),
                TxnOp::put(owner_key, self.owner.as_str(), lease()),
            ])
            .or_else([TxnOp::get(key, None)]);
        let send = || {
            let (mut kv, txn) = (session.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        };
        let answer = loop {
            match session.call(Rpc::Txn, key, send).await {
                Ok(answer) => break answer,
                Err(e) if session.over().is_some() => return Err(e),
                Err(e) => tokio::time::sleep(retries.failed(e, Instant::now())?).await,
            }
        };
        retries.answered();
        let protocol = |what: &str| session.err(BackendErrorKind::Protocol, "create", key, what);
        if answer.succeeded() {
            let revision = answer.header().map_or(0, |h| h.revision());
            if revision <= 0 {
                return Err(protocol("the transaction's answer has no revision"));
            }
            return Ok((revision, None));
        }
        let found = match answer.op_responses().into_iter().next() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().cloned(),
            _ => None,
        };
        match found {
            Some(kv) => Ok((kv.create_revision(), Some(kv.value().to_vec()))),
            // Deleted between the compare and the read cannot happen in one transaction.
            None => Err(protocol("the key the transaction found is not in its answer")),
        }
    }

    /// A key of ours found in place: write our value and owner over it, guarded by its create
    /// revision (Go's campaign proclaims in that case). False when it went meanwhile.
    async fn take_up(
        &self,
        session: &Session,
        key: &str,
        owner_key: &str,
        revision: i64,
        value: &[u8],
    ) -> Result<bool, LockError> {
        let lease = || Some(PutOptions::new().with_lease(session.lease));
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, revision)])
            .and_then([
                TxnOp::put(key, value.to_vec(), lease()),
                TxnOp::put(owner_key, self.owner.as_str(), lease()),
            ]);
        let send = || {
            let (mut kv, txn) = (session.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        };
        Ok(session.call(Rpc::Txn, key, send).await?.succeeded())
    }
}

#[async_trait]
impl Elector for EtcdElector {
    fn algorithm(&self) -> &str {
        "etcd-election"
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    async fn campaign(
        &self,
        election: &str,
        value: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Leadership, LockError> {
        validate_id("election", election)?;
        check_value(&value)?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let timed_out =
            || LockError::Timeout { lock_id: election.to_string(), waited: start.elapsed() };
        let session = self.inner.session().await?;
        let slot = session.candidacy(election).lock_owned();
        let slot = match deadline {
            Some(d) => tokio::time::timeout_at(d, slot).await.map_err(|_| timed_out())?,
            None => slot.await,
        };
        let places = Places::of(&self.inner, election);
        let lease_hex = format!("{:x}", session.lease);
        let key = format!("{}{lease_hex}", places.prefix);
        let owner_key = format!("{}{lease_hex}", places.owners);
        // From here on our keys may exist: every way out deletes them (and only then lets the
        // slot go).
        let pending = Pending::new(session.clone(), key.clone())
            .with_companions(vec![owner_key.clone()])
            .with_slot(Some(slot));
        let own_writes = Arc::new(OwnWrites::default());
        let mut retries = Retries::new(Backoff::default(), deadline);
        let (revision, found) =
            match self.create(&session, &key, &owner_key, &value, &mut retries).await {
                Ok(created) => created,
                Err(e) => {
                    pending.sweep();
                    return Err(e);
                }
            };
        let queued_at = Instant::now();
        if let Some(found) = found {
            own_writes.add(&found);
            own_writes.add(&value);
            match self.take_up(&session, &key, &owner_key, revision, &value).await {
                Ok(true) => {}
                Ok(false) => {
                    let why = "our key went while we took it up".to_string();
                    return Err(place_lost(election, &pending, why));
                }
                Err(e) => {
                    pending.sweep();
                    return Err(e);
                }
            }
        }
        match wait_turn(&session, &places.prefix, revision, deadline).await {
            Waited::NoneBefore => {}
            Waited::LeaseOver(why) => return Err(place_lost(election, &pending, why)),
            Waited::TimedOut => {
                pending.delete().await?;
                return Err(timed_out());
            }
        }
        confirm(election, &pending, &mut retries).await?;
        let guard = grant(election, &self.owner, pending, revision, Some(own_writes.clone()))
            .with_queued_at(queued_at);
        let proclaim = EtcdProclaim { session, election: election.to_string(), key, own_writes };
        Ok(Leadership::new(guard, value, Box::new(proclaim)))
    }

    async fn leader(&self, election: &str) -> Result<Option<Leader>, LockError> {
        validate_id("election", election)?;
        let session = self.inner.session().await?;
        let places = Places::of(&self.inner, election);
        let txn = Txn::new().and_then([
            TxnOp::get(places.prefix.as_str(), Some(crate::queue::first_created())),
            TxnOp::get(places.owners.as_str(), Some(GetOptions::new().with_prefix())),
        ]);
        let send = || {
            let (mut kv, txn) = (session.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        };
        let answer = session.call(Rpc::Txn, &places.prefix, send).await?;
        let gets: Vec<_> = answer
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(get) => Some(get.kvs().to_vec()),
                _ => None,
            })
            .collect();
        let (first, owners) = match gets.as_slice() {
            [first, owners] => (first.first(), owners.as_slice()),
            _ => {
                let what = "the transaction's answer lacks its reads";
                return Err(session.err(BackendErrorKind::Protocol, "read", &places.prefix, what));
            }
        };
        Ok(first.map(|kv| leader_of(kv, owners)))
    }

    async fn observe(&self, election: &str) -> Result<Observer, LockError> {
        validate_id("election", election)?;
        // A session (a lease) is not needed to watch; asking for one checks the backend is
        // usable and gives the requests their identity.
        self.inner.session().await?;
        Ok(observe(self.inner.clone(), election))
    }
}
