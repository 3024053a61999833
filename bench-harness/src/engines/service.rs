//! The lock-service engine: the workspace's own lock service (`lock-service`), Raft-replicated,
//! with server-kept sessions and grants pushed to the waiter, in wall time.
//!
//! Each contender gets a client of its own ([`ServiceClient`]: one connection, one session
//! whose TTL is the run's, at least the service's minimum), as with etcd's leases and
//! ZooKeeper's sessions, or with `--sessions N` shares one of N (each owner still asking
//! under its own name within the session). Each `Open` counts as a session opened
//! (`store.sessions_opened`). Opening a run opens one probe session: an unreachable service fails
//! there, once, naming every endpoint and what it said. Every request a client sends is
//! counted under the table `service`: a grant costs an `Acquire` (a conditional write) and a
//! `Release` (a delete), and each session a `KeepAlive` every TTL/3.
//!
//! Options: `--service HOST:PORT[,…]` (or `LOCK_SERVICE_ENDPOINTS`) names a running service,
//! or `--spawn-service[=N]` starts one for each run, on free loopback ports, through the
//! cluster shape every clustered engine shares (`test_servers::Cluster`): one node by
//! default (its faults: contender faults and `server-restart`), or N nodes each behind
//! proxies of its own (the leader faults). The nodes are this very binary, run with its
//! hidden `lock-server` subcommand, so nothing needs building or installing first.
//!
//! Security: `--service-user USER`, its token in `LOCK_SERVICE_TOKEN` or
//! `--service-token-file`, authenticates every client, over TLS when `--service-ca` names the
//! CA of the nodes' certificates. With `--spawn-service` the harness starts the nodes secured:
//! certificates made for the run (a CA of its own), TLS to clients and mutual TLS between
//! nodes, and a users file holding USER (a client, not an admin). The `stranger` fault
//! connects with no credentials and force-releases every lock of the run: on an open service
//! anyone may, and the holder is told `Revoked`; on a secured one the stranger is refused.

use super::prelude::*;

use lock_core::tls::TlsFiles;
use lock_service::client::{ClientConfig, ServiceClient};
use test_servers::{LockService, ServiceServer, TestPki};

/// The engine.
pub struct Service;

/// The hidden subcommand that runs one node (`bench-harness lock-server --id …`).
pub const NODE_SUBCOMMAND: &str = "lock-server";

/// `--service`, `--service-ca`, `--spawn-service[=N]`, `--service-user` and
/// `--service-token-file`.
pub static FLAGS: ServerFlags = ServerFlags {
    algorithm: &SERVICE,
    sessions: Sharing::Shared(
        "one connection and one service session: when the session is lost, every owner on it loses its locks at once",
    ),
    address: AddressFlag::new(
        "HOST:PORT,...",
        "LOCK_SERVICE_ENDPOINTS",
        "The lock service's \
        nodes, HOST:PORT[,HOST:PORT...] (their client ports); the client finds the leader \
        among them.",
    )
    .each(Endpoint {
        valid: |e| !e.contains("://") && e.contains(':'),
        like: "HOST:PORT (a node's client port, no scheme)",
    }),
    tls: Some(TlsFlags {
        ca_help: "Speak TLS to --service, trusting the CA in this PEM file (the one that signed \
                  the nodes' certificates).",
        mutual: false,
    }),
    secures_clusters: true,
    run_line: RunLine {
        what: "lock service",
        ttl: "session TTL",
        ttl_of: session_ttl,
        user: "as user '{u}' over TLS",
    },
    login: LoginFlags {
        secret: SecretNames { name: "service", secret: "token", var: "LOCK_SERVICE_TOKEN" },
        heading: "lock service (--backend service)",
        user_help: "Authenticate every client as this user of the service, its token from the \
                environment variable LOCK_SERVICE_TOKEN or from --service-token-file (never on \
                the command line). With --spawn-service, the harness starts the nodes secured: \
                TLS with certificates of its own, mutual TLS between nodes, and a users file \
                holding this user.",
    },
    members: "NODES",
    spawn_help: "Start a lock service of the harness's own for each run, on free loopback ports, \
                 and stop it afterwards: one node (`--spawn-service`; it keeps its locks and \
                 sessions across `--faults server-restart:…`) or a cluster of NODES \
                 (`--spawn-service=3`; the leader faults `leader-kill`, `leader-pause`, \
                 `leader-cut`), each node behind proxies of its own.",
    cluster: |n| format!("a lock-service cluster of {n} nodes started by the harness"),
    one: "a lock-service node",
    examples: "
  bench-harness --backend service --spawn-service=3 --threads 64
      the lock service on a 3-node cluster the harness starts, each contender on a
      session of its own (--ttl: the session TTL)",
};

impl ServerEngine for Service {
    type Client = ServiceClient;
    type Options = ServerOnly;
    const FLAGS: &'static ServerFlags = &FLAGS;
}

/// The session TTL for a run's TTL: at least the service's minimum.
pub fn session_ttl(ttl: Duration) -> Duration {
    ttl.clamp(lock_service::server::MIN_TTL, lock_service::server::MAX_TTL)
}

impl Open for Service {
    async fn open<'a>(&'a self, options: ServerOnly, setup: EngineSetup<'a>) -> OpenResult {
        let credentials = FLAGS.credentials(&options.server)?;
        let secured = match (&credentials, options.server.spawn) {
            (Some(c), true) => Some(Arc::new(SecuredNodes::make(c)?)),
            _ => None,
        };
        let program = match &secured {
            Some(s) => node_program()?.with_args(&s.args()),
            None => node_program()?,
        };
        let tls = match &secured {
            Some(s) => Some(TlsFiles::trusting(s.pki.ca_file())),
            None => options.server.tls(),
        };
        let starts = Starts {
            cluster: program.clone(),
            cluster_address: |c| c.endpoints().join(","),
            one: move || Ok(SingleNode(ServiceServer::launch_node(program)?)),
            one_address: |n: &SingleNode| n.0.endpoint(),
        };
        let (endpoints, faults) =
            server::locate(&FLAGS, &options.server, &setup.fault_kinds, starts).await?;
        let connector = Connector {
            endpoints: ServiceClient::parse_endpoints(&endpoints),
            ttl: session_ttl(setup.settings.scaled(setup.settings.ttl)),
            credentials,
            tls,
            lock_ids: setup.lock_ids.clone(),
            _secured: secured,
        };
        Opened::probe(connector, setup.settings, faults).await
    }
}

/// How the harness runs a node: this binary with its hidden subcommand.
fn node_program() -> Result<LockService, String> {
    let exe = std::env::current_exe()
        .map_err(|e| format!("--spawn-service: cannot find the harness's own binary: {e}"))?;
    Ok(LockService::with_prefix(exe, &[NODE_SUBCOMMAND]))
}

/// What secured nodes the harness starts need for the run: a CA and certificates of the
/// run's own, and a users file holding `--service-user` (removed with the run).
struct SecuredNodes {
    pki: TestPki,
    users: std::path::PathBuf,
}

impl SecuredNodes {
    fn make(user: &Credentials) -> Result<SecuredNodes, String> {
        let pki = TestPki::new("bench-harness");
        let users = pki.dir().join("users");
        let line = format!(
            "{} client {}\n",
            user.user,
            lock_service::auth::token_hash(user.password.expose())
        );
        std::fs::write(&users, line)
            .map_err(|e| format!("--spawn-service: cannot write {}: {e}", users.display()))?;
        Ok(SecuredNodes { pki, users })
    }

    /// The nodes' arguments: TLS to clients and between nodes, and the users file.
    fn args(&self) -> Vec<String> {
        let path = |p: &std::path::Path| p.display().to_string();
        vec![
            "--users".into(),
            path(&self.users),
            "--tls-cert".into(),
            path(&self.pki.server().cert),
            "--tls-key".into(),
            path(&self.pki.server().key),
            "--tls-ca".into(),
            path(self.pki.ca_file()),
        ]
    }
}

/// One node the harness starts is reached straight at its port, as the single ZooKeeper and
/// etcd servers are: a cluster of one would put a proxy hop in front of every request and push.
/// A one-node service, which `--faults server-restart` kills and starts again (its client
/// port's proxy stays, so clients reconnect to the same address).
struct SingleNode(ServiceServer);

impl server_faults::Restartable for SingleNode {
    fn stop(&mut self) {
        self.0.stop();
    }
    fn start_again(&mut self) -> Result<(), String> {
        Ok(self.0.try_start_again()?)
    }
}

/// A contender's client (and session) on the service.
struct Connector {
    endpoints: Vec<String>,
    ttl: Duration,
    /// `--service-user` and its token.
    credentials: Option<Credentials>,
    /// The CA the clients trust, when the service speaks TLS.
    tls: Option<TlsFiles>,
    /// The run's lock ids (for the stranger).
    lock_ids: Vec<String>,
    /// The secured nodes' certificates and users file, kept as long as the run.
    _secured: Option<Arc<SecuredNodes>>,
}

impl Connect for Connector {
    type Engine = Service;

    /// A client on the service, or through `via` (a contender's proxy, which it then never
    /// leaves: a follower's hint would lead it around the proxy). The service reads no
    /// client's clock, so a clock jump changes nothing.
    async fn connect(&self, via: Via, requests: RequestHook) -> Connected<Self> {
        let endpoints = via.map_or_else(|| self.endpoints.clone(), |a| vec![a.to_string()]);
        let config = ClientConfig {
            ttl: self.ttl,
            follow_leader_hints: via.is_none(),
            requests,
            credentials: self.credentials.clone(),
            tls: self.tls.clone(),
            ..ClientConfig::default()
        };
        ServiceClient::connect(&endpoints, config).await.map_err(|e| {
            format!("cannot reach the lock service at {} (--service): {e}", endpoints.join(","))
        })
    }

    /// An acquire is a conditional write (it grants, queues or refuses), a release and a
    /// close delete, a keep-alive, an open and a resume write (the first two confirm the
    /// leader's lease with a quorum, the others commit).
    const OPENS_SESSION: Option<&'static str> = Some("Open");

    fn kind(request: &Request<'_>) -> Kind {
        match request.command {
            "Acquire" => Kind::Cas,
            "Release" | "Close" => Kind::Delete,
            "Status" => Kind::Read,
            _ => Kind::Write,
        }
    }

    /// The `stranger` fault: a client with no credentials (over TLS when the service speaks
    /// it: the stranger is on the network, not outside it) force-releases every lock of the
    /// run. An open service lets anyone; a secured one refuses the stranger at its hello.
    async fn stranger(&self) -> Result<String, String> {
        let config = ClientConfig { tls: self.tls.clone(), ..ClientConfig::default() };
        let client = match ServiceClient::connect(&self.endpoints, config).await {
            Ok(c) => c,
            Err(e) => return Ok(server_faults::stranger_outcome(0, Some(e.to_string()))),
        };
        let (mut taken, mut refused) = (0, None);
        for lock in &self.lock_ids {
            match client.force_release(lock).await {
                Ok(true) => taken += 1,
                Ok(false) => {}
                Err(e) => refused = Some(e.to_string()),
            }
        }
        let _ = client.close().await;
        Ok(server_faults::stranger_outcome(taken, refused))
    }
}

/// The lock service's lock.
pub static SERVICE: Algorithm = Algorithm {
    primitives: &[PrimitiveKind::Rw, PrimitiveKind::Semaphore, PrimitiveKind::Election],
    ..Algorithm::new(
        "service",
        "the lock service: Raft-replicated FIFO queue per lock, sessions kept by the leader, the grant pushed in the releasing commit",
    )
};

per_owner_client!(ServiceClient, rw: rw_locker, semaphore: semaphore, elector: elector);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ttls_are_within_the_service_range() {
        assert_eq!(session_ttl(Duration::from_millis(50)), lock_service::server::MIN_TTL);
        assert_eq!(session_ttl(Duration::from_secs(4)), Duration::from_secs(4));
    }
}
