//! One row on one replica: live cells, dead cells (tombstones and expired TTL cells), and the
//! bookkeeping that makes a read's tombstone count cheap.
//!
//! # Layout
//!
//! - `live`: the cells not dead as of the row's last access, in a `BTreeMap` by column.
//! - `expiries`: `(expiry, column)` of the live cells with a TTL. Every access first moves the
//!   cells whose expiry has passed from `live` to `dead` (an expired cell *is* a tombstone,
//!   with its own write timestamp). The store's instants never go backwards, so doing this
//!   lazily at each access is exact.
//! - `dead`: the dead cells, sorted by column, in chunks of at most [`CHUNK_MAX`] cells held
//!   behind `Arc`s, in a list behind an `Arc` of its own. Two things need this shape:
//!   - **counting**: the tombstones a read scans are the dead cells between its start and its
//!     `limit`-th live cell, i.e. a difference of two ranks; a rank is a binary search over
//!     the chunks' first columns, a sum of the lengths of the chunks before (at most
//!     `n / (CHUNK_MAX / 2)` additions) and a binary search inside one chunk. For the 150,000
//!     tombstones of the measured test that is ~1,200 additions instead of 150,000 steps.
//!   - **snapshots**: a coordinator that merges several replicas' answers needs each replica's
//!     dead cells as they were at its read instant (a tombstone decides against another
//!     replica's stale live cell). A snapshot is one `Arc` of the chunk list; a later change
//!     while a snapshot is out copies the list (one `Arc` per chunk) and the one chunk it
//!     touches (`Arc::make_mut`). Reads outnumber deletions by far (waiters poll), so a
//!     snapshot costs O(1) and a deletion O(n / CHUNK_MAX + CHUNK_MAX): with 256 cells a
//!     chunk, a few hundred steps for the tens of thousands of tombstones of a long queue
//!     row, instead of copying a chunk of a thousand cells at nearly every deletion.
//!   - **sealing**: when the store keeps dead cells on disk, every chunk but the row's last
//!     two is written to the store's file and dropped from memory ([`super::spill`]), keeping
//!     its bounds, its length and its earliest death. Ranks, bounds checks and compactions
//!     with nothing to purge in it need no more; a lookup, a rank or a change that falls
//!     inside it reads it back (a change brings it back into memory until the row's next
//!     split seals it again). Rows grow at their end, so the sealed chunks are the ones
//!     nothing asks about again.
//!
//! Dead cells keep only what reconciliation and compaction use: their timestamp (a dead cell
//! beats a live one of equal timestamp whatever its value) and since when they are dead.

use super::spill::Spill;
use crate::store::{reconcile_weighed, Micros, Weighed};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A chunk of dead cells is split in two when it grows past this many cells.
pub(super) const CHUNK_MAX: usize = 256;

/// A cell that is alive (until its expiry, if it has one).
#[derive(Clone, Debug)]
pub(super) struct LiveCell {
    pub timestamp: Micros,
    /// Shared with the answers of the reads that saw it: a read copies no value.
    pub value: Arc<[u8]>,
    pub expires_at: Option<Instant>,
}

/// A tombstone, or a TTL cell past its expiry.
#[derive(Clone, Copy, Debug)]
pub(super) struct DeadCell {
    pub timestamp: Micros,
    /// The apply instant of a tombstone, the expiry of a TTL cell; `gc_grace` counts from it.
    pub dead_at: DeadAt,
}

/// The instant a cell died, in 8 bytes where an `Instant` takes 16: nanoseconds from a fixed
/// origin of the process, before or after it. Dead cells are most of a long run's store (one
/// per deletion and replica, kept for `gc_grace`), and this makes each a fifth smaller. The
/// age it gives is exact: instants are nanoseconds apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DeadAt(i64);

impl DeadAt {
    /// The origin every `DeadAt` counts from (any fixed instant will do).
    fn origin() -> Instant {
        static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        Instant::from_std(*ORIGIN.get_or_init(std::time::Instant::now))
    }

    /// `at`, as nanoseconds from the origin (saturating some 292 years away).
    pub fn of(at: Instant) -> Self {
        let origin = Self::origin();
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        DeadAt(if at >= origin { nanos(at - origin) } else { -nanos(origin - at) })
    }

    /// How long the cell has been dead at `now` (zero for a `now` before it died).
    pub fn age_at(self, now: DeadAt) -> Duration {
        let age = now.0.saturating_sub(self.0);
        Duration::from_nanos(u64::try_from(age).unwrap_or(0))
    }
}

/// A version arriving at a replica.
pub(super) enum Incoming {
    Live(LiveCell),
    Dead(DeadCell),
}

impl Incoming {
    /// The incoming version as `reconcile` sees it at `now` (a TTL cell already past its
    /// expiry, e.g. a zero TTL, arrives dead).
    fn settle(self, now: Instant) -> Incoming {
        match self {
            Incoming::Live(c) => match c.expires_at {
                Some(at) if at <= now => {
                    Incoming::Dead(DeadCell { timestamp: c.timestamp, dead_at: DeadAt::of(at) })
                }
                _ => Incoming::Live(c),
            },
            dead => dead,
        }
    }
}

/// The dead cells of one chunk: sorted by column.
type Chunk = Vec<(Arc<str>, DeadCell)>;

/// A chunk of dead cells written to the store's [`Spill`]: what is known of it without
/// reading it back.
#[derive(Debug)]
struct Sealed {
    spill: Arc<Spill>,
    at: u64,
    bytes: usize,
    /// How many cells it holds.
    len: usize,
    /// Its first column.
    first: Arc<str>,
    /// Its last column.
    last: Arc<str>,
    /// The earliest death among its cells: nothing in it is purgeable before this is.
    oldest: DeadAt,
}

impl Sealed {
    /// Writes `chunk` (at least one cell) to `spill`: per cell its column's length and bytes,
    /// its timestamp and its death. `None` when the spill cannot take it.
    fn seal(spill: &Arc<Spill>, chunk: &Chunk) -> Option<Sealed> {
        let (first, last) = (chunk.first()?, chunk.last()?);
        let mut bytes = Vec::with_capacity(chunk.len() * 40);
        for (column, cell) in chunk {
            bytes.extend(u32::try_from(column.len()).ok()?.to_le_bytes());
            bytes.extend_from_slice(column.as_bytes());
            bytes.extend(cell.timestamp.to_le_bytes());
            bytes.extend(cell.dead_at.0.to_le_bytes());
        }
        Some(Sealed {
            at: spill.write(&bytes)?,
            spill: Arc::clone(spill),
            bytes: bytes.len(),
            len: chunk.len(),
            first: Arc::clone(&first.0),
            last: Arc::clone(&last.0),
            oldest: chunk.iter().map(|(_, c)| c.dead_at).min_by_key(|d| d.0)?,
        })
    }

    /// Its cells, read back (its first and last columns shared with it).
    fn load(&self) -> Chunk {
        let bytes = self.spill.read(self.at, self.bytes);
        let mut cells = Vec::with_capacity(self.len);
        let mut rest = &bytes[..];
        let mut take = |n: usize| {
            let (head, tail) = rest.split_at(n);
            rest = tail;
            head
        };
        let word = |b: &[u8]| i64::from_le_bytes(b.try_into().expect("8 bytes"));
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
            let timestamp = word(take(8));
            let dead_at = DeadAt(word(take(8)));
            cells.push((column, DeadCell { timestamp, dead_at }));
        }
        cells
    }
}

/// One chunk of a row's dead cells: in memory, or sealed on disk ([`super::spill`]).
#[derive(Clone)]
enum Piece {
    Mem(Arc<Chunk>),
    Disk(Arc<Sealed>),
}

impl Piece {
    fn first(&self) -> Option<&str> {
        match self {
            Piece::Mem(c) => c.first().map(|(k, _)| &**k),
            Piece::Disk(s) => Some(&s.first),
        }
    }

    fn last(&self) -> Option<&str> {
        match self {
            Piece::Mem(c) => c.last().map(|(k, _)| &**k),
            Piece::Disk(s) => Some(&s.last),
        }
    }

    fn len(&self) -> usize {
        match self {
            Piece::Mem(c) => c.len(),
            Piece::Disk(s) => s.len,
        }
    }

    /// Its cells: shared when in memory, read back when sealed.
    fn cells(&self) -> Arc<Chunk> {
        match self {
            Piece::Mem(c) => Arc::clone(c),
            Piece::Disk(s) => Arc::new(s.load()),
        }
    }

    /// Whether `column` may be one of its cells (it lies between its first and last).
    fn spans(&self, column: &str) -> bool {
        self.first().is_some_and(|f| f <= column) && self.last().is_some_and(|l| column <= l)
    }

    /// How many of its cells sort before `column`; a sealed chunk is read only when `column`
    /// falls inside it.
    fn rank_of(&self, column: &str) -> usize {
        match self {
            Piece::Disk(s) if column <= &*s.first => 0,
            Piece::Disk(s) if column > &*s.last => s.len,
            piece => piece.cells().partition_point(|(k, _)| &**k < column),
        }
    }

    /// Its cells to change: a sealed chunk comes back into memory first.
    fn make_mut(&mut self) -> &mut Chunk {
        if let Piece::Disk(s) = self {
            *self = Piece::Mem(Arc::new(s.load()));
        }
        match self {
            Piece::Mem(c) => Arc::make_mut(c),
            Piece::Disk(_) => unreachable!("brought into memory above"),
        }
    }
}

/// Chunks a row keeps in memory at its end, where rows grow: the rest are sealed on disk when
/// the row has a [`Spill`].
const CHUNKS_IN_MEMORY: usize = 2;

/// Where the last of a series of increasing lookups ([`DeadCells::get_after`]) ended.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DeadCursor {
    chunk: Option<usize>,
    pos: usize,
}

/// Dead cells sorted by column, chunked for cheap ranks and snapshots (see the module docs);
/// with a [`Spill`], all but the last chunks are sealed on disk.
#[derive(Clone, Default)]
pub(super) struct DeadCells {
    chunks: Arc<Vec<Piece>>,
    len: usize,
    spill: Option<Arc<Spill>>,
}

impl DeadCells {
    /// No dead cells; chunks are sealed into `spill` when given.
    pub fn new(spill: Option<Arc<Spill>>) -> Self {
        DeadCells { spill, ..DeadCells::default() }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The chunk that holds `column` or would hold it: the last one whose first column is
    /// `<= column` (the first chunk for a column before all of them).
    fn chunk_of(&self, column: &str) -> usize {
        // Most lookups are for columns at or past the last chunk's first: rows grow at their
        // end (queue entries, ticket numbers), so the newest columns are the ones asked for.
        let last = self.chunks.len().saturating_sub(1);
        if self.chunks.get(last).and_then(Piece::first).is_some_and(|k| k <= column) {
            return last;
        }
        self.chunks.partition_point(|c| c.first().is_some_and(|k| k <= column)).saturating_sub(1)
    }

    /// True when `column` sorts after every dead cell (or there are none): a live cell written
    /// after the deletions usually does, and is then answered by one comparison.
    fn after_all(&self, column: &str) -> bool {
        self.chunks.last().and_then(Piece::last).is_none_or(|greatest| column > greatest)
    }

    pub fn get(&self, column: &str) -> Option<DeadCell> {
        if self.after_all(column) {
            return None;
        }
        let piece = self.chunks.get(self.chunk_of(column)).filter(|p| p.spans(column))?;
        let chunk = piece.cells();
        chunk.binary_search_by(|(k, _)| (**k).cmp(column)).ok().map(|i| chunk[i].1)
    }

    /// [`DeadCells::get`] for a caller that asks for columns in increasing order, as a merge
    /// does: `cursor` remembers where the last one was, and the search gallops on from there
    /// (a handful of comparisons when the columns asked for lie close together, instead of a
    /// binary search over every dead cell each time).
    pub fn get_after(&self, cursor: &mut DeadCursor, column: &str) -> Option<DeadCell> {
        if self.after_all(column) {
            return None;
        }
        let mut at = match *cursor {
            DeadCursor { chunk: Some(c), pos } => (c, pos),
            DeadCursor { chunk: None, .. } => (self.chunk_of(column), 0),
        };
        // Into the chunk that holds `column` (a few steps forward, or a search past many).
        let past = |c: usize| self.chunks.get(c).and_then(Piece::last).is_some_and(|k| k < column);
        if past(at.0) {
            at = if past(at.0 + 1) { (self.chunk_of(column), 0) } else { (at.0 + 1, 0) };
        }
        let piece = self.chunks.get(at.0)?;
        if let Piece::Disk(s) = piece {
            if column < &*s.first {
                // Before the sealed chunk: not a dead cell, and the cursor stays put.
                return None;
            }
        }
        let chunk = piece.cells();
        let rest = chunk.get(at.1..)?;
        // Gallop: the first index at `2^k - 1` whose column is not less, then a binary search
        // below it.
        let mut bound = 1;
        while bound <= rest.len() && *rest[bound - 1].0 < *column {
            bound *= 2;
        }
        let low = bound / 2;
        let high = bound.min(rest.len());
        let i = low + rest[low..high].partition_point(|(k, _)| &**k < column);
        *cursor = DeadCursor { chunk: Some(at.0), pos: at.1 + i };
        rest.get(i).filter(|(k, _)| &**k == column).map(|(_, c)| *c)
    }

    pub fn insert(&mut self, column: Arc<str>, cell: DeadCell) {
        let i = self.chunk_of(&column);
        let chunks = Arc::make_mut(&mut self.chunks);
        if chunks.is_empty() {
            chunks.push(Piece::Mem(Arc::default()));
        }
        let chunk = chunks[i].make_mut();
        match chunk.binary_search_by(|(k, _)| (**k).cmp(&column)) {
            Ok(j) => chunk[j].1 = cell,
            Err(j) => {
                chunk.insert(j, (column, cell));
                self.len += 1;
            }
        }
        if chunk.len() > CHUNK_MAX {
            let upper = chunk.split_off(chunk.len() / 2);
            chunks.insert(i + 1, Piece::Mem(Arc::new(upper)));
            self.seal_old();
        }
    }

    /// Seals every chunk in memory but the last [`CHUNKS_IN_MEMORY`], when there is a spill.
    fn seal_old(&mut self) {
        let Some(spill) = &self.spill else { return };
        let chunks = Arc::make_mut(&mut self.chunks);
        let old = chunks.len().saturating_sub(CHUNKS_IN_MEMORY);
        for piece in &mut chunks[..old] {
            if let Piece::Mem(chunk) = piece {
                if let Some(sealed) = Sealed::seal(spill, chunk) {
                    *piece = Piece::Disk(Arc::new(sealed));
                }
            }
        }
    }

    pub fn remove(&mut self, column: &str) -> Option<DeadCell> {
        let i = self.chunk_of(column);
        // Found before anything is made mutable: a copy only for a cell that is there, and a
        // sealed chunk read only when the column lies inside it.
        let piece = self.chunks.get(i).filter(|p| p.spans(column))?;
        let j = match piece {
            Piece::Mem(chunk) => chunk.binary_search_by(|(k, _)| (**k).cmp(column)).ok()?,
            Piece::Disk(sealed) => {
                let cells = sealed.load();
                let j = cells.binary_search_by(|(k, _)| (**k).cmp(column)).ok()?;
                Arc::make_mut(&mut self.chunks)[i] = Piece::Mem(Arc::new(cells));
                j
            }
        };
        let chunks = Arc::make_mut(&mut self.chunks);
        let chunk = chunks[i].make_mut();
        let (_, cell) = chunk.remove(j);
        if chunk.is_empty() {
            chunks.remove(i);
        }
        self.len -= 1;
        Some(cell)
    }

    /// How many dead cells sort before `column` (`None`: all of them).
    pub fn rank(&self, column: Option<&str>) -> usize {
        let Some(column) = column else { return self.len };
        if self.after_all(column) {
            return self.len;
        }
        let i = self.chunk_of(column);
        let before: usize = match self.chunks.len().checked_sub(1) {
            Some(last) if i == last => self.len - self.chunks[last].len(),
            _ => self.chunks[..i.min(self.chunks.len())].iter().map(Piece::len).sum(),
        };
        let inside = self.chunks.get(i).map_or(0, |c| c.rank_of(column));
        before + inside
    }

    /// Compaction: drops the cells dead for at least `grace` at `now`. A sealed chunk whose
    /// earliest death is younger than that is kept unread.
    pub fn purge(&mut self, now: DeadAt, grace: Duration) {
        self.retain_where(|s| s.oldest.age_at(now) >= grace, |c| c.dead_at.age_at(now) < grace);
    }

    /// Drops the cells `keep` refuses, looking only into the sealed chunks `look` accepts;
    /// each chunk that lost cells is cut again into chunks of half the most.
    fn retain_where(
        &mut self,
        mut look: impl FnMut(&Sealed) -> bool,
        mut keep: impl FnMut(&DeadCell) -> bool,
    ) {
        let mut pieces = Vec::with_capacity(self.chunks.len());
        let mut changed = false;
        for piece in self.chunks.iter() {
            if matches!(piece, Piece::Disk(s) if !look(s)) {
                pieces.push(piece.clone());
                continue;
            }
            let cells = piece.cells();
            let kept: Chunk = cells.iter().filter(|(_, c)| keep(c)).cloned().collect();
            if kept.len() == cells.len() {
                pieces.push(piece.clone());
                continue;
            }
            changed = true;
            pieces.extend(kept.chunks(CHUNK_MAX / 2).map(|c| Piece::Mem(Arc::new(c.to_vec()))));
        }
        if changed {
            self.len = pieces.iter().map(Piece::len).sum();
            self.chunks = Arc::new(pieces);
        }
    }

    #[cfg(test)]
    pub fn retain(&mut self, keep: impl FnMut(&DeadCell) -> bool) {
        self.retain_where(|_| true, keep);
    }

    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = (Arc<str>, DeadCell)> + '_ {
        self.chunks.iter().flat_map(|p| {
            let cells = p.cells();
            (0..cells.len()).map(move |i| cells[i].clone())
        })
    }
}

/// A row's live cells by column.
pub(super) type LiveMap = BTreeMap<Arc<str>, LiveCell>;

/// One row on one replica.
pub(super) struct Row {
    /// Copy-on-write: a read's answer keeps the map as it was at the read instant by holding
    /// it ([`LiveSlice`]), and only a change while such an answer is out copies it. Reads
    /// outnumber writes (waiters poll), so sharing the map is cheaper than copying the cells
    /// each read returns.
    pub live: Arc<LiveMap>,
    pub dead: DeadCells,
    expiries: BTreeSet<(Instant, Arc<str>)>,
    /// The row is compacted at its first access at or after this instant.
    next_compaction: Instant,
}

/// The live cells of a slice as one replica saw them at its read instant: a snapshot of the
/// row's live cells and where the slice lies in it, from its first column on, `len` cells.
#[derive(Clone, Default)]
pub(super) struct LiveSlice {
    /// The snapshot and the slice's first column; `None` for an empty slice.
    cells: Option<(Arc<LiveMap>, Arc<str>)>,
    len: usize,
    /// The slice's last column.
    last: Option<Arc<str>>,
}

impl LiveSlice {
    /// The cells, in column order.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &LiveCell)> + '_ {
        self.cells
            .iter()
            .flat_map(|(map, first)| {
                map.range::<str, _>((Bound::Included(&**first), Bound::Unbounded))
            })
            .take(self.len)
    }

    /// The last column of the slice.
    pub fn last(&self) -> Option<&str> {
        self.last.as_deref()
    }

    /// How many cells the slice holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// What tells this slice's cells apart from any other's while the snapshot lasts: the
    /// snapshot, held weakly (see [`SliceId`]), where the slice starts in it and its length.
    /// `None` for an empty slice.
    pub fn id(&self) -> Option<SliceId> {
        let (map, first) = self.cells.as_ref()?;
        Some(SliceId {
            map: Arc::downgrade(map),
            first: Arc::as_ptr(first).cast::<u8>() as usize,
            len: self.len,
        })
    }

    /// Whether this slice is the one `id` was taken from, or one with the same cells.
    pub fn is(&self, id: &SliceId) -> bool {
        self.cells.as_ref().is_some_and(|(map, first)| {
            std::ptr::eq(Arc::as_ptr(map), id.map.as_ptr())
                && Arc::as_ptr(first).cast::<u8>() as usize == id.first
                && self.len == id.len
        })
    }
}

/// A slice of one snapshot of a row's live cells, identified without keeping the cells
/// alive. The snapshot is held by a `Weak`: its allocation then cannot be freed and reused
/// by another map, and a snapshot is changed in place only when nothing else refers to it,
/// `Weak`s included (`Arc::make_mut` moves it out otherwise), so a live slice whose map is
/// at the same address holds the very cells the slice held. Holding it weakly keeps a
/// replica's next write from copying the map, as holding it strongly would.
pub(super) struct SliceId {
    map: std::sync::Weak<LiveMap>,
    /// The address of the first column's name: a key of that snapshot, only compared.
    first: usize,
    len: usize,
}

/// What one replica's scan of a slice found.
pub(super) struct Scan {
    /// The live cells from the start, up to the limit.
    pub live: LiveSlice,
    /// Dead cells between the start and the last live cell returned (to the row's end when
    /// the limit was not reached): what Cassandra counts as tombstones scanned.
    pub tombstones: u64,
    /// The limit was reached, so cells after the last one returned were not scanned.
    pub truncated: bool,
}

impl Row {
    pub fn new(now: Instant, interval: Duration, spill: Option<Arc<Spill>>) -> Self {
        Row {
            live: Arc::default(),
            dead: DeadCells::new(spill),
            expiries: BTreeSet::new(),
            next_compaction: far_after(now, interval),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.live.is_empty() && self.dead.len() == 0
    }

    /// Brings the row to `now`: expired cells become dead; when a compaction is due, dead cells
    /// dead for at least `grace` are purged.
    pub fn advance(&mut self, now: Instant, grace: Duration, interval: Duration) {
        // Looked at by reference first: most accesses find nothing expired.
        while self.expiries.first().is_some_and(|(at, _)| *at <= now) {
            let Some((at, column)) = self.expiries.pop_first() else { break };
            if let Some(cell) = Arc::make_mut(&mut self.live).remove(&column) {
                self.dead.insert(
                    column,
                    DeadCell { timestamp: cell.timestamp, dead_at: DeadAt::of(at) },
                );
            }
        }
        if now >= self.next_compaction {
            self.dead.purge(DeadAt::of(now), grace);
            self.next_compaction = far_after(now, interval);
        }
    }

    /// Reconciles `incoming` with the version already stored under `column` (after
    /// [`Row::advance`] to `now`), keeping the winner.
    pub fn merge(&mut self, column: &Arc<str>, incoming: Incoming, now: Instant) {
        let incoming = incoming.settle(now);
        let live = self.live.get(column);
        let was_live = live.is_some();
        let old = match live {
            Some(l) => Some(weigh_live(l)),
            None => self.dead.get(column).map(|d| Weighed::dead(d.timestamp)),
        };
        let found = old.is_some();
        if let Some(old) = old {
            if reconcile_weighed(&weigh(&incoming), &old) != Ordering::Greater {
                return;
            }
        }
        // Only what was found is removed: the live map is made mutable (a copy, when a read's
        // answer shares it) only when it changes.
        let removed =
            if was_live { Arc::make_mut(&mut self.live).remove_entry(column) } else { None };
        let key: Arc<str> = match removed {
            Some((key, cell)) => {
                if let Some(at) = cell.expires_at {
                    self.expiries.remove(&(at, Arc::clone(&key)));
                }
                key
            }
            None => {
                if found {
                    self.dead.remove(column);
                }
                Arc::clone(column)
            }
        };
        match incoming {
            Incoming::Live(cell) => {
                if let Some(at) = cell.expires_at {
                    self.expiries.insert((at, Arc::clone(&key)));
                }
                Arc::make_mut(&mut self.live).insert(key, cell);
            }
            Incoming::Dead(cell) => self.dead.insert(key, cell),
        }
    }

    /// The live cells from `start` on up to `limit`, and the tombstones scanned meanwhile.
    pub fn scan(&self, start: Option<&str>, limit: usize) -> Scan {
        let (first, last, len) = self.live_bounds(start, limit);
        // With the limit reached the scan stops at the last live cell returned; a live cell
        // is never in `dead`, so the rank up to it counts exactly the dead cells before it.
        // The same rank tells whether dead cells follow it.
        let stopped_at = match last {
            Some(k) if len == limit => Some((&**k, self.dead.rank(Some(k)))),
            _ => None,
        };
        let truncated = stopped_at.is_some_and(|(k, rank)| self.live_after(k, rank));
        let tombstones = if limit == 0 {
            0
        } else {
            let to = stopped_at.map_or(self.dead.len(), |(_, rank)| rank);
            to.saturating_sub(start.map_or(0, |s| self.dead.rank(Some(s))))
        };
        let live = LiveSlice {
            cells: first.map(|f| (Arc::clone(&self.live), Arc::clone(f))),
            len,
            last: last.cloned(),
        };
        Scan { live, tombstones: tombstones as u64, truncated }
    }

    /// The first and the last live column of a slice, and how many live cells it holds.
    fn live_bounds(
        &self,
        start: Option<&str>,
        limit: usize,
    ) -> (Option<&Arc<str>>, Option<&Arc<str>>, usize) {
        if start.is_none() && limit >= self.live.len() {
            // The whole row, as most reads ask: its ends without a walk over its cells.
            let first = self.live.first_key_value().map(|(k, _)| k);
            let last = self.live.last_key_value().map(|(k, _)| k);
            return (first, last, self.live.len());
        }
        let lower = start.map_or(Bound::Unbounded, Bound::Included);
        let (mut first, mut last, mut len) = (None, None, 0);
        for (k, _) in self.live.range::<str, _>((lower, Bound::Unbounded)).take(limit) {
            first = first.or(Some(k));
            last = Some(k);
            len += 1;
        }
        (first, last, len)
    }

    /// Whether the row holds any cell, live or dead, after the live `column`, whose rank
    /// among the dead cells is `dead_rank`: a reader that stopped at `column` may have missed
    /// something.
    fn live_after(&self, column: &str, dead_rank: usize) -> bool {
        let after = (Bound::Excluded(column), Bound::Unbounded);
        self.live.range::<str, _>(after).next().is_some() || dead_rank < self.dead.len()
    }
}

/// A live cell as reconciliation weighs it.
pub(super) fn weigh_live(c: &LiveCell) -> Weighed<'_, Instant> {
    Weighed::live(c.timestamp, &c.value, c.expires_at.as_ref())
}

fn weigh(i: &Incoming) -> Weighed<'_, Instant> {
    match i {
        Incoming::Live(c) => weigh_live(c),
        Incoming::Dead(d) => Weighed::dead(d.timestamp),
    }
}

/// `now + d`, or an instant far enough to be never for any run when that overflows.
fn far_after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(30 * 365 * 86_400)))
        .unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_cells_age_is_exact_before_and_after_the_origin() {
        let origin = DeadAt::origin();
        for (died, now) in [
            (origin, origin + Duration::from_nanos(1)),
            (origin - Duration::from_secs(30), origin + Duration::from_nanos(999_999_937)),
            (origin + Duration::from_secs(864_000), origin + Duration::new(864_001, 7)),
            (origin - Duration::new(5, 3), origin - Duration::new(2, 1)),
        ] {
            let (died_at, now_at) = (DeadAt::of(died), DeadAt::of(now));
            assert_eq!(died_at.age_at(now_at), now - died);
            assert_eq!(now_at.age_at(died_at), Duration::ZERO, "not dead yet");
        }
        // Eight bytes less per dead cell and replica than an `Instant`.
        assert_eq!(std::mem::size_of::<(Arc<str>, DeadCell)>(), 32);
    }

    fn dead(n: usize) -> DeadCells {
        let now = crate::rt::now();
        let mut d = DeadCells::default();
        for i in 0..n {
            d.insert(
                Arc::from(format!("{i:08}")),
                DeadCell { timestamp: i as i64, dead_at: DeadAt::of(now) },
            );
        }
        d
    }

    /// Increasing lookups through a cursor find what [`DeadCells::get`] finds, for columns
    /// present, absent, between chunks, before and past every dead cell, near and far apart.
    #[tokio::test(start_paused = true)]
    async fn cursor_lookups_agree_with_plain_ones() {
        let mut d = dead(3000);
        d.retain(|c| c.timestamp % 3 != 0);
        let columns: Vec<String> =
            (0..3100).flat_map(|i| [format!("{i:08}"), format!("{i:08}x")]).collect();
        for stride in [1, 2, 7, 64, 500, 2999] {
            for first in [0, 1, 255, 256, 4000] {
                let mut cursor = DeadCursor::default();
                for column in columns.iter().skip(first).step_by(stride) {
                    let plain = d.get(column).map(|c| c.timestamp);
                    let after = d.get_after(&mut cursor, column).map(|c| c.timestamp);
                    assert_eq!(after, plain, "{column} (stride {stride}, from {first})");
                }
            }
        }
        let mut cursor = DeadCursor::default();
        assert!(DeadCells::default().get_after(&mut cursor, "0").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn ranks_gets_and_removes_across_chunks() {
        let mut d = dead(5000);
        assert!(d.chunks.len() > 4, "{} chunks", d.chunks.len());
        assert_eq!(d.rank(Some("00002500")), 2500);
        assert_eq!(d.rank(Some("00002500x")), 2501);
        assert_eq!(d.rank(Some("")), 0);
        assert_eq!(d.rank(None), 5000);
        assert_eq!(d.get("00004999").map(|c| c.timestamp), Some(4999));
        assert_eq!(d.remove("00000010").map(|c| c.timestamp), Some(10));
        assert!(d.get("00000010").is_none());
        assert_eq!(d.rank(Some("00002500")), 2499);
        let snapshot = d.clone();
        d.insert(
            Arc::from("00000010"),
            DeadCell { timestamp: 99, dead_at: DeadAt::of(crate::rt::now()) },
        );
        assert!(snapshot.get("00000010").is_none(), "a snapshot does not see later changes");
        assert_eq!(d.iter().count(), 5000);
        d.retain(|c| c.timestamp % 2 == 1);
        assert_eq!(d.len(), 2501);
        assert_eq!(d.rank(None), 2501);
    }

    fn cell(timestamp: i64, dead_at: DeadAt) -> DeadCell {
        DeadCell { timestamp, dead_at }
    }

    /// Everything asked of dead cells sealed on disk is answered as it is of the same cells in
    /// memory: random inserts (mostly at the end, as rows grow), removes, lookups, increasing
    /// lookups, ranks, purges and snapshots taken along the way.
    #[tokio::test(start_paused = true)]
    async fn sealed_dead_cells_answer_as_dead_cells_in_memory() {
        use rand::{RngExt, SeedableRng};
        let spill = Arc::new(Spill::default());
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let origin = crate::rt::now();
        let at = |s: u64| DeadAt::of(origin + Duration::from_secs(s));
        let (mut mem, mut disk) = (DeadCells::default(), DeadCells::new(Some(Arc::clone(&spill))));
        let mut snapshots = Vec::new();
        let name = |i: u64| format!("{i:08}");
        for step in 0..20_000u64 {
            let column = match rng.random_range(0..10) {
                0 => name(rng.random_range(0..=step)),
                1 => format!("{}x", name(rng.random_range(0..=step))),
                _ => name(step),
            };
            match rng.random_range(0..20) {
                0 => assert_eq!(
                    mem.remove(&column).map(|c| c.timestamp),
                    disk.remove(&column).map(|c| c.timestamp),
                    "remove {column}"
                ),
                1 if step % 500 == 0 => {
                    let grace = Duration::from_secs(rng.random_range(0..step.max(1)));
                    mem.purge(at(step), grace);
                    disk.purge(at(step), grace);
                }
                2 if step % 1000 == 0 => snapshots.push((mem.clone(), disk.clone())),
                _ => {
                    let c = cell(step as i64, at(step.saturating_sub(rng.random_range(0..50))));
                    mem.insert(Arc::from(column.as_str()), c);
                    disk.insert(Arc::from(column.as_str()), c);
                }
            }
            assert_eq!(mem.len(), disk.len());
        }
        assert!(disk.chunks.iter().filter(|p| matches!(p, Piece::Disk(_))).count() > 10);
        snapshots.push((mem, disk));
        let probes: Vec<String> =
            (0..20_100).step_by(7).flat_map(|i| [name(i), format!("{}x", name(i))]).collect();
        for (mem, disk) in &snapshots {
            let (mut cm, mut cd) = (DeadCursor::default(), DeadCursor::default());
            for p in &probes {
                let key = |c: Option<DeadCell>| c.map(|c| (c.timestamp, c.dead_at));
                assert_eq!(key(mem.get(p)), key(disk.get(p)), "get {p}");
                assert_eq!(key(mem.get_after(&mut cm, p)), key(disk.get_after(&mut cd, p)));
                assert_eq!(mem.rank(Some(p)), disk.rank(Some(p)), "rank {p}");
            }
            let cells = |d: &DeadCells| {
                d.iter().map(|(k, c)| (k.to_string(), c.timestamp, c.dead_at)).collect::<Vec<_>>()
            };
            assert_eq!(cells(mem), cells(disk));
        }
        assert!(spill.error().is_none());
    }

    /// A spill that cannot write keeps every chunk in memory, loses nothing, and says why.
    #[tokio::test(start_paused = true)]
    async fn a_spill_that_cannot_write_keeps_the_cells_in_memory() {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let spill = Arc::new(Spill::with_file(full));
        let now = DeadAt::of(crate::rt::now());
        let mut d = DeadCells::new(Some(Arc::clone(&spill)));
        for i in 0..3000 {
            d.insert(Arc::from(format!("{i:08}")), cell(i, now));
        }
        assert!(d.chunks.iter().all(|p| matches!(p, Piece::Mem(_))));
        assert_eq!(d.iter().count(), 3000);
        assert_eq!(d.rank(Some("00001500")), 1500);
        assert!(spill.error().is_some_and(|e| e.contains("cannot write")), "{:?}", spill.error());
    }
}
