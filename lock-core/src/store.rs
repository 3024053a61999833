//! The Cassandra data model the lock algorithms are written against (SPEC section 1).
//!
//! The algorithms never see CQL: they see tables of rows of cells, and this trait. The same
//! algorithm then runs on the [embedded store](crate::embedded) in simulated time and on a
//! real cluster through a driver-backed implementation.
//!
//! # The rules, one by one
//!
//! 1. A **table** holds **rows** addressed by a string key; a row holds **cells** kept sorted by
//!    column name in byte-wise lexicographic order (Rust's `str` ordering is byte-wise, which is
//!    exactly Cassandra's `UTF8Type` comparator).
//! 2. A read takes a whole row, or a [`Slice`]: the first `limit` cells whose column name is
//!    `>= start`.
//! 3. A cell carries a value, a **write timestamp** in microseconds chosen by the client, and an
//!    optional **TTL** in seconds.
//! 4. Writes resolve by timestamp, last write wins: see [`reconcile`]. On equal timestamps a
//!    deletion wins over a write, and between two writes the greater value wins.
//! 5. A deletion leaves a tombstone with its own timestamp; a later-arriving write with a smaller
//!    timestamp does not resurrect the cell.
//! 6. A cell with a TTL disappears TTL seconds after it was written, measured by the store's
//!    clock (not the client's). An expired cell behaves as a tombstone with the cell's own
//!    write timestamp, as in Cassandra.
//! 7. Every operation carries a [`Consistency`]; the algorithms assume [`Consistency::Quorum`]
//!    for both reads and writes, so that a read issued after a write completed sees that write
//!    (the thesis's Lemma 1).

use async_trait::async_trait;
use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

/// Write timestamps, in microseconds (Cassandra's `USING TIMESTAMP` unit).
pub type Micros = i64;

/// How many replicas must answer before an operation completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Consistency {
    /// One replica.
    One,
    /// A majority: `replicas / 2 + 1`.
    Quorum,
    /// Every replica.
    All,
}

impl Consistency {
    /// How many of `replicas` replicas must answer.
    pub fn required(self, replicas: usize) -> usize {
        match self {
            Consistency::One => 1.min(replicas),
            Consistency::Quorum => replicas / 2 + 1,
            Consistency::All => replicas,
        }
    }
}

impl fmt::Display for Consistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Consistency::One => "ONE",
            Consistency::Quorum => "QUORUM",
            Consistency::All => "ALL",
        })
    }
}

impl std::str::FromStr for Consistency {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "ONE" => Ok(Consistency::One),
            "QUORUM" => Ok(Consistency::Quorum),
            "ALL" => Ok(Consistency::All),
            other => Err(format!("unknown consistency level '{other}' (expected ONE, QUORUM or ALL)")),
        }
    }
}

/// A live cell as returned by a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    /// Column name; rows are sorted by it byte-wise.
    pub column: String,
    /// Value bytes.
    pub value: Vec<u8>,
    /// Write timestamp in microseconds.
    pub timestamp: Micros,
}

/// One cell to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CellWrite {
    /// Column name.
    pub column: String,
    /// Value bytes.
    pub value: Vec<u8>,
    /// Write timestamp in microseconds, chosen by the client.
    pub timestamp: Micros,
    /// Time to live; `None` keeps the cell until it is deleted. Whole seconds, as in CQL
    /// (`USING TTL`); sub-second parts are rounded up so a cell never lives shorter than asked.
    pub ttl: Option<Duration>,
}

impl CellWrite {
    /// TTL in whole seconds as CQL binds it (rounded up, at least 1).
    pub fn ttl_secs(&self) -> Option<u32> {
        self.ttl.map(ttl_secs)
    }
}

/// A TTL in whole seconds, rounded up, at least one second (CQL's `USING TTL` is an int of seconds).
pub fn ttl_secs(ttl: Duration) -> u32 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    secs.clamp(1, u32::MAX as u64) as u32
}

/// Which part of a row a read returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slice {
    /// First column name to return (inclusive); `None` starts at the row's first cell.
    pub start: Option<String>,
    /// At most this many cells; `None` returns all.
    pub limit: Option<usize>,
}

impl Slice {
    /// The whole row.
    pub fn all() -> Self {
        Slice::default()
    }
    /// The first `limit` cells of the row.
    pub fn first(limit: usize) -> Self {
        Slice { start: None, limit: Some(limit) }
    }
    /// The first `limit` cells whose column name is `>= start`.
    pub fn from(start: impl Into<String>, limit: usize) -> Self {
        Slice { start: Some(start.into()), limit: Some(limit) }
    }
}

/// What a store operation can fail with. Drivers map their errors onto these.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// Not enough live replicas to satisfy the consistency level: the operation was not applied.
    #[error("unavailable: {required} replicas required at {consistency}, {alive} alive")]
    Unavailable {
        /// The consistency level asked for.
        consistency: Consistency,
        /// Replicas that had to answer.
        required: usize,
        /// Replicas known to be alive.
        alive: usize,
    },
    /// A write timed out after it was sent: it may or may not have been applied.
    #[error("write timed out at {consistency} ({received} of {required} acknowledged); it may have been applied")]
    WriteTimeout {
        /// The consistency level asked for.
        consistency: Consistency,
        /// Acknowledgements received.
        received: usize,
        /// Acknowledgements required.
        required: usize,
    },
    /// A read timed out.
    #[error("read timed out at {consistency} ({received} of {required} answered)")]
    ReadTimeout {
        /// The consistency level asked for.
        consistency: Consistency,
        /// Answers received.
        received: usize,
        /// Answers required.
        required: usize,
    },
    /// The store cannot be reached at all (connection refused, client partitioned).
    #[error("store unreachable: {0}")]
    Unreachable(String),
    /// The request was rejected (bad schema, bad value, server error).
    #[error("store rejected the request: {0}")]
    Rejected(String),
    /// A read scanned more tombstones than the store's `tombstone_failure_threshold` on one
    /// replica and was aborted, as Cassandra's `TombstoneOverwhelmingException`. Nothing was
    /// returned; retrying the same read fails the same way until a compaction purges the
    /// tombstones (after `gc_grace_seconds`), so callers should give up rather than retry.
    #[error(
        "read of row {row:?} of table {table:?} aborted: it scanned {scanned} tombstones, more than the \
         tombstone failure threshold (Cassandra's TombstoneOverwhelmingException); the row's deleted \
         cells stay until a compaction after gc_grace"
    )]
    TombstoneOverwhelming {
        /// The table read.
        table: String,
        /// The row key read.
        row: String,
        /// Tombstones the aborting replica had scanned (the threshold plus one).
        scanned: u64,
    },
}

impl StoreError {
    /// True when a failed write may nevertheless have been applied, so its cell may exist.
    pub fn may_have_applied(&self) -> bool {
        matches!(self, StoreError::WriteTimeout { .. } | StoreError::Unreachable(_))
    }
}

/// The state of one cell version for reconciliation: a live value (maybe with an expiry) or a
/// tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Version<E> {
    /// A value, with an optional expiry instant on the store's clock.
    Live {
        /// Value bytes.
        value: Vec<u8>,
        /// When the cell expires; `None` never.
        expires_at: Option<E>,
    },
    /// A deletion.
    Tombstone,
}

/// Cassandra's reconciliation of two versions of one cell: returns `Ordering::Greater` when
/// `a` wins over `b`.
///
/// 1. the greater timestamp wins;
/// 2. on equal timestamps a tombstone (or an expired cell, `a_dead`/`b_dead`) wins over a live cell;
/// 3. between two live cells the greater value wins (byte-wise);
/// 4. between equal values the later expiry wins (a cell without TTL counts as latest).
pub fn reconcile<E: Ord>(
    a_ts: Micros,
    a: &Version<E>,
    a_dead: bool,
    b_ts: Micros,
    b: &Version<E>,
    b_dead: bool,
) -> Ordering {
    a_ts.cmp(&b_ts).then_with(|| match (a_dead, b_dead) {
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (true, true) => Ordering::Equal,
        (false, false) => match (a, b) {
            (
                Version::Live { value: va, expires_at: ea },
                Version::Live { value: vb, expires_at: eb },
            ) => va.cmp(vb).then_with(|| match (ea, eb) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(x), Some(y)) => x.cmp(y),
            }),
            _ => Ordering::Equal,
        },
    })
}

/// A Cassandra-like store of tables of rows of timestamped cells.
///
/// Implementations: [`crate::embedded::EmbeddedStore`] (and its per-client handles) and the
/// driver-backed store of the Cassandra backend. Every method is one request to the store
/// (one round trip), which is what the harness counts as store load.
#[async_trait]
pub trait CellStore: Send + Sync + 'static {
    /// Write cells into one row (one request; a batch on one partition is atomic per replica).
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        consistency: Consistency,
    ) -> Result<(), StoreError>;

    /// Delete one cell with a tombstone at `timestamp`.
    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        timestamp: Micros,
        consistency: Consistency,
    ) -> Result<(), StoreError>;

    /// Read the live cells of a row (or a slice of it), in column order.
    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        consistency: Consistency,
    ) -> Result<Vec<Cell>, StoreError>;

    /// The doorbells this store's clients wake each other with ([`crate::doorbell`]), when it
    /// has any: the embedded store's in-process ones, or the ones a driver client was given.
    /// Not a request: Cassandra itself cannot push.
    fn doorbell(&self) -> Option<std::sync::Arc<dyn crate::doorbell::Doorbell>> {
        None
    }
}

#[async_trait]
impl<S: CellStore + ?Sized> CellStore for std::sync::Arc<S> {
    async fn write(&self, table: &str, row: &str, cells: &[CellWrite], c: Consistency) -> Result<(), StoreError> {
        (**self).write(table, row, cells, c).await
    }
    async fn delete(&self, table: &str, row: &str, column: &str, ts: Micros, c: Consistency) -> Result<(), StoreError> {
        (**self).delete(table, row, column, ts, c).await
    }
    async fn read(&self, table: &str, row: &str, slice: Slice, c: Consistency) -> Result<Vec<Cell>, StoreError> {
        (**self).read(table, row, slice, c).await
    }
    fn doorbell(&self) -> Option<std::sync::Arc<dyn crate::doorbell::Doorbell>> {
        (**self).doorbell()
    }
}
