//! The shape every server engine the harness can start shares: the user's server (`--X
//! HOST:PORT,...`, or its environment variable; `--X-ca` and, for mutual TLS, `--X-cert` and
//! `--X-key`), or `--spawn-X[=N]` (one server, or a cluster of N members whose leader the
//! cluster finds, `test_servers::ClusterEngine`), and the user its clients authenticate as
//! (`--X-user`, its secret in the environment or `--X-<secret>-file`).
//!
//! An engine describes these once in a [`ServerFlags`]; its options struct holds a [`Spawn`]
//! (flattened, so result files show `address`, `spawn`, `members`, `user`, `password_file` and
//! the TLS files beside its own fields; [`ServerOnly`] when it has no others) and says so in
//! [`super::Options::server_mut`]. From that alone come its flags, what they read into and the
//! checks on them, whether the command line points at it, its address for messages, the
//! options of the server the safety table starts, secures and clusters, its topology and its
//! fault kinds.

use super::algorithm::Algorithm;
pub use super::options::ServerOnly;
use super::options::{Login, Options, SecretNames, Sharing, Spawn};
use super::server_faults::{self, Managed, Restartable, ServerFaults, Via};
use crate::faults::FaultKind;
use clap::{Arg, ArgAction, ArgMatches, Command};
use lock_core::secret::Credentials;
use std::path::{Path, PathBuf};

/// The user of the secured server the safety table's "stranger (secured)" rows run on.
pub const SECURED_USER: &str = "bench-harness";

/// Who may log in to a server the harness starts when the run names no user (no `--X-user`):
/// what a stranger, a client with no credentials, finds there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnedLogin {
    /// Any client: the server admits everyone as it starts (Redis, ZooKeeper, etcd, the lock
    /// service).
    Open,
    /// Only a client with the password of one of its users: the server asks every client for
    /// one (PostgreSQL, MariaDB), so a stranger is refused even where no user is named.
    Password,
}

/// How many members a cluster the safety table starts has.
pub const CLUSTER_MEMBERS: u16 = 3;

/// How an engine names the flags of its user: `--<name>-user`, `--<name>-<secret>-file`.
#[derive(Debug, Clone, Copy)]
pub struct LoginFlags {
    /// The engine's name and its user's secret.
    pub secret: SecretNames,
    /// The help heading of the engine's flags.
    pub heading: &'static str,
    /// Help of `--<name>-user`.
    pub user_help: &'static str,
}

/// How the line that describes a run on a server engine reads: "etcd at ADDRESS, lease TTL
/// 2s, as user 'u'".
#[derive(Debug, Clone, Copy)]
pub struct RunLine {
    /// The engine: "etcd".
    pub what: &'static str,
    /// What the run's TTL is to it: "lease TTL".
    pub ttl: &'static str,
    /// The TTL it uses for the run's: etcd's whole seconds, the service's range.
    pub ttl_of: fn(std::time::Duration) -> std::time::Duration,
    /// How its user is named, "{u}" standing for the user: "as user '{u}'".
    pub user: &'static str,
}

/// How an engine names the user's server: `--<name> VALUE` (or the environment variable).
#[derive(Debug, Clone, Copy)]
pub struct AddressFlag {
    /// What the flag takes: "URL,...", "HOST:PORT,...".
    pub value_name: &'static str,
    /// The environment variable that may give it instead.
    pub env: &'static str,
    /// Where the engine looks without it; `None`: it must be given.
    pub default: Option<&'static str>,
    /// Its help.
    pub help: &'static str,
    /// What each of its comma-separated endpoints must be, when the engine checks them.
    pub endpoint: Option<Endpoint>,
}

impl AddressFlag {
    /// `--<name> VALUE` or the environment variable `env`, which must be given.
    pub const fn new(value_name: &'static str, env: &'static str, help: &'static str) -> Self {
        AddressFlag { value_name, env, default: None, help, endpoint: None }
    }

    /// The flag, with the address the engine looks at without it.
    pub const fn or(self, default: &'static str) -> Self {
        AddressFlag { default: Some(default), ..self }
    }

    /// The flag, each of its endpoints checked.
    pub const fn each(self, endpoint: Endpoint) -> Self {
        AddressFlag { endpoint: Some(endpoint), ..self }
    }
}

/// What an endpoint of `--<name>` must be.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    /// True when `endpoint` (trimmed, not empty) is one.
    pub valid: fn(&str) -> bool,
    /// What one is, for the error: "HOST:PORT (a node's client port, no scheme)".
    pub like: &'static str,
}

/// Whether the engine's clients can speak TLS to the user's server: `--<name>-ca FILE`, and
/// with `mutual`, `--<name>-cert FILE` and `--<name>-key FILE`.
#[derive(Debug, Clone, Copy)]
pub struct TlsFlags {
    /// Help of `--<name>-ca`.
    pub ca_help: &'static str,
    /// Whether the client can present a certificate of its own.
    pub mutual: bool,
}

/// What a server engine calls its shared flags and its servers, its algorithm, and what its
/// shared clients are.
#[derive(Debug, Clone, Copy)]
pub struct ServerFlags {
    /// Its algorithm (each contender's lock made by its client for its owner id).
    pub algorithm: &'static Algorithm,
    /// What contenders sharing one of its clients share (`--sessions N`).
    pub sessions: Sharing,
    /// `--<name>-user` and `--<name>-<secret>-file`; `--<name>` and `--spawn-<name>` take the
    /// same name.
    pub login: LoginFlags,
    /// `--<name>`: the user's server.
    pub address: AddressFlag,
    /// `--<name>-ca` (and the client's certificate), when its clients can speak TLS.
    pub tls: Option<TlsFlags>,
    /// Whether a cluster the harness starts can be secured by `--<name>-user` (else only one
    /// server it starts can, and the user's own cluster).
    pub secures_clusters: bool,
    /// How the line that describes a run names the engine, its TTL and its user.
    pub run_line: RunLine,
    /// What `--spawn-<name>=N` counts: "MEMBERS", "NODES".
    pub members: &'static str,
    /// Help of `--spawn-<name>`.
    pub spawn_help: &'static str,
    /// A cluster it starts, for messages: "an etcd cluster of {n} members started by the
    /// harness".
    pub cluster: fn(u16) -> String,
    /// One server it starts, for messages: "an etcd server".
    pub one: &'static str,
    /// Example command lines for `--help`, each with a line on what it does.
    pub examples: &'static str,
}

/// How long a contender's client may take to connect (a session or a lease established).
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(8);

/// A SQL object of the run's own (the fencing sequence or table): `bench_harness_` and the
/// run's namespace as lower-case letters, digits and `_`, at most 40 of them.
pub fn sql_name(namespace: &str) -> String {
    let tail: String = namespace
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .take(40)
        .collect();
    format!("bench_harness_{tail}")
}

/// The database and the credentials a SQL engine's clients log in with: the server's own when
/// the harness started it (`spawned`), otherwise the user's (`given`) and `database`, which
/// defaults to the user's name as the engines' own clients do (`anonymous` without a user).
fn sql_login(
    spawned: Option<(String, Credentials)>,
    given: Option<Credentials>,
    database: Option<String>,
    anonymous: &str,
) -> (String, Option<Credentials>) {
    match spawned {
        Some((db, who)) => (db, Some(who)),
        None => {
            let user = given.as_ref().map_or(anonymous, |c| c.user.as_str());
            (database.unwrap_or_else(|| user.to_string()), given)
        }
    }
}

/// The database and the credentials a SQL engine's clients log in with (those of the server
/// started for the run, else the user's, the database defaulting to the user's name), and the
/// administrator: the started server's superuser, or on the user's server the one `admin`
/// names (at `address`, where the clients go).
pub fn sql_login_and_admin(
    spawned: Option<SqlSpawned>,
    given: Option<Credentials>,
    admin: Option<Credentials>,
    database: Option<String>,
    anonymous: &str,
    address: &str,
) -> (String, Option<Credentials>, Option<Admin>) {
    let (started, admin) = match spawned {
        Some(s) => (Some((s.database, s.login)), Some(s.admin)),
        None => {
            let admin = admin.map(|credentials| Admin { address: address.into(), credentials });
            (None, admin)
        }
    };
    let (database, login) = sql_login(started, given, database, anonymous);
    (database, login, admin)
}

/// The administrator of a SQL server, for `--faults terminate`: where it logs in (the server
/// itself, not a pooler in front of it) and as whom.
#[derive(Clone)]
pub struct Admin {
    /// The server's `host:port`.
    pub address: String,
    /// Its user and password.
    pub credentials: Credentials,
}

/// What a SQL engine's server started for a run names: its database, the user its clients
/// log in as, and its administrator.
pub struct SqlSpawned {
    /// The database the clients use.
    pub database: String,
    /// The clients' user.
    pub login: Credentials,
    /// The server's superuser.
    pub admin: Admin,
}

/// The fault kinds of a SQL server (PostgreSQL, MariaDB): [`fault_kinds`], and `terminate` on
/// one server whose administrator can log in: the one the harness starts (its superuser), or
/// the user's when `admin` (`--<name>-admin-user`) is given.
pub fn sql_fault_kinds<O: Options>(options: &O, admin: bool) -> &'static [FaultKind] {
    match options.server() {
        Some(Spawn { members: None, spawn, .. }) if spawn || admin => {
            server_faults::kinds_with_terminate(spawn)
        }
        _ => fault_kinds(options),
    }
}

/// What a contender dials: the address the run found (the user's, or the servers the harness
/// started) and every client's configuration, built once when the engine opens; each
/// connection adds its own request hook.
pub struct Dial<C> {
    /// The server's address as its client takes it: endpoints, a connect string.
    pub address: String,
    /// Every contender's client configuration.
    pub config: C,
}

impl<C> Dial<C> {
    /// The address a contender dials: the server's, or its proxy `via` written as the client
    /// takes an address.
    pub fn target(&self, via: Via, proxied: impl FnOnce(std::net::SocketAddr) -> String) -> String {
        via.map_or_else(|| self.address.clone(), proxied)
    }
}

impl ServerFlags {
    /// Why a client could not connect to `address` within [`CONNECT_TIMEOUT`], having tried to
    /// do `what` ("grant a lease").
    pub fn unreachable(&self, address: &str, what: &str, e: impl std::fmt::Display) -> String {
        let name = self.name();
        format!(
            "cannot reach the {name} backend at {address} (--{name}; tried to {what} within {CONNECT_TIMEOUT:?}): {e}"
        )
    }
}

/// `s`, for clap, which keeps argument names for the life of the command.
fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

impl LoginFlags {
    fn user_id(&self) -> String {
        format!("{}_user", self.secret.name)
    }

    fn file_id(&self) -> String {
        format!("{}_{}_file", self.secret.name, self.secret.secret)
    }

    /// Adds `--<name>-user` and `--<name>-<secret>-file` to `cmd`.
    pub fn augment(&self, cmd: Command) -> Command {
        let (name, secret) = (self.secret.name, self.secret.secret);
        let user = Arg::new(leak(self.user_id()))
            .long(leak(format!("{name}-user")))
            .value_name("USER")
            .action(ArgAction::Set)
            .help(self.user_help);
        let file = Arg::new(leak(self.file_id()))
            .long(leak(format!("{name}-{secret}-file")))
            .value_name("FILE")
            .value_parser(clap::value_parser!(PathBuf))
            .requires(leak(self.user_id()))
            .help(leak(format!("A file whose first line is the {secret} of --{name}-user.")));
        cmd.arg(user.help_heading(self.heading)).arg(file.help_heading(self.heading))
    }

    /// What the user's flags say.
    pub fn read(&self, m: &ArgMatches) -> Login {
        Login {
            user: m.try_get_one::<String>(&self.user_id()).ok().flatten().cloned(),
            password_file: m.try_get_one::<PathBuf>(&self.file_id()).ok().flatten().cloned(),
        }
    }
}

impl ServerFlags {
    /// Its name, as `--backend` takes it and its flags are named: `--<name>`, `--spawn-<name>`.
    pub const fn name(&self) -> &'static str {
        self.login.secret.name
    }

    fn spawn_id(&self) -> String {
        format!("spawn_{}", self.name())
    }

    fn tls_id(&self, what: &str) -> String {
        format!("{}_{what}", self.name())
    }

    /// Adds `--<name>`, its TLS files, `--spawn-<name>[=N]`, `--<name>-user` and
    /// `--<name>-<secret>-file` to `cmd`.
    pub fn augment(&self, cmd: Command) -> Command {
        let (name, heading) = (self.name(), self.login.heading);
        let spawn_id = leak(self.spawn_id());
        let a = &self.address;
        let address = Arg::new(name)
            .long(name)
            .value_name(a.value_name)
            .env(a.env)
            .action(ArgAction::Set)
            .conflicts_with(spawn_id)
            .help(a.help);
        let spawn = Arg::new(spawn_id)
            .long(leak(format!("spawn-{name}")))
            .value_name(self.members)
            .num_args(0..=1)
            .require_equals(true)
            .default_missing_value("1")
            .value_parser(clap::value_parser!(u16).range(1..=9))
            .help(self.spawn_help);
        let mut cmd = cmd.arg(address.help_heading(heading)).arg(spawn.help_heading(heading));
        if let Some(tls) = &self.tls {
            cmd =
                cmd.args(self.tls_args(tls, spawn_id).into_iter().map(|a| a.help_heading(heading)));
        }
        self.login.augment(cmd)
    }

    /// `--<name>-ca`, and `--<name>-cert` and `--<name>-key` for mutual TLS.
    fn tls_args(&self, tls: &TlsFlags, spawn_id: &'static str) -> Vec<Arg> {
        let name = self.name();
        let file = |what: &str| {
            Arg::new(leak(self.tls_id(what)))
                .long(leak(format!("{name}-{what}")))
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .action(ArgAction::Set)
        };
        let ca = file("ca").conflicts_with(spawn_id).help(tls.ca_help);
        if !tls.mutual {
            return vec![ca];
        }
        let (ca_id, key_id, cert_id) = (self.tls_id("ca"), self.tls_id("key"), self.tls_id("cert"));
        let cert = file("cert")
            .requires(leak(ca_id))
            .requires(leak(key_id))
            .help("This client's certificate (PEM), for servers that ask for one (mutual TLS).");
        let key = file("key")
            .requires(leak(cert_id))
            .help(leak(format!("The key of --{name}-cert (PEM).")));
        vec![ca, cert, key]
    }

    /// True when the command line or the environment points at the engine (`--<name>` or
    /// `--spawn-<name>`).
    pub fn given(&self, m: &ArgMatches) -> bool {
        super::given(m, self.name()) || self.spawn_given(m)
    }

    /// True when `--spawn-<name>` was given.
    pub fn spawn_given(&self, m: &ArgMatches) -> bool {
        super::given(m, &self.spawn_id())
    }

    /// What the shared flags say, checked: a missing secret or an unreadable TLS file is a usage
    /// error naming the flag, before anything starts.
    pub fn read(&self, m: &ArgMatches) -> Result<Spawn, String> {
        let path =
            |what: &str| m.try_get_one::<PathBuf>(&self.tls_id(what)).ok().flatten().cloned();
        let members = m.try_get_one::<u16>(&self.spawn_id()).ok().flatten().copied();
        let address = m.try_get_one::<String>(self.name()).ok().flatten();
        let Login { user, password_file } = self.login.read(m);
        let server = Spawn {
            address: address.filter(|a| !a.trim().is_empty()).cloned(),
            spawn: members.is_some(),
            members: members.filter(|n| *n > 1),
            user,
            password_file,
            ca: path("ca"),
            cert: path("cert"),
            key: path("key"),
        };
        let name = self.name();
        if server.members.is_some() && server.user.is_some() && !self.secures_clusters {
            return Err(format!(
                "--{name}-user with --spawn-{name}=N: only a single server the harness starts can \
                 be secured by it (give --{name} for a secured cluster of yours)"
            ));
        }
        if let (Some(list), Some(endpoint)) = (&server.address, &self.address.endpoint) {
            let endpoints = list.split(',').map(str::trim).filter(|e| !e.is_empty());
            if let Some(bad) = endpoints.into_iter().find(|e| !(endpoint.valid)(e)) {
                return Err(format!("--{name}: {bad:?} is not {}", endpoint.like));
            }
        }
        self.credentials(&server)?;
        if let Some(tls) = server.tls() {
            tls.check().map_err(|e| format!("--{name}-ca/-cert/-key: {e}"))?;
        }
        Ok(server)
    }

    /// The credentials of `--<name>-user`, their secret read now.
    pub fn credentials(&self, server: &Spawn) -> Result<Option<Credentials>, String> {
        server.credentials(&self.login.secret)
    }

    /// The administrator `--<name>-admin-user` names (`login`) for `--faults terminate` on the
    /// user's server, its password read now from `--<name>-admin-password-file` or
    /// `LOCK_<NAME>_ADMIN_PASSWORD`; `None` without one. A usage error on a server the harness
    /// starts (its own superuser is the administrator there) and over TLS (the administrator's
    /// connection speaks none).
    pub fn admin(&self, server: &Spawn, login: &Login) -> Result<Option<Credentials>, String> {
        let name = self.name();
        let Some(user) = login.user.as_deref() else { return Ok(None) };
        if server.spawn {
            return Err(format!(
                "--{name}-admin-user names the administrator of your own server (--{name}): the \
                 server --spawn-{name} starts has its own superuser"
            ));
        }
        if server.ca.is_some() {
            return Err(format!(
                "--{name}-admin-user with --{name}-ca: the administrator's connection speaks no \
                 TLS; drop one of the two"
            ));
        }
        let var = format!("LOCK_{}_ADMIN_PASSWORD", name.to_ascii_uppercase());
        let file = login.password_file.as_deref();
        super::options::credentials(&format!("{name}-admin"), "password", Some(user), file, &var)
    }

    /// Where `server` is when the harness starts it; `None` for the user's own.
    pub fn started(&self, server: &Spawn) -> Option<String> {
        match (server.members, server.spawn) {
            (Some(n), _) => Some((self.cluster)(n)),
            (None, true) => Some(format!("{} started by the harness", self.one)),
            (None, false) => None,
        }
    }

    /// The user's server: `--<name>`, else the engine's default; `None` when neither is.
    pub fn users(&self, server: &Spawn) -> Option<String> {
        server.address.clone().or_else(|| self.address.default.map(str::to_string))
    }

    /// How to point at the engine, for `bench-harness list`: "--etcd URL,... (default
    /// http://127.0.0.1:2379) or --spawn-etcd[=MEMBERS]; wall time".
    pub fn about(&self) -> String {
        let (name, a) = (self.name(), &self.address);
        let default = a.default.map(|d| format!(" (default {d})")).unwrap_or_default();
        let spawn = format!("--spawn-{name}[={}]", self.members);
        format!("--{name} {}{default} or {spawn}; wall time", a.value_name)
    }

    /// The line that describes a run on `server` with TTL `ttl`.
    pub fn describe(&self, server: &Spawn, ttl: std::time::Duration) -> String {
        let RunLine { what, ttl: ttl_is, ttl_of, user } = self.run_line;
        let ttl = crate::dist::format_duration(ttl_of(ttl));
        let user = server.user.as_ref().map(|u| format!(", {}", user.replace("{u}", u)));
        format!("{what} at {}, {ttl_is} {ttl}{}", self.address(server), user.unwrap_or_default())
    }

    /// Where `server` is, for messages.
    pub fn address(&self, server: &Spawn) -> String {
        self.started(server)
            .or_else(|| self.users(server))
            .unwrap_or_else(|| format!("(no --{} given)", self.name()))
    }
}

/// How a server engine starts its servers for a run: a cluster of its [`ClusterEngine`], and
/// one server (which `--faults server-restart` restarts).
///
/// [`ClusterEngine`]: test_servers::ClusterEngine
pub struct Starts<E: test_servers::ClusterEngine, S, L> {
    /// The cluster's engine (`--spawn-X=N`).
    pub cluster: E,
    /// The client addresses of a cluster, as the engine's clients take them.
    pub cluster_address: fn(&test_servers::Cluster<E>) -> String,
    /// Starts one server (`--spawn-X`); blocking, so it runs off the runtime's threads.
    pub one: L,
    /// The client address of one server.
    pub one_address: fn(&S) -> String,
}

/// Where the run's server is, and the faults on it: a cluster the harness starts, one server
/// it starts (with a proxy per contender when `kinds` need them), or the user's (`--X`).
/// Errors name the option that asked for the server.
pub async fn locate<E, S, L>(
    flags: &ServerFlags,
    server: &Spawn,
    kinds: &[FaultKind],
    starts: Starts<E, S, L>,
) -> Result<(String, ServerFaults), String>
where
    E: test_servers::ClusterEngine,
    S: Restartable + 'static,
    L: FnOnce() -> Result<S, String> + Send + 'static,
{
    let name = flags.name();
    let option = match server.members {
        Some(n) => format!("--spawn-{name}={n}"),
        None => format!("--spawn-{name}"),
    };
    let (at, started) = match (server.members, server.spawn) {
        (Some(n), _) => {
            let members = n.into();
            return server_faults::start_cluster(
                &option,
                starts.cluster,
                members,
                starts.cluster_address,
            )
            .await;
        }
        (None, true) => {
            let (managed, at) = Managed::start(starts.one, starts.one_address)
                .await
                .map_err(|e| format!("{option}: {e}"))?;
            (at, Some(managed))
        }
        (None, false) => {
            let at = flags.users(server).ok_or_else(|| {
                format!("--backend {name} needs --{name} {} or {option}", flags.address.value_name)
            })?;
            (at, None)
        }
    };
    let faults = server_faults::on_one_server(&at, started, kinds).await?;
    Ok((at, faults))
}

/// The options of one server the harness starts, when the engine can start one.
pub fn spawned<O: Options>() -> Option<O> {
    let mut o = O::default();
    o.server_mut()?.spawn = true;
    Some(o)
}

/// `options` with its user the secured server's, its secret read from `password_file`.
pub fn secured<O: Options>(mut options: O, password_file: &Path) -> Option<O> {
    let (user, file) = (Some(SECURED_USER.into()), Some(password_file.into()));
    match options.server_mut() {
        Some(s) => (s.user, s.password_file) = (user, file),
        None => {
            let login = options.login_mut()?;
            (login.user, login.password_file) = (user, file);
        }
    }
    Some(options)
}

/// The options of a cluster the harness starts, when the engine can start one.
pub fn clustered<O: Options>() -> Option<O> {
    let mut o: O = spawned()?;
    o.server_mut()?.members = Some(CLUSTER_MEMBERS);
    Some(o)
}

/// "×N" for a cluster of N members, "" otherwise.
pub fn topology<O: Options>(options: &O) -> String {
    options.server().and_then(|s| s.members).map_or_else(String::new, |n| format!("×{n}"))
}

/// The faults on a server or cluster: the member faults on a cluster, the server restart on a
/// server the harness started.
pub fn fault_kinds<O: Options>(options: &O) -> &'static [FaultKind] {
    match options.server() {
        Some(Spawn { members: Some(_), .. }) => server_faults::cluster_kinds(),
        Some(s) => server_faults::kinds_with_stranger(s.spawn),
        None => &[],
    }
}
