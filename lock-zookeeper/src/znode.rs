//! Our znode: made (with its directory when missing), found again after a create whose answer
//! was lost, and deleted, in the background when a request is dropped or a delete failed.

use crate::naming::NodeNaming;
use crate::op::Op;
use crate::session::{connected, Session, RETRY_PAUSE};
use crate::Contender;
use lock_core::{BackendErrorKind, LockError};
use std::sync::Arc;
use std::time::Duration;
use zookeeper_client as zk;

/// How many creates of one request may lose their answer before the request gives up: each one
/// is followed by a search for its znode by GUID, so only a connection that breaks again and
/// again gets this far.
const PROTECTED_ATTEMPTS: u32 = 3;

/// Our znode while we wait for the lock. If the waiting future is dropped (cancelled by a
/// caller's timeout, say) the znode is deleted in the background: left behind it would block
/// the lock for as long as the session lives.
pub(crate) struct Pending {
    pub(crate) session: Arc<Session>,
    pub(crate) path: String,
    armed: bool,
}

impl Pending {
    pub(crate) async fn delete(mut self) -> Result<(), LockError> {
        self.armed = false;
        delete_node(&self.session, &self.path).await
    }
    pub(crate) fn keep(mut self) {
        self.armed = false;
    }
    /// Delete it now, and if that fails keep deleting in the background, as for a dropped
    /// request: for a znode whose end nobody waits to report (a semaphore's admission lock
    /// once its permits are taken).
    pub(crate) async fn leave(mut self) {
        if delete_node(&self.session, &self.path).await.is_ok() {
            self.armed = false;
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.armed {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                let (session, path) = (self.session.clone(), std::mem::take(&mut self.path));
                handle.spawn(delete_until_done(session, path));
            }
        }
    }
}

/// Delete our znode. Gone already is success: the session ended (expired or closed), which
/// removed it for us, or someone removed it by hand.
pub(crate) async fn delete_node(session: &Session, path: &str) -> Result<(), LockError> {
    match session.op(Op::Delete, path, session.client.delete(path, None)).await? {
        Ok(()) | Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => {
            session.known.lock().unwrap().remove(path);
            Ok(())
        }
        Err(e) => Err(session.refused("delete", path, e)),
    }
}

/// Step 1: `dir` and its missing parents, as `mkdir -p` (persistent, with the session's ACL),
/// `dir` itself with `data` (a semaphore's size; nothing for a lock's directory). The client's
/// own `mkdir` sends its creates out of this crate's sight; these go through [`Session::op`],
/// one request each: `dir` first; if its parent is missing, the nearest ancestor that can be
/// made, then each level below it. True if this call made `dir`, false if it was there.
pub(crate) async fn make_dirs(
    session: &Session,
    dir: &str,
    data: &[u8],
) -> Result<bool, LockError> {
    let persistent = zk::CreateMode::Persistent.with_acls(session.acl.acls());
    let mut end = dir.len();
    loop {
        let path = &dir[..end];
        let content = if end == dir.len() { data } else { &[] };
        let made = session.op(Op::Mkdir, path, session.client.create(path, content, &persistent));
        match made.await? {
            Ok(_) if end == dir.len() => return Ok(true),
            Err(zk::Error::NodeExists) if end == dir.len() => return Ok(false),
            Ok(_) | Err(zk::Error::NodeExists) => {
                end = dir[end + 1..].find('/').map_or(dir.len(), |i| end + 1 + i);
            }
            Err(zk::Error::NoNode) if path.rfind('/').is_some_and(|i| i > 0) => {
                end = path.rfind('/').unwrap_or(0);
            }
            Err(e) => return Err(session.refused("mkdir", path, e)),
        }
    }
}

/// Delete the znodes of `session` in `dir` whose names start with `prefix` and that no waiter
/// or holder of this backend knows: a create whose answer was lost (the connection broke, or
/// the answer came too late) may still have made its znode, and that orphan, in a session that
/// lives on, would block the lock for good. With a protected create's `_c_<uuid>-` as `prefix`
/// only that request's znodes are candidates. With the plain `lock-`, every plain znode of the
/// session is, and a concurrent plain create of the same backend whose answer is still on its
/// way can be swept too. `settle` is how long the lost request may still be on its way.
async fn sweep_orphans(session: Arc<Session>, dir: String, settle: Duration, prefix: String) {
    tokio::time::sleep(settle).await;
    loop {
        if !connected(&session).await {
            return; // The session ended: its znodes are gone.
        }
        let ours = session.client.session_id().0;
        let Ok(Ok(children)) = session.op(Op::List, &dir, session.client.list_children(&dir)).await
        else {
            tokio::time::sleep(RETRY_PAUSE).await;
            continue;
        };
        for name in children {
            if !name.starts_with(&prefix) {
                continue;
            }
            let path = format!("{dir}/{name}");
            if session.known.lock().unwrap().contains(&path) {
                continue;
            }
            if let Ok(Ok((_, stat))) =
                session.op(Op::Read, &path, session.client.get_data(&path)).await
            {
                if stat.ephemeral_owner == ours && !session.known.lock().unwrap().contains(&path) {
                    delete_until_done(session.clone(), path).await;
                }
            }
        }
        return;
    }
}

/// [`delete_node`] until it succeeds or the session is over (which deletes the znode for us):
/// a znode whose delete failed in an outage would otherwise block the lock for as long as the
/// session lives, and a session that survives the outage lives on.
pub(crate) async fn delete_until_done(session: Arc<Session>, path: String) {
    while delete_node(&session, &path).await.is_err() {
        // Retry once connected again; a session that ends on the way took the znode with it.
        // The pause keeps a failure while connected (a slow server) from spinning.
        tokio::time::sleep(RETRY_PAUSE).await;
        if !connected(&session).await {
            return;
        }
    }
}

impl Contender {
    /// Our znode, created: one the backend knows (the orphan sweep leaves it alone), and one
    /// that is deleted if the request is dropped before it is granted.
    fn adopt(&self, session: &Arc<Session>, path: String) -> Pending {
        session.known.lock().unwrap().insert(path.clone());
        Pending { session: session.clone(), path, armed: true }
    }

    /// Step 2 (and 1 when the directory is missing): our ephemeral sequential znode named
    /// `name` before its sequence number (in the locker's [`NodeNaming`]) holding `data` (the
    /// owner id for a lock; a candidate's value for an election), and its stat (the fencing
    /// token is its `czxid`).
    pub(crate) async fn create_node(
        &self,
        session: &Arc<Session>,
        dir: &str,
        name: &str,
        data: &[u8],
    ) -> Result<(Pending, zk::Stat), LockError> {
        let NodeNaming::Protected = self.options.naming else {
            return self.create_plain(session, dir, name, data).await;
        };
        // A GUID per request, not per locker: two requests of one locker on one lock (from two
        // tasks) must not take each other's znode for their own.
        let tag = self.options.guids.protected_tag();
        let (result, lost) = self.create_protected(session, dir, &tag, name, data).await;
        if lost > 0 {
            // The search sees every create that reached the server before the connection
            // broke, as Curator's does; on an ensemble a create that reached only the old
            // server could still commit after it, and one without an answer in time may still
            // be on its way. Once such a create must have landed, delete any znode with this
            // request's GUID other than the one we hold (known, so left alone).
            tokio::spawn(sweep_orphans(session.clone(), dir.into(), session.timeout, tag));
        }
        result
    }

    /// [`Contender::create_node`] in the plain form. A create whose answer is lost may or may
    /// not have made its znode, and nothing in its name tells it from another request's: the
    /// request fails, and a sweep deletes the znode once connected again if it was made (and
    /// any other plain znode of that name of the session no request knows; protected ones are
    /// left alone).
    async fn create_plain(
        &self,
        session: &Arc<Session>,
        dir: &str,
        name: &str,
        data: &[u8],
    ) -> Result<(Pending, zk::Stat), LockError> {
        let prefix = format!("{dir}/{name}");
        let sweep =
            |settle| tokio::spawn(sweep_orphans(session.clone(), dir.into(), settle, name.into()));
        match self.create_in(session, dir, &prefix, data).await {
            Ok(Ok((stat, seq))) => Ok((self.adopt(session, format!("{prefix}{seq}")), stat)),
            Ok(Err(e)) => {
                if matches!(e, zk::Error::ConnectionLoss) {
                    sweep(Duration::ZERO);
                }
                Err(session.refused("create", &prefix, e))
            }
            Err(e) => {
                // No answer in time: the create may still land; sweep once it must have.
                sweep(session.timeout);
                Err(e)
            }
        }
    }

    /// [`Contender::create_node`] in Curator's protected form, `tag` being `_c_<uuid>-`: after a
    /// create whose answer was lost with the connection, look for our GUID among the children
    /// once connected again and take the znode if it is there, else create again with the same
    /// GUID (Curator's protection mode), at most [`PROTECTED_ATTEMPTS`] times. Also returns how
    /// many creates lost their answer.
    async fn create_protected(
        &self,
        session: &Arc<Session>,
        dir: &str,
        tag: &str,
        name: &str,
        data: &[u8],
    ) -> (Result<(Pending, zk::Stat), LockError>, u32) {
        let prefix = format!("{dir}/{tag}{name}");
        let mut lost = 0;
        loop {
            match self.create_in(session, dir, &prefix, data).await {
                Ok(Ok((stat, seq))) => {
                    return (Ok((self.adopt(session, format!("{prefix}{seq}")), stat)), lost)
                }
                Ok(Err(zk::Error::ConnectionLoss)) => lost += 1,
                Ok(Err(e)) => return (Err(session.refused("create", &prefix, e)), lost),
                // No answer within the session timeout: a connection that slow is not worth
                // another try, and the create may still land (the caller sweeps).
                Err(e) => return (Err(e), lost + 1),
            }
            match self.find_protected(session, dir, tag).await {
                Ok(Some((name, stat))) => {
                    return (Ok((self.adopt(session, format!("{dir}/{name}")), stat)), lost)
                }
                Ok(None) if lost < PROTECTED_ATTEMPTS => {}
                Ok(None) => {
                    let why = format!("the connection broke under {lost} creates in a row");
                    let e = zk::Error::ConnectionLoss;
                    return (Err(session.err_from("create", &prefix, why, e)), lost);
                }
                Err(e) => return (Err(e), lost),
            }
        }
    }

    /// One ephemeral sequential create of `prefix` holding `data`, making the lock's
    /// directory first if it is missing (step 1): directories are made on first use only, so
    /// that a lock costs nothing until it is used.
    async fn create_in(
        &self,
        session: &Session,
        dir: &str,
        prefix: &str,
        data: &[u8],
    ) -> Result<Result<(zk::Stat, zk::CreateSequence), zk::Error>, LockError> {
        let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(session.acl.acls());
        let create = || {
            let request = session.client.create(prefix, data, &ephemeral);
            session.op(Op::Create, prefix, request)
        };
        match create().await? {
            Err(zk::Error::NoNode) => {
                make_dirs(session, dir, &[]).await?;
                create().await
            }
            other => Ok(other),
        }
    }

    /// After a create whose answer was lost: the znode it made, found by the request's GUID
    /// (`tag`, `_c_<uuid>-`), with its stat; `None` if the server never made it. The list is
    /// sent once the client has reconnected within the session ([`Session::read`]).
    async fn find_protected(
        &self,
        session: &Session,
        dir: &str,
        tag: &str,
    ) -> Result<Option<(String, zk::Stat)>, LockError> {
        let children =
            match session.read(Op::List, dir, || session.client.list_children(dir)).await? {
                Ok(c) => c,
                Err(zk::Error::NoNode) => return Ok(None),
                Err(e) => return Err(session.refused("list", dir, e)),
            };
        // A znode another request of this backend holds is not ours, even with our GUID (lockers
        // given the same seed make the same GUIDs): a cheap guard, not a full one (see Guids).
        let known =
            |name: &String| session.known.lock().unwrap().contains(&format!("{dir}/{name}"));
        let Some(name) = children.into_iter().find(|c| c.starts_with(tag) && !known(c)) else {
            return Ok(None);
        };
        let path = format!("{dir}/{name}");
        match session.read(Op::Stat, &path, || session.client.check_stat(&path)).await? {
            // Every request of ours runs on one session, so the znode is of this one; checked
            // all the same, as Curator does, since a znode of another session is not our place.
            Ok(Some(stat)) if stat.ephemeral_owner == session.client.session_id().0 => {
                Ok(Some((name, stat)))
            }
            Ok(Some(_)) => Err(session.err(
                "create",
                &path,
                BackendErrorKind::Protocol,
                "the znode with this request's GUID belongs to another session",
            )),
            // Deleted since the list (by hand): not there, so create again.
            Ok(None) => Ok(None),
            Err(e) => Err(session.err_from("stat", &path, e.to_string(), e)),
        }
    }
}
