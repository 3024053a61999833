//! `lock-server`'s command line, and the cluster list it takes.

use crate::raft::{NodeId, NodeInfo};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

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
                  freed it. Fencing token: the stamp of the granting command (the Raft index of its entry, \
                  or above it within a batch), greater than every token before it.\n\n\
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
    /// Bootstrap the cluster from --cluster if this node's log is empty (the first start).
    /// Give it to every node of a new cluster, and to no other: a node that lost its data
    /// directory and is started with it bootstraps again under its old id.
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
    /// trip between nodes at their busiest, or calls keep failing and nothing commits (a
    /// machine whose cores are shared with other busy work can go past the default).
    #[arg(long, default_value_t = 50)]
    pub heartbeat_ms: u64,
    /// The shortest election timeout, in milliseconds (the longest is twice this): how long
    /// followers wait for a silent leader before electing another.
    #[arg(long, default_value_t = 300)]
    pub election_ms: u64,
    /// Take a snapshot (and trim the log) after this many entries.
    #[arg(long, default_value_t = 20_000)]
    pub snapshot_every: u64,
    /// Threads that serve clients: their connections, TLS, frames and requests. 1 (the
    /// default) runs them all on one thread, where handing a message from one task to the next
    /// costs no wake-up of another thread. More help only when a node serves more requests
    /// than a core can. Raft and the peers have a thread of their own, so that no client
    /// work delays a heartbeat or a vote, and the log's writes another.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// The most client commands proposed to Raft at once (acquires, releases, opens,
    /// closes). Further ones wait, and a freed place goes to the waiting connections in turn,
    /// so that one connection's burst takes its share, not all of it. Larger lets a busy node
    /// commit more per round, at the cost of a longer wait for every new command.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub commit_window: u32,
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
    /// The most sessions one identity may have open at once. On a node without --users, the
    /// most sessions one client connection may act for (those it opened or resumed) and be
    /// opening: a client is told from another only by its connection there.
    #[arg(long, default_value_t = 1024)]
    pub max_sessions_per_identity: usize,
    /// On a node without --users, the most sessions all its clients may have open together:
    /// what bounds a client that opens many connections.
    #[arg(long, default_value_t = 65_536)]
    pub max_anonymous_sessions: usize,
    /// The most locks one session may hold or wait for at once.
    #[arg(long, default_value_t = 4096)]
    pub max_asks_per_session: usize,
    /// The most requests one connection may have in progress; further frames are not read
    /// until one completes.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_inflight: u32,
    /// A new client connection must finish its TLS handshake (with --tls-cert) and send its
    /// first whole frame within this many milliseconds of connecting, or it is closed.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub handshake_timeout_ms: u64,
    /// With --users, a client connection must say who it is (`Hello`) within this many
    /// milliseconds of connecting, or it is closed (`Status` probes before it do not count).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub hello_timeout_ms: u64,
    /// A client connection that serves no session, has no request in progress and sends
    /// nothing for this many milliseconds is closed. A connection with a session is kept: its
    /// keep-alives come every TTL/3, and its session's expiry ends it.
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    /// Once the first byte of a client's frame has come, the rest of it must come within this
    /// many milliseconds, and a frame to the client must be taken (written) within as long,
    /// or the connection is closed.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub frame_timeout_ms: u64,
    /// Serve HTTP here (IP:PORT; port 0 picks a free one): `GET /metrics` in Prometheus'
    /// text format (grants, releases, expirations, forced releases, wait, hold, commit and
    /// log sync times, sessions, grants held, waiters, Raft's term, leader and indexes) and
    /// `GET /health`: 200 when this node knows a leader, its Raft runs, and it has applied
    /// every entry it knew committed when asked (waiting up to a second for that), else 503
    /// with the reason. Off by default. Plain HTTP, no authentication: bind it where only
    /// the monitoring can reach it. The crate docs of `server::metrics` list every metric.
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_addr: Option<SocketAddr>,
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
