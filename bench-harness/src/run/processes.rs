//! `--processes P`: the contenders of a run spread over P worker processes of this binary,
//! against one shared server (Cassandra, Redis or ZooKeeper).
//!
//! The parent ([`run_algorithm`]):
//!
//! 1. connects once itself (an unreachable server fails here, with one clear message; on
//!    Cassandra this also creates the tables, so that the workers never race to create them),
//!    and makes the run's namespace;
//! 2. starts P workers (`bench-harness worker`, a hidden command) and writes each one line of
//!    JSON on its stdin: a [`WorkerSpec`] (the whole [`RunConfig`], the algorithm, the worker's
//!    number, the namespace). Worker `w` runs contenders [`RunConfig::worker_contenders`]`(w)`:
//!    contiguous blocks of the global contender indices, disjoint, covering `0..threads`;
//! 3. waits until every worker has connected its contenders and printed `{"type":"ready"}`,
//!    then sends each a [`Go`] line with the common start: the system clock in microseconds
//!    since the Unix epoch, a moment ahead;
//! 4. collects each worker's stdout: JSON lines ([`WorkerLine`]), one per grant, one per
//!    contender, the request counters when the backend counts them, and a closing `done`;
//! 5. merges them ([`merge`], a pure function) into one [`RunOutcome`]: the metrics (safety
//!    and fairness among them) are then computed over the grants of every process together.
//!
//! With `--faults process-pause:…` the parent also serves the fenced resource on a loopback
//! port (its address goes into every [`WorkerSpec`]) and runs the nemesis, which stops and
//! continues whole workers (its `Services`); its log and the fault windows join the outcome.
//!
//! Times in the grant log are **system-clock microseconds since the common start**
//! ([`Stamp::System`]): comparable across processes on one machine. (On several machines they
//! would be as comparable as the machines' clocks.)

use super::contenders as runner;
use super::nemesis::Nemesis;
use super::resource::{serve, FencedResource, RemoteResource, Resource};
use super::stamp::{system_now_us, Stamp};
use crate::config::RunConfig;
use crate::engines::Algorithm;

use crate::measure::grant_log::GrantLog;
use crate::measure::latencies::Latencies;
use crate::measure::log::{ContenderOutcome, ErrorCounts, RunOutcome};
use crate::measure::log::{FaultWindow, ResourceLog};
use crate::measure::metrics::{Grant, OpCount};
use anyhow::{anyhow, bail, Context};
use indicatif::ProgressBar;
use lock_core::embedded::{OpCounts, StoreCounters};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The hidden command that runs a worker.
pub const WORKER_COMMAND: &str = "worker";
/// How far ahead of the moment every worker is ready the common start lies.
pub const START_MARGIN: Duration = Duration::from_millis(300);
/// How long workers may take to connect their contenders.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// What a worker is told first (one JSON line on its stdin).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// The run's settings, whole (processes included).
    pub config: RunConfig,
    /// The algorithm's registry name.
    pub algorithm: String,
    /// This worker's number, from 0.
    pub worker: usize,
    /// The run's namespace on the server.
    pub namespace: String,
    /// The parent's fenced resource, when the run has one (`--faults`).
    #[serde(default)]
    pub resource: Option<std::net::SocketAddr>,
}

/// The second line a worker gets: when to start.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Go {
    /// The common start, in microseconds since the Unix epoch (system clock).
    pub start_us: u64,
}

/// One contender's record in a worker's output (its latencies are its grants').
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContenderRecord {
    /// Global contender index.
    pub contender: u32,
    /// Its lock; none when each acquire drew its lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<u32>,
    /// Its clock skew.
    pub skew_us: i64,
    /// Its request still waiting at the end, if any: since when.
    pub unfinished_since_us: Option<u64>,
    /// Its failures.
    pub errors: ErrorCounts,
}

/// One line of a worker's stdout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WorkerLine {
    /// Every contender is connected; waiting for [`Go`].
    Ready {
        /// The worker's number.
        worker: usize,
    },
    /// One grant.
    Grant(Grant),
    /// One contender's record.
    Contender(ContenderRecord),
    /// The request counters at the end of the window (backends that count).
    Counters {
        /// Requests per table.
        per_table: BTreeMap<String, OpCount>,
        /// The sessions its contenders' clients had opened (engines that count them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sessions: Option<u64>,
    },
    /// The last line.
    Done {
        /// The worker's number.
        worker: usize,
        /// When its last contender finished, in µs since the common start.
        finished_us: u64,
    },
}

/// What one worker reported.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkerReport {
    /// The worker's number.
    pub worker: usize,
    /// Its grants.
    pub grants: Vec<Grant>,
    /// Its contenders.
    pub contenders: Vec<ContenderRecord>,
    /// Its request counters, if the backend counts.
    pub counters: Option<BTreeMap<String, OpCount>>,
    /// The sessions its contenders opened, if the backend counts them.
    pub sessions: Option<u64>,
    /// When its last contender finished.
    pub finished_us: u64,
}

/// Parses a worker's stdout. Every line must be a [`WorkerLine`] and the last a `done`.
pub fn parse_output(worker: usize, text: &str) -> anyhow::Result<WorkerReport> {
    let mut report = WorkerReport { worker, ..WorkerReport::default() };
    let mut done = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed: WorkerLine = serde_json::from_str(line)
            .with_context(|| format!("worker {worker}, output line {}: {line}", i + 1))?;
        match parsed {
            WorkerLine::Ready { .. } => {}
            WorkerLine::Grant(g) => report.grants.push(g),
            WorkerLine::Contender(c) => report.contenders.push(c),
            WorkerLine::Counters { per_table, sessions } => {
                report.counters = Some(per_table);
                report.sessions = sessions;
            }
            WorkerLine::Done { finished_us, .. } => {
                report.finished_us = finished_us;
                done = true;
            }
        }
    }
    anyhow::ensure!(done, "worker {worker} ended without its closing 'done' line");
    Ok(report)
}

/// Merges the workers' reports of one run into one outcome: every contender of `0..threads`
/// must be reported exactly once (by any worker), grants must name known contenders. The
/// grants are sorted as the single-process runner sorts them; each contender's latency
/// histogram is rebuilt from its grants; request counters and sessions opened are added up
/// (each kept only if every worker counted it); the run finished when the last worker did.
pub fn merge(
    cfg: &RunConfig,
    algorithm: &'static str,
    reports: Vec<WorkerReport>,
) -> anyhow::Result<RunOutcome> {
    let n = cfg.threads;
    let mut records: Vec<Option<ContenderRecord>> = vec![None; n];
    let mut grants = Vec::new();
    let mut counted = !reports.is_empty();
    let mut per_table: BTreeMap<String, OpCounts> = BTreeMap::new();
    let mut sessions = (!reports.is_empty()).then_some(0);
    let mut finished_us = 0;
    for r in reports {
        place_contenders(&mut records, r.worker, r.contenders)?;
        if let Some(g) = r.grants.iter().find(|g| g.contender as usize >= n) {
            bail!(
                "worker {} reported a grant to contender {}, but the run has {n}",
                r.worker,
                g.contender
            );
        }
        grants.extend(r.grants);
        match r.counters {
            Some(map) => add_counts(&mut per_table, map),
            None => counted = false,
        }
        sessions = sessions.zip(r.sessions).map(|(a, b)| a + b);
        finished_us = finished_us.max(r.finished_us);
    }
    let missing: Vec<usize> =
        records.iter().enumerate().filter(|(_, r)| r.is_none()).map(|(i, _)| i).collect();
    if !missing.is_empty() {
        bail!("no worker reported contenders {missing:?}");
    }
    let mut latencies = vec![Latencies::new(); n];
    for g in &grants {
        latencies[g.contender as usize].record(g.latency_us());
    }
    let contenders = records
        .into_iter()
        .zip(latencies)
        .map(|(r, latencies)| {
            let r = r.expect("checked above");
            ContenderOutcome {
                index: r.contender,
                lock: r.lock,
                skew_us: r.skew_us,
                latencies,
                unfinished_since_us: r.unfinished_since_us,
                errors: r.errors,
            }
        })
        .collect();
    let grants = GrantLog::sort(grants)
        .map_err(|e| anyhow::anyhow!("cannot sort the grant log in a temporary file: {e}"))?;
    Ok(RunOutcome {
        algorithm,
        grants,
        contenders,
        counters: counted.then(|| StoreCounters { per_table, ..StoreCounters::default() }),
        sessions_opened: sessions,
        samples: Vec::new(),
        duration_us: cfg.duration.as_micros() as u64,
        finished_us,
        wall_time: Duration::ZERO,
        // The parent adds its resource's log and its faults ([`Services`]).
        resource: ResourceLog::default(),
        faults: Vec::new(),
    })
}

/// Puts each of `worker`'s contender records in its slot: a contender outside the run or
/// reported twice is an error.
fn place_contenders(
    records: &mut [Option<ContenderRecord>],
    worker: usize,
    contenders: Vec<ContenderRecord>,
) -> anyhow::Result<()> {
    let n = records.len();
    for c in contenders {
        let i = c.contender as usize;
        let slot = records.get_mut(i).ok_or_else(|| {
            anyhow!("worker {worker} reported contender {i}, but the run has {n}")
        })?;
        if slot.is_some() {
            bail!("contender {i} was reported twice (again by worker {worker})");
        }
        *slot = Some(c);
    }
    Ok(())
}

fn add_counts(per_table: &mut BTreeMap<String, OpCounts>, counts: BTreeMap<String, OpCount>) {
    for (table, c) in counts {
        let sum = per_table.entry(table).or_default();
        sum.reads += c.reads;
        sum.writes += c.writes;
        sum.deletes += c.deletes;
        sum.cas += c.cas;
        sum.serial_reads += c.serial_reads;
    }
}

/// A started worker and the threads reading its output.
struct Running {
    worker: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<std::thread::JoinHandle<String>>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Running {
    fn stderr_text(&mut self) -> String {
        self.stderr.take().and_then(|t| t.join().ok()).unwrap_or_default().trim().to_string()
    }
}

enum Event {
    Ready(usize),
    Eof(usize),
}

struct Workers(Vec<Running>);

impl Drop for Workers {
    /// Whatever happens to the parent, no worker it started outlives the run.
    fn drop(&mut self) {
        for r in &mut self.0 {
            if matches!(r.child.try_wait(), Ok(None)) {
                let _ = r.child.kill();
            }
            let _ = r.child.wait();
        }
    }
}

fn failure(r: &mut Running, what: &str) -> anyhow::Error {
    let stderr = r.stderr_text();
    let stderr = stderr.strip_prefix("error: ").unwrap_or(&stderr).to_string();
    if stderr.is_empty() {
        anyhow!("worker process {} {what}", r.worker)
    } else {
        anyhow!("worker process {} {what}: {stderr}", r.worker)
    }
}

/// Runs `algorithm` under `cfg` in `cfg.processes` worker processes (see the module docs).
pub fn run_algorithm(
    cfg: &RunConfig,
    algorithm: &'static Algorithm,
    progress: Option<&ProgressBar>,
) -> anyhow::Result<RunOutcome> {
    cfg.validate().map_err(|e| anyhow!(e))?;
    let wall = Instant::now();
    let namespace = crate::engines::fresh_namespace();
    probe(cfg, &namespace)?;
    let mut services = if cfg.faults.is_empty() { None } else { Some(Services::start(cfg)?) };
    let resource = services.as_ref().map(|s| s.resource);
    let (mut workers, events) = start_workers(cfg, algorithm, &namespace, resource)?;
    await_ready(&mut workers, &events, cfg.processes)?;
    let start_us = system_now_us() + START_MARGIN.as_micros() as u64;
    send_go(&mut workers, start_us)?;
    if let Some(s) = services.as_mut() {
        s.go(start_us, workers.0.iter().map(|r| r.child.id()).collect())?;
    }
    wait_until_done(cfg, &mut workers, start_us, progress)?;
    let reports = collect_reports(&mut workers)?;
    let mut outcome = merge(cfg, algorithm.name, reports)?;
    if let Some(s) = services {
        (outcome.resource, outcome.faults) = s.finish()?;
    }
    outcome.wall_time = wall.elapsed();
    Ok(outcome)
}

/// What the parent of worker processes runs beside them when the run has faults: the fenced
/// resource every worker writes to, and the nemesis stopping and continuing workers; on a
/// thread of its own with its own runtime, since the parent otherwise only waits.
struct Services {
    resource: std::net::SocketAddr,
    go: Option<tokio::sync::oneshot::Sender<(u64, Vec<u32>)>>,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<anyhow::Result<(ResourceLog, Vec<FaultWindow>)>>,
}

impl Services {
    fn start(cfg: &RunConfig) -> anyhow::Result<Services> {
        let (addr_tx, addr_rx) = mpsc::channel();
        let (go, go_rx) = tokio::sync::oneshot::channel::<(u64, Vec<u32>)>();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let cfg = cfg.clone();
        let thread =
            std::thread::Builder::new().name("fault-services".into()).spawn(move || {
                let rt = runner::wall_runtime()?;
                rt.block_on(async move {
                    let resource = Arc::new(FencedResource::new());
                    let (addr, server) = serve(Arc::clone(&resource))
                        .await
                        .context("cannot serve the fenced resource")?;
                    let _ = addr_tx.send(addr);
                    let Ok((start_us, pids)) = go_rx.await else {
                        return Ok((ResourceLog::default(), Vec::new()));
                    };
                    let delay = Duration::from_micros(start_us.saturating_sub(system_now_us()));
                    let start = tokio::time::Instant::now() + delay;
                    let nemesis = Arc::new(Nemesis {
                        engine: None,
                        controls: Vec::new(),
                        workers: pids,
                        stamp: Stamp::System { start_us },
                        scale: 1,
                        seed: cfg.seed,
                        start,
                        end: start + cfg.duration,
                    });
                    tokio::time::sleep_until(start).await;
                    let faults = nemesis
                        .run(&cfg.faults)
                        .await
                        .map_err(|e| anyhow!("fault injection failed: {e}"))?;
                    // The workers' last writes come in the drain: serve until they are done.
                    let _ = stop_rx.await;
                    server.abort();
                    anyhow::Ok((resource.take_log()?, faults))
                })
            })?;
        let Ok(resource) = addr_rx.recv() else {
            return Err(match thread.join() {
                Ok(Err(e)) => e,
                _ => anyhow!("the fault services thread failed"),
            });
        };
        Ok(Services { resource, go: Some(go), stop, thread })
    }

    /// The common start and the workers' process ids: the nemesis begins.
    fn go(&mut self, start_us: u64, pids: Vec<u32>) -> anyhow::Result<()> {
        let go = self.go.take().ok_or_else(|| anyhow!("the fault services started twice"))?;
        go.send((start_us, pids)).map_err(|_| anyhow!("the fault services thread ended early"))
    }

    /// The resource's log and the fault windows, once every worker is done.
    fn finish(self) -> anyhow::Result<(ResourceLog, Vec<FaultWindow>)> {
        let _ = self.stop.send(());
        self.thread.join().map_err(|_| anyhow!("the fault services thread panicked"))?
    }
}

/// One connection first: an unreachable server fails once, here, and Cassandra's tables exist
/// before the workers prepare their statements.
fn probe(cfg: &RunConfig, namespace: &str) -> anyhow::Result<()> {
    let rt = runner::wall_runtime()?;
    let probe = RunConfig { time_source: crate::engines::TimeSourceKind::Local, ..cfg.clone() };
    rt.block_on(probe.backend.open(probe.engine_setup(namespace))).map(drop).map_err(|e| anyhow!(e))
}

/// Starts every worker and hands it its [`WorkerSpec`]; the receiver gets their
/// [`Event`]s.
fn start_workers(
    cfg: &RunConfig,
    algorithm: &Algorithm,
    namespace: &str,
    resource: Option<std::net::SocketAddr>,
) -> anyhow::Result<(Workers, mpsc::Receiver<Event>)> {
    let exe = std::env::current_exe().context("cannot find this program to start workers")?;
    let (tx, rx) = mpsc::channel();
    let mut workers = Workers(Vec::with_capacity(cfg.processes));
    for w in 0..cfg.processes {
        let spec = WorkerSpec {
            config: cfg.clone(),
            algorithm: algorithm.name.to_string(),
            worker: w,
            namespace: namespace.to_string(),
            resource,
        };
        workers.0.push(start_worker(&exe, spec, tx.clone())?);
    }
    Ok((workers, rx))
}

fn start_worker(
    exe: &std::path::Path,
    spec: WorkerSpec,
    tx: mpsc::Sender<Event>,
) -> anyhow::Result<Running> {
    let w = spec.worker;
    let mut child = Command::new(exe)
        .arg(WORKER_COMMAND)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start worker process {w} ({})", exe.display()))?;
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take().map(|out| read_stdout(w, out, tx));
    let stderr = child.stderr.take().map(|mut err| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = err.read_to_string(&mut text);
            text
        })
    });
    if let Some(s) = stdin.as_mut() {
        let mut line = serde_json::to_string(&spec)?;
        line.push('\n');
        s.write_all(line.as_bytes())
            .and_then(|_| s.flush())
            .with_context(|| format!("cannot talk to worker process {w}"))?;
    }
    Ok(Running { worker: w, child, stdin, stdout, stderr })
}

/// A thread that collects worker `w`'s stdout, telling `tx` when it is ready and when its
/// output ends.
fn read_stdout(
    w: usize,
    out: std::process::ChildStdout,
    tx: mpsc::Sender<Event>,
) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let mut reader = BufReader::new(out);
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if matches!(
                        serde_json::from_str::<WorkerLine>(line.trim()),
                        Ok(WorkerLine::Ready { .. })
                    ) {
                        let _ = tx.send(Event::Ready(w));
                    }
                    text.push_str(&line);
                }
            }
        }
        let _ = tx.send(Event::Eof(w));
        text
    })
}

/// Waits until every worker has connected its contenders.
fn await_ready(
    workers: &mut Workers,
    events: &mpsc::Receiver<Event>,
    processes: usize,
) -> anyhow::Result<()> {
    let mut ready = vec![false; processes];
    let deadline = Instant::now() + READY_TIMEOUT;
    while ready.iter().any(|r| !r) {
        let left = deadline.saturating_duration_since(Instant::now());
        match events.recv_timeout(left) {
            Ok(Event::Ready(w)) => ready[w] = true,
            Ok(Event::Eof(w)) => {
                let r = &mut workers.0[w];
                let _ = r.child.wait();
                return Err(failure(r, "failed before its contenders were ready"));
            }
            Err(_) => bail!(
                "the worker processes did not connect their contenders within {READY_TIMEOUT:?}"
            ),
        }
    }
    Ok(())
}

/// Sends every worker the common start.
fn send_go(workers: &mut Workers, start_us: u64) -> anyhow::Result<()> {
    let go = format!("{}\n", serde_json::to_string(&Go { start_us })?);
    for r in &mut workers.0 {
        if let Some(mut s) = r.stdin.take() {
            s.write_all(go.as_bytes())
                .and_then(|_| s.flush())
                .with_context(|| format!("cannot talk to worker process {}", r.worker))?;
        }
    }
    Ok(())
}

/// Waits for the run and its drain, moving `progress` along the run's clock.
fn wait_until_done(
    cfg: &RunConfig,
    workers: &mut Workers,
    start_us: u64,
    progress: Option<&ProgressBar>,
) -> anyhow::Result<()> {
    let limit = START_MARGIN + cfg.duration * 2 + Duration::from_secs(60);
    let started = Instant::now();
    if let Some(bar) = progress {
        bar.set_length(cfg.duration.as_millis() as u64);
    }
    while workers.0.iter_mut().any(|r| matches!(r.child.try_wait(), Ok(None))) {
        if started.elapsed() > limit {
            bail!("the worker processes did not finish within {limit:?}");
        }
        if let Some(bar) = progress {
            let ran = system_now_us().saturating_sub(start_us) / 1000;
            bar.set_position(ran.min(cfg.duration.as_millis() as u64));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Every worker's report, once all have exited; a worker that failed fails the run with its
/// own error message.
fn collect_reports(workers: &mut Workers) -> anyhow::Result<Vec<WorkerReport>> {
    let mut reports = Vec::with_capacity(workers.0.len());
    for r in &mut workers.0 {
        let status = r.child.wait().context("cannot wait for a worker process")?;
        let text = r.stdout.take().and_then(|t| t.join().ok()).unwrap_or_default();
        if !status.success() {
            return Err(failure(r, &format!("failed ({status})")));
        }
        let stderr = r.stderr_text();
        if !stderr.is_empty() {
            eprintln!("worker {}: {stderr}", r.worker);
        }
        reports.push(parse_output(r.worker, &text)?);
    }
    Ok(reports)
}

/// `bench-harness worker`: reads a [`WorkerSpec`] and then a [`Go`] from stdin, runs its
/// contenders, and writes [`WorkerLine`]s to stdout.
pub fn worker_main() -> anyhow::Result<()> {
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let mut next_line = |what: &str| -> anyhow::Result<String> {
        lines
            .next()
            .ok_or_else(|| anyhow!("stdin closed before the {what} (this command is started by `bench-harness --processes P`, not by hand)"))?
            .with_context(|| format!("cannot read the {what}"))
    };
    let spec: WorkerSpec =
        serde_json::from_str(&next_line("worker spec")?).context("invalid worker spec")?;
    let cfg = &spec.config;
    cfg.validate().map_err(|e| anyhow!(e))?;
    let algorithm = cfg.backend.algorithm(&spec.algorithm).ok_or_else(|| {
        anyhow!("algorithm '{}' does not run on the {} backend", spec.algorithm, cfg.backend)
    })?;
    let rt = runner::wall_runtime()?;
    let (engine, lockers, resource) = rt.block_on(async {
        let resource = match spec.resource {
            Some(addr) => Some(Resource::Remote(Arc::new(
                RemoteResource::connect(addr)
                    .await
                    .context("cannot reach the parent's fenced resource")?,
            ))),
            None => None,
        };
        let engine =
            cfg.backend.open(cfg.engine_setup(&spec.namespace)).await.map_err(|e| anyhow!(e))?;
        let indices = cfg.worker_contenders(spec.worker);
        let lockers = runner::setup_contenders(cfg, algorithm, engine.as_ref(), indices).await?;
        anyhow::Ok((engine, lockers, resource))
    })?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    emit(&mut out, &WorkerLine::Ready { worker: spec.worker })?;
    out.flush()?;
    let go: Go =
        serde_json::from_str(&next_line("start signal")?).context("invalid start signal")?;
    let driven = rt.block_on(async {
        let delay = go.start_us.saturating_sub(system_now_us());
        let start = tokio::time::Instant::now() + Duration::from_micros(delay);
        let stamp = Stamp::System { start_us: go.start_us };
        let rig = runner::Rig {
            counters: engine.counters(),
            sessions: engine.sessions_opened(),
            engine: None,
            algorithm,
            resource,
        };
        runner::drive(cfg, lockers, start, stamp, rig, None).await
    })?;
    report(&mut out, spec.worker, &driven)?;
    out.flush()?;
    drop(engine);
    drop(rt);
    Ok(())
}

fn emit(out: &mut impl Write, line: &WorkerLine) -> anyhow::Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")?;
    Ok(())
}

/// A worker's output after its run: a line per grant and per contender, the counters when
/// the engine counts, and `done`.
fn report(out: &mut impl Write, worker: usize, driven: &runner::Driven) -> anyhow::Result<()> {
    for g in driven.grants.iter() {
        emit(out, &WorkerLine::Grant(g))?;
    }
    for c in &driven.contenders {
        emit(
            out,
            &WorkerLine::Contender(ContenderRecord {
                contender: c.index,
                lock: c.lock,
                skew_us: c.skew_us,
                unfinished_since_us: c.unfinished_since_us,
                errors: c.errors.clone(),
            }),
        )?;
    }
    if let Some(counters) = &driven.counters {
        let per_table =
            counters.per_table.iter().map(|(t, c)| (t.clone(), OpCount::from(c))).collect();
        let sessions = driven.sessions_opened;
        emit(out, &WorkerLine::Counters { per_table, sessions })?;
    }
    emit(out, &WorkerLine::Done { worker, finished_us: driven.finished_us })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(contender: u32, req: u64, granted: u64, released: u64, token: u64) -> Grant {
        crate::measure::metrics::test_grant(0, contender, req, granted, released, token)
    }

    fn record(contender: u32) -> ContenderRecord {
        ContenderRecord {
            contender,
            lock: Some(0),
            skew_us: 0,
            unfinished_since_us: None,
            errors: ErrorCounts::default(),
        }
    }

    fn cfg(threads: usize) -> RunConfig {
        let server =
            crate::engines::EngineRef::all().find(|e| !e.in_process()).expect("a server engine");
        RunConfig {
            threads,
            processes: 2,
            duration: Duration::from_millis(100),
            algorithms: vec![server.algorithm_names()[0].into()],
            ..RunConfig::on(server)
        }
    }

    fn lines(lines: &[WorkerLine]) -> String {
        lines.iter().map(|l| serde_json::to_string(l).unwrap() + "\n").collect()
    }

    #[test]
    fn worker_lines_round_trip_as_tagged_json() {
        let line = WorkerLine::Grant(g(3, 1, 2, 3, 4));
        let text = serde_json::to_string(&line).unwrap();
        assert!(text.starts_with("{\"type\":\"grant\""), "{text}");
        assert_eq!(serde_json::from_str::<WorkerLine>(&text).unwrap(), line);
        let text = lines(&[
            WorkerLine::Ready { worker: 1 },
            WorkerLine::Grant(g(1, 0, 5, 9, 1)),
            WorkerLine::Contender(record(1)),
            WorkerLine::Done { worker: 1, finished_us: 77 },
        ]);
        let r = parse_output(1, &text).unwrap();
        assert_eq!((r.grants.len(), r.contenders.len(), r.finished_us), (1, 1, 77));
        assert_eq!(r.counters, None);
        let e = parse_output(1, &text.replace("done", "dune")).unwrap_err();
        assert!(format!("{e:#}").contains("output line 4"), "{e:#}");
        let cut = lines(&[WorkerLine::Grant(g(1, 0, 5, 9, 1))]);
        assert!(format!("{:#}", parse_output(1, &cut).unwrap_err()).contains("'done'"));
    }

    #[test]
    fn merged_logs_are_checked_across_processes() {
        // Worker 0 (contender 0) and worker 1 (contender 1) alternate cleanly on lock 0...
        let w0 = WorkerReport {
            worker: 0,
            grants: vec![g(0, 0, 10, 20, 1), g(0, 25, 40, 50, 3)],
            contenders: vec![record(0)],
            counters: Some(BTreeMap::from([(
                "t".to_string(),
                OpCount { reads: 2, writes: 1, deletes: 0, total: 3, ..OpCount::default() },
            )])),
            sessions: Some(1),
            finished_us: 60,
        };
        let w1 = WorkerReport {
            worker: 1,
            grants: vec![g(1, 5, 22, 30, 2)],
            contenders: vec![record(1)],
            counters: Some(BTreeMap::from([(
                "t".to_string(),
                OpCount { reads: 1, writes: 1, deletes: 1, total: 3, ..OpCount::default() },
            )])),
            sessions: Some(2),
            finished_us: 80,
        };
        let run = merge(&cfg(2), "redis-token", vec![w1.clone(), w0.clone()]).unwrap();
        assert_eq!(run.grants.iter().map(|g| g.token).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(run.finished_us, 80);
        assert_eq!(run.contenders.len(), 2);
        assert_eq!(run.contenders[0].latencies.len(), 2);
        assert_eq!(run.contenders[1].latencies.histogram().max(), 17);
        let total = run.counters.as_ref().unwrap().total();
        assert_eq!((total.reads, total.writes, total.deletes), (3, 2, 1));
        assert_eq!(run.sessions_opened, Some(3));
        assert_eq!(crate::measure::metrics::overlapping_holds(&run.grants), 0);
        assert_eq!(crate::measure::metrics::overtakes(&run.grants).pairs, 0);
        assert_eq!(
            crate::measure::metrics::jain_index(&crate::measure::metrics::grants_per_contender(
                &run.grants,
                2
            )),
            Some(0.9)
        );

        // ...but a hold of one process inside another's is found only in the merged log.
        let mut bad = w1.clone();
        bad.grants = vec![g(1, 5, 15, 30, 2)];
        let run = merge(&cfg(2), "redis-token", vec![w0.clone(), bad]).unwrap();
        assert_eq!(crate::measure::metrics::overlapping_holds(&run.grants), 1);

        // A worker that does not count makes the merged counters unknown, not smaller.
        let mut silent = w1.clone();
        silent.counters = None;
        silent.sessions = None;
        let run = merge(&cfg(2), "redis-token", vec![w0.clone(), silent]).unwrap();
        assert!(run.counters.is_none());
        assert!(run.sessions_opened.is_none());
    }

    #[test]
    fn merge_refuses_missing_repeated_and_unknown_contenders() {
        let one = |worker, c: u32| WorkerReport {
            worker,
            contenders: vec![record(c)],
            ..WorkerReport::default()
        };
        let e = merge(&cfg(2), "x", vec![one(0, 0)]).unwrap_err();
        assert!(e.to_string().contains("contenders [1]"), "{e}");
        let e = merge(&cfg(2), "x", vec![one(0, 0), one(1, 0)]).unwrap_err();
        assert!(e.to_string().contains("reported twice"), "{e}");
        let e = merge(&cfg(2), "x", vec![one(0, 0), one(1, 5)]).unwrap_err();
        assert!(e.to_string().contains("the run has 2"), "{e}");
        let mut stray = one(1, 1);
        stray.grants.push(g(9, 0, 1, 2, 1));
        let e = merge(&cfg(2), "x", vec![one(0, 0), stray]).unwrap_err();
        assert!(e.to_string().contains("contender 9"), "{e}");
    }
}
