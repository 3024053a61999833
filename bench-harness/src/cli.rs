//! The command line (clap derive): [`Cli`] parses, and only composes. Each command owns its
//! flags beside its code, as cargo's commands do: the default run's [`RunArgs`] and the flag
//! groups several commands share in [`crate::args`], `check`'s in [`crate::check`], each
//! experiment's in its module. Every engine adds its own options ([`crate::engines::EngineArgs`])
//! and help examples; only the chosen engine's options are read.

use crate::args::RunArgs;
use crate::check::CheckArgs;
use crate::engines;
use crate::experiments::compare::EnginesArgs;
use crate::experiments::longrun::LongrunArgs;
use crate::experiments::primitives::PrimitivesArgs;
use crate::experiments::safety::SafetyArgs;
use crate::experiments::scale::ScaleArgs;
use crate::experiments::soak::SoakArgs;
use crate::experiments::sweep::SweepArgs;
use clap::{Parser, Subcommand};

const EXAMPLES: &str = "\
Examples:
  bench-harness --threads 64
      every algorithm in turn, 64 contenders on one lock, 60 s of simulated time;
      prints the comparison and writes out/summary.json, out/grants.csv and charts
  bench-harness -a queue --poll-interval 5ms --hold uniform:1ms..10ms
  bench-harness --threads 16 --locks 4 --think exp:20ms --skew 5ms --time-source hlc
  bench-harness --threads 64 --locks 1000 --key-dist zipf:0.99
      each acquire draws one of 1000 locks, lock-0 the hottest: contention where it falls
  bench-harness --latency 0 --replicas 1          a store without latency
  bench-harness --clock wall --duration 10s --threads 8";

const MORE_EXAMPLES: &str =
    "  bench-harness sweep                             regenerate results/ (the thesis's benchmark)
  bench-harness longrun                           an hour per algorithm: what tombstones do
  bench-harness scale --engines service,etcd --clients 64,256 --locks 1000
      throughput and server CPU against clients, locks and key distribution, into
      results/scale/
  bench-harness engines --redis URL --zookeeper HOSTS
      the engines pointed at, side by side with the embedded store in wall time at 1, 8
      and 64 contenders, into results/engines/ (what scripts/compare-engines.sh runs)
  bench-harness list                              algorithms per backend";

const ABOUT_RUNS: &str = "\
Each contender loops: request the lock, hold it, release it, think, until the duration ends.
Durations: 800us, 5ms, 1.5s, 2m. Distributions (--hold, --think): 5ms (fixed),
uniform:1ms..10ms, exp:5ms (exponential with that mean).

Locks (--locks K, --key-dist): fixed (the default): contender i always asks for lock i mod K,
so with K at least the contenders each lock has one and nothing contends; uniform: each acquire
draws one of the K locks uniformly; zipf:S (S > 0): each acquire draws lock-(r-1) with
probability proportional to 1/r^S, lock-0 the hottest, as a service locking many ids sees
(zipf:0.99 is the usual skewed workload). Draws come from each contender's own RNG, seeded
from --seed: a simulated run is reproducible. Throughput is per lock over all K.

Servers (every backend but the in-process ones) run in wall time (the default for them;
--clock simulated is refused) on the system clock. Each run uses a namespace of its own on the
server (row-key prefix, key prefix, znode root). An unreachable server fails within 15 s
naming its address. Store load counts the requests the contenders send (each lock crate
reports them; their docs say what one grant costs). --processes P spreads the contenders over P worker processes (servers
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
carries on without re-checking), crash[/who=holder] (a contender, or with who=holder one that
holds, such as an election's leader, dies where it is, leaving its cells behind, and comes back
DURATION later under a new owner id), clock-jump (a contender's clock steps by
±DURATION, then back), partition (a holder is cut off from the store: its connections
closed), silent-partition (a holder's connections stay open and carry nothing until healed,
while it works on), replica-stop and
replica-lag[/lag=1s/drop=0.1] (the embedded store: a replica stops and misses writes, or
applies them late and drops some), server-restart (servers the harness can restart),
stranger (as soon as someone holds, a client with no credentials deletes the holder's key or
znode, or ends its session), terminate (PostgreSQL, MariaDB: as soon as someone holds, the
server's administrator ends the holder's session, pg_terminate_backend or KILL CONNECTION; its
superuser on the server --spawn-postgres or --spawn-mariadb starts, or on yours the one
--postgres-admin-user or --mariadb-admin-user names); on a cluster the harness starts,
leader-kill, leader-pause and leader-cut (etcd, ZooKeeper, the lock service, Redis with
Sentinel: the member that leads; leader-kill on PostgreSQL with
--postgres-standby: the primary killed, the standby promoted), follower-pause and cluster-restart (etcd,
ZooKeeper, the lock service: a follower stopped; every member killed at once and restarted
with its data), lagged-leader-kill[/lag=1s] (Redis: replication held back, the master killed
right after the next grant), master-kill, master-wipe, master-pause and master-cut (Redlock: one
master in turn; master-wipe restarts it without its data). Every
critical section writes to a fenced resource at its grant and just before release; it rejects a
token below the highest it accepted (resource.csv). The table's safety columns then count
overlapping holds, stale writes accepted and rejected, and leases lost.
  bench-harness --threads 16 --duration 120s --consistency ONE \\
      --faults replica-stop:5s@15s,replica-lag:5s@15s --check
  bench-harness --ttl 2s --faults pause:5s@20s --check

Primitives (--primitive): the mutex by default; rw:P (a reader-writer lock, P% of the asks
read; rw:P/readers-first where an engine lets readers pass a waiting writer), semaphore:N[/K]
(K of N permits per ask) or election (each ask a campaign, each hold a leadership, the release
a resignation). The algorithms that have one run it (`list` shows them): the queue on the
embedded store (rw, semaphore), redis-token (rw, readers first, semaphore), zookeeper, etcd
and service (all three). grants.csv gains a share column (x, r, w, HELD/OF) and every grant is
checked against the primitive's rule: a writer overlapped by anyone, more permits than N, two
leaders at once are overlaps. The console adds a table of readers or permits held at once, read
and write latency apart, and the failover from a leader's crash to the next grant.
  bench-harness --primitive rw:90 --threads 16 --check
  bench-harness --backend service --spawn-service=3 --primitive election \
      --faults crash:1s@6s/who=holder --ttl 2s --check

Exit status: 0 success, 1 the run failed (e.g. the output directory cannot be written, a
server cannot be reached), 2 usage error, 3 --check (or check) found an overlap or an accepted
stale write.";

const ABOUT_SESSIONS: &str = "\
Shared sessions (--sessions N): contender i locks through client i mod N of the engine, under
its own owner id, as the threads of a service with one session per process do: one session's
requests, keep-alives and server state serve every owner on it, and when it is lost (expired,
revoked, cut off) every owner on it loses its locks at once, a correlated failure that a
session per contender never shows. summary.json counts the sessions opened
(store.sessions_opened, where the engine has sessions). What one shared client is:";

/// The `--sessions` paragraph: what one shared client is on each engine, or why it refuses.
fn about_sessions() -> String {
    let mut text = String::from(ABOUT_SESSIONS);
    for e in engines::ENGINES {
        let line = match e.sessions() {
            engines::Sharing::Shared(what) => format!("{}: {what}.", e.name()),
            engines::Sharing::Refused(why) => format!("{}: refused; {why}.", e.name()),
        };
        let wrapped = crate::report::console::wrap(&line, 90);
        for (i, l) in wrapped.lines().enumerate() {
            text.push_str(if i == 0 { "\n  " } else { "\n    " });
            text.push_str(l);
        }
    }
    text
}

/// The text after `--help`'s options: examples, how runs work and what each engine is (each
/// engine adds its own examples and paragraph), shared sessions, output and exit status.
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
    text.push_str(&about_sessions());
    text.push_str("\n\n");
    text.push_str(ABOUT_OUTPUT);
    text
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
    /// Every engine the harness can start, at one server and as a cluster, and the embedded
    /// store in simulated time, against clients × locks × key distribution: grants/s, p50 and
    /// p99 latency, requests per grant, the servers' CPU per 1,000 grants and peak RSS, the
    /// harness's CPU per grant; into results/scale/.
    Scale(ScaleArgs),
    /// The reader-writer locks (90% and 50% reads, queue order and readers first), semaphores
    /// of 4 and elections of every engine that has them, fair weather, with the leader crashed
    /// and under the clusters' leader kills: readers and permits held at once against the
    /// limit, reads and writes apart, the longest writer wait, failover to the next leader,
    /// every grant checked against the primitive's rule; into results/primitives/.
    Primitives(PrimitivesArgs),
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
    /// Internal: one node of the lock service `--spawn-service` starts (the options of
    /// `lock-server`).
    #[command(hide = true, name = "lock-server")]
    LockServer(lock_service::server::ServerArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClockMode, RunConfig};
    use crate::engines::EngineRef;
    use clap::CommandFactory;
    use lock_core::store::Consistency;
    use std::time::Duration;

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
            &["bench-harness", "--key-dist", "zipf:0"],
            &["bench-harness", "--key-dist", "pareto"],
            &["bench-harness", "--sessions", "0"],
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
    fn locks_key_dist_and_sessions_reach_the_config() {
        let cfg = config(&["--locks", "100", "--key-dist", "zipf:0.99"]).unwrap();
        assert_eq!((cfg.locks, cfg.key_dist), (100, crate::keys::KeyDist::Zipf { s: 0.99 }));
        assert_eq!(cfg.sessions, None);
        assert!(config(&[]).unwrap().key_dist.is_fixed());
        let server = EngineRef::all()
            .find(|e| matches!(e.sessions(), engines::Sharing::Shared(_)))
            .expect("an engine that shares clients");
        let cfg = config(&["--backend", server.name(), "--sessions", "2"]).unwrap();
        assert_eq!(cfg.sessions, Some(2));
        let help = Cli::command().render_long_help().to_string();
        for e in EngineRef::all() {
            let said = match e.sessions() {
                engines::Sharing::Shared(what) | engines::Sharing::Refused(what) => what,
            };
            let first_words: String = said.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
            assert!(help.contains(&format!("{}: ", e.name())), "{e} missing from Shared sessions");
            assert!(help.contains(&first_words), "{e}'s sharing missing from --help: {said}");
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
