//! What the fault tests share: a scratch directory and the binary run with `--check`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_bench-harness");

/// An empty directory `group/name` under the test target's scratch space.
pub fn scratch(group: &str, name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(group).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The checker's exit status and output for a run of the binary with `args` into `dir`.
pub fn run_checked(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(args)
        .args(["--check", "--quiet", "--out"])
        .arg(dir)
        .output()
        .expect("the binary runs");
    (out.status.code(), output_text(&out))
}

/// A finished command's standard output followed by its standard error.
pub fn output_text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// Fault windows of `kind` in `dir/faults.csv`: (target, start_us, end_us).
pub fn windows(dir: &Path, kind: &str) -> Vec<(String, u64, u64)> {
    std::fs::read_to_string(dir.join("faults.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[1] == kind).then(|| (f[2].to_string(), f[3].parse().unwrap(), f[4].parse().unwrap()))
        })
        .collect()
}
