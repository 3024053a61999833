//! A node of the service: its command line, its Raft, its two listeners (clients and peers),
//! the hub that pushes grants down the waiters' connections, and the leader's session clock.
//!
//! **Sessions are kept by the leader's monotonic clock.** A keep-alive is answered only after
//! the leader confirmed with a quorum that it still leads (openraft's `is_leader`, one
//! heartbeat round); the leader then notes the time of that confirmation (after it received
//! the keep-alive: the session's lease is counted from no earlier than the client's). When a
//! session's last keep-alive is a whole TTL old, the leader proposes
//! [`Command::Expire`](crate::state::Command::Expire), and the session ends when that entry
//! commits: every replica ends it at the same log position, and no wall clock is read
//! anywhere. A leader that has just taken over counts every session from the moment it saw
//! itself lead (Chubby's rule; the argument is in the crate docs).
//!
//! One concept a file: `args` (the command line), `hub` (pushes to the sessions'
//! connections), `listener` (binding and accepting), `handler` (one client connection),
//! `peer` (one peer connection), `requests` (what the node does with a client's
//! request), `members` (membership changes), `rights` (what a connection may do on a node
//! without users), `sessions` (the leader's session clock), `gate` (the commit window), `batch`
//! (client commands gathered into entries), [`metrics`] (what the node counts, and when it is
//! healthy) and `http` (where it serves them, with `--metrics-addr`).

mod args;
mod batch;
mod gate;
mod handler;
mod http;
mod hub;
mod listener;
mod members;
pub mod metrics;
mod peer;
mod raft_thread;
mod requests;
mod rights;
mod sessions;
mod trim;

pub use crate::counts::GrantTimes;
pub use args::{parse_cluster, ClusterSpec, ServerArgs};

use crate::auth::{Users, UsersError};
use crate::log::LogStore;
use crate::proto::Status;
use crate::raft::{Network, NodeId, OpenError, Raft, StateMachine, Store};
use crate::tls::{NodeTls, TlsError};
use gate::Gate;
use hub::Hub;
use listener::{bind, listen_addr, listen_err, Listener};
use openraft::SnapshotPolicy;
use raft_thread::RaftThread;
use sessions::Leadership;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use crate::proto::{MAX_TTL, MIN_TTL};

/// Why a node cannot start. Each variant keeps the error it met as its source; its text
/// says what was being done, and with which file or address.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The command line is inconsistent (for a person to read and fix).
    #[error("{0}")]
    Config(String),
    /// The users file (`--users`) cannot be read or is malformed.
    #[error("the users file {}: {source}", path.display())]
    Users {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: UsersError,
    },
    /// The node's certificate, key or CA (`--tls-cert`, `--tls-key`, `--tls-ca`) cannot be
    /// used.
    #[error("TLS: {source}")]
    Tls {
        /// What is wrong with them.
        #[source]
        source: TlsError,
    },
    /// The data directory cannot be used.
    #[error(transparent)]
    Data(#[from] OpenError),
    /// A listener cannot be bound.
    #[error("cannot listen for {what} on {addr}: {source}")]
    Listen {
        /// "clients", "peers" or "metrics".
        what: &'static str,
        /// The address.
        addr: String,
        /// The error.
        source: std::io::Error,
    },
    /// Raft failed to start.
    #[error("raft: {0}")]
    Raft(#[source] Box<openraft::error::Fatal<NodeId>>),
    /// The runtime the node runs on cannot be built.
    #[error("cannot start a runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// The node cannot watch for SIGTERM.
    #[error("cannot watch SIGTERM: {0}")]
    Signal(#[source] std::io::Error),
}

impl From<openraft::error::Fatal<NodeId>> for ServerError {
    fn from(e: openraft::error::Fatal<NodeId>) -> Self {
        ServerError::Raft(Box::new(e))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What one identity or session may take (see [`ServerArgs`]).
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// Per identity; per connection on a node without users.
    sessions_per_identity: usize,
    /// All the sessions together, on a node without users.
    anonymous_sessions: usize,
    asks_per_session: usize,
    inflight: usize,
    /// From connecting to the end of the first frame (TLS included).
    handshake: Duration,
    /// From connecting to the `Hello`, on a node with users.
    hello: Duration,
    /// Without a session, a request in progress or a frame.
    idle: Duration,
    /// From a frame's first byte to its last, and to write one.
    frame: Duration,
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
    /// What each connection may do, on a node without users (see [`rights`]).
    rights: rights::Rights,
    /// TLS for clients (and peers), if any.
    tls: Option<NodeTls>,
    limits: Limits,
    /// Where Raft and the peers run (see [`raft_thread`]).
    raft_thread: RaftThread,
    /// The client commands proposed to Raft at once (see [`gate`]).
    gate: Arc<Gate>,
    /// Gathers commands into entries (see [`batch`]).
    batcher: batch::Batcher,
    /// The number of the next client connection.
    next_conn: std::sync::atomic::AtomicU64,
    /// Gives closed connections' memory back (see [`trim`]).
    trimmer: Arc<trim::Trimmer>,
    /// What the node counts (see [`metrics`]).
    metrics: metrics::Metrics,
    /// Where it serves them over HTTP, if it does.
    metrics_addr: Option<SocketAddr>,
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
        // openraft spawns its core and its tasks on the runtime that creates it, and a
        // socket is driven by the runtime that made it: Raft, the peer listener and the
        // connections to peers are made on the Raft thread.
        let raft_thread = RaftThread::start()?;
        let clients = bind(client_listen, "clients").await?;
        let http = match args.metrics_addr {
            Some(addr) => Some(bind(addr, "metrics").await?),
            None => None,
        };
        let peers = raft_thread
            .handle()
            .spawn(bind(peer_listen, "peers"))
            .await
            .map_err(|e| listen_err("peers", peer_listen, std::io::Error::other(e)))??;
        let users = match &args.users {
            Some(path) => Some(
                Users::load(path)
                    .map_err(|source| ServerError::Users { path: path.clone(), source })?,
            ),
            None => None,
        };
        let tls = match (&args.tls_cert, &args.tls_key) {
            (Some(cert), Some(key)) => Some(
                NodeTls::load(cert, key, args.tls_ca.as_deref())
                    .map_err(|source| ServerError::Tls { source })?,
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
        let (id, init, cluster) = (args.id, args.init, args.cluster.clone());
        let (raft_log, raft_sm) = (log.clone(), sm.clone());
        let raft = raft_thread
            .handle()
            .spawn(async move {
                let raft = Raft::new(id, Arc::new(config), network, raft_log, raft_sm).await?;
                if init && !raft.is_initialized().await? {
                    // Every node of a new cluster may do this with the same list: the first
                    // membership entry is the same everywhere.
                    if let Err(e) = raft.initialize(cluster).await {
                        tracing::warn!("bootstrap: {e}");
                    }
                }
                Ok::<_, ServerError>(raft)
            })
            .await
            .map_err(|e| ServerError::Runtime(std::io::Error::other(e)))??;
        let commit_latency = crate::counts::short_histogram();
        let (batcher, batching) = batch::Batcher::start(
            {
                let raft = raft.clone();
                move |command| {
                    let raft = raft.clone();
                    async move { raft.client_write(command).await.map(|r| r.data) }
                }
            },
            commit_latency.clone(),
        );
        let metrics =
            metrics::Metrics::new(&sm.apply_metrics(), &commit_latency, &log.sync_seconds());
        let metrics_addr = match &http {
            Some(l) => Some(l.local_addr().map_err(|e| {
                listen_err("metrics", args.metrics_addr.unwrap_or(client_listen), e)
            })?),
            None => None,
        };
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
            rights: rights::Rights::default(),
            tls,
            limits: Limits {
                sessions_per_identity: args.max_sessions_per_identity,
                anonymous_sessions: args.max_anonymous_sessions,
                asks_per_session: args.max_asks_per_session,
                inflight: args.max_inflight as usize,
                handshake: Duration::from_millis(args.handshake_timeout_ms),
                hello: Duration::from_millis(args.hello_timeout_ms),
                idle: Duration::from_millis(args.idle_timeout_ms),
                frame: Duration::from_millis(args.frame_timeout_ms),
            },
            raft_thread,
            gate: Gate::new(args.commit_window as usize),
            batcher,
            next_conn: Default::default(),
            trimmer: Arc::default(),
            metrics,
            metrics_addr,
        });
        let mut tasks = vec![
            tokio::spawn(
                Listener {
                    node: node.clone(),
                    listener: clients,
                    what: "client",
                    serve: handler::serve_client,
                }
                .run(),
            ),
            node.raft_thread.handle().spawn(
                Listener {
                    node: node.clone(),
                    listener: peers,
                    what: "peer",
                    serve: peer::serve_peer,
                }
                .run(),
            ),
            tokio::spawn(sessions::keep_sessions(node.clone())),
            tokio::spawn(members::announce_members(node.clone())),
            batching,
            tokio::spawn(node.trimmer.clone().run()),
        ];
        if let Some(http) = http {
            tasks.push(tokio::spawn(http::run(node.clone(), http)));
            tracing::info!(
                "node {} serving metrics and health on {:?}",
                node.id,
                node.metrics_addr
            );
        }
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

    /// Where this node serves `/metrics` and `/health` (`--metrics-addr`), if it does.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// When each grant held now was applied on this node (see [`GrantTimes`]).
    pub fn grant_times(&self) -> GrantTimes {
        self.sm.grant_times()
    }

    /// Stop serving and shut Raft down.
    pub async fn shutdown(&self) {
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
        let _ = self.raft.shutdown().await;
        self.log.stop();
        self.raft_thread.stop().await;
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
            // The state machine's own: openraft's metrics publish it only after the replies
            // of the entries have gone out, so a client could see its grant before this did.
            applied: self.sm.read(|a| a.last.map(|l| l.index)),
            sessions: self.sm.read(|a| a.table.session_count()),
            forced_releases: self.sm.read(|a| a.table.forced_releases()),
            committed: self.log.committed_index(),
            last_log: m.last_log_index,
            locks: self.sm.read(|a| a.table.lock_count()),
            members: self.members(),
        }
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
    runtime.enable_all().build().map_err(ServerError::Runtime)?.block_on(run(args))
}

/// Run a node until SIGINT or SIGTERM.
pub async fn run(args: ServerArgs) -> Result<(), ServerError> {
    let node = Node::start(&args).await?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(ServerError::Signal)?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("node {} shutting down", node.id);
    node.shutdown().await;
    Ok(())
}
