//! etcd: a cluster of members ([`EtcdCluster`]) or a server of one ([`EtcdServer`]), both
//! configured by [`Etcd`]; a server of one can be secured ([`Server::secure`]): users, roles
//! on key prefixes, authentication on; and it can serve its clients over TLS
//! ([`Server::start_tls`]), with or without client certificates.
//!
//! ## A TLS server, and its plain setup listener
//! [`Server::start_tls`] starts etcd with an `https://` client URL: `--cert-file`,
//! `--key-file`, and with `client_cert_auth` `--trusted-ca-file` and `--client-cert-auth`
//! (every client must present a certificate the CA signed; once authentication is on, etcd
//! takes a client without a token to be the user its certificate's common name names). The
//! files are copied into the server's own directory, so the server does not depend on the
//! [`TestPki`] outliving it (etcd reads its certificate again at every handshake).
//!
//! test-servers has no TLS client of its own (nor etcd's `etcdctl`, which Debian ships apart
//! from the server), so a TLS server also listens on a second, **plain** client URL on
//! loopback ([`Server::plain_addr`]). It serves the readiness probe (`GET /health`) and
//! [`Server::secure`]'s setup (users, roles, `auth enable` through the JSON gateway), and
//! [`etcd_post`] and [`etcd_token`] reach the server there. It is not what TLS tests
//! measure: their clients are given [`Server::endpoint`], the `https://` URL, whose listener
//! speaks nothing but TLS (a plain client there is refused), and a test must not hand out the
//! plain address. It is loopback-only, as every test server is.

use crate::cluster::{Cluster, ClusterEngine, Layout, Server, Start};
use crate::process::{free_port, keep, Launch};
use crate::tls::{CertFiles, TestPki};
use crate::{ServerError, INSTALL_HINT};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
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
    /// `--auth-token-ttl` in seconds, when not etcd's default (300).
    auth_token_ttl: Option<u32>,
    /// TLS on the client URL ([`Server::launch_tls`]): a server of one only.
    tls: Option<EtcdTls>,
}

/// TLS on an etcd's client URL ([`Server::launch_tls`]): the files etcd serves and trusts.
#[derive(Debug, Clone)]
pub struct EtcdTls {
    /// The server's certificate and key (`--cert-file`, `--key-file`).
    pub server: CertFiles,
    /// The CA whose client certificates etcd accepts (`--trusted-ca-file`), used only with
    /// `client_cert_auth` (etcd 3.4 asks every client for a certificate once it has a
    /// trusted CA file).
    pub ca: PathBuf,
    /// Whether every client must present a certificate signed by `ca` (`--client-cert-auth`);
    /// with authentication on, its common name is the user of a request without a token.
    pub client_cert_auth: bool,
}

impl EtcdTls {
    /// `pki`'s server certificate (valid for 127.0.0.1 and localhost) and CA.
    pub fn from_pki(pki: &TestPki, client_cert_auth: bool) -> EtcdTls {
        EtcdTls { server: pki.server().clone(), ca: pki.ca_file().to_path_buf(), client_cert_auth }
    }
}

/// The plain setup listener of each TLS server, by the port of its TLS client URL: where
/// [`healthy`] probes a TLS server (the launcher's readiness probe only knows the client
/// port). Written by [`Etcd::command`] for every server it starts, plain ones too (which
/// remove their port), so a port reused by a later server never finds a stale entry.
fn plain_ports() -> std::sync::MutexGuard<'static, BTreeMap<u16, u16>> {
    static PORTS: OnceLock<Mutex<BTreeMap<u16, u16>>> = OnceLock::new();
    PORTS.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Copy `from` into `dir` as `name`; the copy's path.
fn copy_into(dir: &Path, name: &str, from: &Path) -> Result<PathBuf, ServerError> {
    let to = dir.join(name);
    std::fs::copy(from, &to)
        .map_err(|e| ServerError::io(format!("copy {} to {}", from.display(), to.display()), e))?;
    Ok(to)
}

impl Etcd {
    /// This engine with authentication tokens that expire after `secs` seconds without use
    /// (etcd's `--auth-token-ttl`, 300 by default): for tests of clients that must
    /// authenticate again. Start a server of it with [`Server::launch_with`].
    pub fn with_auth_token_ttl(mut self, secs: u32) -> Etcd {
        self.auth_token_ttl = Some(secs);
        self
    }
}

const LAUNCH: Launch = Launch {
    program: "etcd",
    missing: "etcd is not installed (not on PATH)",
    package: Some("etcd-server"),
    install: INSTALL_HINT,
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
    http_as(port, method, path, body, None)
}

/// [`http`] with etcd's `Authorization` header carrying `token`, if any.
fn http_as(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let authorization = token.map(|t| format!("Authorization: {t}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         {authorization}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
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

/// [`etcd_post`] as the user whose `token` ([`etcd_token`]) it carries: on a server with
/// authentication on, every key-value and auth request needs one.
pub fn etcd_post_as(
    addr: SocketAddr,
    path: &str,
    json: &str,
    token: &str,
) -> std::io::Result<String> {
    http_as(addr.port(), "POST", path, json, Some(token))
}

/// A token for `user` from the etcd at `addr` (`/v3/auth/authenticate`), or etcd's refusal
/// ([`ServerError::Command`], with etcd's answer).
pub fn etcd_token(addr: SocketAddr, user: &str, password: &str) -> Result<String, ServerError> {
    let body = format!(r#"{{"name":{},"password":{}}}"#, json_quote(user), json_quote(password));
    let answer = etcd_post(addr, "/v3/auth/authenticate", &body).map_err(|e| {
        ServerError::io(format!("etcd at {addr} did not answer /v3/auth/authenticate"), e)
    })?;
    match json_str(&answer, "token") {
        Some(token) => Ok(token.to_string()),
        None => {
            Err(ServerError::command(format!("etcd at {addr} gave user '{user}' no token"), answer))
        }
    }
}

/// A user of a secured etcd ([`Server::secure`]): its name, its password, and the key prefix
/// its own role may read and write. `Debug` shows no password.
#[derive(Clone)]
pub struct EtcdUser {
    /// The user name (also its role's).
    pub name: String,
    /// Its password: made up by the test at run time, never committed.
    pub password: String,
    /// The keys its role grants READWRITE on: `[prefix, prefix with its last byte raised)`.
    pub prefix: String,
}

impl EtcdUser {
    /// `name`, with `password`, allowed `prefix`.
    pub fn new(name: &str, password: &str, prefix: &str) -> EtcdUser {
        EtcdUser { name: name.into(), password: password.into(), prefix: prefix.into() }
    }
}

impl std::fmt::Debug for EtcdUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdUser")
            .field("name", &self.name)
            .field("password", &"***")
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// Secure the etcd at `addr` through its JSON gateway: the `root` user with `root_password`
/// and the `root` role (etcd refuses to enable authentication without them), for each of
/// `users` a role of its name granting READWRITE on its prefix's range and the user in it,
/// then `/v3/auth/enable`. From then on etcd refuses key-value requests without a token
/// ([`etcd_token`], [`etcd_post_as`]); `GET /health`, `/v3/maintenance/status` and
/// `/v3/cluster/member/list` still answer without one (etcd 3.4), so the readiness and leader
/// probes work on a secured server, across restarts too (the users are in its data).
pub fn etcd_secure(
    addr: SocketAddr,
    root_password: &str,
    users: &[EtcdUser],
) -> Result<(), ServerError> {
    let root =
        EtcdUser { name: "root".into(), password: root_password.into(), prefix: String::new() };
    add_user(addr, &root, None)?;
    for user in users {
        let (key, end) = (b64(user.prefix.as_bytes()), b64(&prefix_end(user.prefix.as_bytes())));
        let perm = format!(r#"{{"permType":"READWRITE","key":"{key}","range_end":"{end}"}}"#);
        add_user(addr, user, Some(&perm))?;
    }
    gateway(addr, "/v3/auth/enable", "{}")
}

/// A user and the role of its name (granted `perm`, if any), the user in the role.
fn add_user(addr: SocketAddr, user: &EtcdUser, perm: Option<&str>) -> Result<(), ServerError> {
    let name = json_quote(&user.name);
    gateway(addr, "/v3/auth/role/add", &format!(r#"{{"name":{name}}}"#))?;
    if let Some(perm) = perm {
        gateway(addr, "/v3/auth/role/grant", &format!(r#"{{"name":{name},"perm":{perm}}}"#))?;
    }
    let password = json_quote(&user.password);
    gateway(addr, "/v3/auth/user/add", &format!(r#"{{"name":{name},"password":{password}}}"#))?;
    gateway(addr, "/v3/auth/user/grant", &format!(r#"{{"user":{name},"role":{name}}}"#))
}

/// POST `json` to `path` on `addr`; an error unless etcd answered with a header and no error.
fn gateway(addr: SocketAddr, path: &str, json: &str) -> Result<(), ServerError> {
    match etcd_post(addr, path, json) {
        Ok(a) if a.contains("\"header\"") && !a.contains("\"error\"") => Ok(()),
        Ok(a) => Err(ServerError::command(format!("etcd at {addr} refused {path}"), a)),
        Err(e) => Err(ServerError::io(format!("etcd at {addr} did not answer {path}"), e)),
    }
}

/// The first key after every key that starts with `prefix` (etcd's range end for a prefix);
/// `\0`, every key, for an empty prefix or one of `0xff` bytes only.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// `s` as a JSON string, quoted and escaped.
fn json_quote(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Standard base64 with padding, as the JSON gateway wants keys and values.
fn b64(bytes: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for k in 0..4 {
            out.push(if k <= chunk.len() {
                A[(n >> (18 - 6 * k) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
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
/// up and has a leader, so it can serve writes. A TLS server is asked on its plain setup
/// listener.
fn healthy(port: u16) -> bool {
    let port = plain_ports().get(&port).copied().unwrap_or(port);
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
    ) -> Result<Command, ServerError> {
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let cluster: Vec<String> =
            (0..layout.members()).map(|j| format!("m{j}={}", url(layout.reach(j, PEER)))).collect();
        // A member that lost its data joins the cluster that knows it (its id is still a
        // member's) instead of bootstrapping a new one.
        let state = if start == Start::Rejoin { "existing" } else { "new" };
        let mut cmd = Command::new("etcd");
        let (listen, reach) = (layout.listen(i, CLIENT), layout.reach(i, CLIENT));
        let (listen_urls, advertise) = match &self.tls {
            None => {
                plain_ports().remove(&listen);
                (url(listen), url(reach))
            }
            Some(tls) => {
                if layout.members() != 1 {
                    let why = "TLS on etcd's client URL is for a server of one";
                    return Err(ServerError::Invalid(why.into()));
                }
                let files = dir.join("tls");
                std::fs::create_dir_all(&files)
                    .map_err(|e| ServerError::io(format!("create {}", files.display()), e))?;
                cmd.arg("--cert-file")
                    .arg(copy_into(&files, "server.pem", &tls.server.cert)?)
                    .arg("--key-file")
                    .arg(copy_into(&files, "server-key.pem", &tls.server.key)?);
                if tls.client_cert_auth {
                    cmd.arg("--trusted-ca-file")
                        .arg(copy_into(&files, "ca.pem", &tls.ca)?)
                        .arg("--client-cert-auth");
                }
                let plain = free_port();
                plain_ports().insert(listen, plain);
                let https = format!("https://127.0.0.1:{listen}");
                (format!("{https},{}", url(plain)), format!("https://127.0.0.1:{reach}"))
            }
        };
        cmd.args(["--name", &format!("m{i}")])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &listen_urls])
            .args(["--advertise-client-urls", &advertise])
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
        if let Some(secs) = self.auth_token_ttl {
            cmd.args(["--auth-token", "simple", "--auth-token-ttl", &secs.to_string()]);
        }
        Ok(cmd)
    }

    /// Remove the member from the cluster and add it again with the same peer URL: a new
    /// member id, which may start with an empty log (`--initial-cluster-state existing`).
    fn forget(&self, cluster: &Cluster<Self>, member: usize) -> Result<(), ServerError> {
        // A member that joins checks the others' cluster version, and one still
        // "not_decided" (a cluster formed a moment ago) makes it refuse to start ("incompatible
        // with current running cluster": CI met it once). Wait for the version first.
        let decided = |j: usize| {
            http(cluster.direct_addr(j).port(), "GET", "/version", "")
                .is_ok_and(|v| v.contains("\"etcdcluster\"") && !v.contains("not_decided"))
        };
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while !(0..cluster.len()).filter(|&j| j != member && cluster.is_up(j)).all(decided) {
            if std::time::Instant::now() >= until {
                let why = "the etcd cluster did not decide its version within 10 s";
                return Err(ServerError::NotReady(why.into()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let peer_url = format!("http://127.0.0.1:{}", cluster.layout().reach(member, PEER));
        let ask = |path: &str, body: &str| {
            (0..cluster.len())
                .filter(|&j| j != member && cluster.is_up(j))
                .find_map(|j| etcd_post(cluster.direct_addr(j), path, body).ok())
                .ok_or_else(|| ServerError::Command {
                    what: format!("no etcd member answers {path}"),
                    answer: None,
                })
        };
        let list = ask("/v3/cluster/member/list", "{}")?;
        let id = member_id_of(&list, &peer_url).ok_or_else(|| {
            ServerError::command(format!("etcd lists no member at {peer_url}"), &list)
        })?;
        let removed = ask("/v3/cluster/member/remove", &format!(r#"{{"ID":"{id}"}}"#))?;
        if !removed.contains("\"members\"") {
            let what = format!("etcd did not remove member {member} ({id})");
            return Err(ServerError::command(what, removed));
        }
        let added = ask("/v3/cluster/member/add", &format!(r#"{{"peerURLs":["{peer_url}"]}}"#))?;
        if !added.contains("\"member\"") {
            return Err(ServerError::command(
                format!("etcd did not add member {member} again"),
                added,
            ));
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

    /// `http://127.0.0.1:<port>`, the client URL etcd clients take; `https://127.0.0.1:<port>`
    /// on a TLS server ([`Server::start_tls`]).
    pub fn endpoint(&self) -> String {
        let scheme = if self.engine().tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Start a server of `engine`'s configuration (e.g. [`Etcd::with_auth_token_ttl`]), as
    /// [`Server::launch`] does the default's.
    pub fn launch_with(engine: Etcd) -> Result<Self, ServerError> {
        Server::launch_engine(engine)
    }

    /// Start a server whose client URL ([`Server::endpoint`], `https://127.0.0.1:<port>`)
    /// speaks TLS with `pki`'s server certificate (valid for 127.0.0.1 and localhost) and,
    /// with `client_cert_auth`, takes only clients whose certificate `pki` signed
    /// (`--client-cert-auth`; [`TestPki::client`] makes one for a user). It also has a plain
    /// setup listener on loopback (see the module docs, [`Server::plain_addr`]). Panics,
    /// saying why or what to install, if it cannot start.
    pub fn start_tls(pki: &TestPki, client_cert_auth: bool) -> Self {
        Self::launch_tls(EtcdTls::from_pki(pki, client_cert_auth)).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Server::start_tls`] with any certificate (one for another host name, to test that a
    /// client refuses it), returning why it could not start instead of panicking.
    pub fn launch_tls(tls: EtcdTls) -> Result<Self, ServerError> {
        Server::launch_engine(Etcd { tls: Some(tls), ..Etcd::default() })
    }

    /// Its TLS settings, on a TLS server.
    pub fn tls(&self) -> Option<&EtcdTls> {
        self.engine().tls.as_ref()
    }

    /// Where plain HTTP reaches it, for setup and probes ([`etcd_post`], [`etcd_token`],
    /// [`Server::secure`]): [`Server::addr`] on a server without TLS, the plain setup listener
    /// on a TLS server. Not for the clients a test measures.
    pub fn plain_addr(&self) -> SocketAddr {
        let plain = plain_ports().get(&self.port).copied();
        let port = if self.engine().tls.is_some() { plain } else { None };
        SocketAddr::from(([127, 0, 0, 1], port.unwrap_or(self.port)))
    }

    /// Turn authentication on, with the `root` user and `users`, each allowed its own key
    /// prefix ([`etcd_secure`], through [`Server::plain_addr`]). Once only: a second call
    /// finds the users there and fails. On a TLS server with client certificates, a client
    /// whose certificate's common name is one of `users` is that user without a password.
    pub fn secure(&self, root_password: &str, users: &[EtcdUser]) -> Result<(), ServerError> {
        etcd_secure(self.plain_addr(), root_password, users)
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

/// A second `etcd` of the test binary, beside [`shared_etcd`]'s: started and given to
/// `prepare` (e.g. to [`Server::secure`] it) by the first call, which panics if either
/// fails; then the same one until the binary exits.
pub fn shared_etcd_with(prepare: fn(&EtcdServer)) -> &'static EtcdServer {
    static SERVER: OnceLock<EtcdServer> = OnceLock::new();
    keep(&SERVER, "etcd-keeper-2", move || {
        let server = EtcdServer::start();
        prepare(&server);
        server
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_go_to_the_gateway_in_base64_and_a_prefix_ends_after_its_last_byte() {
        assert_eq!(b64(b"/locks/"), "L2xvY2tzLw==");
        assert_eq!(b64(b"/locks0"), "L2xvY2tzMA==");
        assert_eq!(prefix_end(b"/locks/"), b"/locks0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b""), vec![0]);
        assert_eq!(json_quote("a\"b\\c"), r#""a\"b\\c""#);
    }

    #[test]
    fn a_tls_server_speaks_tls_on_its_endpoint_and_is_secured_through_its_plain_listener() {
        let pki = TestPki::new("etcd-unit");
        let server = EtcdServer::start_tls(&pki, true);
        // The server has copies of its files: the PKI may go.
        drop(pki);
        assert_eq!(server.endpoint(), format!("https://127.0.0.1:{}", server.port));
        assert!(server.tls().is_some_and(|t| t.client_cert_auth));
        let plain = server.plain_addr();
        assert_ne!(plain, server.addr());
        assert!(healthy(server.port), "probed on its plain listener");
        // The TLS listener answers no plain request.
        let refused = etcd_post(server.addr(), "/v3/maintenance/status", "{}");
        assert!(!refused.as_ref().is_ok_and(|a| a.contains("\"header\"")), "{refused:?}");
        let user = EtcdUser::new("locker", "locker-pw", "/secure/");
        server.secure("root-pw", std::slice::from_ref(&user)).unwrap();
        let range = r#"{"key":"L3NlY3VyZS8="}"#; // "/secure/"
        let anonymous = etcd_post(plain, "/v3/kv/range", range).unwrap();
        assert!(anonymous.contains("user name is empty"), "{anonymous}");
        let token = etcd_token(plain, "locker", "locker-pw").unwrap();
        let read = etcd_post_as(plain, "/v3/kv/range", range, &token).unwrap();
        assert!(read.contains("\"header\"") && !read.contains("error"), "{read}");
        // A plain server's setup address is its client address.
        assert_eq!(shared_etcd().plain_addr(), shared_etcd().addr());
    }
}
