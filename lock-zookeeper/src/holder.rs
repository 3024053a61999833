//! What a holder is told: a task per guard that follows the session's state and the holder's
//! own znodes (recognising the rewrites a leader makes of its own, [`OwnWrites`]), and the
//! release.

use crate::op::{Op, ZNODES};
use crate::session::Session;
use crate::znode::{delete_node, delete_until_done, Pending};
use crate::Contender;
use async_trait::async_trait;
use lock_core::lock::{LeaseLost, LeaseState, Release};
use lock_core::{LockError, LockGuard};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::task::Poll;
use tokio::sync::watch;
use zookeeper_client as zk;

impl Contender {
    /// The lock (or the permits) held by `nodes`, znodes of one session: a guard carrying
    /// `token` that follows both the session ([`lost_reason`]) and each of our znodes
    /// ([`watch_own_node`]), publishes `Lost` at the first sign of either, and deletes every
    /// one of them when released.
    pub(crate) fn grant(&self, lock_id: &str, nodes: Vec<Pending>, token: u64) -> LockGuard {
        self.grant_with(lock_id, nodes, token, None)
    }

    /// [`Contender::grant`] for a holder that rewrites its own znode (a leader's
    /// proclamation): the rewrites `own` records are not taken for a stranger's, and a stranger's
    /// that `own` was told of ([`OwnWrites::trip`]) makes the guard `Lost`.
    pub(crate) fn grant_with(
        &self,
        lock_id: &str,
        nodes: Vec<Pending>,
        token: u64,
        own: Option<Arc<OwnWrites>>,
    ) -> LockGuard {
        let session = nodes.first().expect("a grant holds a znode").session.clone();
        let (tx, rx) = watch::channel(LeaseState::Held);
        let tx = Arc::new(tx);
        let states = session.client.state_watcher();
        let own: OwnNode = if session.watch_holder {
            let watches =
                nodes.iter().map(|node| watch_own_node(&session, &node.path, own.clone()));
            any_of(watches.collect())
        } else {
            Box::pin(std::future::pending())
        };
        tokio::spawn(follow(states, own, tx.clone(), session.hosts.clone()));
        let paths = nodes
            .into_iter()
            .map(|node| {
                let path = node.path.clone();
                node.keep();
                path
            })
            .collect();
        let release = ZkRelease { session, paths, state: tx };
        LockGuard::new(lock_id, &self.owner, token, rx, Box::new(release))
    }
}

/// The first of `owns` to end, with its reason.
fn any_of(mut owns: Vec<OwnNode>) -> OwnNode {
    if owns.len() == 1 {
        return owns.remove(0);
    }
    Box::pin(std::future::poll_fn(move |cx| {
        for own in owns.iter_mut() {
            if let Poll::Ready(reason) = own.as_mut().poll(cx) {
                return Poll::Ready(reason);
            }
        }
        Poll::Pending
    }))
}

/// Watch the session's state and our own znodes until either says the lock is no longer ours;
/// then publish `Lost` with why (once: a guard already released stays released).
async fn follow(
    mut states: zk::StateWatcher,
    own: OwnNode,
    tx: Arc<watch::Sender<LeaseState>>,
    hosts: Arc<str>,
) {
    // Checked after subscribing, so a change in between is not missed.
    let mut state = states.peek_state();
    let session_ends = async {
        loop {
            if let Some(reason) = lost_reason(state, &hosts) {
                return reason;
            }
            state = states.changed().await;
        }
    };
    let reason = tokio::select! {
        reason = session_ends => reason,
        reason = own => reason,
    };
    tx.send_if_modified(|s| {
        if *s == LeaseState::Held {
            *s = LeaseState::Lost(LeaseLost { reason });
            true
        } else {
            false
        }
    });
}

/// What ends a holder's znode while it holds, as the reason its guard is told.
type OwnNode = Pin<Box<dyn Future<Output = String> + Send>>;

/// The rewrites a holder makes of its own znode (a leader's proclamations), so that the
/// holder's watch, which fires on every change of the znode's data, tells them from a
/// stranger's.
///
/// Each write of ours is guarded by the znode's data version, so it moves the version by one
/// and only from the version we last saw: a version up to the last one our writes may have
/// made is ours. A write is counted before it is sent, since ZooKeeper notifies the watch
/// before it answers the write. The one case this cannot tell apart, a stranger's write that
/// took the version ours was to make (ours is then refused with `BadVersion`), is told by the
/// writer afterwards ([`OwnWrites::trip`]).
pub(crate) struct OwnWrites {
    /// The highest data version our writes may have made.
    version: AtomicI32,
    /// Why the znode is no longer ours alone, once a write of ours found out.
    tripped: watch::Sender<Option<String>>,
}

impl OwnWrites {
    /// For a znode created at data version `version`.
    pub(crate) fn new(version: i32) -> OwnWrites {
        OwnWrites { version: AtomicI32::new(version), tripped: watch::channel(None).0 }
    }

    /// A write of ours is about to make data version `version`.
    pub(crate) fn expect(&self, version: i32) {
        self.version.fetch_max(version, Ordering::SeqCst);
    }

    fn is_ours(&self, version: i32) -> bool {
        version <= self.version.load(Ordering::SeqCst)
    }

    /// A write of ours found that another client rewrote the znode: the guard is told `Lost`
    /// with `reason`, even if its watch took that rewrite for ours.
    pub(crate) fn trip(&self, reason: String) {
        self.tripped.send_replace(Some(reason));
    }

    /// Resolves with the reason once [`OwnWrites::trip`] is called.
    async fn tripped(&self) -> String {
        let mut rx = self.tripped.subscribe();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone(),
            // The sender lives in `self`: it cannot close while this borrow lasts.
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }
}

/// Set a watch on the holder's own znode (`exists` with a watch), and return what it reports:
/// a future that ends with a reason when the znode is deleted or rewritten by anyone but this
/// guard's release (which stops the guard's monitor before it deletes), and never otherwise.
///
/// Whatever the ACLs, this is how a holder learns that another client deleted its znode, which
/// hands the lock to the next waiter: without it the session stays healthy and nothing tells
/// the holder, whose guard would still say `Held` while another holds the lock. A session that ends fires the
/// watch too, but the session's state says that first and better; a failed `exists` (the
/// connection broke) is left to the state too, since a disconnection already makes the guard
/// `Lost`.
///
/// With `writes`, a change of the data that one of the holder's own writes made is no news:
/// the watch is set again (one more `exists`) and kept.
///
/// The request leaves before the guard is returned (the future is polled once here), so the
/// grant waits for no extra round trip and every grant sends exactly one `exists`, counted as
/// `Op::Guard`.
fn watch_own_node(session: &Arc<Session>, path: &str, writes: Option<Arc<OwnWrites>>) -> OwnNode {
    session.requests.sent(ZNODES, Op::Guard.request());
    let (session, path) = (session.clone(), path.to_string());
    let deleted = |path: &str| {
        format!(
            "its znode {path} was deleted by another client while held (not by this guard's \
             release): the next waiter may hold the lock now"
        )
    };
    let rewritten = |path: &str| {
        format!(
            "its znode {path} was rewritten by another client while held: the lock can no \
             longer be trusted to be this holder's alone"
        )
    };
    let mut own: OwnNode = Box::pin(async move {
        let watching = async {
            let mut watcher = match session.client.check_and_watch_stat(&path).await {
                Ok((Some(_), watcher)) => watcher,
                Ok((None, _)) => {
                    return format!(
                        "its znode {path} was gone when the holder set its watch: another \
                         client deleted it, and the next waiter may hold the lock now"
                    )
                }
                Err(_) => return std::future::pending().await,
            };
            loop {
                match watcher.changed().await.event_type {
                    zk::EventType::NodeDeleted => return deleted(&path),
                    zk::EventType::NodeDataChanged => {}
                    _ => return std::future::pending().await,
                }
                let Some(writes) = &writes else { return rewritten(&path) };
                // A rewrite of ours (a proclamation) if the version is one ours made; the watch
                // is set again in the same request, so no later change goes unseen.
                session.requests.sent(ZNODES, Op::Guard.request());
                watcher = match session.client.check_and_watch_stat(&path).await {
                    Ok((Some(stat), watcher)) if writes.is_ours(stat.version) => watcher,
                    Ok((Some(_), _)) => return rewritten(&path),
                    Ok((None, _)) => return deleted(&path),
                    Err(_) => return std::future::pending().await,
                };
            }
        };
        match &writes {
            None => watching.await,
            Some(w) => {
                let w = w.clone();
                tokio::select! {
                    reason = watching => reason,
                    reason = w.tripped() => reason,
                }
            }
        }
    });
    // The first poll sends the request (the client queues it synchronously) and parks on its
    // answer; the monitor task polls it from then on, with its own waker.
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match own.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(reason) => Box::pin(std::future::ready(reason)),
        std::task::Poll::Pending => own,
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
    session: Arc<Session>,
    paths: Vec<String>,
    state: Arc<watch::Sender<LeaseState>>,
}

#[async_trait]
impl Release for ZkRelease {
    async fn release(self: Box<Self>) -> Result<(), LockError> {
        // Released first, so that the monitor, which sees our own delete fire the watch on our
        // znode, does not take it for a stranger's. The monitor is left to end by itself on
        // that event: stopped early, its dropped watch would make the client send a
        // `removeWatches` request, one more per grant.
        self.state.send_replace(LeaseState::Released);
        let ZkRelease { session, mut paths, .. } = *self;
        if paths.len() == 1 {
            return delete_held(session, paths.remove(0)).await;
        }
        // Several znodes (a semaphore's permits): their deletes go out together, each in a task
        // of its own, and the release waits for every answer.
        let deletes: Vec<_> = paths
            .into_iter()
            .map(|path| tokio::spawn(delete_held(session.clone(), path)))
            .collect();
        let mut result = Ok(());
        for delete in deletes {
            let done = delete.await.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            if result.is_ok() {
                result = done;
            }
        }
        result
    }
}

/// Delete a held znode for its release.
async fn delete_held(session: Arc<Session>, path: String) -> Result<(), LockError> {
    let result = delete_node(&session, &path).await;
    if result.is_err() {
        // The session may outlive the outage that failed the delete, and with it the znode
        // that holds the lock: keep deleting in the background until one of them is gone.
        tokio::spawn(delete_until_done(session, path));
    }
    result
}
