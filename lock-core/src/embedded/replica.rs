//! One replica: its rows, its fault state (running, lagging, dropping), the mutations it
//! applies and the reads it answers, each at the instant the coordinator's timeline says.

use super::counters::OpKind;
use super::lock;
use super::paxos;
use super::row::{DeadCell, DeadCells, Incoming, LiveCell, LiveSlice, Row};
use crate::store::{Cell, CellWrite, Micros, Slice};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

type Tables = BTreeMap<String, BTreeMap<String, Row>>;

/// What one replica answers to a read that will be merged with other replicas' answers: its
/// live cells up to the limit, and its dead cells as they were at its read instant.
pub(super) struct RawAnswer {
    pub(super) live: LiveSlice,
    pub(super) dead: DeadCells,
    /// The replica stopped at its limit: cells after its last live one are unknown.
    pub(super) truncated: bool,
}

/// How a replica stores and purges: the parts of the config its rows need.
#[derive(Clone, Copy)]
pub(super) struct RowPolicy {
    pub(super) grace: Duration,
    pub(super) compaction_interval: Duration,
}

pub(super) struct Replica {
    pub(super) running: AtomicBool,
    /// Extra delay of every mutation, in nanoseconds ([`EmbeddedStore::lag_replica`]).
    pub(super) lag_nanos: AtomicU64,
    /// Mutations dropped, per million.
    pub(super) drop_ppm: AtomicU32,
    pub(super) tables: Mutex<Tables>,
    /// The Paxos state of every row a lightweight transaction touched (Cassandra's
    /// `system.paxos`): promised ballot, accepted proposal, most recent commit.
    pub(super) paxos: Mutex<BTreeMap<(String, String), paxos::PaxosState>>,
}

impl Replica {
    pub(super) fn new() -> Self {
        Replica {
            running: AtomicBool::new(true),
            lag_nanos: AtomicU64::new(0),
            drop_ppm: AtomicU32::new(0),
            tables: Mutex::new(BTreeMap::new()),
            paxos: Mutex::new(BTreeMap::new()),
        }
    }

    /// The extra delay of a mutation sent to this replica now.
    pub(super) fn lag(&self) -> Duration {
        Duration::from_nanos(self.lag_nanos.load(Ordering::Acquire))
    }

    pub(super) fn is_lagging(&self) -> bool {
        self.lag_nanos.load(Ordering::Acquire) > 0 || self.drop_ppm.load(Ordering::Acquire) > 0
    }

    pub(super) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// Applies a mutation at `now`; false when the replica is stopped (no acknowledgement).
    pub(super) fn apply(
        &self,
        table: &str,
        row: &str,
        m: Mutation<'_>,
        now: Instant,
        policy: RowPolicy,
    ) -> bool {
        if !self.is_running() {
            return false;
        }
        let mut tables = lock(&self.tables);
        // Look up before inserting so that the common case allocates no key strings.
        if !tables.contains_key(table) {
            tables.insert(table.to_owned(), BTreeMap::new());
        }
        let Some(rows) = tables.get_mut(table) else { return true };
        if !rows.contains_key(row) {
            rows.insert(row.to_owned(), Row::new(now, policy.compaction_interval));
        }
        let Some(cells) = rows.get_mut(row) else { return true };
        cells.advance(now, policy.grace, policy.compaction_interval);
        match m {
            Mutation::Write(writes) => {
                for w in writes {
                    let expires_at = w.ttl.and_then(|ttl| now.checked_add(ttl));
                    let value = Arc::clone(&w.value);
                    let cell = LiveCell { timestamp: w.timestamp, value, expires_at };
                    cells.merge(&w.column, Incoming::Live(cell), now);
                }
            }
            Mutation::Delete { column, timestamp } => {
                cells.merge(column, Incoming::Dead(DeadCell { timestamp, dead_at: now }), now);
            }
        }
        true
    }

    /// Brings the row to `now` (expiries, a due compaction) and hands it to `read`; `None` when
    /// the replica is stopped (no answer). A row emptied by compaction is dropped.
    fn with_row<T>(
        &self,
        table: &str,
        row: &str,
        now: Instant,
        policy: RowPolicy,
        read: impl FnOnce(Option<&Row>) -> T,
    ) -> Option<T> {
        if !self.is_running() {
            return None;
        }
        let mut tables = lock(&self.tables);
        let Some(cells) = tables.get_mut(table).and_then(|rows| rows.get_mut(row)) else {
            return Some(read(None));
        };
        cells.advance(now, policy.grace, policy.compaction_interval);
        if cells.is_empty() {
            if let Some(rows) = tables.get_mut(table) {
                rows.remove(row);
                if rows.is_empty() {
                    tables.remove(table);
                }
            }
            return Some(read(None));
        }
        Some(read(Some(cells)))
    }

    /// The live cells of a slice as a snapshot, and the tombstones scanned: what a lone
    /// replica answers. Nothing is copied until the coordinator builds its answer.
    pub(super) fn read_live(
        &self,
        table: &str,
        row: &str,
        slice: &Slice,
        now: Instant,
        policy: RowPolicy,
    ) -> Option<(LiveSlice, u64)> {
        let limit = slice.limit.unwrap_or(usize::MAX);
        self.with_row(table, row, now, policy, |r| {
            let Some(r) = r else { return (LiveSlice::default(), 0) };
            let scan = r.scan(slice.start.as_deref(), limit);
            (scan.live, scan.tombstones)
        })
    }

    /// The live cells from `start` up to `limit` with a snapshot of the dead cells, for a
    /// merging coordinator, and the tombstones scanned.
    pub(super) fn read_raw(
        &self,
        table: &str,
        row: &str,
        start: Option<&str>,
        limit: Option<usize>,
        now: Instant,
        policy: RowPolicy,
    ) -> Option<(RawAnswer, u64)> {
        let limit = limit.unwrap_or(usize::MAX);
        self.with_row(table, row, now, policy, |r| {
            let Some(r) = r else {
                return (
                    RawAnswer {
                        live: LiveSlice::default(),
                        dead: DeadCells::default(),
                        truncated: false,
                    },
                    0,
                );
            };
            let scan = r.scan(start, limit);
            (
                RawAnswer { live: scan.live, dead: r.dead.clone(), truncated: scan.truncated },
                scan.tombstones,
            )
        })
    }

    /// The live cells of a whole row, bypassing the request path.
    pub(super) fn snapshot(
        &self,
        table: &str,
        row: &str,
        now: Instant,
        policy: RowPolicy,
    ) -> Vec<Cell> {
        self.with_row(table, row, now, policy, |r| {
            r.map(|r| {
                r.live
                    .iter()
                    .map(|(k, c)| Cell {
                        column: String::from(&**k),
                        value: c.value.to_vec(),
                        timestamp: c.timestamp,
                    })
                    .collect()
            })
            .unwrap_or_default()
        })
        .unwrap_or_default()
    }

    /// The number of dead cells of a row (tombstones and expired cells not yet compacted
    /// away), bypassing the request path.
    pub(super) fn tombstones(
        &self,
        table: &str,
        row: &str,
        now: Instant,
        policy: RowPolicy,
    ) -> usize {
        self.with_row(table, row, now, policy, |r| r.map_or(0, |r| r.dead.len())).unwrap_or(0)
    }
}

/// One cell of a write as the replicas receive it: its column and value are made once per
/// request and shared by every replica's copy. Replicas' rows then hold the same
/// allocations, and a coordinator merging their answers tells equal columns and values
/// apart by address before it compares bytes.
#[derive(Clone)]
pub(super) struct SharedWrite {
    pub(super) column: Arc<str>,
    pub(super) value: Arc<[u8]>,
    pub(super) timestamp: Micros,
    pub(super) ttl: Option<Duration>,
}

impl SharedWrite {
    /// The cells of one write request.
    pub(super) fn batch(cells: &[CellWrite]) -> Vec<SharedWrite> {
        cells
            .iter()
            .map(|c| SharedWrite {
                column: Arc::from(c.column.as_str()),
                value: Arc::from(c.value.as_slice()),
                timestamp: c.timestamp,
                ttl: c.ttl,
            })
            .collect()
    }
}

#[derive(Clone, Copy)]
pub(super) enum Mutation<'a> {
    Write(&'a [SharedWrite]),
    Delete { column: &'a Arc<str>, timestamp: Micros },
}

pub(super) enum OwnedMutation {
    Write(Vec<SharedWrite>),
    Delete { column: Arc<str>, timestamp: Micros },
}

impl Mutation<'_> {
    pub(super) fn kind(&self) -> OpKind {
        match self {
            Mutation::Write(_) => OpKind::Write,
            Mutation::Delete { .. } => OpKind::Delete,
        }
    }

    pub(super) fn to_owned_mutation(self) -> OwnedMutation {
        match self {
            Mutation::Write(cells) => OwnedMutation::Write(cells.to_vec()),
            Mutation::Delete { column, timestamp } => {
                OwnedMutation::Delete { column: Arc::clone(column), timestamp }
            }
        }
    }
}

impl OwnedMutation {
    pub(super) fn as_mutation(&self) -> Mutation<'_> {
        match self {
            OwnedMutation::Write(cells) => Mutation::Write(cells),
            OwnedMutation::Delete { column, timestamp } => {
                Mutation::Delete { column, timestamp: *timestamp }
            }
        }
    }
}
