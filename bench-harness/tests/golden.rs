//! The simulator's results do not move: the default scenario (`bench-harness --threads 64
//! --seed S -q -o DIR`, every embedded algorithm, 60 s of simulated time) writes byte for byte
//! the `summary.json` and `grants.csv` recorded below. The test keeps FNV-1a (64 bits) digests,
//! a dozen lines here rather than a dependency.
//!
//! A run depends on the seed, the model and the executor: lock-core's simulation orders the
//! tasks woken at one instant by its seed, so a change to the executor's order changes every
//! run, as a new model rule or another order of random draws does. Such a change records the
//! new digests in the same commit and says why (CHANGELOG.md keeps the history). Any other
//! change that trips this test changed behaviour it did not mean to.
//!
//! Cost: three runs of the binary at once, each a few seconds of CPU in a release build and
//! about twice that in the test profile; on two cores about 15-30 s of wall time.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_bench-harness");

/// Per seed: the FNV-1a digest and the length of `summary.json`, then of `grants.csv`.
const GOLDEN: [(u64, [(u64, usize); 2]); 3] = [
    (1, [(0xb6ff_e1c1_fdff_d98a, 167_983), (0x9cd2_f540_33f6_f063, 1_068_043)]),
    (2, [(0x2074_8148_6d5f_5404, 167_978), (0x43ff_eaf5_6ca2_7d14, 1_070_242)]),
    (3, [(0x5a38_581e_9fad_2bbe, 167_955), (0xda36_222f_1484_273a, 1_074_346)]),
];

const FILES: [&str; 2] = ["summary.json", "grants.csv"];

/// FNV-1a, 64 bits: enough to tell two outputs apart, and stable across platforms.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn out_dir(seed: u64) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("bench-harness-golden")
        .join(format!("s{seed}"));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Starts the default scenario for `seed` into its own directory.
fn start(seed: u64) -> (u64, PathBuf, std::process::Child) {
    let dir = out_dir(seed);
    let child = Command::new(BIN)
        .args(["--threads", "64", "--seed", &seed.to_string(), "-q", "-o"])
        .arg(&dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("the binary starts");
    (seed, dir, child)
}

#[test]
fn the_default_scenario_writes_the_recorded_bytes_for_seeds_1_to_3() {
    // All three at once: they are independent processes, and the machine has two cores.
    let runs: Vec<_> = GOLDEN.iter().map(|&(seed, _)| start(seed)).collect();
    let mut mismatches = Vec::new();
    for ((seed, dir, mut child), (_, expected)) in runs.into_iter().zip(GOLDEN) {
        let status = child.wait().expect("the binary runs");
        assert!(status.success(), "seed {seed}: the run failed with {status}");
        for (file, (digest, len)) in FILES.iter().zip(expected) {
            let bytes = std::fs::read(dir.join(file)).expect("the run wrote its output");
            let got = (fnv1a(&bytes), bytes.len());
            if got != (digest, len) {
                let (found, size, at) = (got.0, got.1, dir.display());
                mismatches.push(format!(
                    "seed {seed} {file}: {found:#018x}, {size} bytes \
                     (recorded: {digest:#018x}, {len} bytes) in {at}"
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "the simulation's results changed:\n{}", mismatches.join("\n"));
}

#[test]
fn the_digest_is_fnv1a() {
    // The published test vectors of FNV-1a 64.
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
}
