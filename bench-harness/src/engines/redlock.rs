//! The Redlock engine: Redlock and its fenced variant (`lock_redis::Redlock`) on N independent
//! `redis-server` masters, in wall time.
//!
//! Opening a run connects once to every master (a majority must answer, or the run fails
//! naming the first that did not); each contender then gets connections of its own to every
//! master ([`RedisMasters`]), or with `--sessions N` shares one of N such sets, keys under the
//! run's namespace (`bench-harness:<ns>:`). Redlock reads no client clock (its elapsed times
//! are monotonic), so a clock jump changes nothing and is not offered.
//!
//! Store load: `lock-redis` reports each command its contenders send to each master (its crate
//! docs, "Requests per grant": 2 per master for an uncontended grant, 4 fenced, and 2 per
//! master for every attempt that finds the lock held), counted under `master-<i>` as the table
//! and by [`super::redis::command_kind`]. Each contender's connections cost a `PING` per
//! master.
//!
//! Options: `--redlock URL,URL,...` (or `LOCK_REDLOCK_URLS`: the user's masters, passwords
//! redacted in result files), or `--spawn-redlock[=N]`: the harness starts N masters of its
//! own (5 by default, the Redis documentation's), each behind a proxy, without replication or
//! Sentinel and with an append-only file synced on every write, and can then hit them with
//! the master faults: `master-kill` (restarted with its data) and `master-wipe` (restarted
//! **without** it: the restart Redlock's safety argument rules out). Faults:
//! [`super::server_faults`].
//!
//! Redlock has no fencing token of its own: the plain variant's guards carry token 0, which a
//! fenced resource cannot order, so its stale writes show as accepted in the fenced-resource
//! columns; `redlock-fenced` derives one on a majority (`lock_redis`'s crate docs give the
//! argument and where it fails).

use super::prelude::*;
use super::redact_url;
use clap::FromArgMatches as _;
use lock_redis::{RedisConnectConfig, RedisMasters, RedlockConfig, RedlockVariant};

/// The engine.
pub struct Redlock;

/// How many masters `--spawn-redlock` starts by default: the documentation's five.
pub const DEFAULT_MASTERS: u16 = 5;
/// How long connecting to a master may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Redlock as the Redis documentation gives it.
pub static REDLOCK: Algorithm = Algorithm {
    fences: false,
    ..Algorithm::new(
        "redlock",
        "Redlock: SET NX PX on N independent masters, held when a majority granted within the validity; no fencing token",
    )
};
/// Redlock with a token derived on a majority.
pub static REDLOCK_FENCED: Algorithm = Algorithm::new(
    "redlock-fenced",
    "Redlock plus a fencing token: max-register read and raised on a majority after the grant",
);

/// Its options: its command-line flags, and what result files show.
#[derive(clap::Args, Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[group(id = "redlock-options")]
#[command(next_help_heading = "Redlock (--backend redlock)")]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Your independent Redis masters, redis://host:port/[,redis://host:port/...] (no
    /// replication between them; Redlock's N, of which a majority must grant).
    #[arg(long, value_name = "URL,...", env = "LOCK_REDLOCK_URLS")]
    #[arg(conflicts_with = "spawn_redlock")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redlock: Option<String>,
    /// Start MASTERS independent redis-servers of the harness's own for each run (default 5),
    /// each behind a proxy and with an append-only file synced on every write; needed for the
    /// master faults `master-kill` and `master-wipe`.
    #[arg(long = "spawn-redlock", id = "spawn_redlock", value_name = "MASTERS")]
    #[arg(num_args = 0..=1, require_equals = true, default_missing_value = "5")]
    #[arg(value_parser = clap::value_parser!(u16).range(1..=9))]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spawn: Option<u16>,
}

impl super::Options for Options {}

/// The URLs of a `--redlock` list, each checked.
fn urls(list: &str) -> Result<Vec<String>, String> {
    list.split(',')
        .map(str::trim)
        .map(|u| match u.strip_prefix("redis://") {
            Some(rest) if rest.contains(':') => Ok(u.to_string()),
            _ => Err(format!(
                "--redlock: {:?} is not a master URL like redis://127.0.0.1:6379/",
                redact_url(u)
            )),
        })
        .collect()
}

impl Describe for Redlock {
    const ABOUT: About = About::new(
        "redlock",
        "--redlock redis://host:port/,... or --spawn-redlock[=5]; wall time",
        Sharing::Shared("one connection to each master (no session: an expiry per key on each)"),
    )
    .examples(
        "
  bench-harness --backend redlock --spawn-redlock --threads 8 --faults master-wipe:200ms@5s
      Redlock on 5 masters the harness starts, one restarted without its data every 5 s",
    );
    type Client = RedisMasters;
    const ENTRIES: &'static [Entry<RedisMasters>] = &ALGORITHMS;
}

impl ParseOptions for Redlock {
    type Options = Options;
    type Args = Options;
    const CONFIGURED_BY: &'static [&'static str] = &["redlock", "spawn_redlock"];

    fn spawns_server(&self, o: &Options) -> bool {
        o.spawn.is_some()
    }

    fn topology(&self, o: &Options) -> String {
        match (o.spawn, &o.redlock) {
            (Some(n), _) => format!("×{n}"),
            (None, Some(list)) => format!("×{}", list.split(',').count()),
            (None, None) => String::new(),
        }
    }

    fn clustered(&self) -> Option<Options> {
        Some(Options { spawn: Some(DEFAULT_MASTERS), ..Default::default() })
    }

    fn parse(&self, m: &ArgMatches) -> Result<Options, String> {
        let mut o = Options::from_arg_matches(m).map_err(|e| e.to_string())?;
        o.redlock = o.redlock.filter(|u| !u.trim().is_empty());
        if let Some(list) = &o.redlock {
            urls(list)?;
        }
        Ok(o)
    }

    fn address(&self, o: &Options) -> String {
        match (o.spawn, &o.redlock) {
            (Some(n), _) => format!("{n} independent redis-servers started by the harness"),
            (None, Some(list)) => list.split(',').map(redact_url).collect::<Vec<_>>().join(","),
            (None, None) => "no masters (give --redlock URL,... or --spawn-redlock)".into(),
        }
    }

    fn describe(&self, o: &Options, s: &AlgorithmSettings) -> String {
        format!("redlock on {}, TTL {}", self.address(o), crate::dist::format_duration(s.ttl))
    }

    fn fault_kinds(&self, o: &Options) -> &'static [FaultKind] {
        if o.spawn.is_some() {
            server_faults::masters_kinds()
        } else {
            &[]
        }
    }

    fn redacted(&self, o: &Options) -> Options {
        let mut o = o.clone();
        o.redlock =
            o.redlock.map(|list| list.split(',').map(redact_url).collect::<Vec<_>>().join(","));
        o
    }
}

impl Open for Redlock {
    async fn open<'a>(&'a self, options: Options, setup: EngineSetup<'a>) -> OpenResult {
        let (urls, faults) = match (options.spawn, &options.redlock) {
            (Some(n), _) => on_masters(n).await?,
            (None, Some(list)) => (urls(list)?, ServerFaults::new(None, None)),
            (None, None) => {
                return Err(
                    "the redlock backend needs masters: --redlock URL,... or --spawn-redlock"
                        .into(),
                )
            }
        };
        let connector = Connector { urls, namespace: setup.namespace.to_string() };
        Opened::probe(connector, setup.settings, faults).await
    }
}

/// `n` independent masters the harness starts: their URLs (at their proxies), and the master
/// faults on them.
async fn on_masters(n: u16) -> Result<(Vec<String>, ServerFaults), String> {
    let masters = test_servers::Redis::masters(true);
    server_faults::start_cluster(&format!("--spawn-redlock={n}"), masters, n.into(), |c| c.urls())
        .await
}

/// A contender's connections to every master, keys under the run's namespace.
struct Connector {
    urls: Vec<String>,
    namespace: String,
}

impl Connect for Connector {
    type Engine = Redlock;

    /// Connections to every master (`via` is always `None`: no contender faults here).
    async fn connect(&self, _via: Via, requests: RequestHook) -> Connected<Self> {
        let config = RedisConnectConfig {
            connect_timeout: CONNECT_TIMEOUT,
            key_prefix: format!("bench-harness:{}:", self.namespace),
            requests,
            ..RedisConnectConfig::default()
        };
        RedisMasters::connect_with(&self.urls, config)
            .await
            .map_err(|e| format!("cannot reach the Redlock masters (--redlock): {e}"))
    }

    fn kind(request: &Request<'_>) -> Kind {
        super::redis::command_kind(request)
    }
}

/// Redlock's settings for a run: its TTL, the contender's seed (values and retry delays).
fn config(ctx: &ClientContext, s: &AlgorithmSettings) -> RedlockConfig {
    RedlockConfig::new(s.scaled(s.ttl), ctx.seed)
}

/// The algorithms on independent masters, in the order they run.
static ALGORITHMS: [Entry<RedisMasters>; 2] =
    [Entry::mutex(&REDLOCK, build_plain), Entry::mutex(&REDLOCK_FENCED, build_fenced)];

fn build_plain(masters: RedisMasters, ctx: ClientContext, s: &AlgorithmSettings) -> BuildFuture {
    let variant = RedlockVariant::Plain(config(&ctx, s));
    Box::pin(async move { masters.locker(&ctx.owner, variant) })
}

fn build_fenced(masters: RedisMasters, ctx: ClientContext, s: &AlgorithmSettings) -> BuildFuture {
    let variant = RedlockVariant::Fenced(config(&ctx, s));
    Box::pin(async move { masters.locker(&ctx.owner, variant) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_lists_are_checked_and_passwords_redacted() {
        assert_eq!(urls("redis://a:1/, redis://b:2/").unwrap(), ["redis://a:1/", "redis://b:2/"]);
        let err = urls("redis://:secret@a:1/,b:2").unwrap_err();
        assert!(err.contains("\"b:2\"") && !err.contains("secret"), "{err}");
        let o = Options { redlock: Some("redis://:pw@a:1/,redis://b:2/".into()), spawn: None };
        let shown = Redlock.address(&Redlock.redacted(&o));
        assert_eq!(shown, "redis://***@a:1/,redis://b:2/");
    }
}
