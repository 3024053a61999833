//! The command line (clap derive). [`Cli`] parses; [`RunArgs::to_config`] turns the flags into
//! a [`RunConfig`]. Every engine adds its own options ([`EngineArgs`]) and help examples; only
//! the chosen engine's options are read.

use crate::config::{ClockMode, RunConfig};
use crate::dist::{parse_duration, parse_positive_duration, Dist};
use crate::engines::{self, BackoffPreset, EngineArgs, EngineRef, TimeSourceKind};
use crate::faults::FaultPlan;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use lock_core::store::Consistency;
use std::path::PathBuf;
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  bench-harness --threads 64
      every algorithm in turn, 64 contenders on one lock, 60 s of simulated time;
      prints the comparison and writes out/summary.json, out/grants.csv and charts
  bench-harness -a queue --poll-interval 5ms --hold uniform:1ms..10ms
  bench-harness --threads 16 --locks 4 --think exp:20ms --skew 5ms --time-source hlc
  bench-harness --latency 0 --replicas 1          a store without latency
  bench-harness --clock wall --duration 10s --threads 8";

const MORE_EXAMPLES: &str =
    "  bench-harness sweep                             regenerate results/ (the thesis's benchmark)
  bench-harness longrun                           an hour per algorithm: what tombstones do
  bench-harness engines --redis URL --zookeeper HOSTS
      the engines pointed at, side by side with the embedded store in wall time at 1, 8
      and 64 contenders, into results/engines/ (what scripts/compare-engines.sh runs)
  bench-harness list                              algorithms per backend";

const ABOUT_RUNS: &str = "\
Each contender loops: request the lock, hold it, release it, think, until the duration ends.
Durations: 800us, 5ms, 1.5s, 2m. Distributions (--hold, --think): 5ms (fixed),
uniform:1ms..10ms, exp:5ms (exponential with that mean).

Servers (every backend but the in-process ones) run in wall time (the default for them;
--clock simulated is refused) on the system clock. Each run uses a namespace of its own on the
server (row-key prefix, key prefix, znode root). An unreachable server fails within 15 s
naming its address. Store load is counted where the engine counts requests; elsewhere it is
reported as n/a. --processes P spreads the contenders over P worker processes (servers
only); their grant logs, stamped with the system clock, are merged before any metric is
computed.";

const ABOUT_OUTPUT: &str = "\
Output (--out DIR): summary.json (configuration and every metric), grants.csv (one row per
grant), latency_cdf.png/.svg, timeline.png, grants_per_contender.png; written as soon as each
algorithm's run ends. The table's errors column counts lock errors, release errors and leases
lost while holding; the first error of each algorithm that had one is printed under it.

Faults (--faults KIND:DURATION@PERIOD,...): each entry starts a fault every PERIOD (the first
at a seeded offset) that lasts DURATION; every fault is logged in faults.csv. Kinds: pause (a
holder, when there is one, freezes: its requests, lease renewals and critical section; it then
carries on without re-checking), crash (a contender dies where it is, leaving its cells behind,
and comes back DURATION later under a new owner id), clock-jump (a contender's clock steps by
±DURATION, then back), partition (a holder is cut off from the store), replica-stop and
replica-lag[/lag=1s/drop=0.1] (the embedded store: a replica stops and misses writes, or
applies them late and drops some), server-restart (servers the harness can restart). Every
critical section writes to a fenced resource at its grant and just before release; it rejects a
token below the highest it accepted (resource.csv). The table's safety columns then count
overlapping holds, stale writes accepted and rejected, and leases lost.
  bench-harness --threads 16 --duration 120s --consistency ONE \\
      --faults replica-stop:5s@15s,replica-lag:5s@15s --check
  bench-harness --ttl 2s --faults pause:5s@20s --check

Exit status: 0 success, 1 the run failed (e.g. the output directory cannot be written, a
server cannot be reached), 2 usage error, 3 --check (or check) found an overlap or an accepted
stale write.";

/// The text after `--help`'s options: examples, how runs work and what each engine is (each
/// engine adds its own examples and paragraph), output and exit status.
fn after_help() -> String {
    let mut text = String::from(EXAMPLES);
    for e in engines::ENGINES {
        text.push_str(e.help_examples());
    }
    text.push('\n');
    text.push_str(MORE_EXAMPLES);
    text.push_str("\n\n");
    text.push_str(ABOUT_RUNS);
    for e in engines::ENGINES {
        if !e.help_notes().is_empty() {
            text.push_str("\n\n");
            text.push_str(e.help_notes());
        }
    }
    text.push_str("\n\n");
    text.push_str(ABOUT_OUTPUT);
    text
}

/// `--backend`: one of the registered engines. The engines this build leaves out are listed
/// too, so that asking for one says how to build it in rather than that it does not exist.
fn engine_parser() -> impl TypedValueParser<Value = EngineRef> {
    let names =
        engines::names().into_iter().chain(engines::NOT_BUILT.iter().map(|(name, _)| *name));
    PossibleValuesParser::new(names).try_map(|s| engines::parse_engine(&s))
}

/// Measure distributed lock algorithms side by side under contention.
#[derive(Parser, Debug)]
#[command(
    name = "bench-harness",
    version,
    about = "Measure distributed lock algorithms side by side: N contenders, acquisition latency, throughput, handoff gap, fairness, store load and safety, with charts",
    after_help = after_help(),
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
    /// Run every algorithm for an hour of simulated time on one lock and show what Cassandra's
    /// tombstones do to it: throughput, latency and tombstones per read per minute, when reads
    /// would fail, and a calibration against a real node; into results/longrun/.
    Longrun(LongrunArgs),
    /// Compare the engines in wall time: Redis (jedis, redis-token), ZooKeeper, Cassandra and
    /// the embedded store (shadow, queue, bakery) at several contention levels, into
    /// results/engines/ (JSON, chart, README table). Used by scripts/compare-engines.sh.
    Engines(EnginesArgs),
    /// Every Cassandra-model lock on the embedded store under each fault kind in turn (no
    /// fault, pause past the lease, crash, clock jump, partition, replica stop at QUORUM and
    /// ONE, replica lag at ONE): overlaps, stale writes with and without fencing, leases lost,
    /// unavailability; into results/safety/.
    Safety(SafetyArgs),
    /// Soak the Cassandra-model locks: at least a million grants each on the embedded store at
    /// QUORUM under crashes, partitions, clock jumps and replica faults, every grant checked
    /// by the checker; exits 3 if any run was unsafe. Into out/soak/ (a table in README.md).
    Soak(SoakArgs),
    /// Check a run's output directory: recompute every safety figure from grants.csv,
    /// resource.csv and faults.csv alone, name the overlapping grants, and exit with 3 on any
    /// overlap or any stale write the fenced resource accepted (0 when safe, 1 when the files
    /// cannot be read).
    Check(CheckArgs),
    /// List the algorithms per backend.
    List,
    /// Internal: one worker process of `--processes P` (reads its orders on stdin).
    #[command(hide = true)]
    Worker,
}

/// The settings of `safety`.
#[derive(Args, Debug, Clone)]
pub struct SafetyArgs {
    /// Contenders per run (one lock).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: u32,
    /// Simulated time per run on the embedded store.
    #[arg(long, default_value = "120s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Wall time per run on a server (Redis, ZooKeeper, etcd).
    #[arg(long, default_value = "30s", value_parser = parse_positive_duration)]
    pub server_duration: Duration,
    /// Leave out the rows on servers the harness starts itself (Redis, ZooKeeper, and etcd in a
    /// build with it: they need those servers installed, and take a few minutes of wall time).
    #[arg(long)]
    pub no_servers: bool,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory.
    #[arg(short, long, value_name = "DIR", default_value = "results/safety")]
    pub out: PathBuf,
    /// OS threads running runs in parallel, each with its own paused runtime.
    #[arg(short, long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

/// The settings of `soak`.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// Grants to check per algorithm at least (runs are repeated with the next seed until
    /// there are this many).
    #[arg(long, default_value_t = 1_000_000)]
    pub grants: u64,
    /// Algorithms (default: every Cassandra-model algorithm).
    #[arg(short, long, value_delimiter = ',', value_parser = algorithm_name)]
    pub algorithms: Vec<String>,
    /// Contenders per run; contender i asks for lock i % LOCKS.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: u32,
    /// Lock ids per run.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    pub locks: u32,
    /// Simulated time of one run.
    #[arg(long, default_value = "120s", value_parser = parse_positive_duration)]
    pub run_length: Duration,
    /// The fault schedule.
    #[arg(long, value_name = "SPEC", default_value = crate::experiments::soak::DEFAULT_FAULTS)]
    pub faults: FaultPlan,
    /// Seed of the first run (run k uses SEED + k).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory.
    #[arg(short, long, value_name = "DIR", default_value = "out/soak")]
    pub out: PathBuf,
    /// No status lines.
    #[arg(short, long)]
    pub quiet: bool,
}

/// The settings of `check`.
#[derive(Args, Debug, Clone)]
pub struct CheckArgs {
    /// The run's output directory (holding grants.csv, resource.csv and faults.csv).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Lease TTL of the run, by which each fault window is extended when unavailability is
    /// attributed to fault kinds [default: the ttl in DIR/summary.json, else 10s].
    #[arg(long, value_parser = parse_duration)]
    pub ttl: Option<Duration>,
    /// Overlapping grants to name per algorithm at most.
    #[arg(long, default_value_t = 10)]
    pub show: usize,
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
    /// Where the locks live (servers run in wall time; `list` shows each one's algorithms).
    #[arg(long, value_name = "ENGINE", default_value_t = EngineRef::default_engine(), value_parser = engine_parser())]
    pub backend: EngineRef,
    /// Faults to inject: KIND:DURATION@PERIOD, comma-separated, e.g. pause:5s@20s or
    /// replica-stop:5s@15s,replica-lag:5s@15s/lag=1s/drop=0.1 (see "Faults" below).
    #[arg(long, value_name = "SPEC", default_value = "none")]
    pub faults: FaultPlan,
    /// Every engine's own options (address, latency model, ...).
    #[command(flatten)]
    pub engines: EngineArgs,
}

/// What each contender does around its holds: the hold and think time distributions (a run,
/// a sweep and `engines` alike).
#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Hold time distribution: 5ms, uniform:1ms..10ms or exp:5ms.
    #[arg(long, value_name = "DIST", default_value = "5ms", allow_hyphen_values = true)]
    pub hold: Dist,
    /// Think time between a release and the next request.
    #[arg(long, value_name = "DIST", default_value = "exp:5ms", allow_hyphen_values = true)]
    pub think: Dist,
}

/// The locks' lease TTL and poll interval (a run, a sweep and `engines` alike).
#[derive(Args, Debug, Clone)]
pub struct TimingArgs {
    /// Lease TTL of every cell (renewed every TTL/2); the Redis locks' expiry; the ZooKeeper
    /// session timeout; the etcd lease TTL (rounded up to whole seconds).
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
    /// Run the checker on the output directory at the end (as `bench-harness check DIR`) and
    /// exit with its status: 3 when it finds an overlap or an accepted stale write.
    #[arg(long)]
    pub check: bool,
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

/// The settings of `bench-harness longrun`.
#[derive(Args, Debug, Clone)]
pub struct LongrunArgs {
    /// Output directory (longrun.json, longrun.png/.svg, README.md). When it is called
    /// `longrun` and its parent holds the sweep's README.md, that README's long-run section is
    /// regenerated too.
    #[arg(short, long, value_name = "DIR", default_value = "results/longrun")]
    pub out: PathBuf,
    /// Simulated length of each run.
    #[arg(short, long, default_value = "60m", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub duration: Duration,
    /// Length of the intervals the runs are cut into.
    #[arg(long, default_value = "1m", value_parser = parse_positive_duration, allow_hyphen_values = true)]
    pub interval: Duration,
    /// Contender counts.
    #[arg(long, value_delimiter = ',', default_value = "8,64", value_parser = clap::value_parser!(u32).range(1..))]
    pub contenders: Vec<u32>,
    /// Leave out the calibration against issue 11's real node (8 contenders, 180 s).
    #[arg(long)]
    pub no_calibration: bool,
    /// OS threads running runs in parallel, each with its own paused runtime.
    #[arg(short, long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// The scenario every run shares.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
}

/// The settings of `bench-harness engines`.
#[derive(Args, Debug, Clone)]
// The shared flags mean the same here; `engines --help` keeps its own shorter wording.
#[command(
    mut_arg("hold", |a| a.help("Hold time distribution")),
    mut_arg("think", |a| a.help("Think time distribution")),
    mut_arg("ttl", |a| a.help("Lease TTL, Redis expiry, ZooKeeper session timeout, etcd lease TTL (rounded up to whole seconds)")),
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
    /// The engines to compare, comma-separated [default: every engine this command or the
    /// environment points at (its address given), and the in-process ones].
    #[arg(long, value_delimiter = ',', value_parser = engine_parser())]
    pub engines: Vec<EngineRef>,
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
    /// Every engine's own options: an address given includes that engine.
    #[command(flatten)]
    pub engine_args: EngineArgs,
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
    if engines::is_known_algorithm(name) {
        Ok(name.to_string())
    } else {
        Err(format!(
            "unknown algorithm '{name}' (known: {})",
            engines::algorithm_names().join(", ")
        ))
    }
}

impl ScenarioArgs {
    /// The scenario part of a [`RunConfig`] (threads, duration and clock left at defaults),
    /// with the chosen engine's options read and checked.
    pub fn apply(&self, cfg: &mut RunConfig) -> Result<(), String> {
        cfg.backend = self.backend;
        cfg.engine = self.engines.options(self.backend)?;
        cfg.algorithms = self.algorithms.clone();
        cfg.locks = self.locks as usize;
        cfg.hold = self.workload.hold;
        cfg.think = self.workload.think;
        cfg.consistency = self.consistency;
        cfg.skew = self.skew;
        cfg.time_source = self.time_source;
        cfg.ttl = self.timing.ttl;
        cfg.poll_interval = self.timing.poll_interval;
        cfg.backoff = self.backoff;
        cfg.seed = self.seed;
        cfg.faults = self.faults.clone();
        Ok(())
    }
}

impl RunArgs {
    /// The run's configuration, with `--algorithms` resolved on the engine.
    pub fn to_config(&self) -> Result<RunConfig, String> {
        let mut cfg = RunConfig::on(self.scenario.backend);
        self.scenario.apply(&mut cfg)?;
        cfg.threads = self.threads as usize;
        cfg.processes = self.processes as usize;
        if let Some(clock) = self.clock {
            cfg.clock = clock;
        }
        cfg.duration = self.duration.unwrap_or(match cfg.clock {
            ClockMode::Simulated => RunConfig::DEFAULT_SIMULATED_DURATION,
            ClockMode::Wall => RunConfig::DEFAULT_WALL_DURATION,
        });
        let algorithms = engines::resolve(&cfg.algorithms, cfg.backend)?;
        cfg.algorithms = algorithms.iter().map(|a| a.name.to_string()).collect();
        cfg.validate()?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn config(args: &[&str]) -> Result<RunConfig, String> {
        let mut all = vec!["bench-harness"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all).unwrap().run.to_config()
    }

    #[test]
    fn the_cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn defaults_are_the_documented_scenario() {
        let cfg = config(&[]).unwrap();
        assert_eq!(cfg.threads, 64);
        assert_eq!(cfg.duration, Duration::from_secs(60));
        assert_eq!(cfg.consistency, Consistency::Quorum);
        assert_eq!(cfg.backend, EngineRef::default_engine());
        assert_eq!(cfg.engine, cfg.backend.default_options());
        assert_eq!(cfg.algorithms, cfg.backend.algorithm_names());
        let wall = config(&["--clock", "wall"]).unwrap();
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
            &["bench-harness", "--backend", "mongo"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{args:?}: {e}");
        }
        let cfg =
            config(&["-a", "queue,shadow", "--skew", "2ms", "--hold", "uniform:1ms..3ms"]).unwrap();
        assert_eq!(cfg.algorithms, ["shadow", "queue"]);
        assert_eq!(cfg.skew, Duration::from_millis(2));
    }

    #[test]
    fn an_engine_left_out_of_the_build_says_how_to_build_it_in() {
        // etcd is either built in (feature `etcd`) or named as left out, never unknown.
        let built = engines::names().contains(&"etcd");
        let left_out = engines::NOT_BUILT.iter().any(|(name, _)| *name == "etcd");
        assert!(built != left_out, "etcd built in: {built}, listed as left out: {left_out}");
        for (name, how) in engines::NOT_BUILT {
            assert!(!engines::names().contains(name), "{name} is built in and listed as left out");
            let e = Cli::try_parse_from(["bench-harness", "--backend", name]).unwrap_err();
            assert_eq!(e.exit_code(), 2);
            let text = e.to_string();
            assert!(text.contains("has no") && text.contains(how), "{text}");
        }
    }

    #[test]
    fn servers_default_to_wall_time_and_refuse_simulated_time() {
        for e in EngineRef::all().filter(|e| !e.in_process()) {
            let cfg = config(&["--backend", e.name()]).unwrap();
            assert_eq!(cfg.clock, ClockMode::Wall);
            assert_eq!(cfg.duration, Duration::from_secs(10));
            assert_eq!(cfg.algorithms, e.algorithm_names());
            let err = config(&["--backend", e.name(), "--clock", "simulated"]).unwrap_err();
            assert!(err.contains("--clock simulated") && err.contains(e.name()), "{err}");
        }
    }

    #[test]
    fn algorithms_are_checked_against_the_backend() {
        for e in EngineRef::all() {
            for other in EngineRef::all() {
                for a in other.algorithm_names() {
                    if e.algorithm(a).is_some() {
                        continue;
                    }
                    let err = config(&["--backend", e.name(), "-a", a]).unwrap_err();
                    assert!(
                        err.contains(&format!("does not run on the {e} backend"))
                            && err.contains(&format!("available on --backend {e}: ")),
                        "{err}"
                    );
                }
            }
        }
    }

    #[test]
    fn processes_need_a_server() {
        let err = config(&["--processes", "2"]).unwrap_err();
        assert!(err.contains("--processes"), "{err}");
    }

    #[test]
    fn help_lists_every_engine() {
        let help = Cli::command().render_long_help().to_string();
        for e in EngineRef::all() {
            assert!(help.contains(e.name()), "{} missing from --help", e.name());
        }
    }
}
