//! An append-only log held in chunks of a fixed size, for the records a run piles up as it
//! goes (each contender's grants).
//!
//! A `Vec` grown by pushes doubles its buffer: it holds up to twice its records, half again
//! as many on average, and copies all of them at each doubling, while both buffers are
//! alive. Chunks are never copied and never more than one is part-filled, so a log holds its
//! records plus at most one chunk. [`ChunkedLog::concat`] hands several logs' records over as
//! one `Vec` of exactly their number, freeing each chunk as soon as it is moved: at no moment are
//! the records held twice over, save one chunk.

/// An append-only log in chunks of `CHUNK` records.
#[derive(Debug, Clone)]
pub struct ChunkedLog<T, const CHUNK: usize> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T, const CHUNK: usize> Default for ChunkedLog<T, CHUNK> {
    fn default() -> Self {
        ChunkedLog { chunks: Vec::new(), len: 0 }
    }
}

impl<T, const CHUNK: usize> ChunkedLog<T, CHUNK> {
    /// An empty log (it allocates at its first record).
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends one record.
    pub fn push(&mut self, record: T) {
        match self.chunks.last_mut() {
            Some(last) if last.len() < CHUNK => last.push(record),
            _ => {
                let mut chunk = Vec::with_capacity(CHUNK);
                chunk.push(record);
                self.chunks.push(chunk);
            }
        }
        self.len += 1;
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Several logs' records one log after the other, in one `Vec` of exactly their number;
    /// each chunk is freed once moved.
    pub fn concat(logs: Vec<Self>) -> Vec<T> {
        let mut out = Vec::with_capacity(logs.iter().map(Self::len).sum());
        for chunk in logs.into_iter().flat_map(|log| log.chunks) {
            out.extend(chunk);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_come_back_in_order_across_chunks() {
        let mut log: ChunkedLog<u32, 4> = ChunkedLog::new();
        assert!(log.is_empty());
        for i in 0..10 {
            log.push(i);
        }
        assert_eq!(log.len(), 10);
        assert_eq!(log.chunks.len(), 3, "4 + 4 + 2");
        assert!(log.chunks.iter().all(|c| c.capacity() == 4), "no chunk grows past its size");
        let v = ChunkedLog::concat(vec![log]);
        assert_eq!(v, (0..10).collect::<Vec<_>>());
        assert_eq!(v.capacity(), 10, "exactly the records' number");
    }

    #[test]
    fn logs_concatenate_in_order_into_one_exact_vec() {
        let mut a: ChunkedLog<u32, 3> = ChunkedLog::new();
        let mut b = ChunkedLog::new();
        let empty = ChunkedLog::new();
        (0..5).for_each(|i| a.push(i));
        (5..7).for_each(|i| b.push(i));
        let all = ChunkedLog::concat(vec![a, empty, b]);
        assert_eq!(all, (0..7).collect::<Vec<_>>());
        assert_eq!(all.capacity(), 7);
    }
}
