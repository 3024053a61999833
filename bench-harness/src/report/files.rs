//! Result files: `summary.json`, `grants.csv`, `resource.csv`, `faults.csv`, and the atomic
//! writes and output directory checks every report uses. The three CSV files are what the
//! checker (`bench-harness check DIR`) reads back.

use crate::measure::log::{FaultWindow, ResourceWrite};
use crate::measure::metrics::Grant;
use crate::primitive::{Primitive, Share};
use anyhow::Context;
use std::fs;
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};

/// The exact header of `grants.csv`. `lease_lost`: the holder's guard said its lease was lost
/// before it let go; `crashed`: the holder crashed while holding (`released_us` is the crash).
pub const GRANTS_CSV_HEADER: &str =
    "algorithm,lock,contender,requested_us,granted_us,released_us,token,lease_lost,crashed";

/// The header of `grants.csv` for a run of another primitive than the mutex: one more
/// column, `share`, how each grant held its lock (`x` alone, `r` read, `w` write, `HELD/OF`
/// permits of a semaphore). A mutex's file stays without it.
pub const GRANTS_SHARE_CSV_HEADER: &str =
    "algorithm,lock,contender,requested_us,granted_us,released_us,token,lease_lost,crashed,share";

/// The exact header of `resource.csv`: every write the fenced resource decided.
pub const RESOURCE_CSV_HEADER: &str = "algorithm,lock,contender,token,at_us,accepted";

/// The exact header of `faults.csv`: every fault injected (`target`: an owner id, a replica,
/// `server`, a cluster's member, or for `stranger` what it did to the holder: `holder (deleted
/// 1)`, `holder (refused: …)`, `holder (none held)`).
pub const FAULTS_CSV_HEADER: &str = "algorithm,kind,target,start_us,end_us";

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

/// What an earlier run wrote to `path`, for a `--redraw` that measures nothing.
pub fn read_earlier<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text = fs::read_to_string(path).with_context(|| {
        format!("cannot read {} (--redraw needs an earlier run)", path.display())
    })?;
    serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
}

/// Writes `bytes` to `path` through a temporary file in the same directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = tmp_path(path);
    fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".tmp");
    path.with_file_name(name)
}

/// A CSV file created with its header, then appended to as each algorithm finishes.
pub struct CsvLog {
    path: PathBuf,
}

impl CsvLog {
    /// Creates (or truncates) `path` and writes `header`.
    pub fn create(path: &Path, header: &str) -> anyhow::Result<Self> {
        fs::write(path, format!("{header}\n"))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(CsvLog { path: path.to_path_buf() })
    }

    /// Appends `rows` of `algorithm`, each written by `line` (without the algorithm column).
    pub fn append<T>(
        &self,
        algorithm: &str,
        rows: impl IntoIterator<Item = T>,
        line: impl Fn(&T) -> String,
    ) -> anyhow::Result<()> {
        // Streamed through a buffer: a long run's log is tens of megabytes of text, which
        // need not be in memory at once.
        let append = || -> std::io::Result<()> {
            let f = fs::OpenOptions::new().append(true).open(&self.path)?;
            let mut out = std::io::BufWriter::with_capacity(1 << 16, f);
            for row in rows {
                writeln!(out, "{algorithm},{}", line(&row))?;
            }
            out.flush()
        };
        append().with_context(|| format!("cannot append to {}", self.path.display()))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// One line of `grants.csv` after the algorithm.
pub fn grant_line(g: &Grant) -> String {
    format!(
        "{},{},{},{},{},{},{},{}",
        g.lock,
        g.contender,
        g.requested_us,
        g.granted_us,
        g.released_us,
        g.token,
        g.lease_lost,
        g.crashed
    )
}

/// [`grant_line`] with the grant's share.
pub fn grant_share_line(g: &Grant) -> String {
    format!("{},{}", grant_line(g), g.share)
}

/// One line of `resource.csv` after the algorithm.
pub fn resource_line(w: &ResourceWrite) -> String {
    format!("{},{},{},{},{}", w.lock, w.contender, w.token, w.at_us, w.accepted)
}

/// One line of `faults.csv` after the algorithm.
pub fn fault_line(f: &FaultWindow) -> String {
    format!("{},{},{},{}", f.kind, f.target, f.start_us, f.end_us)
}

/// The three logs of one run directory.
pub struct RunLogs {
    /// `grants.csv`.
    pub grants: CsvLog,
    /// `resource.csv`.
    pub resource: CsvLog,
    /// `faults.csv`.
    pub faults: CsvLog,
    /// `grants.csv` has the `share` column.
    shares: bool,
}

impl RunLogs {
    /// Creates all three in `dir`, each with its header: `grants.csv` with the `share` column
    /// unless the run's `primitive` is the mutex.
    pub fn create(dir: &Path, primitive: Primitive) -> anyhow::Result<Self> {
        let shares = !primitive.is_mutex();
        let header = if shares { GRANTS_SHARE_CSV_HEADER } else { GRANTS_CSV_HEADER };
        Ok(RunLogs {
            shares,
            grants: CsvLog::create(&dir.join("grants.csv"), header)?,
            resource: CsvLog::create(&dir.join("resource.csv"), RESOURCE_CSV_HEADER)?,
            faults: CsvLog::create(&dir.join("faults.csv"), FAULTS_CSV_HEADER)?,
        })
    }

    /// Appends one algorithm's logs.
    pub fn append(&self, outcome: &crate::measure::log::RunOutcome) -> anyhow::Result<()> {
        let name = outcome.algorithm;
        let line = if self.shares { grant_share_line } else { grant_line };
        self.grants.append(name, outcome.grants.iter(), line)?;
        self.resource.append(name, outcome.resource.iter(), resource_line)?;
        self.faults.append(name, outcome.faults.iter().cloned(), fault_line)
    }
}

/// Reads a CSV line by line after checking its header, one of `headers` (each with its
/// number of fields): calls `visit` with the index of the header found, each line's number
/// and its fields. What it holds is one line, whatever the file's length.
fn each_csv_row(
    name: &str,
    headers: &[(&str, usize)],
    mut input: impl BufRead,
    mut visit: impl FnMut(usize, usize, &[&str]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut line = String::new();
    let mut read = |line: &mut String, number: usize| -> anyhow::Result<bool> {
        line.clear();
        let n =
            input.read_line(line).with_context(|| format!("cannot read {name} line {number}"))?;
        // As `str::lines`: without its "\n" or "\r\n".
        if line.ends_with('\n') {
            line.pop();
            if line.ends_with('\r') {
                line.pop();
            }
        }
        Ok(n > 0)
    };
    read(&mut line, 1)?;
    let Some(kind) = headers.iter().position(|(h, _)| *h == line) else {
        let expected = headers.first().map_or("", |(h, _)| h);
        anyhow::bail!("unexpected {name} header: {line:?} (expected {expected:?})");
    };
    let fields = headers[kind].1;
    let mut number = 1;
    loop {
        number += 1;
        if !read(&mut line, number)? {
            return Ok(());
        }
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        anyhow::ensure!(
            f.len() == fields,
            "{name} line {number}: expected {fields} fields, found {}",
            f.len()
        );
        visit(kind, number, &f)?;
    }
}

fn field<T: std::str::FromStr>(name: &str, line: usize, f: &[&str], k: usize) -> anyhow::Result<T> {
    f[k].parse::<T>().map_err(|_| {
        anyhow::anyhow!("{name} line {line}: field {} ({:?}) is not valid", k + 1, f[k])
    })
}

/// Reads a `grants.csv`, with or without the `share` column, a line at a time: `visit` gets
/// each row's algorithm and grant.
pub fn each_grant_row(
    input: impl BufRead,
    mut visit: impl FnMut(&str, Grant),
) -> anyhow::Result<()> {
    let name = "grants.csv";
    let headers = [(GRANTS_CSV_HEADER, 9), (GRANTS_SHARE_CSV_HEADER, 10)];
    each_csv_row(name, &headers, input, |kind, l, f| {
        let shares = kind == 1;
        let grant = Grant {
            lock: field(name, l, f, 1)?,
            contender: field(name, l, f, 2)?,
            requested_us: field(name, l, f, 3)?,
            granted_us: field(name, l, f, 4)?,
            released_us: field(name, l, f, 5)?,
            token: field(name, l, f, 6)?,
            lease_lost: field(name, l, f, 7)?,
            crashed: field(name, l, f, 8)?,
            queued_us: None,
            share: if shares { field(name, l, f, 9)? } else { Share::Exclusive },
        };
        visit(f[0], grant);
        Ok(())
    })
}

/// Reads a `resource.csv` a line at a time: `visit` gets each row's algorithm and write.
pub fn each_resource_row(
    input: impl BufRead,
    mut visit: impl FnMut(&str, ResourceWrite),
) -> anyhow::Result<()> {
    let name = "resource.csv";
    each_csv_row(name, &[(RESOURCE_CSV_HEADER, 6)], input, |_, l, f| {
        let write = ResourceWrite {
            lock: field(name, l, f, 1)?,
            contender: field(name, l, f, 2)?,
            token: field(name, l, f, 3)?,
            at_us: field(name, l, f, 4)?,
            accepted: field(name, l, f, 5)?,
        };
        visit(f[0], write);
        Ok(())
    })
}

/// Reads a `faults.csv` back: `(algorithm, window)` rows.
pub fn read_faults_csv(input: impl BufRead) -> anyhow::Result<Vec<(String, FaultWindow)>> {
    let name = "faults.csv";
    let mut rows = Vec::new();
    each_csv_row(name, &[(FAULTS_CSV_HEADER, 5)], input, |_, l, f| {
        let window = FaultWindow {
            kind: f[1].to_string(),
            target: f[2].to_string(),
            start_us: field(name, l, f, 3)?,
            end_us: field(name, l, f, 4)?,
        };
        rows.push((f[0].to_string(), window));
        Ok(())
    })?;
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_grants_csv(text: &str) -> anyhow::Result<Vec<(String, Grant)>> {
        let mut rows = Vec::new();
        each_grant_row(text.as_bytes(), |a, g| rows.push((a.to_string(), g)))?;
        Ok(rows)
    }

    #[test]
    fn grants_csv_round_trips() {
        let dir = std::env::temp_dir().join(format!("bench-harness-csv-{}", std::process::id()));
        prepare_dir(&dir).unwrap();
        let csv = CsvLog::create(&dir.join("grants.csv"), GRANTS_CSV_HEADER).unwrap();
        let g = Grant {
            lock: 1,
            contender: 2,
            requested_us: 3,
            granted_us: 4,
            released_us: 5,
            token: 6,
            lease_lost: true,
            crashed: false,
            queued_us: None,
            share: Share::Exclusive,
        };
        csv.append("queue", [g], grant_line).unwrap();
        csv.append("shadow", [g, g], grant_line).unwrap();
        let text = fs::read_to_string(csv.path()).unwrap();
        assert!(text.starts_with(&format!("{GRANTS_CSV_HEADER}\nqueue,1,2,3,4,5,6,true,false\n")));
        let back = read_grants_csv(&text).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2], ("shadow".to_string(), g));
        // A reader-writer run's file has the share column, and reads back with it.
        let shared = |share| Grant { share, ..g };
        let rows =
            [shared(Share::Read), shared(Share::Write), shared(Share::Permits { held: 2, of: 4 })];
        let text = format!(
            "{GRANTS_SHARE_CSV_HEADER}\n{}",
            rows.iter().map(|g| format!("queue,{}\n", grant_share_line(g))).collect::<String>()
        );
        assert!(text.contains("queue,1,2,3,4,5,6,true,false,r\n"), "{text}");
        let back: Vec<Grant> =
            read_grants_csv(&text).unwrap().into_iter().map(|(_, g)| g).collect();
        assert_eq!(back, rows);
        let w = ResourceWrite { lock: 0, contender: 3, token: 9, at_us: 12, accepted: false };
        let text = format!("{RESOURCE_CSV_HEADER}\nlwt,{}\n", resource_line(&w));
        let mut back = Vec::new();
        each_resource_row(text.as_bytes(), |a, w| back.push((a.to_string(), w))).unwrap();
        assert_eq!(back, [("lwt".to_string(), w)]);
        let f =
            FaultWindow { kind: "pause".into(), target: "c0001".into(), start_us: 1, end_us: 2 };
        let text = format!("{FAULTS_CSV_HEADER}\nq,{}\n", fault_line(&f));
        assert_eq!(read_faults_csv(text.as_bytes()).unwrap(), [("q".to_string(), f)]);
        let e = read_grants_csv(&format!("{GRANTS_CSV_HEADER}\nq,1,2\n")).unwrap_err();
        assert!(e.to_string().contains("line 2: expected 9 fields"), "{e}");
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn unwritable_directories_are_reported() {
        let file = std::env::temp_dir().join(format!("bench-harness-file-{}", std::process::id()));
        fs::write(&file, b"x").unwrap();
        let e = prepare_dir(&file.join("sub")).unwrap_err();
        assert!(format!("{e:#}").contains("cannot create the output directory"), "{e:#}");
        let _ = fs::remove_file(file);
    }
}
