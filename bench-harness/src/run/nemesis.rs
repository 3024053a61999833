//! The nemesis: faults injected into a running benchmark (`--faults`), so that the safety
//! figures measure something.
//!
//! Each entry of `--faults KIND:DURATION@PERIOD` ([`crate::faults`]) runs as one task beside the
//! contenders: it sleeps to a start drawn from the run's seed in `[0, PERIOD)`, injects, heals
//! DURATION later, and repeats every PERIOD until the run's window ends. What it hit and when
//! is logged as a [`FaultWindow`] (`faults.csv`). In simulated time everything is on the
//! simulation's clock and every choice comes from the seed, so a run with faults is
//! reproducible byte for byte.
//!
//! How each kind is made, and who takes part:
//!
//! | kind | the engine ([`Injection`]) | the contender ([`Control`]) |
//! |---|---|---|
//! | `pause` (a holder: the first to hold from the start on, or anyone after DURATION) | its connection frozen: nothing sent, no answer seen | its own timers frozen: the hold lasts DURATION longer; then it carries on without re-checking its lease |
//! | `crash` (any contender) | cut off for good; what it had sent still lands | its task stops where it is: a held guard is abandoned (cells, keys, znodes stay), a pending request dropped; DURATION later it comes back under a new owner id |
//! | `clock-jump` (any contender) | its clock steps by ±DURATION, then back | — |
//! | `partition` (a holder, as for `pause`) | its requests fail for DURATION | it carries on; its lease keeper's renewals fail |
//! | `replica-stop` | a replica stops, then starts with what it missed still missing | — |
//! | `replica-lag` | a replica applies mutations late and drops a fraction | — |
//! | `server-restart` | the server stops, then starts | — |
//! | `process-pause` (`--processes`: a worker process, any) | — | the whole process is stopped (`SIGSTOP`) and continued (`SIGCONT`): its contenders, lease keepers and connections |
//! | `ring-loss` | queue-push's doorbell rings are lost (a fraction) or late | — |
//! | `stranger` (when someone holds) | a client of its own with no credentials deletes the holders' keys or znodes | — |
//! | `terminate` (when someone holds) | its administrator ends the holders' sessions (`pg_terminate_backend`, `KILL CONNECTION`) | — |
//!
//! The contender's side of `pause` matters: a real GC pause freezes the critical section too,
//! so the holder's second write to the fenced resource comes after the pause, when another
//! holder may have been granted: the stale write fencing exists to reject.

use super::stamp::Stamp;
use crate::engines::{Injection, OpenEngine};
use crate::faults::{FaultKind, FaultPlan, FaultSpec};
use crate::measure::log::FaultWindow;
use lock_core::rt::Signal;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What the nemesis can do to one contender, and what the contender tells it.
#[derive(Debug)]
pub struct Control {
    index: usize,
    frozen: Signal<bool>,
    /// The end of the current crash (a tokio instant), when the contender must die.
    crash: Signal<Option<Instant>>,
    holding: AtomicBool,
    /// How many grants it was given (a fault that waits for the next grant watches it).
    grants: AtomicU32,
    life: AtomicU32,
}

impl Control {
    /// The control of contender `index`.
    pub fn new(index: usize) -> Self {
        Control {
            index,
            frozen: Signal::new(false),
            crash: Signal::new(None),
            holding: AtomicBool::new(false),
            grants: AtomicU32::new(0),
            life: AtomicU32::new(0),
        }
    }

    /// Its current owner id (it changes when it comes back from a crash).
    pub fn owner(&self) -> String {
        crate::config::RunConfig::owner_id_of_life(self.index, self.life.load(Ordering::Acquire))
    }

    /// The contender holds its lock now.
    pub fn set_holding(&self, holding: bool) {
        if holding {
            self.grants.fetch_add(1, Ordering::AcqRel);
        }
        self.holding.store(holding, Ordering::Release);
    }

    /// Whether it holds its lock now.
    pub fn is_holding(&self) -> bool {
        self.holding.load(Ordering::Acquire)
    }

    /// Resolves once the contender is not frozen.
    pub async fn thawed(&self) {
        self.frozen.wait_for(|f| (!f).then_some(())).await;
    }

    /// Sleeps `d` of the contender's own time: time spent frozen does not count, as a
    /// process that is stopped does not see its timers run.
    pub async fn sleep(&self, d: Duration) {
        // tokio rounds every deadline up to its next millisecond tick, so even a sleep of
        // zero waits for the timer: on a wall clock about a millisecond, which a hold or think
        // time of 0 (the pure handoff rate) would count as time spent holding.
        if d.is_zero() {
            return self.thawed().await;
        }
        let mut left = d;
        loop {
            self.thawed().await;
            let began = lock_core::rt::now();
            tokio::select! {
                biased;
                _ = lock_core::rt::sleep(left) => return,
                _ = self.frozen.wait_for(|f| f.then_some(())) => {
                    left = left.saturating_sub(lock_core::rt::elapsed(began));
                }
            }
        }
    }

    /// Resolves with the end of the crash when the contender is told to die.
    pub async fn crashed(&self) -> Instant {
        self.crash.wait_for(|until| *until).await
    }

    /// After a crash: the contender comes back under its next owner id.
    pub fn revive(&self) -> String {
        self.crash.replace(None);
        self.life.fetch_add(1, Ordering::AcqRel);
        self.owner()
    }

    fn freeze(&self, on: bool) {
        self.frozen.replace(on);
    }
}

/// Everything the nemesis acts on.
pub struct Nemesis {
    /// The opened engine (none in the parent of worker processes).
    pub engine: Option<Arc<dyn OpenEngine>>,
    /// Every contender's control, by index (none in the parent of worker processes).
    pub controls: Vec<Arc<Control>>,
    /// The worker processes' ids (`--processes`), for `process-pause`.
    pub workers: Vec<u32>,
    /// The grant log's clock.
    pub stamp: Stamp,
    /// [`crate::config::RunConfig::time_scale`].
    pub scale: u32,
    /// The run's seed.
    pub seed: u64,
    /// The window's start and end (tokio instants).
    pub start: Instant,
    /// When faults stop starting.
    pub end: Instant,
}

impl Nemesis {
    /// Runs every entry of `plan` until the window ends (a fault still open then is healed at
    /// once); returns the fault log in start order.
    pub async fn run(self: Arc<Self>, plan: &FaultPlan) -> Result<Vec<FaultWindow>, String> {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, spec) in plan.0.iter().enumerate() {
            let me = Arc::clone(&self);
            let spec = spec.clone();
            let log = Arc::clone(&log);
            let seed = crate::config::mix(self.seed ^ crate::config::mix(0xFA17 + i as u64));
            tasks.push(lock_core::rt::spawn(async move { me.entry(spec, seed, log).await }));
        }
        for t in tasks {
            t.await.map_err(|e| format!("a fault task panicked: {e}"))??;
        }
        let mut windows = std::mem::take(&mut *log.lock().unwrap_or_else(|e| e.into_inner()));
        windows.sort_by(|a: &FaultWindow, b| {
            (a.start_us, &a.kind, &a.target).cmp(&(b.start_us, &b.kind, &b.target))
        });
        Ok(windows)
    }

    async fn entry(
        &self,
        spec: FaultSpec,
        seed: u64,
        log: Arc<Mutex<Vec<FaultWindow>>>,
    ) -> Result<(), String> {
        let mut rng = StdRng::seed_from_u64(seed);
        let period = spec.period * self.scale;
        let offset = Duration::from_nanos(rng.random_range(0..period.as_nanos() as u64));
        let mut at = self.start + offset;
        while at < self.end {
            lock_core::rt::sleep_until(at).await;
            if prefers_holder(&spec) {
                self.until_someone_holds(at + spec.duration * self.scale).await;
            }
            let struck = lock_core::rt::now();
            // Stamped when they happen (a system-clock stamp reads the clock, not the instant).
            let start_us = self.stamp.at(struck);
            let until = struck + spec.duration * self.scale;
            let target = self.strike(&spec, &mut rng, until).await?;
            let healed = until.min(self.end.max(lock_core::rt::now()));
            lock_core::rt::sleep_until(healed).await;
            let end_us = self.stamp.at(healed);
            self.heal(&spec, &target).await?;
            let window = FaultWindow {
                kind: spec.kind.name().to_string(),
                target: target.name(),
                start_us,
                end_us,
            };
            log.lock().unwrap_or_else(|e| e.into_inner()).push(window);
            at += period;
        }
        Ok(())
    }

    /// Waits until some contender holds its lock (checking every millisecond of the model),
    /// or until `deadline`: a pause or partition means to hit a holder, and between two holds
    /// nobody holds for a while.
    async fn until_someone_holds(&self, deadline: Instant) {
        let step = Duration::from_millis(1) * self.scale;
        while !self.controls.iter().any(|c| c.is_holding()) && lock_core::rt::now() < deadline {
            lock_core::rt::sleep(step).await;
        }
    }

    /// Waits until some contender is granted the lock after this call (checking every
    /// millisecond of the model), or until `deadline`.
    async fn until_next_grant(&self, deadline: Instant) {
        let step = Duration::from_millis(1) * self.scale;
        let total = || -> u64 {
            self.controls.iter().map(|c| u64::from(c.grants.load(Ordering::Acquire))).sum()
        };
        let before = total();
        while total() == before && lock_core::rt::now() < deadline {
            lock_core::rt::sleep(step).await;
        }
    }

    /// A contender to hit: a holder when `prefer_holder` and one holds, else any; seeded.
    fn pick_contender(&self, rng: &mut StdRng, prefer_holder: bool) -> Arc<Control> {
        let holders: Vec<&Arc<Control>> = self.controls.iter().filter(|c| c.is_holding()).collect();
        let pool: Vec<&Arc<Control>> = if prefer_holder && !holders.is_empty() {
            holders
        } else {
            self.controls.iter().collect()
        };
        Arc::clone(pool[rng.random_range(0..pool.len())])
    }

    fn engine(&self) -> Result<&dyn OpenEngine, String> {
        self.engine
            .as_deref()
            .ok_or_else(|| "this fault needs the engine, and the nemesis has none here".to_string())
    }

    async fn strike(
        &self,
        spec: &FaultSpec,
        rng: &mut StdRng,
        until: Instant,
    ) -> Result<Target, String> {
        if spec.kind == FaultKind::ProcessPause {
            if self.workers.is_empty() {
                return Err("process-pause needs worker processes (--processes)".into());
            }
            let w = rng.random_range(0..self.workers.len());
            signal(self.workers[w], libc::SIGSTOP)?;
            return Ok(Target::Process(w, self.workers[w]));
        }
        if self.controls.is_empty() && spec.kind.hits_a_contender() {
            return Err(format!("{} needs the contenders in this process", spec.kind));
        }
        let engine = self.engine()?;
        match spec.kind {
            FaultKind::Pause => {
                let c = self.pick_contender(rng, prefers_holder(spec));
                let owner = c.owner();
                c.freeze(true);
                engine.inject(Injection::Freeze { owner: &owner, on: true }).await?;
                Ok(Target::Contender(c, owner, 0))
            }
            FaultKind::SilentPartition => {
                let c = self.pick_contender(rng, prefers_holder(spec));
                let owner = c.owner();
                engine.inject(Injection::Freeze { owner: &owner, on: true }).await?;
                Ok(Target::Contender(c, owner, 0))
            }
            FaultKind::Partition => {
                let c = self.pick_contender(rng, prefers_holder(spec));
                let owner = c.owner();
                engine.inject(Injection::Partition { owner: &owner, on: true }).await?;
                Ok(Target::Contender(c, owner, 0))
            }
            FaultKind::Crash => {
                let c = self.pick_contender(rng, prefers_holder(spec));
                let owner = c.owner();
                engine.inject(Injection::Kill { owner: &owner }).await?;
                c.crash.replace(Some(until));
                Ok(Target::Contender(c, owner, 0))
            }
            FaultKind::ClockJump => {
                let c = self.pick_contender(rng, false);
                let owner = c.owner();
                let size = spec.duration.as_micros() as i64;
                let by_us = if rng.random_bool(0.5) { size } else { -size };
                engine.inject(Injection::ClockJump { owner: &owner, by_us }).await?;
                Ok(Target::Contender(c, owner, by_us))
            }
            FaultKind::ReplicaStop | FaultKind::ReplicaLag => {
                let replicas = engine.replicas();
                if replicas == 0 {
                    return Err(format!("{} needs replicas, and this engine has none", spec.kind));
                }
                let replica = rng.random_range(0..replicas);
                let injection = match spec.kind {
                    FaultKind::ReplicaStop => Injection::ReplicaStop { replica, on: true },
                    _ => Injection::ReplicaLag { replica, lag: spec.lag, drop: spec.drop },
                };
                engine.inject(injection).await?;
                Ok(Target::Replica(replica))
            }
            FaultKind::ServerRestart => {
                engine.inject(Injection::ServerRestart { on: true }).await?;
                Ok(Target::Server)
            }
            kind @ (FaultKind::LeaderKill
            | FaultKind::LeaderPause
            | FaultKind::LeaderCut
            | FaultKind::LaggedLeaderKill
            | FaultKind::MasterKill
            | FaultKind::MasterWipe
            | FaultKind::MasterPause
            | FaultKind::MasterCut
            | FaultKind::FollowerPause
            | FaultKind::ClusterRestart) => {
                engine.inject(Injection::Member { kind, on: true }).await?;
                if kind == FaultKind::LaggedLeaderKill {
                    // Its replication now held back, the leader is killed right after the next
                    // grant: a grant it acknowledged and no replica has, whose holder works on.
                    self.until_next_grant(lock_core::rt::now() + spec.lag * self.scale).await;
                    engine.inject(Injection::KillHitMember).await?;
                }
                Ok(Target::Member(match kind {
                    FaultKind::FollowerPause => "follower",
                    FaultKind::ClusterRestart => "cluster",
                    k if FaultKind::LEADER.contains(&k) => "leader",
                    _ => "master",
                }))
            }
            FaultKind::RingLoss => {
                engine.inject(Injection::Rings { drop: spec.drop, delay: spec.lag }).await?;
                Ok(Target::Doorbells)
            }
            FaultKind::Stranger => Ok(Target::Holders(engine.stranger().await?)),
            FaultKind::Terminate => Ok(Target::Holders(engine.terminate().await?)),
            FaultKind::ProcessPause => unreachable!("handled above"),
        }
    }

    async fn heal(&self, spec: &FaultSpec, target: &Target) -> Result<(), String> {
        if let Target::Process(_, pid) = target {
            return signal(*pid, libc::SIGCONT);
        }
        let engine = self.engine()?;
        match (spec.kind, target) {
            (FaultKind::Pause, Target::Contender(c, owner, _)) => {
                engine.inject(Injection::Freeze { owner, on: false }).await?;
                c.freeze(false);
                Ok(())
            }
            (FaultKind::Partition, Target::Contender(_, owner, _)) => {
                engine.inject(Injection::Partition { owner, on: false }).await
            }
            (FaultKind::SilentPartition, Target::Contender(_, owner, _)) => {
                engine.inject(Injection::Freeze { owner, on: false }).await
            }
            (FaultKind::ClockJump, Target::Contender(_, owner, by_us)) => {
                engine.inject(Injection::ClockJump { owner, by_us: -by_us }).await
            }
            // The contender comes back by itself when the crash ends ([`Control::crashed`]).
            (FaultKind::Crash, _) => Ok(()),
            (FaultKind::ReplicaStop, Target::Replica(replica)) => {
                engine.inject(Injection::ReplicaStop { replica: *replica, on: false }).await
            }
            (FaultKind::ReplicaLag, Target::Replica(replica)) => {
                engine
                    .inject(Injection::ReplicaLag {
                        replica: *replica,
                        lag: Duration::ZERO,
                        drop: 0.0,
                    })
                    .await
            }
            (FaultKind::ServerRestart, _) => {
                engine.inject(Injection::ServerRestart { on: false }).await
            }
            (kind, Target::Member(_)) => engine.inject(Injection::Member { kind, on: false }).await,
            (FaultKind::RingLoss, _) => {
                engine.inject(Injection::Rings { drop: 0.0, delay: Duration::ZERO }).await
            }
            // What the stranger or the administrator did is done: nothing to undo.
            (FaultKind::Stranger | FaultKind::Terminate, _) => Ok(()),
            (kind, _) => Err(format!("cannot heal {kind}: it hit nothing")),
        }
    }
}

/// The faults that hit a holder when there is one (and wait for one, up to their duration):
/// their kinds, and a crash told `who=holder`.
fn prefers_holder(spec: &FaultSpec) -> bool {
    matches!(
        spec.kind,
        FaultKind::Pause
            | FaultKind::Partition
            | FaultKind::SilentPartition
            | FaultKind::Stranger
            | FaultKind::Terminate
    ) || (spec.kind == FaultKind::Crash && spec.holder)
}

/// What one fault hit.
enum Target {
    /// A contender, by its owner id then, with the clock jump made (µs) if any.
    Contender(Arc<Control>, String, i64),
    Replica(usize),
    Server,
    /// A cluster's member: "leader", or "master" (one of independent masters); the engine
    /// remembers which member it was.
    Member(&'static str),
    Doorbells,
    /// The holders (their keys, znodes or sessions), and what the stranger or the administrator
    /// did to them.
    Holders(String),
    /// A worker process: its number and process id.
    Process(usize, u32),
}

/// Sends `sig` to process `pid`.
fn signal(pid: u32, sig: libc::c_int) -> Result<(), String> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| format!("process id {pid} out of range"))?;
    // SAFETY: kill(2) with a valid signal number touches no memory of ours.
    if unsafe { libc::kill(pid, sig) } == 0 {
        Ok(())
    } else {
        Err(format!("cannot signal worker process {pid}: {}", std::io::Error::last_os_error()))
    }
}

impl Target {
    fn name(&self) -> String {
        match self {
            Target::Contender(_, owner, _) => owner.clone(),
            Target::Replica(r) => format!("replica-{r}"),
            Target::Server => "server".into(),
            Target::Member(role) => (*role).into(),
            Target::Doorbells => "doorbells".into(),
            Target::Holders(outcome) => format!("holder ({outcome})"),
            Target::Process(w, _) => format!("worker-{w}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_frozen_contender_sleeps_longer_by_the_pause() {
        let c = Arc::new(Control::new(3));
        let start = lock_core::rt::now();
        let sleeper = lock_core::rt::spawn({
            let c = Arc::clone(&c);
            async move { c.sleep(Duration::from_secs(10)).await }
        });
        lock_core::rt::sleep(Duration::from_secs(2)).await;
        c.freeze(true);
        lock_core::rt::sleep(Duration::from_secs(5)).await;
        c.freeze(false);
        sleeper.await.unwrap();
        assert_eq!(lock_core::rt::elapsed(start).as_secs(), 15);
    }

    #[test]
    fn a_revived_contender_has_a_new_owner_id() {
        let c = Control::new(7);
        assert_eq!(c.owner(), "c0007");
        assert_eq!(c.revive(), "c0007.1");
        assert_eq!(c.revive(), "c0007.2");
    }
}
