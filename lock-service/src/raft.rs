//! Raft underneath: openraft's type configuration, the node's redb file (vote, committed
//! index, purge point, last snapshot), the state machine ([`LockTable`]) in memory, and the
//! peers' transport. The log itself is [`crate::log`]'s, in [`crate::wal`]'s segments.
//!
//! **Durability.** Nothing is acknowledged before it is on disk: a log entry before a
//! follower answers the append or a leader counts its own copy ([`crate::log`]), a vote
//! before it is granted. The committed index is written without a sync: it only spares
//! replaying the log on restart (losing it is safe, Raft recommits). The state machine is
//! rebuilt on start from the last snapshot and the log; a snapshot is written durably before
//! the log before it is purged. So every acknowledged grant survives every node crashing at
//! once.
//!
//! **Transport.** Each node dials each peer once per openraft network client and sends one
//! request at a time over it, as length-prefixed JSON ([`crate::proto`]). The first frame
//! names the cluster token: a node of another cluster is refused before it can vote.

use crate::counts::{ApplyMetrics, GrantTimes, Tracker};
use crate::proto::{encode, read_frame, MAX_PEER_FRAME};
use crate::state::{Command, Event, LockTable, Outcome};
use crate::tls::BoxIo;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::Backoff;
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::RaftStateMachine;
use openraft::{
    Entry, EntryPayload, LogId, RaftNetwork, RaftNetworkFactory, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use redb::{Database, Durability, ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// A node's id in the cluster.
pub type NodeId = u64;

/// Where a node is reached: by its peers, and by clients.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// `host:port` of its peer listener, as the others reach it.
    pub peer: String,
    /// `host:port` of its client listener, as clients reach it.
    pub client: String,
}

openraft::declare_raft_types!(
    /// The service's Raft types: [`Command`]s in the log, [`Outcome`]s out of the state
    /// machine, [`NodeInfo`] per member.
    pub TypeConfig:
        D = Command,
        R = Outcome,
        Node = NodeInfo,
);

/// The service's Raft.
pub type Raft = openraft::Raft<TypeConfig>;
type SErr = StorageError<NodeId>;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");

/// The data directory's file.
pub const DB_FILE: &str = "raft.redb";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a data directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The directory or its file cannot be created, opened or written.
    #[error("cannot use data directory {dir}: {reason}")]
    Io {
        /// The directory.
        dir: String,
        /// What failed.
        reason: String,
    },
    /// The directory belongs to another cluster or another node.
    #[error(
        "data directory {dir} belongs to {found}, not to {expected}: \
         point this node at its own directory (or an empty one)"
    )]
    Foreign {
        /// The directory.
        dir: String,
        /// Who it belongs to.
        found: String,
        /// Who started on it.
        expected: String,
    },
}

/// The redb file of one node: its log, vote, committed index and last snapshot.
#[derive(Clone)]
pub struct Store {
    db: Arc<Database>,
}

impl Store {
    /// Open (or create) `dir`'s store for node `id` of cluster `cluster`; a store made by
    /// another cluster or node is refused.
    pub fn open(dir: &Path, cluster: &str, id: NodeId) -> Result<Store, OpenError> {
        let io = |e: &dyn std::fmt::Display| OpenError::Io {
            dir: dir.display().to_string(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(dir).map_err(|e| io(&e))?;
        let db = Database::create(dir.join(DB_FILE)).map_err(|e| io(&e))?;
        let store = Store { db: Arc::new(db) };
        let owner = format!("node {id} of cluster {cluster:?}");
        match store.meta::<String>("owner").map_err(|e| io(&e))? {
            Some(found) if found != owner => {
                return Err(OpenError::Foreign {
                    dir: dir.display().to_string(),
                    found,
                    expected: owner,
                })
            }
            Some(_) => {}
            None => store.put_meta("owner", &owner, Durability::Immediate).map_err(|e| io(&e))?,
        }
        Ok(store)
    }

    pub(crate) fn meta<T: for<'a> Deserialize<'a>>(&self, key: &str) -> Result<Option<T>, String> {
        let txn = self.db.begin_read().map_err(|e| e.to_string())?;
        let table = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let Some(value) = table.get(key).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        serde_json::from_slice(value.value()).map(Some).map_err(|e| e.to_string())
    }

    fn put_meta<T: Serialize>(
        &self,
        key: &str,
        value: &T,
        durability: Durability,
    ) -> Result<(), String> {
        let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
        let mut txn = self.db.begin_write().map_err(|e| e.to_string())?;
        txn.set_durability(durability).map_err(|e| e.to_string())?;
        {
            let mut table = txn.open_table(META).map_err(|e| e.to_string())?;
            table.insert(key, bytes.as_slice()).map_err(|e| e.to_string())?;
        }
        txn.commit().map_err(|e| e.to_string())
    }

    pub(crate) fn entries<RB: RangeBounds<u64>>(
        &self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, String> {
        let txn = self.db.begin_read().map_err(|e| e.to_string())?;
        let table = match txn.open_table(LOG) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(e.to_string()),
        };
        let mut out = Vec::new();
        for row in table.range(range).map_err(|e| e.to_string())? {
            let (_, v) = row.map_err(|e| e.to_string())?;
            out.push(serde_json::from_slice(v.value()).map_err(|e| e.to_string())?);
        }
        Ok(out)
    }

    /// Run `f` on one write transaction and commit it, synced to disk if `durable` (one
    /// fsync), else left for the next synced one.
    pub(crate) fn write_batch(
        &self,
        durable: bool,
        f: impl FnOnce(&mut Batch<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut txn = self.db.begin_write().map_err(|e| e.to_string())?;
        let durability = if durable { Durability::Immediate } else { Durability::None };
        txn.set_durability(durability).map_err(|e| e.to_string())?;
        f(&mut Batch { txn: &txn })?;
        txn.commit().map_err(|e| e.to_string())
    }
}

/// The writes of one transaction of [`Store::write_batch`].
pub(crate) struct Batch<'a> {
    txn: &'a redb::WriteTransaction,
}

impl Batch<'_> {
    /// Remove the entries in `range`.
    pub(crate) fn remove<RB: RangeBounds<u64>>(&mut self, range: RB) -> Result<(), String> {
        let mut table = self.txn.open_table(LOG).map_err(|e| e.to_string())?;
        table.retain_in(range, |_, _| false).map_err(|e| e.to_string())
    }

    /// Set `key` of the meta table.
    pub(crate) fn put_meta<T: Serialize>(&mut self, key: &str, value: &T) -> Result<(), String> {
        let bytes = serde_json::to_vec(value).map_err(|e| e.to_string())?;
        let mut table = self.txn.open_table(META).map_err(|e| e.to_string())?;
        table.insert(key, bytes.as_slice()).map_err(|e| e.to_string())?;
        Ok(())
    }
}

/// A string error in openraft's error type.
fn anyerr(e: String) -> openraft::AnyError {
    openraft::AnyError::error(e)
}

/// What the state machine holds, and what a snapshot carries.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Applied {
    /// The last entry applied.
    pub last: Option<LogId<NodeId>>,
    /// The last membership applied.
    pub membership: StoredMembership<NodeId, NodeInfo>,
    /// The locks and sessions.
    pub table: LockTable,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<NodeId, NodeInfo>,
    data: Vec<u8>,
}

/// Where the events of applied entries go (the node's session hub).
pub type EventSink = Arc<dyn Fn(Vec<Event>) + Send + Sync>;

/// The state machine: a [`LockTable`] in memory, shared with the node that reads it, and its
/// snapshots in the [`Store`]. Beside it, what the node's metrics count as entries are
/// applied ([`crate::counts`]): never part of the replicated state.
#[derive(Clone)]
pub struct StateMachine {
    state: Arc<Mutex<Applied>>,
    store: Store,
    sink: EventSink,
    tracker: Arc<Mutex<Tracker>>,
}

impl StateMachine {
    /// The state machine of `store`, starting from its last snapshot; events go to `sink`.
    pub fn open(store: Store, sink: EventSink) -> Result<StateMachine, OpenError> {
        let snapshot: Option<StoredSnapshot> = store
            .meta("snapshot")
            .map_err(|reason| OpenError::Io { dir: "(snapshot)".into(), reason })?;
        let applied = match snapshot {
            Some(s) => serde_json::from_slice(&s.data).map_err(|e| OpenError::Io {
                dir: "(snapshot)".into(),
                reason: format!("unreadable snapshot: {e}"),
            })?,
            None => Applied::default(),
        };
        let mut tracker = Tracker::default();
        tracker.load(&applied.table, Instant::now());
        let tracker = Arc::new(Mutex::new(tracker));
        Ok(StateMachine { state: Arc::new(Mutex::new(applied)), store, sink, tracker })
    }

    /// When each current grant was applied on this node.
    pub fn grant_times(&self) -> GrantTimes {
        GrantTimes::new(self.tracker.clone())
    }

    /// The figures counted as entries are applied.
    pub(crate) fn apply_metrics(&self) -> ApplyMetrics {
        lock(&self.tracker).metrics()
    }

    /// The grants held and the asks queued, as applied.
    pub(crate) fn asks(&self) -> (usize, usize) {
        lock(&self.tracker).asks()
    }

    /// Read the state (briefly: appliers wait meanwhile).
    pub fn read<T>(&self, f: impl FnOnce(&Applied) -> T) -> T {
        f(&lock(&self.state))
    }

    fn build(&self) -> Result<Snapshot<TypeConfig>, String> {
        let (data, last, membership) = {
            let s = lock(&self.state);
            (serde_json::to_vec(&*s).map_err(|e| e.to_string())?, s.last, s.membership.clone())
        };
        let snapshot_id = last.map_or_else(|| "empty".to_string(), |l| l.to_string());
        let meta = SnapshotMeta { last_log_id: last, last_membership: membership, snapshot_id };
        let stored = StoredSnapshot { meta: meta.clone(), data: data.clone() };
        self.store.put_meta("snapshot", &stored, Durability::Immediate)?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, SErr> {
        self.build().map_err(|e| StorageIOError::write_snapshot(None, anyerr(e)).into())
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = StateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, NodeInfo>), SErr> {
        let s = lock(&self.state);
        Ok((s.last, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Outcome>, SErr>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        let mut events = Vec::new();
        let mut outcomes = Vec::new();
        {
            // One reading of the clock for every entry of this call: they are applied at once.
            let now = Instant::now();
            let mut s = lock(&self.state);
            let mut tracker = lock(&self.tracker);
            for entry in entries {
                s.last = Some(entry.log_id);
                let outcome = match entry.payload {
                    EntryPayload::Blank => Outcome::Nothing,
                    EntryPayload::Normal(ref command) => {
                        let index = entry.log_id.index;
                        tracker.apply(&mut s.table, index, command, &mut events, now)
                    }
                    EntryPayload::Membership(ref m) => {
                        s.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                        Outcome::Nothing
                    }
                };
                outcomes.push(outcome);
            }
        }
        if !events.is_empty() {
            (self.sink)(events);
        }
        Ok(outcomes)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, SErr> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, NodeInfo>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), SErr> {
        let data = snapshot.into_inner();
        let fail = |e: String| -> SErr {
            StorageIOError::write_snapshot(Some(meta.signature()), anyerr(e)).into()
        };
        let applied: Applied = serde_json::from_slice(&data).map_err(|e| fail(e.to_string()))?;
        let stored = StoredSnapshot { meta: meta.clone(), data };
        self.store.put_meta("snapshot", &stored, Durability::Immediate).map_err(fail)?;
        lock(&self.tracker).load(&applied.table, Instant::now());
        *lock(&self.state) = applied;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, SErr> {
        let stored: Option<StoredSnapshot> = self
            .store
            .meta("snapshot")
            .map_err(|e| -> SErr { StorageIOError::read_snapshot(None, anyerr(e)).into() })?;
        Ok(stored.map(|s| Snapshot { meta: s.meta, snapshot: Box::new(Cursor::new(s.data)) }))
    }
}

/// A request from one peer to another.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerRequest {
    /// The first frame on a connection: who dials, from which cluster.
    Hello {
        /// The cluster token.
        cluster: String,
        /// The dialling node.
        from: NodeId,
    },
    /// Raft's AppendEntries.
    Append(AppendEntriesRequest<TypeConfig>),
    /// Raft's RequestVote.
    Vote(VoteRequest<NodeId>),
    /// A snapshot chunk.
    Snapshot(InstallSnapshotRequest<TypeConfig>),
}

/// A peer's answer.
#[derive(Debug, Serialize, Deserialize)]
pub enum PeerReply {
    /// The hello was accepted, or why not.
    Hello(Result<(), String>),
    /// To [`PeerRequest::Append`].
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    /// To [`PeerRequest::Vote`].
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    /// To [`PeerRequest::Snapshot`].
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
}

/// Dials peers for openraft (one [`Peer`] per replication stream, election or leadership
/// check), reusing idle connections: openraft asks for a new client for every leadership
/// check (each keep-alive's), with the heartbeat interval to answer in, too short for a new
/// connection and its hello on a loaded machine.
#[derive(Clone)]
pub struct Network {
    cluster: String,
    me: NodeId,
    idle: Arc<Mutex<HashMap<NodeId, Vec<BoxIo>>>>,
    /// Mutual TLS to peers, when the node has it.
    tls: Option<TlsConnector>,
}

/// Idle connections kept per peer.
const IDLE_PER_PEER: usize = 8;

impl Network {
    /// The network of node `me` of cluster `cluster` (the token sent in every hello), over
    /// TLS with `tls` if given.
    pub fn new(cluster: &str, me: NodeId, tls: Option<TlsConnector>) -> Network {
        Network { cluster: cluster.to_string(), me, idle: Arc::default(), tls }
    }

    fn take_idle(&self, target: NodeId) -> Option<BoxIo> {
        lock(&self.idle).get_mut(&target).and_then(Vec::pop)
    }

    fn put_idle(&self, target: NodeId, conn: BoxIo) {
        let mut idle = lock(&self.idle);
        let list = idle.entry(target).or_default();
        if list.len() < IDLE_PER_PEER {
            list.push(conn);
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &NodeInfo) -> Peer {
        Peer { net: self.clone(), target, addr: node.peer.clone() }
    }
}

/// A client of one peer. Each call takes an idle connection of the network's, or dials a new
/// one, and hands it back when its answer has come.
pub struct Peer {
    net: Network,
    target: NodeId,
    addr: String,
}

/// How long dialling a peer may take.
const DIAL_TIMEOUT: Duration = Duration::from_millis(500);

/// How much longer than its deadline a call goes on in the background, so that its
/// connection is kept (see [`Peer::call`]).
const LATE: Duration = Duration::from_millis(1000);

/// Dial the peer of `net` at `addr`: connect, shake hands (over TLS if the node has it), say
/// hello.
async fn dial(net: &Network, addr: &str) -> std::io::Result<BoxIo> {
    let tcp = tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "dial timed out"))??;
    tcp.set_nodelay(true)?;
    let mut s: BoxIo = match &net.tls {
        None => Box::new(tcp),
        Some(tls) => crate::tls::connect(tls, addr, tcp).await.map_err(std::io::Error::other)?,
    };
    let hello = PeerRequest::Hello { cluster: net.cluster.clone(), from: net.me };
    crate::proto::send(&mut s, &encode(&hello)).await?;
    match read_frame::<PeerReply, _>(&mut s, MAX_PEER_FRAME).await? {
        Some(PeerReply::Hello(Ok(()))) => Ok(s),
        Some(PeerReply::Hello(Err(why))) => Err(std::io::Error::other(why)),
        _ => Err(std::io::Error::other("the peer did not answer the hello")),
    }
}

async fn dial_until(
    net: &Network,
    addr: &str,
    deadline: tokio::time::Instant,
) -> Result<BoxIo, Failure> {
    match tokio::time::timeout_at(deadline, dial(net, addr)).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(Failure::Unreachable(e)),
        Err(_) => Err(Failure::Unreachable(timed_out())),
    }
}

/// One call to peer `target` at `addr`, on an idle connection or a new one, by `deadline`;
/// the connection goes back to the pool when the answer came clean. An idle connection that
/// turns out dead (its peer restarted) costs one more dial. `connected` is set once a
/// connection is in hand.
async fn call_by(
    net: &Network,
    target: NodeId,
    addr: &str,
    frame: &[u8],
    deadline: tokio::time::Instant,
    connected: &AtomicBool,
) -> Result<PeerReply, Failure> {
    let pooled = net.take_idle(target);
    let fresh = pooled.is_none();
    let conn = match pooled {
        Some(c) => c,
        None => dial_until(net, addr, deadline).await?,
    };
    connected.store(true, Ordering::Relaxed);
    let (conn, reply) = match exchange(conn, frame, deadline).await {
        Ok(done) => done,
        Err(e) if fresh => return Err(Failure::Lost(e)),
        Err(_) => {
            let conn = dial_until(net, addr, deadline).await?;
            exchange(conn, frame, deadline).await.map_err(Failure::Lost)?
        }
    };
    net.put_idle(target, conn);
    Ok(reply)
}

impl Peer {
    /// Send `request` and read the answer within `ttl`.
    ///
    /// The call runs in a task of its own that goes on for up to [`LATE`] past `ttl`, so a
    /// late answer still hands its connection back to the pool. openraft gives every call
    /// the heartbeat interval (50 ms by default), and a call cut off there would drop its
    /// connection: the next call would then have to dial, shake hands and say hello within
    /// the same interval, which a loaded machine misses again and again, so leadership
    /// checks fail for seconds ("not enough for a quorum") though each answer is only a
    /// little late.
    async fn call(&mut self, request: &PeerRequest, ttl: Duration) -> Result<PeerReply, Failure> {
        let deadline = tokio::time::Instant::now() + ttl;
        let (net, target, addr) = (self.net.clone(), self.target, self.addr.clone());
        let frame = encode(request);
        let connected = Arc::new(AtomicBool::new(false));
        let in_hand = connected.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let late = deadline + LATE;
            let _ = tx.send(call_by(&net, target, &addr, &frame, late, &in_hand).await);
        });
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Failure::Lost(std::io::Error::other("the call's task ended"))),
            // No connection yet: openraft backs off an unreachable peer.
            Err(_) if !connected.load(Ordering::Relaxed) => Err(Failure::Unreachable(timed_out())),
            Err(_) => Err(Failure::Lost(timed_out())),
        }
    }

    /// One RPC: send `request`, take its answer out of the reply with `pick`, and map every
    /// failure onto openraft's errors.
    async fn rpc<T, E: std::error::Error>(
        &mut self,
        request: PeerRequest,
        option: RPCOption,
        pick: impl FnOnce(PeerReply) -> Option<Result<T, RaftError<NodeId, E>>>,
    ) -> Result<T, RPCError<NodeId, NodeInfo, RaftError<NodeId, E>>> {
        match self.call(&request, option.hard_ttl()).await.map(pick) {
            Ok(Some(r)) => r.map_err(|e| remote_raft(self.target, e)),
            Ok(None) => {
                Err(self.net_err(Failure::Lost(std::io::Error::other("mismatched answer"))))
            }
            Err(e) => Err(self.net_err(e)),
        }
    }

    /// openraft's error for a failed call: `Unreachable` when no connection could be made,
    /// so that openraft backs off instead of dialling a dead peer in a tight loop.
    fn net_err<E: std::error::Error>(&self, f: Failure) -> RPCError<NodeId, NodeInfo, E> {
        let describe = |e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("peer {} at {}: {e}", self.target, self.addr))
        };
        match f {
            Failure::Unreachable(e) => RPCError::Unreachable(Unreachable::new(&describe(e))),
            Failure::Lost(e) => RPCError::Network(NetworkError::new(&describe(e))),
        }
    }
}

/// One request (its encoded `frame`) and its answer on `conn`, by `deadline`; the connection
/// back if it is clean.
async fn exchange(
    mut conn: BoxIo,
    frame: &[u8],
    deadline: tokio::time::Instant,
) -> std::io::Result<(BoxIo, PeerReply)> {
    let attempt = async {
        crate::proto::send(&mut conn, frame).await?;
        let reply = read_frame::<PeerReply, _>(&mut conn, MAX_PEER_FRAME)
            .await?
            .ok_or_else(|| std::io::Error::other("the peer closed the connection"))?;
        Ok((conn, reply))
    };
    match tokio::time::timeout_at(deadline, attempt).await {
        Ok(r) => r,
        Err(_) => Err(timed_out()),
    }
}

/// Why a call to a peer failed.
#[derive(Debug)]
enum Failure {
    /// No connection could be made (or the peer refused our hello).
    Unreachable(std::io::Error),
    /// The connection failed or timed out during the call.
    Lost(std::io::Error),
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in time")
}

/// A remote [`RaftError`] as openraft's network layer reports it.
fn remote_raft<E: std::error::Error>(
    target: NodeId,
    e: RaftError<NodeId, E>,
) -> RPCError<NodeId, NodeInfo, RaftError<NodeId, E>> {
    RPCError::RemoteError(RemoteError::new(target, e))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        let pick = |r| match r {
            PeerReply::Append(r) => Some(r),
            _ => None,
        };
        self.rpc(PeerRequest::Append(rpc), option, pick).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, NodeInfo, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let pick = |r| match r {
            PeerReply::Snapshot(r) => Some(r),
            _ => None,
        };
        self.rpc(PeerRequest::Snapshot(rpc), option, pick).await
    }

    /// How long to wait before dialling an unreachable peer again: short, so that a node
    /// that comes back is caught up quickly.
    fn backoff(&self) -> Backoff {
        Backoff::new(std::iter::repeat(Duration::from_millis(100)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, NodeInfo, RaftError<NodeId>>> {
        let pick = |r| match r {
            PeerReply::Vote(r) => Some(r),
            _ => None,
        };
        self.rpc(PeerRequest::Vote(rpc), option, pick).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::send;
    use openraft::Vote;
    use std::sync::atomic::AtomicUsize;
    use tokio::net::TcpListener;

    /// A peer that says hello and answers votes, the first one `slow` late; it counts the
    /// connections it accepts.
    async fn slow_peer(slow: Duration) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let first = count.fetch_add(1, Ordering::SeqCst) == 0;
                tokio::spawn(async move {
                    let _hello = read_frame::<PeerRequest, _>(&mut s, MAX_PEER_FRAME).await;
                    send(&mut s, &encode(&PeerReply::Hello(Ok(())))).await.unwrap();
                    let mut late = first;
                    while let Ok(Some(PeerRequest::Vote(v))) =
                        read_frame::<PeerRequest, _>(&mut s, MAX_PEER_FRAME).await
                    {
                        if std::mem::take(&mut late) {
                            tokio::time::sleep(slow).await;
                        }
                        let answer = PeerReply::Vote(Ok(VoteResponse::new(v.vote, None, true)));
                        if send(&mut s, &encode(&answer)).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        (addr, accepted)
    }

    /// An answer that comes after the call's deadline fails the call, but the connection is
    /// kept: the next call goes over it instead of dialling (and saying hello) again within
    /// its own short deadline, which a loaded machine missed again and again.
    #[tokio::test]
    async fn a_call_past_its_deadline_keeps_its_connection_for_the_next_call() {
        let (addr, accepted) = slow_peer(Duration::from_millis(150)).await;
        let mut peer = Peer { net: Network::new("c", 1, None), target: 2, addr };
        let vote = PeerRequest::Vote(VoteRequest::new(Vote::new(1, 1), None));
        let ttl = Duration::from_millis(50);
        assert!(matches!(peer.call(&vote, ttl).await, Err(Failure::Lost(_))));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(matches!(peer.call(&vote, ttl).await, Ok(PeerReply::Vote(Ok(_)))));
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "the late call's connection was dropped");
    }

    /// A peer that never answers costs a call its deadline, not more.
    #[tokio::test]
    async fn a_call_to_a_silent_peer_fails_at_its_deadline() {
        let (addr, _) = slow_peer(Duration::from_secs(60)).await;
        let mut peer = Peer { net: Network::new("c", 1, None), target: 2, addr };
        let vote = PeerRequest::Vote(VoteRequest::new(Vote::new(1, 1), None));
        let started = std::time::Instant::now();
        assert!(peer.call(&vote, Duration::from_millis(50)).await.is_err());
        assert!(started.elapsed() < Duration::from_millis(500), "{:?}", started.elapsed());
    }
}
