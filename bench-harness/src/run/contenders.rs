//! The contenders: N of them on one algorithm, each looping request → hold → release → think
//! until the run's duration ends.
//!
//! Each algorithm runs on a freshly opened engine (a fresh embedded store with the run's seed):
//! in simulated time inside a `lock_core::rt::Simulation` seeded with the run's seed, so that
//! the store's latencies, the holds and the thinks cost no wall time and the same seed gives
//! the same grant log; in wall time on a two-worker multi-thread tokio runtime.
//!
//! Tasks woken together run in the order they began waiting: the waits on a frozen
//! contender or client are [`lock_core::rt::Signal`]s, not tokio `watch`es, which wake their
//! waiters in a random order.
//!
//! In simulated time the clock is dilated ([`crate::config::SIMULATED_TIME_SCALE`]):
//! durations going in are multiplied, times coming out divided.
//!
//! The run's clock starts once the backend and every contender's locker are ready; every time
//! in the grant log is microseconds since then. When the duration ends contenders make no new
//! request, but the requests already waiting are **drained**: they keep waiting, for at most
//! another duration, so that the longest waits (the shadow lock's) are measured instead of
//! cut off. A request still waiting after the drain is given up (the lock's own timeout) and
//! reported as unfinished. Throughput and store load count only the run's window (grants
//! granted before its end, requests sent between its start and its end: the counters are
//! read at both).

use super::nemesis::{Control, Nemesis};
use super::resource::{FencedResource, Resource};
use super::stamp::{us_between, Stamp};
use crate::config::{ClockMode, RunConfig};
use crate::dist::Dist;
use crate::engines::{Algorithm, ContenderSpec, CounterHandle, OpenEngine, SessionCount};
use crate::keys::Keys;
use crate::measure::grant_log::GrantLog;
use crate::measure::latencies::Latencies;
use crate::measure::log::{
    ContenderOutcome, CounterSample, ErrorCounts, FaultWindow, GrantSpool, ResourceLog, RunOutcome,
};
use crate::measure::metrics::Grant;
use crate::measure::spool::Spool;
use crate::primitive::{Asking, Primitive};
use anyhow::{anyhow, Context};
use indicatif::ProgressBar;
use lock_core::embedded::{OpCounts, StoreCounters};
use lock_core::{LockError, LockGuard};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The tokio runtime of wall-time runs: two workers, every driver.
pub fn wall_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")
}

/// Runs `algorithm` under `cfg` in a runtime of its own, every contender in this process.
/// `progress`, in wall time, follows the run's clock (its length is set to the duration in
/// milliseconds).
pub fn run_in_process(
    cfg: &RunConfig,
    algorithm: &'static Algorithm,
    progress: Option<&ProgressBar>,
) -> anyhow::Result<RunOutcome> {
    let wall = std::time::Instant::now();
    let mut outcome = match cfg.clock {
        ClockMode::Simulated => {
            let mut sim = lock_core::rt::Simulation::new(cfg.seed);
            let driven = sim.block_on(run_async(cfg, algorithm, progress));
            // Leases, the time service, in-flight store messages and with them the store
            // die with the simulation: only then is the grant log read back into memory.
            drop(sim);
            outcome(cfg, algorithm, driven?)?
        }
        ClockMode::Wall => {
            let rt = wall_runtime()?;
            let driven = rt.block_on(run_async(cfg, algorithm, progress));
            drop(rt);
            outcome(cfg, algorithm, driven?)?
        }
    };
    outcome.wall_time = wall.elapsed();
    Ok(outcome)
}

struct Plan {
    index: usize,
    /// Its own lock: the one it always asks for under `fixed`.
    home: usize,
    /// The run's locks and how an acquire picks one.
    keys: Keys,
    skew_us: i64,
    /// Seed of its hold and think draws.
    seed: u64,
    /// Seed of its lock draws: a stream apart from the hold and think draws, so that the key
    /// distribution leaves those unchanged.
    key_seed: u64,
    /// What it asks for, and the seed of its share draws (read or write): a stream of its
    /// own, for the same reason.
    primitive: Primitive,
    share_seed: u64,
    hold: Dist,
    think: Dist,
    scale: u32,
    stamp: Stamp,
    end: Instant,
    drain_end: Instant,
}

/// Contender `index`'s spec under `owner` (its first owner id, or the one it comes back
/// under after a crash).
fn contender_spec(cfg: &RunConfig, index: usize, owner: String, skews: &[i64]) -> ContenderSpec {
    ContenderSpec {
        index,
        owner,
        seed: cfg.contender_seed(index),
        skew_us: skews.get(index).copied().unwrap_or(0),
        session: cfg.session_of(index),
    }
}

/// Builds the lockers (or the primitive `--primitive` names) of contenders `indices` (global
/// indices) on the opened `engine`.
pub async fn setup_contenders(
    cfg: &RunConfig,
    algorithm: &'static Algorithm,
    engine: &dyn OpenEngine,
    indices: std::ops::Range<usize>,
) -> anyhow::Result<Vec<(usize, Asking)>> {
    let skews = cfg.contender_skews();
    let mut lockers = Vec::with_capacity(indices.len());
    for index in indices {
        let spec = contender_spec(cfg, index, RunConfig::owner_id(index), &skews);
        let locker =
            engine.contender(algorithm, spec).await.map_err(|e| anyhow!(e)).with_context(|| {
                format!("cannot set up contender {index} of the {} algorithm", algorithm.name)
            })?;
        lockers.push((index, locker));
    }
    Ok(lockers)
}

/// What [`drive`] measured.
#[derive(Debug)]
pub struct Driven {
    /// The grant log, in the order the holds ended.
    pub grants: GrantSpool,
    /// Per contender, in the order given.
    pub contenders: Vec<ContenderOutcome>,
    /// The counters when the window ended.
    pub counters: Option<StoreCounters>,
    /// The sessions the contenders' clients had opened when the window ended.
    pub sessions_opened: Option<u64>,
    /// The counters read during the window ([`RunConfig::sample_every`]).
    pub samples: Vec<CounterSample>,
    /// When the last contender finished, in microseconds since the start.
    pub finished_us: u64,
    /// The fenced resource's log (empty when the contenders wrote to none).
    pub resource: ResourceLog,
    /// The faults injected.
    pub faults: Vec<FaultWindow>,
}

/// What the contenders of one run share besides their lockers.
pub struct Rig {
    /// The opened engine, for the nemesis and for contenders coming back from a crash; `None`
    /// in a worker process, which injects no faults.
    pub engine: Option<Arc<dyn OpenEngine>>,
    /// The algorithm run.
    pub algorithm: &'static Algorithm,
    /// The fenced resource, when the run has one: in this process, or (a worker) the
    /// parent's.
    pub resource: Option<Resource>,
    /// The counters, when the engine counts.
    pub counters: Option<CounterHandle>,
    /// The sessions opened, when the engine counts them.
    pub sessions: Option<SessionCount>,
}

/// Runs `lockers` from `start` (a tokio instant, now or soon) for the run's duration and the
/// drain, stamping the grant log with `stamp`, with the run's faults when `rig` has the
/// engine; reads the counters when the window ends.
pub async fn drive(
    cfg: &RunConfig,
    lockers: Vec<(usize, Asking)>,
    start: Instant,
    stamp: Stamp,
    rig: Rig,
    progress: Option<&ProgressBar>,
) -> anyhow::Result<Driven> {
    let scale = cfg.time_scale();
    let skews = cfg.contender_skews();
    let end = start + cfg.scaled(cfg.duration);
    let drain_end = end + cfg.scaled(cfg.duration);
    if lock_core::rt::now() < start {
        lock_core::rt::sleep_until(start).await;
    }
    // What the engine's setup sent (sessions opened, leases granted, keep-alives while the
    // other contenders connected) is not the window's load: counts start here, before any
    // contender runs.
    let base = rig.counters.as_ref().map(|read| read()).unwrap_or_default();
    let controls: Vec<Arc<Control>> =
        lockers.iter().map(|(i, _)| Arc::new(Control::new(*i))).collect();
    let keys = cfg.keys();
    let log = Arc::new(Mutex::new(Spool::new()));
    let mut tasks = Vec::with_capacity(lockers.len());
    for ((index, locker), control) in lockers.into_iter().zip(&controls) {
        let plan = Plan {
            index,
            home: cfg.lock_of(index),
            keys: keys.clone(),
            skew_us: skews.get(index).copied().unwrap_or(0),
            seed: cfg.contender_seed(index) ^ 0xC0DE_C0DE,
            key_seed: cfg.contender_seed(index) ^ 0x4B45_5953,
            primitive: cfg.primitive,
            share_seed: cfg.contender_seed(index) ^ 0x5348_4152,
            hold: cfg.hold,
            think: cfg.think,
            scale,
            stamp,
            end,
            drain_end,
        };
        // Only the nemesis crashes contenders: without faults none needs to come back, and
        // none then waits on the crash signal at every wake-up.
        let reviver = rig.engine.clone().filter(|_| !cfg.faults.is_empty()).map(|engine| Reviver {
            engine,
            algorithm: rig.algorithm,
            spec: contender_spec(cfg, index, String::new(), &skews),
        });
        let shared = Shared {
            control: Arc::clone(control),
            resource: rig.resource.clone(),
            reviver,
            grants: Arc::clone(&log),
        };
        tasks.push(lock_core::rt::spawn(contender(locker, plan, shared)));
    }
    let nemesis = match (&rig.engine, cfg.faults.is_empty()) {
        (Some(engine), false) => {
            let nemesis = Arc::new(Nemesis {
                engine: Some(Arc::clone(engine)),
                controls,
                workers: Vec::new(),
                stamp,
                scale,
                seed: cfg.seed,
                start,
                end,
            });
            let plan = cfg.faults.clone();
            Some(lock_core::rt::spawn(async move { nemesis.run(&plan).await }))
        }
        _ => None,
    };
    let ticker = progress_ticker(cfg, progress, start);
    let snapshot = counter_snapshots(cfg, rig.counters, base, start, end, stamp);
    let sessions = rig.sessions.map(|read| {
        lock_core::rt::spawn(async move {
            lock_core::rt::sleep_until(end).await;
            read()
        })
    });

    let mut contenders = Vec::with_capacity(tasks.len());
    for task in tasks {
        contenders.push(task.await.context("a contender task panicked")?);
    }
    let grants = std::mem::take(&mut *log.lock().expect("no contender panicked holding the log"))
        .finish()
        .context("cannot write the grant log to its temporary file")?;
    if let Some(t) = ticker {
        t.abort();
    }
    let finished_us = stamp.now_us();
    if lock_core::rt::now() < end {
        lock_core::rt::sleep_until(end).await;
    }
    let faults = match nemesis {
        Some(task) => task
            .await
            .context("the fault injector panicked")?
            .map_err(|e| anyhow!("fault injection failed: {e}"))?,
        None => Vec::new(),
    };
    let (samples, counters) = snapshot.await.context("the counter snapshot task panicked")?;
    let sessions_opened = match sessions {
        Some(task) => Some(task.await.context("the session count task panicked")?),
        None => None,
    };
    Ok(Driven {
        grants,
        contenders,
        counters,
        sessions_opened,
        samples,
        finished_us,
        resource: rig.resource.map(|r| r.take_log()).transpose()?.unwrap_or_default(),
        faults,
    })
}

/// In wall time only, a task moving `progress` along the run's clock (in simulated time an
/// extra timer task is pure overhead).
fn progress_ticker(
    cfg: &RunConfig,
    progress: Option<&ProgressBar>,
    start: Instant,
) -> Option<lock_core::rt::JoinHandle<()>> {
    match (cfg.clock, progress) {
        (ClockMode::Wall, Some(bar)) => {
            let bar = bar.clone();
            bar.set_length(cfg.duration.as_millis() as u64);
            Some(lock_core::rt::spawn(async move {
                loop {
                    bar.set_position(lock_core::rt::elapsed(start).as_millis() as u64);
                    lock_core::rt::sleep(Duration::from_millis(200)).await;
                }
            }))
        }
        _ => None,
    }
}

/// The counters as they stand when the window ends (the drain's requests are not load of the
/// measured window), and every `sample_every` before that when asked.
fn counter_snapshots(
    cfg: &RunConfig,
    counters: Option<CounterHandle>,
    base: StoreCounters,
    start: Instant,
    end: Instant,
    stamp: Stamp,
) -> lock_core::rt::JoinHandle<(Vec<CounterSample>, Option<StoreCounters>)> {
    let sample_every = cfg.sample_every.map(|d| cfg.scaled(d));
    lock_core::rt::spawn(async move {
        let mut samples = Vec::new();
        if let (Some(every), Some(read)) = (sample_every, counters.as_ref()) {
            let mut next = start + every;
            while next < end {
                lock_core::rt::sleep_until(next).await;
                let counters = since(&base, read());
                samples.push(CounterSample { at_us: stamp.at(next), counters });
                next += every;
            }
        }
        lock_core::rt::sleep_until(end).await;
        (samples, counters.map(|read| since(&base, read())))
    })
}

/// The requests counted in `now` that `base` had not: per table and per client. The
/// tombstone figures describe the reads' state, not a count of requests, and stay `now`'s.
fn since(base: &StoreCounters, mut now: StoreCounters) -> StoreCounters {
    let minus = |counts: &mut BTreeMap<String, OpCounts>, base: &BTreeMap<String, OpCounts>| {
        for (key, c) in counts.iter_mut() {
            if let Some(b) = base.get(key) {
                *c = c.since(b);
            }
        }
        counts.retain(|_, c| *c != OpCounts::default());
    };
    minus(&mut now.per_table, &base.per_table);
    minus(&mut now.per_client, &base.per_client);
    now
}

/// Runs `algorithm` under `cfg` on the current runtime, every contender in this process; the
/// record is made a [`RunOutcome`] by [`outcome`] once the runtime, and the engine with it, is
/// gone.
pub async fn run_async(
    cfg: &RunConfig,
    algorithm: &'static Algorithm,
    progress: Option<&ProgressBar>,
) -> anyhow::Result<Driven> {
    cfg.validate().map_err(|e| anyhow!(e))?;
    let namespace = crate::engines::fresh_namespace();
    let engine: Arc<dyn OpenEngine> =
        cfg.backend.open(cfg.engine_setup(&namespace)).await.map_err(|e| anyhow!(e))?.into();
    let lockers = setup_contenders(cfg, algorithm, engine.as_ref(), 0..cfg.threads).await?;
    let start = lock_core::rt::now();
    let stamp = Stamp::Tokio { start, scale: cfg.time_scale() };
    let rig = Rig {
        counters: engine.counters(),
        sessions: engine.sessions_opened(),
        engine: Some(engine),
        algorithm,
        resource: Some(Resource::Local(Arc::new(FencedResource::new()))),
    };
    drive(cfg, lockers, start, stamp, rig, progress).await
}

/// The run's record from what [`drive`] measured: the grant log sorted on disk from its
/// spool ([`GrantLog`]).
pub fn outcome(
    cfg: &RunConfig,
    algorithm: &'static Algorithm,
    driven: Driven,
) -> anyhow::Result<RunOutcome> {
    let grants = GrantLog::sort(driven.grants.iter())
        .map_err(|e| anyhow::anyhow!("cannot sort the grant log in a temporary file: {e}"))?;
    Ok(RunOutcome {
        algorithm: algorithm.name,
        grants,
        contenders: driven.contenders,
        counters: driven.counters,
        sessions_opened: driven.sessions_opened,
        samples: driven.samples,
        duration_us: cfg.duration.as_micros() as u64,
        finished_us: driven.finished_us,
        wall_time: Duration::ZERO,
        resource: driven.resource,
        faults: driven.faults,
    })
}

/// How a crashed contender comes back: a new locker from the engine under a new owner id.
struct Reviver {
    engine: Arc<dyn OpenEngine>,
    algorithm: &'static Algorithm,
    spec: ContenderSpec,
}

/// What one contender shares with the rest of the run.
struct Shared {
    control: Arc<Control>,
    resource: Option<Resource>,
    reviver: Option<Reviver>,
    /// The run's grant log, which every contender appends to as its holds end.
    grants: Arc<Mutex<Spool<Grant>>>,
}

impl Shared {
    fn log(&self, grant: Grant) {
        self.grants.lock().expect("no contender panicked holding the log").push(&grant);
    }
}

/// A held guard that is abandoned, not released, when dropped: the contender's task was
/// stopped by a crash while holding.
struct Held(Option<LockGuard>);

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(guard) = self.0.take() {
            guard.abandon();
        }
    }
}

/// How one request → hold → release → think round ended.
enum Round {
    /// Done (granted and released, or failed and paused); go on.
    Done,
    /// The lock timed out at the end of the drain: the request is unfinished.
    GaveUp(u64),
    /// The contender crashed; it comes back at this instant.
    Crashed(Instant),
}

/// A round in progress, kept outside the round's future so that a crash can see it.
#[derive(Default)]
struct InProgress {
    /// The grant being held, released and crashed still to be filled in.
    holding: Option<Grant>,
}

async fn contender(mut locker: Asking, plan: Plan, shared: Shared) -> ContenderOutcome {
    let mut rng = StdRng::seed_from_u64(plan.seed);
    let mut key_rng = StdRng::seed_from_u64(plan.key_seed);
    let mut share_rng = StdRng::seed_from_u64(plan.share_seed);
    let mut out = ContenderOutcome {
        index: plan.index as u32,
        lock: plan.keys.is_fixed().then_some(plan.home as u32),
        skew_us: plan.skew_us,
        latencies: Latencies::new(),
        unfinished_since_us: None,
        errors: ErrorCounts::default(),
    };
    let ctl = &shared.control;
    let can_crash = shared.reviver.is_some();
    while lock_core::rt::now() < plan.end {
        let mut now = InProgress::default();
        let ended = tokio::select! {
            biased;
            until = ctl.crashed(), if can_crash => Round::Crashed(until),
            ended = round(&locker, &plan, &shared, (&mut rng, &mut key_rng, &mut share_rng), &mut now, &mut out) => ended,
        };
        match ended {
            Round::Done => {}
            Round::GaveUp(since) => {
                out.unfinished_since_us = Some(since);
                break;
            }
            Round::Crashed(until) => {
                if let Some(held) = now.holding {
                    shared.log(Grant { released_us: plan.stamp.now_us(), crashed: true, ..held });
                }
                ctl.set_holding(false);
                lock_core::rt::sleep_until(until).await;
                let Some(reviver) = &shared.reviver else { break };
                let spec = ContenderSpec { owner: ctl.revive(), ..reviver.spec.clone() };
                match reviver.engine.contender(reviver.algorithm, spec).await {
                    Ok(l) => locker = l,
                    Err(e) => {
                        out.errors.lock_errors += 1;
                        out.errors.note(&LockError::Config(format!(
                            "cannot come back after a crash: {e}"
                        )));
                        break;
                    }
                }
            }
        }
    }
    out
}

/// One request → hold → release → think round, on the lock `keys` picks: `rngs` are the hold
/// and think draws', the lock draws', then the share draws'.
async fn round(
    locker: &Asking,
    plan: &Plan,
    shared: &Shared,
    (rng, key_rng, share_rng): (&mut StdRng, &mut StdRng, &mut StdRng),
    now: &mut InProgress,
    out: &mut ContenderOutcome,
) -> Round {
    let ctl = &shared.control;
    let lock = plan.keys.next(plan.home, key_rng);
    let share = plan.primitive.draw(share_rng);
    let requested = lock_core::rt::now();
    let requested_us = plan.stamp.at(requested);
    let timeout = Some(plan.drain_end - requested);
    let guard = match locker.ask(plan.keys.id(lock), share, timeout).await {
        Ok(guard) => Held(Some(guard)),
        Err(LockError::Timeout { .. }) => return Round::GaveUp(requested_us),
        Err(e) => {
            out.errors.lock_errors += 1;
            out.errors.note(&e);
            // Never spin at one instant on a persistent failure.
            ctl.sleep(plan.think.sample(rng).max(Duration::from_millis(1)) * plan.scale).await;
            return Round::Done;
        }
    };
    // A frozen process sees the grant only when it is thawed.
    ctl.thawed().await;
    let granted = lock_core::rt::now();
    let granted_us = plan.stamp.at(granted);
    let latency_us = match plan.stamp {
        Stamp::Tokio { .. } => us_between(plan.scale, requested, granted),
        Stamp::System { .. } => granted_us.saturating_sub(requested_us),
    };
    out.latencies.record(latency_us);
    let token = guard.0.as_ref().map_or(0, LockGuard::token);
    let queued_us = guard.0.as_ref().and_then(LockGuard::queued_at).map(|t| plan.stamp.past(t));
    let held = Grant {
        lock: lock as u32,
        contender: plan.index as u32,
        requested_us,
        granted_us,
        token,
        queued_us,
        share,
        ..Grant::default()
    };
    now.holding = Some(held);
    ctl.set_holding(true);
    let write = |resource: &Resource| {
        let at_us = plan.stamp.now_us();
        let resource = resource.clone();
        async move { resource.write(lock as u32, plan.index as u32, token, at_us).await }
    };
    // Only a holder alone writes: readers and permit holders share the lock, and a fenced
    // resource admits one writer's token at a time.
    let resource = shared.resource.as_ref().filter(|_| share.is_exclusive());
    if let Some(r) = resource {
        write(r).await;
    }
    ctl.sleep(plan.hold.sample(rng) * plan.scale).await;
    // The holder carries on where it was: no look at its lease before the last write.
    ctl.thawed().await;
    if let Some(r) = resource {
        write(r).await;
    }
    let mut guard = guard;
    let Some(guard) = guard.0.take() else { return Round::Done };
    let lease_lost = guard.is_lost();
    if lease_lost {
        out.errors.leases_lost_while_holding += 1;
    }
    let released_us = plan.stamp.now_us();
    now.holding = None;
    ctl.set_holding(false);
    shared.log(Grant { released_us, lease_lost, ..held });
    if let Err(e) = guard.release().await {
        out.errors.release_errors += 1;
        out.errors.note(&e);
    }
    ctl.sleep(plan.think.sample(rng) * plan.scale).await;
    Round::Done
}
