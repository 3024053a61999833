//! A log of fixed-size records kept on disk instead of in memory: appended while a run goes
//! on, read back in order as often as the analysis and the CSV files need.
//!
//! A [`Spool`] writes each record through a buffer into an anonymous temporary file (one the
//! file system removes when the last handle closes, so nothing is left behind, even after a
//! crash). [`Spool::finish`] flushes it and hands over a [`Spooled`]: the file and the number
//! of records, which any number of readers iterate at once, each reading the file by offset
//! in blocks. What the log holds in memory is one buffer, whatever the run's length.
//!
//! The first write that fails is kept, the later records dropped, and [`Spool::finish`]
//! returns that error: a run never reports a log with records silently missing.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::marker::PhantomData;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// A record of a fixed size in bytes.
pub trait Record: Sized {
    /// Its size.
    const SIZE: usize;
    /// Appends its `SIZE` bytes to `out`.
    fn put(&self, out: &mut Vec<u8>);
    /// Reads it back from `SIZE` bytes.
    fn get(bytes: &[u8]) -> Self;
}

/// The little-endian `u64` at `at` of a record's bytes.
pub fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The little-endian `u32` at `at` of a record's bytes.
pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// Records per block read back at once.
const BLOCK_RECORDS: usize = 4096;

/// Records an external sort ([`sorted`]) sorts in memory at once: each of its runs.
const SORT_RUN_RECORDS: usize = 1 << 15;

/// Records per block a merge ([`sorted`]) reads from each run: a block per run is what the
/// merge holds, and a long log has many runs.
const MERGE_BLOCK_RECORDS: usize = 256;

/// A log being written.
#[derive(Debug)]
pub struct Spool<T> {
    /// Created at the first record; `None` before, or once a write failed.
    out: Option<BufWriter<File>>,
    len: u64,
    error: Option<std::io::Error>,
    scratch: Vec<u8>,
    _records: PhantomData<T>,
}

impl<T> Default for Spool<T> {
    fn default() -> Self {
        Spool { out: None, len: 0, error: None, scratch: Vec::new(), _records: PhantomData }
    }
}

impl<T: Record> Spool<T> {
    /// An empty log (its file is created at the first record).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one record.
    pub fn push(&mut self, record: &T) {
        if self.error.is_some() {
            return;
        }
        self.scratch.clear();
        record.put(&mut self.scratch);
        debug_assert_eq!(self.scratch.len(), T::SIZE);
        if let Err(e) = self.write_scratch() {
            self.error = Some(e);
            self.out = None;
            return;
        }
        self.len += 1;
    }

    fn write_scratch(&mut self) -> std::io::Result<()> {
        let writer = match &mut self.out {
            Some(writer) => writer,
            None => self.out.insert(BufWriter::with_capacity(1 << 16, tempfile::tempfile()?)),
        };
        writer.write_all(&self.scratch)
    }

    /// The records written, ready to read; the first write error if one failed.
    pub fn finish(self) -> std::io::Result<Spooled<T>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        // Flushed, and the file handed over for reading.
        let file = self.out.map(BufWriter::into_inner).transpose().map_err(|e| e.into_error())?;
        Ok(Spooled { file: file.map(Arc::new), len: self.len, _records: PhantomData })
    }
}

/// A finished log: its file and how many records it holds.
#[derive(Debug)]
pub struct Spooled<T> {
    file: Option<Arc<File>>,
    len: u64,
    _records: PhantomData<T>,
}

impl<T> Clone for Spooled<T> {
    fn clone(&self) -> Self {
        Spooled { file: self.file.clone(), len: self.len, _records: PhantomData }
    }
}

impl<T> Default for Spooled<T> {
    fn default() -> Self {
        Spooled { file: None, len: 0, _records: PhantomData }
    }
}

impl<T: Record> Spooled<T> {
    /// How many records it holds.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The records in the order written.
    ///
    /// # Panics
    ///
    /// When the temporary file cannot be read back: it was written and flushed whole by
    /// [`Spool::finish`], so this is a failing disk, which no figure of the run can survive.
    pub fn iter(&self) -> impl Iterator<Item = T> + Clone + '_ {
        self.iter_by(BLOCK_RECORDS)
    }

    /// [`Spooled::iter`], reading `block_records` records at a time.
    fn iter_by(&self, block_records: usize) -> impl Iterator<Item = T> + Clone + '_ {
        let mut block = Vec::new();
        let mut at = 0usize;
        let mut next = 0u64;
        std::iter::from_fn(move || {
            if next == self.len {
                return None;
            }
            if at == block.len() {
                let file = self.file.as_ref()?;
                let records = (self.len - next).min(block_records as u64) as usize;
                block.resize(records * T::SIZE, 0);
                file.read_exact_at(&mut block, next * T::SIZE as u64).unwrap_or_else(|e| {
                    panic!("cannot read back a run's log from its temporary file: {e}")
                });
                at = 0;
            }
            let record = T::get(&block[at..at + T::SIZE]);
            at += T::SIZE;
            next += 1;
            Some(record)
        })
    }
}

/// `records` in the order of `key`, on disk; records equal by `key` keep the order they came
/// in. An external merge sort: the records are cut into runs of a fixed size, each sorted in
/// memory and spooled, then the runs are merged a block of each at a time. So the sort holds
/// one run, or one block per run, whatever the number of records.
pub fn sorted<T: Record, K: Ord>(
    records: impl IntoIterator<Item = T>,
    key: impl Fn(&T) -> K,
) -> std::io::Result<Spooled<T>> {
    let mut records = records.into_iter().peekable();
    let mut runs = Vec::new();
    // One buffer for every run, allocated once at the size the first run needs.
    let mut run: Vec<T> = Vec::new();
    loop {
        run.clear();
        run.extend(records.by_ref().take(SORT_RUN_RECORDS));
        run.sort_by_key(&key);
        let mut spool = Spool::new();
        for r in &run {
            spool.push(r);
        }
        runs.push(spool.finish()?);
        if records.peek().is_none() {
            break;
        }
    }
    drop(run);
    if runs.len() == 1 {
        return Ok(runs.pop().expect("one run"));
    }
    let mut readers: Vec<_> = runs.iter().map(|r| r.iter_by(MERGE_BLOCK_RECORDS)).collect();
    let mut heads: Vec<Option<T>> = readers.iter_mut().map(Iterator::next).collect();
    // The runs' next keys, smallest first; equal keys by run, so the merge is stable.
    let mut next: BinaryHeap<Reverse<(K, usize)>> = heads
        .iter()
        .enumerate()
        .filter_map(|(i, h)| h.as_ref().map(|r| Reverse((key(r), i))))
        .collect();
    let mut out = Spool::new();
    while let Some(Reverse((_, i))) = next.pop() {
        let record = heads[i].take().expect("a run in the heap has a head");
        out.push(&record);
        if let Some(r) = readers[i].next() {
            next.push(Reverse((key(&r), i)));
            heads[i] = Some(r);
        }
    }
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Record for (u32, u64) {
        const SIZE: usize = 12;
        fn put(&self, out: &mut Vec<u8>) {
            out.extend(self.0.to_le_bytes());
            out.extend(self.1.to_le_bytes());
        }
        fn get(b: &[u8]) -> Self {
            (
                u32::from_le_bytes(b[..4].try_into().unwrap()),
                u64::from_le_bytes(b[4..12].try_into().unwrap()),
            )
        }
    }

    /// `records`, spooled.
    fn spooled<T: Record>(records: impl IntoIterator<Item = T>) -> std::io::Result<Spooled<T>> {
        let mut spool = Spool::new();
        for r in records {
            spool.push(&r);
        }
        spool.finish()
    }

    #[test]
    fn records_come_back_in_order_across_blocks_and_to_several_readers() {
        let records: Vec<(u32, u64)> =
            (0..3 * BLOCK_RECORDS as u32 + 7).map(|i| (i, u64::MAX - u64::from(i))).collect();
        let spooled = spooled(records.iter().copied()).unwrap();
        assert_eq!(spooled.len(), records.len() as u64);
        let again = spooled.clone();
        let mut a = spooled.iter();
        let mut b = again.iter();
        for r in &records {
            assert_eq!((a.next(), b.next()), (Some(*r), Some(*r)));
        }
        assert_eq!((a.next(), b.next()), (None, None));
        assert_eq!(spooled.iter().collect::<Vec<_>>(), records);
    }

    #[test]
    fn an_external_sort_is_a_stable_sort_over_any_number_of_runs() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for n in [0, 1, 5, SORT_RUN_RECORDS, SORT_RUN_RECORDS + 1, 3 * SORT_RUN_RECORDS + 17] {
            // Few distinct keys, so most records tie; the second field is the arrival order.
            let records: Vec<(u32, u64)> =
                (0..n as u64).map(|i| (rng.random_range(0..50), i)).collect();
            let mut expected = records.clone();
            expected.sort_by_key(|r| r.0);
            let sorted = sorted(records, |r| r.0).unwrap();
            assert_eq!(sorted.len(), n as u64);
            assert!(sorted.iter().eq(expected), "{n} records");
        }
    }

    #[test]
    fn a_failed_write_is_the_logs_error() {
        let full = File::options().write(true).open("/dev/full").unwrap();
        let mut spool = Spool::<(u32, u64)>::new();
        spool.out = Some(BufWriter::new(full));
        for i in 0..10 {
            spool.push(&(i, 0));
        }
        let e = spool.finish().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::StorageFull, "{e}");
    }

    #[test]
    fn an_empty_log_has_no_file_and_reads_nothing() {
        let spooled = Spool::<(u32, u64)>::new().finish().unwrap();
        assert!(spooled.is_empty() && spooled.file.is_none());
        assert_eq!(spooled.iter().count(), 0);
        assert_eq!(Spooled::<(u32, u64)>::default().iter().count(), 0);
    }
}
