//! The embedded engine: `lock-core`'s in-process Cassandra-model store, nothing to start.
//!
//! Each algorithm's run opens a fresh [`EmbeddedStore`] with the run's seed (and the GlobalTime
//! service when asked); each contender gets a client handle of its own, with its clock skew.
//! The store counts every request itself. It runs in simulated time (the default: lock-core's
//! simulation executor, dilated by the run's time scale) or in wall time.
//!
//! Options: `--latency FIXED+JITTER` (the round trip to one replica), `--replicas`,
//! `--gc-grace` (how long tombstones stay before a compaction may purge them: Cassandra's
//! 10 days by default) and `--tombstone-cost` (what scanning one costs a read: 1.2 µs, the
//! calibration of `lock_core::embedded` against a real Cassandra 4.0 node). The store's
//! request counters include the tombstones every read scanned, per table.

use super::algorithm::{AlgorithmSettings, Entry};
use super::{
    cell_model, About, Algorithm, BoxFuture, ContenderSpec, Contending, CounterHandle, Describe,
    EngineSetup, Injection, Open, OpenEngine, OpenResult, ParseOptions, Sharing,
};
use crate::dist::{format_duration, parse_duration, serde_duration};
use crate::faults::FaultKind;
use clap::{ArgMatches, FromArgMatches as _};
use lock_core::embedded::{
    EmbeddedClient, EmbeddedConfig, EmbeddedStore, LatencyModel, PaxosVariant,
};
use lock_core::time::GlobalTimeService;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// The engine.
pub struct Embedded;

/// The algorithms on the embedded store.
static ALGORITHMS: [Entry<EmbeddedClient>; 6] = cell_model::entries();

/// Its command-line options.
#[derive(clap::Args, Debug, Clone)]
#[group(id = "embedded-options")]
#[command(next_help_heading = "Embedded store (--backend embedded)")]
pub struct Args {
    /// Embedded store: round trip to one replica, FIXED[+JITTER] (uniform jitter).
    #[arg(long, value_name = "FIXED+JITTER", default_value = "800us+400us")]
    pub latency: Latency,
    /// Embedded store: number of replicas.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub replicas: u32,
    /// Embedded store: how long a tombstone (a deletion, an expired TTL cell) stays before a
    /// compaction may purge it: Cassandra's gc_grace_seconds. Until then every read scans the
    /// tombstones before the live cells it returns.
    #[arg(long, default_value = "10d", value_parser = parse_duration, allow_hyphen_values = true)]
    pub gc_grace: Duration,
    /// Embedded store: what scanning one tombstone adds to a replica's answer (calibrated
    /// against a real Cassandra 4.0 node; 0: tombstones cost nothing).
    #[arg(long, value_name = "DURATION", default_value = "1200ns", value_parser = parse_duration, allow_hyphen_values = true)]
    pub tombstone_cost: Duration,
    /// Embedded store: the Paxos of lightweight transactions (the lwt lock): v1 is Cassandra
    /// 4.0's (prepare, read, propose, commit: 4 round trips per applied CAS), v2 the shape of
    /// 4.1's Paxos v2 (2 round trips).
    #[arg(long, value_name = "v1|v2", default_value = "v1")]
    pub paxos: PaxosVariant,
}

/// Its options, as result files show them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// Round trip to one store replica.
    pub latency: Latency,
    /// Store replicas.
    pub replicas: usize,
    /// How long tombstones stay before a compaction may purge them.
    #[serde(with = "serde_duration")]
    pub gc_grace: Duration,
    /// What scanning one tombstone adds to a replica's answer.
    #[serde(with = "serde_duration")]
    pub tombstone_cost: Duration,
    /// The Paxos of lightweight transactions.
    pub paxos: PaxosVariant,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            latency: Latency::LAN,
            replicas: 3,
            gc_grace: EmbeddedConfig::DEFAULT_GC_GRACE,
            tombstone_cost: EmbeddedConfig::DEFAULT_TOMBSTONE_SCAN_COST,
            paxos: PaxosVariant::V1,
        }
    }
}

impl super::Options for Options {}

impl Describe for Embedded {
    const ABOUT: About = About::new(
        "embedded",
        "in this process; simulated time (default) or --clock wall",
        Sharing::Refused(
            "its clients hold no session (the Cassandra model sends each request on its own), so sharing one would change nothing but the name its requests are counted under",
        ),
    )
    .notes(
        "The embedded store (default backend) models a LAN Cassandra cluster: 3 replicas, reads and\n\
         writes at QUORUM, and a round trip to one replica of 800us plus a uniform 0-400us of jitter\n\
         (--latency 800us+400us, mean 1 ms), drawn per replica and request; a QUORUM request completes\n\
         when 2 replicas answered. As in Cassandra, deletions and expired cells stay as tombstones\n\
         for --gc-grace (10 days) and every read pays --tombstone-cost (1.2 us, calibrated against a\n\
         real node) for each one it scans; a read past 100,000 fails as Cassandra's does. In\n\
         simulated time (the default) every delay is a tokio sleep on a paused clock: a 60 s run\n\
         takes seconds and the same --seed gives byte-identical results.",
    )
    .in_process();
    type Client = EmbeddedClient;
    const ENTRIES: &'static [Entry<EmbeddedClient>] = &ALGORITHMS;
}

impl ParseOptions for Embedded {
    type Options = Options;
    type Args = Args;

    fn parse(&self, m: &ArgMatches) -> Result<Options, String> {
        let a = Args::from_arg_matches(m).map_err(|e| e.to_string())?;
        Ok(Options {
            latency: a.latency,
            replicas: a.replicas as usize,
            gc_grace: a.gc_grace,
            tombstone_cost: a.tombstone_cost,
            paxos: a.paxos,
        })
    }

    fn address(&self, _o: &Options) -> String {
        "in this process".into()
    }

    fn describe(&self, o: &Options, s: &AlgorithmSettings) -> String {
        format!(
            "embedded store: {} replica{} at {}, round trip {} (mean {}), tombstones kept {} and {} each to scan, Paxos {}",
            o.replicas,
            if o.replicas == 1 { "" } else { "s" },
            s.consistency,
            o.latency,
            format_duration(o.latency.mean_round_trip()),
            format_duration(o.gc_grace),
            format_duration(o.tombstone_cost),
            o.paxos,
        )
    }

    fn modelled_round_trip(&self, o: &Options) -> Option<Duration> {
        Some(o.latency.mean_round_trip())
    }

    /// Every contender fault, both replica faults, and lost or late doorbell rings: the store
    /// has a switch for each.
    fn fault_kinds(&self, _o: &Options) -> &'static [FaultKind] {
        FaultKind::MODEL
    }

    /// One replica, and a round trip of 500 µs + up to 500 µs: with the calibrated tombstone
    /// cost this reproduces the run on a real single node on loopback (see
    /// `lock_core::embedded`'s calibration).
    fn single_node(&self, o: &Options) -> Option<Options> {
        Some(Options {
            replicas: 1,
            latency: Latency {
                fixed: Duration::from_micros(500),
                jitter: Duration::from_micros(500),
            },
            ..o.clone()
        })
    }

    fn comparison_note(&self, o: &Options) -> Option<String> {
        Some(format!(
            "The embedded store keeps its model ({} replicas, round trip {}) but runs on real timers here, \
             which round every delay up to the next millisecond: its latencies are those of the model with \
             1-2 ms round trips, not of a network.",
            o.replicas, o.latency
        ))
    }
}

impl Open for Embedded {
    async fn open<'a>(&'a self, o: Options, setup: EngineSetup<'a>) -> OpenResult {
        let s = setup.settings;
        let store = open_store(&o, setup.seed, &s);
        let scale = s.time_scale as i64;
        let probe = store.client("time-service-probe");
        let service =
            cell_model::start_time_service(&s, &setup.service_skews, &probe, |i, skew| {
                let client = store.client(format!("time-service-{i}")).with_skew(skew * scale);
                let clock = client.clock();
                (client, clock)
            })
            .await?;
        store.reset_counters();
        Ok(Box::new(Opened { store, settings: s, _time_service: service }) as Box<dyn OpenEngine>)
    }
}

fn open_store(o: &Options, seed: u64, s: &AlgorithmSettings) -> EmbeddedStore {
    EmbeddedStore::new(EmbeddedConfig {
        replicas: o.replicas,
        latency: LatencyModel::new(s.scaled(o.latency.fixed), s.scaled(o.latency.jitter)),
        seed,
        request_timeout: s.scaled(EmbeddedConfig::DEFAULT_REQUEST_TIMEOUT),
        gc_grace: s.scaled(o.gc_grace),
        tombstone_scan_cost: s.scaled(o.tombstone_cost),
        paxos: o.paxos,
        cas_contention_timeout: s.scaled(EmbeddedConfig::DEFAULT_CAS_CONTENTION_TIMEOUT),
        cas_contention_backoff: s.scaled(EmbeddedConfig::DEFAULT_CAS_CONTENTION_BACKOFF),
        ..EmbeddedConfig::default()
    })
}

struct Opened {
    store: EmbeddedStore,
    settings: AlgorithmSettings,
    _time_service: Option<GlobalTimeService>,
}

impl OpenEngine for Opened {
    fn contender(&self, algorithm: &'static Algorithm, spec: ContenderSpec) -> Contending<'_> {
        let s = &self.settings;
        let client =
            self.store.client(spec.owner.clone()).with_skew(spec.skew_us * s.time_scale as i64);
        let clock = client.clock();
        Box::pin(cell_model::contender(&ALGORITHMS, algorithm, client, clock, spec, s))
    }

    fn counters(&self) -> Option<CounterHandle> {
        let store = self.store.clone();
        Some(Arc::new(move || store.counters()))
    }

    /// Each contender is the store client named by its owner id, so every fault is one of the
    /// store's switches; model durations are scaled to the tokio clock.
    fn inject<'a>(&'a self, injection: Injection<'a>) -> BoxFuture<'a, Result<(), String>> {
        let store = &self.store;
        let scale = self.settings.time_scale;
        match injection {
            Injection::Freeze { owner, on } => store.pause_client(owner, on),
            Injection::Partition { owner, on } => store.isolate(owner, on),
            Injection::Kill { owner } => store.isolate(owner, true),
            Injection::ClockJump { owner, by_us } => store.jump_clock(owner, by_us * scale as i64),
            Injection::ReplicaStop { replica, on: true } => store.stop_replica(replica),
            Injection::ReplicaStop { replica, on: false } => store.start_replica(replica),
            Injection::ReplicaLag { replica, lag, drop } => {
                store.lag_replica(replica, lag * scale, drop)
            }
            Injection::Rings { drop, delay } => store
                .doorbells()
                .set_faults(lock_core::doorbell::RingFaults { drop, delay: delay * scale }),
            Injection::ServerRestart { .. } => {
                return Box::pin(async {
                    Err("the embedded store has no server to restart".to_string())
                })
            }
            Injection::Member { .. } | Injection::KillHitMember => {
                return Box::pin(async {
                    Err("the embedded store has no cluster members to hit (its replicas are leaderless, as Cassandra's: see replica-stop)"
                        .to_string())
                })
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn replicas(&self) -> usize {
        self.store.replica_count()
    }
}

/// The store's round trip to one replica: `fixed` plus a uniform `[0, jitter]`. Written
/// `FIXED+JITTER` (`800us+400us`), `FIXED` alone, or `0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latency {
    /// Part of every round trip.
    pub fixed: Duration,
    /// Upper bound of the uniform extra part.
    pub jitter: Duration,
}

impl Latency {
    /// No latency at all.
    pub const ZERO: Latency = Latency { fixed: Duration::ZERO, jitter: Duration::ZERO };
    /// The default: a LAN cluster, 800 µs + up to 400 µs, i.e. about 1 ms per round trip.
    pub const LAN: Latency =
        Latency { fixed: Duration::from_micros(800), jitter: Duration::from_micros(400) };

    /// The mean round trip to one replica: `fixed + jitter / 2`. Handoff gaps are divided by
    /// it to express them in round trips.
    pub fn mean_round_trip(&self) -> Duration {
        self.fixed + self.jitter / 2
    }
}

impl Default for Latency {
    fn default() -> Self {
        Latency::LAN
    }
}

impl fmt::Display for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.jitter.is_zero() {
            f.write_str(&format_duration(self.fixed))
        } else {
            write!(f, "{}+{}", format_duration(self.fixed), format_duration(self.jitter))
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

crate::dist::serde_as_text!(Latency);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::EngineOptions;

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
    fn tombstones_follow_cassandras_defaults() {
        let o = Options::default();
        assert_eq!(o.gc_grace, Duration::from_secs(10 * 24 * 3600));
        assert_eq!(o.tombstone_cost, Duration::from_nanos(1200));
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(["bench-harness"]).unwrap();
        assert_eq!(cli.run.to_config().unwrap().engine.decode::<Options>("embedded").unwrap(), o);
    }

    #[test]
    fn options_round_trip_through_engine_options() {
        let o = Options {
            latency: Latency::ZERO,
            replicas: 1,
            gc_grace: Duration::ZERO,
            tombstone_cost: Duration::ZERO,
            paxos: PaxosVariant::V2,
        };
        let erased = EngineOptions::of(&o);
        assert_eq!(erased.decode::<Options>("embedded").unwrap(), o);
        let json = serde_json::to_string(&erased).unwrap();
        assert_eq!(
            json,
            r#"{"gc_grace":"0s","latency":"0s","paxos":"v2","replicas":1,"tombstone_cost":"0s"}"#
        );
    }
}
