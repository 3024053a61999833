//! The data directory over many grants stays as large as the snapshot interval makes it, not
//! the grants, and a node restarted on it serves again with every entry applied: the small
//! version of `cargo run --release -p lock-service --example disk`, whose committed results
//! are checked here too.

#[path = "../examples/disk/soak.rs"]
#[allow(dead_code)]
mod soak;

use soak::{render, soak, SoakConfig, SoakResult};
use std::process::Command;

const SEGMENT: u64 = lock_service::wal::SEGMENT_BYTES;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_stays_flat_over_many_grants_and_a_restart_serves_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = SoakConfig {
        grants: 30_000,
        contenders: 16,
        locks: 16,
        snapshot_every: 1000,
        sample_ms: 50,
    };
    let node = || Command::new(env!("CARGO_BIN_EXE_lock-server"));
    let r = soak(dir.path(), &config, node, |_| {}).await;
    assert!(r.grants >= config.grants, "{} grants", r.grants);
    let (first, second) = r.peaks();
    let peak = r.samples.iter().map(|s| s.bytes).max().unwrap();
    eprintln!(
        "{} grants, {} entries; directory: first half {first} B, second half {second} B; \
         restart: caught up in {:.0} ms",
        r.grants, r.restart.applied, r.restart.caught_up_ms
    );
    // The log's segments since the last purge (about 2,000 entries: one segment, two while
    // the next is made) and the redb file: never a segment more in the second half.
    assert!(second <= first + SEGMENT, "the directory grew: {first} B, then {second} B");
    assert!(peak <= 3 * SEGMENT + (8 << 20), "the directory reached {peak} B");
    assert!(r.restart.applied > config.snapshot_every, "{:?}", r.restart);
}

/// `results/service-disk/README.md` is what its `summary.json` renders.
#[test]
fn the_committed_results_are_their_summary_rendered() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/service-disk");
    let summary = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    let result: SoakResult = serde_json::from_str(&summary).expect("a soak's summary");
    let readme = std::fs::read_to_string(dir.join("README.md")).expect("README.md");
    assert_eq!(readme, render(&result), "regenerate with the example's --redraw");
    assert!(result.grants >= 1_000_000, "the committed run is the full one");
}
