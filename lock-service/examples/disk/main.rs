//! The lock service's data directory over a long run, and a restart from it: one node, many
//! contenders, a million grants by default; the directory's size sampled as they go; then the
//! node restarted on its directory and timed. Writes `summary.json`, `samples.csv` and
//! `README.md` into `--out` (`results/service-disk`).
//!
//! ```text
//! cargo run --release -p lock-service --example disk                 # 10^6 grants
//! cargo run --release -p lock-service --example disk -- --grants 50000 --out /tmp/disk
//! cargo run --release -p lock-service --example disk -- --redraw     # README from summary.json
//! ```

mod soak;

use clap::Parser;
use lock_service::server::ServerArgs;
use soak::{render, samples_csv, soak, SoakConfig, SoakResult};
use std::path::PathBuf;

/// The command line.
#[derive(Debug, Parser)]
#[command(about = "The lock service's data directory over a long run, and a restart from it")]
struct Args {
    /// Stop after this many grants.
    #[arg(long, default_value_t = 1_000_000)]
    grants: u64,
    /// Contenders, each with a session of its own.
    #[arg(long, default_value_t = 64)]
    contenders: usize,
    /// Locks they share (contender i takes lock i mod this).
    #[arg(long, default_value_t = 64)]
    locks: usize,
    /// The node's --snapshot-every (its default).
    #[arg(long, default_value_t = 20_000)]
    snapshot_every: u64,
    /// How often the directory is measured, in milliseconds.
    #[arg(long, default_value_t = 500)]
    sample_ms: u64,
    /// Where the files go.
    #[arg(long, default_value = "results/service-disk")]
    out: PathBuf,
    /// Only write README.md again from the summary.json in --out.
    #[arg(long)]
    redraw: bool,
}

/// The hidden first argument that makes this program a node of the service: the soak runs
/// its node as a process of this same program, so nothing else needs building.
const NODE: &str = "--node";

fn main() -> Result<(), String> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(NODE) {
        let node = ServerArgs::try_parse_from(
            std::iter::once("lock-server".to_string()).chain(argv[2..].iter().cloned()),
        )
        .unwrap_or_else(|e| e.exit());
        return lock_service::server::serve(node).map_err(|e| e.to_string());
    }
    let args = Args::parse();
    let summary = args.out.join("summary.json");
    let result: SoakResult = if args.redraw {
        let text =
            std::fs::read_to_string(&summary).map_err(|e| format!("{}: {e}", summary.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", summary.display()))?
    } else {
        let config = SoakConfig {
            grants: args.grants,
            contenders: args.contenders,
            locks: args.locks,
            snapshot_every: args.snapshot_every,
            sample_ms: args.sample_ms,
        };
        let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
        let runtime = tokio::runtime::Runtime::new().map_err(|e| e.to_string())?;
        let last = std::sync::Mutex::new(std::time::Instant::now());
        let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let node = || {
            let mut c = std::process::Command::new(&exe);
            c.arg(NODE);
            c
        };
        let result = runtime.block_on(soak(dir.path(), &config, node, |s| {
            let mut last = last.lock().unwrap();
            if last.elapsed().as_secs() >= 10 {
                *last = std::time::Instant::now();
                eprintln!(
                    "disk: {:.0} s, {} of {} grants, directory {:.1} MiB",
                    s.secs,
                    s.grants,
                    config.grants,
                    s.bytes as f64 / (1 << 20) as f64
                );
            }
        }));
        std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
        let json = serde_json::to_string_pretty(&result).expect("a result serialises");
        std::fs::write(&summary, json + "\n").map_err(|e| format!("{}: {e}", summary.display()))?;
        let csv = args.out.join("samples.csv");
        std::fs::write(&csv, samples_csv(&result))
            .map_err(|e| format!("{}: {e}", csv.display()))?;
        result
    };
    let readme = args.out.join("README.md");
    std::fs::write(&readme, render(&result)).map_err(|e| format!("{}: {e}", readme.display()))?;
    eprintln!("disk: wrote {}", args.out.display());
    Ok(())
}
