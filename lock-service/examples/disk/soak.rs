//! The disk soak: one node in this process, contenders taking locks until a number of grants,
//! the data directory's size sampled as they go, then the node stopped and started again on
//! its directory (a process, stopped with SIGTERM and started again) and timed until it leads
//! with every entry applied and grants again.
//!
//! Shared by the `disk` example (the full run, into `results/service-disk`) and the test
//! that runs a small one.

use lock_core::Locker;
use lock_service::client::{ClientConfig, ServiceAdmin, ServiceClient};
use lock_service::proto::Status;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// What to run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SoakConfig {
    /// Stop after this many grants.
    pub grants: u64,
    /// Contenders, each with a session of its own.
    pub contenders: usize,
    /// Locks they take, contender i lock i mod this.
    pub locks: usize,
    /// The node's `--snapshot-every`.
    pub snapshot_every: u64,
    /// How often the directory is measured, in milliseconds.
    pub sample_ms: u64,
}

/// One look at the data directory.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    /// Seconds since the contenders started.
    pub secs: f64,
    /// Grants so far.
    pub grants: u64,
    /// Bytes of every file in the directory (the log's segments are allocated whole).
    pub bytes: u64,
    /// Files in it.
    pub files: u64,
}

/// A restart, timed from the call that starts the node again.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Restart {
    /// Until the node answers (its directory read: the snapshot loaded, the log replayed).
    pub started_ms: f64,
    /// Until it leads with every entry it had applied before the stop applied again.
    pub caught_up_ms: f64,
    /// Until a new client was granted a lock.
    pub first_grant_ms: f64,
    /// The entries applied before the stop.
    pub applied: u64,
}

/// What a soak measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SoakResult {
    /// What was run.
    pub config: SoakConfig,
    /// Grants made.
    pub grants: u64,
    /// Wall seconds of the contenders' run.
    pub secs: f64,
    /// The directory, sampled.
    pub samples: Vec<Sample>,
    /// The restart.
    pub restart: Restart,
}

impl SoakResult {
    /// The largest sample in the first and in the second half of the run (by grants).
    pub fn peaks(&self) -> (u64, u64) {
        let half = self.grants / 2;
        let peak = |first: bool| {
            self.samples.iter().filter(|s| (s.grants <= half) == first).map(|s| s.bytes).max()
        };
        (peak(true).unwrap_or(0), peak(false).unwrap_or(0))
    }
}

/// The size of every file under `dir`, and how many there are.
pub fn dir_size(dir: &Path) -> (u64, u64) {
    let mut total = (0, 0);
    let Ok(entries) = std::fs::read_dir(dir) else { return total };
    for e in entries.flatten() {
        match e.metadata() {
            Ok(m) if m.is_dir() => {
                let (b, f) = dir_size(&e.path());
                total = (total.0 + b, total.1 + f);
            }
            Ok(m) => total = (total.0 + m.len(), total.1 + 1),
            Err(_) => {}
        }
    }
    total
}

/// The node's arguments (after the program name).
fn node_args(dir: &Path, ports: (u16, u16), snapshot_every: u64) -> Vec<String> {
    let cluster = format!("0=127.0.0.1:{}/127.0.0.1:{}", ports.0, ports.1);
    let dir = dir.to_str().expect("a UTF-8 path");
    ["--id", "0", "--cluster", &cluster, "--data-dir", dir, "--init"]
        .into_iter()
        .map(String::from)
        .chain(["--snapshot-every".into(), snapshot_every.to_string()])
        .chain(["--cluster-token".into(), "disk-soak".into()])
        .collect()
}

/// A node process, stopped with SIGTERM (a clean shutdown) when dropped.
struct NodeProcess(std::process::Child);

impl NodeProcess {
    fn start(mut command: Command, args: &[String]) -> NodeProcess {
        command.args(args).stdout(Stdio::null()).stderr(Stdio::inherit());
        NodeProcess(command.spawn().expect("start the soak's node"))
    }

    /// SIGTERM, and wait for the process to end.
    fn stop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

/// The node's status, once it answers.
async fn status(admin: &ServiceAdmin, endpoint: &str) -> Option<Status> {
    admin.status_of(endpoint).await.ok()
}

/// Wait until the node at `endpoint` says `done`, polling every 5 ms.
async fn wait_until(
    admin: &ServiceAdmin,
    endpoint: &str,
    what: &str,
    within: Duration,
    done: impl Fn(&Status) -> bool,
) -> Status {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = status(admin, endpoint).await.filter(|s| done(s)) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Run the soak in `dir` (empty), the node run by `node` (a `lock-server` command without
/// arguments); `progress` is told the grants every sample.
pub async fn soak(
    dir: &Path,
    config: &SoakConfig,
    node: impl Fn() -> Command,
    progress: impl Fn(&Sample),
) -> SoakResult {
    let ports = (test_servers::free_port(), test_servers::free_port());
    let args = node_args(dir, ports, config.snapshot_every);
    let endpoint = format!("127.0.0.1:{}", ports.1);
    let admin =
        ServiceAdmin::new(std::slice::from_ref(&endpoint), ClientConfig::default()).unwrap();
    let mut process = NodeProcess::start(node(), &args);
    wait_until(&admin, &endpoint, "the node leads", Duration::from_secs(20), |s| {
        s.leader == Some(0)
    })
    .await;
    let endpoints = vec![endpoint.clone()];
    let client_config = ClientConfig {
        ttl: Duration::from_secs(10),
        request_timeout: Duration::from_secs(10),
        ..ClientConfig::default()
    };
    let grants = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..config.contenders {
        let client = ServiceClient::connect(&endpoints, client_config.clone()).await.unwrap();
        let locker = client.locker(&format!("c{i}")).unwrap();
        let lock = format!("disk-{}", i % config.locks.max(1));
        let (grants, stop, target) = (grants.clone(), stop.clone(), config.grants);
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let guard = locker.lock(&lock, Some(Duration::from_secs(10))).await.expect("lock");
                guard.release().await.expect("release");
                if grants.fetch_add(1, Ordering::Relaxed) + 1 >= target {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            client.close().await.expect("close");
        }));
    }
    let mut samples = Vec::new();
    let every = Duration::from_millis(config.sample_ms.max(1));
    loop {
        let (bytes, files) = dir_size(dir);
        let sample = Sample {
            secs: started.elapsed().as_secs_f64(),
            grants: grants.load(Ordering::Relaxed),
            bytes,
            files,
        };
        progress(&sample);
        samples.push(sample);
        if stop.load(Ordering::Relaxed) {
            break;
        }
        tokio::time::sleep(every).await;
    }
    let secs = started.elapsed().as_secs_f64();
    for t in tasks {
        t.await.expect("a contender");
    }
    let (bytes, files) = dir_size(dir);
    let made = grants.load(Ordering::Relaxed);
    samples.push(Sample { secs: started.elapsed().as_secs_f64(), grants: made, bytes, files });

    let applied = status(&admin, &endpoint).await.and_then(|s| s.applied).unwrap_or(0);
    process.stop();
    let restarting = Instant::now();
    let mut process = NodeProcess::start(node(), &args);
    wait_until(&admin, &endpoint, "the restarted node answers", Duration::from_secs(60), |_| true)
        .await;
    let started_ms = restarting.elapsed().as_secs_f64() * 1e3;
    let what = "the restarted node leads with every entry applied";
    wait_until(&admin, &endpoint, what, Duration::from_secs(60), |s| {
        s.leader == Some(0) && s.applied.unwrap_or(0) >= applied
    })
    .await;
    let caught_up_ms = restarting.elapsed().as_secs_f64() * 1e3;
    let client = ServiceClient::connect(&endpoints, client_config).await.expect("a new client");
    let guard = client.locker("after").unwrap().lock("disk-0", None).await.expect("a grant");
    let first_grant_ms = restarting.elapsed().as_secs_f64() * 1e3;
    guard.release().await.expect("release");
    client.close().await.expect("close");
    process.stop();
    SoakResult {
        config: config.clone(),
        grants: made,
        secs,
        samples,
        restart: Restart { started_ms, caught_up_ms, first_grant_ms, applied },
    }
}

/// Bytes as MiB, one decimal.
fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

/// `results/service-disk/README.md` from what a soak measured.
pub fn render(r: &SoakResult) -> String {
    let (first, second) = r.peaks();
    let peak = r.samples.iter().map(|s| s.bytes).max().unwrap_or(0);
    let last = r.samples.last().map_or(0, |s| s.bytes);
    let files = r.samples.iter().map(|s| s.files).max().unwrap_or(0);
    let c = &r.config;
    let mut out = String::new();
    out.push_str("# The lock service's data directory over a long run, and a restart from it\n\n");
    out.push_str(
        "Generated by `cargo run --release -p lock-service --example disk` (a step of \
         `scripts/regenerate-results.sh`) from `summary.json`; the sizes over the run are in \
         `samples.csv`. One node, a process of the example's own program, and its contenders in \
         the example; the directory is measured as the bytes of its files (the log's segments \
         are allocated whole when made). The restart stops the node with SIGTERM and starts it \
         again on its directory.\n\n",
    );
    out.push_str("| grants | contenders | locks | `--snapshot-every` | wall | grants/s |\n");
    out.push_str("|---:|---:|---:|---:|---:|---:|\n");
    out.push_str(&format!(
        "| {} | {} | {} | {} | {:.1} s | {:.0} |\n\n",
        r.grants,
        c.contenders,
        c.locks,
        c.snapshot_every,
        r.secs,
        r.grants as f64 / r.secs.max(1e-9)
    ));
    out.push_str("| data directory | MiB |\n|---|---:|\n");
    out.push_str(&format!("| largest, first half of the grants | {} |\n", mib(first)));
    out.push_str(&format!("| largest, second half of the grants | {} |\n", mib(second)));
    out.push_str(&format!("| largest overall | {} |\n", mib(peak)));
    out.push_str(&format!("| at the end | {} |\n", mib(last)));
    out.push_str(&format!("| files at most | {files} |\n\n"));
    out.push_str(
        "| restart on the directory, from the call that starts the node | ms |\n|---|---:|\n",
    );
    out.push_str(&format!(
        "| up (snapshot loaded, log replayed) | {:.1} |\n",
        r.restart.started_ms
    ));
    out.push_str(&format!(
        "| leading, with all {} entries applied again | {:.1} |\n",
        r.restart.applied, r.restart.caught_up_ms
    ));
    out.push_str(&format!("| a new client granted a lock | {:.1} |\n\n", r.restart.first_grant_ms));
    out.push_str(&format!(
        "**The bound.** The directory holds the node's redb file (its vote, committed index and \
         last snapshot: every session and lock, so its size follows what is live, not the \
         grants made) and the log's 8 MiB segments since the last purge. After each snapshot \
         (every {} entries here; an entry carries every command the leader gathered while its \
         previous write was under way) the log is purged up to 1,000 entries before it, so \
         the log never holds more than about {} entries and the segments they fill, whatever \
         the number of grants. Over this run the directory stayed under {} MiB, and the second \
         half's largest was {:.2}× the first half's.\n",
        c.snapshot_every,
        c.snapshot_every + 1000,
        mib(peak),
        second as f64 / first.max(1) as f64
    ));
    out
}

/// `samples.csv`.
pub fn samples_csv(r: &SoakResult) -> String {
    let mut out = String::from("secs,grants,bytes,files\n");
    for s in &r.samples {
        out.push_str(&format!("{:.3},{},{},{}\n", s.secs, s.grants, s.bytes, s.files));
    }
    out
}
