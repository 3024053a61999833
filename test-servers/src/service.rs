//! The workspace's own lock service (`lock-server`, crate `lock-service`): a cluster of nodes
//! ([`ServiceCluster`]) in the same shape as etcd's and ZooKeeper's.
//!
//! The program is not a Debian package but a binary of this workspace, so the engine is made
//! with its path ([`LockService::new`]): a test of `lock-service` passes
//! `env!("CARGO_BIN_EXE_lock-server")`, the harness its own executable with the subcommand
//! that runs a node. Node ids are member indices; each node's `--cluster` entry names its
//! proxies (peer and client), and it listens on ports of its own behind them.

use crate::cluster::{Cluster, ClusterEngine, Layout, Server, Start};
use crate::process::Launch;
use crate::ServerError;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The client port's role.
const CLIENT: usize = 0;
/// The peer port's role.
const PEER: usize = 1;

/// A cluster of lock-service nodes on loopback (see [`Cluster`]).
pub type ServiceCluster = Cluster<LockService>;

/// One node on loopback, a cluster of its own, reached straight at its client port: what a
/// single-server comparison measures, as [`crate::ZkServer`] and [`crate::EtcdServer`] are
/// reached. (A [`ServiceCluster`] of one puts a proxy in front of it.)
pub type ServiceServer = Server<LockService>;

impl Server<LockService> {
    /// Start one node run by `engine` and wait until it leads (within
    /// [`ClusterEngine::FORMATION`]), or say why it could not.
    pub fn launch_node(engine: LockService) -> Result<Self, ServerError> {
        let node = Server::launch_engine(engine)?;
        let deadline = std::time::Instant::now() + LockService::FORMATION;
        let mut leader = None;
        while std::time::Instant::now() < deadline {
            let status = service_status(node.port).unwrap_or_default();
            leader = json_u64(&status, "leader").and_then(|l| usize::try_from(l).ok());
            if leader == Some(0) {
                return Ok(node);
            }
            std::thread::sleep(LAUNCH.poll);
        }
        Err(ServerError::NoLeader {
            what: format!("lock-server on port {} did not become leader", node.port),
            waited: LockService::FORMATION,
            leader,
        })
    }

    /// Its client address, as the client takes it.
    pub fn endpoint(&self) -> String {
        self.addr().to_string()
    }
}

/// The lock-service engine: how to run a node.
#[derive(Clone, Debug)]
pub struct LockService {
    program: PathBuf,
    prefix: Vec<String>,
    extra: Vec<String>,
    /// How many of the members form the cluster; the others start alone and wait to be added
    /// (all, when `None`).
    founders: Option<usize>,
}

impl LockService {
    /// Nodes run by `program` (the `lock-server` binary).
    pub fn new(program: impl Into<PathBuf>) -> LockService {
        LockService {
            program: program.into(),
            prefix: Vec::new(),
            extra: Vec::new(),
            founders: None,
        }
    }

    /// The same nodes, each started with `args` too (`--users FILE`, `--tls-cert FILE`, …).
    /// A node with TLS still answers the plain `Status` probe that says it is ready.
    pub fn with_args<S: AsRef<str>>(mut self, args: &[S]) -> LockService {
        self.extra.extend(args.iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// Nodes run by `program` with `prefix` before the node's arguments (a subcommand of a
    /// bigger binary).
    pub fn with_prefix(program: impl Into<PathBuf>, prefix: &[&str]) -> LockService {
        LockService {
            program: program.into(),
            prefix: prefix.iter().map(|s| s.to_string()).collect(),
            extra: Vec::new(),
            founders: None,
        }
    }

    /// The same nodes, of which only the first `founders` form the cluster: each later member
    /// starts alone (its `--cluster` names only itself, without `--init`) and serves nobody
    /// until a membership change adds it, at its proxies' addresses ([`Cluster::peer_addr`],
    /// [`Cluster::client_addr`]). The cluster's leader is then the one a majority of the
    /// founders name.
    pub fn with_founders(mut self, founders: usize) -> LockService {
        self.founders = Some(founders);
        self
    }
}

const LAUNCH: Launch = Launch {
    program: "lock-server",
    missing: "the lock-server binary was not found",
    package: None,
    install: "build it with `cargo build -p lock-service`",
    name: "lock-server",
    probe: "Status",
    log: "lock-server.log",
    log_on_timeout: true,
    ready: answers,
    deadline: Duration::from_secs(20),
    poll: Duration::from_millis(50),
};

/// Ask the node at loopback `port` for its status: the JSON of its answer.
pub fn service_status(port: u16) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let body = br#"{"id":1,"body":"Status"}"#;
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(body);
    s.write_all(&frame)?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut answer = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut answer)?;
    String::from_utf8(answer).map_err(std::io::Error::other)
}

/// The number after `"key":` in a JSON text (`None` for `null`).
fn json_u64(json: &str, key: &str) -> Option<u64> {
    let start = json.find(&format!("\"{key}\":"))? + key.len() + 3;
    let digits: String = json[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn answers(port: u16) -> bool {
    service_status(port).is_ok_and(|a| a.contains("\"Status\""))
}

impl ClusterEngine for LockService {
    const LAUNCH: &'static Launch = &LAUNCH;
    const KIND: &'static str = "service";
    const PORTS: &'static [&'static str] = &["client", "peer"];
    const FORMATION: Duration = Duration::from_secs(20);

    fn check(&self) -> Result<(), ServerError> {
        if self.program.exists() {
            Ok(())
        } else {
            Err(ServerError::NotInstalled {
                program: self.program.display().to_string(),
                package: None,
                missing: format!("{}: {}", self.program.display(), LAUNCH.missing),
                install: LAUNCH.install,
                source: None,
            })
        }
    }

    fn command(
        &self,
        layout: &Layout,
        i: usize,
        dir: &Path,
        start: Start,
    ) -> Result<Command, ServerError> {
        let addr = |port: u16| format!("127.0.0.1:{port}");
        let founders = self.founders.unwrap_or(layout.members());
        let founding = i < founders;
        let listed: Vec<usize> = if founding { (0..founders).collect() } else { vec![i] };
        let cluster: Vec<String> = listed
            .into_iter()
            .map(|j| {
                format!("{j}={}/{}", addr(layout.reach(j, PEER)), addr(layout.reach(j, CLIENT)))
            })
            .collect();
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.prefix)
            .args(["--id", &i.to_string()])
            .args(["--cluster", &cluster.join(",")])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client", &addr(layout.listen(i, CLIENT))])
            .args(["--listen-peer", &addr(layout.listen(i, PEER))])
            .args(["--cluster-token", layout.token()])
            .args(&self.extra);
        if start == Start::New && founding {
            cmd.arg("--init");
        }
        Ok(cmd)
    }

    /// The node a majority of all nodes (of the founders, with [`LockService::with_founders`])
    /// name as leader in their status.
    fn leader(&self, cluster: &Cluster<Self>) -> Option<usize> {
        let ask =
            |i: usize| json_u64(&service_status(cluster.direct_addr(i).port()).ok()?, "leader");
        let id = match self.founders {
            None => cluster.majority(ask)?,
            Some(founders) => {
                let mut votes = std::collections::BTreeMap::<u64, usize>::new();
                for i in (0..founders).filter(|&i| cluster.is_up(i)) {
                    if let Some(l) = ask(i) {
                        *votes.entry(l).or_default() += 1;
                    }
                }
                votes.into_iter().find(|(_, n)| *n > founders / 2)?.0
            }
        };
        usize::try_from(id).ok().filter(|&i| i < cluster.len())
    }
}

impl Cluster<LockService> {
    /// The client addresses of every node (its client proxies), as the client takes them.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.client_addr(i).to_string()).collect()
    }

    /// Where the other nodes reach node `i`'s peer port (its peer proxy), as a membership
    /// change names it.
    pub fn peer_addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.layout().reach(i, PEER)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_read_from_status_json() {
        let json = r#"{"Reply":{"id":1,"body":{"Status":{"id":2,"leader":1,"leader_addr":"x","term":4}}}}"#;
        assert_eq!(json_u64(json, "leader"), Some(1));
        assert_eq!(json_u64(json, "term"), Some(4));
        assert_eq!(json_u64(r#"{"leader":null}"#, "leader"), None);
    }
}
