//! A counting semaphore on the mutex's revision ordering. etcd has no semaphore recipe; this
//! one keeps the mutex's shape (a key per ask, bound to the lease, served in create-revision
//! order) and counts instead of excluding.
//!
//! # Layout
//! Semaphore `<id>` of N permits lives under `<root>/semaphores/<id>/`. An acquire of k permits
//! creates one key `<lease hex>-<n>` there, bound to the lease, whose value is `"N k owner"`
//! (decimal numbers, single spaces).
//!
//! # Protocol
//! 1. **Enqueue, in one transaction** that writes nothing unless the sizes agree: `IF` the
//!    prefix is empty `THEN put(key)` `ELSE` a nested transaction `IF` every value under the
//!    prefix starts with `"N "` `THEN put(key), get(prefix)` `ELSE get(first key of the
//!    prefix)`. The second branch is the size check: etcd compares a value over a whole range,
//!    and a value lies strictly between `"N "` and `"N!"` exactly when it starts with `"N "`.
//!    The third answers [`UsageError::LimitMismatch`] with the size the first key records, and
//!    nothing was written. So all keys of a semaphore record one size at every revision.
//! 2. The ask **holds** once the permits of the keys created before its own, plus its k, are
//!    at most N. The keys ahead, holders and waiters alike, count: asks are served first come,
//!    first served, and a large ask at the head of the line is not passed by smaller ones.
//! 3. Otherwise it **waits** by watching the prefix for deletions from the revision after its
//!    read (etcd delivers every event from that revision on), subtracting the permits of each
//!    key ahead that goes; a watch the server cancels, or that breaks, is replaced after a
//!    fresh read of the keys ahead. Then it reads its own key, as the mutex does: gone is a
//!    lost place ([`LockError::LeaseLost`]).
//! 4. **Release** deletes the key. Timeouts, cancellations, refused try asks, lost answers,
//!    outages, the holder's task and a lost lease are the mutex's ([`crate::queue`]).
//!
//! # Why never more than N are held
//! Take the holder whose key has the greatest create revision among those holding at some
//! instant. Every other holder's key was created before it and still exists, so it existed
//! when that holder read the keys ahead of its own (keys are created at increasing revisions
//! and, once deleted, never come back): their permits were in the sum it found to fit in N
//! with its own. Hence the permits held at that instant are at most N. The argument is about
//! keys, so it is only as good as the lease: a holder cut off from etcd is told that its
//! permits are lost before the server can expire its lease, as with the mutex.
//!
//! # Tokens
//! An acquire whose key has create revision r carries the tokens r·N + i for i below k:
//! distinct, and above every token of an acquire whose key was created earlier, since
//! (r + 1)·N exceeds r·N + k − 1. An acquire called after another's permits were released
//! creates its key at a greater revision, so its tokens are greater. They compare across
//! acquires of one size, which is every acquire while any key of the semaphore exists: a
//! semaphore left empty and used again with another size starts a new series. A product that
//! would not fit in 64 bits is an error, never a wrapped token.
//!
//! # Costs
//! An acquire that fits at once is one `Txn` (its create) plus the holder's `Watch` of its key;
//! a waiter adds one `Watch` of the prefix, which every deletion of a key of the semaphore
//! reaches, and the `Range` of its own key once it fits. The release is one `DeleteRange`.

use crate::holder::OwnWrites;
use crate::queue::{self, confirm, grant, place_lost, sleep_until, Pending};
use crate::rpc::Rpc;
use crate::session::{Session, RETRY_PAUSE};
use crate::{Inner, SEMAPHORES};
use async_trait::async_trait;
use etcd_client::{
    Compare, CompareOp, EventType, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, WatchFilterType, WatchOptions,
};
use lock_core::lock::validate_id;
use lock_core::retry::{Backoff, Retries};
use lock_core::semaphore::{check_acquire, Permits, Semaphore};
use lock_core::usage::UsageError;
use lock_core::{BackendErrorKind, LockError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A counting semaphore for one owner. See the module docs for the protocol.
pub struct EtcdSemaphore {
    inner: Arc<Inner>,
    owner: String,
}

impl std::fmt::Debug for EtcdSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdSemaphore")
            .field("owner", &self.owner)
            .field("endpoints", &self.inner.endpoints)
            .finish()
    }
}

/// One acquire: the semaphore, its size, the permits asked for.
struct Ask<'a> {
    session: &'a Arc<Session>,
    id: &'a str,
    owner: &'a str,
    prefix: String,
    limit: u32,
    count: u32,
}

/// What the create found.
struct Created {
    pending: Pending,
    revision: i64,
    queued_at: Instant,
    /// The keys created before ours, and the permits each records.
    ahead: HashMap<Vec<u8>, u32>,
    /// The revision the keys ahead were read at.
    read_at: i64,
}

/// `(N, k)` from a key's value `"N k owner"`.
fn parse(value: &[u8]) -> Option<(u32, u32)> {
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.splitn(3, ' ');
    let limit = parts.next()?.parse().ok()?;
    let count = parts.next()?.parse().ok()?;
    Some((limit, count))
}

impl Ask<'_> {
    fn sum(&self, ahead: &HashMap<Vec<u8>, u32>) -> u64 {
        ahead.values().map(|k| u64::from(*k)).sum()
    }

    fn fits(&self, ahead: &HashMap<Vec<u8>, u32>) -> bool {
        self.sum(ahead) + u64::from(self.count) <= u64::from(self.limit)
    }

    /// The permits of `kvs` created before `revision`. A value that is not a semaphore's
    /// counts as the whole semaphore: nothing passes a key it cannot read.
    fn ahead_of(&self, kvs: &[etcd_client::KeyValue], revision: i64) -> HashMap<Vec<u8>, u32> {
        kvs.iter()
            .filter(|kv| kv.create_revision() < revision)
            .map(|kv| (kv.key().to_vec(), parse(kv.value()).map_or(self.limit, |(_, k)| k)))
            .collect()
    }

    /// Step 1: our key, written only if every key of the semaphore records our size.
    async fn create(&self) -> Result<Created, LockError> {
        let session = self.session;
        let key = session.new_key(&self.prefix);
        let value = format!("{} {} {}", self.limit, self.count, self.owner);
        let lease = PutOptions::new().with_lease(session.lease);
        let put = TxnOp::put(key.as_str(), value.as_str(), Some(lease));
        let all = GetOptions::new().with_prefix().with_sort(SortTarget::Create, SortOrder::Ascend);
        let prefix = self.prefix.as_str();
        let same_size = Txn::new()
            .when([
                Compare::value(prefix, CompareOp::Greater, format!("{} ", self.limit))
                    .with_prefix(),
                Compare::value(prefix, CompareOp::Less, format!("{}!", self.limit)).with_prefix(),
            ])
            .and_then([put.clone(), TxnOp::get(prefix, Some(all))])
            .or_else([TxnOp::get(prefix, Some(queue::first_created()))]);
        let txn = Txn::new()
            .when([Compare::create_revision(prefix, CompareOp::Equal, 0).with_prefix()])
            .and_then([put])
            .or_else([TxnOp::txn(same_size)]);
        let send = || {
            let (mut kv, txn) = (session.client.kv_client(), txn.clone());
            async move { kv.txn(txn).await }
        };
        let answer = match session.call(Rpc::Txn, &key, send).await {
            Ok(answer) => answer,
            Err(e) => {
                Pending::new(session.clone(), key).sweep();
                return Err(e);
            }
        };
        let queued_at = Instant::now();
        let revision = answer.header().map_or(0, |h| h.revision());
        // A protocol error leaves nothing behind: whatever the answer says, our key is deleted.
        let protocol = |what: &str| {
            drop(Pending::new(session.clone(), key.clone()));
            session.err(BackendErrorKind::Protocol, "create", &key, what)
        };
        if revision <= 0 {
            return Err(protocol("the transaction's answer has no revision"));
        }
        if answer.succeeded() {
            let pending = Pending::new(session.clone(), key);
            return Ok(Created {
                pending,
                revision,
                queued_at,
                ahead: HashMap::new(),
                read_at: revision,
            });
        }
        let Some(TxnOpResponse::Txn(nested)) = answer.op_responses().into_iter().next() else {
            return Err(protocol("the transaction's answer lacks its nested transaction"));
        };
        let gets: Vec<_> = nested
            .op_responses()
            .into_iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(get) => Some(get),
                _ => None,
            })
            .collect();
        let Some(get) = gets.first() else {
            return Err(protocol("the nested transaction's answer has no read"));
        };
        if nested.succeeded() {
            let pending = Pending::new(session.clone(), key);
            let ahead = self.ahead_of(get.kvs(), revision);
            return Ok(Created { pending, revision, queued_at, ahead, read_at: revision });
        }
        // Nothing was written: another size is in use.
        let first = get.kvs().first();
        match first.and_then(|kv| parse(kv.value())).filter(|(stored, _)| *stored != self.limit) {
            Some((stored, _)) => Err(UsageError::LimitMismatch {
                semaphore: self.id.to_string(),
                asked: self.limit,
                stored,
            }
            .into()),
            None => {
                let what = first.map_or_else(
                    || "the size check failed on an empty semaphore".to_string(),
                    |kv| {
                        format!(
                            "{} is not a semaphore's key (its value is not \"N k owner\")",
                            String::from_utf8_lossy(kv.key())
                        )
                    },
                );
                Err(protocol(&what))
            }
        }
    }

    /// Step 3: wait until the permits ahead fit with ours, the lease ends or `deadline`
    /// passes. Outages are waited out while the lease stands.
    async fn wait(&self, created: &mut Created, deadline: Option<Instant>) -> queue::Waited {
        let session = self.session;
        loop {
            if self.fits(&created.ahead) {
                return queue::Waited::NoneBefore;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return queue::Waited::TimedOut;
            }
            let watched = self.watch_ahead(&mut created.ahead, created.read_at + 1);
            let outcome = tokio::select! {
                done = watched => done,
                why = session.ended() => return queue::Waited::LeaseOver(why),
                _ = sleep_until(deadline) => return queue::Waited::TimedOut,
            };
            if let Ok(true) = outcome {
                continue;
            }
            if outcome.is_err() {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            // Cancelled, compacted or broken: read the keys ahead again.
            let read = || {
                let (mut kv, prefix) = (session.client.kv_client(), self.prefix.clone());
                let options =
                    GetOptions::new().with_prefix().with_max_create_revision(created.revision - 1);
                async move { kv.get(prefix, Some(options)).await }
            };
            let fresh = tokio::select! {
                fresh = session.call(Rpc::Range, &self.prefix, read) => fresh,
                why = session.ended() => return queue::Waited::LeaseOver(why),
                _ = sleep_until(deadline) => return queue::Waited::TimedOut,
            };
            if let Ok(fresh) = fresh {
                created.ahead = self.ahead_of(fresh.kvs(), created.revision);
                created.read_at = fresh.header().map_or(created.read_at, |h| h.revision());
            }
        }
    }

    /// Watch the prefix's deletions from `from`, removing each key ahead that goes, until ours
    /// fits (`Ok(true)`) or the watch ends (`Ok(false)`: cancelled or compacted; `Err`: broken).
    async fn watch_ahead(
        &self,
        ahead: &mut HashMap<Vec<u8>, u32>,
        from: i64,
    ) -> Result<bool, LockError> {
        let session = self.session;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_filters([WatchFilterType::NoPut]);
        let open = || {
            let (mut watches, prefix, options) =
                (session.client.watch_client(), self.prefix.clone(), options.clone());
            async move { watches.watch(prefix, Some(options)).await }
        };
        let mut stream = session.call(Rpc::Watch, &self.prefix, open).await?;
        loop {
            let answer =
                stream.message().await.map_err(|e| session.driver_err("watch", &self.prefix, e))?;
            let Some(answer) = answer else {
                let ended = "the watch stream ended";
                return Err(session.err(
                    BackendErrorKind::Unavailable,
                    "watch",
                    &self.prefix,
                    ended,
                ));
            };
            if answer.canceled() || answer.compact_revision() > 0 {
                return Ok(false);
            }
            for event in answer.events() {
                if let (EventType::Delete, Some(kv)) = (event.event_type(), event.kv()) {
                    ahead.remove(kv.key());
                }
            }
            if self.fits(ahead) {
                return Ok(true);
            }
        }
    }

    /// The permits of a grant of our key at `revision`.
    fn permits(
        &self,
        pending: Pending,
        revision: i64,
        queued_at: Instant,
    ) -> Result<Permits, LockError> {
        let base = (revision as u64).checked_mul(u64::from(self.limit));
        let Some(base) = base.filter(|b| b.checked_add(u64::from(self.count)).is_some()) else {
            let what = format!(
                "revision {revision} times the semaphore's size {} does not fit a 64-bit token",
                self.limit
            );
            let e = self.session.err(BackendErrorKind::Protocol, "grant", &pending.key, what);
            drop(pending);
            return Err(e);
        };
        let tokens = (0..u64::from(self.count)).map(|i| base + i).collect();
        let guard = grant(self.id, self.owner, pending, revision, None::<Arc<OwnWrites>>);
        Ok(Permits::new(guard.with_queued_at(queued_at), self.limit, tokens))
    }
}

impl EtcdSemaphore {
    pub(crate) fn new(inner: Arc<Inner>, owner: &str) -> EtcdSemaphore {
        EtcdSemaphore { inner, owner: owner.to_string() }
    }

    fn check(&self, semaphore_id: &str, limit: u32, count: u32) -> Result<(), LockError> {
        validate_id("semaphore id", semaphore_id)?;
        check_acquire(semaphore_id, limit, count)
    }

    fn ask<'a>(
        &'a self,
        session: &'a Arc<Session>,
        id: &'a str,
        limit: u32,
        count: u32,
    ) -> Ask<'a> {
        let prefix = format!("{}/", self.inner.kind_name(SEMAPHORES, id));
        Ask { session, id, owner: &self.owner, prefix, limit, count }
    }
}

#[async_trait]
impl Semaphore for EtcdSemaphore {
    fn algorithm(&self) -> &str {
        "etcd-semaphore"
    }

    fn owner(&self) -> &str {
        &self.owner
    }

    async fn acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
        timeout: Option<Duration>,
    ) -> Result<Permits, LockError> {
        self.check(semaphore_id, limit, count)?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let session = self.inner.session().await?;
        let ask = self.ask(&session, semaphore_id, limit, count);
        let mut retries = Retries::new(Backoff::default(), deadline);
        let mut created = loop {
            match ask.create().await {
                Ok(created) => break created,
                Err(e @ LockError::Usage(_)) => return Err(e),
                Err(e) if session.over().is_some() => return Err(e),
                Err(e) => tokio::time::sleep(retries.failed(e, Instant::now())?).await,
            }
        };
        retries.answered();
        if !ask.fits(&created.ahead) {
            match ask.wait(&mut created, deadline).await {
                queue::Waited::NoneBefore => {}
                queue::Waited::LeaseOver(why) => {
                    return Err(place_lost(semaphore_id, &created.pending, why))
                }
                queue::Waited::TimedOut => {
                    created.pending.delete().await?;
                    return Err(LockError::Timeout {
                        lock_id: semaphore_id.to_string(),
                        waited: start.elapsed(),
                    });
                }
            }
            confirm(semaphore_id, &created.pending, &mut retries).await?;
        }
        ask.permits(created.pending, created.revision, created.queued_at)
    }

    async fn try_acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        count: u32,
    ) -> Result<Option<Permits>, LockError> {
        self.check(semaphore_id, limit, count)?;
        let session = self.inner.session().await?;
        let ask = self.ask(&session, semaphore_id, limit, count);
        let created = ask.create().await?;
        if ask.fits(&created.ahead) {
            return ask.permits(created.pending, created.revision, created.queued_at).map(Some);
        }
        created.pending.delete().await?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn values_record_the_size_and_the_permits() {
        assert_eq!(parse(b"3 2 worker-1"), Some((3, 2)));
        assert_eq!(parse(b"3 2 an owner with spaces"), Some((3, 2)));
        assert_eq!(parse(b"owner"), None);
        assert_eq!(parse(b""), None);
    }

    #[test]
    fn the_size_check_brackets_exactly_the_values_of_one_size() {
        let inside =
            |v: &[u8], n: u32| v > format!("{n} ").as_bytes() && v < format!("{n}!").as_bytes();
        assert!(inside(b"3 1 a", 3));
        assert!(!inside(b"30 1 a", 3));
        assert!(!inside(b"3", 3));
        assert!(!inside(b"4 1 a", 3));
        assert!(!inside(b"13 1 a", 3));
    }
}
