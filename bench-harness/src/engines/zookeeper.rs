//! The ZooKeeper engine: the seed's recipe (ephemeral sequential znodes, each waiter watching
//! its predecessor) on a real ZooKeeper server, in wall time.
//!
//! Opening a run establishes one probe session (an unreachable server fails here, once,
//! naming the hosts); each contender then gets a session of its own ([`ZkBackend`]) whose
//! timeout is the run's TTL, with its lock znodes under the run's own root
//! `/bench-harness/<ns>`. The ZooKeeper client exposes no request count: store load is n/a.
//!
//! Option: `--zookeeper host:port[,…]` (or `LOCK_ZOOKEEPER_HOSTS`).

use super::algorithm::{AlgorithmSettings, BuildFuture, Entry};
use super::{
    given, Algorithm, BoxFuture, ContenderSpec, CounterHandle, Engine, EngineOptions, EngineSetup,
    OpenEngine,
};
use clap::{ArgMatches, Args as _, FromArgMatches as _};
use lock_core::context::ClientContext;
use lock_core::Locker;
use lock_zookeeper::{ZkBackend, ZkConfig};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

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
static ALGORITHMS: [Entry<ZkBackend>; 1] = [Entry {
    algorithm: &RECIPE,
    build: build_recipe,
}];

/// Its command-line options.
#[derive(clap::Args, Debug, Clone)]
#[group(id = "zookeeper-options")]
#[command(next_help_heading = "ZooKeeper (--backend zookeeper)")]
pub struct Args {
    /// ZooKeeper connect string, host:port[,host:port...] [default: 127.0.0.1:2181].
    #[arg(long, value_name = "HOST:PORT,...", env = "LOCK_ZOOKEEPER_HOSTS")]
    pub zookeeper: Option<String>,
}

/// Its options, as result files show them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    /// The connect string (none: [`DEFAULT_HOSTS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zookeeper: Option<String>,
}

impl From<Options> for EngineOptions {
    fn from(o: Options) -> EngineOptions {
        EngineOptions::of(&o)
    }
}

impl Options {
    fn hosts(&self) -> &str {
        self.zookeeper.as_deref().unwrap_or(DEFAULT_HOSTS)
    }
}

impl Engine for Zookeeper {
    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn about(&self) -> String {
        format!("--zookeeper host:port[,...] (default {DEFAULT_HOSTS}); wall time")
    }

    fn help_examples(&self) -> &'static str {
        "
  bench-harness --backend zookeeper --zookeeper 127.0.0.1:2181 --threads 8
      the ZooKeeper recipe, each contender on its own session (--ttl: session timeout)"
    }

    fn in_process(&self) -> bool {
        false
    }

    fn algorithms(&self) -> Vec<&'static Algorithm> {
        Entry::algorithms(&ALGORITHMS)
    }

    fn add_args(&self, cmd: clap::Command) -> clap::Command {
        Args::augment_args(cmd)
    }

    fn is_configured(&self, m: &ArgMatches) -> bool {
        given(m, "zookeeper")
    }

    fn options(&self, m: &ArgMatches) -> Result<EngineOptions, String> {
        let a = Args::from_arg_matches(m).map_err(|e| e.to_string())?;
        Ok(Options {
            zookeeper: a.zookeeper.filter(|h| !h.trim().is_empty()),
        }
        .into())
    }

    fn default_options(&self) -> EngineOptions {
        Options::default().into()
    }

    fn address(&self, options: &EngineOptions) -> String {
        options.get::<Options>().hosts().to_string()
    }

    fn describe(&self, options: &EngineOptions, s: &AlgorithmSettings) -> String {
        format!(
            "zookeeper at {}, session timeout {}",
            self.address(options),
            crate::dist::format_duration(s.ttl)
        )
    }

    fn counts_requests(&self) -> bool {
        false
    }

    fn open<'a>(
        &'a self,
        setup: EngineSetup<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn OpenEngine>, String>> {
        Box::pin(async move {
            let opened = Opened {
                options: setup.options.get(),
                namespace: setup.namespace.to_string(),
                settings: setup.settings,
            };
            // One probe session: an unreachable server fails here, once.
            opened.connect().await?;
            Ok(Box::new(opened) as Box<dyn OpenEngine>)
        })
    }
}

struct Opened {
    options: Options,
    namespace: String,
    settings: AlgorithmSettings,
}

impl Opened {
    async fn connect(&self) -> Result<ZkBackend, String> {
        let config = ZkConfig {
            session_timeout: self.settings.scaled(self.settings.ttl),
            connect_timeout: CONNECT_TIMEOUT,
            root: format!("/bench-harness/{}", self.namespace),
        };
        ZkBackend::connect_with(self.options.hosts(), config)
            .await
            .map_err(|e| {
                format!(
                    "cannot reach the zookeeper backend at {} (--zookeeper; tried to establish a session within {CONNECT_TIMEOUT:?}): {e}",
                    self.options.hosts(),
                )
            })
    }
}

impl OpenEngine for Opened {
    fn contender<'a>(
        &'a self,
        algorithm: &'static Algorithm,
        spec: ContenderSpec,
    ) -> BoxFuture<'a, Result<Arc<dyn Locker>, String>> {
        Box::pin(super::server_contender(
            &ALGORITHMS,
            algorithm,
            self.connect(),
            spec,
            &self.settings,
            lock_core::time::ClockJump::new(),
        ))
    }

    fn counters(&self) -> Option<CounterHandle> {
        None
    }
}

/// The recipe on the contender's own session (whose timeout is the run's TTL).
fn build_recipe(backend: ZkBackend, ctx: ClientContext, _s: &AlgorithmSettings) -> BuildFuture {
    Box::pin(async move { Ok(Arc::new(backend.locker(&ctx.owner)?) as Arc<dyn Locker>) })
}
