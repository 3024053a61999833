//! How an embedded store behaves: its configuration and the latency model of a round trip.

use super::PaxosVariant;
use super::RowPolicy;
use rand::rngs::StdRng;
use rand::RngExt;
use std::time::Duration;

/// The round trip between a coordinator and one replica: `fixed` plus a uniform sample from
/// `[0, jitter]`, drawn independently for every replica of every request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LatencyModel {
    /// The part every round trip takes.
    pub fixed: Duration,
    /// The upper bound of the uniformly distributed extra part.
    pub jitter: Duration,
}

impl LatencyModel {
    /// No latency: requests are served inline.
    pub const ZERO: LatencyModel = LatencyModel { fixed: Duration::ZERO, jitter: Duration::ZERO };

    /// A round trip of `fixed` plus up to `jitter`.
    pub const fn new(fixed: Duration, jitter: Duration) -> Self {
        LatencyModel { fixed, jitter }
    }

    /// True when every round trip takes no time.
    pub fn is_zero(&self) -> bool {
        self.fixed.is_zero() && self.jitter.is_zero()
    }

    pub(super) fn sample(&self, rng: &mut StdRng) -> Duration {
        // Without jitter no number is drawn, so adding replicas with a fixed latency does not
        // shift the RNG stream that chooses replicas for reads.
        if self.jitter.is_zero() {
            return self.fixed;
        }
        let max = u64::try_from(self.jitter.as_nanos()).unwrap_or(u64::MAX);
        self.fixed.saturating_add(Duration::from_nanos(rng.random_range(0..=max)))
    }
}

/// How an [`EmbeddedStore`](super::EmbeddedStore) behaves. Missing fields take their defaults
/// when deserialized.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EmbeddedConfig {
    /// Number of replicas (at least one; zero is treated as one). Default 1.
    pub replicas: usize,
    /// Round trip to one replica. Default: zero.
    pub latency: LatencyModel,
    /// Seed of the store's RNG (latency jitter, the replicas a read goes to). Default 0.
    pub seed: u64,
    /// How long a coordinator waits for enough answers before a timeout error; also how long
    /// an isolated client waits before it learns the store is unreachable. Default 2 s.
    pub request_timeout: Duration,
    /// How long a tombstone or an expired cell must have been dead before a compaction may
    /// purge it (Cassandra's `gc_grace_seconds`). Default 10 days.
    pub gc_grace: Duration,
    /// How often each replica compacts a row: a row is compacted at its first access at least
    /// this long after its previous compaction (or its creation), purging the cells dead for at
    /// least [`EmbeddedConfig::gc_grace`]. `None` (the default): `gc_grace` itself, so a dead
    /// cell goes between one and two `gc_grace` after its death.
    pub compaction_interval: Option<Duration>,
    /// What one replica takes to step over one tombstone while reading: added, times the
    /// tombstones it scanned, to that replica's answer time. Default
    /// [`EmbeddedConfig::DEFAULT_TOMBSTONE_SCAN_COST`].
    pub tombstone_scan_cost: Duration,
    /// A read that scans more tombstones than this on a replica counts as a warning (Cassandra
    /// logs one). Default 1,000.
    pub tombstone_warn_threshold: u64,
    /// A read that would scan more tombstones than this on a replica is aborted there and fails
    /// with [`StoreError::TombstoneOverwhelming`]. Default 100,000.
    ///
    /// [`StoreError::TombstoneOverwhelming`]: crate::store::StoreError::TombstoneOverwhelming
    pub tombstone_failure_threshold: u64,
    /// Which Paxos runs the lightweight transactions ([`CellStore::cas`]): Cassandra 4.0's
    /// (v1, the default: 4 round trips per applied CAS) or 4.1's (v2: 2). See [`PaxosVariant`].
    ///
    /// [`CellStore::cas`]: crate::store::CellStore::cas
    pub paxos: PaxosVariant,
    /// How long a lightweight transaction may go on losing rounds to other proposers before it
    /// fails with [`StoreError::CasTimeout`] (Cassandra's `cas_contention_timeout`). Default 1 s.
    ///
    /// [`StoreError::CasTimeout`]: crate::store::StoreError::CasTimeout
    pub cas_contention_timeout: Duration,
    /// The upper bound of the uniformly random sleep of a lightweight transaction after it
    /// lost a round to another proposer (Cassandra: 100 ms). Default 100 ms.
    pub cas_contention_backoff: Duration,
    /// Whether each row's older dead cells are written to a temporary file and dropped from
    /// memory, as Cassandra keeps tombstones in SSTables: a store's memory then stays flat
    /// however long its tombstones live, and only a read or a write that reaches an old
    /// tombstone reads it back. What the store answers is the same either way. Default true.
    pub dead_cells_on_disk: bool,
}

impl EmbeddedConfig {
    /// Default [`EmbeddedConfig::request_timeout`]: Cassandra's write timeout.
    pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
    /// Default [`EmbeddedConfig::gc_grace`]: Cassandra's `gc_grace_seconds` of 10 days.
    pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(10 * 24 * 3600);
    /// Default [`EmbeddedConfig::tombstone_scan_cost`], calibrated against a Cassandra 4.0
    /// node (see the module docs).
    pub const DEFAULT_TOMBSTONE_SCAN_COST: Duration = Duration::from_nanos(1_200);
    /// Default [`EmbeddedConfig::tombstone_warn_threshold`]: Cassandra's.
    pub const DEFAULT_TOMBSTONE_WARN_THRESHOLD: u64 = 1_000;
    /// Default [`EmbeddedConfig::tombstone_failure_threshold`]: Cassandra's.
    pub const DEFAULT_TOMBSTONE_FAILURE_THRESHOLD: u64 = 100_000;
    /// Default [`EmbeddedConfig::cas_contention_timeout`]: Cassandra's `cas_contention_timeout`.
    pub const DEFAULT_CAS_CONTENTION_TIMEOUT: Duration = Duration::from_secs(1);
    /// Default [`EmbeddedConfig::cas_contention_backoff`]: Cassandra's 0–100 ms.
    pub const DEFAULT_CAS_CONTENTION_BACKOFF: Duration = Duration::from_millis(100);

    /// The effective compaction interval: [`EmbeddedConfig::compaction_interval`] or
    /// [`EmbeddedConfig::gc_grace`].
    pub fn effective_compaction_interval(&self) -> Duration {
        self.compaction_interval.unwrap_or(self.gc_grace)
    }

    pub(super) fn row_policy(&self) -> RowPolicy {
        RowPolicy {
            grace: self.gc_grace,
            compaction_interval: self.effective_compaction_interval(),
        }
    }

    /// What a replica that scanned `tombstones` adds to its answer time.
    pub(super) fn scan_delay(&self, tombstones: u64) -> Duration {
        self.tombstone_scan_cost.saturating_mul(u32::try_from(tombstones).unwrap_or(u32::MAX))
    }
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            replicas: 1,
            latency: LatencyModel::ZERO,
            seed: 0,
            request_timeout: Self::DEFAULT_REQUEST_TIMEOUT,
            gc_grace: Self::DEFAULT_GC_GRACE,
            compaction_interval: None,
            tombstone_scan_cost: Self::DEFAULT_TOMBSTONE_SCAN_COST,
            tombstone_warn_threshold: Self::DEFAULT_TOMBSTONE_WARN_THRESHOLD,
            tombstone_failure_threshold: Self::DEFAULT_TOMBSTONE_FAILURE_THRESHOLD,
            paxos: PaxosVariant::default(),
            cas_contention_timeout: Self::DEFAULT_CAS_CONTENTION_TIMEOUT,
            cas_contention_backoff: Self::DEFAULT_CAS_CONTENTION_BACKOFF,
            dead_cells_on_disk: true,
        }
    }
}
