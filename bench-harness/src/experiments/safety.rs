//! `bench-harness safety`: every algorithm under each fault the nemesis knows, one at a time,
//! into `results/safety/` (`README.md` and `safety.json`): the Cassandra-model algorithms on the
//! embedded store in simulated time (the same seed gives the same rows), then every engine
//! whose server the harness can start itself (Redis, ZooKeeper, and etcd in a build with it),
//! in wall time (`--no-servers` leaves them out).
//!
//! Every condition runs with a 2 s lease, so that a 5 s pause outlasts it and a 1 s partition
//! does not (a 3 s one does); the replica
//! conditions say their consistency level. The figures are those of
//! [`crate::measure::safety`]: overlapping holds, stale writes the fenced resource accepted
//! (must be 0) and that a resource without fencing would have accepted, holders told their
//! lease was lost, unavailability within the fault windows beside the no-fault run's (handoff
//! gaps make some even without faults), and how long grants took to resume after a fault.
//!
//! Then the **cluster rows** ([`CLUSTER_CONDITIONS`]): every engine that can start a cluster of
//! its own ([`engines::Engine::clustered`]: etcd, ZooKeeper and the lock service of 3 members,
//! Redis with Sentinel, Redlock's 5 masters) under each member fault it can inject, and a findings block
//! that lists, from the figures, the rows in which a lock was held twice.

use crate::config::{ClockMode, RunConfig};
use crate::dist::parse_positive_duration;
use crate::engines::server::SpawnedLogin;
use crate::engines::{self, EngineOptions, EngineRef};
use crate::measure::summary;
use crate::report::{console, files, progress};
use crate::run as runner;
use clap::Args;
use lock_core::store::Consistency;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

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
    /// build with it: they need those servers installed, and take a few minutes of wall time),
    /// clusters included.
    #[arg(long)]
    pub no_servers: bool,
    /// Leave out the cluster rows (failovers: about 20 minutes of wall time).
    #[arg(long)]
    pub no_clusters: bool,
    /// Re-run only the rows of these conditions (names as the table gives them, e.g. "lagged
    /// leader kill") and merge them into the output directory's `safety.json`, keeping every
    /// other row as it was (or start one, in a directory without it); the README is written
    /// again from the merged rows. Several names
    /// by repeating the option or in one comma-separated list; a name that holds a comma
    /// itself ("replica stop, QUORUM") is taken whole.
    #[arg(long, value_name = "CONDITION,...")]
    pub only: Vec<String>,
    /// Re-run only the rows of these engines (e.g. `service`; `embedded` for the simulated
    /// rows) and merge them into the output directory's `safety.json`, as `--only` does.
    #[arg(long, value_name = "ENGINE,...", value_delimiter = ',', value_parser = crate::args::engine_parser())]
    pub engines: Vec<EngineRef>,
    /// Wall time per cluster row.
    #[arg(long, default_value = "40s", value_parser = parse_positive_duration)]
    pub cluster_duration: Duration,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory.
    #[arg(short, long, value_name = "DIR", default_value = "results/safety")]
    pub out: PathBuf,
    /// OS threads running runs in parallel, each running its own simulation.
    #[arg(short, long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub jobs: u32,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// Measure nothing: write the README again from the `safety.json` already in --out.
    #[arg(long)]
    pub redraw: bool,
}

/// Where a condition applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    /// On the embedded store and the servers.
    Everywhere,
    /// On the embedded store only (its replicas).
    Embedded,
    /// On the servers only (a restart of the server).
    Servers,
    /// On the clusters the harness starts, where the engine can inject every fault of it.
    Clusters,
    /// On a server behind a connection pooler of the harness's own ([`engines::Engine::pooled`]).
    Pooled,
    /// On the servers whose engine has a stranger (`--faults stranger`), open to any client.
    Strangers,
    /// The same servers, secured ([`engines::Engine::secured`]): the contenders authenticate,
    /// the stranger has no credentials.
    SecuredStrangers,
    /// On the servers whose administrator can end a holder's session (`--faults terminate`:
    /// PostgreSQL, MariaDB).
    Administered,
}

/// One condition of the table.
#[derive(Debug, Clone, Copy)]
pub struct Condition {
    /// Its name in the table.
    pub name: &'static str,
    /// `--faults`.
    pub faults: &'static str,
    /// The consistency level (the embedded store's).
    pub consistency: Consistency,
    /// Where it applies.
    pub applies: Applies,
    /// Its hold-time distribution, when not its table's.
    pub hold: Option<&'static str>,
}

const fn condition(
    name: &'static str,
    faults: &'static str,
    consistency: Consistency,
    applies: Applies,
) -> Condition {
    Condition { name, faults, consistency, applies, hold: None }
}

/// The conditions, in the table's order.
pub const CONDITIONS: [Condition; 15] = [
    condition("no fault", "none", Consistency::Quorum, Applies::Everywhere),
    condition("pause 5s > TTL", "pause:5s@20s", Consistency::Quorum, Applies::Everywhere),
    condition("crash", "crash:3s@10s", Consistency::Quorum, Applies::Everywhere),
    condition("clock jump ±2s", "clock-jump:2s@10s", Consistency::Quorum, Applies::Everywhere),
    condition("partition 3s", "partition:3s@10s", Consistency::Quorum, Applies::Everywhere),
    // A cut a lease outlives: the holder's lease, session or keep-alive must ride it out.
    condition("partition 1s < TTL", "partition:1s@10s", Consistency::Quorum, Applies::Everywhere),
    // Connections kept open and silent (packets dropped, no reset): the store learns of the
    // holder's loss only from its lease, session or keep-alive timeout.
    condition(
        "silent partition 5s",
        "silent-partition:5s@20s",
        Consistency::Quorum,
        Applies::Everywhere,
    ),
    condition(
        "replica stop, QUORUM",
        "replica-stop:5s@15s",
        Consistency::Quorum,
        Applies::Embedded,
    ),
    condition("replica lag, ONE", "replica-lag:5s@15s", Consistency::One, Applies::Embedded),
    condition("replica stop, ONE", "replica-stop:5s@15s", Consistency::One, Applies::Embedded),
    condition("server restart 3s", "server-restart:3s@15s", Consistency::Quorum, Applies::Servers),
    // A client with no credentials deletes the holder's key or znode every 5 s. Holds of a few
    // hundred milliseconds, so that the holder still works when the next waiter is granted
    // (a polling lock's next attempt comes tens of milliseconds later).
    Condition {
        hold: Some(STRANGER_HOLD),
        ..condition("stranger (open)", "stranger:1s@5s", Consistency::Quorum, Applies::Strangers)
    },
    // No fault but the pooler: PgBouncer in transaction pooling hands each statement to any
    // of its server connections, so a session-level lock is taken on one and released on
    // another.
    condition("transaction pooling", "none", Consistency::Quorum, Applies::Pooled),
    Condition {
        hold: Some(STRANGER_HOLD),
        ..condition(
            "stranger (secured)",
            "stranger:1s@5s",
            Consistency::Quorum,
            Applies::SecuredStrangers,
        )
    },
    // The server's administrator ends the holder's session every 5 s (`pg_terminate_backend`,
    // `KILL CONNECTION`): the server frees the lock with it at once. Holds as the strangers'.
    Condition {
        hold: Some(STRANGER_HOLD),
        ..condition(
            "backend terminated",
            "terminate:1s@5s",
            Consistency::Quorum,
            Applies::Administered,
        )
    },
];

/// The stranger rows' holds: see [`CONDITIONS`].
const STRANGER_HOLD: &str = "uniform:100ms..300ms";

/// The cluster rows' workload: few contenders with critical sections longer than a failover
/// (Sentinel deems a master down after 2 s, then elects: 3 to 4 s in all), under a lease that
/// outlasts it. A lock can only be handed to two clients by a failover while its first holder
/// still works under it: with the 5 ms holds of the other rows every holder is long gone before
/// the new leader serves, and the rows would measure nothing.
const CLUSTER_THREADS: usize = 4;
/// See [`CLUSTER_THREADS`].
const CLUSTER_HOLD: &str = "uniform:4s..10s";
/// See [`CLUSTER_THREADS`].
const CLUSTER_TTL: Duration = Duration::from_secs(10);

/// The conditions of the cluster rows, in the table's order. Each applies to the clusters
/// whose engine can inject its faults: the leader faults to etcd, ZooKeeper, the lock service
/// and Redis with Sentinel; a paused follower and the whole cluster's restart to the three
/// that elect a leader; the held replication link to Redis alone; the master faults to
/// Redlock's masters.
/// Only "lagged leader kill" opens Redis's asynchronous-replication window: on
/// loopback a replica has a write within microseconds, so a plain kill finds it replicated.
pub const CLUSTER_CONDITIONS: [Condition; 12] = [
    condition("no fault", "none", Consistency::Quorum, Applies::Clusters),
    condition("leader kill 5s", "leader-kill:5s@20s", Consistency::Quorum, Applies::Clusters),
    // Jepsen's shape: the leader killed again and again (for 2 s, every 8 s), and holds short
    // enough that several hundred grants are checked across five failovers. The long version is
    // `safety --only "leader killed every 8s" --cluster-duration 10m`.
    Condition {
        hold: Some("uniform:5ms..50ms"),
        ..condition(
            "leader killed every 8s",
            "leader-kill:2s@8s",
            Consistency::Quorum,
            Applies::Clusters,
        )
    },
    condition("leader pause 5s", "leader-pause:5s@20s", Consistency::Quorum, Applies::Clusters),
    condition("leader cut 5s", "leader-cut:5s@20s", Consistency::Quorum, Applies::Clusters),
    condition("follower pause 5s", "follower-pause:5s@20s", Consistency::Quorum, Applies::Clusters),
    // Every member down at once for 3 s: what the cluster acknowledged must survive.
    condition(
        "cluster restart 3s",
        "cluster-restart:3s@20s",
        Consistency::Quorum,
        Applies::Clusters,
    ),
    // The next grant after the hold comes within 10 s (the longest hold), and its holder
    // works for at least 7 s: past the failover (3 to 7 s, reconnection included).
    Condition {
        hold: Some("uniform:7s..10s"),
        ..condition(
            "lagged leader kill",
            "lagged-leader-kill:16s@20s/lag=10s",
            Consistency::Quorum,
            Applies::Clusters,
        )
    },
    condition("master kill 5s", "master-kill:5s@20s", Consistency::Quorum, Applies::Clusters),
    condition("master pause 5s", "master-pause:5s@20s", Consistency::Quorum, Applies::Clusters),
    condition("master cut 5s", "master-cut:5s@20s", Consistency::Quorum, Applies::Clusters),
    condition("master wipe 300ms", "master-wipe:300ms@10s", Consistency::Quorum, Applies::Clusters),
];

/// The servers of the table, each started by the harness for each run so that it can be
/// restarted ([`engines::Engine::spawned`]), in engine order.
fn servers() -> Vec<(EngineRef, EngineOptions)> {
    EngineRef::all().filter_map(|e| e.spawned().map(|options| (e, options))).collect()
}

/// The clusters of the table ([`engines::Engine::clustered`]), in engine order.
fn clusters() -> Vec<(EngineRef, EngineOptions)> {
    EngineRef::all().filter_map(|e| e.clustered().map(|options| (e, options))).collect()
}

/// Whether `engine` with `options` can inject every fault of `c`.
fn can_inject(engine: EngineRef, options: &EngineOptions, c: &Condition) -> bool {
    let can = engine.fault_kinds(options);
    match c.faults.parse::<crate::faults::FaultPlan>() {
        Ok(plan) => plan.kinds().all(|k| can.contains(&k)),
        Err(_) => false,
    }
}

/// One row: an algorithm under a condition.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// The condition's name.
    pub condition: String,
    /// Its `--faults`.
    pub faults: String,
    /// The engine, and the shape of its cluster when it has one ("etcd ×3").
    pub engine: String,
    /// A cluster row (a failover condition on a cluster the harness started).
    #[serde(default)]
    pub cluster: bool,
    /// Its consistency (meaningful on the embedded store).
    pub consistency: Consistency,
    /// The algorithm.
    pub algorithm: String,
    /// The run's length (simulated on the embedded store, wall time on a server).
    pub duration_s: f64,
    /// Grants per second per lock.
    pub grants_per_second: f64,
    /// Every safety figure.
    pub figures: crate::measure::safety::SafetyFigures,
}

/// One run of the table.
#[derive(Clone)]
struct Job {
    condition: Condition,
    engine: EngineRef,
    options: EngineOptions,
    algorithm: &'static engines::Algorithm,
    args: SafetyArgs,
}

fn run_one(job: &Job) -> anyhow::Result<Row> {
    let (args, c) = (&job.args, &job.condition);
    let on_server = !job.engine.in_process();
    let on_cluster = c.applies == Applies::Clusters;
    let duration = match (on_cluster, on_server) {
        (true, _) => args.cluster_duration,
        (false, true) => args.server_duration,
        (false, false) => args.duration,
    };
    let base = RunConfig::default();
    let cfg = RunConfig {
        backend: job.engine,
        engine: job.options.clone(),
        clock: if on_server { ClockMode::Wall } else { ClockMode::Simulated },
        algorithms: vec![job.algorithm.name.to_string()],
        threads: if on_cluster { CLUSTER_THREADS } else { args.threads as usize },
        hold: match (c.hold, on_cluster) {
            (Some(hold), _) => hold.parse().map_err(anyhow::Error::msg)?,
            (None, true) => CLUSTER_HOLD.parse().map_err(anyhow::Error::msg)?,
            (None, false) => base.hold,
        },
        duration,
        ttl: if on_cluster { CLUSTER_TTL } else { Duration::from_secs(2) },
        consistency: c.consistency,
        faults: c.faults.parse().map_err(anyhow::Error::msg)?,
        seed: args.seed,
        ..base
    };
    cfg.validate().map_err(anyhow::Error::msg)?;
    let outcome = runner::run_algorithm(&cfg, job.algorithm, None)?;
    let report = summary::analyze(&cfg, job.algorithm, &outcome);
    let topology = job.engine.topology(&job.options);
    Ok(Row {
        condition: c.name.to_string(),
        faults: c.faults.to_string(),
        engine: match topology.as_str() {
            "" => job.engine.to_string(),
            t => format!("{} {t}", job.engine),
        },
        cluster: c.applies == Applies::Clusters,
        consistency: c.consistency,
        algorithm: job.algorithm.name.to_string(),
        duration_s: duration.as_secs_f64(),
        grants_per_second: report.throughput.grants_per_second_per_lock,
        figures: report.fault_safety,
    })
}

/// The README's table.
pub fn render(args: &SafetyArgs, rows: &[Row]) -> String {
    let mut out = String::new();
    let embedded = EngineRef::default_engine().name();
    let mut servers: Vec<&str> = Vec::new();
    for r in rows.iter().filter(|r| r.engine != embedded && !r.cluster) {
        if !servers.contains(&r.engine.as_str()) {
            servers.push(&r.engine);
        }
    }
    let servers = match servers.as_slice() {
        [] => "no server (`--no-servers`)".to_string(),
        [one] => one.to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    };
    let _ = writeln!(
        out,
        "# Safety under faults\n\nGenerated by `bench-harness safety` (`scripts/regenerate-results.sh`); do not edit by hand. \
         Every number comes from `safety.json` in this directory.\n"
    );
    let singles = rows.iter().any(|r| !r.cluster);
    if singles {
        let _ = writeln!(
            out,
            "{} contenders on one lock, lease TTL 2s, seed {}: the Cassandra-model locks on the embedded store (3 replicas, \
             ~1 ms round trips, {} of simulated time per row), then {} on loopback servers the harness \
             starts itself ({} of wall time per row; Redis syncs an append-only file on every write).\n",
            args.threads,
            args.seed,
            crate::dist::format_duration(args.duration),
            servers,
            crate::dist::format_duration(args.server_duration),
        );
    }
    let _ = writeln!(
        out,
        "Faults as `--faults` \
         writes them; each starts at a seeded offset and repeats every PERIOD. Every critical section writes to a fenced \
         resource at its grant and just before release.\n\n\
         - **overlaps**: holds that began while another hold of the lock was open (and their total time);\n\
         - **stale writes fenced / unfenced**: writes made after another holder was granted that the fenced resource \
         accepted (must be 0), and that a resource without fencing would have accepted (all of them);\n\
         - **told**: of the holders that wrote stale, those told their lease was lost before they let go;\n\
         - **unavailable**: the share of time someone waited and nobody held: within the fault windows (extended by the \
         TTL), and over the whole run for \"no fault\", the baseline that handoff gaps make without any fault;\n\
         - **resumed after**: the longest time from the end of a fault to the next grant.\n",
    );
    if singles {
        out.push_str(&markdown_table(rows.iter().filter(|r| !r.cluster)));
        out.push_str(&stranger_findings(rows));
        out.push_str(&terminate_findings(rows));
        out.push_str(&silence_and_pooling_findings(rows));
    }
    let clustered: Vec<&Row> = rows.iter().filter(|r| r.cluster).collect();
    if !clustered.is_empty() {
        out.push_str(&render_clusters(args, &clustered));
    }
    out
}

/// What the stranger rows showed, read off their figures: what a client with no credentials
/// did to each lock on an open server, and on a secured one. Empty without stranger rows.
fn stranger_findings(rows: &[Row]) -> String {
    let strangers: Vec<&Row> =
        rows.iter().filter(|r| !r.cluster && r.faults.starts_with("stranger")).collect();
    if strangers.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n### Strangers\n\nThe \"stranger\" rows hold the lock `{STRANGER_HOLD}` each, and every \
         5 s, as soon as someone holds, a client with no credentials deletes the holder's key or \
         znode, on the lock service force-releases the lock, or on PostgreSQL and MariaDB logs in \
         as the contenders' user and ends their sessions (`--faults stranger`). \"open\": the \
         servers as they start, no user named: any client may, unless the server asks every \
         client for a password; \"secured\": the contenders authenticate as \
         a user whom the server's ACLs give the lock's keys (`--zookeeper-user`, `--etcd-user`, \
         `--redis-user`), or, on the service, a user of its users file over TLS \
         (`--service-user`), the stranger none.\n\n"
    );
    for r in &strangers {
        let what = held_or_not(&r.figures);
        let asks_password = r.condition == open_stranger().name
            && engine_of(r).is_some_and(|e| e.spawned_login() == SpawnedLogin::Password);
        let what = if asks_password {
            format!(
                "the server the harness starts asks every client for a password, so \"open\" \
                 here means the stranger (none) is refused: {what}"
            )
        } else {
            what
        };
        let _ = writeln!(out, "- {} on {}, {}: {what}.", r.algorithm, r.engine, r.condition);
    }
    out
}

/// The condition of the stranger on a server as it starts.
fn open_stranger() -> &'static Condition {
    let open = CONDITIONS.iter().find(|c| c.applies == Applies::Strangers);
    open.expect("the table has a stranger on open servers")
}

/// The engine a row ran on ("postgres via PgBouncer (transaction)": postgres).
fn engine_of(row: &Row) -> Option<EngineRef> {
    EngineRef::all()
        .find(|e| row.engine == e.name() || row.engine.starts_with(&format!("{} ", e.name())))
}

/// What the rows of the administrator's fault showed, read off their figures: how long the
/// holder whose session ended overlapped its successor, what the fenced resource did with its
/// writes, and whether it was told. Empty without such rows.
fn terminate_findings(rows: &[Row]) -> String {
    let terminated: Vec<&Row> =
        rows.iter().filter(|r| !r.cluster && r.faults.starts_with("terminate")).collect();
    if terminated.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "\n### Backends terminated\n\nThe \"backend terminated\" rows hold the lock \
         `{STRANGER_HOLD}` each, and every 5 s, as soon as someone holds, an administrator (the \
         superuser of the server the harness starts) ends the session holding the lock \
         (`--faults terminate`): `pg_terminate_backend` on PostgreSQL, for the backends \
         `pg_locks` shows holding the run's advisory keys; `KILL CONNECTION` on MariaDB, for the \
         connection `IS_USED_LOCK` names. The server frees the lock with the session, and the \
         next waiter is granted while the holder still works.\n\n"
    );
    for r in &terminated {
        let f = &r.figures;
        let what = if f.overlapping_holds == 0 {
            "no lock held twice".to_string()
        } else {
            let mean_ms = f.overlap_us as f64 / 1000.0 / f.overlapping_holds as f64;
            let untold = if f.stale_holders_told < f.stale_holders {
                "; the others let go before their client noticed its session had ended"
            } else {
                ""
            };
            format!(
                "**held twice** {} times, {mean_ms:.0} ms each on average {}{untold}",
                f.overlapping_holds,
                held_twice(f)
            )
        };
        let _ = writeln!(out, "- {} on {}: {what}.", r.algorithm, r.engine);
    }
    out
}

/// What the silent partition and pooling rows showed, read off their figures. Empty without
/// such rows.
fn silence_and_pooling_findings(rows: &[Row]) -> String {
    let silent: Vec<&Row> =
        rows.iter().filter(|r| !r.cluster && r.faults.starts_with("silent-partition")).collect();
    let pooled: Vec<&Row> =
        rows.iter().filter(|r| !r.cluster && r.condition == "transaction pooling").collect();
    let mut out = String::new();
    if !silent.is_empty() {
        out.push_str(
            "\n### Silent partitions\n\nA \"silent partition\" keeps one holder's connections \
             open and carries nothing over them for 5 s (packets dropped, no reset: a pulled \
             cable, a firewall), while the holder works on. The store hears nothing either: it \
             frees the lock only when the holder's lease, session or keep-alive times out (on \
             PostgreSQL and MariaDB, the session timeout the lock sets to its lease; left at \
             their defaults, TCP would take minutes to hours). Holds here are 5 ms, so the \
             holder is done long before: the rows show how long everyone else waits \
             (unavailable).\n\n",
        );
        for r in &silent {
            let what = held_or_not(&r.figures);
            let _ = writeln!(
                out,
                "- {} on {}: unavailable {} of the cut windows; {what}.",
                r.algorithm,
                r.engine,
                unavailable_share(r)
            );
        }
    }
    if !pooled.is_empty() {
        out.push_str(
            "\n### Transaction pooling\n\nThe \"transaction pooling\" rows run with no fault \
             through a PgBouncer in transaction pooling (4 server connections) in front of the \
             server: each statement may run on another server connection, so a session-level \
             lock is taken on one and released on another, or not at all.\n\n",
        );
        for r in &pooled {
            let what = held_or_not(&r.figures);
            let _ = writeln!(out, "- {} on {}: {what}.", r.algorithm, r.engine);
        }
    }
    out
}

/// "no lock held twice", or how often and how it was.
fn held_or_not(f: &crate::measure::safety::SafetyFigures) -> String {
    if f.overlapping_holds == 0 {
        "no lock held twice".to_string()
    } else {
        format!("**held twice** {} times {}", f.overlapping_holds, held_twice(f))
    }
}

/// How a lock was held twice, in words, after the count of overlaps: their time, the stale
/// writes and the holders told.
fn held_twice(f: &crate::measure::safety::SafetyFigures) -> String {
    format!(
        "({:.0} ms in all); stale writes the fenced resource accepted / a resource without \
         fencing would have: {} / {}; holders told: {}/{}",
        f.overlap_us as f64 / 1000.0,
        f.stale_accepted,
        f.stale_accepted_without_fencing,
        f.stale_holders_told,
        f.stale_holders,
    )
}

/// The cluster rows' section: what they run on, their table, and the findings read off them.
fn render_clusters(args: &SafetyArgs, rows: &[&Row]) -> String {
    let mut out = format!(
        "\n## Failovers: clusters the harness starts\n\n\
         {CLUSTER_THREADS} contenders on one lock, each holding it for `{CLUSTER_HOLD}` (longer \
         than a failover, which takes Sentinel 3 to 4 s: a lock is handed to two clients by a \
         failover only while its first holder still works under it), lease TTL {}, the same \
         figures, on clusters on loopback ({} of wall time per row): etcd and ZooKeeper of 3 members (×3), Redis as a master, 2 replicas and 3 \
         Sentinels that jedis and redis-token find the master through (sentinel; every member \
         syncs an append-only file on every write), and Redlock on 5 independent masters (×5). \
         Each fault hits the member that leads when it starts (the master, for Redis), or for \
         Redlock the next master in turn (`master-kill`, `master-pause`, `master-cut`: \
         Redlock's masters have no leader). **Only \"lagged leader kill\" opens the window of \
         Redis's asynchronous replication** (`lagged-leader-kill`): it holds back the \
         replication stream to both replicas, waits for the next grant (10 s at most), then \
         kills the master, so that grant is lost in the failover while its holder works on (its \
         rows hold the lock 7 to 10 s, past the failover); a plain kill on loopback finds every \
         write already replicated. \"master wipe 300ms\" (`master-wipe`) kills one of \
         Redlock's masters and restarts it 300 ms later with no data (Kleppmann's case against \
         Redlock); each grant here reached all five masters, so one wiped master leaves four \
         copies of the key, and the unsafe case needs a grant that reached a bare majority \
         (`lock-redis`'s `tests/redlock_faults.rs` builds it). PostgreSQL runs as a primary \
         and an asynchronous streaming standby (×2): a leader kill kills the primary \
         and promotes the standby at once, as a failover manager would, and brings the killed \
         server back as the new primary's standby when the fault ends; advisory locks are not \
         written to the WAL, so the promoted server holds none of them.\n\n",
        crate::dist::format_duration(CLUSTER_TTL),
        crate::dist::format_duration(row_length(rows).unwrap_or(args.cluster_duration)),
    );
    let own: Vec<String> = CLUSTER_CONDITIONS
        .iter()
        .filter(|c| rows.iter().any(|r| r.condition == c.name))
        .filter_map(|c| c.hold.map(|h| format!("\"{}\" `{h}`", c.name)))
        .collect();
    if !own.is_empty() {
        let _ = writeln!(out, "Rows with holds of their own: {}.\n", own.join("; "));
    }
    out.push_str(&markdown_table(rows.iter().copied()));
    out.push_str(&cluster_findings(rows));
    out
}

/// The length every one of `rows` ran, if they all ran as long (rows merged from runs of
/// another `--cluster-duration` say what they ran, not what this command line says).
fn row_length(rows: &[&Row]) -> Option<Duration> {
    let first = rows.first()?.duration_s;
    rows.iter().all(|r| r.duration_s == first).then(|| Duration::from_secs_f64(first))
}

/// The findings of the cluster rows, read off their figures: where a lock was held twice, and
/// where it never was.
fn cluster_findings(rows: &[&Row]) -> String {
    let name = |r: &Row| format!("{} on {}, {}", r.algorithm, r.engine, r.condition);
    let (unsafe_rows, safe): (Vec<&Row>, Vec<&Row>) =
        rows.iter().partition(|r| r.figures.overlapping_holds > 0);
    let mut out = String::from("\n### Findings (cluster rows)\n\n");
    if unsafe_rows.is_empty() {
        out.push_str("- No cluster row held a lock twice.\n");
    }
    for r in &unsafe_rows {
        let f = &r.figures;
        let (n, how) = (f.overlapping_holds, held_twice(f));
        let _ = writeln!(out, "- **Held twice**: {}: {n} overlapping holds {how}.", name(r));
    }
    let faulty: Vec<String> = safe.iter().filter(|r| r.faults != "none").map(|r| name(r)).collect();
    if !faulty.is_empty() {
        let _ = writeln!(out, "- **Never held twice** under a fault: {}.", faulty.join("; "));
    }
    out
}

/// The README's table of `rows`.
fn markdown_table<'a>(rows: impl Iterator<Item = &'a Row>) -> String {
    let mut out = String::from(
        "| condition | engine | algorithm | grants/s | overlaps | overlap ms | stale writes fenced / unfenced | told | unavailable | resumed after s |\n\
         |---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let _ = writeln!(out, "| {} |", cells(r).join(" | "));
    }
    out
}

/// A row's cells, in the order of the README's columns.
fn cells(r: &Row) -> [String; 10] {
    let f = &r.figures;
    [
        r.condition.clone(),
        r.engine.clone(),
        r.algorithm.clone(),
        format!("{:.1}", r.grants_per_second),
        f.overlapping_holds.to_string(),
        format!("{:.1}", f.overlap_us as f64 / 1000.0),
        format!("{} / {}", f.stale_accepted, f.stale_accepted_without_fencing),
        format!("{}/{}", f.stale_holders_told, f.stale_holders),
        unavailable_share(r),
        match f.resumed_after_us_by_fault.values().max() {
            Some(us) => format!("{:.2}", *us as f64 / 1e6),
            None => "-".into(),
        },
    ]
}

/// The table for the terminal: the README's columns but the throughput and the overlap time,
/// with headers short enough to stay within 120 columns; the README explains them.
pub fn console_table(rows: &[Row]) -> String {
    const SHOWN: [usize; 8] = [0, 1, 2, 4, 6, 7, 8, 9];
    let headers = [
        "condition",
        "engine",
        "algorithm",
        "overlaps",
        "stale fenced/unf.",
        "told",
        "unavail.",
        "resumed s",
    ];
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let all = cells(r);
            SHOWN.iter().map(|i| all[*i].clone()).collect()
        })
        .collect();
    console::render(&headers, 3, &rows)
}

/// Unavailable time over the time it is measured in: the fault windows, or the whole run
/// when there were none.
fn unavailable_share(r: &Row) -> String {
    let f = &r.figures;
    let (unavailable, over) = if f.window_us_by_fault.is_empty() {
        (f.unavailable_us, (r.duration_s * 1e6) as u64)
    } else {
        (f.unavailable_us_by_fault.values().sum(), f.window_us_by_fault.values().sum())
    };
    if over == 0 {
        return "-".into();
    }
    format!("{:.0}%", 100.0 * unavailable as f64 / over as f64)
}

/// With `--only`, the rows of the output directory's `safety.json` to merge the new ones into.
fn previous_rows(args: &SafetyArgs) -> anyhow::Result<Option<Vec<Row>>> {
    if args.only.is_empty() && args.engines.is_empty() {
        return Ok(None);
    }
    let path = args.out.join("safety.json");
    let text = match std::fs::read_to_string(&path) {
        // A directory of its own: the chosen rows alone (a long run, say).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(Vec::new())),
        Err(e) => {
            return Err(crate::UsageError(format!(
                "--only and --engines merge into {}, which cannot be read: {e}",
                path.display()
            ))
            .into())
        }
        Ok(text) => text,
    };
    let rows = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a safety table: {e}", path.display()))?;
    Ok(Some(rows))
}

/// `previous` with every row of `fresh` in place of the one of the same condition, engine and
/// algorithm, or else added; then in the order a full run writes them ([`table_order`]), so a
/// condition added later sits where it would have, not at the end.
fn merge(mut previous: Vec<Row>, fresh: Vec<Row>) -> Vec<Row> {
    for row in fresh {
        let same = |r: &Row| {
            (&r.condition, &r.engine, &r.algorithm) == (&row.condition, &row.engine, &row.algorithm)
        };
        match previous.iter_mut().find(|r| same(r)) {
            Some(old) => *old = row,
            None => previous.push(row),
        }
    }
    previous.sort_by_cached_key(table_order);
    previous
}

/// Where a full run puts `row`: the embedded store's rows by condition, then each server's
/// rows by engine and condition, then each cluster's. The sort is stable: the algorithms of one
/// engine and condition keep their order; unknown names go last.
fn table_order(row: &Row) -> (u8, usize, usize) {
    let engine = engine_of(row)
        .and_then(|found| EngineRef::all().position(|e| e == found))
        .unwrap_or(usize::MAX);
    let conditions: &[Condition] = if row.cluster { &CLUSTER_CONDITIONS } else { &CONDITIONS };
    let condition = conditions.iter().position(|c| c.name == row.condition).unwrap_or(usize::MAX);
    match (row.cluster, row.engine == EngineRef::default_engine().name()) {
        (false, true) => (0, condition, 0),
        (false, false) => (1, engine, condition),
        (true, _) => (2, engine, condition),
    }
}

/// A file holding a password drawn for this run (the secured servers' contenders read it, as a
/// user's `--…-password-file`), removed when the run ends.
struct SecretFile(PathBuf);

impl SecretFile {
    fn new() -> anyhow::Result<SecretFile> {
        let dir = std::env::temp_dir().join(format!("bench-harness-safety-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("password");
        std::fs::write(&path, test_servers::random_password())?;
        Ok(SecretFile(path))
    }
}

impl Drop for SecretFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// The conditions `--only` names: each value a known name taken whole (some hold a comma,
/// "replica stop, QUORUM"), or else a comma-separated list of known names; an unknown one is an
/// error naming it and the known ones.
fn condition_names<'k>(only: &[String], known: &[&'k str]) -> Result<Vec<&'k str>, String> {
    let find = |name: &str| known.iter().find(|k| **k == name.trim()).copied();
    let mut names = Vec::new();
    for value in only {
        match find(value) {
            Some(name) => names.push(name),
            None => {
                for piece in value.split(',') {
                    names.push(find(piece).ok_or_else(|| {
                        format!(
                            "--only: no condition {:?} (known: {})",
                            piece.trim(),
                            known.join("; ")
                        )
                    })?);
                }
            }
        }
    }
    Ok(names)
}

/// `bench-harness safety`.
pub fn run(args: &SafetyArgs) -> anyhow::Result<()> {
    if args.redraw {
        let rows: Vec<Row> = files::read_earlier(&args.out.join("safety.json"))?;
        files::write_atomic(&args.out.join("README.md"), render(args, &rows).as_bytes())?;
        println!("{} written again from its safety.json", args.out.join("README.md").display());
        return Ok(());
    }
    let embedded = engines::EngineRef::default_engine();
    let algorithms = engines::resolve(&[], embedded).map_err(crate::UsageError)?;
    files::prepare_dir(&args.out)?;
    let job = |condition: Condition, engine: EngineRef, options: EngineOptions, algorithm| Job {
        condition,
        engine,
        options,
        algorithm,
        args: args.clone(),
    };
    let known: Vec<&str> = CONDITIONS.iter().chain(&CLUSTER_CONDITIONS).map(|c| c.name).collect();
    let only = condition_names(&args.only, &known).map_err(crate::UsageError)?;
    let wanted = |c: &Condition| only.is_empty() || only.contains(&c.name);
    let engine_wanted = |e: &EngineRef| args.engines.is_empty() || args.engines.contains(e);
    let previous = previous_rows(args)?;
    let simulated: Vec<Job> = CONDITIONS
        .iter()
        .filter(|c| matches!(c.applies, Applies::Everywhere | Applies::Embedded))
        .filter(|c| wanted(c) && engine_wanted(&embedded))
        .flat_map(|c| algorithms.iter().map(move |a| (*c, *a)))
        .map(|(c, a)| job(c, embedded, embedded.default_options(), a))
        .collect();
    let mut on_servers = Vec::new();
    // The password of the secured servers' contenders, for this run only.
    let secret = SecretFile::new()?;
    if !args.no_servers {
        for (engine, options) in servers().into_iter().filter(|(e, _)| engine_wanted(e)) {
            for c in CONDITIONS.iter().filter(|c| wanted(c)) {
                let options = match c.applies {
                    Applies::Everywhere | Applies::Servers => options.clone(),
                    Applies::Strangers | Applies::Administered
                        if can_inject(engine, &options, c) =>
                    {
                        options.clone()
                    }
                    Applies::Pooled => match engine.pooled() {
                        Some(pooled) => pooled,
                        None => continue,
                    },
                    Applies::SecuredStrangers => match engine.secured(&secret.0) {
                        Some(secured) if can_inject(engine, &secured, c) => secured,
                        _ => continue,
                    },
                    _ => continue,
                };
                for a in engine.algorithms() {
                    on_servers.push(job(*c, engine, options.clone(), a));
                }
            }
        }
    }
    if !args.no_servers && !args.no_clusters {
        for (engine, options) in clusters().into_iter().filter(|(e, _)| engine_wanted(e)) {
            for c in
                CLUSTER_CONDITIONS.iter().filter(|c| wanted(c) && can_inject(engine, &options, c))
            {
                for a in engine.algorithms() {
                    on_servers.push(job(*c, engine, options.clone(), a));
                }
            }
        }
    }
    let bar =
        progress::bar((simulated.len() + on_servers.len()) as u64, "safety", args.quiet, "runs");
    let order: Vec<usize> = (0..simulated.len()).collect();
    let mut rows = super::parallel(&simulated, &order, args.jobs as usize, &bar, run_one)?;
    // Wall-time runs one at a time: a parallel run would load the machine they measure.
    let order: Vec<usize> = (0..on_servers.len()).collect();
    rows.extend(super::parallel(&on_servers, &order, 1, &bar, run_one)?);
    bar.finish_and_clear();
    let rows = match previous {
        Some(previous) => merge(previous, rows),
        None => rows,
    };
    files::write_json(&args.out.join("safety.json"), &rows)?;
    let text = render(args, &rows);
    files::write_atomic(&args.out.join("README.md"), text.as_bytes())?;
    print!("{}", console_table(&rows));
    let clustered: Vec<&Row> = rows.iter().filter(|r| r.cluster).collect();
    if !clustered.is_empty() {
        for line in cluster_findings(&clustered).lines() {
            println!("{}", console::wrap(line, console::WIDTH).trim_end());
        }
    }
    println!("{} has every column and what each means.", args.out.join("README.md").display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::console::{widest_line, WIDTH};

    #[test]
    fn only_takes_names_with_commas_whole_and_lists_apart() {
        let known = ["replica stop, QUORUM", "replica stop, ONE", "crash", "lagged leader kill"];
        let names = |v: &[&str]| {
            condition_names(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>(), &known)
        };
        assert_eq!(names(&["replica stop, QUORUM"]).unwrap(), ["replica stop, QUORUM"]);
        assert_eq!(names(&["crash,lagged leader kill"]).unwrap(), ["crash", "lagged leader kill"]);
        assert_eq!(names(&["crash", "replica stop, ONE"]).unwrap(), ["crash", "replica stop, ONE"]);
        let e = names(&["crash,paxos"]).unwrap_err();
        assert!(e.contains("no condition \"paxos\"") && e.contains("replica stop, ONE"), "{e}");
        assert!(names(&[]).unwrap().is_empty());
    }

    #[test]
    fn only_replaces_its_rows_and_keeps_the_others() {
        let row = |condition: &str, algorithm: &str, overlaps: u64| Row {
            condition: condition.into(),
            faults: "none".into(),
            engine: "redis sentinel".into(),
            cluster: true,
            consistency: Consistency::Quorum,
            algorithm: algorithm.into(),
            duration_s: 40.0,
            grants_per_second: 1.0,
            figures: crate::measure::safety::SafetyFigures {
                overlapping_holds: overlaps,
                ..Default::default()
            },
        };
        let previous = vec![row("a", "jedis", 0), row("b", "jedis", 0), row("b", "redis-token", 0)];
        let merged = merge(previous, vec![row("b", "redis-token", 3), row("c", "jedis", 1)]);
        let got: Vec<(&str, &str, u64)> = merged
            .iter()
            .map(|r| (r.condition.as_str(), r.algorithm.as_str(), r.figures.overlapping_holds))
            .collect();
        assert_eq!(
            got,
            [("a", "jedis", 0), ("b", "jedis", 0), ("b", "redis-token", 3), ("c", "jedis", 1)]
        );
    }

    #[test]
    fn merged_rows_take_the_place_a_full_run_gives_them() {
        let row = |condition: &str, engine: &str, cluster: bool, algorithm: &str| Row {
            condition: condition.into(),
            faults: "none".into(),
            engine: engine.into(),
            cluster,
            consistency: Consistency::Quorum,
            algorithm: algorithm.into(),
            duration_s: 30.0,
            grants_per_second: 1.0,
            figures: Default::default(),
        };
        let previous = vec![
            row("no fault", "embedded", false, "shadow"),
            row("no fault", "embedded", false, "queue"),
            row("partition 3s", "embedded", false, "shadow"),
            row("partition 3s", "embedded", false, "queue"),
            row("no fault", "zookeeper", false, "zookeeper"),
            row("partition 3s", "zookeeper", false, "zookeeper"),
            row("server restart 3s", "zookeeper", false, "zookeeper"),
            row("no fault", "zookeeper ×3", true, "zookeeper"),
            row("no fault", "redis", false, "jedis"),
        ];
        let fresh = vec![
            row("partition 1s < TTL", "embedded", false, "shadow"),
            row("partition 1s < TTL", "embedded", false, "queue"),
            row("partition 1s < TTL", "zookeeper", false, "zookeeper"),
            row("follower pause 5s", "zookeeper ×3", true, "zookeeper"),
        ];
        let merged = merge(previous, fresh);
        let got: Vec<String> = merged
            .iter()
            .map(|r| format!("{}/{}/{}", r.condition, r.engine, r.algorithm))
            .collect();
        assert_eq!(
            got,
            [
                "no fault/embedded/shadow",
                "no fault/embedded/queue",
                "partition 3s/embedded/shadow",
                "partition 3s/embedded/queue",
                "partition 1s < TTL/embedded/shadow",
                "partition 1s < TTL/embedded/queue",
                "no fault/redis/jedis",
                "no fault/zookeeper/zookeeper",
                "partition 3s/zookeeper/zookeeper",
                "partition 1s < TTL/zookeeper/zookeeper",
                "server restart 3s/zookeeper/zookeeper",
                "no fault/zookeeper ×3/zookeeper",
                "follower pause 5s/zookeeper ×3/zookeeper",
            ]
        );
    }

    /// A server row of `condition` on `engine`, with `figures`.
    fn server_row(
        condition: &Condition,
        engine: &str,
        figures: crate::measure::safety::SafetyFigures,
    ) -> Row {
        Row {
            condition: condition.name.into(),
            faults: condition.faults.into(),
            engine: engine.into(),
            cluster: false,
            consistency: Consistency::Quorum,
            algorithm: engine.into(),
            duration_s: 30.0,
            grants_per_second: 5.0,
            figures,
        }
    }

    /// On a server that asks every client for a password, the open stranger's row says it was
    /// refused; on an open one it does not.
    #[test]
    fn an_open_stranger_on_a_server_that_asks_for_a_password_is_said_refused() {
        let held =
            crate::measure::safety::SafetyFigures { overlapping_holds: 7, ..Default::default() };
        let rows = [
            server_row(open_stranger(), "postgres", Default::default()),
            server_row(open_stranger(), "zookeeper", held),
        ];
        let text = stranger_findings(&rows);
        let line = |engine: &str| {
            let on = format!("on {engine},");
            text.lines().find(|l| l.contains(&on)).unwrap_or_default().to_string()
        };
        assert!(line("postgres").contains("the stranger (none) is refused"), "{text}");
        assert!(line("postgres").contains("no lock held twice"), "{text}");
        assert!(!line("zookeeper").contains("refused"), "{text}");
        assert!(line("zookeeper").contains("**held twice** 7 times"), "{text}");
    }

    /// The terminated rows' findings read the overlaps' mean length, the stale writes and the
    /// holders told off the figures, and say when some holders were not told.
    #[test]
    fn the_terminated_rows_findings_are_read_off_their_figures() {
        let terminated = CONDITIONS.iter().find(|c| c.applies == Applies::Administered).unwrap();
        assert_eq!(terminated.name, "backend terminated");
        let figures = |told| crate::measure::safety::SafetyFigures {
            overlapping_holds: 4,
            overlap_us: 800_000,
            stale_accepted_without_fencing: 4,
            stale_holders: 4,
            stale_holders_told: told,
            ..Default::default()
        };
        let rows = [
            server_row(terminated, "postgres", figures(4)),
            server_row(terminated, "mariadb", figures(1)),
        ];
        let text = terminate_findings(&rows);
        assert!(text.contains("### Backends terminated"), "{text}");
        let postgres = text.lines().find(|l| l.starts_with("- postgres")).unwrap();
        assert!(postgres.contains("**held twice** 4 times, 200 ms each on average"), "{text}");
        assert!(postgres.contains("0 / 4; holders told: 4/4."), "{text}");
        let mariadb = text.lines().find(|l| l.starts_with("- mariadb")).unwrap();
        assert!(mariadb.contains("holders told: 1/4; the others let go before"), "{text}");
        assert_eq!(terminate_findings(&rows[..0]), "");
    }

    /// The administrator's condition applies to the engines that have one (PostgreSQL and
    /// MariaDB) on the servers the harness starts, and to no other.
    #[test]
    fn the_terminated_condition_applies_to_postgres_and_mariadb() {
        let terminated = CONDITIONS.iter().find(|c| c.applies == Applies::Administered).unwrap();
        let on: Vec<String> = servers()
            .into_iter()
            .filter(|(e, o)| can_inject(*e, o, terminated))
            .map(|(e, _)| e.to_string())
            .collect();
        assert_eq!(on, ["postgres", "mariadb"]);
    }

    /// Every cluster condition runs somewhere: some engine's cluster can inject its faults
    /// (etcd's build feature aside, Redis and ZooKeeper and Redlock cover them all).
    #[test]
    fn every_cluster_condition_applies_to_some_cluster() {
        for c in &CLUSTER_CONDITIONS {
            let on: Vec<String> = clusters()
                .into_iter()
                .filter(|(e, o)| can_inject(*e, o, c))
                .map(|(e, _)| e.to_string())
                .collect();
            assert!(!on.is_empty(), "{} applies to no cluster", c.name);
            if c.faults.starts_with("lagged") {
                assert_eq!(on, ["redis"], "{}", c.name);
            }
            if c.faults.starts_with("master") {
                assert_eq!(on, ["redlock"], "{}", c.name);
            }
        }
    }

    /// Every condition on every engine's every algorithm, with figures as wide as a bad run
    /// gives: the console table still fits the terminal.
    #[test]
    fn the_console_table_fits_the_terminal() {
        let mut rows = Vec::new();
        for engine in EngineRef::all() {
            for algorithm in engine.algorithms() {
                for c in CONDITIONS.iter().chain(&CLUSTER_CONDITIONS) {
                    let mut figures = crate::measure::safety::SafetyFigures {
                        overlapping_holds: 12_345,
                        overlap_us: 123_456_789,
                        stale_accepted: 12_345,
                        stale_accepted_without_fencing: 123_456,
                        stale_holders_told: 1_234,
                        stale_holders: 12_345,
                        unavailable_us: 1,
                        ..Default::default()
                    };
                    figures.resumed_after_us_by_fault.insert("x".into(), 123_456_789);
                    rows.push(Row {
                        condition: c.name.to_string(),
                        faults: c.faults.to_string(),
                        engine: format!("{} sentinel", engine.name()),
                        cluster: false,
                        consistency: c.consistency,
                        algorithm: algorithm.name.to_string(),
                        duration_s: 60.0,
                        grants_per_second: 12_345.6,
                        figures,
                    });
                }
            }
        }
        let t = console_table(&rows);
        assert!(widest_line(&t) <= WIDTH, "{} columns:\n{t}", widest_line(&t));
        assert!(t.lines().next().unwrap().contains("overlaps"), "{t}");
    }
}

#[cfg(test)]
mod committed {
    use super::*;
    use clap::Parser;

    /// `results/safety/README.md` is what [`render`] makes of `safety.json` beside it with
    /// the default settings (`scripts/regenerate-results.sh`'s): the README is generated, never
    /// typed, and a change of the wording shows here before the next regeneration.
    #[test]
    fn the_committed_readme_is_rendered_from_the_committed_rows() {
        let (rows, readme) = committed("safety");
        assert!(
            render(&default_args(), &rows) == readme,
            "results/safety/README.md is not what render makes"
        );
    }

    /// The rows and the README committed in `results/<dir>`.
    fn committed(dir: &str) -> (Vec<Row>, String) {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../results").join(dir);
        let text = std::fs::read_to_string(dir.join("safety.json")).unwrap();
        (
            serde_json::from_str(&text).unwrap(),
            std::fs::read_to_string(dir.join("README.md")).unwrap(),
        )
    }

    /// `safety`'s defaults, as the command line gives them.
    fn default_args() -> SafetyArgs {
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            args: SafetyArgs,
        }
        Cli::parse_from(["safety"]).args
    }

    /// results/leader-kills holds cluster rows alone, of a longer run than the default: its
    /// README says so and speaks of no single-server rows.
    #[test]
    fn the_long_leader_kill_rows_are_rendered_as_they_ran() {
        let (rows, committed_readme) = committed("leader-kills");
        assert!(rows.iter().all(|r| r.cluster && r.duration_s >= 600.0), "{rows:?}");
        let readme = render(&default_args(), &rows);
        assert_eq!(readme, committed_readme);
        assert!(readme.contains("(600s of wall time per row)"), "{readme}");
        assert!(!readme.contains("lease TTL 2s"), "{readme}");
        assert!(readme.contains("\"leader killed every 8s\" `uniform:5ms..50ms`"), "{readme}");
    }
}
