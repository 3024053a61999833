//! The Redis engine: the seed's jedis-lock and the token lock on a real `redis-server`, in wall
//! time.
//!
//! Opening a run makes one probe connection (an unreachable server fails here, once, naming
//! the URL); each contender then gets a connection of its own ([`RedisBackend`]) whose keys
//! carry the run's namespace (`bench-harness:<ns>:`). Expiries are judged by the contenders'
//! clocks (the system clock plus the contender's skew), as jedis-lock does. The Redis client
//! exposes no request count: store load is n/a.
//!
//! Option: `--redis URL` (or `LOCK_REDIS_URL`); a password in it is redacted in result files.

use super::algorithm::{AlgorithmSettings, BuildFuture, Entry};
use super::{
    given, redact_url, Algorithm, BoxFuture, ContenderSpec, CounterHandle, Engine, EngineOptions,
    EngineSetup, Injection, OpenEngine,
};
use crate::faults::FaultKind;
use clap::{ArgMatches, Args as _, FromArgMatches as _};
use lock_core::context::ClientContext;
use lock_core::Locker;
use lock_redis::{RedisBackend, RedisConnectConfig};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
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
    Entry {
        algorithm: &JEDIS,
        build: build_jedis,
    },
    Entry {
        algorithm: &REDIS_TOKEN,
        build: build_token,
    },
];

/// Its command-line options.
#[derive(clap::Args, Debug, Clone)]
#[group(id = "redis-options")]
#[command(next_help_heading = "Redis (--backend redis)")]
pub struct Args {
    /// Redis server URL, redis://host:port/ or redis://host:port/DB [default: redis://127.0.0.1:6379/].
    #[arg(long, value_name = "URL", env = "LOCK_REDIS_URL")]
    pub redis: Option<String>,
}

/// Its options, as result files show them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Options {
    /// The server's URL (none: [`DEFAULT_URL`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
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

    fn algorithms(&self) -> Vec<&'static Algorithm> {
        Entry::algorithms(&ALGORITHMS)
    }

    fn add_args(&self, cmd: clap::Command) -> clap::Command {
        Args::augment_args(cmd)
    }

    fn is_configured(&self, m: &ArgMatches) -> bool {
        given(m, "redis")
    }

    fn options(&self, m: &ArgMatches) -> Result<EngineOptions, String> {
        let a = Args::from_arg_matches(m).map_err(|e| e.to_string())?;
        Ok(Options {
            redis: a.redis.filter(|u| !u.trim().is_empty()),
        }
        .into())
    }

    fn default_options(&self) -> EngineOptions {
        Options::default().into()
    }

    fn address(&self, options: &EngineOptions) -> String {
        redact_url(options.get::<Options>().url())
    }

    fn describe(&self, options: &EngineOptions, s: &AlgorithmSettings) -> String {
        format!(
            "redis at {}, TTL {}",
            self.address(options),
            crate::dist::format_duration(s.ttl)
        )
    }

    fn counts_requests(&self) -> bool {
        false
    }

    fn fault_kinds(&self) -> &'static [FaultKind] {
        &[FaultKind::ClockJump]
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
            let opened = Opened {
                options: setup.options.get(),
                namespace: setup.namespace.to_string(),
                settings: setup.settings,
                jumps: Mutex::new(BTreeMap::new()),
            };
            // One probe connection: an unreachable server fails here, once.
            opened.connect().await?;
            Ok(Box::new(opened) as Box<dyn OpenEngine>)
        })
    }
}

struct Opened {
    options: Options,
    namespace: String,
    settings: AlgorithmSettings,
    /// Each contender's clock steps, by owner id.
    jumps: Mutex<BTreeMap<String, lock_core::time::ClockJump>>,
}

impl Opened {
    async fn connect(&self) -> Result<RedisBackend, String> {
        let config = RedisConnectConfig {
            connect_timeout: CONNECT_TIMEOUT,
            key_prefix: format!("bench-harness:{}:", self.namespace),
            ..RedisConnectConfig::default()
        };
        RedisBackend::connect_with(self.options.url(), config)
            .await
            .map_err(|e| {
                format!(
                    "cannot reach the redis backend at {} (--redis): {e}",
                    redact_url(self.options.url())
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
        let jump = lock_core::time::ClockJump::new();
        lock_jumps(&self.jumps).insert(spec.owner.clone(), jump.clone());
        Box::pin(super::server_contender(
            &ALGORITHMS,
            algorithm,
            self.connect(),
            spec,
            &self.settings,
            jump,
        ))
    }

    fn counters(&self) -> Option<CounterHandle> {
        None
    }

    /// Clock jumps: each contender's clock carries a [`lock_core::time::ClockJump`] the
    /// nemesis moves (jedis-lock judges expiry by client clocks; the token lock ignores them).
    fn inject<'a>(&'a self, injection: Injection<'a>) -> BoxFuture<'a, Result<(), String>> {
        let done = match injection {
            Injection::ClockJump { owner, by_us } => match lock_jumps(&self.jumps).get(owner) {
                Some(jump) => {
                    jump.jump(by_us);
                    Ok(())
                }
                None => Err(format!("no contender {owner} to step the clock of")),
            },
            other => Err(format!("the redis engine cannot inject {other:?}")),
        };
        Box::pin(async move { done })
    }
}

fn lock_jumps(
    jumps: &Mutex<BTreeMap<String, lock_core::time::ClockJump>>,
) -> std::sync::MutexGuard<'_, BTreeMap<String, lock_core::time::ClockJump>> {
    jumps.lock().unwrap_or_else(|e| e.into_inner())
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
            engine: Options {
                redis: Some("redis://:pw@h:1/".into()),
            }
            .into(),
            ..crate::config::RunConfig::on(super::super::EngineRef::find("redis").unwrap())
        };
        let json = serde_json::to_string(&cfg.redacted()).unwrap();
        assert!(
            json.contains("redis://***@h:1/") && !json.contains("pw"),
            "{json}"
        );
        assert_eq!(Redis.address(&cfg.engine), "redis://***@h:1/");
    }
}
