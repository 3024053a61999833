//! Result files: `summary.json`, `grants.csv`, and the atomic writes and output directory
//! checks every report uses.

use crate::measure::metrics::Grant;
use anyhow::Context;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The exact header of `grants.csv`.
pub const GRANTS_CSV_HEADER: &str =
    "algorithm,lock,contender,requested_us,granted_us,released_us,token";

/// Creates `dir` (and parents), failing with a clear message when it cannot be written.
pub fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output directory {}", dir.display()))?;
    let probe = dir.join(".bench-harness-write-test");
    fs::write(&probe, b"")
        .with_context(|| format!("cannot write into the output directory {}", dir.display()))?;
    let _ = fs::remove_file(probe);
    Ok(())
}

/// Writes `value` as pretty JSON with a final newline, through a temporary file so that a
/// reader never sees half a file.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_string_pretty(value).context("cannot serialize the results")?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// Writes `bytes` to `path` through a temporary file in the same directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = tmp_path(path);
    fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// `grants.csv`: created with its header, then appended to as each algorithm finishes.
pub struct GrantsCsv {
    path: PathBuf,
}

impl GrantsCsv {
    /// Creates (or truncates) `path` and writes the header.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        fs::write(path, format!("{GRANTS_CSV_HEADER}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(GrantsCsv {
            path: path.to_path_buf(),
        })
    }

    /// Appends the grants of `algorithm`.
    pub fn append(&self, algorithm: &str, grants: &[Grant]) -> anyhow::Result<()> {
        let mut text = String::with_capacity(grants.len() * 48);
        for g in grants {
            let _ = writeln!(
                text,
                "{algorithm},{},{},{},{},{},{}",
                g.lock, g.contender, g.requested_us, g.granted_us, g.released_us, g.token
            );
        }
        let mut f = fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .with_context(|| format!("cannot append to {}", self.path.display()))?;
        f.write_all(text.as_bytes())
            .with_context(|| format!("cannot append to {}", self.path.display()))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Reads a `grants.csv` back (for charts and tests): `(algorithm, grant)` rows.
pub fn read_grants_csv(text: &str) -> anyhow::Result<Vec<(String, Grant)>> {
    let mut lines = text.lines();
    let header = lines.next().unwrap_or_default();
    anyhow::ensure!(
        header == GRANTS_CSV_HEADER,
        "unexpected grants.csv header: {header}"
    );
    lines
        .enumerate()
        .map(|(i, line)| {
            let f: Vec<&str> = line.split(',').collect();
            anyhow::ensure!(f.len() == 7, "line {}: expected 7 fields", i + 2);
            let n = |k: usize| {
                f[k].parse::<u64>()
                    .with_context(|| format!("line {}: field {}", i + 2, k + 1))
            };
            Ok((
                f[0].to_string(),
                Grant {
                    lock: n(1)? as u32,
                    contender: n(2)? as u32,
                    requested_us: n(3)?,
                    granted_us: n(4)?,
                    released_us: n(5)?,
                    token: n(6)?,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_csv_round_trips() {
        let dir = std::env::temp_dir().join(format!("bench-harness-csv-{}", std::process::id()));
        prepare_dir(&dir).unwrap();
        let csv = GrantsCsv::create(&dir.join("grants.csv")).unwrap();
        let g = Grant {
            lock: 1,
            contender: 2,
            requested_us: 3,
            granted_us: 4,
            released_us: 5,
            token: 6,
        };
        csv.append("queue", &[g]).unwrap();
        csv.append("shadow", &[g, g]).unwrap();
        let text = fs::read_to_string(csv.path()).unwrap();
        assert!(text.starts_with(&format!("{GRANTS_CSV_HEADER}\nqueue,1,2,3,4,5,6\n")));
        let back = read_grants_csv(&text).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2], ("shadow".to_string(), g));
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn unwritable_directories_are_reported() {
        let file = std::env::temp_dir().join(format!("bench-harness-file-{}", std::process::id()));
        fs::write(&file, b"x").unwrap();
        let e = prepare_dir(&file.join("sub")).unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot create the output directory"),
            "{e:#}"
        );
        let _ = fs::remove_file(file);
    }
}
