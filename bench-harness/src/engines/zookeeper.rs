//! The ZooKeeper engine: the seed's recipe (ephemeral sequential znodes, each waiter watching
//! its predecessor) on a real ZooKeeper server, in wall time.
//!
//! Opening a run establishes one probe session (an unreachable server fails here, once,
//! naming the hosts); each contender then gets a session of its own ([`ZkBackend`]), or with
//! `--sessions N` shares one of N, whose timeout is the run's TTL, with its lock znodes under
//! the run's own root `/bench-harness/<ns>`. Each session's `connect` counts as a session
//! opened (`store.sessions_opened`).
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

use lock_core::tls::TlsFiles;
use lock_zookeeper::{ZkBackend, ZkConfig};

/// The engine.
pub struct Zookeeper;

/// `--zookeeper`, its TLS files, `--spawn-zookeeper[=N]`, `--zookeeper-user` and
/// `--zookeeper-password-file`.
pub static FLAGS: ServerFlags = ServerFlags {
    algorithm: &RECIPE,
    sessions: Sharing::Shared(
        "one ZooKeeper session: when it expires, every owner on it loses its locks (its znodes) at once",
    ),
    address: AddressFlag::new(
        "HOST:PORT,...",
        "LOCK_ZOOKEEPER_HOSTS",
        "ZooKeeper connect \
        string, host:port[,host:port...] [default: 127.0.0.1:2181].",
    )
    .or("127.0.0.1:2181"),
    tls: Some(TlsFlags {
        ca_help: "Speak TLS to the servers of --zookeeper (their secureClientPort), trusting the \
                  CA certificates in this PEM file; each server's certificate must name the \
                  host dialled.",
        mutual: true,
    }),
    secures_clusters: true,
    run_line: RunLine {
        what: "zookeeper",
        ttl: "session timeout",
        ttl_of: |ttl| ttl,
        user: "as digest user '{u}' (creator-only ACLs)",
    },
    login: LoginFlags {
        secret: SecretNames {
            name: "zookeeper",
            secret: "password",
            var: "LOCK_ZOOKEEPER_PASSWORD",
        },
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
    examples: "
  bench-harness --backend zookeeper --zookeeper 127.0.0.1:2181 --threads 8
      the ZooKeeper recipe, each contender on its own session (--ttl: session timeout)",
};

impl ServerEngine for Zookeeper {
    type Client = ZkBackend;
    type Options = Options;
    const FLAGS: &'static ServerFlags = &FLAGS;
}

/// Its options: its command-line flags besides the shared ones ([`FLAGS`]), and what result
/// files show.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[group(id = "zookeeper-options")]
#[command(next_help_heading = "ZooKeeper (--backend zookeeper)")]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// A server or ensemble the harness starts, or the user's and how to reach it, and the
    /// digest user.
    #[arg(skip)]
    #[serde(flatten)]
    pub server: Spawn,
    /// Holders do not watch their own znodes: a request less per grant, and a holder whose
    /// znode another client deletes is not told (lock-zookeeper's ZkConfig::watch_holder).
    #[arg(long = "zookeeper-no-holder-watch")]
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub no_holder_watch: bool,
}

impl super::Options for Options {
    fn server_mut(&mut self) -> Option<&mut Spawn> {
        Some(&mut self.server)
    }
}

impl Open for Zookeeper {
    async fn open<'a>(&'a self, options: Options, setup: EngineSetup<'a>) -> OpenResult {
        let starts = Starts {
            cluster: test_servers::Zk::default(),
            cluster_address: test_servers::Cluster::connect_string,
            one: || Ok(test_servers::ZkServer::launch()?),
            one_address: test_servers::ZkServer::hosts,
        };
        let (hosts, faults) =
            server::locate(&FLAGS, &options.server, &setup.fault_kinds, starts).await?;
        let config = ZkConfig {
            session_timeout: setup.settings.scaled(setup.settings.ttl),
            connect_timeout: server::CONNECT_TIMEOUT,
            root: format!("/bench-harness/{}", setup.namespace),
            credentials: FLAGS.credentials(&options.server)?,
            watch_holder: !options.no_holder_watch,
            tls: options.server.tls(),
            ..ZkConfig::default()
        };
        let connector = Dial { address: hosts, config };
        Opened::probe(connector, setup.settings, faults).await
    }
}

impl Connect for Dial<ZkConfig> {
    type Engine = Zookeeper;

    /// A session on the server, or through `via` (a contender's proxy). The recipe reads no
    /// clock, so a clock jump changes nothing.
    async fn connect(&self, via: Via, requests: RequestHook) -> Connected<Self> {
        let hosts = self.target(via, |a| a.to_string());
        let session = ZkBackend::connect_with(&hosts, ZkConfig { requests, ..self.config.clone() });
        session.await.map_err(|e| FLAGS.unreachable(&hosts, "establish a session", e))
    }

    const OPENS_SESSION: Option<&'static str> = Some("connect");

    fn kind(request: &Request<'_>) -> Kind {
        match request.command {
            "create" | "connect" => Kind::Write,
            "delete" | "closeSession" => Kind::Delete,
            _ => Kind::Read,
        }
    }

    /// The `stranger` fault: a session with no credentials (and over TLS no certificate)
    /// lists every lock directory of the run and deletes the first znode of each (the holder's: the lowest sequence number, the
    /// last ten digits of its name).
    async fn stranger(&self) -> Result<String, String> {
        let connector =
            zookeeper_client::Client::connector().with_session_timeout(Duration::from_secs(10));
        // Over TLS it trusts the servers' CA but has no certificate of its own.
        let client = match &self.config.tls {
            Some(tls) => {
                let options = lock_zookeeper::tls_options(&TlsFiles {
                    ca: tls.ca.clone(),
                    ..TlsFiles::default()
                })
                .map_err(|e| e.to_string())?;
                connector.with_tls(options).secure_connect(&self.address).await
            }
            None => connector.connect(&self.address).await,
        }
        .map_err(|e| format!("the stranger cannot reach ZooKeeper at {}: {e}", self.address))?;
        let root = self.config.root.clone();
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

/// The recipe of seed 004.
pub static RECIPE: Algorithm = Algorithm {
    primitives: &[PrimitiveKind::Rw, PrimitiveKind::Semaphore, PrimitiveKind::Election],
    ..Algorithm::new(
        "zookeeper",
        "ephemeral sequential znodes, each waiter watching its predecessor (seed 004)",
    )
};

per_owner_client!(ZkBackend, rw: rw_locker, semaphore: semaphore, elector: elector);
