//! The Cassandra engine: the Cassandra-model algorithms on a real Cassandra / ScyllaDB cluster
//! through `lock_cassandra::CassandraStore` (the `scylla` driver), in wall time.
//!
//! Opening a run connects one driver session (an unreachable cluster fails here, naming the
//! contact points and what was tried), creates the lock tables if missing
//! ([`cell_model::TABLES`]) and starts the GlobalTime service when asked. Each contender gets a
//! [`CassandraClient`] on that session whose row keys carry the run's namespace as a prefix —
//! so runs never see each other's cells, nor an earlier run's tombstones — and whose requests
//! are counted by the harness ([`CountingStore`]: one per `CellStore` call, i.e. per CQL
//! request). Write timestamps come from the system clock plus the contender's skew.
//!
//! Options: `--nodes host:port[,…]` (or `LOCK_CASSANDRA_NODES`), `--keyspace` (or
//! `LOCK_CASSANDRA_KEYSPACE`); the replication of a keyspace created here and the local
//! datacenter come from `LOCK_CASSANDRA_REPLICATION` and `LOCK_CASSANDRA_LOCAL_DC` (see
//! `lock-cassandra`). Faults ([`super::server_faults`]): clock jumps (write timestamps), and
//! with `--node-stop CMD --node-start CMD` restarts of a node (`server-restart`).

use super::algorithm::{AlgorithmSettings, Entry};
use super::counting::{CountingStore, RequestCounter};
use super::server_faults::{self, Commanded, Managed, ServerFaults};
use super::{
    cell_model, About, Algorithm, BoxFuture, ContenderSpec, Contending, CounterHandle, Describe,
    EngineSetup, Injection, Open, OpenEngine, OpenResult, ParseOptions, Sharing,
};
use crate::faults::FaultKind;
use clap::{ArgMatches, FromArgMatches as _};
use lock_cassandra::{CassandraClient, CassandraConfig, CassandraStore};
use lock_core::time::{GlobalTimeService, LocalClock, PhysicalClock};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// The engine.
pub struct Cassandra;

/// Default contact point.
pub const DEFAULT_NODES: &str = "127.0.0.1:9042";

type Client = CountingStore<CassandraClient>;

/// The algorithms on Cassandra.
static ALGORITHMS: [Entry<Client>; 6] = cell_model::entries();

/// Its options: its command-line flags, and what result files show.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[group(id = "cassandra-options")]
#[command(next_help_heading = "Cassandra (--backend cassandra)")]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Cassandra/ScyllaDB contact points, host:port[,host:port...] [default: 127.0.0.1:9042].
    #[arg(long, value_name = "HOST:PORT,...", env = "LOCK_CASSANDRA_NODES", value_delimiter = ',')]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Cassandra keyspace of the lock tables (created if missing) [default: distributed_locks].
    #[arg(long, env = "LOCK_CASSANDRA_KEYSPACE")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyspace: Option<String>,
    /// A shell command that stops a node of the cluster (for `--faults server-restart:…`),
    /// e.g. 'nodetool -h 10.0.0.3 stopdaemon' or 'systemctl stop cassandra'; needs --node-start.
    #[arg(long, value_name = "CMD", requires = "node_start")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_stop: Option<String>,
    /// A shell command that starts the stopped node again and returns once it answers.
    #[arg(long, value_name = "CMD", requires = "node_stop")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_start: Option<String>,
    /// Where this process listens for queue-push's doorbell rings (UDP), host:port: an address
    /// the other processes of the run can reach [default: 127.0.0.1:0, any free loopback port].
    #[arg(long, value_name = "HOST:PORT")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doorbell_bind: Option<std::net::SocketAddr>,
}

impl super::Options for Options {}

impl Options {
    fn nodes(&self) -> Vec<String> {
        if self.nodes.is_empty() {
            vec![DEFAULT_NODES.to_string()]
        } else {
            self.nodes.clone()
        }
    }
}

/// The driver configuration of `o`: the contact points, the keyspace, and from the
/// environment the replication of a keyspace created here and the local datacenter (see
/// `lock_cassandra::config`).
pub fn driver_config(o: &Options) -> Result<CassandraConfig, String> {
    let nodes = o.nodes().join(",");
    let from_env = CassandraConfig::from_vars(|name| {
        if name == lock_cassandra::config::ENV_NODES {
            Some(nodes.clone())
        } else if name == lock_cassandra::config::ENV_KEYSPACE {
            o.keyspace.clone().or_else(|| std::env::var(name).ok())
        } else {
            std::env::var(name).ok()
        }
    })
    .map_err(|e| format!("invalid Cassandra settings: {}", e.0))?;
    from_env.ok_or_else(|| "no Cassandra contact points (--nodes)".to_string())
}

impl Describe for Cassandra {
    const ABOUT: About = About::new(
        "cassandra",
        "--nodes host:port[,...] (or LOCK_CASSANDRA_NODES; default 127.0.0.1:9042), --keyspace; wall time",
        Sharing::Refused(
            "every contender already shares the process's one driver session (a client is a handle on it with a cut-off switch of its own), so there is no session per contender to share",
        ),
    )
    .examples(
        "
  bench-harness --backend cassandra --nodes 10.0.0.1:9042,10.0.0.2:9042 --threads 16
      shadow, queue and bakery on a real Cassandra/ScyllaDB cluster (wall time;
      keyspace distributed_locks, created if missing; LOCK_CASSANDRA_NODES works too)
  bench-harness --backend cassandra --nodes 127.0.0.1:9042 --processes 4 --threads 64
      64 contenders spread over 4 worker processes of this program, one merged result",
    );
    type Client = Client;
    const ENTRIES: &'static [Entry<Client>] = &ALGORITHMS;
}

impl ParseOptions for Cassandra {
    type Options = Options;
    type Args = Options;
    const CONFIGURED_BY: &'static [&'static str] = &["nodes"];

    fn parse(&self, m: &ArgMatches) -> Result<Options, String> {
        let mut o = Options::from_arg_matches(m).map_err(|e| e.to_string())?;
        let given = o.nodes.iter().map(|n| n.trim()).filter(|n| !n.is_empty());
        let list = given.collect::<Vec<_>>().join(",");
        o.nodes = match list.as_str() {
            "" => Vec::new(),
            n => lock_cassandra::config::parse_nodes(n)
                .map_err(|e| format!("--nodes {n}: {}", e.0))?,
        };
        o.keyspace = o.keyspace.filter(|k| !k.trim().is_empty());
        driver_config(&o)?;
        Ok(o)
    }

    fn address(&self, o: &Options) -> String {
        o.nodes().join(",")
    }

    fn describe(&self, o: &Options, s: &AlgorithmSettings) -> String {
        format!(
            "cassandra at {} (keyspace {}), reads and writes at {}, TTL {}",
            o.nodes().join(","),
            driver_config(o).map(|c| c.keyspace).unwrap_or_else(|_| "?".into()),
            s.consistency,
            crate::dist::format_duration(s.ttl),
        )
    }

    fn fault_kinds(&self, o: &Options) -> &'static [FaultKind] {
        server_faults::kinds_without_proxies(o.node_stop.is_some() && o.node_start.is_some())
    }
}

impl Open for Cassandra {
    async fn open<'a>(&'a self, o: Options, setup: EngineSetup<'a>) -> OpenResult {
        let address = o.nodes().join(",");
        let store = CassandraStore::connect(driver_config(&o)?)
            .await
            .map_err(|e| format!("cannot reach the cassandra backend at {address}: {e}"))?;
        store.ensure_tables(&cell_model::TABLES).await.map_err(|e| {
            format!("cannot create the lock tables on the cassandra backend at {address}: {e}")
        })?;
        let counter = Arc::new(RequestCounter::default());
        let prefix = format!("{}/", setup.namespace);
        // One doorbell socket per process, for queue-push: its address goes into the
        // queue cells, so every process of the run can ring this one's waiters.
        let bind =
            o.doorbell_bind.unwrap_or_else(|| std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
        let bells: Arc<dyn lock_core::doorbell::Doorbell> =
            lock_core::doorbell::UdpDoorbells::bind(bind).await.map_err(|e| {
                format!("cannot bind queue-push's doorbell socket at {bind} (--doorbell-bind): {e}")
            })?;
        let client = |id: String| {
            CountingStore::new(
                store.client(id).with_row_prefix(prefix.clone()).with_doorbell(bells.clone()),
                counter.clone(),
            )
        };
        let s = setup.settings;
        let probe = client("time-service-probe".into());
        let service =
            cell_model::start_time_service(&s, &setup.service_skews, &probe, |i, skew| {
                let c = client(format!("time-service-{i}"));
                (c, LocalClock::new(PhysicalClock::System, skew))
            })
            .await?;
        counter.reset();
        let restart = match (o.node_stop, o.node_start) {
            (Some(stop), Some(start)) => Some(Managed::commanded(Commanded { stop, start })),
            _ => None,
        };
        Ok(Box::new(Opened {
            store,
            counter,
            prefix,
            settings: s,
            _time_service: service,
            faults: ServerFaults::new(None, restart),
            bells,
        }) as Box<dyn OpenEngine>)
    }
}

struct Opened {
    store: CassandraStore,
    counter: Arc<RequestCounter>,
    prefix: String,
    settings: AlgorithmSettings,
    _time_service: Option<GlobalTimeService>,
    faults: ServerFaults,
    bells: Arc<dyn lock_core::doorbell::Doorbell>,
}

impl OpenEngine for Opened {
    fn contender(&self, algorithm: &'static Algorithm, spec: ContenderSpec) -> Contending<'_> {
        let client = CountingStore::new(
            self.store
                .client(spec.owner.clone())
                .with_row_prefix(self.prefix.clone())
                .with_doorbell(self.bells.clone()),
            self.counter.clone(),
        );
        let clock = LocalClock::new(PhysicalClock::System, spec.skew_us)
            .with_jump(self.faults.jump(&spec.owner));
        Box::pin(cell_model::contender(&ALGORITHMS, algorithm, client, clock, spec, &self.settings))
    }

    fn counters(&self) -> Option<CounterHandle> {
        let counter = self.counter.clone();
        Some(Arc::new(move || counter.snapshot()))
    }

    /// Clock jumps (each contender's write timestamps) and, when the user said how, node
    /// restarts.
    fn inject<'a>(&'a self, injection: Injection<'a>) -> BoxFuture<'a, Result<(), String>> {
        self.faults.inject(injection)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn connection_settings_belong_to_their_backend() {
        let cli = crate::cli::Cli::try_parse_from([
            "bench-harness",
            "--backend",
            "cassandra",
            "--nodes",
            "10.0.0.1:9042, 10.0.0.2",
            "--keyspace",
            "bench",
            "--redis",
            "redis://x/",
            "--processes",
            "2",
            "--threads",
            "4",
        ])
        .unwrap();
        let cfg = cli.run.to_config().unwrap();
        let o: Options = cfg.engine.decode("cassandra").unwrap();
        assert_eq!(o.nodes, ["10.0.0.1:9042", "10.0.0.2:9042"]);
        assert_eq!(o.keyspace.as_deref(), Some("bench"));
        let json = serde_json::to_string(&cfg).unwrap();
        assert!(!json.contains("redis://x/"), "{json}");
        assert_eq!(cfg.processes, 2);
        assert_eq!(
            cfg.algorithms,
            ["shadow", "queue", "bakery", "queue-bounded", "queue-push", "lwt"]
        );
        // Another engine's run carries none of these settings.
        let cli =
            crate::cli::Cli::try_parse_from(["bench-harness", "--nodes", "10.0.0.1:9042"]).unwrap();
        let json = serde_json::to_string(&cli.run.to_config().unwrap()).unwrap();
        assert!(!json.contains("nodes"), "{json}");
        let cli = crate::cli::Cli::try_parse_from([
            "bench-harness",
            "--backend",
            "cassandra",
            "--nodes",
            "a:b:c",
        ])
        .unwrap();
        assert!(cli.run.to_config().unwrap_err().contains("--nodes"));
    }

    #[test]
    fn a_node_restart_needs_both_commands() {
        let parse = |extra: &[&str]| {
            let mut args = vec![
                "bench-harness",
                "--backend",
                "cassandra",
                "--faults",
                "server-restart:5s@30s",
            ];
            args.extend_from_slice(extra);
            crate::cli::Cli::try_parse_from(args)
                .map_err(|e| e.to_string())
                .and_then(|c| c.run.to_config())
        };
        let refused = parse(&[]).unwrap_err();
        assert!(refused.contains("cannot inject server-restart"), "{refused}");
        assert!(parse(&["--node-stop", "true"]).is_err(), "--node-stop alone");
        let cfg =
            parse(&["--node-stop", "nodetool stopdaemon", "--node-start", "start-node"]).unwrap();
        assert!(cfg.backend.fault_kinds(&cfg.engine).contains(&FaultKind::ServerRestart));
    }

    #[test]
    fn restart_commands_run_in_a_shell_and_a_failure_says_which() {
        let mut ok = Commanded { stop: "true".into(), start: "exit 0".into() };
        assert!(server_faults::Restartable::start_again(&mut ok).is_ok());
        let mut bad = Commanded { stop: "true".into(), start: "echo no node >&2; exit 4".into() };
        let e = server_faults::Restartable::start_again(&mut bad).unwrap_err();
        assert!(e.contains("start command") && e.contains("no node"), "{e}");
    }
}
