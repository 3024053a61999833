//! The log's file format: segments of records, zero-filled before use, overwritten in place
//! and synced with `fdatasync`, the way etcd's WAL and ZooKeeper's transaction log keep theirs.
//!
//! **Why not redb for the entries.** The fsync is most of a commit, and what it costs grows
//! with what it must write. redb writes several pages of its B-tree and its header per
//! commit; an overwrite in a file whose blocks and size are already on disk writes one block
//! and no metadata. redb keeps the rest (vote,
//! committed index, purge point, snapshot): they change rarely.
//!
//! **Format.** A segment `wal-<seq>.log` is a run of records `[len: u32][crc32: u32][body]`,
//! little-endian, then zeros. The body is a kind byte and its data: an entry (its JSON), or a
//! truncation (the first index removed). The CRC covers the body.
//!
//! **Why it is as safe as redb.**
//! - A record is acknowledged only after `fdatasync` of every segment it touched returns. A
//!   segment's blocks and size were synced when it was made, and it is renamed into place only
//!   then (and the directory synced). So an acknowledged record survives a crash.
//! - A crash mid-write can damage only the last batch, which was never acknowledged (the
//!   batches before it were synced). Reading stops at the first record whose length is zero
//!   or whose CRC fails. What follows it in the last segment is that batch's: it is zeroed
//!   (so none of its records can come back behind shorter ones written over it later), and
//!   writing goes on from there.
//! - Damage in a segment before the last cannot come from a crash: it is refused at start,
//!   naming the segment, never skipped.
//! - Replaying in order, an entry at index `i` replaces any entry at `i` or later, and a
//!   truncation at `i` removes them; this rebuilds the log openraft last saw. Entries up to
//!   the purge point (kept in redb, written durably before any segment is deleted) are
//!   skipped.

use crate::raft::{NodeId, TypeConfig};
use openraft::{Entry, LogId};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes of a new segment. Entries are some hundred bytes: tens of thousands per segment.
pub const SEGMENT_BYTES: u64 = 8 << 20;

const HEADER: usize = 8;
const ENTRY: u8 = 1;
const TRUNCATE: u8 = 2;

/// A segment: its file, where the next record goes, and a bound on the entries it holds.
struct Segment {
    seq: u64,
    file: File,
    len: u64,
    end: u64,
    /// No live entry in it has a greater index (`None`: it holds no entry). A bound, not
    /// the exact last index: a purge deletes the segment only once it is `<=` the purge
    /// point, so a bound too high only keeps the file longer.
    last_index: Option<u64>,
}

/// `last`, the bound of a segment's entries, after the entries from `from` on are gone:
/// those before `from` that it may hold stay.
fn truncated(last: Option<u64>, from: u64) -> Option<u64> {
    last.map(|i| i.min(from.saturating_sub(1)))
}

/// The write-ahead log of a data directory.
pub struct Wal {
    dir: PathBuf,
    /// Bytes of a new segment.
    segment_bytes: u64,
    /// Sealed segments first, the one written to last.
    segments: Vec<Segment>,
    /// Segments written since the last [`Wal::sync`].
    dirty: Vec<u64>,
}

/// What a data directory's log held when it was opened.
pub type Recovered = BTreeMap<u64, Entry<TypeConfig>>;

impl Wal {
    /// Open `dir`'s log, read every record (skipping entries up to `purged`), and make it
    /// ready to append; an error names a damaged segment.
    pub fn open(dir: &Path, purged: Option<LogId<NodeId>>) -> Result<(Wal, Recovered), String> {
        Wal::open_with(dir, purged, SEGMENT_BYTES)
    }

    /// [`Wal::open`], making new segments of `segment_bytes`.
    fn open_with(
        dir: &Path,
        purged: Option<LogId<NodeId>>,
        segment_bytes: u64,
    ) -> Result<(Wal, Recovered), String> {
        let mut seqs = Vec::new();
        for item in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let name = item.map_err(|e| e.to_string())?.file_name();
            let name = name.to_string_lossy();
            if let Some(seq) = name.strip_prefix("wal-").and_then(|s| s.strip_suffix(".log")) {
                seqs.push(seq.parse::<u64>().map_err(|_| format!("unexpected file {name}"))?);
            } else if name.starts_with("wal-") && name.ends_with(".tmp") {
                // A segment being made when the node stopped: never used.
                let _ = std::fs::remove_file(dir.join(&*name));
            }
        }
        seqs.sort_unstable();
        let floor = purged.map_or(0, |p| p.index + 1);
        let mut entries = Recovered::new();
        let mut segments = Vec::new();
        for (i, seq) in seqs.iter().enumerate() {
            let last = i + 1 == seqs.len();
            segments.push(read_segment(dir, *seq, last, floor, &mut entries)?);
        }
        let mut wal = Wal { dir: dir.to_path_buf(), segment_bytes, segments, dirty: Vec::new() };
        if wal.segments.is_empty() {
            wal.add_segment(0, segment_bytes)?;
        }
        Ok((wal, entries))
    }

    /// Write `entries` (not yet synced).
    pub fn append(&mut self, entries: &[Entry<TypeConfig>]) -> Result<(), String> {
        for entry in entries {
            let json = serde_json::to_vec(entry).map_err(|e| e.to_string())?;
            self.record(ENTRY, &json, Some(entry.log_id.index))?;
        }
        Ok(())
    }

    /// Write that the entries from `from` on are gone (not yet synced).
    pub fn truncate(&mut self, from: u64) -> Result<(), String> {
        self.record(TRUNCATE, &from.to_le_bytes(), None)?;
        for segment in &mut self.segments {
            segment.last_index = truncated(segment.last_index, from);
        }
        Ok(())
    }

    /// Delete the segments that hold nothing after `upto` (whose purge point is already on
    /// disk); the segment written to is kept.
    pub fn purge(&mut self, upto: u64) -> Result<(), String> {
        while self.segments.len() > 1 && self.segments[0].last_index.is_none_or(|i| i <= upto) {
            let segment = self.segments.remove(0);
            std::fs::remove_file(self.dir.join(segment_name(segment.seq)))
                .map_err(|e| format!("cannot remove {}: {e}", segment_name(segment.seq)))?;
        }
        Ok(())
    }

    /// Make every record written so far durable.
    pub fn sync(&mut self) -> Result<(), String> {
        for seq in std::mem::take(&mut self.dirty) {
            if let Some(s) = self.segments.iter().find(|s| s.seq == seq) {
                s.file.sync_data().map_err(|e| format!("{}: {e}", segment_name(seq)))?;
            }
        }
        Ok(())
    }

    /// Append one record to the last segment, or to a new one when it does not fit.
    fn record(&mut self, kind: u8, data: &[u8], index: Option<u64>) -> Result<(), String> {
        let mut buf = Vec::with_capacity(HEADER + 1 + data.len());
        let body_len = 1 + data.len();
        buf.extend_from_slice(&(body_len as u32).to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&[kind]);
        crc.update(data);
        buf.extend_from_slice(&crc.finalize().to_le_bytes());
        buf.push(kind);
        buf.extend_from_slice(data);
        // Room for the record and a zero length after it, so a reader always finds an end.
        let need = buf.len() as u64 + 4;
        let last = self.segments.last().expect("a segment is always open");
        if last.end + need > last.len {
            let seq = last.seq + 1;
            self.add_segment(seq, self.segment_bytes.max(need))?;
        }
        let segment = self.segments.last_mut().expect("a segment is always open");
        segment
            .file
            .write_all_at(&buf, segment.end)
            .map_err(|e| format!("{}: {e}", segment_name(segment.seq)))?;
        segment.end += buf.len() as u64;
        if let Some(i) = index {
            segment.last_index = Some(i);
        }
        if !self.dirty.contains(&segment.seq) {
            self.dirty.push(segment.seq);
        }
        Ok(())
    }

    /// Make segment `seq` of `len` zero bytes, durably, and write to it from now on.
    fn add_segment(&mut self, seq: u64, len: u64) -> Result<(), String> {
        let name = segment_name(seq);
        let fail = |e: std::io::Error| format!("cannot make {name}: {e}");
        let tmp = self.dir.join(format!("wal-{seq:020}.tmp"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(fail)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < len {
            let n = zeros.len().min((len - at) as usize);
            file.write_all_at(&zeros[..n], at).map_err(fail)?;
            at += n as u64;
        }
        file.sync_all().map_err(fail)?;
        std::fs::rename(&tmp, self.dir.join(&name)).map_err(fail)?;
        File::open(&self.dir).and_then(|d| d.sync_all()).map_err(fail)?;
        self.segments.push(Segment { seq, file, len, end: 0, last_index: None });
        Ok(())
    }
}

fn segment_name(seq: u64) -> String {
    format!("wal-{seq:020}.log")
}

/// Read segment `seq` into `entries`; `last` says whether a damaged tail may be a crash's.
fn read_segment(
    dir: &Path,
    seq: u64,
    last: bool,
    floor: u64,
    entries: &mut Recovered,
) -> Result<Segment, String> {
    let name = segment_name(seq);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(dir.join(&name))
        .map_err(|e| format!("{name}: {e}"))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| format!("{name}: {e}"))?;
    let mut at = 0usize;
    let mut last_index = None;
    while let Some((kind, data, next)) = parse(&bytes, at) {
        match kind {
            ENTRY => {
                let entry: Entry<TypeConfig> = serde_json::from_slice(data)
                    .map_err(|e| format!("{name}: unreadable entry at byte {at}: {e}"))?;
                let index = entry.log_id.index;
                entries.split_off(&index);
                if index >= floor {
                    entries.insert(index, entry);
                }
                last_index = Some(index);
            }
            TRUNCATE => {
                let from = u64::from_le_bytes(
                    data.try_into()
                        .map_err(|_| format!("{name}: damaged truncation record at byte {at}"))?,
                );
                entries.split_off(&from);
                last_index = truncated(last_index, from);
            }
            other => return Err(format!("{name}: unknown record kind {other} at byte {at}")),
        }
        at = next;
    }
    // Where reading stopped: the end of the records, or a damaged one.
    let rest = &bytes[at.min(bytes.len())..];
    if rest.iter().any(|&b| b != 0) {
        if !last {
            return Err(format!(
                "{name}: damaged record at byte {at}, and later segments exist: the log is \
                 corrupt (restore this node's directory, or give it a new id and an empty one)"
            ));
        }
        // The last batch, torn by a crash before its sync: never acknowledged. Zero it, so
        // that no record of it comes back behind the shorter ones written over it.
        tracing::warn!("{name}: dropping a torn tail from byte {at} (never acknowledged)");
        let zeros = vec![0u8; rest.len()];
        file.write_all_at(&zeros, at as u64).map_err(|e| format!("{name}: {e}"))?;
        file.sync_data().map_err(|e| format!("{name}: {e}"))?;
    }
    let len = bytes.len() as u64;
    Ok(Segment { seq, file, len, end: at as u64, last_index })
}

/// The record at `at`: its kind, data and where the next begins; `None` at the end (a zero
/// length) or at a damaged record.
fn parse(bytes: &[u8], at: usize) -> Option<(u8, &[u8], usize)> {
    let header = bytes.get(at..at + HEADER)?;
    let len = u32::from_le_bytes(header[..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..].try_into().ok()?);
    if len == 0 {
        return None;
    }
    let body = bytes.get(at + HEADER..at + HEADER + len)?;
    (crc32fast::hash(body) == crc).then(|| (body[0], &body[1..], at + HEADER + len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Command;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 0), index),
            payload: EntryPayload::Normal(Command::Close { session: index, by: None }),
        }
    }

    /// Segments small enough for a test to fill several.
    const SMALL: u64 = 4096;

    /// Append entries of term 1 from index 1 until a second segment begins; the last index.
    fn fill_into_a_second_segment(wal: &mut Wal) -> u64 {
        let mut last = 0;
        while wal.segments.len() < 2 {
            last += 1;
            wal.append(&[entry(1, last)]).unwrap();
        }
        last
    }

    fn indexes(r: &Recovered) -> Vec<(u64, u64)> {
        r.values().map(|e| (e.log_id.leader_id.term, e.log_id.index)).collect()
    }

    #[test]
    fn entries_truncations_and_purges_come_back_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, found) = Wal::open(dir.path(), None).unwrap();
        assert!(found.is_empty());
        wal.append(&(1..=5).map(|i| entry(1, i)).collect::<Vec<_>>()).unwrap();
        wal.truncate(4).unwrap();
        wal.append(&[entry(2, 4)]).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, found) = Wal::open(dir.path(), None).unwrap();
        assert_eq!(indexes(&found), [(1, 1), (1, 2), (1, 3), (2, 4)]);
        let purged = LogId::new(CommittedLeaderId::new(1, 0), 2);
        let (_, found) = Wal::open(dir.path(), Some(purged)).unwrap();
        assert_eq!(indexes(&found), [(1, 3), (2, 4)]);
    }

    #[test]
    fn a_full_segment_goes_on_in_a_new_one_and_purging_deletes_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open_with(dir.path(), None, SMALL).unwrap();
        let per_entry = serde_json::to_vec(&entry(1, 1)).unwrap().len() as u64 + 9;
        let count = SMALL / per_entry * 2 + 10;
        for i in 1..=count {
            wal.append(&[entry(1, i)]).unwrap();
        }
        wal.sync().unwrap();
        assert_eq!(wal.segments.len(), 3);
        wal.purge(count - 5).unwrap();
        assert_eq!(wal.segments.len(), 1, "only the segment written to is left");
        drop(wal);
        let purged = LogId::new(CommittedLeaderId::new(1, 0), count - 5);
        let (_, found) = Wal::open(dir.path(), Some(purged)).unwrap();
        assert_eq!(
            found.keys().copied().collect::<Vec<_>>(),
            (count - 4..=count).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_purge_keeps_a_truncated_segment_that_still_holds_entries_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open_with(dir.path(), None, SMALL).unwrap();
        let last = fill_into_a_second_segment(&mut wal);
        // A new leader cuts the log inside the first segment and writes on in the second.
        let from = last - 3;
        wal.truncate(from).unwrap();
        wal.append(&[entry(2, from), entry(2, from + 1)]).unwrap();
        wal.sync().unwrap();
        wal.purge(3).unwrap();
        drop(wal);
        let purged = LogId::new(CommittedLeaderId::new(1, 0), 3);
        for reopened in 1..=2 {
            let (mut wal, found) = Wal::open_with(dir.path(), Some(purged), SMALL).unwrap();
            let held: Vec<u64> = found.keys().copied().collect();
            assert_eq!(held, (4..=from + 1).collect::<Vec<_>>(), "reopened {reopened} times");
            assert_eq!(found[&(from - 1)].log_id.leader_id.term, 1);
            assert_eq!(found[&from].log_id.leader_id.term, 2);
            // The bound read back from the segments must keep the first one too.
            wal.purge(3).unwrap();
        }
    }

    #[test]
    fn a_torn_last_record_is_dropped_and_written_over() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path(), None).unwrap();
        wal.append(&[entry(1, 1), entry(1, 2)]).unwrap();
        wal.sync().unwrap();
        let end = wal.segments[0].end;
        drop(wal);
        // Tear the second record: its last byte never reached the disk.
        let file = OpenOptions::new().write(true).open(dir.path().join(segment_name(0))).unwrap();
        file.write_all_at(&[0], end - 1).unwrap();
        let (mut wal, found) = Wal::open(dir.path(), None).unwrap();
        assert_eq!(found.keys().copied().collect::<Vec<_>>(), [1]);
        wal.append(&[entry(1, 2), entry(1, 3)]).unwrap();
        wal.sync().unwrap();
        drop(wal);
        let (_, found) = Wal::open(dir.path(), None).unwrap();
        assert_eq!(found.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
    }

    #[test]
    fn damage_in_a_segment_before_the_last_is_refused_not_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open_with(dir.path(), None, SMALL).unwrap();
        fill_into_a_second_segment(&mut wal);
        wal.sync().unwrap();
        drop(wal);
        let file = OpenOptions::new().write(true).open(dir.path().join(segment_name(0))).unwrap();
        file.write_all_at(&[0xff], HEADER as u64 + 3).unwrap();
        let err = Wal::open(dir.path(), None).err().expect("refused");
        assert!(err.contains("corrupt") && err.contains(&segment_name(0)), "{err}");
    }
}
