//! The Cassandra data model the lock algorithms are written against.
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
//!
//! # Lightweight transactions (compare-and-set)
//!
//! Cassandra 2.0 added conditional statements (`INSERT … IF NOT EXISTS`, `UPDATE … IF col = ?`,
//! `DELETE … IF col = ?`, and conditional batches on one partition), run as a round of Paxos
//! among the row's replicas. [`CellStore::cas`] is that, on the cell model:
//!
//! 8. A [`CasRequest`] names one row, a list of [`CasCondition`]s on cells of that row (a cell
//!    [`Expect::Absent`], or [`Expect::Value`] equal to a value) and a list of [`CasChange`]s
//!    (set a cell, with an optional TTL; delete a cell). The changes are applied, all of
//!    them atomically, exactly when every condition holds on the row's state **as of the
//!    operation's linearization point**: CAS operations and SERIAL reads on one row are
//!    linearizable. An expired cell is absent.
//! 9. The answer is a [`CasResult`]: `applied`, and the live cells of the columns named in
//!    the conditions as they were at that point. Cassandra returns them only when not
//!    applied, and without write timestamps: a driver-backed store rebuilds an applied
//!    result's cells from the conditions and reports timestamp 0; portable code reads only
//!    columns and values, and only from results that did not apply.
//! 10. The client chooses no write timestamp: the changes are written with the timestamp of
//!     the Paxos ballot that decided them, which is greater than that of every CAS decided
//!     before on the row. Mixing plain writes (client timestamps) into a row written by CAS
//!     therefore orders them by clock, not by Paxos: the lock algorithms never mix them.
//! 11. The serial consistency ([`SerialConsistency::Serial`] or `LocalSerial`) sets the Paxos
//!     quorum (in one data centre, both are a majority of the replicas); the commit
//!     consistency sets how many replicas must acknowledge the commit before the answer.
//! 12. A CAS can end with [`StoreError::CasTimeout`]: the store cannot tell whether it
//!     applied ([`CasTimeoutKind`] says in which phase it stopped). It may still be completed
//!     by a later Paxos round; a [`CellStore::read_serial`] of the row finishes or buries it
//!     for good, so what that read shows is final for that operation. Too few live replicas
//!     for a quorum fail with [`StoreError::Unavailable`] before anything is sent.
//! 13. [`CellStore::read_serial`] reads a row at SERIAL: it first completes any Paxos round
//!     in progress on the row, so it sees every CAS that completed before it and no CAS that
//!     can still change its outcome afterwards.

use async_trait::async_trait;
use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

/// Write timestamps, in microseconds (Cassandra's `USING TIMESTAMP` unit).
pub type Micros = i64;

/// How many replicas must answer before an operation completes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
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
            other => {
                Err(format!("unknown consistency level '{other}' (expected ONE, QUORUM or ALL)"))
            }
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

/// The Paxos quorum of a lightweight transaction (CQL's serial consistency).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SerialConsistency {
    /// A majority of all replicas.
    #[default]
    Serial,
    /// A majority of the replicas in the coordinator's data centre (the model and a
    /// single-data-centre cluster: the same as `Serial`).
    LocalSerial,
}

impl SerialConsistency {
    /// How many of `replicas` replicas must take part in each Paxos phase.
    pub fn required(self, replicas: usize) -> usize {
        replicas / 2 + 1
    }
}

impl fmt::Display for SerialConsistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SerialConsistency::Serial => "SERIAL",
            SerialConsistency::LocalSerial => "LOCAL_SERIAL",
        })
    }
}

/// What a [`CasCondition`] expects of its cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// No live cell (CQL `IF NOT EXISTS` on the cell's row, or `IF value = null`).
    Absent,
    /// A live cell with exactly this value (CQL `IF value = ?`).
    Value(Vec<u8>),
}

/// One condition of a [`CasRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasCondition {
    /// The column it looks at.
    pub column: String,
    /// What it must find there.
    pub expect: Expect,
}

impl CasCondition {
    /// The cell `column` must not exist.
    pub fn absent(column: impl Into<String>) -> Self {
        CasCondition { column: column.into(), expect: Expect::Absent }
    }
    /// The cell `column` must hold `value`.
    pub fn equals(column: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        CasCondition { column: column.into(), expect: Expect::Value(value.into()) }
    }
    /// True when `cell` (the live cell of the column, if any) satisfies the condition.
    pub fn holds(&self, cell: Option<&Cell>) -> bool {
        match (&self.expect, cell) {
            (Expect::Absent, None) => true,
            (Expect::Value(v), Some(c)) => c.value == *v,
            _ => false,
        }
    }
}

/// One change a [`CasRequest`] makes when its conditions hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CasChange {
    /// Write a cell (its timestamp is the deciding ballot's).
    Set {
        /// Column name.
        column: String,
        /// Value bytes.
        value: Vec<u8>,
        /// Time to live, as in [`CellWrite::ttl`].
        ttl: Option<Duration>,
    },
    /// Delete a cell.
    Delete {
        /// Column name.
        column: String,
    },
}

impl CasChange {
    /// The column it changes.
    pub fn column(&self) -> &str {
        match self {
            CasChange::Set { column, .. } | CasChange::Delete { column } => column,
        }
    }
}

/// A lightweight transaction on one row: if every condition holds, make every change.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CasRequest {
    /// All must hold (CQL `IF a AND b`); none means the changes always apply.
    pub conditions: Vec<CasCondition>,
    /// Applied together when the conditions hold.
    pub changes: Vec<CasChange>,
}

impl CasRequest {
    /// The columns the conditions name, sorted and without duplicates: what the answer carries.
    pub fn condition_columns(&self) -> Vec<&str> {
        let mut cols: Vec<&str> = self.conditions.iter().map(|c| c.column.as_str()).collect();
        cols.sort_unstable();
        cols.dedup();
        cols
    }

    /// True when every condition holds on `row` (the row's live cells, in any order).
    pub fn holds_on(&self, row: &[Cell]) -> bool {
        self.conditions.iter().all(|c| c.holds(row.iter().find(|cell| cell.column == c.column)))
    }
}

/// The answer to a [`CasRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CasResult {
    /// True when the conditions held and the changes were made (CQL's `[applied]`).
    pub applied: bool,
    /// The live cells of the conditions' columns at the operation's linearization point, in
    /// column order (without the changes); see rule 9 for what a real cluster reports.
    pub current: Vec<Cell>,
}

impl CasResult {
    /// The current cell of `column`, if it was live.
    pub fn cell(&self, column: &str) -> Option<&Cell> {
        self.current.iter().find(|c| c.column == column)
    }
}

/// Where a lightweight transaction stopped when it timed out, which says what may have
/// happened to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CasTimeoutKind {
    /// In a Paxos phase (prepare, propose), or contention lasted past the store's CAS
    /// contention timeout (Cassandra's `WriteTimeoutException` with write type `CAS`). It may
    /// have been accepted by some replicas, and a later round may complete it.
    Paxos,
    /// Some replicas but fewer than a quorum accepted the proposal (Cassandra 4.0's
    /// `CasWriteUnknownResultException`): a later round may complete it, or not.
    PartiallyAccepted,
    /// A quorum accepted the proposal, so it is decided and will be applied, but the commit
    /// was not acknowledged in time (write type `SIMPLE` on a conditional statement).
    Commit,
}

impl fmt::Display for CasTimeoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CasTimeoutKind::Paxos => "Paxos (prepare or propose) phase",
            CasTimeoutKind::PartiallyAccepted => "propose phase (accepted by fewer than a quorum)",
            CasTimeoutKind::Commit => "commit phase (decided, not yet acknowledged)",
        })
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
    /// A lightweight transaction timed out: whether it applied is unknown (rule 12).
    #[error(
        "lightweight transaction timed out in its {kind} ({received} of {required} replicas answered, \
         {contentions} contended rounds); it may or may not have applied: a SERIAL read tells"
    )]
    CasTimeout {
        /// Where it stopped.
        kind: CasTimeoutKind,
        /// Replicas that answered the last phase.
        received: usize,
        /// Replicas that had to.
        required: usize,
        /// Rounds lost to other proposers before it stopped.
        contentions: u32,
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
        matches!(
            self,
            StoreError::WriteTimeout { .. }
                | StoreError::Unreachable(_)
                | StoreError::CasTimeout { .. }
        )
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

/// One version of a cell as [`reconcile`] weighs it, borrowed: the embedded store's replicas and
/// coordinators compare versions on every write and every merged read, and a borrowed value
/// spares them a copy of it each time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Weighed<'a, E> {
    /// The write timestamp.
    pub timestamp: Micros,
    /// A tombstone or an expired cell; then `value` and `expires_at` are not looked at.
    pub dead: bool,
    /// The value of a live cell.
    pub value: &'a [u8],
    /// The expiry of a live cell; `None` never.
    pub expires_at: Option<&'a E>,
}

impl<'a, E> Weighed<'a, E> {
    /// A tombstone (or an expired cell) written at `timestamp`.
    pub fn dead(timestamp: Micros) -> Self {
        Weighed { timestamp, dead: true, value: &[], expires_at: None }
    }

    /// A live cell.
    pub fn live(timestamp: Micros, value: &'a [u8], expires_at: Option<&'a E>) -> Self {
        Weighed { timestamp, dead: false, value, expires_at }
    }
}

/// [`reconcile`] on borrowed versions: `Ordering::Greater` when `a` wins over `b`. The same
/// rules, for versions whose `dead` flag and kind agree (a tombstone is dead, a live value is
/// not), which is all the embedded store ever compares.
pub(crate) fn reconcile_weighed<E: Ord>(a: &Weighed<'_, E>, b: &Weighed<'_, E>) -> Ordering {
    a.timestamp.cmp(&b.timestamp).then_with(|| match (a.dead, b.dead) {
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (true, true) => Ordering::Equal,
        (false, false) => {
            compare_values(a.value, b.value).then_with(|| match (a.expires_at, b.expires_at) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => Ordering::Greater,
                (Some(_), None) => Ordering::Less,
                (Some(x), Some(y)) => x.cmp(y),
            })
        }
    })
}

/// Byte-wise order of two values; the same value shared by two replicas (one write's
/// allocation) is equal without a look at its bytes.
fn compare_values(a: &[u8], b: &[u8]) -> Ordering {
    if std::ptr::eq(a, b) {
        Ordering::Equal
    } else {
        a.cmp(b)
    }
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

    /// [`CellStore::read`] into `out`, replacing what it held: the same request, for a caller
    /// that reads one row again and again (a waiter polling) and keeps one buffer for it. A
    /// store that can fills the cells already there in place, so a poll allocates nothing
    /// once the buffer has grown to the row; the default just replaces `out`. On an error
    /// `out` holds no meaningful cells.
    async fn read_into(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        consistency: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        *out = self.read(table, row, slice, consistency).await?;
        Ok(())
    }

    /// [`CellStore::read`] answered as a shared, immutable snapshot: the same request, for a
    /// caller that only looks at the cells (a waiter polling a row). A store that can hands
    /// out one snapshot to every reader of an unchanged row, so a poll copies no cell, and
    /// two reads that return the same allocation ([`Arc::ptr_eq`]) returned the same cells;
    /// the default wraps [`CellStore::read`]'s answer.
    ///
    /// [`Arc::ptr_eq`]: std::sync::Arc::ptr_eq
    async fn read_shared(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        consistency: Consistency,
    ) -> Result<std::sync::Arc<[Cell]>, StoreError> {
        Ok(self.read(table, row, slice, consistency).await?.into())
    }

    /// A lightweight transaction on one row (rules 8–12 of the [module docs](self)): one
    /// request, several round trips inside the store. `commit` is the consistency of the
    /// commit phase (QUORUM for the lock algorithms). A store without lightweight
    /// transactions answers [`StoreError::Rejected`].
    async fn cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        let _ = (table, row, request, serial, commit);
        Err(StoreError::Rejected(
            "this store has no lightweight transactions (compare-and-set)".into(),
        ))
    }

    /// Read a row (or a slice) at SERIAL (rule 13): one request. A store without lightweight
    /// transactions answers [`StoreError::Rejected`].
    async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        let _ = (table, row, slice, serial);
        Err(StoreError::Rejected(
            "this store has no lightweight transactions (SERIAL reads)".into(),
        ))
    }

    /// The doorbells this store's clients wake each other with ([`crate::doorbell`]), when it
    /// has any: the embedded store's in-process ones, or the ones a driver client was given.
    /// Not a request: Cassandra itself cannot push.
    fn doorbell(&self) -> Option<std::sync::Arc<dyn crate::doorbell::Doorbell>> {
        None
    }
}

#[async_trait]
impl<S: CellStore + ?Sized> CellStore for std::sync::Arc<S> {
    async fn write(
        &self,
        table: &str,
        row: &str,
        cells: &[CellWrite],
        c: Consistency,
    ) -> Result<(), StoreError> {
        (**self).write(table, row, cells, c).await
    }
    async fn delete(
        &self,
        table: &str,
        row: &str,
        column: &str,
        ts: Micros,
        c: Consistency,
    ) -> Result<(), StoreError> {
        (**self).delete(table, row, column, ts, c).await
    }
    async fn read(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<Vec<Cell>, StoreError> {
        (**self).read(table, row, slice, c).await
    }
    async fn read_into(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
        out: &mut Vec<Cell>,
    ) -> Result<(), StoreError> {
        (**self).read_into(table, row, slice, c, out).await
    }
    async fn read_shared(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        c: Consistency,
    ) -> Result<std::sync::Arc<[Cell]>, StoreError> {
        (**self).read_shared(table, row, slice, c).await
    }
    async fn cas(
        &self,
        table: &str,
        row: &str,
        request: &CasRequest,
        serial: SerialConsistency,
        commit: Consistency,
    ) -> Result<CasResult, StoreError> {
        (**self).cas(table, row, request, serial, commit).await
    }
    async fn read_serial(
        &self,
        table: &str,
        row: &str,
        slice: Slice,
        serial: SerialConsistency,
    ) -> Result<Vec<Cell>, StoreError> {
        (**self).read_serial(table, row, slice, serial).await
    }
    fn doorbell(&self) -> Option<std::sync::Arc<dyn crate::doorbell::Doorbell>> {
        (**self).doorbell()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every pair of a few versions: the borrowed reconciliation agrees with the public one.
    #[test]
    fn reconcile_weighed_agrees_with_reconcile() {
        let values: [&[u8]; 3] = [b"", b"a", b"b"];
        let mut versions: Vec<(Micros, Version<u32>)> = Vec::new();
        for ts in [1, 2] {
            versions.push((ts, Version::Tombstone));
            for v in values {
                for e in [None, Some(5), Some(6)] {
                    versions.push((ts, Version::Live { value: v.to_vec(), expires_at: e }));
                }
            }
        }
        fn weigh((ts, v): &(Micros, Version<u32>)) -> (Weighed<'_, u32>, bool) {
            match v {
                Version::Tombstone => (Weighed::dead(*ts), true),
                Version::Live { value, expires_at } => {
                    (Weighed::live(*ts, value, expires_at.as_ref()), false)
                }
            }
        }
        for a in &versions {
            for b in &versions {
                let ((wa, da), (wb, db)) = (weigh(a), weigh(b));
                assert_eq!(
                    reconcile_weighed(&wa, &wb),
                    reconcile(a.0, &a.1, da, b.0, &b.1, db),
                    "{a:?} against {b:?}"
                );
            }
        }
    }
}
