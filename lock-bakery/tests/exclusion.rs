//! Hunting for a counterexample to the bakery lock's mutual exclusion: many seeds in simulated
//! time, with per-client clock skew, latency jitter wide enough that a read often lands while a
//! write has reached only some of the replicas, mandatory locks with short timeouts (attempts
//! abandoned half-way), soft locks, rolling replica restarts (a restarted replica has missed
//! every write of its downtime), a run in wall time with real parallelism, and — outside the
//! seed's assumption — consistency ONE.
//!
//! Every hold is recorded from grant to release; no two may overlap, fencing tokens must rise
//! in grant order, and after the run neither row may hold a cell (timeouts and refusals clean
//! up after themselves).
//!
//! `cargo test -p lock-bakery --test exclusion explore -- --ignored --nocapture` with
//! `EXPLORE=quorum|crowd|restarts|one|one-jitter|one-restarts SEEDS=n` runs a larger sweep; `explore_seed` with
//! `SEED=n ONE=1 WHO=p00,p08` prints the store requests of a run (how the counterexample at
//! ONE was read).

use lock_bakery::{read_rows, BakeryConfig, BakeryLocker};
use lock_core::conformance::Hold;
use lock_core::context::ClientContext;
use lock_core::embedded::{EmbeddedClient, EmbeddedConfig, EmbeddedStore, LatencyModel};
use lock_core::{Cell, CellStore, CellWrite, Consistency, LockError, Locker, Micros, Slice, StoreError};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

const LOCK: &str = "contended";

#[derive(Clone, Copy, Debug)]
struct Scenario {
    replicas: usize,
    latency: LatencyModel,
    consistency: Consistency,
    contenders: usize,
    rounds: usize,
    /// Each client's clock is skewed by a uniform sample of `±skew`.
    skew: Duration,
    /// Every contender `i` with `i % 4 == 1` uses `try_lock` (and retries after a refusal).
    soft: bool,
    /// Every contender `i` with `i % 4 == 2` uses `lock` with a random 1–60 ms timeout.
    timeouts: bool,
    /// Stop the replicas in turn, one at a time (no hinted handoff: each comes back stale).
    rolling_restarts: bool,
    /// A multi-thread runtime in wall time instead of simulated time.
    wall: bool,
}

impl Scenario {
    fn quorum() -> Self {
        Scenario {
            replicas: 3,
            // Each replica applies a write half-way through its round trip, the write completes
            // at the quorum-th reply: with jitter this wide, reads often find a write on some
            // replicas only.
            latency: LatencyModel::new(Duration::from_micros(50), Duration::from_millis(3)),
            consistency: Consistency::Quorum,
            contenders: 12,
            rounds: 4,
            skew: Duration::from_secs(5),
            soft: true,
            timeouts: true,
            rolling_restarts: false,
            wall: false,
        }
    }
}

type Trace = Arc<Mutex<Vec<(Duration, Duration, String, String)>>>;

/// A store handle that can record every request of its client: (start, end, client, what).
#[derive(Clone)]
struct Traced {
    inner: EmbeddedClient,
    name: String,
    origin: Instant,
    log: Option<Trace>,
}

impl Traced {
    fn record(&self, t0: Duration, what: String) {
        if let Some(log) = &self.log {
            log.lock().unwrap().push((t0, self.origin.elapsed(), self.name.clone(), what));
        }
    }
}

fn show(v: &[u8]) -> String {
    let s = String::from_utf8_lossy(v);
    let t = s.trim_start_matches('0');
    if t.is_empty() || t.len() == s.len() { s.into_owned() } else { t.to_string() }
}

#[async_trait::async_trait]
impl CellStore for Traced {
    async fn write(&self, table: &str, row: &str, cells: &[CellWrite], c: Consistency) -> Result<(), StoreError> {
        let t0 = self.origin.elapsed();
        let r = self.inner.write(table, row, cells, c).await;
        if self.log.is_some() {
            let what: Vec<String> = cells.iter().map(|w| format!("{table}[{}]={}", w.column, show(&w.value))).collect();
            self.record(t0, format!("write {} -> {:?}", what.join(","), r));
        }
        r
    }
    async fn delete(&self, table: &str, row: &str, column: &str, ts: Micros, c: Consistency) -> Result<(), StoreError> {
        let t0 = self.origin.elapsed();
        let r = self.inner.delete(table, row, column, ts, c).await;
        self.record(t0, format!("delete {table}[{column}] -> {r:?}"));
        r
    }
    async fn read(&self, table: &str, row: &str, slice: Slice, c: Consistency) -> Result<Vec<Cell>, StoreError> {
        let t0 = self.origin.elapsed();
        let r = self.inner.read(table, row, slice, c).await;
        if self.log.is_some() {
            let what = match &r {
                Ok(cells) => cells.iter().map(|c| format!("{}={}", c.column, show(&c.value))).collect::<Vec<_>>().join(" "),
                Err(e) => format!("ERR {e}"),
            };
            self.record(t0, format!("read {table} -> [{what}]"));
        }
        r
    }
}

#[derive(Debug, Default)]
struct Report {
    holds: Vec<Hold>,
    /// Pairs of holds of which the second was granted before the first was released.
    overlaps: Vec<(Hold, Hold)>,
    /// Consecutive grants whose fencing token did not increase.
    token_regressions: usize,
    /// Holds wanted by mandatory contenders but not got (must be zero).
    missing_mandatory: usize,
    timeouts: usize,
    soft_refusals: usize,
    errors: Vec<String>,
    /// Cells left in either row after every contender finished.
    leftovers: usize,
}

fn overlaps(holds: &[Hold]) -> Vec<(Hold, Hold)> {
    let mut hs: Vec<&Hold> = holds.iter().collect();
    hs.sort_by_key(|h| (h.granted, h.released));
    let mut out = Vec::new();
    for (i, a) in hs.iter().enumerate() {
        for b in &hs[i + 1..] {
            if b.granted >= a.released {
                break;
            }
            out.push(((*a).clone(), (*b).clone()));
        }
    }
    out
}

fn run(seed: u64, sc: Scenario) -> Report {
    run_traced(seed, sc, None)
}

fn run_traced(seed: u64, sc: Scenario, trace: Option<Trace>) -> Report {
    let rt = if sc.wall {
        tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build()
    }
    .unwrap();
    rt.block_on(async move {
        let store = EmbeddedStore::new(EmbeddedConfig { replicas: sc.replicas, latency: sc.latency, seed, ..Default::default() });
        let origin = Instant::now();
        let mut rng = StdRng::seed_from_u64(seed);
        let log = Arc::new(Mutex::new(Vec::<Hold>::new()));
        let stats = Arc::new(Mutex::new(Report::default()));
        let mut tasks = Vec::new();
        for i in 0..sc.contenders {
            let name = format!("p{i:02}");
            let s = sc.skew.as_micros() as i64;
            let skew = if s == 0 { 0 } else { rng.random_range(-s..=s) };
            let client = store.client(&name).with_skew(skew);
            let ctx = ClientContext::new(&name, client.clock(), seed ^ i as u64).with_consistency(sc.consistency);
            let client = Traced { inner: client, name: name.clone(), origin, log: trace.clone() };
            let locker = BakeryLocker::new(client, ctx, BakeryConfig::default()).unwrap();
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(31) ^ (i as u64 + 1));
            let (log, stats) = (log.clone(), stats.clone());
            let soft = sc.soft && i % 4 == 1;
            let timed = sc.timeouts && i % 4 == 2;
            tasks.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(rng.random_range(0..3_000))).await;
                let mut done = 0;
                let mut attempts = 0;
                // A soft contender only wins when nobody holds or waits: it may starve; a
                // mandatory one must not.
                while done < sc.rounds && (!soft || attempts < 300) {
                    attempts += 1;
                    let got = if soft {
                        locker.try_lock(LOCK).await
                    } else {
                        let timeout = timed.then(|| Duration::from_millis(rng.random_range(1..60)));
                        locker.lock(LOCK, timeout).await.map(Some)
                    };
                    let guard = match got {
                        Ok(Some(g)) => g,
                        Ok(None) => {
                            stats.lock().unwrap().soft_refusals += 1;
                            tokio::time::sleep(Duration::from_micros(rng.random_range(0..20_000))).await;
                            continue;
                        }
                        Err(LockError::Timeout { .. }) => {
                            stats.lock().unwrap().timeouts += 1;
                            continue;
                        }
                        Err(e) => {
                            stats.lock().unwrap().errors.push(e.to_string());
                            tokio::time::sleep(Duration::from_millis(5)).await;
                            continue;
                        }
                    };
                    let granted = Instant::now();
                    tokio::time::sleep(Duration::from_micros(rng.random_range(0..4_000))).await;
                    log.lock().unwrap().push(Hold {
                        lock_id: guard.lock_id().into(),
                        owner: guard.owner().into(),
                        granted,
                        released: Instant::now(),
                        token: guard.token(),
                    });
                    if let Err(e) = guard.release().await {
                        stats.lock().unwrap().errors.push(format!("release: {e}"));
                    }
                    done += 1;
                    tokio::time::sleep(Duration::from_micros(rng.random_range(0..2_000))).await;
                }
                if !soft {
                    stats.lock().unwrap().missing_mandatory += sc.rounds - done;
                }
            }));
        }
        let roller = sc.rolling_restarts.then(|| {
            let store = store.clone();
            tokio::spawn(async move {
                for k in 0.. {
                    let r = k % store.replica_count();
                    store.stop_replica(r);
                    tokio::time::sleep(Duration::from_millis(37)).await;
                    store.start_replica(r);
                    tokio::time::sleep(Duration::from_millis(11)).await;
                }
            })
        });
        for t in tasks {
            t.await.unwrap();
        }
        if let Some(r) = roller {
            r.abort();
            let _ = r.await;
            for i in 0..store.replica_count() {
                store.start_replica(i);
            }
        }
        let holds = log.lock().unwrap().clone();
        let mut report = std::mem::take(&mut *stats.lock().unwrap());
        report.overlaps = overlaps(&holds);
        let mut sorted: Vec<&Hold> = holds.iter().collect();
        sorted.sort_by_key(|h| h.granted);
        report.token_regressions = sorted.windows(2).filter(|w| w[1].token <= w[0].token).count();
        report.holds = holds;
        let rows = read_rows(&store, LOCK, Consistency::All).await.unwrap();
        report.leftovers = rows.choosing.len() + rows.numbers.len();
        report
    })
}

#[derive(Debug, Default)]
struct Sweep {
    seeds: u64,
    holds: usize,
    overlaps: Vec<(u64, Hold, Hold)>,
    token_regressions: usize,
    missing_mandatory: usize,
    timeouts: usize,
    soft_refusals: usize,
    errors: Vec<String>,
    leftovers: usize,
}

fn sweep(seeds: std::ops::Range<u64>, sc: Scenario) -> Sweep {
    let mut s = Sweep { seeds: seeds.end - seeds.start, ..Default::default() };
    for seed in seeds {
        let r = run(seed, sc);
        s.holds += r.holds.len();
        s.token_regressions += r.token_regressions;
        s.missing_mandatory += r.missing_mandatory;
        s.timeouts += r.timeouts;
        s.soft_refusals += r.soft_refusals;
        s.errors.extend(r.errors);
        s.leftovers += r.leftovers;
        s.overlaps.extend(r.overlaps.into_iter().map(|(a, b)| (seed, a, b)));
    }
    s
}

fn print(name: &str, s: &Sweep) {
    eprintln!(
        "{name}: {} holds over {} seeds, {} overlapping pairs, {} token regressions, {} mandatory rounds missing, {} timeouts, {} soft refusals, {} store errors, {} leftover cells",
        s.holds,
        s.seeds,
        s.overlaps.len(),
        s.token_regressions,
        s.missing_mandatory,
        s.timeouts,
        s.soft_refusals,
        s.errors.len(),
        s.leftovers
    );
}

/// Asserts exclusion, rising tokens, every mandatory round granted, and clean rows. Store
/// errors are allowed only where replicas stop (`errors_expected`).
fn assert_exclusive(name: &str, seeds: std::ops::Range<u64>, sc: Scenario, errors_expected: bool) -> Sweep {
    let s = sweep(seeds, sc);
    print(name, &s);
    assert!(s.overlaps.is_empty(), "{name}: mutual exclusion violated: {:?}", s.overlaps.first());
    assert_eq!(s.token_regressions, 0, "{name}: fencing tokens did not rise");
    assert_eq!(s.missing_mandatory, 0, "{name}: a mandatory contender did not get all its rounds");
    assert!(errors_expected || s.errors.is_empty(), "{name}: errors: {:?}", &s.errors[..s.errors.len().min(5)]);
    assert_eq!(s.leftovers, 0, "{name}: cells left behind");
    s
}

#[test]
fn quorum_excludes_with_jitter_skew_timeouts_and_soft_locks() {
    let s = assert_exclusive("quorum, 3 replicas, ±5 s skew", 0..200, Scenario::quorum(), false);
    assert!(s.timeouts > 0 && s.soft_refusals > 0, "the sweep must exercise abandoned attempts");
    // Skew far beyond any lease: the bakery never compares clocks of different clients.
    let sc = Scenario { skew: Duration::from_secs(3600), ..Scenario::quorum() };
    assert_exclusive("quorum, 3 replicas, ±1 h skew", 1000..1020, sc, false);
}

#[test]
fn quorum_excludes_on_five_replicas_and_with_rolling_restarts() {
    let sc = Scenario { replicas: 5, ..Scenario::quorum() };
    assert_exclusive("quorum, 5 replicas", 2000..2020, sc, false);
    // A replica stopped mid-request makes that request time out: store errors are expected,
    // overlaps are not.
    let sc = Scenario { rolling_restarts: true, ..Scenario::quorum() };
    assert_exclusive("quorum, 3 replicas, rolling restarts", 3000..3030, sc, true);
    let sc = Scenario { replicas: 5, rolling_restarts: true, ..Scenario::quorum() };
    assert_exclusive("quorum, 5 replicas, rolling restarts", 4000..4020, sc, true);
}

#[test]
fn quorum_excludes_in_wall_time_with_real_parallelism() {
    let sc = Scenario {
        wall: true,
        contenders: 8,
        rounds: 3,
        latency: LatencyModel::new(Duration::from_micros(100), Duration::from_micros(400)),
        ..Scenario::quorum()
    };
    assert_exclusive("wall time, multi-thread, quorum", 5000..5002, sc, false);
}

/// Consistency ONE is outside the seed's assumption (it asks for QUORUM); with a replica that
/// missed writes, a waiter reads rows that lack the holder's cells and enters beside it. Seed
/// 28 of this sweep is the case traced in the crate docs, and must still reproduce.
#[test]
fn consistency_one_with_stale_replicas_admits_two_holders() {
    let sc = Scenario { consistency: Consistency::One, rolling_restarts: true, ..Scenario::quorum() };
    let s = sweep(20..30, sc);
    print("ONE, rolling restarts", &s);
    for (seed, a, b) in s.overlaps.iter().take(3) {
        eprintln!("  seed {seed}: {} held for {:?}, {} granted {:?} after its grant", a.owner, a.released - a.granted, b.owner, b.granted - a.granted);
    }
    assert!(s.overlaps.iter().any(|(seed, ..)| *seed == 28), "the traced counterexample (seed 28) no longer reproduces");
}

/// A larger sweep for the figures; see the module docs.
#[test]
#[ignore]
fn explore() {
    let var = std::env::var("EXPLORE").unwrap_or_else(|_| "quorum".into());
    let seeds: u64 = std::env::var("SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let sc = match var.as_str() {
        "one" => Scenario { consistency: Consistency::One, ..Scenario::quorum() },
        "one-jitter" => Scenario { consistency: Consistency::One, latency: LatencyModel::new(Duration::ZERO, Duration::from_millis(10)), ..Scenario::quorum() },
        "one-restarts" => Scenario { consistency: Consistency::One, rolling_restarts: true, ..Scenario::quorum() },
        "restarts" => Scenario { rolling_restarts: true, ..Scenario::quorum() },
        "crowd" => Scenario { contenders: 32, rounds: 3, ..Scenario::quorum() },
        _ => Scenario::quorum(),
    };
    let t = std::time::Instant::now();
    let s = sweep(10_000..10_000 + seeds, sc);
    print(&var, &s);
    eprintln!("  ({:?} wall)", t.elapsed());
    for (seed, a, b) in s.overlaps.iter().take(5) {
        eprintln!("  seed {seed}: {} held for {:?}, {} granted {:?} after its grant", a.owner, a.released - a.granted, b.owner, b.granted - a.granted);
    }
}

/// Prints the store requests of one run; see the module docs.
#[test]
#[ignore]
fn explore_seed() {
    let seed: u64 = std::env::var("SEED").unwrap().parse().unwrap();
    let one = std::env::var("ONE").is_ok();
    let sc = if one { Scenario { consistency: Consistency::One, rolling_restarts: true, ..Scenario::quorum() } } else { Scenario::quorum() };
    let trace: Trace = Default::default();
    let r = run_traced(seed, sc, Some(trace.clone()));
    eprintln!("seed {seed}: {} holds, {} overlapping pairs", r.holds.len(), r.overlaps.len());
    let who: Vec<String> = std::env::var("WHO").unwrap_or_default().split(',').map(String::from).collect();
    let to_ms: f64 = std::env::var("TO_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(f64::MAX);
    for (t0, t1, name, what) in trace.lock().unwrap().iter() {
        if (who == [""] || who.contains(name)) && t0.as_secs_f64() * 1e3 <= to_ms {
            eprintln!("{:>9.3} {:>9.3} {name} {what}", t0.as_secs_f64() * 1e3, t1.as_secs_f64() * 1e3);
        }
    }
}
