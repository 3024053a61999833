//! What the embedded store counts: requests per table and per client, and the tombstones its
//! reads scanned, with their histogram.

use std::collections::BTreeMap;

/// Requests of one kind, counted per client request (not per replica message).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct OpCounts {
    /// Read requests.
    pub reads: u64,
    /// Write requests (one per call, however many cells it carries).
    pub writes: u64,
    /// Delete requests.
    pub deletes: u64,
    /// Lightweight transactions ([`CellStore::cas`](crate::store::CellStore::cas)).
    #[serde(skip_serializing_if = "is_zero")]
    pub cas: u64,
    /// SERIAL reads ([`CellStore::read_serial`](crate::store::CellStore::read_serial)).
    #[serde(skip_serializing_if = "is_zero")]
    pub serial_reads: u64,
    /// Coordinator-to-replicas round trips spent inside lightweight transactions and SERIAL
    /// reads (every Paxos phase and read, retries after contention included); counted only by
    /// a store that sees them (the embedded one).
    #[serde(skip_serializing_if = "is_zero")]
    pub paxos_round_trips: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl OpCounts {
    /// Plain reads, writes and deletes only.
    pub fn new(reads: u64, writes: u64, deletes: u64) -> Self {
        OpCounts { reads, writes, deletes, ..OpCounts::default() }
    }

    /// All requests.
    pub fn total(&self) -> u64 {
        self.reads + self.writes + self.deletes + self.cas + self.serial_reads
    }

    /// Round trips between coordinator and replicas: one per plain request, and those
    /// counted inside lightweight transactions. The same as [`OpCounts::total`] for the
    /// algorithms without lightweight transactions.
    pub fn round_trips(&self) -> u64 {
        self.reads + self.writes + self.deletes + self.paxos_round_trips
    }

    /// The requests counted here that `base`, an earlier reading of the same counter, had
    /// not: what was sent between the two readings.
    pub fn since(&self, base: &OpCounts) -> OpCounts {
        OpCounts {
            reads: self.reads - base.reads,
            writes: self.writes - base.writes,
            deletes: self.deletes - base.deletes,
            cas: self.cas - base.cas,
            serial_reads: self.serial_reads - base.serial_reads,
            paxos_round_trips: self.paxos_round_trips - base.paxos_round_trips,
        }
    }

    pub(super) fn bump(&mut self, kind: OpKind) {
        match kind {
            OpKind::Read => self.reads += 1,
            OpKind::Write => self.writes += 1,
            OpKind::Delete => self.deletes += 1,
            OpKind::Cas => self.cas += 1,
            OpKind::SerialRead => self.serial_reads += 1,
        }
    }

    fn add(&mut self, other: &OpCounts) {
        self.reads += other.reads;
        self.writes += other.writes;
        self.deletes += other.deletes;
        self.cas += other.cas;
        self.serial_reads += other.serial_reads;
        self.paxos_round_trips += other.paxos_round_trips;
    }
}

/// A snapshot of the request counters since the store was created or last reset. Failed
/// requests count too: they loaded the store (or the network) all the same.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct StoreCounters {
    /// Requests per table.
    pub per_table: BTreeMap<String, OpCounts>,
    /// Requests per client id (the store's own [`CellStore`] impl is client `""`); clients
    /// without requests are left out.
    ///
    /// [`CellStore`]: crate::store::CellStore
    pub per_client: BTreeMap<String, OpCounts>,
    /// Tombstones scanned by reads, per table (tables whose reads were counted; empty for a
    /// store that does not know, such as a real cluster seen from the client).
    pub tombstones: BTreeMap<String, TombstoneStats>,
}

impl StoreCounters {
    /// All requests.
    pub fn total(&self) -> OpCounts {
        let mut sum = OpCounts::default();
        for c in self.per_table.values() {
            sum.add(c);
        }
        sum
    }
}

/// Tombstones scanned by the reads of one table.
///
/// "Per read" is the largest count among the replicas that answered the read, over all its
/// rounds (a short read's second round included): each replica scans its own copy, and the
/// slowest scan decides both the answer time and, past the thresholds, the warning and the
/// failure, as on a Cassandra coordinator. Reads that ended before every replica answered (a
/// timeout, an unavailable error) are not counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TombstoneStats {
    /// Reads counted.
    pub reads: u64,
    /// Tombstones scanned, summed over the counted reads.
    pub scanned: u64,
    /// The most tombstones one read scanned.
    pub max: u64,
    /// Reads that scanned more than the warning threshold.
    pub warned: u64,
    /// Reads that failed with [`StoreError::TombstoneOverwhelming`].
    ///
    /// [`StoreError::TombstoneOverwhelming`]: crate::store::StoreError::TombstoneOverwhelming
    pub failed: u64,
    /// Reads per tombstone count, in log-linear buckets: see [`TombstoneHistogram`].
    pub histogram: TombstoneHistogram,
}

impl TombstoneStats {
    /// The `q`-quantile (0 to 1) of tombstones scanned per read, within the histogram's
    /// precision; 0 without reads.
    pub fn quantile(&self, q: f64) -> u64 {
        self.histogram.quantile(q).min(self.max)
    }

    /// Adds `other`'s reads (e.g. of another table) to these.
    pub fn merge(&mut self, other: &TombstoneStats) {
        self.reads += other.reads;
        self.scanned += other.scanned;
        self.max = self.max.max(other.max);
        self.warned += other.warned;
        self.failed += other.failed;
        self.histogram.merge(&other.histogram);
    }

    /// The median of tombstones scanned per read.
    pub fn p50(&self) -> u64 {
        self.quantile(0.5)
    }

    /// The mean of tombstones scanned per read; 0 without reads.
    pub fn mean(&self) -> f64 {
        if self.reads == 0 {
            0.0
        } else {
            self.scanned as f64 / self.reads as f64
        }
    }

    pub(super) fn record(&mut self, scanned: u64, warn: u64, failed: bool) {
        self.reads += 1;
        self.scanned += scanned;
        self.max = self.max.max(scanned);
        self.warned += u64::from(scanned > warn);
        self.failed += u64::from(failed);
        self.histogram.record(scanned);
    }
}

/// A histogram of counts in log-linear buckets: the counts below 32 exactly, above that 32
/// buckets per power of two (so a bucket's bounds differ by less than 3.2%). Serialized as
/// `[lowest value of the bucket, reads]` pairs of the non-empty buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct TombstoneHistogram {
    buckets: BTreeMap<u64, u64>,
}

impl TombstoneHistogram {
    const SUB_BUCKET_BITS: u32 = 5;

    /// The lowest and the highest value of the bucket of `v`.
    pub fn bucket(v: u64) -> (u64, u64) {
        let exponent = 63 - v.max(1).leading_zeros();
        if exponent < Self::SUB_BUCKET_BITS {
            return (v, v);
        }
        let shift = exponent - Self::SUB_BUCKET_BITS;
        let low = (v >> shift) << shift;
        (low, low + ((1u64 << shift) - 1))
    }

    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        *self.buckets.entry(Self::bucket(v).0).or_default() += 1;
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &TombstoneHistogram) {
        for (low, n) in other.buckets() {
            *self.buckets.entry(low).or_default() += n;
        }
    }

    /// The non-empty buckets: (lowest value, count), in order.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.buckets.iter().map(|(k, v)| (*k, *v))
    }

    /// The highest value of the bucket holding the `q`-quantile; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        let total: u64 = self.buckets.values().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (&low, &n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return Self::bucket(low).1;
            }
        }
        self.buckets.keys().next_back().map_or(0, |&low| Self::bucket(low).1)
    }
}

#[derive(Clone, Copy)]
pub(super) enum OpKind {
    Read,
    Write,
    Delete,
    Cas,
    SerialRead,
}
