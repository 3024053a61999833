//! The resolved settings of one benchmark run: [`RunConfig`]. It is echoed whole into
//! `summary.json`, so a result file says exactly what produced it.

use crate::dist::{format_duration, parse_duration, serde_duration, Dist};
use lock_core::store::Consistency;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// `name()`, the name used on the command line and in result files, and a [`fmt::Display`]
/// that writes it, for an enum of settings.
macro_rules! named {
    ($ty:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $ty {
            /// The name used on the command line and in result files.
            pub fn name(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

/// Where the locks live.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The in-process Cassandra-model store of `lock-core` (nothing to start).
    Embedded,
    /// A Cassandra / ScyllaDB cluster.
    Cassandra,
    /// A `redis-server`.
    Redis,
    /// A ZooKeeper server.
    Zookeeper,
}

impl BackendKind {
    /// Every backend, in the order `list` shows them.
    pub const ALL: [BackendKind; 4] = [
        BackendKind::Embedded,
        BackendKind::Cassandra,
        BackendKind::Redis,
        BackendKind::Zookeeper,
    ];

    /// True for the servers outside this process (everything but the embedded store): they
    /// run in wall time only and can be shared by several worker processes.
    pub fn is_remote(self) -> bool {
        self != BackendKind::Embedded
    }

    /// True for the backends with the Cassandra cell model (`lock_core::CellStore`).
    pub fn is_cell_store(self) -> bool {
        matches!(self, BackendKind::Embedded | BackendKind::Cassandra)
    }
}

named!(BackendKind {
    Embedded => "embedded",
    Cassandra => "cassandra",
    Redis => "redis",
    Zookeeper => "zookeeper",
});

/// Which clock the run is measured on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ClockMode {
    /// A current-thread tokio runtime with a paused clock: every delay is simulated, a 60 s
    /// run takes a moment, and the same seed gives the same numbers. Embedded store only.
    Simulated,
    /// Real time on a multi-thread runtime.
    Wall,
}

named!(ClockMode {
    Simulated => "simulated",
    Wall => "wall",
});

/// What orders the queue lock's entries (SPEC 3.4).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum TimeSourceKind {
    /// Each contender's own (possibly skewed) clock.
    Local,
    /// A hybrid logical clock per contender over its skewed clock.
    Hlc,
    /// The thesis's replicated GlobalTime service (three service replicas updating every
    /// 500 ms, with clocks skewed like the contenders').
    Global,
}

named!(TimeSourceKind {
    Local => "local",
    Hlc => "hlc",
    Global => "global",
});

/// The shadow lock's backoff preset (`lock_shadow::Backoff::preset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BackoffPreset {
    /// Thesis listing 4: 0–1000 ms after `AnotherThreadIsOwner`, 0–50·attempt ms after
    /// `ConcurrentAttempt`.
    Thesis,
    /// The production successor: 0–50·⌊e^min(attempt,5)⌋ ms after `ConcurrentAttempt`.
    Production,
}

named!(BackoffPreset {
    Thesis => "thesis",
    Production => "production",
});

/// The embedded store's round trip to one replica: `fixed` plus a uniform `[0, jitter]`.
/// Written `FIXED+JITTER` (`800us+400us`), `FIXED` alone, or `0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// Part of every round trip.
    pub fixed: Duration,
    /// Upper bound of the uniform extra part.
    pub jitter: Duration,
}

impl Latency {
    /// No latency at all.
    pub const ZERO: Latency = Latency {
        fixed: Duration::ZERO,
        jitter: Duration::ZERO,
    };
    /// The default: a LAN cluster, 800 µs + up to 400 µs, i.e. about 1 ms per round trip.
    pub const LAN: Latency = Latency {
        fixed: Duration::from_micros(800),
        jitter: Duration::from_micros(400),
    };

    /// The mean round trip to one replica: `fixed + jitter / 2`. Handoff gaps are divided by
    /// it to express them in round trips.
    pub fn mean_round_trip(&self) -> Duration {
        self.fixed + self.jitter / 2
    }

    /// The store's latency model.
    pub fn model(&self) -> lock_core::embedded::LatencyModel {
        lock_core::embedded::LatencyModel::new(self.fixed, self.jitter)
    }
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.jitter.is_zero() {
            f.write_str(&format_duration(self.fixed))
        } else {
            write!(
                f,
                "{}+{}",
                format_duration(self.fixed),
                format_duration(self.jitter)
            )
        }
    }
}

impl FromStr for Latency {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (fixed, jitter) = match s.split_once('+') {
            Some((f, j)) => (parse_duration(f)?, parse_duration(j)?),
            None => (parse_duration(s)?, Duration::ZERO),
        };
        Ok(Latency { fixed, jitter })
    }
}

impl Serialize for Latency {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Latency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Everything that defines one benchmark run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    /// Where the locks live.
    pub backend: BackendKind,
    /// Simulated or wall time.
    pub clock: ClockMode,
    /// The algorithms, run one after another on fresh stores.
    pub algorithms: Vec<String>,
    /// Contenders (the thesis's threads).
    pub threads: usize,
    /// Lock ids; contender `i` asks for lock `i % locks`.
    pub locks: usize,
    /// How long a contender holds the lock.
    pub hold: Dist,
    /// How long a contender waits between a release and its next request.
    pub think: Dist,
    /// How long contenders keep asking (on the run's clock).
    #[serde(with = "serde_duration")]
    pub duration: Duration,
    /// Round trip to one store replica (embedded store).
    pub latency: Latency,
    /// Store replicas (embedded store).
    pub replicas: usize,
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
    /// How long tombstones stay before the embedded store may purge them.
    #[serde(with = "serde_duration")]
    pub gc_grace: Duration,
    /// Seed of every random choice (store, contenders, skews).
    pub seed: u64,
    /// Cassandra backend: contact points, `host:port` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Cassandra backend: the keyspace of the lock tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyspace: Option<String>,
    /// Redis backend: the server's URL (a password in it is redacted in result files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis: Option<String>,
    /// ZooKeeper backend: the connect string, `host:port[,host:port…]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zookeeper: Option<String>,
    /// Worker processes sharing the contenders (real backends only); 1: all in this process.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub processes: usize,
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
    /// Least tombstone grace of the embedded store in benchmarks (see
    /// [`RunConfig::auto_gc_grace`]).
    pub const MIN_GC_GRACE: Duration = Duration::from_millis(100);

    /// The default tombstone grace for a latency model: 100 times the longest round trip, and
    /// at least [`RunConfig::MIN_GC_GRACE`]. Far longer than any message is in flight, so a
    /// purged tombstone can never let a late write resurrect its cell; far shorter than
    /// Cassandra's 10 days, which would make every read of a queue row scan every tombstone
    /// of the run (a cost in simulation time only: the store's latency does not depend on it).
    pub fn auto_gc_grace(latency: &Latency) -> Duration {
        ((latency.fixed + latency.jitter) * 100).max(Self::MIN_GC_GRACE)
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

    /// The mean round trip to one replica.
    pub fn mean_round_trip(&self) -> Duration {
        self.latency.mean_round_trip()
    }

    /// The mean round trip of the latency model, when the store is the model (the embedded
    /// store); `None` for real servers, whose round trip the harness does not know.
    pub fn modelled_round_trip(&self) -> Option<Duration> {
        (self.backend == BackendKind::Embedded).then(|| self.mean_round_trip())
    }

    /// The contenders worker process `worker` of [`RunConfig::processes`] runs: a contiguous
    /// block of the global contender indices (blocks differ in size by at most one).
    pub fn worker_contenders(&self, worker: usize) -> std::ops::Range<usize> {
        let p = self.processes.max(1);
        let at = |w: usize| w * self.threads / p;
        at(worker)..at(worker + 1)
    }

    /// The settings as they may be written into result files: a password in the Redis URL
    /// is replaced by `***`.
    pub fn redacted(&self) -> RunConfig {
        let mut cfg = self.clone();
        cfg.redis = cfg.redis.as_deref().map(redact_url);
        cfg
    }

    /// The lock id of lock `index`.
    pub fn lock_id(index: usize) -> String {
        format!("lock-{index}")
    }

    /// The owner id of contender `index`.
    pub fn owner_id(index: usize) -> String {
        format!("c{index:04}")
    }

    /// The lock index contender `index` asks for.
    pub fn lock_of(&self, contender: usize) -> usize {
        contender % self.locks.max(1)
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
        if self.threads == 0 {
            return Err("--threads must be at least 1".into());
        }
        if self.locks == 0 {
            return Err("--locks must be at least 1".into());
        }
        if self.duration.is_zero() {
            return Err("--duration must be above zero".into());
        }
        if self.replicas == 0 {
            return Err("--replicas must be at least 1".into());
        }
        if self.algorithms.is_empty() {
            return Err("no algorithm to run".into());
        }
        if self.ttl < Duration::from_secs(1) {
            return Err(format!(
                "--ttl must be at least 1s (CQL TTLs are whole seconds), got {}",
                format_duration(self.ttl)
            ));
        }
        if self.poll_interval.is_zero() {
            return Err("--poll-interval must be above zero".into());
        }
        if self.clock == ClockMode::Simulated && self.backend != BackendKind::Embedded {
            return Err(format!(
                "--clock simulated needs the embedded store; the {} backend is a real server and runs in wall time (use --clock wall, the default for it)",
                self.backend
            ));
        }
        if self.processes == 0 {
            return Err("--processes must be at least 1".into());
        }
        if self.processes > 1 && !self.backend.is_remote() {
            return Err(format!(
                "--processes {} needs a backend that several processes can share (--backend cassandra, redis or zookeeper); the embedded store lives inside one process",
                self.processes
            ));
        }
        if self.processes > self.threads {
            return Err(format!(
                "--processes {} is more than --threads {}: every worker process needs at least one contender",
                self.processes, self.threads
            ));
        }
        Ok(())
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            backend: BackendKind::Embedded,
            clock: ClockMode::Simulated,
            algorithms: Vec::new(),
            threads: Self::DEFAULT_THREADS,
            locks: 1,
            hold: Dist::Fixed(Duration::from_millis(5)),
            think: Dist::Exp {
                mean: Duration::from_millis(5),
            },
            duration: Self::DEFAULT_SIMULATED_DURATION,
            latency: Latency::LAN,
            replicas: 3,
            consistency: Consistency::Quorum,
            skew: Duration::ZERO,
            time_source: TimeSourceKind::Local,
            ttl: lock_core::context::DEFAULT_TTL,
            poll_interval: lock_queue::DEFAULT_POLL_INTERVAL,
            backoff: BackoffPreset::Thesis,
            gc_grace: Self::auto_gc_grace(&Latency::LAN),
            seed: 1,
            nodes: Vec::new(),
            keyspace: None,
            redis: None,
            zookeeper: None,
            processes: 1,
        }
    }
}

/// Simulated time is dilated by this factor.
///
/// tokio's timers have a resolution of one millisecond: every deadline is rounded up to the
/// next whole millisecond, and a paused clock only ever advances to such deadlines. An
/// embedded store modelling 800 µs + up to 400 µs round trips would thus really take 1 or
/// 2 ms per round trip (1.5 ms on average for a QUORUM write, 1.75 ms for a QUORUM read),
/// and every other sub-millisecond delay would be distorted the same way. So in simulated
/// time the harness multiplies every duration it hands to the store and the algorithms
/// (latencies, timeouts, TTLs, poll intervals, backoff, holds, thinks, skews, the run's
/// length, the time service's period) by this factor and divides every time it measures by
/// it: one tick of tokio's clock is one microsecond of the model. The paused clock makes
/// the larger numbers free. In wall time nothing is scaled (and the real timers round the
/// same way: sub-millisecond latencies are not faithful there).
pub const SIMULATED_TIME_SCALE: u32 = 1000;

/// `scheme://user:password@host…` with the credentials replaced by `***`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

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
    (0..n)
        .map(|_| {
            if max == 0 {
                0
            } else {
                rng.random_range(-max..=max)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_parses_and_has_a_mean() {
        let l: Latency = "800us+400us".parse().unwrap();
        assert_eq!(l, Latency::LAN);
        assert_eq!(l.mean_round_trip(), Duration::from_millis(1));
        assert_eq!(l.to_string(), "800us+400us");
        assert_eq!("0".parse::<Latency>().unwrap(), Latency::ZERO);
        assert_eq!("2ms".parse::<Latency>().unwrap().to_string(), "2ms");
    }

    #[test]
    fn skews_are_bounded_seeded_and_shared() {
        let cfg = RunConfig {
            skew: Duration::from_millis(10),
            threads: 100,
            ..RunConfig::default()
        };
        let s = cfg.contender_skews();
        assert_eq!(s.len(), 100);
        assert!(s.iter().all(|x| x.abs() <= 10_000));
        assert!(s.iter().any(|x| *x != 0));
        assert_eq!(s, cfg.contender_skews());
        assert_eq!(
            RunConfig::auto_gc_grace(&Latency::LAN),
            Duration::from_millis(120)
        );
        assert_eq!(
            RunConfig::auto_gc_grace(&Latency::ZERO),
            RunConfig::MIN_GC_GRACE
        );
        assert!(RunConfig::default()
            .contender_skews()
            .iter()
            .all(|x| *x == 0));
    }

    #[test]
    fn config_round_trips_through_json() {
        let cfg = RunConfig {
            algorithms: vec!["queue".into()],
            ..RunConfig::default()
        };
        let json = serde_json::to_string(&cfg).unwrap();
        assert!(json.contains("\"duration\":\"60s\""), "{json}");
        assert!(json.contains("\"latency\":\"800us+400us\""), "{json}");
        let back: RunConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn validation_explains_itself() {
        let ok = RunConfig {
            algorithms: vec!["queue".into()],
            ..RunConfig::default()
        };
        assert!(ok.validate().is_ok());
        let e = RunConfig {
            threads: 0,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("--threads"));
        let e = RunConfig {
            backend: BackendKind::Redis,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("--clock wall"));
        let e = RunConfig {
            processes: 2,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("embedded store lives inside one process"), "{e}");
        let e = RunConfig {
            backend: BackendKind::Redis,
            clock: ClockMode::Wall,
            threads: 2,
            processes: 3,
            ..ok.clone()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("at least one contender"), "{e}");
    }

    #[test]
    fn workers_get_disjoint_blocks_covering_every_contender() {
        for (threads, processes) in [(4, 2), (64, 3), (5, 5), (7, 2), (1, 1)] {
            let cfg = RunConfig {
                threads,
                processes,
                ..RunConfig::default()
            };
            let all: Vec<usize> = (0..processes)
                .flat_map(|w| cfg.worker_contenders(w))
                .collect();
            assert_eq!(all, (0..threads).collect::<Vec<_>>());
            assert!((0..processes).all(|w| !cfg.worker_contenders(w).is_empty()));
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://user:secret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379/"),
            "redis://127.0.0.1:6379/"
        );
        let cfg = RunConfig {
            redis: Some("redis://:pw@h:1/".into()),
            ..RunConfig::default()
        };
        assert_eq!(cfg.redacted().redis.as_deref(), Some("redis://***@h:1/"));
    }

    #[test]
    fn embedded_configs_serialize_without_backend_fields() {
        let json = serde_json::to_string(&RunConfig::default()).unwrap();
        for key in ["nodes", "keyspace", "redis", "zookeeper", "processes"] {
            assert!(!json.contains(&format!("\"{key}\"")), "{key} in {json}");
        }
    }
}
