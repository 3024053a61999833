//! The ZooKeeper engine: the seed's recipe (ephemeral sequential znodes, each waiter watching
//! its predecessor) on a real ZooKeeper server, in wall time.
//!
//! Opening a run establishes one probe session (an unreachable server fails here, once,
//! naming the hosts); each contender then gets a session of its own ([`ZkBackend`]) whose
//! timeout is the run's TTL, with its lock znodes under the run's own root
//! `/bench-harness/<ns>`.
//!
//! Store load: `lock-zookeeper` reports each request its contenders send (its crate docs,
//! "Requests per grant": 4 for an uncontended grant, 6 after waiting), counted under `znodes`
//! (`create` as a write, `delete` as a delete, `getChildren`, `getData` and `exists` as reads)
//! and `session` (each session's `connect` as a write, `closeSession` as a delete). The
//! client's own pings, which keep an idle session alive, are not seen and not counted (the
//! crate docs say how many it sends); a contender busy with requests sends none.
//!
//! Options: `--zookeeper host:port[,…]` (or `LOCK_ZOOKEEPER_HOSTS`), or `--spawn-zookeeper`:
//! the harness starts a ZooKeeper server of its own on a free loopback port for each run (the
//! Debian package's jars) and can then restart it (`--faults server-restart:…`). Faults:
//! [`super::server_faults`]; contender faults need a single host. `--zookeeper-user USER`,
//! its password in `LOCK_ZOOKEEPER_PASSWORD` or `--zookeeper-password-file`, authenticates
//! every session by digest and makes the lock's znodes creator-only; result files show the
//! user, never the password. `--zookeeper-ca FILE` (with `--zookeeper-cert` and
//! `--zookeeper-key` for mutual TLS) reaches the servers' `secureClientPort` over TLS; a
//! refused handshake ends the run with exit 1 and what was refused (lock-zookeeper's docs,
//! "TLS").

use super::prelude::*;
use clap::FromArgMatches as _;
use lock_core::tls::TlsFiles;
use lock_zookeeper::{ZkBackend, ZkConfig};

/// The engine.
pub struct Zookeeper;

/// Default connect string.
pub const DEFAULT_HOSTS: &str = "127.0.0.1:2181";
/// How long establishing a session may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(8);

/// The recipe of seed 004.
pub static RECIPE: Algorithm = Algorithm::new(
    "zookeeper",
    "ephemeral sequential znodes, each waiter watching its predecessor (seed 004)",
);

/// The algorithms on ZooKeeper.
static ALGORITHMS: [Entry<ZkBackend>; 1] = [Entry { algorithm: &RECIPE, build: build_recipe }];

/// Its command-line options besides the shared ones ([`FLAGS`]).
#[derive(clap::Args, Debug, Clone)]
#[group(id = "zookeeper-options")]
#[command(next_help_heading = "ZooKeeper (--backend zookeeper)")]
pub struct Args {
    /// ZooKeeper connect string, host:port[,host:port...] [default: 127.0.0.1:2181].
    #[arg(
        long,
        value_name = "HOST:PORT,...",
        env = "LOCK_ZOOKEEPER_HOSTS",
        conflicts_with = "spawn_zookeeper"
    )]
    pub zookeeper: Option<String>,
    /// Speak TLS to the servers of --zookeeper (their secureClientPort), trusting the CA
    /// certificates in this PEM file; each server's certificate must name the host dialled.
    #[arg(long, value_name = "FILE", conflicts_with = "spawn_zookeeper")]
    pub zookeeper_ca: Option<std::path::PathBuf>,
    /// This client's certificate (PEM), for servers with ssl.clientAuth=need (mutual TLS).
    #[arg(long, value_name = "FILE", requires_all = ["zookeeper_ca", "zookeeper_key"])]
    pub zookeeper_cert: Option<std::path::PathBuf>,
    /// The key of --zookeeper-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "zookeeper_cert")]
    pub zookeeper_key: Option<std::path::PathBuf>,
    /// Holders do not watch their own znodes: a request less per grant, and a holder whose
    /// znode another client deletes is not told (lock-zookeeper's ZkConfig::watch_holder).
    #[arg(long)]
    pub zookeeper_no_holder_watch: bool,
}

/// The environment variable that holds the password of `--zookeeper-user`.
pub const PASSWORD_VAR: &str = "LOCK_ZOOKEEPER_PASSWORD";

/// `--spawn-zookeeper[=N]`, `--zookeeper-user` and `--zookeeper-password-file`.
pub static FLAGS: ServerFlags = ServerFlags {
    login: LoginFlags {
        secret: SecretNames { name: "zookeeper", secret: "password", var: PASSWORD_VAR },
        heading: "ZooKeeper (--backend zookeeper)",
        user_help: "Authenticate every session as this digest user, its password from the \
                environment variable LOCK_ZOOKEEPER_PASSWORD or from --zookeeper-password-file \
                (never on the command line). The lock's znodes are then creator-only: no client \
                of another identity can list, delete or rewrite them (lock-zookeeper's docs, \
                \"Credentials and ACLs\").",
    },
    members: "MEMBERS",
    spawn_help: "Start ZooKeeper of the harness's own for each run (Debian's `zookeeper` \
                 package, on `java`), on free loopback ports, and stop it afterwards: one server \
                 (`--spawn-zookeeper`; needed for `--faults server-restart:…`, and it keeps its \
                 znodes and sessions across a restart) or an ensemble of MEMBERS \
                 (`--spawn-zookeeper=3`; needed for the leader faults `leader-kill`, \
                 `leader-pause`, `leader-cut`), each server behind proxies of its own.",
    cluster: |n| format!("a ZooKeeper ensemble of {n} servers started by the harness"),
    one: "a ZooKeeper server",
};

/// Its options, as result files show them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// The connect string (none: [`DEFAULT_HOSTS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zookeeper: Option<String>,
    /// A server or ensemble the harness starts, and the digest user.
    #[serde(flatten)]
    pub server: Spawn,
    /// Holders do not watch their own znodes (`--zookeeper-no-holder-watch`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_holder_watch: bool,
    /// TLS to the servers: the CA file (`--zookeeper-ca`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca: Option<std::path::PathBuf>,
    /// The client's certificate file, for mutual TLS (`--zookeeper-cert`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert: Option<std::path::PathBuf>,
    /// Its key file (`--zookeeper-key`): the path only, never the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<std::path::PathBuf>,
}

impl super::Options for Options {
    fn server_mut(&mut self) -> Option<&mut Spawn> {
        Some(&mut self.server)
    }
}

impl Options {
    fn hosts(&self) -> &str {
        self.zookeeper.as_deref().unwrap_or(DEFAULT_HOSTS)
    }

    /// TLS to the servers, when `--zookeeper-ca` is given.
    fn tls(&self) -> Option<TlsFiles> {
        let ca = self.ca.clone()?;
        Some(TlsFiles { ca: Some(ca), cert: self.cert.clone(), key: self.key.clone() })
    }

    /// The credentials of `--zookeeper-user`, their password read now.
    fn credentials(&self) -> Result<Option<Credentials>, String> {
        self.server.credentials(&FLAGS.login.secret)
    }
}

impl Describe for Zookeeper {
    const NAME: &'static str = "zookeeper";
    const ABOUT: &'static str = "--zookeeper host:port[,...] (default 127.0.0.1:2181); wall time";
    const HELP_EXAMPLES: &'static str = "
  bench-harness --backend zookeeper --zookeeper 127.0.0.1:2181 --threads 8
      the ZooKeeper recipe, each contender on its own session (--ttl: session timeout)";
    type Client = ZkBackend;
    const ENTRIES: &'static [Entry<ZkBackend>] = &ALGORITHMS;
}

impl ParseOptions for Zookeeper {
    type Options = Options;
    type Args = Args;
    const SERVER_FLAGS: Option<&'static ServerFlags> = Some(&FLAGS);
    const CONFIGURED_BY: &'static [&'static str] = &["zookeeper", "spawn_zookeeper"];

    fn parse(&self, m: &ArgMatches) -> Result<Options, String> {
        let a = Args::from_arg_matches(m).map_err(|e| e.to_string())?;
        let options = Options {
            zookeeper: a.zookeeper.filter(|h| !h.trim().is_empty()),
            server: FLAGS.read(m),
            no_holder_watch: a.zookeeper_no_holder_watch,
            ca: a.zookeeper_ca,
            cert: a.zookeeper_cert,
            key: a.zookeeper_key,
        };
        // Read once here so that a missing password or TLS file is a usage error before
        // anything starts.
        options.credentials()?;
        if let Some(tls) = options.tls() {
            tls.check().map_err(|e| format!("--zookeeper-ca/-cert/-key: {e}"))?;
        }
        Ok(options)
    }

    fn address(&self, o: &Options) -> String {
        FLAGS.started(&o.server).unwrap_or_else(|| o.hosts().to_string())
    }

    fn describe(&self, o: &Options, s: &AlgorithmSettings) -> String {
        format!(
            "zookeeper at {}, session timeout {}{}",
            self.address(o),
            crate::dist::format_duration(s.ttl),
            o.server.user.as_ref().map_or_else(String::new, |u| format!(
                ", as digest user '{u}' (creator-only ACLs)"
            ))
        )
    }
}

impl Open for Zookeeper {
    fn open<'a>(&'a self, options: Options, setup: EngineSetup<'a>) -> Opening<'a> {
        Box::pin(async move {
            let (hosts, faults) = match options.server.members {
                Some(n) => on_cluster(n).await?,
                None => on_server(&options, &setup.fault_kinds).await?,
            };
            let connector = Connector {
                hosts,
                namespace: setup.namespace.to_string(),
                session_timeout: setup.settings.scaled(setup.settings.ttl),
                credentials: options.credentials()?,
                watch_holder: !options.no_holder_watch,
                tls: options.tls(),
            };
            Opened::probe(connector, setup.settings, faults).await
        })
    }
}

/// An ensemble of `n` servers the harness starts (`--spawn-zookeeper=N`): its connect string,
/// and its faults (the leader faults among them).
async fn on_cluster(n: u16) -> Result<(String, ServerFaults), String> {
    let option = format!("--spawn-zookeeper={n}");
    server_faults::start_cluster(&option, test_servers::Zk::default(), n.into(), |c| {
        c.connect_string()
    })
    .await
}

/// The user's ZooKeeper (`--zookeeper`) or one server the harness starts
/// (`--spawn-zookeeper`), with a proxy per contender when `kinds` need them.
async fn on_server(
    options: &Options,
    kinds: &[FaultKind],
) -> Result<(String, ServerFaults), String> {
    let (hosts, server) = if options.server.spawn {
        let (server, hosts) =
            Managed::start(|| Ok(test_servers::ZkServer::launch()?), test_servers::ZkServer::hosts)
                .await
                .map_err(|e| format!("--spawn-zookeeper: {e}"))?;
        (hosts, Some(server))
    } else {
        (options.hosts().to_string(), None)
    };
    let faults = server_faults::on_one_server(&hosts, server, kinds).await?;
    Ok((hosts, faults))
}

/// A contender's session on the server, its timeout the run's TTL, znodes under the run's root.
struct Connector {
    /// The connect string.
    hosts: String,
    namespace: String,
    session_timeout: Duration,
    /// `--zookeeper-user` and its password.
    credentials: Option<Credentials>,
    /// Whether holders watch their own znodes.
    watch_holder: bool,
    /// `--zookeeper-ca` and the client's certificate.
    tls: Option<TlsFiles>,
}

impl Connect for Connector {
    type Engine = Zookeeper;

    /// A session on the server, or through `via` (a contender's proxy). The recipe reads no
    /// clock, so a clock jump changes nothing.
    fn connect(&self, via: Option<SocketAddr>, requests: RequestHook) -> Connecting<'_, Self> {
        Box::pin(self.connect_to(via, requests))
    }

    fn kind(request: &Request<'_>) -> Kind {
        match request.command {
            "create" | "connect" => Kind::Write,
            "delete" | "closeSession" => Kind::Delete,
            _ => Kind::Read,
        }
    }

    fn stranger(&self) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(self.stranger_strikes())
    }
}

impl Connector {
    /// The `stranger` fault: a session with no credentials (and over TLS no certificate)
    /// lists every lock directory of the run and deletes the first znode of each (the holder's: the lowest sequence number, the
    /// last ten digits of its name).
    async fn stranger_strikes(&self) -> Result<String, String> {
        let connector =
            zookeeper_client::Client::connector().with_session_timeout(Duration::from_secs(10));
        // Over TLS it trusts the servers' CA but has no certificate of its own.
        let client = match &self.tls {
            Some(tls) => {
                let options = lock_zookeeper::tls_options(&TlsFiles {
                    ca: tls.ca.clone(),
                    ..TlsFiles::default()
                })
                .map_err(|e| e.to_string())?;
                connector.with_tls(options).secure_connect(&self.hosts).await
            }
            None => connector.connect(&self.hosts).await,
        }
        .map_err(|e| format!("the stranger cannot reach ZooKeeper at {}: {e}", self.hosts))?;
        let root = format!("/bench-harness/{}", self.namespace);
        let (mut deleted, mut refused) = (0, None);
        let locks = match client.list_children(&root).await {
            Ok(locks) => locks,
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => return Ok(server_faults::stranger_outcome(0, Some(e.to_string()))),
        };
        for lock in locks {
            let dir = format!("{root}/{lock}");
            let mut queue = match client.list_children(&dir).await {
                Ok(children) => children,
                Err(e) => {
                    refused = Some(e);
                    continue;
                }
            };
            queue.sort_by_key(|n| n[n.len().saturating_sub(10)..].to_string());
            let Some(first) = queue.first() else { continue };
            match client.delete(&format!("{dir}/{first}"), None).await {
                Ok(()) => deleted += 1,
                Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => refused = Some(e),
            }
        }
        Ok(server_faults::stranger_outcome(deleted, refused.map(|e| e.to_string())))
    }
}

impl Connector {
    async fn connect_to(
        &self,
        via: Option<SocketAddr>,
        requests: RequestHook,
    ) -> Result<ZkBackend, String> {
        let hosts = via.map_or_else(|| self.hosts.clone(), |a| a.to_string());
        let config = ZkConfig {
            session_timeout: self.session_timeout,
            connect_timeout: CONNECT_TIMEOUT,
            root: format!("/bench-harness/{}", self.namespace),
            requests,
            credentials: self.credentials.clone(),
            watch_holder: self.watch_holder,
            tls: self.tls.clone(),
            ..ZkConfig::default()
        };
        ZkBackend::connect_with(&hosts, config)
            .await
            .map_err(|e| {
                format!(
                    "cannot reach the zookeeper backend at {hosts} (--zookeeper; tried to establish a session within {CONNECT_TIMEOUT:?}): {e}",
                )
            })
    }
}

/// The recipe on the contender's own session (whose timeout is the run's TTL).
fn build_recipe(backend: ZkBackend, ctx: ClientContext, _s: &AlgorithmSettings) -> BuildFuture {
    Box::pin(async move { Ok(Arc::new(backend.locker(&ctx.owner)?) as Arc<dyn Locker>) })
}
