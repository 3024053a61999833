//! Engines: where the locks live, one module each.
//!
//! An engine is everything the harness needs to know about one kind of store: its command-line
//! options and their defaults, how it is opened and probed (a clear error naming its address
//! when it cannot be reached), what each contender gets, whether and how its requests are
//! counted, the namespace that keeps one run's data apart from another's, and the algorithms
//! that run on it. The rest of the harness talks to engines only through the [`Engine`] and
//! [`OpenEngine`] traits; nothing outside this folder names a particular engine.
//!
//! | module | engine | algorithms |
//! |---|---|---|
//! | [`embedded`] | the in-process Cassandra-model store of `lock-core` (simulated or wall time) | shadow, queue, bakery |
//! | [`cassandra`] | a Cassandra / ScyllaDB cluster through `lock-cassandra` | shadow, queue, bakery |
//! | [`redis`] | a `redis-server`, or a master, replicas and Sentinels | jedis, redis-token |
//! | [`redlock`] | independent `redis-server` masters | redlock, redlock-fenced |
//! | [`zookeeper`] | a ZooKeeper server | zookeeper |
//! | `etcd` (feature `etcd`) | an etcd server | etcd |
//! | [`postgres`] | a PostgreSQL server | postgres (advisory locks) |
//! | [`mariadb`] | a MariaDB server | mariadb (`GET_LOCK`) |
//!
//! [`cell_model`] holds what the two Cassandra-model engines share: the algorithms written
//! against `lock_core::store::CellStore`, the GlobalTime service, the lock tables.
//!
//! **Adding an engine** is a module implementing [`Describe`], [`ParseOptions`] (its typed
//! [`Options`]; a server engine's shared flags and spawned servers come from [`server`]) and
//! [`Open`], which make it an [`Engine`], and one line in [`ENGINES`]. A server engine of the
//! shared shape (one algorithm, `--X`, `--spawn-X[=N]`, `--X-user`) states its
//! [`server::ServerFlags`] and implements [`ServerEngine`] (its client and options types)
//! instead of the first two.
//! **Adding an algorithm** to an engine is one [`Entry`] in that engine's list (and its
//! [`Algorithm`] description, shared by every engine it runs on). See the crate's README for
//! both, with examples that compile.

pub mod algorithm;
pub mod cassandra;
pub mod cell_model;
pub mod counting;
pub mod embedded;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod mariadb;
pub mod options;
pub mod postgres;
mod prelude;
pub mod redis;
pub mod redlock;
pub mod server;
pub mod server_faults;
pub mod service;
pub mod typed;
pub mod zookeeper;

pub use algorithm::{
    Algorithm, AlgorithmSettings, BackoffPreset, BuildFuture, Entry, TimeSourceKind,
};
pub use options::{
    credentials, EngineOptions, Login, Options, OptionsError, SecretNames, Sharing, Spawn,
};
pub use typed::{About, Describe, NoArgs, Open, OpenResult, ParseOptions, ServerEngine};

use crate::faults::FaultKind;
use crate::primitive::{Asking, Primitive};
use clap::ArgMatches;
use lock_core::embedded::StoreCounters;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// Every engine, in the order `list` shows them and the engines comparison runs them. The
/// first is the default of `--backend`.
pub static ENGINES: &[&dyn Engine] = &[
    &embedded::Embedded,
    &cassandra::Cassandra,
    &redis::Redis,
    &redlock::Redlock,
    &zookeeper::Zookeeper,
    #[cfg(feature = "etcd")]
    &etcd::Etcd,
    &postgres::Postgres,
    &mariadb::Mariadb,
    &service::Service,
];

/// Engines this build leaves out, and how to get them: `--backend` names them in its error.
pub static NOT_BUILT: &[(&str, &str)] = &[
    #[cfg(not(feature = "etcd"))]
    (
        "etcd",
        "build the harness with `--features etcd` (its client runs protoc when built: apt-get install protobuf-compiler)",
    ),
];

/// A boxed future, for the object-safe async methods of the engine traits.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One kind of store the locks can live in.
pub trait Engine: Send + Sync + 'static {
    /// The name `--backend` takes and result files carry.
    fn name(&self) -> &'static str;

    /// One line for `bench-harness list`: what it is and how to point at it.
    fn about(&self) -> String;

    /// Example command lines for `--help`, each on its own line starting with a newline and
    /// two spaces (an explanation may follow, indented by six).
    fn help_examples(&self) -> &'static str {
        ""
    }

    /// A paragraph for `--help` on what the engine is and how it behaves ("" for none).
    fn help_notes(&self) -> &'static str {
        ""
    }

    /// True for an engine inside this process: it runs in simulated time (its default) or
    /// wall time, and cannot be shared by worker processes. Servers outside the process run
    /// in wall time only and can be shared (`--processes`).
    fn in_process(&self) -> bool;

    /// Whether contenders may share its clients (`--sessions N`: contender `i` on client
    /// `i % N`, each under its own owner id), and what one shared client is.
    fn sessions(&self) -> Sharing;

    /// True when its options make the harness start the server itself for each run
    /// (`--spawn-redis`, `--spawn-zookeeper`).
    fn spawns_server(&self, options: &EngineOptions) -> bool {
        let _ = options;
        false
    }

    /// Its options with a server the harness starts itself for each run (and can therefore
    /// restart), for the experiments that need one (the safety table); `None` when it cannot
    /// start its own.
    fn spawned(&self) -> Option<EngineOptions> {
        None
    }

    /// Who may log in to the server [`Engine::spawned`] starts when the run names no user:
    /// anyone, or only a client with a password (then a stranger is refused there too).
    fn spawned_login(&self) -> server::SpawnedLogin {
        server::SpawnedLogin::Open
    }

    /// The shape of the cluster `options` start, in a word or two for tables ("×3" for three
    /// members, "sentinel" for Redis with Sentinel); "" for one server or a model.
    fn topology(&self, _options: &EngineOptions) -> String {
        String::new()
    }

    /// [`Engine::spawned`], secured: the server the harness starts admits only a user of
    /// its own, whose password is the first line of `password_file`, and every contender
    /// connects as that user (`results/safety`'s "stranger (secured)" rows). `None`: the
    /// engine has no such option.
    fn secured(&self, _password_file: &std::path::Path) -> Option<EngineOptions> {
        None
    }

    /// Its options with a cluster the harness starts itself for each run, on which the member
    /// faults ([`FaultKind::MEMBER`]) can be injected (the safety table's cluster rows); `None`
    /// when it cannot start one.
    fn clustered(&self) -> Option<EngineOptions> {
        None
    }

    /// Its options with a server the harness starts and a connection pooler of its own in
    /// front in the pooling mode that breaks session-level locks (PgBouncer's transaction
    /// pooling): the safety table's pooling rows. `None` when it has no pooler.
    fn pooled(&self) -> Option<EngineOptions> {
        None
    }

    /// The algorithms that run on it, in the order they run and appear in tables.
    fn algorithms(&self) -> Vec<&'static Algorithm>;

    /// Adds its command-line options (a clap `Args` struct of its own) to `cmd`.
    fn add_args(&self, cmd: clap::Command) -> clap::Command;

    /// True when the command line or the environment points at this engine (an in-process
    /// engine always is): the engines comparison includes such engines by default.
    fn is_configured(&self, m: &ArgMatches) -> bool;

    /// Its options as given on the command line (defaults filled in), checked: an invalid
    /// address or setting is a usage error naming the option.
    fn options(&self, m: &ArgMatches) -> Result<EngineOptions, String>;

    /// Its options when none are given.
    fn default_options(&self) -> EngineOptions;

    /// Whether `options` are this engine's, every field known and every value good: an error
    /// names the field.
    fn check_options(&self, options: &EngineOptions) -> Result<(), OptionsError> {
        let _ = options;
        Ok(())
    }

    /// Where it is, for messages: contact points, URL, hosts (passwords redacted).
    fn address(&self, options: &EngineOptions) -> String;

    /// The store and its settings, for the line that describes a run (e.g. "embedded store:
    /// 3 replicas at QUORUM, round trip 800us+400us (mean 1ms)").
    fn describe(&self, options: &EngineOptions, settings: &AlgorithmSettings) -> String;

    /// The mean round trip of the engine's latency model, when the harness knows it (only a
    /// model does): the unit of handoff gaps in round trips and of ideal handoffs.
    fn modelled_round_trip(&self, _options: &EngineOptions) -> Option<Duration> {
        None
    }

    /// Its options modelling one Cassandra node on loopback, when it is a model (the long-run
    /// experiment's calibration against a real node).
    fn single_node(&self, _options: &EngineOptions) -> Option<EngineOptions> {
        None
    }

    /// True when it counts the requests its contenders send (store load per grant).
    fn counts_requests(&self) -> bool;

    /// The fault kinds its opened engine can inject ([`OpenEngine::inject`]); `--faults`
    /// with another kind is refused before the run.
    fn fault_kinds(&self, options: &EngineOptions) -> &'static [FaultKind] {
        let _ = options;
        &[]
    }

    /// The options as they may be written into result files (a password in an address
    /// replaced by `***`).
    fn redacted(&self, options: &EngineOptions) -> EngineOptions {
        options.clone()
    }

    /// A caveat for the engines comparison's README, if its wall-time figures need one.
    fn comparison_note(&self, _options: &EngineOptions) -> Option<String> {
        None
    }

    /// Opens the engine for one algorithm's run: probes the server (an unreachable one fails
    /// here, once, naming its address and what was tried), prepares what every contender
    /// shares, and starts the services the run needs. Call inside the run's tokio runtime.
    fn open<'a>(
        &'a self,
        setup: EngineSetup<'a>,
    ) -> BoxFuture<'a, Result<Box<dyn OpenEngine>, String>>;
}

/// A contender's locker (or the other primitive the run asks for) being built, or why it
/// could not be.
pub type Contending<'a> = BoxFuture<'a, Result<Asking, String>>;

/// An engine opened for one algorithm's run.
pub trait OpenEngine: Send + Sync {
    /// Builds contender `spec`'s locker of `algorithm`, or the reader-writer lock, semaphore
    /// or elector of its family the run's `--primitive` asks for (connecting its own
    /// connection or session where the engine gives each contender one).
    fn contender(&self, algorithm: &'static Algorithm, spec: ContenderSpec) -> Contending<'_>;

    /// Reads the request counters later (from another task), when the engine counts.
    fn counters(&self) -> Option<CounterHandle>;

    /// Reads how many sessions (leases, server sessions) the contenders' clients have opened
    /// so far, counted from the requests that open one; `None` when the engine has no
    /// sessions to count.
    fn sessions_opened(&self) -> Option<SessionCount> {
        None
    }

    /// Breaks (or heals) something, for the nemesis ([`crate::faults`]). Only the kinds of
    /// [`Engine::fault_kinds`] are asked for.
    fn inject<'a>(&'a self, injection: Injection<'a>) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move { Err(format!("this engine cannot inject {injection:?}")) })
    }

    /// The `stranger` fault: a client of the server's own, with no credentials, deletes the
    /// holder's key or znode of every lock of the run; what it did (`deleted`, `refused: …`,
    /// `none held`), for the fault log. Only engines whose [`Engine::fault_kinds`] include
    /// [`FaultKind::Stranger`] are asked.
    fn stranger(&self) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(async { Err("this engine has no stranger (--faults stranger)".to_string()) })
    }

    /// The `terminate` fault: the server's administrator ends the session holding each of the
    /// run's locks that is held; what it did (`ended N`, `none held`, `failed: …`), for the
    /// fault log. Only engines whose [`Engine::fault_kinds`] include [`FaultKind::Terminate`]
    /// are asked.
    fn terminate(&self) -> BoxFuture<'_, Result<String, String>> {
        Box::pin(async { Err("this engine has no administrator (--faults terminate)".to_string()) })
    }

    /// How many replicas a `replica-*` fault may pick from.
    fn replicas(&self) -> usize {
        0
    }
}

/// One step of a fault, as the nemesis asks an engine to take it. Contenders are named by
/// their owner id; durations are those of the model (the engine scales them to its clock).
#[derive(Debug, Clone, Copy)]
pub enum Injection<'a> {
    /// Freeze (`on`) or thaw the contender's connection: nothing it sends leaves, nothing sent
    /// to it arrives, until thawed.
    Freeze {
        /// Owner id.
        owner: &'a str,
        /// Freeze or thaw.
        on: bool,
    },
    /// Cut the contender off the store (`on`) or heal it: its requests fail.
    Partition {
        /// Owner id.
        owner: &'a str,
        /// Cut or heal.
        on: bool,
    },
    /// The contender's process died: cut it off for good (what it had sent still lands).
    Kill {
        /// Owner id.
        owner: &'a str,
    },
    /// Step the contender's clock.
    ClockJump {
        /// Owner id.
        owner: &'a str,
        /// By how much, in microseconds of the model (negative: backwards).
        by_us: i64,
    },
    /// Stop (`on`) or restart a replica.
    ReplicaStop {
        /// Replica index.
        replica: usize,
        /// Stop or restart.
        on: bool,
    },
    /// Overload a replica: mutations late by `lag`, `drop` of them lost; zero and 0.0 heal.
    ReplicaLag {
        /// Replica index.
        replica: usize,
        /// How late.
        lag: Duration,
        /// Fraction dropped.
        drop: f64,
    },
    /// Stop (`on`) or start again the server.
    ServerRestart {
        /// Stop or start.
        on: bool,
    },
    /// Hit one member of the cluster (its leader, or the next of independent masters) with
    /// `kind` (one of [`FaultKind::MEMBER`]) or (`on` false) undo it on the member that was hit.
    Member {
        /// Which member fault.
        kind: FaultKind,
        /// Hit or undo.
        on: bool,
    },
    /// Kill the member the running member fault hit (`lagged-leader-kill`'s second step: its
    /// first holds back the leader's replication).
    KillHitMember,
    /// Lose `drop` of the doorbell rings (queue-push) and delay the others by `delay`; 0.0 and
    /// zero heal.
    Rings {
        /// Fraction lost.
        drop: f64,
        /// Extra delay.
        delay: Duration,
    },
}

/// What [`Engine::open`] needs to know of the run.
#[derive(Debug, Clone)]
pub struct EngineSetup<'a> {
    /// The engine's own options.
    pub options: &'a EngineOptions,
    /// The run's namespace on a server (a row-key prefix, key prefix or znode root), shared by
    /// the worker processes of one run.
    pub namespace: &'a str,
    /// Seed of the engine's own random choices (the embedded store's latencies).
    pub seed: u64,
    /// What the algorithms read (TTL, consistency, time source, poll interval, …), with the
    /// time scale of the run's clock.
    pub settings: AlgorithmSettings,
    /// Clock skews of the GlobalTime service's replicas, in model microseconds.
    pub service_skews: Vec<i64>,
    /// The kinds of fault the run will inject (`--faults`).
    pub fault_kinds: Vec<FaultKind>,
    /// The run's lock ids: for a stranger that must name them, as on the lock service, which
    /// lists nothing.
    pub lock_ids: Vec<String>,
}

/// One contender, as an engine sees it.
#[derive(Debug, Clone)]
pub struct ContenderSpec {
    /// Global contender index, from 0.
    pub index: usize,
    /// Its owner id.
    pub owner: String,
    /// Seed of its random choices (backoff).
    pub seed: u64,
    /// Its clock skew in model microseconds.
    pub skew_us: i64,
    /// The shared client it locks through (`--sessions N`: its index modulo N), or `None`: a
    /// client of its own.
    pub session: Option<usize>,
}

/// Reads an engine's request counters.
pub type CounterHandle = Arc<dyn Fn() -> StoreCounters + Send + Sync>;

/// Reads how many sessions an engine's contenders have opened.
pub type SessionCount = Arc<dyn Fn() -> u64 + Send + Sync>;

/// A reference to a registered engine: `Copy`, compared by name, written as its name in
/// result files and read back by looking the name up in [`ENGINES`].
#[derive(Clone, Copy)]
pub struct EngineRef(&'static dyn Engine);

impl EngineRef {
    /// The engine called `name`.
    pub fn find(name: &str) -> Option<EngineRef> {
        ENGINES.iter().find(|e| e.name() == name).map(|e| EngineRef(*e))
    }

    /// The default engine: the first of [`ENGINES`].
    pub fn default_engine() -> EngineRef {
        EngineRef(ENGINES[0])
    }

    /// Every engine.
    pub fn all() -> impl Iterator<Item = EngineRef> {
        ENGINES.iter().map(|e| EngineRef(*e))
    }

    /// The algorithm called `name` on this engine.
    pub fn algorithm(self, name: &str) -> Option<&'static Algorithm> {
        self.algorithms().into_iter().find(|a| a.name == name)
    }

    /// The names of its algorithms, in order.
    pub fn algorithm_names(self) -> Vec<&'static str> {
        self.algorithms().iter().map(|a| a.name).collect()
    }
}

impl std::ops::Deref for EngineRef {
    type Target = dyn Engine;
    fn deref(&self) -> &Self::Target {
        self.0
    }
}

impl PartialEq for EngineRef {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for EngineRef {}

impl fmt::Debug for EngineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl fmt::Display for EngineRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name())
    }
}

impl Default for EngineRef {
    fn default() -> Self {
        EngineRef::default_engine()
    }
}

impl Serialize for EngineRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.name())
    }
}

impl<'de> Deserialize<'de> for EngineRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        EngineRef::find(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown engine '{name}' (known: {})",
                names().join(", ")
            ))
        })
    }
}

/// The names of every engine, in order.
pub fn names() -> Vec<&'static str> {
    ENGINES.iter().map(|e| e.name()).collect()
}

/// `--backend`'s parser: one of [`names`], as an [`EngineRef`].
pub fn parse_engine(s: &str) -> Result<EngineRef, String> {
    EngineRef::find(s.trim()).ok_or_else(|| {
        if let Some((name, how)) = NOT_BUILT.iter().find(|(name, _)| *name == s.trim()) {
            return format!("this build of the harness has no {name} backend: {how}");
        }
        format!("unknown backend '{}' (known: {})", s.trim(), names().join(", "))
    })
}

/// Every engine's command-line options, flattened into a command: each engine adds its own
/// flags ([`Engine::add_args`]); the matches are kept so that only the chosen engine's
/// options are read and checked ([`EngineArgs::options`]).
#[derive(Debug, Clone, Default)]
pub struct EngineArgs {
    matches: ArgMatches,
}

impl EngineArgs {
    /// The options of `engine` from these arguments.
    pub fn options(&self, engine: EngineRef) -> Result<EngineOptions, String> {
        engine.options(&self.matches)
    }

    /// True when these arguments (or the environment) point at `engine`.
    pub fn is_configured(&self, engine: EngineRef) -> bool {
        engine.is_configured(&self.matches)
    }
}

impl clap::FromArgMatches for EngineArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(EngineArgs { matches: m.clone() })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        self.matches = m.clone();
        Ok(())
    }
}

impl clap::Args for EngineArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        ENGINES.iter().fold(cmd, |cmd, e| e.add_args(cmd))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// True when option `id` was given on the command line or in the environment (not left at a
/// default).
pub fn given(m: &ArgMatches, id: &str) -> bool {
    matches!(
        m.value_source(id),
        Some(clap::parser::ValueSource::CommandLine | clap::parser::ValueSource::EnvVariable)
    )
}

/// One contender's locker of `algorithm` from `entries` on a server that gives every contender
/// a connection of its own (`connect`), on the system clock plus the contender's skew, with the
/// run's TTL and consistency.
pub async fn server_contender<C>(
    entries: &[Entry<C>],
    algorithm: &Algorithm,
    connect: impl Future<Output = Result<C, String>>,
    spec: ContenderSpec,
    s: &AlgorithmSettings,
    jump: lock_core::time::ClockJump,
) -> Result<Asking, String> {
    let entry = Entry::find(entries, algorithm)
        .ok_or_else(|| format!("{} does not run on this engine", algorithm.name))?;
    let client = connect.await?;
    let clock =
        lock_core::time::LocalClock::new(lock_core::time::PhysicalClock::System, spec.skew_us)
            .with_jump(jump);
    let ctx = lock_core::context::ClientContext::new(spec.owner, clock, spec.seed)
        .with_ttl(s.scaled(s.ttl))
        .with_consistency(s.consistency);
    entry.asking(client, ctx, s).await
}

/// A namespace no other run uses: the system time in microseconds and the process id.
pub fn fresh_namespace() -> String {
    format!("bh{}p{}", lock_core::time::PhysicalClock::System.now_micros(), std::process::id())
}

/// `scheme://user:password@host…` with the credentials replaced by `***`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_string(),
    }
}

/// The lines of `bench-harness list`: every engine, what it is, and its algorithms.
pub fn list() -> String {
    let mut out =
        String::from("algorithms per backend (--backend B, then --algorithms among its own):\n");
    for e in ENGINES {
        out.push_str(&format!("{}: {}\n", e.name(), e.about()));
        for a in e.algorithms() {
            out.push_str(&format!("  {:<14} {}\n", a.name, a.summary));
            if !a.primitives.is_empty() {
                let kinds: Vec<&str> = a.primitives.iter().map(|k| k.flag()).collect();
                out.push_str(&format!("  {:<14} also --primitive {}\n", "", kinds.join(", ")));
            }
        }
    }
    out
}

/// Every algorithm name on any engine, once, in engine and registry order.
pub fn algorithm_names() -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for e in ENGINES {
        for a in e.algorithms() {
            if !out.contains(&a.name) {
                out.push(a.name);
            }
        }
    }
    out
}

/// True when some engine runs an algorithm called `name`.
pub fn is_known_algorithm(name: &str) -> bool {
    algorithm_names().contains(&name)
}

/// Resolves `--algorithms` on `engine` (empty: every algorithm of the engine), keeping the
/// engine's order and dropping repeats. An algorithm that does not run on `engine` is an error
/// that lists the ones that do.
pub fn resolve(names: &[String], engine: EngineRef) -> Result<Vec<&'static Algorithm>, String> {
    let available = engine.algorithms();
    if names.is_empty() {
        if available.is_empty() {
            return Err(format!("no registered algorithm runs on the {engine} backend"));
        }
        return Ok(available);
    }
    for name in names {
        if engine.algorithm(name).is_none() {
            return Err(not_on(name, engine));
        }
    }
    Ok(available.into_iter().filter(|a| names.iter().any(|n| n == a.name)).collect())
}

/// Of `algorithms` (resolved on `engine`), those that have `primitive`: all of them for the
/// mutex. When the user `named` them, one without it is an error; otherwise those without it
/// are left out, and none left is an error naming the engines that have it.
pub fn offering(
    algorithms: Vec<&'static Algorithm>,
    primitive: Primitive,
    engine: EngineRef,
    named: bool,
) -> Result<Vec<&'static Algorithm>, String> {
    let has = |a: &Algorithm| primitive.offered_by(a.primitives);
    if let Some(a) = algorithms.iter().find(|a| named && !has(a)) {
        return Err(algorithm::no_primitive(a, primitive));
    }
    let kept: Vec<_> = algorithms.into_iter().filter(|a| has(a)).collect();
    if kept.is_empty() {
        let engines: Vec<String> = ENGINES
            .iter()
            .filter_map(|e| {
                let names: Vec<&str> =
                    e.algorithms().into_iter().filter(|a| has(a)).map(|a| a.name).collect();
                (!names.is_empty()).then(|| format!("{} ({})", e.name(), names.join(", ")))
            })
            .collect();
        return Err(format!(
            "no algorithm of the {engine} backend has a {} (--primitive {primitive}); these do: {}",
            primitive.noun(),
            engines.join(", ")
        ));
    }
    Ok(kept)
}

fn not_on(name: &str, engine: EngineRef) -> String {
    let elsewhere: Vec<&str> = ENGINES
        .iter()
        .filter(|e| e.algorithms().iter().any(|a| a.name == name))
        .map(|e| e.name())
        .collect();
    let why = if elsewhere.is_empty() {
        format!("unknown algorithm '{name}' (known: {})", algorithm_names().join(", "))
    } else {
        format!(
            "algorithm '{name}' does not run on the {engine} backend (it runs on: {})",
            elsewhere.join(", ")
        )
    };
    format!("{why}; available on --backend {engine}: {}", engine.algorithm_names().join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_names_and_algorithms_are_unique() {
        let names = names();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[..i].contains(n), "engine {n} twice");
        }
        for e in EngineRef::all() {
            let algs = e.algorithm_names();
            for (i, a) in algs.iter().enumerate() {
                assert!(!algs[..i].contains(a), "{a} twice on {e}");
            }
            assert_eq!(EngineRef::find(e.name()), Some(e));
        }
        assert_eq!(EngineRef::default_engine(), EngineRef(ENGINES[0]));
        assert!(is_known_algorithm("queue") && !is_known_algorithm("paxos"));
    }

    #[test]
    fn engine_refs_round_trip_through_json() {
        for e in EngineRef::all() {
            let json = serde_json::to_string(&e).unwrap();
            assert_eq!(json, format!("\"{}\"", e.name()));
            assert_eq!(serde_json::from_str::<EngineRef>(&json).unwrap(), e);
        }
        let err = serde_json::from_str::<EngineRef>("\"mongo\"").unwrap_err();
        assert!(err.to_string().contains("unknown engine 'mongo'"), "{err}");
    }

    #[test]
    fn resolve_keeps_engine_order_and_explains_refusals() {
        let e = EngineRef::default_engine();
        let all = e.algorithm_names();
        let picked = resolve(&[all[1].into(), all[0].into(), all[1].into()], e).unwrap();
        assert_eq!(picked.iter().map(|a| a.name).collect::<Vec<_>>(), all[..2]);
        assert_eq!(resolve(&[], e).unwrap().len(), all.len());
        let err = resolve(&["paxos".into()], e).unwrap_err();
        assert!(err.contains("unknown algorithm 'paxos'") && err.contains(all[0]), "{err}");
        // An algorithm of another engine names where it runs.
        for other in EngineRef::all() {
            for a in other.algorithm_names() {
                if e.algorithm(a).is_none() {
                    let err = resolve(&[a.into()], e).unwrap_err();
                    assert!(err.contains("does not run on") && err.contains(other.name()), "{err}");
                }
            }
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://user:secret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(redact_url("redis://127.0.0.1:6379/"), "redis://127.0.0.1:6379/");
    }
}
