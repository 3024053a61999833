//! # lock-zookeeper
//!
//! The ZooKeeper lock recipe of seed 004 (SPEC 3.7) against a real ZooKeeper server, through
//! the `zookeeper-client` crate.
//!
//! ## The protocol, step by step
//!
//! Seed 004 (a Russian article on ZooKeeper locks in Go) describes it as: client A creates
//! `/locks/lock-` and gets `/locks/lock-0`, which holds the lock; B gets `/locks/lock-1` and
//! waits; C gets `/locks/lock-2` and "waits even more patiently"; when A releases, B is
//! notified and takes the lock, then C. The nodes are **ephemeral** (they vanish when their
//! client's session ends, "no timeouts or cleanup jobs needed") and **sequential** (the server
//! appends an increasing counter, "a natural queue"). Here, per lock id:
//!
//! 1. Make sure `<root>/<lockId>` exists (persistent; parents created as needed; `root` is
//!    `/locks` by default).
//! 2. Create an **ephemeral sequential** znode `<root>/<lockId>/lock-` (data: the owner id);
//!    the server names it `lock-<10-digit sequence>`.
//! 3. List the children of `<root>/<lockId>`. If ours has the lowest sequence number, the
//!    lock is ours.
//! 4. Otherwise set a watch on **only the immediate predecessor** (the child with the greatest
//!    sequence below ours) with `exists`; if it is already gone go back to 3, else wait for
//!    the watch to fire and go back to 3. Watching the predecessor rather than the directory
//!    means a release wakes exactly one waiter: no herd effect.
//! 5. Release: delete our znode. The session's end (close, or expiry after the session timeout
//!    without heartbeats) deletes it too: that is how a crashed holder frees the lock.
//!
//! The mandatory lock with a timeout deletes its znode before returning
//! [`LockError::Timeout`], so nothing of it remains to delay the next contender. The soft
//! lock (not in the seed) first lists the children and returns "not held" at once if there
//! are any; if there are none it runs steps 2–3 once and, not being first, deletes its znode
//! and returns "not held".
//!
//! ## What a holder is told
//! The seed warns that after losing its connection for longer than the session timeout a
//! client's znode is gone "but your process may not know it yet". A guard therefore follows
//! the session's state and publishes `LeaseState::Lost` as soon
//! as the session **leaves the connected state** — on *disconnection*, not only on expiry.
//! While disconnected the holder cannot know whether the server still has its session (the
//! server may expire it at any moment), so it must stop acting under the lock; this is
//! Curator's standard policy too (SUSPENDED counts as lost). A `Lost` guard must still be
//! released (its znode may still exist if the session survives).
//!
//! ## Fencing token
//! The znode's `czxid` (the zxid of the transaction that created it). Grants follow sequence
//! order, sequence order is creation order, and zxids increase with every transaction of the
//! ensemble, so tokens strictly increase in grant order; unlike the sequence number they keep
//! increasing even if the lock's directory is deleted and recreated.
//!
//! ## Invariants
//! - At most one session holds a lock id: the lowest live sequential child.
//! - A waiter watches one znode, its predecessor; a release wakes one waiter.
//! - Grants are first come, first served, by creation order.
//! - A crashed holder's lock is free one session timeout after the server last heard from it
//!   (rounded up to the server's tick).
//! - Lock directories are never deleted by this crate (deleting one under a waiter would
//!   break the queue); they are empty persistent znodes once no one uses the lock.
//!
//! ## Conformance verdict
//! The whole shared suite (`lock_core::conformance_suite!`) passes against a real ZooKeeper
//! with a 2 s session timeout, each contender on its own session (`tests/conformance.rs`).
//! "Lease renewal" is ZooKeeper's own session heartbeat; "TTL" is the session timeout.
//!
//! ## Example
//! ```no_run
//! use lock_core::Locker;
//! use lock_zookeeper::ZkBackend;
//! use std::time::Duration;
//!
//! # async fn demo() -> Result<(), lock_core::LockError> {
//! let backend = ZkBackend::connect("127.0.0.1:2181", Duration::from_secs(6)).await?;
//! let locker = backend.locker("worker-1")?;
//! let guard = locker.lock("invoice-42", Some(Duration::from_secs(10))).await?;
//! tokio::select! {
//!     _ = guard.lost() => { /* the session is gone: stop, someone else may hold the lock */ }
//!     _ = async { /* the critical section, passing guard.token() downstream */ } => {}
//! }
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

use async_trait::async_trait;
use lock_core::lock::{validate_id, LeaseLost, LeaseState, Release};
use lock_core::{LockError, LockGuard, Locker};
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use zookeeper_client as zk;

/// The backend name in [`LockError::Backend`].
pub const BACKEND: &str = "zookeeper";

/// Prefix of every lock znode's name; the server appends the sequence number.
const NODE_PREFIX: &str = "lock-";

fn backend_err(message: impl Display) -> LockError {
    LockError::Backend { backend: BACKEND, message: message.to_string() }
}

/// How [`ZkBackend::connect_with`] connects.
#[derive(Debug, Clone)]
pub struct ZkConfig {
    /// The session timeout asked of the server (default 6 s; the server clamps it to its
    /// `minSessionTimeout`..`maxSessionTimeout`). A crashed holder's lock is free this long
    /// after the server last heard from it.
    pub session_timeout: Duration,
    /// Longest wait for the session to be established (default 10 s).
    pub connect_timeout: Duration,
    /// Parent of the lock directories (default `/locks`).
    pub root: String,
}

impl Default for ZkConfig {
    fn default() -> Self {
        ZkConfig {
            session_timeout: Duration::from_secs(6),
            connect_timeout: Duration::from_secs(10),
            root: "/locks".into(),
        }
    }
}

struct Inner {
    client: zk::Client,
    hosts: String,
    root: String,
    session_timeout: Duration,
}

impl Inner {
    fn err(&self, what: &str, path: &str, e: impl Display) -> LockError {
        backend_err(format!("{what} {path} on ZooKeeper at {}: {e}", self.hosts))
    }

    /// Run one request, bounded by the session timeout: while disconnected the client holds
    /// requests until it reconnects or the session expires, and a caller must not hang that
    /// long unannounced.
    async fn op<T>(
        &self,
        what: &str,
        path: &str,
        fut: impl Future<Output = Result<T, zk::Error>>,
    ) -> Result<Result<T, zk::Error>, LockError> {
        tokio::time::timeout(self.session_timeout, fut).await.map_err(|_| {
            self.err(what, path, format!("no answer within the session timeout {:?}", self.session_timeout))
        })
    }
}

/// One ZooKeeper session, from which lockers are made.
///
/// All lockers of one backend share its session: if it expires, every lock they hold is
/// gone at once. Give each contender of a benchmark its own backend when they must fail
/// independently. Dropping the last clone of a backend (and every guard and locker made from
/// it) closes the session, which deletes its znodes.
#[derive(Clone)]
pub struct ZkBackend {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkBackend")
            .field("hosts", &self.inner.hosts)
            .field("root", &self.inner.root)
            .field("session_timeout", &self.inner.session_timeout)
            .finish()
    }
}

impl ZkBackend {
    /// Connect to `hosts` (`host:port[,host:port...]`) asking for `session_timeout`, with
    /// the other settings of [`ZkConfig::default`]. An unreachable ensemble fails within the
    /// connect timeout (10 s) with a [`LockError::Backend`] naming the hosts.
    pub async fn connect(hosts: &str, session_timeout: Duration) -> Result<Self, LockError> {
        Self::connect_with(hosts, ZkConfig { session_timeout, ..ZkConfig::default() }).await
    }

    /// Connect to `hosts` with `config`.
    pub async fn connect_with(hosts: &str, config: ZkConfig) -> Result<Self, LockError> {
        let root = config.root.trim_end_matches('/').to_string();
        if !config.root.starts_with('/') || root.is_empty() || root.contains("//") {
            return Err(LockError::Config(format!(
                "ZooKeeper lock root {:?} must be an absolute path other than /",
                config.root
            )));
        }
        if config.session_timeout.is_zero() || config.connect_timeout.is_zero() {
            return Err(LockError::Config("ZooKeeper session and connect timeouts must be positive".into()));
        }
        let connect = zk::Client::connector().with_session_timeout(config.session_timeout).connect(hosts);
        let client = match tokio::time::timeout(config.connect_timeout, connect).await {
            Ok(Ok(c)) => c,
            Ok(Err(zk::Error::Timeout)) => {
                return Err(backend_err(format!(
                    "cannot connect to ZooKeeper at {hosts}: no session established within the session timeout {:?}",
                    config.session_timeout
                )))
            }
            Ok(Err(e)) => return Err(backend_err(format!("cannot connect to ZooKeeper at {hosts}: {e}"))),
            Err(_) => {
                return Err(backend_err(format!(
                    "cannot connect to ZooKeeper at {hosts}: no session within {:?}",
                    config.connect_timeout
                )))
            }
        };
        let session_timeout = client.session_timeout();
        Ok(ZkBackend { inner: Arc::new(Inner { client, hosts: hosts.to_string(), root, session_timeout }) })
    }

    /// A locker for `owner` on this session.
    pub fn locker(&self, owner: &str) -> Result<ZkLock, LockError> {
        validate_id("owner id", owner)?;
        Ok(ZkLock { inner: self.inner.clone(), owner: owner.to_string() })
    }

    /// The session timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.inner.session_timeout
    }

    /// The connect string.
    pub fn hosts(&self) -> &str {
        &self.inner.hosts
    }

    /// The directory of `lock_id`'s znodes.
    pub fn lock_dir(&self, lock_id: &str) -> String {
        format!("{}/{lock_id}", self.inner.root)
    }
}

/// The ZooKeeper lock recipe for one owner. See the crate docs for the protocol.
pub struct ZkLock {
    inner: Arc<Inner>,
    owner: String,
}

impl std::fmt::Debug for ZkLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkLock").field("owner", &self.owner).field("hosts", &self.inner.hosts).finish()
    }
}

fn sequence_of(name: &str) -> Option<i64> {
    name.strip_prefix(NODE_PREFIX)?.parse().ok()
}

/// Our znode while we wait for the lock. If the waiting future is dropped (cancelled by a
/// caller's timeout, say) the znode is deleted in the background: left behind it would block
/// the lock for as long as the session lives.
struct Pending {
    inner: Arc<Inner>,
    path: String,
    armed: bool,
}

impl Pending {
    async fn delete(mut self) -> Result<(), LockError> {
        self.armed = false;
        delete_node(&self.inner, &self.path).await
    }
    fn keep(mut self) {
        self.armed = false;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let (inner, path) = (self.inner.clone(), std::mem::take(&mut self.path));
                handle.spawn(async move {
                    let _ = delete_node(&inner, &path).await;
                });
            }
        }
    }
}

async fn delete_node(inner: &Inner, path: &str) -> Result<(), LockError> {
    match inner.op("delete", path, inner.client.delete(path, None)).await? {
        // Already gone: the session expired, which removed it for us.
        Ok(()) | Err(zk::Error::NoNode) => Ok(()),
        Err(e) => Err(inner.err("delete", path, e)),
    }
}

impl ZkLock {
    fn dir(&self, lock_id: &str) -> String {
        format!("{}/{lock_id}", self.inner.root)
    }

    /// Step 2 (and 1 when the directory is missing): our ephemeral sequential znode.
    async fn create_node(&self, dir: &str) -> Result<(Pending, i64, zk::Stat), LockError> {
        let prefix = format!("{dir}/{NODE_PREFIX}");
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
        let client = &self.inner.client;
        let mut made_dir = false;
        loop {
            match self.inner.op("create", &prefix, client.create(&prefix, self.owner.as_bytes(), &ephemeral)).await? {
                Ok((stat, seq)) => {
                    let path = format!("{prefix}{seq}");
                    let pending = Pending { inner: self.inner.clone(), path, armed: true };
                    return Ok((pending, seq.into_i64(), stat));
                }
                Err(zk::Error::NoNode) if !made_dir => {
                    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                    self.inner
                        .op("mkdir", dir, client.mkdir(dir, &persistent))
                        .await?
                        .map_err(|e| self.inner.err("mkdir", dir, e))?;
                    made_dir = true;
                }
                Err(e) => return Err(self.inner.err("create", &prefix, e)),
            }
        }
    }

    /// Step 3: the sequences of the lock's znodes, ascending.
    async fn queue(&self, dir: &str) -> Result<Vec<(i64, String)>, LockError> {
        let children = match self.inner.op("list", dir, self.inner.client.list_children(dir)).await? {
            Ok(c) => c,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(self.inner.err("list", dir, e)),
        };
        let mut queue: Vec<(i64, String)> =
            children.into_iter().filter_map(|name| sequence_of(&name).map(|s| (s, name))).collect();
        queue.sort();
        Ok(queue)
    }

    fn grant(&self, lock_id: &str, pending: Pending, stat: &zk::Stat) -> LockGuard {
        let inner = self.inner.clone();
        let (tx, rx) = watch::channel(LeaseState::Held);
        let tx = Arc::new(tx);
        let mut states = inner.client.state_watcher();
        let monitor = {
            let (tx, hosts) = (tx.clone(), inner.hosts.clone());
            tokio::spawn(async move {
                // Checked after subscribing, so a change in between is not missed.
                let mut state = states.peek_state();
                loop {
                    if let Some(reason) = lost_reason(state, &hosts) {
                        tx.send_if_modified(|s| {
                            if *s == LeaseState::Held {
                                *s = LeaseState::Lost(LeaseLost { reason });
                                true
                            } else {
                                false
                            }
                        });
                        return;
                    }
                    state = states.changed().await;
                }
            })
        };
        let path = pending.path.clone();
        pending.keep();
        let release = ZkRelease { inner, path, monitor, state: tx };
        LockGuard::new(lock_id, &self.owner, stat.czxid as u64, rx, Box::new(release))
    }
}

fn lost_reason(state: zk::SessionState, hosts: &str) -> Option<String> {
    use zk::SessionState::*;
    match state {
        SyncConnected | ConnectedReadOnly => None,
        Disconnected => Some(format!(
            "disconnected from ZooKeeper at {hosts}: the server may expire the session, and delete the lock's znode, at any moment"
        )),
        Expired => Some("ZooKeeper session expired: its ephemeral znode, and with it the lock, is gone".into()),
        Closed => Some("ZooKeeper session closed: its ephemeral znode, and with it the lock, is gone".into()),
        AuthFailed => Some("ZooKeeper authentication failed: the session is unusable".into()),
    }
}

struct ZkRelease {
    inner: Arc<Inner>,
    path: String,
    monitor: tokio::task::JoinHandle<()>,
    state: Arc<watch::Sender<LeaseState>>,
}

#[async_trait]
impl Release for ZkRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        self.monitor.abort();
        let result = delete_node(&self.inner, &self.path).await;
        self.state.send_replace(LeaseState::Released);
        result
    }
}

#[async_trait]
impl Locker for ZkLock {
    fn algorithm(&self) -> &str {
        "zookeeper"
    }
    fn owner(&self) -> &str {
        &self.owner
    }

    async fn lock(&self, lock_id: &str, timeout: Option<Duration>) -> Result<LockGuard, LockError> {
        validate_id("lock id", lock_id)?;
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        let timed_out = |pending: Pending| async move {
            // Our znode goes before we report: a waiter behind us must not wait on it.
            pending.delete().await?;
            Err(LockError::Timeout { lock_id: lock_id.to_string(), waited: start.elapsed() })
        };
        let dir = self.dir(lock_id);
        let (pending, seq, stat) = self.create_node(&dir).await?;
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return timed_out(pending).await;
            }
            let queue = self.queue(&dir).await?;
            if !queue.iter().any(|(s, _)| *s == seq) {
                return Err(LockError::LeaseLost {
                    lock_id: lock_id.to_string(),
                    reason: format!("our znode {} vanished while waiting: the session expired", pending.path),
                });
            }
            let Some((_, predecessor)) = queue.iter().take_while(|(s, _)| *s < seq).last() else {
                return Ok(self.grant(lock_id, pending, &stat));
            };
            let pred = format!("{dir}/{predecessor}");
            let client = &self.inner.client;
            let (exists, watcher) = self
                .inner
                .op("watch", &pred, client.check_and_watch_stat(&pred))
                .await?
                .map_err(|e| self.inner.err("watch", &pred, e))?;
            if exists.is_none() {
                continue;
            }
            match deadline {
                None => {
                    watcher.changed().await;
                }
                Some(d) => {
                    tokio::select! {
                        _ = watcher.changed() => {}
                        _ = tokio::time::sleep_until(d) => return timed_out(pending).await,
                    }
                }
            }
        }
    }

    async fn try_lock(&self, lock_id: &str) -> Result<Option<LockGuard>, LockError> {
        validate_id("lock id", lock_id)?;
        let dir = self.dir(lock_id);
        // Someone is there already: no need to queue (and wake a successor) only to leave.
        if !self.queue(&dir).await?.is_empty() {
            return Ok(None);
        }
        let (pending, seq, stat) = self.create_node(&dir).await?;
        let queue = self.queue(&dir).await?;
        if queue.first().is_some_and(|(s, _)| *s == seq) {
            Ok(Some(self.grant(lock_id, pending, &stat)))
        } else {
            pending.delete().await?;
            Ok(None)
        }
    }
}
