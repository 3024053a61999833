//! Keys in create-revision order: the machinery that etcd's Mutex, the reader-writer lock and
//! the election share.
//!
//! A waiter creates one key bound to the session's lease; its **create revision** is its place
//! in line and its fencing token. What it waits for is a *range*: the keys of one prefix
//! created before its own (the mutex's whole prefix; a reader's writers; a candidate's whole
//! election). Waiting is the mutex's: read the range's last key created before ours, watch
//! that one key until it is deleted, read again; none left means our turn, if our key still
//! stands. A key of an attempt that times out, is cancelled or is refused is deleted before the
//! call returns (or in the background when the waiting future is dropped), so that nothing of
//! it delays anyone. The guard's task ([`Holder`]) then tells the holder when its lease ends or
//! someone else deletes or overwrites its key.

use crate::holder::{Holder, OwnWrites};
use crate::rpc::Rpc;
use crate::session::{Session, RETRY_PAUSE};
use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use lock_core::lock::{LeaseState, Release};
use lock_core::retry::{Backoff, Retries};
use lock_core::{BackendErrorKind, LockError, LockGuard};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, OwnedMutexGuard};
use tokio::time::Instant;

/// The prefix's key with the lowest create revision.
pub(crate) fn first_created() -> GetOptions {
    GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend).with_limit(1)
}

/// The prefix's key with the highest create revision below `revision`.
pub(crate) fn last_created_before(revision: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_max_create_revision(revision - 1)
        .with_limit(1)
}

/// Our key (and the keys written with it) while we wait. Dropped without [`Pending::delete`]
/// or being granted (the waiting future was cancelled), it deletes them in the background:
/// left behind they would block others for as long as the lease lives.
pub(crate) struct Pending {
    pub session: Arc<Session>,
    /// Our key: its create revision is our place.
    pub key: String,
    /// Keys created in the same transaction and deleted with ours (an election's owner
    /// record).
    companions: Vec<String>,
    /// Held until the keys are gone (an election's candidacy slot of the session).
    slot: Option<OwnedMutexGuard<()>>,
    armed: bool,
}

impl Pending {
    pub fn new(session: Arc<Session>, key: String) -> Pending {
        Pending { session, key, companions: Vec::new(), slot: None, armed: true }
    }

    /// Keys deleted with ours.
    pub fn with_companions(mut self, companions: Vec<String>) -> Pending {
        self.companions = companions;
        self
    }

    /// A guard held until the keys are deleted.
    pub fn with_slot(mut self, slot: Option<OwnedMutexGuard<()>>) -> Pending {
        self.slot = slot;
        self
    }

    fn keys(&self) -> Vec<String> {
        std::iter::once(self.key.clone()).chain(self.companions.iter().cloned()).collect()
    }

    /// Delete our keys now; a failure leaves a background task deleting them until done.
    pub async fn delete(mut self) -> Result<(), LockError> {
        self.armed = false;
        let keys = self.keys();
        let result = delete_keys(&self.session, &keys).await;
        let slot = self.slot.take();
        if result.is_err() {
            tokio::spawn(delete_until_done(self.session.clone(), keys, slot));
        }
        result
    }

    /// After a create whose answer was lost: delete the keys at once, and again once a request
    /// still on its way must have landed (one request timeout later), in the background.
    pub fn sweep(mut self) {
        self.armed = false;
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (session, keys, slot) = (self.session.clone(), self.keys(), self.slot.take());
            handle.spawn(async move {
                delete_until_done(session.clone(), keys.clone(), None).await;
                tokio::time::sleep(session.request_timeout).await;
                delete_until_done(session, keys, slot).await;
            });
        }
    }

    /// Granted: the keys (and the slot) now belong to the guard's release.
    fn keep(mut self) -> (Vec<String>, Option<OwnedMutexGuard<()>>) {
        self.armed = false;
        (self.keys(), self.slot.take())
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let keys = self.keys();
                handle.spawn(delete_until_done(self.session.clone(), keys, self.slot.take()));
            }
        }
    }
}

/// Delete `keys` (one `DeleteRange`, or one `Txn` of deletes for several). Gone already is
/// success.
pub(crate) async fn delete_keys(session: &Session, keys: &[String]) -> Result<(), LockError> {
    let [first, rest @ ..] = keys else { return Ok(()) };
    if rest.is_empty() {
        let delete = || {
            let (mut kv, key) = (session.client.kv_client(), first.clone());
            async move { kv.delete(key, None).await }
        };
        return session.call(Rpc::DeleteRange, first, delete).await.map(|_| ());
    }
    let txn = Txn::new()
        .and_then(keys.iter().map(|k| TxnOp::delete(k.as_str(), None)).collect::<Vec<_>>());
    let delete = || {
        let (mut kv, txn) = (session.client.kv_client(), txn.clone());
        async move { kv.txn(txn).await }
    };
    session.call(Rpc::Txn, first, delete).await.map(|_| ())
}

/// [`delete_keys`] until it succeeds or the lease is over (which deletes the keys for us), then
/// let `slot` go: a key whose delete failed in an outage would otherwise block others for as
/// long as the lease lives, and a lease that survives the outage lives on.
pub(crate) async fn delete_until_done(
    session: Arc<Session>,
    keys: Vec<String>,
    slot: Option<OwnedMutexGuard<()>>,
) {
    while session.over().is_none() && delete_keys(&session, &keys).await.is_err() {
        tokio::time::sleep(RETRY_PAUSE).await;
    }
    drop(slot);
}

/// What the create found.
pub(crate) struct Enqueued {
    pub pending: Pending,
    /// Our key's create revision: our place, and the fencing token.
    pub revision: i64,
    /// Whether no key of the range we wait for was created before ours.
    pub first: bool,
    /// When the answer came: our place in line was fixed by then.
    pub queued_at: Instant,
}

/// How a wait for the keys ahead ended.
pub(crate) enum Waited {
    /// No key of the range created before ours is left: ours, if our key still exists.
    NoneBefore,
    /// The lease ended (our key with it).
    LeaseOver(String),
    /// The deadline passed.
    TimedOut,
}

/// The waits of one kind of key: where our key is made, and which keys we wait for.
pub(crate) struct Line<'a> {
    pub session: &'a Arc<Session>,
    /// The lock id (or election) for guards and errors.
    pub lock_id: &'a str,
    /// The owner, written as our key's value.
    pub owner: &'a str,
    /// Our key is `<key_prefix><lease hex>-<n>`.
    pub key_prefix: &'a str,
    /// We hold once no key under this prefix created before ours is left.
    pub ahead: &'a str,
}

impl Line<'_> {
    /// Step 1: our key, created in one transaction that also reads the first key of the range
    /// we wait for.
    pub async fn enqueue(&self) -> Result<Enqueued, LockError> {
        let session = self.session;
        let key = session.new_key(self.key_prefix);
        let lease = PutOptions::new().with_lease(session.lease);
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([
                TxnOp::put(key.as_str(), self.owner, Some(lease)),
                TxnOp::get(self.ahead, Some(first_created())),
            ])
            .or_else([
                TxnOp::get(key.as_str(), None),
                TxnOp::get(self.ahead, Some(first_created())),
            ]);
        let create = || {
            let (mut kv, txn) = (session.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        };
        let answer = match session.call(Rpc::Txn, &key, create).await {
            Ok(answer) => answer,
            Err(e) => {
                // The transaction may have been applied without our hearing of it: its key is
                // ours alone, so delete it now and again once a late request must have landed.
                Pending::new(session.clone(), key).sweep();
                return Err(e);
            }
        };
        let queued_at = Instant::now();
        let pending = Pending::new(session.clone(), key);
        let responses = answer.op_responses();
        let kvs = |i: usize| match responses.get(i) {
            Some(TxnOpResponse::Get(get)) => get.kvs().to_vec(),
            _ => Vec::new(),
        };
        let revision = if answer.succeeded() {
            answer.header().map_or(0, |h| h.revision())
        } else {
            kvs(0).first().map_or(0, |kv| kv.create_revision())
        };
        if revision <= 0 {
            let no_revision = "the transaction's answer has no revision";
            let e = session.err(BackendErrorKind::Protocol, "create", &pending.key, no_revision);
            drop(pending);
            return Err(e);
        }
        let first = kvs(1).first().is_none_or(|kv| kv.create_revision() >= revision);
        Ok(Enqueued { pending, revision, first, queued_at })
    }

    /// Wait until `lock_id` is ours (steps 1 to 4), or `timeout` passes.
    pub async fn lock(&self, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let session = self.session;
        // A transient failure while the lease stands is one more failed step, retried within
        // the deadline: a create whose answer was lost is swept by its own sweep, and the
        // retry makes a new key (each create names one of its own).
        let mut retries = Retries::new(Backoff::default(), deadline);
        let Enqueued { pending, revision, first, queued_at } = loop {
            match self.enqueue().await {
                Ok(enqueued) => break enqueued,
                Err(e) if session.over().is_some() => return Err(e),
                Err(e) => tokio::time::sleep(retries.failed(e, Instant::now())?).await,
            }
        };
        retries.answered();
        if !first {
            match wait_turn(session, self.ahead, revision, deadline).await {
                Waited::NoneBefore => {}
                Waited::LeaseOver(why) => return Err(place_lost(self.lock_id, &pending, why)),
                Waited::TimedOut => {
                    // Our key goes before we report: a waiter behind us must not wait on it.
                    pending.delete().await?;
                    return Err(LockError::Timeout {
                        lock_id: self.lock_id.to_string(),
                        waited: start.elapsed(),
                    });
                }
            }
            confirm(self.lock_id, &pending, &mut retries).await?;
        }
        let guard = grant(self.lock_id, self.owner, pending, revision, None);
        Ok(guard.with_queued_at(queued_at))
    }

    /// Step 1 alone: held at once (`Some`), or our key deleted and `None`.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>, LockError> {
        let Enqueued { pending, revision, first, queued_at } = self.enqueue().await?;
        if first {
            let guard = grant(self.lock_id, self.owner, pending, revision, None);
            return Ok(Some(guard.with_queued_at(queued_at)));
        }
        pending.delete().await?;
        Ok(None)
    }
}

/// The error of a waiter whose lease ended: its place was its key.
pub(crate) fn place_lost(lock_id: &str, pending: &Pending, why: String) -> LockError {
    LockError::LeaseLost {
        lock_id: lock_id.to_string(),
        reason: format!(
            "{why}; our key {} (our place in the queue) went with the lease",
            pending.key
        ),
    }
}

/// Step 4: the lease may have ended, taking our key, just as the last key ahead went. Read
/// our key (retried within the call's deadline): gone is a lost place.
pub(crate) async fn confirm(
    lock_id: &str,
    pending: &Pending,
    retries: &mut Retries,
) -> Result<(), LockError> {
    let session = &pending.session;
    let read = || {
        let (mut kv, key) = (session.client.kv_client(), pending.key.clone());
        async move { kv.get(key, None).await }
    };
    let ours = loop {
        match session.call(Rpc::Range, &pending.key, read).await {
            Ok(answer) => break answer,
            Err(e) if session.over().is_some() => return Err(e),
            Err(e) => tokio::time::sleep(retries.failed(e, Instant::now())?).await,
        }
    };
    if ours.kvs().is_empty() {
        let why = session.over().unwrap_or_else(|| "our key was deleted while we waited".into());
        return Err(place_lost(lock_id, pending, why));
    }
    Ok(())
}

/// Step 3: wait until no key under `ahead` was created before `revision`, the lease ends, or
/// `deadline` passes. Failed reads and watches are tried again after a pause.
pub(crate) async fn wait_turn(
    session: &Session,
    ahead: &str,
    revision: i64,
    deadline: Option<Instant>,
) -> Waited {
    loop {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Waited::TimedOut;
        }
        let step = async {
            let read = || {
                let (mut kv, prefix) = (session.client.kv_client(), ahead.to_string());
                async move { kv.get(prefix, Some(last_created_before(revision))).await }
            };
            let before = session.call(Rpc::Range, ahead, read).await?;
            let Some(predecessor) = before.kvs().first() else {
                return Ok(true);
            };
            let read_at = before.header().map_or(0, |h| h.revision());
            watch_deletion(session, predecessor.key(), read_at + 1).await?;
            Ok::<bool, LockError>(false)
        };
        tokio::select! {
            done = step => match done {
                Ok(true) => return Waited::NoneBefore,
                Ok(false) => {}
                // An outage: keep our place and try again while the lease stands.
                Err(_) => tokio::time::sleep(RETRY_PAUSE).await,
            },
            why = session.ended() => return Waited::LeaseOver(why),
            _ = sleep_until(deadline) => return Waited::TimedOut,
        }
    }
}

/// Sleep until `deadline`, or forever without one.
pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Wait until `key` is deleted, watching from `from_revision`. `Ok` also when the watch ends
/// without a deletion (cancelled by the server, or compacted): the caller reads again.
async fn watch_deletion(
    session: &Session,
    key: &[u8],
    from_revision: i64,
) -> Result<(), LockError> {
    let name = String::from_utf8_lossy(key).into_owned();
    let options = WatchOptions::new().with_start_revision(from_revision);
    let open = || {
        let (mut watches, key, options) =
            (session.client.watch_client(), key.to_vec(), options.clone());
        async move { watches.watch(key, Some(options)).await }
    };
    let mut stream = session.call(Rpc::Watch, &name, open).await?;
    loop {
        let answer = stream.message().await.map_err(|e| session.driver_err("watch", &name, e))?;
        let Some(answer) = answer else {
            let ended = "the watch stream ended";
            return Err(session.err(BackendErrorKind::Unavailable, "watch", &name, ended));
        };
        if answer.canceled() || answer.compact_revision() > 0 {
            return Ok(());
        }
        if answer.events().iter().any(|e| e.event_type() == EventType::Delete) {
            return Ok(());
        }
    }
}

/// The guard for our key, and its task, which tells it when the lease ends or another client
/// deletes or overwrites the key ([`Holder`]): started, not awaited. `own_writes` are the
/// values we write to the key ourselves while holding it (an election's proclamations).
pub(crate) fn grant(
    lock_id: &str,
    owner: &str,
    pending: Pending,
    revision: i64,
    own_writes: Option<Arc<OwnWrites>>,
) -> LockGuard {
    let session = pending.session.clone();
    let deadline = session.deadline();
    let key = pending.key.clone();
    let (keys, slot) = pending.keep();
    let (tx, rx) = watch::channel(LeaseState::Held);
    let state = Arc::new(tx);
    let (stop, stopped) = watch::channel(false);
    let holder = Holder {
        session: session.clone(),
        key,
        revision,
        own_writes,
        state: state.clone(),
        stop: stopped,
    };
    tokio::spawn(holder.run());
    let release = EtcdRelease { session, keys, stop, state, slot };
    LockGuard::new(lock_id, owner, revision as u64, rx, Box::new(release)).with_deadline(deadline)
}

struct EtcdRelease {
    session: Arc<Session>,
    /// Our key and its companions.
    keys: Vec<String>,
    /// Set before the release deletes the key, and dropped with the guard: the holder's task
    /// stops, and never reports our own delete.
    stop: watch::Sender<bool>,
    state: Arc<watch::Sender<LeaseState>>,
    /// Let go once the keys are deleted.
    slot: Option<OwnedMutexGuard<()>>,
}

#[async_trait]
impl Release for EtcdRelease {
    async fn release(mut self: Box<Self>) -> Result<(), LockError> {
        self.stop.send_replace(true);
        let result = delete_keys(&self.session, &self.keys).await;
        let slot = self.slot.take();
        if result.is_err() {
            // The lease may outlive the outage that failed the delete, and with it the key that
            // holds the lock: keep deleting in the background until one of them is gone.
            tokio::spawn(delete_until_done(self.session.clone(), self.keys.clone(), slot));
        } else {
            drop(slot);
        }
        self.state.send_replace(LeaseState::Released);
        result
    }
}
