//! The resolved settings of one benchmark run: [`RunConfig`]. It is echoed whole into
//! `summary.json`, so a result file says exactly what produced it.
//!
//! Each layer reads the part it needs: the engine its own options ([`RunConfig::engine`]) and
//! [`RunConfig::engine_setup`]; the algorithms [`RunConfig::settings`]; the contenders the
//! workload, the duration and their seeds and skews.

use crate::dist::{format_duration, serde_duration, Dist};
use crate::engines::{
    AlgorithmSettings, BackoffPreset, EngineOptions, EngineRef, EngineSetup, TimeSourceKind,
};
use crate::faults::FaultPlan;
use crate::keys::{KeyDist, Keys};
use crate::primitive::Primitive;
use lock_core::store::Consistency;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// Which clock the run is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// lock-core's simulation executor (`lock_core::rt::Simulation`): one thread, a virtual
    /// clock, every delay simulated; a 60 s run takes a moment, and the same seed gives the
    /// same numbers. In-process engines only.
    Simulated,
    /// Real time on a multi-thread runtime.
    Wall,
}

crate::engines::algorithm::named!(ClockMode {
    Simulated => "simulated",
    Wall => "wall",
});

/// Everything that defines one benchmark run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Where the locks live.
    pub backend: EngineRef,
    /// Simulated or wall time.
    pub clock: ClockMode,
    /// The algorithms, run one after another on fresh stores.
    pub algorithms: Vec<String>,
    /// Contenders (the thesis's threads).
    pub threads: usize,
    /// Lock ids; with [`KeyDist::Fixed`] contender `i` asks for lock `i % locks`.
    pub locks: usize,
    /// How each acquire picks its lock among the `locks` ([`crate::keys`]); `fixed` (the
    /// default) is left out of result files.
    #[serde(default, skip_serializing_if = "KeyDist::is_fixed")]
    pub key_dist: KeyDist,
    /// How long a contender holds the lock.
    pub hold: Dist,
    /// How long a contender waits between a release and its next request.
    pub think: Dist,
    /// How long contenders keep asking (on the run's clock).
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// The engine's own options (address, latency model, …), beside the other settings in
    /// result files.
    #[serde(flatten)]
    pub engine: EngineOptions,
    /// Consistency of every read and write.
    pub consistency: Consistency,
    /// Contender `i`'s clock is offset by a value drawn uniformly in `±skew`.
    #[serde(with = "serde_duration")]
    pub skew: Duration,
    /// What orders the queue lock's entries.
    pub time_source: TimeSourceKind,
    /// Lease TTL of every cell.
    #[serde(with = "serde_duration")]
    pub ttl: Duration,
    /// The queue lock's wait between two reads of the queue.
    #[serde(with = "serde_duration")]
    pub poll_interval: Duration,
    /// The shadow lock's backoff.
    pub backoff: BackoffPreset,
    /// Seed of every random choice (store, contenders, skews).
    pub seed: u64,
    /// Worker processes sharing the contenders (servers outside this process only); 1: all in
    /// this process.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub processes: usize,
    /// Clients of the engine the contenders share (`--sessions N`): contender `i` locks
    /// through client `i % N` under its own owner id. `None` (the default, left out of result
    /// files): a client of its own per contender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<usize>,
    /// What the contenders ask for (`--primitive`): the mutex (the default, left out of
    /// result files), a reader-writer lock, a semaphore or an election.
    #[serde(default, skip_serializing_if = "Primitive::is_mutex_ref")]
    pub primitive: Primitive,
    /// Faults injected during the run (`--faults`); none by default.
    #[serde(default, skip_serializing_if = "FaultPlan::is_empty")]
    pub faults: FaultPlan,
    /// Read the store's counters every this long during the window as well as at its end (the
    /// long-run experiment's time series); in-process runs only, not written to result files.
    #[serde(skip)]
    pub sample_every: Option<Duration>,
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

impl RunConfig {
    /// Default number of contenders.
    pub const DEFAULT_THREADS: usize = 64;
    /// Default run length in simulated time.
    pub const DEFAULT_SIMULATED_DURATION: Duration = Duration::from_secs(60);
    /// Default run length in wall time.
    pub const DEFAULT_WALL_DURATION: Duration = Duration::from_secs(10);

    /// The default scenario on `engine`, with its default options and clock.
    pub fn on(engine: EngineRef) -> RunConfig {
        RunConfig {
            backend: engine,
            engine: engine.default_options(),
            clock: if engine.in_process() { ClockMode::Simulated } else { ClockMode::Wall },
            duration: if engine.in_process() {
                Self::DEFAULT_SIMULATED_DURATION
            } else {
                Self::DEFAULT_WALL_DURATION
            },
            ..RunConfig::default()
        }
    }

    /// How much slower than the model the tokio clock runs: [`SIMULATED_TIME_SCALE`] in
    /// simulated time, 1 in wall time. See [`SIMULATED_TIME_SCALE`].
    pub fn time_scale(&self) -> u32 {
        match self.clock {
            ClockMode::Simulated => SIMULATED_TIME_SCALE,
            ClockMode::Wall => 1,
        }
    }

    /// A duration of the model on the tokio clock.
    pub fn scaled(&self, d: Duration) -> Duration {
        d * self.time_scale()
    }

    /// What the algorithms read of this run.
    pub fn settings(&self) -> AlgorithmSettings {
        AlgorithmSettings {
            poll_interval: self.poll_interval,
            backoff: self.backoff,
            time_scale: self.time_scale(),
            ttl: self.ttl,
            consistency: self.consistency,
            time_source: self.time_source,
            primitive: self.primitive,
        }
    }

    /// What the engine needs to open in `namespace`.
    pub fn engine_setup<'a>(&'a self, namespace: &'a str) -> EngineSetup<'a> {
        EngineSetup {
            options: &self.engine,
            namespace,
            seed: self.seed,
            settings: self.settings(),
            service_skews: self.service_skews(crate::engines::cell_model::TIME_SERVICE_REPLICAS),
            fault_kinds: self.faults.kinds().collect(),
            lock_ids: self.lock_ids(),
        }
    }

    /// Where the engine is, for messages.
    pub fn address(&self) -> String {
        self.backend.address(&self.engine)
    }

    /// The mean round trip of the engine's latency model, when it is a model; `None` for real
    /// servers, whose round trip the harness does not know.
    pub fn modelled_round_trip(&self) -> Option<Duration> {
        self.backend.modelled_round_trip(&self.engine)
    }

    /// The contenders worker process `worker` of [`RunConfig::processes`] runs: a contiguous
    /// block of the global contender indices (blocks differ in size by at most one).
    pub fn worker_contenders(&self, worker: usize) -> std::ops::Range<usize> {
        let p = self.processes.max(1);
        let at = |w: usize| w * self.threads / p;
        at(worker)..at(worker + 1)
    }

    /// The settings as they may be written into result files (passwords redacted).
    pub fn redacted(&self) -> RunConfig {
        RunConfig { engine: self.backend.redacted(&self.engine), ..self.clone() }
    }

    /// The lock id of lock `index`.
    pub fn lock_id(index: usize) -> String {
        format!("lock-{index}")
    }

    /// The owner id of contender `index`.
    pub fn owner_id(index: usize) -> String {
        format!("c{index:04}")
    }

    /// The owner id of contender `index` after its `life`-th crash (`life` 0: the first).
    pub fn owner_id_of_life(index: usize, life: u32) -> String {
        match life {
            0 => Self::owner_id(index),
            n => format!("c{index:04}.{n}"),
        }
    }

    /// The lock contender `index` asks for under [`KeyDist::Fixed`] (its own lock).
    pub fn lock_of(&self, contender: usize) -> usize {
        contender % self.locks.max(1)
    }

    /// How many locks the run may ask for: every one of [`RunConfig::locks`] when each acquire
    /// draws its lock, the contenders' own ones under [`KeyDist::Fixed`] (fewer when there
    /// are more locks than contenders).
    pub fn locks_asked(&self) -> usize {
        let locks = self.locks.max(1);
        match self.key_dist {
            KeyDist::Fixed => locks.min(self.threads.max(1)),
            _ => locks,
        }
    }

    /// The ids of the locks the run may ask for ([`RunConfig::locks_asked`]), in index order:
    /// what the engine is told and what the contenders name.
    pub fn lock_ids(&self) -> Vec<String> {
        (0..self.locks_asked()).map(RunConfig::lock_id).collect()
    }

    /// The run's locks and how each acquire picks one (built once, shared by the contenders).
    pub fn keys(&self) -> Keys {
        Keys::new(self.key_dist, self.locks.max(1), self.lock_ids())
    }

    /// The shared client contender `index` locks through, with `--sessions N`: `index % N`.
    pub fn session_of(&self, index: usize) -> Option<usize> {
        self.sessions.map(|n| index % n.max(1))
    }

    /// Each contender's clock skew in microseconds, drawn uniformly in `±skew` from the seed
    /// (the same for every algorithm of the run).
    pub fn contender_skews(&self) -> Vec<i64> {
        skews(self.seed, 0x5EED_5CE3, self.threads, self.skew)
    }

    /// The time-service replicas' clock skews, drawn like the contenders'.
    pub fn service_skews(&self, replicas: usize) -> Vec<i64> {
        skews(self.seed, 0x7153_EC1C, replicas, self.skew)
    }

    /// The seed of contender `index`'s random choices.
    pub fn contender_seed(&self, index: usize) -> u64 {
        mix(self.seed ^ mix(index as u64 + 1))
    }

    /// Checks what clap cannot: combinations of settings.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_counts()?;
        if self.ttl < Duration::from_secs(1) {
            return Err(format!(
                "--ttl must be at least 1s (CQL TTLs are whole seconds), got {}",
                format_duration(self.ttl)
            ));
        }
        if self.poll_interval.is_zero() {
            return Err("--poll-interval must be above zero".into());
        }
        self.validate_engine()
    }

    fn validate_counts(&self) -> Result<(), String> {
        if self.threads == 0 {
            return Err("--threads must be at least 1".into());
        }
        if self.locks == 0 {
            return Err("--locks must be at least 1".into());
        }
        if self.duration.is_zero() {
            return Err("--duration must be above zero".into());
        }
        if self.algorithms.is_empty() {
            return Err("no algorithm to run".into());
        }
        if self.processes == 0 {
            return Err("--processes must be at least 1".into());
        }
        Ok(())
    }

    /// What the engine allows: simulated time in this process only, worker processes on a
    /// shared server only.
    fn validate_engine(&self) -> Result<(), String> {
        self.backend.check_options(&self.engine).map_err(|e| e.to_string())?;
        let in_process: Vec<&str> =
            crate::engines::ENGINES.iter().filter(|e| e.in_process()).map(|e| e.name()).collect();
        if self.clock == ClockMode::Simulated && !self.backend.in_process() {
            return Err(format!(
                "--clock simulated needs an engine inside this process ({}); the {} backend is a real server and runs in wall time (use --clock wall, the default for it)",
                in_process.join(", "),
                self.backend
            ));
        }
        if self.processes > 1 && self.backend.in_process() {
            return Err(format!(
                "--processes {} needs a backend that several processes can share (a server); the {} backend lives inside one process",
                self.processes, self.backend
            ));
        }
        if self.processes > 1 && self.backend.spawns_server(&self.engine) {
            return Err(format!(
                "--processes {} with a server the harness starts: every worker would start its own; start one server yourself and give its address",
                self.processes
            ));
        }
        self.validate_sessions()?;
        self.validate_faults()?;
        if self.processes > self.threads {
            return Err(format!(
                "--processes {} is more than --threads {}: every worker process needs at least one contender",
                self.processes, self.threads
            ));
        }
        Ok(())
    }
}

impl RunConfig {
    /// `--sessions`: an engine whose clients can serve several owners, one process, and no
    /// fault that hits one contender's own connection.
    fn validate_sessions(&self) -> Result<(), String> {
        let Some(n) = self.sessions else { return Ok(()) };
        if n == 0 {
            return Err("--sessions must be at least 1".into());
        }
        if let crate::engines::Sharing::Refused(why) = self.backend.sessions() {
            return Err(format!(
                "--sessions: the {} backend's contenders cannot share clients: {why}",
                self.backend
            ));
        }
        if self.processes > 1 {
            return Err(format!(
                "--sessions {n} with --processes {}: a client lives in one process, and contender i's is i mod {n} across every process; drop one of the two",
                self.processes
            ));
        }
        let one_contender = [
            crate::faults::FaultKind::Pause,
            crate::faults::FaultKind::Crash,
            crate::faults::FaultKind::Partition,
            crate::faults::FaultKind::SilentPartition,
        ];
        if let Some(kind) = self.faults.kinds().find(|k| one_contender.contains(k)) {
            return Err(format!(
                "--sessions {n} with {kind} faults: {kind} hits one contender through a connection of its own (its proxy), and with --sessions contenders share theirs; drop --sessions or the fault"
            ));
        }
        Ok(())
    }

    /// Faults the engine can inject, in this process.
    fn validate_faults(&self) -> Result<(), String> {
        if self.faults.is_empty() {
            return Ok(());
        }
        let process_pause =
            self.faults.kinds().any(|k| k == crate::faults::FaultKind::ProcessPause);
        if self.processes > 1 {
            // The parent stops and continues whole workers; faults that hit one contender or
            // the engine need the contenders in the nemesis's process.
            return match self.faults.kinds().find(|k| *k != crate::faults::FaultKind::ProcessPause) {
                Some(kind) => Err(format!(
                    "with --processes the only fault is process-pause: {kind} needs every contender in one process (drop --processes)"
                )),
                None => Ok(()),
            };
        }
        if process_pause {
            return Err(
                "process-pause stops a worker process: it needs --processes P (P ≥ 2)".into()
            );
        }
        let can = self.backend.fault_kinds(&self.engine);
        for kind in self.faults.kinds() {
            if !can.contains(&kind) {
                let names: Vec<&str> = can.iter().map(|k| k.name()).collect();
                let hint = if kind == crate::faults::FaultKind::ServerRestart
                    && !self.backend.in_process()
                {
                    " (server-restart needs a server the harness starts itself: see the backend's --spawn option in --help)"
                } else if kind == crate::faults::FaultKind::Terminate {
                    " (an administrator ends the holders' sessions: --backend postgres or mariadb, on the server --spawn-postgres or --spawn-mariadb starts, or on yours with --postgres-admin-user or --mariadb-admin-user)"
                } else if kind == crate::faults::FaultKind::LaggedLeaderKill {
                    " (it holds back a Redis master's replication to its replicas: --backend redis --spawn-redis=sentinel)"
                } else if crate::faults::FaultKind::LEADER.contains(&kind) {
                    " (the leader faults need a cluster the harness starts itself: --spawn-etcd=3, --spawn-zookeeper=3, --spawn-service=3 or --spawn-redis=sentinel)"
                } else if matches!(
                    kind,
                    crate::faults::FaultKind::FollowerPause
                        | crate::faults::FaultKind::ClusterRestart
                ) {
                    " (it needs a cluster that elects a leader, started by the harness: --spawn-etcd=3, --spawn-zookeeper=3 or --spawn-service=3)"
                } else if crate::faults::FaultKind::MEMBER.contains(&kind) {
                    " (the master faults need independent masters the harness starts itself: --backend redlock --spawn-redlock)"
                } else {
                    ""
                };
                return Err(format!(
                    "the {} backend cannot inject {kind} faults{hint} (it can: {})",
                    self.backend,
                    if names.is_empty() { "none".to_string() } else { names.join(", ") }
                ));
            }
        }
        Ok(())
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        let engine = EngineRef::default_engine();
        RunConfig {
            backend: engine,
            clock: ClockMode::Simulated,
            algorithms: Vec::new(),
            threads: Self::DEFAULT_THREADS,
            locks: 1,
            hold: Dist::Fixed(Duration::from_millis(5)),
            think: Dist::Exp { mean: Duration::from_millis(5) },
            duration: Self::DEFAULT_SIMULATED_DURATION,
            engine: engine.default_options(),
            consistency: Consistency::Quorum,
            skew: Duration::ZERO,
            time_source: TimeSourceKind::Local,
            ttl: lock_core::context::DEFAULT_TTL,
            poll_interval: lock_queue::DEFAULT_POLL_INTERVAL,
            backoff: BackoffPreset::Thesis,
            seed: 1,
            processes: 1,
            sessions: None,
            key_dist: KeyDist::Fixed,
            primitive: Primitive::Mutex,
            faults: FaultPlan::default(),
            sample_every: None,
        }
    }
}

impl fmt::Display for RunConfig {
    /// One line describing the scenario.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let skew = if self.skew.is_zero() {
            String::new()
        } else {
            format!(", skew ±{}", format_duration(self.skew))
        };
        let keys = match self.key_dist {
            KeyDist::Fixed => String::new(),
            drawn => format!(" (each acquire draws one, {drawn})"),
        };
        write!(
            f,
            "{} contenders on {} lock{}{keys}, hold {}, think {}, {} {} time",
            self.threads,
            self.locks,
            if self.locks == 1 { "" } else { "s" },
            self.hold,
            self.think,
            format_duration(self.duration),
            self.clock,
        )?;
        if self.processes > 1 {
            write!(f, " in {} worker processes", self.processes)?;
        }
        if let Some(n) = self.sessions {
            write!(f, " sharing {n} session{}", if n == 1 { "" } else { "s" })?;
        }
        write!(
            f,
            "; {}{skew}, time source {}, poll {}, backoff {}, seed {}",
            self.backend.describe(&self.engine, &self.settings()),
            self.time_source,
            format_duration(self.poll_interval),
            self.backoff.name(),
            self.seed,
        )?;
        if !self.faults.is_empty() {
            write!(f, "; faults {}", self.faults)?;
        }
        Ok(())
    }
}

/// Simulated time is dilated by this factor.
///
/// In simulated time the harness multiplies every duration it hands to the store and the
/// algorithms (latencies, timeouts, TTLs, poll intervals, backoff, holds, thinks, skews, the
/// run's length, the time service's period) by this factor and divides every time it
/// measures by it: one microsecond of the model is one millisecond of the simulation's
/// clock. The simulation's timers are exact to the nanosecond, so the model keeps a
/// resolution of a picosecond, far below anything it draws; the larger numbers cost nothing.
/// The factor matters where the clock is tokio's instead, whose timers round every deadline
/// up to the next millisecond: on a paused tokio runtime a model scaled by it still keeps
/// microseconds. In wall time nothing is scaled (and the real timers round the same way:
/// sub-millisecond latencies are not faithful there).
pub const SIMULATED_TIME_SCALE: u32 = 1000;

/// SplitMix64's finalizer: spreads seeds so that neighbouring indices get unrelated streams.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn skews(seed: u64, salt: u64, n: usize, skew: Duration) -> Vec<i64> {
    let max = skew.as_micros().min(i64::MAX as u128) as i64;
    let mut rng = StdRng::seed_from_u64(mix(seed ^ salt));
    (0..n).map(|_| if max == 0 { 0 } else { rng.random_range(-max..=max) }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> EngineRef {
        EngineRef::all().find(|e| !e.in_process()).expect("a server engine")
    }

    #[test]
    fn skews_are_bounded_seeded_and_shared() {
        let cfg =
            RunConfig { skew: Duration::from_millis(10), threads: 100, ..RunConfig::default() };
        let s = cfg.contender_skews();
        assert_eq!(s.len(), 100);
        assert!(s.iter().all(|x| x.abs() <= 10_000));
        assert!(s.iter().any(|x| *x != 0));
        assert_eq!(s, cfg.contender_skews());
        assert!(RunConfig::default().contender_skews().iter().all(|x| *x == 0));
    }

    #[test]
    fn config_round_trips_through_json() {
        let cfg = RunConfig { algorithms: vec!["queue".into()], ..RunConfig::default() };
        let json = serde_json::to_string(&cfg).unwrap();
        assert!(json.contains("\"duration\":\"60s\""), "{json}");
        assert!(json.contains("\"latency\":\"800us+400us\""), "{json}");
        let back: RunConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cfg);
        for e in EngineRef::all() {
            let cfg = RunConfig::on(e);
            let back: RunConfig =
                serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
            assert_eq!(back, cfg, "{e}");
        }
    }

    #[test]
    fn validation_explains_itself() {
        let ok = RunConfig { algorithms: vec!["queue".into()], ..RunConfig::default() };
        assert!(ok.validate().is_ok());
        let e = RunConfig { threads: 0, ..ok.clone() }.validate().unwrap_err();
        assert!(e.contains("--threads"));
        let e = RunConfig {
            clock: ClockMode::Simulated,
            algorithms: vec!["x".into()],
            ..RunConfig::on(server())
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("--clock wall"), "{e}");
        let e = RunConfig { processes: 2, ..ok.clone() }.validate().unwrap_err();
        assert!(e.contains("lives inside one process"), "{e}");
        let e = RunConfig {
            algorithms: vec!["x".into()],
            threads: 2,
            processes: 3,
            ..RunConfig::on(server())
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("at least one contender"), "{e}");
    }

    #[test]
    fn workers_get_disjoint_blocks_covering_every_contender() {
        for (threads, processes) in [(4, 2), (64, 3), (5, 5), (7, 2), (1, 1)] {
            let cfg = RunConfig { threads, processes, ..RunConfig::default() };
            let all: Vec<usize> = (0..processes).flat_map(|w| cfg.worker_contenders(w)).collect();
            assert_eq!(all, (0..threads).collect::<Vec<_>>());
            assert!((0..processes).all(|w| !cfg.worker_contenders(w).is_empty()));
        }
    }

    #[test]
    fn sessions_need_an_engine_that_shares_one_process_and_no_contender_fault() {
        let sharing = EngineRef::all()
            .find(|e| matches!(e.sessions(), crate::engines::Sharing::Shared(_)))
            .expect("an engine that shares clients");
        let ok = RunConfig {
            algorithms: vec![sharing.algorithm_names()[0].into()],
            threads: 8,
            sessions: Some(3),
            ..RunConfig::on(sharing)
        };
        assert_eq!(ok.validate(), Ok(()));
        assert_eq!((0..8).map(|i| ok.session_of(i)).collect::<Vec<_>>(), {
            [0, 1, 2, 0, 1, 2, 0, 1].map(Some).to_vec()
        });
        assert_eq!(RunConfig::default().session_of(5), None);
        for e in EngineRef::all() {
            let cfg = RunConfig {
                algorithms: vec![e.algorithm_names()[0].into()],
                sessions: Some(2),
                ..RunConfig::on(e)
            };
            match e.sessions() {
                crate::engines::Sharing::Shared(_) => assert_eq!(cfg.validate(), Ok(()), "{e}"),
                crate::engines::Sharing::Refused(why) => {
                    let err = cfg.validate().unwrap_err();
                    assert!(err.contains("--sessions") && err.contains(e.name()), "{err}");
                    assert!(err.contains(why), "{err}");
                }
            }
        }
        let e = RunConfig { processes: 2, ..ok.clone() }.validate().unwrap_err();
        assert!(e.contains("--sessions") && e.contains("--processes"), "{e}");
        for fault in ["pause:1s@5s", "crash:1s@5s", "partition:1s@5s"] {
            let faults = fault.parse().unwrap();
            let e = RunConfig { faults, ..ok.clone() }.validate().unwrap_err();
            assert!(e.contains("--sessions") && e.contains(&fault[..4]), "{e}");
        }
        let jumps = RunConfig { faults: "clock-jump:1s@5s".parse().unwrap(), ..ok.clone() };
        assert_eq!(jumps.validate(), Ok(()), "a clock jump hits the contender's own clock");
        let e = RunConfig { sessions: Some(0), ..ok }.validate().unwrap_err();
        assert!(e.contains("at least 1"), "{e}");
    }

    #[test]
    fn the_locks_asked_are_the_contenders_own_under_fixed_and_all_k_when_drawn() {
        let cfg = RunConfig { threads: 4, locks: 10, ..RunConfig::default() };
        assert_eq!(cfg.lock_ids(), ["lock-0", "lock-1", "lock-2", "lock-3"]);
        assert_eq!(cfg.engine_setup("ns").lock_ids, cfg.lock_ids());
        let drawn = RunConfig { key_dist: KeyDist::Zipf { s: 0.99 }, ..cfg.clone() };
        assert_eq!(drawn.locks_asked(), 10);
        assert_eq!(drawn.lock_ids().last().map(String::as_str), Some("lock-9"));
        let few = RunConfig { threads: 8, locks: 3, ..RunConfig::default() };
        assert_eq!(few.locks_asked(), 3);
        assert_eq!((0..8).map(|i| few.lock_of(i)).max(), Some(2));
        let json = serde_json::to_string(&drawn).unwrap();
        assert!(json.contains("\"key_dist\":\"zipf:0.99\""), "{json}");
        assert_eq!(serde_json::from_str::<RunConfig>(&json).unwrap(), drawn);
    }

    #[test]
    fn default_configs_serialize_only_their_engines_fields() {
        let json = serde_json::to_string(&RunConfig::default()).unwrap();
        for key in ["nodes", "keyspace", "redis", "zookeeper", "processes", "sessions", "key_dist"]
        {
            assert!(!json.contains(&format!("\"{key}\"")), "{key} in {json}");
        }
    }
}
