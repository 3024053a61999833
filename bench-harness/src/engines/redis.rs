//! The Redis engine: the seed's jedis-lock and the token lock on a real `redis-server`, in wall
//! time.
//!
//! Opening a run makes one probe connection (an unreachable server fails here, once, naming
//! the URL); each contender then gets a connection of its own ([`RedisBackend`]) whose keys
//! carry the run's namespace (`bench-harness:<ns>:`). Expiries are judged by the contenders'
//! clocks (the system clock plus the contender's skew), as jedis-lock does. The Redis client
//! exposes no request count: store load is n/a.
//!
//! Options: `--redis URL` (or `LOCK_REDIS_URL`; a password in it is redacted in result files),
//! or `--spawn-redis[=aof|memory]`: the harness starts a `redis-server` of its own on a free
//! loopback port for each run (with an append-only file synced on every write, or in memory
//! only) and can then restart it (`--faults server-restart:…`). Faults: [`super::server_faults`].

use super::algorithm::{AlgorithmSettings, BuildFuture, Entry};
use super::server_faults::{self, Connect, Managed, Opened, ServerFaults};
use super::{
    given, redact_url, Algorithm, BoxFuture, Engine, EngineOptions, EngineSetup, OpenEngine,
};
use crate::faults::FaultKind;
use clap::{ArgMatches, Args as _, FromArgMatches as _};
use lock_core::context::ClientContext;
use lock_redis::{RedisBackend, RedisConnectConfig};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// The engine.
pub struct Redis;

/// Default URL.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379/";
/// How long connecting may take (TCP connect), and each reply.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// jedis-lock (seed 001).
pub static JEDIS: Algorithm = Algorithm::new(
    "jedis",
    "jedis-lock: SETNX/GETSET with client-clock expiry, retry every 100 ms (seed 001)",
);
/// The token lock.
pub static REDIS_TOKEN: Algorithm = Algorithm::new(
    "redis-token",
    "token lock: SET NX PX + token-checked Lua release, retry every 50 ms",
);

/// The algorithms on Redis.
static ALGORITHMS: [Entry<RedisBackend>; 2] = [
    Entry { algorithm: &JEDIS, build: build_jedis },
    Entry { algorithm: &REDIS_TOKEN, build: build_token },
];

/// Its command-line options.
#[derive(clap::Args, Debug, Clone)]
#[group(id = "redis-options")]
#[command(next_help_heading = "Redis (--backend redis)")]
pub struct Args {
    /// Redis server URL, redis://host:port/ or redis://host:port/DB [default: redis://127.0.0.1:6379/].
    #[arg(long, value_name = "URL", env = "LOCK_REDIS_URL", conflicts_with = "spawn_redis")]
    pub redis: Option<String>,
    /// Start a redis-server of the harness's own for each run, on a free loopback port, and
    /// stop it afterwards; needed for `--faults server-restart:…`. `aof` (the default) syncs an
    /// append-only file on every write, so a restart keeps the lock keys; `memory` keeps them
    /// in memory only, so a restart forgets them.
    #[arg(long, value_name = "PERSISTENCE", num_args = 0..=1, default_missing_value = "aof")]
    pub spawn_redis: Option<Persistence>,
}

/// How a redis-server the harness starts keeps its keys.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Persistence {
    /// `appendonly yes`, `appendfsync always`: every acknowledged write survives a restart.
    Aof,
    /// No persistence: a restart comes back empty.
    Memory,
}

/// Its options, as result files show them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    /// The server's URL (none: [`DEFAULT_URL`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// A server the harness starts for each run (`--spawn-redis`), instead of `redis`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spawn: Option<Persistence>,
}

impl From<Options> for EngineOptions {
    fn from(o: Options) -> EngineOptions {
        EngineOptions::of(&o)
    }
}

impl Options {
    fn url(&self) -> &str {
        self.redis.as_deref().unwrap_or(DEFAULT_URL)
    }
}

impl Engine for Redis {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn about(&self) -> String {
        format!("--redis URL (default {DEFAULT_URL}); wall time")
    }

    fn help_examples(&self) -> &'static str {
        "
  bench-harness --backend redis --redis redis://127.0.0.1:6379/ --threads 8
      jedis and redis-token on a real redis-server (--ttl is the lock's expiry)"
    }

    fn in_process(&self) -> bool {
        false
    }

    fn spawns_server(&self, options: &EngineOptions) -> bool {
        options.get::<Options>().spawn.is_some()
    }

    /// With its append-only file synced on every write, so that a restart keeps the keys.
    fn spawned(&self) -> Option<EngineOptions> {
        Some(Options { spawn: Some(Persistence::Aof), ..Default::default() }.into())
    }

    fn algorithms(&self) -> Vec<&'static Algorithm> {
        Entry::algorithms(&ALGORITHMS)
    }

    fn add_args(&self, cmd: clap::Command) -> clap::Command {
        Args::augment_args(cmd)
    }

    fn is_configured(&self, m: &ArgMatches) -> bool {
        given(m, "redis") || given(m, "spawn_redis")
    }

    fn options(&self, m: &ArgMatches) -> Result<EngineOptions, String> {
        let a = Args::from_arg_matches(m).map_err(|e| e.to_string())?;
        Ok(Options { redis: a.redis.filter(|u| !u.trim().is_empty()), spawn: a.spawn_redis }.into())
    }

    fn default_options(&self) -> EngineOptions {
        Options::default().into()
    }

    fn address(&self, options: &EngineOptions) -> String {
        let o = options.get::<Options>();
        match o.spawn {
            Some(p) => {
                format!("a redis-server started by the harness ({p:?} persistence)").to_lowercase()
            }
            None => redact_url(o.url()),
        }
    }

    fn describe(&self, options: &EngineOptions, s: &AlgorithmSettings) -> String {
        format!("redis at {}, TTL {}", self.address(options), crate::dist::format_duration(s.ttl))
    }

    fn counts_requests(&self) -> bool {
        false
    }

    fn fault_kinds(&self, options: &EngineOptions) -> &'static [FaultKind] {
        server_faults::kinds(self.spawns_server(options))
    }

    fn redacted(&self, options: &EngineOptions) -> EngineOptions {
        let mut o: Options = options.get();
        o.redis = o.redis.as_deref().map(redact_url);
        o.into()
    }

    fn open<'a>(
        &'a self,
        setup: EngineSetup<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn OpenEngine>, String>> {
        Box::pin(async move {
            let options: Options = setup.options.get();
            let (url, server) = match options.spawn {
                Some(p) => {
                    let (server, url) = Managed::start(
                        move || test_servers::RedisServer::launch(p == Persistence::Aof),
                        test_servers::RedisServer::url,
                    )
                    .await
                    .map_err(|e| format!("--spawn-redis: {e}"))?;
                    (url, Some(server))
                }
                None => (options.url().to_string(), None),
            };
            let upstream = if server_faults::needs_proxies(&setup.fault_kinds) {
                Some(server_faults::resolve(authority(&url)?).await?)
            } else {
                None
            };
            let connector = Connector { url, namespace: setup.namespace.to_string() };
            Opened::probe(connector, setup.settings, ServerFaults::new(upstream, server)).await
        })
    }
}

/// A contender's connection to the server at `url`, keys under the run's namespace.
struct Connector {
    /// The server's URL.
    url: String,
    namespace: String,
}

impl Connect for Connector {
    type Client = RedisBackend;

    fn entries() -> &'static [Entry<RedisBackend>] {
        &ALGORITHMS
    }

    /// A connection to the server, or through `via` (a contender's proxy).
    fn connect(&self, via: Option<SocketAddr>) -> BoxFuture<'_, Result<RedisBackend, String>> {
        Box::pin(self.connect_to(via))
    }
}

impl Connector {
    async fn connect_to(&self, via: Option<SocketAddr>) -> Result<RedisBackend, String> {
        let config = RedisConnectConfig {
            connect_timeout: CONNECT_TIMEOUT,
            key_prefix: format!("bench-harness:{}:", self.namespace),
            ..RedisConnectConfig::default()
        };
        let url = match via {
            Some(addr) => with_authority(&self.url, &addr.to_string())?,
            None => self.url.clone(),
        };
        RedisBackend::connect_with(&url, config).await.map_err(|e| {
            format!("cannot reach the redis backend at {} (--redis): {e}", redact_url(&url))
        })
    }
}

/// The `host:port` of a redis URL.
fn authority(url: &str) -> Result<&str, String> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let host_port = rest.split('/').next().unwrap_or(rest);
    if host_port.is_empty() {
        return Err(format!("no host:port in the redis URL {}", redact_url(url)));
    }
    Ok(host_port)
}

/// `url` with its `host:port` replaced by `host_port` (scheme, credentials and database kept).
fn with_authority(url: &str, host_port: &str) -> Result<String, String> {
    let old = authority(url)?;
    let at = url
        .rfind(old)
        .ok_or_else(|| format!("no host:port in the redis URL {}", redact_url(url)))?;
    Ok(format!("{}{host_port}{}", &url[..at], &url[at + old.len()..]))
}

/// jedis-lock as the seed has it (retry every 100 ms), with the run's TTL as its expiry and
/// the contender's (possibly skewed) clock: expiries are judged by client clocks.
fn build_jedis(backend: RedisBackend, ctx: ClientContext, s: &AlgorithmSettings) -> BuildFuture {
    let config = lock_redis::JedisConfig::new(s.scaled(s.ttl)).with_clock(ctx.timestamps.clock());
    Box::pin(async move { backend.locker(&ctx.owner, lock_redis::Variant::Jedis(config)) })
}

/// The token lock with the run's TTL (renewed every TTL/2, retry every 50 ms).
fn build_token(backend: RedisBackend, ctx: ClientContext, s: &AlgorithmSettings) -> BuildFuture {
    let config = lock_redis::TokenConfig::new(s.scaled(s.ttl));
    Box::pin(async move { backend.locker(&ctx.owner, lock_redis::Variant::Token(config)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_in_result_files() {
        let cfg = crate::config::RunConfig {
            engine: Options { redis: Some("redis://:pw@h:1/".into()), spawn: None }.into(),
            ..crate::config::RunConfig::on(super::super::EngineRef::find("redis").unwrap())
        };
        let json = serde_json::to_string(&cfg.redacted()).unwrap();
        assert!(json.contains("redis://***@h:1/") && !json.contains("pw"), "{json}");
        assert_eq!(Redis.address(&cfg.engine), "redis://***@h:1/");
    }

    #[test]
    fn a_proxy_takes_the_host_and_port_of_the_url_and_nothing_else() {
        assert_eq!(authority("redis://:pw@h:1/2").unwrap(), "h:1");
        assert_eq!(
            with_authority("redis://:pw@h:1/2", "127.0.0.1:9").unwrap(),
            "redis://:pw@127.0.0.1:9/2"
        );
        assert_eq!(with_authority("redis://h:1", "127.0.0.1:9").unwrap(), "redis://127.0.0.1:9");
        assert!(authority("redis:///").is_err());
    }
}
