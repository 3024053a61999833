//! The file a store keeps its rows' older dead cells in, as Cassandra keeps its tombstones in
//! SSTables ([`super::row`] seals chunks of them into it): blocks of bytes written once, at
//! offsets handed out in turn, and read back by offset, so that a store holding hours of
//! tombstones costs the memory of one holding minutes.
//!
//! The file is anonymous, created where `TMPDIR` points at the first block written: the file
//! system removes it when the store is dropped, or the process ends, whatever way it ends
//! (on a tmpfs it is memory again, outside the process). When it cannot be created or
//! written, [`Spill::write`] says so and the caller keeps the block in memory: nothing is
//! lost, the store only uses more memory, and the first error is kept ([`Spill::error`]). A
//! block that cannot be read back is a failing disk that no answer of the store could
//! survive: that panics.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The file, shared by every replica of one store.
#[derive(Debug, Default)]
pub(super) struct Spill {
    file: OnceLock<Option<File>>,
    /// Where the next block goes.
    end: AtomicU64,
    /// Set once a write failed: blocks stay in memory from then on.
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

    /// Writes `bytes` as one block; its offset, or `None` when the file cannot take it (the
    /// caller keeps what it holds in memory).
    pub fn write(&self, bytes: &[u8]) -> Option<u64> {
        if self.failed.load(Ordering::Acquire) {
            return None;
        }
        let file = self.file()?;
        let at = self.end.fetch_add(bytes.len() as u64, Ordering::AcqRel);
        match file.write_all_at(bytes, at) {
            Ok(()) => Some(at),
            Err(e) => {
                self.fail("write", &e);
                None
            }
        }
    }

    /// The block of `len` bytes written at `at`.
    pub fn read(&self, at: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        let file = self.file.get().and_then(Option::as_ref);
        match file.map(|f| f.read_exact_at(&mut out, at)) {
            Some(Ok(())) => out,
            Some(Err(e)) => panic!("cannot read back sealed dead cells from their file: {e}"),
            None => panic!("a sealed chunk of dead cells without the file it was written to"),
        }
    }
}
