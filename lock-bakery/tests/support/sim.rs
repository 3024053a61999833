//! The bakery exclusion hunt's machinery, shared by `tests/exclusion.rs` and
//! `examples/explore.rs` (larger sweeps and per-request traces).
#![allow(dead_code)]

use lock_bakery::{read_rows, BakeryConfig, BakeryLocker};
use lock_core::conformance::Hold;
use lock_core::context::ClientContext;
use lock_core::embedded::{EmbeddedClient, EmbeddedConfig, EmbeddedStore, LatencyModel};
use lock_core::{
    Cell, CellStore, CellWrite, Consistency, LockError, Locker, Micros, Slice, StoreError,
};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

pub const LOCK: &str = "contended";

#[derive(Clone, Copy, Debug)]
pub struct Scenario {
    pub replicas: usize,
    pub latency: LatencyModel,
    pub consistency: Consistency,
    pub contenders: usize,
    pub rounds: usize,
    /// Each client's clock is skewed by a uniform sample of `±skew`.
    pub skew: Duration,
    /// Every contender `i` with `i % 4 == 1` uses `try_lock` (and retries after a refusal).
    pub soft: bool,
    /// Every contender `i` with `i % 4 == 2` uses `lock` with a random 1–60 ms timeout.
    pub timeouts: bool,
    /// Stop the replicas in turn, one at a time (no hinted handoff: each comes back stale).
    pub rolling_restarts: bool,
    /// A multi-thread runtime in wall time instead of simulated time.
    pub wall: bool,
}

impl Scenario {
    pub fn quorum() -> Self {
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

pub type Trace = Arc<Mutex<Vec<(Duration, Duration, String, String)>>>;

/// A store handle that can record every request of its client: (start, end, client, what).
#[derive(Clone)]
pub struct Traced {
    pub inner: EmbeddedClient,
    pub name: String,
    pub origin: Instant,
    pub log: Option<Trace>,
}

impl Traced {
    pub fn record(&self, t0: Duration, what: String) {
        if let Some(log) = &self.log {
            log.lock().unwrap().push((t0, self.origin.elapsed(), self.name.clone(), what));
        }
    }
}

pub fn show(v: &[u8]) -> String {
    let s = String::from_utf8_lossy(v);
    let t = s.trim_start_matches('0');
    if t.is_empty() || t.len() == s.len() {
        s.into_owned()
    } else {
        t.to_string()
    }
}

#[async_trait::async_trait]
impl CellStore for Traced {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        let t0 = self.origin.elapsed();
        let r = self.inner.write(table, row, cells, c).await;
        if self.log.is_some() {
            let what: Vec<String> =
                cells.iter().map(|w| format!("{table}[{}]={}", w.column, show(&w.value))).collect();
            self.record(t0, format!("write {} -> {:?}", what.join(","), r));
        }
        r
    }
    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        ts: Micros,
        c: Consistency,
    ) -> Result<(), StoreError> {
        let t0 = self.origin.elapsed();
        let r = self.inner.delete(table, row, column, ts, c).await;
        self.record(t0, format!("delete {table}[{column}] -> {r:?}"));
        r
    }
    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        let t0 = self.origin.elapsed();
        let r = self.inner.read(table, row, slice, c).await;
        if self.log.is_some() {
            let what = match &r {
                Ok(cells) => cells
                    .iter()
                    .map(|c| format!("{}={}", c.column, show(&c.value)))
                    .collect::<Vec<_>>()
                    .join(" "),
                Err(e) => format!("ERR {e}"),
            };
            self.record(t0, format!("read {table} -> [{what}]"));
        }
        r
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub holds: Vec<Hold>,
    /// Pairs of holds of which the second was granted before the first was released.
    pub overlaps: Vec<(Hold, Hold)>,
    /// Consecutive grants whose fencing token did not increase.
    pub token_regressions: usize,
    /// Holds wanted by mandatory contenders but not got (must be zero).
    pub missing_mandatory: usize,
    pub timeouts: usize,
    pub soft_refusals: usize,
    pub errors: Vec<String>,
    /// Cells left in either row after every contender finished.
    pub leftovers: usize,
}

pub fn overlaps(holds: &[Hold]) -> Vec<(Hold, Hold)> {
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

pub fn run(seed: u64, sc: Scenario) -> Report {
    run_traced(seed, sc, None)
}

pub fn run_traced(seed: u64, sc: Scenario, trace: Option<Trace>) -> Report {
    let rt = if sc.wall {
        tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build()
    }
    .unwrap();
    rt.block_on(async move {
        let store = EmbeddedStore::new(EmbeddedConfig {
            replicas: sc.replicas,
            latency: sc.latency,
            seed,
            ..Default::default()
        });
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
            let ctx = ClientContext::new(&name, client.clock(), seed ^ i as u64)
                .with_consistency(sc.consistency);
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
                            tokio::time::sleep(Duration::from_micros(rng.random_range(0..20_000)))
                                .await;
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
pub struct Sweep {
    pub seeds: u64,
    pub holds: usize,
    pub overlaps: Vec<(u64, Hold, Hold)>,
    pub token_regressions: usize,
    pub missing_mandatory: usize,
    pub timeouts: usize,
    pub soft_refusals: usize,
    pub errors: Vec<String>,
    pub leftovers: usize,
}

pub fn sweep(seeds: std::ops::Range<u64>, sc: Scenario) -> Sweep {
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

pub fn print(name: &str, s: &Sweep) {
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
pub fn assert_exclusive(
    name: &str,
    seeds: std::ops::Range<u64>,
    sc: Scenario,
    errors_expected: bool,
) -> Sweep {
    let s = sweep(seeds, sc);
    print(name, &s);
    assert!(s.overlaps.is_empty(), "{name}: mutual exclusion violated: {:?}", s.overlaps.first());
    assert_eq!(s.token_regressions, 0, "{name}: fencing tokens did not rise");
    assert_eq!(s.missing_mandatory, 0, "{name}: a mandatory contender did not get all its rounds");
    assert!(
        errors_expected || s.errors.is_empty(),
        "{name}: errors: {:?}",
        &s.errors[..s.errors.len().min(5)]
    );
    assert_eq!(s.leftovers, 0, "{name}: cells left behind");
    s
}
