//! Leader election, [`ZkElector`]: kazoo's `Election` layout, so that kazoo's candidates and
//! ours on one path see one leader, in sequence order. Its docs give the protocol.

use crate::holder::OwnWrites;
use crate::naming::candidate_name;
use crate::observe::{leader_of, observe};
use crate::op::Op;
use crate::queue::{exclusive, Turn};
use crate::session::Session;
use crate::Contender;
use async_trait::async_trait;
use lock_core::election::{check_value, Elector, Leader, Leadership, Observer, Proclaim};
use lock_core::lock::validate_id;
use lock_core::usage::UsageError;
use lock_core::LockError;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use zookeeper_client as zk;

/// How many times a proclamation whose answer was lost, and that the znode shows did not land,
/// is sent again before the proclamation fails.
const PROCLAIM_ATTEMPTS: u32 = 3;

/// ZooKeeper leader election for one owner: kazoo's `Election` layout, so that kazoo's
/// candidates and ours on one path see one leader, in sequence order.
///
/// # Layout
/// kazoo's `Election(client, path, identifier)` is a kazoo `Lock` on `path` whose znodes hold
/// the identifier: ephemeral sequential `<path>/<uuid hex>__lock__<seq>`, data the identifier
/// (UTF-8). The contender with the lowest sequence number leads, and kazoo's `contenders()`
/// lists every znode's data in sequence order. kazoo's lock sees only names ending in
/// `__lock__` and ten digits (`Election` passes no `extra_lock_patterns`), so ours end so too.
/// Election `<id>` is the directory `<root>/<id>` (the mutex's for the same id: an election is
/// a lock held for as long as the leader leads, and a [`ZkLock`](crate::ZkLock) on that id
/// takes part as a candidate for ours, though not for kazoo's, which does not see the mutex's
/// `lock-` names). A candidate of ours is an ephemeral sequential znode:
/// - named `_c_<uuid>-<owner>__lock__<seq>`: Curator's protected form (which finds a create
///   whose answer was lost by its GUID, as the mutex does), the owner id (printable ASCII as
///   it is, every other byte and `%` and `/` as `%XX`), and kazoo's lock name;
/// - holding the candidate's **value**, and nothing else: kazoo's `contenders()` lists our
///   values beside kazoo's identifiers (so keep values UTF-8 where kazoo reads them: kazoo
///   decodes each as UTF-8 and fails on anything else).
///
/// So anyone who can list the directory and read a znode learns who leads and with what value:
/// a [`Leader`]'s value is the leader's data; its owner is the owner id in the name of a
/// candidate of ours, else the data as text (kazoo's identifier; a lock's owner id, which is
/// what a lock's znode holds). Its term is the znode's `czxid`.
///
/// Curator's `LeaderLatch` (`_c_<uuid>-latch-<seq>`) does not coexist with this layout: it
/// orders every child by the text after `latch-` (the whole name when there is none), so its
/// own candidates sort before ours (and, but for a rare GUID, kazoo's) whatever their sequence
/// numbers, and a latch would lead beside our leader. Nor can a name serve both: kazoo needs `__lock__` right before
/// the sequence number, Curator `latch-`. kazoo's is the layout chosen, being the one whose
/// interoperation the tests check against the real client (`tests/kazoo_election.rs`). We wait
/// for a latch's znode all the same (every child ending in a sequence number is a candidate,
/// as for the mutex), so ours never leads beside one; the latch may.
///
/// # Protocol
/// - **Campaign**: the mutex's queue with the znode above (the same code): create
///   it, lead when it is the lowest, else watch the candidate just before it and look again
///   when that one goes. A campaign that times out deletes its znode before returning
///   [`LockError::Timeout`]. The leadership's guard is the mutex's (crate docs, "What a holder
///   is told"): `Lost` when the session leaves the connected state, expires, or another client
///   deletes or rewrites the znode; its release (resigning, or dropping the [`Leadership`],
///   which resigns in the background) deletes the znode.
/// - **Proclaim**: `setData` of our znode with the data version we last wrote, so that it
///   lands only on the znode we created and nobody else rewrote: a znode gone (deleted, or the
///   session ended) is [`UsageError::NotLeader`], and so is one another client rewrote, which
///   also makes the guard `Lost`. The holder's watch on its own znode, which fires on our own
///   rewrites too, knows them by their versions. A proclamation whose answer was lost is
///   settled by reading the znode once reconnected (our value at the next version: it landed;
///   the version we sent with: send it again).
/// - **Leader**: list the directory; the lowest sequence number leads: read its znode.
/// - **Observe**: a task per observer looks at who leads and sets one watch for the next
///   change: on the leader's znode (`getData`), which fires when it is rewritten or goes, or,
///   while nobody leads, on the directory's children. Candidates created later never get ahead
///   of the leader, so nothing else can change who leads, and a candidate that comes or goes
///   behind the leader wakes no observer.
///
/// # What an observer can miss
/// It looks a round trip or two after the change that fired its watch. A leader that came and
/// went in between (that led for less than that) is never reported: the observer goes from its
/// predecessor straight to its successor, or to nobody. Likewise a value a leader replaced
/// again in that time: the later one is reported. Everything reported did happen, in order,
/// with terms rising, and the leader that stays is always reported. A disconnection loses
/// nothing (the client sets the watches again when it reconnects within the session); a
/// session that ends does, as above: the observer looks again on the backend's next session.
/// A failure that asking again cannot mend (an ACL that refuses the observer) ends the
/// observation with that error.
///
/// # Term
/// The leader's znode's `czxid`, the mutex's fencing token: a leader is elected only once
/// every znode before its own is gone, and znodes are created in sequence order, so the next
/// leader's znode was created after this one's and carries a greater zxid.
///
/// # Costs
/// A campaign costs what a lock costs (crate docs, "Requests per grant"); a proclamation one
/// `setData`, and the holder's watch one `exists` to set itself again; `leader` a
/// `getChildren` and a `getData`.
pub struct ZkElector {
    c: Contender,
}

impl std::fmt::Debug for ZkElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkElector")
            .field("owner", &self.c.owner)
            .field("hosts", &self.c.inner.hosts)
            .finish()
    }
}

impl ZkElector {
    pub(crate) fn new(c: Contender) -> ZkElector {
        ZkElector { c }
    }
}

/// Announces a leader's new value: `setData` of its znode, guarded by the version we last
/// wrote.
struct ZkProclaim {
    session: Arc<Session>,
    election: String,
    path: String,
    writes: Arc<OwnWrites>,
    /// The znode's data version as our last write left it (held across a write, so that two
    /// proclamations never send with one version).
    version: tokio::sync::Mutex<i32>,
}

impl ZkProclaim {
    fn not_leader(&self, term: u64) -> LockError {
        UsageError::NotLeader { election: self.election.clone(), term }.into()
    }

    /// Another client rewrote our znode: the guard is told, and the proclamation refused.
    fn rewritten(&self, term: u64) -> LockError {
        self.writes.trip(format!(
            "its znode {} was rewritten by another client while it led: the election can no \
             longer be trusted to be this leader's",
            self.path
        ));
        self.not_leader(term)
    }

    /// After a `setData` sent with `version` lost its answer: `Some` with the new version if
    /// the znode shows that it landed (our `value` at the next version), `None` if it did not
    /// (the znode still at `version`). The read waits for the client to reconnect.
    async fn settle(
        &self,
        term: u64,
        version: i32,
        value: &[u8],
    ) -> Result<Option<i32>, LockError> {
        let (s, path) = (&self.session, self.path.as_str());
        match s.read(Op::Read, path, || s.client.get_data(path)).await? {
            Ok((_, stat)) if stat.version == version => Ok(None),
            Ok((data, stat)) if stat.version == version + 1 && data == value => {
                Ok(Some(stat.version))
            }
            Ok(_) => Err(self.rewritten(term)),
            Err(zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed) => {
                Err(self.not_leader(term))
            }
            Err(e) => Err(s.refused("read", path, e)),
        }
    }
}

#[async_trait]
impl Proclaim for ZkProclaim {
    async fn proclaim(&self, term: u64, value: &[u8]) -> Result<(), LockError> {
        let mut version = self.version.lock().await;
        let (s, path) = (&self.session, self.path.as_str());
        let mut attempts = 0;
        loop {
            attempts += 1;
            // Counted before it is sent: the holder's watch may hear of it before we do.
            self.writes.expect(*version + 1);
            let sent = s.op(Op::Proclaim, path, s.client.set_data(path, value, Some(*version)));
            let lost = match sent.await {
                Ok(Ok(stat)) => {
                    *version = stat.version;
                    return Ok(());
                }
                // Gone with the session, or deleted by someone: the leadership is over.
                Ok(Err(
                    zk::Error::NoNode | zk::Error::SessionExpired | zk::Error::ClientClosed,
                )) => return Err(self.not_leader(term)),
                Ok(Err(zk::Error::BadVersion)) => return Err(self.rewritten(term)),
                Ok(Err(e @ zk::Error::ConnectionLoss)) => s.refused("proclaim", path, e),
                Ok(Err(e)) => return Err(s.refused("proclaim", path, e)),
                // No answer within the session timeout: it may still land.
                Err(e) => e,
            };
            if s.is_over() {
                return Err(self.not_leader(term));
            }
            match self.settle(term, *version, value).await? {
                Some(landed) => {
                    *version = landed;
                    return Ok(());
                }
                None if attempts < PROCLAIM_ATTEMPTS => {}
                None => return Err(lost),
            }
        }
    }
}

#[async_trait]
impl Elector for ZkElector {
    fn algorithm(&self) -> &str {
        "zookeeper-election"
    }

    fn owner(&self) -> &str {
        &self.c.owner
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
        let session = self.c.session().await?;
        let dir = self.c.dir(election);
        let name = candidate_name(&self.c.owner);
        let turn = self
            .c
            .wait_turn(&session, election, &dir, &name, &value, exclusive, start, deadline)
            .await?;
        let Turn { node, stat, queued_at } = turn;
        let path = node.path.clone();
        let writes = Arc::new(OwnWrites::new(stat.version));
        let guard = self
            .c
            .grant_with(election, vec![node], stat.czxid as u64, Some(writes.clone()))
            .with_queued_at(queued_at);
        let proclaim = ZkProclaim {
            session,
            election: election.to_string(),
            path,
            writes,
            version: tokio::sync::Mutex::new(stat.version),
        };
        Ok(Leadership::new(guard, value, Box::new(proclaim)))
    }

    async fn leader(&self, election: &str) -> Result<Option<Leader>, LockError> {
        validate_id("election", election)?;
        let session = self.c.session().await?;
        let dir = self.c.dir(election);
        loop {
            let queue = self.c.queue(&session, &dir).await?;
            let Some((_, name)) = queue.first() else { return Ok(None) };
            let path = format!("{dir}/{name}");
            match session.read(Op::Read, &path, || session.client.get_data(&path)).await? {
                Ok((data, stat)) => return Ok(Some(leader_of(name, data, &stat))),
                // It went since the list: the next candidate leads, or nobody.
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(session.refused("read", &path, e)),
            }
        }
    }

    async fn observe(&self, election: &str) -> Result<Observer, LockError> {
        validate_id("election", election)?;
        // Fails now, rather than in the observer's first change, if no session can be had.
        self.c.session().await?;
        Ok(observe(self.c.clone(), election))
    }
}
