//! Dead cells kept on disk, as Cassandra keeps its tombstones in SSTables: a row's older
//! chunks of dead cells ([`super::row`]) are written to one file per store and dropped from
//! memory, so that a store holding hours of tombstones costs what one holding minutes does.
//!
//! A sealed chunk keeps in memory what ranks, bounds checks and compaction need without its
//! cells: its first and last columns, its length, and the earliest death among its cells.
//! Its cells are read back only when an operation must look inside it (a lookup or a rank
//! that falls between its bounds, a change to one of its cells, or a purge that may drop some
//! of them). Rows grow at their end (queue entries, ticket numbers), so the chunks sealed are
//! the ones nothing asks about again; only the row's last chunks stay in memory.
//!
//! The file is anonymous: the file system removes it when the store is dropped, or the
//! process ends, whatever way it ends. When it cannot be created or written, chunks stay in
//! memory (nothing is lost; the store only uses more memory), and the first error is kept
//! ([`Spill::error`]). A sealed chunk that cannot be read back is a failing disk that no
//! answer of the store could survive: that panics.

use super::row::{DeadAt, DeadCell};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The dead cells of one chunk: sorted by column.
pub(super) type Chunk = Vec<(Arc<str>, DeadCell)>;

/// The file sealed chunks are written to; one per store, created at the first chunk sealed.
#[derive(Debug, Default)]
pub(super) struct Spill {
    file: OnceLock<Option<File>>,
    /// Where the next chunk goes.
    end: AtomicU64,
    /// Set once a write failed: chunks stay in memory from then on.
    failed: AtomicBool,
    error: Mutex<Option<String>>,
}

impl Spill {
    /// A spill writing to `file` (a test's `/dev/full`, say) instead of a temporary file.
    #[cfg(test)]
    pub fn with_file(file: File) -> Self {
        let spill = Spill::default();
        spill.file.set(Some(file)).expect("a fresh spill has no file");
        spill
    }

    /// The first error met creating or writing the file, if any.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn fail(&self, what: &str, e: &std::io::Error) {
        self.failed.store(true, Ordering::Release);
        let mut error = self.error.lock().unwrap_or_else(|e| e.into_inner());
        error.get_or_insert_with(|| format!("cannot {what} the dead cells' file: {e}"));
    }

    fn file(&self) -> Option<&File> {
        self.file
            .get_or_init(|| tempfile::tempfile().map_err(|e| self.fail("create", &e)).ok())
            .as_ref()
    }

    /// Writes `chunk` (at least one cell) to the file; `None` when it cannot, and the chunk
    /// must stay in memory.
    pub fn seal(self: &Arc<Self>, chunk: &Chunk) -> Option<Sealed> {
        let (first, last) = (chunk.first()?, chunk.last()?);
        if self.failed.load(Ordering::Acquire) {
            return None;
        }
        let mut bytes = Vec::with_capacity(chunk.len() * 40);
        for (column, cell) in chunk {
            let name = column.as_bytes();
            bytes.extend(u32::try_from(name.len()).ok()?.to_le_bytes());
            bytes.extend_from_slice(name);
            bytes.extend(cell.timestamp.to_le_bytes());
            bytes.extend(cell.dead_at.nanos().to_le_bytes());
        }
        let at = self.end.fetch_add(bytes.len() as u64, Ordering::AcqRel);
        if let Err(e) = self.file()?.write_all_at(&bytes, at) {
            self.fail("write", &e);
            return None;
        }
        Some(Sealed {
            spill: Arc::clone(self),
            at,
            bytes: u32::try_from(bytes.len()).ok()?,
            len: chunk.len(),
            first: Arc::clone(&first.0),
            last: Arc::clone(&last.0),
            oldest: chunk.iter().map(|(_, c)| c.dead_at).min_by_key(|d| d.nanos())?,
        })
    }

    fn read(&self, at: u64, bytes: u32) -> Vec<u8> {
        let mut out = vec![0; bytes as usize];
        let file = self.file.get().and_then(Option::as_ref);
        let read = file.map(|f| f.read_exact_at(&mut out, at));
        match read {
            Some(Ok(())) => out,
            Some(Err(e)) => panic!("cannot read back sealed dead cells from their file: {e}"),
            None => panic!("a sealed chunk of dead cells without the file it was written to"),
        }
    }
}

/// A chunk of dead cells written to the [`Spill`]: what is known of it without reading it.
#[derive(Debug)]
pub(super) struct Sealed {
    spill: Arc<Spill>,
    at: u64,
    bytes: u32,
    /// How many cells it holds.
    pub len: usize,
    /// Its first column.
    pub first: Arc<str>,
    /// Its last column.
    pub last: Arc<str>,
    /// The earliest death among its cells: nothing in it is purgeable before this is.
    pub oldest: DeadAt,
}

impl Sealed {
    /// Its cells, read back from the file.
    pub fn load(&self) -> Chunk {
        let bytes = self.spill.read(self.at, self.bytes);
        let mut cells = Vec::with_capacity(self.len);
        let mut rest = &bytes[..];
        let mut take = |n: usize| {
            let (head, tail) = rest.split_at(n);
            rest = tail;
            head
        };
        let word = |b: &[u8]| <[u8; 8]>::try_from(b).expect("8 bytes");
        while cells.len() < self.len {
            let n = u32::from_le_bytes(take(4).try_into().expect("4 bytes")) as usize;
            let name = std::str::from_utf8(take(n)).expect("written from a str");
            let column: Arc<str> = if *name == *self.first {
                Arc::clone(&self.first)
            } else if *name == *self.last {
                Arc::clone(&self.last)
            } else {
                Arc::from(name)
            };
            let timestamp = i64::from_le_bytes(word(take(8)));
            let dead_at = DeadAt::from_nanos(i64::from_le_bytes(word(take(8))));
            cells.push((column, DeadCell { timestamp, dead_at }));
        }
        cells
    }
}
