//! The Redis engine: the seed's jedis-lock and the token lock on a real `redis-server`, in wall
//! time.
//!
//! Opening a run makes one probe connection (an unreachable server fails here, once, naming
//! the URL); each contender then gets a connection of its own ([`RedisBackend`]), or with
//! `--sessions N` shares one of N, whose keys carry the run's namespace
//! (`bench-harness:<ns>:`). Expiries are judged by the contenders'
//! clocks (the system clock plus the contender's skew), as jedis-lock does.
//!
//! Store load: `lock-redis` reports each command its contenders send (its crate docs,
//! "Requests per grant": jedis-lock 3 for an uncontended grant and 2 per retry, the token lock
//! 2 and 1 per retry), counted under the server it went to as the table (`redis`, and through
//! Sentinel `sentinel`) and by [`command_kind`]. Each contender's connection costs a `HELLO`,
//! a `PING` and the `CLIENT TRACKING` that tells a token-lock holder when its key changes
//! (through Sentinel a `SENTINEL` query and a `ROLE` too).
//!
//! Options, one server or a master watched by Sentinels:
//! - `--redis URL` (or `LOCK_REDIS_URL`; a password in it is redacted in result files);
//! - `--spawn-redis[=aof|memory]`: the harness starts a `redis-server` of its own on a free
//!   loopback port for each run (with an append-only file synced on every write, or in memory
//!   only) and can then restart it (`--faults server-restart:…`);
//! - `--redis-sentinel HOST:PORT,…` and `--redis-master-name NAME`: the user's Sentinels, as
//!   Redis clients name them; every contender asks them for the master and follows its
//!   failovers (`lock_redis::RedisBackend::connect_sentinel`);
//! - `--spawn-redis=sentinel`: the harness starts a master, 2 replicas and 3 Sentinels
//!   (`test_servers::RedisCluster`, every member with its append-only file) and can then hit the
//!   master with the leader faults, `lagged-leader-kill` among them;
//! - `--redis-user USER`, its password in `LOCK_REDIS_PASSWORD` or `--redis-password-file`: an
//!   ACL user for every connection; with `--spawn-redis` (one server) the harness starts it
//!   with the default user off and this user limited to the harness's keys and
//!   `lock_redis::ACL_COMMANDS`.
//!
//! Faults: [`super::server_faults`]; `stranger` deletes the run's lock keys as a client with no
//! credentials.

use super::prelude::*;

use super::{redact_url, Login};
use clap::{Args as _, FromArgMatches as _};
use lock_core::rwlock::WriterPolicy;
use lock_redis::{RedisBackend, RedisConnectConfig};

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
pub static REDIS_TOKEN: Algorithm = Algorithm {
    primitives: &[PrimitiveKind::Rw, PrimitiveKind::ReadersFirst, PrimitiveKind::Semaphore],
    ..Algorithm::new(
        "redis-token",
        "token lock: SET NX PX + token-checked Lua release, retry every 50 ms",
    )
};

/// `--redis-user` and `--redis-password-file`.
pub static LOGIN: LoginFlags = LoginFlags {
    secret: SecretNames { name: "redis", secret: "password", var: "LOCK_REDIS_PASSWORD" },
    heading: "Redis (--backend redis)",
    user_help: "Connect as this ACL user, its password from the environment variable \
                LOCK_REDIS_PASSWORD or from --redis-password-file (never on the command line; \
                it takes the place of a user and password in --redis). With --spawn-redis (one \
                server), the harness starts it with the default user off and this user allowed \
                the harness's keys and the locks' commands only (lock_redis::ACL_COMMANDS).",
};

/// What Redis the harness starts for each run (`--spawn-redis`).
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Spawn {
    /// One server: `appendonly yes`, `appendfsync always`: every acknowledged write survives
    /// a restart.
    Aof,
    /// One server, no persistence: a restart comes back empty.
    Memory,
    /// A master, 2 replicas and 3 Sentinels, each member with its append-only file.
    Sentinel,
}

/// Its options: its command-line flags besides the user's ([`LOGIN`]), and what result files
/// show.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[group(id = "redis-options")]
#[command(next_help_heading = "Redis (--backend redis)")]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Redis server URL, redis://host:port/ or redis://host:port/DB [default: redis://127.0.0.1:6379/].
    #[arg(long, value_name = "URL", env = "LOCK_REDIS_URL")]
    #[arg(conflicts_with_all = ["spawn_redis", "redis_sentinel"])]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// Start Redis of the harness's own for each run, on free loopback ports, and stop it
    /// afterwards. `aof` (the default) is one redis-server that syncs an append-only file on
    /// every write, so a restart keeps the lock keys; `memory` keeps them in memory only, so a
    /// restart forgets them (both allow `--faults server-restart:…`). `sentinel` is a master, 2
    /// replicas and 3 Sentinels (each member with its append-only file): the contenders find
    /// the master through Sentinel and follow its failovers, and the leader faults
    /// (`leader-kill`, `leader-pause`, `leader-cut`, `lagged-leader-kill`) hit the master.
    #[arg(long = "spawn-redis", id = "spawn_redis", value_name = "KIND")]
    #[arg(num_args = 0..=1, default_missing_value = "aof")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spawn: Option<Spawn>,
    /// Your Sentinels, HOST:PORT[,HOST:PORT...] (or `LOCK_REDIS_SENTINELS`): every contender
    /// asks them for the master named by --redis-master-name and follows its failovers.
    #[arg(long = "redis-sentinel", id = "redis_sentinel", value_name = "HOST:PORT,...")]
    #[arg(env = "LOCK_REDIS_SENTINELS", conflicts_with = "spawn_redis")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinels: Option<String>,
    /// The master's name the Sentinels know it by (`sentinel monitor NAME ...`) [default:
    /// mymaster].
    #[arg(long = "redis-master-name", value_name = "NAME", requires = "redis_sentinel")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub master_name: Option<String>,
    /// The ACL user every connection authenticates as (`--redis-user`).
    #[arg(skip)]
    #[serde(flatten)]
    pub login: Login,
}

impl super::Options for Options {
    fn login_mut(&mut self) -> Option<&mut Login> {
        Some(&mut self.login)
    }
}

impl Options {
    fn url(&self) -> &str {
        self.redis.as_deref().unwrap_or(DEFAULT_URL)
    }

    /// Whether the contenders find the master through Sentinels.
    fn through_sentinel(&self) -> bool {
        self.spawn == Some(Spawn::Sentinel) || self.sentinels.is_some()
    }

    /// The credentials of `--redis-user`, their password read now.
    fn credentials(&self) -> Result<Option<Credentials>, String> {
        self.login.credentials(&LOGIN.secret)
    }
}

impl Describe for Redis {
    const ABOUT: About = About::new(
        "redis",
        "--redis URL (default redis://127.0.0.1:6379/), --redis-sentinel HOST:PORT,... or --spawn-redis[=aof|memory|sentinel]; wall time",
        Sharing::Shared(
            "one multiplexed connection (Redis has no session: an expiry per key); a token-lock holder whose key another owner on the same connection takes over learns it at its next renewal, not at once (CLIENT TRACKING NOLOOP sends no push for the connection's own writes)",
        ),
    )
    .examples(
        "
  bench-harness --backend redis --redis redis://127.0.0.1:6379/ --threads 8
      jedis and redis-token on a real redis-server (--ttl is the lock's expiry)
  bench-harness --backend redis --spawn-redis=sentinel --faults lagged-leader-kill:10s@20s
      the same through Sentinel, the master killed while its replication is held back",
    );
    type Client = RedisBackend;
    const ENTRIES: &'static [Entry<RedisBackend>] = &ALGORITHMS;
}

impl ParseOptions for Redis {
    type Options = Options;
    type Args = Options;
    const CONFIGURED_BY: &'static [&'static str] = &["redis", "spawn_redis", "redis_sentinel"];

    fn spawns_server(&self, o: &Options) -> bool {
        o.spawn.is_some()
    }

    /// With its append-only file synced on every write, so that a restart keeps the keys.
    fn spawned(&self) -> Option<Options> {
        Some(Options { spawn: Some(Spawn::Aof), ..Default::default() })
    }

    fn topology(&self, o: &Options) -> String {
        if o.through_sentinel() {
            "sentinel".into()
        } else {
            String::new()
        }
    }

    fn clustered(&self) -> Option<Options> {
        Some(Options { spawn: Some(Spawn::Sentinel), ..Default::default() })
    }

    fn add_args(&self, cmd: clap::Command) -> clap::Command {
        LOGIN.augment(Options::augment_args(cmd))
    }

    fn parse(&self, m: &ArgMatches) -> Result<Options, String> {
        let mut options = Options::from_arg_matches(m).map_err(|e| e.to_string())?;
        options.redis = options.redis.filter(|u| !u.trim().is_empty());
        options.sentinels = options.sentinels.filter(|s| !s.trim().is_empty());
        if let Some(list) = &options.sentinels {
            sentinel_list(list)?;
        }
        let name = options.master_name.take().unwrap_or_else(|| "mymaster".into());
        options.master_name = options.sentinels.as_ref().map(|_| name.trim().to_string());
        if options.master_name.as_deref() == Some("") {
            return Err("--redis-master-name: empty".into());
        }
        options.login = LOGIN.read(m);
        if options.login.user.is_some() && options.spawn == Some(Spawn::Sentinel) {
            return Err("--redis-user with --spawn-redis=sentinel: only a single server the \
                        harness starts can be secured by it"
                .into());
        }
        // Read once here so that a missing password is a usage error before anything starts.
        options.credentials()?;
        Ok(options)
    }

    fn address(&self, o: &Options) -> String {
        match (o.spawn, &o.sentinels) {
            (Some(Spawn::Sentinel), _) => {
                "a Redis master, 2 replicas and 3 Sentinels started by the harness".into()
            }
            (Some(p), _) => {
                format!("a redis-server started by the harness ({p:?} persistence)").to_lowercase()
            }
            (None, Some(sentinels)) => format!(
                "master '{}' of the Sentinels at {sentinels}",
                o.master_name.as_deref().unwrap_or_default()
            ),
            (None, None) => redact_url(o.url()),
        }
    }

    fn describe(&self, o: &Options, s: &AlgorithmSettings) -> String {
        format!("redis at {}, TTL {}", self.address(o), crate::dist::format_duration(s.ttl))
    }

    fn fault_kinds(&self, o: &Options) -> &'static [FaultKind] {
        match (o.spawn, o.sentinels.is_some()) {
            (Some(Spawn::Sentinel), _) => server_faults::sentinel_kinds(),
            (None, true) => server_faults::kinds_without_proxies(false),
            (spawn, _) => server_faults::kinds_with_stranger(spawn.is_some()),
        }
    }

    fn redacted(&self, o: &Options) -> Options {
        let mut o = o.clone();
        o.redis = o.redis.as_deref().map(redact_url);
        o
    }
}

impl Open for Redis {
    async fn open<'a>(&'a self, options: Options, setup: EngineSetup<'a>) -> OpenResult {
        let namespace = setup.namespace.to_string();
        let (target, faults) = if options.spawn == Some(Spawn::Sentinel) {
            on_sentinel_cluster().await?
        } else if let Some(sentinels) = &options.sentinels {
            let name = options.master_name.clone().unwrap_or_default();
            (
                Target::Sentinel { sentinels: sentinel_list(sentinels)?, name },
                ServerFaults::new(None, None),
            )
        } else {
            on_server(&options, &setup.fault_kinds).await?
        };
        let credentials = options.credentials()?;
        Opened::probe(Connector { target, namespace, credentials }, setup.settings, faults).await
    }
}

/// A master, 2 replicas and 3 Sentinels the harness starts (`--spawn-redis=sentinel`): the
/// Sentinels to ask, and the leader faults on the cluster.
async fn on_sentinel_cluster() -> Result<(Target, ServerFaults), String> {
    let sentinel = test_servers::Redis::sentinel(true, 3);
    let (sentinels, faults) =
        server_faults::start_cluster("--spawn-redis=sentinel", sentinel, 3, |c| {
            c.sentinel_addrs().iter().map(|a| a.to_string()).collect()
        })
        .await?;
    let target = Target::Sentinel { sentinels, name: test_servers::REDIS_MASTER_NAME.to_string() };
    Ok((target, faults))
}

/// The user's server (`--redis`) or one the harness starts (`--spawn-redis[=aof|memory]`),
/// with a proxy per contender when `kinds` need them.
async fn on_server(
    options: &Options,
    kinds: &[FaultKind],
) -> Result<(Target, ServerFaults), String> {
    let (url, server) = match options.spawn {
        Some(p) => {
            let users: Vec<_> = options.credentials()?.iter().map(acl_user).collect();
            let launch = move || match users.is_empty() {
                true => test_servers::RedisServer::launch(p == Spawn::Aof),
                false => test_servers::RedisServer::launch_secured_with(p == Spawn::Aof, &users),
            };
            let (server, url) =
                Managed::start(move || Ok(launch()?), test_servers::RedisServer::url)
                    .await
                    .map_err(|e| format!("--spawn-redis: {e}"))?;
            (url, Some(server))
        }
        None => (options.url().to_string(), None),
    };
    let upstream = if server_faults::needs_proxies(kinds) {
        Some(server_faults::resolve(authority(&url)?).await?)
    } else {
        None
    };
    Ok((Target::Url(url), ServerFaults::new(upstream, server)))
}

/// The ACL user of a server the harness secures for `c` (`--spawn-redis --redis-user`): the
/// harness's keys, the locks' commands.
fn acl_user(c: &Credentials) -> test_servers::AclUser {
    let rules = format!("~bench-harness:* {}", lock_redis::ACL_COMMANDS);
    test_servers::AclUser::with_password(&c.user, c.password.expose(), &rules)
}

/// `--redis-sentinel`'s list, each entry `host:port`.
fn sentinel_list(list: &str) -> Result<Vec<String>, String> {
    list.split(',')
        .map(str::trim)
        .map(|s| {
            let hp = s.strip_prefix("redis://").unwrap_or(s).trim_end_matches('/');
            match hp.rsplit_once(':') {
                Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok() => Ok(hp.to_string()),
                _ => Err(format!(
                    "--redis-sentinel: {s:?} is not a Sentinel address like 127.0.0.1:26379"
                )),
            }
        })
        .collect()
}

/// Where a contender finds its Redis.
enum Target {
    /// One server's URL.
    Url(String),
    /// The master `name` of these Sentinels (`host:port` each).
    Sentinel {
        /// The Sentinels.
        sentinels: Vec<String>,
        /// The master's name.
        name: String,
    },
}

/// A contender's connection to the server or master at `target`, keys under the run's
/// namespace.
struct Connector {
    target: Target,
    namespace: String,
    /// `--redis-user` and its password.
    credentials: Option<Credentials>,
}

impl Connect for Connector {
    type Engine = Redis;

    /// The `stranger` fault: a connection with no credentials finds the run's lock keys (SCAN,
    /// leaving the fencing counters) and deletes them: the token lock's holder loses its key,
    /// and the next attempt's `SET NX` takes the lock.
    async fn stranger(&self) -> Result<String, String> {
        let Target::Url(url) = &self.target else {
            return Err("the stranger needs one Redis server (--redis or --spawn-redis)".into());
        };
        let plain = format!("redis://{}/", authority(url)?);
        let refused =
            |e: redis::RedisError| Ok(server_faults::stranger_outcome(0, Some(e.to_string())));
        let client = redis::Client::open(plain.as_str()).map_err(|e| e.to_string())?;
        let mut conn = match client.get_multiplexed_async_connection().await {
            Ok(c) => c,
            Err(e) => return refused(e),
        };
        let pattern = format!("bench-harness:{}:*", self.namespace);
        let (mut cursor, mut keys) = (0u64, Vec::<String>::new());
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(100);
            let (next, batch): (u64, Vec<String>) = match scan.query_async(&mut conn).await {
                Ok(answer) => answer,
                Err(e) => return refused(e),
            };
            keys.extend(batch.into_iter().filter(|k| !k.ends_with("/fence")));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let mut deleted = 0;
        for key in keys {
            match redis::cmd("DEL").arg(&key).query_async::<usize>(&mut conn).await {
                Ok(n) => deleted += n,
                Err(e) => return refused(e),
            }
        }
        Ok(server_faults::stranger_outcome(deleted, None))
    }

    /// A connection to the server, or through `via` (a contender's proxy).
    async fn connect(&self, via: Via, requests: RequestHook) -> Connected<Self> {
        let config = RedisConnectConfig {
            connect_timeout: CONNECT_TIMEOUT,
            key_prefix: format!("bench-harness:{}:", self.namespace),
            requests,
            credentials: self.credentials.clone(),
            ..RedisConnectConfig::default()
        };
        let url = match &self.target {
            Target::Url(url) => url,
            Target::Sentinel { sentinels, name } => {
                return RedisBackend::connect_sentinel(sentinels, name, config).await.map_err(
                    |e| {
                        format!(
                            "cannot reach master '{name}' through the Sentinels at {} (--redis-sentinel): {e}",
                            sentinels.join(",")
                        )
                    },
                )
            }
        };
        let url = match via {
            Some(addr) => with_authority(url, &addr.to_string())?,
            None => url.clone(),
        };
        RedisBackend::connect_with(&url, config).await.map_err(|e| {
            format!("cannot reach the redis backend at {} (--redis): {e}", redact_url(&url))
        })
    }

    fn kind(request: &Request<'_>) -> Kind {
        command_kind(request)
    }
}

/// The kind a Redis command is counted as, here and on Redlock's masters: a conditional write
/// (`SETNX`, `SET`, which this workspace only sends with `NX`, and the scripts, each of which
/// compares before it acts) as a compare-and-set; `DEL` as a delete; `INCR`, `GETSET` and the
/// driver's `SCRIPT LOAD` as writes; `GET` and a connection's `PING`, `ROLE`, `SENTINEL`
/// query, `AUTH` and `SELECT` as reads.
pub fn command_kind(request: &Request<'_>) -> Kind {
    match request.command {
        "SETNX" | "SET" | "EVALSHA" | "EVAL" => Kind::Cas,
        "DEL" => Kind::Delete,
        // CLIENT: the connection's `CLIENT TRACKING`, set up with HELLO on each connection.
        "GET" | "PING" | "ROLE" | "SENTINEL" | "AUTH" | "HELLO" | "SELECT" | "CLIENT" => Kind::Read,
        _ => Kind::Write,
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

/// The algorithms on Redis, in the order they run.
static ALGORITHMS: [Entry<RedisBackend>; 2] = [
    Entry::mutex(&JEDIS, build_jedis),
    Entry::mutex(&REDIS_TOKEN, build_token).with_shared(build_token_shared),
];

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

/// The token lock's family: the reader-writer lock (FIFO, or readers first as Redisson's
/// `RReadWriteLock`) and the semaphore of `lock-redis` (leased asks, a token per grant); Redis
/// has no election here.
fn build_token_shared(
    backend: RedisBackend,
    ctx: ClientContext,
    s: &AlgorithmSettings,
) -> SharedFuture {
    let (ttl, primitive) = (s.scaled(s.ttl), s.primitive);
    Box::pin(async move {
        Ok(match primitive {
            Primitive::Mutex => Asking::Mutex(backend.locker(
                &ctx.owner,
                lock_redis::Variant::Token(lock_redis::TokenConfig::new(ttl)),
            )?),
            Primitive::Rw { readers_first, .. } => {
                let policy =
                    if readers_first { WriterPolicy::ReadersFirst } else { WriterPolicy::Fifo };
                let config =
                    lock_redis::RwLockConfig { policy, ..lock_redis::RwLockConfig::new(ttl) };
                Asking::Rw(Arc::new(backend.rwlock(&ctx.owner, config)?))
            }
            Primitive::Semaphore { .. } => Asking::Semaphore(Arc::new(
                backend.semaphore(&ctx.owner, lock_redis::SemaphoreConfig::new(ttl))?,
            )),
            Primitive::Election => {
                return Err(LockError::Config(no_primitive(&REDIS_TOKEN, primitive)))
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::EngineOptions;

    #[test]
    fn passwords_are_redacted_in_result_files() {
        let cfg = crate::config::RunConfig {
            engine: EngineOptions::of(&Options {
                redis: Some("redis://:pw@h:1/".into()),
                ..Default::default()
            }),
            ..crate::config::RunConfig::on(super::super::EngineRef::find("redis").unwrap())
        };
        let json = serde_json::to_string(&cfg.redacted()).unwrap();
        assert!(json.contains("redis://***@h:1/") && !json.contains("pw"), "{json}");
        assert_eq!(cfg.address(), "redis://***@h:1/");
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
