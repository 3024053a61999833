//! The flags that several commands share, and the default command's own: the scenario
//! ([`ScenarioArgs`]: algorithms, locks, workload, consistency, clocks, timing, backend, faults
//! and every engine's options) and [`RunArgs`]. Each other command owns its flags beside its
//! code (`check`, and each experiment), as cargo's commands do; [`crate::cli`] only composes
//! them.

use crate::config::{ClockMode, RunConfig};
use crate::dist::{parse_duration, parse_positive_duration, Dist};
use crate::engines::{self, BackoffPreset, EngineArgs, EngineRef, TimeSourceKind};
use crate::faults::FaultPlan;
use crate::keys::KeyDist;
use crate::primitive::Primitive;
use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::Args;
use lock_core::store::Consistency;
use std::path::PathBuf;
use std::time::Duration;

/// `--backend`: one of the registered engines. The engines this build leaves out are listed
/// too, so that asking for one says how to build it in rather than that it does not exist.
pub fn engine_parser() -> impl TypedValueParser<Value = EngineRef> {
    let names =
        engines::names().into_iter().chain(engines::NOT_BUILT.iter().map(|(name, _)| *name));
    PossibleValuesParser::new(names).try_map(|s| engines::parse_engine(&s))
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
    /// simulated: a virtual clock that costs no wall time (embedded store only); wall: real
    /// time [default: simulated on the embedded store, wall on real servers].
    #[arg(long, value_enum)]
    pub clock: Option<ClockMode>,
    /// Worker processes of this program sharing the contenders (real servers only); their
    /// grant logs are merged before the metrics.
    #[arg(short = 'P', long, value_name = "P", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub processes: u32,
    /// Clients of the engine the contenders share.
    #[command(flatten)]
    pub sessions: SessionArgs,
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
    /// Print every column of the comparison table (it is wider than a terminal); by default it
    /// keeps within 120 characters. summary.json and the CSV files always hold every figure.
    #[arg(long)]
    pub wide: bool,
    /// The scenario.
    #[command(flatten)]
    pub scenario: ScenarioArgs,
}

/// Settings shared by a run and a sweep.
#[derive(Args, Debug, Clone)]
pub struct ScenarioArgs {
    /// Algorithms to run, comma-separated (default: every algorithm registered for the backend).
    #[arg(short, long, value_delimiter = ',', value_parser = algorithm_name)]
    pub algorithms: Vec<String>,
    /// The locks and how each acquire picks one.
    #[command(flatten)]
    pub keys: LockArgs,
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
    #[arg(long, value_name = "FAULTS", default_value = "none")]
    pub faults: FaultPlan,
    /// What the contenders ask for: mutex; rw:P, a reader-writer lock where each ask reads
    /// with probability P% (rw:90); semaphore:N[/K], K (default 1) of N permits per ask;
    /// election, each ask a campaign and each hold a leadership. The algorithms that have
    /// one are run (`list` shows them); every grant is checked against the primitive's rule.
    #[arg(long, value_name = "PRIMITIVE", default_value = "mutex")]
    pub primitive: Primitive,
    /// Every engine's own options (address, latency model, ...).
    #[command(flatten)]
    pub engines: EngineArgs,
}

/// The locks the contenders ask for, and how each acquire picks one (a run, a sweep and
/// `engines` alike).
#[derive(Args, Debug, Clone)]
pub struct LockArgs {
    /// Lock ids: lock-0 to lock-(K-1).
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub locks: u32,
    /// Which lock each acquire asks for: fixed (contender i always asks for lock i mod K), uniform
    /// (each acquire draws one of the K uniformly) or zipf:S (each acquire draws lock r-1 with
    /// probability proportional to 1/r^S, S > 0: lock-0 is the hottest; zipf:0.99 is the
    /// usual skewed workload). Draws come from each contender's seeded RNG.
    #[arg(long, value_name = "DIST", default_value = "fixed")]
    pub key_dist: KeyDist,
}

impl LockArgs {
    /// Sets the locks of `cfg`.
    pub fn apply(&self, cfg: &mut RunConfig) {
        cfg.locks = self.locks as usize;
        cfg.key_dist = self.key_dist;
    }
}

/// How the contenders reach the engine: a client each, or N shared ones (a run and `engines`
/// alike).
#[derive(Args, Debug, Clone, Default)]
pub struct SessionArgs {
    /// Share N clients of the engine among the contenders: contender i locks through client
    /// i mod N, still under its own owner id, as in a service with one session per process and
    /// many threads locking [default: a client of its own per contender]. A shared client is
    /// one session (lease, connection): when it is lost, every owner on it loses its locks at
    /// once. Real servers only, one process, no pause, crash or partition faults; what each
    /// engine shares: "Shared sessions" below.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub sessions: Option<u32>,
}

impl SessionArgs {
    /// Sets the shared clients of `cfg`.
    pub fn apply(&self, cfg: &mut RunConfig) {
        cfg.sessions = self.sessions.map(|n| n as usize);
    }
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

/// A known algorithm's name, or an error listing the known ones (for `--algorithms`).
pub fn algorithm_name(s: &str) -> Result<String, String> {
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
        self.keys.apply(cfg);
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
        cfg.primitive = self.primitive;
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
        self.sessions.apply(&mut cfg);
        if let Some(clock) = self.clock {
            cfg.clock = clock;
        }
        cfg.duration = self.duration.unwrap_or(match cfg.clock {
            ClockMode::Simulated => RunConfig::DEFAULT_SIMULATED_DURATION,
            ClockMode::Wall => RunConfig::DEFAULT_WALL_DURATION,
        });
        let named = !cfg.algorithms.is_empty();
        let algorithms = engines::resolve(&cfg.algorithms, cfg.backend)?;
        let algorithms = engines::offering(algorithms, cfg.primitive, cfg.backend, named)?;
        cfg.algorithms = algorithms.iter().map(|a| a.name.to_string()).collect();
        cfg.validate()?;
        Ok(cfg)
    }
}
