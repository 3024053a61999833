//! The mutex: the ZooKeeper lock recipe of seed 004 (crate docs), as a [`Locker`].

use crate::naming::NODE_NAME;
use crate::queue::{exclusive, Turn};
use crate::{Contender, NodeNaming};
use async_trait::async_trait;
use lock_core::lock::validate_id;
use lock_core::{LockError, LockGuard, Locker};
use std::time::Duration;
use tokio::time::Instant;

/// The ZooKeeper lock recipe for one owner. See the crate docs for the protocol.
pub struct ZkLock {
    pub(crate) c: Contender,
}

impl std::fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkLock")
            .field("owner", &self.c.owner)
            .field("hosts", &self.c.inner.hosts)
            .field("naming", &self.c.options.naming)
            .finish()
    }
}

impl ZkLock {
    /// How this locker names its znodes.
    pub fn naming(&self) -> NodeNaming {
        self.c.options.naming
    }

    /// The lock is ours: a guard whose fencing token is our znode's `czxid`.
    fn granted(&self, lock_id: &str, turn: Turn) -> LockGuard {
        let Turn { node, stat, queued_at } = turn;
        self.c.grant(lock_id, vec![node], stat.czxid as u64).with_queued_at(queued_at)
    }
}

#[async_trait]
impl Locker for ZkLock {
    fn algorithm(&self) -> &str {
        "zookeeper"
    }
    fn owner(&self) -> &str {
        &self.c.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        // The whole wait runs on one session: our place in the queue is a znode of it.
        let session = self.c.session().await?;
        let dir = self.c.dir(lock_id);
        let owner = self.c.owner.as_bytes();
        let turn = self
            .c
            .wait_turn(&session, lock_id, &dir, NODE_NAME, owner, exclusive, start, deadline)
            .await?;
        Ok(self.granted(lock_id, turn))
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        let session = self.c.session().await?;
        let dir = self.c.dir(lock_id);
        let turn = self.c.try_turn(&session, &dir, NODE_NAME, exclusive).await?;
        Ok(turn.map(|turn| self.granted(lock_id, turn)))
    }
}
