//! Redis: a standalone `redis-server` ([`RedisServer`]), open or secured by ACL users
//! ([`RedisServer::start_secured`], [`AclUser`]) and over TLS ([`RedisServer::launch_tls`]), a
//! master with replicas watched by Sentinels, or independent masters for Redlock
//! ([`RedisCluster`]), all configured by [`Redis`].

use crate::cluster::{Cluster, ClusterEngine, ClusterOptions, Companion, Layout, Server, Start};
use crate::process::{keep, Launch};
use crate::tls::{CertFiles, TestPki};
use crate::{ServerError, INSTALL_HINT};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

/// The name the Sentinels of a [`RedisCluster`] know its master by.
pub const REDIS_MASTER_NAME: &str = "lockbench";
/// How long a Sentinel waits for an answer from an instance before it deems it down: a
/// killed, paused or cut-off master is failed over about this long after, plus a Sentinel
/// election (Redis's default is 30 s). Not less than 2 s: a Sentinel pings every
/// `min(this, 1 s)` and starts the clock of a new master's link when it switches to it, before
/// its first ping, so at 1 s a master promoted a moment ago was deemed down before it was
/// ever asked, and failed over again.
pub const SENTINEL_DOWN_AFTER_MS: u64 = 2000;
/// The Sentinels' failover timeout: how long a failover may take before another Sentinel
/// tries again (twice this), and how long replicas have to follow a new master.
pub const SENTINEL_FAILOVER_TIMEOUT_MS: u64 = 3000;

/// A `redis-server` child process on a free loopback port, with its own data directory; killed
/// on drop (and when the test binary exits). [`RedisServer::start`] runs it without
/// persistence (a restart forgets every key), [`RedisServer::start_persistent`] with an
/// append-only file synced on every write (a restart keeps them).
///
/// [`Server::stop`] and [`Server::start_again`] restart it on the same port with the same
/// directory, as a crash and a restart would.
pub type RedisServer = Server<Redis>;

/// Redis servers on loopback behind their proxies (see [`Cluster`]), in one of two shapes:
///
/// - **Sentinel** ([`RedisCluster::sentinel`]): member 0 starts as the master, the others as
///   its replicas (`replicaof` its client proxy), and Sentinels (the cluster's companions,
///   no proxies of their own) monitor it as [`REDIS_MASTER_NAME`] at its proxy. Each replica
///   announces its own proxy (`replica-announce-ip`/`-port`), so the master lists, and
///   the Sentinels learn, replicas at their proxies; replication runs from a replica to its
///   master's proxy, the address Sentinel monitors (Sentinel rewrites a replica that follows
///   any other address: `+fix-slave-config`). [`Cluster::leader`] is the member a majority
///   of Sentinels name (`SENTINEL get-master-addr-by-name`). Members run from a
///   configuration file, so that the `replicaof` a Sentinel gives them (and saves with
///   `CONFIG REWRITE`) survives their restarts, as on a real host.
///   [`Cluster::hold_link`]`(replica, master)` holds back the replication stream alone: the
///   window in which a master acknowledged a write its replicas have not seen.
/// - **Independent masters** ([`RedisCluster::masters`]), for Redlock: no replication, no
///   Sentinel, no leader.
pub type RedisCluster = Cluster<Redis>;

/// The Redis engine: persistence, how many Sentinels watch a cluster of it (0: its members
/// are independent masters), the ACL users of a secured server, and TLS.
#[derive(Clone, Debug)]
pub struct Redis {
    persistent: bool,
    sentinels: usize,
    /// Empty: the server is open (its default user needs no password). Otherwise the default
    /// user is off and these are the only ones ([`RedisServer::start_secured`]).
    users: Vec<AclUser>,
    /// Set: the server speaks TLS only ([`RedisServer::launch_tls`]).
    tls: Option<RedisTls>,
}

/// The TLS of a [`RedisServer::launch_tls`] server: the PEM texts of its certificate, key and
/// CA, and of the readiness probe's client certificate (written into the server's own
/// directory, so that the server does not depend on its [`TestPki`]'s life), and whether it
/// requires client certificates. `Debug` shows no key.
#[derive(Clone)]
struct RedisTls {
    ca: String,
    cert: String,
    key: String,
    probe_cert: String,
    probe_key: String,
    auth_clients: bool,
}

impl fmt::Debug for RedisTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTls").field("auth_clients", &self.auth_clients).finish_non_exhaustive()
    }
}

impl RedisTls {
    /// Write the files into `dir/tls` (keys readable by their owner alone) and return the
    /// configuration lines that use them, listening on `port` for TLS and on no plain port.
    fn write(&self, dir: &Path, port: u16) -> std::io::Result<(String, TlsProbe)> {
        let tls = dir.join("tls");
        std::fs::create_dir_all(&tls)?;
        let file = |name: &str, text: &str| -> std::io::Result<PathBuf> {
            let path = tls.join(name);
            write_private(&path, text)?;
            Ok(path)
        };
        let ca = file("ca.pem", &self.ca)?;
        let (cert, key) = (file("server.pem", &self.cert)?, file("server-key.pem", &self.key)?);
        let client =
            (file("probe.pem", &self.probe_cert)?, file("probe-key.pem", &self.probe_key)?);
        let probe = TlsProbe { ca: ca.clone(), client: Some(client) };
        let config = format!(
            "port 0\ntls-port {port}\ntls-cert-file {}\ntls-key-file {}\n\
             tls-ca-cert-file {}\ntls-auth-clients {}\n",
            cert.display(),
            key.display(),
            ca.display(),
            if self.auth_clients { "yes" } else { "optional" }
        );
        Ok((config, probe))
    }
}

/// What the readiness probe of a TLS server needs: the CA to trust, and a client certificate
/// and its key (a server with `tls-auth-clients yes` refuses a client without one).
#[derive(Clone, Debug)]
struct TlsProbe {
    ca: PathBuf,
    client: Option<(PathBuf, PathBuf)>,
}

/// The TLS probe of the server on each port (see [`probe_users`]). Entries are never removed:
/// the probe asks in plain text first, so a later plain server on the same port answers it.
fn probe_tls() -> &'static Mutex<BTreeMap<u16, TlsProbe>> {
    static PROBES: OnceLock<Mutex<BTreeMap<u16, TlsProbe>>> = OnceLock::new();
    PROBES.get_or_init(Mutex::default)
}

/// An ACL user of a secured [`RedisServer`]: a name, its ACL rules (`~lock:* -@all +get`),
/// and a password drawn at random when the test runs, so that no secret is ever committed.
/// `Debug` shows the password as `***`.
#[derive(Clone)]
pub struct AclUser {
    name: String,
    password: String,
    rules: String,
}

impl AclUser {
    /// User `name` with `rules` (Redis's ACL rules, as `ACL SETUSER` takes them, without
    /// `on` and the password: those are added) and a fresh random password.
    pub fn new(name: &str, rules: &str) -> AclUser {
        AclUser { name: name.to_string(), password: random_password(), rules: rules.to_string() }
    }

    /// User `name` with `rules` and the given `password` (a harness run's, read from where its
    /// user keeps it).
    pub fn with_password(name: &str, password: &str, rules: &str) -> AclUser {
        AclUser { name: name.to_string(), password: password.to_string(), rules: rules.to_string() }
    }

    /// The user name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The password (32 hex digits, drawn at random for this test run).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The ACL rules.
    pub fn rules(&self) -> &str {
        &self.rules
    }

    /// Its line in the server's configuration file.
    fn config_line(&self) -> String {
        format!("user {} on >{} {}\n", self.name, self.password, self.rules)
    }
}

impl fmt::Debug for AclUser {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AclUser")
            .field("name", &self.name)
            .field("password", &format_args!("***"))
            .field("rules", &self.rules)
            .finish()
    }
}

/// A password for a server a test or a harness run secures: 128 bits from the standard
/// library's randomly keyed hasher (no dependency): the keys are drawn from the OS once per
/// thread and stepped per `RandomState`.
pub fn random_password() -> String {
    use std::hash::{BuildHasher, RandomState};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let now = SystemTime::now();
    let (a, b) = (RandomState::new(), RandomState::new());
    format!("{:016x}{:016x}", a.hash_one((n, now)), b.hash_one((std::process::id(), n)))
}

/// The user the readiness probe of the secured server on each port authenticates as (the
/// probe is a plain function of the port, [`Launch::ready`]). Entries are never removed: a
/// later open server on the same port answers `PING` without asking for them.
fn probe_users() -> &'static Mutex<BTreeMap<u16, AclUser>> {
    static USERS: OnceLock<Mutex<BTreeMap<u16, AclUser>>> = OnceLock::new();
    USERS.get_or_init(Mutex::default)
}

const LAUNCH: Launch = Launch {
    program: "redis-server",
    missing: "redis-server is not installed (not on PATH)",
    package: Some("redis-server"),
    install: INSTALL_HINT,
    name: "redis-server",
    probe: "PING",
    log: "redis.log",
    log_on_timeout: false,
    ready: ping,
    deadline: Duration::from_secs(15),
    poll: Duration::from_millis(20),
};

const SENTINEL: Launch = Launch {
    program: "redis-sentinel",
    missing: "redis-sentinel is not installed (not on PATH; package redis-sentinel)",
    package: Some("redis-sentinel"),
    install: INSTALL_HINT,
    name: "Sentinel",
    probe: "PING",
    log: "sentinel.log",
    log_on_timeout: true,
    ready: ping,
    deadline: Duration::from_secs(15),
    poll: Duration::from_millis(20),
};

/// Whether the server on `port` answers `PING`; a secured one (`NOAUTH`) once its probe user
/// authenticates (its answer to `PING` itself may be a `NOPERM`: it answered); a TLS one (the
/// plain `PING` finds the connection closed) over TLS, through `redis-cli`.
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    match redis_call(addr, &["PING"]) {
        Ok(Reply::Status(s)) => s == "PONG",
        Ok(Reply::Error(e)) if e.starts_with("NOAUTH") => {
            let user = probe_users().lock().unwrap().get(&port).cloned();
            user.is_some_and(|u| match redis_call_as(addr, &u, &["PING"]) {
                Ok(Reply::Status(s)) => s == "PONG",
                Ok(Reply::Error(e)) => e.starts_with("NOPERM"),
                _ => false,
            })
        }
        Ok(_) => false,
        Err(_) => {
            let probe = probe_tls().lock().unwrap().get(&port).cloned();
            probe.is_some_and(|probe| tls_ping(port, &probe))
        }
    }
}

/// How long the TLS probe waits for `redis-cli` (which has no timeout of its own in Redis 7.0).
const TLS_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// `PING` over TLS with `redis-cli`, as the port's probe user if it has one (its password in
/// `REDISCLI_AUTH`, never on the command line): whether it answered `PONG` or `NOPERM`.
fn tls_ping(port: u16, probe: &TlsProbe) -> bool {
    let mut cmd = Command::new("redis-cli");
    cmd.arg("--tls").arg("--cacert").arg(&probe.ca);
    if let Some((cert, key)) = &probe.client {
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string(), "--no-auth-warning"]);
    if let Some(user) = probe_users().lock().unwrap().get(&port) {
        cmd.args(["--user", &user.name]).env("REDISCLI_AUTH", &user.password);
    }
    cmd.arg("PING").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    let Ok(mut child) = cmd.spawn() else { return false };
    let deadline = std::time::Instant::now() + TLS_PROBE_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
        }
    }
    let mut out = String::new();
    let _ = child.stdout.take().map(|mut o| std::io::Read::read_to_string(&mut o, &mut out));
    let out = out.trim();
    out == "PONG" || out.starts_with("NOPERM")
}

/// A Redis reply (RESP2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Status(String),
    /// `-ERR ...`.
    Error(String),
    /// `:1`.
    Int(i64),
    /// A bulk string (lossily UTF-8).
    Bulk(String),
    /// The null bulk string or array.
    Nil,
    /// An array.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text of a status or bulk reply.
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Bulk(s) => Some(s),
            _ => None,
        }
    }
}

/// Send one command to the Redis (or Sentinel) at `addr` on a connection of its own and read
/// its reply: a client with no dependencies, for probes and tests (2 s timeouts).
pub fn redis_call(addr: SocketAddr, args: &[&str]) -> std::io::Result<Reply> {
    let (mut s, mut r) = open(addr)?;
    send(&mut s, args)?;
    read_reply(&mut r)
}

/// [`redis_call`] as `user`: `AUTH` first, on the same connection. A refused `AUTH` is the
/// reply (`Reply::Error("WRONGPASS ...")`), and the command is not sent.
pub fn redis_call_as(addr: SocketAddr, user: &AclUser, args: &[&str]) -> std::io::Result<Reply> {
    let (mut s, mut r) = open(addr)?;
    send(&mut s, &["AUTH", &user.name, &user.password])?;
    match read_reply(&mut r)? {
        Reply::Status(ok) if ok == "OK" => {}
        refused => return Ok(refused),
    }
    send(&mut s, args)?;
    read_reply(&mut r)
}

fn open(addr: SocketAddr) -> std::io::Result<(TcpStream, BufReader<TcpStream>)> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let r = BufReader::new(s.try_clone()?);
    Ok((s, r))
}

fn send(s: &mut TcpStream, args: &[&str]) -> std::io::Result<()> {
    let mut request = format!("*{}\r\n", args.len());
    for a in args {
        request.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s.write_all(request.as_bytes())
}

fn read_reply(r: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let line = line.trim_end();
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, line.to_string());
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    let number = || rest.parse::<i64>().map_err(|_| bad());
    Ok(match kind {
        "+" => Reply::Status(rest.to_string()),
        "-" => Reply::Error(rest.to_string()),
        ":" => Reply::Int(number()?),
        "$" => match usize::try_from(number()?) {
            Err(_) => Reply::Nil,
            Ok(len) => {
                let mut buf = vec![0; len + 2];
                r.read_exact(&mut buf)?;
                Reply::Bulk(String::from_utf8_lossy(&buf[..len]).into_owned())
            }
        },
        "*" => match usize::try_from(number()?) {
            Err(_) => Reply::Nil,
            Ok(n) => Reply::Array((0..n).map(|_| read_reply(r)).collect::<Result<_, _>>()?),
        },
        _ => return Err(bad()),
    })
}

/// A flat array of field/value pairs (`SENTINEL master`, ...) as a map.
fn fields(reply: &Reply) -> BTreeMap<&str, &str> {
    let Reply::Array(items) = reply else { return BTreeMap::new() };
    let texts: Vec<&str> = items.iter().map(|i| i.text().unwrap_or("")).collect();
    texts.chunks(2).filter(|c| c.len() == 2).map(|c| (c[0], c[1])).collect()
}

impl Redis {
    /// Standalone servers or independent masters, with persistence (`appendonly yes`,
    /// `appendfsync always`: every acknowledged write survives a crash) or without (a restart
    /// forgets every key).
    pub fn masters(persistent: bool) -> Redis {
        Redis { persistent, sentinels: 0, users: Vec::new(), tls: None }
    }

    /// A master and replicas watched by `sentinels` Sentinels (a majority of them is the
    /// quorum that deems the master down), with or without persistence.
    pub fn sentinel(persistent: bool, sentinels: usize) -> Redis {
        Redis { persistent, sentinels, users: Vec::new(), tls: None }
    }

    /// Whether a member keeps its keys across a restart.
    pub fn is_persistent(&self) -> bool {
        self.persistent
    }

    /// How many Sentinels watch the cluster (0: independent masters).
    pub fn sentinels(&self) -> usize {
        self.sentinels
    }

    /// The ACL users of a secured server (empty: open).
    pub fn users(&self) -> &[AclUser] {
        &self.users
    }

    /// Whether it speaks TLS only ([`RedisServer::launch_tls`]).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The ACL part of member `i`'s configuration: the default user off and the users, whom
    /// the readiness probe of its port learns the first of.
    fn acl_config(&self, layout: &Layout, i: usize) -> String {
        let Some(first) = self.users.first() else { return String::new() };
        probe_users().lock().unwrap().insert(layout.listen(i, 0), first.clone());
        let mut cfg = "user default off\n".to_string();
        self.users.iter().for_each(|u| cfg.push_str(&u.config_line()));
        cfg
    }

    /// Member `i`'s configuration file (and, for TLS, the files it names, written into `dir`).
    fn config(&self, layout: &Layout, i: usize, dir: &Path) -> std::io::Result<String> {
        let port = layout.listen(i, 0);
        let listen = match &self.tls {
            None => format!("port {port}\n"),
            Some(tls) => {
                let (config, probe) = tls.write(dir, port)?;
                probe_tls().lock().unwrap().insert(port, probe);
                config
            }
        };
        let mut cfg = format!(
            "{listen}bind 127.0.0.1\nprotected-mode no\ndir {}\nsave \"\"\n\
             repl-diskless-sync-delay 0\n",
            dir.join("data").display()
        );
        cfg.push_str(match self.persistent {
            true => "appendonly yes\nappendfsync always\n",
            false => "appendonly no\n",
        });
        cfg.push_str(&self.acl_config(layout, i));
        if self.sentinels > 0 {
            let reach = layout.reach(i, 0);
            cfg.push_str(&format!(
                "replica-announce-ip 127.0.0.1\nreplica-announce-port {reach}\n"
            ));
            if i != 0 {
                cfg.push_str(&format!("replicaof 127.0.0.1 {}\n", layout.reach(0, 0)));
            }
        }
        Ok(cfg)
    }

    /// Sentinel `k`'s configuration file: it monitors member 0 at its proxy.
    fn sentinel_config(&self, layout: &Layout, port: u16, dir: &Path) -> String {
        let name = REDIS_MASTER_NAME;
        format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\n\
             sentinel monitor {name} 127.0.0.1 {} {}\n\
             sentinel down-after-milliseconds {name} {SENTINEL_DOWN_AFTER_MS}\n\
             sentinel failover-timeout {name} {SENTINEL_FAILOVER_TIMEOUT_MS}\n\
             sentinel parallel-syncs {name} 1\n",
            dir.display(),
            layout.reach(0, 0),
            self.sentinels / 2 + 1
        )
    }

    /// What every Sentinel must know before a failover can be relied on: the master, all its
    /// replicas and all the other Sentinels (they find each other through the master's hello
    /// channel, every 2 s); and every replica's link to the master up.
    fn sentinels_ready(&self, cluster: &Cluster<Self>) -> Result<(), ServerError> {
        let (replicas, others) = (cluster.len() - 1, self.sentinels - 1);
        for (k, addr) in cluster.companion_addrs().into_iter().enumerate() {
            let reply = redis_call(addr, &["SENTINEL", "master", REDIS_MASTER_NAME])
                .map_err(|e| ServerError::io(format!("Sentinel {k}"), e))?;
            let f = fields(&reply);
            let known = (f.get("num-slaves"), f.get("num-other-sentinels"));
            if known != (Some(&&*replicas.to_string()), Some(&&*others.to_string())) {
                let lacking = format!("Sentinel {k} knows {known:?} replicas and Sentinels");
                return Err(ServerError::NotReady(lacking));
            }
        }
        let nobody = || ServerError::NotReady("the Sentinels name no master".into());
        let master = cluster.leader().ok_or_else(nobody)?;
        for i in (0..cluster.len()).filter(|&i| i != master) {
            let info = redis_call(cluster.direct_addr(i), &["INFO", "replication"])
                .map_err(|e| ServerError::io(format!("member {i}"), e))?;
            if !info.text().is_some_and(|t| t.contains("master_link_status:up")) {
                let lacking = format!("replica {i} has not synchronised with its master");
                return Err(ServerError::NotReady(lacking));
            }
        }
        Ok(())
    }
}

/// Write `text` to `path`, readable by its owner alone: a secured server's configuration holds
/// its users' passwords (for the test's life; its directory is removed with the server).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(text.as_bytes())
}

impl ClusterEngine for Redis {
    const LAUNCH: &'static Launch = &LAUNCH;
    const KIND: &'static str = "redis";
    const PORTS: &'static [&'static str] = &["client"];
    const FORMATION: Duration = Duration::from_secs(30);

    /// A TLS server's readiness probe is `redis-cli` (Debian's `redis-tools`, which
    /// `redis-server` depends on): it must be there.
    fn check(&self) -> Result<(), ServerError> {
        if self.tls.is_none() {
            return Ok(());
        }
        match Command::new("redis-cli").arg("--version").stdout(Stdio::null()).status() {
            Ok(_) => Ok(()),
            Err(e) => Err(ServerError::NotInstalled {
                program: "redis-cli".into(),
                package: Some("redis-tools"),
                missing: format!(
                    "redis-cli is not installed ({e}; package redis-tools, needed to probe a TLS \
                     redis-server)"
                ),
                install: INSTALL_HINT,
                source: Some(e),
            }),
        }
    }

    fn command(
        &self,
        layout: &Layout,
        i: usize,
        dir: &Path,
        start: Start,
    ) -> Result<Command, ServerError> {
        let path = dir.join("redis.conf");
        // A member restarted without its data keeps its configuration, and with it the
        // `replicaof` a Sentinel gave it.
        if start == Start::New || !path.exists() {
            self.config(layout, i, dir)
                .and_then(|config| write_private(&path, &config))
                .map_err(|e| ServerError::io(format!("write {}", path.display()), e))?;
        }
        let mut cmd = Command::new("redis-server");
        cmd.arg(path);
        Ok(cmd)
    }

    /// The Sentinels, on fresh loopback ports, each in a directory of its own (a Sentinel
    /// rewrites its configuration file with what it learns).
    fn companions(&self, cluster: &Cluster<Self>) -> Result<Vec<Companion>, ServerError> {
        let ports = Layout::fresh_ports(self.sentinels, 1, &mut BTreeSet::new());
        let mut out = Vec::new();
        for (k, port) in ports.into_iter().flatten().enumerate() {
            let dir = cluster.root().join(format!("s{k}"));
            std::fs::create_dir_all(&dir)
                .map_err(|e| ServerError::io(format!("Sentinel {k}"), e))?;
            let path = dir.join("sentinel.conf");
            std::fs::write(&path, self.sentinel_config(cluster.layout(), port, &dir))
                .map_err(|e| ServerError::io(format!("write {}", path.display()), e))?;
            let mut command = Command::new("redis-sentinel");
            command.arg(&path);
            out.push(Companion {
                launch: &SENTINEL,
                label: format!("Sentinel {k}"),
                dir,
                port,
                command,
            });
        }
        Ok(out)
    }

    /// The member a majority of the Sentinels name as master; `None` for independent masters.
    fn leader(&self, cluster: &Cluster<Self>) -> Option<usize> {
        let mut votes: BTreeMap<u16, usize> = BTreeMap::new();
        for addr in cluster.companion_addrs() {
            let reply =
                redis_call(addr, &["SENTINEL", "get-master-addr-by-name", REDIS_MASTER_NAME]);
            if let Ok(Reply::Array(a)) = reply {
                if let Some(port) = a.get(1).and_then(Reply::text).and_then(|p| p.parse().ok()) {
                    *votes.entry(port).or_default() += 1;
                }
            }
        }
        let (port, _) = votes.into_iter().find(|(_, n)| *n > self.sentinels / 2)?;
        cluster.member_at(port)
    }

    fn formed(&self, cluster: &Cluster<Self>) -> Result<(), ServerError> {
        match self.sentinels {
            0 => Ok(()), // independent masters: every one answered
            _ => self.sentinels_ready(cluster),
        }
    }
}

impl Server<Redis> {
    /// Start a server without persistence (it answers `PING` within 15 s, on the third port at
    /// the latest), or panic saying why, or what to install.
    pub fn start() -> RedisServer {
        Self::launch(false).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RedisServer::start`] with persistence: `appendonly yes`, `appendfsync always`, so
    /// that every acknowledged write survives a crash and a restart (keys' expiry times
    /// included: they are absolute, so a TTL keeps running while the server is down).
    pub fn start_persistent() -> RedisServer {
        Self::launch(true).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RedisServer::start`] (`persistent: false`) or [`RedisServer::start_persistent`],
    /// returning why it could not start (what to install, when `redis-server` is missing)
    /// instead of panicking: for a benchmark binary.
    pub fn launch(persistent: bool) -> Result<RedisServer, ServerError> {
        Server::launch_engine(Redis::masters(persistent))
    }

    /// A server without persistence whose default user is off and whose only users are
    /// `users` (at least one; each `user <name> on ><password> <rules>` in its configuration
    /// file): a client must authenticate as one of them, and may do what its rules allow.
    /// Its readiness probe authenticates as the first. Panics saying why it could not start,
    /// or what to install.
    pub fn start_secured(users: &[AclUser]) -> RedisServer {
        Self::launch_secured(users).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RedisServer::start_secured`], returning why it could not start instead of
    /// panicking.
    pub fn launch_secured(users: &[AclUser]) -> Result<RedisServer, ServerError> {
        Self::launch_secured_with(false, users)
    }

    /// [`RedisServer::launch_secured`], with an append-only file synced on every write when
    /// `persistent` (as [`RedisServer::start_persistent`]).
    pub fn launch_secured_with(
        persistent: bool,
        users: &[AclUser],
    ) -> Result<RedisServer, ServerError> {
        if users.is_empty() {
            let why = "a secured redis-server needs at least one ACL user";
            return Err(ServerError::Invalid(why.into()));
        }
        Server::launch_engine(Redis { users: users.to_vec(), ..Redis::masters(persistent) })
    }

    /// A server without persistence that speaks only TLS: `tls-port` on a free loopback port
    /// and `port 0`, with `pki`'s server certificate (valid for
    /// [`LOOPBACK_NAMES`](crate::LOOPBACK_NAMES)) and its CA as the one that client
    /// certificates must be signed by; `tls-auth-clients yes` when `auth_clients` (a client
    /// without a certificate of `pki` is refused), `optional` otherwise (a client may present
    /// one, and without one is accepted). With `users` (may be empty: the default user is then
    /// open), secured as [`RedisServer::launch_secured`]. The files are copied into the
    /// server's directory: `pki` may be dropped before the server. Its readiness probe speaks
    /// TLS through `redis-cli`, with a client certificate of `pki`. [`RedisServer::url`] is
    /// `rediss://127.0.0.1:<port>/`. Returns why it could not start (what to install, when
    /// `redis-server` or `redis-cli` is missing; a `redis-server` built without TLS exits
    /// on the `tls-port` directive, and its log says so).
    pub fn launch_tls(
        pki: &TestPki,
        auth_clients: bool,
        users: &[AclUser],
    ) -> Result<RedisServer, ServerError> {
        Self::launch_tls_as(pki, pki.server(), auth_clients, users)
    }

    /// [`RedisServer::launch_tls`] with `cert` as the server's certificate instead of `pki`'s
    /// server certificate: one of `pki` for another host (`pki.issue("elsewhere",
    /// "elsewhere", &["db.example.net"])`), which a client connecting to `127.0.0.1` must
    /// refuse. The readiness probe does not check the host name (`redis-cli` does not).
    pub fn launch_tls_as(
        pki: &TestPki,
        cert: &CertFiles,
        auth_clients: bool,
        users: &[AclUser],
    ) -> Result<RedisServer, ServerError> {
        let probe = pki.client("readiness-probe");
        let tls = RedisTls {
            ca: pki.ca_pem(),
            cert: cert.cert_pem(),
            key: cert.key_pem(),
            probe_cert: probe.cert_pem(),
            probe_key: probe.key_pem(),
            auth_clients,
        };
        let engine = Redis { users: users.to_vec(), tls: Some(tls), ..Redis::masters(false) };
        Server::launch_engine(engine)
    }

    /// [`RedisServer::launch_tls`], panicking with why it could not start (what to install).
    pub fn start_tls(pki: &TestPki, auth_clients: bool, users: &[AclUser]) -> RedisServer {
        Self::launch_tls(pki, auth_clients, users).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether it keeps its keys across a restart ([`RedisServer::start_persistent`]).
    pub fn is_persistent(&self) -> bool {
        self.engine().persistent
    }

    /// Whether it speaks only TLS ([`RedisServer::launch_tls`]).
    pub fn is_tls(&self) -> bool {
        self.engine().is_tls()
    }

    /// `redis` or, for a TLS server, `rediss`.
    fn scheme(&self) -> &'static str {
        if self.is_tls() {
            "rediss"
        } else {
            "redis"
        }
    }

    /// The ACL users of a secured server (empty for an open one).
    pub fn users(&self) -> &[AclUser] {
        &self.engine().users
    }

    /// `redis://<user>:<password>@127.0.0.1:<port>/` (`rediss://` for TLS): the URL form of
    /// credentials.
    pub fn url_as(&self, user: &AclUser) -> String {
        let scheme = self.scheme();
        format!("{scheme}://{}:{}@127.0.0.1:{}/", user.name, user.password, self.port)
    }

    /// `redis://127.0.0.1:<port>/`, or `rediss://127.0.0.1:<port>/` for a TLS server.
    pub fn url(&self) -> String {
        format!("{}://127.0.0.1:{}/", self.scheme(), self.port)
    }
}

impl Cluster<Redis> {
    /// Start a master, `replicas` replicas and `sentinels` Sentinels, without persistence,
    /// and wait until every Sentinel knows them all and every replica has synchronised (30 s
    /// at most), or panic saying why, or what to install: for tests; [`Cluster::launch`]
    /// with [`Redis::sentinel`] returns the error.
    pub fn sentinel(replicas: usize, sentinels: usize) -> RedisCluster {
        let options = ClusterOptions::new(1 + replicas);
        Cluster::launch(Redis::sentinel(false, sentinels), &options)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Start `n` independent masters (Redlock's), with or without persistence, or panic
    /// saying why, or what to install.
    pub fn masters(n: usize, persistent: bool) -> RedisCluster {
        Cluster::launch(Redis::masters(persistent), &ClusterOptions::new(n))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `redis://127.0.0.1:<client proxy>/` of every member.
    pub fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|i| format!("redis://{}/", self.client_addr(i))).collect()
    }

    /// The Sentinels' addresses (clients ask them for [`REDIS_MASTER_NAME`]'s master).
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.companion_addrs()
    }
}

/// The test binary's `redis-server`: started by the first call (which panics if it cannot
/// be), then the same one until the binary exits.
pub fn shared_redis() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    keep(&SERVER, "redis-server-keeper", RedisServer::start)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TLS server answers `PING` over TLS only, to a client of its CA, with a client
    /// certificate when it requires one, and as its ACL user when it has users.
    #[test]
    fn a_tls_server_speaks_only_tls_to_clients_of_its_ca() {
        let pki = TestPki::new("redis-unit");
        let user = AclUser::new("locker", "~* +@all");
        let required = RedisServer::start_tls(&pki, true, std::slice::from_ref(&user));
        assert!(required.is_tls());
        let port = required.port;
        assert_eq!(required.url(), format!("rediss://127.0.0.1:{port}/"));
        assert!(required.url_as(&user).starts_with("rediss://locker:"));
        assert!(redis_call(required.addr(), &["PING"]).is_err(), "a plain PING was answered");
        let client = pki.client("alice");
        let with_cert = TlsProbe {
            ca: pki.ca_file().to_path_buf(),
            client: Some((client.cert.clone(), client.key.clone())),
        };
        assert!(tls_ping(port, &with_cert), "a client with a certificate of the CA");
        let without = TlsProbe { ca: pki.ca_file().to_path_buf(), client: None };
        assert!(!tls_ping(port, &without), "a client without a certificate was answered");
        let stranger = TestPki::new("redis-unit-other");
        let other_ca = TlsProbe { ca: stranger.ca_file().to_path_buf(), ..with_cert.clone() };
        assert!(!tls_ping(port, &other_ca), "a client of another CA trusted the server");
        drop(required);

        // Optional client certificates, no users: a client without one is answered too.
        let optional = RedisServer::start_tls(&pki, false, &[]);
        assert!(tls_ping(optional.port, &without), "tls-auth-clients optional");
        assert!(tls_ping(optional.port, &with_cert));
    }
}
