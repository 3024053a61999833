//! The etcd engine: etcd's `concurrency.Mutex` (a key per waiter bound to a kept-alive lease,
//! each waiter watching its predecessor) on a real etcd server, in wall time.
//!
//! Opening a run grants one probe lease (an unreachable server fails here, once, naming the
//! endpoints); each contender then gets a backend of its own ([`EtcdBackend`]: a client and a
//! lease whose TTL is the run's, rounded up to whole seconds), or with `--sessions N` shares
//! one of N, with its keys under the run's own root `/bench-harness/<ns>`. Each `LeaseGrant`
//! counts as a session opened (`store.sessions_opened`).
//!
//! Store load: `lock-etcd` reports each RPC its contenders send (its crate docs, "Requests per
//! grant": 3 for an uncontended grant, 7 after waiting, and the leases' keep-alives), counted
//! under its service as the table (`kv`, `watch`, `lease`): `Txn` as a conditional write (it
//! creates our key only if it does not exist), `Range`, `Watch` and `LeaseTimeToLive` as reads,
//! `DeleteRange` and `LeaseRevoke` as deletes, `LeaseGrant` and each `LeaseKeepAlive` message
//! as writes. Each contender's connection costs a `Range` (the access check), a `LeaseGrant`
//! and the first `LeaseKeepAlive`.
//!
//! Options: `--etcd http://host:port[,…]` (or `LOCK_ETCD_ENDPOINTS`), or `--spawn-etcd`: the
//! harness starts a one-member etcd of its own on free loopback ports for each run (Debian's
//! `etcd-server`) and can then restart it (`--faults server-restart:…`). Faults:
//! [`super::server_faults`]; contender faults need a single endpoint. `--etcd-user USER`, its
//! password in `LOCK_ETCD_PASSWORD` or `--etcd-password-file`, authenticates every client;
//! with `--spawn-etcd` the harness first enables auth on the server it starts, with that user's
//! role granting READWRITE on `/bench-harness/` only (and a root password drawn at random).
//!
//! The engine is compiled in with the harness's `etcd` feature (`--features etcd`), because
//! the etcd client runs `protoc` when it is built and the default build needs nothing
//! installed.

use super::prelude::*;

use lock_etcd::{EtcdBackend, EtcdConfig};

/// The engine.
pub struct Etcd;

/// `--etcd`, `--spawn-etcd[=N]`, `--etcd-user` and `--etcd-password-file`.
pub static FLAGS: ServerFlags = ServerFlags {
    algorithm: &MUTEX,
    sessions: Sharing::Shared(
        "one client and one lease: when the lease ends, every owner on it loses its locks at once",
    ),
    address: AddressFlag::new(
        "URL,...",
        "LOCK_ETCD_ENDPOINTS",
        "etcd endpoints, \
        http://host:port[,http://host:port...] [default: http://127.0.0.1:2379].",
    )
    .or("http://127.0.0.1:2379")
    .each(Endpoint {
        valid: |e| {
            let authority = e.strip_prefix("http://").unwrap_or(e);
            !e.starts_with("https://") && authority.contains(':') && !authority.contains('/')
        },
        like: "an endpoint like http://127.0.0.1:2379 (plain http; host and port)",
    }),
    tls: None,
    secures_clusters: false,
    run_line: RunLine { what: "etcd", ttl: "lease TTL", ttl_of: lease_ttl, user: "as user '{u}'" },
    login: LoginFlags {
        secret: SecretNames { name: "etcd", secret: "password", var: "LOCK_ETCD_PASSWORD" },
        heading: "etcd (--backend etcd)",
        user_help:
            "Authenticate every client as this etcd user, its password from the environment \
                variable LOCK_ETCD_PASSWORD or from --etcd-password-file (never on the command \
                line). With --spawn-etcd, the harness enables auth on the server it starts, the \
                user's role covering the harness's keys only, so that a client without \
                credentials is refused.",
    },
    members: "MEMBERS",
    spawn_help: "Start an etcd of the harness's own for each run (Debian's `etcd-server` \
                 package), on free loopback ports, and stop it afterwards: one member \
                 (`--spawn-etcd`; needed for `--faults server-restart:…`, and it keeps its keys \
                 and leases across a restart) or a cluster of MEMBERS (`--spawn-etcd=3`; needed \
                 for the leader faults `leader-kill`, `leader-pause`, `leader-cut`), each member \
                 behind proxies of its own.",
    cluster: |n| format!("an etcd cluster of {n} members started by the harness"),
    one: "an etcd server",
    examples: "
  bench-harness --backend etcd --spawn-etcd --threads 8
      etcd's Mutex on an etcd the harness starts, each contender on its own lease
      (--ttl: the lease TTL, rounded up to whole seconds)",
};

impl ServerEngine for Etcd {
    type Client = EtcdBackend;
    type Options = ServerOnly;
    const FLAGS: &'static ServerFlags = &FLAGS;
}

/// The lease TTL for a run's TTL: whole seconds (etcd grants no less), at least 1.
pub fn lease_ttl(ttl: Duration) -> Duration {
    Duration::from_secs(ttl.as_secs_f64().ceil().max(1.0) as u64)
}

impl Open for Etcd {
    async fn open<'a>(&'a self, options: ServerOnly, setup: EngineSetup<'a>) -> OpenResult {
        let (endpoints, faults) = on_server(&options, &setup.fault_kinds).await?;
        let config = EtcdConfig {
            lease_ttl: lease_ttl(setup.settings.scaled(setup.settings.ttl)),
            connect_timeout: server::CONNECT_TIMEOUT,
            root: format!("/bench-harness/{}", setup.namespace),
            credentials: FLAGS.credentials(&options.server)?,
            ..EtcdConfig::default()
        };
        let connector = Dial { address: endpoints, config };
        Opened::probe(connector, setup.settings, faults).await
    }
}

/// The user's etcd (`--etcd`), or one server or a cluster the harness starts
/// (`--spawn-etcd[=N]`, the single server secured when a user is given).
async fn on_server(
    options: &ServerOnly,
    kinds: &[FaultKind],
) -> Result<(String, ServerFaults), String> {
    let user = FLAGS.credentials(&options.server)?;
    let one = move || {
        let server = test_servers::EtcdServer::launch()?;
        if let Some(c) = &user {
            let root = test_servers::random_password();
            let users =
                [test_servers::EtcdUser::new(&c.user, c.password.expose(), "/bench-harness/")];
            server.secure(&root, &users)?;
        }
        Ok(server)
    };
    let starts = Starts {
        cluster: test_servers::Etcd::default(),
        cluster_address: |c| c.endpoints().join(","),
        one,
        one_address: test_servers::EtcdServer::endpoint,
    };
    server::locate(&FLAGS, &options.server, kinds, starts).await
}

impl Connect for Dial<EtcdConfig> {
    type Engine = Etcd;

    /// A client and lease on the server, or through `via` (a contender's proxy). The Mutex
    /// reads no clock of its own, so a clock jump changes nothing.
    async fn connect(&self, via: Via, requests: RequestHook) -> Connected<Self> {
        let endpoints = self.target(via, |a| format!("http://{a}"));
        let lease =
            EtcdBackend::connect_with(&endpoints, EtcdConfig { requests, ..self.config.clone() });
        lease.await.map_err(|e| FLAGS.unreachable(&endpoints, "grant a lease", e))
    }

    const OPENS_SESSION: Option<&'static str> = Some("LeaseGrant");

    fn kind(request: &Request<'_>) -> Kind {
        match request.command {
            "Txn" => Kind::Cas,
            // LeaseTimeToLive: a holder whose key was deleted asks whether its lease stands.
            "Range" | "Watch" | "LeaseTimeToLive" => Kind::Read,
            "DeleteRange" | "LeaseRevoke" => Kind::Delete,
            _ => Kind::Write,
        }
    }

    /// The `stranger` fault: a client with no credentials reads every key under the run's root
    /// by create revision and deletes the first of each lock (the holder's).
    async fn stranger(&self) -> Result<String, String> {
        use etcd_client::{GetOptions, SortOrder, SortTarget};
        let list: Vec<&str> = self.address.split(',').map(str::trim).collect();
        let mut client = etcd_client::Client::connect(&list, None)
            .await
            .map_err(|e| format!("the stranger cannot reach etcd at {}: {e}", self.address))?;
        let root = format!("{}/", self.config.root);
        let first = GetOptions::new()
            .with_prefix()
            .with_keys_only()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let keys = match client.get(root.as_str(), Some(first)).await {
            Ok(answer) => answer.kvs().iter().map(|kv| kv.key().to_vec()).collect::<Vec<_>>(),
            Err(e) => return Ok(server_faults::stranger_outcome(0, Some(e.to_string()))),
        };
        // Keys are `<root><lock id>/<lease>-<n>`: the first seen of each lock id holds it.
        let mut seen = std::collections::BTreeSet::new();
        let (mut deleted, mut refused) = (0, None);
        for key in keys {
            let lock = key[root.len()..].split(|b| *b == b'/').next().unwrap_or_default().to_vec();
            if !seen.insert(lock) {
                continue;
            }
            match client.delete(key, None).await {
                Ok(answer) if answer.deleted() > 0 => deleted += 1,
                Ok(_) => {}
                Err(e) => refused = Some(e.to_string()),
            }
        }
        Ok(server_faults::stranger_outcome(deleted, refused))
    }
}

/// etcd's Mutex.
pub static MUTEX: Algorithm = Algorithm {
    primitives: &[PrimitiveKind::Rw, PrimitiveKind::Semaphore, PrimitiveKind::Election],
    ..Algorithm::new(
        "etcd",
        "etcd's concurrency.Mutex: a key per waiter on a kept-alive lease, each waiter watching its predecessor",
    )
};

per_owner_client!(EtcdBackend, rw: rw_locker, semaphore: semaphore, elector: elector);

/// The server `--spawn-etcd` starts, which `--faults server-restart` kills and starts again.
impl server_faults::Restartable for test_servers::EtcdServer {
    fn stop(&mut self) {
        test_servers::EtcdServer::stop(self);
    }
    fn start_again(&mut self) -> Result<(), String> {
        Ok(self.try_start_again()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ttls_are_whole_seconds() {
        assert_eq!(lease_ttl(Duration::from_millis(300)), Duration::from_secs(1));
        assert_eq!(lease_ttl(Duration::from_millis(1500)), Duration::from_secs(2));
        assert_eq!(lease_ttl(Duration::from_secs(4)), Duration::from_secs(4));
    }
}
