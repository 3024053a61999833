//! The counting semaphore, [`ZkSemaphore`]: kazoo's `Semaphore` layout, so that kazoo's
//! semaphores and ours count each other's permits on one path. Its docs give the protocol.

use crate::naming::{ADMISSION_NAME, ADMISSION_SUFFIX, LEASE_NAME};
use crate::op::Op;
use crate::queue::{exclusive, Turn};
use crate::session::Session;
use crate::znode::{make_dirs, Pending};
use crate::{Contender, NodeNaming};
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::retry::{Backoff, Retries};
use lock_core::semaphore::{check_acquire, Permits, Semaphore};
use lock_core::usage::UsageError;
use lock_core::LockError;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client as zk;

/// The ZooKeeper counting semaphore for one owner: kazoo's `Semaphore` layout, so that kazoo's
/// semaphores and ours count each other's permits on one path.
///
/// # Layout
/// - `<root>/<semaphoreId>`, persistent, holds the semaphore's size N in its data, as decimal
///   text: kazoo's `max_leases`, written by whoever makes the node.
/// - Its children are the **leases**, one per permit held: ours are ephemeral sequential
///   `_c_<uuid>-lease-<seq>` (data: the owner id; `lease-<seq>` with
///   [`NodeNaming::Plain`](crate::NodeNaming::Plain)), kazoo's ephemeral `<uuid hex>`. Every
///   child counts as one permit held, whatever its name, as kazoo counts them.
/// - `<root>/<semaphoreId>-__lock__`, a sibling, is the **admission lock**: a mutex of the
///   crate's recipe whose znodes are named `_c_<uuid>-__lock__<seq>` (kazoo's lock name, so
///   that kazoo's `Lock`, which sees only its own name, queues with ours there).
///
/// # Protocol
/// An acquire of k of N permits:
/// 1. Checks its numbers ([`check_acquire`]) and the id, then reads the size stored in the
///    semaphore's node, making the node (and its parents) with N if it is missing. A stored
///    size other than N is refused with [`UsageError::LimitMismatch`] before anything is
///    written; data that is no number (a node made by hand, or by kazoo an instant before it
///    writes its size) is not checked, as kazoo does not check it.
/// 2. Queues for the admission lock and waits for its turn, as the mutex does.
/// 3. Holding it, lists the leases; while they number more than N - k, lists them again with a
///    watch and waits for a change (a lease released, or lost with its session).
/// 4. Creates k lease znodes, one `create` each, then releases the admission lock.
///
/// The release deletes the k leases. Only the admission lock's holder creates leases, and
/// only after counting them, so leases never number more than N, whichever client holds them;
/// releases only lower the count. An acquire that times out, in the queue or while holding
/// the admission lock, deletes its admission znode before returning [`LockError::Timeout`]
/// and holds nothing; a lease create that fails deletes the leases already made. The try
/// variant takes the admission lock as the mutex's try does (`None` at once if anyone is
/// queued there), then counts once.
///
/// # Order
/// Acquires are admitted in the admission lock's queue order. The head of the queue waits
/// there until its k permits are free, and everyone behind it waits too: an acquire of many
/// permits is not passed by later acquires of fewer, so it never starves, while permits may
/// stay free meanwhile. kazoo's and Curator's semaphores behave alike.
///
/// # Why one znode per permit
/// kazoo counts a semaphore's children, one lease each. A single znode carrying its count
/// would count as one permit to kazoo, which could then admit more holders than N; k znodes
/// count as k to every client.
///
/// # Tokens
/// One per permit: its lease znode's `czxid`. Each lease is its own `create`, hence its own
/// transaction, so the tokens of one acquire are distinct; an acquire called after another's
/// permits were released creates its leases after those, with greater zxids, so its tokens
/// are greater than all of them. Permits held together are ordered by creation, nothing more:
/// a token fences out a holder whose session ended only against later holders.
///
/// # Lost permits
/// The guard follows the session as the mutex's does and, with
/// [`ZkConfig::watch_holder`](crate::ZkConfig::watch_holder), each of its leases: it is told
/// `Lost` when the session leaves the connected state, and when another client deletes or
/// rewrites any of its leases.
///
/// # Costs
/// An uncontended acquire of k permits: a `getData` (the size), the admission lock's `create`
/// and `getChildren`, a `getChildren` of the leases, k `create`s, the admission lock's
/// `delete`, and the holder's k `exists` (its watches); its release, k `delete`s sent together.
/// The first acquire of a semaphore adds the `create`s of its node and of the admission lock's
/// directory. Waiting adds the admission lock's waits (as the mutex's) and, while the permits
/// are short, a `getChildren` with a watch per change of the leases.
///
/// # What interoperates
/// kazoo's `Semaphore(client, "<root>/<semaphoreId>", max_leases=N)`: same node, same size
/// check (kazoo raises `ValueError` on a mismatch), same admission lock, and each side counts
/// the other's leases. Curator's `InterProcessSemaphoreV2` keeps its leases under `leases/` and
/// its lock under `locks/` inside the semaphore's path, and no size: it does not interoperate
/// with this layout (nor with kazoo's).
pub struct ZkSemaphore {
    pub(crate) c: Contender,
}

impl std::fmt::Debug for ZkSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkSemaphore")
            .field("owner", &self.c.owner)
            .field("hosts", &self.c.inner.hosts)
            .field("naming", &self.c.options.naming)
            .finish()
    }
}

/// One acquire: its semaphore and numbers, checked, and when it began.
struct Ask<'a> {
    id: &'a str,
    limit: u32,
    count: u32,
    start: Instant,
    deadline: Option<Instant>,
}

impl Ask<'_> {
    /// Whether `held` leases leave room for this acquire's permits.
    fn fits(&self, held: usize) -> bool {
        held as u64 + u64::from(self.count) <= u64::from(self.limit)
    }

    fn timed_out(&self) -> LockError {
        LockError::Timeout { lock_id: self.id.to_string(), waited: self.start.elapsed() }
    }

    fn place_lost(&self, admission: &Pending) -> LockError {
        LockError::LeaseLost {
            lock_id: self.id.to_string(),
            reason: format!(
                "the ZooKeeper session ended while waiting for permits, and with it our \
                 admission znode {} (our place in the queue); a new request runs on a new \
                 session",
                admission.path
            ),
        }
    }
}

/// The size a semaphore node's data states, if it states one.
fn stored_size(data: &[u8]) -> Option<u32> {
    std::str::from_utf8(data).ok()?.trim().parse().ok()
}

impl ZkSemaphore {
    /// How this semaphore names its znodes.
    pub fn naming(&self) -> NodeNaming {
        self.c.options.naming
    }

    /// Check an acquire before anything is sent.
    fn ask<'a>(
        &self,
        id: &'a str,
        limit: u32,
        count: u32,
        timeout: Option<Duration>,
    ) -> Result<Ask<'a>, LockError> {
        validate_id("semaphore id", id)?;
        check_acquire(id, limit, count)?;
        let start = Instant::now();
        Ok(Ask { id, limit, count, start, deadline: timeout.map(|t| start + t) })
    }

    /// Step 1: the semaphore's node holds `ask.limit`, or no size at all; made with it if
    /// missing.
    async fn check_size(
        &self,
        session: &Session,
        dir: &str,
        ask: &Ask<'_>,
    ) -> Result<(), LockError> {
        let read = || session.client.get_data(dir);
        let data = match session.read(Op::Read, dir, read).await? {
            Ok((data, _)) => data,
            Err(zk::Error::NoNode) => {
                if make_dirs(session, dir, ask.limit.to_string().as_bytes()).await? {
                    return Ok(());
                }
                // Made by another client since: read what it stored.
                match session.read(Op::Read, dir, read).await? {
                    Ok((data, _)) => data,
                    Err(e) => return Err(session.refused("read", dir, e)),
                }
            }
            Err(e) => return Err(session.refused("read", dir, e)),
        };
        match stored_size(&data) {
            Some(stored) if stored != ask.limit => Err(UsageError::LimitMismatch {
                semaphore: ask.id.to_string(),
                asked: ask.limit,
                stored,
            }
            .into()),
            _ => Ok(()),
        }
    }

    /// The leases now, and with `watch` a watch on them.
    async fn leases(
        &self,
        session: &Session,
        dir: &str,
        watch: bool,
    ) -> Result<(usize, Option<zk::OneshotWatcher>), LockError> {
        let answer = if watch {
            session
                .read(Op::WatchChildren, dir, || session.client.list_and_watch_children(dir))
                .await?
                .map(|(children, watcher)| (children.len(), Some(watcher)))
        } else {
            session
                .read(Op::List, dir, || session.client.list_children(dir))
                .await?
                .map(|children| (children.len(), None))
        };
        answer.map_err(|e| session.refused("list", dir, e))
    }

    /// Step 3, holding the admission lock (our znode there: `admission`): true once the
    /// permits fit; false if they do not at once and `wait` is false. A timeout is
    /// [`LockError::Timeout`], the admission znode left to the caller.
    async fn room(
        &self,
        session: &Session,
        dir: &str,
        ask: &Ask<'_>,
        admission: &Pending,
        wait: bool,
    ) -> Result<bool, LockError> {
        let mut retries = Retries::new(Backoff::default(), ask.deadline);
        let mut watch = false;
        loop {
            if ask.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(ask.timed_out());
            }
            if session.is_over() {
                return Err(ask.place_lost(admission));
            }
            let (held, watcher) = match self.leases(session, dir, watch).await {
                Ok(answer) => answer,
                Err(_) if session.is_over() => return Err(ask.place_lost(admission)),
                Err(e) if wait => {
                    tokio::time::sleep(retries.failed(e, Instant::now())?).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            retries.answered();
            if ask.fits(held) {
                return Ok(true);
            }
            if !wait {
                return Ok(false);
            }
            // List again with a watch, so that no release between the count and the watch is
            // missed; then wait for the next change.
            let Some(watcher) = watcher else {
                watch = true;
                continue;
            };
            let event = match ask.deadline {
                None => watcher.changed().await,
                Some(d) => {
                    tokio::select! {
                        event = watcher.changed() => event,
                        _ = tokio::time::sleep_until(d) => return Err(ask.timed_out()),
                    }
                }
            };
            if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                return Err(ask.place_lost(admission));
            }
        }
    }

    /// Step 4: our leases, one create each (so one zxid each: distinct tokens), then the
    /// admission lock (`turn`) let go. A failure drops the leases made, which deletes them,
    /// and the admission znode with them.
    async fn take(
        &self,
        session: &Arc<Session>,
        dir: &str,
        ask: &Ask<'_>,
        turn: Turn,
    ) -> Result<Permits, LockError> {
        let mut leases = Vec::with_capacity(ask.count as usize);
        let mut tokens = Vec::with_capacity(ask.count as usize);
        for _ in 0..ask.count {
            let (lease, stat) =
                self.c.create_node(session, dir, LEASE_NAME, self.c.owner.as_bytes()).await?;
            leases.push(lease);
            tokens.push(stat.czxid as u64);
        }
        turn.node.leave().await;
        let guard = self.c.grant(ask.id, leases, tokens[0]).with_queued_at(turn.queued_at);
        Ok(Permits::new(guard, ask.limit, tokens))
    }
}

#[async_trait]
impl Semaphore for ZkSemaphore {
    fn algorithm(&self) -> &str {
        "zookeeper-semaphore"
    }

    fn owner(&self) -> &str {
        &self.c.owner
    }

    async fn acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        permits: u32,
        timeout: Option<Duration>,
    ) -> Result<Permits, LockError> {
        let ask = self.ask(semaphore_id, limit, permits, timeout)?;
        // The whole acquire runs on one session: our place in the admission queue is a znode
        // of it.
        let session = self.c.session().await?;
        let dir = self.c.dir(semaphore_id);
        self.check_size(&session, &dir, &ask).await?;
        let admission = format!("{dir}{ADMISSION_SUFFIX}");
        let (start, deadline) = (ask.start, ask.deadline);
        let turn = self
            .c
            .wait_turn(
                &session,
                semaphore_id,
                &admission,
                ADMISSION_NAME,
                self.c.owner.as_bytes(),
                exclusive,
                start,
                deadline,
            )
            .await?;
        match self.room(&session, &dir, &ask, &turn.node, true).await {
            Ok(_) => self.take(&session, &dir, &ask, turn).await,
            Err(e) => {
                if matches!(e, LockError::Timeout { .. }) {
                    // Gone before we report, as a timed-out waiter's znode: the next acquire
                    // must not wait on it. (Another failure drops it, deleting it in the
                    // background.)
                    turn.node.delete().await?;
                }
                Err(e)
            }
        }
    }

    async fn try_acquire(
        &self,
        semaphore_id: &str,
        limit: u32,
        permits: u32,
    ) -> Result<Option<Permits>, LockError> {
        let ask = self.ask(semaphore_id, limit, permits, None)?;
        let session = self.c.session().await?;
        let dir = self.c.dir(semaphore_id);
        self.check_size(&session, &dir, &ask).await?;
        let admission = format!("{dir}{ADMISSION_SUFFIX}");
        let Some(turn) = self.c.try_turn(&session, &admission, ADMISSION_NAME, exclusive).await?
        else {
            return Ok(None);
        };
        if self.room(&session, &dir, &ask, &turn.node, false).await? {
            self.take(&session, &dir, &ask, turn).await.map(Some)
        } else {
            turn.node.delete().await?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_size_is_read_as_kazoo_writes_it() {
        assert_eq!(stored_size(b"3"), Some(3));
        assert_eq!(stored_size(b" 12\n"), Some(12));
        // No size: not checked, as kazoo does not check it.
        assert_eq!(stored_size(b""), None);
        assert_eq!(stored_size(b"config"), None);
        assert_eq!(stored_size(&[0xff, 0x00]), None);
    }
}
