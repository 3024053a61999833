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
  bench-harness sweep                             regenerate results/ (the thesis's benchmark)
  bench-harness list                              the registered algorithms

Each contender loops: request the lock, hold it, release it, think, until the duration ends.
Durations: 800us, 5ms, 1.5s, 2m. Distributions (--hold, --think): 5ms (fixed),
uniform:1ms..10ms, exp:5ms (exponential with that mean).

The embedded store (default backend) models a LAN Cassandra cluster: 3 replicas, reads and
writes at QUORUM, and a round trip to one replica of 800us plus a uniform 0-400us of jitter
(--latency 800us+400us, mean 1 ms), drawn per replica and request; a QUORUM request completes
when 2 replicas answered. In simulated time (the default) every delay is a tokio sleep on a
paused clock: a 60 s run takes seconds and the same --seed gives byte-identical results.

Output (--out DIR): summary.json (configuration and every metric), grants.csv (one row per
grant), latency_cdf.png/.svg, timeline.png, grants_per_contender.png; written as soon as each
algorithm's run ends.

Exit status: 0 success, 1 the run failed (e.g. the output directory cannot be written),
2 usage error.";

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
    /// List the registered algorithms and the backends.
    List,
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
    /// Lease TTL of every cell (renewed every TTL/2).
    #[arg(long, default_value = "10s", value_parser = parse_duration, allow_hyphen_values = true)]
    pub ttl: Duration,
    /// The queue lock's wait between two reads of the queue.
    #[arg(long, default_value = "20ms", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub poll_interval: Duration,
    /// The shadow lock's backoff between attempts.
    #[arg(long, value_enum, default_value_t = BackoffPreset::Thesis)]
    pub backoff: BackoffPreset,
    /// Seed of every random choice (store latencies, skews, hold and think times, backoff).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Where the locks live.
    #[arg(long, value_enum, default_value_t = BackendKind::Embedded)]
    pub backend: BackendKind,
    /// Embedded store: how long tombstones stay before they may be purged [default: 100 round
    /// trips, at least 100ms].
    #[arg(long, value_parser = parse_duration, allow_hyphen_values = true)]
    pub gc_grace: Option<Duration>,
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
    /// simulated: paused tokio clock, costs no wall time (embedded store only); wall: real time.
    #[arg(long, value_enum, default_value_t = ClockMode::Simulated)]
    pub clock: ClockMode,
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

fn algorithm_name(s: &str) -> Result<String, String> {
    let name = s.trim();
    if crate::registry::lookup(name).is_some() {
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
        cfg.hold = self.hold;
        cfg.think = self.think;
        cfg.latency = self.latency;
        cfg.replicas = self.replicas as usize;
        cfg.consistency = self.consistency;
        cfg.skew = self.skew;
        cfg.time_source = self.time_source;
        cfg.ttl = self.ttl;
        cfg.poll_interval = self.poll_interval;
        cfg.backoff = self.backoff;
        cfg.gc_grace = self
            .gc_grace
            .unwrap_or_else(|| RunConfig::auto_gc_grace(&self.latency));
        cfg.seed = self.seed;
    }
}

impl RunArgs {
    /// The run's configuration, with `--algorithms` resolved against the registry.
    pub fn to_config(&self) -> Result<RunConfig, String> {
        let mut cfg = RunConfig::default();
        self.scenario.apply(&mut cfg);
        cfg.threads = self.threads as usize;
        cfg.clock = self.clock;
        cfg.duration = self.duration.unwrap_or(match self.clock {
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
        assert_eq!(cfg.algorithms, crate::registry::names());
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
    fn unbuilt_backends_say_so() {
        let cli = Cli::try_parse_from(["bench-harness", "--backend", "redis", "--clock", "wall"])
            .unwrap();
        let e = cli.run.to_config().unwrap_err();
        assert!(e.contains("not yet built in this binary"), "{e}");
    }
}
