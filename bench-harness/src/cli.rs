//! The command line (clap derive). [`Cli`] parses; [`RunArgs::to_config`] turns the flags into
//! a [`RunConfig`].

use crate::config::{BackendKind, BackoffPreset, ClockMode, Latency, RunConfig, TimeSourceKind};
use crate::dist::{parse_duration, parse_positive_duration, Dist};
use clap::{Args, Parser, Subcommand};
use lock_core::store::Consistency;
use std::path::PathBuf;
use std::time::Duration;

const AFTER_HELP: &str = "\
Examples:
  bench-harness --threads 64
      every algorithm in turn, 64 contenders on one lock, 60 s of simulated time;
      prints the comparison and writes out/summary.json, out/grants.csv and charts
  bench-harness -a queue --poll-interval 5ms --hold uniform:1ms..10ms
  bench-harness --threads 16 --locks 4 --think exp:20ms --skew 5ms --time-source hlc
  bench-harness --latency 0 --replicas 1          a store without latency
  bench-harness --clock wall --duration 10s --threads 8
  bench-harness --backend cassandra --nodes 10.0.0.1:9042,10.0.0.2:9042 --threads 16
      shadow, queue and bakery on a real Cassandra/ScyllaDB cluster (wall time;
      keyspace distributed_locks, created if missing; LOCK_CASSANDRA_NODES works too)
  bench-harness --backend cassandra --nodes 127.0.0.1:9042 --processes 4 --threads 64
      64 contenders spread over 4 worker processes of this program, one merged result
  bench-harness --backend redis --redis redis://127.0.0.1:6379/ --threads 8
      jedis and redis-token on a real redis-server (--ttl is the lock's expiry)
  bench-harness --backend zookeeper --zookeeper 127.0.0.1:2181 --threads 8
      the ZooKeeper recipe, each contender on its own session (--ttl: session timeout)
  bench-harness sweep                             regenerate results/ (the thesis's benchmark)
  bench-harness engines --redis URL --zookeeper HOSTS
      Redis, ZooKeeper and the embedded store side by side in wall time at 1, 8, 64
      contenders, into results/engines/ (what scripts/compare-engines.sh runs)
  bench-harness list                              algorithms per backend

Each contender loops: request the lock, hold it, release it, think, until the duration ends.
Durations: 800us, 5ms, 1.5s, 2m. Distributions (--hold, --think): 5ms (fixed),
uniform:1ms..10ms, exp:5ms (exponential with that mean).

The embedded store (default backend) models a LAN Cassandra cluster: 3 replicas, reads and
writes at QUORUM, and a round trip to one replica of 800us plus a uniform 0-400us of jitter
(--latency 800us+400us, mean 1 ms), drawn per replica and request; a QUORUM request completes
when 2 replicas answered. In simulated time (the default) every delay is a tokio sleep on a
paused clock: a 60 s run takes seconds and the same --seed gives byte-identical results.

Real servers (--backend cassandra, redis, zookeeper) run in wall time (the default for them;
--clock simulated is refused) on the system clock. Each run uses a namespace of its own on the
server (row-key prefix, key prefix, znode root). An unreachable server fails within 15 s
naming its address. Store load is counted for the embedded store and Cassandra (requests sent
per table); for Redis and ZooKeeper it is reported as n/a. --processes P spreads the
contenders over P worker processes (real servers only); their grant logs, stamped with the
system clock, are merged before any metric is computed.

Output (--out DIR): summary.json (configuration and every metric), grants.csv (one row per
grant), latency_cdf.png/.svg, timeline.png, grants_per_contender.png; written as soon as each
algorithm's run ends.

Exit status: 0 success, 1 the run failed (e.g. the output directory cannot be written, a
server cannot be reached), 2 usage error.";

/// Measure distributed lock algorithms side by side under contention.
#[derive(Parser, Debug)]
#[command(
    name = "bench-harness",
    version,
    about = "Measure distributed lock algorithms side by side: N contenders, acquisition latency, throughput, handoff gap, fairness, store load and safety, with charts",
    after_help = AFTER_HELP,
    args_conflicts_with_subcommands = true,
    args_override_self = true
)]
pub struct Cli {
    /// What to do (default: run).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The run's settings when no command is given.
    #[command(flatten)]
    pub run: RunArgs,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the benchmark once per algorithm (the default).
    Run(RunArgs),
    /// Regenerate the thesis's benchmark into results/: sweeps over contenders (1 to 256),
    /// the queue lock's poll interval and clock skew, charts and results/README.md.
    Sweep(SweepArgs),
    /// Compare the engines in wall time: Redis (jedis, redis-token), ZooKeeper, Cassandra and
    /// the embedded store (shadow, queue, bakery) at several contention levels, into
    /// results/engines/ (JSON, chart, README table). Used by scripts/compare-engines.sh.
    Engines(EnginesArgs),
    /// List the algorithms per backend.
    List,
    /// Internal: one worker process of `--processes P` (reads its orders on stdin).
    #[command(hide = true)]
    Worker,
}

/// Settings shared by a run and a sweep.
#[derive(Args, Debug, Clone)]
pub struct ScenarioArgs {
    /// Algorithms to run, comma-separated (default: every algorithm registered for the backend).
    #[arg(short, long, value_delimiter = ',', value_parser = algorithm_name)]
    pub algorithms: Vec<String>,
    /// Lock ids; contender i asks for lock i % K.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub locks: u32,
    /// Hold and think times.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Embedded store: round trip to one replica, FIXED[+JITTER] (uniform jitter).
    #[arg(long, value_name = "FIXED+JITTER", default_value = "800us+400us")]
    pub latency: Latency,
    /// Embedded store: number of replicas.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub replicas: u32,
    /// Consistency of every read and write: ONE, QUORUM or ALL.
    #[arg(long, default_value = "QUORUM")]
    pub consistency: Consistency,
    /// Clock skew: each contender's clock is offset by a value drawn uniformly in ±SKEW (seeded).
    #[arg(long, value_name = "SKEW", default_value = "0", value_parser = parse_duration, allow_hyphen_values = true)]
    pub skew: Duration,
    /// What orders the queue lock's waiters.
    #[arg(long, value_enum, default_value_t = TimeSourceKind::Local)]
    pub time_source: TimeSourceKind,
    /// Lease TTL and poll interval.
    #[command(flatten)]
    pub timing: TimingArgs,
    /// The shadow lock's backoff between attempts.
    #[arg(long, value_enum, default_value_t = BackoffPreset::Thesis)]
    pub backoff: BackoffPreset,
    /// Seed of every random choice (store latencies, skews, hold and think times, backoff).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the locks live (real servers run in wall time).
    #[arg(long, value_enum, default_value_t = BackendKind::Embedded)]
    pub backend: BackendKind,
    /// Cassandra/ScyllaDB contact points, host:port[,host:port...] [default: 127.0.0.1:9042].
    #[arg(long, value_name = "HOST:PORT,...", env = "LOCK_CASSANDRA_NODES")]
    pub nodes: Option<String>,
    /// Cassandra keyspace of the lock tables (created if missing) [default: distributed_locks].
    #[arg(long, env = "LOCK_CASSANDRA_KEYSPACE")]
    pub keyspace: Option<String>,
    /// Redis server URL, redis://host:port/ or redis://host:port/DB [default: redis://127.0.0.1:6379/].
    #[arg(long, value_name = "URL", env = "LOCK_REDIS_URL")]
    pub redis: Option<String>,
    /// ZooKeeper connect string, host:port[,host:port...] [default: 127.0.0.1:2181].
    #[arg(long, value_name = "HOST:PORT,...", env = "LOCK_ZOOKEEPER_HOSTS")]
    pub zookeeper: Option<String>,
    /// Embedded store: how long tombstones stay before they may be purged [default: 100 round
    /// trips, at least 100ms].
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub gc_grace: Option<Duration>,
}

/// What each contender does around its holds: the hold and think time distributions (a run,
/// a sweep and `engines` alike).
#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Hold time distribution: 5ms, uniform:1ms..10ms or exp:5ms.
    #[arg(
        long,
        value_name = "DIST",
        default_value = "5ms",
        allow_hyphen_values = true
    )]
    pub hold: Dist,
    /// Think time between a release and the next request.
    #[arg(
        long,
        value_name = "DIST",
        default_value = "exp:5ms",
        allow_hyphen_values = true
    )]
    pub think: Dist,
}

/// The locks' lease TTL and poll interval (a run, a sweep and `engines` alike).
#[derive(Args, Debug, Clone)]
pub struct TimingArgs {
    /// Lease TTL of every cell (renewed every TTL/2); the Redis locks' expiry; the ZooKeeper
    /// session timeout.
    #[arg(long, default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// The queue lock's wait between two reads of the queue.
    #[arg(long, default_value = "20ms", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub poll_interval: Duration,
}

/// The settings of one run.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Contenders (the thesis's threads).
    #[arg(short = 't', long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub threads: u32,
    /// How long contenders keep asking [default: 60s simulated, 10s wall].
    #[arg(short, long, value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// simulated: paused tokio clock, costs no wall time (embedded store only); wall: real
    /// time [default: simulated on the embedded store, wall on real servers].
    #[arg(long, value_enum)]
    pub clock: Option<ClockMode>,
    /// Worker processes of this program sharing the contenders (real servers only); their
    /// grant logs are merged before the metrics.
    #[arg(short = 'P', long, value_name = "P", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub processes: u32,
    /// Output directory.
    #[arg(short, long, value_name = "DIR", default_value = "out")]
    pub out: PathBuf,
    /// No progress bars or status lines (the table is still printed).
    #[arg(short, long)]
    pub quiet: bool,
    /// The scenario.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
}

/// The settings of a sweep.
#[derive(Args, Debug, Clone)]
pub struct SweepArgs {
    /// Output directory (charts, sweep.json, README.md).
    #[arg(short, long, value_name = "DIR", default_value = "results")]
    pub out: PathBuf,
    /// Contender counts of the contention sweep.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128,256", value_parser = clap::value_parser!(u32).range(1..))]
    pub contenders: Vec<u32>,
    /// Simulated duration of each point (large contender counts get less, see --help of the
    /// README) [default: 60s, 10s with --quick].
    #[arg(short, long, value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Option<Duration>,
    /// OS threads running sweep points in parallel, each with its own paused runtime.
    #[arg(short, long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    /// A small sweep (few points, short runs) to check the pipeline.
    #[arg(long)]
    pub quick: bool,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// The base scenario every point varies.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
}

/// The settings of `bench-harness engines`.
#[derive(Args, Debug, Clone)]
// The shared flags mean the same here; `engines --help` keeps its own shorter wording.
#[command(
    mut_arg("hold", |a| a.help("Hold time distribution")),
    mut_arg("think", |a| a.help("Think time distribution")),
    mut_arg("ttl", |a| a.help("Lease TTL, Redis expiry, ZooKeeper session timeout")),
    mut_arg("poll_interval", |a| a.help("Poll interval of the polling locks (queue, bakery)"))
)]
pub struct EnginesArgs {
    /// Output directory (engines.json, engines.png/.svg, README.md). When it is called
    /// `engines` and its parent holds the sweep's README.md, that README's engines section is
    /// regenerated too.
    #[arg(short, long, value_name = "DIR", default_value = "results/engines")]
    pub out: PathBuf,
    /// Contender counts.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64", value_parser = clap::value_parser!(u32).range(1..))]
    pub contenders: Vec<u32>,
    /// Wall time of each run (the drain of waiting requests may add up to as much again).
    #[arg(short, long, default_value = "10s", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Duration,
    /// Include Redis (jedis, redis-token) at this URL.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// Include ZooKeeper at this connect string.
    #[arg(long, value_name = "HOST:PORT,...")]
    pub zookeeper: Option<String>,
    /// Include Cassandra (shadow, queue, bakery) at these contact points.
    #[arg(long, value_name = "HOST:PORT,...", env = "LOCK_CASSANDRA_NODES")]
    pub nodes: Option<String>,
    /// Leave the embedded store (in wall time) out.
    #[arg(long)]
    pub no_embedded: bool,
    /// Before measuring a real server, run each of its algorithms this long with 8
    /// contenders, unrecorded (a fresh JVM runs ZooKeeper's first requests slowly); 0: none.
    #[arg(long, default_value = "2s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub warm_up: Duration,
    /// Hold and think times.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Lease TTL and poll interval.
    #[command(flatten)]
    pub timing: TimingArgs,
    /// Seed of the contenders' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No progress bars or status lines.
    #[arg(short, long)]
    pub quiet: bool,
    /// Measure nothing: redraw the chart and regenerate the READMEs from the engines.json
    /// already in --out.
    #[arg(long)]
    pub redraw: bool,
}

fn algorithm_name(s: &str) -> Result<String, String> {
    let name = s.trim();
    if crate::registry::is_known(name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "unknown algorithm '{name}' (known: {})",
            crate::registry::names().join(", ")
        ))
    }
}

impl ScenarioArgs {
    /// The scenario part of a [`RunConfig`] (threads, duration and clock left at defaults).
    pub fn apply(&self, cfg: &mut RunConfig) {
        cfg.backend = self.backend;
        cfg.algorithms = self.algorithms.clone();
        cfg.locks = self.locks as usize;
        cfg.hold = self.workload.hold;
        cfg.think = self.workload.think;
        cfg.latency = self.latency;
        cfg.replicas = self.replicas as usize;
        cfg.consistency = self.consistency;
        cfg.skew = self.skew;
        cfg.time_source = self.time_source;
        cfg.ttl = self.timing.ttl;
        cfg.poll_interval = self.timing.poll_interval;
        cfg.backoff = self.backoff;
        cfg.gc_grace = self
            .gc_grace
            .unwrap_or_else(|| RunConfig::auto_gc_grace(&self.latency));
        cfg.seed = self.seed;
        cfg.nodes.clear();
        cfg.keyspace = None;
        cfg.redis = None;
        cfg.zookeeper = None;
        // Connection settings are kept only for the backend they belong to, so that a
        // variable set in the environment does not show up in an embedded run's results.
        match self.backend {
            BackendKind::Embedded => {}
            BackendKind::Cassandra => {
                cfg.nodes = self
                    .nodes
                    .as_deref()
                    .map(|n| {
                        // Normalized (default port added) when valid; checked in
                        // `check_connection`.
                        lock_cassandra::config::parse_nodes(n).unwrap_or_else(|_| {
                            n.split(',').map(|x| x.trim().to_string()).collect()
                        })
                    })
                    .unwrap_or_default();
                cfg.keyspace = self.keyspace.clone().filter(|k| !k.trim().is_empty());
            }
            BackendKind::Redis => cfg.redis = self.redis.clone().filter(|u| !u.trim().is_empty()),
            BackendKind::Zookeeper => {
                cfg.zookeeper = self.zookeeper.clone().filter(|h| !h.trim().is_empty())
            }
        }
    }

    /// Checks the connection settings of the chosen backend (contact points, keyspace).
    pub fn check_connection(&self, cfg: &RunConfig) -> Result<(), String> {
        if cfg.backend == BackendKind::Cassandra {
            if let Some(nodes) = &self.nodes {
                lock_cassandra::config::parse_nodes(nodes)
                    .map_err(|e| format!("--nodes {nodes}: {}", e.0))?;
            }
            crate::backend::cassandra_config(cfg)?;
        }
        Ok(())
    }
}

impl RunArgs {
    /// The run's configuration, with `--algorithms` resolved against the registry.
    pub fn to_config(&self) -> Result<RunConfig, String> {
        let mut cfg = RunConfig::default();
        self.scenario.apply(&mut cfg);
        cfg.threads = self.threads as usize;
        cfg.processes = self.processes as usize;
        cfg.clock = self.clock.unwrap_or(if cfg.backend.is_remote() {
            ClockMode::Wall
        } else {
            ClockMode::Simulated
        });
        self.scenario.check_connection(&cfg)?;
        cfg.duration = self.duration.unwrap_or(match cfg.clock {
            ClockMode::Simulated => RunConfig::DEFAULT_SIMULATED_DURATION,
            ClockMode::Wall => RunConfig::DEFAULT_WALL_DURATION,
        });
        crate::backend::check_available(cfg.backend)?;
        let entries = crate::registry::resolve(&cfg.algorithms, cfg.backend)?;
        cfg.algorithms = entries.iter().map(|e| e.name.to_string()).collect();
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_are_the_documented_scenario() {
        let cli = Cli::try_parse_from(["bench-harness"]).unwrap();
        let cfg = cli.run.to_config().unwrap();
        assert_eq!(cfg.threads, 64);
        assert_eq!(cfg.duration, Duration::from_secs(60));
        assert_eq!(cfg.replicas, 3);
        assert_eq!(cfg.consistency, Consistency::Quorum);
        assert_eq!(cfg.latency, Latency::LAN);
        assert_eq!(
            cfg.algorithms,
            crate::registry::names_for(BackendKind::Embedded)
        );
        let wall = Cli::try_parse_from(["bench-harness", "--clock", "wall"])
            .unwrap()
            .run
            .to_config()
            .unwrap();
        assert_eq!(wall.duration, Duration::from_secs(10));
    }

    #[test]
    fn bad_values_are_usage_errors() {
        for args in [
            &["bench-harness", "--threads", "0"][..],
            &["bench-harness", "--algorithms", "paxos"],
            &["bench-harness", "--duration", "0s"],
            &["bench-harness", "--duration", "-5s"],
            &["bench-harness", "--hold", "gauss:1ms"],
            &["bench-harness", "--consistency", "TWO"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
        }
        let cli = Cli::try_parse_from([
            "bench-harness",
            "-a",
            "queue,shadow",
            "--skew",
            "2ms",
            "--hold",
            "uniform:1ms..3ms",
        ])
        .unwrap();
        let cfg = cli.run.to_config().unwrap();
        assert_eq!(cfg.algorithms, ["shadow", "queue"]);
        assert_eq!(cfg.skew, Duration::from_millis(2));
    }

    #[test]
    fn real_backends_default_to_wall_time_and_refuse_simulated_time() {
        let cli = Cli::try_parse_from(["bench-harness", "--backend", "redis"]).unwrap();
        let cfg = cli.run.to_config().unwrap();
        assert_eq!(cfg.clock, ClockMode::Wall);
        assert_eq!(cfg.duration, Duration::from_secs(10));
        assert_eq!(cfg.algorithms, ["jedis", "redis-token"]);
        let cli = Cli::try_parse_from([
            "bench-harness",
            "--backend",
            "zookeeper",
            "--clock",
            "simulated",
        ])
        .unwrap();
        let e = cli.run.to_config().unwrap_err();
        assert!(
            e.contains("--clock simulated") && e.contains("zookeeper"),
            "{e}"
        );
    }

    #[test]
    fn algorithms_are_checked_against_the_backend() {
        let cli =
            Cli::try_parse_from(["bench-harness", "--backend", "redis", "-a", "queue"]).unwrap();
        let e = cli.run.to_config().unwrap_err();
        assert!(
            e.contains("does not run on the redis backend")
                && e.contains("available on --backend redis: jedis, redis-token"),
            "{e}"
        );
    }

    #[test]
    fn connection_settings_belong_to_their_backend() {
        let cli = Cli::try_parse_from([
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
        assert_eq!(cfg.nodes, ["10.0.0.1:9042", "10.0.0.2:9042"]);
        assert_eq!(cfg.keyspace.as_deref(), Some("bench"));
        assert_eq!(cfg.redis, None);
        assert_eq!(cfg.processes, 2);
        assert_eq!(cfg.algorithms, ["shadow", "queue", "bakery"]);
        let cli = Cli::try_parse_from(["bench-harness", "--nodes", "10.0.0.1:9042"]).unwrap();
        assert!(cli.run.to_config().unwrap().nodes.is_empty());
        let cli = Cli::try_parse_from([
            "bench-harness",
            "--backend",
            "cassandra",
            "--nodes",
            "a:b:c",
        ])
        .unwrap();
        assert!(cli.run.to_config().unwrap_err().contains("--nodes"));
        let cli = Cli::try_parse_from(["bench-harness", "--processes", "2"]).unwrap();
        assert!(cli.run.to_config().unwrap_err().contains("--processes"));
    }
}
