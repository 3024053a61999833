//! etcd: a cluster of members ([`EtcdCluster`]) or a server of one ([`EtcdServer`]), both
//! configured by [`Etcd`].

use crate::cluster::{Cluster, ClusterEngine, Layout, Server, Start};
use crate::process::{keep, Launch};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The members' heartbeat interval. etcd grants no lease shorter than 1.5 election timeouts
/// (rounded up to a whole second), so short heartbeats and elections let the tests use
/// 1-second leases; a single member also elects itself after one election timeout, so it
/// starts faster, and a cluster replaces a dead leader within about one election timeout.
pub const ETCD_HEARTBEAT_MS: u64 = 50;
/// The members' election timeout (see [`ETCD_HEARTBEAT_MS`]): the shortest lease it grants is
/// 1.5 × this, rounded up to a whole second: 1 s.
pub const ETCD_ELECTION_MS: u64 = 500;

/// The client port's role.
const CLIENT: usize = 0;
/// The peer port's role.
const PEER: usize = 1;

/// An `etcd` child process (a cluster of one member) on two free loopback ports, the client
/// port and the peer port, with its own data directory; killed on drop (and when the test
/// binary exits).
///
/// [`EtcdServer::stop`] and [`EtcdServer::start_again`] restart it on the same ports with the
/// same data directory, as a crash and a restart would. etcd writes every change (keys,
/// leases) to its write-ahead log before it answers and replays it on restart; a restarted
/// member gives every lease a whole TTL again once it leads (its `Promote`), so a client that
/// keeps its lease alive within that time keeps its keys.
pub type EtcdServer = Server<Etcd>;

/// A cluster of etcd members on loopback (see [`Cluster`]), e.g. `EtcdCluster::start(3)`.
///
/// Each member advertises its proxies: its peer URL (`--initial-advertise-peer-urls`, and its
/// entry in everyone's `--initial-cluster`) is its peer proxy, its client URL its client
/// proxy; it listens on ports of its own behind them. Member ids are hashed from the peer
/// URLs, so every member sees the same ones. Heartbeat [`ETCD_HEARTBEAT_MS`], election
/// timeout [`ETCD_ELECTION_MS`]: a killed or cut-off leader is replaced within about a
/// second. [`Cluster::leader`] asks every member for its status (the JSON gateway's
/// `POST /v3/maintenance/status`, straight to the member's own port) and names the member
/// that a majority of the cluster's members say leads.
pub type EtcdCluster = Cluster<Etcd>;

/// The etcd engine: `etcd` members with the timings above (see [`EtcdCluster`]).
#[derive(Clone, Default)]
pub struct Etcd {
    /// Member ids (from the members' status) to member indices, learnt as members answer,
    /// so that a leader that no longer answers is still known by its id.
    ids: Arc<Mutex<BTreeMap<String, usize>>>,
}

const LAUNCH: Launch = Launch {
    program: "etcd",
    missing: "etcd is not installed (not on PATH)",
    name: "etcd",
    probe: "GET /health",
    log: "etcd.log",
    log_on_timeout: true,
    ready: healthy,
    deadline: Duration::from_secs(30),
    poll: Duration::from_millis(50),
};

/// One HTTP/1.1 request to loopback `port` (closed after the answer); the answer's body.
fn http(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes())?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    Ok(answer.split_once("\r\n\r\n").map_or(answer.clone(), |(_, b)| b.to_string()))
}

/// POST `json` to etcd's JSON gateway (the v3 API over HTTP/1.1) at `path` on `addr`
/// (`/v3/kv/put`, `/v3/kv/range`, `/v3/maintenance/status`, ...; keys and values in base64)
/// and return the answer's body: a client with no dependencies, for probes and tests.
pub fn etcd_post(addr: SocketAddr, path: &str, json: &str) -> std::io::Result<String> {
    http(addr.port(), "POST", path, json)
}

/// The string value of the first `"key":"value"` in a JSON text (enough for etcd's flat
/// answers, whose numbers are strings).
fn json_str<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    json[start..].split('"').next()
}

/// The id of the member whose peer URLs include `peer_url`, in an answer of
/// `/v3/cluster/member/list` (`{"members":[{"ID":"..","name":"..","peerURLs":[".."]},..]}`).
fn member_id_of<'a>(list: &'a str, peer_url: &str) -> Option<&'a str> {
    let quoted = format!("\"{peer_url}\"");
    list.split("\"ID\":\"").skip(1).find(|m| m.contains(&quoted))?.split('"').next()
}

/// Whether the member on loopback `port` answers `GET /health` with `"health":"true"`: it is
/// up and has a leader, so it can serve writes.
fn healthy(port: u16) -> bool {
    http(port, "GET", "/health", "").is_ok_and(|a| a.contains("\"health\":\"true\""))
}

impl ClusterEngine for Etcd {
    const LAUNCH: &'static Launch = &LAUNCH;
    const KIND: &'static str = "etcd";
    const PORTS: &'static [&'static str] = &["client", "peer"];
    const FORMATION: Duration = Duration::from_secs(20);

    fn command(
        &self,
        layout: &Layout,
        i: usize,
        dir: &Path,
        start: Start,
    ) -> Result<Command, String> {
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let cluster: Vec<String> =
            (0..layout.members()).map(|j| format!("m{j}={}", url(layout.reach(j, PEER)))).collect();
        // A member that lost its data joins the cluster that knows it (its id is still a
        // member's) instead of bootstrapping a new one.
        let state = if start == Start::Rejoin { "existing" } else { "new" };
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", &format!("m{i}")])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &url(layout.listen(i, CLIENT))])
            .args(["--advertise-client-urls", &url(layout.reach(i, CLIENT))])
            .args(["--listen-peer-urls", &url(layout.listen(i, PEER))])
            .args(["--initial-advertise-peer-urls", &url(layout.reach(i, PEER))])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", layout.token()])
            .args(["--heartbeat-interval", &ETCD_HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ETCD_ELECTION_MS.to_string()])
            // Membership changes only come from `forget`, which re-adds a member a test
            // wiped: etcd's check refuses them until the leader has been connected to a
            // quorum for 5 s, longer than a young test cluster has lived.
            .arg("--strict-reconfig-check=false")
            // A member that comes back (restarted, healed, resumed) asks before it campaigns,
            // instead of deposing a leader with a higher term: etcd 3.5's default.
            .arg("--pre-vote=true")
            .args(["--logger", "zap", "--log-level", "warn"]);
        Ok(cmd)
    }

    /// Remove the member from the cluster and add it again with the same peer URL: a new
    /// member id, which may start with an empty log (`--initial-cluster-state existing`).
    fn forget(&self, cluster: &Cluster<Self>, member: usize) -> Result<(), String> {
        let peer_url = format!("http://127.0.0.1:{}", cluster.layout().reach(member, PEER));
        let ask = |path: &str, body: &str| {
            (0..cluster.len())
                .filter(|&j| j != member && cluster.is_up(j))
                .find_map(|j| etcd_post(cluster.direct_addr(j), path, body).ok())
                .ok_or_else(|| format!("no etcd member answers {path}"))
        };
        let list = ask("/v3/cluster/member/list", "{}")?;
        let id = member_id_of(&list, &peer_url)
            .ok_or_else(|| format!("etcd lists no member at {peer_url}: {list}"))?;
        let removed = ask("/v3/cluster/member/remove", &format!(r#"{{"ID":"{id}"}}"#))?;
        if !removed.contains("\"members\"") {
            return Err(format!("etcd did not remove member {member} ({id}): {removed}"));
        }
        let added = ask("/v3/cluster/member/add", &format!(r#"{{"peerURLs":["{peer_url}"]}}"#))?;
        if !added.contains("\"member\"") {
            return Err(format!("etcd did not add member {member} again: {added}"));
        }
        Ok(())
    }

    /// The member a majority of all members name as leader in their status.
    fn leader(&self, cluster: &Cluster<Self>) -> Option<usize> {
        let id = cluster.majority(|i| {
            let status = etcd_post(cluster.direct_addr(i), "/v3/maintenance/status", "{}").ok()?;
            if let Some(id) = json_str(&status, "member_id") {
                self.ids.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), i);
            }
            json_str(&status, "leader").filter(|l| *l != "0").map(str::to_string)
        })?;
        self.ids.lock().unwrap_or_else(|e| e.into_inner()).get(&id).copied()
    }
}

impl Server<Etcd> {
    /// The loopback port of the member's peer URL (unused by clients; a cluster of one).
    pub fn peer_port(&self) -> u16 {
        self.layout().listen(0, PEER)
    }

    /// `http://127.0.0.1:<port>`, the client URL etcd clients take.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Cluster<Etcd> {
    /// The client URLs of every member (`http://127.0.0.1:<client proxy port>`), as etcd
    /// clients take them.
    pub fn endpoints(&self) -> Vec<String> {
        (0..self.len()).map(|i| format!("http://{}", self.client_addr(i))).collect()
    }
}

/// The test binary's `etcd`: started by the first call (which panics if it cannot be), then
/// the same one until the binary exits.
pub fn shared_etcd() -> &'static EtcdServer {
    static SERVER: OnceLock<EtcdServer> = OnceLock::new();
    keep(&SERVER, "etcd-keeper", EtcdServer::start)
}
