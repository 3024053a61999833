//! ZooKeeper (the Debian package's jars on `java`): an ensemble ([`ZkCluster`]) or a
//! standalone server ([`ZkServer`]), both configured by [`Zk`]; a standalone server can serve
//! its clients over TLS ([`Server::start_tls`]), with or without client certificates.
//!
//! ## A TLS server, and its plain probe port
//! [`Server::start_tls`] starts ZooKeeper (3.8 in Debian 12) with a `secureClientPort`, which
//! only `NettyServerCnxnFactory` serves (`serverCnxnFactory`), and its certificate and CA as PEM
//! files (`ssl.keyStore.type=PEM`, `ssl.trustStore.type=PEM`, ZooKeeper 3.6 and later: the
//! key store is one file, the PKCS#8 key then the certificate, which the server's own
//! directory gets; no PKCS#12 store is needed). `ssl.clientAuth` is [`ZkClientAuth`]:
//! `need` (mutual TLS: a client without a certificate the CA signed is refused in the
//! handshake), `want` or `none`. The package's `zookeeper.jar` names Netty's buffer, common,
//! handler and transport jars in its manifest but not the codec and resolver jars that
//! netty-handler needs: a TLS server gets those too ([`ZK_TLS_JARS`]); without them it starts,
//! binds its secure port, and fails every connection with `NoClassDefFoundError:
//! io/netty/handler/codec/ByteToMessageDecoder` in its log.
//!
//! The TLS server's clients are given [`Server::hosts`] (and [`Server::addr`], its `port`),
//! the secure port, which speaks nothing but TLS: ZooKeeper closes a plain connection there
//! at its first bytes. The server also keeps a plain `clientPort` on loopback
//! ([`Server::plain_addr`]), for one reason: test-servers has no TLS client (no TLS library
//! among its dependencies), and the readiness probe and every four-letter word ([`four_letter`]:
//! `ruok`, `mntr`, `srvr`) are plain-text requests; ZooKeeper answers them on the secure
//! port only over TLS. A TLS-only server would need a TLS probe. The plain port is loopback
//! only, as every test server is, serves the same database, and is not what TLS tests measure:
//! a test must not hand it to the clients it measures.

use crate::cluster::{Cluster, ClusterEngine, Layout, Server, Start};
use crate::process::{free_port, keep, Launch};
use crate::proxy::Rewrite;
use crate::tls::{CertFiles, TestPki};
use crate::{ServerError, INSTALL_HINT};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The Debian package's jars; `ZOOKEEPER_CLASSPATH` overrides.
pub const ZK_DEFAULT_CLASSPATH: &str =
    "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";

/// The jars a TLS server needs beyond its classpath (Debian's `libnetty-java`, which the
/// `zookeeper` package installs): Netty's codec and resolver, which netty-handler needs and
/// `zookeeper.jar`'s manifest does not name (see the module docs).
pub const ZK_TLS_JARS: &str = "/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar";

/// The server's tick: session expiry is checked at this granularity, and the smallest session
/// timeout it grants is 2 ticks. In an ensemble it also paces Zab: a follower that hears
/// nothing from its leader for `syncLimit` (5) ticks, 1 s, drops it and elects another.
pub const ZK_TICK_MS: u64 = 200;

/// The longest a member looking for a leader waits before it asks its peers again.
const NOTIFICATION_MAX_MS: u64 = 1000;

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
/// not named. The ensemble has formed when a leader is named and every member serves
/// clients: a member that has not joined the quorum refuses sessions.
pub type ZkCluster = Cluster<Zk>;

/// The ZooKeeper engine: a server on `java` with the jars of the classpath (see
/// [`ZkCluster`]).
#[derive(Clone)]
pub struct Zk {
    classpath: String,
    /// TLS on the client port ([`Server::launch_tls`]): a standalone server only.
    tls: Option<ZkTls>,
}

impl Default for Zk {
    /// The classpath of `ZOOKEEPER_CLASSPATH`, or [`ZK_DEFAULT_CLASSPATH`].
    fn default() -> Zk {
        let classpath = std::env::var("ZOOKEEPER_CLASSPATH")
            .unwrap_or_else(|_| ZK_DEFAULT_CLASSPATH.to_string());
        Zk { classpath, tls: None }
    }
}

/// TLS on a ZooKeeper's client port ([`Server::launch_tls`]): the files it serves and trusts.
#[derive(Debug, Clone)]
pub struct ZkTls {
    /// The server's certificate and key (PEM; the key PKCS#8), which become its key store
    /// (`ssl.keyStore.location`, `ssl.keyStore.type=PEM`).
    pub server: CertFiles,
    /// The CA whose client certificates it accepts (`ssl.trustStore.location`,
    /// `ssl.trustStore.type=PEM`).
    pub ca: PathBuf,
    /// Whether a client must present a certificate (`ssl.clientAuth`).
    pub client_auth: ZkClientAuth,
}

impl ZkTls {
    /// `pki`'s server certificate (valid for 127.0.0.1 and localhost) and CA.
    pub fn from_pki(pki: &TestPki, client_auth: ZkClientAuth) -> ZkTls {
        ZkTls { server: pki.server().clone(), ca: pki.ca_file().to_path_buf(), client_auth }
    }
}

/// ZooKeeper's `ssl.clientAuth`: what it asks of a TLS client's certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZkClientAuth {
    /// Every client must present a certificate the CA signed (mutual TLS): one without is
    /// refused in the handshake (a `bad_certificate` alert; the server logs `Empty client
    /// certificate chain`). A client's certificate also gives its session an `x509` identity,
    /// its subject (e.g. `CN=alice`), which `auth` ACLs then include.
    Need,
    /// A client may present one; one without is served all the same.
    Want,
    /// No certificate is asked for.
    None,
}

impl ZkClientAuth {
    /// Its `ssl.clientAuth` value.
    pub fn value(self) -> &'static str {
        match self {
            ZkClientAuth::Need => "need",
            ZkClientAuth::Want => "want",
            ZkClientAuth::None => "none",
        }
    }
}

/// The plain probe port of each TLS server, by its secure port: where the readiness probe
/// (which only knows the client port, the secure one) asks `ruok`. Written by [`Zk::command`]
/// for every server it starts, plain ones too (which remove their port), so a port reused by
/// a later server never finds a stale entry.
fn plain_ports() -> std::sync::MutexGuard<'static, BTreeMap<u16, u16>> {
    static PORTS: OnceLock<Mutex<BTreeMap<u16, u16>>> = OnceLock::new();
    PORTS.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Where four-letter words reach the server whose client port is `port`: its plain probe
/// port if it is a TLS server, else `port` itself.
fn plain_port(port: u16) -> u16 {
    plain_ports().get(&port).copied().unwrap_or(port)
}

/// Whether the server on client port `port` is ready: `imok` to `ruok` (on its plain port),
/// and, for a TLS server, its secure port accepting connections too.
fn ready(port: u16) -> bool {
    let plain = plain_port(port);
    let ok = four_letter(plain, "ruok").as_deref() == Some("imok");
    ok && (plain == port
        || TcpStream::connect_timeout(
            &SocketAddr::from(([127, 0, 0, 1], port)),
            Duration::from_millis(500),
        )
        .is_ok())
}

/// Copy `from` into `dir` as `name`.
fn copy_into(dir: &Path, name: &str, from: &Path) -> Result<PathBuf, ServerError> {
    let to = dir.join(name);
    std::fs::copy(from, &to)
        .map_err(|e| ServerError::io(format!("copy {} to {}", from.display(), to.display()), e))?;
    Ok(to)
}

const LAUNCH: Launch = Launch {
    program: "java",
    missing: "java is not installed (not on PATH), ZooKeeper needs it",
    package: Some("zookeeper"),
    install: INSTALL_HINT,
    name: "ZooKeeper",
    probe: "ruok",
    log: "zookeeper.log",
    log_on_timeout: true,
    ready,
    deadline: Duration::from_secs(60),
    poll: Duration::from_millis(50),
};

/// Send a four-letter command (`ruok`, `srvr`, `mntr`, `wchp`, ...: the servers allow them
/// all) to the server on loopback `port` and return the answer. In plain text: a TLS server
/// answers on its plain probe port only ([`Server::plain_addr`]).
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

/// Where a TLS server's plain probe port is, and its key store and trust store.
struct TlsSetup {
    /// Its plain `clientPort` (see the module docs).
    plain: u16,
    /// The directory of its key store ([`KEY_STORE`]) and trust store ([`TRUST_STORE`]).
    files: PathBuf,
    client_auth: ZkClientAuth,
}

impl Zk {
    /// The configuration of member `i` of `layout`: standalone for a layout of one. A TLS
    /// server's client port is its `secureClientPort`, beside its plain probe port.
    fn config(&self, layout: &Layout, i: usize, data: &Path, tls: Option<&TlsSetup>) -> String {
        let client = layout.listen(i, CLIENT);
        let mut cfg = format!(
            "tickTime={ZK_TICK_MS}\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n4lw.commands.whitelist=*\nminSessionTimeout={}\n\
             maxSessionTimeout=60000\ninitLimit=10\nsyncLimit=5\npreAllocSize=1024\n\
             maxClientCnxns=0\n",
            data.display(),
            tls.map_or(client, |t| t.plain),
            2 * ZK_TICK_MS
        );
        if let Some(tls) = tls {
            cfg.push_str(&format!(
                "secureClientPort={client}\nsecureClientPortAddress=127.0.0.1\n\
                 serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 ssl.keyStore.location={}\nssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={}\nssl.trustStore.type=PEM\nssl.clientAuth={}\n",
                tls.files.join(KEY_STORE).display(),
                tls.files.join(TRUST_STORE).display(),
                tls.client_auth.value()
            ));
        }
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

/// The key store's file name in a TLS server's `tls` directory: its key, then its certificate.
const KEY_STORE: &str = "server-key-and-cert.pem";
/// The trust store's file name in a TLS server's `tls` directory: the CA's certificate.
const TRUST_STORE: &str = "ca.pem";

impl Zk {
    /// The classpath, with [`ZK_TLS_JARS`] for a TLS server.
    fn classpath(&self) -> String {
        match self.tls {
            Some(_) => format!("{}:{ZK_TLS_JARS}", self.classpath),
            None => self.classpath.clone(),
        }
    }

    /// Write a TLS server's key store and trust store into `dir/tls` (copies: the server does
    /// not depend on the [`TestPki`] outliving it) and return that directory.
    fn tls_files(&self, tls: &ZkTls, dir: &Path) -> Result<PathBuf, ServerError> {
        let files = dir.join("tls");
        std::fs::create_dir_all(&files)
            .map_err(|e| ServerError::io(format!("create {}", files.display()), e))?;
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .map_err(|e| ServerError::io(format!("read {}", p.display()), e))
        };
        // ZooKeeper's PEM key store is one file: the private key, then the certificate chain.
        let store = format!("{}{}", read(&tls.server.key)?, read(&tls.server.cert)?);
        let store_path = files.join(KEY_STORE);
        std::fs::write(&store_path, store)
            .map_err(|e| ServerError::io(format!("write {}", store_path.display()), e))?;
        copy_into(&files, TRUST_STORE, &tls.ca)?;
        Ok(files)
    }
}

impl ClusterEngine for Zk {
    const LAUNCH: &'static Launch = &LAUNCH;
    const KIND: &'static str = "zk";
    const PORTS: &'static [&'static str] = &["client", "quorum", "election"];
    const FORMATION: Duration = Duration::from_secs(60);

    fn check(&self) -> Result<(), ServerError> {
        match self.classpath().split(':').find(|jar| !Path::new(jar).exists()) {
            Some(jar) => Err(ServerError::NotInstalled {
                program: jar.to_string(),
                package: Some("zookeeper"),
                missing: format!("ZooKeeper jar {jar} is missing"),
                install: INSTALL_HINT,
                source: None,
            }),
            None => Ok(()),
        }
    }

    fn command(
        &self,
        layout: &Layout,
        i: usize,
        dir: &Path,
        _: Start,
    ) -> Result<Command, ServerError> {
        let data = dir.join("data");
        let cfg_path = dir.join("zoo.cfg");
        let listen = layout.listen(i, CLIENT);
        let tls = match &self.tls {
            None => {
                plain_ports().remove(&listen);
                None
            }
            Some(_) if layout.members() != 1 => {
                let why = "TLS on ZooKeeper's client port is for a standalone server";
                return Err(ServerError::Invalid(why.into()));
            }
            Some(tls) => {
                let setup = TlsSetup {
                    plain: free_port(),
                    files: self.tls_files(tls, dir)?,
                    client_auth: tls.client_auth,
                };
                plain_ports().insert(listen, setup.plain);
                Some(setup)
            }
        };
        let written = std::fs::write(&cfg_path, self.config(layout, i, &data, tls.as_ref()))
            // A wiped member gets its id again with its empty data directory.
            .and_then(|()| std::fs::write(data.join("myid"), format!("{}\n", i + 1)));
        let context = || format!("write the configuration in {}", dir.display());
        written.map_err(|e| ServerError::io(context(), e))?;
        let mut cmd = Command::new("java");
        cmd.args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")
            .arg("-Dzookeeper.admin.enableServer=false")
            // A member looking for a leader asks its peers again after a wait that doubles,
            // up to a minute by default: one that found no peer answering while the others
            // started (a loaded machine starts JVMs slowly) could sit out the ensemble it
            // then formed for that long. A second keeps it asking.
            .arg(format!("-Dzookeeper.fastleader.maxNotificationInterval={NOTIFICATION_MAX_MS}"))
            .args(["-cp", &self.classpath(), "org.apache.zookeeper.server.quorum.QuorumPeerMain"])
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

    /// A leader, and every member serving clients (`srvr` names its mode). A leader needs a
    /// majority only, and a member that has not yet joined it refuses every session: a test
    /// that reaches each member (the ensembles' warm-up does) would wait on it.
    fn formed(&self, cluster: &Cluster<Self>) -> Result<(), ServerError> {
        if self.leader(cluster).is_none() {
            return Err(ServerError::NotReady("no leader elected".into()));
        }
        let serving = |i: usize| {
            let port = cluster.direct_addr(i).port();
            four_letter(port, "srvr").is_some_and(|s| s.contains("Mode: "))
        };
        let idle: Vec<usize> = (0..cluster.len()).filter(|&i| !serving(i)).collect();
        if idle.is_empty() {
            return Ok(());
        }
        // What the idle members last logged (warnings and worse) says why, should the
        // deadline pass.
        let logs: Vec<String> = idle
            .iter()
            .map(|&i| {
                let tail = crate::process::log_tail(&cluster.dir(i).join(LAUNCH.log), 8);
                format!("member {i}'s log ends:\n{tail}")
            })
            .collect();
        Err(ServerError::NotReady(format!(
            "members {idle:?} not serving clients yet\n{}",
            logs.join("\n")
        )))
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
    /// `127.0.0.1:<port>`, as ZooKeeper clients take it: on a TLS server
    /// ([`Server::start_tls`]), its secure port.
    pub fn hosts(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Start a standalone server whose client port ([`Server::hosts`], [`Server::addr`])
    /// speaks TLS only, with `pki`'s server certificate (valid for 127.0.0.1 and localhost),
    /// trusting client certificates `pki` signed ([`TestPki::client`]) and asking for them as
    /// `client_auth` says. It also has a plain probe port on loopback (see the module docs,
    /// [`Server::plain_addr`]). Panics, saying why or what to install, if it cannot start.
    pub fn start_tls(pki: &TestPki, client_auth: ZkClientAuth) -> Self {
        Self::launch_tls(ZkTls::from_pki(pki, client_auth)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Server::start_tls`] with any certificate (one for another host name, to test that a
    /// client refuses it), returning why it could not start instead of panicking.
    pub fn launch_tls(tls: ZkTls) -> Result<Self, ServerError> {
        Server::launch_engine(Zk { tls: Some(tls), ..Zk::default() })
    }

    /// Its TLS settings, on a TLS server.
    pub fn tls(&self) -> Option<&ZkTls> {
        self.engine().tls.as_ref()
    }

    /// Where plain text reaches it, for [`four_letter`] words and probes: [`Server::addr`] on
    /// a server without TLS, the plain probe port on a TLS server. Not for the clients a TLS
    /// test measures.
    pub fn plain_addr(&self) -> SocketAddr {
        let port = if self.tls().is_some() { plain_port(self.port) } else { self.port };
        SocketAddr::from(([127, 0, 0, 1], port))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_server_serves_its_secure_port_only_in_tls_and_is_probed_on_its_plain_port() {
        let pki = TestPki::new("zk-unit");
        let mut server = ZkServer::start_tls(&pki, ZkClientAuth::Need);
        // The server has copies of its files: the PKI may go.
        drop(pki);
        assert_eq!(server.hosts(), format!("127.0.0.1:{}", server.port));
        assert_eq!(server.tls().map(|t| t.client_auth), Some(ZkClientAuth::Need));
        let plain = server.plain_addr();
        assert_ne!(plain, server.addr());
        let cfg = std::fs::read_to_string(server.dir().join("zoo.cfg")).unwrap();
        for line in [
            format!("secureClientPort={}", server.port),
            format!("clientPort={}", plain.port()),
            "ssl.keyStore.type=PEM".into(),
            "ssl.clientAuth=need".into(),
        ] {
            assert!(cfg.lines().any(|l| l == line), "{line} in {cfg}");
        }
        assert_eq!(four_letter(plain.port(), "ruok").as_deref(), Some("imok"));
        // The secure port answers no plain four-letter word.
        assert_ne!(four_letter(server.port, "ruok").as_deref(), Some("imok"));
        // A restart keeps the ports and TLS.
        server.restart_after(Duration::from_millis(100));
        assert_eq!(four_letter(plain.port(), "ruok").as_deref(), Some("imok"));
        assert_eq!(server.plain_addr(), plain);
        let log = std::fs::read_to_string(server.dir().join("zookeeper.log")).unwrap();
        assert!(!log.contains("NoClassDefFoundError"), "{log}");
        // A plain server's probe address is its client address.
        assert_eq!(shared_zookeeper().plain_addr(), shared_zookeeper().addr());
    }
}
