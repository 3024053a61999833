//! A queue of ephemeral sequential znodes in one directory, whichever clients made them, and
//! how a request waits in it for its turn: steps 2 to 4 of the mutex (crate docs), the
//! reader-writer lock's, and a semaphore's admission lock.
//!
//! What differs between them is only which znode ahead of ours a request waits for (a
//! [`Rule`]): an exclusive ask waits for the znode just ahead of it, a shared ask for the
//! nearest exclusive one. The znode waited for is watched with `exists`; when it goes, the
//! request lists the queue again and applies the rule again.

use crate::naming::{is_shared, name_of, sequence_of, NodeNaming};
use crate::op::Op;
use crate::session::Session;
use crate::znode::Pending;
use crate::Contender;
use lock_core::retry::{Backoff, Retries};
use lock_core::LockError;
use std::sync::Arc;
use tokio::time::Instant;
use zookeeper_client as zk;

/// A contender's znode in a queue: its sequence number and its name.
pub(crate) type Entry = (i64, String);

/// Given the contenders ahead of a request's znode (by ascending sequence number), the one it
/// must wait for; `None` when its turn has come.
pub(crate) type Rule = fn(&[Entry]) -> Option<&Entry>;

/// An exclusive ask (the mutex, a writer, an admission lock): its turn comes when no znode is
/// ahead of it, whatever kind; it waits for the one just ahead.
pub(crate) fn exclusive(ahead: &[Entry]) -> Option<&Entry> {
    ahead.last()
}

/// A shared ask (a reader): its turn comes when no exclusive znode is ahead of it
/// ([`is_shared`]); it waits for the nearest one ahead.
pub(crate) fn shared(ahead: &[Entry]) -> Option<&Entry> {
    ahead.iter().rev().find(|(_, name)| !is_shared(name))
}

/// A request whose turn has come: its znode, the znode's stat, and when its place in line was
/// fixed (its create acknowledged).
pub(crate) struct Turn {
    pub(crate) node: Pending,
    pub(crate) stat: zk::Stat,
    pub(crate) queued_at: Instant,
}

/// How a waiting request lost its place: the session ended, and its znode with it.
fn place_lost(lock_id: &str, pending: &Pending) -> LockError {
    LockError::LeaseLost {
        lock_id: lock_id.to_string(),
        reason: format!(
            "the ZooKeeper session ended while waiting, and with it our znode {} (our place in \
             the queue); a new request runs on a new session",
            pending.path
        ),
    }
}

impl Contender {
    /// Step 3: every contender's znode in `dir`, whichever client made it, by ascending
    /// sequence number (children whose names end in no sequence number are no contenders).
    /// Sequence numbers are unique in a directory; the name only breaks the tie that never
    /// happens, so that the order is total.
    pub(crate) async fn queue(
        &self,
        session: &Session,
        dir: &str,
    ) -> Result<Vec<Entry>, LockError> {
        let children =
            match session.read(Op::List, dir, || session.client.list_children(dir)).await? {
                Ok(c) => c,
                Err(zk::Error::NoNode) => Vec::new(),
                Err(e) => return Err(session.refused("list", dir, e)),
            };
        let mut queue: Vec<Entry> =
            children.into_iter().filter_map(|name| sequence_of(&name).map(|s| (s, name))).collect();
        queue.sort();
        Ok(queue)
    }

    /// Queue a znode named `name` holding `data` in `dir` and wait until `rule` says its turn
    /// has come, or
    /// until `deadline` ([`LockError::Timeout`] for `lock_id`, reporting the wait since
    /// `start`, once our znode is deleted). The whole wait runs on `session`: our place in the
    /// queue is a znode of it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn wait_turn(
        &self,
        session: &Arc<Session>,
        lock_id: &str,
        dir: &str,
        name: &str,
        data: &[u8],
        rule: Rule,
        start: Instant,
        deadline: Option<Instant>,
    ) -> Result<Turn, LockError> {
        let timed_out = |pending: Pending| async move {
            // Our znode goes before we report: a waiter behind us must not wait on it.
            pending.delete().await?;
            Err(LockError::Timeout { lock_id: lock_id.to_string(), waited: start.elapsed() })
        };
        // A transient failure (no answer in time, a lost connection) while the session lives
        // is one more failed step, retried within the deadline. A protected create whose
        // answer was lost and not found again is swept by its request's own sweep, so a retry
        // makes a new znode under a new GUID; a plain create is not retried (its orphan, ahead
        // of the retry in the queue, would hold it up until swept): the request fails.
        let mut retries = Retries::new(Backoff::default(), deadline);
        let plain = matches!(self.options.naming, NodeNaming::Plain);
        let (pending, stat) = loop {
            match self.create_node(session, dir, name, data).await {
                Ok(created) => break created,
                Err(e) if session.is_over() || plain => return Err(e),
                Err(e) => tokio::time::sleep(retries.failed(e, Instant::now())?).await,
            }
        };
        retries.answered();
        // Our sequence number is our place in line: no request made after this instant can
        // be served first.
        let queued_at = Instant::now();
        let ours = name_of(&pending.path).to_string();
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return timed_out(pending).await;
            }
            if session.is_over() {
                return Err(place_lost(lock_id, &pending));
            }
            let queue = match self.queue(session, dir).await {
                Ok(q) => q,
                Err(_) if session.is_over() => return Err(place_lost(lock_id, &pending)),
                // Our znode stays while we retry: it keeps our place in the queue.
                Err(e) => {
                    tokio::time::sleep(retries.failed(e, Instant::now())?).await;
                    continue;
                }
            };
            retries.answered();
            let Some(place) = queue.iter().position(|(_, name)| *name == ours) else {
                return Err(LockError::LeaseLost {
                    lock_id: lock_id.to_string(),
                    reason: format!(
                        "our znode {} vanished while waiting: the session expired",
                        pending.path
                    ),
                });
            };
            // The contender we wait for, whichever client made it.
            let Some((_, blocker)) = rule(&queue[..place]) else {
                return Ok(Turn { node: pending, stat, queued_at });
            };
            let blocker = format!("{dir}/{blocker}");
            let (exists, watcher) = match session
                .read(Op::Watch, &blocker, || session.client.check_and_watch_stat(&blocker))
                .await
            {
                Ok(Ok(answer)) => answer,
                _ if session.is_over() => return Err(place_lost(lock_id, &pending)),
                Ok(Err(e)) => return Err(session.refused("watch", &blocker, e)),
                Err(e) => {
                    tokio::time::sleep(retries.failed(e, Instant::now())?).await;
                    continue;
                }
            };
            if exists.is_none() {
                continue;
            }
            // A oneshot watch fires on its znode's change, and on the session's end (expired,
            // closed); a disconnection alone does not fire it, and the client sets it again
            // on reconnecting, so a waiter keeps its place across a short outage.
            let event = match deadline {
                None => watcher.changed().await,
                Some(d) => {
                    tokio::select! {
                        event = watcher.changed() => event,
                        _ = tokio::time::sleep_until(d) => return timed_out(pending).await,
                    }
                }
            };
            if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                return Err(place_lost(lock_id, &pending));
            }
        }
    }

    /// The try variant of [`Contender::wait_turn`]: queue a znode, and if its turn has not
    /// come (someone holds, or asked first), delete it and return `None`.
    ///
    /// The queue is read only after the create, never before to skip it: on an ensemble a
    /// read may come from a follower that has not yet applied another client's delete (a
    /// lock released a moment ago would look held), while a read after this session's own
    /// create sees every write committed before it, that delete included.
    pub(crate) async fn try_turn(
        &self,
        session: &Arc<Session>,
        dir: &str,
        name: &str,
        rule: Rule,
    ) -> Result<Option<Turn>, LockError> {
        let (pending, stat) = self.create_node(session, dir, name, self.owner.as_bytes()).await?;
        let queued_at = Instant::now();
        let queue = self.queue(session, dir).await?;
        let ours = name_of(&pending.path);
        match queue.iter().position(|(_, name)| name == ours) {
            Some(place) if rule(&queue[..place]).is_none() => {
                Ok(Some(Turn { node: pending, stat, queued_at }))
            }
            _ => {
                pending.delete().await?;
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(names: &[&str]) -> Vec<Entry> {
        names.iter().map(|n| (sequence_of(n).unwrap(), n.to_string())).collect()
    }

    #[test]
    fn an_exclusive_ask_waits_for_the_znode_just_ahead_whatever_its_kind() {
        assert_eq!(exclusive(&[]), None);
        let q = queue(&["__WRIT__0000000001", "__READ__0000000002"]);
        assert_eq!(exclusive(&q).map(|e| e.0), Some(2));
    }

    #[test]
    fn a_shared_ask_waits_for_the_nearest_exclusive_znode_of_any_client() {
        let readers = queue(&["__READ__0000000001", "x__rlock__0000000002"]);
        assert_eq!(shared(&readers), None);
        let q = queue(&[
            "__WRIT__0000000001",
            "x__lock__0000000002",
            "__READ__0000000003",
            "x__rlock__0000000004",
        ]);
        assert_eq!(shared(&q).map(|e| e.0), Some(2));
        assert_eq!(shared(&q[..1]).map(|e| e.0), Some(1));
        // Our own mutex, or a name no client here knows, excludes a reader too.
        assert_eq!(
            shared(&queue(&["lock-0000000007", "__READ__0000000008"])).map(|e| e.0),
            Some(7)
        );
    }
}
