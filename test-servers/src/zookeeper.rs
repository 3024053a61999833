//! ZooKeeper (the Debian package's jars on `java`): an ensemble ([`ZkCluster`]) or a
//! standalone server ([`ZkServer`]), both configured by [`Zk`].

use crate::cluster::{Cluster, ClusterEngine, Layout, Server, Start};
use crate::process::{keep, Launch};
use crate::proxy::Rewrite;
use crate::INSTALL_HINT;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// The Debian package's jars; `ZOOKEEPER_CLASSPATH` overrides.
pub const ZK_DEFAULT_CLASSPATH: &str =
    "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// The server's tick: session expiry is checked at this granularity, and the smallest session
/// timeout it grants is 2 ticks. In an ensemble it also paces Zab: a follower that hears
/// nothing from its leader for `syncLimit` (5) ticks, 1 s, drops it and elects another.
pub const ZK_TICK_MS: u64 = 200;

/// The client port's role.
const CLIENT: usize = 0;
/// The quorum port's role (followers to their leader).
const QUORUM: usize = 1;
/// The election port's role (every server to every other, fast leader election).
const ELECTION: usize = 2;

/// A ZooKeeper server (standalone, on `java`) child process on a free loopback port, with its
/// own data directory; killed on drop (and when the test binary exits).
///
/// [`ZkServer::stop`] and [`ZkServer::start_again`] restart it on the same port with the same
/// data directory, as a crash and a restart would. ZooKeeper writes every transaction (session
/// creations and closes included) to its log before it answers, and a restarted standalone
/// server reloads its sessions from the snapshot and log and gives each of them a whole session
/// timeout again: a client that reconnects within that time keeps its session, its ephemeral
/// znodes and its watches. The tick is [`ZK_TICK_MS`]; granted session timeouts range from 2
/// ticks to 60 s.
///
/// [`ZkServer::stop`]: Server::stop
/// [`ZkServer::start_again`]: Server::start_again
pub type ZkServer = Server<Zk>;

/// A ZooKeeper ensemble on loopback (see [`Cluster`]), e.g. `ZkCluster::start(3)`.
///
/// Member `i` is server `i + 1` (its `myid`). Each member's configuration names the others at
/// their proxies (`server.N=127.0.0.1:<quorum proxy>:<election proxy>`) and itself at the
/// ports it listens on, so every connection between members goes through the proxy of the
/// member it reaches. One exception needs a hand: a server that dials another's election port
/// first sends its own election address, and the server with the higher id closes that
/// connection and dials back *that address*; the proxy rewrites it to the sender's election
/// proxy ([`Zk`]'s `rewrite`). Tick [`ZK_TICK_MS`], `initLimit` 10 and `syncLimit` 5 ticks:
/// a killed or cut-off leader is replaced within a few seconds. [`Cluster::leader`] asks
/// every member `srvr` and names the one in `Mode: leader` that a majority of the ensemble
/// follows (`mntr`'s `zk_synced_followers`), so a cut-off leader that has not yet noticed is
/// not named.
pub type ZkCluster = Cluster<Zk>;

/// The ZooKeeper engine: a server on `java` with the jars of the classpath (see
/// [`ZkCluster`]).
#[derive(Clone)]
pub struct Zk {
    classpath: String,
}

impl Default for Zk {
    /// The classpath of `ZOOKEEPER_CLASSPATH`, or [`ZK_DEFAULT_CLASSPATH`].
    fn default() -> Zk {
        let classpath = std::env::var("ZOOKEEPER_CLASSPATH")
            .unwrap_or_else(|_| ZK_DEFAULT_CLASSPATH.to_string());
        Zk { classpath }
    }
}

const LAUNCH: Launch = Launch {
    program: "java",
    missing: "java is not installed (not on PATH), ZooKeeper needs it",
    name: "ZooKeeper",
    probe: "ruok",
    log: "zookeeper.log",
    log_on_timeout: true,
    ready: |port| four_letter(port, "ruok").as_deref() == Some("imok"),
    deadline: Duration::from_secs(60),
    poll: Duration::from_millis(50),
};

/// Send a four-letter command (`ruok`, `srvr`, `mntr`, `wchp`, ...: the servers allow them
/// all) to the server on loopback `port` and return the answer.
pub fn four_letter(port: u16, cmd: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(cmd.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

impl Zk {
    /// The configuration of member `i` of `layout`: standalone for a layout of one.
    fn config(&self, layout: &Layout, i: usize, data: &Path) -> String {
        let mut cfg = format!(
            "tickTime={ZK_TICK_MS}\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n4lw.commands.whitelist=*\nminSessionTimeout={}\n\
             maxSessionTimeout=60000\ninitLimit=10\nsyncLimit=5\npreAllocSize=1024\n\
             maxClientCnxns=0\n",
            data.display(),
            layout.listen(i, CLIENT),
            2 * ZK_TICK_MS
        );
        if layout.members() > 1 {
            for j in 0..layout.members() {
                // Itself where it binds; the others where their proxies are.
                let port =
                    |role| if j == i { layout.listen(j, role) } else { layout.reach(j, role) };
                let (q, e) = (port(QUORUM), port(ELECTION));
                cfg.push_str(&format!("server.{}=127.0.0.1:{q}:{e}\n", j + 1));
            }
        }
        cfg
    }
}

impl ClusterEngine for Zk {
    const LAUNCH: &'static Launch = &LAUNCH;
    const KIND: &'static str = "zk";
    const PORTS: &'static [&'static str] = &["client", "quorum", "election"];
    const FORMATION: Duration = Duration::from_secs(60);

    fn check(&self) -> Result<(), String> {
        match self.classpath.split(':').find(|jar| !Path::new(jar).exists()) {
            Some(jar) => Err(format!("ZooKeeper jar {jar} is missing: {INSTALL_HINT}")),
            None => Ok(()),
        }
    }

    fn command(&self, layout: &Layout, i: usize, dir: &Path, _: Start) -> Result<Command, String> {
        let data = dir.join("data");
        let cfg_path = dir.join("zoo.cfg");
        let written = std::fs::write(&cfg_path, self.config(layout, i, &data))
            // A wiped member gets its id again with its empty data directory.
            .and_then(|()| std::fs::write(data.join("myid"), format!("{}\n", i + 1)));
        written.map_err(|e| format!("write the configuration in {}: {e}", dir.display()))?;
        let mut cmd = Command::new("java");
        cmd.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-Dzookeeper.admin.enableServer=false")
            .args(["-cp", &self.classpath, "org.apache.zookeeper.server.quorum.QuorumPeerMain"])
            .arg(&cfg_path);
        Ok(cmd)
    }

    /// Rewrite the sender's own election address in the first message of an election
    /// connection to its election proxy (see [`ZkCluster`]).
    fn rewrite(&self, layout: &Layout, role: usize, first: &[u8]) -> Rewrite {
        if role == ELECTION {
            election_handshake(layout, first)
        } else {
            Rewrite::Keep
        }
    }

    fn leader(&self, cluster: &Cluster<Self>) -> Option<usize> {
        let followed_by_majority = |i: usize| {
            let port = cluster.direct_addr(i).port();
            let leads = four_letter(port, "srvr").is_some_and(|s| s.contains("Mode: leader"));
            let followers = || {
                let mntr = four_letter(port, "mntr")?;
                let line = mntr.lines().find(|l| l.starts_with("zk_synced_followers"))?;
                line.split_whitespace().nth(1)?.parse::<usize>().ok()
            };
            leads && followers().is_some_and(|f| f + 1 > cluster.len() / 2)
        };
        let mut leaders =
            (0..cluster.len()).filter(|&i| cluster.is_up(i) && followed_by_majority(i));
        let leader = leaders.next();
        leader.filter(|_| leaders.next().is_none())
    }
}

/// The election handshake of ZooKeeper 3.5+: protocol version (a negative `i64`), the
/// sender's id (`i64`), the length (`i32`) and text of its election address(es), big-endian.
/// The address becomes member `id - 1`'s election proxy.
fn election_handshake(layout: &Layout, first: &[u8]) -> Rewrite {
    let long = |at: usize| i64::from_be_bytes(first[at..at + 8].try_into().expect("8 bytes"));
    if first.len() < 20 {
        return Rewrite::More;
    }
    let len = i32::from_be_bytes(first[16..20].try_into().expect("4 bytes"));
    // A version >= 0 is the old handshake: the id alone, no address.
    let (Ok(len), true) = (usize::try_from(len), long(0) < 0) else { return Rewrite::Keep };
    if first.len() < 20 + len {
        return Rewrite::More;
    }
    let member = usize::try_from(long(8) - 1).ok().filter(|&m| m < layout.members());
    let Some(member) = member else { return Rewrite::Keep };
    let addr = format!("127.0.0.1:{}", layout.reach(member, ELECTION));
    let mut with = first[..16].to_vec();
    with.extend_from_slice(&i32::try_from(addr.len()).unwrap_or(0).to_be_bytes());
    with.extend_from_slice(addr.as_bytes());
    Rewrite::Replace { consumed: 20 + len, with }
}

impl Server<Zk> {
    /// `127.0.0.1:<port>`, as ZooKeeper clients take it.
    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Cluster<Zk> {
    /// The connect string of the ensemble (`127.0.0.1:<client proxy>,...`), as ZooKeeper
    /// clients take it.
    pub fn connect_string(&self) -> String {
        let hosts: Vec<String> = (0..self.len()).map(|i| self.client_addr(i).to_string()).collect();
        hosts.join(",")
    }
}

/// The test binary's ZooKeeper: started by the first call (which panics if it cannot be), then
/// the same one until the binary exits.
pub fn shared_zookeeper() -> &'static ZkServer {
    shared_zookeeper_with(|_| {})
}

/// [`shared_zookeeper`], with `prepare` run on the server once it answers and before anyone
/// gets it (a warm-up for a fresh JVM, say). Only the call that starts the server runs its
/// `prepare`, so a test binary should always call this one with the same `prepare`.
pub fn shared_zookeeper_with(prepare: fn(&ZkServer)) -> &'static ZkServer {
    static SERVER: OnceLock<ZkServer> = OnceLock::new();
    keep(&SERVER, "zookeeper-keeper", move || {
        let server = ZkServer::start();
        prepare(&server);
        server
    })
}
