//! The simulator's results do not move: the default scenario (`bench-harness --threads 64
//! --seed S -q -o DIR`, every embedded algorithm, 60 s of simulated time) writes byte for byte
//! the `summary.json` and `grants.csv` it wrote before the simulator was made faster.
//!
//! The digests below were taken from the outputs of the code before that work (commit
//! 3704288), whose MD5 sums were, for the record: seed 1 summary
//! 293c891e4ba03fc8c2697a5033fbb5fc, grants 888a78d0a72670e11eb4d85ca5a9aedb; seed 2 summary
//! 91bc21cb6499b2464888eaa0b1502546, grants 29d65e9220f59c78d9eb75405bb9797a; seed 3 summary
//! 0cd258f8b9daa5eb6490de5fa79f76db, grants 5094efb2e3b7dca90b0147bbcecbbd2a. The test keeps
//! FNV-1a (64 bits) instead, a dozen lines here rather than a dependency.
//!
//! `summary.json`'s digests were recorded again when the queue locks and the bakery began to
//! report their place in line (`fairness.overtakes.in_line`, 0 overtaken for all four): with
//! those four blocks taken out, the new files hash to the digests recorded before (seed 1
//! 0xfdb0_c10c_2ef2_6628, 167,522 bytes; seed 2 0x9cb4_cc4f_fba4_1bbc, 167,529; seed 3
//! 0x33b4_33be_7be3_ea6e, 167,522), and `grants.csv` did not change: the simulation is the same.
//!
//! A change that is meant to alter the simulation (a new model rule, another order of random
//! draws) changes these on purpose: record the new digests in the same commit and say why.
//! Any other change that trips this test changed behaviour it did not mean to.
//!
//! Cost: three runs of the binary at once, each about 10 s of CPU in a release build and
//! about twice that in the test profile; on two cores about 20–40 s of wall time.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_bench-harness");

/// Per seed: the FNV-1a digest and the length of `summary.json`, then of `grants.csv`.
const GOLDEN: [(u64, [(u64, usize); 2]); 3] = [
    (1, [(0xa84b_c17e_1ef5_8278, 167_958), (0x1f7a_a904_6f94_21d6, 1_068_414)]),
    (2, [(0x2ba7_ca39_da83_5d86, 167_965), (0x0b87_a146_c6e8_e868, 1_068_432)]),
    (3, [(0x6969_cb2c_7658_6e9c, 167_958), (0xff4a_ea43_acad_0af8, 1_074_861)]),
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
