//! The reader-writer lock, [`ZkRwLocker`]: Curator's `InterProcessReadWriteLock` layout, which
//! kazoo's `ReadLock` and `WriteLock` can share. Its docs give the protocol.

use crate::naming::{READ_NAME, WRITE_NAME};
use crate::queue::{exclusive, shared, Rule, Turn};
use crate::{Contender, NodeNaming};
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::rwlock::{Access, ReadHolds, RwLocker, WriterPolicy};
use lock_core::{LockError, LockGuard};
use std::time::Duration;
use tokio::time::Instant;

/// The ZooKeeper reader-writer lock for one owner: Curator's `InterProcessReadWriteLock`
/// layout, which kazoo's `ReadLock` and `WriteLock` can share.
///
/// # Protocol
/// A lock id's directory is the mutex's (`<root>/<lockId>`), and an ask queues in it as the
/// mutex's does, with an ephemeral sequential znode (data: the owner id) named by its kind:
/// `_c_<uuid>-__READ__<seq>` for a reader, `_c_<uuid>-__WRIT__<seq>` for a writer (Curator's
/// protected names and lock names; `__READ__<seq>` and `__WRIT__<seq>` with
/// [`NodeNaming::Plain`](crate::NodeNaming::Plain)). Every child whose name ends in a sequence
/// number is a contender, whichever client made it, ordered by that number:
/// - a **writer** holds the lock when its znode is the lowest of all; until then it watches
///   the contender just below it;
/// - a **reader** holds the lock when no exclusive znode is below its own; until then it
///   watches the nearest exclusive znode below it. Shared znodes are readers' of any client:
///   ours and Curator's (`__READ__`) and kazoo's (`__rlock__`), by the text just before the
///   sequence number; every other contender is exclusive (writers, and the mutexes of every
///   client: a [`ZkLock`](crate::ZkLock) on the same id is a writer here).
///
/// When the znode watched goes, the waiter lists the directory again and applies its rule
/// again. The release deletes the znode; a timed-out ask deletes its own before returning
/// [`LockError::Timeout`]; the try variant returns `None` without creating anything when a
/// znode appended now would have to wait, as the mutex's does. Sessions, lost creates, the
/// holder's watch on its own znode, retries and what a failure says are the mutex's (crate
/// docs).
///
/// # Order
/// Asks are served in the order of their sequence numbers: a reader that asks after a waiting
/// writer queues above it and waits for it ([`WriterPolicy::Fifo`]), so a writer waits only for
/// the holders and asks ahead of it and nobody starves. When a writer leaves, every reader
/// between it and the next writer is granted; each had watched that writer, so its release
/// wakes all of them, and nobody else.
///
/// # Fencing token
/// The znode's `czxid`, as for the mutex. A writer is granted only once every znode below its
/// own is gone, and znodes are created in sequence order, so a write carries a greater token
/// than every hold that ended before it was granted, and a hold granted after a write ended
/// was created after it. Readers holding together carry different tokens in the order they
/// queued.
///
/// # Costs
/// Requests as the mutex's (crate docs, "Requests per grant"): an uncontended read or write and
/// its release take a `create`, a `getChildren`, the holder's `exists` and a `delete`; a waiter
/// adds an `exists` (its watch) and a `getChildren` per znode it waited for. A write's release
/// wakes the readers queued just above it or the next writer; a read's release wakes only a
/// writer just above it.
///
/// # What a caller cannot do
/// A write ask of a lock this locker holds for reading is refused with
/// [`UsageError::Upgrade`](lock_core::usage::UsageError::Upgrade): its znode would queue above
/// its own reader's and wait for it forever. The locker tracks its read guards
/// ([`ReadHolds`]).
pub struct ZkRwLocker {
    c: Contender,
    reads: ReadHolds,
}

impl std::fmt::Debug for ZkRwLocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkRwLocker")
            .field("owner", &self.c.owner)
            .field("hosts", &self.c.inner.hosts)
            .field("naming", &self.c.options.naming)
            .finish()
    }
}

/// A reader's or a writer's znode name, and the rule of its turn.
fn kind(access: Access) -> (&'static str, Rule) {
    match access {
        Access::Read => (READ_NAME, shared),
        Access::Write => (WRITE_NAME, exclusive),
    }
}

impl ZkRwLocker {
    pub(crate) fn new(c: Contender) -> ZkRwLocker {
        ZkRwLocker { c, reads: ReadHolds::default() }
    }

    /// How this locker names its znodes.
    pub fn naming(&self) -> NodeNaming {
        self.c.options.naming
    }

    /// Check the ask before anything is sent: a valid id, and no write of a lock this owner
    /// reads.
    fn check(&self, lock_id: &str, access: Access) -> Result<(), LockError> {
        validate_id("lock id", lock_id)?;
        self.reads.check(lock_id, &self.c.owner, access)
    }

    /// The lock is ours: a guard whose fencing token is our znode's `czxid`, a read guard
    /// tracked until it ends.
    fn granted(&self, lock_id: &str, access: Access, turn: Turn) -> LockGuard {
        let Turn { node, stat, queued_at } = turn;
        let guard = self.c.grant(lock_id, vec![node], stat.czxid as u64).with_queued_at(queued_at);
        match access {
            Access::Read => self.reads.track(guard),
            Access::Write => guard,
        }
    }
}

#[async_trait]
impl RwLocker for ZkRwLocker {
    fn algorithm(&self) -> &str {
        "zookeeper-rw"
    }

    fn owner(&self) -> &str {
        &self.c.owner
    }

    fn writer_policy(&self) -> WriterPolicy {
        WriterPolicy::Fifo
    }

    async fn lock(
        &self,
        lock_id: &str,
        access: Access,
        timeout: Option<Duration>,
    ) -> Result<LockGuard, LockError> {
        self.check(lock_id, access)?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let session = self.c.session().await?;
        let dir = self.c.dir(lock_id);
        let (name, rule) = kind(access);
        let owner = self.c.owner.as_bytes();
        let turn =
            self.c.wait_turn(&session, lock_id, &dir, name, owner, rule, start, deadline).await?;
        Ok(self.granted(lock_id, access, turn))
    }

    async fn try_lock(
        &self,
        lock_id: &str,
        access: Access,
    ) -> Result<Option<LockGuard>, LockError> {
        self.check(lock_id, access)?;
        let session = self.c.session().await?;
        let dir = self.c.dir(lock_id);
        let (name, rule) = kind(access);
        let turn = self.c.try_turn(&session, &dir, name, rule).await?;
        Ok(turn.map(|turn| self.granted(lock_id, access, turn)))
    }
}
