//! `bench-harness primitives`: the reader-writer locks, semaphores and elections of every
//! engine that has them, side by side, fair weather and under the leader faults of the
//! clusters, into `results/primitives/`.
//!
//! Every row is one run of one primitive on one engine (the queue's on the embedded store in
//! simulated time, the rest on servers and clusters the harness starts, in wall time), checked
//! grant by grant against the primitive's rule ([`crate::measure::conflict`]): a writer
//! overlapped by anyone, more permits held than the semaphore has, two leaders at once are
//! each an overlap. Beside the mutex's figures each row has the primitive's own
//! ([`crate::measure::shares`]): how many held at once against the limit, reads and writes
//! apart, the longest writer wait, and for elections the failover from the leader's crash to
//! the next leader's grant.

use crate::config::{ClockMode, RunConfig};
use crate::dist::{format_duration, parse_positive_duration};
use crate::engines::{self, EngineOptions, EngineRef};
use crate::measure::shares::ShareFigures;
use crate::measure::summary;
use crate::primitive::Primitive;
use crate::report::{console, files, progress};
use crate::run as runner;
use clap::Args;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

/// The settings of `primitives`.
#[derive(Args, Debug, Clone)]
pub struct PrimitivesArgs {
    /// Contenders per run (one lock).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub threads: u32,
    /// Simulated time per run on the embedded store.
    #[arg(long, default_value = "60s", value_parser = parse_positive_duration)]
    pub duration: Duration,
    /// Wall time per run on one server.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub server_duration: Duration,
    /// Wall time per run on a cluster.
    #[arg(long, default_value = "20s", value_parser = parse_positive_duration)]
    pub cluster_duration: Duration,
    /// Leave out the rows on servers the harness starts (they need redis-server, zookeeper
    /// and etcd-server installed), clusters included.
    #[arg(long)]
    pub no_servers: bool,
    /// Leave out the cluster rows.
    #[arg(long)]
    pub no_clusters: bool,
    /// Re-run only these engines' rows (e.g. `service`; `embedded` for the queue's) and merge
    /// them into the output directory's `primitives.json`, keeping every other row as it was
    /// (or start one, in a directory without it).
    #[arg(long, value_name = "ENGINE,...", value_delimiter = ',', value_parser = crate::args::engine_parser())]
    pub engines: Vec<EngineRef>,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory.
    #[arg(short, long, value_name = "DIR", default_value = "results/primitives")]
    pub out: PathBuf,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// Measure nothing: write the README again from the `primitives.json` already in --out.
    #[arg(long)]
    pub redraw: bool,
}

/// One workload of the table: a primitive, under a fault or none.
#[derive(Debug, Clone, Copy)]
struct Workload {
    name: &'static str,
    primitive: &'static str,
    faults: &'static str,
    /// Only on the clusters the harness starts (a leader fault).
    clusters_only: bool,
}

/// The workloads, in table order. An election's leader is crashed (it stops where it is: its
/// lease must run out before the next candidate is elected) every 3 s: a few failovers in a
/// server row.
const WORKLOADS: [Workload; 8] = [
    Workload {
        name: "reader-writer, 90% reads",
        primitive: "rw:90",
        faults: "none",
        clusters_only: false,
    },
    Workload {
        name: "reader-writer, 50% reads",
        primitive: "rw:50",
        faults: "none",
        clusters_only: false,
    },
    Workload {
        name: "reader-writer, 90% reads, readers first",
        primitive: "rw:90/readers-first",
        faults: "none",
        clusters_only: false,
    },
    Workload {
        name: "semaphore of 4",
        primitive: "semaphore:4",
        faults: "none",
        clusters_only: false,
    },
    Workload {
        name: "election, leader crash",
        primitive: "election",
        faults: "crash:1s@3s/who=holder",
        clusters_only: false,
    },
    Workload {
        name: "reader-writer, 90% reads, leader kill",
        primitive: "rw:90",
        faults: "leader-kill:2s@8s",
        clusters_only: true,
    },
    Workload {
        name: "semaphore of 4, leader kill",
        primitive: "semaphore:4",
        faults: "leader-kill:2s@8s",
        clusters_only: true,
    },
    Workload {
        name: "election, leader kill",
        primitive: "election",
        faults: "leader-kill:2s@8s",
        clusters_only: true,
    },
];

/// The lease TTL of every row: the failover after a crash waits it out.
const TTL: Duration = Duration::from_secs(2);

/// One row: a primitive on one engine under one workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Row {
    /// The workload's name.
    pub workload: String,
    /// Its `--faults`.
    pub faults: String,
    /// The engine, with the shape of its cluster ("etcd ×3").
    pub engine: String,
    /// A cluster row.
    pub cluster: bool,
    /// The algorithm.
    pub algorithm: String,
    /// The run's length (simulated on the embedded store, wall time on a server).
    pub duration_s: f64,
    /// Grants per second (one lock).
    pub grants_per_second: f64,
    /// Acquisition latency of every grant, p99, ms.
    pub p99_ms: f64,
    /// Grants that broke the primitive's rule.
    pub overlaps: u64,
    /// Grants whose token broke the order ([`crate::measure::metrics::token_order_violations`]).
    pub token_violations: Option<u64>,
    /// Lock and release errors.
    pub errors: u64,
    /// Requests to the store per grant (`None`: not counted).
    pub ops_per_grant: Option<f64>,
    /// The primitive's own figures.
    pub shares: ShareFigures,
}

/// One run of the table.
#[derive(Clone)]
struct Job {
    workload: Workload,
    engine: EngineRef,
    options: EngineOptions,
    cluster: bool,
    algorithm: &'static engines::Algorithm,
    args: PrimitivesArgs,
}

fn run_one(job: &Job) -> anyhow::Result<Row> {
    let (args, w) = (&job.args, &job.workload);
    let on_server = !job.engine.in_process();
    let duration = match (job.cluster, on_server) {
        (true, _) => args.cluster_duration,
        (false, true) => args.server_duration,
        (false, false) => args.duration,
    };
    let primitive: Primitive = w.primitive.parse()?;
    let cfg = RunConfig {
        backend: job.engine,
        engine: job.options.clone(),
        clock: if on_server { ClockMode::Wall } else { ClockMode::Simulated },
        algorithms: vec![job.algorithm.name.to_string()],
        threads: args.threads as usize,
        duration,
        ttl: TTL,
        primitive,
        faults: w.faults.parse().map_err(anyhow::Error::msg)?,
        seed: args.seed,
        ..RunConfig::default()
    };
    cfg.validate().map_err(anyhow::Error::msg)?;
    let outcome = runner::run_algorithm(&cfg, job.algorithm, None)?;
    let report = summary::analyze(&cfg, job.algorithm, &outcome);
    let topology = job.engine.topology(&job.options);
    let shares =
        report.shares.ok_or_else(|| anyhow::anyhow!("a run of {primitive} measured no shares"))?;
    Ok(Row {
        workload: w.name.to_string(),
        faults: w.faults.to_string(),
        engine: match topology.as_str() {
            "" => job.engine.to_string(),
            t => format!("{} {t}", job.engine),
        },
        cluster: job.cluster,
        algorithm: job.algorithm.name.to_string(),
        duration_s: duration.as_secs_f64(),
        grants_per_second: report.throughput.grants_per_second,
        p99_ms: report.latency.p99_ms,
        overlaps: report.safety.overlapping_holds,
        token_violations: report.safety.token_order_violations,
        errors: report.errors.lock_errors + report.errors.release_errors,
        ops_per_grant: report.store.ops_per_grant,
        shares,
    })
}

/// Every job: each engine (at one server and as its cluster) with each algorithm that has the
/// workload's primitive.
fn jobs(args: &PrimitivesArgs) -> anyhow::Result<Vec<Job>> {
    let mut places: Vec<(EngineRef, EngineOptions, bool)> = Vec::new();
    for engine in EngineRef::all().filter(|e| args.engines.is_empty() || args.engines.contains(e)) {
        if engine.in_process() {
            if engine == EngineRef::default_engine() {
                places.push((engine, engine.default_options(), false));
            }
            continue;
        }
        if args.no_servers {
            continue;
        }
        if let Some(options) = engine.spawned() {
            places.push((engine, options, false));
        }
        if let Some(options) = engine.clustered().filter(|_| !args.no_clusters) {
            places.push((engine, options, true));
        }
    }
    let mut jobs = Vec::new();
    for (engine, options, cluster) in places {
        for w in WORKLOADS.iter().filter(|w| cluster || !w.clusters_only) {
            let primitive: Primitive = w.primitive.parse()?;
            let faults: crate::faults::FaultPlan = w.faults.parse().map_err(anyhow::Error::msg)?;
            let can = engine.fault_kinds(&options);
            if !faults.kinds().all(|k| can.contains(&k)) {
                continue;
            }
            for algorithm in engine.algorithms() {
                if primitive.offered_by(algorithm.primitives) {
                    jobs.push(Job {
                        workload: *w,
                        engine,
                        options: options.clone(),
                        cluster,
                        algorithm,
                        args: args.clone(),
                    });
                }
            }
        }
    }
    Ok(jobs)
}

fn ms(x: f64) -> String {
    format!("{x:.1}")
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn rows_of<'a>(rows: &'a [Row], workload: &str) -> Vec<&'a Row> {
    rows.iter().filter(|r| r.workload == workload).collect()
}

/// The reader-writer tables: readers at once, reads and writes apart, the longest writer wait.
fn rw_table(rows: &[&Row]) -> String {
    let mut out = String::from(
        "| engine | algorithm | grants/s | readers at once (mean / most) | read p50 / p99 ms | write p50 / p99 ms | longest writer wait ms | longest reader wait ms | overlaps | requests per grant | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let s = &r.shares;
        let reads = s.reads.unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.2} / {} | {} / {} | {} / {} | {} | {} | {} | {} | {} |",
            r.engine,
            r.algorithm,
            r.grants_per_second,
            s.mean_holders,
            s.max_holders,
            ms(reads.p50_ms),
            ms(reads.p99_ms),
            ms(s.writes.p50_ms),
            ms(s.writes.p99_ms),
            ms(s.writes.max_ms),
            ms(reads.max_ms),
            r.overlaps,
            opt(r.ops_per_grant, 2),
            r.errors,
        );
    }
    out
}

fn semaphore_table(rows: &[&Row]) -> String {
    let mut out = String::from(
        "| engine | algorithm | grants/s | permits held (mean / most / of) | p50 / p99 ms | longest wait ms | overlaps | requests per grant | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let s = &r.shares;
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.2} / {} / {} | {} / {} | {} | {} | {} | {} |",
            r.engine,
            r.algorithm,
            r.grants_per_second,
            s.mean_holders,
            s.max_holders,
            s.limit.map_or_else(|| "-".into(), |l| l.to_string()),
            ms(s.writes.p50_ms),
            ms(s.writes.p99_ms),
            ms(s.writes.max_ms),
            r.overlaps,
            opt(r.ops_per_grant, 2),
            r.errors,
        );
    }
    out
}

fn election_table(rows: &[&Row]) -> String {
    let mut out = String::from(
        "| engine | algorithm | leaders/s | leaders at once (most) | crashes of a leader | failover p50 / max ms | longest wait ms | overlaps | errors |\n\
         |---|---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let s = &r.shares;
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {} | {} | {} / {} | {} | {} | {} |",
            r.engine,
            r.algorithm,
            r.grants_per_second,
            s.max_holders,
            s.failovers,
            opt(s.failover_p50_ms, 0),
            opt(s.failover_max_ms, 0),
            ms(s.writes.max_ms),
            r.overlaps,
            r.errors,
        );
    }
    out
}

/// Which reader-writer lock kept its writers waiting longest at 90% reads, against its own
/// readers, and what readers first costs the writers where an engine has both policies.
fn findings(rows: &[Row]) -> String {
    let mut out = String::new();
    let overlapped: Vec<&Row> = rows.iter().filter(|r| r.overlaps > 0).collect();
    if overlapped.is_empty() {
        let _ = writeln!(out, "- No row had an overlap: every writer held alone, no semaphore held more than its permits, and no election had two leaders at once.");
    } else {
        for r in overlapped {
            let _ = writeln!(
                out,
                "- **{} on {} ({}) had {} overlapping grants.**",
                r.algorithm, r.engine, r.workload, r.overlaps
            );
        }
    }
    let ratio = |r: &Row| {
        let reads = r.shares.reads.as_ref().map_or(0.0, |s| s.p99_ms);
        (reads > 0.0).then(|| r.shares.writes.p99_ms / reads)
    };
    let fifo = rows_of(rows, WORKLOADS[0].name);
    let worst =
        fifo.iter().filter_map(|r| ratio(r).map(|x| (x, r))).max_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((x, r)) = worst {
        let _ = writeln!(
            out,
            "- At 90% reads in queue order, the writers of {} on {} waited longest against its readers: write p99 {} ms, {x:.1}× the read p99 ({} ms).",
            r.algorithm,
            r.engine,
            ms(r.shares.writes.p99_ms),
            ms(r.shares.reads.as_ref().map_or(0.0, |s| s.p99_ms)),
        );
    }
    for first in rows_of(rows, WORKLOADS[2].name) {
        let same = fifo.iter().find(|r| r.engine == first.engine && r.algorithm == first.algorithm);
        if let Some(fifo) = same {
            let _ = writeln!(
                out,
                "- **Readers first starves writers**: with {} on {}, the longest writer wait was {} ms against {} ms in queue order ({:.1}×), while the read p99 went from {} to {} ms.",
                first.algorithm,
                first.engine,
                ms(first.shares.writes.max_ms),
                ms(fifo.shares.writes.max_ms),
                first.shares.writes.max_ms / fifo.shares.writes.max_ms.max(0.001),
                ms(fifo.shares.reads.as_ref().map_or(0.0, |s| s.p99_ms)),
                ms(first.shares.reads.as_ref().map_or(0.0, |s| s.p99_ms)),
            );
        }
    }
    let mut semaphores = rows_of(rows, WORKLOADS[3].name);
    semaphores.sort_by(|a, b| b.shares.mean_holders.total_cmp(&a.shares.mean_holders));
    if let (Some(best), Some(worst)) = (semaphores.first(), semaphores.last()) {
        let _ = writeln!(
            out,
            "- Semaphores of 4: permits held at once while any was held, mean, from {:.2} ({} on {}) down to {:.2} ({} on {}): how much of the limit a semaphore hands out depends on how fast it hands a permit over, not on its size.",
            best.shares.mean_holders,
            best.algorithm,
            best.engine,
            worst.shares.mean_holders,
            worst.algorithm,
            worst.engine,
        );
    }
    let crashes = rows_of(rows, WORKLOADS[4].name);
    let failover: Vec<String> = crashes
        .iter()
        .filter_map(|r| {
            let (p50, max) = (r.shares.failover_p50_ms?, r.shares.failover_max_ms?);
            Some(format!("{} {p50:.0} / {max:.0} ms ({})", r.engine, r.shares.failovers))
        })
        .collect();
    if !failover.is_empty() {
        let _ = writeln!(
            out,
            "- An election's failover after its leader crashed waits out the leader's lease (TTL {}), on every engine alike: from the crash to the next leader's grant, median / longest (crashes): {}.",
            format_duration(TTL),
            failover.join(", ")
        );
    }
    let errors: Vec<String> = rows
        .iter()
        .filter(|r| r.errors > 0)
        .map(|r| format!("{} on {} ({}): {}", r.algorithm, r.engine, r.workload, r.errors))
        .collect();
    if !errors.is_empty() {
        let _ = writeln!(
            out,
            "- Errors (lock and release errors; a request in flight when a cluster's leader is killed can fail, as the mutex's do under the same fault): {}.",
            errors.join("; ")
        );
    }
    out
}

/// The README.
pub fn render(args: &PrimitivesArgs, rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Reader-writer locks, semaphores and elections\n\n\
         Generated by `bench-harness primitives` (`scripts/regenerate-results.sh`); do not edit by hand. \
         Every number comes from `primitives.json` in this directory.\n\n\
         {} contenders on one lock, hold {} and think {} (as the mutex's runs), lease TTL {}, seed {}: \
         the thesis's queue lock generalised on the embedded store ({} of simulated time per row), and \
         every engine with a primitive on loopback servers the harness starts ({} per row; its clusters {} per row). \
         Every grant is checked against the primitive's rule: a writer overlapped by anyone, more permits \
         than the semaphore's size, or two leaders at once is an **overlap**. Requests per grant count every \
         request the clients sent in the window (reads and writes alike).\n",
        args.threads,
        RunConfig::default().hold,
        RunConfig::default().think,
        format_duration(TTL),
        args.seed,
        format_duration(args.duration),
        format_duration(args.server_duration),
        format_duration(args.cluster_duration),
    );
    let _ = writeln!(out, "## Findings\n\n{}", findings(rows));
    for w in &WORKLOADS {
        let shown = rows_of(rows, w.name);
        if shown.is_empty() {
            continue;
        }
        let faults =
            if w.faults == "none" { String::new() } else { format!(" (`--faults {}`)", w.faults) };
        let _ =
            writeln!(out, "## {} (`--primitive {}`){faults}\n", capitalise(w.name), w.primitive);
        out.push_str(&match w.primitive.parse::<Primitive>() {
            Ok(Primitive::Rw { .. }) => rw_table(&shown),
            Ok(Primitive::Semaphore { .. }) => semaphore_table(&shown),
            _ => election_table(&shown),
        });
        out.push('\n');
    }
    out.push_str(
        "Readers at once: the mean number of readers holding while any read (and the most at once); \
         permits held: the same for a semaphore's permits, against its size. Read and write latency: \
         request to grant, for reads and for every other grant. Longest writer wait: the longest a \
         write waited. Failover: from a leader's crash (it stops where it is and sends nothing) to the \
         next leader's grant, when that leader knows it leads.\n",
    );
    out
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    c.next().map_or_else(String::new, |f| f.to_uppercase().collect::<String>() + c.as_str())
}

/// The table for the terminal.
pub fn console_table(rows: &[Row]) -> String {
    let headers =
        ["workload", "engine", "algorithm", "grants/s", "holders", "write max ms", "overlaps"];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.workload.clone(),
                r.engine.clone(),
                r.algorithm.clone(),
                format!("{:.1}", r.grants_per_second),
                format!("{:.2}/{}", r.shares.mean_holders, r.shares.max_holders),
                ms(r.shares.writes.max_ms),
                r.overlaps.to_string(),
            ]
        })
        .collect();
    console::render(&headers, 3, &cells)
}

/// `bench-harness primitives`.
pub fn run(args: &PrimitivesArgs) -> anyhow::Result<()> {
    let json = args.out.join("primitives.json");
    if args.redraw {
        let rows: Vec<Row> = files::read_earlier(&json)?;
        files::write_atomic(&args.out.join("README.md"), render(args, &rows).as_bytes())?;
        println!("{} written again from its primitives.json", args.out.join("README.md").display());
        return Ok(());
    }
    files::prepare_dir(&args.out)?;
    let jobs = jobs(args)?;
    let bar = progress::bar(jobs.len() as u64, "primitives", args.quiet, "runs");
    // One at a time: a wall-time run beside another would load the machine it measures.
    let order: Vec<usize> = (0..jobs.len()).collect();
    let mut rows = super::parallel(&jobs, &order, 1, &bar, run_one)?;
    bar.finish_and_clear();
    if !args.engines.is_empty() && json.exists() {
        let previous: Vec<Row> = files::read_earlier(&json)?;
        rows = super::replace_rows(previous, rows, |r| {
            (r.workload.clone(), r.engine.clone(), r.algorithm.clone())
        });
    }
    files::write_json(&json, &rows)?;
    files::write_atomic(&args.out.join("README.md"), render(args, &rows).as_bytes())?;
    print!("{}", console_table(&rows));
    for line in findings(&rows).lines() {
        println!("{}", console::wrap(line, console::WIDTH).trim_end());
    }
    println!("{} has every column and what each means.", args.out.join("README.md").display());
    Ok(())
}
