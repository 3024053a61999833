//! A node of the service: its command line, its Raft, its two listeners (clients and peers),
//! the hub that pushes grants down the waiters' connections, and the leader's session clock.
//!
//! **Sessions are kept by the leader's monotonic clock.** A keep-alive is answered only after
//! the leader confirmed with a quorum that it still leads (openraft's `is_leader`, one
//! heartbeat round); the leader then notes the time it *received* the keep-alive. When a
//! session's last keep-alive is a whole TTL old, the leader proposes [`Command::Expire`], and
//! the session ends when that entry commits: every replica ends it at the same log position,
//! and no wall clock is read anywhere. A leader that has just taken over counts every session
//! from the moment it saw itself lead (Chubby's rule; the argument is in the crate docs).

use crate::auth::{Identity, Role, Users};
use crate::log::LogStore;
use crate::proto::{
    decode, encode, read_bytes, send, ClientFrame, ErrorKind, Push, Reply, Request, ServerFrame,
    SessionId, Status, MAX_CLIENT_FRAME, MAX_PEER_FRAME,
};
use crate::raft::{
    Network, NodeId, NodeInfo, OpenError, PeerReply, PeerRequest, Raft, StateMachine, Store,
};
use crate::state::{Command, Event, Outcome};
use crate::tls::{plain_refusal, starts_tls, BoxIo, NodeTls};
use openraft::{ServerState, SnapshotPolicy};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The shortest session TTL a server accepts.
pub const MIN_TTL: Duration = Duration::from_millis(200);
/// The longest session TTL a server accepts.
pub const MAX_TTL: Duration = Duration::from_secs(3600);

/// `lock-server`'s command line.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "lock-server",
    about = "A node of the lock service: a replicated lock store with server-kept sessions, \
             FIFO queues and grants pushed to the waiter",
    long_about = "A node of the lock service: locks replicated with Raft (openraft), the log \
                  synced to disk before anything is acknowledged, sessions kept alive \
                  by the leader's monotonic clock, a FIFO queue per lock, and every grant \
                  pushed down the waiter's connection in the same commit as the release that \
                  freed it. Fencing token: the Raft index of the granting entry.\n\n\
                  Start every node of a cluster with the same --cluster list and --init the \
                  first time:\n  lock-server --id 0 --data-dir /var/lib/locks/0 --init \\\n    \
                  --cluster 0=10.0.0.1:7400/10.0.0.1:7401,1=10.0.0.2:7400/10.0.0.2:7401,\
                  2=10.0.0.3:7400/10.0.0.3:7401\nA single node is a cluster of one \
                  (--cluster 0=127.0.0.1:7400/127.0.0.1:7401). Logs go to standard error \
                  (RUST_LOG=debug for more)."
)]
pub struct ServerArgs {
    /// This node's id: one of the ids in --cluster.
    #[arg(long)]
    pub id: NodeId,
    /// Every node as ID=PEER_ADDR/CLIENT_ADDR, comma-separated: where the other nodes reach
    /// its peer port and where clients reach its client port.
    #[arg(long, value_parser = parse_cluster)]
    pub cluster: ClusterSpec,
    /// The directory of this node's log, vote and snapshots (made if missing). It belongs to
    /// this node of this cluster: a node started on another's directory refuses to start.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// Bootstrap the cluster from --cluster if this node's log is empty (the first start);
    /// harmless later. Give it to every node of a new cluster.
    #[arg(long)]
    pub init: bool,
    /// A name shared by the nodes of one cluster: a node of another cluster is refused.
    #[arg(long, default_value = "lock-service")]
    pub cluster_token: String,
    /// Listen for clients here instead of this node's CLIENT_ADDR in --cluster (behind a
    /// proxy, say).
    #[arg(long)]
    pub listen_client: Option<SocketAddr>,
    /// Listen for peers here instead of this node's PEER_ADDR in --cluster.
    #[arg(long)]
    pub listen_peer: Option<SocketAddr>,
    /// The leader's heartbeat interval, in milliseconds. openraft also gives every call to a
    /// peer this long to be answered (an append, a leadership check): keep it above the round
    /// trip between nodes at their busiest, or calls keep failing and nothing commits (on
    /// this 2-core machine, six 3-node test clusters at once, unoptimised, went past 50 ms).
    #[arg(long, default_value_t = 50)]
    pub heartbeat_ms: u64,
    /// The shortest election timeout, in milliseconds (the longest is twice this): how long
    /// followers wait for a silent leader before electing another.
    #[arg(long, default_value_t = 300)]
    pub election_ms: u64,
    /// Take a snapshot (and trim the log) after this many entries.
    #[arg(long, default_value_t = 20_000)]
    pub snapshot_every: u64,
    /// Threads that run the node's tasks. 1 (the default) runs them all on one thread, where
    /// handing a message from one task to the next costs no wake-up of another thread: a
    /// commit passes through a dozen such hand-offs, and on one thread it took about a sixth
    /// less time (this machine). More threads help only when a node serves more requests
    /// than a core can. The log's writes have a thread of their own either way.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Authenticate clients against this file: one `NAME ROLE SHA256-OF-TOKEN` line per
    /// identity, ROLE `client` or `admin` (see the crate docs for how to make one). A session
    /// then belongs to the identity that opened it, and only an admin may force-release a
    /// lock. Without it every client is trusted with everything, as on an open ZooKeeper.
    #[arg(long, value_name = "FILE")]
    pub users: Option<PathBuf>,
    /// Serve clients (and peers, with --tls-ca) over TLS only, with this certificate chain
    /// (PEM). Clients must then trust the CA that signed it.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The CA that signed every node's certificate: nodes then talk to each other over mutual
    /// TLS and accept only peers whose certificate it signed. Needs --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
    /// The most sessions one identity may have open at once (all anonymous clients count as
    /// one identity on a node without --users).
    #[arg(long, default_value_t = 1024)]
    pub max_sessions_per_identity: usize,
    /// The most locks one session may hold or wait for at once.
    #[arg(long, default_value_t = 4096)]
    pub max_asks_per_session: usize,
    /// The most requests one connection may have in progress; further frames are not read
    /// until one completes.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_inflight: u32,
}

/// The cluster's nodes by id.
pub type ClusterSpec = BTreeMap<NodeId, NodeInfo>;

/// Parse `ID=PEER/CLIENT,...`.
pub fn parse_cluster(s: &str) -> Result<ClusterSpec, String> {
    let mut nodes = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (id, addrs) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: expected ID=PEER_ADDR/CLIENT_ADDR"))?;
        let id: NodeId = id
            .trim()
            .parse()
            .map_err(|e| format!("{part:?}: node id {id:?} is not a number: {e}"))?;
        let (peer, client) = addrs
            .split_once('/')
            .ok_or_else(|| format!("{part:?}: expected ID=PEER_ADDR/CLIENT_ADDR"))?;
        for a in [peer, client] {
            if !a.contains(':') {
                return Err(format!("{part:?}: {a:?} is not HOST:PORT"));
            }
        }
        let info = NodeInfo { peer: peer.into(), client: client.into() };
        if nodes.insert(id, info).is_some() {
            return Err(format!("node {id} is listed twice"));
        }
    }
    if nodes.is_empty() {
        return Err("the cluster lists no node".into());
    }
    Ok(nodes)
}

/// Why a node cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The command line is inconsistent.
    #[error("{0}")]
    Config(String),
    /// The data directory cannot be used.
    #[error(transparent)]
    Data(#[from] OpenError),
    /// A listener cannot be bound.
    #[error("cannot listen for {what} on {addr}: {source}")]
    Listen {
        /// "clients" or "peers".
        what: &'static str,
        /// The address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// Raft failed to start.
    #[error("raft: {0}")]
    Raft(String),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection's outgoing frames.
type Outbox = mpsc::Sender<Vec<u8>>;

/// The most frames waiting to be written to one connection. A client that stops reading its
/// socket while the server has grants to push for it is cut off when this fills, rather than
/// letting the node buffer without bound.
const OUTBOX: usize = 4096;

/// Where each session's connection is, to push its grants.
#[derive(Default)]
struct Hub {
    conns: Mutex<HashMap<SessionId, Outbox>>,
}

impl Hub {
    fn attach(&self, session: SessionId, out: &Outbox) {
        lock(&self.conns).insert(session, out.clone());
    }

    fn deliver(&self, events: Vec<Event>) {
        let mut conns = lock(&self.conns);
        for event in events {
            match event {
                Event::Granted { session, lock, owner, token, attempt } => {
                    let push = Push::Granted { lock, owner, token, attempt };
                    push_to(&mut conns, session, push);
                }
                Event::Revoked { session, lock, owner, token, by } => {
                    push_to(&mut conns, session, Push::Revoked { lock, owner, token, by });
                }
                Event::Ended { session, reason } => {
                    if let Some(out) = conns.remove(&session) {
                        let push = ServerFrame::Push(Push::SessionEnded { reason });
                        let _ = out.try_send(encode(&push));
                    }
                }
            }
        }
    }
}

/// Push `push` to `session`'s connection; one too slow to take it is forgotten (its client
/// resumes, and learns what it holds, when it reconnects).
fn push_to(conns: &mut HashMap<SessionId, Outbox>, session: SessionId, push: Push) {
    if let Some(out) = conns.get(&session) {
        if out.try_send(encode(&ServerFrame::Push(push))).is_err() {
            tracing::warn!("session {session}'s connection does not keep up: dropped");
            conns.remove(&session);
        }
    }
}

/// What one identity or session may take (see [`ServerArgs`]).
#[derive(Debug, Clone, Copy)]
struct Limits {
    sessions_per_identity: usize,
    asks_per_session: usize,
    inflight: usize,
}

/// The leader's view of its sessions' liveness (empty on followers).
#[derive(Default)]
struct Leadership {
    /// The term this node leads in, if it does.
    term: Option<u64>,
    /// When each session was last heard from (or first seen by this leader).
    seen: HashMap<SessionId, Instant>,
    /// Sessions whose expiry is being committed.
    expiring: HashSet<SessionId>,
}

/// A running node.
pub struct Node {
    id: NodeId,
    raft: Raft,
    log: LogStore,
    sm: StateMachine,
    hub: Arc<Hub>,
    lead: Mutex<Leadership>,
    client_addr: SocketAddr,
    peer_addr: SocketAddr,
    token: String,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// One leadership check at a time; the others wait for it (see [`Node::confirm_lead`]).
    confirming: tokio::sync::Mutex<()>,
    /// When the last leadership check that succeeded started.
    confirmed: Mutex<Option<Instant>>,
    /// The identities clients must prove, if any.
    users: Option<Users>,
    /// TLS for clients (and peers), if any.
    tls: Option<NodeTls>,
    limits: Limits,
}

impl Node {
    /// Start a node as `args` say: open its data directory, bind its listeners, bootstrap
    /// the cluster if asked and new, and serve until [`Node::shutdown`].
    pub async fn start(args: &ServerArgs) -> Result<Arc<Node>, ServerError> {
        let me = args.cluster.get(&args.id).ok_or_else(|| {
            ServerError::Config(format!(
                "--cluster lists no node with id {} (it lists {:?})",
                args.id,
                args.cluster.keys().collect::<Vec<_>>()
            ))
        })?;
        let client_listen = listen_addr(args.listen_client, &me.client, "clients")?;
        let peer_listen = listen_addr(args.listen_peer, &me.peer, "peers")?;
        let clients = bind(client_listen, "clients").await?;
        let peers = bind(peer_listen, "peers").await?;
        let users =
            args.users.as_deref().map(Users::load).transpose().map_err(ServerError::Config)?;
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(
                NodeTls::load(cert, key, args.tls_ca.as_deref()).map_err(ServerError::Config)?,
            ),
            _ => None,
        };
        if users.is_some() && tls.is_none() {
            tracing::warn!(
                "--users without --tls-cert: clients' tokens cross the network in plain text"
            );
        }
        let store = Store::open(&args.data_dir, &args.cluster_token, args.id)?;
        let hub = Arc::new(Hub::default());
        let sink_hub = hub.clone();
        let sm = StateMachine::open(store.clone(), Arc::new(move |e| sink_hub.deliver(e)))?;
        let config = openraft::Config {
            cluster_name: args.cluster_token.clone(),
            heartbeat_interval: args.heartbeat_ms,
            election_timeout_min: args.election_ms,
            election_timeout_max: args.election_ms * 2,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(args.snapshot_every),
            max_in_snapshot_log_to_keep: 1000,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ServerError::Config(format!("raft timings: {e}")))?;
        let peer_tls = tls.as_ref().and_then(|t| t.dial_peers.clone());
        let network = Network::new(&args.cluster_token, args.id, peer_tls);
        let log = LogStore::open(store.clone(), &args.data_dir)
            .map_err(|reason| OpenError::Io { dir: args.data_dir.display().to_string(), reason })?;
        let raft = Raft::new(args.id, Arc::new(config), network, log.clone(), sm.clone())
            .await
            .map_err(|e| ServerError::Raft(e.to_string()))?;
        if args.init
            && !raft.is_initialized().await.map_err(|e| ServerError::Raft(e.to_string()))?
        {
            // Every node of a new cluster may do this with the same list: the first
            // membership entry is the same everywhere.
            if let Err(e) = raft.initialize(args.cluster.clone()).await {
                tracing::warn!("bootstrap: {e}");
            }
        }
        let node = Arc::new(Node {
            id: args.id,
            raft,
            log,
            sm,
            hub,
            lead: Mutex::default(),
            client_addr: clients
                .local_addr()
                .map_err(|e| listen_err("clients", client_listen, e))?,
            peer_addr: peers.local_addr().map_err(|e| listen_err("peers", peer_listen, e))?,
            token: args.cluster_token.clone(),
            tasks: Mutex::default(),
            confirming: tokio::sync::Mutex::new(()),
            confirmed: Mutex::new(None),
            users,
            tls,
            limits: Limits {
                sessions_per_identity: args.max_sessions_per_identity,
                asks_per_session: args.max_asks_per_session,
                inflight: args.max_inflight as usize,
            },
        });
        let tasks = vec![
            tokio::spawn(accept(node.clone(), clients, "client", serve_client)),
            tokio::spawn(accept(node.clone(), peers, "peer", serve_peer)),
            tokio::spawn(keep_sessions(node.clone())),
        ];
        *lock(&node.tasks) = tasks;
        tracing::info!(
            "node {} serving clients on {} and peers on {}",
            node.id,
            node.client_addr,
            node.peer_addr
        );
        Ok(node)
    }

    /// Where this node listens for clients.
    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    /// Where this node listens for its peers.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// Stop serving and shut Raft down.
    pub async fn shutdown(&self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        let _ = self.raft.shutdown().await;
        self.log.stop();
    }

    /// This node's view of the cluster.
    pub fn status(&self) -> Status {
        let m = self.raft.metrics().borrow().clone();
        let leader_addr = m
            .current_leader
            .and_then(|l| m.membership_config.membership().get_node(&l).map(|n| n.client.clone()));
        Status {
            id: self.id,
            leader: m.current_leader,
            leader_addr,
            term: m.current_term,
            applied: m.last_applied.map(|l| l.index),
            sessions: self.sm.read(|a| a.table.session_count()),
            forced_releases: self.sm.read(|a| a.table.forced_releases()),
        }
    }

    /// The answer to a request this node cannot serve because it does not lead.
    fn not_leader(&self, hint: Option<&NodeInfo>) -> Reply {
        let leader = hint.map(|n| n.client.clone()).or_else(|| self.status().leader_addr);
        Reply::NotLeader { leader }
    }

    /// The answer to a request Raft refused: where the leader is, or that it cannot serve now.
    fn refusal<E>(&self, e: openraft::error::RaftError<NodeId, E>) -> Reply
    where
        E: std::error::Error
            + openraft::TryAsRef<openraft::error::ForwardToLeader<NodeId, NodeInfo>>,
    {
        match e.forward_to_leader() {
            Some(f) => self.not_leader(f.leader_node.as_ref()),
            None => unavailable(e),
        }
    }

    /// Commit `command` and return what applying it did.
    async fn write(&self, command: Command) -> Result<Outcome, Reply> {
        match self.raft.client_write(command).await {
            Ok(r) => Ok(r.data),
            Err(e) => Err(self.refusal(e)),
        }
    }

    /// Confirm with a quorum that this node leads, by a check that started after this call
    /// did: keep-alives and resumes that arrive together share one check (one heartbeat
    /// round), so 64 sessions do not cost 64 rounds.
    async fn confirm_lead(&self) -> Result<(), Reply> {
        let arrived = Instant::now();
        let _turn = self.confirming.lock().await;
        if lock(&self.confirmed).is_some_and(|at| at >= arrived) {
            return Ok(());
        }
        let started = Instant::now();
        match self.raft.ensure_linearizable().await {
            Ok(_) => {
                *lock(&self.confirmed) = Some(started);
                Ok(())
            }
            Err(e) => Err(self.refusal(e)),
        }
    }

    /// Note that `session` was heard from now (on the leader).
    fn touch(&self, session: SessionId) {
        let mut lead = lock(&self.lead);
        if lead.term.is_some() {
            lead.seen.insert(session, Instant::now());
        }
    }

    /// Whether `who` may act for `session`, read from the applied state (a session's identity
    /// never changes): `Err` with the answer when it is gone or another identity's.
    fn check_owner(&self, session: SessionId, who: &Identity) -> Result<(), Reply> {
        match self.sm.read(|a| a.table.identity_of(session).map(|i| i.map(str::to_string))) {
            None => Err(session_gone(session)),
            Some(Some(owner)) if who.name.as_deref() != Some(owner.as_str()) => Err(forbidden(
                format!("session {session} belongs to another identity than {}", who.label()),
            )),
            Some(_) => Ok(()),
        }
    }

    /// [`Node::check_owner`] before a commit: a session this node has not applied yet (a new
    /// leader catching up) is left to the state machine, which checks the identity again.
    /// So a refused request commits nothing, and one that slips past is refused in the log.
    fn check_owner_known(&self, session: SessionId, who: &Identity) -> Result<(), Reply> {
        match self.check_owner(session, who) {
            Err(Reply::Error { kind: ErrorKind::SessionGone, .. }) => Ok(()),
            other => other,
        }
    }

    async fn handle(&self, request: Request, out: &Outbox, who: &Identity) -> Reply {
        let by = who.name.clone();
        match request {
            Request::Hello { .. } => {
                bad_request("this connection has already said who it is".into())
            }
            Request::Status => Reply::Status(self.status()),
            Request::Open { ttl_ms } => self.open(ttl_ms, out, who).await,
            Request::Resume { session } => {
                // Shared like a keep-alive's: after a failover every session resumes at once,
                // and one leadership check each (each a round of new peer connections)
                // overran the heartbeat interval, failed, and was retried by all of them.
                if let Err(r) = self.confirm_lead().await {
                    return r;
                }
                if let Err(r) = self.check_owner(session, who) {
                    return r;
                }
                // Attach before reading what it holds: a grant applied in between is then
                // pushed as well as listed, never lost.
                self.hub.attach(session, out);
                if !self.sm.read(|a| a.table.has_session(session)) {
                    return session_gone(session);
                }
                self.touch(session);
                Reply::Resumed { held: self.sm.read(|a| a.table.held_by(session)) }
            }
            Request::KeepAlive { session } => {
                if let Err(r) = self.confirm_lead().await {
                    return r;
                }
                if let Err(r) = self.check_owner(session, who) {
                    return r;
                }
                self.touch(session);
                Reply::Alive
            }
            Request::Acquire { session, lock, owner, wait, attempt } => {
                if let Err(r) = check_ids(&lock, &owner) {
                    return r;
                }
                if let Err(r) = self.check_owner_known(session, who) {
                    return r;
                }
                if let Err(r) = self.check_asks(session, &lock, &owner) {
                    return r;
                }
                self.commit(Command::Acquire { session, lock, owner, wait, attempt, by }).await
            }
            Request::Release { session, lock, owner, attempt } => {
                if let Err(r) = check_ids(&lock, &owner) {
                    return r;
                }
                if let Err(r) = self.check_owner_known(session, who) {
                    return r;
                }
                self.commit(Command::Release { session, lock, owner, attempt, by }).await
            }
            Request::Close { session } => {
                if let Err(r) = self.check_owner_known(session, who) {
                    return r;
                }
                match self.commit(Command::Close { session, by }).await {
                    Reply::Error { kind: ErrorKind::SessionGone, .. } => Reply::Closed,
                    r => r,
                }
            }
            Request::ForceRelease { lock } => self.force_release(lock, who).await,
        }
    }

    /// Refuse a new ask of a session that has as many as it may.
    fn check_asks(&self, session: SessionId, lock: &str, owner: &str) -> Result<(), Reply> {
        let limit = self.limits.asks_per_session;
        let (asks, again) =
            self.sm.read(|a| (a.table.asks_of(session), a.table.is_asking(session, lock, owner)));
        if asks >= limit && !again {
            return Err(limit_reached(format!(
                "session {session} already holds or waits for {asks} locks, the most a \
                 session may (--max-asks-per-session {limit})"
            )));
        }
        Ok(())
    }

    async fn force_release(&self, lock: String, who: &Identity) -> Reply {
        if who.role != Role::Admin {
            return forbidden(format!(
                "{} may not force-release locks: only an admin identity may",
                who.label()
            ));
        }
        if let Err(r) = check_ids(&lock, "admin") {
            return r;
        }
        let by = who.label().to_string();
        match self.write(Command::ForceRelease { lock: lock.clone(), by: by.clone() }).await {
            Ok(Outcome::Released) => {
                tracing::warn!("lock {lock:?} force-released by {by}");
                Reply::Released
            }
            Ok(Outcome::NotHeld) => Reply::NotHeld,
            Ok(other) => unexpected(other),
            Err(r) => r,
        }
    }

    async fn open(&self, ttl_ms: u64, out: &Outbox, who: &Identity) -> Reply {
        let ttl = Duration::from_millis(ttl_ms);
        if !(MIN_TTL..=MAX_TTL).contains(&ttl) {
            return bad_request(format!(
                "session TTL {ttl:?} is out of range: {MIN_TTL:?} to {MAX_TTL:?}"
            ));
        }
        let identity = who.name.clone();
        let limit = self.limits.sessions_per_identity;
        let open = self.sm.read(|a| a.table.sessions_of(identity.as_deref()));
        if open >= limit {
            return limit_reached(format!(
                "{} already has {open} sessions open, the most one identity may \
                 (--max-sessions-per-identity {limit})",
                who.label()
            ));
        }
        match self.write(Command::Open { ttl_ms, identity }).await {
            Ok(Outcome::Opened(session)) => {
                self.hub.attach(session, out);
                self.touch(session);
                Reply::Opened { session }
            }
            Ok(other) => unexpected(other),
            Err(r) => r,
        }
    }

    async fn commit(&self, command: Command) -> Reply {
        let session = match &command {
            Command::Acquire { session, .. }
            | Command::Release { session, .. }
            | Command::Close { session, .. }
            | Command::Expire { session } => *session,
            Command::Open { .. } | Command::ForceRelease { .. } => 0,
        };
        let outcome = self.write(command).await;
        if matches!(outcome, Ok(ref o) if matches!(o, Outcome::Granted(_) | Outcome::Queued
            | Outcome::Busy | Outcome::Released | Outcome::Cancelled | Outcome::NotHeld))
        {
            // A commit by this leader proves, like a keep-alive's quorum check, that it led
            // after the request arrived: a busy session needs no keep-alives.
            self.touch(session);
        }
        match outcome {
            Ok(Outcome::Granted(token)) => Reply::Granted { token },
            Ok(Outcome::Queued) => Reply::Queued,
            Ok(Outcome::Busy) => Reply::Busy,
            Ok(Outcome::Released) => Reply::Released,
            Ok(Outcome::Cancelled) => Reply::Cancelled,
            Ok(Outcome::NotHeld) => Reply::NotHeld,
            Ok(Outcome::Ended) => Reply::Closed,
            Ok(Outcome::SessionGone) => session_gone(session),
            Ok(Outcome::Forbidden) => {
                forbidden(format!("session {session} belongs to another identity"))
            }
            Ok(other) => unexpected(other),
            Err(r) => r,
        }
    }

    /// One round of the leader's session clock: expire every session silent for its TTL.
    fn expire_silent(self: &Arc<Self>) {
        let m = self.raft.metrics().borrow().clone();
        let leads = m.state == ServerState::Leader && m.current_leader == Some(self.id);
        let now = Instant::now();
        let mut lead = lock(&self.lead);
        if !leads {
            *lead = Leadership::default();
            return;
        }
        if lead.term != Some(m.current_term) {
            // A new term: every session starts a whole TTL from now (Chubby's rule).
            *lead = Leadership { term: Some(m.current_term), ..Leadership::default() };
        }
        let sessions: Vec<(SessionId, u64)> = self.sm.read(|a| a.table.sessions().collect());
        let live: HashSet<SessionId> = sessions.iter().map(|(s, _)| *s).collect();
        lead.seen.retain(|s, _| live.contains(s));
        for (session, ttl_ms) in sessions {
            let seen = *lead.seen.entry(session).or_insert(now);
            if now.duration_since(seen) >= Duration::from_millis(ttl_ms)
                && lead.expiring.insert(session)
            {
                let node = self.clone();
                tokio::spawn(async move {
                    if let Err(r) = node.write(Command::Expire { session }).await {
                        tracing::debug!("expiring session {session}: {r:?}");
                    }
                    lock(&node.lead).expiring.remove(&session);
                });
            }
        }
    }
}

fn listen_addr(
    given: Option<SocketAddr>,
    advertised: &str,
    what: &'static str,
) -> Result<SocketAddr, ServerError> {
    match given {
        Some(a) => Ok(a),
        None => advertised.parse().map_err(|e| {
            ServerError::Config(format!(
                "this node's {what} address {advertised:?} is not IP:PORT ({e}); \
                 give --listen-{} explicitly",
                if what == "clients" { "client" } else { "peer" }
            ))
        }),
    }
}

fn listen_err(what: &'static str, addr: SocketAddr, source: std::io::Error) -> ServerError {
    ServerError::Listen { what, addr: addr.to_string(), source }
}

async fn bind(addr: SocketAddr, what: &'static str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr).await.map_err(|e| listen_err(what, addr, e))
}

fn bad_request(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::BadRequest, message }
}

fn forbidden(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::Forbidden, message }
}

fn limit_reached(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::LimitReached, message }
}

fn unauthenticated(message: String) -> Reply {
    Reply::Error { kind: ErrorKind::Unauthenticated, message }
}

fn session_gone(session: SessionId) -> Reply {
    Reply::Error {
        kind: ErrorKind::SessionGone,
        message: format!("session {session} expired or was closed"),
    }
}

fn unavailable(e: impl std::fmt::Display) -> Reply {
    Reply::Error { kind: ErrorKind::Unavailable, message: e.to_string() }
}

fn unexpected(o: Outcome) -> Reply {
    unavailable(format!("unexpected outcome {o:?}"))
}

fn check_ids(lock: &str, owner: &str) -> Result<(), Reply> {
    lock_core::lock::validate_id("lock id", lock)
        .and_then(|_| lock_core::lock::validate_id("owner id", owner))
        .map_err(|e| bad_request(e.to_string()))
}

/// Accept `what` ("client", "peer") connections on `listener`, each served by `serve` on a
/// task of its own; a failed accept (out of file descriptors) is logged and retried.
async fn accept<F, Fut>(node: Arc<Node>, listener: TcpListener, what: &str, serve: F)
where
    F: Fn(Arc<Node>, TcpStream) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(serve(node.clone(), stream));
            }
            Err(e) => {
                tracing::warn!("accepting a {what}: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serve one client connection: TLS first if the node has it, then frames. Requests run
/// concurrently (at most `--max-inflight` at once), replies and pushes share one writer. A
/// malformed frame is answered with an error (request id 0) and the connection goes on; an
/// oversized or truncated one, or a failed `Hello`, closes it.
async fn serve_client(node: Arc<Node>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let io: BoxIo = match &node.tls {
        None => Box::new(stream),
        Some(tls) => {
            if !starts_tls(&stream).await {
                plain_on_tls(&node, stream).await;
                return;
            }
            match tokio::time::timeout(HANDSHAKE, tls.clients.accept(stream)).await {
                Ok(Ok(s)) => Box::new(s),
                Ok(Err(e)) => {
                    tracing::debug!("a client's TLS handshake failed: {e}");
                    return;
                }
                Err(_) => return,
            }
        }
    };
    let (mut rd, mut wr) = tokio::io::split(io);
    let (out, mut outbox) = mpsc::channel::<Vec<u8>>(OUTBOX);
    let writer = tokio::spawn(async move {
        while let Some(bytes) = outbox.recv().await {
            if wr.write_all(&bytes).await.is_err() {
                break;
            }
            // Flush once the queue is empty: frames queued together leave together.
            if outbox.is_empty() && wr.flush().await.is_err() {
                break;
            }
        }
    });
    let inflight = Arc::new(Semaphore::new(node.limits.inflight));
    let mut who: Option<Arc<Identity>> = node.users.is_none().then(|| Arc::new(Identity::anyone()));
    loop {
        let bytes = match read_bytes(&mut rd, MAX_CLIENT_FRAME).await {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e) => {
                let reply = bad_request(format!("connection closed: {e}"));
                let _ = out.send(encode(&ServerFrame::Reply { id: 0, body: reply })).await;
                break;
            }
        };
        let frame: ClientFrame = match decode(&bytes) {
            Ok(f) => f,
            Err(e) => {
                let reply = bad_request(e.to_string());
                let _ = out.send(encode(&ServerFrame::Reply { id: 0, body: reply })).await;
                continue;
            }
        };
        let identity = match (&who, frame.body) {
            (Some(id), body) => (id.clone(), body),
            (None, Request::Hello { user, token }) => {
                let users = node.users.as_ref().expect("only a node with users waits for Hello");
                let (body, known) = match users.authenticate(&user, &token) {
                    Ok(id) => {
                        let admin = id.role == Role::Admin;
                        let body = Reply::Welcome { identity: user, admin };
                        (body, Some(Arc::new(id)))
                    }
                    Err(why) => {
                        tracing::warn!("a client was refused: {why}");
                        (unauthenticated(why), None)
                    }
                };
                let _ = out.send(encode(&ServerFrame::Reply { id: frame.id, body })).await;
                match known {
                    Some(id) => who = Some(id),
                    None => break,
                }
                continue;
            }
            (None, Request::Status) => (Arc::new(Identity::anyone()), Request::Status),
            (None, _) => {
                let body = unauthenticated(
                    "this node authenticates its clients: say who you are (Hello) first".into(),
                );
                let _ = out.send(encode(&ServerFrame::Reply { id: frame.id, body })).await;
                continue;
            }
        };
        let Ok(permit) = inflight.clone().acquire_owned().await else {
            break;
        };
        let node = node.clone();
        let out = out.clone();
        tokio::spawn(async move {
            let (who, request) = identity;
            let body = node.handle(request, &out, &who).await;
            let _ = out.send(encode(&ServerFrame::Reply { id: frame.id, body })).await;
            drop(permit);
        });
    }
    drop(out);
    let _ = writer.await;
}

/// A plain connection to a TLS node: a `Status` probe is answered (health checks need no
/// certificate, as ZooKeeper's four-letter words need none; a status tells the leader, the
/// term and counts, nothing of a lock or a session), anything else is refused with one plain
/// frame saying the node speaks TLS only.
async fn plain_on_tls(node: &Node, mut stream: TcpStream) {
    let read = tokio::time::timeout(HANDSHAKE, read_bytes(&mut stream, MAX_CLIENT_FRAME)).await;
    let frame = match read {
        Ok(Ok(Some(bytes))) => decode::<ClientFrame>(&bytes).ok(),
        _ => None,
    };
    let answer = match frame {
        Some(ClientFrame { id, body: Request::Status }) => {
            encode(&ServerFrame::Reply { id, body: Reply::Status(node.status()) })
        }
        _ => plain_refusal(),
    };
    let _ = send(&mut stream, &answer).await;
}

/// How long a client or peer may take over its TLS handshake.
const HANDSHAKE: Duration = Duration::from_secs(10);

/// Serve one peer connection: a hello naming our cluster, then Raft's requests in turn.
async fn serve_peer(node: Arc<Node>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let mut stream: BoxIo = match node.tls.as_ref().and_then(|t| t.peers.as_ref()) {
        None => Box::new(stream),
        Some(peers) => match tokio::time::timeout(HANDSHAKE, peers.accept(stream)).await {
            Ok(Ok(s)) => Box::new(s),
            Ok(Err(e)) => {
                tracing::warn!("a peer's TLS handshake failed: {e}");
                return;
            }
            Err(_) => return,
        },
    };
    match crate::proto::read_frame::<PeerRequest, _>(&mut stream, MAX_PEER_FRAME).await {
        Ok(Some(PeerRequest::Hello { cluster, from })) if cluster == node.token => {
            if send(&mut stream, &encode(&PeerReply::Hello(Ok(())))).await.is_err() {
                return;
            }
            tracing::debug!("peer {from} connected");
        }
        Ok(Some(PeerRequest::Hello { cluster, from })) => {
            let why = format!(
                "node {} belongs to cluster {:?}, not {cluster:?} (node {from} dialled it)",
                node.id, node.token
            );
            tracing::warn!("{why}");
            let _ = send(&mut stream, &encode(&PeerReply::Hello(Err(why)))).await;
            return;
        }
        _ => return,
    }
    loop {
        let request =
            match crate::proto::read_frame::<PeerRequest, _>(&mut stream, MAX_PEER_FRAME).await {
                Ok(Some(r)) => r,
                _ => return,
            };
        let reply = match request {
            PeerRequest::Append(r) => PeerReply::Append(node.raft.append_entries(r).await),
            PeerRequest::Vote(r) => PeerReply::Vote(node.raft.vote(r).await),
            PeerRequest::Snapshot(r) => PeerReply::Snapshot(node.raft.install_snapshot(r).await),
            PeerRequest::Hello { .. } => return,
        };
        if send(&mut stream, &encode(&reply)).await.is_err() {
            return;
        }
    }
}

/// The leader's session clock; see the module docs.
async fn keep_sessions(node: Arc<Node>) {
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        node.expire_silent();
    }
}

/// `lock-server`'s whole life: logs to standard error (`RUST_LOG` filters them), a runtime,
/// and [`run`] until SIGINT or SIGTERM; an error when the node cannot start, saying why.
pub fn serve(args: ServerArgs) -> Result<(), ServerError> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,lock_service=info".into()),
        )
        .try_init();
    let mut runtime = match args.threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut multi = tokio::runtime::Builder::new_multi_thread();
            multi.worker_threads(n.into());
            multi
        }
    };
    runtime
        .enable_all()
        .build()
        .map_err(|e| ServerError::Config(format!("cannot start a runtime: {e}")))?
        .block_on(run(args))
}

/// Run a node until SIGINT or SIGTERM.
pub async fn run(args: ServerArgs) -> Result<(), ServerError> {
    let node = Node::start(&args).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| ServerError::Config(format!("cannot watch SIGTERM: {e}")))?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("node {} shutting down", node.id);
    node.shutdown().await;
    Ok(())
}
